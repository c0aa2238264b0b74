/*
 * topology.c: GPUs from the CUDA driver, the config, or the default.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "log.h"
#include "topology.h"

/* The few driver API entry points we need, declared here rather than
 * taken from cuda.h so the daemon builds where CUDA is not installed.
 * Their ABI has been stable since CUDA 2.0. */
typedef int cu_result;
typedef int cu_device;
#define CU_SUCCESS 0
#define CU_ATTR_MULTIPROCESSOR_COUNT 16

typedef cu_result (*cu_init_fn)(unsigned flags);
typedef cu_result (*cu_count_fn)(int *count);
typedef cu_result (*cu_get_fn)(cu_device *dev, int ordinal);
typedef cu_result (*cu_attr_fn)(int *value, int attr, cu_device dev);
typedef cu_result (*cu_name_fn)(char *name, int len, cu_device dev);

void hr__topology_default(hr_topology *topo)
{
  int g;

  memset(topo, 0, sizeof(*topo));
  topo->source = HR_TOPO_DEFAULT;
  topo->n_gpus = HR__DEFAULT_GPUS;
  for(g = 0; g < topo->n_gpus; g++) {
    topo->gpus[g].index = g;
    topo->gpus[g].sms = HR__DEFAULT_SMS;
  }
}

void hr__topology_from_config(const hr__config *cfg, hr_topology *topo)
{
  int g;

  memset(topo, 0, sizeof(*topo));
  topo->source = HR_TOPO_CONFIG;
  topo->n_gpus = cfg->gpus;
  for(g = 0; g < topo->n_gpus; g++) {
    topo->gpus[g].index = g;
    topo->gpus[g].sms = cfg->gpu_sms[g] ? cfg->gpu_sms[g] : cfg->sms;
  }
}

int hr__topology_from_cuda(hr_topology *topo, char *why, size_t n)
{
  cu_init_fn cu_init;
  cu_count_fn cu_count;
  cu_get_fn cu_get;
  cu_attr_fn cu_attr;
  cu_name_fn cu_name;
  void *lib;
  int count = 0, g, rc;
  cu_result r;

  /* Deliberately never dlclose()d: after cuInit the driver may have
   * threads running its code, and unloading it under them would crash. */
  lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if(!lib) {
    snprintf(why, n, "no CUDA driver (%s)", dlerror());
    return HR_ENOGPU;
  }
  cu_init = (cu_init_fn)dlsym(lib, "cuInit");
  cu_count = (cu_count_fn)dlsym(lib, "cuDeviceGetCount");
  cu_get = (cu_get_fn)dlsym(lib, "cuDeviceGet");
  cu_attr = (cu_attr_fn)dlsym(lib, "cuDeviceGetAttribute");
  cu_name = (cu_name_fn)dlsym(lib, "cuDeviceGetName");
  if(!cu_init || !cu_count || !cu_get || !cu_attr || !cu_name) {
    snprintf(why, n, "libcuda.so.1 lacks the driver API entry points");
    return HR_ENOGPU;
  }
  r = cu_init(0);
  if(r != CU_SUCCESS) {
    snprintf(why, n, "cuInit failed (CUDA error %d: no usable device)", r);
    return HR_ENOGPU;
  }
  r = cu_count(&count);
  if(r != CU_SUCCESS || count < 1) {
    snprintf(why, n, "CUDA driver found no device");
    return HR_ENOGPU;
  }
  memset(topo, 0, sizeof(*topo));
  topo->source = HR_TOPO_CUDA;
  if(count > HR_MAX_GPUS)
    count = HR_MAX_GPUS; /* the protocol's limit; the rest go unbrokered */
  for(g = 0; g < count; g++) {
    cu_device dev;
    int sms = 0;
    hr_gpu_info *info = &topo->gpus[g];

    rc = cu_get(&dev, g);
    if(rc == CU_SUCCESS)
      rc = cu_attr(&sms, CU_ATTR_MULTIPROCESSOR_COUNT, dev);
    if(rc != CU_SUCCESS || sms < 1 || sms > HR_MAX_SMS) {
      snprintf(why, n, "CUDA device %d: cannot read its SM count (error %d)",
               g, rc);
      return HR_ENOGPU;
    }
    info->index = g;
    info->sms = sms;
    if(cu_name(info->name, (int)sizeof(info->name), dev) != CU_SUCCESS)
      info->name[0] = '\0';
    info->name[sizeof(info->name) - 1] = '\0';
  }
  topo->n_gpus = count;
  snprintf(why, n, "CUDA driver");
  return HR_OK;
}

int hr__topology_detect(const hr__config *cfg, hr_topology *topo, char *why,
                        size_t n)
{
  char cuda_why[256];

  switch(cfg->topology) {
  case HR_TOPOLOGY_CUDA:
    if(hr__topology_from_cuda(topo, cuda_why, sizeof(cuda_why))) {
      snprintf(why, n, "topology = cuda, but %s", cuda_why);
      return HR_ENOGPU;
    }
    snprintf(why, n, "CUDA driver: topology = cuda");
    return HR_OK;
  case HR_TOPOLOGY_CONFIG:
    hr__topology_from_config(cfg, topo);
    snprintf(why, n, "config file: topology = config");
    return HR_OK;
  case HR_TOPOLOGY_DEFAULT:
    hr__topology_default(topo);
    snprintf(why, n, "embedded default: topology = default");
    return HR_OK;
  case HR_TOPOLOGY_AUTO:
  default:
    break;
  }
  if(!hr__topology_from_cuda(topo, cuda_why, sizeof(cuda_why))) {
    snprintf(why, n, "CUDA driver");
    return HR_OK;
  }
  /* Say why CUDA was passed over; the announcement line stays short. */
  hr__info("topology: CUDA not used: %s", cuda_why);
  if(cfg->gpus) {
    hr__topology_from_config(cfg, topo);
    snprintf(why, n, "config file: no CUDA device");
    return HR_OK;
  }
  hr__topology_default(topo);
  snprintf(why, n, "embedded default: no CUDA device, no config");
  return HR_OK;
}
