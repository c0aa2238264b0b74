/*
 * hr_conn.c: a blocking, line-oriented connection to headroomd.
 *
 * Framing is the protocol's: one JSON object per '\n'-terminated line, 64
 * KiB at most, '\n' included. Input is kept in one fixed buffer of that
 * size, so a daemon that never sends a newline costs us 64 KiB, not
 * unbounded memory.
 */
#include "hr_clock.h"
#include "hr_conn.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

static int64_t deadline_after(int timeout_ms)
{
  return timeout_ms < 0 ? -1 : hr__clock_ms() + timeout_ms;
}

/* Wait until the socket is ready for `events`, the deadline passes (-1:
 * never) or intr_fd becomes readable. */
static int conn_wait(hr__conn *c, short events, int64_t deadline)
{
  for(;;) {
    struct pollfd p[2];
    nfds_t n = 1;
    int timeout = -1;
    int rc;

    if(deadline >= 0) {
      int64_t left = deadline - hr__clock_ms();
      if(left <= 0)
        return HR_ETIMEDOUT;
      timeout = left > 60000 ? 60000 : (int)left;
    }
    p[0].fd = c->fd;
    p[0].events = events;
    p[0].revents = 0;
    if(c->intr_fd >= 0) {
      p[1].fd = c->intr_fd;
      p[1].events = POLLIN;
      p[1].revents = 0;
      n = 2;
    }
    rc = poll(p, n, timeout);
    if(rc < 0) {
      if(errno == EINTR)
        continue;
      return HR_ECLOSED;
    }
    if(n == 2 && p[1].revents)
      return HR__EINTR;
    /* POLLHUP/POLLERR count as ready: the read or write that follows
     * reports what happened. */
    if(p[0].revents)
      return HR_OK;
  }
}

void hr__conn_init(hr__conn *c)
{
  memset(c, 0, sizeof(*c));
  c->fd = -1;
  c->intr_fd = -1;
  hr_buf_init(&c->out, HR_PROTO_MAX_LINE);
}

int hr__conn_connect(hr__conn *c, const char *path, int timeout_ms,
                     char *why, size_t why_len)
{
  struct sockaddr_un sa;
  int64_t deadline;
  int err = HR_OK;
  int fd = -1;

  if(why && why_len)
    why[0] = '\0';
  if(!c || !path)
    return HR_EINVAL;
  if(strlen(path) >= sizeof(sa.sun_path)) {
    if(why && why_len)
      snprintf(why, why_len, "socket path too long");
    return HR_EINVAL;
  }
  hr__conn_close(c);
  if(!c->in) {
    c->in = malloc(HR_PROTO_MAX_LINE);
    if(!c->in)
      return HR_ENOMEM;
  }

  memset(&sa, 0, sizeof(sa));
  sa.sun_family = AF_UNIX;
  memcpy(sa.sun_path, path, strlen(path) + 1);

  fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if(fd < 0) {
    err = errno == ENOMEM || errno == ENOBUFS ? HR_ENOMEM : HR_ECONNECT;
    goto fail;
  }
  c->fd = fd;
  deadline = deadline_after(timeout_ms);
  for(;;) {
    if(connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0)
      break;
    if(errno == EINTR)
      continue;
    if(errno == EAGAIN) {
      /* The listen backlog is full: the daemon is busy, not gone. */
      struct timespec nap = {0, 10 * 1000 * 1000};
      if(deadline >= 0 && hr__clock_ms() >= deadline) {
        err = HR_ETIMEDOUT;
        goto fail;
      }
      nanosleep(&nap, NULL);
      continue;
    }
    if(errno == EINPROGRESS) {
      int soerr = 0;
      socklen_t len = sizeof(soerr);
      err = conn_wait(c, POLLOUT, deadline);
      if(err)
        goto fail;
      if(getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &len) < 0)
        soerr = errno;
      if(!soerr)
        break;
      errno = soerr;
    }
    err = (errno == EACCES || errno == EPERM) ? HR_EPERM : HR_ECONNECT;
    goto fail;
  }
  return HR_OK;

fail:
  if(why && why_len && !why[0])
    snprintf(why, why_len, "%s",
             err == HR_ETIMEDOUT ? "timed out" : strerror(errno));
  hr__conn_close(c);
  return err;
}

void hr__conn_close(hr__conn *c)
{
  if(!c)
    return;
  if(c->fd >= 0)
    close(c->fd);
  c->fd = -1;
  c->in_start = c->in_len = c->in_scan = 0;
}

void hr__conn_free(hr__conn *c)
{
  if(!c)
    return;
  hr__conn_close(c);
  free(c->in);
  c->in = NULL;
  hr_buf_free(&c->out);
}

int hr__conn_set_blocking(hr__conn *c)
{
  int flags;
  if(!c || c->fd < 0)
    return HR_EINVAL;
  flags = fcntl(c->fd, F_GETFL);
  if(flags < 0 || fcntl(c->fd, F_SETFL, flags & ~O_NONBLOCK) < 0)
    return HR_ECLOSED;
  return HR_OK;
}

int hr__fd_write(int fd, const char *data, size_t len, int timeout_ms)
{
  hr__conn tmp;
  int64_t deadline;
  if(!data && len)
    return HR_EINVAL;
  if(fd < 0)
    return HR_ECLOSED;
  memset(&tmp, 0, sizeof(tmp));
  tmp.fd = fd;
  tmp.intr_fd = -1;
  deadline = deadline_after(timeout_ms);
  while(len) {
    ssize_t n = send(fd, data, len, MSG_NOSIGNAL);
    if(n > 0) {
      data += n;
      len -= (size_t)n;
      continue;
    }
    if(n < 0 && errno == EINTR)
      continue;
    if(n < 0 && errno == EAGAIN) {
      int err = conn_wait(&tmp, POLLOUT, deadline);
      if(err)
        return err;
      continue;
    }
    return HR_ECLOSED;
  }
  return HR_OK;
}

int hr__conn_write(hr__conn *c, const char *data, size_t len, int timeout_ms)
{
  if(!c)
    return HR_EINVAL;
  return hr__fd_write(c->fd, data, len, timeout_ms);
}

int hr__conn_send(hr__conn *c, const hr_request *req, int timeout_ms)
{
  int err;
  if(!c || !req)
    return HR_EINVAL;
  hr_buf_reset(&c->out);
  err = hr_proto_encode_request(req, &c->out);
  if(err)
    return err;
  return hr__conn_write(c, c->out.data, c->out.len, timeout_ms);
}

int hr__conn_read_some(hr__conn *c)
{
  ssize_t n;
  if(!c)
    return HR_EINVAL;
  if(c->fd < 0 || !c->in)
    return HR_ECLOSED;
  if(c->in_start) {
    /* Lines handed out before this call are no longer referenced. */
    memmove(c->in, c->in + c->in_start, c->in_len - c->in_start);
    c->in_len -= c->in_start;
    c->in_start = 0;
  }
  if(c->in_len >= HR_PROTO_MAX_LINE)
    return HR_ETOOLARGE;
  n = read(c->fd, c->in + c->in_len, HR_PROTO_MAX_LINE - c->in_len);
  if(n > 0) {
    c->in_len += (size_t)n;
    return HR_OK;
  }
  if(n < 0 && (errno == EAGAIN || errno == EINTR))
    return HR_OK;
  return HR_ECLOSED;
}

int hr__conn_take_line(hr__conn *c, const char **line, size_t *len)
{
  char *start, *nl;
  size_t avail;
  if(!c || !c->in)
    return 0;
  start = c->in + c->in_start;
  avail = c->in_len - c->in_start;
  nl = memchr(start + c->in_scan, '\n', avail - c->in_scan);
  if(!nl) {
    c->in_scan = avail;   /* do not search these bytes again */
    return 0;
  }
  *line = start;
  *len = (size_t)(nl - start);
  c->in_start += *len + 1;
  c->in_scan = 0;
  return 1;
}

int hr__conn_read_reply(hr__conn *c, int timeout_ms, hr_reply *rep)
{
  int64_t deadline = deadline_after(timeout_ms);
  if(!c || !rep)
    return HR_EINVAL;
  for(;;) {
    const char *line;
    size_t len;
    int err;
    if(hr__conn_take_line(c, &line, &len)) {
      hr_proto_error perr;
      memset(rep, 0, sizeof(*rep));
      err = hr_proto_decode_reply(line, len, rep, &perr);
      return err ? HR_EPROTO : HR_OK;
    }
    if(c->fd < 0)
      return HR_ECLOSED;
    err = conn_wait(c, POLLIN, deadline);
    if(err)
      return err;
    err = hr__conn_read_some(c);
    if(err)
      return err;
  }
}

int hr__conn_call(hr__conn *c, hr_request *req, hr_reply *rep,
                  int timeout_ms, hr__conn_other_cb other, void *arg)
{
  int64_t deadline = deadline_after(timeout_ms);
  int err;
  if(!c || !req || !rep)
    return HR_EINVAL;
  memset(rep, 0, sizeof(*rep));   /* type NONE unless a reply arrives */
  req->id = ++c->next_id;
  err = hr__conn_send(c, req, timeout_ms);
  if(err)
    return err;
  for(;;) {
    int left = -1;
    if(deadline >= 0) {
      int64_t l = deadline - hr__clock_ms();
      left = l > 0 ? (int)l : 0;
    }
    err = hr__conn_read_reply(c, left, rep);
    if(err == HR_EPROTO)
      continue;     /* not ours to judge: skip what we cannot read */
    if(err)
      return err;
    if(rep->id == req->id) {
      if(rep->type == HR_MSG_ERROR)
        return hr_wire_error_to_hr(rep->u.error.code);
      return HR_OK;
    }
    if(other)
      other(arg, rep);
    hr_reply_free(rep);
  }
}

int hr__conn_hello(hr__conn *c, const char *name, int64_t degraded_ms,
                   int timeout_ms, hr_rep_hello *out,
                   hr__conn_other_cb other, void *arg)
{
  hr_request req;
  hr_reply rep;
  int v, err;
  if(!c || !out)
    return HR_EINVAL;
  memset(&req, 0, sizeof(req));
  req.type = HR_MSG_HELLO;
  for(v = HR_PROTO_VERSION; v >= HR_PROTO_VERSION_MIN &&
      req.u.hello.n_versions < HR_MAX_VERSIONS; v--)
    req.u.hello.versions[req.u.hello.n_versions++] = v;
  snprintf(req.u.hello.client, sizeof(req.u.hello.client), "%s",
           name ? name : "");
  req.u.hello.degraded_ms = degraded_ms < 0 ? 0 :
                            degraded_ms > HR_PROTO_MAX_ID ?
                            HR_PROTO_MAX_ID : degraded_ms;
  err = hr__conn_call(c, &req, &rep, timeout_ms, other, arg);
  if(err)
    return err;
  if(rep.type != HR_MSG_HELLO) {
    hr_reply_free(&rep);
    return HR_EPROTO;
  }
  *out = rep.u.hello;
  hr_reply_free(&rep);
  return HR_OK;
}
