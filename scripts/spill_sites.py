"""Where a cubin's register spills sit: in the step loop or outside it.

smla-compile refuses a kernel that spills unless its configuration accepts
the bytes (`max_spill`); a spill is cheap only where it runs once per CTA,
outside the loop over the top-k blocks. This reads the SASS (`cuobjdump
-sass`) of each function and counts its local-memory instructions (STL,
LDL) inside the step loops:

    python3 scripts/spill_sites.py [--cuobjdump PATH] [--function SUFFIX] CUBIN...
    python3 scripts/spill_sites.py --find     (print the cuobjdump it uses)

cuobjdump comes from PATH, the CUDA toolkit, or NVIDIA's wheels
`nvidia-cuda-cuobjdump` and `nvidia-cuda-nvdisasm` (scripts/install-deps.sh
installs them). A step loop is an outermost backward branch before the
function's last EXIT whose body holds a matrix instruction (HGMMA, HMMA)
or an asynchronous copy (LDGSTS): the loop over the top-k blocks, one per
warpgroup role in the warp-specialized kernels (the producer's gathers,
the consumers' products); a prologue loop (Delta's) is not one. Blocks
after that EXIT (ptxas's cold paths, such as an mbarrier wait's retry)
belong where their closing unconditional branch returns. Prints one line
per function with spills, `<function>: <n> spill instructions, <m> in the
step loop [head, back edge] ...`; exits 1 if any function has a spill in
a step loop.
"""

import argparse
import glob
import importlib.util
import os
import re
import shutil
import subprocess
import sys

LINE = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;")
FUNCTION = re.compile(r"Function : (\S+)")
BRANCH = re.compile(r"^(@!?U?P\w+\s+)?BRA(?:\.\S+)?\s+0x([0-9a-f]+)")
SPILL = re.compile(r"^(@!?U?P\w+\s+)?(STL|LDL)\b")


def find_cuobjdump():
    """cuobjdump from PATH, /usr/local/cuda, or the nvidia-cuda-cuobjdump
    wheel; None if there is none."""
    found = [shutil.which("cuobjdump"), "/usr/local/cuda/bin/cuobjdump"]
    spec = importlib.util.find_spec("nvidia")
    for root in (spec.submodule_search_locations if spec else []):
        found += sorted(glob.glob(os.path.join(root, "cu*", "bin", "cuobjdump")))
    return next((p for p in found if p and os.access(p, os.X_OK)), None)


def functions(sass: str):
    """{name: [(address, instruction)]} of a `cuobjdump -sass` listing."""
    out, name = {}, None
    for line in sass.splitlines():
        if m := FUNCTION.search(line):
            name = m.group(1)
            out[name] = []
        elif name and (m := LINE.search(line)):
            out[name].append((int(m.group(1), 16), m.group(2)))
    return out


WORK = re.compile(r"^(@!?U?P\w+\s+)?(HGMMA|HMMA|LDGSTS)\b")


def step_loops(instrs):
    """The (head, back edge) of every step loop (outermost backward branches
    before the last EXIT whose bodies hold block work), in address order,
    and the last EXIT's address."""
    exits = [a for a, text in instrs if re.match(r"^(@!?P\w+\s+)?EXIT\b", text)]
    last_exit = max(exits) if exits else float("inf")
    loops = []
    for addr, text in instrs:
        m = BRANCH.match(text)
        if m and addr < last_exit and int(m.group(2), 16) < addr:
            loops.append((int(m.group(2), 16), addr))
    outer = [l for l in loops
             if not any(o != l and o[0] <= l[0] and l[1] <= o[1] for o in loops)]
    work = [a for a, text in instrs if WORK.match(text)]
    return sorted(l for l in set(outer) if any(l[0] <= a <= l[1] for a in work)), last_exit


def spill_sites(instrs):
    """(spill count, spills in the step loops, the loops)."""
    loops, last_exit = step_loops(instrs)
    inside = lambda a: any(h <= a <= e for h, e in loops)
    total = in_loop = 0
    cold = 0  # spills of the current cold block, placed by its last branch
    for addr, text in instrs:
        spill = bool(SPILL.match(text))
        total += spill
        if addr < last_exit:
            in_loop += spill and inside(addr)
            continue
        cold += spill
        m = BRANCH.match(text)
        if m and not m.group(1):  # unconditional: the block returns there
            in_loop += cold if inside(int(m.group(2), 16)) else 0
            cold = 0
    return total, in_loop, loops


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("cubins", nargs="*")
    ap.add_argument("--cuobjdump", default=None)
    ap.add_argument("--function", default="", help="only functions ending in this")
    ap.add_argument("--find", action="store_true", help="print the cuobjdump used")
    args = ap.parse_args()
    tool = args.cuobjdump or find_cuobjdump()
    if args.find or not tool:
        print(tool or "no cuobjdump (pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm)")
        return 0 if tool else 1
    bad = 0
    for cubin in args.cubins:
        # cuobjdump runs nvdisasm, which the wheels put next to it.
        env = dict(os.environ, PATH=os.path.dirname(tool) + os.pathsep +
                   os.environ.get("PATH", ""))
        sass = subprocess.run([tool, "-sass", cubin], check=True, env=env,
                              capture_output=True, text=True).stdout
        for name, instrs in functions(sass).items():
            if not name.endswith(args.function):
                continue
            total, in_loop, loops = spill_sites(instrs)
            if not total:
                continue
            where = " ".join(f"[{h:#x}, {e:#x}]" for h, e in loops) or "(no loop)"
            print(f"{name}: {total} spill instructions, {in_loop} in the step loop {where}")
            bad += in_loop > 0
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
