"""Seeded top-k index generators and overlap statistics (docs/performance.md, "Shapes").

All generators return int32 indices [T, G, K] into a kv buffer of S_kv rows,
padded with -1 where a query has fewer than K causal keys. Query t sits at
absolute kv position ``positions[t]`` (default S_kv - T + t, the last T
positions) and may only select keys <= its position.

* causal_random: K distinct keys uniformly from [0, pos].
* dsa_like: DeepSeek-Sparse-Attention-like. Key j has a fixed salience
  s_j ~ N(0,1); query t scores it as s_j + sigma*e_j(t) + b*n_tj, where
  e_j(t) interpolates linearly between independent N(0,1) draws placed every
  L positions and n_tj is fresh N(0,1) noise; the W most recent keys (up to
  and including pos) are always taken, the remaining slots go to the
  highest-scoring earlier keys. Defaults sigma=1, L=128, b=0.25, W=128.
* packed: THD-packed sequences; per-sequence causal, absolute q_positions.
* dsv4_like: DeepSeek-V4's compressed sparse attention (a recent window of
  uncompressed keys plus the top keys of a compressed sequence, one kv
  tensor holding both; its docstring states the layout) with per-row
  valid counts (``topk_length``).
* cp_positions: the positions rank r of a zigzag context-parallel group holds.

Results are deterministic for a given (seed, device, shapes): draws come from
a torch.Generator on ``device`` in a fixed chunk order (CPU and CUDA streams
differ). Work is chunked over queries so T=8192, S_kv=32768, K=2048 takes
seconds on a GPU (one top-k over [chunk, S_kv] scores per chunk).
"""

from __future__ import annotations

import math
from typing import Callable, Dict, Optional, Sequence, Tuple

import torch

_CHUNK_ELEMS = 1 << 24  # scores per chunk: rows * S_kv


def default_positions(T: int, S_kv: int, device="cpu") -> torch.Tensor:
    """Query t at kv position S_kv - T + t (the queries are the last T keys)."""
    if T > S_kv:
        raise ValueError(f"smla.indices: T={T} queries need S_kv >= T, got S_kv={S_kv}")
    return torch.arange(S_kv - T, S_kv, device=device, dtype=torch.int64)


def cp_positions(seq_len: int, rank: int, world: int, device="cpu") -> torch.Tensor:
    """Positions held by CP rank ``rank`` of ``world`` with the load-balanced
    (zigzag) split: the sequence is cut into 2*world equal chunks and rank r
    holds chunks r and 2*world-1-r."""
    if not 0 <= rank < world or seq_len % (2 * world) != 0:
        raise ValueError(
            f"smla.indices.cp_positions: need 0 <= rank < world and seq_len divisible by "
            f"2*world, got seq_len={seq_len}, rank={rank}, world={world}"
        )
    c = seq_len // (2 * world)
    first = torch.arange(rank * c, (rank + 1) * c, device=device)
    second = torch.arange((2 * world - 1 - rank) * c, (2 * world - rank) * c, device=device)
    return torch.cat([first, second]).to(torch.int64)


def _select_topk(score_fn: Callable, positions: torch.Tensor, S_kv: int, K: int) -> torch.Tensor:
    """Per query: the K highest scores among keys <= pos; -1 pads missing keys.
    score_fn(r0, r1) returns float scores [r1 - r0, S_kv] (finite)."""
    T = positions.numel()
    device = positions.device
    out = torch.full((T, K), -1, dtype=torch.int32, device=device)
    keys = torch.arange(S_kv, device=device)
    rows = max(1, _CHUNK_ELEMS // S_kv)
    k = min(K, S_kv)
    for r0 in range(0, T, rows):
        r1 = min(T, r0 + rows)
        pos = positions[r0:r1].view(-1, 1)
        sc = score_fn(r0, r1).masked_fill(keys.view(1, -1) > pos, float("-inf"))
        vals, idx = sc.topk(k, dim=1)
        out[r0:r1, :k] = torch.where(torch.isneginf(vals), -1, idx).to(torch.int32)
    return out


def _prepare(T, S_kv, K, positions, device):
    if positions is None:
        positions = default_positions(T, S_kv, device)
    positions = positions.to(device=device, dtype=torch.int64)
    if positions.numel() != T:
        raise ValueError(f"smla.indices: positions must have T={T} entries, got {positions.numel()}")
    if T and (int(positions.min()) < 0 or int(positions.max()) >= S_kv):
        raise ValueError(f"smla.indices: positions must lie in [0, S_kv={S_kv})")
    if K < 1:
        raise ValueError(f"smla.indices: K must be >= 1, got {K}")
    return positions


def causal_random(
    T: int, S_kv: int, K: int, *, seed: int = 0, groups: int = 1,
    positions: Optional[torch.Tensor] = None, device="cpu",
) -> torch.Tensor:
    """B1/B2r indices: K distinct keys uniformly from [0, pos]; -1 padding."""
    positions = _prepare(T, S_kv, K, positions, device)
    gen = torch.Generator(device=device).manual_seed(seed)
    per_group = [
        _select_topk(lambda r0, r1: torch.rand(r1 - r0, S_kv, generator=gen, device=device),
                     positions, S_kv, K)
        for _ in range(groups)
    ]
    return torch.stack(per_group, dim=1)


def dsa_like(
    T: int, S_kv: int, K: int, *, seed: int = 0, groups: int = 1,
    positions: Optional[torch.Tensor] = None, sigma: float = 1.0, L: int = 128,
    b: float = 0.25, W: int = 128, device="cpu",
) -> torch.Tensor:
    """B2/B3 indices (see the module docstring for the model)."""
    positions = _prepare(T, S_kv, K, positions, device)
    gen = torch.Generator(device=device).manual_seed(seed)
    keys = torch.arange(S_kv, device=device)
    per_group = []
    for _ in range(groups):
        salience = torch.randn(S_kv, generator=gen, device=device)
        a_lo = int(positions.min()) // L if T else 0
        a_hi = int(positions.max()) // L + 1 if T else 1
        anchors = torch.randn(a_hi - a_lo + 1, S_kv, generator=gen, device=device)

        def score(r0, r1, salience=salience, anchors=anchors, a_lo=a_lo):
            pos = positions[r0:r1]
            a = pos // L - a_lo
            f = ((pos % L).float() / L).view(-1, 1)
            drift = (1 - f) * anchors[a] + f * anchors[a + 1]
            noise = torch.randn(r1 - r0, S_kv, generator=gen, device=device)
            sc = salience + sigma * drift + b * noise
            # Recent window: always taken, most recent first (1e6 >> any score).
            rel = (keys.view(1, -1) - pos.view(-1, 1)).float()
            return torch.where((rel <= 0) & (rel > -W), 1e6 + rel, sc)

        per_group.append(_select_topk(score, positions, S_kv, K))
    return torch.stack(per_group, dim=1)


def packed(
    seq_lens: Sequence[int], K: int, *, kind: str = "dsa", seed: int = 0, groups: int = 1,
    device="cpu", **kwargs,
) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """THD-packed sequences (B3): the kv buffer holds the sequences back to back
    (S_kv = sum(seq_lens)), query i of sequence s sits at absolute position
    start_s + i and selects keys only from [start_s, start_s + i].
    Returns (indices [T, G, K] absolute, q_positions int32 [T], cu_seqlens)."""
    gens = {"dsa": dsa_like, "random": causal_random}
    if kind not in gens:
        raise ValueError(f"smla.indices.packed: kind must be 'dsa' or 'random', got {kind!r}")
    parts, pos_parts, start = [], [], 0
    for s, n in enumerate(seq_lens):
        local = gens[kind](n, n, K, seed=seed + s, groups=groups, device=device, **kwargs)
        parts.append(torch.where(local >= 0, local + start, local))
        pos_parts.append(torch.arange(start, start + n, device=device, dtype=torch.int32))
        start += n
    cu = torch.tensor([0, *torch.tensor(list(seq_lens)).cumsum(0).tolist()], dtype=torch.int32)
    return torch.cat(parts), torch.cat(pos_parts), cu.to(device)


def overlap_stats(
    indices: torch.Tensor, *, group: int = 0, sample: Optional[int] = None,
    block_sizes: Sequence[int] = (8, 64), s_kv: Optional[int] = None,
) -> Dict[str, float]:
    """Key-sharing statistics of an index set (reported with every benchmark).

    * next_overlap: mean over queries of |I_t & I_t+1| / |I_t| (queries with
      no valid key are skipped);
    * union_<b>: mean over aligned blocks of b consecutive queries of
      |union of their keys| / K (full blocks only; NaN if there are none).
    ``sample`` keeps only the last ``sample`` queries (docs/performance.md
    reports a 256-query sample at the last shard). Negative indices are padding.
    """
    idx = indices[:, group, :] if indices.dim() == 3 else indices
    if sample is not None:
        idx = idx[-sample:]
    T, K = idx.shape
    if s_kv is None:
        s_kv = int(idx.max()) + 1 if T else 1
    idx = idx.long()
    align = math.lcm(*block_sizes) if block_sizes else 1
    step = align * max(1, (1 << 22) // (align * max(s_kv, 1)))  # rows per chunk
    ov_sum, ov_n = 0.0, 0
    un_sum = {bs: 0.0 for bs in block_sizes}
    un_n = {bs: 0 for bs in block_sizes}
    for r0 in range(0, T, step):
        r1 = min(T, r0 + step + 1)  # one extra row for the next-query overlap
        rows = idx[r0:r1]
        valid = (rows >= 0) & (rows < s_kv)
        member = torch.zeros(r1 - r0, s_kv + 1, dtype=torch.bool, device=idx.device)
        member.scatter_(1, torch.where(valid, rows, s_kv), True)
        member = member[:, :s_kv]
        count = member.sum(1)
        inter = (member[:-1] & member[1:]).sum(1)
        n_cur = min(step, r1 - r0 - 1)  # pairs (t, t+1) whose t is in this chunk
        has = count[:n_cur] > 0
        ov_sum += float((inter[:n_cur][has].double() / count[:n_cur][has].double()).sum())
        ov_n += int(has.sum())
        own = member[: min(step, r1 - r0)]
        for bs in block_sizes:
            nb = own.shape[0] // bs
            if nb:
                u = own[: nb * bs].view(nb, bs, s_kv).any(1).sum(1)
                un_sum[bs] += float(u.double().sum()) / K
                un_n[bs] += nb
    stats = {"next_overlap": ov_sum / ov_n if ov_n else float("nan")}
    for bs in block_sizes:
        stats[f"union_{bs}"] = un_sum[bs] / un_n[bs] if un_n[bs] else float("nan")
    return stats


def dsv4_like(
    T: int, *, window: int = 128, compressed_topk: int = 512, ratio: int = 4, seed: int = 0,
    sigma: float = 1.0, L: int = 128, b: float = 0.25, device="cpu",
) -> Tuple[torch.Tensor, torch.Tensor]:
    """Indices of one DeepSeek-V4 compressed-attention layer (ratio 4, with
    an indexer) over a sequence of T tokens that are also the T queries.

    The layout is the one DeepSeek-V4's trainers build (miles'
    ``miles_plugins/models/deepseek_v4/ARCHITECTURE.md``, sections 1.5-1.6;
    Megatron-LM's DSv4 ``build_flat_topk_idxs`` packs the same rows for
    cuDNN's backward): one kv tensor of S_kv = T + T // ratio rows,

    * rows [0, T): the uncompressed kv of every token (token t at row t);
    * rows [T, T + T // ratio): the compressed keys, key c (row T + c)
      pooled from tokens [c * ratio, (c + 1) * ratio); it exists for query
      t only when c < (t + 1) // ratio (its tokens are all <= t).

    Query t takes the window rows max(0, t - window + 1) .. t (ascending),
    then the ``compressed_topk`` compressed keys its indexer scores highest
    (fewer when fewer exist), highest first. The indexer's scores follow
    dsa_like's model over the compressed keys, with query t at compressed
    position (t + 1) // ratio - 1, no always-taken recent window, and drift
    anchors every L tokens (L // ratio compressed positions). Each row's valid
    slots come first, then -1 (Megatron-LM's compaction), so
    ``topk_length[t] = min(t + 1, window) + min((t + 1) // ratio, compressed_topk)``.

    Returns (indices int32 [T, 1, window + compressed_topk],
    topk_length int32 [T]).
    """
    if T < 1 or window < 1 or compressed_topk < 1 or ratio < 1:
        raise ValueError(
            f"smla.indices.dsv4_like: T, window, compressed_topk and ratio must be >= 1, got "
            f"T={T}, window={window}, compressed_topk={compressed_topk}, ratio={ratio}")
    t = torch.arange(T, device=device, dtype=torch.int64)
    win = (t - window + 1).clamp(min=0).view(-1, 1) + torch.arange(window, device=device)
    win = torch.where(win <= t.view(-1, 1), win, -1)
    n_comp = T // ratio
    comp = torch.full((T, compressed_topk), -1, dtype=torch.int64, device=device)
    seen = (t + 1) // ratio  # compressed keys that exist for query t
    rows = seen > 0
    if n_comp and bool(rows.any()):
        picked = dsa_like(int(rows.sum()), n_comp, compressed_topk, seed=seed,
                          positions=seen[rows] - 1, sigma=sigma, L=max(1, L // ratio), b=b,
                          W=0, device=device)[:, 0].long()
        comp[rows] = torch.where(picked >= 0, picked + T, -1)
    idx = torch.cat([win, comp], dim=1)
    # Valid slots first, each part keeping its order (a stable sort on "is -1").
    order = torch.sort((idx < 0).to(torch.int8), dim=1, stable=True).indices
    idx = idx.gather(1, order)
    topk_length = (idx >= 0).sum(1).to(torch.int32)
    return idx.to(torch.int32).unsqueeze(1).contiguous(), topk_length
