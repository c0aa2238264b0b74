/*
 * test_partition.c: partition mode end to end: the real headroomd on a
 * real socket (2 GPUs of 132 SMs from the test config, default policy:
 * min_headroom 2, max_headroom 32, min_grid 64) and the real libheadroom.
 *
 * Two groups, each in a process of its own, since the CUDA driver is
 * looked for once per process:
 *   this machine's driver  the budgets of partition leases, one step under
 *                          the narrowest ceiling, and hr_partition_create
 *                          where there is no GPU
 *                          (HR_ENOGPU; on a GPU machine, a real split)
 *   the fake driver        (tests/unit/fake_libcuda.c) the partition made
 *                          from a daemon's budget: the split asked for in
 *                          both steps, and staleness when a footprint
 *                          changes the budget
 */
#include <dlfcn.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "harness.h"
#include "headroom.h"
#include "hr_client_int.h"

static hr_daemon daemon_;

static int setup(void **state)
{
  (void)state;
  return th_daemon_start(&daemon_, NULL);
}

static int setup_fine(void **state)
{
  (void)state;
  return th_daemon_start(&daemon_, "partition_ignore_coscheduling = true");
}

static int setup_narrow(void **state)
{
  (void)state;
  /* The narrowest ceiling a policy may have with floor 2: 8 SMs, one
   * cluster of 8 (a ceiling of 4 would leave such a lease headroom 0, and
   * the daemon refuses it). */
  return th_daemon_start(&daemon_, "max_headroom = 8\nmin_headroom = 2");
}

static int teardown(void **state)
{
  (void)state;
  th_daemon_cleanup(&daemon_);
  return 0;
}

static hr_client *open_client(void)
{
  return th_client_open_connected(&daemon_, NULL, 50);
}

static hr_lease *lease_in(hr_client *c, int gpu, int cluster, hr_mode mode)
{
  hr_lease *l = NULL;
  assert_int_equal(hr_lease_acquire(c, gpu, cluster, mode, &l), HR_OK);
  return l;
}

/* ---- this machine's driver ------------------------------------------------ */

static void test_budget_fields(void **state)
{
  hr_client *c = open_client();
  hr_lease *h = lease_in(c, 0, 2, HR_MODE_HEADROOM);
  hr_lease *p = lease_in(c, 0, 2, HR_MODE_PARTITION);
  hr_budget hb, pb;
  (void)state;

  assert_int_equal(hr_lease_budget(h, &hb), HR_OK);
  assert_int_equal(hr_lease_budget(p, &pb), HR_OK);
  printf("  headroom lease: %d + %d, NCCL <= %d, CGA %d; partition fields: "
         "steps of %d, comm %d, NCCL <= %d\n", hb.headroom, hb.grid,
         hb.nccl_max_ctas, hb.nccl_cga_cluster_size, hb.partition_granularity,
         hb.partition_comm_sms, hb.partition_nccl_max_ctas);
  printf("  partition lease: %d + %d, NCCL %d..%d, CGA %d\n", pb.headroom,
         pb.grid, pb.nccl_min_ctas, pb.nccl_max_ctas, pb.nccl_cga_cluster_size);
  /* The headroom lease keeps its own numbers and carries the partition's. */
  assert_int_equal(hb.degraded, 0);
  assert_int_equal(hb.mode, HR_MODE_HEADROOM);
  assert_int_equal(hb.headroom, 2);
  assert_int_equal(hb.grid, 130);
  assert_int_equal(hb.partition_granularity, 8);
  assert_int_equal(hb.partition_comm_sms, 8);
  assert_int_equal(hb.partition_nccl_max_ctas, 8);
  /* The partition lease lives by them. */
  assert_int_equal(pb.degraded, 0);
  assert_int_equal(pb.mode, HR_MODE_PARTITION);
  assert_int_equal(pb.epoch, hb.epoch);
  assert_int_equal(pb.sms, 132);
  assert_int_equal(pb.headroom, 8);
  assert_int_equal(pb.grid, 124);
  assert_int_equal(pb.nccl_max_ctas, 8);
  assert_true(pb.nccl_min_ctas >= 1 && pb.nccl_min_ctas <= pb.nccl_max_ctas);
  assert_int_equal(pb.nccl_cga_cluster_size, 1);
  assert_int_equal(pb.partition_comm_sms, 8);
  assert_int_equal(hr_lease_grid(p), 124);
  assert_int_equal(hr_lease_headroom(p), 8);

  /* The replies to the partition lease, and to an agnostic one, are not
   * the GPU's budget: the headroom lease beside them keeps its own. */
  lease_in(c, 0, 2, HR_MODE_AGNOSTIC);
  lease_in(c, 0, 1, HR_MODE_PARTITION);
  assert_int_equal(hr_lease_headroom(h), 2);
  assert_int_equal(hr_lease_grid(h), 130);
  assert_int_equal(hr_lease_budget(h, &hb), HR_OK);
  assert_int_equal(hb.nccl_max_ctas, 16);
  assert_int_equal(hr_lease_grid(p), 124);
  hr_client_close(c);
}

static void test_footprints_move_the_split(void **state)
{
  hr_client *a = open_client(), *b = open_client();
  hr_lease *p = lease_in(a, 0, 2, HR_MODE_PARTITION);
  hr_comm *m = NULL;
  hr_budget pb;
  (void)state;

  /* Another client's communicator of 12 CTAs: 16 SMs in steps of 8. */
  assert_int_equal(hr_comm_register(b, 0, "dp", 12, 1, 1, &m), HR_OK);
  assert_int_equal(th_wait_grid(p, 116, 3000), 0);
  assert_int_equal(hr_lease_budget(p, &pb), HR_OK);
  printf("  12 CTAs x 1: %d + %d, NCCL <= %d\n", pb.headroom, pb.grid,
         pb.nccl_max_ctas);
  assert_int_equal(pb.headroom, 16);
  assert_int_equal(pb.nccl_max_ctas, 16);
  assert_int_equal(hr_comm_unregister(m), HR_OK);
  assert_int_equal(th_wait_grid(p, 124, 3000), 0);

  /* Two collectives of 8 in flight: the same 16 SMs, 8 CTAs each. */
  assert_int_equal(hr_comm_register(b, 0, "dp", 8, 1, 2, &m), HR_OK);
  assert_int_equal(th_wait_grid(p, 116, 3000), 0);
  assert_int_equal(hr_lease_budget(p, &pb), HR_OK);
  printf("  8 CTAs x 2: %d + %d, NCCL <= %d\n", pb.headroom, pb.grid,
         pb.nccl_max_ctas);
  assert_int_equal(pb.headroom, 16);
  assert_int_equal(pb.nccl_max_ctas, 8);

  /* Beyond the ceiling (max_headroom 32): capped there. */
  assert_int_equal(hr_comm_register(b, 0, "tp", 40, 1, 1, NULL), HR_OK);
  assert_int_equal(th_wait_grid(p, 100, 3000), 0);
  assert_int_equal(hr_lease_budget(p, &pb), HR_OK);
  printf("  + 40 CTAs: %d + %d, NCCL <= %d\n", pb.headroom, pb.grid,
         pb.nccl_max_ctas);
  assert_int_equal(pb.headroom, 32);
  hr_client_close(b);
  hr_client_close(a);
}

static void test_fine_steps(void **state)
{
  hr_client *c = open_client();
  hr_lease *p = lease_in(c, 1, 1, HR_MODE_PARTITION);
  hr_budget pb;
  (void)state;

  assert_int_equal(hr_lease_budget(p, &pb), HR_OK);
  printf("  co-scheduling ignored: steps of %d, %d + %d\n",
         pb.partition_granularity, pb.headroom, pb.grid);
  assert_int_equal(pb.partition_granularity, 2);
  assert_int_equal(pb.headroom, 2);
  assert_int_equal(pb.grid, 130);
  assert_int_equal(pb.nccl_max_ctas, 2);
  hr_client_close(c);
}

/* Under the narrowest ceiling the daemon accepts, one step still fits: a
 * policy can no longer leave partition leases without a partition. */
static void test_one_step_under_narrowest_ceiling(void **state)
{
  hr_client *c = open_client();
  hr_lease *l = lease_in(c, 0, 2, HR_MODE_PARTITION);
  hr_budget b;
  (void)state;

  assert_int_equal(hr_lease_budget(l, &b), HR_OK);
  assert_int_equal(b.partition_granularity, 8);
  assert_int_equal(b.headroom, 8);
  assert_int_equal(b.grid, 124);
  assert_int_equal(b.nccl_max_ctas, 4);   /* the GPU's cap: 8 / 2 */
  l = lease_in(c, 0, 2, HR_MODE_HEADROOM);
  assert_int_equal(hr_lease_budget(l, &b), HR_OK);
  assert_int_equal(b.headroom, 2);
  assert_int_equal(b.partition_comm_sms, 8);
  hr_client_close(c);
}

static void test_create_on_this_machine(void **state)
{
  hr_partition *const sentinel = (hr_partition *)(uintptr_t)0x1;
  hr_partition *p = sentinel;
  hr_client *c = open_client();
  hr_lease *l = lease_in(c, 0, 2, HR_MODE_PARTITION);
  hr_lease *h = lease_in(c, 0, 2, HR_MODE_HEADROOM);
  int rc, i;
  (void)state;

  assert_int_equal(hr_partition_create(h, &p), HR_EINVAL);
  assert_ptr_equal(p, sentinel);
  rc = hr_partition_create(l, &p);
  printf("  hr_partition_create here: %s\n", hr_strerror(rc));
  if(hr__cuda_sms(0) == HR_ENOGPU) {
    assert_int_equal(rc, HR_ENOGPU);
    assert_ptr_equal(p, sentinel);
    for(i = 0; i < 20; i++)
      assert_int_equal(hr_partition_create(l, &p), HR_ENOGPU);
    assert_ptr_equal(p, sentinel);
  } else if(rc == HR_OK) {
    /* A GPU machine: the daemon's 132-SM budget on a real device. */
    assert_int_equal(hr_partition_comm_sms(p), 8);
    hr_partition_destroy(p);
  } else {
    assert_int_equal(rc, HR_EUNSUPPORTED);
  }
  hr_client_close(c);
}

/* ---- the fake driver ------------------------------------------------------- */

static long (*fake_get)(const char *key);
static void (*fake_set)(const char *key, long v);

static void expect_nothing_alive(void)
{
  assert_int_equal(fake_get("live_ctx"), 0);
  assert_int_equal(fake_get("live_streams"), 0);
  assert_int_equal(fake_get("order_errors"), 0);
}

/* A partition lease of `cluster` CTAs split with the fake driver: the
 * driver is asked for `split_min` SMs with `flags`, and the partitions get
 * `comm` and `mega` SMs; `steps` names the daemon's steps in the line
 * printed. */
static void expect_fake_split(int cluster, const char *steps, long split_min,
                              long flags, int comm, int mega)
{
  hr_client *c = open_client();
  hr_lease *l = lease_in(c, 0, cluster, HR_MODE_PARTITION);
  hr_partition *p = NULL;

  assert_int_equal(hr_partition_create(l, &p), HR_OK);
  printf("  %s: the driver was asked for %ld SMs, flags %ld; "
         "comm %d, mega %d\n", steps, fake_get("last_split_min"),
         fake_get("last_split_flags"), hr_partition_comm_sms(p),
         hr_partition_mega_sms(p));
  assert_int_equal(fake_get("last_split_min"), split_min);
  assert_int_equal(fake_get("last_split_flags"), flags);
  assert_int_equal(hr_partition_comm_sms(p), comm);
  assert_int_equal(hr_partition_mega_sms(p), mega);
  hr_partition_destroy(p);
  expect_nothing_alive();
  hr_client_close(c);
}

static void test_fake_split_from_the_daemon(void **state)
{
  (void)state;
  expect_fake_split(2, "steps of 8", 8, 0, 8, 124);
}

static void test_fake_fine_steps(void **state)
{
  (void)state;
  /* The daemon's steps (2) are finer than the device's (8): the split
   * must give up co-scheduling, or it rounds 2 up to 8. */
  expect_fake_split(1, "steps of 2", 2,
                    1 /* CU_DEV_SM_RESOURCE_SPLIT_IGNORE_SM_COSCHEDULING */,
                    2, 130);
}

static void test_fake_stale(void **state)
{
  hr_client *c = open_client(), *other = open_client();
  hr_lease *l = lease_in(c, 0, 2, HR_MODE_PARTITION);
  hr_partition *p = NULL, *p2 = NULL;
  uint32_t e;
  (void)state;

  assert_int_equal(hr_partition_create(l, &p), HR_OK);
  e = hr_partition_epoch(p);
  assert_int_equal(e, hr_lease_epoch(l));
  assert_int_equal(hr_partition_stale(p), 0);
  /* Another process's footprint changes the GPU's budget. */
  assert_int_equal(hr_comm_register(other, 0, "dp", 16, 1, 1, NULL), HR_OK);
  assert_int_equal(th_wait_grid(l, 116, 3000), 0);
  printf("  epoch %u -> %u: stale %d\n", (unsigned)e,
         (unsigned)hr_lease_epoch(l), hr_partition_stale(p));
  assert_int_equal(hr_partition_stale(p), 1);
  assert_int_equal(hr_partition_epoch(p), e);
  assert_int_equal(hr_partition_comm_sms(p), 8);     /* made once */
  /* The new one follows the new budget. */
  assert_int_equal(hr_partition_create(l, &p2), HR_OK);
  assert_int_equal(hr_partition_stale(p2), 0);
  assert_int_equal(hr_partition_comm_sms(p2), 16);
  assert_int_equal(hr_partition_mega_sms(p2), 116);
  hr_partition_destroy(p);
  hr_partition_destroy(p2);
  expect_nothing_alive();
  hr_client_close(other);
  hr_client_close(c);
}

static int run_fake_group(void)
{
  const struct CMUnitTest tests[] = {
    cmocka_unit_test_setup_teardown(test_fake_split_from_the_daemon, setup,
                                    teardown),
    cmocka_unit_test_setup_teardown(test_fake_fine_steps, setup_fine, teardown),
    cmocka_unit_test_setup_teardown(test_fake_stale, setup, teardown),
  };
  char path[PATH_MAX], self[PATH_MAX - 32];
  ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  void *fake;

  if(n <= 0)
    return 1;
  self[n] = '\0';
  *strrchr(self, '/') = '\0';
  snprintf(path, sizeof(path), "%s/libfakecuda.so", self);
  fake = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if(!fake) {
    printf("SKIP: the fake driver group: %s\n", dlerror());
    return 0;
  }
  fake_get = (long (*)(const char *))dlsym(fake, "fake_cuda_get");
  fake_set = (void (*)(const char *, long))dlsym(fake, "fake_cuda_set");
  if(!fake_get || !fake_set || hr__cuda_use_library(path) != HR_OK)
    return 1;
  /* Like the config's GPUs: 132 SMs, co-scheduled in steps of 8. */
  fake_set("devices", 2);
  fake_set("sms", 132);
  fake_set("align", 8);
  fake_set("min_part", 8);
  return cmocka_run_group_tests_name("partition, fake driver", tests, NULL,
                                     NULL);
}

int main(void)
{
  const struct CMUnitTest tests[] = {
    cmocka_unit_test_setup_teardown(test_budget_fields, setup, teardown),
    cmocka_unit_test_setup_teardown(test_footprints_move_the_split, setup,
                                    teardown),
    cmocka_unit_test_setup_teardown(test_fine_steps, setup_fine, teardown),
    cmocka_unit_test_setup_teardown(test_one_step_under_narrowest_ceiling,
                                    setup_narrow, teardown),
    cmocka_unit_test_setup_teardown(test_create_on_this_machine, setup,
                                    teardown),
  };
  pid_t pid;
  int st, rc;

  fflush(stdout);
  pid = fork();
  if(pid < 0)
    return 1;
  if(pid == 0) {
    fflush(stdout);
    _exit(run_fake_group() ? 1 : 0);
  }
  if(waitpid(pid, &st, 0) != pid)
    return 1;
  rc = cmocka_run_group_tests_name("partition, this machine's driver", tests,
                                   NULL, NULL);
  if(!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
    printf("the fake driver group failed (status %d)\n", st);
    return 1;
  }
  return rc;
}
