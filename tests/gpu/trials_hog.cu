/*
 * trials_hog.cu: see trials_hog.h.
 */
#include <stdio.h>
#include <string.h>

#include <cuda_runtime.h>

#include "gpu_util.h"
#include "trials_hog.h"

#define HOG_SMEM (200 * 1024)

__global__ void tr_hog_kernel(volatile unsigned *words, unsigned long long max_ns)
{
  extern __shared__ unsigned char smem[];
  unsigned long long t0, t;

  if(threadIdx.x == 0) {
    smem[0] = 1;                         /* the memory is really used */
    words[1 + blockIdx.x] = 1;
    __threadfence_system();
  }
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  do {
    __nanosleep(20000);
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  } while(!words[0] && t - t0 < max_ns);
}

extern "C" int tr_hog_start(tr_hog *h, int ctas, int max_ms, char *why, size_t n)
{
  unsigned *dev = NULL;
  cudaError_t e;
  double t0;
  int i, running = 0;

  memset(h, 0, sizeof(*h));
  h->ctas = ctas;
  e = cudaHostAlloc((void **)&h->words, sizeof(unsigned) * (ctas + 1),
                    cudaHostAllocMapped);
  if(e == cudaSuccess) {
    memset(h->words, 0, sizeof(unsigned) * (ctas + 1));
    e = cudaHostGetDevicePointer((void **)&dev, h->words, 0);
  }
  if(e == cudaSuccess)
    e = cudaStreamCreateWithFlags((cudaStream_t *)&h->stream,
                                  cudaStreamNonBlocking);
  if(e == cudaSuccess)
    e = cudaFuncSetAttribute(tr_hog_kernel,
                             cudaFuncAttributeMaxDynamicSharedMemorySize,
                             HOG_SMEM);
  if(e == cudaSuccess) {
    tr_hog_kernel<<<ctas, 32, HOG_SMEM, (cudaStream_t)h->stream>>>(
        dev, (unsigned long long)max_ms * 1000000ULL);
    e = cudaGetLastError();
  }
  if(e != cudaSuccess) {
    snprintf(why, n, "hog launch: %s", cudaGetErrorString(e));
    return -1;
  }
  t0 = gt_now_ms();
  while(gt_now_ms() - t0 < 5000) {
    for(running = 0, i = 0; i < ctas; i++)
      running += ((volatile unsigned *)h->words)[1 + i] != 0;
    if(running == ctas)
      return 0;
  }
  snprintf(why, n, "only %d of %d hog CTAs started in 5 s", running, ctas);
  return -1;
}

extern "C" void tr_hog_release(tr_hog *h)
{
  if(h->words)
    ((volatile unsigned *)h->words)[0] = 1;
  if(h->stream) {
    cudaStreamSynchronize((cudaStream_t)h->stream);
    cudaStreamDestroy((cudaStream_t)h->stream);
  }
  if(h->words)
    cudaFreeHost(h->words);
  memset(h, 0, sizeof(*h));
}
