/*
 * moe_bwd_phases.c: where the time of a mega-MoE backward goes. For each
 * shape and T: the forward and the backward (barrier kernel, all SMs, dW
 * bf16), then the backward with one stage left out through the benchmark
 * hook (hr__moe_backward_hook, kernels/moe_bench.h): dgu, the dx rows, the
 * dW groups, the combine. A stage's time is what leaving it out saves,
 * and its TFLOP/s are its FLOPs over that time (P = T k pairs: dgu
 * 6 P H I, the dx rows 4 P H I, dW 6 P H I), so the distance of each GEMM
 * stage to the H200's bf16 rate shows. Then the agnostic kernel's whole
 * backward. Each cell twice, side by side: with g and u recomputed by the
 * backward, and kept by the forward (hr_moe_args.gate_up; dgu is then
 * 2 P H I). Best of `--reps` launches after one warm-up, CUDA events.
 *
 *   moe_bwd_phases [--shapes a,b] [--tokens T,T] [--reps N] [--out FILE]
 *
 * `make bench-bwd-phases` runs it (an H200; no PyTorch needed).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime.h>

#include "gpu_util.h"
#include "moe_bench.h"

#define NAME "moe_bwd_phases"

typedef struct bench {
  gt_moe g;
  uint16_t *dy, *dx;
  void *dw1, *dw2;
  float *dtw;
  float *gu;             /* [T k, 2I]: g and u, where kept */
  int keep;              /* the forward keeps g and u for the backward */
  hr_moe_grad_args a;
  cudaEvent_t e0, e1;
} bench;

static void bench_init(bench *b, const gt_shape *s, int T)
{
  const size_t E = s->E, H = s->H, I = s->I, k = s->k;
  memset(b, 0, sizeof(*b));
  gt_moe_init(&b->g, s, T);
  gt_route_random(&b->g, T);
  GT_CUDA(cudaMalloc((void **)&b->dy, (size_t)T * H * 2));
  GT_CUDA(cudaMalloc((void **)&b->dx, (size_t)T * H * 2));
  GT_CUDA(cudaMalloc(&b->dw1, E * 2 * I * H * 2));
  GT_CUDA(cudaMalloc(&b->dw2, E * H * I * 2));
  GT_CUDA(cudaMalloc((void **)&b->dtw, (size_t)T * k * 4));
  GT_CUDA(cudaMalloc((void **)&b->gu, (size_t)T * k * 2 * I * 4));
  GT_CUDA(gt_fill_bf16(b->dy, (size_t)T * H, 77, 1.0f, b->g.stream));
  GT_CUDA(cudaStreamSynchronize((cudaStream_t)b->g.stream));
  b->a.fwd = gt_args(&b->g, 10000);
  b->a.dy = b->dy;
  b->a.dx = b->dx;
  b->a.dw1 = b->dw1;
  b->a.dw2 = b->dw2;
  b->a.dtopk_weights = b->dtw;
  b->a.dw_dtype = HR_MOE_DW_BF16;
  GT_CUDA(cudaEventCreate(&b->e0));
  GT_CUDA(cudaEventCreate(&b->e1));
}

static void bench_free(bench *b)
{
  cudaFree(b->dy);
  cudaFree(b->dx);
  cudaFree(b->dw1);
  cudaFree(b->dw2);
  cudaFree(b->dtw);
  cudaFree(b->gu);
  cudaEventDestroy(b->e0);
  cudaEventDestroy(b->e1);
  gt_moe_free(&b->g);
}

enum { RUN_FORWARD, RUN_BACKWARD, RUN_AGNOSTIC };

/* g and u kept by the forward (and read by the backward), or not. */
static void bench_keep(bench *b, int keep)
{
  b->keep = keep;
  b->a.fwd.gate_up = keep ? b->gu : NULL;
}

/* Best of reps launches of one kind (after a warm-up), in ms; skip: the
 * stages the backward leaves out. Exits on a failed launch. */
static float bench_time(bench *b, int kind, unsigned skip, int reps)
{
  cudaStream_t st = (cudaStream_t)b->g.stream;
  const int sms = hr_moe_sms(b->g.m);
  hr__moe_hook h;
  float best = 1e30f, ms;
  int r, rc, rc2;

  memset(&h, 0, sizeof(h));
  h.skip = skip;
  for(r = 0; r <= reps; r++) {
    hr_moe_args fa = gt_args(&b->g, 10000);
    fa.gate_up = b->a.fwd.gate_up;
    GT_CUDA(cudaEventRecord(b->e0, st));
    if(kind == RUN_FORWARD)
      rc = hr_moe_forward_grid(b->g.m, sms, HR_MODE_HEADROOM, 2, &fa, st);
    else if(kind == RUN_AGNOSTIC)
      rc = hr_moe_backward_grid(b->g.m, sms, HR_MODE_AGNOSTIC, &b->a, st);
    else
      rc = hr__moe_backward_hook(b->g.m, sms, &h, &b->a, st);
    GT_CUDA(cudaEventRecord(b->e1, st));
    rc2 = hr_moe_sync(b->g.m);
    if(rc || rc2) {
      fprintf(stderr, "%s: launch %d failed: %s / %s\n", NAME, kind, hr_strerror(rc),
              hr_strerror(rc2));
      exit(1);
    }
    GT_CUDA(cudaEventSynchronize(b->e1));
    GT_CUDA(cudaEventElapsedTime(&ms, b->e0, b->e1));
    if(r > 0 && ms < best)
      best = ms;
  }
  return best;
}

static const gt_shape *shape_named(const char *name)
{
  int i;
  for(i = 0; i < GT_NSHAPES; i++)
    if(strcmp(gt_shapes[i].name, name) == 0)
      return &gt_shapes[i];
  fprintf(stderr, "%s: unknown shape '%s' (small, qwen3-30b-a3b, deepseek-v3)\n", NAME, name);
  exit(2);
}

int main(int argc, char **argv)
{
  const char *shapes = "qwen3-30b-a3b,deepseek-v3", *tokens = "1024,8192", *outp = NULL;
  const struct { const char *name; unsigned skip; double flops; } st[] = {
    { "dgu", HR__MOE_PHASE_GEMM1, 6 },
    { "dx rows", HR__MOE_PHASE_GEMM2, 4 },
    { "dW1 + dW2", HR__MOE_PHASE_DW, 6 },
    { "combine", HR__MOE_PHASE_COMBINE, 0 },
  };
  char sbuf[256], tbuf[256], *sp, *tp, *sv, *tv;
  int reps = 5, i, j;
  FILE *out = NULL;
  time_t now = time(NULL);
  char when[64];
  struct cudaDeviceProp prop;

  for(i = 1; i < argc; i++) {
    if(!strcmp(argv[i], "--shapes") && i + 1 < argc)
      shapes = argv[++i];
    else if(!strcmp(argv[i], "--tokens") && i + 1 < argc)
      tokens = argv[++i];
    else if(!strcmp(argv[i], "--reps") && i + 1 < argc)
      reps = atoi(argv[++i]);
    else if(!strcmp(argv[i], "--out") && i + 1 < argc)
      outp = argv[++i];
    else {
      fprintf(stderr, "usage: %s [--shapes a,b] [--tokens T,T] [--reps N] [--out FILE]\n", NAME);
      return 2;
    }
  }
  if(reps < 1) {
    fprintf(stderr, "%s: --reps must be >= 1\n", NAME);
    return 2;
  }
  gt_require_gpu(NAME);
  gt_seed(NAME);
  GT_CUDA(cudaGetDeviceProperties(&prop, 0));
  strftime(when, sizeof(when), "%Y-%m-%d %H:%M UTC", gmtime(&now));
  if(outp && !(out = fopen(outp, "w"))) {
    perror(outp);
    return 1;
  }
  for(j = 0; j < 2; j++) {
    FILE *f = j ? out : stdout;
    if(!f)
      continue;
    fprintf(f, "# The mega-MoE backward, stage by stage (%s)\n\n", when);
    fprintf(f, "- machine: %s, %d SMs\n- command: `", prop.name, prop.multiProcessorCount);
    for(i = 0; i < argc; i++)
      fprintf(f, "%s%s", i ? " " : "", argv[i]);
    fprintf(f, "`\n- barrier kernel, all SMs, dW bf16, random routing (k distinct experts a "
               "token); a stage's ms = the backward's less the backward without it "
               "(the benchmark hook); best of %d\n"
               "- g, u: recomputed by the backward (dgu = GEMM1 again, q and SwiGLU', "
               "6 P H I FLOPs), or kept by the forward (hr_moe_args.gate_up: its "
               "forward ms include writing them; dgu = q and SwiGLU', 2 P H I)\n\n", reps);
    fprintf(f, "| shape | T | g, u | forward ms | backward ms | agnostic backward ms | "
               "stage | stage ms | stage TFLOP/s |\n|---|---|---|---|---|---|---|---|---|\n");
  }
  snprintf(sbuf, sizeof(sbuf), "%s", shapes);
  for(sv = strtok_r(sbuf, ",", &sp); sv; sv = strtok_r(NULL, ",", &sp)) {
    const gt_shape *s = shape_named(sv);
    snprintf(tbuf, sizeof(tbuf), "%s", tokens);
    for(tv = strtok_r(tbuf, ",", &tp); tv; tv = strtok_r(NULL, ",", &tp)) {
      const int T = atoi(tv);
      const double P = (double)T * s->k, phi = P * s->H * s->I;
      bench b;
      int keep;
      bench_init(&b, s, T);
      for(keep = 0; keep < 2; keep++) {
        float fw, bw, agn, left[4];
        bench_keep(&b, keep);
        fw = bench_time(&b, RUN_FORWARD, 0, reps);   /* fills gu where kept */
        bw = bench_time(&b, RUN_BACKWARD, 0, reps);
        agn = bench_time(&b, RUN_AGNOSTIC, 0, reps);
        for(i = 0; i < 4; i++)
          left[i] = bench_time(&b, RUN_BACKWARD, st[i].skip, reps);
        for(i = 0; i < 4; i++) {
          const double ms = bw - left[i];
          const double flops = i == 0 && keep ? 2 : st[i].flops;
          for(j = 0; j < 2; j++) {
            FILE *f = j ? out : stdout;
            if(!f)
              continue;
            fprintf(f, "| %s | %d | %s | %.3f | %.3f | %.3f | %s | %.3f | ", s->name, T,
                    keep ? "kept" : "recomputed", fw, bw, agn, st[i].name, ms);
            if(flops > 0 && ms > 0)
              fprintf(f, "%.0f |\n", flops * phi / ms / 1e9);
            else
              fprintf(f, "- |\n");
          }
        }
      }
      fflush(stdout);
      bench_free(&b);
    }
  }
  if(out)
    fclose(out);
  return 0;
}
