/*
 * gpu_kernels.cu: the kernels the GPU tests and benchmarks need besides the MoE:
 *
 *   hog   holds `ctas` SMs for a while (one CTA per SM: it takes 200 KB of
 *         shared memory, so nothing else with large shared memory fits
 *         beside it), like a communication kernel holding SMs. Each CTA
 *         sets started[blockIdx.x] = 1 in host-mapped memory when it runs.
 *   fill  deterministic pseudo-random bf16 from (seed, index), so weights
 *         of many gigabytes appear without a host copy.
 *   spin  one CTA that waits, so that the host queues timed launches
 *         ahead of the GPU (the benchmarks).
 *   stream reads the weights of a list of experts once, on every SM: what
 *         any kernel that must read those bytes takes at least, launch
 *         included (bench/moe_phases.c, its floor table).
 *   tile stream reads a weight matrix the way a GEMM tile does: 128-row
 *         tiles dealt round-robin, each walked along K a few bytes of every
 *         row per step through a cp.async ring, optionally with token rows
 *         from a small (L2-resident) buffer beside them, and no math: the
 *         read rate that a tile's access pattern allows (moe_phases
 *         --patterns).
 */
#include <stdint.h>

#include <cuda_runtime.h>

#include "gpu_util.h"

#define HOG_SMEM (200 * 1024)

__global__ void gt_hog_kernel(unsigned long long ns, volatile unsigned *started)
{
  extern __shared__ unsigned char hog_smem[];
  unsigned long long t0, t;
  if(threadIdx.x == 0) {
    hog_smem[0] = 1;                       /* the memory is really used */
    started[blockIdx.x] = 1;
    __threadfence_system();
  }
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  do {
    __nanosleep(10000);
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  } while(t - t0 < ns);
}

extern "C" int gt_hog_launch(int ctas, int ms, void *stream, unsigned *started)
{
  cudaError_t e = cudaFuncSetAttribute(gt_hog_kernel,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       HOG_SMEM);
  if(e != cudaSuccess)
    return (int)e;
  gt_hog_kernel<<<ctas, 32, HOG_SMEM, (cudaStream_t)stream>>>(
      (unsigned long long)ms * 1000000ULL, started);
  return (int)cudaGetLastError();
}

/* splitmix64 of (seed + index): independent-looking values per index. */
__device__ __forceinline__ uint64_t mix64(uint64_t z)
{
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

__global__ void gt_fill_kernel(uint16_t *p, size_t n, uint64_t seed, float scale)
{
  size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  const size_t step = (size_t)gridDim.x * blockDim.x;
  for(; i < n; i += step) {
    uint64_t h = mix64(seed + i * 0x9e3779b97f4a7c15ULL);
    float u = (float)(h >> 40) * (1.0f / 16777216.0f);   /* [0, 1) */
    float v = (2.0f * u - 1.0f) * scale;
    uint32_t bits = __float_as_uint(v);
    bits += 0x7fffu + ((bits >> 16) & 1u);                /* to nearest even */
    p[i] = (uint16_t)(bits >> 16);
  }
}

extern "C" int gt_fill_bf16(void *p, size_t n, uint64_t seed, float scale,
                            void *stream)
{
  gt_fill_kernel<<<1024, 256, 0, (cudaStream_t)stream>>>((uint16_t *)p, n,
                                                         seed, scale);
  return (int)cudaGetLastError();
}

/* One CTA that spins for `ms`: queued before timed launches, it gives the
 * host a head start, so launch overhead never shows in the events. */
__global__ void gt_spin_kernel(unsigned long long ns)
{
  unsigned long long t0, t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  do {
    __nanosleep(10000);
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  } while(t - t0 < ns);
}

extern "C" int gt_spin_launch(int ms, void *stream)
{
  gt_spin_kernel<<<1, 32, 0, (cudaStream_t)stream>>>((unsigned long long)ms * 1000000ULL);
  return (int)cudaGetLastError();
}

/* ---- stream --------------------------------------------------------------
 * The bytes of experts[0..n) (W1 rows then W2 rows of each), in chunks of
 * 8 KB: one 16-byte load per thread of a 512-thread CTA. A thread has 8
 * chunks' loads in flight (chunks gridDim.x apart, so the CTAs stay within
 * a chunk of each other: at T = 1 the whole read is a few chunks per CTA),
 * two CTAs per SM: 128 KB in flight per SM. The loads skip L1; their XOR
 * goes to `sink` only when it matches a value no input gives in practice,
 * so the compiler must keep them. */
#define STREAM_THREADS 512
#define STREAM_CHUNK_U4 STREAM_THREADS            /* 8 KB */
#define STREAM_DEPTH 8

__device__ __forceinline__ uint4 ld_stream(const uint4 *p)
{
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  return v;
}

__global__ void __launch_bounds__(STREAM_THREADS, 2)
gt_stream_kernel(const uint4 *w1, const uint4 *w2, const int *experts, int n,
                 unsigned long long c1, unsigned long long c2, unsigned *sink)
{
  const unsigned long long per = c1 + c2, total = per * (unsigned long long)n;
  const unsigned long long step = gridDim.x;
  unsigned acc = 0;
  unsigned long long c;
  int i;

  for(c = blockIdx.x; c < total; c += STREAM_DEPTH * step) {
    uint4 v[STREAM_DEPTH];
#pragma unroll
    for(i = 0; i < STREAM_DEPTH; i++) {
      const unsigned long long ci = c + i * step;
      v[i] = make_uint4(0, 0, 0, 0);
      if(ci < total) {
        const unsigned long long j = ci / per, r = ci % per;
        const unsigned long long e = (unsigned long long)experts[j];
        const uint4 *p = r < c1 ? w1 + (e * c1 + r) * STREAM_CHUNK_U4
                                : w2 + (e * c2 + (r - c1)) * STREAM_CHUNK_U4;
        v[i] = ld_stream(p + threadIdx.x);
      }
    }
#pragma unroll
    for(i = 0; i < STREAM_DEPTH; i++)
      acc ^= v[i].x ^ v[i].y ^ v[i].z ^ v[i].w;
  }
  if(acc == 0x9e3779b9u)
    *sink = acc;
}

extern "C" int gt_stream_launch(const void *w1, const void *w2, const int *experts,
                                int n, size_t w1_bytes, size_t w2_bytes, int sms,
                                unsigned *sink, void *stream)
{
  const size_t chunk = (size_t)STREAM_CHUNK_U4 * 16;
  if(n < 0 || w1_bytes % chunk || w2_bytes % chunk || sms < 1)
    return (int)cudaErrorInvalidValue;
  gt_stream_kernel<<<2 * sms, STREAM_THREADS, 0, (cudaStream_t)stream>>>(
      (const uint4 *)w1, (const uint4 *)w2, experts, n, w1_bytes / chunk,
      w2_bytes / chunk, sink);
  return (int)cudaGetLastError();
}

/* ---- tile stream ---------------------------------------------------------
 * One CTA of 256 threads per SM; a step is CHUNK bytes of each of the ROWS
 * rows of a tile (plus tok_rows token rows of the same K range), copied by
 * cp.async into slot step % STAGES; STAGES - 1 steps are in flight, each
 * waited for and passed through a __syncthreads as the GEMM tiles do
 * (kernels/moe_gemm.cuh, DEPTH 0). One word per thread of every landed
 * slot goes into an XOR, so the copies are observed.
 *
 * Which token rows a unit reads: group 0, rows (13 u + r) mod ~ntok, so
 * that neighbouring units read nearly the same rows at the same time (a
 * hot spot); group g > 0, window u / g of tok_rows rows, so that g
 * neighbouring units share one token tile (a GEMM's units of one expert).
 * rot > 0 starts unit u's walk along K at step (u mod 16) * rot, so the
 * units sharing a token tile read different parts of it at a time. */
#define TS_THREADS 256

struct ts_args {
  const uint16_t *w, *tok;
  int units, K, tok_rows, ntok, group, rot;
};

__device__ __forceinline__ void ts_copy16(uint32_t dst, const void *src)
{
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst), "l"(src)
               : "memory");
}

/* The copies of step i (32-bit index math, none per copy beyond a row's
 * offset: the address arithmetic must not be what limits the rate). */
template <int ROWS, int CHUNK, int STAGES>
__device__ __forceinline__ void ts_issue(const ts_args &a, int i, int spu, uint32_t smem)
{
  constexpr int cpr = CHUNK / 16;
  const int rows = ROWS + a.tok_rows, uu = i / spu;
  const int u = (int)blockIdx.x + uu * (int)gridDim.x;
  const int k = a.rot ? (i - uu * spu + (u & 15) * a.rot) % spu : i - uu * spu;
  const int span = a.ntok - a.tok_rows + 1;
  const int base = a.group ? (u / a.group) * a.tok_rows % span : u * 13 % span;
  const uint32_t dst = smem + (uint32_t)((i % STAGES) * rows * CHUNK);
  const int col = k * (CHUNK / 2) + (threadIdx.x % cpr) * 8;
  int p;
  for(p = threadIdx.x; p < rows * cpr; p += TS_THREADS) {
    const int r = p / cpr;
    int tr = base + r - ROWS;
    if(r < ROWS) {
      ts_copy16(dst + p * 16, a.w + ((size_t)u * ROWS + r) * a.K + col);
    } else {
      if(!a.group && tr >= span)      /* group 0 wraps around */
        tr -= span;
      ts_copy16(dst + p * 16, a.tok + (size_t)tr * a.K + col);
    }
  }
}

template <int ROWS, int CHUNK, int STAGES>
__global__ void __launch_bounds__(TS_THREADS, 1)
gt_tile_stream_kernel(const ts_args a, unsigned *sink)
{
  extern __shared__ __align__(16) unsigned char ts_smem[];
  const uint32_t smem = (uint32_t)__cvta_generic_to_shared(ts_smem);
  const int spu = a.K * 2 / CHUNK, rows = ROWS + a.tok_rows;
  const int mine = a.units > (int)blockIdx.x
                       ? (a.units - (int)blockIdx.x + (int)gridDim.x - 1) / (int)gridDim.x
                       : 0;
  const int steps = mine * spu;
  unsigned acc = 0;
  int s, i;

  for(i = 0; i < STAGES - 1; i++) {
    if(i < steps)
      ts_issue<ROWS, CHUNK, STAGES>(a, i, spu, smem);
    asm volatile("cp.async.commit_group;" ::: "memory");
  }
  for(s = 0; s < steps; s++) {
    asm volatile("cp.async.wait_group %0;" ::"n"(STAGES - 2) : "memory");
    __syncthreads();
    acc ^= ((const unsigned *)(ts_smem + (s % STAGES) * rows * CHUNK))[threadIdx.x];
    if(s + STAGES - 1 < steps)
      ts_issue<ROWS, CHUNK, STAGES>(a, s + STAGES - 1, spu, smem);
    asm volatile("cp.async.commit_group;" ::: "memory");
  }
  asm volatile("cp.async.wait_group 0;" ::: "memory");
  if(acc == 0x9e3779b9u)
    *sink = acc;
}

template <int ROWS, int CHUNK, int STAGES>
static int ts_launch(const ts_args &a, int sms, unsigned *sink, cudaStream_t st)
{
  const int smem = STAGES * (ROWS + a.tok_rows) * CHUNK;
  cudaError_t rc = cudaFuncSetAttribute(gt_tile_stream_kernel<ROWS, CHUNK, STAGES>,
                                        cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  if(rc)
    return (int)rc;
  gt_tile_stream_kernel<ROWS, CHUNK, STAGES><<<sms, TS_THREADS, smem, st>>>(a, sink);
  return (int)cudaGetLastError();
}

extern "C" int gt_tile_stream_launch(const void *w, size_t rows, int K, const void *tok,
                                     const gt_tile_pattern *tp, int ntok, int sms,
                                     unsigned *sink, void *stream)
{
  const cudaStream_t st = (cudaStream_t)stream;
  ts_args a;
  if(!tp || (tp->rows != 128 && tp->rows != 256) || rows % tp->rows || K <= 0 ||
     (K * 2) % tp->chunk || tp->tok_rows < 0 || tp->tok_rows > 128 || tp->group < 0 ||
     tp->rot < 0 || (tp->tok_rows && (!tok || ntok < tp->tok_rows)) || sms < 1)
    return (int)cudaErrorInvalidValue;
  a.w = (const uint16_t *)w;
  a.tok = (const uint16_t *)tok;
  a.units = (int)(rows / tp->rows);
  a.K = K;
  a.tok_rows = tp->tok_rows;
  a.ntok = ntok;
  a.group = tp->group;
  a.rot = tp->rot;
#define TS_CASE(R, C, S)                                                             \
  if(tp->rows == R && tp->chunk == C && tp->stages == S)                             \
    return ts_launch<R, C, S>(a, sms, sink, st);
  TS_CASE(128, 128, 7)
  TS_CASE(128, 128, 13)
  TS_CASE(128, 256, 3)
  TS_CASE(128, 256, 4)
  TS_CASE(256, 128, 4)
  TS_CASE(256, 128, 6)
#undef TS_CASE
  return (int)cudaErrorInvalidValue;
}

/* An empty kernel: what a launch alone measures between two events; and
 * one launched as the MoE kernels are (grid, 256 threads, their dynamic
 * shared memory, clusters), which touches its shared memory once. */
__global__ void gt_null_kernel(void) {}

__global__ void gt_null_smem_kernel(void)
{
  extern __shared__ unsigned char null_smem[];
  if(threadIdx.x == 0)
    ((volatile unsigned char *)null_smem)[0] = 1;
}

extern "C" int gt_null_launch(void *stream)
{
  gt_null_kernel<<<1, 32, 0, (cudaStream_t)stream>>>();
  return (int)cudaGetLastError();
}

extern "C" int gt_null_like_launch(int grid, int threads, int smem, int cluster,
                                   void *stream)
{
  static int smem_set = -1;    /* the size the kernel is allowed: once, not per launch */
  cudaLaunchConfig_t cfg = {};
  cudaLaunchAttribute attr[1] = {};
  if(smem != smem_set) {
    cudaError_t e = cudaFuncSetAttribute(gt_null_smem_kernel,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    if(e != cudaSuccess)
      return (int)e;
    smem_set = smem;
  }
  cfg.gridDim = dim3((unsigned)grid, 1, 1);
  cfg.blockDim = dim3((unsigned)threads, 1, 1);
  cfg.dynamicSmemBytes = (size_t)smem;
  cfg.stream = (cudaStream_t)stream;
  if(cluster > 1) {
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = (unsigned)cluster;
    attr[0].val.clusterDim.y = 1;
    attr[0].val.clusterDim.z = 1;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
  }
  return (int)cudaLaunchKernelEx(&cfg, gt_null_smem_kernel);
}
