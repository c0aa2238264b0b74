/*
 * tenant.c: per-uid counts and the per-uid limits (tenant.h).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tenant.h"

#define FIRST_CAP 8

hr__tenant *hr__tenants_find(hr__tenants *t, int uid)
{
  int i;

  if(!t)
    return NULL;
  for(i = 0; i < t->n; i++)
    if(t->v[i].uid == uid)
      return &t->v[i];
  return NULL;
}

hr__tenant *hr__tenants_get(hr__tenants *t, int uid)
{
  hr__tenant *x = hr__tenants_find(t, uid);

  if(x || !t)
    return x;
  if(t->n == t->cap) {
    /* One entry per uid with a connection: never more than max_clients,
     * which caps the table. */
    int cap = t->cap ? t->cap * 2 : FIRST_CAP;
    hr__tenant *v = realloc(t->v, (size_t)cap * sizeof(*v));
    if(!v)
      return NULL;
    t->v = v;
    t->cap = cap;
  }
  x = &t->v[t->n++];
  memset(x, 0, sizeof(*x));
  x->uid = uid;
  return x;
}

void hr__tenants_put(hr__tenants *t, int uid)
{
  hr__tenant *x = hr__tenants_find(t, uid);

  if(!x || x->conns > 0 || x->comms > 0)
    return;
  *x = t->v[--t->n];
}

void hr__tenants_free(hr__tenants *t)
{
  if(!t)
    return;
  free(t->v);
  memset(t, 0, sizeof(*t));
}

int hr__tenant_reserve(const hr__config *cfg)
{
  int half = cfg->max_clients / 2;

  return cfg->reserved_clients < half ? cfg->reserved_clients : half;
}

int hr__tenant_admit(const hr__config *cfg, int clients, int held,
                     char *why, size_t n)
{
  int reserve;

  if(!cfg)
    return HR_EINVAL;
  reserve = hr__tenant_reserve(cfg);
  if(clients >= cfg->max_clients) {
    snprintf(why, n, "too many clients (max_clients = %d)",
             cfg->max_clients);
    return HR_ELIMIT;
  }
  if(held >= cfg->max_clients_per_uid) {
    snprintf(why, n, "too many clients of this uid (max_clients_per_uid "
             "= %d)", cfg->max_clients_per_uid);
    return HR_ELIMIT;
  }
  if(clients >= cfg->max_clients - reserve && held >= reserve) {
    snprintf(why, n, "too many clients of this uid: the last %d of "
             "max_clients (%d) are kept for uids holding fewer than %d "
             "(reserved_clients)", reserve, cfg->max_clients, reserve);
    return HR_ELIMIT;
  }
  return HR_OK;
}

int hr__tenant_may_register(const hr__config *cfg, const hr__tenant *t,
                            int gpu, int ctas, char *why, size_t n)
{
  int comms = t ? t->comms : 0;
  long have;

  if(!cfg || gpu < 0 || gpu >= HR_MAX_GPUS || ctas < 0)
    return HR_EINVAL;
  have = t ? t->ctas[gpu] : 0;
  if(comms >= cfg->max_comms_per_uid) {
    snprintf(why, n, "at most %d footprints per uid (max_comms_per_uid)",
             cfg->max_comms_per_uid);
    return HR_ELIMIT;
  }
  if(have + ctas > cfg->max_comm_ctas_per_uid) {
    snprintf(why, n, "at most %d CTAs in flight per uid on one GPU "
             "(max_comm_ctas_per_uid): this uid has %ld on gpu %d, this "
             "footprint adds %d", cfg->max_comm_ctas_per_uid, have, gpu,
             ctas);
    return HR_ELIMIT;
  }
  return HR_OK;
}

void hr__tenant_count_comm(hr__tenant *t, int gpu, int ctas, int sign)
{
  if(!t || gpu < 0 || gpu >= HR_MAX_GPUS)
    return;
  t->comms += sign;
  t->ctas[gpu] += sign * ctas;
  /* Never below 0, whatever the caller got wrong: a negative count would
   * give its uid room past its limit. */
  if(t->comms < 0)
    t->comms = 0;
  if(t->ctas[gpu] < 0)
    t->ctas[gpu] = 0;
}
