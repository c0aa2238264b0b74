/*
 * test_moe_ep_backward.c: the expert-parallel backward (hr_moe_ep_backward)
 * with R virtual ranks in this process on GPU 0 (ep_group.h: each rank a
 * non-blocking stream of its own, grid <= SMs / R), against the
 * single-GPU backward.
 *
 * The criterion: dx, d(w) (rank r's tokens, in the rows of the global
 * problem they are) and dW1, dW2 (rank r's experts, in the slices of the
 * global dW they are) BITWISE equal to hr_moe_backward_grid's over the
 * same global W1, W2, x, ids, weights and dy, compared on the device
 * over every byte; the reference's outputs start at 0 and the ranks' at
 * NaN, and the ranks' must come back finite, so an output left unwritten
 * fails. For R = 1, 2, 4, 8 and several grids per rank, on the small
 * shape (E 8, H 256, I 512, k 2) and a Qwen3-30B-A3B one (E 128, H 2048,
 * I 768, k 8), dW in fp32 and in bf16:
 *   - random routing, every rank full, with the forward's y checked on
 *     the same (backward-sized) contexts before;
 *   - few tokens, shared unevenly, the last rank with none;
 *   - every slot of every token routed to one rank's experts;
 *   - routing that gives rank 0's experts no token (their dW: zeros);
 *   - ids outside [0, E) in a quarter of the slots;
 *   - one token in all.
 * Each case in the barrier form and in the agnostic form (a chain of
 * launches none of which waits for a CTA that is not running).
 * Then (small shape, R = 4): one rank's backward refused for its
 * arguments, so never launched: the others end with HR_EBARRIER_TIMEOUT
 * at the dispatch wait naming it, and the next backward on every rank is
 * bitwise again; an unknown mode and a NULL dW1 are refused on every
 * rank; a context made without the backward refuses one
 * (HR_EINVAL, on every rank, so the epochs stay in step) and its next
 * forward is bitwise.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "ep_group.h"
#include "gpu_bwd.h"
#include "gpu_util.h"

#define NAME "test_moe_ep_backward"
#define FAIL_TIMEOUT_MS 300

/* The backward's buffers for the global problem: the ranks' outputs and
 * the reference's, dW sized for fp32. */
typedef struct bwd_bufs {
  size_t n_dw1, n_dw2;          /* elements, all experts */
  uint16_t *dy, *dx, *dx_ref;
  void *dw1, *dw2, *dw1_ref, *dw2_ref;
  float *dtw, *dtw_ref;
} bwd_bufs;

static void bufs_init(bwd_bufs *B, const gt_shape *s, int max_T)
{
  const size_t T = (size_t)max_T;
  memset(B, 0, sizeof(*B));
  B->n_dw1 = (size_t)s->E * 2 * s->I * s->H;
  B->n_dw2 = (size_t)s->E * s->H * s->I;
  GT_CUDA(cudaMalloc((void **)&B->dy, T * s->H * 2));
  GT_CUDA(cudaMalloc((void **)&B->dx, T * s->H * 2));
  GT_CUDA(cudaMalloc((void **)&B->dx_ref, T * s->H * 2));
  GT_CUDA(cudaMalloc(&B->dw1, B->n_dw1 * 4));
  GT_CUDA(cudaMalloc(&B->dw2, B->n_dw2 * 4));
  GT_CUDA(cudaMalloc(&B->dw1_ref, B->n_dw1 * 4));
  GT_CUDA(cudaMalloc(&B->dw2_ref, B->n_dw2 * 4));
  GT_CUDA(cudaMalloc((void **)&B->dtw, T * s->k * 4));
  GT_CUDA(cudaMalloc((void **)&B->dtw_ref, T * s->k * 4));
}

static void bufs_free(bwd_bufs *B)
{
  cudaFree(B->dy);
  cudaFree(B->dx);
  cudaFree(B->dx_ref);
  cudaFree(B->dw1);
  cudaFree(B->dw2);
  cudaFree(B->dw1_ref);
  cudaFree(B->dw2_ref);
  cudaFree(B->dtw);
  cudaFree(B->dtw_ref);
}

/* The single-GPU backward of g's T tokens (fresh dy) into the _ref
 * buffers, zeroed first. 1 when it ran. */
static int reference_bwd(gt_moe *g, bwd_bufs *B, int dw_dtype, const char *what)
{
  const gt_shape *s = &g->s;
  const int esize = dw_dtype == HR_MOE_DW_BF16 ? 2 : 4;
  hr_moe_grad_args ga;
  struct cudaDeviceProp prop;
  int rc;

  GT_CUDA(cudaGetDeviceProperties(&prop, 0));
  GT_EXPECT(gt_fill_bf16(B->dy, (size_t)g->T * s->H, gt_rand(), 1.0f, g->stream) == 0,
            "dy's fill");
  GT_CUDA(cudaMemset(B->dx_ref, 0, (size_t)g->T * s->H * 2));
  GT_CUDA(cudaMemset(B->dw1_ref, 0, B->n_dw1 * esize));
  GT_CUDA(cudaMemset(B->dw2_ref, 0, B->n_dw2 * esize));
  GT_CUDA(cudaMemset(B->dtw_ref, 0, (size_t)g->T * s->k * 4));
  GT_CUDA(cudaDeviceSynchronize());
  memset(&ga, 0, sizeof(ga));
  ga.fwd = gt_args(g, EP_TIMEOUT_MS);
  ga.dy = B->dy;
  ga.dx = B->dx_ref;
  ga.dw1 = B->dw1_ref;
  ga.dw2 = B->dw2_ref;
  ga.dtopk_weights = B->dtw_ref;
  ga.dw_dtype = dw_dtype;
  rc = hr_moe_backward_grid(g->m, prop.multiProcessorCount, HR_MODE_HEADROOM, &ga, g->stream);
  if(rc == HR_OK)
    rc = hr_moe_sync(g->m);
  GT_EXPECT(rc == HR_OK, "%s %s T=%d: the single-GPU backward: %s", s->name, what, g->T,
            hr_strerror(rc));
  return rc == HR_OK;
}

/* Rank r's backward args: its tokens' rows of dy, dx and d(w), its
 * experts' slices of dW. */
static hr_moe_grad_args rank_grad_args(const gt_moe *g, const ep_group *G, const bwd_bufs *B,
                                       const int *cnt, int r, int dw_dtype, int timeout_ms)
{
  const gt_shape *s = &g->s;
  const size_t el = (size_t)(s->E / G->R), off = (size_t)rank_first(cnt, r);
  const size_t esize = dw_dtype == HR_MOE_DW_BF16 ? 2 : 4;
  hr_moe_grad_args ga;

  memset(&ga, 0, sizeof(ga));
  ga.fwd = rank_args(g, G, cnt, r, timeout_ms);
  ga.fwd.y = NULL;
  if(cnt[r] > 0) {
    ga.dy = B->dy + off * s->H;
    ga.dx = B->dx + off * s->H;
    ga.dtopk_weights = B->dtw + off * s->k;
  }
  ga.dw1 = (char *)B->dw1 + (size_t)r * el * 2 * s->I * s->H * esize;
  ga.dw2 = (char *)B->dw2 + (size_t)r * el * s->H * s->I * esize;
  ga.dw_dtype = dw_dtype;
  return ga;
}

/* Count on the device: bytes of a and b that differ (in 4-byte words). */
static size_t diff_bytes(const void *a, const void *b, size_t bytes, void *stream)
{
  size_t n = 0;
  GT_EXPECT(gt_dev_count_diff(a, b, bytes, stream, &n) == 0, "the device's diff count");
  return n;
}

static size_t nonfinite(const void *p, size_t n, int bf16, void *stream)
{
  size_t c = 0;
  GT_EXPECT(gt_dev_count_nonfinite(p, n, bf16, stream, &c) == 0, "the device's count");
  return c;
}

/* Every rank's backward of an epoch (the outputs NaN first), against the
 * reference, bitwise. */
static void expect_bwd_bitwise(gt_moe *g, ep_group *G, bwd_bufs *B, const int *cnt, int grid,
                               int dw_dtype, const char *what)
{
  const gt_shape *s = &g->s;
  const int bf = dw_dtype == HR_MOE_DW_BF16, esize = bf ? 2 : 4;
  const size_t T = (size_t)g->T;
  const char *mode = G->mode == HR_MODE_AGNOSTIC ? " agnostic" : "";
  int rc[HR_MOE_EP_MAX_RANKS], r, ok = 1;
  size_t ddx, ddw1, ddw2, ddtw, bad;
  double t0, ms;

  GT_CUDA(cudaMemset(B->dx, 0xff, T * s->H * 2));
  GT_CUDA(cudaMemset(B->dw1, 0xff, B->n_dw1 * esize));
  GT_CUDA(cudaMemset(B->dw2, 0xff, B->n_dw2 * esize));
  GT_CUDA(cudaMemset(B->dtw, 0xff, T * s->k * 4));
  GT_CUDA(cudaDeviceSynchronize());
  t0 = gt_now_ms();
  for(r = 0; r < G->R; r++) {
    hr_moe_grad_args ga = rank_grad_args(g, G, B, cnt, r, dw_dtype, EP_TIMEOUT_MS);
    rc[r] = hr_moe_ep_backward_grid(G->ep[r], grid, G->mode, &ga, G->st[r]);
  }
  for(r = 0; r < G->R; r++)
    if(rc[r] == HR_OK)
      rc[r] = hr_moe_ep_sync(G->ep[r]);
  ms = gt_now_ms() - t0;
  for(r = 0; r < G->R; r++) {
    GT_EXPECT(rc[r] == HR_OK, "%s R=%d grid=%d T=%d %s: rank %d: %s", s->name, G->R, grid,
              g->T, what, r, hr_strerror(rc[r]));
    ok &= rc[r] == HR_OK;
  }
  if(!ok)
    return;
  ddx = diff_bytes(B->dx, B->dx_ref, T * s->H * 2, g->stream);
  ddw1 = diff_bytes(B->dw1, B->dw1_ref, B->n_dw1 * esize, g->stream);
  ddw2 = diff_bytes(B->dw2, B->dw2_ref, B->n_dw2 * esize, g->stream);
  ddtw = diff_bytes(B->dtw, B->dtw_ref, T * s->k * 4, g->stream);
  bad = nonfinite(B->dx, T * s->H, 1, g->stream) + nonfinite(B->dw1, B->n_dw1, bf, g->stream) +
        nonfinite(B->dw2, B->n_dw2, bf, g->stream) + nonfinite(B->dtw, T * s->k, 0, g->stream);
  GT_EXPECT(ddx == 0 && ddw1 == 0 && ddw2 == 0 && ddtw == 0 && bad == 0,
            "%s R=%d grid=%d%s T=%d dW %s %s: words differing from hr_moe_backward's: dx %zu, "
            "dW1 %zu, dW2 %zu, d(w) %zu; %zu elements not finite",
            s->name, G->R, grid, mode, g->T, bf ? "bf16" : "fp32", what, ddx, ddw1, ddw2, ddtw,
            bad);
  if(ddx == 0 && ddw1 == 0 && ddw2 == 0 && ddtw == 0 && bad == 0)
    printf("ok: %s R=%d grid=%d%s T=%d dW %s %s: dx, dW1, dW2, d(w) bitwise "
           "hr_moe_backward's (%.2f ms, every rank)\n",
           s->name, G->R, grid, mode, g->T, bf ? "bf16" : "fp32", what, ms);
}

/* The barrier form, then the agnostic form, of the same backward. */
static void both_forms(gt_moe *g, ep_group *G, bwd_bufs *B, const int *cnt, int grid,
                       int dw_dtype, const char *what)
{
  G->mode = HR_MODE_HEADROOM;
  expect_bwd_bitwise(g, G, B, cnt, grid, dw_dtype, what);
  G->mode = HR_MODE_AGNOSTIC;
  expect_bwd_bitwise(g, G, B, cnt, grid, dw_dtype, what);
  G->mode = HR_MODE_HEADROOM;
}

/* ---- the correctness cases ---------------------------------------------- */

static void correctness(int shape, int R, int cap, int sms, const int *grids, int ngrids)
{
  gt_moe g;
  ep_group G;
  bwd_bufs B;
  int cnt[HR_MOE_EP_MAX_RANKS], i, T;
  char what[96];

  gt_moe_init(&g, &gt_shapes[shape], R * cap);
  group_create(&G, &gt_shapes[shape], R, cap, sms, 1);
  bufs_init(&B, &gt_shapes[shape], R * cap);

  /* random, every rank full: the forward first, then each grid, dW in
   * fp32 at the first grid and bf16 at the others */
  gt_route_random(&g, R * cap);
  split(&G, g.T, 0, cnt);
  if(reference(&g, &G, "random"))
    expect_bitwise(&g, &G, cnt, grids[0], "random routing, a context with the backward");
  for(i = 0; i < ngrids; i++) {
    const int dt = i == 0 ? HR_MOE_DW_FP32 : HR_MOE_DW_BF16;
    if(reference_bwd(&g, &B, dt, "random"))
      both_forms(&g, &G, &B, cnt, grids[i], dt, "random routing, every rank full");
  }

  /* few tokens, the last rank with none */
  T = 5 * R + 3;
  gt_route_random(&g, T);
  split(&G, T, 1, cnt);
  if(reference_bwd(&g, &B, HR_MOE_DW_FP32, "uneven"))
    for(i = 0; i < ngrids; i++)
      both_forms(&g, &G, &B, cnt, grids[i], HR_MOE_DW_FP32,
                         "random, uneven, last rank without tokens");

  /* everything to one rank */
  route_to_rank(&g, R * cap / 2, R, R / 2);
  split(&G, g.T, 0, cnt);
  snprintf(what, sizeof(what), "every slot to rank %d", R / 2);
  if(reference_bwd(&g, &B, HR_MOE_DW_BF16, what))
    both_forms(&g, &G, &B, cnt, grids[0], HR_MOE_DW_BF16, what);

  /* rank 0 receives nothing */
  if(R > 1) {
    route_avoiding(&g, R * cap / 2, R, 0);
    split(&G, g.T, 0, cnt);
    if(reference_bwd(&g, &B, HR_MOE_DW_FP32, "rank 0 gets no tokens"))
      for(i = 0; i < ngrids; i++)
        both_forms(&g, &G, &B, cnt, grids[i], HR_MOE_DW_FP32,
                           "no token for rank 0's experts");
  }

  /* ids outside [0, E) */
  route_bad_ids(&g, R * cap / 2 + 1);
  split(&G, g.T, 0, cnt);
  if(reference_bwd(&g, &B, HR_MOE_DW_FP32, "bad ids"))
    both_forms(&g, &G, &B, cnt, grids[0], HR_MOE_DW_FP32,
                       "a quarter of the ids outside [0, E)");

  /* one token in all */
  gt_route_random(&g, 1);
  split(&G, 1, 0, cnt);
  if(reference_bwd(&g, &B, HR_MOE_DW_BF16, "one token"))
    both_forms(&g, &G, &B, cnt, grids[ngrids - 1], HR_MOE_DW_BF16, "one token in all");

  bufs_free(&B);
  group_free(&G);
  gt_moe_free(&g);
}

/* ---- the failures --------------------------------------------------------- */

static void failures(int sms)
{
  const int R = 4, cap = 64, grid = sms / R;
  const unsigned all = (1u << R) - 1u, first3 = all & ~(1u << (R - 1));
  gt_moe g;
  ep_group G, F;
  bwd_bufs B;
  int cnt[HR_MOE_EP_MAX_RANKS], rc[HR_MOE_EP_MAX_RANKS], r;
  double ms;

  gt_moe_init(&g, &gt_shapes[GT_SMALL], R * cap);
  group_create(&G, &gt_shapes[GT_SMALL], R, cap, sms, 1);
  bufs_init(&B, &gt_shapes[GT_SMALL], R * cap);
  gt_route_random(&g, R * cap);
  split(&G, g.T, 0, cnt);
  if(!reference_bwd(&g, &B, HR_MOE_DW_FP32, "failures"))
    goto out;

  /* The last rank's backward refused (tokens -1): it never launches. */
  ms = gt_now_ms();
  for(r = 0; r < R; r++) {
    hr_moe_grad_args ga = rank_grad_args(&g, &G, &B, cnt, r, HR_MOE_DW_FP32, FAIL_TIMEOUT_MS);
    if(r == R - 1)
      ga.fwd.tokens = -1;
    rc[r] = hr_moe_ep_backward_grid(G.ep[r], grid, HR_MODE_HEADROOM, &ga, G.st[r]);
  }
  GT_EXPECT(rc[R - 1] == HR_EINVAL, "tokens -1: %s", hr_strerror(rc[R - 1]));
  for(r = 0; r < R - 1; r++)
    if(rc[r] == HR_OK)
      rc[r] = hr_moe_ep_sync(G.ep[r]);
  ms = gt_now_ms() - ms;
  printf("one rank's backward never launched: the others ended after %.0f ms (timeout %d ms)\n",
         ms, FAIL_TIMEOUT_MS);
  GT_EXPECT(ms < 4 * FAIL_TIMEOUT_MS + 1000, "one rank never launched: %.0f ms", ms);
  expect_failure(&G, rc, first3, HR_EBARRIER_TIMEOUT, first3, HR_MOE_EP_WAIT_DISPATCH, R - 1,
                 HR_MOE_EP_WAIT_DISPATCH, "one rank's backward never launched");
  expect_bwd_bitwise(&g, &G, &B, cnt, grid, HR_MOE_DW_FP32,
                     "after a rank whose backward never launched");
  /* the arguments on every rank: an unknown mode, and a NULL dW1 */
  for(r = 0; r < R; r++) {
    hr_moe_grad_args ga = rank_grad_args(&g, &G, &B, cnt, r, HR_MOE_DW_FP32, EP_TIMEOUT_MS);
    rc[r] = hr_moe_ep_backward_grid(G.ep[r], grid, (hr_mode)99, &ga, G.st[r]);
    GT_EXPECT(rc[r] == HR_EINVAL, "mode 99: rank %d: %s", r, hr_strerror(rc[r]));
    ga.dw1 = NULL;
    rc[r] = hr_moe_ep_backward_grid(G.ep[r], grid, HR_MODE_HEADROOM, &ga, G.st[r]);
    GT_EXPECT(rc[r] == HR_EINVAL, "dw1 NULL: rank %d: %s", r, hr_strerror(rc[r]));
  }
  expect_bwd_bitwise(&g, &G, &B, cnt, grid, HR_MOE_DW_FP32, "after refused calls on every rank");

  /* A group made for the forward only refuses the backward. */
  group_create(&F, &gt_shapes[GT_SMALL], R, cap, sms, 0);
  for(r = 0; r < R; r++) {
    hr_moe_grad_args ga = rank_grad_args(&g, &F, &B, cnt, r, HR_MOE_DW_FP32, EP_TIMEOUT_MS);
    rc[r] = hr_moe_ep_backward_grid(F.ep[r], grid, HR_MODE_HEADROOM, &ga, F.st[r]);
    GT_EXPECT(rc[r] == HR_EINVAL, "a forward-only context's backward: rank %d: %s", r,
              hr_strerror(rc[r]));
  }
  if(reference(&g, &F, "forward-only"))
    expect_bitwise(&g, &F, cnt, grid, "a forward-only context, after its refused backward");
  group_free(&F);

out:
  bufs_free(&B);
  group_free(&G);
  gt_moe_free(&g);
}

int main(void)
{
  const int sms = ep_test_start(NAME, "dx, dW1, dW2, d(w) bitwise hr_moe_backward_grid's");

  ep_sweep(sms, 128, correctness);
  failures(sms);
  return gt_finish(NAME);
}
