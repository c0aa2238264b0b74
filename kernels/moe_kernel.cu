/*
 * moe_kernel.cu: the persistent mega-MoE forward, one launch, four stages
 * separated by three whole-grid barriers:
 *
 *   1. route    count pairs per expert, scan, place (moe_route.cuh)
 *   -- barrier 0 --
 *   2. GEMM1    W1 * x, SwiGLU -> h                   (moe_gemm.cuh)
 *   -- barrier 1 --
 *   3. GEMM2    W2 * h -> ypair
 *   -- barrier 2 --
 *   4. combine  y[t] = sum_j w[t,j] * ypair[pos_of[t,j]]   (below)
 *
 * One CTA per SM (the dynamic shared memory sees to it), any grid size; a
 * barrier that cannot complete times out into the error word instead of
 * hanging (moe_barrier.cuh). kernels/moe_ref.c is the same forward on the
 * CPU.
 *
 * Built with HR_EXP_PRODUCER_WG, each CTA has a producer warpgroup
 * beside its 256 threads, which loads the big tile's stages
 * (moe_gemm_ws.cuh); the rest of the kernel is the same.
 */
#ifdef HR_EXP_PRODUCER_WG
#define HR__MOE_WS 1
#endif
#include "moe_host.h"
#include "moe_kernel.h"

#include "moe_barrier.cuh"
#include "moe_combine.cuh"
#include "moe_gemm.cuh"
#include "moe_gemm_claim.cuh"
#include "moe_gemm_tma.cuh"
#include "moe_ptx.cuh"
#include "moe_route.cuh"
#include "moe_stages.cuh"

#include "headroom_moe.h"

/* The dynamic shared memory (moe_gemm.cuh) beside this kernel's static. */
static_assert(HR__MOE_SMEM_BYTES + 128 <= 227 * 1024, "fits an SM, with the static part");

#if HR__MOE_WS
#define HR__MOE_KERNEL_THREADS HR__MOE_WS_THREADS
#else
#define HR__MOE_KERNEL_THREADS HR__MOE_THREADS
#endif

/* The forward, the 256 threads' part (all of it without a producer
 * warpgroup). ws_cmd: the producer's command word (HR__MOE_WS). */
static __device__ __forceinline__ void moe_forward(const hr__moe_params &p, uint8_t *smem,
                                                   const moe_route &rt, volatile int *ws_cmd)
{
  __shared__ int s_ok;
  __shared__ int s_warp_sums[HR__MOE_THREADS / 32];
  __shared__ int s_nonempty;
  int tile, i;

  /* A CTA that starts after its launch already failed (it was waiting for
   * an SM while the others timed out) leaves at once. So does every CTA
   * when an earlier launch failed and nobody cleared the barrier words
   * (its partial arrivals would corrupt our count): every CTA reads the
   * same word, so all of them leave. */
  if(threadIdx.x == 0) {
    const unsigned fail = ld_relaxed_gpu(&p.sync->fail);
    s_ok = fail == 0;
    if(fail != 0 && fail != p.seq)
      moe_fail(p, HR__MOE_FAIL_STALE, -1, 0);
    s_nonempty = 0;
  }
  HR__SYNC();
  if(!s_ok)
    return;
  moe_trace(p, HR__MOE_MARK_START);
  moe_trace_sm(p);

  /* 1. route: this CTA's slice of the pairs (none where the benchmark
   * hook leaves the route phase out: the tables are still made). At few
   * pairs (HR__MOE_ROUTE_ALL_MAX_PAIRS) every CTA places them all, each
   * pair to the same place with the same values in every CTA, so no CTA
   * needs another's placing and barrier 0 goes (unless the TMA tile must
   * read x rows that other CTAs copy). */
  const int pairs = p.T * p.k, runs = moe_phase_runs(p, HR__MOE_PHASE_ROUTE);
  const int slo = (int)((long long)pairs * blockIdx.x / gridDim.x);
  const int shi = runs ? (int)((long long)pairs * (blockIdx.x + 1) / gridDim.x) : slo;
  const int whole = pairs <= HR__MOE_ROUTE_ALL_MAX_PAIRS;
  const int lo = whole ? 0 : slo, hi = whole ? (runs ? pairs : 0) : shi;
  moe_route_pairs(p, rt, s_warp_sums, lo, hi);
  if(runs == 2)
    moe_route_pairs(p, rt, s_warp_sums, lo, hi);
  /* The tile shape follows the pairs per expert that has any: a function
   * of the routing alone, so the same for every grid. */
  for(i = threadIdx.x; i < p.E; i += HR__MOE_THREADS)
    if(rt.cnt[i] > 0)
      atomicAdd(&s_nonempty, 1);
  HR__SYNC();
  tile = moe_pick_tile(rt.off[p.E], s_nonempty, p.I, p.flags, 0);
  moe_route_tiles(p, rt, moe_tile_bn(tile), s_warp_sums);
  moe_trace_route(p, HR__MOE_ROUTE_MARK_TILED);
  /* The TMA tile, unless its GEMM1 gathers, reads the x rows in expert
   * order: the slice's, copied (pos_of is this CTA's own, from
   * moe_route_pairs). */
  const int copies = moe_tile_copies_xs(p, tile);
  if(copies)
    moe_copy_xs(p, slo, shi);
  moe_trace(p, HR__MOE_MARK_ROUTED);
  if((!whole || copies) && !grid_barrier(p, 0, &s_ok))
    return;
  moe_trace(p, HR__MOE_MARK_G1_START);

  /* 2. GEMM1 + SwiGLU (each CTA's units come twice, or never, through
   * the benchmark hook: moe_gemm_stage) */
  if(!moe_gemm<1>(p, rt, smem, tile, ws_cmd))
    return;
  moe_trace(p, HR__MOE_MARK_G1_END);
  if(!grid_barrier(p, 1, &s_ok))
    return;
  moe_trace(p, HR__MOE_MARK_G2_START);
  moe_claims_reset(p, 1);

  /* 3. GEMM2 */
  if(!moe_gemm<2>(p, rt, smem, tile, ws_cmd))
    return;
  moe_trace(p, HR__MOE_MARK_G2_END);
  if(!grid_barrier(p, 2, &s_ok))
    return;
  moe_trace(p, HR__MOE_MARK_C_START);
  moe_claims_reset(p, 2);

  /* 4. combine */
  for(i = moe_phase_runs(p, HR__MOE_PHASE_COMBINE); i > 0; i--)
    moe_combine_grid(moe_comb_of(p), p.T);   /* stage 4 */
  if(p.trace) {               /* the CTA's last stores, then the time */
    HR__SYNC();
    moe_trace(p, HR__MOE_MARK_END);
  }
}

__global__ void __launch_bounds__(HR__MOE_KERNEL_THREADS, 1)
hr__moe_kernel(const __grid_constant__ hr__moe_params p)
{
  extern __shared__ __align__(128) uint8_t smem[];
  const moe_route rt = moe_route_tables((int *)(smem + HR__MOE_GEMM_SMEM));
#if HR__MOE_WS
  __shared__ int s_ws_cmd;
  if(threadIdx.x >= HR__MOE_THREADS) {
    setmaxnreg_dec<HR__MOE_WS_REGS_PRODUCER>();
    moe_ws_producer(p, rt, smem, &s_ws_cmd);
    return;
  }
  setmaxnreg_inc<HR__MOE_WS_REGS_MMA>();
  moe_forward(p, smem, rt, &s_ws_cmd);
  moe_ws_exit(&s_ws_cmd);
#else
  moe_forward(p, smem, rt, nullptr);
#endif
}

extern "C" int hr__moe_smem_bytes(void)
{
  return HR__MOE_SMEM_BYTES;
}

extern "C" cudaError_t hr__moe_prepare(void)
{
  return cudaFuncSetAttribute(hr__moe_kernel,
                              cudaFuncAttributeMaxDynamicSharedMemorySize,
                              HR__MOE_SMEM_BYTES);
}

extern "C" cudaError_t hr__moe_launch(const hr__moe_params *p, int grid,
                                      int coop, int cluster,
                                      cudaStream_t stream)
{
  cudaLaunchConfig_t cfg;
  cudaLaunchAttribute attr[2];

  hr__moe_launch_config(&cfg, attr, grid, HR__MOE_KERNEL_THREADS, HR__MOE_SMEM_BYTES, coop,
                        cluster, stream);
  return cudaLaunchKernelEx(&cfg, hr__moe_kernel, *p);
}
