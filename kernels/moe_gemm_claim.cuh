/*
 * moe_gemm_claim.cuh: the barrier kernel's cp.async GEMM stage with its
 * units claimed in order from the stage's counter instead of dealt round
 * robin (moe_gemm_stage). It runs from H = HR__MOE_CLAIM_MIN_H (moe_claims;
 * the dealt stage runs below).
 *
 * Why: with a fixed deal every CTA runs the same number of units, so a CTA
 * that is a little slower (its share of DRAM, of L2) ends the stage late
 * and every other CTA waits for it at the grid barrier. Claimed, the fast
 * CTAs take the units the slow ones would have run. That pays where units
 * are long: DeepSeek-V3 (112 K steps a GEMM1 unit) T = 16 to 512 3-7%
 * faster, and with it the 256-row cp.async tiles beat the big TMA tile at
 * T = 2048, as in the agnostic kernel, which claims too. At Qwen3-30B-A3B
 * (32 K steps) it was level or slower (docs/decisions.md, "Claimed
 * units").
 *
 * The loop is moe_gemm_stage's; the units come from a ring in shared
 * memory, as in the agnostic kernel (moe_loader reads it). Each CTA's
 * first two units are its round-robin ones (blockIdx.x and blockIdx.x +
 * gridDim.x), so a stage of fewer units than two per CTA runs exactly as
 * dealt, with no atomic at all; the counter hands out the units after
 * those. When a unit's loads start, thread 0 claims the unit two past it
 * (the loader decodes the unit after the one it starts, so that one must
 * be in place already), just before the wait for the step's data, and
 * places it in the ring once the unit's last loads are issued, nk steps
 * later; the loads read the entry past the next __syncthreads. -1 in the
 * ring ends the run. Claims change only which CTA computes a unit, never
 * its sums: y stays bitwise the same. The counter goes back to 0 past the
 * grid barrier that ends the stage (moe_claims_reset, moe_stages.cuh).
 */
#ifndef HR_MOE_GEMM_CLAIM_CUH
#define HR_MOE_GEMM_CLAIM_CUH

#include "moe_gemm.cuh"
#include "moe_kernel.h"

/* The CTA's claimed units of the stage, unit i of its run at
 * [i % HR__MOE_RING]. */
static __shared__ int moe_claim_ring[HR__MOE_RING];

/* The ring entry of a ticket (the counter's raw value): the counter
 * starts past every CTA's two dealt units. */
static __device__ __forceinline__ int moe_claim_entry(int ticket, int units, int units1)
{
  return moe_claim_unit(ticket + 2 * (int)gridDim.x, units, units1);
}

template <class C, int STAGE>
__device__ void moe_gemm_stage_claimed(const hr__moe_params &p, const moe_route &rt,
                                       uint8_t *pipe)
{
  const int tid = threadIdx.x, warp = tid >> 5;
  const int wm = warp % C::WM, wn = (warp / C::WM) % C::WN;
  const int wk = warp / (C::WM * C::WN);
  const moe_stage_dims d = moe_stage_dims_of<C, STAGE>(p, rt);
  const int nk = d.nk, nf = d.nf;
  int *const ring = moe_claim_ring;
  moe_loader<C, STAGE> ld;
  moe_unit un;
  float acc[C::MT][C::NT][4];
  int kt = 0, u = 0, slot = 0, i;
  /* thread 0: an entry to place at claim_pos: none, the end of the run,
   * or the unit of the ticket in `claim` (not read before then) */
  enum { NONE, END, TICKET } pending = NONE;
  int claim = 0, claim_pos = 0;

  if(d.units == 0 || (int)blockIdx.x >= d.units)
    return;                           /* not even a dealt unit */
  pipe = moe_pipe<C>(pipe);
  if(tid == 0) {
    ring[0] = moe_claim_unit((int)blockIdx.x, d.units, d.units1);
    ring[1] = moe_claim_unit((int)(blockIdx.x + gridDim.x), d.units, d.units1);
  }
  HR__SYNC();
  ld.init(p, rt, nf, 0, ring);
  /* Is there a step to load: within a unit, or the ring has the next one
   * (its entry placed a unit before, past a __syncthreads)? */
  const auto more = [&] { return ld.kt != 0 || ring[ld.unit & (HR__MOE_RING - 1)] >= 0; };
  /* Thread 0, when the loads of a unit start: claim the unit two past it,
   * unless the run ends before it. */
  const auto claim_at_start = [&] {
    if(tid == 0 && ld.kt == 0) {
      claim_pos = ld.unit + 2;
      if(ring[(ld.unit + 1) & (HR__MOE_RING - 1)] < 0) {
        pending = END;
      } else {
        claim = (int)atomicAdd(&p.sync->claim[STAGE - 1], 1u);
        pending = TICKET;
      }
    }
  };
  /* Thread 0, once the loads of that unit are all issued: place the
   * entry, for the next unit's start (past a __syncthreads) to read. */
  const auto place_when_due = [&] {
    if(tid == 0 && pending != NONE && ld.kt == 0) {
      ring[claim_pos & (HR__MOE_RING - 1)] =
          pending == END ? -1 : moe_claim_entry(claim, d.units, d.units1);
      pending = NONE;
    }
  };
  static_assert(!C::ONE_SYNC, "the claimed stage runs two barriers a step");
  for(i = 0; i < moe_lookahead<C>(); i++) {     /* fill the pipeline */
    if(ld.kt == 0 && ld.unit > 0)
      HR__SYNC();                /* a unit short enough to end in the fill */
    if(more()) {
      claim_at_start();
      ld.issue(p, rt, pipe, nf, nk);
      place_when_due();
    }
    cp_async_commit();
  }
  un = unit_decode(ring[0], rt, p, nf, C::BN, C::TT_MAJOR);
  tile_zero<C>(acc);
  for(;;) {
    /* The claim before the wait for this step's data: the compiler makes
     * any one thread's atomicAdd a warp's (one atomic, its result
     * shuffled to the lanes), and that shuffle waits for the round trip
     * at once; here the wait overlaps the one for the data. */
    if(tid == 0 && more())
      claim_at_start();
    moe_step_landed<C>();                       /* this step has landed */
    HR__SYNC();                            /* and (DEPTH 0) the last slot is free */
    {
      const int go = more();
      moe_pipe_step<C, STAGE>(ld, p, rt, pipe, nf, nk, acc, slot, wm, wn, wk,
                              un.nvalid, go, more);
    }
    place_when_due();
    /* the step's end as moe_gemm_stage's; one helper for both changed
     * that loop's register allocation, which is not to be taken untimed */
    if(++kt == nk) {
      tile_unit_end<C, STAGE>(p, un, acc, pipe, slot, wm, wn, wk);
      /* the timeline keeps a claimed run's last units (moe_kernel.h) */
      moe_trace(p, HR__MOE_TRACE_MARKS + (STAGE - 1) * HR__MOE_TRACE_UNITS +
                       u % HR__MOE_TRACE_UNITS);
    }
    if(++slot == C::STAGES)
      slot = 0;
    if(kt == nk) {
      /* the next unit's entry was placed a unit ago, and a __syncthreads
       * has published it */
      kt = 0;
      u++;
      if(ring[u & (HR__MOE_RING - 1)] < 0)
        break;
      un = unit_decode(ring[u & (HR__MOE_RING - 1)], rt, p, nf, C::BN, C::TT_MAJOR);
    }
  }
  /* as in moe_gemm_stage: the last step drained, but the compiler cannot
   * know it */
  tile_drain<C>(acc);
  cp_async_wait<0>();
  HR__SYNC();
}

#endif /* HR_MOE_GEMM_CLAIM_CUH */
