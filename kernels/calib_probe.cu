/*
 * calib_probe.cu: the barrier probe of headroom-calibrate (calib_probe.h).
 */
#include "calib_probe.h"

static __device__ __forceinline__ long long probe_now(void)
{
  long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

static __global__ void __launch_bounds__(HR__PROBE_THREADS)
probe_kernel(unsigned *counter, unsigned target, long long timeout_ns,
             int *err)
{
  extern __shared__ unsigned char probe_smem[];

  if(threadIdx.x == 0) {
    long long start = probe_now();
    /* The shared memory is asked for only to hold the SM; one write keeps
     * the request honest in review. */
    probe_smem[0] = 1;
    /* System scope: the counter may live on the other GPU. */
    atomicAdd_system(counter, 1u);
    for(;;) {
      unsigned seen;
      asm volatile("ld.relaxed.sys.global.u32 %0, [%1];"
                   : "=r"(seen) : "l"(counter) : "memory");
      if(seen >= target)
        break;
      if(probe_now() - start > timeout_ns) {
        atomicExch(err, 1);
        break;
      }
      __nanosleep(256);
    }
  }
  __syncthreads();
}

extern "C" cudaError_t hr__probe_setup(void)
{
  return cudaFuncSetAttribute(probe_kernel,
                              cudaFuncAttributeMaxDynamicSharedMemorySize,
                              HR__PROBE_SMEM);
}

static void probe_config(cudaLaunchConfig_t *cfg, cudaLaunchAttribute *attr,
                         int grid, cudaStream_t stream)
{
  cfg->gridDim = dim3((unsigned)grid, 1, 1);
  cfg->blockDim = dim3(HR__PROBE_THREADS, 1, 1);
  cfg->dynamicSmemBytes = HR__PROBE_SMEM;
  cfg->stream = stream;
  attr->id = cudaLaunchAttributeClusterDimension;
  attr->val.clusterDim.x = HR__PROBE_CLUSTER;
  attr->val.clusterDim.y = 1;
  attr->val.clusterDim.z = 1;
  cfg->attrs = attr;
  cfg->numAttrs = 1;
}

extern "C" cudaError_t hr__probe_launch(int grid, unsigned *counter,
                                        unsigned target, long long timeout_ns,
                                        int *err, cudaStream_t stream)
{
  cudaLaunchConfig_t cfg = {};
  cudaLaunchAttribute attr;

  if(grid < HR__PROBE_CLUSTER || grid % HR__PROBE_CLUSTER)
    return cudaErrorInvalidValue;
  probe_config(&cfg, &attr, grid, stream);
  return cudaLaunchKernelEx(&cfg, probe_kernel, counter, target, timeout_ns,
                            err);
}

extern "C" cudaError_t hr__probe_max_clusters(int *out)
{
  cudaLaunchConfig_t cfg = {};
  cudaLaunchAttribute attr;

  probe_config(&cfg, &attr, HR__PROBE_CLUSTER, 0);
  return cudaOccupancyMaxActiveClusters(out, probe_kernel, &cfg);
}
