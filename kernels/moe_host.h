/*
 * moe_host.h: host-side helpers the two launch paths share (moe_api.cu,
 * the single-GPU contexts; moe_ep_api.cu, the expert-parallel ones), and
 * the launch configuration every persistent kernel of the library uses.
 * Internal: prefix hr__. Defined in moe_api.cu, but for the inline one.
 */
#ifndef HR_MOE_HOST_H
#define HR_MOE_HOST_H

#include <stdint.h>

#include <cuda_runtime.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A CUDA error as the library's code: HR_OK, HR_ECOOP_TOO_LARGE,
 * HR_ENOMEM, HR_ENOGPU (no usable device or driver), else HR_ECUDA. */
int hr__moe_err_from_cuda(cudaError_t e);

/* Make `device` current; *prev gets the caller's (-1: none), for
 * hr__moe_device_leave to put back. HR_OK or HR_ECUDA. */
int hr__moe_device_enter(int device, int *prev);
void hr__moe_device_leave(int device, int prev);

/* Wait for a launch that ends with `done` recorded and whose failure
 * record is complete once *seq_word equals seq (the kernel writes seq
 * last): spinning with sched_yield for 2 ms, then sleeping 50 us a poll.
 * 1: the record is this launch's (the caller takes it); 0: the launch
 * ended without one; HR_ETIMEDOUT past timeout_ns (< 0: no bound; 0
 * still polls once); HR_ECUDA. The word is read after the event's query,
 * so once the launch is complete what it says is final. */
int hr__moe_wait_launch(cudaEvent_t done, const volatile uint32_t *seq_word, uint32_t seq,
                        long long timeout_ns);

#ifdef __cplusplus
}
#endif

/* The launch of `grid` CTAs of HR__MOE_THREADS threads with `smem` bytes
 * of dynamic shared memory on `stream`; `coop`: the cooperative
 * attribute; `cluster` > 1: clusters of that many. attr holds the
 * attributes cfg points at. */
static inline void hr__moe_launch_config(cudaLaunchConfig_t *cfg, cudaLaunchAttribute attr[2],
                                         int grid, int threads, size_t smem, int coop,
                                         int cluster, cudaStream_t stream)
{
  unsigned n = 0;

  *cfg = cudaLaunchConfig_t();
  cfg->gridDim = dim3((unsigned)grid, 1, 1);
  cfg->blockDim = dim3((unsigned)threads, 1, 1);
  cfg->dynamicSmemBytes = smem;
  cfg->stream = stream;
  if(cluster > 1) {
    attr[n] = cudaLaunchAttribute();
    attr[n].id = cudaLaunchAttributeClusterDimension;
    attr[n].val.clusterDim.x = (unsigned)cluster;
    attr[n].val.clusterDim.y = 1;
    attr[n].val.clusterDim.z = 1;
    n++;
  }
  if(coop) {
    attr[n] = cudaLaunchAttribute();
    attr[n].id = cudaLaunchAttributeCooperative;
    attr[n].val.cooperative = 1;
    n++;
  }
  cfg->attrs = attr;
  cfg->numAttrs = n;
}

#endif /* HR_MOE_HOST_H */
