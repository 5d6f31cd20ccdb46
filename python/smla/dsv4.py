"""Entry points shaped like DeepSeek-V4's trainers' backward calls: one kv
row per key serving as both K and V (Dt = 0 at width 512; V = the first
D columns of a wider row too), an attention sink per head, per-token
lengths. Each takes its client's tensors and conventions as they are and
runs smla's backward (every mode; python/USAGE.md, "DeepSeek-V4").

sparse_attention_backward(q, kv, out, dout, lse, attn_sink, topk_idxs,
                          softmax_scale=None, topk_length=None)
    cuDNN frontend's DSA backward wrapper
    (``cudnn.deepseek_sparse_attention.sparse_attention_backward_wrapper``,
    which Megatron-LM's SparseAttnFunc and PaddleFleet call): flat tensors,
    q [T, H, D+Dt], kv [S_kv, D+Dt], out/dout [T, H, D], topk_idxs [T, K]
    int32 into kv, topk_length [T] int32; lse [T, H] fp32 natural-log over
    the keys only (FlashMLA's forward writes it so): the sink is folded in
    here (smla.contract.lse_with_sink), a row without keys (-inf) then
    gets the sink and a +inf row is dead, as in cuDNN's preprocess.
    softmax_scale defaults to (D+Dt)^-0.5. Returns (dq, dkv, d_sink), also
    readable by name (result["dq"]) as cuDNN's dict-like result.

sparse_mqa_bwd_interface(q, kv, attn_sink, o, do, topk_idxs, lse,
                         sm_scale=None)
    TileLang's DeepSeek-V4 sparse MQA backward (miles'
    ``miles_plugins/models/deepseek_v4/ops/kernel/tilelang_sparse_mla_bwd.py``):
    a batch of sequences, q [B, S, H, D+Dt], kv [B, S_kv, D+Dt], o/do
    [B, S, H, D], topk_idxs [B, S, K] int32 into the sequence's own kv
    (valid in [0, S_kv)); lse [B, S, H] fp32 base 2 including the sink (its
    forward adds exp2(sink log2(e)) to the denominator). sm_scale defaults
    to (D+Dt)^-0.5. The batch runs as one call: the indices are offset into
    one flat kv (an invalid one becomes -1), no loop over it. Returns
    (dq [B, S, H, D+Dt], dkv [B, S_kv, D+Dt], d_attn_sink [H]).

Both take keyword-only ``dq_dtype`` / ``dkv_dtype`` (default: q's and
kv's), ``diagnostics`` (the guard counters appended, smla.sparse_mla_bwd's)
and ``mode``. Their arguments are checked by smla.checks under their own
names, with the messages of smla.sparse_mla_bwd.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from .api import resolve_mode, run_checked_call
from .checks import (CUDNN_NAMES, INT32_MAX, TILELANG_NAMES, validate_batched_mqa_layout,
                     validate_bwd_args, validate_flat_mqa_layout)
from .contract import lse_with_sink

CUDNN_CONTEXT = "smla.sparse_attention_backward"
TILELANG_CONTEXT = "smla.sparse_mqa_bwd_interface"


class SparseAttentionGrads(NamedTuple):
    """(dq, dkv, d_sink), also readable by name as cuDNN's result is."""

    dq: torch.Tensor
    dkv: torch.Tensor
    d_sink: torch.Tensor

    def __getitem__(self, key):
        if isinstance(key, str):
            if key not in self._fields:
                raise KeyError(key)
            return getattr(self, key)
        return tuple.__getitem__(self, key)


def sparse_attention_backward(q, kv, out, dout, lse, attn_sink, topk_idxs, softmax_scale=None,
                              topk_length=None, *, dq_dtype=None, dkv_dtype=None,
                              diagnostics=False, mode=None):
    """cuDNN's DSA backward wrapper's call (module docstring). Returns
    SparseAttentionGrads(dq, dkv, d_sink), or (dq, dkv, d_sink, counters)
    with ``diagnostics=True``."""
    mode = resolve_mode(mode, q)
    validate_flat_mqa_layout(q, kv, out, dout, lse, attn_sink, topk_idxs, CUDNN_CONTEXT)
    kv3, idx3 = kv.unsqueeze(1), topk_idxs.unsqueeze(1)
    validate_bwd_args(q, kv3, out, dout, idx3, lse, attn_sink=attn_sink,
                      topk_length=topk_length, sm_scale=softmax_scale, lse_base="e",
                      dq_dtype=dq_dtype, dkv_dtype=dkv_dtype, strict=mode != "reference",
                      context=CUDNN_CONTEXT, names=CUDNN_NAMES)
    res = run_checked_call(q, kv3, out, dout, idx3, lse_with_sink(lse, attn_sink, "e"),
                           softmax_scale, None, "e", None, attn_sink, topk_length, dq_dtype,
                           dkv_dtype, diagnostics, mode)
    grads = SparseAttentionGrads(res[0], res[1].view(kv.shape), res[2])
    return (*grads, res[3]) if diagnostics else grads


def sparse_mqa_bwd_interface(q, kv, attn_sink, o, do, topk_idxs, lse, sm_scale=None, *,
                             dq_dtype=None, dkv_dtype=None, diagnostics=False, mode=None):
    """TileLang's DeepSeek-V4 sparse MQA backward's call (module docstring).
    Returns (dq, dkv, d_attn_sink), and the counters after them with
    ``diagnostics=True``."""
    mode = resolve_mode(mode, q)
    validate_batched_mqa_layout(q, kv, attn_sink, o, do, topk_idxs, lse, TILELANG_CONTEXT)
    B, S, H, W = q.shape
    S_kv, K = kv.shape[1], topk_idxs.shape[2]
    if B * S_kv > INT32_MAX:
        raise ValueError(f"{TILELANG_CONTEXT}: argument 'kv' must have B * S_kv <= {INT32_MAX} "
                         f"(its rows are indexed by int32 in one flat kv), got {B * S_kv}")
    flat = dict(q=q.reshape(B * S, H, W), kv=kv.reshape(B * S_kv, 1, W),
                o=o.reshape(B * S, H, o.shape[-1]), do=do.reshape(B * S, H, do.shape[-1]),
                indices=topk_idxs.reshape(B * S, 1, K), lse=lse.reshape(B * S, H))
    validate_bwd_args(*flat.values(), attn_sink=attn_sink, sm_scale=sm_scale, lse_base=2,
                      dq_dtype=dq_dtype, dkv_dtype=dkv_dtype, strict=mode != "reference",
                      context=TILELANG_CONTEXT, names=TILELANG_NAMES)
    flat["indices"] = _flat_indices(flat["indices"], S, S_kv)
    res = run_checked_call(*flat.values(), sm_scale, None, 2, None, attn_sink, None, dq_dtype,
                           dkv_dtype, diagnostics, mode)
    out = (res[0].view(B, S, H, W), res[1].view(B, S_kv, W), res[2])
    return (*out, res[3]) if diagnostics else out


def _flat_indices(local: torch.Tensor, S: int, S_kv: int) -> torch.Tensor:
    """Indices [B S, 1, K] into each sequence's kv as indices into the flat
    kv [B S_kv]: a valid one (0 <= i < S_kv) plus its sequence's offset,
    every other one -1 (it must not land in another sequence's rows). One
    sequence needs no copy: its indices are the flat kv's."""
    if local.shape[0] == S:
        return local
    rows = torch.arange(local.shape[0], device=local.device, dtype=torch.int32)
    offset = (rows // S * S_kv).view(-1, 1, 1)
    valid = (local >= 0) & (local < S_kv)
    return torch.where(valid, local + offset, -1).to(torch.int32)
