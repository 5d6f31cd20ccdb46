"""Where a kernel's warps spend their time, phase by phase, from ncu's
source view: the SASS split at every BAR.SYNC, each piece with its share of
the warp-state samples, its executed instructions, the instruction kinds it
holds and its top stall reasons.

    ncu --set full -o rep ...                       (on the GPU machine)
    ncu -i rep.ncu-rep --page source --csv --print-source sass > sass.csv
    python3 bench/ncu_phases.py sass.csv
    python3 bench/ncu_phases.py --mix sass.csv      (the instruction mix)

The mix lists executed warp instructions by opcode (predicates and
modifiers dropped), each with its share of the samples, and the share of
instructions that are the high halves of 64-bit integer arithmetic.
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


if __name__ == "__main__":
    if sys.argv[1] == "--mix":
        print_mix(list(csv.reader(open(sys.argv[2]))))
    else:
        main(sys.argv[1])
