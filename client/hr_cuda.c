/*
 * hr_cuda.c: SM counts from the CUDA driver, for degraded budgets when no
 * daemon has described the node yet.
 *
 * libcuda is opened at run time so that libheadroom links and runs on
 * machines with no CUDA at all (then every GPU is taken to have 132 SMs,
 * an H100/H200 SXM). Asked once per process: the answer cannot change.
 */
#include <dlfcn.h>
#include <pthread.h>

#include "hr_client_int.h"

#define CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT 16

typedef int (*cu_init_fn)(unsigned int flags);
typedef int (*cu_device_get_count_fn)(int *count);
typedef int (*cu_device_get_fn)(int *device, int ordinal);
typedef int (*cu_device_get_attribute_fn)(int *value, int attrib, int dev);

static pthread_once_t cuda_once = PTHREAD_ONCE_INIT;
static int cuda_count;             /* devices seen, 0 without CUDA */
static int cuda_sms[HR_MAX_GPUS];

static void cuda_probe(void)
{
  cu_init_fn init;
  cu_device_get_count_fn get_count;
  cu_device_get_fn get;
  cu_device_get_attribute_fn get_attr;
  void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  int n = 0, i;

  if(!lib)
    return;
  init = (cu_init_fn)dlsym(lib, "cuInit");
  get_count = (cu_device_get_count_fn)dlsym(lib, "cuDeviceGetCount");
  get = (cu_device_get_fn)dlsym(lib, "cuDeviceGet");
  get_attr = (cu_device_get_attribute_fn)dlsym(lib, "cuDeviceGetAttribute");
  if(!init || !get_count || !get || !get_attr || init(0) ||
     get_count(&n) || n <= 0)
    return;   /* the library stays loaded: the application will want it */
  if(n > HR_MAX_GPUS)
    n = HR_MAX_GPUS;
  for(i = 0; i < n; i++) {
    int dev, sms = 0;
    if(get(&dev, i) ||
       get_attr(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev) ||
       sms <= 0 || sms > HR_MAX_SMS)
      break;
    cuda_sms[i] = sms;
  }
  cuda_count = i;
}

int hr__cuda_sms(int gpu)
{
  if(gpu < 0 || gpu >= HR_MAX_GPUS)
    return HR_EINVAL;
  pthread_once(&cuda_once, cuda_probe);
  if(gpu >= cuda_count)
    return HR_ENOGPU;
  return cuda_sms[gpu];
}
