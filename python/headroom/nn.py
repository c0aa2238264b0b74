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
its launches use (a tensor cannot carry those). moe_forward saves only its
inputs for the backward, which then recomputes GEMM1 in the kernel;
moe_forward_train also keeps GEMM1's sums (gate_up, [T k, 2I] fp32) for
it, a quarter fewer backward FLOPs for 8 k I bytes a token. MegaMoE
calls moe_forward_train when autograd records (keep_gate_up).

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
backward needs nothing of the context's from its forward (the routing it
recomputes, g and u it recomputes or reads from gate_up), so sharing
changes no result.

Expert parallel: MegaMoE(..., ep_group=group) holds only its rank's E/R
experts and takes GLOBAL ids; two more ops carry it, with the same key
mechanism:

    headroom::moe_ep_forward(x, topk_ids, topk_weights, w1, w2, key) -> y
    headroom::moe_ep_backward(dy, x, topk_ids, topk_weights, w1, w2, key)
        -> (dx, dw1, dw2, dtopk_weights)

On CUDA tensors they launch hr_moe_ep_forward / hr_moe_ep_backward (one
epoch each: every rank must run the same sequence of them); on CPU
tensors they compute the same math in plain torch (fp32), exchanging
over the group for real (headroom.ep_reference).

Importing this module imports torch; `import headroom` alone does not.
"""
import math
import os
import threading
import weakref
from typing import Dict, Optional

import torch

from . import _lib
from . import ep_reference
from .client import Client, Lease
from .moe import Moe, MoeShape, _int_arg
from .moe_ep import MoeEP, VirtualGroup

__all__ = ["MegaMoE", "check", "reference_moe", "default_lease",
           "context_count", "ep_context_count"]

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

    def sync(self) -> None:
        self.moe.sync()

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


# ---- expert-parallel contexts ------------------------------------------------


class _SharedEP:
    """One rank's hr_moe_ep context, shared by that rank's modules of one
    group, device and shape (the layers of a model), and the lock that
    keeps two threads from launching on it at once. Created on first use
    (collectively: every rank's modules take theirs in the same order);
    freed only by the last module's close(), on every rank, since peers
    map its memory (never by the garbage collector)."""

    def __init__(self, key):
        self.key = key
        self.moe: Optional[MoeEP] = None
        self.lock = threading.Lock()
        self.create_lock = threading.Lock()
        self.users = set()

    def sync(self) -> None:
        if self.moe is not None:
            self.moe.sync()

    def __deepcopy__(self, memo):
        return self

    def __copy__(self):
        return self

    def __reduce__(self):
        return (_no_context, ())


# (id(group), rank, device, MoeShape, backward) -> _SharedEP. Strong
# references: a context lives until its modules are closed.
_ep_contexts: Dict[tuple, _SharedEP] = {}


def _ep_backward_in_library() -> bool:
    return _lib.has_symbol(_lib.load_moe_library(), "hr_moe_ep_backward")


def _ep_context(cfg, device: int, backward: bool) -> _SharedEP:
    """This rank's context for cfg's group on `device`, created on first
    use (a collective: not under the module lock, which a peer thread of
    a VirtualGroup needs for its own). backward: sized for the EP
    backward too (where the library has it)."""
    backward = bool(backward) and _ep_backward_in_library()
    group = cfg.group
    key = (id(group), cfg.rank, device, cfg.shape, backward)
    with _lock:
        sh = _ep_contexts.get(key)
        if sh is None:
            sh = _ep_contexts[key] = _SharedEP(key)
    with sh.create_lock:
        if sh.moe is None:
            if _capturing():
                raise RuntimeError(
                    "headroom.nn: no hr_moe_ep context for rank %d on cuda:%d "
                    "yet, and none can be created while a CUDA graph is "
                    "being captured (nor can an EP launch be captured)"
                    % (cfg.rank, device))
            sh.moe = MoeEP(cfg.shape, cfg.rank, cfg.nranks, group,
                           device=device, backward=backward)
    return sh


def ep_context_count() -> int:
    """How many hr_moe_ep contexts headroom.nn holds now (for tests)."""
    return sum(1 for sh in _ep_contexts.values() if sh.moe is not None)


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


class _EPConfig(_Config):
    """A _Config for an expert-parallel module: also the group (a torch
    ProcessGroup or a VirtualGroup), this module's rank in it and the
    group's size, and whether its context is sized for the backward.

    The group is held weakly: configs live as long as the process, and a
    ProcessGroup kept past destroy_process_group() can abort the process
    at exit (its threads outlive the interpreter). The module holds it."""

    def __init__(self, shape: MoeShape, lease: Optional[Lease],
                 timeout_ms: int, group, rank: int, nranks: int):
        super().__init__(shape, lease, timeout_ms)
        self._group = weakref.ref(group)
        self.rank = rank
        self.nranks = nranks
        self.virtual = isinstance(group, VirtualGroup)
        self.ep_backward = False

    @property
    def group(self):
        g = self._group()
        if g is None:
            raise RuntimeError("headroom.nn: this MegaMoE's ep_group no "
                               "longer exists: the module cannot run")
        return g

    @property
    def comm(self):
        """The exchange of the ops' CPU path (ep_reference.comm_of)."""
        return ep_reference.comm_of(self.group, self.rank)

    def __reduce__(self):
        raise TypeError("a MegaMoE with an ep_group cannot be pickled whole "
                        "(its group is a live connection): save its "
                        "state_dict() instead")

    def grid_for(self, grid: int, device: int) -> int:
        """A VirtualGroup's ranks on one GPU share its grid: each takes
        grid // (how many of them are on `device`), so all are resident
        at once."""
        if not self.virtual:
            return grid
        return max(1, grid // max(1, self.group.ranks_on(device)))


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


def _launch_ep(key: int, device: int, backward: bool, launch) -> None:
    """The EP op's launch: this rank's context (backward: sized for the
    backward; NotImplementedError where the library has no EP backward),
    a poll of its last launch (raising what it left), the lease's launch
    config, and launch(moe, lease, grid, mode, timeout_ms) under the
    context's lock. A ProcessGroup's rank launches with the lease (lease
    given, grid None); a VirtualGroup's with grid_for() of the lease's grid
    and its mode (lease None). Anything raised before the launch spends
    the epoch, so that every rank stays in step."""
    cfg = _config(key)
    if backward and not _ep_backward_in_library():
        raise NotImplementedError(
            "headroom.nn: the library (%s) has no hr_moe_ep_backward yet: "
            "the EP backward cannot run" % _lib.moe_library_path())
    sh = _ep_context(cfg, device, backward or cfg.ep_backward)
    capturing = _capturing()
    with sh.lock:
        try:
            lease = cfg.lease_for(device)
            # No event query inside a capture; the C library refuses to
            # launch into one (HR_EUNSUPPORTED: each launch is an epoch).
            if not capturing:
                sh.moe.poll()
            grid, _, mode = lease.launch_config()
        except BaseException:
            sh.moe.spend_epoch(backward)
            raise
        if cfg.virtual:
            grid = cfg.grid_for(grid, device)
            launch(sh.moe, None, grid, mode, cfg.timeout_ms)
        else:
            launch(sh.moe, lease, None, mode, cfg.timeout_ms)
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
        dxs, dw1[e], dw2[e], dwt[tok, slot] = ep_reference.expert_backward(
            xs, dys, w, w1f[e], w2f[e])
        dx.index_add_(0, tok, dxs)
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


@torch.library.custom_op("headroom::moe_forward_train", mutates_args=())
def moe_forward_train(x: torch.Tensor, topk_ids: torch.Tensor,
                      topk_weights: torch.Tensor, w1: torch.Tensor,
                      w2: torch.Tensor, key: int
                      ) -> tuple[torch.Tensor, torch.Tensor]:
    """The forward keeping GEMM1 for the backward: (y [T, H], gate_up
    [T k, 2I] fp32, each pair's gate and up sums in the kernel's order).
    Its backward reads gate_up instead of recomputing GEMM1. On CPU
    tensors gate_up is empty and the backward recomputes."""
    if x.device.type != "cuda":
        f = torch.float32
        y = reference_moe(x.to(f), topk_ids, topk_weights.to(f), w1.to(f),
                          w2.to(f)).to(x.dtype)
        return y, x.new_empty((0, w1.shape[1]), dtype=f)
    T, k = topk_ids.shape
    y = torch.empty_like(x)
    gu = torch.empty((T * k, w1.shape[1]), dtype=torch.float32,
                     device=x.device)
    _launch(key, x.device.index, False,
            lambda m, lease, t: m.forward(lease, x, topk_ids, topk_weights,
                                          w1, w2, y, timeout_ms=t,
                                          gate_up=gu, _keep=False))
    return y, gu


@moe_forward_train.register_fake
def _moe_forward_train_fake(x, topk_ids, topk_weights, w1, w2, key):
    rows = topk_ids.shape[0] * topk_ids.shape[1] if x.device.type == "cuda" \
        else 0
    return (torch.empty_like(x),
            x.new_empty((rows, w1.shape[1]), dtype=torch.float32))


@torch.library.custom_op("headroom::moe_backward", mutates_args=())
def moe_backward(dy: torch.Tensor, x: torch.Tensor, topk_ids: torch.Tensor,
                 topk_weights: torch.Tensor, w1: torch.Tensor,
                 w2: torch.Tensor, key: int,
                 gate_up: Optional[torch.Tensor] = None
                 ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor,
                            torch.Tensor]:
    """The backward: (dx, dw1, dw2, dtopk_weights), dw1 and dw2 in the
    dtype of w1 and w2 (bf16: the kernel rounds its fp32 sums once).
    gate_up: moe_forward_train's (read, not recomputed), or None or empty
    (GEMM1 recomputed); the results are the same."""
    if x.device.type != "cuda":
        return _reference_backward(dy, x, topk_ids, topk_weights, w1, w2)
    if gate_up is not None and gate_up.numel() == 0:
        gate_up = None
    dx = torch.empty_like(x)
    dw1 = torch.empty_like(w1)
    dw2 = torch.empty_like(w2)
    dwt = torch.empty_like(topk_weights)
    _launch(key, x.device.index, True,
            lambda m, lease, t: m.backward(lease, x, topk_ids, topk_weights,
                                           w1, w2, dy, dx, dw1, dw2, dwt,
                                           timeout_ms=t, gate_up=gate_up,
                                           _keep=False))
    return dx, dw1, dw2, dwt


@moe_backward.register_fake
def _moe_backward_fake(dy, x, topk_ids, topk_weights, w1, w2, key,
                       gate_up=None):
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


def _setup_context_train(ctx, inputs, output):
    x, ids, weights, w1, w2, key = inputs
    ctx.mark_non_differentiable(output[1])
    ctx.save_for_backward(x, ids, weights, w1, w2, output[1])
    ctx.key = key


def _backward_train(ctx, dy, _dgate_up):
    x, ids, weights, w1, w2, gate_up = ctx.saved_tensors
    dx, dw1, dw2, dwt = moe_backward(dy.contiguous(), x, ids, weights, w1,
                                     w2, ctx.key, gate_up)
    return dx, None, dwt, dw1, dw2, None


moe_forward_train.register_autograd(_backward_train,
                                    setup_context=_setup_context_train)


@torch.library.custom_op("headroom::moe_ep_forward", mutates_args=())
def moe_ep_forward(x: torch.Tensor, topk_ids: torch.Tensor,
                   topk_weights: torch.Tensor, w1: torch.Tensor,
                   w2: torch.Tensor, key: int) -> torch.Tensor:
    """This rank's EP forward: y [T, H] of its T tokens (T may be 0), ids
    GLOBAL, w1 [E/R, 2I, H] and w2 [E/R, H, I] its experts."""
    if x.device.type != "cuda":
        f = torch.float32
        y = ep_reference.ep_moe(x.to(f), topk_ids, topk_weights.to(f),
                                w1.to(f), w2.to(f), _config(key).comm)
        return y.to(x.dtype)
    y = torch.empty_like(x)

    def launch(m, lease, grid, mode, t):
        if lease is not None:
            m.forward(lease, x, topk_ids, topk_weights, w1, w2, y,
                      timeout_ms=t, _keep=False)
        else:
            m.forward_grid(grid, x, topk_ids, topk_weights, w1, w2, y,
                           mode=mode, timeout_ms=t)
    _launch_ep(key, x.device.index, False, launch)
    return y


@moe_ep_forward.register_fake
def _moe_ep_forward_fake(x, topk_ids, topk_weights, w1, w2, key):
    return torch.empty_like(x)


@torch.library.custom_op("headroom::moe_ep_backward", mutates_args=())
def moe_ep_backward(dy: torch.Tensor, x: torch.Tensor,
                    topk_ids: torch.Tensor, topk_weights: torch.Tensor,
                    w1: torch.Tensor, w2: torch.Tensor, key: int
                    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor,
                               torch.Tensor]:
    """This rank's EP backward: (dx, dw1, dw2, dtopk_weights) of its
    tokens and its experts (dw1 and dw2 summed over every rank's pairs),
    dw1 and dw2 in the dtype of w1 and w2."""
    if x.device.type != "cuda":
        return ep_reference.ep_moe_backward(dy, x, topk_ids, topk_weights,
                                            w1, w2, _config(key).comm)
    dx = torch.empty_like(x)
    dw1 = torch.empty_like(w1)
    dw2 = torch.empty_like(w2)
    dwt = torch.empty_like(topk_weights)

    def launch(m, lease, grid, mode, t):
        if lease is not None:
            m.backward(lease, x, topk_ids, topk_weights, w1, w2, dy, dx, dw1,
                       dw2, dwt, timeout_ms=t, _keep=False)
        else:
            m.backward_grid(grid, mode, x, topk_ids, topk_weights, w1, w2,
                            dy, dx, dw1, dw2, dwt, timeout_ms=t)
    _launch_ep(key, x.device.index, True, launch)
    return dx, dw1, dw2, dwt


@moe_ep_backward.register_fake
def _moe_ep_backward_fake(dy, x, topk_ids, topk_weights, w1, w2, key):
    return (torch.empty_like(x), torch.empty_like(w1), torch.empty_like(w2),
            torch.empty_like(topk_weights))


def _ep_backward(ctx, dy):
    x, ids, weights, w1, w2 = ctx.saved_tensors
    dx, dw1, dw2, dwt = moe_ep_backward(dy.contiguous(), x, ids, weights, w1,
                                        w2, ctx.key)
    return dx, None, dwt, dw1, dw2, None


moe_ep_forward.register_autograd(_ep_backward, setup_context=_setup_context)


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
    for sh in list(_contexts.values()) + list(_ep_contexts.values()):
        with sh.lock:
            sh.sync()


# ---- the module --------------------------------------------------------------------


class _Hold:
    """A module's strong reference to its ep_group: shared, not copied, by
    a deepcopy of the module; refused by pickle, as the config is."""

    def __init__(self, group):
        self.group = group

    def __deepcopy__(self, memo):
        return self

    def __copy__(self):
        return self

    def __reduce__(self):
        raise TypeError("a MegaMoE with an ep_group cannot be pickled whole "
                        "(its group is a live connection): save its "
                        "state_dict() instead")


def _ep_rank_of(group, rank) -> tuple:
    """(this module's rank, the group's size) for an ep_group: a
    VirtualGroup (rank required) or a torch ProcessGroup (this process's
    rank; a given rank must match)."""
    if isinstance(group, VirtualGroup):
        if rank is None:
            raise ValueError("ep_rank is required with a VirtualGroup: this "
                             "module's rank in it, 0..%d" % (group.nranks - 1))
        n = group.nranks
    else:
        import torch.distributed as dist
        if not (dist.is_available() and isinstance(group, dist.ProcessGroup)):
            raise TypeError("ep_group must be a torch.distributed "
                            "ProcessGroup or a headroom.VirtualGroup, not %s"
                            % type(group).__name__)
        mine = dist.get_rank(group)
        if mine < 0:
            raise ValueError("this process is not a member of ep_group")
        if rank is not None and rank != mine:
            raise ValueError("ep_rank is %r, but this process is rank %d of "
                             "ep_group" % (rank, mine))
        rank, n = mine, dist.get_world_size(group)
    if n > _lib.HR_MOE_EP_MAX_RANKS:
        raise ValueError("ep_group has %d ranks; the EP kernel takes 1..%d"
                         % (n, _lib.HR_MOE_EP_MAX_RANKS))
    _int_arg(rank, "ep_rank", 0, n - 1)
    return rank, n


class MegaMoE(torch.nn.Module):
    """A mixture-of-experts layer on the mega-MoE kernel: the experts'
    SwiGLU MLPs, routed by ids and weights the caller computes.

    MegaMoE(experts, hidden, inter, topk, max_tokens, device=None,
            lease=None, dtype=torch.bfloat16, timeout_ms=0,
            reference=False, ep_group=None, ep_rank=None,
            keep_gate_up=None)

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
    keep_gate_up: when a forward records for autograd, keep GEMM1's sums
    (g and u, 8 k I bytes a token in fp32) for its backward, which then
    does not recompute GEMM1 (a quarter of its FLOPs; the same results).
    False: keep nothing but the inputs. None (default): True without an
    ep_group; with one it must be False or None (the EP backward
    recomputes).

    forward(x, topk_ids, topk_weights) -> y: x [..., H] (the leading dims
    are flattened into tokens, and restored on y; cast to bf16), topk_ids
    [..., k] of any integer dtype (ids outside [0, E) contribute nothing),
    topk_weights [..., k] floating (used in fp32, as given: no
    normalisation). y has x's leading dims and dtype bf16. Shapes, dtypes
    and devices are checked first, ValueError naming the argument.

    Expert parallel: ep_group a torch.distributed ProcessGroup (this
    process's rank in it; ep_rank, if given, must be that) or a
    headroom.VirtualGroup (ep_rank: this thread's rank in it). experts is
    then E, all experts of the layer, a multiple of the group's size R
    (1..8); the module holds only its rank's E/R: w1 [E/R, 2I, H] and w2
    [E/R, H, I], global experts ep_rank E/R .. (ep_rank+1) E/R - 1
    (expert_range). forward takes this rank's tokens (any number
    0..max_tokens: a rank without tokens still calls, every rank calls
    every step) with GLOBAL ids, through the ops moe_ep_forward and
    moe_ep_backward: on a GPU each launch is an epoch of hr_moe_ep_forward
    / hr_moe_ep_backward under the lease, a VirtualGroup's ranks on one GPU
    each taking the lease's grid // (its ranks there); on the CPU
    headroom.ep_reference's math over the group. A call refused here
    spends its epoch on the GPU, so the ranks stay in step. The context
    (hr_moe_ep, shared by this rank's modules of the same group, device
    and shape) is taken when the module reaches its GPU, collectively:
    every rank must create and move its modules in the same order, and
    close() them in the same order, before the group is destroyed (a
    context is freed by the last module's close on every rank, never by
    the garbage collector).
    reference=True with an ep_group computes with ep_reference.ep_moe
    (autograd through the all-to-alls) instead.
    """

    def __init__(self, experts: int, hidden: int, inter: int, topk: int,
                 max_tokens: int, device=None, lease: Optional[Lease] = None,
                 dtype=torch.bfloat16, timeout_ms: int = 0,
                 reference: bool = False, ep_group=None,
                 ep_rank: Optional[int] = None,
                 keep_gate_up: Optional[bool] = None):
        super().__init__()
        _int_arg(experts, "experts", 1, _lib.HR_MOE_MAX_EXPERTS)
        _int_arg(hidden, "hidden")
        _int_arg(inter, "inter")
        _int_arg(topk, "topk", 1, _lib.HR_MOE_MAX_TOPK)
        _int_arg(max_tokens, "max_tokens")
        _int_arg(timeout_ms, "timeout_ms", 0)
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
        if keep_gate_up is not None and not isinstance(keep_gate_up, bool):
            raise TypeError("keep_gate_up must be a bool or None, not %s"
                            % type(keep_gate_up).__name__)
        if keep_gate_up and ep_group is not None:
            raise ValueError("keep_gate_up=True needs no ep_group: the EP "
                             "backward recomputes GEMM1")
        self.shape = MoeShape(experts, hidden, inter, topk, max_tokens)
        self.reference = bool(reference)
        self.keep_gate_up = ep_group is None and keep_gate_up is not False
        if ep_group is None:
            if ep_rank is not None:
                raise ValueError("ep_rank is given without an ep_group")
            self._cfg = _Config(self.shape, lease, timeout_ms)
            E = experts
        else:
            rank, nranks = _ep_rank_of(ep_group, ep_rank)
            if experts % nranks:
                raise ValueError("experts must be a multiple of the "
                                 "ep_group's size: %d experts over %d ranks"
                                 % (experts, nranks))
            if nranks * max_tokens * topk > 1 << 30:
                raise ValueError("ep_group size x max_tokens x topk must be "
                                 "<= 2^30 (the EP kernel's pair index), got "
                                 "%d x %d x %d" % (nranks, max_tokens, topk))
            self._cfg = _EPConfig(self.shape, lease, timeout_ms, ep_group,
                                  rank, nranks)
            self._ep_hold = _Hold(ep_group)
            E = experts // nranks
        self._key = _register(self._cfg)
        self._shared = {}
        H, I = hidden, inter
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
        Nothing for parameters off the GPU or with reference=True. With an
        ep_group: this rank's hr_moe_ep context, sized for the backward
        when the parameters require grad and the library has the EP
        backward; collective (every rank prepares its modules in the same
        order)."""
        dev = self.w1.device
        if self.reference or dev.type != "cuda":
            return
        index = dev.index if dev.index is not None else \
            torch.cuda.current_device()
        if self.ep_size:
            cfg = self._cfg
            cfg.ep_backward = bool(self.w1.requires_grad) and \
                _ep_backward_in_library()
            sh = _ep_context(cfg, index, cfg.ep_backward)
            sh.users.add(self._key)
            self._shared[(index, cfg.ep_backward)] = sh
        else:
            self._shared[index] = _shared_context(index, self.shape,
                                                  self.w1.requires_grad)
        self._cfg.lease_for(index)

    def close(self) -> None:
        """With an ep_group: give up this module's hr_moe_ep contexts; one
        no module uses any more is closed (each rank's last launch waited
        for, then every rank's through the group, then freed), so every
        rank must close its modules in the same order. Nothing for a
        module without an ep_group (its contexts are shared and freed with
        the last module that holds them). The module can still run: its
        next launch takes a context again (collectively)."""
        for k, sh in list(self._shared.items()):
            if not isinstance(sh, _SharedEP):
                continue
            del self._shared[k]
            sh.users.discard(self._key)
            if sh.users:
                continue
            with _lock:
                if _ep_contexts.get(sh.key) is sh:
                    del _ep_contexts[sh.key]
            with sh.create_lock, sh.lock:
                moe, sh.moe = sh.moe, None
                if moe is not None:
                    moe.close()

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
                sh.sync()

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

    @property
    def ep_group(self):
        """The ep_group given to the constructor (None: all experts here)."""
        hold = getattr(self, "_ep_hold", None)
        return hold.group if hold is not None else None

    @property
    def ep_rank(self) -> int:
        """This module's rank in its ep_group (0 without one)."""
        return getattr(self._cfg, "rank", 0)

    @property
    def ep_size(self) -> int:
        """The ep_group's size R (0 without one)."""
        return getattr(self._cfg, "nranks", 0)

    @property
    def local_experts(self) -> int:
        """How many experts the module holds: E / R (E without a group)."""
        return self.shape.experts // max(1, self.ep_size)

    @property
    def expert_range(self) -> tuple:
        """(first, last + 1): the global ids of the experts held here."""
        n = self.local_experts
        return self.ep_rank * n, (self.ep_rank + 1) * n

    def _spend_epoch(self) -> None:
        """A call refused here, on a GPU with an ep_group: spend the epoch
        its peers launch (in the context the forward would have used)."""
        dev = self.w1.device
        if not self.ep_size or dev.type != "cuda":
            return
        sh = self._shared.get((dev.index, self._cfg.ep_backward))
        if sh is not None and sh.moe is not None:
            with sh.lock:
                sh.moe.spend_epoch()

    # ---- forward -----------------------------------------------------------

    def forward(self, x, topk_ids, topk_weights):
        if not self.ep_size:
            return self._forward(x, topk_ids, topk_weights)
        try:
            args = self._inputs(x, topk_ids, topk_weights)
        except BaseException:
            self._spend_epoch()
            raise
        return self._run(*args)

    def _forward(self, x, topk_ids, topk_weights):
        return self._run(*self._inputs(x, topk_ids, topk_weights))

    def _inputs(self, x, topk_ids, topk_weights):
        """The checked inputs: (lead dims, x [T, H] bf16, ids [T, k] int32,
        weights [T, k] fp32, w1 and w2 bf16), ValueError / TypeError
        naming the argument."""
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
        # A rank of an ep_group may have no tokens, and still takes part.
        least = 0 if self.ep_size else 1
        if T < least or T > self.shape.max_tokens:
            raise ValueError("x has %d tokens, must be %d..%d (max_tokens)"
                             % (T, least, self.shape.max_tokens))
        El, I = self.local_experts, self.shape.inter
        for name, p, want in (("w1", self.w1, (El, 2 * I, H)),
                              ("w2", self.w2, (El, H, I))):
            if tuple(p.shape) != want:
                raise ValueError(
                    "%s must have shape %s (%s), got %s: replaced by a "
                    "tensor of another shape?" % (
                        name, want, "this rank's %d of %d experts"
                        % (El, self.shape.experts) if self.ep_size
                        else "all experts", tuple(p.shape)))
        xs = xs.to(torch.bfloat16).contiguous()
        ids = topk_ids.reshape(T, k).to(torch.int32).contiguous()
        wts = topk_weights.reshape(T, k).to(torch.float32).contiguous()
        w1 = self.w1.to(torch.bfloat16).contiguous()
        w2 = self.w2.to(torch.bfloat16).contiguous()
        return lead, xs, ids, wts, w1, w2

    def _run(self, lead, xs, ids, wts, w1, w2):
        if self.ep_size and self.reference:
            y = ep_reference.ep_moe(xs, ids, wts, w1, w2, self._cfg.comm)
        elif self.ep_size:
            y = moe_ep_forward(xs, ids, wts, w1, w2, self._key)
        elif self.reference:
            y = reference_moe(xs, ids, wts, w1, w2)
        elif self._recording(xs, wts, w1, w2):
            y, _ = moe_forward_train(xs, ids, wts, w1, w2, self._key)
        else:
            y = moe_forward(xs, ids, wts, w1, w2, self._key)
        return y.reshape(lead + (self.shape.hidden,))

    def _recording(self, *tensors) -> bool:
        """Will autograd need this forward's backward, and does the module
        keep g and u for it?"""
        return (getattr(self, "keep_gate_up", False) and
                torch.is_grad_enabled() and
                any(t.requires_grad for t in tensors))

    def extra_repr(self) -> str:
        s = self.shape
        ep = ""
        if self.ep_size:
            ep = ", ep_rank=%d of %d (experts %d..%d here)" % (
                (self.ep_rank, self.ep_size) + (self.expert_range[0],
                                                self.expert_range[1] - 1))
        return ("experts=%d, hidden=%d, inter=%d, topk=%d, max_tokens=%d%s%s"
                % (s.experts, s.hidden, s.inter, s.topk, s.max_tokens,
                   ", reference=True" if self.reference else "", ep))

    # ---- copies -------------------------------------------------------------

    def __setstate__(self, state):
        super().__setstate__(state)
        if self._cfg.key is None:              # unpickled: a new key here
            self._key = _register(self._cfg)
        self._shared = {d: sh for d, sh in self._shared.items()
                        if sh is not None}
