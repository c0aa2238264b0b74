/*
 * state.c: per-GPU footprints, leases, incidents, budgets and epochs
 * (see state.h).
 */
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "state.h"

#define GROW_FIRST 8

static hr__gpu *gpu_at(hr__state *s, int gpu)
{
  if(!s || gpu < 0 || gpu >= s->n_gpus)
    return NULL;
  return &s->gpus[gpu];
}

const hr__gpu *hr__state_gpu(const hr__state *s, int gpu)
{
  if(!s || gpu < 0 || gpu >= s->n_gpus)
    return NULL;
  return &s->gpus[gpu];
}

static int lease_cluster(const hr__gpu *g)
{
  int i, c = 0;

  /* An agnostic kernel gets no headroom, and a partition kernel runs on
   * SMs NCCL never touches, so neither one's clusters strand anything the
   * headroom must cover (policy.h). */
  for(i = 0; i < g->n_leases; i++)
    if(g->leases[i].mode != HR_MODE_AGNOSTIC &&
       g->leases[i].mode != HR_MODE_PARTITION && g->leases[i].cluster > c)
      c = g->leases[i].cluster;
  return c ? c : HR__DEFAULT_CLUSTER;
}

static void policy_input(const hr__state *s, const hr__gpu *g,
                         hr_policy_input *in)
{
  in->sms = g->info.sms;
  in->cluster = lease_cluster(g);
  in->raised = g->raised;
  in->n_footprints = g->n_comms;
  in->footprints = g->fps;
  in->n_calib = 0;
  in->calib = NULL;
  in->granularity = g->granularity;
  if(s->calib && hr__calibration_covers(s->calib, &g->info)) {
    in->n_calib = s->calib->n_budgets;
    in->calib = s->calib->budgets;
  }
}

/* The numbers a client acts on; gpu, epoch and mode are bookkeeping. */
static int budget_differs(const hr_budget *a, const hr_budget *b)
{
  return a->sms != b->sms || a->cluster != b->cluster ||
         a->headroom != b->headroom || a->grid != b->grid ||
         a->nccl_min_ctas != b->nccl_min_ctas ||
         a->nccl_max_ctas != b->nccl_max_ctas ||
         a->nccl_cga_cluster_size != b->nccl_cga_cluster_size ||
         a->nccl_nvls_enable != b->nccl_nvls_enable ||
         a->partition_granularity != b->partition_granularity ||
         a->partition_comm_sms != b->partition_comm_sms ||
         a->partition_nccl_max_ctas != b->partition_nccl_max_ctas;
}

/* Recompute GPU `gi`'s budget; bump its epoch when the numbers changed.
 * `bump` 0 is for start-up and restore, where there is no "before". */
static void recompute(hr__state *s, int gi, int bump, hr__gpu_mask *changed)
{
  hr__gpu *g = &s->gpus[gi];
  hr_policy_input in;
  hr_budget b;

  policy_input(s, g, &in);
  memset(&b, 0, sizeof(b));
  if(hr__policy_budget_src(&s->policy, &in, &b, &g->source)) {
    /* Only a bug can get here: the inputs were all range-checked. Keep
     * the budget in force rather than hand out a broken one. */
    hr__err("gpu %d: policy rejected its inputs; budget kept", gi);
    return;
  }
  b.gpu = gi;
  b.mode = HR_MODE_HEADROOM;
  if(bump && budget_differs(&b, &g->budget)) {
    g->epoch++;
    if(g->epoch == 0)
      g->epoch = 1; /* 0 is never an epoch: clients use it for "none" */
    if(changed)
      *changed |= (hr__gpu_mask)1 << gi;
    s->dirty = 1;
  }
  b.epoch = g->epoch;
  g->budget = b;
}

int hr__state_init(hr__state *s, const hr_topology *topo,
                   const int *granularity, const hr_policy *policy)
{
  int g;

  if(!s || !topo || !policy || topo->n_gpus < 1 ||
     topo->n_gpus > HR_MAX_GPUS)
    return HR_EINVAL;
  if(hr__policy_validate(policy, NULL, 0))
    return HR_EINVAL;
  for(g = 0; g < topo->n_gpus; g++) {
    if(topo->gpus[g].sms < 1 || topo->gpus[g].sms > HR_MAX_SMS)
      return HR_EINVAL;
    if(granularity && (granularity[g] < 0 || granularity[g] > HR_MAX_SMS))
      return HR_EINVAL;
  }
  memset(s, 0, sizeof(*s));
  s->gpus = calloc((size_t)topo->n_gpus, sizeof(*s->gpus));
  if(!s->gpus)
    return HR_ENOMEM;
  s->policy = *policy;
  s->n_gpus = topo->n_gpus;
  s->next_client = s->next_comm = s->next_lease = s->next_incident = 1;
  for(g = 0; g < s->n_gpus; g++) {
    s->gpus[g].info = topo->gpus[g];
    s->gpus[g].info.index = g;
    s->gpus[g].granularity = granularity ? granularity[g] : 0;
    s->gpus[g].epoch = 1;
    s->gpus[g].raise.last_uid = -1;
    recompute(s, g, 0, NULL);
  }
  return HR_OK;
}

void hr__state_free(hr__state *s)
{
  int g;

  if(!s || !s->gpus)
    return;
  for(g = 0; g < s->n_gpus; g++) {
    free(s->gpus[g].comms);
    free(s->gpus[g].fps);
    free(s->gpus[g].leases);
  }
  free(s->gpus);
  s->gpus = NULL;
  s->n_gpus = 0;
  free(s->calib);
  s->calib = NULL;
}

int64_t hr__state_client_id(hr__state *s)
{
  return s->next_client++;
}

int hr__state_budget(const hr__state *s, int gpu, hr_mode mode,
                     hr_budget *out)
{
  const hr__gpu *g = hr__state_gpu(s, gpu);

  if(!g || !out)
    return HR_ENOTFOUND;
  return hr__policy_lease_budget(&g->budget, mode, out);
}

/* ---- footprints -------------------------------------------------------- */

static int comms_reserve(hr__gpu *g)
{
  hr__comm_rec *c;
  hr_footprint *f;
  int cap;

  if(g->n_comms < g->cap_comms)
    return HR_OK;
  cap = g->cap_comms ? g->cap_comms * 2 : GROW_FIRST;
  c = realloc(g->comms, (size_t)cap * sizeof(*c));
  if(!c)
    return HR_ENOMEM;
  g->comms = c;
  f = realloc(g->fps, (size_t)cap * sizeof(*f));
  if(!f)
    return HR_ENOMEM; /* comms grew alone: harmless, cap stays put */
  g->fps = f;
  g->cap_comms = cap;
  return HR_OK;
}

int hr__state_comm_add(hr__state *s, int64_t client,
                       const hr_req_register_comm *req, int64_t *id,
                       hr__gpu_mask *changed)
{
  hr__gpu *g;
  hr__comm_rec *c;
  int err;

  if(!s || !req || client < 1)
    return HR_EINVAL;
  g = gpu_at(s, req->gpu);
  if(!g)
    return HR_ENOTFOUND;
  if(req->ctas < 1 || req->ctas > HR_MAX_CTAS || req->cga < 1 ||
     req->cga > HR_MAX_CGA || req->concurrent < 1 ||
     req->concurrent > HR_MAX_CONCURRENT)
    return HR_EINVAL;
  err = comms_reserve(g);
  if(err)
    return err;
  c = &g->comms[g->n_comms];
  memset(c, 0, sizeof(*c));
  c->id = s->next_comm++;
  c->client = client;
  memcpy(c->name, req->name, sizeof(c->name));
  c->name[sizeof(c->name) - 1] = '\0';
  c->ctas = req->ctas;
  c->cga = req->cga;
  c->concurrent = req->concurrent;
  g->fps[g->n_comms].ctas = req->ctas;
  g->fps[g->n_comms].cga = req->cga;
  g->fps[g->n_comms].concurrent = req->concurrent;
  g->n_comms++;
  recompute(s, req->gpu, 1, changed);
  if(id)
    *id = c->id;
  return HR_OK;
}

static void comm_delete(hr__gpu *g, int i)
{
  int tail = g->n_comms - i - 1;

  memmove(&g->comms[i], &g->comms[i + 1], (size_t)tail * sizeof(*g->comms));
  memmove(&g->fps[i], &g->fps[i + 1], (size_t)tail * sizeof(*g->fps));
  g->n_comms--;
}

int hr__state_comm_remove(hr__state *s, int64_t client, int64_t comm,
                          hr__gpu_mask *changed)
{
  int gi, i;

  if(!s)
    return HR_EINVAL;
  for(gi = 0; gi < s->n_gpus; gi++) {
    hr__gpu *g = &s->gpus[gi];
    for(i = 0; i < g->n_comms; i++) {
      if(g->comms[i].id != comm)
        continue;
      if(g->comms[i].client != client)
        return HR_ENOTFOUND; /* someone else's: not this client's to touch */
      comm_delete(g, i);
      recompute(s, gi, 1, changed);
      return HR_OK;
    }
  }
  return HR_ENOTFOUND;
}

/* ---- leases ------------------------------------------------------------ */

static int valid_cluster(int c)
{
  return c == 1 || c == 2 || c == 4 || c == 8;
}

int hr__state_lease_add(hr__state *s, int64_t client, const hr_req_lease *req,
                        int64_t *id, hr_budget *out, hr__gpu_mask *changed)
{
  hr__gpu *g;
  hr__lease_rec *l;

  if(!s || !req || client < 1)
    return HR_EINVAL;
  g = gpu_at(s, req->gpu);
  if(!g)
    return HR_ENOTFOUND;
  if(!valid_cluster(req->cluster))
    return HR_EINVAL;
  /* What each mode gets is the policy's (policy.h); a partition lease
   * only where the GPU's budget has a partition. */
  if((int)req->mode < 0 || req->mode >= HR_MODE_COUNT)
    return HR_EUNSUPPORTED;
  if(req->mode == HR_MODE_PARTITION &&
     !g->budget.partition_granularity) {
    if(out)
      hr__state_budget(s, req->gpu, req->mode, out);
    return HR_EUNSUPPORTED;
  }
  if(g->n_leases == g->cap_leases) {
    int cap = g->cap_leases ? g->cap_leases * 2 : GROW_FIRST;
    hr__lease_rec *p = realloc(g->leases, (size_t)cap * sizeof(*p));
    if(!p)
      return HR_ENOMEM;
    g->leases = p;
    g->cap_leases = cap;
  }
  l = &g->leases[g->n_leases++];
  l->id = s->next_lease++;
  l->client = client;
  l->cluster = req->cluster;
  l->mode = req->mode;
  recompute(s, req->gpu, 1, changed);
  if(id)
    *id = l->id;
  if(out)
    hr__state_budget(s, req->gpu, req->mode, out);
  return HR_OK;
}

static void lease_delete(hr__gpu *g, int i)
{
  memmove(&g->leases[i], &g->leases[i + 1],
          (size_t)(g->n_leases - i - 1) * sizeof(*g->leases));
  g->n_leases--;
}

int hr__state_lease_remove(hr__state *s, int64_t client, int64_t lease,
                           hr__gpu_mask *changed)
{
  int gi, i;

  if(!s)
    return HR_EINVAL;
  for(gi = 0; gi < s->n_gpus; gi++) {
    hr__gpu *g = &s->gpus[gi];
    for(i = 0; i < g->n_leases; i++) {
      if(g->leases[i].id != lease)
        continue;
      if(g->leases[i].client != client)
        return HR_ENOTFOUND;
      lease_delete(g, i);
      recompute(s, gi, 1, changed);
      return HR_OK;
    }
  }
  return HR_ENOTFOUND;
}

/* ---- incidents --------------------------------------------------------- */

static void incident_delete(hr__gpu *g, int i)
{
  int tail = g->n_incidents - i - 1;

  memmove(&g->incidents[i], &g->incidents[i + 1],
          (size_t)tail * sizeof(g->incidents[0]));
  memmove(&g->incident_uid[i], &g->incident_uid[i + 1],
          (size_t)tail * sizeof(g->incident_uid[0]));
  g->n_incidents--;
}

/* The incident to push out for a new one of `kind` from `uid`, -1 when
 * the kind has room (state.h: the oldest of the uid holding the most of
 * that kind, counting the new one, the reporter's own on a tie). */
static int incident_victim(const hr__gpu *g, hr_incident_kind kind, int uid)
{
  int i, j, n = 0, best = -1, best_count = 0;

  for(i = 0; i < g->n_incidents; i++)
    if(g->incidents[i].kind == kind)
      n++;
  if(n < HR__INCIDENTS_PER_KIND)
    return -1;
  /* Oldest first, so the first entry of each uid is its oldest. */
  for(i = 0; i < g->n_incidents; i++) {
    int count = 0, first = 1;
    if(g->incidents[i].kind != kind)
      continue;
    for(j = 0; j < g->n_incidents; j++) {
      if(g->incidents[j].kind != kind || g->incident_uid[j] != g->incident_uid[i])
        continue;
      if(j < i)
        first = 0;
      count++;
    }
    if(!first)
      continue;
    if(g->incident_uid[i] == uid)
      count++;                      /* the new one is this uid's too */
    if(count > best_count ||
       (count == best_count && g->incident_uid[i] == uid)) {
      best = i;
      best_count = count;
    }
  }
  return best;
}

static void incident_keep(hr__gpu *g, const hr_status_incident *inc, int uid)
{
  int victim = incident_victim(g, inc->kind, uid);

  if(victim >= 0)
    incident_delete(g, victim);
  if(g->n_incidents == HR__INCIDENTS_KEPT)
    incident_delete(g, 0);          /* only a kind out of range gets here */
  g->incidents[g->n_incidents] = *inc;
  g->incident_uid[g->n_incidents] = uid;
  g->n_incidents++;
}

/* Whether `uid` raised this GPU less than the interval ago. A clock that
 * went back does not count as recent: it cannot hold raises off. */
static int raise_limited(const hr__state *s, const hr__gpu *g, int uid,
                         int64_t now)
{
  int i;

  if(s->raise_interval_ms <= 0)
    return 0;
  for(i = 0; i < g->n_raise_by; i++)
    if(g->raise_by[i].uid == uid)
      return now >= g->raise_by[i].ms &&
             now - g->raise_by[i].ms < s->raise_interval_ms;
  return 0;
}

static void raise_note(hr__gpu *g, int uid, int64_t now)
{
  int i, oldest = 0;

  for(i = 0; i < g->n_raise_by; i++) {
    if(g->raise_by[i].uid == uid) {
      g->raise_by[i].ms = now;
      return;
    }
    if(g->raise_by[i].ms < g->raise_by[oldest].ms)
      oldest = i;
  }
  if(g->n_raise_by < HR__RAISE_UIDS)
    oldest = g->n_raise_by++;
  g->raise_by[oldest].uid = uid;
  g->raise_by[oldest].ms = now;
}

/* Whether footprint owner `owner` is the reporter's tenant: its uid
 * when the daemon can tell, else the very same client. */
static int same_tenant(const hr__state *s, int64_t owner, int64_t client,
                       int uid)
{
  if(owner == client)
    return 1;
  return s->uid_of && uid >= 0 && s->uid_of(s->uid_ctx, owner) == uid;
}

/* The raise a barrier timeout from `client` (of `uid`) earns: one cluster
 * above the budget the policy gives the GPU without that tenant's own
 * footprints. A reporter cannot make its inflated footprint the GPU's
 * lasting floor, from this connection or another of its uid; its
 * footprints count for as long as they are registered, like any other. */
static int raise_without(const hr__state *s, const hr__gpu *g,
                         int64_t client, int uid)
{
  hr_policy_input in;
  hr_footprint *others;
  int i, n = 0, raised;

  policy_input(s, g, &in);
  others = malloc((size_t)(g->n_comms ? g->n_comms : 1) * sizeof(*others));
  if(!others)
    return hr__policy_raise(&s->policy, &in); /* more headroom, not less */
  for(i = 0; i < g->n_comms; i++)
    if(!same_tenant(s, g->comms[i].client, client, uid))
      others[n++] = g->fps[i];
  in.n_footprints = n;
  in.footprints = others;
  /* A calibrated term was measured against every footprint in force;
   * without some of them only the theory applies. */
  if(n != g->n_comms) {
    in.n_calib = 0;
    in.calib = NULL;
  }
  raised = hr__policy_raise(&s->policy, &in);
  free(others);
  return raised;
}

int hr__state_report(hr__state *s, int64_t client, int uid,
                     const hr_req_report *req, int64_t time_ms,
                     int64_t *incident, hr_budget *out,
                     hr__gpu_mask *changed, hr__raise_outcome *outcome)
{
  hr_status_incident inc;
  hr_mode mode = HR_MODE_HEADROOM;
  hr__gpu *g;
  int i;

  if(outcome)
    *outcome = HR__RAISE_NONE;
  if(!s || !req || client < 1)
    return HR_EINVAL;
  g = gpu_at(s, req->gpu);
  if(!g)
    return HR_ENOTFOUND;
  if((int)req->kind < 0 || req->kind >= HR_INCIDENT_COUNT)
    return HR_EINVAL;
  /* An incident belongs to its reporter: a lease it names is its own. */
  if(req->lease) {
    for(i = 0; i < g->n_leases && g->leases[i].id != req->lease; i++)
      ;
    if(i == g->n_leases)
      return HR_ENOTFOUND;
    if(g->leases[i].client != client)
      return HR_EPERM;
    mode = g->leases[i].mode;
  }
  memset(&inc, 0, sizeof(inc));
  inc.id = s->next_incident++;
  inc.client = client;
  inc.lease = req->lease;
  inc.time_ms = time_ms;
  inc.kind = req->kind;
  inc.detail = req->detail;
  memcpy(inc.message, req->message, sizeof(inc.message));
  inc.message[sizeof(inc.message) - 1] = '\0';
  incident_keep(g, &inc, uid);
  s->dirty = 1;

  if(req->kind == HR_INCIDENT_BARRIER_TIMEOUT && s->policy.incident_raise) {
    if(raise_limited(s, g, uid, time_ms)) {
      if(outcome)
        *outcome = HR__RAISE_LIMITED;
    } else {
      int raised = raise_without(s, g, client, uid);
      raise_note(g, uid, time_ms);
      if(raised > g->raised) {
        g->raised = raised;
        g->raise.raises++;
        g->raise.last_ms = time_ms;
        g->raise.last_uid = uid;
        g->raise.last_incident = inc.id;
      }
      recompute(s, req->gpu, 1, changed);
      if(outcome)
        *outcome = HR__RAISE_DONE;
    }
  }
  if(incident)
    *incident = inc.id;
  if(out)
    hr__state_budget(s, req->gpu, mode, out);
  return HR_OK;
}

int hr__state_raise_info(const hr__state *s, int gpu, hr_raise *out)
{
  const hr__gpu *g = hr__state_gpu(s, gpu);

  if(!g || !out)
    return HR_ENOTFOUND;
  memset(out, 0, sizeof(*out));
  out->gpu = gpu;
  out->raised = g->raised;
  out->headroom = g->budget.headroom;
  out->raises = g->raise.raises;
  out->last_time_ms = g->raise.last_ms;
  out->last_uid = g->raise.last_uid;
  out->last_incident = g->raise.last_incident;
  return HR_OK;
}

int hr__state_raises_clear(hr__state *s, int gpu, hr__gpu_mask *changed)
{
  int gi, cleared = 0;

  if(!s || gpu < -1 || gpu >= s->n_gpus)
    return HR_ENOTFOUND;
  for(gi = 0; gi < s->n_gpus; gi++) {
    hr__gpu *g = &s->gpus[gi];
    if(gpu != -1 && gi != gpu)
      continue;
    if(g->raised || g->raise.raises)
      cleared++;
    g->raised = 0;
    memset(&g->raise, 0, sizeof(g->raise));
    g->raise.last_uid = -1;
    g->n_raise_by = 0;
    s->dirty = 1;
    recompute(s, gi, 1, changed);
  }
  return cleared;
}

/* ---- policy, clients, restore ------------------------------------------ */

void hr__state_set_policy(hr__state *s, const hr_policy *policy,
                          hr__gpu_mask *changed)
{
  int g;

  if(!s || !policy)
    return;
  s->policy = *policy;
  for(g = 0; g < s->n_gpus; g++)
    recompute(s, g, 1, changed);
}

int hr__state_set_calibration(hr__state *s, const hr__calibration *c,
                              hr__gpu_mask *changed)
{
  hr__calibration *copy = NULL;
  int g, covered = 0;

  if(!s)
    return HR_EINVAL;
  if(c) {
    copy = malloc(sizeof(*copy));
    if(!copy)
      return HR_ENOMEM;
    *copy = *c;
  }
  free(s->calib);
  s->calib = copy;
  for(g = 0; g < s->n_gpus; g++) {
    if(copy && hr__calibration_covers(copy, &s->gpus[g].info))
      covered++;
    recompute(s, g, 1, changed);
  }
  return covered;
}

void hr__state_drop_client(hr__state *s, int64_t client,
                           hr__gpu_mask *changed)
{
  int gi, i, dropped;

  if(!s)
    return;
  for(gi = 0; gi < s->n_gpus; gi++) {
    hr__gpu *g = &s->gpus[gi];
    dropped = 0;
    for(i = g->n_comms - 1; i >= 0; i--) {
      if(g->comms[i].client == client) {
        comm_delete(g, i);
        dropped = 1;
      }
    }
    for(i = g->n_leases - 1; i >= 0; i--) {
      if(g->leases[i].client == client) {
        lease_delete(g, i);
        dropped = 1;
      }
    }
    if(dropped)
      recompute(s, gi, 1, changed);
  }
}

static int cmp_i64(const void *a, const void *b)
{
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}

int hr__state_clients_on(const hr__state *s, int gpu)
{
  const hr__gpu *g = hr__state_gpu(s, gpu);
  int64_t *ids;
  int n = 0, i, distinct = 0;

  if(!g || g->n_comms + g->n_leases == 0)
    return 0;
  ids = malloc((size_t)(g->n_comms + g->n_leases) * sizeof(*ids));
  if(!ids)
    return -1;
  for(i = 0; i < g->n_comms; i++)
    ids[n++] = g->comms[i].client;
  for(i = 0; i < g->n_leases; i++)
    ids[n++] = g->leases[i].client;
  qsort(ids, (size_t)n, sizeof(*ids), cmp_i64);
  for(i = 0; i < n; i++)
    if(i == 0 || ids[i] != ids[i - 1])
      distinct++;
  free(ids);
  return distinct;
}

int hr__state_comm_ctas(const hr__state *s, int gpu)
{
  const hr__gpu *g = hr__state_gpu(s, gpu);
  hr_policy_input in;

  if(!g)
    return 0;
  memset(&in, 0, sizeof(in));
  in.n_footprints = g->n_comms;
  in.footprints = g->fps;
  return hr__policy_comm_ctas(&in);
}

void hr__state_lease_counts(const hr__state *s, int gpu, int *counts)
{
  const hr__gpu *g = hr__state_gpu(s, gpu);
  int i;

  memset(counts, 0, HR_MODE_COUNT * sizeof(*counts));
  for(i = 0; g && i < g->n_leases; i++)
    if((int)g->leases[i].mode >= 0 && g->leases[i].mode < HR_MODE_COUNT)
      counts[g->leases[i].mode]++;
}

int hr__state_restore(hr__state *s, int gpu, int raised, uint32_t epoch,
                      const hr_status_incident *incidents, const int *uids,
                      int n)
{
  hr__gpu *g = gpu_at(s, gpu);
  int i;

  if(!g)
    return HR_ENOTFOUND;
  if(raised < 0 || raised > HR_MAX_SMS || epoch == 0 || n < 0 ||
     (n > 0 && !incidents))
    return HR_EINVAL;
  g->raised = raised;
  g->epoch = epoch;
  g->n_incidents = 0;
  for(i = 0; i < n; i++) {
    incident_keep(g, &incidents[i], uids ? uids[i] : -1);
    if(incidents[i].id >= s->next_incident)
      s->next_incident = incidents[i].id + 1;
  }
  recompute(s, gpu, 0, NULL);
  return HR_OK;
}

int hr__state_restore_raise(hr__state *s, int gpu, const hr__raise_rec *r)
{
  hr__gpu *g = gpu_at(s, gpu);

  if(!g)
    return HR_ENOTFOUND;
  if(!r || r->raises < 0 || r->last_ms < 0 || r->last_uid < -1 ||
     r->last_incident < 0)
    return HR_EINVAL;
  g->raise = *r;
  return HR_OK;
}
