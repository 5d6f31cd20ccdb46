"""Checked mode: the compiled backward with input checks and a granular repair.

1. q, kv, o, do (and delta) must be finite; otherwise NonFiniteInputError
   names the tensor and its first bad element (garbage in is the caller's
   bug, not something to repair).
2. The compiled backward runs.
3. Query tokens whose dq row is non-finite, and tokens whose valid slots touch
   a non-finite dkv row, are "bad". If there are none, the result is returned
   as is (cost: one isfinite pass over inputs and outputs).
4. Otherwise only the bad tokens are recomputed with the reference (cost
   proportional to their number): their dq rows are replaced, and dkv is
   rebuilt as (compiled backward with the bad tokens' indices set to -1) +
   (reference dkv contribution of the bad tokens). If that masked re-run is
   still non-finite, dkv falls back to the full reference. A SmlaRepairWarning
   reports the counts. If the environment variable SMLA_DUMP_DIR is set, the
   call and the compiled outputs are dumped there first (smla.dump format),
   ready for ``python -m smla.replay``.

Test hook: ``smla.checked._inject_corruption = fn(dq, dkv, call) -> (dq, dkv)``
is applied to every backend result (call 0 = first run, 1 = masked re-run) so
the repair path can be exercised on CPU with the reference as the backend.
"""

from __future__ import annotations

import os
import warnings
from typing import Callable, Optional

import torch

from . import _compiled
from .checks import check_finite
from .dump import dump_call
from .contract import slot_validity
from .reference import sparse_mla_bwd_reference

_inject_corruption: Optional[Callable] = None
_dump_count = 0


class SmlaRepairWarning(RuntimeWarning):
    """Checked mode replaced non-finite compiled outputs with reference values."""


def _run(backend, call: int, q, kv, o, do, indices, lse, kw):
    dq, dkv, counters = backend(q, kv, o, do, indices, lse, **kw)
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
    return dq, dkv, counters


def checked_sparse_mla_bwd(
    q, kv, o, do, indices, lse, *, sm_scale: float, lse_base, q_positions=None, delta=None,
    dq_dtype: torch.dtype, dkv_dtype: torch.dtype, backend: Optional[Callable] = None,
):
    """Returns (dq, dkv, counters dict incl. 'repaired_tokens')."""
    for name, t in (("q", q), ("kv", kv), ("o", o), ("do", do), ("delta", delta)):
        check_finite(name, t)
    backend = backend or _compiled.sparse_mla_bwd
    kw = dict(sm_scale=sm_scale, lse_base=lse_base, q_positions=q_positions, delta=delta,
              dq_dtype=dq_dtype, dkv_dtype=dkv_dtype)
    dq, dkv, counters = _run(backend, 0, q, kv, o, do, indices, lse, kw)
    counters = _compiled.counters_to_dict(counters)

    T, S_kv, G = q.shape[0], kv.shape[0], kv.shape[1]
    dq_bad = ~torch.isfinite(dq)
    dkv_bad = ~torch.isfinite(dkv)
    bad_tok = dq_bad.reshape(T, -1).any(1)
    bad_kv = dkv_bad.reshape(S_kv, G, -1).any(2)  # [S_kv, G]
    counters["repaired_tokens"] = 0
    if not bool(bad_tok.any()) and not bool(bad_kv.any()):
        return dq, dkv, counters

    dump_dir = os.environ.get("SMLA_DUMP_DIR")
    if dump_dir:
        global _dump_count
        _dump_count += 1
        dump_call(
            os.path.join(dump_dir, f"smla_bwd_{os.getpid()}_{_dump_count}.pt"),
            q, kv, o, do, indices, lse, **kw, observed_dq=dq, observed_dkv=dkv,
            meta={"source": "smla checked mode"},
        )

    # Tokens that scattered into a non-finite dkv row are suspects too.
    idx = indices.long()
    valid = slot_validity(idx, S_kv, q_positions)
    safe = torch.where(valid, idx, torch.zeros_like(idx))
    groups = torch.arange(G, device=idx.device).view(1, G, 1)
    touches = (valid & bad_kv[safe, groups]).reshape(T, -1).any(1)
    rows = (bad_tok | touches).nonzero().squeeze(1)

    def sub(t):
        return None if t is None else t.index_select(0, rows)

    ref_dq, ref_dkv = sparse_mla_bwd_reference(
        sub(q), kv, sub(o), sub(do), sub(indices), sub(lse), sm_scale, lse_base=lse_base,
        q_positions=sub(q_positions), delta=sub(delta), dq_dtype=torch.float32,
        dkv_dtype=torch.float32,
    )
    dq = dq.clone()
    dq[rows] = ref_dq.to(dq.dtype)

    masked = indices.clone()
    masked[rows] = -1
    _, dkv_rest, _ = _run(backend, 1, q, kv, o, do, masked, lse, kw)
    fallback = not bool(torch.isfinite(dkv_rest).all())
    if fallback:
        _, full = sparse_mla_bwd_reference(
            q, kv, o, do, indices, lse, sm_scale, lse_base=lse_base, q_positions=q_positions,
            delta=delta, dq_dtype=torch.float32, dkv_dtype=torch.float32,
        )
        dkv = full.to(dkv_dtype)
    else:
        dkv = (dkv_rest.float() + ref_dkv).to(dkv_dtype)

    if not (bool(torch.isfinite(dq).all()) and bool(torch.isfinite(dkv).all())):
        raise RuntimeError("smla checked mode: outputs are still non-finite after repair")
    counters["repaired_tokens"] = int(rows.numel())
    warnings.warn(
        f"smla checked mode: the compiled backward returned {int(dq_bad.sum())} non-finite dq "
        f"values in {int(bad_tok.sum())} query tokens and {int(dkv_bad.sum())} non-finite dkv "
        f"values in {int(bad_kv.sum())} kv rows; recomputed {int(rows.numel())} of {T} tokens "
        "with the reference"
        + ("; the masked re-run was still non-finite, so dkv is the full reference"
           if fallback else ""),
        SmlaRepairWarning,
        stacklevel=3,
    )
    return dq, dkv, counters
