/*
 * fuzz_daemon.c: libFuzzer target over headroomd's message handling:
 * framing, the message rate, decode, dispatch and the per-GPU state, on
 * connections with no socket under them (conn.h, "detached"). Only the
 * socket is missing; every other line of code is the daemon's own.
 *
 * Each input is what one client sends, fed to a fresh daemon with two GPUs
 * where another client (B) already holds a footprint and a lease and is
 * subscribed to every GPU. The same bytes are fed twice: to client A (an
 * operator) in one read, then to client C (not an operator) in reads of 1
 * to 13 bytes, so that lines split across reads take the buffered path.
 *
 * Besides what the sanitizers catch, every input must keep these, or the
 * target aborts (a crash libFuzzer saves):
 *  - every line the daemon writes decodes with the protocol's decoder;
 *  - a client that was not disconnected got exactly one reply per line;
 *  - the state holds exactly the footprints and leases that the live
 *    clients' own counts say they hold, and none of a closed client;
 *  - B's footprint and lease are untouched by A and C;
 *  - once every client is gone, the state holds no footprint and no lease.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sanitizer/common_interface_defs.h>

#include "conn.h"
#include "daemon.h"
#include "dispatch.h"
#include "log.h"
#include "state.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

#define SINK_CAP (4u * 1024 * 1024)

static const char b_setup[] =
  "{\"id\":1,\"type\":\"hello\",\"versions\":[1],\"client\":\"bystander\"}\n"
  "{\"id\":2,\"type\":\"register_comm\",\"gpu\":0,\"name\":\"dp\","
  "\"ctas\":4,\"cga\":1,\"concurrent\":2}\n"
  "{\"id\":3,\"type\":\"lease\",\"gpu\":0,\"cluster\":2,\"mode\":\"headroom\"}\n"
  "{\"id\":4,\"type\":\"subscribe\"}\n";

/* Through the sanitizer's report channel: the target's own stderr is
 * closed under -close_fd_mask=2, the reports' channel is not. */
static void die(const char *what)
{
  char line[256];

  snprintf(line, sizeof(line), "fuzz_daemon: invariant broken: %s", what);
  __sanitizer_report_error_summary(line);
  abort();
}

static void daemon_init(hr__daemon *d)
{
  int g;

  memset(d, 0, sizeof(*d));
  hr__config_default(&d->cfg);
  /* Small limits, so that inputs reach them. */
  d->cfg.max_comms_per_client = 4;
  d->cfg.max_leases_per_client = 4;
  d->cfg.max_message_burst = 64;
  d->topo.source = HR_TOPO_CONFIG;
  d->topo.n_gpus = 2;
  for(g = 0; g < 2; g++) {
    d->topo.gpus[g].index = g;
    d->topo.gpus[g].sms = 132;
  }
  /* GPU 0 splits like an H200, GPU 1 not at all: partition leases reach
   * both the grant and the refusal. */
  d->granularity[0] = 8;
  d->granularity[1] = 0;
  hr_buf_init(&d->out, HR_PROTO_MAX_LINE);
  if(hr__state_init(&d->state, &d->topo, d->granularity, &d->cfg.policy))
    die("state init");
  /* As hr__daemon_start sets them: raises leave out the reporter's uid,
   * and one uid raises a GPU once per interval. */
  d->state.uid_of = hr__dispatch_uid_of;
  d->state.uid_ctx = d;
  d->state.raise_interval_ms =
    (int64_t)d->cfg.incident_raise_interval * 1000;
}

static void daemon_free(hr__daemon *d)
{
  hr__state_free(&d->state);
  hr__daemon_free_owned(d);
}

/* Decode every line of `sink`; returns the replies (not events). */
static int count_replies(const hr_buf *sink)
{
  const char *p, *end;
  int replies = 0;

  if(!sink->len)
    return 0;
  p = sink->data;
  end = p + sink->len;

  while(p < end) {
    const char *nl = memchr(p, '\n', (size_t)(end - p));
    hr_proto_error err;
    hr_reply rep;

    if(!nl)
      die("the daemon wrote a line without its newline");
    if(hr_proto_decode_reply(p, (size_t)(nl - p), &rep, &err)) {
      fprintf(stderr, "undecodable: %.*s\n(%s)\n", (int)(nl - p), p,
              err.message);
      die("the daemon wrote a line its own decoder refuses");
    }
    if(rep.type != HR_MSG_BUDGET && rep.type != HR_MSG_SHUTDOWN)
      replies++;
    hr_reply_free(&rep);
    p = nl + 1;
  }
  return replies;
}

static int is_blank(const uint8_t *p, size_t n)
{
  size_t i;

  for(i = 0; i < n; i++)
    if(p[i] != ' ' && p[i] != '\t' && p[i] != '\r')
      return 0;
  return 1;
}

/* The replies a client that stays connected must get: one per line that
 * is not blank, the last one too when it lacks its '\n' (served at EOF). */
static int lines_in(const uint8_t *data, size_t size)
{
  size_t start = 0, i;
  int n = 0;

  for(i = 0; i <= size; i++) {
    if(i < size && data[i] != '\n')
      continue;
    if(!is_blank(data + start, i - start))
      n++;
    start = i + 1;
  }
  return n;
}

/* The state against the clients' own counts: nothing more, nothing less. */
static void check_state(hr__daemon *d)
{
  int64_t comms = 0, leases = 0;
  hr__conn *c;
  int g, i;

  for(c = d->conns; c; c = c->next) {
    int64_t mine_c = 0, mine_l = 0;
    for(g = 0; g < d->state.n_gpus; g++) {
      const hr__gpu *gp = hr__state_gpu(&d->state, g);
      for(i = 0; i < gp->n_comms; i++)
        mine_c += gp->comms[i].client == c->id;
      for(i = 0; i < gp->n_leases; i++)
        mine_l += gp->leases[i].client == c->id;
    }
    if(c->closing && (mine_c || mine_l))
      die("a closed client still holds a footprint or a lease");
    if(!c->closing && (mine_c != c->n_comms || mine_l != c->n_leases))
      die("a client's footprints or leases differ from its counts");
    comms += mine_c;
    leases += mine_l;
  }
  for(g = 0; g < d->state.n_gpus; g++) {
    comms -= hr__state_gpu(&d->state, g)->n_comms;
    leases -= hr__state_gpu(&d->state, g)->n_leases;
  }
  if(comms || leases)
    die("the state holds footprints or leases of no client");
}

static void check_bystander(hr__daemon *d, const hr__conn *b)
{
  const hr__gpu *g0 = hr__state_gpu(&d->state, 0);

  /* B can only lose them by being disconnected (its events unread past
   * write_queue_max), never to another client's request. */
  if(b->closing)
    return;
  if(g0->n_comms < 1 || g0->comms[0].id != 1 || g0->comms[0].client != b->id)
    die("another client removed B's footprint");
  if(g0->comms[0].ctas != 4 || g0->comms[0].concurrent != 2)
    die("another client changed B's footprint");
  if(g0->n_leases < 1 || g0->leases[0].id != 1 ||
     g0->leases[0].client != b->id || g0->leases[0].cluster != 2)
    die("another client removed or changed B's lease");
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
  (void)argc;
  (void)argv;
  /* Every log line is formatted (client names and messages go through
   * it); run with -close_fd_mask=2 to keep them off the terminal. */
  hr__log_set_level(getenv("HR_FUZZ_QUIET") ? HR_LOG_ERR : HR_LOG_DEBUG);
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  static hr__daemon d;        /* large: per-GPU incident rings */
  hr__peer pa = {100, 0, 0}, pb = {200, 1000, 1000}, pc = {300, 1001, 1001};
  hr_buf sa, sb, sc;
  hr__conn *a, *b, *c;
  size_t off, step;
  int cut;

  daemon_init(&d);
  hr_buf_init(&sa, SINK_CAP);
  hr_buf_init(&sb, SINK_CAP);
  hr_buf_init(&sc, SINK_CAP);

  b = hr__conn_open_detached(&d, &pb, &sb);
  a = hr__conn_open_detached(&d, &pa, &sa);
  c = hr__conn_open_detached(&d, &pc, &sc);
  if(!a || !b || !c)
    die("out of memory opening clients");
  hr__conn_feed(b, b_setup, sizeof(b_setup) - 1);
  if(count_replies(&sb) != 4 || b->n_comms != 1 || b->n_leases != 1)
    die("the bystander's setup failed");
  hr_buf_reset(&sb);

  /* A: the whole input in one read. */
  hr__conn_feed(a, (const char *)data, size);
  cut = a->closing;
  hr__conn_feed_eof(a);
  check_state(&d);
  check_bystander(&d, b);
  if(!cut && count_replies(&sa) != lines_in(data, size))
    die("a line went unanswered, or got two replies");

  /* C: the same bytes in small reads. */
  for(off = 0, step = 1; off < size; off += step, step = step % 13 + 1) {
    if(step > size - off)
      step = size - off;
    hr__conn_feed(c, (const char *)data + off, step);
  }
  cut = c->closing;
  hr__conn_feed_eof(c);
  check_state(&d);
  check_bystander(&d, b);
  if(!cut && count_replies(&sc) != lines_in(data, size))
    die("a line split across reads went unanswered, or got two replies");
  count_replies(&sb);

  hr__conn_free_detached(a);
  hr__conn_free_detached(c);
  check_state(&d);
  check_bystander(&d, b);
  hr__conn_free_detached(b);
  if(d.conns || d.n_clients)
    die("a client outlived its connection");
  for(int g = 0; g < d.state.n_gpus; g++) {
    const hr__gpu *gp = hr__state_gpu(&d.state, g);
    if(gp->n_comms || gp->n_leases)
      die("footprints or leases left after every client closed");
  }
  hr_buf_free(&sa);
  hr_buf_free(&sb);
  hr_buf_free(&sc);
  daemon_free(&d);
  return 0;
}
