/*
 * test_moe_correct.c: the mega-MoE forward against the CPU reference.
 *
 * For the small, Qwen3-30B-A3B and DeepSeek-V3 shapes at T = 1, 16, 128,
 * 1024 and 8192, with fresh random inputs each time, launched as in
 * production (the whole device, clusters of 2): every element of y
 * written (y is NaN before), and the relative L2 error on sampled tokens
 * under GT_REL_L2_BOUND (gpu_util.h states the bound and why), and
 * bitwise the same launched without clusters (which CTA computes a unit
 * never changes its sums, so any difference is a bug in how the CTAs of
 * a cluster work together). Then the routing corner
 * cases: experts with no tokens (whose weights are NaN, so a kernel that
 * reads them fails) and every slot of every token routed to one expert.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_util.h"

#define NAME "test_moe_correct"
#define TIMEOUT_MS 5000

/* 300: about 19 pairs per Qwen3 expert, the 32-token tile. */
static const int token_counts[] = { 1, 16, 128, 300, 1024, 8192 };

static void run_and_check(gt_moe *g, int sms, const char *what)
{
  const size_t bytes = (size_t)g->T * g->s.H * 2;
  uint16_t *paired;
  int rc = gt_run(g, sms, HR_MODE_HEADROOM, 2, TIMEOUT_MS);
  GT_EXPECT(rc == HR_OK, "%s %s T=%d: %s", g->s.name, what, g->T,
            hr_strerror(rc));
  if(rc != HR_OK)
    return;
  gt_expect_correct(g, what);
  paired = malloc(bytes);
  if(!paired) {
    GT_EXPECT(paired != NULL, "out of memory");
    return;
  }
  memcpy(paired, g->y_h, bytes);
  rc = gt_run(g, sms, HR_MODE_HEADROOM, 1, TIMEOUT_MS);
  GT_EXPECT(rc == HR_OK, "%s %s T=%d, no clusters: %s", g->s.name, what, g->T,
            hr_strerror(rc));
  if(rc == HR_OK)
    GT_EXPECT(memcmp(paired, g->y_h, bytes) == 0,
              "%s %s T=%d: clusters of 2 and no clusters differ", g->s.name, what, g->T);
  free(paired);
}

int main(void)
{
  int s, i, sms;

  gt_require_gpu(NAME);
  gt_seed(NAME);
  for(s = 0; s < GT_NSHAPES; s++) {
    gt_moe g;
    gt_moe_init(&g, &gt_shapes[s], 8192);
    sms = hr_moe_sms(g.m);
    for(i = 0; i < (int)(sizeof(token_counts) / sizeof(token_counts[0])); i++) {
      gt_route_random(&g, token_counts[i]);
      run_and_check(&g, sms, "random routing");
    }

    /* Every slot to the last expert: one expert holds T*k pairs, the
     * others none. */
    gt_route_one(&g, s == GT_DSV3 ? 128 : 1024, g.s.E - 1);
    run_and_check(&g, sms, "all to one expert");

    /* Only every fourth expert gets tokens; the others are poisoned (the
     * weights are not needed afterwards). */
    for(i = 0; i < g.s.E; i++)
      if(i % 4 != 0)
        gt_poison_expert(&g, i);
    gt_route_subset(&g, 128, 4);
    run_and_check(&g, sms, "3/4 experts empty");
    gt_route_subset(&g, 1, 4);
    run_and_check(&g, sms, "3/4 experts empty");
    gt_moe_free(&g);
  }
  return gt_finish(NAME);
}
