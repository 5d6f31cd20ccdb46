"""smla._compiled.aligned_pair_rows (torch.ops.smla.aligned_pair_rows): the aligned index rows of token pairs
that sparse_mla_bwd hands the folded (tokens = 2) kernel
(python/csrc/TokenPairs.h), checked against a plain Python union on the
CPU. The GPU tests (test_gpu.py) run the kernel on them."""

import pytest
import torch

from smla import _compiled

try:
    _compiled.load()
except RuntimeError as exc:  # pragma: no cover - depends on the build
    pytest.skip(f"the extension smla._C is unavailable ({exc})", allow_module_level=True)
aligned_pair_rows = _compiled.aligned_pair_rows


def naive(indices, S):
    """Per pair: the sorted union of both rows' in-range keys; row slot j
    holds the key where that token selected it, else -1."""
    T, _, K = indices.shape
    rows, dup = [], False
    for p in range(T // 2):
        a, b = (indices[2 * p + i, 0].tolist() for i in range(2))
        mem = [[k for k in r if 0 <= k < S] for r in (a, b)]
        dup |= any(len(m) != len(set(m)) for m in mem)
        union = sorted(set(mem[0]) | set(mem[1]))
        rows.append([[k if k in set(m) else -1 for k in union] for m in mem])
    U = max(max(len(r[0]) for r in rows), 1)
    out = torch.full((T, 1, U), -1, dtype=torch.int32)
    for p, r in enumerate(rows):
        for i in range(2):
            out[2 * p + i, 0, :len(r[i])] = torch.tensor(r[i], dtype=torch.int32)
    return out, U, dup


def adversarial(T, S, K, seed, overlap=0.7, dup=False):
    g = torch.Generator().manual_seed(seed)
    idx = torch.empty(T, 1, K, dtype=torch.int64)
    for p in range(T // 2):
        pool = torch.randperm(S, generator=g)[: int(K * (2 - overlap)) + 1]
        idx[2 * p, 0] = pool[:K]
        idx[2 * p + 1, 0] = pool[-K:][torch.randperm(K, generator=g)]
    r = torch.rand(T, 1, K, generator=g)
    idx = torch.where(r < 0.1, -1, idx)
    idx = torch.where((r > 0.1) & (r < 0.15), S + 5, idx)
    idx = torch.where((r > 0.15) & (r < 0.17), -(2 ** 31), idx)
    idx = torch.where((r > 0.17) & (r < 0.19), 2 ** 31 - 1, idx)
    idx[T // 2] = -1
    if dup:
        idx[3, 0, -1] = idx[3, 0, 0] = 1
    return idx.to(torch.int32)


@pytest.mark.parametrize("T,S,K,overlap", [(2, 50, 1, 0.0), (8, 300, 7, 0.5), (24, 300, 64, 0.7),
                                           (6, 40, 30, 0.9), (10, 1000, 100, 0.0)])
def test_matches_naive_union(T, S, K, overlap):
    idx = adversarial(T, S, K, seed=T + K, overlap=overlap)
    rows, U, dup = aligned_pair_rows(idx, S)
    want, wU, wdup = naive(idx, S)
    assert (U, dup) == (wU, wdup) and not dup
    assert rows.dtype == torch.int32 and rows.is_contiguous()
    assert torch.equal(rows, want)


def test_each_row_keeps_its_in_range_keys():
    """The rows are index rows of their own tokens: the same in-range keys,
    the rest -1 (so a kernel masking -1 computes the given tokens' sums)."""
    T, S, K = 16, 500, 40
    idx = adversarial(T, S, K, seed=3)
    rows, U, _ = aligned_pair_rows(idx, S)
    for t in range(T):
        given = sorted(k for k in idx[t, 0].tolist() if 0 <= k < S)
        got = [k for k in rows[t, 0].tolist() if k != -1]
        assert got == given  # ascending, nothing lost or added
    both = (rows[0::2] >= 0) & (rows[1::2] >= 0)
    assert torch.equal(rows[0::2][both], rows[1::2][both])  # shared slots agree
    assert ((rows[0::2] >= 0) | (rows[1::2] >= 0))[:, :, :U].sum(-1).max() == U


def test_duplicate_key_in_a_row_is_reported():
    idx = adversarial(8, 300, 16, seed=1, dup=True)
    _, _, dup = aligned_pair_rows(idx, 300)
    assert dup
    # Out-of-range repeats (padding) are not duplicates.
    pad = torch.full((4, 1, 6), -1, dtype=torch.int32)
    pad[:, :, 0] = torch.arange(4, dtype=torch.int32).view(4, 1)
    rows, U, dup = aligned_pair_rows(pad, 10)
    assert not dup and U == 2


def test_bad_arguments_name_the_argument():
    with pytest.raises(ValueError, match="'indices' needs an even token count"):
        aligned_pair_rows(torch.zeros(3, 1, 4, dtype=torch.int32), 10)
    with pytest.raises(ValueError, match="'indices' must be an int32 tensor"):
        aligned_pair_rows(torch.zeros(2, 2, 4, dtype=torch.int32), 10)
    with pytest.raises(ValueError, match="'s_kv' must be >= 1"):
        aligned_pair_rows(torch.zeros(2, 1, 4, dtype=torch.int32), 0)
