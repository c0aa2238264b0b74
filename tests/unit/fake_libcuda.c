/*
 * fake_libcuda.c: a stand-in for libcuda.so.1 with the calls libheadroom
 * makes (SM counts, green contexts), for testing partitions on machines
 * without a GPU. It keeps count of what is alive and of what was done in
 * the wrong order, and fails any call on demand, so that every cleanup
 * path of hr_partition_create can be walked.
 *
 * The test opens the same file first (the dynamic loader then hands
 * libheadroom the same copy) and drives it through fake_cuda_set/get/fail.
 * Split rules as the real driver documents them: groups of at least
 * minSmPartitionSize, in steps of smCoscheduledAlignment, or of 2 SMs
 * with CU_DEV_SM_RESOURCE_SPLIT_IGNORE_SM_COSCHEDULING.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cuda.h>

#define MAGIC_RES 0x68724653u  /* in a resource's padding: made by us */
#define MAGIC_CTX 0x68724358u
#define MAGIC_STREAM 0x68725354u

typedef struct fake_ctx {
  unsigned magic;
  unsigned sms;
  int streams;
} fake_ctx;

typedef struct fake_stream {
  unsigned magic;
  fake_ctx *ctx;
} fake_stream;

/* Knobs and counters, by name. */
static struct {
  const char *key;
  long v;
} vars[] = {
  { "devices", 1 },          /* cuDeviceGetCount */
  { "sms", 132 },            /* of every device but ... */
  { "small_sms", 0 },        /* ... device 1, when set */
  { "align", 8 },            /* smCoscheduledAlignment */
  { "min_part", 8 },         /* minSmPartitionSize */
  { "driver_version", 13000 },
  { "split_extra", 0 },      /* SMs the split adds to the group asked for */
  { "live_ctx", 0 },
  { "live_streams", 0 },
  { "syncs", 0 },
  { "order_errors", 0 },     /* a context destroyed before its streams,
                              * a bad handle, a bad flag */
  { "last_split_flags", -1 },
  { "last_split_min", -1 },
  { "proc_bad_flags", 0 },   /* cuGetProcAddress asked for a per-thread
                              * flavor */
};

static long *var(const char *key)
{
  size_t i;
  for(i = 0; i < sizeof(vars) / sizeof(vars[0]); i++)
    if(strcmp(vars[i].key, key) == 0)
      return &vars[i].v;
  return NULL;
}

void fake_cuda_set(const char *key, long v);
long fake_cuda_get(const char *key);
void fake_cuda_fail(const char *call, int nth, int code);

void fake_cuda_set(const char *key, long v)
{
  long *p = var(key);
  if(p)
    *p = v;
}

long fake_cuda_get(const char *key)
{
  long *p = var(key);
  return p ? *p : -999;
}

/* The nth call of `call` from now (1: the next one) returns `code`. */
static char fail_call[64];
static int fail_nth;
static CUresult fail_code;

void fake_cuda_fail(const char *call, int nth, int code)
{
  strncpy(fail_call, call ? call : "", sizeof(fail_call) - 1);
  fail_nth = nth;
  fail_code = (CUresult)code;
}

static int failing(const char *call)
{
  if(fail_nth <= 0 || strcmp(fail_call, call) != 0)
    return 0;
  if(--fail_nth > 0)
    return 0;
  return 1;
}

#define FAIL_POINT(name)                                                       \
  do {                                                                         \
    if(failing(name))                                                          \
      return fail_code;                                                        \
  } while(0)

static void order_error(void)
{
  (*var("order_errors"))++;
}

/* ---- the plain exports ---------------------------------------------------- */

CUresult cuInit(unsigned int flags)
{
  FAIL_POINT("cuInit");
  return flags == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult cuDeviceGetCount(int *count)
{
  FAIL_POINT("cuDeviceGetCount");
  *count = (int)fake_cuda_get("devices");
  return CUDA_SUCCESS;
}

static long device_sms(CUdevice dev)
{
  return dev == 1 && fake_cuda_get("small_sms") > 0 ?
         fake_cuda_get("small_sms") : fake_cuda_get("sms");
}

static CUresult device_get(CUdevice *dev, int ordinal)
{
  FAIL_POINT("cuDeviceGet");
  if(ordinal < 0 || ordinal >= fake_cuda_get("devices"))
    return CUDA_ERROR_INVALID_DEVICE;
  *dev = ordinal;
  return CUDA_SUCCESS;
}

#undef cuDeviceGet
CUresult cuDeviceGet(CUdevice *dev, int ordinal)
{
  return device_get(dev, ordinal);
}

CUresult cuDeviceGetAttribute(int *value, CUdevice_attribute attr, CUdevice dev)
{
  FAIL_POINT("cuDeviceGetAttribute");
  if(dev < 0 || dev >= fake_cuda_get("devices"))
    return CUDA_ERROR_INVALID_DEVICE;
  if(attr != CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
    return CUDA_ERROR_INVALID_VALUE;
  *value = (int)device_sms(dev);
  return CUDA_SUCCESS;
}

CUresult cuGetErrorName(CUresult r, const char **name)
{
  static const struct { CUresult r; const char *name; } names[] = {
    { CUDA_SUCCESS, "CUDA_SUCCESS" },
    { CUDA_ERROR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE" },
    { CUDA_ERROR_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY" },
    { CUDA_ERROR_INVALID_DEVICE, "CUDA_ERROR_INVALID_DEVICE" },
    { CUDA_ERROR_NOT_SUPPORTED, "CUDA_ERROR_NOT_SUPPORTED" },
    { CUDA_ERROR_LAUNCH_FAILED, "CUDA_ERROR_LAUNCH_FAILED" },
    { CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION,
      "CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION" },
  };
  size_t i;
  for(i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
    if(names[i].r == r) {
      *name = names[i].name;
      return CUDA_SUCCESS;
    }
  }
  *name = NULL;
  return CUDA_ERROR_INVALID_VALUE;
}

/* ---- green contexts (only through cuGetProcAddress) ----------------------- */

static void res_fill(CUdevResource *r, unsigned sms, unsigned min_part,
                     unsigned align)
{
  unsigned magic = MAGIC_RES;
  memset(r, 0, sizeof(*r));
  r->type = CU_DEV_RESOURCE_TYPE_SM;
  r->sm.smCount = sms;
  r->sm.minSmPartitionSize = min_part;
  r->sm.smCoscheduledAlignment = align;
  memcpy(r->_internal_padding, &magic, sizeof(magic));
}

static int res_ours(const CUdevResource *r)
{
  unsigned magic;
  memcpy(&magic, r->_internal_padding, sizeof(magic));
  return r->type == CU_DEV_RESOURCE_TYPE_SM && magic == MAGIC_RES;
}

static CUresult get_dev_resource(CUdevice dev, CUdevResource *r,
                                 CUdevResourceType type)
{
  FAIL_POINT("cuDeviceGetDevResource");
  if(dev < 0 || dev >= fake_cuda_get("devices"))
    return CUDA_ERROR_INVALID_DEVICE;
  if(type != CU_DEV_RESOURCE_TYPE_SM)
    return CUDA_ERROR_INVALID_RESOURCE_TYPE;
  res_fill(r, (unsigned)device_sms(dev), (unsigned)fake_cuda_get("min_part"),
           (unsigned)fake_cuda_get("align"));
  return CUDA_SUCCESS;
}

static CUresult split(CUdevResource *result, unsigned int *groups,
                      const CUdevResource *input, CUdevResource *remaining,
                      unsigned int flags, unsigned int min_count)
{
  unsigned step, min, group;
  int fine = (flags & CU_DEV_SM_RESOURCE_SPLIT_IGNORE_SM_COSCHEDULING) != 0;

  FAIL_POINT("cuDevSmResourceSplitByCount");
  fake_cuda_set("last_split_flags", (long)flags);
  fake_cuda_set("last_split_min", (long)min_count);
  if(!groups || !input || !res_ours(input) || min_count > input->sm.smCount)
    return CUDA_ERROR_INVALID_VALUE;
  step = fine ? 2 : input->sm.smCoscheduledAlignment;
  min = fine ? 2 : input->sm.minSmPartitionSize;
  group = (min_count + step - 1) / step * step;
  if(group < min)
    group = min;
  group += (unsigned)fake_cuda_get("split_extra");
  if(!result) {
    *groups = group <= input->sm.smCount ? input->sm.smCount / group : 0;
    return CUDA_SUCCESS;
  }
  if(*groups < 1)
    return CUDA_ERROR_INVALID_VALUE;
  if(group > input->sm.smCount) {
    *groups = 0;
    if(remaining)
      res_fill(remaining, input->sm.smCount, min, step);
    return CUDA_SUCCESS;
  }
  *groups = 1;
  res_fill(&result[0], group, min, step);
  if(remaining)
    res_fill(remaining, input->sm.smCount - group, min, step);
  return CUDA_SUCCESS;
}

/* A descriptor is the SM count it stands for, disguised as a pointer:
 * nothing to free, as with the real one. */
static CUresult generate_desc(CUdevResourceDesc *desc, CUdevResource *res,
                              unsigned int n)
{
  FAIL_POINT("cuDevResourceGenerateDesc");
  if(!desc || !res || n != 1 || !res_ours(res) || res->sm.smCount == 0)
    return CUDA_ERROR_INVALID_VALUE;
  *desc = (CUdevResourceDesc)(uintptr_t)(0x10000u + res->sm.smCount);
  return CUDA_SUCCESS;
}

static CUresult ctx_create(CUgreenCtx *out, CUdevResourceDesc desc,
                           CUdevice dev, unsigned int flags)
{
  fake_ctx *c;
  FAIL_POINT("cuGreenCtxCreate");
  if(!out || (uintptr_t)desc <= 0x10000u || dev < 0 ||
     dev >= fake_cuda_get("devices"))
    return CUDA_ERROR_INVALID_VALUE;
  if(flags != CU_GREEN_CTX_DEFAULT_STREAM) {
    order_error();
    return CUDA_ERROR_INVALID_VALUE;
  }
  c = calloc(1, sizeof(*c));
  if(!c)
    return CUDA_ERROR_OUT_OF_MEMORY;
  c->magic = MAGIC_CTX;
  c->sms = (unsigned)((uintptr_t)desc - 0x10000u);
  (*var("live_ctx"))++;
  *out = (CUgreenCtx)c;
  return CUDA_SUCCESS;
}

static CUresult ctx_destroy(CUgreenCtx h)
{
  fake_ctx *c = (fake_ctx *)h;
  FAIL_POINT("cuGreenCtxDestroy");
  if(!c || c->magic != MAGIC_CTX) {
    order_error();
    return CUDA_ERROR_INVALID_CONTEXT;
  }
  if(c->streams)
    order_error();      /* its streams would leak */
  c->magic = 0;
  free(c);
  (*var("live_ctx"))--;
  return CUDA_SUCCESS;
}

static CUresult stream_create(CUstream *out, CUgreenCtx h, unsigned int flags,
                              int priority)
{
  fake_ctx *c = (fake_ctx *)h;
  fake_stream *s;
  (void)priority;
  FAIL_POINT("cuGreenCtxStreamCreate");
  if(!out || !c || c->magic != MAGIC_CTX)
    return CUDA_ERROR_INVALID_CONTEXT;
  if(flags != CU_STREAM_NON_BLOCKING) {
    order_error();
    return CUDA_ERROR_INVALID_VALUE;
  }
  s = calloc(1, sizeof(*s));
  if(!s)
    return CUDA_ERROR_OUT_OF_MEMORY;
  s->magic = MAGIC_STREAM;
  s->ctx = c;
  c->streams++;
  (*var("live_streams"))++;
  *out = (CUstream)s;
  return CUDA_SUCCESS;
}

/* For the tests: the SM count of the green context a stream was made in,
 * -1 for anything that is not a live stream of this driver. */
long fake_cuda_stream_sms(void *h);
long fake_cuda_stream_sms(void *h)
{
  fake_stream *s = (fake_stream *)h;
  if(!s || s->magic != MAGIC_STREAM || s->ctx->magic != MAGIC_CTX)
    return -1;
  return (long)s->ctx->sms;
}

static CUresult stream_sync(CUstream h)
{
  fake_stream *s = (fake_stream *)h;
  FAIL_POINT("cuStreamSynchronize");
  if(!s || s->magic != MAGIC_STREAM) {
    order_error();
    return CUDA_ERROR_INVALID_HANDLE;
  }
  (*var("syncs"))++;
  return CUDA_SUCCESS;
}

static CUresult stream_destroy(CUstream h)
{
  fake_stream *s = (fake_stream *)h;
  FAIL_POINT("cuStreamDestroy");
  if(!s || s->magic != MAGIC_STREAM || s->ctx->magic != MAGIC_CTX) {
    order_error();
    return CUDA_ERROR_CONTEXT_IS_DESTROYED;
  }
  s->ctx->streams--;
  s->magic = 0;
  free(s);
  (*var("live_streams"))--;
  return CUDA_SUCCESS;
}

/* ---- cuGetProcAddress, CUDA 12 signature ---------------------------------- */

CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int version,
                             cuuint64_t flags,
                             CUdriverProcAddressQueryResult *status);

CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int version,
                             cuuint64_t flags,
                             CUdriverProcAddressQueryResult *status)
{
  static const struct { const char *name; int since; void *fn; } calls[] = {
    { "cuDeviceGet", 2000, (void *)device_get },
    { "cuDeviceGetDevResource", 12040, (void *)get_dev_resource },
    { "cuDevSmResourceSplitByCount", 12040, (void *)split },
    { "cuDevResourceGenerateDesc", 12040, (void *)generate_desc },
    { "cuGreenCtxCreate", 12040, (void *)ctx_create },
    { "cuGreenCtxDestroy", 12040, (void *)ctx_destroy },
    { "cuGreenCtxStreamCreate", 12050, (void *)stream_create },
    { "cuStreamDestroy", 4000, (void *)stream_destroy },
    { "cuStreamSynchronize", 2000, (void *)stream_sync },
  };
  size_t i;

  FAIL_POINT("cuGetProcAddress");
  if(!symbol || !pfn)
    return CUDA_ERROR_INVALID_VALUE;
  *pfn = NULL;
  if(flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM)
    (*var("proc_bad_flags"))++;
  if(version > fake_cuda_get("driver_version"))
    return CUDA_ERROR_INVALID_VALUE;
  for(i = 0; i < sizeof(calls) / sizeof(calls[0]); i++) {
    if(strcmp(calls[i].name, symbol) != 0)
      continue;
    if(calls[i].since > fake_cuda_get("driver_version") ||
       version < calls[i].since) {
      if(status)
        *status = CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT;
      return CUDA_SUCCESS;
    }
    *pfn = calls[i].fn;
    if(status)
      *status = CU_GET_PROC_ADDRESS_SUCCESS;
    return CUDA_SUCCESS;
  }
  if(status)
    *status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  return CUDA_SUCCESS;
}
