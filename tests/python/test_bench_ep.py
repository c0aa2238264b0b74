"""bench/bench_ep.py on the CPU: its argument parsing and mode, the table
it writes (header, rows, a skipped cell, a missing backward), its memory
estimate, the whole virtual-rank flow of one shape with CUDA's streams,
events and sleeps stood in for (headroom's side then runs the ops' CPU
path, the baseline ep_moe_lockstep, so every step of the loop runs), and
the script without a GPU: one line saying it needs one, exit 0. The
parts that need torch skip where it is missing."""
import contextlib
import importlib.util
import io
import os
import subprocess
import sys
import time
import unittest
from unittest import mock

import hrtest

torch = hrtest.torch_or_none()
NO_TORCH = "torch is not importable here"
SCRIPT = os.path.join(hrtest.ROOT, "bench", "bench_ep.py")
HAVE_MOE = os.path.exists(os.path.join(hrtest.LIBDIR, "libheadroom_moe.so"))


def load_bench_ep():
    spec = importlib.util.spec_from_file_location("bench_ep", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def meta(**kw):
    m = dict(date="2026-12-03 10:00 UTC", gpu="NVIDIA H200 x 1 (132 SMs)",
             driver="570.1", torch="2.15", command="python3 bench/bench_ep.py "
             "--virtual 2", commit="abc1234", mode="virtual", R=2, grid=66,
             reps=20, warmup=3, backward=True, backward_why="")
    m.update(kw)
    return m


class TestArguments(unittest.TestCase):
    def setUp(self):
        self.be = load_bench_ep()
        self.env = mock.patch.dict(os.environ)
        self.env.start()
        self.addCleanup(self.env.stop)
        for k in ("WORLD_SIZE", "RANK", "LOCAL_RANK"):
            os.environ.pop(k, None)

    def test_defaults(self):
        opt = self.be.parse_args([])
        self.assertEqual(opt.token_list, [1024, 4096, 8192, 16384])
        self.assertEqual(opt.shape_list, ["qwen3-30b-a3b", "deepseek-v3"])
        self.assertEqual((opt.reps, opt.warmup, opt.virtual, opt.backward),
                         (20, 3, None, True))
        self.assertEqual(self.be.SHAPES["qwen3-30b-a3b"], (128, 2048, 768, 8))
        self.assertEqual(self.be.SHAPES["deepseek-v3"], (256, 7168, 2048, 8))

    def test_smoke(self):
        opt = self.be.parse_args(["--smoke"])
        self.assertEqual((opt.shape_list, opt.token_list, opt.reps),
                         (["smoke"], [64], 3))
        self.assertEqual(opt.virtual, 2)
        self.assertEqual(self.be.parse_args(["--smoke", "--virtual", "4"]).virtual, 4)

    def expect_error(self, argv, text):
        err = []
        with mock.patch.object(sys, "stderr") as stderr:
            stderr.write.side_effect = err.append
            with self.assertRaises(SystemExit) as cm:
                self.be.parse_args(argv)
        self.assertEqual(cm.exception.code, 2)
        self.assertIn(text, "".join(err))

    def test_refused(self):
        self.expect_error(["--virtual", "9"], "--virtual must be 1..8, got 9")
        self.expect_error(["--virtual", "0"], "--virtual must be 1..8")
        self.expect_error(["--tokens", "1024,x"], "comma-separated list of integers")
        self.expect_error(["--tokens", "0"], ">= 1 each")
        self.expect_error(["--shapes", "llama"], "unknown shape 'llama'")
        self.expect_error(["--virtual", "3"], "128 experts do not split over 3 ranks")
        self.expect_error(["--reps", "0"], "--reps must be >= 1")

    def test_mode(self):
        be = self.be
        opt = be.parse_args(["--virtual", "4"])
        self.assertEqual(be.mode_of(opt, {}), ("virtual", 4))
        self.assertEqual(be.mode_of(opt, {"WORLD_SIZE": "8"}), ("virtual", 4))
        opt = be.parse_args([])
        self.assertEqual(be.mode_of(opt, {"WORLD_SIZE": "8"}), ("torchrun", 8))
        mode, why = be.mode_of(opt, {"WORLD_SIZE": "16"})
        self.assertIsNone(mode)
        self.assertIn("1..8", why)
        mode, why = be.mode_of(opt, {})
        self.assertIsNone(mode)
        self.assertIn("torchrun", why)
        self.assertIn("--virtual R", why)


class TestTable(unittest.TestCase):
    def setUp(self):
        self.be = load_bench_ep()

    def row(self, **kw):
        r = dict(shape="qwen3-30b-a3b", E=128, R=2, T=4096,
                 t_fwd=[1.5, 2.0], h_fwd=[0.5, 0.8], t_step=[4.0, 5.0],
                 h_step=[2.0, 2.5], rel_y=3.1e-3, rel_grads=[1e-2, 2e-2, 3e-3],
                 ctx_bytes=3 * 2**30)
        r.update(kw)
        return r

    def test_formatting(self):
        be = self.be
        self.assertEqual(be.fmt_ratio(4.0, 2.0), "2.00x")
        self.assertEqual(be.fmt_ratio(None, 2.0), "-")
        self.assertEqual(be.fmt_ratio(1.0, 0), "-")
        self.assertEqual(be.slowest([1.0, 3.0, 2.0]), 3.0)
        self.assertIsNone(be.slowest([1.0, None]))
        self.assertIsNone(be.slowest([]))
        self.assertEqual(be.fmt_bytes(3 * 2**30), "3.00 GiB")
        self.assertEqual(be.fmt_bytes(5 * 2**20), "5 MiB")
        self.assertEqual(be.fmt_ms(None), "-")

    def test_virtual_table(self):
        rows = [self.row(),
                self.row(T=8192, h_step=[None, None], rel_grads=None),
                self.row(shape="deepseek-v3", E=128, T=16384, skipped="about "
                         "200 GiB needed, 130 free")]
        text = self.be.table(rows, ["a note"], meta())
        lines = text.splitlines()
        self.assertTrue(lines[0].startswith("# Expert-parallel MoE layer"))
        self.assertIn("2026-12-03 10:00 UTC", lines[0])
        for want in ("NVIDIA H200", "driver 570.1", "`python3 bench/bench_ep.py "
                     "--virtual 2`", "commit abc1234", "its exchange is a local "
                     "copy", "grid 66", "no CUDA graphs", "- a note"):
            self.assertIn(want, text)
        body = [l for l in lines if l.startswith("| qwen3") or l.startswith("| deep")]
        self.assertEqual(len(body), 3)
        # The slowest rank's median, and baseline / headroom of those.
        self.assertIn("| 2.000 | 0.800 | 2.50x | 5.000 | 2.500 | 2.00x |", body[0])
        self.assertIn("1.0e-02 / 2.0e-02 / 3.0e-03", body[0])
        self.assertIn("3.00 GiB", body[0])
        self.assertIn("| 5.000 | - | - |", body[1])
        self.assertIn("deepseek-v3 (E=128) | 2 | 16384 | skipped: about 200 GiB",
                      body[2])
        self.assertIn("- qwen3-30b-a3b T=4096: 1.500/2.000; 0.500/0.800; "
                      "4.000/5.000; 2.000/2.500", text)

    def test_torchrun_table_and_missing_backward(self):
        text = self.be.table([self.row(R=8, t_fwd=[1.0] * 8, h_fwd=[0.5] * 8,
                                       t_step=[2.0] * 8, h_step=[None] * 8,
                                       rel_grads=None)], [],
                             meta(mode="torchrun", R=8, grid=132, backward=False,
                                  backward_why="the library has no "
                                  "hr_moe_ep_backward yet"))
        self.assertIn("8 ranks under torchrun", text)
        self.assertNotIn("local copy", text)
        self.assertIn("headroom's step not measured: the library has no "
                      "hr_moe_ep_backward yet", text)

    def test_memory_estimate(self):
        be = self.be
        one = be.need_bytes(128, 2048, 768, 8, 4096, 8, 1, 0)
        self.assertEqual(be.need_bytes(128, 2048, 768, 8, 4096, 8, 8, 0), 8 * one)
        self.assertLess(one, be.need_bytes(128, 2048, 768, 8, 8192, 8, 1, 0))
        self.assertEqual(be.need_bytes(128, 2048, 768, 8, 4096, 8, 1, 10),
                         one + 10)
        # The weights and their gradient: 2 x 3 E/R H I bf16 at least.
        self.assertGreater(one, 2 * 3 * 16 * 2048 * 768 * 2)


class _Stream:
    def wait_stream(self, s):
        pass

    def wait_event(self, e):
        pass

    def synchronize(self):
        pass


class _Event:
    def __init__(self, enable_timing=False):
        self.t = None

    def record(self, stream=None):
        self.t = time.perf_counter()

    def elapsed_time(self, other):
        return (other.t - self.t) * 1e3


@unittest.skipUnless(torch is not None, NO_TORCH)
@unittest.skipUnless(HAVE_MOE, "libheadroom_moe.so is not built here (no nvcc)")
class TestVirtualFlowOnCpu(unittest.TestCase):
    """One shape's cells through Virtual and bench_shape, on the CPU: CUDA's
    streams and events are stand-ins (events read the host clock), so the
    numbers mean nothing, but every call of the loop runs: the modules
    made collectively on threads, each side's forward and step, the
    comparison and the collective close."""

    def test_one_shape(self):
        be = load_bench_ep()
        import headroom
        import headroom.nn as hnn
        stand_ins = dict(Stream=_Stream, Event=_Event,
                         stream=lambda s: contextlib.nullcontext(),
                         _sleep=lambda n: None, synchronize=lambda *a: None,
                         set_device=lambda d: None,
                         mem_get_info=lambda *a: (64 << 30, 80 << 30),
                         current_stream=lambda *a: _Stream(),
                         empty_cache=lambda: None)
        with contextlib.ExitStack() as st:
            for name, v in stand_ins.items():
                st.enter_context(mock.patch.object(torch.cuda, name, v))
            st.enter_context(mock.patch.object(torch.Tensor, "record_stream",
                                               lambda self, s: None,
                                               create=True))
            opt = be.parse_args(["--smoke", "--virtual", "2"])
            side = be.Virtual(2, headroom, hnn, opt)
            rows, notes = [], []
            st.enter_context(contextlib.redirect_stdout(io.StringIO()))
            be.bench_shape(side, headroom, "smoke", opt, rows, notes, True, 2,
                           torch.device("cpu"))
        self.assertEqual(len(rows), 1)
        r = rows[0]
        self.assertEqual((r["shape"], r["E"], r["R"], r["T"]), ("smoke", 8, 2, 64))
        for key in ("t_fwd", "h_fwd", "t_step", "h_step"):
            self.assertEqual(len(r[key]), 2, key)
            self.assertTrue(all(v > 0 for v in r[key]), key)
        # The two sides computed the same layer (bf16 both).
        self.assertLess(r["rel_y"], 3e-2)
        self.assertTrue(all(v < 3e-2 for v in r["rel_grads"]), r["rel_grads"])
        self.assertIsNone(side.mods)                    # closed
        self.assertIn("| smoke | 2 | 64 |", be.table(rows, notes, meta()))


class TestWithoutGPU(unittest.TestCase):
    def test_says_it_needs_a_gpu(self):
        env = dict(os.environ, CUDA_VISIBLE_DEVICES="")
        env.pop("WORLD_SIZE", None)
        p = subprocess.run([sys.executable, SCRIPT, "--virtual", "2"],
                           capture_output=True, text=True, env=env, timeout=300)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("needs a GPU", p.stdout)
        self.assertIn("nothing measured", p.stdout)


if __name__ == "__main__":
    unittest.main()


class TestRelL2(unittest.TestCase):
    """rel_l2 a chunk at a time is the whole tensors' relative error."""

    def setUp(self):
        try:
            import torch
        except ImportError:
            self.skipTest("no torch")
        self.torch = torch
        self.be = load_bench_ep()

    def test_chunks_agree_with_the_whole(self):
        torch = self.torch
        g = torch.Generator().manual_seed(3)
        b = torch.randn(1000, generator=g)
        a = b + 0.01 * torch.randn(1000, generator=g)
        whole = ((a.double() - b.double()).norm() / b.double().norm()).item()
        for chunk in (7, 64, 1000, 1 << 24):
            self.assertAlmostEqual(self.be.rel_l2(a, b, chunk=chunk), whole, places=12)
        self.assertEqual(self.be.rel_l2(b, b, chunk=7), 0.0)
        self.assertGreater(self.be.rel_l2(a, b, chunk=7), 0.005)
