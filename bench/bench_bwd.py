"""Benchmark the sparse-MLA backward against its peers (docs/performance.md).

    python bench/bench_bwd.py                    # B1 B2 B2r B3 on the GPU
    python bench/bench_bwd.py --shapes B1 B2     # a subset
    python bench/bench_bwd.py --shapes B1d H128d GLM B2 DSv4 --cudnn --quick
    python bench/bench_bwd.py --tiny --device cpu   # smoke run, seconds on a CPU

The shapes and their problems are in bench/shapes.py (B1 B2 B2r B3, H16 H32
H128 on random indices, B1d H128d GLM on DSA-like ones, DSv4: DeepSeek-V4's
compressed attention with a sink). Per shape it reports, for every backend
available in this process, the median time over --iters runs after warm-up
(CUDA events on a GPU; --rotate copies of the inputs are used in turn, so no
run finds the last run's operands in L2), TFLOP/s with the project's flop
count (smla.contract.flop_count), the ratio of each backend's time to the
compiled kernel's and to the shape's floor (bench/floors.py: the larger of
the dKV reductions at the red.global.add rate and the flops at the GEMM
rate, both measured here); plus the index set's overlap statistics
(smla.indices.overlap_stats on a 256-query sample at the last shard), and
the machine limits (bf16 8192^3 GEMM, device copy bandwidth). On a GPU each
backend's device memory beyond the tensors it returns is measured on one
more call (its allocator peak), next to the fp32 dKV buffer of the issue's
bound.

Backends: compiled (torch.ops.smla.sparse_mla_bwd via smla._compiled, if
built; base-2 lse; on DSv4 the cuDNN-shaped smla.sparse_attention_backward,
given what cuDNN is given), compiled-lse-e (the same op given the
natural-log lse, --lse-e), reference (the chunked eager reference),
compiled-reference (torch.compile of the reference; --no-compile skips it)
and tilelang (--tilelang MODULE:FUNCTION naming a sparse_mla_bwd with
Slime's unbatched signature, e.g. bench/tilelang_peer.py's; not run on
shapes with query positions or a sink, which that signature lacks) and cudnn
(--cudnn: cuDNN frontend's SM90 DSA backward, bench/cudnn_peer.py, given the
natural-log lse and, for query positions, the slots past each query's
position as -1; on DSv4 with the sink and topk_length). The compiled op's
time includes Delta, the dKV cast and output allocation. --quick times the
compiled kernels and the peers only, 10 runs each.
"""

from __future__ import annotations

import argparse
import importlib
import json
import math
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))

import smla  # noqa: E402
from smla import _compiled  # noqa: E402
from smla.contract import flop_count  # noqa: E402
from smla.indices import overlap_stats  # noqa: E402
from smla.reference import sparse_mla_bwd_reference  # noqa: E402

import floors  # noqa: E402
from shapes import DEFAULT_SHAPES, SHAPES, TINY, describe, make_problem  # noqa: E402,F401


def bench(fn, device, warmup, iters):
    """Median milliseconds of fn(). fn is a callable or a list of callables
    that are run in turn (rotating inputs: consecutive runs do not find the
    previous run's operands in L2)."""
    if isinstance(fn, (list, tuple)):
        fns, count = fn, [0]

        def fn():
            fns[count[0] % len(fns)]()
            count[0] += 1
    for _ in range(warmup):
        fn()
    times = []
    if device.type == "cuda":
        torch.cuda.synchronize()
        for _ in range(iters):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fn()
            b.record()
            b.synchronize()
            times.append(a.elapsed_time(b))
    else:
        for _ in range(iters):
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def backends(p, args):
    """name -> zero-argument callable running one backward."""
    if p["kind"] == "dsv4":
        return _dsv4_backends(p, args)
    t = (p["q"], p["kv"], p["o"], p["do"], p["indices"], p["lse"])
    qp, s = p["q_positions"], p["scale"]
    out = {}
    if p["q"].is_cuda and _compiled.is_available():
        out["compiled"] = lambda: _compiled.sparse_mla_bwd(
            *t, sm_scale=s, lse_base=2, q_positions=qp, delta=None,
            dq_dtype=torch.bfloat16, dkv_dtype=torch.bfloat16)
    out["reference"] = lambda: sparse_mla_bwd_reference(*t, s, q_positions=qp)
    if not args.no_compile:
        compiled_ref = _compiled_reference(args)
        out["compiled-reference"] = lambda: compiled_ref(*t, s, q_positions=qp)
    if p["q"].is_cuda and _compiled.is_available() and args.lse_e:
        lse_e = p["lse"] * math.log(2.0)
        out["compiled-lse-e"] = lambda: _compiled.sparse_mla_bwd(
            t[0], t[1], t[2], t[3], t[4], lse_e, sm_scale=s, lse_base="e",
            q_positions=qp, delta=None, dq_dtype=torch.bfloat16, dkv_dtype=torch.bfloat16)
    if _cudnn_runs(p, args):
        import cudnn_peer
        ops = cudnn_peer.prepare(p["q"], p["kv"], p["indices"], p["lse"], qp, lse_base=2)
        out["cudnn"] = lambda: cudnn_peer.sparse_mla_bwd(
            p["q"], ops[0], p["o"], p["do"], ops[1], ops[2], ops[3], s)
    if args.tilelang and qp is None:  # Slime's TileLang signature has no positions
        mod, _, name = args.tilelang.partition(":")
        tl = getattr(importlib.import_module(mod), name or "sparse_mla_bwd")
        out["tilelang"] = lambda: tl(*t, sm_scale=s)
    return out


def _dsv4_backends(p, args):
    """DSv4's backends. The cuDNN-shaped entry points (smla's and cuDNN's)
    take flat kv / indices, the lse over the keys only (natural log),
    the sink and topk_length; the reference takes the sink-inclusive lse,
    the sink (for d_sink) and topk_length."""
    q, o, do, s = p["q"], p["o"], p["do"], p["scale"]
    flat = (p["kv2d"], o, do, p["lse_keys"], p["attn_sink"], p["idx2d"])
    out = {}
    entry = getattr(smla, "sparse_attention_backward", None)
    if q.is_cuda and entry is not None:
        out["compiled"] = lambda: entry(q, *flat, softmax_scale=s, topk_length=p["topk_length"])
    t = (q, p["kv"], o, do, p["indices"], p["lse"])
    sink = dict(lse_base="e", attn_sink=p["attn_sink"], topk_length=p["topk_length"])
    out["reference"] = lambda: sparse_mla_bwd_reference(*t, s, **sink)
    if not args.no_compile:
        compiled_ref = _compiled_reference(args)
        out["compiled-reference"] = lambda: compiled_ref(*t, s, **sink)
    if _cudnn_runs(p, args):
        import cudnn_peer
        out["cudnn"] = lambda: cudnn_peer.sparse_attention_bwd(
            q, *flat, s, topk_length=p["topk_length"])
    return out


def _compiled_reference(args):
    if not hasattr(args, "compiled_ref"):  # one compile for every input copy
        args.compiled_ref = torch.compile(sparse_mla_bwd_reference, dynamic=False)
    return args.compiled_ref


def _cudnn_runs(p, args):
    if not (args.cudnn and p["q"].is_cuda):
        return False
    import cudnn_peer
    return cudnn_peer.available()


def not_run(p, args, present):
    """Lines saying which requested backends this shape does not run, and why."""
    notes = []
    if p["kind"] == "dsv4" and p["q"].is_cuda and "compiled" not in present:
        notes.append("compiled: not run (this smla has no smla.sparse_attention_backward, the "
                     "cuDNN-shaped entry point with sinks that DSv4 needs: issue 50)")
    if args.tilelang and "tilelang" not in present:
        why = "a sink" if p["kind"] == "dsv4" else "query positions"
        notes.append(f"tilelang: not run (this shape has {why}, which the peer does not take)")
    if args.cudnn and "cudnn" not in present:
        notes.append("cudnn: not run (cuDNN frontend's DSA backward does not import here, or "
                     "this is not an SM90 GPU: bench/cudnn_peer.py)")
    return notes


def extra_memory(fn, device):
    """Bytes of device memory one fn() call allocates at its peak beyond
    the tensors it returns (the issue's memory bound: the fp32 dKV buffer
    plus O(T H)), from fresh allocator segments; None on the CPU."""
    if device.type != "cuda":
        return None
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    out = fn()
    torch.cuda.synchronize()
    outs = out if isinstance(out, (list, tuple)) else (out,)
    kept = sum(t.numel() * t.element_size() for t in outs if torch.is_tensor(t))
    return torch.cuda.max_memory_allocated() - base - kept


def limits(device, tiny):
    n = 512 if tiny else 8192
    a = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    ms = bench(lambda: a @ a, device, 2, 5 if tiny else 20)
    src = torch.empty((1 << 30) if not tiny else (1 << 16), dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    cms = bench(lambda: dst.copy_(src), device, 2, 5 if tiny else 20)
    return {"gemm_tflops": 2 * n ** 3 / ms / 1e9, "copy_tbps": 2 * src.numel() / cms / 1e9}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shapes", nargs="+", default=DEFAULT_SHAPES, choices=list(SHAPES),
                    help="default: the shapes with targets, B1 B2 B2r B3")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--tiny", action="store_true", help="small shapes (smoke test)")
    ap.add_argument("--quick", action="store_true",
                    help="only the compiled kernels and the peers (compiled, compiled-lse-e, "
                         "cudnn, tilelang), 10 timed runs after 2 warm-up runs")
    ap.add_argument("--iters", type=int, default=None,
                    help="timed runs (default 20; --quick 10; tiny 2)")
    ap.add_argument("--warmup", type=int, default=None, help="default 3; --quick 2; tiny 1")
    ap.add_argument("--no-compile", action="store_true", help="skip torch.compile(reference)")
    ap.add_argument("--tilelang", default=None, help="MODULE:FUNCTION of a TileLang peer")
    ap.add_argument("--cudnn", action="store_true",
                    help="also time cuDNN frontend's SM90 DSA backward (bench/cudnn_peer.py)")
    ap.add_argument("--lse-e", action="store_true",
                    help="also time the compiled op given the natural-log lse")
    ap.add_argument("--backends", nargs="+", default=None,
                    help="only these backends (compiled, compiled-lse-e, reference, "
                         "compiled-reference, tilelang, cudnn)")
    ap.add_argument("--json", default=None, help="also write the results here")
    ap.add_argument("--rotate", type=int, default=None,
                    help="copies of the inputs run in turn (default 3; tiny 1)")
    args = ap.parse_args(argv)
    device = torch.device(args.device)
    if args.quick:
        args.no_compile = True
        args.backends = args.backends or ["compiled", "compiled-lse-e", "cudnn", "tilelang"]
    iters = args.iters or (2 if args.tiny else 10 if args.quick else 20)
    warmup = args.warmup if args.warmup is not None else (
        1 if args.tiny else 2 if args.quick else 3)
    table = TINY if args.tiny else SHAPES
    rotate = max(1, args.rotate or (1 if args.tiny else 3))

    lim = limits(device, args.tiny)
    print(f"device {device}: bf16 GEMM {lim['gemm_tflops']:.1f} TFLOP/s, "
          f"copy {lim['copy_tbps']:.2f} TB/s")
    results = {"limits": lim, "shapes": {}}
    for name in args.shapes:
        spec = table[name]
        T, S, H, G, D, Dt, K, kind = spec
        p = make_problem(spec, device)
        ov = overlap_stats(p["indices"], sample=256, s_kv=S)
        flops = flop_count(T, H, K, D, Dt)
        print(f"\n{name}: {describe(spec)}; next-overlap {ov['next_overlap']:.3f}, "
              f"union8/K {ov['union_8']:.2f}, union64/K {ov['union_64']:.2f}")
        fl = floors.floor(p, spec, lim["gemm_tflops"], bench)
        print(floors.describe(fl, lim["gemm_tflops"]), flush=True)
        row = {"overlap": ov, "flops": flops, "floor": fl, "ms": {}, "rotate": rotate}
        copies = [p] + [{k: v.clone() if torch.is_tensor(v) else v for k, v in p.items()}
                        for _ in range(rotate - 1)]
        runs = [backends(c, args) for c in copies]
        for note in not_run(p, args, runs[0]):
            print(f"  {note}")
            row.setdefault("not_run", []).append(note)
        for bname in runs[0]:
            if args.backends and bname not in args.backends:
                continue
            before = smla.stats()
            ms = bench([r[bname] for r in runs], device, warmup, iters)
            row["ms"][bname] = ms
            extra = extra_memory(runs[0][bname], device)
            slow = {m: smla.stats()[f"calls_{m}"] - before[f"calls_{m}"]
                    for m in ("checked", "reference")}
            note = ""
            if extra is not None:
                row.setdefault("extra_mib", {})[bname] = extra / 2 ** 20
                note = (f", {extra / 2 ** 20:.1f} MiB beyond its outputs (fp32 dKV "
                        f"{S * G * (D + Dt) * 4 / 2 ** 20:.1f} MiB)")
            if bname == "compiled" and any(slow.values()):
                row.setdefault("modes", {})[bname] = slow
                note += (f"; NOT the compiled kernels: {slow['reference']} calls ran in "
                         f"reference mode, {slow['checked']} in checked mode")
            print(f"  measured {bname}: {ms:.3f} ms{note}", flush=True)
            if args.json:  # partial results survive a time-out
                results["shapes"][name] = row
                with open(args.json, "w") as f:
                    json.dump(results, f, indent=2)
        base = row["ms"].get("compiled")
        row["x_floor"] = {b: ms / fl["ms"] for b, ms in row["ms"].items()}
        for bname, ms in row["ms"].items():
            ratio = f"  {ms / base:6.2f}x compiled" if base else ""
            print(f"  {bname:<20} {ms:10.3f} ms  {flops / ms / 1e9:10.4g} TFLOP/s{ratio}  "
                  f"{ms / fl['ms']:6.2f}x floor ({fl['kind']})")
        results["shapes"][name] = row
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
