"""GPU tests of per-token lengths (topk_length) and the sink's Delta on
every path of the op: kernels without a topk_length parameter (a copy of
the indices with the slots past each length set to -1, the counter taking
them off), token pairs over such a copy, the sorted walk (on such a copy,
and with the lengths kept on a kernel that takes them), the error of
SMLA_PAIRS=on on a kernel that takes the lengths; smla::_delta with and
without the library's delta kernel; opcheck and torch.compile of calls with
a sink and lengths. All against the reference, counters included.

Skipped cleanly without CUDA or without the compiled backward.
"""

import json
import math

import pytest
import torch

import smla
from smla import _compiled
from smla.reference import sparse_mla_fwd_reference
from test_gpu import pair_problem
from test_gpu_configs import copy_library, needs_compiled, problem, rel_fro
from test_gpu_dsv4 import TOKENS, assert_matches, reference, v4_problem

OP = torch.ops.smla.sparse_mla_bwd


def with_lengths(p, *, sink=True, seed=0):
    """`p` (sparse_mla_bwd's arguments) with [T] lengths from 0 to K + 2
    (token 0 stops at K // 3) and, with `sink`, an fp32 sink per head; o
    and lse from the reference forward of both, token 3's rows dead (NaN)."""
    T, _, K = p["indices"].shape
    H = p["q"].shape[1]
    gen = torch.Generator().manual_seed(seed)
    n = torch.randint(0, K + 3, (T,), generator=gen)
    n[0] = K // 3
    p = dict(p, topk_length=n.to("cuda", torch.int32),
             attn_sink=(torch.randn(H, generator=gen) + 1).cuda() if sink else None)
    p["o"], p["lse"] = sparse_mla_fwd_reference(
        p["q"], p["kv"], p["indices"], None, d_v=p["o"].shape[-1], q_positions=p["q_positions"],
        lse_base=p["lse_base"], attn_sink=p["attn_sink"], topk_length=p["topk_length"])
    p["lse"][3, :] = math.nan
    return p


def check(p, dq_dtype=torch.bfloat16, dkv_dtype=torch.bfloat16):
    """The compiled call against the reference: dq, dkv, d_sink (with a
    sink) and the counters."""
    got = smla.sparse_mla_bwd(**p, dq_dtype=dq_dtype, dkv_dtype=dkv_dtype, diagnostics=True,
                              mode="compiled")
    want = reference(p)
    if p["attn_sink"] is None:
        assert rel_fro(got[0], want[0]) <= 1e-2 and rel_fro(got[1], want[1]) <= 1e-2
        assert got[2] == want[2]
        return
    assert_matches(got, want, dq_dtype, dkv_dtype)


@needs_compiled
@pytest.mark.parametrize("heads", [8, 16, 32])
@pytest.mark.parametrize("lse_base", [2, "e"])
@pytest.mark.parametrize("sink", [False, True])
def test_lengths_on_kernels_without_the_parameter(heads, lse_base, sink):
    """The GLM-5.2 kernels (H = 8, 16, 32 at D + Dt = 512 + 64) walk every
    slot: they run on the masked copy, and invalid_slots is the contract's
    (the slots past each length are not slots)."""
    smla.configure(pairs="off")
    p = with_lengths(problem({8: 24, 16: 24, 32: 12}[heads], heads, positions=True,
                             lse_base=lse_base), sink=sink)
    check(p)
    check(p, torch.float32, torch.float32)


@needs_compiled
@pytest.mark.parametrize("heads", [8, 16])
def test_lengths_and_a_sink_on_token_pairs(heads):
    """Token pairs over the masked copy, in one launch and in chunks; with a
    caller's delta, which both the pairs and d_sink read."""
    smla.configure(pairs="on")
    p = pair_problem(T=24, K=64, overlap=0.8)
    for k in ("q", "o", "do", "lse"):
        p[k] = p[k][:, :heads].contiguous()
    p = with_lengths(p, seed=1)
    check(p)
    smla.configure(pairs_chunk=5, pairs_rows="workspace")
    check(p)
    delta = (p["o"].float() * p["do"].float()).sum(-1) + 0.25
    got = smla.sparse_mla_bwd(**p, delta=delta, diagnostics=True, mode="compiled")
    assert_matches(got, reference(p, delta=delta))


@needs_compiled
@pytest.mark.parametrize("heads", [16, 64])
def test_lengths_on_the_sorted_walk(heads):
    """The sorted walk on a kernel without the lengths (H = 16: the masked
    copy, sorted) and on one that takes them (H = 64, D = 512, Dt = 0: the
    slots past each length sort last and the kernel keeps the lengths)."""
    smla.configure(walk="sorted", walk_chunk_tokens=5, walk_period=7, pairs="off")
    if heads == 16:
        p = with_lengths(problem(24, 16), seed=2)
    else:
        p = v4_problem(TOKENS[64], 64, seed=2)
    check(p)


@needs_compiled
def test_pairs_on_with_a_kernel_that_takes_the_lengths_says_why():
    smla.configure(pairs="on")
    p = v4_problem(TOKENS[64], 64, seed=3)
    with pytest.raises(RuntimeError, match="SMLA_PAIRS=on, but the call cannot run on token "
                       "pairs: its bwd kernel walks each token's topk_length"):
        smla.sparse_mla_bwd(**p, mode="compiled")


DELTA_CONFIGS = [(64, 0), (128, 0), (16, 64), (8, 64)]


@needs_compiled
@pytest.mark.parametrize("heads,dt", DELTA_CONFIGS)
def test_delta_op_is_the_rowsum(heads, dt):
    g = torch.Generator().manual_seed(4)
    o = torch.randn(40, heads, 512, generator=g).cuda().bfloat16()
    do = torch.randn(40, heads, 512, generator=g).cuda().bfloat16()
    want = (o.float() * do.float()).sum(-1)
    for positions, out in ((False, torch.bfloat16), (True, torch.float32)):
        got = torch.ops.smla._delta(o, do, dt, 1, positions, out, out)
        assert got.shape == (40, heads) and got.dtype == torch.float32
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-4)


@needs_compiled
def test_delta_without_a_delta_kernel_is_torchs(tmp_path):
    """A library without delta kernels: smla::_delta sums with ATen, and a
    call with a sink still matches the reference."""
    src = _compiled.load().kernel_directory()
    copy_library(src, tmp_path / "lib", json.loads(open(f"{src}/manifest.json").read())["target"])
    manifest = json.loads((tmp_path / "lib" / "manifest.json").read_text())
    manifest["kernels"] = [k for k in manifest["kernels"] if k["kind"] != "delta"]
    (tmp_path / "lib" / "manifest.json").write_text(json.dumps(manifest))
    smla.configure(kernel_dir=str(tmp_path / "lib"))
    p = v4_problem(TOKENS[64], 64, seed=5)
    got = torch.ops.smla._delta(p["o"], p["do"], 0, 1, False, torch.bfloat16, torch.bfloat16)
    torch.testing.assert_close(got, (p["o"].float() * p["do"].float()).sum(-1), rtol=1e-5,
                               atol=1e-4)
    check(p)


def op_args(p):
    return (p["q"], p["kv"], p["o"], p["do"], p["indices"], p["lse"], 512 ** -0.5,
            p["lse_base"] == "e", p["q_positions"], None, torch.bfloat16, torch.bfloat16,
            p["attn_sink"], p["topk_length"])


@needs_compiled
@pytest.mark.parametrize("heads", [16, 64])
def test_opcheck_with_a_sink_and_lengths(heads):
    smla.configure(pairs="off")
    p = with_lengths(problem(8, 16), seed=6) if heads == 16 else v4_problem(8, 64, seed=6)
    dq, dkv, counters, d_sink = OP(*op_args(p))
    assert d_sink.shape == (heads,) and counters.shape == (4,)
    torch.library.opcheck(OP.default, op_args(p), test_utils=("test_schema", "test_faketensor"))


@needs_compiled
def test_torch_compile_with_a_sink_and_lengths():
    p = v4_problem(8, 64, seed=7)

    def f(p):
        return smla.sparse_mla_bwd(**p, mode="compiled")

    eager = f(p)
    compiled = torch.compile(f, fullgraph=True)(p)
    assert len(compiled) == 3 and compiled[2].shape == (64,)
    assert torch.equal(compiled[0], eager[0]) and torch.equal(compiled[2], eager[2])
