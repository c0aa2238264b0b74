"""Client, Comm and Lease against a real headroomd on a temporary socket,
through the real libheadroom."""
import os
import threading
import time
import unittest

import hrtest
from hrtest import DaemonTestCase

import headroom
from headroom import _lib


class EnvVar:
    """Set (or unset, with None) one variable for a block, in os.environ
    and so in the C environment, and put it back after."""

    def __init__(self, name, value):
        self.name, self.value = name, value

    def __enter__(self):
        self.old = os.environ.get(self.name)
        if self.value is None:
            os.environ.pop(self.name, None)
        else:
            os.environ[self.name] = self.value

    def __exit__(self, *exc):
        if self.old is None:
            os.environ.pop(self.name, None)
        else:
            os.environ[self.name] = self.old


class TestConnect(DaemonTestCase):
    def test_connect_with_path(self):
        c = self.client(name="py-connect")
        self.assertTrue(c.connected)
        self.assertEqual(c.gpu_count, 2)
        self.assertEqual(c.gpu_sms(0), 132)
        self.assertEqual(c.gpu_sms(1), 132)
        self.assertIn("connected", repr(c))

    def test_connect_from_environment(self):
        with EnvVar("HEADROOM_SOCKET", self.daemon.socket):
            with headroom.Client(quiet=True) as c:
                self.assertEqual(c.socket, self.daemon.socket)
                self.assertTrue(c.connected)
                self.assertEqual(c.gpu_count, 2)

    def test_default_socket_when_nothing_says(self):
        if os.path.exists(headroom.DEFAULT_SOCKET):
            self.skipTest("a daemon listens on %s here" % headroom.DEFAULT_SOCKET)
        with EnvVar("HEADROOM_SOCKET", None):
            with headroom.Client(quiet=True) as c:
                self.assertEqual(c.socket, headroom.DEFAULT_SOCKET)
                self.assertFalse(c.connected)
                self.assertEqual(c.gpu_count, 0)

    def test_context_managers_release(self):
        with headroom.Client(self.daemon.socket, quiet=True) as c:
            with c.lease(1, cluster=2) as lease:
                self.assertEqual(lease.grid, 130)
                self.assertEqual(lease.launch_config(),
                                 (130, 2, headroom.Mode.HEADROOM))
            self.assertTrue(lease.released)
            with self.assertRaises(headroom.InvalidArgument):
                lease.grid
            with c.register(1, "ctx", ctas=4) as comm:
                self.assertTrue(comm.registered)
            self.assertFalse(comm.registered)
        self.assertTrue(c.closed)
        with self.assertRaises(headroom.InvalidArgument):
            c.connected
        c.close()                        # idempotent

    def test_close_invalidates_leases_and_comms(self):
        c = headroom.Client(self.daemon.socket, quiet=True)
        lease = c.lease(0)
        comm = c.register(0, "dropped", ctas=2)
        c.close()
        # The library freed them; the Python objects must not touch them.
        self.assertTrue(lease.released)
        self.assertFalse(comm.registered)
        for read in (lambda: lease.grid, lambda: lease.epoch,
                     lambda: lease.launch_config(),
                     lambda: lease.budget(), lambda: lease.export_env()):
            with self.assertRaises(headroom.InvalidArgument):
                read()
        lease.release()                  # no-ops, no double free
        comm.unregister()

    def test_release_frees_on_daemon(self):
        a = self.client()
        b = self.client()
        watch = b.lease(1)
        self.assertEqual(watch.grid, 130)
        epoch = watch.epoch
        comm = a.register(1, "short", ctas=4, concurrent=2)
        self.assertTrue(watch.wait_change(epoch, 3000))
        self.assertEqual(watch.grid, 116)
        epoch = watch.epoch
        comm.unregister()
        self.assertTrue(watch.wait_change(epoch, 3000))
        self.assertEqual(watch.grid, 130)


class TestBudget(DaemonTestCase):
    def test_default_policy_numbers(self):
        c = self.client()
        lease = c.lease(0, cluster=2)
        b = lease.budget()
        self.assertIsInstance(b, headroom.Budget)
        self.assertEqual(b.gpu, 0)
        self.assertEqual(b.sms, 132)
        self.assertEqual(b.cluster, 2)
        self.assertEqual(b.mode, headroom.Mode.HEADROOM)
        self.assertEqual(b.headroom, 2)
        self.assertEqual(b.grid, 130)
        self.assertEqual(b.nccl_min_ctas, 1)
        self.assertEqual(b.nccl_max_ctas, 16)
        self.assertEqual(b.nccl_cga_cluster_size, 1)
        self.assertEqual(b.nccl_nvls_enable, 0)
        self.assertFalse(b.degraded)
        self.assertGreaterEqual(b.epoch, 1)
        # The hot path reads the same numbers.
        self.assertEqual(lease.grid, 130)
        self.assertEqual(lease.headroom, 2)
        self.assertEqual(lease.epoch, b.epoch)
        self.assertFalse(lease.degraded)
        self.assertEqual(lease.gpu, 0)
        self.assertIs(lease.client, c)
        self.assertEqual(lease.nccl_config(),
                         {"min_ctas": 1, "max_ctas": 16, "cga_cluster_size": 1})

    def test_every_client_on_a_gpu_gets_the_same_budget(self):
        x = self.client().lease(1, cluster=2).budget()
        y = self.client().lease(1, cluster=2).budget()
        self.assertEqual((x.grid, x.headroom, x.nccl_max_ctas, x.epoch),
                         (y.grid, y.headroom, y.nccl_max_ctas, y.epoch))

    def test_cooperative_mode(self):
        lease = self.client().lease(0, cluster=2, mode="cooperative")
        b = lease.budget()
        self.assertEqual(b.mode, headroom.Mode.COOPERATIVE)
        self.assertEqual(b.grid, 130)

    def test_footprint_of_another_client_is_pushed(self):
        trainer = self.client(name="py-trainer")
        lease = trainer.lease(1, cluster=2)
        self.assertEqual(lease.grid, 130)
        epoch = lease.epoch

        other = self.client(name="py-comms")
        # 4 CTAs x 2 collectives in flight; cluster pairs: 16 SMs.
        comm = other.register(1, "dp", ctas=4, cga=1, concurrent=2)
        self.assertTrue(lease.wait_change(epoch, 3000),
                        "no budget pushed after another client's footprint")
        b = lease.budget()
        self.assertEqual(b.headroom, 16)
        self.assertEqual(b.grid, 116)
        self.assertEqual(b.nccl_max_ctas, 8)     # 32 / 2 SMs / 2 collectives
        self.assertEqual(lease.grid, 116)
        self.assertGreater(b.epoch, epoch)

        epoch = lease.epoch
        other.close()                            # drops the footprint
        self.assertTrue(comm is not None and not comm.registered)
        self.assertTrue(lease.wait_change(epoch, 3000))
        self.assertEqual(lease.grid, 130)

    def test_wait_change_from_another_thread(self):
        lease = self.client().lease(1, cluster=2)
        epoch = lease.epoch
        got = []
        t = threading.Thread(target=lambda: got.append(
            lease.wait_change(epoch, 5000)))
        t.start()
        time.sleep(0.1)
        comm = self.client().register(1, "late", ctas=2)
        t.join(10)
        self.assertEqual(got, [True])
        self.assertEqual(lease.headroom, 4)      # 2 CTAs x cluster 2
        comm.unregister()

    def test_wait_change_times_out(self):
        lease = self.client().lease(0)
        t0 = time.monotonic()
        self.assertFalse(lease.wait_change(lease.epoch, 150))
        self.assertGreaterEqual(time.monotonic() - t0, 0.12)


class TestErrors(DaemonTestCase):
    def test_bad_gpu(self):
        c = self.client()
        with self.assertRaises(headroom.InvalidArgument) as cm:
            c.lease(5)                           # the daemon has GPUs 0 and 1
        e = cm.exception
        self.assertEqual(e.code, -1)
        self.assertEqual(e.code, _lib.HR_EINVAL)
        self.assertEqual(e.code_name, "HR_EINVAL")
        self.assertEqual(e.strerror, headroom.strerror(-1))
        self.assertIn(e.strerror, str(e))
        self.assertIsInstance(e, headroom.HeadroomError)
        self.assertIsInstance(e, ValueError)
        with self.assertRaises(headroom.NotFound) as cm:
            c.gpu_sms(5)
        self.assertEqual(cm.exception.code, _lib.HR_ENOTFOUND)
        self.assertEqual(cm.exception.code, -7)
        self.assertIsInstance(cm.exception, LookupError)
        with self.assertRaises(headroom.InvalidArgument):
            c.lease(-1)
        with self.assertRaises(headroom.InvalidArgument):
            c.lease(64)
        with self.assertRaises(headroom.InvalidArgument):
            c.register(7, "nope", ctas=4)

    def test_bad_arguments(self):
        c = self.client()
        for kw in (dict(cluster=3), dict(cluster=0), dict(cluster=16)):
            with self.assertRaises(headroom.InvalidArgument, msg=str(kw)):
                c.lease(0, **kw)
        for args in ((0, "zero", 0), (0, "many", 65), (0, "x" * 64, 4)):
            with self.assertRaises(headroom.InvalidArgument, msg=str(args)):
                c.register(*args)
        with self.assertRaises(headroom.InvalidArgument):
            c.register(0, "cga", ctas=4, cga=9)
        with self.assertRaises(headroom.InvalidArgument):
            c.register(0, "conc", ctas=4, concurrent=0)
        with self.assertRaises(headroom.InvalidArgument):
            c.lease(0).wait_change(0, -1)
        with self.assertRaises(ValueError):
            c.lease(0, mode="bogus")
        with self.assertRaises(ValueError):
            c.register(0, "nul\0byte", ctas=4)
        with self.assertRaises(TypeError):
            c.lease("0")
        other = self.client().lease(0)
        with self.assertRaises(ValueError):
            c.report("barrier_timeout", lease=other)

    def test_nothing_left_behind_by_refusals(self):
        c = self.client()
        lease = c.lease(1)
        epoch = lease.epoch
        with self.assertRaises(headroom.InvalidArgument):
            c.register(1, "bad", ctas=0)
        self.assertFalse(lease.wait_change(epoch, 200))
        self.assertEqual(lease.grid, 130)


class TestIncident(DaemonTestCase):
    def test_report_raises_headroom(self):
        trainer = self.client(name="py-incident")
        lease = trainer.lease(0, cluster=2)
        bystander = self.client().lease(0, cluster=2)
        self.assertEqual(lease.headroom, 2)
        epoch = bystander.epoch
        trainer.report(headroom.IncidentKind.BARRIER_TIMEOUT, lease,
                       headroom.IncidentDetail(barrier=1, arrived=120,
                                               expected=130, sm=17, grid=130,
                                               timeout_ms=500),
                       "python test: barrier 1 timed out")
        self.assertTrue(bystander.wait_change(epoch, 3000),
                        "the raised budget was not pushed")
        # One cluster above what failed.
        self.assertEqual(bystander.headroom, 4)
        self.assertEqual(bystander.grid, 128)
        self.assertTrue(lease.wait_change(epoch, 3000) or lease.grid == 128)
        self.assertEqual(lease.grid, 128)

    def test_report_without_lease_goes_to_footprint_gpu(self):
        reporter = self.client()
        comm = reporter.register(1, "only-a-footprint", ctas=1)
        watch = self.client().lease(1, cluster=2)
        deadline = time.monotonic() + 3
        while watch.headroom != 2 and time.monotonic() < deadline:
            watch.wait_change(None, 100)
        epoch = watch.epoch
        before = watch.headroom
        reporter.report("barrier_timeout", detail={"grid": 130},
                        message="no lease")
        self.assertTrue(watch.wait_change(epoch, 3000))
        self.assertGreater(watch.headroom, before)
        comm.unregister()

    def test_launch_failure_is_accepted(self):
        c = self.client()
        lease = c.lease(1)
        c.report("launch_failure", lease,
                 headroom.IncidentDetail(grid=130, cuda_error=720))


class TestExportEnv(DaemonTestCase):
    CHILD = """
        import json, os, subprocess, sys
        import headroom
        before = dict(os.environ)
        c = headroom.Client(%r, quiet=True)
        lease = c.lease(0, cluster=2)
        assert "torch" not in sys.modules
        ret = headroom.%s(lease)
        assert "torch" not in sys.modules, "torch was imported"
        after = dict(os.environ)
        changed = {k: v for k, v in after.items() if before.get(k) != v}
        gone = [k for k in before if k not in after]
        # What a child process inherits: the C environment.
        out = subprocess.run(["env", "-0"], capture_output=True).stdout
        cenv = dict(kv.split("=", 1) for kv in out.decode().split("\\0") if "=" in kv)
        cchanged = {k: v for k, v in cenv.items() if before.get(k) != v}
        print(json.dumps({"ret": ret, "changed": changed, "gone": gone,
                          "cchanged": cchanged}))
    """
    WANT = {"DG_MEGA_MOE_SM_HEADROOM": "2", "NCCL_MIN_CTAS": "1",
            "NCCL_MAX_CTAS": "16", "NCCL_CGA_CLUSTER_SIZE": "1",
            "NCCL_NVLS_ENABLE": "0"}

    def run_export(self, func, **env):
        out, _ = hrtest.run_child(self.CHILD % (self.daemon.socket, func),
                                  hrtest.clean_env(**env))
        return out

    def test_export_env_sets_exactly_the_variables(self):
        out = self.run_export("Lease.export_env")
        self.assertEqual(out["ret"], self.WANT)
        self.assertEqual(out["changed"], self.WANT)
        self.assertEqual(out["gone"], [])
        self.assertEqual(out["cchanged"], self.WANT)

    def test_apply_env_without_torch(self):
        out = self.run_export("apply_env")
        self.assertEqual(out["ret"], self.WANT)
        self.assertEqual(out["changed"], self.WANT)
        self.assertEqual(out["cchanged"], self.WANT)

    def test_export_env_overrides_what_was_there(self):
        out = self.run_export("apply_env", NCCL_MAX_CTAS="64",
                              DG_MEGA_MOE_SM_HEADROOM="0", NCCL_NVLS_ENABLE="1")
        self.assertEqual(out["ret"], self.WANT)
        self.assertEqual(out["changed"], self.WANT)
        self.assertEqual(out["cchanged"], self.WANT)


if __name__ == "__main__":
    unittest.main()
