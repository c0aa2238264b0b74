/*
 * harness.c: a real headroomd on a temporary socket (see harness.h).
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "hr_clock.h"
#include "headroom.h"

long long th_now_ms(void)
{
  return hr__clock_ms();
}

const char *th_build_dir(void)
{
  const char *b = getenv("HEADROOM_BUILD");
  return b && *b ? b : "build";
}

static int write_file(const char *path, const char *text)
{
  FILE *f = fopen(path, "w");
  if(!f)
    return -1;
  fputs(text, f);
  return fclose(f) ? -1 : 0;
}

static int wait_listening(const char *path, int timeout_ms)
{
  long long end = th_now_ms() + timeout_ms;
  th_raw r;

  while(th_now_ms() < end) {
    if(th_raw_connect(&r, path) == 0) {
      th_raw_close(&r);
      return 0;
    }
    usleep(20 * 1000);
  }
  return -1;
}

static pid_t spawn_daemon(hr_daemon *d)
{
  char bin[512];
  pid_t pid;

  snprintf(bin, sizeof(bin), "%s/bin/headroomd", th_build_dir());
  pid = fork();
  if(pid == 0) {
    int fd = open(d->log, O_WRONLY | O_CREAT | O_APPEND, 0644);
    if(fd >= 0) {
      dup2(fd, 2);
      close(fd);
    }
    execl(bin, bin, "--config", d->config, "--socket", d->socket,
          "--state-dir", d->state_dir, "--log-level", "debug", (char *)NULL);
    fprintf(stderr, "exec %s: %s\n", bin, strerror(errno));
    _exit(127);
  }
  return pid;
}

int th_daemon_start(hr_daemon *d, const char *extra)
{
  char conf[2048];

  memset(d, 0, sizeof(*d));
  snprintf(d->dir, sizeof(d->dir), "/tmp/hr-test-XXXXXX");
  if(!mkdtemp(d->dir))
    return -1;
  /* Other users (the non-operator test) must reach the socket. */
  chmod(d->dir, 0755);
  snprintf(d->socket, sizeof(d->socket), "%s/h.sock", d->dir);
  snprintf(d->config, sizeof(d->config), "%s/headroomd.conf", d->dir);
  snprintf(d->state_dir, sizeof(d->state_dir), "%s/state", d->dir);
  snprintf(d->log, sizeof(d->log), "%s/daemon.log", d->dir);
  snprintf(conf, sizeof(conf),
           "# integration test configuration\n"
           "topology = config\n"
           "gpus = 2\n"
           "sms = 132\n"
           "socket_mode = 0666\n"
           "%s\n", extra ? extra : "");
  if(write_file(d->config, conf))
    return -1;
  return th_daemon_restart(d);
}

int th_daemon_restart(hr_daemon *d)
{
  d->pid = spawn_daemon(d);
  if(d->pid < 0)
    return -1;
  if(wait_listening(d->socket, 5000)) {
    th_daemon_dump_log(d);
    return -1;
  }
  return 0;
}

int th_daemon_stop(hr_daemon *d)
{
  int status, i;

  if(d->pid <= 0)
    return -1;
  kill(d->pid, SIGTERM);
  for(i = 0; i < 500; i++) {
    if(waitpid(d->pid, &status, WNOHANG) == d->pid) {
      d->pid = 0;
      return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    }
    usleep(10 * 1000);
  }
  th_daemon_kill(d);
  return -1;
}

void th_daemon_kill(hr_daemon *d)
{
  if(d->pid > 0) {
    kill(d->pid, SIGKILL);
    waitpid(d->pid, NULL, 0);
    d->pid = 0;
  }
}

void th_daemon_cleanup(hr_daemon *d)
{
  char cmd[400];

  th_daemon_kill(d);
  if(d->dir[0] && strncmp(d->dir, "/tmp/hr-test-", 13) == 0) {
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", d->dir);
    if(system(cmd) != 0)
      fprintf(stderr, "could not remove %s\n", d->dir);
  }
}

void th_daemon_dump_log(const hr_daemon *d)
{
  char line[1024];
  FILE *f = fopen(d->log, "r");

  if(!f)
    return;
  fprintf(stderr, "---- %s\n", d->log);
  while(fgets(line, sizeof(line), f))
    fputs(line, stderr);
  fprintf(stderr, "----\n");
  fclose(f);
}

int th_daemon_log_has(const hr_daemon *d, const char *needle)
{
  char buf[65536];
  FILE *f = fopen(d->log, "r");
  size_t n;

  if(!f)
    return 0;
  n = fread(buf, 1, sizeof(buf) - 1, f);
  fclose(f);
  buf[n] = '\0';
  return strstr(buf, needle) != NULL;
}

int th_daemon_log_count(const hr_daemon *d, const char *needle)
{
  char line[4096];
  FILE *f = fopen(d->log, "r");
  int n = 0;

  if(!f)
    return 0;
  while(fgets(line, sizeof(line), f))
    n += strstr(line, needle) != NULL;
  fclose(f);
  return n;
}

/* ---- raw connections ----------------------------------------------------- */

int th_raw_connect(th_raw *r, const char *path)
{
  struct sockaddr_un sa;

  r->len = 0;
  r->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if(r->fd < 0)
    return -1;
  memset(&sa, 0, sizeof(sa));
  sa.sun_family = AF_UNIX;
  snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
  if(connect(r->fd, (struct sockaddr *)&sa, sizeof(sa))) {
    close(r->fd);
    r->fd = -1;
    return -1;
  }
  return 0;
}

void th_raw_close(th_raw *r)
{
  if(r->fd >= 0)
    close(r->fd);
  r->fd = -1;
}

int th_raw_send(th_raw *r, const void *data, size_t len)
{
  const char *p = data;

  while(len) {
    ssize_t n = send(r->fd, p, len, MSG_NOSIGNAL);
    if(n < 0 && errno == EINTR)
      continue;
    if(n <= 0)
      return -1;
    p += n;
    len -= (size_t)n;
  }
  return 0;
}

int th_raw_send_str(th_raw *r, const char *s)
{
  return th_raw_send(r, s, strlen(s));
}

int th_raw_send_line(th_raw *r, const char *fmt, ...)
{
  char line[4096];
  va_list ap;
  int n;

  va_start(ap, fmt);
  n = vsnprintf(line, sizeof(line) - 1, fmt, ap);
  va_end(ap);
  if(n < 0 || (size_t)n >= sizeof(line) - 1)
    return -1;
  line[n++] = '\n';
  return th_raw_send(r, line, (size_t)n);
}

long th_raw_read_line(th_raw *r, char *out, size_t cap, int timeout_ms)
{
  long long end = th_now_ms() + timeout_ms;

  for(;;) {
    char *nl = memchr(r->buf, '\n', r->len);
    struct pollfd pfd;
    ssize_t n;
    long left;

    if(nl) {
      size_t line = (size_t)(nl - r->buf);
      size_t copy = line < cap - 1 ? line : cap - 1;
      memcpy(out, r->buf, copy);
      out[copy] = '\0';
      memmove(r->buf, nl + 1, r->len - line - 1);
      r->len -= line + 1;
      return (long)copy;
    }
    if(r->len == sizeof(r->buf))
      return -1;
    left = (long)(end - th_now_ms());
    if(left <= 0)
      return -2;
    pfd.fd = r->fd;
    pfd.events = POLLIN;
    if(poll(&pfd, 1, (int)left) <= 0)
      continue;
    n = recv(r->fd, r->buf + r->len, sizeof(r->buf) - r->len, 0);
    if(n <= 0)
      return -1;
    r->len += (size_t)n;
  }
}

int th_raw_reply(th_raw *r, hr_reply *rep, int timeout_ms)
{
  static char line[HR_PROTO_MAX_LINE + 1];
  hr_proto_error err;
  long n;

  for(;;) {
    n = th_raw_read_line(r, line, sizeof(line), timeout_ms);
    if(n < 0)
      return (int)n;
    if(hr_proto_decode_reply(line, (size_t)n, rep, &err)) {
      fprintf(stderr, "undecodable reply: %s (%s)\n", line, err.message);
      return -3;
    }
    if(rep->type == HR_MSG_BUDGET || rep->type == HR_MSG_SHUTDOWN) {
      hr_reply_free(rep);
      continue;
    }
    return 0;
  }
}

int th_raw_request(th_raw *r, const hr_request *req, hr_reply *rep)
{
  hr_buf b;
  int err;

  hr_buf_init(&b, HR_PROTO_MAX_LINE);
  err = hr_proto_encode_request(req, &b);
  if(!err)
    err = th_raw_send(r, b.data, b.len);
  hr_buf_free(&b);
  if(err)
    return -1;
  return th_raw_reply(r, rep, 5000);
}

int th_raw_lease(th_raw *r, int64_t id, int gpu, int cluster, hr_mode mode,
                 hr_reply *rep)
{
  hr_request req;

  memset(&req, 0, sizeof(req));
  req.type = HR_MSG_LEASE;
  req.id = id;
  req.u.lease.gpu = gpu;
  req.u.lease.cluster = cluster;
  req.u.lease.mode = mode;
  return th_raw_request(r, &req, rep);
}

int th_raw_open(th_raw *r, const char *path)
{
  hr_request req;
  hr_reply rep;
  int err;

  if(th_raw_connect(r, path))
    return -1;
  memset(&req, 0, sizeof(req));
  req.type = HR_MSG_HELLO;
  req.id = 1;
  req.u.hello.n_versions = 1;
  req.u.hello.versions[0] = HR_PROTO_VERSION;
  snprintf(req.u.hello.client, sizeof(req.u.hello.client), "harness");
  err = th_raw_request(r, &req, &rep);
  if(err || rep.type != HR_MSG_HELLO) {
    th_raw_close(r);
    return -1;
  }
  hr_reply_free(&rep);
  return 0;
}

/* One request of `type` (no arguments) over a fresh connection, so that
 * no test's own connection is counted for it; 0 with a reply of that
 * type in `rep`, -1 otherwise (nothing left to free). */
static int fresh_request(const char *path, hr_msg_type type, hr_reply *rep)
{
  th_raw r;
  hr_request req;
  int err;

  if(th_raw_open(&r, path))
    return -1;
  memset(&req, 0, sizeof(req));
  req.type = type;
  req.id = 2;
  err = th_raw_request(&r, &req, rep);
  th_raw_close(&r);
  if(err)
    return -1;
  if(rep->type != type) {
    hr_reply_free(rep);
    return -1;
  }
  return 0;
}

int th_status(const char *path, hr_status *st)
{
  hr_reply rep;

  if(fresh_request(path, HR_MSG_STATUS, &rep))
    return -1;
  *st = rep.u.status;         /* ownership of the arrays moves to st */
  return 0;
}

int th_metrics(const char *path, hr_metrics *m)
{
  hr_reply rep;

  if(fresh_request(path, HR_MSG_METRICS, &rep))
    return -1;
  *m = rep.u.metrics;         /* all in the struct: nothing to free */
  return 0;
}

int th_run(char *const argv[], const char *out_path, int timeout_ms)
{
  long long end = th_now_ms() + timeout_ms;
  int status;
  pid_t pid = fork();

  if(pid < 0)
    return -1;
  if(pid == 0) {
    if(out_path) {
      int fd = open(out_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if(fd >= 0) {
        dup2(fd, 1);
        close(fd);
      }
    }
    execv(argv[0], argv);
    _exit(127);
  }
  while(th_now_ms() < end) {
    if(waitpid(pid, &status, WNOHANG) == pid)
      return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    usleep(5 * 1000);
  }
  kill(pid, SIGKILL);
  waitpid(pid, NULL, 0);
  return -1;
}

int th_wait_grid(const hr_lease *l, int grid, int timeout_ms)
{
  long long end = th_now_ms() + timeout_ms;

  while(hr_lease_grid(l) != grid) {
    uint32_t e = hr_lease_epoch(l);
    if(th_now_ms() >= end)
      return -1;
    hr_lease_wait_change(l, e, 50);
  }
  return 0;
}

int th_status_validate(const char *path)
{
  char *argv[] = {"/usr/bin/python3", "tests/integration/validate_json.py",
                  "proto/status.schema.json", (char *)path, NULL};

  return th_run(argv, NULL, 20000);
}

int th_ctl_decode(const char *line, size_t n, hr_reply *rep)
{
  static const char id[] = "{\"id\":0,";
  hr_proto_error perr;
  char *text;
  int err;

  /* An id of its own would be a wire id: headroomctl must leave it out. */
  if(n < 2 || line[0] != '{' || !strncmp(line, "{\"id\"", 5))
    return -1;
  text = malloc(n + sizeof(id));
  if(!text)
    return -1;
  memcpy(text, id, sizeof(id) - 1);
  memcpy(text + sizeof(id) - 1, line + 1, n - 1);
  err = hr_proto_decode_reply(text, n + sizeof(id) - 2, rep, &perr);
  free(text);
  return err ? -1 : 0;
}
