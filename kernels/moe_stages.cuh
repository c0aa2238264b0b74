/*
 * moe_stages.cuh: the barrier kernel's GEMM stages in the launch's tile
 * shape (on TMA or cp.async, units dealt or claimed), shared by the
 * single-GPU forward (moe_kernel.cu) and the expert-parallel one
 * (moe_ep.cu), whose local experts' GEMMs are the same problem over the
 * rows it received.
 */
#ifndef HR_MOE_STAGES_CUH
#define HR_MOE_STAGES_CUH

#include "moe_barrier.cuh"
#include "moe_gemm.cuh"
#include "moe_gemm_claim.cuh"
#include "moe_gemm_tma.cuh"
#if HR__MOE_WS
#include "moe_gemm_ws.cuh"
#endif
#include "moe_kernel.h"
#include "moe_route.cuh"

/* One GEMM stage on the cp.async pipeline in tile C: its units claimed in
 * order (CLAIM 1, moe_gemm_claim.cuh; moe_claims), or dealt round robin. */
template <class C, int STAGE, int CLAIM>
static __device__ __forceinline__ void moe_gemm_run(const hr__moe_params &p,
                                                    const moe_route &rt, uint8_t *smem)
{
  if constexpr(CLAIM)
    moe_gemm_stage_claimed<C, STAGE>(p, rt, smem);
  else
    moe_gemm_stage<C, STAGE>(p, rt, smem);
}

/* GEMM stage STAGE in the launch's cp.async tile (any but the big one,
 * which runs on TMA: moe_gemm); CLAIM: moe_gemm_run. Claimed, the mid
 * tile runs 256 rows tall (moe_tile_tall). Where its units are dealt, the
 * 80-token tile runs one __syncthreads a step (moe_one_sync); the claimed
 * loop runs two. */
template <int STAGE, int CLAIM>
static __device__ __forceinline__ void moe_gemm_cpasync(const hr__moe_params &p,
                                                        const moe_route &rt, uint8_t *smem,
                                                        int tile)
{
  if(tile == MOE_TILE_TINY)
    moe_gemm_run<moe_tile_tiny, STAGE, CLAIM>(p, rt, smem);
  else if(tile == MOE_TILE_NARROW)
    moe_gemm_run<moe_tile_narrow, STAGE, CLAIM>(p, rt, smem);
  else if(tile == MOE_TILE_WIDE)
    moe_gemm_run<moe_tile_wide, STAGE, CLAIM>(p, rt, smem);
  else if(tile == MOE_TILE_WIDE80 && !CLAIM)
    moe_gemm_stage<moe_tile_wide80_tall_1s, STAGE>(p, rt, smem);
  else if(tile == MOE_TILE_WIDE80)
    moe_gemm_run<moe_tile_wide80_tall, STAGE, CLAIM>(p, rt, smem);
  else if(tile == MOE_TILE_WIDE96)
    moe_gemm_run<moe_tile_wide96_tall, STAGE, CLAIM>(p, rt, smem);
  else if(CLAIM)
    moe_gemm_run<moe_tile_mid_tall, STAGE, CLAIM>(p, rt, smem);
  else
    moe_gemm_run<moe_tile_mid, STAGE, CLAIM>(p, rt, smem);
}

/* GEMM stage STAGE in the launch's tile shape: on the TMA pipeline (with
 * the producer warpgroup where the kernel has one: HR__MOE_WS, ws_cmd its
 * command word) or on cp.async. 0 when a TMA load never landed
 * (recorded). */
template <int STAGE>
static __device__ __forceinline__ int moe_gemm(const hr__moe_params &p, const moe_route &rt,
                                               uint8_t *smem, int tile,
                                               volatile int *ws_cmd = nullptr)
{
  if(moe_tile_tma(tile)) {
#if HR__MOE_WS
    if(moe_gemm_stage_ws<moe_tile_big_tma, STAGE>(p, rt, smem, ws_cmd))
      return 1;
#else
    (void)ws_cmd;
    if(moe_gemm_stage_tma<moe_tile_big_tma, STAGE>(p, rt, smem))
      return 1;
#endif
    if(threadIdx.x == 0)
      moe_fail_at(p, HR__MOE_FAIL_TIMEOUT, HR__MOE_WAIT_TMA, STAGE, 0);
    return 0;
  }
  if(moe_claims(p.flags))
    moe_gemm_cpasync<STAGE, 1>(p, rt, smem, tile);
  else
    moe_gemm_cpasync<STAGE, 0>(p, rt, smem, tile);
  return 1;
}

/* Past the grid barrier that ends GEMM stage STAGE, where no CTA claims
 * its units any more: its claim counter back to 0 for the next launch. */
static __device__ __forceinline__ void moe_claims_reset(const hr__moe_params &p, int stage)
{
  if(blockIdx.x == 0 && threadIdx.x == 0)
    atomicExch(&p.sync->claim[stage - 1], 0u);
}

#endif /* HR_MOE_STAGES_CUH */
