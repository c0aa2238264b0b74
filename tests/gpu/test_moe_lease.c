/*
 * test_moe_lease.c: the forward under a real lease from libheadroom, and
 * the incident path end to end.
 *
 * With build/bin/headroomd present (or $HEADROOMD), the test starts it on
 * a temporary socket and state directory and takes a lease from it; else
 * it takes a degraded lease (a socket where nothing listens; grid from
 * DG_MEGA_MOE_SM_HEADROOM, here unset: the whole device). Then:
 *   1. hr_moe_forward with the lease: the lease's grid, correct y;
 *   2. a hog on more SMs than the lease leaves free: hr_moe_sync returns
 *      HR_EBARRIER_TIMEOUT and reports the incident through hr_report
 *      (HR_OK to a daemon, HR_EDEGRADED without one); a daemon raises the
 *      headroom, the new grid reaches the lease without polling;
 *   3. the next forward under the lease (new grid) gives the same y;
 *   4. a lease in the agnostic mode (a daemon gives it headroom 0, the
 *      whole device): hr_moe_forward runs the residency-agnostic kernel,
 *      which completes beside a hog holding 16 SMs, with the same y.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cuda_runtime.h>

#include "gpu_util.h"

#define NAME "test_moe_lease"
#define TIMEOUT_MS 200

int main(void)
{
  char dir[] = "/tmp/hr-moe-lease-XXXXXX";
  gt_daemon d = GT_DAEMON_INIT;
  const char *bin = gt_daemon_bin();
  hr_client *client = NULL;
  hr_lease *lease = NULL, *alease = NULL;
  hr_moe_failure f;
  hr_moe_args a;
  gt_moe g;
  gt_hog hog;
  uint16_t *good;
  uint32_t epoch;
  int with_daemon, grid, headroom, rc, sms, hog_sms;
  double t0, dt;

  gt_require_gpu(NAME);
  gt_seed(NAME);
  with_daemon = gt_lease_setup(&d, bin, dir, &client);
  if(with_daemon < 0)
    return 1;
  rc = hr_lease_acquire(client, 0, 2, HR_MODE_HEADROOM, &lease);
  GT_EXPECT(rc == HR_OK, "hr_lease_acquire: %s", hr_strerror(rc));
  if(rc != HR_OK)
    goto out;
  GT_EXPECT(hr_lease_degraded(lease) == !with_daemon, "degraded %d",
            hr_lease_degraded(lease));

  gt_moe_init(&g, &gt_shapes[GT_SMALL], 256);
  sms = hr_moe_sms(g.m);
  grid = hr_lease_grid(lease);
  headroom = hr_lease_headroom(lease);
  printf("  lease: grid %d, headroom %d, device %d SMs\n", grid, headroom, sms);
  GT_EXPECT(grid >= 2 && grid <= sms, "lease grid %d", grid);

  /* 1. forward under the lease */
  gt_route_random(&g, 256);
  a = gt_args(&g, TIMEOUT_MS * 10);
  GT_CUDA(cudaMemset(g.y, 0xff, (size_t)g.T * g.s.H * 2));
  rc = hr_moe_forward(g.m, lease, &a, g.stream);
  GT_EXPECT(rc == HR_OK, "forward: %s", hr_strerror(rc));
  GT_EXPECT(hr_moe_sync(g.m) == HR_OK, "sync");
  GT_CUDA(cudaMemcpy(g.y_h, g.y, (size_t)g.T * g.s.H * 2, cudaMemcpyDeviceToHost));
  gt_expect_correct(&g, "under the lease");
  good = malloc((size_t)g.T * g.s.H * 2);
  memcpy(good, g.y_h, (size_t)g.T * g.s.H * 2);

  /* 2. the incident: more SMs taken than the lease left free */
  hog_sms = sms - grid + 4;
  gt_hog_start(&hog, hog_sms, 1500);
  epoch = hr_lease_epoch(lease);
  a = gt_args(&g, TIMEOUT_MS);
  t0 = gt_now_ms();
  rc = hr_moe_forward(g.m, lease, &a, g.stream);
  GT_EXPECT(rc == HR_OK, "forward beside the hog: %s", hr_strerror(rc));
  rc = hr_moe_sync(g.m);
  dt = gt_now_ms() - t0;
  printf("  forward of %d beside a hog on %d SMs: %s after %.1f ms\n", grid,
         hog_sms, hr_strerror(rc), dt);
  GT_EXPECT(rc == HR_EBARRIER_TIMEOUT, "got %s", hr_strerror(rc));
  rc = hr_moe_last_failure(g.m, &f);
  GT_EXPECT(rc == HR_OK, "failure recorded");
  if(rc == HR_OK) {
    printf("  incident: barrier %d, %d of %d arrived, SM %d; hr_report: %s\n",
           f.detail.barrier, f.detail.arrived, f.detail.expected, f.detail.sm,
           hr_strerror(f.reported));
    GT_EXPECT(f.detail.expected == grid && f.detail.grid == grid,
              "expected %d grid %d", f.detail.expected, f.detail.grid);
    GT_EXPECT(f.reported == (with_daemon ? HR_OK : HR_EDEGRADED),
              "hr_report said %s", hr_strerror(f.reported));
  }
  if(with_daemon) {
    /* The daemon raises the headroom and pushes the new budget. */
    rc = hr_lease_wait_change(lease, epoch, 3000);
    printf("  after the incident: grid %d, headroom %d (%s)\n",
           hr_lease_grid(lease), hr_lease_headroom(lease), hr_strerror(rc));
    GT_EXPECT(rc == HR_OK, "no budget change pushed: %s", hr_strerror(rc));
    GT_EXPECT(hr_lease_grid(lease) < grid, "grid %d not below %d",
              hr_lease_grid(lease), grid);
  }
  gt_hog_wait(&hog);
  gt_hog_free(&hog);

  /* 3. the next forward under the lease */
  a = gt_args(&g, TIMEOUT_MS * 10);
  GT_CUDA(cudaMemset(g.y, 0xff, (size_t)g.T * g.s.H * 2));
  rc = hr_moe_forward(g.m, lease, &a, g.stream);
  GT_EXPECT(rc == HR_OK, "forward after the incident: %s", hr_strerror(rc));
  GT_EXPECT(hr_moe_sync(g.m) == HR_OK, "sync after the incident");
  GT_CUDA(cudaMemcpy(g.y_h, g.y, (size_t)g.T * g.s.H * 2, cudaMemcpyDeviceToHost));
  GT_EXPECT(memcmp(good, g.y_h, (size_t)g.T * g.s.H * 2) == 0,
            "y after the incident differs");

  /* 4. the agnostic mode: headroom 0, and a hog cannot hang it */
  rc = hr_lease_acquire(client, 0, 2, HR_MODE_AGNOSTIC, &alease);
  GT_EXPECT(rc == HR_OK, "agnostic lease: %s", hr_strerror(rc));
  if(rc == HR_OK) {
    printf("  agnostic lease: grid %d, headroom %d\n", hr_lease_grid(alease),
           hr_lease_headroom(alease));
    if(with_daemon)
      GT_EXPECT(hr_lease_grid(alease) == sms && hr_lease_headroom(alease) == 0,
                "agnostic lease: grid %d headroom %d", hr_lease_grid(alease),
                hr_lease_headroom(alease));
    gt_hog_start(&hog, 16, 600);
    a = gt_args(&g, TIMEOUT_MS);
    GT_CUDA(cudaMemsetAsync(g.y, 0xff, (size_t)g.T * g.s.H * 2,
                            (cudaStream_t)g.stream));
    t0 = gt_now_ms();
    rc = hr_moe_forward(g.m, alease, &a, g.stream);
    GT_EXPECT(rc == HR_OK, "agnostic forward: %s", hr_strerror(rc));
    rc = hr_moe_sync(g.m);
    dt = gt_now_ms() - t0;
    printf("  agnostic forward of %d beside a hog on 16 SMs: %s after %.1f ms\n",
           hr_lease_grid(alease), hr_strerror(rc), dt);
    GT_EXPECT(rc == HR_OK, "agnostic forward beside the hog: %s", hr_strerror(rc));
    GT_CUDA(cudaMemcpy(g.y_h, g.y, (size_t)g.T * g.s.H * 2, cudaMemcpyDeviceToHost));
    GT_EXPECT(memcmp(good, g.y_h, (size_t)g.T * g.s.H * 2) == 0,
              "y of the agnostic forward differs");
    gt_hog_free(&hog);
    hr_lease_release(alease);
  }
  free(good);
  gt_moe_free(&g);

out:
  if(lease)
    hr_lease_release(lease);
  gt_lease_teardown(&d, dir, client);
  return gt_finish(NAME);
}
