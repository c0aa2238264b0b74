/*
 * test_partition_daemon.c: headroomd serving partition mode, on a real
 * socket: the budget of a partition lease, a footprint's new partition
 * pushed to it, status, metrics and headroomctl showing the partition
 * numbers and the lease's mode, the finer steps of
 * partition_ignore_coscheduling, and the refusal where no step fits.
 *
 * The daemon's topology is the harness's (2 GPUs of 132 SMs, from the
 * config), so each GPU splits in the H100/H200's steps: 8 SMs
 * (docs/measurements.md §2), or 2 ignoring co-scheduling. Policy: the
 * default (min_headroom 2, max_headroom 32, min_grid 64) unless a test
 * says otherwise.
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

#include "harness.h"
#include "headroom.h"

static hr_daemon daemon_;

static int teardown(void **state)
{
  (void)state;
  th_daemon_cleanup(&daemon_);
  return 0;
}

static hr_client *open_client(const char *name)
{
  return th_client_open_connected(&daemon_, name, 50);
}

static void start(const char *extra)
{
  if(th_daemon_start(&daemon_, extra)) {
    th_daemon_dump_log(&daemon_);
    fail_msg("headroomd did not start");
  }
}

/* Whether the daemon's log holds `needle`. */
static int log_has(const char *needle)
{
  return th_daemon_log_has(&daemon_, needle);
}

/* A partition lease on an idle H200: one step of 8 SMs for NCCL, 124 for
 * the mega kernel, and nothing changes for the headroom-mode lease beside
 * it, which sees the same partition numbers in its own budget. */
static void test_partition_lease(void **state)
{
  hr_client *a, *b;
  hr_lease *lp, *lh;
  hr_budget bp, bh;
  hr_status st;
  uint32_t epoch;
  (void)state;

  start(NULL);
  a = open_client("green");
  b = open_client("plain");
  assert_int_equal(hr_lease_acquire(b, 0, 2, HR_MODE_HEADROOM, &lh), HR_OK);
  epoch = hr_lease_epoch(lh);
  assert_int_equal(hr_lease_acquire(a, 0, 8, HR_MODE_PARTITION, &lp), HR_OK);
  assert_int_equal(hr_lease_budget(lp, &bp), HR_OK);
  assert_int_equal(bp.mode, HR_MODE_PARTITION);
  assert_int_equal(bp.degraded, 0);
  assert_int_equal(bp.sms, 132);
  assert_int_equal(bp.partition_granularity, 8);
  assert_int_equal(bp.partition_comm_sms, 8);
  assert_int_equal(bp.headroom, 8);
  assert_int_equal(bp.grid, 124);
  assert_int_equal(hr_lease_grid(lp), 124);
  assert_int_equal(hr_lease_headroom(lp), 8);
  /* One collective budgeted, 8 SMs: 8 CTAs, under the GPU's cap of 16. */
  assert_int_equal(bp.partition_nccl_max_ctas, 8);
  assert_int_equal(bp.nccl_max_ctas, 8);
  assert_true(bp.nccl_min_ctas >= 1 && bp.nccl_min_ctas <= 8);
  assert_int_equal(bp.nccl_cga_cluster_size, 1);

  /* Its clusters of 8 live in its own partition: the GPU's budget keeps
   * its cluster of 2, and the headroom lease its numbers and epoch. */
  assert_int_equal(hr_lease_budget(lh, &bh), HR_OK);
  assert_int_equal(bh.mode, HR_MODE_HEADROOM);
  assert_int_equal(bh.cluster, 2);
  assert_int_equal(bh.headroom, 2);
  assert_int_equal(bh.grid, 130);
  assert_int_equal(bh.nccl_max_ctas, 16);
  assert_int_equal(bh.partition_comm_sms, 8);
  assert_int_equal(bh.partition_nccl_max_ctas, 8);
  assert_int_equal(hr_lease_epoch(lh), epoch);
  assert_int_equal(hr_lease_epoch(lp), epoch);

  /* Status: the partition fields in the GPU's budget, the lease under
   * its mode. */
  assert_int_equal(th_status(daemon_.socket, &st), 0);
  assert_int_equal(st.gpus[0].budget.mode, HR_MODE_HEADROOM);
  assert_int_equal(st.gpus[0].budget.partition_granularity, 8);
  assert_int_equal(st.gpus[0].budget.partition_comm_sms, 8);
  assert_int_equal(st.gpus[0].budget.partition_nccl_max_ctas, 8);
  assert_int_equal(st.gpus[0].budget.cluster, 2);
  assert_int_equal(st.gpus[0].n_leases, 2);
  assert_int_equal(st.gpus[0].leases[1].mode, HR_MODE_PARTITION);
  assert_int_equal(st.gpus[0].leases[1].cluster, 8);
  assert_int_equal(st.gpus[1].budget.partition_comm_sms, 8);
  hr_status_free(&st);

  /* Released, it is gone from status. */
  assert_int_equal(hr_lease_release(lp), HR_OK);
  assert_int_equal(th_status(daemon_.socket, &st), 0);
  assert_int_equal(st.gpus[0].n_leases, 1);
  assert_int_equal(st.gpus[0].leases[0].mode, HR_MODE_HEADROOM);
  hr_status_free(&st);
  hr_client_close(a);
  hr_client_close(b);
}

/* Another process's communicator on the GPU: 3 all-reduces of 8 CTAs.
 * The partition lease is pushed its new numbers with a new epoch: 24 SMs
 * for NCCL (8 x 3, no cluster multiplier), 108 for the mega kernel, and
 * NCCL held to 4 CTAs (the GPU's cap, 32 / 2 / 3). Gone again, back to
 * one step. */
static void test_footprint_pushes_partition(void **state)
{
  hr_client *a, *b;
  hr_comm *comm;
  hr_lease *lp;
  hr_budget bp;
  uint32_t epoch;
  (void)state;

  start(NULL);
  a = open_client("green");
  b = open_client("nccl");
  assert_int_equal(hr_lease_acquire(a, 1, 2, HR_MODE_PARTITION, &lp), HR_OK);
  assert_int_equal(hr_lease_grid(lp), 124);
  epoch = hr_lease_epoch(lp);

  assert_int_equal(hr_comm_register(b, 1, "tp", 8, 1, 3, &comm), HR_OK);
  assert_int_equal(th_wait_grid(lp, 108, 2000), 0);
  assert_int_equal(hr_lease_budget(lp, &bp), HR_OK);
  assert_int_equal(bp.mode, HR_MODE_PARTITION);
  assert_true(bp.epoch > epoch);
  assert_int_equal(bp.headroom, 24);
  assert_int_equal(bp.partition_comm_sms, 24);
  assert_int_equal(bp.nccl_max_ctas, 4);
  assert_int_equal(bp.partition_nccl_max_ctas, 4);
  assert_int_equal(bp.nccl_cga_cluster_size, 1);
  epoch = bp.epoch;

  assert_int_equal(hr_comm_unregister(comm), HR_OK);
  assert_int_equal(th_wait_grid(lp, 124, 2000), 0);
  assert_true(hr_lease_epoch(lp) > epoch);
  assert_int_equal(hr_lease_headroom(lp), 8);
  hr_client_close(a);
  hr_client_close(b);
}

/* What operators see: status --pretty's partition table, the status
 * JSON against its schema, and the metrics (JSON and Prometheus). */
static void test_operators_see_partitions(void **state)
{
  const char *pretty[] = { "status", "--pretty", NULL };
  const char *json[] = { "status", "--json", NULL };
  const char *prom[] = { "metrics", NULL };
  const char *mjson[] = { "metrics", "--json", NULL };
  char path[400], *text;
  hr_client *a, *b;
  hr_lease *lp;
  hr_reply rep;
  (void)state;

  start(NULL);
  a = open_client("green");
  b = open_client("nccl");
  assert_int_equal(hr_comm_register(b, 0, "tp", 8, 1, 3, NULL), HR_OK);
  assert_int_equal(hr_lease_acquire(a, 0, 2, HR_MODE_PARTITION, &lp), HR_OK);
  assert_int_equal(hr_lease_grid(lp), 108);

  text = th_ctl(&daemon_, pretty);
  assert_non_null(strstr(text, "PARTITION MODE"));
  assert_non_null(strstr(text, "GPU   STEP  COMM_SMS  MEGA_SMS  NCCL_CAP"));
  assert_non_null(strstr(text, "0        8        24       108         4"));
  assert_non_null(strstr(text, "1        8         8       124         8"));
  assert_non_null(strstr(text, "partition"));   /* the lease's mode */
  free(text);

  /* The JSON status headroomctl prints obeys proto/status.schema.json,
   * partition fields, "partition" lease and all. */
  text = th_ctl(&daemon_, json);
  assert_non_null(strstr(text, "\"partition_comm_sms\":24"));
  assert_non_null(strstr(text, "\"mode\":\"partition\""));
  free(text);
  snprintf(path, sizeof(path), "%s/ctl.out", daemon_.dir);
  assert_int_equal(th_status_validate(path), 0);

  text = th_ctl(&daemon_, mjson);
  assert_int_equal(th_ctl_decode(text, strlen(text) - 1, &rep), 0);
  assert_int_equal(rep.type, HR_MSG_METRICS);
  assert_int_equal(rep.u.metrics.gpus[0].leases[HR_MODE_PARTITION], 1);
  assert_int_equal(rep.u.metrics.gpus[0].leases[HR_MODE_HEADROOM], 0);
  assert_int_equal(rep.u.metrics.gpus[0].partition_granularity, 8);
  assert_int_equal(rep.u.metrics.gpus[0].partition_comm_sms, 24);
  assert_int_equal(rep.u.metrics.gpus[0].partition_nccl_max_ctas, 4);
  assert_int_equal(rep.u.metrics.gpus[1].leases[HR_MODE_PARTITION], 0);
  /* The GPU's own budget is the headroom-mode one: 8 x 3 x 2 > 32. */
  assert_int_equal(rep.u.metrics.gpus[0].headroom, 32);
  free(text);

  text = th_ctl(&daemon_, prom);
  assert_non_null(strstr(text,
                         "headroom_gpu_leases{gpu=\"0\",mode=\"partition\"} 1\n"));
  assert_non_null(strstr(text,
                         "headroom_gpu_partition_granularity{gpu=\"0\"} 8\n"));
  assert_non_null(strstr(text,
                         "headroom_gpu_partition_comm_sms{gpu=\"0\"} 24\n"));
  assert_non_null(strstr(text,
                         "headroom_gpu_partition_nccl_max_ctas{gpu=\"0\"} 4\n"));
  assert_non_null(strstr(text,
                         "headroom_gpu_partition_comm_sms{gpu=\"1\"} 8\n"));
  free(text);
  hr_client_close(a);
  hr_client_close(b);
}

/* partition_ignore_coscheduling = true: steps of 2 (docs/measurements.md
 * §2: a 2-SM comm partition, 130 SMs left), said in the start-up log. */
static void test_ignore_coscheduling(void **state)
{
  hr_client *a;
  hr_lease *lp;
  hr_budget bp;
  hr_status st;
  (void)state;

  start("partition_ignore_coscheduling = true\n");
  assert_true(log_has("partitions in steps of 2 SMs "
                      "(partition_ignore_coscheduling)"));
  a = open_client("green");
  assert_int_equal(hr_lease_acquire(a, 0, 2, HR_MODE_PARTITION, &lp), HR_OK);
  assert_int_equal(hr_lease_budget(lp, &bp), HR_OK);
  assert_int_equal(bp.partition_granularity, 2);
  assert_int_equal(bp.headroom, 2);
  assert_int_equal(bp.grid, 130);
  assert_int_equal(bp.nccl_max_ctas, 2);
  /* 9 CTAs round up to 10 in steps of 2 (not 16 in steps of 8). */
  assert_int_equal(hr_comm_register(a, 0, "ep", 9, 1, 1, NULL), HR_OK);
  assert_int_equal(th_wait_grid(lp, 122, 2000), 0);
  assert_int_equal(th_status(daemon_.socket, &st), 0);
  assert_int_equal(st.gpus[0].budget.partition_granularity, 2);
  assert_int_equal(st.gpus[0].budget.partition_comm_sms, 10);
  assert_int_equal(st.gpus[1].budget.partition_granularity, 2);
  assert_int_equal(st.gpus[1].budget.partition_comm_sms, 2);
  hr_status_free(&st);
  hr_client_close(a);
  th_daemon_cleanup(&daemon_);

  /* Without the key, the same daemon splits in steps of 8. */
  start(NULL);
  assert_true(log_has("partitions in steps of 8 SMs\n"));
  assert_int_equal(th_status(daemon_.socket, &st), 0);
  assert_int_equal(st.gpus[0].budget.partition_granularity, 8);
  hr_status_free(&st);
}

/* A ceiling under one step (max_headroom 4 < 8): partition leases are
 * refused as unsupported, with the reason, and take nothing; the other
 * modes are served as before. */
static void test_no_step_fits(void **state)
{
  const char *pretty[] = { "status", "--pretty", NULL };
  char line[HR_PROTO_MAX_LINE], *text;
  hr_reply rep;
  hr_client *a;
  hr_lease *l;
  hr_status st;
  th_raw r;
  (void)state;

  start("max_headroom = 4\n");
  assert_int_equal(th_raw_open(&r, daemon_.socket), 0);
  assert_int_equal(th_raw_lease(&r, 41, 1, 2, HR_MODE_PARTITION, &rep), 0);
  assert_int_equal(rep.type, HR_MSG_ERROR);
  assert_int_equal(rep.id, 41);
  assert_int_equal(rep.u.error.code, HR_WERR_UNSUPPORTED);
  snprintf(line, sizeof(line), "%s", rep.u.error.message);
  assert_non_null(strstr(line, "partition mode on gpu 1 needs a comm "
                               "partition of at least 8 SMs"));
  assert_non_null(strstr(line, "ceiling of 4 SMs (max_headroom 4, sms 132 "
                               "- min_grid 64)"));
  /* The connection stays open and serves a headroom lease. */
  assert_int_equal(th_raw_lease(&r, 42, 1, 2, HR_MODE_HEADROOM, &rep), 0);
  assert_int_equal(rep.type, HR_MSG_LEASE);
  assert_int_equal(rep.u.lease.budget.headroom, 2);
  assert_int_equal(rep.u.lease.budget.partition_granularity, 0);
  assert_int_equal(rep.u.lease.budget.partition_comm_sms, 0);
  assert_int_equal(rep.u.lease.budget.partition_nccl_max_ctas, 0);
  th_raw_close(&r);

  /* Through the library: HR_EUNSUPPORTED, and no lease in status. */
  a = open_client("green");
  l = NULL;
  assert_int_equal(hr_lease_acquire(a, 0, 2, HR_MODE_PARTITION, &l),
                   HR_EUNSUPPORTED);
  assert_null(l);
  assert_int_equal(th_status(daemon_.socket, &st), 0);
  assert_int_equal(st.gpus[0].n_leases, 0);
  hr_status_free(&st);
  assert_int_equal(hr_lease_acquire(a, 0, 2, HR_MODE_AGNOSTIC, &l), HR_OK);
  assert_int_equal(hr_lease_grid(l), 132);

  text = th_ctl(&daemon_, pretty);
  assert_non_null(strstr(text, "(unsupported here)"));
  free(text);
  hr_client_close(a);
  th_daemon_cleanup(&daemon_);

  /* Steps of 2 still fit under that ceiling. */
  start("max_headroom = 4\npartition_ignore_coscheduling = true\n");
  a = open_client("green");
  assert_int_equal(hr_lease_acquire(a, 0, 2, HR_MODE_PARTITION, &l), HR_OK);
  assert_int_equal(hr_lease_headroom(l), 2);
  assert_int_equal(hr_lease_grid(l), 130);
  hr_client_close(a);
}

int main(void)
{
  const struct CMUnitTest tests[] = {
    cmocka_unit_test_teardown(test_partition_lease, teardown),
    cmocka_unit_test_teardown(test_footprint_pushes_partition, teardown),
    cmocka_unit_test_teardown(test_operators_see_partitions, teardown),
    cmocka_unit_test_teardown(test_ignore_coscheduling, teardown),
    cmocka_unit_test_teardown(test_no_step_fits, teardown),
  };
  return cmocka_run_group_tests_name("partition (daemon)", tests, NULL, NULL);
}
