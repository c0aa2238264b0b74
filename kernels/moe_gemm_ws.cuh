/*
 * moe_gemm_ws.cuh: the big tile's GEMM stages with a producer warpgroup
 * of its own, in the barrier kernel built with HR__MOE_WS (moe_kernel.cu).
 *
 * The CTA has 384 threads: the 256 that run every stage of the kernel
 * (the routing, the MMAs, the stores, the combine, the grid barriers)
 * and a third warpgroup, the producer, which does nothing but the big
 * tile's loads. So the MMA warps never wait for a refill: in the TMA
 * pipeline of moe_gemm_tma.cuh, thread 0, one of them, waits on each
 * slot's release before loading it, and its warpgroup's next wgmma waits
 * with it. The producer lowers its registers (setmaxnreg) so that the
 * 256 can raise theirs to what the big tile's 128 accumulators need.
 *
 * The two sides meet on named barrier HR__MOE_WS_BAR at each TMA stage's
 * start (thread 0 has initialized the slots' barriers and claimed the
 * stage's first two units; the producer reads the command word and the
 * ring) and end (the producer has issued its last load), and once more
 * when the 256 leave the kernel (command HR__MOE_WS_EXIT), whatever path
 * they leave by. Between those meetings they share only the slots'
 * mbarriers and the claim ring, as in moe_gemm_tma.cuh: the producer
 * claims the units, places them in the ring two ahead and loads their
 * steps; the MMA warps wait on `full`, issue, release `empty`, store.
 * Every wait is bounded by the launch's timeout, on both sides; when the
 * MMA warps stop on a timeout they say so in the command word
 * (HR__MOE_WS_ABANDON), and a producer waiting for a release they will
 * never make stops too.
 *
 * Where GEMM1 gathers its token rows (moe_gather_on), the producer's 128
 * threads copy them, a row each, with cp.async into the slot its first
 * thread has loaded the weights into, each arriving on the slot's `full`
 * barrier once its copies land (1 + 128 arrivals and the weights' bytes
 * complete a phase); a named barrier of the producer's own
 * (HR__MOE_WS_PBAR) hands each step from its first thread to the others.
 */
#ifndef HR_MOE_GEMM_WS_CUH
#define HR_MOE_GEMM_WS_CUH

#include "moe_gemm_tma.cuh"

/* Threads a CTA: the 256 of every stage, then the producer warpgroup. */
#define HR__MOE_WS_THREADS (HR__MOE_THREADS + 128)
/* The named barrier the two sides meet on (1 is HR__SYNC's). */
#define HR__MOE_WS_BAR 2
/* Registers a thread after setmaxnreg: 256 x 224 + 128 x 64 = 65536, the
 * whole register file (168 a thread at launch); at 232 and 48 the
 * kernel spilled 4 bytes (the producer's gather), here nothing does. */
#define HR__MOE_WS_REGS_MMA 224
#define HR__MOE_WS_REGS_PRODUCER 64
/* The producer warpgroup's own named barrier (the gather's steps). */
#define HR__MOE_WS_PBAR 3
#define HR__MOE_WS_PTHREADS 128
/* The command word's values besides a stage (1, 2) to load: leave the
 * kernel; and, set by the 256 while a stage's loads may still be
 * waiting, abandon them (the MMA warps timed out and stopped). */
#define HR__MOE_WS_EXIT 0
#define HR__MOE_WS_ABANDON (-1)

static_assert(HR__MOE_WS_THREADS * 168 <= 65536 &&
              HR__MOE_THREADS * HR__MOE_WS_REGS_MMA + 128 * HR__MOE_WS_REGS_PRODUCER <= 65536,
              "the register file");

template <int N>
static __device__ __forceinline__ void setmaxnreg_inc(void)
{
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" :: "n"(N));
}

template <int N>
static __device__ __forceinline__ void setmaxnreg_dec(void)
{
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" :: "n"(N));
}

/* Both sides: the meeting of HR__MOE_WS_BAR. Not the warp-aligned form
 * (bar.sync): the producer's first thread comes to it from its loads,
 * the rest of its warp straight from the last meeting. */
static __device__ __forceinline__ void moe_ws_meet(void)
{
  barrier_sync(HR__MOE_WS_BAR, HR__MOE_WS_THREADS);
}

/* The producer's wait for a slot's release: mbar_wait's, which also
 * gives up once the 256 have abandoned the stage (they timed out on
 * another wait and will release nothing more), so that the producer
 * meets them at the stage's end at once instead of a timeout later. */
static __device__ __forceinline__ int moe_ws_wait_empty(const hr__moe_params &p, uint64_t *bar,
                                                        unsigned par, const volatile int *cmd)
{
  unsigned long long t0 = 0;
  unsigned it = 0;
  while(!mbar_try_wait(bar, par)) {
    if((++it & 255) == 0) {
      const unsigned long long now = global_timer_ns();
      if(*cmd == HR__MOE_WS_ABANDON)
        return 0;
      if(t0 == 0)
        t0 = now;
      else if(now - t0 > p.timeout_ns)
        return 0;
    }
  }
  return 1;
}

/* A step the producer's first thread hands to the others (the gather's
 * rows: moe_ws_gather); stop: the run is over. */
struct moe_ws_step {
  int slot, pos0, nvalid, k0, stop;
};

/* The slots' barriers, fresh, by the 256's thread 0 before a stage's
 * start: `full` counts the producer's arrival with the bytes and, where
 * GEMM1 gathers, its 128 threads' arrivals; `empty` one a warp of the 256. */
template <class C, int G>
static __device__ __forceinline__ void moe_ws_barriers_init(uint64_t *full, uint64_t *empty)
{
  for(int i = 0; i < C::STAGES; i++) {
    mbar_init(full + i, G ? 1 + HR__MOE_WS_PTHREADS : 1);
    mbar_init(empty + i, HR__MOE_TMA_WARPS);
  }
  fence_mbar_init();
}

/* Each producer thread, a gathered step: token row pt of the unit's,
 * x[sorted_tok[pos0 + pt]] from K k0, its 128 bytes into the slot's token
 * tile as the TMA boxes would lay them out (swz), then its arrival on the
 * slot's `full` barrier once they land. Rows from nvalid on are left as
 * they are (they feed only output rows never stored). *tok is this
 * thread's token, read once a unit (at *tok_pos0). */
template <class C>
static __device__ __forceinline__ void moe_ws_gather(const hr__moe_params &p, uint8_t *pipe,
                                                     uint64_t *full, const moe_ws_step &st,
                                                     int pt, int &tok_pos0, int &tok)
{
  static_assert(C::ROW_BYTES == 128 && C::BN == HR__MOE_WS_PTHREADS, "a token row a thread");
  if(pt < st.nvalid) {
    if(st.pos0 != tok_pos0) {
      tok = __ldcg(p.sorted_tok + st.pos0 + pt);
      tok_pos0 = st.pos0;
    }
    const uint32_t b = smem_addr(pipe + st.slot * C::STAGE_BYTES) + C::A_BYTES;
    const uint16_t *src = p.x + (size_t)tok * p.H + st.k0;
#pragma unroll
    for(int c = 0; c < C::ROW_BYTES / 16; c++)
      cp_async16(b + swz<C>(pt, c), src + c * 8);
  }
  cp_async_mbar_arrive(full + st.slot);
}

/* The producer warpgroup between a stage's start and end: its first
 * thread claims the units and loads every step once its slot is
 * released; where the stage gathers (G), all 128 copy the step's token
 * rows too. Returns when the ring says the run ends, or when a release
 * never came (the MMA warps then time out on the slot they wait for, and
 * the launch fails). */
template <class C, int STAGE, int G>
static __device__ void moe_ws_produce(const hr__moe_params &p, const moe_route &rt,
                                      uint8_t *smem, const volatile int *cmd)
{
  const moe_stage_dims d = moe_stage_dims_of<C, STAGE>(p, rt);
  const int pt = (int)threadIdx.x - HR__MOE_THREADS;
  const auto [pipe, full, empty, ring] = tma_pipe_of<C>(smem);
  /* the handed step: in the gather's posts (moe_gemm_tma.cuh), unused here */
  volatile moe_ws_step *const st = (volatile moe_ws_step *)tma_posts_of<C>(pipe).req;
  tma_gather_req req;
  moe_unit lun;
  int s, slot, l_unit = 0, l_kt = 0, tok_pos0 = -1, tok = 0, stop = 0;

  if(d.units == 0 || ring[0] < 0 || (!G && pt != 0))
    return;
  /* the inputs were written through the generic proxy (the x rows by the
   * route stage, h by GEMM1) and published by the grid barrier the MMA
   * threads passed before the start */
  fence_proxy_async_global();
  for(s = 0; !stop; s++) {
    if(pt == 0) {
      slot = s % C::STAGES;
      if(l_kt == 0) {
        if(!tma_next_unit<C>(p, rt, ring, l_unit, d.nf, lun))
          stop = 1;
        else
          ring[(l_unit + 2) & (HR__MOE_RING - 1)] =
              ring[(l_unit + 1) & (HR__MOE_RING - 1)] < 0
                  ? -1 : tma_claim<STAGE>(p, d.units, d.units1);
      }
      if(!stop && s >= C::STAGES &&
         !moe_ws_wait_empty(p, empty + slot, (unsigned)(s / C::STAGES - 1) & 1u, cmd))
        stop = 1;
      /* the tests' faults: the refill that moe_gemm_tma.cuh's thread 0
       * would leave out at its step s - STAGES + 1 */
      if(!stop && (s < C::STAGES || !tma_drop(p, s - C::STAGES + 1, d.nk)))
        tma_step_load<C, STAGE, G>(p, pipe, full, slot, lun, l_kt, &req);
      if(G) {
        st->slot = slot;
        st->pos0 = lun.pos0;
        st->nvalid = lun.nvalid;
        st->k0 = l_kt * C::BK;
        st->stop = stop;
      }
      if(++l_kt == d.nk) {
        l_kt = 0;
        l_unit++;
      }
    }
    if(G) {
      moe_ws_step my;
      /* the step handed (the first thread comes from its loads: not the
       * warp-aligned barrier) */
      barrier_sync(HR__MOE_WS_PBAR, HR__MOE_WS_PTHREADS);
      my.slot = st->slot;
      my.pos0 = st->pos0;
      my.nvalid = st->nvalid;
      my.k0 = st->k0;
      stop = st->stop;
      barrier_sync(HR__MOE_WS_PBAR, HR__MOE_WS_PTHREADS);   /* and read by all */
      if(!stop)
        moe_ws_gather<C>(p, pipe, full, my, pt, tok_pos0, tok);
    }
  }
}

/* The producer warpgroup, from the kernel's start to the 256's exit: at
 * each meeting, the command word says which stage to load, or to leave. */
static __device__ void moe_ws_producer(const hr__moe_params &p, const moe_route &rt,
                                       uint8_t *smem, const volatile int *cmd)
{
  for(;;) {
    moe_ws_meet();                       /* a stage's start, or the exit */
    const int c = *cmd;
    if(c != 1 && c != 2)                 /* HR__MOE_WS_EXIT */
      return;
    if(c == 1 && moe_gather_on(p))
      moe_ws_produce<moe_tile_big_tma, 1, 1>(p, rt, smem, cmd);
    else if(c == 1)
      moe_ws_produce<moe_tile_big_tma, 1, 0>(p, rt, smem, cmd);
    else
      moe_ws_produce<moe_tile_big_tma, 2, 0>(p, rt, smem, cmd);
    moe_ws_meet();                       /* the stage's end */
  }
}

/* The 256, on their way out of the kernel by any path: the producer
 * leaves too. */
static __device__ __forceinline__ void moe_ws_exit(volatile int *cmd)
{
  if(threadIdx.x == 0)
    *cmd = HR__MOE_WS_EXIT;
  moe_ws_meet();
}

/* The 256, one GEMM stage of the big tile with the producer loading it.
 * 1 when done; 0 when a wait timed out (the caller records it). Starts
 * and ends with the 256 together. */
template <class C, int STAGE, int G>
__device__ int moe_gemm_stage_ws_run(const hr__moe_params &p, const moe_route &rt,
                                     uint8_t *smem, volatile int *cmd)
{
  const int tid = threadIdx.x;
  const moe_stage_dims d = moe_stage_dims_of<C, STAGE>(p, rt);
  const int nk = d.nk, nf = d.nf;
  const auto [pipe, full, empty, ring] = tma_pipe_of<C>(smem);
  const tma_posts g = tma_posts_of<C>(pipe);
  float acc[C::MT][C::NT][4];
  moe_unit un;
  int s, kt = 0, u = 0, slot = 0, dead = 0, ok, run;

  if(tid == 0) {
    *cmd = STAGE;
    if(d.units > 0) {
      moe_ws_barriers_init<C, G>(full, empty);
      ring[0] = tma_claim<STAGE>(p, d.units, d.units1);
      ring[1] = ring[0] < 0 ? -1 : tma_claim<STAGE>(p, d.units, d.units1);
    }
  }
  moe_ws_meet();                         /* start: the producer loads */
  run = d.units > 0 && ring[0] >= 0;
  if(run) {
    un = unit_decode(ring[0], rt, p, nf, C::BN, C::TT_MAJOR);
    tile_zero<C>(acc);
    for(s = 0;; s++) {
      /* as in moe_gemm_stage_tma_run: a thread whose wait timed out goes
       * on, dead, to its unit's end, where the 256 stop together */
      tma_step_mma<C, STAGE, G>(p, pipe, full, empty, s, slot, acc, un.nvalid, dead);
      if(++slot == C::STAGES)
        slot = 0;
      if(++kt == nk) {
        tma_unit_end<C, STAGE>(p, un, acc, pipe);
        kt = 0;
        u++;
        if(HR__SYNC_OR(dead) || ring[u & (HR__MOE_RING - 1)] < 0)
          break;
        un = unit_decode(ring[u & (HR__MOE_RING - 1)], rt, p, nf, C::BN, C::TT_MAJOR);
      }
    }
    tile_drain<C>(acc);
    fence_proxy_async_global();          /* GEMM2's TMA reads h */
  }
  ok = !HR__SYNC_OR(dead);
  if(tid == 0 && !ok)
    *cmd = HR__MOE_WS_ABANDON;           /* a producer waiting on a release stops */
  moe_ws_meet();                         /* end: the producer is done */
  if(tid == 0 && d.units > 0 && ok)
    tma_barriers_inval<C, STAGE, 0>(full, empty, g);
  return ok;
}

/* The stage, in the instantiation for this launch: GEMM1 gathering its
 * token rows (the producer's 128 threads) or not (moe_gather_on). */
template <class C, int STAGE>
__device__ int moe_gemm_stage_ws(const hr__moe_params &p, const moe_route &rt, uint8_t *smem,
                                 volatile int *cmd)
{
  if constexpr(STAGE == 1)
    if(moe_gather_on(p))
      return moe_gemm_stage_ws_run<C, 1, 1>(p, rt, smem, cmd);
  return moe_gemm_stage_ws_run<C, STAGE, 0>(p, rt, smem, cmd);
}

#endif /* HR_MOE_GEMM_WS_CUH */
