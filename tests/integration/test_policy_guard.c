/*
 * test_policy_guard.c: no policy can hand out the full grid, and
 * incidents belong to their reporter. The real headroomd on a real socket
 * (2 GPUs of 132 SMs from the test config), root and nobody where the
 * uid matters; the second uid's parts skip visibly when not run as root.
 */
#include <errno.h>
#include <fcntl.h>
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
  return th_daemon_start(&daemon_, NULL);
}

static int teardown(void **state)
{
  (void)state;
  th_daemon_cleanup(&daemon_);
  return 0;
}

/* Run headroomd with `args` (NULL-terminated) to completion, its stderr
 * (expected noise: a refused config) into <dir>/NAME.err; the exit
 * status, -1 when it did not exit by itself. */
static int run_daemon_bin(const char *const *args, const char *name)
{
  char bin[512], err[400];
  char *argv[12];
  pid_t pid;
  int status, i = 0, j;

  snprintf(bin, sizeof(bin), "%s/bin/headroomd", th_build_dir());
  snprintf(err, sizeof(err), "%s/%s.err", daemon_.dir, name);
  argv[i++] = bin;
  for(j = 0; args[j] && i < 11; j++)
    argv[i++] = (char *)args[j];
  argv[i] = NULL;
  pid = fork();
  assert_true(pid >= 0);
  if(pid == 0) {
    int fd = open(err, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int null = open("/dev/null", O_WRONLY);
    if(fd < 0 || null < 0)
      _exit(126);
    dup2(fd, 2);
    dup2(null, 1);
    execv(bin, argv);
    _exit(127);
  }
  for(i = 0; i < 500; i++) {
    if(waitpid(pid, &status, WNOHANG) == pid)
      return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    usleep(10 * 1000);
  }
  kill(pid, SIGKILL);
  waitpid(pid, &status, 0);
  return -1;
}

static char *read_in_dir(const char *name)
{
  char path[400];

  snprintf(path, sizeof(path), "%s/%s", daemon_.dir, name);
  return th_file_read(path);
}

static void write_in_dir(const char *name, const char *text)
{
  char path[400];

  snprintf(path, sizeof(path), "%s/%s", daemon_.dir, name);
  th_file_write(path, text);
}

static void send_request(th_raw *r, const hr_request *req, hr_reply *rep)
{
  assert_int_equal(th_raw_request(r, req, rep), 0);
}

static void policy_set(th_raw *r, int64_t id, unsigned fields,
                       const hr_policy *p, hr_reply *rep)
{
  hr_request req;

  memset(&req, 0, sizeof(req));
  req.type = HR_MSG_POLICY_SET;
  req.id = id;
  req.u.policy_set.fields = fields;
  req.u.policy_set.policy = *p;
  send_request(r, &req, rep);
}

static void expect_invalid(const hr_reply *rep, int64_t id, const char *a,
                           const char *b)
{
  if(rep->type != HR_MSG_ERROR)
    fail_msg("expected invalid_value, got message type %d", rep->type);
  assert_string_equal(hr_wire_error_name(rep->u.error.code),
                      "invalid_value");
  assert_true(rep->id == id);
  if(!strstr(rep->u.error.message, a) || !strstr(rep->u.error.message, b))
    fail_msg("'%s' lacks '%s' or '%s'", rep->u.error.message, a, b);
  /* What libheadroom and headroomctl make of it. */
  assert_int_equal(hr_wire_error_to_hr(rep->u.error.code), HR_EINVAL);
}

static void expect_default_policy(void)
{
  hr_status st;

  assert_int_equal(th_status(daemon_.socket, &st), 0);
  assert_int_equal(st.policy.min_headroom, 2);
  assert_int_equal(st.policy.max_headroom, 32);
  assert_int_equal(st.policy.min_grid, 64);
  assert_int_equal(st.gpus[0].budget.headroom, 2);
  assert_int_equal(st.gpus[0].budget.grid, 130);
  hr_status_free(&st);
}

/* ---- no policy can produce the full grid ---------------------------------- */

/* policy_set of a policy that would leave some GPU below its floor is
 * invalid_value naming the key, its value and the limit, and changes
 * nothing; the limit itself is accepted. */
static void test_policy_set_refuses_unsafe(void **state)
{
  hr_policy p;
  th_raw r;
  hr_reply rep;
  (void)state;

  if(geteuid() != 0)
    skip();                     /* only an operator can set policy */
  assert_int_equal(th_raw_open(&r, daemon_.socket), 0);
  memset(&p, 0, sizeof(p));
  p.min_grid = 200;             /* was: headroom 0, grid 132 everywhere */
  policy_set(&r, 1, HR_POLICY_MIN_GRID, &p, &rep);
  expect_invalid(&rep, 1, "min_grid 200", "at most 124");
  p.min_grid = 125;
  policy_set(&r, 2, HR_POLICY_MIN_GRID, &p, &rep);
  expect_invalid(&rep, 2, "min_grid 125", "at most 124");
  p.min_headroom = 0;
  policy_set(&r, 3, HR_POLICY_MIN_HEADROOM, &p, &rep);
  expect_invalid(&rep, 3, "min_headroom", "1..1024");
  p.max_headroom = 4;
  policy_set(&r, 4, HR_POLICY_MAX_HEADROOM, &p, &rep);
  expect_invalid(&rep, 4, "max_headroom 4", "at least 8");
  expect_default_policy();

  p.min_grid = 124;             /* exactly one cluster of 8 left */
  policy_set(&r, 5, HR_POLICY_MIN_GRID, &p, &rep);
  assert_int_equal(rep.type, HR_MSG_POLICY_SET);
  assert_int_equal(rep.u.policy.min_grid, 124);
  th_raw_close(&r);
}

/* --check-config judges the policy against the topology: 1 and the
 * FILE:LINE of the key for an unsafe one, 0 for a good one, 2 for a bad
 * flag. */
static void test_check_config_refuses_unsafe(void **state)
{
  char conf[400];
  const char *check[] = {"--check-config", "--config", conf, NULL};
  const char *bad_flag[] = {"--check-config", "--no-such-flag", NULL};
  char *err;
  (void)state;

  snprintf(conf, sizeof(conf), "%s/unsafe.conf", daemon_.dir);
  write_in_dir("unsafe.conf", "topology = config\ngpus = 2\n"
               "min_grid = 200\n");
  assert_int_equal(run_daemon_bin(check, "check1"), 1);
  err = read_in_dir("check1.err");
  if(!strstr(err, "unsafe.conf:3: min_grid 200") ||
     !strstr(err, "at most 124"))
    fail_msg("--check-config said: %s", err);
  free(err);

  write_in_dir("unsafe.conf", "topology = config\ngpus = 2\n"
               "min_headroom = 0\n");
  assert_int_equal(run_daemon_bin(check, "check2"), 1);
  err = read_in_dir("check2.err");
  if(!strstr(err, "unsafe.conf:3: bad min_headroom '0'"))
    fail_msg("--check-config said: %s", err);
  free(err);

  /* A smaller GPU of the topology decides. */
  write_in_dir("unsafe.conf", "topology = config\ngpus = 2\n"
               "gpu.1.sms = 114\nmin_grid = 110\n");
  assert_int_equal(run_daemon_bin(check, "check3"), 1);
  err = read_in_dir("check3.err");
  if(!strstr(err, "unsafe.conf:4: min_grid 110 leaves gpu 1 (114 SMs)"))
    fail_msg("--check-config said: %s", err);
  free(err);

  write_in_dir("unsafe.conf", "topology = config\ngpus = 2\n"
               "min_grid = 124\n");
  assert_int_equal(run_daemon_bin(check, "check4"), 0);
  assert_int_equal(run_daemon_bin(bad_flag, "check5"), 2);
}

/* A daemon whose config has an unsafe policy does not start. */
static void test_start_refuses_unsafe(void **state)
{
  char conf[400], sock[400], dir[400];
  const char *run[] = {"--config", conf, "--socket", sock, "--state-dir",
                       dir, NULL};
  char *err;
  (void)state;

  snprintf(conf, sizeof(conf), "%s/unsafe.conf", daemon_.dir);
  snprintf(sock, sizeof(sock), "%s/other.sock", daemon_.dir);
  snprintf(dir, sizeof(dir), "%s/other-state", daemon_.dir);
  write_in_dir("unsafe.conf", "topology = config\ngpus = 2\n"
               "max_headroom = 1\nmin_headroom = 1\n");
  assert_int_equal(run_daemon_bin(run, "start"), 1);
  err = read_in_dir("start.err");
  if(!strstr(err, "unsafe.conf:3: max_headroom 1") ||
     !strstr(err, "at least 8"))
    fail_msg("headroomd said: %s", err);
  free(err);
  assert_int_equal(access(sock, F_OK), -1);
}

/* SIGHUP with an unsafe policy in the file keeps the running one, and
 * says why in the log. */
static void test_reload_keeps_safe_policy(void **state)
{
  char *conf, *unsafe;
  size_t len;
  long long t0;
  (void)state;

  conf = th_file_read(daemon_.config);
  len = strlen(conf) + 64;
  unsafe = malloc(len);
  assert_non_null(unsafe);
  snprintf(unsafe, len, "%smin_grid = 131\n", conf);
  th_file_write(daemon_.config, unsafe);
  free(unsafe);
  free(conf);
  assert_int_equal(kill(daemon_.pid, SIGHUP), 0);
  t0 = th_now_ms();
  while(!th_daemon_log_has(&daemon_, "reload failed") &&
        th_now_ms() - t0 < 3000)
    usleep(10 * 1000);
  assert_true(th_daemon_log_has(&daemon_, "reload failed, keeping the "
                                "running configuration"));
  assert_true(th_daemon_log_has(&daemon_, "min_grid 131 leaves gpu 0"));
  expect_default_policy();
}

int main(void)
{
  const struct CMUnitTest tests[] = {
    cmocka_unit_test_setup_teardown(test_policy_set_refuses_unsafe, setup,
                                    teardown),
    cmocka_unit_test_setup_teardown(test_check_config_refuses_unsafe, setup,
                                    teardown),
    cmocka_unit_test_setup_teardown(test_start_refuses_unsafe, setup,
                                    teardown),
    cmocka_unit_test_setup_teardown(test_reload_keeps_safe_policy, setup,
                                    teardown),
  };
  signal(SIGPIPE, SIG_IGN);
  return cmocka_run_group_tests_name("policy_guard", tests, NULL, NULL);
}
