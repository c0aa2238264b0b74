/*
 * hr_payload.c: the payloads that several messages carry: a budget, a
 * policy, an incident's detail, a GPU's identity and the node topology.
 *
 * Each has one encoder and one decoder, with the field ranges written once
 * here and used by both directions.
 */
#include <string.h>

#include "hr_internal.h"

int hr__cluster_valid(int cluster)
{
  return cluster == 1 || cluster == 2 || cluster == 4 || cluster == 8;
}

/* ---- Budget ------------------------------------------------------------ */

#define NVLS_MAX 2                  /* NCCL_NVLS_ENABLE: 0, 1 or 2 (auto) */

void hr__budget_encode(hr__enc *e, cJSON *parent, const char *name,
                       const hr_budget *b)
{
  cJSON *o = hr__enc_object(e, parent, name), *nccl;

  if(!e->rc && !hr__cluster_valid(b->cluster))
    hr__enc_fail(e, HR_EINVAL);
  hr__enc_i64(e, o, "gpu", b->gpu, 0, HR_MAX_GPUS - 1);
  hr__enc_i64(e, o, "epoch", b->epoch, 0, HR__UINT32_MAX);
  hr__enc_name(e, o, "mode", hr_mode_name(b->mode));
  hr__enc_i64(e, o, "sms", b->sms, 1, HR_MAX_SMS);
  hr__enc_i64(e, o, "cluster", b->cluster, 1, HR_MAX_CGA);
  hr__enc_i64(e, o, "headroom", b->headroom, 0, HR_MAX_SMS);
  hr__enc_i64(e, o, "grid", b->grid, 0, HR_MAX_SMS);
  nccl = hr__enc_object(e, o, "nccl");
  hr__enc_i64(e, nccl, "min_ctas", b->nccl_min_ctas, 0, HR_MAX_CTAS);
  hr__enc_i64(e, nccl, "max_ctas", b->nccl_max_ctas, 0, HR_MAX_CTAS);
  hr__enc_i64(e, nccl, "cga_cluster_size", b->nccl_cga_cluster_size, 0,
              HR_MAX_CGA);
  hr__enc_i64(e, nccl, "nvls_enable", b->nccl_nvls_enable, 0, NVLS_MAX);
  hr__enc_bool(e, o, "degraded", b->degraded);
  hr__partition_encode(e, o, b->partition_granularity, b->partition_comm_sms,
                       b->partition_nccl_max_ctas);
}

void hr__partition_encode(hr__enc *e, cJSON *o, int granularity,
                          int comm_sms, int nccl_max_ctas)
{
  hr__enc_i64(e, o, "partition_granularity", granularity, 0, HR_MAX_SMS);
  hr__enc_i64(e, o, "partition_comm_sms", comm_sms, 0, HR_MAX_SMS);
  hr__enc_i64(e, o, "partition_nccl_max_ctas", nccl_max_ctas, 0, HR_MAX_CTAS);
}

void hr__partition_decode(hr__dec *d, const cJSON *o, int *granularity,
                          int *comm_sms, int *nccl_max_ctas)
{
  *granularity = 0;
  *comm_sms = 0;
  *nccl_max_ctas = 0;
  hr__dec_int(d, o, "partition_granularity", HR__OPTIONAL, 0, HR_MAX_SMS,
              granularity);
  hr__dec_int(d, o, "partition_comm_sms", HR__OPTIONAL, 0, HR_MAX_SMS,
              comm_sms);
  hr__dec_int(d, o, "partition_nccl_max_ctas", HR__OPTIONAL, 0, HR_MAX_CTAS,
              nccl_max_ctas);
}

void hr__mode_counts_encode(hr__enc *e, cJSON *parent, const char *name,
                            const int *counts)
{
  cJSON *o = hr__enc_object(e, parent, name);
  int m;

  for(m = 0; !e->rc && m < HR_MODE_COUNT; m++)
    hr__enc_i64(e, o, hr_mode_name((hr_mode)m), counts[m], 0,
                HR__INT32_MAX);
}

void hr__mode_counts_decode(hr__dec *d, const cJSON *parent,
                            const char *name, int *counts)
{
  const cJSON *o = hr__dec_object(d, parent, name, HR__REQUIRED);
  size_t mark;
  int m;

  memset(counts, 0, HR_MODE_COUNT * sizeof(*counts));
  if(!o)
    return;
  mark = hr__dec_enter(d, name);
  /* By mode name: a mode this side lacks is ignored, one the sender
   * lacks reads as 0. */
  for(m = 0; m < HR_MODE_COUNT; m++)
    hr__dec_int(d, o, hr_mode_name((hr_mode)m), HR__OPTIONAL, 0,
                HR__INT32_MAX, &counts[m]);
  hr__dec_leave(d, mark);
  if(d->rc)
    memset(counts, 0, HR_MODE_COUNT * sizeof(*counts));
}

void hr__budget_decode(hr__dec *d, const cJSON *parent, const char *name,
                       hr_budget *b)
{
  const cJSON *o = hr__dec_object(d, parent, name, HR__REQUIRED), *nccl;
  size_t mark, inner;
  int64_t epoch = 0;
  int mode = 0;
  bool degraded = false;

  if(!o)
    return;
  mark = hr__dec_enter(d, name);
  hr__dec_int(d, o, "gpu", HR__REQUIRED, 0, HR_MAX_GPUS - 1, &b->gpu);
  hr__dec_i64(d, o, "epoch", HR__REQUIRED, 0, HR__UINT32_MAX, &epoch);
  hr__dec_enum(d, o, "mode", HR__REQUIRED, hr__mode_name_i, HR_MODE_COUNT,
               &mode);
  hr__dec_int(d, o, "sms", HR__REQUIRED, 1, HR_MAX_SMS, &b->sms);
  hr__dec_int(d, o, "cluster", HR__REQUIRED, 1, HR_MAX_CGA, &b->cluster);
  if(!d->rc && !hr__cluster_valid(b->cluster))
    hr__dec_field_fail(d, "cluster", "must be 1, 2, 4 or 8");
  hr__dec_int(d, o, "headroom", HR__REQUIRED, 0, HR_MAX_SMS, &b->headroom);
  hr__dec_int(d, o, "grid", HR__REQUIRED, 0, HR_MAX_SMS, &b->grid);
  nccl = hr__dec_object(d, o, "nccl", HR__REQUIRED);
  if(nccl) {
    inner = hr__dec_enter(d, "nccl");
    hr__dec_int(d, nccl, "min_ctas", HR__REQUIRED, 0, HR_MAX_CTAS,
                &b->nccl_min_ctas);
    hr__dec_int(d, nccl, "max_ctas", HR__REQUIRED, 0, HR_MAX_CTAS,
                &b->nccl_max_ctas);
    hr__dec_int(d, nccl, "cga_cluster_size", HR__REQUIRED, 0, HR_MAX_CGA,
                &b->nccl_cga_cluster_size);
    hr__dec_int(d, nccl, "nvls_enable", HR__REQUIRED, 0, NVLS_MAX,
                &b->nccl_nvls_enable);
    hr__dec_leave(d, inner);
  }
  hr__dec_bool(d, o, "degraded", HR__REQUIRED, &degraded);
  /* 0 when absent says partition leases are not to be had there. */
  hr__partition_decode(d, o, &b->partition_granularity,
                       &b->partition_comm_sms, &b->partition_nccl_max_ctas);
  hr__dec_leave(d, mark);
  b->epoch = (uint32_t)epoch;
  b->mode = (hr_mode)mode;
  b->degraded = degraded;
}

/* ---- Policy ------------------------------------------------------------ */

void hr__policy_encode(hr__enc *e, cJSON *parent, const char *name,
                       const hr_policy *p, unsigned fields)
{
  cJSON *o = hr__enc_object(e, parent, name);

  if(fields & HR_POLICY_MIN_HEADROOM)
    hr__enc_i64(e, o, "min_headroom", p->min_headroom, 0, HR_MAX_SMS);
  if(fields & HR_POLICY_MAX_HEADROOM)
    hr__enc_i64(e, o, "max_headroom", p->max_headroom, 0, HR_MAX_SMS);
  if(fields & HR_POLICY_MIN_GRID)
    hr__enc_i64(e, o, "min_grid", p->min_grid, 1, HR_MAX_SMS);
  if(fields & HR_POLICY_INCIDENT_RAISE)
    hr__enc_bool(e, o, "incident_raise", p->incident_raise);
}

void hr__policy_decode(hr__dec *d, const cJSON *parent, const char *name,
                       hr_policy *p, unsigned required, unsigned *fields)
{
  const cJSON *o = hr__dec_object(d, parent, name, HR__REQUIRED);
  unsigned found = 0;
  bool raise = false;
  size_t mark;

  *fields = 0;
  if(!o)
    return;
  mark = hr__dec_enter(d, name);
  /* Presence is recorded before the value is checked: a bad value fails
   * the whole message anyway. */
  if(hr__dec_field(d, o, "min_headroom", HR__OPTIONAL))
    found |= HR_POLICY_MIN_HEADROOM;
  if(hr__dec_field(d, o, "max_headroom", HR__OPTIONAL))
    found |= HR_POLICY_MAX_HEADROOM;
  if(hr__dec_field(d, o, "min_grid", HR__OPTIONAL))
    found |= HR_POLICY_MIN_GRID;
  if(hr__dec_field(d, o, "incident_raise", HR__OPTIONAL))
    found |= HR_POLICY_INCIDENT_RAISE;
  hr__dec_int(d, o, "min_headroom", !!(required & HR_POLICY_MIN_HEADROOM),
              0, HR_MAX_SMS, &p->min_headroom);
  hr__dec_int(d, o, "max_headroom", !!(required & HR_POLICY_MAX_HEADROOM),
              0, HR_MAX_SMS, &p->max_headroom);
  hr__dec_int(d, o, "min_grid", !!(required & HR_POLICY_MIN_GRID),
              1, HR_MAX_SMS, &p->min_grid);
  raise = p->incident_raise != 0;
  hr__dec_bool(d, o, "incident_raise",
               !!(required & HR_POLICY_INCIDENT_RAISE), &raise);
  if(found & HR_POLICY_INCIDENT_RAISE)
    p->incident_raise = raise;
  hr__dec_leave(d, mark);
  *fields = found;
}

/* ---- Incident detail --------------------------------------------------- */

/* The fields in wire order, as offsets so encode and decode share one list. */
static const struct {
  const char *name;
  size_t offset;
} detail_fields[] = {
  { "barrier", offsetof(hr_incident_detail, barrier) },
  { "arrived", offsetof(hr_incident_detail, arrived) },
  { "expected", offsetof(hr_incident_detail, expected) },
  { "sm", offsetof(hr_incident_detail, sm) },
  { "grid", offsetof(hr_incident_detail, grid) },
  { "timeout_ms", offsetof(hr_incident_detail, timeout_ms) },
  { "cuda_error", offsetof(hr_incident_detail, cuda_error) },
};
#define N_DETAIL_FIELDS (sizeof(detail_fields) / sizeof(detail_fields[0]))

static int *detail_field(hr_incident_detail *dt, size_t i)
{
  return (int *)((char *)dt + detail_fields[i].offset);
}

void hr__detail_unknown(hr_incident_detail *dt)
{
  size_t i;

  for(i = 0; i < N_DETAIL_FIELDS; i++)
    *detail_field(dt, i) = -1;
}

void hr__detail_encode(hr__enc *e, cJSON *parent, const char *name,
                       const hr_incident_detail *dt)
{
  hr_incident_detail copy = *dt;
  cJSON *o;
  size_t i;
  int any = 0;

  for(i = 0; i < N_DETAIL_FIELDS; i++)
    any |= *detail_field(&copy, i) != -1;
  if(!any)
    return;
  o = hr__enc_object(e, parent, name);
  for(i = 0; i < N_DETAIL_FIELDS; i++) {
    int v = *detail_field(&copy, i);
    if(v != -1)                   /* -1 is "unknown": left out */
      hr__enc_i64(e, o, detail_fields[i].name, v, 0, HR__INT32_MAX);
  }
}

void hr__detail_decode(hr__dec *d, const cJSON *parent, const char *name,
                       hr_incident_detail *dt)
{
  const cJSON *o = hr__dec_object(d, parent, name, HR__OPTIONAL);
  size_t i, mark;

  hr__detail_unknown(dt);
  if(!o)
    return;
  mark = hr__dec_enter(d, name);
  for(i = 0; i < N_DETAIL_FIELDS; i++)
    hr__dec_int(d, o, detail_fields[i].name, HR__OPTIONAL, HR__DETAIL_MIN,
                HR__INT32_MAX, detail_field(dt, i));
  hr__dec_leave(d, mark);
}

/* ---- GPUs and topology ------------------------------------------------- */

void hr__gpu_info_encode(hr__enc *e, cJSON *obj, const hr_gpu_info *g)
{
  hr__enc_i64(e, obj, "index", g->index, 0, HR_MAX_GPUS - 1);
  hr__enc_i64(e, obj, "sms", g->sms, 1, HR_MAX_SMS);
  hr__enc_string(e, obj, "name", g->name, sizeof(g->name));
}

void hr__gpu_info_decode(hr__dec *d, const cJSON *obj, hr_gpu_info *g)
{
  hr__dec_int(d, obj, "index", HR__REQUIRED, 0, HR_MAX_GPUS - 1, &g->index);
  hr__dec_int(d, obj, "sms", HR__REQUIRED, 1, HR_MAX_SMS, &g->sms);
  hr__dec_string(d, obj, "name", HR__OPTIONAL, g->name, sizeof(g->name));
}

void hr__topology_encode(hr__enc *e, cJSON *parent, const char *name,
                         const hr_topology *t)
{
  cJSON *o = hr__enc_object(e, parent, name), *gpus;
  int i;

  hr__enc_name(e, o, "source", hr_topology_source_name(t->source));
  if(t->n_gpus < 0 || t->n_gpus > HR_MAX_GPUS)
    hr__enc_fail(e, HR_EINVAL);
  gpus = hr__enc_array(e, o, "gpus");
  for(i = 0; !e->rc && i < t->n_gpus; i++)
    hr__gpu_info_encode(e, hr__enc_object(e, gpus, NULL), &t->gpus[i]);
}

void hr__topology_decode(hr__dec *d, const cJSON *parent, const char *name,
                         hr_topology *t)
{
  const cJSON *o = hr__dec_object(d, parent, name, HR__REQUIRED), *gpus, *it;
  size_t mark, inner;
  int source = 0, n = 0, i = 0;

  if(!o)
    return;
  mark = hr__dec_enter(d, name);
  hr__dec_enum(d, o, "source", HR__REQUIRED, hr__topology_source_name_i,
               HR_TOPO_COUNT, &source);
  gpus = hr__dec_array(d, o, "gpus", HR__REQUIRED, HR_MAX_GPUS, &n);
  for(it = gpus ? gpus->child : NULL; it && !d->rc; it = it->next, i++) {
    inner = hr__dec_enter_index(d, "gpus", i);
    hr__dec_expect_object(d, it);
    hr__gpu_info_decode(d, it, &t->gpus[i]);
    hr__dec_leave(d, inner);
  }
  hr__dec_leave(d, mark);
  t->source = (hr_topology_source)source;
  t->n_gpus = d->rc ? 0 : n;
}
