"""Applying a lease to torch.distributed and to libraries that read the
environment. torch is imported inside the functions that need it, never at
import time, so `import headroom` works where torch is not installed.

    lease = client.lease(gpu=local_rank, cluster=2)
    headroom.apply_env(lease)          # before anything creates NCCL comms
    dist.init_process_group("nccl", pg_options=headroom.nccl_options(lease))
    dp = dist.new_group(backend="nccl", pg_options=headroom.nccl_options(lease))

Use one nccl_options() object per process group: torch writes the group's
name and ranks into the object it is given.
"""
from __future__ import annotations

import sys
import warnings
from typing import Dict

from .client import Lease

__all__ = ["nccl_options", "apply_env"]


def nccl_options(lease: Lease, is_high_priority_stream: bool = False):
    """A new torch.distributed.ProcessGroupNCCL.Options whose NCCL config
    (ncclConfig_t) carries the lease's budget: config.min_ctas,
    config.max_ctas and config.cga_cluster_size (every budget decides
    them, a degraded one too). Pass it as pg_options to
    init_process_group() or new_group() with the NCCL backend. The config is
    read when the group's communicator is created: later changes of the
    budget do not reach it (a communicator's CTA count cannot change);
    register the communicator's footprint with Client.register()."""
    import torch.distributed as dist

    pg = getattr(dist, "ProcessGroupNCCL", None)
    if pg is None:
        raise RuntimeError("this torch build has no NCCL backend "
                           "(torch.distributed.ProcessGroupNCCL)")
    opts = pg.Options(is_high_priority_stream=is_high_priority_stream)
    want = lease.nccl_config()
    config = opts.config
    for name, value in want.items():
        if not hasattr(config, name):
            raise RuntimeError("torch's NCCLConfig has no field %r: torch was "
                               "built against an NCCL without ncclConfig_t "
                               "CTA and CGA fields" % name)
        setattr(config, name, value)
    opts.config = config
    got = {name: getattr(opts.config, name) for name in want}
    if got != want:
        raise RuntimeError("ProcessGroupNCCL.Options did not keep the config: "
                           "wanted %s, got %s" % (want, got))
    return opts


def apply_env(lease: Lease) -> Dict[str, str]:
    """Set the lease's budget in the environment for libraries that read
    it rather than take a config: DG_MEGA_MOE_SM_HEADROOM (DeepGEMM's
    mega-MoE), NCCL_MIN_CTAS, NCCL_MAX_CTAS, NCCL_CGA_CLUSTER_SIZE and
    NCCL_NVLS_ENABLE=0. Returns what was set.

    Call it before those libraries initialise: NCCL reads these variables
    once, when the process creates its first communicator, and DeepGEMM
    when it first sizes its kernel; later calls do not reach a library that
    has already read them. Not while other threads read the environment
    (setenv). Environment variables override an NCCL config, so keep them
    equal to what nccl_options() gives (they are, from the same lease)."""
    td = sys.modules.get("torch.distributed")
    try:
        late = td is not None and td.is_available() and td.is_initialized()
    except Exception:
        late = False
    if late:
        warnings.warn("headroom.apply_env() after torch.distributed was "
                      "initialised: NCCL communicators that already exist "
                      "keep the environment they were created with",
                      RuntimeWarning, stacklevel=2)
    return lease.export_env()
