/*
 * moe_gemm.cuh: stages 2 and 3 of the MoE kernel, the two expert GEMMs.
 *
 * Both compute, per expert e, out^T = W_e * in^T with the weights as the
 * tensor cores' A operand (rows = output features, K contiguous) and the
 * tokens as B (one token per column, K contiguous), but for the big TMA
 * tile, which takes the tokens as A (tile_wgmma_tok):
 *
 *   GEMM1: W1_e [2I, H] times x rows gathered through sorted_tok, then
 *          SwiGLU, into h [pairs, I]
 *   GEMM2: W2_e [H, I] times h rows (contiguous in expert order), into
 *          ypair [pairs, H]
 *
 * Work unit = (expert, BM weight rows, BN tokens) with the whole K; units
 * are dealt round-robin over the CTAs (unit u to CTA u % grid), or
 * claimed in order (the big tile's, on the TMA pipeline of
 * moe_gemm_tma.cuh; the agnostic kernel's; the barrier kernel's from
 * H = HR__MOE_CLAIM_MIN_H, moe_gemm_claim.cuh). Within an
 * expert, units that share weight rows are adjacent (the 128-token tiles:
 * units that share a token tile), so the CTAs that read the same tile run side
 * by side and share it in L2; at small T (a few tokens per expert) every
 * expert's rows are spread over all CTAs and each weight byte is streamed
 * from memory once.
 *
 * One CTA = 8 warps. K is walked in BK steps through a STAGES-deep
 * cp.async pipeline that runs across unit boundaries: the loads for the
 * next unit are in flight while the current one finishes (and the token
 * indices it gathers are fetched one unit ahead). Shared tiles are rows of
 * BK bf16 with the 16-byte chunks XOR-swizzled by row, so ldmatrix reads
 * are free of bank conflicts; with BK = 64 (rows of 128 bytes) that is
 * wgmma's 128-byte swizzle, and the wgmma tiles hand the tiles to wgmma
 * as they are (tile_wgmma). mma.sync warps split the tile WM x WN ways
 * and may split each stage's K WK ways (the tiny and narrow tiles: 1);
 * WK partial sums meet in shared memory at the end of the unit, always
 * added in the same order. So the K order of every sum depends on the tile shape
 * alone, and the tile shape on the routing alone: results never depend on
 * the grid.
 *
 * Seven tile shapes, by the pairs per expert that has any (moe_pick_tile):
 *   tiny (<= 12), narrow (<= 24): 128 weight rows by 16 or 32 tokens,
 *        the weights streamed in 256-byte row pieces (the work is reading
 *        each touched expert once: T up to ~128), mma.sync
 *   mid (< 48): 128 x 64, 8 stages of 64, wgmma; 256 x 64, 5 stages, in
 *        the agnostic kernel and where the barrier kernel claims its units
 *   wide80 (< 68): 256 x 80, 5 stages of 64, wgmma
 *   wide96 (< 72): 256 x 96, 4 stages of 64, wgmma
 *   wide (< 96): 128 x 128, 6 stages of 64, wgmma
 *   big: 256 x 128, 4 stages of 64, wgmma on the TMA pipeline
 *        (moe_gemm_tma.cuh), where the MMAs dominate, and from 25 pairs
 *        where I >= 2048 but where a kernel that claims its units runs a
 *        256-row cp.async tile (moe_pick_tile)
 * The cp.async wgmma tiles keep one step's MMAs in flight while the next
 * step's loads land (DEPTH 1).
 *
 * GEMM1 interleaves gate and up rows per 16-row MMA tile (rows 0..7 gate
 * of 8 features, rows 8..15 up of the same 8), so each thread holds the
 * gate and up value of the same (feature, token) and applies SwiGLU in
 * registers.
 */
#ifndef HR_MOE_GEMM_CUH
#define HR_MOE_GEMM_CUH

#include "headroom_moe.h"
#include "moe_kernel.h"
#include "moe_ptx.cuh"
#include "moe_route.cuh"
#include "moe_trace.cuh"

/* Shared memory for the pipeline, the partial sums and the output staging
 * of any tile shape (the routing tables come after it). */
#define HR__MOE_GEMM_SMEM (218 * 1024)
/* Both kernels' dynamic shared memory: the above, then the routing tables
 * (HR__MOE_ROUTE_INTS each, moe_route.cuh). More than half an SM's: one CTA per SM. */
#define HR__MOE_SMEM_BYTES (HR__MOE_GEMM_SMEM + 4 * HR__MOE_ROUTE_INTS * 4)
static_assert(HR__MOE_SMEM_BYTES > 228 * 1024 / 2, "one CTA per SM");
/* Claimed units an agnostic run keeps in its ring (a power of 2, more than
 * the units the loads can run ahead of the MMAs: STAGES - 1 <= 4, plus the
 * look-ahead and the claim ahead of it). */
#define HR__MOE_RING 8

template <int BM_, int BN_, int BK_, int WM_, int WN_, int WK_, int STAGES_,
          int WG_ = 0>
struct moe_tile {
  static constexpr int BM = BM_;          /* weight rows per unit */
  static constexpr int BN = BN_;          /* tokens per unit */
  static constexpr int BK = BK_;          /* K per pipeline stage */
  static constexpr int WM = WM_;          /* warps along rows */
  static constexpr int WN = WN_;          /* warps along tokens */
  static constexpr int WK = WK_;          /* warps along each stage's K */
  static constexpr int STAGES = STAGES_;
  /* 1: wgmma, the two warpgroups taking BM/2 rows each, all BN tokens, in
   * 64-row blocks (tile_wgmma); 0: mma.sync, warps WM x WN x WK */
  static constexpr int WG = WG_;
  /* The steps whose MMAs may still run when the next step's MMAs are
   * issued. WG tiles, 1: each step waits only for the previous step's
   * (wgmma.wait_group 1), so the tensor cores go on while the warps wait
   * for the next step's loads, and that step's slot is refilled once
   * every warpgroup is done with it (moe_gemm_stage); mma.sync tiles, 0:
   * each step's MMAs are done before the next loads are issued. */
  static constexpr int DEPTH = WG;
  /* 1: loaded by TMA (moe_gemm_tma.cuh's tiles), 0: by cp.async */
  static constexpr int TMA = 0;
  /* 1: the tokens are the MMAs' M and the weights their N (moe_tile_big_tma:
   * one m64n256 a warpgroup, its 64 tokens by all BM weight rows, MT 1 and
   * NT BM / 8); 0: the weights are M, as said above */
  static constexpr int TOK_M = 0;
  /* cp.async tiles: one __syncthreads a step (moe_one_sync) or, with
   * DEPTH 1, two (moe_lookahead says how far ahead the loads run) */
  static constexpr int ONE_SYNC = 0;
  /* Units of an expert token tile major (the 128-token tiles): the units
   * that read one token tile, a dozen or more, start together and share it
   * in L2; row tile major otherwise (unit_decode). */
  static constexpr int TT_MAJOR = BN >= 128;
  /* per warp (per warpgroup with WG: 64-row blocks) */
  static constexpr int MT = WG ? BM / 2 / 64 : BM / WM / 16; /* 16-row MMA tiles */
  static constexpr int NT = WG ? BN / 8 : BN / WN / 8;       /* 8-token MMA tiles */
  static constexpr int KS = BK / 16 / WK; /* 16-deep MMA steps per warp */
  static constexpr int ROW_BYTES = BK * 2;
  static constexpr int CPR = BK / 8;      /* 16-byte chunks per row */
  static constexpr int RPP = HR__MOE_THREADS / CPR; /* rows per load pass */
  static constexpr int A_PASSES = BM / RPP;
  /* rows past BN in the last pass are past nvalid too: never loaded */
  static constexpr int B_PASSES = (BN + RPP - 1) / RPP;
  static constexpr int A_BYTES = BM * ROW_BYTES;
  static constexpr int B_BYTES = BN * ROW_BYTES;
  static constexpr int STAGE_BYTES = A_BYTES + B_BYTES;
  static constexpr int PIPE_BYTES = STAGES * STAGE_BYTES;
  static constexpr int ACC = MT * NT * 4;  /* accumulators per thread */
  static constexpr int RED_BYTES = (WK - 1) * WM * WN * 32 * ACC * 4;
  /* Output staging, bf16 rows padded 16 bytes. mma.sync tiles: after the
   * pipeline, a whole tile. WG tiles: in the slot the unit's last step
   * has just used, half the tile (one warpgroup's rows) at a time, so the
   * shared memory goes to pipeline stages instead (tile_store). */
  static constexpr int OUT_STRIDE = WG ? BM / 2 + 8 : BM + 8;
  static constexpr int OUT_BYTES = WG ? 0 : BN * OUT_STRIDE * 2;
  static_assert(WM * WN * WK * 32 == HR__MOE_THREADS, "8 warps");
  static_assert(MT >= 1 && NT >= 2 && NT % 2 == 0 && KS >= 1, "warp tile");
  static_assert(A_PASSES >= 1 && B_PASSES >= 1 && BM % RPP == 0, "loader passes");
  /* With WG the pipeline starts on the next 1024 bytes (moe_pipe). */
  static_assert(PIPE_BYTES + RED_BYTES + OUT_BYTES + (WG ? 1024 : 0) <= HR__MOE_GEMM_SMEM,
                "shared memory");
  static_assert(!WG || (BK == 64 && WM == 8 && WN == 1 && WK == 1 && BN <= 128 &&
                        BM % 128 == 0), "wgmma tile: 128-byte rows, 2 warpgroups");
  static_assert(!WG || BN * OUT_STRIDE * 2 <= STAGE_BYTES, "half a tile fits a slot");

  /* The 16-row MMA tile that warp `warp`'s accumulators acc[mt] hold. */
  static __device__ __forceinline__ int m16(int warp, int mt)
  {
    return WG ? (warp >> 2) * (BM / 32) + mt * 4 + (warp & 3) : (warp % WM) * MT + mt;
  }
};

/* The tile shapes the dispatcher picks (moe_pick_tile, moe_tile_tall).
 * Why each is as it is: docs/decisions.md, "Tile shapes". */
/* Up to 16 and 32 tokens per unit: the weights stream from memory in
 * 256-byte row pieces, 4 or more stages in flight (about 100 KB per SM). */
typedef moe_tile<128, 16, 128, 8, 1, 1, 5> moe_tile_tiny;
typedef moe_tile<128, 32, 128, 8, 1, 1, 5> moe_tile_narrow;
/* The barrier kernel's mid tile where it deals its units: wgmma (128-byte
 * rows, so BK 64), one step's MMAs in flight. */
typedef moe_tile<128, 64, 64, 8, 1, 1, 8, 1> moe_tile_mid;
/* 128 tokens wide, 6 stages: with ~64 pairs per expert half the experts
 * have a few more than 64, and a 64-token tile streams their weights
 * twice, the second time for a handful of tokens; this tile streams them
 * once. From 72 pairs per expert. */
typedef moe_tile<128, 128, 64, 8, 1, 1, 6, 1> moe_tile_wide;
/* 256 weight rows a unit, so that each token row read from L2 feeds
 * twice the weight rows of a 128-row tile: half the K steps for the same
 * work, so half the per-step work (the loads' addresses, the MMAs'
 * descriptors, the barriers). The token rows beside the weights are what
 * limits these tiles. mid: where a kernel claims its units; wide96: 48
 * to 72 pairs per expert the experts above 96 are a few percent; wide80:
 * 16 token rows less a step buy a stage (5 steps of weights instead of
 * 4), and from 68 pairs too many experts have over 80. */
typedef moe_tile<256, 64, 64, 8, 1, 1, 5, 1> moe_tile_mid_tall;
typedef moe_tile<256, 96, 64, 8, 1, 1, 4, 1> moe_tile_wide96_tall;
typedef moe_tile<256, 80, 64, 8, 1, 1, 5, 1> moe_tile_wide80_tall;
/* A DEPTH 1 tile with one __syncthreads a step instead of two. Past a
 * step's first __syncthreads every warp has seen the MMAs of two steps
 * before complete (its wgmma.wait_group 1 of the step before), so that
 * step's slot is free: the loads go out first, into it, STAGES - 2 steps
 * ahead (one step less ahead than with two barriers), then the step's
 * MMAs. The slot a unit's results are staged in is refilled two steps
 * later, after the copy out. The 80-token tile runs so where its units
 * are dealt (moe_gemm_cpasync) and in the agnostic kernel, and the
 * agnostic kernel's mid tile (agn_tasks); where the barrier kernel claims
 * them, the claimed loop (moe_gemm_claim.cuh) runs two. */
template <class B>
struct moe_one_sync : B {
  static constexpr int ONE_SYNC = 1;
  static_assert(B::WG && B::DEPTH == 1 && B::STAGES >= 4, "one step's MMAs in flight");
};
typedef moe_one_sync<moe_tile_wide80_tall> moe_tile_wide80_tall_1s;
typedef moe_one_sync<moe_tile_mid_tall> moe_tile_mid_tall_1s;

/* The steps a cp.async tile's loads run ahead of its MMAs: STAGES - 1,
 * or one less with one __syncthreads a step (moe_one_sync). */
template <class C>
static __host__ __device__ constexpr int moe_lookahead(void)
{
  return C::STAGES - 1 - C::ONE_SYNC;
}

/* Which tile, by the average pairs per expert that has any: the narrowest
 * whose width leaves room for the experts above the average. */
#define HR__MOE_TINY_MAX_PAIRS 12
#define HR__MOE_NARROW_MAX_PAIRS 24
#define HR__MOE_WIDE_MIN_PAIRS 48
#define HR__MOE_WIDE96_MIN_PAIRS 68
#define HR__MOE_WIDE128_MIN_PAIRS 72
#define HR__MOE_BIG_MIN_PAIRS 96
enum { MOE_TILE_TINY = 0, MOE_TILE_NARROW, MOE_TILE_MID, MOE_TILE_BIG, MOE_TILE_WIDE,
       MOE_TILE_WIDE96, MOE_TILE_WIDE80 };

/* From 25 pairs per expert the big TMA tile takes the place of the
 * cp.async tiles where a GEMM2 unit is at least this many K steps of 64
 * (I >= 2048), but for the 256-row tiles of a kernel that claims its
 * units (moe_pick_tile); why: docs/decisions.md, "The big tile from 25
 * pairs". Either gives the same sums in the same K order (y bitwise). */
#define HR__MOE_BIG_MID_MIN_STEPS 32

/* Does the barrier kernel claim its cp.async tiles' units (from
 * H = HR__MOE_CLAIM_MIN_H, the flag the launch sets; moe_gemm_claim.cuh)?
 * It then runs the agnostic kernel's tiles too: the mid tile 256 rows
 * tall (moe_tile_tall), and the 256-row cp.async tiles rather than the
 * big TMA tile from 25 to 71 pairs per expert (moe_pick_tile). */
static __device__ __forceinline__ int moe_claims(unsigned flags)
{
  return (flags & HR__MOE_FLAG_CLAIM) != 0;
}

/* Does the launch run the 256-row version of its tile (moe_tile_mid_tall,
 * moe_tile_wide80_tall, moe_tile_wide96_tall) in the barrier kernel
 * (agnostic 0) or the agnostic one? The wide80 and wide96 tiles always;
 * the mid tile in the agnostic kernel, and in the barrier kernel where
 * it claims its units (moe_claims): dealt, the 256-row mid tile measured
 * level (docs/decisions.md, "256 rows a unit"). */
static __device__ __forceinline__ int moe_tile_tall(int tile, unsigned flags, int agnostic)
{
  if(tile == MOE_TILE_WIDE80 || tile == MOE_TILE_WIDE96)
    return 1;
  if(tile == MOE_TILE_MID)
    return agnostic || moe_claims(flags);
  return 0;
}

/* The tile shape for `pairs` valid pairs over `nonempty` experts that have
 * any, at intermediate size I, in the barrier kernel (agnostic 0) or the
 * agnostic one: a function of the routing, the shape, the kernel and
 * whether it claims alone, so the same for every grid. */
static __device__ __forceinline__ int moe_pick_tile(int pairs, int nonempty, int I,
                                                    unsigned flags, int agnostic)
{
  const int per_expert = nonempty > 0 ? pairs / nonempty : 0;
  const int cp = per_expert < HR__MOE_WIDE_MIN_PAIRS       ? MOE_TILE_MID
                 : per_expert >= HR__MOE_WIDE128_MIN_PAIRS ? MOE_TILE_WIDE
                 : per_expert >= HR__MOE_WIDE96_MIN_PAIRS  ? MOE_TILE_WIDE96
                                                           : MOE_TILE_WIDE80;
  const int big_mid = I / 64 >= HR__MOE_BIG_MID_MIN_STEPS &&
                      (!(agnostic || moe_claims(flags)) || !moe_tile_tall(cp, flags, agnostic));
  return per_expert >= HR__MOE_BIG_MIN_PAIRS       ? MOE_TILE_BIG
         : per_expert <= HR__MOE_TINY_MAX_PAIRS   ? MOE_TILE_TINY
         : per_expert <= HR__MOE_NARROW_MAX_PAIRS ? MOE_TILE_NARROW
         : big_mid                                ? MOE_TILE_BIG
                                                  : cp;
}

/* Tokens per unit of each tile shape. */
static __device__ __forceinline__ int moe_tile_bn(int tile)
{
  return tile == MOE_TILE_TINY     ? moe_tile_tiny::BN
         : tile == MOE_TILE_NARROW ? moe_tile_narrow::BN
         : tile == MOE_TILE_MID    ? moe_tile_mid::BN
         : tile == MOE_TILE_WIDE   ? moe_tile_wide::BN
         : tile == MOE_TILE_WIDE96 ? moe_tile_wide96_tall::BN
         : tile == MOE_TILE_WIDE80 ? moe_tile_wide80_tall::BN
                                   : 128;  /* the big tile (moe_gemm_tma.cuh) */
}

/* Weight rows per unit as the launch runs them: 256 for the big tile and
 * the 256-row ones (moe_tile_tall), 128 for the others. */
static __device__ __forceinline__ int moe_unit_rows(int tile, unsigned flags, int agnostic)
{
  return moe_tile_tall(tile, flags, agnostic) || tile == MOE_TILE_BIG ? 256 : 128;
}

/* silu(gate) * up: moe_ref.c's formula, but the division is the fast
 * one (__fdividef, within 2 ulp; expf stays the accurate one). The IEEE
 * division's code (its check and slow path, inlined at each of a unit
 * end's 40 SwiGLUs a thread) made GEMM1's unit end the kernel's largest
 * code, and the first unit of a stage runs that code cold
 * (docs/decisions.md, "SwiGLU's fast division"). So y is not bitwise
 * the IEEE formula's (within the tests' bound; the kernels still agree
 * with each other bitwise). Fast expf as well spilled registers in the
 * agnostic kernel. */
static __device__ __forceinline__ float hr__swiglu(float gate, float up)
{
  const float silu = __fdividef(gate, 1.0f + expf(-gate));
  return silu * up;
}

/* Byte offset of 16-byte chunk `c` of row `r`; XOR-ing the low three bits
 * with the row puts the 8 rows one ldmatrix reads in 8 different banks. */
template <class C>
static __device__ __forceinline__ uint32_t swz(int r, int c)
{
  return (uint32_t)(r * C::ROW_BYTES + ((c ^ (r & 7)) << 4));
}

/* One work unit, decoded. */
struct moe_unit {
  int e;        /* expert */
  int ft;       /* row tile of the weights */
  int nvalid;   /* tokens in this unit, 1..BN */
  int pos0;     /* expert-order position of its first token */
};

/* Unit u of a stage with `nf` row tiles per expert and token tiles of bn:
 * expert e owns units [tile_off[e] * nf, tile_off[e+1] * nf), row tile
 * major (the units that share a weight tile adjacent), or with tt_major
 * token tile major (those that share a token tile adjacent). */
static __device__ __forceinline__ moe_unit unit_decode(int u, const moe_route &rt,
                                                       const hr__moe_params &p, int nf,
                                                       int bn, int tt_major)
{
  moe_unit un;
  int lo = 0, hi = p.E, ntt, r, tt;
  while(hi - lo > 1) {             /* tile_off[lo]*nf <= u < tile_off[hi]*nf */
    int mid = (lo + hi) >> 1;
    if(rt.tile_off[mid] * nf <= u)
      lo = mid;
    else
      hi = mid;
  }
  ntt = rt.tile_off[lo + 1] - rt.tile_off[lo];
  r = u - rt.tile_off[lo] * nf;
  un.e = lo;
  if(tt_major) {
    tt = r / nf;
    un.ft = r - tt * nf;
  } else {
    un.ft = r / ntt;
    tt = r - un.ft * ntt;
  }
  un.nvalid = min(bn, rt.cnt[lo] - tt * bn);
  un.pos0 = rt.off[lo] + tt * bn;
  return un;
}

/* Unit u of a stage that the benchmark hook may run twice over (units1
 * units each time): u, or u - units1 the second time. */
static __device__ __forceinline__ int moe_unit_wrap(int u, int units1)
{
  return u >= units1 ? u - units1 : u;
}

/* Unit `t` of a stage's claim order (t from its counter), or -1 past its
 * end. */
static __device__ __forceinline__ int moe_claim_unit(int t, int units, int units1)
{
  return t < units ? moe_unit_wrap(t, units1) : -1;
}

/* Issues the cp.async loads, one BK step at a time, walking this CTA's
 * units in order. Thread t copies chunk t % CPR of rows t / CPR + RPP * i. */
template <class C, int STAGE>
struct moe_loader {
  /* The unit's weights: its expert's matrix, this thread's chunk; each
   * pass's row offset is computed at the copy (a_row), and the token rows
   * are kept as row indices into x or h, not pointers: with one step's
   * wgmma in flight the accumulators hold their registers through the
   * copies, and 64-bit pointers per pass made the compiler spill. */
  const uint16_t *a_src;
  int b_row[C::B_PASSES];              /* -1: past the unit's last token */
  int a_ft;                            /* the unit's row tile */
  int next_tok[C::B_PASSES];           /* GEMM1: the next unit's tokens */
  moe_unit next;                       /* the next unit, decoded */
  int unit;                            /* index among this CTA's units */
  int mine;                            /* this CTA's units */
  int units1;                          /* the stage's units, run once */
  /* NULL: unit i of this CTA is blockIdx.x + i * gridDim.x (the barrier
   * kernel's round-robin deal). Else the agnostic kernel's ring of claimed
   * units in shared memory: unit i is ring[i % 8], -1 where the run ends. */
  const int *ring;
  int kt;                              /* next K step */
  int slot;                            /* next pipeline slot */

  /* Decode unit `i` of this CTA into `next` and, for GEMM1, start loading
   * its token indices: they are used a whole unit later, so the gather
   * never waits on them. */
  __device__ int unit_index(int i) const
  {
    if(ring)
      return ring[i & (HR__MOE_RING - 1)];
    return i < mine ? moe_unit_wrap((int)blockIdx.x + i * (int)gridDim.x, units1) : -1;
  }

  __device__ void look_ahead(const hr__moe_params &p, const moe_route &rt,
                             int nf, int i)
  {
    const int r0 = threadIdx.x / C::CPR;
    const int u = unit_index(i);
    int j;
    if(u < 0)
      return;
    next = unit_decode(u, rt, p, nf, C::BN, C::TT_MAJOR);
    if(STAGE == 1) {
#pragma unroll
      for(j = 0; j < C::B_PASSES; j++) {
        const int r = r0 + C::RPP * j;
        next_tok[j] = r < next.nvalid ? __ldcg(p.sorted_tok + next.pos0 + r) : 0;
      }
    }
  }

  __device__ void init(const hr__moe_params &p, const moe_route &rt, int nf,
                       int units_mine, const int *units_ring)
  {
    units1 = rt.tile_off[p.E] * nf;
    unit = 0;
    kt = 0;
    slot = 0;
    mine = units_mine;
    ring = units_ring;
    look_ahead(p, rt, nf, 0);
  }

  __device__ void start_unit(const hr__moe_params &p, const moe_route &rt,
                             int nf)
  {
    const int c = threadIdx.x % C::CPR, r0 = threadIdx.x / C::CPR;
    const moe_unit un = next;
    int i;
    a_ft = un.ft;
    if(STAGE == 1)
      a_src = p.w1 + (size_t)un.e * 2 * p.I * p.H + c * 8;
    else
      a_src = p.w2 + (size_t)un.e * p.H * p.I + c * 8;
#pragma unroll
    for(i = 0; i < C::B_PASSES; i++) {
      const int r = r0 + C::RPP * i;
      b_row[i] = r >= un.nvalid ? -1 : STAGE == 1 ? next_tok[i] : un.pos0 + r;
    }
    look_ahead(p, rt, nf, unit + 1);
  }

  /* Row of the expert's weight matrix that tile row r reads. */
  __device__ __forceinline__ int a_row(const hr__moe_params &p, int r) const
  {
    if(STAGE == 1) {
      /* rows 0..7 of each 16: gate of 8 features; 8..15: their up */
      const int f = a_ft * (C::BM / 2) + (r >> 4) * 8 + (r & 7);
      return (r & 8) ? p.I + f : f;
    }
    return a_ft * C::BM + r;
  }

  /* Loads of the next K step into the next slot (no commit). */
  __device__ void issue(const hr__moe_params &p, const moe_route &rt,
                        uint8_t *pipe, int nf, int nk)
  {
    const int c = threadIdx.x % C::CPR, r0 = threadIdx.x / C::CPR;
    const uint32_t a = smem_addr(pipe + slot * C::STAGE_BYTES);
    const uint32_t b = a + C::A_BYTES;
    int i;
    if(kt == 0)
      start_unit(p, rt, nf);
    const int K = STAGE == 1 ? p.H : p.I;
    const uint16_t *a_k = a_src + kt * C::BK;
    const uint16_t *b_k = (STAGE == 1 ? p.x : p.h) + c * 8 + kt * C::BK;
#pragma unroll
    for(i = 0; i < C::A_PASSES; i++) {
      const uint16_t *src = a_k + (size_t)a_row(p, r0 + C::RPP * i) * K;
      cp_async16(a + swz<C>(r0 + C::RPP * i, c), src);
    }
#pragma unroll
    for(i = 0; i < C::B_PASSES; i++)
      if(b_row[i] >= 0)
        cp_async16(b + swz<C>(r0 + C::RPP * i, c), b_k + (size_t)b_row[i] * K);
    if(++kt == nk) {
      kt = 0;
      unit++;
    }
    if(++slot == C::STAGES)
      slot = 0;
  }
};

/* acc += A(slot) * B(slot) over this warp's share of the stage's K,
 * skipping token columns at and past nvalid (what lands there is never
 * stored). */
template <class C>
static __device__ __forceinline__ void tile_mma(float (&acc)[C::MT][C::NT][4],
                                                uint32_t a_base, uint32_t b_base,
                                                int wm, int wn, int wk, int nvalid)
{
  const int lane = threadIdx.x & 31;
  int kk, mt, jp;
  if(wn * C::NT * 8 >= nvalid)
    return;                                     /* no tokens for this warp */
#pragma unroll
  for(kk = 0; kk < C::KS; kk++) {
    const int ks = kk * C::WK + wk;             /* this warp's 16-deep step */
    uint32_t a[C::MT][4];
#pragma unroll
    for(mt = 0; mt < C::MT; mt++) {
      /* lanes 0-15: rows 0-15 at k 0-7; lanes 16-31: the same at k 8-15 */
      const int r = (wm * C::MT + mt) * 16 + (lane & 15);
      ldmatrix_x4(a[mt], a_base + swz<C>(r, ks * 2 + (lane >> 4)));
    }
#pragma unroll
    for(jp = 0; jp < C::NT / 2; jp++) {
      const int n0 = (wn * C::NT + jp * 2) * 8;
      uint32_t b[4];
      if(n0 >= nvalid)
        break;
      /* matrices: tokens n0..n0+7 at k 0-7, k 8-15; n0+8.. likewise */
      ldmatrix_x4(b, b_base + swz<C>(n0 + (lane & 7) + ((lane >> 4) << 3),
                                     ks * 2 + ((lane >> 3) & 1)));
#pragma unroll
      for(mt = 0; mt < C::MT; mt++) {
        mma_bf16_16816(acc[mt][jp * 2], a[mt], b[0], b[1]);
        mma_bf16_16816(acc[mt][jp * 2 + 1], a[mt], b[2], b[3]);
      }
    }
  }
}

/* The wgmma tile's step: acc += A(slot) * B(slot), warpgroup wg taking
 * rows [wg * BM/2, (wg + 1) * BM/2) in 64-row blocks, the 16-deep slices
 * in order. The MMA is as wide as the unit's tokens need (16 to 128
 * columns: a function of the routing, so the same for every grid); columns
 * at and past nvalid may hold anything and are never stored. Returns with
 * them in flight, once the previous step's are done (so the previous
 * slot is free after the next __syncthreads); tile_drain waits for the
 * last ones. */
template <class C, int N>
static __device__ __forceinline__ void tile_wgmma_n(float (&acc)[C::MT][C::NT][4],
                                                    uint32_t a_base, uint32_t b_base)
{
  const int wg = threadIdx.x >> 7;
  /* this warpgroup's first rows */
  const uint32_t a_wg = a_base + wg * C::MT * 64 * C::ROW_BYTES;
  int kk, mt;
  wgmma_fence();
#pragma unroll
  for(kk = 0; kk < C::KS; kk++) {
    /* two descriptors made whole, the rest by constant offsets */
    const uint64_t db = wgmma_desc_add(wgmma_desc_sw128(b_base), kk * 32);
    const uint64_t da0 = wgmma_desc_sw128(a_wg);
#pragma unroll
    for(mt = 0; mt < C::MT; mt++)
      wgmma_m64k16<N>(acc[mt], wgmma_desc_add(da0, mt * 64 * C::ROW_BYTES + kk * 32), db, 1);
  }
  wgmma_commit();
  wgmma_wait<1>();
}

/* The accumulators of a new unit: zeroed before the first unit and right
 * after each unit's results are stored, on the path where its MMAs are
 * known complete, rather than at the next unit's first step, where with
 * DEPTH 1 the compiler would have to prove none are in flight. */
template <class C>
static __device__ __forceinline__ void tile_zero(float (&acc)[C::MT][C::NT][4])
{
#pragma unroll
  for(int mt = 0; mt < C::MT; mt++)
#pragma unroll
    for(int j = 0; j < C::NT; j++)
      acc[mt][j][0] = acc[mt][j][1] = acc[mt][j][2] = acc[mt][j][3] = 0.0f;
}

/* The end of a unit: its last MMAs complete, the accumulators readable.
 * Nothing to do unless the tile leaves MMAs in flight. */
template <class C>
static __device__ __forceinline__ void tile_drain(float (&acc)[C::MT][C::NT][4])
{
  if constexpr(C::DEPTH) {
    wgmma_wait<0>();
#pragma unroll
    for(int mt = 0; mt < C::MT; mt++)
      wgmma_fence_acc(acc[mt]);
  }
}

/* The step of a tile with the tokens as M (TOK_M): warpgroup wg's 64
 * tokens (rows wg * 64.. of the token tile at b_base) by all BM weight
 * rows (a_base) in one wgmma m64nBMk16 a 16-deep slice. Half the MMA
 * instructions of two m64n128 a warpgroup with the weights as M, and
 * fewer shared-memory bytes read a slice (a warpgroup's 64 x 16 tokens
 * and BM x 16 weights: 20 KB for both, against 24 KB with the token
 * slice read by each of the two MMAs); docs/decisions.md, "Tokens as
 * M". Both warpgroups issue their MMAs whatever nvalid is (rows at
 * and past it are never stored): a branch or a predicate on a
 * warpgroup's MMAs, depending on the thread's index, is a divergent path
 * to ptxas, and it serializes every wgmma of the kernel around it
 * (C7520). As tile_wgmma_n, returns with the step's MMAs in flight. */
template <class C>
static __device__ __forceinline__ void tile_wgmma_tok(float (&acc)[C::MT][C::NT][4],
                                                      uint32_t a_base, uint32_t b_base,
                                                      int)
{
  static_assert(C::MT == 1 && C::NT == C::BM / 8 && C::BN == 128, "two 64-token halves");
  const int wg = threadIdx.x >> 7;
  const uint64_t dt = wgmma_desc_sw128(b_base + wg * 64 * C::ROW_BYTES);
  const uint64_t dw = wgmma_desc_sw128(a_base);
  wgmma_fence();
#pragma unroll
  for(int kk = 0; kk < C::KS; kk++)
    wgmma_m64k16<C::BM>(acc[0], wgmma_desc_add(dt, kk * 32), wgmma_desc_add(dw, kk * 32), 1);
  wgmma_commit();
  wgmma_wait<1>();
}

/* The step of a tile with the weights as M: the MMA as wide as the
 * unit's tokens need. */
template <class C>
static __device__ __forceinline__ void tile_wgmma_w(float (&acc)[C::MT][C::NT][4],
                                                    uint32_t a_base, uint32_t b_base,
                                                    int nvalid)
{
  if constexpr(C::BN > 96) {
    if(nvalid > 96) {
      tile_wgmma_n<C, 128>(acc, a_base, b_base);
      return;
    }
  }
  if constexpr(C::BN > 64) {
    if(nvalid > 64) {
      tile_wgmma_n<C, (C::BN > 96 ? 128 : C::BN == 96 ? 96 : C::BN)>(acc, a_base, b_base);
      return;
    }
  }
  if constexpr(C::BN > 32) {
    if(nvalid > 32) {
      tile_wgmma_n<C, 64>(acc, a_base, b_base);
      return;
    }
  }
  if constexpr(C::BN > 16) {
    if(nvalid > 16) {
      tile_wgmma_n<C, 32>(acc, a_base, b_base);
      return;
    }
  }
  if(nvalid > 0)
    tile_wgmma_n<C, 16>(acc, a_base, b_base);
}

template <class C>
static __device__ __forceinline__ void tile_wgmma(float (&acc)[C::MT][C::NT][4],
                                                  uint32_t a_base, uint32_t b_base,
                                                  int nvalid)
{
  if constexpr(C::TOK_M)
    tile_wgmma_tok<C>(acc, a_base, b_base, nvalid);
  else
    tile_wgmma_w<C>(acc, a_base, b_base, nvalid);
}

/* One pipeline step of either kind of tile. WG tiles read shared memory
 * through the async proxy: the caller fenced its copies (moe_step_landed). */
template <class C>
static __device__ __forceinline__ void tile_step(float (&acc)[C::MT][C::NT][4],
                                                 uint32_t a_base, uint32_t b_base,
                                                 int wm, int wn, int wk, int nvalid)
{
  if constexpr(C::WG)
    tile_wgmma<C>(acc, a_base, b_base, nvalid);
  else
    tile_mma<C>(acc, a_base, b_base, wm, wn, wk, nvalid);
}

/* The step's loads have landed in this thread's part of the slot; after
 * the __syncthreads that follows, in everyone's. wgmma reads them through
 * the async proxy, so each thread fences its own copies first. */
template <class C>
static __device__ __forceinline__ void moe_step_landed(void)
{
  cp_async_wait<moe_lookahead<C>() - 1>();
  if constexpr(C::WG)
    fence_proxy_async_shared();
}

/* The pipeline's start in the CTA's shared memory: wgmma's swizzled tiles
 * must start on 1024 bytes (the stage sizes are multiples of 1024). */
template <class C>
static __device__ __forceinline__ uint8_t *moe_pipe(uint8_t *smem)
{
  if constexpr(C::WG)
    return smem + ((1024u - (smem_addr(smem) & 1023u)) & 1023u);
  else
    return smem;
}

/* GEMM1's gate and up sums of one feature for tokens n and n + 1 of a
 * unit (c[0], c[1]: gate; c[2], c[3]: up, the MMA layouts' order), kept
 * for the backward where the caller asked (p.gu, hr_moe_args.gate_up):
 * row pos0 + n of [pairs][2I] fp32, gate at `feat`, up at I + feat.
 * Tokens at and past nvalid are another unit's or none. */
static __device__ __forceinline__ void moe_save_gu(const hr__moe_params &p, const moe_unit &un,
                                                   int n, int feat, const float *c)
{
  float *row = p.gu + (size_t)(un.pos0 + n) * 2 * p.I + feat;
  if(n < un.nvalid) {
    row[0] = c[0];
    row[p.I] = c[2];
  }
  if(n + 1 < un.nvalid) {
    row[2 * p.I] = c[1];
    row[3 * p.I] = c[3];
  }
}

/* The unit's results to global memory: the K-split partial sums added in
 * shared memory (slice 0 + 1 + 2 ..., in that order), then staged so that
 * the stores are whole 16-byte chunks of output rows. mma.sync tiles stage
 * the whole tile after the pipeline; WG tiles stage in `slot`, the slot
 * the unit's last step used (its MMAs are complete, and the loads that
 * will reuse it are issued after the next step's __syncthreads), one
 * warpgroup's rows at a time. Starts with every thread past
 * __syncthreads. */
template <class C, int STAGE>
__device__ void tile_store(const hr__moe_params &p, const moe_unit &un,
                           float (&acc)[C::MT][C::NT][4], uint8_t *pipe, uint8_t *slot,
                           int wm, int wn, int wk, int inner = 0)
{
  const int tid = threadIdx.x, lane = tid & 31, g = lane >> 2, t4 = lane & 3;
  const int warp = tid >> 5;
  float *red = (float *)(pipe + C::PIPE_BYTES);
  uint16_t *out = (uint16_t *)(C::WG ? slot : pipe + C::PIPE_BYTES + C::RED_BYTES);
  /* STAGE 1: BM/2 features per token row; STAGE 2: BM. A pass stages all
   * of them, or with WG half: warpgroup `pass`'s. A WG tile whose whole
   * output fits its slot (rows padded 16 bytes: GEMM1 always, GEMM2 but
   * for the wide and wide96-tall tiles) stages it in one pass, both
   * warpgroups at once: two __syncthreads a unit instead of four
   * (docs/decisions.md, "One-pass staging"). */
  constexpr int cols = STAGE == 1 ? C::BM / 2 : C::BM;
  constexpr bool one = C::WG && C::BN * (cols + 8) * 2 <= C::STAGE_BYTES;
  const int stride = one ? cols + 8 : C::OUT_STRIDE;
  const int passes = C::WG && !one ? 2 : 1;
  const int pass_cols = passes == 2 ? cols / 2 : cols;
  int mt, j, i, s, pass;

  if(C::WK > 1) {
    const int piece = wm * C::WN + wn;
    if(wk > 0) {
      float *dst = red + ((wk - 1) * C::WM * C::WN + piece) * C::ACC * 32;
#pragma unroll
      for(mt = 0; mt < C::MT; mt++)
#pragma unroll
        for(j = 0; j < C::NT; j++)
#pragma unroll
          for(i = 0; i < 4; i++)
            dst[((mt * C::NT + j) * 4 + i) * 32 + lane] = acc[mt][j][i];
    }
    HR__SYNC();
    if(wk == 0) {
      for(s = 1; s < C::WK; s++) {
        const float *src = red + ((s - 1) * C::WM * C::WN + piece) * C::ACC * 32;
#pragma unroll
        for(mt = 0; mt < C::MT; mt++)
#pragma unroll
          for(j = 0; j < C::NT; j++)
#pragma unroll
            for(i = 0; i < 4; i++)
              acc[mt][j][i] += src[((mt * C::NT + j) * 4 + i) * 32 + lane];
      }
    }
  }

  for(pass = 0; pass < passes; pass++) {
    const int f0 = pass * pass_cols;           /* first feature staged */
    /* WG: every warpgroup's MMAs are done with the slot; then, the last
     * pass is stored */
    if(C::WG)
      HR__SYNC();
    if(wk == 0 && (!C::WG || one || (warp >> 2) == pass)) {
#pragma unroll
      for(mt = 0; mt < C::MT; mt++) {
        const int m16 = C::m16(warp, mt);
#pragma unroll
        for(j = 0; j < C::NT; j++) {
          const int n = (wn * C::NT + j) * 8 + 2 * t4;
          const float *c = acc[mt][j];
          if(STAGE == 1) {
            /* c0,c1: gate of feature m16*8+g for tokens n, n+1; c2,c3: up */
            const int f = m16 * 8 + g - f0;
            out[n * stride + f] = to_bf16(hr__swiglu(c[0], c[2]));
            out[(n + 1) * stride + f] = to_bf16(hr__swiglu(c[1], c[3]));
            if(p.gu)
              moe_save_gu(p, un, n, un.ft * cols + m16 * 8 + g, c);
          } else {
            const int f = m16 * 16 + g - f0;
            out[n * stride + f] = to_bf16(c[0]);
            out[(n + 1) * stride + f] = to_bf16(c[1]);
            out[n * stride + f + 8] = to_bf16(c[2]);
            out[(n + 1) * stride + f + 8] = to_bf16(c[3]);
          }
        }
      }
    }
    moe_trace_inner_last(p, inner, HR__MOE_INNER_WRITTEN_ALL);
    HR__SYNC();
    moe_trace_inner(p, inner, HR__MOE_INNER_STAGED);
    {
      const int chunks = pass_cols / 8;
      uint16_t *dst = STAGE == 1 ? p.h : p.ypair;
      const int ld = STAGE == 1 ? p.I : p.H;
      const int col0 = un.ft * cols + f0;
      for(i = tid; i < un.nvalid * chunks; i += HR__MOE_THREADS) {
        const int n = i / chunks, c = i - n * chunks;
        *(uint4 *)(dst + (size_t)(un.pos0 + n) * ld + col0 + c * 8) =
            *(const uint4 *)(out + n * stride + c * 8);
      }
    }
  }
  moe_trace_inner(p, inner, HR__MOE_INNER_STORED);
}

/* Every thread, after a unit's last step on the cp.async pipeline: its
 * MMAs complete, its results out (staged in `slot`, the slot that step
 * used), the accumulators zeroed for the next unit. `inner`: the stage
 * whose inner marks this unit's end writes (moe_trace_inner), or 0. */
template <class C, int STAGE>
static __device__ __forceinline__ void tile_unit_end(const hr__moe_params &p, const moe_unit &un,
                                                     float (&acc)[C::MT][C::NT][4],
                                                     uint8_t *pipe, int slot, int wm, int wn,
                                                     int wk, int inner = 0)
{
  tile_drain<C>(acc);
  moe_trace_inner(p, inner, HR__MOE_INNER_DRAINED);
  moe_trace_inner_last(p, inner, HR__MOE_INNER_DRAINED_ALL);
  tile_store<C, STAGE>(p, un, acc, pipe, pipe + slot * C::STAGE_BYTES, wm, wn, wk, inner);
  tile_zero<C>(acc);
  moe_trace_inner(p, inner, HR__MOE_INNER_END);
}

/* The body of a cp.async pipeline step, every thread, after the step's
 * first __syncthreads: the loads STAGES - 1 steps ahead when there is a
 * step to load (`go`, as seen after that barrier; `more()`, the same
 * question asked again later in the step), and the step's MMAs on
 * `slot`. DEPTH 0: the loads first (that barrier freed the slot they
 * fill). DEPTH 1: the MMAs first, then the loads past a second
 * __syncthreads, by which every warpgroup has seen its previous step's
 * MMAs complete, so the previous step's slot is free: as far ahead as
 * with DEPTH 0. A commit group a step either way. moe_gemm_stage and
 * moe_gemm_stage_claimed share it; they differ in where the units come
 * from, so in `go` and `more`. (The agnostic kernel's runs have the same
 * step written out: folded into this one their SASS changed, and that
 * is not to be taken untimed.) */
template <class C, int STAGE, class More>
static __device__ __forceinline__ void moe_pipe_step(moe_loader<C, STAGE> &ld,
                                                     const hr__moe_params &p,
                                                     const moe_route &rt, uint8_t *pipe,
                                                     int nf, int nk,
                                                     float (&acc)[C::MT][C::NT][4], int slot,
                                                     int wm, int wn, int wk, int nvalid,
                                                     int go, const More &more)
{
  if constexpr(!C::DEPTH || C::ONE_SYNC) {
    if(go)
      ld.issue(p, rt, pipe, nf, nk);
    cp_async_commit();
  }
  {
    const uint32_t a = smem_addr(pipe + slot * C::STAGE_BYTES);
    tile_step<C>(acc, a, a + C::A_BYTES, wm, wn, wk, nvalid);
  }
  if constexpr(C::DEPTH && !C::ONE_SYNC) {
    HR__SYNC();
    if(more())
      ld.issue(p, rt, pipe, nf, nk);
    cp_async_commit();
  }
}

/* The sizes of GEMM stage STAGE in tile C: K steps per unit, row tiles
 * per expert, units, and units this launch runs (each once; none or each
 * twice through the benchmark hook). */
struct moe_stage_dims {
  int nk, nf, units1, units;
};

template <class C, int STAGE>
static __device__ __forceinline__ moe_stage_dims moe_stage_dims_of(const hr__moe_params &p,
                                                                   const moe_route &rt)
{
  moe_stage_dims d;
  d.nk = (STAGE == 1 ? p.H : p.I) / C::BK;
  d.nf = (STAGE == 1 ? 2 * p.I : p.H) / C::BM;
  d.units1 = rt.tile_off[p.E] * d.nf;
  d.units = d.units1 * moe_phase_runs(p, STAGE == 1 ? HR__MOE_PHASE_GEMM1
                                                    : HR__MOE_PHASE_GEMM2);
  return d;
}

/* One GEMM stage over all of this CTA's units. */
template <class C, int STAGE>
__device__ void moe_gemm_stage(const hr__moe_params &p, const moe_route &rt,
                               uint8_t *pipe)
{
  const int warp = threadIdx.x >> 5;
  const int wm = warp % C::WM, wn = (warp / C::WM) % C::WN;
  const int wk = warp / (C::WM * C::WN);
  const moe_stage_dims d = moe_stage_dims_of<C, STAGE>(p, rt);
  const int nk = d.nk, nf = d.nf, units1 = d.units1, units = d.units;
  const int mine = units > (int)blockIdx.x
                       ? (units - (int)blockIdx.x + (int)gridDim.x - 1) / (int)gridDim.x
                       : 0;
  const long long steps = (long long)mine * nk;
  moe_loader<C, STAGE> ld;
  moe_unit un;
  float acc[C::MT][C::NT][4];
  long long s;
  int kt = 0, u = 0, slot = 0, i;

  if(steps == 0)
    return;
  pipe = moe_pipe<C>(pipe);
  ld.init(p, rt, nf, mine, NULL);
  moe_trace_inner(p, STAGE, HR__MOE_INNER_INIT);
  for(i = 0; i < moe_lookahead<C>(); i++) {    /* fill the pipeline */
    if(i < steps)
      ld.issue(p, rt, pipe, nf, nk);
    cp_async_commit();
  }
  moe_trace_inner(p, STAGE, HR__MOE_INNER_FILLED);
  un = unit_decode(moe_unit_wrap(blockIdx.x, units1), rt, p, nf, C::BN, C::TT_MAJOR);
  tile_zero<C>(acc);
  for(s = 0; s < steps; s++) {
    moe_step_landed<C>();                       /* step s has landed */
    HR__SYNC();   /* and slot s-1 (DEPTH 0) or s-2 (ONE_SYNC) is free */
    /* the diagnostic's marks of the first unit's steps 0, 1, 2, 4, 8, 16 */
    moe_trace_inner(p, s < nk && s <= 16 && (s & (s - 1)) == 0 ? STAGE : 0,
                    HR__MOE_INNER_STEP + (s ? __ffs((int)s) : 0));
    moe_pipe_step<C, STAGE>(ld, p, rt, pipe, nf, nk, acc, slot, wm, wn, wk, un.nvalid,
                            s + moe_lookahead<C>() < steps,
                            [&] { return s + moe_lookahead<C>() < steps; });
    if(++kt == nk) {
      const int inner = u == 0 ? STAGE : 0;     /* the diagnostic's marks: none elsewhere */
      moe_trace_inner(p, inner, HR__MOE_INNER_LAST_STEP);
      tile_unit_end<C, STAGE>(p, un, acc, pipe, slot, wm, wn, wk, inner);
      if(u < HR__MOE_TRACE_UNITS)
        moe_trace(p, HR__MOE_TRACE_MARKS + (STAGE - 1) * HR__MOE_TRACE_UNITS + u);
    }
    if(++slot == C::STAGES)
      slot = 0;
    if(kt == nk) {
      kt = 0;
      if(++u < mine)
        un = unit_decode(moe_unit_wrap(blockIdx.x + u * gridDim.x, units1), rt, p,
                         nf, C::BN, C::TT_MAJOR);
      moe_trace_inner(p, u == 1 ? STAGE : 0, HR__MOE_INNER_DECODED);
    }
  }
  /* The last step ended a unit and drained; the compiler cannot know it,
   * and without this wait it serializes every wgmma of the loop. */
  tile_drain<C>(acc);
  cp_async_wait<0>();
  HR__SYNC();
}

#endif /* HR_MOE_GEMM_CUH */
