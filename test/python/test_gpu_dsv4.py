"""GPU tests of DeepSeek-V4's backward on the kernels: D = 512, Dt = 0 (one
kv row is K and V) at H = 64 and 128 with an attention sink and per-token
lengths, through sparse_mla_bwd, the entry points shaped like cuDNN's and
TileLang's calls (smla.dsv4) and SparseMLA (the lse gradient and the sink
together), against the reference: dq, dkv, d_sink and every guard counter,
bf16 and fp32 outputs, on adversarial indices (padding, indices past S_kv
and +-2^31, duplicates, valid keys past a token's length, a token without a
valid key whose lse is its sink, a head without a sink, dead rows).

Skipped cleanly without CUDA or without the compiled backward.
"""

import math
import warnings

import pytest
import torch

import smla
from smla.contract import lse_with_sink
from smla.reference import sparse_mla_bwd_reference, sparse_mla_fwd_reference
from test_gpu_configs import needs_compiled, rel_fro

D = 512
TOKENS = {64: 8, 128: 6}
F32 = (torch.float32, torch.float32)
BF16 = (torch.bfloat16, torch.bfloat16)
# fp32 Delta summed in another order, the same fp32 formula: d_sink is the
# reference's to far below the bf16 outputs' tolerance.
SINK_TOL = 1e-3


def v4_indices(T, S, K, gen, lengths=True):
    """int32 [T, 1, K] over S keys with the adversarial slots, token T // 2
    without a valid key, and [T] lengths from 0 to K + 2 (token 0 stops at
    K // 3 before valid keys, token 1 has none)."""
    idx = torch.randint(0, S, (T, 1, K), generator=gen)
    r = torch.rand(T, 1, K, generator=gen)
    idx = torch.where(r < 0.1, -1, idx)
    idx = torch.where((r > 0.1) & (r < 0.15), S + 5, idx)
    idx = torch.where((r > 0.15) & (r < 0.17), -(2 ** 31), idx)
    idx = torch.where((r > 0.17) & (r < 0.19), 2 ** 31 - 1, idx)
    idx[:, :, -1] = idx[:, :, 0]
    idx[T // 2] = -1
    n = None
    if lengths:
        n = torch.randint(0, K + 3, (T,), generator=gen)
        n[0], n[1] = K // 3, 0
        n = n.to(torch.int32)
    return idx.to(torch.int32), n


def v4_sink(H, gen):
    """fp32 [H] sinks, the last head without one (-inf)."""
    sink = torch.randn(H, generator=gen) + 1.0
    sink[-1] = -math.inf
    return sink


def v4_problem(T, H, S=700, K=320, *, lse_base=2, positions=False, seed=0, device="cuda"):
    """sparse_mla_bwd's arguments at D = 512, Dt = 0, G = 1 with a sink and
    lengths; lse from the reference forward (including the sink), with a
    +inf and a NaN row planted."""
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(T, H, D, generator=gen).to(device, torch.bfloat16)
    kv = torch.randn(S, 1, D, generator=gen).to(device, torch.bfloat16)
    do = torch.randn(T, H, D, generator=gen).to(device, torch.bfloat16)
    idx, n = v4_indices(T, S, K, gen)
    sink = v4_sink(H, gen).to(device)
    idx, n = idx.to(device), n.to(device)
    qp = (torch.arange(T, dtype=torch.int32) + S // 2).to(device) if positions else None
    o, lse = sparse_mla_fwd_reference(q, kv, idx, None, d_v=D, q_positions=qp,
                                      lse_base=lse_base, attn_sink=sink, topk_length=n)
    lse[2, 0] = math.inf
    lse[3, :] = math.nan
    return dict(q=q, kv=kv, o=o, do=do, indices=idx, lse=lse, q_positions=qp,
                lse_base=lse_base, attn_sink=sink, topk_length=n)


def reference(p, **kw):
    """(dq, dkv, d_sink, counters) of the fp32 reference."""
    return sparse_mla_bwd_reference(
        p["q"], p["kv"], p["o"], p["do"], p["indices"], p["lse"], p.get("sm_scale"),
        lse_base=p["lse_base"], q_positions=p["q_positions"], attn_sink=p["attn_sink"],
        topk_length=p["topk_length"], dq_dtype=torch.float32, dkv_dtype=torch.float32,
        diagnostics=True, **kw)


def assert_matches(got, want, dq_dtype=torch.bfloat16, dkv_dtype=torch.bfloat16):
    """got = (dq, dkv, d_sink, counters) against the reference's."""
    dq, dkv, d_sink, cnt = got
    assert dq.dtype == dq_dtype and dkv.dtype == dkv_dtype and d_sink.dtype == torch.float32
    for name, a, b, tol in (("dq", dq, want[0], 1e-2), ("dkv", dkv, want[1], 1e-2),
                            ("d_sink", d_sink, want[2], SINK_TOL)):
        assert torch.isfinite(a.float()).all(), name
        assert rel_fro(a, b) <= tol, (name, rel_fro(a, b))
    assert cnt == want[3]


@needs_compiled
@pytest.mark.parametrize("heads", sorted(TOKENS))
@pytest.mark.parametrize("lse_base", [2, "e"])
@pytest.mark.parametrize("positions", [False, True])
@pytest.mark.parametrize("dtypes", [BF16, F32], ids=["bf16", "f32"])
def test_dsv4_configurations_match_reference(heads, lse_base, positions, dtypes):
    """Every D = 512, Dt = 0 kernel of the library (H = 64, 128; with and
    without positions; bf16 and fp32 outputs) with the sink and lengths."""
    p = v4_problem(TOKENS[heads], heads, lse_base=lse_base, positions=positions)
    got = smla.sparse_mla_bwd(**p, dq_dtype=dtypes[0], dkv_dtype=dtypes[1], diagnostics=True,
                              mode="compiled")
    assert_matches(got, reference(p), *dtypes)


@needs_compiled
@pytest.mark.parametrize("heads", [48, 100])
def test_padded_heads_with_a_sink(heads):
    """H = 48 and 100 run on the 64- and 128-head kernels: d_sink has the
    caller's H entries, the padded heads add nothing anywhere."""
    p = v4_problem(6, heads, lse_base="e")
    got = smla.sparse_mla_bwd(**p, diagnostics=True, mode="compiled")
    assert got[2].shape == (heads,)
    assert_matches(got, reference(p))


@needs_compiled
@pytest.mark.parametrize("heads", sorted(TOKENS))
def test_checked_mode_with_a_sink(heads):
    p = v4_problem(TOKENS[heads], heads, seed=1)
    got = smla.sparse_mla_bwd(**p, diagnostics=True, mode="checked")
    assert got[3].pop("repaired_tokens") == 0
    assert_matches(got, reference(p))


@needs_compiled
@pytest.mark.parametrize("heads", sorted(TOKENS))
def test_slots_past_the_length_are_not_read(heads):
    """Valid keys past each token's length point at NaN kv rows: reading
    them would make dq NaN; the kernel skips them."""
    p = v4_problem(TOKENS[heads], heads, S=400, seed=2)
    S, K = p["kv"].shape[0], p["indices"].shape[2]
    poison = torch.arange(S - 8, S, device="cuda", dtype=torch.int32)
    slot = torch.arange(K, device="cuda")
    past = slot.view(1, 1, K) >= p["topk_length"].view(-1, 1, 1)
    p["indices"] = torch.where(past, poison[slot % 8].view(1, 1, K), p["indices"])
    keep = ~torch.isin(p["indices"], poison) | past
    p["indices"] = torch.where(keep, p["indices"], -1).to(torch.int32)
    p["kv"][S - 8:] = math.nan
    got = smla.sparse_mla_bwd(**p, diagnostics=True, mode="compiled")
    assert_matches(got, reference(p))


def flat_problem(T, H, S=700, K=320, *, seed=0, device="cuda"):
    """sparse_attention_backward's arguments (cuDNN's layout): flat kv
    [S, 512], topk_idxs [T, K], the natural-log lse over the keys only."""
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(T, H, D, generator=gen).to(device, torch.bfloat16)
    kv = torch.randn(S, D, generator=gen).to(device, torch.bfloat16)
    dout = torch.randn(T, H, D, generator=gen).to(device, torch.bfloat16)
    idx, n = v4_indices(T, S, K, gen)
    sink = v4_sink(H, gen).to(device)
    idx, n = idx[:, 0].contiguous().to(device), n.to(device)
    out, _ = sparse_mla_fwd_reference(q, kv[:, None], idx[:, None], None, d_v=D, lse_base="e",
                                      attn_sink=sink, topk_length=n)
    _, lse_keys = sparse_mla_fwd_reference(q, kv[:, None], idx[:, None], None, d_v=D,
                                           lse_base="e", topk_length=n)
    lse_keys[2, 0] = math.inf  # FlashMLA's mark of a row without keys: dead
    return dict(q=q, kv=kv, out=out, dout=dout, lse=lse_keys, attn_sink=sink, topk_idxs=idx,
                topk_length=n)


@needs_compiled
@pytest.mark.parametrize("heads", sorted(TOKENS))
@pytest.mark.parametrize("dtypes", [BF16, F32], ids=["bf16", "f32"])
def test_cudnn_shaped_entry_on_the_kernels(heads, dtypes):
    f = flat_problem(TOKENS[heads], heads)
    got = smla.sparse_attention_backward(**f, dq_dtype=dtypes[0], dkv_dtype=dtypes[1],
                                         diagnostics=True, mode="compiled")
    assert got[1].shape == f["kv"].shape
    p = dict(q=f["q"], kv=f["kv"][:, None], o=f["out"], do=f["dout"],
             indices=f["topk_idxs"][:, None], lse=lse_with_sink(f["lse"], f["attn_sink"], "e"),
             q_positions=None, lse_base="e", attn_sink=f["attn_sink"],
             topk_length=f["topk_length"])
    want = reference(p)
    assert_matches((got[0], got[1][:, None], got[2], got[3]), want, *dtypes)
    grads = smla.sparse_attention_backward(**f, mode="compiled")
    assert torch.equal(grads["dq"], grads[0]) and grads["d_sink"].shape == (heads,)


def batched_problem(B, S, H, S_kv=300, K=160, *, seed=0, device="cuda"):
    """sparse_mqa_bwd_interface's arguments (TileLang's layout): q
    [B, S, H, 512], kv [B, S_kv, 512], topk_idxs into each sequence's kv,
    the base-2 lse including the sink."""
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(B, S, H, D, generator=gen).to(device, torch.bfloat16)
    kv = torch.randn(B, S_kv, D, generator=gen).to(device, torch.bfloat16)
    do = torch.randn(B, S, H, D, generator=gen).to(device, torch.bfloat16)
    idx = torch.stack([v4_indices(S, S_kv, K, gen, lengths=False)[0][:, 0] for _ in range(B)])
    idx[1, :, 1] = S_kv  # the next sequence's first row in a flat kv: invalid here
    sink = v4_sink(H, gen).to(device)
    idx = idx.to(device)
    outs, lses = [], []
    for b in range(B):
        o, lse = sparse_mla_fwd_reference(q[b], kv[b][:, None], idx[b][:, None], None, d_v=D,
                                          lse_base=2, attn_sink=sink)
        outs.append(o)
        lses.append(lse)
    return dict(q=q, kv=kv, attn_sink=sink, o=torch.stack(outs), do=do, topk_idxs=idx,
                lse=torch.stack(lses))


@needs_compiled
@pytest.mark.parametrize("heads", sorted(TOKENS))
@pytest.mark.parametrize("dtypes", [BF16, F32], ids=["bf16", "f32"])
def test_tilelang_shaped_entry_on_the_kernels(heads, dtypes):
    t = batched_problem(2, TOKENS[heads] // 2, heads)
    dq, dkv, d_sink, cnt = smla.sparse_mqa_bwd_interface(
        **t, dq_dtype=dtypes[0], dkv_dtype=dtypes[1], diagnostics=True, mode="compiled")
    assert dq.shape == t["q"].shape and dkv.shape == t["kv"].shape
    want_sink, want_cnt = 0, None
    for b in range(2):
        p = dict(q=t["q"][b], kv=t["kv"][b][:, None], o=t["o"][b], do=t["do"][b],
                 indices=t["topk_idxs"][b][:, None], lse=t["lse"][b], q_positions=None,
                 lse_base=2, attn_sink=t["attn_sink"], topk_length=None)
        rq, rkv, rsink, rcnt = reference(p)
        assert rel_fro(dq[b], rq) <= 1e-2 and rel_fro(dkv[b], rkv[:, 0]) <= 1e-2
        want_sink = want_sink + rsink
        want_cnt = rcnt if want_cnt is None else {k: want_cnt[k] + v for k, v in rcnt.items()}
    assert dq.dtype == dtypes[0] and dkv.dtype == dtypes[1]
    assert rel_fro(d_sink, want_sink) <= SINK_TOL and cnt == want_cnt


@needs_compiled
@pytest.mark.parametrize("heads", sorted(TOKENS))
@pytest.mark.parametrize("lse_base", [2, "e"])
def test_sparse_mla_lse_gradient_and_sink_on_the_kernels(heads, lse_base):
    """SparseMLA.apply(..., attn_sink, topk_length) with a gradient into the
    returned lse: the compiled backward (no fallback) gives dq, dkv and
    d_sink of the reference backward."""
    p = v4_problem(TOKENS[heads], heads, lse_base=lse_base, seed=3)
    g = torch.Generator().manual_seed(1)
    w_out = torch.randn(p["o"].shape, generator=g).cuda()
    w_lse = torch.randn(p["lse"].shape, generator=g).cuda()
    grads, calls = {}, {}
    prev = smla.set_forward(None, lse_base=lse_base, d_v=D)
    try:
        for mode in ("compiled", "reference"):
            smla.set_backward_mode(mode)
            q = p["q"].detach().requires_grad_(True)
            kv = p["kv"].detach().requires_grad_(True)
            sink = p["attn_sink"].detach().requires_grad_(True)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", smla.SmlaSlowPathWarning)  # the forward's
                out, lse = smla.SparseMLA.apply(q, kv, p["indices"], D ** -0.5, None, None,
                                                sink, p["topk_length"])
            loss = (out.float() * w_out).sum() + (torch.nan_to_num(lse, posinf=0.0,
                                                                    neginf=0.0) * w_lse).sum()
            before = smla.stats()
            with warnings.catch_warnings():
                warnings.simplefilter("error")  # no fallback warning
                loss.backward()
            after = smla.stats()
            calls[mode] = {m: after[f"calls_{m}"] - before[f"calls_{m}"]
                           for m in ("compiled", "reference")}
            grads[mode] = (q.grad, kv.grad, sink.grad)
    finally:
        smla.set_forward(prev.fn, lse_base=prev.lse_base, d_v=prev.d_v,
                         lse_includes_sink=prev.lse_includes_sink)
        smla.set_backward_mode(None)
    assert calls["compiled"] == {"compiled": 1, "reference": 0}
    for i, tol in enumerate((1e-2, 1e-2, SINK_TOL)):
        assert rel_fro(grads["compiled"][i], grads["reference"][i]) <= tol, i


@needs_compiled
def test_dsv4_like_indices_through_the_cudnn_shaped_entry():
    """DeepSeek-V4's own layout (smla.indices.dsv4_like: a window of token
    rows, then compressed keys at rows T + c, valid prefix, topk_length)."""
    T, H, window, comp = 64, 64, 32, 96
    idx, n = smla.indices.dsv4_like(T, window=window, compressed_topk=comp, ratio=4,
                                    device="cuda")
    gen = torch.Generator().manual_seed(5)
    S = T + T // 4
    q = torch.randn(T, H, D, generator=gen).cuda().bfloat16()
    kv = torch.randn(S, D, generator=gen).cuda().bfloat16()
    dout = torch.randn(T, H, D, generator=gen).cuda().bfloat16()
    sink = torch.randn(H, generator=gen).cuda()
    out, lse = sparse_mla_fwd_reference(q, kv[:, None], idx, None, d_v=D, lse_base="e",
                                        attn_sink=sink, topk_length=n)
    _, lse_keys = sparse_mla_fwd_reference(q, kv[:, None], idx, None, d_v=D, lse_base="e",
                                           topk_length=n)
    got = smla.sparse_attention_backward(q, kv, out, dout, lse_keys, sink, idx[:, 0],
                                         topk_length=n, diagnostics=True, mode="compiled")
    p = dict(q=q, kv=kv[:, None], o=out, do=dout, indices=idx, lse=lse, q_positions=None,
             lse_base="e", attn_sink=sink, topk_length=n)
    assert_matches((got[0], got[1][:, None], got[2], got[3]), reference(p))
    assert got[3]["invalid_slots"] == 0  # the padding lies past each length
