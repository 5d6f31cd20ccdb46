"""No host synchronisation in steady state (python/csrc/TokenPairs.h,
SlotWalk.h): after a warm-up, calls whose T (and S_kv) change every call,
as in packed training, run under torch.cuda.set_sync_debug_mode("error"),
and the host never waits for the device (checked with a long GPU sleep
queued first, which also catches waits the debug mode does not see, such
as an event synchronisation). The choices the calls follow are measured
again in the background (every 8th call of a key) and the results still
match the reference. Skipped without CUDA or the compiled backward.
"""

import pytest
import torch

import smla
from smla import _compiled
from smla.reference import sparse_mla_bwd_reference, sparse_mla_fwd_reference

needs_compiled = pytest.mark.skipif(
    not (torch.cuda.is_available() and _compiled.is_available()),
    reason="needs a CUDA device the compiled backward runs on",
)


def packed_call(T, S, H, K, seed):
    """One micro-batch of packed training: T queries over S_kv = S keys,
    DSA-like overlapping top-k (so token pairs pay at H <= 16), positions."""
    gen = torch.Generator().manual_seed(seed)
    D, Dt = 512, 64
    q = torch.randn(T, H, D + Dt, generator=gen).to("cuda", torch.bfloat16)
    kv = torch.randn(S, 1, D + Dt, generator=gen).to("cuda", torch.bfloat16)
    do = torch.randn(T, H, D, generator=gen).to("cuda", torch.bfloat16)
    pos = torch.arange(T, dtype=torch.int32) + (S - T)
    base = torch.randperm(S, generator=gen)[: K + 64]
    idx = torch.stack([base[torch.randperm(K + 64, generator=gen)[:K]] for _ in range(T)])
    idx = torch.where(idx <= pos[:, None], idx, -1).view(T, 1, K).to("cuda", torch.int32)
    pos = pos.cuda()
    o, lse = sparse_mla_fwd_reference(q, kv, idx, None, d_v=D, q_positions=pos)
    return dict(q=q, kv=kv, o=o, do=do, indices=idx, lse=lse, q_positions=pos)


def run(p):
    return smla.sparse_mla_bwd(**p, mode="compiled")


@needs_compiled
@pytest.mark.parametrize("heads", [8, 16, 32, 128])
def test_packed_training_never_synchronises(heads, monkeypatch):
    # The sorted-walk choice measures only when dkv exceeds the L2 size;
    # assume a small L2 so that it is measured here too.
    smla.configure(walk_l2_bytes=1 << 20, pairs=None, walk=None, walk_period=None)
    K = 256
    sizes = [(T, T + 700) for T in range(256, 256 + 37 * 20, 37)]  # odd and even T
    calls = [packed_call(T, S, heads, K, seed) for seed, (T, S) in enumerate(sizes)]
    # Warm-up: a call on an unmeasured key may wait for its measurement; one call of
    # each size also leaves the caching allocator holding the outputs' sizes.
    for p in calls:
        run(p)
    torch.cuda.synchronize()

    sleep_cycles = int(2e9)  # ~1 s: longer than the host needs to enqueue all calls
    checked = {}
    torch.cuda.set_sync_debug_mode("error")
    try:
        for round_ in range(2):  # 40 calls: each key's re-measurements land meanwhile
            torch.cuda._sleep(sleep_cycles)
            for i, p in enumerate(calls):
                out = run(p)
                if i % 7 == round_:
                    checked[i] = out
            busy = not torch.cuda.current_stream().query()
            assert busy, "the host waited for the device during the calls"
    finally:
        torch.cuda.set_sync_debug_mode(0)
    torch.cuda.synchronize()
    for p, (dq, dkv) in ((calls[i], out) for i, out in checked.items()):
        rq, rkv = sparse_mla_bwd_reference(
            p["q"], p["kv"], p["o"], p["do"], p["indices"], p["lse"], None,
            q_positions=p["q_positions"], dq_dtype=torch.float32, dkv_dtype=torch.float32)
        for got, want in ((dq, rq), (dkv, rkv)):
            err = (got.double() - want.double()).norm() / want.double().norm()
            assert err < 1e-2, float(err)
