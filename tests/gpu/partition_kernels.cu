/*
 * partition_kernels.cu: the hog of the partition test. Each CTA takes 200
 * KB of shared memory, so one fits on an SM and nothing with a large
 * shared memory footprint (the mega kernel) fits beside it; it writes the
 * SM it runs on (plus one) into host-mapped memory and spins until the
 * host sets the release word, or a safety timeout passes, so that a test
 * that fails half-way still ends.
 */
#include <stdint.h>

#include <cuda_runtime.h>

#define SPIN_SMEM (200 * 1024)

__global__ void pt_spin_kernel(volatile unsigned *release, unsigned *sm_of,
                               unsigned long long timeout_ns)
{
  extern __shared__ unsigned char spin_smem[];
  unsigned long long t0, t;
  unsigned smid;

  if(threadIdx.x != 0)
    return;     /* one thread keeps the CTA (and its shared memory) */
  spin_smem[0] = 1;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(smid));
  sm_of[blockIdx.x] = smid + 1;
  __threadfence_system();
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  do {
    __nanosleep(20000);
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  } while(!*release && t - t0 < timeout_ns);
}

/* Declared in test_partition.c, its only user. */
extern "C" int pt_spin_launch(int ctas, void *stream, unsigned *release,
                              unsigned *sm_of, int timeout_ms);

extern "C" int pt_spin_launch(int ctas, void *stream, unsigned *release,
                              unsigned *sm_of, int timeout_ms)
{
  cudaError_t e = cudaFuncSetAttribute(pt_spin_kernel,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       SPIN_SMEM);
  if(e != cudaSuccess)
    return (int)e;
  pt_spin_kernel<<<ctas, 32, SPIN_SMEM, (cudaStream_t)stream>>>(
      release, sm_of, (unsigned long long)timeout_ms * 1000000ULL);
  return (int)cudaGetLastError();
}
