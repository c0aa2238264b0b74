/*
 * test_cli.c: what people and scripts see of the three tools against a
 * real headroomd: one exit status table (0 ok, 1 refused or invalid value,
 * 2 usage, 3 cannot connect) for headroomctl, headroom-run and headroomd,
 * in each one's --help; headroomctl's output (for people by default,
 * --json without wire ids, watch starting from the current budget); client
 * text with terminal control sequences printed escaped; and the hint that
 * names HEADROOM_SOCKET when the default socket is missing.
 */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <grp.h>
#include <unistd.h>

#include <cmocka.h>

#include "harness.h"
#include "headroom.h"

static hr_daemon daemon_;

/* HEADROOM_TIME_SCALE (tests/sanitize/run.sh: 3 under ASan, 10 under
 * valgrind) stretches every time bound here. */
static int time_scale(void)
{
  const char *s = getenv("HEADROOM_TIME_SCALE");
  int k = s ? atoi(s) : 1;

  return k > 0 ? k : 1;
}

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

/* Run a shell command line (printf-style) with stdout to <dir>/out and
 * stderr to <dir>/err; its exit status. B is the build's bin folder and S
 * the daemon's socket, set in the command's environment. */
static int sh(const char *fmt, ...)
{
  char cmd[2048], line[4800], bin[400];
  va_list ap;

  va_start(ap, fmt);
  vsnprintf(cmd, sizeof(cmd), fmt, ap);
  va_end(ap);
  snprintf(bin, sizeof(bin), "%s/bin", th_build_dir());
  snprintf(line, sizeof(line), "B='%s' S='%s' T=%d; { %s ; } > '%s/out' "
           "2> '%s/err'", bin, daemon_.socket, time_scale(), cmd,
           daemon_.dir, daemon_.dir);
  {
    char *argv[] = {"/bin/sh", "-c", line, NULL};
    return th_run(argv, NULL, 20000 * time_scale());
  }
}

static char *slurp(const char *name)
{
  char path[400];

  snprintf(path, sizeof(path), "%s/%s", daemon_.dir, name);
  if(access(path, F_OK))
    fail_msg("%s was not written", name);
  return th_file_read(path);
}

static void assert_has(const char *file, const char *needle)
{
  char *text = slurp(file);

  if(!strstr(text, needle))
    fail_msg("%s lacks '%s':\n%s", file, needle, text);
  free(text);
}

/* Whether the file holds at least `n` whole lines. */
/* Whether <dir>/name has n lines yet: 0 while it does not exist either
 * (a background command's redirection may come after the shell that
 * started it has returned). */
static int lines_in(const char *name, int n)
{
  char path[400], *text, *p;
  int count = 0;

  snprintf(path, sizeof(path), "%s/%s", daemon_.dir, name);
  if(access(path, F_OK))
    return 0;
  text = slurp(name);

  for(p = text; (p = strchr(p, '\n')); p++)
    count++;
  free(text);
  return count >= n;
}

/* ---- the exit status table ---------------------------------------------- */

static void test_headroomctl_exit_status(void **state)
{
  (void)state;

  assert_int_equal(sh("$B/headroomctl -s $S status"), 0);
  assert_int_equal(sh("$B/headroomctl -s $S frobnicate"), 2);
  assert_int_equal(sh("$B/headroomctl -s $S status --bogus"), 2);
  assert_int_equal(sh("$B/headroomctl -s $S policy set foo=1"), 2);
  assert_int_equal(sh("$B/headroomctl -s $S --timeout x status"), 2);
  /* A value that cannot be one: 1, before and after the daemon. */
  assert_int_equal(sh("$B/headroomctl -s $S policy set min_grid=x"), 1);
  assert_int_equal(sh("$B/headroomctl -s $S policy set incident_raise=maybe"),
                   1);
  assert_int_equal(sh("$B/headroomctl -s $S policy set min_grid=0"), 1);
  assert_has("err", "invalid value");
  /* Refused by the daemon (as root: invalid, min over max; otherwise:
   * not an operator): 1, not 3. */
  assert_int_equal(sh("$B/headroomctl -s $S policy set min_headroom=40"), 1);
  assert_int_equal(sh("$B/headroomctl -s $S policy set min_headroom=40 "
                      "max_headroom=8"), 1);
  /* No daemon there. */
  assert_int_equal(sh("$B/headroomctl -s $S.none status"), 3);
  assert_has("err", "no such socket");
}

/* A non-operator's policy set: refused, exit 1, with who may. */
static void test_headroomctl_permission_denied(void **state)
{
  pid_t pid;
  int status;
  (void)state;

  if(geteuid() != 0) {
    assert_int_equal(sh("$B/headroomctl -s $S policy set min_headroom=4"), 1);
    assert_has("err", "operator");
    return;
  }
  pid = fork();
  assert_true(pid >= 0);
  if(pid == 0) {
    char cmd[1200];
    char *argv[] = {"/bin/sh", "-c", cmd, NULL};
    /* nobody cannot write the daemon's folder: what headroomctl said
     * stays in the shell. */
    /* its reply timeout stretched as the others' time bounds are (a
     * daemon under valgrind, on a loaded machine, once took longer than
     * the default 5 s); what it said goes to stderr when it is wrong */
    snprintf(cmd, sizeof(cmd), "out=$('%s/bin/headroomctl' -s '%s' -t %d policy "
             "set min_headroom=4 2>&1); rc=$?; echo \"$out\" | grep -q "
             "operator_group || { echo \"headroomctl said: $out\" >&2; exit 9; }; "
             "exit $rc", th_build_dir(), daemon_.socket, 5000 * time_scale());
    if(setgroups(0, NULL) || setgid(65534) || setuid(65534))
      _exit(10);
    _exit(th_run(argv, NULL, 20000 * time_scale()));
  }
  assert_int_equal(waitpid(pid, &status, 0), pid);
  assert_true(WIFEXITED(status));
  assert_int_equal(WEXITSTATUS(status), 1);
}

static void test_headroom_run_exit_status(void **state)
{
  (void)state;

  assert_int_equal(sh("$B/headroom-run -s $S --gpu 0 -- true"), 0);
  /* Once CMD runs, its status is headroom-run's. */
  assert_int_equal(sh("$B/headroom-run -s $S --gpu 0 -- sh -c 'exit 7'"), 7);
  assert_int_equal(sh("$B/headroom-run -s $S -- true"), 2);
  assert_int_equal(sh("$B/headroom-run -s $S --gpu 0 --mode nope -- true"),
                   2);
  assert_has("err", "partition");
  /* Refused: no such GPU. */
  assert_int_equal(sh("$B/headroom-run -s $S --gpu 63 -- true"), 1);
  assert_has("err", "refused");
  assert_int_equal(sh("$B/headroom-run -s $S --gpu 0 -- /nonexistent/cmd"),
                   127);
  /* The partition mode is accepted and listed. */
  assert_int_equal(sh("$B/headroom-run --help"), 0);
  assert_has("out", "headroom|cooperative|agnostic|partition");
}

static void test_headroomd_exit_status(void **state)
{
  char conf[400];
  (void)state;

  assert_int_equal(sh("$B/headroomd --bogus"), 2);
  assert_int_equal(sh("$B/headroomd extra-argument"), 2);
  snprintf(conf, sizeof(conf), "%s/bad.conf", daemon_.dir);
  th_file_write(conf, "min_grid = lots\n");
  assert_int_equal(sh("$B/headroomd --check-config --config '%s'", conf), 1);
  assert_int_equal(sh("$B/headroomd --config '%s' -s $S.2 --state-dir "
                      "'%s/st2'", conf, daemon_.dir), 1);
  /* Cannot serve: the socket's folder is a file. */
  assert_int_equal(sh("$B/headroomd -s /etc/passwd/h.sock --state-dir "
                      "'%s/st3' --topology default", daemon_.dir), 3);
  /* Nor on a socket another daemon serves. */
  assert_int_equal(sh("$B/headroomd -s $S --state-dir '%s/st4' --topology "
                      "default", daemon_.dir), 3);
}

/* The same table in each one's --help. */
static void test_help_has_the_table(void **state)
{
  static const char *const tools[] = {"headroomctl", "headroom-run",
                                      "headroomd"};
  size_t i;
  (void)state;

  for(i = 0; i < sizeof(tools) / sizeof(tools[0]); i++) {
    assert_int_equal(sh("$B/%s --help", tools[i]), 0);
    assert_has("out", "headroomctl");
    assert_int_equal(sh("$B/%s --help | grep -Eq '^ +1 +refused'"
                        " || $B/%s --help | grep -Eq '^ +1 +invalid'",
                        tools[i], tools[i]), 0);
    assert_int_equal(sh("$B/%s --help | grep -Eq '^ +2 +usage'", tools[i]),
                     0);
    assert_int_equal(sh("$B/%s --help | grep -Eq '^ +3 +(cannot|could)'",
                        tools[i]), 0);
  }
}

/* ---- the output convention ---------------------------------------------- */

static void test_policy_output(void **state)
{
  char *text;
  hr_reply rep;
  (void)state;

  assert_int_equal(sh("$B/headroomctl -s $S policy get"), 0);
  text = slurp("out");
  assert_string_equal(text, "min_headroom 2\nmax_headroom 32\nmin_grid 64\n"
                      "incident_raise yes\n");
  free(text);
  /* --json after the command or before it: one object, no wire id. */
  assert_int_equal(sh("$B/headroomctl -s $S policy get --json && "
                      "$B/headroomctl -s $S --json policy get"), 0);
  text = slurp("out");
  assert_null(strstr(text, "\"id\""));
  assert_non_null(strchr(text, '\n'));
  assert_int_equal(th_ctl_decode(text, (size_t)(strchr(text, '\n') - text),
                                 &rep), 0);
  assert_int_equal(rep.type, HR_MSG_POLICY_GET);
  assert_int_equal(rep.u.policy.min_grid, 64);
  free(text);
  assert_int_equal(sh("$B/headroomctl -s $S --json metrics"), 0);
  text = slurp("out");
  assert_int_equal(text[0], '{');
  assert_null(strstr(text, "\"id\""));
  free(text);
  assert_int_equal(sh("$B/headroomctl -s $S metrics"), 0);
  assert_has("out", "# TYPE headroom_gpu_grid gauge\n");
}

/* headroomctl watch ARGS in the background until `until` is in its
 * output, then SIGTERM, then its exit status as "rc=N". Its handler is in
 * place before it prints, so the signal is never the default action, as a
 * fixed delay could make it under a slow sanitizer build. */
static int watch_until_term(const char *args, const char *until)
{
  return sh("$B/headroomctl -s $S watch %s & p=$!; i=0; "
            "while ! grep -qF -- '%s' '%s/out' 2>/dev/null && [ $i -lt $((200 * T)) ]; do "
            "sleep 0.05; i=$((i + 1)); done; kill -TERM $p; wait $p; echo rc=$?",
            args, until, daemon_.dir);
}

/* watch starts from the budget as it is, then follows each change. */
static void test_watch_prints_current_budget_first(void **state)
{
  hr_client *a;
  char *text;
  pid_t pid;
  int i;
  (void)state;

  assert_int_equal(watch_until_term("--gpu 1", "GPU 1: "), 0);
  text = slurp("out");
  if(strncmp(text, "GPU 1: headroom 2, grid 130 of 132 SMs", 38))
    fail_msg("watch began with:\n%s", text);
  assert_null(strstr(text, "GPU 0"));
  /* SIGTERM: exit 0. */
  assert_non_null(strstr(text, "rc=0\n"));
  free(text);

  assert_int_equal(watch_until_term("--json", "\"gpu\":1,"), 0);
  text = slurp("out");
  assert_true(!strncmp(text, "{\"type\":\"budget\",\"budget\":{\"gpu\":0,",
                       35));
  assert_non_null(strstr(text, "\"gpu\":1,"));
  assert_non_null(strstr(text, "rc=0\n"));
  free(text);

  /* A change while watching: a second line for GPU 0. */
  assert_int_equal(sh("$B/headroomctl -s $S watch --gpu 0 > '%s/watch' & "
                      "echo $! > '%s/watch.pid'", daemon_.dir, daemon_.dir),
                   0);
  for(i = 0; i < 300 * time_scale() && !lines_in("watch", 1); i++)
    usleep(10 * 1000);
  assert_true(i < 300 * time_scale());
  a = th_client_open_connected(&daemon_, "changer", 50);
  assert_int_equal(hr_comm_register(a, 0, "tp", 8, 1, 2, NULL), HR_OK);
  for(i = 0; i < 300 * time_scale() && !lines_in("watch", 2); i++)
    usleep(10 * 1000);
  text = slurp("watch.pid");
  pid = (pid_t)atoi(text);
  free(text);
  assert_true(pid > 0);
  kill(pid, SIGTERM);
  text = slurp("watch");
  if(i == 300 * time_scale() ||
     strncmp(text, "GPU 0: headroom 2,", 18) ||
     !strstr(text, "\nGPU 0: headroom 32, grid 100 of 132 SMs") ||
     !strstr(text, "epoch 2"))
    fail_msg("watch printed:\n%s", text);
  free(text);
  hr_client_close(a);
}

/* Control sequences in what clients chose are printed escaped: names,
 * footprint names and incident messages, in the tables. A daemon may
 * refuse such text up front (the names: docs/hardening.md); what it
 * accepted must come out escaped, and nothing raw may come out at all.
 * test_ctl_print.c holds the escaping itself, byte for byte. */
static void test_control_characters_escaped(void **state)
{
  static const char evil[] = "\\u001b]0;pwned\\u0007x\\u001b[2J\\u009b1m";
  static const char shown[] = "\\x1b]0;pwned\\x07x\\x1b[2J\\u009b1m";
  char line[1024], buf[4096];
  th_raw r;
  char *text, *p;
  long long lease;
  int n, accepted = 0;
  (void)state;

  assert_int_equal(th_raw_connect(&r, daemon_.socket), 0);
  snprintf(line, sizeof(line), "{\"id\":1,\"type\":\"hello\",\"versions\":"
           "[1],\"client\":\"%s\"}\n", evil);
  assert_int_equal(th_raw_send_str(&r, line), 0);
  assert_true(th_raw_read_line(&r, buf, sizeof(buf), 3000) > 0);
  if(strstr(buf, "\"type\":\"hello\"")) {
    accepted++;
  }
  else {
    th_raw_close(&r);
    assert_int_equal(th_raw_open(&r, daemon_.socket), 0);
  }
  snprintf(line, sizeof(line), "{\"id\":2,\"type\":\"register_comm\","
           "\"gpu\":0,\"name\":\"%s\",\"ctas\":2,\"cga\":1,"
           "\"concurrent\":1}\n", evil);
  assert_int_equal(th_raw_send_str(&r, line), 0);
  assert_true(th_raw_read_line(&r, buf, sizeof(buf), 3000) > 0);
  if(strstr(buf, "\"comm\":"))
    accepted++;
  else
    assert_non_null(strstr(buf, "control characters"));
  snprintf(line, sizeof(line), "{\"id\":3,\"type\":\"lease\",\"gpu\":0,"
           "\"cluster\":2,\"mode\":\"headroom\"}\n");
  assert_int_equal(th_raw_send_str(&r, line), 0);
  assert_true(th_raw_read_line(&r, buf, sizeof(buf), 3000) > 0);
  p = strstr(buf, "\"lease\":");
  if(!p)
    fail_msg("lease: %s", buf);
  lease = atoll(p + 8);
  assert_true(lease > 0);
  snprintf(line, sizeof(line), "{\"id\":4,\"type\":\"report\",\"gpu\":0,"
           "\"kind\":\"launch_failure\",\"lease\":%lld,\"detail\":{},"
           "\"message\":\"%s\"}\n", lease, evil);
  assert_int_equal(th_raw_send_str(&r, line), 0);
  assert_true(th_raw_read_line(&r, buf, sizeof(buf), 3000) > 0);
  if(strstr(buf, "\"incident\":"))
    accepted++;

  assert_int_equal(sh("$B/headroomctl -s $S status"), 0);
  text = slurp("out");
  assert_null(strchr(text, '\033'));
  assert_null(strchr(text, '\007'));
  assert_null(strstr(text, "\xc2\x9b"));
  p = strstr(text, shown);
  for(n = 0; p; n++)
    p = strstr(p + 1, shown);
  if(n != accepted)
    fail_msg("%d accepted, escaped %d times in:\n%s", accepted, n, text);
  free(text);
  /* --json: valid JSON, still nothing a terminal would act on. */
  assert_int_equal(sh("$B/headroomctl -s $S status --json"), 0);
  text = slurp("out");
  assert_null(strchr(text, '\033'));
  assert_null(strstr(text, "\xc2\x9b"));
  free(text);
  th_raw_close(&r);
}

/* ---- what to do next ---------------------------------------------------- */

/* The default socket missing: both tools name HEADROOM_SOCKET. Skipped
 * where a daemon really serves the default socket. */
static void test_missing_default_socket_names_the_variable(void **state)
{
  (void)state;

  if(!access(HR_DEFAULT_SOCKET, F_OK))
    skip();
  assert_int_equal(sh("env -u HEADROOM_SOCKET $B/headroomctl status"), 3);
  assert_has("err", "HEADROOM_SOCKET");
  assert_int_equal(sh("env -u HEADROOM_SOCKET $B/headroom-run --gpu 0 -- "
                      "true"), 0);
  assert_has("err", "HEADROOM_SOCKET");
  /* --quiet is quiet. */
  assert_int_equal(sh("env -u HEADROOM_SOCKET $B/headroom-run --quiet "
                      "--gpu 0 -- true"), 0);
  assert_int_equal(sh("test ! -s '%s/err'", daemon_.dir), 0);
}

int main(void)
{
  const struct CMUnitTest tests[] = {
    cmocka_unit_test_setup_teardown(test_headroomctl_exit_status, setup,
                                    teardown),
    cmocka_unit_test_setup_teardown(test_headroomctl_permission_denied,
                                    setup, teardown),
    cmocka_unit_test_setup_teardown(test_headroom_run_exit_status, setup,
                                    teardown),
    cmocka_unit_test_setup_teardown(test_headroomd_exit_status, setup,
                                    teardown),
    cmocka_unit_test_setup_teardown(test_help_has_the_table, setup,
                                    teardown),
    cmocka_unit_test_setup_teardown(test_policy_output, setup, teardown),
    cmocka_unit_test_setup_teardown(test_watch_prints_current_budget_first,
                                    setup, teardown),
    cmocka_unit_test_setup_teardown(test_control_characters_escaped, setup,
                                    teardown),
    cmocka_unit_test_setup_teardown(
      test_missing_default_socket_names_the_variable, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
