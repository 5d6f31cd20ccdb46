"""SparseMLA (Slime's autograd Function) against autograd of a dense masked
softmax, in float64 on CPU."""

import pytest
import torch

import smla
from naive_math import dense_forward
from smla.contract import LOG2E
from smla.reference import sparse_mla_fwd_reference

T, H, G, S, K, D, DT = 6, 4, 2, 12, 5, 8, 4


@pytest.fixture(autouse=True)
def restore_forward():
    prev = smla.get_forward()
    prev_mode = smla.set_backward_mode("reference")
    yield
    smla.set_forward(prev.fn, lse_base=prev.lse_base, d_v=prev.d_v)
    smla.set_backward_mode(prev_mode)


def inputs(seed=0, positions=None):
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(T, H, D + DT, generator=gen, dtype=torch.float64, requires_grad=True)
    kv = torch.randn(S, G, D + DT, generator=gen, dtype=torch.float64, requires_grad=True)
    top = S if positions is None else None
    idx = torch.empty(T, G, K, dtype=torch.int64)
    for t in range(T):
        hi = top if top is not None else int(positions[t]) + 1
        idx[t] = torch.randint(0, hi, (G, K), generator=gen)
    idx[:, :, 1] = -1
    idx[:, :, 3] = idx[:, :, 0]  # duplicate
    idx[:, 0, 4] = S + 2  # out of range
    return q, kv, idx.to(torch.int32)


def dense_grads(q, kv, idx, scale, w_out, w_lse=None, positions=None):
    qd, kvd = q.detach().requires_grad_(True), kv.detach().requires_grad_(True)
    out, lse_e = dense_forward(qd, kvd, idx, scale, D, positions)
    loss = (out * w_out).sum()
    if w_lse is not None:
        loss = loss + (lse_e * LOG2E * w_lse).sum()  # SparseMLA's lse is base 2
    return torch.autograd.grad(loss, (qd, kvd))


def sparse_grads(q, kv, idx, scale, w_out, w_lse=None, positions=None):
    out, lse = smla.SparseMLA.apply(q, kv, idx, scale, None, positions)
    loss = (out * w_out).sum()
    if w_lse is not None:
        loss = loss + (lse * w_lse).sum()
    return torch.autograd.grad(loss, (q, kv))


def test_gradients_match_dense_autograd():
    smla.set_forward(None, d_v=D)
    q, kv, idx = inputs()
    w = torch.randn(T, H, D, dtype=torch.float64)
    got = sparse_grads(q, kv, idx, 0.4, w)
    want = dense_grads(q, kv, idx, 0.4, w)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


def test_gradient_through_lse_is_supported():
    smla.set_forward(None, d_v=D)
    q, kv, idx = inputs(1)
    w, u = torch.randn(T, H, D, dtype=torch.float64), torch.randn(T, H, dtype=torch.float64)
    got = sparse_grads(q, kv, idx, 0.3, w, u)
    want = dense_grads(q, kv, idx, 0.3, w, u)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


def test_natural_lse_forward_is_interpreted_correctly():
    def flashmla_like(q, kv, indices, sm_scale, *, d_v, q_positions=None):
        return sparse_mla_fwd_reference(q, kv, indices, sm_scale, d_v=d_v, lse_base="e",
                                        q_positions=q_positions)

    q, kv, idx = inputs(2)
    w = torch.randn(T, H, D, dtype=torch.float64)
    want = dense_grads(q, kv, idx, 0.35, w)
    smla.set_forward(flashmla_like, lse_base="e", d_v=D)
    got = sparse_grads(q, kv, idx, 0.35, w)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)
    # Declaring the wrong base must give different (wrong) gradients.
    smla.set_forward(flashmla_like, lse_base=2, d_v=D)
    wrong = sparse_grads(q, kv, idx, 0.35, w)
    assert not torch.allclose(wrong[0], want[0], rtol=1e-3)


def test_q_positions_are_forwarded():
    smla.set_forward(None, d_v=D)
    pos = torch.tensor([3, 4, 5, 9, 10, 11], dtype=torch.int32)
    q, kv, idx = inputs(3, positions=pos)
    idx[:, 0, 2] = torch.clamp(pos + 1, max=S - 1)  # future keys: invalid
    w = torch.randn(T, H, D, dtype=torch.float64)
    got = sparse_grads(q, kv, idx, 0.3, w, positions=pos)
    want = dense_grads(q, kv, idx, 0.3, w, positions=pos)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


def test_empty_token_has_zero_grad_and_finite_everything():
    smla.set_forward(None, d_v=D)
    q, kv, idx = inputs(4)
    idx[2] = -1
    out, lse = smla.SparseMLA.apply(q, kv, idx, 0.3)
    assert (out[2] == 0).all() and torch.isneginf(lse[2]).all()
    out.sum().backward()
    assert torch.isfinite(q.grad).all() and torch.isfinite(kv.grad).all()
    assert (q.grad[2] == 0).all()


def test_bf16_slime_shapes_run():
    smla.set_forward(None, d_v=D)
    q, kv, idx = inputs(5)
    qb = q.detach().bfloat16().requires_grad_(True)
    kvb = kv.detach().bfloat16().requires_grad_(True)
    out, lse = smla.SparseMLA.apply(qb, kvb, idx, 0.3)
    assert out.dtype == torch.bfloat16 and lse.dtype == torch.float32
    out.float().square().sum().backward()
    assert qb.grad.dtype == torch.bfloat16 and kvb.grad.dtype == torch.bfloat16
    assert torch.isfinite(qb.grad.float()).all()


def test_set_backward_mode_validates():
    with pytest.raises(ValueError, match="argument 'mode' must be one of"):
        smla.set_backward_mode("fast")
    with pytest.raises(ValueError, match="argument 'lse_base' must be 2"):
        smla.set_forward(None, lse_base=10)


def sink_inputs(seed=0):
    """inputs() with a sink per head, a token without a valid slot and
    per-token lengths (slots past them hold keys that must not count)."""
    q, kv, idx = inputs(seed)
    gen = torch.Generator().manual_seed(100 + seed)
    idx[4] = -1
    lengths = torch.tensor([K, 2, K, 0, K, 3], dtype=torch.int32)
    sink = torch.randn(H, generator=gen, dtype=torch.float64, requires_grad=True)
    return q, kv, idx, sink, lengths


def dense_sink_grads(q, kv, idx, sink, lengths, scale, w_out, w_lse, lse_base):
    qd, kvd, sd = (t.detach().requires_grad_(True) for t in (q, kv, sink))
    out, lse_e = dense_forward(qd, kvd, idx, scale, D, attn_sink=sd, topk_length=lengths)
    lse = lse_e * LOG2E if lse_base == 2 else lse_e
    loss = (out * w_out).sum() + ((lse * w_lse).sum() if w_lse is not None else 0.0)
    return torch.autograd.grad(loss, (qd, kvd, sd))


def keys_only_forward(q, kv, indices, sm_scale, *, d_v, q_positions=None, attn_sink=None,
                      topk_length=None):
    """A FlashMLA-like forward: the sink scales the output, the lse is over
    the keys only (natural log)."""
    out, _ = sparse_mla_fwd_reference(q, kv, indices, sm_scale, d_v=d_v, lse_base="e",
                                      attn_sink=attn_sink, topk_length=topk_length)
    _, lse_keys = sparse_mla_fwd_reference(q, kv, indices, sm_scale, d_v=d_v, lse_base="e",
                                           topk_length=topk_length)
    return out, lse_keys


@pytest.mark.parametrize("forward", ["reference-2", "reference-e", "keys-only-e"])
@pytest.mark.parametrize("lse_grad", [False, True], ids=["out_grad", "out_and_lse_grad"])
def test_sink_gets_its_gradient_through_sparse_mla(forward, lse_grad):
    """SparseMLA.apply(q, kv, idx, scale, d_v, None, attn_sink, topk_length):
    the returned lse includes the sink (a keys-only forward's is folded),
    and dq, dkv and d_sink are float64 autograd's of a softmax with the sink
    as one more logit, a gradient into lse included."""
    base = 2 if forward == "reference-2" else "e"
    if forward == "keys-only-e":
        smla.set_forward(keys_only_forward, lse_base="e", d_v=D, lse_includes_sink=False)
    else:
        smla.set_forward(None, lse_base=base, d_v=D)
    q, kv, idx, sink, lengths = sink_inputs(6)
    w = torch.randn(T, H, D, dtype=torch.float64)
    u = torch.randn(T, H, dtype=torch.float64) if lse_grad else None
    out, lse = smla.SparseMLA.apply(q, kv, idx, 0.3, None, None, sink, lengths)
    _, lse_e = dense_forward(q.detach(), kv.detach(), idx, 0.3, D, attn_sink=sink.detach(),
                             topk_length=lengths)
    torch.testing.assert_close(lse.detach(), lse_e * (LOG2E if base == 2 else 1.0))
    loss = (out * w).sum() + ((lse * u).sum() if lse_grad else 0.0)
    got = torch.autograd.grad(loss, (q, kv, sink))
    want = dense_sink_grads(q, kv, idx, sink, lengths, 0.3, w, u, base)
    for name, a, b in zip(("dq", "dkv", "d_sink"), got, want):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12, msg=name)


def test_a_sink_without_grad_is_not_differentiated():
    smla.set_forward(None, d_v=D)
    q, kv, idx, sink, lengths = sink_inputs(7)
    out, _ = smla.SparseMLA.apply(q, kv, idx, 0.3, None, None, sink.detach(), lengths)
    dq, dkv = torch.autograd.grad(out.sum(), (q, kv))
    want = dense_sink_grads(q, kv, idx, sink, lengths, 0.3, torch.ones(T, H, D,
                                                                        dtype=torch.float64),
                            None, 2)
    torch.testing.assert_close(dq, want[0], rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(dkv, want[1], rtol=1e-10, atol=1e-12)
