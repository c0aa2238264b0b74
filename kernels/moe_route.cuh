/*
 * moe_route.cuh: stage 1 of the MoE kernel, routing.
 *
 * Every CTA counts the (token, slot) pairs per expert over the whole
 * routing table and scans the counts itself, so the counts and offsets sit
 * in every CTA's shared memory without a barrier. Each CTA then places its
 * own contiguous slice of pairs: a pair of expert e goes to
 *
 *     off[e] + (pairs of e before the slice) + (its rank inside the slice)
 *
 * which is the stable order (by expert, then by pair index): the same
 * layout for every grid, so the GEMMs see the same tiles and the results
 * are bitwise identical whatever the grid. The agnostic kernel
 * (moe_agnostic.cu) makes the same tables in every CTA and places the
 * pairs in pieces, one per scatter task: the same layout again.
 *
 * What is scattered is the token index of each pair (sorted_tok); GEMM1
 * gathers the x rows through it, so the activations are never copied.
 * pos_of[pair] tells the combine where the pair's GEMM2 row is.
 */
#ifndef HR_MOE_ROUTE_CUH
#define HR_MOE_ROUTE_CUH

#include "headroom_moe.h"
#include "moe_kernel.h"
#include "moe_trace.cuh"

/* Ints a routing table takes in shared memory: E + 1 entries, padded. */
#define HR__MOE_ROUTE_INTS (HR_MOE_MAX_EXPERTS + 4)

/* Per-CTA routing tables in shared memory (E + 1 entries each). */
struct moe_route {
  int *cnt;       /* pairs per expert */
  int *pre;       /* scratch: pairs before this CTA's slice, then tiles */
  int *off;       /* exclusive scan of cnt; off[E] = valid pairs */
  int *tile_off;  /* exclusive scan of token tiles per expert */
};

/* The four tables, HR__MOE_ROUTE_INTS ints each, from `ints` (shared
 * memory past a kernel's GEMM ring). */
static __device__ __forceinline__ moe_route moe_route_tables(int *ints)
{
  moe_route rt;
  rt.cnt = ints;
  rt.pre = ints + HR__MOE_ROUTE_INTS;
  rt.off = ints + 2 * HR__MOE_ROUTE_INTS;
  rt.tile_off = ints + 3 * HR__MOE_ROUTE_INTS;
  return rt;
}

/* out[i] = in[0] + ... + in[i-1] for i <= n (n <= 4 * HR__MOE_THREADS);
 * in and out distinct. Ends with __syncthreads. */
static __device__ void block_exclusive_scan(const int *in, int n, int *out, int *warp_sums)
{
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int base = tid * 4;
  int v[4], sum = 0, run, i, w, total = 0, incl;

  for(i = 0; i < 4; i++) {
    v[i] = base + i < n ? in[base + i] : 0;
    sum += v[i];
  }
  incl = sum;                                 /* inclusive scan in the warp */
  for(i = 1; i < 32; i <<= 1) {
    int y = __shfl_up_sync(0xffffffffu, incl, i);
    if(lane >= i)
      incl += y;
  }
  if(lane == 31)
    warp_sums[warp] = incl;
  HR__SYNC();
  run = incl - sum;
  for(w = 0; w < HR__MOE_THREADS / 32; w++) {
    if(w < warp)
      run += warp_sums[w];
    total += warp_sums[w];
  }
  for(i = 0; i < 4; i++) {
    if(base + i < n)
      out[base + i] = run;
    run += v[i];
  }
  if(tid == 0)
    out[n] = total;
  HR__SYNC();
}

/* Expert ids each thread has in flight at once, in the count and in the
 * placing: read one at a time, every id was a dependent round trip to
 * memory, and the count of the whole table was a chain of T * k / 256 of
 * them in every CTA (Qwen3-30B-A3B T = 1024: 32, ~15 us before the
 * agnostic kernel's first task). */
#define HR__MOE_ROUTE_BATCH 8

/* Place pairs [lo, hi) in the stable expert order: cursor[e] is where the
 * slice's first pair of expert e goes (off[e] plus the pairs of e before
 * the slice), and moves on as pairs are placed. One warp walks the slice
 * in order, 32 pairs at a time (their ids read HR__MOE_ROUTE_BATCH steps
 * ahead); lanes with the same expert rank themselves by lane, and the
 * highest of them moves the expert's cursor on. Both kernels use it; the
 * slices differ, the layout does not. Ends with __syncthreads. */
static __device__ void moe_route_place(const hr__moe_params &p, int *cursor,
                                       int lo, int hi)
{
  constexpr int B = HR__MOE_ROUTE_BATCH;
  const int tid = threadIdx.x, lane = tid & 31, E = p.E;
  if(tid < 32) {
    int base, j;
    for(base = lo; base < hi; base += 32 * B) {
      int ids[B];
#pragma unroll
      for(j = 0; j < B; j++) {
        const int pi = base + 32 * j + lane;
        ids[j] = pi < hi ? __ldg(p.ids + pi) : -1;
      }
#pragma unroll
      for(j = 0; j < B; j++) {
        const int pi = base + 32 * j + lane;
        int e = (unsigned)ids[j] < (unsigned)E ? ids[j] : -1;
        unsigned peers;
        if(base + 32 * j >= hi)             /* the same in every lane */
          break;
        peers = __match_any_sync(0xffffffffu, e);
        if(e >= 0) {
          int pos = cursor[e] + __popc(peers & ((1u << lane) - 1u));
          p.sorted_tok[pos] = pi / p.k;
          p.pos_of[pi] = pos;
        } else if(pi < hi) {
          p.pos_of[pi] = -1;                /* a bad id: contributes nothing */
        }
        __syncwarp();
        if(e >= 0 && lane == 31 - __clz(peers))
          cursor[e] += __popc(peers);
        __syncwarp();
      }
    }
  }
  HR__SYNC();
}

/* Count the whole table and scan (cnt, off), then place pairs [lo, hi):
 * the barrier kernel's CTA its slice, the agnostic kernel a piece per
 * task (or nothing, lo = hi, when it only wants the tables). Ends with
 * __syncthreads. */
static __device__ void moe_route_pairs(const hr__moe_params &p, const moe_route &rt,
                                int *warp_sums, int lo, int hi)
{
  constexpr int B = HR__MOE_ROUTE_BATCH;
  const int tid = threadIdx.x;
  const int E = p.E, pairs = p.T * p.k;
  int i, j;

  for(i = tid; i < E; i += HR__MOE_THREADS) {
    rt.cnt[i] = 0;
    rt.pre[i] = 0;
  }
  HR__SYNC();
  for(i = tid; i < pairs; i += B * HR__MOE_THREADS) {
    int ids[B];
#pragma unroll
    for(j = 0; j < B; j++)
      ids[j] = i + j * HR__MOE_THREADS < pairs ? __ldg(p.ids + i + j * HR__MOE_THREADS) : -1;
#pragma unroll
    for(j = 0; j < B; j++) {
      if((unsigned)ids[j] < (unsigned)E) {
        atomicAdd(&rt.cnt[ids[j]], 1);
        if(i + j * HR__MOE_THREADS < lo)
          atomicAdd(&rt.pre[ids[j]], 1);
      }
    }
  }
  HR__SYNC();
  block_exclusive_scan(rt.cnt, E, rt.off, warp_sums);
  for(i = tid; i < E; i += HR__MOE_THREADS)
    rt.pre[i] += rt.off[i];                 /* the slice's cursor per expert */
  HR__SYNC();
  moe_trace_route(p, HR__MOE_ROUTE_MARK_COUNTED);
  moe_route_place(p, rt.pre, lo, hi);
  moe_trace_route(p, HR__MOE_ROUTE_MARK_PLACED);
}

/* Pairs [lo, hi) of piece c of P: the agnostic kernel's scatter pieces. */
static __device__ __forceinline__ int moe_piece_lo(int pairs, int c, int P)
{
  return (int)((long long)pairs * c / P);
}

/* cursor[e] moved on past the pairs [from, to) (placed by others): plus
 * the pairs of expert e among them. The agnostic kernel's CTA that takes
 * a second scatter piece counts only the pairs between its pieces. Ends
 * with __syncthreads. */
static __device__ void moe_route_advance(const hr__moe_params &p, int *cursor, int from, int to)
{
  constexpr int B = HR__MOE_ROUTE_BATCH;
  int i, j;
  for(i = from + (int)threadIdx.x; i < to; i += B * HR__MOE_THREADS) {
    int ids[B];
#pragma unroll
    for(j = 0; j < B; j++)
      ids[j] = i + j * HR__MOE_THREADS < to ? __ldg(p.ids + i + j * HR__MOE_THREADS) : -1;
#pragma unroll
    for(j = 0; j < B; j++)
      if((unsigned)ids[j] < (unsigned)p.E)
        atomicAdd(&cursor[ids[j]], 1);
  }
  HR__SYNC();
}

/* Token tiles of `bn` rows per expert, and their scan. */
static __device__ void moe_route_tiles(const hr__moe_params &p, const moe_route &rt,
                                int bn, int *warp_sums)
{
  int i;
  for(i = threadIdx.x; i < p.E; i += HR__MOE_THREADS)
    rt.pre[i] = (rt.cnt[i] + bn - 1) / bn;
  HR__SYNC();
  block_exclusive_scan(rt.pre, p.E, rt.tile_off, warp_sums);
}

#endif /* HR_MOE_ROUTE_CUH */
