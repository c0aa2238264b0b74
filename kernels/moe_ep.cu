/*
 * moe_ep.cu: the expert-parallel forward, one persistent launch per rank
 * (headroom_moe.h, "expert parallel"):
 *
 *   A. dispatch   this rank's tokens to the ranks their experts live on:
 *                 each x row once per destination rank, into the region
 *                 of the destination's receive buffer kept for this rank,
 *                 with the token and its k local ids (-1: another rank's)
 *   -- grid barrier SENT, then a release flag in every rank --
 *   B. wait       for every rank's dispatch (bounded; peers' failures)
 *   C. route      the received rows: a single-GPU problem over E/R
 *                 experts (moe_route.cuh's tables, in region order)
 *   -- grid barrier ROUTE --
 *      GEMM1 + SwiGLU, GEMM2   (moe_stages.cuh: hr_moe_forward's tiles)
 *   -- grid barriers GEMM1, GEMM2 --
 *   D. return     each pair's output row to its source's buffer [t*k + j]
 *   -- grid barrier RETURNED, then a release flag in every rank --
 *   E. wait       for every rank's returns
 *   F. combine    moe_combine.cuh over this rank's tokens
 *
 * Every rank signals every rank (itself too, through the same path), so a
 * wait is for all nranks words whatever the routing. The flags are words
 * in the receiver's memory carrying the launch epoch (moe_ep.h), written
 * with st.release.sys after the rows and read with ld.acquire.sys before
 * them: correct across GPUs over NVLink and between kernels of one GPU.
 * Every wait is bounded by the launch's timeout, and a rank that fails
 * writes its fail word into every rank (ep_tell), which every wait polls:
 * every rank's launch ends with an error word, never a trap.
 */
#include "moe_ep_kernel.h"
#include "moe_host.h"

#include "moe_barrier.cuh"
#include "moe_combine.cuh"
#include "moe_ptx.cuh"
#include "moe_route.cuh"
#include "moe_stages.cuh"

#include "headroom_moe.h"

static_assert(sizeof(hr__moe_sync) + sizeof(hr__moe_ep_sync) <= 1024,
              "the workspace layout keeps 1024 bytes for them (moe_ep_plan.c)");
static_assert(HR__MOE_SMEM_BYTES + 128 <= 227 * 1024, "fits an SM, with the static part");
static_assert(HR_MOE_EP_MAX_RANKS <= 8, "a rank's destinations fit a byte of mask, "
                                        "a fail word's byte names a rank");

/* ---- system-scope words ------------------------------------------------- */

static __device__ __forceinline__ unsigned long long ep_ld_acquire_sys(const unsigned long long *p)
{
  unsigned long long v;
  asm volatile("ld.acquire.sys.global.u64 %0, [%1];\n" : "=l"(v) : "l"(p) : "memory");
  return v;
}

static __device__ __forceinline__ unsigned long long ep_ld_relaxed_sys(const unsigned long long *p)
{
  unsigned long long v;
  asm volatile("ld.relaxed.sys.global.u64 %0, [%1];\n" : "=l"(v) : "l"(p) : "memory");
  return v;
}

static __device__ __forceinline__ void ep_st_release_sys(unsigned long long *p,
                                                         unsigned long long v)
{
  asm volatile("st.release.sys.global.u64 [%0], %1;\n" ::"l"(p), "l"(v) : "memory");
}

static __device__ __forceinline__ void ep_st_relaxed_sys(unsigned long long *p,
                                                         unsigned long long v)
{
  asm volatile("st.relaxed.sys.global.u64 [%0], %1;\n" ::"l"(p), "l"(v) : "memory");
}

/* After a __syncthreads: what the CTA wrote (rows into peers' memory)
 * ordered before thread 0's arrival at the grid barrier, at system scope.
 * CTA 0's release of the flag past that barrier is then cumulative over
 * every CTA's rows (the gpu-scope barrier chain alone would be enough in
 * the PTX model; one fence a CTA a launch costs nothing beside it). */
static __device__ __forceinline__ void ep_fence_sys(void)
{
  asm volatile("fence.acq_rel.sys;\n" ::: "memory");
}

/* ---- where things are --------------------------------------------------- */

static __device__ __forceinline__ hr__moe_ep_flags *ep_flags(const hr__moe_ep_params &e, int r)
{
  return (hr__moe_ep_flags *)e.peer[r];      /* the block starts with them */
}

static __device__ __forceinline__ int32_t *ep_recv_ids(const hr__moe_ep_params &e, int r)
{
  return (int32_t *)(e.peer[r] + e.off_recv_ids);
}

static __device__ __forceinline__ int32_t *ep_recv_tok(const hr__moe_ep_params &e, int r)
{
  return (int32_t *)(e.peer[r] + e.off_recv_tok);
}

static __device__ __forceinline__ uint16_t *ep_recv_x(const hr__moe_ep_params &e, int r)
{
  return (uint16_t *)(e.peer[r] + e.off_recv_x);
}

static __device__ __forceinline__ uint16_t *ep_ret(const hr__moe_ep_params &e, int r)
{
  return (uint16_t *)(e.peer[r] + e.off_ret);
}

/* ---- failures ----------------------------------------------------------- */

/* This rank failed epoch seq on its own (a timeout, an abort, a stale
 * launch): its fail word into every rank, so that their waits end now
 * rather than at their own timeouts. Once a launch (esync->told). */
static __device__ __noinline__ void ep_tell(const hr__moe_ep_params &e, int code, int wait,
                                            int waited_for)
{
  const unsigned seq = e.p.seq;
  unsigned long long w;
  int r;
  if(atomicMax(&e.esync->told, seq) >= seq)
    return;
  w = HR__MOE_EP_FAIL_WORD(seq, code, wait, waited_for < 0 ? 0xff : waited_for);
  for(r = 0; r < e.nranks; r++)
    ep_st_relaxed_sys(&ep_flags(e, r)->fail[e.rank][0], w);
  ep_fence_sys();
}

/* Record this launch's failure at a wait for peers (or its start), unless
 * another CTA already recorded one: where this rank stopped (code, wait,
 * how many ranks had arrived of how many), then whose failure it is.
 * The EP fields first, the error word's seq last (moe_fail_at's order).
 * A failure of this rank's own is told to every rank. */
static __device__ __noinline__ void ep_fail(const hr__moe_ep_params &e, int code, int wait,
                                            int arrived, int frank, int fcode, int fwait,
                                            int waited_for)
{
  const hr__moe_params &p = e.p;
  hr__moe_ep_host_words *h = e.ehost;
  if(atomicMax(&p.sync->fail, p.seq) >= p.seq)
    return;
  h->failed_rank = frank;
  h->failed_code = fcode;
  h->failed_wait = fwait;
  h->waited_for = waited_for;
  h->w.code = code;
  h->w.barrier = wait;
  h->w.arrived = arrived;
  h->w.expected = e.nranks;
  h->w.sm = sm_id();
  h->w.cta = (int)blockIdx.x;
  __threadfence_system();
  h->w.seq = p.seq;
  __threadfence_system();
  if(code != HR__MOE_EP_FAIL_PEER)
    ep_tell(e, code, wait, waited_for);
}

/* The first peer that told a failure of this epoch (its word in *w), or
 * -1. One thread; the words are in this rank's own memory. */
static __device__ int ep_peer_failed(const hr__moe_ep_params &e, unsigned long long *w)
{
  hr__moe_ep_flags *f = ep_flags(e, e.rank);
  int r;
  for(r = 0; r < e.nranks; r++) {
    unsigned long long v;
    if(r == e.rank)
      continue;
    v = ep_ld_relaxed_sys(&f->fail[r][0]);
    if(HR__MOE_EP_FAIL_EPOCH(v) == e.p.seq) {
      *w = v;
      return r;
    }
  }
  return -1;
}

/* Stop because peer r (its word w) failed, noticed at `wait`. */
static __device__ __forceinline__ void ep_fail_peer(const hr__moe_ep_params &e, int wait,
                                                    int arrived, int r, unsigned long long w)
{
  ep_fail(e, HR__MOE_EP_FAIL_PEER, wait, arrived, r, HR__MOE_EP_FAIL_CODE(w),
          HR__MOE_EP_FAIL_WAIT(w), HR__MOE_EP_FAIL_WAITED(w));
}

/* A grid barrier or a TMA wait failed, recorded by moe_barrier.cuh's
 * moe_fail_at (which knows nothing of peers). Once the record is
 * complete (its seq, bounded: the recording CTA is running), tell the
 * peers where it is this rank's own failure; a failure at a wait for
 * peers was told by ep_fail already. Thread 0. */
static __device__ __noinline__ void ep_after_local_fail(const hr__moe_ep_params &e)
{
  const hr__moe_params &p = e.p;
  const unsigned long long t0 = global_timer_ns();
  int code, wait;
  while(e.ehost->w.seq != p.seq) {
    if(global_timer_ns() - t0 > p.timeout_ns)
      return;
    __nanosleep(256);
  }
  code = e.ehost->w.code;
  wait = e.ehost->w.barrier;
  if(code != HR__MOE_EP_FAIL_PEER && wait < HR_MOE_EP_WAIT_DISPATCH)
    ep_tell(e, code, wait < 0 ? HR_MOE_EP_WAIT_START : wait, -1);
}

/* hr_moe_forward's grid barrier, telling the peers when it fails. */
static __device__ __forceinline__ int ep_barrier(const hr__moe_ep_params &e, int barrier,
                                                 int *s_ok)
{
  if(grid_barrier(e.p, barrier, s_ok))
    return 1;
  if(threadIdx.x == 0)
    ep_after_local_fail(e);
  return 0;
}

/* Thread 0: wait until every rank's word (disp or ret, in this rank's
 * memory) carries this epoch; rows[r] gets the low half of disp words.
 * 1, or 0 when the launch failed: the timeout (recorded with the first
 * rank not heard from), an abort (CTA 0 reads the host's word, as a grid
 * barrier's first arrival does), a peer's fail word, or another CTA's
 * failure. */
static __device__ __noinline__ int ep_wait_all(const hr__moe_ep_params &e, int ret, int wait,
                                               int *rows)
{
  const hr__moe_params &p = e.p;
  hr__moe_ep_flags *f = ep_flags(e, e.rank);
  const unsigned all = (1u << e.nranks) - 1u;
  const unsigned long long t0 = global_timer_ns();
  unsigned got = 0, it;
  unsigned long long w;
  int r;

  for(it = 1;; it++) {
    for(r = 0; r < e.nranks; r++) {
      unsigned long long v;
      if((got >> r) & 1u)
        continue;
      v = ep_ld_acquire_sys(ret ? &f->ret[r][0] : &f->disp[r][0]);
      if((unsigned)(v >> 32) == p.seq) {
        got |= 1u << r;
        if(rows)
          rows[r] = (int)(unsigned)(v & 0xffffffffu);
      }
    }
    if(got == all)
      return 1;
    if((it & 7) != 0) {
      __nanosleep(64);
      continue;
    }
    if(moe_failed(p))
      return 0;
    r = ep_peer_failed(e, &w);
    if(r >= 0) {
      ep_fail_peer(e, wait, __popc(got), r, w);
      return 0;
    }
    if(global_timer_ns() - t0 > p.timeout_ns) {
      const int missing = __ffs(~got & all) - 1;
      ep_fail(e, HR__MOE_FAIL_TIMEOUT, wait, __popc(got), e.rank, HR__MOE_FAIL_TIMEOUT, wait,
              missing);
      return 0;
    }
    if(blockIdx.x == 0 && (it & HR__MOE_ABORT_POLL_MASK) == 0 &&
       ld_relaxed_sys(&p.host->abort_seq) >= p.seq) {
      ep_fail(e, HR__MOE_FAIL_ABORT, wait, __popc(got), e.rank, HR__MOE_FAIL_ABORT, wait, -1);
      return 0;
    }
  }
}

/* ---- A. dispatch -------------------------------------------------------- */

/* The destination ranks token t needs: bit d for rank d. */
static __device__ __forceinline__ unsigned ep_mask(const hr__moe_ep_params &e, int t)
{
  const int k = e.p.k, el = e.p.E, E = el * e.nranks;
  unsigned m = 0;
  int j;
  for(j = 0; j < k; j++) {
    const int id = __ldg(e.ids + (size_t)t * k + j);
    if((unsigned)id < (unsigned)E)
      m |= 1u << (id / el);
  }
  return m;
}

/* The dispatch's scratch, in the dynamic shared memory (the GEMMs' part,
 * unused until GEMM1): ints. */
enum {
  EP_SC_MASK = 0,                                 /* [256] tokens' masks */
  EP_SC_ROW = EP_SC_MASK + HR__MOE_THREADS,       /* [256][8] their rows */
  EP_SC_WSUM = EP_SC_ROW + HR__MOE_THREADS * 8,   /* [8 ranks][8 warps] */
  EP_SC_BASE = EP_SC_WSUM + 64,                   /* [8] next row per rank */
  EP_SC_TOT = EP_SC_BASE + 8,                     /* [8] rows per rank */
  EP_SC_INTS = EP_SC_TOT + 8
};

/* This CTA's slice of the tokens [tlo, thi) to every rank that needs them.
 * A token's row in destination d's region is its rank among the tokens
 * (in order) that go to d: the rows before the slice, counted over the
 * whole table by every CTA (no barrier), then a block scan per chunk of
 * 256 tokens. Also this rank's own pairs' positions for the combine
 * (src_pos). Leaves sc[EP_SC_TOT + d] = rows to rank d, whole table. */
static __device__ void ep_dispatch(const hr__moe_ep_params &e, int *sc)
{
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int R = e.nranks, T = e.T, k = e.p.k, H = e.p.H, el = e.p.E;
  const int tlo = (int)((long long)T * blockIdx.x / gridDim.x);
  const int thi = (int)((long long)T * (blockIdx.x + 1) / gridDim.x);
  const unsigned below = (1u << lane) - 1u;
  int t0, d;

  if(tid < 8) {
    sc[EP_SC_BASE + tid] = 0;
    sc[EP_SC_TOT + tid] = 0;
  }
  __syncthreads();
  /* Count: rows to each rank before the slice (the slice's first rows)
   * and in all, a warp's 32 tokens at a time. */
  for(t0 = warp * 32; t0 < T; t0 += HR__MOE_THREADS) {
    const int t = t0 + lane;
    const unsigned m = t < T ? ep_mask(e, t) : 0u;
#pragma unroll
    for(d = 0; d < HR_MOE_EP_MAX_RANKS; d++) {
      const unsigned b = __ballot_sync(0xffffffffu, (m >> d) & 1u);
      const unsigned bp = __ballot_sync(0xffffffffu, ((m >> d) & 1u) && t < tlo);
      if(d < R && lane == 0 && b) {
        atomicAdd(&sc[EP_SC_TOT + d], __popc(b));
        if(bp)
          atomicAdd(&sc[EP_SC_BASE + d], __popc(bp));
      }
    }
  }
  __syncthreads();

  /* Place the slice, 256 tokens a chunk: each token's row per rank by a
   * block scan, its metadata by its thread, its x row by a warp (read
   * once, stored to each rank it goes to). */
  for(t0 = tlo; t0 < thi; t0 += HR__MOE_THREADS) {
    const int t = t0 + tid;
    const unsigned m = t < thi ? ep_mask(e, t) : 0u;
    int i;
#pragma unroll
    for(d = 0; d < HR_MOE_EP_MAX_RANKS; d++) {
      const unsigned b = __ballot_sync(0xffffffffu, (m >> d) & 1u);
      if(lane == 0)
        sc[EP_SC_WSUM + d * 8 + warp] = __popc(b);
    }
    __syncthreads();
#pragma unroll
    for(d = 0; d < HR_MOE_EP_MAX_RANKS; d++) {
      const unsigned b = __ballot_sync(0xffffffffu, (m >> d) & 1u);
      int row = sc[EP_SC_BASE + d] + __popc(b & below), w;
      for(w = 0; w < warp; w++)
        row += sc[EP_SC_WSUM + d * 8 + w];
      sc[EP_SC_ROW + tid * 8 + d] = row;
    }
    sc[EP_SC_MASK + tid] = (int)m;
    __syncthreads();
    if(tid < R) {                      /* every thread has read the bases */
      int w, n = 0;
      for(w = 0; w < HR__MOE_THREADS / 32; w++)
        n += sc[EP_SC_WSUM + tid * 8 + w];
      sc[EP_SC_BASE + tid] += n;
    }
    /* The token's metadata in each destination, and its own pairs'
     * places in the returned rows. */
    if(t < thi) {
      int j;
      for(j = 0; j < k; j++) {
        const int id = __ldg(e.ids + (size_t)t * k + j);
        e.src_pos[(size_t)t * k + j] = (unsigned)id < (unsigned)(el * R) ? t * k + j : -1;
      }
      for(d = 0; d < R; d++) {
        if(!((m >> d) & 1u))
          continue;
        const size_t row = (size_t)e.rank * e.cap + sc[EP_SC_ROW + tid * 8 + d];
        int32_t *ids = ep_recv_ids(e, d) + row * k;
        ep_recv_tok(e, d)[row] = t;
        for(j = 0; j < k; j++) {
          const int id = __ldg(e.ids + (size_t)t * k + j);
          ids[j] = (unsigned)id < (unsigned)(el * R) && id / el == d ? id - d * el : -1;
        }
      }
    }
    /* The x rows, a warp a token. */
    for(i = warp; i < HR__MOE_THREADS && t0 + i < thi; i += HR__MOE_THREADS / 32) {
      const unsigned mi = (unsigned)sc[EP_SC_MASK + i];
      const uint4 *src = (const uint4 *)(e.x + (size_t)(t0 + i) * H);
      int c;
      if(!mi)
        continue;
      for(c = lane; c < H / 8; c += 32) {
        const uint4 v = __ldg(src + c);
        for(d = 0; d < R; d++) {
          if(!((mi >> d) & 1u))
            continue;
          const size_t row = (size_t)e.rank * e.cap + sc[EP_SC_ROW + i * 8 + d];
          ((uint4 *)(ep_recv_x(e, d) + row * H))[c] = v;
        }
      }
    }
    __syncthreads();
  }
}

/* ---- C. route the received rows ----------------------------------------- */

/* moe_route_place, reading the ids with ld.global.cg: they were written
 * by peers during this launch, so never through the non-coherent path
 * (__ldg), which may keep a line of an earlier launch. Pairs [lo, hi) of
 * the received table (physical indices); the same stable layout. Ends
 * with __syncthreads. */
static __device__ void ep_route_place(const hr__moe_params &p, int *cursor, int lo, int hi)
{
  const int tid = threadIdx.x, lane = tid & 31, E = p.E;
  if(tid < 32) {
    int base;
    for(base = lo; base < hi; base += 32) {
      const int pi = base + lane;
      const int id = pi < hi ? __ldcg(p.ids + pi) : -1;
      const int e = (unsigned)id < (unsigned)E ? id : -1;
      const unsigned peers = __match_any_sync(0xffffffffu, e);
      if(e >= 0) {
        const int pos = cursor[e] + __popc(peers & ((1u << lane) - 1u));
        p.sorted_tok[pos] = pi / p.k;      /* the received row */
        p.pos_of[pi] = pos;
      } else if(pi < hi) {
        p.pos_of[pi] = -1;
      }
      __syncwarp();
      if(e >= 0 && lane == 31 - __clz(peers))
        cursor[e] += __popc(peers);
      __syncwarp();
    }
  }
  __syncthreads();
}

/* The received pairs as one sequence c = 0 .. P-1 in region order (source
 * 0's n_0 k pairs, then source 1's, ...): cs[s] where region s starts in
 * it, cs[R] = P. Physical index of c in region s: s cap k + c - cs[s]. */
static __device__ __forceinline__ int ep_phys(const hr__moe_ep_params &e, const int *cs, int s,
                                              int c)
{
  return s * e.cap * e.p.k + (c - cs[s]);
}

/* Count every received pair per local expert (rt.cnt; rt.pre: those
 * before c = lo), scan, and place pairs [lo, hi) of the sequence:
 * moe_route_pairs over the regions. Ends with __syncthreads. */
static __device__ void ep_route(const hr__moe_ep_params &e, const moe_route &rt, int *warp_sums,
                                const int *cs, int lo, int hi)
{
  const hr__moe_params &p = e.p;
  const int tid = threadIdx.x, E = p.E;
  int i, s;

  for(i = tid; i < E; i += HR__MOE_THREADS) {
    rt.cnt[i] = 0;
    rt.pre[i] = 0;
  }
  __syncthreads();
  for(s = 0; s < e.nranks; s++) {
    const int n = cs[s + 1] - cs[s];
    const int32_t *ids = p.ids + ep_phys(e, cs, s, cs[s]);
    for(i = tid; i < n; i += HR__MOE_THREADS) {
      const int id = __ldcg(ids + i);
      if((unsigned)id < (unsigned)E) {
        atomicAdd(&rt.cnt[id], 1);
        if(cs[s] + i < lo)
          atomicAdd(&rt.pre[id], 1);
      }
    }
  }
  __syncthreads();
  block_exclusive_scan(rt.cnt, E, rt.off, warp_sums);
  for(i = tid; i < E; i += HR__MOE_THREADS)
    rt.pre[i] += rt.off[i];
  __syncthreads();
  for(s = 0; s < e.nranks; s++) {
    const int a = max(lo, cs[s]), b = min(hi, cs[s + 1]);
    if(a < b)                                    /* the same in every thread */
      ep_route_place(p, rt.pre, ep_phys(e, cs, s, a), ep_phys(e, cs, s, b));
  }
}

/* moe_copy_xs for the big TMA tile without the gather, over this CTA's
 * pieces: the received x rows (written by peers: .cg) to xs[pos]. */
static __device__ void ep_copy_xs(const hr__moe_ep_params &e, const int *cs, int lo, int hi)
{
  const hr__moe_params &p = e.p;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, chunks = p.H / 8;
  int s, c, ch;
  for(s = 0; s < e.nranks; s++) {
    const int a = max(lo, cs[s]), b = min(hi, cs[s + 1]);
    for(c = a + warp; c < b; c += HR__MOE_THREADS / 32) {
      const int pi = ep_phys(e, cs, s, c);
      const int pos = __ldcg(p.pos_of + pi);
      const uint4 *src = (const uint4 *)(p.x + (size_t)(pi / p.k) * p.H);
      uint4 *dst = (uint4 *)(p.ypair + (size_t)pos * p.H);
      if(pos < 0)
        continue;
      for(ch = lane; ch < chunks; ch += 32)
        dst[ch] = __ldcg(src + ch);
    }
  }
  fence_proxy_async_global();
}

/* ---- D. return ---------------------------------------------------------- */

/* Every received pair's output row to its source's ret[t k + j], a warp a
 * pair, the pairs dealt over the grid's warps. */
static __device__ void ep_return(const hr__moe_ep_params &e, const int *cs)
{
  const hr__moe_params &p = e.p;
  const int lane = threadIdx.x & 31, k = p.k, chunks = p.H / 8;
  const int warps = (int)gridDim.x * (HR__MOE_THREADS / 32);
  const int32_t *rtok = ep_recv_tok(e, e.rank);
  int c, s = 0, ch;
  for(c = (int)blockIdx.x * (HR__MOE_THREADS / 32) + (int)(threadIdx.x >> 5); c < cs[e.nranks];
      c += warps) {
    while(c >= cs[s + 1])                          /* c grows: s only moves on */
      s++;
    const int pi = ep_phys(e, cs, s, c);
    const int id = __ldcg(p.ids + pi);
    const int pos = __ldcg(p.pos_of + pi);
    const int t = __ldcg(rtok + pi / k);
    if((unsigned)id >= (unsigned)p.E || pos < 0 || (unsigned)t >= (unsigned)e.cap)
      continue;                                    /* another rank's slot */
    const uint4 *src = (const uint4 *)(p.ypair + (size_t)pos * p.H);
    uint4 *dst = (uint4 *)(ep_ret(e, s) + ((size_t)t * k + pi % k) * p.H);
    for(ch = lane; ch < chunks; ch += 32)
      dst[ch] = __ldcg(src + ch);
  }
}

/* ---- F. combine --------------------------------------------------------- */

/* moe_kernel.cu's combine over this rank's T tokens, from the returned
 * rows: ret[t k + j] where slot j's id is valid (src_pos). */
static __device__ void ep_combine(const hr__moe_ep_params &e)
{
  moe_comb a;
  a.pos_of = e.src_pos;
  a.wts = e.wts;
  a.ypair = ep_ret(e, e.rank);
  a.y = e.y;
  a.k = e.p.k;
  a.H = e.p.H;
  moe_combine_grid(a, e.T);
}

/* ---- the kernel --------------------------------------------------------- */

__global__ void __launch_bounds__(HR__MOE_THREADS, 1)
hr__moe_ep_kernel(const __grid_constant__ hr__moe_ep_params e)
{
  extern __shared__ __align__(128) uint8_t smem[];
  __shared__ int s_ok;
  __shared__ int s_warp_sums[HR__MOE_THREADS / 32];
  __shared__ int s_nonempty;
  __shared__ int s_cs[HR_MOE_EP_MAX_RANKS + 1];
  const hr__moe_params &p = e.p;
  int *route_ints = (int *)(smem + HR__MOE_GEMM_SMEM);
  int *sc = (int *)smem;
  moe_route rt;
  int tile, i;

  rt.cnt = route_ints;
  rt.pre = route_ints + HR__MOE_ROUTE_INTS;
  rt.off = route_ints + 2 * HR__MOE_ROUTE_INTS;
  rt.tile_off = route_ints + 3 * HR__MOE_ROUTE_INTS;

  /* As hr_moe_forward's kernel: leave when this launch already failed, or
   * an earlier one left the barrier words dirty (STALE, told to the
   * peers, who wait for this rank otherwise); and when a peer already
   * failed this epoch (this rank was launched late): its rows would only
   * land in buffers nobody reads this epoch. */
  if(threadIdx.x == 0) {
    const unsigned fail = ld_relaxed_gpu(&p.sync->fail);
    unsigned long long w;
    int r;
    s_ok = fail == 0;
    s_nonempty = 0;
    if(fail != 0 && fail != p.seq) {
      moe_fail(p, HR__MOE_FAIL_STALE, -1, 0);
      ep_tell(e, HR__MOE_FAIL_STALE, HR_MOE_EP_WAIT_START, -1);
    } else if(fail == 0 && (r = ep_peer_failed(e, &w)) >= 0) {
      ep_fail_peer(e, HR_MOE_EP_WAIT_START, 0, r, w);
      s_ok = 0;
    }
  }
  __syncthreads();
  if(!s_ok)
    return;

  /* A. dispatch, then (past the barrier: every CTA's rows sent) CTA 0
   * tells each rank how many rows it has from this one. */
  if(e.T > 0)
    ep_dispatch(e, sc);
  else if(threadIdx.x < 8)
    sc[EP_SC_TOT + threadIdx.x] = 0;
  __syncthreads();
  if(threadIdx.x == 0)
    ep_fence_sys();
  if(!ep_barrier(e, HR_MOE_EP_WAIT_SENT, &s_ok))
    return;
  if(blockIdx.x == 0 && threadIdx.x == 0)
    for(i = 0; i < e.nranks; i++)
      ep_st_release_sys(&ep_flags(e, i)->disp[e.rank][0],
                        ((unsigned long long)p.seq << 32) | (unsigned)sc[EP_SC_TOT + i]);

  /* B. every rank's rows here (s_cs: the rows, then their scan) */
  if(threadIdx.x == 0) {
    s_ok = ep_wait_all(e, 0, HR_MOE_EP_WAIT_DISPATCH, s_cs + 1);
    if(s_ok) {
      s_cs[0] = 0;
      for(i = 0; i < e.nranks; i++)      /* a peer's count is at most a region */
        s_cs[i + 1] = s_cs[i] + min(max(s_cs[i + 1], 0), e.cap) * p.k;
    }
  }
  __syncthreads();
  if(!s_ok)
    return;

  /* C. route the received pairs: this CTA's slice of the sequence */
  const int pairs = s_cs[e.nranks];
  const int lo = (int)((long long)pairs * blockIdx.x / gridDim.x);
  const int hi = (int)((long long)pairs * (blockIdx.x + 1) / gridDim.x);
  ep_route(e, rt, s_warp_sums, s_cs, lo, hi);
  for(i = threadIdx.x; i < p.E; i += HR__MOE_THREADS)
    if(rt.cnt[i] > 0)
      atomicAdd(&s_nonempty, 1);
  __syncthreads();
  tile = moe_pick_tile(rt.off[p.E], s_nonempty, p.I, p.flags, 0);
  moe_route_tiles(p, rt, moe_tile_bn(tile), s_warp_sums);
  if(moe_tile_copies_xs(p, tile))
    ep_copy_xs(e, s_cs, lo, hi);
  if(!ep_barrier(e, HR_MOE_EP_WAIT_ROUTE, &s_ok))
    return;

  /* GEMM1 + SwiGLU, GEMM2: hr_moe_forward's stages over the local problem */
  if(!moe_gemm<1>(p, rt, smem, tile)) {
    if(threadIdx.x == 0)
      ep_after_local_fail(e);
    return;
  }
  if(!ep_barrier(e, HR_MOE_EP_WAIT_GEMM1, &s_ok))
    return;
  moe_claims_reset(p, 1);
  if(!moe_gemm<2>(p, rt, smem, tile)) {
    if(threadIdx.x == 0)
      ep_after_local_fail(e);
    return;
  }
  if(!ep_barrier(e, HR_MOE_EP_WAIT_GEMM2, &s_ok))
    return;
  moe_claims_reset(p, 2);

  /* D. the rows back to their sources, unless a peer failed meanwhile
   * (its epoch is lost; no rows into buffers nobody reads this epoch);
   * then CTA 0 tells every rank. */
  if(threadIdx.x == 0) {
    unsigned long long w;
    const int r = ep_peer_failed(e, &w);
    s_ok = r < 0;
    if(!s_ok)
      ep_fail_peer(e, HR_MOE_EP_WAIT_RETURN, 0, r, w);
  }
  __syncthreads();
  if(!s_ok)
    return;
  ep_return(e, s_cs);
  __syncthreads();
  if(threadIdx.x == 0)
    ep_fence_sys();
  if(!ep_barrier(e, HR_MOE_EP_WAIT_RETURNED, &s_ok))
    return;
  if(blockIdx.x == 0 && threadIdx.x == 0)
    for(i = 0; i < e.nranks; i++)
      ep_st_release_sys(&ep_flags(e, i)->ret[e.rank][0], (unsigned long long)p.seq << 32);

  /* E. every rank's rows back here; F. the combine */
  if(threadIdx.x == 0)
    s_ok = ep_wait_all(e, 1, HR_MOE_EP_WAIT_RETURN, NULL);
  __syncthreads();
  if(!s_ok)
    return;
  if(e.T > 0)
    ep_combine(e);
}

extern "C" cudaError_t hr__moe_ep_prepare(void)
{
  return cudaFuncSetAttribute(hr__moe_ep_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                              HR__MOE_SMEM_BYTES);
}

extern "C" cudaError_t hr__moe_ep_launch(const hr__moe_ep_params *e, int grid, int coop,
                                         int cluster, cudaStream_t stream)
{
  cudaLaunchConfig_t cfg;
  cudaLaunchAttribute attr[2];

  hr__moe_launch_config(&cfg, attr, grid, HR__MOE_THREADS, HR__MOE_SMEM_BYTES, coop, cluster,
                        stream);
  return cudaLaunchKernelEx(&cfg, hr__moe_ep_kernel, *e);
}
