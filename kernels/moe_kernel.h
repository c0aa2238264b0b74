/*
 * moe_kernel.h: what the launch path (moe_api.cu) and the kernel
 * (moe_kernel.cu) share. Internal: prefix hr__.
 */
#ifndef HR_MOE_KERNEL_H
#define HR_MOE_KERNEL_H

#include <stdint.h>

#include <cuda.h>             /* CUtensorMap: a type only, no driver call */
#include <cuda_runtime.h>

#define HR__MOE_THREADS 256

/* What the kernel writes in the error word's `code`. */
enum {
  HR__MOE_FAIL_NONE = 0,
  HR__MOE_FAIL_TIMEOUT = 1,  /* a barrier wait ran past the timeout */
  HR__MOE_FAIL_ABORT = 2,    /* the host set the abort word */
  HR__MOE_FAIL_STALE = 3     /* an earlier launch failed and its barrier
                                words were never cleared (no hr_moe_sync) */
};

/* Pinned, host-mapped: the first CTA that notices a failure fills it and
 * writes `seq` last, so the host trusts the record only once seq equals
 * the launch it waits for. `abort_seq` is written by the host: a launch
 * whose seq is <= abort_seq leaves at its next barrier wait. */
typedef struct hr__moe_host_words {
  volatile uint32_t seq;
  volatile int32_t code;
  volatile int32_t barrier;
  volatile int32_t arrived;
  volatile int32_t expected;
  volatile int32_t sm;
  volatile int32_t cta;
  volatile uint32_t abort_seq;
  /* The agnostic kernel: the seq of the last launch whose y is complete,
   * written by the CTA that finishes the last combine task (the launch
   * itself ends later when CTAs that waited for an SM still have to start
   * and leave). */
  volatile uint32_t done_seq;
} hr__moe_host_words;

/* The grid barrier's state in device memory, one 128-byte line per word so
 * the spinning readers of `gen` do not slow the arrivals on `count`.
 * Normal use leaves count at 0, so no reset is needed between launches;
 * `fail` holds the seq of the last launch that failed (the host clears the
 * whole block after a failure, once that launch has drained). */
typedef struct hr__moe_sync {
  unsigned count;
  unsigned pad0[31];
  unsigned gen;
  unsigned pad1[31];
  unsigned fail;
  unsigned pad2[31];
  /* The GEMM stages' units past those dealt, claimed in order (GEMM1,
   * GEMM2; moe_gemm_stage_tma, moe_gemm_stage_claimed): CTA 0 puts each
   * back to 0 past the grid barrier that ends its stage. */
  unsigned claim[2];
  unsigned pad3[30];
} hr__moe_sync;

/* The agnostic kernel's schedule (moe_agnostic.cu), in device memory
 * after hr__moe_sync. Every word is 0 between launches: the last CTA to
 * leave a launch puts them back (and the per-tile counters after them),
 * and the host clears the block after a failed launch, as it clears the
 * barrier words. One 128-byte line per word: `ticket` takes an atomic per
 * task from every CTA, the others are polled. */
typedef struct hr__moe_agn {
  unsigned ticket;        /* next task to hand out */
  unsigned pad0[31];
  unsigned scatter_done;  /* scatter pieces finished */
  unsigned pad1[31];
  unsigned g1_total;      /* GEMM1 units finished, all tiles */
  unsigned pad2[31];
  unsigned combine_done;  /* combine tasks finished */
  unsigned pad3[31];
  unsigned exited;        /* CTAs that have left */
  unsigned pad4[31];
} hr__moe_agn;

/* Pairs per scatter piece of the agnostic kernel, at least: a launch has
 * min(ceil(pairs / PIECE), grid) pieces, so that each running CTA places
 * one piece in its routing pass (moe_agnostic.cu agn_route), as the
 * barrier kernel's CTA places its slice. One warp places a piece, 32
 * pairs a step. */
#define HR__MOE_AGN_PIECE 32

/* Where a wait of the agnostic kernel failed: the `barrier` field of the
 * failure record (0..2 are the barrier kernel's barriers). */
enum {
  HR__MOE_WAIT_SCATTER = 11,  /* for every scatter piece */
  HR__MOE_WAIT_GEMM1 = 12,    /* for the GEMM1 tiles of a token tile */
  HR__MOE_WAIT_GEMM2 = 13,    /* for the GEMM2 tiles a combine task reads */
  HR__MOE_WAIT_CLAIM = 14,    /* noticed between tasks (an abort) */
  /* Either kernel: a TMA load of the big tile never landed (a bug or a
   * dead context); `arrived` holds the GEMM stage, 1 or 2. */
  HR__MOE_WAIT_TMA = 15
};

/* The benchmark hook (moe_bench.h), bits of hr__moe_params.skip and
 * .repeat: the phases a launch leaves out or runs twice, so that
 * bench/moe_phases.c can say where the time goes by differences. Every
 * phase is idempotent, so run twice it writes the same bytes. ROUTE is
 * the placing of the pairs (the counts and offsets are made whatever the
 * bits say: every later phase needs them). 0 in every launch through
 * headroom_moe.h; a uniform branch on a kernel parameter, so free. */
enum {
  HR__MOE_PHASE_ROUTE = 1,
  HR__MOE_PHASE_GEMM1 = 2,
  HR__MOE_PHASE_GEMM2 = 4,
  HR__MOE_PHASE_COMBINE = 8,
  /* the backward's (moe_backward.h): GEMM1 is its dgu stage, GEMM2 its
   * dx rows, COMBINE its combine, and DW its dW groups */
  HR__MOE_PHASE_DW = 64
};

/* The tests' faults, bits of hr__moe_params.skip beside the phases
 * (the benchmark hook): a refill of a TMA run left out, so the slot it
 * was for is never filled again and the warps' wait on it must time out
 * into the error word (tests/gpu/test_moe_tma_timeout.c). REFILL: the
 * refill at step 1 (the slot step 0 used); REFILL_LATE: at step
 * 9 nk + 1, in a run of 10 units or more, when the claims have filled
 * every ring entry of the run (HR__MOE_RING = 8), so none ahead is a
 * stale -1 that would end it: the CTA must still leave. */
enum {
  HR__MOE_FAULT_TMA_REFILL = 16,
  HR__MOE_FAULT_TMA_REFILL_LATE = 32
};

/* Bits of hr__moe_params.flags. CLAIM: the barrier kernel's cp.async
 * tiles claim their units (moe_gemm_claim.cuh) and it runs the agnostic
 * kernel's tiles (moe_claims, moe_gemm.cuh). Every launch sets it from
 * H = HR__MOE_CLAIM_MIN_H (moe_api.cu); the hook sets it at any H, so that
 * the tests cover every claimed tile and grid on the small shapes
 * (test_moe_grids). */
enum { HR__MOE_FLAG_CLAIM = 1 << 25 };  /* any bit would do; 25 is the one
                                           the kernels were measured with */

/* From this H (GEMM1's K) the barrier kernel's cp.async tiles claim their
 * units rather than take them dealt round robin (moe_gemm_claim.cuh), and
 * it runs the agnostic kernel's tiles (moe_pick_tile): long units leave a
 * dealt stage's end ragged, and claims even it out; short ones end nearly
 * together anyway, and there the claimed loop's own costs show
 * (docs/decisions.md, "Claimed units"). */
#define HR__MOE_CLAIM_MIN_H 4096

/* Up to this many pairs every CTA of the barrier kernel places all of
 * them (one warp, 32 a step), so barrier 0 goes; from T = 128 each CTA's
 * placing of them all outlasts the barrier it saves (docs/decisions.md,
 * "Routing"). */
#define HR__MOE_ROUTE_ALL_MAX_PAIRS 128

/* Rows per TMA box of token rows (the x rows in expert order, h; the
 * maps of moe_api.cu, the loads of moe_gemm_tma.cuh). 32-row boxes, which
 * load nvalid rounded up to 32 rather than to 64, measured no better
 * (docs/decisions.md, "The big tile on TMA"). */
#define HR__MOE_TMA_TOK_BOX 64

/* Everything one launch needs, passed by value as a __grid_constant__
 * (the TMA loads read the tensor maps from the parameter space). */
typedef struct hr__moe_params {
  /* The TMA pipeline's tensor maps (moe_gemm_tma.cuh), boxes of 64 K
   * (128 bytes, the 128-byte swizzle), 64 rows (weights) or
   * HR__MOE_TMA_TOK_BOX (tokens): W1 as [E][I/8][2][8][H] so a
   * box is 4 features groups of 8 gate rows then 8 up rows, the GEMM1
   * row order; W2 as [E][H][I]; the x rows copied in expert order (xs,
   * which is ypair's memory: GEMM2 overwrites it only after GEMM1 has
   * read it) as [pairs][H]; h as [pairs][I]. */
  CUtensorMap tm_w1, tm_w2, tm_xs, tm_h;
  /* inputs and output (bf16 as raw 16-bit words) */
  const uint16_t *x;
  const int32_t *ids;
  const float *wts;
  const uint16_t *w1;
  const uint16_t *w2;
  uint16_t *y;
  int T, E, H, I, k;
  /* workspace, sized for max_tokens * k (token, slot) pairs */
  int32_t *sorted_tok;  /* [pairs]: token of each pair, in expert order */
  int32_t *pos_of;      /* [T*k]: where pair (t, j) landed, -1 if skipped */
  uint16_t *h;          /* [pairs, I] bf16: SwiGLU output, expert order */
  float *gu;            /* [pairs, 2I] fp32 or NULL: GEMM1's gate and up
                           sums, expert order (hr_moe_args.gate_up): the
                           forward writes them, the backward reads them */
  uint16_t *ypair;      /* [pairs, H] bf16: GEMM2 output, expert order;
                           before GEMM2, with the TMA tiles, the x rows
                           in expert order (xs) that GEMM1 reads */
  /* the agnostic kernel's schedule (unused by the barrier kernel) */
  hr__moe_agn *agn;
  unsigned *g1_done;    /* [token tiles]: GEMM1 units finished, per tile */
  unsigned *g2_done;    /* [token tiles]: GEMM2 units finished, per tile */
  /* failure handling */
  hr__moe_sync *sync;
  hr__moe_host_words *host;  /* device pointer to the mapped words */
  uint32_t seq;              /* this launch's number, >= 1 */
  unsigned long long timeout_ns;
  /* The benchmark hook (moe_bench.h): HR__MOE_PHASE_* bits of the phases
   * to leave out and to run twice. 0 in every launch through
   * headroom_moe.h. */
  unsigned skip, repeat;
  unsigned flags;             /* HR__MOE_FLAG_* bits */
  /* The benchmark's timeline (NULL in production): the barrier kernel's
   * thread 0 of each CTA writes %globaltimer at its stage boundaries and
   * unit ends, HR__MOE_TRACE_WORDS words a CTA (moe_trace, moe_kernel.cu),
   * then its SM's %clock64 at the same marks in as many words again, then
   * HR__MOE_TRACE_INNER_WORDS a CTA that only a diagnostic build writes */
  unsigned long long *trace;
} hr__moe_params;

/* The timeline's words per CTA: HR__MOE_TRACE_MARKS marks (the last of
 * them the SM the CTA ran on), then the ends of up to HR__MOE_TRACE_UNITS
 * units of GEMM1, then of GEMM2: a dealt stage's first units; a claimed
 * stage's last (moe_gemm_claim.cuh: unit u of the CTA's run in word
 * u % HR__MOE_TRACE_UNITS). */
#define HR__MOE_TRACE_MARKS 12
#define HR__MOE_TRACE_UNITS 24
#define HR__MOE_TRACE_WORDS (HR__MOE_TRACE_MARKS + 2 * HR__MOE_TRACE_UNITS)
enum {
  HR__MOE_MARK_START = 0,   /* past the launch's checks */
  HR__MOE_MARK_ROUTED,      /* the route done, before barrier 0 */
  HR__MOE_MARK_G1_START,    /* past barrier 0 */
  HR__MOE_MARK_G1_END,      /* GEMM1 done, before barrier 1 */
  HR__MOE_MARK_G2_START,    /* past barrier 1 */
  HR__MOE_MARK_G2_END,      /* GEMM2 done, before barrier 2 */
  HR__MOE_MARK_C_START,     /* past barrier 2 */
  HR__MOE_MARK_END,         /* the combine done */
  HR__MOE_MARK_ARRIVED,     /* + barrier: thread 0's arrival counted */
  HR__MOE_MARK_SM = HR__MOE_MARK_ARRIVED + 3   /* not a time: the SM, + 1 */
};

/* The timeline's third set of words, HR__MOE_TRACE_INNER_WORDS a CTA:
 * written only by a build for a diagnostic (NVCC_EXTRA=
 * -DHR__MOE_TRACE_INNER=1; moe_trace_inner), the steps inside a dealt
 * GEMM stage's first unit, its start and its end, GEMM1's at word k,
 * GEMM2's at HR__MOE_INNER_STAGE + k: where the first unit's ~10 us go. */
#define HR__MOE_TRACE_INNER_WORDS 32
#define HR__MOE_INNER_STAGE 16
/* The buffer of a grid of `grid` CTAs, in words: the times from 0, the
 * clocks from HR__MOE_TRACE_CLOCKS_AT, the inner marks from
 * HR__MOE_TRACE_INNER_AT; the kernel and moe_phases both place them so. */
#define HR__MOE_TRACE_CLOCKS_AT(grid) ((size_t)(grid) * HR__MOE_TRACE_WORDS)
#define HR__MOE_TRACE_INNER_AT(grid) (2 * (size_t)(grid) * HR__MOE_TRACE_WORDS)
#define HR__MOE_TRACE_BUFFER_WORDS(grid) \
  (HR__MOE_TRACE_INNER_AT(grid) + (size_t)(grid) * HR__MOE_TRACE_INNER_WORDS)
/* The routing's marks of a -DHR__MOE_TRACE_ROUTE=1 build (moe_trace_route),
 * from inner word HR__MOE_INNER_STAGE on (in us from the first CTA's start
 * mark, as the timeline's; bench/trace_summary.py prints them). */
enum {
  HR__MOE_ROUTE_MARK_COUNTED = 0, /* the table counted and scanned */
  HR__MOE_ROUTE_MARK_PLACED,    /* the slice (piece) placed */
  HR__MOE_ROUTE_MARK_TILED,     /* the tile shape and token tiles */
  HR__MOE_ROUTE_MARK_PUBLISHED  /* agnostic: the piece's count released */
};
enum {
  HR__MOE_INNER_LAST_STEP = 0,  /* the unit's last K step issued */
  HR__MOE_INNER_DRAINED,        /* its MMAs complete (tile_drain) */
  HR__MOE_INNER_STAGED,         /* its results staged in shared memory, past
                                   the __syncthreads after the staging */
  HR__MOE_INNER_STORED,         /* thread 0's part of the stores issued */
  HR__MOE_INNER_END,            /* the unit's end (accumulators zeroed) */
  HR__MOE_INNER_DECODED,        /* the next unit decoded */
  HR__MOE_INNER_DRAINED_ALL,    /* the last warp's MMAs complete (each warp's
                                   lane 0 after its tile_drain, the latest) */
  HR__MOE_INNER_WRITTEN_ALL,    /* the last warp's staging writes done, before
                                   the __syncthreads that STAGED is past */
  HR__MOE_INNER_STEP,           /* + i: the first unit's K step 0, 1, 2, 4, 8,
                                   16 landed (i = 0..5), the whole CTA past
                                   the step's __syncthreads */
  HR__MOE_INNER_INIT = HR__MOE_INNER_STEP + 6, /* the stage's loader set up (its
                                   first unit decoded, GEMM1's token ids asked) */
  HR__MOE_INNER_FILLED,         /* the pipeline's first steps issued */
  HR__MOE_INNER_MARKS
};
/* a stage's inner marks fit its words (C and C++ alike) */
typedef char hr__moe_inner_marks_fit[HR__MOE_INNER_MARKS <= HR__MOE_INNER_STAGE ? 1 : -1];

#ifdef __CUDACC__
/* How many times this launch runs `phase`: 1, or 0 / 2 through the
 * benchmark hook. */
static __device__ __forceinline__ int moe_phase_runs(const hr__moe_params &p,
                                                     unsigned phase)
{
  return (p.skip & phase) ? 0 : (p.repeat & phase) ? 2 : 1;
}
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* Once per device (the current one), before the first launch. */
cudaError_t hr__moe_prepare(void);

/* Launch `grid` CTAs on `stream`; `coop` adds the cooperative attribute,
 * `cluster` > 1 the cluster dimension. */
cudaError_t hr__moe_launch(const hr__moe_params *p, int grid, int coop,
                           int cluster, cudaStream_t stream);

/* The same for the residency-agnostic kernel (moe_agnostic.cu): no
 * cluster, no cooperative attribute; any grid is correct. */
cudaError_t hr__moe_agnostic_prepare(void);
cudaError_t hr__moe_agnostic_launch(const hr__moe_params *p, int grid,
                                    cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif /* HR_MOE_KERNEL_H */
