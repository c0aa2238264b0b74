"""headroom: the SM budget of headroomd for Python trainers.

A ctypes binding over libheadroom (client/headroom.h) and libheadroom_moe
(kernels/headroom_moe.h); no compiled extension. docs/python.md is the guide.

    import headroom

    client = headroom.Client()                      # $HEADROOM_SOCKET or default
    lease = client.lease(gpu=0, cluster=2)
    headroom.apply_env(lease)                       # before NCCL initialises
    opts = headroom.nccl_options(lease)             # ProcessGroupNCCL.Options
    client.register(0, "dp", ctas=opts.config.max_ctas, concurrent=2)
    ...
    grid = lease.grid                               # at every launch

torch is imported only by nccl_options(), by Moe's and MoeEP's tensor
methods, and by headroom.nn (the torch ops and nn.Module) and
headroom.ep_reference (the expert-parallel MoE in plain torch), each
loaded on first use of the name or by `import headroom.nn`.
"""
from ._lib import (CODES, library_path, load_library, load_moe_library,
                   moe_library_path, strerror)
from .client import (DEFAULT_SOCKET, ENV_SOCKET, ENV_VARS, Budget, Client,
                     Comm, IncidentDetail, IncidentKind, Lease, Mode,
                     Partition)
from .distributed import apply_env, nccl_options
from .errors import (Aborted, BarrierTimeout, ConnectError, ConnectionClosed,
                     CooperativeTooLarge, CudaError, Degraded, HeadroomError,
                     HelloRequired, InternalError, InvalidArgument,
                     LimitReached, NoGPU, NotFound, OutOfMemory,
                     PermissionDenied, ProtocolError, ShuttingDown, TimedOut,
                     TooLarge, Unsupported, VersionMismatch, error_class)
from .moe import (Moe, MoeFailure, MoeShape, check_moe_grad_tensors,
                  check_moe_tensors)
from .moe import reference as moe_reference
from .moe_ep import (MoeEP, MoeEPFailure, ProcessGroupBootstrap, VirtualGroup,
                     VirtualGroupError, ep_memory)

__version__ = "0.1.0"


def __getattr__(name):
    # headroom.nn and headroom.ep_reference import torch: only when asked
    # for (so they are not in __all__ either: `from headroom import *`
    # works without torch).
    if name in ("nn", "ep_reference"):
        import importlib
        return importlib.import_module("." + name, __name__)
    raise AttributeError("module 'headroom' has no attribute %r" % name)


__all__ = [
    "Aborted", "BarrierTimeout", "Budget", "CODES", "Client", "Comm",
    "ConnectError", "ConnectionClosed", "CooperativeTooLarge", "CudaError",
    "DEFAULT_SOCKET", "Degraded", "ENV_SOCKET", "ENV_VARS", "HeadroomError",
    "HelloRequired", "IncidentDetail", "IncidentKind", "InternalError",
    "InvalidArgument", "Lease", "LimitReached", "Mode", "Moe", "MoeEP",
    "MoeEPFailure", "MoeFailure", "MoeShape", "NoGPU", "NotFound",
    "OutOfMemory", "Partition", "PermissionDenied", "ProcessGroupBootstrap",
    "ProtocolError", "ShuttingDown", "TimedOut", "TooLarge", "Unsupported",
    "VersionMismatch", "VirtualGroup", "VirtualGroupError", "apply_env",
    "check_moe_grad_tensors", "check_moe_tensors", "ep_memory", "error_class",
    "library_path", "load_library", "load_moe_library", "moe_library_path",
    "moe_reference",
    "nccl_options", "strerror", "__version__",
]
