"""GPU tests: the compiled kernels against the reference on the adversarial
cases, torch.library.opcheck, CUDA graph capture, torch.compile (checked mode and
the output guards: test_gpu_guards.py).

Skipped cleanly without CUDA; the compiled-kernel tests also skip when the
extension smla._C is not built/installed.
"""

import math

import pytest
import torch

import smla
from smla import _compiled
from smla.indices import cp_positions, dsa_like
from smla.reference import sparse_mla_bwd_reference, sparse_mla_fwd_reference

HAS_CUDA = torch.cuda.is_available()
needs_cuda = pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA device")
needs_compiled = pytest.mark.skipif(
    not (HAS_CUDA and _compiled.is_available()),
    reason="needs a CUDA device and the compiled extension smla._C",
)


def problem(T=24, H=16, G=1, S=300, K=64, D=512, Dt=64, *, seed=0, positions=None,
            adversarial=True, lse_base=2, sm_scale=None, random_o=False):
    dev = "cuda"
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(T, H, D + Dt, generator=gen).to(dev, torch.bfloat16)
    kv = torch.randn(S, G, D + Dt, generator=gen).to(dev, torch.bfloat16)
    do = torch.randn(T, H, D, generator=gen).to(dev, torch.bfloat16)
    idx = torch.randint(0, S, (T, G, K), generator=gen)
    if adversarial:
        r = torch.rand(T, G, K, generator=gen)
        idx = torch.where(r < 0.1, -1, idx)
        idx = torch.where((r > 0.1) & (r < 0.15), S + 5, idx)
        idx = torch.where((r > 0.15) & (r < 0.17), -(2 ** 31), idx)
        idx = torch.where((r > 0.17) & (r < 0.19), 2 ** 31 - 1, idx)
        idx[:, :, -1] = idx[:, :, 0]
        idx[T // 2] = -1  # a token with no valid slot
    idx = idx.to(dev, torch.int32)
    qp = None if positions is None else positions.to(dev, torch.int32)
    o, lse = sparse_mla_fwd_reference(q, kv, idx, sm_scale, d_v=D, q_positions=qp,
                                      lse_base=lse_base)
    if random_o:
        # With one slot per row, o == v and dS = P*(dP - Delta) vanishes:
        # a random o keeps dS (and the comparison) non-degenerate.
        o = torch.randn(o.shape, generator=gen).to(dev, torch.bfloat16)
    if adversarial:
        lse[1, 0] = math.inf
        lse[2, 1 % H] = -math.inf
        lse[3, :] = math.nan
    return dict(q=q, kv=kv, o=o, do=do, indices=idx, lse=lse, q_positions=qp,
                lse_base=lse_base, sm_scale=sm_scale)


def rel_fro(a, b):
    return float((a.double() - b.double()).norm() / b.double().norm().clamp_min(1e-30))


def compare(p, tol=1e-2, **kw):
    dq, dkv, cnt = smla.sparse_mla_bwd(**p, diagnostics=True, mode="compiled", **kw)
    rq, rkv, rcnt = sparse_mla_bwd_reference(
        p["q"], p["kv"], p["o"], p["do"], p["indices"], p["lse"], p["sm_scale"],
        lse_base=p["lse_base"], q_positions=p["q_positions"], dq_dtype=torch.float32,
        dkv_dtype=torch.float32, diagnostics=True)
    assert torch.isfinite(dq.float()).all() and torch.isfinite(dkv.float()).all()
    assert rel_fro(dq, rq) <= tol and rel_fro(dkv, rkv) <= tol
    assert cnt == rcnt
    return dq, dkv


def shard_positions(T, S):
    """Absolute positions of a context-parallel shard in the middle."""
    return torch.arange(T, dtype=torch.int32) + S // 2


F32 = dict(dq_dtype=torch.float32, dkv_dtype=torch.float32)

# (problem arguments, call arguments); every configuration is one the AOT
# kernel library (kernels/CMakeLists.txt) holds, so none may be missing.
CASES = {
    "glm52": (dict(), {}),
    "glm52_positions": (dict(positions=shard_positions(24, 300)), {}),
    "glm52_lse_e": (dict(lse_base="e"), {}),
    "glm52_lse_e_positions": (dict(lse_base="e", positions=shard_positions(24, 300)), {}),
    "H32": (dict(H=32), {}),
    "H64": (dict(H=64, T=8), {}),
    # Five blocks of 64 per CTA: the H = 64 kernel's key pipeline uses
    # every stage and both mbarrier parities (one block uses one).
    "H64_blocks": (dict(H=64, T=8, K=300, S=2000), {}),
    # Several blocks with positions, and a natural-log lse (which runs the
    # base-2 kernel on lse * log2(e)).
    "H64_blocks_positions": (dict(H=64, T=8, K=300, S=2000,
                                  positions=shard_positions(8, 2000)), {}),
    "H64_lse_e": (dict(H=64, T=8, K=300, S=2000, lse_base="e"), {}),
    "H128": (dict(H=128, T=6), {}),
    "H128_blocks_base2": (dict(H=128, T=6, K=300, S=2000), {}),
    # The same for H = 128's two head blocks per token.
    "H128_blocks": (dict(H=128, T=6, K=300, S=2000, lse_base="e",
                         positions=shard_positions(6, 2000)), {}),
    "H128_positions_lse_e": (dict(H=128, T=6, lse_base="e", positions=shard_positions(6, 300)), {}),
    "K1": (dict(K=1, adversarial=False, random_o=True), {}),
    "K7": (dict(K=7), {}),
    "K1000": (dict(K=1000, S=1500), {}),
    "K2047": (dict(K=2047, S=3000, T=8), {}),
    "G2_H4": (dict(D=64, Dt=32, H=4, G=2, positions=shard_positions(24, 300)), {}),
    "G2_H20": (dict(D=64, Dt=32, H=20, G=2, positions=shard_positions(24, 300)), {}),
    "G2_H4_lse_e_f32": (dict(D=64, Dt=32, H=4, G=2, lse_base="e"), F32),
    "G2_H20_lse_e_f32": (dict(D=64, Dt=32, H=20, G=2, lse_base="e"), F32),
}


@needs_compiled
@pytest.mark.parametrize("name", sorted(CASES))
def test_compiled_matches_reference(name):
    args, kw = CASES[name]
    compare(problem(**args), **kw)


# The sorted walk (python/csrc/SlotWalk.h): row-sorted indices, launched in
# chunks of tokens, with the kernel's rotated block walk. Chunks of 5 tokens
# (T=24: four full chunks and one of 4, T=6/8: a short last chunk) and a
# period of 7 CTAs: with n blocks per row, CTA c of a chunk starts at block
# (c * n / 7) mod n, so the starts differ wherever n > 1 (every case but K7,
# whose one block is its whole row).
WALK_CASES = ["glm52", "glm52_positions", "glm52_lse_e", "H32", "H64", "H64_blocks",
              "H128", "H128_blocks", "K7", "K1000", "K2047", "G2_H20", "G2_H4_lse_e_f32"]


@needs_compiled
@pytest.mark.parametrize("name", WALK_CASES)
def test_sorted_walk_matches_reference(name, monkeypatch):
    smla.configure(walk="sorted")
    smla.configure(walk_chunk_tokens="5")
    smla.configure(walk_period="7")
    args, kw = CASES[name]
    compare(problem(**args), **kw)


@needs_compiled
def test_sorted_walk_is_the_given_walk_reordered(monkeypatch):
    """Same problem, four walks: the sums differ only in fp32 rounding."""
    p = problem(T=40, S=2000, K=300, D=64, Dt=32, H=4, G=2, lse_base="e")
    outs = []
    for walk, period in (("given", "0"), ("sorted", "0"), ("sorted", "3"),
                         ("given", "5")):
        smla.configure(walk=walk)
        smla.configure(walk_period=period)
        outs.append(smla.sparse_mla_bwd(**p, mode="compiled", **F32))
    for dq, dkv in outs[1:]:
        assert rel_fro(dq, outs[0][0]) < 1e-5 and rel_fro(dkv, outs[0][1]) < 1e-5


def _walk_runs(p, monkeypatch, **settings):
    """One call under the walk settings given (the others at their defaults)."""
    smla.configure(walk=None, walk_period=None, walk_chunk_tokens=None, walk_l2_bytes=None)
    smla.configure(**settings)
    return smla.sparse_mla_bwd(**p, mode="compiled", **F32)


@needs_compiled
def test_auto_walk_measures_and_chooses(monkeypatch):
    """The auto choice on the device: with an L2 of 1 byte assumed, every
    wave exceeds it and auto must run the sorted walk (bit for bit the
    forced sorted walk's dq, which differs from the given order's in fp32
    rounding); with a large L2 it must keep the given order. Twenty calls
    cross the every-8th-call re-measurement; a capture after the choice
    uses it, and a capture of a key (K, G, H, D + Dt) never measured keeps
    the given order."""
    p = problem(T=40, S=2000, K=300, D=64, Dt=32, H=4, G=2, lse_base="e")
    given = _walk_runs(p, monkeypatch, walk="given")
    forced = _walk_runs(p, monkeypatch, walk="sorted", walk_chunk_tokens=7)
    assert not torch.equal(given[0], forced[0])
    for _ in range(20):
        auto = _walk_runs(p, monkeypatch, walk_l2_bytes=1, walk_chunk_tokens=7)
        assert torch.equal(auto[0], forced[0])
        assert rel_fro(auto[1], forced[1]) < 1e-5
    big = _walk_runs(p, monkeypatch, walk_l2_bytes=1 << 30)
    assert torch.equal(big[0], given[0])

    def captured(q):
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        g = torch.cuda.CUDAGraph()
        with torch.cuda.stream(s), torch.cuda.graph(g):
            out = smla.sparse_mla_bwd(**q, mode="compiled", **F32)
        g.replay()
        torch.cuda.synchronize()
        return out

    smla.configure(walk_l2_bytes="1")
    # The shape above was measured (sorted, as the last answer with L2 = 1
    # byte is): the capture replays the sorted walk.
    _walk_runs(p, monkeypatch, walk_l2_bytes=1, walk_chunk_tokens=7)
    smla.configure(walk_l2_bytes="1")
    smla.configure(walk_chunk_tokens="7")
    assert torch.equal(captured(p)[0], forced[0])
    # A key never measured (K=301; T and S_kv are not part of it) is
    # captured in the given order, with nothing measured or allocated
    # during the capture.
    q = problem(T=37, S=2000, K=301, D=64, Dt=32, H=4, G=2, lse_base="e", seed=5)
    want = _walk_runs(q, monkeypatch, walk="given")
    smla.configure(walk_l2_bytes="1")
    assert torch.equal(captured(q)[0], want[0])


def pair_problem(T=24, S=300, K=64, overlap=0.7, *, seed=0, positions=None, lse_base=2,
                 adversarial=True):
    """H=16 with pairs (2p, 2p + 1) sharing `overlap` of their keys, every
    row without an in-range key twice (so the pair path may run), and the
    adversarial out-of-range slots, empty token and dead rows of problem()."""
    p = problem(T=T, S=S, K=K, seed=seed, positions=positions, lse_base=lse_base,
                adversarial=False)
    g = torch.Generator().manual_seed(seed + 1)
    idx = torch.stack([torch.randperm(S, generator=g)[:K] for _ in range(T)]).view(T, 1, K)
    for i in range(T // 2):
        pool = torch.randperm(S, generator=g)[: int(K * (2 - overlap)) + 1]
        idx[2 * i, 0] = pool[:K]
        idx[2 * i + 1, 0] = pool[-K:][torch.randperm(K, generator=g)]
    if adversarial:
        r = torch.rand(T, 1, K, generator=g)
        idx = torch.where(r < 0.1, -1, idx)
        idx = torch.where((r > 0.1) & (r < 0.15), S + 5, idx)
        idx = torch.where((r > 0.15) & (r < 0.17), -(2 ** 31), idx)
        idx = torch.where((r > 0.17) & (r < 0.19), 2 ** 31 - 1, idx)
        idx[T // 2] = -1
    p["indices"] = idx.to("cuda", torch.int32)
    qp = p["q_positions"]
    p["o"], p["lse"] = sparse_mla_fwd_reference(p["q"], p["kv"], p["indices"], None, d_v=512,
                                                q_positions=qp, lse_base=lse_base)
    if adversarial:
        p["lse"][1, 0] = math.inf
        p["lse"][2, 1] = -math.inf
        p["lse"][3, :] = math.nan
    return p


# Key sharing (python/csrc/TokenPairs.h): token pairs folded into the
# 32-row tokens = 2 kernel over aligned rows. Odd K, a K below one block,
# CP positions (each token of a pair its own limit), both lse bases. The
# rows live in dq's memory (a token's dq row, 4608 int32, holds 2K slots)
# but for K = 2400, whose rows take a workspace (and the disjoint layout:
# K beyond the union kernel's scratch).
PAIR_CASES = {
    "pairs": dict(),
    "pairs_positions": dict(positions=shard_positions(24, 300)),
    "pairs_lse_e_positions": dict(lse_base="e", positions=shard_positions(24, 300)),
    "pairs_K7": dict(K=7, overlap=0.5),
    "pairs_K1000": dict(K=1000, S=1500, T=8, overlap=0.9),
    "pairs_no_overlap": dict(overlap=0.0, lse_base="e"),
    "pairs_workspace_K2400": dict(K=2400, S=6000, T=4, overlap=0.8),
}


@needs_compiled
@pytest.mark.parametrize("name", sorted(PAIR_CASES))
def test_token_pairs_match_reference(name, monkeypatch):
    """Forced on (which fails where the pair path cannot run), the pair
    path matches the reference, counters included: the aligned rows'
    padding is not counted."""
    smla.configure(pairs="on")
    if name != "pairs":  # launches of 5 pairs: T=24 in 3, T=8 in 2
        smla.configure(pairs_chunk="5")
    compare(pair_problem(**PAIR_CASES[name]))


@needs_compiled
@pytest.mark.parametrize("pairs", ["on", "off", "sorted", "workspace"])
def test_extra_device_memory_within_the_bound(pairs, monkeypatch):
    """The issue's memory bound: besides its outputs a call allocates at
    most the fp32 dKV buffer and O(T H). The token pairs keep their aligned
    rows in dq's memory; the sorted walk sorts into dkv's and dq's; the
    per-token kernels need nothing else. With the pairs' rows in a
    workspace (SMLA_PAIRS_ROWS=workspace: 2 x 2K int32 per token, 8 MiB
    here) the measurement sees it."""
    smla.configure(pairs="on" if pairs in ("on", "workspace") else "off")
    smla.configure(pairs_rows="workspace" if pairs == "workspace" else "dq")
    smla.configure(walk="sorted" if pairs == "sorted" else "given")
    p = pair_problem(T=512, S=4096, K=2048, overlap=0.8, adversarial=False)
    T, H, W = p["q"].shape
    S = p["kv"].shape[0]
    smla.sparse_mla_bwd(**p, mode="compiled")  # the library loaded, caches warm
    torch.cuda.synchronize()
    torch.cuda.empty_cache()  # fresh segments: blocks as large as requested
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    dq, dkv = smla.sparse_mla_bwd(**p, mode="compiled")
    torch.cuda.synchronize()
    extra = torch.cuda.max_memory_allocated() - base
    outputs = sum(t.numel() * t.element_size() for t in (dq, dkv))
    bound = S * W * 4 + 64 * T * H + (1 << 20)  # fp32 dKV + O(T H) + small tensors
    if pairs == "workspace":
        assert extra - outputs > bound  # the 8 MiB of rows show
        return
    assert extra - outputs <= bound, (
        f"{pairs}: {extra - outputs} bytes beyond the outputs, bound {bound}")


@needs_compiled
def test_token_pairs_rows_in_dq_or_workspace(monkeypatch):
    """The aligned rows built in dq's memory (the default where a dq row
    holds them) or in a workspace give the same call: dq bit for bit (no
    atomics), the counters, dkv up to the atomics' order; in launches of 5
    pairs too."""
    smla.configure(pairs="on")
    p = pair_problem(T=30, overlap=0.8, seed=9)
    for chunk in [None, "5"]:
        if chunk:
            smla.configure(pairs_chunk=chunk)
        runs = []
        for rows in ["dq", "workspace"]:
            smla.configure(pairs_rows=rows)
            runs.append(smla.sparse_mla_bwd(**p, diagnostics=True, mode="compiled"))
        (dq, dkv, cnt), (wq, wkv, wcnt) = runs
        assert torch.equal(dq, wq) and cnt == wcnt and rel_fro(dkv, wkv) < 1e-3


@needs_compiled
def test_token_pairs_auto_choice(monkeypatch):
    """auto takes pairs whose union is short (dq bit for bit the forced
    path's: dq has no atomics) and leaves long unions and odd T to the
    per-token kernel (bit for bit SMLA_PAIRS=off), measuring a key (K, H,
    D + Dt: not T or S_kv) while it has no answer and again, without waiting,
    every 8th; on refuses what it cannot run. A row that repeats a key, or
    a top-k beyond the union kernel's scratch, puts its pair in the
    disjoint layout (two tokens' worth of slots): on runs it and matches
    the reference. Each scenario has its own K, a key no other test
    measured."""
    def run(p, mode):
        smla.configure(pairs=mode)
        return smla.sparse_mla_bwd(**p, mode="compiled")

    # Keys no other test runs: auto remembers a key's last answer.
    near = pair_problem(T=26, K=66, overlap=0.8, adversarial=False)
    assert torch.equal(run(near, "auto")[0], run(near, "on")[0])
    far = pair_problem(T=28, K=68, overlap=0.0, adversarial=False, seed=3)
    for _ in range(10):  # crosses the every-8th-call re-measurement
        assert torch.equal(run(far, "auto")[0], run(far, "off")[0])
    # One pair of 11 in the disjoint layout: the mean length (1.28 K)
    # still pays. (With the adversarial slots, whose shared keys become
    # one token's own, it would be ~1.39 K: per token.)
    dup = pair_problem(T=22, K=70, overlap=0.8, seed=4, adversarial=False)
    dup["indices"][5, 0, 1] = dup["indices"][5, 0, 0] = 7
    assert torch.equal(run(dup, "auto")[0], run(dup, "on")[0])
    smla.configure(pairs="on")
    compare(dup)
    odd = pair_problem(T=23, overlap=0.8, adversarial=False, seed=5)
    assert torch.equal(run(odd, "auto")[0], run(odd, "off")[0])
    with pytest.raises(RuntimeError, match="an even number of tokens"):
        run(odd, "on")
    with pytest.raises(RuntimeError, match="no tokens=2 kernel"):
        run(problem(H=32, T=4), "on")
    wide = pair_problem(T=4, S=6000, K=2100, adversarial=False, seed=6)
    assert torch.equal(run(wide, "auto")[0], run(wide, "off")[0])
    smla.configure(pairs="on")
    compare(wide)
    # Launches of 4 pairs (the first chunk decides: ~1.23 K), one pair
    # disjoint; the sums and counters are the reference's.
    smla.configure(pairs_chunk="4")
    mixed = pair_problem(T=30, K=72, overlap=0.9, seed=7)
    mixed["indices"][25, 0, 3] = mixed["indices"][25, 0, 2] = 11
    assert torch.equal(run(mixed, "auto")[0], run(mixed, "on")[0])
    compare(mixed)

    def captured(p, mode):
        smla.configure(pairs=mode)
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        g = torch.cuda.CUDAGraph()
        with torch.cuda.stream(s), torch.cuda.graph(g):
            out = smla.sparse_mla_bwd(**p, mode="compiled")
        g.replay()
        torch.cuda.synchronize()
        return out

    # No read-back in a capture: SMLA_PAIRS=on runs pairs; auto follows a
    # key's last answer (near: pairs, far: per token) and runs a key never
    # measured per token.
    for p, mode, like in [(mixed, "on", "on"), (near, "auto", "on"), (far, "auto", "off"),
                          (pair_problem(T=32, K=74, overlap=0.8, seed=8), "auto", "off")]:
        want = run(p, like)
        got = captured(p, mode)
        # dq bit for bit (the same path); dkv in bf16 from atomics in
        # another order: a few last-bit flips.
        assert torch.equal(got[0], want[0]) and rel_fro(got[1], want[1]) < 1e-3


@needs_compiled
def test_compiled_cp_positions_dsa_indices():
    S = 1024
    pos = cp_positions(S, 1, 4)
    p = problem(T=pos.numel(), S=S, K=128, positions=pos, adversarial=False)
    p["indices"] = dsa_like(pos.numel(), S, 128, positions=pos.cuda(), W=32, device="cuda")
    p["o"], p["lse"] = sparse_mla_fwd_reference(p["q"], p["kv"], p["indices"], d_v=512,
                                                q_positions=p["q_positions"])
    compare(p)


@needs_compiled
def test_compiled_packed_sequences():
    """THD packing: per-sequence causal DSA indices with absolute positions."""
    from smla.indices import packed

    idx, pos, _ = packed([40, 24, 64], 48, kind="dsa", seed=3, device="cuda")
    S = int(pos.max()) + 1
    p = problem(T=pos.numel(), S=S, K=48, positions=pos.cpu(), adversarial=False)
    p["indices"] = idx.to(torch.int32)
    p["o"], p["lse"] = sparse_mla_fwd_reference(p["q"], p["kv"], p["indices"], d_v=512,
                                                q_positions=p["q_positions"])
    compare(p)


@needs_compiled
def test_compiled_stale_lse_clamps_finite():
    p = problem(adversarial=False)
    p["lse"] = p["lse"] - 40.0
    dq, dkv, cnt = smla.sparse_mla_bwd(**p, diagnostics=True, mode="compiled")
    assert cnt["clamped"] > 0
    assert torch.isfinite(dq.float()).all() and torch.isfinite(dkv.float()).all()


@needs_compiled
def test_compiled_fp32_outputs_and_scales():
    p = problem(D=64, Dt=32, H=4, G=2, lse_base="e")
    dq, dkv = smla.sparse_mla_bwd(**p, mode="compiled", **F32)
    assert dq.dtype == torch.float32 and dkv.dtype == torch.float32
    compare(p, **F32)
    # sm_scale is a run-time argument, not compiled into the kernel.
    for scale in (96 ** -0.5, 0.1352):
        compare(problem(D=64, Dt=32, H=4, G=2, lse_base="e", sm_scale=scale), **F32)


@needs_compiled
def test_compiled_glm52_with_slime_scale():
    """GLM-5.2 scales scores by more than 1/sqrt(576) (e.g. YaRN mscale)."""
    compare(problem(sm_scale=0.1352))


@needs_compiled
def test_opcheck():
    p = problem(T=8, S=64, K=32)
    args = (p["q"], p["kv"], p["o"], p["do"], p["indices"], p["lse"], 576 ** -0.5, False,
            None, None, torch.bfloat16, torch.bfloat16)
    torch.library.opcheck(torch.ops.smla.sparse_mla_bwd.default, args)


@needs_compiled
@pytest.mark.parametrize("walk", ["auto", "sorted"])
def test_cuda_graph_capture(walk, monkeypatch):
    """Capturable, also the sorted walk (a sort and chunked launches)."""
    smla.configure(walk=walk)
    smla.configure(walk_chunk_tokens="3")
    p = problem(T=8, S=64, K=32)
    want = smla.sparse_mla_bwd(**p, mode="compiled")
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        smla.sparse_mla_bwd(**p, mode="compiled")  # warm-up (module loading)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = smla.sparse_mla_bwd(**p, mode="compiled")
    g.replay()
    torch.cuda.synchronize()
    assert torch.equal(out[0], want[0])
    torch.testing.assert_close(out[1].float(), want[1].float(), rtol=1e-2, atol=1e-2)


@needs_compiled
def test_torch_compile_module():
    class Bwd(torch.nn.Module):
        def forward(self, q, kv, o, do, indices, lse):
            return smla.sparse_mla_bwd(q, kv, o, do, indices, lse, mode="compiled")

    p = problem(T=8, S=64, K=32, adversarial=False)
    args = [p[k] for k in ("q", "kv", "o", "do", "indices", "lse")]
    eager = Bwd()(*args)
    compiled = torch.compile(Bwd(), fullgraph=True)(*args)
    assert torch.equal(compiled[0], eager[0])
    torch.testing.assert_close(compiled[1].float(), eager[1].float(), rtol=1e-2, atol=1e-2)


@needs_compiled
def test_sparse_mla_autograd_on_gpu():
    p = problem(adversarial=False)
    q = p["q"].detach().requires_grad_(True)
    kv = p["kv"].detach().requires_grad_(True)
    prev = smla.set_backward_mode("compiled")
    try:
        out, lse = smla.SparseMLA.apply(q, kv, p["indices"], 576 ** -0.5)
        out.float().sum().backward()
    finally:
        smla.set_backward_mode(prev)
    assert torch.isfinite(q.grad.float()).all() and torch.isfinite(kv.grad.float()).all()


@needs_cuda
def test_reference_on_cuda_matches_cpu():
    p = problem(T=6, H=5, S=40, K=9, D=32, Dt=16)
    cuda = sparse_mla_bwd_reference(*(p[k] for k in ("q", "kv", "o", "do", "indices", "lse")),
                                    dq_dtype=torch.float32, dkv_dtype=torch.float32,
                                    diagnostics=True)
    cpu = sparse_mla_bwd_reference(*(p[k].cpu() for k in ("q", "kv", "o", "do", "indices", "lse")),
                                   dq_dtype=torch.float32, dkv_dtype=torch.float32,
                                   diagnostics=True)
    torch.testing.assert_close(cuda[0].cpu(), cpu[0], rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(cuda[1].cpu(), cpu[1], rtol=1e-4, atol=1e-5)
    assert cuda[2] == cpu[2]


@needs_cuda
def test_b2_indices_generate_fast_on_gpu():
    import time
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    idx = dsa_like(8192, 32768, 2048, seed=0, device="cuda")
    torch.cuda.synchronize()
    assert time.perf_counter() - t0 < 30.0
    st = smla.indices.overlap_stats(idx, sample=256)
    assert 0.7 < st["next_overlap"] < 0.9


@needs_compiled
def test_deterministic_algorithms_alert(capfd):
    """dkv's fp32 atomic sums are not bitwise reproducible: with PyTorch's
    deterministic algorithms on, the op raises naming itself, and with
    warn_only=True it warns (PyTorch's C++ warning: a Python warning or a
    line on stderr, depending on how the op was reached) and runs."""
    import warnings

    message = "smla.sparse_mla_bwd does not have a deterministic"
    p = problem(T=4, S=64, K=32, adversarial=False)
    try:
        torch.use_deterministic_algorithms(True)
        with pytest.raises(RuntimeError, match=message):
            smla.sparse_mla_bwd(**p, mode="compiled")
        torch.use_deterministic_algorithms(True, warn_only=True)
        capfd.readouterr()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            dq, _ = smla.sparse_mla_bwd(**p, mode="compiled")
        err = capfd.readouterr().err
        assert any(message in str(w.message) for w in caught) or message in err
        assert torch.isfinite(dq.float()).all()
    finally:
        torch.use_deterministic_algorithms(False)
    smla.sparse_mla_bwd(**p, mode="compiled")
