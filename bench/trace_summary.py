#!/usr/bin/env python3
"""trace_summary.py FILE...: what a barrier-kernel timeline says.

FILE is what `build/tests/moe_phases --trace PREFIX` wrote
(PREFIX-SHAPE-T.txt): a line per CTA, its number, then its words in
microseconds from the first CTA's start (-1: not written). The words
(kernels/moe_kernel.h, HR__MOE_TRACE_*): 12 marks (start, routed, GEMM1
start, GEMM1 end, GEMM2 start, GEMM2 end, combine start, end, then thread
0's arrival at barriers 0, 1, 2, then the SM the CTA ran on: a number,
-1 in files written before it was), then the ends of each CTA's first 24
GEMM1 units, then of its first 24 GEMM2 units.

Prints, per file: each mark's earliest, median and latest time over the
CTAs; per GEMM stage, the median duration of each CTA's i-th unit (its
first from the stage's start mark) and how far apart the CTAs finished
their first unit; how long the CTAs waited at each barrier on average
(release seen minus own arrival); and which SMs ran the slowest and the
fastest CTAs (mean GEMM1 unit past the first). Standard library only.
"""
import statistics
import sys

MARKS = 12
UNITS = 24
NAMES = ["start", "routed", "GEMM1 start", "GEMM1 end", "GEMM2 start", "GEMM2 end",
         "combine start", "end", "arrived 0", "arrived 1", "arrived 2"]


def load(path):
    rows = []
    with open(path) as f:
        for line in f:
            if line.startswith("#") or not line.strip():
                continue
            words = [float(w) for w in line.split()[1:]]
            if len(words) < MARKS + 2 * UNITS:
                raise SystemExit(f"{path}: a line with {len(words)} words, "
                                 f"expected {MARKS + 2 * UNITS}")
            rows.append(words)
    if not rows:
        raise SystemExit(f"{path}: no CTA lines")
    return rows


def summary(path):
    rows = load(path)
    print(f"{path}: {len(rows)} CTAs")
    for i, name in enumerate(NAMES):
        v = sorted(r[i] for r in rows if r[i] >= 0)
        if v:
            print(f"  {name:13s} first {v[0]:9.1f}  median {statistics.median(v):9.1f}"
                  f"  last {v[-1]:9.1f} us")
    for stage, start in ((1, 2), (2, 4)):
        base = MARKS + (stage - 1) * UNITS
        durations = []
        for j in range(UNITS):
            d = [r[base + j] - (r[base + j - 1] if j else r[start]) for r in rows
                 if r[base + j] >= 0 and (j == 0 or r[base + j - 1] >= 0)]
            if not d:
                break
            durations.append(statistics.median(d))
        if not durations:
            print(f"  GEMM{stage}: no unit ends (a claimed or TMA stage)")
            continue
        first = sorted(r[base] for r in rows if r[base] >= 0)
        print(f"  GEMM{stage} units, median us: " + " ".join(f"{d:.1f}" for d in durations))
        print(f"  GEMM{stage} first unit ends from {first[0]:.1f} to {first[-1]:.1f} us")
    for b, release in ((0, 2), (1, 4), (2, 6)):
        w = [r[release] - r[MARKS - 4 + b] for r in rows
             if r[release] >= 0 and r[MARKS - 4 + b] >= 0]
        if w:
            print(f"  barrier {b}: mean wait {statistics.mean(w):.1f} us, "
                  f"longest {max(w):.1f}")
    pace = []
    for c, r in enumerate(rows):
        ends = [x for x in r[MARKS:MARKS + UNITS] if x >= 0]
        if len(ends) >= 3:
            pace.append(((ends[-1] - ends[0]) / (len(ends) - 1), c, int(r[MARKS - 1])))
    if len(pace) >= 2:
        pace.sort()
        show = lambda part: ", ".join(f"{t:.1f} (CTA {c}, SM {sm})" for t, c, sm in part)
        n = min(4, len(pace) // 2)
        print(f"  GEMM1 pace, us a unit: fastest {show(pace[:n])}")
        print(f"  GEMM1 pace, us a unit: slowest {show(pace[-n:][::-1])}")


def main():
    if len(sys.argv) < 2:
        print(__doc__.strip().splitlines()[0], file=sys.stderr)
        return 2
    for path in sys.argv[1:]:
        summary(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
