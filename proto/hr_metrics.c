/*
 * hr_metrics.c: the body of the metrics reply, both ways.
 *
 * Metrics are what a scraper reads every few seconds on every node, so
 * unlike status they hold no list that grows with the load: counters since
 * the daemon started, gauges now, a fixed latency histogram and one small
 * object per GPU. Counters named by an enum (requests by type, errors by
 * code, leases by mode, incidents by kind) are objects keyed by the wire
 * names, every name always written; a reader takes a name it does not
 * know as one added by a newer daemon and ignores it, and one that is
 * missing as 0, so adding a request type or an error code later breaks
 * no scraper.
 */
#include <stdio.h>
#include <string.h>

#include "hr_internal.h"

#define COUNTER_MAX HR__MAX_ID       /* counters: 0..2^53-1 */
#define INVALID "invalid"            /* requests: lines refused undecoded */

static int is_request(int t)
{
  return t >= HR_MSG_HELLO && t <= HR_MSG_LAST_REQUEST;
}

static const char *request_name_i(int i)
{
  return is_request(i) ? hr_msg_type_name((hr_msg_type)i) : NULL;
}

/* ---- Named counters ---------------------------------------------------- */

/* An object of one counter per name: name_of(0..count-1), NULL names
 * skipped. Returns the object, for members beyond the table. */
static cJSON *encode_named(hr__enc *e, cJSON *parent, const char *name,
                           const char *(*name_of)(int), int count,
                           const int64_t *v, int64_t max)
{
  cJSON *o = hr__enc_object(e, parent, name);
  int i;

  for(i = 0; !e->rc && i < count; i++)
    if(name_of(i))
      hr__enc_i64(e, o, name_of(i), v[i], 0, max);
  return o;
}

/* The same, read back; returns the object (NULL when it is not one), for
 * members beyond the table. */
static const cJSON *decode_named(hr__dec *d, const cJSON *parent,
                                 const char *name,
                                 const char *(*name_of)(int), int count,
                                 int64_t *v, int64_t max)
{
  const cJSON *o = hr__dec_object(d, parent, name, HR__REQUIRED);
  size_t mark;
  int i;

  if(!o)
    return NULL;
  mark = hr__dec_enter(d, name);
  for(i = 0; i < count; i++) {
    v[i] = 0;                      /* absent: a name this daemon lacks */
    if(name_of(i))
      hr__dec_i64(d, o, name_of(i), HR__OPTIONAL, 0, max, &v[i]);
  }
  hr__dec_leave(d, mark);
  return o;
}

/* ---- Encoding ---------------------------------------------------------- */

static void encode_requests(hr__enc *e, cJSON *parent, const hr_metrics *m)
{
  cJSON *o = encode_named(e, parent, "requests", request_name_i,
                          HR_MSG_COUNT, m->requests, COUNTER_MAX);

  hr__enc_i64(e, o, INVALID, m->requests[HR_MSG_NONE], 0, COUNTER_MAX);
}

static void encode_latency(hr__enc *e, cJSON *parent, const hr_metrics *m)
{
  cJSON *o = hr__enc_object(e, parent, "latency_us"), *buckets;
  int64_t total = 0;
  int i;

  buckets = hr__enc_array(e, o, "buckets");
  for(i = 0; !e->rc && i < HR_METRICS_BUCKETS; i++) {
    hr__enc_i64(e, buckets, NULL, m->latency[i], 0, COUNTER_MAX);
    total += m->latency[i];
  }
  /* A histogram whose count is not the sum of its buckets is a bug. */
  if(!e->rc && total != m->latency_count)
    hr__enc_fail(e, HR_EINVAL);
  hr__enc_i64(e, o, "count", m->latency_count, 0, COUNTER_MAX);
  hr__enc_i64(e, o, "sum", m->latency_sum_us, 0, COUNTER_MAX);
}

static void encode_gpu(hr__enc *e, cJSON *o, const hr_metrics_gpu *g)
{
  hr__enc_i64(e, o, "index", g->index, 0, HR_MAX_GPUS - 1);
  hr__enc_i64(e, o, "sms", g->sms, 1, HR_MAX_SMS);
  hr__enc_i64(e, o, "headroom", g->headroom, 0, HR_MAX_SMS);
  hr__enc_i64(e, o, "grid", g->grid, 0, HR_MAX_SMS);
  hr__enc_i64(e, o, "epoch", g->epoch, 0, HR__UINT32_MAX);
  hr__enc_i64(e, o, "nccl_max_ctas", g->nccl_max_ctas, 0, HR_MAX_CTAS);
  hr__partition_encode(e, o, g->partition_granularity, g->partition_comm_sms,
                       g->partition_nccl_max_ctas);
  hr__enc_i64(e, o, "clients", g->clients, 0, HR__INT32_MAX);
  hr__enc_i64(e, o, "comms", g->comms, 0, HR__INT32_MAX);
  hr__enc_i64(e, o, "comm_ctas", g->comm_ctas, 0, HR__INT32_MAX);
  hr__mode_counts_encode(e, o, "leases", g->leases);
  hr__enc_i64(e, o, "raised", g->raised, 0, HR_MAX_SMS);
  hr__enc_name(e, o, "budget_source", hr_budget_source_name(g->budget_source));
  encode_named(e, o, "incidents", hr__incident_kind_name_i,
               HR_INCIDENT_COUNT, g->incidents, COUNTER_MAX);
}

void hr__metrics_encode(hr__enc *e, cJSON *parent, const char *name,
                        const hr_metrics *m)
{
  cJSON *o = hr__enc_object(e, parent, name), *gpus;
  int i;

  hr__enc_string(e, o, "daemon", m->daemon, sizeof(m->daemon));
  hr__enc_i64(e, o, "uptime_ms", m->uptime_ms, 0, HR__MAX_ID);
  hr__enc_i64(e, o, "clients", m->clients, 0, HR__INT32_MAX);
  hr__enc_i64(e, o, "clients_resumed", m->clients_resumed, 0, COUNTER_MAX);
  hr__enc_i64(e, o, "client_degraded_ms", m->client_degraded_ms, 0,
              COUNTER_MAX);
  encode_requests(e, o, m);
  encode_named(e, o, "errors", hr__wire_error_name_i, HR_WERR_COUNT,
               m->errors, COUNTER_MAX);
  encode_latency(e, o, m);
  if(m->n_gpus < 0 || m->n_gpus > HR_MAX_GPUS)
    hr__enc_fail(e, HR_EINVAL);
  gpus = hr__enc_array(e, o, "gpus");
  for(i = 0; !e->rc && i < m->n_gpus; i++)
    encode_gpu(e, hr__enc_object(e, gpus, NULL), &m->gpus[i]);
}

/* ---- Decoding ---------------------------------------------------------- */

static void decode_latency(hr__dec *d, const cJSON *parent, hr_metrics *m)
{
  const cJSON *o = hr__dec_object(d, parent, "latency_us", HR__REQUIRED);
  const cJSON *buckets, *it;
  int64_t total = 0;
  size_t mark;
  int n = 0, i = 0;

  if(!o)
    return;
  mark = hr__dec_enter(d, "latency_us");
  buckets = hr__dec_array(d, o, "buckets", HR__REQUIRED, HR_METRICS_BUCKETS,
                          &n);
  if(buckets && n != HR_METRICS_BUCKETS)
    hr__dec_field_fail(d, "buckets", "must have %d items",
                       HR_METRICS_BUCKETS);
  for(it = buckets ? buckets->child : NULL; it && !d->rc;
      it = it->next, i++) {
    char label[32];
    snprintf(label, sizeof(label), "buckets[%d]", i);
    hr__dec_value_i64(d, it, label, 0, COUNTER_MAX, &m->latency[i]);
    total += m->latency[i];
  }
  hr__dec_i64(d, o, "count", HR__REQUIRED, 0, COUNTER_MAX,
              &m->latency_count);
  if(!d->rc && m->latency_count != total)
    hr__dec_field_fail(d, "count", "must be the sum of the buckets (%lld)",
                       (long long)total);
  hr__dec_i64(d, o, "sum", HR__REQUIRED, 0, COUNTER_MAX, &m->latency_sum_us);
  hr__dec_leave(d, mark);
}

static void decode_gpu(hr__dec *d, const cJSON *o, hr_metrics_gpu *g)
{
  int source;
  int64_t epoch = 0;

  hr__dec_int(d, o, "index", HR__REQUIRED, 0, HR_MAX_GPUS - 1, &g->index);
  hr__dec_int(d, o, "sms", HR__REQUIRED, 1, HR_MAX_SMS, &g->sms);
  hr__dec_int(d, o, "headroom", HR__REQUIRED, 0, HR_MAX_SMS, &g->headroom);
  hr__dec_int(d, o, "grid", HR__REQUIRED, 0, HR_MAX_SMS, &g->grid);
  hr__dec_i64(d, o, "epoch", HR__REQUIRED, 0, HR__UINT32_MAX, &epoch);
  g->epoch = (uint32_t)epoch;
  hr__dec_int(d, o, "nccl_max_ctas", HR__REQUIRED, 0, HR_MAX_CTAS,
              &g->nccl_max_ctas);
  /* Optional, as in the budget: absent from a daemon before partitions. */
  hr__partition_decode(d, o, &g->partition_granularity,
                       &g->partition_comm_sms, &g->partition_nccl_max_ctas);
  hr__dec_int(d, o, "clients", HR__REQUIRED, 0, HR__INT32_MAX, &g->clients);
  hr__dec_int(d, o, "comms", HR__REQUIRED, 0, HR__INT32_MAX, &g->comms);
  hr__dec_int(d, o, "comm_ctas", HR__REQUIRED, 0, HR__INT32_MAX,
              &g->comm_ctas);
  hr__mode_counts_decode(d, o, "leases", g->leases);
  hr__dec_int(d, o, "raised", HR__REQUIRED, 0, HR_MAX_SMS, &g->raised);
  source = HR_SOURCE_THEORY; /* optional, as in status */
  hr__dec_enum(d, o, "budget_source", HR__OPTIONAL, hr__budget_source_name_i,
               HR_SOURCE_COUNT, &source);
  g->budget_source = (hr_budget_source)source;
  decode_named(d, o, "incidents", hr__incident_kind_name_i,
               HR_INCIDENT_COUNT, g->incidents, COUNTER_MAX);
}

void hr__metrics_decode(hr__dec *d, const cJSON *parent, const char *name,
                        hr_metrics *m)
{
  const cJSON *o = hr__dec_object(d, parent, name, HR__REQUIRED);
  const cJSON *requests, *gpus, *it;
  size_t mark, inner;
  int n = 0, i = 0;

  memset(m, 0, sizeof(*m));
  if(!o)
    return;
  mark = hr__dec_enter(d, name);
  hr__dec_string(d, o, "daemon", HR__REQUIRED, m->daemon, sizeof(m->daemon));
  hr__dec_i64(d, o, "uptime_ms", HR__REQUIRED, 0, HR__MAX_ID, &m->uptime_ms);
  hr__dec_int(d, o, "clients", HR__REQUIRED, 0, HR__INT32_MAX, &m->clients);
  hr__dec_i64(d, o, "clients_resumed", HR__REQUIRED, 0, COUNTER_MAX,
              &m->clients_resumed);
  hr__dec_i64(d, o, "client_degraded_ms", HR__REQUIRED, 0, COUNTER_MAX,
              &m->client_degraded_ms);
  requests = decode_named(d, o, "requests", request_name_i, HR_MSG_COUNT,
                          m->requests, COUNTER_MAX);
  if(requests) {
    inner = hr__dec_enter(d, "requests");
    hr__dec_i64(d, requests, INVALID, HR__OPTIONAL, 0, COUNTER_MAX,
                &m->requests[HR_MSG_NONE]);
    hr__dec_leave(d, inner);
  }
  decode_named(d, o, "errors", hr__wire_error_name_i, HR_WERR_COUNT,
               m->errors, COUNTER_MAX);
  decode_latency(d, o, m);
  gpus = hr__dec_array(d, o, "gpus", HR__REQUIRED, HR_MAX_GPUS, &n);
  for(it = gpus ? gpus->child : NULL; it && !d->rc; it = it->next, i++) {
    inner = hr__dec_enter_index(d, "gpus", i);
    hr__dec_expect_object(d, it);
    decode_gpu(d, it, &m->gpus[i]);
    hr__dec_leave(d, inner);
  }
  m->n_gpus = d->rc ? 0 : n;
  hr__dec_leave(d, mark);
}
