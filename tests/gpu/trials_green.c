/*
 * trials_green.c: see trials_green.h.
 */
#include "trials_green.h"

#include <stdio.h>
#include <string.h>

#include <cuda.h>
#include <cuda_runtime.h>

typedef CUresult (*get_green_fn)(CUstream, CUgreenCtx *);
typedef CUresult (*stream_create_fn)(CUstream *, CUgreenCtx, unsigned int, int);

/* A driver function by name, with the ABI of CUDA 12.5 (by which both
 * exist; libheadroom asks for the same version). */
static void *driver_fn(const char *name)
{
  enum cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
  void *fn = NULL;

  if(cudaGetDriverEntryPointByVersion(name, &fn, 12050, cudaEnableDefault,
                                      &q) != cudaSuccess ||
     q != cudaDriverEntryPointSuccess)
    return NULL;
  return fn;
}

int tr_green_streams(void *stream, int n, void **out, char *why, size_t wn)
{
  get_green_fn get_green;
  stream_create_fn create;
  CUgreenCtx green = NULL;
  void *p;
  CUresult r;
  int i;

  for(i = 0; i < n; i++)
    out[i] = NULL;
  p = driver_fn("cuStreamGetGreenCtx");
  memcpy(&get_green, &p, sizeof(p));
  p = driver_fn("cuGreenCtxStreamCreate");
  memcpy(&create, &p, sizeof(p));
  if(!get_green || !create) {
    snprintf(why, wn, "the driver has no cuStreamGetGreenCtx or "
             "cuGreenCtxStreamCreate (CUDA 12.5+)");
    return -1;
  }
  r = get_green((CUstream)stream, &green);
  if(r != CUDA_SUCCESS || !green) {
    snprintf(why, wn, "cuStreamGetGreenCtx: error %d%s", (int)r,
             r == CUDA_SUCCESS ? " (not a green-context stream)" : "");
    return -1;
  }
  for(i = 0; i < n; i++) {
    CUstream s = NULL;
    /* Green-context streams must be non-blocking. */
    r = create(&s, green, CU_STREAM_NON_BLOCKING, 0);
    if(r != CUDA_SUCCESS) {
      snprintf(why, wn, "cuGreenCtxStreamCreate: error %d", (int)r);
      tr_green_streams_free(out, i);
      return -1;
    }
    out[i] = s;
  }
  return 0;
}

void tr_green_streams_free(void **s, int n)
{
  int i;

  for(i = 0; i < n; i++) {
    if(s[i]) {
      cudaStreamSynchronize((cudaStream_t)s[i]);
      cudaStreamDestroy((cudaStream_t)s[i]);
      s[i] = NULL;
    }
  }
}
