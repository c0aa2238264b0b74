/*
 * moe_ep_backward.cu: the expert-parallel backward, one persistent launch
 * per rank (headroom_moe.h, hr_moe_ep_backward). The forward's pattern
 * (moe_ep.cu) around hr_moe_backward's tiles (moe_bwd_tiles.cuh):
 *
 *   A. dispatch   this rank's tokens to the ranks their experts live on:
 *                 x and dy rows, the token, its k local ids and the
 *                 local slots' weights
 *   -- grid barrier SENT, then a release flag in every rank --
 *   B. wait       for every rank's dispatch
 *   C. route      the received rows over the E/R local experts, in
 *                 region order (so each expert's pairs are in the order
 *                 of the ranks' tokens one after another: the single-GPU
 *                 backward's order over the same tokens), and the
 *                 place -> pair table
 *   -- grid barrier 20 --
 *      dgu tiles  -- barrier 21 --  dx rows, dW1, dW2  -- barrier 22 --
 *   D. return     each received pair's dx row and d(w) to its source
 *   -- grid barrier RETURNED, then a release flag in every rank --
 *   E. wait       for every rank's returns
 *   F. combine    hr_moe_backward's combine over this rank's tokens
 *
 * dW1 and dW2 of this rank's experts are complete here (every pair of
 * theirs was received); dx and d(w) are complete at the source. Every
 * sum runs in the order of the single-GPU backward's, so the results are
 * bitwise hr_moe_backward's over the same global weights and inputs.
 */
/* The wide dx tile (HR_EXP_DX256, moe_bwd_tiles.cuh) spills 4 bytes in
 * this kernel's barrier form: the EP backward keeps the 128-wide one. */
#undef HR_EXP_DX256
#include "moe_bwd_tiles.cuh"
#include "moe_ep_combine.cuh"
#include "moe_host.h"

static_assert(BWD_SMEM_BYTES + 256 <= 227 * 1024, "fits an SM, with the static part");
static_assert(EP_SC_INTS * 4 <= 1024 + BWD_DGU_STAGES * BWD_DGU_STAGE,
              "the dispatch's scratch fits the ring, unused until the dgu tiles");

/* The place -> pair table for the received pairs [lo, hi) of the
 * sequence (physical indices, ep_phys), which this CTA just placed. */
static __device__ void ep_bwd_invert(const hr__moe_bwd_params &b, const hr__moe_ep_group &e,
                                     const int *cs, int lo, int hi)
{
  const hr__moe_params &f = b.f;
  for(int s = 0; s < e.nranks; s++) {
    const int a = max(lo, cs[s]), z = min(hi, cs[s + 1]);
    for(int c = a + (int)threadIdx.x; c < z; c += HR__MOE_THREADS) {
      const int pi = ep_phys(f, e, cs, s, c);
      const int pos = f.pos_of[pi];
      if(pos >= 0)
        b.sorted_pair[pos] = pi;
    }
  }
  __syncthreads();
}


__global__ void __launch_bounds__(HR__MOE_THREADS, 1)
hr__moe_ep_bwd_kernel(const __grid_constant__ hr__moe_ep_bwd_params ep)
{
  extern __shared__ __align__(128) uint8_t smem[];
  __shared__ int s_ok;
  __shared__ int s_warp_sums[HR__MOE_THREADS / 32];
  __shared__ unsigned s_unit;
  __shared__ int s_cs[HR_MOE_EP_MAX_RANKS + 1];
  const hr__moe_bwd_params &b = ep.b;
  const hr__moe_params &f = b.f;
  const hr__moe_ep_group &e = ep.g;
  int *cursor;
  const moe_route rt = bwd_tables(smem, &cursor);

  if(threadIdx.x == 0)
    s_ok = ep_start_ok(f, e);
  __syncthreads();
  if(!s_ok)
    return;

  /* A, B: the dispatch (its scratch: the ring, unused until the tiles) */
  if(!ep_exchange_in(f, e, (int *)smem, s_cs, &s_ok))
    return;

  /* C. route the received pairs: this CTA's slice of the sequence */
  const int pairs = s_cs[e.nranks];
  const int lo = (int)((long long)pairs * blockIdx.x / gridDim.x);
  const int hi = (int)((long long)pairs * (blockIdx.x + 1) / gridDim.x);
  ep_route(f, e, rt, s_warp_sums, s_cs, lo, hi);
  ep_bwd_invert(b, e, s_cs, lo, hi);
  moe_route_tiles(f, rt, HR__MOE_BWD_TILE_M, s_warp_sums);
  const bwd_plan q = bwd_plan_of(f, rt);
  if(!ep_barrier(f, e, HR__MOE_BWD_BARRIER_ROUTED, &s_ok))
    return;

  /* the dgu tiles */
  bwd_claimed(&f.sync->claim[0], q.n_dgu, &s_unit, [&](int u) {
    bwd_dgu_tile(b, rt, q, smem, u);
  });
  if(!ep_barrier(f, e, HR__MOE_BWD_BARRIER_DGU, &s_ok))
    return;
  if(blockIdx.x == 0 && threadIdx.x == 0)
    atomicExch(&f.sync->claim[0], 0u);

  /* the dx rows, dW1, dW2 */
  bwd_claimed(&f.sync->claim[1], q.n_grads, &s_unit, [&](int u) {
    bwd_grads_tile<BWD_GRAD_DEPTH_BAR, 0>(b, rt, q, smem, u);
  });
  if(!ep_barrier(f, e, HR__MOE_BWD_BARRIER_GRADS, &s_ok))
    return;
  if(blockIdx.x == 0 && threadIdx.x == 0)
    atomicExch(&f.sync->claim[1], 0u);

  /* D, E: the dx rows and d(w) back to their sources, every rank's here */
  if(!ep_exchange_out(f, e, s_cs, b.dxrow, b.dwp, q.ni, &s_ok))
    return;

  /* F. the combine */
  if(e.T > 0)
    ep_bwd_combine(f, e);
}

extern "C" cudaError_t hr__moe_ep_bwd_prepare(void)
{
  return cudaFuncSetAttribute(hr__moe_ep_bwd_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                              BWD_SMEM_BYTES);
}

extern "C" cudaError_t hr__moe_ep_bwd_launch(const hr__moe_ep_bwd_params *e, int grid, int coop,
                                             cudaStream_t stream)
{
  cudaLaunchConfig_t cfg;
  cudaLaunchAttribute attr[2];

  hr__moe_launch_config(&cfg, attr, grid, HR__MOE_THREADS, BWD_SMEM_BYTES, coop, 1, stream);
  return cudaLaunchKernelEx(&cfg, hr__moe_ep_bwd_kernel, *e);
}
