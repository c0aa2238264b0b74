/*
 * test_fallback.c: libheadroom and headroom-run with no daemon answering,
 * against a real headroomd that is absent, killed, restarted, or refusing
 * the hello with limit_exceeded (max_clients). The budget computed in the
 * process is the daemon's own policy on the default policy for what the
 * process registered: never the full grid, NCCL always capped; the
 * daemon's answer replaces it when the daemon comes back, and the daemon
 * counts the degraded time. Topology from the test config: 2 GPUs of 132
 * SMs (also what the library takes with no CUDA driver).
 */
#include <setjmp.h>
#include <signal.h>
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

static int setup(void **state)
{
  (void)state;
  unsetenv("DG_MEGA_MOE_SM_HEADROOM");
  unsetenv("HEADROOM_ALLOW_FULL_GRID");
  unsetenv("NCCL_MAX_CTAS");
  unsetenv("NCCL_MIN_CTAS");
  return th_daemon_start(&daemon_, NULL);
}

static int setup_one_client(void **state)
{
  (void)state;
  unsetenv("DG_MEGA_MOE_SM_HEADROOM");
  unsetenv("HEADROOM_ALLOW_FULL_GRID");
  return th_daemon_start(&daemon_, "max_clients = 1\n");
}

static int teardown(void **state)
{
  (void)state;
  th_daemon_cleanup(&daemon_);
  return 0;
}

/* Wait until the lease's degraded flag is `degraded` and the client's
 * connection agrees; the test fails after 3 s. */
static void wait_degraded(const hr_client *c, const hr_lease *l, int degraded)
{
  long long t0 = th_now_ms();
  while((hr_client_connected(c) == degraded ||
         hr_lease_degraded(l) != degraded) && th_now_ms() - t0 < 3000)
    usleep(10 * 1000);
  assert_int_equal(hr_client_connected(c), !degraded);
  assert_int_equal(hr_lease_degraded(l), degraded);
}

/* The budget the process computes with no footprint (default policy, 132
 * SMs, cluster 2): floor 2, maxCTAs the largest power of two p with
 * 2 x p <= 32. */
static void assert_floor_budget(const hr_lease *l)
{
  hr_budget b;
  assert_int_equal(hr_lease_budget(l, &b), HR_OK);
  assert_int_equal(b.degraded, 1);
  assert_int_equal(b.sms, 132);
  assert_int_equal(b.headroom, 2);
  assert_int_equal(b.grid, 130);
  assert_int_equal(b.nccl_min_ctas, 1);
  assert_int_equal(b.nccl_max_ctas, 16);
  assert_int_equal(b.nccl_cga_cluster_size, 1);
  assert_int_equal(b.nccl_nvls_enable, 0);
}

static int64_t degraded_ms_counted(void)
{
  hr_metrics m;

  assert_int_equal(th_metrics(daemon_.socket, &m), 0);
  return m.clients_resumed > 0 ? m.client_degraded_ms : 0;
}

/* Not started: the policy's budget, which follows the footprints the
 * process registers; when the daemon starts, its budget replaces it and
 * the time spent degraded is counted. */
static void test_absent_then_started(void **state)
{
  hr_client *c;
  hr_lease *l;
  hr_comm *m;
  uint32_t e;
  (void)state;

  assert_int_equal(th_daemon_stop(&daemon_), 0);
  c = th_client_open(&daemon_, "early", 50);
  assert_int_equal(hr_client_connected(c), 0);
  assert_int_equal(hr_lease_acquire(c, 0, 2, HR_MODE_HEADROOM, &l), HR_OK);
  assert_floor_budget(l);

  /* 8 CTAs x 2 in flight: 32 SMs at cluster 2, the default ceiling; NCCL
   * capped at 8 so two collectives fit it. */
  e = hr_lease_epoch(l);
  assert_int_equal(hr_comm_register(c, 0, "tp", 8, 1, 2, &m), HR_OK);
  assert_int_equal(hr_lease_wait_change(l, e, 1000), HR_OK);
  assert_int_equal(hr_lease_grid(l), 100);
  assert_int_equal(hr_lease_headroom(l), 32);
  assert_int_equal(hr_lease_degraded(l), 1);
  {
    hr_budget b;
    assert_int_equal(hr_lease_budget(l, &b), HR_OK);
    assert_int_equal(b.nccl_max_ctas, 8);
  }
  assert_int_equal(hr_comm_unregister(m), HR_OK);
  assert_int_equal(hr_lease_grid(l), 130);
  assert_int_equal(hr_comm_register(c, 0, "dp", 2, 1, 1, NULL), HR_OK);
  assert_int_equal(hr_lease_grid(l), 128);

  assert_int_equal(th_daemon_restart(&daemon_), 0);
  wait_degraded(c, l, 0);
  /* The daemon's own budget for the same footprint: the same numbers. */
  assert_int_equal(th_wait_grid(l, 128, 2000), 0);
  assert_true(degraded_ms_counted() >= 1);
  hr_client_close(c);
}

/* Wrong socket: nothing there at all. */
static void test_wrong_socket(void **state)
{
  hr_client_options o;
  hr_client *c = NULL;
  hr_lease *l;
  char path[400];
  (void)state;

  snprintf(path, sizeof(path), "%s/nobody-here.sock", daemon_.dir);
  memset(&o, 0, sizeof(o));
  o.quiet = 1;
  assert_int_equal(hr_client_open(&c, path, &o), HR_OK);
  assert_int_equal(hr_lease_acquire(c, 1, 2, HR_MODE_HEADROOM, &l), HR_OK);
  assert_floor_budget(l);
  hr_client_close(c);
}

/* Killed under a lease the daemon had sized for another tenant's
 * footprint: the lease keeps that larger answer; a footprint registered
 * while degraded raises it past it; the restarted daemon takes over. */
static void test_killed_and_restarted(void **state)
{
  hr_client *a = th_client_open_connected(&daemon_, "trainer", 50);
  hr_client *b = th_client_open_connected(&daemon_, "other", 50);
  hr_lease *la;
  uint32_t e;
  (void)state;

  assert_int_equal(hr_lease_acquire(a, 0, 2, HR_MODE_HEADROOM, &la), HR_OK);
  assert_int_equal(hr_lease_grid(la), 130);
  /* The other tenant: 4 CTAs x 2, 16 SMs for everyone on GPU 0. */
  assert_int_equal(hr_comm_register(b, 0, "ep", 4, 1, 2, NULL), HR_OK);
  assert_int_equal(th_wait_grid(la, 116, 2000), 0);

  th_daemon_kill(&daemon_);
  wait_degraded(a, la, 1);
  /* Alone it would compute 2; the daemon's 16 knew the other tenant. */
  assert_int_equal(hr_lease_grid(la), 116);
  e = hr_lease_epoch(la);
  /* Its own 12 CTAs x 1: 24 SMs, over what the daemon said. */
  assert_int_equal(hr_comm_register(a, 0, "tp", 12, 1, 1, NULL), HR_OK);
  assert_int_equal(hr_lease_wait_change(la, e, 1000), HR_OK);
  assert_int_equal(hr_lease_grid(la), 108);
  assert_int_equal(hr_lease_degraded(la), 1);
  hr_client_close(b);

  assert_int_equal(th_daemon_restart(&daemon_), 0);
  wait_degraded(a, la, 0);
  /* The new daemon knows only a's footprint: its 24. */
  assert_int_equal(th_wait_grid(la, 108, 2000), 0);
  assert_true(degraded_ms_counted() >= 1);
  hr_client_close(a);
}

/* A daemon that refuses the hello (max_clients reached): the same
 * fallback, not the full grid; the client gets in once a slot frees. */
static void test_hello_refused_limit(void **state)
{
  th_raw holder;
  hr_client *c;
  hr_lease *l;
  long long t0 = th_now_ms();
  int rc;
  (void)state;

  /* The one slot, once the daemon has seen the harness's start-up probe
   * go. */
  while((rc = th_raw_open(&holder, daemon_.socket)) && th_now_ms() - t0 < 2000)
    usleep(20 * 1000);
  assert_int_equal(rc, 0);
  c = th_client_open(&daemon_, "latecomer", 50);
  assert_int_equal(hr_client_connected(c), 0);
  assert_int_equal(hr_lease_acquire(c, 0, 2, HR_MODE_HEADROOM, &l), HR_OK);
  assert_floor_budget(l);
  assert_int_equal(hr_comm_register(c, 0, "dp", 3, 1, 1, NULL), HR_OK);
  assert_int_equal(hr_lease_grid(l), 126);
  th_raw_close(&holder);
  wait_degraded(c, l, 0);
  assert_int_equal(th_wait_grid(l, 126, 2000), 0);
  hr_client_close(c);
}

/* headroom-run with no daemon exports the caps and a headroom, the same
 * numbers the daemon gives (test_broker's test_headroom_run_exports_lease);
 * DG_MEGA_MOE_SM_HEADROOM=0 lowers nothing unless the full grid is asked
 * for explicitly, and even then NCCL stays capped. */
static void run_env(const char *dg, const char *allow, const char *want)
{
  char bin[512], out[400], path[400], text[256] = "";
  char *argv[16];
  int i = 0;

  if(dg)
    setenv("DG_MEGA_MOE_SM_HEADROOM", dg, 1);
  else
    unsetenv("DG_MEGA_MOE_SM_HEADROOM");
  if(allow)
    setenv("HEADROOM_ALLOW_FULL_GRID", allow, 1);
  else
    unsetenv("HEADROOM_ALLOW_FULL_GRID");
  snprintf(bin, sizeof(bin), "%s/bin/headroom-run", th_build_dir());
  snprintf(out, sizeof(out), "%s/env.txt", daemon_.dir);
  snprintf(path, sizeof(path), "%s/nobody-here.sock", daemon_.dir);
  argv[i++] = bin;
  argv[i++] = "--quiet";
  argv[i++] = "--socket";
  argv[i++] = path;
  argv[i++] = "--gpu";
  argv[i++] = "1";
  argv[i++] = "--ctas";
  argv[i++] = "2";
  argv[i++] = "--";
  argv[i++] = "/bin/sh";
  argv[i++] = "-c";
  argv[i++] = "echo $DG_MEGA_MOE_SM_HEADROOM $NCCL_MIN_CTAS $NCCL_MAX_CTAS "
              "$NCCL_CGA_CLUSTER_SIZE $NCCL_NVLS_ENABLE $HEADROOM_GPU";
  argv[i] = NULL;
  th_run_line(argv, out, text, sizeof(text));
  if(strcmp(text, want))
    fail_msg("DG_MEGA_MOE_SM_HEADROOM=%s HEADROOM_ALLOW_FULL_GRID=%s: "
             "exported \"%s\", want \"%s\"", dg ? dg : "-",
             allow ? allow : "-", text, want);
}

static void test_headroom_run_no_daemon(void **state)
{
  (void)state;
  /* 2 CTAs x 1 at cluster 2: 4 SMs; maxCTAs 16 on the default ceiling. */
  run_env(NULL, NULL, "4 1 16 1 0 1\n");
  run_env("0", NULL, "4 1 16 1 0 1\n");
  run_env("10", NULL, "10 1 16 1 0 1\n");
  run_env(NULL, "1", "4 1 16 1 0 1\n");
  run_env("0", "1", "0 1 16 1 0 1\n");
  unsetenv("DG_MEGA_MOE_SM_HEADROOM");
  unsetenv("HEADROOM_ALLOW_FULL_GRID");
}

int main(void)
{
  const struct CMUnitTest tests[] = {
    cmocka_unit_test_setup_teardown(test_absent_then_started, setup,
                                    teardown),
    cmocka_unit_test_setup_teardown(test_wrong_socket, setup, teardown),
    cmocka_unit_test_setup_teardown(test_killed_and_restarted, setup,
                                    teardown),
    cmocka_unit_test_setup_teardown(test_hello_refused_limit,
                                    setup_one_client, teardown),
    cmocka_unit_test_setup_teardown(test_headroom_run_no_daemon, setup,
                                    teardown),
  };
  signal(SIGPIPE, SIG_IGN);
  return cmocka_run_group_tests_name("fallback", tests, NULL, NULL);
}
