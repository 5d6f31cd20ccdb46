"""Smoke test of the benchmark script on tiny shapes (CPU)."""

import json
import os
import subprocess
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def test_bench_tiny_runs(tmp_path):
    out = tmp_path / "bench.json"
    r = subprocess.run(
        [sys.executable, os.path.join(ROOT, "bench", "bench_bwd.py"), "--tiny", "--device", "cpu",
         "--no-compile", "--shapes", "B1", "B3", "--json", str(out)],
        capture_output=True, text=True, timeout=300,
    )
    assert r.returncode == 0, r.stderr
    res = json.loads(out.read_text())
    assert set(res["shapes"]) == {"B1", "B3"}
    b1 = res["shapes"]["B1"]
    assert b1["flops"] == 2 * 64 * 8 * 64 * (2 * 32 + 3 * 48)
    assert b1["ms"]["reference"] > 0
    assert 0 < b1["overlap"]["next_overlap"] < 1
    assert "next-overlap" in r.stdout and "TFLOP/s" in r.stdout


def test_bench_default_shapes_are_benchmarks_md():
    """The harness runs the four shapes with targets by default; H32 and H128
    (B1 at other head counts, no target) only when named, and every shape
    has a tiny variant."""
    sys.path.insert(0, os.path.join(ROOT, "bench"))
    import bench_bwd

    assert bench_bwd.DEFAULT_SHAPES == ["B1", "B2", "B2r", "B3"]
    assert set(bench_bwd.SHAPES) == set(bench_bwd.TINY)
    b1 = bench_bwd.SHAPES["B1"]
    for name, heads in (("H32", 32), ("H128", 128)):
        shape = bench_bwd.SHAPES[name]
        assert shape[2] == heads and shape[:2] + shape[3:] == b1[:2] + b1[3:]


def _bench_module(name):
    sys.path.insert(0, os.path.join(ROOT, "bench"))
    try:
        return __import__(name)
    finally:
        sys.path.pop(0)


def test_bench_shapes_of_issues_47_and_50():
    """B1d, H128d and GLM are B1, H128 and H16 on DSA-like indices; DSv4 is
    DeepSeek-V4-Flash at TP1: 4096 tokens, 64 heads, 512-wide kv rows that
    are K and V (Dt = 0), 4096 token rows + 1024 compressed rows, top-k 640.
    Every shape has a tiny variant of the same index kind."""
    shapes = _bench_module("shapes")
    s = shapes.SHAPES
    for name, base in (("B1d", "B1"), ("H128d", "H128"), ("GLM", "H16")):
        assert s[name] == s[base][:7] + ("dsa",)
    assert s["H32"] == (4096, 8192, 32, 1, 512, 64, 2048, "random")
    assert s["DSv4"] == (4096, 5120, 64, 1, 512, 0, 640, "dsv4")
    assert shapes.dsv4_window(640) == 128
    assert set(s) == set(shapes.TINY)
    for name in s:
        assert shapes.TINY[name][7] == s[name][7]


def test_bench_tiny_new_shapes_report_floors(tmp_path):
    out = tmp_path / "bench.json"
    r = subprocess.run(
        [sys.executable, os.path.join(ROOT, "bench", "bench_bwd.py"), "--tiny", "--device", "cpu",
         "--no-compile", "--shapes", "B1d", "H128d", "H32", "GLM", "DSv4", "--json", str(out)],
        capture_output=True, text=True, timeout=300,
    )
    assert r.returncode == 0, r.stderr
    res = json.loads(out.read_text())
    assert set(res["shapes"]) == {"B1d", "H128d", "H32", "GLM", "DSv4"}
    for name, row in res["shapes"].items():
        fl = row["floor"]
        assert row["ms"]["reference"] > 0 and 0 < row["overlap"]["next_overlap"] <= 1
        # no CUDA device: the reduction rate is not measured, the floor is the tensor floor
        assert fl["kind"] == "tensor" and fl["ms"] == fl["tensor_ms"] > 0
        assert "no CUDA device" in fl["rate"]["error"]
        assert fl["bytes"]["group4"] <= fl["bytes"]["pair"] <= fl["bytes"]["token"]
        assert row["x_floor"]["reference"] == row["ms"]["reference"] / fl["ms"]
    dsv4 = res["shapes"]["DSv4"]
    T, K, H, D = 64, 16, 8, 32
    assert dsv4["flops"] == 2 * T * H * K * 5 * D
    # valid slots: a window of min(t+1, 8) + min((t+1)//4, 8) compressed keys
    valid = sum(min(t + 1, 8) + min((t + 1) // 4, 8) for t in range(T))
    assert dsv4["floor"]["bytes"]["token"] == valid * D * 4
    assert dsv4["floor"]["flops_valid"] == 2 * H * 5 * D * valid
    assert "floor's sharing assumption: one reduction per (token, valid slot)" in r.stdout
    assert "x floor (tensor)" in r.stdout and "an fp32 sink per head" in r.stdout


def test_bench_quick_times_only_kernels_and_peers(tmp_path):
    out = tmp_path / "bench.json"
    r = subprocess.run(
        [sys.executable, os.path.join(ROOT, "bench", "bench_bwd.py"), "--tiny", "--device", "cpu",
         "--quick", "--shapes", "B1", "--json", str(out)],
        capture_output=True, text=True, timeout=300,
    )
    assert r.returncode == 0, r.stderr
    assert json.loads(out.read_text())["shapes"]["B1"]["ms"] == {}  # no kernels on a CPU


def test_dsv4_problem_matches_a_float64_softmax_with_sink():
    """shapes.make_problem's DSv4 out / lse against the definition: softmax
    over the valid keys and the sink, lse_keys over the keys alone."""
    import torch

    shapes = _bench_module("shapes")
    spec = shapes.TINY["DSv4"]
    p = shapes.make_problem(spec, torch.device("cpu"), seed=1)
    T, S, H, G, D, Dt, K, kind = spec
    q, kv = p["q"].double(), p["kv2d"].double()
    for t in (0, 5, 31, 63):
        n = int(p["topk_length"][t])
        keys = kv[p["idx2d"][t, :n].long()]  # [n, D]
        s = q[t] @ keys.T * p["scale"]  # [H, n]
        full = torch.cat([s, p["attn_sink"].double().view(H, 1)], dim=1)
        lse = torch.logsumexp(full, dim=1)
        o = torch.softmax(full, dim=1)[:, :n] @ keys
        assert torch.allclose(p["lse"][t].double(), lse, atol=1e-4)
        assert torch.allclose(p["lse_keys"][t].double(), torch.logsumexp(s, dim=1), atol=1e-4)
        assert torch.allclose(p["o"][t].double(), o, atol=2e-2)
    assert p["kv"].shape == (S, 1, D) and p["indices"].shape == (T, 1, K)
    assert p["attn_sink"].dtype == torch.float32 and p["attn_sink"].shape == (H,)


def test_cudnn_peer_dsv4_call(monkeypatch):
    """cudnn_peer.sparse_attention_bwd calls cuDNN's wrapper as DeepSeek-V4's
    trainers do (flat kv and indices, keys-only lse, the sink, topk_length)
    and returns its three gradients."""
    import types

    import torch

    calls = []

    def wrapper(q, kv, out, dout, lse, attn_sink, topk_idxs, softmax_scale=None,
                topk_length=None):
        calls.append((q, kv, out, dout, lse, attn_sink, topk_idxs, softmax_scale, topk_length))
        return {"dq": torch.zeros_like(q), "dkv": torch.zeros_like(kv),
                "d_sink": torch.zeros_like(attn_sink)}

    pkg = types.ModuleType("cudnn")
    dsa = types.ModuleType("cudnn.deepseek_sparse_attention")
    dsa.sparse_attention_backward_wrapper = wrapper
    pkg.deepseek_sparse_attention = dsa
    monkeypatch.setitem(sys.modules, "cudnn", pkg)
    monkeypatch.setitem(sys.modules, "cudnn.deepseek_sparse_attention", dsa)
    peer = _bench_module("cudnn_peer")
    q, kv, o = torch.zeros(4, 2, 8), torch.zeros(6, 8), torch.zeros(4, 2, 8)
    lse, sink = torch.zeros(4, 2), torch.ones(2)
    idx, tl = torch.zeros(4, 3, dtype=torch.int32), torch.full((4,), 2, dtype=torch.int32)
    dq, dkv, d_sink = peer.sparse_attention_bwd(q, kv, o, o, lse, sink, idx, 0.25, topk_length=tl)
    assert dq.shape == q.shape and dkv.shape == kv.shape and d_sink.shape == sink.shape
    (c,) = calls
    assert c[1] is kv and c[4] is lse and c[5] is sink and c[6] is idx and c[8] is tl
    assert c[7] == 0.25


def test_floors_count_valid_slots_and_unions():
    """floors.slot_rows / reduction_bytes on a hand-made index set: invalid
    and position-masked slots add nothing; the unions of pairs and groups
    of 4 are what a kernel summing shared keys on chip would reduce."""
    import torch

    floors = _bench_module("floors")
    idx = torch.tensor([[0, 1, 2, -1], [1, 2, 3, 9], [1, 2, 3, 4], [5, 6, 7, 8]],
                       dtype=torch.int32).view(4, 1, 4)
    rows, valid = floors.slot_rows(idx, 9)  # 9 is past S_kv
    assert valid == 3 + 3 + 4 + 4 and rows[1].tolist() == [1, 2, 3, -1]
    _, valid_pos = floors.slot_rows(idx, 9, torch.tensor([2, 2, 4, 8]))
    assert valid_pos == 3 + 2 + 4 + 4
    p = {"indices": idx, "q_positions": None}
    b = floors.reduction_bytes(p, (4, 9, 2, 1, 4, 4, 4, "dsa"))
    row = 8 * 4
    assert b["token"] == 14 * row
    assert b["pair"] == (4 + 8) * row  # {0,1,2,3} and {1,...,8}
    assert b["group4"] == 9 * row and b["group4_union_per_k"] == 9 / 4
    # the floor on a CPU: tensor only, and it says why
    f = floors.floor({**p, "q": torch.zeros(1)}, (4, 9, 2, 1, 4, 4, 4, "dsa"), 1.0,
                     timer=None)
    assert f["kind"] == "tensor" and f["flops_valid"] == 14 * 2 * 2 * (8 + 3 * 8)
    assert "no CUDA device" in floors.describe(f, 1.0)
    # a measured rate that binds: the reduction floor, and the unions at that rate
    slow = {"ms": 1.0, "tbps": 14 * row / 1e9, "how": "NVRTC", "grid": 132}
    floors_rate = floors.reduction_rate
    try:
        floors.reduction_rate = lambda p, spec, timer: slow
        f = floors.floor({**p, "q": torch.zeros(1)}, (4, 9, 2, 1, 4, 4, 4, "dsa"), 1e9,
                         timer=None)
    finally:
        floors.reduction_rate = floors_rate
    assert f["kind"] == "reduction" and f["ms"] == 1.0
    assert f["pair_reduction_ms"] == 12 / 14 and f["group4_reduction_ms"] == 9 / 14
    assert "floor 1.000 ms (reduction): reduction 1.000 ms" in floors.describe(f, 1e9)


def test_floors_probe_kernel_compiles_for_sm90():
    """The reduction probe's kernel compiles for SM90 with NVRTC (no device
    needed); skipped where torch cannot load libnvrtc."""
    import pytest

    floors = _bench_module("floors")
    try:
        from torch.cuda._utils import _nvrtc_compile
        binary, name = _nvrtc_compile(floors.kernel_source(), "smla_red_rows", "90")
    except Exception as e:  # no libnvrtc on this machine
        pytest.skip(f"NVRTC is not usable here: {e}")
    assert name == "smla_red_rows" and len(binary) > 0


def test_bench_rotates_inputs():
    sys.path.insert(0, os.path.join(ROOT, "bench"))
    import bench_bwd
    import torch

    calls = []
    fns = [lambda i=i: calls.append(i) for i in range(3)]
    bench_bwd.bench(fns, torch.device("cpu"), warmup=2, iters=5)
    assert calls == [0, 1, 2, 0, 1, 2, 0]


def test_bench_walk_refuses_without_the_compiled_kernels():
    """bench_walk.py times only the compiled op; without CUDA and smla._C it
    says so instead of timing something else."""
    import torch

    if torch.cuda.is_available():
        import pytest

        pytest.skip("a CUDA machine runs it for real")
    r = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "bench_walk.py"),
                        "--shapes", "B2"], capture_output=True, text=True, timeout=120)
    assert r.returncode != 0
    assert "needs a CUDA device and the compiled extension" in r.stderr


def _source_view(tmp_path, header, rows):
    """Writes an ncu SASS source-view CSV (a kernel line, the header, the
    rows) and returns its path and its rows as bench/ncu_phases.py reads
    them, with that module."""
    import csv
    path = tmp_path / "sass.csv"
    with open(path, "w") as f:
        f.write('"kernel"\n')
        for r in [header] + rows:
            f.write(",".join(f'"{c}"' for c in r) + "\n")
    sys.path.insert(0, os.path.join(ROOT, "bench"))
    try:
        import ncu_phases
    finally:
        sys.path.pop(0)
    return path, list(csv.reader(open(path))), ncu_phases


def test_ncu_mix_counts_opcodes_and_wide_arithmetic(tmp_path):
    """bench/ncu_phases.py --mix on a small source-view CSV: executed
    instructions by opcode (predicate and modifiers dropped), their share of
    the samples, and the 64-bit high halves (carries, .EX compares)."""
    header = ["Address", "Source", "Warp Stall Sampling (All Samples)",
              "Warp Stall Sampling (Not-issued Samples)", "# Samples",
              "Instructions Executed"]
    rows = [
        ["0x0", "IMAD.WIDE.U32 R4, R3, 0x18, RZ", "1", "0", "1", "100"],
        ["0x10", "@!P0 IMAD.X R5, RZ, RZ, R5, P1", "1", "0", "1", "100"],
        ["0x20", "ISETP.GE.U32.AND.EX P2, PT, R1, RZ, PT, P2", "2", "0", "2", "200"],
        ["0x30", "ISETP.GE.U32.AND P2, PT, R1, RZ, PT", "0", "0", "0", "200"],
        ["0x40", "HGMMA.64x24x16.F32.BF16 R24, gdesc[UR12].tnspB, R24", "6", "0", "6", "600"],
    ]
    path, view, ncu_phases = _source_view(tmp_path, header, rows)
    ops, total, wide = ncu_phases.mix(view)
    assert total == 1200 and wide == 400
    assert ops[0] == ("HGMMA", 600, 0.6)
    assert dict((o, n) for o, n, _ in ops) == {"HGMMA": 600, "ISETP": 400, "IMAD": 200}
    r = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "ncu_phases.py"), "--mix",
                        str(path)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "64-bit high halves 33.3%" in r.stdout


def test_ncu_warps_splits_by_executing_warp_set(tmp_path):
    """bench/ncu_phases.py --warps: runs of instructions that the same
    number of warps executed (all 16, warpgroups 1-3, warpgroup 0; a
    prologue run less than once a step is "outside"), each with its share
    of the samples and its stall reasons; a short run with another count
    (a branch) joins its neighbour."""
    header = ["Address", "Source", "Warp Stall Sampling (All Samples)",
              "Warp Stall Sampling (Not-issued Samples)", "# Samples",
              "Instructions Executed", "stall_barrier", "stall_long_sb"]
    rows = []
    def add(n, count, samples, barrier, long_sb):
        for _ in range(n):
            rows.append([hex(16 * len(rows)), "NOP", str(samples), "0", str(samples),
                         str(count), str(barrier), str(long_sb)])
    add(10, 50, 1, 1, 0)       # prologue: once per CTA
    add(10, 1600, 4, 0, 4)     # all 16 warps
    add(10, 1200, 3, 0, 3)     # warpgroups 1-3
    add(2, 1100, 1, 0, 1)      # a branch inside them: joins the run
    add(10, 400, 2, 2, 0)      # warpgroup 0
    path, view, ncu_phases = _source_view(tmp_path, header, rows)
    runs = ncu_phases.warp_runs(view)
    total = 10 * 1 + 10 * 4 + 10 * 3 + 2 * 1 + 10 * 2
    assert [(a, b, w) for a, b, w, _, _ in runs] == [(0, 9, 0), (10, 19, 16), (20, 31, 12),
                                                     (32, 41, 4)]
    assert abs(runs[2][3] - 32 / total) < 1e-9
    assert runs[1][4][0] == ("long_sb", 1.0) and runs[3][4][0] == ("barrier", 1.0)
    r = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "ncu_phases.py"), "--warps",
                        str(path)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "12 warps" in r.stdout and "outside" in r.stdout


def test_sass_stats_counts_instruction_kinds():
    """bench/sass_stats.py's parser on a cuobjdump -sass excerpt: predicated
    instructions count, encoding lines and headers do not."""
    sass = "\n".join([
        "\t\tFunction : k_bwd",
        "        /*0000*/                   LDC R1, c[0x0][0x28] ;   /* 0x00000a00ff017b82 */",
        "                                                              /* 0x000ff00000000800 */",
        "        /*0010*/                   R2UR UR14, R22 ;          /* 0x0 */",
        "        /*0020*/                   IMAD.X R5, RZ, RZ, R5, P1 ; /* 0x0 */",
        "        /*0030*/              @!P2 BRA 0x40c0 ;              /* 0x0 */",
        "        /*0040*/                   BSSY B0, 0x100 ;          /* 0x0 */",
        "        /*0050*/               @P0 REDG.E.ADD.F32x4.FTZ.RN.STRONG.GPU desc[UR48][R44.64], R20 ; /* 0x0 */",
        "        /*0060*/                   ISETP.GE.U32.AND.EX P2, PT, R1, RZ, PT, P2 ; /* 0x0 */",
        "        /*0070*/                   HGMMA.64x24x16.F32.BF16 R24, gdesc[UR12].tnspB, R24 ; /* 0x0 */",
        "        /*0080*/                   LEA.HI.X.SX32 R47, R22, RZ, 0x1, P0 ; /* 0x0 */",
    ])
    sys.path.insert(0, os.path.join(ROOT, "bench"))
    try:
        import sass_stats
        s = sass_stats.stats(sass)
    finally:
        sys.path.pop(0)
    assert s == {"instructions": 9, "R2UR": 1, "wide": 3, "HGMMA": 1, "REDG": 1, "BSSY": 1}


_FAKE_EXAMPLE = '''
import torch
calls = []

def preprocess(B, S, H, D):
    calls.append(("preprocess", B, S, H, D))
    return lambda o, do: (o.float() * do.float()).sum(-1)

def bwd(B, S, S_kv, H, D, D_tail, topk, kv_group, sm_scale, is_causal, threads=256):
    calls.append(("bwd", B, S, S_kv, H, D, D_tail, topk, kv_group, sm_scale, threads))
    def run(q, kv, do, indices, lse, delta, dkv):
        assert q.dim() == 4 and kv.dim() == 4 and indices.dim() == 4 and lse.dim() == 3
        assert delta.shape == (B, S, H) and dkv.dtype == torch.float32
        dkv.add_(1.0)
        return torch.full_like(q, 2.0)
    return run

def postprocess(B, S_kv, D, D_tail, kv_group):
    calls.append(("postprocess", B, S_kv, D, D_tail, kv_group))
    return lambda dkv: dkv.to(torch.bfloat16)
'''


def _tilelang_peer(monkeypatch, example):
    sys.path.insert(0, os.path.join(ROOT, "bench"))
    try:
        import tilelang_peer
    finally:
        sys.path.pop(0)
    monkeypatch.setattr(tilelang_peer, "_module", None)
    monkeypatch.setattr(tilelang_peer, "_kernels", {})
    if example is None:
        monkeypatch.delenv("SMLA_TILELANG_EXAMPLE", raising=False)
    else:
        monkeypatch.setenv("SMLA_TILELANG_EXAMPLE", str(example))
    return tilelang_peer


def test_tilelang_peer_adapts_the_example(tmp_path, monkeypatch):
    """bench/tilelang_peer.py on a stand-in for TileLang's example (same
    three kernel builders, torch bodies): batched arguments in, unbatched
    gradients out, kernels built once per shape, 128 threads at 16 heads
    per group (the example's 256 cannot partition its gemm there)."""
    import torch

    example = tmp_path / "sparse_mla_bwd.py"
    example.write_text(_FAKE_EXAMPLE)
    peer = _tilelang_peer(monkeypatch, example)
    T, H, S, D, Dt, K = 4, 16, 8, 32, 16, 64
    q = torch.randn(T, H, D + Dt, dtype=torch.bfloat16)
    kv = torch.randn(S, 1, D + Dt, dtype=torch.bfloat16)
    o = torch.randn(T, H, D, dtype=torch.bfloat16)
    idx = torch.zeros(T, 1, K, dtype=torch.int32)
    lse = torch.zeros(T, H)
    for _ in range(2):
        dq, dkv = peer.sparse_mla_bwd(q, kv, o, o, idx, lse, sm_scale=0.5)
        assert dq.shape == q.shape and bool((dq == 2).all())
        assert dkv.shape == kv.shape and dkv.dtype == torch.bfloat16 and bool((dkv == 1).all())
    calls = peer._example().calls
    assert [c[0] for c in calls] == ["preprocess", "bwd", "postprocess"]
    assert calls[1] == ("bwd", 1, T, S, H, D, Dt, K, 1, 0.5, 128)
    assert [peer._threads(h) for h in (1, 16, 17, 32, 64, 128)] == [128, 128, 256, 256, 256, 256]


def test_tilelang_peer_names_its_variable(tmp_path, monkeypatch):
    import pytest
    import torch

    peer = _tilelang_peer(monkeypatch, None)
    x = torch.zeros(2, 16, 48)
    with pytest.raises(RuntimeError, match="SMLA_TILELANG_EXAMPLE"):
        peer.sparse_mla_bwd(x, torch.zeros(4, 1, 48), x[..., :32], x[..., :32],
                            torch.zeros(2, 1, 32, dtype=torch.int32), torch.zeros(2, 16))
    broken = tmp_path / "broken.py"
    broken.write_text("def bwd(): pass\n")
    peer = _tilelang_peer(monkeypatch, broken)
    with pytest.raises(RuntimeError, match="no 'preprocess' kernel"):
        peer._example()


def test_bench_runs_the_tilelang_peer_only_without_positions(tmp_path):
    """--tilelang: the peer runs on B1 (no query positions) and not on B3
    (packed sequences with positions, which Slime's signature lacks)."""
    (tmp_path / "fake_peer.py").write_text(
        "import torch\n"
        "def bwd(q, kv, o, do, indices, lse, sm_scale=None):\n"
        "    return torch.zeros_like(q), torch.zeros_like(kv)\n")
    out = tmp_path / "bench.json"
    env = dict(os.environ, PYTHONPATH=f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    r = subprocess.run(
        [sys.executable, os.path.join(ROOT, "bench", "bench_bwd.py"), "--tiny", "--device", "cpu",
         "--no-compile", "--shapes", "B1", "B3", "--tilelang", "fake_peer:bwd",
         "--json", str(out)],
        capture_output=True, text=True, timeout=300, env=env,
    )
    assert r.returncode == 0, r.stderr
    res = json.loads(out.read_text())
    assert "tilelang" in res["shapes"]["B1"]["ms"]
    assert "tilelang" not in res["shapes"]["B3"]["ms"]
    assert "tilelang: not run (this shape has query positions" in r.stdout
