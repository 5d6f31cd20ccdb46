"""smla.sparse_mla_bwd: the drop-in entry point.

Signature matched (positional part) to TileLang's
``examples/deepseek_v32/sparse_mla_bwd.py``::

    sparse_mla_bwd(q, kv, o, do, indices, lse, sm_scale=None, is_casual=True,
                   return_kernel=False, delta=None)

and to the vendored copy Slime's GLM-5 plugin calls as
``sparse_mla_bwd(q, kv, tl_out, grad_output.contiguous(), indices, tl_lse,
sm_scale=scaling)`` (slime_plugins/models/glm5/ops/sparse_mla.py):

* Layout: Slime's wrapper is unbatched (q [T, H, D+Dt]; it unsqueezes to B=1
  internally); upstream TileLang takes a leading batch dim
  ([B, S, H, D+Dt] ...). Both are accepted here; a batched call is computed
  per batch element and returns batched results.
* sm_scale=None means (D+Dt)**-0.5, TileLang's default (full q/k width).
* is_casual: TileLang asserts it is True ("non-casual is not supported") and
  otherwise ignores it; causality is carried by the indices (and here by
  q_positions). Only True is accepted.
* return_kernel: accepted by TileLang's wrapper and ignored; only False is
  accepted here (there is no kernel object to return).
* delta: optional precomputed Delta = sum(o*do, -1), fp32 [T, H]
  ([B, T, H] batched); when None it is computed from o and do. Every mode
  takes it (SparseMLA folds a gradient into lse into it).
* lse is base 2 (TileLang/Slime) by default; ``lse_base="e"`` for a natural
  log-sum-exp (FlashMLA, cuDNN).
* attn_sink: an attention sink, one natural-log logit per head ([H], fp32)
  in the softmax's denominator (DeepSeek-V4); lse then includes it, and the
  call returns d_sink after dkv. topk_length ([T] int32): token t has its
  first topk_length[t] slots (docs/contract.md). Both keyword-only.
* dq/dkv default to the dtype of q/kv (bf16 in the contract); fp32 on request.
  dkv is always accumulated in fp32.

Modes: "compiled" (the CUDA kernels via torch.ops.smla.sparse_mla_bwd),
"checked" (compiled + input checks + granular repair, see smla.checked),
"reference" (smla.reference, any device). ``mode=None`` takes
smla.config.mode (SMLA_MODE); if that is unset it picks "compiled" when q
is a CUDA tensor and the compiled backward can run on its device
(smla._compiled.unavailable_reason), otherwise "reference"; a CUDA tensor
that falls back to the reference this way gets an SmlaSlowPathWarning,
once per process, saying why.

Arguments are checked by smla.checks, the rules the op applies too;
strided tensors are accepted in every mode.
"""

from __future__ import annotations

from typing import Optional

import torch

from . import _compiled, _config, checked, stats
from ._log import warn_once
from .checks import validate_bwd_args
from .contract import COUNTER_NAMES, default_sm_scale, normalize_lse_base
from .reference import sparse_mla_bwd_reference

MODES = ("compiled", "checked", "reference")


_CTX = "smla.sparse_mla_bwd"


def resolve_mode(mode: Optional[str], q) -> str:
    """The mode a call runs in (see the module docstring)."""
    if mode is None:
        mode = _config.get("mode")
    if mode is None:
        if not (isinstance(q, torch.Tensor) and q.is_cuda):
            return "reference"
        why = _compiled.unavailable_reason(q.device)
        if why is None:
            return "compiled"
        warn_once(
            "reference-backward",
            f"{_CTX}: CUDA inputs run smla's PyTorch reference backward (correct, but 17-56x "
            f"slower than the compiled kernels) because the compiled backward is unavailable: "
            f"{why}\nFix the cause (python/USAGE.md, 'Installing'), or pass mode='reference' "
            f"(SMLA_MODE=reference) to choose the reference explicitly. (Shown once per process.)")
        return "reference"
    if mode not in MODES:
        raise ValueError(
            f"{_CTX}: argument 'mode' must be one of {', '.join(repr(m) for m in MODES)}, "
            f"got {mode!r}"
        )
    return mode


def sparse_mla_bwd(
    q, kv, o, do, indices, lse, sm_scale=None, is_casual=True, return_kernel=False, delta=None,
    *, lse_base=2, q_positions=None, attn_sink=None, topk_length=None, dq_dtype=None,
    dkv_dtype=None, diagnostics=False, mode=None,
):
    """Backward of sparse multi-latent attention (see smla.contract / docs/contract.md).

    Returns (dq, dkv); with ``attn_sink`` (lse then includes the sink)
    (dq, dkv, d_sink), d_sink [H] in the sink's dtype; with
    ``diagnostics=True`` the counters after those, a dict
    {"invalid_slots", "dead_rows", "clamped", "nonfinite_rows"} (ints,
    smla.contract.COUNTER_NAMES; checked mode adds "repaired_tokens").
    Every call adds to smla.stats(). Bad arguments raise TypeError/ValueError
    naming the argument.
    """
    if is_casual is not True:
        raise ValueError(
            f"{_CTX}: argument 'is_casual' must be True (as in TileLang; causality comes "
            f"from indices and q_positions), got {is_casual!r}"
        )
    if return_kernel:
        raise ValueError(
            f"{_CTX}: argument 'return_kernel' must be False (there is no kernel object "
            f"to return), got {return_kernel!r}"
        )
    if isinstance(q, torch.Tensor) and q.dim() == 4:
        return _batched(q, kv, o, do, indices, lse, sm_scale, delta, lse_base, q_positions,
                        attn_sink, topk_length, dq_dtype, dkv_dtype, diagnostics, mode)
    mode = resolve_mode(mode, q)
    validate_bwd_args(
        q, kv, o, do, indices, lse, q_positions=q_positions, delta=delta, attn_sink=attn_sink,
        topk_length=topk_length, sm_scale=sm_scale, lse_base=lse_base, dq_dtype=dq_dtype,
        dkv_dtype=dkv_dtype, strict=mode != "reference",
    )
    return run_checked_call(q, kv, o, do, indices, lse, sm_scale, delta, lse_base, q_positions,
                            attn_sink, topk_length, dq_dtype, dkv_dtype, diagnostics, mode)


def run_checked_call(q, kv, o, do, indices, lse, sm_scale, delta, lse_base, q_positions,
                     attn_sink, topk_length, dq_dtype, dkv_dtype, diagnostics, mode):
    """sparse_mla_bwd's work on arguments that passed smla.checks in
    ``mode`` (resolved): the entry points shaped like other clients'
    (smla.dsv4) check theirs under their own names, then run it."""
    scale = default_sm_scale(q.shape[-1]) if sm_scale is None else float(sm_scale)
    lse_base = normalize_lse_base(lse_base)
    dq_dtype = dq_dtype or q.dtype
    dkv_dtype = dkv_dtype or kv.dtype
    counters = None
    if mode == "reference":
        res = sparse_mla_bwd_reference(
            q, kv, o, do, indices, lse, scale, lse_base=lse_base, q_positions=q_positions,
            delta=delta, attn_sink=attn_sink, topk_length=topk_length, dq_dtype=dq_dtype,
            dkv_dtype=dkv_dtype, diagnostics=diagnostics,
        )
        dq, dkv = res[0], res[1]
        d_sink = res[2] if attn_sink is not None else None
        counters = res[-1] if diagnostics else None
    else:
        kw = dict(sm_scale=scale, lse_base=lse_base, q_positions=q_positions, delta=delta,
                  attn_sink=attn_sink, topk_length=topk_length, dq_dtype=dq_dtype,
                  dkv_dtype=dkv_dtype)
        if mode == "compiled":
            dq, dkv, raw, d_sink = _compiled.sparse_mla_bwd(q, kv, o, do, indices, lse, **kw)
            counters = _compiled.counters_to_dict(raw) if diagnostics else None
        else:
            dq, dkv, counters, d_sink = checked.checked_sparse_mla_bwd(
                q, kv, o, do, indices, lse, **kw)
    if not torch.compiler.is_compiling():
        stats.record_call(mode, counters)
    return _results(dq, dkv, d_sink, counters if diagnostics else None)


def _results(dq, dkv, d_sink, counters):
    """(dq, dkv), then d_sink where the call had a sink, then the counters
    where it asked for them."""
    out = (dq, dkv) if d_sink is None else (dq, dkv, d_sink)
    return out if counters is None else (*out, counters)


def _batched(q, kv, o, do, indices, lse, sm_scale, delta, lse_base, q_positions, attn_sink,
             topk_length, dq_dtype, dkv_dtype, diagnostics, mode):
    """Upstream TileLang layout: a leading batch dim on every tensor but
    the sink ([H], shared by the batch: d_sink sums over it)."""
    B = q.shape[0]
    if B < 1:
        raise ValueError(f"{_CTX}: argument 'q' must have batch size >= 1, got shape "
                         f"{tuple(q.shape)}")
    ranks = {"kv": (kv, 4), "o": (o, 4), "do": (do, 4), "indices": (indices, 4),
             "lse": (lse, 3), "q_positions": (q_positions, 2), "delta": (delta, 3),
             "topk_length": (topk_length, 2)}
    for name, (t, rank) in ranks.items():
        if t is None:
            continue
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{_CTX}: argument '{name}' must be a torch.Tensor, got "
                            f"{type(t).__name__}")
        if t.dim() != rank or t.shape[0] != B:
            raise ValueError(
                f"{_CTX}: argument '{name}' must have {rank} dimensions with batch size "
                f"B={B} first (q is batched, shape {tuple(q.shape)}), got shape {tuple(t.shape)}"
            )
    outs = []
    for b in range(B):
        outs.append(sparse_mla_bwd(
            q[b], kv[b], o[b], do[b], indices[b], lse[b], sm_scale, True, False,
            None if delta is None else delta[b], lse_base=lse_base,
            q_positions=None if q_positions is None else q_positions[b], attn_sink=attn_sink,
            topk_length=None if topk_length is None else topk_length[b],
            dq_dtype=dq_dtype, dkv_dtype=dkv_dtype, diagnostics=diagnostics, mode=mode,
        ))
    dq = torch.stack([r[0] for r in outs])
    dkv = torch.stack([r[1] for r in outs])
    d_sink = None if attn_sink is None else torch.stack([r[2] for r in outs]).sum(0)
    counters = None
    if diagnostics:
        counters = {k: sum(r[-1].get(k, 0) for r in outs) for k in outs[0][-1]}
        for k in COUNTER_NAMES:
            counters.setdefault(k, 0)
    return _results(dq, dkv, d_sink, counters)
