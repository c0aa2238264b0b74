#!/usr/bin/env python3
"""ncu_lines.py: where a kernel's time goes by CUDA source line, from
Nsight Compute's source page. For each report's CSV (`ncu -i REP --page
source --csv --print-source sass,cuda`, optionally gzipped) it prints the
warp stall samples by reason, the source lines with the most samples
(and their two main reasons), and the lines with the most warp
instructions executed. Build with `make NVCC_EXTRA=-lineinfo` so the
samples map to lines.

    python3 bench/ncu_lines.py bar-src.csv.gz agn-src.csv.gz
    python3 bench/ncu_lines.py --reason stall_no_inst bar-src.csv.gz
"""
import argparse
import collections
import csv
import gzip


def load(path):
    """Rows of the CUDA source lines: (file, line, source, {column: value})."""
    opener = gzip.open if path.endswith(".gz") else open
    rows, src_file, header = [], None, None
    with opener(path, "rt") as f:
        for r in csv.reader(f):
            if not r:
                continue
            if r[0] == "File Path":
                src_file, header = r[1].split("/")[-1], None
            elif r[0] == "Function Name":
                continue
            elif r[0] == "Line No":
                header = r
            elif header and r[0]:          # a source line, not a SASS row
                rows.append((src_file, int(r[0]), r[1].strip(),
                             dict(zip(header[4:], r[4:]))))
    return header or [], rows


def num(x):
    try:
        return float(x)
    except (TypeError, ValueError):
        return 0.0


def by_one_reason(name, rows, reason, top):
    """The lines with the most samples of one stall reason."""
    total = sum(num(d.get(reason)) for *_, d in rows)
    print("%s: %.0f samples of %s" % (name, total, reason))
    for f, line, src, d in sorted(rows, key=lambda x: -num(x[3].get(reason)))[:top]:
        v = num(d.get(reason))
        if v <= 0:
            break
        print("  %5.1f%% %6.0f %-18s %5d %s" % (100 * v / (total or 1.0), v, f, line, src[:70]))


def report(name, header, rows, top):
    stalls = [h for h in header if h.startswith("stall_")]
    samples = "Warp Stall Sampling (All Samples)"
    total = sum(num(d.get(samples)) for *_, d in rows) or 1.0
    by_reason = collections.Counter()
    for *_, d in rows:
        for s in stalls:
            by_reason[s] += num(d.get(s))
    print("%s: %.0f stall samples" % (name, total))
    for s, v in by_reason.most_common(8):
        print("  %-28s %8.0f %5.1f%%" % (s, v, 100 * v / total))
    for f, line, src, d in sorted(rows, key=lambda x: -num(x[3].get(samples)))[:top]:
        main = sorted(((num(d.get(s)), s) for s in stalls), reverse=True)[:2]
        print("  %5.1f%% %-18s %5d %-60s %s" % (
            100 * num(d.get(samples)) / total, f, line, src[:60],
            ", ".join("%s %.0f" % (s[6:], v) for v, s in main)))
    insts = sum(num(d.get("Instructions Executed")) for *_, d in rows) or 1.0
    print("%s: %.3g warp instructions executed" % (name, insts))
    for f, line, src, d in sorted(rows, key=lambda x: -num(x[3].get("Instructions Executed")))[:top]:
        v = num(d.get("Instructions Executed"))
        print("  %6.2f%% %10.0f %-18s %5d %s" % (100 * v / insts, v, f, line, src[:70]))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("csv", nargs="+", help="ncu source-page CSV (.csv or .csv.gz)")
    ap.add_argument("--top", type=int, default=22, help="lines to list (22)")
    ap.add_argument("--reason", metavar="COLUMN",
                    help="list only the lines with the most samples of this stall "
                         "reason (a column such as stall_no_inst)")
    args = ap.parse_args()
    for path in args.csv:
        header, rows = load(path)
        if args.reason:
            if args.reason not in header:
                raise SystemExit("%s: no column %s (stall columns: %s)" % (
                    path, args.reason,
                    ", ".join(h for h in header if h.startswith("stall_"))))
            by_one_reason(path, rows, args.reason, args.top)
        else:
            report(path, header, rows, args.top)


if __name__ == "__main__":
    main()
