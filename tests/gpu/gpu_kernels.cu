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
