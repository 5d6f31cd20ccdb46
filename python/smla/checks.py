"""The one set of argument rules of the sparse-MLA backward.

Every entry point applies them alike: smla.sparse_mla_bwd in every mode,
a direct torch.ops.smla.sparse_mla_bwd call (real and fake tensors) and
the dump loader. Each failure names the argument, what was expected and
what was given, e.g. ``smla.sparse_mla_bwd: argument 'indices' must have
dtype torch.int32, got torch.int64``. A dtype (of a tensor, or a dtype
argument) that does not fit raises TypeError, as does an argument of the
wrong type; shapes, sizes, devices and values raise ValueError.

Two rule sets, one function:
* the kernels' (``strict=True``: modes "compiled" and "checked", and the
  op): bf16 q/kv/o/do, fp32 lse/delta/attn_sink, bf16 or fp32 outputs,
  sizes T, S_kv and K below 2^31 (the kernels take int32 sizes), and a
  CUDA q (checked last, so that every other rule is exercised on a CPU);
* the reference's (``strict=False``): any device (all on q's), q of any
  floating dtype that kv/o/do share, lse/delta/attn_sink fp32 or fp64.

Both take an attention sink ``attn_sink`` (one logit per head, [H]) and
per-token lengths ``topk_length`` (int32 [T]; any value: token t has
min(K, max(0, topk_length[t])) slots, smla.contract.token_slots). The
client-shaped entry points (smla.dsv4) check their own layouts, then
these rules under their argument names (``names``).

Layout is not a rule: every entry point accepts strided tensors. The
reference computes on any layout; the op hands the kernels a contiguous,
16-byte aligned copy of an argument that is not, one copy per such
argument, logged at DEBUG (``kernel_layout``; python/USAGE.md, "Strided
inputs").
"""

from __future__ import annotations

import logging
from numbers import Real
from typing import NamedTuple, Optional

import torch

from ._log import logger
from .contract import normalize_lse_base, sm_scale_error, sm_scale_fits_float32

FLOAT_DTYPES = (torch.bfloat16, torch.float16, torch.float32, torch.float64)
STRICT_OUT_DTYPES = (torch.bfloat16, torch.float32)
# The kernels take T, S_kv and K as 32-bit integers.
INT32_MAX = 2 ** 31 - 1
# The kernels read q, kv, o and do with 16-byte vector loads (cp.async).
KERNEL_ALIGNMENT = 16
CONTEXT = "smla.sparse_mla_bwd"


class NonFiniteInputError(ValueError):
    """An input tensor holds NaN or Inf (garbage in)."""


class Dims(NamedTuple):
    T: int
    H: int
    G: int
    K: int
    S_kv: int
    D: int
    Dt: int


def _is_concrete(*tensors) -> bool:
    """Whether every size of `tensors` is a plain int (not a symbolic size
    of a torch.compile trace with dynamic shapes: checking those would
    specialise the trace; the real call checks them)."""
    return all(isinstance(s, int) for t in tensors if t is not None for s in t.shape)


class _Checker:
    def __init__(self, context: str, noun: str, names=None):
        self.context = context
        self.noun = noun
        self.names = names or {}

    def name(self, name: str) -> str:
        """The caller's name of the argument the rules call `name`."""
        return self.names.get(name, name)

    def arg(self, name: str) -> str:
        return f"{self.context}: {self.noun} '{self.name(name)}'"

    def value_error(self, name: str, msg: str):
        raise ValueError(f"{self.arg(name)} {msg}")

    def type_error(self, name: str, msg: str):
        raise TypeError(f"{self.arg(name)} {msg}")

    def tensor(self, name, t, rank: int, layout: str):
        if not isinstance(t, torch.Tensor):
            self.type_error(name, f"must be a torch.Tensor, got {type(t).__name__}")
        if t.dim() != rank:
            self.value_error(
                name,
                f"must have {rank} dimension{'s' if rank != 1 else ''} {layout}, "
                f"got {t.dim()} (shape {tuple(t.shape)})",
            )

    def dtype(self, name, t, allowed):
        if t.dtype not in allowed:
            want = " or ".join(str(d) for d in allowed)
            self.type_error(name, f"must have dtype {want}, got {t.dtype}")

    def shape(self, name, t, expected, layout: str):
        if tuple(t.shape) != tuple(expected):
            self.value_error(
                name, f"must have shape {tuple(expected)} {layout}, got {tuple(t.shape)}"
            )


def validate_bwd_args(
    q,
    kv,
    o,
    do,
    indices,
    lse,
    *,
    q_positions=None,
    delta=None,
    attn_sink=None,
    topk_length=None,
    sm_scale=None,
    lse_base=2,
    dq_dtype=None,
    dkv_dtype=None,
    strict: bool = True,
    require_cuda: bool = True,
    context: str = CONTEXT,
    noun: str = "argument",
    names=None,
) -> Optional[Dims]:
    """Checks the backward's arguments by the rules above (``strict``: the
    kernels'; ``require_cuda`` False for meta and fake tensors, which have
    no data); returns the problem sizes (None for symbolic sizes).
    ``names`` maps the rules' argument names to the caller's (an entry
    point with other names: o -> out, indices -> topk_idxs, ...)."""
    c = _Checker(context, noun, names)
    c.tensor("q", q, 3, "[T, H, D+Dt]")
    c.tensor("kv", kv, 3, "[S_kv, G, D+Dt]")
    c.tensor("o", o, 3, "[T, H, D]")
    c.tensor("do", do, 3, "[T, H, D]")
    c.tensor("indices", indices, 3, "[T, G, K]")
    c.tensor("lse", lse, 2, "[T, H]")
    if q_positions is not None:
        c.tensor("q_positions", q_positions, 1, "[T]")
    if delta is not None:
        c.tensor("delta", delta, 2, "[T, H]")
    if attn_sink is not None:
        c.tensor("attn_sink", attn_sink, 1, "[H]")
    if topk_length is not None:
        c.tensor("topk_length", topk_length, 1, "[T]")

    # dtypes
    if strict:
        for name, t in (("q", q), ("kv", kv), ("o", o), ("do", do)):
            c.dtype(name, t, (torch.bfloat16,))
    else:
        c.dtype("q", q, FLOAT_DTYPES)
        for name, t in (("kv", kv), ("o", o), ("do", do)):
            if t.dtype != q.dtype:
                c.type_error(name, f"must have the dtype of 'q' ({q.dtype}), got {t.dtype}")
    c.dtype("indices", indices, (torch.int32,))
    stat_dtypes = (torch.float32,) if strict else (torch.float32, torch.float64)
    c.dtype("lse", lse, stat_dtypes)
    if delta is not None:
        c.dtype("delta", delta, stat_dtypes)
    if attn_sink is not None:
        c.dtype("attn_sink", attn_sink, stat_dtypes)
    if q_positions is not None:
        c.dtype("q_positions", q_positions, (torch.int32,))
    if topk_length is not None:
        c.dtype("topk_length", topk_length, (torch.int32,))
    out_allowed = STRICT_OUT_DTYPES if strict else FLOAT_DTYPES
    for name, dt in (("dq_dtype", dq_dtype), ("dkv_dtype", dkv_dtype)):
        if dt is not None and dt not in out_allowed:
            want = ", ".join(str(d) for d in out_allowed)
            c.type_error(name, f"must be None or one of {want}, got {dt!r}")

    # devices
    named = [("kv", kv), ("o", o), ("do", do), ("indices", indices), ("lse", lse),
             ("q_positions", q_positions), ("delta", delta), ("attn_sink", attn_sink),
             ("topk_length", topk_length)]
    for name, t in named:
        if t is not None and t.device != q.device:
            c.value_error(name, f"must be on the device of '{c.name('q')}' ({q.device}), "
                                f"got {t.device}")

    # sizes
    if not _is_concrete(q, kv, o, do, indices, lse, q_positions, delta, attn_sink,
                        topk_length):
        return None
    T, H, d_qk = q.shape
    S_kv, G, kv_w = kv.shape
    if H < 1:
        c.value_error("q", f"must have at least one head (q.shape[1] >= 1), got {H}")
    if d_qk < 1:
        c.value_error("q", f"must have D+Dt = q.shape[2] >= 1, got {d_qk}")
    if S_kv < 1:
        c.value_error("kv", f"must have S_kv = kv.shape[0] >= 1, got {S_kv}")
    if G < 1:
        c.value_error("kv", f"must have at least one group (kv.shape[1] >= 1), got {G}")
    if kv_w != d_qk:
        c.value_error("kv", f"must have last dimension D+Dt = {d_qk} (q.shape[2]), got {kv_w}")
    if H % G != 0:
        c.value_error(
            "q",
            f"has H={H} heads (q.shape[1]), which must be a multiple of the number of "
            f"kv groups G={G} (kv.shape[1])",
        )
    if tuple(o.shape[:2]) != (T, H):
        c.value_error(
            "o", f"must have shape [T, H, D] with T={T}, H={H} (from 'q'), got {tuple(o.shape)}"
        )
    D = o.shape[2]
    if not 1 <= D <= d_qk:
        c.value_error("o", f"must have last dimension D between 1 and D+Dt={d_qk}, got {D}")
    c.shape("do", do, o.shape, f"(the shape of '{c.name('o')}')")
    if tuple(indices.shape[:2]) != (T, G):
        c.value_error(
            "indices",
            f"must have shape [T, G, K] with T={T} (from 'q') and G={G} (from 'kv'), "
            f"got {tuple(indices.shape)}",
        )
    K = indices.shape[2]
    if K < 1:
        c.value_error("indices", f"must have topk = indices.shape[2] >= 1, got {K}")
    c.shape("lse", lse, (T, H), "[T, H]")
    if q_positions is not None:
        c.shape("q_positions", q_positions, (T,), "[T]")
    if delta is not None:
        c.shape("delta", delta, (T, H), "[T, H]")
    if attn_sink is not None:
        c.shape("attn_sink", attn_sink, (H,), "[H]")
    if topk_length is not None:
        c.shape("topk_length", topk_length, (T,), "[T]")
    if strict:
        for name, size, value in (("q", "T = q.shape[0]", T), ("kv", "S_kv = kv.shape[0]", S_kv),
                                  ("indices", "K = indices.shape[2]", K)):
            if value > INT32_MAX:
                c.value_error(name, f"must have {size} <= {INT32_MAX} (the kernels' int32 "
                                    f"sizes), got {value}")

    # scalars
    if sm_scale is not None:
        if isinstance(sm_scale, bool) or not isinstance(sm_scale, Real):
            c.type_error("sm_scale", f"must be a float or None, got {type(sm_scale).__name__}")
        if not sm_scale_fits_float32(float(sm_scale)):
            c.value_error("sm_scale", sm_scale_error(sm_scale))
    try:
        normalize_lse_base(lse_base)
    except ValueError:
        c.value_error("lse_base", f"must be 2 or 'e', got {lse_base!r}")

    if strict and require_cuda and q.device.type != "cuda":
        c.value_error("q", f"must be a CUDA tensor (the compiled kernels run on CUDA "
                           f"devices; mode='reference' runs on any), got device {q.device}")
    return Dims(T, H, G, K, S_kv, D, d_qk - D)


# The backward's argument names in the entry points shaped like cuDNN's
# DSA wrapper and TileLang's sparse MQA interface (smla.dsv4).
CUDNN_NAMES = {"o": "out", "do": "dout", "indices": "topk_idxs", "sm_scale": "softmax_scale"}
TILELANG_NAMES = {"indices": "topk_idxs"}


def validate_flat_mqa_layout(q, kv, out, dout, lse, attn_sink, topk_idxs, context: str):
    """The layouts of cuDNN's DSA backward wrapper (flat tensors, one kv
    row per key): q [T, H, D+Dt], kv [S_kv, D+Dt], out and dout [T, H, D],
    lse [T, H], attn_sink a tensor, topk_idxs [T, K] with K >= 1. The rest
    is validate_bwd_args' under CUDNN_NAMES."""
    c = _Checker(context, "argument")
    c.tensor("q", q, 3, "[T, H, D+Dt]")
    c.tensor("kv", kv, 2, "[S_kv, D+Dt]")
    c.tensor("out", out, 3, "[T, H, D]")
    c.tensor("dout", dout, 3, "[T, H, D]")
    c.tensor("lse", lse, 2, "[T, H]")
    c.tensor("attn_sink", attn_sink, 1, "[H]")
    c.tensor("topk_idxs", topk_idxs, 2, "[T, K]")
    if not _is_concrete(q, out, dout, lse, topk_idxs):
        return
    T, H = q.shape[0], q.shape[1]
    if tuple(out.shape[:2]) != (T, H):
        c.value_error("out", f"must have shape [T, H, D] with T={T}, H={H} (from 'q'), got "
                             f"{tuple(out.shape)}")
    c.shape("dout", dout, out.shape, "(the shape of 'out')")
    c.shape("lse", lse, (T, H), "[T, H]")
    if topk_idxs.shape[0] != T or topk_idxs.shape[1] < 1:
        c.value_error("topk_idxs", f"must have shape [T, K] with T={T} (from 'q') and K >= 1, "
                                   f"got {tuple(topk_idxs.shape)}")


def validate_batched_mqa_layout(q, kv, attn_sink, o, do, topk_idxs, lse, context: str):
    """The layouts of TileLang's sparse MQA backward interface (a batch of
    sequences, one kv row per key, indices into the sequence's own kv):
    q [B, S, H, D+Dt], kv [B, S_kv, D+Dt], o and do [B, S, H, D], topk_idxs
    [B, S, K] with K >= 1, lse [B, S, H], attn_sink a tensor. The rest is
    validate_bwd_args' under TILELANG_NAMES on the flattened batch."""
    c = _Checker(context, "argument")
    c.tensor("q", q, 4, "[B, S, H, D+Dt]")
    c.tensor("kv", kv, 3, "[B, S_kv, D+Dt]")
    c.tensor("attn_sink", attn_sink, 1, "[H]")
    c.tensor("o", o, 4, "[B, S, H, D]")
    c.tensor("do", do, 4, "[B, S, H, D]")
    c.tensor("topk_idxs", topk_idxs, 3, "[B, S, K]")
    c.tensor("lse", lse, 3, "[B, S, H]")
    if not _is_concrete(q, kv, o, do, topk_idxs, lse):
        return
    B, S, H = q.shape[:3]
    if kv.shape[0] != B:
        c.value_error("kv", f"must have shape [B, S_kv, D+Dt] with B={B} (from 'q'), got "
                            f"{tuple(kv.shape)}")
    if tuple(o.shape[:3]) != (B, S, H):
        c.value_error("o", f"must have shape [B, S, H, D] with B={B}, S={S}, H={H} (from 'q'), "
                           f"got {tuple(o.shape)}")
    c.shape("do", do, o.shape, "(the shape of 'o')")
    if tuple(topk_idxs.shape[:2]) != (B, S) or topk_idxs.shape[2] < 1:
        c.value_error("topk_idxs", f"must have shape [B, S, K] with B={B}, S={S} (from 'q') "
                                   f"and K >= 1, got {tuple(topk_idxs.shape)}")
    c.shape("lse", lse, (B, S, H), "[B, S, H]")


def kernel_layout(name: str, t: Optional[torch.Tensor],
                  context: str = CONTEXT) -> Optional[torch.Tensor]:
    """`t` as the kernels read it: itself when contiguous and 16-byte
    aligned, else one contiguous, aligned copy, logged at DEBUG with its
    size (the one copy an argument can cost; python/USAGE.md, "Strided
    inputs")."""
    if t is None:
        return None
    contiguous = t.is_contiguous()
    if contiguous and t.data_ptr() % KERNEL_ALIGNMENT == 0:
        return t
    why = (f"strides {tuple(t.stride())} for shape {tuple(t.shape)}" if not contiguous
           else f"storage offset {t.storage_offset()} (not {KERNEL_ALIGNMENT}-byte aligned)")
    copy = torch.empty(t.shape, dtype=t.dtype, device=t.device)
    copy.copy_(t)
    if not torch.compiler.is_compiling() and logger.isEnabledFor(logging.DEBUG):
        logger.debug("smla: %s: argument '%s' has %s: the kernels read a contiguous copy "
                     "(%d bytes)", context, name, why, copy.numel() * copy.element_size())
    return copy


def first_nonfinite(t: torch.Tensor):
    """(index tuple, value) of the first NaN/Inf element in t, or None."""
    bad = ~torch.isfinite(t)
    if not bool(bad.any()):
        return None
    flat = int(bad.reshape(-1).nonzero()[0, 0])
    index = tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), t.shape))
    return index, float(t[index])


def check_finite(name: str, t: Optional[torch.Tensor], context: str = "smla.sparse_mla_bwd"):
    """Raise NonFiniteInputError naming ``name`` and its first bad element."""
    if t is None or not t.is_floating_point():
        return
    hit = first_nonfinite(t)
    if hit is None:
        return
    index, value = hit
    total = int((~torch.isfinite(t)).sum())
    raise NonFiniteInputError(
        f"{context}: {name} is not finite: first bad element at index {index} = {value} "
        f"({total} non-finite element{'s' if total != 1 else ''} in total)"
    )
