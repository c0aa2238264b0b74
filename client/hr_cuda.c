/*
 * hr_cuda.c: the CUDA driver, opened at run time: SM counts and partition
 * granularity for degraded budgets, and the entry points of the green
 * context calls (hr_partition.c).
 *
 * libcuda is opened at run time so that libheadroom links and runs on
 * machines with no CUDA at all (then every GPU is taken to have 132 SMs,
 * an H100/H200 SXM, split in steps of 8). Asked once per process: the
 * answers cannot change.
 *
 * Entry points newer than CUDA 12 are looked up with cuGetProcAddress by
 * base name and CUDA version, never with dlsym: the exported names carry
 * ABI suffixes (_v2, _v3) that cuda.h hides behind macros, and a plain
 * dlsym of the base name can return an older ABI than the header declares.
 * The four calls dlsym'ed below have never had a second version.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>

#include "hr_client_int.h"

#ifdef HR_HAVE_CUDA_H
#include <cuda.h>
#endif

#define CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT 16
#define CU_GET_PROC_ADDRESS_LEGACY_STREAM_ 1  /* not the per-thread flavor */
#define CU_GET_PROC_ADDRESS_SUCCESS_ 0

typedef int (*cu_init_fn)(unsigned int flags);
typedef int (*cu_device_get_count_fn)(int *count);
typedef int (*cu_device_get_fn)(int *device, int ordinal);
typedef int (*cu_device_get_attribute_fn)(int *value, int attrib, int dev);
typedef int (*cu_get_error_name_fn)(int result, const char **name);
/* cuGetProcAddress as of CUDA 12.0 (cuGetProcAddress_v2 in the library). */
typedef int (*cu_get_proc_fn)(const char *symbol, void **fn, int version,
                              uint64_t flags, int *status);

static pthread_once_t cuda_once = PTHREAD_ONCE_INIT;
static const char *cuda_path = "libcuda.so.1";
static int cuda_path_locked;        /* the probe has started */
static pthread_mutex_t cuda_path_mu = PTHREAD_MUTEX_INITIALIZER;
static int cuda_count;              /* devices seen, 0 without CUDA */
static int cuda_sms[HR_MAX_GPUS];
static int cuda_align[HR_MAX_GPUS]; /* 0: the driver has no SM resources */
static cu_get_proc_fn cuda_get_proc;
static cu_get_error_name_fn cuda_error_name;

/* cuGetProcAddress (which must be there) for `name` as of CUDA `version`:
 * HR_OK with *fn set, else HR_EUNSUPPORTED with *fn NULL. A driver older
 * than `version` answers CUDA_ERROR_INVALID_VALUE; one without the call
 * answers success with a NULL pointer. */
static int proc_lookup(const char *name, int version, void **fn)
{
  int status = -1;

  *fn = NULL;
  if(cuda_get_proc(name, fn, version, CU_GET_PROC_ADDRESS_LEGACY_STREAM_,
                   &status) || status != CU_GET_PROC_ADDRESS_SUCCESS_ || !*fn) {
    *fn = NULL;
    return HR_EUNSUPPORTED;
  }
  return HR_OK;
}

/* max(smCoscheduledAlignment, minSmPartitionSize) of one device; 0 when
 * the driver (or this build) cannot say. */
static int probe_alignment(int dev)
{
#ifdef HR_HAVE_CUDA_H
  CUresult (*get_resource)(CUdevice, CUdevResource *, CUdevResourceType);
  CUdevResource r;
  unsigned int a;

  if(proc_lookup("cuDeviceGetDevResource", 12040, (void **)&get_resource))
    return 0;
  if(get_resource((CUdevice)dev, &r, CU_DEV_RESOURCE_TYPE_SM) != CUDA_SUCCESS ||
     r.type != CU_DEV_RESOURCE_TYPE_SM)
    return 0;
  a = r.sm.smCoscheduledAlignment > r.sm.minSmPartitionSize ?
      r.sm.smCoscheduledAlignment : r.sm.minSmPartitionSize;
  return a >= 1 && a <= HR_MAX_SMS ? (int)a : 0;
#else
  (void)dev;
  return 0;
#endif
}

static void cuda_probe(void)
{
  cu_init_fn init;
  cu_device_get_count_fn get_count;
  cu_device_get_fn get;
  cu_device_get_attribute_fn get_attr;
  void *lib;
  int n = 0, i;

  pthread_mutex_lock(&cuda_path_mu);
  cuda_path_locked = 1;
  pthread_mutex_unlock(&cuda_path_mu);
  lib = dlopen(cuda_path, RTLD_NOW | RTLD_LOCAL);
  if(!lib)
    return;
  init = (cu_init_fn)dlsym(lib, "cuInit");
  get_count = (cu_device_get_count_fn)dlsym(lib, "cuDeviceGetCount");
  get = (cu_device_get_fn)dlsym(lib, "cuDeviceGet");
  get_attr = (cu_device_get_attribute_fn)dlsym(lib, "cuDeviceGetAttribute");
  cuda_error_name = (cu_get_error_name_fn)dlsym(lib, "cuGetErrorName");
  if(!init || !get_count || !get || !get_attr || init(0) ||
     get_count(&n) || n <= 0)
    return;   /* the library stays loaded: the application will want it */
  /* Absent before CUDA 12.0, which has no green contexts either. */
  cuda_get_proc = (cu_get_proc_fn)dlsym(lib, "cuGetProcAddress_v2");
  if(n > HR_MAX_GPUS)
    n = HR_MAX_GPUS;
  for(i = 0; i < n; i++) {
    int dev, sms = 0;
    if(get(&dev, i) ||
       get_attr(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev) ||
       sms <= 0 || sms > HR_MAX_SMS)
      break;
    cuda_sms[i] = sms;
    cuda_align[i] = cuda_get_proc ? probe_alignment(dev) : 0;
  }
  cuda_count = i;
}

int hr__cuda_use_library(const char *path)
{
  int err = HR_OK;
  if(!path || !*path)
    return HR_EINVAL;
  pthread_mutex_lock(&cuda_path_mu);
  if(cuda_path_locked)
    err = HR_EINVAL;
  else
    cuda_path = path;
  pthread_mutex_unlock(&cuda_path_mu);
  return err;
}

/* HR_OK when the probe saw CUDA device `gpu`. */
static int device_probed(int gpu)
{
  if(gpu < 0 || gpu >= HR_MAX_GPUS)
    return HR_EINVAL;
  pthread_once(&cuda_once, cuda_probe);
  return gpu < cuda_count ? HR_OK : HR_ENOGPU;
}

int hr__cuda_sms(int gpu)
{
  int err = device_probed(gpu);
  return err ? err : cuda_sms[gpu];
}

int hr__cuda_sm_alignment(int gpu)
{
  int err = device_probed(gpu);
  if(err)
    return err;
  return cuda_align[gpu] > 0 ? cuda_align[gpu] : HR_EUNSUPPORTED;
}

int hr__cuda_proc(const char *name, int version, void **fn)
{
  if(!name || !fn)
    return HR_EINVAL;
  *fn = NULL;
  pthread_once(&cuda_once, cuda_probe);
  if(cuda_count == 0)
    return HR_ENOGPU;
  if(!cuda_get_proc)
    return HR_EUNSUPPORTED;
  return proc_lookup(name, version, fn);
}

const char *hr__cuda_error_name(int result, char *buf, size_t size)
{
  const char *name = NULL;
  pthread_once(&cuda_once, cuda_probe);
  if(cuda_error_name && cuda_error_name(result, &name) == 0 && name)
    return name;
  snprintf(buf, size, "CUresult %d", result);
  return buf;
}
