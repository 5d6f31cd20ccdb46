"""The reference with an attention sink and per-token lengths (topk_length)
against float64 autograd of a direct softmax-with-sink forward
(naive_math.dense_forward: the sink is one more logit without a value)
and against the slot-by-slot loops, in both lse bases."""

import math

import pytest
import torch

from cases import adversarial_indices
from naive_math import dense_forward, naive_bwd
from smla.contract import LOG2E, lse_with_sink
from smla.reference import (apply_sink, sink_gradient, sparse_mla_bwd_reference,
                            sparse_mla_fwd_reference)


def problem(T=6, H=4, G=1, S=13, K=7, D=8, Dt=4, *, seed=0, lengths=True, empty=(2,)):
    """float64 leaves q, kv, sink; adversarial indices (-1, >= S, +-2^31,
    duplicates); tokens in `empty` without a valid slot; with `lengths`
    a topk_length per token from -1 to K + 1 (slots past it hold valid
    keys, which must not count)."""
    gen = torch.Generator().manual_seed(seed)
    W = D + Dt
    q = torch.randn(T, H, W, generator=gen, dtype=torch.float64).requires_grad_(True)
    kv = torch.randn(S, G, W, generator=gen, dtype=torch.float64).requires_grad_(True)
    sink = torch.randn(H, generator=gen, dtype=torch.float64).requires_grad_(True)
    idx = adversarial_indices(T, G, K, S, gen)
    for t in empty:
        idx[t] = -1
    topk_length = None
    if lengths:
        topk_length = torch.randint(-1, K + 2, (T,), generator=gen, dtype=torch.int32)
        topk_length[0] = 2  # slots 2.. hold valid keys past the length
        idx[0, :, 2:] = torch.randint(0, S, (G, K - 2), generator=gen, dtype=torch.int32)
    return dict(q=q, kv=kv, sink=sink, idx=idx, topk_length=topk_length, D=D,
                scale=W ** -0.5, gen=gen)


def autograd_grads(p, lse_base, lse_grad):
    """(dq, dkv, d_sink) of sum(out * w) [+ sum(lse * u), lse in lse_base]
    by float64 autograd, and the forward's (out, lse, w, u)."""
    out, lse_e = dense_forward(p["q"], p["kv"], p["idx"], p["scale"], p["D"],
                               attn_sink=p["sink"], topk_length=p["topk_length"])
    lse = lse_e * LOG2E if lse_base == 2 else lse_e
    w = torch.randn(out.shape, generator=p["gen"], dtype=torch.float64)
    u = torch.randn(lse.shape, generator=p["gen"], dtype=torch.float64) if lse_grad else None
    loss = (out * w).sum() + ((lse * u).sum() if lse_grad else 0.0)
    grads = torch.autograd.grad(loss, (p["q"], p["kv"], p["sink"]))
    return grads, out.detach(), lse.detach(), w, u


def reference_grads(p, out, lse, w, u, lse_base, **kw):
    """The reference given the sink-inclusive lse; a gradient u into lse is
    folded into delta as SparseMLA folds it (Delta - c u, c = log2(e) for
    base 2: d lse2 / ds = log2(e) P scale)."""
    delta = None
    if u is not None:
        c = LOG2E if lse_base == 2 else 1.0
        delta = (out * w).sum(-1) - c * u
    return sparse_mla_bwd_reference(
        p["q"].detach(), p["kv"].detach(), out, w, p["idx"], lse, p["scale"],
        lse_base=lse_base, delta=delta, attn_sink=p["sink"].detach(),
        topk_length=p["topk_length"], dq_dtype=torch.float64, dkv_dtype=torch.float64, **kw)


CASES = {
    "adversarial": dict(lengths=False, empty=()),
    "rows_without_valid_keys": dict(lengths=False),
    "topk_length": dict(),
    "Dt0": dict(D=12, Dt=0),
    "G2": dict(H=6, G=2, K=5),
    "H1": dict(H=1),
}


@pytest.mark.parametrize("lse_base", [2, "e"])
@pytest.mark.parametrize("lse_grad", [False, True], ids=["out_grad", "out_and_lse_grad"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_matches_float64_autograd_of_softmax_with_sink(case, lse_base, lse_grad):
    p = problem(seed=len(case), **CASES[case])
    want, out, lse, w, u = autograd_grads(p, lse_base, lse_grad)
    got = reference_grads(p, out, lse, w, u, lse_base)
    assert len(got) == 3
    for name, a, b in zip(("dq", "dkv", "d_sink"), got, want):
        assert torch.isfinite(a).all(), name
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12, msg=name)


@pytest.mark.parametrize("lse_base", [2, "e"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_matches_slot_loops_and_counters(case, lse_base):
    p = problem(seed=10 + len(case), **CASES[case])
    _, out, lse, w, _ = autograd_grads(p, lse_base, False)
    lse = lse.clone()
    lse[1, 0] = math.inf  # a dead row: no dq, no dkv, no d_sink
    lse[3, -1] = math.nan
    dq, dkv, d_sink, cnt = reference_grads(p, out, lse, w, None, lse_base, diagnostics=True)
    ndq, ndkv, nd_sink, ncnt = naive_bwd(
        p["q"].detach(), p["kv"].detach(), out, w, p["idx"], lse, p["scale"], lse_base,
        attn_sink=p["sink"].detach(), topk_length=p["topk_length"])
    for a, b in ((dq, ndq), (dkv, ndkv), (d_sink, nd_sink)):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)
    assert cnt == ncnt and cnt["dead_rows"] == 2


def test_a_row_without_valid_keys_is_live_with_a_sink():
    """lse = the sink: P = 0 on every slot (dq row 0, no dkv), not counted
    as dead; its d_sink contribution is -exp(sink - lse) Delta = -Delta.
    Without a sink the same row (lse = -inf) is dead and has no d_sink."""
    p = problem(T=4, H=2, K=5, lengths=False, empty=(1,))
    _, out, lse, w, _ = autograd_grads(p, "e", False)
    sink = p["sink"].detach()
    torch.testing.assert_close(lse[1], sink)
    delta = torch.randn(4, 2, dtype=torch.float64)
    kw = dict(lse_base="e", delta=delta, attn_sink=sink, dq_dtype=torch.float64,
              dkv_dtype=torch.float64, diagnostics=True)
    args = (p["q"].detach(), p["kv"].detach(), out, w, p["idx"], lse, p["scale"])
    dq, dkv, d_sink, cnt = sparse_mla_bwd_reference(*args, **kw)
    assert (dq[1] == 0).all() and cnt["dead_rows"] == 0
    assert cnt["invalid_slots"] >= 5
    only = torch.zeros_like(delta)
    only[1] = delta[1]
    _, _, d_row, _ = sparse_mla_bwd_reference(*args, **{**kw, "delta": only})
    torch.testing.assert_close(d_row, -delta[1])
    # Without the sink: the forward's lse of that row is -inf, a dead row.
    lse_keys = lse.clone()
    lse_keys[1] = -math.inf
    dq2, _, cnt2 = sparse_mla_bwd_reference(*args[:5], lse_keys, p["scale"], lse_base="e",
                                            diagnostics=True)
    assert (dq2[1] == 0).all() and cnt2["dead_rows"] == 2


@pytest.mark.parametrize("lse_base", [2, "e"])
def test_forward_reference_with_sink_matches_the_dense_forward(lse_base):
    p = problem(T=5, H=3, G=1, K=6)
    want_out, want_lse = dense_forward(p["q"].detach(), p["kv"].detach(), p["idx"], p["scale"],
                                       p["D"], attn_sink=p["sink"].detach(),
                                       topk_length=p["topk_length"])
    out, lse = sparse_mla_fwd_reference(p["q"].detach(), p["kv"].detach(), p["idx"],
                                        p["scale"], d_v=p["D"], lse_base=lse_base,
                                        attn_sink=p["sink"].detach(),
                                        topk_length=p["topk_length"])
    torch.testing.assert_close(out, want_out, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(lse, want_lse * (LOG2E if lse_base == 2 else 1.0),
                               rtol=1e-12, atol=1e-12)
    # The same as the keys-only forward with the sink applied after it.
    keys = sparse_mla_fwd_reference(p["q"].detach(), p["kv"].detach(), p["idx"], p["scale"],
                                    d_v=p["D"], lse_base=lse_base, topk_length=p["topk_length"])
    out2, lse2 = apply_sink(*keys, p["sink"].detach(), lse_base)
    torch.testing.assert_close(out2, out, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(lse2, lse, rtol=1e-12, atol=1e-12)


def test_lse_with_sink_edges():
    inf, nan = math.inf, math.nan
    lse_keys = torch.tensor([[1.0, -inf, inf, nan, 0.5, -inf]], dtype=torch.float64)
    sink = torch.tensor([0.25, 0.25, 0.25, 0.25, -inf, -inf], dtype=torch.float64)
    got = lse_with_sink(lse_keys, sink, "e")
    want = [math.log(math.exp(1.0) + math.exp(0.25)), 0.25, inf, nan, 0.5, -inf]
    torch.testing.assert_close(got[0], torch.tensor(want, dtype=torch.float64), equal_nan=True)
    got2 = lse_with_sink(lse_keys * LOG2E, sink, 2)
    torch.testing.assert_close(got2, got * LOG2E, equal_nan=True)
    assert lse_with_sink(lse_keys, None, 2) is lse_keys


def test_sink_gradient_is_the_same_in_both_bases_and_skips_dead_rows():
    g = torch.Generator().manual_seed(4)
    sink = torch.randn(3, generator=g, dtype=torch.float64)
    lse_e = torch.randn(5, 3, generator=g, dtype=torch.float64) + 2
    lse_e[0, 1] = math.inf
    lse_e[2, 2] = math.nan
    lse_e[3, 0] = -math.inf
    delta = torch.randn(5, 3, generator=g, dtype=torch.float64)
    live = torch.isfinite(lse_e)
    want = -(torch.where(live, torch.exp(sink - lse_e), 0) * delta).sum(0)
    torch.testing.assert_close(sink_gradient(sink, lse_e, delta, "e"), want)
    torch.testing.assert_close(sink_gradient(sink, lse_e * LOG2E, delta, 2), want)
    # A -inf sink (no sink for that head) has no gradient.
    sink[1] = -math.inf
    assert float(sink_gradient(sink, lse_e, delta, "e")[1]) == 0.0


def test_d_sink_does_not_depend_on_the_chunking():
    p = problem(T=9, K=6)
    _, out, lse, w, _ = autograd_grads(p, 2, False)
    whole = reference_grads(p, out, lse, w, None, 2)
    for chunk in (1, 4):
        parts = reference_grads(p, out, lse, w, None, 2, chunk=chunk)
        for a, b in zip(parts, whole):
            torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
    # fp32 compute: the same sums, in fp32.
    f32 = reference_grads(p, out, lse, w, None, 2, dtype=torch.float32)
    torch.testing.assert_close(f32[2], whole[2], rtol=1e-5, atol=1e-6)
