/*
 * dispatch.c: requests to state changes, replies and events (dispatch.h).
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "dispatch.h"
#include "log.h"
#include "metrics.h"
#include "policy.h"
#include "status.h"

/* ---- sending ----------------------------------------------------------- */

static void reply_init(hr_reply *rep, const hr_request *req)
{
  memset(rep, 0, sizeof(*rep));
  rep->type = req->type;
  rep->id = req->id;
}

/* Every error reply to a request goes through here, to be counted. */
static int send_error(hr__conn *c, int64_t id, hr_wire_error code,
                      const char *fmt, ...) HR__PRINTF(4, 5);

static int send_error(hr__conn *c, int64_t id, hr_wire_error code,
                      const char *fmt, ...)
{
  va_list ap;
  int rc;

  hr__metrics_error(&c->d->metrics, code);
  va_start(ap, fmt);
  rc = hr__conn_send_verror(c, id, code, fmt, ap);
  va_end(ap);
  return rc;
}

static int send_reply(hr__conn *c, const hr_reply *rep)
{
  hr_buf *out = &c->d->out;
  int rc;

  hr_buf_reset(out);
  rc = hr_proto_encode_reply(rep, out);
  if(rc == HR_ETOOLARGE)
    return send_error(c, rep->id, HR_WERR_TOO_LARGE,
                      "reply larger than %d bytes",
                      HR_PROTO_MAX_LINE);
  if(rc) {
    hr__err("client %lld: cannot encode a %s reply: %s", (long long)c->id,
            hr_msg_type_name(rep->type), hr_strerror(rc));
    return send_error(c, rep->id, HR_WERR_INTERNAL,
                      "cannot encode the reply");
  }
  return hr__conn_send(c, out);
}

/* An empty reply: unregister_comm, release, subscribe. */
static int send_ack(hr__conn *c, const hr_request *req)
{
  hr_reply rep;

  reply_init(&rep, req);
  return send_reply(c, &rep);
}

static int no_gpu(hr__conn *c, const hr_request *req, int gpu)
{
  return send_error(c, req->id, HR_WERR_NOT_FOUND,
                    "no GPU %d (this node has %d)", gpu,
                    c->d->state.n_gpus);
}

static void pend(hr__daemon *d, hr__gpu_mask changed)
{
  d->pending |= changed;
}

/* ---- requests ---------------------------------------------------------- */

/* The most of a hello's degraded_ms that is counted: the daemon's uptime
 * (a client may have been refused, or on a wrong socket, all along) plus
 * a day for the outage before it started. A client's own number is all
 * the daemon has, so one hello must not be able to saturate the counter
 * (2^53-1 ms would) and hide every later one (PROTOCOL.md, hello). */
#define DEGRADED_BEFORE_START_MS (24LL * 60 * 60 * 1000)

static int64_t degraded_counted(const hr__daemon *d, int64_t ms)
{
  int64_t cap = (int64_t)((uv_hrtime() - d->start_ns) / 1000000) +
                DEGRADED_BEFORE_START_MS;

  return ms > cap ? cap : ms;
}

static void on_hello(hr__conn *c, const hr_request *req)
{
  const hr_req_hello *h = &req->u.hello;
  hr__daemon *d = c->d;
  hr_reply rep;
  int i, best = 0;

  if(c->hello) {
    send_error(c, req->id, HR_WERR_BAD_REQUEST,
               "hello was already done on this connection");
    return;
  }
  for(i = 0; i < h->n_versions && i < HR_MAX_VERSIONS; i++) {
    int v = h->versions[i];
    if(v >= HR_PROTO_VERSION_MIN && v <= HR_PROTO_VERSION && v > best)
      best = v;
  }
  if(!best) {
    send_error(c, req->id, HR_WERR_UNSUPPORTED_VERSION,
               "no protocol version in common: headroomd speaks "
               "%d..%d", HR_PROTO_VERSION_MIN, HR_PROTO_VERSION);
    hr__conn_drain(c, "no protocol version in common");
    return;
  }
  c->hello = 1;
  c->version = best;
  memcpy(c->name, h->client, sizeof(c->name));
  c->name[sizeof(c->name) - 1] = '\0';

  reply_init(&rep, req);
  rep.u.hello.version = best;
  snprintf(rep.u.hello.daemon, sizeof(rep.u.hello.daemon), "headroomd %s",
           HR_VERSION_STRING);
  rep.u.hello.client = c->id;
  rep.u.hello.topology = d->topo;
  if(h->degraded_ms > 0) {
    /* It ran on its fallback budget meanwhile: the time operators want
     * to see, since nothing else could have told them. */
    int64_t ms = degraded_counted(d, h->degraded_ms);
    hr__metrics_resumed(&d->metrics, ms);
    if(ms < h->degraded_ms)
      hr__warn("client %lld is '%s' (protocol %d), back after %lld ms "
               "without a daemon, it says; counted as %lld ms (the "
               "daemon's uptime plus a day)", (long long)c->id, c->name,
               best, (long long)h->degraded_ms, (long long)ms);
    else
      hr__info("client %lld is '%s' (protocol %d), back after %lld ms "
               "without a daemon", (long long)c->id, c->name, best,
               (long long)ms);
  } else {
    hr__info("client %lld is '%s' (protocol %d)", (long long)c->id, c->name,
             best);
  }
  send_reply(c, &rep);
}

static void on_register_comm(hr__conn *c, const hr_request *req)
{
  const hr_req_register_comm *r = &req->u.register_comm;
  hr__daemon *d = c->d;
  hr__gpu_mask changed = 0;
  hr_reply rep;
  int64_t id = 0;
  int rc;

  if(c->n_comms >= d->cfg.max_comms_per_client) {
    send_error(c, req->id, HR_WERR_LIMIT_EXCEEDED,
               "at most %d footprints per client "
               "(max_comms_per_client)", d->cfg.max_comms_per_client);
    return;
  }
  rc = hr__state_comm_add(&d->state, c->id, r, &id, &changed);
  if(rc == HR_ENOTFOUND) {
    no_gpu(c, req, r->gpu);
    return;
  }
  if(rc) {
    send_error(c, req->id, rc == HR_ENOMEM ? HR_WERR_INTERNAL :
               HR_WERR_BAD_REQUEST, "cannot register: %s",
               hr_strerror(rc));
    return;
  }
  c->n_comms++;
  hr__info("client %lld registered comm %lld '%s' on gpu %d: %d CTAs x %d "
           "in flight, cga %d", (long long)c->id, (long long)id, r->name,
           r->gpu, r->ctas, r->concurrent, r->cga);
  reply_init(&rep, req);
  rep.u.register_comm.comm = id;
  send_reply(c, &rep);
  pend(d, changed);
}

static void on_unregister_comm(hr__conn *c, const hr_request *req)
{
  hr__daemon *d = c->d;
  hr__gpu_mask changed = 0;
  int64_t id = req->u.unregister_comm.comm;

  if(hr__state_comm_remove(&d->state, c->id, id, &changed)) {
    send_error(c, req->id, HR_WERR_NOT_FOUND,
               "no footprint %lld of this client", (long long)id);
    return;
  }
  c->n_comms--;
  hr__info("client %lld unregistered comm %lld", (long long)c->id,
           (long long)id);
  send_ack(c, req);
  pend(d, changed);
}

/* Why a GPU has no partition for a lease: the driver cannot split it, or
 * the policy leaves no room for one step. */
static void no_partition(hr__conn *c, const hr_request *req, int gpu)
{
  const hr__gpu *g = hr__state_gpu(&c->d->state, gpu);
  const hr_policy *p = &c->d->state.policy;
  int ceiling = hr__policy_ceiling(p, g->info.sms);

  if(!g->granularity) {
    send_error(c, req->id, HR_WERR_UNSUPPORTED,
               "partition mode on gpu %d: its CUDA driver cannot split it "
               "into green contexts", gpu);
    return;
  }
  send_error(c, req->id, HR_WERR_UNSUPPORTED,
             "partition mode on gpu %d needs a comm partition of at least "
             "%d SMs (its green-context granularity), above its ceiling of "
             "%d SMs (max_headroom %d, sms %d - min_grid %d)", gpu,
             g->granularity, ceiling, p->max_headroom, g->info.sms,
             p->min_grid);
}

static void on_lease(hr__conn *c, const hr_request *req)
{
  const hr_req_lease *r = &req->u.lease;
  hr__daemon *d = c->d;
  hr__gpu_mask changed = 0;
  hr_reply rep;
  int64_t id = 0;
  int rc;

  if(c->n_leases >= d->cfg.max_leases_per_client) {
    send_error(c, req->id, HR_WERR_LIMIT_EXCEEDED,
               "at most %d leases per client "
               "(max_leases_per_client)",
               d->cfg.max_leases_per_client);
    return;
  }
  reply_init(&rep, req);
  rc = hr__state_lease_add(&d->state, c->id, r, &id, &rep.u.lease.budget,
                           &changed);
  switch(rc) {
  case HR_OK:
    break;
  case HR_ENOTFOUND:
    no_gpu(c, req, r->gpu);
    return;
  case HR_EUNSUPPORTED:
    if(r->mode == HR_MODE_PARTITION) {
      no_partition(c, req, r->gpu);
      return;
    }
    send_error(c, req->id, HR_WERR_UNSUPPORTED,
               "mode '%s' is not supported by this daemon",
               hr_mode_name(r->mode) ? hr_mode_name(r->mode) : "?");
    return;
  default:
    send_error(c, req->id, rc == HR_ENOMEM ? HR_WERR_INTERNAL :
               HR_WERR_BAD_REQUEST, "cannot lease: %s",
               hr_strerror(rc));
    return;
  }
  c->n_leases++;
  rep.u.lease.lease = id;
  hr__info("client %lld leased %lld on gpu %d (cluster %d, %s): grid %d, "
           "headroom %d, epoch %u", (long long)c->id, (long long)id, r->gpu,
           r->cluster, hr_mode_name(r->mode), rep.u.lease.budget.grid,
           rep.u.lease.budget.headroom, rep.u.lease.budget.epoch);
  send_reply(c, &rep);
  pend(d, changed);
}

static void on_release(hr__conn *c, const hr_request *req)
{
  hr__daemon *d = c->d;
  hr__gpu_mask changed = 0;
  int64_t id = req->u.release.lease;

  if(hr__state_lease_remove(&d->state, c->id, id, &changed)) {
    send_error(c, req->id, HR_WERR_NOT_FOUND,
               "no lease %lld of this client", (long long)id);
    return;
  }
  c->n_leases--;
  hr__info("client %lld released lease %lld", (long long)c->id,
           (long long)id);
  send_ack(c, req);
  pend(d, changed);
}

static void log_incident(const hr__conn *c, const hr_req_report *r,
                         int64_t incident, const hr_budget *b, int raised)
{
  const hr_incident_detail *x = &r->detail;

  const char *sep = r->message[0] ? ": " : "";

  /* -1 in a detail field means unknown (the client did not say). */
  if(r->kind == HR_INCIDENT_BARRIER_TIMEOUT)
    hr__warn("gpu %d: barrier timeout (incident %lld) from client %lld "
             "(pid %d) lease %lld: barrier %d, %d/%d CTAs arrived, sm %d, "
             "grid %d, timeout %d ms; headroom now %d (raised %d)%s%s",
             r->gpu, (long long)incident, (long long)c->id, c->peer.pid,
             (long long)r->lease, x->barrier, x->arrived, x->expected, x->sm,
             x->grid, x->timeout_ms, b->headroom, raised, sep, r->message);
  else
    hr__notice("gpu %d: launch failure (incident %lld) from client %lld "
               "(pid %d) lease %lld: cuda error %d, grid %d%s%s",
               r->gpu, (long long)incident, (long long)c->id, c->peer.pid,
               (long long)r->lease, x->cuda_error, x->grid, sep, r->message);
}

int hr__dispatch_uid_of(const void *ctx, int64_t client)
{
  const hr__daemon *d = ctx;
  const hr__conn *c;

  for(c = d->conns; c; c = c->next)
    if(c->id == client)
      return c->peer.uid;
  return -1;
}

static void on_report(hr__conn *c, const hr_request *req)
{
  const hr_req_report *r = &req->u.report;
  hr__daemon *d = c->d;
  hr__gpu_mask changed = 0;
  hr__raise_outcome outcome = HR__RAISE_NONE;
  hr_reply rep;
  int64_t id = 0;
  int rc;

  if(!hr__state_gpu(&d->state, r->gpu)) {
    no_gpu(c, req, r->gpu);
    return;
  }
  reply_init(&rep, req);
  rc = hr__state_report(&d->state, c->id, c->peer.uid, r,
                        hr__daemon_time_ms(), &id, &rep.u.report.budget,
                        &changed, &outcome);
  if(rc == HR_ENOTFOUND) {
    send_error(c, req->id, HR_WERR_NOT_FOUND,
               "no lease %lld of this client on gpu %d", (long long)r->lease,
               r->gpu);
    return;
  }
  if(rc == HR_EPERM) {
    hr__notice("client %lld (pid %d, uid %d) reported on lease %lld of "
               "another client; refused", (long long)c->id, c->peer.pid,
               c->peer.uid, (long long)r->lease);
    send_error(c, req->id, HR_WERR_PERMISSION_DENIED,
               "lease %lld is not this client's: a report may name only a "
               "lease of its own connection", (long long)r->lease);
    return;
  }
  if(rc) {
    send_error(c, req->id, HR_WERR_BAD_REQUEST, "cannot report: %s",
               hr_strerror(rc));
    return;
  }
  rep.u.report.incident = id;
  hr__metrics_incident(&d->metrics, r->gpu, r->kind);
  log_incident(c, r, id, &rep.u.report.budget,
               hr__state_gpu(&d->state, r->gpu)->raised);
  if(outcome == HR__RAISE_LIMITED)
    hr__notice("gpu %d: incident %lld raised nothing: uid %d raised this "
               "GPU less than %lld s ago (incident_raise_interval)", r->gpu,
               (long long)id, c->peer.uid,
               (long long)(d->state.raise_interval_ms / 1000));
  /* The reply tells the client its incident is recorded: it goes out
   * once the loop has saved it, not before (conn.h). */
  hr__conn_hold(c);
  send_reply(c, &rep);
  pend(d, changed);
}

static void on_status(hr__conn *c, const hr_request *req)
{
  hr_status_detail detail = req->u.status.detail;
  hr_buf *out = &c->d->out;
  hr_reply rep;
  int rc;

  reply_init(&rep, req);
  rc = hr__status_build(c->d, detail, &rep.u.status);
  if(rc)
    goto out;
  hr_buf_reset(out);
  rc = hr_proto_encode_reply(&rep, out);
  /* The full status grows with the clients and can pass the line cap; an
   * operator must still get one, so the summary (whose size depends on
   * the GPUs alone) goes instead, marked truncated. The full build has
   * the summary's counts already: the encoder only leaves the lists out. */
  if(rc == HR_ETOOLARGE && detail == HR_STATUS_FULL) {
    hr__debug("client %lld: status over %d bytes; sending the summary",
              (long long)c->id, HR_PROTO_MAX_LINE);
    rep.u.status.detail = HR_STATUS_SUMMARY;
    rep.u.status.truncated = 1;
    hr_buf_reset(out);
    rc = hr_proto_encode_reply(&rep, out);
  }
out:
  hr_status_free(&rep.u.status);
  if(rc) {
    hr__err("client %lld: cannot build or encode the status: %s",
            (long long)c->id, hr_strerror(rc));
    send_error(c, req->id, HR_WERR_INTERNAL, "cannot build status: %s",
               hr_strerror(rc));
    return;
  }
  hr__conn_send(c, out);
}

static void on_metrics(hr__conn *c, const hr_request *req)
{
  hr_reply rep;
  int rc;

  reply_init(&rep, req);
  rc = hr__metrics_build(c->d, &rep.u.metrics);
  if(rc) {
    send_error(c, req->id, HR_WERR_INTERNAL, "cannot build metrics: %s",
               hr_strerror(rc));
    return;
  }
  send_reply(c, &rep);
}

static void on_subscribe(hr__conn *c, const hr_request *req)
{
  int gpu = req->u.subscribe.gpu;

  if(gpu == -1) {
    c->sub_all = 1;
  } else if(gpu >= 0 && gpu < c->d->state.n_gpus) {
    c->sub_mask |= (hr__gpu_mask)1 << gpu;
  } else {
    no_gpu(c, req, gpu);
    return;
  }
  hr__debug("client %lld subscribed to %s%d", (long long)c->id,
            gpu < 0 ? "every gpu " : "gpu ", gpu);
  send_ack(c, req);
}

static void on_policy_get(hr__conn *c, const hr_request *req)
{
  hr_reply rep;

  reply_init(&rep, req);
  rep.u.policy = c->d->state.policy;
  send_reply(c, &rep);
}

static void on_policy_set(hr__conn *c, const hr_request *req)
{
  const hr_req_policy_set *r = &req->u.policy_set;
  hr__daemon *d = c->d;
  hr__gpu_mask changed = 0;
  hr_policy p = d->state.policy;
  char why[HR_MESSAGE_MAX];
  hr_reply rep;

  if(!c->is_operator) {
    hr__notice("client %lld (pid %d, uid %d) may not set policy",
               (long long)c->id, c->peer.pid, c->peer.uid);
    send_error(c, req->id, HR_WERR_PERMISSION_DENIED,
               "policy_set needs root or group '%s'",
               d->cfg.operator_group[0] ? d->cfg.operator_group :
               "(none configured)");
    return;
  }
  if(r->fields & HR_POLICY_MIN_HEADROOM)
    p.min_headroom = r->policy.min_headroom;
  if(r->fields & HR_POLICY_MAX_HEADROOM)
    p.max_headroom = r->policy.max_headroom;
  if(r->fields & HR_POLICY_MIN_GRID)
    p.min_grid = r->policy.min_grid;
  if(r->fields & HR_POLICY_INCIDENT_RAISE)
    p.incident_raise = r->policy.incident_raise;
  /* Well formed, but a policy some GPU of this node could not run safely
   * under: refused as a value, the policy in force unchanged. */
  if(hr__policy_validate_for(&p, &d->topo, why, sizeof(why), NULL)) {
    hr__notice("client %lld (pid %d, uid %d): policy refused: %s",
               (long long)c->id, c->peer.pid, c->peer.uid, why);
    send_error(c, req->id, HR_WERR_INVALID_VALUE, "%s", why);
    return;
  }
  hr__state_set_policy(&d->state, &p, &changed);
  hr__notice("policy set by client %lld (pid %d, uid %d): min_headroom %d, "
             "max_headroom %d, min_grid %d, incident_raise %s",
             (long long)c->id, c->peer.pid, c->peer.uid, p.min_headroom,
             p.max_headroom, p.min_grid, p.incident_raise ? "yes" : "no");
  reply_init(&rep, req);
  rep.u.policy = p;
  send_reply(c, &rep);
  pend(d, changed);
}

/* Operators only: what `what` does changes what every tenant gets. */
static int operator_only(hr__conn *c, const hr_request *req,
                         const char *what)
{
  hr__daemon *d = c->d;

  if(c->is_operator)
    return 1;
  hr__notice("client %lld (pid %d, uid %d) may not %s", (long long)c->id,
             c->peer.pid, c->peer.uid, what);
  send_error(c, req->id, HR_WERR_PERMISSION_DENIED,
             "%s needs root or group '%s'", hr_msg_type_name(req->type),
             d->cfg.operator_group[0] ? d->cfg.operator_group :
             "(none configured)");
  return 0;
}

static void raises_fill(const hr__daemon *d, hr_rep_raises *r)
{
  int g;

  r->n_gpus = d->state.n_gpus;
  for(g = 0; g < d->state.n_gpus; g++)
    hr__state_raise_info(&d->state, g, &r->gpus[g]);
}

static void on_raises_get(hr__conn *c, const hr_request *req)
{
  hr_reply rep;

  if(!operator_only(c, req, "list raises"))
    return;
  reply_init(&rep, req);
  raises_fill(c->d, &rep.u.raises);
  send_reply(c, &rep);
}

static void on_raises_clear(hr__conn *c, const hr_request *req)
{
  hr__daemon *d = c->d;
  hr__gpu_mask changed = 0;
  int gpu = req->u.raises_clear.gpu, n;
  hr_reply rep;

  if(!operator_only(c, req, "clear raises"))
    return;
  n = hr__state_raises_clear(&d->state, gpu, &changed);
  if(n < 0) {
    no_gpu(c, req, gpu);
    return;
  }
  if(gpu < 0)
    hr__notice("raises cleared on every gpu (%d had one) by client %lld "
               "(pid %d, uid %d)", n, (long long)c->id, c->peer.pid,
               c->peer.uid);
  else
    hr__notice("gpu %d: raise cleared by client %lld (pid %d, uid %d)", gpu,
               (long long)c->id, c->peer.pid, c->peer.uid);
  reply_init(&rep, req);
  rep.u.raises.cleared = n;
  raises_fill(d, &rep.u.raises);
  /* Like a report, the reply says it is on disk: sent after the save. */
  hr__conn_hold(c);
  send_reply(c, &rep);
  pend(d, changed);
}

/* Serve a decoded request; every path queues exactly one reply. */
static void serve(hr__conn *c, const hr_request *req)
{
  if(c->d->stopping) {
    send_error(c, req->id, HR_WERR_SHUTTING_DOWN,
               "headroomd is shutting down");
    return;
  }
  if(!c->hello && req->type != HR_MSG_HELLO) {
    send_error(c, req->id, HR_WERR_HELLO_REQUIRED, "send hello first");
    return;
  }
  hr__debug("client %lld: %s (id %lld)", (long long)c->id,
            hr_msg_type_name(req->type), (long long)req->id);
  switch(req->type) {
  case HR_MSG_HELLO: on_hello(c, req); break;
  case HR_MSG_REGISTER_COMM: on_register_comm(c, req); break;
  case HR_MSG_UNREGISTER_COMM: on_unregister_comm(c, req); break;
  case HR_MSG_LEASE: on_lease(c, req); break;
  case HR_MSG_RELEASE: on_release(c, req); break;
  case HR_MSG_REPORT: on_report(c, req); break;
  case HR_MSG_STATUS: on_status(c, req); break;
  case HR_MSG_SUBSCRIBE: on_subscribe(c, req); break;
  case HR_MSG_POLICY_GET: on_policy_get(c, req); break;
  case HR_MSG_POLICY_SET: on_policy_set(c, req); break;
  case HR_MSG_METRICS: on_metrics(c, req); break;
  case HR_MSG_RAISES_GET: on_raises_get(c, req); break;
  case HR_MSG_RAISES_CLEAR: on_raises_clear(c, req); break;
  default:
    /* Replies and events are the daemon's to send, not to receive. */
    send_error(c, req->id, HR_WERR_UNKNOWN_TYPE, "'%s' is not a request",
               hr_msg_type_name(req->type) ? hr_msg_type_name(req->type)
                                           : "?");
    break;
  }
}

void hr__dispatch_line(hr__conn *c, const char *line, size_t len)
{
  /* The line was framed just now: from here to its reply being queued is
   * the latency the metrics report. Events it causes are not included. */
  uint64_t t0 = uv_hrtime();
  hr__daemon *d;
  hr_request req;
  hr_proto_error perr;

  if(!c || c->closing)
    return;
  d = c->d;
  d->requests++;
  memset(&req, 0, sizeof(req));
  memset(&perr, 0, sizeof(perr));
  if(hr_proto_decode_request(line, len, &req, &perr)) {
    hr__debug("client %lld: rejected a message: %s: %s", (long long)c->id,
              hr_wire_error_name(perr.code), perr.message);
    hr__metrics_request(&d->metrics, HR_MSG_NONE);
    send_error(c, req.id, perr.code, "%s", perr.message);
  } else {
    hr__metrics_request(&d->metrics, req.type);
    serve(c, &req);
  }
  hr__metrics_latency(&d->metrics, uv_hrtime() - t0);
  hr__dispatch_flush(d);
}

/* ---- connections going, events ----------------------------------------- */

void hr__dispatch_gone(hr__conn *c)
{
  hr__daemon *d = c->d;
  hr__gpu_mask changed = 0;

  /* On shutdown everyone goes at once: nobody is left to tell, and the
   * saved epochs should be those clients last saw. */
  if(d->stopping || (!c->n_comms && !c->n_leases))
    return;
  hr__state_drop_client(&d->state, c->id, &changed);
  if(c->n_comms || c->n_leases)
    hr__info("client %lld: dropped %d footprints and %d leases",
             (long long)c->id, c->n_comms, c->n_leases);
  c->n_comms = c->n_leases = 0;
  pend(d, changed);
}

void hr__dispatch_flush(hr__daemon *d)
{
  hr_buf ev;
  int g;

  /* A send below can close a slow client, whose state then goes and adds
   * to d->pending: the loop picks that up instead of recursing. */
  if(d->flushing || d->stopping)
    return;
  d->flushing = 1;
  hr_buf_init(&ev, HR_PROTO_MAX_LINE);
  while(d->pending) {
    hr__gpu_mask m = d->pending;
    d->pending = 0;
    for(g = 0; g < d->state.n_gpus; g++) {
      hr_reply rep;
      hr__conn *c, *next;

      if(!(m & ((hr__gpu_mask)1 << g)))
        continue;
      memset(&rep, 0, sizeof(rep));
      rep.type = HR_MSG_BUDGET;
      rep.id = -1;
      hr__state_budget(&d->state, g, HR_MODE_HEADROOM, &rep.u.budget);
      hr_buf_reset(&ev);
      if(hr_proto_encode_reply(&rep, &ev)) {
        hr__err("gpu %d: cannot encode a budget event", g);
        continue;
      }
      hr__info("gpu %d: budget epoch %u: grid %d, headroom %d, nccl max "
               "CTAs %d, cluster %d; partition %d SMs, nccl max CTAs %d",
               g, rep.u.budget.epoch, rep.u.budget.grid,
               rep.u.budget.headroom, rep.u.budget.nccl_max_ctas,
               rep.u.budget.cluster, rep.u.budget.partition_comm_sms,
               rep.u.budget.partition_nccl_max_ctas);
      /* Closed connections stay linked until libuv has closed them, so
       * the list is safe to walk while sends disconnect clients. */
      for(c = d->conns; c; c = next) {
        next = c->next;
        if(!c->closing && c->hello && hr__conn_subscribed(c, g))
          hr__conn_send(c, &ev);
      }
    }
  }
  hr_buf_free(&ev);
  d->flushing = 0;
}

int hr__dispatch_send_shutdown(hr__conn *c, const char *why)
{
  hr_reply rep;

  if(!c || c->closing)
    return HR_ECLOSED;
  memset(&rep, 0, sizeof(rep));
  rep.type = HR_MSG_SHUTDOWN;
  rep.id = -1;
  snprintf(rep.u.shutdown_reason, sizeof(rep.u.shutdown_reason), "%s", why);
  return send_reply(c, &rep);
}
