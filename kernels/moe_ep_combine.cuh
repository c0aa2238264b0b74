/*
 * moe_ep_combine.cuh: the expert-parallel kernels' last stage, over this
 * rank's own tokens from the rows returned to it (ret[t k + j] where slot
 * j's id is valid: src_pos): the forward's combine (moe_combine.cuh) and
 * the backward's (dx and d(w), moe_bwd_tiles.cuh's), each spread over the
 * grid whatever its size. Shared by the barrier form (moe_ep.cu,
 * moe_ep_backward.cu) and the agnostic form (moe_ep_agnostic.cu).
 */
#ifndef HR_MOE_EP_COMBINE_CUH
#define HR_MOE_EP_COMBINE_CUH

#include "moe_bwd_tiles.cuh"
#include "moe_combine.cuh"
#include "moe_ep_comm.cuh"

/* moe_kernel.cu's combine over this rank's T tokens, from the returned
 * rows: ret[t k + j] where slot j's id is valid (src_pos). */
static __device__ __forceinline__ void ep_combine(const hr__moe_params &p,
                                                  const hr__moe_ep_group &e)
{
  moe_comb a;
  a.pos_of = e.src_pos;
  a.wts = e.wts;
  a.ypair = ep_ret(e, e.rank);
  a.y = e.y;
  a.k = p.k;
  a.H = p.H;
  moe_combine_grid(a, e.T);
}

/* hr_moe_backward's combine over this rank's tokens, a contiguous
 * range a CTA, from the returned rows and d(w) sums (one a pair). */
static __device__ __forceinline__ void ep_bwd_combine(const hr__moe_params &f,
                                                      const hr__moe_ep_group &e)
{
  bwd_comb a;
  a.pos_of = e.src_pos;
  a.rows = ep_ret(e, e.rank);
  a.dwp = ep_ret_dw(e, e.rank);
  a.ni = 1;
  a.dx = e.dx;
  a.dtw = e.dtw;
  a.k = f.k;
  a.H = f.H;
  bwd_combine_rows(a, (int)((long long)e.T * blockIdx.x / gridDim.x),
                   (int)((long long)e.T * (blockIdx.x + 1) / gridDim.x));
}

#endif /* HR_MOE_EP_COMBINE_CUH */
