/*
 * test_moe_timeout.c: the barrier fails cleanly instead of hanging.
 *
 * A hog kernel holds HOG_SMS SMs (as a communication kernel would) while
 * the forward is launched on the whole device:
 *   1. ordinary launch: only SMs - HOG_SMS CTAs become resident, barrier 0
 *      cannot complete; hr_moe_sync returns HR_EBARRIER_TIMEOUT about
 *      TIMEOUT_MS after the launch (long before the hog ends), with the
 *      detail (barrier 0, fewer arrived than expected, the SM); the next
 *      launch on the same context succeeds and gives the same y as before.
 *   2. abort: with a long timeout, hr_moe_abort makes hr_moe_sync return
 *      HR_EABORTED promptly; the next launch succeeds.
 *   3. cooperative launch: all-or-nothing, so it waits for the hog to end
 *      (its end event comes after the hog's) and never times out.
 *   4. a cooperative grid larger than the device: HR_ECOOP_TOO_LARGE; an
 *      ordinary one: HR_EINVAL (it could never pass a barrier).
 *   5. the host-side bound: a launch queued behind a kernel that spins for
 *      SPIN_MS (as behind a collective waiting for a dead peer) cannot
 *      time out on the device, since it has not started;
 *      hr_moe_sync_timeout returns HR_ETIMEDOUT after its bound (and at
 *      once with 0) and leaves the launch in flight; hr_moe_sync then waits
 *      for it and y is as before. Nothing in flight: HR_OK; a NULL context
 *      or a negative bound: HR_EINVAL.
 */
#include <stdio.h>
#include <string.h>

#include <cuda_runtime.h>

#include "gpu_util.h"

#define NAME "test_moe_timeout"
#define HOG_SMS 4
#define HOG_MS 1500
#define TIMEOUT_MS 200
/* What "promptly" allows on top of the timeout: the barrier polls every
 * few microseconds, hr_moe_sync polls the word every 50 us. */
#define SLACK_MS 150
/* Case 5: the kernel ahead of the launch, and the host's bound. */
#define SPIN_MS 1500
#define BOUND_MS 100

static int launch(gt_moe *g, int grid, hr_mode mode, int cluster, int timeout_ms)
{
  hr_moe_args a = gt_args(g, timeout_ms);
  GT_CUDA(cudaMemsetAsync(g->y, 0xff, (size_t)g->T * g->s.H * 2,
                          (cudaStream_t)g->stream));
  return hr_moe_forward_grid(g->m, grid, mode, cluster, &a, g->stream);
}

static int same_as(gt_moe *g, const uint16_t *want)
{
  return memcmp(g->y_h, want, (size_t)g->T * g->s.H * 2) == 0;
}

int main(void)
{
  gt_moe g;
  gt_hog hog;
  hr_moe_failure f;
  uint16_t *good;
  double t0, t1, dt;
  float after_ms = 0;
  cudaEvent_t moe_end;
  int sms, rc;

  gt_require_gpu(NAME);
  gt_seed(NAME);
  gt_moe_init(&g, &gt_shapes[GT_SMALL], 1024);
  sms = hr_moe_sms(g.m);
  gt_route_random(&g, 128);
  rc = gt_run(&g, sms, HR_MODE_HEADROOM, 1, TIMEOUT_MS);
  GT_EXPECT(rc == HR_OK, "baseline: %s", hr_strerror(rc));
  gt_expect_correct(&g, "baseline");
  good = malloc((size_t)g.T * g.s.H * 2);
  memcpy(good, g.y_h, (size_t)g.T * g.s.H * 2);
  GT_EXPECT(hr_moe_last_failure(g.m, &f) == HR_ENOTFOUND, "no failure yet");

  /* 1. a forced timeout */
  gt_hog_start(&hog, HOG_SMS, HOG_MS);
  t0 = gt_now_ms();
  rc = launch(&g, sms, HR_MODE_HEADROOM, 1, TIMEOUT_MS);
  GT_EXPECT(rc == HR_OK, "launch beside the hog: %s", hr_strerror(rc));
  rc = hr_moe_sync(g.m);
  dt = gt_now_ms() - t0;
  printf("  ordinary launch of %d beside a hog on %d SMs: %s after %.1f ms "
         "(timeout %d ms, hog %d ms)\n", sms, HOG_SMS, hr_strerror(rc), dt,
         TIMEOUT_MS, HOG_MS);
  GT_EXPECT(rc == HR_EBARRIER_TIMEOUT, "got %s", hr_strerror(rc));
  GT_EXPECT(dt >= TIMEOUT_MS * 0.9 && dt < TIMEOUT_MS + SLACK_MS,
            "sync returned after %.1f ms", dt);
  rc = hr_moe_last_failure(g.m, &f);
  GT_EXPECT(rc == HR_OK, "failure recorded: %s", hr_strerror(rc));
  if(rc == HR_OK) {
    printf("  detail: barrier %d, %d of %d arrived, noticed by CTA %d on SM %d, "
           "grid %d, timeout %d ms, reported %d\n", f.detail.barrier,
           f.detail.arrived, f.detail.expected, f.cta, f.detail.sm,
           f.detail.grid, f.detail.timeout_ms, f.reported);
    GT_EXPECT(f.code == HR_EBARRIER_TIMEOUT, "code %d", f.code);
    GT_EXPECT(f.detail.barrier == 0, "barrier %d", f.detail.barrier);
    GT_EXPECT(f.detail.expected == sms, "expected %d", f.detail.expected);
    GT_EXPECT(f.detail.arrived >= 1 && f.detail.arrived <= sms - HOG_SMS,
              "arrived %d", f.detail.arrived);
    GT_EXPECT(f.detail.sm >= 0 && f.detail.sm < sms, "sm %d", f.detail.sm);
    GT_EXPECT(f.detail.grid == sms && f.detail.timeout_ms == TIMEOUT_MS,
              "grid %d timeout %d", f.detail.grid, f.detail.timeout_ms);
    GT_EXPECT(f.reported == 1, "no lease, nothing reported: %d", f.reported);
  }
  /* The same context again, right away: ordered after the drained launch. */
  rc = gt_run(&g, sms, HR_MODE_HEADROOM, 1, TIMEOUT_MS * 20);
  GT_EXPECT(rc == HR_OK, "launch after the timeout: %s", hr_strerror(rc));
  GT_EXPECT(same_as(&g, good), "y after the timeout differs from before");
  printf("  next launch on the same context: %s, y %s\n", hr_strerror(rc),
         same_as(&g, good) ? "identical" : "DIFFERENT");
  gt_hog_free(&hog);

  /* 2. abort */
  gt_hog_start(&hog, HOG_SMS, HOG_MS);
  rc = launch(&g, sms, HR_MODE_HEADROOM, 1, 60000);
  GT_EXPECT(rc == HR_OK, "launch: %s", hr_strerror(rc));
  gt_sleep_ms(50);
  t0 = gt_now_ms();
  GT_EXPECT(hr_moe_abort(g.m) == HR_OK, "abort");
  rc = hr_moe_sync(g.m);
  dt = gt_now_ms() - t0;
  printf("  abort: %s %.1f ms after hr_moe_abort\n", hr_strerror(rc), dt);
  GT_EXPECT(rc == HR_EABORTED, "got %s", hr_strerror(rc));
  GT_EXPECT(dt < SLACK_MS, "abort took %.1f ms", dt);
  rc = gt_run(&g, sms, HR_MODE_HEADROOM, 1, TIMEOUT_MS * 20);
  GT_EXPECT(rc == HR_OK && same_as(&g, good), "launch after abort: %s",
            hr_strerror(rc));
  gt_hog_free(&hog);

  /* 3. cooperative: waits for the hog, never times out */
  GT_CUDA(cudaEventCreate(&moe_end));
  gt_hog_start(&hog, HOG_SMS, HOG_MS / 2);
  t0 = gt_now_ms();
  rc = launch(&g, sms, HR_MODE_COOPERATIVE, 2, TIMEOUT_MS);
  GT_EXPECT(rc == HR_OK, "cooperative launch: %s", hr_strerror(rc));
  GT_CUDA(cudaEventRecord(moe_end, (cudaStream_t)g.stream));
  rc = hr_moe_sync(g.m);
  dt = gt_now_ms() - t0;
  GT_CUDA(cudaEventSynchronize(moe_end));
  gt_hog_wait(&hog);
  GT_CUDA(cudaEventElapsedTime(&after_ms, (cudaEvent_t)hog.end_event, moe_end));
  printf("  cooperative launch beside the hog: %s after %.1f ms; it ended "
         "%.3f ms after the hog\n", hr_strerror(rc), dt, after_ms);
  GT_EXPECT(rc == HR_OK, "cooperative: %s", hr_strerror(rc));
  GT_EXPECT(after_ms > 0, "the cooperative grid ended %.3f ms after the hog",
            after_ms);
  GT_EXPECT(dt > HOG_MS / 2 * 0.8, "it did not wait: %.1f ms", dt);
  GT_CUDA(cudaMemcpy(g.y_h, g.y, (size_t)g.T * g.s.H * 2, cudaMemcpyDeviceToHost));
  GT_EXPECT(same_as(&g, good), "cooperative y differs");
  gt_hog_free(&hog);
  cudaEventDestroy(moe_end);

  /* 4. grids that cannot fit */
  rc = launch(&g, sms + 2, HR_MODE_COOPERATIVE, 2, TIMEOUT_MS);
  GT_EXPECT(rc == HR_ECOOP_TOO_LARGE, "cooperative %d: %s", sms + 2,
            hr_strerror(rc));
  rc = launch(&g, sms + 2, HR_MODE_HEADROOM, 2, TIMEOUT_MS);
  GT_EXPECT(rc == HR_EINVAL, "ordinary %d: %s", sms + 2, hr_strerror(rc));
  rc = gt_run(&g, sms, HR_MODE_HEADROOM, 2, TIMEOUT_MS);
  GT_EXPECT(rc == HR_OK && same_as(&g, good), "after refusals: %s",
            hr_strerror(rc));

  /* 5. the host-side bound: the launch waits behind the spin on its
   * stream, so only the host can stop waiting for it. */
  GT_CUDA(gt_spin_launch(SPIN_MS, g.stream));
  t0 = gt_now_ms();
  rc = launch(&g, sms, HR_MODE_HEADROOM, 1, 60000);
  GT_EXPECT(rc == HR_OK, "launch behind the spin: %s", hr_strerror(rc));
  t1 = gt_now_ms();
  rc = hr_moe_sync_timeout(g.m, BOUND_MS);
  dt = gt_now_ms() - t1;
  printf("  launch behind a %d ms spin: hr_moe_sync_timeout(%d) %s after %.1f ms\n",
         SPIN_MS, BOUND_MS, hr_strerror(rc), dt);
  GT_EXPECT(rc == HR_ETIMEDOUT, "bounded sync: %s", hr_strerror(rc));
  /* Far below the spin: it did not wait for the launch. */
  GT_EXPECT(dt >= BOUND_MS * 0.9 && dt < SPIN_MS / 3,
            "bounded sync returned after %.1f ms", dt);
  GT_EXPECT(hr_moe_outputs_ready(g.m) == 0, "y ready behind the spin");
  t1 = gt_now_ms();
  rc = hr_moe_sync_timeout(g.m, 0);
  dt = gt_now_ms() - t1;
  GT_EXPECT(rc == HR_ETIMEDOUT, "sync with bound 0: %s", hr_strerror(rc));
  GT_EXPECT(dt < 20, "sync with bound 0 took %.1f ms", dt);
  /* Refused before it looks, and the launch is still waited for below. */
  rc = hr_moe_sync_timeout(g.m, -1);
  GT_EXPECT(rc == HR_EINVAL, "bound -1: %s", hr_strerror(rc));
  rc = hr_moe_sync_timeout(NULL, BOUND_MS);
  GT_EXPECT(rc == HR_EINVAL, "NULL context: %s", hr_strerror(rc));
  rc = hr_moe_sync(g.m);
  dt = gt_now_ms() - t0;
  GT_CUDA(cudaMemcpy(g.y_h, g.y, (size_t)g.T * g.s.H * 2, cudaMemcpyDeviceToHost));
  printf("  then hr_moe_sync: %s %.1f ms after the launch, y %s\n", hr_strerror(rc),
         dt, same_as(&g, good) ? "identical" : "DIFFERENT");
  GT_EXPECT(rc == HR_OK, "sync after the bound: %s", hr_strerror(rc));
  GT_EXPECT(dt > SPIN_MS * 0.8, "the launch ended %.1f ms after it was made", dt);
  GT_EXPECT(same_as(&g, good), "y after the bounded waits differs");
  t1 = gt_now_ms();
  rc = hr_moe_sync_timeout(g.m, 50);
  dt = gt_now_ms() - t1;
  GT_EXPECT(rc == HR_OK, "bounded sync, nothing in flight: %s", hr_strerror(rc));
  GT_EXPECT(dt < 20, "bounded sync with nothing in flight took %.1f ms", dt);

  free(good);
  gt_moe_free(&g);
  return gt_finish(NAME);
}
