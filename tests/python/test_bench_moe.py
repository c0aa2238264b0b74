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
