"""torch.ops.smla.sparse_mla_bwd: the compiled backward as a PyTorch op.

The op is defined here, in Python, so that a direct call applies the same
argument rules (smla.checks) as smla.sparse_mla_bwd, with the same
messages; it exists as soon as smla is imported. Its one implementation,
for every device:

1. checks the arguments (the kernels' rules; a CPU tensor is an error
   naming 'q');
2. returns empty gradients for T = 0 without opening a kernel library;
3. plans the kernel (smla._library.plan: the library's kernel for H heads,
   else the next larger head count with padded heads, else one compiled
   on first use);
4. lays the arguments out as the kernels read them: a contiguous, aligned
   copy of one that is not (smla.checks.kernel_layout), lse in base 2 (a
   natural-log lse times log2(e): the library holds base-2 kernels only),
   and for padded heads q, o, do, lse and delta with zero rows past H;
5. with an attention sink, takes Delta (the caller's delta, else
   smla::_delta: the library's delta kernel) and computes d_sink from it
   and the lse (smla.reference.sink_gradient: torch ops on [T, H], a
   fixed-order sum); the bwd kernel reads the same Delta;
6. runs smla::_launch_bwd (smla._C, python/csrc/SparseMlaBwd.cpp: kernel
   selection, token pairs, slot walk, slots per token, launches);
7. returns dq for the caller's H heads.

Padded heads contribute exactly nothing: a zero do row makes dP = 0 and a
zero do row with any o makes Delta = 0, so dS = P (dP - Delta) = 0 and
P do = 0; a zero q row with lse 0 makes the exponent 0, so P = 1 is finite,
never clamped, and the row is not dead: the guard counters are those of
the caller's heads (python/USAGE.md, "Head counts").

The fake implementation (torch.compile, FakeTensor, meta tensors) checks
the same rules (but the CUDA one) where the sizes are concrete and returns
the outputs' shapes. Schema:

    smla::sparse_mla_bwd(Tensor q, Tensor kv, Tensor o, Tensor do,
                         Tensor indices, Tensor lse, float sm_scale,
                         bool lse_base_e, Tensor? q_positions, Tensor? delta,
                         ScalarType dq_dtype, ScalarType dkv_dtype,
                         Tensor? attn_sink=None, Tensor? topk_length=None)
        -> (Tensor dq, Tensor dkv, Tensor counters, Tensor d_sink)

``counters`` is int64 [4] on q's device, in the order of
smla.contract.COUNTER_NAMES. ``d_sink`` is [H] in the sink's dtype with
``attn_sink`` (whose lse then includes the sink), else an empty fp32
tensor [0].
"""

from __future__ import annotations

import logging

import torch

from . import _library
from ._log import logger
from .checks import kernel_layout, validate_bwd_args
from .contract import COUNTER_NAMES, LOG2E
from .reference import sink_gradient

OP_NAME = "smla::sparse_mla_bwd"
OP_SCHEMA = (
    "sparse_mla_bwd(Tensor q, Tensor kv, Tensor o, Tensor do, Tensor indices, "
    "Tensor lse, float sm_scale, bool lse_base_e, Tensor? q_positions, Tensor? delta, "
    "ScalarType dq_dtype, ScalarType dkv_dtype, Tensor? attn_sink=None, "
    "Tensor? topk_length=None) -> (Tensor dq, Tensor dkv, Tensor counters, Tensor d_sink)"
)

_library_fragment = torch.library.Library("smla", "FRAGMENT")
_library_fragment.define(OP_SCHEMA)


def _validate(q, kv, o, do, indices, lse, sm_scale, q_positions, delta, dq_dtype, dkv_dtype,
              attn_sink, topk_length, require_cuda):
    return validate_bwd_args(q, kv, o, do, indices, lse, q_positions=q_positions, delta=delta,
                             attn_sink=attn_sink, topk_length=topk_length, sm_scale=sm_scale,
                             dq_dtype=dq_dtype, dkv_dtype=dkv_dtype, strict=True,
                             require_cuda=require_cuda)


def _no_sink(q):
    """The op's d_sink output for a call without a sink."""
    return q.new_empty((0,), dtype=torch.float32)


def pad_heads(t, heads: int):
    """`t` ([T, H, ...] or [T, H]) with zero rows for heads H..heads-1, in a
    new contiguous tensor: the one copy a padded argument costs."""
    if t is None:
        return None
    out = t.new_zeros((t.shape[0], heads, *t.shape[2:]))
    out[:, :t.shape[1]] = t
    return out


def kernel_arguments(q, o, do, lse, delta, lse_base_e: bool, heads: int):
    """(q, o, do, lse2, delta) as the kernel of `heads` heads reads them:
    contiguous and aligned, lse in base 2, and padded with zero rows past
    the caller's H when `heads` is larger. Each argument is copied at most
    once."""
    if heads == q.shape[1]:
        if lse_base_e:
            lse2 = torch.empty(lse.shape, dtype=lse.dtype, device=lse.device)
            torch.mul(lse, LOG2E, out=lse2)
        else:
            lse2 = kernel_layout("lse", lse)
        return (kernel_layout("q", q), kernel_layout("o", o), kernel_layout("do", do), lse2,
                kernel_layout("delta", delta))
    lse2 = pad_heads(lse, heads)
    if lse_base_e:
        lse2.mul_(LOG2E)  # the padded rows stay 0
    if logger.isEnabledFor(logging.DEBUG):
        logger.debug("smla: %s: H=%d runs the kernel of %d heads: q, o, do, lse%s copied "
                     "with %d zero head rows each", "smla.sparse_mla_bwd", q.shape[1], heads,
                     " and delta" if delta is not None else "", heads - q.shape[1])
    return (pad_heads(q, heads), pad_heads(o, heads), pad_heads(do, heads), lse2,
            pad_heads(delta, heads))


def _sparse_mla_bwd(q, kv, o, do, indices, lse, sm_scale, lse_base_e, q_positions, delta,
                    dq_dtype, dkv_dtype, attn_sink=None, topk_length=None):
    dims = _validate(q, kv, o, do, indices, lse, sm_scale, q_positions, delta, dq_dtype,
                     dkv_dtype, attn_sink, topk_length, require_cuda=True)
    d_sink = _no_sink(q) if attn_sink is None else torch.zeros_like(attn_sink)
    if dims.T == 0:
        return (torch.zeros(q.shape, dtype=dq_dtype, device=q.device),
                torch.zeros(kv.shape, dtype=dkv_dtype, device=kv.device),
                torch.zeros(len(COUNTER_NAMES), dtype=torch.int64, device=q.device), d_sink)
    from . import _compiled

    module = _compiled.load()
    positions = q_positions is not None
    heads = _library.plan(module, dims, positions, dq_dtype, dkv_dtype)
    kq, ko, kdo, klse, kdelta = kernel_arguments(q, o, do, lse, delta, lse_base_e, heads)
    if attn_sink is not None:
        # One Delta for d_sink and the bwd kernel (which then reads it
        # instead of computing its own).
        if kdelta is None:
            kdelta = torch.ops.smla._delta(ko, kdo, dims.Dt, dims.G, positions, dq_dtype,
                                           dkv_dtype)
        d_sink = sink_gradient(attn_sink, klse[:, :dims.H], kdelta[:, :dims.H], lse_base=2)
    dq, dkv, counters = torch.ops.smla._launch_bwd(
        kq, kernel_layout("kv", kv), ko, kdo, kernel_layout("indices", indices), klse,
        float(sm_scale), kernel_layout("q_positions", q_positions), kdelta, dq_dtype,
        dkv_dtype, kernel_layout("topk_length", topk_length))
    if heads != dims.H:
        dq = dq[:, :dims.H].contiguous()
    if logger.isEnabledFor(logging.DEBUG):
        _compiled.log_choice(module, dims, heads, lse_base_e, positions, dq_dtype, dkv_dtype)
    return dq, dkv, counters, d_sink


def _fake(q, kv, o, do, indices, lse, sm_scale, lse_base_e, q_positions, delta, dq_dtype,
          dkv_dtype, attn_sink=None, topk_length=None):
    _validate(q, kv, o, do, indices, lse, sm_scale, q_positions, delta, dq_dtype, dkv_dtype,
              attn_sink, topk_length, require_cuda=False)
    return (q.new_empty(q.shape, dtype=dq_dtype), kv.new_empty(kv.shape, dtype=dkv_dtype),
            q.new_empty((len(COUNTER_NAMES),), dtype=torch.int64),
            _no_sink(q) if attn_sink is None else attn_sink.new_empty(attn_sink.shape))


_library_fragment.impl("sparse_mla_bwd", _sparse_mla_bwd, "CompositeExplicitAutograd")
torch.library.register_fake(OP_NAME, _fake, lib=_library_fragment)
