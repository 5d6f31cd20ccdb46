"""Bridge to the compiled kernels (the C++ extension ``smla._C``).

The extension registers one operator (TORCH_LIBRARY(smla, m)) with this
schema; the Python side calls it positionally:

    smla::sparse_mla_bwd(Tensor q, Tensor kv, Tensor o, Tensor dout,
                         Tensor indices, Tensor lse, float sm_scale,
                         bool lse_base_e, Tensor? q_positions, Tensor? delta,
                         ScalarType dq_dtype, ScalarType dkv_dtype)
        -> (Tensor dq, Tensor dkv, Tensor counters)

``counters`` is an int64 tensor of shape [4] on the device, in the order of
smla.contract.COUNTER_NAMES (invalid_slots, dead_rows, clamped,
nonfinite_rows). Arguments are
validated in Python (smla.checks) before the call. If the extension does not
register a fake (meta) implementation, one is registered here so that
torch.compile can trace calls.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from typing import Dict, Optional, Tuple

import torch

from . import _extension, _library
from ._log import logger
from .contract import COUNTER_NAMES, normalize_lse_base

OP_NAME = "smla::sparse_mla_bwd"
OP_SCHEMA = (
    "sparse_mla_bwd(Tensor q, Tensor kv, Tensor o, Tensor dout, Tensor indices, "
    "Tensor lse, float sm_scale, bool lse_base_e, Tensor? q_positions, Tensor? delta, "
    "ScalarType dq_dtype, ScalarType dkv_dtype) -> (Tensor dq, Tensor dkv, Tensor counters)"
)

PACKAGE_KERNELS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "kernels")

_loaded = False
_load_error: Optional[BaseException] = None
# One import (and, on first use, one build) per process, whatever the threads.
_load_lock = threading.Lock()
# Why the compiled path cannot run, per (SMLA_KERNEL_DIR, device index).
_reasons: Dict[Tuple[str, int], Optional[str]] = {}


def _register_fake() -> None:
    def fake(q, kv, o, dout, indices, lse, sm_scale, lse_base_e, q_positions, delta,
             dq_dtype, dkv_dtype):
        return (
            q.new_empty(q.shape, dtype=dq_dtype),
            kv.new_empty(kv.shape, dtype=dkv_dtype),
            q.new_empty((len(COUNTER_NAMES),), dtype=torch.int64),
        )

    try:
        # smla._C registers a C++ Meta kernel (which also checks the
        # arguments); a Python fake registered now would silently replace it.
        if torch._C._dispatch_has_kernel_for_dispatch_key(OP_NAME, "Meta"):
            return
    except AttributeError:  # a torch without this private query
        pass
    try:
        torch.library.register_fake(OP_NAME, fake)
    except Exception:  # noqa: BLE001
        # The extension registered its own Meta/fake kernel (the error type
        # varies across torch versions); eager use must not depend on this.
        pass


def load():
    """Import smla._C once (building it against the installed torch on first
    use, smla._extension) and return it; raise RuntimeError with a clear
    message if it cannot be."""
    if _loaded:
        return sys.modules["smla._C"]
    with _load_lock:
        return _load_locked()


def _load_locked():
    global _loaded, _load_error
    if _loaded:
        return sys.modules["smla._C"]
    if _load_error is None:
        try:
            module = _extension.load()
            if not hasattr(torch.ops.smla, "sparse_mla_bwd"):
                raise ImportError("smla._C did not register torch.ops.smla.sparse_mla_bwd")
            module.set_package_kernel_directory(PACKAGE_KERNELS)
            _register_fake()
            _loaded = True
            return module
        except ImportError as exc:
            _load_error = exc
    raise RuntimeError(
        f"smla: the compiled extension smla._C is unavailable: {_load_error}. Fix that (see "
        "python/USAGE.md, 'Installing'), or use mode='reference' (SMLA_MODE=reference)."
    ) from _load_error


def _device_index(device) -> int:
    """The CUDA device index of `device`; -1 for none (no device check)."""
    if device is None:
        return torch.cuda.current_device() if torch.cuda.is_available() else -1
    if isinstance(device, int):
        return device
    device = torch.device(device)
    if device.type != "cuda":
        return -1
    return device.index if device.index is not None else torch.cuda.current_device()


def unavailable_reason(device=None) -> Optional[str]:
    """Why the compiled backward cannot run on CUDA device `device` (an
    index or torch.device; None: the current device when CUDA is available),
    or None when it can: the extension loads, the kernel library opens, and
    the device runs the library's target. Remembered per device and
    SMLA_KERNEL_DIR."""
    index = _device_index(device)
    key = (os.environ.get("SMLA_KERNEL_DIR", ""), index)
    if key in _reasons:
        return _reasons[key]
    try:
        load().check_library(index)
        reason = None
    except RuntimeError as exc:
        reason = str(exc)
    _reasons[key] = reason
    return reason


def is_available(device=None) -> bool:
    """True when the compiled backward can run (see unavailable_reason): an
    extension without a kernel library, or a device the library's kernels do
    not run on, is not available."""
    return unavailable_reason(device) is None


def counters_to_dict(counters) -> Dict[str, int]:
    """Counters as a dict of ints, from the op's int64[4] tensor (or a dict)."""
    if isinstance(counters, dict):
        return {k: int(v) for k, v in counters.items()}
    return dict(zip(COUNTER_NAMES, (int(v) for v in counters.tolist())))


def sparse_mla_bwd(
    q, kv, o, do, indices, lse, *, sm_scale: float, lse_base, q_positions=None,
    delta=None, dq_dtype: torch.dtype, dkv_dtype: torch.dtype,
):
    """Run the compiled backward. Returns (dq, dkv, counters int64[4])."""
    module = load()
    lse_e = normalize_lse_base(lse_base) == "e"
    if not torch.compiler.is_compiling():
        _library.ensure_kernel(module, o.shape[-1], q.shape[-1] - o.shape[-1], q.shape[-2],
                               kv.shape[-2], lse_e, q_positions is not None,
                               dq_dtype == torch.float32, dkv_dtype == torch.float32)
    out = torch.ops.smla.sparse_mla_bwd(
        q, kv, o, do, indices, lse, float(sm_scale), lse_e, q_positions, delta, dq_dtype,
        dkv_dtype,
    )
    if not torch.compiler.is_compiling() and logger.isEnabledFor(logging.DEBUG):
        _log_choice(module, q, kv, indices, lse_e, q_positions, dq_dtype, dkv_dtype)
    return out


# The last choice logged per configuration (shapes but T and S_kv).
_logged: Dict[Tuple, Tuple] = {}


def _log_choice(module, q, kv, indices, lse_e, q_positions, dq_dtype, dkv_dtype) -> None:
    """Logs at DEBUG what a call ran, when its configuration is new or its
    choice differs from the last one logged for it."""
    choice = module.last_choice()
    if choice is None:
        return
    key = (tuple(q.shape[1:]), tuple(kv.shape[1:]), indices.shape[-1], lse_e,
           q_positions is not None, dq_dtype, dkv_dtype)
    seen = (choice["kernel"], choice["pairs"], choice["walk"])
    if _logged.get(key) == seen:
        return
    _logged[key] = seen
    logger.debug("smla: sparse_mla_bwd T=%d S_kv=%d H=%d G=%d K=%d D+Dt=%d lse=%s "
                 "positions=%s dq=%s dkv=%s: kernel %s (%s), %s, walk %s",
                 q.shape[0], kv.shape[0], q.shape[1], kv.shape[1], indices.shape[-1],
                 q.shape[-1], "e" if lse_e else "2", q_positions is not None, dq_dtype,
                 dkv_dtype, choice["kernel"], choice["directory"], choice["pairs"],
                 choice["walk"])


def aligned_pair_rows(indices: torch.Tensor, s_kv: int):
    """The aligned index rows of token pairs (2p, 2p + 1) that the key-sharing
    path walks (python/csrc/TokenPairs.h), built with ATen ops in ascending
    key order: returns (rows int32 [T, 1, U], U, repeated), `repeated` True
    when a row selects an in-range key twice (the rows are then unusable).

    The arguments are checked here, each error naming its argument.
    """
    load()
    if not isinstance(indices, torch.Tensor) or indices.dim() != 3 or indices.size(1) != 1 \
            or indices.dtype != torch.int32:
        raise ValueError("smla.aligned_pair_rows: argument 'indices' must be an int32 tensor "
                         f"[T, 1, K], got {getattr(indices, 'dtype', type(indices))} "
                         f"{tuple(getattr(indices, 'shape', ()))}")
    if indices.size(0) % 2 or indices.size(2) < 1:
        raise ValueError("smla.aligned_pair_rows: argument 'indices' needs an even token count "
                         f"and K >= 1, got shape {tuple(indices.shape)}")
    if int(s_kv) < 1:
        raise ValueError(f"smla.aligned_pair_rows: argument 's_kv' must be >= 1, got {s_kv}")
    return torch.ops.smla.aligned_pair_rows(indices.contiguous(), int(s_kv))
