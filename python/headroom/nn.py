"""headroom.nn: the mega-MoE as a PyTorch op and an nn.Module.

    import headroom.nn

    moe = headroom.nn.MegaMoE(experts=8, hidden=1024, inter=512, topk=2,
                              max_tokens=8192, device="cuda:0")
    y = moe(x, topk_ids, topk_weights)        # x [..., H]; ids, weights [..., k]
    y.float().square().mean().backward()      # grads of x, w1, w2, weights
    headroom.nn.check()                       # optional: wait, raise failures

Two ops are registered with torch.library, so autograd, torch.compile
(fullgraph=True: they have fake implementations) and CUDA graphs see them
as one node each:

    headroom::moe_forward(x, topk_ids, topk_weights, w1, w2, key) -> y
    headroom::moe_backward(dy, x, topk_ids, topk_weights, w1, w2, key)
        -> (dx, dw1, dw2, dtopk_weights)

with the layouts of kernels/headroom_moe.h (x [T,H] bf16, ids [T,k]
int32, weights [T,k] fp32, w1 [E,2I,H] bf16, w2 [E,H,I] bf16). `key` is
an int that MegaMoE registers: which shape, lease and barrier timeout
its launches use (a tensor cannot carry those). The forward saves only its
inputs for the backward, which recomputes the rest in the kernel.

On CUDA tensors each op launches asynchronously on torch's current stream,
with the grid the lease holds at that moment (one lock-free read in the
C library: a budget change applies at the next launch). Nothing waits on
the host: before each launch the op looks once at the context's previous
launch (Moe.poll: an event query) and raises what it left, BarrierTimeout
for a barrier that timed out; check() (or MegaMoE.check()) waits for
every launch and raises. A timeout under a lease is reported to headroomd
by the C library itself. On CPU tensors the ops compute the same math in
plain torch (fp32, no bf16 roundings), for tests and CPU-only runs.

hr_moe contexts are large (their workspace is sized for max_tokens), so
modules of the same (device, shape, max_tokens) share one, process-wide;
the C library runs the launches of a context one after another, and the
backward recomputes everything it needs, so sharing changes no result.

Importing this module imports torch; `import headroom` alone does not.
"""
import math
import os
import threading
import weakref
from typing import Dict, Optional

import torch

from . import _lib
from .client import Client, Lease
from .moe import Moe, MoeShape

__all__ = ["MegaMoE", "check", "reference_moe", "default_lease",
           "context_count"]

_lock = threading.Lock()


# ---- contexts, shared --------------------------------------------------


class _Shared:
    """One hr_moe context and the lock that keeps two threads (the
    forward's and autograd's) from launching on it at once: an hr_moe is
    used by one thread at a time. Never copied: a deepcopy of a module
    shares its context."""

    def __init__(self, moe: Moe):
        self.moe = moe
        self.lock = threading.Lock()
        self.prepared = False

    def prepare_backward(self) -> None:
        if not self.prepared:
            with self.lock:
                self.moe.backward_prepare()
                self.prepared = True

    def __deepcopy__(self, memo):
        return self

    def __copy__(self):
        return self

    def __reduce__(self):
        # A pickled module (torch.save of the whole module) takes its
        # context again where it is loaded: the handle means nothing there.
        return (_no_context, ())


def _no_context():
    return None


# (device index, MoeShape) -> _Shared, held by the modules that use it:
# the context is freed with the last of them.
_contexts = weakref.WeakValueDictionary()


def _capturing() -> bool:
    # Where CUDA was never initialised nothing can be capturing (and
    # asking would initialise it, or fail without a driver).
    return (torch.cuda.is_initialized() and
            torch.cuda.is_current_stream_capturing())


def _shared_context(device: int, shape: MoeShape, backward: bool) -> _Shared:
    """The process's context for (device, shape), created on first use;
    its backward workspace allocated too when `backward`."""
    with _lock:
        sh = _contexts.get((device, shape))
        if sh is None:
            if _capturing():
                raise RuntimeError(
                    "headroom.nn: no hr_moe context for cuda:%d yet, and "
                    "none can be created while a CUDA graph is being "
                    "captured: create the MegaMoE on its device (or run it "
                    "once) before capturing" % device)
            sh = _Shared(Moe(shape.experts, shape.hidden, shape.inter,
                             shape.topk, shape.max_tokens, device=device))
            _contexts[(device, shape)] = sh
    if backward and not sh.prepared:
        if _capturing():
            raise RuntimeError(
                "headroom.nn: the backward's workspace on cuda:%d was not "
                "allocated before the CUDA graph capture (create the "
                "MegaMoE with requires_grad parameters, or call "
                "prepare() first)" % device)
        sh.prepare_backward()
    return sh


def context_count() -> int:
    """How many hr_moe contexts headroom.nn holds now (for tests)."""
    return len(_contexts)


# ---- the default lease ---------------------------------------------------

_client: Optional[Client] = None
_client_pid = None
_leases: Dict[int, Lease] = {}


def default_lease(device: int) -> Lease:
    """The process's lease on GPU `device`, for modules made without one:
    one headroom.Client (name "headroom.nn", $HEADROOM_SOCKET or the
    default socket) and one lease per GPU (cluster 2, headroom mode),
    opened on first use. Without a daemon the lease is degraded and holds
    the client library's fail-safe budget, never the full grid."""
    global _client, _client_pid
    with _lock:
        if _client is None or _client_pid != os.getpid() or _client.closed:
            _client = Client(name="headroom.nn")
            _client_pid = os.getpid()
            _leases.clear()
        lease = _leases.get(device)
        if lease is None or lease.released:
            lease = _client.lease(device, cluster=2)
            _leases[device] = lease
        return lease


# ---- what a key stands for -------------------------------------------------


class _Config:
    """What one MegaMoE's launches use that no tensor carries: the shape,
    the lease (None: default_lease of the tensors' GPU), the barrier
    timeout; and what its last launch used. Small, and kept for the life
    of the process, so a key in a compiled graph never dangles."""

    def __init__(self, shape: MoeShape, lease: Optional[Lease],
                 timeout_ms: int):
        self.shape = shape
        self.lease = lease
        self.timeout_ms = timeout_ms
        self.last_grid = None
        self.last_mode = None
        self.key = None

    # A deepcopy of a module keeps its key (and lease); a pickled one gets
    # a new key where it is loaded, and the default lease.
    def __deepcopy__(self, memo):
        return self

    def __copy__(self):
        return self

    def __reduce__(self):
        return (_Config, (self.shape, None, self.timeout_ms))

    def lease_for(self, device: int) -> Lease:
        return self.lease if self.lease is not None else default_lease(device)


_configs: Dict[int, _Config] = {}


def _register(cfg: _Config) -> int:
    with _lock:
        key = len(_configs) + 1
        _configs[key] = cfg
        cfg.key = key
        return key


def _config(key: int) -> _Config:
    try:
        return _configs[key]
    except KeyError:
        raise ValueError("headroom.nn: unknown key %d (not made by a MegaMoE "
                         "of this process)" % key) from None


def _launch(key: int, device: int, backward: bool, launch) -> None:
    """Poll the context's last launch (raising what it left), read the
    lease's launch config for last_grid, and call launch(moe, lease,
    timeout_ms) under the context's lock."""
    cfg = _config(key)
    sh = _shared_context(device, cfg.shape, backward)
    lease = cfg.lease_for(device)
    capturing = _capturing()
    with sh.lock:
        # No event query inside a capture (it would end it); a graph's
        # replays are checked by check().
        if not capturing:
            sh.moe.poll()
        grid, _, mode = lease.launch_config()
        launch(sh.moe, lease, cfg.timeout_ms)
        cfg.last_grid, cfg.last_mode = grid, mode


# ---- the math in plain torch -------------------------------------------------


def reference_moe(x, topk_ids, topk_weights, w1, w2):
    """y[t] = sum over j of w[t,j] W2[e] (silu(W1g[e] x[t]) * W1u[e] x[t]),
    e = ids[t,j], in plain torch and differentiable (autograd gives the
    gradients of x, w1, w2 and the weights). Pairs with an id outside
    [0, E) contribute nothing. Computed in the inputs' dtype, summed over
    the slots in fp32 at least, returned in x's dtype. A loop over the
    experts with a host sync each (nonzero): for tests and small models.
    x [T, H], ids and weights [T, k], w1 [E, 2I, H], w2 [E, H, I]."""
    T, H = x.shape
    E, I2, _ = w1.shape
    I = I2 // 2
    acc_dtype = torch.promote_types(x.dtype, torch.float32)
    y = torch.zeros(T, H, dtype=acc_dtype, device=x.device)
    ids = topk_ids.long()
    for e in range(E):
        tok, slot = (ids == e).nonzero(as_tuple=True)
        if tok.numel() == 0:
            continue
        xs = x.index_select(0, tok)
        g = xs @ w1[e, :I].t()
        u = xs @ w1[e, I:].t()
        o = (torch.nn.functional.silu(g) * u) @ w2[e].t()
        w = topk_weights[tok, slot].to(acc_dtype).unsqueeze(1)
        y = y.index_add(0, tok, o.to(acc_dtype) * w)
    return y.to(x.dtype)


def _reference_backward(dy, x, ids, weights, w1, w2):
    """The backward of reference_moe written out, as the kernel computes
    it (kernels/moe_ref.h: d(w) = <W2^T dy, a>, the SwiGLU's derivative
    by hand) but in fp32 with nothing rounded: the ops' CPU path (autograd
    cannot run inside an op). Returns (dx, dw1, dw2, dweights) in the
    dtypes of x, w1, w2 and weights."""
    f = torch.float32
    T, H = x.shape
    E, I2, _ = w1.shape
    I = I2 // 2
    xf, dyf, w1f, w2f = x.to(f), dy.to(f), w1.to(f), w2.to(f)
    dx = torch.zeros(T, H, dtype=f, device=x.device)
    dw1 = torch.zeros(E, I2, H, dtype=f, device=x.device)
    dw2 = torch.zeros(E, H, I, dtype=f, device=x.device)
    dwt = torch.zeros(ids.shape, dtype=f, device=x.device)
    idl = ids.long()
    for e in range(E):
        tok, slot = (idl == e).nonzero(as_tuple=True)
        if tok.numel() == 0:
            continue
        xs, dys = xf.index_select(0, tok), dyf.index_select(0, tok)
        w = weights[tok, slot].to(f).unsqueeze(1)
        g = xs @ w1f[e, :I].t()
        u = xs @ w1f[e, I:].t()
        s = torch.sigmoid(g)
        silu = g * s
        a = silu * u
        q = dys @ w2f[e]                      # [n, I]: W2^T dy
        dwt[tok, slot] = (q * a).sum(1)
        da = w * q
        du = da * silu
        dg = da * u * s * (1 + g * (1 - s))
        dw2[e] = dys.t() @ (w * a)
        dw1[e, :I] = dg.t() @ xs
        dw1[e, I:] = du.t() @ xs
        dx.index_add_(0, tok, dg @ w1f[e, :I] + du @ w1f[e, I:])
    return (dx.to(x.dtype), dw1.to(w1.dtype), dw2.to(w2.dtype),
            dwt.to(weights.dtype))


# ---- the ops -------------------------------------------------------------------


@torch.library.custom_op("headroom::moe_forward", mutates_args=())
def moe_forward(x: torch.Tensor, topk_ids: torch.Tensor,
                topk_weights: torch.Tensor, w1: torch.Tensor,
                w2: torch.Tensor, key: int) -> torch.Tensor:
    """The forward: y [T, H]. See the module's docstring."""
    if x.device.type != "cuda":
        f = torch.float32
        return reference_moe(x.to(f), topk_ids, topk_weights.to(f),
                             w1.to(f), w2.to(f)).to(x.dtype)
    y = torch.empty_like(x)
    _launch(key, x.device.index, False,
            lambda m, lease, t: m.forward(lease, x, topk_ids, topk_weights,
                                          w1, w2, y, timeout_ms=t,
                                          _keep=False))
    return y


@moe_forward.register_fake
def _moe_forward_fake(x, topk_ids, topk_weights, w1, w2, key):
    return torch.empty_like(x)


@torch.library.custom_op("headroom::moe_backward", mutates_args=())
def moe_backward(dy: torch.Tensor, x: torch.Tensor, topk_ids: torch.Tensor,
                 topk_weights: torch.Tensor, w1: torch.Tensor,
                 w2: torch.Tensor, key: int
                 ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor,
                            torch.Tensor]:
    """The backward: (dx, dw1, dw2, dtopk_weights), dw1 and dw2 in the
    dtype of w1 and w2 (bf16: the kernel rounds its fp32 sums once)."""
    if x.device.type != "cuda":
        return _reference_backward(dy, x, topk_ids, topk_weights, w1, w2)
    dx = torch.empty_like(x)
    dw1 = torch.empty_like(w1)
    dw2 = torch.empty_like(w2)
    dwt = torch.empty_like(topk_weights)
    _launch(key, x.device.index, True,
            lambda m, lease, t: m.backward(lease, x, topk_ids, topk_weights,
                                           w1, w2, dy, dx, dw1, dw2, dwt,
                                           timeout_ms=t, _keep=False))
    return dx, dw1, dw2, dwt


@moe_backward.register_fake
def _moe_backward_fake(dy, x, topk_ids, topk_weights, w1, w2, key):
    return (torch.empty_like(x), torch.empty_like(w1), torch.empty_like(w2),
            torch.empty_like(topk_weights))


def _setup_context(ctx, inputs, output):
    x, ids, weights, w1, w2, key = inputs
    ctx.save_for_backward(x, ids, weights, w1, w2)
    ctx.key = key


def _backward(ctx, dy):
    x, ids, weights, w1, w2 = ctx.saved_tensors
    dx, dw1, dw2, dwt = moe_backward(dy.contiguous(), x, ids, weights, w1,
                                     w2, ctx.key)
    return dx, None, dwt, dw1, dw2, None


moe_forward.register_autograd(_backward, setup_context=_setup_context)


# ---- waiting ---------------------------------------------------------------------


def check() -> None:
    """Wait for the last launch on every context headroom.nn holds and
    raise what it left: BarrierTimeout (with .failure) when a grid barrier
    timed out (already reported to headroomd under a lease), Aborted,
    CudaError. Not while a CUDA graph is being captured. Call it before
    capturing a graph too: then no launch is in flight outside it."""
    if _capturing():
        raise RuntimeError("headroom.nn.check() waits on the host: not while "
                           "a CUDA graph is being captured")
    for sh in list(_contexts.values()):
        with sh.lock:
            sh.moe.sync()


# ---- the module --------------------------------------------------------------------


def _positive_int(v, what, lo=1, hi=None):
    if isinstance(v, bool) or not isinstance(v, int):
        raise TypeError("%s must be an int, not %s" % (what, type(v).__name__))
    if v < lo or (hi is not None and v > hi):
        raise ValueError("%s must be %s, got %d" % (
            what, ">= %d" % lo if hi is None else "%d..%d" % (lo, hi), v))
    return v


class MegaMoE(torch.nn.Module):
    """A mixture-of-experts layer on the mega-MoE kernel: the experts'
    SwiGLU MLPs, routed by ids and weights the caller computes.

    MegaMoE(experts, hidden, inter, topk, max_tokens, device=None,
            lease=None, dtype=torch.bfloat16, timeout_ms=0,
            reference=False)

    Parameters, in the layouts the kernel takes: w1 [E, 2I, H] (rows
    0..I-1 the gate, I..2I-1 up) and w2 [E, H, I], initialised as
    nn.Linear initialises its weight, uniform in +-1/sqrt(fan_in) (fan_in
    H for w1, I for w2). dtype bf16, or fp32 for master weights (each
    forward then casts them to bf16, and their gradients come back fp32
    through that cast). hidden a multiple of 256, inter of 128, experts
    1..512, topk 1..32, max_tokens the most tokens one call may carry.

    device: where the parameters are made (None: torch's default device).
    On a CUDA device the hr_moe context is taken (shared with every
    MegaMoE of the same device and shape) and, when the parameters
    require grad, its backward workspace allocated, so that neither
    happens inside a CUDA graph capture; .to()/.cuda() do the same.
    lease: the headroom.Lease whose grid every launch takes; None: the
    process's lease on the parameters' GPU (default_lease: works with no
    daemon, on the fail-safe budget). timeout_ms: each barrier waits at
    most this long (0: the library's default, 10 s).
    reference: compute with reference_moe in plain torch instead (any
    device; the same parameters), for comparisons.

    forward(x, topk_ids, topk_weights) -> y: x [..., H] (the leading dims
    are flattened into tokens, and restored on y; cast to bf16), topk_ids
    [..., k] of any integer dtype (ids outside [0, E) contribute nothing),
    topk_weights [..., k] floating (used in fp32, as given: no
    normalisation). y has x's leading dims and dtype bf16. Shapes, dtypes
    and devices are checked first, ValueError naming the argument.
    """

    def __init__(self, experts: int, hidden: int, inter: int, topk: int,
                 max_tokens: int, device=None, lease: Optional[Lease] = None,
                 dtype=torch.bfloat16, timeout_ms: int = 0,
                 reference: bool = False):
        super().__init__()
        _positive_int(experts, "experts", 1, _lib.HR_MOE_MAX_EXPERTS)
        _positive_int(hidden, "hidden")
        _positive_int(inter, "inter")
        _positive_int(topk, "topk", 1, _lib.HR_MOE_MAX_TOPK)
        _positive_int(max_tokens, "max_tokens")
        _positive_int(timeout_ms, "timeout_ms", 0)
        if hidden % 256:
            raise ValueError("hidden must be a multiple of 256 (the kernel's "
                             "tiles), got %d" % hidden)
        if inter % 128:
            raise ValueError("inter must be a multiple of 128 (the kernel's "
                             "tiles), got %d" % inter)
        if dtype not in (torch.bfloat16, torch.float32):
            raise ValueError("dtype must be torch.bfloat16 or torch.float32, "
                             "got %s" % (dtype,))
        if lease is not None and not isinstance(lease, Lease):
            raise TypeError("lease must be a headroom.Lease or None, not %s"
                            % type(lease).__name__)
        self.shape = MoeShape(experts, hidden, inter, topk, max_tokens)
        self.reference = bool(reference)
        self._cfg = _Config(self.shape, lease, timeout_ms)
        self._key = _register(self._cfg)
        self._shared = {}
        E, H, I = experts, hidden, inter
        self.w1 = torch.nn.Parameter(torch.empty(E, 2 * I, H, device=device,
                                                 dtype=dtype))
        self.w2 = torch.nn.Parameter(torch.empty(E, H, I, device=device,
                                                 dtype=dtype))
        self.reset_parameters()
        self.prepare()

    def reset_parameters(self) -> None:
        """Uniform in +-1/sqrt(fan_in), as nn.Linear's weight."""
        if self.w1.device.type == "meta":
            return
        with torch.no_grad():
            b1 = 1.0 / math.sqrt(self.shape.hidden)
            b2 = 1.0 / math.sqrt(self.shape.inter)
            self.w1.uniform_(-b1, b1)
            self.w2.uniform_(-b2, b2)

    # ---- contexts ---------------------------------------------------------

    def prepare(self) -> None:
        """Take the hr_moe context (and the default lease) for the GPU the
        parameters are on, and allocate the backward's workspace when they
        require grad. Done by __init__, .to() and .cuda(); call it after
        moving the parameters any other way, before a CUDA graph capture.
        Nothing for parameters off the GPU or with reference=True."""
        dev = self.w1.device
        if self.reference or dev.type != "cuda":
            return
        index = dev.index if dev.index is not None else \
            torch.cuda.current_device()
        self._shared[index] = _shared_context(index, self.shape,
                                              self.w1.requires_grad)
        self._cfg.lease_for(index)

    def _apply(self, *args, **kwargs):
        out = super()._apply(*args, **kwargs)
        self.prepare()
        return out

    def check(self) -> None:
        """Wait for the last launch on this module's contexts and raise what
        it left (see headroom.nn.check)."""
        if _capturing():
            raise RuntimeError("MegaMoE.check() waits on the host: not while "
                               "a CUDA graph is being captured")
        for sh in list(self._shared.values()):
            with sh.lock:
                sh.moe.sync()

    @property
    def lease(self) -> Optional[Lease]:
        """The lease given to the constructor (None: default_lease)."""
        return self._cfg.lease

    @property
    def timeout_ms(self) -> int:
        return self._cfg.timeout_ms

    @property
    def last_grid(self) -> Optional[int]:
        """The grid the lease held at this module's last launch (forward or
        backward; None before the first): what the launch used, read in
        the same lock-free way just before it."""
        return self._cfg.last_grid

    @property
    def key(self) -> int:
        """The int the ops take to find this module's shape and lease."""
        return self._key

    # ---- forward -----------------------------------------------------------

    def forward(self, x, topk_ids, topk_weights):
        H, k = self.shape.hidden, self.shape.topk
        for name, t in (("x", x), ("topk_ids", topk_ids),
                        ("topk_weights", topk_weights)):
            if not isinstance(t, torch.Tensor):
                raise TypeError("%s must be a torch.Tensor, not %s"
                                % (name, type(t).__name__))
        if x.dim() < 1 or x.shape[-1] != H:
            raise ValueError("x must be [..., %d] (hidden), got shape %s"
                             % (H, tuple(x.shape)))
        want = tuple(x.shape[:-1]) + (k,)
        if tuple(topk_ids.shape) != want:
            raise ValueError("topk_ids must have shape %s (x's leading dims, "
                             "then topk), got %s"
                             % (want, tuple(topk_ids.shape)))
        if tuple(topk_weights.shape) != want:
            raise ValueError("topk_weights must have shape %s (x's leading "
                             "dims, then topk), got %s"
                             % (want, tuple(topk_weights.shape)))
        if topk_ids.dtype.is_floating_point or topk_ids.dtype.is_complex or \
                topk_ids.dtype == torch.bool:
            raise ValueError("topk_ids must be an integer tensor, got %s"
                             % topk_ids.dtype)
        if not x.dtype.is_floating_point:
            raise ValueError("x must be a floating tensor, got %s" % x.dtype)
        if not topk_weights.dtype.is_floating_point:
            raise ValueError("topk_weights must be a floating tensor, got %s"
                             % topk_weights.dtype)
        dev = self.w1.device
        for name, t in (("x", x), ("topk_ids", topk_ids),
                        ("topk_weights", topk_weights)):
            if t.device != dev:
                raise ValueError("%s is on %s, the parameters on %s"
                                 % (name, t.device, dev))
        lead = x.shape[:-1]
        xs = x.reshape(-1, H)
        T = xs.shape[0]
        if T < 1 or T > self.shape.max_tokens:
            raise ValueError("x has %d tokens, must be 1..%d (max_tokens)"
                             % (T, self.shape.max_tokens))
        xs = xs.to(torch.bfloat16).contiguous()
        ids = topk_ids.reshape(T, k).to(torch.int32).contiguous()
        wts = topk_weights.reshape(T, k).to(torch.float32).contiguous()
        w1 = self.w1.to(torch.bfloat16).contiguous()
        w2 = self.w2.to(torch.bfloat16).contiguous()
        if self.reference:
            y = reference_moe(xs, ids, wts, w1, w2)
        else:
            y = moe_forward(xs, ids, wts, w1, w2, self._key)
        return y.reshape(lead + (H,))

    def extra_repr(self) -> str:
        s = self.shape
        return ("experts=%d, hidden=%d, inter=%d, topk=%d, max_tokens=%d%s"
                % (s.experts, s.hidden, s.inter, s.topk, s.max_tokens,
                   ", reference=True" if self.reference else ""))

    # ---- copies -------------------------------------------------------------

    def __setstate__(self, state):
        super().__setstate__(state)
        if self._cfg.key is None:              # unpickled: a new key here
            self._key = _register(self._cfg)
        self._shared = {d: sh for d, sh in self._shared.items()
                        if sh is not None}
