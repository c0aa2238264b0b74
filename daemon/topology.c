/*
 * topology.c: GPUs from the CUDA driver, the config, or the default, and
 * the steps their green contexts come in.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "log.h"
#include "policy.h"
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

/* cuda.h's layout, checked here and against cuda.h in test_topology. */
_Static_assert(sizeof(hr__cu_dev_resource) == 4 + 92 + 48,
               "CUdevResource is 144 bytes in RESOURCE_ABI_VERSION 1");

/* docs/measurements.md §2, on H200: minSmPartitionSize and
 * smCoscheduledAlignment 8; ignoring co-scheduling, splits of 2. */
#define COSCHEDULED_GRANULARITY 8
#define FINE_GRANULARITY 2
#define HOPPER_MAJOR 9

int hr__topology_default_granularity(int ignore_cosched)
{
  return ignore_cosched ? FINE_GRANULARITY : COSCHEDULED_GRANULARITY;
}

int hr__topology_granularity(const hr__cu_resource_api *api, int dev,
                             int ignore_cosched, char *why, size_t n)
{
  hr__cu_dev_resource all, group;
  unsigned groups = 1;
  int step, major = 0, rc;

  if(!api || !api->get_dev_resource || !api->sm_split_by_count) {
    snprintf(why, n, "the CUDA driver has no green contexts (CUDA 12.4 or "
             "later has)");
    return 0;
  }
  memset(&all, 0, sizeof(all));
  rc = api->get_dev_resource(dev, &all, HR__CU_RESOURCE_TYPE_SM);
  if(rc != CU_SUCCESS || all.type != HR__CU_RESOURCE_TYPE_SM ||
     all.u.sm.sm_count < 1) {
    snprintf(why, n, "cuDeviceGetDevResource failed (CUDA error %d)", rc);
    return 0;
  }
  step = (int)all.u.sm.coscheduled_alignment;
  if((int)all.u.sm.min_partition_size > step)
    step = (int)all.u.sm.min_partition_size;
  if(step < 1 || step > (int)all.u.sm.sm_count || step > HR_MAX_SMS) {
    snprintf(why, n, "the driver reports a partition step of %d SMs out of "
             "%u", step, all.u.sm.sm_count);
    return 0;
  }
  if(!ignore_cosched)
    return step;
  /* The smallest group a split ignoring co-scheduling makes: ask for one
   * group of at least 1 SM and see what the driver rounds that up to.
   * Nothing is created: a split only describes SMs. */
  memset(&group, 0, sizeof(group));
  rc = api->sm_split_by_count(&group, &groups, &all, NULL,
                              HR__CU_SPLIT_IGNORE_SM_COSCHEDULING, 1);
  if(rc == CU_SUCCESS && groups == 1 && group.u.sm.sm_count >= 1 &&
     (int)group.u.sm.sm_count <= step)
    return (int)group.u.sm.sm_count;
  /* A driver that would not say: on compute capability 9.x the step is 2
   * (measured on H200, docs/measurements.md §2); elsewhere keep the
   * co-scheduled step, which always splits. */
  if(api->get_attribute &&
     api->get_attribute(&major, HR__CU_ATTR_CC_MAJOR, dev) == CU_SUCCESS &&
     major == HOPPER_MAJOR && step >= FINE_GRANULARITY)
    return FINE_GRANULARITY;
  return step;
}

void hr__topology_default(hr_topology *topo)
{
  int g;

  memset(topo, 0, sizeof(*topo));
  topo->source = HR_TOPO_DEFAULT;
  topo->n_gpus = HR__DEFAULT_GPUS;
  for(g = 0; g < topo->n_gpus; g++) {
    topo->gpus[g].index = g;
    topo->gpus[g].sms = HR_POLICY_DEFAULT_SMS;
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

int hr__topology_from_cuda(hr_topology *topo, int ignore_cosched,
                           int *granularity, char *why, size_t n)
{
  hr__cu_resource_api api;
  cu_init_fn cu_init;
  cu_count_fn cu_count;
  cu_get_fn cu_get;
  cu_attr_fn cu_attr;
  cu_name_fn cu_name;
  void *lib;
  char gran_why[128];
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
  /* Green contexts came in CUDA 12.4: an older driver lacks these two,
   * and its GPUs are brokered without partition mode. */
  memset(&api, 0, sizeof(api));
  api.get_attribute = cu_attr;
  api.get_dev_resource = (hr__cu_resource_fn)dlsym(lib,
                                                   "cuDeviceGetDevResource");
  api.sm_split_by_count = (hr__cu_split_fn)dlsym(lib,
                                                 "cuDevSmResourceSplitByCount");
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
    granularity[g] = hr__topology_granularity(&api, dev, ignore_cosched,
                                              gran_why, sizeof(gran_why));
    if(!granularity[g])
      hr__notice("gpu %d: no partition mode: %s", g, gran_why);
  }
  topo->n_gpus = count;
  snprintf(why, n, "CUDA driver");
  return HR_OK;
}

/* Every GPU of a topology the driver did not describe gets the default. */
static void default_granularity(const hr__config *cfg,
                                const hr_topology *topo, int *granularity)
{
  int g;

  for(g = 0; g < topo->n_gpus; g++)
    granularity[g] = hr__topology_default_granularity(
      cfg->partition_ignore_coscheduling);
}

int hr__topology_detect(const hr__config *cfg, hr_topology *topo,
                        int *granularity, char *why, size_t n)
{
  int ignore = cfg->partition_ignore_coscheduling;
  char cuda_why[256];

  memset(granularity, 0, HR_MAX_GPUS * sizeof(*granularity));
  switch(cfg->topology) {
  case HR_TOPOLOGY_CUDA:
    if(hr__topology_from_cuda(topo, ignore, granularity, cuda_why,
                              sizeof(cuda_why))) {
      snprintf(why, n, "topology = cuda, but %s", cuda_why);
      return HR_ENOGPU;
    }
    snprintf(why, n, "CUDA driver: topology = cuda");
    return HR_OK;
  case HR_TOPOLOGY_CONFIG:
    hr__topology_from_config(cfg, topo);
    default_granularity(cfg, topo, granularity);
    snprintf(why, n, "config file: topology = config");
    return HR_OK;
  case HR_TOPOLOGY_DEFAULT:
    hr__topology_default(topo);
    default_granularity(cfg, topo, granularity);
    snprintf(why, n, "embedded default: topology = default");
    return HR_OK;
  case HR_TOPOLOGY_AUTO:
  default:
    break;
  }
  if(!hr__topology_from_cuda(topo, ignore, granularity, cuda_why,
                             sizeof(cuda_why))) {
    snprintf(why, n, "CUDA driver");
    return HR_OK;
  }
  /* Say why CUDA was passed over; the announcement line stays short. */
  hr__info("topology: CUDA not used: %s", cuda_why);
  if(cfg->gpus) {
    hr__topology_from_config(cfg, topo);
    default_granularity(cfg, topo, granularity);
    snprintf(why, n, "config file: no CUDA device");
    return HR_OK;
  }
  hr__topology_default(topo);
  default_granularity(cfg, topo, granularity);
  snprintf(why, n, "embedded default: no CUDA device, no config");
  return HR_OK;
}
