"""headroom.nn: the torch ops and MegaMoE. Without a GPU (torch needed):
argument checks, the ops' CPU path against autograd of the reference,
opcheck, fake tensors, torch.compile. With an sm_90 GPU and
libheadroom_moe: gradients against torch autograd of a float64 reference,
a CUDA graph, torch.compile, FSDP on one rank, a lease changed mid-run,
the fail-safe budget, and a barrier timeout surfacing as BarrierTimeout.
Each class skips with its reason where torch or the GPU is missing."""
import copy
import io
import os
import tempfile
import unittest

import hrtest
from hrtest import DaemonTestCase

import headroom

torch = hrtest.torch_or_none()
NO_TORCH = hrtest.NO_TORCH
if torch is not None:
    import headroom.nn as hnn


def problem(E=8, H=256, I=128, k=2, T=64, device="cpu", seed=0):
    """Inputs for T tokens: ids drawn without repeats per token, then
    expert 3 emptied (its pairs sent to -1) and two pairs sent past E;
    weights in (0.05, 1); w1, w2 small. Returns x, ids, weights, w1, w2,
    dy and the mask of the pairs whose ids are outside [0, E)."""
    g = torch.Generator(device=device).manual_seed(seed)
    x = torch.randn(T, H, device=device, generator=g).bfloat16()
    ids = torch.rand(T, E, device=device, generator=g).argsort(dim=1)[:, :k]
    ids = ids.int()
    ids[ids == 3] = -1
    ids[0, k - 1] = E
    ids[1, 0] = 1000
    wts = torch.rand(T, k, device=device, generator=g) * 0.95 + 0.05
    w1 = (torch.randn(E, 2 * I, H, device=device, generator=g)
          / H ** 0.5).bfloat16()
    w2 = (torch.randn(E, H, I, device=device, generator=g)
          / I ** 0.5).bfloat16()
    dy = torch.randn(T, H, device=device, generator=g).bfloat16()
    bad = (ids < 0) | (ids >= E)
    return x, ids.contiguous(), wts, w1, w2, dy, bad


def rel(a, b):
    a, b = a.double(), b.double()
    return ((a - b).norm() / b.norm().clamp_min(1e-30)).item()


def reference_grads(x, ids, wts, w1, w2, dy):
    """y and the gradients of (x, w1, w2, weights) by torch autograd of
    reference_moe in float64."""
    leaves = [t.detach().double().requires_grad_() for t in (x, w1, w2, wts)]
    xd, w1d, w2d, wd = leaves
    y = hnn.reference_moe(xd, ids, wd, w1d, w2d)
    grads = torch.autograd.grad(y, leaves, dy.double())
    return y.detach(), grads


def module_grads(m, x, ids, wts, dy):
    """y and the gradients of (x, w1, w2, weights) through the module."""
    xr = x.detach().clone().requires_grad_()
    wr = wts.detach().clone().requires_grad_()
    y = m(xr, ids, wr)
    grads = torch.autograd.grad(y, (xr, m.w1, m.w2, wr), dy)
    return y.detach(), grads


@unittest.skipUnless(torch is not None, NO_TORCH)
class TestArguments(unittest.TestCase):
    """What MegaMoE refuses before anything reaches a GPU."""

    def test_constructor(self):
        ok = dict(experts=4, hidden=256, inter=128, topk=2, max_tokens=8)
        hnn.MegaMoE(**ok)
        for change, pattern in (
                (dict(hidden=128), r"hidden must be a multiple of 256"),
                (dict(inter=64), r"inter must be a multiple of 128"),
                (dict(experts=0), r"experts must be 1\.\.512"),
                (dict(experts=513), r"experts must be 1\.\.512"),
                (dict(topk=33), r"topk must be 1\.\.32"),
                (dict(max_tokens=0), r"max_tokens must be >= 1"),
                (dict(timeout_ms=-1), r"timeout_ms must be >= 0"),
                (dict(dtype=torch.float16), r"dtype must be torch\.bfloat16")):
            kw = dict(ok, **change)
            with self.assertRaisesRegex(ValueError, pattern):
                hnn.MegaMoE(**kw)
        with self.assertRaisesRegex(TypeError, r"^hidden must be an int"):
            hnn.MegaMoE(**dict(ok, hidden=256.0))
        with self.assertRaisesRegex(TypeError, r"^lease must be a headroom"):
            hnn.MegaMoE(**ok, lease=3)

    def test_keep_gate_up_argument(self):
        self.assertTrue(hnn.MegaMoE(4, 256, 128, 2, 8).keep_gate_up)
        self.assertFalse(hnn.MegaMoE(4, 256, 128, 2, 8,
                                     keep_gate_up=False).keep_gate_up)
        with self.assertRaisesRegex(TypeError, "keep_gate_up"):
            hnn.MegaMoE(4, 256, 128, 2, 8, keep_gate_up=1)
        group = hnn.VirtualGroup(2)
        with self.assertRaisesRegex(ValueError, "ep_group"):
            hnn.MegaMoE(4, 256, 128, 2, 8, ep_group=group, ep_rank=0,
                        keep_gate_up=True)

    def test_parameters(self):
        m = hnn.MegaMoE(4, 256, 128, 2, 8)
        self.assertEqual(tuple(m.w1.shape), (4, 256, 256))
        self.assertEqual(tuple(m.w2.shape), (4, 256, 128))
        self.assertEqual(m.w1.dtype, torch.bfloat16)
        # nn.Linear's bound: 1/sqrt(fan_in).
        self.assertLessEqual(m.w1.abs().max().item(), 1 / 16 + 1e-6)
        self.assertLessEqual(m.w2.abs().max().item(), 1 / 128 ** 0.5 + 1e-6)
        self.assertGreater(m.w1.float().std().item(), 0.5 / 16 / 3 ** 0.5)
        self.assertEqual([n for n, _ in m.named_parameters()], ["w1", "w2"])

    def expect(self, pattern, m, x, ids, wts, cls=ValueError):
        with self.assertRaisesRegex(cls, pattern):
            m(x, ids, wts)

    def test_forward_mistakes_are_named(self):
        m = hnn.MegaMoE(4, 256, 128, 2, 8)
        x = torch.zeros(2, 3, 256)
        ids = torch.zeros(2, 3, 2, dtype=torch.int64)
        w = torch.zeros(2, 3, 2)
        self.expect(r"^x must be \[\.\.\., 256\]", m, x[..., :128], ids, w)
        self.expect(r"^topk_ids must have shape \(2, 3, 2\)", m, x,
                    ids[:1], w)
        self.expect(r"^topk_weights must have shape \(2, 3, 2\)", m, x,
                    ids, w[..., :1])
        self.expect(r"^topk_ids must be an integer tensor", m, x,
                    ids.float(), w)
        self.expect(r"^topk_weights must be a floating tensor", m, x, ids,
                    ids)
        self.expect(r"^x has 9 tokens, must be 1\.\.8", m,
                    torch.zeros(9, 256), torch.zeros(9, 2, dtype=torch.int32),
                    torch.zeros(9, 2))
        self.expect(r"^x has 0 tokens", m, torch.zeros(0, 256),
                    torch.zeros(0, 2, dtype=torch.int32), torch.zeros(0, 2))
        self.expect(r"^topk_ids must be a torch\.Tensor", m, x, [1], w,
                    cls=TypeError)
        self.expect(r"^x is on meta, the parameters on cpu", m,
                    x.to("meta"), ids, w)

    def test_grad_tensor_checks(self):
        shape = headroom.MoeShape(4, 256, 128, 2, 8)
        T, E, H, I, k = 8, 4, 256, 128, 2
        t = dict(x=torch.zeros(T, H, dtype=torch.bfloat16),
                 ids=torch.zeros(T, k, dtype=torch.int32),
                 weights=torch.zeros(T, k),
                 w1=torch.zeros(E, 2 * I, H, dtype=torch.bfloat16),
                 w2=torch.zeros(E, H, I, dtype=torch.bfloat16),
                 dy=torch.zeros(T, H, dtype=torch.bfloat16),
                 dx=torch.zeros(T, H, dtype=torch.bfloat16),
                 dw1=torch.zeros(E, 2 * I, H), dw2=torch.zeros(E, H, I),
                 dweights=torch.zeros(T, k))

        def expect(pattern, **change):
            a = dict(t, **change)
            with self.assertRaisesRegex(ValueError, pattern):
                headroom.check_moe_grad_tensors(shape, 0, **a)

        expect(r"^dw1 must be torch\.float32 or torch\.bfloat16",
               dw1=t["dw1"].half())
        expect(r"^dw2 must be torch\.float32 \(dw1's dtype\)",
               dw2=t["dw2"].bfloat16())
        expect(r"^dy must have shape \(8, 256\)", dy=t["dy"][:4])
        expect(r"^dweights must be torch\.float32",
               dweights=t["dweights"].double())
        expect(r"^x must be on cuda:0, got cpu")


@unittest.skipUnless(torch is not None, NO_TORCH)
class TestOpsOnCpu(hrtest.MoeOpsChecks, unittest.TestCase):
    """The ops' CPU path (the kernel's math in fp32), the autograd
    registration and the fake implementations (MoeOpsChecks), with no
    GPU."""
    FORWARD_OP = "moe_forward"
    BACKWARD_OP = "moe_backward"

    def setUp(self):
        self.E, self.H, self.I, self.k, self.T = 4, 256, 128, 2, 16
        self.m = hnn.MegaMoE(self.E, self.H, self.I, self.k, self.T)
        x, ids, wts, w1, w2, dy, bad = problem(self.E, self.H, self.I,
                                               self.k, self.T)
        with torch.no_grad():
            self.m.w1.copy_(w1)
            self.m.w2.copy_(w2)
        self.x, self.ids, self.wts, self.dy, self.bad = x, ids, wts, dy, bad

    def test_gradients_against_autograd(self):
        y, got = module_grads(self.m, self.x, self.ids, self.wts, self.dy)
        ry, want = reference_grads(self.x, self.ids, self.wts, self.m.w1,
                                   self.m.w2, self.dy)
        self.assertLess(rel(y, ry), 1e-2)
        for name, a, b in zip(("x", "w1", "w2", "weights"), got, want):
            self.assertLess(rel(a, b), 1e-2, name)
        self.assertEqual(got[1].dtype, torch.bfloat16)
        self.assertEqual(got[3].dtype, torch.float32)
        # Expert 3 has no pairs; out-of-range pairs get d(w) = 0.
        self.assertTrue(torch.equal(got[1][3], torch.zeros_like(got[1][3])))
        self.assertTrue(torch.equal(got[2][3], torch.zeros_like(got[2][3])))
        self.assertTrue(self.bad.any())
        self.assertTrue((got[3][self.bad] == 0).all())

    def test_train_op(self):
        # moe_forward_train: opcheck (autograd and fake included), y as
        # moe_forward's; on the CPU gate_up is empty and the backward
        # given it recomputes.
        op = torch.ops.headroom.moe_forward_train
        w1 = self.m.w1.detach().clone().requires_grad_()
        w2 = self.m.w2.detach().clone().requires_grad_()
        args = (self.x, self.ids, self.wts.clone().requires_grad_(), w1, w2,
                self.m.key)
        torch.library.opcheck(op.default, args)
        y, gu = op(*args)
        self.assertTrue(torch.equal(y, torch.ops.headroom.moe_forward(*args)))
        self.assertEqual((tuple(gu.shape), gu.dtype),
                         ((0, 2 * self.I), torch.float32))
        bargs = (self.dy, self.x, self.ids, self.wts, w1.detach(),
                 w2.detach(), self.m.key, gu)
        torch.library.opcheck(torch.ops.headroom.moe_backward.default, bargs)
        a = torch.ops.headroom.moe_backward(*bargs)
        b = torch.ops.headroom.moe_backward(*bargs[:-1])
        for u, v in zip(a, b):
            self.assertTrue(torch.equal(u, v))

    def test_leading_dims_and_conversions(self):
        # x [2, 8, H] fp32, ids int64, weights bf16: flattened, converted,
        # and the gradients come back in the inputs' shapes and dtypes.
        x = self.x.float().reshape(2, 8, self.H).requires_grad_()
        ids = self.ids.long().reshape(2, 8, self.k)
        w = self.wts.bfloat16().reshape(2, 8, self.k).requires_grad_()
        y = self.m(x, ids, w)
        self.assertEqual(tuple(y.shape), (2, 8, self.H))
        self.assertEqual(y.dtype, torch.bfloat16)
        flat = self.m(self.x, self.ids, self.wts.bfloat16().float())
        self.assertTrue(torch.equal(y.reshape(-1, self.H), flat))
        y.float().sum().backward()
        self.assertEqual(x.grad.dtype, torch.float32)
        self.assertEqual(w.grad.dtype, torch.bfloat16)
        self.assertEqual(tuple(w.grad.shape), (2, 8, self.k))

    def test_reference_module(self):
        ref = hnn.MegaMoE(self.E, self.H, self.I, self.k, self.T,
                          reference=True)
        ref.load_state_dict(self.m.state_dict())
        a = self.m(self.x, self.ids, self.wts)
        b = ref(self.x, self.ids, self.wts)
        self.assertLess(rel(a, b), 1e-2)

    def test_copies(self):
        c = copy.deepcopy(self.m)
        self.assertEqual(c.key, self.m.key)          # same lease and shape
        self.assertIsNot(c.w1, self.m.w1)
        buf = io.BytesIO()
        torch.save(self.m, buf)
        buf.seek(0)
        p = torch.load(buf, weights_only=False)
        self.assertNotEqual(p.key, self.m.key)       # registered anew
        self.assertTrue(torch.equal(p.w1, self.m.w1))
        self.assertTrue(torch.equal(p(self.x, self.ids, self.wts),
                                    self.m(self.x, self.ids, self.wts)))


GPU = hrtest.moe_gpu_reason()


class GpuCase(DaemonTestCase):
    """On GPU 0, under leases of the class's own test daemon (2 GPUs of
    132 SMs, as an H200 has: grid 130 with no footprint). No tests of
    its own."""

    def setUp(self):
        self.dev = torch.device("cuda", 0)
        torch.cuda.set_device(self.dev)

    def module(self, lease=None, timeout_ms=2000, T=64, seed=0, **kw):
        """A MegaMoE of the small shape on GPU 0 with problem()'s weights,
        and the rest of problem()'s tensors."""
        x, ids, wts, w1, w2, dy, bad = problem(T=T, device=self.dev,
                                               seed=seed)
        if lease is None and "no_lease" not in kw:
            lease = self.client().lease(0, cluster=2)
        kw.pop("no_lease", None)
        m = hnn.MegaMoE(8, 256, 128, 2, T, device=self.dev, lease=lease,
                        timeout_ms=timeout_ms, **kw)
        with torch.no_grad():
            m.w1.copy_(w1)
            m.w2.copy_(w2)
        self.addCleanup(self.drain, m)
        return m, (x, ids, wts, dy, bad)

    @staticmethod
    def drain(m):
        try:
            m.check()
        except headroom.HeadroomError:
            pass



@unittest.skipIf(GPU is not None, GPU or "")
class TestOnGpu(GpuCase):
    def test_gradients_against_float64_autograd(self):
        m, (x, ids, wts, dy, bad) = self.module()
        y, got = module_grads(m, x, ids, wts, dy)
        m.check()
        ry, want = reference_grads(x, ids, wts, m.w1, m.w2, dy)
        self.assertLess(rel(y, ry), 1e-2)
        for name, a, b in zip(("x", "w1", "w2", "weights"), got, want):
            self.assertFalse(torch.isnan(a.float()).any().item(), name)
            self.assertLess(rel(a, b), 2e-2, name)
        self.assertEqual(got[1].dtype, torch.bfloat16)
        self.assertEqual(got[2].dtype, torch.bfloat16)
        self.assertEqual(got[3].dtype, torch.float32)
        self.assertEqual(got[1][3].abs().max().item(), 0.0)   # no pairs
        self.assertEqual(got[2][3].abs().max().item(), 0.0)
        self.assertEqual(got[3][bad].abs().max().item(), 0.0)
        self.assertEqual(m.last_grid, m.lease.grid)

    def test_backward_is_grid_independent(self):
        m, (x, ids, wts, dy, _) = self.module()
        moe = headroom.Moe(8, 256, 128, 2, 64, device=0)
        self.addCleanup(moe.close)
        moe.backward_prepare()
        outs = []
        for grid, mode in ((moe.sms, "headroom"), (moe.sms // 3, "headroom"),
                           (7, "agnostic")):
            o = (torch.full_like(x, float("nan")),
                 torch.full_like(m.w1, float("nan"), dtype=torch.float32),
                 torch.full_like(m.w2, float("nan"), dtype=torch.float32),
                 torch.full_like(wts, float("nan")))
            moe.backward_grid(grid, mode, x, ids, wts, m.w1.detach(),
                              m.w2.detach(), dy, *o, timeout_ms=2000)
            moe.sync()
            outs.append(o)
        for o in outs[1:]:
            for a, b in zip(outs[0], o):
                self.assertTrue(torch.equal(a, b))
        # fp32 dW rounded once is the module's bf16 dW.
        _, got = module_grads(m, x, ids, wts, dy)
        m.check()
        self.assertTrue(torch.equal(got[1], outs[0][1].bfloat16()))
        self.assertTrue(torch.equal(got[0], outs[0][0]))

    def test_forward_train_keeps_gate_up(self):
        # gate_up holds each valid pair's g and u (x W1^T), in the stable
        # expert order; y is moe_forward's.
        m, (x, ids, wts, dy, _) = self.module()
        w1, w2 = m.w1.detach(), m.w2.detach()
        y, gu = torch.ops.headroom.moe_forward_train(x, ids, wts, w1, w2,
                                                     m.key)
        y0 = torch.ops.headroom.moe_forward(x, ids, wts, w1, w2, m.key)
        m.check()
        self.assertTrue(torch.equal(y, y0))
        self.assertEqual(tuple(gu.shape), (ids.numel(), 256))
        flat = ids.flatten().long()
        valid = (flat >= 0) & (flat < 8)
        n = int(valid.sum())
        order = torch.argsort(torch.where(valid, flat, 8), stable=True)[:n]
        tok, e = order // ids.shape[1], flat[order]
        want = torch.einsum("ph,pih->pi", x[tok].double(), w1[e].double())
        self.assertLess(rel(gu[:n], want), 1e-5)

    def test_kept_gate_up_gives_the_same_gradients(self):
        # keep_gate_up (the default) and not: y and every gradient bitwise
        # the same; the sums read are the ones the backward would make.
        m, (x, ids, wts, dy, _) = self.module()
        self.assertTrue(m.keep_gate_up)
        y1, g1 = module_grads(m, x, ids, wts, dy)
        m.keep_gate_up = False
        y2, g2 = module_grads(m, x, ids, wts, dy)
        m.check()
        self.assertTrue(torch.equal(y1, y2))
        for name, a, b in zip(("x", "w1", "w2", "weights"), g1, g2):
            self.assertTrue(torch.equal(a, b), name)

    def test_cuda_graph_replay(self):
        m, (x, ids, wts, dy, _) = self.module()
        sx, sids, sw, sdy = (t.clone() for t in (x, ids, wts, dy))
        sx.requires_grad_()
        sw.requires_grad_()

        def step():
            y = m(sx, sids, sw)
            return (y,) + torch.autograd.grad(y, (sx, m.w1, m.w2, sw), sdy)

        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(2):
                step()
        torch.cuda.current_stream().wait_stream(side)
        hnn.check()              # nothing in flight outside the capture
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static = step()
        x2, ids2, w2_, _, _, dy2, _ = problem(T=64, device=self.dev, seed=5)
        with torch.no_grad():
            sx.copy_(x2)
            sids.copy_(ids2)
            sw.copy_(w2_)
            sdy.copy_(dy2)
        graph.replay()
        torch.cuda.synchronize()
        hnn.check()
        eager = step()
        m.check()
        for name, a, b in zip(("y", "x", "w1", "w2", "weights"), static,
                              eager):
            self.assertTrue(torch.equal(a, b), name)

    def test_compile_fullgraph(self):
        m, (x, ids, wts, dy, _) = self.module()

        def loss(x, ids, w):
            return m(x, ids, w).float().square().mean()

        torch._dynamo.reset()
        self.addCleanup(torch._dynamo.reset)
        compiled = torch.compile(loss, fullgraph=True)
        out = []
        for fn in (loss, compiled, compiled):
            xr = x.clone().requires_grad_()
            wr = wts.clone().requires_grad_()
            m.zero_grad()
            fn(xr, ids, wr).backward()
            out.append((xr.grad, wr.grad, m.w1.grad.clone(),
                        m.w2.grad.clone()))
        m.check()
        for got in out[1:]:
            for name, a, b in zip(("x", "weights", "w1", "w2"), got, out[0]):
                self.assertLess(rel(a, b), 1e-3, name)

    def test_fsdp_fully_shard_one_rank(self):
        import torch.distributed as dist
        from torch.distributed.fsdp import fully_shard
        if dist.is_initialized():
            self.skipTest("a process group is already initialised")
        d = tempfile.mkdtemp(prefix="hr-fsdp-")
        store = dist.FileStore(os.path.join(d, "store"), 1)
        backend = "nccl" if dist.is_nccl_available() else "gloo"
        dist.init_process_group(backend, store=store, rank=0, world_size=1)
        self.addCleanup(dist.destroy_process_group)
        m, (x, ids, wts, dy, _) = self.module()
        plain = copy.deepcopy(m)
        fully_shard(m)
        self.assertEqual(type(m.w1).__name__, "DTensor")
        results = []
        for model in (m, plain):
            opt = torch.optim.SGD(model.parameters(), lr=0.5)
            for _ in range(2):
                opt.zero_grad()
                loss = model(x, ids, wts).float().square().mean()
                loss.backward()
                opt.step()
            w1 = model.w1.full_tensor() if hasattr(model.w1, "full_tensor") \
                else model.w1
            results.append((loss.detach(), w1.detach().clone()))
        hnn.check()
        self.assertLess(rel(results[0][0], results[1][0]), 1e-3)
        self.assertLess(rel(results[0][1], results[1][1]), 1e-3)
        self.assertFalse(torch.equal(results[1][1], m.w1.full_tensor() * 0))

    def test_lease_changed_mid_training(self):
        c = self.client()
        lease = c.lease(0, cluster=2)
        m, (x, ids, wts, dy, _) = self.module(lease=lease)
        y0, g0 = module_grads(m, x, ids, wts, dy)
        m.check()
        self.assertEqual(m.last_grid, 130)
        epoch = lease.epoch
        c.register(0, "dp", ctas=8, concurrent=2)   # headroom 32: grid 100
        self.assertTrue(lease.wait_change(epoch, 3000))
        self.assertEqual(lease.grid, 100)
        y = m(x, ids, wts)                           # the next launch
        self.assertEqual(m.last_grid, 100)
        y1, g1 = module_grads(m, x, ids, wts, dy)
        m.check()
        self.assertEqual(m.last_grid, 100)
        # The kernel's results do not depend on the grid.
        self.assertTrue(torch.equal(y, y0))
        self.assertTrue(torch.equal(y1, y0))
        for a, b in zip(g0, g1):
            self.assertTrue(torch.equal(a, b))

    def test_fail_safe_budget_without_daemon(self):
        # The default lease (lease=None) of a process whose daemon does not
        # answer: degraded, the fail-safe budget, never the full grid.
        saved = os.environ.get("HEADROOM_SOCKET")
        os.environ["HEADROOM_SOCKET"] = os.path.join(self.daemon.dir,
                                                     "nobody.sock")
        old_client, old_leases = hnn._client, dict(hnn._leases)
        hnn._client = None
        try:
            m, (x, ids, wts, dy, _) = self.module(no_lease=True)
            lease = hnn.default_lease(0)
            self.assertTrue(lease.degraded)
            y, got = module_grads(m, x, ids, wts, dy)
            m.check()
            self.assertEqual(m.last_grid, lease.grid)
            self.assertLess(lease.grid, torch.cuda.get_device_properties(
                0).multi_processor_count)
            ry, _ = reference_grads(x, ids, wts, m.w1, m.w2, dy)
            self.assertLess(rel(y, ry), 1e-2)
        finally:
            if hnn._client is not None and hnn._client is not old_client:
                hnn._client.close()
            hnn._client = old_client
            hnn._leases.clear()
            hnn._leases.update(old_leases)
            if saved is None:
                os.environ.pop("HEADROOM_SOCKET", None)
            else:
                os.environ["HEADROOM_SOCKET"] = saved



@unittest.skipIf(GPU is not None, GPU or "")
class TestBarrierTimeoutOnGpu(GpuCase):
    """Apart, with a daemon of its own: the incident raises GPU 0's
    headroom for the rest of that daemon's life."""

    def test_barrier_timeout_surfaces(self):
        # A partition lease's launch made on the comm partition's stream:
        # the grid is the mega partition's (124 SMs with no footprint),
        # the stream's green context has 8, so the first grid barrier can
        # never see every CTA and times out, every time. Reported to the
        # daemon (under the lease), raised by check(); then by the next
        # launch's poll; and a launch on an ordinary stream still works.
        c = self.client()
        lease = c.lease(0, cluster=1, mode="partition")
        try:
            part = lease.partition()
        except (headroom.Unsupported, headroom.NoGPU) as e:
            self.skipTest("no green contexts here: %s" % e)
        self.addCleanup(part.close)
        m, (x, ids, wts, dy, _) = self.module(lease=lease, timeout_ms=300)
        comm = torch.cuda.ExternalStream(part.comm_stream)
        self.assertLess(part.comm_sms, lease.grid)
        epoch = lease.epoch
        comm.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(comm):
            m(x, ids, wts)
        with self.assertRaises(headroom.BarrierTimeout) as cm:
            m.check()
        f = cm.exception.failure
        self.assertIsNotNone(f)
        self.assertEqual(f.expected, f.grid)
        self.assertLess(f.arrived, f.expected)
        self.assertEqual(f.timeout_ms, 300)
        self.assertEqual(f.reported, 0)                # hr_report: HR_OK
        self.assertTrue(lease.wait_change(epoch, 3000))  # headroom raised
        # The context works again, on an ordinary stream.
        y = m(x, ids, wts)
        m.check()
        ry, _ = reference_grads(x, ids, wts, m.w1, m.w2, dy)
        self.assertLess(rel(y, ry), 1e-2)
        # No check() this time: the next launch's poll raises it.
        comm.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(comm):
            m(x, ids, wts)
        comm.synchronize()
        with self.assertRaises(headroom.BarrierTimeout):
            m(x, ids, wts)
        y = m(x, ids, wts)
        m.check()
        self.assertLess(rel(y, ry), 1e-2)


if __name__ == "__main__":
    unittest.main()
