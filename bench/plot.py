"""Plot benchmark JSON files (bench_bwd.py --json) as one PNG.

    python bench/plot.py OUT.png bench-B1.json bench-B2.json ...
    python bench/plot.py --table bench-B1.json ...   (the table only)

Bars: TFLOP/s per shape per implementation (the project's flop count); a
dashed line: the bf16 GEMM ceiling measured in the same process (the mean
over the files, each of which measured it).
"""

from __future__ import annotations

import json
import sys


def load(files):
    shapes, gemm = {}, []
    for path in files:
        with open(path) as f:
            res = json.load(f)
        gemm.append(res["limits"]["gemm_tflops"])
        shapes.update(res["shapes"])
    return shapes, gemm


def table(shapes, gemm) -> str:
    """One line per (shape, implementation): ms, TFLOP/s, ratio to compiled,
    fraction of the bf16 GEMM ceiling measured in the same runs, and the
    time as a multiple of the shape's floor where the file has one
    (bench/floors.py)."""
    ceiling = sum(gemm) / len(gemm) if gemm else float("nan")
    lines = [f"{'shape':<6} {'implementation':<20} {'ms':>10} {'TFLOP/s':>9} "
             f"{'vs compiled':>12} {'of GEMM':>8} {'of floor':>16}"]
    for name, row in shapes.items():
        base = row["ms"].get("compiled")
        floor = row.get("floor")
        for impl, ms in row["ms"].items():
            tf = row["flops"] / ms / 1e9
            ratio = f"{ms / base:.2f}x" if base else "-"
            of_floor = f"{ms / floor['ms']:.2f}x {floor['kind']}" if floor else "-"
            lines.append(f"{name:<6} {impl:<20} {ms:10.3f} {tf:9.1f} {ratio:>12} "
                         f"{tf / ceiling:8.1%} {of_floor:>16}")
    return "\n".join(lines)


def main(argv) -> int:
    if len(argv) >= 2 and argv[1] == "--table":
        print(table(*load(argv[2:])))
        return 0
    if len(argv) < 3:
        print(__doc__)
        return 2
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out, files = argv[1], argv[2:]
    shapes, gemm = load(files)
    print(table(shapes, gemm))
    impls = sorted({b for row in shapes.values() for b in row["ms"]})
    names = list(shapes)
    width = 0.8 / max(1, len(impls))
    fig, ax = plt.subplots(figsize=(2 + 2 * len(names), 4.5))
    for i, impl in enumerate(impls):
        xs, ys = [], []
        for j, name in enumerate(names):
            ms = shapes[name]["ms"].get(impl)
            if ms:
                xs.append(j + i * width)
                ys.append(shapes[name]["flops"] / ms / 1e9)
        bars = ax.bar(xs, ys, width, label=impl)
        ax.bar_label(bars, fmt="%.0f", fontsize=7)
    ceiling = sum(gemm) / len(gemm)
    ax.axhline(ceiling, ls="--", color="k", lw=1)
    ax.text(len(names) - 0.5, ceiling, f"bf16 GEMM {ceiling:.0f}", va="bottom", ha="right",
            fontsize=8)
    ax.set_xticks([j + width * (len(impls) - 1) / 2 for j in range(len(names))], names)
    ax.set_ylabel("TFLOP/s")
    ax.set_yscale("log")
    ax.set_title("sparse-MLA backward on H200")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
