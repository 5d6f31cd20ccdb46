"""GPU tests of the library's configurations beyond GLM-5.2's H=16 bf16
ones and of what a user sees around them: H=8 (per token and on token
pairs) and fp32 dq/dkv at D=512 against the reference for every head
count, the device check, the warnings of the slow paths and the debug log
of each shape's choice.

Skipped cleanly without CUDA; the compiled-kernel tests also skip when the
compiled backward cannot run (smla._compiled.unavailable_reason). Run them
against an installed distribution with scripts/gpu-install-check.sh.
"""

import json
import logging
import math
import shutil
import warnings

import pytest
import torch

import smla
from smla import _compiled, _log
from smla.reference import sparse_mla_bwd_reference, sparse_mla_fwd_reference

HAS_CUDA = torch.cuda.is_available()
needs_cuda = pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA device")
needs_compiled = pytest.mark.skipif(
    not (HAS_CUDA and _compiled.is_available()),
    reason="needs a CUDA device the compiled backward runs on",
)


def problem(T, H, S=600, K=300, *, positions=False, lse_base=2, seed=0, pairs=False):
    """D=512+64, G=1: random keys with the adversarial slots (-1, >= S_kv,
    +-2^31, a repeated slot, a token with no valid slot) and dead rows (lse
    +inf, -inf, NaN); with `pairs`, tokens 2p and 2p+1 share most keys."""
    D, Dt = 512, 64
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(T, H, D + Dt, generator=gen).to("cuda", torch.bfloat16)
    kv = torch.randn(S, 1, D + Dt, generator=gen).to("cuda", torch.bfloat16)
    do = torch.randn(T, H, D, generator=gen).to("cuda", torch.bfloat16)
    if pairs:
        rows = []
        for _ in range((T + 1) // 2):
            pool = torch.randperm(S, generator=gen)[: int(1.2 * K)]
            rows += [pool[:K], pool[-K:]]
        idx = torch.stack(rows[:T]).view(T, 1, K)
    else:
        idx = torch.randint(0, S, (T, 1, K), generator=gen)
        r = torch.rand(T, 1, K, generator=gen)
        idx = torch.where(r < 0.1, -1, idx)
        idx = torch.where((r > 0.1) & (r < 0.15), S + 5, idx)
        idx = torch.where((r > 0.15) & (r < 0.17), -(2 ** 31), idx)
        idx = torch.where((r > 0.17) & (r < 0.19), 2 ** 31 - 1, idx)
        idx[:, :, -1] = idx[:, :, 0]
        idx[T // 2] = -1
    idx = idx.to("cuda", torch.int32)
    qp = (torch.arange(T, dtype=torch.int32) + S // 2).cuda() if positions else None
    o, lse = sparse_mla_fwd_reference(q, kv, idx, None, d_v=D, q_positions=qp,
                                      lse_base=lse_base)
    lse[1, 0] = math.inf
    lse[2, 1 % H] = -math.inf
    lse[3, :] = math.nan
    return dict(q=q, kv=kv, o=o, do=do, indices=idx, lse=lse, q_positions=qp,
                lse_base=lse_base)


def rel_fro(a, b):
    return float((a.double() - b.double()).norm() / b.double().norm().clamp_min(1e-30))


def compare(p, dq_dtype=torch.bfloat16, dkv_dtype=torch.bfloat16, tol=None):
    dq, dkv, cnt = smla.sparse_mla_bwd(**p, dq_dtype=dq_dtype, dkv_dtype=dkv_dtype,
                                       diagnostics=True, mode="compiled")
    rq, rkv, rcnt = sparse_mla_bwd_reference(
        p["q"], p["kv"], p["o"], p["do"], p["indices"], p["lse"], None,
        lse_base=p["lse_base"], q_positions=p["q_positions"], dq_dtype=torch.float32,
        dkv_dtype=torch.float32, diagnostics=True)
    assert dq.dtype == dq_dtype and dkv.dtype == dkv_dtype
    assert torch.isfinite(dq.float()).all() and torch.isfinite(dkv.float()).all()
    # The kernels round P and dS to bf16 for the tensor-core products
    # whatever the output type, so fp32 outputs share bf16's tolerance.
    tol = tol or 1e-2
    assert rel_fro(dq, rq) <= tol, rel_fro(dq, rq)
    assert rel_fro(dkv, rkv) <= tol, rel_fro(dkv, rkv)
    assert cnt == rcnt


TOKENS = {8: 24, 16: 24, 32: 12, 64: 8, 128: 6}
F32 = (torch.float32, torch.float32)
BF16 = (torch.bfloat16, torch.bfloat16)


@needs_compiled
@pytest.mark.parametrize("heads", sorted(TOKENS))
@pytest.mark.parametrize("lse_base", [2, "e"])
@pytest.mark.parametrize("positions", [False, True])
@pytest.mark.parametrize("dtypes", [BF16, F32], ids=["bf16", "f32"])
def test_every_library_configuration_matches_reference(heads, lse_base, positions, dtypes,
                                                       monkeypatch):
    """D=512+64 for H in {8, 16, 32, 64, 128}, both lse bases, with and
    without positions, bf16 and fp32 dq/dkv: each a kernel of the library
    (per token: SMLA_PAIRS=off), none missing."""
    smla.configure(pairs="off")
    compare(problem(TOKENS[heads], heads, positions=positions, lse_base=lse_base), *dtypes)


@needs_compiled
@pytest.mark.parametrize("heads", [8, 16, 64])
def test_mixed_output_dtypes(heads):
    """dq and dkv of different types: one kernel serves both (dkv is summed
    in fp32 either way)."""
    p = problem(TOKENS[heads], heads, lse_base="e")
    compare(p, torch.float32, torch.bfloat16)
    compare(p, torch.bfloat16, torch.float32)


@needs_compiled
@pytest.mark.parametrize("lse_base", [2, "e"])
@pytest.mark.parametrize("positions", [False, True])
def test_h8_token_pairs_match_reference(lse_base, positions, monkeypatch):
    """H=8 on token pairs (the tokens=2 kernel of 16 rows) and per token,
    forced and under auto; odd T runs per token."""
    for mode in ("on", "off", "auto"):
        smla.configure(pairs=mode)
        compare(problem(24, 8, positions=positions, lse_base=lse_base, pairs=True, seed=1))
    smla.configure(pairs="on")
    compare(problem(16, 8, K=1000, S=3000, pairs=True, seed=2, lse_base=lse_base))
    with pytest.raises(RuntimeError, match="an even number of tokens"):
        compare(problem(23, 8, pairs=True, seed=3))


@needs_compiled
def test_h8_reports_its_kernels(caplog):
    """The debug log names the kernel, pairing and walk a new shape ran; a
    call whose choice did not change (another T) logs nothing new."""
    caplog.set_level(logging.DEBUG, logger="smla")
    p = problem(24, 8, pairs=True, seed=4)
    smla.sparse_mla_bwd(**p, mode="compiled")
    records = [r.getMessage() for r in caplog.records if "sparse_mla_bwd T=24" in r.getMessage()]
    assert len(records) == 1, records
    assert "H=8" in records[0] and "kernel smla_d512_dt64_h" in records[0] and "walk" in records[0]
    caplog.clear()
    q = problem(26, 8, pairs=True, seed=4)
    smla.sparse_mla_bwd(**q, mode="compiled")
    smla.sparse_mla_bwd(**q, mode="compiled")
    assert len([r for r in caplog.records if "sparse_mla_bwd T=26" in r.getMessage()]) <= 1


def copy_library(src, dst, target):
    """The kernel library in `src`, copied to `dst` with another target."""
    shutil.copytree(src, dst)
    manifest = json.loads((dst / "manifest.json").read_text())
    manifest["target"] = target
    (dst / "manifest.json").write_text(json.dumps(manifest))


@needs_compiled
def test_device_outside_the_target_is_a_clear_error(tmp_path, monkeypatch):
    """A library whose target the device does not run (here: sm_80 on an
    sm_90 device) is an error naming both; mode=None then runs the
    reference, with one warning saying why."""
    copy_library(_compiled.load().kernel_directory(), tmp_path / "lib", "sm_80")
    smla.configure(kernel_dir=str(tmp_path / "lib"))
    prop = torch.cuda.get_device_properties(torch.cuda.current_device())
    p = problem(8, 16)
    with pytest.raises(RuntimeError, match=r"cannot run the kernels in .*: the kernel library "
                       r"targets sm_80, .*the device has compute capability "
                       rf"{prop.major}\.{prop.minor}"):
        smla.sparse_mla_bwd(**p, mode="compiled")
    assert "targets sm_80" in _compiled.unavailable_reason()
    monkeypatch.setattr(_log, "_warned", set())
    with pytest.warns(smla.SmlaSlowPathWarning, match="targets sm_80"):
        dq, _ = smla.sparse_mla_bwd(**p)
    assert torch.isfinite(dq.float()).all()


@needs_cuda
def test_reference_fallbacks_on_cuda_warn_once(tmp_path, monkeypatch):
    """No slow path is silent: mode=None without a usable kernel library,
    and SparseMLA without a registered forward, each warn once per process
    with the reason and the fix."""
    smla.configure(kernel_dir=str(tmp_path / "none"))
    monkeypatch.setattr(_log, "_warned", set())
    p = problem(8, 16)
    with pytest.warns(smla.SmlaSlowPathWarning, match="reference backward .*kernel directory"):
        smla.sparse_mla_bwd(**p)
    with warnings.catch_warnings():
        warnings.simplefilter("error", smla.SmlaSlowPathWarning)
        smla.sparse_mla_bwd(**p)
    smla.configure(kernel_dir=None)
    prev = smla.set_forward(None)
    try:
        q = p["q"].detach().requires_grad_(True)
        with pytest.warns(smla.SmlaSlowPathWarning, match="smla.set_forward"):
            smla.SparseMLA.apply(q, p["kv"], p["indices"], 576 ** -0.5)
        with warnings.catch_warnings():
            warnings.simplefilter("error", smla.SmlaSlowPathWarning)
            smla.SparseMLA.apply(q, p["kv"], p["indices"], 576 ** -0.5)
    finally:
        smla.set_forward(prev.fn, lse_base=prev.lse_base, d_v=prev.d_v)
