/*
 * hr_lease.c: leases, and the hot path that reads them.
 *
 * A trainer reads the grid before every launch of the mega kernel, so
 * that read is one acquire load of a 64-bit word: no lock, no syscall, no
 * call into anything. Everything else about a lease is slow-path.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "hr_client_int.h"
#include "hr_clock.h"

/* The packed word: grid 16 bits, headroom 12 (HR_MAX_SMS is 1024), the
 * budget's cluster size as log2 in 2, closed 1, degraded 1, epoch 32:
 * everything a launch reads, in one load, so that a grid and a cluster
 * size always come from the same budget, and a lease whose client was
 * closed answers HR_ECLOSED. */
#define W_GRID(w) ((int)((w) & 0xffffu))
#define W_HEADROOM(w) ((int)(((w) >> 16) & 0xfffu))
#define W_CLUSTER(w) (1 << (int)(((w) >> 28) & 3u))
#define W_CLOSED(w) ((int)(((w) >> 30) & 1u))
#define W_DEGRADED(w) ((int)(((w) >> 31) & 1u))
#define W_EPOCH(w) ((uint32_t)((w) >> 32))

static uint64_t word_pack(const hr_budget *b)
{
  uint64_t grid = b->grid < 0 ? 0 : b->grid > 0xffff ? 0xffff : b->grid;
  uint64_t head = b->headroom < 0 ? 0 :
                  b->headroom > 0xfff ? 0xfff : b->headroom;
  uint64_t clog = b->cluster >= 8 ? 3 : b->cluster >= 4 ? 2 :
                  b->cluster >= 2 ? 1 : 0;
  return grid | head << 16 | clog << 28 |
         (uint64_t)(b->degraded ? 1 : 0) << 31 | (uint64_t)b->epoch << 32;
}

static uint64_t word_load(const hr_lease *l)
{
  return atomic_load_explicit(&l->word, memory_order_acquire);
}

void hr__lease_set_budget(hr_lease *l, const hr_budget *b)
{
  hr_budget mine = *b;

  /* Budgets pushed for the whole GPU are for headroom-mode leases; this
   * lease's mode decides what it takes from them (an agnostic one keeps
   * grid = SMs and headroom 0, with the NCCL fields and the epoch). */
  mine.gpu = l->gpu;
  hr__policy_for_mode(&mine, l->mode);
  pthread_mutex_lock(&l->mu);
  l->budget = mine;
  pthread_mutex_unlock(&l->mu);
  atomic_store_explicit(&l->word, word_pack(&mine), memory_order_release);
}

void hr__lease_close_word(hr_lease *l)
{
  /* Only the closed bit: no budget is left to read. */
  atomic_store_explicit(&l->word, (uint64_t)1 << 30, memory_order_release);
}

void hr__lease_take_granted(hr_lease *l, const hr_budget *reply)
{
  hr_budget b;

  if(!hr__client_known_budget(l->client, l->gpu, &b))
    b = *reply;
  hr__lease_set_budget(l, &b);
}

/* Footprints kept on the stack before the fallback needs the heap. */
#define FALLBACK_STACK_FOOTPRINTS 32

static int counts_for_cluster(hr_mode mode)
{
  /* As the daemon: an agnostic kernel gets no headroom, and a partition
   * kernel never shares an SM with NCCL (policy/policy.h). */
  return mode == HR_MODE_HEADROOM || mode == HR_MODE_COOPERATIVE;
}

int hr__lease_fallback_budget(hr_lease *l, hr_budget *out)
{
  hr_footprint stack[FALLBACK_STACK_FOOTPRINTS], *fp = stack;
  hr_client *c = l->client;
  hr__fallback_in in;
  const hr_comm *m;
  const hr_lease *o;
  int n = 0, err;

  memset(&in, 0, sizeof(in));
  in.gpu = l->gpu;
  in.sms = hr__client_sms(c, l->gpu);
  in.granularity = hr__fallback_granularity(l->gpu);
  in.cluster = counts_for_cluster(l->mode) ? l->cluster : 0;
  for(o = c->leases; o; o = o->next)
    if(o->gpu == l->gpu && counts_for_cluster(o->mode) &&
       o->cluster > in.cluster)
      in.cluster = o->cluster;
  if(!in.cluster)
    in.cluster = HR_POLICY_DEFAULT_CLUSTER;
  for(m = c->comms; m; m = m->next)
    n += m->gpu == l->gpu;
  if(n > FALLBACK_STACK_FOOTPRINTS) {
    fp = malloc((size_t)n * sizeof(*fp));
    if(!fp) {
      /* No memory to list them: one footprint as large as any, which
       * sizes the headroom at the ceiling: more than needed, never less. */
      static const hr_footprint all = {HR_MAX_CTAS, 1, HR_MAX_CONCURRENT};
      fp = (hr_footprint *)&all;
      n = -1;
    }
  }
  if(n >= 0) {
    n = 0;
    for(m = c->comms; m; m = m->next)
      if(m->gpu == l->gpu)
        fp[n++] = (hr_footprint){m->ctas, m->cga, m->concurrent};
  }
  in.n_footprints = n < 0 ? 1 : n;
  in.footprints = fp;
  err = hr__fallback_budget(&c->fallback, &in, l->mode, out);
  if(fp != stack && n >= 0)
    free(fp);
  out->epoch = c->fb_epoch[l->gpu];
  /* A lease the daemon had sized keeps the larger of that answer and the
   * one computed here: the daemon knew the GPU's other tenants, and a
   * daemon restart must not send a running trainer to a smaller
   * headroom. */
  if(l->have_kept && l->kept.headroom > out->headroom &&
     !hr__fallback_full_grid(&c->fallback)) {
    *out = l->kept;
    out->degraded = 1;
    out->epoch = c->fb_epoch[l->gpu];
    err = HR_OK;
  }
  return err;
}

static int budget_differs(const hr_budget *a, const hr_budget *b)
{
  return a->sms != b->sms || a->cluster != b->cluster ||
         a->headroom != b->headroom || a->grid != b->grid ||
         a->degraded != b->degraded ||
         a->nccl_min_ctas != b->nccl_min_ctas ||
         a->nccl_max_ctas != b->nccl_max_ctas ||
         a->nccl_cga_cluster_size != b->nccl_cga_cluster_size ||
         a->partition_granularity != b->partition_granularity ||
         a->partition_comm_sms != b->partition_comm_sms ||
         a->partition_nccl_max_ctas != b->partition_nccl_max_ctas;
}

void hr__client_refresh_fallback(hr_client *c, int gpu)
{
  int g;

  for(g = gpu < 0 ? 0 : gpu; g < (gpu < 0 ? HR_MAX_GPUS : gpu + 1); g++) {
    hr_lease *l;
    int changed = 0;

    /* First whether anything changes, so that every lease on the GPU
     * moves to the same new epoch at once. */
    for(l = c->leases; l && !changed; l = l->next) {
      hr_budget b, now;
      if(l->gpu != g || (l->daemon_id && l->gen == c->gen))
        continue;
      hr__lease_fallback_budget(l, &b);
      pthread_mutex_lock(&l->mu);
      now = l->budget;
      pthread_mutex_unlock(&l->mu);
      changed = budget_differs(&b, &now);
    }
    if(!changed)
      continue;
    c->fb_epoch[g]++;
    for(l = c->leases; l; l = l->next) {
      hr_budget b;
      if(l->gpu != g || (l->daemon_id && l->gen == c->gen))
        continue;
      hr__lease_fallback_budget(l, &b);
      hr__lease_set_budget(l, &b);
    }
  }
  pthread_cond_broadcast(&c->change_cv);
}

static void lease_link(hr_client *c, hr_lease *l)
{
  l->prev = NULL;
  l->next = c->leases;
  if(c->leases)
    c->leases->prev = l;
  c->leases = l;
}

static void lease_unlink(hr_client *c, hr_lease *l)
{
  if(l->prev)
    l->prev->next = l->next;
  else
    c->leases = l->next;
  if(l->next)
    l->next->prev = l->prev;
}

static int valid_cluster(int cluster)
{
  return cluster == 1 || cluster == 2 || cluster == 4 || cluster == 8;
}

int hr_lease_acquire(hr_client *c, int gpu, int cluster, hr_mode mode,
                     hr_lease **out)
{
  hr_lease *l = NULL;
  uint64_t failed = 0;
  int err;

  if(!c || !out || !valid_cluster(cluster) || (unsigned)mode >= HR_MODE_COUNT)
    return HR_EINVAL;
  pthread_mutex_lock(&c->mu);
  err = hr__client_check_gpu(c, gpu);
  if(err)
    goto out;
  l = calloc(1, sizeof(*l));
  if(!l || pthread_mutex_init(&l->mu, NULL)) {
    free(l);
    l = NULL;
    err = HR_ENOMEM;
    goto out;
  }
  l->client = c;
  l->gpu = gpu;
  l->cluster = cluster;
  l->mode = mode;

  for(;;) {
    hr_request req;
    hr_reply rep;
    hr_budget b;
    uint64_t gen;

    err = hr__client_wait_settled(c, failed);
    if(err)
      break;
    if(c->state != HR__UP) {
      /* No daemon: a degraded lease now, a real one after reconnecting;
       * refused, as a daemon would, in partition mode on a GPU too small
       * to split. */
      err = hr__lease_fallback_budget(l, &b);
      if(err)
        break;
      hr__lease_set_budget(l, &b);
      lease_link(c, l);
      /* Its cluster may be larger than the GPU's other leases had. */
      hr__client_refresh_fallback(c, gpu);
      break;
    }
    memset(&req, 0, sizeof(req));
    req.type = HR_MSG_LEASE;
    req.u.lease.gpu = gpu;
    req.u.lease.cluster = cluster;
    req.u.lease.mode = mode;
    err = hr__client_call_locked(c, &req, &rep, &gen);
    if(err == HR_ECLOSED) {
      failed = gen;
      continue;
    }
    if(err)
      break;
    if(c->state == HR__UP && c->gen == gen) {
      l->daemon_id = rep.u.lease.lease;
      l->gen = gen;
      /* The I/O thread noted the reply's budget, and any newer one. */
      hr__lease_take_granted(l, &rep.u.lease.budget);
      lease_link(c, l);
      hr_reply_free(&rep);
      break;
    }
    /* The connection that granted it is gone, and with it the lease. */
    hr_reply_free(&rep);
    failed = gen;
  }

out:
  pthread_mutex_unlock(&c->mu);
  if(err) {
    if(l) {
      pthread_mutex_destroy(&l->mu);
      free(l);
    }
    return err;
  }
  *out = l;
  return HR_OK;
}

int hr_lease_release(hr_lease *l)
{
  hr_client *c;
  int err;

  if(!l)
    return HR_EINVAL;
  if(hr__orphan_take_lease(l)) {
    err = HR_OK;            /* released with its client */
    goto out;
  }
  c = l->client;
  pthread_mutex_lock(&c->mu);
  err = hr__client_drop_remote(c, HR_MSG_RELEASE, &l->daemon_id, &l->gen);
  lease_unlink(c, l);
  if(c->state != HR__UP)
    hr__client_refresh_fallback(c, l->gpu);
  pthread_mutex_unlock(&c->mu);
out:
  pthread_mutex_destroy(&l->mu);
  free(l);
  return err;
}

/* ---- the hot path --------------------------------------------------------
 * Keep these tiny: a test counts their instructions. */

int hr_lease_grid(const hr_lease *l)
{
  uint64_t w;
  if(!l)
    return HR_EINVAL;
  w = word_load(l);
  return W_CLOSED(w) ? HR_ECLOSED : W_GRID(w);
}

int hr_lease_launch_config(const hr_lease *l, int *grid, int *cluster,
                           hr_mode *mode)
{
  uint64_t w;

  if(!l || !grid || !cluster || !mode)
    return HR_EINVAL;
  w = word_load(l);
  if(W_CLOSED(w))
    return HR_ECLOSED;
  *grid = W_GRID(w);
  *cluster = W_CLUSTER(w);
  *mode = l->mode;            /* fixed for the life of the lease */
  return HR_OK;
}

int hr_lease_headroom(const hr_lease *l)
{
  uint64_t w;
  if(!l)
    return HR_EINVAL;
  w = word_load(l);
  return W_CLOSED(w) ? HR_ECLOSED : W_HEADROOM(w);
}

int64_t hr_lease_epoch(const hr_lease *l)
{
  uint64_t w;
  if(!l)
    return HR_EINVAL;
  w = word_load(l);
  return W_CLOSED(w) ? HR_ECLOSED : (int64_t)W_EPOCH(w);
}

int hr_lease_degraded(const hr_lease *l)
{
  uint64_t w;
  if(!l)
    return HR_EINVAL;
  w = word_load(l);
  return W_CLOSED(w) ? HR_ECLOSED : W_DEGRADED(w);
}

/* ---- slow-path queries -------------------------------------------------- */

int hr_lease_budget_sized(const hr_lease *lease, hr_budget *out,
                          size_t size)
{
  hr_lease *l = (hr_lease *)lease;    /* only the mutex is written */
  hr_budget b;

  if(!l || !out || size < HR_BUDGET_SIZE_V1)
    return HR_EINVAL;
  if(l->closed)
    return HR_ECLOSED;
  pthread_mutex_lock(&l->mu);
  b = l->budget;
  pthread_mutex_unlock(&l->mu);
  /* The members the caller was built with; those it has and this library
   * does not know read 0, "not known". */
  if(size > sizeof(b)) {
    memset((char *)out + sizeof(b), 0, size - sizeof(b));
    size = sizeof(b);
  }
  memcpy(out, &b, size);
  return HR_OK;
}

int hr_lease_gpu(const hr_lease *l)
{
  if(!l)
    return HR_EINVAL;
  return l->closed ? HR_ECLOSED : l->gpu;
}

hr_client *hr_lease_client(const hr_lease *l)
{
  return l ? l->client : NULL;
}

int hr_lease_wait_change(const hr_lease *l, uint32_t epoch, int timeout_ms)
{
  struct timespec until;
  hr_client *c;
  int err = HR_OK;

  if(!l || timeout_ms < 0)
    return HR_EINVAL;
  if(l->closed)
    return HR_ECLOSED;
  c = l->client;
  hr__clock_deadline(&until, timeout_ms);
  pthread_mutex_lock(&c->mu);
  while(W_EPOCH(word_load(l)) == epoch && !c->stopping) {
    if(pthread_cond_timedwait(&c->change_cv, &c->mu, &until) == ETIMEDOUT) {
      if(W_EPOCH(word_load(l)) == epoch)
        err = HR_ETIMEDOUT;
      break;
    }
  }
  pthread_mutex_unlock(&c->mu);
  return err;
}

int hr_lease_export_env(const hr_lease *l)
{
  hr_budget b;
  int err;
  if(!l)
    return HR_EINVAL;
  err = hr_lease_budget(l, &b);
  if(err)
    return err;
  return hr__budget_export_env(&b);
}
