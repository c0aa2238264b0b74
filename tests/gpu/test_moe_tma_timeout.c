/*
 * test_moe_tma_timeout.c: a TMA load that never lands ends the launch with
 * an error the host reads, never a hang or a trap.
 *
 * The big tile's warps wait on mbarriers that the TMA loads complete
 * (kernels/moe_gemm_tma.cuh). With the fault HR__MOE_FAULT_TMA_REFILL
 * each CTA's producer leaves one step unloaded; for the barrier kernel and
 * the agnostic one, at the small shape with T = 8192 (the big tile):
 *   - hr_moe_sync returns HR_EBARRIER_TIMEOUT about the launch's timeout
 *     after the launch, and the failure says where: HR__MOE_WAIT_TMA and
 *     the GEMM stage (1 or 2);
 *   - the next launch on the same context succeeds and its y is bitwise
 *     the y of a launch before the fault.
 * Then the same at Qwen3-30B-A3B with T = 8192 (~23 big-tile units per
 * CTA in GEMM1) with HR__MOE_FAULT_TMA_REFILL_LATE: the refill dropped ten
 * units into the run, when every ring entry holds a claim of this run.
 * A CTA whose producer (thread 0) timed out places no more claims; it
 * must still leave, or the kernel never ends and the next launch waits
 * behind it forever (the hang this case was written for; the test
 * runner's time limit ends it then).
 * First, the hook refuses skip or repeat bits that name nothing.
 * The faults are bits of a kernel parameter of the production kernels,
 * reachable only through the benchmark hook, hr__moe_forward_hook
 * (kernels/moe_bench.h), which libheadroom_moe.a alone exports.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "gpu_util.h"
#include "moe_bench.h"

#define NAME "test_moe_tma_timeout"
#define T_TOKENS 8192
#define TIMEOUT_MS 200
/* on top of the timeout: the waits read the clock every 256 polls, and
 * hr_moe_sync polls the error word every 50 us */
#define SLACK_MS 300

/* One launch of kernel `agnostic` with the fault bits `fault`
 * (HR__MOE_FAULT_*), then hr_moe_sync; y to `out` when it succeeded. */
static int forward(gt_moe *g, int agnostic, unsigned fault, int timeout_ms, uint16_t *out)
{
  const size_t ybytes = (size_t)g->T * g->s.H * 2;
  hr__moe_hook h = { agnostic, fault, 0, 0, NULL };
  hr_moe_args a = gt_args(g, timeout_ms);
  int rc;
  GT_CUDA(cudaMemsetAsync(g->y, 0xff, ybytes, (cudaStream_t)g->stream));
  rc = hr__moe_forward_hook(g->m, hr_moe_sms(g->m), &h, &a, g->stream);
  if(rc)
    return rc;
  rc = hr_moe_sync(g->m);
  if(rc == HR_OK && out)
    GT_CUDA(cudaMemcpy(out, g->y, ybytes, cudaMemcpyDeviceToHost));
  return rc;
}

static void fault_case(gt_moe *g, int agnostic, unsigned fault, uint16_t *good,
                       uint16_t *after)
{
  const char *kernel = agnostic ? "agnostic" : "barrier";
  const char *where = fault == HR__MOE_FAULT_TMA_REFILL ? "at step 1" : "ten units in";
  const size_t ybytes = (size_t)g->T * g->s.H * 2;
  hr_moe_failure f;
  double t0, dt;
  int rc;

  rc = forward(g, agnostic, 0, TIMEOUT_MS * 20, good);
  GT_EXPECT(rc == HR_OK, "%s baseline: %s", kernel, hr_strerror(rc));

  t0 = gt_now_ms();
  rc = forward(g, agnostic, fault, TIMEOUT_MS, NULL);
  dt = gt_now_ms() - t0;
  printf("  %s T=%d %-8s kernel, a TMA step never loaded (%s): %s after %.1f ms "
         "(timeout %d ms)\n", g->s.name, g->T, kernel, where, hr_strerror(rc), dt, TIMEOUT_MS);
  GT_EXPECT(rc == HR_EBARRIER_TIMEOUT, "%s: got %s", kernel, hr_strerror(rc));
  GT_EXPECT(dt >= TIMEOUT_MS * 0.9 && dt < TIMEOUT_MS + SLACK_MS,
            "%s: sync returned after %.1f ms", kernel, dt);
  rc = hr_moe_last_failure(g->m, &f);
  GT_EXPECT(rc == HR_OK, "%s: failure recorded: %s", kernel, hr_strerror(rc));
  if(rc == HR_OK) {
    printf("  detail: wait %d, GEMM stage %d, noticed by CTA %d on SM %d\n",
           f.detail.barrier, f.detail.arrived, f.cta, f.detail.sm);
    GT_EXPECT(f.code == HR_EBARRIER_TIMEOUT, "%s: code %d", kernel, f.code);
    /* Ten units in, the other CTAs reach the waits that follow GEMM1 (a
     * grid barrier, a tile count) well under a millisecond after the
     * fault, and one of those may time out first: there, which wait is
     * recorded is not the point, the next launch is. */
    if(fault == HR__MOE_FAULT_TMA_REFILL) {
      GT_EXPECT(f.detail.barrier == HR__MOE_WAIT_TMA, "%s: wait %d", kernel,
                f.detail.barrier);
      GT_EXPECT(f.detail.arrived == 1 || f.detail.arrived == 2, "%s: stage %d", kernel,
                f.detail.arrived);
    }
  }

  /* the same context, right away */
  rc = forward(g, agnostic, 0, TIMEOUT_MS * 20, after);
  GT_EXPECT(rc == HR_OK, "%s: launch after the fault: %s", kernel, hr_strerror(rc));
  GT_EXPECT(rc != HR_OK || memcmp(after, good, ybytes) == 0,
            "%s: y after the fault differs from before", kernel);
  printf("  next launch on the same context: %s, y %s\n", hr_strerror(rc),
         rc == HR_OK && memcmp(after, good, ybytes) == 0 ? "identical" : "DIFFERENT");
}

/* The hook refuses bits that name nothing (the faults are skip's only),
 * and launches nothing then: y keeps its poison. */
static void hook_bits_refused(void)
{
  const hr__moe_hook bad[] = { { 0, 64, 0, 0, NULL },
                               { 0, 0, HR__MOE_FAULT_TMA_REFILL, 0, NULL },
                               { 1, 0, 16, 0, NULL } };
  gt_moe g;
  hr_moe_args a;
  size_t i;
  int rc;

  gt_moe_init(&g, &gt_shapes[GT_SMALL], 16);
  gt_route_random(&g, 16);
  a = gt_args(&g, TIMEOUT_MS);
  GT_CUDA(cudaMemset(g.y, 0xff, (size_t)g.T * g.s.H * 2));
  rc = hr__moe_forward_hook(g.m, hr_moe_sms(g.m), NULL, &a, g.stream);
  GT_EXPECT(rc == HR_EINVAL, "NULL hook: %s", hr_strerror(rc));
  for(i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    rc = hr__moe_forward_hook(g.m, hr_moe_sms(g.m), &bad[i], &a, g.stream);
    GT_EXPECT(rc == HR_EINVAL, "hook skip 0x%x repeat 0x%x: %s", bad[i].skip, bad[i].repeat,
              hr_strerror(rc));
  }
  GT_CUDA(cudaMemcpy(g.y_h, g.y, (size_t)g.T * g.s.H * 2, cudaMemcpyDeviceToHost));
  GT_EXPECT(gt_count_nonfinite(&g) == (size_t)g.T * g.s.H, "a refused hook launched");
  printf("  the hook: NULL and %zu bad bit sets refused, nothing launched\n",
         sizeof(bad) / sizeof(bad[0]));
  gt_moe_free(&g);
}

/* Both kernels' fault cases at `shape`, T = 8192; with `check`, y of the
 * last launch against the CPU reference. */
static void shape_cases(int shape, unsigned fault, int check)
{
  gt_moe g;
  uint16_t *good, *after;
  size_t ybytes;

  gt_moe_init(&g, &gt_shapes[shape], T_TOKENS);
  gt_route_random(&g, T_TOKENS);
  ybytes = (size_t)g.T * g.s.H * 2;
  good = malloc(ybytes);
  after = malloc(ybytes);
  if(!good || !after) {
    fprintf(stderr, "%s: out of memory\n", NAME);
    exit(1);
  }
  fault_case(&g, 0, fault, good, after);
  fault_case(&g, 1, fault, good, after);
  if(check) {
    memcpy(g.y_h, after, ybytes);
    gt_expect_correct(&g, "after both faults");
  }
  free(good);
  free(after);
  gt_moe_free(&g);
}

int main(void)
{
  gt_require_gpu(NAME);
  gt_seed(NAME);
  hook_bits_refused();
  shape_cases(GT_SMALL, HR__MOE_FAULT_TMA_REFILL, 1);
  shape_cases(GT_QWEN3, HR__MOE_FAULT_TMA_REFILL_LATE, 0);
  return gt_finish(NAME);
}
