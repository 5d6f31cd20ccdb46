"""GPU tests of the output guards: the non-finite row counter (counters[3])
of every kernel form (H = 8 and fp32 outputs included), checked mode on the
compiled kernels, and a call whose q holds more than 2^31 elements (64-bit
addressing) against the reference on sampled rows.

Skipped cleanly without CUDA or without the extension smla._C.
"""

import logging
import math

import pytest
import torch

import smla
import smla.checked as checked
from smla.reference import sparse_mla_bwd_reference, sparse_mla_fwd_reference
from test_gpu import CASES, needs_compiled, pair_problem, problem
from test_gpu_configs import TOKENS
from test_gpu_configs import problem as config_problem


def nonfinite_rows(dq, dkv):
    return int((~torch.isfinite(dq.float())).any(-1).sum()
               + (~torch.isfinite(dkv.float())).any(-1).sum())


def blow_up(p, tokens, factor=1e20):
    """Values of the given tokens' selected kv rows scaled to ~1e20: finite
    bf16 whose products overflow fp32 (docs/validation.md, "Extreme
    magnitudes"); the other rows stay clean."""
    p = dict(p)
    idx = p["indices"][tokens].long().flatten()
    idx = idx[(idx >= 0) & (idx < p["kv"].shape[0])].unique()
    kv = p["kv"].clone()
    kv[idx] = (kv[idx].float() * factor).bfloat16()
    assert torch.isfinite(kv.float()).all()
    p["kv"] = kv
    return p


# One case of each kernel form: the H = 16 per-token mma.sync kernel (dQ in
# registers), the 32-head wgmma kernel (dQ packed in registers), the H = 64
# and H = 128 clusters, the small G = 2 kernels (dQ in shared memory), and
# fp32 outputs (the count-only dkv pass).
GUARD_CASES = ["glm52", "glm52_lse_e_positions", "H32", "H64_blocks", "H128_blocks",
               "G2_H4", "G2_H20", "G2_H4_lse_e_f32", "G2_H20_lse_e_f32"]


@needs_compiled
@pytest.mark.parametrize("name", GUARD_CASES)
def test_nonfinite_rows_counted_exactly(name):
    args, kw = CASES[name]
    clean = problem(**args)
    _, _, cnt = smla.sparse_mla_bwd(**clean, diagnostics=True, mode="compiled", **kw)
    assert cnt["nonfinite_rows"] == 0
    p = blow_up(clean, [4, 5])
    dq, dkv, cnt = smla.sparse_mla_bwd(**p, diagnostics=True, mode="compiled", **kw)
    bad = nonfinite_rows(dq, dkv)
    assert bad > 0, "the magnitudes should overflow fp32"
    assert cnt["nonfinite_rows"] == bad  # every bad row, each once
    # The rows the reference (the definition) finds non-finite too.
    _, _, rcnt = sparse_mla_bwd_reference(
        p["q"], p["kv"], p["o"], p["do"], p["indices"], p["lse"], p["sm_scale"],
        lse_base=p["lse_base"], q_positions=p["q_positions"], diagnostics=True,
        dq_dtype=kw.get("dq_dtype"), dkv_dtype=kw.get("dkv_dtype"))
    assert rcnt["nonfinite_rows"] > 0


@needs_compiled
@pytest.mark.parametrize("pairs", ["on", "off"])
def test_nonfinite_rows_counted_on_token_pairs(pairs, monkeypatch):
    smla.configure(pairs=pairs)
    p = blow_up(pair_problem(), [6, 7])
    dq, dkv, cnt = smla.sparse_mla_bwd(**p, diagnostics=True, mode="compiled")
    assert cnt["nonfinite_rows"] == nonfinite_rows(dq, dkv) > 0


@needs_compiled
@pytest.mark.parametrize("heads,pairs,dtype", [
    (8, "off", torch.bfloat16), (8, "on", torch.bfloat16),
    (16, "off", torch.float32), (64, "off", torch.float32), (128, "off", torch.float32)],
    ids=["H8", "H8_pairs", "H16_f32", "H64_f32", "H128_f32"])
def test_nonfinite_rows_counted_on_h8_and_fp32_kernels(heads, pairs, dtype, monkeypatch):
    """The library's H = 8 kernels (per token, and the 16-row token-pair
    kernel) and its D = 512 fp32-output kernels count exactly the rows they
    return non-finite, and none on clean inputs."""
    smla.configure(pairs=pairs)
    clean = config_problem(TOKENS[heads], heads, pairs=pairs == "on")
    kw = dict(diagnostics=True, mode="compiled", dq_dtype=dtype, dkv_dtype=dtype)
    assert smla.sparse_mla_bwd(**clean, **kw)[2]["nonfinite_rows"] == 0
    dq, dkv, cnt = smla.sparse_mla_bwd(**blow_up(clean, [4, 5]), **kw)
    assert cnt["nonfinite_rows"] == nonfinite_rows(dq, dkv) > 0


@needs_compiled
def test_checked_mode_on_overflowing_inputs_raises_clearly():
    p = blow_up(problem(), [4])
    with pytest.raises(smla.NonFiniteOutputError, match="not finite in the output dtypes"):
        smla.sparse_mla_bwd(**p, mode="checked")


@needs_compiled
def test_checked_mode_repairs_compiled_output(monkeypatch, caplog):
    p = problem()

    def corrupt(dq, dkv, call):
        if call == 0:
            dq = dq.clone()
            dq[5] = float("nan")
        return dq, dkv

    monkeypatch.setattr(checked, "_inject_corruption", corrupt)
    with caplog.at_level(logging.WARNING, logger="smla"):
        dq, dkv, cnt = smla.sparse_mla_bwd(**p, mode="checked", diagnostics=True)
    assert cnt["repaired_tokens"] == 1
    assert any("recomputed 1 of 24 tokens" in r.getMessage() for r in caplog.records)
    ref = sparse_mla_bwd_reference(p["q"], p["kv"], p["o"], p["do"], p["indices"], p["lse"],
                                   dq_dtype=torch.float32)[0]
    assert float((dq.double() - ref.double()).norm() / ref.double().norm()) < 1e-2


@needs_compiled
def test_checked_mode_agreement_check_on_the_gpu(monkeypatch):
    p = problem()
    smla.configure(check_agreement=4)
    smla.sparse_mla_bwd(**p, mode="checked")  # the kernels agree
    monkeypatch.setattr(checked, "_inject_corruption",
                        lambda dq, dkv, call: (dq * 1000, dkv))
    with pytest.raises(smla.OutputMismatchError, match="dq of tokens"):
        smla.sparse_mla_bwd(**p, mode="checked")


# ---- more than 2^31 elements -------------------------------------------------

def _free_bytes():
    free, _ = torch.cuda.mem_get_info()
    return free


@needs_compiled
@pytest.mark.parametrize("H,pairs", [(16, "off"), (16, "on"), (128, "off")])
def test_q_beyond_2_31_elements_matches_reference_on_sampled_rows(H, pairs, monkeypatch):
    """q, o, do and dq past 2^31 elements: every offset the kernels form
    from t * H * (D + Dt) must be 64-bit. The last tokens are the ones a
    32-bit offset would put elsewhere; they, the first and a middle one
    are compared with the reference, and kv rows only the last tokens
    select give exact dkv rows."""
    D, Dt, K, S = 512, 64, 64, 4096
    W = D + Dt
    T = (2 ** 31 // (H * W) + 64) // 2 * 2
    assert T * H * W > 2 ** 31
    need = T * H * (2 * W + 2 * D) * 2 + T * H * 8
    if _free_bytes() < need * 1.3:
        pytest.skip(f"needs {need / 2 ** 30:.1f} GiB of free GPU memory")
    smla.configure(pairs=pairs)
    gen = torch.Generator(device="cuda").manual_seed(0)
    q = torch.randn(T, H, W, device="cuda", generator=gen, dtype=torch.bfloat16)
    kv = torch.randn(S, 1, W, device="cuda", generator=gen, dtype=torch.bfloat16)
    do = torch.randn(T, H, D, device="cuda", generator=gen, dtype=torch.bfloat16)
    # Keys 0 .. S-3 for everyone; S-2 only for the last two tokens and
    # S-1 only for the last: their dkv rows come from those tokens alone.
    idx = torch.randint(0, S - 2, (T, 1, K), device="cuda", generator=gen, dtype=torch.int32)
    idx[-2:, 0, 0] = S - 2
    idx[-1, 0, 1] = S - 1
    sample = torch.tensor([0, 1, T // 2, T // 2 + 1, T - 4, T - 3, T - 2, T - 1], device="cuda")

    def rows(t):
        return t.index_select(0, sample)

    # o and lse of the sampled tokens come from the forward; elsewhere any
    # consistent-looking values do (their outputs are not compared).
    o = torch.randn(T, H, D, device="cuda", generator=gen, dtype=torch.bfloat16)
    lse = torch.full((T, H), 8.0, device="cuda")
    so, slse = sparse_mla_fwd_reference(rows(q), kv, rows(idx), None, d_v=D)
    o[sample], lse[sample] = so, slse
    dq, dkv, cnt = smla.sparse_mla_bwd(q, kv, o, do, idx, lse, diagnostics=True,
                                       mode="compiled")
    torch.cuda.synchronize()
    assert cnt["nonfinite_rows"] == 0
    rq, _ = sparse_mla_bwd_reference(rows(q), kv, rows(o), rows(do), rows(idx), rows(lse),
                                     dq_dtype=torch.float32)
    err = float((rows(dq).double() - rq.double()).norm() / rq.double().norm())
    assert err < 1e-2, f"dq of the sampled tokens: rel error {err:.3g}"
    last = torch.arange(T - 2, T, device="cuda")
    lidx = idx.index_select(0, last)
    lidx = torch.where(lidx >= S - 2, lidx, torch.full_like(lidx, -1))
    _, rkv = sparse_mla_bwd_reference(q[-2:], kv, o[-2:], do[-2:], lidx, lse[-2:],
                                      dkv_dtype=torch.float32)
    got, want = dkv[S - 2:].double(), rkv[S - 2:].double()
    err = float((got - want).norm() / want.norm())
    assert err < 1e-2, f"dkv rows only the last tokens select: rel error {err:.3g}"
    assert math.isfinite(float(dq.float().abs().max()))
