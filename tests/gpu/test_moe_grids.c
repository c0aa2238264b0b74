/*
 * test_moe_grids.c: the forward gives bitwise identical results whatever
 * the grid: 132, 130, 116, 64 and 2 CTAs on an H200 (in general SMs,
 * SMs - 2, SMs - 16, 64, 2), with clusters of 2, and also without
 * clusters and with the cooperative launch. The routing places pairs in
 * the same stable order for every grid and each output's sum runs in the
 * same K order, so any difference is a bug (a race, or work that depends
 * on the CTA count). The full-grid result is also checked against the CPU
 * reference.
 *
 * Cases cover every tile shape: Qwen3 at T = 128, 300 and 1024 (about 8,
 * 19 and 64 tokens per expert), the small shape at T = 16, 1024 and 8192
 * (up to 2048 per expert), and a shape whose experts have an odd number
 * of GEMM1 row tiles (2I / 256 = 3) at T = 1024 and 8192, so that units
 * taken two by two (a cluster's CTAs) do not line up with experts; grid 2
 * only where it is quick (a grid of 2 streams every weight through two
 * SMs). Each grid runs twice: as a user
 * launches it, and with the cp.async tiles claiming their units (which
 * they do by default only from H = 4096, HR__MOE_CLAIM_MIN_H: these
 * shapes are smaller), so the claimed stage is checked on every tile and
 * grid too. And the agnostic kernel with its routing run twice (every
 * scatter piece placed again, by CTAs whose cursor is before or past it)
 * must give the same bytes at each grid.
 */
#include <stdio.h>
#include <string.h>

#include "gpu_util.h"
#include "moe_bench.h"

#define NAME "test_moe_grids"
#define TIMEOUT_MS 30000

/* E and k as the small shape's; I = 384: three GEMM1 row tiles an expert */
static const gt_shape odd_rows = { "odd-rows", 8, 512, 384, 2, 256 };

/* The barrier kernel on a grid of *(int *)ctx CTAs, clusters of 2, its
 * cp.async tiles claiming their units at any H. */
static int launch_claimed(gt_moe *g, const hr_moe_args *args, void *ctx)
{
  const hr__moe_hook h = { 0, 0, 0, 1, NULL };
  return hr__moe_forward_hook(g->m, *(const int *)ctx, &h, args, g->stream);
}

/* The agnostic kernel on a grid of *(int *)ctx CTAs with its routing run
 * twice (the benchmark hook): every scatter piece is placed a
 * second time, by a CTA whose cursor is already past it (which counts
 * the table again) or before it (which moves the cursor on over the
 * pairs between): the same places, so the same y. */
static int launch_agnostic_route_twice(gt_moe *g, const hr_moe_args *args, void *ctx)
{
  const hr__moe_hook h = { 1, 0, HR__MOE_PHASE_ROUTE, 0, NULL };
  return hr__moe_forward_hook(g->m, *(const int *)ctx, &h, args, g->stream);
}

static void grids_case(gt_moe *g, int T, int with_grid_2)
{
  const int sms = hr_moe_sms(g->m);
  const int grids[] = { sms, sms - 2, sms - 16, 64, 2 };
  const size_t bytes = (size_t)T * g->s.H * 2;
  uint16_t *first = malloc(bytes);
  size_t i;
  int rc;

  if(!first) {
    GT_EXPECT(first != NULL, "out of memory");
    return;
  }
  gt_route_random(g, T);
  rc = gt_run(g, sms, HR_MODE_HEADROOM, 1, TIMEOUT_MS);
  GT_EXPECT(rc == HR_OK, "grid %d: %s", sms, hr_strerror(rc));
  gt_expect_correct(g, "full grid");
  memcpy(first, g->y_h, bytes);

  for(i = 0; i < sizeof(grids) / sizeof(grids[0]); i++) {
    const int grid = grids[i] & ~1;
    double t0;
    if(grid < 2 || (grid == 2 && !with_grid_2))
      continue;
    t0 = gt_now_ms();
    rc = gt_run(g, grid, HR_MODE_HEADROOM, 2, TIMEOUT_MS);
    GT_EXPECT(rc == HR_OK, "grid %d: %s", grid, hr_strerror(rc));
    GT_EXPECT(memcmp(first, g->y_h, bytes) == 0,
              "%s T=%d: grid %d (cluster 2) differs from grid %d", g->s.name, T,
              grid, sms);
    printf("  %-14s T=%-5d grid %3d cluster 2: %s (%.1f ms wall)\n", g->s.name,
           T, grid, memcmp(first, g->y_h, bytes) == 0 ? "identical" : "DIFFERENT",
           gt_now_ms() - t0);
    rc = gt_run_with(g, launch_claimed, (void *)&grid, TIMEOUT_MS);
    GT_EXPECT(rc == HR_OK, "grid %d, claimed: %s", grid, hr_strerror(rc));
    GT_EXPECT(memcmp(first, g->y_h, bytes) == 0,
              "%s T=%d: grid %d with claimed units differs from grid %d", g->s.name, T,
              grid, sms);
    printf("  %-14s T=%-5d grid %3d claimed:   %s\n", g->s.name, T, grid,
           memcmp(first, g->y_h, bytes) == 0 ? "identical" : "DIFFERENT");
    rc = gt_run_with(g, launch_agnostic_route_twice, (void *)&grid, TIMEOUT_MS);
    GT_EXPECT(rc == HR_OK, "grid %d, agnostic, routing twice: %s", grid, hr_strerror(rc));
    GT_EXPECT(memcmp(first, g->y_h, bytes) == 0,
              "%s T=%d: grid %d agnostic with its routing twice differs from grid %d",
              g->s.name, T, grid, sms);
    printf("  %-14s T=%-5d grid %3d agnostic, routing twice: %s\n", g->s.name, T, grid,
           memcmp(first, g->y_h, bytes) == 0 ? "identical" : "DIFFERENT");
  }
  rc = gt_run(g, sms, HR_MODE_COOPERATIVE, 2, TIMEOUT_MS);
  GT_EXPECT(rc == HR_OK, "cooperative: %s", hr_strerror(rc));
  GT_EXPECT(memcmp(first, g->y_h, bytes) == 0,
            "%s T=%d: cooperative launch differs", g->s.name, T);
  free(first);
}

int main(void)
{
  gt_moe g;

  gt_require_gpu(NAME);
  gt_seed(NAME);

  gt_moe_init(&g, &gt_shapes[GT_QWEN3], 1024);
  grids_case(&g, 128, 0);
  grids_case(&g, 300, 0);
  grids_case(&g, 1024, 0);
  grids_case(&g, 1, 1);
  gt_moe_free(&g);

  gt_moe_init(&g, &gt_shapes[GT_SMALL], 8192);
  grids_case(&g, 1024, 1);
  grids_case(&g, 8192, 1);
  grids_case(&g, 16, 1);
  gt_moe_free(&g);

  gt_moe_init(&g, &odd_rows, 8192);
  grids_case(&g, 1024, 1);
  grids_case(&g, 8192, 1);
  gt_moe_free(&g);

  return gt_finish(NAME);
}
