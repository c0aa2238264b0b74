/*
 * bench_broker.c: request round trips against a server on a Unix socket,
 * from N concurrent connections, one request in flight on each (as
 * redis-benchmark runs, with no pipelining). One thread, poll() over the
 * connections, so the load generator is the same for both servers:
 *
 *   bench_broker headroom SOCKET CLIENTS SECONDS
 *       hello on each connection, then lease and release in turn (GPU 0,
 *       cluster 2: the budget does not change, so no event and no save)
 *   bench_broker redis SOCKET CLIENTS SECONDS
 *       SET hr:<n> 1 and DEL hr:<n> in turn (a small write, then its undo)
 *   bench_broker hold SOCKET CLIENTS SECONDS
 *       CLIENTS headroom connections, each with hello, a footprint and a
 *       lease; prints "ready" once all are held, holds them SECONDS, exits
 *       (for the daemon's RSS with that many clients)
 *
 * Prints one line: the server, clients, requests a second, and the
 * latency of the first request of each pair (lease; SET) at p50, p99 and
 * p99.9 in microseconds, then the same over all requests:
 *   headroom clients 16 rps 84512 lease_us 170.2 201.5 260.1 all_us ...
 *
 * The lease id a release needs is read from the reply with a scan for
 * "lease":; one reply in 256 is also decoded with the protocol's codec
 * and checked, and the run fails on any mismatch or error reply.
 */
#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "hr_clock.h"
#include "hr_proto.h"

#define WARMUP_MS 500
#define MAX_CLIENTS 4096
#define INBUF 8192

typedef struct conn {
  int fd;
  int phase;                    /* 0: first of the pair next, 1: second */
  int hello;
  int64_t lease;
  uint64_t sent_ns;
  char in[INBUF];
  size_t in_len;
  char key[32];
} conn;

static int redis;
static const char *sock_path;

static void die(const char *what)
{
  fprintf(stderr, "bench_broker: %s\n", what);
  exit(1);
}

/* Latencies in ns, appended; sorted once at the end. */
typedef struct samples {
  uint64_t *v;
  size_t n, cap;
} samples;

static void add(samples *s, uint64_t x)
{
  if(s->n == s->cap) {
    s->cap = s->cap ? s->cap * 2 : 1 << 20;
    s->v = realloc(s->v, s->cap * sizeof(*s->v));
    if(!s->v)
      die("out of memory");
  }
  s->v[s->n++] = x;
}

static int cmp_u64(const void *a, const void *b)
{
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

static double pct(samples *s, double p)
{
  size_t i;
  if(!s->n)
    return 0;
  i = (size_t)(p / 100.0 * (double)(s->n - 1) + 0.5);
  return (double)s->v[i] / 1000.0;
}

static void send_all(int fd, const char *p, size_t n)
{
  while(n) {
    ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
    if(w < 0 && errno == EINTR)
      continue;
    if(w <= 0)
      die("send failed");
    p += w;
    n -= (size_t)w;
  }
}

static void send_next(conn *c, int64_t *id)
{
  char buf[256];
  int n;

  if(redis) {
    if(c->phase == 0)
      n = snprintf(buf, sizeof(buf), "*3\r\n$3\r\nSET\r\n$%zu\r\n%s\r\n$1\r\n1\r\n",
                   strlen(c->key), c->key);
    else
      n = snprintf(buf, sizeof(buf), "*2\r\n$3\r\nDEL\r\n$%zu\r\n%s\r\n",
                   strlen(c->key), c->key);
  } else if(!c->hello) {
    n = snprintf(buf, sizeof(buf), "{\"id\":%lld,\"type\":\"hello\","
                 "\"versions\":[1],\"client\":\"bench\"}\n", (long long)++*id);
  } else if(c->phase == 0) {
    n = snprintf(buf, sizeof(buf), "{\"id\":%lld,\"type\":\"lease\",\"gpu\":0,"
                 "\"cluster\":2,\"mode\":\"headroom\"}\n", (long long)++*id);
  } else {
    n = snprintf(buf, sizeof(buf), "{\"id\":%lld,\"type\":\"release\","
                 "\"lease\":%lld}\n", (long long)++*id, (long long)c->lease);
  }
  c->sent_ns = (uint64_t)hr__clock_ns();
  send_all(c->fd, buf, (size_t)n);
}

/* A headroom reply: error replies fail the run; a lease reply gives the id
 * for the release. Every 256th is decoded with the codec and checked. */
static void check_headroom(conn *c, const char *line, size_t len,
                           uint64_t count)
{
  const char *p;

  if(memmem(line, len, "\"error\":", 8)) {
    fprintf(stderr, "%.*s\n", (int)len, line);
    die("the daemon answered with an error");
  }
  if(c->hello && c->phase == 0) {
    p = memmem(line, len, "\"lease\":", 8);
    if(!p)
      die("a lease reply without a lease id");
    c->lease = strtoll(p + 8, NULL, 10);
  }
  if(count % 256 == 0) {
    hr_proto_error err;
    hr_reply rep;
    hr_msg_type want = !c->hello ? HR_MSG_HELLO :
                       c->phase == 0 ? HR_MSG_LEASE : HR_MSG_RELEASE;
    if(hr_proto_decode_reply(line, len, &rep, &err) || rep.type != want ||
       (want == HR_MSG_LEASE && rep.u.lease.lease != c->lease))
      die("a reply the codec does not read as expected");
    hr_reply_free(&rep);
  }
}

static int connect_to(void)
{
  struct sockaddr_un sa;
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

  if(fd < 0)
    die("socket");
  memset(&sa, 0, sizeof(sa));
  sa.sun_family = AF_UNIX;
  snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", sock_path);
  while(connect(fd, (struct sockaddr *)&sa, sizeof(sa))) {
    if(errno != EAGAIN)
      die("connect failed");
    usleep(1000);
  }
  return fd;
}

/* One request on a blocking connection and its reply line; fails the run
 * on an error reply. */
static void call(int fd, const char *req)
{
  char buf[4096];
  size_t len = 0;

  send_all(fd, req, strlen(req));
  for(;;) {
    ssize_t r = read(fd, buf + len, sizeof(buf) - 1 - len);
    if(r <= 0)
      die("the daemon closed a held connection");
    len += (size_t)r;
    buf[len] = '\0';
    if(memchr(buf, '\n', len))
      break;
  }
  if(strstr(buf, "\"error\":")) {
    fprintf(stderr, "%s", buf);
    die("the daemon refused a held client");
  }
}

static int hold(int n, int secs)
{
  int *fds = calloc((size_t)n, sizeof(*fds));
  int i;

  if(!fds)
    die("out of memory");
  for(i = 0; i < n; i++) {
    fds[i] = connect_to();
    call(fds[i], "{\"id\":1,\"type\":\"hello\",\"versions\":[1],"
         "\"client\":\"bench hold\"}\n");
    call(fds[i], "{\"id\":2,\"type\":\"register_comm\",\"gpu\":0,"
         "\"name\":\"dp\",\"ctas\":1,\"cga\":1,\"concurrent\":1}\n");
    call(fds[i], "{\"id\":3,\"type\":\"lease\",\"gpu\":1,"
         "\"cluster\":2,\"mode\":\"headroom\"}\n");
  }
  printf("ready\n");
  fflush(stdout);
  sleep((unsigned)secs);
  for(i = 0; i < n; i++)
    close(fds[i]);
  free(fds);
  return 0;
}

int main(int argc, char **argv)
{
  samples first = {0}, all = {0};
  struct pollfd *pfd;
  conn *cs;
  uint64_t start, warm_end, end, done = 0, count = 0;
  int64_t id = 0;
  int n, secs, i;

  if(argc != 5 || (strcmp(argv[1], "headroom") && strcmp(argv[1], "redis") &&
                    strcmp(argv[1], "hold")))
    die("usage: bench_broker headroom|redis|hold SOCKET CLIENTS SECONDS");
  redis = !strcmp(argv[1], "redis");
  sock_path = argv[2];
  n = atoi(argv[3]);
  secs = atoi(argv[4]);
  if(n < 1 || n > MAX_CLIENTS || secs < 1)
    die("CLIENTS 1..4096, SECONDS >= 1");
  if(!strcmp(argv[1], "hold"))
    return hold(n, secs);
  cs = calloc((size_t)n, sizeof(*cs));
  pfd = calloc((size_t)n, sizeof(*pfd));
  if(!cs || !pfd)
    die("out of memory");
  for(i = 0; i < n; i++) {
    cs[i].fd = connect_to();
    cs[i].hello = redis;
    snprintf(cs[i].key, sizeof(cs[i].key), "hr:%d", i);
    pfd[i].fd = cs[i].fd;
    pfd[i].events = POLLIN;
  }
  for(i = 0; i < n; i++)
    send_next(&cs[i], &id);
  start = (uint64_t)hr__clock_ns();
  warm_end = start + WARMUP_MS * 1000000ull;
  end = warm_end + (uint64_t)secs * 1000000000ull;
  for(;;) {
    uint64_t t = (uint64_t)hr__clock_ns();
    if(t >= end)
      break;
    if(poll(pfd, (nfds_t)n, 100) < 0 && errno != EINTR)
      die("poll");
    for(i = 0; i < n; i++) {
      conn *c = &cs[i];
      ssize_t r;
      char *nl;

      if(!pfd[i].revents)
        continue;
      r = read(c->fd, c->in + c->in_len, INBUF - c->in_len);
      if(r <= 0)
        die("the server closed a connection");
      c->in_len += (size_t)r;
      /* One request in flight: at most one reply line is buffered. */
      nl = memchr(c->in, '\n', c->in_len);
      if(!nl)
        continue;
      t = (uint64_t)hr__clock_ns();
      if(redis) {
        if(c->in[0] == '-')
          die("redis answered with an error");
      } else {
        check_headroom(c, c->in, (size_t)(nl - c->in), count);
      }
      count++;
      if(c->hello && t >= warm_end && t < end) {
        uint64_t lat = t - c->sent_ns;
        add(&all, lat);
        if(c->phase == 0)
          add(&first, lat);
        done++;
      }
      if(c->in_len != (size_t)(nl - c->in) + 1)
        die("more than one reply buffered");
      c->in_len = 0;
      if(!c->hello)
        c->hello = 1;
      else
        c->phase ^= 1;
      send_next(c, &id);
    }
  }
  qsort(first.v, first.n, sizeof(uint64_t), cmp_u64);
  qsort(all.v, all.n, sizeof(uint64_t), cmp_u64);
  printf("%s clients %d rps %.0f first_us %.1f %.1f %.1f all_us %.1f %.1f "
         "%.1f\n", redis ? "redis" : "headroom", n,
         (double)done / (double)secs, pct(&first, 50), pct(&first, 99),
         pct(&first, 99.9), pct(&all, 50), pct(&all, 99), pct(&all, 99.9));
  for(i = 0; i < n; i++)
    close(cs[i].fd);
  free(cs);
  free(pfd);
  free(first.v);
  free(all.v);
  return 0;
}
