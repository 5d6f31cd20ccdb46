"""The C++ extension smla._C: op registration, schema, meta/fake shapes, and
the op's own argument checks (python/csrc/ArgumentChecks.cpp).

The whole module is skipped when smla._C cannot be loaded (an installed
package builds it on first use; in a source tree, `cmake -S python -B
build-py`, see python/USAGE.md). Argument checks run everywhere: the op has
a CPU implementation that runs every check before failing with "must be a
CUDA tensor", and a Meta one that runs them too. The kernel directory rules
(issue: a changed or relative SMLA_KERNEL_DIR, bounded reading) and the
kernel lookup that compile-on-first-use builds on run on the CPU too. Launch
tests need a GPU, and the ones that run kernels also need a kernel library.
"""

import hashlib
import json
import os
import subprocess
import sys

import pytest
import torch

from smla import _compiled

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
              delta=False):
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
    ]


ARG = {name: i for i, name in enumerate(
    ["q", "kv", "o", "dout", "indices", "lse", "sm_scale", "lse_base_e", "q_positions",
     "delta", "dq_dtype", "dkv_dtype"])}


def with_arg(args, name, value):
    args = list(args)
    args[ARG[name]] = value
    return args


def test_op_and_schema_registered():
    schema = OP.default._schema
    assert str(schema) == "smla::" + _compiled.OP_SCHEMA


def test_kernel_directory(monkeypatch, tmp_path):
    monkeypatch.setenv("SMLA_KERNEL_DIR", "/some/kernels")
    assert ext.kernel_directory() == "/some/kernels"
    # A relative directory: relative to the working directory of each call.
    monkeypatch.setenv("SMLA_KERNEL_DIR", "lib")
    monkeypatch.chdir(tmp_path)
    assert ext.kernel_directory() == str(tmp_path / "lib")
    (tmp_path / "sub").mkdir()
    monkeypatch.chdir(tmp_path / "sub")
    assert ext.kernel_directory() == str(tmp_path / "sub" / "lib")
    monkeypatch.delenv("SMLA_KERNEL_DIR")
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
from smla import _compiled
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
    assert f"kernel directory '{tmp_path / 'absent'}', from the environment variable " \
        "SMLA_KERNEL_DIR" in out


def test_changing_kernel_directory_takes_effect(tmp_path):
    """SMLA_KERNEL_DIR is looked up at every call: a change after the first
    library was opened selects the new directory (an error naming it if it
    cannot be opened), and changing back finds the first one again."""
    write_kernel_dir(tmp_path / "a")
    code = LIST_KERNELS + """
import os
os.environ["SMLA_KERNEL_DIR"] = os.environ["SMLA_KERNEL_DIR"] + "/../missing"
try:
    _compiled.load().kernels()
except RuntimeError as e:
    print("then:", str(e).splitlines()[0])
print("dir:", _compiled.load().kernel_directory())
os.environ["SMLA_KERNEL_DIR"] = os.environ["SMLA_KERNEL_DIR"][:-len("/../missing")]
print("back:", len(_compiled.load().kernels()))
"""
    out = run_fresh(code, tmp_path / "a")
    assert "'name': 'smla_delta_test'" in out
    assert f"then: smla: cannot open the kernel directory '{tmp_path}/a/../missing': " \
        "No such file or directory" in out
    assert f"dir: {tmp_path}/a/../missing" in out
    assert "back: 1" in out


def test_is_available_needs_a_kernel_library(tmp_path):
    """An extension without a kernel library is not available (it would
    fail at the first backward), and says why."""
    code = """
from smla import _compiled
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
                     delta=extras)
    args[ARG["dq_dtype"]], args[ARG["dkv_dtype"]] = dq_dtype, dkv_dtype
    dq, dkv, counters = OP(*args)
    assert (dq.shape, dq.dtype, dq.device.type) == ((5, 8, 24), dq_dtype, "meta")
    assert (dkv.shape, dkv.dtype) == ((11, 2, 24), dkv_dtype)
    assert (counters.shape, counters.dtype) == ((4,), torch.int64)


def test_fake_tensor_mode_keeps_device():
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode() as mode:
        args = [mode.from_tensor(a) if isinstance(a, torch.Tensor) else a
                for a in make_args("cpu")]
        dq, dkv, counters = OP(*args)
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
    with pytest.raises(RuntimeError, match=CTX + "argument 'q' must be a CUDA tensor, "
                       "got device cpu"):
        OP(*make_args("cpu", positions=True, delta=True))


def _noncontig(t):
    return t.transpose(0, 1).contiguous().transpose(0, 1)


SM_SCALE_RULE = (r"argument 'sm_scale' must be a finite positive number that is normal in "
                 r"float32 \(the kernels' type\) and keeps sm_scale \* log2\(e\) finite in "
                 r"float32 \(1.17549e-38 <= sm_scale <= 2.35866e\+38\), got ")

# (argument, how to break it, the expected message after "smla.sparse_mla_bwd: ")
BAD_ARGS = [
    ("indices", lambda a: a.long(), "argument 'indices' must be int32, got int64"),
    ("q", lambda a: a.float(), "argument 'q' must be bfloat16, got float32"),
    ("kv", lambda a: a.half(), "argument 'kv' must be bfloat16, got float16"),
    ("dout", lambda a: a.float(), "argument 'dout' must be bfloat16, got float32"),
    ("lse", lambda a: a.bfloat16(), "argument 'lse' must be float32, got bfloat16"),
    ("q_positions", lambda a: torch.zeros(4, dtype=torch.int64),
     "argument 'q_positions' must be int32, got int64"),
    ("delta", lambda a: torch.zeros(4, 4, dtype=torch.float64),
     "argument 'delta' must be float32, got float64"),
    ("q", lambda a: a.flatten(1), r"argument 'q' must have 3 dimensions \[T, H, D\+Dt\], "
     r"got 2 \(shape \[4, 48\]\)"),
    ("indices", lambda a: a[0], r"argument 'indices' must have 3 dimensions \[T, G, K\], "
     r"got 2"),
    ("lse", lambda a: a[..., None], r"argument 'lse' must have 2 dimensions \[T, H\], got 3"),
    ("q_positions", lambda a: torch.zeros(4, 1, dtype=torch.int32),
     r"argument 'q_positions' must have 1 dimension \[T\], got 2"),
    ("q", _noncontig, r"argument 'q' must be contiguous \(row-major\), got strides "
     r"\[12, 48, 1\] for shape \[4, 4, 12\]"),
    ("indices", _noncontig, "argument 'indices' must be contiguous"),
    ("kv", lambda a: a[..., :10].contiguous(),
     r"argument 'kv' must have last dimension D\+Dt = 12 \(q.shape\[2\]\), got 10"),
    ("kv", lambda a: torch.cat([a, a[:, :1]], 1),
     r"argument 'q' has H=4 heads \(q.shape\[1\]\), which must be a multiple of the "
     r"number of kv groups G=3"),
    ("o", lambda a: a[:3].contiguous(),
     r"argument 'o' must have shape \[T, H, D\] with T=4, H=4 \(from 'q'\), got \[3, 4, 8\]"),
    ("o", lambda a: torch.cat([a, a], -1),
     r"argument 'o' must have last dimension D between 1 and D\+Dt=12"),
    ("dout", lambda a: a[..., :6].contiguous(),
     r"argument 'dout' must have shape \[4, 4, 8\] \(the shape of 'o'\), got \[4, 4, 6\]"),
    ("indices", lambda a: a[:, :1].contiguous(),
     r"argument 'indices' must have shape \[T, G, K\] with T=4 \(from 'q'\) and G=2 "
     r"\(from 'kv'\), got \[4, 1, 3\]"),
    ("lse", lambda a: a[:, :3].contiguous(),
     r"argument 'lse' must have shape \[4, 4\] \[T, H\], got \[4, 3\]"),
    ("q_positions", lambda a: torch.zeros(5, dtype=torch.int32),
     r"argument 'q_positions' must have shape \[4\] \[T\], got \[5\]"),
    ("delta", lambda a: torch.zeros(4, 5),
     r"argument 'delta' must have shape \[4, 4\] \[T, H\], got \[4, 5\]"),
    ("sm_scale", lambda a: float("nan"), SM_SCALE_RULE + "nan"),
    ("sm_scale", lambda a: 0.0, SM_SCALE_RULE + "0"),
    # Finite doubles that the kernels' float32 would make inf or 0.
    ("sm_scale", lambda a: 1e39, SM_SCALE_RULE + r"1e\+39"),
    ("sm_scale", lambda a: 1e300, SM_SCALE_RULE + r"1e\+300"),
    ("sm_scale", lambda a: 1e-300, SM_SCALE_RULE + "1e-300"),
    ("sm_scale", lambda a: 1e-39, SM_SCALE_RULE + "1e-39"),
    ("sm_scale", lambda a: 2.36e38, SM_SCALE_RULE + r"2.36e\+38"),
    # Empty problems, refused with the Python API's messages.
    ("indices", lambda a: a[..., :0].contiguous(),
     r"argument 'indices' must have topk = indices.shape\[2\] >= 1, got 0"),
    ("kv", lambda a: a[:0].contiguous(),
     r"argument 'kv' must have S_kv = kv.shape\[0\] >= 1, got 0"),
    ("dq_dtype", lambda a: torch.float16,
     "argument 'dq_dtype' must be bfloat16 or float32, got float16"),
    ("dkv_dtype", lambda a: torch.float64,
     "argument 'dkv_dtype' must be bfloat16 or float32, got float64"),
]


@pytest.mark.parametrize("device", ["cpu", "meta"])
@pytest.mark.parametrize("name,breaker,message", BAD_ARGS,
                         ids=[f"{n}-{i}" for i, (n, _, _) in enumerate(BAD_ARGS)])
def test_bad_argument_message(device, name, breaker, message):
    args = make_args("cpu")
    args = with_arg(args, name, breaker(args[ARG[name]]))
    args = [a.to(device) if isinstance(a, torch.Tensor) else a for a in args]
    with pytest.raises(RuntimeError, match=CTX + message):
        OP(*args)


def test_device_mismatch_message_cpu():
    args = make_args("cpu")
    args = with_arg(args, "kv", args[ARG["kv"]].to("meta"))
    with pytest.raises(RuntimeError, match=CTX + r"argument 'kv' must be on the device "
                       r"of 'q' \(cpu\), got meta"):
        OP(*args)


@needs_cuda
@pytest.mark.parametrize("name", ["kv", "lse", "q_positions", "delta"])
def test_device_mismatch_message_cuda(name):
    args = make_args("cuda", positions=True, delta=True)
    args = with_arg(args, name, args[ARG[name]].cpu())
    with pytest.raises(RuntimeError, match=CTX + f"argument '{name}' must be on the "
                       r"device of 'q' \(cuda:0\), got cpu"):
        OP(*args)


@needs_cuda
@pytest.mark.parametrize("dkv_dtype", [torch.bfloat16, torch.float32])
def test_no_tokens_returns_empty_gradients_without_kernels(monkeypatch, dkv_dtype):
    monkeypatch.setenv("SMLA_KERNEL_DIR", "/nonexistent/smla-kernels")
    args = with_arg(make_args("cuda", T=0), "dkv_dtype", dkv_dtype)
    dq, dkv, cnt = OP(*args)
    assert dq.shape == args[0].shape and dq.dtype == torch.bfloat16
    assert dkv.shape == args[1].shape and dkv.dtype == dkv_dtype and not dkv.any()
    assert cnt.tolist() == [0, 0, 0, 0] and cnt.device == dq.device


@needs_cuda
def test_missing_kernel_directory_message_from_op(tmp_path):
    code = """
import torch
from smla import _compiled
from test_extension import make_args
_compiled.load()
try:
    torch.ops.smla.sparse_mla_bwd(*make_args("cuda"))
except RuntimeError as e:
    print(str(e).splitlines()[0])
"""
    out = run_fresh(code, tmp_path)
    assert "smla: cannot read manifest" in out and str(tmp_path) in out
    assert "from the environment variable SMLA_KERNEL_DIR" in out


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
    dq, dkv, cnt = OP(*args)
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


def test_misaligned_input_is_refused():
    """A contiguous view at an odd offset would fault in the 16-byte loads."""
    args = make_args("cpu")
    q = args[ARG["q"]]
    shifted = torch.empty(q.numel() + 1, dtype=q.dtype)[1:].view(q.shape)
    shifted.copy_(q)
    args = with_arg(args, "q", shifted)
    with pytest.raises(RuntimeError, match=CTX + "argument 'q' must start at a 16-byte "
                       "aligned address, got storage offset 1"):
        OP(*args)
