"""Index generators (docs/performance.md, "Shapes"), overlap statistics and the flop count."""

import functools

import pytest
import torch

from smla import flop_count
from smla.indices import (causal_random, cp_positions, default_positions, dsa_like, dsv4_like,
                          overlap_stats, packed)

# A window smaller than K so the DSA-like scores matter in small tests.
GENS = {"random": causal_random, "dsa": functools.partial(dsa_like, W=4)}


@pytest.mark.parametrize("kind", sorted(GENS))
def test_deterministic_by_seed(kind):
    a = GENS[kind](40, 300, 32, seed=7)
    b = GENS[kind](40, 300, 32, seed=7)
    c = GENS[kind](40, 300, 32, seed=8)
    assert a.dtype == torch.int32 and a.shape == (40, 1, 32)
    assert torch.equal(a, b) and not torch.equal(a, c)


@pytest.mark.parametrize("kind", sorted(GENS))
@pytest.mark.parametrize("groups", [1, 2])
def test_causal_distinct_and_padded(kind, groups):
    T, S, K = 50, 120, 16
    idx = GENS[kind](T, S, K, seed=1, groups=groups).long()
    pos = default_positions(T, S)
    assert idx.shape == (T, groups, K)
    valid = idx >= 0
    assert (idx[valid] <= pos.view(-1, 1, 1).expand_as(idx)[valid]).all()
    assert ((idx == -1) | valid).all()  # padding is exactly -1
    n_valid = valid.sum(-1)
    assert torch.equal(n_valid, torch.clamp(pos + 1, max=K).view(-1, 1).expand(T, groups))
    for t in range(T):
        for g in range(groups):
            row = idx[t, g][valid[t, g]]
            assert row.unique().numel() == row.numel()  # distinct keys
    if groups == 2:
        assert not torch.equal(idx[:, 0], idx[:, 1])


def test_short_prefixes_take_every_key():
    idx = dsa_like(8, 8, 16, seed=0).long()  # positions 0..7, K > pos+1
    for t in range(8):
        row = idx[t, 0]
        assert sorted(row[row >= 0].tolist()) == list(range(t + 1))
        assert (row[t + 1:] == -1).all()


def test_dsa_recent_window_always_taken():
    T, S, K, W = 30, 400, 40, 16
    idx = dsa_like(T, S, K, seed=2, W=W).long()
    pos = default_positions(T, S)
    for t in range(T):
        window = set(range(int(pos[t]) - W + 1, int(pos[t]) + 1))
        assert window <= set(idx[t, 0].tolist())


def test_positions_argument_and_cp_shards():
    S, world = 64, 4
    shards = [cp_positions(S, r, world) for r in range(world)]
    assert torch.equal(shards[1], torch.tensor([8, 9, 10, 11, 12, 13, 14, 15,
                                                48, 49, 50, 51, 52, 53, 54, 55]))
    assert torch.equal(torch.cat(shards).sort().values, torch.arange(S))
    idx = dsa_like(16, S, 8, seed=0, positions=shards[1], W=4).long()
    assert ((idx < 0) | (idx <= shards[1].view(-1, 1, 1))).all()
    with pytest.raises(ValueError, match="seq_len divisible by 2\\*world"):
        cp_positions(60, 0, 4)


@pytest.mark.parametrize("kind", sorted(GENS))
def test_packed_sequences_stay_apart(kind):
    lens = [5, 9, 7]
    idx, qpos, cu = packed(lens, 6, kind=kind, seed=3)
    assert idx.shape == (21, 1, 6) and qpos.dtype == torch.int32
    assert cu.tolist() == [0, 5, 14, 21]
    assert torch.equal(qpos, torch.arange(21, dtype=torch.int32))
    for s in range(3):
        rows = idx[cu[s]:cu[s + 1]].long()
        valid = rows[rows >= 0]
        assert (valid >= cu[s]).all() and (valid < cu[s + 1]).all()
    assert ((idx < 0) | (idx <= qpos.view(-1, 1, 1))).all()


def test_overlap_stats_exact_small_example():
    rows = torch.tensor([[0, 1, 2, 3], [2, 3, 4, 5], [2, 3, 4, 5], [6, 7, -1, -1]])
    st = overlap_stats(rows.view(4, 1, 4), block_sizes=(2, 4))
    # overlaps: 2/4, 4/4, 0/4 -> mean 0.5; blocks of 2: |{0..5}|=6, |{2..7}|=6;
    # block of 4: |{0..7}| = 8; divided by K=4.
    assert st["next_overlap"] == pytest.approx(0.5)
    assert st["union_2"] == pytest.approx(1.5)
    assert st["union_4"] == pytest.approx(2.0)


def test_overlap_stats_chunked_matches_unchunked():
    idx = dsa_like(300, 2048, 64, seed=4, W=8)
    full = overlap_stats(idx)
    tail = overlap_stats(idx, sample=128)
    assert set(full) == {"next_overlap", "union_8", "union_64"}
    assert 0.0 < tail["next_overlap"] <= 1.0
    # Chunking: a huge s_kv forces many small chunks; results must not change.
    assert overlap_stats(idx, s_kv=2048) == pytest.approx(full)


def test_overlap_ranges_dsa_vs_random():
    T, S, K = 128, 8192, 512
    dsa = overlap_stats(dsa_like(T, S, K, seed=0))
    rnd = overlap_stats(causal_random(T, S, K, seed=0))
    # DSA-like: neighbours share most keys (docs/performance.md reports ~0.8 /
    # 1.6 / 2.4 at full size); random: overlap ~ K/S and unions close to independent draws.
    assert 0.6 < dsa["next_overlap"] < 0.95
    assert dsa["union_8"] > 1.2 and dsa["union_8"] < 2.5
    assert dsa["union_8"] < dsa["union_64"] < 5.0
    p = K / S
    assert rnd["next_overlap"] == pytest.approx(p, abs=0.02)
    assert rnd["union_8"] == pytest.approx((1 - (1 - p) ** 8) / p, rel=0.05)


def test_flop_count_single_definition():
    # B1: T=4096, H=64, K=2048, D=512, Dt=64
    assert flop_count(4096, 64, 2048, 512, 64) == 2 * 4096 * 64 * 2048 * (1024 + 1728)
    assert flop_count(1, 1, 1, 3, 1) == 2 * (6 + 12)
    # DeepSeek-V4 (Dt = 0: one 512-wide row is K and V): cuDNN's published
    # 2.45 ms at T=4096, H=64, top-k 640 is 351 TFLOP/s with this count.
    assert flop_count(4096, 64, 640, 512, 0) == 2 * 4096 * 64 * 640 * 5 * 512
    assert round(flop_count(4096, 64, 640, 512, 0) / 2.45e-3 / 1e12) == 351


def test_dsv4_layout_window_then_compressed():
    """dsv4_like: rows [0, T) are the tokens, [T, T + T/ratio) the compressed
    keys; each row holds its window (ascending), then compressed keys that
    exist for it (c < (t+1) // ratio), then -1; topk_length counts them."""
    T, W, C, R = 96, 8, 6, 4
    idx, tl = dsv4_like(T, window=W, compressed_topk=C, ratio=R, seed=3)
    assert idx.shape == (T, 1, W + C) and idx.dtype == torch.int32
    assert tl.shape == (T,) and tl.dtype == torch.int32
    for t in range(T):
        row = idx[t, 0].tolist()
        n = int(tl[t])
        assert n == min(t + 1, W) + min((t + 1) // R, C)
        assert all(x == -1 for x in row[n:]) and all(x >= 0 for x in row[:n])
        n_win = min(t + 1, W)
        assert row[:n_win] == list(range(t - n_win + 1, t + 1))
        comp = row[n_win:n]
        assert all(T <= x < T + (t + 1) // R for x in comp)
        assert len(set(comp)) == len(comp)
        if (t + 1) // R <= C:  # every compressed key that exists is taken
            assert sorted(comp) == list(range(T, T + (t + 1) // R))


def test_dsv4_deterministic_and_neighbours_share_keys():
    a, la = dsv4_like(512, window=16, compressed_topk=32, seed=5)
    b, lb = dsv4_like(512, window=16, compressed_topk=32, seed=5)
    c, _ = dsv4_like(512, window=16, compressed_topk=32, seed=6)
    assert torch.equal(a, b) and torch.equal(la, lb) and not torch.equal(a, c)
    st = overlap_stats(a, s_kv=512 + 128, sample=128)
    # the window moves by one key and the indexer's scores drift slowly
    assert st["next_overlap"] > 0.8 and st["union_8"] < 1.6


def test_dsv4_rejects_empty_sizes():
    with pytest.raises(ValueError, match="compressed_topk"):
        dsv4_like(16, compressed_topk=0)
