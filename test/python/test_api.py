"""smla.sparse_mla_bwd: argument validation (every message checked by text;
test_validation.py runs each through every entry point), mode selection,
layouts and defaults."""

import re
import warnings

import pytest
import torch

import smla
from smla import _compiled
from smla.checks import NonFiniteInputError, check_finite, validate_bwd_args
from smla.reference import sparse_mla_bwd_reference

T, H, G, S, K, D, DT = 5, 4, 1, 13, 6, 8, 4
PRE = "smla.sparse_mla_bwd: "


def args(dtype=torch.bfloat16, **over):
    gen = torch.Generator().manual_seed(0)
    a = dict(
        q=torch.randn(T, H, D + DT, generator=gen).to(dtype),
        kv=torch.randn(S, G, D + DT, generator=gen).to(dtype),
        o=torch.randn(T, H, D, generator=gen).to(dtype),
        do=torch.randn(T, H, D, generator=gen).to(dtype),
        indices=torch.randint(-1, S, (T, G, K), generator=gen).to(torch.int32),
        lse=torch.randn(T, H, generator=gen) + 3.0,
    )
    a.update(over)
    return a


def call(mode="reference", **over):
    kw = {k: over.pop(k) for k in list(over) if k not in args()}
    return smla.sparse_mla_bwd(**args(**over), mode=mode, **kw)


def raises(exc, msg, **over):
    with pytest.raises(exc, match="^" + re.escape(msg)):
        call(**over)


# ---- messages ----------------------------------------------------------------

def test_indices_dtype():
    raises(TypeError, PRE + "argument 'indices' must have dtype torch.int32, got torch.int64",
           indices=torch.zeros(T, G, K, dtype=torch.int64))


def test_not_a_tensor():
    raises(TypeError, PRE + "argument 'q' must be a torch.Tensor, got list", q=[1.0, 2.0])


def test_rank():
    raises(ValueError, PRE + "argument 'q' must have 3 dimensions [T, H, D+Dt], got 2 "
           "(shape (5, 4))", q=torch.zeros(T, H, dtype=torch.bfloat16))
    raises(ValueError, PRE + "argument 'lse' must have 2 dimensions [T, H], got 1 (shape (5,))",
           lse=torch.zeros(T))


def test_compiled_mode_needs_bf16():
    raises(TypeError, PRE + "argument 'q' must have dtype torch.bfloat16, got torch.float32",
           mode="compiled", q=torch.zeros(T, H, D + DT))


def test_reference_mode_needs_matching_dtypes():
    raises(TypeError, PRE + "argument 'kv' must have the dtype of 'q' (torch.bfloat16), got "
           "torch.float32", kv=torch.zeros(S, G, D + DT))
    raises(TypeError, PRE + "argument 'q' must have dtype torch.bfloat16 or torch.float16 or "
           "torch.float32 or torch.float64, got torch.int32",
           q=torch.zeros(T, H, D + DT, dtype=torch.int32))


def test_lse_dtype():
    raises(TypeError, PRE + "argument 'lse' must have dtype torch.float32 or torch.float64, "
           "got torch.float16", lse=torch.zeros(T, H, dtype=torch.float16))
    raises(TypeError, PRE + "argument 'lse' must have dtype torch.float32, got torch.float64",
           mode="compiled", lse=torch.zeros(T, H, dtype=torch.float64))


CUDA_RULE = ("argument 'q' must be a CUDA tensor (the compiled kernels run on CUDA devices; "
             "mode='reference' runs on any), got device cpu")


@pytest.mark.parametrize("mode", ["compiled", "checked"])
def test_compiled_mode_needs_cuda(mode):
    raises(ValueError, PRE + CUDA_RULE, mode=mode)


def test_device_mismatch():
    raises(ValueError, PRE + "argument 'kv' must be on the device of 'q' (cpu), got meta",
           kv=torch.zeros(S, G, D + DT, dtype=torch.bfloat16, device="meta"))


@pytest.mark.parametrize("mode", ["compiled", "checked"])
def test_non_contiguous_accepted_in_compiled_modes(mode):
    """Layout is no rule: a strided do passes every check (the one left on
    a CPU is the device's); the op copies it for the kernels."""
    do = torch.zeros(T, D, H, dtype=torch.bfloat16).transpose(1, 2)
    raises(ValueError, PRE + CUDA_RULE, mode=mode, do=do)


def test_non_contiguous_accepted_in_reference_mode():
    a = args()
    do_t = a["do"].transpose(1, 2).contiguous().transpose(1, 2)
    dq1, dkv1 = smla.sparse_mla_bwd(**dict(a, do=do_t), mode="reference")
    dq2, dkv2 = smla.sparse_mla_bwd(**a, mode="reference")
    assert torch.equal(dq1, dq2) and torch.equal(dkv1, dkv2)


def test_sizes():
    raises(ValueError, PRE + "argument 'kv' must have last dimension D+Dt = 12 (q.shape[2]), "
           "got 10", kv=torch.zeros(S, G, 10, dtype=torch.bfloat16))
    raises(ValueError, PRE + "argument 'kv' must have S_kv = kv.shape[0] >= 1, got 0",
           kv=torch.zeros(0, G, D + DT, dtype=torch.bfloat16))
    raises(ValueError, PRE + "argument 'o' must have shape [T, H, D] with T=5, H=4 (from 'q'), "
           "got (4, 4, 8)", o=torch.zeros(4, H, D, dtype=torch.bfloat16))
    raises(ValueError, PRE + "argument 'o' must have last dimension D between 1 and D+Dt=12, "
           "got 13", o=torch.zeros(T, H, 13, dtype=torch.bfloat16))
    raises(ValueError, PRE + "argument 'do' must have shape (5, 4, 8) (the shape of 'o'), got "
           "(5, 4, 7)", do=torch.zeros(T, H, 7, dtype=torch.bfloat16))
    raises(ValueError, PRE + "argument 'indices' must have shape [T, G, K] with T=5 (from 'q') "
           "and G=1 (from 'kv'), got (5, 2, 6)", indices=torch.zeros(T, 2, K, dtype=torch.int32))
    raises(ValueError, PRE + "argument 'indices' must have topk = indices.shape[2] >= 1, got 0",
           indices=torch.zeros(T, G, 0, dtype=torch.int32))
    raises(ValueError, PRE + "argument 'lse' must have shape (5, 4) [T, H], got (5, 3)",
           lse=torch.zeros(T, 3))


def test_heads_not_multiple_of_groups():
    raises(ValueError, PRE + "argument 'q' has H=5 heads (q.shape[1]), which must be a multiple "
           "of the number of kv groups G=2 (kv.shape[1])",
           q=torch.zeros(T, 5, D + DT, dtype=torch.bfloat16),
           kv=torch.zeros(S, 2, D + DT, dtype=torch.bfloat16),
           o=torch.zeros(T, 5, D, dtype=torch.bfloat16), do=torch.zeros(T, 5, D, dtype=torch.bfloat16),
           indices=torch.zeros(T, 2, K, dtype=torch.int32), lse=torch.zeros(T, 5))


def test_optional_tensors():
    raises(TypeError, PRE + "argument 'q_positions' must have dtype torch.int32, got torch.int64",
           q_positions=torch.arange(T))
    raises(ValueError, PRE + "argument 'q_positions' must have shape (5,) [T], got (4,)",
           q_positions=torch.arange(4, dtype=torch.int32))
    raises(ValueError, PRE + "argument 'delta' must have shape (5, 4) [T, H], got (4, 5)",
           delta=torch.zeros(4, 5))


SM_SCALE_RULE = ("argument 'sm_scale' must be a finite positive number that is normal in "
                 "float32 (the kernels' type) and keeps sm_scale * log2(e) finite in float32 "
                 "(1.17549e-38 <= sm_scale <= 2.35866e+38), got ")


@pytest.mark.parametrize("value", [-1.0, float("nan"), float("inf"), 0.0,
                                   # accepted as doubles, but inf or 0 as the kernels' float
                                   1e39, 1e300, 1e-300, 1e-39,
                                   # finite in float32, but sm_scale * log2(e) is not
                                   2.36e38])
def test_sm_scale_checked_in_float32(value):
    raises(ValueError, PRE + SM_SCALE_RULE + repr(value), sm_scale=value)


@pytest.mark.parametrize("value", [1.2e-38, 2.3586574e38])
def test_sm_scale_at_the_float32_bounds_is_accepted(value):
    dq, dkv = call(sm_scale=value)
    assert dq.shape == args()["q"].shape


def test_scalars():
    raises(TypeError, PRE + "argument 'sm_scale' must be a float or None, got str", sm_scale="0.1")
    raises(ValueError, PRE + "argument 'lse_base' must be 2 or 'e', got 10", lse_base=10)
    raises(TypeError, PRE + "argument 'dq_dtype' must be None or one of torch.bfloat16, "
           "torch.float16, torch.float32, torch.float64, got torch.int32", dq_dtype=torch.int32)


def test_tilelang_positional_flags():
    raises(ValueError, PRE + "argument 'is_casual' must be True (as in TileLang; causality comes "
           "from indices and q_positions), got False", is_casual=False)
    raises(ValueError, PRE + "argument 'return_kernel' must be False (there is no kernel object "
           "to return), got True", return_kernel=True)


def test_unknown_mode():
    raises(ValueError, PRE + "argument 'mode' must be one of 'compiled', 'checked', 'reference', "
           "got 'fast'", mode="fast")


def test_unknown_env_mode(monkeypatch):
    """SMLA_MODE is read with the other settings (smla.reload_config), and
    a malformed value names the variable and changes nothing."""
    monkeypatch.setenv("SMLA_MODE", "turbo")
    with pytest.raises(ValueError, match="^" + re.escape(
            "smla: environment variable SMLA_MODE must be compiled, checked or reference, "
            "got 'turbo'")):
        smla.reload_config()
    assert smla.config.mode is None


def test_batched_shape_mismatch():
    a = args()
    b = {k: v.unsqueeze(0).expand(2, *v.shape).contiguous() for k, v in a.items()}
    b["lse"] = a["lse"]
    with pytest.raises(ValueError, match=re.escape(
            PRE + "argument 'lse' must have 3 dimensions with batch size B=2 first")):
        smla.sparse_mla_bwd(**b, mode="reference")


def test_finite_check_message():
    t = torch.zeros(4, 2, 3)
    t[3, 1, 2] = float("nan")
    t[3, 1, 1] = float("inf")
    with pytest.raises(NonFiniteInputError, match="^" + re.escape(
            PRE + "q is not finite: first bad element at index (3, 1, 1) = inf "
            "(2 non-finite elements in total)")):
        check_finite("q", t)
    t[3, 1, 1] = 0.0
    with pytest.raises(ValueError, match=re.escape("q is not finite: first bad element at "
                                                   "index (3, 1, 2) = nan (1 non-finite")):
        check_finite("q", t)
    check_finite("q", torch.ones(3))  # finite: no error


def test_validate_returns_dims():
    d = validate_bwd_args(**args(), strict=False)
    assert d == (T, H, G, K, S, D, DT)


def test_missing_extension_message(monkeypatch):
    """An extension that cannot be loaded (here: its import fails) is a
    RuntimeError saying so, and is_available() is False with that reason."""
    def fail():
        raise ImportError("no module here")

    monkeypatch.setattr(_compiled, "_loaded", False)
    monkeypatch.setattr(_compiled, "_load_error", None)
    monkeypatch.setattr(_compiled, "_reasons", {})
    monkeypatch.setattr(_compiled._extension, "load", fail)
    with pytest.raises(RuntimeError, match="the compiled extension smla._C is unavailable: "
                       "no module here"):
        _compiled.load()
    assert not _compiled.is_available()
    assert "no module here" in _compiled.unavailable_reason()


# ---- behaviour -----------------------------------------------------------------

def test_default_mode_on_cpu_is_reference(monkeypatch):
    assert smla.resolve_mode(None, args()["q"]) == "reference"
    monkeypatch.setenv("SMLA_MODE", "checked")
    assert smla.resolve_mode(None, args()["q"]) == "reference"  # read once
    smla.reload_config()
    assert smla.resolve_mode(None, args()["q"]) == "checked"
    assert smla.resolve_mode("reference", args()["q"]) == "reference"


def test_default_mode_prefers_compiled_on_cuda(monkeypatch):
    """mode=None on a CUDA tensor: compiled when it can run there; else the
    reference, with one SmlaSlowPathWarning per process naming the reason."""
    from smla import _log

    monkeypatch.setattr(_compiled, "unavailable_reason", lambda device: None)
    q = torch.zeros(1)
    monkeypatch.setattr(torch.Tensor, "is_cuda", property(lambda self: True))
    assert smla.resolve_mode(None, q) == "compiled"
    monkeypatch.setattr(_compiled, "unavailable_reason",
                        lambda device: "the extension is not built")
    monkeypatch.setattr(_log, "_warned", set())
    with pytest.warns(smla.SmlaSlowPathWarning, match="reference backward .* unavailable: "
                      "the extension is not built"):
        assert smla.resolve_mode(None, q) == "reference"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert smla.resolve_mode(None, q) == "reference"  # once per process


def test_slime_call_and_defaults():
    a = args()
    # Slime: sparse_mla_bwd(q, kv, tl_out, grad_output, indices, tl_lse, sm_scale=scaling)
    dq, dkv = smla.sparse_mla_bwd(a["q"], a["kv"], a["o"], a["do"], a["indices"], a["lse"],
                                  sm_scale=None, mode="reference")
    assert dq.dtype == torch.bfloat16 and dkv.dtype == torch.bfloat16
    assert dq.shape == a["q"].shape and dkv.shape == a["kv"].shape
    rq, rkv = sparse_mla_bwd_reference(*a.values(), (D + DT) ** -0.5)
    assert torch.equal(dq, rq) and torch.equal(dkv, rkv)


def test_output_dtypes_and_diagnostics():
    dq, dkv, cnt = call(dq_dtype=torch.float32, dkv_dtype=torch.float32, diagnostics=True)
    assert dq.dtype == torch.float32 and dkv.dtype == torch.float32
    assert set(cnt) == {"invalid_slots", "dead_rows", "clamped", "nonfinite_rows"}
    assert all(isinstance(v, int) for v in cnt.values())
    assert cnt["invalid_slots"] == int((args()["indices"] < 0).sum())


def test_configured_mode_is_used():
    smla.configure(mode="reference")
    assert smla.config.mode == "reference"
    dq, dkv = call(mode=None)
    assert torch.isfinite(dq.float()).all()


def test_batched_layout_matches_unbatched():
    a1, a2 = args(), {k: v.flip(0) if k != "kv" else v for k, v in args().items()}
    b = {k: torch.stack([a1[k], a2[k]]) for k in a1}
    dq, dkv, cnt = smla.sparse_mla_bwd(**b, mode="reference", diagnostics=True)
    for i, a in enumerate((a1, a2)):
        rq, rkv = smla.sparse_mla_bwd(**a, mode="reference")
        assert torch.equal(dq[i], rq) and torch.equal(dkv[i], rkv)
    assert cnt["invalid_slots"] == int((b["indices"] < 0).sum())


def test_dynamo_traces_the_api_without_graph_breaks():
    # Validation and dispatch must be traceable so torch.compile can inline
    # the op (the GPU test compiles the real kernel; backend="eager" keeps
    # this CPU check free of code generation).
    a = args()
    fn = torch.compile(lambda *t: smla.sparse_mla_bwd(*t, sm_scale=0.3, mode="reference"),
                       fullgraph=True, backend="eager")
    got = fn(*a.values())
    want = smla.sparse_mla_bwd(*a.values(), sm_scale=0.3, mode="reference")
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])


def test_delta_is_taken_by_every_mode():
    """A caller's delta (SparseMLA's folded lse gradient) is an argument of
    every mode: the kernels' modes check it like the rest (on a CPU the
    call then stops at the device rule, with no fallback to the
    reference), and the reference uses it in place of rowsum(o * do)."""
    a = args()
    delta = torch.randn(T, H)
    for mode in ("compiled", "checked"):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            raises(ValueError, PRE + CUDA_RULE, mode=mode, delta=delta)
    dq, dkv = smla.sparse_mla_bwd(**a, delta=delta, mode="reference")
    rq, rkv = sparse_mla_bwd_reference(*a.values(), delta=delta)
    assert torch.equal(dq, rq) and torch.equal(dkv, rkv)
    plain = smla.sparse_mla_bwd(**a, mode="reference")
    assert not torch.equal(plain[0], dq)
