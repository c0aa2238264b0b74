/*
 * test_attacks.c: what a hostile client or a hostile file in the state
 * folder tries, against the real headroomd on a real socket (the rows of
 * "Attacks tried" in docs/hardening.md):
 *  - operators are told apart by the peer's own credentials: a process in
 *    the operator group only as a supplementary group is one, a process
 *    that dropped the group its passwd entry gives it is not;
 *  - names with control characters (JSON escapes such as \u001b) are
 *    refused with a bad_request naming the member, and what the daemon
 *    logs of a client holds no raw control byte;
 *  - a hello's degraded_ms is clamped before it is counted;
 *  - a state or calibration file that is a link, a FIFO, a folder or
 *    another user's is moved aside with a logged reason, and the daemon
 *    starts clean; a duplicated member makes the file corrupt (it is read
 *    with the wire's checked reader).
 * The tests needing a second uid or a file of another owner run as root
 * and skip visibly otherwise.
 */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <setjmp.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "harness.h"
#include "headroom.h"

static hr_daemon daemon_;

#define send_line(r, ...) assert_int_equal(th_raw_send_line(r, __VA_ARGS__), 0)

static int teardown(void **state)
{
  (void)state;
  th_daemon_cleanup(&daemon_);
  return 0;
}

/* ---- operators ----------------------------------------------------------- */

/* In a child as uid nobody with primary gid `gid` and the supplementary
 * groups `groups` (n of them): ask to set the policy. The child's exit
 * status: 0 when it was allowed, 1 when refused with permission_denied,
 * more when something else went wrong. */
static int policy_set_as(gid_t gid, const gid_t *groups, size_t n)
{
  int status;
  pid_t pid = fork();

  assert_true(pid >= 0);
  if(pid == 0) {
    th_raw r;
    hr_reply rep;
    if(setgroups(n, groups) || setgid(gid) || setuid(65534))
      _exit(10);
    if(th_raw_open(&r, daemon_.socket))
      _exit(11);
    send_line(&r, "{\"id\":7,\"type\":\"policy_set\","
              "\"policy\":{\"min_headroom\":6}}");
    if(th_raw_reply(&r, &rep, 3000) || rep.id != 7)
      _exit(12);
    if(rep.type == HR_MSG_POLICY_SET && rep.u.policy.min_headroom == 6)
      _exit(0);
    if(rep.type == HR_MSG_ERROR &&
       rep.u.error.code == HR_WERR_PERMISSION_DENIED)
      _exit(1);
    _exit(13);
  }
  assert_int_equal(waitpid(pid, &status, 0), pid);
  assert_true(WIFEXITED(status));
  return WEXITSTATUS(status);
}

/* The operator group is held only as a supplementary group of the
 * process; no group database lists uid nobody in it. */
static void test_operator_by_supplementary_group(void **state)
{
  const gid_t ops = 4242, other = 4243;
  (void)state;

  if(geteuid() != 0)
    skip();                     /* another uid and setgroups need root */
  assert_int_equal(th_daemon_start(&daemon_, "operator_group = 4242\n"), 0);
  assert_int_equal(policy_set_as(65534, &other, 1), 1);
  assert_int_equal(policy_set_as(65534, &ops, 1), 0);
  /* As the primary group too. */
  assert_int_equal(policy_set_as(ops, NULL, 0), 0);
}

/* The group database says nobody is in its passwd primary group; a
 * process that dropped it is not in it, and is no operator. */
static void test_operator_group_dropped(void **state)
{
  char extra[64];
  struct passwd *pw;
  const gid_t other = 4243;
  (void)state;

  if(geteuid() != 0)
    skip();
  pw = getpwuid(65534);
  if(!pw)
    skip();                     /* no passwd entry for uid 65534 */
  snprintf(extra, sizeof(extra), "operator_group = %ld\n", (long)pw->pw_gid);
  assert_int_equal(th_daemon_start(&daemon_, extra), 0);
  assert_int_equal(policy_set_as(other, &other, 1), 1);
  assert_int_equal(policy_set_as(pw->pw_gid, NULL, 0), 0);
}


/* ---- names and the log --------------------------------------------------- */

/* The next reply must be a bad_request for `id` whose message holds
 * `want`. */
static void expect_bad_request(th_raw *r, int64_t id, const char *want)
{
  hr_reply rep;

  assert_int_equal(th_raw_reply(r, &rep, 3000), 0);
  assert_int_equal(rep.type, HR_MSG_ERROR);
  assert_int_equal(rep.id, id);
  assert_int_equal(rep.u.error.code, HR_WERR_BAD_REQUEST);
  if(!strstr(rep.u.error.message, want))
    fail_msg("expected \"%s\" in \"%s\"", want, rep.u.error.message);
}

/* Whether the whole file `path` holds a byte below 0x20 other than '\n',
 * or DEL. */
static int has_raw_control(const char *path)
{
  char *text = th_file_read(path);
  const unsigned char *p;
  int found = 0;

  assert_non_null(text);
  for(p = (const unsigned char *)text; *p && !found; p++)
    found = (*p < 0x20 && *p != '\n') || *p == 0x7f;
  free(text);
  return found;
}

static void test_names_refuse_control_characters(void **state)
{
  th_raw r;
  hr_reply rep;
  hr_status st;
  int i, j;
  (void)state;

  assert_int_equal(th_daemon_start(&daemon_, NULL), 0);
  assert_int_equal(th_raw_connect(&r, daemon_.socket), 0);
  /* An OSC title sequence as the client's name, escaped as JSON allows. */
  send_line(&r, "{\"id\":1,\"type\":\"hello\",\"versions\":[1],"
            "\"client\":\"x\\u001b]0;owned\\u0007\"}");
  expect_bad_request(&r, 1, "client: must not hold control characters");
  /* Still not introduced: a later hello with a clean name works. */
  send_line(&r, "{\"id\":2,\"type\":\"hello\",\"versions\":[1],"
            "\"client\":\"clean\"}");
  assert_int_equal(th_raw_reply(&r, &rep, 3000), 0);
  assert_int_equal(rep.type, HR_MSG_HELLO);
  /* A footprint name with a C1 CSI, escaped, then raw in UTF-8. */
  send_line(&r, "{\"id\":3,\"type\":\"register_comm\",\"gpu\":0,"
            "\"name\":\"dp\\u009b2J\",\"ctas\":4,\"cga\":1,"
            "\"concurrent\":1}");
  expect_bad_request(&r, 3, "name: must not hold control characters");
  send_line(&r, "{\"id\":4,\"type\":\"register_comm\",\"gpu\":0,"
            "\"name\":\"dp\xc2\x9b" "2J\",\"ctas\":4,\"cga\":1,"
            "\"concurrent\":1}");
  expect_bad_request(&r, 4, "name: must not hold control characters");
  /* Free text may hold them: the report is recorded. */
  send_line(&r, "{\"id\":5,\"type\":\"report\",\"gpu\":1,"
            "\"kind\":\"launch_failure\",\"message\":"
            "\"red \\u001b[31malert\\u001b[0m\\nforged <3>line\"}");
  assert_int_equal(th_raw_reply(&r, &rep, 3000), 0);
  assert_int_equal(rep.type, HR_MSG_REPORT);
  th_raw_close(&r);

  /* Nothing refused reached the state: no footprint, only clean names. */
  assert_int_equal(th_status(daemon_.socket, &st), 0);
  assert_int_equal(st.gpus[0].n_comms, 0);
  for(i = 0; i < st.n_clients; i++)
    for(j = 0; st.clients[i].name[j]; j++)
      assert_true((unsigned char)st.clients[i].name[j] >= 0x20);
  assert_int_equal(st.gpus[1].n_incidents, 1);
  assert_non_null(strstr(st.gpus[1].incidents[0].message, "\x1b[31m"));
  hr_status_free(&st);

  /* The log shows the message escaped, on one line, never raw. */
  assert_int_equal(th_daemon_stop(&daemon_), 0);
  assert_int_equal(has_raw_control(daemon_.log), 0);
  assert_true(th_daemon_log_has(&daemon_,
                                "red \\x1b[31malert\\x1b[0m\\x0aforged <3>"));
}

/* ---- counters a client supplies ------------------------------------------ */

static void get_metrics(th_raw *r, int64_t id, hr_metrics *out)
{
  hr_request req;
  hr_reply rep;

  memset(&req, 0, sizeof(req));
  req.type = HR_MSG_METRICS;
  req.id = id;
  assert_int_equal(th_raw_request(r, &req, &rep), 0);
  assert_int_equal(rep.type, HR_MSG_METRICS);
  *out = rep.u.metrics;
  hr_reply_free(&rep);
}

static void hello_degraded(const char *ms)
{
  th_raw r;
  hr_reply rep;

  assert_int_equal(th_raw_connect(&r, daemon_.socket), 0);
  send_line(&r, "{\"id\":1,\"type\":\"hello\",\"versions\":[1],"
            "\"client\":\"liar\",\"degraded_ms\":%s}", ms);
  assert_int_equal(th_raw_reply(&r, &rep, 3000), 0);
  assert_int_equal(rep.type, HR_MSG_HELLO);
  th_raw_close(&r);
}

static void test_degraded_ms_clamped(void **state)
{
  const int64_t day = 24LL * 60 * 60 * 1000;
  hr_metrics m;
  th_raw r;
  (void)state;

  assert_int_equal(th_daemon_start(&daemon_, NULL), 0);
  /* The largest the wire takes: counted as the uptime plus a day. */
  hello_degraded("9007199254740991");
  assert_int_equal(th_raw_open(&r, daemon_.socket), 0);
  get_metrics(&r, 2, &m);
  assert_int_equal(m.clients_resumed, 1);
  assert_true(m.client_degraded_ms >= day);
  assert_true(m.client_degraded_ms <= day + m.uptime_ms + 1);
  /* The counter is not saturated: an honest one still adds up. */
  hello_degraded("5400");
  get_metrics(&r, 3, &m);
  assert_int_equal(m.clients_resumed, 2);
  assert_true(m.client_degraded_ms >= day + 5400);
  assert_true(m.client_degraded_ms <= day + m.uptime_ms + 1 + 5400);
  th_raw_close(&r);
  assert_true(th_daemon_log_has(&daemon_, "back after 9007199254740991 ms "
                                "without a daemon, it says; counted as"));
}

/* ---- state and calibration files ------------------------------------------ */

/* The one entry of the state folder whose name starts with `prefix`:
 * lstat'ed into *st; 0 when found, -1 when none or more than one. */
static int find_aside(const char *prefix, struct stat *st, char *name,
                      size_t n)
{
  char cmd[600], line[256];
  FILE *f;
  int found = 0;

  snprintf(cmd, sizeof(cmd), "ls -A '%s'", daemon_.state_dir);
  f = popen(cmd, "r");
  assert_non_null(f);
  while(fgets(line, sizeof(line), f)) {
    line[strcspn(line, "\n")] = '\0';
    if(strncmp(line, prefix, strlen(prefix)))
      continue;
    found++;
    snprintf(name, n, "%s/%s", daemon_.state_dir, line);
  }
  pclose(f);
  if(found != 1)
    return -1;
  return lstat(name, st);
}

/* A barrier timeout on GPU 1 (raising its headroom) and a status read
 * after it, so the report's save is done. */
static void raise_gpu1(void)
{
  hr_client *c = th_client_open_connected(&daemon_, "raiser", 0);
  hr_incident_detail d = {1, 120, 130, 4, 130, 2000, -1};
  hr_lease *l;
  hr_status st;

  assert_int_equal(hr_lease_acquire(c, 1, 1, HR_MODE_HEADROOM, &l), HR_OK);
  assert_int_equal(hr_report(c, l, HR_INCIDENT_BARRIER_TIMEOUT, &d,
                             "learned"), HR_OK);
  assert_int_equal(th_status(daemon_.socket, &st), 0);
  assert_true(st.gpus[1].raised > 0);
  hr_status_free(&st);
  hr_client_close(c);
}

static int gpu1_raised(void)
{
  hr_status st;
  int raised;

  assert_int_equal(th_status(daemon_.socket, &st), 0);
  raised = st.gpus[1].raised;
  hr_status_free(&st);
  return raised;
}

/* After a start on a hostile state.json: refused with `reason` logged,
 * moved aside as state.json.refused-*, of `kind` (S_IFLNK, ...); the
 * daemon runs clean and saves a regular file of its own again. */
static void expect_refused_state(const char *reason, mode_t kind)
{
  char file[400], aside[1000], needle[200];
  struct stat st;

  snprintf(needle, sizeof(needle), "state.json is refused (%s); moved to",
           reason);
  if(!th_daemon_log_has(&daemon_, needle)) {
    th_daemon_dump_log(&daemon_);
    fail_msg("no \"%s\" in the log", needle);
  }
  assert_int_equal(find_aside("state.json.refused-", &st, aside,
                              sizeof(aside)), 0);
  assert_int_equal(st.st_mode & S_IFMT, kind);
  assert_int_equal(gpu1_raised(), 0);
  raise_gpu1();
  snprintf(file, sizeof(file), "%s/state.json", daemon_.state_dir);
  assert_int_equal(lstat(file, &st), 0);
  assert_true(S_ISREG(st.st_mode));
  assert_int_equal(st.st_uid, geteuid());
}

static void test_state_file_symlink(void **state)
{
  char file[400], victim[400], *before, *after;
  (void)state;

  assert_int_equal(th_daemon_start(&daemon_, NULL), 0);
  raise_gpu1();
  assert_int_equal(th_daemon_stop(&daemon_), 0);
  /* A good state file elsewhere, and a link to it where the daemon looks:
   * it must be neither read (its raise is not restored) nor written. */
  snprintf(file, sizeof(file), "%s/state.json", daemon_.state_dir);
  snprintf(victim, sizeof(victim), "%s/victim.json", daemon_.dir);
  assert_int_equal(rename(file, victim), 0);
  assert_int_equal(symlink(victim, file), 0);
  before = th_file_read(victim);
  assert_int_equal(th_daemon_restart(&daemon_), 0);
  expect_refused_state("a symbolic link, not followed", S_IFLNK);
  after = th_file_read(victim);
  assert_string_equal(before, after);
  free(before);
  free(after);
}

/* A daemon started once (so its state folder exists) and stopped, and
 * the path of `name` in that folder, for a test to plant something at. */
static void stopped_daemon(const char *name, char *path, size_t n)
{
  assert_int_equal(th_daemon_start(&daemon_, NULL), 0);
  assert_int_equal(th_daemon_stop(&daemon_), 0);
  snprintf(path, n, "%s/%s", daemon_.state_dir, name);
}

static void test_state_file_fifo(void **state)
{
  char file[400];
  (void)state;

  stopped_daemon("state.json", file, sizeof(file));
  assert_int_equal(mkfifo(file, 0644), 0);
  /* Nobody writes to it: a blocking open would never return, and
   * th_daemon_restart would time out waiting for the socket. */
  assert_int_equal(th_daemon_restart(&daemon_), 0);
  expect_refused_state("a FIFO", S_IFIFO);
}

static void test_state_file_folder(void **state)
{
  char file[400];
  (void)state;

  stopped_daemon("state.json", file, sizeof(file));
  assert_int_equal(mkdir(file, 0755), 0);
  assert_int_equal(th_daemon_restart(&daemon_), 0);
  expect_refused_state("a folder", S_IFDIR);
}

static void test_state_file_other_owner(void **state)
{
  char file[400];
  (void)state;

  if(geteuid() != 0)
    skip();                     /* only root can give a file away */
  assert_int_equal(th_daemon_start(&daemon_, NULL), 0);
  raise_gpu1();
  assert_int_equal(th_daemon_stop(&daemon_), 0);
  snprintf(file, sizeof(file), "%s/state.json", daemon_.state_dir);
  assert_int_equal(chown(file, 65534, 65534), 0);
  assert_int_equal(th_daemon_restart(&daemon_), 0);
  expect_refused_state("owned by uid 65534, not by the daemon's user "
                       "(uid 0)", S_IFREG);
}

/* The calibration file, in the state folder where headroomd looks when
 * the config names none: a FIFO there hung start-up too. */
static void test_calibration_file_fifo_and_link(void **state)
{
  char file[400], aside[1000];
  struct stat st;
  (void)state;

  stopped_daemon("calibration.json", file, sizeof(file));
  assert_int_equal(mkfifo(file, 0644), 0);
  assert_int_equal(th_daemon_restart(&daemon_), 0);
  assert_true(th_daemon_log_has(&daemon_, "calibration.json: a FIFO; moved "
                                "to"));
  assert_int_equal(find_aside("calibration.json.refused-", &st, aside,
                              sizeof(aside)), 0);
  assert_true(S_ISFIFO(st.st_mode));
  assert_int_equal(unlink(aside), 0);

  /* A link, at SIGHUP: refused the same way. */
  assert_int_equal(symlink("/etc/hostname", file), 0);
  assert_int_equal(kill(daemon_.pid, SIGHUP), 0);
  for(int i = 0; i < 300 && find_aside("calibration.json.refused-", &st,
                                       aside, sizeof(aside)); i++)
    usleep(10 * 1000);
  assert_int_equal(find_aside("calibration.json.refused-", &st, aside,
                              sizeof(aside)), 0);
  assert_true(S_ISLNK(st.st_mode));
  assert_true(th_daemon_log_has(&daemon_, "calibration.json: a symbolic "
                                "link, not followed; moved to"));
}

/* A member given twice: the wire refuses it, and so does the state file
 * now. Read loosely, the first "raised" won and a planted 30 came back. */
static void test_state_file_duplicate_member(void **state)
{
  char file[400], aside[1000];
  struct stat st;
  (void)state;

  stopped_daemon("state.json", file, sizeof(file));
  th_file_write(file, "{\"format\":1,\"next_incident\":1,\"gpus\":["
                "{\"gpu\":1,\"sms\":132,\"raised\":30,\"raised\":0,"
                "\"epoch\":1,\"incidents\":[]}]}\n");
  assert_int_equal(th_daemon_restart(&daemon_), 0);
  assert_int_equal(gpu1_raised(), 0);
  assert_true(th_daemon_log_has(&daemon_, "state.json is corrupt "
                                "(gpus[0].raised: given more than once)"));
  assert_int_equal(find_aside("state.json.corrupt-", &st, aside,
                              sizeof(aside)), 0);
  assert_true(S_ISREG(st.st_mode));
}

/* headroom-run names its client after --name or the command, whatever
 * bytes they hold: it must send a name the daemon takes, control
 * characters replaced, and still run the command under its lease. */
static void test_headroom_run_cleans_its_name(void **state)
{
  char bin[512];
  hr_status st;
  pid_t pid;
  int status, i, found = 0, tries;
  (void)state;

  assert_int_equal(th_daemon_start(&daemon_, NULL), 0);
  snprintf(bin, sizeof(bin), "%s/bin/headroom-run", th_build_dir());
  pid = fork();
  assert_true(pid >= 0);
  if(pid == 0) {
    execl(bin, bin, "--socket", daemon_.socket, "--gpu", "0", "--ctas", "4",
          "--name", "evil\x1b]0;x\x07", "--quiet", "--", "sleep", "30",
          (char *)NULL);
    _exit(127);
  }
  for(tries = 0; tries < 300 && !found; tries++) {
    assert_int_equal(th_status(daemon_.socket, &st), 0);
    for(i = 0; i < st.n_clients; i++)
      if(!strcmp(st.clients[i].name, "evil?]0;x?"))
        found = st.gpus[0].n_comms == 1;
    hr_status_free(&st);
    if(!found)
      usleep(10 * 1000);
  }
  kill(pid, SIGKILL);
  waitpid(pid, &status, 0);
  assert_true(found);
}

int main(void)
{
  const struct CMUnitTest tests[] = {
    cmocka_unit_test_teardown(test_operator_by_supplementary_group,
                              teardown),
    cmocka_unit_test_teardown(test_operator_group_dropped, teardown),
    cmocka_unit_test_teardown(test_names_refuse_control_characters,
                              teardown),
    cmocka_unit_test_teardown(test_headroom_run_cleans_its_name, teardown),
    cmocka_unit_test_teardown(test_degraded_ms_clamped, teardown),
    cmocka_unit_test_teardown(test_state_file_symlink, teardown),
    cmocka_unit_test_teardown(test_state_file_fifo, teardown),
    cmocka_unit_test_teardown(test_state_file_folder, teardown),
    cmocka_unit_test_teardown(test_state_file_other_owner, teardown),
    cmocka_unit_test_teardown(test_calibration_file_fifo_and_link,
                              teardown),
    cmocka_unit_test_teardown(test_state_file_duplicate_member, teardown),
  };
  signal(SIGPIPE, SIG_IGN);
  if(geteuid() != 0)
    printf("SKIP: not root: the tests that need another uid, groups or "
           "another owner's files skip\n");
  return cmocka_run_group_tests_name("attacks", tests, NULL, NULL);
}
