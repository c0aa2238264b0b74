/*
 * moe_once.c: one shape, a few token counts, one forward each, for a
 * profiler to look at (ncu -k regex:hr__moe ...). Random inputs as in the
 * GPU tests; prints each launch's time. --agnostic runs the agnostic
 * kernel instead of the barrier kernel; --variant N launches through the
 * benchmark's entry point with the GEMM variant bits N (HR__MOE_VAR_*,
 * kernels/moe_kernel.h), so a profiler can look at a variant too.
 *
 *     build/tests/moe_once [--agnostic] [--variant N] deepseek-v3 1024 8192
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_util.h"
#include "moe_bench.h"

/* gt_run_with's launch: the benchmark's entry point with the GEMM variant
 * bits, on the barrier or the agnostic kernel, every SM. */
typedef struct variant_ctx {
  int agnostic;
  unsigned bits;
} variant_ctx;

static int launch_variant(gt_moe *g, const hr_moe_args *a, void *ctx)
{
  const variant_ctx *c = (const variant_ctx *)ctx;
  const hr__moe_variant v = { c->agnostic, 0, 0, c->bits, NULL };
  return hr__moe_forward_variant(g->m, hr_moe_sms(g->m), &v, a, g->stream);
}

int main(int argc, char **argv)
{
  const gt_shape *s = NULL;
  gt_moe g;
  hr_mode mode = HR_MODE_HEADROOM;
  int i, max_T = 1, rc, cluster = 2, variant = -1;

  for(;;) {
    if(argc > 1 && strcmp(argv[1], "--agnostic") == 0) {
      mode = HR_MODE_AGNOSTIC;
      cluster = 1;
      argc--;
      argv++;
    } else if(argc > 2 && strcmp(argv[1], "--variant") == 0) {
      variant = atoi(argv[2]);
      argc -= 2;
      argv += 2;
    } else {
      break;
    }
  }
  if(argc < 3 || variant < -1) {
    fprintf(stderr, "usage: %s [--agnostic] [--variant N] small|qwen3-30b-a3b|deepseek-v3 "
                    "T...\n", argv[0]);
    return 2;
  }
  for(i = 0; i < GT_NSHAPES; i++)
    if(strcmp(argv[1], gt_shapes[i].name) == 0)
      s = &gt_shapes[i];
  if(!s) {
    fprintf(stderr, "no shape %s\n", argv[1]);
    return 2;
  }
  for(i = 2; i < argc; i++)
    if(atoi(argv[i]) > max_T)
      max_T = atoi(argv[i]);
  gt_require_gpu("moe_once");
  gt_seed("moe_once");
  gt_moe_init(&g, s, max_T);
  for(i = 2; i < argc; i++) {
    gt_route_random(&g, atoi(argv[i]));
    if(variant >= 0) {
      variant_ctx vc;
      vc.agnostic = mode == HR_MODE_AGNOSTIC;
      vc.bits = (unsigned)variant;
      rc = gt_run_with(&g, launch_variant, &vc, 10000);
    } else {
      rc = gt_run(&g, hr_moe_sms(g.m), mode, cluster, 10000);
    }
    printf("%s T=%d %s: %s, %.3f ms\n", s->name, g.T,
           mode == HR_MODE_AGNOSTIC ? "agnostic" : "barrier", hr_strerror(rc), g.last_ms);
  }
  gt_moe_free(&g);
  return 0;
}
