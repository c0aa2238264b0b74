/*
 * moe_ep_comm.cuh: what the expert-parallel kernels share (the forward,
 * moe_ep.cu; the backward, moe_ep_backward.cu): the system-scope flag
 * words, where things are in a rank's peer-visible block, the failures
 * every peer hears of, the bounded waits for peers, the dispatch of this
 * rank's tokens, the route of the received rows and the return of each
 * received pair's row to its source.
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
#ifndef HR_MOE_EP_COMM_CUH
#define HR_MOE_EP_COMM_CUH

#include "moe_ep_kernel.h"

#include "moe_barrier.cuh"
#include "moe_ptx.cuh"
#include "moe_route.cuh"

#include "headroom_moe.h"

static_assert(sizeof(hr__moe_sync) + sizeof(hr__moe_ep_sync) <= 1024,
              "the workspace layout keeps 1024 bytes for them (moe_ep_plan.c)");
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

static __device__ __forceinline__ hr__moe_ep_flags *ep_flags(const hr__moe_ep_group &e, int r)
{
  return (hr__moe_ep_flags *)e.peer[r];      /* the block starts with them */
}

static __device__ __forceinline__ int32_t *ep_recv_ids(const hr__moe_ep_group &e, int r)
{
  return (int32_t *)(e.peer[r] + e.off_recv_ids);
}

static __device__ __forceinline__ int32_t *ep_recv_tok(const hr__moe_ep_group &e, int r)
{
  return (int32_t *)(e.peer[r] + e.off_recv_tok);
}

static __device__ __forceinline__ uint16_t *ep_recv_x(const hr__moe_ep_group &e, int r)
{
  return (uint16_t *)(e.peer[r] + e.off_recv_x);
}

static __device__ __forceinline__ uint16_t *ep_ret(const hr__moe_ep_group &e, int r)
{
  return (uint16_t *)(e.peer[r] + e.off_ret);
}

/* The backward's: the received rows' weights [rows][k] (0 for another
 * rank's slot) and dy rows [rows][H], and the d(w) of this rank's own
 * pairs [max_tokens * k], returned. */
static __device__ __forceinline__ float *ep_recv_w(const hr__moe_ep_group &e, int r)
{
  return (float *)(e.peer[r] + e.off_recv_w);
}

static __device__ __forceinline__ uint16_t *ep_recv_dy(const hr__moe_ep_group &e, int r)
{
  return (uint16_t *)(e.peer[r] + e.off_recv_dy);
}

static __device__ __forceinline__ float *ep_ret_dw(const hr__moe_ep_group &e, int r)
{
  return (float *)(e.peer[r] + e.off_ret_dw);
}

/* ---- failures ----------------------------------------------------------- */

/* This rank failed epoch seq on its own (a timeout, an abort, a stale
 * launch): its fail word into every rank, so that their waits end now
 * rather than at their own timeouts. Once a launch (esync->told). */
static __device__ __noinline__ void ep_tell(const hr__moe_params &p, const hr__moe_ep_group &e, int code, int wait,
                                            int waited_for)
{
  const unsigned seq = p.seq;
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
static __device__ __noinline__ void ep_fail(const hr__moe_params &p, const hr__moe_ep_group &e, int code, int wait,
                                            int arrived, int frank, int fcode, int fwait,
                                            int waited_for)
{
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
    ep_tell(p, e, code, wait, waited_for);
}

/* The first peer that told a failure of this epoch (its word in *w), or
 * -1. One thread; the words are in this rank's own memory. */
static __device__ int ep_peer_failed(const hr__moe_params &p, const hr__moe_ep_group &e, unsigned long long *w)
{
  hr__moe_ep_flags *f = ep_flags(e, e.rank);
  int r;
  for(r = 0; r < e.nranks; r++) {
    unsigned long long v;
    if(r == e.rank)
      continue;
    v = ep_ld_relaxed_sys(&f->fail[r][0]);
    if(HR__MOE_EP_FAIL_EPOCH(v) == p.seq) {
      *w = v;
      return r;
    }
  }
  return -1;
}

/* Stop because peer r (its word w) failed, noticed at `wait`. */
static __device__ __forceinline__ void ep_fail_peer(const hr__moe_params &p, const hr__moe_ep_group &e, int wait,
                                                    int arrived, int r, unsigned long long w)
{
  ep_fail(p, e, HR__MOE_EP_FAIL_PEER, wait, arrived, r, HR__MOE_EP_FAIL_CODE(w),
          HR__MOE_EP_FAIL_WAIT(w), HR__MOE_EP_FAIL_WAITED(w));
}

/* A grid barrier or a TMA wait failed, recorded by moe_barrier.cuh's
 * moe_fail_at (which knows nothing of peers). Once the record is
 * complete (its seq, bounded: the recording CTA is running), tell the
 * peers where it is this rank's own failure; a failure at a wait for
 * peers was told by ep_fail already. Thread 0. */
static __device__ __noinline__ void ep_after_local_fail(const hr__moe_params &p, const hr__moe_ep_group &e)
{
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
    ep_tell(p, e, code, wait < 0 ? HR_MOE_EP_WAIT_START : wait, -1);
}

/* hr_moe_forward's grid barrier, telling the peers when it fails. */
static __device__ __forceinline__ int ep_barrier(const hr__moe_params &p, const hr__moe_ep_group &e, int barrier,
                                                 int *s_ok)
{
  if(grid_barrier(p, barrier, s_ok))
    return 1;
  if(threadIdx.x == 0)
    ep_after_local_fail(p, e);
  return 0;
}

/* Thread 0: wait until every rank's word (disp or ret, in this rank's
 * memory) carries this epoch; rows[r] gets the low half of disp words.
 * 1, or 0 when the launch failed: the timeout (recorded with the first
 * rank not heard from), an abort (CTA 0 reads the host's word, as a grid
 * barrier's first arrival does), a peer's fail word, or another CTA's
 * failure. */
static __device__ __noinline__ int ep_wait_all(const hr__moe_params &p, const hr__moe_ep_group &e, int ret, int wait,
                                               int *rows)
{
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
    r = ep_peer_failed(p, e, &w);
    if(r >= 0) {
      ep_fail_peer(p, e, wait, __popc(got), r, w);
      return 0;
    }
    if(global_timer_ns() - t0 > p.timeout_ns) {
      const int missing = __ffs(~got & all) - 1;
      ep_fail(p, e, HR__MOE_FAIL_TIMEOUT, wait, __popc(got), e.rank, HR__MOE_FAIL_TIMEOUT, wait,
              missing);
      return 0;
    }
    if(blockIdx.x == 0 && (it & HR__MOE_ABORT_POLL_MASK) == 0 &&
       ld_relaxed_sys(&p.host->abort_seq) >= p.seq) {
      ep_fail(p, e, HR__MOE_FAIL_ABORT, wait, __popc(got), e.rank, HR__MOE_FAIL_ABORT, wait, -1);
      return 0;
    }
  }
}

/* ---- A. dispatch -------------------------------------------------------- */

/* The destination ranks token t needs: bit d for rank d. */
static __device__ __forceinline__ unsigned ep_mask(const hr__moe_params &p, const hr__moe_ep_group &e, int t)
{
  const int k = p.k, el = p.E, E = el * e.nranks;
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

/* Rows [t0, min(t0 + 256, thi)) of `rows` ([T][H], this rank's tokens:
 * x, or dy in the backward), a warp a token, each read once and stored
 * to every rank it goes to, at `off` in that rank's block: the places
 * ep_dispatch put in sc. */
static __device__ __forceinline__ void ep_send_rows(const hr__moe_ep_group &e, const int *sc,
                                                    int t0, int thi, const uint16_t *rows,
                                                    unsigned long long off, int H)
{
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  int i, c, d;
  for(i = warp; i < HR__MOE_THREADS && t0 + i < thi; i += HR__MOE_THREADS / 32) {
    const unsigned mi = (unsigned)sc[EP_SC_MASK + i];
    const uint4 *src = (const uint4 *)(rows + (size_t)(t0 + i) * H);
    if(!mi)
      continue;
    for(c = lane; c < H / 8; c += 32) {
      const uint4 v = __ldg(src + c);
      for(d = 0; d < e.nranks; d++) {
        if(!((mi >> d) & 1u))
          continue;
        const size_t row = (size_t)e.rank * e.cap + sc[EP_SC_ROW + i * 8 + d];
        ((uint4 *)(e.peer[d] + off) + row * (H / 8))[c] = v;
      }
    }
  }
}

/* This CTA's slice of the tokens [tlo, thi) to every rank that needs them.
 * A token's row in destination d's region is its rank among the tokens
 * (in order) that go to d: the rows before the slice, counted over the
 * whole table by every CTA (no barrier), then a block scan per chunk of
 * 256 tokens. Also this rank's own pairs' positions for the combine
 * (src_pos). Leaves sc[EP_SC_TOT + d] = rows to rank d, whole table.
 * In a backward (e.dy) the dy rows go too, and the local slots' weights. */
static __device__ void ep_dispatch(const hr__moe_params &p, const hr__moe_ep_group &e, int *sc)
{
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int R = e.nranks, T = e.T, k = p.k, H = p.H, el = p.E;
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
    const unsigned m = t < T ? ep_mask(p, e, t) : 0u;
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
    const unsigned m = t < thi ? ep_mask(p, e, t) : 0u;
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
        if(e.dy) {                     /* the backward: the local slots' weights */
          float *w = ep_recv_w(e, d) + row * k;
          for(j = 0; j < k; j++)
            w[j] = ids[j] >= 0 ? __ldg(e.wts + (size_t)t * k + j) : 0.0f;
        }
      }
    }
    ep_send_rows(e, sc, t0, thi, e.x, e.off_recv_x, H);
    if(e.dy)
      ep_send_rows(e, sc, t0, thi, e.dy, e.off_recv_dy, H);
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
static __device__ __forceinline__ int ep_phys(const hr__moe_params &p, const hr__moe_ep_group &e, const int *cs, int s,
                                              int c)
{
  return s * e.cap * p.k + (c - cs[s]);
}

/* Count every received pair per local expert (rt.cnt; rt.pre: those
 * before c = lo), scan, and place pairs [lo, hi) of the sequence:
 * moe_route_pairs over the regions. Ends with __syncthreads. */
static __device__ void ep_route(const hr__moe_params &p, const hr__moe_ep_group &e, const moe_route &rt, int *warp_sums,
                                const int *cs, int lo, int hi)
{
  const int tid = threadIdx.x, E = p.E;
  int i, s;

  for(i = tid; i < E; i += HR__MOE_THREADS) {
    rt.cnt[i] = 0;
    rt.pre[i] = 0;
  }
  __syncthreads();
  for(s = 0; s < e.nranks; s++) {
    const int n = cs[s + 1] - cs[s];
    const int32_t *ids = p.ids + ep_phys(p, e, cs, s, cs[s]);
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
      ep_route_place(p, rt.pre, ep_phys(p, e, cs, s, a), ep_phys(p, e, cs, s, b));
  }
}

/* ---- D. return ---------------------------------------------------------- */

/* Every received pair's row (rows[pos]: the forward's output row, the
 * backward's dx row) to its source's ret[t k + j], a warp a pair, the
 * pairs dealt over the grid's warps. With dwp (the backward) also the
 * pair's d(w): the sum of its ni partials in order, to ret_dw[t k + j]. */
static __device__ void ep_return(const hr__moe_params &p, const hr__moe_ep_group &e, const int *cs,
                                 const uint16_t *rows, const float *dwp, int ni)
{
  const int lane = threadIdx.x & 31, k = p.k, chunks = p.H / 8;
  const int warps = (int)gridDim.x * (HR__MOE_THREADS / 32);
  const int32_t *rtok = ep_recv_tok(e, e.rank);
  int c, s = 0, ch;
  for(c = (int)blockIdx.x * (HR__MOE_THREADS / 32) + (int)(threadIdx.x >> 5); c < cs[e.nranks];
      c += warps) {
    while(c >= cs[s + 1])                          /* c grows: s only moves on */
      s++;
    const int pi = ep_phys(p, e, cs, s, c);
    const int id = __ldcg(p.ids + pi);
    const int pos = __ldcg(p.pos_of + pi);
    const int t = __ldcg(rtok + pi / k);
    if((unsigned)id >= (unsigned)p.E || pos < 0 || (unsigned)t >= (unsigned)e.cap)
      continue;                                    /* another rank's slot */
    const size_t slot = (size_t)t * k + pi % k;
    const uint4 *src = (const uint4 *)(rows + (size_t)pos * p.H);
    uint4 *dst = (uint4 *)(ep_ret(e, s) + slot * p.H);
    for(ch = lane; ch < chunks; ch += 32)
      dst[ch] = __ldcg(src + ch);
    if(dwp && lane == 0) {
      float sum = 0.0f;
      for(int it = 0; it < ni; it++)
        sum += __ldcg(dwp + (size_t)pos * ni + it);
      ep_ret_dw(e, s)[slot] = sum;
    }
  }
}

/* ---- the kernels' start ---------------------------------------------------- */

/* Thread 0, at a launch's start: 1 to go on. 0 when this launch already
 * failed, or an earlier one left the barrier words dirty (STALE, told to
 * the peers, who wait for this rank otherwise), or a peer already failed
 * this epoch (this rank was launched late: its rows would only land in
 * buffers nobody reads this epoch). */
static __device__ __noinline__ int ep_start_ok(const hr__moe_params &p, const hr__moe_ep_group &e)
{
  const unsigned fail = ld_relaxed_gpu(&p.sync->fail);
  unsigned long long w;
  int r;
  if(fail != 0 && fail != p.seq) {
    moe_fail(p, HR__MOE_FAIL_STALE, -1, 0);
    ep_tell(p, e, HR__MOE_FAIL_STALE, HR_MOE_EP_WAIT_START, -1);
    return 0;
  }
  if(fail == 0 && (r = ep_peer_failed(p, e, &w)) >= 0) {
    ep_fail_peer(p, e, HR_MOE_EP_WAIT_START, 0, r, w);
    return 0;
  }
  return fail == 0;
}

/* CTA 0's thread 0, past the grid barrier that follows a send: release
 * this epoch's word `which` (0: disp, with the rows sent to each rank in
 * rows[]; 1: ret) into every rank. */
static __device__ __forceinline__ void ep_signal(const hr__moe_params &p, const hr__moe_ep_group &e,
                                                 int which, const int *rows)
{
  for(int i = 0; i < e.nranks; i++) {
    hr__moe_ep_flags *f = ep_flags(e, i);
    if(which == 0)
      ep_st_release_sys(&f->disp[e.rank][0], ((unsigned long long)p.seq << 32) | (unsigned)rows[i]);
    else
      ep_st_release_sys(&f->ret[e.rank][0], (unsigned long long)p.seq << 32);
  }
}

/* Thread 0: every rank's rows here, cs[] their pairs' scan (ep_phys). */
static __device__ __forceinline__ int ep_wait_dispatch(const hr__moe_params &p,
                                                       const hr__moe_ep_group &e, int *cs)
{
  if(!ep_wait_all(p, e, 0, HR_MOE_EP_WAIT_DISPATCH, cs + 1))
    return 0;
  cs[0] = 0;
  for(int i = 0; i < e.nranks; i++)    /* a peer's count is at most a region */
    cs[i + 1] = cs[i] + min(max(cs[i + 1], 0), e.cap) * p.k;
  return 1;
}

/* Thread 0, before the return: 1 unless a peer failed meanwhile (its
 * epoch is lost; no rows into buffers nobody reads this epoch). */
static __device__ __forceinline__ int ep_return_ok(const hr__moe_params &p, const hr__moe_ep_group &e)
{
  unsigned long long w;
  const int r = ep_peer_failed(p, e, &w);
  if(r >= 0)
    ep_fail_peer(p, e, HR_MOE_EP_WAIT_RETURN, 0, r, w);
  return r < 0;
}

/* ---- the two exchanges, as every kernel runs them ------------------------- */

/* A. dispatch this rank's tokens (sc: scratch for ep_dispatch); past the
 * barrier SENT (every CTA's rows out), CTA 0 tells each rank how many
 * rows it has from this one; B. wait for every rank's rows (cs: their
 * pairs' scan, shared). Every thread; 1 to go on. */
static __device__ int ep_exchange_in(const hr__moe_params &p, const hr__moe_ep_group &e, int *sc,
                                     int *cs, int *s_ok)
{
  if(e.T > 0)
    ep_dispatch(p, e, sc);
  else if(threadIdx.x < 8)
    sc[EP_SC_TOT + threadIdx.x] = 0;
  __syncthreads();
  if(threadIdx.x == 0)
    ep_fence_sys();
  if(!ep_barrier(p, e, HR_MOE_EP_WAIT_SENT, s_ok))
    return 0;
  if(blockIdx.x == 0 && threadIdx.x == 0)
    ep_signal(p, e, 0, sc + EP_SC_TOT);
  if(threadIdx.x == 0)
    *s_ok = ep_wait_dispatch(p, e, cs);
  __syncthreads();
  return *s_ok;
}

/* D. every received pair's row back to its source (ep_return; unless a
 * peer failed meanwhile); past the barrier RETURNED, CTA 0 tells every
 * rank; E. wait for every rank's rows back here. Every thread; 1 to go
 * on. */
static __device__ int ep_exchange_out(const hr__moe_params &p, const hr__moe_ep_group &e,
                                      const int *cs, const uint16_t *rows, const float *dwp,
                                      int ni, int *s_ok)
{
  if(threadIdx.x == 0)
    *s_ok = ep_return_ok(p, e);
  __syncthreads();
  if(!*s_ok)
    return 0;
  ep_return(p, e, cs, rows, dwp, ni);
  __syncthreads();
  if(threadIdx.x == 0)
    ep_fence_sys();
  if(!ep_barrier(p, e, HR_MOE_EP_WAIT_RETURNED, s_ok))
    return 0;
  if(blockIdx.x == 0 && threadIdx.x == 0)
    ep_signal(p, e, 1, NULL);
  if(threadIdx.x == 0)
    *s_ok = ep_wait_all(p, e, 1, HR_MOE_EP_WAIT_RETURN, NULL);
  __syncthreads();
  return *s_ok;
}

#endif /* HR_MOE_EP_COMM_CUH */
