/*
 * ep_group.h: R virtual ranks of the expert-parallel kernels
 * (hr_moe_ep_*) in this process on GPU 0, for test_moe_ep.c and
 * test_moe_ep_backward.c: the group and its bootstrap (an allgather of
 * threads), each rank's share of a gt_moe problem, the routings the
 * tests use, and the check of every rank's failure record.
 */
#ifndef HR_EP_GROUP_H
#define HR_EP_GROUP_H

#include <pthread.h>

#include "gpu_util.h"

/* Every launch's barrier timeout where no failure is meant. */
#define EP_TIMEOUT_MS 5000

typedef struct ep_group {
  int R, cap, sms;
  int backward;               /* made with boot.backward = 1 */
  hr_mode mode;               /* run_ranks' launches: HR_MODE_HEADROOM (the
                                 barrier form) or HR_MODE_AGNOSTIC */
  gt_shape s;
  hr_moe_ep *ep[HR_MOE_EP_MAX_RANKS];
  void *st[HR_MOE_EP_MAX_RANKS];
  uint16_t *y;                /* [R cap, H]: every rank's y rows in order */
  uint16_t *y_h, *y_ref;
  /* the bootstrap: an allgather of threads */
  pthread_barrier_t bar;
  unsigned char buf[HR_MOE_EP_MAX_RANKS * 512];
} ep_group;

typedef struct ep_rank {
  ep_group *G;
  int rank, rc;
} ep_rank;

/* R ranks of shape s, max_tokens cap each, each with a non-blocking
 * stream (sms: the GPU's); `backward`: made for hr_moe_ep_backward too.
 * Exits on failure. */
void group_create(ep_group *G, const gt_shape *s, int R, int cap, int sms, int backward);
/* Every rank synced, then destroyed. */
void group_free(ep_group *G);

/* Rank r's args: cnt[r] of g's tokens from the ranks before, its experts'
 * weights; y its rows of G->y. */
hr_moe_args rank_args(const gt_moe *g, const ep_group *G, const int *cnt, int r,
                      int timeout_ms);
/* The first token of rank r: the sum of cnt[0..r). */
int rank_first(const int *cnt, int r);

/* Every rank in `mask` launches a forward epoch (hr_moe_ep_forward_grid,
 * `grid`, G->mode), then syncs: rc[r], and the ms it took. block_ms > 0: the
 * last rank's stream first gets a kernel that holds it that long (queued
 * past the device-wide sync here, which would wait for it). */
double run_ranks(const gt_moe *g, ep_group *G, const int *cnt, unsigned mask, int grid,
                 int timeout_ms, int block_ms, int *rc);
/* The single-GPU y for g's inputs, into G->y_ref; 1 when it ran. */
int reference(gt_moe *g, ep_group *G, const char *what);
/* y (G->y) bitwise against G->y_ref, every element written: prints one
 * line; counts a failure. 1 when equal. */
int check_y(const gt_moe *g, ep_group *G, int grid, const char *what, double ms);
/* Every rank's forward of an epoch, y bitwise against G->y_ref. */
void expect_bitwise(gt_moe *g, ep_group *G, const int *cnt, int grid, const char *what);

/* g's T tokens shared as evenly as can be, or with the last rank empty. */
void split(const ep_group *G, int T, int last_empty, int *cnt);

/* Routings of T tokens (then uploaded): every slot to rank d's experts;
 * random experts, none of rank d's; random with a quarter of the slots
 * outside [0, E). */
void route_to_rank(gt_moe *g, int T, int R, int d);
void route_avoiding(gt_moe *g, int T, int R, int d);
void route_bad_ids(gt_moe *g, int T);

/* Every rank in `mask` ended with `code`, failed_rank in `from` (a mask),
 * at `wait` (-1: any), having waited for rank `waited` (-1: any), noticed at
 * `noticed` (-1: any). */
void expect_failure(ep_group *G, const int *rc, unsigned mask, int code, unsigned from,
                    int wait, int waited, int noticed, const char *what);

/* The start both EP tests share: GPU 0 required, the seed, the line
 * naming what the test holds to (`criterion`). The GPU's SMs. */
int ep_test_start(const char *name, const char *criterion);

/* One correctness case: R ranks of gt_shapes[shape], max_tokens cap each,
 * on each of `grids` (n of them). */
typedef void (*ep_case_fn)(int shape, int R, int cap, int sms, const int *grids, int n);
/* The sweep both run: R = 1, 2, 4, .. HR_MOE_EP_MAX_RANKS, each on its
 * share of the SMs: GT_SMALL (cap 256) on the share, a third of it and 1
 * CTA; GT_QWEN3 (cap qwen_cap) on the share and half of it. */
void ep_sweep(int sms, int qwen_cap, ep_case_fn run);

#endif /* HR_EP_GROUP_H */
