/*
 * moe_bwd_gemm.cuh: the backward's GEMM core: wgmma (bf16 in, fp32
 * accumulators) from a cp.async ring of stages in shared memory.
 *
 * The backward's GEMMs read their operands in both orders: the weights as
 * the forward stores them (W1 [2I][H], W2 [H][I]) but along the other
 * dimension, and the dW GEMMs reduce over pairs, so both of their operands
 * are stored with K outermost. So an operand tile is either
 *
 *   K-major   R rows of the tile's M (or N) x BK: row r's K run is
 *             contiguous (x rows, dy rows, dh rows, W1 rows in GEMM1),
 *             one 128-byte row of 64 elements a row in the 128-byte
 *             swizzle (wgmma_desc_sw128, as the forward's tiles);
 *   MN-major  BK rows of K x C columns of M (or N): K is the row (W1 and
 *             W2 along their other dimension, dh^T, x^T, dy^T), in
 *             blocks of 64 columns, each BK rows of 128 bytes in the
 *             128-byte swizzle (bwd_mn_sw128; wgmma_desc_mn_sw128 and
 *             the descriptor's transpose bit).
 *
 * Rows may be gathered (a pair's token row of x or dy, through
 * sorted_tok) and are zero-filled past the end (the last tile of an
 * expert's pairs): cp.async, not TMA, which cannot gather rows on sm_90.
 *
 * Every tile of the backward is one run of bwd_pipeline: STAGES - 1 steps
 * of BK in flight, one __syncthreads a step (the barrier kernel's dW
 * groups write the same steps out, to take their tiles in pairs with an
 * accumulator set each: moe_bwd_tiles.cuh). A tile shares nothing with
 * another CTA and waits for nothing but its own copies, so the stages'
 * barriers (moe_backward.cu) are the only waits on other CTAs.
 */
#ifndef HR_MOE_BWD_GEMM_CUH
#define HR_MOE_BWD_GEMM_CUH

#include "moe_kernel.h"
#include "moe_ptx.cuh"

/* K per pipeline step (64 against 32: docs/decisions.md, "The backward's
 * steps"): one 128-byte swizzle row of a K-major tile. */
#define BWD_BK 64

/* An MN-major tile of BWD_BK K rows x 128 columns: two blocks of 64
 * columns, each BWD_BK rows of 128 bytes. */
#define BWD_MN_TILE (BWD_BK * 256)

/* The byte offset in an MN-major tile of the 16-byte chunk at K row k,
 * columns c .. c + 7 (c a multiple of 8). */
static __device__ __forceinline__ uint32_t bwd_mn_sw128(int k, int c)
{
  return (uint32_t)((c >> 6) * (BWD_BK * 128) + k * 128 + ((((c >> 3) & 7) ^ (k & 7)) << 4));
}

/* The byte offset in a K-major tile of the 16-byte chunk ch (elements
 * 8 ch .. 8 ch + 7 of the step's K) of row r. */
static __device__ __forceinline__ uint32_t bwd_k_sw128(int r, int ch)
{
  return (uint32_t)(r * 128 + ((ch ^ (r & 7)) << 4));
}

/* nk steps through a ring of STAGES stages of STAGE_BYTES from `ring`
 * (a shared address): issue(stage, step) starts a step's copies,
 * compute(stage, step) issues its wgmma and waits until at most DEPTH
 * steps' are still running (wgmma.wait_group DEPTH). The loads run
 * STAGES - 1 - DEPTH steps ahead: past a step's __syncthreads every warp
 * has seen the wgmma of DEPTH + 1 steps before complete, so that step's
 * stage is free. wgmma reads shared memory through the async proxy: the
 * fence after the copies land. The steps may span several tiles
 * (moe_bwd_tiles.cuh, the dW groups): compute ends a tile where its last
 * step is (waiting for all of its wgmma first), while the next tile's
 * first steps are already in flight. Ends with every wgmma complete, the
 * ring drained and the CTA synchronized, so the next tile (or an
 * epilogue) may reuse it. */
template <int STAGES, int STAGE_BYTES, int DEPTH, class Issue, class Compute>
static __device__ __forceinline__ void bwd_pipeline(int nk, uint32_t ring, Issue issue,
                                                    Compute compute)
{
  constexpr int AHEAD = STAGES - 1 - DEPTH;
  static_assert(DEPTH >= 0 && AHEAD >= 1, "a step in flight");
#pragma unroll
  for(int s = 0; s < AHEAD; s++) {
    if(s < nk)
      issue(ring + s * STAGE_BYTES, s);
    cp_async_commit();
  }
  for(int kt = 0; kt < nk; kt++) {
    cp_async_wait<AHEAD - 1>();
    fence_proxy_async_shared();          /* wgmma reads what cp.async wrote */
    __syncthreads();                     /* step kt landed; kt - 1 - DEPTH consumed */
    const int next = kt + AHEAD;
    if(next < nk)
      issue(ring + (next % STAGES) * STAGE_BYTES, next);
    cp_async_commit();
    compute(ring + (kt % STAGES) * STAGE_BYTES, kt);
  }
  wgmma_wait<0>();
  cp_async_wait<0>();
  __syncthreads();
}

#endif /* HR_MOE_BWD_GEMM_CUH */
