/*
 * moe_ep_agnostic.cu: the expert-parallel forward's and backward's
 * residency-agnostic form (a lease in the agnostic mode, or HR_MODE_AGNOSTIC): no part of a
 * rank's forward waits for a CTA of its own that is not running, so a
 * rank whose grid is partly held by another kernel completes, late, and
 * its peers wait for it (bounded) instead of timing out at a grid
 * barrier. The barrier form's stages (moe_ep.cu) become launches on the
 * rank's stream, each of which either spreads over any number of CTAs
 * with no wait between them, or is one CTA:
 *
 *   dispatch   grid CTAs: this rank's tokens to the ranks that need them
 *              (ep_dispatch: each CTA its slice, counted over the whole
 *              table, no wait)
 *   exchange   1 CTA: the rows sent to each rank, counted again, released
 *              in every rank; the wait for every rank's rows; the ids of
 *              each region's unused rows set to -1 (so the single-GPU
 *              kernel below may read the whole received table)
 *   forward    hr_moe_forward's agnostic kernel (moe_agnostic.cu) over
 *              the received table, its combine left out: each pair's
 *              unweighted output row, bitwise the barrier kernel's (the
 *              backward: hr_moe_backward's agnostic kernel, each pair's
 *              dx row and d(w) partials, dW of this rank's experts)
 *   return     grid CTAs: each received pair's row (and d(w)) to its
 *              source
 *   exchange   1 CTA: the return released in every rank; the wait for
 *              every rank's rows back
 *   combine    grid CTAs: the forward's or the backward's combine over
 *              this rank's tokens
 *
 * A launch on the stream starts only once the one before has ended, so
 * every CTA of a spreading part runs with whatever SMs are free, and a
 * one-CTA part needs one SM. The waits for peers are the barrier form's
 * (bounded, polling the peers' fail words and the abort word). Each part
 * first looks at this epoch's error word and leaves when the epoch has
 * failed; where the failure is this rank's own (a wait of the agnostic
 * kernel timed out), it tells the peers first.
 */
#include "moe_ep_combine.cuh"
#include "moe_host.h"

/* The dispatch's scratch, dynamic shared memory (below 48 KiB: no
 * attribute needed). */
#define EP_AGN_SMEM (EP_SC_INTS * 4)

/* Thread 0 of every CTA: 1 to go on. 0 when the epoch already failed:
 * here, where the failure was this rank's own and recorded by a part
 * that knows nothing of peers (the agnostic kernel), the peers are told
 * (ep_after_local_fail: once an epoch); or, at the first part, an
 * earlier failed launch left the words dirty, or a peer already failed
 * this epoch (ep_start_ok). */
static __device__ int ep_agn_go(const hr__moe_params &p, const hr__moe_ep_group &e, int first)
{
  const unsigned fail = ld_relaxed_gpu(&p.sync->fail);
  if(first)
    return ep_start_ok(p, e);
  if(fail == p.seq) {
    ep_after_local_fail(p, e);
    return 0;
  }
  return fail == 0;
}

__global__ void __launch_bounds__(HR__MOE_THREADS, 1)
hr__moe_ep_agn_dispatch(const __grid_constant__ hr__moe_ep_params ep)
{
  extern __shared__ __align__(128) uint8_t smem[];
  __shared__ int s_ok;
  if(threadIdx.x == 0)
    s_ok = ep_agn_go(ep.p, ep.g, 1);
  __syncthreads();
  if(!s_ok)
    return;
  if(ep.g.T > 0)
    ep_dispatch(ep.p, ep.g, (int *)smem);
  __syncthreads();
  if(threadIdx.x == 0)
    ep_fence_sys();                    /* the rows, before the kernel's end */
}

/* Rows this rank sends to each rank (ep_dispatch's count, one CTA). */
static __device__ void ep_agn_count(const hr__moe_params &p, const hr__moe_ep_group &e,
                                    int *rows)
{
  if(threadIdx.x < HR_MOE_EP_MAX_RANKS)
    rows[threadIdx.x] = 0;
  __syncthreads();
  for(int t = threadIdx.x; t < e.T; t += HR__MOE_THREADS) {
    const unsigned m = ep_mask(p, e, t);
    for(int d = 0; d < e.nranks; d++)
      if((m >> d) & 1u)
        atomicAdd(&rows[d], 1);
  }
  __syncthreads();
}

/* The received ids of each region's rows past those its source sent, -1:
 * left from an earlier epoch, they would route stale pairs. */
static __device__ void ep_agn_mark_unused(const hr__moe_params &p, const hr__moe_ep_group &e,
                                          const int *cs)
{
  int32_t *ids = ep_recv_ids(e, e.rank);
  for(int s = 0; s < e.nranks; s++) {
    const long long from = (long long)s * e.cap * p.k + (cs[s + 1] - cs[s]);
    const long long to = (long long)(s + 1) * e.cap * p.k;
    for(long long i = from + threadIdx.x; i < to; i += HR__MOE_THREADS)
      ids[i] = -1;
  }
  __syncthreads();
  if(threadIdx.x == 0)
    __threadfence();                   /* before the kernel's end */
}

/* One CTA. which 0: release this rank's dispatch in every rank, wait for
 * every rank's, keep their scan (esync->cs), mark the unused rows.
 * which 1: release this rank's return, wait for every rank's. */
__global__ void __launch_bounds__(HR__MOE_THREADS, 1)
hr__moe_ep_agn_exchange(const __grid_constant__ hr__moe_ep_params ep, int which)
{
  __shared__ int s_ok;
  __shared__ int s_rows[HR_MOE_EP_MAX_RANKS];
  __shared__ int s_cs[HR_MOE_EP_MAX_RANKS + 1];
  const hr__moe_params &p = ep.p;
  const hr__moe_ep_group &e = ep.g;

  if(threadIdx.x == 0)
    s_ok = ep_agn_go(p, e, 0);
  __syncthreads();
  if(!s_ok)
    return;
  if(which == 0) {
    ep_agn_count(p, e, s_rows);
    if(threadIdx.x == 0) {
      ep_signal(p, e, 0, s_rows);
      s_ok = ep_wait_dispatch(p, e, s_cs);
      if(s_ok)
        for(int i = 0; i <= e.nranks; i++)
          e.esync->cs[i] = s_cs[i];
    }
    __syncthreads();
    if(s_ok)
      ep_agn_mark_unused(p, e, s_cs);
  } else if(threadIdx.x == 0) {
    ep_signal(p, e, 1, NULL);
    ep_wait_all(p, e, 1, HR_MOE_EP_WAIT_RETURN, NULL);
  }
}

/* The pairs' rows (the forward's output rows; the backward's dx rows and,
 * with dwp, their ni d(w) partials) back to their sources. */
__global__ void __launch_bounds__(HR__MOE_THREADS, 1)
hr__moe_ep_agn_return(const __grid_constant__ hr__moe_ep_params ep, const uint16_t *rows,
                      const float *dwp, int ni)
{
  __shared__ int s_ok;
  __shared__ int s_cs[HR_MOE_EP_MAX_RANKS + 1];
  if(threadIdx.x == 0) {
    s_ok = ep_agn_go(ep.p, ep.g, 0) && ep_return_ok(ep.p, ep.g);
    for(int i = 0; i <= ep.g.nranks; i++)
      s_cs[i] = __ldcg(&ep.g.esync->cs[i]);
  }
  __syncthreads();
  if(!s_ok)
    return;
  ep_return(ep.p, ep.g, s_cs, rows, dwp, ni);
  __syncthreads();
  if(threadIdx.x == 0)
    ep_fence_sys();
}

/* The combine over this rank's tokens: the forward's (moe_combine.cuh),
 * or the backward's (dx and d(w), bwd_combine_rows). */
__global__ void __launch_bounds__(HR__MOE_THREADS, 1)
hr__moe_ep_agn_combine(const __grid_constant__ hr__moe_ep_params ep, int backward)
{
  __shared__ int s_ok;
  const hr__moe_ep_group &e = ep.g;
  if(threadIdx.x == 0)
    s_ok = ep_agn_go(ep.p, e, 0);
  __syncthreads();
  if(!s_ok || e.T == 0)
    return;
  if(backward)
    ep_bwd_combine(ep.p, e);
  else
    ep_combine(ep.p, e);
}

extern "C" cudaError_t hr__moe_ep_agn_launch(const hr__moe_ep_params *e,
                                             const hr__moe_bwd_params *b, int grid,
                                             cudaStream_t stream)
{
  cudaError_t ce;

  hr__moe_ep_agn_dispatch<<<grid, HR__MOE_THREADS, EP_AGN_SMEM, stream>>>(*e);
  hr__moe_ep_agn_exchange<<<1, HR__MOE_THREADS, 0, stream>>>(*e, 0);
  /* the single-GPU agnostic kernel over the received rows; its combine
   * is this one's, at the sources: left out (the benchmark hook's bit,
   * 0 elsewhere) */
  if(b) {
    hr__moe_bwd_params f = *b;
    f.f.skip |= HR__MOE_PHASE_COMBINE;
    ce = hr__moe_bwd_launch(&f, grid, 1, 0, stream);
  } else {
    hr__moe_params f = e->p;
    f.skip |= HR__MOE_PHASE_COMBINE;
    ce = hr__moe_agnostic_launch(&f, grid, stream);
  }
  if(ce != cudaSuccess)
    return ce;
  if(b)
    hr__moe_ep_agn_return<<<grid, HR__MOE_THREADS, 0, stream>>>(
        *e, b->dxrow, b->dwp, b->f.I / HR__MOE_BWD_DGU_N);
  else
    hr__moe_ep_agn_return<<<grid, HR__MOE_THREADS, 0, stream>>>(*e, e->p.ypair, NULL, 0);
  hr__moe_ep_agn_exchange<<<1, HR__MOE_THREADS, 0, stream>>>(*e, 1);
  hr__moe_ep_agn_combine<<<grid, HR__MOE_THREADS, 0, stream>>>(*e, b != NULL);
  return cudaGetLastError();
}
