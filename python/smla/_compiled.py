"""The compiled backward: the C++ extension ``smla._C`` and its op.

``torch.ops.smla.sparse_mla_bwd`` is defined by smla._op (the schema, the
argument checks, the head padding, the fake implementation); smla._C
registers the private ops it calls, ``smla::_launch_bwd`` and
``smla::_delta`` (python/csrc/SparseMlaBwd.cpp), and
``smla::aligned_pair_rows``. This
module loads smla._C (building it against the installed torch on first
use, smla._extension), hands it the settings of smla.config that the C++
op reads (kernel directory, slot walk, token pairs) whenever they change,
and says whether the compiled backward can run on a device.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from typing import Dict, Optional, Tuple

import torch

from . import _config, _extension, _op
from ._log import logger
from .contract import COUNTER_NAMES, normalize_lse_base

OP_NAME = _op.OP_NAME
OP_SCHEMA = _op.OP_SCHEMA

PACKAGE_KERNELS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "kernels")

_loaded = False
_load_error: Optional[BaseException] = None
# One import (and, on first use, one build) per process, whatever the threads.
_load_lock = threading.Lock()
# Why the compiled path cannot run, per (kernel directory, device index).
_reasons: Dict[Tuple[Optional[str], int], Optional[str]] = {}


def _push_settings(module, values) -> None:
    """Hands smla._C the settings its op reads (smla._config): the kernel
    directory ("" for the package's) and the walk and pair settings, as
    their positions among the choices, -1 for unset integers."""
    def number(v):
        return -1 if v is None else int(v)

    module.set_options(
        values["kernel_dir"] or "",
        _config.WALKS.index(values["walk"]), number(values["walk_period"]),
        number(values["walk_chunk_tokens"]), number(values["walk_l2_bytes"]),
        _config.PAIRS.index(values["pairs"]), number(values["pairs_chunk"]),
        _config.PAIRS_ROWS.index(values["pairs_rows"]))


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
            for op in ("_launch_bwd", "_delta"):
                if not hasattr(torch.ops.smla, op):
                    raise ImportError(f"smla._C did not register torch.ops.smla.{op}")
            module.set_package_kernel_directory(PACKAGE_KERNELS)
            _config.listen(lambda values: _push_settings(module, values))
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
    kernel directory (smla.config.kernel_dir)."""
    index = _device_index(device)
    key = (_config.get("kernel_dir"), index)
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
    delta=None, attn_sink=None, topk_length=None, dq_dtype: torch.dtype,
    dkv_dtype: torch.dtype,
):
    """Run the compiled backward (torch.ops.smla.sparse_mla_bwd). Returns
    (dq, dkv, counters int64[4], d_sink [H] or None without a sink)."""
    dq, dkv, counters, d_sink = torch.ops.smla.sparse_mla_bwd(
        q, kv, o, do, indices, lse, float(sm_scale), normalize_lse_base(lse_base) == "e",
        q_positions, delta, dq_dtype, dkv_dtype, attn_sink, topk_length,
    )
    return dq, dkv, counters, (d_sink if attn_sink is not None else None)


# The last choice logged per configuration (shapes but T and S_kv).
_logged: Dict[Tuple, Tuple] = {}


def log_choice(module, dims, heads: int, lse_e: bool, positions: bool, dq_dtype,
               dkv_dtype) -> None:
    """Logs at DEBUG what a call ran (smla._C's record of its last call on
    this thread), when its configuration is new or its choice differs from
    the last one logged for it."""
    choice = module.last_choice()
    if choice is None:
        return
    key = (dims.H, dims.G, dims.K, dims.D, dims.Dt, lse_e, positions, dq_dtype, dkv_dtype)
    seen = (choice["kernel"], choice["pairs"], choice["walk"])
    if _logged.get(key) == seen:
        return
    _logged[key] = seen
    how = "its own heads" if heads == dims.H else \
        f"{heads - dims.H} padded heads (the {heads}-head kernel)"
    logger.debug("smla: sparse_mla_bwd T=%d S_kv=%d H=%d G=%d K=%d D+Dt=%d lse=%s "
                 "positions=%s dq=%s dkv=%s: kernel %s (%s) on %s, %s, walk %s",
                 dims.T, dims.S_kv, dims.H, dims.G, dims.K, dims.D + dims.Dt,
                 "e" if lse_e else "2", positions, dq_dtype, dkv_dtype, choice["kernel"],
                 choice["directory"], how, choice["pairs"], choice["walk"])


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
