/*
 * trials_sync.c: see trials_sync.h.
 */
#include "trials_sync.h"
#include "hr_clock.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* Replies hold every value of a run's results; beyond this the peer is
 * not speaking this protocol. */
#define LINE_MAX_BYTES (128u << 20)

static double now_s(void)
{
  return hr__clock_ns() / 1e9;
}

/* Both ends are sockets: send() without SIGPIPE, so that a rank that died
 * is an error here and not the end of the launcher. */
static int write_all(int fd, const char *p, size_t n)
{
  while(n > 0) {
    ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
    if(w < 0 && errno == EINTR)
      continue;
    if(w <= 0)
      return -1;
    p += w;
    n -= (size_t)w;
  }
  return 0;
}

/* Room for `more` bytes after len; -1 past the cap. */
static int reserve(char **buf, size_t *cap, size_t len, size_t more)
{
  size_t want = len + more + 1;
  char *p;

  if(want <= *cap)
    return 0;
  if(want > LINE_MAX_BYTES)
    return -1;
  if(want < 4096)
    want = 4096;
  if(want < *cap * 2)
    want = *cap * 2;
  p = realloc(*buf, want);
  if(!p)
    return -1;
  *buf = p;
  *cap = want;
  return 0;
}

/* One read into the buffer: >0 bytes, 0 at end of file, -1 on error. */
static ssize_t fill(int fd, char **buf, size_t *len, size_t *cap)
{
  ssize_t got;

  if(reserve(buf, cap, *len, 65536))
    return -1;
  do
    got = read(fd, *buf + *len, *cap - *len - 1);
  while(got < 0 && errno == EINTR);
  if(got > 0) {
    *len += (size_t)got;
    (*buf)[*len] = '\0';
  }
  return got;
}

/* Cut the first line (without its newline) off the buffer into a fresh
 * string; NULL when there is no whole line yet. */
static char *take_line(char *buf, size_t *len)
{
  char *nl = buf ? memchr(buf, '\n', *len) : NULL;
  size_t n;
  char *line;

  if(!nl)
    return NULL;
  n = (size_t)(nl - buf);
  line = malloc(n + 1);
  if(!line)
    return NULL;
  memcpy(line, buf, n);
  line[n] = '\0';
  memmove(buf, nl + 1, *len - n - 1);
  *len -= n + 1;
  buf[*len] = '\0';
  return line;
}

/* ---- rank side ---------------------------------------------------------- */

void tr_sync_init(tr_sync *s, int fd)
{
  memset(s, 0, sizeof(*s));
  s->fd = fd;
}

void tr_sync_free(tr_sync *s)
{
  if(s->fd >= 0)
    close(s->fd);
  free(s->buf);
  memset(s, 0, sizeof(*s));
  s->fd = -1;
}

int tr_sync_gather(tr_sync *s, const char *tag, const double *mine, int n,
                   double *all, char *why, size_t wn)
{
  char *out = NULL, *line = NULL, *p, *end;
  size_t olen = 0, ocap = 0;
  char rtag[TR_TAG_MAX];
  int rc = -1, i, m, used;

  if(!tag || !*tag || strlen(tag) >= TR_TAG_MAX || strpbrk(tag, " \n") ||
     n < 0 || (n > 0 && (!mine || !all))) {
    snprintf(why, wn, "bad gather arguments");
    return -1;
  }
  if(reserve(&out, &ocap, 0, TR_TAG_MAX + 32 + (size_t)n * 26))
    goto nomem;
  olen = (size_t)snprintf(out, ocap, "G %s %d", tag, n);
  for(i = 0; i < n; i++)
    olen += (size_t)snprintf(out + olen, ocap - olen, " %.17g", mine[i]);
  out[olen++] = '\n';
  if(write_all(s->fd, out, olen)) {
    snprintf(why, wn, "the launcher is gone (%s)", strerror(errno));
    goto out;
  }
  while(!(line = take_line(s->buf, &s->len))) {
    ssize_t got = fill(s->fd, &s->buf, &s->len, &s->cap);
    if(got <= 0) {
      snprintf(why, wn, "the launcher closed the channel at '%s'", tag);
      goto out;
    }
  }
  if(line[0] == 'X') {
    snprintf(why, wn, "the launcher stopped the run at '%s': %s", tag,
             line[1] ? line + 2 : "");
    goto out;
  }
  if(sscanf(line, "R %63s %d%n", rtag, &m, &used) != 2 || strcmp(rtag, tag) ||
     m != 2 * n) {
    snprintf(why, wn, "unexpected reply at '%s': %.80s", tag, line);
    goto out;
  }
  p = line + used;
  for(i = 0; i < m; i++) {
    all[i] = strtod(p, &end);
    if(end == p) {
      snprintf(why, wn, "short reply at '%s'", tag);
      goto out;
    }
    p = end;
  }
  rc = 0;
  goto out;
nomem:
  snprintf(why, wn, "out of memory");
out:
  free(out);
  free(line);
  return rc;
}

/* ---- launcher side ------------------------------------------------------ */

void tr_hub_init(tr_hub *h)
{
  memset(h, 0, sizeof(*h));
  h->r[0].fd = h->r[1].fd = -1;
}

void tr_hub_free(tr_hub *h)
{
  int i;

  for(i = 0; i < 2; i++) {
    if(h->r[i].fd >= 0)
      close(h->r[i].fd);
    free(h->r[i].buf);
    free(h->r[i].pending);
  }
  tr_hub_init(h);
}

static void say_stop(tr_hub_rank *r, const char *why)
{
  char line[300];
  int n = snprintf(line, sizeof(line), "X %s\n", why);
  if(r->fd >= 0)
    write_all(r->fd, line, (size_t)n);
  free(r->pending);
  r->pending = NULL;
}

static void kill_all(tr_hub *h, const char *why)
{
  int i;

  snprintf(h->why, sizeof(h->why), "%s", why);
  h->killed = 1;
  for(i = 0; i < 2; i++)
    if(h->r[i].pid > 0)
      kill(h->r[i].pid, SIGKILL);
}

/* Both ranks wait: answer both with the union of their values, or stop
 * both when they lost step. */
static void answer(tr_hub *h)
{
  char t0[TR_TAG_MAX], t1[TR_TAG_MAX];
  int n0, n1, u0, u1;
  char *out = NULL;
  size_t len, cap = 0;

  if(sscanf(h->r[0].pending, "G %63s %d%n", t0, &n0, &u0) != 2 ||
     sscanf(h->r[1].pending, "G %63s %d%n", t1, &n1, &u1) != 2) {
    say_stop(&h->r[0], "malformed request");
    say_stop(&h->r[1], "malformed request");
    return;
  }
  if(strcmp(t0, t1) || n0 != n1) {
    char why[200];
    snprintf(why, sizeof(why), "the ranks lost step: rank 0 at '%s' (%d), "
             "rank 1 at '%s' (%d)", t0, n0, t1, n1);
    fprintf(stderr, "launcher: %s\n", why);
    say_stop(&h->r[0], why);
    say_stop(&h->r[1], why);
    return;
  }
  len = strlen(h->r[0].pending + u0) + strlen(h->r[1].pending + u1);
  if(reserve(&out, &cap, 0, len + TR_TAG_MAX + 32)) {
    say_stop(&h->r[0], "launcher out of memory");
    say_stop(&h->r[1], "launcher out of memory");
    return;
  }
  len = (size_t)snprintf(out, cap, "R %s %d%s%s\n", t0, 2 * n0,
                         h->r[0].pending + u0, h->r[1].pending + u1);
  write_all(h->r[0].fd, out, len);
  write_all(h->r[1].fd, out, len);
  snprintf(h->last, sizeof(h->last), "%s", t0);
  free(out);
  free(h->r[0].pending);
  free(h->r[1].pending);
  h->r[0].pending = h->r[1].pending = NULL;
}

static void reap(tr_hub_rank *r)
{
  int st;
  if(r->pid > 0 && waitpid(r->pid, &st, WNOHANG) == r->pid) {
    r->status = st;
    r->pid = 0;
  }
}

int tr_hub_serve(tr_hub *h, int wait_s, int total_s)
{
  const double start = now_s();
  double stalled_since = 0;
  int i;

  for(;;) {
    struct pollfd pf[2];
    int np = 0, idx[2];
    int done = 1, stalled = 0;

    for(i = 0; i < 2; i++) {
      tr_hub_rank *r = &h->r[i];
      reap(r);
      if(r->fd >= 0 || r->pid > 0)
        done = 0;
    }
    if(done)
      break;

    for(i = 0; i < 2; i++) {
      if(!h->r[i].pending)
        h->r[i].pending = take_line(h->r[i].buf, &h->r[i].len);
      if(h->r[i].fd >= 0 && !h->r[i].pending) {
        pf[np].fd = h->r[i].fd;
        pf[np].events = POLLIN;
        idx[np++] = i;
      }
    }
    if(np > 0) {
      if(poll(pf, (nfds_t)np, 100) < 0 && errno != EINTR)
        return -1;
    } else if(!(h->r[0].pending && h->r[1].pending)) {
      usleep(20 * 1000);
    }
    for(i = 0; i < np; i++) {
      tr_hub_rank *r = &h->r[idx[i]];
      if(!(pf[i].revents & (POLLIN | POLLHUP | POLLERR)))
        continue;
      if(fill(r->fd, &r->buf, &r->len, &r->cap) <= 0) {
        close(r->fd);
        r->fd = -1;
        continue;
      }
      r->pending = take_line(r->buf, &r->len);
    }

    if(h->r[0].pending && h->r[1].pending)
      answer(h);
    for(i = 0; i < 2; i++) {
      tr_hub_rank *me = &h->r[i], *other = &h->r[1 - i];
      if(me->pending && other->fd < 0) {
        char why[120];
        snprintf(why, sizeof(why), "rank %d exited", 1 - i);
        say_stop(me, why);
      }
    }

    /* One rank waits, or has exited, while the other has not caught up. */
    for(i = 0; i < 2; i++)
      if((h->r[i].pending || h->r[i].fd < 0) &&
         (h->r[1 - i].fd >= 0 && !h->r[1 - i].pending))
        stalled = 1;
    if(!stalled) {
      stalled_since = 0;
    } else if(stalled_since == 0) {
      stalled_since = now_s();
    } else if(now_s() - stalled_since > wait_s && !h->killed) {
      char why[200];
      int late = (h->r[0].pending || h->r[0].fd < 0) ? 1 : 0;
      snprintf(why, sizeof(why), "rank %d did not catch up within %d s "
               "(the last step both reached: '%s')", late, wait_s,
               h->last[0] ? h->last : "none");
      kill_all(h, why);
    }
    if(now_s() - start > total_s && !h->killed) {
      char why[200];
      snprintf(why, sizeof(why), "the run passed its %d s limit (the last "
               "step both reached: '%s')", total_s,
               h->last[0] ? h->last : "none");
      kill_all(h, why);
    }
  }
  for(i = 0; i < 2; i++)
    if(!WIFEXITED(h->r[i].status) || WEXITSTATUS(h->r[i].status) != 0)
      return -1;
  return h->killed ? -1 : 0;
}
