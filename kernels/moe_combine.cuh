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

/* acc[i] += w * (element i of the 8 bf16 in v), in fp32 with fmaf. */
static __device__ __forceinline__ void moe_combine_add(float (&acc)[8], float w, uint4 v)
{
  acc[0] = __fmaf_rn(w, bf16_lo(v.x), acc[0]);
  acc[1] = __fmaf_rn(w, bf16_hi(v.x), acc[1]);
  acc[2] = __fmaf_rn(w, bf16_lo(v.y), acc[2]);
  acc[3] = __fmaf_rn(w, bf16_hi(v.y), acc[3]);
  acc[4] = __fmaf_rn(w, bf16_lo(v.z), acc[4]);
  acc[5] = __fmaf_rn(w, bf16_hi(v.z), acc[5]);
  acc[6] = __fmaf_rn(w, bf16_lo(v.w), acc[6]);
  acc[7] = __fmaf_rn(w, bf16_hi(v.w), acc[7]);
}

/* Outputs 8c .. 8c+7 of token t. ypair and pos_of were written by other
 * CTAs in this launch: read them from L2 (.cg), never a stale L1 line.
 * The slots go BATCH at a time: their positions, then their rows, each
 * batch's loads in flight together (two L2 round trips a batch instead of
 * two a slot), then the sums in slot order, so any BATCH gives the same
 * bits. The barrier kernel, whose threads make hundreds of chunks each at
 * large T, takes 4; the agnostic kernel 1 (its registers are short where
 * the combine is inlined among the GEMM runs). */
template <int BATCH>
static __device__ __forceinline__ void moe_combine_chunk(const hr__moe_params &p,
                                                         int t, int c)
{
  float acc[8] = { 0, 0, 0, 0, 0, 0, 0, 0 };
  uint4 o;
  int j0, j;
  for(j0 = 0; j0 < p.k; j0 += BATCH) {
    if constexpr(BATCH == 1) {            /* one slot: no arrays */
      const int pos = __ldcg(p.pos_of + t * p.k + j0);
      if(pos >= 0) {
        const float w = __ldg(p.wts + t * p.k + j0);
        const uint4 v = __ldcg((const uint4 *)(p.ypair + (size_t)pos * p.H + c * 8));
        moe_combine_add(acc, w, v);
      }
    } else {
      int pos[BATCH];
      float w[BATCH];
      uint4 v[BATCH];
#pragma unroll
      for(j = 0; j < BATCH; j++)
        pos[j] = j0 + j < p.k ? __ldcg(p.pos_of + t * p.k + j0 + j) : -1;
#pragma unroll
      for(j = 0; j < BATCH; j++) {
        if(pos[j] >= 0) {
          w[j] = __ldg(p.wts + t * p.k + j0 + j);
          v[j] = __ldcg((const uint4 *)(p.ypair + (size_t)pos[j] * p.H + c * 8));
        }
      }
#pragma unroll
      for(j = 0; j < BATCH; j++)
        if(pos[j] >= 0)
          moe_combine_add(acc, w[j], v[j]);
    }
  }
  o.x = pack_bf16x2(acc[0], acc[1]);
  o.y = pack_bf16x2(acc[2], acc[3]);
  o.z = pack_bf16x2(acc[4], acc[5]);
  o.w = pack_bf16x2(acc[6], acc[7]);
  *(uint4 *)(p.y + (size_t)t * p.H + c * 8) = o;
}

#endif /* HR_MOE_COMBINE_CUH */
