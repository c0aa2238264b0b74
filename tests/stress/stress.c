/*
 * stress.c: many clients doing everything at once to one real headroomd,
 * over its Unix socket, for a bounded time, with client processes killed
 * at random; then exact checks of what the daemon holds.
 *
 *   stress [SECONDS [CLIENTS [WORKERS]]]   (defaults 60, 1000, 8; also
 *   $STRESS_SECONDS, $STRESS_CLIENTS, $STRESS_WORKERS, $STRESS_KILL_MS,
 *   $STRESS_RATE, $STRESS_SEED)
 *
 * WORKERS processes hold CLIENTS connections between them, each a raw
 * socket speaking the protocol through the codec (proto/), one request in
 * flight at a time. Each connection, about STRESS_RATE times a second,
 * registers or unregisters a footprint, takes or releases a lease, tries
 * to release someone else's (not_found expected), reports an incident,
 * asks for status or the policy, moves the policy's ceiling (so that the
 * budgets, saturated by so many footprints, still change), or hangs up
 * and comes back as a new client; one in twenty subscribes to every
 * budget event. Every STRESS_KILL_MS
 * (2000) the parent SIGKILLs a random worker and starts a new one.
 *
 * Then, in order, failing on the first thing that does not hold:
 *  1. quiesce: the workers stop sending; every request any surviving
 *     worker sent got exactly one reply, with the right id and an
 *     expected type or error; a killed worker lost at most the one
 *     request in flight on each of its connections;
 *  2. full load: with every connection still open, status is answered
 *     (the summary, marked truncated, when the full one is over the
 *     64 KiB line limit, as it is for 1000 clients) and its counts are
 *     those of metrics: clients, and per GPU footprints and leases by
 *     mode;
 *  3. shrink: the workers close all but a few connections (so that the
 *     full status lists them); status then lists exactly the clients
 *     left, and their footprints and leases, id for id and owner for
 *     owner, and nothing else;
 *  4. close: with every worker gone, status holds no footprint, no lease
 *     and only the asking client;
 *  5. the daemon's RSS (/proc/PID/status: VmRSS before and after, VmHWM
 *     for the peak), printed; after must be within STRESS_RSS_SLACK_KB
 *     (4096) of before.
 *
 * Bounded: the whole run is killed (daemon and workers too) by an alarm
 * at SECONDS + 120 s. Only a Unix socket in a temporary folder is used.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "hr_proto.h"

#define MAX_WORKERS 64
#define MAX_SLOTS 1024          /* connections per worker */
#define HELD 3                  /* footprints, and leases, per connection */
#define KEEP_TOTAL 48           /* connections left for the exact check */
#define INBUF HR_PROTO_MAX_LINE

enum { CMD_RUN = 0, CMD_QUIESCE, CMD_SHRINK, CMD_EXIT };

typedef struct held {
  int64_t client;
  int n_comms, n_leases;
  int64_t comms[HELD], leases[HELD];
} held;

/* One worker's page of shared memory: commands in, counts and what its
 * connections hold out. */
typedef struct wshare {
  atomic_int cmd;
  int keep;                     /* connections to keep at CMD_SHRINK */
  atomic_int quiesced, shrunk;
  int64_t sent, replies, events, unexpected;
  int64_t connects, refused, hangups, foreign;
  char why[256];                /* the first unexpected thing */
  int n_held;
  held held[MAX_SLOTS];
} wshare;

typedef enum op {
  OP_NONE = 0, OP_HELLO, OP_REGISTER, OP_UNREGISTER, OP_LEASE, OP_RELEASE,
  OP_FOREIGN, OP_REPORT, OP_STATUS, OP_POLICY, OP_SUBSCRIBE, OP_POLICY_SET
} op;

typedef struct slot {
  int fd;                       /* -1: not connected */
  int hello;
  op waiting;                   /* the request in flight */
  int64_t id, next_id;
  int64_t target;               /* the comm or lease a request names */
  int subscribed;
  long long next_ms;            /* when to act next */
  held h;
  char *in;
  size_t in_len;
} slot;

static struct {
  const char *socket;
  int seconds, clients, workers, kill_ms, rate;
  unsigned seed;
} cfg;

static hr_daemon daemon_;
static pid_t worker_pids[MAX_WORKERS];
static wshare *shares;

static int env_int(const char *name, int def)
{
  const char *s = getenv(name);
  return s && *s ? atoi(s) : def;
}

/* ---- worker ----------------------------------------------------------------- */

static void unexpected(wshare *w, const char *fmt, long long a, long long b)
{
  if(!w->unexpected++)
    snprintf(w->why, sizeof(w->why), fmt, a, b);
}

static void slot_close(slot *s)
{
  if(s->fd >= 0)
    close(s->fd);
  s->fd = -1;
  s->hello = 0;
  s->waiting = OP_NONE;
  s->subscribed = 0;
  s->in_len = 0;
  memset(&s->h, 0, sizeof(s->h));
}

static int send_req(wshare *w, slot *s, hr_request *req, op what)
{
  char buf[1024];
  hr_buf b;
  ssize_t n;
  int rc;

  hr_buf_init(&b, sizeof(buf));
  req->id = s->id = ++s->next_id;
  rc = hr_proto_encode_request(req, &b);
  if(rc) {
    hr_buf_free(&b);
    unexpected(w, "encode failed (%lld, %lld)", rc, what);
    return -1;
  }
  n = send(s->fd, b.data, b.len, MSG_NOSIGNAL);
  if(n != (ssize_t)b.len) {
    /* One small request in flight never fills a socket buffer; a daemon
     * that hung up on us is caught at the read. */
    if(n < 0 && (errno == EPIPE || errno == ECONNRESET)) {
      unexpected(w, "the daemon hung up (op %lld, errno %lld)", what, errno);
      slot_close(s);
    } else {
      unexpected(w, "short send %lld of %lld", n, (long long)b.len);
    }
    hr_buf_free(&b);
    return -1;
  }
  hr_buf_free(&b);
  s->waiting = what;
  w->sent++;
  return 0;
}

static void slot_connect(wshare *w, slot *s)
{
  struct sockaddr_un sa;
  hr_request req;

  s->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if(s->fd < 0)
    return;
  memset(&sa, 0, sizeof(sa));
  sa.sun_family = AF_UNIX;
  snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", cfg.socket);
  if(connect(s->fd, (struct sockaddr *)&sa, sizeof(sa))) {
    /* EAGAIN: the listen backlog is full; try again soon. */
    close(s->fd);
    s->fd = -1;
    return;
  }
  w->connects++;
  s->next_id = 0;
  memset(&req, 0, sizeof(req));
  req.type = HR_MSG_HELLO;
  req.u.hello.n_versions = 1;
  req.u.hello.versions[0] = HR_PROTO_VERSION;
  snprintf(req.u.hello.client, sizeof(req.u.hello.client), "stress %d",
           (int)getpid());
  send_req(w, s, &req, OP_HELLO);
}

static void act(wshare *w, slot *s, int index, unsigned *seed)
{
  hr_request req;
  int r = (int)(rand_r(seed) % 100);

  memset(&req, 0, sizeof(req));
  if(index % 20 == 0 && !s->subscribed) {
    /* One client in twenty watches every budget change. */
    req.type = HR_MSG_SUBSCRIBE;
    req.u.subscribe.gpu = -1;
    send_req(w, s, &req, OP_SUBSCRIBE);
  } else if(r < 20 || (r < 40 && !s->h.n_comms)) {
    if(s->h.n_comms >= HELD)
      goto unregister;
    req.type = HR_MSG_REGISTER_COMM;
    req.u.register_comm.gpu = (int)(rand_r(seed) % 2);
    snprintf(req.u.register_comm.name, sizeof(req.u.register_comm.name),
             "c%d", index);
    req.u.register_comm.ctas = 1 + (int)(rand_r(seed) % 4);
    req.u.register_comm.cga = 1;
    req.u.register_comm.concurrent = 1 + (int)(rand_r(seed) % 2);
    send_req(w, s, &req, OP_REGISTER);
  } else if(r < 40) {
unregister:
    s->target = s->h.comms[rand_r(seed) % (unsigned)s->h.n_comms];
    req.type = HR_MSG_UNREGISTER_COMM;
    req.u.unregister_comm.comm = s->target;
    send_req(w, s, &req, OP_UNREGISTER);
  } else if(r < 60 || (r < 80 && !s->h.n_leases)) {
    if(s->h.n_leases >= HELD)
      goto release;
    req.type = HR_MSG_LEASE;
    req.u.lease.gpu = (int)(rand_r(seed) % 2);
    req.u.lease.cluster = 1 << (rand_r(seed) % 3);
    req.u.lease.mode = HR_MODE_HEADROOM;
    send_req(w, s, &req, OP_LEASE);
  } else if(r < 80) {
release:
    s->target = s->h.leases[rand_r(seed) % (unsigned)s->h.n_leases];
    req.type = HR_MSG_RELEASE;
    req.u.release.lease = s->target;
    send_req(w, s, &req, OP_RELEASE);
  } else if(r < 85) {
    /* Someone else's lease or footprint, or nobody's: never ours. */
    int64_t id = 1 + (int64_t)(rand_r(seed) % 100000);
    int i;
    for(i = 0; i < s->h.n_leases; i++)
      if(s->h.leases[i] == id)
        id = -id;
    for(i = 0; i < s->h.n_comms; i++)
      if(s->h.comms[i] == id)
        id = -id;
    if(id < 0)
      return;
    if(rand_r(seed) % 2) {
      req.type = HR_MSG_RELEASE;
      req.u.release.lease = id;
    } else {
      req.type = HR_MSG_UNREGISTER_COMM;
      req.u.unregister_comm.comm = id;
    }
    w->foreign++;
    send_req(w, s, &req, OP_FOREIGN);
  } else if(r < 87) {
    req.type = HR_MSG_REPORT;
    req.u.report.gpu = (int)(rand_r(seed) % 2);
    req.u.report.kind = HR_INCIDENT_LAUNCH_FAILURE;
    memset(&req.u.report.detail, -1, sizeof(req.u.report.detail));
    req.u.report.detail.cuda_error = 2;
    send_req(w, s, &req, OP_REPORT);
  } else if(r < 88) {
    req.type = HR_MSG_STATUS;
    send_req(w, s, &req, OP_STATUS);
  } else if(r < 89) {
    /* Hundreds of footprints keep every budget at its ceiling; moving
     * the ceiling changes every GPU's budget, and the subscribers hear. */
    req.type = HR_MSG_POLICY_SET;
    req.u.policy_set.fields = HR_POLICY_MAX_HEADROOM;
    req.u.policy_set.policy.max_headroom = rand_r(seed) % 2 ? 32 : 48;
    send_req(w, s, &req, OP_POLICY_SET);
  } else if(r < 95) {
    req.type = HR_MSG_POLICY_GET;
    send_req(w, s, &req, OP_POLICY);
  } else {
    /* Gone, and back later as a new client. */
    w->hangups++;
    slot_close(s);
  }
}

static void drop_id(int64_t *ids, int *n, int64_t id)
{
  int i;
  for(i = 0; i < *n; i++) {
    if(ids[i] == id) {
      ids[i] = ids[--*n];
      return;
    }
  }
}

/* One message for slot `s`: an event, or the reply to its request. */
static void on_message(wshare *w, slot *s, hr_reply *rep)
{
  op what = s->waiting;
  int err = rep->type == HR_MSG_ERROR ? (int)rep->u.error.code : -1;

  if(rep->type == HR_MSG_BUDGET) {
    if(!s->subscribed)
      unexpected(w, "a budget event on an unsubscribed client (%lld, %lld)",
                 s->h.client, 0);
    w->events++;
    return;
  }
  if(what == OP_NONE || rep->id != s->id) {
    unexpected(w, "a reply to id %lld while waiting for %lld", rep->id,
               what == OP_NONE ? -1 : s->id);
    return;
  }
  w->replies++;
  s->waiting = OP_NONE;
  switch(what) {
  case OP_HELLO:
    if(err == HR_WERR_LIMIT_EXCEEDED) {
      w->refused++;
      slot_close(s);
      return;
    }
    if(rep->type != HR_MSG_HELLO)
      break;
    s->hello = 1;
    s->h.client = rep->u.hello.client;
    return;
  case OP_REGISTER:
    if(rep->type != HR_MSG_REGISTER_COMM)
      break;
    s->h.comms[s->h.n_comms++] = rep->u.register_comm.comm;
    return;
  case OP_UNREGISTER:
    if(rep->type != HR_MSG_UNREGISTER_COMM)
      break;
    drop_id(s->h.comms, &s->h.n_comms, s->target);
    return;
  case OP_LEASE:
    if(rep->type != HR_MSG_LEASE)
      break;
    s->h.leases[s->h.n_leases++] = rep->u.lease.lease;
    return;
  case OP_RELEASE:
    if(rep->type != HR_MSG_RELEASE)
      break;
    drop_id(s->h.leases, &s->h.n_leases, s->target);
    return;
  case OP_FOREIGN:
    if(err == HR_WERR_NOT_FOUND)
      return;
    break;
  case OP_REPORT:
    if(rep->type == HR_MSG_REPORT)
      return;
    break;
  case OP_STATUS:
    /* Never too_large: past the line cap the daemon sends the summary,
     * and then only marked truncated (a full status was asked for). */
    if(rep->type == HR_MSG_STATUS &&
       (rep->u.status.detail == HR_STATUS_FULL || rep->u.status.truncated))
      return;
    break;
  case OP_POLICY:
    if(rep->type == HR_MSG_POLICY_GET)
      return;
    break;
  case OP_SUBSCRIBE:
    if(rep->type != HR_MSG_SUBSCRIBE)
      break;
    s->subscribed = 1;
    return;
  case OP_POLICY_SET:
    /* Root is an operator; anyone else is refused. */
    if(rep->type == HR_MSG_POLICY_SET || err == HR_WERR_PERMISSION_DENIED)
      return;
    break;
  case OP_NONE:
    break;
  }
  unexpected(w, "op %lld got reply type %lld (1000 + n: error n)", what,
             err >= 0 ? 1000 + err : (long long)rep->type);
}

static void on_readable(wshare *w, slot *s)
{
  ssize_t n;
  size_t start = 0;

  n = read(s->fd, s->in + s->in_len, INBUF - s->in_len);
  if(n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
    /* The daemon never hangs up on a client that behaves. */
    unexpected(w, "the daemon closed client %lld (waiting op %lld)",
               s->h.client, s->waiting);
    slot_close(s);
    return;
  }
  if(n < 0)
    return;
  s->in_len += (size_t)n;
  for(;;) {
    char *nl = memchr(s->in + start, '\n', s->in_len - start);
    hr_proto_error perr;
    hr_reply rep;
    if(!nl)
      break;
    memset(&rep, 0, sizeof(rep));
    if(hr_proto_decode_reply(s->in + start, (size_t)(nl - (s->in + start)),
                             &rep, &perr))
      unexpected(w, "an undecodable line from the daemon (%lld, %lld)", 0, 0);
    else
      on_message(w, s, &rep);
    hr_reply_free(&rep);
    start = (size_t)(nl - s->in) + 1;
    if(s->fd < 0)
      return;
  }
  memmove(s->in, s->in + start, s->in_len - start);
  s->in_len -= start;
  if(s->in_len == INBUF) {
    unexpected(w, "a line over 64 KiB from the daemon (%lld, %lld)", 0, 0);
    slot_close(s);
  }
}

static void worker_main(wshare *w, int first, int n, unsigned seed)
{
  struct pollfd *pfd = calloc((size_t)n, sizeof(*pfd));
  slot *slots = calloc((size_t)n, sizeof(*slots));
  int period = 1000 / (cfg.rate > 0 ? cfg.rate : 1);
  int i;

  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if(!pfd || !slots)
    _exit(2);
  for(i = 0; i < n; i++) {
    slots[i].fd = -1;
    slots[i].in = malloc(INBUF);
    if(!slots[i].in)
      _exit(2);
    slots[i].next_ms = th_now_ms() + (long long)(rand_r(&seed) % 1000);
  }
  for(;;) {
    int cmd = atomic_load(&w->cmd);
    long long now = th_now_ms();
    int busy = 0, np = 0, kept;

    for(i = 0; i < n; i++) {
      slot *s = &slots[i];
      if(cmd != CMD_RUN || now < s->next_ms || s->waiting != OP_NONE)
        continue;
      if(s->fd < 0)
        slot_connect(w, s);
      else if(s->hello)
        act(w, s, first + i, &seed);
      s->next_ms = now + 1 + (long long)(rand_r(&seed) % (unsigned)(2 * period));
    }
    for(i = 0; i < n; i++) {
      if(slots[i].waiting != OP_NONE)
        busy++;
      if(slots[i].fd >= 0) {
        pfd[np].fd = slots[i].fd;
        pfd[np].events = POLLIN;
        pfd[np].revents = 0;
        np++;
      }
    }
    if(cmd >= CMD_QUIESCE && !busy)
      atomic_store(&w->quiesced, 1);
    if(cmd == CMD_SHRINK && !atomic_load(&w->shrunk)) {
      for(i = 0, kept = 0; i < n; i++) {
        if(slots[i].fd >= 0 && slots[i].hello && kept < w->keep)
          w->held[kept++] = slots[i].h;
        else
          slot_close(&slots[i]);
      }
      w->n_held = kept;
      atomic_store(&w->shrunk, 1);
      continue;
    }
    if(cmd == CMD_EXIT) {
      for(i = 0; i < n; i++)
        slot_close(&slots[i]);
      _exit(0);
    }
    if(poll(pfd, (nfds_t)np, 10) <= 0)
      continue;
    for(i = 0; i < np; i++) {
      int j;
      if(!pfd[i].revents)
        continue;
      for(j = 0; j < n && slots[j].fd != pfd[i].fd; j++)
        ;
      if(j < n)
        on_readable(w, &slots[j]);
    }
  }
}

/* Connections of worker `k`. */
static int worker_slots(int k)
{
  int per = cfg.clients / cfg.workers;
  return k == cfg.workers - 1 ? cfg.clients - per * k : per;
}

static void start_worker(int k, unsigned seed)
{
  int per = cfg.clients / cfg.workers;
  int n = worker_slots(k);
  wshare *w = &shares[k];
  pid_t pid;

  memset(w, 0, sizeof(*w));
  pid = fork();
  if(pid < 0) {
    perror("fork");
    exit(1);
  }
  if(pid == 0)
    worker_main(w, k * per, n, seed);
  worker_pids[k] = pid;
}

/* ---- parent ---------------------------------------------------------------- */

/* A line of /proc/PID/status in KiB: "VmRSS:" now, "VmHWM:" the peak. */
static long proc_kb(pid_t pid, const char *key)
{
  char path[64], line[256];
  size_t n = strlen(key);
  long kb = -1;
  FILE *f;

  snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
  f = fopen(path, "r");
  if(!f)
    return -1;
  while(fgets(line, sizeof(line), f))
    if(!strncmp(line, key, n))
      kb = atol(line + n);
  fclose(f);
  return kb;
}

static void on_alarm(int sig)
{
  int k;
  (void)sig;
  for(k = 0; k < MAX_WORKERS; k++)
    if(worker_pids[k] > 0)
      kill(worker_pids[k], SIGKILL);
  if(daemon_.pid > 0)
    kill(daemon_.pid, SIGKILL);
  _exit(3);
}

static int failures;

static void check(int ok, const char *what)
{
  if(!ok) {
    failures++;
    printf("FAIL: %s\n", what);
  }
}

/* Wait until every live worker has set the flag at `field`. */
static int wait_workers(size_t field, int timeout_ms)
{
  long long end = th_now_ms() + timeout_ms;
  int k, all;

  do {
    all = 1;
    for(k = 0; k < cfg.workers; k++)
      all &= atomic_load((atomic_int *)((char *)&shares[k] + field)) != 0;
    if(all)
      return 0;
    usleep(5000);
  } while(th_now_ms() < end);
  return -1;
}

static void command_all(int cmd)
{
  int k;
  for(k = 0; k < cfg.workers; k++)
    atomic_store(&shares[k].cmd, cmd);
}

static int cmp_pair(const void *a, const void *b)
{
  const int64_t *x = a, *y = b;
  if(x[0] != y[0])
    return x[0] < y[0] ? -1 : 1;
  return x[1] < y[1] ? -1 : x[1] > y[1];
}

/* With every connection open and quiet: status is answered, and what it
 * counts is what metrics counts, asked on the same connection. */
static void check_full_load(void)
{
  hr_request req;
  hr_reply met, st;
  th_raw r;
  int g, m, same = 1;

  if(th_raw_open(&r, daemon_.socket)) {
    check(0, "a connection at full load");
    return;
  }
  memset(&req, 0, sizeof(req));
  req.type = HR_MSG_METRICS;
  req.id = 2;
  if(th_raw_request(&r, &req, &met) || met.type != HR_MSG_METRICS) {
    check(0, "metrics at full load");
    th_raw_close(&r);
    return;
  }
  req.type = HR_MSG_STATUS;
  req.id = 3;
  if(th_raw_request(&r, &req, &st) || st.type != HR_MSG_STATUS) {
    check(0, "status at full load is a status (never too_large)");
    th_raw_close(&r);
    return;
  }
  th_raw_close(&r);
  printf("full load: status is %s%s, %d clients (metrics: %d)\n",
         st.u.status.detail == HR_STATUS_SUMMARY ? "the summary" : "full",
         st.u.status.truncated ? ", truncated" : "",
         st.u.status.client_count, met.u.metrics.clients);
  if(cfg.clients >= 1000)
    check(st.u.status.detail == HR_STATUS_SUMMARY && st.u.status.truncated,
          "status of 1000 clients is the summary, marked truncated");
  check(st.u.status.client_count == met.u.metrics.clients,
        "status counts the clients metrics counts");
  for(g = 0; g < st.u.status.n_gpus && g < met.u.metrics.n_gpus; g++) {
    const hr_status_gpu *sg = &st.u.status.gpus[g];
    const hr_metrics_gpu *mg = &met.u.metrics.gpus[g];
    same &= sg->comm_count == mg->comms && sg->n_clients == mg->clients;
    for(m = 0; m < HR_MODE_COUNT; m++)
      same &= sg->lease_count[m] == mg->leases[m];
  }
  check(same && st.u.status.n_gpus == met.u.metrics.n_gpus,
        "status counts per GPU the footprints and leases metrics counts");
  hr_reply_free(&st);
  hr_reply_free(&met);
}

/* Status against what the workers kept: exactly the same clients,
 * footprints and leases (id and owner), nothing else. */
static void check_exact(void)
{
  static int64_t want_c[KEEP_TOTAL * HELD * 2][2], got_c[4096][2];
  static int64_t want_l[KEEP_TOTAL * HELD * 2][2], got_l[4096][2];
  int nwc = 0, ngc = 0, nwl = 0, ngl = 0, clients = 0, k, i, g;
  hr_status st;

  for(k = 0; k < cfg.workers; k++) {
    for(i = 0; i < shares[k].n_held; i++) {
      const held *h = &shares[k].held[i];
      int j;
      clients++;
      for(j = 0; j < h->n_comms; j++) {
        want_c[nwc][0] = h->comms[j];
        want_c[nwc++][1] = h->client;
      }
      for(j = 0; j < h->n_leases; j++) {
        want_l[nwl][0] = h->leases[j];
        want_l[nwl++][1] = h->client;
      }
    }
  }
  if(th_status(daemon_.socket, &st)) {
    check(0, "status after the load dropped");
    return;
  }
  for(g = 0; g < st.n_gpus; g++) {
    for(i = 0; i < st.gpus[g].n_comms && ngc < 4096; i++) {
      got_c[ngc][0] = st.gpus[g].comms[i].id;
      got_c[ngc++][1] = st.gpus[g].comms[i].client;
    }
    for(i = 0; i < st.gpus[g].n_leases && ngl < 4096; i++) {
      got_l[ngl][0] = st.gpus[g].leases[i].id;
      got_l[ngl++][1] = st.gpus[g].leases[i].client;
    }
  }
  printf("exact check: %d clients kept, holding %d footprints and %d "
         "leases; status lists %d clients (with the asking one), %d "
         "footprints, %d leases\n", clients, nwc, nwl, st.n_clients, ngc,
         ngl);
  check(st.n_clients == clients + 1, "status lists exactly the clients kept");
  qsort(want_c, (size_t)nwc, sizeof(want_c[0]), cmp_pair);
  qsort(got_c, (size_t)ngc, sizeof(got_c[0]), cmp_pair);
  qsort(want_l, (size_t)nwl, sizeof(want_l[0]), cmp_pair);
  qsort(got_l, (size_t)ngl, sizeof(got_l[0]), cmp_pair);
  check(nwc == ngc && !memcmp(want_c, got_c, sizeof(want_c[0]) * (size_t)nwc),
        "the daemon's footprints are exactly the live clients' (id, owner)");
  check(nwl == ngl && !memcmp(want_l, got_l, sizeof(want_l[0]) * (size_t)nwl),
        "the daemon's leases are exactly the live clients' (id, owner)");
  hr_status_free(&st);
}

int main(int argc, char **argv)
{
  long rss_before, rss_peak, rss_after, slack;
  long long start, end, next_kill;
  int64_t sent = 0, replies = 0, events = 0, connects = 0, refused = 0;
  int64_t hangups = 0, foreign = 0, dead_sent = 0, live_sent = 0;
  int64_t dead_unanswered = 0;
  int64_t live_unanswered = 0;
  int kills = 0, k, keep, status;
  struct rlimit rl;
  char extra[256];
  hr_status st;
  unsigned seed;

  cfg.seconds = argc > 1 ? atoi(argv[1]) : env_int("STRESS_SECONDS", 60);
  cfg.clients = argc > 2 ? atoi(argv[2]) : env_int("STRESS_CLIENTS", 1000);
  cfg.workers = argc > 3 ? atoi(argv[3]) : env_int("STRESS_WORKERS", 8);
  cfg.kill_ms = env_int("STRESS_KILL_MS", 2000);
  cfg.rate = env_int("STRESS_RATE", 5);
  cfg.seed = (unsigned)env_int("STRESS_SEED", 1);
  slack = env_int("STRESS_RSS_SLACK_KB", 4096);
  if(cfg.seconds < 1 || cfg.workers < 1 || cfg.workers > MAX_WORKERS ||
     cfg.clients < cfg.workers || cfg.clients / cfg.workers > MAX_SLOTS - 1) {
    fprintf(stderr, "usage: stress [SECONDS [CLIENTS [WORKERS]]] "
            "(WORKERS <= %d, CLIENTS/WORKERS < %d)\n", MAX_WORKERS, MAX_SLOTS);
    return 2;
  }
  seed = cfg.seed;
  signal(SIGPIPE, SIG_IGN);
  signal(SIGALRM, on_alarm);
  alarm((unsigned)cfg.seconds + 120);

  /* Room for every connection, in the daemon and in each worker. */
  if(!getrlimit(RLIMIT_NOFILE, &rl)) {
    rlim_t want = (rlim_t)cfg.clients + 256;
    if(rl.rlim_max != RLIM_INFINITY && rl.rlim_max < want && geteuid() == 0)
      rl.rlim_max = want;
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
    getrlimit(RLIMIT_NOFILE, &rl);
    if(rl.rlim_cur < (rlim_t)cfg.clients + 128) {
      printf("FAIL: open file limit %llu is too low for %d clients\n",
             (unsigned long long)rl.rlim_cur, cfg.clients);
      return 1;
    }
  }
  /* Every connection is of this one uid: the per-uid limits (tenant.h)
   * are lifted to the daemon's, or they, not the load, would decide. */
  snprintf(extra, sizeof(extra), "max_clients = %d\nmax_clients_per_uid = "
           "%d\nreserved_clients = 0\nmax_comms_per_uid = 1048576\n"
           "max_comm_ctas_per_uid = 1048576\nlog_level = warning\n",
           cfg.clients + 64, cfg.clients + 64);
  if(th_daemon_start(&daemon_, extra)) {
    printf("FAIL: cannot start headroomd\n");
    return 1;
  }
  cfg.socket = daemon_.socket;
  shares = mmap(NULL, sizeof(wshare) * MAX_WORKERS, PROT_READ | PROT_WRITE,
                MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if(shares == MAP_FAILED) {
    perror("mmap");
    return 1;
  }
  usleep(200 * 1000);
  rss_before = proc_kb(daemon_.pid, "VmRSS:");
  printf("stress: %d clients in %d worker processes for %d s, ~%d requests "
         "a second each, a worker killed every %d ms (seed %u)\n",
         cfg.clients, cfg.workers, cfg.seconds, cfg.rate, cfg.kill_ms,
         cfg.seed);
  fflush(stdout);

  for(k = 0; k < cfg.workers; k++)
    start_worker(k, seed + (unsigned)k * 7919u);
  start = th_now_ms();
  end = start + cfg.seconds * 1000LL;
  next_kill = start + cfg.kill_ms;
  while(th_now_ms() < end) {
    if(cfg.kill_ms > 0 && th_now_ms() >= next_kill) {
      k = (int)(rand_r(&seed) % (unsigned)cfg.workers);
      kill(worker_pids[k], SIGKILL);
      waitpid(worker_pids[k], &status, 0);
      sent += shares[k].sent;
      replies += shares[k].replies;
      events += shares[k].events;
      connects += shares[k].connects;
      dead_sent += shares[k].sent;
      dead_unanswered += shares[k].sent - shares[k].replies;
      /* Killed mid-run: at most the one request in flight on each of its
       * connections can have gone unanswered. */
      if(shares[k].sent - shares[k].replies > worker_slots(k)) {
        printf("FAIL: killed worker %d: %lld requests unanswered, more than "
               "its %d connections\n", k,
               (long long)(shares[k].sent - shares[k].replies),
               worker_slots(k));
        failures++;
      }
      if(shares[k].unexpected)
        printf("FAIL: killed worker %d had seen: %s (%lld times)\n", k,
               shares[k].why, (long long)shares[k].unexpected);
      failures += shares[k].unexpected > 0;
      start_worker(k, seed + (unsigned)kills * 104729u);
      kills++;
      next_kill += cfg.kill_ms;
    }
    usleep(50 * 1000);
  }

  /* 1. quiesce */
  command_all(CMD_QUIESCE);
  check(!wait_workers(offsetof(wshare, quiesced), 10000),
        "every worker's requests answered within 10 s of the load stopping");
  for(k = 0; k < cfg.workers; k++) {
    wshare *w = &shares[k];
    sent += w->sent;
    replies += w->replies;
    events += w->events;
    connects += w->connects;
    refused += w->refused;
    hangups += w->hangups;
    foreign += w->foreign;
    live_sent += w->sent;
    live_unanswered += w->sent - w->replies;
    if(w->sent != w->replies)
      printf("FAIL: worker %d sent %lld requests and got %lld replies\n", k,
             (long long)w->sent, (long long)w->replies);
    failures += w->sent != w->replies;
    if(w->unexpected)
      printf("FAIL: worker %d: %s (%lld times)\n", k, w->why,
             (long long)w->unexpected);
    failures += w->unexpected > 0;
  }
  printf("load: %lld requests, %.0f a second; %lld budget events pushed; "
         "%lld connections made (%lld refused), %lld hang-ups, %lld "
         "attempts on others' ids, %d workers killed\n",
         (long long)sent, (double)sent * 1000.0 / (double)(th_now_ms() - start),
         (long long)events, (long long)connects, (long long)refused,
         (long long)hangups, (long long)foreign, kills);
  printf("unanswered: %lld of the %lld requests of workers that lived to the "
         "end; %lld of the %lld of killed workers (in flight when killed, at "
         "most one per connection)\n", (long long)live_unanswered,
         (long long)live_sent, (long long)dead_unanswered,
         (long long)dead_sent);

  /* 2. status at full load */
  check_full_load();

  /* 3. shrink and compare exactly */
  keep = KEEP_TOTAL / cfg.workers;
  if(keep < 1)
    keep = 1;
  for(k = 0; k < cfg.workers; k++)
    shares[k].keep = keep;
  command_all(CMD_SHRINK);
  check(!wait_workers(offsetof(wshare, shrunk), 10000), "workers shrank");
  usleep(500 * 1000);
  check_exact();

  /* 4. everyone gone */
  command_all(CMD_EXIT);
  for(k = 0; k < cfg.workers; k++) {
    waitpid(worker_pids[k], &status, 0);
    worker_pids[k] = 0;
  }
  usleep(500 * 1000);
  if(th_status(daemon_.socket, &st) == 0) {
    int comms = 0, leases = 0, g;
    for(g = 0; g < st.n_gpus; g++) {
      comms += st.gpus[g].n_comms;
      leases += st.gpus[g].n_leases;
    }
    printf("after: status lists %d clients, %d footprints, %d leases\n",
           st.n_clients, comms, leases);
    check(st.n_clients == 1 && comms == 0 && leases == 0,
          "nothing left once every client is gone");
    hr_status_free(&st);
  } else {
    check(0, "status after every client left");
  }

  /* 5. memory */
  rss_after = proc_kb(daemon_.pid, "VmRSS:");
  rss_peak = proc_kb(daemon_.pid, "VmHWM:");
  printf("daemon RSS: before %ld KiB, peak %ld KiB, after %ld KiB "
         "(after - before: %+ld KiB, allowed %ld)\n", rss_before, rss_peak,
         rss_after, rss_after - rss_before, slack);
  check(rss_after >= 0 && rss_after - rss_before <= slack,
        "the daemon's memory is back near where it started");
  check(kill(daemon_.pid, 0) == 0, "the daemon is still running");
  check(th_daemon_stop(&daemon_) == 0, "the daemon stops cleanly (exit 0)");
  if(failures)
    th_daemon_dump_log(&daemon_);
  th_daemon_cleanup(&daemon_);
  printf("%s: %d check%s failed\n", failures ? "FAIL" : "ok", failures,
         failures == 1 ? "" : "s");
  return failures ? 1 : 0;
}
