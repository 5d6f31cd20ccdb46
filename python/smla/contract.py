"""The sparse-MLA backward contract: constants, the slot-validity rule, the
lse-base conversion and the flop count.

Every other module (reference, checks, checked mode, generators, benchmarks)
imports these from here, so the math has exactly one definition of each rule.
See docs/contract.md.
"""

from __future__ import annotations

import math
import struct
from typing import Optional, Union

import torch

# log2(e) in double precision. TileLang rounds it to 1.44269504; the
# difference (~1e-9 relative) is far below bf16/fp32 noise.
LOG2E: float = 1.0 / math.log(2.0)

# Bound on the base-2 exponent x2 = s*scale*log2(e) - lse2. Consistent inputs
# have lse2 >= max score, so x2 <= 0; a stale or mismatched lse can push it
# up, and clamping at 32 keeps P = exp2(x2) <= 2**32: large but finite, and
# far from fp32 overflow even after multiplying by dP and summing over K.
EXP2_CLAMP: float = 32.0

# Names of the guard counters, in the order a compiled kernel reports them
# (the `counters` buffer of smla.sparse_attention_bwd). Each counts how often
# one guard fired:
#   invalid_slots: slots (t, g, j) of a token (j < K, and j < topk_length[t]
#                  when lengths are given) that fail the validity rule;
#   dead_rows:     rows (t, h) whose lse is not finite (+inf, -inf or NaN);
#                  a row with a finite lse but no valid slot is just as dead,
#                  but there it is the slot guard that fired (K times);
#   clamped:       (t, h, j) with a valid slot and a live row whose exponent
#                  x2 exceeded EXP2_CLAMP;
#   nonfinite_rows: rows of the returned outputs, in their output dtype, that
#                  hold a NaN or an Inf: dq rows (t, h) plus dkv rows (s, g).
#                  Finite inputs can still overflow fp32 (magnitudes near
#                  1e19 and beyond); such rows are counted, never returned
#                  silently (docs/validation.md, "Extreme magnitudes").
COUNTER_NAMES = ("invalid_slots", "dead_rows", "clamped", "nonfinite_rows")

# The kernels take sm_scale as a float32 and form sm_scale * log2(e) in
# float32 (the softmax exponent's factor). A scale is usable when its
# float32 value is normal (not 0, not flushed as a subnormal) and that
# product is finite: SM_SCALE_MIN <= float32(sm_scale) <= SM_SCALE_MAX.
SM_SCALE_MIN: float = float(torch.finfo(torch.float32).tiny)
SM_SCALE_MAX: float = 2.3586574359122396e38

LseBase = Union[int, str]


def normalize_lse_base(lse_base: LseBase) -> int | str:
    """Return 2 or "e"; raise ValueError naming the argument otherwise."""
    if not isinstance(lse_base, bool):  # True == 1 would slip through
        if lse_base == 2 or lse_base == "2":
            return 2
        if lse_base == "e":
            return "e"
    raise ValueError(
        "smla: argument 'lse_base' must be 2 (TileLang/Slime: log2-sum-exp2) "
        f"or 'e' (natural log: FlashMLA, cuDNN), got {lse_base!r}"
    )


def lse_to_base2(lse: torch.Tensor, lse_base: LseBase) -> torch.Tensor:
    """Convert an lse tensor to base 2 (non-finite values stay non-finite)."""
    return lse if normalize_lse_base(lse_base) == 2 else lse * LOG2E


def lse_from_base2(lse2: torch.Tensor, lse_base: LseBase) -> torch.Tensor:
    """Convert a base-2 lse to the requested base."""
    return lse2 if normalize_lse_base(lse_base) == 2 else lse2 / LOG2E


def default_sm_scale(d_qk: int) -> float:
    """TileLang's default (examples/deepseek_v32/sparse_mla_bwd.py):
    sm_scale = (D + D_tail) ** -0.5, i.e. over the full q/k width."""
    return float(d_qk) ** -0.5


def _to_float32(x: float) -> float:
    """`x` rounded to the nearest float32 (inf beyond its range)."""
    return struct.unpack("f", struct.pack("f", x))[0]


def sm_scale_fits_float32(sm_scale: float) -> bool:
    """True when ``sm_scale`` survives the kernels' float32 arithmetic: a
    finite positive number whose float32 value is normal and whose float32
    product with log2(e) is finite (see SM_SCALE_MIN / SM_SCALE_MAX)."""
    if not (math.isfinite(sm_scale) and sm_scale > 0):
        return False
    # In plain Python (every call checks it): struct rounds to float32 as
    # the kernels' conversion does (to inf past float32's range), and the
    # product of two float32 values is exact in a double, so rounding it
    # once is float32's multiplication.
    f32 = _to_float32(sm_scale)
    factor = _to_float32(f32 * _to_float32(LOG2E))
    return SM_SCALE_MIN <= f32 and math.isfinite(factor)


def sm_scale_error(sm_scale) -> str:
    """The message (after "argument 'sm_scale' ") for a scale that fails
    sm_scale_fits_float32 (smla.checks raises it)."""
    return (f"must be a finite positive number that is normal in float32 (the kernels' "
            f"type) and keeps sm_scale * log2(e) finite in float32 ({SM_SCALE_MIN:g} <= "
            f"sm_scale <= {SM_SCALE_MAX:g}), got {sm_scale!r}")


def token_slots(
    indices: torch.Tensor, topk_length: Optional[torch.Tensor] = None
) -> Optional[torch.Tensor]:
    """Boolean mask of the slots a token has, broadcastable to ``indices``
    ([T, G, K]): slot j of token t exists iff j < min(K, max(0,
    topk_length[t])). None when ``topk_length`` is None (every one of the K
    slots exists). A slot past a token's length is not a slot: never
    dereferenced, contributing nothing, not counted as invalid."""
    if topk_length is None:
        return None
    K = indices.shape[-1]
    j = torch.arange(K, device=indices.device)
    n = topk_length.to(device=indices.device, dtype=torch.int64).clamp(0, K)
    return j < n.view(-1, *([1] * (indices.dim() - 1)))


def slot_validity(
    indices: torch.Tensor, s_kv: int, q_positions: Optional[torch.Tensor] = None,
    topk_length: Optional[torch.Tensor] = None,
) -> torch.Tensor:
    """Boolean mask of valid slots, same shape as ``indices`` ([T, G, K]).

    Slot (t, g, j) is valid iff it is one of the token's slots (token_slots:
    j < topk_length[t] when lengths are given), 0 <= indices[t,g,j] < s_kv
    and, when q_positions ([T]) is given, indices[t,g,j] <= q_positions[t].
    Duplicate indices are each a valid slot (they count once per slot).
    """
    valid = (indices >= 0) & (indices < s_kv)
    if q_positions is not None:
        pos = q_positions.to(indices.dtype).view(-1, *([1] * (indices.dim() - 1)))
        valid &= indices <= pos
    exists = token_slots(indices, topk_length)
    if exists is not None:
        valid &= exists
    return valid


def invalid_slot_count(indices: torch.Tensor, valid: torch.Tensor,
                       topk_length: Optional[torch.Tensor] = None) -> torch.Tensor:
    """The ``invalid_slots`` counter's count over ``indices`` (a scalar
    tensor): the token's slots (token_slots) that ``valid`` (slot_validity)
    rejects."""
    exists = token_slots(indices, topk_length)
    bad = ~valid if exists is None else exists & ~valid
    return bad.sum()


def lse_with_sink(lse_keys: torch.Tensor, attn_sink: Optional[torch.Tensor],
                  lse_base: LseBase) -> torch.Tensor:
    """The sink-inclusive lse ([..., H], in ``lse_base``) from the lse over
    the keys only and a per-head sink (``attn_sink`` [H], a natural-log
    logit like s * scale, entering the softmax's denominator only):
    log(sum_j exp(s_j scale) + exp(sink_h)) in the base of ``lse_keys``.
    A row without valid keys (lse_keys = -inf) gets the sink itself; +inf
    or NaN stay non-finite (dead rows); a -inf sink is no sink."""
    if attn_sink is None:
        return lse_keys
    sink = attn_sink.to(lse_keys.dtype)
    if normalize_lse_base(lse_base) == 2:
        return torch.logaddexp2(lse_keys, sink * LOG2E)
    return torch.logaddexp(lse_keys, sink)


def nonfinite_row_mask(t: torch.Tensor) -> torch.Tensor:
    """Boolean mask over the rows of ``t`` (every dimension but the last)
    that hold a NaN or an Inf: the rows the ``nonfinite_rows`` counter
    counts, for dq ([T, H]) and dkv ([S_kv, G])."""
    return (~torch.isfinite(t)).any(-1)


def flop_count(T: int, H: int, K: int, D: int, Dt: int) -> int:
    """Flops of one backward call, the count TileLang uses (docs/performance.md):
    2*T*H*K*(2*D + 3*(D+Dt))  (two D-wide and three (D+Dt)-wide GEMMs)."""
    return 2 * T * H * K * (2 * D + 3 * (D + Dt))
