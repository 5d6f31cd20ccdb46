"""SparseMLA: the autograd Function Slime's GLM-5 plugin uses, with the smla
backward.

Matches slime_plugins/models/glm5/ops/sparse_mla.py: ``SparseMLA.apply(q, kv,
indices, scaling)`` returns ``(out, lse)`` with q [T, H, D+Dt], kv [S_kv, G,
D+Dt], indices [T, G, K]; backward returns (dq, dkv, None, None). Optional
trailing arguments are added: ``d_v`` (as in Slime's SGLangSparseMLA),
``q_positions`` (absolute query positions for CP shards / packed sequences),
``attn_sink`` (DeepSeek-V4's attention sink, [H], a natural-log logit per
head in the softmax's denominator; it gets a gradient) and ``topk_length``
([T] int32: token t takes its first topk_length[t] slots). With a sink the
returned lse includes it, whichever lse the forward writes.

The forward is pluggable: ``smla.set_forward(fn, lse_base=..., d_v=...)``
registers e.g. TileLang's or FlashMLA's forward together with the base of the
lse it returns (2 for TileLang, "e" for FlashMLA), so the backward interprets
that lse correctly. ``fn(q, kv, indices, sm_scale, *, d_v, q_positions)``
must return (out [T, H, d_v], lse [T, H]); a call with a sink or lengths
also passes ``attn_sink=`` / ``topk_length=``, and ``lse_includes_sink``
says whether fn's lse then includes the sink (TileLang's DeepSeek-V4
forward) or is over the keys only (FlashMLA's; SparseMLA folds the sink in,
smla.contract.lse_with_sink). The default is the reference
forward (base 2, d_v 512); on CUDA tensors it warns once per process
(SmlaSlowPathWarning) that a faster forward should be registered.

A gradient flowing into lse is supported: since d(lse_e)/ds = P*scale, it is
folded into Delta (delta' = Delta - c*grad_lse, c = log2(e) for a base-2 lse),
which every mode of the backward takes (the compiled kernels read it in
place of their own rowsum(o * do)). With a sink the same delta' gives the
sink's gradient (d lse_e / d sink = P_sink, so d_sink = -sum_t P_sink delta').
"""

from __future__ import annotations

from typing import Callable, NamedTuple, Optional

import torch

from ._log import warn_once
from .api import resolve_mode, sparse_mla_bwd
from .checks import kernel_layout
from .contract import LOG2E, lse_with_sink, normalize_lse_base
from .reference import sparse_mla_fwd_reference


class ForwardSpec(NamedTuple):
    fn: Callable
    lse_base: object
    d_v: int
    # Whether fn's lse includes the sink of a call with one (else it is over
    # the keys only, and SparseMLA folds the sink in).
    lse_includes_sink: bool = True


def _reference_forward(lse_base):
    def fwd(q, kv, indices, sm_scale, *, d_v, q_positions=None, attn_sink=None,
            topk_length=None):
        return sparse_mla_fwd_reference(
            q, kv, indices, sm_scale, d_v=d_v, lse_base=lse_base, q_positions=q_positions,
            attn_sink=attn_sink, topk_length=topk_length)

    fwd.__name__ = "smla_reference_forward"
    fwd.smla_reference = True
    return fwd


_forward = ForwardSpec(_reference_forward(2), 2, 512)
_backward_mode: Optional[str] = None


def set_forward(fn: Optional[Callable] = None, *, lse_base=2, d_v: int = 512,
                lse_includes_sink: bool = True) -> ForwardSpec:
    """Register the forward SparseMLA uses (None: the reference forward,
    whose lse includes a sink). Returns the previous spec (pass its fields
    back to restore it)."""
    global _forward
    base = normalize_lse_base(lse_base)
    prev = _forward
    _forward = ForwardSpec(fn if fn is not None else _reference_forward(base), base, int(d_v),
                           bool(lse_includes_sink) or fn is None)
    return prev


def get_forward() -> ForwardSpec:
    return _forward


def set_backward_mode(mode: Optional[str]) -> Optional[str]:
    """Mode for SparseMLA's backward (None: smla.sparse_mla_bwd's default).
    Returns the previous setting."""
    global _backward_mode
    if mode is not None:
        resolve_mode(mode, None)  # validates the name
    prev, _backward_mode = _backward_mode, mode
    return prev


_REFERENCE_FORWARD_MESSAGE = (
    "smla.SparseMLA: the forward runs smla's PyTorch reference (correct, but far slower "
    "than a fused kernel) because no forward was registered. Register yours with "
    "smla.set_forward(fn, lse_base=..., d_v=...): python/USAGE.md, 'Registering a forward', "
    "shows TileLang's, FlashMLA's and cuDNN's. (Shown once per process.)")


class SparseMLA(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, kv, indices, scaling, d_v=None, q_positions=None, attn_sink=None,
                topk_length=None):
        spec = _forward
        if q.is_cuda and getattr(spec.fn, "smla_reference", False):
            warn_once("reference-forward", _REFERENCE_FORWARD_MESSAGE)
        # The registered forward's kernels read contiguous tensors: one
        # logged copy of an argument that is not (the backward takes any).
        q, kv, indices = (kernel_layout(name, t, "smla.SparseMLA")
                          for name, t in (("q", q), ("kv", kv), ("indices", indices)))
        d_v = spec.d_v if d_v is None else int(d_v)
        # Only what the call has: a forward registered without these
        # keywords serves the calls without them.
        extra = {k: v for k, v in (("q_positions", q_positions), ("attn_sink", attn_sink),
                                   ("topk_length", topk_length)) if v is not None}
        out, lse = spec.fn(q, kv, indices, scaling, d_v=d_v, **extra)
        if attn_sink is not None and not spec.lse_includes_sink:
            lse = lse_with_sink(lse, attn_sink, spec.lse_base)
        ctx.scaling = scaling
        ctx.lse_base = spec.lse_base
        ctx.set_materialize_grads(False)
        ctx.save_for_backward(q, kv, indices, out, lse, q_positions, attn_sink, topk_length)
        return out, lse

    @staticmethod
    def backward(ctx, grad_output, grad_lse):
        q, kv, indices, out, lse, q_positions, attn_sink, topk_length = ctx.saved_tensors
        if grad_output is None:
            grad_output = torch.zeros_like(out)
        delta = None
        if grad_lse is not None:
            stat = torch.float64 if q.dtype == torch.float64 else torch.float32
            c = LOG2E if ctx.lse_base == 2 else 1.0
            g = torch.where(torch.isfinite(lse), grad_lse.to(stat), torch.zeros((), dtype=stat,
                                                                                 device=lse.device))
            delta = ((out.to(stat) * grad_output.to(stat)).sum(-1) - c * g).contiguous()
        # The sink's gradient only where it is asked for (dq and dkv do not
        # need the sink: the lse includes it).
        sink = attn_sink if attn_sink is not None and ctx.needs_input_grad[6] else None
        grads = sparse_mla_bwd(
            q, kv, out, grad_output, indices, lse, sm_scale=ctx.scaling,
            delta=delta, lse_base=ctx.lse_base, q_positions=q_positions, attn_sink=sink,
            topk_length=topk_length, mode=_backward_mode,
        )
        d_sink = grads[2] if sink is not None else None
        return grads[0], grads[1], None, None, None, None, d_sink, None
