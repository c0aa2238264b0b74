/*
 * hr_status.c: the body of the status reply, both ways, and its memory.
 *
 * Status is what operators read (headroomctl status, or one line on the
 * socket), so it is laid out for them: the daemon and its policy first,
 * the connected clients, then one entry per GPU holding everything that
 * decides that GPU's budget (footprints, leases, incidents) beside the
 * budget itself. It is the only message whose size grows with the load:
 * the encoder answers HR_ETOOLARGE past the line cap rather than sending a
 * message no peer would accept, and the daemon keeps only the most recent
 * incidents per GPU so that a flapping kernel cannot grow it without end.
 *
 * A summary status has the same head and GPUs but counts where the full
 * one has lists, so its size depends on the GPUs alone (64 of them fit a
 * line): the daemon sends one when asked, and instead of a full status
 * that would not fit. It leaves the lists out rather than sending them
 * empty, so that a reader from before summaries refuses it instead of
 * taking it for an idle node.
 */
#include <stdlib.h>
#include <string.h>

#include "hr_internal.h"

/* No array can hold more items than a line has bytes. */
#define MAX_ITEMS HR_PROTO_MAX_LINE
/* pid, uid and gid: -1 when the daemon could not read them. */
#define CRED_MIN (-1)

void hr_status_free(hr_status *s)
{
  int i;

  if(!s)
    return;
  for(i = 0; s->gpus && i < s->n_gpus; i++) {
    free(s->gpus[i].comms);
    free(s->gpus[i].leases);
    free(s->gpus[i].incidents);
  }
  free(s->gpus);
  free(s->clients);
  s->gpus = NULL;
  s->clients = NULL;
  s->n_gpus = 0;
  s->n_clients = 0;
}

/* ---- Encoding ---------------------------------------------------------- */

/* A count and its array must agree before anything is read through them. */
static int array_ok(int n, const void *items)
{
  return n >= 0 && (n == 0 || items);
}

static void encode_client(hr__enc *e, cJSON *o, const hr_status_client *c)
{
  hr__enc_i64(e, o, "id", c->id, 0, HR__MAX_ID);
  hr__enc_i64(e, o, "pid", c->pid, CRED_MIN, HR__INT32_MAX);
  hr__enc_i64(e, o, "uid", c->uid, CRED_MIN, HR__INT32_MAX);
  hr__enc_i64(e, o, "gid", c->gid, CRED_MIN, HR__INT32_MAX);
  hr__enc_string(e, o, "name", c->name, sizeof(c->name));
  hr__enc_bool(e, o, "operator", c->operator_);
  hr__enc_bool(e, o, "subscribed", c->subscribed);
}

static void encode_comm(hr__enc *e, cJSON *o, const hr_status_comm *c)
{
  hr__enc_i64(e, o, "id", c->id, 1, HR__MAX_ID);
  hr__enc_i64(e, o, "client", c->client, 0, HR__MAX_ID);
  hr__enc_string(e, o, "name", c->name, sizeof(c->name));
  hr__enc_i64(e, o, "ctas", c->ctas, 1, HR_MAX_CTAS);
  hr__enc_i64(e, o, "cga", c->cga, 1, HR_MAX_CGA);
  hr__enc_i64(e, o, "concurrent", c->concurrent, 1, HR_MAX_CONCURRENT);
}

static void encode_lease(hr__enc *e, cJSON *o, const hr_status_lease *l)
{
  if(!hr__cluster_valid(l->cluster))
    hr__enc_fail(e, HR_EINVAL);
  hr__enc_i64(e, o, "id", l->id, 1, HR__MAX_ID);
  hr__enc_i64(e, o, "client", l->client, 0, HR__MAX_ID);
  hr__enc_i64(e, o, "cluster", l->cluster, 1, HR_MAX_CGA);
  hr__enc_name(e, o, "mode", hr_mode_name(l->mode));
}

static void encode_incident(hr__enc *e, cJSON *o,
                            const hr_status_incident *in)
{
  hr__enc_i64(e, o, "id", in->id, 1, HR__MAX_ID);
  hr__enc_i64(e, o, "client", in->client, 0, HR__MAX_ID);
  if(in->lease)                     /* 0: not tied to a lease, left out */
    hr__enc_i64(e, o, "lease", in->lease, 1, HR__MAX_ID);
  hr__enc_i64(e, o, "time_ms", in->time_ms, 0, HR__MAX_ID);
  hr__enc_name(e, o, "kind", hr_incident_kind_name(in->kind));
  hr__detail_encode(e, o, "detail", &in->detail);
  /* Left out when empty; an unterminated one still reaches the check. */
  if(!memchr(in->message, '\0', sizeof(in->message)) || in->message[0])
    hr__enc_string(e, o, "message", in->message, sizeof(in->message));
}

/* A summary's counts in place of the lists. */
static void encode_counts(hr__enc *e, cJSON *o, const hr_status_gpu *g)
{
  hr__enc_i64(e, o, "comm_count", g->comm_count, 0, HR__INT32_MAX);
  hr__mode_counts_encode(e, o, "lease_count", g->lease_count);
  hr__enc_i64(e, o, "incident_count", g->incident_count, 0, HR__INT32_MAX);
}

static void encode_gpu(hr__enc *e, cJSON *o, const hr_status_gpu *g,
                       hr_status_detail detail)
{
  cJSON *list;
  int i;

  hr__gpu_info_encode(e, o, &g->info);
  hr__budget_encode(e, o, "budget", &g->budget);
  hr__enc_name(e, o, "budget_source", hr_budget_source_name(g->budget_source));
  hr__enc_i64(e, o, "comm_ctas", g->comm_ctas, 0, HR__INT32_MAX);
  hr__enc_i64(e, o, "raised", g->raised, 0, HR_MAX_SMS);
  hr__enc_i64(e, o, "clients", g->n_clients, 0, HR__INT32_MAX);
  if(detail == HR_STATUS_SUMMARY) {
    encode_counts(e, o, g);
    return;
  }
  if(!array_ok(g->n_comms, g->comms) || !array_ok(g->n_leases, g->leases) ||
     !array_ok(g->n_incidents, g->incidents))
    hr__enc_fail(e, HR_EINVAL);
  list = hr__enc_array(e, o, "comms");
  for(i = 0; !e->rc && i < g->n_comms; i++)
    encode_comm(e, hr__enc_object(e, list, NULL), &g->comms[i]);
  list = hr__enc_array(e, o, "leases");
  for(i = 0; !e->rc && i < g->n_leases; i++)
    encode_lease(e, hr__enc_object(e, list, NULL), &g->leases[i]);
  list = hr__enc_array(e, o, "incidents");
  for(i = 0; !e->rc && i < g->n_incidents; i++)
    encode_incident(e, hr__enc_object(e, list, NULL), &g->incidents[i]);
}

void hr__status_encode(hr__enc *e, cJSON *parent, const char *name,
                       const hr_status *s)
{
  cJSON *o = hr__enc_object(e, parent, name), *list;
  int i;

  hr__enc_string(e, o, "daemon", s->daemon, sizeof(s->daemon));
  hr__enc_i64(e, o, "uptime_ms", s->uptime_ms, 0, HR__MAX_ID);
  hr__enc_i64(e, o, "requests", s->requests, 0, HR__MAX_ID);
  hr__enc_name(e, o, "topology_source",
               hr_topology_source_name(s->topology_source));
  hr__policy_encode(e, o, "policy", &s->policy, HR__POLICY_ALL);
  if(!array_ok(s->n_gpus, s->gpus) || s->n_gpus > HR_MAX_GPUS)
    hr__enc_fail(e, HR_EINVAL);
  if(s->detail == HR_STATUS_SUMMARY) {
    hr__enc_name(e, o, "detail", hr_status_detail_name(s->detail));
    hr__enc_bool(e, o, "truncated", s->truncated);
    hr__enc_i64(e, o, "client_count", s->client_count, 0, HR__INT32_MAX);
  } else {
    /* Full, the default, is left out; only a summary can be truncated. */
    if(s->detail != HR_STATUS_FULL || s->truncated ||
       !array_ok(s->n_clients, s->clients))
      hr__enc_fail(e, HR_EINVAL);
    list = hr__enc_array(e, o, "clients");
    for(i = 0; !e->rc && i < s->n_clients; i++)
      encode_client(e, hr__enc_object(e, list, NULL), &s->clients[i]);
  }
  list = hr__enc_array(e, o, "gpus");
  for(i = 0; !e->rc && i < s->n_gpus; i++)
    encode_gpu(e, hr__enc_object(e, list, NULL), &s->gpus[i], s->detail);
}

/* ---- Decoding ---------------------------------------------------------- */

static void decode_client(hr__dec *d, const cJSON *o, hr_status_client *c)
{
  hr__dec_i64(d, o, "id", HR__REQUIRED, 0, HR__MAX_ID, &c->id);
  hr__dec_int(d, o, "pid", HR__REQUIRED, CRED_MIN, HR__INT32_MAX, &c->pid);
  hr__dec_int(d, o, "uid", HR__REQUIRED, CRED_MIN, HR__INT32_MAX, &c->uid);
  hr__dec_int(d, o, "gid", HR__REQUIRED, CRED_MIN, HR__INT32_MAX, &c->gid);
  hr__dec_string(d, o, "name", HR__REQUIRED, c->name, sizeof(c->name));
  hr__dec_bool(d, o, "operator", HR__REQUIRED, &c->operator_);
  hr__dec_bool(d, o, "subscribed", HR__REQUIRED, &c->subscribed);
}

static void decode_comm(hr__dec *d, const cJSON *o, hr_status_comm *c)
{
  hr__dec_i64(d, o, "id", HR__REQUIRED, 1, HR__MAX_ID, &c->id);
  hr__dec_i64(d, o, "client", HR__REQUIRED, 0, HR__MAX_ID, &c->client);
  hr__dec_string(d, o, "name", HR__REQUIRED, c->name, sizeof(c->name));
  hr__dec_int(d, o, "ctas", HR__REQUIRED, 1, HR_MAX_CTAS, &c->ctas);
  hr__dec_int(d, o, "cga", HR__REQUIRED, 1, HR_MAX_CGA, &c->cga);
  hr__dec_int(d, o, "concurrent", HR__REQUIRED, 1, HR_MAX_CONCURRENT,
              &c->concurrent);
}

static void decode_lease(hr__dec *d, const cJSON *o, hr_status_lease *l)
{
  int mode = 0;

  hr__dec_i64(d, o, "id", HR__REQUIRED, 1, HR__MAX_ID, &l->id);
  hr__dec_i64(d, o, "client", HR__REQUIRED, 0, HR__MAX_ID, &l->client);
  hr__dec_int(d, o, "cluster", HR__REQUIRED, 1, HR_MAX_CGA, &l->cluster);
  if(!d->rc && !hr__cluster_valid(l->cluster))
    hr__dec_field_fail(d, "cluster", "must be 1, 2, 4 or 8");
  hr__dec_enum(d, o, "mode", HR__REQUIRED, hr__mode_name_i, HR_MODE_COUNT,
               &mode);
  l->mode = (hr_mode)mode;
}

static void decode_incident(hr__dec *d, const cJSON *o,
                            hr_status_incident *in)
{
  int kind = 0;

  hr__dec_i64(d, o, "id", HR__REQUIRED, 1, HR__MAX_ID, &in->id);
  hr__dec_i64(d, o, "client", HR__REQUIRED, 0, HR__MAX_ID, &in->client);
  in->lease = 0;
  hr__dec_i64(d, o, "lease", HR__OPTIONAL, 1, HR__MAX_ID, &in->lease);
  hr__dec_i64(d, o, "time_ms", HR__REQUIRED, 0, HR__MAX_ID, &in->time_ms);
  hr__dec_enum(d, o, "kind", HR__REQUIRED, hr__incident_kind_name_i,
               HR_INCIDENT_COUNT, &kind);
  in->kind = (hr_incident_kind)kind;
  hr__detail_decode(d, o, "detail", &in->detail);
  hr__dec_string(d, o, "message", HR__OPTIONAL, in->message,
                 sizeof(in->message));
}

/* Decode the array member `name` of `parent` into a fresh calloc'ed array of
 * `size`-byte items, one call of `item_fn` per element. The count is stored
 * before the items are read so that hr_status_free can always clean up. */
typedef void (*item_fn)(hr__dec *d, const cJSON *o, void *item);

static void decode_list(hr__dec *d, const cJSON *parent, const char *name,
                        int max, size_t size, item_fn fn, void **items,
                        int *count)
{
  const cJSON *arr, *it;
  size_t mark;
  char *base;
  int n = 0, i = 0;

  *items = NULL;
  *count = 0;
  arr = hr__dec_array(d, parent, name, HR__REQUIRED, max, &n);
  if(!arr || n == 0)
    return;
  base = calloc((size_t)n, size);
  if(!base) {
    hr__dec_fail(d, HR_WERR_INTERNAL, "%s%s: out of memory", d->path, name);
    return;
  }
  *items = base;
  *count = n;
  for(it = arr->child; it && !d->rc; it = it->next, i++) {
    mark = hr__dec_enter_index(d, name, i);
    hr__dec_expect_object(d, it);
    fn(d, it, base + (size_t)i * size);
    hr__dec_leave(d, mark);
  }
}

/* Adapters from the typed decoders to item_fn. */
static void client_item(hr__dec *d, const cJSON *o, void *p)
{
  decode_client(d, o, p);
}

static void comm_item(hr__dec *d, const cJSON *o, void *p)
{
  decode_comm(d, o, p);
}

static void lease_item(hr__dec *d, const cJSON *o, void *p)
{
  decode_lease(d, o, p);
}

static void incident_item(hr__dec *d, const cJSON *o, void *p)
{
  decode_incident(d, o, p);
}

/* The counts of a full status, from its lists. */
static void count_lists(hr_status_gpu *g)
{
  int i;

  g->comm_count = g->n_comms;
  g->incident_count = g->n_incidents;
  memset(g->lease_count, 0, sizeof(g->lease_count));
  for(i = 0; i < g->n_leases; i++)
    if((int)g->leases[i].mode >= 0 && g->leases[i].mode < HR_MODE_COUNT)
      g->lease_count[g->leases[i].mode]++;
}

static void decode_counts(hr__dec *d, const cJSON *o, hr_status_gpu *g)
{
  hr__dec_int(d, o, "comm_count", HR__REQUIRED, 0, HR__INT32_MAX,
              &g->comm_count);
  hr__mode_counts_decode(d, o, "lease_count", g->lease_count);
  hr__dec_int(d, o, "incident_count", HR__REQUIRED, 0, HR__INT32_MAX,
              &g->incident_count);
}

static void gpu_head(hr__dec *d, const cJSON *o, hr_status_gpu *g)
{
  int source;

  hr__gpu_info_decode(d, o, &g->info);
  hr__budget_decode(d, o, "budget", &g->budget);
  /* Optional: a daemon from before calibration sends none, and what it
   * computed was theory. */
  source = HR_SOURCE_THEORY;
  hr__dec_enum(d, o, "budget_source", HR__OPTIONAL, hr__budget_source_name_i,
               HR_SOURCE_COUNT, &source);
  g->budget_source = (hr_budget_source)source;
  hr__dec_int(d, o, "comm_ctas", HR__REQUIRED, 0, HR__INT32_MAX,
              &g->comm_ctas);
  hr__dec_int(d, o, "raised", HR__REQUIRED, 0, HR_MAX_SMS, &g->raised);
  hr__dec_int(d, o, "clients", HR__REQUIRED, 0, HR__INT32_MAX,
              &g->n_clients);
}

static void gpu_summary_item(hr__dec *d, const cJSON *o, void *p)
{
  hr_status_gpu *g = p;

  gpu_head(d, o, g);
  decode_counts(d, o, g);
}

static void gpu_item(hr__dec *d, const cJSON *o, void *p)
{
  hr_status_gpu *g = p;
  void *items;

  gpu_head(d, o, g);
  decode_list(d, o, "comms", MAX_ITEMS, sizeof(hr_status_comm), comm_item,
              &items, &g->n_comms);
  g->comms = items;
  decode_list(d, o, "leases", MAX_ITEMS, sizeof(hr_status_lease), lease_item,
              &items, &g->n_leases);
  g->leases = items;
  decode_list(d, o, "incidents", MAX_ITEMS, sizeof(hr_status_incident),
              incident_item, &items, &g->n_incidents);
  g->incidents = items;
  if(!d->rc)
    count_lists(g);
}

void hr__status_decode(hr__dec *d, const cJSON *parent, const char *name,
                       hr_status *s)
{
  const cJSON *o = hr__dec_object(d, parent, name, HR__REQUIRED);
  unsigned fields;
  void *items;
  int source = 0, detail;
  size_t mark;

  memset(s, 0, sizeof(*s));
  if(!o)
    return;
  mark = hr__dec_enter(d, name);
  hr__dec_string(d, o, "daemon", HR__REQUIRED, s->daemon, sizeof(s->daemon));
  hr__dec_i64(d, o, "uptime_ms", HR__REQUIRED, 0, HR__MAX_ID, &s->uptime_ms);
  hr__dec_i64(d, o, "requests", HR__REQUIRED, 0, HR__MAX_ID, &s->requests);
  hr__dec_enum(d, o, "topology_source", HR__REQUIRED,
               hr__topology_source_name_i, HR_TOPO_COUNT, &source);
  s->topology_source = (hr_topology_source)source;
  hr__policy_decode(d, o, "policy", &s->policy, HR__POLICY_ALL, &fields);
  /* Absent: full, as from a daemon from before summaries. */
  detail = HR_STATUS_FULL;
  hr__dec_enum(d, o, "detail", HR__OPTIONAL, hr__status_detail_name_i,
               HR_STATUS_DETAIL_COUNT, &detail);
  s->detail = (hr_status_detail)detail;
  if(s->detail == HR_STATUS_SUMMARY) {
    hr__dec_bool(d, o, "truncated", HR__REQUIRED, &s->truncated);
    hr__dec_int(d, o, "client_count", HR__REQUIRED, 0, HR__INT32_MAX,
                &s->client_count);
  } else {
    decode_list(d, o, "clients", MAX_ITEMS, sizeof(hr_status_client),
                client_item, &items, &s->n_clients);
    s->clients = items;
    s->client_count = s->n_clients;
  }
  decode_list(d, o, "gpus", HR_MAX_GPUS, sizeof(hr_status_gpu),
              s->detail == HR_STATUS_SUMMARY ? gpu_summary_item : gpu_item,
              &items, &s->n_gpus);
  s->gpus = items;
  hr__dec_leave(d, mark);
  if(d->rc)
    hr_status_free(s);              /* a failed decode owns nothing */
}
