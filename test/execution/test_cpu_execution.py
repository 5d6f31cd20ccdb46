"""Executes the compiler's CPU lowering and compares it to the reference.

The IR under test is what `smla-opt --smla-cpu` makes of one
smla.sparse_attention_bwd: decomposition, index masks, softmax guards, the
guard verifier, loops, LLVM. The reference is smla.reference in float64 on
the same bf16 inputs (an independent implementation in PyTorch). Outputs are
poisoned with NaN before every call, so an unwritten element fails.

Tolerances: f32 outputs within 1e-5 relative Frobenius error of float64 (the
kernel accumulates in f32); bf16 outputs within 1e-2 relative Frobenius
error and every element within 1e-2 * max|ref| + one bf16 ulp of it.
"""

from __future__ import annotations

import math

import pytest
import torch

from cpu_kernel import Config, CpuKernel, smla_opt
from smla.contract import COUNTER_NAMES
from smla.reference import sparse_mla_bwd_reference, sparse_mla_fwd_reference

try:
    smla_opt()
except FileNotFoundError as exc:  # pragma: no cover - CI always builds first
    pytest.skip(str(exc), allow_module_level=True)

INT32_MIN = -(2**31)


def make_case(cfg: Config, T: int, S: int, K: int, seed: int, positions: bool):
    """Random bf16 inputs with every kind of bad index and dead row."""
    g = torch.Generator().manual_seed(seed)
    H, G, W, D = cfg.heads, cfg.groups, cfg.width, cfg.d
    q = torch.randn(T, H, W, generator=g).bfloat16()
    kv = torch.randn(S, G, W, generator=g).bfloat16()
    o = torch.randn(T, H, D, generator=g).bfloat16()
    do = torch.randn(T, H, D, generator=g).bfloat16()
    idx = torch.randint(0, S, (T, G, K), generator=g, dtype=torch.int32)
    idx[0, :, :] = -1                      # a row with no valid slot
    idx[1, 0, 0] = S                       # just past the end
    idx[1, 0, K - 1] = S + 1000            # far past the end
    idx[2 % T, G - 1, 0] = INT32_MIN       # very negative
    idx[2 % T, 0, K // 2] = -7
    if K > 2:
        idx[3 % T, 0, 1] = idx[3 % T, 0, 2]  # a duplicate counts twice
    pos = None
    if positions:
        # Context-parallel shard: absolute positions somewhere in the middle.
        pos = torch.arange(T, dtype=torch.int32) + S // 3
    scale = 1.0 / math.sqrt(W)
    base = 2 if cfg.lse_base == 2 else "e"
    _, lse = sparse_mla_fwd_reference(q.double(), kv.double(), idx, scale, d_v=D,
                                      lse_base=base, q_positions=pos)
    lse = lse.float()
    lse[T - 1, 0] = float("inf")
    lse[T - 2, H - 1] = float("-inf")
    lse[T - 3, H // 2] = float("nan")
    lse[T - 4, 1] = lse[T - 4, 1] - 60.0   # stale lse: the clamp must fire
    return dict(q=q, kv=kv, o=o, dout=do, indices=idx, lse=lse, positions=pos,
                scale=scale, base=base)


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.double(), b.double()
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


CONFIGS = [
    # (config, T, S, K): one tail-only block, three blocks with a tail,
    # non-power-of-two heads with bf16 outputs, heads split into blocks
    # (two groups of 6 heads, 3 blocks of 2 heads each).
    (Config(32, 16, 4, 1, 16, 2, False, "f32", "f32"), 6, 11, 7),
    (Config(32, 16, 4, 2, 16, 1, True, "f32", "f32"), 7, 29, 37),
    (Config(64, 0, 20, 1, 16, 2, True, "bf16", "bf16"), 6, 40, 20),
    (Config(32, 16, 12, 2, 16, 2, True, "f32", "f32", head_blocks=3), 7, 29, 37),
]


@pytest.fixture(scope="module", params=CONFIGS, ids=lambda c: f"h{c[0].heads}g{c[0].groups}s{c[0].head_blocks}k{c[3]}")
def compiled(request, tmp_path_factory):
    cfg, T, S, K = request.param
    case = make_case(cfg, T, S, K, seed=cfg.heads * 7 + K, positions=cfg.positions)
    kernel = CpuKernel(cfg, case["scale"], workdir=tmp_path_factory.mktemp("cpu"))
    return cfg, case, kernel


def run_both(cfg, case, kernel):
    dq, dkv, cnt = kernel(case["q"], case["kv"], case["o"], case["dout"],
                          case["indices"], case["lse"], case["positions"])
    rdq, rdkv, rcnt = sparse_mla_bwd_reference(
        case["q"].double(), case["kv"].double(), case["o"].double(),
        case["dout"].double(), case["indices"], case["lse"].double(), case["scale"],
        lse_base=case["base"], q_positions=case["positions"], diagnostics=True)
    return (dq, dkv, cnt), (rdq, rdkv, rcnt)


def test_matches_reference(compiled):
    cfg, case, kernel = compiled
    (dq, dkv, cnt), (rdq, rdkv, _) = run_both(cfg, case, kernel)
    assert torch.isfinite(dq).all() and torch.isfinite(dkv).all()
    if cfg.dq_type == "f32":
        assert rel(dq, rdq) < 1e-5
        assert rel(dkv, rdkv) < 1e-5
    else:
        for out, ref in ((dq, rdq), (dkv, rdkv)):
            assert rel(out, ref) < 1e-2
            bound = 1e-2 * ref.abs().max() + ref.abs().double() * 2**-8
            assert ((out.double() - ref).abs() <= bound).all()


def test_counters_match_reference(compiled):
    cfg, case, kernel = compiled
    (_, _, cnt), (_, _, rcnt) = run_both(cfg, case, kernel)
    assert dict(zip(COUNTER_NAMES, cnt.tolist())) == rcnt
    assert rcnt["invalid_slots"] > 0 and rcnt["dead_rows"] >= 3
    assert rcnt["clamped"] > 0 and rcnt["nonfinite_rows"] == 0


def nonfinite_rows(dq, dkv):
    return int((~torch.isfinite(dq.float())).any(-1).sum()
               + (~torch.isfinite(dkv.float())).any(-1).sum())


def test_overflowing_rows_are_counted(compiled):
    """Finite bf16 kv rows near 1e20 overflow fp32: the compiled CPU kernel
    counts exactly the non-finite rows it returns, as the reference (in fp32,
    the kernels' precision) does for its own."""
    cfg, case, kernel = compiled
    kv = case["kv"].clone()
    kv[: kv.shape[0] // 2] = (kv[: kv.shape[0] // 2].float() * 1e20).bfloat16()
    assert torch.isfinite(kv.float()).all()
    dq, dkv, cnt = kernel(case["q"], kv, case["o"], case["dout"], case["indices"],
                          case["lse"], case["positions"])
    bad = nonfinite_rows(dq, dkv)
    assert bad > 0 and cnt.tolist()[3] == bad
    dq_type = torch.float32 if cfg.dq_type == "f32" else torch.bfloat16
    dkv_type = torch.float32 if cfg.dkv_type == "f32" else torch.bfloat16
    _, _, rcnt = sparse_mla_bwd_reference(
        case["q"], kv, case["o"], case["dout"], case["indices"], case["lse"], case["scale"],
        lse_base=case["base"], q_positions=case["positions"], dq_dtype=dq_type,
        dkv_dtype=dkv_type, diagnostics=True)
    assert rcnt["nonfinite_rows"] > 0


def test_dead_rows_are_exactly_zero(compiled):
    cfg, case, kernel = compiled
    dq, _, _ = kernel(case["q"], case["kv"], case["o"], case["dout"],
                      case["indices"], case["lse"], case["positions"])
    T, H = case["lse"].shape
    # +inf, -inf and NaN lse rows, and the row with no valid slot.
    assert (dq[T - 1, 0] == 0).all()
    assert (dq[T - 2, H - 1] == 0).all()
    assert (dq[T - 3, H // 2] == 0).all()
    assert (dq[0] == 0).all()


def test_invalid_slots_contribute_nothing(compiled):
    """Changing what an invalid slot points at changes nothing."""
    cfg, case, kernel = compiled
    base = kernel(case["q"], case["kv"], case["o"], case["dout"], case["indices"],
                  case["lse"], case["positions"])
    idx = case["indices"].clone()
    S = case["kv"].shape[0]
    idx[idx < 0] = -123456
    idx[idx >= S] = S + 99
    other = kernel(case["q"], case["kv"], case["o"], case["dout"], idx,
                   case["lse"], case["positions"])
    assert torch.equal(base[0], other[0]) and torch.equal(base[1], other[1])


def aligned_pairs(idx: torch.Tensor, S: int) -> torch.Tensor:
    """Aligned rows of token pairs (python/csrc/TokenPairs.h): per pair, the
    sorted union of both rows' in-range keys, -1 where a token lacks one."""
    T, _, K = idx.shape
    rows = []
    for p in range(T // 2):
        mem = [{k for k in idx[2 * p + i, 0].tolist() if 0 <= k < S} for i in range(2)]
        union = sorted(mem[0] | mem[1])
        rows += [[k if k in m else -1 for k in union] for m in mem]
    U = max(len(r) for r in rows)
    return torch.tensor([r + [-1] * (U - len(r)) for r in rows], dtype=torch.int32).view(T, 1, U)


def test_token_pairs_match_reference(tmp_path):
    """tokens = 2 on the CPU: two tokens of 2 heads folded into 4 rows walk
    their aligned rows (an index pair per block, each token's rows masked by
    its own row and position limit); dq, dkv and the counters are those of
    the given rows (the padding's invalid slots subtracted)."""
    cfg = Config(32, 16, 4, 1, 16, 2, True, "f32", "f32", tokens=2)
    T, S, K = 6, 40, 9
    g = torch.Generator().manual_seed(11)
    idx = torch.empty(T, 1, K, dtype=torch.int32)
    for p in range(T // 2):
        pool = torch.randperm(S, generator=g)[: K + K // 2].to(torch.int32)
        idx[2 * p, 0], idx[2 * p + 1, 0] = pool[:K], pool[K // 2:]
    idx[1, 0, 3] = -1
    idx[2, 0, 0] = S + 4
    idx[4] = -1
    case = make_case(Config(32, 16, 2, 1, 16, 2, True, "f32", "f32"), T, S, K, seed=5,
                     positions=True)
    case["indices"] = idx
    _, lse = sparse_mla_fwd_reference(case["q"].double(), case["kv"].double(), idx, case["scale"],
                                      d_v=32, lse_base=2, q_positions=case["positions"])
    lse = lse.float()
    lse[T - 1, 0] = float("inf")
    case["lse"] = lse
    rows = aligned_pairs(idx, S)
    kernel = CpuKernel(cfg, case["scale"], workdir=tmp_path)
    fold = lambda t: t.reshape(T // 2, 4, *t.shape[2:])  # noqa: E731
    dq, dkv, cnt = kernel(fold(case["q"]), case["kv"], fold(case["o"]), fold(case["dout"]),
                          rows, lse.reshape(T // 2, 4), case["positions"])
    rdq, rdkv, rcnt = sparse_mla_bwd_reference(
        case["q"].double(), case["kv"].double(), case["o"].double(), case["dout"].double(),
        idx, lse.double(), case["scale"], lse_base=2, q_positions=case["positions"],
        diagnostics=True)
    assert rel(dq.reshape(T, 2, -1), rdq) < 1e-5 and rel(dkv, rdkv) < 1e-5
    cnt = cnt.tolist()
    cnt[0] -= T * (rows.shape[2] - K)
    assert dict(zip(COUNTER_NAMES, cnt)) == rcnt
    assert rcnt["invalid_slots"] > 0
