/*
 * test_moe_launch.c: the launch path refuses what it must refuse, with
 * HR_EINVAL and nothing launched (y keeps its poison), and accepts the
 * edges it must accept.
 */
#include <stdio.h>
#include <string.h>

#include <cuda_runtime.h>

#include "gpu_util.h"

#define NAME "test_moe_launch"

/* y must still hold the 0xff poison: nothing ran. */
static int y_untouched(gt_moe *g)
{
  size_t i, n = (size_t)g->T * g->s.H;
  GT_CUDA(cudaMemcpy(g->y_h, g->y, n * 2, cudaMemcpyDeviceToHost));
  for(i = 0; i < n; i++)
    if(g->y_h[i] != 0xffff)
      return 0;
  return 1;
}

static void expect_refused(gt_moe *g, hr_moe_args a, int grid, int cluster,
                           const char *what)
{
  int rc;
  GT_CUDA(cudaMemset(g->y, 0xff, (size_t)g->T * g->s.H * 2));
  rc = hr_moe_forward_grid(g->m, grid, HR_MODE_HEADROOM, cluster, &a, g->stream);
  GT_EXPECT(rc == HR_EINVAL, "%s: got %s", what, hr_strerror(rc));
  GT_EXPECT(hr_moe_sync(g->m) == HR_OK, "%s: sync after a refusal", what);
  GT_CUDA(cudaDeviceSynchronize());
  GT_EXPECT(y_untouched(g), "%s: something was launched", what);
}

int main(void)
{
  gt_moe g;
  hr_moe_args a, bad;
  hr_moe_shape s;
  hr_moe *m = NULL;
  void *host_buf;
  int sms, rc;

  gt_require_gpu(NAME);
  gt_seed(NAME);

  /* Shapes the kernel cannot take. */
  memset(&s, 0, sizeof(s));
  s.experts = 8;
  s.hidden = 256;
  s.inter = 512;
  s.topk = 2;
  s.max_tokens = 64;
  GT_EXPECT(hr_moe_create(NULL, 0, &s) == HR_EINVAL, "NULL out");
  GT_EXPECT(hr_moe_create(&m, 0, NULL) == HR_EINVAL, "NULL shape");
  s.hidden = 384;
  GT_EXPECT(hr_moe_create(&m, 0, &s) == HR_EINVAL, "hidden not a multiple of 256");
  s.hidden = 256;
  s.inter = 192;
  GT_EXPECT(hr_moe_create(&m, 0, &s) == HR_EINVAL, "inter not a multiple of 128");
  s.inter = 512;
  s.experts = HR_MOE_MAX_EXPERTS + 1;
  GT_EXPECT(hr_moe_create(&m, 0, &s) == HR_EINVAL, "too many experts");
  s.experts = 8;
  GT_EXPECT(hr_moe_create(&m, 999, &s) == HR_EINVAL, "no such device");
  GT_EXPECT(m == NULL, "nothing created");

  gt_moe_init(&g, &gt_shapes[GT_SMALL], 64);
  sms = hr_moe_sms(g.m);
  GT_EXPECT(sms > 0, "sms %d", sms);
  GT_EXPECT(hr_moe_workspace_bytes(g.m) > 0, "workspace");
  GT_EXPECT(hr_moe_sync(g.m) == HR_OK, "sync with nothing launched");
  gt_route_random(&g, 64);
  a = gt_args(&g, 1000);

  GT_CUDA(cudaHostAlloc(&host_buf, 64 * 256 * 2, cudaHostAllocDefault));

  bad = a; bad.tokens = 0;
  expect_refused(&g, bad, sms, 1, "tokens 0");
  bad = a; bad.tokens = 65;
  expect_refused(&g, bad, sms, 1, "tokens over max_tokens");
  bad = a; bad.experts = 16;
  expect_refused(&g, bad, sms, 1, "experts differ from the context");
  bad = a; bad.topk = 1;
  expect_refused(&g, bad, sms, 1, "topk differs");
  bad = a; bad.x = NULL;
  expect_refused(&g, bad, sms, 1, "x NULL");
  bad = a; bad.x = (const char *)a.x + 2;
  expect_refused(&g, bad, sms, 1, "x not 16-byte aligned");
  bad = a; bad.w2 = (const char *)a.w2 + 8;
  expect_refused(&g, bad, sms, 1, "w2 not 16-byte aligned");
  bad = a; bad.topk_weights = (const float *)((const char *)a.topk_weights + 2);
  expect_refused(&g, bad, sms, 1, "weights not 4-byte aligned");
  bad = a; bad.x = host_buf;
  expect_refused(&g, bad, sms, 1, "x in pinned host memory");
  bad = a; bad.timeout_ms = -1;
  expect_refused(&g, bad, sms, 1, "negative timeout");
  bad = a; bad.gate_up = (float *)((char *)g.y + 4);
  expect_refused(&g, bad, sms, 1, "gate_up not 16-byte aligned");
  bad = a; bad.gate_up = host_buf;
  expect_refused(&g, bad, sms, 1, "gate_up in pinned host memory");
  expect_refused(&g, a, 0, 1, "grid 0");
  expect_refused(&g, a, sms + 2, 1, "ordinary grid larger than the device");
  expect_refused(&g, a, sms - 1, 2, "odd grid with clusters of 2");
  expect_refused(&g, a, sms, 3, "cluster 3");
  GT_EXPECT(hr_moe_forward_grid(g.m, sms, HR_MODE_COUNT, 1, &a, g.stream) ==
                HR_EINVAL, "unknown mode");
  GT_EXPECT(hr_moe_forward_grid(g.m, sms, HR_MODE_HEADROOM, 1, NULL, g.stream) ==
                HR_EINVAL, "NULL args");
  GT_EXPECT(hr_moe_forward_grid(NULL, sms, HR_MODE_HEADROOM, 1, &a, g.stream) ==
                HR_EINVAL, "NULL context");
  GT_EXPECT(hr_moe_forward(g.m, NULL, &a, g.stream) == HR_EINVAL, "NULL lease");
  GT_EXPECT(hr_moe_sync(NULL) == HR_EINVAL, "sync NULL");
  GT_EXPECT(hr_moe_abort(NULL) == HR_EINVAL, "abort NULL");
  cudaFreeHost(host_buf);

  /* The edges that must work: one token, an odd grid without clusters,
   * the default timeout (0), the legacy default stream. */
  gt_route_random(&g, 1);
  rc = gt_run(&g, 1, HR_MODE_HEADROOM, 1, 0);
  GT_EXPECT(rc == HR_OK, "T=1 on grid 1: %s", hr_strerror(rc));
  gt_expect_correct(&g, "grid 1");
  gt_route_random(&g, 64);
  rc = gt_run(&g, sms - 1, HR_MODE_HEADROOM, 1, 0);
  GT_EXPECT(rc == HR_OK, "odd grid: %s", hr_strerror(rc));
  gt_expect_correct(&g, "odd grid");
  a = gt_args(&g, 0);
  GT_CUDA(cudaMemset(g.y, 0xff, (size_t)g.T * g.s.H * 2));
  rc = hr_moe_forward_grid(g.m, sms, HR_MODE_HEADROOM, 2, &a, NULL);
  GT_EXPECT(rc == HR_OK, "legacy stream: %s", hr_strerror(rc));
  GT_EXPECT(hr_moe_sync(g.m) == HR_OK, "legacy stream sync");
  GT_CUDA(cudaMemcpy(g.y_h, g.y, (size_t)g.T * g.s.H * 2, cudaMemcpyDeviceToHost));
  gt_expect_correct(&g, "legacy stream");

  gt_moe_free(&g);
  return gt_finish(NAME);
}
