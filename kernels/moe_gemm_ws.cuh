/*
 * moe_gemm_ws.cuh: the mid and wide tiles' GEMM stages with the warps
 * specialized: one warpgroup loads, the other multiplies, and the weights
 * run further ahead than the tokens.
 *
 * The same units, the same wgmma instructions in the same K order as the
 * cp.async mid and wide tiles of moe_gemm.cuh (so y is bitwise the same);
 * what differs is who loads what, and how far ahead:
 *
 *   - Two rings of shared memory, not one: the weights' (SA slots of 128
 *     rows by 64 K) and the tokens' (SB slots of BN rows by 64 K), SA > SB.
 *     The weights come from DRAM, the tokens (a few MB of x or h rows)
 *     from L2: at Qwen3-30B-A3B T = 1024 the kernel is latency-bound on
 *     the weights (bench/results/ncu-qwen3-h200-2026-11-30.md), and one
 *     ring of 28 KB steps, 12 KB of them tokens, kept only ~5 steps (80
 *     KB) of weights in flight per SM. Split, ~9 steps are.
 *   - Warpgroup 1 (warps 4-7) only loads, with cp.async: warps 4-5 the
 *     weights, warps 6-7 the tokens (GEMM1 gathers x rows, which a tiled
 *     TMA load cannot do on sm_90), each half walking the steps on its
 *     own ring. A copying thread's noinc arrival completes the slot's
 *     `full` barrier once its copies have landed; it tracks every earlier
 *     cp.async of the thread, which is why weights and tokens have
 *     threads of their own: a token slot must not wait on weights loaded
 *     further ahead. A slot is refilled once its `empty` barrier says the
 *     consumers are done with it.
 *   - Warpgroup 0 (warps 0-3) only multiplies: all 128 weight rows of the
 *     unit (two 64-row wgmmas a K slice), one step's MMAs in flight; it
 *     waits on the two `full` barriers, never on the loading threads, and
 *     stores its results from the accumulators straight to h or ypair
 *     while the loads of the next unit go on.
 *
 * Every wait is bounded by the launch's timeout: a load that never lands
 * ends the stage with an error the host reads, never a hang.
 */
#ifndef HR_MOE_GEMM_WS_CUH
#define HR_MOE_GEMM_WS_CUH

#include "moe_gemm.cuh"
#include "moe_gemm_tma.cuh"
#include "moe_kernel.h"
#include "moe_ptx.cuh"
#include "moe_route.cuh"

/* A mid or wide tile on the specialized pipeline: 128 weight rows by BN
 * tokens, steps of 64 K, SA weight slots and SB token slots, one step's
 * MMAs in flight, all rows in one warpgroup (MT 64-row blocks; the 16-row
 * tile that warp w's acc[mt] holds is C::m16(w, mt) = 4 mt + w, as with
 * two warpgroups). */
template <int BN_, int SA_, int SB_>
struct moe_tile_ws : moe_tile<128, BN_, 64, 8, 1, 1, 1, 0, 1, 1> {
  typedef moe_tile<128, BN_, 64, 8, 1, 1, 1, 0, 1, 1> base;
  static constexpr int MT = base::BM / 64;
  static constexpr int SA = SA_, SB = SB_;
  static constexpr int A_RING = SA * base::A_BYTES;
  static constexpr int B_RING = SB * base::B_BYTES;
  /* rings (from 1024 bytes on), then full and empty barriers of each */
  static constexpr int BYTES = A_RING + B_RING + 2 * 8 * (SA + SB);
  /* a loading thread copies chunk t % 8 of rows t / 8 + 8 i */
  static constexpr int A_ROWS = base::BM / 8;  /* per weight thread */
  static constexpr int B_ROWS = BN_ / 8;       /* per token thread */
  static_assert(BN_ % 8 == 0 && base::A_BYTES % 1024 == 0 && base::B_BYTES % 1024 == 0,
                "slots on 1024 bytes, for the 128-byte swizzle");
  static_assert(BYTES + 1024 <= HR__MOE_GEMM_SMEM, "rings, alignment, barriers fit");
};

/* The weights' ring fills what the tokens' leaves (4 slots, ~3 steps
 * ahead of L2's latency): 11, 10 and 9 steps of 16 KB. */
typedef moe_tile_ws<64, 11, 4> moe_tile_mid_ws;
typedef moe_tile_ws<96, 10, 4> moe_tile_wide96_ws;
typedef moe_tile_ws<128, 9, 4> moe_tile_wide_ws;
static_assert(moe_tile_mid_ws::BN == moe_tile_mid::BN &&
                  moe_tile_wide96_ws::BN == moe_tile_wide96::BN &&
                  moe_tile_wide_ws::BN == moe_tile_wide::BN,
              "the same units as the cp.async tiles");

/* Loading threads of each kind (one arrival each fills a slot), and the
 * consumer warps (one arrival each empties one). */
#define HR__MOE_WS_LOADERS 64
#define HR__MOE_WS_CONSUMER_WARPS 4
#define HR__MOE_WS_CONSUMERS (HR__MOE_WS_CONSUMER_WARPS * 32)

/* Does this launch's tile run on the specialized pipeline? The mid and
 * wide tiles do, unless the benchmark asks for their cp.async versions. */
static __device__ __forceinline__ int moe_tile_ws_on(int tile, unsigned variant)
{
  return (tile == MOE_TILE_MID || tile == MOE_TILE_WIDE || tile == MOE_TILE_WIDE96) &&
         !(variant & (HR__MOE_VAR_NO_WS | HR__MOE_VAR_MID_SYNC | HR__MOE_VAR_MID_WAIT));
}

/* Unit i of this CTA in the barrier kernel's round-robin deal. */
static __device__ __forceinline__ moe_unit ws_unit(const hr__moe_params &p, const moe_route &rt,
                                                   const moe_stage_dims &d, int bn, int tt,
                                                   int i)
{
  return unit_decode(moe_unit_wrap((int)blockIdx.x + i * (int)gridDim.x, d.units1), rt, p,
                     d.nf, bn, tt);
}

/* One ring's barriers and where its step s goes. */
struct ws_ring {
  uint64_t *full, *empty;
  int slots;
};

/* A loading thread, before step s's copies into its slot: wait until the
 * consumers released the slot's previous step (none in the first round).
 * 0 when the wait timed out. */
static __device__ __forceinline__ int ws_slot_free(const hr__moe_params &p, const ws_ring &r,
                                                   long long s)
{
  return s < r.slots ||
         mbar_wait(p, r.empty + (int)(s % r.slots), (unsigned)(s / r.slots - 1) & 1u);
}

/* Warps 4-5: the weights of every step of this CTA's `mine` units, rows
 * t / 8 + 8 i of each unit's tile (GEMM1's tile row r is feature
 * ft * 64 + (r / 16) * 8 + r % 8, gate or, for r % 16 >= 8, up). Sets
 * `dead` when a wait timed out (it then loads nothing more, and the
 * consumers time out on the slot it left empty). */
template <class C, int STAGE>
static __device__ void ws_load_weights(const hr__moe_params &p, const moe_route &rt,
                                       uint8_t *ring, const ws_ring &r,
                                       const moe_stage_dims &d, int mine, int &dead)
{
  const int t = (int)threadIdx.x - HR__MOE_WS_CONSUMERS;
  const int c = t & 7, r0 = t >> 3;
  const int K = STAGE == 1 ? p.H : p.I, tt = moe_tt_major<C>(p);
  long long s = 0;
  int u, kt, i;

  for(u = 0; u < mine; u++) {
    const moe_unit un = ws_unit(p, rt, d, C::BN, tt, u);
    const uint16_t *src =
        STAGE == 1 ? p.w1 + ((size_t)un.e * 2 * p.I + un.ft * 64 + r0) * p.H + c * 8
                   : p.w2 + ((size_t)un.e * p.H + un.ft * C::BM + r0) * p.I + c * 8;
    for(kt = 0; kt < d.nk; kt++, s++) {
      const int slot = (int)(s % C::SA);
      const uint32_t a = smem_addr(ring + slot * C::A_BYTES);
      if(!dead && !ws_slot_free(p, r, s))
        dead = 1;
      /* the tests' fault: step 1 never loaded (its consumers time out) */
      if(dead || tma_drop(p, (int)s))
        continue;
#pragma unroll
      for(i = 0; i < C::A_ROWS; i++) {
        /* GEMM1: row r0 + 8 i is feature +8 (i / 2), up when i is odd */
        const size_t off = STAGE == 1 ? ((size_t)(i >> 1) * 8 + ((i & 1) ? p.I : 0)) * K
                                      : (size_t)i * 8 * K;
        cp_async16(a + swz<C>(r0 + 8 * i, c), src + off + kt * C::BK);
      }
      cp_async_mbar_arrive_noinc(r.full + slot);
    }
  }
  cp_async_wait<0>();
}

/* Warps 6-7: the token rows of every step, rows t / 8 + 8 i of each
 * unit's tile (GEMM1 gathers x rows through sorted_tok, fetched a unit
 * ahead so that the gather never waits on them; GEMM2 reads h rows in
 * order). Rows past the unit's tokens are left as they are: the MMA's
 * columns there are never stored. */
template <class C, int STAGE>
static __device__ void ws_load_tokens(const hr__moe_params &p, const moe_route &rt,
                                      uint8_t *ring, const ws_ring &r,
                                      const moe_stage_dims &d, int mine, int &dead)
{
  const int t = (int)threadIdx.x - HR__MOE_WS_CONSUMERS - HR__MOE_WS_LOADERS;
  const int c = t & 7, r0 = t >> 3;
  const int K = STAGE == 1 ? p.H : p.I, tt = moe_tt_major<C>(p);
  const uint16_t *src = (STAGE == 1 ? p.x : p.h) + c * 8;
  int rows[C::B_ROWS], next_rows[C::B_ROWS];
  moe_unit nx;
  long long s = 0;
  int u, kt, i;

  nx = ws_unit(p, rt, d, C::BN, tt, 0);
#pragma unroll
  for(i = 0; i < C::B_ROWS; i++) {
    const int row = r0 + 8 * i;
    next_rows[i] = row >= nx.nvalid ? -1 : STAGE == 1 ? __ldcg(p.sorted_tok + nx.pos0 + row)
                                                      : nx.pos0 + row;
  }
  for(u = 0; u < mine; u++) {
#pragma unroll
    for(i = 0; i < C::B_ROWS; i++)
      rows[i] = next_rows[i];
    if(u + 1 < mine) {
      nx = ws_unit(p, rt, d, C::BN, tt, u + 1);
#pragma unroll
      for(i = 0; i < C::B_ROWS; i++) {
        const int row = r0 + 8 * i;
        next_rows[i] = row >= nx.nvalid ? -1
                       : STAGE == 1     ? __ldcg(p.sorted_tok + nx.pos0 + row)
                                        : nx.pos0 + row;
      }
    }
    for(kt = 0; kt < d.nk; kt++, s++) {
      const int slot = (int)(s % C::SB);
      const uint32_t b = smem_addr(ring + slot * C::B_BYTES);
      if(!dead && !ws_slot_free(p, r, s))
        dead = 1;
      if(dead)
        continue;
#pragma unroll
      for(i = 0; i < C::B_ROWS; i++)
        if(rows[i] >= 0)
          cp_async16(b + swz<C>(r0 + 8 * i, c), src + (size_t)rows[i] * K + kt * C::BK);
      cp_async_mbar_arrive_noinc(r.full + slot);
    }
  }
  cp_async_wait<0>();
}

/* The consumer warpgroup: every step once both its slots are full; from
 * step 1 each warp releases the slots of the step before (whose MMAs
 * tile_wgmma has seen complete). A thread whose wait timed out goes on
 * dead, as in moe_gemm_stage_tma, so the warps never part at a wgmma. */
template <class C, int STAGE>
static __device__ void ws_consume(const hr__moe_params &p, const moe_route &rt,
                                  uint8_t *a_ring, uint8_t *b_ring, const ws_ring &ra,
                                  const ws_ring &rb, const moe_stage_dims &d, int mine,
                                  int &dead)
{
  const int tt = moe_tt_major<C>(p);
  float acc[C::MT][C::NT][4];
  long long s = 0;
  int u, kt;

  tile_zero<C>(acc);
  for(u = 0; u < mine; u++) {
    const moe_unit un = ws_unit(p, rt, d, C::BN, tt, u);
    for(kt = 0; kt < d.nk; kt++, s++) {
      const int sa = (int)(s % C::SA), sb = (int)(s % C::SB);
      if(!dead && !mbar_wait(p, ra.full + sa, (unsigned)(s / C::SA) & 1u))
        dead = 1;
      if(!dead && !mbar_wait(p, rb.full + sb, (unsigned)(s / C::SB) & 1u))
        dead = 1;
      /* the tiles came through the generic proxy (cp.async), and the
       * barriers made them visible to this thread; wgmma reads them
       * through the async proxy */
      fence_proxy_async_shared();
      tile_wgmma<C>(acc, smem_addr(a_ring + sa * C::A_BYTES),
                    smem_addr(b_ring + sb * C::B_BYTES), un.nvalid);
      if(s > 0) {
        __syncwarp();
        if((threadIdx.x & 31) == 0) {
          mbar_arrive(ra.empty + (sa == 0 ? C::SA - 1 : sa - 1));
          mbar_arrive(rb.empty + (sb == 0 ? C::SB - 1 : sb - 1));
        }
      }
    }
    tma_unit_end<C, STAGE>(p, un, acc);
  }
  tile_drain<C>(acc);               /* as in moe_gemm_stage */
}

/* One GEMM stage of the barrier kernel on the specialized pipeline, the
 * units dealt round-robin as in moe_gemm_stage. 1 when done; 0 when a
 * wait timed out (the caller records it). Starts and ends with every
 * thread together. */
template <class C, int STAGE>
__device__ int moe_gemm_stage_ws(const hr__moe_params &p, const moe_route &rt, uint8_t *smem)
{
  const moe_stage_dims d = moe_stage_dims_of<C, STAGE>(p, rt);
  const int mine = d.units > (int)blockIdx.x
                       ? (d.units - (int)blockIdx.x + (int)gridDim.x - 1) / (int)gridDim.x
                       : 0;
  uint8_t *const a_ring = moe_pipe<C>(smem);
  uint8_t *const b_ring = a_ring + C::A_RING;
  uint64_t *const bars = (uint64_t *)(b_ring + C::B_RING);
  const ws_ring ra = { bars, bars + C::SA, C::SA };
  const ws_ring rb = { bars + 2 * C::SA, bars + 2 * C::SA + C::SB, C::SB };
  const int tid = threadIdx.x;
  int i, dead = 0, ok;

  if(mine == 0)
    return 1;
  if(tid == 0) {
    for(i = 0; i < C::SA; i++) {
      mbar_init(ra.full + i, HR__MOE_WS_LOADERS);
      mbar_init(ra.empty + i, HR__MOE_WS_CONSUMER_WARPS);
    }
    for(i = 0; i < C::SB; i++) {
      mbar_init(rb.full + i, HR__MOE_WS_LOADERS);
      mbar_init(rb.empty + i, HR__MOE_WS_CONSUMER_WARPS);
    }
    fence_mbar_init();
  }
  __syncthreads();
  if(tid < HR__MOE_WS_CONSUMERS)
    ws_consume<C, STAGE>(p, rt, a_ring, b_ring, ra, rb, d, mine, dead);
  else if(tid < HR__MOE_WS_CONSUMERS + HR__MOE_WS_LOADERS)
    ws_load_weights<C, STAGE>(p, rt, a_ring, ra, d, mine, dead);
  else
    ws_load_tokens<C, STAGE>(p, rt, b_ring, rb, d, mine, dead);
  ok = !__syncthreads_or(dead);
  if(tid == 0 && ok)
    for(i = 0; i < 2 * (C::SA + C::SB); i++)
      mbar_inval(bars + i);
  return ok;
}

#endif /* HR_MOE_GEMM_WS_CUH */
