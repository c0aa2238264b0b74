/*
 * gpu_bwd_kernels.cu: device-side checks of large outputs for
 * test_moe_backward.c, where a host copy would cost more than the launch
 * it checks (DeepSeek-V3's fp32 dW is 45 GB, Qwen3-30B-A3B's 2.4 GB, and
 * the grid test compares dozens of launches):
 *
 *   count   elements of an fp32 or bf16 array that are not finite, or
 *           that are not exactly zero (NaN counts as not zero)
 *   diff    4-byte words (then bytes of a tail) in which two arrays differ
 *   rounded elements of a bf16 array that are not the bf16 (to nearest,
 *           ties to even) of the same element of an fp32 array
 *
 * Each returns its count through *out (host memory) after a synchronous
 * copy on `stream`, or a cudaError_t.
 */
#include <stdint.h>

#include <cuda_runtime.h>

#include "gpu_bwd.h"

enum { CNT_NONFINITE = 0, CNT_NONZERO = 1 };

__device__ __forceinline__ int bad_f32(uint32_t bits, int what)
{
  if(what == CNT_NONFINITE)
    return (bits & 0x7f800000u) == 0x7f800000u;          /* Inf or NaN */
  return (bits & 0x7fffffffu) != 0;                      /* not +-0 */
}

__global__ void gt_count_kernel(const void *p, size_t n, int bf16, int what,
                                unsigned long long *count)
{
  size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  const size_t step = (size_t)gridDim.x * blockDim.x;
  unsigned long long c = 0;
  for(; i < n; i += step) {
    uint32_t bits = bf16 ? (uint32_t)((const uint16_t *)p)[i] << 16
                         : ((const uint32_t *)p)[i];
    c += (unsigned long long)bad_f32(bits, what);
  }
  /* Sum over the warp, one atomic per warp. */
  for(int o = 16; o > 0; o >>= 1)
    c += __shfl_down_sync(0xffffffffu, c, o);
  if((threadIdx.x & 31) == 0 && c)
    atomicAdd(count, c);
}

__global__ void gt_diff_kernel(const uint32_t *a, const uint32_t *b, size_t words,
                               const uint8_t *ta, const uint8_t *tb, int tail,
                               unsigned long long *count)
{
  size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  const size_t step = (size_t)gridDim.x * blockDim.x;
  unsigned long long c = 0;
  for(; i < words; i += step)
    c += a[i] != b[i];
  if(blockIdx.x == 0 && threadIdx.x == 0)
    for(int t = 0; t < tail; t++)
      c += ta[t] != tb[t];
  for(int o = 16; o > 0; o >>= 1)
    c += __shfl_down_sync(0xffffffffu, c, o);
  if((threadIdx.x & 31) == 0 && c)
    atomicAdd(count, c);
}

static unsigned long long *counter(void)
{
  static unsigned long long *d;          /* one word, made on first use */
  if(!d && cudaMalloc((void **)&d, sizeof(*d)) != cudaSuccess)
    d = NULL;
  return d;
}

static int finish(unsigned long long *d, cudaStream_t st, size_t *out)
{
  unsigned long long h = 0;
  cudaError_t e = cudaGetLastError();
  if(e == cudaSuccess)
    e = cudaMemcpyAsync(&h, d, sizeof(h), cudaMemcpyDeviceToHost, st);
  if(e == cudaSuccess)
    e = cudaStreamSynchronize(st);
  *out = (size_t)h;
  return (int)e;
}

static int count_launch(const void *p, size_t n, int bf16, int what, void *stream,
                        size_t *out)
{
  cudaStream_t st = (cudaStream_t)stream;
  unsigned long long *d = counter();
  cudaError_t e;
  *out = 0;
  if(!d)
    return (int)cudaErrorMemoryAllocation;
  e = cudaMemsetAsync(d, 0, sizeof(*d), st);
  if(e != cudaSuccess)
    return (int)e;
  if(n)
    gt_count_kernel<<<1024, 256, 0, st>>>(p, n, bf16, what, d);
  return finish(d, st, out);
}

extern "C" int gt_dev_count_nonfinite(const void *p, size_t n, int bf16,
                                      void *stream, size_t *out)
{
  return count_launch(p, n, bf16, CNT_NONFINITE, stream, out);
}

extern "C" int gt_dev_count_nonzero(const void *p, size_t n, int bf16,
                                    void *stream, size_t *out)
{
  return count_launch(p, n, bf16, CNT_NONZERO, stream, out);
}

extern "C" int gt_dev_count_diff(const void *a, const void *b, size_t bytes,
                                 void *stream, size_t *out)
{
  cudaStream_t st = (cudaStream_t)stream;
  unsigned long long *d = counter();
  const size_t words = bytes / 4;
  cudaError_t e;
  *out = 0;
  if(!d)
    return (int)cudaErrorMemoryAllocation;
  e = cudaMemsetAsync(d, 0, sizeof(*d), st);
  if(e != cudaSuccess)
    return (int)e;
  /* Both arrays are 4-byte aligned where the test calls this (cudaMalloc
   * bases); a tail of bytes is compared one at a time. */
  if(bytes)
    gt_diff_kernel<<<1024, 256, 0, st>>>(
        (const uint32_t *)a, (const uint32_t *)b, words,
        (const uint8_t *)a + words * 4, (const uint8_t *)b + words * 4,
        (int)(bytes - words * 4), d);
  return finish(d, st, out);
}

__global__ void gt_rounded_kernel(const uint32_t *f, const uint16_t *b, size_t n,
                                  unsigned long long *count)
{
  size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  const size_t step = (size_t)gridDim.x * blockDim.x;
  unsigned long long c = 0;
  for(; i < n; i += step) {
    uint32_t u = f[i];
    uint16_t want;
    if((u & 0x7fffffffu) > 0x7f800000u)
      want = (uint16_t)((u >> 16) | 0x0040u);          /* NaN stays NaN */
    else
      want = (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
    c += b[i] != want;
  }
  for(int o = 16; o > 0; o >>= 1)
    c += __shfl_down_sync(0xffffffffu, c, o);
  if((threadIdx.x & 31) == 0 && c)
    atomicAdd(count, c);
}

extern "C" int gt_dev_count_not_rounded(const float *f, const uint16_t *b, size_t n,
                                        void *stream, size_t *out)
{
  cudaStream_t st = (cudaStream_t)stream;
  unsigned long long *d = counter();
  cudaError_t e;
  *out = 0;
  if(!d)
    return (int)cudaErrorMemoryAllocation;
  e = cudaMemsetAsync(d, 0, sizeof(*d), st);
  if(e != cudaSuccess)
    return (int)e;
  if(n)
    gt_rounded_kernel<<<1024, 256, 0, st>>>((const uint32_t *)f, b, n, d);
  return finish(d, st, out);
}
