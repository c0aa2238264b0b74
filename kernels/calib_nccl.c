/*
 * calib_nccl.c: NCCL through dlopen (calib_nccl.h).
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nccl.h>

#include "calib_nccl.h"
#include "nccl_dl.h"

static hr__nccl_fns nccl;

int hr__nccl_open(char *version, size_t vn, char *why, size_t n)
{
  return hr__nccl_load(&nccl, "this tool", version, vn, why, n);
}

int hr__nccl_set_create(hr__nccl_set *s, int max_ctas, int cga, size_t bytes,
                        char *why, size_t n)
{
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  ncclUniqueId id;
  ncclResult_t r;
  int c, g;

  memset(s, 0, sizeof(*s));
  s->count = bytes / sizeof(float);
  if(max_ctas > 0)
    cfg.minCTAs = cfg.maxCTAs = max_ctas;
  if(cga > 0)
    cfg.cgaClusterSize = cga;
  for(c = 0; c < HR__NCCL_COMMS; c++) {
    for(g = 0; g < HR__NCCL_GPUS; g++) {
      if(cudaSetDevice(g) ||
         cudaStreamCreateWithFlags(&s->stream[c][g], cudaStreamNonBlocking) ||
         cudaMalloc((void **)&s->buf[c][g], s->count * sizeof(float)) ||
         cudaMemset(s->buf[c][g], 0, s->count * sizeof(float))) {
        snprintf(why, n, "CUDA: %s", cudaGetErrorString(cudaGetLastError()));
        return -1;
      }
    }
    r = nccl.get_unique_id(&id);
    if(r == ncclSuccess)
      r = nccl.group_start();
    for(g = 0; r == ncclSuccess && g < HR__NCCL_GPUS; g++) {
      cudaSetDevice(g);
      r = nccl.init_rank_config((ncclComm_t *)&s->comm[c][g], HR__NCCL_GPUS,
                                id, g, &cfg);
    }
    if(r == ncclSuccess)
      r = nccl.group_end();
    if(r != ncclSuccess) {
      snprintf(why, n, "ncclCommInitRankConfig: %s", hr__nccl_why(&nccl, r));
      return -1;
    }
  }
  return 0;
}

void hr__nccl_set_destroy(hr__nccl_set *s)
{
  int c, g;

  for(c = 0; c < HR__NCCL_COMMS; c++) {
    for(g = 0; g < HR__NCCL_GPUS; g++) {
      cudaSetDevice(g);
      if(s->comm[c][g])
        nccl.destroy((ncclComm_t)s->comm[c][g]);
      if(s->buf[c][g])
        cudaFree(s->buf[c][g]);
      if(s->stream[c][g])
        cudaStreamDestroy(s->stream[c][g]);
    }
  }
  memset(s, 0, sizeof(*s));
}

int hr__nccl_set_allreduce(hr__nccl_set *s, int concurrent, char *why,
                           size_t n)
{
  ncclResult_t r;
  int i, g, c;

  /* Back to back: three groups in a row on communicator 0. At once: one
   * group over the three communicators. */
  for(i = 0; i < (concurrent ? 1 : HR__NCCL_COMMS); i++) {
    r = nccl.group_start();
    for(c = 0; r == ncclSuccess && c < (concurrent ? HR__NCCL_COMMS : 1); c++)
      for(g = 0; r == ncclSuccess && g < HR__NCCL_GPUS; g++)
        r = nccl.all_reduce(s->buf[c][g], s->buf[c][g], s->count,
                            ncclFloat, ncclSum, (ncclComm_t)s->comm[c][g],
                            s->stream[c][g]);
    if(r == ncclSuccess)
      r = nccl.group_end();
    if(r != ncclSuccess) {
      snprintf(why, n, "ncclAllReduce: %s", hr__nccl_why(&nccl, r));
      return -1;
    }
  }
  return 0;
}
