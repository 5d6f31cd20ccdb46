"""Checked mode's repair path, on CPU: the reference stands in for the compiled
backend and smla.checked._inject_corruption plants NaN/Inf in its outputs."""

import re

import pytest
import torch

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


def test_clean_run_passes_through(case, inject):
    tensors, kw, clean = case
    calls = inject(lambda dq, dkv, call: (dq, dkv))
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        dq, dkv, cnt = checked.checked_sparse_mla_bwd(*tensors, **kw, backend=reference_backend)
    assert calls == [0]  # no re-run
    assert torch.equal(dq, clean[0]) and torch.equal(dkv, clean[1])
    assert cnt == dict(clean[2], repaired_tokens=0)


def test_nan_dq_rows_are_recomputed(case, inject):
    tensors, kw, clean = case

    def corrupt(dq, dkv, call):
        if call == 0:
            dq[1, 2, 3] = float("nan")
            dq[5] = float("inf")
        return dq, dkv

    calls = inject(corrupt)
    with pytest.warns(checked.SmlaRepairWarning, match=re.escape(
            "returned 97 non-finite dq values in 2 query tokens and 0 non-finite dkv values "
            "in 0 kv rows; recomputed 2 of 8 tokens")) as rec:
        dq, dkv, cnt = checked.checked_sparse_mla_bwd(*tensors, **kw, backend=reference_backend)
    assert len(rec) == 1 and calls == [0, 1]
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
    with pytest.warns(checked.SmlaRepairWarning):
        dq, dkv, cnt = checked.checked_sparse_mla_bwd(*tensors, **kw, backend=reference_backend)
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
    with pytest.warns(checked.SmlaRepairWarning):
        dq, dkv, _ = checked.checked_sparse_mla_bwd(*tensors, **kw, backend=reference_backend)
    assert seen == [1]  # one reference call over the single bad token
    close(dq, clean[0])
    close(dkv, clean[1])


def test_persistent_corruption_falls_back_to_full_reference(case, inject):
    tensors, kw, clean = case

    def corrupt(dq, dkv, call):
        dq[0, 0, 0] = float("nan")
        dkv[3, 0, 1] = float("nan")  # also on the masked re-run
        return dq, dkv

    inject(corrupt)
    with pytest.warns(checked.SmlaRepairWarning, match="dkv is the full reference"):
        dq, dkv, _ = checked.checked_sparse_mla_bwd(*tensors, **kw, backend=reference_backend)
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
    with pytest.warns(checked.SmlaRepairWarning):
        dq, dkv, _ = checked.checked_sparse_mla_bwd(*tensors, **kw, backend=reference_backend)
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
    dq, dkv, cnt = checked.checked_sparse_mla_bwd(*tensors, **kw, backend=reference_backend)
    assert torch.isfinite(dq).all() and (dq[0, 0] == 0).all()
    assert cnt["dead_rows"] >= 1


def test_repair_dumps_the_call_when_asked(case, inject, monkeypatch, tmp_path):
    tensors, kw, _ = case
    monkeypatch.setenv("SMLA_DUMP_DIR", str(tmp_path))

    def corrupt(dq, dkv, call):
        if call == 0:
            dq[4] = float("nan")
        return dq, dkv

    inject(corrupt)
    with pytest.warns(checked.SmlaRepairWarning):
        checked.checked_sparse_mla_bwd(*tensors, **kw, backend=reference_backend)
    files = list(tmp_path.glob("smla_bwd_*.pt"))
    assert len(files) == 1
    rec = load_call(files[0])
    assert int(torch.isnan(rec["observed_dq"]).sum()) == rec["observed_dq"][4].numel()
    assert torch.equal(rec["q"], tensors[0])
