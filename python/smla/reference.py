"""Chunked PyTorch reference for sparse MLA: forward and backward.

This is the single executable definition of the contract (docs/contract.md). Tests,
checked mode, replay and the benchmarks import it. It runs on CPU and CUDA,
computes in fp32 (float64 for float64 inputs, or as ``dtype`` says) and
bounds memory by processing ``chunk`` query tokens at a time (default: as
many as keep a chunk's temporaries under 1 GiB on CUDA, 256 MiB on CPU).

Conventions
-----------
* Everything is computed in base 2: x2 = s*scale*LOG2E - lse2, clamped to
  EXP2_CLAMP, P = exp2(x2).
* Invalid slots are never dereferenced: their index is replaced by 0 for the
  gather and their contribution is *selected* away with torch.where (never
  multiplied by a mask, since inf*0 = NaN).
* Forward, dead rows: a (t, h) row whose group has no valid slot gets
  out = 0 and lse = -inf (in either base), or lse = its sink with an
  attention sink. The backward treats any row with a non-finite lse (+inf,
  -inf, NaN) as dead; a row without a valid slot has nothing to sum.
* An attention sink (a natural-log logit per head) enters the softmax's
  denominator only: the forward's lse includes it (apply_sink), the
  backward's dq and dkv are the usual formulas of that lse, and its
  gradient is sink_gradient.
* topk_length limits token t to its first topk_length[t] slots; the
  others are not slots (contract.token_slots).
* Compute dtype: ``dtype=None`` means float64 for float64 inputs, else fp32.
* Forward lse dtype: float32, or float64 when q is float64.
"""

from __future__ import annotations

from typing import Dict, Optional, Tuple

import torch

from .contract import (
    EXP2_CLAMP,
    LOG2E,
    COUNTER_NAMES,
    default_sm_scale,
    invalid_slot_count,
    lse_from_base2,
    lse_to_base2,
    lse_with_sink,
    nonfinite_row_mask,
    normalize_lse_base,
    slot_validity,
)

# Bytes of temporaries one chunk may hold (gathered K/V, scores, dkv rows).
_CHUNK_BUDGET = {"cuda": 1 << 30, "cpu": 1 << 28}


def auto_chunk(H: int, G: int, K: int, d_qk: int, dtype: torch.dtype, device) -> int:
    """Query tokens per chunk so the chunk's temporaries stay within budget.

    Per token the backward holds the gathered rows and the dkv rows
    (2*G*K*d_qk elements) and about five [H, K] score-shaped tensors.
    """
    elem = torch.empty((), dtype=dtype).element_size()
    per_token = elem * (2 * G * K * d_qk + 6 * H * K)
    budget = _CHUNK_BUDGET["cuda" if torch.device(device).type == "cuda" else "cpu"]
    return max(1, budget // max(per_token, 1))


def _compute_dtype(dtype: Optional[torch.dtype], q: torch.Tensor) -> torch.dtype:
    if dtype is not None:
        return dtype
    return torch.float64 if q.dtype == torch.float64 else torch.float32


def _gather_rows(kv: torch.Tensor, idx: torch.Tensor, valid: torch.Tensor, dtype):
    """Gather kv[idx[t,g,j], g] -> [c, G, K, d_qk] without touching invalid
    slots: their index is replaced by 0 (a row that always exists)."""
    S, G, d_qk = kv.shape
    safe = torch.where(valid, idx, torch.zeros_like(idx))
    flat = safe * G + torch.arange(G, device=idx.device, dtype=idx.dtype).view(1, G, 1)
    rows = kv.reshape(S * G, d_qk).index_select(0, flat.reshape(-1))
    rows = rows.view(*idx.shape, d_qk).to(dtype)
    # Row 0 stands in for invalid slots; select it away so that even a
    # non-finite kv[0] cannot leak into dq through an invalid slot.
    rows = torch.where(valid.unsqueeze(-1), rows, torch.zeros((), dtype=dtype, device=rows.device))
    return rows, flat


def apply_sink(out_keys: torch.Tensor, lse_keys: torch.Tensor,
               attn_sink: Optional[torch.Tensor], lse_base=2):
    """A forward's (out, lse) over the keys only, with the per-head sink
    ``attn_sink`` ([H], a natural-log logit) added to the softmax's
    denominator: lse = lse_with_sink(lse_keys, attn_sink) and
    out = out_keys * exp(lse_keys - lse) per row (every probability
    shrinks by that factor). A row whose lse is not finite gets out = 0;
    one without keys (lse_keys = -inf) keeps out = 0 and gets lse = sink."""
    if attn_sink is None:
        return out_keys, lse_keys
    lse = lse_with_sink(lse_keys, attn_sink, lse_base)
    shrink = lse_to_base2(lse_keys, lse_base) - lse_to_base2(lse, lse_base)
    keep = torch.isfinite(lse) & torch.isfinite(lse_keys)
    factor = torch.where(keep, torch.exp2(torch.where(keep, shrink, 0.0)), 0.0)
    out = (out_keys.to(factor.dtype) * factor.unsqueeze(-1)).to(out_keys.dtype)
    return out, lse


def sink_gradient(attn_sink: torch.Tensor, lse: torch.Tensor, delta: torch.Tensor,
                  lse_base=2, dtype: Optional[torch.dtype] = None) -> torch.Tensor:
    """d_sink [H] from the sink-inclusive ``lse`` [T, H] (in ``lse_base``)
    and Delta [T, H] (rowsum(o * do), or the caller's delta):
    d_sink[h] = -sum_t P_sink[t, h] Delta[t, h], with
    P_sink = exp(sink_h - lse_e) = exp2(sink_h log2(e) - lse2), the sink's
    share of the softmax. A row whose lse is not finite (dead) contributes
    nothing; the exponent takes the clamp of every other one (EXP2_CLAMP).
    A fixed-order sum over t in ``dtype`` (default: float64 for float64
    inputs, else fp32), returned in the sink's dtype."""
    dtype = dtype or (torch.float64 if delta.dtype == torch.float64 else torch.float32)
    lse2 = lse_to_base2(lse.to(dtype), lse_base)
    x2 = attn_sink.to(dtype) * LOG2E - lse2
    live = torch.isfinite(lse2) & ~torch.isnan(x2)
    p_sink = torch.where(live, torch.exp2(torch.clamp(torch.where(live, x2, 0.0),
                                                      max=EXP2_CLAMP)), 0.0)
    return (-(p_sink * delta.to(dtype)).sum(0)).to(attn_sink.dtype)


def sparse_mla_fwd_reference(
    q: torch.Tensor,
    kv: torch.Tensor,
    indices: torch.Tensor,
    sm_scale: Optional[float] = None,
    *,
    d_v: int = 512,
    lse_base=2,
    q_positions: Optional[torch.Tensor] = None,
    attn_sink: Optional[torch.Tensor] = None,
    topk_length: Optional[torch.Tensor] = None,
    chunk: Optional[int] = None,
    dtype: Optional[torch.dtype] = None,
) -> Tuple[torch.Tensor, torch.Tensor]:
    """Sparse MLA forward. Returns (out [T, H, d_v] in q.dtype, lse [T, H]).

    ``d_v`` (= D) defaults to 512 like TileLang's ``sparse_mla_fwd_interface``;
    the forward cannot infer it from q/kv. lse is in ``lse_base`` (2 or "e").
    A row with no valid slot gets out = 0 and lse = -inf. With
    ``attn_sink`` ([H]) the lse includes the sink and out is scaled by it
    (apply_sink; a row without valid slots then has lse = its sink);
    ``topk_length`` ([T]) limits token t to its first topk_length[t] slots.
    """
    T, H, d_qk = q.shape
    S, G, _ = kv.shape
    K = indices.shape[-1]
    dtype = _compute_dtype(dtype, q)
    if not 0 < d_v <= d_qk:
        raise ValueError(f"smla reference forward: d_v must be in [1, {d_qk}], got {d_v}")
    Hg = H // G
    scale = default_sm_scale(d_qk) if sm_scale is None else float(sm_scale)
    c = chunk or auto_chunk(H, G, K, d_qk, dtype, q.device)
    lse_dtype = torch.float64 if q.dtype == torch.float64 else torch.float32
    out = torch.empty(T, H, d_v, dtype=q.dtype, device=q.device)
    lse2_out = torch.empty(T, H, dtype=lse_dtype, device=q.device)
    neg_inf = torch.tensor(float("-inf"), dtype=dtype, device=q.device)
    for t0 in range(0, T, c):
        t1 = min(T, t0 + c)
        idx = indices[t0:t1].long()
        qpos = None if q_positions is None else q_positions[t0:t1]
        lengths = None if topk_length is None else topk_length[t0:t1]
        valid = slot_validity(idx, S, qpos, lengths)  # [c, G, K]
        kg, _ = _gather_rows(kv, idx, valid, dtype)  # [c, G, K, d_qk]
        qc = q[t0:t1].to(dtype).view(t1 - t0, G, Hg, d_qk)
        s2 = torch.einsum("cghd,cgkd->cghk", qc, kg) * (scale * LOG2E)
        vmask = valid.unsqueeze(2)  # [c, G, 1, K]
        live = vmask.any(-1, keepdim=True)  # [c, G, 1, 1]
        masked = torch.where(vmask, s2, neg_inf)
        m = torch.where(live, masked.amax(-1, keepdim=True), torch.zeros_like(neg_inf))
        e = torch.where(vmask, torch.exp2(masked - m), torch.zeros_like(neg_inf))
        denom = e.sum(-1, keepdim=True)
        p = e / torch.where(live, denom, torch.ones_like(denom))
        o = torch.einsum("cghk,cgkd->cghd", p, kg[..., :d_v])
        lse2 = torch.where(live, m + torch.log2(torch.where(live, denom, torch.ones_like(denom))), neg_inf)
        o, lse2 = apply_sink(o.reshape(t1 - t0, H, d_v),
                             lse2.expand(-1, -1, Hg, 1).reshape(t1 - t0, H), attn_sink, 2)
        out[t0:t1] = o.to(q.dtype)
        lse2_out[t0:t1] = lse2.to(lse_dtype)
    return out, lse_from_base2(lse2_out, normalize_lse_base(lse_base))


def sparse_mla_bwd_reference(
    q: torch.Tensor,
    kv: torch.Tensor,
    o: torch.Tensor,
    do: torch.Tensor,
    indices: torch.Tensor,
    lse: torch.Tensor,
    sm_scale: Optional[float] = None,
    *,
    lse_base=2,
    q_positions: Optional[torch.Tensor] = None,
    delta: Optional[torch.Tensor] = None,
    attn_sink: Optional[torch.Tensor] = None,
    topk_length: Optional[torch.Tensor] = None,
    dq_dtype: Optional[torch.dtype] = None,
    dkv_dtype: Optional[torch.dtype] = None,
    chunk: Optional[int] = None,
    dtype: Optional[torch.dtype] = None,
    diagnostics: bool = False,
):
    """Sparse MLA backward per the contract. Returns (dq, dkv), with
    ``attn_sink`` (dq, dkv, d_sink), and with ``diagnostics=True`` the
    guard counters after those: a dict of ints {invalid_slots, dead_rows,
    clamped, nonfinite_rows} (smla.contract.COUNTER_NAMES; nonfinite_rows
    counts the returned rows of dq and dkv).

    Arguments are not validated here (see smla.checks / smla.sparse_mla_bwd).
    ``delta`` ([T, H]) replaces sum(o*do) when given. ``lse`` includes the
    sink when ``attn_sink`` ([H]) is given (dq and dkv are the usual
    formulas of it; d_sink is sink_gradient of it and Delta).
    ``topk_length`` ([T]) limits token t to its first topk_length[t] slots
    (the others are not slots: contract.token_slots). dq/dkv default to
    q.dtype / kv.dtype; dkv is accumulated in the compute dtype (fp32 unless
    the inputs are float64 or ``dtype`` is given).
    """
    T, H, d_qk = q.shape
    S, G, _ = kv.shape
    D = o.shape[-1]
    K = indices.shape[-1]
    Hg = H // G
    dtype = _compute_dtype(dtype, q)
    scale = default_sm_scale(d_qk) if sm_scale is None else float(sm_scale)
    c = chunk or auto_chunk(H, G, K, d_qk, dtype, q.device)
    dev = q.device
    lse2_all = lse_to_base2(lse.to(dtype), lse_base)
    dq = torch.empty(T, H, d_qk, dtype=dq_dtype or q.dtype, device=dev)
    dkv_acc = torch.zeros(S * G, d_qk, dtype=dtype, device=dev)
    d_sink = None if attn_sink is None else torch.zeros(H, dtype=dtype, device=dev)
    n_invalid = torch.zeros((), dtype=torch.int64, device=dev)
    n_dead = torch.zeros((), dtype=torch.int64, device=dev)
    n_clamped = torch.zeros((), dtype=torch.int64, device=dev)
    zero = torch.zeros((), dtype=dtype, device=dev)
    for t0 in range(0, T, c):
        t1 = min(T, t0 + c)
        n = t1 - t0
        idx = indices[t0:t1].long()
        qpos = None if q_positions is None else q_positions[t0:t1]
        lengths = None if topk_length is None else topk_length[t0:t1]
        valid = slot_validity(idx, S, qpos, lengths)  # [n, G, K]
        kg, flat = _gather_rows(kv, idx, valid, dtype)  # [n, G, K, d_qk]
        qc = q[t0:t1].to(dtype).view(n, G, Hg, d_qk)
        doc = do[t0:t1].to(dtype).view(n, G, Hg, D)
        if delta is None:
            dlt = (o[t0:t1].to(dtype) * do[t0:t1].to(dtype)).sum(-1)
        else:
            dlt = delta[t0:t1].to(dtype)
        if d_sink is not None:
            d_sink += sink_gradient(attn_sink.to(dtype), lse2_all[t0:t1], dlt, 2, dtype)
        dlt = dlt.view(n, G, Hg, 1)
        lse2 = lse2_all[t0:t1].view(n, G, Hg, 1)

        # Dead rows: non-finite lse. A row without a valid slot in its group
        # has nothing to sum (with a sink it is live for d_sink only).
        row_live = torch.isfinite(lse2) & valid.any(-1).view(n, G, 1, 1)
        live_slot = row_live & valid.unsqueeze(2)  # [n, G, Hg, K]

        s = torch.einsum("cghd,cgkd->cghk", qc, kg)
        x2 = s * (scale * LOG2E) - lse2
        over = live_slot & (x2 > EXP2_CLAMP)
        p = torch.where(live_slot, torch.exp2(torch.clamp(x2, max=EXP2_CLAMP)), zero)
        dp = torch.einsum("cghd,cgkd->cghk", doc, kg[..., :D])
        ds = torch.where(live_slot, p * (dp - dlt) * scale, zero)

        dq[t0:t1] = torch.einsum("cghk,cgkd->cghd", ds, kg).reshape(n, H, d_qk).to(dq.dtype)
        contrib = torch.einsum("cghk,cghd->cgkd", ds, qc)
        contrib[..., :D] += torch.einsum("cghk,cghd->cgkd", p, doc)
        contrib = torch.where(valid.unsqueeze(-1), contrib, zero)
        dkv_acc.index_add_(0, flat.reshape(-1), contrib.reshape(-1, d_qk))

        n_invalid += invalid_slot_count(idx, valid, lengths)
        # Counted when the lse guard fires; a row with a finite lse but no
        # valid slot shows up as invalid slots instead (smla.contract).
        n_dead += (~torch.isfinite(lse2)).sum()
        n_clamped += over.sum()

    dkv = dkv_acc.view(S, G, d_qk).to(dkv_dtype or kv.dtype)
    grads = (dq, dkv) if d_sink is None else (dq, dkv, d_sink.to(attn_sink.dtype))
    if not diagnostics:
        return grads
    n_nonfinite = nonfinite_row_mask(dq).sum() + nonfinite_row_mask(dkv).sum()
    counters: Dict[str, int] = dict(
        zip(COUNTER_NAMES, (int(n_invalid), int(n_dead), int(n_clamped), int(n_nonfinite)))
    )
    return (*grads, counters)


def reference_backend(
    q, kv, o, do, indices, lse, *, sm_scale, lse_base, q_positions=None, delta=None,
    attn_sink=None, topk_length=None, dq_dtype, dkv_dtype, dtype: Optional[torch.dtype] = None,
):
    """The reference with the compiled backend's calling convention
    (see smla._compiled.sparse_mla_bwd); returns (dq, dkv, counters dict,
    d_sink or None). Used by checked mode's tests and by replay as a
    stand-in backend."""
    res = sparse_mla_bwd_reference(
        q, kv, o, do, indices, lse, sm_scale, lse_base=lse_base, q_positions=q_positions,
        delta=delta, attn_sink=attn_sink, topk_length=topk_length, dq_dtype=dq_dtype,
        dkv_dtype=dkv_dtype, dtype=dtype, diagnostics=True,
    )
    return res[0], res[1], res[-1], (res[2] if attn_sink is not None else None)
