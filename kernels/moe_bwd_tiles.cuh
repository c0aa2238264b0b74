/*
 * moe_bwd_tiles.cuh: the mega-MoE backward's tiles (moe_backward.h lists
 * the stages), shared by the single-GPU backward (moe_backward.cu) and the
 * expert-parallel one (moe_ep_backward.cu), whose local experts' backward
 * is the same problem over the rows it received: the shared-memory
 * layout, the plan of tiles from the routing tables, the dgu tiles, the
 * dx row tiles and the dW groups, and the claim loop that deals them.
 */
#ifndef HR_MOE_BWD_TILES_CUH
#define HR_MOE_BWD_TILES_CUH

#include "moe_backward.h"
#include "moe_barrier.cuh"
#include "moe_bwd_gemm.cuh"
#include "moe_ptx.cuh"
#include "moe_route.cuh"

#include <type_traits>

/* ---- shared memory ----------------------------------------------------- */

/* Every operand tile sits in the 128-byte swizzle wgmma reads, so a ring
 * starts on a 1024-byte boundary: the dynamic allocation has 1024 bytes
 * of slack for it (bwd_ring).
 *
 * The dgu tile's stage: the x and dy rows (128 x 64, K-major), W1's gate
 * and up rows (64 x 64, K-major) and W2's 64 K rows of the tile's 64
 * features (MN-major, one block). */
/* How many steps' wgmma may still run when a step's are issued (DEPTH;
 * the loads then run STAGES - 1 - DEPTH steps ahead; docs/decisions.md,
 * "wgmma in flight in the backward"). The dgu tiles: 0, 3 stages (their
 * 56 KiB stages leave no room for a fourth). The grads tiles: 1 in the
 * barrier kernel; 0 in the agnostic kernel, where DEPTH 1 spills (its
 * task loop keeps more registers live). The dW groups then take 4 or 3
 * stages (their staging needs the rest), the dx tiles 6 or 5 ("The dx
 * tiles' stages"). */
#define BWD_DGU_DEPTH 0
#define BWD_DGU_STAGES 3
#define BWD_GRAD_DEPTH_BAR 1
#define BWD_GRAD_DEPTH_AGN 0
#define BWD_GRAD_STAGES_OF(depth) ((depth) ? 4 : 3)
#define BWD_GRAD_STAGES BWD_GRAD_STAGES_OF(1)
/* The dx row tiles' width along H: 128 (a stage of 32 KiB, 6 or 5 of
 * them), or, built with HR_EXP_DX256 (an experiment, undecided:
 * docs/decisions.md, "The dx tiles' width"), 256 on m64n256k16, each
 * warpgroup 64 pairs by 256 columns (a stage of 48 KiB, 4 of them): a
 * quarter less shared and L2 traffic a FLOP, the loads then one step
 * less ahead. */
#if HR_EXP_DX256
#define BWD_DX_N 256
#define BWD_DX_STAGES_OF(depth) 4
#else
#define BWD_DX_N 128
#define BWD_DX_STAGES_OF(depth) ((depth) ? 6 : 5)
#endif
#define BWD_DGU_ROWS (HR__MOE_BWD_TILE_M * BWD_BK * 2)
#define BWD_DGU_W (HR__MOE_BWD_DGU_N * BWD_BK * 2)
#define BWD_DGU_STAGE (2 * BWD_DGU_ROWS + 3 * BWD_DGU_W)
/* The q-only dgu tile's stage (g and u kept by the forward): 64 dy rows
 * and W2's 64 K rows of 128 features, 24 KiB; 6 of them, one step's
 * wgmma in flight. */
#define BWD_DQ_ROWS (64 * BWD_BK * 2)
#define BWD_DQ_STAGE (BWD_DQ_ROWS + BWD_MN_TILE)
#define BWD_DQ_STAGES 6
#define BWD_DQ_DEPTH 1
/* The grads tiles' stage: A and B, each 128 x 64 (BWD_MN_TILE). */
#define BWD_GRAD_STAGE (2 * BWD_MN_TILE)
/* The dx tiles' stage: 128 dh rows x 64 (K-major), W1's 64 K rows x
 * BWD_DX_N columns (MN-major, BWD_DX_N / 64 blocks of 64). */
#define BWD_DX_STAGE (BWD_MN_TILE + BWD_DX_N * BWD_BK * 2)
/* The dW groups' shared memory (bwd_dw_group), from the ring's start: a
 * ring of the streamed operand's steps (BWD_MN_TILE each, up to
 * BWD_GRAD_STAGES of them), the stationary operand's BWD_DW_KEEP_STEPS
 * steps, then a finished tile's staging: its TMA boxes, each 128 rows of
 * 128 bytes in the 128-byte swizzle, 2 of them in bf16, 4 in fp32. */
#define BWD_DW_KEEP_STEPS 5
/* The launches whose dW groups may keep it (KEEP 1): T k <= E times this
 * many pairs an expert, where nearly every expert's K fits. Elsewhere the
 * groups are built without the choice, which costs the loads' loop 5%
 * where it is made and not taken (Qwen3-30B-A3B T = 8192). */
#define BWD_DW_KEEP_PAIRS 256
#define BWD_DW_KEEP (BWD_GRAD_STAGES * BWD_MN_TILE)
#define BWD_DW_BOX (128 * 128)
#define BWD_DW_STAGING (BWD_DW_KEEP + BWD_DW_KEEP_STEPS * BWD_MN_TILE)
#define BWD_DW_END (1024 + BWD_DW_STAGING + 4 * BWD_DW_BOX)
#define BWD_DGU_END (1024 + BWD_DGU_STAGES * BWD_DGU_STAGE)
#define BWD_RING_BYTES (BWD_DGU_END > BWD_DW_END ? BWD_DGU_END : BWD_DW_END)
/* dW tiles a unit of the grads stage runs in one pipeline (bwd_dw_group),
 * at most: 8 against 1, docs/decisions.md "dW tiles in groups". */
#define BWD_DW_GROUP 8
/* then five routing tables (E + 1 ints each, padded): cnt, pre, off,
 * tile_off and the agnostic route's cursor */
#define BWD_SMEM_BYTES (BWD_RING_BYTES + 5 * HR__MOE_ROUTE_INTS * 4)
static_assert(BWD_SMEM_BYTES + 256 <= 227 * 1024, "fits an SM");
static_assert(1024 + BWD_DQ_STAGES * BWD_DQ_STAGE <= BWD_RING_BYTES, "the q ring fits");
static_assert(1024 + BWD_DX_STAGES_OF(1) * BWD_DX_STAGE <= BWD_RING_BYTES &&
              1024 + BWD_DX_STAGES_OF(0) * BWD_DX_STAGE <= BWD_RING_BYTES, "the dx ring fits");

/* The ring's start: the first 1024-byte boundary in smem. */
static __device__ __forceinline__ uint32_t bwd_ring(const uint8_t *smem)
{
  return (smem_addr(smem) + 1023u) & ~1023u;
}

/* One pipeline step of a single-GEMM tile: its BWD_BK / 16 wgmma (A and
 * B K-major, TA / TB 0, or MN-major, 1: a k16 slice is 32 descriptor
 * units further in a K-major tile, 2048 in an MN-major one), committed,
 * then the wait for all but DEPTH steps' and the accumulators fenced.
 * add 0: the step is its tile's first, and overwrites acc. */
template <int N, int TA, int TB, int DEPTH>
static __device__ __forceinline__ void bwd_mma_step(float (&acc)[N / 8][4], uint64_t da,
                                                    uint64_t db, int add = 1)
{
  constexpr int AS = TA ? 2048 : 32, BS = TB ? 2048 : 32;
  wgmma_fence();
#pragma unroll
  for(int ks = 0; ks < BWD_BK / 16; ks++)
    wgmma_m64k16_t<N, TA, TB>(acc, wgmma_desc_add(da, ks * AS), wgmma_desc_add(db, ks * BS),
                              ks ? 1 : add);
  wgmma_commit();
  wgmma_wait<DEPTH>();
  wgmma_fence_acc(acc);
}

/* ---- the plan: tiles and tasks, from the routing tables ---------------- */

struct bwd_plan {
  int n_mt;      /* M tiles of 128 pairs, over all experts */
  int ni;        /* I / 64: dgu tiles (and d(w) partials) per M tile */
  int nh;        /* H / 128: the dW tiles along H */
  int nhx;       /* H / BWD_DX_N: the dx row tiles along H */
  int n_dgu;     /* n_mt * ni: 128 pairs x 64 features, or 64 x 128 (bwd_dq_tile) */
  int n_dx;      /* n_mt * nhx */
  int dw_gpr;    /* dW groups a run of nh tiles: ceil(nh / BWD_DW_GROUP) */
  int n_dwg;     /* dW groups: E (3I / 128) dw_gpr */
  int n_grads;   /* n_dx + n_dwg */
};

static __device__ __forceinline__ bwd_plan bwd_plan_of(const hr__moe_params &f, const moe_route &rt)
{
  bwd_plan q;
  q.n_mt = rt.tile_off[f.E];
  q.ni = f.I / HR__MOE_BWD_DGU_N;
  q.nh = f.H / 128;
  q.nhx = f.H / BWD_DX_N;
  q.n_dgu = q.n_mt * q.ni;
  q.n_dx = q.n_mt * q.nhx;
  q.dw_gpr = (q.nh + BWD_DW_GROUP - 1) / BWD_DW_GROUP;
  q.n_dwg = f.E * (3 * f.I / 128) * q.dw_gpr;
  q.n_grads = q.n_dx + q.n_dwg;
  return q;
}

/* The expert of global M tile mt: the last e with tile_off[e] <= mt
 * (an expert with no tiles shares its tile_off with the next). */
static __device__ __forceinline__ int bwd_expert_of(const moe_route &rt, int E, int mt)
{
  int lo = 0, hi = E - 1;
  while(lo < hi) {
    const int mid = (lo + hi + 1) >> 1;
    if(rt.tile_off[mid] <= mt)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

/* Global M tile mt of the dgu and dx stages: its expert, its first row
 * among the expert's pairs, and the expert's pair count and first place. */
struct bwd_mtile {
  int e, m0, cnt, off;
};

static __device__ __forceinline__ bwd_mtile bwd_mtile_of(const moe_route &rt, int E, int mt)
{
  bwd_mtile t;
  t.e = bwd_expert_of(rt, E, mt);
  t.m0 = (mt - rt.tile_off[t.e]) * HR__MOE_BWD_TILE_M;
  t.cnt = rt.cnt[t.e];
  t.off = rt.off[t.e];
  return t;
}

/* ---- stage 2: dgu ------------------------------------------------------ */

/* A dgu tile's epilogue, from the final g, u and q of one warpgroup's
 * 64 x 64 block (the wgmma m64n64 layout: two rows a thread, 16 features
 * each): pairs m0 .. m0 + 63 of the expert's, features i0 .. i0 + 63,
 * d(w) partial it of ni. The SwiGLU's backward, dh = (dg, du) and w a
 * for the pair's rows, and the row's d(w) partial <q, a> over the 64
 * features, one warp's (4 lanes') in a fixed order. */
static __device__ __forceinline__ void bwd_dgu_out(const hr__moe_bwd_params &p, int m0, int cnt,
                                                   int off, int i0, int it, int ni,
                                                   const float (&ag)[8][4],
                                                   const float (&au)[8][4],
                                                   const float (&aq)[8][4])
{
  const hr__moe_params &f = p.f;
  const int I = f.I;
  const int lane = (int)threadIdx.x & 31;
  const int w4 = ((int)threadIdx.x >> 5) & 3;
#pragma unroll
  for(int half = 0; half < 2; half++) {
    const int row = w4 * 16 + (lane >> 2) + 8 * half;
    const int valid = m0 + row < cnt;
    const int pos = off + m0 + row;
    /* .cg, not __ldg: in the EP backward the weights were written by
     * peers during this launch */
    const float w = valid ? __ldcg(f.wts + p.sorted_pair[pos]) : 0.0f;
    float dsum = 0.0f;
#pragma unroll
    for(int j = 0; j < 8; j++) {
      float dg[2], du[2], wa[2];
#pragma unroll
      for(int c = 0; c < 2; c++) {
        const float gv = ag[j][half * 2 + c], uv = au[j][half * 2 + c];
        const float qv = aq[j][half * 2 + c];
        const float ex = expf(-gv);
        const float sg = __fdividef(1.0f, 1.0f + ex);
        const float silu = __fdividef(gv, 1.0f + ex);
        const float a = bf16_lo(to_bf16(silu * uv));
        const float da = w * qv;
        dsum = __fmaf_rn(qv, a, dsum);
        du[c] = da * silu;
        dg[c] = da * uv * sg * (1.0f + gv * (1.0f - sg));
        wa[c] = w * a;
      }
      if(valid) {
        const int i = i0 + j * 8 + 2 * (lane & 3);
        uint16_t *dh = p.dh + (size_t)pos * 2 * I;
        *(uint32_t *)(dh + i) = pack_bf16x2(dg[0], dg[1]);
        *(uint32_t *)(dh + I + i) = pack_bf16x2(du[0], du[1]);
        *(uint32_t *)(p.wa + (size_t)pos * I + i) = pack_bf16x2(wa[0], wa[1]);
      }
    }
    dsum += __shfl_xor_sync(0xffffffffu, dsum, 1);
    dsum += __shfl_xor_sync(0xffffffffu, dsum, 2);
    if(valid && (lane & 3) == 0)
      p.dwp[(size_t)pos * ni + it] = dsum;
  }
}

/* dgu tile `unit` (M tile unit / ni, features it * 64 of I) with GEMM1
 * recomputed: g and u (the x rows by W1's gate and up rows, both K-major)
 * and q (the dy rows by W2, MN-major) on wgmma m64n64k16 over K = H, then
 * bwd_dgu_out. Warpgroup w takes pairs 64 w..64 w + 63 of the tile, all
 * 64 features. */
static __device__ __forceinline__ void bwd_dgu_full_tile(const hr__moe_bwd_params &p,
                                                         const moe_route &rt, const bwd_plan &q,
                                                         uint8_t *smem, int unit)
{
  const hr__moe_params &f = p.f;
  const int mt_all = unit / q.ni, it = unit - mt_all * q.ni;
  const bwd_mtile t = bwd_mtile_of(rt, f.E, mt_all);
  const int e = t.e, m0 = t.m0, cnt = t.cnt, off = t.off;
  const int H = f.H, I = f.I, i0 = it * HR__MOE_BWD_DGU_N;
  const int wg = (int)threadIdx.x >> 7;
  const uint32_t ring = bwd_ring(smem);
  const uint16_t *w1e = f.w1 + (size_t)e * 2 * I * H;
  const uint16_t *w2e = f.w2 + (size_t)e * H * I + i0;
  constexpr int PR = 128 * 8 / HR__MOE_THREADS, PW = 64 * 8 / HR__MOE_THREADS;
  const uint16_t *xr[PR], *dr[PR], *gr[PW], *ur[PW];
  uint32_t rdst[PR], wdst[PW];
  int qk[PW], qc[PW];
  float ag[8][4], au[8][4], aq[8][4];

#pragma unroll
  for(int j = 0; j < 8; j++)
#pragma unroll
    for(int c = 0; c < 4; c++)
      ag[j][c] = au[j][c] = aq[j][c] = 0.0f;
#pragma unroll
  for(int i = 0; i < PR; i++) {               /* 128 rows x 8 chunks */
    const int c = (int)threadIdx.x + i * HR__MOE_THREADS, r = c >> 3, ch = c & 7;
    const int tok = m0 + r < cnt ? f.sorted_tok[off + m0 + r] : -1;
    xr[i] = tok >= 0 ? f.x + (size_t)tok * H + ch * 8 : nullptr;
    dr[i] = tok >= 0 ? p.dy + (size_t)tok * H + ch * 8 : nullptr;
    rdst[i] = bwd_k_sw128(r, ch);
  }
#pragma unroll
  for(int i = 0; i < PW; i++) {               /* 64 rows x 8 chunks */
    const int c = (int)threadIdx.x + i * HR__MOE_THREADS, r = c >> 3, ch = c & 7;
    gr[i] = w1e + (size_t)(i0 + r) * H + ch * 8;
    ur[i] = w1e + (size_t)(I + i0 + r) * H + ch * 8;
    wdst[i] = bwd_k_sw128(r, ch);
    qk[i] = r;                                /* W2: K row r, chunk ch */
    qc[i] = ch * 8;
  }
  bwd_pipeline<BWD_DGU_STAGES, BWD_DGU_STAGE, BWD_DGU_DEPTH>(
      H / BWD_BK, ring,
      [&](uint32_t st, int s) {
        const int k0 = s * BWD_BK;
#pragma unroll
        for(int i = 0; i < PR; i++) {
          cp_async16_zfill(st + rdst[i], xr[i] ? (const void *)(xr[i] + k0) : f.x, xr[i] != nullptr);
          cp_async16_zfill(st + BWD_DGU_ROWS + rdst[i], dr[i] ? (const void *)(dr[i] + k0) : f.x,
                           dr[i] != nullptr);
        }
#pragma unroll
        for(int i = 0; i < PW; i++) {
          cp_async16(st + 2 * BWD_DGU_ROWS + wdst[i], gr[i] + k0);
          cp_async16(st + 2 * BWD_DGU_ROWS + BWD_DGU_W + wdst[i], ur[i] + k0);
          cp_async16(st + 2 * BWD_DGU_ROWS + 2 * BWD_DGU_W + wdst[i],
                     w2e + (size_t)(k0 + qk[i]) * I + qc[i]);
        }
      },
      [&](uint32_t st, int) {
        const uint64_t dx = wgmma_desc_sw128(st + wg * 64 * 128);
        const uint64_t ddy = wgmma_desc_sw128(st + BWD_DGU_ROWS + wg * 64 * 128);
        const uint64_t dg = wgmma_desc_sw128(st + 2 * BWD_DGU_ROWS);
        const uint64_t du = wgmma_desc_sw128(st + 2 * BWD_DGU_ROWS + BWD_DGU_W);
        const uint64_t dq = wgmma_desc_mn_sw128(st + 2 * BWD_DGU_ROWS + 2 * BWD_DGU_W,
                                                BWD_BK * 128, 1024);
        wgmma_fence();
#pragma unroll
        for(int ks = 0; ks < BWD_BK / 16; ks++) {
          wgmma_m64k16_t<64, 0, 0>(ag, wgmma_desc_add(dx, ks * 32), wgmma_desc_add(dg, ks * 32));
          wgmma_m64k16_t<64, 0, 0>(au, wgmma_desc_add(dx, ks * 32), wgmma_desc_add(du, ks * 32));
          wgmma_m64k16_t<64, 0, 1>(aq, wgmma_desc_add(ddy, ks * 32),
                                   wgmma_desc_add(dq, ks * 2048));
        }
        wgmma_commit();
        wgmma_wait<BWD_DGU_DEPTH>();
        wgmma_fence_acc(ag);
        wgmma_fence_acc(au);
        wgmma_fence_acc(aq);
      });
  /* the pipeline's last wait: the accumulators are final */
  wgmma_fence_acc(ag);
  wgmma_fence_acc(au);
  wgmma_fence_acc(aq);

  bwd_dgu_out(p, m0 + wg * 64, cnt, off, i0, it, q.ni, ag, au, aq);
}

/* The dgu tile where the forward kept g and u (f.gu): q alone on the
 * pipeline (a third of the MMAs; x and W1 are not read), g and u read
 * from f.gu for the epilogue. Its unit is half an M tile, 64 pairs, by
 * 128 features: warpgroup w takes features 64 w .. 64 w + 63 of the
 * same pairs, so where an expert has 64 pairs or fewer (Qwen3-30B-A3B
 * at T = 1024, DeepSeek-V3 up to T = 2048) its empty half is no unit's
 * work, not half of every unit's (docs/decisions.md, "The q tile").
 * An M tile's two halves, for the same features, are adjacent units, so
 * they read W2's columns from L2 together. A stage is the 64 dy rows and W2's
 * 64 K rows of the 128 features (MN-major, two blocks), 24 KiB; 6 of
 * them, one step's wgmma in flight. Each q sum is the forward's GEMM1's
 * K order on the same m64n64k16 wgmma, so the outputs are the same as
 * with recompute. */
static __device__ __forceinline__ void bwd_dq_tile(const hr__moe_bwd_params &p, const moe_route &rt,
                                                   const bwd_plan &q, uint8_t *smem, int unit)
{
  const hr__moe_params &f = p.f;
  const int ni2 = f.I / 128, half = unit & 1;
  const int mt_all = (unit >> 1) / ni2, it2 = (unit >> 1) - mt_all * ni2;
  const bwd_mtile t = bwd_mtile_of(rt, f.E, mt_all);
  const int e = t.e, m0 = t.m0 + 64 * half, cnt = t.cnt, off = t.off;
  if(m0 >= cnt)                               /* the expert's empty half */
    return;
  const int H = f.H, I = f.I, i0 = it2 * 128;
  const int wg = (int)threadIdx.x >> 7, lane = (int)threadIdx.x & 31;
  const int w4 = ((int)threadIdx.x >> 5) & 3;
  const uint32_t ring = bwd_ring(smem);
  const uint16_t *w2e = f.w2 + (size_t)e * H * I + i0;
  constexpr int PR = 64 * 8 / HR__MOE_THREADS, PW = 64 * 16 / HR__MOE_THREADS;
  const uint16_t *dr[PR];
  uint32_t rdst[PR], wdst[PW];
  int rok[PR], woff[PW];
  float ag[8][4], au[8][4], aq[8][4];

#pragma unroll
  for(int j = 0; j < 8; j++)
#pragma unroll
    for(int c = 0; c < 4; c++)
      aq[j][c] = 0.0f;
#pragma unroll
  for(int i = 0; i < PR; i++) {               /* 64 rows x 8 chunks */
    const int c = (int)threadIdx.x + i * HR__MOE_THREADS, r = c >> 3, ch = c & 7;
    const int tok = m0 + r < cnt ? f.sorted_tok[off + m0 + r] : -1;
    rok[i] = tok >= 0;                        /* else row 0, zero-filled */
    dr[i] = p.dy + (size_t)(tok >= 0 ? tok : 0) * H + ch * 8;
    rdst[i] = bwd_k_sw128(r, ch);
  }
#pragma unroll
  for(int i = 0; i < PW; i++) {               /* 64 K rows x 16 chunks */
    const int c = (int)threadIdx.x + i * HR__MOE_THREADS;
    woff[i] = (c >> 4) * I + (c & 15) * 8;
    wdst[i] = bwd_mn_sw128(c >> 4, (c & 15) * 8);
  }
  bwd_pipeline<BWD_DQ_STAGES, BWD_DQ_STAGE, BWD_DQ_DEPTH>(
      H / BWD_BK, ring,
      [&](uint32_t st, int s) {
        const int k0 = s * BWD_BK;
        const uint16_t *wk = w2e + (size_t)k0 * I;
#pragma unroll
        for(int i = 0; i < PR; i++)
          cp_async16_zfill(st + rdst[i], dr[i] + k0, rok[i]);
#pragma unroll
        for(int i = 0; i < PW; i++)
          cp_async16(st + BWD_DQ_ROWS + wdst[i], wk + woff[i]);
      },
      [&](uint32_t st, int) {
        bwd_mma_step<64, 0, 1, BWD_DQ_DEPTH>(
            aq, wgmma_desc_sw128(st),
            wgmma_desc_mn_sw128(st + BWD_DQ_ROWS + wg * (BWD_BK * 128), BWD_BK * 128, 1024));
      });
  wgmma_fence_acc(aq);

  /* g and u of this thread's q elements: rows as bwd_dgu_out's, two
   * adjacent features at iw + 8 j + 2 (lane & 3) */
  const int iw = i0 + wg * 64;
#pragma unroll
  for(int h = 0; h < 2; h++) {
    const int row = w4 * 16 + (lane >> 2) + 8 * h;
    const float *gu = m0 + row < cnt ? f.gu + (size_t)(off + m0 + row) * 2 * I : nullptr;
#pragma unroll
    for(int j = 0; j < 8; j++) {
      const int i = iw + j * 8 + 2 * (lane & 3);
      const float2 g2 = gu ? __ldcs((const float2 *)(gu + i)) : make_float2(0.0f, 0.0f);
      const float2 u2 = gu ? __ldcs((const float2 *)(gu + I + i)) : make_float2(0.0f, 0.0f);
      ag[j][h * 2] = g2.x;
      ag[j][h * 2 + 1] = g2.y;
      au[j][h * 2] = u2.x;
      au[j][h * 2 + 1] = u2.y;
    }
  }
  bwd_dgu_out(p, m0, cnt, off, iw, 2 * it2 + wg, q.ni, ag, au, aq);
}

/* dgu tile `unit`: from the kept g and u where the forward kept them,
 * else with GEMM1 recomputed. */
static __device__ void bwd_dgu_tile(const hr__moe_bwd_params &p, const moe_route &rt,
                                    const bwd_plan &q, uint8_t *smem, int unit)
{
  if(p.f.gu)
    bwd_dq_tile(p, rt, q, smem, unit);
  else
    bwd_dgu_full_tile(p, rt, q, smem, unit);
}

/* ---- stage 3: the dx rows, dW1, dW2 ------------------------------------ */

/* Where a dW tile writes: its 128 x 128 block of dW1 [E][2I][H] (dw1 1)
 * or dW2 [E][H][I], seen as rows of H (or I), from row `row` (e 2I + m0,
 * or e H + m0) and column col. dW1[e][m][n] = sum over the expert's
 * pairs of dh[m] x[n]; dW2[e][m][n] = sum of dy[m] (w a)[n]. */
struct bwd_dw_out {
  int dw1;
  int row, col;
};

/* A dW tile as zeros (an expert with no pairs). */
static __device__ void bwd_dw_zero(const hr__moe_bwd_params &p, bwd_dw_out o)
{
  const hr__moe_params &f = p.f;
  const int ldo = o.dw1 ? f.H : f.I, esize = p.dw_bf16 ? 2 : 4, cpr = 128 * esize / 16;
  char *out = (char *)(o.dw1 ? p.dw1 : p.dw2) + ((size_t)o.row * ldo + o.col) * esize;

  for(int i = (int)threadIdx.x; i < 128 * cpr; i += HR__MOE_THREADS)
    *(uint4 *)(out + (size_t)(i / cpr) * ldo * esize + (i % cpr) * 16) = make_uint4(0, 0, 0, 0);
}

/* A dW tile from the wgmma accumulators (warp w of warpgroup g holds rows
 * 64 g + 16 (w % 4) .. + 15, all 128 columns), as fp32 or rounded to
 * bf16: staged in shared memory as the TMA boxes of tm_dw1 or tm_dw2,
 * which thread 0 then stores. dW is the backward's one large output
 * (21 GiB at DeepSeek-V3 in bf16); the threads' own stores of it (2048
 * 16-byte stores a tile) kept them from the next tile's MMAs. In bf16
 * the staging holds two tiles (`half`: the tile's parity) so a tile's
 * staging waits only for the stores of the tile two before it; in fp32
 * one. bwd_dw_staging_wait is that wait, made before the tile's MMAs
 * are waited for so the two waits overlap.
 * A thread's rows r and r + 8 sit at the same place in the 128-byte
 * swizzle (r & 7 is lane / 4 for both), so its 16-byte chunk of column
 * block j is chunk j ^ (lane / 4) & 7 of either row: the addresses are
 * its row's base and one XOR a column block. The two element sizes are
 * two loops, not one with a test in it, which the compiler turned into
 * both loops' instructions, predicated. */
static __device__ __forceinline__ void bwd_dw_staging_wait(const hr__moe_bwd_params &p)
{
  if(threadIdx.x == 0) {
    if(p.dw_bf16)
      bulk_wait_read<1>();
    else
      bulk_wait_read<0>();
  }
}

static __device__ void bwd_dw_store(const hr__moe_bwd_params &p, bwd_dw_out o, int half,
                                    const float (&acc)[16][4], uint8_t *smem)
{
  const int wg = (int)threadIdx.x >> 7, lane = (int)threadIdx.x & 31;
  const int w4 = ((int)threadIdx.x >> 5) & 3;
  const int r = wg * 64 + w4 * 16 + (lane >> 2), x = (lane >> 2) & 7;
  const uint32_t stage = bwd_ring(smem) + BWD_DW_STAGING + (p.dw_bf16 ? half * 2 * BWD_DW_BOX : 0);
  uint8_t *row = smem + (stage - smem_addr(smem)) + r * 128;

  __syncthreads();                       /* bwd_dw_staging_wait's */
  if(p.dw_bf16) {                        /* boxes of 64 columns, 8 chunks of 8 */
    uint8_t *b = row + (lane & 3) * 4;
#pragma unroll
    for(int j = 0; j < 16; j++) {
      uint8_t *c = b + (j >> 3) * BWD_DW_BOX + (((j & 7) ^ x) << 4);
      *(uint32_t *)c = pack_bf16x2(acc[j][0], acc[j][1]);
      *(uint32_t *)(c + 8 * 128) = pack_bf16x2(acc[j][2], acc[j][3]);
    }
  } else {                               /* boxes of 32 columns, 8 chunks of 4 */
    uint8_t *b = row + (lane & 1) * 8;
#pragma unroll
    for(int j = 0; j < 16; j++) {
      uint8_t *c = b + (j >> 2) * BWD_DW_BOX + ((((j & 3) * 2 + ((lane >> 1) & 1)) ^ x) << 4);
      *(float2 *)c = make_float2(acc[j][0], acc[j][1]);
      *(float2 *)(c + 8 * 128) = make_float2(acc[j][2], acc[j][3]);
    }
  }
  fence_proxy_async_shared();            /* the TMA reads what the threads wrote */
  __syncthreads();
  if(threadIdx.x == 0) {
    const void *map = o.dw1 ? (const void *)&p.tm_dw1 : (const void *)&p.tm_dw2;
    const int boxes = p.dw_bf16 ? 2 : 4, cols = p.dw_bf16 ? 64 : 32;
    for(int b = 0; b < boxes; b++)
      tma_store_2d(map, stage + b * BWD_DW_BOX, o.col + b * cols, o.row);
    bulk_commit();
  }
}

/* dx row tile `unit` (M tile unit / nhx, columns h0 .. h0 + 127 of H):
 * dxrow = dh W1[e] over K = 2I, on wgmma m64n128k16. A the dh rows
 * K-major (wgmma_desc_sw128), B W1[e] MN-major (its rows are the K of
 * this GEMM; bwd_mn_sw128, the transpose bit): warpgroup w takes pairs
 * 64 w..64 w + 63 of the tile. */
template <int DEPTH>
static __device__ void bwd_dx_tile(const hr__moe_bwd_params &p, const moe_route &rt,
                                   const bwd_plan &q, uint8_t *smem, int unit)
{
  const hr__moe_params &f = p.f;
  const int H = f.H, I = f.I;
  const int mt_all = unit / q.nhx, h0 = (unit - mt_all * q.nhx) * 128;
  const bwd_mtile t = bwd_mtile_of(rt, f.E, mt_all);
  const int e = t.e, m0 = t.m0, cnt = t.cnt, off = t.off;
  const int wg = (int)threadIdx.x >> 7, lane = (int)threadIdx.x & 31;
  const int w4 = ((int)threadIdx.x >> 5) & 3;
  constexpr int PT = BWD_BK * 128 / 8 / HR__MOE_THREADS;   /* chunks a thread, each tile */
  const uint32_t ring = bwd_ring(smem);
  const uint16_t *w1e = f.w1 + (size_t)e * 2 * I * H + h0;
  const uint16_t *arow[PT];
  uint32_t adst[PT], bdst[PT];
  int bk[PT], bc[PT];
  float acc[16][4];

#pragma unroll
  for(int j = 0; j < 16; j++)
    acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
#pragma unroll
  for(int i = 0; i < PT; i++) {
    const int c = (int)threadIdx.x + i * HR__MOE_THREADS;
    const int r = c / (BWD_BK / 8), ch = c % (BWD_BK / 8);   /* A: 128 rows x 8 chunks */
    arow[i] = m0 + r < cnt ? p.dh + (size_t)(off + m0 + r) * 2 * I + ch * 8 : nullptr;
    adst[i] = bwd_k_sw128(r, ch);
    bk[i] = c / 16;                                          /* B: 64 K rows x 16 chunks */
    bc[i] = (c % 16) * 8;
    bdst[i] = bwd_mn_sw128(bk[i], bc[i]);
  }
  bwd_pipeline<BWD_DX_STAGES_OF(DEPTH), BWD_DX_STAGE, DEPTH>(
      2 * I / BWD_BK, ring,
      [&](uint32_t st, int s) {
#pragma unroll
        for(int i = 0; i < PT; i++) {
          cp_async16_zfill(st + adst[i], arow[i] ? (const void *)(arow[i] + s * BWD_BK) : f.x,
                           arow[i] != nullptr);
          cp_async16(st + BWD_MN_TILE + bdst[i],
                     w1e + (size_t)(s * BWD_BK + bk[i]) * H + bc[i]);
        }
      },
      [&](uint32_t st, int) {
        bwd_mma_step<128, 0, 1, DEPTH>(
            acc, wgmma_desc_sw128(st + wg * 64 * 128),
            wgmma_desc_mn_sw128(st + BWD_MN_TILE, BWD_BK * 128, 1024));
      });
  wgmma_fence_acc(acc);                /* after the pipeline's last wait */
#pragma unroll
  for(int j = 0; j < 16; j++)
#pragma unroll
    for(int half = 0; half < 2; half++) {
      const int r = wg * 64 + w4 * 16 + (lane >> 2) + 8 * half, c = j * 8 + 2 * (lane & 3);
      if(m0 + r < cnt)
        *(uint32_t *)(p.dxrow + (size_t)(off + m0 + r) * H + h0 + c) =
            pack_bf16x2(acc[j][half * 2], acc[j][half * 2 + 1]);
    }
}

#if HR_EXP_DX256
/* The same tile 256 columns wide (HR_EXP_DX256): wgmma m64n256k16, each
 * warpgroup 64 pairs by 256 columns, 128 accumulators a thread. Each
 * output is the same K loop in the same order as in the 128-wide tile
 * (an m64nNk16 sums its 16 products alike whatever N), so the bits are
 * the same. The copies' addresses are a base and a stride each (a
 * thread's chunks are 32 rows apart in A, 8 K rows apart in B, at the
 * same swizzle phase): per-chunk arrays, as the 128-wide tile keeps,
 * would spill beside the accumulators. */
template <int DEPTH>
static __device__ void bwd_dx_tile_wide(const hr__moe_bwd_params &p, const moe_route &rt,
                                        const bwd_plan &q, uint8_t *smem, int unit)
{
  constexpr int N = 256;
  constexpr int PT = BWD_BK * 128 / 8 / HR__MOE_THREADS;   /* A's chunks a thread: 4 */
  constexpr int PB = BWD_BK * N / 8 / HR__MOE_THREADS;     /* B's: 8 */
  static_assert(BWD_DX_N == N && PT == 4 && PB == 8, "the wide tile's shape");
  const hr__moe_params &f = p.f;
  const int H = f.H, I = f.I, tid = (int)threadIdx.x;
  const int mt_all = unit / q.nhx, h0 = (unit - mt_all * q.nhx) * N;
  const bwd_mtile t = bwd_mtile_of(rt, f.E, mt_all);
  const int m0 = t.m0, cnt = t.cnt, off = t.off;
  const int wg = tid >> 7, lane = tid & 31, w4 = (tid >> 5) & 3;
  const uint32_t ring = bwd_ring(smem);
  /* A: chunk i is row ar + 32 i, 16-byte piece ach; valid while the row
   * is one of the expert's pairs */
  const int ar = tid / (BWD_BK / 8), ach = tid % (BWD_BK / 8);
  const int avalid = cnt - m0 - ar;                 /* rows ar + 32 i < cnt - m0 */
  const uint16_t *a0 = p.dh + (size_t)(off + m0 + ar) * 2 * I + ach * 8;
  const uint32_t adst0 = bwd_k_sw128(ar, ach);      /* + 32 rows x 128 bytes a chunk */
  /* B: chunk i is K row bk + 8 i, columns bc .. bc + 7 */
  const int bk = tid / (N / 8), bc = (tid % (N / 8)) * 8;
  const uint16_t *b0 = f.w1 + (size_t)t.e * 2 * I * H + h0 + (size_t)bk * H + bc;
  const uint32_t bdst0 = bwd_mn_sw128(bk, bc);      /* + 8 K rows x 128 bytes a chunk */
  float acc[N / 8][4];

#pragma unroll
  for(int j = 0; j < N / 8; j++)
    acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
  bwd_pipeline<BWD_DX_STAGES_OF(DEPTH), BWD_DX_STAGE, DEPTH>(
      2 * I / BWD_BK, ring,
      [&](uint32_t st, int s) {
#pragma unroll
        for(int i = 0; i < PT; i++) {
          const int ok = 32 * i < avalid;
          cp_async16_zfill(st + adst0 + i * 32 * 128,
                           ok ? (const void *)(a0 + (size_t)32 * i * 2 * I + s * BWD_BK)
                              : (const void *)f.x,
                           ok);
        }
        const uint16_t *b = b0 + (size_t)s * BWD_BK * H;
#pragma unroll
        for(int i = 0; i < PB; i++)
          cp_async16(st + BWD_MN_TILE + bdst0 + i * 8 * 128, b + (size_t)8 * i * H);
      },
      [&](uint32_t st, int) {
        bwd_mma_step<N, 0, 1, DEPTH>(
            acc, wgmma_desc_sw128(st + wg * 64 * 128),
            wgmma_desc_mn_sw128(st + BWD_MN_TILE, BWD_BK * 128, 1024));
      });
  wgmma_fence_acc(acc);                /* after the pipeline's last wait */
#pragma unroll
  for(int j = 0; j < N / 8; j++)
#pragma unroll
    for(int half = 0; half < 2; half++) {
      const int r = wg * 64 + w4 * 16 + (lane >> 2) + 8 * half, c = j * 8 + 2 * (lane & 3);
      if(m0 + r < cnt)
        *(uint32_t *)(p.dxrow + (size_t)(off + m0 + r) * H + h0 + c) =
            pack_bf16x2(acc[j][half * 2], acc[j][half * 2 + 1]);
    }
}
#endif

/* dW group g: up to BWD_DW_GROUP tiles of one expert that share one
 * operand, in one run of the pipeline. Their K = the expert's pairs is
 * short (64 at Qwen3-30B-A3B T = 1024, 256 at DeepSeek-V3 T = 8192: a
 * few steps), so a tile on its own would be mostly the ring's fill and
 * drain; here the next tile's first steps are in flight while a tile
 * ends. The tiles of a run share the operand in expert order (its pos
 * rows): dW1's A, dh^T over rows m0 of 2I (the tiles along H), and
 * dW2's B, (w a)^T over columns n0 of I (the tiles down H); the other,
 * the token rows gathered through sorted_tok (x for dW1, dy for dW2,
 * both rows of H), is each tile's own, 128 columns further along H
 * each tile. Where the K steps fit (nk <= BWD_DW_KEEP_STEPS, in a launch
 * of the KEEP kernels) the shared operand is loaded once, by the
 * group's first tile, and kept, so a step loads one operand instead of
 * two: the stage's loads are what it waits on most (docs/kernels.md,
 * "Where the dW time goes"). Elsewhere every step loads both, the shared
 * operand's steps going round its slots as the ring's do. The tiles'
 * sums are the same either way.
 * The MMAs are wgmma m64n128k16 with both operands MN-major (the
 * transpose bits): warpgroup w takes rows 64 w..64 w + 63 of the 128 x
 * 128 tile, all its columns; a tile's first step overwrites the
 * accumulators. At small T a tile is a step or two, so what a tile costs
 * beside its MMAs is the stage's time: every tile of the group reads the
 * same pairs, so the token rows are read once where a tile is one step. */
template <int DEPTH, int KEEP>
static __device__ void bwd_dw_group(const hr__moe_bwd_params &p, const moe_route &rt,
                                    const bwd_plan &q, uint8_t *smem, int g)
{
  const hr__moe_params &f = p.f;
  const int runs1 = 2 * f.I / 128, ni2 = f.I / 128;
  const int gpe = (runs1 + ni2) * q.dw_gpr;
  const int e = g / gpe, run = (g - e * gpe) / q.dw_gpr;
  const int j0 = (g - e * gpe - run * q.dw_gpr) * BWD_DW_GROUP;
  const int nt = min(q.nh, j0 + BWD_DW_GROUP) - j0;
  const int dw1 = run < runs1;
  const int cnt = rt.cnt[e], off = rt.off[e];
  const int nk = (cnt + BWD_BK - 1) / BWD_BK;
  const int keep = KEEP && nk <= BWD_DW_KEEP_STEPS;
  const int32_t *tok = f.sorted_tok + off;
  const int wg = (int)threadIdx.x >> 7;
  constexpr int PT = BWD_BK * 128 / 8 / HR__MOE_THREADS;
  constexpr int STAGES = BWD_GRAD_STAGES_OF(DEPTH);
  static_assert(STAGES <= BWD_DW_KEEP_STEPS, "the shared operand's slots go round as the ring");
  const uint32_t ring = bwd_ring(smem), kept = ring + BWD_DW_KEEP;
  /* the shared operand (pos rows), the first tile's own (token rows) */
  const uint16_t *sh = dw1 ? p.dh + (size_t)off * 2 * f.I + run * 128
                           : p.wa + (size_t)off * f.I + (run - runs1) * 128;
  const int ld_sh = dw1 ? 2 * f.I : f.I;
  const uint16_t *own0 = (dw1 ? f.x : p.dy) + j0 * 128;
  /* tile jj's output */
  auto out_of = [&](int jj) {
    bwd_dw_out o;
    o.dw1 = dw1;
    o.row = dw1 ? e * 2 * f.I + run * 128 : e * f.H + (j0 + jj) * 128;
    o.col = dw1 ? (j0 + jj) * 128 : (run - runs1) * 128;
    return o;
  };
  float acc[16][4];
  int kr[PT], col[PT], trow[PT];        /* trow: this step's token row, -1 past cnt */
  uint32_t dst[PT];

#pragma unroll
  for(int j = 0; j < 16; j++)
    acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
  if(nk == 0) {
    for(int jj = 0; jj < nt; jj++)
      bwd_dw_zero(p, out_of(jj));
    return;
  }
#pragma unroll
  for(int i = 0; i < PT; i++) {
    const int c = (int)threadIdx.x + i * HR__MOE_THREADS;
    kr[i] = c / (128 / 8);
    col[i] = (c % (128 / 8)) * 8;
    dst[i] = bwd_mn_sw128(kr[i], col[i]);
    trow[i] = kr[i] < cnt ? tok[kr[i]] : -1;
  }
  int is = 0, it = 0;
  /* starts step s's copies into stage st (steps in order) */
  auto issue = [&](uint32_t st, int s) {
    const int sn = is + 1 == nk ? 0 : is + 1;
    const uint16_t *own = own0 + it * 128;
    const int load_sh = !keep || it == 0;
    const uint32_t sdst = kept + (keep ? is : s % STAGES) * BWD_MN_TILE;
#pragma unroll
    for(int i = 0; i < PT; i++) {
      const int valid = trow[i] >= 0;
      cp_async16_zfill(st + dst[i],
                       valid ? (const void *)(own + (long long)trow[i] * f.H + col[i]) : f.x,
                       valid);
      if(load_sh) {
        const int kk = is * BWD_BK + kr[i];
        cp_async16_zfill(sdst + dst[i],
                         valid ? (const void *)(sh + (long long)kk * ld_sh + col[i]) : f.x,
                         valid);
      }
    }
    /* The next step's rows, read now and used a step later (so the
     * read's latency is not in this step); with one step a tile,
     * every step reads the same rows. */
    if(nk > 1)
#pragma unroll
      for(int i = 0; i < PT; i++) {
        const int kn = sn * BWD_BK + kr[i];
        trow[i] = kn < cnt ? tok[kn] : -1;
      }
    is = sn;
    if(sn == 0)
      it++;
  };
  /* step s's MMAs, the tile's step cs: A, this warpgroup's 64 rows of the
   * tile (its block wg); B, all 128 columns */
  auto mma = [&](float (&ac)[16][4], uint32_t st, int s, int cs) {
    const uint32_t ss = kept + (keep ? cs : s % STAGES) * BWD_MN_TILE;
    const uint32_t a = dw1 ? ss : st, b = dw1 ? st : ss;
    bwd_mma_step<128, 1, 1, DEPTH>(
        ac, wgmma_desc_mn_sw128(a + wg * (BWD_BK * 128), BWD_BK * 128, 1024),
        wgmma_desc_mn_sw128(b, BWD_BK * 128, 1024), cs != 0);
  };
  /* tile t's end, its MMAs complete but for the last W groups */
  auto finish = [&](float (&ac)[16][4], int t, auto w) {
    bwd_dw_staging_wait(p);
    wgmma_wait<decltype(w)::value>();
    wgmma_fence_acc(ac);
    bwd_dw_store(p, out_of(t), t & 1, ac, smem);
  };
  using one = std::integral_constant<int, 1>;
  using none = std::integral_constant<int, 0>;
  if constexpr(DEPTH == 0) {
    int cs = 0, ct = 0;
    bwd_pipeline<STAGES, BWD_MN_TILE, DEPTH>(nt * nk, ring, issue, [&](uint32_t st, int s) {
      mma(acc, st, s, cs);
      if(++cs == nk) {                   /* the tile's end */
        finish(acc, ct, none{});
        cs = 0;
        ct++;
      }
    });
  } else {
    /* One step's wgmma in flight, and two tiles' accumulators, so a
     * tile is staged while the next one's MMAs run: the tiles go in
     * pairs, the even one in acc, the odd one in acc2 (chosen at run
     * time, the accumulators would serialize every wgmma). The steps
     * are bwd_pipeline's, written out. */
    float acc2[16][4];
    constexpr int AHEAD = STAGES - 1 - DEPTH;
    const int n = nt * nk;
    int s = 0;
#pragma unroll
    for(int i = 0; i < AHEAD; i++) {
      if(i < n)
        issue(ring + i * BWD_MN_TILE, i);
      cp_async_commit();
    }
    auto tile = [&](float (&ac)[16][4]) {
      for(int cs = 0; cs < nk; cs++, s++) {
        cp_async_wait<AHEAD - 1>();
        fence_proxy_async_shared();
        __syncthreads();
        if(s + AHEAD < n)
          issue(ring + ((s + AHEAD) % STAGES) * BWD_MN_TILE, s + AHEAD);
        cp_async_commit();
        mma(ac, ring + (s % STAGES) * BWD_MN_TILE, s, cs);
      }
    };
    for(int ct = 0; ct < nt; ct += 2) {
      tile(acc);
      if(ct > 0)
        finish(acc2, ct - 1, one{});
      if(ct + 1 == nt)
        break;
      tile(acc2);
      finish(acc, ct, one{});
    }
    if((nt - 1) & 1)
      finish(acc2, nt - 1, none{});
    else
      finish(acc, nt - 1, none{});
    cp_async_wait<0>();
    __syncthreads();
  }
  /* The staging free for whatever the CTA runs next. */
  if(threadIdx.x == 0)
    bulk_wait_read<0>();
  __syncthreads();
}

/* grads unit `unit`: [0, n_dx) the dx rows of M tile unit / nhx (dh W1,
 * K = 2I); then the dW groups (bwd_dw_group). */
template <int DEPTH, int KEEP>
static __device__ void bwd_grads_tile(const hr__moe_bwd_params &p, const moe_route &rt,
                                      const bwd_plan &q, uint8_t *smem, int unit)
{
  if(unit < q.n_dx)
#if HR_EXP_DX256
    bwd_dx_tile_wide<DEPTH>(p, rt, q, smem, unit);
#else
    bwd_dx_tile<DEPTH>(p, rt, q, smem, unit);
#endif
  else
    bwd_dw_group<DEPTH, KEEP>(p, rt, q, smem, unit - q.n_dx);
}

/* ---- stage 4: combine -------------------------------------------------- */

/* What the combine reads and writes: pos_of[t k + j] the row of pair
 * (t, j) in rows [.][H] and its ni d(w) partials in dwp (-1: an id
 * outside [0, E)); dx [T][H] and dtw [T][k]. */
struct bwd_comb {
  const int32_t *pos_of;
  const uint16_t *rows;
  const float *dwp;
  int ni;
  uint16_t *dx;
  float *dtw;
  int k, H;
};

/* Tokens [lo, hi): dx[t] = bf16(sum over valid slots j, in order, of the
 * dx row of (t, j)); d(w[t,j]) = the sum of its partials in order, or 0
 * for an id outside [0, E). */
static __device__ void bwd_combine_rows(const bwd_comb &a, int lo, int hi)
{
  const int chunks = a.H / 8, k = a.k, ni = a.ni;
  const long long n = (long long)(hi - lo) * chunks;
  for(long long i = threadIdx.x; i < n; i += HR__MOE_THREADS) {
    const int t = lo + (int)(i / chunks), c = (int)(i % chunks) * 8;
    float acc[8] = { 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f };
    for(int j = 0; j < k; j++) {
      const int pos = a.pos_of[t * k + j];
      if(pos < 0)
        continue;
      const uint4 v = *(const uint4 *)(a.rows + (size_t)pos * a.H + c);
      acc[0] += bf16_lo(v.x);
      acc[1] += bf16_hi(v.x);
      acc[2] += bf16_lo(v.y);
      acc[3] += bf16_hi(v.y);
      acc[4] += bf16_lo(v.z);
      acc[5] += bf16_hi(v.z);
      acc[6] += bf16_lo(v.w);
      acc[7] += bf16_hi(v.w);
    }
    uint4 o;
    o.x = pack_bf16x2(acc[0], acc[1]);
    o.y = pack_bf16x2(acc[2], acc[3]);
    o.z = pack_bf16x2(acc[4], acc[5]);
    o.w = pack_bf16x2(acc[6], acc[7]);
    *(uint4 *)(a.dx + (size_t)t * a.H + c) = o;
  }
  for(int pi = lo * k + (int)threadIdx.x; pi < hi * k; pi += HR__MOE_THREADS) {
    const int pos = a.pos_of[pi];
    float s = 0.0f;
    if(pos >= 0)
      for(int it = 0; it < ni; it++)
        s += a.dwp[(size_t)pos * ni + it];
    a.dtw[pi] = s;
  }
}

/* ---- the kernels' pieces ---------------------------------------------- */

/* The routing tables in shared memory, after the ring and the partials. */
static __device__ __forceinline__ moe_route bwd_tables(uint8_t *smem, int **cursor)
{
  int *ints = (int *)(smem + BWD_RING_BYTES);
  *cursor = ints + 4 * HR__MOE_ROUTE_INTS;
  return moe_route_tables(ints);
}

/* One CTA's claimed units of a stage from counter *claim: the next unit
 * is claimed while this one runs. */
template <class Run>
static __device__ __forceinline__ void bwd_claimed(unsigned *claim, int units, unsigned *s_unit,
                                                   Run run)
{
  if(threadIdx.x == 0)
    *s_unit = atomicAdd(claim, 1u);
  __syncthreads();
  for(;;) {
    const unsigned u = *s_unit;
    __syncthreads();
    if(u >= (unsigned)units)
      break;
    unsigned next = 0;
    if(threadIdx.x == 0)
      next = atomicAdd(claim, 1u);     /* its result is needed only below */
    run((int)u);
    if(threadIdx.x == 0)
      *s_unit = next;
    __syncthreads();
  }
}


#endif /* HR_MOE_BWD_TILES_CUH */
