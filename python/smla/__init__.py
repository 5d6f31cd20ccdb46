"""smla: backward pass of sparse multi-latent attention (DeepSeek Sparse
Attention, as in GLM-5.x / DeepSeek-V3.2) that is finite by construction.

Public API
----------
sparse_mla_bwd(q, kv, o, do, indices, lse, sm_scale=None, is_casual=True,
               return_kernel=False, delta=None, *, lse_base=2,
               q_positions=None, attn_sink=None, topk_length=None,
               dq_dtype=None, dkv_dtype=None, diagnostics=False, mode=None)
    -> (dq, dkv[, d_sink][, counters])
    Drop-in for TileLang's / Slime's ``sparse_mla_bwd`` (same positional
    arguments; unbatched [T, ...] like Slime, or batched [B, T, ...] like
    upstream TileLang). q [T,H,D+Dt] bf16, kv [S_kv,G,D+Dt] bf16, o/do
    [T,H,D] bf16, indices [T,G,K] int32, lse [T,H] fp32 (base 2 by default,
    lse_base="e" for natural), q_positions [T] int32 (absolute positions for
    CP shards / packed sequences). sm_scale defaults to (D+Dt)**-0.5.
    mode: "compiled" | "checked" | "reference" (default: smla.config.mode,
    SMLA_MODE, else compiled for CUDA inputs when the compiled backward can
    run there, else reference). Any H from 1 to 128 (G = 1) runs on the
    kernels; a gradient into lse (SparseMLA) is passed to them as delta.
    attn_sink [H]: an attention sink (lse includes it; d_sink is returned);
    topk_length [T] int32: token t's number of slots.

SparseMLA.apply(q, kv, indices, scaling[, d_v, q_positions, attn_sink,
                topk_length]) -> (out, lse)
    The autograd Function of Slime's GLM-5 plugin with this backward;
    set_forward(fn, lse_base=..., d_v=..., lse_includes_sink=...) plugs in
    TileLang/FlashMLA's forward. The sink gets its gradient.

sparse_attention_backward(q, kv, out, dout, lse, attn_sink, topk_idxs,
                          softmax_scale=None, topk_length=None)
    -> (dq, dkv, d_sink)
sparse_mqa_bwd_interface(q, kv, attn_sink, o, do, topk_idxs, lse,
                         sm_scale=None) -> (dq, dkv, d_attn_sink)
    DeepSeek-V4's trainers' calls, shaped like cuDNN's DSA backward wrapper
    and TileLang's sparse MQA interface, with their conventions (smla.dsv4).

dump_call(path, q, kv, o, do, indices, lse, ...) / load_call(path)
    Save one call for ``python -m smla.replay DUMP``;
    ``python -m smla.synthetic OUT.pt`` writes a synthetic GLM-5.2 call.

stats() / reset_stats()
    Process-wide counters: calls per mode, guard counters, checked mode's
    repairs and spot checks (smla.stats). Repairs are logged through
    logging.getLogger("smla").

config / configure(**settings) / reload_config()
    The settings, one per SMLA_* environment variable (smla.config.walk is
    SMLA_WALK), read at import and on reload_config(); configure() changes
    them for this process and returns the previous ones.

check_lse(q, kv, indices, lse, sm_scale, lse_base, *, q_positions=None,
          attn_sink=None, topk_length=None)
    Recomputes the lse of a few rows (including the sink when given); raises
    LseBaseMismatchError naming lse_base when lse is in the other base
    (checked mode runs it too).

Also: smla.reference (the math), smla.contract (constants, validity rule,
flop count), smla.indices (benchmark index generators), smla.checks.
``python -m smla.info`` prints the version, the device, the kernels that
run on it and the cache; ``logging.getLogger("smla")`` at DEBUG reports the
kernel, token pairing and slot walk each new shape runs.
"""

from ._config import config, configure, reload_config
from ._log import SmlaSlowPathWarning
from ._version import __version__
from .api import MODES, resolve_mode, sparse_mla_bwd
from .autograd import SparseMLA, get_forward, set_backward_mode, set_forward
from .checks import NonFiniteInputError, check_finite
from .checked import NonFiniteOutputError
from .contract import COUNTER_NAMES, EXP2_CLAMP, LOG2E, flop_count, slot_validity
from .dsv4 import sparse_attention_backward, sparse_mqa_bwd_interface
from .dump import DumpError, dump_call, load_call
from .reference import sparse_mla_bwd_reference, sparse_mla_fwd_reference
from .spot_checks import LseBaseMismatchError, OutputMismatchError, check_lse
from .stats import reset_stats, stats

__all__ = [
    "COUNTER_NAMES", "DumpError", "EXP2_CLAMP", "LOG2E", "LseBaseMismatchError", "MODES",
    "NonFiniteInputError", "NonFiniteOutputError", "OutputMismatchError",
    "SmlaSlowPathWarning", "SparseMLA", "__version__", "check_finite", "check_lse",
    "config", "configure", "dump_call", "flop_count", "get_forward", "load_call",
    "reload_config", "reset_stats", "resolve_mode",
    "set_backward_mode", "set_forward", "slot_validity", "sparse_attention_backward",
    "sparse_mla_bwd", "sparse_mla_bwd_reference", "sparse_mla_fwd_reference",
    "sparse_mqa_bwd_interface", "stats",
]
