"""Dump one sparse_mla_bwd call to a file, and load it back with validation.

Format (torch.save of a plain dict; loaded with torch.load(weights_only=True)):

    key            value
    format         "smla.sparse_mla_bwd.call"
    version        1
    q              [T, H, D+Dt]     bf16 (any float dtype shared by q/kv/o/do)
    kv             [S_kv, G, D+Dt]
    o, do          [T, H, D]
    indices        [T, G, K]        int32
    lse            [T, H]           float32 (or float64)
    q_positions    [T] int32 or None
    delta          [T, H] float or None
    sm_scale       float            (resolved: never None)
    lse_base       "2" or "e"
    dq_dtype       dtype name ("bfloat16", "float32") or None (= q's dtype)
    dkv_dtype      dtype name or None (= kv's dtype)
    observed_dq    [T, H, D+Dt] or None  (what the failing backend returned)
    observed_dkv   [S_kv, G, D+Dt] or None
    meta           dict of str -> str/int/float/bool (free-form provenance)

All tensors are stored contiguous on the CPU. A missing key, a wrong type,
shape or dtype raises DumpError (or the TypeError/ValueError of smla.checks)
naming the key.
"""

from __future__ import annotations

import os
from typing import Any, Dict, Optional

import torch

from .checks import validate_bwd_args
from .contract import default_sm_scale, normalize_lse_base

FORMAT = "smla.sparse_mla_bwd.call"
VERSION = 1
TENSOR_KEYS = ("q", "kv", "o", "do", "indices", "lse")
OPTIONAL_TENSOR_KEYS = ("q_positions", "delta", "observed_dq", "observed_dkv")
REQUIRED_KEYS = ("format", "version", *TENSOR_KEYS, "sm_scale", "lse_base")
_DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16,
           "float32": torch.float32, "float64": torch.float64}


class DumpError(ValueError):
    """A dump file is malformed."""


def _cpu(t: Optional[torch.Tensor]) -> Optional[torch.Tensor]:
    return None if t is None else t.detach().to("cpu").contiguous().clone()


def _dtype_name(dt: Optional[torch.dtype]) -> Optional[str]:
    return None if dt is None else str(dt).replace("torch.", "")


def dump_call(
    path, q, kv, o, do, indices, lse, *, sm_scale=None, lse_base=2, q_positions=None,
    delta=None, dq_dtype=None, dkv_dtype=None, observed_dq=None, observed_dkv=None,
    meta: Optional[Dict[str, Any]] = None,
) -> str:
    """Write one backward call (and optionally the outputs a backend gave) to
    ``path``; returns the path. Arguments as smla.sparse_mla_bwd."""
    record = {
        "format": FORMAT,
        "version": VERSION,
        **{k: _cpu(v) for k, v in zip(TENSOR_KEYS, (q, kv, o, do, indices, lse))},
        "q_positions": _cpu(q_positions),
        "delta": _cpu(delta),
        "sm_scale": float(default_sm_scale(q.shape[-1]) if sm_scale is None else sm_scale),
        "lse_base": str(normalize_lse_base(lse_base)),
        "dq_dtype": _dtype_name(dq_dtype),
        "dkv_dtype": _dtype_name(dkv_dtype),
        "observed_dq": _cpu(observed_dq),
        "observed_dkv": _cpu(observed_dkv),
        "meta": dict(meta or {}),
    }
    parent = os.path.dirname(os.fspath(path))
    if parent:
        os.makedirs(parent, exist_ok=True)
    torch.save(record, path)
    return os.fspath(path)


def load_call(path) -> Dict[str, Any]:
    """Load and validate a dump (torch.load with weights_only=True only)."""
    where = f"smla dump '{os.fspath(path)}'"
    rec = torch.load(path, map_location="cpu", weights_only=True)
    if not isinstance(rec, dict):
        raise DumpError(f"{where}: expected a dict, got {type(rec).__name__}")
    for key in REQUIRED_KEYS:
        if key not in rec:
            raise DumpError(
                f"{where}: missing key '{key}' (format {FORMAT} v{VERSION} requires "
                f"{', '.join(REQUIRED_KEYS)})"
            )
    if rec["format"] != FORMAT:
        raise DumpError(f"{where}: key 'format' must be {FORMAT!r}, got {rec['format']!r}")
    if rec["version"] != VERSION:
        raise DumpError(f"{where}: key 'version' must be {VERSION}, got {rec['version']!r}")
    for key in OPTIONAL_TENSOR_KEYS:
        rec.setdefault(key, None)
        if rec[key] is not None and not isinstance(rec[key], torch.Tensor):
            raise DumpError(f"{where}: key '{key}' must be a tensor or None, got "
                            f"{type(rec[key]).__name__}")
    for key in ("dq_dtype", "dkv_dtype"):
        rec.setdefault(key, None)
        if rec[key] is not None:
            if rec[key] not in _DTYPES:
                raise DumpError(f"{where}: key '{key}' must be one of {sorted(_DTYPES)} or "
                                f"None, got {rec[key]!r}")
            rec[key] = _DTYPES[rec[key]]
    rec.setdefault("meta", {})
    try:
        rec["lse_base"] = normalize_lse_base(rec["lse_base"])
    except ValueError:
        raise DumpError(f"{where}: key 'lse_base' must be '2' or 'e', got {rec['lse_base']!r}")
    validate_bwd_args(
        rec["q"], rec["kv"], rec["o"], rec["do"], rec["indices"], rec["lse"],
        q_positions=rec["q_positions"], delta=rec["delta"], sm_scale=rec["sm_scale"],
        lse_base=rec["lse_base"], dq_dtype=rec["dq_dtype"], dkv_dtype=rec["dkv_dtype"],
        strict=False, context=where, noun="key",
    )
    for key, ref in (("observed_dq", rec["q"]), ("observed_dkv", rec["kv"])):
        t = rec[key]
        if t is not None and tuple(t.shape) != tuple(ref.shape):
            raise DumpError(f"{where}: key '{key}' must have shape {tuple(ref.shape)}, "
                            f"got {tuple(t.shape)}")
    return rec


def call_kwargs(rec: Dict[str, Any], device="cpu") -> Dict[str, Any]:
    """The record as keyword arguments for smla.sparse_mla_bwd on ``device``."""
    mv = lambda t: None if t is None else t.to(device)  # noqa: E731
    kw = {k: mv(rec[k]) for k in TENSOR_KEYS}
    kw.update(sm_scale=rec["sm_scale"], lse_base=rec["lse_base"],
              q_positions=mv(rec["q_positions"]), delta=mv(rec["delta"]),
              dq_dtype=rec["dq_dtype"], dkv_dtype=rec["dkv_dtype"])
    return kw
