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
    attn_sink      [H] float or None (lse then includes the sink)
    topk_length    [T] int32 or None
    sm_scale       float            (written resolved; None is read as the
                                     default (D+Dt)**-0.5)
    lse_base       "2" or "e"
    dq_dtype       dtype name ("bfloat16", "float32") or None (= q's dtype)
    dkv_dtype      dtype name or None (= kv's dtype)
    observed_dq    [T, H, D+Dt] or None  (what the failing backend returned)
    observed_dkv   [S_kv, G, D+Dt] or None
    meta           dict of str -> str/int/float/bool (free-form provenance)

All tensors are stored contiguous on the CPU. A missing key, a wrong type,
shape or dtype raises DumpError (or the TypeError/ValueError of smla.checks)
naming the key. Loading is bounded: a file larger than ``max_bytes``
(default 64 GiB) is not read, and a tensor must be stored in full (a
stride-0 or otherwise expanded tensor, whose declared size exceeds the
data in the file, is refused before anything is materialised); a pickle
that torch.load(weights_only=True) refuses is a DumpError too.

dump_to_dir writes into a directory under caps on the number of dumps and
their bytes (checked mode's SMLA_DUMP_DIR), numbering files under a lock.
"""

from __future__ import annotations

import glob
import os
import threading
from typing import Any, Dict, Optional

import torch

from . import _config
from .checks import validate_bwd_args
from .contract import default_sm_scale, normalize_lse_base

FORMAT = "smla.sparse_mla_bwd.call"
VERSION = 1
TENSOR_KEYS = ("q", "kv", "o", "do", "indices", "lse")
OPTIONAL_TENSOR_KEYS = ("q_positions", "delta", "attn_sink", "topk_length", "observed_dq",
                        "observed_dkv")
REQUIRED_KEYS = ("format", "version", *TENSOR_KEYS, "sm_scale", "lse_base")
KNOWN_KEYS = (*REQUIRED_KEYS, *OPTIONAL_TENSOR_KEYS, "dq_dtype", "dkv_dtype", "meta")
_DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16,
           "float32": torch.float32, "float64": torch.float64}


# Files larger than this are not read (load_call's max_bytes default).
DEFAULT_MAX_LOAD_BYTES = 64 << 30
DUMP_PATTERN = "smla_bwd_*.pt"


class DumpError(ValueError):
    """A dump file is malformed."""


def _cpu(t: Optional[torch.Tensor]) -> Optional[torch.Tensor]:
    return None if t is None else t.detach().to("cpu").contiguous().clone()


def _dtype_name(dt: Optional[torch.dtype]) -> Optional[str]:
    return None if dt is None else str(dt).replace("torch.", "")


def dump_call(
    path, q, kv, o, do, indices, lse, *, sm_scale=None, lse_base=2, q_positions=None,
    delta=None, attn_sink=None, topk_length=None, dq_dtype=None, dkv_dtype=None,
    observed_dq=None, observed_dkv=None, meta: Optional[Dict[str, Any]] = None,
) -> str:
    """Write one backward call (and optionally the outputs a backend gave) to
    ``path``; returns the path. Arguments as smla.sparse_mla_bwd."""
    record = {
        "format": FORMAT,
        "version": VERSION,
        **{k: _cpu(v) for k, v in zip(TENSOR_KEYS, (q, kv, o, do, indices, lse))},
        "q_positions": _cpu(q_positions),
        "delta": _cpu(delta),
        "attn_sink": _cpu(attn_sink),
        "topk_length": _cpu(topk_length),
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


def load_call(path, max_bytes: Optional[int] = None) -> Dict[str, Any]:
    """Load and validate a dump (torch.load with weights_only=True only).
    Files over ``max_bytes`` (default DEFAULT_MAX_LOAD_BYTES) are refused."""
    where = f"smla dump '{os.fspath(path)}'"
    cap = DEFAULT_MAX_LOAD_BYTES if max_bytes is None else int(max_bytes)
    size = os.path.getsize(path)  # OSError when the file cannot be reached
    if size > cap:
        raise DumpError(f"{where}: the file has {size} bytes, more than the limit of {cap}")
    try:
        rec = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001
        # Whatever torch.load raises for a file it will not or cannot
        # unpickle (pickle.UnpicklingError for a blocked global, others for
        # a truncated or corrupted archive): an unusable dump.
        raise DumpError(f"{where}: cannot load it safely (torch.load with weights_only=True): "
                        f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
                        ) from exc
    if not isinstance(rec, dict):
        raise DumpError(f"{where}: expected a dict, got {type(rec).__name__}")
    for key in REQUIRED_KEYS:
        if key not in rec:
            raise DumpError(
                f"{where}: missing key '{key}' (format {FORMAT} v{VERSION} requires "
                f"{', '.join(REQUIRED_KEYS)})"
            )
    unknown = sorted(str(k) for k in rec if k not in KNOWN_KEYS)
    if unknown:
        raise DumpError(f"{where}: unknown key{'s' if len(unknown) > 1 else ''} "
                        f"{', '.join(repr(k) for k in unknown)} (format {FORMAT} v{VERSION} has "
                        f"{', '.join(KNOWN_KEYS)})")
    if not isinstance(rec["format"], str) or rec["format"] != FORMAT:
        raise DumpError(f"{where}: key 'format' must be {FORMAT!r}, got {_brief(rec['format'])}")
    if type(rec["version"]) is not int or rec["version"] != VERSION:
        raise DumpError(f"{where}: key 'version' must be {VERSION}, got {_brief(rec['version'])}")
    for key in OPTIONAL_TENSOR_KEYS:
        rec.setdefault(key, None)
        if rec[key] is not None and not isinstance(rec[key], torch.Tensor):
            raise DumpError(f"{where}: key '{key}' must be a tensor or None, got "
                            f"{type(rec[key]).__name__}")
    for key in ("dq_dtype", "dkv_dtype"):
        rec.setdefault(key, None)
        if rec[key] is not None:
            if not isinstance(rec[key], str) or rec[key] not in _DTYPES:
                raise DumpError(f"{where}: key '{key}' must be one of {sorted(_DTYPES)} or "
                                f"None, got {_brief(rec[key])}")
            rec[key] = _DTYPES[rec[key]]
    rec.setdefault("meta", {})
    if not isinstance(rec["meta"], dict):
        raise DumpError(f"{where}: key 'meta' must be a dict, got {type(rec['meta']).__name__}")
    for key in (*TENSOR_KEYS, *OPTIONAL_TENSOR_KEYS):
        _check_stored(where, key, rec[key])
    try:
        if not isinstance(rec["lse_base"], (str, int)):
            raise ValueError
        rec["lse_base"] = normalize_lse_base(rec["lse_base"])
    except ValueError:
        raise DumpError(f"{where}: key 'lse_base' must be '2' or 'e', got "
                        f"{_brief(rec['lse_base'])}")
    validate_bwd_args(
        rec["q"], rec["kv"], rec["o"], rec["do"], rec["indices"], rec["lse"],
        q_positions=rec["q_positions"], delta=rec["delta"], attn_sink=rec["attn_sink"],
        topk_length=rec["topk_length"], sm_scale=rec["sm_scale"],
        lse_base=rec["lse_base"], dq_dtype=rec["dq_dtype"], dkv_dtype=rec["dkv_dtype"],
        strict=False, context=where, noun="key",
    )
    if rec["sm_scale"] is None:
        rec["sm_scale"] = default_sm_scale(rec["q"].shape[-1])
    rec["sm_scale"] = float(rec["sm_scale"])
    for key, ref in (("observed_dq", rec["q"]), ("observed_dkv", rec["kv"])):
        t = rec[key]
        if t is not None and tuple(t.shape) != tuple(ref.shape):
            raise DumpError(f"{where}: key '{key}' must have shape {tuple(ref.shape)}, "
                            f"got {tuple(t.shape)}")
    return rec


def _brief(value) -> str:
    """A value for a message: repr for scalars and strings, the type (and
    shape) for the rest."""
    if isinstance(value, torch.Tensor):
        return f"a tensor of shape {tuple(value.shape)}"
    if value is None or isinstance(value, (bool, int, float, str)):
        text = repr(value)
        return text if len(text) <= 80 else text[:77] + "..."
    return f"a {type(value).__name__}"


def _check_stored(where: str, key: str, t) -> None:
    """A tensor of a dump must hold its data in full: stored contiguous
    (dump_call's form), its declared elements all within the stored data.
    An expanded (stride-0) tensor would materialise far more than the file
    holds; it is refused before anything is copied."""
    if not isinstance(t, torch.Tensor):
        return
    if t.layout != torch.strided or t.is_quantized or t.is_nested:
        raise DumpError(f"{where}: key '{key}' must be a dense strided tensor, got layout "
                        f"{t.layout}")
    declared = t.numel() * t.element_size()
    stored = t.untyped_storage().nbytes() - t.storage_offset() * t.element_size()
    if not t.is_contiguous() or declared > stored:
        raise DumpError(
            f"{where}: key '{key}' must be stored in full (contiguous, as smla.dump_call "
            f"writes it), got shape {tuple(t.shape)} with strides {tuple(t.stride())}: "
            f"{declared} bytes declared, {stored} stored")


def dump_bytes(*tensors) -> int:
    """Bytes the tensors take in a dump (the file is slightly larger)."""
    return sum(t.numel() * t.element_size() for t in tensors if isinstance(t, torch.Tensor))


_dir_lock = threading.Lock()
_dir_count = 0


def dump_to_dir(directory, q, kv, o, do, indices, lse, *, max_files: Optional[int] = None,
                max_bytes: Optional[int] = None, **kw) -> Optional[str]:
    """dump_call into ``directory`` as smla_bwd_<pid>_<n>.pt, unless the
    directory's dumps (this pattern, any process) would then number more
    than ``max_files`` or take more than ``max_bytes`` (defaults:
    smla.config.dump_max_files and dump_max_bytes, from SMLA_DUMP_MAX_FILES
    and SMLA_DUMP_MAX_BYTES, else 8 files and 4 GiB: a GLM-5.2-sized call
    with its outputs is about 340 MB). Returns the path, or
    None when a cap refused the dump. Threads number their files under a
    lock and check the caps under it, so concurrent dumps cannot overshoot
    them within a process."""
    files = _config.get("dump_max_files") if max_files is None else int(max_files)
    cap = _config.get("dump_max_bytes") if max_bytes is None else int(max_bytes)
    size = dump_bytes(q, kv, o, do, indices, lse,
                      *(kw.get(k) for k in OPTIONAL_TENSOR_KEYS))
    global _dir_count
    with _dir_lock:
        present = glob.glob(os.path.join(os.fspath(directory), DUMP_PATTERN))
        used = sum(os.path.getsize(f) for f in present if os.path.isfile(f))
        if len(present) + 1 > files or used + size > cap:
            return None
        _dir_count += 1
        path = os.path.join(os.fspath(directory), f"smla_bwd_{os.getpid()}_{_dir_count}.pt")
        return dump_call(path, q, kv, o, do, indices, lse, **kw)


def call_kwargs(rec: Dict[str, Any], device="cpu") -> Dict[str, Any]:
    """The record as keyword arguments for smla.sparse_mla_bwd on ``device``."""
    mv = lambda t: None if t is None else t.to(device)  # noqa: E731
    kw = {k: mv(rec[k]) for k in TENSOR_KEYS}
    kw.update(sm_scale=rec["sm_scale"], lse_base=rec["lse_base"],
              q_positions=mv(rec["q_positions"]), delta=mv(rec["delta"]),
              attn_sink=mv(rec["attn_sink"]), topk_length=mv(rec["topk_length"]),
              dq_dtype=rec["dq_dtype"], dkv_dtype=rec["dkv_dtype"])
    return kw
