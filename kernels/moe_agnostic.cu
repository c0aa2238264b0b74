/*
 * moe_agnostic.cu: the residency-agnostic mega-MoE forward. The same math
 * as moe_kernel.cu, tile for tile, so y is bitwise the same; what differs
 * is the schedule. There is no whole-grid barrier: every CTA first makes
 * the routing tables itself (counts and offsets over the whole table, the
 * tile shape, token tiles: what the barrier kernel's stage 1 computes, with
 * no wait), and takes tasks in order from one atomic counter (the ticket),
 * its first at its start so that a scatter piece is placed in the
 * routing's own pass:
 *
 *   tickets [0, P)          scatter place piece c of the pairs in expert
 *                                   order (sorted_tok, pos_of)
 *           [P, +U1)        GEMM1   unit u of moe_gemm.cuh, same decode
 *           [.., +U2)       GEMM2   unit u
 *           [.., +C)        combine a few tokens of y
 *           beyond          none:   the CTA leaves
 *
 * A task only ever waits for tasks with smaller tickets:
 *
 *   GEMM1, combine          every scatter     (scatter_done == P)
 *   GEMM2 unit (e, f, tt)   every GEMM1 unit of expert e, token tile tt
 *                           (g1_done[tile] == nf1, or all of GEMM1 done)
 *   combine of tokens t     the GEMM2 units of the token tiles that hold
 *                           t's pairs         (g2_done[tile] == nf2)
 *
 * and a CTA takes its tickets in increasing order and finishes each
 * before it waits for anything with a larger ticket than its unfinished
 * ones. So the smallest unfinished ticket belongs to a CTA that is running
 * (it took the ticket) and is working on it, and everything it waits for
 * has a smaller ticket, so is finished: the launch always progresses,
 * whatever number of its CTAs are resident. A CTA that cannot start until
 * some other kernel leaves its SM takes no ticket until then, and when it
 * starts finds the tickets used up and leaves. Waits still time out (and
 * honour the abort word) as the barrier does, into the same error word: a
 * bug or a dead peer must never hang the host.
 *
 * GEMM units of one stage run back to back through the cp.async pipeline
 * as in moe_kernel.cu: the CTA claims units ahead into a ring in shared
 * memory (moe_loader reads it), at most two beyond the one being loaded.
 * Holding a ticket ahead is safe because nothing waits inside a run: a
 * GEMM2 unit joins the run only if its GEMM1 tiles are already finished
 * (one poll, none once all of GEMM1 is seen done), else the run drains and
 * the CTA waits for it afterwards.
 *
 * The counters are all 0 between launches: the last CTA to leave puts
 * them back, so a launch needs no host round trip before the next.
 */
#include <limits.h>

#include "moe_kernel.h"

#include "moe_barrier.cuh"
#include "moe_combine.cuh"
#include "moe_gemm.cuh"
#include "moe_gemm_tma.cuh"
#include "moe_ptx.cuh"
#include "moe_route.cuh"
#include "moe_trace.cuh"

#include "headroom_moe.h"

/* The dynamic shared memory (moe_gemm.cuh) beside this kernel's static. */
static_assert(HR__MOE_SMEM_BYTES + 256 <= 227 * 1024, "fits an SM, with the static part");

/* Outputs per combine task: COMBINE_ELEMS / H tokens (64 tokens of the
 * small shape, 8 of Qwen3, 2 of DeepSeek-V3), at most T / 128 so that
 * there are 128 tasks or more, and at least one. */
#define COMBINE_ELEMS 16384

/* The ticket ranges of this launch, kept in shared memory: every thread
 * reads them, and registers are short inside the GEMM runs. */
struct agn_plan {
  int P;             /* scatter pieces */
  int tpc;           /* tokens per combine task */
  int tile, bn;      /* the tile shape, its tokens per unit */
  int nf1, nf2;      /* row tiles per expert: GEMM1, GEMM2 */
  int u1, u2, nc;    /* GEMM1 units, GEMM2 units, combine tasks */
  int g1, g2, cb;    /* first ticket of GEMM1, GEMM2, combine */
  int end;           /* tickets in all */
  /* What a wait counts to: scatter tickets, GEMM1 (GEMM2) units per token
   * tile. Each phase's tickets come 1 time over, or 0 or 2 times through
   * the benchmark hook (moe_phase_runs), and so do these. */
  unsigned need_s, need1, need2;
};

struct agn_shared {
  int ring[HR__MOE_RING];  /* a GEMM run's claimed units, -1: run ends */
  int pending;             /* the ticket that ended the last run; -1 leave */
  int val;                 /* thread 0 -> CTA */
  int nonempty;            /* experts with pairs */
  int polls;               /* thread 0: stop checks */
  int aborted;             /* thread 0 saw the abort word, not yet recorded */
  int asks_host;           /* thread 0 took ticket 0: it reads the abort word */
  int tma_failed;          /* a TMA run's wait timed out (its GEMM stage) */
  int all1;                /* thread 0 has seen every GEMM1 unit finished */
  int scatter_seen;        /* the CTA has seen every scatter finished */
  int first;               /* the ticket claimed at the start */
  int scat_from;           /* the scatter cursor counts from this pair */
  /* thread 0's state in a GEMM run (in shared memory: registers are short
   * there): claims go on; the ring position of the claim in flight; the
   * token tile of the unit finished last step, to be counted */
  int open, claim_pos, finished;
  int warp_sums[HR__MOE_THREADS / 32];
  agn_plan pl;
#if HR__MOE_TRACE_AGN
  int traced[2];           /* thread 0: GEMM1, GEMM2 unit ends marked */
#endif
};

/* The CTA's shared state, at file scope so that no function holds a
 * pointer to it in registers; the routing tables live in the dynamic
 * shared memory after the GEMM pipeline (agn_rt). */
static __shared__ agn_shared sh;

static __device__ __forceinline__ uint8_t *agn_smem(void)
{
  extern __shared__ __align__(128) uint8_t smem[];
  return smem;
}

static __device__ __forceinline__ moe_route agn_rt(void)
{
  return moe_route_tables((int *)(agn_smem() + HR__MOE_GEMM_SMEM));
}

/* Ticket t of a phase of n tasks that may run twice: task t or t - n. */
static __device__ __forceinline__ int agn_wrap(int t, int n)
{
  return t >= n ? t - n : t;
}

/* ---- waiting and stopping (one thread) ----------------------------------- */

/* Wait until *ctr >= target. 1 when it is; 0 when the launch failed: this
 * wait timed out or saw the abort word (it records which wait, the count
 * it saw and the target), or another CTA failed first. Polls as the
 * barrier does: the timer and the failure word every 8th poll, the host's
 * abort word every 128th, in one CTA only (sh.asks_host).
 *
 * Why one: reads of host memory stall the loads of the CTAs at work (the
 * barrier kernel's case, moe_barrier.cuh), and with every CTA asking,
 * here in its waits and every 32nd task, the launch ran slower than with
 * nobody asking (docs/decisions.md, "One reader of the abort word"). The
 * CTA that took
 * ticket 0 asks: it is running, and it takes tasks until the tickets run
 * out, past which the launch is in its last tasks. An abort it sees
 * reaches the others through sync->fail, which they all poll. */
static __device__ __noinline__ int agn_wait(const hr__moe_params &p, const unsigned *ctr,
                                     unsigned target, int what)
{
  unsigned v, it, ns = 32;
  unsigned long long t0;

  if(ld_acquire_gpu(ctr) >= target)
    return 1;
  t0 = global_timer_ns();
  for(it = 1;; it++) {
    /* Relaxed polls, backing off to 256 ns: many waiters on one counter
     * must not crowd the L2 slice its producers add to. Then one acquire
     * read, which the count only ever raises. */
    __nanosleep(ns);
    ns = ns < 256 ? 2 * ns : ns;
    v = ld_relaxed_gpu(ctr);
    if(v >= target && ld_acquire_gpu(ctr) >= target)
      return 1;
    if((it & 7) != 0)
      continue;
    if(moe_failed(p))
      return 0;
    if(global_timer_ns() - t0 > p.timeout_ns) {
      moe_fail_at(p, HR__MOE_FAIL_TIMEOUT, what, (int)v, (int)target);
      return 0;
    }
    if(sh.asks_host && (it & HR__MOE_ABORT_POLL_MASK) == 0 &&
       ld_relaxed_sys(&p.host->abort_seq) >= p.seq) {
      moe_fail_at(p, HR__MOE_FAIL_ABORT, what, (int)v, (int)target);
      return 0;
    }
  }
}

/* Thread 0, between tasks: 1 when this CTA should leave because another
 * CTA failed or the host asked to abort. Asked every 8th task, the abort
 * word (in host memory: a read crosses PCIe) too, by the one CTA that
 * reads it (agn_wait says why); a task is microseconds to a fraction of
 * a millisecond. */
static __device__ __forceinline__ int agn_stop_poll(const hr__moe_params &p)
{
  const int n = ++sh.polls;
  if((n & 7) != 0)
    return 0;
  if(moe_failed(p))
    return 1;
  if(sh.asks_host && ld_relaxed_sys(&p.host->abort_seq) >= p.seq) {
    sh.aborted = 1;
    return 1;
  }
  return 0;
}

/* The abort seen by agn_stop_poll, recorded (unless another CTA already
 * recorded a failure). Apart from agn_stop_poll because inside a GEMM run
 * there must be no call: a function call among wgmma instructions makes
 * the compiler serialize all of them. */
static __device__ void agn_stop_record(const hr__moe_params &p)
{
  if(sh.tma_failed) {
    moe_fail_at(p, HR__MOE_FAIL_TIMEOUT, HR__MOE_WAIT_TMA, sh.tma_failed, 0);
    sh.tma_failed = 0;
  }
  if(sh.aborted) {
    sh.aborted = 0;
    moe_fail_at(p, HR__MOE_FAIL_ABORT, HR__MOE_WAIT_CLAIM, 0, 0);
  }
}

static __device__ int agn_stop(const hr__moe_params &p)
{
  const int stop = agn_stop_poll(p);
  agn_stop_record(p);
  return stop;
}

/* The whole CTA waits on thread 0's wait; the same answer in every
 * thread. Starts and ends with __syncthreads. */
static __device__ int agn_wait_cta(const hr__moe_params &p,
                                   const unsigned *ctr, unsigned target, int what)
{
  __syncthreads();
  if(threadIdx.x == 0)
    sh.val = agn_wait(p, ctr, target, what);
  __syncthreads();
  return sh.val;
}

/* The next ticket for this CTA, the same in every thread; -1: leave. */
static __device__ int agn_claim(const hr__moe_params &p)
{
  __syncthreads();
  if(threadIdx.x == 0) {
    const int t = (int)atomicAdd(&p.agn->ticket, 1u);
    if(t == 0)
      sh.asks_host = 1;
    sh.val = agn_stop(p) ? -1 : t;
  }
  __syncthreads();
  return sh.val;
}

/* Token tile (index into g1_done / g2_done) of a decoded unit. */
static __device__ __forceinline__ int agn_tile_of(const moe_route &rt, const moe_unit &un,
                                                  int bn)
{
  return rt.tile_off[un.e] + (un.pos0 - rt.off[un.e]) / bn;
}

/* ---- routing ----------------------------------------------------------- */

/* The scatter cursor, in the GEMM pipeline's shared memory (a CTA takes
 * its scatter tickets before any GEMM unit: tickets come in order, so no
 * GEMM run has used it yet): cur[e] is where the next pair of expert e
 * goes, counting from pair sh.scat_from on. */
static __device__ __forceinline__ int *agn_scatter_cursor(void)
{
  return (int *)agn_smem();
}

/* Pairs [lo, hi) of the scatter ticket t, or lo = hi = 0 when t is not
 * one. */
static __device__ __forceinline__ void agn_piece(const hr__moe_params &p, int t, int *lo,
                                                 int *hi)
{
  const int pairs = p.T * p.k, P = sh.pl.P;
  *lo = *hi = 0;
  if(t >= 0 && t < (int)sh.pl.need_s) {
    const int c = agn_wrap(t, P);
    *lo = moe_piece_lo(pairs, c, P);
    *hi = moe_piece_lo(pairs, c + 1, P);
  }
}

/* A placed piece made visible: for the TMA tiles, which read the x rows
 * in expert order, the piece's rows copied first; then the count that
 * GEMM1 and the combine wait for. */
static __device__ void agn_scatter_publish(const hr__moe_params &p, int lo, int hi)
{
  if(moe_tile_copies_xs(p, sh.pl.tile)) {
    moe_copy_xs(p, lo, hi);
    __syncthreads();
  }
  if(threadIdx.x == 0)
    red_add_release_gpu(&p.agn->scatter_done, 1u);
}

/* The routing tables in this CTA's shared memory, as the barrier kernel
 * makes them (every CTA reads the whole routing table: cheap beside the
 * GEMMs, and nothing has to wait for it), and the ticket ranges. When the
 * CTA's first ticket (claimed at its start) is a scatter piece, the same
 * pass places it, as the barrier kernel's CTA places its slice: no second
 * count, and no round trip for a ticket after the routing. */
static __device__ void agn_route(const hr__moe_params &p, const moe_route &rt, int first)
{
  const int tid = threadIdx.x, E = p.E;
  int *cur = agn_scatter_cursor();
  int i, lo, hi;

  agn_piece(p, first, &lo, &hi);
  moe_route_pairs(p, rt, sh.warp_sums, lo, hi);
  for(i = tid; i < E; i += HR__MOE_THREADS) {
    cur[i] = rt.pre[i];                /* moved on past the placed piece */
    if(rt.cnt[i] > 0)
      atomicAdd(&sh.nonempty, 1);
  }
  if(tid == 0)
    sh.scat_from = hi;
  __syncthreads();
  if(tid == 0)
    sh.pl.tile = moe_pick_tile(rt.off[E], sh.nonempty, p.I, p.flags, 1);
  __syncthreads();
  moe_route_tiles(p, rt, moe_tile_bn(sh.pl.tile), sh.warp_sums);
  if(tid == 0) {
    agn_plan &pl = sh.pl;
    const int tiles = rt.tile_off[E];
    const int bm = moe_unit_rows(pl.tile, p.flags, 1);
    const int r1 = moe_phase_runs(p, HR__MOE_PHASE_GEMM1);
    const int r2 = moe_phase_runs(p, HR__MOE_PHASE_GEMM2);
    pl.bn = moe_tile_bn(pl.tile);
    pl.nf1 = 2 * p.I / bm;
    pl.nf2 = p.H / bm;
    pl.u1 = tiles * pl.nf1;
    pl.u2 = tiles * pl.nf2;
    pl.nc = (p.T + pl.tpc - 1) / pl.tpc;
    pl.need1 = (unsigned)(pl.nf1 * r1);
    pl.need2 = (unsigned)(pl.nf2 * r2);
    pl.g1 = (int)pl.need_s;
    pl.g2 = pl.g1 + pl.u1 * r1;
    pl.cb = pl.g2 + pl.u2 * r2;
    pl.end = pl.cb + pl.nc * moe_phase_runs(p, HR__MOE_PHASE_COMBINE);
  }
  __syncthreads();
  moe_trace_route(p, HR__MOE_ROUTE_MARK_TILED);
  if(hi > lo)
    agn_scatter_publish(p, lo, hi);
  moe_trace_route(p, HR__MOE_ROUTE_MARK_PUBLISHED);
}

/* Scatter task c past the CTA's first: piece c of the pairs into expert
 * order (fewer CTAs running than pieces, or the benchmark hook running
 * every piece twice). The cursor moves on over the pairs between the
 * CTA's last piece and this one; a piece before it (the hook's second
 * round) is counted again from the start. */
static __device__ void agn_scatter(const hr__moe_params &p, const moe_route &rt, int ticket)
{
  int *cur = agn_scatter_cursor();
  int i, lo, hi;

  agn_piece(p, ticket, &lo, &hi);
  if(lo >= sh.scat_from) {
    moe_route_advance(p, cur, sh.scat_from, lo);
    moe_route_place(p, cur, lo, hi);
  } else {
    moe_route_pairs(p, rt, sh.warp_sums, lo, hi);  /* cnt, off: the same again */
    for(i = threadIdx.x; i < p.E; i += HR__MOE_THREADS)
      cur[i] = rt.pre[i];
  }
  if(threadIdx.x == 0)
    sh.scat_from = hi;
  __syncthreads();
  agn_scatter_publish(p, lo, hi);
}

/* ---- GEMM runs ------------------------------------------------------------ */

/* Thread 0: ring position `pos` gets `ticket` if it continues this run (a
 * unit of this stage, and for GEMM2 one whose GEMM1 tiles are finished);
 * otherwise the run ends there and the ticket waits in sh.pending (-1 if
 * the CTA is to leave). 1 while the run goes on. */
template <class C, int STAGE>
static __device__ int agn_place(const hr__moe_params &p, const moe_route &rt, int pos, int ticket)
{
  const agn_plan &pl = sh.pl;
  const int lo = STAGE == 1 ? pl.g1 : pl.g2, hi = STAGE == 1 ? pl.g2 : pl.cb;
  int *slot = &sh.ring[pos & (HR__MOE_RING - 1)];

  if(agn_stop_poll(p))
    ticket = -1;                       /* recorded after the run: agn_tasks */
  if(ticket >= lo && ticket < hi) {
    const int u = agn_wrap(ticket - lo, STAGE == 1 ? pl.u1 : pl.u2);
    if(STAGE == 1) {
      *slot = u;
      return 1;
    }
    /* Once every GEMM1 unit is seen finished, every GEMM2 unit is ready
     * and no more polls are needed. */
    if(!sh.all1 && ld_acquire_gpu(&p.agn->g1_total) >= (unsigned)(pl.g2 - pl.g1))
      sh.all1 = 1;
    if(sh.all1) {
      *slot = u;
      return 1;
    }
    {
      const moe_unit un = unit_decode(u, rt, p, pl.nf2, C::BN, C::TT_MAJOR);
      if(ld_acquire_gpu(p.g1_done + agn_tile_of(rt, un, pl.bn)) >= pl.need1) {
        *slot = u;
        return 1;
      }
    }
  }
  *slot = -1;
  sh.pending = ticket;
  return 0;
}

/* Thread 0, after the __syncthreads that follows a unit's stores: count
 * it in its token tile (and GEMM1 units in the total). One fence
 * publishes the CTA's stores for both adds. */
template <int STAGE>
static __device__ __forceinline__ void agn_finished(const hr__moe_params &p, int tile)
{
  fence_acq_rel_gpu();
  red_add_relaxed_gpu((STAGE == 1 ? p.g1_done : p.g2_done) + tile, 1u);
  if(STAGE == 1)
    red_add_relaxed_gpu(&p.agn->g1_total, 1u);
}

/* Thread 0: the unit a run finished last, if not yet counted, counted
 * now (agn_finished). Called after a __syncthreads that follows the
 * unit's stores. */
template <int STAGE>
static __device__ __forceinline__ void agn_publish_finished(const hr__moe_params &p)
{
  if(sh.finished >= 0) {
    agn_finished<STAGE>(p, sh.finished);
    sh.finished = -1;
  }
}

/* The timeline's end of the CTA's n-th unit of STAGE, for its first
 * HR__MOE_TRACE_UNITS (thread 0; a diagnostic build's only). */
template <int STAGE>
static __device__ __forceinline__ void agn_trace_unit(const hr__moe_params &p)
{
#if HR__MOE_TRACE_AGN
  if(p.trace && threadIdx.x == 0 && sh.traced[STAGE - 1] < HR__MOE_TRACE_UNITS)
    moe_trace(p, HR__MOE_TRACE_MARKS + (STAGE - 1) * HR__MOE_TRACE_UNITS +
                     sh.traced[STAGE - 1]++);
#else
  (void)p;
#endif
}

/* Units of one GEMM stage, starting with `first` (its inputs ready), for
 * as long as the tickets claimed ahead continue the run. The loop is
 * moe_gemm_stage's, with the units from the ring; each finished unit is
 * counted in its token tile's counter at the next step (after the
 * __syncthreads that follows its stores). Returns the ticket that ended
 * the run. Starts and ends with __syncthreads. */
template <class C, int STAGE>
static __device__ int agn_gemm_run(const hr__moe_params &p, const moe_route &rt, uint8_t *pipe, int first)
{
  const int tid = threadIdx.x, warp = tid >> 5;
  const int wm = warp % C::WM, wn = (warp / C::WM) % C::WN;
  const int wk = warp / (C::WM * C::WN);
  const int K = STAGE == 1 ? p.H : p.I;
  const int nk = K / C::BK;
  const int nf = (STAGE == 1 ? 2 * p.I : p.H) / C::BM;
  moe_loader<C, STAGE> ld;
  moe_unit un;
  float acc[C::MT][C::NT][4];
  int kt = 0, slot = 0, u = 0, i;
  int claim = -1;                      /* thread 0: a ticket in flight */

  pipe = moe_pipe<C>(pipe);
  __syncthreads();                     /* the last run's ring is read */
  if(tid == 0) {
    sh.ring[0] = first;
    sh.finished = -1;
    sh.open = agn_place<C, STAGE>(p, rt, 1, (int)atomicAdd(&p.agn->ticket, 1u));
  }
  __syncthreads();
  ld.init(p, rt, nf, 0, sh.ring);
  for(i = 0; i < moe_lookahead<C>(); i++) {     /* fill the pipeline */
    const int lu = ld.unit, starts = ld.kt == 0;
    if(!starts || sh.ring[lu & (HR__MOE_RING - 1)] >= 0) {
      ld.issue(p, rt, pipe, nf, nk);
      if(starts) {
        /* unit lu started and looked at lu + 1: claim lu + 2 */
        if(tid == 0 && sh.open)
          sh.open = agn_place<C, STAGE>(p, rt, lu + 2, (int)atomicAdd(&p.agn->ticket, 1u));
        __syncthreads();
      }
    }
    cp_async_commit();
  }
  un = unit_decode(first, rt, p, nf, C::BN, C::TT_MAJOR);
  tile_zero<C>(acc);
  for(;;) {
    moe_step_landed<C>();                       /* this step has landed */
    __syncthreads();                            /* and the last slot is free */
    if(tid == 0)
      agn_publish_finished<STAGE>(p);
    {
      /* The loads of this step start a unit: claim one more. The claim's
       * answer is not needed before this step's MMAs are issued: the
       * atomic's latency hides behind them. */
      const int lu = ld.unit, starts = ld.kt == 0;
      const int go = !starts || sh.ring[lu & (HR__MOE_RING - 1)] >= 0;
      if(go && starts && tid == 0 && sh.open) {
        claim = (int)atomicAdd(&p.agn->ticket, 1u);
        sh.claim_pos = lu + 2;
      }
      if constexpr(!C::DEPTH || C::ONE_SYNC) {
        if(go)
          ld.issue(p, rt, pipe, nf, nk);
        cp_async_commit();
      }
    }

    {
      const uint32_t a = smem_addr(pipe + slot * C::STAGE_BYTES);
      tile_step<C>(acc, a, a + C::A_BYTES, wm, wn, wk, un.nvalid);
    }
    if constexpr(C::DEPTH && !C::ONE_SYNC) {
      /* As in moe_gemm_stage: the previous step's slot is free once every
       * warpgroup is past this barrier. Nothing read above has changed
       * since the first barrier of the step (the ring entries thread 0
       * writes are two units ahead). */
      __syncthreads();
      {
        const int lu = ld.unit, starts = ld.kt == 0;
        if(!starts || sh.ring[lu & (HR__MOE_RING - 1)] >= 0)
          ld.issue(p, rt, pipe, nf, nk);
      }
      cp_async_commit();
    }
    if(++kt == nk) {
      tile_unit_end<C, STAGE>(p, un, acc, pipe, slot, wm, wn, wk);
      agn_trace_unit<STAGE>(p);
      if(tid == 0)
        sh.finished = agn_tile_of(rt, un, C::BN);
    }
    if(++slot == C::STAGES)
      slot = 0;
    if(tid == 0 && claim >= 0) {
      sh.open = agn_place<C, STAGE>(p, rt, sh.claim_pos, claim);
      claim = -1;
    }
    if(kt == nk) {
      /* The next unit's ring entry was placed two unit starts ago, so a
       * __syncthreads has published it. */
      kt = 0;
      u++;
      if(sh.ring[u & (HR__MOE_RING - 1)] < 0)
        break;
      un = unit_decode(sh.ring[u & (HR__MOE_RING - 1)], rt, p, nf, C::BN, C::TT_MAJOR);
    }
  }
  tile_drain<C>(acc);                           /* as in moe_gemm_stage */
  cp_async_wait<0>();
  __syncthreads();
  if(tid == 0)
    agn_publish_finished<STAGE>(p);
  return sh.pending;
}

/* agn_gemm_run on the TMA pipeline (moe_gemm_tma.cuh): the same units
 * from the same ring and the same claims, thread 0 loading every step and
 * placing the claims, the warps waiting on the slots' barriers instead of
 * on each other. A unit's results are counted in its token tile after a
 * __syncthreads that follows every thread's stores (one per unit, none per
 * step). The claim made when the producer starts loading unit lu (for
 * lu + 2) is placed at the next step: the warps read that ring entry only
 * at the end of unit lu + 1, and thread 0 is one of them. Returns the
 * ticket that ended the run, or -1 after a timeout (recorded by
 * agn_tasks). Starts and ends with __syncthreads. */
template <class C, int STAGE, int G>
static __device__ int agn_gemm_run_tma(const hr__moe_params &p, const moe_route &rt,
                                       uint8_t *smem, int first)
{
  const int tid = threadIdx.x;
  const moe_stage_dims d = moe_stage_dims_of<C, STAGE>(p, rt);
  const int nk = d.nk, nf = d.nf;
  /* the ring here is sh.ring: this kernel claims into its own */
  [[maybe_unused]] const auto [pipe, full, empty, tma_ring] = tma_pipe_of<C>(smem);
  const tma_posts g = tma_posts_of<C>(pipe);   /* the gather's posts */
  float acc[C::MT][C::NT][4];
  moe_unit un, lun;                  /* the MMAs' unit; the producer's */
  int s, i, kt = 0, u = 0, slot = 0;
  int l_unit = 0, l_kt = 0, l_done = 0;  /* thread 0: the next step to load */
  int claim = -1, claim_pos = 0;     /* thread 0: a ticket in flight */
  int tok_pos0 = -1, tok = 0;        /* the gather: this thread's token */
  int dead = 0, loaded;

  __syncthreads();                   /* the last run's ring is read */
  if(tid == 0) {
    sh.ring[0] = first;
    sh.open = agn_place<C, STAGE>(p, rt, 1, (int)atomicAdd(&p.agn->ticket, 1u));
    tma_barriers_init<C, STAGE, G>(full, empty, g);
    /* Fill the pipeline: thread 0 loads the weights (a unit's first load
     * claims the unit two ahead, placed at once here; the inputs were
     * acquired by this thread, the scatter count or a GEMM1 tile count:
     * fence before TMA reads them); then every thread gathers the token
     * rows of the steps it loaded. */
    for(i = 0; i < C::STAGES; i++) {
      if(l_kt == 0) {
        if(!tma_next_unit<C>(p, rt, sh.ring, l_unit, nf, lun)) {
          l_done = 1;
          break;
        }
        fence_proxy_async_global();
        if(sh.open)
          sh.open = agn_place<C, STAGE>(p, rt, l_unit + 2, (int)atomicAdd(&p.agn->ticket, 1u));
      }
      tma_step_load<C, STAGE, G>(p, pipe, full, i, lun, l_kt, tma_gather_req_at<C>(g, i, 0));
      if(++l_kt == nk) {
        l_kt = 0;
        l_unit++;
      }
    }
  }
  __syncthreads();
  tma_gather_fill<C, STAGE, G>(p, pipe, full, g, tok_pos0, tok);
  un = unit_decode(first, rt, p, nf, C::BN, C::TT_MAJOR);
  tile_zero<C>(acc);
  for(s = 0;; s++) {
    /* as in moe_gemm_stage_tma: a timed-out thread goes on, dead */
    tma_step_mma<C, STAGE, G>(p, pipe, full, empty, s, slot, acc, un.nvalid, dead);
    if(tid == 0 && claim >= 0) {
      sh.open = agn_place<C, STAGE>(p, rt, claim_pos, claim);
      claim = -1;
    }
    loaded = 0;
    if(s > 0 && tid == 0 && !dead && !l_done && !tma_drop(p, s, nk)) {
      if(l_kt == 0) {
        if(!tma_next_unit<C>(p, rt, sh.ring, l_unit, nf, lun)) {
          l_done = 1;
        } else {
          fence_proxy_async_global();
          if(sh.open) {
            claim = (int)atomicAdd(&p.agn->ticket, 1u);
            claim_pos = l_unit + 2;
          }
        }
      }
      if(!l_done) {
        loaded = tma_refill<C, STAGE, G>(p, pipe, full, empty, s, slot, lun, nk, l_kt, l_unit, g);
        dead = !loaded;
      }
    }
    if(s > 0 && tid == 0)              /* every thread gathers it at s + 1 */
      tma_gather_post<C, STAGE, G>(g, s, loaded);
    tma_gather_step<C, STAGE, G>(p, pipe, full, g, s, tok_pos0, tok, dead);
    if(++slot == C::STAGES)
      slot = 0;
    if(++kt == nk) {
      tma_unit_end<C, STAGE>(p, un, acc, pipe);
      fence_proxy_async_global();      /* GEMM2's TMA reads h */
      /* every thread's stores, and the ring; and whether a thread is dead:
       * then the run ends here for the whole CTA, as in
       * moe_gemm_stage_tma (a dead thread 0 places no more claims, so the
       * ring ahead is stale and would never end the run), and the unit,
       * garbage, is not counted */
      if(__syncthreads_or(dead))
        break;
      agn_trace_unit<STAGE>(p);
      if(tid == 0)
        agn_finished<STAGE>(p, agn_tile_of(rt, un, C::BN));
      kt = 0;
      u++;
      if(sh.ring[u & (HR__MOE_RING - 1)] < 0)
        break;
      un = unit_decode(sh.ring[u & (HR__MOE_RING - 1)], rt, p, nf, C::BN,
                       C::TT_MAJOR);
    }
  }
  tile_drain<C>(acc);
  dead = __syncthreads_or(dead);
  if(tid == 0) {
    if(dead) {
      sh.tma_failed = STAGE;
      sh.pending = -1;
    } else {
      tma_barriers_inval<C, STAGE, G>(full, empty, g);
    }
  }
  __syncthreads();
  return sh.pending;
}

/* The run of tile C: on TMA or on cp.async. */
template <class C, int STAGE>
static __device__ __forceinline__ int agn_gemm_run_any(const hr__moe_params &p,
                                                       const moe_route &rt, uint8_t *pipe,
                                                       int first)
{
  if constexpr(C::TMA) {
    if constexpr(STAGE == 1)
      if(moe_gather_on(p))
        return agn_gemm_run_tma<C, 1, 1>(p, rt, pipe, first);
    return agn_gemm_run_tma<C, STAGE, 0>(p, rt, pipe, first);
  }
  else
    return agn_gemm_run<C, STAGE>(p, rt, pipe, first);
}

/* ---- combine -------------------------------------------------------------- */

/* Combine task c: tokens [c * tpc, ...). Each thread waits for the token
 * tiles of some of the pairs (most are long finished), then the CTA makes
 * the outputs as the barrier kernel does. The task that finishes the last
 * of them tells the host y is complete. Inlined in the kernel after the
 * GEMM runs (agn_combines), where none of their registers is live: among
 * the GEMM runs it spilled, and with one slot at a time each chunk was
 * 16 dependent L2 round trips (Qwen3 T = 1024: the combine cost
 * 0.036-0.052 ms against the barrier kernel's 0.011-0.022). As a function
 * of its own it read the parameters through a generic pointer (p.k,
 * p.ids, p.pos_of in each poll); inlined, from the constant bank. */
static __device__ __forceinline__ int agn_combine(const hr__moe_params &p, const moe_route &rt,
                                               int c)
{
  const moe_comb a = moe_comb_of(p);
  const int tid = threadIdx.x, chunks = p.H / 8;
  const int t0 = c * sh.pl.tpc, nt = min(p.T - t0, sh.pl.tpc);
  const int bn = sh.pl.bn;
  const unsigned need2 = sh.pl.need2;
  int ok = 1, i;

  /* pos_of is the scatters' */
  if(!agn_wait_cta(p, &p.agn->scatter_done, sh.pl.need_s, HR__MOE_WAIT_SCATTER))
    return 0;
  /* One warp polls (a few dozen pollers per CTA, not 256); the others
   * wait at the barrier. */
  for(i = tid; tid < 32 && i < nt * p.k && ok; i += 32) {
    const int pi = t0 * p.k + i;
    const int pos = __ldcg(p.pos_of + pi);
    if(pos >= 0) {
      const int e = __ldg(p.ids + pi);
      const int tl = rt.tile_off[e] + (pos - rt.off[e]) / bn;
      ok = agn_wait(p, p.g2_done + tl, need2, HR__MOE_WAIT_GEMM2);
    }
  }
  if(!__syncthreads_and(ok))
    return 0;
  if(moe_combine_by_token(nt, p.H, p.k, HR__MOE_THREADS / 32)) {
    for(i = tid >> 5; i < nt; i += HR__MOE_THREADS / 32)   /* a token a warp */
      moe_combine_token(a, t0 + i, tid & 31);
  } else {
    for(i = tid; i < nt * chunks; i += HR__MOE_THREADS) {
      const int t = i / chunks;
      moe_combine_chunk(a, t0 + t, i - t * chunks);
    }
  }
  __syncthreads();
  if(tid == 0 && atom_add_acq_rel_gpu(&p.agn->combine_done, 1u) ==
                     (unsigned)(sh.pl.end - sh.pl.cb - 1)) {
    p.host->done_seq = p.seq;
    __threadfence_system();
  }
  return 1;
}

/* The GEMM tasks past the scatters, in the launch's tile shape C, until
 * a ticket past them: returns it (a combine task's, or one past the end),
 * or -1 when the launch failed.
 * Every tile shape's copy is inlined in the kernel. Not only because a
 * call to a function holding wgmma instructions makes the compiler
 * serialize them: in a function of its own, the parameters are reached
 * through a generic pointer, and the cp.async loader read them with
 * generic loads at every step, which the barrier kernel has none of
 * (docs/decisions.md, "The agnostic kernel's inlined tasks"). */
template <class C>
static __device__ __forceinline__ int agn_tasks(const hr__moe_params &p, int ticket)
{
  const moe_route rt = agn_rt();
  uint8_t *const pipe = agn_smem();
  for(;;) {
    if(ticket < 0) {
      if(threadIdx.x == 0)
        agn_stop_record(p);
      return -1;
    }
    if(ticket < sh.pl.g2) {
      const int u = agn_wrap(ticket - sh.pl.g1, sh.pl.u1);
      if(!agn_wait_cta(p, &p.agn->scatter_done, sh.pl.need_s, HR__MOE_WAIT_SCATTER))
        return -1;
      if(threadIdx.x == 0)
        sh.scatter_seen = 1;
      moe_trace_agn(p, HR__MOE_MARK_G1_START, 1);
      ticket = agn_gemm_run_any<C, 1>(p, rt, pipe, u);
      moe_trace_agn(p, HR__MOE_MARK_G1_END, 0);
    } else if(ticket < sh.pl.cb) {
      const int u = agn_wrap(ticket - sh.pl.g2, sh.pl.u2);
      const moe_unit un = unit_decode(u, rt, p, sh.pl.nf2, C::BN, C::TT_MAJOR);
      if(!sh.all1 && !agn_wait_cta(p, p.g1_done + agn_tile_of(rt, un, C::BN),
                                   sh.pl.need1, HR__MOE_WAIT_GEMM1))
        return -1;
      moe_trace_agn(p, HR__MOE_MARK_G2_START, 1);
      ticket = agn_gemm_run_any<C, 2>(p, rt, pipe, u);
      moe_trace_agn(p, HR__MOE_MARK_G2_END, 0);
    } else {
      return ticket;
    }
  }
}

/* The combine tasks, from `ticket` (past the GEMM tickets) until the
 * tickets run out (1) or the launch failed (0). Inlined in the kernel
 * itself, after every GEMM run, where nothing of them is live any more
 * (255 registers, no spills, no stack): a call from inside agn_tasks
 * made the compiler spill around it. */
static __device__ __forceinline__ int agn_combines(const hr__moe_params &p, int ticket)
{
  const moe_route rt = agn_rt();
  if(ticket >= 0 && ticket < sh.pl.end)
    moe_trace_agn(p, HR__MOE_MARK_C_START, 0);
  while(ticket >= 0 && ticket < sh.pl.end) {
    if(!agn_combine(p, rt, agn_wrap(ticket - sh.pl.cb, sh.pl.nc)))
      return 0;
    ticket = agn_claim(p);
  }
  if(ticket < 0) {
    if(threadIdx.x == 0)
      agn_stop_record(p);
    return 0;
  }
  return 1;
}

/* ---- the kernel ----------------------------------------------------------- */

/* The start of a launch: the checks, the routing tables, then scatter
 * tasks while the tickets are theirs. Returns the first ticket past them,
 * or -1: leave (this launch failed, or was aborted). Inlined in the
 * kernel: in a function of its own, it read the parameters through a
 * generic pointer, p.ids reloaded before each id of the count and the
 * plan's fields one dependent load after another (the file's PTX had 235
 * generic loads, 195 of them here; 40 inlined, in the functions that stay
 * apart), and its count, placing and plan each took longer than the
 * barrier kernel's same code (docs/decisions.md, "The agnostic kernel's
 * inlined tasks"). */
static __device__ __forceinline__ int agn_begin(const hr__moe_params &p)
{
  const moe_route rt = agn_rt();
  int ticket;

  /* As the barrier kernel: leave at once when this launch already failed
   * or an earlier failed launch's words were never cleared. */
  if(threadIdx.x == 0) {
    const unsigned fail = ld_relaxed_gpu(&p.sync->fail);
    const int pairs = p.T * p.k;
    sh.val = fail == 0;
    if(fail != 0 && fail != p.seq)
      moe_fail(p, HR__MOE_FAIL_STALE, -1, 0);
    sh.polls = 0;
    sh.aborted = 0;
    sh.asks_host = 0;
    sh.tma_failed = 0;
    sh.all1 = 0;
    sh.scatter_seen = 0;
#if HR__MOE_TRACE_AGN
    sh.traced[0] = sh.traced[1] = 0;
#endif
    sh.nonempty = 0;
    /* as many pieces as CTAs, each at least HR__MOE_AGN_PIECE pairs */
    sh.pl.P = max(1, min((pairs + HR__MOE_AGN_PIECE - 1) / HR__MOE_AGN_PIECE,
                         (int)gridDim.x));
    sh.pl.need_s = (unsigned)(sh.pl.P * moe_phase_runs(p, HR__MOE_PHASE_ROUTE));
    /* The first ticket now, its round trip beside the read above: a
     * scatter piece is placed in the routing's own pass. A CTA of a
     * launch that already failed leaves with it; the host clears the
     * schedule after a failed launch. */
    sh.first = (int)atomicAdd(&p.agn->ticket, 1u);
    if(sh.first == 0)
      sh.asks_host = 1;
    /* at small T one token a task, so the combine spreads over the
     * grid as the barrier kernel's does */
    sh.pl.tpc = max(1, min(COMBINE_ELEMS / p.H, p.T / 128));
  }
  __syncthreads();
  if(!sh.val)
    return -1;
  moe_trace_agn(p, HR__MOE_MARK_START, 0);
  if(HR__MOE_TRACE_AGN)
    moe_trace_sm(p);
  ticket = sh.first;
  agn_route(p, rt, ticket);
  moe_trace_agn(p, HR__MOE_MARK_ROUTED, 0);
  if(ticket < sh.pl.g1)                /* placed by the routing */
    ticket = agn_claim(p);
  while(ticket >= 0 && ticket < sh.pl.g1) {
    agn_scatter(p, rt, ticket);
    ticket = agn_claim(p);
  }
  return ticket;
}

/* No tickets left. The last CTA to leave puts the schedule back to 0 for
 * the next launch: every other CTA has made its last access to it before
 * its own (release) count here. */
static __device__ __noinline__ void agn_leave(const hr__moe_params &p)
{
  const moe_route rt = agn_rt();
  int i;

  __syncthreads();
  if(threadIdx.x == 0)
    sh.val = atom_add_acq_rel_gpu(&p.agn->exited, 1u) == gridDim.x - 1;
  __syncthreads();
  if(!sh.val)
    return;
  for(i = threadIdx.x; i < rt.tile_off[p.E]; i += HR__MOE_THREADS) {
    p.g1_done[i] = 0;
    p.g2_done[i] = 0;
  }
  if(threadIdx.x == 0) {
    p.agn->ticket = 0;
    p.agn->scatter_done = 0;
    p.agn->g1_total = 0;
    p.agn->combine_done = 0;
    p.agn->exited = 0;
  }
}

__global__ void __launch_bounds__(HR__MOE_THREADS, 1)
hr__moe_agnostic_kernel(const __grid_constant__ hr__moe_params p)
{
  int ticket = agn_begin(p);

  if(ticket < 0)
    return;
  /* The tile shape follows the routing: the same in every CTA. The
   * 80-token and mid tiles run one __syncthreads a step (moe_one_sync),
   * 256 rows tall as the wide96 one (moe_tile_tall). */
  const int tile = sh.pl.tile;
  if(moe_tile_tma(tile))
    ticket = agn_tasks<moe_tile_big_tma>(p, ticket);
  else if(tile == MOE_TILE_TINY)
    ticket = agn_tasks<moe_tile_tiny>(p, ticket);
  else if(tile == MOE_TILE_NARROW)
    ticket = agn_tasks<moe_tile_narrow>(p, ticket);
  else if(tile == MOE_TILE_WIDE)
    ticket = agn_tasks<moe_tile_wide>(p, ticket);
  else if(tile == MOE_TILE_WIDE80)
    ticket = agn_tasks<moe_tile_wide80_tall_1s>(p, ticket);
  else if(tile == MOE_TILE_WIDE96)
    ticket = agn_tasks<moe_tile_wide96_tall>(p, ticket);
  else
    ticket = agn_tasks<moe_tile_mid_tall_1s>(p, ticket);
  if(ticket >= 0 && agn_combines(p, ticket)) {
    moe_trace_agn(p, HR__MOE_MARK_END, 0);
    agn_leave(p);
  }
}

extern "C" cudaError_t hr__moe_agnostic_prepare(void)
{
  return cudaFuncSetAttribute(hr__moe_agnostic_kernel,
                              cudaFuncAttributeMaxDynamicSharedMemorySize,
                              HR__MOE_SMEM_BYTES);
}

extern "C" cudaError_t hr__moe_agnostic_launch(const hr__moe_params *p, int grid,
                                               cudaStream_t stream)
{
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3((unsigned)grid, 1, 1);
  cfg.blockDim = dim3(HR__MOE_THREADS, 1, 1);
  cfg.dynamicSmemBytes = HR__MOE_SMEM_BYTES;
  cfg.stream = stream;
  return cudaLaunchKernelEx(&cfg, hr__moe_agnostic_kernel, *p);
}
