/*
 * moe_backward.cu: the mega-MoE backward, one persistent launch, in two
 * kernels that run the same tiles (moe_backward.h lists the stages):
 *
 *   the barrier kernel   route | barrier 20 | dgu tiles | barrier 21 |
 *                        dx, dW1, dW2 tiles | barrier 22 | combine
 *   the agnostic kernel  every CTA takes tasks in ticket order (route
 *                        pieces, dgu tiles, dx tiles, dW groups,
 *                        combines) and a task waits only for the count of
 *                        finished tasks it needs, all of them taken
 *                        before it by CTAs that are running
 *
 * Within a stage the tiles are claimed from a counter one ahead (the
 * claim's round trip hides behind the tile before). Each output element
 * is one tile's, summed in a fixed order, so the results do not depend on
 * the grid or the kernel. kernels/moe_ref.c (hr_moe_ref_backward) is the
 * same backward on the CPU.
 */
#include "moe_bwd_tiles.cuh"

#include "headroom_moe.h"

/* ---- stage 1: route ---------------------------------------------------- */

/* The place -> pair table for pairs [lo, hi), which this CTA just placed
 * (pos_of is its own writes, ordered by moe_route_place's __syncthreads). */
static __device__ void bwd_invert(const hr__moe_bwd_params &p, int lo, int hi)
{
  for(int pi = lo + (int)threadIdx.x; pi < hi; pi += HR__MOE_THREADS) {
    const int pos = p.f.pos_of[pi];
    if(pos >= 0)
      p.sorted_pair[pos] = pi;
  }
  __syncthreads();
}

/* ---- stage 4: combine -------------------------------------------------- */

static __device__ __forceinline__ void bwd_combine(const hr__moe_bwd_params &p, int lo, int hi)
{
  bwd_comb a;
  a.pos_of = p.f.pos_of;
  a.rows = p.dxrow;
  a.dwp = p.dwp;
  a.ni = p.f.I / HR__MOE_BWD_DGU_N;
  a.dx = p.dx;
  a.dtw = p.dtw;
  a.k = p.f.k;
  a.H = p.f.H;
  bwd_combine_rows(a, lo, hi);
}

/* ---- the kernels ------------------------------------------------------- */

/* Thread 0: leave at once when this launch already failed, or (stale)
 * an earlier one failed and its words were never cleared. */
static __device__ __forceinline__ int bwd_start_ok(const hr__moe_params &f)
{
  const unsigned fail = ld_relaxed_gpu(&f.sync->fail);
  if(fail != 0 && fail != f.seq)
    moe_fail(f, HR__MOE_FAIL_STALE, -1, 0);
  return fail == 0;
}

template <int KEEP>
__global__ void __launch_bounds__(HR__MOE_THREADS, 1)
hr__moe_bwd_kernel(const __grid_constant__ hr__moe_bwd_params p)
{
  extern __shared__ __align__(128) uint8_t smem[];
  __shared__ int s_ok;
  __shared__ int s_warp_sums[HR__MOE_THREADS / 32];
  __shared__ unsigned s_unit;
  const hr__moe_params &f = p.f;
  int *cursor;
  const moe_route rt = bwd_tables(smem, &cursor);

  if(threadIdx.x == 0)
    s_ok = bwd_start_ok(f);
  __syncthreads();
  if(!s_ok)
    return;

  /* 1. route: this CTA's slice, and its places' pairs */
  const int pairs = f.T * f.k;
  const int lo = (int)((long long)pairs * blockIdx.x / gridDim.x);
  const int hi = (int)((long long)pairs * (blockIdx.x + 1) / gridDim.x);
  moe_route_pairs(f, rt, s_warp_sums, lo, hi);
  bwd_invert(p, lo, hi);
  moe_route_tiles(f, rt, HR__MOE_BWD_TILE_M, s_warp_sums);
  const bwd_plan q = bwd_plan_of(f, rt);
  if(!grid_barrier(f, HR__MOE_BWD_BARRIER_ROUTED, &s_ok))
    return;

  /* 2. dgu */
  bwd_claimed(&f.sync->claim[0], (f.skip & HR__MOE_PHASE_GEMM1) ? 0 : q.n_dgu, &s_unit,
              [&](int u) {
                bwd_dgu_tile(p, rt, q, smem, u);
              });
  if(!grid_barrier(f, HR__MOE_BWD_BARRIER_DGU, &s_ok))
    return;
  if(blockIdx.x == 0 && threadIdx.x == 0)
    atomicExch(&f.sync->claim[0], 0u);

  /* 3. the dx rows, dW1, dW2 */
  bwd_claimed(&f.sync->claim[1], q.n_grads, &s_unit, [&](int u) {
    /* the benchmark hook may leave the dx rows or the dW groups out */
    if(!(f.skip & (u < q.n_dx ? HR__MOE_PHASE_GEMM2 : HR__MOE_PHASE_DW)))
      bwd_grads_tile<BWD_GRAD_DEPTH_BAR, KEEP>(p, rt, q, smem, u);
  });
  if(!grid_barrier(f, HR__MOE_BWD_BARRIER_GRADS, &s_ok))
    return;
  if(blockIdx.x == 0 && threadIdx.x == 0)
    atomicExch(&f.sync->claim[1], 0u);

  /* 4. combine: a contiguous range of tokens a CTA */
  if(!(f.skip & HR__MOE_PHASE_COMBINE))
    bwd_combine(p, (int)((long long)f.T * blockIdx.x / gridDim.x),
              (int)((long long)f.T * (blockIdx.x + 1) / gridDim.x));
}

/* ---- the agnostic kernel ----------------------------------------------- */

/* Thread 0: wait until *count reaches `target` (tasks taken before this
 * one, by running CTAs). 0 when the launch failed meanwhile, timed out
 * (recorded as wait `which`) or was aborted. */
static __device__ __noinline__ int bwd_wait_count(const hr__moe_params &f, unsigned *count,
                                                  unsigned target, int which)
{
  unsigned long long t0;
  unsigned it, v;
  if(ld_acquire_gpu(count) >= target)
    return 1;
  t0 = global_timer_ns();
  for(it = 1;; it++) {
    v = ld_acquire_gpu(count);
    if(v >= target)
      return 1;
    __nanosleep(64);
    if((it & 7) != 0)
      continue;
    if(moe_failed(f))
      return 0;
    if(global_timer_ns() - t0 > f.timeout_ns) {
      moe_fail_at(f, HR__MOE_FAIL_TIMEOUT, which, (int)v, (int)target);
      return 0;
    }
    if((it & HR__MOE_ABORT_POLL_MASK) == 0 && ld_relaxed_sys(&f.host->abort_seq) >= f.seq) {
      moe_fail_at(f, HR__MOE_FAIL_ABORT, which, (int)v, (int)target);
      return 0;
    }
  }
}

/* The whole CTA waits (bwd_wait_count), unless it already saw the count
 * complete (*seen). 0 in every thread when the launch failed. */
static __device__ __forceinline__ int bwd_wait(const hr__moe_params &f, unsigned *count,
                                               unsigned target, int which, int *seen, int *s_ok)
{
  if(*seen)
    return 1;
  if(threadIdx.x == 0)
    *s_ok = bwd_wait_count(f, count, target, which);
  __syncthreads();
  *seen = *s_ok;
  return *s_ok;
}

/* After a task: the CTA's writes published by one release add. */
static __device__ __forceinline__ void bwd_done(unsigned *count)
{
  __syncthreads();
  if(threadIdx.x == 0)
    red_add_release_gpu(count, 1u);
}

/* Task list, in ticket order:
 *   [0, np)          route pieces of HR__MOE_BWD_PIECE pairs
 *   then n_dgu       dgu tiles             (wait: every route piece)
 *   then n_dx        dx row tiles          (wait: every dgu tile)
 *   then n_dwg       dW groups             (wait: every route piece and
 *                    every dgu tile)
 *   then ncomb       combines of 32 tokens (wait: every route piece and
 *                    every dx row tile: with no valid pair there is none;
 *                    after the dW groups, the dx rows are long done)
 * The counts of finished tasks: scatter_done (route pieces), g1_total
 * (dgu tiles), combine_done (dx row tiles); the last CTA to leave puts
 * them and the ticket back to 0. */
template <int KEEP>
__global__ void __launch_bounds__(HR__MOE_THREADS, 1)
hr__moe_bwd_agnostic_kernel(const __grid_constant__ hr__moe_bwd_params p)
{
  extern __shared__ __align__(128) uint8_t smem[];
  __shared__ int s_ok;
  __shared__ int s_warp_sums[HR__MOE_THREADS / 32];
  __shared__ unsigned s_unit;
  const hr__moe_params &f = p.f;
  hr__moe_agn *agn = f.agn;
  int *cursor;
  const moe_route rt = bwd_tables(smem, &cursor);
  int seen_route = 0, seen_dgu = 0, seen_dx = 0, tasks = 0;

  if(threadIdx.x == 0)
    s_ok = bwd_start_ok(f);
  __syncthreads();
  if(!s_ok)
    return;

  /* Every CTA's tables: the counts, offsets and M tiles (no placing). */
  const int pairs = f.T * f.k;
  moe_route_pairs(f, rt, s_warp_sums, 0, 0);
  moe_route_tiles(f, rt, HR__MOE_BWD_TILE_M, s_warp_sums);
  const bwd_plan q = bwd_plan_of(f, rt);
  const int np = (pairs + HR__MOE_BWD_PIECE - 1) / HR__MOE_BWD_PIECE;
  /* none where the combine is left out (the benchmark hook; the EP
   * backward's agnostic form, which combines at the sources) */
  const int ncomb = (f.skip & HR__MOE_PHASE_COMBINE)
                        ? 0
                        : (f.T + HR__MOE_BWD_COMBINE_TOKENS - 1) / HR__MOE_BWD_COMBINE_TOKENS;
  const int at_dgu = np, at_dx = at_dgu + q.n_dgu, at_dw = at_dx + q.n_dx;
  const int at_comb = at_dw + q.n_dwg, total = at_comb + ncomb;

  if(threadIdx.x == 0)
    s_unit = atomicAdd(&agn->ticket, 1u);
  __syncthreads();
  for(;;) {
    const int u = (int)s_unit;
    __syncthreads();
    if(u >= total)
      break;
    unsigned next = 0;
    if(threadIdx.x == 0) {
      next = atomicAdd(&agn->ticket, 1u);
      /* an abort is seen in a wait, or here every 16th task */
      int ok = !moe_failed(f);
      if(ok && (++tasks & 15) == 0 && ld_relaxed_sys(&f.host->abort_seq) >= f.seq) {
        moe_fail_at(f, HR__MOE_FAIL_ABORT, HR__MOE_BWD_WAIT_CLAIM, u, total);
        ok = 0;
      }
      s_ok = ok;
    }
    __syncthreads();
    if(!s_ok)
      return;
    if(u < at_dgu) {                              /* a route piece */
      const int lo = u * HR__MOE_BWD_PIECE, hi = min(pairs, lo + HR__MOE_BWD_PIECE);
      for(int e = (int)threadIdx.x; e < f.E; e += HR__MOE_THREADS)
        cursor[e] = rt.off[e];
      __syncthreads();
      moe_route_advance(f, cursor, 0, lo);
      moe_route_place(f, cursor, lo, hi);
      bwd_invert(p, lo, hi);
      bwd_done(&agn->scatter_done);
    } else if(u < at_dx) {                        /* a dgu tile */
      if(!bwd_wait(f, &agn->scatter_done, (unsigned)np, HR__MOE_BWD_WAIT_ROUTE, &seen_route,
                   &s_ok))
        return;
      bwd_dgu_tile(p, rt, q, smem, u - at_dgu);
      bwd_done(&agn->g1_total);
    } else if(u < at_dw) {                        /* a dx row tile */
      if(!bwd_wait(f, &agn->g1_total, (unsigned)q.n_dgu, HR__MOE_BWD_WAIT_DGU, &seen_dgu, &s_ok))
        return;
      bwd_grads_tile<BWD_GRAD_DEPTH_AGN, KEEP>(p, rt, q, smem, u - at_dx);
      bwd_done(&agn->combine_done);
    } else if(u < at_comb) {                      /* a dW group */
      if(!bwd_wait(f, &agn->scatter_done, (unsigned)np, HR__MOE_BWD_WAIT_ROUTE, &seen_route,
                   &s_ok) ||
         !bwd_wait(f, &agn->g1_total, (unsigned)q.n_dgu, HR__MOE_BWD_WAIT_DGU, &seen_dgu, &s_ok))
        return;
      bwd_dw_group<BWD_GRAD_DEPTH_AGN, KEEP>(p, rt, q, smem, u - at_dw);
    } else {                                      /* a combine */
      if(!bwd_wait(f, &agn->scatter_done, (unsigned)np, HR__MOE_BWD_WAIT_ROUTE, &seen_route,
                   &s_ok) ||
         !bwd_wait(f, &agn->combine_done, (unsigned)q.n_dx, HR__MOE_BWD_WAIT_DX, &seen_dx, &s_ok))
        return;
      const int lo = (u - at_comb) * HR__MOE_BWD_COMBINE_TOKENS;
      bwd_combine(p, lo, min(f.T, lo + HR__MOE_BWD_COMBINE_TOKENS));
    }
    if(threadIdx.x == 0)
      s_unit = next;
    __syncthreads();
  }

  /* The last CTA out puts the schedule back for the next launch. */
  __syncthreads();
  if(threadIdx.x == 0) {
    __threadfence();
    if(atomicAdd(&agn->exited, 1u) == gridDim.x - 1) {
      atomicExch(&agn->ticket, 0u);
      atomicExch(&agn->scatter_done, 0u);
      atomicExch(&agn->g1_total, 0u);
      atomicExch(&agn->combine_done, 0u);
      atomicExch(&agn->exited, 0u);
    }
  }
}

/* ---- launch ------------------------------------------------------------ */

extern "C" cudaError_t hr__moe_bwd_prepare(void)
{
  const void *k[] = { (const void *)hr__moe_bwd_kernel<0>, (const void *)hr__moe_bwd_kernel<1>,
                      (const void *)hr__moe_bwd_agnostic_kernel<0>,
                      (const void *)hr__moe_bwd_agnostic_kernel<1> };
  cudaError_t e = cudaSuccess;
  for(int i = 0; i < 4 && e == cudaSuccess; i++)
    e = cudaFuncSetAttribute(k[i], cudaFuncAttributeMaxDynamicSharedMemorySize, BWD_SMEM_BYTES);
  return e;
}

extern "C" cudaError_t hr__moe_bwd_launch(const hr__moe_bwd_params *p, int grid, int agnostic,
                                          int coop, cudaStream_t stream)
{
  cudaLaunchConfig_t cfg = {};
  cudaLaunchAttribute attr[1] = {};

  cfg.gridDim = dim3((unsigned)grid, 1, 1);
  cfg.blockDim = dim3(HR__MOE_THREADS, 1, 1);
  cfg.dynamicSmemBytes = BWD_SMEM_BYTES;
  cfg.stream = stream;
  if(coop && !agnostic) {
    attr[0].id = cudaLaunchAttributeCooperative;
    attr[0].val.cooperative = 1;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
  }
  /* the dW groups keep their shared operand where nearly every expert's
   * pairs fit (bwd_dw_group) */
  if((long long)p->f.T * p->f.k <= (long long)p->f.E * BWD_DW_KEEP_PAIRS)
    return cudaLaunchKernelEx(&cfg, agnostic ? hr__moe_bwd_agnostic_kernel<1> : hr__moe_bwd_kernel<1>,
                              *p);
  return cudaLaunchKernelEx(&cfg, agnostic ? hr__moe_bwd_agnostic_kernel<0> : hr__moe_bwd_kernel<0>,
                            *p);
}
