/*
 * headroom.h: libheadroom, the client side of the headroom SM broker.
 *
 * A trainer links this library to ask headroomd (one daemon per node) how
 * many SMs its persistent "mega" kernel may use on each GPU, and how many
 * CTAs NCCL may use beside it, so that a whole-grid barrier never waits on a
 * CTA that cannot become resident.
 *
 * Usage, in short:
 *
 *     hr_client *c;
 *     hr_lease *l;
 *     hr_client_open(&c, NULL, NULL);          // $HEADROOM_SOCKET or default
 *     hr_comm_register(c, gpu, "dp", 8, 1, 3, NULL);
 *     hr_lease_acquire(c, gpu, 2, HR_MODE_HEADROOM, &l);
 *     ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
 *     hr_lease_fill_nccl_config(l, &cfg);      // needs nccl.h included first
 *     ...
 *     int grid = hr_lease_grid(l);             // per launch; no syscall
 *     ...
 *     hr_lease_release(l);
 *     hr_client_close(c);
 *
 * Conventions:
 *
 * - Errors: every function that returns a number returns, on failure, a
 *   negative HR_E* code (hr_strerror() names it): an action returns 0
 *   (HR_OK) on success, a getter the value it gets, which is never
 *   negative (hr_lease_epoch returns int64_t so that every epoch fits).
 *   A function that returns a pointer returns NULL for a bad argument.
 *   Arguments are checked first; a bad one is HR_EINVAL with nothing
 *   changed. All functions are thread-safe unless noted. Prefix hr_ is
 *   public; hr__ is internal and not exported.
 * - Lifetime: hr_client_close releases every lease and footprint at the
 *   daemon and frees the client, but not the hr_lease and hr_comm handles
 *   the caller holds: they stay valid memory, closed, until their owner
 *   frees them with hr_lease_release or hr_comm_unregister (HR_OK), and
 *   every other call on them returns HR_ECLOSED (hr_lease_grid included).
 *   Free each handle exactly once, before or after the close; a handle
 *   never freed is memory the process keeps, never a dangling pointer.
 *   hr_client_close must not run while another thread uses the client or
 *   its handles.
 * - Versioned structs: hr_client_options and hr_budget only ever grow at
 *   their end. hr_client_options.size says how much of it the caller has
 *   (sizeof(hr_client_options), or 0 for the first layout), and the
 *   library takes the defaults for members past it. hr_lease_budget passes
 *   sizeof(*out) for the caller: the library fills what fits, and members
 *   it does not know read 0 ("not known").
 *
 * When no daemon answers (none listening, a connection lost, a hello
 * refused), the library does not fail, and fails safe: it hands out
 * "degraded" leases computed in the process with the daemon's own policy
 * (default policy) for the footprints and leases this process registered,
 * recomputed as they change. The NCCL fields are always decided (CGA 1,
 * NVLS off, a max CTA count). DG_MEGA_MOE_SM_HEADROOM may raise the
 * headroom, never lower it; headroom 0, the full grid that deadlocks when
 * a comm kernel holds one SM, only with HEADROOM_ALLOW_FULL_GRID=1 and
 * DG_MEGA_MOE_SM_HEADROOM=0 both set (dangerous). It says so once on
 * stderr and keeps reconnecting in the background. When the daemon comes
 * (back), footprints and leases are registered again with no help from the
 * caller, and hr_lease_grid() starts returning the daemon's answer.
 */
#ifndef HEADROOM_H
#define HEADROOM_H

#include <stdint.h>

/* Errors, modes, incident kinds, hr_budget and the version (the installed
 * header has them written in here). */
#include "hr_types.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Version ----------------------------------------------------------- */

/* The library's version, as HR_VERSION_HEX and HR_VERSION_STRING say the
 * header's: a program can check that the library it runs against is at
 * least as new as the header it was built with. */
unsigned hr_version(void);
const char *hr_version_string(void);

/* ---- Client ------------------------------------------------------------ */

typedef struct hr_client hr_client;
typedef struct hr_comm hr_comm;
typedef struct hr_lease hr_lease;

typedef struct hr_client_options {
  size_t size;          /* sizeof(hr_client_options); 0: the first layout
                         * (the four members below), as zeroed options are */
  const char *name;     /* shown in status, no control characters;
                           default: program name */
  int request_timeout_ms; /* per request; default 5000 */
  int reconnect_ms;     /* delay between reconnect attempts; default 200 */
  int quiet;            /* 1: do not print the one-time degraded notice
                         * (nor the lost/reconnected lines) on stderr */
} hr_client_options;

/* Connect to the daemon at `socket_path`, else $HEADROOM_SOCKET, else
 * HR_DEFAULT_SOCKET. `opts` may be NULL. Succeeds with a degraded client
 * when no daemon answers (see top of file); fails only on bad arguments,
 * memory, or a daemon that speaks no common protocol version.
 * A client belongs to the process that opened it (it runs a thread):
 * after fork(), the child must not use the parent's client; it may open
 * its own. */
int hr_client_open(hr_client **out, const char *socket_path,
                   const hr_client_options *opts);

/* Release every lease and footprint of the client at the daemon and free
 * the client. The lease and footprint handles the caller holds stay valid,
 * closed, until freed by their owner (see Lifetime, top of file). NULL is
 * ok. */
void hr_client_close(hr_client *client);

/* 1 when connected to a daemon that accepted our hello, else 0. */
int hr_client_connected(const hr_client *client);

/* Number of GPUs the daemon reported (0 while degraded and never
 * connected) and the SM count of one of them (HR_ENOTFOUND if unknown). */
int hr_client_gpu_count(const hr_client *client);
int hr_client_gpu_sms(const hr_client *client, int gpu);

/* Register the comm footprint of a communicator on `gpu`: `ctas` CTAs per
 * collective (NCCL channels), CGA cluster size `cga`, `concurrent`
 * collectives in flight at once. `out` may be NULL if the caller never
 * unregisters. The footprint lives until unregistered, the client closes,
 * or the process dies; it is re-registered after a daemon restart. */
int hr_comm_register(hr_client *client, int gpu, const char *name, int ctas,
                     int cga, int concurrent, hr_comm **out);
/* Frees `comm` whatever it returns; HR_OK for a footprint whose client
 * was closed (released with it). */
int hr_comm_unregister(hr_comm *comm);

/* Acquire a lease on `gpu` for a mega kernel of `cluster` CTAs per cluster
 * (1, 2, 4 or 8), launched in `mode`. HR_EUNSUPPORTED for HR_MODE_PARTITION
 * on a GPU that has no partition (partition_granularity 0: no green
 * contexts, or not one step under the ceiling), daemon or not. */
int hr_lease_acquire(hr_client *client, int gpu, int cluster, hr_mode mode,
                     hr_lease **out);
/* Frees `lease` whatever it returns; HR_OK for a lease whose client was
 * closed (released with it). */
int hr_lease_release(hr_lease *lease);

/* The hot path: the grid and headroom in force now. Lock-free, no syscall;
 * updates pushed by the daemon are applied by the client's I/O thread
 * before they become visible here. */
int hr_lease_grid(const hr_lease *lease);
int hr_lease_headroom(const hr_lease *lease);
int64_t hr_lease_epoch(const hr_lease *lease);     /* 0..UINT32_MAX */
int hr_lease_degraded(const hr_lease *lease);

/* What a launcher reads per launch, lock-free and with no syscall: the
 * grid and the cluster size of the budget in force (the GPU's, which can
 * be larger than the lease asked for), both from one atomic read so they
 * always belong to the same budget, and the lease's mode. */
int hr_lease_launch_config(const hr_lease *lease, int *grid, int *cluster,
                           hr_mode *mode);

/* A consistent copy of the whole budget: the members that fit in `size`
 * bytes (at least HR_BUDGET_SIZE_V1), members past the library's own
 * hr_budget zeroed. Call it as hr_lease_budget(lease, out), which passes
 * sizeof(*out): a program built with an older header gets exactly the
 * members it knows. */
int hr_lease_budget_sized(const hr_lease *lease, hr_budget *out,
                          size_t size);
#define hr_lease_budget(lease, out) \
  hr_lease_budget_sized((lease), (out), sizeof(*(out)))

/* The GPU and client a lease belongs to. */
int hr_lease_gpu(const hr_lease *lease);
hr_client *hr_lease_client(const hr_lease *lease); /* NULL once closed */

/* Wait until the lease's epoch differs from `epoch` or `timeout_ms` (>= 0)
 * passes (HR_ETIMEDOUT). For tools and tests; trainers read
 * hr_lease_grid(). */
int hr_lease_wait_change(const hr_lease *lease, uint32_t epoch, int timeout_ms);

/* Export the lease as environment variables for libraries that read them:
 * DG_MEGA_MOE_SM_HEADROOM, NCCL_MIN_CTAS, NCCL_MAX_CTAS,
 * NCCL_CGA_CLUSTER_SIZE, NCCL_NVLS_ENABLE=0. Not thread-safe (setenv). */
int hr_lease_export_env(const hr_lease *lease);

/* Report an incident to the daemon. `lease` and `detail` may be NULL;
 * `message` may be NULL (a long one is cut to 255 bytes).
 * Without a lease, the incident is filed against the GPU of the client's
 * oldest lease, else of its oldest footprint, else GPU 0. HR_EDEGRADED
 * when no daemon is connected (the incident is then only logged on
 * stderr). */
int hr_report(hr_client *client, const hr_lease *lease, hr_incident_kind kind,
              const hr_incident_detail *detail, const char *message);

/* ---- Partition mode: green contexts ---------------------------------- */

/* Two green contexts on the lease's GPU (driver API, opened at run time):
 * a comm partition of budget.headroom SMs for NCCL, and the other
 * budget.grid SMs for the mega kernel, with a stream in each. Kernels
 * enqueued on those streams run only on their partition's SMs, so NCCL
 * can never hold an SM the mega kernel's grid needs, whatever the launch
 * order. Kernels launched in the primary context (any ordinary stream,
 * including the legacy default stream) are NOT confined: they run on every
 * SM, beside both partitions. Give NCCL collectives the comm stream and
 * hr_moe_forward the mega stream; keep other long-running kernels off the
 * device while a mega kernel may be waiting at a barrier.
 *
 *     hr_lease_acquire(c, gpu, 1, HR_MODE_PARTITION, &l);
 *     hr_partition_create(l, &p);
 *     ncclAllReduce(..., comm, hr_partition_comm_stream(p));
 *     hr_moe_forward(m, l, &args, hr_partition_mega_stream(p));
 *
 * A partition is fixed when created. When the daemon changes the GPU's
 * budget (hr_partition_stale() turns 1), create a new one and move new work
 * to its streams; work already enqueued finishes where it is. The old comm
 * partition's SMs may belong to the new mega partition: let the old
 * streams drain (hr_partition_destroy waits for them) before a mega kernel
 * runs on the new one. Stale means the budget changed, not always the
 * split: hr_lease_headroom(lease) == hr_partition_comm_sms(p) says it did
 * not. docs/partition.md is the guide.
 *
 * Thread-safe, except that hr_partition_destroy must not run while another
 * thread uses the same partition. The library never makes a green context
 * current; work reaches a partition only through its two streams. */
typedef struct hr_partition hr_partition;

/* Create the partition for a lease in HR_MODE_PARTITION (HR_EINVAL for any
 * other mode), on the CUDA device with the lease's GPU index. The lease
 * must outlive the partition. HR_ENOGPU without a CUDA driver or device;
 * HR_EUNSUPPORTED when the budget has no partition, the driver lacks green
 * contexts or green-context streams (CUDA 12.5+), libheadroom was built
 * without cuda.h, or the device cannot be split as the budget says (a line
 * on stderr says how it was split); HR_ECUDA when a driver call fails (the
 * line on stderr names the call and the CUresult). */
int hr_partition_create(const hr_lease *lease, hr_partition **out);

/* Wait for both streams, then destroy them and the green contexts.
 * NULL is ok. */
void hr_partition_destroy(hr_partition *p);

/* The streams, as CUstream (usable wherever a cudaStream_t is taken). */
void *hr_partition_comm_stream(const hr_partition *p);
void *hr_partition_mega_stream(const hr_partition *p);

/* Which side of a partition. */
typedef enum hr_partition_side {
  HR_PARTITION_COMM = 0,   /* NCCL's SMs */
  HR_PARTITION_MEGA = 1    /* the mega kernel's SMs */
} hr_partition_side;

/* One more non-blocking stream on `side`, for work that must be able to
 * run beside the work on the partition's own stream there: typically one
 * stream per communicator, since collectives of different communicators
 * queued on one stream run one after the other, and two ranks that queue
 * them in different orders then wait on each other. The stream belongs to
 * the partition and is destroyed by hr_partition_destroy (do not destroy
 * it yourself). At most HR_PARTITION_MAX_STREAMS per partition
 * (HR_ELIMIT); HR_EUNSUPPORTED, HR_ECUDA as hr_partition_create. */
#define HR_PARTITION_MAX_STREAMS 32
int hr_partition_stream_create(hr_partition *p, hr_partition_side side,
                               void **out);

/* SMs in each partition, as the driver made them. */
int hr_partition_comm_sms(const hr_partition *p);
int hr_partition_mega_sms(const hr_partition *p);

/* The lease epoch the partition was made for, and 1 when the lease has
 * moved on since (0 when not, HR_EINVAL for NULL). */
int64_t hr_partition_epoch(const hr_partition *p);
int hr_partition_stale(const hr_partition *p);

/* Fill an NCCL config from a lease. Defined inline when nccl.h was
 * included before this header, so libheadroom itself never depends on
 * NCCL's struct layout. Every budget decides minCTAs, maxCTAs and
 * cgaClusterSize, a degraded one too; a field that is 0 (a budget from a
 * peer that leaves it out) is left as it was. */
#ifdef NCCL_CONFIG_INITIALIZER
static inline int hr_lease_fill_nccl_config(const hr_lease *lease,
                                            ncclConfig_t *config)
{
  hr_budget b;
  int err;
  if(!lease || !config)
    return HR_EINVAL;
  err = hr_lease_budget(lease, &b);
  if(err)
    return err;
  if(b.nccl_min_ctas > 0)
    config->minCTAs = b.nccl_min_ctas;
  if(b.nccl_max_ctas > 0)
    config->maxCTAs = b.nccl_max_ctas;
  if(b.nccl_cga_cluster_size > 0)
    config->cgaClusterSize = b.nccl_cga_cluster_size;
  return HR_OK;
}
#endif

#ifdef __cplusplus
}
#endif

#endif /* HEADROOM_H */
