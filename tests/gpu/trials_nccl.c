/*
 * trials_nccl.c: see trials_nccl.h.
 */
#include "trials_nccl.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cuda_runtime.h>

#include "gpu_util.h"
#include "nccl_dl.h"

static hr__nccl_fns nccl;

int tr_nccl_open(char *version, size_t vn, char *why, size_t n)
{
  return hr__nccl_load(&nccl, "the trials", version, vn, why, n);
}

int tr_nccl_id_share(const char *dir, const char *name, int rank,
                     int timeout_ms, ncclUniqueId *id, char *why, size_t n)
{
  char path[1024], tmp[1100];
  ncclResult_t r;
  FILE *f;
  int waited;

  snprintf(path, sizeof(path), "%s/nccl-id.%s", dir, name);
  if(rank == 0) {
    r = nccl.get_unique_id(id);
    if(r != ncclSuccess) {
      snprintf(why, n, "ncclGetUniqueId: %s", hr__nccl_why(&nccl, r));
      return -1;
    }
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    f = fopen(tmp, "wb");
    if(!f || fwrite(id, sizeof(*id), 1, f) != 1 || fclose(f) != 0 ||
       rename(tmp, path) != 0) {
      snprintf(why, n, "cannot write %s: %s", path, strerror(errno));
      return -1;
    }
    return 0;
  }
  for(waited = 0; waited <= timeout_ms; waited += 10) {
    f = fopen(path, "rb");
    if(f) {
      size_t got = fread(id, sizeof(*id), 1, f);
      fclose(f);
      if(got == 1)
        return 0;
    }
    gt_sleep_ms(10);
  }
  snprintf(why, n, "no NCCL id from rank 0 in %s after %d ms", path,
           timeout_ms);
  return -1;
}

/* Run every collective the trials can issue once, on every communicator,
 * in the same order on both ranks, and wait for each. NCCL (2.22 and
 * later) connects a communicator's peers lazily, on the host, inside the
 * first call that needs each algorithm, and that call blocks until the
 * peer makes the matching call: two ranks that issue their first
 * collectives on two communicators in opposite orders (the cross order
 * does, by design) would wait for each other on the host forever, before
 * any kernel runs. Applications meet the same trap; they warm up too (or
 * set NCCL_RUNTIME_CONNECT=0, which the launcher also does). */
static int warm_up(tr_nccl_set *s, const char *name, char *why, size_t n)
{
  int c, op;
  size_t bytes;

  for(c = 0; c < TR_NCOMMS; c++) {
    for(op = 0; op < TR_NOPS; op++) {
      for(bytes = (size_t)1 << 20; bytes <= TR_MAX_BYTES; bytes <<= 1) {
        tr_coll k;
        cudaError_t ce;

        k.comm = c;
        k.op = (tr_op)op;
        k.bytes = bytes;
        if(tr_nccl_run(s, &k, why, n))
          return -1;
        ce = cudaStreamSynchronize((cudaStream_t)s->stream[c]);
        if(ce != cudaSuccess) {
          snprintf(why, n, "warm-up of %s.%d: %s", name, c,
                   cudaGetErrorString(ce));
          return -1;
        }
      }
    }
  }
  return 0;
}

int tr_nccl_set_create(tr_nccl_set *s, const char *dir, const char *name,
                       int rank, const ncclConfig_t *config,
                       void *const streams[TR_NCOMMS], char *why, size_t n)
{
  char cname[128];
  ncclUniqueId id;
  ncclResult_t r;
  int c;

  memset(s, 0, sizeof(*s));
  for(c = 0; c < TR_NCOMMS; c++) {
    ncclConfig_t cfg = *config;
    s->stream[c] = streams[c];
    if(cudaMalloc(&s->send[c], TR_MAX_BYTES) != cudaSuccess ||
       cudaMalloc(&s->recv[c], TR_MAX_BYTES) != cudaSuccess ||
       cudaMemset(s->send[c], 0, TR_MAX_BYTES) != cudaSuccess ||
       cudaMemset(s->recv[c], 0, TR_MAX_BYTES) != cudaSuccess) {
      snprintf(why, n, "buffers of %s: %s", name,
               cudaGetErrorString(cudaGetLastError()));
      return -1;
    }
    snprintf(cname, sizeof(cname), "%s.%d", name, c);
    if(tr_nccl_id_share(dir, cname, rank, 60000, &id, why, n))
      return -1;
    r = nccl.init_rank_config(&s->comm[c], 2, id, rank, &cfg);
    if(r != ncclSuccess) {
      s->comm[c] = NULL;
      snprintf(why, n, "ncclCommInitRankConfig(%s): %s", cname, hr__nccl_why(&nccl, r));
      return -1;
    }
  }
  return warm_up(s, name, why, n);
}

void tr_nccl_set_destroy(tr_nccl_set *s)
{
  int c;

  for(c = 0; c < TR_NCOMMS; c++) {
    if(s->comm[c]) {
      if(nccl.finalize)
        nccl.finalize(s->comm[c]);
      nccl.destroy(s->comm[c]);
    }
    cudaFree(s->send[c]);
    cudaFree(s->recv[c]);
  }
  memset(s, 0, sizeof(*s));
}

int tr_nccl_run(tr_nccl_set *s, const tr_coll *c, char *why, size_t n)
{
  const size_t elems = c->bytes / sizeof(float);
  cudaStream_t st;
  ncclComm_t comm;
  ncclResult_t r;

  if(c->comm < 0 || c->comm >= TR_NCOMMS || c->bytes > TR_MAX_BYTES ||
     !s->comm[c->comm]) {
    snprintf(why, n, "bad collective");
    return -1;
  }
  comm = s->comm[c->comm];
  st = (cudaStream_t)s->stream[c->comm];
  /* 2 ranks: the gathered or scattered side is half the larger buffer. */
  switch(c->op) {
  case TR_ALL_REDUCE:
    r = nccl.all_reduce(s->send[c->comm], s->recv[c->comm], elems, ncclFloat,
                        ncclSum, comm, st);
    break;
  case TR_ALL_GATHER:
    r = nccl.all_gather(s->send[c->comm], s->recv[c->comm], elems / 2,
                        ncclFloat, comm, st);
    break;
  case TR_REDUCE_SCATTER:
  default:
    r = nccl.reduce_scatter(s->send[c->comm], s->recv[c->comm], elems / 2,
                            ncclFloat, ncclSum, comm, st);
    break;
  }
  if(r != ncclSuccess) {
    snprintf(why, n, "%s of %zu bytes on communicator %d: %s",
             tr_op_name(c->op), c->bytes, c->comm, hr__nccl_why(&nccl, r));
    return -1;
  }
  return 0;
}
