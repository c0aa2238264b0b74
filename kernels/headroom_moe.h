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
 * The forward saves nothing for it: the backward recomputes the routing
 * and GEMM1 (g, u) from x, ids and W1, which costs a third more backward
 * FLOPs and no activation memory (docs/decisions.md, "The backward
 * recomputes GEMM1"). Every output element is written by one CTA from
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

#ifdef __cplusplus
}
#endif

#endif /* HEADROOM_MOE_H */
