"""bench/ncu_lines.py: what it says about an Nsight Compute source page
is checked on a made-up one whose sums are known, with and without
--reason, and a reason that is no column is refused with the names of
those that are."""
import gzip
import os
import subprocess
import sys
import tempfile
import unittest

import hrtest

SCRIPT = os.path.join(hrtest.ROOT, "bench", "ncu_lines.py")
HEADER = ["Line No", "Source", "Address", "Live Registers",
          "Warp Stall Sampling (All Samples)", "stall_no_inst", "stall_wait",
          "Instructions Executed"]
# two files' lines: samples, no_inst, wait, instructions
LINES = {
    "kernels/moe_gemm.cuh": [(10, "a = b;", 100, 60, 40, 1000),
                             (20, "c = d;", 50, 5, 45, 3000)],
    "kernels/moe_barrier.cuh": [(7, "spin();", 30, 0, 30, 500)],
}


def write_page(path):
    """The page as `ncu -i REP --page source --csv --print-source sass,cuda`
    lays it out: per file its path, a header, then its lines (and SASS
    rows, whose first field is empty)."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "wt") as f:
        for name, rows in LINES.items():
            f.write(f'"File Path","/src/{name}"\n')
            f.write(",".join(f'"{h}"' for h in HEADER) + "\n")
            for line, src, smp, ni, wt, ins in rows:
                f.write(f'"{line}","{src}","","","{smp}","{ni}","{wt}","{ins}"\n')
                f.write(f'"","  MOV R1, R2","0x10","","1","1","0","1"\n')


class NcuLines(unittest.TestCase):
    def run_script(self, *args):
        return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True,
                              text=True, timeout=30)

    def test_report(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "bar-src.csv.gz")
            write_page(path)
            r = self.run_script(path)
        self.assertEqual(r.returncode, 0, r.stderr)
        out = r.stdout
        self.assertIn("180 stall samples", out)              # 100 + 50 + 30
        self.assertIn("stall_wait                        115  63.9%", out)
        self.assertIn("stall_no_inst                      65  36.1%", out)
        # the line with most samples first, with its two main reasons
        first = [l for l in out.splitlines() if "moe_" in l][0]
        self.assertIn("55.6% moe_gemm.cuh", first)
        self.assertIn("no_inst 60, wait 40", first)
        self.assertIn("4.5e+03 warp instructions executed", out)

    def test_one_reason(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "bar-src.csv")
            write_page(path)
            r = self.run_script("--reason", "stall_no_inst", path)
        self.assertEqual(r.returncode, 0, r.stderr)
        lines = r.stdout.splitlines()
        self.assertIn("65 samples of stall_no_inst", lines[0])
        self.assertIn("92.3%     60 moe_gemm.cuh", lines[1])   # 60 of 65
        self.assertIn("7.7%      5 moe_gemm.cuh", lines[2])
        self.assertEqual(len(lines), 3)                      # none for the 0 line

    def test_unknown_reason_refused(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "bar-src.csv")
            write_page(path)
            r = self.run_script("--reason", "stall_bogus", path)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("no column stall_bogus", r.stderr)
        self.assertIn("stall_no_inst, stall_wait", r.stderr)


if __name__ == "__main__":
    unittest.main()
