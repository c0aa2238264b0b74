/*
 * test_moe_agnostic.c: the residency-agnostic kernel gives the barrier
 * kernel's y, bitwise, for every grid.
 *
 * For the small, Qwen3-30B-A3B and DeepSeek-V3 shapes at T = 1, 128, 1024
 * and 8192 (every tile shape), fresh random routing each time: the barrier
 * kernel at the full grid gives the reference y; the agnostic kernel at
 * grids SMs (132 on an H200), SMs - 2, 64, 7, 2 and 1 must give exactly
 * the same bytes, and its full-grid y is also checked against the CPU
 * reference (GT_REL_L2_BOUND, every element written: y is NaN before each
 * launch). Grid 1 is one CTA doing every task in ticket order; grid 2 and
 * 7 make CTAs wait on each other's tiles all the time.
 *
 * Then routing corner cases (all slots to one expert; 3/4 of the experts
 * empty and NaN-poisoned), back-to-back launches on one context (the
 * schedule's counters must be back at zero after each launch with no host
 * reset), and an abort in the middle of a long launch: hr_moe_sync says
 * HR_EABORTED promptly and the next launch gives the same y.
 *
 * Last, a shape where the two kernels run different tiles on the same
 * routing (tile_cross): y must still be the same bytes.
 */
#include <stdio.h>
#include <string.h>

#include <cuda_runtime.h>

#include "gpu_util.h"

#define NAME "test_moe_agnostic"
#define TIMEOUT_MS 30000
/* An abort is noticed between tasks (every 32nd per CTA) or in a wait. */
#define ABORT_SLACK_MS 50

static const int token_counts[] = { 1, 128, 1024, 8192 };

/* H below HR__MOE_CLAIM_MIN_H (the barrier kernel deals its units) and
 * I = 2048 (a GEMM2 unit is 32 K steps): at 40 pairs per expert the
 * barrier kernel runs the big TMA tile, whose MMAs take the tokens as M,
 * and the agnostic kernel the 256-row cp.async mid tile, whose MMAs take
 * the weights as M (moe_pick_tile). Same sums in the same K order. */
static const gt_shape tile_cross = { "h2048-i2048", 32, 2048, 2048, 4, 32 };
#define TILE_CROSS_T 320

/* The barrier kernel's y of the current inputs, into want. */
static void barrier_reference(gt_moe *g, uint16_t *want)
{
  int rc = gt_run(g, hr_moe_sms(g->m), HR_MODE_HEADROOM, 2, TIMEOUT_MS);
  GT_EXPECT(rc == HR_OK, "%s T=%d barrier kernel: %s", g->s.name, g->T,
            hr_strerror(rc));
  memcpy(want, g->y_h, (size_t)g->T * g->s.H * 2);
}

static int same(const gt_moe *g, const uint16_t *want)
{
  return memcmp(g->y_h, want, (size_t)g->T * g->s.H * 2) == 0;
}

/* Every grid against the barrier kernel; the full grid against the CPU
 * reference too (check_ref). */
static void grids_case(gt_moe *g, uint16_t *want, const char *what, int check_ref)
{
  const int sms = hr_moe_sms(g->m);
  const int grids[] = { sms, sms - 2, 64, 7, 2, 1 };
  float barrier_ms;
  size_t i;

  barrier_reference(g, want);
  barrier_ms = g->last_ms;
  for(i = 0; i < sizeof(grids) / sizeof(grids[0]); i++) {
    const int rc = gt_run(g, grids[i], HR_MODE_AGNOSTIC, 1, TIMEOUT_MS);
    GT_EXPECT(rc == HR_OK, "%s %s T=%d grid %d: %s", g->s.name, what, g->T,
              grids[i], hr_strerror(rc));
    if(rc != HR_OK)
      continue;
    if(i == 0 && check_ref)
      gt_expect_correct(g, what);
    GT_EXPECT(same(g, want), "%s %s T=%d: agnostic grid %d differs from the "
              "barrier kernel", g->s.name, what, g->T, grids[i]);
    printf("  %-14s %-18s T=%-5d agnostic grid %3d: %s (%.3f ms; barrier "
           "kernel at %d: %.3f ms)\n", g->s.name, what, g->T, grids[i],
           same(g, want) ? "identical" : "DIFFERENT", g->last_ms, sms,
           barrier_ms);
  }
}

/* Two launches back to back on the stream, no sync between: the second
 * finds the schedule at zero (the first's last CTA reset it) and gives
 * the same y. */
static void back_to_back(gt_moe *g, const uint16_t *want)
{
  hr_moe_args a = gt_args(g, TIMEOUT_MS);
  const int sms = hr_moe_sms(g->m);
  int rc, i;

  GT_CUDA(cudaMemsetAsync(g->y, 0xff, (size_t)g->T * g->s.H * 2,
                          (cudaStream_t)g->stream));
  for(i = 0; i < 3; i++) {
    rc = hr_moe_forward_agnostic_grid(g->m, i == 1 ? 7 : sms, &a, g->stream);
    GT_EXPECT(rc == HR_OK, "back to back %d: %s", i, hr_strerror(rc));
  }
  rc = hr_moe_sync(g->m);
  GT_EXPECT(rc == HR_OK, "back to back: %s", hr_strerror(rc));
  GT_CUDA(cudaMemcpy(g->y_h, g->y, (size_t)g->T * g->s.H * 2,
                     cudaMemcpyDeviceToHost));
  GT_EXPECT(same(g, want), "back-to-back launches differ");
  printf("  %-14s 3 launches back to back (grids %d, 7, %d): %s\n", g->s.name,
         sms, sms, same(g, want) ? "identical" : "DIFFERENT");
}

/* Abort a long launch in the middle: HR_EABORTED within ABORT_SLACK_MS,
 * the failure recorded as an abort, and the next launch (after the host
 * cleared the schedule) gives the same y. */
static void abort_case(gt_moe *g, const uint16_t *want)
{
  hr_moe_args a = gt_args(g, TIMEOUT_MS);
  hr_moe_failure f;
  const int sms = hr_moe_sms(g->m);
  double t0, dt;
  int rc;

  rc = hr_moe_forward_agnostic_grid(g->m, sms, &a, g->stream);
  GT_EXPECT(rc == HR_OK, "launch: %s", hr_strerror(rc));
  gt_sleep_ms(3);
  t0 = gt_now_ms();
  GT_EXPECT(hr_moe_abort(g->m) == HR_OK, "abort");
  rc = hr_moe_sync(g->m);
  dt = gt_now_ms() - t0;
  printf("  %-14s T=%d abort of the agnostic kernel 3 ms in: %s %.1f ms after "
         "hr_moe_abort\n", g->s.name, g->T, hr_strerror(rc), dt);
  /* A launch that already ended cannot be aborted; the DeepSeek-V3 T=8192
   * forward takes ~30 ms, far beyond 3 ms. */
  GT_EXPECT(rc == HR_EABORTED, "got %s", hr_strerror(rc));
  GT_EXPECT(dt < ABORT_SLACK_MS, "abort took %.1f ms", dt);
  if(hr_moe_last_failure(g->m, &f) == HR_OK)
    printf("  detail: wait %d, %d of %d, CTA %d on SM %d\n", f.detail.barrier,
           f.detail.arrived, f.detail.expected, f.cta, f.detail.sm);
  rc = gt_run(g, sms, HR_MODE_AGNOSTIC, 1, TIMEOUT_MS);
  GT_EXPECT(rc == HR_OK && same(g, want), "launch after the abort: %s, y %s",
            hr_strerror(rc), same(g, want) ? "identical" : "DIFFERENT");
  rc = gt_run(g, sms, HR_MODE_HEADROOM, 2, TIMEOUT_MS);
  GT_EXPECT(rc == HR_OK && same(g, want), "barrier kernel after the abort: %s",
            hr_strerror(rc));
}

int main(void)
{
  uint16_t *want;
  int s, i;

  gt_require_gpu(NAME);
  gt_seed(NAME);
  for(s = 0; s < GT_NSHAPES; s++) {
    gt_moe g;
    gt_moe_init(&g, &gt_shapes[s], 8192);
    want = malloc((size_t)8192 * g.s.H * 2);
    if(!want) {
      fprintf(stderr, "FAIL: out of memory\n");
      return 1;
    }
    for(i = 0; i < (int)(sizeof(token_counts) / sizeof(token_counts[0])); i++) {
      gt_route_random(&g, token_counts[i]);
      grids_case(&g, want, "random routing", 1);
    }
    back_to_back(&g, want);             /* T = 8192 */
    if(s == GT_DSV3)
      abort_case(&g, want);

    gt_route_one(&g, s == GT_DSV3 ? 128 : 1024, g.s.E - 1);
    grids_case(&g, want, "all to one expert", s != GT_DSV3);
    for(i = 0; i < g.s.E; i++)
      if(i % 4 != 0)
        gt_poison_expert(&g, i);
    gt_route_subset(&g, 128, 4);
    grids_case(&g, want, "3/4 experts empty", s != GT_DSV3);
    free(want);
    gt_moe_free(&g);
  }
  {
    gt_moe g;
    gt_moe_init(&g, &tile_cross, TILE_CROSS_T);
    want = malloc((size_t)TILE_CROSS_T * g.s.H * 2);
    if(!want) {
      fprintf(stderr, "FAIL: out of memory\n");
      return 1;
    }
    gt_route_random(&g, TILE_CROSS_T);
    grids_case(&g, want, "big tile vs mid", 1);
    free(want);
    gt_moe_free(&g);
  }
  return gt_finish(NAME);
}
