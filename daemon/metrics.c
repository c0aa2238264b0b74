/*
 * metrics.c: counting, and the metrics reply (see metrics.h).
 */
#include <stdio.h>
#include <string.h>

#include "conn.h"
#include "daemon.h"
#include "metrics.h"

static const int64_t bounds_us[HR_METRICS_BUCKETS - 1] =
  HR_METRICS_BUCKET_BOUNDS_US;

/* Add without passing the protocol's largest integer. */
static void bump(int64_t *counter, int64_t by)
{
  if(by < 0)
    return;
  *counter = *counter > HR_PROTO_MAX_ID - by ? HR_PROTO_MAX_ID
                                             : *counter + by;
}

void hr__metrics_request(hr__metrics *m, hr_msg_type type)
{
  if(!m || (int)type < 0 || type >= HR_MSG_COUNT)
    return;
  bump(&m->requests[type], 1);
}

void hr__metrics_error(hr__metrics *m, hr_wire_error code)
{
  if(!m || (int)code < 0 || code >= HR_WERR_COUNT)
    return;
  bump(&m->errors[code], 1);
}

void hr__metrics_latency(hr__metrics *m, uint64_t ns)
{
  int i;

  if(!m)
    return;
  /* A bucket holds what took at most its bound: compared in ns, so 10.2 us
   * is not counted as 10. */
  for(i = 0; i < HR_METRICS_BUCKETS - 1; i++)
    if(ns <= (uint64_t)bounds_us[i] * 1000)
      break;
  bump(&m->latency[i], 1);
  bump(&m->latency_count, 1);
  /* Rounded to the nearest microsecond; bump() caps it. */
  bump(&m->latency_sum_us, (int64_t)((ns + 500) / 1000));
}

void hr__metrics_refused(hr__metrics *m, hr_msg_type type,
                         hr_wire_error code, uint64_t ns)
{
  if(!m)
    return;
  hr__metrics_request(m, type);
  hr__metrics_error(m, code);
  hr__metrics_latency(m, ns);
}

void hr__metrics_resumed(hr__metrics *m, int64_t degraded_ms)
{
  if(!m || degraded_ms <= 0)
    return;
  bump(&m->resumed, 1);
  bump(&m->degraded_ms, degraded_ms);
}

void hr__metrics_incident(hr__metrics *m, int gpu, hr_incident_kind kind)
{
  if(!m || gpu < 0 || gpu >= HR_MAX_GPUS || (int)kind < 0 ||
     kind >= HR_INCIDENT_COUNT)
    return;
  bump(&m->incidents[gpu][kind], 1);
}

void hr__metrics_coalesced(hr__metrics *m, uint64_t gpus)
{
  int64_t n = 0;

  if(!m)
    return;
  for(; gpus; gpus &= gpus - 1)
    n++;
  bump(&m->events_coalesced, n);
}

static int fill_gpu(hr__daemon *d, int gi, hr_metrics_gpu *mg)
{
  const hr__gpu *g = hr__state_gpu(&d->state, gi);

  if(!g)
    return HR_EINVAL;
  mg->index = gi;
  mg->sms = g->info.sms;
  mg->headroom = g->budget.headroom;
  mg->grid = g->budget.grid;
  mg->epoch = g->budget.epoch;
  mg->nccl_max_ctas = g->budget.nccl_max_ctas;
  mg->partition_granularity = g->budget.partition_granularity;
  mg->partition_comm_sms = g->budget.partition_comm_sms;
  mg->partition_nccl_max_ctas = g->budget.partition_nccl_max_ctas;
  mg->clients = hr__state_clients_on(&d->state, gi);
  if(mg->clients < 0)
    return HR_ENOMEM;
  mg->comms = g->n_comms;
  mg->comm_ctas = hr__state_comm_ctas(&d->state, gi);
  hr__state_lease_counts(&d->state, gi, mg->leases);
  mg->raised = g->raised;
  mg->budget_source = g->source;
  memcpy(mg->incidents, d->metrics.incidents[gi], sizeof(mg->incidents));
  return HR_OK;
}

int hr__metrics_build(hr__daemon *d, hr_metrics *out)
{
  const hr__metrics *m;
  const hr__conn *c;
  uint64_t queued = 0;
  int g, rc;

  if(!d || !out)
    return HR_EINVAL;
  m = &d->metrics;
  memset(out, 0, sizeof(*out));
  snprintf(out->daemon, sizeof(out->daemon), "headroomd %s",
           HR_VERSION_STRING);
  out->uptime_ms = (int64_t)((uv_hrtime() - d->start_ns) / 1000000);
  out->clients = d->n_clients;
  out->clients_resumed = m->resumed;
  out->client_degraded_ms = m->degraded_ms;
  memcpy(out->requests, m->requests, sizeof(out->requests));
  memcpy(out->errors, m->errors, sizeof(out->errors));
  memcpy(out->latency, m->latency, sizeof(out->latency));
  out->latency_count = m->latency_count;
  out->latency_sum_us = m->latency_sum_us;
  out->events_coalesced = m->events_coalesced;
  for(c = d->conns; c; c = c->next)
    if(!c->closing)
      queued += hr__conn_queued(c);
  out->queued_bytes = queued > HR_PROTO_MAX_ID ? HR_PROTO_MAX_ID
                                                : (int64_t)queued;
  out->n_gpus = d->state.n_gpus;
  for(g = 0; g < out->n_gpus; g++) {
    rc = fill_gpu(d, g, &out->gpus[g]);
    if(rc)
      return rc;
  }
  return HR_OK;
}
