/*
 * test_systemd.c: start headroomd the way systemd does, and check that it
 * speaks the service protocols.
 *
 * Socket activation: the test binds and listens on the socket itself (as
 * headroomd.socket would), passes it as fd 3 with LISTEN_FDS=1 and
 * LISTEN_PID=<the daemon's pid>. Notification: NOTIFY_SOCKET names a
 * datagram socket of the test's, which must receive READY=1, then
 * WATCHDOG=1 (WATCHDOG_USEC is set), then STOPPING=1 on SIGTERM. The
 * socket is the "socket unit's": the daemon must leave it in place.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
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

static int unix_socket(int type, const char *path)
{
  struct sockaddr_un sa;
  int fd = socket(AF_UNIX, type, 0);

  if(fd < 0)
    return -1;
  memset(&sa, 0, sizeof(sa));
  sa.sun_family = AF_UNIX;
  snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
  if(bind(fd, (struct sockaddr *)&sa, sizeof(sa))) {
    close(fd);
    return -1;
  }
  return fd;
}

/* Collect datagrams until one contains `want` or the time is up. */
static int wait_notify(int fd, const char *want, int timeout_ms, char *all,
                       size_t cap)
{
  long long end = th_now_ms() + timeout_ms;

  while(th_now_ms() < end) {
    struct pollfd p = {fd, POLLIN, 0};
    char msg[1024];
    ssize_t n;

    if(poll(&p, 1, (int)(end - th_now_ms())) <= 0)
      continue;
    n = recv(fd, msg, sizeof(msg) - 1, 0);
    if(n <= 0)
      continue;
    msg[n] = '\0';
    if(strlen(all) + (size_t)n + 2 < cap) {
      strcat(all, msg);
      strcat(all, "|");
    }
    if(strstr(msg, want))
      return 0;
  }
  return -1;
}

static void test_socket_activation_and_notify(void **state)
{
  char dir[] = "/tmp/hr-sd-XXXXXX";
  char sock[300], notify[300], conf[300], statedir[300], bin[512];
  char seen[8192] = "";
  int lfd, nfd, status;
  long long t0;
  pid_t pid;
  hr_status st;
  FILE *f;
  (void)state;

  assert_non_null(mkdtemp(dir));
  snprintf(sock, sizeof(sock), "%s/activated.sock", dir);
  snprintf(notify, sizeof(notify), "%s/notify.sock", dir);
  snprintf(conf, sizeof(conf), "%s/headroomd.conf", dir);
  snprintf(statedir, sizeof(statedir), "%s/state", dir);
  snprintf(bin, sizeof(bin), "%s/bin/headroomd", th_build_dir());
  f = fopen(conf, "w");
  assert_non_null(f);
  /* The configured socket path is NOT where it listens: fd 3 wins. */
  fprintf(f, "topology = config\ngpus = 1\nsocket = %s/unused.sock\n", dir);
  fclose(f);

  lfd = unix_socket(SOCK_STREAM, sock);
  assert_true(lfd >= 0);
  assert_int_equal(listen(lfd, 16), 0);
  nfd = unix_socket(SOCK_DGRAM, notify);
  assert_true(nfd >= 0);

  pid = fork();
  assert_true(pid >= 0);
  if(pid == 0) {
    char pidbuf[32];
    int devnull = open("/dev/null", O_WRONLY);
    if(devnull >= 0)
      dup2(devnull, 2);
    if(dup2(lfd, 3) != 3)
      _exit(120);
    snprintf(pidbuf, sizeof(pidbuf), "%d", (int)getpid());
    setenv("LISTEN_PID", pidbuf, 1);
    setenv("LISTEN_FDS", "1", 1);
    setenv("NOTIFY_SOCKET", notify, 1);
    setenv("WATCHDOG_USEC", "200000", 1);
    execl(bin, bin, "--config", conf, "--state-dir", statedir,
          (char *)NULL);
    _exit(127);
  }
  close(lfd);

  t0 = th_now_ms();
  if(wait_notify(nfd, "READY=1", 5000, seen, sizeof(seen)))
    fail_msg("no READY=1; got: %s", seen);
  /* It serves on the activated socket, not the configured one. */
  assert_int_equal(th_status(sock, &st), 0);
  assert_int_equal(st.n_gpus, 1);
  hr_status_free(&st);
  {
    char unused[320];
    snprintf(unused, sizeof(unused), "%s/unused.sock", dir);
    assert_int_equal(access(unused, F_OK), -1);
  }
  /* Pings at half of WATCHDOG_USEC: several within a second. */
  if(wait_notify(nfd, "WATCHDOG=1", 1000, seen, sizeof(seen)))
    fail_msg("no WATCHDOG=1 within 1 s; got: %s", seen);
  assert_true(th_now_ms() - t0 < 6000);
  assert_non_null(strstr(seen, "STATUS="));

  kill(pid, SIGTERM);
  if(wait_notify(nfd, "STOPPING=1", 3000, seen, sizeof(seen)))
    fail_msg("no STOPPING=1; got: %s", seen);
  assert_int_equal(waitpid(pid, &status, 0), pid);
  assert_true(WIFEXITED(status));
  assert_int_equal(WEXITSTATUS(status), 0);
  /* The socket belongs to the socket unit: still there. */
  assert_int_equal(access(sock, F_OK), 0);

  close(nfd);
  {
    char cmd[400];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
  }
}

int main(void)
{
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_socket_activation_and_notify),
  };
  signal(SIGPIPE, SIG_IGN);
  return cmocka_run_group_tests_name("systemd", tests, NULL, NULL);
}
