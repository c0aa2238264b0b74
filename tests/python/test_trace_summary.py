"""bench/trace_summary.py: what it says about a barrier-kernel timeline
(`moe_phases --trace`) is checked on a made-up one whose answers are
known, and a file it cannot read is refused with its name. The layout of
the made-up words is the script's, which reads it from
kernels/moe_kernel.h: a header with another layout moves what the script
reads, and one that disagrees with its names stops it."""
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

import hrtest

SCRIPT = os.path.join(hrtest.ROOT, "bench", "trace_summary.py")
HEADER = os.path.join(hrtest.ROOT, "kernels", "moe_kernel.h")
_spec = importlib.util.spec_from_file_location("trace_summary", SCRIPT)
trace_summary = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(trace_summary)
MARKS, UNITS = trace_summary.MARKS, trace_summary.UNITS


def cta_words(c):
    """CTA c of four: three GEMM1 units of 30 + c us from 10, its arrival
    at barrier 1 1 us after its stage ends, the release seen at 112; two
    GEMM2 units of 10 + c us."""
    w = [-1.0] * (MARKS + 2 * UNITS)
    g1_end = 10 + 3 * (30 + c)
    g2_end = 112 + 2 * (10 + c)
    w[:8] = [0.0, 5.0, 10.0, g1_end, 112.0, g2_end, 140.0, 150.0]
    w[8:12] = [6.0, g1_end + 1, g2_end + 1, 100 + c]    # SM 100 + c
    for j in range(3):
        w[MARKS + j] = 10 + (30 + c) * (j + 1)
    for j in range(2):
        w[MARKS + UNITS + j] = 112 + (10 + c) * (j + 1)
    return w


def write_trace(path, lines):
    with open(path, "w") as f:
        f.write("# barrier kernel timeline (made up)\n")
        for c, words in enumerate(lines):
            f.write(f"{c} " + " ".join(f"{x:.3f}" for x in words) + "\n")


class TraceSummary(unittest.TestCase):
    def run_script(self, *paths):
        return subprocess.run([sys.executable, SCRIPT, *paths], capture_output=True,
                              text=True, timeout=30)

    def summarize_with_inner(self, inner, name_inner):
        """The script's run on the four CTAs of cta_words beside an inner
        file of these lines (tr-inner.txt), also named as an argument
        with name_inner; stdout when it succeeds."""
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "tr.txt")
            inner_path = os.path.join(d, "tr-inner.txt")
            write_trace(path, [cta_words(c) for c in range(4)])
            write_trace(inner_path, inner)
            r = self.run_script(path, *([inner_path] if name_inner else []))
        self.assertEqual(r.returncode, 0, r.stderr)
        return r.stdout

    def summarize(self, lines):
        """The script's run on a trace of these CTA lines, written to a
        temporary directory; stdout when it succeeds."""
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "tr.txt")
            write_trace(path, lines)
            r = self.run_script(path)
        self.assertEqual(r.returncode, 0, r.stderr)
        return r.stdout

    def test_known_timeline(self):
        out = self.summarize([cta_words(c) for c in range(4)])
        self.assertIn("4 CTAs", out)
        # units of 30..33 us: median 31.5 for each of the three
        self.assertIn("GEMM1 units, median us: 31.5 31.5 31.5\n", out)
        self.assertIn("GEMM2 units, median us: 11.5 11.5\n", out)
        # first units end at 40, 41, 42, 43
        self.assertIn("GEMM1 first unit ends from 40.0 to 43.0 us", out)
        self.assertIn("GEMM1 first unit over the middle units' median: +0.0 us", out)
        self.assertNotIn("GEMM2 first unit over", out)     # two units: no middle
        # barrier 1: arrivals at 101 + 3c, release at 112: waits 11, 8, 5, 2
        self.assertIn("barrier 1: mean wait 6.5 us, longest 11.0", out)
        self.assertIn("barrier 0: mean wait 4.0 us, longest 4.0", out)
        self.assertNotIn("GEMM1 end to GEMM2 start", out)   # barriers, not gaps
        # the pace of CTA c is 30 + c us a unit, on SM 100 + c
        self.assertIn("fastest 30.0 (CTA 0, SM 100), 31.0 (CTA 1, SM 101)\n", out)
        self.assertIn("slowest 33.0 (CTA 3, SM 103), 32.0 (CTA 2, SM 102)\n", out)

    def test_sm_map_and_clocks(self):
        """The paces listed by SM number; the clock file beside the trace:
        CTA c's clock 2 GHz, but over GEMM1's first unit c us of its
        30 + c halted (no cycles): 2 x 30 / (30 + c) GHz there."""
        lines = [cta_words(c) for c in range(4)]
        for c, w in enumerate(lines):
            w[11] = 103 - c                          # SMs in reverse order
        clocks = []
        for c, w in enumerate(lines):
            k = [-1.0 if x < 0 else 2.0 * x for x in w]
            k[11] = -1.0
            for j in range(UNITS):                   # c us halted in unit 0
                if w[MARKS + j] >= 0:
                    k[MARKS + j] -= 2.0 * c
            clocks.append(k)
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "tr.txt")
            write_trace(path, lines)
            write_trace(os.path.join(d, "tr-clocks.txt"), clocks)
            r = self.run_script(path, os.path.join(d, "tr-clocks.txt"))
        self.assertEqual(r.returncode, 0, r.stderr)
        out = r.stdout
        self.assertEqual(out.count("4 CTAs"), 1)        # the clock file is no trace
        # SM 100 ran CTA 3 (33 us a unit), SM 103 CTA 0 (30)
        self.assertIn("GEMM1 pace by SM, 100-103: 33.0 32.0 31.0 30.0\n", out)
        # first unit: 2 x 30 / (30 + c) for c = 0..3: median of
        # 2.000, 1.935, 1.875, 1.818 is 1.905, lowest 1.818
        self.assertIn("GEMM1 SM clock, first unit: median 1.905 GHz, lowest 1.818", out)
        self.assertIn("GEMM1 SM clock, the rest: median 2.000 GHz, lowest 2.000", out)
        self.assertIn("GEMM2 SM clock, first unit: median 2.000 GHz", out)

    def test_inner_marks(self):
        """The diagnostic build's inner marks beside the trace: GEMM1's
        first unit's last step at 40 + c, then drained +1, staged +2 + c,
        stored +3 + c, end +9 + c, decoded +10 + c; GEMM2's not written."""
        inner = []
        for c in range(4):
            w = [-1.0] * 16
            last = 40.0 + c
            w[0:6] = [last, last + 1, last + 2 + c, last + 3 + c, last + 9 + c, last + 10 + c]
            inner.append(w)
        out = self.summarize_with_inner(inner, name_inner=True)
        self.assertEqual(out.count("4 CTAs"), 1)        # the inner file is no trace
        # medians over c = 0..3: staged 2 + 1.5, stored 3 + 1.5, end 9 + 1.5
        self.assertIn("GEMM1 first unit's end, us after its last step, median: drained 1.0 "
                      "(max 1.0), staged 3.5 (max 5.0), stored 4.5 (max 6.0), end 10.5 "
                      "(max 12.0), decoded 11.5 (max 13.0)", out)
        self.assertNotIn("GEMM2 first unit's end", out)

    def test_inner_step_marks(self):
        """The 32-word inner file (16 a stage): the last warp's marks after
        the end's, then the first unit's K steps 0, 1, 2, 4, 8 of GEMM2 at
        2, 3, 4, 6, 10 + c us after the CTA's GEMM2 start (112), step 16
        not written (a unit of fewer steps), its loader set up at 0.5 and
        its first steps issued at 1 + c; GEMM1's end marks (as an
        inner file always has them), its steps none."""
        inner = []
        for c in range(4):
            w = [-1.0] * 32
            w[0:6] = [40.0, 41.0, 42.0, 43.0, 44.0, 45.0]
            last = 150.0
            w[16:24] = [last, last + 1, last + 3, last + 4, last + 4, last + 5,
                        last + 1 + c, last + 2 + c]
            w[24:29] = [112.0 + x + c for x in (2, 3, 4, 6, 10)]
            w[30:32] = [112.5, 113.0 + c]
            inner.append(w)
        out = self.summarize_with_inner(inner, name_inner=True)
        self.assertIn("GEMM2 first unit's end, us after its last step, median: drained 1.0 "
                      "(max 1.0), staged 3.0 (max 3.0), stored 4.0 (max 4.0), end 4.0 "
                      "(max 4.0), decoded 5.0 (max 5.0), drained (last warp) 2.5 (max 4.0), "
                      "written (last warp) 3.5 (max 5.0)", out)
        self.assertIn("GEMM2 first unit's start, us after the stage's start, median: "
                      "loader set up 0.5, first steps issued 2.5, step 0 landed 3.5, "
                      "step 1 landed 4.5, step 2 landed 5.5, step 4 landed 7.5, "
                      "step 8 landed 11.5\n", out)
        self.assertNotIn("GEMM1 first unit's start", out)
        self.assertNotIn("routing steps", out)

    def test_route_marks(self):
        """A routing-marks build's inner file (words 8-11, none before):
        CTA c counted at 4 + c, placed +1, tiled +2, published +3 (CTA 3
        never published); printed as the routing's steps, not as GEMM2's
        inner marks."""
        inner = []
        for c in range(4):
            w = [-1.0] * 16
            w[8:12] = [4.0 + c, 5.0 + c, 6.0 + c, 7.0 + c if c < 3 else -1.0]
            inner.append(w)
        out = self.summarize_with_inner(inner, name_inner=False)
        self.assertIn("routing steps, us, median (first-last): counted 5.5 (4.0-7.0), "
                      "placed 6.5 (5.0-8.0), tiled 7.5 (6.0-9.0), published 8.0 (7.0-9.0)",
                      out)
        self.assertNotIn("first unit's end", out)

    def test_clock_file_of_other_length_refused(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "tr.txt")
            write_trace(path, [cta_words(c) for c in range(4)])
            write_trace(os.path.join(d, "tr-clocks.txt"), [cta_words(c) for c in range(3)])
            r = self.run_script(path)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("tr-clocks.txt: 3 CTA lines", r.stderr)

    def test_slow_first_unit(self):
        """GEMM1 units of 45, 30, 31, 29, 20 us (the last a part one): the
        first 15 us over the middle ones' median (30)."""
        lines = []
        for c in range(2):
            w = cta_words(c)
            w[MARKS:MARKS + UNITS] = [-1.0] * UNITS
            t = w[2]
            for j, d in enumerate((45, 30, 31, 29, 20)):
                t += d
                w[MARKS + j] = t
            lines.append(w)
        out = self.summarize(lines)
        self.assertIn("GEMM1 units, median us: 45.0 30.0 31.0 29.0 20.0\n", out)
        self.assertIn("GEMM1 first unit over the middle units' median: +15.0 us", out)

    def test_claimed_stage_wrapped(self):
        """30 GEMM1 units of 10 us a CTA, unit u in word u % 24 (a claimed
        stage keeps its last units); CTA c's last unit takes 10 + 20c."""
        lines = []
        for c in range(4):
            w = cta_words(c)
            w[MARKS:MARKS + UNITS] = [-1.0] * UNITS
            t = 10.0
            for u in range(30):
                t += 10 + (20 * c if u == 29 else 0)
                w[MARKS + u % UNITS] = t
            w[11] = 50 + c
            lines.append(w)
        out = self.summarize(lines)
        self.assertIn("GEMM1: the last 24 units of each CTA (a claimed stage)", out)
        # the last unit: 10, 30, 50, 70 us: median 40; the ones before 10
        self.assertIn("GEMM1 units from the last back, median us: 40.0 10.0 10.0", out)
        # last ends at 310 + 20c
        self.assertIn("GEMM1 last unit ends from 310.0 to 370.0 us, median 340.0", out)
        self.assertIn("GEMM1 CTA 3 (SM 53): its last units, us: 10.0 10.0 10.0 10.0 70.0", out)
        self.assertNotIn("GEMM1 units, median us", out)
        self.assertNotIn("GEMM1 pace", out)                # no pace from wrapped ends

    def test_stage_without_unit_ends(self):
        lines = [cta_words(c) for c in range(2)]
        for w in lines:
            w[MARKS:MARKS + UNITS] = [-1.0] * UNITS
        out = self.summarize(lines)
        self.assertIn("GEMM1: no unit ends", out)
        self.assertIn("GEMM2 units, median us: 10.5 10.5", out)

    def test_agnostic_gaps(self):
        """No barrier arrivals (the agnostic kernel's timeline): the gaps
        between each CTA's stages instead of barrier waits. CTA c: routed
        at 5, GEMM1 from 10 + c; GEMM2 starts 2c us after its GEMM1 ends;
        CTA 3 runs no GEMM2 (its words -1); combine 1 us after GEMM2."""
        lines = []
        for c in range(4):
            w = cta_words(c)
            w[8:11] = [-1.0, -1.0, -1.0]
            w[2] = 10.0 + c
            w[4] = w[3] + 2 * c
            w[5] = w[4] + 20
            w[6] = w[5] + 1
            if c == 3:
                w[4] = w[5] = -1.0
            lines.append(w)
        out = self.summarize(lines)
        self.assertNotIn("barrier", out)
        # routed 5 to 10 + c: 5, 6, 7, 8
        self.assertIn("routed to GEMM1 start: mean 6.5 us, longest 8.0 (4 CTAs)", out)
        self.assertIn("GEMM1 end to GEMM2 start: mean 2.0 us, longest 4.0 (3 CTAs)", out)
        self.assertIn("GEMM2 end to combine start: mean 1.0 us, longest 1.0 (3 CTAs)", out)

    def test_short_line_refused(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "short.txt")
            write_trace(path, [cta_words(0)[:20]])
            r = self.run_script(path)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("short.txt", r.stderr)
        self.assertIn(f"expected {MARKS + 2 * UNITS}", r.stderr)

    def test_no_arguments(self):
        r = self.run_script()
        self.assertEqual(r.returncode, 2)
        self.assertIn("trace_summary.py FILE", r.stderr)


class TraceLayout(unittest.TestCase):
    """The script and a copy of moe_kernel.h, edited, in a tree of their
    own."""

    def tree(self, edit):
        d = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, d)
        os.mkdir(os.path.join(d, "bench"))
        os.mkdir(os.path.join(d, "kernels"))
        shutil.copy(SCRIPT, os.path.join(d, "bench"))
        with open(HEADER) as f:
            text = f.read()
        new = edit(text)
        self.assertNotEqual(new, text, "the edit changed nothing")
        with open(os.path.join(d, "kernels", "moe_kernel.h"), "w") as f:
            f.write(new)
        return d

    def run_in(self, d, *paths):
        return subprocess.run([sys.executable, os.path.join(d, "bench", "trace_summary.py"),
                               *paths], capture_output=True, text=True, timeout=30)

    def test_the_header_sets_the_words(self):
        self.assertEqual(trace_summary.LAYOUT["HR__MOE_TRACE_MARKS"], MARKS)
        self.assertEqual(trace_summary.LAYOUT["HR__MOE_MARK_SM"], MARKS - 1)
        self.assertEqual(trace_summary.check_layout(trace_summary.LAYOUT), [])
        d = self.tree(lambda t: t.replace(f"#define HR__MOE_TRACE_UNITS {UNITS}\n",
                                          f"#define HR__MOE_TRACE_UNITS {UNITS - 4}\n"))
        path = os.path.join(d, "tr.txt")
        write_trace(path, [[10.0] * (MARKS + 2 * UNITS - 9)])
        r = self.run_in(d, path)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn(f"expected {MARKS + 2 * (UNITS - 4)}", r.stderr)
        write_trace(path, [[10.0] * (MARKS + 2 * (UNITS - 4))])
        r = self.run_in(d, path)
        self.assertEqual(r.returncode, 0, r.stderr)

    def test_a_header_that_disagrees_stops_it(self):
        d = self.tree(lambda t: t.replace("  HR__MOE_INNER_FILLED,",
                                          "  HR__MOE_INNER_FILLED,\n  HR__MOE_INNER_NEW,"))
        path = os.path.join(d, "tr.txt")
        write_trace(path, [[10.0] * (MARKS + 2 * UNITS)])
        r = self.run_in(d, path)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("HR__MOE_INNER_MARKS is 17, the names here make it 16", r.stderr)

    def test_no_header_named(self):
        d = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, d)
        os.mkdir(os.path.join(d, "bench"))
        shutil.copy(SCRIPT, os.path.join(d, "bench"))
        r = self.run_in(d, "x.txt")
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("moe_kernel.h", r.stderr)



if __name__ == "__main__":
    unittest.main()
