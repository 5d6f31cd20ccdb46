"""Sampled checks against the reference, cheap enough to run on every call:

* check_lse (``smla.check_lse``): recomputes the lse of a few rows and
  says whether the given lse is in the declared base. A backward given a
  natural-log lse as base 2 (or the reverse) returns finite, wrong
  gradients; Slime's SGLangSparseMLA hands FlashMLA's natural-log lse to a
  base-2 backward. A mismatch raises LseBaseMismatchError naming
  ``lse_base``.
* check_agreement: compares the dq rows of a few tokens, and a few dkv
  rows, with the reference; finite but wrong outputs (a kernel bug) raise
  OutputMismatchError naming the output.

Checked mode (smla.checked) runs both when enabled (smla.configure: check_lse,
check_agreement).
"""

from __future__ import annotations

from typing import NamedTuple, Optional

import torch

from .contract import LOG2E, default_sm_scale, normalize_lse_base, slot_validity
from .reference import sparse_mla_bwd_reference, sparse_mla_fwd_reference


class LseBaseMismatchError(ValueError):
    """The lse matches the other base than the declared ``lse_base``."""


class OutputMismatchError(RuntimeError):
    """Sampled outputs of the backward disagree with the reference."""


class LseCheck(NamedTuple):
    rows: int           # rows (t, h) that could tell the bases apart
    declared: int       # of those, rows that match the declared base
    other: int          # rows that match the other base
    max_error: float    # max |lse - recomputed lse| in the declared base


def _spread(candidates: torch.Tensor, n: int) -> torch.Tensor:
    """Up to n entries of a 1-D tensor, evenly spaced (first and last kept)."""
    if candidates.numel() <= n:
        return candidates
    pick = torch.linspace(0, candidates.numel() - 1, n, device=candidates.device).round().long()
    return candidates[pick]


def check_lse(q, kv, indices, lse, sm_scale=None, lse_base=2, *, q_positions=None,
              attn_sink=None, topk_length=None, tokens: int = 4,
              context: str = "smla.check_lse") -> LseCheck:
    """Recompute the lse of ``tokens`` tokens (their rows with a finite lse)
    in float64 and compare it with ``lse`` in both bases. Raises
    LseBaseMismatchError, naming ``lse_base``, when no row matches the
    declared base and some match the other one. Rows whose two bases are
    too close to tell apart (an lse near 0) are not counted. With
    ``attn_sink`` the recomputed lse includes the sink (the lse a call with
    a sink takes); ``topk_length`` limits each token to its slots."""
    base = normalize_lse_base(lse_base)
    scale = default_sm_scale(q.shape[-1]) if sm_scale is None else float(sm_scale)
    live = torch.isfinite(lse).any(1).nonzero().squeeze(1)
    ts = _spread(live, max(int(tokens), 1))
    if ts.numel() == 0:
        return LseCheck(0, 0, 0, 0.0)
    def rows(t):
        return None if t is None else t.index_select(0, ts)

    _, lse2 = sparse_mla_fwd_reference(
        q.index_select(0, ts), kv, indices.index_select(0, ts), scale, d_v=1, lse_base=2,
        q_positions=rows(q_positions), attn_sink=attn_sink, topk_length=rows(topk_length),
        dtype=torch.float64)
    lse2 = lse2.double()
    given = lse.index_select(0, ts).double()
    want = lse2 if base == 2 else lse2 / LOG2E
    other = lse2 / LOG2E if base == 2 else lse2
    tol = 1e-3 * (1.0 + want.abs())
    usable = torch.isfinite(given) & torch.isfinite(lse2) & ((want - other).abs() > 8 * tol)
    err_want = (given - want).abs()
    declared = usable & (err_want <= tol)
    matches_other = usable & ((given - other).abs() <= tol)
    report = LseCheck(int(usable.sum()), int(declared.sum()), int(matches_other.sum()),
                      float(torch.where(usable, err_want, torch.zeros_like(err_want)).max()))
    if report.other > 0 and report.declared == 0:
        named = "2 (log2-sum-exp2)" if base == 2 else "'e' (natural log)"
        actual = "'e' (a natural-log lse, as FlashMLA writes)" if base == 2 \
            else "2 (a base-2 lse, as TileLang writes)"
        raise LseBaseMismatchError(
            f"{context}: argument 'lse_base' is {named}, but the lse matches lse_base={actual}: "
            f"{report.other} of {report.rows} recomputed rows agree with the other base and "
            f"none with the declared one (max error {report.max_error:.3g}); pass the base "
            "the forward wrote its lse in")
    return report


def _rel_error(got: torch.Tensor, want: torch.Tensor) -> float:
    diff = float((got.double() - want.double()).norm())
    ref = float(want.double().norm())
    if ref == 0.0:
        return 0.0 if diff == 0.0 else float("inf")
    return diff / ref


def check_agreement(q, kv, o, do, indices, lse, dq, dkv, *, sm_scale: float, lse_base,
                    q_positions=None, delta=None, topk_length=None, tokens: int = 4,
                    kv_rows: int = 4,
                    max_touching: int = 256, tol: float = 5e-2,
                    generator: Optional[torch.Generator] = None,
                    context: str = "smla checked mode") -> dict:
    """Compare ``dq`` on ``tokens`` random tokens and ``dkv`` on ``kv_rows``
    of the kv rows those tokens select with the fp32 reference (relative
    Frobenius error over the sampled rows <= ``tol``; bf16 outputs sit
    near 4e-3). A dkv row is recomputed from every token that selects it
    (their other slots masked); rows selected by the fewest tokens are
    preferred, at most ``max_touching`` tokens in all. Raises
    OutputMismatchError naming the output; returns the errors."""
    T, S, G = q.shape[0], kv.shape[0], kv.shape[1]
    dev = q.device
    pick = torch.randperm(T, generator=generator)[: max(int(tokens), 1)].to(dev)

    def sub(t, rows):
        return None if t is None else t.index_select(0, rows)

    ref_dq, _ = sparse_mla_bwd_reference(
        sub(q, pick), kv, sub(o, pick), sub(do, pick), sub(indices, pick), sub(lse, pick),
        sm_scale, lse_base=lse_base, q_positions=sub(q_positions, pick),
        delta=sub(delta, pick), topk_length=sub(topk_length, pick), dq_dtype=torch.float32,
        dkv_dtype=torch.float32)
    errors = {"dq": _rel_error(dq.index_select(0, pick), ref_dq)}
    if not errors["dq"] <= tol:
        raise OutputMismatchError(
            f"{context}: dq of tokens {pick.tolist()} differs from the reference by a "
            f"relative error of {errors['dq']:.3g} (tolerance {tol:g}): the backward returned "
            "finite but wrong values")

    idx = indices.long()
    valid = slot_validity(idx, S, q_positions, topk_length)
    chosen = idx.index_select(0, pick)[valid.index_select(0, pick)].unique()
    if chosen.numel():
        # Tokens selecting each candidate row; the least selected first.
        counts = torch.bincount(idx[valid], minlength=S).index_select(0, chosen)
        chosen = chosen[counts.argsort()][: max(int(kv_rows), 1)]
        keep = torch.isin(idx, chosen) & valid
        touching = keep.flatten(1).any(1)
        while int(touching.sum()) > max_touching and chosen.numel() > 1:
            chosen = chosen[:-1]
            keep = torch.isin(idx, chosen) & valid
            touching = keep.flatten(1).any(1)
        rows = touching.nonzero().squeeze(1)
        masked = torch.where(keep, indices, torch.full_like(indices, -1)).index_select(0, rows)
        _, ref_dkv = sparse_mla_bwd_reference(
            sub(q, rows), kv, sub(o, rows), sub(do, rows), masked, sub(lse, rows), sm_scale,
            lse_base=lse_base, q_positions=sub(q_positions, rows), delta=sub(delta, rows),
            topk_length=sub(topk_length, rows), dq_dtype=torch.float32,
            dkv_dtype=torch.float32)
        errors["dkv"] = _rel_error(dkv.index_select(0, chosen), ref_dkv.index_select(0, chosen))
        if not errors["dkv"] <= tol:
            raise OutputMismatchError(
                f"{context}: dkv rows {chosen.tolist()} differ from the reference by a "
                f"relative error of {errors['dkv']:.3g} (tolerance {tol:g}): the backward "
                "returned finite but wrong values")
    return errors
