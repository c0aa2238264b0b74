/*
 * test_topology.c: each GPU's green-context step, without a GPU.
 *
 * The driver is stood in for by functions that answer as an H200 did
 * (docs/measurements.md §2: minSmPartitionSize and smCoscheduledAlignment
 * 8, splits of 2 ignoring co-scheduling), then as drivers that fail or
 * lack the calls.
 * Where cuda.h is installed, the daemon's copy of CUdevResource is held
 * to it field by field, since the driver writes into that struct.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "topology.h"

#if defined(__has_include)
#if __has_include(<cuda.h>)
#include <cuda.h>
#define HAVE_CUDA_H 1
#endif
#endif

/* ---- a driver that answers like an H200 -------------------------------- */

typedef struct fake {
  int result;                       /* what get_dev_resource returns */
  int type;                         /* the type it writes */
  unsigned sms, min_size, alignment;
  int split_result;                 /* what the split returns */
  unsigned split_group;             /* SMs of the group it makes */
  unsigned split_groups;            /* groups it says it made */
  int major;                        /* compute capability */
  /* What the daemon asked. */
  int asked_type, asked_dev;
  unsigned asked_flags, asked_min, asked_groups;
  const hr__cu_dev_resource *asked_input;
  int splits;
} fake;

static fake drv;

static void fake_h200(void)
{
  memset(&drv, 0, sizeof(drv));
  drv.type = HR__CU_RESOURCE_TYPE_SM;
  drv.sms = 132;
  drv.min_size = 8;
  drv.alignment = 8;
  drv.split_group = 2;
  drv.split_groups = 1;
  drv.major = 9;
}

static int fake_attr(int *value, int attr, int dev)
{
  (void)dev;
  if(attr != HR__CU_ATTR_CC_MAJOR)
    return 1;
  *value = drv.major;
  return 0;
}

static int fake_resource(int dev, hr__cu_dev_resource *res, int type)
{
  drv.asked_dev = dev;
  drv.asked_type = type;
  if(drv.result)
    return drv.result;
  res->type = drv.type;
  res->u.sm.sm_count = drv.sms;
  res->u.sm.min_partition_size = drv.min_size;
  res->u.sm.coscheduled_alignment = drv.alignment;
  return 0;
}

static int fake_split(hr__cu_dev_resource *result, unsigned *groups,
                      const hr__cu_dev_resource *input,
                      hr__cu_dev_resource *remaining, unsigned flags,
                      unsigned min_count)
{
  drv.splits++;
  drv.asked_flags = flags;
  drv.asked_min = min_count;
  drv.asked_groups = *groups;
  drv.asked_input = input;
  if(drv.split_result)
    return drv.split_result;
  if(remaining)
    return 1;                       /* the daemon never asks for it */
  result[0].type = HR__CU_RESOURCE_TYPE_SM;
  result[0].u.sm.sm_count = drv.split_group;
  *groups = drv.split_groups;
  return 0;
}

static const hr__cu_resource_api fake_api = {
  fake_attr, fake_resource, fake_split
};

static int granularity(int ignore)
{
  char why[128] = "";
  int g = hr__topology_granularity(&fake_api, 3, ignore, why, sizeof(why));

  if(g > 0)
    assert_string_equal(why, "");   /* nothing to explain */
  else
    assert_true(why[0] != '\0');
  return g;
}

/* ---- tests --------------------------------------------------------------- */

static void test_h200(void **state)
{
  (void)state;
  fake_h200();
  assert_int_equal(granularity(0), 8);
  assert_int_equal(drv.asked_dev, 3);
  assert_int_equal(drv.asked_type, HR__CU_RESOURCE_TYPE_SM);
  assert_int_equal(drv.splits, 0);  /* the coarse step needs no split */

  /* Ignoring co-scheduling: one group of at least 1 SM, whatever the
   * driver rounds that up to, from the device's whole SM resource. */
  assert_int_equal(granularity(1), 2);
  assert_int_equal(drv.splits, 1);
  assert_int_equal(drv.asked_flags, HR__CU_SPLIT_IGNORE_SM_COSCHEDULING);
  assert_int_equal(drv.asked_min, 1);
  assert_int_equal(drv.asked_groups, 1);
}

/* The step is the larger of the minimum partition and the alignment. */
static void test_larger_of_the_two(void **state)
{
  (void)state;
  fake_h200();
  drv.min_size = 4;
  drv.alignment = 2;
  assert_int_equal(granularity(0), 4);
  drv.min_size = 2;
  drv.alignment = 6;
  assert_int_equal(granularity(0), 6);
}

/* A driver without green contexts, or one that fails: no partition. */
static void test_no_partition(void **state)
{
  hr__cu_resource_api none = { fake_attr, NULL, NULL };
  char why[128];

  (void)state;
  fake_h200();
  assert_int_equal(hr__topology_granularity(&none, 0, 0, why, sizeof(why)),
                   0);
  assert_non_null(strstr(why, "no green contexts"));
  assert_int_equal(hr__topology_granularity(NULL, 0, 1, why, sizeof(why)),
                   0);
  drv.result = 801;                 /* CUDA_ERROR_NOT_SUPPORTED */
  assert_int_equal(granularity(0), 0);
  assert_int_equal(hr__topology_granularity(&fake_api, 0, 0, why,
                                            sizeof(why)), 0);
  assert_non_null(strstr(why, "801"));
  fake_h200();
  drv.type = 0;                     /* not an SM resource */
  assert_int_equal(granularity(0), 0);
  fake_h200();
  drv.alignment = 0;
  drv.min_size = 0;
  assert_int_equal(granularity(0), 0);
  fake_h200();
  drv.min_size = 200;               /* more than the device has */
  assert_int_equal(granularity(1), 0);
}

/* A split that fails or says nothing useful: 2 on compute capability 9.x
 * (docs/measurements.md §2), the co-scheduled step elsewhere, never a step
 * above it. */
static void test_split_fallbacks(void **state)
{
  (void)state;
  fake_h200();
  drv.split_result = 1;
  assert_int_equal(granularity(1), 2);
  drv.major = 10;
  assert_int_equal(granularity(1), 8);
  fake_h200();
  drv.split_groups = 0;
  drv.major = 8;
  assert_int_equal(granularity(1), 8);
  fake_h200();
  drv.split_group = 16;             /* coarser than the plain step */
  assert_int_equal(granularity(1), 2);
  fake_h200();
  drv.split_group = 0;
  drv.major = 0;
  assert_int_equal(granularity(1), 8);
}

/* Topologies the driver did not describe: an H100/H200's steps. */
static void test_detect_without_driver(void **state)
{
  int gran[HR_MAX_GPUS];
  hr_topology topo;
  hr__config cfg;
  char why[256];
  int g;

  (void)state;
  hr__config_default(&cfg);
  cfg.topology = HR_TOPOLOGY_DEFAULT;
  memset(gran, 0x7f, sizeof(gran));
  assert_int_equal(hr__topology_detect(&cfg, &topo, gran, why, sizeof(why)),
                   HR_OK);
  assert_int_equal(topo.n_gpus, 8);
  for(g = 0; g < 8; g++)
    assert_int_equal(gran[g], 8);
  assert_int_equal(gran[8], 0);     /* past the topology: cleared */

  cfg.topology = HR_TOPOLOGY_CONFIG;
  cfg.gpus = 3;
  cfg.partition_ignore_coscheduling = 1;
  assert_int_equal(hr__topology_detect(&cfg, &topo, gran, why, sizeof(why)),
                   HR_OK);
  assert_int_equal(topo.n_gpus, 3);
  for(g = 0; g < 3; g++)
    assert_int_equal(gran[g], 2);
  assert_int_equal(hr__topology_default_granularity(0), 8);
  assert_int_equal(hr__topology_default_granularity(1), 2);
}

/* The daemon's CUdevResource against cuda.h's, where it is installed. */
static void test_layout(void **state)
{
  (void)state;
  assert_int_equal(sizeof(hr__cu_dev_resource), 144);
  assert_int_equal(offsetof(hr__cu_dev_resource, u), 96);
#ifdef HAVE_CUDA_H
  assert_int_equal(sizeof(hr__cu_dev_resource), sizeof(CUdevResource));
  assert_int_equal(offsetof(hr__cu_dev_resource, type),
                   offsetof(CUdevResource, type));
  assert_int_equal(offsetof(hr__cu_dev_resource, u.sm.sm_count),
                   offsetof(CUdevResource, sm.smCount));
  assert_int_equal(offsetof(hr__cu_dev_resource, u.sm.min_partition_size),
                   offsetof(CUdevResource, sm.minSmPartitionSize));
  assert_int_equal(offsetof(hr__cu_dev_resource,
                            u.sm.coscheduled_alignment),
                   offsetof(CUdevResource, sm.smCoscheduledAlignment));
  assert_int_equal(HR__CU_RESOURCE_TYPE_SM, CU_DEV_RESOURCE_TYPE_SM);
  assert_int_equal(HR__CU_SPLIT_IGNORE_SM_COSCHEDULING,
                   CU_DEV_SM_RESOURCE_SPLIT_IGNORE_SM_COSCHEDULING);
  assert_int_equal(HR__CU_ATTR_CC_MAJOR,
                   CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
#else
  print_message("cuda.h not installed: layout checked by size only\n");
#endif
}

int main(void)
{
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_h200),
    cmocka_unit_test(test_larger_of_the_two),
    cmocka_unit_test(test_no_partition),
    cmocka_unit_test(test_split_fallbacks),
    cmocka_unit_test(test_detect_without_driver),
    cmocka_unit_test(test_layout),
  };
  return cmocka_run_group_tests_name("topology", tests, NULL, NULL);
}
