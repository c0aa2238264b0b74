/*
 * moe_barrier.cuh: the whole-grid barrier of the MoE kernel, which fails
 * instead of hanging.
 *
 * Counter plus generation: each CTA reads the generation, adds one to the
 * counter, and the last to arrive puts the counter back to 0 and bumps the
 * generation, which releases the others. The counter is always 0 between
 * barriers, so the same words serve every barrier of every launch with no
 * reset.
 *
 * Waiting is bounded. A waiting CTA leaves (returns 0) when
 *   - the launch's timeout passes (%globaltimer): it records the failure;
 *   - the host set the abort word to this launch or a later one (asked by
 *     the first CTA to arrive only): likewise;
 *   - another CTA already recorded a failure for this launch.
 * The first CTA to record wins (atomicMax on sync->fail); it fills the
 * host-mapped error words and writes their seq last. Nothing traps: the
 * kernel just ends, and the CUDA context stays usable.
 */
#ifndef HR_MOE_BARRIER_CUH
#define HR_MOE_BARRIER_CUH

#include "moe_kernel.h"
#include "moe_ptx.cuh"
#include "moe_trace.cuh"

/* Polls between two reads of the host's abort word, less one (a power
 * of 2, less one). A build for a diagnostic may set it. */
#ifndef HR__MOE_ABORT_POLL_MASK
#define HR__MOE_ABORT_POLL_MASK 127u
#endif

/* Record a failure of this launch unless another CTA already did: where
 * (a barrier, or for the agnostic kernel the kind of wait), how far the
 * count had got and what it waited for. */
static __device__ __noinline__ void moe_fail_at(const hr__moe_params &p, int code,
                                         int barrier, int arrived, int expected)
{
  if(atomicMax(&p.sync->fail, p.seq) >= p.seq)
    return;                                   /* someone was first */
  hr__moe_host_words *w = p.host;
  /* A launch refused because an earlier one failed, before the host read
   * that record: the record stays (a barrier timeout must still reach the
   * daemon), and only seq moves on, so the host's wait for this launch
   * finds it. */
  if(code == HR__MOE_FAIL_STALE && w->code != HR__MOE_FAIL_NONE) {
    __threadfence_system();
    w->seq = p.seq;
    __threadfence_system();
    return;
  }
  w->code = code;
  w->barrier = barrier;
  w->arrived = arrived;
  w->expected = expected;
  w->sm = sm_id();
  w->cta = (int)blockIdx.x;
  __threadfence_system();                     /* details before seq */
  w->seq = p.seq;
  __threadfence_system();
}

/* A barrier's failure: it waited for the whole grid. */
static __device__ __forceinline__ void moe_fail(const hr__moe_params &p, int code,
                                         int barrier, int arrived)
{
  moe_fail_at(p, code, barrier, arrived, (int)gridDim.x);
}

/* 1 when launch `seq` has already failed somewhere (its words s). One
 * thread asks. */
static __device__ __forceinline__ int moe_sync_failed(hr__moe_sync *s, unsigned seq)
{
  return ld_relaxed_gpu(&s->fail) == seq;
}

/* The same, for this launch (p.seq read after the word: in a function
 * that reaches p through a generic pointer, the order its loads have). */
static __device__ __forceinline__ int moe_failed(const hr__moe_params &p)
{
  return ld_relaxed_gpu(&p.sync->fail) == p.seq;
}

/* Thread 0's part of the barrier: arrive, then wait for the release.
 * Returns 1 when released, 0 when the launch failed. The words it needs
 * on the way to its arrival come as arguments (s = p.sync, seq = p.seq),
 * read by the kernel from the constant bank: a function of its own sees
 * the parameters only through a generic pointer, and p.sync and p.seq,
 * read that way, were dependent loads before every arrival (p.sync twice:
 * once more after the acquire). */
static __device__ __noinline__ int moe_barrier_wait(const hr__moe_params &p, hr__moe_sync *s,
                                                    unsigned seq, int barrier)
{
  const unsigned expected = gridDim.x;
  unsigned gen, it, arrived;
  unsigned long long t0;

  /* Read the generation before arriving: this barrier cannot complete
   * before we arrive, so this is the generation it will end. */
  gen = ld_acquire_gpu(&s->gen);
  if(moe_sync_failed(s, seq))
    return 0;
  __threadfence();                    /* the CTA's writes, before arrival */
  arrived = atomicAdd(&s->count, 1u);
  if(arrived == expected - 1) {
    atomicExch(&s->count, 0u);        /* last in: reset, then release */
    __threadfence();
    atomicAdd(&s->gen, 1u);
    moe_trace(p, HR__MOE_MARK_ARRIVED + barrier);
    return 1;
  }
  moe_trace(p, HR__MOE_MARK_ARRIVED + barrier);
  t0 = global_timer_ns();
  for(it = 1;; it++) {
    if(ld_acquire_gpu(&s->gen) != gen)
      return 1;
    if((it & 7) != 0) {
      __nanosleep(32);
      continue;
    }
    /* Every 8th poll: has anyone failed, has time run out? */
    if(moe_sync_failed(s, seq))
      return 0;
    if(global_timer_ns() - t0 > p.timeout_ns) {
      moe_fail(p, HR__MOE_FAIL_TIMEOUT, barrier,
               (int)ld_relaxed_gpu(&s->count));
      return 0;
    }
    /* The abort word lives in host memory, and reads of it stall the
     * CTAs still at work: with every waiting CTA asking every 128th poll,
     * the last units of a long GEMM1 took several times as long
     * (docs/decisions.md, "One reader of the abort word"). So only the
     * first CTA to arrive asks, every 128th poll (tens of microseconds);
     * it is resident and waiting for as long as the barrier holds, and
     * an abort it sees reaches the others through sync->fail. */
    if(arrived == 0 && (it & HR__MOE_ABORT_POLL_MASK) == 0 &&
       ld_relaxed_sys(&p.host->abort_seq) >= p.seq) {
      moe_fail(p, HR__MOE_FAIL_ABORT, barrier,
               (int)ld_relaxed_gpu(&s->count));
      return 0;
    }
  }
}

/* The whole CTA: every thread's writes before it are visible to every CTA
 * after it. Returns 0 (in every thread) when the launch failed. */
static __device__ __forceinline__ int grid_barrier(const hr__moe_params &p, int barrier,
                                            int *s_ok)
{
  HR__SYNC();
  if(threadIdx.x == 0)
    *s_ok = moe_barrier_wait(p, p.sync, p.seq, barrier);
  HR__SYNC();
  return *s_ok;
}

#endif /* HR_MOE_BARRIER_CUH */
