/*
 * hr_comm.c: comm footprints, registered for the communicators a process
 * creates, so that the daemon knows how many SMs NCCL may hold on a GPU.
 *
 * A footprint registered with no daemon is kept here and registered by the
 * I/O thread as soon as a daemon answers; the same after a restart.
 */
#include <stdlib.h>
#include <string.h>

#include "hr_client_int.h"

static void comm_link(hr_client *c, hr_comm *m)
{
  m->prev = NULL;
  m->next = c->comms;
  if(c->comms)
    c->comms->prev = m;
  c->comms = m;
}

static void comm_unlink(hr_client *c, hr_comm *m)
{
  if(m->prev)
    m->prev->next = m->next;
  else
    c->comms = m->next;
  if(m->next)
    m->next->prev = m->prev;
}

int hr_comm_register(hr_client *c, int gpu, const char *name, int ctas,
                     int cga, int concurrent, hr_comm **out)
{
  hr_comm *m = NULL;
  uint64_t failed = 0;
  int err;

  if(!c || ctas < 1 || ctas > HR_MAX_CTAS || cga < 1 || cga > HR_MAX_CGA ||
     concurrent < 1 || concurrent > HR_MAX_CONCURRENT ||
     (name && (strlen(name) >= HR_NAME_MAX || !hr__name_valid(name))))
    return HR_EINVAL;
  pthread_mutex_lock(&c->mu);
  err = hr__client_check_gpu(c, gpu);
  if(err)
    goto out;
  m = calloc(1, sizeof(*m));
  if(!m) {
    err = HR_ENOMEM;
    goto out;
  }
  m->client = c;
  m->held = out != NULL;
  m->gpu = gpu;
  m->ctas = ctas;
  m->cga = cga;
  m->concurrent = concurrent;
  if(name)
    memcpy(m->name, name, strlen(name) + 1);

  for(;;) {
    hr_request req;
    hr_reply rep;
    uint64_t gen;

    err = hr__client_wait_settled(c, failed);
    if(err)
      break;
    if(c->state != HR__UP) {
      comm_link(c, m);      /* registered when a daemon answers */
      /* Meanwhile the budgets computed here count it. */
      hr__client_refresh_fallback(c, gpu);
      break;
    }
    memset(&req, 0, sizeof(req));
    req.type = HR_MSG_REGISTER_COMM;
    req.u.register_comm.gpu = gpu;
    memcpy(req.u.register_comm.name, m->name, sizeof(m->name));
    req.u.register_comm.ctas = ctas;
    req.u.register_comm.cga = cga;
    req.u.register_comm.concurrent = concurrent;
    err = hr__client_call_locked(c, &req, &rep, &gen);
    if(err == HR_ECLOSED) {
      failed = gen;
      continue;
    }
    if(err)
      break;
    if(c->state == HR__UP && c->gen == gen) {
      m->daemon_id = rep.u.register_comm.comm;
      m->gen = gen;
      comm_link(c, m);
      hr_reply_free(&rep);
      break;
    }
    hr_reply_free(&rep);    /* its connection is gone: register again */
    failed = gen;
  }

out:
  pthread_mutex_unlock(&c->mu);
  if(err) {
    free(m);
    return err;
  }
  if(out)
    *out = m;
  return HR_OK;
}

int hr_comm_unregister(hr_comm *m)
{
  hr_client *c;
  int err;

  if(!m)
    return HR_EINVAL;
  if(hr__orphan_take_comm(m)) {
    free(m);                /* released with its client */
    return HR_OK;
  }
  c = m->client;
  pthread_mutex_lock(&c->mu);
  err = hr__client_drop_remote(c, HR_MSG_UNREGISTER_COMM, &m->daemon_id,
                               &m->gen);
  comm_unlink(c, m);
  if(c->state != HR__UP)
    hr__client_refresh_fallback(c, m->gpu);
  pthread_mutex_unlock(&c->mu);
  free(m);
  return err;
}
