"""The entry points shaped like DeepSeek-V4's trainers' calls (smla.dsv4),
each under its client's convention against float64 autograd of a softmax
with the sink as one more logit (naive_math.dense_forward), and their
argument messages in every mode. CPU only: mode "reference" computes in
float64; "compiled" and "checked" stop at the device rule after every other
check (test_gpu_dsv4.py runs the kernels)."""

import math
import re

import pytest
import torch

import smla
from cases import adversarial_indices
from naive_math import dense_forward
from smla.contract import LOG2E

F64 = torch.float64


def flat_problem(T=7, H=4, S=15, K=6, D=12, Dt=0, seed=0):
    """cuDNN's layout: q [T, H, D+Dt], kv [S, D+Dt] (K = V = kv[:, :D]),
    topk_idxs [T, K] with -1, >= S, +-2^31 and duplicates, token 2 without
    a valid key, per-token lengths; the sink; w the gradient of out."""
    gen = torch.Generator().manual_seed(seed)
    W = D + Dt
    q = torch.randn(T, H, W, generator=gen, dtype=F64, requires_grad=True)
    kv = torch.randn(S, W, generator=gen, dtype=F64, requires_grad=True)
    sink = torch.randn(H, generator=gen, dtype=F64, requires_grad=True)
    idx = adversarial_indices(T, 1, K, S, gen)[:, 0]
    idx[2] = -1
    lengths = torch.randint(0, K + 2, (T,), generator=gen, dtype=torch.int32)
    lengths[0] = 3
    w = torch.randn(T, H, D, generator=gen, dtype=F64)
    return dict(q=q, kv=kv, sink=sink, idx=idx, lengths=lengths, w=w, D=D, scale=W ** -0.5)


def flat_autograd(p):
    """The forward (out with the sink, lse over the keys only, natural log:
    FlashMLA's) and float64 autograd's (dq, dkv, d_sink) of sum(out * w)."""
    kv3 = p["kv"].unsqueeze(1)
    out, _ = dense_forward(p["q"], kv3, p["idx"][:, None], p["scale"], p["D"],
                           attn_sink=p["sink"], topk_length=p["lengths"])
    _, lse_keys = dense_forward(p["q"].detach(), kv3.detach(), p["idx"][:, None], p["scale"],
                                p["D"], topk_length=p["lengths"])
    grads = torch.autograd.grad((out * p["w"]).sum(), (p["q"], p["kv"], p["sink"]))
    return out.detach(), lse_keys, grads


def call_flat(p, out, lse, **kw):
    return smla.sparse_attention_backward(
        p["q"].detach(), p["kv"].detach(), out, p["w"], lse, p["sink"].detach(), p["idx"],
        **{"softmax_scale": p["scale"], "topk_length": p["lengths"], "mode": "reference", **kw})


@pytest.mark.parametrize("Dt", [0, 4], ids=["Dt0", "V_first_D_of_wider_rows"])
def test_cudnn_shaped_entry_matches_autograd_given_the_keys_only_lse(Dt):
    p = flat_problem(Dt=Dt)
    out, lse_keys, want = flat_autograd(p)
    assert torch.isneginf(lse_keys[2]).all()  # no valid key: the sink's row
    got = call_flat(p, out, lse_keys)
    assert isinstance(got, smla.dsv4.SparseAttentionGrads)
    assert got["dkv"].shape == p["kv"].shape and got["d_sink"].shape == (4,)
    for name, a, b in zip(("dq", "dkv", "d_sink"), got, want):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12, msg=name)
        assert torch.equal(got[name], a)


def test_cudnn_shaped_entry_takes_the_keys_only_lse_not_the_sink_inclusive_one():
    """Given the sink-inclusive lse the wrapper would fold the sink twice:
    the gradients are off (as cuDNN's are, 8-31% in PEERS.md)."""
    p = flat_problem(seed=1)
    out, lse_keys, want = flat_autograd(p)
    inclusive = torch.logaddexp(lse_keys, p["sink"].detach())
    wrong = call_flat(p, out, inclusive)
    for a, b in zip(wrong, want):
        assert float((a - b).norm() / b.norm()) > 1e-3


def test_cudnn_shaped_entry_default_scale_and_flashmla_lonely_rows():
    """softmax_scale defaults to (D+Dt)^-0.5; FlashMLA writes +inf for a row
    without keys: dead there (no dq, no d_sink), which is the gradient too
    since that row's output is 0."""
    p = flat_problem(seed=2, D=16)
    out, lse_keys, want = flat_autograd(p)
    lse = torch.where(torch.isneginf(lse_keys), math.inf, lse_keys)
    got = call_flat(p, out, lse, softmax_scale=None)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)
    *_, cnt = call_flat(p, out, lse, diagnostics=True)
    assert cnt["dead_rows"] == int(torch.isneginf(lse_keys).sum()) >= 4  # token 2's, ...


def batched_problem(B=3, S=5, H=4, S_kv=9, K=6, D=8, seed=0):
    """TileLang's layout: q [B, S, H, D], kv [B, S_kv, D], topk_idxs
    [B, S, K] into the sequence's own kv, with -1 and S_kv..S_kv+2 (valid
    rows of the next sequence in a flat kv: they must stay invalid) and a
    token without a valid key."""
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(B, S, H, D, generator=gen, dtype=F64, requires_grad=True)
    kv = torch.randn(B, S_kv, D, generator=gen, dtype=F64, requires_grad=True)
    sink = torch.randn(H, generator=gen, dtype=F64, requires_grad=True)
    idx = torch.stack([adversarial_indices(S, 1, K, S_kv, gen)[:, 0] for _ in range(B)])
    idx[0, 1] = -1
    idx[min(1, B - 1), :, 1] = S_kv
    w = torch.randn(B, S, H, D, generator=gen, dtype=F64)
    return dict(q=q, kv=kv, sink=sink, idx=idx, w=w, scale=D ** -0.5)


def batched_autograd(p):
    """Per sequence: out and the base-2 lse including the sink (TileLang's
    DeepSeek-V4 forward), and autograd's grads of sum(out * w) over all."""
    outs, lses = [], []
    for b in range(p["q"].shape[0]):
        out, lse_e = dense_forward(p["q"][b], p["kv"][b].unsqueeze(1), p["idx"][b][:, None],
                                   p["scale"], p["q"].shape[-1], attn_sink=p["sink"])
        outs.append(out)
        lses.append(lse_e * LOG2E)
    out = torch.stack(outs)
    grads = torch.autograd.grad((out * p["w"]).sum(), (p["q"], p["kv"], p["sink"]))
    return out.detach(), torch.stack(lses).detach(), grads


def test_tilelang_shaped_entry_matches_autograd_in_one_call(monkeypatch):
    p = batched_problem()
    out, lse2, want = batched_autograd(p)
    calls = []
    run = smla.dsv4.run_checked_call
    monkeypatch.setattr(smla.dsv4, "run_checked_call",
                        lambda *a: calls.append(a[0].shape) or run(*a))
    got = smla.sparse_mqa_bwd_interface(p["q"].detach(), p["kv"].detach(), p["sink"].detach(),
                                        out, p["w"], p["idx"], lse2, p["scale"],
                                        mode="reference")
    assert calls == [(15, 4, 8)]  # the batch as one call of B * S tokens
    assert [t.shape for t in got] == [p["q"].shape, p["kv"].shape, (4,)]
    for name, a, b in zip(("dq", "dkv", "d_attn_sink"), got, want):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12, msg=name)


def test_tilelang_shaped_entry_default_scale_and_counters():
    p = batched_problem(B=2, seed=3)
    p["scale"] = p["q"].shape[-1] ** -0.5
    out, lse2, want = batched_autograd(p)
    *got, cnt = smla.sparse_mqa_bwd_interface(
        p["q"].detach(), p["kv"].detach(), p["sink"].detach(), out, p["w"], p["idx"], lse2,
        mode="reference", diagnostics=True)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)
    invalid = ~((p["idx"] >= 0) & (p["idx"] < p["kv"].shape[1]))
    assert cnt["invalid_slots"] == int(invalid.sum()) and cnt["dead_rows"] == 0


# Argument messages: (entry, argument, how to break it, exception, message,
# the reference's message: None for the same one, "accepted" where it takes it).

def flat_args():
    """A valid bf16 call of sparse_attention_backward, by argument name."""
    g = torch.Generator().manual_seed(0)
    bf16 = dict(dtype=torch.bfloat16)
    return dict(q=torch.randn(4, 4, 12, generator=g).to(**bf16),
                kv=torch.randn(8, 12, generator=g).to(**bf16),
                out=torch.randn(4, 4, 12, generator=g).to(**bf16),
                dout=torch.randn(4, 4, 12, generator=g).to(**bf16),
                lse=torch.randn(4, 4, generator=g) + 5, attn_sink=torch.randn(4, generator=g),
                topk_idxs=torch.randint(-1, 8, (4, 3), generator=g, dtype=torch.int32),
                softmax_scale=0.3,
                topk_length=torch.tensor([3, 0, 2, 5], dtype=torch.int32))


def batched_args():
    """A valid bf16 call of sparse_mqa_bwd_interface, by argument name."""
    g = torch.Generator().manual_seed(1)
    bf16 = dict(dtype=torch.bfloat16)
    return dict(q=torch.randn(2, 3, 4, 8, generator=g).to(**bf16),
                kv=torch.randn(2, 5, 8, generator=g).to(**bf16),
                attn_sink=torch.randn(4, generator=g),
                o=torch.randn(2, 3, 4, 8, generator=g).to(**bf16),
                do=torch.randn(2, 3, 4, 8, generator=g).to(**bf16),
                topk_idxs=torch.randint(-1, 5, (2, 3, 3), generator=g, dtype=torch.int32),
                lse=torch.randn(2, 3, 4, generator=g) + 5, sm_scale=0.3)


ENTRIES = {"cudnn": (smla.sparse_attention_backward, flat_args, "smla.sparse_attention_backward"),
           "tilelang": (smla.sparse_mqa_bwd_interface, batched_args,
                        "smla.sparse_mqa_bwd_interface")}
OK = "accepted"
BAD = [
    ("cudnn", "attn_sink", lambda t: None, TypeError,
     "argument 'attn_sink' must be a torch.Tensor, got NoneType", None),
    ("cudnn", "attn_sink", lambda t: t.bfloat16(), TypeError,
     "argument 'attn_sink' must have dtype torch.float32, got torch.bfloat16",
     "argument 'attn_sink' must have dtype torch.float32 or torch.float64, got torch.bfloat16"),
    ("cudnn", "attn_sink", lambda t: t.double(), TypeError,
     "argument 'attn_sink' must have dtype torch.float32, got torch.float64", OK),
    ("cudnn", "attn_sink", lambda t: torch.zeros(5), ValueError,
     "argument 'attn_sink' must have shape (4,) [H], got (5,)", None),
    ("cudnn", "attn_sink", lambda t: t[None], ValueError,
     "argument 'attn_sink' must have 1 dimension [H], got 2 (shape (1, 4))", None),
    ("cudnn", "topk_length", lambda t: t.long(), TypeError,
     "argument 'topk_length' must have dtype torch.int32, got torch.int64", None),
    ("cudnn", "topk_length", lambda t: t[:3], ValueError,
     "argument 'topk_length' must have shape (4,) [T], got (3,)", None),
    ("cudnn", "topk_length", lambda t: t.to("meta"), ValueError,
     "argument 'topk_length' must be on the device of 'q' (cpu), got meta", None),
    ("cudnn", "kv", lambda t: t[:, None], ValueError,
     "argument 'kv' must have 2 dimensions [S_kv, D+Dt], got 3 (shape (8, 1, 12))", None),
    ("cudnn", "topk_idxs", lambda t: t[:, None], ValueError,
     "argument 'topk_idxs' must have 2 dimensions [T, K], got 3 (shape (4, 1, 3))", None),
    ("cudnn", "topk_idxs", lambda t: t[:3], ValueError,
     "argument 'topk_idxs' must have shape [T, K] with T=4 (from 'q') and K >= 1, got (3, 3)",
     None),
    ("cudnn", "topk_idxs", lambda t: t.long(), TypeError,
     "argument 'topk_idxs' must have dtype torch.int32, got torch.int64", None),
    ("cudnn", "out", lambda t: t.float(), TypeError,
     "argument 'out' must have dtype torch.bfloat16, got torch.float32",
     "argument 'out' must have the dtype of 'q' (torch.bfloat16), got torch.float32"),
    ("cudnn", "dout", lambda t: t[..., :8], ValueError,
     "argument 'dout' must have shape (4, 4, 12) (the shape of 'out'), got (4, 4, 8)", None),
    ("cudnn", "lse", lambda t: t[:, :3], ValueError,
     "argument 'lse' must have shape (4, 4) [T, H], got (4, 3)", None),
    ("cudnn", "softmax_scale", lambda t: -1.0, ValueError,
     "argument 'softmax_scale' must be a finite positive number that is normal in float32",
     None),
    ("tilelang", "attn_sink", lambda t: t.half(), TypeError,
     "argument 'attn_sink' must have dtype torch.float32, got torch.float16",
     "argument 'attn_sink' must have dtype torch.float32 or torch.float64, got torch.float16"),
    ("tilelang", "attn_sink", lambda t: t[:2], ValueError,
     "argument 'attn_sink' must have shape (4,) [H], got (2,)", None),
    ("tilelang", "kv", lambda t: t[:1], ValueError,
     "argument 'kv' must have shape [B, S_kv, D+Dt] with B=2 (from 'q'), got (1, 5, 8)", None),
    ("tilelang", "topk_idxs", lambda t: t[:, :2], ValueError,
     "argument 'topk_idxs' must have shape [B, S, K] with B=2, S=3 (from 'q') and K >= 1, "
     "got (2, 2, 3)", None),
    ("tilelang", "topk_idxs", lambda t: t.short(), TypeError,
     "argument 'topk_idxs' must have dtype torch.int32, got torch.int16", None),
    ("tilelang", "lse", lambda t: t[..., :3], ValueError,
     "argument 'lse' must have shape (2, 3, 4) [B, S, H], got (2, 3, 3)", None),
    ("tilelang", "do", lambda t: t.float(), TypeError,
     "argument 'do' must have dtype torch.bfloat16, got torch.float32",
     "argument 'do' must have the dtype of 'q' (torch.bfloat16), got torch.float32"),
    ("tilelang", "sm_scale", lambda t: float("nan"), ValueError,
     "argument 'sm_scale' must be a finite positive number that is normal in float32", None),
]


@pytest.mark.parametrize("mode", ["compiled", "checked", "reference"])
@pytest.mark.parametrize("entry,name,breaker,exc,message,reference", BAD,
                         ids=[f"{b[0]}-{b[1]}-{i}" for i, b in enumerate(BAD)])
def test_argument_messages_name_the_clients_arguments(mode, entry, name, breaker, exc, message,
                                                      reference):
    fn, make, context = ENTRIES[entry]
    a = make()
    a[name] = breaker(a[name])
    if mode == "reference":
        if reference == OK:
            res = fn(**a, mode=mode)
            assert res[0].shape == a["q"].shape
            return
        message = reference or message
    with pytest.raises(exc, match="^" + re.escape(f"{context}: {message}")):
        fn(**a, mode=mode)


@pytest.mark.parametrize("entry", sorted(ENTRIES))
@pytest.mark.parametrize("mode", ["compiled", "checked"])
def test_a_valid_cpu_call_stops_at_the_device_rule(entry, mode):
    fn, make, context = ENTRIES[entry]
    with pytest.raises(ValueError, match=re.escape(f"{context}: argument 'q' must be a CUDA "
                                                   "tensor")):
        fn(**make(), mode=mode)
    dq, dkv, d_sink = fn(**make(), mode="reference")
    assert dq.dtype == torch.bfloat16 and dkv.shape == make()["kv"].shape
    assert d_sink.dtype == torch.float32 and torch.isfinite(d_sink).all()


def test_one_sequence_runs_on_its_own_indices(monkeypatch):
    """B = 1: the indices are the flat kv's already (no copy), and the
    result is the flat call's."""
    p = batched_problem(B=1, seed=4)
    out, lse2, want = batched_autograd(p)
    seen = []
    run = smla.dsv4.run_checked_call
    monkeypatch.setattr(smla.dsv4, "run_checked_call",
                        lambda *a: seen.append(a[4]) or run(*a))
    got = smla.sparse_mqa_bwd_interface(p["q"].detach(), p["kv"].detach(), p["sink"].detach(),
                                        out, p["w"], p["idx"], lse2, p["scale"],
                                        mode="reference")
    assert seen[0].data_ptr() == p["idx"].data_ptr()
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)
