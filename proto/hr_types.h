/*
 * hr_types.h: the types, codes and version that the wire protocol, the
 * daemon and libheadroom share: the version, the default socket, error
 * codes, lease modes, incident kinds, the budget and the incident detail.
 *
 * The one definition of them: client/headroom.h includes this file, and
 * proto/hr_proto.h includes it rather than the client's header, so the
 * daemon builds against the protocol's own types. The installed
 * headroom.h is one self-contained file: the build writes this file into
 * it in place of its #include (build/include/headroom.h, client/client.mk).
 *
 * C only, no other include than <stddef.h> and <stdint.h>: users'
 * programs read it as part of headroom.h.
 */
#ifndef HR_TYPES_H
#define HR_TYPES_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define HR_VERSION_MAJOR 0
#define HR_VERSION_MINOR 1
#define HR_VERSION_PATCH 0
#define HR_VERSION_STRING "0.1.0"
/* 0xMMmmpp, as hr_version() returns it. */
#define HR_VERSION_HEX \
  ((HR_VERSION_MAJOR << 16) | (HR_VERSION_MINOR << 8) | HR_VERSION_PATCH)

/* Where the daemon listens unless told otherwise. */
#define HR_DEFAULT_SOCKET "/run/headroom/headroom.sock"
/* Environment variable that overrides the default socket path. */
#define HR_ENV_SOCKET "HEADROOM_SOCKET"

/* ---- Errors ------------------------------------------------------------ */

enum {
  HR_OK = 0,
  HR_EINVAL = -1,          /* an argument is out of range or NULL */
  HR_ENOMEM = -2,          /* out of memory */
  HR_ECONNECT = -3,        /* no daemon answered on the socket */
  HR_EPROTO = -4,          /* malformed message or protocol violation */
  HR_EVERSION = -5,        /* no protocol version in common */
  HR_EPERM = -6,           /* operator-only request from a non-operator */
  HR_ENOTFOUND = -7,       /* no such GPU, footprint or lease */
  HR_ELIMIT = -8,          /* a per-client or per-daemon limit was reached */
  HR_ETIMEDOUT = -9,       /* the daemon did not answer in time, or a
                              bounded wait (hr_lease_wait_change,
                              hr_moe_sync_timeout) ran out */
  HR_ECLOSED = -10,        /* the connection closed before the answer */
  HR_EDEGRADED = -11,      /* needs the daemon; running on the fallback */
  HR_ETOOLARGE = -12,      /* a message exceeded the 64 KiB cap */
  HR_EINTERNAL = -13,      /* the daemon failed internally */
  HR_EUNSUPPORTED = -14,   /* mode or feature not supported here */
  HR_ESHUTDOWN = -15,      /* the daemon is shutting down */
  HR_EHELLO = -16,         /* request sent before hello */
  HR_ENOGPU = -20,         /* no CUDA driver or device in this process */
  HR_ECUDA = -21,          /* a CUDA call failed (see the message) */
  HR_EBARRIER_TIMEOUT = -22, /* a grid barrier timed out; kernel aborted */
  HR_ECOOP_TOO_LARGE = -23,  /* cooperative grid larger than the device */
  HR_EABORTED = -24          /* the kernel was aborted through its abort word */
};

/* A static, human-readable name for an HR_E* code (never NULL). */
const char *hr_strerror(int err);

/* ---- Enumerations shared with the wire protocol ------------------------ */

/* How the mega kernel is launched under a lease. */
typedef enum hr_mode {
  HR_MODE_HEADROOM = 0,    /* ordinary launch of grid = SMs - headroom */
  HR_MODE_COOPERATIVE = 1, /* cooperative (all-or-nothing) launch, same grid */
  HR_MODE_AGNOSTIC = 2,    /* a residency-agnostic kernel (no grid barrier):
                            * it cannot deadlock on partial residency, so
                            * its lease has headroom 0 and grid = SMs; its
                            * communicators still keep to the NCCL fields */
  HR_MODE_PARTITION = 3,   /* green contexts: NCCL confined to a comm
                            * partition of `headroom` SMs (a multiple of
                            * partition_granularity), the mega kernel to
                            * the other `grid` SMs; see hr_partition_create */
  HR_MODE_COUNT
} hr_mode;

/* What went wrong, for hr_report(). */
typedef enum hr_incident_kind {
  HR_INCIDENT_BARRIER_TIMEOUT = 0, /* a grid barrier timed out */
  HR_INCIDENT_LAUNCH_FAILURE = 1,  /* the launch itself failed */
  HR_INCIDENT_COUNT
} hr_incident_kind;

/* Wire names ("headroom", "barrier_timeout", ...); NULL when out of range. */
const char *hr_mode_name(hr_mode mode);
const char *hr_incident_kind_name(hr_incident_kind kind);

/* ---- Budgets ----------------------------------------------------------- */

/* What the daemon decided for one GPU. Every client on a GPU gets the same
 * numbers; `epoch` goes up by one with every change. */
typedef struct hr_budget {
  int gpu;              /* CUDA device index on the node */
  uint32_t epoch;       /* bumped on every change of this GPU's budget */
  hr_mode mode;         /* the lease's launch mode */
  int sms;              /* SMs on the device */
  int cluster;          /* mega kernel cluster size the budget assumes */
  int headroom;         /* SMs left free for communication kernels */
  int grid;             /* CTAs to launch the mega kernel with: sms - headroom */
  int nccl_min_ctas;    /* ncclConfig_t.minCTAs */
  int nccl_max_ctas;    /* ncclConfig_t.maxCTAs (a power of two) */
  int nccl_cga_cluster_size; /* ncclConfig_t.cgaClusterSize (1) */
  int nccl_nvls_enable; /* NCCL_NVLS_ENABLE (0) */
  int degraded;         /* 1: computed in the process, no daemon */
  /* Partition mode, carried in every budget so that any lease can see
   * what a partition lease on the GPU gets (a partition lease also has
   * headroom = partition_comm_sms, grid = sms - headroom and
   * nccl_max_ctas = partition_nccl_max_ctas). 0: not known (an older
   * daemon), and partition leases are then refused. */
  int partition_granularity; /* SMs per green-context step: 8 on H100/H200,
                              * 2 when co-scheduling is ignored */
  int partition_comm_sms;    /* SMs of the comm partition */
  int partition_nccl_max_ctas; /* NCCL's CTA cap inside that partition */
  /* New members go here, at the end (see hr_lease_budget). */
} hr_budget;

/* The size of the first hr_budget, before partition mode: the least
 * hr_lease_budget_sized accepts. */
#define HR_BUDGET_SIZE_V1 offsetof(hr_budget, partition_granularity)

/* Details of an incident; set a field to -1 when unknown. */
typedef struct hr_incident_detail {
  int barrier;          /* which barrier of the kernel timed out */
  int arrived;          /* CTAs that had arrived at it */
  int expected;         /* CTAs it waited for (the grid) */
  int sm;               /* SM id of the CTA that noticed */
  int grid;             /* grid the kernel was launched with */
  int timeout_ms;       /* barrier timeout in force */
  int cuda_error;       /* cudaError_t of a failed launch, else -1 */
} hr_incident_detail;

#ifdef __cplusplus
}
#endif

#endif /* HR_TYPES_H */
