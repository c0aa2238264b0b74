/*
 * calib_probe.h: the barrier probe of headroom-calibrate.
 *
 * One CTA per SM (a large dynamic shared memory request keeps a second
 * one off), clusters of 2, and a barrier across every CTA of both GPUs: a
 * counter in GPU 0's memory that GPU 1 reaches through peer access. A
 * probe whose CTAs cannot all be resident at once is the deadlock the
 * headroom exists to prevent; here it times out, records that in an error
 * word and ends (no trap), so the context stays usable for the next trial.
 */
#ifndef HR_CALIB_PROBE_H
#define HR_CALIB_PROBE_H

#include <cuda_runtime.h>

#ifdef __cplusplus
extern "C" {
#endif

#define HR__PROBE_THREADS 384
#define HR__PROBE_SMEM (200 * 1024)
#define HR__PROBE_CLUSTER 2

/* Ready the probe kernel on the current device (shared memory limit). */
cudaError_t hr__probe_setup(void);

/* Launch `grid` probe CTAs (a multiple of the cluster) on `stream` of the
 * current device. They add one each to *counter, then wait until it reaches
 * `target` or `timeout_ns` passes; on timeout one of them sets *err to 1. */
cudaError_t hr__probe_launch(int grid, unsigned *counter, unsigned target,
                             long long timeout_ns, int *err,
                             cudaStream_t stream);

/* Clusters of the probe that fit on the current device at once. */
cudaError_t hr__probe_max_clusters(int *out);

#ifdef __cplusplus
}
#endif

#endif /* HR_CALIB_PROBE_H */
