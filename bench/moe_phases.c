/*
 * moe_phases.c: where the time of a mega-MoE forward goes, measured. For
 * each shape, T and kernel (barrier, agnostic), the time of the normal
 * launch and of launches that leave one phase out or run it twice,
 * through the benchmark hook (hr__moe_forward_hook, kernels/moe_bench.h)
 * into the production kernels; a phase's cost is then seen two ways:
 *
 *   t(repeat) - t(normal)   what one more run of the phase costs, with the
 *                           rest of the launch around it
 *   t(normal) - t(skip)     what leaving it out saves, overlap included
 *
 * The two differ where a phase overlaps others (the agnostic kernel's
 * GEMM2 starts while GEMM1 ends) or where the barriers' waits move. The
 * route phase is the placing of the pairs: every CTA still counts them.
 * A phase run twice writes the same bytes, which is checked (y of that
 * launch against y of the normal launch, bitwise).
 *
 * Then the normal launch's row ("default": the name bench/ab_table.py
 * reads) with its TFLOP/s and y against the CPU reference on sampled
 * tokens. --no-phases times the normal launches alone; --trace PREFIX
 * writes the barrier kernel's timeline of a launch per shape and T: each
 * CTA's stage boundaries and unit ends, after other launches
 * (PREFIX-SHAPE-T.txt) and right behind the same launch
 * (PREFIX-SHAPE-T-again.txt), and each SM's clock at the same marks
 * (PREFIX-SHAPE-T[-again]-clocks.txt); from a build with
 * NVCC_EXTRA=-DHR__MOE_TRACE_INNER=1, the steps inside the first unit's
 * end of each stage too (PREFIX-SHAPE-T[-again]-inner.txt); from a build
 * with NVCC_EXTRA=-DHR__MOE_TRACE_AGN=1, the agnostic kernel's timeline
 * too, the same words with no barrier arrivals
 * (PREFIX-agnostic-SHAPE-T[-again][-clocks].txt).
 *
 * First, for each shape and T, the floor measured rather than computed:
 * a kernel that only reads the touched experts' weights once on every SM
 * (tests/gpu/gpu_kernels.cu, stream), timed the same way, beside both
 * kernels with every phase left out (launch, counts and barriers alone)
 * and an empty kernel (what two events around any launch measure).
 * --no-floor leaves that out (and the whole-weights read): a side-by-side
 * run of builds (bench/ab_builds.sh) compares only the kernels' own times
 * (a run of 2 shapes x 2 T, 17.5 s instead of 22.5 on an H200; the rest
 * is the weights' set-up and the check against the CPU reference).
 *
 * Timing as bench/bench_moe.py: inputs rotating between several sets, a
 * warm-up, then each rep timed alone with CUDA events, the host given a
 * head start (a spinning kernel) so launch overhead never shows; the
 * median of the reps. Prints a markdown table with the date, machine and
 * command.
 *
 * --balanced routes every expert the same number of pairs
 * (gt_route_balanced) instead of k distinct experts a token at random:
 * beside a random run it shows what the experts' part-filled last tiles
 * cost.
 *
 * --patterns times instead, per shape, every expert's weights read in a
 * GEMM tile's access pattern with no math (gt_tile_stream_launch): a few
 * bytes of each of 128 rows per step, with and without token rows beside
 * them, against the plain stream read. It separates what a tile's memory
 * access allows from what its math and bookkeeping cost.
 *
 *     build/tests/moe_phases [--reps N] [--shapes a,b] [--tokens 1,16,..]
 *                            [--no-phases] [--no-floor] [--trace PREFIX]
 *                            [--balanced] [--patterns] [--out FILE]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime.h>

#include "gpu_util.h"
#include "moe_bench.h"
#include "moe_ref.h"

#define MAX_SETS 8
#define MAX_TOKENS 16
#define MAX_REPS 200

static const char *const phase_names[] = { "route", "GEMM1", "GEMM2", "combine" };
static const unsigned phase_bits[] = { HR__MOE_PHASE_ROUTE, HR__MOE_PHASE_GEMM1,
                                       HR__MOE_PHASE_GEMM2, HR__MOE_PHASE_COMBINE };
#define NPHASES 4

/* One input set on the device (x, ids, wts for T tokens). */
typedef struct input_set {
  uint16_t *x;
  int32_t *ids;
  float *wts;
  int *experts;          /* the experts this set touches (device), nexp */
  int nexp;
  int max_pairs;         /* the busiest expert's pairs */
  int over80;            /* experts with more than 80 pairs: the 80-token
                          * tile streams their weights twice, so between
                          * draws of the routing the same T moves */
} input_set;

typedef struct bench {
  gt_moe g;
  int T, nsets, reps;
  input_set set[MAX_SETS];
  unsigned *sink;        /* the stream kernel's output word (device) */
} bench;

/* One launch of whatever is timed, on input set `set`. */
typedef void (*launch_fn)(bench *b, const void *arg, int set);

static int cmp_float(const void *a, const void *b)
{
  const float x = *(const float *)a, y = *(const float *)b;
  return x < y ? -1 : x > y;
}

static hr_moe_args set_args(const bench *b, int i)
{
  hr_moe_args a = gt_args(&b->g, 10000);
  a.x = b->set[i].x;
  a.topk_ids = b->set[i].ids;
  a.topk_weights = b->set[i].wts;
  return a;
}

static void launch(bench *b, const hr__moe_hook *v, int set)
{
  hr_moe_args a = set_args(b, set);
  int rc = hr__moe_forward_hook(b->g.m, hr_moe_sms(b->g.m), v, &a, b->g.stream);
  if(rc) {
    fprintf(stderr, "FAIL: hr__moe_forward_hook: %s\n", hr_strerror(rc));
    exit(1);
  }
}

static void launch_moe(bench *b, const void *arg, int set)
{
  launch(b, (const hr__moe_hook *)arg, set);
}

/* The floor kernels: reading the touched weights once (of set `set`, or
 * of the input_set arg when given); nothing. */
static void launch_stream(bench *b, const void *arg, int set)
{
  const gt_shape *s = &b->g.s;
  const input_set *in = arg ? (const input_set *)arg : &b->set[set];
  const size_t w1 = (size_t)2 * s->I * s->H * 2, w2 = (size_t)s->H * s->I * 2;
  GT_CUDA(gt_stream_launch(b->g.w1, b->g.w2, in->experts, in->nexp, w1, w2,
                           hr_moe_sms(b->g.m), b->sink, b->g.stream));
}

/* Tile-pattern reads of every expert's W1 then W2 (gpu_util.h): rows,
 * chunk, stages, token rows, their sharing (group), K rotation. */
static const gt_tile_pattern read_patterns[] = {
  { 128, 128, 7, 0, 0, 0 },   { 128, 128, 13, 0, 0, 0 },  { 128, 256, 4, 0, 0, 0 },
  { 128, 128, 7, 96, 0, 0 },  { 128, 128, 7, 96, 1, 0 },  { 128, 128, 7, 96, 12, 0 },
  { 128, 128, 7, 96, 12, 5 }, { 128, 128, 7, 64, 12, 0 }, { 128, 256, 3, 96, 12, 0 },
  { 256, 128, 4, 96, 6, 0 },  { 256, 128, 4, 96, 1, 0 },  { 256, 128, 6, 32, 6, 0 },
};
#define NPATTERNS ((int)(sizeof(read_patterns) / sizeof(read_patterns[0])))

static void launch_pattern(bench *b, const void *arg, int set)
{
  const gt_tile_pattern *tp = (const gt_tile_pattern *)arg;
  const gt_shape *s = &b->g.s;
  (void)set;
  GT_CUDA(gt_tile_stream_launch(b->g.w1, (size_t)s->E * 2 * s->I, s->H, b->g.x, tp, b->T,
                                hr_moe_sms(b->g.m), b->sink, b->g.stream));
  GT_CUDA(gt_tile_stream_launch(b->g.w2, (size_t)s->E * s->H, s->I, b->g.x, tp, b->T,
                                hr_moe_sms(b->g.m), b->sink, b->g.stream));
}

static void launch_null(bench *b, const void *arg, int set)
{
  (void)arg;
  (void)set;
  GT_CUDA(gt_null_launch(b->g.stream));
}

/* arg: the cluster size (int) */
static void launch_null_like(bench *b, const void *arg, int set)
{
  (void)set;
  GT_CUDA(gt_null_like_launch(hr_moe_sms(b->g.m), 256, hr__moe_smem_bytes(),
                              *(const int *)arg, b->g.stream));
}

static void sync_ok(bench *b)
{
  int rc = hr_moe_sync(b->g.m);
  if(rc) {
    fprintf(stderr, "FAIL: hr_moe_sync: %s\n", hr_strerror(rc));
    exit(1);
  }
  GT_CUDA(cudaStreamSynchronize((cudaStream_t)b->g.stream));
}

/* Median ms of b->reps launches of fn, each timed alone. */
static float time_launches(bench *b, launch_fn fn, const void *arg)
{
  cudaStream_t st = (cudaStream_t)b->g.stream;
  cudaEvent_t e0[MAX_REPS], e1[MAX_REPS];
  float ms[MAX_REPS];
  int i;

  for(i = 0; i < 3; i++)                        /* warm-up */
    fn(b, arg, i % b->nsets);
  sync_ok(b);
  for(i = 0; i < b->reps; i++) {
    GT_CUDA(cudaEventCreate(&e0[i]));
    GT_CUDA(cudaEventCreate(&e1[i]));
  }
  GT_CUDA(gt_spin_launch(20, st));              /* head start for the host */
  for(i = 0; i < b->reps; i++) {
    GT_CUDA(cudaEventRecord(e0[i], st));
    fn(b, arg, i % b->nsets);
    GT_CUDA(cudaEventRecord(e1[i], st));
  }
  sync_ok(b);
  for(i = 0; i < b->reps; i++) {
    GT_CUDA(cudaEventElapsedTime(&ms[i], e0[i], e1[i]));
    cudaEventDestroy(e0[i]);
    cudaEventDestroy(e1[i]);
  }
  qsort(ms, (size_t)b->reps, sizeof(float), cmp_float);
  return b->reps % 2 ? ms[b->reps / 2] : 0.5f * (ms[b->reps / 2 - 1] + ms[b->reps / 2]);
}

static float time_hook(bench *b, const hr__moe_hook *v)
{
  return time_launches(b, launch_moe, v);
}

/* The distinct experts of the routing in g's host copy, to the device;
 * and how the pairs spread over them. */
static void set_experts(bench *b, input_set *in)
{
  const gt_moe *g = &b->g;
  const size_t pairs = (size_t)b->T * g->s.k;
  int *cnt = calloc((size_t)g->s.E, sizeof(int));
  int *list = malloc((size_t)g->s.E * sizeof(int)), e;
  size_t j;
  if(!cnt || !list) {
    fprintf(stderr, "FAIL: out of memory\n");
    exit(1);
  }
  for(j = 0; j < pairs; j++)
    if(g->ids_h[j] >= 0 && g->ids_h[j] < g->s.E)
      cnt[g->ids_h[j]]++;
  in->nexp = 0;
  in->max_pairs = 0;
  in->over80 = 0;
  for(e = 0; e < g->s.E; e++) {
    if(cnt[e])
      list[in->nexp++] = e;
    if(cnt[e] > in->max_pairs)
      in->max_pairs = cnt[e];
    in->over80 += cnt[e] > 80;
  }
  GT_CUDA(cudaMalloc((void **)&in->experts, (size_t)g->s.E * sizeof(int)));
  GT_CUDA(cudaMemcpy(in->experts, list, (size_t)in->nexp * sizeof(int), cudaMemcpyHostToDevice));
  free(cnt);
  free(list);
}

/* y of one launch of v on the last set (whose host copies gt_moe keeps,
 * for the CPU reference), into host memory `out`. */
static void y_of(bench *b, const hr__moe_hook *v, uint16_t *out)
{
  const size_t n = (size_t)b->T * b->g.s.H * 2;
  launch(b, v, b->nsets - 1);
  sync_ok(b);
  GT_CUDA(cudaMemcpy(out, b->g.y, n, cudaMemcpyDeviceToHost));
}

/* PREFIX-SHAPE-T[-again]SUFFIX.txt, open for writing; exits when it
 * cannot be. */
static FILE *trace_file(const char *prefix, const char *shape, int T, int warm,
                        const char *suffix)
{
  char path[512];
  FILE *f;
  snprintf(path, sizeof(path), "%s-%s-%d%s%s.txt", prefix, shape, T, warm ? "-again" : "",
           suffix);
  f = fopen(path, "w");
  if(!f) {
    fprintf(stderr, "FAIL: %s: cannot write\n", path);
    exit(1);
  }
  return f;
}

/* A timeline word in microseconds from t0, or -1 where it was not written. */
static double trace_us(unsigned long long x, unsigned long long t0)
{
  return x ? (double)(x - t0) / 1e3 : -1.0;
}

/* The timeline (moe_kernel.h, HR__MOE_TRACE_*) of v's kernel, one
 * launch of v on each input set in turn, the last one's kept (with
 * `warm`, of one more launch right behind that one): a line per CTA,
 * "cta" then its words in microseconds from the earliest start mark of
 * any CTA (-1: not written; the SM word as a number), into
 * PREFIX-SHAPE-T.txt (PREFIX-SHAPE-T-again.txt with `warm`); the same
 * lines of SM clock cycles, in thousands from the CTA's own start mark,
 * into PREFIX-SHAPE-T[-again]-clocks.txt; and, from a build that writes
 * them (HR__MOE_TRACE_INNER), the inner marks of the first units' ends
 * in microseconds like the times, into PREFIX-SHAPE-T[-again]-inner.txt.
 * The agnostic kernel's (v->agnostic 1) into PREFIX-agnostic-SHAPE-T...,
 * from a build that writes it (HR__MOE_TRACE_AGN): from any other, no
 * word is written, and this says so and writes no file. */
static void trace_to(bench *b, const hr__moe_hook *v, const char *prefix_in,
                     const char *shape, int warm)
{
  const char *kname = v->agnostic ? "agnostic" : "barrier";
  char prefix[448];
  const int grid = hr_moe_sms(b->g.m), words = HR__MOE_TRACE_WORDS;
  const int iw = HR__MOE_TRACE_INNER_WORDS;
  /* the times, the clocks after them, then the inner marks */
  const size_t n = HR__MOE_TRACE_CLOCKS_AT(grid), all = HR__MOE_TRACE_BUFFER_WORDS(grid);
  unsigned long long *d = NULL, *h = malloc(all * sizeof(*h)), t0 = ~0ULL;
  const unsigned long long *inner;
  hr__moe_hook tv = *v;
  FILE *f;
  int i, c, w, any_inner = 0;
  if(!h) {
    fprintf(stderr, "FAIL: out of memory\n");
    exit(1);
  }
  snprintf(prefix, sizeof(prefix), "%s%s", prefix_in, v->agnostic ? "-agnostic" : "");
  inner = h + HR__MOE_TRACE_INNER_AT(grid);
  GT_CUDA(cudaMalloc((void **)&d, all * sizeof(*d)));
  tv.trace = d;
  for(i = 0; i < b->nsets; i++) {
    GT_CUDA(cudaMemsetAsync(d, 0, all * sizeof(*d), b->g.stream));
    launch(b, &tv, i);
  }
  if(warm) {               /* the same launch again, right behind it */
    /* the agnostic kernel writes its stage starts only where the word
     * is still 0 (moe_trace_agn); the barrier kernel rewrites every
     * word, and nothing comes between its two launches */
    if(v->agnostic)
      GT_CUDA(cudaMemsetAsync(d, 0, all * sizeof(*d), b->g.stream));
    launch(b, &tv, b->nsets - 1);
  }
  sync_ok(b);
  GT_CUDA(cudaMemcpy(h, d, all * sizeof(*d), cudaMemcpyDeviceToHost));
  for(c = 0; c < grid; c++)
    if(h[(size_t)c * words] && h[(size_t)c * words] < t0)
      t0 = h[(size_t)c * words];
  if(t0 == ~0ULL) {
    fprintf(stderr, "%s kernel timeline of %s T=%d: not written (a build with "
                    "NVCC_EXTRA=-DHR__MOE_TRACE_AGN=1 writes the agnostic kernel's)\n",
            kname, shape, b->T);
    cudaFree(d);
    free(h);
    return;
  }

  f = trace_file(prefix, shape, b->T, warm, "-clocks");
  fprintf(f, "# %s kernel timeline's SM clocks, thousands of cycles from the CTA's "
             "start mark, the words of %s-%s-%d%s.txt (the SM word: -1)\n",
          kname, prefix, shape, b->T, warm ? "-again" : "");
  for(c = 0; c < grid; c++) {
    const unsigned long long *tc = h + (size_t)c * words, *cc = h + n + (size_t)c * words;
    fprintf(f, "%d", c);
    for(w = 0; w < words; w++)
      fprintf(f, " %.3f", tc[w] && tc[0] && w != HR__MOE_MARK_SM
                              ? (double)(long long)(cc[w] - cc[0]) / 1e3 : -1.0);
    fprintf(f, "\n");
  }
  fclose(f);

  f = trace_file(prefix, shape, b->T, warm, "");
  fprintf(f, "# %s kernel timeline, us from the first CTA's start; words: "
             "%d marks (the last the CTA's SM), then %d GEMM1 unit ends, %d GEMM2 unit "
             "ends%s\n",
          kname, HR__MOE_TRACE_MARKS, HR__MOE_TRACE_UNITS, HR__MOE_TRACE_UNITS,
          warm ? "; a launch right behind the same one" : "");
  for(c = 0; c < grid; c++) {
    fprintf(f, "%d", c);
    for(w = 0; w < words; w++) {
      const unsigned long long x = h[(size_t)c * words + w];
      if(w == HR__MOE_MARK_SM)                  /* the SM, not a time */
        fprintf(f, " %d", x ? (int)(x - 1) : -1);
      else
        fprintf(f, " %.3f", trace_us(x, t0));
    }
    fprintf(f, "\n");
  }
  fclose(f);

  for(i = 0; i < grid * iw; i++)
    any_inner |= inner[i] != 0;
  if(any_inner) {
    f = trace_file(prefix, shape, b->T, warm, "-inner");
    fprintf(f, "# %s kernel timeline's inner marks, us like %s-%s-%d%s.txt: each dealt "
               "stage's first unit's end, GEMM1's %d words, GEMM2's from word %d "
               "(moe_kernel.h, HR__MOE_INNER_*), or in a HR__MOE_TRACE_ROUTE build "
               "the routing's steps from word %d (HR__MOE_ROUTE_MARK_*)\n",
            kname, prefix, shape, b->T, warm ? "-again" : "", HR__MOE_INNER_MARKS,
            HR__MOE_INNER_STAGE, HR__MOE_INNER_STAGE);
    for(c = 0; c < grid; c++) {
      fprintf(f, "%d", c);
      for(w = 0; w < iw; w++) {
        const unsigned long long x = inner[(size_t)c * iw + w];
        fprintf(f, " %.3f", trace_us(x, t0));
      }
      fprintf(f, "\n");
    }
    fclose(f);
  }
  cudaFree(d);
  free(h);
}

static void machine(char *buf, size_t n)
{
  FILE *f = popen("nvidia-smi --query-gpu=name,driver_version,memory.total "
                  "--format=csv,noheader -i 0 2>/dev/null", "r");
  struct cudaDeviceProp prop;
  buf[0] = 0;
  if(f) {
    if(fgets(buf, (int)n, f))
      buf[strcspn(buf, "\n")] = 0;
    pclose(f);
  }
  if(!buf[0] && cudaGetDeviceProperties(&prop, 0) == cudaSuccess)
    snprintf(buf, n, "%s", prop.name);
}

/* Comma-separated list into ints; returns how many. */
static int parse_list(const char *s, int *out, int max)
{
  int n = 0;
  while(*s && n < max) {
    out[n++] = atoi(s);
    s = strchr(s, ',');
    if(!s)
      break;
    s++;
  }
  return n;
}

int main(int argc, char **argv)
{
  const char *shapes = "qwen3-30b-a3b,deepseek-v3", *out_path = NULL;
  int tokens[MAX_TOKENS], ntok, reps = 20, i, si, ti, kk, ph, phases = 1, patterns = 0;
  int with_floor = 1;             /* 0: --no-floor */
  int balanced = 0;               /* 1: --balanced */
  const char *trace_prefix = NULL;
  char mach[256], date[64], cmd[1024] = "";
  char *table = NULL, *vtable = NULL, *ftable = NULL;
  size_t table_len = 0, vtable_len = 0, ftable_len = 0;
  FILE *tf, *vf, *ff;
  time_t now = time(NULL);

  ntok = parse_list("1,16,128,1024,8192", tokens, MAX_TOKENS);
  for(i = 1; i < argc; i++) {
    if(strcmp(argv[i], "--reps") == 0 && i + 1 < argc)
      reps = atoi(argv[++i]);
    else if(strcmp(argv[i], "--shapes") == 0 && i + 1 < argc)
      shapes = argv[++i];
    else if(strcmp(argv[i], "--tokens") == 0 && i + 1 < argc)
      ntok = parse_list(argv[++i], tokens, MAX_TOKENS);
    else if(strcmp(argv[i], "--out") == 0 && i + 1 < argc)
      out_path = argv[++i];
    else if(strcmp(argv[i], "--no-phases") == 0)
      phases = 0;
    else if(strcmp(argv[i], "--no-floor") == 0)
      with_floor = 0;
    else if(strcmp(argv[i], "--patterns") == 0)
      patterns = 1;
    else if(strcmp(argv[i], "--balanced") == 0)
      balanced = 1;
    else if(strcmp(argv[i], "--trace") == 0 && i + 1 < argc)
      trace_prefix = argv[++i];
    else {
      fprintf(stderr, "usage: %s [--reps N] [--shapes a,b] [--tokens 1,16,...] "
                      "[--no-phases] [--no-floor] [--trace PREFIX] [--balanced] "
                      "[--patterns] [--out FILE]\n", argv[0]);
      return 2;
    }
  }
  if(reps < 1 || reps > MAX_REPS)
    reps = 20;
  for(i = 0; i < argc; i++) {
    strncat(cmd, argv[i], sizeof(cmd) - strlen(cmd) - 2);
    strncat(cmd, i + 1 < argc ? " " : "", sizeof(cmd) - strlen(cmd) - 1);
  }
  gt_require_gpu("moe_phases");
  gt_seed("moe_phases");
  machine(mach, sizeof(mach));
  strftime(date, sizeof(date), "%Y-%m-%d %H:%M UTC", gmtime(&now));

  tf = open_memstream(&table, &table_len);
  vf = open_memstream(&vtable, &vtable_len);
  ff = open_memstream(&ftable, &ftable_len);
  if(!tf || !vf || !ff)
    return 1;
  if(!with_floor)
    fprintf(ff, "\nThe floor: not measured (--no-floor).\n");
  else
    fprintf(ff, "\nThe floor, measured (same timing): stream = a kernel that only "
                "reads the touched experts' W1 and W2 once, two CTAs per SM, 128 KB "
                "in flight per SM (tests/gpu/gpu_kernels.cu); no phases = the kernel "
                "with route, GEMM1, GEMM2 and combine left out (launch, counts, "
                "barriers or waits); empty = an empty kernel between the events; "
                "empty, launched alike = an empty kernel with the MoE kernels' grid, "
                "threads and dynamic shared memory (clusters of 2 for the barrier "
                "kernel's, none for the agnostic's). "
                "Whole-weights read rate, per shape: the stream kernel over every "
                "expert.\n\n"
                "| shape | T | experts | pairs: most, experts > 80 | MB read | stream ms | "
                "stream TB/s | barrier ms "
                "| agnostic ms | barrier / stream | agnostic / stream | no phases: "
                "barrier ms | no phases: agnostic ms | empty kernel ms | empty, launched "
                "alike: barrier / agnostic ms |\n"
                "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  fprintf(vf, "\nNormal launches (same inputs; TFLOP/s = "
              "2 T k 3 H I / time; y against the CPU reference on sampled "
              "tokens):\n\n"
              "| shape | T | kernel | variant | ms | TFLOP/s | y |\n"
              "|---|---|---|---|---|---|---|\n");
  fprintf(tf, "# Mega-MoE phase timings (%s)\n\n", date);
  {
    struct cudaDeviceProp prop;
    size_t found = 0, set_aside = 0;
    GT_CUDA(cudaGetDeviceProperties(&prop, 0));
    fprintf(tf, "- machine: %s, %d SMs\n", mach, prop.multiProcessorCount);
    /* A persisting-L2 set-aside slows every launch (docs/kernels.md), and
     * a process can start with one it never asked for (a lent H200 has
     * come with one, persistence mode on; MPS can set one too): the
     * benchmark takes it back to 0 and says what it found. */
    GT_CUDA(cudaDeviceGetLimit(&found, cudaLimitPersistingL2CacheSize));
    if(found && cudaDeviceSetLimit(cudaLimitPersistingL2CacheSize, 0) != cudaSuccess)
      (void)cudaGetLastError();
    GT_CUDA(cudaDeviceGetLimit(&set_aside, cudaLimitPersistingL2CacheSize));
    fprintf(tf, "- persisting L2 set-aside: %zu bytes (found %zu)%s\n", set_aside, found,
            set_aside ? "; it slows every launch: these times are not comparable" : "");
  }
  fprintf(tf, "- command: `%s` (through `make bench-phases`)\n", cmd);
  fprintf(tf, "- routing: %s\n", balanced ?
              "balanced (slot j of token t to expert (t k + j) mod E)" :
              "k distinct experts a token, uniformly at random");
  fprintf(tf, "- ms, medians of %d reps (CUDA events per rep, inputs rotating); "
              "grid = all SMs (barrier kernel: clusters of 2)\n", reps);
  fprintf(tf, "- per phase: +rep = t(phase run twice) - t(normal); -skip = "
              "t(normal) - t(phase left out); route = placing the pairs (the "
              "counts are always made)\n");
  fprintf(tf, "- rep same: every phase run twice gave y bitwise the normal "
              "launch's\n");
  fprintf(tf, "\n");
  fprintf(tf, "| shape | T | kernel | normal ms |");
  for(ph = 0; ph < NPHASES; ph++)
    fprintf(tf, " %s +rep | %s -skip |", phase_names[ph], phase_names[ph]);
  fprintf(tf, " rep same |\n|---|---|---|---|");
  for(ph = 0; ph < NPHASES; ph++)
    fprintf(tf, "---|---|");
  fprintf(tf, "---|\n");

  for(si = 0; si < GT_NSHAPES; si++) {
    const gt_shape *s = &gt_shapes[si];
    bench b;
    int max_T = 1;
    float all_ms = 0;
    const char *hit = strstr(shapes, s->name);
    if(!hit || (hit[strlen(s->name)] != 0 && hit[strlen(s->name)] != ','))
      continue;
    for(ti = 0; ti < ntok; ti++)
      max_T = tokens[ti] > max_T ? tokens[ti] : max_T;
    memset(&b, 0, sizeof(b));
    gt_moe_init(&b.g, s, max_T);
    b.reps = reps;
    b.nsets = 1;
    GT_CUDA(cudaMalloc((void **)&b.sink, sizeof(unsigned)));
    if(with_floor || patterns) {
      /* the sustained read rate: every expert's weights once */
      input_set all;
      int *list = malloc((size_t)s->E * sizeof(int)), e;
      const double mb = (double)s->E * 3 * s->H * s->I * 2 / 1e6;
      float ms;
      if(!list)
        return 1;
      for(e = 0; e < s->E; e++)
        list[e] = e;
      all.nexp = s->E;
      GT_CUDA(cudaMalloc((void **)&all.experts, (size_t)s->E * sizeof(int)));
      GT_CUDA(cudaMemcpy(all.experts, list, (size_t)s->E * sizeof(int), cudaMemcpyHostToDevice));
      ms = time_launches(&b, launch_stream, &all);
      all_ms = ms;
      if(with_floor)
        fprintf(ff, "| %s | all %d experts | %d | %.0f | %.3f | %.2f | | | | | | | | |\n",
                s->name, s->E, s->E, mb, ms, mb / 1e6 / (ms * 1e-3));
      fprintf(stderr, "%-14s stream over all experts: %.0f MB in %.3f ms, %.2f TB/s\n",
              s->name, mb, ms, mb / 1e6 / (ms * 1e-3));
      cudaFree(all.experts);
      free(list);
    }
    if(si == 0)
      fprintf(stderr, "moe_phases: %s\n", mach);
    if(patterns) {
      /* every expert's weights in each tile pattern; token rows drawn from
       * the first max_T rows of x (L2-resident, as a GEMM's token tile) */
      const double mb = (double)s->E * 3 * s->H * s->I * 2 / 1e6;
      static int head;
      int pi;
      b.T = max_T;
      if(!head++)
        fprintf(ff, "\nTile-pattern reads (gt_tile_stream_launch): every expert's W1 "
                    "then W2, tiles of `rows` rows dealt round-robin, one CTA per "
                    "SM, `chunk` bytes of each row a step, `stages` cp.async slots "
                    "(stages - 1 steps in flight), `token rows` more rows a step "
                    "from x (max T rows, L2-resident); group 0: neighbouring units "
                    "read nearly the same token rows, g: g neighbouring units share "
                    "a token tile; rot r: unit u starts along K at step (u mod 16) r "
                    "(gt_tile_pattern); no math. Against the stream read of the "
                    "same bytes.\n\n"
                    "| shape | pattern | MB of weights | ms | weights TB/s | / stream |\n"
                    "|---|---|---|---|---|---|\n");
      fprintf(ff, "| %s | stream: the plain read of all %d experts | %.0f | %.3f | %.2f | 1.00 |\n",
              s->name, s->E, mb, all_ms, mb / 1e6 / (all_ms * 1e-3));
      for(pi = 0; pi < NPATTERNS; pi++) {
        const gt_tile_pattern *rp = &read_patterns[pi];
        const float ms = time_launches(&b, launch_pattern, rp);
        char name[128];
        snprintf(name, sizeof(name), "%d rows x %d B, %d stages, %d token rows, group %d, "
                 "rot %d", rp->rows, rp->chunk, rp->stages, rp->tok_rows, rp->group, rp->rot);
        fprintf(ff, "| %s | %s | %.0f | %.3f | %.2f | %.2f |\n", s->name, name, mb, ms,
                mb / 1e6 / (ms * 1e-3), ms / all_ms);
        fprintf(stderr, "%-14s %-60s %.3f ms, %.2f TB/s, %.2fx stream\n", s->name, name,
                ms, mb / 1e6 / (ms * 1e-3), ms / all_ms);
      }
      cudaFree(b.sink);
      gt_moe_free(&b.g);
      continue;
    }
    for(ti = 0; ti < ntok; ti++) {
      const int T = tokens[ti];
      const size_t ybytes = (size_t)T * s->H * 2;
      uint16_t *y0 = malloc(ybytes), *y1 = malloc(ybytes);
      if(!y0 || !y1)
        return 1;
      b.T = T;
      b.nsets = T <= 128 ? 8 : 2;
      for(i = 0; i < b.nsets; i++) {
        if(balanced)
          gt_route_balanced(&b.g, T);
        else
          gt_route_random(&b.g, T);
        GT_CUDA(cudaMalloc((void **)&b.set[i].x, (size_t)T * s->H * 2));
        GT_CUDA(cudaMalloc((void **)&b.set[i].ids, (size_t)T * s->k * 4));
        GT_CUDA(cudaMalloc((void **)&b.set[i].wts, (size_t)T * s->k * 4));
        GT_CUDA(cudaMemcpy(b.set[i].x, b.g.x, (size_t)T * s->H * 2, cudaMemcpyDeviceToDevice));
        GT_CUDA(cudaMemcpy(b.set[i].ids, b.g.ids, (size_t)T * s->k * 4, cudaMemcpyDeviceToDevice));
        GT_CUDA(cudaMemcpy(b.set[i].wts, b.g.wts, (size_t)T * s->k * 4, cudaMemcpyDeviceToDevice));
        set_experts(&b, &b.set[i]);
      }
      if(with_floor) {
        /* the floor, measured */
        const hr__moe_hook none0 = { 0, HR__MOE_PHASE_ROUTE | HR__MOE_PHASE_GEMM1 |
                                        HR__MOE_PHASE_GEMM2 | HR__MOE_PHASE_COMBINE, 0, 0, NULL };
        hr__moe_hook none1 = none0, v0 = { 0, 0, 0, 0, NULL }, v1 = { 1, 0, 0, 0, NULL };
        double nexp = 0, mb;
        char spread[8 * 24];
        int sp_len = 0;
        const int two = 2, one = 1;
        float st, tb, ta, nb, na, nul, nl2, nl1;
        none1.agnostic = 1;
        for(i = 0; i < b.nsets; i++) {
          nexp += b.set[i].nexp;
          sp_len += snprintf(spread + sp_len, sizeof(spread) - (size_t)sp_len, "%s%d, %d",
                             i ? "; " : "", b.set[i].max_pairs, b.set[i].over80);
          if(sp_len >= (int)sizeof(spread))
            sp_len = (int)sizeof(spread) - 1;
        }
        nexp /= b.nsets;
        mb = nexp * 3 * s->H * s->I * 2 / 1e6;
        st = time_launches(&b, launch_stream, NULL);
        tb = time_hook(&b, &v0);
        ta = time_hook(&b, &v1);
        nb = time_hook(&b, &none0);
        na = time_hook(&b, &none1);
        nul = time_launches(&b, launch_null, NULL);
        nl2 = time_launches(&b, launch_null_like, &two);
        nl1 = time_launches(&b, launch_null_like, &one);
        fprintf(ff, "| %s | %d | %.1f | %s | %.0f | %.4f | %.2f | %.4f | %.4f | %.2f | %.2f | "
                    "%.4f | %.4f | %.4f | %.4f / %.4f |\n", s->name, T, nexp, spread, mb, st,
                mb / 1e6 / (st * 1e-3), tb, ta, tb / st, ta / st, nb, na, nul, nl2, nl1);
        fflush(ff);
        fprintf(stderr, "%-14s T=%-5d pairs per set: most, experts > 80: %s\n", s->name, T,
                spread);
        fprintf(stderr, "%-14s T=%-5d floor: stream %.4f ms (%.0f MB, %.2f TB/s); barrier "
                        "%.4f (%.2fx) agnostic %.4f (%.2fx); no phases %.4f / %.4f; "
                        "empty %.4f, launched alike %.4f / %.4f\n", s->name, T, st, mb,
                mb / 1e6 / (st * 1e-3), tb, tb / st, ta, ta / st, nb, na, nul, nl2, nl1);
      }
      for(kk = 0; kk < 2; kk++) {
        hr__moe_hook v = { kk, 0, 0, 0, NULL };
        const double flops = 2.0 * T * s->k * 3.0 * s->H * s->I;
        double max_abs;
        float t0, rep_ms[NPHASES], skip_ms[NPHASES];
        int same = 1;
        t0 = time_hook(&b, &v);
        y_of(&b, &v, y0);
        if(trace_prefix) {
          trace_to(&b, &v, trace_prefix, s->name, 0);
          trace_to(&b, &v, trace_prefix, s->name, 1);
        }
        for(ph = 0; ph < NPHASES && phases; ph++) {
          v.skip = 0;
          v.repeat = phase_bits[ph];
          rep_ms[ph] = time_hook(&b, &v);
          y_of(&b, &v, y1);
          same &= memcmp(y0, y1, ybytes) == 0;
          v.repeat = 0;
          v.skip = phase_bits[ph];
          skip_ms[ph] = time_hook(&b, &v);
        }
        if(phases) {
          fprintf(tf, "| %s | %d | %s | %.3f |", s->name, T, kk ? "agnostic" : "barrier", t0);
          for(ph = 0; ph < NPHASES; ph++)
            fprintf(tf, " %.3f | %.3f |", rep_ms[ph] - t0, t0 - skip_ms[ph]);
          fprintf(tf, " %s |\n", same ? "yes" : "NO");
          fflush(tf);
        }
        fprintf(stderr, "%-14s T=%-5d %-8s %8.3f ms", s->name, T,
                kk ? "agnostic" : "barrier", t0);
        for(ph = 0; ph < NPHASES && phases; ph++)      /* the row, in case of a cut */
          fprintf(stderr, "  %s +%.3f -%.3f", phase_names[ph], rep_ms[ph] - t0,
                  t0 - skip_ms[ph]);
        fprintf(stderr, "\n");
        memcpy(b.g.y_h, y0, ybytes);
        fprintf(vf, "| %s | %d | %s | default | %.3f | %.1f | vs CPU ref %.1e (%zu non-finite) |\n",
                s->name, T, kk ? "agnostic" : "barrier", t0, flops / (t0 * 1e-3) / 1e12,
                gt_check_sampled(&b.g, s->sample, &max_abs), gt_count_nonfinite(&b.g));
        fflush(vf);
      }
      for(i = 0; i < b.nsets; i++) {
        cudaFree(b.set[i].x);
        cudaFree(b.set[i].ids);
        cudaFree(b.set[i].wts);
        cudaFree(b.set[i].experts);
      }
      free(y0);
      free(y1);
    }
    cudaFree(b.sink);
    gt_moe_free(&b.g);
  }
  fclose(tf);
  fclose(vf);
  fclose(ff);
  fputs(table, stdout);
  fputs(ftable, stdout);
  fputs(vtable, stdout);
  if(out_path) {
    FILE *f = fopen(out_path, "w");
    if(!f || fputs(table, f) < 0 || fputs(ftable, f) < 0 || fputs(vtable, f) < 0 ||
       fclose(f) != 0) {
      fprintf(stderr, "FAIL: cannot write %s\n", out_path);
      return 1;
    }
  }
  free(table);
  free(vtable);
  free(ftable);
  return 0;
}
