/*
 * moe_ep_plan.c: the expert-parallel forward's host logic that needs no
 * GPU (moe_ep.h): argument checks, the two allocations' layout, and the
 * bootstrap's records. Plain C11, built into libheadroom_moe and into the
 * unit tests.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "moe_ep.h"

/* hr__moe_sync (moe_kernel.h) is 4 lines of 128 bytes; the layout keeps
 * room for it without including CUDA's headers here (moe_ep.cu checks
 * that it fits). */
#define SYNC_BYTES 1024
/* and hr__moe_agn (5 lines) */
#define AGN_BYTES 1024

static uint64_t align_up(uint64_t n)
{
  return (n + 255) & ~(uint64_t)255;
}

int hr__moe_ep_shape_ok(const hr_moe_shape *s, int nranks)
{
  /* hr_moe_create's rules (moe_api.cu, shape_valid), then EP's */
  if(!s || s->experts < 1 || s->experts > HR_MOE_MAX_EXPERTS || s->hidden < 256 ||
     s->hidden % 256 != 0 || s->inter < 128 || s->inter % 128 != 0 || s->topk < 1 ||
     s->topk > HR_MOE_MAX_TOPK || s->max_tokens < 1)
    return 0;
  if(nranks < 1 || nranks > HR_MOE_EP_MAX_RANKS || s->experts % nranks != 0)
    return 0;
  /* the received pairs are indexed with ints, as hr_moe's */
  return (long long)nranks * s->max_tokens * s->topk <= (1LL << 30);
}

int hr__moe_ep_args_check(const hr_moe_shape *s, int rank, int nranks,
                          const hr_moe_ep_bootstrap *boot)
{
  if(!hr__moe_ep_shape_ok(s, nranks) || rank < 0 || rank >= nranks)
    return HR_EINVAL;
  if(!boot || !boot->allgather)
    return HR_EINVAL;
  if(boot->backward != 0 && boot->backward != 1)
    return HR_EINVAL;
  if(boot->exchange != HR_MOE_EP_EXCHANGE_AUTO &&
     boot->exchange != HR_MOE_EP_EXCHANGE_POINTERS && boot->exchange != HR_MOE_EP_EXCHANGE_IPC)
    return HR_EINVAL;
  return HR_OK;
}

int hr__moe_ep_layout_of(const hr_moe_shape *s, int nranks, int backward, hr__moe_ep_layout *l)
{
  uint64_t off, H, I, k;

  if(!l || !hr__moe_ep_shape_ok(s, nranks) || (backward != 0 && backward != 1))
    return HR_EINVAL;
  memset(l, 0, sizeof(*l));
  H = (uint64_t)s->hidden;
  I = (uint64_t)s->inter;
  k = (uint64_t)s->topk;
  l->nranks = nranks;
  l->backward = backward;
  l->local_experts = s->experts / nranks;
  l->cap = s->max_tokens;
  l->rows = (int64_t)nranks * s->max_tokens;
  l->pairs = l->rows * (int64_t)k;

  /* The peer-visible block: the flags, then per source region the local
   * ids [cap][k], tokens [cap] and x rows [cap][H] (regions back to back
   * in each array, so that the received rows are one table [rows][k] and
   * one [rows][H] for the route and the GEMMs), then the returned rows of
   * this rank's own pairs [max_tokens * k][H]. */
  off = 0;
  l->flags = off;
  off += align_up(sizeof(hr__moe_ep_flags));
  l->recv_ids = off;
  off += align_up((uint64_t)l->pairs * 4);
  l->recv_tok = off;
  off += align_up((uint64_t)l->rows * 4);
  l->recv_x = off;
  off += align_up((uint64_t)l->rows * H * 2);
  l->ret = off;
  off += align_up((uint64_t)l->cap * k * H * 2);
  /* The backward's: the received rows' weights [rows][k] and dy rows
   * [rows][H]; this rank's own pairs' d(w), returned [max_tokens * k].
   * (Its dx rows come back in ret.) */
  if(backward) {
    l->recv_w = off;
    off += align_up((uint64_t)l->pairs * 4);
    l->recv_dy = off;
    off += align_up((uint64_t)l->rows * H * 2);
    l->ret_dw = off;
    off += align_up((uint64_t)l->cap * k * 4);
  }
  l->peer_bytes = off;

  /* The local workspace: the grid barrier's words (cleared after a
   * failure), the route's tables over the received pairs, this rank's
   * own pairs' positions for the combine, h and the pairs' output rows. */
  off = 0;
  l->sync = off;
  off += align_up(SYNC_BYTES);
  /* the agnostic form's schedule and per-token-tile counters (as
   * hr_moe's: at most pairs / 16 + E tiles), zero between launches */
  l->agn = off;
  off += align_up(AGN_BYTES);
  l->tiles = l->pairs / 16 + l->local_experts + 1;
  l->g1_done = off;
  off += align_up((uint64_t)l->tiles * 4);
  l->g2_done = off;
  off += align_up((uint64_t)l->tiles * 4);
  l->reset_bytes = off;
  l->sorted_tok = off;
  off += align_up((uint64_t)l->pairs * 4);
  l->pos_of = off;
  off += align_up((uint64_t)l->pairs * 4);
  l->src_pos = off;
  off += align_up((uint64_t)l->cap * k * 4);
  l->h = off;
  off += align_up((uint64_t)l->pairs * I * 2);
  l->ypair = off;
  off += align_up((uint64_t)l->pairs * H * 2);
  /* The backward's: the place -> pair table, dh = (dg, du) [pairs][2I]
   * and the d(w) partials [pairs][I / 64]; w a goes in h, the dx rows
   * in ypair. */
  if(backward) {
    l->sorted_pair = off;
    off += align_up((uint64_t)l->pairs * 4);
    l->dh = off;
    off += align_up((uint64_t)l->pairs * 2 * I * 2);
    l->dwp = off;
    off += align_up((uint64_t)l->pairs * (I / 64) * 4);
  }
  l->local_bytes = off;
  return HR_OK;
}

static int memory_of(const hr_moe_shape *global_shape, int nranks, int backward,
                     uint64_t *peer_bytes, uint64_t *local_bytes)
{
  hr__moe_ep_layout l;
  int err = hr__moe_ep_layout_of(global_shape, nranks, backward, &l);
  if(err)
    return err;
  if(peer_bytes)
    *peer_bytes = l.peer_bytes;
  if(local_bytes)
    *local_bytes = l.local_bytes;
  return HR_OK;
}

int hr_moe_ep_memory(const hr_moe_shape *global_shape, int nranks, uint64_t *peer_bytes,
                     uint64_t *local_bytes)
{
  return memory_of(global_shape, nranks, 0, peer_bytes, local_bytes);
}

int hr_moe_ep_memory_backward(const hr_moe_shape *global_shape, int nranks,
                              uint64_t *peer_bytes, uint64_t *local_bytes)
{
  return memory_of(global_shape, nranks, 1, peer_bytes, local_bytes);
}

/* ---- the bootstrap ----------------------------------------------------- */

void hr__moe_ep_rec_fill(hr__moe_ep_rec *r, const hr_moe_shape *s, int rank, int nranks,
                         int device, int status, uint64_t peer_bytes, uint64_t ptr,
                         const void *ipc, size_t ipc_bytes)
{
  memset(r, 0, sizeof(*r));
  r->magic = HR__MOE_EP_REC_MAGIC;
  r->version = HR__MOE_EP_REC_VERSION;
  r->status = status;
  r->rank = rank;
  r->nranks = nranks;
  r->experts = s->experts;
  r->hidden = s->hidden;
  r->inter = s->inter;
  r->topk = s->topk;
  r->max_tokens = s->max_tokens;
  r->device = device;
  r->pid = (int64_t)getpid();
  if(gethostname(r->host, sizeof(r->host) - 1) != 0)
    r->host[0] = '\0';
  r->peer_bytes = peer_bytes;
  r->ptr = ptr;
  if(ipc && ipc_bytes > 0 && ipc_bytes <= sizeof(r->ipc)) {
    memcpy(r->ipc, ipc, ipc_bytes);
    r->has_ipc = 1;
  }
}

/* Records a and b come from one group: the same shape, nranks, block. */
static int recs_agree(const hr__moe_ep_rec *a, const hr__moe_ep_rec *b)
{
  return a->nranks == b->nranks && a->experts == b->experts && a->hidden == b->hidden &&
         a->inter == b->inter && a->topk == b->topk && a->max_tokens == b->max_tokens;
}

int hr__moe_ep_recs_check(const hr__moe_ep_rec *recs, int rank, int nranks, int exchange,
                          int *kinds)
{
  const hr__moe_ep_rec *me;
  int i;

  if(!recs || !kinds || nranks < 1 || nranks > HR_MOE_EP_MAX_RANKS || rank < 0 ||
     rank >= nranks)
    return HR_EINVAL;
  me = &recs[rank];
  /* Is every record a rank's of this group, in its place? */
  for(i = 0; i < nranks; i++) {
    const hr__moe_ep_rec *r = &recs[i];
    if(r->magic != HR__MOE_EP_REC_MAGIC || r->version != HR__MOE_EP_REC_VERSION ||
       r->rank != i || !recs_agree(r, me))
      return HR_EINVAL;
  }
  /* A rank that has no block: its code, the lowest such rank's. */
  for(i = 0; i < nranks; i++)
    if(recs[i].status != HR_OK)
      return recs[i].status < 0 ? recs[i].status : HR_EINTERNAL;
  for(i = 0; i < nranks; i++) {
    const hr__moe_ep_rec *r = &recs[i];
    const int same = r->pid == me->pid && strncmp(r->host, me->host, sizeof(r->host)) == 0;
    if(r->peer_bytes != me->peer_bytes || (same && r->ptr == 0))
      return HR_EINVAL;
    if(i == rank)
      kinds[i] = HR__MOE_EP_PEER_SELF;
    else if(same && exchange != HR_MOE_EP_EXCHANGE_IPC)
      kinds[i] = HR__MOE_EP_PEER_POINTER;
    else if(!same && exchange != HR_MOE_EP_EXCHANGE_POINTERS && r->has_ipc)
      kinds[i] = HR__MOE_EP_PEER_IPC;
    else
      return HR_EINVAL;  /* asked for pointers across processes, IPC within
                            one (cudaIpcOpenMemHandle refuses its own
                            process's handles), or a peer without a handle */
  }
  return HR_OK;
}

int hr__moe_ep_allgather(const hr_moe_ep_bootstrap *b, const void *mine, void *all,
                         size_t bytes)
{
  int rc = b->allgather(b->ctx, mine, all, bytes);
  if(rc == 0)
    return HR_OK;
  return rc < 0 ? rc : HR_ECONNECT;
}

int hr__moe_ep_agree(const hr_moe_ep_bootstrap *b, int nranks, int status)
{
  int32_t mine = status, all[HR_MOE_EP_MAX_RANKS];
  int i, rc;

  if(nranks < 1 || nranks > HR_MOE_EP_MAX_RANKS)
    return HR_EINVAL;
  rc = hr__moe_ep_allgather(b, &mine, all, sizeof(mine));
  if(rc)
    return rc;
  for(i = 0; i < nranks; i++)
    if(all[i] != HR_OK)
      return all[i] < 0 ? all[i] : HR_EINTERNAL;
  return HR_OK;
}
