"""Partition mode from Python: the mode and the budget fields, the argument
errors, the path without a GPU, and the Partition wrapper's life cycle
against the fake CUDA driver the C unit tests use (build/tests/
libfakecuda.so, found as libcuda.so.1 through LD_LIBRARY_PATH in a child
process), so that it runs on machines without a GPU."""
import ctypes
import os
import unittest

import hrtest

import headroom
from headroom import _lib

FAKE = os.path.join(hrtest.BUILD, "tests", "libfakecuda.so")


class TestBinding(unittest.TestCase):
    def test_mode(self):
        self.assertEqual(int(headroom.Mode.PARTITION), 3)
        self.assertIs(headroom.Mode.of("partition"), headroom.Mode.PARTITION)
        self.assertIs(headroom.Mode.of(3), headroom.Mode.PARTITION)
        lib = headroom.load_library()
        self.assertEqual(lib.hr_mode_name(3).decode(), "partition")

    def test_budget_fields_last_in_order(self):
        names = [f for f, _ in _lib.Budget_t._fields_]
        self.assertEqual(names[-3:], ["partition_granularity",
                                      "partition_comm_sms",
                                      "partition_nccl_max_ctas"])
        b = headroom.Budget._from_c(_lib.Budget_t(
            partition_granularity=8, partition_comm_sms=16,
            partition_nccl_max_ctas=16))
        self.assertEqual((b.partition_granularity, b.partition_comm_sms,
                          b.partition_nccl_max_ctas), (8, 16, 16))

    def test_partition_needs_a_lease(self):
        with self.assertRaises(TypeError):
            headroom.Partition(object())
        with self.assertRaises(TypeError):
            headroom.Partition(None)


class TestDegraded(hrtest.DegradedTestCase):
    """No daemon; each case in a child with an environment from scratch."""
    CHILD = """
        import json, headroom
        c = headroom.Client(%r, quiet=True)
        hl = c.lease(0, cluster=2)
        pl = c.lease(0, cluster=1, mode="partition")
        out = {"h": hl.budget().__dict__, "p": pl.budget().__dict__,
               "grid": pl.grid, "headroom": pl.headroom}
        for k in ("h", "p"):
            out[k]["mode"] = int(out[k]["mode"])
        try:
            hl.partition()
            out["wrong_mode"] = "created"
        except headroom.HeadroomError as e:
            out["wrong_mode"] = [type(e).__name__, e.code]
        try:
            with pl.partition() as part:
                out["create"] = ["ok", part.comm_sms, part.mega_sms]
        except headroom.HeadroomError as e:
            out["create"] = [type(e).__name__, e.code]
        c.close()
        print(json.dumps(out))
    """

    def test_budgets_from_the_environment(self):
        for env_h, comm_132 in (("4", 8), ("9", 16), ("20", 24)):
            out, _ = self.run_degraded(DG_MEGA_MOE_SM_HEADROOM=env_h)
            h, p = out["h"], out["p"]
            g = h["partition_granularity"]
            sms = h["sms"]
            # The rule of docs/partition.md: the headroom rounded up to a
            # step, at least one step.
            comm = -(-int(env_h) // g) * g
            self.assertEqual(h["partition_comm_sms"], comm)
            self.assertEqual(p["mode"], int(headroom.Mode.PARTITION))
            self.assertEqual(p["headroom"], comm)
            self.assertEqual(p["grid"], sms - comm)
            self.assertEqual(out["grid"], sms - comm)
            self.assertEqual(out["headroom"], comm)
            self.assertEqual(p["nccl_cga_cluster_size"], 1)
            self.assertLessEqual(p["nccl_max_ctas"], comm)
            # The headroom lease (cluster 2): the environment's, in whole
            # clusters, never under the policy's floor of 2.
            self.assertEqual(h["headroom"], max(2, -(-int(env_h) // 2) * 2))
            if not os.path.exists("/dev/nvidiactl"):
                self.assertEqual((sms, g, comm), (132, 8, comm_132))

    def test_errors_without_a_gpu(self):
        out, _ = self.run_degraded(DG_MEGA_MOE_SM_HEADROOM="8")
        self.assertEqual(out["wrong_mode"], ["InvalidArgument", -1])
        if os.path.exists("/dev/nvidiactl"):
            self.skipTest("a GPU driver is here: the no-GPU path is not")
        self.assertEqual(out["create"], ["NoGPU", -20])


class TestWithDaemon(hrtest.DaemonTestCase):
    """headroomd's budgets (2 GPUs of 132 SMs, default policy)."""

    def test_partition_lease(self):
        c = self.client()
        h = c.lease(0, cluster=2)
        p = c.lease(0, cluster=2, mode=headroom.Mode.PARTITION)
        b = p.budget()
        self.assertIs(b.mode, headroom.Mode.PARTITION)
        self.assertFalse(b.degraded)
        self.assertEqual((b.partition_granularity, b.partition_comm_sms,
                          b.partition_nccl_max_ctas), (8, 8, 8))
        self.assertEqual((b.headroom, b.grid, p.headroom, p.grid),
                         (8, 124, 8, 124))
        self.assertEqual(b.nccl_config()["max_ctas"], 8)
        self.assertEqual(b.nccl_config()["cga_cluster_size"], 1)
        # The headroom lease beside it keeps its own numbers.
        self.assertEqual((h.headroom, h.grid), (2, 130))
        self.assertEqual(h.budget().partition_comm_sms, 8)

    def test_footprint_moves_it(self):
        a, b = self.client(), self.client()
        p = a.lease(1, cluster=2, mode="partition")
        epoch = p.epoch
        with b.register(1, "dp", ctas=12):
            self.assertTrue(p.wait_change(epoch, timeout_ms=3000))
            deadline = 50
            while p.grid != 116 and deadline:
                p.wait_change(timeout_ms=100)
                deadline -= 1
            self.assertEqual((p.headroom, p.grid), (16, 116))


@unittest.skipUnless(os.path.exists(FAKE),
                     "no %s (built where cuda.h is found)" % FAKE)
class TestWithFakeDriver(hrtest.DegradedTestCase):
    """The wrapper around a real hr_partition, made by the fake driver
    (132 SMs in steps of 8, like an H200)."""
    CHILD = """
        import ctypes, json, headroom
        out = {}
        c = headroom.Client(%r, quiet=True)
        lease = c.lease(0, cluster=2, mode="partition")
        b = lease.budget()
        out["budget"] = [b.headroom, b.grid, b.partition_granularity]
        fake = ctypes.CDLL("libcuda.so.1")
        fake.fake_cuda_get.restype = ctypes.c_long
        live = lambda: [fake.fake_cuda_get(b"live_ctx"),
                        fake.fake_cuda_get(b"live_streams"),
                        fake.fake_cuda_get(b"order_errors")]

        with lease.partition() as p:
            out["sms"] = [p.comm_sms, p.mega_sms]
            out["streams"] = [p.comm_stream, p.mega_stream]
            out["epoch"] = [p.epoch, lease.epoch, p.stale]
            out["repr"] = repr(p)
            fake.fake_cuda_stream_sms.restype = ctypes.c_long
            fake.fake_cuda_stream_sms.argtypes = [ctypes.c_void_p]
            extra = [p.stream("comm"), p.stream("mega"), p.stream()]
            out["extra_sms"] = [fake.fake_cuda_stream_sms(x) for x in extra]
            out["extra_distinct"] = len(set(extra + out["streams"]))
            try:
                p.stream("both")
                out["bad_side"] = "worked"
            except headroom.InvalidArgument:
                out["bad_side"] = "InvalidArgument"
            out["live_open"] = live()
        out["live_closed"] = live()
        try:
            p.comm_sms
            out["after_close"] = "worked"
        except headroom.InvalidArgument:
            out["after_close"] = "InvalidArgument"
        p.close()                                  # idempotent

        # Releasing the lease closes its partitions first.
        q = lease.partition()
        lease.release()
        out["release"] = [q.closed, live()]

        # So does closing the client.
        lease = c.lease(0, cluster=2, mode="partition")
        q1, q2 = lease.partition(), lease.partition()
        out["two_open"] = live()
        c.close()
        out["client_close"] = [q1.closed, q2.closed, live()]
        print(json.dumps(out))
    """

    def setUp(self):
        super().setUp()
        os.symlink(FAKE, os.path.join(self.dir, "libcuda.so.1"))

    def test_life_cycle(self):
        ld = self.dir + (":" + os.environ["LD_LIBRARY_PATH"]
                         if os.environ.get("LD_LIBRARY_PATH") else "")
        out, err = self.run_degraded(DG_MEGA_MOE_SM_HEADROOM="4",
                                     LD_LIBRARY_PATH=ld)
        self.assertEqual(out["budget"], [8, 124, 8])
        self.assertEqual(out["sms"], [8, 124])
        comm, mega = out["streams"]
        self.assertTrue(comm and mega and comm != mega, out["streams"])
        self.assertEqual(out["epoch"], [0, 0, False])
        self.assertIn("comm 8 SMs, mega 124 SMs", out["repr"])
        self.assertEqual(out["extra_sms"], [8, 124, 8])
        self.assertEqual(out["extra_distinct"], 5)
        self.assertEqual(out["bad_side"], "InvalidArgument")
        self.assertEqual(out["live_open"], [2, 5, 0])
        self.assertEqual(out["live_closed"], [0, 0, 0])
        self.assertEqual(out["after_close"], "InvalidArgument")
        self.assertEqual(out["release"], [True, [0, 0, 0]])
        self.assertEqual(out["two_open"], [4, 4, 0])
        self.assertEqual(out["client_close"], [True, True, [0, 0, 0]])
        self.assertNotIn("failed", err)


if __name__ == "__main__":
    unittest.main()
