/*
 * status.c: hr_status from the daemon's connections and per-GPU state.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conn.h"
#include "status.h"

/* calloc that treats 0 elements as "no array" rather than a failure. */
static void *array_of(size_t n, size_t size, int *failed)
{
  void *p;

  if(n == 0)
    return NULL;
  p = calloc(n, size);
  if(!p)
    *failed = 1;
  return p;
}

static void fill_clients(hr__daemon *d, hr_status *st, int *failed)
{
  hr__conn *c;
  int n = 0;

  for(c = d->conns; c; c = c->next)
    if(!c->closing && c->id)
      n++;
  st->client_count = n;
  if(st->detail == HR_STATUS_SUMMARY)
    return;
  st->clients = array_of((size_t)n, sizeof(*st->clients), failed);
  if(*failed)
    return;
  for(c = d->conns; c && st->n_clients < n; c = c->next) {
    hr_status_client *sc;
    if(c->closing || !c->id)
      continue;
    sc = &st->clients[st->n_clients++];
    sc->id = c->id;
    sc->pid = c->peer.pid;
    sc->uid = c->peer.uid;
    sc->gid = c->peer.gid;
    memcpy(sc->name, c->name, sizeof(sc->name));
    sc->operator_ = c->is_operator != 0;
    sc->subscribed = c->sub_all || c->sub_mask != 0;
  }
}

static void fill_gpu(hr__daemon *d, int gi, hr_status_detail detail,
                     hr_status_gpu *sg, int *failed)
{
  const hr__gpu *g = hr__state_gpu(&d->state, gi);
  int i;

  sg->info = g->info;
  hr__state_budget(&d->state, gi, HR_MODE_HEADROOM, &sg->budget);
  sg->comm_ctas = hr__state_comm_ctas(&d->state, gi);
  sg->raised = g->raised;
  sg->budget_source = g->source;
  sg->n_clients = hr__state_clients_on(&d->state, gi);
  if(sg->n_clients < 0) {
    *failed = 1;
    return;
  }
  sg->comm_count = g->n_comms;
  hr__state_lease_counts(&d->state, gi, sg->lease_count);
  sg->incident_count = g->n_incidents;
  if(detail == HR_STATUS_SUMMARY)
    return;
  sg->comms = array_of((size_t)g->n_comms, sizeof(*sg->comms), failed);
  sg->leases = array_of((size_t)g->n_leases, sizeof(*sg->leases), failed);
  sg->incidents = array_of((size_t)g->n_incidents, sizeof(*sg->incidents),
                           failed);
  if(*failed)
    return;
  for(i = 0; i < g->n_comms; i++) {
    hr_status_comm *sc = &sg->comms[i];
    sc->id = g->comms[i].id;
    sc->client = g->comms[i].client;
    memcpy(sc->name, g->comms[i].name, sizeof(sc->name));
    sc->ctas = g->comms[i].ctas;
    sc->cga = g->comms[i].cga;
    sc->concurrent = g->comms[i].concurrent;
  }
  sg->n_comms = g->n_comms;
  for(i = 0; i < g->n_leases; i++) {
    sg->leases[i].id = g->leases[i].id;
    sg->leases[i].client = g->leases[i].client;
    sg->leases[i].cluster = g->leases[i].cluster;
    sg->leases[i].mode = g->leases[i].mode;
  }
  sg->n_leases = g->n_leases;
  if(g->n_incidents)
    memcpy(sg->incidents, g->incidents,
           (size_t)g->n_incidents * sizeof(*sg->incidents));
  sg->n_incidents = g->n_incidents;
}

int hr__status_build(hr__daemon *d, hr_status_detail detail, hr_status *st)
{
  int failed = 0, g;

  if(!d || !st || (detail != HR_STATUS_FULL && detail != HR_STATUS_SUMMARY))
    return HR_EINVAL;
  memset(st, 0, sizeof(*st));
  st->detail = detail;
  snprintf(st->daemon, sizeof(st->daemon), "headroomd %s", HR_VERSION_STRING);
  st->uptime_ms = (int64_t)((uv_hrtime() - d->start_ns) / 1000000);
  st->requests = d->requests;
  st->topology_source = d->topo.source;
  st->policy = d->state.policy;
  fill_clients(d, st, &failed);
  if(failed)
    goto out;
  st->gpus = array_of((size_t)d->state.n_gpus, sizeof(*st->gpus), &failed);
  if(failed)
    goto out;
  st->n_gpus = d->state.n_gpus;
  for(g = 0; g < st->n_gpus && !failed; g++)
    fill_gpu(d, g, detail, &st->gpus[g], &failed);
out:
  if(failed) {
    hr_status_free(st);
    memset(st, 0, sizeof(*st));
    return HR_ENOMEM;
  }
  return HR_OK;
}
