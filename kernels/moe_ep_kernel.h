/*
 * moe_ep_kernel.h: what the EP launch path (moe_ep_api.cu) and the EP
 * kernel (moe_ep.cu) share. Internal: prefix hr__.
 */
#ifndef HR_MOE_EP_KERNEL_H
#define HR_MOE_EP_KERNEL_H

#include <stdint.h>

#include "moe_backward.h"
#include "moe_ep.h"
#include "moe_kernel.h"

/* The code of a launch that stopped because a peer failed: beside
 * moe_kernel.h's HR__MOE_FAIL_* (which a rank's own failure records). */
#define HR__MOE_EP_FAIL_PEER 16

/* Pinned, host-mapped: hr_moe's error word (seq is the epoch; barrier is
 * where this rank stopped, HR_MOE_EP_WAIT_*), then what only EP says.
 * The EP fields are written before w.seq, by the CTA that records a
 * failure at a wait for peers (moe_ep.cu, ep_fail); a failure at a grid
 * barrier is recorded by moe_barrier.cuh alone, and is this rank's own. */
typedef struct hr__moe_ep_host_words {
  hr__moe_host_words w;
  volatile int32_t failed_rank;  /* the rank whose failure this is */
  volatile int32_t failed_code;  /* its HR__MOE_FAIL_* */
  volatile int32_t failed_wait;  /* where it failed, HR_MOE_EP_WAIT_* */
  volatile int32_t waited_for;   /* whom it waited for; -1 */
} hr__moe_ep_host_words;

/* The EP kernel's own words in the local workspace, after hr__moe_sync
 * (cleared with it after a failure). */
typedef struct hr__moe_ep_sync {
  unsigned told;      /* the epoch whose failure this rank has told its
                         peers (one CTA tells them) */
  /* the agnostic form: the received pairs' scan (ep_wait_dispatch's cs),
   * from its exchange kernel to the return kernel */
  int cs[HR_MOE_EP_MAX_RANKS + 1];
  unsigned pad[31 - HR_MOE_EP_MAX_RANKS - 1];
} hr__moe_ep_sync;

/* What an EP launch knows of its group, beside the local problem: this
 * rank's own tokens, its place, and every rank's peer-visible block. */
typedef struct hr__moe_ep_group {
  /* this rank's own tokens */
  const uint16_t *x;
  const int32_t *ids;     /* GLOBAL expert ids */
  const float *wts;
  uint16_t *y;            /* the forward's output */
  const uint16_t *dy;     /* the backward's: NULL in a forward */
  uint16_t *dx;
  float *dtw;
  int T;
  int rank, nranks;
  int cap;                /* rows per source region (max_tokens) */
  int32_t *src_pos;       /* [cap * k]: pair (t, j)'s row in ret, or -1 */
  hr__moe_ep_sync *esync;
  hr__moe_ep_host_words *ehost;
  /* every rank's peer-visible block as this process maps it, and the
   * offsets in it (moe_ep.h's layout; the last three 0 in a block made
   * without the backward) */
  char *peer[HR_MOE_EP_MAX_RANKS];
  unsigned long long off_recv_ids, off_recv_tok, off_recv_x, off_ret;
  unsigned long long off_recv_w, off_recv_dy, off_ret_dw;
} hr__moe_ep_group;

/* One EP forward, by value (a __grid_constant__: the tensor maps of the
 * local problem are read from the parameter space). p is the local
 * problem, as hr_moe_forward's kernel sees one: x the received rows
 * [rows][H], ids their local ids [rows][k], T = rows (the capacity: only
 * moe_gather_on reads it, to size x), E = E/R, w1 and w2 this rank's
 * experts, sorted_tok, pos_of, h, ypair over the received pairs; sync,
 * host (-> &host_words.w) and seq = the epoch. wts and y unused. */
typedef struct hr__moe_ep_params {
  hr__moe_params p;
  hr__moe_ep_group g;
} hr__moe_ep_params;

/* One EP backward: b the local problem as hr_moe_backward's kernel sees
 * one (b.f as p above, with wts the received rows' weights [rows][k];
 * b.dy the received dy rows; b.dx and b.dtw unused: the combine writes
 * g.dx and g.dtw), g the group with dy, dx and dtw set. */
typedef struct hr__moe_ep_bwd_params {
  hr__moe_bwd_params b;
  hr__moe_ep_group g;
} hr__moe_ep_bwd_params;

#ifdef __cplusplus
extern "C" {
#endif

/* Once per device (the current one), before the first launch. */
cudaError_t hr__moe_ep_prepare(void);

/* Launch `grid` CTAs on `stream` (`coop`: the cooperative attribute,
 * `cluster` > 1: clusters of that many). */
cudaError_t hr__moe_ep_launch(const hr__moe_ep_params *e, int grid, int coop, int cluster,
                              cudaStream_t stream);

/* The backward's (moe_ep_backward.cu): once per device, and a launch
 * (no clusters: the backward's tiles share nothing across CTAs). */
cudaError_t hr__moe_ep_bwd_prepare(void);
cudaError_t hr__moe_ep_bwd_launch(const hr__moe_ep_bwd_params *e, int grid, int coop,
                                  cudaStream_t stream);

/* The agnostic form (moe_ep_agnostic.cu): the forward (b NULL) or the
 * backward (e->p = b->f) as a chain of launches on `stream`, none of
 * which waits for a CTA that is not running; `grid` CTAs for the parts
 * that spread. */
cudaError_t hr__moe_ep_agn_launch(const hr__moe_ep_params *e, const hr__moe_bwd_params *b,
                                  int grid, cudaStream_t stream);

/* moe_api.cu: the tensor maps of a forward over shape s (s->experts
 * experts, s->max_tokens * s->topk pairs) on the workspace ypair and h
 * (tm_xs, tm_h; skipped where NULL) and on the weights w1, w2 (tm_w1,
 * tm_w2; skipped where NULL), as hr_moe_forward's launch makes them.
 * HR_OK, HR_EUNSUPPORTED (a driver without TMA), HR_ECUDA. */
int hr__moe_encode_maps(const hr_moe_shape *s, void *ypair, void *h, const void *w1,
                        const void *w2, CUtensorMap *tm_xs, CUtensorMap *tm_h,
                        CUtensorMap *tm_w1, CUtensorMap *tm_w2);

#ifdef __cplusplus
}
#endif

#endif /* HR_MOE_EP_KERNEL_H */
