#!/usr/bin/env python3
"""ncu_compare.py: kernels of Nsight Compute reports side by side.

Each argument is a report's details page as CSV (`ncu -i REP --page
details --csv`, optionally gzipped), one row per (kernel, section,
metric). Prints one markdown table: a row per (section, metric) that any
kernel has, a column per kernel launch, in the order of the files and of
the launches in each file; a metric a kernel lacks reads "-". Units go in
the metric's cell. bench/profile_vs_triton.sh makes the reports.

    python3 bench/ncu_compare.py ours.csv triton.csv > compare.md
"""
import argparse
import csv
import gzip
import sys


def load(path):
    """[(kernel label, {(section, metric): "value unit"})] in launch order."""
    opener = gzip.open if path.endswith(".gz") else open
    launches, order = {}, []
    with opener(path, "rt", newline="") as f:
        rows = csv.reader(f)
        header = None
        for r in rows:
            if not r:
                continue
            if header is None:
                if "Metric Name" in r and "Kernel Name" in r:
                    header = {name: i for i, name in enumerate(r)}
                continue                # ncu's own lines before the header
            get = lambda name: (r[header[name]] if name in header and
                                header[name] < len(r) else "")
            if not get("Metric Name"):
                continue                # a rule's advice, not a metric
            key = get("ID")
            if key not in launches:
                name = get("Kernel Name")
                label = "%s #%s: %s" % (path.rsplit("/", 1)[-1], key, short(name))
                launches[key] = (label, {})
                order.append(key)
            unit = get("Metric Unit")
            value = get("Metric Value") + (" " + unit if unit else "")
            launches[key][1][(get("Section Name"), get("Metric Name"))] = value
    if header is None:
        raise ValueError("%s: no details header (ncu -i REP --page details --csv)" % path)
    return [launches[k] for k in order]


def short(name, width=40):
    """A kernel's name without its template arguments and parameters."""
    base = name.split("(")[0].split("<")[0].strip()
    return base if len(base) <= width else base[:width - 3] + "..."


def table(kernels):
    keys = []
    seen = set()
    for _, metrics in kernels:
        for k in metrics:
            if k not in seen:
                seen.add(k)
                keys.append(k)
    lines = ["| section | metric | " + " | ".join(label for label, _ in kernels) + " |",
             "|---|---|" + "---|" * len(kernels)]
    for section, metric in keys:
        cells = [m.get((section, metric), "-") for _, m in kernels]
        lines.append("| %s | %s | %s |" % (section, metric, " | ".join(cells)))
    return "\n".join(lines) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("csv", nargs="+", help="ncu -i REP --page details --csv output")
    opt = ap.parse_args(argv)
    kernels = []
    for path in opt.csv:
        try:
            kernels += load(path)
        except (OSError, ValueError) as exc:
            sys.exit("ncu_compare.py: %s" % exc)
    if not kernels:
        sys.exit("ncu_compare.py: no kernel launches in %s" % ", ".join(opt.csv))
    sys.stdout.write(table(kernels))


if __name__ == "__main__":
    main()
