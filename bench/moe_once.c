/*
 * moe_once.c: one shape, a few token counts, one forward each, for a
 * profiler to look at (ncu -k regex:hr__moe ...). Random inputs as in the
 * GPU tests; prints each launch's time. --agnostic runs the agnostic
 * kernel instead of the barrier kernel; --balanced gives every expert the
 * same number of pairs (gt_route_balanced), which shows what the experts'
 * part-filled last tiles cost against random routing.
 *
 *     build/tests/moe_once [--agnostic] [--balanced] deepseek-v3 1024 8192
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_util.h"

int main(int argc, char **argv)
{
  const gt_shape *s = NULL;
  gt_moe g;
  hr_mode mode = HR_MODE_HEADROOM;
  int i, max_T = 1, rc, cluster = 2, balanced = 0;

  for(; argc > 1 && strncmp(argv[1], "--", 2) == 0; argc--, argv++) {
    if(strcmp(argv[1], "--agnostic") == 0) {
      mode = HR_MODE_AGNOSTIC;
      cluster = 1;
    } else if(strcmp(argv[1], "--balanced") == 0) {
      balanced = 1;
    } else {
      fprintf(stderr, "%s: unknown option %s\n", argv[0], argv[1]);
      return 2;
    }
  }
  if(argc < 3) {
    fprintf(stderr, "usage: %s [--agnostic] [--balanced] "
            "small|qwen3-30b-a3b|deepseek-v3 T...\n", argv[0]);
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
    if(balanced)
      gt_route_balanced(&g, atoi(argv[i]));
    else
      gt_route_random(&g, atoi(argv[i]));
    rc = gt_run(&g, hr_moe_sms(g.m), mode, cluster, 10000);
    printf("%s T=%d %s, %s routing: %s, %.3f ms\n", s->name, g.T,
           mode == HR_MODE_AGNOSTIC ? "agnostic" : "barrier",
           balanced ? "balanced" : "random", hr_strerror(rc), g.last_ms);
  }
  gt_moe_free(&g);
  return 0;
}
