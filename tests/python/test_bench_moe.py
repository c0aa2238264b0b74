"""bench/bench_moe.py on the CPU: the hr_moe_args it passes the kernels
(every field where the header has it: a field the API grew once shifted
the timeout into gate_up, and every launch was refused); the balanced
routing of bench_common (every expert T k / E pairs, k distinct experts a
token; skipped without torch); and the script without a GPU: one line
saying it needs one, exit 0."""
import ctypes
import importlib.util
import os
import subprocess
import sys
import unittest

import hrtest

torch = hrtest.torch_or_none()
BENCH = os.path.join(hrtest.ROOT, "bench")
SCRIPT = os.path.join(BENCH, "bench_moe.py")


def load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


class FakeTensor:
    """Only what make_args reads: a device address."""

    def __init__(self, ptr):
        self.ptr = ptr

    def data_ptr(self):
        return self.ptr


class BenchMoeArgs(unittest.TestCase):
    def setUp(self):
        self.mod = load("bench_moe", SCRIPT)

    def test_args_fields(self):
        t = [FakeTensor(0x1000 * (i + 1)) for i in range(6)]
        a = self.mod.make_args(4096, 256, 7168, 2048, 8, *t)
        self.assertEqual((a.tokens, a.experts, a.hidden, a.inter, a.topk),
                         (4096, 256, 7168, 2048, 8))
        self.assertEqual([a.x, a.topk_ids, a.topk_weights, a.w1, a.w2, a.y],
                         [0x1000 * (i + 1) for i in range(6)])
        self.assertIsNone(a.gate_up)        # a forward that keeps nothing
        self.assertEqual(a.timeout_ms, 10000)

    def test_args_are_the_checked_struct(self):
        # python/headroom/_lib.py's struct, which test_library.py holds
        # against kernels/headroom_moe.h field by field.
        sys.path.insert(0, os.path.join(hrtest.ROOT, "python"))
        from headroom import _lib
        self.assertIs(self.mod.Args, _lib.MoeArgs_t)
        self.assertIs(self.mod.Shape, _lib.MoeShape_t)
        self.assertEqual(ctypes.sizeof(self.mod.Args), ctypes.sizeof(_lib.MoeArgs_t))


@unittest.skipIf(torch is None, hrtest.NO_TORCH)
class BalancedRouting(unittest.TestCase):
    def test_every_expert_the_same(self):
        common = load("bench_common", os.path.join(BENCH, "bench_common.py"))
        gen = torch.Generator().manual_seed(1)
        for T, E, k in ((4096, 256, 8), (100, 128, 8), (7, 16, 3)):
            ids, w = common.routing(T, E, k, gen, device="cpu", balanced=True)
            self.assertEqual(tuple(ids.shape), (T, k))
            counts = torch.bincount(ids.flatten().long(), minlength=E)
            self.assertLessEqual(int(counts.max() - counts.min()), 1)
            self.assertEqual(int(counts.sum()), T * k)
            for row in ids.tolist():
                self.assertEqual(len(set(row)), k)
            self.assertTrue(bool(((w >= 0.05) & (w < 1.0)).all()))

    def test_random_is_not_balanced(self):
        common = load("bench_common", os.path.join(BENCH, "bench_common.py"))
        gen = torch.Generator().manual_seed(1)
        ids, _ = common.routing(4096, 256, 8, gen, device="cpu")
        counts = torch.bincount(ids.flatten().long(), minlength=256)
        self.assertGreater(int(counts.max() - counts.min()), 1)


def fake_run(date, command, commit, machine="NVIDIA H200, 580, 143771 MiB, 132 SMs; torch 2"):
    return dict(date=date, machine=machine, set_aside="- persisting L2 set-aside: 0 bytes",
                command=command, commit=commit, copy_bw=4.23e12, gemm=7.9e14,
                balanced=False)


def fake_row(shape, T, ours):
    return dict(shape=shape, T=T, ref=2 * ours, ours=ours, speedup=2.0, tflops=100.0,
                ours_floor=1.5, ref_floor=3.0, floor=ours / 1.5, touched=1, err=6.4e-3,
                nan=False, pub=None, agn=ours * 1.01, same=True, tri=ours * 0.9,
                tri_cfg=[[128, 256, 64, 8, 8, 3], [128, 256, 64, 8, 8, 3]],
                agn_tflops=99.0)


class Merge(unittest.TestCase):
    """--merge: the tables of runs made one after the other (a shape a
    call, where one call cannot hold them all) as one, with no GPU; each
    run's command and commit named, every row once, one header."""

    def setUp(self):
        import tempfile
        self.dir = tempfile.mkdtemp()

    def tearDown(self):
        import shutil
        shutil.rmtree(self.dir)

    def write(self, name, runs, rows):
        import json
        path = os.path.join(self.dir, name)
        with open(path, "w") as f:
            json.dump(dict(runs=runs, rows=rows, variants=[]), f)
        return path

    def merge(self, *paths):
        out = os.path.join(self.dir, "out.md")
        r = subprocess.run([sys.executable, SCRIPT, "--merge", ",".join(paths), "--out", out],
                           capture_output=True, text=True, cwd=hrtest.ROOT, timeout=120)
        text = ""
        if r.returncode == 0:
            with open(out) as f:
                text = f.read()
        return r, text

    def test_two_runs_one_table(self):
        a = self.write("a.json", [fake_run("2026-12-05 01:00 UTC", "python3 bench_moe.py "
                                           "--shapes qwen3-30b-a3b", "abc1234")],
                       [fake_row("qwen3-30b-a3b", 1, 0.037), fake_row("qwen3-30b-a3b", 128, 0.3)])
        b = self.write("b.json", [fake_run("2026-12-05 01:02 UTC", "python3 bench_moe.py "
                                           "--shapes deepseek-v3", "abc1234")],
                       [fake_row("deepseek-v3", 1, 0.185)])
        r, text = self.merge(a, b)
        self.assertEqual(r.returncode, 0, r.stderr)
        lines = text.splitlines()
        self.assertEqual(sum(1 for x in lines if x.startswith("| shape | T | reference")), 1)
        head = next(i for i, x in enumerate(lines) if x.startswith("| shape | T | reference"))
        self.assertTrue(lines[head + 1].startswith("|---|"))
        cells = [x.split(" | ")[:2] for x in lines[head + 2:] if x.startswith("| ")]
        self.assertEqual(cells[:3], [["| qwen3-30b-a3b", "1"], ["| qwen3-30b-a3b", "128"],
                                     ["| deepseek-v3", "1"]])
        self.assertIn("--shapes qwen3-30b-a3b", text)
        self.assertIn("--shapes deepseek-v3", text)
        self.assertIn("2 runs, one after the other", text)
        self.assertIn("| qwen3-30b-a3b | 1 | 0.074 | 0.037 |", text)
        # one file: the header of a single run, as the run itself writes it
        r, text = self.merge(b)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("- command: `python3 bench_moe.py --shapes deepseek-v3` (`make "
                      "bench-gpu` runs this script); commit abc1234", text)
        self.assertIn("bf16 GEMM 8192^3 790 TFLOP/s", text)
        self.assertNotIn("qwen3", text)

    def test_refused_with_the_file_named(self):
        a = self.write("a.json", [fake_run("d1", "c1", "x")], [fake_row("small", 1, 0.05)])
        twice = self.write("twice.json", [fake_run("d2", "c2", "x")],
                           [fake_row("small", 1, 0.05)])
        other = self.write("other.json", [fake_run("d3", "c3", "x", machine="H100")],
                           [fake_row("small", 16, 0.05)])
        junk = os.path.join(self.dir, "junk.json")
        with open(junk, "w") as f:
            f.write("[1, 2]")
        for bad, why in ((twice, "earlier file"), (other, "machine"), (junk, "not a"),
                         (os.path.join(self.dir, "none.json"), "none.json")):
            r, _ = self.merge(a, bad)
            self.assertNotEqual(r.returncode, 0, bad)
            self.assertIn(why, r.stderr)
            self.assertIn(os.path.basename(bad), r.stderr)
        self.assertFalse(os.path.exists(os.path.join(self.dir, "out.md")))


class WithoutGpu(unittest.TestCase):
    def test_says_it_needs_one(self):
        if torch is not None and torch.cuda.is_available():
            self.skipTest("a GPU is here: the script would measure")
        r = subprocess.run([sys.executable, SCRIPT], capture_output=True,
                           text=True, cwd=hrtest.ROOT, timeout=120)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("needs a GPU", r.stdout)
        self.assertIn("nothing measured", r.stdout)


if __name__ == "__main__":
    unittest.main()
