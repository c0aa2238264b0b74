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
 * Every wait is bounded by the launch's timeout, on both sides.
 *
 * GEMM1's token rows always come from the copy in expert order
 * (moe_copy_xs): the gather of moe_gemm_tma.cuh is the MMA threads' work,
 * which this kernel takes off them.
 */
#ifndef HR_MOE_GEMM_WS_CUH
#define HR_MOE_GEMM_WS_CUH

#include "moe_gemm_tma.cuh"

/* Threads a CTA: the 256 of every stage, then the producer warpgroup. */
#define HR__MOE_WS_THREADS (HR__MOE_THREADS + 128)
/* The named barrier the two sides meet on (1 is HR__SYNC's). */
#define HR__MOE_WS_BAR 2
/* Registers a thread after setmaxnreg: 256 x 232 + 128 x 40 = 64512 of the
 * SM's 65536 (168 a thread at launch). */
#define HR__MOE_WS_REGS_MMA 232
#define HR__MOE_WS_REGS_PRODUCER 40
/* The command word's values besides a stage (1, 2) to load. */
#define HR__MOE_WS_EXIT 0

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
  asm volatile("barrier.sync %0, %1;\n" :: "r"(HR__MOE_WS_BAR), "r"(HR__MOE_WS_THREADS)
               : "memory");
}

/* The producer's thread (the first of its warpgroup), between a stage's
 * start and end: every step of the units it claims, each loaded once its
 * slot is released. Returns when the ring says the run ends, or when a
 * release never came (the MMA warps then time out on the slot they wait
 * for, and the launch fails). */
template <class C, int STAGE>
static __device__ void moe_ws_produce(const hr__moe_params &p, const moe_route &rt,
                                      uint8_t *smem)
{
  const moe_stage_dims d = moe_stage_dims_of<C, STAGE>(p, rt);
  uint8_t *const pipe = moe_pipe<C>(smem);
  uint64_t *const full = (uint64_t *)(pipe + C::PIPE_BYTES);
  uint64_t *const empty = full + C::STAGES;
  int *const ring = (int *)(empty + C::STAGES);
  moe_unit lun;
  int s, slot, l_unit = 0, l_kt = 0;

  if(d.units == 0 || ring[0] < 0)
    return;
  /* the inputs were written through the generic proxy (the x rows by the
   * route stage, h by GEMM1) and published by the grid barrier the MMA
   * threads passed before the start */
  fence_proxy_async_global();
  for(s = 0;; s++) {
    if(l_kt == 0) {
      if(!tma_next_unit<C>(p, rt, ring, l_unit, d.nf, lun))
        return;
      ring[(l_unit + 2) & (HR__MOE_RING - 1)] =
          ring[(l_unit + 1) & (HR__MOE_RING - 1)] < 0 ? -1
                                                      : tma_claim<STAGE>(p, d.units, d.units1);
    }
    slot = s % C::STAGES;
    if(s >= C::STAGES &&
       !mbar_wait(p, empty + slot, (unsigned)(s / C::STAGES - 1) & 1u))
      return;
    /* the tests' faults: the refill that moe_gemm_tma.cuh's thread 0
     * would leave out at its step s - STAGES + 1 */
    if(s < C::STAGES || !tma_drop(p, s - C::STAGES + 1, d.nk))
      tma_step_load<C, STAGE, 0>(p, pipe, full, slot, lun, l_kt, NULL);
    if(++l_kt == d.nk) {
      l_kt = 0;
      l_unit++;
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
    if(c == HR__MOE_WS_EXIT)
      return;
    if(threadIdx.x == HR__MOE_THREADS) {
      if(c == 1)
        moe_ws_produce<moe_tile_big_tma, 1>(p, rt, smem);
      else
        moe_ws_produce<moe_tile_big_tma, 2>(p, rt, smem);
    }
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
template <class C, int STAGE>
__device__ int moe_gemm_stage_ws(const hr__moe_params &p, const moe_route &rt, uint8_t *smem,
                                 volatile int *cmd)
{
  const int tid = threadIdx.x;
  const moe_stage_dims d = moe_stage_dims_of<C, STAGE>(p, rt);
  const int nk = d.nk, nf = d.nf;
  uint8_t *const pipe = moe_pipe<C>(smem);
  uint64_t *const full = (uint64_t *)(pipe + C::PIPE_BYTES);
  uint64_t *const empty = full + C::STAGES;
  int *const ring = (int *)(empty + C::STAGES);
  const tma_posts g = tma_posts_of<C>(pipe);
  float acc[C::MT][C::NT][4];
  moe_unit un;
  int s, kt = 0, u = 0, slot = 0, dead = 0, ok, run;

  if(tid == 0) {
    *cmd = STAGE;
    if(d.units > 0) {
      tma_barriers_init<C, STAGE, 0>(full, empty, g);
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
      tma_step_mma<C, STAGE, 0>(p, pipe, full, empty, s, slot, acc, un.nvalid, dead);
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
  moe_ws_meet();                         /* end: the producer is done */
  if(tid == 0 && d.units > 0 && ok)
    tma_barriers_inval<C, STAGE, 0>(full, empty, g);
  return ok;
}

#endif /* HR_MOE_GEMM_WS_CUH */
