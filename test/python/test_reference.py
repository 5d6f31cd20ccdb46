"""smla.reference against the independent oracles in naive_math.py."""

import math

import pytest
import torch

from cases import make_inputs
from naive_math import dense_forward, naive_bwd
from smla.contract import EXP2_CLAMP, LOG2E
from smla.reference import sparse_mla_bwd_reference, sparse_mla_fwd_reference


def run_ref(c, dtype=torch.float64, chunk=None, **kw):
    return sparse_mla_bwd_reference(
        c["q"], c["kv"], c["o"], c["do"], c["indices"], c["lse"], c["scale"],
        lse_base=c["lse_base"], q_positions=c["q_positions"], dtype=dtype, chunk=chunk,
        dq_dtype=torch.float64, dkv_dtype=torch.float64, diagnostics=True, **kw,
    )


def run_naive(c, **kw):
    return naive_bwd(c["q"], c["kv"], c["o"], c["do"], c["indices"], c["lse"], c["scale"],
                     c["lse_base"], c["q_positions"], **kw)


def assert_close(a, b, rtol=1e-10, atol=1e-12):
    assert torch.isfinite(a).all()
    torch.testing.assert_close(a.double(), b.double(), rtol=rtol, atol=atol)


CONFIGS = {
    # name: make_inputs kwargs
    "plain_no_adversarial": dict(mix=False),
    "adversarial_default": dict(),
    "H3": dict(H=3),
    "H5": dict(H=5, T=4),
    "H20": dict(H=20, T=3),
    "H1": dict(H=1),
    "G2_H4": dict(H=4, G=2),
    "G2_H6": dict(H=6, G=2, K=5),
    "K1": dict(K=1, mix=False),
    "K7": dict(K=7),
    "K_gt_S": dict(K=9, S=6),
    "Dt0": dict(D=8, Dt=0),
    "odd_D": dict(D=7, Dt=3),
    "lse_e": dict(lse_base="e"),
    "lse_e_G2": dict(lse_base="e", H=6, G=2),
    "custom_scale": dict(scale=0.37),
}


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_bwd_matches_naive_loops(name):
    c = make_inputs(seed=hash(name) % 1000, **CONFIGS[name])
    dq, dkv, cnt = run_ref(c)
    ndq, ndkv, ncnt = run_naive(c)
    assert_close(dq, ndq)
    assert_close(dkv, ndkv)
    assert cnt == ncnt


def test_bwd_cp_positions():
    # CP shard: queries sit at absolute positions that are not 0..T-1; some
    # indices point past a query's position and must be ignored.
    pos = torch.tensor([2, 3, 9, 10, 11, 12], dtype=torch.int32)
    c = make_inputs(T=6, S=13, K=6, q_positions=pos, seed=3)
    dq, dkv, cnt = run_ref(c)
    ndq, ndkv, ncnt = run_naive(c)
    assert_close(dq, ndq)
    assert_close(dkv, ndkv)
    assert cnt == ncnt
    # The future key planted in slot K//2 is counted as invalid.
    future = (c["indices"].long() > pos.long().view(-1, 1, 1)) & (c["indices"] < 13)
    assert future.any() and cnt["invalid_slots"] >= int(future.sum())


def test_bwd_packed_sequences():
    # Two packed sequences of lengths 4 and 5; keys of the first sequence are
    # "valid" for the second by the position rule, so the generator (not the
    # contract) keeps sequences apart; here we only check the math holds.
    pos = torch.tensor([0, 1, 2, 3, 4, 5, 6, 7, 8], dtype=torch.int32)
    idx = torch.full((9, 1, 4), -1, dtype=torch.int32)
    for t in range(9):
        start = 0 if t < 4 else 4
        keys = list(range(start, t + 1))[-4:]
        idx[t, 0, : len(keys)] = torch.tensor(keys, dtype=torch.int32)
    c = make_inputs(T=9, S=9, K=4, q_positions=pos, indices=idx, seed=4)
    dq, dkv, cnt = run_ref(c)
    ndq, ndkv, ncnt = run_naive(c)
    assert_close(dq, ndq)
    assert_close(dkv, ndkv)
    assert cnt == ncnt


@pytest.mark.parametrize("bad", [float("inf"), float("-inf"), float("nan")])
def test_dead_rows_by_lse(bad):
    c = make_inputs(T=4, H=3, seed=5)
    lse = c["lse"].clone()
    lse[1, 2] = bad
    lse[3, :] = bad
    c["lse"] = lse
    dq, dkv, cnt = run_ref(c)
    ndq, ndkv, ncnt = run_naive(c)
    assert torch.isfinite(dq).all() and torch.isfinite(dkv).all()
    assert (dq[1, 2] == 0).all() and (dq[3] == 0).all()
    assert_close(dq, ndq)
    assert_close(dkv, ndkv)
    assert cnt == ncnt and cnt["dead_rows"] >= 4


def test_row_without_valid_slot_is_dead():
    c = make_inputs(T=4, H=2, K=5, seed=6)
    idx = c["indices"].clone()
    idx[2] = torch.tensor([-1, 13, 99, -5, 2 ** 31 - 1], dtype=torch.int32)
    c2 = make_inputs(T=4, H=2, K=5, seed=6, indices=idx)
    # Even a finite (stale) lse on that row must not revive it.
    c2["lse"][2] = 0.5
    dq, dkv, cnt = run_ref(c2)
    ndq, ndkv, ncnt = run_naive(c2)
    assert (dq[2] == 0).all()
    assert_close(dq, ndq)
    assert_close(dkv, ndkv)
    assert cnt == ncnt


def test_all_slots_invalid_everywhere():
    c = make_inputs(T=3, H=2, K=3, seed=7)
    c = make_inputs(T=3, H=2, K=3, seed=7, indices=torch.full((3, 1, 3), -1, dtype=torch.int32))
    dq, dkv, cnt = run_ref(c)
    assert (dq == 0).all() and (dkv == 0).all()
    # The forward gives these rows lse = -inf: both guards fire.
    assert not torch.isfinite(c["lse"]).any()
    assert cnt == {"invalid_slots": 9, "dead_rows": 6, "clamped": 0, "nonfinite_rows": 0}
    # With a finite (stale) lse only the slot guard fires.
    c["lse"] = torch.zeros_like(c["lse"])
    dq, dkv, cnt = run_ref(c)
    assert (dq == 0).all() and (dkv == 0).all()
    assert cnt == {"invalid_slots": 9, "dead_rows": 0, "clamped": 0, "nonfinite_rows": 0}


def test_invalid_slots_are_never_dereferenced():
    # kv row 0 (the stand-in for invalid slots) is poisoned and never selected
    # validly: outputs must stay finite and equal those with a clean row 0.
    idx = torch.tensor([[[3, -1, 5]], [[13, 4, -9]], [[2, 2, 100]]], dtype=torch.int32)
    c = make_inputs(T=3, S=13, K=3, indices=idx, seed=8)
    clean_dq, clean_dkv, _ = run_ref(c)
    kv = c["kv"].clone()
    kv[0] = float("nan")
    c["kv"] = kv
    dq, dkv, _ = run_ref(c)
    assert torch.isfinite(dq).all() and torch.isfinite(dkv).all()
    assert torch.equal(dq, clean_dq) and torch.equal(dkv, clean_dkv)


def test_stale_lse_triggers_clamp_and_stays_finite():
    c = make_inputs(T=4, H=2, K=5, mix=False, seed=9)
    c["lse"] = c["lse"] - 40.0  # stale: far below the true log-sum-exp
    dq, dkv, cnt = run_ref(c)
    ndq, ndkv, ncnt = run_naive(c)
    assert cnt["clamped"] > 0 and cnt == ncnt
    assert torch.isfinite(dq).all() and torch.isfinite(dkv).all()
    assert_close(dq, ndq)
    assert_close(dkv, ndkv)
    # A clamped P is exactly 2**EXP2_CLAMP, so the outputs are large but bounded.
    assert dq.abs().max() < 2 ** EXP2_CLAMP * 1e4


def test_consistent_lse_never_clamps():
    c = make_inputs(T=6, H=4, K=6, seed=10)
    _, _, cnt = run_ref(c)
    assert cnt["clamped"] == 0


def test_lse_bases_agree():
    c2 = make_inputs(T=5, H=4, seed=11, lse_base=2)
    ce = dict(c2, lse=c2["lse"] / LOG2E, lse_base="e")
    a, b = run_ref(c2), run_ref(ce)
    assert_close(a[0], b[0])
    assert_close(a[1], b[1])


@pytest.mark.parametrize("chunk", [1, 2, 3, 100])
def test_chunking_does_not_change_results(chunk):
    c = make_inputs(T=7, H=4, G=2, seed=12)
    full = run_ref(c, chunk=1000)
    part = run_ref(c, chunk=chunk)
    assert_close(part[0], full[0], rtol=1e-12)
    assert_close(part[1], full[1], rtol=1e-12)
    assert part[2] == full[2]


def test_cpu_backward_is_bitwise_deterministic():
    """The reference on the CPU, in fp32 from bf16 inputs with keys that
    many tokens share (where summation order would show), under PyTorch's
    deterministic algorithms: two runs give the same bits."""
    c = make_inputs(T=9, H=5, S=7, K=12, D=16, Dt=8, seed=21, dtype=torch.bfloat16)
    try:
        torch.use_deterministic_algorithms(True)
        a = run_ref(c, dtype=torch.float32, chunk=3)
        b = run_ref(c, dtype=torch.float32, chunk=3)
    finally:
        torch.use_deterministic_algorithms(False)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    assert a[2] == b[2]


def test_fp32_compute_on_bf16_inputs_is_close():
    c = make_inputs(T=6, H=5, D=16, Dt=8, K=7, seed=13, dtype=torch.bfloat16)
    dq, dkv, cnt = sparse_mla_bwd_reference(
        c["q"], c["kv"], c["o"], c["do"], c["indices"], c["lse"], c["scale"], diagnostics=True)
    assert dq.dtype == torch.bfloat16 and dkv.dtype == torch.bfloat16  # defaults: input dtypes
    ndq, ndkv, ncnt = run_naive(c)
    torch.testing.assert_close(dq.double(), ndq, rtol=2e-2, atol=2e-2)
    torch.testing.assert_close(dkv.double(), ndkv, rtol=2e-2, atol=2e-2)
    assert cnt == ncnt


def test_delta_argument_replaces_sum_o_do():
    c = make_inputs(T=4, H=2, seed=14)
    delta = torch.randn(4, 2, dtype=torch.float64)
    dq, dkv, _ = run_ref(c, delta=delta)
    ndq, ndkv, _ = run_naive(c, delta=delta)
    assert_close(dq, ndq)
    assert_close(dkv, ndkv)


# ---- forward ---------------------------------------------------------------

@pytest.mark.parametrize("lse_base", [2, "e"])
def test_forward_matches_dense(lse_base):
    c = make_inputs(T=6, H=4, G=2, S=11, K=5, seed=15)
    out, lse = sparse_mla_fwd_reference(c["q"], c["kv"], c["indices"], c["scale"], d_v=8,
                                        lse_base=lse_base, dtype=torch.float64)
    dout, dlse = dense_forward(c["q"], c["kv"], c["indices"], c["scale"], 8)
    live = torch.isfinite(dlse)
    want = dlse * (LOG2E if lse_base == 2 else 1.0)
    torch.testing.assert_close(lse[live], want[live], rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(out[live], dout[live], rtol=1e-12, atol=1e-12)


def test_forward_dead_row_convention():
    idx = torch.tensor([[[1, 2]], [[-1, 50]]], dtype=torch.int32)
    q = torch.randn(2, 3, 6, dtype=torch.float64)
    kv = torch.randn(8, 1, 6, dtype=torch.float64)
    out, lse = sparse_mla_fwd_reference(q, kv, idx, d_v=4, dtype=torch.float64)
    assert (out[1] == 0).all() and torch.isneginf(lse[1]).all()
    assert torch.isfinite(lse[0]).all()


def test_backward_with_forward_lse_equals_dense_autograd():
    """The reference forward's (out, lse) fed to the reference backward equals
    autograd through a dense masked softmax (no dead rows here)."""
    gen = torch.Generator().manual_seed(16)
    T, H, G, S, K, D, Dt = 5, 4, 2, 10, 6, 8, 4
    q = torch.randn(T, H, D + Dt, generator=gen, dtype=torch.float64, requires_grad=True)
    kv = torch.randn(S, G, D + Dt, generator=gen, dtype=torch.float64, requires_grad=True)
    idx = torch.randint(0, S, (T, G, K), generator=gen).to(torch.int32)
    idx[:, :, 1] = -1
    idx[:, :, 2] = idx[:, :, 0]
    do = torch.randn(T, H, D, generator=gen, dtype=torch.float64)
    scale = 0.3
    dout, _ = dense_forward(q, kv, idx, scale, D)
    gq, gkv = torch.autograd.grad(dout, (q, kv), do)
    out, lse = sparse_mla_fwd_reference(q.detach(), kv.detach(), idx, scale, d_v=D,
                                        dtype=torch.float64)
    dq, dkv = sparse_mla_bwd_reference(q.detach(), kv.detach(), out, do, idx, lse, scale,
                                       dtype=torch.float64)
    torch.testing.assert_close(dq, gq, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(dkv, gkv, rtol=1e-10, atol=1e-12)
    assert math.isfinite(float(lse.sum()))
