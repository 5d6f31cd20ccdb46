"""Synthetic dumps with the reported GLM-5.2 shape:
``python -m smla.synthetic OUT.pt [--tokens T] [--kv S_KV] ...``

Defaults: H=16 heads per rank, D=512, Dt=64, G=1, topk=2048, context
parallelism over 4 ranks with the zigzag split (rank r holds sequence chunks r
and 2*4-1-r of the S_kv-long sequence, so T = S_kv/4 tokens with absolute
q_positions), DSA-like indices (smla.indices.dsa_like) with -1 padding for
early tokens. out and lse (base 2, TileLang's convention) come from the
reference forward, so they are consistent; do is random.

Adversarial rows are planted on purpose:
* ``--dead-rows N``: N (t, h) rows each get lse = +inf, -inf and NaN;
* ``--empty-rows M``: M tokens get all indices -1 (no valid slot).

``--tokens`` keeps T evenly spaced positions of the shard and ``--kv``,
``--heads``, ``--d``, ``--dt``, ``--topk`` shrink the problem for a CPU.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any, Dict, Optional

import torch

from .dump import dump_call
from .indices import causal_random, cp_positions, dsa_like
from .reference import sparse_mla_fwd_reference


def make_call(
    *, tokens: Optional[int] = None, s_kv: int = 8192, heads: int = 16, d: int = 512,
    dt: int = 64, topk: int = 2048, groups: int = 1, cp_rank: int = 0, cp_world: int = 4,
    dead_rows: int = 1, empty_rows: int = 1, indices_kind: str = "dsa", seed: int = 0,
    device="cpu",
) -> Dict[str, Any]:
    """A consistent backward call as keyword arguments of smla.dump_call."""
    pos = cp_positions(s_kv, cp_rank, cp_world, device=device)
    if tokens is not None and tokens < pos.numel():
        keep = torch.linspace(0, pos.numel() - 1, tokens, device=device).round().long()
        pos = pos[keep]
    T = pos.numel()
    gen = torch.Generator(device="cpu").manual_seed(seed)
    dqk = d + dt

    def randn(*shape):
        return torch.randn(*shape, generator=gen).to(device=device, dtype=torch.bfloat16)

    q, kv, do = randn(T, heads, dqk), randn(s_kv, groups, dqk), randn(T, heads, d)
    gen_fn = {"dsa": dsa_like, "random": causal_random}[indices_kind]
    indices = gen_fn(T, s_kv, topk, seed=seed, groups=groups, positions=pos, device=device)
    picks = torch.randperm(T, generator=gen)
    empty = picks[:empty_rows].to(device)
    indices[empty] = -1
    q_positions = pos.to(torch.int32)
    sm_scale = dqk ** -0.5
    o, lse = sparse_mla_fwd_reference(q, kv, indices, sm_scale, d_v=d, lse_base=2,
                                      q_positions=q_positions)
    flat = torch.randperm(T * heads, generator=gen)[: 3 * dead_rows].to(device)
    for k, value in enumerate((float("inf"), float("-inf"), float("nan"))):
        rows = flat[k * dead_rows:(k + 1) * dead_rows]
        lse.view(-1)[rows] = value
    meta = {
        "source": "smla.synthetic", "seed": seed, "cp_rank": cp_rank, "cp_world": cp_world,
        "indices": indices_kind, "dead_rows_each": dead_rows, "empty_rows": empty_rows,
    }
    return dict(q=q, kv=kv, o=o, do=do, indices=indices, lse=lse, sm_scale=sm_scale,
                lse_base=2, q_positions=q_positions, meta=meta)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m smla.synthetic",
                                description="Write a synthetic GLM-5.2-shaped backward dump.")
    p.add_argument("out", help="output .pt file")
    p.add_argument("--tokens", type=int, default=None, help="T (default: S_kv / cp_world)")
    p.add_argument("--kv", type=int, default=8192, help="S_kv = full sequence length")
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--groups", type=int, default=1)
    p.add_argument("--d", type=int, default=512)
    p.add_argument("--dt", type=int, default=64)
    p.add_argument("--topk", type=int, default=2048)
    p.add_argument("--cp-rank", type=int, default=0)
    p.add_argument("--cp-world", type=int, default=4)
    p.add_argument("--dead-rows", type=int, default=1)
    p.add_argument("--empty-rows", type=int, default=1)
    p.add_argument("--indices", choices=("dsa", "random"), default="dsa")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="cpu")
    a = p.parse_args(argv)
    call = make_call(tokens=a.tokens, s_kv=a.kv, heads=a.heads, d=a.d, dt=a.dt, topk=a.topk,
                     groups=a.groups, cp_rank=a.cp_rank, cp_world=a.cp_world,
                     dead_rows=a.dead_rows, empty_rows=a.empty_rows, indices_kind=a.indices,
                     seed=a.seed, device=a.device)
    path = dump_call(a.out, **call)
    q, idx = call["q"], call["indices"]
    print(f"wrote {path}: T={q.shape[0]} H={q.shape[1]} S_kv={call['kv'].shape[0]} "
          f"D+Dt={q.shape[2]} K={idx.shape[2]} padded slots={int((idx < 0).sum())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
