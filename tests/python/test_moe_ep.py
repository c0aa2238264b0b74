"""headroom.MoeEP and its bootstraps. Without a GPU: VirtualGroup's
collectives between threads and their failures (a rank that raises, one
that never arrives, an abort: every rank gets an error, within bounds),
MoeEP's argument checks, ep_memory against the header's formula, and the
real library's collective creation through the Python allgather callback
(every rank fails alike with NoGPU after both exchanges; a rank whose
bootstrap raises ends every rank at once; ranks that disagree on the
shape). With an sm_90 GPU and libheadroom_moe: R = 2 and 4 virtual ranks
in threads, a stream each and grid SMs / R (forward_grid), y bitwise the
single-GPU MegaMoE's over all experts; a rank that skips an epoch and an
abort, each raising with the EP failure, then a good epoch. Each class
skips with its reason where torch, the library or the GPU is missing."""
import os
import threading
import time
import unittest

import hrtest
from hrtest import DaemonTestCase

import headroom
from headroom import _lib
from headroom.moe_ep import VirtualGroup, VirtualGroupError

torch = hrtest.torch_or_none()
NO_TORCH = "torch is not importable here"
HAVE_MOE = os.path.exists(os.path.join(hrtest.LIBDIR, "libheadroom_moe.so"))
NO_MOE = "libheadroom_moe.so is not built here (no nvcc)"
SHAPE = headroom.MoeShape(8, 256, 128, 2, 64)


def on_threads(n, fn, timeout=30):
    """fn(rank) on n threads; {rank: ("ok", value) or ("error", exc)} and
    the seconds it took. Fails the test if a thread is still running."""
    out = {}

    def run(r):
        try:
            out[r] = ("ok", fn(r))
        except BaseException as e:     # noqa: BLE001 (returned)
            out[r] = ("error", e)
    ts = [threading.Thread(target=run, args=(r,), daemon=True)
          for r in range(n)]
    t0 = time.monotonic()
    for t in ts:
        t.start()
    for t in ts:
        t.join(timeout)
    if any(t.is_alive() for t in ts):
        raise AssertionError("a thread is still running after %d s" % timeout)
    return out, time.monotonic() - t0


class TestVirtualGroup(unittest.TestCase):
    """The collectives between threads, and that none of them can hang."""

    def test_allgather_exchange_barrier(self):
        for R in (1, 3):
            g = VirtualGroup(R, timeout_s=10)

            def rank(r):
                a = g.allgather(r, b"rank%d" % r)
                b = g.member(r).allgather(bytes([r]) * 2)
                x = g.exchange(r, ["%d->%d" % (r, d) for d in range(R)])
                g.barrier(r)
                return a, b, x
            out, _ = on_threads(R, rank)
            for r in range(R):
                kind, (a, b, x) = out[r]
                self.assertEqual(kind, "ok")
                self.assertEqual(a, [b"rank%d" % i for i in range(R)])
                self.assertEqual(b, [bytes([i]) * 2 for i in range(R)])
                self.assertEqual(x, ["%d->%d" % (s, r) for s in range(R)])
            self.assertFalse(g.broken)

    def test_a_rank_that_raises_fails_every_rank_at_once(self):
        g = VirtualGroup(3, timeout_s=30)

        def rank(r):
            g.allgather(r, b"ok")                     # one good round
            if r == 1:
                try:
                    raise RuntimeError("rank 1 fails")
                finally:
                    g.abort()
            return g.allgather(r, b"x")
        out, took = on_threads(3, rank)
        self.assertLess(took, 5)                      # not the 30 s timeout
        self.assertIsInstance(out[1][1], RuntimeError)
        for r in (0, 2):
            self.assertEqual(out[r][0], "error")
            self.assertIsInstance(out[r][1], VirtualGroupError)
            self.assertIn("broken", str(out[r][1]))
        self.assertTrue(g.broken)
        with self.assertRaises(VirtualGroupError):    # and stays broken
            g.barrier(0)

    def test_mismatched_sizes_fail_every_rank(self):
        g = VirtualGroup(2, timeout_s=30)
        out, took = on_threads(2, lambda r: g.allgather(r, b"a" * (r + 1)))
        self.assertLess(took, 5)
        errors = [out[r][1] for r in range(2)]
        self.assertTrue(all(isinstance(e, (ValueError, VirtualGroupError))
                            for e in errors), errors)
        self.assertTrue(any("different sizes" in str(e) for e in errors))

    def test_a_rank_that_never_comes_times_out(self):
        g = VirtualGroup(3, timeout_s=0.3)

        def rank(r):
            if r == 2:
                return None                           # never arrives
            return g.allgather(r, b"x")
        out, took = on_threads(3, rank)
        self.assertLess(took, 5)
        for r in (0, 1):
            self.assertIsInstance(out[r][1], VirtualGroupError)
            self.assertIn("0.3 s", str(out[r][1]))

    def test_arguments(self):
        with self.assertRaisesRegex(ValueError, r"^nranks must be >= 1"):
            VirtualGroup(0)
        with self.assertRaisesRegex(TypeError, r"^nranks must be an int"):
            VirtualGroup(2.0)
        with self.assertRaisesRegex(ValueError, r"^timeout_s must be"):
            VirtualGroup(2, timeout_s=0)
        g = VirtualGroup(2)
        with self.assertRaisesRegex(ValueError,
                                    r"^rank must be 0\.\.1, got 2"):
            g.member(2)
        with self.assertRaisesRegex(ValueError, r"one per rank"):
            g.exchange(0, [1])
        self.assertTrue(g.broken)          # the peer must not wait for it

    def test_bootstrap_of(self):
        g = VirtualGroup(2)
        b = headroom.moe_ep.bootstrap_of(g, 1)
        self.assertEqual((b.rank, b.nranks), (1, 2))
        self.assertEqual(b.exchange_kind, _lib.HR_MOE_EP_EXCHANGE_POINTERS)
        self.assertIs(headroom.moe_ep.bootstrap_of(b), b)
        with self.assertRaisesRegex(ValueError, r"needs the rank"):
            headroom.moe_ep.bootstrap_of(g)
        with self.assertRaisesRegex(ValueError, r"does not match"):
            headroom.moe_ep.bootstrap_of(b, 0)
        with self.assertRaisesRegex(TypeError, r"ProcessGroup, a headroom"):
            headroom.moe_ep.bootstrap_of(object())


class TestFailureText(unittest.TestCase):
    def test_ep_failures_name_the_rank(self):
        local = headroom.MoeFailure(code=-22, barrier=40, arrived=1,
                                    expected=2, sm=3, grid=66, timeout_ms=300,
                                    cuda_error=-1, cta=0, reported=1)
        f = headroom.MoeEPFailure(code=-22, failed_rank=0, wait=40,
                                  waited_for=1, noticed_wait=40, epoch=7,
                                  local=local)
        self.assertEqual((f.wait_name, f.noticed_name), ("dispatch",
                                                         "dispatch"))
        e = headroom.BarrierTimeout(-22, "hr_moe_ep_sync (rank 0 of 2)", f)
        self.assertIs(e.failure, f)
        self.assertIn("epoch 7: rank 0 failed at dispatch waiting for rank 1",
                      str(e))
        self.assertIn("1 of 2 arrived", str(e))
        a = headroom.Aborted(-24, "x", f)
        self.assertIs(a.failure, f)
        self.assertIn("rank 0 failed", str(a))
        self.assertIsNone(headroom.Aborted(-24).failure)


@unittest.skipUnless(HAVE_MOE, NO_MOE)
class TestMoeEPWithoutGpu(unittest.TestCase):
    """The binding against the real library where no kernel can run: the
    checks, the memory formula, and the collective creation itself (it
    exchanges records before it can tell the GPU is missing)."""

    def test_memory_is_the_headers_formula(self):
        # headroom_moe.h: peer rows (2H + 4k + 4) + max_tokens k 2H, local
        # pairs (2I + 2H + 8) + max_tokens k 4 (rows = R max_tokens, pairs
        # = rows k), plus fixed words: flag lines, barrier words, the
        # agnostic form's tables (under 1 MiB).
        for (E, H, I, k), R, mt in (((128, 2048, 768, 8), 8, 4096),
                                    ((256, 7168, 2048, 8), 8, 4096),
                                    ((8, 256, 128, 2), 2, 64)):
            peer, local = headroom.ep_memory(headroom.MoeShape(E, H, I, k, mt),
                                             R)
            rows = R * mt
            want_peer = rows * (2 * H + 4 * k + 4) + mt * k * 2 * H
            want_local = rows * k * (2 * I + 2 * H + 8) + mt * k * 4
            self.assertGreaterEqual(peer, want_peer)
            self.assertLess(peer - want_peer, 1 << 20)
            self.assertGreaterEqual(local, want_local)
            self.assertLess(local - want_local, 1 << 20)
        # The header's figure: Qwen3-30B-A3B, R 8, 4096 tokens: 0.27 + 1.48 GB.
        peer, local = headroom.ep_memory(
            headroom.MoeShape(128, 2048, 768, 8, 4096), 8)
        self.assertEqual((round(peer / 1e9, 2), round(local / 1e9, 2)),
                         (0.27, 1.48))
        # With the backward's room (where the library has it): peer rows
        # (2H + 4k) + max_tokens k 4 more, local pairs (4I + 4 + I/16).
        lib = headroom.load_moe_library()
        shape = headroom.MoeShape(128, 2048, 768, 8, 4096)
        if _lib.has_symbol(lib, "hr_moe_ep_memory_backward"):
            bpeer, blocal = headroom.ep_memory(shape, 8, backward=True)
            rows, H, I, k = 8 * 4096, 2048, 768, 8
            self.assertEqual(bpeer - peer, rows * (2 * H + 4 * k) + 4096 * k * 4)
            self.assertEqual(blocal - local,
                             rows * k * (4 * I + 4 + I // 16))
        else:
            with self.assertRaisesRegex(NotImplementedError,
                                        "hr_moe_ep_memory_backward"):
                headroom.ep_memory(shape, 8, backward=True)
        with self.assertRaises(headroom.InvalidArgument):
            headroom.ep_memory(headroom.MoeShape(8, 256, 128, 2, 64), 3)
        with self.assertRaises(headroom.InvalidArgument):
            headroom.ep_memory(headroom.MoeShape(8, 256, 128, 2, 64), 9)
        with self.assertRaisesRegex(TypeError, r"^shape must be a headroom"):
            headroom.ep_memory((8, 256, 128, 2, 64), 2)

    def test_argument_checks(self):
        g = VirtualGroup(2)
        for args, cls, pattern in (
                ((SHAPE, 0, 0, g), ValueError, r"^nranks must be 1\.\.8"),
                ((SHAPE, 0, 9, g), ValueError, r"^nranks must be 1\.\.8"),
                ((SHAPE, 2, 2, g), ValueError, r"^rank must be 0\.\.1"),
                ((SHAPE, 0, 2.0, g), TypeError, r"^nranks must be an int"),
                (((8, 256, 128, 2, 64), 0, 2, g), TypeError,
                 r"^shape must be a headroom\.MoeShape"),
                ((SHAPE, 0, 2, 5), TypeError, r"ProcessGroup, a headroom"),
                ((SHAPE, 0, 4, g), ValueError,
                 r"^nranks is 4, the bootstrap's group has 2")):
            with self.assertRaisesRegex(cls, pattern):
                headroom.MoeEP(*args, device=0)
        # A refusal after the bootstrap is known breaks a VirtualGroup, so
        # the peers do not wait for this rank.
        self.assertTrue(g.broken)
        g = VirtualGroup(2)
        with self.assertRaisesRegex(ValueError, r"^exchange must be"):
            headroom.MoeEP(SHAPE, 0, 2, g, device=0, exchange=7)
        self.assertTrue(g.broken)

    def test_backward_only_where_the_library_has_it(self):
        lib = headroom.load_moe_library()
        have = _lib.has_symbol(lib, "hr_moe_ep_backward")
        # The bootstrap's `backward` field: 1 only when asked for and the
        # library exports the EP backward (a library before it gets 0).
        for asked in (False, True):
            ep = headroom.MoeEP.__new__(headroom.MoeEP)
            ep._ptr, ep._keep, ep._lib = None, None, lib
            ep._setup(SHAPE, 0, 1, VirtualGroup(1).member(0), 0, None, asked)
            self.assertEqual(ep._boot_t.backward, int(asked and have))
            self.assertEqual(ep.has_backward, asked and have)

    def test_backward_without_it_in_the_library(self):
        lib = headroom.load_moe_library()
        if _lib.has_symbol(lib, "hr_moe_ep_backward"):
            self.skipTest("the library has hr_moe_ep_backward")
        ep = headroom.MoeEP.__new__(headroom.MoeEP)
        ep._ptr, ep._keep, ep._lib = None, None, lib
        with self.assertRaisesRegex(NotImplementedError,
                                    r"the library has no hr_moe_ep_backward"):
            ep.backward(None, *[None] * 10)
        with self.assertRaisesRegex(NotImplementedError,
                                    r"the library has no hr_moe_ep_backward"):
            ep.backward_grid(1, "headroom", *[None] * 10)

    def create(self, R, shapes=None, boots=None, timeout_s=10):
        """MoeEP on R threads, through one VirtualGroup (or `boots`):
        {rank: (kind, value)}, the seconds, the group. Contexts that a GPU
        let through are closed again (collectively)."""
        g = VirtualGroup(R, timeout_s=timeout_s)
        calls = {}

        class Counting:
            def __init__(self, inner):
                self.inner, self.rank, self.nranks = inner, inner.rank, R

            def allgather(self, data):
                calls[self.rank] = calls.get(self.rank, 0) + 1
                return self.inner.allgather(data)

            def barrier(self):
                self.inner.barrier()

            def abort(self):
                self.inner.abort()

        def rank(r):
            boot = boots[r](g.member(r)) if boots else Counting(g.member(r))
            shape = shapes[r] if shapes else SHAPE
            ep = headroom.MoeEP(shape, r, R, boot, device=0)
            ep.close()
            return ep
        out, took = on_threads(R, rank)
        return out, took, g, calls

    def test_collective_create_through_the_callback(self):
        for R in (1, 2, 4):
            out, took, g, calls = self.create(R)
            for r in range(R):
                kind, v = out[r]
                if kind == "ok":                      # a GPU here: created
                    continue
                # No GPU: every rank took part in both exchanges (the
                # records, then the agreement) and fails with the same code.
                self.assertIsInstance(v, (headroom.NoGPU,
                                          headroom.Unsupported),
                                      "rank %d: %r" % (r, v))
                self.assertIn("rank %d of %d" % (r, R), str(v))
                self.assertEqual(calls.get(r), 2, "rank %d" % r)
            self.assertFalse(g.broken)

    def test_ranks_that_disagree_all_fail(self):
        other = headroom.MoeShape(8, 256, 256, 2, 64)
        out, _, g, calls = self.create(2, shapes=[SHAPE, other])
        for r in range(2):
            self.assertEqual(out[r][0], "error")
            self.assertIsInstance(out[r][1], headroom.InvalidArgument)
            self.assertEqual(calls.get(r), 2)

    def test_a_bootstrap_that_raises_ends_every_rank(self):
        class Raising:
            def __init__(self, inner):
                self.inner, self.rank, self.nranks = inner, inner.rank, 4

            def allgather(self, data):
                raise RuntimeError("injected: rank 1's transport is down")

            def abort(self):
                self.inner.abort()

        boots = [lambda m: m, Raising, lambda m: m, lambda m: m]
        out, took, g, _ = self.create(4, boots=boots, timeout_s=30)
        self.assertLess(took, 5)                      # not the 30 s timeout
        for r in range(4):
            kind, e = out[r]
            self.assertEqual(kind, "error")
            # The callback's exception became HR_ECONNECT, never an
            # exception through C; it is the error's cause.
            self.assertIsInstance(e, headroom.ConnectError, repr(e))
        self.assertIsInstance(out[1][1].__cause__, RuntimeError)
        self.assertIn("injected", str(out[1][1].__cause__))
        self.assertIsInstance(out[0][1].__cause__, VirtualGroupError)
        self.assertTrue(g.broken)

    def test_a_rank_refused_by_the_library_releases_its_peers(self):
        # E % R: the library refuses before any exchange; the binding then
        # breaks the group, so a peer given a good shape is not left
        # waiting for its timeout.
        bad = headroom.MoeShape(6, 256, 128, 2, 64)
        out, took, g, calls = self.create(4, shapes=[bad, SHAPE, SHAPE, SHAPE],
                                          timeout_s=30)
        self.assertLess(took, 5)
        self.assertIsInstance(out[0][1], headroom.InvalidArgument)
        self.assertEqual(calls.get(0, 0), 0)
        for r in (1, 2, 3):
            self.assertIsInstance(out[r][1], headroom.ConnectError)
        self.assertTrue(g.broken)


def gpu_reason():
    if torch is None:
        return NO_TORCH
    if not HAVE_MOE:
        return NO_MOE
    if not torch.cuda.is_available():
        return "no CUDA device"
    if torch.cuda.get_device_capability(0) != (9, 0):
        return "GPU 0 is not compute capability 9.0"
    return None


GPU = gpu_reason()


def problem(E=8, H=256, I=128, k=2, T=96, device="cuda", seed=0):
    """T tokens: k distinct experts each, a few ids outside [0, E), weights
    in (0.05, 1), small weights: x, ids, weights, w1, w2 on `device`."""
    g = torch.Generator(device=device).manual_seed(seed)
    x = torch.randn(T, H, device=device, generator=g).bfloat16()
    ids = torch.rand(T, E, device=device, generator=g).argsort(dim=1)[:, :k]
    ids = ids.int()
    ids[0, k - 1] = E
    ids[1, 0] = -1
    ids[2, 0] = 1000
    wts = torch.rand(T, k, device=device, generator=g) * 0.95 + 0.05
    w1 = (torch.randn(E, 2 * I, H, device=device, generator=g)
          / H ** 0.5).bfloat16()
    w2 = (torch.randn(E, H, I, device=device, generator=g)
          / I ** 0.5).bfloat16()
    return x, ids.contiguous(), wts, w1, w2


def split(T, R, last_empty=False):
    """Token counts per rank: as even as can be, or the last rank none."""
    n = R - 1 if last_empty and R > 1 else R
    cnt = [T // n + (r < T % n) if r < n else 0 for r in range(R)]
    offs = [sum(cnt[:r]) for r in range(R)]
    return cnt, offs


@unittest.skipIf(GPU is not None, GPU or "")
class TestMoeEPOnGpu(DaemonTestCase):
    """Virtual ranks on GPU 0, each a thread with its own stream and grid
    SMs / R, against the single-GPU module over all experts."""

    def setUp(self):
        import headroom.nn as hnn
        self.hnn = hnn
        torch.cuda.set_device(0)
        self.sms = torch.cuda.get_device_properties(0).multi_processor_count

    def single_gpu_y(self, x, ids, wts, w1, w2):
        lease = self.client().lease(0, cluster=2)
        m = self.hnn.MegaMoE(8, 256, 128, 2, x.shape[0], device="cuda:0",
                             lease=lease, timeout_ms=5000)
        with torch.no_grad():
            m.w1.copy_(w1)
            m.w2.copy_(w2)
            y = m(x, ids, wts)
        m.check()
        return y

    def run_ranks(self, R, x, ids, wts, w1, w2, cnt, offs, body):
        """Each rank on its thread: its MoeEP (collective), its stream, its
        slices; body(r, ep, stream, tensors) -> value; then every rank's
        close. {rank: value}, raising the first rank's error."""
        g = VirtualGroup(R, timeout_s=60)
        E = w1.shape[0]
        El = E // R
        shape = headroom.MoeShape(E, 256, 128, 2, max(cnt) + 1)

        def rank(r):
            torch.cuda.set_device(0)
            st = torch.cuda.Stream()
            ep = headroom.MoeEP(shape, r, R, g, device=0)
            try:
                a, b = offs[r], offs[r] + cnt[r]
                t = dict(x=x[a:b], ids=ids[a:b], wts=wts[a:b],
                         w1=w1[r * El:(r + 1) * El].contiguous(),
                         w2=w2[r * El:(r + 1) * El].contiguous(),
                         y=torch.full((cnt[r], 256), float("nan"),
                                      dtype=torch.bfloat16, device="cuda"))
                st.wait_stream(torch.cuda.current_stream())
                return body(r, ep, st, t)
            finally:
                try:
                    ep.sync()
                except headroom.HeadroomError:
                    pass
                ep.close()
        out, _ = on_threads(R, rank, timeout=120)
        for r in range(R):
            if out[r][0] == "error":
                raise out[r][1]
        return {r: out[r][1] for r in range(R)}

    def test_virtual_ranks_bitwise_the_single_gpu_module(self):
        for R in (2, 4):
            for last_empty in (False, True):
                x, ids, wts, w1, w2 = problem(seed=R)
                ref = self.single_gpu_y(x, ids, wts, w1, w2)
                cnt, offs = split(x.shape[0], R, last_empty)
                grid = self.sms // R

                def body(r, ep, st, t):
                    ep.forward_grid(grid, t["x"], t["ids"], t["wts"], t["w1"],
                                    t["w2"], t["y"], timeout_ms=5000,
                                    stream=st)
                    ep.sync()
                    return t["y"]
                ys = self.run_ranks(R, x, ids, wts, w1, w2, cnt, offs, body)
                y = torch.cat([ys[r] for r in range(R)])
                self.assertFalse(torch.isnan(y.float()).any().item())
                self.assertTrue(torch.equal(y, ref),
                                "R=%d last_empty=%s: y differs from the "
                                "single-GPU module's" % (R, last_empty))

    def test_skipped_epoch_and_abort(self):
        R = 2
        x, ids, wts, w1, w2 = problem(seed=3)
        ref = self.single_gpu_y(x, ids, wts, w1, w2)
        cnt, offs = split(x.shape[0], R)
        grid = self.sms // R
        g_time = {}

        def body(r, ep, st, t):
            args = (t["x"], t["ids"], t["wts"], t["w1"], t["w2"], t["y"])
            got = {}
            # 1. rank 1 spends the epoch without launching: rank 0 times out
            # at the dispatch wait, naming rank 1.
            if r == 0:
                t0 = time.monotonic()
                ep.forward_grid(grid, *args, timeout_ms=300, stream=st)
                try:
                    ep.sync()
                except headroom.BarrierTimeout as e:
                    got["timeout"] = e.failure
                g_time["timeout"] = time.monotonic() - t0
            else:
                ep.spend_epoch()
            ep.bootstrap.barrier()
            # 2. a good epoch on both.
            ep.forward_grid(grid, *args, timeout_ms=5000, stream=st)
            ep.sync()
            got["y"] = t["y"].clone()
            ep.bootstrap.barrier()
            # 3. rank 0 launches with a 10 s timeout and aborts itself
            # while rank 1 has not come: Aborted at once, naming rank 0.
            if r == 0:
                ep.forward_grid(grid, *args, timeout_ms=10000, stream=st)
                time.sleep(0.05)
                t0 = time.monotonic()
                ep.abort()
                try:
                    ep.sync()
                except headroom.Aborted as e:
                    got["abort"] = e.failure
                g_time["abort"] = time.monotonic() - t0
            else:
                ep.spend_epoch()
            ep.bootstrap.barrier()
            # 4. and a good epoch again.
            t["y"].fill_(float("nan"))
            ep.forward_grid(grid, *args, timeout_ms=5000, stream=st)
            ep.sync()
            got["y2"] = t["y"].clone()
            return got
        out = self.run_ranks(R, x, ids, wts, w1, w2, cnt, offs, body)
        f = out[0]["timeout"]
        self.assertIsInstance(f, headroom.MoeEPFailure)
        self.assertEqual(f.code, _lib.HR_EBARRIER_TIMEOUT)
        self.assertEqual((f.failed_rank, f.wait, f.waited_for),
                         (0, _lib.HR_MOE_EP_WAIT_DISPATCH, 1))
        self.assertLess(g_time["timeout"], 4 * 0.3 + 1.0)
        f = out[0]["abort"]
        self.assertEqual((f.code, f.failed_rank), (_lib.HR_EABORTED, 0))
        self.assertLess(g_time["abort"], 2.0)
        for key in ("y", "y2"):
            y = torch.cat([out[r][key] for r in range(R)])
            self.assertTrue(torch.equal(y, ref), key)


if __name__ == "__main__":
    unittest.main()
