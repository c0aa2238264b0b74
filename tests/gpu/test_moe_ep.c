/*
 * test_moe_ep.c: the expert-parallel forward (hr_moe_ep_*) with R virtual
 * ranks in this process on GPU 0, each on a non-blocking stream of its own
 * with grid <= SMs / R (so all of them are resident at once), against the
 * single-GPU kernel.
 *
 * The criterion: y BITWISE equal to hr_moe_forward_grid's over the same
 * global W1, W2, x, ids and weights (rank r holds experts r E/R .. and
 * the tokens of its share; its y rows are compared with the same rows of
 * the single-GPU y), with no element left unwritten (y is NaN before).
 * For R = 1, 2, 4, 8 and several grids per rank, on the small shape
 * (E 8, H 256, I 512, k 2) and a Qwen3-30B-A3B one (E 128, H 2048,
 * I 768, k 8):
 *   - random routing, every rank full (max_tokens each);
 *   - few tokens, shared unevenly, the last rank with none (NULL x, y);
 *   - every slot of every token routed to one rank's experts;
 *   - routing that gives rank 0's experts no token;
 *   - ids outside [0, E) (-1, E, E + 7, INT_MIN, INT_MAX) in a quarter
 *     of the slots;
 *   - one token in all.
 * Then the failures (small shape, R = 4, timeout 300 ms), each followed by
 * a normal epoch on every rank that must give y bitwise again:
 *   - one rank's call refused for its arguments (so never launched): the
 *     others end with HR_EBARRIER_TIMEOUT at the dispatch wait, naming
 *     that rank as the one waited for, within a few timeouts;
 *   - one rank launched late, past the timeout: the others as above, and
 *     the late one leaves at its start with the same failure;
 *   - one rank's stream blocked behind a 1.5 s kernel: the same;
 *   - hr_moe_ep_abort on one rank while all wait for a missing one: every
 *     rank ends with HR_EABORTED naming the aborted rank, long before the
 *     (10 s) timeout.
 * Every correctness case runs in the barrier form and in the agnostic
 * form (a chain of launches none of which waits for a CTA that is not
 * running, moe_ep_agnostic.cu). And the launch's argument checks on a
 * real context (grid 0, too many tokens, an unknown mode), made on every
 * rank so the epochs stay in step. Last, two ranks of grid SMs / 2 with a
 * hog holding SMs - 1.5 grids for 1.5 s: the barrier form ends with
 * HR_EBARRIER_TIMEOUT on both ranks at the 300 ms timeout; the agnostic
 * form completes with y bitwise, before the hog ends.
 */
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "ep_group.h"
#include "gpu_util.h"

#define NAME "test_moe_ep"
#define FAIL_TIMEOUT_MS 300

/* ---- the correctness cases ---------------------------------------------- */

/* The barrier form, then the agnostic form, of the same epoch's inputs. */
static void both_forms(gt_moe *g, ep_group *G, const int *cnt, int grid, const char *what)
{
  G->mode = HR_MODE_HEADROOM;
  expect_bitwise(g, G, cnt, grid, what);
  G->mode = HR_MODE_AGNOSTIC;
  expect_bitwise(g, G, cnt, grid, what);
  G->mode = HR_MODE_HEADROOM;
}

static void correctness(int shape, int R, int cap, int sms, const int *grids, int ngrids)
{
  gt_moe g;
  ep_group G;
  int cnt[HR_MOE_EP_MAX_RANKS], i, T;
  char what[96];

  gt_moe_init(&g, &gt_shapes[shape], R * cap);
  group_create(&G, &gt_shapes[shape], R, cap, sms, 0);

  /* random, every rank full, each grid */
  gt_route_random(&g, R * cap);
  split(&G, g.T, 0, cnt);
  if(reference(&g, &G, "random"))
    for(i = 0; i < ngrids; i++)
      both_forms(&g, &G, cnt, grids[i], "random routing, every rank full");

  /* few tokens, the last rank with none */
  T = 5 * R + 3;
  gt_route_random(&g, T);
  split(&G, T, 1, cnt);
  if(reference(&g, &G, "uneven"))
    for(i = 0; i < ngrids; i++)
      both_forms(&g, &G, cnt, grids[i], "random, uneven, last rank without tokens");

  /* everything to one rank */
  route_to_rank(&g, R * cap / 2, R, R / 2);
  split(&G, g.T, 0, cnt);
  snprintf(what, sizeof(what), "every slot to rank %d", R / 2);
  if(reference(&g, &G, what))
    both_forms(&g, &G, cnt, grids[0], what);

  /* rank 0 receives nothing */
  if(R > 1) {
    route_avoiding(&g, R * cap / 2, R, 0);
    split(&G, g.T, 0, cnt);
    if(reference(&g, &G, "rank 0 gets no tokens"))
      for(i = 0; i < ngrids; i++)
        both_forms(&g, &G, cnt, grids[i], "no token for rank 0's experts");
  }

  /* ids outside [0, E) */
  route_bad_ids(&g, R * cap / 2 + 1);
  split(&G, g.T, 0, cnt);
  if(reference(&g, &G, "bad ids"))
    both_forms(&g, &G, cnt, grids[0], "a quarter of the ids outside [0, E)");

  /* one token in all */
  gt_route_random(&g, 1);
  split(&G, 1, 0, cnt);
  if(reference(&g, &G, "one token"))
    both_forms(&g, &G, cnt, grids[ngrids - 1], "one token in all");

  group_free(&G);
  gt_moe_free(&g);
}

/* ---- the failures --------------------------------------------------------- */

static void failures(int sms)
{
  const int R = 4, cap = 64, grid = sms / R - 1;   /* room for the blocker's CTA */
  const unsigned all = (1u << R) - 1u, first3 = all & ~(1u << (R - 1));
  gt_moe g;
  ep_group G;
  int cnt[HR_MOE_EP_MAX_RANKS], rc[HR_MOE_EP_MAX_RANKS], r;
  double ms;
  hr_moe_args a;

  gt_moe_init(&g, &gt_shapes[GT_SMALL], R * cap);
  group_create(&G, &gt_shapes[GT_SMALL], R, cap, sms, 0);
  gt_route_random(&g, R * cap);
  split(&G, g.T, 0, cnt);
  if(!reference(&g, &G, "failures")) {
    group_free(&G);
    gt_moe_free(&g);
    return;
  }
  expect_bitwise(&g, &G, cnt, grid, "before the failures");

  /* Argument checks on a real context, on every rank (an epoch each). */
  for(r = 0; r < R; r++) {
    a = rank_args(&g, &G, cnt, r, EP_TIMEOUT_MS);
    rc[r] = hr_moe_ep_forward_grid(G.ep[r], 0, HR_MODE_HEADROOM, &a, G.st[r]);
    GT_EXPECT(rc[r] == HR_EINVAL, "grid 0: rank %d: %s", r, hr_strerror(rc[r]));
  }
  for(r = 0; r < R; r++) {
    a = rank_args(&g, &G, cnt, r, EP_TIMEOUT_MS);
    a.tokens = cap + 1;
    rc[r] = hr_moe_ep_forward_grid(G.ep[r], grid, HR_MODE_HEADROOM, &a, G.st[r]);
    GT_EXPECT(rc[r] == HR_EINVAL, "tokens > max_tokens: rank %d: %s", r, hr_strerror(rc[r]));
  }
  for(r = 0; r < R; r++) {
    a = rank_args(&g, &G, cnt, r, EP_TIMEOUT_MS);
    rc[r] = hr_moe_ep_forward_grid(G.ep[r], grid, (hr_mode)99, &a, G.st[r]);
    GT_EXPECT(rc[r] == HR_EINVAL, "mode 99: rank %d: %s", r, hr_strerror(rc[r]));
  }
  for(r = 0; r < R; r++) {              /* the EP backward recomputes GEMM1 */
    a = rank_args(&g, &G, cnt, r, EP_TIMEOUT_MS);
    a.gate_up = (float *)g.y;
    rc[r] = hr_moe_ep_forward_grid(G.ep[r], grid, HR_MODE_HEADROOM, &a, G.st[r]);
    GT_EXPECT(rc[r] == HR_EUNSUPPORTED, "gate_up: rank %d: %s", r, hr_strerror(rc[r]));
  }
  expect_bitwise(&g, &G, cnt, grid, "after refused calls on every rank");

  /* 1. The last rank's call refused (tokens < 0): it never launches. */
  GT_CUDA(cudaMemset(G.y, 0xff, (size_t)g.T * g.s.H * 2));
  ms = gt_now_ms();
  for(r = 0; r < R; r++) {
    a = rank_args(&g, &G, cnt, r, FAIL_TIMEOUT_MS);
    if(r == R - 1)
      a.tokens = -1;
    rc[r] = hr_moe_ep_forward_grid(G.ep[r], grid, HR_MODE_HEADROOM, &a, G.st[r]);
  }
  GT_EXPECT(rc[R - 1] == HR_EINVAL, "tokens -1: %s", hr_strerror(rc[R - 1]));
  for(r = 0; r < R - 1; r++)
    if(rc[r] == HR_OK)
      rc[r] = hr_moe_ep_sync(G.ep[r]);
  ms = gt_now_ms() - ms;
  printf("one rank never launched: the others ended after %.0f ms (timeout %d ms)\n", ms,
         FAIL_TIMEOUT_MS);
  GT_EXPECT(ms < 4 * FAIL_TIMEOUT_MS + 1000, "one rank never launched: %.0f ms", ms);
  expect_failure(&G, rc, first3, HR_EBARRIER_TIMEOUT, first3, HR_MOE_EP_WAIT_DISPATCH, R - 1,
                 HR_MOE_EP_WAIT_DISPATCH, "one rank never launched");
  expect_bitwise(&g, &G, cnt, grid, "after a rank that never launched");

  /* 2. The last rank launched late, past the others' timeout. */
  ms = run_ranks(&g, &G, cnt, first3, grid, FAIL_TIMEOUT_MS, 0, rc);
  printf("one rank late: the others ended after %.0f ms\n", ms);
  GT_EXPECT(ms < 4 * FAIL_TIMEOUT_MS + 1000, "one rank late: %.0f ms", ms);
  expect_failure(&G, rc, first3, HR_EBARRIER_TIMEOUT, first3, HR_MOE_EP_WAIT_DISPATCH, R - 1,
                 HR_MOE_EP_WAIT_DISPATCH, "one rank late (the others)");
  a = rank_args(&g, &G, cnt, R - 1, FAIL_TIMEOUT_MS);
  rc[R - 1] = hr_moe_ep_forward_grid(G.ep[R - 1], grid, HR_MODE_HEADROOM, &a, G.st[R - 1]);
  if(rc[R - 1] == HR_OK)
    rc[R - 1] = hr_moe_ep_sync(G.ep[R - 1]);
  expect_failure(&G, rc, 1u << (R - 1), HR_EBARRIER_TIMEOUT, first3, HR_MOE_EP_WAIT_DISPATCH,
                 R - 1, HR_MOE_EP_WAIT_START, "one rank late (the late one)");
  expect_bitwise(&g, &G, cnt, grid, "after a late rank");

  /* 3. The last rank's stream blocked behind a kernel for 1.5 s. */
  ms = run_ranks(&g, &G, cnt, all, grid, FAIL_TIMEOUT_MS, 1500, rc);
  printf("one rank's stream blocked: every rank ended after %.0f ms\n", ms);
  GT_EXPECT(ms >= 1500 && ms < 1500 + 4 * FAIL_TIMEOUT_MS + 1000,
            "one rank's stream blocked: %.0f ms (the block is 1500)", ms);
  expect_failure(&G, rc, first3, HR_EBARRIER_TIMEOUT, first3, HR_MOE_EP_WAIT_DISPATCH, R - 1,
                 HR_MOE_EP_WAIT_DISPATCH, "one rank's stream blocked (the others)");
  expect_failure(&G, rc, 1u << (R - 1), HR_EBARRIER_TIMEOUT, first3, HR_MOE_EP_WAIT_DISPATCH,
                 R - 1, HR_MOE_EP_WAIT_START, "one rank's stream blocked (the blocked one)");
  expect_bitwise(&g, &G, cnt, grid, "after a blocked stream");

  /* 4. An abort on rank 1 while ranks 0..2 wait for rank 3 (not launched
   * yet), with a 10 s timeout: all end at once, HR_EABORTED, rank 1's. */
  GT_CUDA(cudaMemset(G.y, 0xff, (size_t)g.T * g.s.H * 2));
  for(r = 0; r < R - 1; r++) {
    a = rank_args(&g, &G, cnt, r, 10000);
    rc[r] = hr_moe_ep_forward_grid(G.ep[r], grid, HR_MODE_HEADROOM, &a, G.st[r]);
  }
  gt_sleep_ms(50);
  ms = gt_now_ms();
  hr_moe_ep_abort(G.ep[1]);
  for(r = 0; r < R - 1; r++)
    if(rc[r] == HR_OK)
      rc[r] = hr_moe_ep_sync(G.ep[r]);
  ms = gt_now_ms() - ms;
  printf("abort on rank 1: every waiting rank ended %.0f ms after it (timeout 10000 ms)\n", ms);
  GT_EXPECT(ms < 2000, "abort: %.0f ms", ms);
  expect_failure(&G, rc, first3, HR_EABORTED, 1u << 1, HR_MOE_EP_WAIT_DISPATCH, -1, -1,
                 "abort on rank 1");
  a = rank_args(&g, &G, cnt, R - 1, 10000);
  rc[R - 1] = hr_moe_ep_forward_grid(G.ep[R - 1], grid, HR_MODE_HEADROOM, &a, G.st[R - 1]);
  if(rc[R - 1] == HR_OK)
    rc[R - 1] = hr_moe_ep_sync(G.ep[R - 1]);
  expect_failure(&G, rc, 1u << (R - 1), HR_EABORTED, 1u << 1, HR_MOE_EP_WAIT_DISPATCH, -1,
                 HR_MOE_EP_WAIT_START, "abort on rank 1 (the late rank)");
  expect_bitwise(&g, &G, cnt, grid, "after an abort");

  group_free(&G);
  gt_moe_free(&g);
}

/* ---- a rank held by a hog ---------------------------------------------- */

/* Two ranks of grid SMs / 2; a hog holds SMs - 1.5 grids for 1.5 s, so
 * the second rank launched finds half its grid's SMs taken. The barrier
 * form: every rank ends with HR_EBARRIER_TIMEOUT (300 ms), long before
 * the hog does. The agnostic form: every rank completes, y bitwise, also
 * before the hog ends (nothing waits for the CTAs that cannot start). */
static void hog_case(int sms)
{
  const int R = 2, cap = 256, grid = sms / R, hog_ctas = sms - grid - grid / 2, hog_ms = 1500;
  const hr_mode modes[2] = { HR_MODE_HEADROOM, HR_MODE_AGNOSTIC };
  gt_moe g;
  ep_group G;
  int cnt[HR_MOE_EP_MAX_RANKS], rc[HR_MOE_EP_MAX_RANKS], r, m;

  gt_moe_init(&g, &gt_shapes[GT_SMALL], R * cap);
  group_create(&G, &gt_shapes[GT_SMALL], R, cap, sms, 0);
  gt_route_random(&g, R * cap);
  split(&G, g.T, 0, cnt);
  if(!reference(&g, &G, "hog")) {
    group_free(&G);
    gt_moe_free(&g);
    return;
  }
  for(m = 0; m < 2; m++) {
    gt_hog h;
    double t0, ms;
    G.mode = modes[m];
    GT_CUDA(cudaMemset(G.y, 0xff, (size_t)g.T * g.s.H * 2));
    GT_CUDA(cudaDeviceSynchronize());
    gt_hog_start(&h, hog_ctas, hog_ms);
    t0 = gt_now_ms();
    for(r = 0; r < R; r++) {
      hr_moe_args a = rank_args(&g, &G, cnt, r, FAIL_TIMEOUT_MS);
      rc[r] = hr_moe_ep_forward_grid(G.ep[r], grid, G.mode, &a, G.st[r]);
      if(r == 0)
        gt_sleep_ms(20);               /* rank 0 resident first */
    }
    for(r = 0; r < R; r++)
      if(rc[r] == HR_OK)
        rc[r] = hr_moe_ep_sync(G.ep[r]);
    ms = gt_now_ms() - t0;
    if(m == 0) {
      printf("a hog on %d SMs, rank 1 short of its grid of %d: the barrier form ended after "
             "%.0f ms (hog %d ms, timeout %d ms)\n", hog_ctas, grid, ms, hog_ms,
             FAIL_TIMEOUT_MS);
      expect_failure(&G, rc, 3u, HR_EBARRIER_TIMEOUT, 3u, -1, -1, -1,
                     "a rank held by a hog, barrier form");
      GT_EXPECT(ms < hog_ms - 200, "the barrier form's failure took %.0f ms", ms);
    } else {
      for(r = 0; r < R; r++)
        GT_EXPECT(rc[r] == HR_OK, "a rank held by a hog, agnostic form: rank %d: %s", r,
                  hr_strerror(rc[r]));
      if(rc[0] == HR_OK && rc[1] == HR_OK)
        check_y(&g, &G, grid, "rank 1 held by a hog", ms);
      GT_EXPECT(ms < hog_ms - 200, "the agnostic form took %.0f ms, the hog %d", ms, hog_ms);
    }
    gt_hog_free(&h);
  }
  G.mode = HR_MODE_HEADROOM;
  expect_bitwise(&g, &G, cnt, grid, "after the hog");
  group_free(&G);
  gt_moe_free(&g);
}

int main(void)
{
  const int sms = ep_test_start(NAME, "y bitwise hr_moe_forward_grid's");

  ep_sweep(sms, 256, correctness);
  failures(sms);
  hog_case(sms);
  return gt_finish(NAME);
}
