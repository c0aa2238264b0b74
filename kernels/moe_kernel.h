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
 * pairs a step: Qwen3-30B-A3B T = 1024 ~62 pairs a piece, T = 8192 ~500.
 * Overridable, -DHR__MOE_AGN_PIECE=N, for a side-by-side run. */
#ifndef HR__MOE_AGN_PIECE
#define HR__MOE_AGN_PIECE 32
#endif

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

/* The phases, as bits: the benchmark times variants of a launch that
 * leave a phase out or run it twice (hr__moe_forward_variant in
 * moe_bench.h) and takes differences. Every phase is idempotent, so run
 * twice it writes the same bytes. ROUTE is the placing of the pairs (the
 * counts and offsets are made whatever the bits say: every later phase
 * needs them). */
enum {
  HR__MOE_PHASE_ROUTE = 1,
  HR__MOE_PHASE_GEMM1 = 2,
  HR__MOE_PHASE_GEMM2 = 4,
  HR__MOE_PHASE_COMBINE = 8
};

/* The benchmark's variants of the GEMMs, bits of `variant` (all 0 in
 * production), to compare with what came before or might come next: the
 * mma.sync big tile (3 stages) instead of the wgmma one (on cp.async); the big tile's
 * units row tile major instead of token tile major; its weight loads
 * evict-first in L2 instead of no preference; the mma.sync mid tile
 * instead of the wgmma one; the wgmma mid tile waiting for each step's
 * MMAs before the next step's loads (MID_WAIT, as before 2026-11-30
 * 10:00) instead of keeping one step's MMAs in flight; the mid tile
 * where the wide one would run (NO_WIDE, as before); the L2
 * prefetch of a unit's weights before the waits (PREFETCH). Each is the
 * same sums in the same order (y bitwise the same) or a permutation of
 * the work. */
enum {
  HR__MOE_VAR_SYNC_BIG = 1,
  HR__MOE_VAR_FT_MAJOR = 2,
  HR__MOE_VAR_A_EVICT_FIRST = 4,
  HR__MOE_VAR_MID_SYNC = 8,
  HR__MOE_VAR_MID_WAIT = 16,
  /* the 80-token tile with two __syncthreads a step and its loads a step
   * further ahead, as before 2026-12-01 (moe_one_sync, moe_gemm.cuh):
   * the barrier kernel's where its units are dealt, and the agnostic
   * kernel's; and the agnostic kernel's 256-row mid tile likewise, as
   * before 2026-12-01 07:00 */
  HR__MOE_VAR_TWO_SYNC = 32,
  HR__MOE_VAR_NO_WIDE = 64,
  HR__MOE_VAR_PREFETCH = 128,
  /* the wgmma tiles on the cp.async pipeline, every thread loading and a
   * __syncthreads a step (the default before the TMA pipeline) */
  HR__MOE_VAR_CPASYNC = 256,
  /* the barrier kernel launched without clusters (not a GEMM variant: the
   * launch's; moe_api.cu) */
  HR__MOE_VAR_NO_CLUSTER = 512,
  /* a fault, for the tests only: each CTA's TMA producer leaves one step
   * unloaded, so the warps' wait on it must time out into the error word
   * (tests/gpu/test_moe_tma_timeout.c) */
  HR__MOE_VAR_TMA_DROP = 1024,
  /* the 128-token wide tile where the 96-token one runs (48 to 72 pairs
   * per expert), as before 2026-11-30 12:00 */
  HR__MOE_VAR_WIDE128 = 2048,
  /* the mid tile 256 weight rows tall (moe_gemm.cuh), on the cp.async
   * pipeline (barrier kernel) */
  HR__MOE_VAR_TALL = 4096,
  /* the cp.async tiles from 25 to 95 pairs per expert at every shape in
   * both kernels (moe_pick_tile runs the big TMA tile there where
   * I >= 2048, but for the agnostic kernel's 256-row tiles) */
  HR__MOE_VAR_CPASYNC_MID = 8192,
  /* the big tile, on its TMA pipeline, wherever the mid, wide96 or wide
   * tile would run (from 25 pairs per expert), at every shape */
  HR__MOE_VAR_BIG_TALL = 16384,
  /* the TMA tile's results stored straight from the accumulators, 2 bytes
   * a store, as before 2026-11-30 15:00, instead of staged per warp and
   * stored in 16-byte chunks (moe_gemm_tma.cuh) */
  HR__MOE_VAR_TMA_DIRECT_STORE = 32768,
  /* the barrier kernel's wide96 tile 128 weight rows a unit, as before
   * 2026-11-30 15:00, instead of 256 */
  HR__MOE_VAR_WIDE96_SHORT = 65536,
  /* the TMA_DROP fault ten units into a run (moe_gemm_tma.cuh, tma_drop):
   * the CTA must still leave (test_moe_tma_timeout) */
  HR__MOE_VAR_TMA_DROP_LATE = 131072,
  /* the 96-token tile where the 80-token one runs, as before 2026-11-30
   * 17:00 (moe_pick_tile) */
  HR__MOE_VAR_WIDE96 = 262144,
  /* the 80-token tile where the 96-token one runs */
  HR__MOE_VAR_WIDE80 = 524288,
  /* the agnostic kernel's mid, wide80 and wide96 tiles 128 weight rows a
   * unit, as before 2026-11-30 16:30, instead of 256 (moe_tile_tall) */
  HR__MOE_VAR_AGN_SHORT = 1048576,
  /* the TMA tile's wgmma descriptors each made whole, as before
   * 2026-11-30 16:05, instead of by adds (moe_tile_big_tma_desc_full) */
  HR__MOE_VAR_DESC_FULL = 2097152,
  /* the big TMA tile from 25 to 95 pairs per expert where I >= 2048 in
   * both kernels, as before 2026-11-30 18:00, instead of the agnostic
   * kernel's 256-row cp.async tiles from 25 to 71 (moe_pick_tile) */
  HR__MOE_VAR_BIG_MID_ALL = 4194304,
  /* the barrier kernel's cp.async tiles with their units dealt round
   * robin, as before 2026-11-30 20:00, instead of claimed in order from
   * the stage's counter (moe_gemm_claim.cuh) */
  HR__MOE_VAR_DEALT = 8388608,
  /* the barrier kernel's pairs placed a slice per CTA, then barrier 0, at
   * every T, as before 2026-11-30 20:00, instead of every CTA placing all
   * of them up to HR__MOE_ROUTE_ALL_MAX_PAIRS (moe_kernel.cu) */
  HR__MOE_VAR_ROUTE_SPLIT = 16777216,
  /* the barrier kernel's cp.async tiles claim their units (and run the
   * agnostic kernel's tiles: moe_claims, moe_gemm.cuh). Not only a
   * benchmark's bit: every launch sets it from H = HR__MOE_CLAIM_MIN_H
   * (moe_api.cu); the tests set it on the small shapes, whose every tile
   * and grid it then covers (test_moe_grids) */
  HR__MOE_VAR_CLAIM = 33554432,
  /* the cp.async wgmma tiles' results staged one warpgroup's half a pass,
   * as before 2026-11-30 20:00, instead of in one pass where they fit the
   * slot (tile_store, moe_gemm.cuh) */
  HR__MOE_VAR_STORE_TWO_PASS = 67108864,
  /* both kernels' combine a 16-byte chunk a thread, each reading its
   * token's positions again, as before 2026-12-01 05:45, also where a
   * token a warp has fewer round trips (moe_combine_by_token,
   * moe_combine.cuh) */
  HR__MOE_VAR_COMBINE_CHUNKS = 134217728,
  /* Diagnostics, for the benchmark alone: y is wrong with each. What a
   * unit's stores cost (its results staged in shared memory, never
   * copied out), what the MMAs cost (none issued: the loads and the
   * stores alone), and what the token rows cost (never loaded: the MMAs
   * read whatever the slot holds). The cp.async wgmma tiles of both
   * kernels. */
  HR__MOE_VAR_DIAG_NO_STORE = 268435456,
  HR__MOE_VAR_DIAG_NO_MMA = 536870912,
  HR__MOE_VAR_DIAG_NO_TOKENS = 1073741824
};

/* The variant bits device code reads (every read goes through this). The
 * production build, -DHR__MOE_NO_VARIANTS=1 (libheadroom_moe.so:
 * kernels.mk), keeps only the bit that production launches set
 * (HR__MOE_VAR_CLAIM), so that the compiler leaves every other variant's
 * code out: half the SASS (barrier kernel 0.94 MB instead of 1.76), and
 * Qwen3-30B-A3B T = 512 2% faster, T = 1024 3%, the agnostic kernel at
 * T = 512 5% (bench/results/moe-novariants-h200-2026-12-01.md). The
 * static library, the benchmark's and the variant tests', keeps them
 * all; in the production build the benchmark's variants and the tests'
 * faults do nothing. */
#ifndef HR__MOE_NO_VARIANTS
#define HR__MOE_NO_VARIANTS 0
#endif
/* A diagnostic with it, -DHR__MOE_DIAG_NO_CLAIM=1: the barrier kernel
 * never claims, so its claimed stages are compiled out too; a build to
 * measure what their code costs the launches that do not run it. */
#ifndef HR__MOE_DIAG_NO_CLAIM
#define HR__MOE_DIAG_NO_CLAIM 0
#endif
#define HR__MOE_VARIANT(p)                                                                 \
  (HR__MOE_NO_VARIANTS                                                                     \
       ? (p).variant & (HR__MOE_DIAG_NO_CLAIM ? 0u : (unsigned)HR__MOE_VAR_CLAIM)          \
       : (p).variant)

/* A diagnostic, outside the enum (whose values are ints; the last free
 * bit): the barrier kernel's CTA b starts each GEMM stage b x 64 ns
 * after its barrier (moe_stagger, moe_kernel.cu); y unchanged. Every
 * stage's first unit waits ~10 us for one event that releases all CTAs
 * at once (bench/results/moe-timeline-h200-2026-12-01.md); if the stall
 * shrinks when the CTAs start apart, it is a queue they all join at the
 * same moment. Measured: level, the stall is not such a queue
 * (bench/results/moe-coldstart-h200-2026-12-01.md). */
#define HR__MOE_VAR_DIAG_STAGGER 0x80000000u

/* From this H (GEMM1's K) the barrier kernel's cp.async tiles claim their
 * units rather than take them dealt round robin (moe_gemm_claim.cuh), and
 * it runs the agnostic kernel's tiles (moe_pick_tile).
 * Measured on an H200 (bench/results/moe-claims-h200-2026-11-30.md):
 * DeepSeek-V3 (H = 7168) T = 16, 128, 512 3-7% faster claimed, level at
 * 1 and 1024, and with the agnostic kernel's tiles 11% faster at 2048;
 * Qwen3-30B-A3B (H = 2048) level at T <= 128 and 2048, 1-2% slower at
 * 1024 and 5-6% at 512. Long units (112 K steps a GEMM1 unit at
 * H = 7168) leave a stage's end ragged when dealt, and claims even it
 * out; short ones end nearly together anyway, and there the claimed
 * loop's own costs show. */
#define HR__MOE_CLAIM_MIN_H 4096

/* Up to this many pairs every CTA of the barrier kernel places all of
 * them (one warp, 32 a step), so barrier 0 goes: ~1-3 us less at T = 1
 * (Qwen3-30B-A3B 0.037 ms against 0.038, DeepSeek-V3 0.180 against 0.183),
 * level at T = 16, and slower from T = 128 (0.312 against 0.301), where
 * each CTA's placing of them all outlasts the barrier it saves. */
#define HR__MOE_ROUTE_ALL_MAX_PAIRS 128

/* Rows per TMA box of token rows (the x rows in expert order, h; the
 * maps of moe_api.cu, the loads of moe_gemm_tma.cuh). 32-row boxes, which
 * load nvalid rounded up to 32 rather than to 64, measured no better:
 * DeepSeek-V3 T = 1024 1.5-2.5% slower in both kernels, twice; T = 8192
 * 0.3-1.3% faster (bench/results/moe-wide80-h200-2026-11-30.md). */
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
  /* The benchmark's variants: HR__MOE_PHASE_* bits of the phases to leave
   * out and to run twice. 0 in every launch through headroom_moe.h. */
  unsigned skip, repeat;
  unsigned variant;           /* HR__MOE_VAR_* bits */
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
/* How many times this launch runs `phase`: 1, or 0 / 2 in the benchmark's
 * variants. A uniform branch on a kernel parameter: free. */
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
