"""MoeEP: the expert-parallel mega-MoE (hr_moe_ep_*) on torch tensors.

The experts are split over R ranks (1..8, E % R == 0): rank r holds only
experts r E/R .. (r+1) E/R - 1 (w1 [E/R, 2I, H], w2 [E/R, H, I]) and
brings its own T tokens, with GLOBAL expert ids. One launch per rank does
the dispatch to the ranks that own each token's experts, their GEMMs, the
return and the combine; y is bitwise hr_moe_forward's over all experts
(kernels/headroom_moe.h, "expert parallel").

    boot = headroom.VirtualGroup(2)          # or a torch ProcessGroup
    ep = headroom.MoeEP(headroom.MoeShape(8, 256, 512, 2, 1024), rank, 2,
                        boot, device=0)      # collective: every rank
    ep.forward(lease, x, ids, weights, w1_mine, w2_mine, y)
    ep.sync()          # BarrierTimeout / Aborted naming the rank that failed
    ep.close()         # collective: every rank, once all have synced

Creation is collective: every rank calls MoeEP with the same shape and R,
and the C library exchanges what peers need to map each other's memory
through the bootstrap's allgather. A bootstrap is one of:

  a torch.distributed ProcessGroup   all_gather of byte tensors over it
                                     (CPU tensors for gloo, CUDA for nccl);
                                     ranks in other processes map each
                                     other's block by CUDA IPC
  VirtualGroup(R)                    R ranks as threads of this process
                                     (threading.Barrier), for tests and
                                     one-GPU benchmarks: raw pointers
  an object with rank, nranks and allgather(bytes) -> [bytes] * nranks

Every launch (forward or backward) is an epoch, and every rank must make
the same sequence of calls: a call refused for its arguments, here or in
the C library, still spends its epoch (the peers' launches of that epoch
time out), so the next call is in step again. In the barrier form (modes
HEADROOM, COOPERATIVE, PARTITION) all R ranks' launches of an epoch must
be resident at once: on one GPU, grid <= SMs / R each, on a stream each;
the agnostic form (Mode.AGNOSTIC) needs no residency (a rank short of SMs
completes late). Bitwise the same results either way. No CUDA graph
capture (each launch is an epoch: a replay would not be one).

torch is imported only when a method needs it.
"""
from __future__ import annotations

import ctypes
import threading
import warnings
from dataclasses import dataclass
from typing import List, Optional, Sequence

from . import _lib
from .client import Lease, Mode, _Closable
from .errors import Aborted, BarrierTimeout, HeadroomError, check, error_class
from .moe import (MoeFailure, MoeShape, _check_tensors, _context,
                  _cuda_stream, _forward_want, _in_context, _int_arg,
                  _tensors_and_tokens)

__all__ = ["MoeEP", "MoeEPFailure", "VirtualGroup", "VirtualGroupError",
           "ProcessGroupBootstrap", "bootstrap_of", "ep_memory"]


def _torch():
    import torch
    return torch


# ---- the failure record -----------------------------------------------------


@dataclass(frozen=True)
class MoeEPFailure:
    """struct hr_moe_ep_failure: what the last failed EP launch recorded.

    failed_rank: the rank whose own timeout or abort ended the epoch (this
    one or a peer); wait: where it failed, waited_for: the first rank it
    had not heard from at a wait for peers (-1 otherwise); noticed_wait:
    where this rank stopped; epoch: the launch's epoch (1 for the first
    call); local: this rank's error word as an MoeFailure (barrier is
    noticed_wait; arrived and expected count CTAs at a grid barrier, ranks
    at a wait for peers). Waits are HR_MOE_EP_WAIT_*: 0..4 the grid
    barriers (route, gemm1, gemm2, sent, returned), 15 a TMA load, 40
    dispatch, 41 return, 42 start (a peer had failed this epoch before
    this rank's launch began)."""
    code: int
    failed_rank: int
    wait: int
    waited_for: int
    noticed_wait: int
    epoch: int
    local: MoeFailure

    @property
    def wait_name(self) -> str:
        return _lib.EP_WAIT_NAMES.get(self.wait, str(self.wait))

    @property
    def noticed_name(self) -> str:
        return _lib.EP_WAIT_NAMES.get(self.noticed_wait,
                                      str(self.noticed_wait))

    @classmethod
    def _from_c(cls, f: _lib.MoeEPFailure_t) -> "MoeEPFailure":
        return cls(code=f.code, failed_rank=f.failed_rank, wait=f.wait,
                   waited_for=f.waited_for, noticed_wait=f.noticed_wait,
                   epoch=int(f.epoch), local=MoeFailure._from_c(f.local))


# ---- bootstraps -------------------------------------------------------------


class VirtualGroupError(RuntimeError):
    """A VirtualGroup collective could not complete: a rank failed (and
    broke the group) or did not arrive within the group's timeout. The
    group stays broken: every later collective on it raises this too."""


class VirtualGroup:
    """R ranks as threads of one process, for tests and one-GPU runs.

    VirtualGroup(nranks, timeout_s=60.0)

    Each rank is a thread that calls the collectives with its rank:
    allgather(rank, bytes), exchange(rank, items), barrier(rank), or
    member(rank) for an object that carries its rank (a bootstrap for
    MoeEP). They meet at a threading.Barrier; a wait longer than
    timeout_s, or abort() from any thread, breaks the group, and then
    every rank waiting or arriving raises VirtualGroupError: nothing
    waits forever. A rank whose own part of a collective raises breaks
    the group before it re-raises, so its peers fail at once too.

    For MoeEP the ranks exchange raw device pointers
    (HR_MOE_EP_EXCHANGE_POINTERS); they may be on one GPU (then each
    launch's grid must leave room for the others: SMs / R) or on several
    GPUs of this process (with peer access between them)."""

    def __init__(self, nranks: int, timeout_s: float = 60.0):
        _int_arg(nranks, "nranks", 1)
        if not isinstance(timeout_s, (int, float)) or \
                isinstance(timeout_s, bool) or not timeout_s > 0:
            raise ValueError("timeout_s must be a number > 0, got %r"
                             % (timeout_s,))
        self._nranks = nranks
        self.timeout_s = float(timeout_s)
        self._barrier = threading.Barrier(nranks, timeout=self.timeout_s)
        self._slots: List[object] = [None] * nranks
        self._lock = threading.Lock()
        self._devices = {}

    @property
    def nranks(self) -> int:
        return self._nranks

    @property
    def broken(self) -> bool:
        """True once a rank failed, timed out or abort() was called."""
        return self._barrier.broken

    def member(self, rank: int) -> "VirtualRank":
        """Rank `rank`'s view of the group: a bootstrap for MoeEP."""
        self._check_rank(rank)
        return VirtualRank(self, rank)

    def abort(self) -> None:
        """Break the group: every rank waiting in a collective, and every
        later one, raises VirtualGroupError. Safe from any thread."""
        self._barrier.abort()

    def _check_rank(self, rank) -> None:
        _int_arg(rank, "rank", 0, self._nranks - 1)

    def _wait(self, rank: int, what: str) -> None:
        try:
            self._barrier.wait()
        except threading.BrokenBarrierError:
            raise VirtualGroupError(
                "VirtualGroup %s (rank %d of %d): the group is broken: a "
                "rank failed, aborted it, or did not arrive within %.1f s"
                % (what, rank, self._nranks, self.timeout_s)) from None

    def _collective(self, rank: int, what: str, mine, take):
        """Post `mine`, wait for every rank, take(slots) -> result, wait
        again (so no rank overwrites its slot before all have read)."""
        self._check_rank(rank)
        try:
            self._slots[rank] = mine
            self._wait(rank, what)
            out = take(list(self._slots))
            self._wait(rank, what)
            return out
        except BaseException:
            self._barrier.abort()          # the peers must not wait for us
            raise

    def allgather(self, rank: int, data) -> List[bytes]:
        """Rank i's bytes at [i] on every rank; every rank must send the
        same number of bytes (ValueError, and a broken group, otherwise)."""
        mine = bytes(data)

        def take(slots):
            n = {len(s) for s in slots}
            if len(n) != 1:
                raise ValueError("VirtualGroup.allgather: the ranks sent "
                                 "different sizes: %s"
                                 % [len(s) for s in slots])
            return slots
        return self._collective(rank, "allgather", mine, take)

    def exchange(self, rank: int, items: Sequence) -> list:
        """All-to-all of Python objects: rank s's items[d] goes to rank d,
        which gets [items_0[d], items_1[d], ...]. The objects are handed
        over as they are (a tensor is not copied: the receiver's use of it
        is the interconnect, at no cost); for CPU tensors (a CUDA tensor
        made on another thread's stream would need that stream's order:
        ep_reference.ep_moe_lockstep drives virtual ranks on one GPU
        instead)."""
        items = list(items)
        if len(items) != self._nranks:
            self._barrier.abort()
            raise ValueError("VirtualGroup.exchange: rank %d gave %d items, "
                             "not one per rank (%d)"
                             % (rank, len(items), self._nranks))
        return self._collective(rank, "exchange", items,
                                lambda slots: [s[rank] for s in slots])

    def barrier(self, rank: int) -> None:
        """Wait until every rank has called barrier."""
        self._collective(rank, "barrier", None, lambda slots: None)

    # Where each rank's MoeEP lives, for splitting one GPU's grid.
    def _place(self, rank: int, device: int) -> None:
        with self._lock:
            self._devices[rank] = device

    def ranks_on(self, device: int) -> int:
        """How many of the group's ranks made their MoeEP on CUDA device
        `device` (known once their creation, which is collective, has
        returned)."""
        with self._lock:
            return sum(1 for d in self._devices.values() if d == device)

    def __repr__(self):
        return "<headroom.VirtualGroup nranks=%d%s>" % (
            self._nranks, " (broken)" if self.broken else "")


class VirtualRank:
    """One rank of a VirtualGroup: VirtualGroup.member(rank)."""
    exchange_kind = _lib.HR_MOE_EP_EXCHANGE_POINTERS

    def __init__(self, group: VirtualGroup, rank: int):
        self.group = group
        self.rank = rank
        self.nranks = group.nranks

    def allgather(self, data) -> List[bytes]:
        return self.group.allgather(self.rank, data)

    def barrier(self) -> None:
        self.group.barrier(self.rank)

    def abort(self) -> None:
        self.group.abort()

    def __repr__(self):
        return "<headroom VirtualGroup rank %d of %d>" % (self.rank,
                                                           self.nranks)


class ProcessGroupBootstrap:
    """A torch.distributed ProcessGroup as MoeEP's bootstrap: rank and
    nranks are the group's, allgather is dist.all_gather of a byte tensor
    (on the CPU for gloo, on torch.cuda.current_device() for nccl). Bounded
    by the group's own timeout."""
    exchange_kind = _lib.HR_MOE_EP_EXCHANGE_AUTO

    def __init__(self, group):
        import torch.distributed as dist
        if not isinstance(group, dist.ProcessGroup):
            raise TypeError("group must be a torch.distributed ProcessGroup, "
                            "not %s" % type(group).__name__)
        self.group = group
        self.rank = dist.get_rank(group)
        self.nranks = dist.get_world_size(group)
        backend = str(dist.get_backend(group)).lower()
        self._cuda = "nccl" in backend and "gloo" not in backend

    def allgather(self, data) -> List[bytes]:
        torch = _torch()
        import torch.distributed as dist
        raw = bytes(data)
        dev = torch.device("cuda", torch.cuda.current_device()) \
            if self._cuda else torch.device("cpu")
        # One byte more than asked: torch.frombuffer refuses an empty buffer.
        t = torch.frombuffer(bytearray(raw + b"\0"), dtype=torch.uint8).to(dev)
        out = [torch.empty_like(t) for _ in range(self.nranks)]
        dist.all_gather(out, t, group=self.group)
        return [bytes(o.cpu().tolist()[:len(raw)]) for o in out]

    def barrier(self) -> None:
        self.allgather(b"\1")

    def __repr__(self):
        return "<headroom ProcessGroupBootstrap rank %d of %d>" % (
            self.rank, self.nranks)


def bootstrap_of(group, rank: Optional[int] = None):
    """The bootstrap for `group`: a VirtualGroup with `rank` (required),
    a VirtualRank, a torch ProcessGroup (rank, if given, must be this
    process's rank in it), or an object that already has rank, nranks and
    allgather (passed through). TypeError for anything else, ValueError
    for a rank that does not fit."""
    if isinstance(group, VirtualGroup):
        if rank is None:
            raise ValueError("a VirtualGroup needs the rank of this thread "
                             "(rank=0..%d)" % (group.nranks - 1))
        return group.member(rank)
    boot = None
    if all(hasattr(group, a) for a in ("rank", "nranks", "allgather")):
        boot = group
    else:
        try:
            import torch.distributed as dist
            is_pg = dist.is_available() and \
                isinstance(group, dist.ProcessGroup)
        except ImportError:
            is_pg = False
        if is_pg:
            boot = ProcessGroupBootstrap(group)
    if boot is None:
        raise TypeError("the group must be a torch.distributed ProcessGroup, "
                        "a headroom.VirtualGroup (with a rank) or a bootstrap "
                        "(rank, nranks, allgather), not %s"
                        % type(group).__name__)
    if rank is not None and rank != boot.rank:
        raise ValueError("rank %d does not match the group's rank for this "
                         "process (%d)" % (rank, boot.rank))
    return boot


def _code_of(e: BaseException) -> int:
    """The code an exception becomes when it ends a bootstrap call: its
    own for a HeadroomError, HR_ETIMEDOUT for a timeout, else
    HR_ECONNECT."""
    if isinstance(e, HeadroomError) and e.code < 0:
        return e.code
    if isinstance(e, TimeoutError):
        return _lib.HR_ETIMEDOUT
    return _lib.HR_ECONNECT


class _BootState:
    """What the allgather callback shares with its MoeEP: the bootstrap,
    how many calls it served, and the exception that ended one. No
    reference to the MoeEP (no cycle through the C callback)."""

    def __init__(self, boot, nranks: int):
        self.boot = boot
        self.nranks = nranks
        self.calls = 0
        self.error: Optional[BaseException] = None

    def callback(self):
        def allgather(ctx, send, recv, n):
            # Never raise into C: any exception is a nonzero code.
            try:
                self.calls += 1
                data = ctypes.string_at(send, n) if n else b""
                parts = list(self.boot.allgather(data))
                if len(parts) != self.nranks or \
                        any(len(p) != n for p in parts):
                    sizes = sorted({len(p) for p in parts})
                    raise ValueError(
                        "the bootstrap's allgather returned %d parts of %s "
                        "bytes, not %d of %d" % (len(parts), sizes,
                                                 self.nranks, n))
                if n:
                    ctypes.memmove(recv, b"".join(parts), n * self.nranks)
                return 0
            except BaseException as e:     # noqa: BLE001 (goes to C as a code)
                self.error = e
                return _code_of(e)
        return _lib.EP_ALLGATHER(allgather)


def ep_memory(shape: MoeShape, nranks: int, backward: bool = False,
              lib=None) -> tuple:
    """(peer_bytes, local_bytes) a rank allocates for `shape` (the global
    one) over `nranks`: hr_moe_ep_memory, or with backward=True
    hr_moe_ep_memory_backward (a context made for the backward too;
    NotImplementedError where the library has no EP backward). Plain
    arithmetic, no GPU. InvalidArgument for a shape the EP path refuses
    (E % nranks, 1..8 ranks, nranks max_tokens topk <= 2^30,
    hr_moe_create's rules)."""
    lib = _lib.load_moe_library(lib)
    name = "hr_moe_ep_memory_backward" if backward else "hr_moe_ep_memory"
    if backward and not _lib.has_symbol(lib, name):
        raise NotImplementedError("ep_memory(backward=True): the library has "
                                  "no hr_moe_ep_memory_backward (built before "
                                  "the EP backward)")
    s = _shape_t(shape)
    peer, local = ctypes.c_uint64(), ctypes.c_uint64()
    check(getattr(lib, name)(ctypes.byref(s), int(nranks), ctypes.byref(peer),
                             ctypes.byref(local)),
          "%s(nranks %d)" % (name, nranks))
    return int(peer.value), int(local.value)


def _shape_t(shape: MoeShape) -> _lib.MoeShape_t:
    if not isinstance(shape, MoeShape):
        raise TypeError("shape must be a headroom.MoeShape, not %s"
                        % type(shape).__name__)
    return _lib.MoeShape_t(shape.experts, shape.hidden, shape.inter,
                           shape.topk, shape.max_tokens)


# ---- the context ------------------------------------------------------------


class MoeEP(_Closable):
    """One rank's expert-parallel mega-MoE context (hr_moe_ep).

    MoeEP(shape, rank, nranks, bootstrap, device=None, exchange=None,
          backward=False, lib=None)

    shape: the GLOBAL MoeShape (experts E over all ranks; max_tokens
    bounds this rank's own T). bootstrap: see the module's docstring
    (bootstrap_of). device: CUDA device index; None:
    torch.cuda.current_device(). exchange: HR_MOE_EP_EXCHANGE_* (None:
    the bootstrap's kind: pointers for a VirtualGroup, automatic for a
    ProcessGroup). backward: also size the peer block for the EP backward
    (hr_moe_ep_backward); asked for and honoured only where the library
    has it (has_backward says which).

    Collective: every rank must create its MoeEP with the same shape and
    nranks. A rank whose creation fails raises (NoGPU, Unsupported,
    InvalidArgument, OutOfMemory, CudaError, or the bootstrap's failure:
    ConnectError / TimedOut, chained to the exception it raised); every
    rank gets the same code once the exchange has begun. Where this rank
    left the exchange early (its arguments refused before it began, its
    bootstrap call failed), the bootstrap's abort() is called when it has
    one, so that its peers fail too rather than wait for their timeout."""

    def __init__(self, shape: MoeShape, rank: int, nranks: int, bootstrap,
                 device: Optional[int] = None, exchange: Optional[int] = None,
                 backward: bool = False, lib=None):
        self._ptr = None
        self._keep = None
        self._lib = _lib.load_moe_library(lib)
        s = _shape_t(shape)
        _int_arg(nranks, "nranks", 1, _lib.HR_MOE_EP_MAX_RANKS)
        _int_arg(rank, "rank", 0, nranks - 1)
        boot = bootstrap_of(bootstrap, rank)
        try:
            self._setup(shape, rank, nranks, boot, device, exchange, backward)
        except BaseException:
            if hasattr(boot, "abort"):
                boot.abort()               # the peers must not wait for us
            raise
        self._create(s)

    def _setup(self, shape, rank, nranks, boot, device, exchange, backward):
        if boot.nranks != nranks:
            raise ValueError("nranks is %d, the bootstrap's group has %d ranks"
                             % (nranks, boot.nranks))
        if exchange is None:
            exchange = getattr(boot, "exchange_kind",
                               _lib.HR_MOE_EP_EXCHANGE_AUTO)
        if exchange not in (_lib.HR_MOE_EP_EXCHANGE_AUTO,
                            _lib.HR_MOE_EP_EXCHANGE_POINTERS,
                            _lib.HR_MOE_EP_EXCHANGE_IPC):
            raise ValueError("exchange must be HR_MOE_EP_EXCHANGE_AUTO, "
                             "_POINTERS or _IPC (0, 1, 2), got %r"
                             % (exchange,))
        if device is None:
            device = _torch().cuda.current_device()
        self.device = int(device)
        self.shape = shape
        self.rank = rank
        self.nranks = nranks
        self.bootstrap = boot
        self.has_backward = bool(backward) and \
            _lib.has_symbol(self._lib, "hr_moe_ep_backward")
        state = _BootState(boot, nranks)
        fn = state.callback()
        b = _lib.MoeEPBootstrap_t()
        b.allgather = fn
        b.ctx = None
        b.exchange = int(exchange)
        b.backward = 1 if self.has_backward else 0
        # The callback and the struct live as long as the context.
        self._boot_state, self._boot_fn, self._boot_t = state, fn, b
        if isinstance(boot, VirtualRank):
            boot.group._place(rank, self.device)

    def _create(self, s) -> None:
        rank, nranks, boot = self.rank, self.nranks, self.bootstrap
        state, b = self._boot_state, self._boot_t
        out = ctypes.c_void_p()
        rc = _in_context(self._lib.hr_moe_ep_create, ctypes.byref(out),
                         self.device, ctypes.byref(s), rank, nranks,
                         ctypes.byref(b))
        if rc != _lib.HR_OK:
            if state.calls < 2 and hasattr(boot, "abort"):
                boot.abort()               # the peers may be waiting for us
            # A failed context keeps nothing of the group: a ProcessGroup
            # kept alive past destroy_process_group() can abort the process
            # at exit. (And no local names the error raised, so that its
            # traceback holds no cycle that would keep these frames.)
            cause = state.error
            state.boot = None
            self.bootstrap = self._boot_state = None
            self._boot_fn = self._boot_t = None
            if isinstance(cause, (KeyboardInterrupt, SystemExit)):
                raise cause
            raise error_class(rc)(rc, "hr_moe_ep_create(rank %d of %d, "
                                  "cuda:%d)" % (rank, nranks,
                                                self.device)) from cause
        self._ptr = out.value

    # ---- life cycle -------------------------------------------------------

    _closed_message = "the MoeEP context is closed"

    def close(self, barrier: bool = True) -> None:
        """Wait for this rank's last launch, then (barrier=True) for every
        rank to get here through the bootstrap, then free the context.
        Collective: peers map this rank's memory, so every rank must call
        close() once all its launches are done; barrier=False frees at once
        (only when every peer is known to have ended its launches, or is
        gone). A failed barrier raises and keeps the context (a peer may
        still write into it): call close() again. Idempotent."""
        ptr = self._ptr
        if ptr is None:
            return
        # Its failure, if any, was the launch's to report.
        _in_context(self._lib.hr_moe_ep_sync, ptr)
        if barrier:
            try:
                self.bootstrap.barrier()
            except BaseException as e:
                raise RuntimeError(
                    "MoeEP.close (rank %d of %d): the barrier with the peers "
                    "failed (%s: %s); the context is kept, since a peer may "
                    "still write into it: close() again, or close(barrier="
                    "False) once every peer's launches have ended"
                    % (self.rank, self.nranks, type(e).__name__, e)) from e
        self._ptr = None
        _in_context(self._lib.hr_moe_ep_destroy, ptr)
        self._keep = None
        # Nothing of the group outlives the context (see _create).
        self._boot_state.boot = None
        self._boot_state = self._boot_fn = self._boot_t = None
        self.bootstrap = None

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):
        # Not close(): freeing needs every rank (a peer may still write into
        # this rank's block), and a collective cannot run from the garbage
        # collector. The memory goes with the process.
        if getattr(self, "_ptr", None) is not None:
            try:
                warnings.warn("MoeEP (rank %d of %d) garbage-collected "
                              "without close(): its device memory stays "
                              "allocated until the process ends"
                              % (self.rank, self.nranks),
                              ResourceWarning, stacklevel=2)
            except Exception:
                pass

    # ---- queries ----------------------------------------------------------

    @property
    def local_experts(self) -> int:
        """E / R: how many experts this rank holds."""
        return self.shape.experts // self.nranks

    @property
    def expert_range(self) -> tuple:
        """(first, last + 1): the global ids of this rank's experts."""
        n = self.local_experts
        return self.rank * n, (self.rank + 1) * n

    @property
    def memory(self) -> tuple:
        """(peer_bytes, local_bytes) this context holds (ep_memory, with
        the backward's room where has_backward)."""
        return ep_memory(self.shape, self.nranks, backward=self.has_backward)

    # ---- argument checks --------------------------------------------------

    def _tokens(self, named) -> int:
        return _tensors_and_tokens(self.shape, named, least=0)

    def _want(self, T: int) -> dict:
        return _forward_want(self.shape, T, self.local_experts)

    @staticmethod
    def _timeout(timeout_ms) -> int:
        _int_arg(timeout_ms, "timeout_ms", 0)
        return timeout_ms

    def _fill(self, a, T, x, ids, weights, w1, w2, timeout_ms):
        s = self.shape
        a.tokens = T
        a.experts, a.hidden, a.inter, a.topk = (s.experts, s.hidden, s.inter,
                                                s.topk)
        # A rank without tokens passes NULL (its tensors may be empty).
        a.x = x.data_ptr() if T else None
        a.topk_ids = ids.data_ptr() if T else None
        a.topk_weights = weights.data_ptr() if T else None
        a.w1 = w1.data_ptr()
        a.w2 = w2.data_ptr()
        a.timeout_ms = timeout_ms

    def _args(self, x, ids, weights, w1, w2, y, timeout_ms):
        named = (("x", x), ("ids", ids), ("weights", weights), ("w1", w1),
                 ("w2", w2), ("y", y))
        T = self._tokens(named)
        _check_tensors(self.device, named, self._want(T))
        a = _lib.MoeArgs_t()
        self._fill(a, T, x, ids, weights, w1, w2, self._timeout(timeout_ms))
        a.y = y.data_ptr() if T else None
        return a

    def _grad_args(self, x, ids, weights, w1, w2, dy, dx, dw1, dw2, dweights,
                   timeout_ms):
        torch = _torch()
        named = (("x", x), ("ids", ids), ("weights", weights), ("w1", w1),
                 ("w2", w2), ("dy", dy), ("dx", dx), ("dw1", dw1),
                 ("dw2", dw2), ("dweights", dweights))
        T = self._tokens(named)
        dw_types = {torch.float32: _lib.HR_MOE_DW_FP32,
                    torch.bfloat16: _lib.HR_MOE_DW_BF16}
        if dw1.dtype not in dw_types:
            raise ValueError("dw1 must be torch.float32 or torch.bfloat16, "
                             "got %s" % dw1.dtype)
        if dw2.dtype != dw1.dtype:
            raise ValueError("dw2 must be %s (dw1's dtype), got %s"
                             % (dw1.dtype, dw2.dtype))
        s = self.shape
        El, H, I, k = self.local_experts, s.hidden, s.inter, s.topk
        want = self._want(T)
        del want["y"]
        want.update({
            "dy": ((T, H), torch.bfloat16, 16),
            "dx": ((T, H), torch.bfloat16, 16),
            "dw1": ((El, 2 * I, H), dw1.dtype, 16),
            "dw2": ((El, H, I), dw1.dtype, 16),
            "dweights": ((T, k), torch.float32, 4),
        })
        _check_tensors(self.device, named, want)
        g = _lib.MoeGradArgs_t()
        self._fill(g.fwd, T, x, ids, weights, w1, w2,
                   self._timeout(timeout_ms))
        g.fwd.y = None
        g.dy = dy.data_ptr() if T else None
        g.dx = dx.data_ptr() if T else None
        g.dw1 = dw1.data_ptr()
        g.dw2 = dw2.data_ptr()
        g.dtopk_weights = dweights.data_ptr() if T else None
        g.dw_dtype = dw_types[dw1.dtype]
        return g

    def _stream(self, stream):
        return _cuda_stream(self.device, stream)

    def _where(self, name: str) -> str:
        return "%s (rank %d of %d)" % (name, self.rank, self.nranks)

    # ---- launches ---------------------------------------------------------

    def spend_epoch(self, backward: bool = False) -> None:
        """Spend one epoch without launching, as a call refused for its
        arguments does (the C library's own check refuses it): for a rank
        that must skip a call its peers make. The peers' launches of that
        epoch time out. backward: spend it through the backward's entry
        (where the library has it)."""
        ptr = self._handle()
        if backward and _lib.has_symbol(self._lib, "hr_moe_ep_backward"):
            g = _lib.MoeGradArgs_t()
            g.fwd.tokens = -1
            self._lib.hr_moe_ep_backward_grid(ptr, 0, int(Mode.HEADROOM),
                                              ctypes.byref(g), None)
        else:
            a = _lib.MoeArgs_t()
            a.tokens = -1                  # refused before any CUDA call
            self._lib.hr_moe_ep_forward_grid(ptr, 0, int(Mode.HEADROOM),
                                             ctypes.byref(a), None)

    def _launch(self, name, build, call, backward=False):
        """build() -> (args, stream, extra); on any error there the epoch
        is spent and the error raised. Then call(ptr, args, stream, extra)
        and its code checked."""
        ptr = self._handle()
        try:
            a, st, extra = build()
        except BaseException:
            self.spend_epoch(backward)
            raise
        rc = _in_context(call, ptr, a, st, extra)
        check(rc, self._where(name))

    def forward(self, lease: Lease, x, ids, weights, w1, w2, y,
                timeout_ms: int = 0, stream=None, _keep: bool = True) -> None:
        """Launch this rank's epoch of the EP forward with the grid, mode
        and cluster size `lease` holds now (hr_moe_ep_forward; a lease in
        the agnostic mode runs the agnostic form), on `stream` (default:
        torch's current stream on the device). Returns once launched;
        sync() waits.

        x [T, H] bf16, ids [T, k] int32 (GLOBAL expert ids; outside [0, E):
        nothing), weights [T, k] fp32, y [T, H] bf16: this rank's T tokens,
        0 <= T <= max_tokens (a rank without tokens still calls, with
        empty tensors); w1 [E/R, 2I, H], w2 [E/R, H, I] bf16: this rank's
        experts. All contiguous on the context's device. ValueError /
        TypeError naming the tensor, and the epoch spent. timeout_ms: each
        wait (grid barriers, and for peers) at most this long (0: 10 s)."""
        def build():
            if not isinstance(lease, Lease):
                raise TypeError("lease must be a headroom.Lease")
            return (self._args(x, ids, weights, w1, w2, y, timeout_ms),
                    self._stream(stream), lease._handle())
        self._launch("hr_moe_ep_forward", build,
                     lambda p, a, st, lh: self._lib.hr_moe_ep_forward(
                         p, lh, ctypes.byref(a), st))
        # headroom.nn passes _keep=False (torch's allocator keeps the
        # memory from reuse until the stream has passed the launch).
        if _keep:
            self._keep = (lease, x, ids, weights, w1, w2, y)

    def forward_grid(self, grid: int, x, ids, weights, w1, w2, y,
                     mode=Mode.HEADROOM, timeout_ms: int = 0,
                     stream=None) -> None:
        """The same launch without a lease (hr_moe_ep_forward_grid): `grid`
        CTAs (1..SMs), mode HEADROOM, COOPERATIVE or PARTITION (the barrier
        form: for R virtual ranks on one GPU, grid <= SMs / R each, a
        stream each) or AGNOSTIC (the agnostic form), no clusters. A
        barrier timeout is not reported to any daemon."""
        def build():
            m = Mode.of(mode)
            return (self._args(x, ids, weights, w1, w2, y, timeout_ms),
                    self._stream(stream), (int(grid), int(m)))
        self._launch("hr_moe_ep_forward_grid(grid %s)" % (grid,), build,
                     lambda p, a, st, gm: self._lib.hr_moe_ep_forward_grid(
                         p, gm[0], gm[1], ctypes.byref(a), st))
        self._keep = (x, ids, weights, w1, w2, y)

    def _backward_missing(self):
        raise NotImplementedError(
            "MoeEP.backward: the library has no hr_moe_ep_backward (%s was "
            "built before the EP backward)" % _lib.moe_library_path())

    def backward(self, lease: Lease, x, ids, weights, w1, w2, dy, dx, dw1,
                 dw2, dweights, timeout_ms: int = 0, stream=None,
                 _keep: bool = True) -> None:
        """Launch this rank's epoch of the EP backward of the forward of
        (x, ids, weights, w1, w2) for dy at y (hr_moe_ep_backward), with
        the lease's grid and mode. x, ids, weights, dy, dx [T, H] bf16 and
        dweights [T, k] fp32 are this rank's tokens; w1, w2 and dw1 [E/R,
        2I, H], dw2 [E/R, H, I] (both fp32 or both bf16) this rank's
        experts. Writes dx, dw1, dw2 and dweights in full. An epoch like a
        forward call. NotImplementedError where the library has no EP
        backward; InvalidArgument from a context made with backward=False
        (its peer block is sized for the forward only)."""
        if not _lib.has_symbol(self._lib, "hr_moe_ep_backward"):
            self._backward_missing()

        def build():
            if not isinstance(lease, Lease):
                raise TypeError("lease must be a headroom.Lease")
            return (self._grad_args(x, ids, weights, w1, w2, dy, dx, dw1,
                                    dw2, dweights, timeout_ms),
                    self._stream(stream), lease._handle())
        self._launch("hr_moe_ep_backward", build,
                     lambda p, g, st, lh: self._lib.hr_moe_ep_backward(
                         p, lh, ctypes.byref(g), st), backward=True)
        if _keep:
            self._keep = (lease, x, ids, weights, w1, w2, dy, dx, dw1, dw2,
                          dweights)

    def backward_grid(self, grid: int, mode, x, ids, weights, w1, w2, dy, dx,
                      dw1, dw2, dweights, timeout_ms: int = 0,
                      stream=None) -> None:
        """The same without a lease (hr_moe_ep_backward_grid): `grid` CTAs,
        `mode` as forward_grid's."""
        if not _lib.has_symbol(self._lib, "hr_moe_ep_backward"):
            self._backward_missing()

        def build():
            m = Mode.of(mode)
            return (self._grad_args(x, ids, weights, w1, w2, dy, dx, dw1,
                                    dw2, dweights, timeout_ms),
                    self._stream(stream), (int(grid), int(m)))
        self._launch("hr_moe_ep_backward_grid(grid %s)" % (grid,), build,
                     lambda p, g, st, gm: self._lib.hr_moe_ep_backward_grid(
                         p, gm[0], gm[1], ctypes.byref(g), st),
                     backward=True)
        self._keep = (x, ids, weights, w1, w2, dy, dx, dw1, dw2, dweights)

    # ---- waiting ----------------------------------------------------------

    def _raise_for(self, rc: int, name: str) -> None:
        if rc == _lib.HR_EBARRIER_TIMEOUT:
            raise BarrierTimeout(rc, self._where(name), self.last_failure())
        if rc == _lib.HR_EABORTED:
            raise Aborted(rc, self._where(name), self.last_failure())
        check(rc, self._where(name))

    def poll(self) -> bool:
        """Look once at the last launch (hr_moe_ep_sync_timeout(ep, 0)):
        True when it has ended (or nothing was launched), False while it
        is still queued or running. Raises what sync() raises when it
        failed."""
        ptr = self._handle()
        rc = _in_context(self._lib.hr_moe_ep_sync_timeout, ptr, 0)
        if rc == _lib.HR_ETIMEDOUT:
            return False
        self._keep = None
        self._raise_for(rc, "hr_moe_ep_sync_timeout")
        return True

    def sync(self, timeout_ms: Optional[int] = None) -> None:
        """Wait for this rank's last launch (hr_moe_ep_sync). Raises
        BarrierTimeout or Aborted, each with .failure (an MoeEPFailure:
        which rank failed, where, whom it waited for), when this rank's
        launch or a peer's failed: every rank's launch of that epoch ends
        within about one timeout. The next launch works.

        timeout_ms: bound the wait on the host (hr_moe_ep_sync_timeout;
        0: look once): TimedOut when the launch is still in flight then
        (its tensors stay referenced; sync() again, or abort() first)."""
        ptr = self._handle()
        if timeout_ms is not None:
            _int_arg(timeout_ms, "timeout_ms", 0)
        name = "hr_moe_ep_sync" if timeout_ms is None else \
            "hr_moe_ep_sync_timeout"
        ctx = _context()
        before = ctx.get()
        rc = _lib.HR_ETIMEDOUT
        try:
            if timeout_ms is None:
                rc = self._lib.hr_moe_ep_sync(ptr)
            else:
                rc = self._lib.hr_moe_ep_sync_timeout(ptr, timeout_ms)
        finally:
            ctx.restore(before)
            if rc != _lib.HR_ETIMEDOUT:
                self._keep = None
        self._raise_for(rc, name)

    def last_failure(self) -> Optional[MoeEPFailure]:
        """What the last failed launch recorded; None if none has failed."""
        f = _lib.MoeEPFailure_t()
        rc = self._lib.hr_moe_ep_last_failure(self._handle(), ctypes.byref(f))
        if rc == _lib.HR_ENOTFOUND:
            return None
        check(rc, self._where("hr_moe_ep_last_failure"))
        return MoeEPFailure._from_c(f)

    def abort(self) -> None:
        """Ask this rank's launch in flight to stop: it leaves at its next
        wait and tells every peer, so every rank's launch of that epoch
        ends with Aborted naming this rank. Safe from another thread."""
        check(self._lib.hr_moe_ep_abort(self._handle()),
              self._where("hr_moe_ep_abort"))

    def __repr__(self):
        s = self.shape
        return ("<headroom.MoeEP rank %d of %d cuda:%d E=%d H=%d I=%d k=%d "
                "max_tokens=%d%s>" % (self.rank, self.nranks, self.device,
                                      s.experts, s.hidden, s.inter, s.topk,
                                      s.max_tokens,
                                      "" if self._ptr else " (closed)"))
