/*
 * hr_report.c: incidents, sent to the daemon so it can raise the GPU's
 * headroom for everyone; with no daemon, at least written to stderr so the
 * job's log says what happened.
 */
#include <stdio.h>
#include <string.h>

#include "hr_client_int.h"

/* The GPU an incident with no lease belongs to: that of the client's
 * oldest lease, else its oldest footprint, else 0 (c->mu held). A process
 * normally drives one GPU, so this is the one it means. */
static int default_gpu(hr_client *c)
{
  hr_lease *l = c->leases;
  hr_comm *m = c->comms;
  while(l && l->next)
    l = l->next;
  if(l)
    return l->gpu;
  while(m && m->next)
    m = m->next;
  return m ? m->gpu : 0;
}

static int valid_detail(const hr_incident_detail *d)
{
  return d->barrier >= -1 && d->arrived >= -1 && d->expected >= -1 &&
         d->sm >= -1 && d->grid >= -1 && d->timeout_ms >= -1 &&
         d->cuda_error >= -1;
}

/* Append ", <label> <v>" to `out` when v is known (not -1). */
static void add_field(char *out, size_t cap, const char *fmt, int v)
{
  size_t len = strlen(out);
  if(v < 0 || len + 1 >= cap)
    return;
  snprintf(out + len, cap - len, fmt, len ? ", " : "", v);
}

static void log_incident(const hr_req_report *r)
{
  const hr_incident_detail *d = &r->detail;
  const char *kind = hr_incident_kind_name(r->kind);
  char detail[160] = "";

  add_field(detail, sizeof(detail), "%sbarrier %d", d->barrier);
  if(d->arrived >= 0 && d->expected >= 0) {
    size_t len = strlen(detail);
    snprintf(detail + len, sizeof(detail) - len, "%s%d of %d CTAs arrived",
             len ? ", " : "", d->arrived, d->expected);
  }
  add_field(detail, sizeof(detail), "%sSM %d", d->sm);
  add_field(detail, sizeof(detail), "%sgrid %d", d->grid);
  add_field(detail, sizeof(detail), "%stimeout %d ms", d->timeout_ms);
  add_field(detail, sizeof(detail), "%sCUDA error %d", d->cuda_error);
  fprintf(stderr, "headroom: %s on GPU %d%s%s%s%s%s; no daemon to report it "
          "to\n", kind ? kind : "incident", r->gpu, detail[0] ? " (" : "",
          detail, detail[0] ? ")" : "", r->message[0] ? ": " : "",
          r->message);
}

int hr_report(hr_client *c, const hr_lease *lease, hr_incident_kind kind,
              const hr_incident_detail *detail, const char *message)
{
  static const hr_incident_detail unknown = {-1, -1, -1, -1, -1, -1, -1};
  hr_request req;
  hr_reply rep;
  uint64_t gen;
  int err = HR_EDEGRADED;

  if(!c || (lease && lease->client != c) ||
     (unsigned)kind >= HR_INCIDENT_COUNT || (detail && !valid_detail(detail)))
    return HR_EINVAL;

  memset(&req, 0, sizeof(req));
  req.type = HR_MSG_REPORT;
  req.u.report.kind = kind;
  req.u.report.detail = detail ? *detail : unknown;
  /* Free text: a long message is cut, not refused. */
  hr__text_copy(req.u.report.message, sizeof(req.u.report.message),
                message ? message : "");

  pthread_mutex_lock(&c->mu);
  req.u.report.gpu = lease ? lease->gpu : default_gpu(c);
  if(!hr__client_wait_settled(c, 0) && c->state == HR__UP) {
    if(lease && lease->gen == c->gen)
      req.u.report.lease = lease->daemon_id;
    /* The daemon's new budget arrives through the I/O thread. */
    err = hr__client_call_locked(c, &req, &rep, &gen);
    if(!err)
      hr_reply_free(&rep);
    if(err == HR_ECLOSED)
      err = HR_EDEGRADED;
  }
  pthread_mutex_unlock(&c->mu);
  if(err == HR_EDEGRADED)
    log_incident(&req.u.report);
  return err;
}
