/*
 * test_client_partition.c: partition mode in libheadroom with no daemon.
 *
 * The rule that sizes a comm partition (hr__partition_fields), the
 * partition fields of degraded budgets from the environment, the argument
 * checks of the hr_partition_* calls, and hr_partition_create in a process
 * without a GPU: HR_ENOGPU and nothing left behind (the suite also runs
 * under ASan and valgrind). Where this runs on a GPU machine the driver's
 * numbers replace the 132 SMs and steps of 8 of a machine without one, and
 * the last test makes a real partition. The driver paths are in
 * test_client_partition_fake.c, the daemon's budgets in
 * tests/integration/test_partition.c.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "headroom.h"
#include "hr_client_int.h"
#include "unit_util.h"

static int group_setup(void **state)
{
  (void)state;
  return th_tmpdir_create("/tmp/hr-part-XXXXXX");
}

/* Degraded, and it says so. */
static hr_client *open_degraded(void)
{
  hr_client *c = th_client_open_degraded();
  assert_int_equal(hr_client_connected(c), 0);
  return c;
}

static hr_lease *lease_in(hr_client *c, int gpu, int cluster, hr_mode mode)
{
  hr_lease *l = NULL;
  assert_int_equal(hr_lease_acquire(c, gpu, cluster, mode, &l), HR_OK);
  assert_non_null(l);
  return l;
}

/* What this machine's driver says about GPU 0, or what a degraded budget
 * assumes without one. */
static int machine_sms(void)
{
  int sms = hr__cuda_sms(0);
  return sms > 0 ? sms : 132;
}

static int machine_step(void)
{
  int g = hr__cuda_sm_alignment(0);
  return g > 0 ? g : 8;
}

static int have_driver(void)
{
  return hr__cuda_sms(0) > 0;
}

/* ---- the rule ------------------------------------------------------------ */

static void test_fields_rule(void **state)
{
  static const struct {
    int sms, g, need, k, ceiling, nccl;    /* in */
    int out_g, comm, cap;                  /* out */
  } cases[] = {
    /* H200, steps of 8: at least one step, rounded up. */
    { 132, 8, 0, 1, 131, 0, 8, 8, 8 },
    { 132, 8, 1, 1, 131, 0, 8, 8, 8 },
    { 132, 8, 8, 1, 131, 0, 8, 8, 8 },
    { 132, 8, 9, 1, 131, 0, 8, 16, 16 },
    { 132, 8, 17, 1, 131, 0, 8, 24, 16 },
    /* K collectives in flight share the partition: 3 x 8 <= 24. */
    { 132, 8, 20, 3, 131, 0, 8, 24, 8 },
    { 132, 8, 9, 3, 131, 0, 8, 16, 4 },
    /* Co-scheduling ignored: steps of 2. */
    { 132, 2, 1, 1, 131, 0, 2, 2, 2 },
    { 132, 2, 3, 1, 131, 0, 2, 4, 4 },
    { 132, 2, 7, 2, 131, 0, 2, 8, 4 },
    /* The ceiling, rounded down to a step. */
    { 132, 8, 40, 1, 32, 0, 8, 32, 32 },
    { 132, 8, 40, 1, 30, 0, 8, 24, 16 },
    { 132, 8, 131, 1, 131, 0, 8, 128, 64 },   /* NCCL has 64 channels */
    { 132, 8, 131, 1, 500, 0, 8, 128, 64 },   /* never past sms - 1 */
    /* The GPU's own NCCL cap wins when smaller. */
    { 132, 8, 8, 1, 131, 4, 8, 8, 4 },
    { 132, 8, 8, 1, 131, 32, 8, 8, 8 },
    /* No split fits: every field 0. */
    { 8, 8, 1, 1, 131, 0, 0, 0, 0 },
    { 132, 8, 8, 1, 7, 0, 0, 0, 0 },
    /* More collectives than SMs: one CTA each, as the daemon says. */
    { 132, 8, 8, 16, 131, 0, 8, 8, 1 },
    { 132, 0, 8, 1, 131, 0, 0, 0, 0 },
    { 1, 2, 1, 1, 131, 0, 0, 0, 0 },
  };
  size_t i;
  (void)state;

  for(i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    hr_budget b;
    memset(&b, 0x5a, sizeof(b));
    hr__partition_fields(&b, cases[i].sms, cases[i].g, cases[i].need,
                         cases[i].k, cases[i].ceiling, cases[i].nccl);
    if(b.partition_granularity != cases[i].out_g ||
       b.partition_comm_sms != cases[i].comm ||
       b.partition_nccl_max_ctas != cases[i].cap)
      fail_msg("case %zu (sms %d, g %d, need %d, K %d, ceiling %d, nccl %d): "
               "got g %d comm %d cap %d, want %d %d %d", i, cases[i].sms,
               cases[i].g, cases[i].need, cases[i].k, cases[i].ceiling,
               cases[i].nccl, b.partition_granularity, b.partition_comm_sms,
               b.partition_nccl_max_ctas, cases[i].out_g, cases[i].comm,
               cases[i].cap);
  }
}

/* ---- degraded budgets ---------------------------------------------------- */

/* The comm partition a degraded budget must have for headroom h, computed
 * here from the documented rule (docs/partition.md), not by the library. */
static int expect_comm(int h, int sms, int g)
{
  int comm = (h < 1 ? 1 : h), top = (sms - 1) / g * g;
  comm = (comm + g - 1) / g * g;
  return comm > top ? top : comm;
}

static int expect_cap(int comm, int nccl_env)
{
  int p = 1;
  while(p * 2 <= comm && p * 2 <= 64)
    p *= 2;
  return nccl_env > 0 && nccl_env < p ? nccl_env : p;
}

/* The headroom a degraded headroom lease of cluster 2 must have: the
 * default policy's floor (2), raised by the environment in whole clusters
 * when that leaves a cluster at least; never lowered. */
static int expect_headroom(int env_h, int sms)
{
  int h = (env_h + 1) / 2 * 2;
  return h > 2 && h + 2 <= sms ? h : 2;
}

static void test_degraded_budgets(void **state)
{
  /* headroom in the environment, and on a machine without a driver (132
   * SMs, steps of 8) the comm partition it must give. */
  static const struct { const char *env; int comm_132; } cases[] = {
    { NULL, 8 }, { "0", 8 }, { "4", 8 }, { "8", 8 }, { "9", 16 },
    { "20", 24 }, { "64", 64 }, { "100", 104 }, { "127", 128 },
    { "131", 128 },
  };
  const int sms = machine_sms(), g = machine_step();
  size_t i;
  (void)state;

  printf("  GPU 0: %d SMs, steps of %d (%s)\n", sms, g,
         have_driver() ? "from the driver" : "no driver: the defaults");
  for(i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    hr_client *c;
    hr_lease *h, *p1, *p2;
    hr_budget hb, pb, pb2;
    int env_h = cases[i].env ? atoi(cases[i].env) : 0, comm;

    if(cases[i].env)
      setenv("DG_MEGA_MOE_SM_HEADROOM", cases[i].env, 1);
    else
      unsetenv("DG_MEGA_MOE_SM_HEADROOM");
    if(env_h >= sms)
      continue;
    comm = expect_comm(env_h, sms, g);
    if(!have_driver())
      assert_int_equal(comm, cases[i].comm_132);

    c = open_degraded();
    h = lease_in(c, 0, 2, HR_MODE_HEADROOM);
    p1 = lease_in(c, 0, 1, HR_MODE_PARTITION);
    p2 = lease_in(c, 0, 2, HR_MODE_PARTITION);
    assert_int_equal(hr_lease_budget(h, &hb), HR_OK);
    assert_int_equal(hr_lease_budget(p1, &pb), HR_OK);
    assert_int_equal(hr_lease_budget(p2, &pb2), HR_OK);
    printf("  DG_MEGA_MOE_SM_HEADROOM=%-4s headroom lease %3d/%3d; partition "
           "%d + %d, NCCL <= %d\n", cases[i].env ? cases[i].env : "-",
           hb.headroom, hb.grid, pb.headroom, pb.grid, pb.nccl_max_ctas);

    /* Every budget carries the partition fields ... */
    assert_int_equal(hb.degraded, 1);
    assert_int_equal(hb.sms, sms);
    assert_int_equal(hb.headroom, expect_headroom(env_h, sms));
    assert_int_equal(hb.grid, sms - hb.headroom);
    assert_int_equal(hb.partition_granularity, g);
    assert_int_equal(hb.partition_comm_sms, comm);
    assert_int_equal(hb.partition_nccl_max_ctas, expect_cap(comm, 0));
    /* ... and a partition lease lives by them. */
    assert_int_equal(pb.mode, HR_MODE_PARTITION);
    assert_int_equal(pb.degraded, 1);
    assert_int_equal(pb.partition_granularity, g);
    assert_int_equal(pb.partition_comm_sms, comm);
    assert_int_equal(pb.headroom, comm);
    assert_int_equal(pb.grid, sms - comm);
    assert_int_equal(pb.headroom % g, 0);
    assert_int_equal(pb.nccl_max_ctas, expect_cap(comm, 0));
    assert_int_equal(pb.nccl_cga_cluster_size, 1);
    assert_int_equal(hr_lease_grid(p1), sms - comm);
    assert_int_equal(hr_lease_headroom(p1), comm);
    /* The cluster size of the mega kernel does not move the split. */
    assert_int_equal(pb2.headroom, pb.headroom);
    assert_int_equal(pb2.grid, pb.grid);
    assert_int_equal(pb2.cluster, 2);
    hr_client_close(c);
  }
}

static void test_degraded_nccl_env(void **state)
{
  const int sms = machine_sms(), g = machine_step();
  hr_client *c;
  hr_lease *h, *p;
  hr_budget hb, pb;
  int comm;
  (void)state;

  /* The environment's NCCL cap is smaller than the partition's. */
  setenv("DG_MEGA_MOE_SM_HEADROOM", "8", 1);
  setenv("NCCL_MAX_CTAS", "4", 1);
  setenv("NCCL_MIN_CTAS", "16", 1);
  setenv("NCCL_CGA_CLUSTER_SIZE", "4", 1);
  comm = expect_comm(8, sms, g);
  c = open_degraded();
  h = lease_in(c, 0, 2, HR_MODE_HEADROOM);
  p = lease_in(c, 0, 2, HR_MODE_PARTITION);
  assert_int_equal(hr_lease_budget(h, &hb), HR_OK);
  assert_int_equal(hr_lease_budget(p, &pb), HR_OK);
  assert_int_equal(hb.nccl_max_ctas, 4);
  /* minCTAs no more than the cap, CGA 1 whatever the environment says:
   * a larger one would not fit the headroom. */
  assert_int_equal(hb.nccl_min_ctas, 4);
  assert_int_equal(hb.nccl_cga_cluster_size, 1);
  assert_int_equal(hb.partition_nccl_max_ctas, 4);
  assert_int_equal(pb.headroom, comm);
  assert_int_equal(pb.nccl_max_ctas, 4);
  assert_int_equal(pb.nccl_min_ctas, 4);          /* clamped to the cap */
  assert_int_equal(pb.nccl_cga_cluster_size, 1);  /* always 1 in a partition */
  hr_client_close(c);

  /* A larger environment cap: the partition's own cap holds. */
  setenv("DG_MEGA_MOE_SM_HEADROOM", "9", 1);
  setenv("NCCL_MAX_CTAS", "64", 1);
  unsetenv("NCCL_MIN_CTAS");
  comm = expect_comm(9, sms, g);
  c = open_degraded();
  p = lease_in(c, 0, 1, HR_MODE_PARTITION);
  assert_int_equal(hr_lease_budget(p, &pb), HR_OK);
  assert_int_equal(pb.headroom, comm);
  assert_int_equal(pb.nccl_max_ctas, expect_cap(comm, 0));
  assert_true(pb.nccl_max_ctas <= pb.headroom);
  assert_int_equal(pb.nccl_min_ctas, 1);          /* the policy's */
  hr_client_close(c);
}

/* ---- argument checks ----------------------------------------------------- */

static void test_invalid_arguments(void **state)
{
  static const hr_mode other[] = {
    HR_MODE_HEADROOM, HR_MODE_COOPERATIVE, HR_MODE_AGNOSTIC,
  };
  hr_partition *const sentinel = (hr_partition *)(uintptr_t)0x1;
  hr_partition *p = sentinel;
  hr_client *c = open_degraded();
  hr_lease *l = lease_in(c, 0, 2, HR_MODE_PARTITION);
  size_t i;
  (void)state;

  assert_int_equal(hr_partition_create(NULL, &p), HR_EINVAL);
  assert_ptr_equal(p, sentinel);
  assert_int_equal(hr_partition_create(l, NULL), HR_EINVAL);
  for(i = 0; i < sizeof(other) / sizeof(other[0]); i++) {
    hr_lease *o = lease_in(c, 0, 2, other[i]);
    assert_int_equal(hr_partition_create(o, &p), HR_EINVAL);
    assert_ptr_equal(p, sentinel);
    assert_int_equal(hr_lease_release(o), HR_OK);
  }
  hr_partition_destroy(NULL);
  assert_null(hr_partition_comm_stream(NULL));
  assert_null(hr_partition_mega_stream(NULL));
  assert_int_equal(hr_partition_comm_sms(NULL), HR_EINVAL);
  assert_int_equal(hr_partition_mega_sms(NULL), HR_EINVAL);
  assert_int_equal(hr_partition_epoch(NULL), HR_EINVAL);
  assert_int_equal(hr_partition_stale(NULL), HR_EINVAL);
  assert_string_equal(hr_mode_name(HR_MODE_PARTITION), "partition");
  hr_client_close(c);
}

/* ---- hr_partition_create on this machine --------------------------------- */

static void test_create_here(void **state)
{
  hr_partition *const sentinel = (hr_partition *)(uintptr_t)0x1;
  hr_client *c;
  hr_lease *l;
  hr_budget b;
  int i, rc;
  (void)state;

  setenv("DG_MEGA_MOE_SM_HEADROOM", "4", 1);
  c = open_degraded();
  l = lease_in(c, 0, 2, HR_MODE_PARTITION);
  assert_int_equal(hr_lease_budget(l, &b), HR_OK);
  if(!have_driver()) {
    /* Many times: each failure must leave nothing behind. */
    for(i = 0; i < 50; i++) {
      hr_partition *p = sentinel;
      rc = hr_partition_create(l, &p);
      if(rc != HR_ENOGPU)
        fail_msg("no CUDA driver here, but hr_partition_create said %s",
                 hr_strerror(rc));
      assert_ptr_equal(p, sentinel);
    }
    printf("  no driver: hr_partition_create says %s\n", hr_strerror(HR_ENOGPU));
  } else {
    hr_partition *p = NULL;
    rc = hr_partition_create(l, &p);
    printf("  GPU 0: hr_partition_create: %s\n", hr_strerror(rc));
    /* A driver older than 12.5, or a device the budget does not fit. */
    if(rc == HR_EUNSUPPORTED) {
      assert_null(p);
    } else {
      assert_int_equal(rc, HR_OK);
      printf("  partition: comm %d SMs, mega %d SMs (budget %d + %d)\n",
             hr_partition_comm_sms(p), hr_partition_mega_sms(p), b.headroom,
             b.grid);
      assert_int_equal(hr_partition_comm_sms(p), b.headroom);
      assert_true(hr_partition_mega_sms(p) >= b.grid);
      assert_non_null(hr_partition_comm_stream(p));
      assert_non_null(hr_partition_mega_stream(p));
      assert_ptr_not_equal(hr_partition_comm_stream(p),
                           hr_partition_mega_stream(p));
      assert_int_equal(hr_partition_epoch(p), hr_lease_epoch(l));
      assert_int_equal(hr_partition_stale(p), 0);
      hr_partition_destroy(p);
    }
  }
  hr_client_close(c);
}

int main(void)
{
#define T(fn) cmocka_unit_test_setup(fn, th_env_reset)
  const struct CMUnitTest tests[] = {
    T(test_fields_rule),
    T(test_degraded_budgets),
    T(test_degraded_nccl_env),
    T(test_invalid_arguments),
    T(test_create_here),
  };
#undef T
  return cmocka_run_group_tests_name("partition", tests, group_setup,
                                     th_tmpdir_teardown);
}
