"""A reduced GPU suite for compute-sanitizer: small problems that still hold
every kind of invalid index (-1, S_kv, S_kv + 5, INT32_MIN, INT32_MAX,
positions past the causal limit), duplicate indices (for the token-pair
kernels in one pair, which then takes the disjoint layout, the others
sharing half of their keys), a row with no valid
slot (the token-pair kernels over three blocks), lse = +inf / -inf / NaN, a stale lse that triggers the clamp, a tail
block (K not a multiple of the block), non-power-of-two heads and G = 2, for
every configuration the kernel library has; on the kernels that take
per-token lengths (DeepSeek-V4's), once more with an attention sink and
topk_length (rows of 0 slots, of a tail block, past K, negative). Exits
non-zero on a non-finite output or a mismatch with the reference, so the
sanitizer run also checks results.
"""

from __future__ import annotations

import json
import math
import os
import sys

import torch

import smla
from smla import _compiled
from smla.contract import lse_with_sink
from smla.reference import sparse_mla_bwd_reference, sparse_mla_fwd_reference


def case(H, G, D, Dt, lse_base, positions, T=5, S=97, K=37, seed=0, pairs=False):
    gen = torch.Generator().manual_seed(seed)
    dev = "cuda"
    q = torch.randn(T, H, D + Dt, generator=gen).to(dev, torch.bfloat16)
    kv = torch.randn(S, G, D + Dt, generator=gen).to(dev, torch.bfloat16)
    do = torch.randn(T, H, D, generator=gen).to(dev, torch.bfloat16)
    idx = torch.randint(0, S, (T, G, K), generator=gen, dtype=torch.int32)
    bad = torch.tensor([-1, S, S + 5, -(2**31), 2**31 - 1], dtype=torch.int32)
    idx[:, :, : len(bad)] = bad
    if pairs:
        # Odd tokens share half of their keys with the even token before
        # (aligned rows); token 2 repeats a key (its pair: disjoint rows).
        m = K - len(bad)
        for t in range(0, T - 1, 2):
            pool = torch.randperm(S, generator=gen)[: m + m // 2]
            idx[t, :, len(bad):] = pool[:m]
            idx[t + 1, :, len(bad):] = pool[m // 2:]
        idx[2, :, -1] = idx[2, :, len(bad)]
    else:
        idx[:, :, -1] = idx[:, :, len(bad)]      # duplicate
    idx[T - 1] = -1                              # no valid slot
    idx = idx.to(dev)
    pos = (torch.arange(T, dtype=torch.int32) + S // 2).to(dev) if positions else None
    o, lse = sparse_mla_fwd_reference(q, kv, idx, d_v=D, q_positions=pos, lse_base=lse_base)
    lse[0, 0], lse[1, H - 1], lse[2, 0] = math.inf, -math.inf, math.nan
    lse[3, 0] -= 40.0                            # stale: clamps
    return dict(q=q, kv=kv, o=o, do=do, indices=idx, lse=lse, q_positions=pos,
                lse_base=lse_base)


DTYPES = {"bf16": torch.bfloat16, "f32": torch.float32}


def with_sink_and_lengths(p, H, K, seed=1):
    """`p` with an attention sink (its lse made sink-inclusive) and per-token
    slot counts: 0, a tail block, all of K and more, negative, one."""
    gen = torch.Generator().manual_seed(seed)
    T, dev = p["q"].shape[0], p["q"].device
    sink = torch.randn(H, generator=gen).to(dev)
    lengths = torch.tensor([0, K // 2 + 3, K, K + 9, -4, 1][:T], dtype=torch.int32)
    lengths = torch.cat([lengths, torch.full((T - len(lengths),), K, dtype=torch.int32)])
    lse = lse_with_sink(p["lse"], sink, p["lse_base"])
    # The guards' rows stay: +inf / -inf / NaN and the stale row.
    lse[0, 0], lse[1, H - 1], lse[2, 0] = math.inf, -math.inf, math.nan
    return dict(p, lse=lse, attn_sink=sink, topk_length=lengths.to(dev))


def check(label, p, dq_t, dkv_t):
    """Runs the compiled op on `p` and the CPU reference; prints one line,
    returns whether it agrees."""
    sink = p.get("attn_sink") is not None
    out = smla.sparse_mla_bwd(**p, diagnostics=True, mode="compiled",
                              dq_dtype=DTYPES[dq_t], dkv_dtype=DTYPES[dkv_t])
    torch.cuda.synchronize()
    # The reference runs on the CPU: only the kernels are under the tool.
    cpu = {k: (v.cpu() if torch.is_tensor(v) else v) for k, v in p.items()}
    ref = sparse_mla_bwd_reference(
        cpu["q"], cpu["kv"], cpu["o"], cpu["do"], cpu["indices"], cpu["lse"],
        lse_base=cpu["lse_base"], q_positions=cpu["q_positions"],
        attn_sink=cpu.get("attn_sink"), topk_length=cpu.get("topk_length"),
        dq_dtype=torch.float32, dkv_dtype=torch.float32, diagnostics=True)
    got = [t.cpu() for t in out[:-1]]
    cnt, rcnt = out[-1], ref[-1]
    err = 0.0
    finite = True
    for g, r in zip(got, ref[:-1]):
        finite = finite and bool(torch.isfinite(g.float()).all())
        err = max(err, float((g.double() - r.double()).norm()
                             / r.double().norm().clamp_min(1e-30)))
    ok = finite and err <= 1e-2 and cnt == rcnt
    print(f"{'ok ' if ok else 'BAD'} {label} sink={sink} K={p['indices'].shape[-1]} "
          f"rel_err={err:.2e} counters={cnt} ref={rcnt}")
    return ok


def main() -> int:
    """SMLA_SANITIZE_LIMIT=N checks only the first N configurations;
    SMLA_SANITIZE_HEADS=16,128 only those head counts (a kernel's config
    heads: 32 for the H=16 token-pair kernels); SMLA_SANITIZE_TOKENS=2 only
    the token-pair kernels."""
    ext = _compiled.load()

    limit = int(os.environ.get("SMLA_SANITIZE_LIMIT", "1000"))
    heads = {int(h) for h in os.environ.get("SMLA_SANITIZE_HEADS", "").split(",") if h}
    only_tokens = int(os.environ.get("SMLA_SANITIZE_TOKENS", "0"))
    failures = 0
    seen = set()
    with open(os.path.join(ext.kernel_directory(), "manifest.json")) as f:
        manifest = json.load(f)
    for k in manifest["kernels"]:
        c = k["config"]
        key = (c["heads"], c["groups"], c["d"], c["dt"], c["lse_base"], c["positions"],
               c["dq_type"], c["dkv_type"], c.get("tokens", 1))
        if k.get("kind") != "bwd" or key in seen or len(seen) >= limit:
            continue
        if heads and c["heads"] not in heads:
            continue
        if only_tokens and c.get("tokens", 1) != only_tokens:
            continue
        seen.add(key)
        H, G, D, Dt, base, pos, dq_t, dkv_t, tokens = key
        # A tokens = 2 kernel serves H / 2 heads per token, on token pairs.
        H //= tokens
        smla.configure(pairs="on" if tokens == 2 else "off")
        # Pairs walk more than two blocks of 64 (~140 aligned slots): the
        # wgmma scatter reduces block j during step j + 1 and the last
        # block after the loop (smla-defer-scatter).
        # A cluster kernel (the manifest's "cluster") runs two head-block
        # CTAs that hand packed tiles over in two buffers by block parity:
        # walk three blocks and a tail so both buffers and both parities are
        # used.
        sizes = (dict(T=6, K=100, S=397) if tokens == 2 else
                 dict(T=5, K=170, S=397) if c.get("cluster") else dict(T=5))
        p = case(H, G, D, Dt, 2 if base in (2, "2") else "e", pos,
                 pairs=tokens == 2, **sizes)
        label = f"H={H} G={G} tokens={tokens} D={D}+{Dt} lse={base} pos={pos}"
        failures += not check(label, p, dq_t, dkv_t)
        if any(q["name"] == "topk_length" for q in k["params"]):
            # Two blocks of 64 and a tail: lengths end inside, at and past them.
            p = case(H, G, D, Dt, 2 if base in (2, "2") else "e", pos, T=6, K=150, S=397)
            failures += not check(label, with_sink_and_lengths(p, H, 150), dq_t, dkv_t)
    print(f"{len(seen)} configurations, {failures} failed")
    return 1 if failures or not seen else 0


if __name__ == "__main__":
    sys.exit(main())
