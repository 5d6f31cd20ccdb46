"""Checked mode: the compiled backward with input checks, sampled spot checks
and a granular repair.

1. q, kv, o, do (and delta) must be finite; otherwise NonFiniteInputError
   names the tensor and its first bad element (garbage in is the caller's
   bug, not something to repair). An attention sink may be -inf (no sink
   for that head) or +inf (FlashMLA's zero output).
2. The lse of a few rows is recomputed (smla.check_lse; with the sink
   when the call has one, over each token's topk_length slots): an lse in
   the other base than ``lse_base`` raises LseBaseMismatchError (on by
   default, ``smla.configure(check_lse=0)`` or SMLA_CHECK_LSE=0 turns it
   off).
3. The compiled backward runs.
4. Query tokens whose dq row is non-finite, and tokens whose valid slots touch
   a non-finite dkv row, are "bad" (the kernel counts those rows itself:
   counter ``nonfinite_rows``; rows it missed are logged as a kernel bug).
   If there are none, the result is returned as is (cost: one isfinite pass
   over inputs and outputs).
5. Otherwise only the bad tokens are recomputed with the reference (cost
   proportional to their number): their dq rows are replaced, and dkv is
   rebuilt as (compiled backward with the bad tokens' indices set to -1) +
   (reference dkv contribution of the bad tokens). If that masked re-run is
   still non-finite, dkv falls back to the full reference. Where the fp32
   reference overflows too (inputs of extreme magnitude), the repair is
   redone in float64; if even that is not finite in the output dtype,
   NonFiniteOutputError says so (docs/validation.md, "Extreme
   magnitudes"). A non-finite d_sink is recomputed from float64 Delta
   (smla.reference.sink_gradient). Every repair is logged through logging.getLogger("smla")
   (rate-limited, with running totals) and counted in smla.stats(). If
   smla.config.dump_dir (SMLA_DUMP_DIR) is set, the call and the compiled
   outputs are dumped there first, within the directory's caps
   (smla.dump.dump_to_dir), ready for ``python -m smla.replay``.
6. Optionally (``smla.configure(check_agreement=N)`` or SMLA_CHECK_AGREEMENT=N),
   the dq rows of N random tokens and N of the dkv rows they select are
   compared with the reference: finite but wrong outputs raise
   OutputMismatchError.

Test hook: ``smla.checked._inject_corruption = fn(dq, dkv, call) -> (dq, dkv)``
is applied to every backend result (call 0 = first run, 1 = masked re-run) so
the repair path can be exercised on CPU with the reference as the backend.
"""

from __future__ import annotations

import logging
import threading
from typing import Callable, NamedTuple, Optional

import torch

from . import _compiled, _config, stats
from .checks import check_finite
from .contract import nonfinite_row_mask, slot_validity
from .dump import dump_to_dir
from .reference import sink_gradient, sparse_mla_bwd_reference
from .spot_checks import LseBaseMismatchError, check_agreement, check_lse

_inject_corruption: Optional[Callable] = None


class NonFiniteOutputError(RuntimeError):
    """The gradient does not fit the output dtype even in the float64 repair."""


class Settings(NamedTuple):
    lse_tokens: int          # tokens whose lse rows check_lse recomputes (0: off)
    agreement_tokens: int    # tokens (and dkv rows) check_agreement samples (0: off)


_agreement_lock = threading.Lock()
_agreement_calls = 0
repair_log = stats.RateLimitedLog(stats.logger)


def settings() -> Settings:
    """The spot checks in force: smla.config.check_lse (SMLA_CHECK_LSE,
    default 4) and smla.config.check_agreement (SMLA_CHECK_AGREEMENT,
    default 0)."""
    return Settings(_config.get("check_lse"), _config.get("check_agreement"))


def _run(backend, call: int, q, kv, o, do, indices, lse, kw):
    dq, dkv, counters, d_sink = backend(q, kv, o, do, indices, lse, **kw)
    if _inject_corruption is not None:
        dq, dkv = _inject_corruption(dq, dkv, call)
    if tuple(dq.shape) != tuple(q.shape) or dq.dtype != kw["dq_dtype"]:
        raise RuntimeError(
            f"smla checked mode: backend returned dq of shape {tuple(dq.shape)} and dtype "
            f"{dq.dtype}, expected {tuple(q.shape)} and {kw['dq_dtype']}"
        )
    if tuple(dkv.shape) != tuple(kv.shape) or dkv.dtype != kw["dkv_dtype"]:
        raise RuntimeError(
            f"smla checked mode: backend returned dkv of shape {tuple(dkv.shape)} and dtype "
            f"{dkv.dtype}, expected {tuple(kv.shape)} and {kw['dkv_dtype']}"
        )
    return dq, dkv, counters, d_sink


def _spot_check_lse(q, kv, indices, lse, kw, tokens):
    try:
        report = check_lse(q, kv, indices, lse, kw["sm_scale"], kw["lse_base"],
                           q_positions=kw["q_positions"], attn_sink=kw["attn_sink"],
                           topk_length=kw["topk_length"], tokens=tokens,
                           context="smla checked mode")
    except LseBaseMismatchError:
        stats.record(lse_checks=1, lse_other_base=1)
        raise
    neither = report.rows > 0 and report.declared == 0
    stats.record(lse_checks=1, lse_neither=int(neither))
    if neither:
        repair_log.event(
            logging.WARNING,
            f"smla checked mode: the lse matches neither base on {report.rows} recomputed "
            f"rows (max error {report.max_error:.3g} in lse_base={kw['lse_base']!r}): a stale "
            "lse, or one from another forward; the backward clamps its exponents "
            f"(lse checks so far: {stats.stats()['lse_checks']})", kind="lse")


def _repair(backend, kw, q, kv, o, do, indices, lse, rows, dq, dkv_dtype):
    """dq with the bad tokens' rows and dkv with their contributions
    recomputed by the reference (fp32, then float64 if that overflows);
    returns (dq, dkv, notes)."""
    sm_scale, lse_base = kw["sm_scale"], kw["lse_base"]
    q_positions, delta, lengths = kw["q_positions"], kw["delta"], kw["topk_length"]

    def sub(t):
        return None if t is None else t.index_select(0, rows)

    masked = indices.clone()
    masked[rows] = -1
    _, dkv_rest, _, _ = _run(backend, 1, q, kv, o, do, masked, lse, kw)
    fallback = not bool(torch.isfinite(dkv_rest).all())
    notes = ["the masked re-run was still non-finite, so dkv is the full reference"] \
        if fallback else []
    for dtype in (torch.float32, torch.float64):
        ref_dq, ref_dkv = sparse_mla_bwd_reference(
            sub(q), kv, sub(o), sub(do), sub(indices), sub(lse), sm_scale, lse_base=lse_base,
            q_positions=sub(q_positions), delta=sub(delta), topk_length=sub(lengths),
            dq_dtype=dtype, dkv_dtype=dtype, dtype=dtype,
        )
        fixed = dq.clone()
        fixed[rows] = ref_dq.to(dq.dtype)
        if fallback:
            _, full = sparse_mla_bwd_reference(
                q, kv, o, do, indices, lse, sm_scale, lse_base=lse_base,
                q_positions=q_positions, delta=delta, topk_length=lengths, dq_dtype=dtype,
                dkv_dtype=dtype, dtype=dtype,
            )
            dkv = full.to(dkv_dtype)
        else:
            dkv = (dkv_rest.to(dtype) + ref_dkv).to(dkv_dtype)
        if bool(torch.isfinite(fixed).all()) and bool(torch.isfinite(dkv).all()):
            if dtype == torch.float64:
                notes.append("in float64 (the fp32 reference overflowed too)")
            return fixed, dkv, notes
    bad_dq = int(nonfinite_row_mask(fixed).sum())
    bad_dkv = int(nonfinite_row_mask(dkv).sum())
    raise NonFiniteOutputError(
        f"smla checked mode: the gradient is not finite in the output dtypes even when "
        f"recomputed in float64: {bad_dq} dq rows ({fixed.dtype}) and {bad_dkv} dkv rows "
        f"({dkv.dtype}) overflow; the inputs' magnitudes exceed what the outputs can hold "
        "(docs/validation.md, \"Extreme magnitudes\")")


def _repair_sink(kw, o, do, lse, d_sink):
    """d_sink recomputed from float64 Delta when the backend's is not
    finite (Delta of extreme magnitudes); None without a sink."""
    sink = kw["attn_sink"]
    if sink is None or bool(torch.isfinite(d_sink).all()):
        return d_sink
    delta = kw["delta"]
    delta = (o.double() * do.double()).sum(-1) if delta is None else delta.double()
    fixed = sink_gradient(sink.double(), lse.double(), delta, kw["lse_base"])
    repair_log.event(logging.WARNING, "smla checked mode: the backend's d_sink was not "
                     "finite; recomputed it from float64 Delta", kind="sink")
    if not bool(torch.isfinite(fixed.to(sink.dtype)).all()):
        raise NonFiniteOutputError(
            "smla checked mode: d_sink is not finite in the sink's dtype even when recomputed "
            "in float64: the inputs' magnitudes exceed what it can hold "
            "(docs/validation.md, \"Extreme magnitudes\")")
    return fixed.to(sink.dtype)


def checked_sparse_mla_bwd(
    q, kv, o, do, indices, lse, *, sm_scale: float, lse_base, q_positions=None, delta=None,
    attn_sink=None, topk_length=None, dq_dtype: torch.dtype, dkv_dtype: torch.dtype,
    backend: Optional[Callable] = None,
):
    """Returns (dq, dkv, counters dict incl. 'repaired_tokens', d_sink or
    None without a sink)."""
    for name, t in (("q", q), ("kv", kv), ("o", o), ("do", do), ("delta", delta)):
        check_finite(name, t)
    kw = dict(sm_scale=sm_scale, lse_base=lse_base, q_positions=q_positions, delta=delta,
              attn_sink=attn_sink, topk_length=topk_length, dq_dtype=dq_dtype,
              dkv_dtype=dkv_dtype)
    cfg = settings()
    if cfg.lse_tokens:
        _spot_check_lse(q, kv, indices, lse, kw, cfg.lse_tokens)
    backend = backend or _compiled.sparse_mla_bwd
    dq, dkv, counters, d_sink = _run(backend, 0, q, kv, o, do, indices, lse, kw)
    counters = _compiled.counters_to_dict(counters)
    d_sink = _repair_sink(kw, o, do, lse, d_sink)

    T, S_kv, G = q.shape[0], kv.shape[0], kv.shape[1]
    dq_bad = ~torch.isfinite(dq)
    dkv_bad = ~torch.isfinite(dkv)
    bad_tok = dq_bad.reshape(T, -1).any(1)
    bad_kv = dkv_bad.any(2)  # [S_kv, G]
    found = int(dq_bad.any(2).sum()) + int(bad_kv.sum())
    counted = counters.get("nonfinite_rows", 0)
    if found > counted:
        stats.record(uncounted_rows=found - counted)
        repair_log.event(
            logging.ERROR,
            f"smla checked mode: the outputs hold {found} non-finite rows but the kernel's "
            f"nonfinite_rows counter says {counted}: its guard missed rows (a kernel bug)",
            kind="guard")
    counters["repaired_tokens"] = 0
    if not bool(bad_tok.any()) and not bool(bad_kv.any()):
        _agreement(q, kv, o, do, indices, lse, dq, dkv, kw, cfg)
        return dq, dkv, counters, d_sink

    dump_dir = _config.get("dump_dir")
    dumped = None
    if dump_dir:
        dumped = dump_to_dir(dump_dir, q, kv, o, do, indices, lse, **kw, observed_dq=dq,
                             observed_dkv=dkv, meta={"source": "smla checked mode"})
        stats.record(dumps_written=int(dumped is not None), dumps_skipped=int(dumped is None))

    # Tokens that scattered into a non-finite dkv row are suspects too.
    idx = indices.long()
    valid = slot_validity(idx, S_kv, q_positions, topk_length)
    safe = torch.where(valid, idx, torch.zeros_like(idx))
    groups = torch.arange(G, device=idx.device).view(1, G, 1)
    touches = (valid & bad_kv[safe, groups]).reshape(T, -1).any(1)
    rows = (bad_tok | touches).nonzero().squeeze(1)
    new_dq, new_dkv, notes = _repair(backend, kw, q, kv, o, do, indices, lse, rows, dq,
                                     dkv_dtype)
    counters["repaired_tokens"] = int(rows.numel())
    totals = stats.record(repaired_calls=1, repaired_tokens=int(rows.numel()))
    if dump_dir:
        notes.append(f"dumped the call to {dumped}" if dumped else
                     f"not dumped: {dump_dir} is at its cap (smla.config.dump_max_files / "
                     "dump_max_bytes: SMLA_DUMP_MAX_FILES / SMLA_DUMP_MAX_BYTES)")
    repair_log.event(
        logging.WARNING,
        f"smla checked mode: the compiled backward returned {int(dq_bad.sum())} non-finite dq "
        f"values in {int(bad_tok.sum())} query tokens and {int(dkv_bad.sum())} non-finite dkv "
        f"values in {int(bad_kv.sum())} kv rows (kernel counter nonfinite_rows={counted}); "
        f"recomputed {int(rows.numel())} of {T} tokens with the reference"
        + "".join(f"; {n}" for n in notes)
        + f". So far in this process: {totals['repaired_calls']} repaired calls, "
        f"{totals['repaired_tokens']} tokens recomputed")
    _agreement(q, kv, o, do, indices, lse, new_dq, new_dkv, kw, cfg)
    return new_dq, new_dkv, counters, d_sink


def _agreement(q, kv, o, do, indices, lse, dq, dkv, kw, cfg):
    """The sampled agreement check, when configured (seeded per call)."""
    if not cfg.agreement_tokens:
        return
    global _agreement_calls
    with _agreement_lock:
        _agreement_calls += 1
        seed = _agreement_calls
    try:
        check_agreement(q, kv, o, do, indices, lse, dq, dkv, sm_scale=kw["sm_scale"],
                        lse_base=kw["lse_base"], q_positions=kw["q_positions"],
                        delta=kw["delta"], topk_length=kw["topk_length"],
                        tokens=cfg.agreement_tokens,
                        kv_rows=cfg.agreement_tokens,
                        generator=torch.Generator().manual_seed(seed))
    except Exception:
        stats.record(agreement_checks=1, agreement_failures=1)
        raise
    stats.record(agreement_checks=1)
