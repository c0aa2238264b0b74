/*
 * test_broker.c: the real headroomd on a real socket, driven by the real
 * libheadroom, headroomctl and headroom-run. Each test starts its own
 * daemon (topology from the test config: 2 GPUs of 132 SMs, default
 * policy) so no test can leak state into another.
 */
#include <errno.h>
#include <grp.h>
#include <setjmp.h>
#include <signal.h>
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

static hr_daemon daemon_;

static int setup(void **state)
{
  (void)state;
  /* test_status_too_large_is_summarized connects 560 clients, all of
   * this one uid: more than max_clients_per_uid lets one uid hold. */
  return th_daemon_start(&daemon_, "max_clients_per_uid = 1024\n"
                         "reserved_clients = 0\n");
}

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


/* ---- tests ----------------------------------------------------------------- */

static void test_same_budget_for_two_clients(void **state)
{
  hr_client *a = open_client("a"), *b = open_client("b");
  hr_lease *la, *lb;
  hr_budget ba, bb;
  (void)state;

  assert_int_equal(hr_lease_acquire(a, 0, 2, HR_MODE_HEADROOM, &la), HR_OK);
  assert_int_equal(hr_lease_acquire(b, 0, 2, HR_MODE_COOPERATIVE, &lb), HR_OK);
  assert_int_equal(hr_lease_budget(la, &ba), HR_OK);
  assert_int_equal(hr_lease_budget(lb, &bb), HR_OK);
  assert_int_equal(ba.degraded, 0);
  assert_int_equal(ba.sms, 132);
  assert_int_equal(ba.headroom, bb.headroom);
  assert_int_equal(ba.grid, bb.grid);
  assert_int_equal(ba.epoch, bb.epoch);
  assert_int_equal(ba.nccl_max_ctas, bb.nccl_max_ctas);
  assert_int_equal(ba.mode, HR_MODE_HEADROOM);
  assert_int_equal(bb.mode, HR_MODE_COOPERATIVE);
  /* Default policy, nothing registered: one cluster of headroom. */
  assert_int_equal(ba.headroom, 2);
  assert_int_equal(hr_lease_grid(la), 130);
  assert_int_equal(ba.nccl_cga_cluster_size, 1);
  assert_int_equal(ba.nccl_nvls_enable, 0);
  hr_client_close(a);
  hr_client_close(b);
}

static void test_footprint_pushes_to_other_client(void **state)
{
  hr_client *a = open_client("trainer"), *b = open_client("comm");
  hr_lease *la;
  hr_comm *cb;
  uint32_t e0;
  (void)state;

  assert_int_equal(hr_lease_acquire(a, 1, 2, HR_MODE_HEADROOM, &la), HR_OK);
  e0 = hr_lease_epoch(la);
  assert_int_equal(hr_lease_grid(la), 130);
  /* 8 CTAs, one collective in flight: 16 SMs with pair waste. */
  assert_int_equal(hr_comm_register(b, 1, "tp", 8, 1, 1, &cb), HR_OK);
  assert_int_equal(th_wait_grid(la, 116, 2000), 0);
  assert_true(hr_lease_epoch(la) > e0);
  assert_int_equal(hr_lease_headroom(la), 16);
  /* And back when it goes away. */
  assert_int_equal(hr_comm_unregister(cb), HR_OK);
  assert_int_equal(th_wait_grid(la, 130, 2000), 0);
  /* A footprint on the other GPU does not touch this lease. */
  assert_int_equal(hr_comm_register(b, 0, "dp", 8, 1, 1, NULL), HR_OK);
  usleep(100 * 1000);
  assert_int_equal(hr_lease_grid(la), 130);
  hr_client_close(a);
  hr_client_close(b);
}

/* headroom-run holds a footprint and lease exactly as long as its command;
 * SIGKILL of that command drops both at once. */
static void test_killed_client_vanishes(void **state)
{
  char bin[512], gpu_ctas[8] = "4";
  hr_client *a = open_client("watcher");
  hr_lease *la;
  hr_status st;
  long long end;
  pid_t pid;
  int status;
  (void)state;

  assert_int_equal(hr_lease_acquire(a, 0, 2, HR_MODE_HEADROOM, &la), HR_OK);
  snprintf(bin, sizeof(bin), "%s/bin/headroom-run", th_build_dir());
  pid = fork();
  assert_true(pid >= 0);
  if(pid == 0) {
    execl(bin, bin, "--socket", daemon_.socket, "--gpu", "0", "--ctas",
          gpu_ctas, "--concurrent", "2", "--quiet", "--", "sleep", "30",
          (char *)NULL);
    _exit(127);
  }
  /* 4 CTAs x 2 in flight x 2 = 16 SMs. */
  assert_int_equal(th_wait_grid(la, 116, 3000), 0);
  /* The grid moves with headroom-run's footprint, which it registers
   * before it takes its lease: wait for that too. */
  for(end = th_now_ms() + 3000;; usleep(10 * 1000)) {
    assert_int_equal(th_status(daemon_.socket, &st), 0);
    if(st.gpus[0].n_leases == 2 || th_now_ms() > end)
      break;
    hr_status_free(&st);
  }
  assert_int_equal(st.gpus[0].n_comms, 1);
  assert_int_equal(st.gpus[0].n_leases, 2);
  assert_int_equal(st.gpus[0].comm_ctas, 8);
  hr_status_free(&st);

  kill(pid, SIGKILL);
  waitpid(pid, &status, 0);
  assert_int_equal(th_wait_grid(la, 130, 2000), 0);
  assert_int_equal(th_status(daemon_.socket, &st), 0);
  assert_int_equal(st.gpus[0].n_comms, 0);
  assert_int_equal(st.gpus[0].n_leases, 1);
  hr_status_free(&st);
  hr_client_close(a);
}

static void test_headroom_run_exports_lease(void **state)
{
  char bin[512], out[400], text[256] = "";
  char *argv[16];
  int i = 0;
  (void)state;

  snprintf(bin, sizeof(bin), "%s/bin/headroom-run", th_build_dir());
  snprintf(out, sizeof(out), "%s/env.txt", daemon_.dir);
  argv[i++] = bin;
  argv[i++] = "--socket";
  argv[i++] = daemon_.socket;
  argv[i++] = "--gpu";
  argv[i++] = "1";
  argv[i++] = "--ctas";
  argv[i++] = "2";
  argv[i++] = "--";
  argv[i++] = "/bin/sh";
  argv[i++] = "-c";
  argv[i++] = "echo $DG_MEGA_MOE_SM_HEADROOM $NCCL_MAX_CTAS "
              "$NCCL_CGA_CLUSTER_SIZE $NCCL_NVLS_ENABLE $HEADROOM_GPU";
  argv[i] = NULL;
  th_run_line(argv, out, text, sizeof(text));
  /* 2 CTAs x 2 = 4 SMs of headroom; max CTAs 16 on the default ceiling. */
  assert_string_equal(text, "4 16 1 0 1\n");

  /* A command that does not exist: 127, and nothing left behind. */
  argv[8] = "/nonexistent/command";
  argv[9] = NULL;
  assert_int_equal(th_run(argv, NULL, 5000), 127);
}

static void test_daemon_restart_reconnects(void **state)
{
  hr_client *a = open_client("survivor");
  hr_lease *la;
  hr_status st;
  long long t0;
  (void)state;

  assert_int_equal(hr_comm_register(a, 0, "ep", 4, 1, 1, NULL), HR_OK);
  assert_int_equal(hr_lease_acquire(a, 0, 2, HR_MODE_HEADROOM, &la), HR_OK);
  assert_int_equal(hr_lease_grid(la), 124);

  th_daemon_kill(&daemon_);
  /* The library notices and goes degraded (no daemon: the budgets it
   * computes itself with the shared policy, never the full grid). It
   * says it is disconnected a moment before it has marked every lease
   * degraded: wait for both. */
  t0 = th_now_ms();
  while((hr_client_connected(a) || !hr_lease_degraded(la)) &&
        th_now_ms() - t0 < 2000)
    usleep(10 * 1000);
  assert_int_equal(hr_client_connected(a), 0);
  assert_int_equal(hr_lease_degraded(la), 1);
  /* ...but keeps the daemon's last answer, never the full grid. */
  assert_int_equal(hr_lease_grid(la), 124);

  assert_int_equal(th_daemon_restart(&daemon_), 0);
  t0 = th_now_ms();
  while((!hr_client_connected(a) || hr_lease_degraded(la)) &&
        th_now_ms() - t0 < 3000)
    usleep(10 * 1000);
  assert_int_equal(hr_client_connected(a), 1);
  assert_int_equal(hr_lease_degraded(la), 0);
  assert_int_equal(th_wait_grid(la, 124, 2000), 0);
  /* The new daemon holds the re-registered footprint and lease. */
  assert_int_equal(th_status(daemon_.socket, &st), 0);
  assert_int_equal(st.gpus[0].n_comms, 1);
  assert_int_equal(st.gpus[0].n_leases, 1);
  assert_int_equal(st.gpus[0].comm_ctas, 4);
  hr_status_free(&st);
  hr_client_close(a);
}

static void expect_error(th_raw *r, int64_t id, const char *code)
{
  hr_reply rep;
  assert_int_equal(th_raw_reply(r, &rep, 3000), 0);
  if(rep.type != HR_MSG_ERROR)
    fail_msg("expected error %s, got message type %d", code, rep.type);
  assert_string_equal(hr_wire_error_name(rep.u.error.code), code);
  assert_true(rep.id == id);
  assert_true(strlen(rep.u.error.message) > 0);
}

static void test_bad_input_leaves_others_unharmed(void **state)
{
  hr_client *good = open_client("good");
  hr_lease *lg;
  th_raw r1, r2, r3;
  char *big;
  char line[256];
  hr_request req;
  hr_reply rep;
  (void)state;

  assert_int_equal(hr_lease_acquire(good, 0, 2, HR_MODE_HEADROOM, &lg),
                   HR_OK);

  /* Before hello. */
  assert_int_equal(th_raw_connect(&r1, daemon_.socket), 0);
  th_raw_send_str(&r1, "{\"id\":4,\"type\":\"status\"}\n");
  expect_error(&r1, 4, "hello_required");
  th_raw_close(&r1);

  /* Garbage of every kind, on one connection that stays usable. */
  assert_int_equal(th_raw_open(&r1, daemon_.socket), 0);
  th_raw_send_str(&r1, "this is not json\n");
  expect_error(&r1, -1, "bad_request");
  th_raw_send_str(&r1, "[1,2,3]\n");
  expect_error(&r1, -1, "bad_request");
  th_raw_send_str(&r1, "{\"id\":5,\"type\":\"no_such_thing\"}\n");
  expect_error(&r1, 5, "unknown_type");
  th_raw_send_str(&r1, "{\"id\":6,\"type\":\"lease\",\"gpu\":\"zero\","
                       "\"cluster\":2,\"mode\":\"headroom\"}\n");
  expect_error(&r1, 6, "bad_request");
  th_raw_send_str(&r1, "{\"id\":7,\"type\":\"register_comm\",\"gpu\":0,"
                       "\"name\":\"x\",\"ctas\":1e300,\"cga\":1,"
                       "\"concurrent\":1}\n");
  expect_error(&r1, 7, "bad_request");
  th_raw_send_str(&r1, "{\"id\":8,\"type\":\"lease\",\"gpu\":9,"
                       "\"cluster\":2,\"mode\":\"headroom\"}\n");
  expect_error(&r1, 8, "not_found");
  th_raw_send_str(&r1, "{\"id\":9,\"type\":\"release\",\"lease\":424242}\n");
  expect_error(&r1, 9, "not_found");
  /* Several messages in one write, the second split across two writes. */
  th_raw_send_str(&r1, "{\"id\":10,\"type\":\"policy_get\"}\n{\"id\":11,\"ty");
  assert_int_equal(th_raw_reply(&r1, &rep, 3000), 0);
  assert_true(rep.id == 10 && rep.type == HR_MSG_POLICY_GET);
  usleep(50 * 1000);
  th_raw_send_str(&r1, "pe\":\"policy_get\"}\n");
  assert_int_equal(th_raw_reply(&r1, &rep, 3000), 0);
  assert_true(rep.id == 11 && rep.type == HR_MSG_POLICY_GET);

  /* A half-written message from another client blocks nobody. */
  assert_int_equal(th_raw_open(&r2, daemon_.socket), 0);
  th_raw_send_str(&r2, "{\"id\":3,\"type\":\"sta");

  /* An oversized line: too_large, then the connection is closed. */
  assert_int_equal(th_raw_open(&r3, daemon_.socket), 0);
  big = malloc(70000);
  assert_non_null(big);
  memset(big, 'x', 70000);
  big[0] = '"';
  th_raw_send(&r3, big, 70000);
  th_raw_send_str(&r3, "\"\n");
  free(big);
  expect_error(&r3, -1, "too_large");
  assert_int_equal(th_raw_read_line(&r3, line, sizeof(line), 2000), -1);
  th_raw_close(&r3);

  /* Everyone else is still served: the library client and r1. */
  memset(&req, 0, sizeof(req));
  req.type = HR_MSG_STATUS;
  req.id = 12;
  assert_int_equal(th_raw_request(&r1, &req, &rep), 0);
  assert_int_equal(rep.type, HR_MSG_STATUS);
  assert_int_equal(rep.u.status.gpus[0].n_leases, 1);
  hr_reply_free(&rep);
  assert_int_equal(hr_comm_register(good, 0, "dp", 2, 1, 1, NULL), HR_OK);
  assert_int_equal(th_wait_grid(lg, 128, 2000), 0);
  /* And the half-written one can still finish its message. */
  th_raw_send_str(&r2, "tus\"}\n");
  assert_int_equal(th_raw_reply(&r2, &rep, 3000), 0);
  assert_true(rep.id == 3 && rep.type == HR_MSG_STATUS);
  hr_reply_free(&rep);
  th_raw_close(&r1);
  th_raw_close(&r2);
  hr_client_close(good);
}

/* A non-operator gets permission_denied for policy_set; root (or a member
 * of operator_group) may set it, and the new budget reaches leases. */
static void try_policy_set(th_raw *r, int64_t id, int min_headroom)
{
  hr_request req;
  hr_buf b;

  memset(&req, 0, sizeof(req));
  req.type = HR_MSG_POLICY_SET;
  req.id = id;
  req.u.policy_set.fields = HR_POLICY_MIN_HEADROOM;
  req.u.policy_set.policy.min_headroom = min_headroom;
  hr_buf_init(&b, HR_PROTO_MAX_LINE);
  assert_int_equal(hr_proto_encode_request(&req, &b), HR_OK);
  assert_int_equal(th_raw_send(r, b.data, b.len), 0);
  hr_buf_free(&b);
}

static void test_non_operator_cannot_set_policy(void **state)
{
  th_raw r;
  pid_t pid;
  int status;
  hr_reply rep;
  (void)state;

  if(geteuid() == 0) {
    /* Drop to nobody in a child: the daemon sees another uid. */
    pid = fork();
    assert_true(pid >= 0);
    if(pid == 0) {
      hr_reply crep;
      if(setgroups(0, NULL) || setgid(65534) || setuid(65534))
        _exit(10);
      if(th_raw_open(&r, daemon_.socket))
        _exit(11);
      try_policy_set(&r, 21, 8);
      if(th_raw_reply(&r, &crep, 3000) || crep.type != HR_MSG_ERROR ||
         crep.u.error.code != HR_WERR_PERMISSION_DENIED || crep.id != 21)
        _exit(12);
      _exit(0);
    }
    waitpid(pid, &status, 0);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);

    /* Root is an operator. */
    assert_int_equal(th_raw_open(&r, daemon_.socket), 0);
    try_policy_set(&r, 22, 8);
    assert_int_equal(th_raw_reply(&r, &rep, 3000), 0);
    assert_int_equal(rep.type, HR_MSG_POLICY_SET);
    assert_int_equal(rep.u.policy.min_headroom, 8);
    th_raw_close(&r);
  } else {
    /* Not root and no operator_group configured: not an operator. */
    assert_int_equal(th_raw_open(&r, daemon_.socket), 0);
    try_policy_set(&r, 21, 8);
    expect_error(&r, 21, "permission_denied");
    th_raw_close(&r);
  }
}

static void test_policy_set_reaches_leases(void **state)
{
  hr_client *a;
  hr_lease *la;
  th_raw r;
  hr_reply rep;
  (void)state;

  if(geteuid() != 0)
    skip();                     /* only an operator can set policy */
  a = open_client("policy");
  assert_int_equal(hr_lease_acquire(a, 0, 2, HR_MODE_HEADROOM, &la), HR_OK);
  assert_int_equal(th_raw_open(&r, daemon_.socket), 0);
  try_policy_set(&r, 30, 10);
  assert_int_equal(th_raw_reply(&r, &rep, 3000), 0);
  assert_int_equal(rep.type, HR_MSG_POLICY_SET);
  th_raw_close(&r);
  assert_int_equal(th_wait_grid(la, 122, 2000), 0);
  hr_client_close(a);
}

/* headroomctl status, checked against proto/status.schema.json. */
static void check_status_schema(void)
{
  const char *args[] = { "status", "--json", NULL };
  char out[400];

  free(th_ctl(&daemon_, args));
  snprintf(out, sizeof(out), "%s/ctl.out", daemon_.dir);
  assert_int_equal(th_status_validate(out), 0);
}

static void test_incident_raises_and_persists(void **state)
{
  hr_client *a = open_client("victim"), *b = open_client("bystander");
  hr_lease *la, *lb;
  hr_incident_detail d = {2, 120, 130, 17, 130, 200, -1};
  hr_status st;
  long long t0;
  (void)state;

  assert_int_equal(hr_lease_acquire(a, 1, 2, HR_MODE_HEADROOM, &la), HR_OK);
  assert_int_equal(hr_lease_acquire(b, 1, 2, HR_MODE_HEADROOM, &lb), HR_OK);
  assert_int_equal(hr_lease_grid(la), 130);
  assert_int_equal(hr_report(a, la, HR_INCIDENT_BARRIER_TIMEOUT, &d,
                             "barrier 2 timed out"), HR_OK);
  /* Raised by one cluster, on both clients, pushed. */
  assert_int_equal(th_wait_grid(la, 128, 2000), 0);
  assert_int_equal(th_wait_grid(lb, 128, 2000), 0);
  /* A launch failure is recorded but raises nothing. */
  assert_int_equal(hr_report(b, NULL, HR_INCIDENT_LAUNCH_FAILURE, NULL, NULL),
                   HR_OK);
  assert_int_equal(th_status(daemon_.socket, &st), 0);
  assert_int_equal(st.gpus[1].n_incidents, 2);
  assert_int_equal(st.gpus[1].raised, 2);
  assert_int_equal(st.gpus[1].budget.grid, 128);
  assert_int_equal(st.gpus[1].incidents[0].kind, HR_INCIDENT_BARRIER_TIMEOUT);
  assert_int_equal(st.gpus[1].incidents[0].detail.arrived, 120);
  assert_int_equal(st.gpus[1].incidents[0].detail.sm, 17);
  assert_string_equal(st.gpus[1].incidents[0].message, "barrier 2 timed out");
  assert_int_equal(st.gpus[0].raised, 0);
  hr_status_free(&st);
  /* The status headroomctl prints, incidents and all, obeys the schema. */
  check_status_schema();

  /* Learned state survives a restart of the daemon. */
  assert_int_equal(th_daemon_stop(&daemon_), 0);
  assert_int_equal(th_daemon_restart(&daemon_), 0);
  t0 = th_now_ms();
  while(hr_lease_degraded(la) && th_now_ms() - t0 < 3000)
    usleep(10 * 1000);
  assert_int_equal(th_wait_grid(la, 128, 2000), 0);
  assert_int_equal(th_status(daemon_.socket, &st), 0);
  assert_int_equal(st.gpus[1].raised, 2);
  assert_int_equal(st.gpus[1].n_incidents, 2);
  hr_status_free(&st);
  hr_client_close(a);
  hr_client_close(b);
}

static void test_second_daemon_refuses(void **state)
{
  char bin[512];
  char *argv[10];
  (void)state;

  snprintf(bin, sizeof(bin), "%s/bin/headroomd", th_build_dir());
  argv[0] = bin;
  argv[1] = "--config";
  argv[2] = daemon_.config;
  argv[3] = "--socket";
  argv[4] = daemon_.socket;
  argv[5] = "--state-dir";
  argv[6] = daemon_.state_dir;
  argv[7] = NULL;
  /* 3: could not serve, the daemon's side of "cannot connect". */
  fprintf(stderr, "test_second_daemon_refuses: expected next on stderr: "
          "'another headroomd is already listening there'\n");
  assert_int_equal(th_run(argv, NULL, 5000), 3);
  /* The first one is unharmed. */
  {
    hr_status st;
    assert_int_equal(th_status(daemon_.socket, &st), 0);
    hr_status_free(&st);
  }
  /* A stale socket (daemon killed, file left) is replaced. */
  th_daemon_kill(&daemon_);
  assert_int_equal(access(daemon_.socket, F_OK), 0);
  assert_int_equal(th_daemon_restart(&daemon_), 0);
}

static void test_headroomctl(void **state)
{
  static const char *const json[] = {"status", "--json", NULL};
  static const char *const pretty[] = {"status", "--pretty", NULL};
  static const char *const plain[] = {"status", NULL};
  char bin[512], *text;
  char *argv[12];
  hr_reply rep;
  size_t n;
  (void)state;

  text = th_ctl(&daemon_, json);
  n = strlen(text);
  /* One JSON line that the protocol's own decoder accepts as status,
   * without the wire's id. */
  assert_true(n > 2 && text[n - 1] == '\n');
  assert_int_equal(th_ctl_decode(text, n - 1, &rep), 0);
  assert_int_equal(rep.type, HR_MSG_STATUS);
  assert_int_equal(rep.u.status.n_gpus, 2);
  hr_reply_free(&rep);
  free(text);

  free(th_ctl(&daemon_, pretty));
  text = th_ctl(&daemon_, plain);
  /* Tables by default, for people. */
  assert_non_null(strstr(text, "HEADROOM"));
  assert_null(strchr(text, '{'));
  free(text);

  snprintf(bin, sizeof(bin), "%s/bin/headroomctl", th_build_dir());
  argv[0] = bin;
  argv[1] = "--socket";
  argv[2] = daemon_.socket;
  /* Usage error, and no daemon (test_cli.c has the whole table). */
  fprintf(stderr, "test_headroomctl: expected next on stderr: an unknown "
          "command, then no socket at /nonexistent/h.sock\n");
  argv[3] = "frobnicate";
  argv[4] = NULL;
  assert_int_equal(th_run(argv, NULL, 5000), 2);
  argv[2] = "/nonexistent/h.sock";
  argv[3] = "status";
  assert_int_equal(th_run(argv, NULL, 5000), 3);
}

/* ---- a status too large for one message ------------------------------------ */

#define MANY_CLIENTS 560        /* with 63-byte names: over 64 KiB of status */

/* Connect `n` raw clients with the longest names and say hello on each,
 * all at once; wait for every hello reply. The fds go to `fds`. */
static void open_many(int *fds, int n)
{
  static th_raw r;
  char line[256], buf[4096];
  int i;

  for(i = 0; i < n; i++) {
    assert_int_equal(th_raw_connect(&r, daemon_.socket), 0);
    snprintf(line, sizeof(line), "{\"id\":1,\"type\":\"hello\",\"versions\":"
             "[1],\"client\":\"many-%04d-%.53s\"}\n", i,
             "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx");
    assert_int_equal(th_raw_send_str(&r, line), 0);
    fds[i] = r.fd;
    r.fd = -1;
  }
  for(i = 0; i < n; i++) {
    r.fd = fds[i];
    r.len = 0;
    assert_true(th_raw_read_line(&r, buf, sizeof(buf), 10000) > 0);
    assert_non_null(strstr(buf, "\"type\":\"hello\""));
    assert_int_equal(r.len, 0);   /* nothing else was sent */
    r.fd = -1;
  }
}

/* Run headroomctl status with `extra` arguments (NULL-terminated, at most
 * 2), stdout and stderr to files in the daemon's folder; its exit code. */
static int run_status(const char *extra1, const char *extra2)
{
  char cmd[2048];

  snprintf(cmd, sizeof(cmd), "'%s/bin/headroomctl' --socket '%s' status "
           "%s %s > '%s/status.out' 2> '%s/status.err'", th_build_dir(),
           daemon_.socket, extra1 ? extra1 : "", extra2 ? extra2 : "",
           daemon_.dir, daemon_.dir);
  {
    char *argv[] = {"/bin/sh", "-c", cmd, NULL};
    return th_run(argv, NULL, 20000);
  }
}

static char *slurp(const char *name)
{
  char path[400];

  snprintf(path, sizeof(path), "%s/%s", daemon_.dir, name);
  return th_file_read(path);
}

/* The JSON status headroomctl printed: valid against the schema, decoded. */
static void printed_status(hr_reply *rep)
{
  char out[400], *text;
  size_t n;

  snprintf(out, sizeof(out), "%s/status.out", daemon_.dir);
  assert_int_equal(th_status_validate(out), 0);
  text = slurp("status.out");
  n = strlen(text);
  assert_true(n > 2 && text[n - 1] == '\n');
  assert_true(n <= HR_PROTO_MAX_LINE);
  assert_int_equal(th_ctl_decode(text, n - 1, rep), 0);
  assert_int_equal(rep->type, HR_MSG_STATUS);
  free(text);
}

/* Hundreds of clients: the full status would pass the 64 KiB message cap.
 * Every status request is still answered with a status: the summary,
 * marked truncated, with the counts right; headroomctl says so; and once
 * the clients are gone the full status is back. */
static void test_status_too_large_is_summarized(void **state)
{
  static int fds[MANY_CLIENTS];
  hr_client *a = open_client("holder");
  hr_lease *la;
  hr_request req;
  hr_reply rep;
  th_raw r;
  char *text;
  int i;
  (void)state;

  assert_int_equal(hr_comm_register(a, 0, "dp", 4, 1, 2, NULL), HR_OK);
  assert_int_equal(hr_lease_acquire(a, 0, 2, HR_MODE_AGNOSTIC, &la), HR_OK);
  open_many(fds, MANY_CLIENTS);

  /* On the wire: asked for in full, answered with the summary. */
  assert_int_equal(th_raw_open(&r, daemon_.socket), 0);
  memset(&req, 0, sizeof(req));
  req.type = HR_MSG_STATUS;
  req.id = 7;
  assert_int_equal(th_raw_request(&r, &req, &rep), 0);
  if(rep.type == HR_MSG_ERROR)
    fail_msg("status answered %s: %s", hr_wire_error_name(rep.u.error.code),
             rep.u.error.message);
  assert_int_equal(rep.type, HR_MSG_STATUS);
  assert_true(rep.id == 7);
  assert_int_equal(rep.u.status.detail, HR_STATUS_SUMMARY);
  assert_int_equal(rep.u.status.truncated, 1);
  /* The many, the holder and this one. */
  assert_int_equal(rep.u.status.client_count, MANY_CLIENTS + 2);
  assert_int_equal(rep.u.status.n_clients, 0);
  assert_int_equal(rep.u.status.n_gpus, 2);
  assert_int_equal(rep.u.status.gpus[0].n_clients, 1);
  assert_int_equal(rep.u.status.gpus[0].comm_count, 1);
  assert_int_equal(rep.u.status.gpus[0].lease_count[HR_MODE_AGNOSTIC], 1);
  assert_int_equal(rep.u.status.gpus[0].lease_count[HR_MODE_HEADROOM], 0);
  assert_int_equal(rep.u.status.gpus[0].comm_ctas, 8);
  assert_int_equal(rep.u.status.gpus[1].comm_count, 0);
  hr_reply_free(&rep);
  /* Asked for as a summary: the same, not truncated. */
  req.u.status.detail = HR_STATUS_SUMMARY;
  assert_int_equal(th_raw_request(&r, &req, &rep), 0);
  assert_int_equal(rep.type, HR_MSG_STATUS);
  assert_int_equal(rep.u.status.detail, HR_STATUS_SUMMARY);
  assert_int_equal(rep.u.status.truncated, 0);
  assert_int_equal(rep.u.status.client_count, MANY_CLIENTS + 2);
  hr_reply_free(&rep);
  th_raw_close(&r);

  /* headroomctl status: the truncated summary, valid against the schema,
   * exit 0, and a line on stderr that says so. */
  assert_int_equal(run_status("--json", NULL), 0);
  printed_status(&rep);
  assert_int_equal(rep.u.status.truncated, 1);
  assert_int_equal(rep.u.status.client_count, MANY_CLIENTS + 2);
  hr_reply_free(&rep);
  text = slurp("status.err");
  assert_non_null(strstr(text, "status truncated"));
  free(text);
  assert_int_equal(run_status("--pretty", NULL), 0);
  text = slurp("status.out");
  assert_non_null(strstr(text, "STATUS TRUNCATED"));
  assert_non_null(strstr(text, "LEASES BY MODE"));
  free(text);

  /* The clients go: the full status is back, and --summary still gives
   * the summary, untruncated, with nothing on stderr. */
  for(i = 0; i < MANY_CLIENTS; i++)
    close(fds[i]);
  for(i = 0; i < 200; i++) {
    hr_status st;
    assert_int_equal(th_status(daemon_.socket, &st), 0);
    if(st.detail == HR_STATUS_FULL && st.client_count == 2) {
      hr_status_free(&st);
      break;
    }
    hr_status_free(&st);
    usleep(10 * 1000);
  }
  assert_true(i < 200);
  assert_int_equal(run_status("--json", NULL), 0);
  printed_status(&rep);
  assert_int_equal(rep.u.status.detail, HR_STATUS_FULL);
  assert_int_equal(rep.u.status.n_clients, 2);
  assert_int_equal(rep.u.status.gpus[0].n_leases, 1);
  hr_reply_free(&rep);
  assert_int_equal(run_status("--summary", "--json"), 0);
  printed_status(&rep);
  assert_int_equal(rep.u.status.detail, HR_STATUS_SUMMARY);
  assert_int_equal(rep.u.status.truncated, 0);
  assert_int_equal(rep.u.status.client_count, 2);
  hr_reply_free(&rep);
  text = slurp("status.err");
  assert_string_equal(text, "");
  free(text);
  assert_int_equal(run_status("--summary", "--pretty"), 0);
  text = slurp("status.out");
  assert_non_null(strstr(text, "(not listed: summary)"));
  assert_null(strstr(text, "TRUNCATED"));
  free(text);
  hr_client_close(a);
}

int main(void)
{
  const struct CMUnitTest tests[] = {
    cmocka_unit_test_setup_teardown(test_same_budget_for_two_clients, setup,
                                    teardown),
    cmocka_unit_test_setup_teardown(test_footprint_pushes_to_other_client,
                                    setup, teardown),
    cmocka_unit_test_setup_teardown(test_killed_client_vanishes, setup,
                                    teardown),
    cmocka_unit_test_setup_teardown(test_headroom_run_exports_lease, setup,
                                    teardown),
    cmocka_unit_test_setup_teardown(test_daemon_restart_reconnects, setup,
                                    teardown),
    cmocka_unit_test_setup_teardown(test_bad_input_leaves_others_unharmed,
                                    setup, teardown),
    cmocka_unit_test_setup_teardown(test_non_operator_cannot_set_policy,
                                    setup, teardown),
    cmocka_unit_test_setup_teardown(test_policy_set_reaches_leases, setup,
                                    teardown),
    cmocka_unit_test_setup_teardown(test_incident_raises_and_persists, setup,
                                    teardown),
    cmocka_unit_test_setup_teardown(test_second_daemon_refuses, setup,
                                    teardown),
    cmocka_unit_test_setup_teardown(test_headroomctl, setup, teardown),
    cmocka_unit_test_setup_teardown(test_status_too_large_is_summarized,
                                    setup, teardown),
  };
  signal(SIGPIPE, SIG_IGN);
  return cmocka_run_group_tests_name("broker", tests, NULL, NULL);
}
