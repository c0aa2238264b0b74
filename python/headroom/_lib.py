"""Loading libheadroom and libheadroom_moe, and their C prototypes.

Everything here mirrors client/headroom.h and kernels/headroom_moe.h: the
structs as ctypes.Structure subclasses (field for field, in order) and one
argtypes/restype declaration per exported function, so a wrong argument is
refused by ctypes instead of being passed through as garbage.

Where the libraries are found, first match wins:

  libheadroom      an explicit path (load_library(path) or Client(lib=...)),
                   else $HEADROOM_LIB, else build/lib of the source tree this
                   package sits in (python/headroom -> ../../build/lib),
                   else the system loader's libheadroom.so.0
  libheadroom_moe  an explicit path (load_moe_library(path) or Moe(lib=...)),
                   else $HEADROOM_MOE_LIB, else the same build/lib, else
                   the folder libheadroom came from, else the system
                   loader's libheadroom_moe.so

libheadroom is always loaded before libheadroom_moe, so the latter's
dependency on libheadroom.so.0 binds to the copy already in the process
(the dynamic loader matches it by soname) and leases made here are the
leases the kernel library reads.
"""
from __future__ import annotations

import ctypes
import os
import threading
from ctypes import (POINTER, Structure, c_char_p, c_int, c_int64, c_size_t,
                    c_uint, c_uint32, c_uint64, c_void_p)

__all__ = [
    "HR_OK", "CODES", "load_library", "load_moe_library", "library_path",
    "moe_library_path", "Budget_t", "IncidentDetail_t", "ClientOptions_t",
    "MoeShape_t", "MoeArgs_t", "MoeFailure_t", "MoeGradArgs_t",
    "MoeEPBootstrap_t", "MoeEPFailure_t", "EP_ALLGATHER", "has_symbol",
]

# ---- error codes (headroom.h) ---------------------------------------------

HR_OK = 0
HR_EINVAL = -1
HR_ENOMEM = -2
HR_ECONNECT = -3
HR_EPROTO = -4
HR_EVERSION = -5
HR_EPERM = -6
HR_ENOTFOUND = -7
HR_ELIMIT = -8
HR_ETIMEDOUT = -9
HR_ECLOSED = -10
HR_EDEGRADED = -11
HR_ETOOLARGE = -12
HR_EINTERNAL = -13
HR_EUNSUPPORTED = -14
HR_ESHUTDOWN = -15
HR_EHELLO = -16
HR_ENOGPU = -20
HR_ECUDA = -21
HR_EBARRIER_TIMEOUT = -22
HR_ECOOP_TOO_LARGE = -23
HR_EABORTED = -24

# Symbolic names, for messages and tests.
CODES = {
    HR_OK: "HR_OK",
    HR_EINVAL: "HR_EINVAL",
    HR_ENOMEM: "HR_ENOMEM",
    HR_ECONNECT: "HR_ECONNECT",
    HR_EPROTO: "HR_EPROTO",
    HR_EVERSION: "HR_EVERSION",
    HR_EPERM: "HR_EPERM",
    HR_ENOTFOUND: "HR_ENOTFOUND",
    HR_ELIMIT: "HR_ELIMIT",
    HR_ETIMEDOUT: "HR_ETIMEDOUT",
    HR_ECLOSED: "HR_ECLOSED",
    HR_EDEGRADED: "HR_EDEGRADED",
    HR_ETOOLARGE: "HR_ETOOLARGE",
    HR_EINTERNAL: "HR_EINTERNAL",
    HR_EUNSUPPORTED: "HR_EUNSUPPORTED",
    HR_ESHUTDOWN: "HR_ESHUTDOWN",
    HR_EHELLO: "HR_EHELLO",
    HR_ENOGPU: "HR_ENOGPU",
    HR_ECUDA: "HR_ECUDA",
    HR_EBARRIER_TIMEOUT: "HR_EBARRIER_TIMEOUT",
    HR_ECOOP_TOO_LARGE: "HR_ECOOP_TOO_LARGE",
    HR_EABORTED: "HR_EABORTED",
}

HR_MODE_HEADROOM = 0
HR_MODE_COOPERATIVE = 1
HR_MODE_AGNOSTIC = 2
HR_MODE_PARTITION = 3
HR_INCIDENT_BARRIER_TIMEOUT = 0
HR_INCIDENT_LAUNCH_FAILURE = 1

HR_MOE_MAX_EXPERTS = 512
HR_MOE_MAX_TOPK = 32
HR_MOE_DEFAULT_TIMEOUT_MS = 10000
# hr_moe_grad_args.dw_dtype: what the backward writes dw1 and dw2 in.
HR_MOE_DW_FP32 = 0
HR_MOE_DW_BF16 = 1

# ---- expert parallel (headroom_moe.h, "expert parallel (EP)") ---------------
HR_MOE_EP_MAX_RANKS = 8
# hr_moe_ep_bootstrap.exchange
HR_MOE_EP_EXCHANGE_AUTO = 0
HR_MOE_EP_EXCHANGE_POINTERS = 1
HR_MOE_EP_EXCHANGE_IPC = 2
# hr_moe_ep_failure.wait and .noticed_wait
HR_MOE_EP_WAIT_ROUTE = 0
HR_MOE_EP_WAIT_GEMM1 = 1
HR_MOE_EP_WAIT_GEMM2 = 2
HR_MOE_EP_WAIT_SENT = 3
HR_MOE_EP_WAIT_RETURNED = 4
HR_MOE_EP_WAIT_TMA = 15
HR_MOE_EP_WAIT_DISPATCH = 40
HR_MOE_EP_WAIT_RETURN = 41
HR_MOE_EP_WAIT_START = 42
# Names for messages, with the waits the header numbers without names:
# 11..14 the agnostic form's (hr_moe's agnostic kernel's), 20..22 the
# backward's grid barriers, 31..34 its agnostic waits (moe_kernel.h,
# moe_backward.h).
EP_WAIT_NAMES = {
    HR_MOE_EP_WAIT_ROUTE: "route",
    HR_MOE_EP_WAIT_GEMM1: "gemm1",
    HR_MOE_EP_WAIT_GEMM2: "gemm2",
    HR_MOE_EP_WAIT_SENT: "sent",
    HR_MOE_EP_WAIT_RETURNED: "returned",
    11: "agnostic scatter wait",
    12: "agnostic gemm1 wait",
    13: "agnostic gemm2 wait",
    14: "agnostic claim",
    HR_MOE_EP_WAIT_TMA: "tma",
    20: "backward route",
    21: "backward dgu",
    22: "backward grads",
    31: "backward agnostic route wait",
    32: "backward agnostic dgu wait",
    33: "backward agnostic dx wait",
    34: "backward agnostic claim",
    HR_MOE_EP_WAIT_DISPATCH: "dispatch",
    HR_MOE_EP_WAIT_RETURN: "return",
    HR_MOE_EP_WAIT_START: "start",
}

# ---- structs ---------------------------------------------------------------


class Budget_t(Structure):
    """struct hr_budget"""
    _fields_ = [
        ("gpu", c_int),
        ("epoch", c_uint32),
        ("mode", c_int),               # hr_mode: an int-sized enum
        ("sms", c_int),
        ("cluster", c_int),
        ("headroom", c_int),
        ("grid", c_int),
        ("nccl_min_ctas", c_int),
        ("nccl_max_ctas", c_int),
        ("nccl_cga_cluster_size", c_int),
        ("nccl_nvls_enable", c_int),
        ("degraded", c_int),
        ("partition_granularity", c_int),
        ("partition_comm_sms", c_int),
        ("partition_nccl_max_ctas", c_int),
    ]


class IncidentDetail_t(Structure):
    """struct hr_incident_detail"""
    _fields_ = [
        ("barrier", c_int),
        ("arrived", c_int),
        ("expected", c_int),
        ("sm", c_int),
        ("grid", c_int),
        ("timeout_ms", c_int),
        ("cuda_error", c_int),
    ]


class ClientOptions_t(Structure):
    """struct hr_client_options; set size to sizeof (versioned by size)."""
    _fields_ = [
        ("size", c_size_t),
        ("name", c_char_p),
        ("request_timeout_ms", c_int),
        ("reconnect_ms", c_int),
        ("quiet", c_int),
    ]


class MoeShape_t(Structure):
    """struct hr_moe_shape"""
    _fields_ = [
        ("experts", c_int),
        ("hidden", c_int),
        ("inter", c_int),
        ("topk", c_int),
        ("max_tokens", c_int),
    ]


class MoeArgs_t(Structure):
    """struct hr_moe_args"""
    _fields_ = [
        ("tokens", c_int),
        ("experts", c_int),
        ("hidden", c_int),
        ("inter", c_int),
        ("topk", c_int),
        ("x", c_void_p),
        ("topk_ids", c_void_p),
        ("topk_weights", c_void_p),
        ("w1", c_void_p),
        ("w2", c_void_p),
        ("y", c_void_p),
        ("gate_up", c_void_p),
        ("timeout_ms", c_int),
    ]


class MoeFailure_t(Structure):
    """struct hr_moe_failure"""
    _fields_ = [
        ("code", c_int),
        ("detail", IncidentDetail_t),
        ("cta", c_int),
        ("reported", c_int),
    ]


class MoeGradArgs_t(Structure):
    """struct hr_moe_grad_args"""
    _fields_ = [
        ("fwd", MoeArgs_t),
        ("dy", c_void_p),
        ("dx", c_void_p),
        ("dw1", c_void_p),
        ("dw2", c_void_p),
        ("dtopk_weights", c_void_p),
        ("dw_dtype", c_int),
    ]


# hr_moe_ep_bootstrap.allgather: int (*)(void *ctx, const void *send,
# void *recv, size_t bytes_per_rank).
EP_ALLGATHER = ctypes.CFUNCTYPE(c_int, c_void_p, c_void_p, c_void_p, c_size_t)


class MoeEPBootstrap_t(Structure):
    """struct hr_moe_ep_bootstrap. `backward` (1: room for
    hr_moe_ep_backward too) came with the EP backward: a library built
    before it has a struct of three fields, the same size (the int fills
    what was padding), and never reads the fourth, so 0 there is
    harmless; the binding sets 1 only where the library exports
    hr_moe_ep_backward."""
    _fields_ = [
        ("allgather", EP_ALLGATHER),
        ("ctx", c_void_p),
        ("exchange", c_int),
        ("backward", c_int),
    ]


class MoeEPFailure_t(Structure):
    """struct hr_moe_ep_failure"""
    _fields_ = [
        ("code", c_int),
        ("failed_rank", c_int),
        ("wait", c_int),
        ("waited_for", c_int),
        ("noticed_wait", c_int),
        ("epoch", c_uint32),
        ("local", MoeFailure_t),
    ]


# Opaque handles travel as void pointers.
_client_p = c_void_p
_comm_p = c_void_p
_lease_p = c_void_p
_moe_p = c_void_p
_moe_ep_p = c_void_p
_partition_p = c_void_p

# name: (restype, argtypes), for every function of headroom.h.
# hr_lease_fill_nccl_config is an inline function of the header (it needs
# nccl.h), not a symbol of the library: nccl_options() does its job here;
# hr_lease_budget is a macro over hr_lease_budget_sized.
_PROTOTYPES = {
    "hr_strerror": (c_char_p, [c_int]),
    "hr_version": (c_uint, []),
    "hr_version_string": (c_char_p, []),
    "hr_mode_name": (c_char_p, [c_int]),
    "hr_incident_kind_name": (c_char_p, [c_int]),
    "hr_client_open": (c_int, [POINTER(_client_p), c_char_p,
                               POINTER(ClientOptions_t)]),
    "hr_client_close": (None, [_client_p]),
    "hr_client_connected": (c_int, [_client_p]),
    "hr_client_gpu_count": (c_int, [_client_p]),
    "hr_client_gpu_sms": (c_int, [_client_p, c_int]),
    "hr_comm_register": (c_int, [_client_p, c_int, c_char_p, c_int, c_int,
                                 c_int, POINTER(_comm_p)]),
    "hr_comm_unregister": (c_int, [_comm_p]),
    "hr_lease_acquire": (c_int, [_client_p, c_int, c_int, c_int,
                                 POINTER(_lease_p)]),
    "hr_lease_release": (c_int, [_lease_p]),
    "hr_lease_grid": (c_int, [_lease_p]),
    "hr_lease_headroom": (c_int, [_lease_p]),
    "hr_lease_epoch": (c_int64, [_lease_p]),
    "hr_lease_degraded": (c_int, [_lease_p]),
    "hr_lease_launch_config": (c_int, [_lease_p, POINTER(c_int),
                                       POINTER(c_int), POINTER(c_int)]),
    "hr_lease_budget_sized": (c_int, [_lease_p, POINTER(Budget_t), c_size_t]),
    "hr_lease_gpu": (c_int, [_lease_p]),
    "hr_lease_client": (_client_p, [_lease_p]),
    "hr_lease_wait_change": (c_int, [_lease_p, c_uint32, c_int]),
    "hr_lease_export_env": (c_int, [_lease_p]),
    "hr_report": (c_int, [_client_p, _lease_p, c_int,
                          POINTER(IncidentDetail_t), c_char_p]),
    "hr_partition_create": (c_int, [_lease_p, POINTER(_partition_p)]),
    "hr_partition_destroy": (None, [_partition_p]),
    "hr_partition_comm_stream": (c_void_p, [_partition_p]),
    "hr_partition_mega_stream": (c_void_p, [_partition_p]),
    "hr_partition_stream_create": (c_int, [_partition_p, c_int,
                                           POINTER(c_void_p)]),
    "hr_partition_comm_sms": (c_int, [_partition_p]),
    "hr_partition_mega_sms": (c_int, [_partition_p]),
    "hr_partition_epoch": (c_int64, [_partition_p]),
    "hr_partition_stale": (c_int, [_partition_p]),
}

# Every function of headroom_moe.h.
_MOE_PROTOTYPES = {
    "hr_moe_create": (c_int, [POINTER(_moe_p), c_int, POINTER(MoeShape_t)]),
    "hr_moe_destroy": (None, [_moe_p]),
    "hr_moe_sms": (c_int, [_moe_p]),
    "hr_moe_workspace_bytes": (c_uint64, [_moe_p]),
    "hr_moe_forward": (c_int, [_moe_p, _lease_p, POINTER(MoeArgs_t),
                               c_void_p]),
    "hr_moe_forward_grid": (c_int, [_moe_p, c_int, c_int, c_int,
                                    POINTER(MoeArgs_t), c_void_p]),
    "hr_moe_forward_agnostic_grid": (c_int, [_moe_p, c_int, POINTER(MoeArgs_t),
                                             c_void_p]),
    "hr_moe_outputs_ready": (c_int, [_moe_p]),
    "hr_moe_sync": (c_int, [_moe_p]),
    "hr_moe_sync_timeout": (c_int, [_moe_p, c_int]),
    "hr_moe_last_failure": (c_int, [_moe_p, POINTER(MoeFailure_t)]),
    "hr_moe_abort": (c_int, [_moe_p]),
    "hr_moe_backward_prepare": (c_int, [_moe_p]),
    "hr_moe_backward": (c_int, [_moe_p, _lease_p, POINTER(MoeGradArgs_t),
                                c_void_p]),
    "hr_moe_backward_grid": (c_int, [_moe_p, c_int, c_int,
                                     POINTER(MoeGradArgs_t), c_void_p]),
    # expert parallel
    "hr_moe_ep_memory": (c_int, [POINTER(MoeShape_t), c_int, POINTER(c_uint64),
                                 POINTER(c_uint64)]),
    "hr_moe_ep_memory_backward": (c_int, [POINTER(MoeShape_t), c_int,
                                          POINTER(c_uint64),
                                          POINTER(c_uint64)]),
    "hr_moe_ep_create": (c_int, [POINTER(_moe_ep_p), c_int,
                                 POINTER(MoeShape_t), c_int, c_int,
                                 POINTER(MoeEPBootstrap_t)]),
    "hr_moe_ep_destroy": (None, [_moe_ep_p]),
    "hr_moe_ep_forward": (c_int, [_moe_ep_p, _lease_p, POINTER(MoeArgs_t),
                                  c_void_p]),
    "hr_moe_ep_forward_grid": (c_int, [_moe_ep_p, c_int, c_int,
                                       POINTER(MoeArgs_t), c_void_p]),
    "hr_moe_ep_sync": (c_int, [_moe_ep_p]),
    "hr_moe_ep_sync_timeout": (c_int, [_moe_ep_p, c_int]),
    "hr_moe_ep_last_failure": (c_int, [_moe_ep_p, POINTER(MoeEPFailure_t)]),
    "hr_moe_ep_abort": (c_int, [_moe_ep_p]),
    # The EP backward: declared where the library has it (below).
    "hr_moe_ep_backward": (c_int, [_moe_ep_p, _lease_p, POINTER(MoeGradArgs_t),
                                   c_void_p]),
    "hr_moe_ep_backward_grid": (c_int, [_moe_ep_p, c_int, c_int,
                                        POINTER(MoeGradArgs_t), c_void_p]),
}

# Functions of _MOE_PROTOTYPES that a library built before them lacks:
# declared when present, and has_symbol() says which. A library built
# before the EP backward has none of these three: MoeEP.backward then
# raises NotImplementedError and creation never asks for its memory.
_MOE_OPTIONAL = frozenset(("hr_moe_ep_backward", "hr_moe_ep_backward_grid",
                           "hr_moe_ep_memory_backward"))

_lock = threading.Lock()
_lib = None
_lib_path = None
_moe = None
_moe_path = None


def _build_lib_dir() -> str:
    """build/lib of the source tree this package sits in."""
    here = os.path.dirname(os.path.abspath(__file__))
    build = os.environ.get("HEADROOM_BUILD") or "build"
    root = os.path.dirname(os.path.dirname(here))
    return os.path.join(root, build, "lib")


def _declare(lib, prototypes, optional=frozenset()):
    for name, (restype, argtypes) in prototypes.items():
        if name in optional and not hasattr(lib, name):
            continue
        fn = getattr(lib, name)      # AttributeError names a missing symbol
        fn.restype = restype
        fn.argtypes = argtypes


def _candidates(path, env, filename, soname, extra_dirs=()):
    """Where to look, in order, as (path, how it was chosen)."""
    if path:
        return [(os.fspath(path), "argument")]
    if os.environ.get(env):
        return [(os.environ[env], "$" + env)]
    out = []
    for d in (_build_lib_dir(),) + tuple(extra_dirs):
        for f in (soname, filename):
            p = os.path.join(d, f)
            if os.path.exists(p):
                out.append((p, "build tree"))
                break
    out.append((soname, "system loader"))
    return out


# What to do when a library is not found, by the variable that names it.
_HOW_TO_FIX = (
    "set {env} to its path (e.g. {env}=/path/to/headroom/build/lib/{so}), "
    "or install it: make install in the source tree (PREFIX=/usr/local "
    "by default), then ldconfig so that the system loader finds {so}{extra}")


def _open(cands, what, env, soname):
    errors = []
    for p, how in cands:
        try:
            return ctypes.CDLL(p), p
        except OSError as e:
            errors.append("%s (%s): %s" % (p, how, e))
            if how in ("argument", "$HEADROOM_LIB", "$HEADROOM_MOE_LIB"):
                break          # an explicit choice is not second-guessed
    extra = ""
    if env == "HEADROOM_MOE_LIB":
        extra = " (the kernels build only where nvcc is: make kernels)"
    raise OSError("cannot load %s; tried: %s. To fix: %s" % (
        what, "; ".join(errors),
        _HOW_TO_FIX.format(env=env, so=soname, extra=extra)))


def _loaded(lib, lib_path, path, what):
    """The handle already loaded from lib_path; RuntimeError when an
    explicit `path` names another file, since a second copy would have
    state of its own."""
    if path and os.path.realpath(os.fspath(path)) != \
            os.path.realpath(lib_path):
        raise RuntimeError("%s is already loaded from %s" % (what, lib_path))
    return lib


def load_library(path=None):
    """Load libheadroom once per process and return the ctypes handle.

    The first call decides; a later call with a different explicit path
    raises RuntimeError rather than loading a second copy."""
    global _lib, _lib_path
    with _lock:
        if _lib is not None:
            return _loaded(_lib, _lib_path, path, "libheadroom")
        lib, p = _open(_candidates(path, "HEADROOM_LIB", "libheadroom.so",
                                   "libheadroom.so.0"), "libheadroom",
                       "HEADROOM_LIB", "libheadroom.so.0")
        _declare(lib, _PROTOTYPES)
        _lib, _lib_path = lib, p
        return lib


def load_moe_library(path=None):
    """Load libheadroom_moe (after libheadroom) and return its handle."""
    global _moe, _moe_path
    load_library()
    with _lock:
        if _moe is not None:
            return _loaded(_moe, _moe_path, path, "libheadroom_moe")
        extra = ()
        if _lib_path and os.sep in _lib_path:
            extra = (os.path.dirname(os.path.abspath(_lib_path)),)
        lib, p = _open(_candidates(path, "HEADROOM_MOE_LIB",
                                   "libheadroom_moe.so", "libheadroom_moe.so",
                                   extra), "libheadroom_moe",
                       "HEADROOM_MOE_LIB", "libheadroom_moe.so")
        _declare(lib, _MOE_PROTOTYPES, _MOE_OPTIONAL)
        _moe, _moe_path = lib, p
        return lib


def has_symbol(lib, name: str) -> bool:
    """Whether the loaded library `lib` exports `name` (for the optional
    functions of _MOE_OPTIONAL: a library built before them lacks them)."""
    try:
        getattr(lib, name)
    except AttributeError:
        return False
    return True


def library_path():
    """Where libheadroom was loaded from (None before the first load)."""
    return _lib_path


def moe_library_path():
    """Where libheadroom_moe was loaded from (None before the first load)."""
    return _moe_path


def strerror(code: int) -> str:
    """hr_strerror's text for an HR_E* code."""
    s = load_library().hr_strerror(int(code))
    return s.decode("utf-8", "replace") if s else "unknown error %d" % code
