"""headroom.nn.MegaMoE with an ep_group, its ops moe_ep_forward and
moe_ep_backward, and headroom.ep_reference. Without a GPU (torch needed):
the argument checks; opcheck, fake tensors and torch.compile of the ops
on a one-rank VirtualGroup; every rank of a VirtualGroup (threads, R = 2
and 4) and of a 2-process gloo group (ep_gloo_child.py) against float64
autograd of reference_moe over the whole model: ep_reference.ep_moe's
autograd and ep_moe_backward in fp32, the module's y and gradients one
bf16 rounding away (its CPU path computes in fp32), with ids outside
[0, E), a rank whose experts get no pair and a rank without tokens; and
ep_moe_lockstep's one graph over every rank. With an sm_90 GPU and
libheadroom_moe: a one-rank gloo group's module bitwise the single-GPU
module (y; the gradients where the library has hr_moe_ep_backward), and
R = 2 and 4 virtual ranks' modules in threads, a stream each, bitwise the
single-GPU module's y (and gradients, where the library has the EP
backward). Each class skips with its reason where torch, the library or
the GPU is missing."""
import copy
import io
import json
import os
import subprocess
import sys
import tempfile
import unittest

import hrtest
from hrtest import DaemonTestCase

from headroom.moe_ep import VirtualGroup

torch = hrtest.torch_or_none()
NO_TORCH = hrtest.NO_TORCH
if torch is not None:
    import headroom.nn as hnn
    import ep_cases
    from test_moe_ep import on_threads, problem, split

HERE = os.path.dirname(os.path.abspath(__file__))


def check_rank(tc, out, case, r, R):
    """What ep_cases.run_rank measured for rank r, against the bounds:
    fp32 for ep_reference and the module's d(weights) (fp32 outputs),
    one bf16 rounding for the module's bf16 outputs."""
    where = "%s: rank %d of %d" % (case, r, R)
    for name, v in out.items():
        if name.startswith(("ep_moe_", "backward_")) or name == "module_dw":
            tc.assertLess(v, 1e-5, "%s: %s rel L2 %.3g" % (where, name, v))
        elif name.endswith("_ulps"):
            tc.assertLessEqual(v, 1.0, "%s: %s %.3g bf16 ulps" % (where,
                                                                   name, v))
    tc.assertEqual(out["module_dtypes"], ["torch.bfloat16", "torch.float32",
                                          "torch.bfloat16", "torch.float32"])
    tc.assertTrue(out["idle_dw_zero"], where)
    tc.assertTrue(out["dropped_dw_zero"], where)
    if case == "none_to_last" and r == R - 1:
        tc.assertEqual(out["pairs_here"], 0, where)
        tc.assertEqual(out["idle_experts"], ep_cases.E // R, where)
    if case == "empty_last" and r == R - 1:
        tc.assertEqual(out["tokens"], 0, where)
    if case == "random":
        tc.assertGreater(out["dropped_pairs"] + out["pairs_here"], 0, where)


@unittest.skipUnless(torch is not None, NO_TORCH)
class TestEPArguments(unittest.TestCase):
    """What MegaMoE with an ep_group refuses, before any exchange."""

    ok = dict(experts=8, hidden=256, inter=128, topk=2, max_tokens=8)

    def test_constructor(self):
        g = VirtualGroup(2)
        for kw, cls, pattern in (
                (dict(experts=6, ep_group=VirtualGroup(4), ep_rank=0),
                 ValueError, r"^experts must be a multiple of the ep_group's "
                 r"size: 6 experts over 4 ranks"),
                (dict(ep_group=g), ValueError,
                 r"^ep_rank is required with a VirtualGroup: .* 0\.\.1"),
                (dict(ep_group=g, ep_rank=2), ValueError,
                 r"^ep_rank must be 0\.\.1, got 2"),
                (dict(ep_group=g, ep_rank=1.0), TypeError,
                 r"^ep_rank must be an int"),
                (dict(ep_rank=0), ValueError,
                 r"^ep_rank is given without an ep_group"),
                (dict(ep_group="world"), TypeError,
                 r"^ep_group must be a torch\.distributed ProcessGroup or a "
                 r"headroom\.VirtualGroup, not str"),
                (dict(experts=16, ep_group=VirtualGroup(16), ep_rank=0),
                 ValueError, r"^ep_group has 16 ranks; the EP kernel takes "
                 r"1\.\.8"),
                (dict(max_tokens=1 << 29, ep_group=g, ep_rank=0), ValueError,
                 r"<= 2\^30")):
            with self.assertRaisesRegex(cls, pattern):
                hnn.MegaMoE(**dict(self.ok, **kw))

    def test_parameters_are_this_ranks_experts(self):
        g = VirtualGroup(4)
        m = hnn.MegaMoE(**self.ok, ep_group=g, ep_rank=3)
        self.assertEqual(tuple(m.w1.shape), (2, 256, 256))
        self.assertEqual(tuple(m.w2.shape), (2, 256, 128))
        self.assertEqual((m.ep_rank, m.ep_size, m.local_experts),
                         (3, 4, 2))
        self.assertEqual(m.expert_range, (6, 8))
        self.assertIs(m.ep_group, g)
        self.assertIn("ep_rank=3 of 4 (experts 6..7 here)", repr(m))
        plain = hnn.MegaMoE(**self.ok)
        self.assertEqual((plain.ep_size, plain.local_experts,
                          plain.expert_range), (0, 8, (0, 8)))
        self.assertIsNone(plain.ep_group)

    def test_forward_checks(self):
        m = hnn.MegaMoE(**self.ok, ep_group=VirtualGroup(2), ep_rank=0)
        x = torch.zeros(3, 256)
        ids = torch.zeros(3, 2, dtype=torch.int32)
        w = torch.zeros(3, 2)
        with self.assertRaisesRegex(ValueError, r"^x has 9 tokens, must be "
                                    r"0\.\.8"):
            m(torch.zeros(9, 256), torch.zeros(9, 2, dtype=torch.int32),
              torch.zeros(9, 2))
        with self.assertRaisesRegex(ValueError, r"^topk_ids must have shape"):
            m(x, ids[:1], w)
        # The full model's parameters put into a rank's module.
        full = hnn.MegaMoE(**self.ok)
        m.w1 = full.w1
        with self.assertRaisesRegex(ValueError, r"^w1 must have shape "
                                    r"\(4, 256, 256\) \(this rank's 4 of 8 "
                                    r"experts\), got \(8, 256, 256\)"):
            m(x, ids, w)

    def test_the_group_lives_with_the_module_only(self):
        # The op's key outlives the module, but must not keep its group
        # (a ProcessGroup kept past destroy_process_group can abort the
        # process at exit).
        import gc
        import weakref
        g = VirtualGroup(1)
        ref = weakref.ref(g)
        m = hnn.MegaMoE(**self.ok, ep_group=g, ep_rank=0)
        x = torch.zeros(2, 256, dtype=torch.bfloat16)
        ids = torch.zeros(2, 2, dtype=torch.int32)
        w = torch.zeros(2, 2)
        m(x, ids, w)
        key, w1, w2 = m.key, m.w1.detach(), m.w2.detach()
        del m, g
        gc.collect()
        self.assertIsNone(ref())
        with self.assertRaisesRegex(RuntimeError,
                                    r"ep_group no longer exists"):
            torch.ops.headroom.moe_ep_forward(x, ids, w, w1.bfloat16(),
                                              w2.bfloat16(), key)

    def test_copies(self):
        m = hnn.MegaMoE(**self.ok, ep_group=VirtualGroup(1), ep_rank=0)
        c = copy.deepcopy(m)
        self.assertEqual(c.key, m.key)
        self.assertIs(c.ep_group, m.ep_group)
        with self.assertRaisesRegex(TypeError, r"cannot be pickled whole"):
            torch.save(m, io.BytesIO())


@unittest.skipUnless(torch is not None, NO_TORCH)
class TestEPOpsOnCpu(hrtest.MoeOpsChecks, unittest.TestCase):
    """The ops on one rank (a VirtualGroup of one: the exchange is the
    identity), their registrations and fake implementations
    (MoeOpsChecks)."""
    FORWARD_OP = "moe_ep_forward"
    BACKWARD_OP = "moe_ep_backward"

    def setUp(self):
        self.m = hnn.MegaMoE(8, 256, 128, 2, 16, ep_group=VirtualGroup(1),
                             ep_rank=0)
        p = ep_cases.problem("random", 1)
        with torch.no_grad():
            self.m.w1.copy_(p["w1"])
            self.m.w2.copy_(p["w2"])
        self.x = p["x"].bfloat16()
        self.ids, self.wts, self.dy = p["ids"], p["wts"], p["dy"].bfloat16()

    def test_one_rank_is_the_plain_module(self):
        plain = hnn.MegaMoE(8, 256, 128, 2, 16)
        plain.load_state_dict(self.m.state_dict())
        out = []
        for mod in (self.m, plain):
            x = self.x.clone().requires_grad_()
            w = self.wts.clone().requires_grad_()
            y = mod(x, self.ids, w)
            out.append((y,) + torch.autograd.grad(y, (x, mod.w1, mod.w2, w),
                                                  self.dy))
        for name, a, b in zip(("y", "x", "w1", "w2", "w"), *out):
            self.assertLessEqual(ep_cases.ulps(a, b), 1.0, name)

    def test_reference_module(self):
        ref = hnn.MegaMoE(8, 256, 128, 2, 16, reference=True,
                          ep_group=self.m.ep_group, ep_rank=0)
        ref.load_state_dict(self.m.state_dict())
        a = self.m(self.x, self.ids, self.wts)
        b = ref(self.x, self.ids, self.wts)
        self.assertLess(ep_cases.rel(a, b), 1e-2)


@unittest.skipUnless(torch is not None, NO_TORCH)
class TestEPThreadsOnCpu(unittest.TestCase):
    """Every rank of a VirtualGroup on its thread, against the whole
    model: the exchange is a copy between the threads' tensors."""

    def test_every_rank_matches_the_whole_model(self):
        for R in (2, 4):
            for case in ("random", "none_to_last", "empty_last"):
                g = VirtualGroup(R, timeout_s=60)
                out, _ = on_threads(R, lambda r: ep_cases.run_rank(
                    case, r, R, g, r), timeout=120)
                for r in range(R):
                    kind, v = out[r]
                    if kind == "error":
                        raise v
                    check_rank(self, v, case, r, R)


@unittest.skipUnless(torch is not None, NO_TORCH)
class TestLockstepOnCpu(unittest.TestCase):
    """ep_reference.ep_moe_lockstep: every virtual rank from one thread,
    one graph: y and every rank's gradients against the whole model."""

    def test_every_rank_matches_the_whole_model(self):
        from headroom import ep_reference
        for R in (1, 2, 4):
            for case in ("random", "none_to_last", "empty_last")[:3 if R > 1
                                                                 else 1]:
                p = ep_cases.problem(case, R)
                ref = ep_cases.reference(p)
                parts = [ep_cases.rank_part(p, r, R) for r in range(R)]
                leaves = [[q[n].clone().requires_grad_() for n in
                           ("x", "wts", "w1", "w2")] for q in parts]
                ys = ep_reference.ep_moe_lockstep(
                    [lv[0] for lv in leaves], [q["ids"] for q in parts],
                    [lv[1] for lv in leaves], [lv[2] for lv in leaves],
                    [lv[3] for lv in leaves])
                torch.autograd.backward(ys, [q["dy"] for q in parts])
                for r, q in enumerate(parts):
                    (a, b), (e0, e1) = q["rows"], q["experts"]
                    where = "%s R=%d rank %d" % (case, R, r)
                    for got, want in ((ys[r], ref["y"][a:b]),
                                      (leaves[r][0].grad, ref["dx"][a:b]),
                                      (leaves[r][1].grad, ref["dw"][a:b]),
                                      (leaves[r][2].grad, ref["dw1"][e0:e1]),
                                      (leaves[r][3].grad, ref["dw2"][e0:e1])):
                        self.assertLess(ep_cases.rel(got, want), 1e-5, where)

    def test_arguments(self):
        from headroom import ep_reference
        p = ep_cases.rank_part(ep_cases.problem("random", 1), 0, 1)
        one = [p["x"]], [p["ids"]], [p["wts"]], [p["w1"]], [p["w2"]]
        with self.assertRaisesRegex(ValueError, r"one entry per rank"):
            ep_reference.ep_moe_lockstep(one[0] * 2, *one[1:])
        with self.assertRaisesRegex(ValueError, r"one stream per rank"):
            ep_reference.ep_moe_lockstep(*one, streams=[None, None])
        with self.assertRaisesRegex(ValueError, r"^w1 must be \[E/R, 2I, H\]"):
            ep_reference.ep_moe(p["x"], p["ids"], p["wts"], p["w2"], p["w2"],
                                VirtualGroup(1), 0)
        with self.assertRaisesRegex(ValueError, r"CPU tensors only"):
            ep_reference.ep_moe(p["x"].to("meta"), p["ids"].to("meta"),
                                p["wts"].to("meta"), p["w1"].to("meta"),
                                p["w2"].to("meta"), VirtualGroup(1), 0)


@unittest.skipUnless(torch is not None, NO_TORCH)
class TestEPGlooOnCpu(unittest.TestCase):
    """Two processes in a gloo group (a FileStore in a temporary folder),
    each running ep_cases.run_rank for its rank: real all_to_all_single
    between processes, and MoeEP's ProcessGroup bootstrap."""

    def test_two_processes(self):
        import torch.distributed as dist
        if not dist.is_available() or not dist.is_gloo_available():
            self.skipTest("torch.distributed with gloo is not available")
        R = 2
        with tempfile.TemporaryDirectory() as d:
            store = os.path.join(d, "store")
            env = hrtest.clean_env(PYTHONPATH=os.pathsep.join(
                [hrtest.PYDIR, HERE]))
            procs = [subprocess.Popen(
                [sys.executable, os.path.join(HERE, "ep_gloo_child.py"),
                 str(r), str(R), store], env=env, stdout=subprocess.PIPE,
                stderr=subprocess.PIPE, text=True) for r in range(R)]
            results = []
            try:
                for p in procs:
                    stdout, stderr = p.communicate(timeout=240)
                    self.assertEqual(p.returncode, 0, "a rank exited %d:\n%s"
                                     % (p.returncode, stderr[-4000:]))
                    results.append(json.loads(stdout.strip().splitlines()[-1]))
            finally:
                for p in procs:
                    if p.poll() is None:
                        p.kill()
                        p.wait()
        for r, out in enumerate(results):
            self.assertEqual(out["rank"], r)
            for case in ("random", "none_to_last", "empty_last"):
                check_rank(self, out[case], case, r, R)
        # Both ranks fail alike (no GPU), or both made their context; or
        # neither could load libheadroom_moe (OSError: not built here, or
        # a sanitizer build, which a plain python3 cannot load).
        self.assertEqual(results[0]["create"], results[1]["create"])
        self.assertIn(results[0]["create"],
                      ("ok", "NoGPU", "Unsupported", "OSError"))


GPU = hrtest.moe_gpu_reason()


@unittest.skipIf(GPU is not None, GPU or "")
class TestEPOnGpu(DaemonTestCase):
    """On GPU 0 under leases of the class's test daemon (grid 130)."""

    def setUp(self):
        torch.cuda.set_device(0)
        self.dev = torch.device("cuda", 0)
        self.lease = self.client().lease(0, cluster=2)

    def single(self, T):
        """The single-GPU MegaMoE with problem()'s weights, and problem()'s
        tensors."""
        x, ids, wts, w1, w2 = problem(T=T, device="cuda")
        single = hnn.MegaMoE(8, 256, 128, 2, T, device=self.dev,
                             lease=self.lease, timeout_ms=5000)
        with torch.no_grad():
            single.w1.copy_(w1)
            single.w2.copy_(w2)
        return single, (x, ids, wts, w1, w2)

    @staticmethod
    def grads(m, x, ids, wts, dy):
        xr = x.detach().clone().requires_grad_()
        wr = wts.detach().clone().requires_grad_()
        y = m(xr, ids, wr)
        return (y.detach(),) + torch.autograd.grad(y, (xr, m.w1, m.w2, wr),
                                                   dy)

    def test_one_rank_group_is_the_single_gpu_module_bitwise(self):
        import torch.distributed as dist
        if dist.is_initialized():
            self.skipTest("a process group is already initialised")
        d = tempfile.mkdtemp(prefix="hr-ep-")
        dist.init_process_group("gloo", store=dist.FileStore(
            os.path.join(d, "store"), 1), rank=0, world_size=1)
        self.addCleanup(dist.destroy_process_group)
        T = 64
        single, (x, ids, wts, w1, w2) = self.single(T)
        ep = hnn.MegaMoE(8, 256, 128, 2, T, device=self.dev, lease=self.lease,
                         timeout_ms=5000, ep_group=dist.group.WORLD)
        self.addCleanup(ep.close)
        ep.load_state_dict(single.state_dict())
        self.assertGreater(hnn.ep_context_count(), 0)
        dy = torch.randn(T, 256, device=self.dev).bfloat16()
        with torch.no_grad():
            y0 = single(x, ids, wts)
            y1 = ep(x, ids, wts)
        single.check()
        ep.check()
        self.assertTrue(torch.equal(y0, y1))
        self.assertEqual(ep.last_grid, self.lease.grid)
        if not hnn._ep_backward_in_library():
            y = ep(x, ids, wts.clone().requires_grad_())
            with self.assertRaisesRegex(NotImplementedError,
                                        "hr_moe_ep_backward"):
                y.float().sum().backward()
            self.skipTest("the library has no hr_moe_ep_backward yet: y "
                          "compared bitwise, the gradients not")
        g0 = self.grads(single, x, ids, wts, dy)
        g1 = self.grads(ep, x, ids, wts, dy)
        single.check()
        ep.check()
        for name, a, b in zip(("y", "x", "w1", "w2", "weights"), g0, g1):
            self.assertTrue(torch.equal(a, b), name)

    def test_virtual_ranks_modules_in_threads(self):
        backward = hnn._ep_backward_in_library()
        for R, last_empty in ((2, False), (2, True), (4, False)):
            T = 96
            single, (x, ids, wts, w1, w2) = self.single(T)
            dy = torch.randn(T, 256, device=self.dev).bfloat16()
            with torch.no_grad():
                ref = single(x, ids, wts)
            ref_g = self.grads(single, x, ids, wts, dy) if backward else None
            single.check()
            cnt, offs = split(T, R, last_empty)
            g = VirtualGroup(R, timeout_s=60)
            El = 8 // R

            def rank(r):
                torch.cuda.set_device(0)
                m = hnn.MegaMoE(8, 256, 128, 2, max(cnt), device=self.dev,
                                lease=self.lease, timeout_ms=5000,
                                ep_group=g, ep_rank=r)
                try:
                    with torch.no_grad():
                        m.w1.copy_(w1[r * El:(r + 1) * El])
                        m.w2.copy_(w2[r * El:(r + 1) * El])
                    a, b = offs[r], offs[r] + cnt[r]
                    st = torch.cuda.Stream()
                    st.wait_stream(torch.cuda.current_stream())
                    with torch.cuda.stream(st):
                        with torch.no_grad():
                            y = m(x[a:b], ids[a:b], wts[a:b])
                        grads = self.grads(m, x[a:b], ids[a:b], wts[a:b],
                                           dy[a:b]) if backward else None
                    m.check()
                    return y, grads, m.last_grid
                finally:
                    m.close()                  # collective
            out, _ = on_threads(R, rank, timeout=120)
            for r in range(R):
                if out[r][0] == "error":
                    raise out[r][1]
            y = torch.cat([out[r][1][0] for r in range(R)])
            self.assertTrue(torch.equal(y, ref), "R=%d last_empty=%s"
                            % (R, last_empty))
            for r in range(R):
                self.assertEqual(out[r][1][2], self.lease.grid // R)
            if backward:
                # Bitwise the single-GPU module's (headroom_moe.h: the EP
                # backward is hr_moe_backward's over rank r's tokens after
                # rank r-1's): the tokens' gradients by rows, each rank's
                # dW by its experts.
                gx = torch.cat([out[r][1][1][1] for r in range(R)])
                gw = torch.cat([out[r][1][1][4] for r in range(R)])
                gw1 = torch.cat([out[r][1][1][2] for r in range(R)])
                gw2 = torch.cat([out[r][1][1][3] for r in range(R)])
                for name, a, b in (("x", gx, ref_g[1]), ("w1", gw1, ref_g[2]),
                                   ("w2", gw2, ref_g[3]),
                                   ("weights", gw, ref_g[4])):
                    self.assertTrue(torch.equal(a, b), "R=%d %s" % (R, name))


if __name__ == "__main__":
    unittest.main()
