/*
 * hr_orphan.c: lease and footprint handles that outlive their client.
 *
 * hr_client_close releases everything at the daemon (closing the socket
 * is the release) and frees the client, but a handle the caller still
 * holds is not freed with it: it stays valid memory, closed, until its
 * owner frees it with hr_lease_release or hr_comm_unregister, so that a
 * call on it after the close is an HR_ECLOSED, never a use-after-free.
 * Closed handles are kept in one list of the process: reachable, so leak
 * checkers see memory in use, not lost.
 */
#include <pthread.h>
#include <stdlib.h>

#include "hr_client_int.h"

static pthread_mutex_t orphans_mu = PTHREAD_MUTEX_INITIALIZER;
static hr_lease *orphan_leases;
static hr_comm *orphan_comms;

void hr__orphan_adopt(hr_client *c)
{
  pthread_mutex_lock(&orphans_mu);
  while(c->leases) {
    hr_lease *l = c->leases;
    c->leases = l->next;
    l->client = NULL;
    l->closed = 1;
    hr__lease_close_word(l);
    l->prev = NULL;
    l->next = orphan_leases;
    if(orphan_leases)
      orphan_leases->prev = l;
    orphan_leases = l;
  }
  while(c->comms) {
    hr_comm *m = c->comms;
    c->comms = m->next;
    if(!m->held) {
      free(m);              /* nobody can name it */
      continue;
    }
    m->client = NULL;
    m->closed = 1;
    m->prev = NULL;
    m->next = orphan_comms;
    if(orphan_comms)
      orphan_comms->prev = m;
    orphan_comms = m;
  }
  pthread_mutex_unlock(&orphans_mu);
}

int hr__orphan_take_lease(hr_lease *l)
{
  int closed;

  pthread_mutex_lock(&orphans_mu);
  closed = l->closed;
  if(closed) {
    if(l->prev)
      l->prev->next = l->next;
    else
      orphan_leases = l->next;
    if(l->next)
      l->next->prev = l->prev;
  }
  pthread_mutex_unlock(&orphans_mu);
  return closed;
}

int hr__orphan_take_comm(hr_comm *m)
{
  int closed;

  pthread_mutex_lock(&orphans_mu);
  closed = m->closed;
  if(closed) {
    if(m->prev)
      m->prev->next = m->next;
    else
      orphan_comms = m->next;
    if(m->next)
      m->next->prev = m->prev;
  }
  pthread_mutex_unlock(&orphans_mu);
  return closed;
}
