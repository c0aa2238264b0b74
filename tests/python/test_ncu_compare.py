"""bench/ncu_compare.py on made-up Nsight Compute details pages: every
launch a column in file and launch order, every (section, metric) a row,
a metric a launch lacks as "-", units beside values, rule rows left out,
ncu's own lines before the header skipped; a file with no details header
is refused naming it. And bench/profile_vs_triton.sh's arguments."""
import gzip
import os
import subprocess
import sys
import tempfile
import unittest

import hrtest

SCRIPT = os.path.join(hrtest.ROOT, "bench", "ncu_compare.py")
PROFILE = os.path.join(hrtest.ROOT, "bench", "profile_vs_triton.sh")
HEADER = ["ID", "Process ID", "Process Name", "Host Name", "Kernel Name", "Context",
          "Stream", "Block Size", "Grid Size", "Device", "CC", "Section Name",
          "Metric Name", "Metric Unit", "Metric Value"]


def write_page(path, launches):
    """launches: [(id, kernel name, [(section, metric, unit, value)])]."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "wt") as f:
        f.write("==PROF== Disconnected from process 1234\n")
        f.write(",".join(f'"{h}"' for h in HEADER) + "\n")
        for lid, name, metrics in launches:
            for section, metric, unit, value in metrics:
                row = [str(lid), "1234", "python3", "127.0.0.1", name, "1", "7",
                       "(256, 1, 1)", "(132, 1, 1)", "0", "9.0", section, metric,
                       unit, value]
                f.write(",".join(f'"{v}"' for v in row) + "\n")


class NcuCompare(unittest.TestCase):
    def run_script(self, *paths):
        return subprocess.run([sys.executable, SCRIPT, *paths], capture_output=True,
                              text=True, timeout=60)

    def test_side_by_side(self):
        with tempfile.TemporaryDirectory() as d:
            ours, tri = os.path.join(d, "ours.csv"), os.path.join(d, "triton.csv.gz")
            write_page(ours, [(0, "void hr__moe_kernel<1>(hr__moe_params)", [
                ("GPU Speed Of Light Throughput", "Duration", "ms", "13.95"),
                ("GPU Speed Of Light Throughput", "L2 Cache Throughput", "%", "93.4"),
                ("Launch Statistics", "Registers Per Thread", "register/thread", "255"),
                ("GPU Speed Of Light Throughput", "", "", "a rule's advice"),
            ])])
            write_page(tri, [
                (0, "_moe_gemm", [
                    ("GPU Speed Of Light Throughput", "Duration", "ms", "7.1"),
                    ("GPU Speed Of Light Throughput", "L2 Cache Throughput", "%", "88.0"),
                ]),
                (1, "_moe_gemm", [
                    ("GPU Speed Of Light Throughput", "Duration", "ms", "3.6"),
                    ("Warp State Statistics", "Warp Cycles Per Issued Instruction",
                     "cycle", "9.1"),
                ]),
            ])
            r = self.run_script(ours, tri)
        self.assertEqual(r.returncode, 0, r.stderr)
        lines = r.stdout.splitlines()
        self.assertEqual(lines[0], "| section | metric | ours.csv #0: void hr__moe_kernel | "
                         "triton.csv.gz #0: _moe_gemm | triton.csv.gz #1: _moe_gemm |")
        rows = {tuple(c.strip() for c in ln.strip("|").split("|")[:2]): ln
                for ln in lines[2:]}
        self.assertEqual(len(rows), 4, r.stdout)   # the rule's row is not a metric
        self.assertIn("| 13.95 ms | 7.1 ms | 3.6 ms |",
                      rows[("GPU Speed Of Light Throughput", "Duration")])
        self.assertIn("| 93.4 % | 88.0 % | - |",
                      rows[("GPU Speed Of Light Throughput", "L2 Cache Throughput")])
        self.assertIn("| - | - | 9.1 cycle |",
                      rows[("Warp State Statistics", "Warp Cycles Per Issued Instruction")])
        self.assertIn("| 255 register/thread | - | - |",
                      rows[("Launch Statistics", "Registers Per Thread")])

    def test_not_a_details_page(self):
        with tempfile.TemporaryDirectory() as d:
            bad = os.path.join(d, "source.csv")
            with open(bad, "w") as f:
                f.write('"File Path","/src/a.cu"\n"Line No","Source"\n')
            r = self.run_script(bad)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("source.csv: no details header", r.stderr)

    def test_profile_script_usage(self):
        r = subprocess.run(["sh", PROFILE, "only-two", "args"], capture_output=True,
                           text=True, timeout=60)
        self.assertEqual(r.returncode, 2)
        self.assertIn("usage:", r.stderr)


if __name__ == "__main__":
    unittest.main()
