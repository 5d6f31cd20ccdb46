"""The C++ extension smla._C: the private launch op, the op's schema and
fake shapes, the kernel directory, and the kernel lookups the head count
plan and smla.info build on.

The whole module is skipped when smla._C cannot be loaded (an installed
package builds it on first use; in a source tree, `cmake -S python -B
build-py`, see python/USAGE.md). The argument rules are test_validation.py's
(they need no extension). The kernel directory rules (smla.config.kernel_dir,
bounded reading) and the kernel lookups run on the CPU, on hand-written
manifests. Launch tests need a GPU, and the ones that run kernels also need
a kernel library.
"""

import hashlib
import json
import os
import subprocess
import sys

import pytest
import torch

import smla
from smla import _compiled, _library
from smla.checks import Dims

try:
    ext = _compiled.load()
except RuntimeError as exc:  # noqa: F841
    pytest.skip(f"the extension smla._C is unavailable ({exc})", allow_module_level=True)

HAS_CUDA = torch.cuda.is_available()
needs_cuda = pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA device")
OP = torch.ops.smla.sparse_mla_bwd
CTX = "smla.sparse_mla_bwd: "


def kernels_present():
    return os.path.isfile(os.path.join(ext.kernel_directory(), "manifest.json"))


def make_args(device="cpu", T=4, H=4, G=2, S=8, K=3, D=8, Dt=4, positions=False,
              delta=False, sink=False, lengths=False):
    """A valid argument list (schema order) for a small problem."""
    bf16 = dict(dtype=torch.bfloat16, device=device)
    gen = torch.Generator().manual_seed(0)
    idx = torch.randint(0, max(S, 1), (T, G, K), generator=gen, dtype=torch.int32)
    return [
        torch.randn(T, H, D + Dt, generator=gen).to(**bf16),
        torch.randn(S, G, D + Dt, generator=gen).to(**bf16),
        torch.randn(T, H, D, generator=gen).to(**bf16),
        torch.randn(T, H, D, generator=gen).to(**bf16),
        idx.to(device),
        torch.randn(T, H, generator=gen).to(device) + 10.0,
        (D + Dt) ** -0.5,
        False,
        torch.arange(T, dtype=torch.int32, device=device) + S if positions else None,
        torch.randn(T, H, generator=gen).to(device) if delta else None,
        torch.bfloat16,
        torch.float32,
        torch.randn(H, generator=gen).to(device) if sink else None,
        torch.randint(0, K + 1, (T,), generator=gen, dtype=torch.int32).to(device)
        if lengths else None,
    ]


ARG = {name: i for i, name in enumerate(
    ["q", "kv", "o", "do", "indices", "lse", "sm_scale", "lse_base_e", "q_positions",
     "delta", "dq_dtype", "dkv_dtype", "attn_sink", "topk_length"])}


def launch_args(args):
    """The private launch op's arguments for the public op's `args`: no
    lse_base_e (it takes a base-2 lse) and no sink (the public op turns it
    into d_sink and a delta)."""
    return [a for name, a in zip(ARG, args) if name not in ("lse_base_e", "attn_sink")]


def with_arg(args, name, value):
    args = list(args)
    args[ARG[name]] = value
    return args


def test_op_and_schema_registered():
    assert str(OP.default._schema) == "smla::" + _compiled.OP_SCHEMA
    assert str(torch.ops.smla._launch_bwd.default._schema) == (
        "smla::_launch_bwd(Tensor q, Tensor kv, Tensor o, Tensor do, Tensor indices, "
        "Tensor lse, float sm_scale, Tensor? q_positions, Tensor? delta, ScalarType dq_dtype, "
        "ScalarType dkv_dtype, Tensor? topk_length) -> (Tensor dq, Tensor dkv, "
        "Tensor counters)")
    assert str(torch.ops.smla._delta.default._schema) == (
        "smla::_delta(Tensor o, Tensor do, int dt, int groups, bool positions, "
        "ScalarType dq_dtype, ScalarType dkv_dtype) -> Tensor")


def test_launch_op_is_cuda_only():
    """The private launch op has a CUDA kernel only: the public op answers
    every other device (test_validation.py)."""
    args = make_args("cpu", lengths=True)
    with pytest.raises(NotImplementedError, match="'smla::_launch_bwd' with arguments from the "
                       "'CPU' backend"):
        torch.ops.smla._launch_bwd(*launch_args(args))
    with pytest.raises(NotImplementedError, match="'smla::_delta' with arguments from the "
                       "'CPU' backend"):
        torch.ops.smla._delta(args[2], args[3], 4, 2, False, torch.bfloat16, torch.float32)


def test_kernel_directory(monkeypatch, tmp_path):
    """smla.config.kernel_dir is handed to smla._C when it changes; a
    relative directory is taken relative to the working directory at the
    time the setting is made (not at each call)."""
    smla.configure(kernel_dir="/some/kernels")
    assert ext.kernel_directory() == "/some/kernels"
    monkeypatch.chdir(tmp_path)
    smla.configure(kernel_dir="lib")
    assert ext.kernel_directory() == str(tmp_path / "lib")
    (tmp_path / "sub").mkdir()
    monkeypatch.chdir(tmp_path / "sub")
    assert ext.kernel_directory() == str(tmp_path / "lib")
    monkeypatch.setenv("SMLA_KERNEL_DIR", "lib")
    smla.reload_config()
    assert ext.kernel_directory() == str(tmp_path / "sub" / "lib")
    smla.configure(kernel_dir=None)
    assert ext.kernel_directory() == _compiled.PACKAGE_KERNELS


def run_fresh(code, kernel_dir):
    """stdout of `code` in a new process (the kernel library is opened once
    per process) with SMLA_KERNEL_DIR=kernel_dir and this process's sys.path."""
    env = dict(os.environ, SMLA_KERNEL_DIR=str(kernel_dir),
               PYTHONPATH=os.pathsep.join([os.path.dirname(__file__)]
                                          + [p for p in sys.path if p]))
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, check=True).stdout


def write_kernel_dir(path, cubin=b"not really a cubin", digest=None, cubin_name="k.cubin",
                     kernels=None):
    """A one-kernel manifest (a "delta" kernel in k.cubin), or `kernels`
    (manifest entries without cubin and sha256) sharing that cubin."""
    path.mkdir(parents=True, exist_ok=True)
    if cubin is not None:
        (path / "k.cubin").write_bytes(cubin)
    kernels = kernels or [dict(
        name="smla_delta_test", kind="delta", entry="smla_delta", config={"d": 512},
        params=[{"name": "o", "type": "ptr"}, {"name": "T", "type": "i32"}])]
    for kernel in kernels:
        kernel.update(cubin=cubin_name, sha256=digest or hashlib.sha256(cubin or b"").hexdigest(),
                      launch={"block": [128, 1, 1], "grid": ["T", "1", "1"],
                              "dynamic_smem": 0})
    (path / "manifest.json").write_text(json.dumps(
        {"format": "smla-manifest", "version": 1, "target": "sm_90a", "kernels": kernels}))


LIST_KERNELS = """
import smla
from smla import _compiled, _library
from smla.checks import Dims
try:
    print(_compiled.load().kernels())
except RuntimeError as e:
    print("RuntimeError:", e)
"""


def test_kernels_from_env_directory(tmp_path):
    write_kernel_dir(tmp_path)
    out = run_fresh(LIST_KERNELS, tmp_path)
    assert "'name': 'smla_delta_test', 'kind': 'delta', 'config': 'd=512', " \
        f"'directory': '{tmp_path}', 'target': 'sm_90a'" in out


def test_missing_kernel_directory_error(tmp_path):
    out = run_fresh(LIST_KERNELS, tmp_path / "absent")
    assert out.startswith("RuntimeError: smla: cannot open the kernel directory")
    assert f"kernel directory '{tmp_path / 'absent'}', set by smla.config.kernel_dir " \
        "(SMLA_KERNEL_DIR)" in out


def test_changing_kernel_directory_takes_effect(tmp_path):
    """SMLA_KERNEL_DIR is read at import; a change of the setting after the
    first library was opened (smla.configure, or the variable and
    smla.reload_config) selects the new directory (an error naming it if
    it cannot be opened), and changing back finds the first one again."""
    write_kernel_dir(tmp_path / "a")
    code = LIST_KERNELS + """
import os, smla
first = smla.config.kernel_dir
smla.configure(kernel_dir=first + "/../missing")
try:
    _compiled.load().kernels()
except RuntimeError as e:
    print("then:", str(e).splitlines()[0])
print("dir:", _compiled.load().kernel_directory())
os.environ["SMLA_KERNEL_DIR"] = first
smla.reload_config()
print("back:", len(_compiled.load().kernels()))
"""
    out = run_fresh(code, tmp_path / "a")
    assert "'name': 'smla_delta_test'" in out
    assert f"then: smla: cannot open the kernel directory '{tmp_path}/missing': " \
        "No such file or directory" in out
    assert f"dir: {tmp_path}/missing" in out
    assert "back: 1" in out


def test_is_available_needs_a_kernel_library(tmp_path):
    """An extension without a kernel library is not available (it would
    fail at the first backward), and says why."""
    code = """
import smla
from smla import _compiled, _library
from smla.checks import Dims
print(_compiled.is_available(-1), _compiled.unavailable_reason(-1))
"""
    out = run_fresh(code, tmp_path)
    assert out.startswith("False smla: cannot read manifest")
    write_kernel_dir(tmp_path)
    assert run_fresh(code, tmp_path).startswith("True None")


@pytest.mark.parametrize("make,message", [
    ("symlink_out", "a symbolic link (not followed)"),
    ("dev_zero", "a symbolic link (not followed)"),
    ("fifo", "not a regular file"),
    ("subdir", "key 'cubin': expected a file name in the manifest's directory"),
    ("nul", "key 'cubin': expected a file name in the manifest's directory"),
])
def test_kernel_directory_reads_are_bounded(tmp_path, make, message):
    """Only regular files directly in the directory are read: a cubin that
    is a symbolic link (out of the directory, or to /dev/zero) or a FIFO is
    refused without reading or waiting, and a manifest naming a path or a
    name with a NUL byte is refused."""
    lib = tmp_path / "lib"
    lib.mkdir()
    outside = tmp_path / "outside.cubin"
    outside.write_bytes(b"x")
    name = "k.cubin"
    if make == "symlink_out":
        os.symlink(outside, lib / name)
    elif make == "dev_zero":
        os.symlink("/dev/zero", lib / name)
    elif make == "fifo":
        os.mkfifo(lib / name)
    elif make == "subdir":
        name = "../outside.cubin"
    else:
        name = "k.cubin\0.txt"
    write_kernel_dir(lib, cubin=None, digest=hashlib.sha256(b"x").hexdigest(), cubin_name=name)
    out = run_fresh(LIST_KERNELS, lib)
    assert out.startswith("RuntimeError: smla: ") and message in out, out


def test_bad_cubin_digest_error(tmp_path):
    write_kernel_dir(tmp_path, digest="0" * 64)
    out = run_fresh(LIST_KERNELS, tmp_path)
    assert out.startswith("RuntimeError: smla: ") and "smla_delta_test" in out
    assert str(tmp_path) in out


@pytest.mark.parametrize("dq_dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("dkv_dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("extras", [False, True])
def test_meta_shapes(dq_dtype, dkv_dtype, extras):
    args = make_args("meta", T=5, H=8, G=2, S=11, K=7, D=16, Dt=8, positions=extras,
                     delta=extras, sink=extras, lengths=extras)
    args[ARG["dq_dtype"]], args[ARG["dkv_dtype"]] = dq_dtype, dkv_dtype
    dq, dkv, counters, d_sink = OP(*args)
    assert (dq.shape, dq.dtype, dq.device.type) == ((5, 8, 24), dq_dtype, "meta")
    assert (dkv.shape, dkv.dtype) == ((11, 2, 24), dkv_dtype)
    assert (counters.shape, counters.dtype) == ((4,), torch.int64)
    assert (d_sink.shape, d_sink.dtype) == (((8,) if extras else (0,)), torch.float32)


def test_fake_tensor_mode_keeps_device():
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode() as mode:
        args = [mode.from_tensor(a) if isinstance(a, torch.Tensor) else a
                for a in make_args("cpu", sink=True, lengths=True)]
        dq, dkv, counters, d_sink = OP(*args)
    assert (d_sink.shape, d_sink.device.type) == ((4,), "cpu")
    assert (dq.shape, dq.device.type) == ((4, 4, 12), "cpu")
    assert (dkv.shape, dkv.dtype) == ((8, 2, 12), torch.float32)


def test_symbolic_trace():
    from torch.fx.experimental.proxy_tensor import make_fx

    def f(q, kv, o, dout, indices, lse):
        return OP(q, kv, o, dout, indices, lse, 0.1, True, None, None, torch.float32,
                  torch.bfloat16)

    gm = make_fx(f, tracing_mode="symbolic")(*make_args("cpu")[:6])
    assert "smla.sparse_mla_bwd" in gm.code


def test_cpu_call_needs_cuda():
    with pytest.raises(ValueError, match=CTX + r"argument 'q' must be a CUDA tensor \(the "
                       r"compiled kernels run on CUDA devices; mode='reference' runs on any\), "
                       "got device cpu"):
        OP(*make_args("cpu", positions=True, delta=True))


@needs_cuda
@pytest.mark.parametrize("name", ["kv", "lse", "q_positions", "delta", "attn_sink",
                                  "topk_length"])
def test_device_mismatch_message_cuda(name):
    args = make_args("cuda", positions=True, delta=True, sink=True, lengths=True)
    args = with_arg(args, name, args[ARG[name]].cpu())
    with pytest.raises(ValueError, match=CTX + f"argument '{name}' must be on the "
                       r"device of 'q' \(cuda:0\), got cpu"):
        OP(*args)


@needs_cuda
@pytest.mark.parametrize("dkv_dtype", [torch.bfloat16, torch.float32])
def test_no_tokens_returns_empty_gradients_without_kernels(monkeypatch, dkv_dtype):
    smla.configure(kernel_dir="/nonexistent/smla-kernels")
    args = with_arg(make_args("cuda", T=0, sink=True, lengths=True), "dkv_dtype", dkv_dtype)
    dq, dkv, cnt, d_sink = OP(*args)
    assert dq.shape == args[0].shape and dq.dtype == torch.bfloat16
    assert dkv.shape == args[1].shape and dkv.dtype == dkv_dtype and not dkv.any()
    assert cnt.tolist() == [0, 0, 0, 0] and cnt.device == dq.device
    assert d_sink.tolist() == [0.0] * 4


@needs_cuda
def test_missing_kernel_directory_message_from_op(tmp_path):
    code = """
import torch
import smla
from smla import _compiled, _library
from smla.checks import Dims
from test_extension import make_args
_compiled.load()
try:
    torch.ops.smla.sparse_mla_bwd(*make_args("cuda"))
except RuntimeError as e:
    print(str(e).splitlines()[0])
"""
    out = run_fresh(code, tmp_path)
    assert "smla: cannot read manifest" in out and str(tmp_path) in out
    assert "set by smla.config.kernel_dir (SMLA_KERNEL_DIR)" in out


@needs_cuda
@pytest.mark.skipif(not kernels_present(), reason="no kernel directory (SMLA_KERNEL_DIR)")
def test_unsupported_configuration_message():
    # D=8, Dt=4 is no configuration the compiler builds.
    with pytest.raises(RuntimeError, match="smla: no kernel variant matches the request "
                       "kind=bwd d=8 dt=4 h=4 g=2"):
        OP(*make_args("cuda"))


@needs_cuda
@pytest.mark.skipif(not kernels_present(), reason="no kernel directory (SMLA_KERNEL_DIR)")
@pytest.mark.parametrize("dkv_dtype", [torch.bfloat16, torch.float32])
def test_glm_shape_runs_and_opcheck(dkv_dtype):
    from smla.reference import sparse_mla_bwd_reference

    args = make_args("cuda", T=8, H=16, G=1, S=64, K=32, D=512, Dt=64)
    args = with_arg(args, "dkv_dtype", dkv_dtype)
    dq, dkv, cnt, _ = OP(*args)
    torch.cuda.synchronize()
    assert dq.dtype == torch.bfloat16 and dkv.dtype == dkv_dtype
    q, kv, o, dout, idx, lse = args[:6]
    rq, rkv, rcnt = sparse_mla_bwd_reference(
        q, kv, o, dout, idx, lse, args[ARG["sm_scale"]], lse_base=2, dq_dtype=torch.float32,
        dkv_dtype=torch.float32, diagnostics=True)
    for got, want in ((dq, rq), (dkv, rkv)):
        assert torch.isfinite(got.float()).all()
        err = float((got.double() - want.double()).norm() / want.double().norm())
        assert err <= 1e-2, err
    assert cnt.dtype == torch.int64 and cnt.tolist() == [rcnt[k] for k in rcnt]
    torch.library.opcheck(OP.default, args, test_utils=("test_schema", "test_faketensor"))


def bwd_entry(heads, d=64, dt=32, groups=1, tokens=1, positions=False, dq="bf16",
              dkv="bf16"):
    """A manifest entry of a bwd kernel (never launched here)."""
    config = dict(d=d, dt=dt, heads=heads, groups=groups, block=16, lse_base=2,
                  positions=positions, dq_type=dq, dkv_type=dkv, tokens=tokens)
    return dict(name=f"bwd_h{heads}_t{tokens}_g{groups}", kind="bwd", entry="smla_bwd",
                config=config, params=[{"name": "q", "type": "ptr"}])


def test_head_counts_plan_on_the_library(tmp_path):
    """The one rule: H runs on its own kernel when a library has one, else
    (G = 1, H <= 128) on the smallest larger head count, padded; the plan
    and smla.info use the lookups the op launches by."""
    write_kernel_dir(tmp_path, kernels=[bwd_entry(8), bwd_entry(16), bwd_entry(32, tokens=2),
                                        bwd_entry(4, groups=2)])
    smla.configure(kernel_dir=tmp_path)

    def plan(H, G=1):
        return _library.plan(ext, Dims(T=4, H=H, G=G, K=8, S_kv=16, D=64, Dt=32), False,
                             torch.bfloat16, torch.bfloat16)

    assert [plan(h) for h in (1, 7, 8, 9, 12, 16)] == [8, 8, 8, 16, 16, 16]
    assert ext.served_heads(64, 32, 1, False, False, False, 128) == [8, 16]
    assert plan(4, G=2) == 4
    if _library.compiler() is None:  # else H=17 would be compiled on first use
        with pytest.raises(RuntimeError, match="smla-compile --config d=64,dt=32,heads=17,"
                           "groups=1,lse=base2"):
            plan(17)
        with pytest.raises(RuntimeError, match="heads=2,groups=2"):
            plan(2, G=2)  # G > 1: no padding
    lines = dict(_library.served_configurations(ext))
    assert lines["d=64 dt=32 g=1 positions=0 dq=bf16 dkv=bf16"] == \
        "H 1-7 on 8 (padded), H 8 (exact), H 9-15 on 16 (padded), H 16 (exact)"
    assert lines["d=64 dt=32 g=2 positions=0 dq=bf16 dkv=bf16"] == "H 4 (exact)"


def test_info_lists_the_head_counts(tmp_path):
    write_kernel_dir(tmp_path, kernels=[bwd_entry(8), bwd_entry(32)])
    env = dict(os.environ, SMLA_KERNEL_DIR=str(tmp_path),
               PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    out = subprocess.run([sys.executable, "-m", "smla.info", "--no-build"], env=env,
                         capture_output=True, text=True).stdout
    assert "head counts each configuration serves" in out
    assert "d=64 dt=32 g=1 positions=0 dq=bf16 dkv=bf16: H 1-7 on 8 (padded), H 8 (exact), " \
        "H 9-31 on 32 (padded), H 32 (exact)" in out
