"""GPU tests of the binding's layer over the kernels: any head count from 1
to 128 (the library's kernel, or the next larger one with padded heads), a
caller's Delta on every kernel form (SparseMLA's gradient into lse, both
lse bases, per token, on token pairs and on the sorted walk), and strided
or misaligned arguments (one logged copy each), all against the reference.

Skipped cleanly without CUDA or without the compiled backward.
"""

import logging
import warnings

import pytest
import torch

import smla
from smla.reference import sparse_mla_bwd_reference, sparse_mla_fwd_reference
from test_gpu import pair_problem
from test_gpu_configs import compare, needs_compiled, problem, rel_fro


@needs_compiled
@pytest.mark.parametrize("heads", [1, 12, 24, 48, 96])
@pytest.mark.parametrize("lse_base", [2, "e"])
def test_any_head_count_matches_reference(heads, lse_base):
    """H outside the library's counts runs on the next larger kernel with
    zero head rows: dq, dkv and every guard counter are the reference's."""
    T = {1: 24, 12: 24, 24: 12, 48: 8, 96: 6}[heads]
    compare(problem(T, heads, positions=True, lse_base=lse_base))
    compare(problem(T, heads, lse_base=lse_base), torch.float32, torch.float32)


@needs_compiled
def test_padded_heads_are_logged(caplog):
    caplog.set_level(logging.DEBUG, logger="smla")
    p = problem(8, 12, K=77)  # a configuration no other test logs
    dq, dkv = smla.sparse_mla_bwd(**p, mode="compiled")
    assert dq.shape == p["q"].shape and dq.is_contiguous()
    text = "\n".join(r.getMessage() for r in caplog.records)
    assert "H=12 runs the kernel of 16 heads" in text
    assert "4 padded heads (the 16-head kernel)" in text


@needs_compiled
@pytest.mark.parametrize("heads", [4, 8, 16])
def test_padded_and_exact_heads_on_token_pairs(heads):
    """H = 4 runs on the H = 8 kernels, token pairs included."""
    smla.configure(pairs="on")
    p = pair_problem(T=24, K=64, overlap=0.8)
    p = _heads(p, heads)
    compare(p)


def _heads(p, heads):
    """pair_problem's call (H = 16) with its first `heads` heads."""
    p = dict(p)
    for k in ("q", "o", "do", "lse"):
        p[k] = p[k][:, :heads].contiguous()
    p["o"], p["lse"] = sparse_mla_fwd_reference(p["q"], p["kv"], p["indices"], None, d_v=512,
                                                q_positions=p["q_positions"],
                                                lse_base=p["lse_base"])
    return p


def _with_delta(p, dq_dtype=torch.bfloat16, dkv_dtype=torch.bfloat16):
    """The compiled call with a caller's delta against the reference with it."""
    g = torch.Generator().manual_seed(3)
    delta = ((p["o"].float() * p["do"].float()).sum(-1)
             + torch.randn(p["lse"].shape, generator=g).cuda())
    dq, dkv, cnt = smla.sparse_mla_bwd(**p, delta=delta, dq_dtype=dq_dtype, dkv_dtype=dkv_dtype,
                                       diagnostics=True, mode="compiled")
    rq, rkv, rcnt = sparse_mla_bwd_reference(
        p["q"], p["kv"], p["o"], p["do"], p["indices"], p["lse"], p.get("sm_scale"),
        lse_base=p["lse_base"], q_positions=p["q_positions"], delta=delta,
        dq_dtype=torch.float32, dkv_dtype=torch.float32, diagnostics=True)
    assert rel_fro(dq, rq) <= 1e-2 and rel_fro(dkv, rkv) <= 1e-2 and cnt == rcnt
    plain = smla.sparse_mla_bwd(**p, mode="compiled")
    assert rel_fro(plain[0], rq) > 1e-2  # the delta was used


@needs_compiled
@pytest.mark.parametrize("heads", [8, 12, 16, 32, 64, 128])
@pytest.mark.parametrize("lse_base", [2, "e"])
def test_given_delta_per_token(heads, lse_base):
    smla.configure(pairs="off")
    T = {8: 24, 12: 24, 16: 24, 32: 12, 64: 8, 128: 6}[heads]
    _with_delta(problem(T, heads, lse_base=lse_base, positions=lse_base == 2))


@needs_compiled
@pytest.mark.parametrize("heads", [8, 16])
def test_given_delta_on_token_pairs(heads):
    """The pair kernel reads the caller's [T, H] delta as [T / 2, 2H], in
    one launch and in chunks of 5 pairs."""
    smla.configure(pairs="on")
    p = _heads(pair_problem(T=24, K=64, overlap=0.8, lse_base="e"), heads)
    _with_delta(p)
    smla.configure(pairs_chunk=5, pairs_rows="workspace")
    _with_delta(p)


@needs_compiled
def test_given_delta_on_the_sorted_walk():
    smla.configure(walk="sorted", walk_chunk_tokens=5, walk_period=7, pairs="off")
    _with_delta(problem(24, 16), torch.float32, torch.float32)


@needs_compiled
@pytest.mark.parametrize("heads", [12, 16])
@pytest.mark.parametrize("lse_base", [2, "e"])
def test_sparse_mla_lse_gradient_stays_on_the_kernels(heads, lse_base):
    """SparseMLA with a gradient into the returned lse: the compiled backward
    takes the folded delta (no fallback to the reference) and matches the
    reference backward's gradients."""
    def forward(q, kv, idx, scale, *, d_v, q_positions=None):
        return sparse_mla_fwd_reference(q, kv, idx, scale, d_v=d_v, lse_base=lse_base,
                                        q_positions=q_positions)

    p = problem(16, heads, lse_base=lse_base)
    g = torch.Generator().manual_seed(1)
    w_out = torch.randn(p["o"].shape, generator=g).cuda()
    w_lse = torch.randn(p["lse"].shape, generator=g).cuda()
    idx = p["indices"]
    grads, calls = {}, {}
    prev = smla.set_forward(forward, lse_base=lse_base, d_v=512)
    try:
        for mode in ("compiled", "reference"):
            smla.set_backward_mode(mode)
            q = p["q"].detach().requires_grad_(True)
            kv = p["kv"].detach().requires_grad_(True)
            out, lse = smla.SparseMLA.apply(q, kv, idx, 576 ** -0.5)
            loss = (out.float() * w_out).sum() + (torch.nan_to_num(lse, posinf=0.0,
                                                                    neginf=0.0) * w_lse).sum()
            before = smla.stats()
            with warnings.catch_warnings():
                warnings.simplefilter("error")  # no fallback warning
                loss.backward()
            after = smla.stats()
            calls[mode] = {m: after[f"calls_{m}"] - before[f"calls_{m}"]
                           for m in ("compiled", "reference")}
            grads[mode] = (q.grad, kv.grad)
    finally:
        smla.set_forward(prev.fn, lse_base=prev.lse_base, d_v=prev.d_v)
        smla.set_backward_mode(None)
    assert calls["compiled"] == {"compiled": 1, "reference": 0}
    assert rel_fro(grads["compiled"][0], grads["reference"][0]) <= 1e-2
    assert rel_fro(grads["compiled"][1], grads["reference"][1]) <= 1e-2


def _strided(t):
    """`t` with the same values every other element of a wider tensor."""
    if t is None:
        return t
    view = t.new_empty(*t.shape[:-1], 2 * t.shape[-1])[..., ::2]
    view.copy_(t)
    return view


@needs_compiled
@pytest.mark.parametrize("heads", [16, 12])
def test_strided_arguments_match_contiguous(heads, caplog):
    """Strided q, kv, o, do, indices, lse and q_positions run on one logged
    copy each: dq is bit for bit the contiguous call's (no atomics), dkv up
    to the atomics' order. (A strided delta: test_given_delta_strided.)"""
    smla.configure(pairs="off")
    p = problem(24, heads, positions=True)
    want = smla.sparse_mla_bwd(**p, mode="compiled")
    caplog.set_level(logging.DEBUG, logger="smla")
    s = {k: _strided(v) if isinstance(v, torch.Tensor) else v for k, v in p.items()}
    assert not any(t.is_contiguous() for t in s.values() if isinstance(t, torch.Tensor))
    got = smla.sparse_mla_bwd(**s, mode="compiled")
    assert torch.equal(got[0], want[0]) and rel_fro(got[1], want[1]) < 1e-3
    if heads == 16:
        text = "\n".join(r.getMessage() for r in caplog.records)
        for name in ("q", "kv", "o", "do", "indices", "lse", "q_positions"):
            assert f"argument '{name}' has strides" in text, name


@needs_compiled
def test_given_delta_strided():
    smla.configure(pairs="off")
    p = problem(24, 16)
    delta = (p["o"].float() * p["do"].float()).sum(-1) + 0.5
    want = smla.sparse_mla_bwd(**p, delta=delta, mode="compiled")
    got = smla.sparse_mla_bwd(**p, delta=_strided(delta), mode="compiled")
    assert torch.equal(got[0], want[0]) and rel_fro(got[1], want[1]) < 1e-3


@needs_compiled
def test_misaligned_argument_is_copied():
    p = problem(8, 16)
    want = smla.sparse_mla_bwd(**p, mode="compiled")
    q = p["q"]
    shifted = torch.empty(q.numel() + 1, dtype=q.dtype, device=q.device)[1:].view(q.shape)
    shifted.copy_(q)
    got = smla.sparse_mla_bwd(**dict(p, q=shifted), mode="compiled")
    assert torch.equal(got[0], want[0])


@needs_compiled
def test_torch_compile_with_padded_heads():
    """The fake implementation gives the caller's H; the compiled graph
    runs the padded kernel."""
    p = problem(8, 12)
    args = [p[k] for k in ("q", "kv", "o", "do", "indices", "lse")]

    def f(*a):
        return smla.sparse_mla_bwd(*a, mode="compiled")

    eager = f(*args)
    compiled = torch.compile(f, fullgraph=True)(*args)
    assert compiled[0].shape == (8, 12, 576) and torch.equal(compiled[0], eager[0])
