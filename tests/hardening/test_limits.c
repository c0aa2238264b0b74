/*
 * test_limits.c: what a client may not do to the daemon or to other
 * clients, against the real headroomd on a real socket:
 *  - who may connect (the socket's mode) and what the daemon leaves on
 *    disk (the state folder and file, and no following of a link planted
 *    at the state file's temporary name);
 *  - the per-client limits: footprints, leases, messages a second, bytes
 *    queued to a client that does not read, and the daemon's max_clients,
 *    each with its error and, for a flood or a stalled reader, the
 *    disconnection and its logged reason;
 *  - a client can release or change only its own footprints and leases.
 */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <setjmp.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
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

static hr_client *open_client(const char *name)
{
  return th_client_open_connected(&daemon_, name, 0);
}

/* The next reply must be the error `code` for request `id`. */
static void expect_error(th_raw *r, int64_t id, hr_wire_error code)
{
  hr_reply rep;

  assert_int_equal(th_raw_reply(r, &rep, 3000), 0);
  if(rep.type != HR_MSG_ERROR)
    fail_msg("request %lld: expected %s, got message type %d",
             (long long)id, hr_wire_error_name(code), rep.type);
  if(rep.u.error.code != code || rep.id != id)
    fail_msg("request %lld: expected %s, got %s for id %lld (%s)",
             (long long)id, hr_wire_error_name(code),
             hr_wire_error_name(rep.u.error.code), (long long)rep.id,
             rep.u.error.message);
}

/* Anywhere in the whole log, not only the first 64 KiB that
 * th_daemon_log_has reads. */
static int log_has(const char *needle)
{
  return th_daemon_log_count(&daemon_, needle) > 0;
}

/* Replace the test config (harness.c writes socket_mode = 0666) and
 * start the daemon again on it. */
static void restart_with_config(const char *text)
{
  assert_int_equal(th_daemon_stop(&daemon_), 0);
  th_file_write(daemon_.config, text);
  assert_int_equal(th_daemon_restart(&daemon_), 0);
}

/* connect() to the socket as uid/gid 65534 (nobody) in a child: 0 when it
 * connected, else the errno it failed with. */
static int connect_as_nobody(const char *path)
{
  int status;
  pid_t pid = fork();

  assert_true(pid >= 0);
  if(pid == 0) {
    struct sockaddr_un sa;
    size_t len = strlen(path);
    int fd;
    if(len >= sizeof(sa.sun_path) || setgroups(0, NULL) || setgid(65534) ||
       setuid(65534))
      _exit(200);
    fd = socket(AF_UNIX, SOCK_STREAM, 0);
    memset(&sa, 0, sizeof(sa));
    sa.sun_family = AF_UNIX;
    memcpy(sa.sun_path, path, len + 1);
    _exit(connect(fd, (struct sockaddr *)&sa, sizeof(sa)) ? errno : 0);
  }
  waitpid(pid, &status, 0);
  assert_true(WIFEXITED(status));
  assert_int_not_equal(WEXITSTATUS(status), 200);
  return WEXITSTATUS(status);
}

/* ---- permissions --------------------------------------------------------- */

static void test_socket_mode(void **state)
{
  struct stat st;
  (void)state;

  assert_int_equal(th_daemon_start(&daemon_, NULL), 0);
  /* The test config asks for 0666: exactly that, on a socket. */
  assert_int_equal(lstat(daemon_.socket, &st), 0);
  assert_true(S_ISSOCK(st.st_mode));
  assert_int_equal(st.st_mode & 07777, 0666);
  if(geteuid() == 0)
    assert_int_equal(connect_as_nobody(daemon_.socket), 0);

  restart_with_config("topology = config\ngpus = 2\nsocket_mode = 0600\n");
  assert_int_equal(lstat(daemon_.socket, &st), 0);
  assert_int_equal(st.st_mode & 07777, 0600);
  assert_int_equal(st.st_uid, geteuid());
  if(geteuid() == 0)
    assert_int_equal(connect_as_nobody(daemon_.socket), EACCES);
  else
    print_message("not root: cannot try another user's connect\n");

  /* The default, 0660: the group may connect, nobody else. */
  restart_with_config("topology = config\ngpus = 2\n");
  assert_int_equal(lstat(daemon_.socket, &st), 0);
  assert_int_equal(st.st_mode & 07777, 0660);
  if(geteuid() == 0)
    assert_int_equal(connect_as_nobody(daemon_.socket), EACCES);
}

/* One barrier timeout: something for the daemon to write to its file. */
static void report_incident(void)
{
  hr_client *c = open_client("incident");
  hr_incident_detail d = {1, 2, 3, 4, 5, 6, -1};
  hr_status st;

  assert_int_equal(hr_report(c, NULL, HR_INCIDENT_BARRIER_TIMEOUT, &d,
                             "permissions test"), HR_OK);
  /* A request sent after that reply is read in a later turn of the
   * daemon's loop, after the turn that saved the report. */
  assert_int_equal(th_status(daemon_.socket, &st), 0);
  hr_status_free(&st);
  hr_client_close(c);
}

static void test_state_file_mode(void **state)
{
  char file[400], tmp[400], victim[400], *text;
  struct stat st;
  (void)state;

  assert_int_equal(th_daemon_start(&daemon_, NULL), 0);
  snprintf(file, sizeof(file), "%s/state.json", daemon_.state_dir);
  snprintf(tmp, sizeof(tmp), "%s/state.json.tmp", daemon_.state_dir);
  snprintf(victim, sizeof(victim), "%s/victim", daemon_.dir);

  /* The folder the daemon made: others may read, only it may write. */
  assert_int_equal(stat(daemon_.state_dir, &st), 0);
  assert_true(S_ISDIR(st.st_mode));
  assert_int_equal(st.st_mode & 0777, 0755);
  assert_int_equal(st.st_uid, geteuid());

  report_incident();
  assert_int_equal(lstat(file, &st), 0);
  assert_true(S_ISREG(st.st_mode));
  assert_int_equal(st.st_mode & 0777 & ~0644, 0);  /* no write for others */
  assert_int_equal(st.st_mode & 0600, 0600);
  assert_int_equal(st.st_uid, geteuid());
  assert_int_equal(access(tmp, F_OK), -1);         /* nothing left over */

  /* A link planted at the temporary name must not be followed: the file
   * it points at stays as it was, and the state is still saved. */
  th_file_write(victim, "precious\n");
  assert_int_equal(symlink(victim, tmp), 0);
  report_incident();
  text = th_file_read(victim);
  assert_string_equal(text, "precious\n");
  free(text);
  assert_int_equal(lstat(file, &st), 0);
  assert_true(S_ISREG(st.st_mode));
  text = th_file_read(file);
  assert_non_null(strstr(text, "permissions test"));
  free(text);
  assert_int_equal(lstat(tmp, &st), -1);
}

/* ---- per-client limits ----------------------------------------------------- */

static void test_footprint_and_lease_limits(void **state)
{
  hr_client *a, *b;
  hr_comm *m[4];
  hr_lease *l[3];
  th_raw r;
  int i;
  (void)state;

  assert_int_equal(th_daemon_start(&daemon_, "max_comms_per_client = 3\n"
                                   "max_leases_per_client = 2\n"), 0);
  a = open_client("greedy");
  b = open_client("modest");
  for(i = 0; i < 3; i++)
    assert_int_equal(hr_comm_register(a, 0, "c", 1, 1, 1, &m[i]), HR_OK);
  assert_int_equal(hr_comm_register(a, 1, "c", 1, 1, 1, &m[3]), HR_ELIMIT);
  for(i = 0; i < 2; i++)
    assert_int_equal(hr_lease_acquire(a, i, 2, HR_MODE_HEADROOM, &l[i]),
                     HR_OK);
  assert_int_equal(hr_lease_acquire(a, 0, 2, HR_MODE_HEADROOM, &l[2]),
                   HR_ELIMIT);
  /* Per client: another one is not counted against a's. */
  assert_int_equal(hr_comm_register(b, 0, "c", 1, 1, 1, NULL), HR_OK);
  assert_int_equal(hr_lease_acquire(b, 0, 2, HR_MODE_HEADROOM, &l[2]), HR_OK);
  /* Giving one back makes room again. */
  assert_int_equal(hr_comm_unregister(m[0]), HR_OK);
  assert_int_equal(hr_comm_register(a, 1, "c", 1, 1, 1, &m[0]), HR_OK);
  assert_int_equal(hr_lease_release(l[0]), HR_OK);
  assert_int_equal(hr_lease_acquire(a, 1, 2, HR_MODE_HEADROOM, &l[0]), HR_OK);

  /* On the wire: limit_exceeded, naming the config key. */
  assert_int_equal(th_raw_open(&r, daemon_.socket), 0);
  for(i = 0; i < 3; i++) {
    hr_reply rep;
    send_line(&r, "{\"id\":%d,\"type\":\"lease\",\"gpu\":0,\"cluster\":2,"
              "\"mode\":\"headroom\"}", 10 + i);
    assert_int_equal(th_raw_reply(&r, &rep, 3000), 0);
    if(i < 2) {
      assert_int_equal(rep.type, HR_MSG_LEASE);
    } else {
      assert_int_equal(rep.type, HR_MSG_ERROR);
      assert_int_equal(rep.u.error.code, HR_WERR_LIMIT_EXCEEDED);
      assert_true(rep.id == 12);
      assert_non_null(strstr(rep.u.error.message, "max_leases_per_client"));
    }
  }
  th_raw_close(&r);
  hr_client_close(a);
  hr_client_close(b);
}

static void test_max_clients(void **state)
{
  th_raw r[5];
  char line[512];
  hr_reply rep;
  hr_proto_error err;
  long n;
  int i;
  (void)state;

  assert_int_equal(th_daemon_start(&daemon_, "max_clients = 4\n"), 0);
  for(i = 0; i < 4; i++)
    assert_int_equal(th_raw_open(&r[i], daemon_.socket), 0);
  /* The fifth is told why, then closed. */
  assert_int_equal(th_raw_connect(&r[4], daemon_.socket), 0);
  n = th_raw_read_line(&r[4], line, sizeof(line), 3000);
  assert_true(n > 0);
  assert_int_equal(hr_proto_decode_reply(line, (size_t)n, &rep, &err), HR_OK);
  assert_int_equal(rep.type, HR_MSG_ERROR);
  assert_int_equal(rep.u.error.code, HR_WERR_LIMIT_EXCEEDED);
  assert_true(rep.id == -1);
  assert_non_null(strstr(rep.u.error.message, "max_clients"));
  assert_int_equal(th_raw_read_line(&r[4], line, sizeof(line), 3000), -1);
  th_raw_close(&r[4]);
  /* One leaves: there is room again. */
  th_raw_close(&r[0]);
  usleep(100 * 1000);
  assert_int_equal(th_raw_open(&r[0], daemon_.socket), 0);
  for(i = 0; i < 4; i++)
    th_raw_close(&r[i]);
}

/* Send `n` policy_get requests with ids from `id0` in one write; count
 * the replies served and refused (each refusal checked: limit_exceeded
 * with the request's id). Stops early at EOF; returns the replies read. */
static int burst(th_raw *r, int id0, int n, int *served, int *refused,
                 int *cut)
{
  static char buf[64 * 1024];
  size_t len = 0;
  int i, got = 0;

  for(i = 0; i < n; i++)
    len += (size_t)snprintf(buf + len, sizeof(buf) - len,
                            "{\"id\":%d,\"type\":\"policy_get\"}\n", id0 + i);
  if(th_raw_send(r, buf, len))
    return 0;           /* already cut off */
  *served = *refused = *cut = 0;
  for(i = 0; i < n; i++) {
    hr_reply rep;
    if(th_raw_reply(r, &rep, 3000))
      break;
    got++;
    assert_true(rep.id == id0 + i);
    if(rep.type == HR_MSG_POLICY_GET) {
      (*served)++;
      continue;
    }
    assert_int_equal(rep.type, HR_MSG_ERROR);
    assert_int_equal(rep.u.error.code, HR_WERR_LIMIT_EXCEEDED);
    assert_non_null(strstr(rep.u.error.message, "max_messages_per_second"));
    (*refused)++;
    if(strstr(rep.u.error.message, "disconnecting"))
      *cut = 1;
  }
  return got;
}

static void test_message_rate(void **state)
{
  hr_client *bystander;
  hr_lease *l;
  th_raw r;
  char line[256];
  int served, refused, cut, i, got;
  long long t0;
  (void)state;

  assert_int_equal(th_daemon_start(&daemon_, "max_messages_per_second = 50\n"
                                   "max_message_burst = 20\n"), 0);
  bystander = open_client("bystander");
  assert_int_equal(hr_lease_acquire(bystander, 0, 2, HR_MODE_HEADROOM, &l),
                   HR_OK);

  /* hello took one of the 20: 19 served, the rest refused, and the
   * connection stays open (a refill may add one while the burst is read). */
  assert_int_equal(th_raw_open(&r, daemon_.socket), 0);
  got = burst(&r, 100, 30, &served, &refused, &cut);
  assert_int_equal(got, 30);
  assert_in_range(served, 19, 21);
  assert_int_equal(served + refused, 30);
  assert_int_equal(cut, 0);

  /* A rate, not a count: 75 messages at 40 a second are all served. */
  usleep(500 * 1000);
  t0 = th_now_ms();
  for(i = 0; i < 75; i++) {
    hr_reply rep;
    long long due = t0 + i * 25;
    while(th_now_ms() < due)
      usleep(1000);
    send_line(&r, "{\"id\":%d,\"type\":\"policy_get\"}", 200 + i);
    assert_int_equal(th_raw_reply(&r, &rep, 3000), 0);
    if(rep.type != HR_MSG_POLICY_GET)
      fail_msg("message %d at 40/s was refused: %s", i,
               rep.type == HR_MSG_ERROR ? rep.u.error.message : "?");
  }

  /* A flood that does not stop: the burst is served, then refusals, and
   * past max_message_burst refusals in a row the daemon hangs up. */
  got = burst(&r, 1000, 200, &served, &refused, &cut);
  assert_in_range(served, 1, 21);
  assert_int_equal(refused, 21);
  assert_int_equal(cut, 1);
  assert_int_equal(got, served + refused);
  assert_int_equal(th_raw_read_line(&r, line, sizeof(line), 3000), -1);
  th_raw_close(&r);
  usleep(100 * 1000);
  assert_true(log_has("flooding: 21 messages in a row over "
                      "max_messages_per_second (50)"));

  /* Nobody else noticed. */
  assert_int_equal(hr_comm_register(bystander, 0, "dp", 2, 1, 1, NULL), HR_OK);
  assert_int_equal(hr_lease_degraded(l), 0);
  hr_client_close(bystander);
}

/* ---- slow readers ---------------------------------------------------------- */

/* Send `n` status requests (ids from `id0`) in one write. */
static void send_statuses(th_raw *r, int id0, int n)
{
  char *buf = malloc((size_t)n * 40);
  size_t len = 0;
  int i;

  assert_non_null(buf);
  for(i = 0; i < n; i++)
    len += (size_t)sprintf(buf + len, "{\"id\":%d,\"type\":\"status\"}\n",
                           id0 + i);
  assert_int_equal(th_raw_send(r, buf, len), 0);
  free(buf);
}

/* A client that reads late gets every reply, whole and in order, however
 * the daemon had to split its writes; one that never reads is cut off
 * past write_queue_max, alone, with the reason logged. */
static void test_slow_and_stalled_readers(void **state)
{
  hr_client *bystander;
  hr_lease *l;
  th_raw slow, stalled;
  char line[4096];
  int i;
  long n;
  (void)state;

  assert_int_equal(th_daemon_start(&daemon_, "max_messages_per_second = 0\n"
                                   "write_queue_max = 256K\n"), 0);
  bystander = open_client("bystander");
  assert_int_equal(hr_lease_acquire(bystander, 0, 2, HR_MODE_HEADROOM, &l),
                   HR_OK);

  /* About 300 KiB of replies: more than the socket buffers hold, less
   * than the queue cap. */
  assert_int_equal(th_raw_open(&slow, daemon_.socket), 0);
  send_statuses(&slow, 1, 250);
  usleep(300 * 1000);
  for(i = 1; i <= 250; i++) {
    hr_reply rep;
    assert_int_equal(th_raw_reply(&slow, &rep, 3000), 0);
    if(rep.type != HR_MSG_STATUS || rep.id != i)
      fail_msg("reply %d: type %d, id %lld", i, rep.type, (long long)rep.id);
    hr_reply_free(&rep);
  }
  th_raw_close(&slow);

  /* Ten times the cap, never read. */
  assert_int_equal(th_raw_open(&stalled, daemon_.socket), 0);
  send_statuses(&stalled, 1, 2500);
  usleep(500 * 1000);
  do
    n = th_raw_read_line(&stalled, line, sizeof(line), 3000);
  while(n >= 0);
  assert_int_equal(n, -1);                  /* closed, not timed out */
  th_raw_close(&stalled);
  assert_true(log_has("over write_queue_max (262144)"));
  assert_int_equal(hr_comm_register(bystander, 1, "dp", 2, 1, 1, NULL), HR_OK);
  assert_int_equal(hr_lease_degraded(l), 0);
  hr_client_close(bystander);
}

/* ---- ownership ------------------------------------------------------------- */

static void test_only_own_footprints_and_leases(void **state)
{
  hr_client *a;
  hr_comm *m;
  hr_lease *l;
  hr_status st;
  th_raw r;
  uint32_t e0;
  int id, i;
  (void)state;

  assert_int_equal(th_daemon_start(&daemon_, NULL), 0);
  a = open_client("owner");
  assert_int_equal(hr_comm_register(a, 0, "dp", 4, 1, 2, &m), HR_OK);
  assert_int_equal(hr_lease_acquire(a, 0, 2, HR_MODE_HEADROOM, &l), HR_OK);
  e0 = hr_lease_epoch(l);
  assert_int_equal(hr_lease_grid(l), 116);

  /* Another client tries every id a daemon this young can have given. */
  assert_int_equal(th_raw_open(&r, daemon_.socket), 0);
  for(i = 1, id = 10; i <= 20; i++) {
    send_line(&r, "{\"id\":%d,\"type\":\"unregister_comm\",\"comm\":%d}",
              id, i);
    expect_error(&r, id++, HR_WERR_NOT_FOUND);
    send_line(&r, "{\"id\":%d,\"type\":\"release\",\"lease\":%d}", id, i);
    expect_error(&r, id++, HR_WERR_NOT_FOUND);
  }
  th_raw_close(&r);

  /* All of a's is still there, unchanged, and a was never told otherwise. */
  assert_int_equal(th_status(daemon_.socket, &st), 0);
  assert_int_equal(st.gpus[0].n_comms, 1);
  assert_int_equal(st.gpus[0].comms[0].ctas, 4);
  assert_int_equal(st.gpus[0].comms[0].concurrent, 2);
  assert_int_equal(st.gpus[0].n_leases, 1);
  assert_int_equal(st.gpus[0].leases[0].cluster, 2);
  hr_status_free(&st);
  assert_int_equal(hr_lease_epoch(l), e0);
  assert_int_equal(hr_lease_grid(l), 116);
  /* Its owner still can. */
  assert_int_equal(hr_comm_unregister(m), HR_OK);
  assert_int_equal(hr_lease_release(l), HR_OK);
  assert_int_equal(th_status(daemon_.socket, &st), 0);
  assert_int_equal(st.gpus[0].n_comms, 0);
  assert_int_equal(st.gpus[0].n_leases, 0);
  hr_status_free(&st);
  hr_client_close(a);
}

int main(void)
{
  const struct CMUnitTest tests[] = {
    cmocka_unit_test_teardown(test_socket_mode, teardown),
    cmocka_unit_test_teardown(test_state_file_mode, teardown),
    cmocka_unit_test_teardown(test_footprint_and_lease_limits, teardown),
    cmocka_unit_test_teardown(test_max_clients, teardown),
    cmocka_unit_test_teardown(test_message_rate, teardown),
    cmocka_unit_test_teardown(test_slow_and_stalled_readers, teardown),
    cmocka_unit_test_teardown(test_only_own_footprints_and_leases, teardown),
  };
  signal(SIGPIPE, SIG_IGN);
  return cmocka_run_group_tests_name("limits", tests, NULL, NULL);
}
