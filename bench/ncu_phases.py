"""Where a kernel's warps spend their time, phase by phase, from ncu's
source view: the SASS split at every BAR.SYNC, each piece with its share of
the warp-state samples, its executed instructions, the instruction kinds it
holds and its top stall reasons.

    ncu --set full -o rep ...                       (on the GPU machine)
    ncu -i rep.ncu-rep --page source --csv --print-source sass > sass.csv
    python3 bench/ncu_phases.py sass.csv
    python3 bench/ncu_phases.py --mix sass.csv      (the instruction mix)
    python3 bench/ncu_phases.py --warps sass.csv    (per warp set)

The mix lists executed warp instructions by opcode (predicates and
modifiers dropped), each with its share of the samples, and the share of
instructions that are the high halves of 64-bit integer arithmetic.

--warps splits the SASS instead into runs of instructions that the same
number of warps executed (e.g. all 16 warps, warpgroups 1-3, warpgroup 0
in a kernel whose warpgroups branch apart), merging runs shorter than 8
instructions into their neighbour; each run with its share of the
samples, the samples per executing warp (executed count / the count of
most of the step's instructions x 16; "outside" for code run less often than once a step,
such as the prologue) and its top stall reasons. Where warp sets run side
by side, the samples per warp compare their time.
"""

import collections
import csv
import re
import sys

KINDS = ["HGMMA", "RED", "LDGSTS", "MUFU", "STS", "LDS", "LDG", "STG", "SHFL", "F2FP", "BAR"]


def opcode(source: str) -> str:
    s = re.sub(r"^@!?U?P\w+\s+", "", source.strip())
    return s.split()[0] if s else ""


# The high halves of 64-bit integer arithmetic: carries (.X), extended
# compares (.EX), the high shifts and wide multiplies.
WIDE = re.compile(r"^(IMAD\.X|IADD3\.X|UIADD3\.X|LEA\.HI|ULEA\.HI|SHF\.[LR]\.U64|"
                  r"USHF\.[LR]\.U64|IMAD\.WIDE|UIMAD\.WIDE|ISETP\.\S*\.EX|"
                  r"SHF\.R\.S32\.HI)")


def mix(rows, top=20):
    """(opcode, executed, share of samples) for the `top` opcodes, the
    executed total, and the executed instructions matching WIDE."""
    header, data = rows[1], rows[2:]
    col = {h: i for i, h in enumerate(header)}
    executed, sampled = collections.Counter(), collections.Counter()
    total = wide = 0
    for r in data:
        n = int(r[col["Instructions Executed"]] or 0)
        op = opcode(r[1])
        base = op.split(".")[0]
        executed[base] += n
        sampled[base] += int(r[col["Warp Stall Sampling (All Samples)"]] or 0)
        total += n
        if WIDE.match(op):
            wide += n
    samples = sum(sampled.values()) or 1
    ops = [(o, n, sampled[o] / samples) for o, n in executed.most_common(top)]
    return ops, total, wide


def print_mix(rows) -> None:
    ops, total, wide = mix(rows)
    print(f"{total / 1e6:.1f} M warp instructions executed; "
          f"64-bit high halves {100 * wide / max(total, 1):.1f}%")
    for o, n, share in ops:
        print(f"  {o:12s} {n / 1e6:9.1f} M  {100 * n / max(total, 1):5.1f}%  "
              f"samples {100 * share:5.1f}%")


def main(path: str) -> None:
    rows = list(csv.reader(open(path)))
    header, data = rows[1], rows[2:]
    col = {h: i for i, h in enumerate(header)}
    stalls = [h for h in header if h.startswith("stall_") and "Not Issued" not in h]

    def samples(r):
        return int(r[col["Warp Stall Sampling (All Samples)"]] or 0)

    total = sum(samples(r) for r in data) or 1
    phases, current = [], []
    for i, r in enumerate(data):
        current.append((i, r))
        if opcode(r[1]).startswith("BAR"):
            phases.append(current)
            current = []
    phases.append(current)
    for phase in phases:
        share = sum(samples(r) for _, r in phase)
        executed = sum(int(r[col["Instructions Executed"]] or 0) for _, r in phase)
        kinds, reasons = collections.Counter(), collections.Counter()
        for _, r in phase:
            op = opcode(r[1])
            for k in KINDS:
                if op.startswith(k):
                    kinds[k] += 1
            for h in stalls:
                reasons[h[len("stall_"):]] += int(r[col[h]] or 0)
        top = ", ".join(f"{k} {v * 100 // max(share, 1)}%" for k, v in reasons.most_common(3))
        print(f"SASS {phase[0][0]:5d}-{phase[-1][0]:5d}  {share * 100 / total:5.1f}% of samples  "
              f"{executed / 1e6:8.2f} M executed  {dict(kinds)}  | {top}")


def warp_runs(rows, warps: int = 16, merge: int = 8):
    """[(first, last, warps, share of samples, [(stall reason, its share of
    the run's samples)] top 3)] for the
    runs of instructions that the same number of warps executed (0: less
    than once a step), runs shorter than `merge` joined to the previous."""
    header, data = rows[1], rows[2:]
    col = {h: i for i, h in enumerate(header)}
    stalls = [h for h in header if h.startswith("stall_") and "Not Issued" not in h]
    count = [int(r[col["Instructions Executed"]] or 0) for r in data]
    samples = [int(r[col["Warp Stall Sampling (All Samples)"]] or 0) for r in data]
    # All warps' count: the most frequent among the large ones (a loop's
    # branch can run once more per CTA than its body).
    top_half = [n for n in count if n * 2 >= max(count)]
    most = collections.Counter(top_half).most_common(1)[0][0] or 1
    total = sum(samples) or 1
    runs = []  # [first, last, count]
    for i, n in enumerate(count):
        if runs and runs[-1][2] == n:
            runs[-1][1] = i
        else:
            runs.append([i, i, n])
    joined = []  # short runs, and runs of the same number of warps, joined
    for run in runs:
        if joined and (run[1] - run[0] + 1 < merge or
                       round(warps * joined[-1][2] / most) == round(warps * run[2] / most)):
            joined[-1][1] = run[1]
        else:
            joined.append(run)
    out = []
    for first, last, n in joined:
        share = sum(samples[first:last + 1]) / total
        reasons = collections.Counter()
        for r in data[first:last + 1]:
            for h in stalls:
                reasons[h[len("stall_"):]] += int(r[col[h]] or 0)
        run_samples = sum(samples[first:last + 1]) or 1
        top = [(k, v / run_samples) for k, v in reasons.most_common(3)]
        out.append((first, last, round(warps * n / most), share, top))
    return out


def warp_sets(path: str) -> None:
    for first, last, w, share, top in warp_runs(list(csv.reader(open(path)))):
        if share < 0.001:
            continue
        who = f"{w:2d} warps" if w else "outside  "  # e.g. once per CTA, not per step
        per = f"{share * 100 / w:5.2f}% per warp" if w else " " * 16
        reasons = ", ".join(f"{k} {int(v * 100)}%" for k, v in top)
        print(f"SASS {first:5d}-{last:5d}  {who}  {share * 100:5.1f}% of samples  {per}  | {reasons}")


if __name__ == "__main__":
    if sys.argv[1] == "--mix":
        print_mix(list(csv.reader(open(sys.argv[2]))))
    elif sys.argv[1] == "--warps":
        warp_sets(sys.argv[2])
    else:
        main(sys.argv[1])
