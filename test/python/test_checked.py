"""Checked mode's repair path, on CPU: the reference stands in for the compiled
backend and smla.checked._inject_corruption plants NaN/Inf in its outputs."""

import logging
import re

import pytest
import torch

import smla
import smla.checked as checked
from cases import make_inputs
from smla import load_call
from smla.checks import NonFiniteInputError
from smla.reference import reference_backend


@pytest.fixture
def case():
    c = make_inputs(T=8, H=4, G=2, S=16, K=6, D=16, Dt=8, seed=21, dtype=torch.bfloat16)
    kw = dict(sm_scale=c["scale"], lse_base=2, q_positions=None, delta=None,
              dq_dtype=torch.float32, dkv_dtype=torch.float32)
    tensors = [c[k] for k in ("q", "kv", "o", "do", "indices", "lse")]
    clean = reference_backend(*tensors, **kw)
    return tensors, kw, clean


@pytest.fixture(autouse=True)
def fresh_state(monkeypatch):
    """Fresh totals, a fresh rate limit and the default spot checks (the
    settings come back after each test: conftest.py)."""
    smla.reset_stats()
    monkeypatch.setattr(checked, "repair_log", checked.stats.RateLimitedLog(checked.stats.logger))
    smla.configure(check_lse=None, check_agreement=None)


def repairs(caplog):
    return [r for r in caplog.records if r.name == "smla" and "recomputed" in r.getMessage()]


@pytest.fixture
def inject(monkeypatch):
    calls = []

    def set_hook(fn):
        def hook(dq, dkv, call):
            calls.append(call)
            return fn(dq.clone(), dkv.clone(), call)
        monkeypatch.setattr(checked, "_inject_corruption", hook)
        return calls

    return set_hook


def close(a, b):
    torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


def test_clean_run_passes_through(case, inject, caplog):
    tensors, kw, clean = case
    calls = inject(lambda dq, dkv, call: (dq, dkv))
    with caplog.at_level(logging.DEBUG, logger="smla"):
        dq, dkv, cnt, _ = checked.checked_sparse_mla_bwd(*tensors, **kw, backend=reference_backend)
    assert not [r for r in caplog.records if r.name == "smla"]
    assert calls == [0]  # no re-run
    assert torch.equal(dq, clean[0]) and torch.equal(dkv, clean[1])
    assert cnt == dict(clean[2], repaired_tokens=0)


def test_nan_dq_rows_are_recomputed(case, inject, caplog):
    tensors, kw, clean = case

    def corrupt(dq, dkv, call):
        if call == 0:
            dq[1, 2, 3] = float("nan")
            dq[5] = float("inf")
        return dq, dkv

    calls = inject(corrupt)
    with caplog.at_level(logging.WARNING, logger="smla"):
        dq, dkv, cnt, _ = checked.checked_sparse_mla_bwd(*tensors, **kw, backend=reference_backend)
    assert [r.levelno for r in repairs(caplog)] == [logging.WARNING]
    assert re.search(re.escape(
        "returned 97 non-finite dq values in 2 query tokens and 0 non-finite dkv values "
        "in 0 kv rows (kernel counter nonfinite_rows=0); recomputed 2 of 8 tokens with the "
        "reference. So far in this process: 1 repaired calls, 2 tokens recomputed"),
        repairs(caplog)[0].getMessage())
    assert calls == [0, 1]
    assert cnt["repaired_tokens"] == 2
    close(dq, clean[0])
    close(dkv, clean[1])
    # Untouched rows are the backend's own values, bit for bit.
    keep = [0, 2, 3, 4, 6, 7]
    assert torch.equal(dq[keep], clean[0][keep])


def test_nan_dkv_rows_repair_the_tokens_that_touch_them(case, inject):
    tensors, kw, clean = case
    indices = tensors[4]
    row = int(indices[indices >= 0][0])

    def corrupt(dq, dkv, call):
        if call == 0:
            dkv[row, :, 0] = float("nan")
        return dq, dkv

    inject(corrupt)
    dq, dkv, cnt, _ = checked.checked_sparse_mla_bwd(*tensors, **kw, backend=reference_backend)
    touching = int(((indices.long() == row).flatten(1).any(1)).sum())
    assert cnt["repaired_tokens"] == touching > 0
    close(dq, clean[0])
    close(dkv, clean[1])


def test_reference_cost_is_proportional_to_bad_rows(case, inject, monkeypatch):
    tensors, kw, clean = case
    seen = []
    real = checked.sparse_mla_bwd_reference

    def spy(q, *a, **k):
        seen.append(q.shape[0])
        return real(q, *a, **k)

    monkeypatch.setattr(checked, "sparse_mla_bwd_reference", spy)

    def corrupt(dq, dkv, call):
        if call == 0:
            dq[6, 0, 0] = float("nan")
        return dq, dkv

    inject(corrupt)
    dq, dkv, _, _ = checked.checked_sparse_mla_bwd(*tensors, **kw, backend=reference_backend)
    assert seen == [1]  # one reference call over the single bad token
    close(dq, clean[0])
    close(dkv, clean[1])


def test_persistent_corruption_falls_back_to_full_reference(case, inject, caplog):
    tensors, kw, clean = case

    def corrupt(dq, dkv, call):
        dq[0, 0, 0] = float("nan")
        dkv[3, 0, 1] = float("nan")  # also on the masked re-run
        return dq, dkv

    inject(corrupt)
    with caplog.at_level(logging.WARNING, logger="smla"):
        dq, dkv, _, _ = checked.checked_sparse_mla_bwd(*tensors, **kw, backend=reference_backend)
    assert "dkv is the full reference" in repairs(caplog)[0].getMessage()
    close(dq, clean[0])
    close(dkv, clean[1])


def test_bf16_outputs_are_repaired_too(case, inject):
    tensors, kw, clean = case
    kw = dict(kw, dq_dtype=torch.bfloat16, dkv_dtype=torch.bfloat16)

    def corrupt(dq, dkv, call):
        if call == 0:
            dq[2] = float("nan")
        return dq, dkv

    inject(corrupt)
    dq, dkv, _, _ = checked.checked_sparse_mla_bwd(*tensors, **kw, backend=reference_backend)
    assert dq.dtype == torch.bfloat16 and dkv.dtype == torch.bfloat16
    torch.testing.assert_close(dq.float(), clean[0], rtol=1e-2, atol=1e-2)
    torch.testing.assert_close(dkv.float(), clean[1], rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("name,index", [("q", (2, 1, 5)), ("kv", (3, 0, 0)), ("do", (7, 3, 15))])
def test_non_finite_inputs_are_named(case, name, index):
    tensors, kw, _ = case
    pos = {"q": 0, "kv": 1, "do": 3}[name]
    bad = tensors[pos].clone()
    bad[index] = float("nan")
    tensors = list(tensors)
    tensors[pos] = bad
    with pytest.raises(NonFiniteInputError, match=re.escape(
            f"{name} is not finite: first bad element at index {index} = nan")):
        checked.checked_sparse_mla_bwd(*tensors, **kw, backend=reference_backend)


def test_non_finite_lse_is_not_an_input_error(case):
    tensors, kw, clean = case
    tensors = list(tensors)
    lse = tensors[5].clone()
    lse[0, 0] = float("inf")
    tensors[5] = lse
    dq, dkv, cnt, _ = checked.checked_sparse_mla_bwd(*tensors, **kw, backend=reference_backend)
    assert torch.isfinite(dq).all() and (dq[0, 0] == 0).all()
    assert cnt["dead_rows"] >= 1


def test_repair_dumps_the_call_when_asked(case, inject, monkeypatch, tmp_path):
    tensors, kw, _ = case
    smla.configure(dump_dir=tmp_path)

    def corrupt(dq, dkv, call):
        if call == 0:
            dq[4] = float("nan")
        return dq, dkv

    inject(corrupt)
    checked.checked_sparse_mla_bwd(*tensors, **kw, backend=reference_backend)
    files = list(tmp_path.glob("smla_bwd_*.pt"))
    assert len(files) == 1
    rec = load_call(files[0])
    assert int(torch.isnan(rec["observed_dq"]).sum()) == rec["observed_dq"][4].numel()
    assert torch.equal(rec["q"], tensors[0])


def _corrupt_first_run(dq, dkv, call):
    if call == 0:
        dq[3] = float("nan")
    return dq, dkv


def test_every_repair_is_logged_with_running_totals(case, inject, caplog):
    tensors, kw, _ = case
    inject(_corrupt_first_run)
    with caplog.at_level(logging.WARNING, logger="smla"):
        for _ in range(3):
            checked.checked_sparse_mla_bwd(*tensors, **kw, backend=reference_backend)
    msgs = [r.getMessage() for r in repairs(caplog)]
    assert len(msgs) == 3  # warnings.warn would have shown one
    for n, msg in enumerate(msgs, 1):
        assert msg.endswith(f"So far in this process: {n} repaired calls, {n} tokens recomputed")
    assert smla.stats()["repaired_calls"] == 3 and smla.stats()["repaired_tokens"] == 3


def test_repair_log_is_rate_limited_and_reports_what_it_held_back(case, inject, caplog,
                                                                   monkeypatch):
    tensors, kw, _ = case
    now = [0.0]
    monkeypatch.setattr(checked, "repair_log", checked.stats.RateLimitedLog(
        checked.stats.logger, burst=2, interval=60.0, clock=lambda: now[0]))
    inject(_corrupt_first_run)
    with caplog.at_level(logging.WARNING, logger="smla"):
        for _ in range(5):
            checked.checked_sparse_mla_bwd(*tensors, **kw, backend=reference_backend)
        assert len(repairs(caplog)) == 2  # the burst; three held back
        now[0] = 61.0
        checked.checked_sparse_mla_bwd(*tensors, **kw, backend=reference_backend)
    msgs = [r.getMessage() for r in repairs(caplog)]
    assert len(msgs) == 3
    assert "So far in this process: 6 repaired calls" in msgs[-1]
    assert msgs[-1].endswith("(3 similar events not logged since the previous message)")
    assert smla.stats()["repaired_calls"] == 6  # counted even when not logged


def test_stats_count_calls_and_counters(case):
    tensors, kw, clean = case
    q, kv, o, do, indices, lse = tensors
    smla.sparse_mla_bwd(q, kv, o, do, indices, lse, sm_scale=kw["sm_scale"], mode="reference")
    smla.sparse_mla_bwd(q, kv, o, do, indices, lse, sm_scale=kw["sm_scale"], mode="reference",
                        diagnostics=True)
    st = smla.stats()
    assert st["calls_reference"] == 2
    # Only the call that read its counters adds them.
    assert st["invalid_slots"] == clean[2]["invalid_slots"] > 0
    assert st["nonfinite_rows"] == 0
    before = smla.reset_stats()
    assert before == st and smla.stats()["calls_reference"] == 0


def test_kernel_counter_missing_rows_is_logged_as_a_kernel_bug(case, inject, caplog):
    tensors, kw, _ = case
    inject(_corrupt_first_run)  # the reference counted nothing: injected after it
    with caplog.at_level(logging.WARNING, logger="smla"):
        checked.checked_sparse_mla_bwd(*tensors, **kw, backend=reference_backend)
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1 and "nonfinite_rows counter says 0: its guard missed rows" in \
        errors[0].getMessage()
    assert smla.stats()["uncounted_rows"] == 4  # dq[3]: H = 4 rows


@pytest.mark.parametrize("output", ["dq", "dkv"])
def test_agreement_check_catches_finite_but_wrong_outputs(case, inject, output):
    tensors, kw, _ = case
    smla.configure(check_agreement=2)

    def scale(dq, dkv, call):
        return (dq * 1000, dkv) if output == "dq" else (dq, dkv * 1000)

    inject(scale)
    with pytest.raises(smla.OutputMismatchError, match=re.escape(f"smla checked mode: {output} ")
                       + ".* differ.* from the reference by a relative error of 999"):
        checked.checked_sparse_mla_bwd(*tensors, **kw, backend=reference_backend)
    assert smla.stats()["agreement_failures"] == 1


def test_agreement_check_passes_correct_outputs_and_is_off_by_default(case, inject,
                                                                      monkeypatch):
    tensors, kw, _ = case
    inject(lambda dq, dkv, call: (dq * 1000, dkv))
    checked.checked_sparse_mla_bwd(*tensors, **kw, backend=reference_backend)  # off: passes
    inject(lambda dq, dkv, call: (dq, dkv))
    monkeypatch.setenv("SMLA_CHECK_AGREEMENT", "3")
    smla.reload_config()
    for _ in range(3):
        checked.checked_sparse_mla_bwd(*tensors, **kw, backend=reference_backend)
    assert smla.stats()["agreement_checks"] == 3
    with pytest.raises(ValueError, match=re.escape(
            "smla.configure: argument 'check_agreement' must be an integer in [0, 2147483647], "
            "got -1")):
        smla.configure(check_agreement=-1)


# ---- extreme magnitudes (docs/validation.md) --------------------------------

def test_overflowing_inputs_are_counted_never_silent():
    """Finite bf16 inputs near 1e20 overflow fp32: the reference, the kernels'
    definition, reports every such row in nonfinite_rows."""
    c = make_inputs(T=8, H=4, G=1, S=16, K=6, D=16, Dt=8, seed=1, dtype=torch.bfloat16)
    kv = (c["kv"].float() * 1e20).bfloat16()
    assert torch.isfinite(kv.float()).all()
    dq, dkv, cnt, _ = reference_backend(c["q"], kv, c["o"], c["do"], c["indices"], c["lse"],
                                        sm_scale=c["scale"], lse_base=2,
                                        dq_dtype=torch.bfloat16, dkv_dtype=torch.bfloat16)
    bad = int((~torch.isfinite(dq.float())).any(-1).sum() +
              (~torch.isfinite(dkv.float())).any(-1).sum())
    assert bad > 0 and cnt["nonfinite_rows"] == bad


def test_checked_mode_raises_when_the_gradient_cannot_be_finite():
    c = make_inputs(T=8, H=4, G=1, S=16, K=6, D=16, Dt=8, seed=1, dtype=torch.bfloat16)
    kv = (c["kv"].float() * 1e20).bfloat16()
    with pytest.raises(smla.NonFiniteOutputError, match="the gradient is not finite in the "
                       "output dtypes even when recomputed in float64"):
        checked.checked_sparse_mla_bwd(
            c["q"], kv, c["o"], c["do"], c["indices"], c["lse"], sm_scale=c["scale"],
            lse_base=2, dq_dtype=torch.bfloat16, dkv_dtype=torch.bfloat16,
            backend=reference_backend)


def test_checked_mode_repairs_in_float64_when_only_fp32_overflows(caplog):
    """Identical value rows of magnitude 3e38: dP and Delta = sum(o*do)
    overflow fp32 (NaN), yet dP - Delta is exactly 0, so the gradient is
    finite; the float64 repair returns it."""
    T, H, S, K, D, Dt = 4, 2, 8, 4, 16, 8
    gen = torch.Generator().manual_seed(3)
    kv = torch.randn(S, 1, D + Dt, generator=gen)
    kv[..., :D] = 3e38
    kv = kv.bfloat16()
    q = torch.randn(T, H, D + Dt, generator=gen)
    q[..., :D] = 0  # scores come from the finite tail alone
    q = q.bfloat16()
    do = torch.ones(T, H, D).bfloat16()
    o = kv[0, 0, :D].expand(T, H, D).contiguous()  # softmax average of equal rows
    idx = torch.randint(0, S, (T, 1, K), generator=gen, dtype=torch.int32)
    _, lse = smla.sparse_mla_fwd_reference(q, kv, idx, 0.2, d_v=D)
    args = (q, kv, o, do, idx, lse)
    kw = dict(sm_scale=0.2, lse_base=2, dq_dtype=torch.float32, dkv_dtype=torch.float32)
    _, _, cnt, _ = reference_backend(*args, **kw)
    assert cnt["nonfinite_rows"] > 0  # fp32 overflows
    with caplog.at_level(logging.WARNING, logger="smla"):
        dq, dkv, _, _ = checked.checked_sparse_mla_bwd(*args, **kw, backend=reference_backend)
    assert torch.isfinite(dq).all() and torch.isfinite(dkv).all()
    want_dq, want_dkv = smla.sparse_mla_bwd_reference(*args, 0.2, dtype=torch.float64,
                                                      dq_dtype=torch.float64,
                                                      dkv_dtype=torch.float64)
    torch.testing.assert_close(dq.double(), want_dq, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(dkv.double(), want_dkv, rtol=1e-6, atol=1e-6)
    assert "in float64 (the fp32 reference overflowed too)" in repairs(caplog)[0].getMessage()


def test_dump_directory_cap_holds_in_checked_mode(case, inject, monkeypatch, tmp_path,
                                                  caplog):
    tensors, kw, _ = case
    smla.configure(dump_dir=tmp_path, dump_max_files=2)
    inject(_corrupt_first_run)
    with caplog.at_level(logging.WARNING, logger="smla"):
        for _ in range(3):
            checked.checked_sparse_mla_bwd(*tensors, **kw, backend=reference_backend)
    assert len(list(tmp_path.glob("smla_bwd_*.pt"))) == 2
    assert smla.stats()["dumps_written"] == 2 and smla.stats()["dumps_skipped"] == 1
    assert "is at its cap" in repairs(caplog)[-1].getMessage()
