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

/* What the combine reads and writes, copied out of the parameters once
 * per caller: in a function of its own (the agnostic kernel's combine
 * task) the parameters are reached through a generic pointer, and reading
 * them at every chunk would put a load on each chunk's path. */
struct moe_comb {
  const int *pos_of;
  const float *wts;
  const uint16_t *ypair;
  uint16_t *y;
  int k, H;
};

static __device__ __forceinline__ moe_comb moe_comb_of(const hr__moe_params &p)
{
  moe_comb a;
  a.pos_of = p.pos_of;
  a.wts = p.wts;
  a.ypair = p.ypair;
  a.y = p.y;
  a.k = p.k;
  a.H = p.H;
  return a;
}

/* The 8 sums, rounded to bf16 once, to y[t] at outputs 8c .. 8c+7. */
static __device__ __forceinline__ void moe_combine_out(const moe_comb &a, int t, int c,
                                                       const float (&acc)[8])
{
  uint4 o;
  o.x = pack_bf16x2(acc[0], acc[1]);
  o.y = pack_bf16x2(acc[2], acc[3]);
  o.z = pack_bf16x2(acc[4], acc[5]);
  o.w = pack_bf16x2(acc[6], acc[7]);
  *(uint4 *)(a.y + (size_t)t * a.H + c * 8) = o;
}

/* Outputs 8c .. 8c+7 of token t. ypair and pos_of were written by other
 * CTAs in this launch: read them from L2 (.cg), never a stale L1 line.
 * The slots go BATCH at a time: their positions, then their rows, each
 * batch's loads in flight together (two L2 round trips a batch instead of
 * two a slot), then the sums in slot order, so any BATCH gives the same
 * bits. */
#define HR__MOE_COMBINE_BATCH 4
static __device__ __forceinline__ void moe_combine_chunk(const moe_comb &a, int t, int c)
{
  constexpr int BATCH = HR__MOE_COMBINE_BATCH;
  float acc[8] = { 0, 0, 0, 0, 0, 0, 0, 0 };
  int j0, j;
  for(j0 = 0; j0 < a.k; j0 += BATCH) {
    int pos[BATCH];
    float w[BATCH];
    uint4 v[BATCH];
#pragma unroll
    for(j = 0; j < BATCH; j++)
      pos[j] = j0 + j < a.k ? __ldcg(a.pos_of + t * a.k + j0 + j) : -1;
#pragma unroll
    for(j = 0; j < BATCH; j++) {
      if(pos[j] >= 0) {
        w[j] = __ldg(a.wts + t * a.k + j0 + j);
        v[j] = __ldcg((const uint4 *)(a.ypair + (size_t)pos[j] * a.H + c * 8));
      }
    }
#pragma unroll
    for(j = 0; j < BATCH; j++)
      if(pos[j] >= 0)
        moe_combine_add(acc, w[j], v[j]);
  }
  moe_combine_out(a, t, c, acc);
}

/* The outputs of token t, by one warp (every lane calls it, none has
 * left): the token's k <= 8 slots' positions and weights read once, a
 * lane each, and handed to every lane; then each lane makes chunks lane,
 * lane + 32, ..., two at a time, all of their rows in flight together.
 * Per chunk one L2 round trip instead of moe_combine_chunk's four (two
 * batches of positions, then rows), and the same sums in the same order:
 * the same bits. (Qwen3-30B-A3B T = 1024: the combine is ~1 token a
 * warp, its time that chain of round trips.) */
#define HR__MOE_COMBINE_WARP_MAX_K 8
static __device__ __forceinline__ void moe_combine_token(const moe_comb &a, int t, int lane)
{
  constexpr int K = HR__MOE_COMBINE_WARP_MAX_K;
  const int mine = lane < a.k ? __ldcg(a.pos_of + t * a.k + lane) : -1;
  const float mine_w = lane < a.k ? __ldg(a.wts + t * a.k + lane) : 0.0f;
  const int chunks = a.H / 8;
  int pos[K], c, j, h;
  float w[K];
#pragma unroll
  for(j = 0; j < K; j++) {
    pos[j] = __shfl_sync(0xffffffffu, mine, j);
    w[j] = __shfl_sync(0xffffffffu, mine_w, j);
  }
  for(c = lane; c < chunks; c += 64) {
    float acc[2][8] = { { 0, 0, 0, 0, 0, 0, 0, 0 }, { 0, 0, 0, 0, 0, 0, 0, 0 } };
    uint4 v[2][K];
    const int two = c + 32 < chunks;
#pragma unroll
    for(h = 0; h < 2; h++)
#pragma unroll
      for(j = 0; j < K; j++)
        if(pos[j] >= 0 && (h == 0 || two))
          v[h][j] = __ldcg((const uint4 *)(a.ypair + (size_t)pos[j] * a.H + (c + 32 * h) * 8));
#pragma unroll
    for(h = 0; h < 2; h++) {
      if(h == 1 && !two)
        break;
#pragma unroll
      for(j = 0; j < K; j++)
        if(pos[j] >= 0)
          moe_combine_add(acc[h], w[j], v[h][j]);
      moe_combine_out(a, t, c + 32 * h, acc[h]);
    }
  }
}

/* Whether `tokens` tokens go a token a warp (moe_combine_token) over
 * `warps` warps rather than a chunk a thread (moe_combine_chunk): the
 * way with fewer dependent L2 round trips per thread. A token a warp
 * costs one for the positions and one per two chunks a lane; a chunk a
 * thread two per batch of 4 slots, per chunk. Measured, a token a warp
 * is faster at large T and slower at small T, where this picks a chunk
 * a thread (docs/decisions.md, "The combine a token a warp"). */
static __host__ __device__ __forceinline__ int moe_combine_by_token(int tokens, int H, int k,
                                                                     int warps)
{
  const long long chunks = H / 8;
  const long long by_token = (1 + (chunks + 63) / 64) * ((tokens + warps - 1) / warps);
  const long long threads = 32LL * warps;
  const long long by_chunk = 2LL * ((k + HR__MOE_COMBINE_BATCH - 1) / HR__MOE_COMBINE_BATCH) *
                             ((tokens * chunks + threads - 1) / threads);
  return k <= HR__MOE_COMBINE_WARP_MAX_K && by_token < by_chunk;
}

/* The combine of tokens [0, T) over the whole grid: each thread makes 8
 * outputs (one 16-byte chunk) of one token, chunks dealt over the grid;
 * or, where that takes fewer round trips (moe_combine_by_token), each
 * warp a token's. */
static __device__ void moe_combine_grid(const moe_comb &a, int T)
{
  const int chunks = a.H / 8;
  const long long total = (long long)T * chunks;
  const int warps = (int)gridDim.x * (HR__MOE_THREADS / 32);
  long long i;
  if(moe_combine_by_token(T, a.H, a.k, warps)) {
    int t;                                     /* a token a warp */
    for(t = (int)blockIdx.x * (HR__MOE_THREADS / 32) + (int)(threadIdx.x >> 5); t < T;
        t += warps)
      moe_combine_token(a, t, threadIdx.x & 31);
    return;
  }
  for(i = (long long)blockIdx.x * HR__MOE_THREADS + threadIdx.x; i < total;
      i += (long long)gridDim.x * HR__MOE_THREADS) {
    const int t = (int)(i / chunks), c = (int)(i - (long long)t * chunks);
    moe_combine_chunk(a, t, c);
  }
}

#endif /* HR_MOE_COMBINE_CUH */
