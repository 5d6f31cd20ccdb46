"""cuDNN frontend's DSA sparse-attention backward as a benchmark peer
(bench_bwd.py --cudnn).

NVIDIA's cuDNN frontend (PyPI ``nvidia-cudnn-frontend``, with the CUTLASS
DSL it compiles its kernels with) ships an SM90 sparse-attention backward
(``cudnn.deepseek_sparse_attention.sparse_attention_backward_wrapper``).
It is not a dependency of smla; ``bench/cudnn-site.sh`` packs it for a
machine without network. A call here does what the compiled op's call
does: Delta (cuDNN's preprocess kernel), the fp32 dKV zero fill, the
backward, the dKV cast, the outputs' allocation.

On the MLA shapes the peer's contract differs from smla's in three ways,
which this adapter bridges without changing the work:

* lse is in nats (smla's ``lse_base=e``); the harness's lse is base 2, so
  it is converted once per shape, outside the timed call;
* kv is ``[S_kv, D+Dt]`` (one kv group) and indices ``[T, K]``;
* there are no query positions: a slot whose key lies past its query's
  position becomes -1 (cuDNN skips it as smla masks it), converted once
  per shape. The attention sink is -inf for every head (no sink), so
  cuDNN's d_sink is 0 and its gradients are the backward smla computes.

On DeepSeek-V4's shape (sparse_attention_bwd) it is called as its trainers
call it: flat kv [S_kv, 512] serving as K and V, the lse over the keys only
(natural log; the wrapper folds the sink into it), an fp32 sink per head,
per-row ``topk_length``; it returns d_sink too.
"""

from __future__ import annotations

import math

import torch

_LN2 = math.log(2.0)


def available():
    """True when cuDNN's sparse-attention backward imports and the device
    is an SM90 GPU (the kernel this peer measures)."""
    if not torch.cuda.is_available() or torch.cuda.get_device_capability()[0] != 9:
        return False
    try:
        import cudnn.deepseek_sparse_attention as dsa  # noqa: F401
        return hasattr(dsa, "sparse_attention_backward_wrapper")
    except Exception:  # an absent or broken install: the peer is not run
        return False


def prepare(q, kv, indices, lse, q_positions=None, lse_base=2):
    """The peer's operands, computed once per shape: (kv2d, idx2d, lse_e,
    sink). Raises ValueError for shapes the peer does not take (G > 1)."""
    if kv.shape[1] != 1 or indices.shape[1] != 1:
        raise ValueError("cudnn_peer: the peer takes one kv group (G = 1)")
    idx = indices[:, 0, :].contiguous()
    if q_positions is not None:
        idx = torch.where(idx > q_positions[:, None].to(idx.dtype),
                          torch.full_like(idx, -1), idx)
    lse_e = (lse * _LN2 if lse_base == 2 else lse).contiguous()
    sink = torch.full((q.shape[1],), float("-inf"), device=q.device, dtype=torch.float32)
    return kv[:, 0, :].contiguous(), idx.contiguous(), lse_e, sink


def sparse_mla_bwd(q, kv2d, o, do, idx2d, lse_e, sink, sm_scale):
    """(dq [T, H, D+Dt], dkv [S_kv, 1, D+Dt]) from cuDNN's SM90 backward on
    operands from prepare()."""
    from cudnn.deepseek_sparse_attention import sparse_attention_backward_wrapper

    out = sparse_attention_backward_wrapper(
        q, kv2d, o, do, lse_e, sink, idx2d, softmax_scale=float(sm_scale))
    return out["dq"], out["dkv"].unsqueeze(1)


def sparse_attention_bwd(q, kv2d, o, do, lse_keys, attn_sink, idx2d, sm_scale, topk_length=None):
    """(dq, dkv [S_kv, D], d_sink [H]) from cuDNN's SM90 backward with the
    sink on: lse_keys natural-log over the keys only, attn_sink fp32 [H],
    topk_length int32 [T] (each row's valid prefix of idx2d) or None."""
    from cudnn.deepseek_sparse_attention import sparse_attention_backward_wrapper

    out = sparse_attention_backward_wrapper(
        q, kv2d, o, do, lse_keys, attn_sink, idx2d, softmax_scale=float(sm_scale),
        topk_length=topk_length)
    return out["dq"], out["dkv"], out["d_sink"]
