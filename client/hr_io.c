/*
 * hr_io.c: the client's I/O thread.
 *
 * One thread per client owns the reading side of the socket. It hands
 * replies to the requesters waiting for them, applies pushed budgets to
 * the leases before anyone can read them, and keeps the client connected:
 * when the daemon goes away it marks every lease degraded (keeping its last
 * budget, or the one computed here if that leaves more headroom), retries
 * every reconnect_ms, and on a new connection registers every footprint
 * and re-acquires every lease again (new daemon ids, same objects), so the
 * application never has to notice.
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "hr_client_int.h"
#include "hr_clock.h"

#define HANDSHAKE_MAX_MS 2000   /* connect + hello + subscribe, at most */

/* Set by dispatch when the daemon announced it is stopping; read by the
 * same thread only. */
typedef struct io_state {
  hr_client *c;
  int shutdown;
  char reason[HR_MESSAGE_MAX];
} io_state;

static int handshake_ms(const hr_client *c)
{
  return c->request_timeout_ms < HANDSHAKE_MAX_MS ? c->request_timeout_ms
                                                  : HANDSHAKE_MAX_MS;
}

/* A connection-level failure ends the resync; anything else is the
 * daemon's answer about one object. */
static int is_conn_error(int err)
{
  return err == HR_ECLOSED || err == HR_ETIMEDOUT || err == HR__EINTR ||
         err == HR_ETOOLARGE || err == HR_EPROTO || err == HR_ESHUTDOWN ||
         err == HR_ENOMEM || err == HR_EHELLO;
}

/* Handle one message from the daemon. Takes what it keeps out of `rep`
 * (the caller frees the rest); c->mu must not be held. */
static void dispatch(void *arg, hr_reply *rep)
{
  io_state *io = arg;
  hr_client *c = io->c;
  hr_request cleanup;
  hr__pending *p;
  int orphan = 0;

  memset(&cleanup, 0, sizeof(cleanup));
  pthread_mutex_lock(&c->mu);
  if(rep->type == HR_MSG_LEASE)
    hr__client_note_budget(c, &rep->u.lease.budget);
  else if(rep->type == HR_MSG_REPORT)
    hr__client_note_budget(c, &rep->u.report.budget);
  else if(rep->type == HR_MSG_BUDGET)
    hr__client_note_budget(c, &rep->u.budget);

  if(rep->type == HR_MSG_SHUTDOWN) {
    io->shutdown = 1;
    snprintf(io->reason, sizeof(io->reason), "%s", rep->u.shutdown_reason);
  }
  else if(rep->id >= 0) {
    for(p = c->pending; p; p = p->next) {
      if(p->id == rep->id)
        break;
    }
    if(p) {
      p->err = rep->type == HR_MSG_ERROR ?
               hr_wire_error_to_hr(rep->u.error.code) : HR_OK;
      p->reply = *rep;
      memset(rep, 0, sizeof(*rep));   /* the requester owns it now */
      p->done = 1;
      pthread_cond_broadcast(&c->reply_cv);
    }
    else {
      orphan = 1;
    }
  }
  pthread_mutex_unlock(&c->mu);

  /* A reply nobody waits for belongs to a request that timed out. If it
   * created something, undo it, or the daemon would count it until this
   * connection closes. */
  if(orphan && rep->type == HR_MSG_LEASE) {
    cleanup.type = HR_MSG_RELEASE;
    cleanup.u.release.lease = rep->u.lease.lease;
    hr__client_send_async(c, &cleanup);
  }
  else if(orphan && rep->type == HR_MSG_REGISTER_COMM) {
    cleanup.type = HR_MSG_UNREGISTER_COMM;
    cleanup.u.unregister_comm.comm = rep->u.register_comm.comm;
    hr__client_send_async(c, &cleanup);
  }
}

int hr__io_handle(hr_client *c, hr_reply *rep)
{
  io_state io;

  memset(&io, 0, sizeof(io));
  io.c = c;
  dispatch(&io, rep);
  return io.shutdown;
}

/* The client has no daemon from now on, unless it had none already
 * (c->mu held): a retry that fails again changes nothing. */
static void note_down(hr_client *c)
{
  if(c->down_since_ms)
    return;
  c->down_since_ms = hr__clock_ms();
  if(!c->down_since_ms)
    c->down_since_ms = 1;       /* 0 means "has a daemon" */
}

/* Every lease back to its fallback, every daemon id forgotten, every
 * waiting request failed (c->mu held). */
static void mark_down(hr_client *c)
{
  hr__pending *p;
  hr_lease *l;
  hr_comm *m;

  c->state = HR__DOWN;
  atomic_store_explicit(&c->connected, 0, memory_order_release);
  note_down(c);
  for(p = c->pending; p; p = p->next) {
    if(!p->done) {
      p->done = 1;
      p->err = HR_ECLOSED;
    }
  }
  for(m = c->comms; m; m = m->next)
    m->daemon_id = 0;
  for(l = c->leases; l; l = l->next) {
    /* What the daemon last said for it, kept where it leaves more
     * headroom than the budget computed here (hr__lease_fallback_budget);
     * a lease the daemon never held keeps what it had. */
    if(l->daemon_id && l->gen == c->gen) {
      pthread_mutex_lock(&l->mu);
      l->kept = l->budget;
      pthread_mutex_unlock(&l->mu);
      l->have_kept = !l->kept.degraded;
      /* Epochs computed here continue above the daemon's. */
      if(c->fb_epoch[l->gpu] < l->kept.epoch)
        c->fb_epoch[l->gpu] = l->kept.epoch;
    }
    l->daemon_id = 0;
  }
  hr__client_refresh_fallback(c, -1);
  pthread_cond_broadcast(&c->reply_cv);
  pthread_cond_broadcast(&c->state_cv);
  pthread_cond_broadcast(&c->change_cv);
}

static void lose_connection(hr_client *c, const char *why)
{
  int was_up;
  pthread_mutex_lock(&c->wmu);
  c->wfd = -1;                  /* no requester may write to it any more */
  pthread_mutex_unlock(&c->wmu);
  hr__conn_close(&c->conn);
  pthread_mutex_lock(&c->mu);
  was_up = c->state == HR__UP;
  mark_down(c);
  pthread_mutex_unlock(&c->mu);
  if(was_up && !c->quiet)
    fprintf(stderr, "headroom: lost the daemon at %s (%s); until it answers, "
            "leases keep their last budget, or the one computed here if it "
            "leaves more headroom\n", c->path, why);
}

static void resync_refused(hr_client *c, const char *what, int gpu, int err)
{
  if(!c->quiet)
    fprintf(stderr, "headroom: the daemon at %s refused %s on GPU %d after "
            "reconnecting: %s\n", c->path, what, gpu, hr_strerror(err));
}

/* Register every footprint on the new connection. The lists hold still:
 * every call that changes them waits while the state is SYNCING. */
static int resync_comms(hr_client *c, io_state *io, uint64_t gen)
{
  hr_comm *m;
  for(m = c->comms; m; m = m->next) {
    hr_request req;
    hr_reply rep;
    int err;
    memset(&req, 0, sizeof(req));
    req.type = HR_MSG_REGISTER_COMM;
    req.u.register_comm.gpu = m->gpu;
    memcpy(req.u.register_comm.name, m->name, sizeof(m->name));
    req.u.register_comm.ctas = m->ctas;
    req.u.register_comm.cga = m->cga;
    req.u.register_comm.concurrent = m->concurrent;
    err = hr__conn_call(&c->conn, &req, &rep, c->request_timeout_ms,
                        dispatch, io);
    if(is_conn_error(err) || io->shutdown)
      return err ? err : HR_ESHUTDOWN;
    pthread_mutex_lock(&c->mu);
    m->gen = gen;
    m->daemon_id = err ? 0 : rep.u.register_comm.comm;
    pthread_mutex_unlock(&c->mu);
    hr_reply_free(&rep);
    if(err)
      resync_refused(c, "a footprint", m->gpu, err);
  }
  return HR_OK;
}

/* Acquire every lease again and give it the new daemon's budget. */
static int resync_leases(hr_client *c, io_state *io, uint64_t gen)
{
  hr_lease *l;
  for(l = c->leases; l; l = l->next) {
    hr_request req;
    hr_reply rep;
    int err;
    memset(&req, 0, sizeof(req));
    req.type = HR_MSG_LEASE;
    req.u.lease.gpu = l->gpu;
    req.u.lease.cluster = l->cluster;
    req.u.lease.mode = l->mode;
    err = hr__conn_call(&c->conn, &req, &rep, c->request_timeout_ms,
                        dispatch, io);
    if(is_conn_error(err) || io->shutdown)
      return err ? err : HR_ESHUTDOWN;
    pthread_mutex_lock(&c->mu);
    l->gen = gen;
    l->daemon_id = err ? 0 : rep.u.lease.lease;
    if(!err) {
      hr__client_note_budget(c, &rep.u.lease.budget);
      hr__lease_take_granted(l, &rep.u.lease.budget);
      pthread_cond_broadcast(&c->change_cv);
    }
    pthread_mutex_unlock(&c->mu);
    hr_reply_free(&rep);
    if(err)
      resync_refused(c, "a lease", l->gpu, err);
  }
  return HR_OK;
}

int hr__io_connect(hr_client *c, char *why, size_t why_len)
{
  io_state io;
  hr_rep_hello hello;
  hr_request req;
  hr_reply rep;
  uint64_t gen;
  int64_t degraded_ms;
  int err;

  memset(&io, 0, sizeof(io));
  io.c = c;
  err = hr__conn_connect(&c->conn, c->path, handshake_ms(c), why, why_len);
  if(err) {
    /* Also when there never was a daemon: hr_client_open's first try. */
    pthread_mutex_lock(&c->mu);
    note_down(c);
    pthread_mutex_unlock(&c->mu);
    return err;
  }

  pthread_mutex_lock(&c->mu);
  c->state = HR__SYNCING;
  gen = ++c->gen;
  /* One id sequence per client, whichever thread sends: the resync's
   * requests continue it, and requesters continue after them. */
  c->conn.next_id = c->next_id;
  /* The daemon counts how long its clients ran on their fallback; a
   * client that never lost one says nothing. At least 1 ms: 0 is "no". */
  degraded_ms = 0;
  if(c->down_since_ms) {
    degraded_ms = hr__clock_ms() - c->down_since_ms;
    if(degraded_ms < 1)
      degraded_ms = 1;
  }
  pthread_mutex_unlock(&c->mu);

  err = hr__conn_hello(&c->conn, c->name, degraded_ms, handshake_ms(c),
                       &hello, dispatch, &io);
  if(err)
    goto fail;
  pthread_mutex_lock(&c->mu);
  c->down_since_ms = 0;     /* reported: the next outage starts afresh */
  c->topology = hello.topology;
  c->have_topology = 1;
  memcpy(c->daemon_name, hello.daemon, sizeof(c->daemon_name));
  pthread_mutex_unlock(&c->mu);

  memset(&req, 0, sizeof(req));
  req.type = HR_MSG_SUBSCRIBE;
  req.u.subscribe.gpu = -1;
  err = hr__conn_call(&c->conn, &req, &rep, handshake_ms(c), dispatch, &io);
  if(err)
    goto fail;
  hr_reply_free(&rep);

  err = resync_comms(c, &io, gen);
  if(!err)
    err = resync_leases(c, &io, gen);
  if(!err && io.shutdown)
    err = HR_ESHUTDOWN;
  if(err)
    goto fail;

  pthread_mutex_lock(&c->wmu);
  c->wfd = c->conn.fd;
  c->wgen = gen;
  pthread_mutex_unlock(&c->wmu);
  pthread_mutex_lock(&c->mu);
  c->next_id = c->conn.next_id;
  c->state = HR__UP;
  atomic_store_explicit(&c->connected, 1, memory_order_release);
  pthread_cond_broadcast(&c->state_cv);
  pthread_mutex_unlock(&c->mu);
  return HR_OK;

fail:
  if(why && why_len)
    snprintf(why, why_len, "%s", io.shutdown ? "the daemon is shutting down"
                                             : hr_strerror(err));
  hr__conn_close(&c->conn);
  pthread_mutex_lock(&c->mu);
  mark_down(c);
  pthread_mutex_unlock(&c->mu);
  return err;
}

/* Sleep `ms` unless hr_client_close wakes us first (returns 1). */
static int nap(hr_client *c, int ms)
{
  struct pollfd p = {c->wake[0], POLLIN, 0};
  int rc;
  do
    rc = poll(&p, 1, ms);
  while(rc < 0 && errno == EINTR);
  return rc > 0;
}

static int stopping(hr_client *c)
{
  int s;
  pthread_mutex_lock(&c->mu);
  s = c->stopping;
  pthread_mutex_unlock(&c->mu);
  return s;
}

void *hr__io_main(void *arg)
{
  hr_client *c = arg;
  io_state io;
  char why[HR_MESSAGE_MAX + 32];

  memset(&io, 0, sizeof(io));
  io.c = c;
  pthread_setname_np(pthread_self(), "headroom-io");  /* for ps and gdb */
  while(!stopping(c)) {
    hr_reply rep;
    int err, state;

    pthread_mutex_lock(&c->mu);
    state = c->state;
    pthread_mutex_unlock(&c->mu);

    if(state != HR__UP) {
      if(nap(c, c->reconnect_ms))
        continue;
      if(hr__io_connect(c, why, sizeof(why)) == HR_OK && !c->quiet)
        fprintf(stderr, "headroom: connected to %s at %s\n",
                c->daemon_name[0] ? c->daemon_name : "the daemon", c->path);
      continue;
    }

    err = hr__conn_read_reply(&c->conn, -1, &rep);
    if(err == HR_EPROTO || err == HR__EINTR)
      continue;   /* a line we cannot read is skipped; EINTR: stopping */
    if(err) {
      lose_connection(c, hr_strerror(err));
      continue;
    }
    dispatch(&io, &rep);
    hr_reply_free(&rep);
    if(io.shutdown) {
      snprintf(why, sizeof(why), "shutting down%s%s",
               io.reason[0] ? ": " : "", io.reason);
      io.shutdown = 0;
      lose_connection(c, why);
    }
  }
  return NULL;
}
