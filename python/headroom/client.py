"""Client, Comm and Lease: the Pythonic face of libheadroom.

    import headroom

    with headroom.Client() as client:                # $HEADROOM_SOCKET or default
        with client.lease(gpu=0, cluster=2) as lease:
            client.register(0, "dp", ctas=8, concurrent=2)
            print(lease.grid, lease.budget())
            ...

Objects belong to their Client: closing the client releases its leases and
footprints, and the Python objects for them then refuse further use
(InvalidArgument) instead of touching freed memory. A Client belongs to the
process that opened it; after os.fork() the child opens its own.
"""
from __future__ import annotations

import ctypes
import enum
import operator
import os
import threading
import weakref
from dataclasses import dataclass, fields
from typing import Dict, Optional, Union

from . import _lib
from .errors import InvalidArgument, check

__all__ = [
    "Mode", "IncidentKind", "Budget", "IncidentDetail", "Client", "Comm",
    "Lease", "Partition", "ENV_VARS", "DEFAULT_SOCKET", "ENV_SOCKET",
]

DEFAULT_SOCKET = "/run/headroom/headroom.sock"
ENV_SOCKET = "HEADROOM_SOCKET"

# What hr_lease_export_env sets (each NCCL one only when the budget decides
# it; NCCL_NVLS_ENABLE always, to 0).
ENV_VARS = ("DG_MEGA_MOE_SM_HEADROOM", "NCCL_MIN_CTAS", "NCCL_MAX_CTAS",
            "NCCL_CGA_CLUSTER_SIZE", "NCCL_NVLS_ENABLE")


class Mode(enum.IntEnum):
    """hr_mode: how the mega kernel is launched under a lease."""
    HEADROOM = _lib.HR_MODE_HEADROOM
    COOPERATIVE = _lib.HR_MODE_COOPERATIVE
    AGNOSTIC = _lib.HR_MODE_AGNOSTIC
    PARTITION = _lib.HR_MODE_PARTITION

    @classmethod
    def of(cls, value) -> "Mode":
        return _enum_of(cls, value, "mode")


class IncidentKind(enum.IntEnum):
    """hr_incident_kind: what went wrong, for Client.report()."""
    BARRIER_TIMEOUT = _lib.HR_INCIDENT_BARRIER_TIMEOUT
    LAUNCH_FAILURE = _lib.HR_INCIDENT_LAUNCH_FAILURE

    @classmethod
    def of(cls, value) -> "IncidentKind":
        return _enum_of(cls, value, "incident kind")


def _enum_of(cls, value, what):
    if isinstance(value, cls):
        return value
    if isinstance(value, str):
        try:
            return cls[value.strip().upper()]
        except KeyError:
            pass
    elif isinstance(value, int) and not isinstance(value, bool):
        try:
            return cls(value)
        except ValueError:
            pass
    names = ", ".join(m.name.lower() for m in cls)
    raise ValueError("bad %s %r (one of: %s)" % (what, value, names))


@dataclass(frozen=True)
class Budget:
    """A consistent copy of a lease's budget (struct hr_budget)."""
    gpu: int
    epoch: int
    mode: Mode
    sms: int
    cluster: int
    headroom: int
    grid: int
    nccl_min_ctas: int
    nccl_max_ctas: int
    nccl_cga_cluster_size: int
    nccl_nvls_enable: int
    degraded: bool
    # Partition mode (docs/partition.md), in every budget: 0 when the GPU
    # cannot be split (or an older daemon did not say).
    partition_granularity: int = 0
    partition_comm_sms: int = 0
    partition_nccl_max_ctas: int = 0

    @classmethod
    def _from_c(cls, b: _lib.Budget_t) -> "Budget":
        # Every field has its struct hr_budget namesake in Budget_t.
        v = {f.name: getattr(b, f.name) for f in fields(cls)}
        v["mode"] = Mode.of(b.mode)
        v["degraded"] = bool(b.degraded)
        return cls(**v)

    def nccl_config(self) -> Dict[str, int]:
        """The ncclConfig_t fields the budget decides, under the names of
        torch's NCCLConfig (min_ctas, max_ctas, cga_cluster_size). Every
        budget decides them, a degraded one too; a field that is 0 (a
        budget from a peer that leaves it out) is left out."""
        out = {}
        if self.nccl_min_ctas > 0:
            out["min_ctas"] = self.nccl_min_ctas
        if self.nccl_max_ctas > 0:
            out["max_ctas"] = self.nccl_max_ctas
        if self.nccl_cga_cluster_size > 0:
            out["cga_cluster_size"] = self.nccl_cga_cluster_size
        return out


@dataclass
class IncidentDetail:
    """struct hr_incident_detail; -1 means unknown."""
    barrier: int = -1
    arrived: int = -1
    expected: int = -1
    sm: int = -1
    grid: int = -1
    timeout_ms: int = -1
    cuda_error: int = -1

    def _to_c(self) -> _lib.IncidentDetail_t:
        d = _lib.IncidentDetail_t()
        for f in fields(self):
            setattr(d, f.name, int(getattr(self, f.name)))
        return d


def _bytes(s: Optional[Union[str, bytes, os.PathLike]], what: str):
    if s is None:
        return None
    if isinstance(s, bytes):
        b = s
    elif isinstance(s, str):
        b = s.encode("utf-8")
    else:
        b = os.fsencode(s)
    if b"\0" in b:
        raise ValueError("%s contains a NUL byte" % what)
    return b


def _int(v, what):
    if isinstance(v, bool) or not isinstance(v, int):
        try:
            return operator.index(v)
        except TypeError:
            raise TypeError("%s must be an int, not %s"
                            % (what, type(v).__name__)) from None
    return v


class _Handle:
    """An object over one C handle (self._ptr, None once freed): _handle()
    is the handle, or InvalidArgument with the subclass's _closed_message
    once it is gone."""

    def _handle(self):
        ptr = self._ptr
        if ptr is None:
            raise InvalidArgument(_lib.HR_EINVAL, self._closed_message)
        return ptr


class _Closable(_Handle):
    """What Client, Partition and Moe share: each owns one C handle that
    close() frees, and that `with` and the garbage collector close too
    (quietly: at interpreter exit the library may be gone already)."""

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


class Client(_Closable):
    """A connection to headroomd (hr_client).

    Client(socket=None, name=None, request_timeout_ms=None,
           reconnect_ms=None, quiet=False, lib=None)

    socket: the daemon's socket path; None: $HEADROOM_SOCKET, else
    /run/headroom/headroom.sock. Opening succeeds without a daemon (the
    client is then degraded and keeps reconnecting in the background; see
    docs/client.md); it raises only on bad arguments, memory, or a daemon
    with no protocol version in common. lib: an explicit path to
    libheadroom.so (see load_library)."""

    def __init__(self, socket=None, name=None, request_timeout_ms=None,
                 reconnect_ms=None, quiet=False, lib=None):
        self._lib = _lib.load_library(lib)
        self._ptr = None
        self._mu = threading.Lock()
        self._children = weakref.WeakSet()
        self._owned = {}             # handle -> Lease or Comm, to free
        self._pid = os.getpid()
        opts = _lib.ClientOptions_t()
        opts.size = ctypes.sizeof(opts)
        opts.name = _bytes(name, "name")
        opts.request_timeout_ms = 0 if request_timeout_ms is None else \
            _int(request_timeout_ms, "request_timeout_ms")
        opts.reconnect_ms = 0 if reconnect_ms is None else \
            _int(reconnect_ms, "reconnect_ms")
        opts.quiet = 1 if quiet else 0
        self.socket = socket if socket is not None else \
            os.environ.get(ENV_SOCKET) or DEFAULT_SOCKET
        out = ctypes.c_void_p()
        check(self._lib.hr_client_open(ctypes.byref(out),
                                       _bytes(socket, "socket"),
                                       ctypes.byref(opts)), "hr_client_open")
        self._ptr = out.value

    # ---- life cycle -------------------------------------------------------

    def close(self) -> None:
        """Release every lease and footprint of the client and disconnect.
        Idempotent. Leases and Comms of this client are unusable after."""
        with self._mu:
            ptr, self._ptr = self._ptr, None
            children = list(self._children)
            self._children = weakref.WeakSet()
            owned, self._owned = self._owned, {}
        if ptr is None:
            return
        forked = os.getpid() != self._pid
        for ch in children:
            # A partition must go before its lease (it reads the lease).
            if isinstance(ch, Lease) and not forked:
                ch._close_partitions()
            ch._ptr = None           # freed here, below
        if forked:
            return                   # a forked child must not close it
        self._lib.hr_client_close(ptr)
        # The handles outlive their client, closed, until freed by their
        # owner (headroom.h, Lifetime): this object owns them all, those of
        # Leases and Comms already collected included.
        for handle, kind in owned.items():
            if kind is Lease:
                self._lib.hr_lease_release(handle)
            else:
                self._lib.hr_comm_unregister(handle)

    _closed_message = "the client is closed"

    @property
    def closed(self) -> bool:
        return self._ptr is None

    def _adopt(self, child) -> None:
        with self._mu:
            self._children.add(child)
            self._owned[child._ptr] = type(child)

    def _forget(self, child, handle) -> bool:
        """False when close() took the handle already (and frees it)."""
        with self._mu:
            self._children.discard(child)
            return self._owned.pop(handle, None) is not None

    # ---- queries ----------------------------------------------------------

    @property
    def connected(self) -> bool:
        """True while connected to a daemon that accepted our hello."""
        return bool(self._lib.hr_client_connected(self._handle()))

    @property
    def gpu_count(self) -> int:
        """GPUs the daemon reported (0 while degraded and never connected)."""
        return check(self._lib.hr_client_gpu_count(self._handle()),
                     "hr_client_gpu_count")

    def gpu_sms(self, gpu: int) -> int:
        """SM count of `gpu` as the daemon reported it (NotFound if unknown)."""
        return check(self._lib.hr_client_gpu_sms(self._handle(),
                                                 _int(gpu, "gpu")),
                     "hr_client_gpu_sms(gpu %s)" % gpu)

    # ---- footprints, leases, incidents ------------------------------------

    def register(self, gpu: int, name: str, ctas: int, cga: int = 1,
                 concurrent: int = 1) -> "Comm":
        """Register the comm footprint of a communicator on `gpu`: `ctas`
        CTAs per collective, CGA cluster size `cga`, `concurrent`
        collectives in flight at once. Returns a Comm (unregister() or
        context manager); it lives until then, or until the client closes."""
        return Comm(self, gpu, name, ctas, cga, concurrent)

    def lease(self, gpu: int, cluster: int = 2,
              mode: Union[Mode, str, int] = Mode.HEADROOM) -> "Lease":
        """Acquire a lease on `gpu` for a mega kernel of `cluster` CTAs per
        cluster (1, 2, 4 or 8) launched in `mode`."""
        return Lease.acquire(self, gpu, cluster, mode)

    def report(self, kind: Union[IncidentKind, str, int] =
               IncidentKind.BARRIER_TIMEOUT, lease: Optional["Lease"] = None,
               detail: Optional[Union[IncidentDetail, dict]] = None,
               message: Optional[str] = None) -> None:
        """Report an incident to the daemon (hr_report). A barrier timeout
        raises that GPU's headroom for every client on it. Without a lease
        the incident is filed against the GPU of the client's oldest lease
        (else oldest footprint, else GPU 0). Raises Degraded when no daemon
        is connected (the incident is then only logged on stderr)."""
        k = IncidentKind.of(kind)
        lp = None
        if lease is not None:
            if lease._client is not self:
                raise ValueError("the lease belongs to another client")
            lp = lease._handle()
        d = None
        if detail is not None:
            if isinstance(detail, dict):
                detail = IncidentDetail(**detail)
            d = ctypes.byref(detail._to_c())
        check(self._lib.hr_report(self._handle(), lp, int(k), d,
                                  _bytes(message, "message")), "hr_report")

    def __repr__(self):
        if self._ptr is None:
            return "<headroom.Client closed>"
        return "<headroom.Client %s %s>" % (
            self.socket, "connected" if self.connected else "degraded")


class Comm:
    """A registered comm footprint (hr_comm)."""

    def __init__(self, client: Client, gpu, name, ctas, cga=1, concurrent=1):
        self._client = client
        self._lib = client._lib
        self._ptr = None
        self.gpu = _int(gpu, "gpu")
        self.name = name
        self.ctas = _int(ctas, "ctas")
        self.cga = _int(cga, "cga")
        self.concurrent = _int(concurrent, "concurrent")
        out = ctypes.c_void_p()
        check(self._lib.hr_comm_register(
            client._handle(), self.gpu, _bytes(name, "name"), self.ctas,
            self.cga, self.concurrent, ctypes.byref(out)),
            "hr_comm_register(gpu %d, %r)" % (self.gpu, name))
        self._ptr = out.value
        client._adopt(self)

    def unregister(self) -> None:
        """Remove the footprint. Idempotent; the Comm is unusable after."""
        ptr, self._ptr = self._ptr, None
        if ptr is None or not self._client._forget(self, ptr):
            return
        check(self._lib.hr_comm_unregister(ptr), "hr_comm_unregister")

    @property
    def registered(self) -> bool:
        return self._ptr is not None

    def __enter__(self) -> "Comm":
        return self

    def __exit__(self, *exc) -> None:
        self.unregister()

    def __repr__(self):
        return "<headroom.Comm %r gpu %d: %d CTAs x %d, cga %d%s>" % (
            self.name, self.gpu, self.ctas, self.concurrent, self.cga,
            "" if self._ptr else " (unregistered)")


class Lease(_Handle):
    """A lease on one GPU (hr_lease). Read .grid at every launch: it is one
    atomic load in the library, updated in place when the daemon pushes a
    new budget."""

    def __init__(self):
        raise TypeError("use Client.lease() or Lease.acquire()")

    @classmethod
    def acquire(cls, client: Client, gpu: int, cluster: int = 2,
                mode: Union[Mode, str, int] = Mode.HEADROOM) -> "Lease":
        self = object.__new__(cls)
        self._client = client
        self._lib = client._lib
        self._ptr = None
        m = Mode.of(mode)
        out = ctypes.c_void_p()
        check(self._lib.hr_lease_acquire(client._handle(), _int(gpu, "gpu"),
                                         _int(cluster, "cluster"), int(m),
                                         ctypes.byref(out)),
              "hr_lease_acquire(gpu %s, cluster %s, %s)"
              % (gpu, cluster, m.name.lower()))
        self._ptr = out.value
        self._partitions = weakref.WeakSet()
        client._adopt(self)
        return self

    def release(self) -> None:
        """Give the lease back. Idempotent; the Lease is unusable after.
        Its partitions are closed first (their streams waited for)."""
        self._close_partitions()
        ptr, self._ptr = self._ptr, None
        if ptr is None or not self._client._forget(self, ptr):
            return
        check(self._lib.hr_lease_release(ptr), "hr_lease_release")

    def _close_partitions(self) -> None:
        for p in list(self._partitions):
            p.close()

    def partition(self) -> "Partition":
        """Split the lease's GPU into green contexts (hr_partition_create):
        needs a lease in Mode.PARTITION. See Partition."""
        return Partition(self)

    def __enter__(self) -> "Lease":
        return self

    def __exit__(self, *exc) -> None:
        self.release()

    _closed_message = "the lease was released (or its client closed)"

    @property
    def handle(self) -> int:
        """The hr_lease pointer, for C code that takes one."""
        return self._handle()

    @property
    def client(self) -> Client:
        return self._client

    @property
    def released(self) -> bool:
        return self._ptr is None

    # ---- the hot path -----------------------------------------------------

    @property
    def grid(self) -> int:
        """CTAs to launch the mega kernel with, now."""
        return check(self._lib.hr_lease_grid(self._handle()), "hr_lease_grid")

    def launch_config(self) -> tuple:
        """(grid, cluster, mode) of the budget in force, from one lock-free
        read: grid and cluster size always belong to the same budget."""
        grid, cluster, mode = ctypes.c_int(), ctypes.c_int(), ctypes.c_int()
        check(self._lib.hr_lease_launch_config(self._handle(),
                                               ctypes.byref(grid),
                                               ctypes.byref(cluster),
                                               ctypes.byref(mode)),
              "hr_lease_launch_config")
        return grid.value, cluster.value, Mode(mode.value)

    @property
    def headroom(self) -> int:
        """SMs left free for communication kernels, now."""
        return check(self._lib.hr_lease_headroom(self._handle()),
                     "hr_lease_headroom")

    @property
    def epoch(self) -> int:
        """Goes up by one with every change of this GPU's budget."""
        return int(self._lib.hr_lease_epoch(self._handle()))

    @property
    def degraded(self) -> bool:
        """True while the budget comes from the environment (no daemon)."""
        return bool(check(self._lib.hr_lease_degraded(self._handle()),
                          "hr_lease_degraded"))

    @property
    def gpu(self) -> int:
        return check(self._lib.hr_lease_gpu(self._handle()), "hr_lease_gpu")

    # ---- slow path --------------------------------------------------------

    def budget(self) -> Budget:
        """A consistent copy of the whole budget."""
        b = _lib.Budget_t()
        check(self._lib.hr_lease_budget_sized(self._handle(), ctypes.byref(b),
                                              ctypes.sizeof(b)),
              "hr_lease_budget")
        return Budget._from_c(b)

    def wait_change(self, epoch: Optional[int] = None,
                    timeout_ms: int = 5000) -> bool:
        """Wait until the lease's epoch differs from `epoch` (default: the
        epoch now) or `timeout_ms` passes. True when it changed, False on
        timeout. For tools and tests; trainers read .grid."""
        ptr = self._handle()
        if epoch is None:
            epoch = check(self._lib.hr_lease_epoch(ptr), "hr_lease_epoch")
        rc = self._lib.hr_lease_wait_change(ptr, int(epoch) & 0xffffffff,
                                            _int(timeout_ms, "timeout_ms"))
        if rc == _lib.HR_ETIMEDOUT:
            return False
        check(rc, "hr_lease_wait_change")
        return True

    def export_env(self) -> Dict[str, str]:
        """Set DG_MEGA_MOE_SM_HEADROOM, NCCL_MIN_CTAS, NCCL_MAX_CTAS,
        NCCL_CGA_CLUSTER_SIZE (each NCCL one only when the budget decides
        it) and NCCL_NVLS_ENABLE=0 in the process environment, for
        libraries that read it: both the C environment (what NCCL and
        DeepGEMM's C++ read, and what child processes inherit) and
        os.environ. Returns the variables set. Call it before those
        libraries initialise; not while other threads read the
        environment."""
        ptr = self._handle()
        b = self.budget()
        names = ["DG_MEGA_MOE_SM_HEADROOM"]
        for name, v in (("NCCL_MIN_CTAS", b.nccl_min_ctas),
                        ("NCCL_MAX_CTAS", b.nccl_max_ctas),
                        ("NCCL_CGA_CLUSTER_SIZE", b.nccl_cga_cluster_size)):
            if v > 0:
                names.append(name)
        names.append("NCCL_NVLS_ENABLE")
        check(self._lib.hr_lease_export_env(ptr), "hr_lease_export_env")
        # The library called setenv(); os.environ is Python's own copy,
        # taken at start-up, so bring it in line with what was set.
        out = {}
        getenv = _libc_getenv()
        for name in names:
            v = getenv(name.encode())
            if v is None:
                continue
            v = v.decode()
            if os.environ.get(name) != v:
                os.environ[name] = v
            out[name] = v
        return out

    def nccl_config(self) -> Dict[str, int]:
        """The ncclConfig_t fields the budget decides (see Budget)."""
        return self.budget().nccl_config()

    def __repr__(self):
        if self._ptr is None:
            return "<headroom.Lease released>"
        b = self.budget()
        return "<headroom.Lease gpu %d: grid %d, headroom %d, epoch %d%s>" % (
            b.gpu, b.grid, b.headroom, b.epoch,
            ", degraded" if b.degraded else "")


class Partition(_Closable):
    """Two green contexts on the GPU of a lease in Mode.PARTITION
    (hr_partition): a comm partition of budget.headroom SMs and a mega
    partition of the other budget.grid SMs, each with a non-blocking
    stream. Kernels enqueued on those streams stay on their partition's
    SMs; kernels on any other stream (every ordinary torch stream, the
    default stream, other libraries' streams) are not confined and run on
    every SM (docs/partition.md).

        lease = client.lease(0, cluster=1, mode="partition")
        with lease.partition() as part:
            comm = torch.cuda.ExternalStream(part.comm_stream)
            mega = torch.cuda.ExternalStream(part.mega_stream)
            moe.forward(lease, ..., stream=mega)

    The split is fixed: when `stale` turns True (the daemon changed the
    GPU's budget), make a new Partition and move new work to its streams.
    close() (or leaving the `with` block, or releasing the lease) waits for
    both streams, then destroys them and the contexts."""

    def __init__(self, lease: Lease):
        if not isinstance(lease, Lease):
            raise TypeError("lease must be a headroom.Lease, not %s"
                            % type(lease).__name__)
        self._lease = lease            # the lease must outlive the partition
        self._lib = lease._lib
        self._ptr = None
        self._pid = os.getpid()
        out = ctypes.c_void_p()
        check(self._lib.hr_partition_create(lease._handle(),
                                            ctypes.byref(out)),
              "hr_partition_create(gpu %d)" % lease.gpu)
        self._ptr = out.value
        lease._partitions.add(self)

    def close(self) -> None:
        """Wait for both streams, then destroy them and the green
        contexts. Idempotent; the Partition is unusable after."""
        ptr, self._ptr = self._ptr, None
        if ptr is None:
            return
        self._lease._partitions.discard(self)
        if os.getpid() != self._pid:
            return           # a forked child has no CUDA of the parent's
        self._lib.hr_partition_destroy(ptr)

    _closed_message = "the partition is closed"

    @property
    def closed(self) -> bool:
        return self._ptr is None

    @property
    def lease(self) -> Lease:
        return self._lease

    @property
    def comm_stream(self) -> int:
        """The comm partition's CUstream, as an integer: give it to
        torch.cuda.ExternalStream, or to NCCL as its cudaStream_t."""
        return int(self._lib.hr_partition_comm_stream(self._handle()) or 0)

    @property
    def mega_stream(self) -> int:
        """The mega partition's CUstream, as an integer."""
        return int(self._lib.hr_partition_mega_stream(self._handle()) or 0)

    def stream(self, side: str = "comm") -> int:
        """One more non-blocking stream on `side` ("comm" or "mega"), as
        an integer CUstream (hr_partition_stream_create): one per
        communicator whose collectives may run at once. It belongs to the
        partition and goes with close(); at most 32 per partition."""
        sides = {"comm": 0, "mega": 1}
        if side not in sides:
            raise InvalidArgument(_lib.HR_EINVAL,
                                  "side must be 'comm' or 'mega', not %r"
                                  % (side,))
        out = ctypes.c_void_p()
        check(self._lib.hr_partition_stream_create(self._handle(),
                                                   sides[side],
                                                   ctypes.byref(out)),
              "hr_partition_stream_create(%s)" % side)
        return int(out.value or 0)

    @property
    def comm_sms(self) -> int:
        """SMs of the comm partition, as the driver made it."""
        return check(self._lib.hr_partition_comm_sms(self._handle()),
                     "hr_partition_comm_sms")

    @property
    def mega_sms(self) -> int:
        """SMs of the mega partition, as the driver made it."""
        return check(self._lib.hr_partition_mega_sms(self._handle()),
                     "hr_partition_mega_sms")

    @property
    def epoch(self) -> int:
        """The lease epoch the partition was made for."""
        return check(self._lib.hr_partition_epoch(self._handle()),
                     "hr_partition_epoch")

    @property
    def stale(self) -> bool:
        """True once the lease's budget has moved on since the split."""
        return bool(check(self._lib.hr_partition_stale(self._handle()),
                          "hr_partition_stale"))

    def __repr__(self):
        if self._ptr is None:
            return "<headroom.Partition closed>"
        return "<headroom.Partition gpu %d: comm %d SMs, mega %d SMs%s>" % (
            self._lease.gpu, self.comm_sms, self.mega_sms,
            ", stale" if self.stale else "")


_getenv = None


def _libc_getenv():
    global _getenv
    if _getenv is None:
        fn = ctypes.CDLL(None).getenv
        fn.restype = ctypes.c_char_p
        fn.argtypes = [ctypes.c_char_p]
        _getenv = fn
    return _getenv

