"""smla.check_lse (the lse base of a sample of rows) and checked mode's use
of it, on CPU."""

import math
import re

import pytest
import torch

import smla
import smla.checked as checked
from cases import make_inputs
from smla.reference import reference_backend


@pytest.fixture(autouse=True)
def fresh_state():
    smla.reset_stats()
    smla.configure(check_lse=None, check_agreement=None)


def forward_case(base, T=6, H=4, S=40, K=12, D=16, Dt=8, seed=5, positions=False):
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(T, H, D + Dt, generator=gen).bfloat16() * 3
    kv = torch.randn(S, 1, D + Dt, generator=gen).bfloat16()
    idx = torch.randint(0, S, (T, 1, K), generator=gen, dtype=torch.int32)
    idx[0] = -1  # a dead token: not sampled
    pos = torch.arange(T, dtype=torch.int32) + S // 2 if positions else None
    o, lse = smla.sparse_mla_fwd_reference(q, kv, idx, 0.3, d_v=D, lse_base=base,
                                           q_positions=pos)
    do = torch.randn(T, H, D, generator=gen).bfloat16()
    return dict(q=q, kv=kv, o=o, do=do, indices=idx, lse=lse, q_positions=pos)


@pytest.mark.parametrize("base", [2, "e"])
@pytest.mark.parametrize("positions", [False, True])
def test_declared_base_passes(base, positions):
    c = forward_case(base, positions=positions)
    rep = smla.check_lse(c["q"], c["kv"], c["indices"], c["lse"], 0.3, base,
                         q_positions=c["q_positions"])
    assert rep.rows > 0 and rep.declared == rep.rows and rep.other == 0
    assert rep.max_error < 1e-4


@pytest.mark.parametrize("given,declared,named", [
    ("e", 2, "argument 'lse_base' is 2 (log2-sum-exp2), but the lse matches lse_base='e' "
     "(a natural-log lse, as FlashMLA writes)"),
    (2, "e", "argument 'lse_base' is 'e' (natural log), but the lse matches lse_base=2 "
     "(a base-2 lse, as TileLang writes)"),
])
def test_other_base_raises_naming_lse_base(given, declared, named):
    c = forward_case(given)
    with pytest.raises(smla.LseBaseMismatchError, match=re.escape("smla.check_lse: " + named)):
        smla.check_lse(c["q"], c["kv"], c["indices"], c["lse"], 0.3, declared)


def test_checked_mode_catches_flashmla_lse_given_as_base2():
    """Slime's SGLangSparseMLA: FlashMLA's natural-log lse into a base-2
    backward. The backward itself would return finite, wrong gradients."""
    c = forward_case("e")
    args = [c[k] for k in ("q", "kv", "o", "do", "indices", "lse")]
    dq, _ = smla.sparse_mla_bwd(*args, sm_scale=0.3, lse_base=2, mode="reference")
    assert torch.isfinite(dq.float()).all()  # nothing else would notice
    kw = dict(sm_scale=0.3, lse_base=2, dq_dtype=torch.bfloat16, dkv_dtype=torch.bfloat16)
    with pytest.raises(smla.LseBaseMismatchError, match=re.escape(
            "smla checked mode: argument 'lse_base' is 2 (log2-sum-exp2), but the lse matches "
            "lse_base='e'")):
        checked.checked_sparse_mla_bwd(*args, **kw, backend=reference_backend)
    assert smla.stats()["lse_other_base"] == 1
    smla.configure(check_lse=0)  # off: the call goes through
    checked.checked_sparse_mla_bwd(*args, **kw, backend=reference_backend)


def test_stale_lse_is_logged_not_raised(caplog):
    c = forward_case(2)
    c["lse"] = c["lse"] + 7.0
    args = [c[k] for k in ("q", "kv", "o", "do", "indices", "lse")]
    kw = dict(sm_scale=0.3, lse_base=2, dq_dtype=torch.float32, dkv_dtype=torch.float32)
    with caplog.at_level("WARNING", logger="smla"):
        checked.checked_sparse_mla_bwd(*args, **kw, backend=reference_backend)
    assert any("the lse matches neither base" in r.getMessage() for r in caplog.records)
    assert smla.stats()["lse_neither"] == 1


def test_rows_that_cannot_tell_the_bases_apart_decide_nothing():
    c = forward_case(2)
    lse = torch.full_like(c["lse"], math.inf)  # every row dead
    rep = smla.check_lse(c["q"], c["kv"], c["indices"], lse, 0.3, 2)
    assert rep == (0, 0, 0, 0.0)
