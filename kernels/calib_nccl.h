/*
 * calib_nccl.h: NCCL as headroom-calibrate uses it, loaded with dlopen.
 *
 * The tool must measure the NCCL the node's jobs run on, which is often a
 * Python wheel's libnccl.so.2 rather than one the linker would find; so
 * the library is opened at run time ($NCCL_HOME/lib first, then the
 * loader's path) and only the header's types are taken at build time.
 *
 * One process drives both GPUs, as the runs of docs/measurements.md §3
 * did: each "set" is three two-rank communicators created with one
 * (maxCTAs, cgaClusterSize) budget, with a stream and a 64 MiB buffer
 * per communicator and GPU.
 */
#ifndef HR_CALIB_NCCL_H
#define HR_CALIB_NCCL_H

#include <stddef.h>

#include <cuda_runtime.h>

#define HR__NCCL_COMMS 3
#define HR__NCCL_GPUS 2

typedef struct hr__nccl_set {
  void *comm[HR__NCCL_COMMS][HR__NCCL_GPUS];       /* ncclComm_t */
  cudaStream_t stream[HR__NCCL_COMMS][HR__NCCL_GPUS];
  float *buf[HR__NCCL_COMMS][HR__NCCL_GPUS];
  size_t count;                                     /* floats per buffer */
} hr__nccl_set;

/* Open libnccl; 0, or -1 with why in `why`. `version` gets "2.28.9". */
int hr__nccl_open(char *version, size_t vn, char *why, size_t n);

/* Create a set for budget (max_ctas, cga), 0 meaning NCCL's own choice,
 * with `bytes` per buffer. 0, or -1 with why. */
int hr__nccl_set_create(hr__nccl_set *s, int max_ctas, int cga, size_t bytes,
                        char *why, size_t n);
void hr__nccl_set_destroy(hr__nccl_set *s);

/* Enqueue all-reduces on both GPUs (no wait): `concurrent` 1 puts all
 * three on one communicator and stream, back to back; otherwise one on
 * each of the three communicators at once. 0, or -1 with why. */
int hr__nccl_set_allreduce(hr__nccl_set *s, int concurrent, char *why,
                           size_t n);

#endif /* HR_CALIB_NCCL_H */
