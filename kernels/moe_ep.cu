/*
 * moe_ep.cu: the expert-parallel forward, one persistent launch per rank
 * (headroom_moe.h, "expert parallel"; moe_ep_comm.cuh has the exchanges):
 *
 *   A. dispatch   this rank's tokens to the ranks their experts live on:
 *                 each x row once per destination rank, into the region
 *                 of the destination's receive buffer kept for this rank,
 *                 with the token and its k local ids (-1: another rank's)
 *   -- grid barrier SENT, then a release flag in every rank --
 *   B. wait       for every rank's dispatch (bounded; peers' failures)
 *   C. route      the received rows: a single-GPU problem over E/R
 *                 experts (moe_route.cuh's tables, in region order)
 *   -- grid barrier ROUTE --
 *      GEMM1 + SwiGLU, GEMM2   (moe_stages.cuh: hr_moe_forward's tiles)
 *   -- grid barriers GEMM1, GEMM2 --
 *   D. return     each pair's output row to its source's buffer [t*k + j]
 *   -- grid barrier RETURNED, then a release flag in every rank --
 *   E. wait       for every rank's returns
 *   F. combine    moe_combine.cuh over this rank's tokens
 */
#include "moe_ep_comm.cuh"
#include "moe_host.h"

#include "moe_ep_combine.cuh"
#include "moe_stages.cuh"

static_assert(HR__MOE_SMEM_BYTES + 128 <= 227 * 1024, "fits an SM, with the static part");

/* ---- C. the received x rows for the big tile ------------------------------ */

/* moe_copy_xs for the big TMA tile without the gather, over this CTA's
 * pieces: the received x rows (written by peers: .cg) to xs[pos]. */
static __device__ void ep_copy_xs(const hr__moe_params &p, const hr__moe_ep_group &e,
                                  const int *cs, int lo, int hi)
{
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, chunks = p.H / 8;
  int s, c, ch;
  for(s = 0; s < e.nranks; s++) {
    const int a = max(lo, cs[s]), b = min(hi, cs[s + 1]);
    for(c = a + warp; c < b; c += HR__MOE_THREADS / 32) {
      const int pi = ep_phys(p, e, cs, s, c);
      const int pos = __ldcg(p.pos_of + pi);
      const uint4 *src = (const uint4 *)(p.x + (size_t)(pi / p.k) * p.H);
      uint4 *dst = (uint4 *)(p.ypair + (size_t)pos * p.H);
      if(pos < 0)
        continue;
      for(ch = lane; ch < chunks; ch += 32)
        dst[ch] = __ldcg(src + ch);
    }
  }
  fence_proxy_async_global();
}



/* ---- the kernel --------------------------------------------------------- */

__global__ void __launch_bounds__(HR__MOE_THREADS, 1)
hr__moe_ep_kernel(const __grid_constant__ hr__moe_ep_params ep)
{
  extern __shared__ __align__(128) uint8_t smem[];
  __shared__ int s_ok;
  __shared__ int s_warp_sums[HR__MOE_THREADS / 32];
  __shared__ int s_nonempty;
  __shared__ int s_cs[HR_MOE_EP_MAX_RANKS + 1];
  const hr__moe_params &p = ep.p;
  const hr__moe_ep_group &e = ep.g;
  const moe_route rt = moe_route_tables((int *)(smem + HR__MOE_GEMM_SMEM));
  int tile, i;

  if(threadIdx.x == 0) {
    s_ok = ep_start_ok(p, e);
    s_nonempty = 0;
  }
  __syncthreads();
  if(!s_ok)
    return;

  /* A, B: the dispatch (its scratch: the GEMMs' part of smem, unused
   * until GEMM1) */
  if(!ep_exchange_in(p, e, (int *)smem, s_cs, &s_ok))
    return;

  /* C. route the received pairs: this CTA's slice of the sequence */
  const int pairs = s_cs[e.nranks];
  const int lo = (int)((long long)pairs * blockIdx.x / gridDim.x);
  const int hi = (int)((long long)pairs * (blockIdx.x + 1) / gridDim.x);
  ep_route(p, e, rt, s_warp_sums, s_cs, lo, hi);
  for(i = threadIdx.x; i < p.E; i += HR__MOE_THREADS)
    if(rt.cnt[i] > 0)
      atomicAdd(&s_nonempty, 1);
  __syncthreads();
  tile = moe_pick_tile(rt.off[p.E], s_nonempty, p.I, p.flags, 0);
  moe_route_tiles(p, rt, moe_tile_bn(tile), s_warp_sums);
  if(moe_tile_copies_xs(p, tile))
    ep_copy_xs(p, e, s_cs, lo, hi);
  if(!ep_barrier(p, e, HR_MOE_EP_WAIT_ROUTE, &s_ok))
    return;

  /* GEMM1 + SwiGLU, GEMM2: hr_moe_forward's stages over the local problem */
  if(!moe_gemm<1>(p, rt, smem, tile)) {
    if(threadIdx.x == 0)
      ep_after_local_fail(p, e);
    return;
  }
  if(!ep_barrier(p, e, HR_MOE_EP_WAIT_GEMM1, &s_ok))
    return;
  moe_claims_reset(p, 1);
  if(!moe_gemm<2>(p, rt, smem, tile)) {
    if(threadIdx.x == 0)
      ep_after_local_fail(p, e);
    return;
  }
  if(!ep_barrier(p, e, HR_MOE_EP_WAIT_GEMM2, &s_ok))
    return;
  moe_claims_reset(p, 2);

  /* D, E: the rows back to their sources, and every rank's back here */
  if(!ep_exchange_out(p, e, s_cs, p.ypair, NULL, 0, &s_ok))
    return;

  /* F. the combine */
  if(e.T > 0)
    ep_combine(p, e);
}

extern "C" cudaError_t hr__moe_ep_prepare(void)
{
  return cudaFuncSetAttribute(hr__moe_ep_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                              HR__MOE_SMEM_BYTES);
}

extern "C" cudaError_t hr__moe_ep_launch(const hr__moe_ep_params *e, int grid, int coop,
                                         int cluster, cudaStream_t stream)
{
  cudaLaunchConfig_t cfg;
  cudaLaunchAttribute attr[2];

  hr__moe_launch_config(&cfg, attr, grid, HR__MOE_THREADS, HR__MOE_SMEM_BYTES, coop, cluster,
                        stream);
  return cudaLaunchKernelEx(&cfg, hr__moe_ep_kernel, *e);
}
