/*
 * test_moe_agnostic_hog.c: the scenario that deadlocks the barrier kernel
 * does not touch the agnostic one.
 *
 * A hog kernel on another stream holds k SMs (one 200 KB CTA each, as a
 * communication kernel would) for HOG_MS, longer than the wait timeout;
 * the forward is launched on the whole device (headroom 0) meanwhile.
 *   - control: the barrier kernel with k = 1 times out (HR_EBARRIER_TIMEOUT
 *     about TIMEOUT_MS after the launch): this is the deadlocking case.
 *   - the agnostic kernel, k = 1, 4, 16, 64: SMs - k CTAs do all the work
 *     and y is complete (hr_moe_outputs_ready) long before the hog ends.
 *     The k CTAs that found no free SM start when one frees: on the SMs
 *     of the CTAs that finished, or at the latest when the hog ends; they
 *     find no work and leave. No wait times out, and y is bitwise the
 *     barrier kernel's.
 *   - k = SMs: no CTA can start before the hog ends; the launch then
 *     completes as usual, soon after.
 * Times are printed: launch to y complete, launch to hr_moe_sync, and the
 * launch's end relative to the hog's end (CUDA events).
 */
#include <sched.h>
#include <stdio.h>
#include <string.h>

#include <cuda_runtime.h>

#include "gpu_util.h"

#define NAME "test_moe_agnostic_hog"
#define T_TOKENS 1024
#define HOG_MS 600
#define TIMEOUT_MS 200
/* The launch ends at the latest this long after the hog: the queued CTAs
 * start, claim one ticket and leave. */
#define AFTER_HOG_SLACK_MS 50.0f

static int launch(gt_moe *g, int agnostic, int timeout_ms)
{
  hr_moe_args a = gt_args(g, timeout_ms);
  const int sms = hr_moe_sms(g->m);
  GT_CUDA(cudaMemsetAsync(g->y, 0xff, (size_t)g->T * g->s.H * 2,
                          (cudaStream_t)g->stream));
  if(agnostic)
    return hr_moe_forward_agnostic_grid(g->m, sms, &a, g->stream);
  return hr_moe_forward_grid(g->m, sms, HR_MODE_HEADROOM, 1, &a, g->stream);
}

static int same_as(gt_moe *g, const uint16_t *want)
{
  GT_CUDA(cudaMemcpy(g->y_h, g->y, (size_t)g->T * g->s.H * 2,
                     cudaMemcpyDeviceToHost));
  return memcmp(g->y_h, want, (size_t)g->T * g->s.H * 2) == 0;
}

static void hog_case(gt_moe *g, int k, const uint16_t *want)
{
  const int sms = hr_moe_sms(g->m);
  cudaEvent_t end;
  gt_hog hog;
  double t0, t_ready = -1, t_sync;
  float after_ms = 0;
  int rc, r;

  GT_CUDA(cudaEventCreate(&end));
  gt_hog_start(&hog, k, HOG_MS);
  t0 = gt_now_ms();
  rc = launch(g, 1, TIMEOUT_MS);
  GT_EXPECT(rc == HR_OK, "k=%d launch: %s", k, hr_strerror(rc));
  GT_CUDA(cudaEventRecord(end, (cudaStream_t)g->stream));
  /* Watch for y while the hog runs. */
  while(gt_now_ms() - t0 < HOG_MS * 3) {
    r = hr_moe_outputs_ready(g->m);
    GT_EXPECT(r == 0 || r == 1, "outputs_ready: %d", r);
    if(r != 0) {
      t_ready = gt_now_ms() - t0;
      break;
    }
    sched_yield();
  }
  rc = hr_moe_sync(g->m);
  t_sync = gt_now_ms() - t0;
  GT_CUDA(cudaEventSynchronize(end));
  gt_hog_wait(&hog);
  GT_CUDA(cudaEventElapsedTime(&after_ms, (cudaEvent_t)hog.end_event, end));
  printf("  agnostic, grid %d, hog on %3d SMs for %d ms: %s; y complete %.2f ms "
         "after launch, sync %.1f ms; launch ended %.3f ms %s the hog\n",
         sms, k, HOG_MS, hr_strerror(rc), t_ready, t_sync,
         after_ms < 0 ? -after_ms : after_ms, after_ms < 0 ? "before" : "after");
  GT_EXPECT(rc == HR_OK, "k=%d: %s", k, hr_strerror(rc));
  GT_EXPECT(t_ready >= 0, "k=%d: y never complete", k);
  if(k < sms) {
    /* The work needs a few ms; the hog holds its SMs for HOG_MS. */
    GT_EXPECT(t_ready < HOG_MS / 2, "k=%d: y complete only after %.1f ms", k,
              t_ready);
  } else {
    GT_EXPECT(t_ready > HOG_MS * 0.8, "k=%d: y complete after %.1f ms, before "
              "the hog let any CTA start?", k, t_ready);
  }
  GT_EXPECT(after_ms < AFTER_HOG_SLACK_MS,
            "k=%d: the launch ended %.3f ms after the hog", k, after_ms);
  if(k >= sms)
    GT_EXPECT(after_ms > 0, "k=%d: the launch ended %.3f ms before the hog "
              "that held every SM", k, -after_ms);
  GT_EXPECT(same_as(g, want), "k=%d: y differs from the barrier kernel's", k);
  gt_hog_free(&hog);
  cudaEventDestroy(end);
}

int main(void)
{
  const int ks[] = { 1, 4, 16, 64 };
  gt_moe g;
  gt_hog hog;
  uint16_t *want;
  hr_moe_failure f;
  double t0, dt;
  int sms, rc;
  size_t i;

  gt_require_gpu(NAME);
  gt_seed(NAME);
  gt_moe_init(&g, &gt_shapes[GT_QWEN3], T_TOKENS);
  sms = hr_moe_sms(g.m);
  gt_route_random(&g, T_TOKENS);
  rc = gt_run(&g, sms, HR_MODE_HEADROOM, 1, TIMEOUT_MS * 10);
  GT_EXPECT(rc == HR_OK, "barrier kernel, no hog: %s", hr_strerror(rc));
  gt_expect_correct(&g, "barrier, no hog");
  want = malloc((size_t)g.T * g.s.H * 2);
  if(!want)
    return 1;
  memcpy(want, g.y_h, (size_t)g.T * g.s.H * 2);

  /* The control: the barrier kernel in the same scenario. */
  gt_hog_start(&hog, 1, HOG_MS);
  t0 = gt_now_ms();
  rc = launch(&g, 0, TIMEOUT_MS);
  GT_EXPECT(rc == HR_OK, "barrier launch: %s", hr_strerror(rc));
  rc = hr_moe_sync(g.m);
  dt = gt_now_ms() - t0;
  printf("  barrier kernel, grid %d, hog on 1 SM for %d ms: %s after %.1f ms\n",
         sms, HOG_MS, hr_strerror(rc), dt);
  GT_EXPECT(rc == HR_EBARRIER_TIMEOUT, "the control did not time out: %s",
            hr_strerror(rc));
  if(hr_moe_last_failure(g.m, &f) == HR_OK)
    printf("  detail: barrier %d, %d of %d arrived\n", f.detail.barrier,
           f.detail.arrived, f.detail.expected);
  gt_hog_free(&hog);

  for(i = 0; i < sizeof(ks) / sizeof(ks[0]); i++)
    hog_case(&g, ks[i], want);
  hog_case(&g, sms, want);

  /* And without a hog, after all that: the same y. */
  rc = launch(&g, 1, TIMEOUT_MS);
  GT_EXPECT(rc == HR_OK && hr_moe_sync(g.m) == HR_OK, "agnostic, no hog");
  GT_EXPECT(same_as(&g, want), "agnostic, no hog: y differs");

  free(want);
  gt_moe_free(&g);
  return gt_finish(NAME);
}
