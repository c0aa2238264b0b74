"""The torch helpers: nccl_options(), apply_env() with torch loaded, the
tensor checks of Moe.forward, and (with a GPU) one forward against the
torch reference. Skipped, each with its reason, where torch is missing."""
import os
import time
import unittest
import warnings

import hrtest
from hrtest import DaemonTestCase

import headroom

torch = hrtest.torch_or_none()
NO_TORCH = "torch is not importable here"


def have_nccl():
    return torch is not None and hasattr(torch.distributed, "ProcessGroupNCCL")


def have_gpu_moe():
    return (torch is not None and torch.cuda.is_available() and
            os.path.exists(os.path.join(hrtest.LIBDIR, "libheadroom_moe.so")))


@unittest.skipUnless(torch is not None, NO_TORCH)
@unittest.skipUnless(have_nccl(), "this torch has no NCCL backend")
class TestNcclOptions(DaemonTestCase):
    def test_options_carry_the_budget(self):
        lease = self.client().lease(0, cluster=2)
        opts = headroom.nccl_options(lease)
        self.assertIsInstance(opts, torch.distributed.ProcessGroupNCCL.Options)
        self.assertEqual(opts.config.min_ctas, 1)
        self.assertEqual(opts.config.max_ctas, 16)
        self.assertEqual(opts.config.cga_cluster_size, 1)
        self.assertFalse(opts.is_high_priority_stream)
        # One object per process group: torch writes into the one it gets.
        self.assertIsNot(headroom.nccl_options(lease), opts)
        hi = headroom.nccl_options(lease, is_high_priority_stream=True)
        self.assertTrue(hi.is_high_priority_stream)

    def test_options_follow_footprints(self):
        c = self.client()
        lease = c.lease(1, cluster=2)
        epoch = lease.epoch
        c.register(1, "dp", ctas=4, concurrent=2)
        self.assertTrue(lease.wait_change(epoch, 3000))
        self.assertEqual(headroom.nccl_options(lease).config.max_ctas, 8)

    def test_degraded_budget_caps_nccl(self):
        # No daemon: the budget computed in the process decides every
        # field, whatever NCCL variables this environment has.
        with headroom.Client(os.path.join(self.daemon.dir, "nobody.sock"),
                             quiet=True) as c:
            lease = c.lease(0)
            self.assertTrue(lease.degraded)
            b = lease.budget()
            opts = headroom.nccl_options(lease)
        self.assertGreaterEqual(b.nccl_max_ctas, 1)
        self.assertEqual(opts.config.max_ctas, b.nccl_max_ctas)
        self.assertEqual(opts.config.min_ctas, b.nccl_min_ctas)
        self.assertEqual(opts.config.cga_cluster_size, 1)

    def test_apply_env_before_init_does_not_warn(self):
        lease = self.client().lease(0)
        saved = {k: os.environ.get(k) for k in headroom.ENV_VARS}
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("error")
                got = headroom.apply_env(lease)
            self.assertEqual(got["NCCL_MAX_CTAS"], "16")
            self.assertEqual(os.environ["NCCL_NVLS_ENABLE"], "0")
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v


@unittest.skipUnless(torch is not None, NO_TORCH)
class TestMoeTensorChecks(unittest.TestCase):
    SHAPE = headroom.MoeShape(experts=4, hidden=128, inter=64, topk=2,
                              max_tokens=8)

    def tensors(self, T=8):
        E, H, I, k = 4, 128, 64, 2
        return dict(x=torch.zeros(T, H, dtype=torch.bfloat16),
                    ids=torch.zeros(T, k, dtype=torch.int32),
                    weights=torch.zeros(T, k, dtype=torch.float32),
                    w1=torch.zeros(E, 2 * I, H, dtype=torch.bfloat16),
                    w2=torch.zeros(E, H, I, dtype=torch.bfloat16),
                    y=torch.zeros(T, H, dtype=torch.bfloat16))

    def check(self, **t):
        return headroom.check_moe_tensors(self.SHAPE, 0, **t)

    def expect(self, pattern, **change):
        t = self.tensors()
        t.update(change)
        with self.assertRaisesRegex(ValueError, pattern):
            self.check(**t)

    def test_each_mistake_is_named(self):
        self.expect(r"^ids must be torch\.int32",
                    ids=torch.zeros(8, 2, dtype=torch.int64))
        self.expect(r"^weights must be torch\.float32",
                    weights=torch.zeros(8, 2, dtype=torch.bfloat16))
        self.expect(r"^x must be torch\.bfloat16",
                    x=torch.zeros(8, 128, dtype=torch.float16))
        self.expect(r"^w1 must have shape \(4, 128, 128\)",
                    w1=torch.zeros(4, 64, 128, dtype=torch.bfloat16))
        self.expect(r"^w2 must have shape \(4, 128, 64\)",
                    w2=torch.zeros(4, 64, 128, dtype=torch.bfloat16))
        self.expect(r"^y must have shape \(8, 128\)",
                    y=torch.zeros(7, 128, dtype=torch.bfloat16))
        self.expect(r"^x must be \[T, H\]",
                    x=torch.zeros(8, 128, 1, dtype=torch.bfloat16))
        # Right in every way but the device: CPU tensors.
        self.expect(r"^x must be on cuda:0, got cpu")

    def test_token_count(self):
        t = self.tensors(T=9)
        with self.assertRaisesRegex(ValueError, r"9 tokens, must be 1\.\.8"):
            self.check(**t)
        t = self.tensors(T=0)
        with self.assertRaisesRegex(ValueError, r"0 tokens"):
            self.check(**t)

    def test_not_a_tensor(self):
        t = self.tensors()
        t["w2"] = [1, 2, 3]
        with self.assertRaisesRegex(TypeError, r"^w2 must be a torch\.Tensor"):
            self.check(**t)

    def test_reference_matches_a_loop(self):
        g = torch.Generator().manual_seed(3)
        E, H, I, k, T = 3, 8, 4, 2, 5
        x = (torch.rand(T, H, generator=g) * 2 - 1).bfloat16()
        w1 = (torch.rand(E, 2 * I, H, generator=g) - 0.5).bfloat16()
        w2 = (torch.rand(E, H, I, generator=g) - 0.5).bfloat16()
        ids = torch.tensor([[0, 1], [2, 0], [1, 2], [0, 2], [1, 0]],
                           dtype=torch.int32)
        wts = torch.rand(T, k, generator=g)
        y = headroom.moe_reference(x, ids, wts, w1, w2)
        for t in range(T):
            acc = torch.zeros(H)
            for j in range(k):
                e = int(ids[t, j])
                gate = w1[e, :I].float() @ x[t].float()
                up = w1[e, I:].float() @ x[t].float()
                h = (torch.nn.functional.silu(gate) * up).bfloat16().float()
                acc += wts[t, j] * (w2[e].float() @ h).bfloat16().float()
            torch.testing.assert_close(y[t].float(), acc.bfloat16().float(),
                                       rtol=1e-2, atol=1e-2)


@unittest.skipUnless(torch is not None, NO_TORCH)
@unittest.skipUnless(have_gpu_moe(), "no CUDA device, or libheadroom_moe.so "
                                     "not built")
class TestMoeOnGpu(DaemonTestCase):
    """One forward on GPU 0 under a lease (of the test daemon: 132 SMs,
    grid 130), against the torch reference; then the checks that need a
    GPU tensor."""

    def setup_moe(self, T, seed):
        """A Moe of the small shape on GPU 0 and random inputs for T
        tokens; y filled with NaN. Skips where GPU 0 is not an sm_90."""
        dev = torch.device("cuda", 0)
        torch.cuda.set_device(dev)
        E, H, I, k = 8, 256, 512, 2
        g = torch.Generator(device=dev).manual_seed(seed)
        x = (torch.rand(T, H, device=dev, generator=g) * 2 - 1).bfloat16()
        w1 = ((torch.rand(E, 2 * I, H, device=dev, generator=g) - 0.5)
              / 8).bfloat16()
        w2 = ((torch.rand(E, H, I, device=dev, generator=g) - 0.5)
              / 8).bfloat16()
        ids = torch.rand(T, E, device=dev, generator=g).argsort(dim=1)[:, :k]
        ids = ids.int().contiguous()
        wts = torch.rand(T, k, device=dev, generator=g) * 0.95 + 0.05
        y = torch.full((T, H), float("nan"), device=dev, dtype=torch.bfloat16)
        try:
            moe = headroom.Moe(E, H, I, k, T, device=0)
        except headroom.Unsupported:
            self.skipTest("GPU 0 is not compute capability 9.0")
        self.addCleanup(moe.close)
        return moe, (x, ids, wts, w1, w2, y)

    def test_forward_under_lease(self):
        moe, (x, ids, wts, w1, w2, y) = self.setup_moe(64, 7)
        lease = self.client().lease(0, cluster=2)
        grid = lease.grid
        self.assertLessEqual(grid, moe.sms)
        moe.forward(lease, x, ids, wts, w1, w2, y, timeout_ms=2000)
        moe.sync()
        ref = headroom.moe_reference(x, ids, wts, w1, w2)
        self.assertFalse(torch.isnan(y.float()).any().item())
        err = ((y.float() - ref.float()).norm() / ref.float().norm()).item()
        self.assertLess(err, 1e-2)
        # Same bits from another grid.
        y2 = torch.full_like(y, float("nan"))
        moe.forward_grid(grid // 2, x, ids, wts, w1, w2, y2, cluster=1)
        moe.sync()
        self.assertTrue(torch.equal(y, y2))
        with self.assertRaisesRegex(ValueError, "contiguous"):
            moe.forward(lease, x.t().contiguous().t(), ids, wts, w1, w2, y)

    def test_bounded_sync_behind_a_long_kernel(self):
        # A launch queued behind a kernel that spins for about a second:
        # a bounded sync gives up (TimedOut) and leaves it in flight; an
        # unbounded one then gets the launch, whose y is the reference's.
        moe, (x, ids, wts, w1, w2, y) = self.setup_moe(32, 11)
        dev = torch.device("cuda", 0)
        stream = torch.cuda.Stream(device=dev)
        torch.cuda.synchronize(dev)              # the inputs are written
        with torch.cuda.stream(stream):
            torch.cuda._sleep(int(2e9))          # ~1 s of clock cycles
        moe.forward_grid(moe.sms, x, ids, wts, w1, w2, y, timeout_ms=60000,
                         stream=stream)
        t0 = time.monotonic()
        with self.assertRaises(headroom.TimedOut):
            moe.sync(timeout_ms=100)
        waited = time.monotonic() - t0
        self.assertGreaterEqual(waited, 0.09)
        self.assertLess(waited, 0.5)
        with self.assertRaises(headroom.TimedOut):
            moe.sync(timeout_ms=0)               # still queued
        with self.assertRaises(ValueError):
            moe.sync(timeout_ms=-1)
        moe.sync()                               # now it runs to the end
        ref = headroom.moe_reference(x, ids, wts, w1, w2)
        self.assertFalse(torch.isnan(y.float()).any().item())
        err = ((y.float() - ref.float()).norm() / ref.float().norm()).item()
        self.assertLess(err, 1e-2)
        moe.sync(timeout_ms=50)                  # nothing in flight: at once


if __name__ == "__main__":
    unittest.main()
