"""Times kernel libraries against each other, in one process.

    python3 bench/compare_libs.py --shapes B1 GLM --rounds 3 \
        new=build/kernels old=out/baseline-kernels

Per shape the problem is built once (bench/shapes.py, the harness's
inputs); then, for each of --rounds rounds, every library in turn
(A B C A B C ...) is made the op's kernel directory
(`smla.configure(kernel_dir=...)`) and the compiled op is timed
(bench_bwd.bench: CUDA events, median of --iters after warm-up, rotating
input copies). Alternating rounds put a drift of the GPU's clocks on every
library alike; one process keeps the problem, the extension and the GPU's
state the same for all of them. Prints each library's per-round medians,
the median of those, and its time relative to the first library's (below
1: faster). The op runs as a user calls it (base-2 lse, bf16 outputs, its
own per-call choices of token pairs and walk), so a library that changes
what the op chooses is measured with that choice.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "python"))

import smla  # noqa: E402
from smla import _compiled  # noqa: E402
from bench_bwd import bench  # noqa: E402
from shapes import SHAPES, describe, make_problem  # noqa: E402


def library_arg(text):
    name, sep, path = text.partition("=")
    if not sep or not name or not os.path.isfile(os.path.join(path, "manifest.json")):
        raise argparse.ArgumentTypeError(
            f"expected NAME=KERNEL_DIR with a manifest.json in KERNEL_DIR, got {text!r}")
    return name, os.path.abspath(path)


def timed_calls(p, rotate):
    """The compiled op on `rotate` copies of the problem's inputs, run in
    turn (as bench_bwd.py does: no run finds the last one's operands in L2)."""
    s, qp = p["scale"], p["q_positions"]
    keys = ("q", "kv", "o", "do", "indices", "lse")
    copies = [tuple(p[k] for k in keys)] + [tuple(p[k].clone() for k in keys)
                                            for _ in range(rotate - 1)]

    def call(t):
        return lambda: _compiled.sparse_mla_bwd(
            *t, sm_scale=s, lse_base=2, q_positions=qp, delta=None,
            dq_dtype=torch.bfloat16, dkv_dtype=torch.bfloat16)
    return [call(t) for t in copies]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("libraries", nargs="+", type=library_arg, metavar="NAME=KERNEL_DIR")
    ap.add_argument("--shapes", nargs="+", default=["B1"],
                    choices=sorted(k for k, v in SHAPES.items() if v[-1] != "dsv4"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--rotate", type=int, default=3, help="copies of the inputs run in turn")
    args = ap.parse_args(argv)
    device = torch.device("cuda")
    if not _compiled.is_available(device):
        sys.exit("compare_libs.py: the compiled op is not available on this machine")
    previous = smla.configure()
    try:
        for shape in args.shapes:
            spec = SHAPES[shape]
            p = make_problem(spec, device)
            calls = timed_calls(p, max(1, args.rotate))
            times = {name: [] for name, _ in args.libraries}
            for _ in range(args.rounds):
                for name, path in args.libraries:
                    smla.configure(kernel_dir=path)
                    times[name].append(bench(calls, device, args.warmup, args.iters))
            first = statistics.median(times[args.libraries[0][0]])
            print(f"{shape} ({describe(spec)}):")
            for name, _ in args.libraries:
                med = statistics.median(times[name])
                rounds = " ".join(f"{t:.3f}" for t in times[name])
                print(f"  {name:>16}: {med:8.3f} ms  x{med / first:.3f}   rounds {rounds}")
            del p, calls
            torch.cuda.empty_cache()
    finally:
        smla.configure(**previous)


if __name__ == "__main__":
    main()
