#!/usr/bin/env python3
"""trace_summary.py FILE...: what a kernel's timeline says.

FILE is what `build/tests/moe_phases --trace PREFIX` wrote
(PREFIX-SHAPE-T.txt): a line per CTA, its number, then its words in
microseconds from the first CTA's start (-1: not written). The words
(kernels/moe_kernel.h, HR__MOE_TRACE_*): 12 marks (start, routed, GEMM1
start, GEMM1 end, GEMM2 start, GEMM2 end, combine start, end, then thread
0's arrival at barriers 0, 1, 2, then the SM the CTA ran on: a number,
-1 in files written before it was), then the ends of each CTA's first 24
GEMM1 units, then of its first 24 GEMM2 units. The agnostic kernel's
timeline (PREFIX-agnostic-SHAPE-T.txt, from a build with
HR__MOE_TRACE_AGN) has the same words but no barrier arrivals: GEMM1
start is the CTA's first GEMM1 run's start, GEMM1 end its last run's
end, the same for GEMM2, and its unit ends are its first units in the
order it ran them.

Prints, per file: each mark's earliest, median and latest time over the
CTAs; per GEMM stage, the median duration of each CTA's i-th unit (its
first from the stage's start mark), how far apart the CTAs finished
their first unit, and how much longer the first took than the middle
units (neither the first nor the last); how long the CTAs waited at each barrier on average
(release seen minus own arrival), or, in a timeline without barrier
arrivals (the agnostic kernel's), the gaps between a CTA's stages
(routed to GEMM1 start, GEMM1 end to GEMM2 start, GEMM2 end to combine
start: its waits for other CTAs' tasks, and the time it held no task of
the stage); and which SMs ran the slowest and the
fastest CTAs (mean GEMM1 unit past the first), and every SM's pace in
the order of the SMs' numbers. A claimed stage of more units than the
words keeps each CTA's last units (unit u in word u % 24): for it, the
median durations counted from the end, and the last units of the three
CTAs that ended last.

Beside FILE, moe_phases writes FILE's SM clocks (FILE less .txt, then
-clocks.txt: the same words in thousands of SM cycles from the CTA's
start mark). When that file is there, it also prints each stage's SM
clock in GHz, median and lowest over the CTAs, over its first unit and
over the rest: an SM that stalls keeps its clock, one that is halted
does not. A build for a diagnostic (HR__MOE_TRACE_INNER) also writes
FILE's inner marks (-inner.txt): then it prints, per stage, when each
step of the first unit's end finished after its last K step (drained,
staged, stored, end, next unit decoded, and the last warp's drain and
staging writes), and when its start's steps did after the CTA's start
of the stage (loader set up, first steps issued, K steps 0, 1, 2, 4, 8,
16 landed). A build with HR__MOE_TRACE_ROUTE writes the routing's steps
there instead (from the line's second half, no stage's marks before
it): then it prints when the CTAs were past
each (counted, placed, tiled, and the agnostic kernel's piece
published), median and range. Clock and inner files named as arguments
are read as companions only.

The words' layout is read from kernels/moe_kernel.h beside this script
(its HR__MOE_TRACE_*, HR__MOE_MARK_*, HR__MOE_INNER_* and
HR__MOE_ROUTE_MARK_* definitions), the one place it is written; the
names printed here are checked against it, and a header that disagrees
with them stops the script with what differs.
Standard library only.
"""
import os
import re
import statistics
import sys

HEADER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "kernels",
                      "moe_kernel.h")


def read_layout(path=HEADER):
    """{name: value} of the header's integer #defines and enum members
    (an enum member's value: its own, or one past the one before)."""
    with open(path) as f:
        text = re.sub(r"/\*.*?\*/", " ", f.read(), flags=re.S)
    values = {}

    def value(expr):
        expr = expr.strip()
        for name in sorted(values, key=len, reverse=True):
            expr = re.sub(rf"\b{name}\b", str(values[name]), expr)
        if not re.fullmatch(r"[0-9+\-*() <]+", expr):
            raise ValueError(f"{path}: cannot evaluate '{expr}'")
        return int(eval(expr))                 # digits and operators only

    for m in re.finditer(r"#define\s+(HR__MOE_\w+)\s+(\(?[0-9][0-9 +*()]*)$", text, re.M):
        values[m.group(1)] = value(m.group(2))
    for m in re.finditer(r"\benum\s*\{(.*?)\}", text, re.S):
        nxt = 0
        for item in filter(None, (i.strip() for i in m.group(1).split(","))):
            name, _, expr = item.partition("=")
            nxt = value(expr) if expr else nxt
            values[name.strip()] = nxt
            nxt += 1
    return values


def check_layout(layout):
    """The names below against the header's layout: a list of what
    differs (empty: they agree)."""
    want = [("HR__MOE_MARK_SM", len(NAMES)),
            ("HR__MOE_MARK_ARRIVED", NAMES.index("arrived 0")),
            ("HR__MOE_INNER_STEP", len(INNER_NAMES)),
            ("HR__MOE_INNER_INIT", len(INNER_NAMES) + len(INNER_STEPS)),
            ("HR__MOE_INNER_MARKS", len(INNER_NAMES) + len(INNER_STEPS) +
             len(INNER_START_NAMES)),
            ("HR__MOE_ROUTE_MARK_PUBLISHED", len(ROUTE_NAMES) - 1)]
    bad = [f"{name} is {layout.get(name)}, the names here make it {n}"
           for name, n in want if layout.get(name) != n]
    if layout.get("HR__MOE_TRACE_MARKS") != layout.get("HR__MOE_MARK_SM", -2) + 1:
        bad.append("HR__MOE_TRACE_MARKS is not one past HR__MOE_MARK_SM")
    return bad


# the diagnostic build's inner marks (moe_kernel.h, HR__MOE_INNER_*): a
# stage's words are half a line's (16 words a line in files written
# before the step marks, HR__MOE_TRACE_INNER_WORDS since)
INNER_MIN_WORDS = 16
INNER_NAMES = ["last step", "drained", "staged", "stored", "end", "decoded",
               "drained (last warp)", "written (last warp)"]
# from word len(INNER_NAMES): the first unit's K steps that landed
INNER_STEPS = [0, 1, 2, 4, 8, 16]
# then the stage's loader set up, its first steps issued
INNER_START_NAMES = ["loader set up", "first steps issued"]
# a routing-marks build's, from the second half of a line (HR__MOE_ROUTE_MARK_*)
ROUTE_NAMES = ["counted", "placed", "tiled", "published"]
NAMES = ["start", "routed", "GEMM1 start", "GEMM1 end", "GEMM2 start", "GEMM2 end",
         "combine start", "end", "arrived 0", "arrived 1", "arrived 2"]

try:
    LAYOUT = read_layout()
except (OSError, ValueError) as e:
    sys.exit(f"trace_summary.py: the timeline's layout: {e}")
_BAD = check_layout(LAYOUT)
if _BAD:
    sys.exit(f"trace_summary.py: {HEADER} and this script disagree: " + "; ".join(_BAD))
MARKS = LAYOUT["HR__MOE_TRACE_MARKS"]           # the marks, the SM word last
UNITS = LAYOUT["HR__MOE_TRACE_UNITS"]           # unit ends a stage
ARRIVED = LAYOUT["HR__MOE_MARK_ARRIVED"]        # + barrier: thread 0's arrival
SM_WORD = LAYOUT["HR__MOE_MARK_SM"]             # the CTA's SM, + 1


def load(path, expected=MARKS + 2 * UNITS):
    rows = []
    with open(path) as f:
        for line in f:
            if line.startswith("#") or not line.strip():
                continue
            words = [float(w) for w in line.split()[1:]]
            if len(words) < expected:
                raise SystemExit(f"{path}: a line with {len(words)} words, "
                                 f"expected {expected}")
            rows.append(words)
    if not rows:
        raise SystemExit(f"{path}: no CTA lines")
    return rows


def clock_rates(rows, clocks, claimed):
    """Per GEMM stage that is not `claimed` (wrapped), the CTAs' SM clocks
    in GHz (kilocycles per us) over the first unit and over the units past
    it."""
    for stage, start in ((1, 2), (2, 4)):
        base = MARKS + (stage - 1) * UNITS
        first, rest = [], []
        if claimed[stage]:
            continue
        for r, k in zip(rows, clocks):
            ends = [j for j in range(UNITS) if r[base + j] >= 0 and k[base + j] >= 0]
            if not ends or r[start] < 0 or k[start] < 0:
                continue
            u0, last = base + ends[0], base + ends[-1]
            if r[u0] > r[start]:
                first.append((k[u0] - k[start]) / (r[u0] - r[start]))
            if r[last] > r[u0]:
                rest.append((k[last] - k[u0]) / (r[last] - r[u0]))
        for name, v in (("first unit", first), ("the rest", rest)):
            if v:
                print(f"  GEMM{stage} SM clock, {name}: median {statistics.median(v):.3f}"
                      f" GHz, lowest {min(v):.3f}")


def inner_marks(inner, rows):
    """The inner marks of each stage's first unit (a diagnostic build's
    -inner.txt): each step of its end, in us after its last K step; and,
    where the file has them, when its K steps 0, 1, 2, 4, 8, 16 landed, in
    us after the CTA's own start of the stage (rows: the timeline's)."""
    width = len(inner[0]) // 2
    for stage in (1, 2):
        base = (stage - 1) * width
        parts = []
        for k, name in enumerate(INNER_NAMES[1:width], 1):
            d = [r[base + k] - r[base] for r in inner if r[base] >= 0 and r[base + k] >= 0]
            if d:
                parts.append(f"{name} {statistics.median(d):.1f} (max {max(d):.1f})")
        if parts:
            print(f"  GEMM{stage} first unit's end, us after its last step, median: "
                  + ", ".join(parts))
        start = NAMES.index(f"GEMM{stage} start")
        starts = [(name, len(INNER_NAMES) + len(INNER_STEPS) + i)
                  for i, name in enumerate(INNER_START_NAMES)]
        steps = [(f"step {step} landed", len(INNER_NAMES) + i)
                 for i, step in enumerate(INNER_STEPS)]
        parts = []
        for name, k in starts + steps:     # words past the stage's: an older file
            d = [r[base + k] - t[start] for r, t in zip(inner, rows)
                 if k < width and r[base + k] >= 0 and t[start] >= 0]
            if d:
                parts.append(f"{name} {statistics.median(d):.1f}")
        if parts:
            print(f"  GEMM{stage} first unit's start, us after the stage's start, "
                  "median: " + ", ".join(parts))


def route_marks(inner):
    """The routing's steps (a HR__MOE_TRACE_ROUTE build's -inner.txt),
    when no stage's inner marks are there: when the CTAs were past each,
    us from the first start. 1 if printed."""
    width = len(inner[0]) // 2
    if any(x >= 0 for r in inner for x in r[:width]):
        return 0
    parts = []
    for k, name in enumerate(ROUTE_NAMES):
        v = sorted(r[width + k] for r in inner if r[width + k] >= 0)
        if v:
            parts.append(f"{name} {statistics.median(v):.1f} ({v[0]:.1f}-{v[-1]:.1f})")
    if parts:
        print("  routing steps, us, median (first-last): " + ", ".join(parts))
    return 1 if parts else 0


def wrapped(rows, base):
    """Whether some CTA's unit ends are out of order: a claimed stage of
    more units than words, whose last units wrapped around."""
    for r in rows:
        ends = [x for x in r[base:base + UNITS] if x >= 0]
        if any(b < a for a, b in zip(ends, ends[1:])):
            return True
    return False


def claimed_tail(rows, base, stage):
    """A wrapped stage: each CTA's last units, counted from its end."""
    tails = [sorted(x for x in r[base:base + UNITS] if x >= 0) for r in rows]
    last = [t[-1] for t in tails if t]
    print(f"  GEMM{stage}: the last {UNITS} units of each CTA (a claimed stage)")
    durations = []
    for k in range(1, UNITS):
        d = [t[-k] - t[-k - 1] for t in tails if len(t) > k]
        if not d:
            break
        durations.append(statistics.median(d))
    print(f"  GEMM{stage} units from the last back, median us: "
          + " ".join(f"{d:.1f}" for d in durations[:8]))
    print(f"  GEMM{stage} last unit ends from {min(last):.1f} to {max(last):.1f} us,"
          f" median {statistics.median(last):.1f}")
    late = sorted(range(len(tails)), key=lambda c: tails[c][-1] if tails[c] else -1)[-3:]
    for c in reversed(late):
        t = tails[c]
        print(f"  GEMM{stage} CTA {c} (SM {int(rows[c][SM_WORD])}): its last units, us: "
              + " ".join(f"{b - a:.1f}" for a, b in zip(t[-6:], t[-5:])))


def companion(path, suffix):
    """FILE less .txt, then SUFFIX.txt, when that file is there."""
    other = path[:-4] + suffix + ".txt" if path.endswith(".txt") else None
    return other if other and os.path.exists(other) else None


def summary(path):
    rows = load(path)
    claimed = {stage: wrapped(rows, MARKS + (stage - 1) * UNITS) for stage in (1, 2)}
    print(f"{path}: {len(rows)} CTAs")
    for i, name in enumerate(NAMES):
        v = sorted(r[i] for r in rows if r[i] >= 0)
        if v:
            print(f"  {name:13s} first {v[0]:9.1f}  median {statistics.median(v):9.1f}"
                  f"  last {v[-1]:9.1f} us")
    for stage, start in ((1, 2), (2, 4)):
        base = MARKS + (stage - 1) * UNITS
        if claimed[stage]:
            claimed_tail(rows, base, stage)
            continue
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
        if len(durations) >= 3:      # the last unit is often a part one
            middle = statistics.median(durations[1:-1])
            print(f"  GEMM{stage} first unit over the middle units' median: "
                  f"{durations[0] - middle:+.1f} us")
    for b, release in ((0, 2), (1, 4), (2, 6)):
        w = [r[release] - r[ARRIVED + b] for r in rows
             if r[release] >= 0 and r[ARRIVED + b] >= 0]
        if w:
            print(f"  barrier {b}: mean wait {statistics.mean(w):.1f} us, "
                  f"longest {max(w):.1f}")
    if not any(r[ARRIVED + b] >= 0 for r in rows for b in range(3)):
        for a, b, name in ((1, 2, "routed to GEMM1 start"), (3, 4, "GEMM1 end to GEMM2 start"),
                           (5, 6, "GEMM2 end to combine start")):
            w = [r[b] - r[a] for r in rows if r[a] >= 0 and r[b] >= 0]
            if w:
                print(f"  {name}: mean {statistics.mean(w):.1f} us, longest {max(w):.1f}"
                      f" ({len(w)} CTAs)")
    pace = []
    for c, r in enumerate(rows if not claimed[1] else []):
        ends = [x for x in r[MARKS:MARKS + UNITS] if x >= 0]
        if len(ends) >= 3:
            pace.append(((ends[-1] - ends[0]) / (len(ends) - 1), c, int(r[SM_WORD])))
    if len(pace) >= 2:
        pace.sort()
        show = lambda part: ", ".join(f"{t:.1f} (CTA {c}, SM {sm})" for t, c, sm in part)
        n = min(4, len(pace) // 2)
        print(f"  GEMM1 pace, us a unit: fastest {show(pace[:n])}")
        print(f"  GEMM1 pace, us a unit: slowest {show(pace[-n:][::-1])}")
        by_sm = sorted((sm, t) for t, c, sm in pace if sm >= 0)
        for i in range(0, len(by_sm), 12):
            part = by_sm[i:i + 12]
            print(f"  GEMM1 pace by SM, {part[0][0]:3d}-{part[-1][0]:3d}: "
                  + " ".join(f"{t:.1f}" for sm, t in part))
    clock_path = companion(path, "-clocks")
    if clock_path:
        clocks = load(clock_path)
        if len(clocks) != len(rows):
            raise SystemExit(f"{clock_path}: {len(clocks)} CTA lines, {path} has {len(rows)}")
        clock_rates(rows, clocks, claimed)
    inner_path = companion(path, "-inner")
    if inner_path:
        inner = load(inner_path, INNER_MIN_WORDS)
        if inner and not route_marks(inner):
            inner_marks(inner, rows)


def main():
    if len(sys.argv) < 2:
        print(__doc__.strip().splitlines()[0], file=sys.stderr)
        return 2
    for path in sys.argv[1:]:
        if not path.endswith(("-clocks.txt", "-inner.txt")):
            summary(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
