"""Moe: the mega-MoE forward kernel (libheadroom_moe) on torch tensors.

    moe = headroom.Moe(experts=8, hidden=256, inter=512, topk=2,
                       max_tokens=4096, device=local_rank)
    moe.forward(lease, x, ids, weights, w1, w2, y, timeout_ms=1000)
    moe.sync()            # BarrierTimeout when a grid barrier timed out

forward() launches on the current torch stream of the tensors' device
(torch.cuda.current_stream().cuda_stream) with the grid the lease holds
at that moment, and returns at once; sync() waits for it. Layouts are
those of kernels/headroom_moe.h:

    x [T, H] bf16   ids [T, k] int32   weights [T, k] fp32
    w1 [E, 2I, H] bf16 (gate rows, then up rows)   w2 [E, H, I] bf16
    y [T, H] bf16 (written in full)

Every tensor must be contiguous, on the context's CUDA device, with the
shape above; forward() checks all of it in Python and raises ValueError
naming the tensor before anything reaches the GPU. torch is imported only
when a method needs it: creating a Moe with an explicit device index does
not need torch.
"""
from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import Optional

from . import _lib
from .client import Lease, Mode, _Closable
from .errors import Aborted, BarrierTimeout, check

__all__ = ["Moe", "MoeShape", "MoeFailure", "check_moe_tensors",
           "check_moe_grad_tensors", "reference"]


@dataclass(frozen=True)
class MoeShape:
    """struct hr_moe_shape: fixed for the life of a Moe."""
    experts: int
    hidden: int
    inter: int
    topk: int
    max_tokens: int


@dataclass(frozen=True)
class MoeFailure:
    """struct hr_moe_failure, flattened: what the last failed launch left
    in the kernel's error word."""
    code: int
    barrier: int
    arrived: int
    expected: int
    sm: int
    grid: int
    timeout_ms: int
    cuda_error: int
    cta: int
    reported: int      # hr_report()'s result; 1: not reported (no lease)

    @classmethod
    def _from_c(cls, f: _lib.MoeFailure_t) -> "MoeFailure":
        d = f.detail
        return cls(code=f.code, barrier=d.barrier, arrived=d.arrived,
                   expected=d.expected, sm=d.sm, grid=d.grid,
                   timeout_ms=d.timeout_ms, cuda_error=d.cuda_error,
                   cta=f.cta, reported=f.reported)


def _torch():
    import torch
    return torch


class _CurrentContext:
    """Keeps the calling thread's current CUDA context across a call into
    libheadroom_moe. That library carries its own CUDA runtime (linked
    statically) and switches devices around its calls; the context torch
    made current must be the one current afterwards, whatever the two
    runtimes think the current device is. Through the driver API
    (cuCtxGetCurrent/cuCtxSetCurrent), which both runtimes sit on; a no-op
    where libcuda cannot be loaded (then nothing can run on a GPU anyway)."""

    def __init__(self):
        self._get = self._set = None
        try:
            cu = ctypes.CDLL("libcuda.so.1")
            self._get = cu.cuCtxGetCurrent
            self._get.restype = ctypes.c_int
            self._get.argtypes = [ctypes.POINTER(ctypes.c_void_p)]
            self._set = cu.cuCtxSetCurrent
            self._set.restype = ctypes.c_int
            self._set.argtypes = [ctypes.c_void_p]
        except (OSError, AttributeError):
            self._get = self._set = None

    def get(self):
        if self._get is None:
            return None
        c = ctypes.c_void_p()
        if self._get(ctypes.byref(c)) != 0:
            return None
        return (c.value,)                  # (None,) when none is current

    def restore(self, before):
        if before is None:
            return
        now = self.get()
        if now is not None and now != before:
            self._set(before[0])


_ctx = None


def _context():
    global _ctx
    if _ctx is None:
        _ctx = _CurrentContext()
    return _ctx


def _int_arg(v, what, lo=1, hi=None) -> int:
    """v, an int (not a bool) in lo..hi (hi None: no bound); TypeError or
    ValueError naming `what` otherwise."""
    if isinstance(v, bool) or not isinstance(v, int):
        raise TypeError("%s must be an int, not %s" % (what, type(v).__name__))
    if v < lo or (hi is not None and v > hi):
        raise ValueError("%s must be %s, got %d" % (
            what, ">= %d" % lo if hi is None else "%d..%d" % (lo, hi), v))
    return v


def _check_tensors(device: int, named, want) -> None:
    """The checks every launch makes: `named` is ((name, tensor), ...),
    `want` name -> (shape, dtype, alignment in bytes). One property at a
    time over all tensors, so the message names the real mistake (a wrong
    dtype before the device every CPU tensor has)."""
    for name, t in named:
        if t.dtype != want[name][1]:
            raise ValueError("%s must be %s, got %s"
                             % (name, want[name][1], t.dtype))
    for name, t in named:
        if tuple(t.shape) != want[name][0]:
            raise ValueError("%s must have shape %s, got %s"
                             % (name, want[name][0], tuple(t.shape)))
    for name, t in named:
        if t.device.type != "cuda" or t.device.index != device:
            raise ValueError("%s must be on cuda:%d, got %s"
                             % (name, device, t.device))
    for name, t in named:
        if not t.is_contiguous():
            raise ValueError("%s must be contiguous" % name)
        if t.data_ptr() % want[name][2]:
            raise ValueError("%s must be %d-byte aligned (data_ptr %#x)"
                             % (name, want[name][2], t.data_ptr()))


def _tensors_and_tokens(shape: MoeShape, named, least: int = 1) -> int:
    """Type-check `named` and return T from x, which must be [T, H] with
    least <= T <= max_tokens (least 0: an EP rank may bring none)."""
    torch = _torch()
    for name, t in named:
        if not isinstance(t, torch.Tensor):
            raise TypeError("%s must be a torch.Tensor, not %s"
                            % (name, type(t).__name__))
    x = named[0][1]
    if x.dim() != 2:
        raise ValueError("x must be [T, H], got shape %s" % (tuple(x.shape),))
    T = x.shape[0]
    if T < least or T > shape.max_tokens:
        raise ValueError("x has %d tokens, must be %d..%d (max_tokens)"
                         % (T, least, shape.max_tokens))
    return T


def _forward_want(shape: MoeShape, T: int, experts: Optional[int] = None
                  ) -> dict:
    """Each forward tensor's (shape, dtype, alignment) for T tokens;
    `experts`: the experts w1 and w2 hold (an EP rank's E/R), else all."""
    torch = _torch()
    E = shape.experts if experts is None else experts
    H, I, k = shape.hidden, shape.inter, shape.topk
    return {
        "x": ((T, H), torch.bfloat16, 16),
        "ids": ((T, k), torch.int32, 4),
        "weights": ((T, k), torch.float32, 4),
        "w1": ((E, 2 * I, H), torch.bfloat16, 16),
        "w2": ((E, H, I), torch.bfloat16, 16),
        "y": ((T, H), torch.bfloat16, 16),
    }


def _cuda_stream(device: int, stream) -> int:
    """The cudaStream_t a launch goes on: torch's current stream of
    `device` (None), a raw handle (an int) or a torch.cuda.Stream's."""
    if stream is None:
        return _torch().cuda.current_stream(device).cuda_stream
    if isinstance(stream, int):
        return stream
    return stream.cuda_stream


def _in_context(fn, *args):
    """fn(*args), a call into libheadroom_moe, with the calling thread's
    current CUDA context the same after it as before (_CurrentContext)."""
    ctx = _context()
    before = ctx.get()
    try:
        return fn(*args)
    finally:
        ctx.restore(before)


def _gate_up_want(shape: MoeShape, T: int) -> tuple:
    """gate_up's (shape, dtype, alignment): each pair's g and u, fp32."""
    return ((T * shape.topk, 2 * shape.inter), _torch().float32, 16)


def check_moe_tensors(shape: MoeShape, device: int, x, ids, weights, w1, w2,
                      y, gate_up=None) -> int:
    """Check the tensors of one forward against `shape` and CUDA device
    index `device` (gate_up too, unless None); return the token count T.
    Raises ValueError (or TypeError for a non-tensor) naming the first
    tensor that is wrong."""
    named = (("x", x), ("ids", ids), ("weights", weights), ("w1", w1),
             ("w2", w2), ("y", y))
    if gate_up is not None:
        named += (("gate_up", gate_up),)
    T = _tensors_and_tokens(shape, named)
    want = _forward_want(shape, T)
    want["gate_up"] = _gate_up_want(shape, T)
    _check_tensors(device, named, want)
    return T


def check_moe_grad_tensors(shape: MoeShape, device: int, x, ids, weights,
                           w1, w2, dy, dx, dw1, dw2, dweights,
                           gate_up=None) -> tuple:
    """Check the tensors of one backward (the forward's inputs, then dy
    and the four outputs) as check_moe_tensors does; return (T, dw_dtype).
    dw1 and dw2 are both fp32 or both bf16 (HR_MOE_DW_FP32 / _BF16: the
    kernel sums in fp32 either way and rounds a bf16 gradient once)."""
    torch = _torch()
    named = (("x", x), ("ids", ids), ("weights", weights), ("w1", w1),
             ("w2", w2), ("dy", dy), ("dx", dx), ("dw1", dw1), ("dw2", dw2),
             ("dweights", dweights))
    if gate_up is not None:
        named += (("gate_up", gate_up),)
    T = _tensors_and_tokens(shape, named)
    dw_types = {torch.float32: _lib.HR_MOE_DW_FP32,
                torch.bfloat16: _lib.HR_MOE_DW_BF16}
    if dw1.dtype not in dw_types:
        raise ValueError("dw1 must be torch.float32 or torch.bfloat16, got %s"
                         % dw1.dtype)
    if dw2.dtype != dw1.dtype:
        raise ValueError("dw2 must be %s (dw1's dtype), got %s"
                         % (dw1.dtype, dw2.dtype))
    E, H, I, k = shape.experts, shape.hidden, shape.inter, shape.topk
    want = _forward_want(shape, T)
    del want["y"]
    want.update({
        "dy": ((T, H), torch.bfloat16, 16),
        "dx": ((T, H), torch.bfloat16, 16),
        "dw1": ((E, 2 * I, H), dw1.dtype, 16),
        "dw2": ((E, H, I), dw1.dtype, 16),
        "dweights": ((T, k), torch.float32, 4),
        "gate_up": _gate_up_want(shape, T),
    })
    _check_tensors(device, named, want)
    return T, dw_types[dw1.dtype]


def reference(x, ids, weights, w1, w2):
    """The forward in plain torch, rounded where the kernel rounds (see
    kernels/headroom_moe.h: SwiGLU output and each expert's GEMM2 row to
    bf16, the weighted sum in fp32 in slot order, y to bf16 once), with
    products in float64 so no TF32 setting changes it. For checking the
    kernel on small shapes; a loop over experts, not fast. Returns y."""
    torch = _torch()
    E, I2, H = w1.shape
    I = I2 // 2
    T, k = ids.shape
    xd = x.double()
    acc = torch.zeros(T, H, dtype=torch.float32, device=x.device)
    for j in range(k):
        for e in range(E):
            sel = (ids[:, j] == e).nonzero(as_tuple=True)[0]
            if sel.numel() == 0:
                continue
            xs = xd.index_select(0, sel)
            gate = (xs @ w1[e, :I].double().T).float()
            up = (xs @ w1[e, I:].double().T).float()
            h = (gate / (1.0 + torch.exp(-gate)) * up).bfloat16()
            row = (h.double() @ w2[e].double().T).float().bfloat16().float()
            w = weights.index_select(0, sel)[:, j:j + 1].float()
            acc.index_copy_(0, sel, acc.index_select(0, sel) + w * row)
    return acc.bfloat16()


class Moe(_Closable):
    """A mega-MoE context on one CUDA device (hr_moe).

    Moe(experts, hidden, inter, topk, max_tokens, device=None, lib=None)

    device: CUDA device index; None: torch.cuda.current_device(). Raises
    NoGPU without a CUDA driver or device, Unsupported on a GPU that is not
    compute capability 9.0, InvalidArgument for a shape the kernel does not
    take (hidden a multiple of 256, inter of 128, 1 <= experts <= 512,
    1 <= topk <= 32). lib: an explicit path to libheadroom_moe.so."""

    def __init__(self, experts: int, hidden: int, inter: int, topk: int,
                 max_tokens: int, device: Optional[int] = None, lib=None):
        self._ptr = None
        self._keep = None
        self._lib = _lib.load_moe_library(lib)
        if device is None:
            device = _torch().cuda.current_device()
        self.device = int(device)
        self.shape = MoeShape(int(experts), int(hidden), int(inter), int(topk),
                              int(max_tokens))
        s = _lib.MoeShape_t(*(getattr(self.shape, f) for f in
                              ("experts", "hidden", "inter", "topk",
                               "max_tokens")))
        out = ctypes.c_void_p()
        rc = _in_context(self._lib.hr_moe_create, ctypes.byref(out),
                         self.device, ctypes.byref(s))
        check(rc, "hr_moe_create(device %d)" % self.device)
        self._ptr = out.value

    # ---- life cycle -------------------------------------------------------

    def close(self) -> None:
        """Wait for the last launch and free the context. Idempotent."""
        ptr, self._ptr = self._ptr, None
        if ptr is not None:
            _in_context(self._lib.hr_moe_destroy, ptr)
        self._keep = None

    _closed_message = "the Moe context is closed"

    # ---- queries ----------------------------------------------------------

    @property
    def sms(self) -> int:
        """SM count of the context's device: the full grid."""
        return check(self._lib.hr_moe_sms(self._handle()), "hr_moe_sms")

    @property
    def workspace_bytes(self) -> int:
        return int(self._lib.hr_moe_workspace_bytes(self._handle()))

    # ---- launches ---------------------------------------------------------

    def _fill_inputs(self, a, T, x, ids, weights, w1, w2, timeout_ms):
        """The forward's inputs into an hr_moe_args (a), checked before."""
        s = self.shape
        a.tokens = T
        a.experts, a.hidden, a.inter, a.topk = (s.experts, s.hidden, s.inter,
                                                s.topk)
        a.x = x.data_ptr()
        a.topk_ids = ids.data_ptr()
        a.topk_weights = weights.data_ptr()
        a.w1 = w1.data_ptr()
        a.w2 = w2.data_ptr()
        a.timeout_ms = int(timeout_ms)

    def _args(self, x, ids, weights, w1, w2, y, timeout_ms, gate_up):
        T = check_moe_tensors(self.shape, self.device, x, ids, weights, w1,
                              w2, y, gate_up)
        if timeout_ms < 0:
            raise ValueError("timeout_ms must be >= 0 (0: the default, %d ms)"
                             % _lib.HR_MOE_DEFAULT_TIMEOUT_MS)
        a = _lib.MoeArgs_t()
        self._fill_inputs(a, T, x, ids, weights, w1, w2, timeout_ms)
        a.y = y.data_ptr()
        a.gate_up = None if gate_up is None else gate_up.data_ptr()
        return a

    def _stream(self, stream):
        return _cuda_stream(self.device, stream)

    def forward(self, lease: Lease, x, ids, weights, w1, w2, y,
                timeout_ms: int = 0, stream=None, gate_up=None,
                _keep: bool = True) -> None:
        """Launch the forward with the grid `lease` holds now, in its mode
        and cluster size (hr_moe_forward), on `stream` (default: torch's
        current stream on the device). Returns once launched; sync() waits.
        timeout_ms: each barrier waits at most this long (0: 10 s).
        gate_up: None, or [T k, 2I] fp32 that the forward fills with GEMM1's
        gate and up sums for a backward given the same tensor (8 k I bytes
        a token; the backward then does not recompute GEMM1).
        The lease and the tensors are kept alive until the next sync()."""
        if not isinstance(lease, Lease):
            raise TypeError("lease must be a headroom.Lease")
        a = self._args(x, ids, weights, w1, w2, y, timeout_ms, gate_up)
        st = self._stream(stream)
        rc = _in_context(self._lib.hr_moe_forward, self._handle(),
                         lease._handle(), ctypes.byref(a), st)
        check(rc, "hr_moe_forward")
        # headroom.nn passes _keep=False: its tensors live in torch's
        # stream-ordered allocator, which already keeps their memory from
        # reuse by later work until the launch is done.
        if _keep:
            self._keep = (lease, x, ids, weights, w1, w2, y, gate_up)

    def forward_grid(self, grid: int, x, ids, weights, w1, w2, y,
                     mode=Mode.HEADROOM, cluster: int = 1,
                     timeout_ms: int = 0, stream=None,
                     gate_up=None) -> None:
        """The same launch without a lease (hr_moe_forward_grid), for
        benchmarks and tests: `grid` CTAs (1..sms in headroom mode, a
        multiple of `cluster`), `cluster` 1 or 2. A barrier timeout is not
        reported to any daemon."""
        a = self._args(x, ids, weights, w1, w2, y, timeout_ms, gate_up)
        m = Mode.of(mode)
        st = self._stream(stream)
        rc = _in_context(self._lib.hr_moe_forward_grid, self._handle(),
                         int(grid), int(m), int(cluster), ctypes.byref(a),
                         st)
        check(rc, "hr_moe_forward_grid(grid %d, %s, cluster %d)"
              % (grid, m.name.lower(), cluster))
        self._keep = (x, ids, weights, w1, w2, y, gate_up)

    def _grad_args(self, x, ids, weights, w1, w2, dy, dx, dw1, dw2, dweights,
                   timeout_ms, gate_up):
        T, dw_dtype = check_moe_grad_tensors(self.shape, self.device, x, ids,
                                             weights, w1, w2, dy, dx, dw1,
                                             dw2, dweights, gate_up)
        if timeout_ms < 0:
            raise ValueError("timeout_ms must be >= 0 (0: the default, %d ms)"
                             % _lib.HR_MOE_DEFAULT_TIMEOUT_MS)
        g = _lib.MoeGradArgs_t()
        self._fill_inputs(g.fwd, T, x, ids, weights, w1, w2, timeout_ms)
        g.fwd.y = None                     # not read by the backward
        g.fwd.gate_up = None if gate_up is None else gate_up.data_ptr()
        g.dy = dy.data_ptr()
        g.dx = dx.data_ptr()
        g.dw1 = dw1.data_ptr()
        g.dw2 = dw2.data_ptr()
        g.dtopk_weights = dweights.data_ptr()
        g.dw_dtype = dw_dtype
        return g

    def backward_prepare(self) -> None:
        """Allocate the backward's workspace now (hr_moe_backward_prepare;
        idempotent). The first backward would do it, but not while a
        stream is being captured into a CUDA graph: call this first.
        Raises OutOfMemory."""
        rc = _in_context(self._lib.hr_moe_backward_prepare, self._handle())
        check(rc, "hr_moe_backward_prepare")

    def backward(self, lease: Lease, x, ids, weights, w1, w2, dy, dx, dw1,
                 dw2, dweights, timeout_ms: int = 0, stream=None,
                 gate_up=None, _keep: bool = True) -> None:
        """Launch the backward of the forward of (x, ids, weights, w1, w2)
        for the gradient dy at y, with the grid and mode `lease` holds now
        (hr_moe_backward), on `stream` (default: torch's current stream).
        Writes dx [T,H] bf16, dw1 [E,2I,H] and dw2 [E,H,I] (both fp32 or
        both bf16: the dtype of the tensors given decides) and dweights
        [T,k] fp32, each in full; a pair whose id is outside [0, E) gets
        dweights 0, an expert without pairs dW 0. gate_up: None (the
        kernel recomputes GEMM1), or the tensor a forward of the same x,
        ids and w1 filled (it reads g and u there; the same results).
        Returns once launched; sync() waits, and raises BarrierTimeout as
        after a forward."""
        if not isinstance(lease, Lease):
            raise TypeError("lease must be a headroom.Lease")
        g = self._grad_args(x, ids, weights, w1, w2, dy, dx, dw1, dw2,
                            dweights, timeout_ms, gate_up)
        st = self._stream(stream)
        rc = _in_context(self._lib.hr_moe_backward, self._handle(),
                         lease._handle(), ctypes.byref(g), st)
        check(rc, "hr_moe_backward")
        if _keep:
            self._keep = (lease, x, ids, weights, w1, w2, dy, dx, dw1, dw2,
                          dweights, gate_up)

    def backward_grid(self, grid: int, mode, x, ids, weights, w1, w2, dy, dx,
                      dw1, dw2, dweights, timeout_ms: int = 0,
                      stream=None, gate_up=None) -> None:
        """The same launch without a lease (hr_moe_backward_grid): `grid`
        CTAs (1..sms), `mode` Mode.HEADROOM or COOPERATIVE (the barrier
        kernel) or AGNOSTIC. The results are bitwise the same for every
        grid and mode. A barrier timeout is not reported to any daemon."""
        g = self._grad_args(x, ids, weights, w1, w2, dy, dx, dw1, dw2,
                            dweights, timeout_ms, gate_up)
        m = Mode.of(mode)
        st = self._stream(stream)
        rc = _in_context(self._lib.hr_moe_backward_grid, self._handle(),
                         int(grid), int(m), ctypes.byref(g), st)
        check(rc, "hr_moe_backward_grid(grid %d, %s)"
              % (grid, m.name.lower()))
        self._keep = (x, ids, weights, w1, w2, dy, dx, dw1, dw2, dweights,
                      gate_up)

    def poll(self) -> bool:
        """Look once at the last launch, without waiting
        (hr_moe_sync_timeout(m, 0)): True when it has ended (or nothing
        was launched), False while it is still queued or running. Raises
        what sync() raises when it failed. Costs an event query and a read
        of host memory, no synchronisation: headroom.nn calls it before
        every launch, so a failure surfaces at the next launch on the
        same context instead of costing a sync per launch."""
        ptr = self._handle()
        rc = _in_context(self._lib.hr_moe_sync_timeout, ptr, 0)
        if rc == _lib.HR_ETIMEDOUT:
            return False
        self._keep = None
        if rc == _lib.HR_EBARRIER_TIMEOUT:
            raise BarrierTimeout(rc, "hr_moe_sync_timeout",
                                 self.last_failure())
        if rc == _lib.HR_EABORTED:
            f = self.last_failure()
            if f is not None and f.barrier < 0:
                # The kernel's record of a launch that found an earlier
                # failure (not waited for) and refused to run.
                raise Aborted(rc, "hr_moe_sync_timeout: the last launch "
                              "refused to run because an earlier launch on "
                              "this context failed before anyone waited for "
                              "it; its outputs were not written")
        check(rc, "hr_moe_sync_timeout")
        return True

    def sync(self, timeout_ms: Optional[int] = None) -> None:
        """Wait for the last launch (hr_moe_sync). Raises BarrierTimeout
        (with .failure) when a grid barrier timed out; the kernel has left
        and the next launch works. A timeout under a lease was already
        reported to the daemon, which raises the GPU's headroom.

        timeout_ms: bound the wait on the host (hr_moe_sync_timeout; 0:
        look once). Raises TimedOut when the launch has neither ended nor
        failed by then, as when it is queued behind a kernel that never
        ends: it is still in flight, its tensors stay referenced here, and
        sync() may be called again, or abort() and then sync()."""
        ptr = self._handle()
        if timeout_ms is not None and int(timeout_ms) < 0:
            raise ValueError("timeout_ms must be >= 0 (None: no bound)")
        name = "hr_moe_sync" if timeout_ms is None else "hr_moe_sync_timeout"
        ctx = _context()
        before = ctx.get()
        rc = _lib.HR_ETIMEDOUT
        try:
            if timeout_ms is None:
                rc = self._lib.hr_moe_sync(ptr)
            else:
                rc = self._lib.hr_moe_sync_timeout(ptr, int(timeout_ms))
        finally:
            ctx.restore(before)
            # Still in flight after a bounded wait: the kernel may yet
            # read and write these, so they stay alive.
            if rc != _lib.HR_ETIMEDOUT:
                self._keep = None
        if rc == _lib.HR_EBARRIER_TIMEOUT:
            raise BarrierTimeout(rc, name, self.last_failure())
        check(rc, name)

    def last_failure(self) -> Optional[MoeFailure]:
        """What the last failed launch recorded; None if none has failed."""
        f = _lib.MoeFailure_t()
        rc = self._lib.hr_moe_last_failure(self._handle(), ctypes.byref(f))
        if rc == _lib.HR_ENOTFOUND:
            return None
        check(rc, "hr_moe_last_failure")
        return MoeFailure._from_c(f)

    def abort(self) -> None:
        """Ask the launch in flight to stop (sync() then raises Aborted).
        Safe from another thread."""
        check(self._lib.hr_moe_abort(self._handle()), "hr_moe_abort")

    def __repr__(self):
        return "<headroom.Moe cuda:%d E=%d H=%d I=%d k=%d max_tokens=%d%s>" % (
            self.device, self.shape.experts, self.shape.hidden,
            self.shape.inter, self.shape.topk, self.shape.max_tokens,
            "" if self._ptr else " (closed)")
