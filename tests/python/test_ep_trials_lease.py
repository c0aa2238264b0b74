"""tests/gpu/test_ep_trials.py's daemon-facing half, on every machine: a
rank's lease in each of the four modes the trials run, against a real
headroomd (2 GPUs of 132 SMs): the three footprints registered with the
NCCL cap the lease gives until it holds, the budget settled, everything
given back; and the phases' table. The GPU half (the EP kernel, NCCL)
runs only where there are GPUs (tests/gpu/test_ep_trials.sh)."""
import os
import sys
import unittest

import hrtest

sys.path.insert(0, os.path.join(hrtest.ROOT, "tests", "gpu"))
import ep_trials_plan as P  # noqa: E402
import test_ep_trials as T  # noqa: E402


def bare_run(client, world=2):
    """A Run with what lease_take and table read, and no CUDA."""
    r = T.Run.__new__(T.Run)
    r.client, r.local, r.world, r.rank = client, 0, world, 0
    r.o = T.options(["--seed", "7"])
    r.E, r.H, r.I, r.K = T.SHAPES[r.o.shape]
    r.El = r.E // world
    r.rows = []
    return r


class Lease(hrtest.DaemonTestCase):
    def test_every_mode_settles_with_the_footprints(self):
        import headroom
        c = self.client(name="ep-trials-test")
        r = bare_run(c)
        for mode in T.LEASE_CLUSTER:
            lease, regs, b = r.lease_take(mode)
            try:
                self.assertEqual(len(regs), P.NCOMMS)
                self.assertFalse(b.degraded, mode)
                self.assertEqual(b.mode, headroom.Mode.of(mode), mode)
                self.assertGreaterEqual(b.nccl_max_ctas, 1, mode)
                self.assertEqual(lease.budget().nccl_max_ctas, b.nccl_max_ctas, mode)
                self.assertTrue(all(x.registered and x.ctas == b.nccl_max_ctas
                                    for x in regs), mode)
                # the headroom covers the three collectives in flight; the
                # agnostic kernel needs none (any residency completes)
                if mode == "agnostic":
                    self.assertEqual((b.headroom, b.grid), (0, 132), b)
                else:
                    self.assertGreaterEqual(b.headroom, P.NCOMMS * b.nccl_max_ctas, (mode, b))
                self.assertEqual(b.grid + b.headroom, 132, (mode, b))
                self.assertEqual(lease.epoch, b.epoch, mode)   # settled: nothing pending
            finally:
                for x in regs:
                    x.unregister()
                lease.release()

    def test_table(self):
        c = self.client(name="ep-trials-table")
        r = bare_run(c)
        r.rows = [dict(phase="headroom", grid=116, headroom=16, trials=1000, failed=0,
                       wrong=0, mega50=0.9, mega99=2.5, coll50=0.4, coll99=1.1, ok=True),
                  dict(phase="repro", grid=132, headroom=0, trials=1, failed=2, wrong=0,
                       mega50=float("nan"), mega99=float("nan"), coll50=float("nan"),
                       coll99=float("nan"), ok=True,
                       detail="BarrierTimeout: rank 0 failed at gemm1")]
        text = r.table("2 x NVIDIA H200; torch 2.11")
        lines = text.splitlines()
        head = next(i for i, x in enumerate(lines) if x.startswith("| phase |"))
        self.assertTrue(lines[head + 1].startswith("|---|"))
        self.assertEqual(lines[head].count("|"), lines[head + 1].count("|"))
        self.assertIn("| headroom | 116 | 16 | 1000 | 0 | 0 | 0.900 / 2.500 | "
                      "0.400 / 1.100 | pass |", text)
        self.assertIn("pass (BarrierTimeout: rank 0 failed at gemm1)", text)
        self.assertIn("seed 7", text)
        self.assertIn("2 x NVIDIA H200", text)


if __name__ == "__main__":
    unittest.main()
