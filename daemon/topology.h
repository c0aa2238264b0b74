/*
 * topology.h: which GPUs this node has, how many SMs each, and in what
 * steps each splits into green contexts (partition mode).
 *
 * CUDA is loaded at run time (dlopen of libcuda.so.1), so headroomd builds
 * and runs on machines with no driver; the config file and the embedded
 * default (8 GPUs x 132 SMs, an H100/H200 SXM node) stand in.
 */
#ifndef HR_DAEMON_TOPOLOGY_H
#define HR_DAEMON_TOPOLOGY_H

#include "config.h"
#include "hr_proto.h"

/* Read the topology the config asks for, and each GPU's green-context
 * step into `granularity` (HR_MAX_GPUS entries; 0 for a GPU that cannot be
 * split). `why` gets one line saying which source was used and why the
 * others were not, for the start-up announcement. HR_ENOGPU when
 * `topology = cuda` and CUDA has no device. */
int hr__topology_detect(const hr__config *cfg, hr_topology *topo,
                        int *granularity, char *why, size_t n);

/* Query the CUDA driver only. `ignore_cosched`: the finer step that
 * CU_DEV_SM_RESOURCE_SPLIT_IGNORE_SM_COSCHEDULING allows. HR_ENOGPU with
 * the reason in `why` when there is no driver or no device. */
int hr__topology_from_cuda(hr_topology *topo, int ignore_cosched,
                           int *granularity, char *why, size_t n);

/* The config's gpus/sms/gpu.N.sms (gpus must be set). */
void hr__topology_from_config(const hr__config *cfg, hr_topology *topo);

/* The embedded default. */
void hr__topology_default(hr_topology *topo);

/* The green-context step of a GPU the driver does not describe (a config
 * or default topology): an H100/H200's, 8, or 2 ignoring co-scheduling
 * (docs/measurements.md §2). */
int hr__topology_default_granularity(int ignore_cosched);

/* ---- The driver's resource API (CUDA 12.4+), for the granularity ---- */

/* CUdevResource as cuda.h lays it out (RESOURCE_ABI_VERSION 1): the type,
 * 92 bytes the driver keeps to itself, then a 48-byte union whose SM
 * member starts with these three counts. Declared here, not taken from
 * cuda.h, so the daemon builds without CUDA; tests/unit/test_topology.c
 * holds it to cuda.h where that is installed. */
#define HR__CU_RESOURCE_TYPE_SM 1
#define HR__CU_SPLIT_IGNORE_SM_COSCHEDULING 0x1
#define HR__CU_ATTR_CC_MAJOR 75   /* CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR */

typedef struct hr__cu_sm_resource {
  unsigned sm_count;
  unsigned min_partition_size;      /* minSmPartitionSize */
  unsigned coscheduled_alignment;   /* smCoscheduledAlignment */
} hr__cu_sm_resource;

typedef struct hr__cu_dev_resource {
  int type;                         /* CUdevResourceType */
  unsigned char internal[92];
  union {
    hr__cu_sm_resource sm;
    unsigned char oversize[48];
  } u;
} hr__cu_dev_resource;

/* The three driver calls the granularity takes, as function pointers so
 * that a test can stand in for the driver. A NULL resource call is a
 * driver without green contexts. */
typedef int (*hr__cu_attr_fn)(int *value, int attr, int dev);
typedef int (*hr__cu_resource_fn)(int dev, hr__cu_dev_resource *res,
                                  int type);
typedef int (*hr__cu_split_fn)(hr__cu_dev_resource *result,
                               unsigned *groups,
                               const hr__cu_dev_resource *input,
                               hr__cu_dev_resource *remaining,
                               unsigned flags, unsigned min_count);

typedef struct hr__cu_resource_api {
  hr__cu_attr_fn get_attribute;     /* cuDeviceGetAttribute */
  hr__cu_resource_fn get_dev_resource; /* cuDeviceGetDevResource */
  hr__cu_split_fn sm_split_by_count;   /* cuDevSmResourceSplitByCount */
} hr__cu_resource_api;

/* The green-context step of CUDA device `dev`, in SMs: the larger of
 * minSmPartitionSize and smCoscheduledAlignment, or with `ignore_cosched`
 * the size of the smallest group a split ignoring co-scheduling makes.
 * 0, with the reason in `why`, when the driver cannot split the device. */
int hr__topology_granularity(const hr__cu_resource_api *api, int dev,
                             int ignore_cosched, char *why, size_t n);

#endif /* HR_DAEMON_TOPOLOGY_H */
