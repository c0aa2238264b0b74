"""examples/: each is built and run the way its header says, against a
real daemon, so neither can rot."""
import os
import re
import shutil
import subprocess
import sys
import unittest

import hrtest
from hrtest import DaemonTestCase

LEASE_C = os.path.join(hrtest.ROOT, "examples", "lease.c")
TRAIN_PY = os.path.join(hrtest.ROOT, "examples", "train_step.py")
TRAIN_MOE = os.path.join(hrtest.ROOT, "examples", "train_moe.py")


def documented_lines(path, start):
    """The command lines in a file's header that begin with `start`."""
    with open(path) as f:
        head = f.read(4000)
    out = []
    for line in head.splitlines():
        line = line.lstrip(" *").strip()
        if line.startswith(start):
            out.append(line)
    return out


def parse_kv(text):
    out = {}
    for line in text.splitlines():
        m = re.match(r"^([a-z_]+) (-?\d+)$", line)
        if m:
            out[m.group(1)] = int(m.group(2))
    return out


class TestLeaseC(DaemonTestCase):
    exe = os.path.join(hrtest.BUILD, "examples", "lease")

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        if not (shutil.which("cc")):
            raise unittest.SkipTest("no cc on PATH")
        builds = documented_lines(LEASE_C, "mkdir -p build/examples && cc ")
        if len(builds) != 1:
            raise AssertionError("examples/lease.c: expected one build line "
                                 "in its header, found %d" % len(builds))
        cmd = builds[0]
        if hrtest.BUILD != os.path.join(hrtest.ROOT, "build"):
            cmd = cmd.replace("build/", os.path.relpath(
                hrtest.BUILD, hrtest.ROOT) + "/")
        p = subprocess.run(["sh", "-c", cmd], cwd=hrtest.ROOT,
                           capture_output=True, text=True, timeout=120)
        if p.returncode != 0 or p.stderr.strip():
            raise AssertionError("the documented build of examples/lease.c "
                                 "failed or warned:\n%s\n%s" % (cmd, p.stderr))

    def run_lease(self, *args, env=None):
        p = subprocess.run([self.exe, *args], capture_output=True, text=True,
                           timeout=30, env=env)
        self.assertEqual(p.returncode, 0, p.stderr)
        return parse_kv(p.stdout), p.stdout

    def test_prints_the_grid_of_its_footprint(self):
        kv, out = self.run_lease("--socket", self.daemon.socket, "1")
        self.assertEqual(kv["connected"], 1)
        self.assertEqual(kv["gpu"], 1)
        self.assertEqual(kv["degraded"], 0)
        # 8 CTAs x 2 collectives, cluster 2: 32 SMs of headroom (the
        # default ceiling); NCCL gets 8 CTAs per collective.
        self.assertEqual(kv["headroom"], 32)
        self.assertEqual(kv["nccl_max_ctas"], 8)
        self.assertEqual(kv["grid"], 100)
        self.assertTrue(out.rstrip().endswith("grid 100"), out)
        if "ncclConfig_t minCTAs" in out:
            self.assertIn("ncclConfig_t minCTAs 1 maxCTAs 8 cgaClusterSize 1",
                          out)

    def test_socket_from_the_environment(self):
        env = hrtest.clean_env(HEADROOM_SOCKET=self.daemon.socket)
        kv, _ = self.run_lease(env=env)
        self.assertEqual(kv["connected"], 1)
        self.assertEqual(kv["gpu"], 0)
        self.assertEqual(kv["grid"], 100)

    def test_bad_gpu_fails_with_the_reason(self):
        p = subprocess.run([self.exe, "--socket", self.daemon.socket, "9"],
                           capture_output=True, text=True, timeout=30)
        self.assertEqual(p.returncode, 1)
        self.assertIn("hr_comm_register: invalid argument", p.stderr)


class TestTrainStepDry(DaemonTestCase):
    def test_dry_run_as_documented(self):
        docs = documented_lines(TRAIN_PY, "PYTHONPATH=python python3 ")
        self.assertEqual(len(docs), 1, docs)
        self.assertIn("--dry", docs[0])
        env = hrtest.clean_env()
        p = subprocess.run([sys.executable, TRAIN_PY, "--dry", "--socket",
                            self.daemon.socket, "--gpu", "1", "--steps", "3"],
                           cwd=hrtest.ROOT, env=env, capture_output=True,
                           text=True, timeout=60)
        self.assertEqual(p.returncode, 0, p.stderr)
        out = p.stdout
        self.assertIn("daemon: connected", out)
        self.assertIn("lease: gpu 1, 132 SMs, cluster 2, headroom 32, "
                      "grid 100", out)
        self.assertIn("'max_ctas': 8", out)
        self.assertIn("env DG_MEGA_MOE_SM_HEADROOM=32", out)
        self.assertIn("env NCCL_MAX_CTAS=8", out)
        self.assertIn("env NCCL_NVLS_ENABLE=0", out)
        self.assertEqual(len(re.findall(r"^step \d: grid 100 ", out, re.M)), 3)
        self.assertNotIn("torch", p.stderr)



class TestTrainMoe(DaemonTestCase):
    """examples/train_moe.py: its documented command lines, --help with no
    torch needed, a short run on the ops' CPU path, and on a GPU a short
    run under the test daemon's lease."""

    def run_example(self, *args, timeout=300):
        p = subprocess.run([sys.executable, TRAIN_MOE, *args],
                           cwd=hrtest.ROOT, env=hrtest.clean_env(),
                           capture_output=True, text=True, timeout=timeout)
        self.assertEqual(p.returncode, 0, p.stderr)
        return p.stdout

    def curves(self, out):
        rows = re.findall(r"^ +(\d+) +([\d.]+) +([\d.]+) +(\S+)$", out,
                          re.M)
        diff = float(re.search(r"^max relative difference of the curves: "
                               r"([\d.]+)$", out, re.M).group(1))
        return rows, diff

    def test_documented_and_help(self):
        docs = documented_lines(TRAIN_MOE, "PYTHONPATH=python python3 ")
        self.assertEqual(len(docs), 2, docs)
        self.assertIn("--device cpu", docs[1])
        out = self.run_example("--help")
        self.assertIn("--steps", out)
        self.assertIn("--socket", out)

    @unittest.skipUnless(hrtest.torch_or_none() is not None,
                         "torch is not importable here")
    def test_short_run_on_cpu(self):
        out = self.run_example("--device", "cpu", "--steps", "6", "--every",
                               "3", "--tokens", "64")
        rows, diff = self.curves(out)
        self.assertEqual([r[0] for r in rows], ["1", "3", "6"])
        self.assertLess(float(rows[-1][1]), float(rows[0][1]))   # it learns
        self.assertLess(diff, 0.1)

    @unittest.skipIf(hrtest.moe_gpu_reason() is not None, hrtest.moe_gpu_reason() or "")
    def test_short_run_on_gpu(self):
        out = self.run_example("--socket", self.daemon.socket, "--steps",
                               "40", "--every", "10", "--tokens", "512")
        self.assertIn("daemon: connected; lease: gpu 0, 132 SMs, headroom 2, "
                      "grid 130", out)
        rows, diff = self.curves(out)
        self.assertEqual(len(rows), 5)
        self.assertTrue(all(r[3] == "130" for r in rows), rows)
        self.assertLess(float(rows[-1][1]), float(rows[0][1]) / 2)
        self.assertLess(diff, 0.15)


if __name__ == "__main__":
    unittest.main()
