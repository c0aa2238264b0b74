/*
 * hr_client.c: the client object, and how requests reach the daemon.
 *
 * Any thread may send a request: it takes an id, queues itself as pending,
 * writes its line under the write mutex and sleeps on a condition variable
 * until the I/O thread (hr_io.c), the only reader of the socket, hands it
 * the reply with that id, or the connection dies, or its time runs out.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "hr_client_int.h"
#include "hr_clock.h"

#define DEFAULT_REQUEST_TIMEOUT_MS 5000
#define DEFAULT_RECONNECT_MS 200

static int cond_init_monotonic(pthread_cond_t *cv)
{
  pthread_condattr_t a;
  int rc;
  if(pthread_condattr_init(&a))
    return HR_ENOMEM;
  pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
  rc = pthread_cond_init(cv, &a);
  pthread_condattr_destroy(&a);
  return rc ? HR_ENOMEM : HR_OK;
}

int hr__client_call_locked(hr_client *c, hr_request *req, hr_reply *rep,
                           uint64_t *genp)
{
  hr__pending p, **pp;
  struct timespec until;
  hr_buf b;
  uint64_t gen = c->gen;
  int err;

  memset(&p, 0, sizeof(p));
  p.id = req->id = ++c->next_id;
  p.next = c->pending;
  c->pending = &p;
  *genp = gen;
  pthread_mutex_unlock(&c->mu);

  hr_buf_init(&b, HR_PROTO_MAX_LINE);
  err = hr_proto_encode_request(req, &b);
  if(!err) {
    pthread_mutex_lock(&c->wmu);
    if(c->wfd < 0 || c->wgen != gen) {
      err = HR_ECLOSED;
    }
    else {
      err = hr__fd_write(c->wfd, b.data, b.len, c->request_timeout_ms);
      if(err)
        /* Make the I/O thread see the broken connection now rather than
         * at its next read. */
        shutdown(c->wfd, SHUT_RDWR);
      if(err == HR_ETIMEDOUT || err == HR__EINTR)
        err = HR_ECLOSED;
    }
    pthread_mutex_unlock(&c->wmu);
  }
  hr_buf_free(&b);

  pthread_mutex_lock(&c->mu);
  hr__clock_deadline(&until, c->request_timeout_ms);
  while(!err && !p.done) {
    if(pthread_cond_timedwait(&c->reply_cv, &c->mu, &until) == ETIMEDOUT &&
       !p.done)
      err = HR_ETIMEDOUT;
  }
  if(p.done && (!err || err == HR_ETIMEDOUT))
    err = p.err;
  for(pp = &c->pending; *pp; pp = &(*pp)->next) {
    if(*pp == &p) {
      *pp = p.next;
      break;
    }
  }
  if(p.done && !err)
    *rep = p.reply;
  else if(p.done)
    hr_reply_free(&p.reply);
  return err;
}

int hr__client_wait_settled(hr_client *c, uint64_t failed_gen)
{
  /* No time limit: a resync is a bounded number of requests, each bounded
   * by request_timeout_ms, and a failed write shuts the socket down so the
   * I/O thread notices at once. Returning early could free an object the
   * resync is still using. */
  while(!c->stopping &&
        (c->state == HR__SYNCING ||
         (c->state == HR__UP && failed_gen && c->gen == failed_gen)))
    pthread_cond_wait(&c->state_cv, &c->mu);
  return c->stopping ? HR_ECLOSED : HR_OK;
}

int hr__client_drop_remote(hr_client *c, hr_msg_type type,
                           const int64_t *daemon_id, const uint64_t *obj_gen)
{
  uint64_t failed = 0;

  for(;;) {
    hr_request req;
    hr_reply rep;
    uint64_t gen;
    int err;

    if(hr__client_wait_settled(c, failed))
      return HR_OK;
    if(c->state != HR__UP || *obj_gen != c->gen || !*daemon_id)
      return HR_OK;             /* the daemon does not hold it */
    memset(&req, 0, sizeof(req));
    req.type = type;
    if(type == HR_MSG_RELEASE)
      req.u.release.lease = *daemon_id;
    else
      req.u.unregister_comm.comm = *daemon_id;
    err = hr__client_call_locked(c, &req, &rep, &gen);
    if(err == HR_ECLOSED) {
      /* Gone with the connection; if a resync took it again, drop that
       * one too. */
      failed = gen;
      continue;
    }
    if(!err)
      hr_reply_free(&rep);
    return err;
  }
}

void hr__client_note_budget(hr_client *c, const hr_budget *b)
{
  hr_lease *l;
  int g = b->gpu;
  if(g < 0 || g >= HR_MAX_GPUS || !c->gen)
    return;
  /* The reply to an agnostic or partition lease (or to a report on one)
   * carries that lease's numbers, not the GPU's: taken for the GPU's,
   * they would hand every other lease on it headroom 0 or the comm
   * partition. The GPU's own budget comes in the events. */
  if(b->mode == HR_MODE_AGNOSTIC || b->mode == HR_MODE_PARTITION)
    return;
  /* Replies and events can describe the same epoch twice; never go back
   * to an older one. */
  if(c->gpu_budget_gen[g] == c->gen && b->epoch < c->gpu_budget[g].epoch)
    return;
  c->gpu_budget[g] = *b;
  c->gpu_budget_gen[g] = c->gen;
  for(l = c->leases; l; l = l->next) {
    if(l->gpu == g && l->daemon_id && l->gen == c->gen)
      hr__lease_set_budget(l, b);
  }
  pthread_cond_broadcast(&c->change_cv);
}

int hr__client_known_budget(hr_client *c, int gpu, hr_budget *out)
{
  if(gpu < 0 || gpu >= HR_MAX_GPUS || !c->gen ||
     c->gpu_budget_gen[gpu] != c->gen)
    return 0;
  *out = c->gpu_budget[gpu];
  return 1;
}

int hr__client_sms(hr_client *c, int gpu)
{
  int i;
  if(c->have_topology) {
    for(i = 0; i < c->topology.n_gpus; i++) {
      if(c->topology.gpus[i].index == gpu && c->topology.gpus[i].sms > 0)
        return c->topology.gpus[i].sms;
    }
  }
  return hr__fallback_sms(gpu);
}

int hr__client_check_gpu(hr_client *c, int gpu)
{
  if(gpu < 0 || gpu >= HR_MAX_GPUS)
    return HR_EINVAL;
  if(c->have_topology && gpu >= c->topology.n_gpus)
    return HR_EINVAL;
  return HR_OK;
}

void hr__client_send_async(hr_client *c, hr_request *req)
{
  hr_buf b;
  pthread_mutex_lock(&c->mu);
  req->id = ++c->next_id;
  pthread_mutex_unlock(&c->mu);
  hr_buf_init(&b, HR_PROTO_MAX_LINE);
  if(!hr_proto_encode_request(req, &b)) {
    pthread_mutex_lock(&c->wmu);
    if(c->wfd >= 0)
      hr__fd_write(c->wfd, b.data, b.len, c->request_timeout_ms);
    pthread_mutex_unlock(&c->wmu);
  }
  hr_buf_free(&b);
}

/* ---- the public object -------------------------------------------------- */

/* The first hr_client_options: what a size of 0 stands for, and the least
 * a size may say. */
#define OPTIONS_SIZE_V1 (offsetof(hr_client_options, quiet) + sizeof(int))

/* The caller's options as this library's struct: the members its `size`
 * covers, zero (the defaults) for the rest. */
static int read_options(const hr_client_options *o, hr_client_options *out)
{
  size_t size;

  memset(out, 0, sizeof(*out));
  if(!o)
    return HR_OK;
  size = o->size ? o->size : OPTIONS_SIZE_V1;
  if(size < OPTIONS_SIZE_V1)
    return HR_EINVAL;
  /* A newer caller's members past ours are its own business. */
  memcpy(out, o, size < sizeof(*out) ? size : sizeof(*out));
  out->size = sizeof(*out);
  if(out->request_timeout_ms < 0 || out->reconnect_ms < 0)
    return HR_EINVAL;
  if(out->name &&
     (strlen(out->name) >= HR_NAME_MAX || !hr__name_valid(out->name)))
    return HR_EINVAL;
  return HR_OK;
}

static const char *resolve_path(const char *arg)
{
  const char *env;
  if(arg)
    return arg;
  env = getenv(HR_ENV_SOCKET);
  return env && *env ? env : HR_DEFAULT_SOCKET;
}

/* The client itself; its leases and footprints went to hr__orphan_adopt. */
static void client_free(hr_client *c)
{
  hr__conn_free(&c->conn);
  if(c->wake[0] >= 0)
    close(c->wake[0]);
  if(c->wake[1] >= 0)
    close(c->wake[1]);
  pthread_cond_destroy(&c->change_cv);
  pthread_cond_destroy(&c->state_cv);
  pthread_cond_destroy(&c->reply_cv);
  pthread_mutex_destroy(&c->wmu);
  pthread_mutex_destroy(&c->mu);
  free(c->path);
  free(c);
}

/* Start the I/O thread with every signal blocked: the application's
 * handlers must run on the application's threads. */
static int start_thread(hr_client *c)
{
  sigset_t all, old;
  int rc;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  rc = pthread_create(&c->thread, NULL, hr__io_main, c);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  if(rc)
    return HR_ENOMEM;
  c->thread_started = 1;
  return HR_OK;
}

int hr_client_open(hr_client **out, const char *socket_path,
                   const hr_client_options *opts)
{
  struct sockaddr_un sa;
  hr_client_options o;
  hr_client *c = NULL;
  const char *path;
  char why[128];
  int err;

  if(!out)
    return HR_EINVAL;
  err = read_options(opts, &o);
  if(err)
    return err;
  path = resolve_path(socket_path);
  if(!*path || strlen(path) >= sizeof(sa.sun_path))
    return HR_EINVAL;
  *out = NULL;

  c = calloc(1, sizeof(*c));
  if(!c)
    return HR_ENOMEM;
  c->wake[0] = c->wake[1] = -1;
  c->wfd = -1;
  hr__conn_init(&c->conn);
  if(pthread_mutex_init(&c->mu, NULL) || pthread_mutex_init(&c->wmu, NULL) ||
     cond_init_monotonic(&c->reply_cv) || cond_init_monotonic(&c->state_cv) ||
     cond_init_monotonic(&c->change_cv)) {
    /* Glibc's init cannot fail with default attributes; other libcs
     * would leak here at worst, never crash. */
    free(c);
    return HR_ENOMEM;
  }
  c->path = strdup(path);
  if(!c->path || pipe2(c->wake, O_CLOEXEC | O_NONBLOCK)) {
    err = HR_ENOMEM;
    goto out;
  }
  c->conn.intr_fd = c->wake[0];
  /* The program's name is whatever exec was given: make it a valid one. */
  hr__name_copy(c->name, sizeof(c->name),
                o.name ? o.name : program_invocation_short_name);
  c->request_timeout_ms = o.request_timeout_ms ? o.request_timeout_ms
                                               : DEFAULT_REQUEST_TIMEOUT_MS;
  c->reconnect_ms = o.reconnect_ms ? o.reconnect_ms : DEFAULT_RECONNECT_MS;
  c->quiet = o.quiet;
  hr__fallback_read(&c->fallback, c->quiet);

  err = hr__io_connect(c, why, sizeof(why));
  if(err == HR_EVERSION || err == HR_ENOMEM)
    goto out;
  if(err && !c->quiet) {
    /* What a first lease on GPU 0 would get, before anything registered. */
    hr__fallback_in in;
    hr_budget b;
    memset(&in, 0, sizeof(in));
    in.sms = hr__client_sms(c, 0);
    in.granularity = hr__fallback_granularity(0);
    in.cluster = HR_POLICY_DEFAULT_CLUSTER;
    hr__fallback_budget(&c->fallback, &in, HR_MODE_HEADROOM, &b);
    hr__fallback_notice(&c->fallback, c->path, why, &b);
  }
  err = start_thread(c);

out:
  if(err) {
    client_free(c);
    return err;
  }
  *out = c;
  return HR_OK;
}

void hr_client_close(hr_client *c)
{
  if(!c)
    return;
  pthread_mutex_lock(&c->mu);
  c->stopping = 1;
  pthread_cond_broadcast(&c->state_cv);
  pthread_cond_broadcast(&c->reply_cv);
  pthread_cond_broadcast(&c->change_cv);
  pthread_mutex_unlock(&c->mu);
  if(c->thread_started) {
    /* One byte keeps wake[0] readable until the thread has seen it. */
    while(write(c->wake[1], "x", 1) < 0 && errno == EINTR)
      ;
    pthread_join(c->thread, NULL);
  }
  /* Closing the socket is the release: the daemon drops every footprint
   * and lease of a connection the moment it closes. The handles the
   * caller holds stay, closed, until it frees them. */
  hr__orphan_adopt(c);
  client_free(c);
}

int hr_client_connected(const hr_client *c)
{
  if(!c)
    return HR_EINVAL;
  return atomic_load_explicit(&c->connected, memory_order_acquire);
}

int hr_client_gpu_count(const hr_client *client)
{
  hr_client *c = (hr_client *)client;   /* only the mutex is written */
  int n;
  if(!c)
    return HR_EINVAL;
  pthread_mutex_lock(&c->mu);
  n = c->have_topology ? c->topology.n_gpus : 0;
  pthread_mutex_unlock(&c->mu);
  return n;
}

int hr_client_gpu_sms(const hr_client *client, int gpu)
{
  hr_client *c = (hr_client *)client;
  int i, sms = HR_ENOTFOUND;
  if(!c || gpu < 0 || gpu >= HR_MAX_GPUS)
    return HR_EINVAL;
  pthread_mutex_lock(&c->mu);
  for(i = 0; c->have_topology && i < c->topology.n_gpus; i++) {
    if(c->topology.gpus[i].index == gpu)
      sms = c->topology.gpus[i].sms;
  }
  pthread_mutex_unlock(&c->mu);
  return sms;
}
