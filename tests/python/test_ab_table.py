"""bench/ab_table.py and bench/ab_builds.sh: builds side by side. The table
is checked on made-up moe_phases outputs whose medians are known; bad
arguments and files are refused by name; ab_builds.sh runs each build in
turn (fake moe_phases programs, a fake nvidia-smi), each with its own lib
first in LD_LIBRARY_PATH, and refuses, running nothing, without a GPU or
with a build that has no moe_phases."""
import os
import stat
import subprocess
import sys
import tempfile
import unittest

import hrtest

TABLE = os.path.join(hrtest.ROOT, "bench", "ab_table.py")
BUILDS = os.path.join(hrtest.ROOT, "bench", "ab_builds.sh")

HEAD = ("| shape | T | kernel | variant | ms | TFLOP/s | check |\n"
        "|---|---|---|---|---|---|---|\n")


def phases_file(path, rows):
    """rows: (shape, T, kernel, variant, ms); the floor table's kind of row
    too, which must not count."""
    with open(path, "w") as f:
        f.write("# Mega-MoE phase timings (made up)\n\n" + HEAD)
        for shape, t, kernel, variant, ms in rows:
            f.write(f"| {shape} | {t} | {kernel} | {variant} | {ms:.3f} | 1.0 | ok |\n")
        f.write("\n| shape | T | experts | pairs | MB read |\n|---|---|---|---|---|\n")
        f.write("| qwen3-30b-a3b | 1024 | 128.0 | 81, 2 | 1208 |\n")


def executable(path, text):
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


class AbTable(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.dir = self.tmp.name

    def tearDown(self):
        self.tmp.cleanup()

    def path(self, name):
        return os.path.join(self.dir, name)

    def run_table(self, *args):
        return subprocess.run([sys.executable, TABLE, *args], capture_output=True,
                              text=True, timeout=60)

    def test_medians_and_ratios(self):
        q = "qwen3-30b-a3b"
        phases_file(self.path("a1.md"), [(q, 1024, "barrier", "default", 0.400),
                                         (q, 1024, "agnostic", "default", 0.500),
                                         (q, 1024, "barrier", "wide96", 9.0),
                                         (q, 512, "barrier", "default", 0.300)])
        phases_file(self.path("a2.md"), [(q, 1024, "barrier", "default", 0.420),
                                         (q, 1024, "agnostic", "default", 0.500),
                                         (q, 512, "barrier", "default", 0.300)])
        phases_file(self.path("b1.md"), [(q, 1024, "barrier", "default", 0.360),
                                         (q, 1024, "agnostic", "default", 0.550)])
        phases_file(self.path("b2.md"), [(q, 1024, "barrier", "default", 0.380),
                                         (q, 1024, "agnostic", "default", 0.550)])
        r = self.run_table("old=" + self.path("a1.md") + "," + self.path("a2.md"),
                           "new=" + self.path("b1.md") + "," + self.path("b2.md"))
        self.assertEqual(r.returncode, 0, r.stderr)
        rows = [line for line in r.stdout.splitlines() if line.startswith(f"| {q} ")]
        # T = 512 first, the barrier kernel before the agnostic one
        self.assertEqual(rows[0], f"| {q} | 512 | barrier | 0.300 / 0.300 | - | - |")
        self.assertEqual(rows[1], f"| {q} | 1024 | barrier | 0.400 / 0.420 | 0.360 / 0.380 | 0.902 |")
        self.assertEqual(rows[2], f"| {q} | 1024 | agnostic | 0.500 / 0.500 | 0.550 / 0.550 | 1.100 |")
        self.assertEqual(len(rows), 3)       # not the floor table's row, not wide96
        self.assertIn("| shape | T | kernel | old ms | new ms | new / old |", r.stdout)
        # another variant on request
        r = self.run_table("--variant", "wide96", "old=" + self.path("a1.md"),
                           "new=" + self.path("a1.md"))
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn(f"| {q} | 1024 | barrier | 9.000 | 9.000 | 1.000 |", r.stdout)

    def test_refusals(self):
        phases_file(self.path("a.md"), [("s", 1, "barrier", "default", 1.0)])
        with open(self.path("empty.md"), "w") as f:
            f.write("# nothing here\n")
        cases = [
            (["a=" + self.path("a.md")], "two builds or more"),
            (["a=" + self.path("a.md"), "b=" + self.path("nope.md")], "nope.md"),
            (["a=" + self.path("a.md"), "b=" + self.path("empty.md")], "empty.md: no row"),
            (["a=" + self.path("a.md"), self.path("a.md")], "not LABEL=FILE"),
            (["a=" + self.path("a.md"), "b="], "no FILE"),
            (["--variant"], "needs a NAME"),
        ]
        for args, words in cases:
            r = self.run_table(*args)
            self.assertEqual(r.returncode, 2, args)
            self.assertIn(words, r.stderr, args)
            self.assertEqual(r.stdout, "", args)


class AbBuilds(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.dir = self.tmp.name
        self.bin = os.path.join(self.dir, "bin")
        os.mkdir(self.bin)

    def tearDown(self):
        self.tmp.cleanup()

    def fake_build(self, name, ms, knows_no_floor=False, knows_match=False):
        """A build directory whose moe_phases logs its arguments and writes
        a made-up output (ms at every cell) to its --out FILE; with
        knows_no_floor (knows_match) its text names that option, as the
        real program's does (ab_builds.sh looks for them: --match is the
        GEMM variants' option of a revision before the one kernel build)."""
        tests = os.path.join(self.dir, name, "tests")
        os.makedirs(tests)
        executable(os.path.join(tests, "moe_phases"), f"""#!/bin/sh
{"# usage: [--no-floor]" if knows_no_floor else ""}
{"# usage: [--match TEXT]" if knows_match else ""}
echo "{name}: $*" >> "{self.dir}/calls"
echo "$LD_LIBRARY_PATH" >> "{self.dir}/libpaths"
while [ $# -gt 0 ]; do [ "$1" = --out ] && out=$2; shift; done
printf '{HEAD.replace(chr(10), chr(92) + "n")}' > "$out"
printf '| s | 8 | barrier | default | {ms} | 1 | ok |\\n' >> "$out"
""")
        return os.path.join(self.dir, name)

    def logged(self, name):
        """The lines the fake builds' moe_phases appended to NAME ("calls":
        who ran with what, "libpaths": its LD_LIBRARY_PATH), one a run."""
        with open(os.path.join(self.dir, name)) as f:
            return f.read().splitlines()

    def run_builds(self, out, *builds, gpu=True, env=None):
        executable(os.path.join(self.bin, "nvidia-smi"),
                   "#!/bin/sh\necho 'GPU 0: fake'\n" if gpu else "#!/bin/sh\nexit 6\n")
        e = dict(os.environ, PATH=self.bin + os.pathsep + os.environ["PATH"])
        e.update(env or {})
        return subprocess.run(["sh", BUILDS, out, *builds], capture_output=True,
                              text=True, timeout=60, env=e)

    def test_runs_in_turn_and_tables(self):
        a, b = self.fake_build("base", "0.400"), self.fake_build("new", "0.300")
        out = os.path.join(self.dir, "ab")
        r = self.run_builds(out, a, b, env={"AB_RUNS": "3", "AB_ARGS": "--tokens 8"})
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        calls = self.logged("calls")
        self.assertEqual(len(calls), 6)
        # in turn: base, new, base, new, ...; each with the fixed options and AB_ARGS
        for i, call in enumerate(calls):
            who = "base" if i % 2 == 0 else "new"
            self.assertIn("--reps 20 --no-phases --tokens 8", call)
            self.assertIn(f"-{who}-r{i // 2 + 1}.md", call)
        with open(os.path.join(out, "table.md")) as f:
            table = f.read()
        self.assertIn("| s | 8 | barrier | 0.400 / 0.400 / 0.400 | 0.300 / 0.300 / 0.300 | 0.750 |",
                      table)

    def test_floor_left_out_where_the_build_knows_how(self):
        old = self.fake_build("old", "0.400", knows_match=True)
        new = self.fake_build("new", "0.300", knows_no_floor=True)
        r = self.run_builds(os.path.join(self.dir, "ab"), old, new, env={"AB_RUNS": "1"})
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        calls = self.logged("calls")
        self.assertEqual(len(calls), 2)
        self.assertTrue(calls[0].startswith("old: "), calls)
        self.assertNotIn("--no-floor", calls[0])
        self.assertIn("--no-phases --match NOTHING --shapes", calls[0])
        self.assertIn("--no-phases --no-floor --shapes", calls[1])

    def test_variants_left_out_where_the_build_has_them(self):
        """A revision with the GEMM variants (--match) and --no-floor, as
        e992226, against one without: the first times its normal launches
        alone through --match NOTHING, the second is never given --match,
        which it would refuse."""
        old = self.fake_build("old", "0.400", knows_no_floor=True, knows_match=True)
        new = self.fake_build("new", "0.300", knows_no_floor=True)
        r = self.run_builds(os.path.join(self.dir, "ab"), old, new, env={"AB_RUNS": "1"})
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        calls = self.logged("calls")
        self.assertEqual(len(calls), 2)
        self.assertIn("--no-phases --match NOTHING --no-floor --shapes", calls[0])
        self.assertNotIn("--match", calls[1])
        self.assertIn("--no-phases --no-floor --shapes", calls[1])

    def test_floor_kept_when_asked(self):
        new = self.fake_build("new", "0.300", knows_no_floor=True)
        new2 = self.fake_build("new2", "0.300", knows_no_floor=True)
        r = self.run_builds(os.path.join(self.dir, "ab"), new, new2,
                            env={"AB_RUNS": "1", "AB_FLOOR": "1"})
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        calls = self.logged("calls")
        self.assertEqual(len(calls), 2)
        for call in calls:
            self.assertNotIn("--no-floor", call)

    def test_each_build_runs_its_own_libraries_first(self):
        a, b = self.fake_build("base", "0.400"), self.fake_build("new", "0.300")
        other = os.path.join(self.dir, "other", "lib")
        r = self.run_builds(os.path.join(self.dir, "ab"), a, b,
                            env={"AB_RUNS": "1", "LD_LIBRARY_PATH": other})
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        paths = self.logged("libpaths")
        self.assertEqual(paths, [os.path.join(a, "lib") + ":" + other,
                                 os.path.join(b, "lib") + ":" + other])

    def test_refuses_without_gpu_or_build(self):
        a = self.fake_build("base", "0.4")
        out = os.path.join(self.dir, "ab")
        r = self.run_builds(out, a, a, gpu=False)
        self.assertEqual(r.returncode, 2)
        self.assertIn("no NVIDIA GPU", r.stderr)
        r = self.run_builds(out, a, os.path.join(self.dir, "missing"))
        self.assertEqual(r.returncode, 2)
        self.assertIn("missing/tests/moe_phases: not there", r.stderr)
        r = self.run_builds(out, a)
        self.assertEqual(r.returncode, 2)
        self.assertIn("usage", r.stderr)
        self.assertFalse(os.path.exists(out))
        self.assertFalse(os.path.exists(os.path.join(self.dir, "calls")))


if __name__ == "__main__":
    unittest.main()
