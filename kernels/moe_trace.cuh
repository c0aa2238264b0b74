/*
 * moe_trace.cuh: the benchmark's timeline of the barrier kernel
 * (bench/moe_phases.c --trace). p.trace is NULL in every production
 * launch, so each mark costs one uniform branch; with a buffer, thread 0
 * of each CTA writes %globaltimer into its CTA's words (moe_kernel.h,
 * HR__MOE_TRACE_*): stage boundaries, barrier arrivals, unit ends; and
 * its SM's %clock64 into a second set of words past the grid's.
 */
#ifndef HR_MOE_TRACE_CUH
#define HR_MOE_TRACE_CUH

#include "moe_kernel.h"
#include "moe_ptx.cuh"

/* Mark w: %globaltimer into the CTA's word w, and its SM's %clock64 into
 * the same word of the buffer's second half (gridDim.x CTAs on): cycles
 * against nanoseconds tell a stalled SM (its clock runs) from a halted
 * one (it does not). */
static __device__ __forceinline__ void moe_trace(const hr__moe_params &p, int w)
{
  if(p.trace && threadIdx.x == 0) {
    unsigned long long *t = p.trace + (size_t)blockIdx.x * HR__MOE_TRACE_WORDS + w;
    t[0] = global_timer_ns();
    t[HR__MOE_TRACE_CLOCKS_AT(gridDim.x)] = (unsigned long long)clock64();
  }
}

/* Set by a build for a diagnostic only (moe_kernel.h, HR__MOE_INNER_*). */
#ifndef HR__MOE_TRACE_INNER
#define HR__MOE_TRACE_INNER 0
#endif

/* The CTA's inner word w (the timeline's third set of words). */
static __device__ __forceinline__ unsigned long long *moe_trace_inner_word(
    const hr__moe_params &p, int w)
{
  return p.trace + HR__MOE_TRACE_INNER_AT(gridDim.x) +
         (size_t)blockIdx.x * HR__MOE_TRACE_INNER_WORDS + w;
}

/* Inner mark k of GEMM stage `stage` (0: none, the unit is not the
 * first of a dealt stage) into the third set of words. In any other
 * build it is nothing at all: `stage` and its computation go. */
static __device__ __forceinline__ void moe_trace_inner(const hr__moe_params &p, int stage,
                                                       int k)
{
  if(HR__MOE_TRACE_INNER && stage && p.trace && threadIdx.x == 0)
    *moe_trace_inner_word(p, (stage - 1) * HR__MOE_INNER_STAGE + k) = global_timer_ns();
}

/* Inner mark k as moe_trace_inner, but the latest over the CTA's warps:
 * lane 0 of each keeps the larger time (the buffer is zeroed before the
 * launch). Whether one warp holds the rest up, or every warp is late. */
static __device__ __forceinline__ void moe_trace_inner_last(const hr__moe_params &p, int stage,
                                                            int k)
{
  if(HR__MOE_TRACE_INNER && stage && p.trace && (threadIdx.x & 31) == 0)
    atomicMax(moe_trace_inner_word(p, (stage - 1) * HR__MOE_INNER_STAGE + k), global_timer_ns());
}

/* The SM this CTA runs on, + 1 (0 is "not written"): the pace of a CTA
 * follows its SM's place. */
static __device__ __forceinline__ void moe_trace_sm(const hr__moe_params &p)
{
  if(p.trace && threadIdx.x == 0)
    p.trace[(size_t)blockIdx.x * HR__MOE_TRACE_WORDS + HR__MOE_MARK_SM] =
        (unsigned long long)sm_id() + 1;
}

/* Set by a build for a diagnostic only (with -DHR__MOE_TRACE_AGN=1 for
 * the agnostic kernel): the routing's steps, in the inner words of the
 * timeline (moe_kernel.h, HR__MOE_ROUTE_MARK_*), each once the whole CTA
 * is past it. Where the two kernels' routings, the same count, differ
 * in time. */
#ifndef HR__MOE_TRACE_ROUTE
#define HR__MOE_TRACE_ROUTE 0
#endif
#if HR__MOE_TRACE_ROUTE && HR__MOE_TRACE_INNER
#error "HR__MOE_TRACE_ROUTE and HR__MOE_TRACE_INNER write the same words: one at a time"
#endif

static __device__ __forceinline__ void moe_trace_route(const hr__moe_params &p, int k)
{
  if(HR__MOE_TRACE_ROUTE && p.trace) {
    HR__SYNC();
    if(threadIdx.x == 0)
      *moe_trace_inner_word(p, HR__MOE_INNER_STAGE + k) = global_timer_ns();
  }
}

/* Set by a build for a diagnostic only: the agnostic kernel's timeline
 * (HR__MOE_TRACE_AGN=1). In any other build its marks are nothing at
 * all, so that the agnostic kernel's registers, which are short inside
 * its GEMM runs, stay as production has them. */
#ifndef HR__MOE_TRACE_AGN
#define HR__MOE_TRACE_AGN 0
#endif

/* Mark w of the agnostic kernel's timeline, in the barrier kernel's
 * words (moe_kernel.h, HR__MOE_MARK_*: no barrier arrivals); with
 * `first`, only where the CTA has not written it yet (moe_phases zeroes
 * the buffer before each launch): a stage's start is the CTA's first
 * run's, its end the last run's. */
static __device__ __forceinline__ void moe_trace_agn(const hr__moe_params &p, int w, int first)
{
  if(HR__MOE_TRACE_AGN && p.trace && threadIdx.x == 0 &&
     (!first || p.trace[(size_t)blockIdx.x * HR__MOE_TRACE_WORDS + w] == 0))
    moe_trace(p, w);
}

#endif /* HR_MOE_TRACE_CUH */
