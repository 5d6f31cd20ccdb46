"""Checked mode and its spot checks on calls with an attention sink and
per-token lengths, on CPU: the reference stands in for the compiled backend
(as in test_checked.py), and smla.checked._inject_corruption plants NaN."""

import math
import re

import pytest
import torch

import smla
import smla.checked as checked
from smla.reference import reference_backend, sparse_mla_bwd_reference


@pytest.fixture(autouse=True)
def fresh_state(monkeypatch):
    smla.reset_stats()
    monkeypatch.setattr(checked, "repair_log", checked.stats.RateLimitedLog(checked.stats.logger))
    smla.configure(check_lse=None, check_agreement=None)


def sink_case(base=2, T=8, H=4, S=40, K=12, D=16, Dt=0, seed=5):
    """bf16 inputs, the forward's sink-inclusive lse, a token without a
    valid key (lse = its sink) and lengths that cut rows short."""
    gen = torch.Generator().manual_seed(seed)
    q = (torch.randn(T, H, D + Dt, generator=gen) * 3).bfloat16()
    kv = torch.randn(S, 1, D + Dt, generator=gen).bfloat16()
    idx = torch.randint(0, S, (T, 1, K), generator=gen, dtype=torch.int32)
    idx[1] = -1
    lengths = torch.randint(1, K + 1, (T,), generator=gen, dtype=torch.int32)
    sink = torch.randn(H, generator=gen) + 2
    o, lse = smla.sparse_mla_fwd_reference(q, kv, idx, 0.3, d_v=D, lse_base=base,
                                           attn_sink=sink, topk_length=lengths)
    do = torch.randn(T, H, D, generator=gen).bfloat16()
    args = [q, kv, o, do, idx, lse]
    kw = dict(sm_scale=0.3, lse_base=base, q_positions=None, delta=None, attn_sink=sink,
              topk_length=lengths, dq_dtype=torch.float32, dkv_dtype=torch.float32)
    return args, kw


@pytest.mark.parametrize("base", [2, "e"])
def test_a_clean_call_returns_the_backends_gradients_and_d_sink(base):
    args, kw = sink_case(base)
    want = reference_backend(*args, **kw)
    dq, dkv, cnt, d_sink = checked.checked_sparse_mla_bwd(*args, **kw, backend=reference_backend)
    assert torch.equal(dq, want[0]) and torch.equal(dkv, want[1])
    assert torch.equal(d_sink, want[3]) and cnt == dict(want[2], repaired_tokens=0)
    assert smla.stats()["lse_checks"] == 1 and smla.stats()["lse_neither"] == 0


def test_repaired_rows_keep_their_lengths(monkeypatch):
    """NaN dq rows are recomputed by the reference over each token's own
    slots: equal to the clean result, the slots past the length unread."""
    args, kw = sink_case(seed=6)
    clean = reference_backend(*args, **kw)

    def corrupt(dq, dkv, call):
        if call == 0:
            dq[3] = math.nan
        return dq, dkv
    monkeypatch.setattr(checked, "_inject_corruption", corrupt)
    dq, dkv, cnt, d_sink = checked.checked_sparse_mla_bwd(*args, **kw, backend=reference_backend)
    assert cnt["repaired_tokens"] >= 1
    torch.testing.assert_close(dq, clean[0], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(dkv, clean[1], rtol=1e-5, atol=1e-5)
    assert torch.equal(d_sink, clean[3])


def test_a_non_finite_d_sink_is_recomputed_in_float64():
    args, kw = sink_case(seed=7)
    clean = reference_backend(*args, **kw)

    def nan_sink_backend(*a, **k):
        dq, dkv, cnt, d_sink = reference_backend(*a, **k)
        return dq, dkv, cnt, torch.full_like(d_sink, math.nan)
    dq, dkv, _, d_sink = checked.checked_sparse_mla_bwd(*args, **kw, backend=nan_sink_backend)
    torch.testing.assert_close(d_sink, clean[3], rtol=1e-4, atol=1e-4)


def test_the_lse_check_includes_the_sink():
    """The recomputed lse includes the sink: the sink-inclusive lse passes
    (its rows without keys too), the other base raises naming lse_base, and
    the keys-only lse given as the call's lse fails the rows where the sink
    weighs."""
    args, kw = sink_case(base=2, seed=8)
    q, kv, _, _, idx, lse = args
    rep = smla.check_lse(q, kv, idx, lse, 0.3, 2, attn_sink=kw["attn_sink"],
                         topk_length=kw["topk_length"], tokens=8)
    assert rep.rows > 0 and rep.declared == rep.rows and rep.max_error < 1e-4
    with pytest.raises(smla.LseBaseMismatchError, match=re.escape(
            "smla.check_lse: argument 'lse_base' is 'e' (natural log), but the lse matches "
            "lse_base=2")):
        smla.check_lse(q, kv, idx, lse, 0.3, "e", attn_sink=kw["attn_sink"],
                       topk_length=kw["topk_length"], tokens=8)
    _, lse_keys = smla.sparse_mla_fwd_reference(q, kv, idx, 0.3, d_v=16, lse_base=2,
                                                topk_length=kw["topk_length"])
    rep = smla.check_lse(q, kv, idx, lse_keys, 0.3, 2, attn_sink=kw["attn_sink"],
                         topk_length=kw["topk_length"], tokens=8)
    assert rep.rows > 0 and rep.declared < rep.rows and rep.max_error > 0.1


def test_agreement_check_reads_each_tokens_slots():
    args, kw = sink_case(seed=9)
    smla.configure(check_agreement=4)
    checked.checked_sparse_mla_bwd(*args, **kw, backend=reference_backend)
    assert smla.stats()["agreement_checks"] == 1

    def no_lengths_backend(*a, **k):  # reads past each length: wrong dq
        return reference_backend(*a, **dict(k, topk_length=None))
    with pytest.raises(smla.OutputMismatchError, match="dq of tokens"):
        checked.checked_sparse_mla_bwd(*args, **kw, backend=no_lengths_backend)


def test_sparse_mla_bwd_checked_mode_returns_d_sink_after_dkv():
    """The public call: (dq, dkv, d_sink, counters) in checked mode, with the
    reference as the backend (a CPU run)."""
    args, kw = sink_case(seed=10)
    want = sparse_mla_bwd_reference(*args, 0.3, lse_base=2, attn_sink=kw["attn_sink"],
                                    topk_length=kw["topk_length"], diagnostics=True)
    got = smla.sparse_mla_bwd(*args, 0.3, attn_sink=kw["attn_sink"],
                              topk_length=kw["topk_length"], diagnostics=True,
                              mode="reference")
    assert len(got) == 4 and got[3] == want[3]
    for a, b in zip(got[:3], want[:3]):
        assert torch.equal(a, b)
