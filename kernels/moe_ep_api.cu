/*
 * moe_ep_api.cu: the expert-parallel forward's and backward's launch path
 * (headroom_moe.h, "expert parallel"): the context and its collective
 * creation (the blocks exchanged through the caller's allgather), the
 * argument checks, the launch with the epoch, and the wait that turns
 * the error word into HR_E* codes and an hr_moe_ep_failure.
 *
 * Host code only, plain C in a .cu file as moe_api.cu. The parts that
 * need no GPU (checks, layout, records) are moe_ep_plan.c's.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "headroom.h"
#include "headroom_moe.h"
#include "hr_clock.h"
#include "moe_ep.h"
#include "moe_ep_kernel.h"
#include "moe_host.h"
#include "moe_kernel.h"

/* hr_moe_sync's polling (moe_api.cu) */

struct hr_moe_ep {
  int device, sms, rank, nranks;
  hr_moe_shape shape;          /* the global one */
  hr_moe_shape local;          /* the received problem: E/R experts, rows
                                  "tokens" (so rows * k pairs) */
  hr__moe_ep_layout lay;

  char *block;                 /* this rank's peer-visible block */
  char *ws;                    /* its local workspace */
  char *peer[HR_MOE_EP_MAX_RANKS];
  int kinds[HR_MOE_EP_MAX_RANKS];

  CUtensorMap tm_xs, tm_h, tm_w1, tm_w2;
  const void *tm_w1_src, *tm_w2_src;

  hr__moe_ep_host_words *host;     /* pinned, mapped */
  hr__moe_ep_host_words *host_dev;

  cudaEvent_t done;
  cudaStream_t stream;         /* of the last launch */
  uint32_t calls;              /* epochs spent: forward and backward calls */
  uint32_t seq;                /* epoch of the last launch */
  int in_flight, needs_reset;
  int backward;                /* the last launch was a backward */

  const hr_lease *lease;
  int grid, timeout_ms;

  int has_failure;
  hr_moe_ep_failure failure;
};

/* ---- helpers (moe_api.cu's) -------------------------------------------- */

/* Device or managed memory of the context's device (a host pointer would
 * fault the kernel). */
static int pointer_ok(const hr_moe_ep *ep, const void *p, unsigned align)
{
  struct cudaPointerAttributes a;
  if(!p || ((uintptr_t)p % align) != 0)
    return 0;
  if(cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  if(a.type == cudaMemoryTypeManaged)
    return 1;
  return a.type == cudaMemoryTypeDevice && a.device == ep->device;
}

/* ---- create / destroy -------------------------------------------------- */

/* Everything of this rank's own: the device, both allocations, the
 * words, the event, the workspace's maps, and the IPC handle where a
 * peer may be another process (*ipc_ok). */
static int setup_local(hr_moe_ep *ep, int device, cudaIpcMemHandle_t *ipc, int *ipc_ok,
                       int exchange)
{
  struct cudaDeviceProp prop;
  int count = 0, prev = -1, err;

  if(cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    cudaGetLastError();
    return HR_ENOGPU;
  }
  if(device < 0 && cudaGetDevice(&device) != cudaSuccess)
    return HR_ECUDA;
  if(device >= count)
    return HR_EINVAL;
  if(cudaGetDeviceProperties(&prop, device) != cudaSuccess)
    return HR_ECUDA;
  if(prop.major != 9 || prop.minor != 0)
    return HR_EUNSUPPORTED;            /* the kernel is built for sm_90a */
  ep->device = device;
  ep->sms = prop.multiProcessorCount;

  err = hr__moe_device_enter(device, &prev);
  if(err)
    return err;
  err = hr__moe_err_from_cuda(hr__moe_ep_prepare());
  if(!err)
    err = hr__moe_err_from_cuda(hr__moe_agnostic_prepare());
  if(!err && ep->lay.backward)
    err = hr__moe_err_from_cuda(hr__moe_ep_bwd_prepare());
  if(!err)
    err = hr__moe_err_from_cuda(cudaMalloc((void **)&ep->block, ep->lay.peer_bytes));
  if(!err)
    err = hr__moe_err_from_cuda(cudaMalloc((void **)&ep->ws, ep->lay.local_bytes));
  /* Every flag word 0: no epoch (they start at 1) reads as arrived. */
  if(!err)
    err = hr__moe_err_from_cuda(cudaMemset(ep->block, 0, ep->lay.peer_bytes));
  if(!err)
    err = hr__moe_err_from_cuda(cudaMemset(ep->ws, 0, ep->lay.reset_bytes));
  if(!err)
    err = hr__moe_err_from_cuda(cudaHostAlloc((void **)&ep->host, sizeof(*ep->host),
                                      cudaHostAllocMapped));
  if(!err) {
    memset((void *)ep->host, 0, sizeof(*ep->host));
    err = hr__moe_err_from_cuda(cudaHostGetDevicePointer((void **)&ep->host_dev, (void *)ep->host, 0));
  }
  if(!err)
    err = hr__moe_err_from_cuda(cudaEventCreateWithFlags(&ep->done, cudaEventDisableTiming));
  if(!err)
    err = hr__moe_encode_maps(&ep->local, ep->ws + ep->lay.ypair, ep->ws + ep->lay.h, NULL,
                              NULL, &ep->tm_xs, &ep->tm_h, NULL, NULL);
  /* A handle only where a peer may need one; without IPC (some
   * containers) a group of one process still works. */
  if(!err && exchange != HR_MOE_EP_EXCHANGE_POINTERS)
    *ipc_ok = cudaIpcGetMemHandle(ipc, ep->block) == cudaSuccess;
  if(err == HR_ENOGPU)
    err = HR_ECUDA;                    /* a device was found above */
  cudaGetLastError();
  hr__moe_device_leave(device, prev);
  return err;
}

/* Reach every rank's block as the records say (kinds). */
static int map_peers(hr_moe_ep *ep, const hr__moe_ep_rec *recs)
{
  int i, prev, err;

  err = hr__moe_device_enter(ep->device, &prev);
  if(err)
    return err;
  for(i = 0; i < ep->nranks && !err; i++) {
    switch(ep->kinds[i]) {
    case HR__MOE_EP_PEER_SELF:
      ep->peer[i] = ep->block;
      break;
    case HR__MOE_EP_PEER_POINTER:
      /* The same process: the pointer works as it is on its device, and
       * on another one once peer access is on. */
      if(recs[i].device != ep->device) {
        int can = 0;
        cudaError_t ce;
        if(cudaDeviceCanAccessPeer(&can, ep->device, recs[i].device) != cudaSuccess || !can) {
          err = HR_EUNSUPPORTED;
          break;
        }
        ce = cudaDeviceEnablePeerAccess(recs[i].device, 0);
        if(ce != cudaSuccess && ce != cudaErrorPeerAccessAlreadyEnabled) {
          err = HR_ECUDA;
          break;
        }
        cudaGetLastError();
      }
      ep->peer[i] = (char *)(uintptr_t)recs[i].ptr;
      break;
    default: {
      cudaIpcMemHandle_t h;
      void *p = NULL;
      memcpy(&h, recs[i].ipc, sizeof(h));
      if(cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess) != cudaSuccess) {
        err = HR_ECUDA;
        break;
      }
      ep->peer[i] = (char *)p;
    }
    }
  }
  cudaGetLastError();
  hr__moe_device_leave(ep->device, prev);
  return err;
}

static void ep_free(hr_moe_ep *ep)
{
  int i, prev;
  if(!ep)
    return;
  if(hr__moe_device_enter(ep->device, &prev) == HR_OK) {
    if(ep->done) {
      cudaEventSynchronize(ep->done);  /* the last launch uses everything */
      cudaEventDestroy(ep->done);
    }
    for(i = 0; i < ep->nranks; i++)
      if(ep->kinds[i] == HR__MOE_EP_PEER_IPC && ep->peer[i])
        cudaIpcCloseMemHandle(ep->peer[i]);
    if(ep->host)
      cudaFreeHost((void *)ep->host);
    if(ep->ws)
      cudaFree(ep->ws);
    if(ep->block)
      cudaFree(ep->block);
    cudaGetLastError();
    hr__moe_device_leave(ep->device, prev);
  }
  free(ep);
}

int hr_moe_ep_create(hr_moe_ep **out, int device, const hr_moe_shape *global_shape, int rank,
                     int nranks, const hr_moe_ep_bootstrap *boot)
{
  hr_moe_ep *ep;
  hr__moe_ep_rec mine, recs[HR_MOE_EP_MAX_RANKS];
  cudaIpcMemHandle_t ipc;
  int kinds[HR_MOE_EP_MAX_RANKS];
  int ipc_ok = 0, status, err, i;

  if(!out)
    return HR_EINVAL;
  *out = NULL;
  err = hr__moe_ep_args_check(global_shape, rank, nranks, boot);
  if(err)
    return err;

  ep = (hr_moe_ep *)calloc(1, sizeof(*ep));
  status = ep ? HR_OK : HR_ENOMEM;
  if(ep) {
    ep->device = device;
    ep->rank = rank;
    ep->nranks = nranks;
    ep->shape = *global_shape;
    ep->local = *global_shape;
    ep->local.experts = global_shape->experts / nranks;
    ep->local.max_tokens = nranks * global_shape->max_tokens;
    for(i = 0; i < HR_MOE_EP_MAX_RANKS; i++)
      ep->kinds[i] = -1;
    ep->failure.local.reported = 1;
    hr__moe_ep_layout_of(global_shape, nranks, boot->backward, &ep->lay);
  }
  memset(&ipc, 0, sizeof(ipc));
  if(!status)
    status = setup_local(ep, device, &ipc, &ipc_ok, boot->exchange);
  /* Even without a block this rank takes part, so that every rank
   * returns the same code. */
  hr__moe_ep_rec_fill(&mine, global_shape, rank, nranks, ep ? ep->device : device, status,
                      ep ? ep->lay.peer_bytes : 0, ep ? (uint64_t)(uintptr_t)ep->block : 0,
                      ipc_ok ? &ipc : NULL, sizeof(ipc));
  err = hr__moe_ep_allgather(boot, &mine, recs, sizeof(mine));
  if(err)
    goto out;                          /* no agreement is possible */
  err = hr__moe_ep_recs_check(recs, rank, nranks, boot->exchange, kinds);
  if(!err) {
    for(i = 0; i < nranks; i++)
      ep->kinds[i] = kinds[i];
    err = map_peers(ep, recs);
  }
  /* Every rank mapped every block, or every rank fails. */
  err = hr__moe_ep_agree(boot, nranks, err);

out:
  if(err) {
    ep_free(ep);
    return err;
  }
  *out = ep;
  return HR_OK;
}

void hr_moe_ep_destroy(hr_moe_ep *ep)
{
  ep_free(ep);
}

/* ---- launch ------------------------------------------------------------ */

static int failure_take(hr_moe_ep *ep);

/* The args of a rank's forward (headroom_moe.h, hr_moe_ep_forward). */
static int args_ok(const hr_moe_ep *ep, const hr_moe_args *a, int backward)
{
  const hr_moe_shape *s = &ep->shape;
  if(!a || a->tokens < 0 || a->tokens > s->max_tokens || a->experts != s->experts ||
     a->hidden != s->hidden || a->inter != s->inter || a->topk != s->topk || a->timeout_ms < 0)
    return 0;
  if(!pointer_ok(ep, a->w1, 16) || !pointer_ok(ep, a->w2, 16))
    return 0;
  return a->tokens == 0 ||
         (pointer_ok(ep, a->x, 16) && (backward || pointer_ok(ep, a->y, 16)) &&
          pointer_ok(ep, a->topk_ids, 4) && pointer_ok(ep, a->topk_weights, 4));
}

/* The backward's (hr_moe_ep_backward): its forward args, dy, dx and d(w)
 * for this rank's tokens (NULL where it has none), dW1 and dW2 always. */
static int grad_args_ok(const hr_moe_ep *ep, const hr_moe_grad_args *g)
{
  if(!g || !args_ok(ep, &g->fwd, 1) || !ep->lay.backward)
    return 0;
  if(g->dw_dtype != HR_MOE_DW_FP32 && g->dw_dtype != HR_MOE_DW_BF16)
    return 0;
  if(!pointer_ok(ep, g->dw1, 16) || !pointer_ok(ep, g->dw2, 16))
    return 0;
  return g->fwd.tokens == 0 || (pointer_ok(ep, g->dy, 16) && pointer_ok(ep, g->dx, 16) &&
                                pointer_ok(ep, g->dtopk_weights, 4));
}

/* The local problem (moe_ep_kernel.h): the received rows over this
 * rank's experts, in its workspace, for epoch `epoch`. */
static void local_params(const hr_moe_ep *ep, const hr_moe_args *a, uint32_t epoch,
                         int timeout_ms, hr__moe_params *p)
{
  p->x = (const uint16_t *)(ep->block + ep->lay.recv_x);
  p->ids = (const int32_t *)(ep->block + ep->lay.recv_ids);
  p->w1 = (const uint16_t *)a->w1;
  p->w2 = (const uint16_t *)a->w2;
  p->T = (int)ep->lay.rows;
  p->E = ep->local.experts;
  p->H = a->hidden;
  p->I = a->inter;
  p->k = a->topk;
  p->sorted_tok = (int32_t *)(ep->ws + ep->lay.sorted_tok);
  p->pos_of = (int32_t *)(ep->ws + ep->lay.pos_of);
  p->h = (uint16_t *)(ep->ws + ep->lay.h);
  p->ypair = (uint16_t *)(ep->ws + ep->lay.ypair);
  p->sync = (hr__moe_sync *)(ep->ws + ep->lay.sync);
  p->agn = (hr__moe_agn *)(ep->ws + ep->lay.agn);
  p->g1_done = (unsigned *)(ep->ws + ep->lay.g1_done);
  p->g2_done = (unsigned *)(ep->ws + ep->lay.g2_done);
  p->host = &ep->host_dev->w;
  p->seq = epoch;
  p->timeout_ns = (unsigned long long)timeout_ms * 1000000ULL;
}

/* This rank's tokens and the group. */
static void group_params(const hr_moe_ep *ep, const hr_moe_args *a, hr__moe_ep_group *g)
{
  int i;
  g->x = (const uint16_t *)a->x;
  g->ids = a->topk_ids;
  g->wts = a->topk_weights;
  g->y = (uint16_t *)a->y;
  g->T = a->tokens;
  g->rank = ep->rank;
  g->nranks = ep->nranks;
  g->cap = ep->shape.max_tokens;
  g->src_pos = (int32_t *)(ep->ws + ep->lay.src_pos);
  g->esync = (hr__moe_ep_sync *)(ep->ws + ep->lay.sync + sizeof(hr__moe_sync));
  g->ehost = ep->host_dev;
  for(i = 0; i < ep->nranks; i++)
    g->peer[i] = ep->peer[i];
  g->off_recv_ids = ep->lay.recv_ids;
  g->off_recv_tok = ep->lay.recv_tok;
  g->off_recv_x = ep->lay.recv_x;
  g->off_ret = ep->lay.ret;
  g->off_recv_w = ep->lay.recv_w;
  g->off_recv_dy = ep->lay.recv_dy;
  g->off_ret_dw = ep->lay.ret_dw;
}

/* One epoch: the forward of args a, or (g not NULL) the backward of g. */
static int launch(hr_moe_ep *ep, const hr_lease *lease, int grid, int mode, int cluster,
                  const hr_moe_args *a, const hr_moe_grad_args *g, cudaStream_t stream)
{
  hr__moe_ep_params e;
  hr__moe_ep_bwd_params eb;
  const char *what = g ? "backward" : "forward";
  cudaStreamCaptureStatus cap;
  cudaError_t ce;
  uint32_t epoch;
  int prev, err, timeout_ms, agnostic;

  if(!ep)
    return HR_EINVAL;
  /* The epoch is spent whatever follows, so that every rank's calls stay
   * in step (headroom_moe.h). */
  epoch = ++ep->calls;
  if(mode == HR_MODE_PARTITION)
    mode = HR_MODE_HEADROOM;
  agnostic = mode == HR_MODE_AGNOSTIC;
  if(agnostic)
    cluster = 1;                       /* its parts share nothing across CTAs */
  if(g)
    a = &g->fwd;
  if(!(g ? grad_args_ok(ep, g) : args_ok(ep, a, 0)) ||
     (mode != HR_MODE_HEADROOM && mode != HR_MODE_COOPERATIVE && !agnostic) ||
     (cluster != 1 && cluster != 2) || grid < 1 || grid % cluster != 0 ||
     (mode != HR_MODE_COOPERATIVE && grid > ep->sms))
    return HR_EINVAL;
  if(cudaStreamIsCapturing(stream, &cap) != cudaSuccess) {
    cudaGetLastError();
    cap = cudaStreamCaptureStatusNone;
  }
  if(cap != cudaStreamCaptureStatusNone)
    return HR_EUNSUPPORTED;            /* an epoch a launch: no replays */
  if(a->gate_up)
    return HR_EUNSUPPORTED;            /* the EP backward recomputes GEMM1 */

  err = hr__moe_device_enter(ep->device, &prev);
  if(err)
    return err;
  /* The last launch failed and nobody waited: take the record now, so
   * that the barrier words get cleared below. */
  if(ep->in_flight && ep->host->w.seq == ep->seq) {
    failure_take(ep);
    ep->in_flight = 0;
  }
  if((ep->in_flight || ep->needs_reset) && stream != ep->stream) {
    err = hr__moe_err_from_cuda(cudaStreamWaitEvent(stream, ep->done, 0));
    if(err)
      goto out;
  }
  if(ep->needs_reset) {
    err = hr__moe_err_from_cuda(cudaMemsetAsync(ep->ws, 0, ep->lay.reset_bytes, stream));
    if(err)
      goto out;
    ep->needs_reset = 0;
  }
  if(!g && (a->w1 != ep->tm_w1_src || a->w2 != ep->tm_w2_src)) {
    ep->tm_w1_src = ep->tm_w2_src = NULL;
    err = hr__moe_encode_maps(&ep->local, NULL, NULL, a->w1, a->w2, NULL, NULL, &ep->tm_w1,
                              &ep->tm_w2);
    if(err)
      goto out;
    ep->tm_w1_src = a->w1;
    ep->tm_w2_src = a->w2;
  }

  timeout_ms = a->timeout_ms ? a->timeout_ms : HR_MOE_DEFAULT_TIMEOUT_MS;
  if(mode == HR_MODE_COOPERATIVE && grid > ep->sms) {
    ce = cudaErrorCooperativeLaunchTooLarge;
  } else if(!g) {
    hr__moe_params *p = &e.p;
    memset(&e, 0, sizeof(e));
    local_params(ep, a, epoch, timeout_ms, p);
    p->tm_w1 = ep->tm_w1;
    p->tm_w2 = ep->tm_w2;
    p->tm_xs = ep->tm_xs;
    p->tm_h = ep->tm_h;
    if(p->H >= HR__MOE_CLAIM_MIN_H)
      p->flags |= HR__MOE_FLAG_CLAIM;
    group_params(ep, a, &e.g);
    if(agnostic)
      ce = hr__moe_ep_agn_launch(&e, NULL, grid, stream);
    else
      ce = hr__moe_ep_launch(&e, grid, mode == HR_MODE_COOPERATIVE, cluster, stream);
  } else {
    hr__moe_bwd_params *b = &eb.b;
    memset(&eb, 0, sizeof(eb));
    local_params(ep, a, epoch, timeout_ms, &b->f);
    /* the received rows' weights and dy; w a in h, the dx rows in ypair */
    b->f.wts = (const float *)(ep->block + ep->lay.recv_w);
    b->dy = (const uint16_t *)(ep->block + ep->lay.recv_dy);
    b->dw1 = g->dw1;
    b->dw2 = g->dw2;
    b->dw_bf16 = g->dw_dtype == HR_MOE_DW_BF16;
    err = hr__moe_encode_dw_maps(&ep->local, b);
    if(err)
      goto out;
    b->sorted_pair = (int32_t *)(ep->ws + ep->lay.sorted_pair);
    b->dh = (uint16_t *)(ep->ws + ep->lay.dh);
    b->wa = b->f.h;
    b->dxrow = b->f.ypair;
    b->dwp = (float *)(ep->ws + ep->lay.dwp);
    group_params(ep, a, &eb.g);
    eb.g.dy = (const uint16_t *)g->dy;
    eb.g.dx = (uint16_t *)g->dx;
    eb.g.dtw = g->dtopk_weights;
    if(agnostic) {
      memset(&e, 0, sizeof(e));
      e.p = b->f;
      e.g = eb.g;
      ce = hr__moe_ep_agn_launch(&e, b, grid, stream);
    } else {
      ce = hr__moe_ep_bwd_launch(&eb, grid, mode == HR_MODE_COOPERATIVE, stream);
    }
  }
  if(ce != cudaSuccess) {
    cudaGetLastError();
    err = hr__moe_err_from_cuda(ce);
    if(err == HR_ENOGPU || err == HR_ENOMEM)
      err = HR_ECUDA;
    if(lease) {
      hr_incident_detail d;
      char msg[160];
      memset(&d, -1, sizeof(d));
      d.grid = grid;
      d.timeout_ms = timeout_ms;
      d.cuda_error = (int)ce;
      snprintf(msg, sizeof(msg), "mega-MoE EP %s (rank %d of %d) launch of %d CTAs failed: %s",
               what, ep->rank, ep->nranks, grid, cudaGetErrorString(ce));
      hr_report(hr_lease_client(lease), lease, HR_INCIDENT_LAUNCH_FAILURE, &d, msg);
    }
    goto out;
  }
  ep->seq = epoch;
  ep->stream = stream;
  ep->in_flight = 1;
  ep->backward = g != NULL;
  ep->lease = lease;
  ep->grid = grid;
  ep->timeout_ms = timeout_ms;
  err = hr__moe_err_from_cuda(cudaEventRecord(ep->done, stream));
  if(err == HR_ENOGPU || err == HR_ENOMEM)
    err = HR_ECUDA;
out:
  hr__moe_device_leave(ep->device, prev);
  return err;
}

/* A call with a lease: its launch config; a call refused before the
 * launch still spends its epoch. */
static int launch_leased(hr_moe_ep *ep, const hr_lease *lease, const hr_moe_args *a,
                         const hr_moe_grad_args *g, cudaStream_t stream)
{
  hr_mode mode;
  int grid, cluster, err;

  if(!ep)
    return HR_EINVAL;
  if(!lease) {
    ep->calls++;                       /* in step with the peers */
    return HR_EINVAL;
  }
  err = hr_lease_launch_config(lease, &grid, &cluster, &mode);
  if(err) {
    ep->calls++;
    return err;
  }
  /* the backward's tiles share nothing across CTAs: no clusters */
  return launch(ep, lease, grid, (int)mode, !g && cluster > 1 ? 2 : 1, a, g, stream);
}

int hr_moe_ep_forward_grid(hr_moe_ep *ep, int grid, hr_mode mode, const hr_moe_args *args,
                           void *stream)
{
  return launch(ep, NULL, grid, (int)mode, 1, args, NULL, (cudaStream_t)stream);
}

int hr_moe_ep_forward(hr_moe_ep *ep, const hr_lease *lease, const hr_moe_args *args,
                      void *stream)
{
  return launch_leased(ep, lease, args, NULL, (cudaStream_t)stream);
}

int hr_moe_ep_backward_grid(hr_moe_ep *ep, int grid, hr_mode mode, const hr_moe_grad_args *args,
                            void *stream)
{
  if(ep && !args) {
    ep->calls++;
    return HR_EINVAL;
  }
  return launch(ep, NULL, grid, (int)mode, 1, args ? &args->fwd : NULL, args,
                (cudaStream_t)stream);
}

int hr_moe_ep_backward(hr_moe_ep *ep, const hr_lease *lease, const hr_moe_grad_args *args,
                       void *stream)
{
  if(ep && !args) {
    ep->calls++;
    return HR_EINVAL;
  }
  return launch_leased(ep, lease, args ? &args->fwd : NULL, args, (cudaStream_t)stream);
}

/* ---- waiting ----------------------------------------------------------- */

/* The error word says launch ep->seq failed: whose failure, where, why;
 * a timeout at one of this rank's own grid barriers under a lease goes
 * to the daemon (more headroom may help; a peer's failure it cannot). */
static int failure_take(hr_moe_ep *ep)
{
  volatile hr__moe_ep_host_words *h = ep->host;
  hr_moe_ep_failure *f = &ep->failure;
  const int code = h->w.code, wait = h->w.barrier;
  int fcode;

  memset(f, 0, sizeof(*f));
  f->epoch = ep->seq;
  f->noticed_wait = wait < 0 ? HR_MOE_EP_WAIT_START : wait;
  if(code == HR__MOE_EP_FAIL_PEER) {
    f->failed_rank = h->failed_rank;
    fcode = h->failed_code;
    f->wait = h->failed_wait;
    f->waited_for = h->waited_for;
  } else {
    f->failed_rank = ep->rank;
    fcode = code;
    f->wait = f->noticed_wait;
    f->waited_for = wait >= HR_MOE_EP_WAIT_DISPATCH ? h->waited_for : -1;
  }
  f->code = fcode == HR__MOE_FAIL_TIMEOUT ? HR_EBARRIER_TIMEOUT : HR_EABORTED;
  f->local.code = f->code;
  f->local.detail.barrier = f->noticed_wait;
  f->local.detail.arrived = h->w.arrived;
  f->local.detail.expected = h->w.expected;
  f->local.detail.sm = h->w.sm;
  f->local.detail.grid = ep->grid;
  f->local.detail.timeout_ms = ep->timeout_ms;
  f->local.detail.cuda_error = -1;
  f->local.cta = h->w.cta;
  f->local.reported = 1;
  ep->has_failure = 1;
  ep->needs_reset = 1;
  if(ep->lease && code == HR__MOE_FAIL_TIMEOUT && wait >= 0 && wait < HR_MOE_EP_WAIT_DISPATCH) {
    char msg[200];
    snprintf(msg, sizeof(msg),
             "mega-MoE EP %s (rank %d of %d) barrier %d timed out after %d ms: %d of %d "
             "CTAs arrived (noticed on SM %d, grid %d)",
             ep->backward ? "backward" : "forward", ep->rank, ep->nranks, wait, ep->timeout_ms, f->local.detail.arrived,
             f->local.detail.expected, f->local.detail.sm, ep->grid);
    f->local.reported = hr_report(hr_lease_client(ep->lease), ep->lease,
                                  HR_INCIDENT_BARRIER_TIMEOUT, &f->local.detail, msg);
  }
  return f->code;
}

/* Until the launch ends or fails, or timeout_ns (< 0: no bound) has
 * passed. */
static int sync_wait(hr_moe_ep *ep, long long timeout_ns)
{
  int prev, err;

  if(!ep->in_flight)
    return HR_OK;
  err = hr__moe_device_enter(ep->device, &prev);
  if(err)
    return err;
  err = hr__moe_wait_launch(ep->done, &ep->host->w.seq, ep->seq, timeout_ns);
  if(err != HR_ETIMEDOUT) {            /* still in flight past the bound */
    if(err == 1)
      err = failure_take(ep);
    ep->in_flight = 0;
  }
  hr__moe_device_leave(ep->device, prev);
  return err;
}

int hr_moe_ep_sync(hr_moe_ep *ep)
{
  if(!ep)
    return HR_EINVAL;
  return sync_wait(ep, -1);
}

int hr_moe_ep_sync_timeout(hr_moe_ep *ep, int timeout_ms)
{
  if(!ep || timeout_ms < 0)
    return HR_EINVAL;
  return sync_wait(ep, (long long)timeout_ms * 1000000LL);
}

int hr_moe_ep_last_failure(const hr_moe_ep *ep, hr_moe_ep_failure *out)
{
  if(!ep || !out)
    return HR_EINVAL;
  if(!ep->has_failure)
    return HR_ENOTFOUND;
  *out = ep->failure;
  return HR_OK;
}

int hr_moe_ep_abort(hr_moe_ep *ep)
{
  if(!ep)
    return HR_EINVAL;
  ep->host->w.abort_seq = ep->seq;
  __sync_synchronize();
  return HR_OK;
}
