"""Static SASS statistics of a kernel library's bwd kernels: how many
instructions each has, and how many of them are of the kinds the
performance notes track (docs/performance.md): uniform-register moves
(R2UR), the high halves of 64-bit integer arithmetic, warpgroup MMAs, global
reductions and convergence barriers. Static counts are a proxy (a loop body
counts once); ncu's source view (bench/ncu_phases.py --mix) gives the
executed ones.

    python3 bench/sass_stats.py build/kernels [OTHER_LIBRARY ...]

Needs cuobjdump: on PATH, in /usr/local/cuda/bin, in $SMLA_CUOBJDUMP, or
from the PyPI wheel nvidia-cuda-cuobjdump (python3 -m pip download
--no-deps nvidia-cuda-cuobjdump; unzip; nvidia/cu13/bin/cuobjdump). With
several libraries, each kernel's line shows them side by side.
"""

from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess
import sys
from typing import Dict, List

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ncu_phases import WIDE  # noqa: E402  (one definition of the 64-bit high halves)

# Instruction lines of cuobjdump -sass: "/*0a40*/  [@P0] OPCODE ... ;".
INSTRUCTION = re.compile(r"^\s+/\*[0-9a-f]{4,}\*/\s+(@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)")
KINDS = {
    "R2UR": re.compile(r"^R2UR"),
    "wide": WIDE,
    "HGMMA": re.compile(r"^HGMMA"),
    "REDG": re.compile(r"^REDG"),
    "BSSY": re.compile(r"^BSSY"),
}


def stats(sass: str) -> Dict[str, int]:
    """Counts of one kernel's disassembly: "instructions" and each KINDS."""
    out = {"instructions": 0, **{k: 0 for k in KINDS}}
    for line in sass.splitlines():
        m = INSTRUCTION.match(line)
        if not m:
            continue
        op = m.group(2)
        out["instructions"] += 1
        for kind, pattern in KINDS.items():
            if pattern.match(op):
                out[kind] += 1
    return out


def cuobjdump() -> str:
    for candidate in (os.environ.get("SMLA_CUOBJDUMP"), shutil.which("cuobjdump"),
                      "/usr/local/cuda/bin/cuobjdump"):
        if candidate and os.path.exists(candidate):
            return candidate
    try:
        import nvidia  # the PyPI CUDA wheels' namespace package
        for root in nvidia.__path__:
            found = glob.glob(os.path.join(root, "cu*", "bin", "cuobjdump"))
            if found:
                return found[0]
    except ImportError:
        pass
    sys.exit("sass_stats: no cuobjdump (set SMLA_CUOBJDUMP; see the module docstring)")


def library(path: str, tool: str) -> Dict[str, Dict[str, int]]:
    """{kernel: stats} for every bwd kernel of the library at `path`."""
    out = {}
    for cubin in sorted(glob.glob(os.path.join(path, "*.cubin"))):
        name = os.path.basename(cubin)[: -len(".cubin")]
        sass = subprocess.run([tool, "-sass", "-fun", name + "_bwd", cubin],
                              capture_output=True, text=True, check=True).stdout
        out[name] = stats(sass)
    return out


def main(paths: List[str]) -> None:
    tool = cuobjdump()
    libs = [library(p, tool) for p in paths]
    cols = ["instructions"] + list(KINDS)
    print("kernel".ljust(52) + "  ".join(f"{c:>{9 * len(libs) - 1}}" for c in cols))
    for name in libs[0]:
        cells = []
        for c in cols:
            cells.append(" ".join(f"{lib[name][c]:>8}" if name in lib else f"{'-':>8}"
                                  for lib in libs))
        print(name.replace("smla_d512_dt64_", "")[:50].ljust(52) + "  ".join(cells))


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv[1:])
