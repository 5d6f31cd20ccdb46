"""Tiny input builders for the Python tests (adversarial by default)."""

import torch

from naive_math import dense_forward, slot_counts

INT32_MIN, INT32_MAX = -(2 ** 31), 2 ** 31 - 1


def adversarial_indices(T, G, K, S, gen, q_positions=None, mix=True):
    """int32 [T, G, K]: mostly valid keys, plus -1 padding, indices >= S,
    very negative values, duplicates and (with q_positions) future keys."""
    hi = S if q_positions is None else None
    idx = torch.empty(T, G, K, dtype=torch.int64)
    for t in range(T):
        top = S if hi is not None else int(q_positions[t]) + 1
        idx[t] = torch.randint(0, max(top, 1), (G, K), generator=gen)
    if mix and K > 1:
        r = torch.rand(T, G, K, generator=gen)
        idx = torch.where(r < 0.10, -1, idx)
        idx = torch.where((r >= 0.10) & (r < 0.15), S + torch.randint(0, 3, (T, G, K), generator=gen), idx)
        idx = torch.where((r >= 0.15) & (r < 0.18), INT32_MAX, idx)
        idx = torch.where((r >= 0.18) & (r < 0.21), INT32_MIN, idx)
        idx = torch.where((r >= 0.21) & (r < 0.23), -7, idx)
        idx[:, :, -1] = idx[:, :, 0]  # duplicates
        if q_positions is not None:  # a key in the future of the query
            idx[:, 0, K // 2] = (q_positions.long() + 1).clamp(max=S - 1)
    return idx.to(torch.int32)


def make_inputs(T=5, H=4, G=1, S=13, K=6, D=8, Dt=4, *, seed=0, dtype=torch.float64,
                q_positions=None, indices=None, mix=True, lse_base=2, scale=None):
    """Random q/kv/do, adversarial indices, and a consistent o/lse computed by
    the dense oracle (rows without valid slots: o = 0, lse = -inf)."""
    gen = torch.Generator().manual_seed(seed)
    W = D + Dt
    q = torch.randn(T, H, W, generator=gen).to(dtype)
    kv = torch.randn(S, G, W, generator=gen).to(dtype)
    do = torch.randn(T, H, D, generator=gen).to(dtype)
    if indices is None:
        indices = adversarial_indices(T, G, K, S, gen, q_positions, mix)
    scale = W ** -0.5 if scale is None else scale
    with torch.no_grad():
        out, lse_e = dense_forward(q.double(), kv.double(), indices, scale, D, q_positions)
    live = slot_counts(indices, S, q_positions).sum(-1).repeat_interleave(H // G, 1) > 0
    out = torch.where(live.unsqueeze(-1), out, torch.zeros(()))
    lse_e = torch.where(live, lse_e, torch.tensor(float("-inf"), dtype=torch.float64))
    lse = lse_e / torch.log(torch.tensor(2.0, dtype=torch.float64)) if lse_base == 2 else lse_e
    lse_dtype = torch.float64 if dtype == torch.float64 else torch.float32
    return dict(q=q, kv=kv, o=out.to(dtype), do=do, indices=indices, lse=lse.to(lse_dtype),
                scale=scale, q_positions=q_positions, lse_base=lse_base)
