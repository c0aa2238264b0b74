#!/usr/bin/env python3
"""ab_table.py [--variant NAME] LABEL=FILE[,FILE...] LABEL=FILE...: builds side by side.

Each FILE is what `moe_phases --out FILE` wrote (bench/moe_phases.c): a
markdown table with a row per shape, T, kernel and GEMM variant, its
milliseconds the fifth column. A LABEL names one build and its FILEs, one
a run (`make bench-ab` runs the builds in turn, so run r of every build
shares the machine's state). Prints one markdown table: per shape, T and
kernel, each build's times run by run, and each build after the first as
the ratio of its median to the first build's (below 1: faster). A cell
that a build has no time for reads "-". Only the variant NAME's rows
count ("default" unless given).

A FILE that cannot be read, or that has no row of that variant, is named
with the reason, and nothing is printed: exit 2. Standard library only.
"""
import statistics
import sys


def parse_args(argv):
    variant, builds = "default", []
    args = list(argv)
    while args:
        a = args.pop(0)
        if a == "--variant":
            if not args:
                raise ValueError("--variant needs a NAME")
            variant = args.pop(0)
        elif "=" in a and not a.startswith("="):
            label, files = a.split("=", 1)
            paths = [p for p in files.split(",") if p]
            if not paths:
                raise ValueError(f"{a}: no FILE after the '='")
            builds.append((label, paths))
        else:
            raise ValueError(f"{a}: not LABEL=FILE[,FILE...]")
    if len(builds) < 2:
        raise ValueError("two builds or more (LABEL=FILE...) to compare")
    return variant, builds


def read_times(path, variant):
    """{(shape, T, kernel): ms} from one moe_phases output file."""
    times = {}
    with open(path) as f:
        for line in f:
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if len(cells) < 5 or cells[3] != variant:
                continue
            try:
                key = (cells[0], int(cells[1]), cells[2])
                times[key] = float(cells[4])
            except ValueError:
                continue
    if not times:
        raise ValueError(f"{path}: no row of variant '{variant}' "
                         "(is it moe_phases --out output?)")
    return times


def table(variant, builds):
    runs = [(label, [read_times(p, variant) for p in paths]) for label, paths in builds]
    keys = set()
    for _, files in runs:
        for t in files:
            keys.update(t)
    # shapes in their first appearance's order, then T, barrier first
    order = {}
    for _, files in runs:
        for t in files:
            for k in t:
                order.setdefault(k[0], len(order))
    keys = sorted(keys, key=lambda k: (order[k[0]], k[1], k[2] != "barrier", k[2]))
    base = runs[0][0]
    head = ["shape", "T", "kernel"] + [f"{label} ms" for label, _ in runs] + \
           [f"{label} / {base}" for label, _ in runs[1:]]
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for k in keys:
        cells = [k[0], str(k[1]), k[2]]
        medians = []
        for _, files in runs:
            ms = [t[k] for t in files if k in t]
            cells.append(" / ".join(f"{m:.3f}" for m in ms) if ms else "-")
            medians.append(statistics.median(ms) if ms else None)
        for m in medians[1:]:
            ok = m is not None and medians[0]
            cells.append(f"{m / medians[0]:.3f}" if ok else "-")
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out)


def main(argv):
    try:
        variant, builds = parse_args(argv)
        text = table(variant, builds)
    except (OSError, ValueError) as e:
        print(f"ab_table.py: {e}", file=sys.stderr)
        print(__doc__.splitlines()[0], file=sys.stderr)
        return 2
    print(f"Variant '{variant}', ms per run; ratio of medians against {builds[0][0]}.\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
