/*
 * moe_gemm_tma.cuh: the big tile's GEMM stages on a TMA pipeline.
 *
 * The same wgmma instructions in the same K order as the cp.async wgmma
 * tiles of moe_gemm.cuh (so y is bitwise the same whichever tile a launch
 * runs); what differs is how the tiles reach shared memory and how the
 * warps hand the slots around:
 *
 *   - One thread (thread 0, the producer) loads a whole step with a few
 *     TMA instructions (64-row boxes of 64 K: weights from their tensor
 *     maps, GEMM2's tokens from h), the slot's `full` barrier counting the
 *     bytes in. GEMM1's token rows, which a tiled TMA load cannot gather,
 *     every thread copies a share of with cp.async from x through
 *     sorted_tok, a step after thread 0 posted the slot, each then
 *     arriving on the same barrier (tma_gather); or, where x does not
 *     fit L2, TMA reads them from rows the routing copied in expert
 *     order.
 *   - The warps wait on the slot's `full` barrier, never on each other:
 *     there is no __syncthreads in the K loop. A warp that has seen the
 *     MMAs of the step before complete (wgmma.wait_group 1) arrives on
 *     that step's `empty` barrier; once all 8 have, the producer refills
 *     the slot STAGES steps ahead.
 *   - The results go out through a small staging buffer per warp (16 KB
 *     in all) as 16-byte chunks, so the slots need not stage them and
 *     nearly all the shared memory is pipeline.
 *
 * Why: the big tile on cp.async spent its time in the loads each thread
 * issued and in the barrier every step (docs/decisions.md, "The big tile
 * on TMA"). GEMM1 gathers token rows, which
 * a tiled TMA load cannot do on sm_90: the threads gather them with
 * cp.async into the layout the TMA boxes had (moe_gather_on, below), or
 * the route stage copies the x rows into expert order first
 * (moe_copy_xs), into ypair's memory, for TMA to read.
 *
 * Every wait is bounded by the launch's timeout: a load that never lands
 * ends the stage with an error the host reads, never a hang.
 */
#ifndef HR_MOE_GEMM_TMA_CUH
#define HR_MOE_GEMM_TMA_CUH

#include "moe_gemm.cuh"
#include "moe_kernel.h"
#include "moe_ptx.cuh"
#include "moe_route.cuh"

/* The big tile on TMA: 256 weight rows by 128 tokens, 4 stages of 64 K,
 * one step's MMAs in flight (the loads are issued by the producer ahead
 * of the MMAs, not by the warps between them, so DEPTH 1 does not hold
 * loads back as it would with cp.async). Unlike the cp.async tiles, its
 * MMAs take the tokens as M: each warpgroup 64 tokens by the 256 weight
 * rows (tile_wgmma_tok). The sums are the same, bit for bit: the tests
 * compare its y with the cp.async tiles' (test_moe_agnostic). */
struct moe_tile_big_tma : moe_tile<256, 128, 64, 8, 1, 1, 4, 1> {
  static constexpr int TMA = 1;
  /* the tokens as the MMAs' M (tile_wgmma_tok, tma_tile_store) */
  static constexpr int TOK_M = 1;
  static constexpr int MT = 1;
  static constexpr int NT = BM / 8;
};

/* Rows per TMA box of weights: 64 rows of 128 bytes, 8 KiB. */
#define HR__MOE_TMA_BOX 64
/* Warps that release a slot (every warp of both warpgroups). */
#define HR__MOE_TMA_WARPS (HR__MOE_THREADS / 32)

static_assert(moe_tile_big_tma::BM == 256 && moe_tile_big_tma::BN == 128,
              "the big tile's units (moe_unit_rows, moe_tile_bn)");
/* Each warp stages its results through shared memory of its own, its 16
 * tokens by this many output columns at a time (tma_tile_store). */
#define HR__MOE_TMA_OUT_COLS 64
#define HR__MOE_TMA_OUT_WARP_BYTES (16 * HR__MOE_TMA_OUT_COLS * 2)

/* After the pipeline: the slots' barriers, the ring, the warps' output
 * staging, then the gather's posts: a barrier a slot and two requests a
 * slot (tma_gather_post). */
#define HR__MOE_TMA_BARS_BYTES(C) (2 * 8 * C::STAGES + 4 * HR__MOE_RING)
#define HR__MOE_TMA_POSTS_AT(C)                                                \
  (C::PIPE_BYTES + HR__MOE_TMA_BARS_BYTES(C) + HR__MOE_TMA_WARPS * HR__MOE_TMA_OUT_WARP_BYTES)
#define HR__MOE_TMA_POSTS_BYTES(C) (8 * C::STAGES + 2 * 16 * C::STAGES)
#define HR__MOE_TMA_FITS(C)                                                    \
  (1024 + HR__MOE_TMA_POSTS_AT(C) + HR__MOE_TMA_POSTS_BYTES(C) <= HR__MOE_GEMM_SMEM)
static_assert(HR__MOE_TMA_FITS(moe_tile_big_tma),
              "pipeline, alignment, barriers, ring, output staging fit");
static_assert(HR__MOE_TMA_BARS_BYTES(moe_tile_big_tma) % 16 == 0, "staging on 16 bytes");

/* Does this launch's tile run on the TMA pipeline? The big tile does
 * (then, unless GEMM1 gathers, the route stage copies the x rows into
 * expert order). The mid and wide tiles stay on cp.async: on TMA, as
 * this pipeline, they were slower (docs/decisions.md, "The big tile on
 * TMA"). */
static __device__ __forceinline__ int moe_tile_tma(int tile)
{
  return tile == MOE_TILE_BIG;
}

/* Does GEMM1 of the TMA tile gather its token rows in this launch (every
 * thread with cp.async through sorted_tok, tma_gather), or read by TMA
 * the x rows that the routing copied into expert order (moe_copy_xs)? The
 * copy writes and reads every pair's x row once (4H bytes a pair) against
 * GEMM1's 4IH FLOPs a pair: its share of the stage goes as 1 / I. So the
 * gather while x fits L2 with room to spare, or where I is small enough
 * for the copy to weigh (docs/decisions.md, "GEMM1's gather"). */
#ifndef HR__MOE_GATHER_MAX_X_BYTES
#define HR__MOE_GATHER_MAX_X_BYTES (40u << 20)
#endif
/* (both may be set at build time, for an A/B of the gather against the
 * copy: NVCC_EXTRA=-DHR__MOE_GATHER_MAX_I=4096 gathers at every shape) */
#ifndef HR__MOE_GATHER_MAX_I
#define HR__MOE_GATHER_MAX_I 1024
#endif
static __device__ __forceinline__ int moe_gather_on(const hr__moe_params &p)
{
  return (size_t)p.T * p.H * 2 <= HR__MOE_GATHER_MAX_X_BYTES || p.I <= HR__MOE_GATHER_MAX_I;
}

/* Does the routing copy the x rows into expert order for this launch's
 * tile? Only for the TMA tile, and only when its GEMM1 does not gather. */
static __device__ __forceinline__ int moe_tile_copies_xs(const hr__moe_params &p, int tile)
{
  return !moe_gather_on(p) && moe_tile_tma(tile);
}

/* Does stage STAGE's token side come by gather (tma_gather)? G: the run
 * was instantiated for a launch that gathers (moe_gemm_stage_tma picks it
 * once a stage; a test of moe_gather_on in the K loop itself made both
 * paths 6-9% slower at T = 8192). */
template <int STAGE, int G>
static __device__ __forceinline__ constexpr int tma_gathers(void)
{
  return STAGE == 1 && G;
}

/* What thread 0, having loaded a step's weights into a slot, leaves for
 * the threads to gather into it (tma_gather): the unit's first position
 * and tokens, the step's first K. nvalid 0: nothing this time. */
struct tma_gather_req {
  int pos0, nvalid, k0, pad;
};

/* The gather's shared words of one run: posted[STAGES] barriers, then
 * req[2 * STAGES]: slot q's n-th post in req[2 q + (n & 1)], so that a
 * thread still reading post n - 1 is never overwritten by post n. */
struct tma_posts {
  uint64_t *posted;
  tma_gather_req *req;
};

/* A TMA run's shared memory: the stages, then the slots' `full` and
 * `empty` barriers, then the claim ring (HR__MOE_TMA_BARS_BYTES). */
struct tma_pipe {
  uint8_t *pipe;
  uint64_t *full, *empty;
  int *ring;
};

template <class C>
static __device__ __forceinline__ tma_pipe tma_pipe_of(uint8_t *smem)
{
  tma_pipe t;
  t.pipe = moe_pipe<C>(smem);
  t.full = (uint64_t *)(t.pipe + C::PIPE_BYTES);
  t.empty = t.full + C::STAGES;
  t.ring = (int *)(t.empty + C::STAGES);
  return t;
}

template <class C>
static __device__ __forceinline__ tma_posts tma_posts_of(uint8_t *pipe)
{
  tma_posts g;
  g.posted = (uint64_t *)(pipe + HR__MOE_TMA_POSTS_AT(C));
  g.req = (tma_gather_req *)(g.posted + C::STAGES);
  return g;
}

/* Pairs [lo, hi) placed by this CTA (pos_of written, visible after the
 * __syncthreads that ended the placing): their x rows to xs[pos], one
 * warp a row, 16-byte chunks. Ends with this thread's proxy fence: the
 * rows are read by TMA after the grid barrier or the counter that
 * publishes them. */
static __device__ void moe_copy_xs(const hr__moe_params &p, int lo, int hi)
{
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int chunks = p.H / 8;
  uint16_t *xs = p.ypair;
  int pi, c;
  for(pi = lo + warp; pi < hi; pi += HR__MOE_THREADS / 32) {
    const int pos = __ldcg(p.pos_of + pi);
    const uint4 *src = (const uint4 *)(p.x + (size_t)(pi / p.k) * p.H);
    uint4 *dst = (uint4 *)(xs + (size_t)pos * p.H);
    if(pos < 0)
      continue;
    for(c = lane; c < chunks; c += 32)
      dst[c] = __ldg(src + c);
  }
  fence_proxy_async_global();
}

/* Wait for the phase of `bar` with parity `par`; 0 when the launch's
 * timeout passes first. Inline, with no call: a call among the wgmma
 * instructions would make the compiler serialize them. */
static __device__ __forceinline__ int mbar_wait(const hr__moe_params &p, uint64_t *bar,
                                                unsigned par)
{
  unsigned long long t0 = 0;
  unsigned it = 0;
  while(!mbar_try_wait(bar, par)) {
    if((++it & 255) == 0) {
      const unsigned long long now = global_timer_ns();
      if(t0 == 0)
        t0 = now;
      else if(now - t0 > p.timeout_ns)
        return 0;
    }
  }
  return 1;
}

/* The producer's loads of one step (unit un, K step kt) into `slot`: the
 * weights (BM rows) and as many token boxes as the unit has tokens (the
 * MMAs read all BN token rows, but rows past nvalid feed only output
 * rows that are never stored: tile_wgmma_tok). */
template <class C, int STAGE, int G>
static __device__ __forceinline__ void tma_step_load(const hr__moe_params &p, uint8_t *pipe,
                                                     uint64_t *full, int slot,
                                                     const moe_unit &un, int kt,
                                                     tma_gather_req *req)
{
  const uint32_t a = smem_addr(pipe + slot * C::STAGE_BYTES);
  const uint32_t b = a + C::A_BYTES;
  const int k0 = kt * C::BK, box_bytes = HR__MOE_TMA_BOX * C::ROW_BYTES;
  const int tok_box_bytes = HR__MOE_TMA_TOK_BOX * C::ROW_BYTES;
  /* gathered token rows arrive through the threads' cp.async, not as bytes */
  const int boxes = tma_gathers<STAGE, G>()
                        ? 0 : (un.nvalid + HR__MOE_TMA_TOK_BOX - 1) / HR__MOE_TMA_TOK_BOX;
  /* no L2 preference: evict-first weights measured no better
   * (docs/decisions.md, "Evict-first weights") */
  const uint64_t pol = l2_policy_evict_normal();
  int r;
  mbar_arrive_expect_tx(full + slot, (unsigned)(C::A_BYTES + boxes * tok_box_bytes));
#pragma unroll
  for(r = 0; r < C::BM / HR__MOE_TMA_BOX; r++) {
    if(STAGE == 1)
      /* 64 rows = 4 groups of (8 gate rows, 8 up rows) of 8 features */
      tma_load_5d(a + r * box_bytes, &p.tm_w1, full + slot, k0, 0, 0,
                  un.ft * (C::BM / 16) + r * (HR__MOE_TMA_BOX / 16), un.e, pol);
    else
      tma_load_3d(a + r * box_bytes, &p.tm_w2, full + slot, k0,
                  un.ft * C::BM + r * HR__MOE_TMA_BOX, un.e, pol);
  }
  for(r = 0; r < boxes; r++)
    tma_load_2d(b + r * tok_box_bytes,
                STAGE == 1 ? (const void *)&p.tm_xs : (const void *)&p.tm_h, full + slot, k0,
                un.pos0 + r * HR__MOE_TMA_TOK_BOX);
  if(tma_gathers<STAGE, G>()) {
    req->pos0 = un.pos0;
    req->nvalid = un.nvalid;
    req->k0 = k0;
  }
}

/* Every thread, for a slot thread 0 has loaded a step's weights into
 * (req): its share of that step's token rows, x[sorted_tok[pos0 + n]] from
 * K k0, 128 bytes a row in 8 pieces of 16, copied with cp.async into the
 * slot's token tile as the TMA boxes laid them out (the 128-byte swizzle,
 * swz): HR__MOE_THREADS / BN threads a row, the rest of the row's pieces
 * each. Rows from nvalid on are left as they are: they feed only output
 * rows that are never stored. Then the thread arrives on the slot's
 * full barrier once its copies have landed (the barrier counts thread 0's
 * arrival and every thread's: tma_barriers_init); the warps fence the
 * async proxy after their wait, before wgmma reads the rows
 * (tma_step_mma). A thread's token index is read once a token tile
 * (*tok, for the tile at *tok_pos0): the units of one token tile share it.
 * Why every thread, a few pieces each: with warp 0 alone copying a step's
 * 128 rows, its warpgroup waited for it at every wgmma (docs/decisions.md,
 * "GEMM1's gather"). */
template <class C>
static __device__ __forceinline__ void tma_gather(const hr__moe_params &p, uint8_t *pipe,
                                                  uint64_t *full, int slot,
                                                  const tma_gather_req *req, int &tok_pos0,
                                                  int &tok)
{
  constexpr int TPR = HR__MOE_THREADS / C::BN;       /* threads a row */
  constexpr int PPT = C::ROW_BYTES / 16 / TPR;       /* pieces a thread */
  static_assert(C::ROW_BYTES == 128 && HR__MOE_THREADS % C::BN == 0 && PPT * TPR * 16 == 128,
                "a token's step is one 128-byte row of the swizzle, shared evenly");
  const int r = threadIdx.x / TPR, c0 = threadIdx.x % TPR * PPT;
  const int nvalid = req->nvalid, pos0 = req->pos0, k0 = req->k0;
  if(nvalid <= 0)
    return;
  if(r < nvalid) {
    if(pos0 != tok_pos0) {
      tok = __ldcg(p.sorted_tok + pos0 + r);
      tok_pos0 = pos0;
    }
    const uint32_t b = smem_addr(pipe + slot * C::STAGE_BYTES) + C::A_BYTES;
    const uint16_t *src = p.x + (size_t)tok * p.H + k0 + c0 * 8;
#pragma unroll
    for(int c = 0; c < PPT; c++)
      cp_async16(b + swz<C>(r, c0 + c), src + c * 8);
  }
  cp_async_mbar_arrive(full + slot);
}

/* Thread 0 at step s >= 1 of a gathering run, having loaded (loaded 1) or
 * not the slot step s - 1 used: posts that slot's request for the threads
 * to gather at step s + 1 (tma_gather_step), a step later than the
 * weights' loads, so that no thread waits for thread 0 within a step. It
 * posts at every step, loaded or not, so that every thread knows each
 * post's phase. */
template <class C, int STAGE, int G>
static __device__ __forceinline__ void tma_gather_post(const tma_posts &g, int s, int loaded)
{
  const int q = (s - 1) % C::STAGES, n = (s - 1) / C::STAGES;
  if(!tma_gathers<STAGE, G>())
    return;
  if(!loaded)
    g.req[2 * q + (n & 1)].nvalid = 0;
  mbar_arrive(g.posted + q);
}

/* The request thread 0 writes when it loads slot `slot` at step s (s 0:
 * the pipeline's fill, before any post). */
template <class C>
static __device__ __forceinline__ tma_gather_req *tma_gather_req_at(const tma_posts &g, int slot,
                                                                   int s)
{
  return g.req + 2 * slot + (s == 0 ? 0 : ((s - 1) / C::STAGES) & 1);
}

/* Every thread, after the pipeline's fill: the token rows of the steps
 * thread 0 loaded in it (their requests written before the __syncthreads
 * that ended the fill). */
template <class C, int STAGE, int G>
static __device__ __forceinline__ void tma_gather_fill(const hr__moe_params &p, uint8_t *pipe,
                                                       uint64_t *full, const tma_posts &g,
                                                       int &tok_pos0, int &tok)
{
  if(tma_gathers<STAGE, G>())
    for(int i = 0; i < C::STAGES; i++)
      tma_gather<C>(p, pipe, full, i, tma_gather_req_at<C>(g, i, 0), tok_pos0, tok);
}

/* Every thread at step t >= 2 of a gathering run: the post thread 0 made
 * at step t - 1, gathered. A wait that times out leaves the thread dead. */
template <class C, int STAGE, int G>
static __device__ __forceinline__ void tma_gather_step(const hr__moe_params &p, uint8_t *pipe,
                                                       uint64_t *full, const tma_posts &g, int t,
                                                       int &tok_pos0, int &tok, int &dead)
{
  const int q = (t - 2) % C::STAGES, n = (t - 2) / C::STAGES;
  /* the rows of the step posted at t - 1 are read at step t - 2 + STAGES */
  static_assert(C::STAGES >= 3, "a post is gathered before its step's wait");
  if(!tma_gathers<STAGE, G>() || t < 2 || dead)
    return;
  if(!mbar_wait(p, g.posted + q, (unsigned)n & 1u)) {
    dead = 1;
    return;
  }
  tma_gather<C>(p, pipe, full, q, g.req + 2 * q + (n & 1), tok_pos0, tok);
}

/* This warp's output staging (after the pipeline's barriers and ring). */
template <class C>
static __device__ __forceinline__ uint16_t *tma_out_buf(uint8_t *pipe)
{
  return (uint16_t *)(pipe + C::PIPE_BYTES + HR__MOE_TMA_BARS_BYTES(C) +
                      (threadIdx.x >> 5) * HR__MOE_TMA_OUT_WARP_BYTES);
}

/* GEMM1's gate and up sums of features f and f + 1 for token n of a unit
 * whose tokens are the MMAs' M (gate: g[0..1], up: u[0..1]), kept for the
 * backward where the caller asked (p.gu; moe_save_gu's layout). */
static __device__ __forceinline__ void moe_save_gu_tok(const hr__moe_params &p,
                                                       const moe_unit &un, int n, int f,
                                                       float g0, float g1, float u0, float u1)
{
  float *row = p.gu + (size_t)(un.pos0 + n) * 2 * p.I + f;
  if(n < un.nvalid) {
    *(float2 *)row = make_float2(g0, g1);
    *(float2 *)(row + p.I) = make_float2(u0, u1);
  }
}

/* The unit's results to h (SwiGLU) or ypair; the tile's tokens are the
 * MMAs' M (TOK_M). Warp w of warpgroup wg holds tokens
 * r0 = wg * 64 + 16 (w % 4) + g and r0 + 8 and, for each 8-column block
 * j, the tile's weight rows 8j + 2 t4 and + 1: two adjacent output
 * columns a thread. GEMM1's blocks 2q and 2q + 1 are the gate and the up
 * rows of features 8q..8q + 7 (the TMA boxes' order), so SwiGLU pairs
 * acc[2q] with acc[2q + 1]. Each warp stages 64 columns of its 16 tokens
 * at a time (its 2 KB), the 16-byte chunks of a row XOR-ed with the row
 * so that the 8 rows one store writes fall in different banks, and
 * stores them as whole 16-byte chunks of the output rows, tokens at and
 * past nvalid left out. */
template <class C, int STAGE>
static __device__ __forceinline__ void tma_tile_store(const hr__moe_params &p,
                                                      const moe_unit &un,
                                                      float (&acc)[C::MT][C::NT][4],
                                                      uint8_t *pipe)
{
  constexpr int COLS = STAGE == 1 ? C::BM / 2 : C::BM;  /* output columns of a unit */
  constexpr int CB = HR__MOE_TMA_OUT_COLS;              /* columns a batch */
  constexpr int CH = CB / 8;                            /* 16-byte chunks a batch row */
  static_assert(C::TOK_M && 16 * CB * 2 == HR__MOE_TMA_OUT_WARP_BYTES && COLS % CB == 0,
                "the tokens as M; staging");
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int g = lane >> 2, t4 = lane & 3;
  const int r0 = (warp >> 2) * 64 + (warp & 3) * 16;
  const int c0 = un.ft * COLS;
  const int ld = STAGE == 1 ? p.I : p.H;
  uint16_t *const buf = tma_out_buf<C>(pipe);
  uint16_t *const dst = (STAGE == 1 ? p.h : p.ypair) + (size_t)(un.pos0 + r0) * ld + c0;
  int b, c, i;
  if(r0 >= un.nvalid)
    return;
#pragma unroll
  for(b = 0; b < COLS / CB; b++) {
#pragma unroll
    for(c = 0; c < CH; c++) {
      /* columns b CB + 8c + 2 t4 + 0..1 of tokens r0 + g (v[0..1]) and
       * r0 + g + 8 (v[2..3]) */
      float v[4];
      if(STAGE == 1) {
        const int q = b * CH + c;
        const float *gt = acc[0][2 * q], *up = acc[0][2 * q + 1];
#pragma unroll
        for(i = 0; i < 4; i++)
          v[i] = hr__swiglu(gt[i], up[i]);
        if(p.gu) {
          const int f = c0 + 8 * q + 2 * t4;
          moe_save_gu_tok(p, un, r0 + g, f, gt[0], gt[1], up[0], up[1]);
          moe_save_gu_tok(p, un, r0 + g + 8, f, gt[2], gt[3], up[2], up[3]);
        }
      } else {
#pragma unroll
        for(i = 0; i < 4; i++)
          v[i] = acc[0][b * CH + c][i];
      }
      *(uint32_t *)(buf + g * CB + (c ^ g) * 8 + 2 * t4) = pack_bf16x2(v[0], v[1]);
      *(uint32_t *)(buf + (g + 8) * CB + (c ^ g) * 8 + 2 * t4) = pack_bf16x2(v[2], v[3]);
    }
    __syncwarp();
    for(i = lane; i < 16 * CH; i += 32) {
      const int r = i / CH, k = i % CH;
      if(r0 + r < un.nvalid)
        *(uint4 *)(dst + (size_t)r * ld + b * CB + k * 8) =
            *(const uint4 *)(buf + r * CB + (k ^ (r & 7)) * 8);
    }
    __syncwarp();
  }
}

/* Does thread 0 leave out the refill at step s of a run of nk-step units
 * (the tests' faults, HR__MOE_FAULT_*)? 0 in every production launch. */
static __device__ __forceinline__ int tma_drop(const hr__moe_params &p, int s, int nk)
{
  if(p.skip & HR__MOE_FAULT_TMA_REFILL)
    return s == 1;
  return (p.skip & HR__MOE_FAULT_TMA_REFILL_LATE) && s == 9 * nk + 1;
}

/* Thread 0, before the first load of a run: the slots' barriers, fresh
 * (full: the producer's one arrival and the bytes; empty: one arrival a
 * warp). */
template <class C, int STAGE, int G>
static __device__ __forceinline__ void tma_barriers_init(uint64_t *full, uint64_t *empty,
                                                         const tma_posts &g)
{
  for(int i = 0; i < C::STAGES; i++) {
    mbar_init(full + i, tma_gathers<STAGE, G>() ? 1 + HR__MOE_THREADS : 1);  /* + the gather's */
    mbar_init(empty + i, HR__MOE_TMA_WARPS);
    if(tma_gathers<STAGE, G>()) {
      mbar_init(g.posted + i, 1);
      g.req[2 * i].nvalid = 0;         /* the fill's, for a slot it leaves empty */
    }
  }
  fence_mbar_init();
}

/* Thread 0, after a run whose loads all landed: the barriers put away,
 * for whatever uses the memory next. */
template <class C, int STAGE, int G>
static __device__ __forceinline__ void tma_barriers_inval(uint64_t *full, uint64_t *empty,
                                                          const tma_posts &g)
{
  for(int i = 0; i < C::STAGES; i++) {
    mbar_inval(full + i);
    mbar_inval(empty + i);
    if(tma_gathers<STAGE, G>())
      mbar_inval(g.posted + i);
  }
}

/* Every thread, step s of a run: wait for the step's loads, issue its
 * MMAs (those of step s - 1 are then complete), and, from step 1, release
 * step s - 1's slot (one arrival a warp). A thread whose wait times out
 * goes on dead, as moe_gemm_stage_tma says. (Releasing each slot as soon
 * as its MMAs are complete, before waiting for the next step's loads, so
 * that every slot can be loading while the warps wait, was slower at
 * every shape: docs/decisions.md, "The big tile on TMA".) */
template <class C, int STAGE, int G>
static __device__ __forceinline__ void tma_step_mma(const hr__moe_params &p, uint8_t *pipe,
                                                    uint64_t *full, uint64_t *empty, int s,
                                                    int slot, float (&acc)[C::MT][C::NT][4],
                                                    int nvalid, int &dead)
{
  const uint32_t a = smem_addr(pipe + slot * C::STAGE_BYTES);
  if(!dead && !mbar_wait(p, full + slot, (unsigned)(s / C::STAGES) & 1u))
    dead = 1;
  if(tma_gathers<STAGE, G>())
    fence_proxy_async_shared();        /* the gathered rows: cp.async, generic proxy */
  tile_wgmma<C>(acc, a, a + C::A_BYTES, nvalid);
  if(s > 0) {
    __syncwarp();
    if((threadIdx.x & 31) == 0)
      mbar_arrive(empty + (slot == 0 ? C::STAGES - 1 : slot - 1));
  }
}

/* Thread 0, where the producer starts loading a unit: the ring's entry
 * for its l_unit-th unit, decoded into lun; 0 when the entry says the
 * run ends there. */
template <class C>
static __device__ __forceinline__ int tma_next_unit(const hr__moe_params &p, const moe_route &rt,
                                                    const int *ring, int l_unit, int nf,
                                                    moe_unit &lun)
{
  const int e = ring[l_unit & (HR__MOE_RING - 1)];
  if(e < 0)
    return 0;
  lun = unit_decode(e, rt, p, nf, C::BN, C::TT_MAJOR);
  return 1;
}

/* Thread 0, at step s >= 1: once every warp has released the slot step
 * s - 1 used, load the producer's next step (unit lun, K step l_kt) into
 * it and move the producer on. 0 when the wait timed out. */
template <class C, int STAGE, int G>
static __device__ __forceinline__ int tma_refill(const hr__moe_params &p, uint8_t *pipe,
                                                 uint64_t *full, uint64_t *empty, int s,
                                                 int slot, const moe_unit &lun, int nk,
                                                 int &l_kt, int &l_unit, const tma_posts &g)
{
  const int prev = slot == 0 ? C::STAGES - 1 : slot - 1;
  if(!mbar_wait(p, empty + prev, (unsigned)((s - 1) / C::STAGES) & 1u))
    return 0;
  tma_step_load<C, STAGE, G>(p, pipe, full, prev, lun, l_kt, tma_gather_req_at<C>(g, prev, s));
  if(++l_kt == nk) {
    l_kt = 0;
    l_unit++;
  }
  return 1;
}

/* Every thread, after a unit's last step: its results out, the
 * accumulators zeroed for the next. */
template <class C, int STAGE>
static __device__ __forceinline__ void tma_unit_end(const hr__moe_params &p, const moe_unit &un,
                                                    float (&acc)[C::MT][C::NT][4], uint8_t *pipe)
{
  tile_drain<C>(acc);
  tma_tile_store<C, STAGE>(p, un, acc, pipe);
  tile_zero<C>(acc);
}

/* Thread 0: the next unit of GEMM stage STAGE for this CTA, claimed from
 * the stage's counter (HR__MOE_RING units of look-ahead at most), or -1
 * when they are all taken. */
template <int STAGE>
static __device__ __forceinline__ int tma_claim(const hr__moe_params &p, int units, int units1)
{
  return moe_claim_unit((int)atomicAdd(&p.sync->claim[STAGE - 1], 1u), units, units1);
}

/* One GEMM stage of the barrier kernel on the TMA pipeline. The units are
 * claimed in order from a counter, not dealt round-robin as in
 * moe_gemm_stage: the units that share weight rows (an expert's token
 * tiles) sit a few apart in the order and must run at the same time to
 * share them in L2; a fixed deal lets the CTAs drift apart over the
 * stage's dozens of units, and then each reads the weights from memory
 * (DeepSeek-V3 T = 8192: 20 to 25 ms from run to run, against 16 to 17
 * for the agnostic kernel, which claims). Claims change only which CTA
 * computes a unit, never the unit's sums: y stays the same for every
 * grid.
 *
 * Thread 0 claims the unit two ahead of the one it starts loading and
 * places it in the ring at the next step; the warps read a unit's ring
 * entry at the end of the unit before, after waiting on a slot that
 * thread 0 filled (its arrive releases, their wait acquires) later than
 * it placed the entry. 1 when done; 0 when a wait timed out (the caller
 * records it; the stage's results are then garbage, and the launch
 * fails). Starts and ends with every thread together. */
template <class C, int STAGE, int G>
__device__ int moe_gemm_stage_tma_run(const hr__moe_params &p, const moe_route &rt,
                                      uint8_t *smem)
{
  const int tid = threadIdx.x;
  const moe_stage_dims d = moe_stage_dims_of<C, STAGE>(p, rt);
  const int nk = d.nk, nf = d.nf, units1 = d.units1, units = d.units;
  const auto [pipe, full, empty, ring] = tma_pipe_of<C>(smem);
  const tma_posts g = tma_posts_of<C>(pipe);   /* the gather's posts */
  float acc[C::MT][C::NT][4];
  moe_unit un, lun;                  /* the MMAs' unit; the producer's */
  int s, i, kt = 0, u = 0, slot = 0;
  int l_unit = 0, l_kt = 0, l_done = 0;  /* thread 0: the next step to load */
  int claim = -2, claim_pos = 0;     /* thread 0: a claim to place (-2: none) */
  int tok_pos0 = -1, tok = 0;        /* the gather: this thread's token */
  int dead = 0, ok, loaded;

  if(units == 0)
    return 1;
  if(tid == 0) {
    tma_barriers_init<C, STAGE, G>(full, empty, g);
    /* the inputs were written through the generic proxy (the x rows by
     * the route stage, h by GEMM1) and published by the grid barrier */
    fence_proxy_async_global();
    ring[0] = tma_claim<STAGE>(p, units, units1);
    ring[1] = ring[0] < 0 ? -1 : tma_claim<STAGE>(p, units, units1);
    /* Fill the pipeline: thread 0 loads the weights; then every thread
     * gathers the token rows of the steps it loaded. */
    for(i = 0; i < C::STAGES; i++) {
      if(l_kt == 0) {
        if(!tma_next_unit<C>(p, rt, ring, l_unit, nf, lun)) {
          l_done = 1;
          break;
        }
        ring[(l_unit + 2) & (HR__MOE_RING - 1)] =
            ring[(l_unit + 1) & (HR__MOE_RING - 1)] < 0 ? -1 : tma_claim<STAGE>(p, units, units1);
      }
      tma_step_load<C, STAGE, G>(p, pipe, full, i, lun, l_kt, tma_gather_req_at<C>(g, i, 0));
      if(++l_kt == nk) {
        l_kt = 0;
        l_unit++;
      }
    }
  }
  HR__SYNC();
  if(ring[0] < 0) {                  /* no unit left for this CTA */
    if(tid == 0)
      tma_barriers_inval<C, STAGE, G>(full, empty, g);
    return 1;
  }
  tma_gather_fill<C, STAGE, G>(p, pipe, full, g, tok_pos0, tok);

  un = unit_decode(ring[0], rt, p, nf, C::BN, C::TT_MAJOR);
  tile_zero<C>(acc);
  for(s = 0;; s++) {
    /* A wait that timed out leaves this thread dead: it waits no more
     * and loads nothing, but goes on through the unit's steps, so the
     * warps of a warpgroup never part at a wgmma (they read garbage; the
     * launch has failed). At the unit's end the whole CTA stops (below). */
    tma_step_mma<C, STAGE, G>(p, pipe, full, empty, s, slot, acc, un.nvalid, dead);
    if(tid == 0 && claim != -2) {
      ring[claim_pos & (HR__MOE_RING - 1)] = claim;
      claim = -2;
    }
    /* The producer refills the slot step s - 1 used with the next step
     * to load once every warp is done with it, and posts it; every thread
     * gathers the token rows of the step posted at s - 1. */
    loaded = 0;
    if(s > 0 && tid == 0 && !dead && !l_done && !tma_drop(p, s, nk)) {
      if(l_kt == 0) {
        if(!tma_next_unit<C>(p, rt, ring, l_unit, nf, lun)) {
          l_done = 1;
        } else {
          claim = ring[(l_unit + 1) & (HR__MOE_RING - 1)] < 0
                      ? -1 : tma_claim<STAGE>(p, units, units1);
          claim_pos = l_unit + 2;
        }
      }
      if(!l_done) {
        loaded = tma_refill<C, STAGE, G>(p, pipe, full, empty, s, slot, lun, nk, l_kt, l_unit, g);
        dead = !loaded;
      }
    }
    if(s > 0 && tid == 0)
      tma_gather_post<C, STAGE, G>(g, s, loaded);
    tma_gather_step<C, STAGE, G>(p, pipe, full, g, s, tok_pos0, tok, dead);
    if(++slot == C::STAGES)
      slot = 0;
    if(++kt == nk) {
      tma_unit_end<C, STAGE>(p, un, acc, pipe);
      kt = 0;
      u++;
      /* A dead thread 0 claims nothing more, so the ring never gets the
       * -1 that ends the run: the entries ahead are stale, and following
       * them the CTA would never leave (nor the kernel end, and the next
       * launch on the stream would wait behind it). So any dead thread
       * ends the run for the whole CTA here, between units, where the
       * MMAs are drained and every warp leaves together. */
      if(HR__SYNC_OR(dead) || ring[u & (HR__MOE_RING - 1)] < 0)
        break;
      un = unit_decode(ring[u & (HR__MOE_RING - 1)], rt, p, nf, C::BN, C::TT_MAJOR);
    }
  }
  /* As in moe_gemm_stage: the last step drained, but the compiler cannot
   * know it. Then the stores go out to the async proxy (GEMM2's TMA reads
   * h), and the barriers are put away for whatever uses the memory next
   * (not after a timeout: a load may still be in flight). */
  tile_drain<C>(acc);
  fence_proxy_async_global();
  ok = !HR__SYNC_OR(dead);
  if(tid == 0 && ok)
    tma_barriers_inval<C, STAGE, G>(full, empty, g);
  return ok;
}

/* The stage, in the instantiation for this launch: GEMM1 gathering its
 * token rows or not (moe_gather_on). */
template <class C, int STAGE>
__device__ int moe_gemm_stage_tma(const hr__moe_params &p, const moe_route &rt, uint8_t *smem)
{
  if constexpr(STAGE == 1)
    if(moe_gather_on(p))
      return moe_gemm_stage_tma_run<C, 1, 1>(p, rt, smem);
  return moe_gemm_stage_tma_run<C, STAGE, 0>(p, rt, smem);
}

#endif /* HR_MOE_GEMM_TMA_CUH */
