/*
 * hr_partition.c: partition mode, two green contexts on the lease's GPU.
 *
 * The comm partition is the one group of budget.headroom SMs that
 * cuDevSmResourceSplitByCount cuts from the device; what it leaves (the
 * `remaining` resource) is the mega partition. Kernels on a green
 * context's streams run only on that context's SMs, so NCCL there can
 * never hold an SM the mega kernel's grid waits for, whatever the launch
 * order (docs/measurements.md §2). The split happens once: a partition
 * does not follow later budgets (hr_partition_stale says when it should
 * be made again).
 *
 * The driver is opened at run time (hr_cuda.c) and its entry points taken
 * by CUDA version, so libheadroom neither links against CUDA nor breaks on
 * a machine without it. Built without cuda.h, every partition is
 * HR_EUNSUPPORTED.
 *
 * Threads: creating and destroying partitions is safe from any thread; a
 * partition is read-only after creation, so its queries are too, until
 * hr_partition_destroy, which must not race with them. The library never
 * makes a green context current: work reaches a partition only through
 * its streams.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hr_client_int.h"

/* The lease's budget in *b, after the checks hr_partition_create makes
 * with cuda.h or without: both builds refuse the same arguments alike. */
static int partition_budget_get(const hr_lease *lease, hr_partition **out,
                                hr_budget *b)
{
  int err;

  if(!lease || !out)
    return HR_EINVAL;
  err = hr_lease_budget(lease, b);
  if(err)
    return err;
  if(b->mode != HR_MODE_PARTITION)
    return HR_EINVAL;
  return HR_OK;
}

#ifdef HR_HAVE_CUDA_H
#include <cuda.h>

/* Every call below exists as of CUDA 12.5 (cuGreenCtxStreamCreate is the
 * newest); asking for that version gives the ABI this file was compiled
 * against, on any newer driver too. */
#define DRIVER_VERSION 12050

typedef struct hr__green_api {
  CUresult (*device_get)(CUdevice *, int);
  CUresult (*get_resource)(CUdevice, CUdevResource *, CUdevResourceType);
  CUresult (*split)(CUdevResource *, unsigned int *, const CUdevResource *,
                    CUdevResource *, unsigned int, unsigned int);
  CUresult (*generate_desc)(CUdevResourceDesc *, CUdevResource *,
                            unsigned int);
  CUresult (*ctx_create)(CUgreenCtx *, CUdevResourceDesc, CUdevice,
                         unsigned int);
  CUresult (*ctx_destroy)(CUgreenCtx);
  CUresult (*stream_create)(CUstream *, CUgreenCtx, unsigned int, int);
  CUresult (*stream_destroy)(CUstream);
  CUresult (*stream_sync)(CUstream);
} hr__green_api;

static pthread_once_t api_once = PTHREAD_ONCE_INIT;
static hr__green_api api;
static int api_err = HR_ENOGPU;

static void api_load(void)
{
  static const struct { const char *name; size_t off; } calls[] = {
    { "cuDeviceGet", offsetof(hr__green_api, device_get) },
    { "cuDeviceGetDevResource", offsetof(hr__green_api, get_resource) },
    { "cuDevSmResourceSplitByCount", offsetof(hr__green_api, split) },
    { "cuDevResourceGenerateDesc", offsetof(hr__green_api, generate_desc) },
    { "cuGreenCtxCreate", offsetof(hr__green_api, ctx_create) },
    { "cuGreenCtxDestroy", offsetof(hr__green_api, ctx_destroy) },
    { "cuGreenCtxStreamCreate", offsetof(hr__green_api, stream_create) },
    { "cuStreamDestroy", offsetof(hr__green_api, stream_destroy) },
    { "cuStreamSynchronize", offsetof(hr__green_api, stream_sync) },
  };
  hr__green_api a;
  size_t i;
  int err = HR_OK;

  memset(&a, 0, sizeof(a));
  for(i = 0; i < sizeof(calls) / sizeof(calls[0]) && !err; i++) {
    void *fn;
    err = hr__cuda_proc(calls[i].name, DRIVER_VERSION, &fn);
    /* Function and object pointers share a representation on every
     * platform with dlsym; the slot is written as the pointer it is. */
    if(!err)
      memcpy((char *)&a + calls[i].off, &fn, sizeof(fn));
  }
  if(!err)
    api = a;
  api_err = err;
}

/* A CUresult as an HR_E* code, with the one line that names the call
 * when it is the driver that failed. */
static int driver_err(CUresult r, const char *call, int gpu)
{
  char buf[32];
  int err;

  switch(r) {
  case CUDA_SUCCESS:
    return HR_OK;
  case CUDA_ERROR_NO_DEVICE:
  case CUDA_ERROR_INVALID_DEVICE:
  case CUDA_ERROR_NOT_INITIALIZED:
  case CUDA_ERROR_DEINITIALIZED:
  case CUDA_ERROR_STUB_LIBRARY:
  case CUDA_ERROR_DEVICE_UNAVAILABLE:
  case CUDA_ERROR_SYSTEM_DRIVER_MISMATCH:
  case CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE:
    return HR_ENOGPU;
  case CUDA_ERROR_NOT_SUPPORTED:
  case CUDA_ERROR_INVALID_RESOURCE_TYPE:
  case CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION:
    err = HR_EUNSUPPORTED;
    break;
  default:
    err = HR_ECUDA;
    break;
  }
  fprintf(stderr, "headroom: partition of GPU %d: %s failed: %s\n", gpu, call,
          hr__cuda_error_name((int)r, buf, sizeof(buf)));
  return err;
}

struct hr_partition {
  const hr_lease *lease;
  uint32_t epoch;          /* of the budget the split was made for */
  int gpu;
  int comm_sms, mega_sms;
  CUgreenCtx comm_ctx, mega_ctx;
  CUstream comm_stream, mega_stream;
  pthread_mutex_t mu;      /* guards the extra streams */
  int n_extra;
  CUstream extra[HR_PARTITION_MAX_STREAMS]; /* hr_partition_stream_create */
};

/* Let the work queued on `s` finish, then destroy it; NULL is ok. */
static void stream_drain(CUstream s)
{
  if(!s)
    return;
  api.stream_sync(s);
  api.stream_destroy(s);
}

/* Streams first: a green context's destruction leaves its streams
 * unusable but not freed. */
static void partition_free(hr_partition *p)
{
  int i;

  for(i = 0; i < p->n_extra; i++)
    stream_drain(p->extra[i]);
  pthread_mutex_destroy(&p->mu);
  stream_drain(p->comm_stream);
  stream_drain(p->mega_stream);
  if(p->comm_ctx)
    api.ctx_destroy(p->comm_ctx);
  if(p->mega_ctx)
    api.ctx_destroy(p->mega_ctx);
  free(p);
}

/* One green context on `res`, with a non-blocking stream in it. */
static int green_make(hr_partition *p, CUdevice dev, CUdevResource *res,
                      CUgreenCtx *ctx, CUstream *stream)
{
  CUdevResourceDesc desc;
  int err;

  err = driver_err(api.generate_desc(&desc, res, 1),
                   "cuDevResourceGenerateDesc", p->gpu);
  if(err)
    return err;
  err = driver_err(api.ctx_create(ctx, desc, dev, CU_GREEN_CTX_DEFAULT_STREAM),
                   "cuGreenCtxCreate", p->gpu);
  if(err) {
    *ctx = NULL;
    return err;
  }
  err = driver_err(api.stream_create(stream, *ctx, CU_STREAM_NON_BLOCKING, 0),
                   "cuGreenCtxStreamCreate", p->gpu);
  if(err)
    *stream = NULL;
  return err;
}

int hr_partition_create(const hr_lease *lease, hr_partition **out)
{
  hr_partition *p = NULL;
  hr_budget b;
  CUdevice dev;
  CUdevResource whole, comm, rest;
  unsigned int groups = 1, flags = 0;
  int align, err;

  err = partition_budget_get(lease, out, &b);
  if(err)
    return err;
  /* An older daemon, or a GPU where no split fits. */
  if(b.partition_granularity < 1 || b.headroom < 1 || b.grid < 1)
    return HR_EUNSUPPORTED;
  pthread_once(&api_once, api_load);
  if(api_err)
    return api_err;

  p = calloc(1, sizeof(*p));
  if(!p)
    return HR_ENOMEM;
  p->lease = lease;
  p->epoch = b.epoch;
  p->gpu = b.gpu;
  pthread_mutex_init(&p->mu, NULL);

  err = driver_err(api.device_get(&dev, b.gpu), "cuDeviceGet", b.gpu);
  if(err)
    goto out;
  memset(&whole, 0, sizeof(whole));
  err = driver_err(api.get_resource(dev, &whole, CU_DEV_RESOURCE_TYPE_SM),
                   "cuDeviceGetDevResource", b.gpu);
  if(err)
    goto out;
  /* A budget finer than the device's co-scheduling step was made with
   * the operator's consent to give it up (partition_ignore_coscheduling);
   * the split must then give it up too, or it rounds the comm side up. */
  align = hr__cuda_sm_alignment(b.gpu);
  if(align > 0 && b.partition_granularity < align)
    flags = CU_DEV_SM_RESOURCE_SPLIT_IGNORE_SM_COSCHEDULING;
  memset(&comm, 0, sizeof(comm));
  memset(&rest, 0, sizeof(rest));
  err = driver_err(api.split(&comm, &groups, &whole, &rest, flags,
                             (unsigned int)b.headroom),
                   "cuDevSmResourceSplitByCount", b.gpu);
  if(err)
    goto out;
  /* The mega kernel's grid must fit in what is left, or its barrier
   * waits for CTAs that never become resident. */
  if(groups != 1 || comm.sm.smCount < 1 || rest.sm.smCount < (unsigned int)b.grid) {
    fprintf(stderr, "headroom: partition of GPU %d: the driver split %u SMs "
            "into %u + %u (%u group(s)), the budget needs %d + %d\n", b.gpu,
            whole.sm.smCount, groups ? comm.sm.smCount : 0, rest.sm.smCount,
            groups, b.headroom, b.grid);
    err = HR_EUNSUPPORTED;
    goto out;
  }
  p->comm_sms = (int)comm.sm.smCount;
  p->mega_sms = (int)rest.sm.smCount;
  err = green_make(p, dev, &comm, &p->comm_ctx, &p->comm_stream);
  if(err)
    goto out;
  err = green_make(p, dev, &rest, &p->mega_ctx, &p->mega_stream);

out:
  if(err) {
    partition_free(p);
    return err;
  }
  *out = p;
  return HR_OK;
}

void hr_partition_destroy(hr_partition *p)
{
  if(p)
    partition_free(p);
}

void *hr_partition_comm_stream(const hr_partition *p)
{
  return p ? (void *)p->comm_stream : NULL;
}

void *hr_partition_mega_stream(const hr_partition *p)
{
  return p ? (void *)p->mega_stream : NULL;
}

int hr_partition_stream_create(hr_partition *p, hr_partition_side side,
                               void **out)
{
  CUstream s = NULL;
  int err;

  if(!p || !out || (side != HR_PARTITION_COMM && side != HR_PARTITION_MEGA))
    return HR_EINVAL;
  pthread_mutex_lock(&p->mu);
  if(p->n_extra >= HR_PARTITION_MAX_STREAMS) {
    err = HR_ELIMIT;
    goto out;
  }
  err = driver_err(api.stream_create(&s, side == HR_PARTITION_COMM ?
                                     p->comm_ctx : p->mega_ctx,
                                     CU_STREAM_NON_BLOCKING, 0),
                   "cuGreenCtxStreamCreate", p->gpu);
  if(err)
    goto out;
  p->extra[p->n_extra++] = s;
  *out = (void *)s;

out:
  pthread_mutex_unlock(&p->mu);
  return err;
}

#else /* !HR_HAVE_CUDA_H */

/* Built without cuda.h: the arguments are still checked, as everywhere. */
struct hr_partition {
  const hr_lease *lease;
  uint32_t epoch;
  int comm_sms, mega_sms;
};

int hr_partition_create(const hr_lease *lease, hr_partition **out)
{
  hr_budget b;
  int err;

  err = partition_budget_get(lease, out, &b);
  if(err)
    return err;
  return HR_EUNSUPPORTED;
}

void hr_partition_destroy(hr_partition *p)
{
  free(p);
}

void *hr_partition_comm_stream(const hr_partition *p)
{
  (void)p;
  return NULL;
}

void *hr_partition_mega_stream(const hr_partition *p)
{
  (void)p;
  return NULL;
}

int hr_partition_stream_create(hr_partition *p, hr_partition_side side,
                               void **out)
{
  if(!p || !out || (side != HR_PARTITION_COMM && side != HR_PARTITION_MEGA))
    return HR_EINVAL;
  return HR_EUNSUPPORTED;
}

#endif /* HR_HAVE_CUDA_H */

int hr_partition_comm_sms(const hr_partition *p)
{
  return p ? p->comm_sms : HR_EINVAL;
}

int hr_partition_mega_sms(const hr_partition *p)
{
  return p ? p->mega_sms : HR_EINVAL;
}

int64_t hr_partition_epoch(const hr_partition *p)
{
  return p ? (int64_t)p->epoch : HR_EINVAL;
}

int hr_partition_stale(const hr_partition *p)
{
  int64_t now;
  if(!p)
    return HR_EINVAL;
  now = hr_lease_epoch(p->lease);
  if(now < 0)
    return (int)now;        /* the lease's client was closed */
  return now != (int64_t)p->epoch;
}
