"""Shared pieces of the Python binding's tests: where the tree and the
build are, a real headroomd on a temporary socket, running Python code
in a child process with an environment built from scratch, a
throwaway git repository for the bench scripts' tests, why the mega-MoE
GPU tests skip, and the ops' checks headroom.nn's plain and EP tests
share."""
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
BUILD = os.path.join(ROOT, os.environ.get("HEADROOM_BUILD") or "build")
PYDIR = os.path.join(ROOT, "python")
HEADROOMD = os.path.join(BUILD, "bin", "headroomd")
LIBDIR = os.path.join(BUILD, "lib")

if PYDIR not in sys.path:
    sys.path.insert(0, PYDIR)

# Variables that change what a client does; a child starts without them.
CLIENT_ENV = ("HEADROOM_SOCKET", "DG_MEGA_MOE_SM_HEADROOM", "NCCL_MIN_CTAS",
              "NCCL_MAX_CTAS", "NCCL_CGA_CLUSTER_SIZE", "NCCL_NVLS_ENABLE",
              "HEADROOM_ALLOW_FULL_GRID")


class Daemon:
    """headroomd on a temporary socket with the integration tests'
    configuration: 2 GPUs of 132 SMs, socket mode 0666."""

    def __init__(self, extra=""):
        self.extra = extra
        self.dir = None
        self.proc = None

    def start(self):
        if not os.access(HEADROOMD, os.X_OK):
            raise RuntimeError("%s is not built (run make)" % HEADROOMD)
        self.dir = tempfile.mkdtemp(prefix="hr-pytest-")
        self.socket = os.path.join(self.dir, "h.sock")
        self.config = os.path.join(self.dir, "headroomd.conf")
        self.state = os.path.join(self.dir, "state")
        self.log = os.path.join(self.dir, "daemon.log")
        with open(self.config, "w") as f:
            f.write("# Python binding tests\ntopology = config\ngpus = 2\n"
                    "sms = 132\nsocket_mode = 0666\n%s\n" % self.extra)
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [HEADROOMD, "--config", self.config, "--socket", self.socket,
                 "--state-dir", self.state, "--log-level", "debug"],
                stdin=subprocess.DEVNULL, stdout=log, stderr=log)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                break
            try:
                with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                    s.connect(self.socket)
                return self
            except OSError:
                time.sleep(0.02)
        self.stop()
        raise RuntimeError("headroomd did not listen on %s:\n%s"
                           % (self.socket, self.log_text()))

    def log_text(self):
        try:
            with open(self.log, errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def cleanup(self):
        self.stop()
        if self.dir:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None


class DaemonTestCase(unittest.TestCase):
    """A test class with its own headroomd, started once for the class."""
    daemon_extra = ""

    @classmethod
    def setUpClass(cls):
        cls.daemon = Daemon(cls.daemon_extra).start()
        cls.addClassCleanup(cls.daemon.cleanup)

    def client(self, **kw):
        """A Client of this class's daemon, closed after the test."""
        import headroom
        kw.setdefault("quiet", True)
        c = headroom.Client(self.daemon.socket, **kw)
        self.addCleanup(c.close)
        self.assertTrue(c.connected, "not connected to %s" % self.daemon.socket)
        return c


class DegradedTestCase(unittest.TestCase):
    """A test class with no daemon: each test gets a temporary folder with
    a socket path nobody serves in it, and runs CHILD (formatted with that
    path) in a child whose environment is built from scratch."""
    CHILD = None

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="hr-pytest-")
        self.addCleanup(shutil.rmtree, self.dir, True)
        self.sock = os.path.join(self.dir, "nobody-listens.sock")

    def run_degraded(self, **env):
        """CHILD in a child, with clean_env(**env); (its JSON, stderr)."""
        return run_child(self.CHILD % self.sock, clean_env(**env))


def clean_env(**extra):
    """An environment for a child: PATH and PYTHONPATH, none of the
    variables that steer a client, plus `extra`."""
    env = {k: v for k, v in os.environ.items() if k not in CLIENT_ENV}
    env["PYTHONPATH"] = PYDIR
    for k, v in extra.items():
        if v is None:
            env.pop(k, None)
        else:
            env[k] = str(v)
    return env


def run_child(code, env, timeout=30):
    """Run `code` in `python3 -c` with `env`; it prints one JSON object on
    its last stdout line. Returns (that object, stderr)."""
    p = subprocess.run([sys.executable, "-c", textwrap.dedent(code)],
                       env=env, cwd=ROOT, capture_output=True, text=True,
                       timeout=timeout)
    if p.returncode != 0:
        raise AssertionError("child exited %d\nstdout:\n%s\nstderr:\n%s"
                             % (p.returncode, p.stdout, p.stderr))
    lines = p.stdout.strip().splitlines()
    if not lines:
        raise AssertionError("child printed nothing; stderr:\n%s" % p.stderr)
    return json.loads(lines[-1]), p.stderr


def torch_or_none():
    try:
        import torch
        return torch
    except Exception:
        return None


NO_TORCH = "torch is not importable here"


def moe_gpu_reason():
    """Why the mega-MoE kernels cannot run on GPU 0 here (torch, a CUDA
    device of compute capability 9.0, libheadroom_moe built); None when
    they can. A GPU test class skips with this reason."""
    torch = torch_or_none()
    if torch is None:
        return NO_TORCH
    if not torch.cuda.is_available():
        return "no CUDA device"
    if not os.path.exists(os.path.join(LIBDIR, "libheadroom_moe.so")):
        return "libheadroom_moe.so is not built"
    if torch.cuda.get_device_capability(0) != (9, 0):
        return "GPU 0 is not compute capability 9.0"
    return None


class MoeOpsChecks:
    """The checks that headroom.nn's plain ops and its EP ops pass alike,
    mixed into a TestCase (before it, for the method order). Its setUp
    makes self.m, a MegaMoE on the CPU, and its inputs self.x, self.ids,
    self.wts, self.dy; FORWARD_OP and BACKWARD_OP name the module's ops
    under torch.ops.headroom."""
    FORWARD_OP = None
    BACKWARD_OP = None

    def ops(self):
        import torch
        return (getattr(torch.ops.headroom, self.FORWARD_OP),
                getattr(torch.ops.headroom, self.BACKWARD_OP))

    def test_opcheck(self):
        import torch
        forward, backward = self.ops()
        w1 = self.m.w1.detach().clone().requires_grad_()
        w2 = self.m.w2.detach().clone().requires_grad_()
        args = (self.x, self.ids, self.wts.clone().requires_grad_(), w1, w2,
                self.m.key)
        torch.library.opcheck(forward.default, args)
        bargs = (self.dy, self.x, self.ids, self.wts, w1.detach(),
                 w2.detach(), self.m.key)
        torch.library.opcheck(backward.default, bargs)

    def test_fake_shapes(self):
        import torch
        from torch._subclasses.fake_tensor import FakeTensorMode
        forward, backward = self.ops()
        real = (self.dy, self.x, self.ids, self.wts, self.m.w1.detach(),
                self.m.w2.detach())
        with FakeTensorMode() as mode:
            f = [mode.from_tensor(t) for t in real]
            y = forward(*f[1:], self.m.key)
            dx, dw1, dw2, dwt = backward(*f, self.m.key)
        self.assertEqual((tuple(y.shape), y.dtype), (tuple(self.x.shape),
                                                     torch.bfloat16))
        self.assertEqual(tuple(dw1.shape), tuple(self.m.w1.shape))
        self.assertEqual(tuple(dw2.shape), tuple(self.m.w2.shape))
        self.assertEqual((tuple(dwt.shape), dwt.dtype),
                         (tuple(self.wts.shape), torch.float32))
        self.assertEqual(dx.dtype, torch.bfloat16)

    def test_compile_fullgraph(self):
        import torch

        def loss(x, ids, w):
            return self.m(x, ids, w).float().square().mean()

        torch._dynamo.reset()
        self.addCleanup(torch._dynamo.reset)
        compiled = torch.compile(loss, fullgraph=True, backend="aot_eager")
        out = []
        for fn in (loss, compiled):
            x = self.x.clone().requires_grad_()
            w = self.wts.clone().requires_grad_()
            self.m.zero_grad()
            fn(x, self.ids, w).backward()
            out.append((x.grad, w.grad, self.m.w1.grad.clone()))
        for a, b in zip(*out):
            self.assertTrue(torch.equal(a, b))


def git(repo, *args):
    """git in repo, under a throwaway identity; its output, stripped."""
    return subprocess.run(["git", "-C", repo, "-c", "user.name=t", "-c", "user.email=t@t",
                           *args], check=True, capture_output=True, text=True).stdout.strip()


class ScratchRepoTestCase(unittest.TestCase):
    """A fresh git repository in self.repo (inside self.tmp, removed after
    each test), for scripts that run from a repository's root."""

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.repo = os.path.join(self.tmp.name, "repo")
        os.mkdir(self.repo)
        git(self.repo, "init", "-q")

    def tearDown(self):
        self.tmp.cleanup()

    def write(self, path, text):
        with open(os.path.join(self.repo, path), "w") as f:
            f.write(text)
