"""Exceptions: one class per HR_E* code, all under HeadroomError.

A negative return code of the C library becomes an exception carrying the
code (.code), its symbolic name (.code_name, "HR_ENOTFOUND") and
hr_strerror's text (.strerror). HR_EBARRIER_TIMEOUT is BarrierTimeout,
which also carries what the kernel recorded (.failure) when known, and
so does HR_EABORTED (Aborted) for an expert-parallel launch.
"""
from __future__ import annotations

from . import _lib

__all__ = [
    "HeadroomError", "InvalidArgument", "OutOfMemory", "ConnectError",
    "ProtocolError", "VersionMismatch", "PermissionDenied", "NotFound",
    "LimitReached", "TimedOut", "ConnectionClosed", "Degraded", "TooLarge",
    "InternalError", "Unsupported", "ShuttingDown", "HelloRequired", "NoGPU",
    "CudaError", "BarrierTimeout", "CooperativeTooLarge", "Aborted",
    "error_class", "check",
]


class HeadroomError(Exception):
    """A libheadroom call failed with a negative HR_E* code."""

    def __init__(self, code: int, context: str = ""):
        self.code = int(code)
        self.code_name = _lib.CODES.get(self.code, "HR_E(%d)" % self.code)
        try:
            self.strerror = _lib.strerror(self.code)
        except OSError:
            self.strerror = self.code_name
        self.context = context
        msg = "%s (%s)" % (self.strerror, self.code_name)
        if context:
            msg = "%s: %s" % (context, msg)
        super().__init__(msg)

    def __reduce__(self):
        return (self.__class__, (self.code, self.context))


class InvalidArgument(HeadroomError, ValueError):
    """HR_EINVAL: an argument is out of range or NULL."""


class OutOfMemory(HeadroomError):
    """HR_ENOMEM"""


class ConnectError(HeadroomError):
    """HR_ECONNECT: no daemon answered on the socket."""


class ProtocolError(HeadroomError):
    """HR_EPROTO"""


class VersionMismatch(HeadroomError):
    """HR_EVERSION: no protocol version in common with the daemon."""


class PermissionDenied(HeadroomError):
    """HR_EPERM: an operator-only request from a non-operator."""


class NotFound(HeadroomError, LookupError):
    """HR_ENOTFOUND: no such GPU, footprint or lease."""


class LimitReached(HeadroomError):
    """HR_ELIMIT"""


class TimedOut(HeadroomError):
    """HR_ETIMEDOUT: the daemon did not answer in time, or a bounded wait
    ran out."""


class ConnectionClosed(HeadroomError):
    """HR_ECLOSED"""


class Degraded(HeadroomError):
    """HR_EDEGRADED: needs the daemon; running on the fallback."""


class TooLarge(HeadroomError):
    """HR_ETOOLARGE"""


class InternalError(HeadroomError):
    """HR_EINTERNAL"""


class Unsupported(HeadroomError):
    """HR_EUNSUPPORTED"""


class ShuttingDown(HeadroomError):
    """HR_ESHUTDOWN"""


class HelloRequired(HeadroomError):
    """HR_EHELLO"""


class NoGPU(HeadroomError):
    """HR_ENOGPU: no CUDA driver or device in this process."""


class CudaError(HeadroomError):
    """HR_ECUDA: a CUDA call failed."""


def _failure_text(failure) -> str:
    """What a failure record says, for an exception's message: an
    MoeFailure (one context's grid barrier) or an MoeEPFailure (an
    expert-parallel launch: which rank failed where, and where this rank
    noticed)."""
    if hasattr(failure, "failed_rank"):
        names = _lib.EP_WAIT_NAMES
        text = "epoch %d: rank %d failed at %s" % (
            failure.epoch, failure.failed_rank,
            names.get(failure.wait, "wait %d" % failure.wait))
        if failure.waited_for >= 0:
            text += " waiting for rank %d" % failure.waited_for
        text += "; this rank stopped at %s" % names.get(
            failure.noticed_wait, "wait %d" % failure.noticed_wait)
        loc = failure.local
        if loc is not None:
            text += " (%d of %d arrived, grid %d, timeout %d ms)" % (
                loc.arrived, loc.expected, loc.grid, loc.timeout_ms)
        return text
    return ("barrier %d: %d of %d CTAs arrived (SM %d, grid %d, "
            "timeout %d ms)" % (failure.barrier, failure.arrived,
                                failure.expected, failure.sm,
                                failure.grid, failure.timeout_ms))


class BarrierTimeout(HeadroomError):
    """HR_EBARRIER_TIMEOUT: a grid barrier of the mega kernel timed out and
    the kernel left; the CUDA context is healthy and the next launch works.

    .failure is a MoeFailure (barrier, arrived, expected, sm, grid,
    timeout_ms, cta, reported) when the kernel library recorded one, an
    MoeEPFailure (failed_rank, wait, waited_for, noticed_wait, epoch, and
    this rank's MoeFailure as .local) for an expert-parallel launch, else
    None."""

    def __init__(self, code: int = _lib.HR_EBARRIER_TIMEOUT,
                 context: str = "", failure=None):
        self.failure = failure
        if failure is not None:
            extra = _failure_text(failure)
            context = "%s; %s" % (context, extra) if context else extra
        super().__init__(code, context)


class CooperativeTooLarge(HeadroomError):
    """HR_ECOOP_TOO_LARGE: a cooperative grid larger than the device."""


class Aborted(HeadroomError):
    """HR_EABORTED: the kernel was aborted through its abort word.

    .failure: for an expert-parallel launch, the MoeEPFailure naming the
    rank whose abort ended it (failed_rank) and where; else None."""

    def __init__(self, code: int = _lib.HR_EABORTED, context: str = "",
                 failure=None):
        self.failure = failure
        if failure is not None:
            extra = _failure_text(failure)
            context = "%s; %s" % (context, extra) if context else extra
        super().__init__(code, context)


_BY_CODE = {
    _lib.HR_EINVAL: InvalidArgument,
    _lib.HR_ENOMEM: OutOfMemory,
    _lib.HR_ECONNECT: ConnectError,
    _lib.HR_EPROTO: ProtocolError,
    _lib.HR_EVERSION: VersionMismatch,
    _lib.HR_EPERM: PermissionDenied,
    _lib.HR_ENOTFOUND: NotFound,
    _lib.HR_ELIMIT: LimitReached,
    _lib.HR_ETIMEDOUT: TimedOut,
    _lib.HR_ECLOSED: ConnectionClosed,
    _lib.HR_EDEGRADED: Degraded,
    _lib.HR_ETOOLARGE: TooLarge,
    _lib.HR_EINTERNAL: InternalError,
    _lib.HR_EUNSUPPORTED: Unsupported,
    _lib.HR_ESHUTDOWN: ShuttingDown,
    _lib.HR_EHELLO: HelloRequired,
    _lib.HR_ENOGPU: NoGPU,
    _lib.HR_ECUDA: CudaError,
    _lib.HR_EBARRIER_TIMEOUT: BarrierTimeout,
    _lib.HR_ECOOP_TOO_LARGE: CooperativeTooLarge,
    _lib.HR_EABORTED: Aborted,
}


def error_class(code: int):
    """The exception class for an HR_E* code (HeadroomError if unknown)."""
    return _BY_CODE.get(int(code), HeadroomError)


def check(code: int, context: str = "") -> int:
    """Raise the matching HeadroomError for a negative code; else return
    the code (a count, an SM number, ...) unchanged."""
    if code < 0:
        raise error_class(code)(code, context)
    return code
