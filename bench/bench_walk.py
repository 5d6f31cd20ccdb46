"""Times the compiled backward under each slot walk (python/csrc/SlotWalk.h).

    python3 bench/bench_walk.py --shapes B2r B2 B1

For each shape of bench_bwd.py: the op's own choice (SMLA_WALK=auto), the
given index order, the sorted walk at its default rotation period (three
times the resident CTAs) and chunking, and, for B2r, other periods
(264 = 1x, 528 = 2x, 1056 = 4x on an H200 with two H=16 CTAs per SM; 0 = no
rotation) and a single chunk. Also prints the number of distinct keys a
window of one wave of tokens reduces into: the statistic the auto choice
compares with L2. Medians of --iters runs after --warmup (bench_bwd.bench);
the walk settings (smla.configure) are set per variant in this one process.
"""

import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))

import smla  # noqa: E402
from bench_bwd import SHAPES, bench, make_problem  # noqa: E402
from smla import _compiled  # noqa: E402

# The settings (smla.config; SMLA_WALK, SMLA_WALK_PERIOD, SMLA_WALK_CHUNK_TOKENS).
DEFAULTS = dict(walk=None, walk_period=None, walk_chunk_tokens=None)
COMMON = [("auto", {}), ("given", {"walk": "given"}), ("sorted", {"walk": "sorted"})]
EXTRA = {"B2r": [(f"sorted period {p}", {"walk": "sorted", "walk_period": p})
                 for p in (264, 528, 1056, 0)]
        + [("sorted one chunk", {"walk": "sorted", "walk_chunk_tokens": 1000000})]}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    # The MLA shapes: DSv4 runs another entry point (bench_bwd.py).
    ap.add_argument("--shapes", nargs="+", default=["B2r", "B2", "B1"],
                    choices=[n for n, spec in SHAPES.items() if spec[7] != "dsv4"])
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    args = ap.parse_args(argv)
    if not (torch.cuda.is_available() and _compiled.is_available()):
        sys.exit("bench_walk: needs a CUDA device and the compiled extension smla._C")
    dev = torch.device("cuda")
    saved = smla.configure()
    try:
        for name in args.shapes:
            T, S, H, G, D, Dt, K, _ = SHAPES[name]
            p = make_problem(SHAPES[name], dev)

            def run():
                return _compiled.sparse_mla_bwd(
                    p["q"], p["kv"], p["o"], p["do"], p["indices"], p["lse"],
                    sm_scale=p["scale"], lse_base=2, q_positions=p["q_positions"],
                    delta=None, dq_dtype=torch.bfloat16, dkv_dtype=torch.bfloat16)

            base = None
            for label, settings in COMMON + EXTRA.get(name, []):
                smla.configure(**DEFAULTS)
                smla.configure(**settings)
                ms = bench(run, dev, args.warmup, args.iters)
                base = base or ms
                print(f"{name:4s} {label:22s} {ms:8.2f} ms  ({base / ms:.2f}x of auto)", flush=True)
            window = min(T, 2 * torch.cuda.get_device_properties(dev).multi_processor_count)
            t0 = (T - window) // 2
            rows = p["indices"][t0:t0 + window]
            distinct = rows[(rows >= 0) & (rows < S)].unique().numel()
            print(f"{name:4s} distinct keys of a {window}-token window: {distinct} "
                  f"({distinct * (D + Dt) * 4 / 1e6:.1f} MB of fp32 dKV rows)", flush=True)
    finally:
        smla.configure(**saved)


if __name__ == "__main__":
    main()
