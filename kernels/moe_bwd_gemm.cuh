/*
 * moe_bwd_gemm.cuh: the backward's GEMM core, on mma.sync (m16n8k16,
 * bf16 in, fp32 accumulators) fed from a cp.async ring of stages.
 *
 * The backward's GEMMs read their operands in both orders: the weights as
 * the forward stores them (W1 [2I][H], W2 [H][I]) but along the other
 * dimension, and the dW GEMMs reduce over pairs, so both of their operands
 * are stored with K outermost. So an operand tile is either
 *
 *   K-major   R rows of the tile's M (or N) x BK: row r's K run is
 *             contiguous (x rows, dh rows, W1 rows in GEMM1);
 *   MN-major  BK rows of K x C columns of M (or N): K is the row
 *             (W1 and W2 along their other dimension, dh^T, x^T, dy^T).
 *
 * and ldmatrix reads it as it is, transposing (.trans) the MN-major ones
 * on the way into the fragments. Rows may be gathered (a pair's token row
 * of x or dy, through sorted_tok) and are zero-filled past the end (the
 * last tile of an expert's pairs). Shared-memory rows are padded by 16
 * bytes, which puts the 8 rows one ldmatrix phase reads in 8 bank groups.
 *
 * Every tile of the backward is one run of bwd_pipeline: STAGES - 1 steps
 * of BK in flight, one __syncthreads a step. A tile shares nothing with
 * another CTA and waits for nothing but its own copies, so the stages'
 * barriers (moe_backward.cu) are the only waits on other CTAs.
 */
#ifndef HR_MOE_BWD_GEMM_CUH
#define HR_MOE_BWD_GEMM_CUH

#include "moe_kernel.h"
#include "moe_ptx.cuh"

/* K per pipeline step (64 against 32: docs/decisions.md, "The backward's
 * steps"), and the shared-memory row padding in elements. */
#define BWD_BK 64
#define BWD_PAD 8

/* A tile of ROWS x COLS bf16 (COLS contiguous), as it sits in a stage. */
template <int ROWS, int COLS>
struct bwd_tile {
  static constexpr int PITCH = COLS + BWD_PAD;
  static constexpr int BYTES = ROWS * PITCH * 2;
  static constexpr int CHUNKS = ROWS * COLS / 8;        /* 16-byte pieces */
  static constexpr int PER_THREAD = CHUNKS / HR__MOE_THREADS;
  static_assert(CHUNKS % HR__MOE_THREADS == 0 && PER_THREAD >= 1, "a whole tile a pass");
};

/* A K-major operand: R rows, each its own start in global memory (NULL:
 * a row past the end, zero-filled), BK of K a step. */
template <int R>
struct bwd_load_kmajor {
  using T = bwd_tile<R, BWD_BK>;
  const uint16_t *src[T::PER_THREAD];
  uint32_t dst[T::PER_THREAD];

  /* row(r): the start of row r's K run, or NULL. */
  template <class RowFn>
  __device__ __forceinline__ void init(RowFn row)
  {
#pragma unroll
    for(int i = 0; i < T::PER_THREAD; i++) {
      const int c = (int)threadIdx.x + i * HR__MOE_THREADS;
      const int r = c / (BWD_BK / 8), piece = c % (BWD_BK / 8);
      const uint16_t *s = row(r);
      src[i] = s ? s + piece * 8 : nullptr;
      dst[i] = (uint32_t)((r * T::PITCH + piece * 8) * 2);
    }
  }

  __device__ __forceinline__ void issue(uint32_t stage, int step, const void *any) const
  {
#pragma unroll
    for(int i = 0; i < T::PER_THREAD; i++)
      cp_async16_zfill(stage + dst[i], src[i] ? (const void *)(src[i] + step * BWD_BK) : any,
                       src[i] != nullptr);
  }
};

/* An MN-major operand: K rows of C columns from base + row * ld, where
 * the row of K index kk is tok[kk] (gathered) or kk; rows kk >= K are
 * zero-filled. issue() must be called for steps 0, 1, 2, ... in order:
 * each call loads the next step's gathered rows, so their latency hides
 * behind a step of MMAs rather than stalling the copy. */
template <int C>
struct bwd_load_krows {
  using T = bwd_tile<BWD_BK, C>;
  const uint16_t *base;
  const int32_t *tok;
  long long ld;
  int K;
  int kr[T::PER_THREAD];      /* the chunk's row in the tile */
  uint32_t dst[T::PER_THREAD];
  int col[T::PER_THREAD];
  int row[T::PER_THREAD];     /* the global row of the next step issued */

  __device__ __forceinline__ int row_of(int kk) const
  {
    return kk < K ? (tok ? tok[kk] : kk) : 0;   /* written this launch: no __ldg */
  }

  __device__ __forceinline__ void init(const uint16_t *b, long long ldim, const int32_t *t, int k)
  {
    base = b;
    ld = ldim;
    tok = t;
    K = k;
#pragma unroll
    for(int i = 0; i < T::PER_THREAD; i++) {
      const int c = (int)threadIdx.x + i * HR__MOE_THREADS;
      kr[i] = c / (C / 8);
      col[i] = (c % (C / 8)) * 8;
      dst[i] = (uint32_t)((kr[i] * T::PITCH + col[i]) * 2);
      row[i] = row_of(kr[i]);
    }
  }

  __device__ __forceinline__ void issue(uint32_t stage, int step, const void *any)
  {
#pragma unroll
    for(int i = 0; i < T::PER_THREAD; i++) {
      const int kk = step * BWD_BK + kr[i];
      cp_async16_zfill(stage + dst[i], base + (long long)row[i] * ld + col[i], kk < K);
      row[i] = row_of(kk + BWD_BK);
    }
    (void)any;
  }
};

/* acc[MT][NT] += A x B over one stage (BK = 32: two k16 steps), for the
 * warp's block of MT 16-row tiles from m0 and NT 8-column tiles from n0.
 * A_K / B_K: the operand is K-major (else MN-major); a, b: the stage's
 * tiles; AP, BP their pitches in elements. */
template <int MT, int NT, bool A_K, bool B_K, int AP, int BP>
static __device__ __forceinline__ void bwd_mma_stage(float (&acc)[MT][NT][4], uint32_t a,
                                                     uint32_t b, int m0, int n0)
{
  static_assert(NT % 2 == 0, "B fragments come two n8 tiles at a time");
  const int lane = (int)threadIdx.x & 31;
#pragma unroll
  for(int kk = 0; kk < BWD_BK; kk += 16) {
    uint32_t fa[MT][4], fb[NT / 2][4];
#pragma unroll
    for(int mt = 0; mt < MT; mt++) {
      const int m = m0 + mt * 16;
      if constexpr(A_K)
        ldmatrix_x4(fa[mt], a + (uint32_t)(((m + (lane & 15)) * AP + kk + 8 * (lane >> 4)) * 2));
      else
        ldmatrix_x4_trans(fa[mt], a + (uint32_t)(((kk + (lane & 7) + 8 * (lane >> 4)) * AP + m +
                                                  8 * ((lane >> 3) & 1)) * 2));
    }
#pragma unroll
    for(int np = 0; np < NT / 2; np++) {
      const int n = n0 + np * 16;
      if constexpr(B_K)
        ldmatrix_x4(fb[np], b + (uint32_t)(((n + (lane & 7) + 8 * (lane >> 4)) * BP + kk +
                                            8 * ((lane >> 3) & 1)) * 2));
      else
        ldmatrix_x4_trans(fb[np], b + (uint32_t)(((kk + (lane & 7) + 8 * ((lane >> 3) & 1)) * BP +
                                                  n + 8 * (lane >> 4)) * 2));
    }
#pragma unroll
    for(int mt = 0; mt < MT; mt++)
#pragma unroll
      for(int nt = 0; nt < NT; nt++)
        mma_bf16_16816(acc[mt][nt], fa[mt], fb[nt / 2][(nt & 1) * 2], fb[nt / 2][(nt & 1) * 2 + 1]);
  }
}

template <int MT, int NT>
static __device__ __forceinline__ void bwd_acc_zero(float (&acc)[MT][NT][4])
{
#pragma unroll
  for(int mt = 0; mt < MT; mt++)
#pragma unroll
    for(int nt = 0; nt < NT; nt++)
#pragma unroll
      for(int c = 0; c < 4; c++)
        acc[mt][nt][c] = 0.0f;
}

/* nk steps through a ring of STAGES stages of STAGE_BYTES from `ring`
 * (a shared address): issue(stage, step) starts a step's copies,
 * compute(stage, step) runs its MMAs (ASYNC_READ: wgmma's, which read
 * shared memory through the async proxy). The steps may span several tiles
 * (moe_backward.cu, the dW groups): compute ends a tile where its last
 * step is, while the next tile's first steps are already in flight. Ends
 * with the ring drained and the CTA synchronized, so the next tile (or
 * an epilogue) may reuse it. */
template <int STAGES, int STAGE_BYTES, bool ASYNC_READ = false, class Issue, class Compute>
static __device__ __forceinline__ void bwd_pipeline(int nk, uint32_t ring, Issue issue,
                                                    Compute compute)
{
#pragma unroll
  for(int s = 0; s < STAGES - 1; s++) {
    if(s < nk)
      issue(ring + s * STAGE_BYTES, s);
    cp_async_commit();
  }
  for(int kt = 0; kt < nk; kt++) {
    cp_async_wait<STAGES - 2>();
    if constexpr(ASYNC_READ)
      fence_proxy_async_shared();        /* wgmma reads what cp.async wrote */
    __syncthreads();                     /* step kt landed; kt - 1 consumed */
    const int next = kt + STAGES - 1;
    if(next < nk)
      issue(ring + (next % STAGES) * STAGE_BYTES, next);
    cp_async_commit();
    compute(ring + (kt % STAGES) * STAGE_BYTES, kt);
  }
  cp_async_wait<0>();
  __syncthreads();
}

/* The accumulator element c of tile (mt, nt): its row and column in the
 * warp's block. */
static __device__ __forceinline__ int bwd_acc_row(int mt, int c)
{
  return mt * 16 + (((int)threadIdx.x & 31) >> 2) + 8 * (c >> 1);
}

static __device__ __forceinline__ int bwd_acc_col(int nt, int c)
{
  return nt * 8 + (((int)threadIdx.x & 3) * 2) + (c & 1);
}

#endif /* HR_MOE_BWD_GEMM_CUH */
