/*
 * test_moe_l2_keep.c: hr_moe_set_l2_keep keeps h and ypair in L2 and
 * changes nothing else.
 *
 * - Bad arguments: HR_EINVAL, nothing kept.
 * - HR_MOE_L2_KEEP_MAX: the device's persisting set-aside raised to at
 *   most its maximum, the context's kept bytes within both; a smaller
 *   request kept as asked; 0 turns it off and leaves the set-aside.
 * - y bitwise the same with and without, for both kernels, at token
 *   counts that move h (its rows end where ypair begins, so h's place
 *   follows T, and with it the TMA tile's map of h, made again), the
 *   TMA tile's T included, and against the CPU reference.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "gpu_util.h"

#define NAME "test_moe_l2_keep"
#define TIMEOUT_MS 5000

/* Qwen3-30B-A3B: 1 and 16 the small tiles, 300 and 1024 the cp.async
 * wgmma tiles, 4096 the big TMA tile, then back to a small T. */
static const int token_counts[] = { 1, 300, 4096, 1024, 16, 4096 };
#define NT ((int)(sizeof(token_counts) / sizeof(token_counts[0])))

/* y of one launch (barrier kernel or agnostic) into out. */
static int run_into(gt_moe *g, int agnostic, uint16_t *out)
{
  const int sms = hr_moe_sms(g->m);
  int rc = agnostic ? gt_run(g, sms, HR_MODE_AGNOSTIC, 1, TIMEOUT_MS)
                    : gt_run(g, sms, HR_MODE_HEADROOM, 2, TIMEOUT_MS);
  if(rc == HR_OK)
    memcpy(out, g->y_h, (size_t)g->T * g->s.H * 2);
  return rc;
}

int main(void)
{
  gt_moe g;
  struct cudaDeviceProp prop;
  size_t limit = 0, limit_after = 0;
  uint16_t *y_off, *y_on;
  uint64_t kept;
  int i, kk, rc;

  gt_require_gpu(NAME);
  gt_seed(NAME);

  GT_EXPECT(hr_moe_set_l2_keep(NULL, 1 << 20) == HR_EINVAL, "NULL context refused");
  GT_EXPECT(hr_moe_l2_keep(NULL) == 0, "NULL context keeps nothing");

  gt_moe_init(&g, &gt_shapes[GT_QWEN3], 4096);
  GT_CUDA(cudaGetDeviceProperties(&prop, 0));
  GT_EXPECT(hr_moe_l2_keep(g.m) == 0, "off by default");

  rc = hr_moe_set_l2_keep(g.m, HR_MOE_L2_KEEP_MAX);
  if(rc == HR_EUNSUPPORTED) {
    /* MIG or MPS: nothing can be kept, and nothing was */
    printf("%s: the device has no persisting L2 for this process: checking it says so\n",
           NAME);
    GT_EXPECT(hr_moe_l2_keep(g.m) == 0, "nothing kept after HR_EUNSUPPORTED");
    gt_moe_free(&g);
    return gt_finish(NAME);
  }
  GT_EXPECT(rc == HR_OK, "keep as much as the device allows: %s", hr_strerror(rc));
  kept = hr_moe_l2_keep(g.m);
  GT_CUDA(cudaDeviceGetLimit(&limit, cudaLimitPersistingL2CacheSize));
  printf("%s: L2 %d MB, persisting at most %d MB; set-aside now %zu bytes, kept %llu\n",
         NAME, prop.l2CacheSize >> 20, prop.persistingL2CacheMaxSize >> 20, limit,
         (unsigned long long)kept);
  GT_EXPECT(kept > 0, "something kept");
  GT_EXPECT(kept <= (uint64_t)prop.persistingL2CacheMaxSize, "kept within the device's maximum");
  GT_EXPECT(kept <= (uint64_t)limit, "kept within the set-aside");

  GT_EXPECT(hr_moe_set_l2_keep(g.m, 1 << 20) == HR_OK, "1 MiB");
  GT_EXPECT(hr_moe_l2_keep(g.m) == (uint64_t)(1 << 20) || limit < (1 << 20),
            "1 MiB kept as asked: %llu", (unsigned long long)hr_moe_l2_keep(g.m));
  GT_EXPECT(hr_moe_set_l2_keep(g.m, 0) == HR_OK, "off");
  GT_EXPECT(hr_moe_l2_keep(g.m) == 0, "nothing kept when off");
  GT_CUDA(cudaDeviceGetLimit(&limit_after, cudaLimitPersistingL2CacheSize));
  GT_EXPECT(limit_after == limit, "off leaves the set-aside (%zu, was %zu)", limit_after, limit);

  y_off = malloc((size_t)4096 * g.s.H * 2);
  y_on = malloc((size_t)4096 * g.s.H * 2);
  if(!y_off || !y_on) {
    fprintf(stderr, "FAIL: out of memory\n");
    return 1;
  }
  for(i = 0; i < NT; i++) {
    const size_t ybytes = (size_t)token_counts[i] * g.s.H * 2;
    gt_route_random(&g, token_counts[i]);
    for(kk = 0; kk < 2; kk++) {
      const char *kname = kk ? "agnostic" : "barrier";
      GT_EXPECT(hr_moe_set_l2_keep(g.m, 0) == HR_OK, "off");
      rc = run_into(&g, kk, y_off);
      GT_EXPECT(rc == HR_OK, "%s T=%d without: %s", kname, g.T, hr_strerror(rc));
      GT_EXPECT(hr_moe_set_l2_keep(g.m, HR_MOE_L2_KEEP_MAX) == HR_OK, "on");
      rc = run_into(&g, kk, y_on);
      GT_EXPECT(rc == HR_OK, "%s T=%d kept in L2: %s", kname, g.T, hr_strerror(rc));
      if(rc != HR_OK)
        continue;
      gt_expect_correct(&g, kk ? "agnostic, h and ypair kept in L2"
                                : "barrier, h and ypair kept in L2");
      GT_EXPECT(memcmp(y_off, y_on, ybytes) == 0, "%s T=%d: y bitwise the same kept in L2",
                kname, g.T);
      printf("  %-8s T=%-5d y with h and ypair kept in L2: %s\n", kname, g.T,
             memcmp(y_off, y_on, ybytes) == 0 ? "bitwise the same" : "DIFFERENT");
    }
  }
  free(y_off);
  free(y_on);
  gt_moe_free(&g);
  return gt_finish(NAME);
}
