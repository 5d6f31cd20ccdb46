"""The one set of argument rules (smla/checks.py), through every entry point.

Each bad argument below raises the same exception, with the same message
naming the argument, whether it reaches smla.sparse_mla_bwd in mode
"compiled" or "checked", torch.ops.smla.sparse_mla_bwd called directly with
CPU tensors (its one implementation) or with meta tensors (its fake
implementation, which torch.compile traces with), or mode "reference"
(whose rules accept more dtypes: where they differ the table says so). On a
CPU every check runs before the device rule, so the whole table runs
without a GPU and without the extension (the op is defined in Python)."""

import logging
import re

import pytest
import torch

import smla
from smla.checks import kernel_layout

OP = torch.ops.smla.sparse_mla_bwd
PRE = "smla.sparse_mla_bwd: "
NAMES = ["q", "kv", "o", "do", "indices", "lse", "sm_scale", "q_positions", "delta",
         "dq_dtype", "dkv_dtype", "attn_sink", "topk_length"]
CUDA_RULE = ("argument 'q' must be a CUDA tensor (the compiled kernels run on CUDA devices; "
             "mode='reference' runs on any), got device cpu")
SM_SCALE_RULE = ("argument 'sm_scale' must be a finite positive number that is normal in "
                 "float32 (the kernels' type) and keeps sm_scale * log2(e) finite in float32 "
                 "(1.17549e-38 <= sm_scale <= 2.35866e+38), got ")
ACCEPTED = "accepted"  # the reference's rules take the argument


def valid(T=4, H=4, G=2, S=8, K=3, D=8, Dt=4):
    """A valid call of the kernels' rules (bf16, on the CPU), by argument name."""
    gen = torch.Generator().manual_seed(0)
    bf16 = dict(dtype=torch.bfloat16)
    return dict(
        q=torch.randn(T, H, D + Dt, generator=gen).to(**bf16),
        kv=torch.randn(S, G, D + Dt, generator=gen).to(**bf16),
        o=torch.randn(T, H, D, generator=gen).to(**bf16),
        do=torch.randn(T, H, D, generator=gen).to(**bf16),
        indices=torch.randint(0, S, (T, G, K), generator=gen, dtype=torch.int32),
        lse=torch.randn(T, H, generator=gen) + 10.0,
        sm_scale=(D + Dt) ** -0.5,
        q_positions=torch.arange(T, dtype=torch.int32) + S,
        delta=torch.randn(T, H, generator=gen),
        dq_dtype=torch.bfloat16,
        dkv_dtype=torch.float32,
        attn_sink=torch.randn(H, generator=gen),
        topk_length=torch.randint(-1, K + 2, (T,), generator=gen, dtype=torch.int32),
    )


def _noncontig(t):
    return t.transpose(0, 1).contiguous().transpose(0, 1)


# (argument, how to break it, exception, message after PRE, the reference's
# message: None for the same one, ACCEPTED where its rules take it)
BAD = [
    ("indices", lambda t: t.long(), TypeError,
     "argument 'indices' must have dtype torch.int32, got torch.int64", None),
    ("q", lambda t: t.float(), TypeError,
     "argument 'q' must have dtype torch.bfloat16, got torch.float32",
     "argument 'kv' must have the dtype of 'q' (torch.float32), got torch.bfloat16"),
    ("kv", lambda t: t.half(), TypeError,
     "argument 'kv' must have dtype torch.bfloat16, got torch.float16",
     "argument 'kv' must have the dtype of 'q' (torch.bfloat16), got torch.float16"),
    ("o", lambda t: t.double(), TypeError,
     "argument 'o' must have dtype torch.bfloat16, got torch.float64",
     "argument 'o' must have the dtype of 'q' (torch.bfloat16), got torch.float64"),
    ("do", lambda t: t.float(), TypeError,
     "argument 'do' must have dtype torch.bfloat16, got torch.float32",
     "argument 'do' must have the dtype of 'q' (torch.bfloat16), got torch.float32"),
    ("lse", lambda t: t.bfloat16(), TypeError,
     "argument 'lse' must have dtype torch.float32, got torch.bfloat16",
     "argument 'lse' must have dtype torch.float32 or torch.float64, got torch.bfloat16"),
    ("q_positions", lambda t: t.long(), TypeError,
     "argument 'q_positions' must have dtype torch.int32, got torch.int64", None),
    ("delta", lambda t: t.double(), TypeError,
     "argument 'delta' must have dtype torch.float32, got torch.float64", ACCEPTED),
    ("dq_dtype", lambda t: torch.float16, TypeError,
     "argument 'dq_dtype' must be None or one of torch.bfloat16, torch.float32, got "
     "torch.float16", ACCEPTED),
    ("dkv_dtype", lambda t: torch.float64, TypeError,
     "argument 'dkv_dtype' must be None or one of torch.bfloat16, torch.float32, got "
     "torch.float64", ACCEPTED),
    ("q", lambda t: t.flatten(1), ValueError,
     "argument 'q' must have 3 dimensions [T, H, D+Dt], got 2 (shape (4, 48))", None),
    ("indices", lambda t: t[0], ValueError,
     "argument 'indices' must have 3 dimensions [T, G, K], got 2 (shape (2, 3))", None),
    ("lse", lambda t: t[..., None], ValueError,
     "argument 'lse' must have 2 dimensions [T, H], got 3 (shape (4, 4, 1))", None),
    ("q_positions", lambda t: t[:, None], ValueError,
     "argument 'q_positions' must have 1 dimension [T], got 2 (shape (4, 1))", None),
    ("kv", lambda t: t[..., :10], ValueError,
     "argument 'kv' must have last dimension D+Dt = 12 (q.shape[2]), got 10", None),
    ("kv", lambda t: torch.cat([t, t[:, :1]], 1), ValueError,
     "argument 'q' has H=4 heads (q.shape[1]), which must be a multiple of the number of kv "
     "groups G=3 (kv.shape[1])", None),
    ("o", lambda t: t[:3], ValueError,
     "argument 'o' must have shape [T, H, D] with T=4, H=4 (from 'q'), got (3, 4, 8)", None),
    ("o", lambda t: torch.cat([t, t], -1), ValueError,
     "argument 'o' must have last dimension D between 1 and D+Dt=12, got 16", None),
    ("do", lambda t: t[..., :6], ValueError,
     "argument 'do' must have shape (4, 4, 8) (the shape of 'o'), got (4, 4, 6)", None),
    ("indices", lambda t: t[:, :1], ValueError,
     "argument 'indices' must have shape [T, G, K] with T=4 (from 'q') and G=2 (from 'kv'), "
     "got (4, 1, 3)", None),
    ("indices", lambda t: t[..., :0], ValueError,
     "argument 'indices' must have topk = indices.shape[2] >= 1, got 0", None),
    ("kv", lambda t: t[:0], ValueError,
     "argument 'kv' must have S_kv = kv.shape[0] >= 1, got 0", None),
    ("lse", lambda t: t[:, :3], ValueError,
     "argument 'lse' must have shape (4, 4) [T, H], got (4, 3)", None),
    ("q_positions", lambda t: torch.zeros(5, dtype=torch.int32), ValueError,
     "argument 'q_positions' must have shape (4,) [T], got (5,)", None),
    ("delta", lambda t: torch.zeros(4, 5), ValueError,
     "argument 'delta' must have shape (4, 4) [T, H], got (4, 5)", None),
    *[("sm_scale", (lambda v: lambda t: v)(v), ValueError, SM_SCALE_RULE + repr(v), None)
      for v in (float("nan"), float("inf"), -1.0, 0.0, 1e39, 1e300, 1e-300, 1e-39, 2.36e38)],
    ("attn_sink", lambda t: t.double(), TypeError,
     "argument 'attn_sink' must have dtype torch.float32, got torch.float64", ACCEPTED),
    ("attn_sink", lambda t: t.bfloat16(), TypeError,
     "argument 'attn_sink' must have dtype torch.float32, got torch.bfloat16",
     "argument 'attn_sink' must have dtype torch.float32 or torch.float64, got torch.bfloat16"),
    ("attn_sink", lambda t: t[:, None], ValueError,
     "argument 'attn_sink' must have 1 dimension [H], got 2 (shape (4, 1))", None),
    ("attn_sink", lambda t: t[:3], ValueError,
     "argument 'attn_sink' must have shape (4,) [H], got (3,)", None),
    ("topk_length", lambda t: t.long(), TypeError,
     "argument 'topk_length' must have dtype torch.int32, got torch.int64", None),
    ("topk_length", lambda t: t.float(), TypeError,
     "argument 'topk_length' must have dtype torch.int32, got torch.float32", None),
    ("topk_length", lambda t: t[None], ValueError,
     "argument 'topk_length' must have 1 dimension [T], got 2 (shape (1, 4))", None),
    ("topk_length", lambda t: torch.cat([t, t]), ValueError,
     "argument 'topk_length' must have shape (4,) [T], got (8,)", None),
]


def _api(mode, a):
    return smla.sparse_mla_bwd(a["q"], a["kv"], a["o"], a["do"], a["indices"], a["lse"],
                               a["sm_scale"], q_positions=a["q_positions"], delta=a["delta"],
                               attn_sink=a["attn_sink"], topk_length=a["topk_length"],
                               dq_dtype=a["dq_dtype"], dkv_dtype=a["dkv_dtype"], mode=mode)


def _op(a, device=None):
    moved = {k: v.to(device) if isinstance(v, torch.Tensor) and device else v
             for k, v in a.items()}
    return OP(moved["q"], moved["kv"], moved["o"], moved["do"], moved["indices"], moved["lse"],
              moved["sm_scale"], False, moved["q_positions"], moved["delta"],
              moved["dq_dtype"], moved["dkv_dtype"], moved["attn_sink"], moved["topk_length"])


ENTRY_POINTS = {
    "api-compiled": lambda a: _api("compiled", a),
    "api-checked": lambda a: _api("checked", a),
    "op-cpu": lambda a: _op(a),
    "op-meta": lambda a: _op(a, "meta"),
}


def _raises(exc, message, fn, a):
    with pytest.raises(exc, match="^" + re.escape(PRE + message) + "$"):
        fn(a)


@pytest.mark.parametrize("entry", sorted(ENTRY_POINTS))
@pytest.mark.parametrize("name,breaker,exc,message,reference", BAD,
                         ids=[f"{b[0]}-{i}" for i, b in enumerate(BAD)])
def test_every_entry_point_gives_the_same_message(entry, name, breaker, exc, message,
                                                   reference):
    a = valid()
    a[name] = breaker(a[name])
    _raises(exc, message, ENTRY_POINTS[entry], a)


@pytest.mark.parametrize("name,breaker,exc,message,reference", BAD,
                         ids=[f"{b[0]}-{i}" for i, b in enumerate(BAD)])
def test_reference_mode_applies_its_rules(name, breaker, exc, message, reference):
    a = valid()
    a[name] = breaker(a[name])
    if reference == ACCEPTED:
        dq, dkv, d_sink = _api("reference", a)
        assert dq.shape == a["q"].shape and dkv.shape == a["kv"].shape
        assert d_sink.shape == (4,)
    else:
        _raises(exc, reference or message, lambda b: _api("reference", b), a)


@pytest.mark.parametrize("entry", ["api-compiled", "api-checked", "op-cpu"])
def test_a_valid_cpu_call_stops_at_the_device_rule(entry):
    """The kernels run on CUDA: every entry point of the compiled backward
    refuses a CPU q with one message (no CPU kernel that only throws)."""
    _raises(ValueError, CUDA_RULE, ENTRY_POINTS[entry], valid())


def test_meta_and_reference_calls_of_a_valid_call_run():
    dq, dkv, counters, d_sink = _op(valid(), "meta")
    assert (dq.shape, dq.dtype, dkv.dtype, counters.shape, d_sink.shape, d_sink.dtype) == \
        ((4, 4, 12), torch.bfloat16, torch.float32, (4,), (4,), torch.float32)
    no_sink = dict(valid(), attn_sink=None)
    assert _op(no_sink, "meta")[3].shape == (0,)
    dq, dkv, d_sink = _api("reference", valid())
    assert dq.dtype == torch.bfloat16 and dkv.dtype == torch.float32
    assert d_sink.dtype == torch.float32 and torch.isfinite(d_sink).all()
    assert len(_api("reference", no_sink)) == 2


@pytest.mark.parametrize("entry", ["api-compiled", "api-checked", "api-reference", "op-cpu"])
@pytest.mark.parametrize("name", ["lse", "attn_sink", "topk_length"])
def test_device_mismatch(entry, name):
    a = valid()
    a[name] = a[name].to("meta")
    fn = (lambda b: _api("reference", b)) if entry == "api-reference" else ENTRY_POINTS[entry]
    _raises(ValueError, f"argument '{name}' must be on the device of 'q' (cpu), got meta", fn,
            a)
    # The fake implementation: q on meta, lse on the CPU.
    a = {k: v.to("meta") if isinstance(v, torch.Tensor) and k != "lse" else v
         for k, v in valid().items()}
    _raises(ValueError, "argument 'lse' must be on the device of 'q' (meta), got cpu", _op, a)


@pytest.mark.parametrize("name", ["q", "attn_sink", "topk_length"])
def test_not_a_tensor(name):
    a = valid()
    a[name] = [1.0, 2.0]
    for mode in ("compiled", "checked", "reference"):
        _raises(TypeError, f"argument '{name}' must be a torch.Tensor, got list",
                lambda b: _api(mode, b), a)


@pytest.mark.parametrize("entry", ["api-compiled", "api-checked", "op-meta"])
def test_int32_sizes(entry):
    """The kernels take T, S_kv and K as int32 (meta tensors: no memory)."""
    T = 2 ** 31
    a = valid()
    a = {k: v.to("meta") if isinstance(v, torch.Tensor) else v for k, v in a.items()}
    a.update(q=torch.empty(T, 4, 12, dtype=torch.bfloat16, device="meta"),
             o=torch.empty(T, 4, 8, dtype=torch.bfloat16, device="meta"),
             do=torch.empty(T, 4, 8, dtype=torch.bfloat16, device="meta"),
             indices=torch.empty(T, 2, 3, dtype=torch.int32, device="meta"),
             lse=torch.empty(T, 4, device="meta"), q_positions=None, delta=None,
             topk_length=None)
    fn = (lambda b: _op(b, "meta")) if entry == "op-meta" else ENTRY_POINTS[entry]
    _raises(ValueError, f"argument 'q' must have T = q.shape[0] <= 2147483647 (the kernels' "
            f"int32 sizes), got {T}", fn, a)


@pytest.mark.parametrize("entry", ["api-compiled", "api-checked", "op-cpu"])
@pytest.mark.parametrize("name", ["q", "kv", "o", "do", "indices", "lse", "q_positions",
                                  "delta", "attn_sink", "topk_length"])
def test_strided_arguments_are_accepted(entry, name):
    """One layout policy: no entry point refuses a strided tensor (on a CPU
    the call stops at the device rule, after every other check)."""
    a = valid()
    a[name] = _noncontig(a[name]) if a[name].dim() > 1 else \
        torch.stack([a[name], a[name]], 1)[:, 0]
    assert not a[name].is_contiguous()
    _raises(ValueError, CUDA_RULE, ENTRY_POINTS[entry], a)
    dq = _op(a, "meta")[0]
    assert dq.shape == (4, 4, 12)
    ref = _api("reference", a)
    want = _api("reference", valid())
    assert all(torch.equal(x, y) for x, y in zip(ref, want))


def test_kernel_layout_copies_once_and_logs(caplog):
    """The kernels read contiguous, 16-byte aligned tensors: kernel_layout
    returns such a tensor as it is and copies any other once, logging the
    copy at DEBUG with its size."""
    t = torch.randn(6, 4, 8)
    assert kernel_layout("q", t) is t
    caplog.set_level(logging.DEBUG, logger="smla")
    strided = t.transpose(0, 1).contiguous().transpose(0, 1)
    copy = kernel_layout("do", strided)
    assert copy.is_contiguous() and torch.equal(copy, strided)
    assert any("argument 'do' has strides (8, 48, 1) for shape (6, 4, 8): the kernels read a "
               "contiguous copy (768 bytes)" in r.getMessage() for r in caplog.records)
    shifted = torch.empty(t.numel() + 1)[1:].view(t.shape)
    shifted.copy_(t)
    copy = kernel_layout("kv", shifted)
    assert copy.data_ptr() % 16 == 0 and torch.equal(copy, t)
    assert any("argument 'kv' has storage offset 1 (not 16-byte aligned)" in r.getMessage()
               for r in caplog.records)
    assert kernel_layout("delta", None) is None
