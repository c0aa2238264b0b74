/*
 * headroom_moe.h: the mega-MoE forward kernel and its launch path.
 *
 * One persistent CUDA kernel computes a bf16 mixture-of-experts forward
 * (fp32 accumulation) in a single launch:
 *
 *     y[t] = sum over j < k of  w[t,j] * W2[e] (silu(W1g[e] x[t]) * W1u[e] x[t])
 *            with e = ids[t,j]
 *
 * Inside the launch: count the (token, slot) pairs per expert and scan;
 * scatter them into expert-sorted order; GEMM1 + SwiGLU; GEMM2; weighted
 * combine back to token order. The stages are separated by whole-grid
 * barriers, so every CTA of the grid must be resident at once: the grid is
 * one CTA per SM (the kernel takes enough shared memory that two CTAs never
 * share an SM) and must fit in the SMs that are free. headroomd's lease says
 * how many that is; hr_moe_forward() launches with the lease's grid.
 * A second kernel computes the same forward without any whole-grid barrier
 * (hr_moe_forward_agnostic_grid, and hr_moe_forward under a lease in the
 * agnostic mode): correct whatever number of its CTAs are resident.
 *
 * The barriers never trap. Each one waits at most the launch's timeout
 * (args.timeout_ms, measured with the GPU's global timer), and leaves early
 * when another CTA failed or when the host sets the context's abort word
 * (hr_moe_abort). The CTA that notices a timeout records which barrier, how
 * many CTAs had arrived, how many were expected and its SM id in an error
 * word the host reads; every CTA then leaves, the CUDA context stays
 * healthy and the next launch on the same hr_moe works.
 *
 *     hr_moe *m;
 *     hr_moe_shape s = { .experts = 128, .hidden = 2048, .inter = 768,
 *                        .topk = 8, .max_tokens = 8192 };
 *     hr_moe_create(&m, -1, &s);
 *     hr_moe_args a = { .tokens = T, .x = x, ... , .timeout_ms = 1000 };
 *     err = hr_moe_forward(m, lease, &a, stream);   // grid from the lease
 *     ...
 *     err = hr_moe_sync(m);   // HR_EBARRIER_TIMEOUT: reported to headroomd
 *                             // (hr_moe_sync_timeout: bounded on the host)
 *     hr_moe_destroy(m);
 *
 * Layouts (row-major, all on the device):
 *   x    [T, H]    bf16          y  [T, H] bf16 (written in full)
 *   ids  [T, k]    int32         ids outside [0, E) contribute nothing
 *   w    [T, k]    fp32          routing weights, used as given
 *   W1   [E, 2I, H] bf16         rows 0..I-1 gate, rows I..2I-1 up
 *   W2   [E, H, I]  bf16
 * Numerics: fp32 accumulation; the SwiGLU output silu(gate) * up is rounded
 * to bf16 (it is GEMM2's operand), and so is each expert's GEMM2 row before
 * the weighted sum, which is done in fp32 in slot order j = 0..k-1 and
 * rounded to bf16 once. kernels/moe_ref.c computes the same on the CPU.
 * Results do not depend on the grid size: the same inputs give bitwise
 * identical y for every grid.
 *
 * Constraints: hidden a multiple of 256, inter a multiple of 128 (the
 * tiles: K walked 128 at a time, up to 256 weight rows per tile),
 * 1 <= experts <= HR_MOE_MAX_EXPERTS, 1 <= topk <= HR_MOE_MAX_TOPK,
 * 1 <= tokens <= max_tokens; x, W1, W2, y 16-byte aligned, ids and w
 * 4-byte aligned; all device (or managed) memory. The kernel is built for
 * sm_90a (H100/H200).
 *
 * Performance: the forward streams the experts' weights through L2, and a
 * persisting-L2 set-aside in the process (cudaLimitPersistingL2CacheSize)
 * slows it, by ~4% at 16 MB and 9-15% at an H200's 37 MB, whatever the
 * set-aside holds (measured: docs/kernels.md, Performance).
 *
 * CUDA graphs: a launch on a stream being captured is captured with its
 * ordering (the wait for the context's last launch and the record of its
 * end become the graph's own event nodes), so hr_moe_sync after a replay
 * waits for that replay. A replay runs with the grid, seq and timeout of
 * its capture: a budget change needs a new capture, and an hr_moe_abort
 * aborts every later replay of graphs captured before it (capture again).
 *
 * Threads: an hr_moe is used by one thread at a time. Launches on one hr_moe
 * run one after the other (a launch on another stream waits for the last).
 */
#ifndef HEADROOM_MOE_H
#define HEADROOM_MOE_H

#include <stddef.h>
#include <stdint.h>

#include "headroom.h"

#ifdef __cplusplus
extern "C" {
#endif

#define HR_MOE_MAX_EXPERTS 512
#define HR_MOE_MAX_TOPK 32
/* Used when hr_moe_args.timeout_ms is 0. */
#define HR_MOE_DEFAULT_TIMEOUT_MS 10000

typedef struct hr_moe hr_moe;

/* The model's shape, fixed for the life of a context; sizes its workspace. */
typedef struct hr_moe_shape {
  int experts;     /* E */
  int hidden;      /* H: model width */
  int inter;       /* I: expert intermediate width */
  int topk;        /* k: experts per token */
  int max_tokens;  /* largest T a forward will be given */
} hr_moe_shape;

/* One forward. The shape fields must equal the context's. */
typedef struct hr_moe_args {
  int tokens;                 /* T, 1..max_tokens */
  int experts, hidden, inter, topk;
  const void *x;              /* [T, H] bf16 */
  const int32_t *topk_ids;    /* [T, k] */
  const float *topk_weights;  /* [T, k] */
  const void *w1;             /* [E, 2I, H] bf16 */
  const void *w2;             /* [E, H, I] bf16 */
  void *y;                    /* [T, H] bf16 */
  /* Optional, for training: [T k, 2I] fp32, 16-byte aligned, or NULL.
   * A forward given it also writes GEMM1's sums there (each pair's gate
   * and up, in the kernel's expert order, 8 k I bytes a token); a
   * backward given the same buffer (fwd.gate_up), filled by a forward of
   * the same x, ids and W1, reads them instead of recomputing GEMM1. The
   * backward does not check where they came from. */
  float *gate_up;
  int timeout_ms;             /* per barrier wait; 0: the default */
} hr_moe_args;

/* What the last failed launch left in the error word. */
typedef struct hr_moe_failure {
  int code;                   /* HR_EBARRIER_TIMEOUT, HR_EABORTED; 0: none */
  hr_incident_detail detail;  /* barrier, arrived, expected, sm, grid, ... */
  int cta;                    /* blockIdx.x of the CTA that noticed */
  int reported;               /* hr_report()'s result; 1: not reported
                                 (launched without a lease) */
} hr_moe_failure;

/* Create a context on CUDA device `device` (-1: the current one): checks
 * the device (HR_ENOGPU without a driver or device, HR_EUNSUPPORTED when
 * it is not compute capability 9.0), allocates the workspace for `shape`,
 * the pinned host-mapped error and abort words and the events.
 * Nothing touches the GPU before this call: loading the library is safe on
 * a machine without one. */
int hr_moe_create(hr_moe **out, int device, const hr_moe_shape *shape);

/* Wait for the last launch and free everything. NULL is ok. */
void hr_moe_destroy(hr_moe *m);

/* SM count of the context's device. */
int hr_moe_sms(const hr_moe *m);

/* Bytes of device workspace the context holds. */
uint64_t hr_moe_workspace_bytes(const hr_moe *m);

/* Launch the forward on `stream` (a cudaStream_t; NULL: the legacy default
 * stream) with the grid the lease holds now (hr_lease_grid: no syscall),
 * in the lease's mode (ordinary, or the cooperative attribute, or the
 * agnostic kernel; a partition-mode lease launches as headroom mode, and
 * `stream` should then be hr_partition_mega_stream(): on any other stream
 * the kernel is not confined to its partition) and with clusters of the lease's cluster size (1 or 2;
 * none for the agnostic kernel). Checks `args` first:
 * HR_EINVAL and nothing launched when a shape, pointer or alignment is
 * wrong. HR_ECOOP_TOO_LARGE when a cooperative grid cannot fit the device;
 * HR_ECUDA for any other launch error (then reported to the daemon as a
 * launch failure). The lease must outlive the next hr_moe_sync(). */
int hr_moe_forward(hr_moe *m, const hr_lease *lease, const hr_moe_args *args,
                   void *stream);

/* The same without a lease, for tests and benchmarks: `grid` CTAs
 * (1..SMs in HR_MODE_HEADROOM; a multiple of `cluster`), `cluster` 1 or 2.
 * The lease mode HR_MODE_AGNOSTIC, where headroom.h has it, runs the
 * residency-agnostic kernel (below; `cluster` is then ignored). */
int hr_moe_forward_grid(hr_moe *m, int grid, hr_mode mode, int cluster,
                        const hr_moe_args *args, void *stream);

/* The residency-agnostic variant of the same forward: the same y, bitwise,
 * with no whole-grid barrier. Its work is a list of tasks (count, scatter,
 * GEMM1 and GEMM2 tiles, combine) that the CTAs take in order from an
 * atomic counter, and a task waits only for tasks taken before it, by CTAs
 * that are therefore running. So it completes with any grid (1..SMs) and
 * with any number of its CTAs unable to start because other kernels hold
 * their SMs: those start later, find no work and leave. A lease in the
 * agnostic mode can therefore be given headroom 0. The launch ends when
 * its last CTA has left (after whatever held the SMs); y can be complete
 * before that (hr_moe_outputs_ready). Waits still time out
 * (args.timeout_ms, HR_EBARRIER_TIMEOUT, `barrier` 11..14 in the failure
 * detail: which wait) and obey hr_moe_abort, so a bug or a dead context
 * never hangs the host; such a timeout is not reported to the daemon
 * (more headroom cannot help). Ordinary launch, no clusters. */
int hr_moe_forward_agnostic_grid(hr_moe *m, int grid, const hr_moe_args *args,
                                 void *stream);

/* 1 once y of the last launch is complete, 0 while not (or when it
 * failed), HR_EINVAL, HR_ECUDA. For the agnostic kernel this can come
 * before the launch ends, while CTAs that waited for an SM have yet to
 * start and leave; the stream still orders later work after the launch. */
int hr_moe_outputs_ready(const hr_moe *m);

/* Wait for the last launch. HR_OK; HR_EBARRIER_TIMEOUT or HR_EABORTED as
 * soon as the error word says so (the aborted kernel may still be draining:
 * CTAs that were not resident leave as soon as they start, and the next
 * launch is ordered after them); HR_ECUDA when CUDA reported an error.
 * A launch queued behind a failed one that nobody waited for refuses to
 * run (the half-counted barrier words cannot be trusted; they are cleared
 * before the next launch) and returns the failed launch's code and detail:
 * so a barrier timeout is still HR_EBARRIER_TIMEOUT, and reported, when
 * the host waits only for a later launch.
 * A timeout of a launch made under a lease is reported to the daemon
 * (hr_report, HR_INCIDENT_BARRIER_TIMEOUT, with the detail). HR_OK when
 * nothing was launched. */
int hr_moe_sync(hr_moe *m);

/* hr_moe_sync, bounded: HR_ETIMEDOUT when the launch has neither ended nor
 * failed after `timeout_ms` milliseconds (0: look once, do not wait), as
 * when it is queued behind a kernel that never ends (a collective waiting
 * for a dead peer). The launch then stays in flight and nothing is
 * reported: wait again (hr_moe_sync or hr_moe_sync_timeout), or
 * hr_moe_abort and then wait (the kernel sees the abort at its next wait,
 * so only once it runs). hr_moe_destroy still waits for it. Otherwise the
 * same codes as hr_moe_sync; HR_EINVAL when m is NULL or timeout_ms < 0. */
int hr_moe_sync_timeout(hr_moe *m, int timeout_ms);

/* Copy what the last failed launch recorded; HR_ENOTFOUND when none has
 * failed since the context was created. */
int hr_moe_last_failure(const hr_moe *m, hr_moe_failure *out);

/* Ask the launch in flight to stop: its CTAs leave at their next barrier
 * wait and hr_moe_sync() returns HR_EABORTED. Later launches are not
 * affected. Safe from another thread. */
int hr_moe_abort(hr_moe *m);

/* ---- the backward ---------------------------------------------------- */

/*
 * hr_moe_backward computes, for the forward of the same inputs and the
 * gradient dy of the loss at y:
 *
 *   dx [T, H] bf16, dw1 [E, 2I, H] and dw2 [E, H, I] (fp32 or bf16, as
 *   dw_dtype says; rounded once from fp32 sums), dtopk_weights [T, k] fp32
 *
 * with the math and the roundings of hr_moe_ref_backward (kernels/moe_ref.h;
 * d(w) for an id outside [0, E) is 0, an expert without pairs gets dW 0).
 * With fwd.gate_up NULL the forward saves nothing for it: the backward
 * recomputes the routing and GEMM1 (g, u) from x, ids and W1, a third
 * more backward FLOPs and no activation memory. With fwd.gate_up the
 * buffer the forward filled, it recomputes the routing only and reads g
 * and u (docs/decisions.md, "g and u kept by the forward"); the results
 * are the same either way. Every output element is written by one CTA from
 * sums in a fixed order, so the results are bitwise the same for every
 * grid and in both kernels.
 *
 * One persistent launch in four stages: route; GEMM1 again with the
 * gradient at h (q = W2^T dy) and the SwiGLU's backward; the dx rows, dW1
 * and dW2; the combine of the dx rows and d(w). The barrier kernel joins
 * them with whole-grid barriers that time out into the error word like the
 * forward's (`barrier` 20..22 in the failure detail); the agnostic kernel
 * (a lease in the agnostic mode, or HR_MODE_AGNOSTIC) takes its tasks in
 * order from a counter and waits only for tasks taken before (`barrier`
 * 31..34), so it completes with any number of its CTAs resident.
 * hr_moe_sync, hr_moe_sync_timeout, hr_moe_last_failure and hr_moe_abort
 * serve the backward as they serve the forward: a context runs one launch
 * at a time, of either kind.
 *
 * Workspace: the backward needs, beyond the forward's, (2I 2 + 4 + I/16)
 * bytes a pair (Qwen3-30B-A3B, 8192 tokens: 207 MB), allocated by
 * hr_moe_backward_prepare or by the first backward (not allowed while a
 * stream is being captured into a CUDA graph: prepare first).
 */
enum { HR_MOE_DW_FP32 = 0, HR_MOE_DW_BF16 = 1 };

typedef struct hr_moe_grad_args {
  hr_moe_args fwd;            /* the forward's inputs; fwd.y is not read
                                 (may be NULL) */
  const void *dy;             /* [T, H] bf16 */
  void *dx;                   /* [T, H] bf16, written in full */
  void *dw1;                  /* [E, 2I, H], written in full */
  void *dw2;                  /* [E, H, I], written in full */
  float *dtopk_weights;       /* [T, k] fp32, written in full */
  int dw_dtype;               /* HR_MOE_DW_FP32 or HR_MOE_DW_BF16 */
} hr_moe_grad_args;

/* Allocate the backward's workspace now (idempotent). HR_ENOMEM. */
int hr_moe_backward_prepare(hr_moe *m);

/* Launch the backward with the lease's grid and mode, as hr_moe_forward
 * does (no clusters: the backward's tiles share nothing across CTAs).
 * HR_EINVAL and nothing launched for a bad argument (shapes, pointers,
 * alignment: dy, dx, dw1, dw2 16 bytes, dtopk_weights 4; dw_dtype). */
int hr_moe_backward(hr_moe *m, const hr_lease *lease,
                    const hr_moe_grad_args *args, void *stream);

/* The same without a lease: `grid` CTAs (1..SMs), mode HR_MODE_HEADROOM
 * or HR_MODE_COOPERATIVE (the barrier kernel) or HR_MODE_AGNOSTIC. */
int hr_moe_backward_grid(hr_moe *m, int grid, hr_mode mode,
                         const hr_moe_grad_args *args, void *stream);

/* ---- expert parallel (EP) ------------------------------------------- */

/*
 * The same forward with the experts split over R ranks (1 <= R <=
 * HR_MOE_EP_MAX_RANKS, E % R == 0): rank r owns the E/R consecutive
 * experts r E/R .. (r+1) E/R - 1, holds only their W1 and W2, and brings
 * its own T tokens (x, ids with GLOBAL expert ids, weights, y). One
 * persistent launch per rank does it all:
 *
 *   1. dispatch: each token's x row goes ONCE to every rank that any of
 *      its k slots needs (id / (E/R); ids outside [0, E) contribute
 *      nothing, as in hr_moe_forward), into that rank's receive buffer, in
 *      the region kept for this source rank (so no cross-rank atomics),
 *      with the token's index and its k LOCAL ids (-1 for slots of other
 *      ranks); then a release flag (launch epoch, row count) in the peer;
 *   2. wait for every rank's dispatch;
 *   3. the received rows with their local ids are a single-GPU MoE problem
 *      over E/R experts: hr_moe_forward's route, GEMM1 + SwiGLU and GEMM2
 *      (the same tiles) make each pair's unweighted bf16 output row;
 *   4. each row goes back to the source rank's per-(t, j) buffer; then a
 *      release flag in the source;
 *   5. wait for every rank's returns, then hr_moe_forward's combine:
 *      y[t] = sum over j in slot order of w[t,j] row[t,j], fp32, rounded
 *      once. So y is BITWISE hr_moe_forward's y over the same global
 *      weights and inputs, whatever R and the grids.
 * Flags use system-scope release/acquire, so the same code is correct
 * across GPUs over NVLink and between virtual ranks on one GPU.
 *
 * Every rank maps every rank's receive block. hr_moe_ep_create allocates
 * this rank's and exchanges what peers need through the caller's
 * bootstrap (an allgather, e.g. over MPI, a TCP store or, for ranks in
 * one process, a barrier between threads): cudaIpcMemHandle_t between
 * processes (opened with cudaIpcOpenMemHandle), the raw device pointer
 * within one process (detected from the pid and host each rank sends, or
 * forced by `exchange`). Creation is collective: every rank must call it
 * with the same shape and nranks; every rank calls allgather twice (the
 * blocks, then whether every rank mapped them), so a rank that failed to
 * allocate or map makes every rank's create fail with the same code. A
 * rank whose arguments are invalid returns HR_EINVAL at once, without
 * calling allgather (its peers' allgather is then the bootstrap's to
 * end).
 *
 * Memory per rank (hr_moe_ep_memory), sized for the worst case, every
 * token of every rank sent to one rank with all k slots there (rows
 * R max_tokens, pairs R max_tokens k):
 *   peer-visible block: rows (2H + 4k + 4) + max_tokens k 2H bytes
 *     (received x rows, their local ids and tokens; the returned rows)
 *   local workspace:    pairs (2I + 2H + 8) + max_tokens k 4 bytes
 *     (h, the pairs' output rows, the route's tables)
 * Qwen3-30B-A3B (E 128, H 2048, I 768, k 8), R 8, max_tokens 4096:
 *   0.27 GB peer-visible + 1.48 GB local (max_tokens 8192: 0.54 + 2.96).
 * DeepSeek-V3 (E 256, H 7168, I 2048, k 8), R 8, max_tokens 4096:
 *   0.94 GB peer-visible + 4.83 GB local (max_tokens 8192: 1.88 + 9.67).
 * (max_tokens is each rank's own T bound; the pairs' rows dominate, and
 * a smaller max_tokens is the way to less.)
 *
 * Failure ends cleanly on every rank. Every wait for a peer is bounded by
 * the launch's timeout (args.timeout_ms, as the grid barriers), and reads
 * a fail word per rank in this rank's own memory. A rank that times out
 * (at a grid barrier or a wait for peers) or is aborted writes its word
 * (the epoch, why, where, which peer it waited for) into every rank's
 * memory, so every rank's launch ends within about one timeout with
 * HR_EBARRIER_TIMEOUT or HR_EABORTED and hr_moe_ep_last_failure naming
 * the rank that failed, the wait and the reason. No trap: the CUDA
 * context stays usable, and after hr_moe_ep_sync the next launch works.
 *
 * Launches: every rank must make the same sequence of forward calls:
 * each call, even one refused for its arguments, is one epoch (the
 * peers of a refused call time out waiting for it, and the next call is
 * in step again). In the barrier form all ranks' launches of an epoch
 * must be resident at once (the grid barriers, and the waits for each
 * other): on one GPU, R virtual ranks of grid G need R G <= SMs, each on
 * its own stream. The agnostic form (a lease in the agnostic mode, or
 * HR_MODE_AGNOSTIC) needs no residency: the same stages as a chain of
 * launches on the rank's stream, each either spread over any number of
 * running CTAs with no wait between them (the dispatch, hr_moe_forward's
 * agnostic kernel over the received rows, the return, the combine) or
 * one CTA (the exchanges with the peers), so a rank short of SMs
 * completes late and its peers wait for it (bounded by the timeout);
 * bitwise the same results. The grid is each rank's own (ranks may
 * differ). No CUDA graph capture, and no gate_up (its backward
 * recomputes GEMM1): HR_EUNSUPPORTED.
 *
 *     hr_moe_ep_bootstrap b = { my_allgather, my_ctx, HR_MOE_EP_EXCHANGE_AUTO, 0 };
 *     hr_moe_ep_create(&ep, dev, &global_shape, rank, nranks, &b);
 *     hr_moe_args a = { .tokens = T, .experts = E, ..., .w1 = my_w1, ... };
 *     err = hr_moe_ep_forward(ep, lease, &a, stream);
 *     err = hr_moe_ep_sync(ep);
 *     ... every rank synced (an allgather), then hr_moe_ep_destroy(ep);
 */
#define HR_MOE_EP_MAX_RANKS 8

typedef struct hr_moe_ep hr_moe_ep;

/* hr_moe_ep_bootstrap.exchange */
enum {
  HR_MOE_EP_EXCHANGE_AUTO = 0,     /* raw pointers for ranks in this process
                                      (same pid and host), IPC otherwise */
  HR_MOE_EP_EXCHANGE_POINTERS = 1, /* every rank is in this process
                                      (virtual ranks); refused otherwise */
  HR_MOE_EP_EXCHANGE_IPC = 2       /* every peer is another process;
                                      refused otherwise */
};

typedef struct hr_moe_ep_bootstrap {
  /* Collective: rank i's bytes_per_rank bytes of `send` end up at
   * recv + i * bytes_per_rank on every rank. 0 on success; a negative
   * HR_E* code is passed through, anything else is HR_ECONNECT. */
  int (*allgather)(void *ctx, const void *send, void *recv, size_t bytes_per_rank);
  void *ctx;
  int exchange;                    /* HR_MOE_EP_EXCHANGE_* */
  int backward;                    /* 1: room for hr_moe_ep_backward too
                                      (hr_moe_ep_memory_backward); 0: the
                                      forward only */
} hr_moe_ep_bootstrap;

/* Where a rank failed or noticed a failure: hr_moe_ep_failure.wait and
 * .noticed_wait (0..2 are hr_moe's barriers, with the same meaning). */
enum {
  HR_MOE_EP_WAIT_ROUTE = 0,     /* grid barrier: the received rows routed */
  HR_MOE_EP_WAIT_GEMM1 = 1,     /* grid barrier: GEMM1 done */
  HR_MOE_EP_WAIT_GEMM2 = 2,     /* grid barrier: GEMM2 done */
  HR_MOE_EP_WAIT_SENT = 3,      /* grid barrier: this rank's rows all sent */
  HR_MOE_EP_WAIT_RETURNED = 4,  /* grid barrier: the results all sent back */
  HR_MOE_EP_WAIT_TMA = 15,      /* a TMA load of a GEMM tile never landed */
  /* 11..14: the agnostic form's waits (hr_moe's agnostic kernel's);
   * 20..22: the backward's grid barriers (hr_moe_backward's: the received
   * rows routed, the dgu tiles done, the dx rows and dW done), 31..34 its
   * agnostic waits */
  HR_MOE_EP_WAIT_DISPATCH = 40, /* for every rank's rows */
  HR_MOE_EP_WAIT_RETURN = 41,   /* for every rank's results */
  HR_MOE_EP_WAIT_START = 42     /* at the start: a peer had already failed
                                   this epoch (a rank launched late) */
};

typedef struct hr_moe_ep_failure {
  int code;          /* HR_EBARRIER_TIMEOUT, HR_EABORTED */
  int failed_rank;   /* the rank whose own timeout or abort ended the
                        launch: this one or a peer */
  int wait;          /* where failed_rank failed (HR_MOE_EP_WAIT_*) */
  int waited_for;    /* at a wait for peers: the first rank failed_rank
                        had not heard from; -1 otherwise */
  int noticed_wait;  /* where this rank stopped (HR_MOE_EP_WAIT_*) */
  uint32_t epoch;    /* the launch's epoch (1 for the first forward) */
  hr_moe_failure local; /* this rank's error word: detail.barrier is
                           noticed_wait; at a grid barrier arrived and
                           expected count CTAs, at a wait for peers ranks;
                           grid, timeout_ms, sm, cta */
} hr_moe_ep_failure;

/* Bytes a rank allocates for `global_shape` over `nranks`: the block its
 * peers map and its local workspace (either may be NULL). HR_EINVAL for
 * a shape hr_moe_create refuses, nranks outside 1..HR_MOE_EP_MAX_RANKS,
 * E % nranks != 0, or more than 2^30 pairs (nranks max_tokens topk).
 * Plain arithmetic: no GPU needed. */
int hr_moe_ep_memory(const hr_moe_shape *global_shape, int nranks,
                     uint64_t *peer_bytes, uint64_t *local_bytes);

/* The same for a context made with boot.backward = 1 (the training
 * form): the peer-visible block holds the received rows' dy and weights
 * and the returned d(w) too, rows (2H + 4k) + max_tokens k 4 bytes more;
 * the local workspace the backward's dh, d(w) partials and place table,
 * pairs (4I + 4 + I/16) bytes more. */
int hr_moe_ep_memory_backward(const hr_moe_shape *global_shape, int nranks,
                              uint64_t *peer_bytes, uint64_t *local_bytes);

/* Create rank `rank` of `nranks` on CUDA device `device` (-1: the current
 * one), collectively (above). global_shape.experts is E, all experts;
 * max_tokens bounds each rank's own T. HR_EINVAL (checked first, nothing
 * touched): out NULL, a bad shape (hr_moe_ep_memory), rank outside
 * 0..nranks-1, boot NULL or without allgather, a bad exchange or
 * backward. HR_ENOGPU,
 * HR_EUNSUPPORTED (not sm_90), HR_ENOMEM, HR_ECUDA (IPC), HR_EINVAL also
 * when the ranks disagree (shape, nranks, two ranks with one number, or
 * the exchange asked for does not fit where the ranks are), or the
 * allgather's code; the same code on every rank past the first
 * allgather. */
int hr_moe_ep_create(hr_moe_ep **out, int device, const hr_moe_shape *global_shape,
                     int rank, int nranks, const hr_moe_ep_bootstrap *boot);

/* Wait for the last launch, close the peers' blocks and free everything.
 * Peers map this rank's block: destroy only once every rank's last launch
 * has ended (each synced, then an allgather). NULL is ok. */
void hr_moe_ep_destroy(hr_moe_ep *ep);

/* One EP forward with the grid, mode and cluster size of this rank's own
 * lease (as hr_moe_forward: the agnostic mode runs the agnostic form,
 * no clusters). args:
 * this rank's tokens (0..max_tokens: a rank may have none, and then x,
 * ids, w and y may be NULL), experts, hidden, inter and topk the GLOBAL
 * shape, topk_ids GLOBAL ids, w1 [E/R, 2I, H] and w2 [E/R, H, I] this
 * rank's experts only. HR_EINVAL for bad arguments (nothing launched;
 * the epoch is still spent: above). */
int hr_moe_ep_forward(hr_moe_ep *ep, const hr_lease *lease, const hr_moe_args *args,
                      void *stream);

/* The same without a lease: `grid` CTAs (1..SMs), mode HR_MODE_HEADROOM,
 * HR_MODE_COOPERATIVE or HR_MODE_PARTITION (the barrier form) or
 * HR_MODE_AGNOSTIC (the agnostic form), no clusters. */
int hr_moe_ep_forward_grid(hr_moe_ep *ep, int grid, hr_mode mode, const hr_moe_args *args,
                           void *stream);

/*
 * The backward of hr_moe_ep_forward (a context made with boot.backward
 * = 1; HR_EINVAL otherwise): hr_moe_backward's math split the same way.
 * args.fwd as for hr_moe_ep_forward (this rank's tokens, GLOBAL ids,
 * this rank's experts' w1 and w2; fwd.y not read); dy, dx and
 * dtopk_weights this rank's tokens; dw1 [E/R, 2I, H] and dw2 [E/R, H, I]
 * this rank's experts. One launch per rank: x and dy rows dispatched
 * like the forward's x (with the local slots' weights), the local
 * experts' backward (hr_moe_backward's route, dgu, dx rows and dW tiles)
 * over the received rows, each pair's dx row and d(w) returned to its
 * source, and hr_moe_backward's combine there. So dx, dW1, dW2 and
 * d(w) are BITWISE hr_moe_backward's over the same global weights and
 * inputs (rank r's tokens after rank r-1's), whatever R and the grids.
 * Failures, epochs and residency as the forward's (every call is one
 * epoch; the grid barriers are hr_moe_backward's 20..22 in
 * hr_moe_ep_failure.wait, the agnostic form's waits its 31..34; the
 * agnostic form as the forward's, around hr_moe_backward's agnostic
 * kernel; no graph capture: HR_EUNSUPPORTED). HR_EINVAL for bad
 * arguments (nothing launched; the epoch is still spent).
 */
int hr_moe_ep_backward(hr_moe_ep *ep, const hr_lease *lease, const hr_moe_grad_args *args,
                       void *stream);

/* The same without a lease: `grid` CTAs (1..SMs), mode HR_MODE_HEADROOM,
 * HR_MODE_COOPERATIVE or HR_MODE_PARTITION (the barrier form) or
 * HR_MODE_AGNOSTIC. */
int hr_moe_ep_backward_grid(hr_moe_ep *ep, int grid, hr_mode mode,
                            const hr_moe_grad_args *args, void *stream);

/* Wait for the last launch: HR_OK; HR_EBARRIER_TIMEOUT or HR_EABORTED
 * as soon as the error word says so (this rank's failure or a peer's:
 * hr_moe_ep_last_failure says which); HR_ECUDA. A timeout at one of this
 * rank's own grid barriers under a lease is reported to the daemon, as
 * hr_moe_sync does. HR_OK when nothing was launched. */
int hr_moe_ep_sync(hr_moe_ep *ep);

/* The same, bounded on the host: HR_ETIMEDOUT after timeout_ms (0: look
 * once) with the launch still in flight (hr_moe_sync_timeout). */
int hr_moe_ep_sync_timeout(hr_moe_ep *ep, int timeout_ms);

/* What the last failed launch recorded; HR_ENOTFOUND when none failed. */
int hr_moe_ep_last_failure(const hr_moe_ep *ep, hr_moe_ep_failure *out);

/* Ask this rank's launch in flight to stop: it leaves at its next wait,
 * tells every peer, and every rank's launch of that epoch ends with
 * HR_EABORTED naming this rank. Safe from another thread. */
int hr_moe_ep_abort(hr_moe_ep *ep);

#ifdef __cplusplus
}
#endif

#endif /* HEADROOM_MOE_H */
