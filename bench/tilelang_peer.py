"""TileLang's sparse-MLA backward as a benchmark peer (bench_bwd.py --tilelang).

TileLang is not a dependency of smla and its kernel is not part of this
repository. To measure it in the same process as the compiled op:

* make ``tilelang`` importable (PyPI wheel; for a machine without network,
  ``bench/tilelang-site.sh`` packs it and its dependencies into one file
  to unpack there and put on PYTHONPATH);
* point ``SMLA_TILELANG_EXAMPLE`` at a copy of TileLang's
  ``examples/deepseek_v32/sparse_mla_bwd.py`` (its folder goes on sys.path,
  so its ``utils`` import resolves as in TileLang's repository);
* run ``python bench/bench_bwd.py --shapes B1 --tilelang
  tilelang_peer:sparse_mla_bwd`` (the script's folder, bench/, is on
  sys.path, so the module is found).

This module gives that example's three kernels (``preprocess`` for Delta,
``bwd``, ``postprocess`` for the dKV cast) Slime's unbatched signature and
compiles them once per shape, with the example's defaults but for the bwd
kernel's thread count at 16 heads per group (``_threads``). A call does
what the compiled op's call does: Delta, the fp32 dKV zero fill, the
backward, the bf16 cast of dKV, the outputs' allocation. The example's kernel masks slot keys above the query's
*index* (it assumes query t sits at kv position t) and reads kv at every
index, so it is timed only on index sets without -1 padding (B1, B2, B2r);
its values there differ from the reference where positions differ, which
does not change its work.
"""

from __future__ import annotations

import importlib.util
import os
import sys

import torch

_module = None
_kernels = {}


def _example():
    global _module
    if _module is None:
        path = os.environ.get("SMLA_TILELANG_EXAMPLE")
        if not path or not os.path.isfile(path):
            raise RuntimeError(
                "tilelang_peer: set SMLA_TILELANG_EXAMPLE to TileLang's "
                f"examples/deepseek_v32/sparse_mla_bwd.py (got {path!r})")
        folder = os.path.dirname(os.path.abspath(path))
        if folder not in sys.path:
            sys.path.insert(0, folder)
        spec = importlib.util.spec_from_file_location("tilelang_sparse_mla_bwd", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        for name in ("preprocess", "bwd", "postprocess"):
            if not hasattr(module, name):
                raise RuntimeError(f"tilelang_peer: {path} defines no '{name}' kernel")
        _module = module
    return _module


def _threads(heads_per_group):
    """The example's 256 threads, or fewer where its gemms cannot use them.
    Its CTA holds block_H = min(64, max(16, next_pow2(H/G))) heads and
    blocks of 32 keys, and its gemm gives each warp a multiple of 16 rows
    and 8 columns of the block_H x 32 scores: at H/G = 16 that is 4 warps
    (TileLang refuses 8: "No valid warp partition for T.gemm: M=16, N=32").
    """
    block_h = min(64, max(16, 1 << max(0, heads_per_group - 1).bit_length()))
    return min(256, 32 * (block_h // 16) * (32 // 8))


def sparse_mla_bwd(q, kv, o, do, indices, lse, sm_scale=None):
    """dq [T, H, D+Dt] bf16, dkv [S_kv, G, D+Dt] bf16 from Slime's unbatched
    arguments: q [T, H, D+Dt], kv [S_kv, G, D+Dt], o / do [T, H, D], indices
    [T, G, K] int32, lse [T, H] (base 2, as the example's kernel takes it)."""
    T, H, width = q.shape
    S_kv, G, _ = kv.shape
    K = indices.shape[-1]
    D = o.shape[-1]
    scale = None if sm_scale is None else float(sm_scale)
    key = (T, S_kv, H, G, D, width - D, K, scale, q.device)
    kernels = _kernels.get(key)
    if kernels is None:
        m = _example()
        kernels = (m.preprocess(1, T, H, D),
                   m.bwd(1, T, S_kv, H, D, width - D, K, G, scale, True,
                         threads=_threads(H // G)),
                   m.postprocess(1, S_kv, D, width - D, G))
        _kernels[key] = kernels
    preprocess, bwd, postprocess = kernels
    do4 = do.unsqueeze(0)
    delta = preprocess(o.unsqueeze(0), do4)
    dkv = torch.zeros((1, S_kv, G, width), dtype=torch.float32, device=kv.device)
    dq = bwd(q.unsqueeze(0), kv.unsqueeze(0), do4, indices.unsqueeze(0),
             lse.unsqueeze(0), delta, dkv)
    return dq[0], postprocess(dkv)[0]
