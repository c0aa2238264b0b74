/*
 * moe_combine.cuh: the last stage of the MoE kernels, back to token order:
 *
 *     y[t] = sum over j < k of  w[t,j] * ypair[pos_of[t,j]]
 *
 * added in slot order in fp32 with fmaf and rounded to bf16 once, as
 * moe_ref.c does. Both kernels call it per 16-byte chunk of output; only
 * which thread makes which chunk differs, so y is bitwise the same.
 */
#ifndef HR_MOE_COMBINE_CUH
#define HR_MOE_COMBINE_CUH

#include "moe_kernel.h"
#include "moe_ptx.cuh"

/* Outputs 8c .. 8c+7 of token t. ypair and pos_of were written by other
 * CTAs in this launch: read them from L2 (.cg), never a stale L1 line. */
static __device__ __forceinline__ void moe_combine_chunk(const hr__moe_params &p,
                                                         int t, int c)
{
  float acc[8] = { 0, 0, 0, 0, 0, 0, 0, 0 };
  uint4 o;
  int j;
  for(j = 0; j < p.k; j++) {
    const int pos = __ldcg(p.pos_of + t * p.k + j);
    float w;
    uint4 v;
    if(pos < 0)
      continue;
    w = __ldg(p.wts + t * p.k + j);
    v = __ldcg((const uint4 *)(p.ypair + (size_t)pos * p.H + c * 8));
    acc[0] = __fmaf_rn(w, bf16_lo(v.x), acc[0]);
    acc[1] = __fmaf_rn(w, bf16_hi(v.x), acc[1]);
    acc[2] = __fmaf_rn(w, bf16_lo(v.y), acc[2]);
    acc[3] = __fmaf_rn(w, bf16_hi(v.y), acc[3]);
    acc[4] = __fmaf_rn(w, bf16_lo(v.z), acc[4]);
    acc[5] = __fmaf_rn(w, bf16_hi(v.z), acc[5]);
    acc[6] = __fmaf_rn(w, bf16_lo(v.w), acc[6]);
    acc[7] = __fmaf_rn(w, bf16_hi(v.w), acc[7]);
  }
  o.x = pack_bf16x2(acc[0], acc[1]);
  o.y = pack_bf16x2(acc[2], acc[3]);
  o.z = pack_bf16x2(acc[4], acc[5]);
  o.w = pack_bf16x2(acc[6], acc[7]);
  *(uint4 *)(p.y + (size_t)t * p.H + c * 8) = o;
}

#endif /* HR_MOE_COMBINE_CUH */
