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

from typing import Dict, Optional

import torch

from .contract import COUNTER_NAMES, normalize_lse_base

OP_NAME = "smla::sparse_mla_bwd"
OP_SCHEMA = (
    "sparse_mla_bwd(Tensor q, Tensor kv, Tensor o, Tensor dout, Tensor indices, "
    "Tensor lse, float sm_scale, bool lse_base_e, Tensor? q_positions, Tensor? delta, "
    "ScalarType dq_dtype, ScalarType dkv_dtype) -> (Tensor dq, Tensor dkv, Tensor counters)"
)

_loaded = False
_load_error: Optional[BaseException] = None


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


def load() -> None:
    """Import smla._C once; raise RuntimeError with a clear message if absent."""
    global _loaded, _load_error
    if _loaded:
        return
    if _load_error is None:
        try:
            from . import _C  # noqa: F401  (registers torch.ops.smla.*)

            if not hasattr(torch.ops.smla, "sparse_mla_bwd"):
                raise ImportError("smla._C did not register torch.ops.smla.sparse_mla_bwd")
            _register_fake()
            _loaded = True
            return
        except ImportError as exc:
            _load_error = exc
    raise RuntimeError(
        "smla: the compiled kernels are not built/installed (importing the extension "
        f"smla._C failed: {_load_error}). Build and install the runtime and kernels "
        "(see the project README), or use mode='reference' (SMLA_MODE=reference)."
    ) from _load_error


def is_available() -> bool:
    """True when smla._C imports and registers the operator."""
    try:
        load()
    except RuntimeError:
        return False
    return True


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
    load()
    return torch.ops.smla.sparse_mla_bwd(
        q, kv, o, do, indices, lse, float(sm_scale), normalize_lse_base(lse_base) == "e",
        q_positions, delta, dq_dtype, dkv_dtype,
    )


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
