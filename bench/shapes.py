"""The benchmark shapes (docs/performance.md, "Shapes"; ../shared/BENCHMARKS.md)
and the problems bench_bwd.py times on them.

A shape is (T, S_kv, H, G, D, Dt, K, index kind). Index kinds:

* random: causal random (smla.indices.causal_random), the adversarial bound;
* dsa: DSA-like, neighbouring queries share most keys (smla.indices.dsa_like);
* packed: four DSA-like sequences packed back to back, with query positions;
* dsv4: DeepSeek-V4's compressed attention (smla.indices.dsv4_like): one
  kv row of width D serves as K and V (Dt = 0), S_kv = T uncompressed rows
  + T / ratio compressed rows, K = the window + the compressed top-k, a
  per-row ``topk_length`` and an fp32 attention sink per head.
"""

from __future__ import annotations

import torch

from smla.contract import default_sm_scale
from smla.indices import causal_random, dsa_like, dsv4_like, packed
from smla.reference import apply_sink, sparse_mla_fwd_reference

# name: (T, S_kv, H, G, D, Dt, K, index kind)
SHAPES = {
    "B1": (4096, 8192, 64, 1, 512, 64, 2048, "random"),
    "B2": (8192, 32768, 16, 1, 512, 64, 2048, "dsa"),
    "B2r": (8192, 32768, 16, 1, 512, 64, 2048, "random"),
    "B3": (4 * 2048, 8192, 16, 1, 512, 64, 2048, "packed"),
}
# B1 with the other head counts of the kernel library (H=128 as in
# DeepSeek-V3.2); H16 is GLM-5.2's rank at TP4 on random indices over
# S_kv = 16384.
for _heads in (32, 128):
    SHAPES[f"H{_heads}"] = SHAPES["B1"][:2] + (_heads,) + SHAPES["B1"][3:]
SHAPES["H16"] = (4096, 16384, 16, 1, 512, 64, 2048, "random")
# The same shapes on DSA-like indices, the ones users run: B1 and H128 as
# DeepSeek-V3.2 / GLM-5.2 at low TP, GLM one context-parallel rank of GLM-5.2
# at TP4 (H16's size).
SHAPES["B1d"] = SHAPES["B1"][:7] + ("dsa",)
SHAPES["H128d"] = SHAPES["H128"][:7] + ("dsa",)
SHAPES["GLM"] = SHAPES["H16"][:7] + ("dsa",)
# DeepSeek-V4-Flash at TP1 (issue 50): one sequence of 4096 tokens, 64 heads,
# kv rows of 512 (K = V), top-k 640 = a window of 128 + 512 of the 1024
# compressed keys (ratio 4): S_kv = 4096 + 1024.
SHAPES["DSv4"] = (4096, 4096 + 4096 // 4, 64, 1, 512, 0, 640, "dsv4")
DEFAULT_SHAPES = ["B1", "B2", "B2r", "B3"]

TINY = {
    "B1": (64, 256, 8, 1, 32, 16, 64, "random"),
    "B2": (64, 512, 4, 1, 32, 16, 64, "dsa"),
    "B2r": (64, 512, 4, 1, 32, 16, 64, "random"),
    "B3": (4 * 32, 128, 4, 1, 32, 16, 64, "packed"),
}
TINY["H32"] = TINY["B1"]
TINY["H16"] = TINY["B2r"]
TINY["H128"] = TINY["B1"][:2] + (16,) + TINY["B1"][3:]
TINY["B1d"] = TINY["B1"][:7] + ("dsa",)
TINY["H128d"] = TINY["H128"][:7] + ("dsa",)
TINY["GLM"] = TINY["B2"]
TINY["DSv4"] = (64, 64 + 64 // 4, 8, 1, 32, 0, 16, "dsv4")



def dsv4_window(K: int) -> int:
    """The recent-key window of a dsv4 shape: DeepSeek-V4's 128, at most
    half of K (tiny shapes); the other K - window slots are compressed keys."""
    return min(128, K // 2)


def describe(spec) -> str:
    """One line naming the shape's sizes and indices."""
    T, S, H, G, D, Dt, K, kind = spec
    text = f"T={T} S_kv={S} H={H} G={G} D+Dt={D}+{Dt} K={K} indices={kind}"
    if kind == "dsv4":
        window = dsv4_window(K)
        n_comp = S - T
        text += (f" (kv rows: {T} uncompressed, then {n_comp} compressed, ratio {T // n_comp}; "
                 f"a window of {window} + the top {K - window} compressed keys; topk_length; "
                 f"an fp32 sink per head)")
    return text


def make_problem(spec, device, seed=0):
    """The inputs of one backward call on ``spec``: q, kv, o, do, indices,
    lse (base 2; for dsv4 natural log and including the sink), scale and
    q_positions; dsv4 adds kv2d / idx2d (the flat tensors cuDNN-shaped
    entry points take), topk_length, attn_sink and lse_keys (natural log,
    over the keys only, as cuDNN's wrapper takes it)."""
    T, S, H, G, D, Dt, K, kind = spec
    gen = torch.Generator(device="cpu").manual_seed(seed)

    def randn(*shape):
        return torch.randn(*shape, generator=gen).to(device=device, dtype=torch.bfloat16)

    q_positions, extra = None, {}
    if kind == "random":
        idx = causal_random(T, S, K, seed=seed, groups=G, device=device)
    elif kind == "dsa":
        idx = dsa_like(T, S, K, seed=seed, groups=G, device=device)
    elif kind == "packed":
        idx, q_positions, _ = packed([T // 4] * 4, K, kind="dsa", seed=seed, groups=G,
                                     device=device)
    elif kind == "dsv4":
        window = dsv4_window(K)
        if G != 1 or Dt != 0 or window < 1 or S <= T:
            raise ValueError(f"shapes: a dsv4 shape needs G = 1, Dt = 0, K >= 2 and S_kv > T, "
                             f"got {spec}")
        idx, topk_length = dsv4_like(T, window=window, compressed_topk=K - window,
                                     ratio=T // (S - T), seed=seed, device=device)
        extra = dict(topk_length=topk_length, idx2d=idx[:, 0].contiguous())
    else:
        raise ValueError(f"shapes: unknown index kind {kind!r}")
    q, kv, do = randn(T, H, D + Dt), randn(S, G, D + Dt), randn(T, H, D)
    scale = default_sm_scale(D + Dt)
    if kind != "dsv4":
        o, lse = sparse_mla_fwd_reference(q, kv, idx, scale, d_v=D, q_positions=q_positions)
        return dict(kind=kind, q=q, kv=kv, o=o, do=do, indices=idx, lse=lse, scale=scale,
                    q_positions=q_positions)
    # The sink enters the softmax's denominator only (smla.reference.apply_sink:
    # the keys' output scaled per row, lse the sink-inclusive one); cuDNN-shaped
    # entry points take lse_keys. Its values do not change the work.
    sink = torch.randn(H, generator=gen).to(device=device, dtype=torch.float32)
    o_keys, lse_keys = sparse_mla_fwd_reference(q, kv, idx, scale, d_v=D, lse_base="e",
                                                topk_length=extra["topk_length"])
    o, lse = apply_sink(o_keys, lse_keys, sink, "e")
    return dict(kind=kind, q=q, kv=kv, o=o, do=do, indices=idx, lse=lse, scale=scale,
                q_positions=None, lse_keys=lse_keys, attn_sink=sink,
                kv2d=kv[:, 0].contiguous(), **extra)
