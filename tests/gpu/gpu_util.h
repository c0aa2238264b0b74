/*
 * gpu_util.h: shared pieces of the mega-MoE GPU tests: the skip rule,
 * checked CUDA calls, test data on the device, and the comparison with the
 * CPU reference (kernels/moe_ref.c) on a sample of tokens.
 *
 * Error bound, used by every correctness check: over the sampled tokens,
 * ||y - y_ref|| / ||y_ref|| < GT_REL_L2_BOUND (1e-2, bf16 operands, fp32
 * accumulation; the reference rounds where the kernel rounds, so what is
 * left is fp32 summation order and the bf16 flips it causes, about 1e-3),
 * and no output element anywhere is NaN or Inf: y is poisoned with NaN
 * before each launch, so an element never written fails.
 */
#ifndef HR_GPU_UTIL_H
#define HR_GPU_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/types.h>

#include "headroom.h"
#include "headroom_moe.h"

#ifdef __cplusplus
extern "C" {
#endif

#define GT_REL_L2_BOUND 1e-2

/* Failures so far; a test exits 1 when any. */
extern int gt_failures;

#define GT_EXPECT(cond, ...)                                                   \
  do {                                                                         \
    if(!(cond)) {                                                              \
      fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);          \
      fprintf(stderr, __VA_ARGS__);                                            \
      fputc('\n', stderr);                                                     \
      gt_failures++;                                                           \
    }                                                                          \
  } while(0)

/* A CUDA runtime call that must work; exits 1 otherwise. */
#define GT_CUDA(call) gt_cuda_check((int)(call), #call, __FILE__, __LINE__)
void gt_cuda_check(int err, const char *what, const char *file, int line);

/* Exit 77 with "SKIP: name: WHAT" where there is no usable GPU, WHAT
 * naming which is missing: the driver, a device, or the GPU model
 * (gpu_probe.h), after checking that hr_moe_create says HR_ENOGPU there (a
 * library that crashes or says anything else without a GPU fails). */
void gt_require_gpu(const char *name);

/* Seeded from HR_TEST_SEED or the clock, printed so a run can be repeated. */
void gt_seed(const char *name);
uint64_t gt_rand(void);
float gt_uniform(float lo, float hi);

double gt_now_ms(void);
void gt_sleep_ms(int ms);

/* Exits the test: 0 when nothing failed. */
int gt_finish(const char *name);

/* ---- MoE test data ----------------------------------------------------- */

typedef struct gt_shape {
  const char *name;
  int E, H, I, k;
  int sample;     /* tokens checked against the CPU reference per case */
} gt_shape;

enum { GT_SMALL, GT_QWEN3, GT_DSV3, GT_NSHAPES };
extern const gt_shape gt_shapes[GT_NSHAPES];

typedef struct gt_moe {
  gt_shape s;
  int max_T, T;
  hr_moe *m;
  void *stream;          /* a non-blocking stream of its own */
  /* device */
  uint16_t *w1, *w2, *x, *y;
  int32_t *ids;
  float *wts;
  /* host copies of the current inputs and last output */
  uint16_t *x_h, *y_h;
  int32_t *ids_h;
  float *wts_h;
  float last_ms;         /* kernel time of the last gt_run, from events */
} gt_moe;

/* Context on `device`, buffers for max_T tokens, fresh random weights (on
 * the GPU): 0, or -1 with the reason in why (what was made is left for
 * gt_moe_free, which g->m != NULL says is needed). */
int gt_moe_init_on(gt_moe *g, int device, const gt_shape *s, int max_T,
                   char *why, size_t n);
/* The same on device 0; on failure says so and exits. */
void gt_moe_init(gt_moe *g, const gt_shape *s, int max_T);
void gt_moe_free(gt_moe *g);

/* Inputs for T tokens, x uniform in [-1, 1), weights in [0.05, 1):
 *   random:   k distinct experts per token, uniformly
 *   subset:   only experts e with e % stride == 0 receive tokens
 *   one:      every slot of every token goes to expert e
 *   balanced: slot j of token t to expert (t k + j) mod E: every expert
 *             gets T k / E pairs (one more for the first T k mod E), so
 *             no expert has a part-filled last tile beyond the remainder
 * then uploaded. */
void gt_route_random(gt_moe *g, int T);
void gt_route_balanced(gt_moe *g, int T);
void gt_route_subset(gt_moe *g, int T, int stride);
void gt_route_one(gt_moe *g, int T, int e);

/* Fill all of expert e's weights with NaN: a kernel that reads them
 * poisons y. */
void gt_poison_expert(gt_moe *g, int e);

hr_moe_args gt_args(const gt_moe *g, int timeout_ms);

/* Poison y, launch with hr_moe_forward_grid (mode HR_MODE_AGNOSTIC:
 * hr_moe_forward_agnostic_grid, cluster unused) on g's stream, hr_moe_sync,
 * copy y back to y_h; g->last_ms from events around the launch. Returns
 * hr_moe_sync's (or the launch's) code. */
int gt_run(gt_moe *g, int grid, hr_mode mode, int cluster, int timeout_ms);
/* The same with any launch: `launch` starts one forward of args on
 * g->stream (ctx is its own) and returns its code. */
typedef int (*gt_launch_fn)(gt_moe *g, const hr_moe_args *args, void *ctx);
int gt_run_with(gt_moe *g, gt_launch_fn launch, void *ctx, int timeout_ms);

/* Number of non-finite elements of y_h (T x H). */
size_t gt_count_nonfinite(const gt_moe *g);

/* Relative L2 error of y_h against the CPU reference on `n` sampled tokens
 * (the first, the last and random others; all when T <= n); *max_abs gets
 * the largest absolute difference. */
double gt_check_sampled(const gt_moe *g, int n, double *max_abs);

/* The whole correctness check of the last run: every element written,
 * sampled error under the bound. Prints one line; counts failures. */
void gt_expect_correct(const gt_moe *g, const char *what);

/* ---- tests/gpu/gpu_kernels.cu ------------------------------------------ */
int gt_hog_launch(int ctas, int ms, void *stream, unsigned *started);
int gt_fill_bf16(void *p, size_t n, uint64_t seed, float scale, void *stream);
/* One CTA spinning for `ms` on `stream`: a head start for the host before
 * timed launches (the benchmarks). */
int gt_spin_launch(int ms, void *stream);
/* Read W1 and W2 of experts[0..n) once (device array; w1_bytes, w2_bytes
 * per expert, multiples of 8 KB) with two CTAs per SM: the floor of any
 * kernel that must read them. sink: a device word, written only by chance. */
int gt_stream_launch(const void *w1, const void *w2, const int *experts, int n,
                     size_t w1_bytes, size_t w2_bytes, int sms, unsigned *sink,
                     void *stream);
/* A GEMM tile's access pattern, for gt_tile_stream_launch: rows of
 * weights a unit, chunk bytes of each row a step, stages cp.async slots
 * (stages - 1 steps in flight), tok_rows token rows beside each step;
 * group: 0, neighbouring units read nearly the same token rows at once, or
 * g, every g neighbouring units share one token tile; rot: 0, or unit u
 * starts along K at step (u mod 16) * rot. (rows, chunk, stages): (128,
 * 128, 7 or 13), (128, 256, 3 or 4), (256, 128, 4 or 6). */
typedef struct gt_tile_pattern {
  int rows, chunk, stages, tok_rows, group, rot;
} gt_tile_pattern;

/* Read `rows` rows of K bf16 (a multiple of tp->rows) as a GEMM tile
 * does, the units dealt round-robin over `sms` CTAs of one per SM, the
 * token rows from `tok` (ntok rows of K); no math. */
int gt_tile_stream_launch(const void *w, size_t rows, int K, const void *tok,
                          const gt_tile_pattern *tp, int ntok, int sms, unsigned *sink,
                          void *stream);
/* An empty kernel (<<<1, 32>>>); one launched like the MoE kernels:
 * grid x threads, smem bytes of dynamic shared memory, clusters of
 * `cluster` (1: none). */
int gt_null_launch(void *stream);
int gt_null_like_launch(int grid, int threads, int smem, int cluster, void *stream);

/* A hog on its own stream that holds `ctas` SMs for `ms`; returns once
 * every hog CTA runs. */
typedef struct gt_hog {
  void *stream;
  unsigned *started;      /* host-mapped, one word per CTA */
  void *end_event;        /* recorded after the hog, with timing */
  int ctas;
} gt_hog;

void gt_hog_start(gt_hog *h, int ctas, int ms);
void gt_hog_wait(gt_hog *h);    /* until it has ended */
void gt_hog_free(gt_hog *h);

/* headroomd on a temporary socket, for the tests that take a lease. */
typedef struct gt_daemon {
  pid_t pid;
  char sock[600];
} gt_daemon;

#define GT_DAEMON_INIT { -1, "" }

/* Start `bin` in dir (with a config file of `conf`, when not NULL); 0 when
 * it answers within 5 s. */
int gt_daemon_start(gt_daemon *d, const char *bin, const char *dir,
                    const char *conf);
/* SIGTERM and reap; nothing when it never started. */
void gt_daemon_stop(gt_daemon *d);
/* The daemon a lease test runs: $HEADROOMD, else build/bin/headroomd. */
const char *gt_daemon_bin(void);
/* `bin` started in dir without a config, when it is there and starts: 1.
 * Otherwise 0, d->sock a socket nobody serves and DG_MEGA_MOE_SM_HEADROOM
 * unset, so that the test's lease is the degraded default. Prints which. */
int gt_daemon_start_or_degrade(gt_daemon *d, const char *bin,
                               const char *dir);
/* What a lease test starts from: dir (a mkdtemp template) made, `bin` in
 * it or the degraded default (gt_daemon_start_or_degrade, whose answer it
 * returns) and a quiet client of it in *client (a failed open counts as a
 * failed check). -1, having said why, when dir could not be made. */
int gt_lease_setup(gt_daemon *d, const char *bin, char *dir,
                   hr_client **client);
/* Close the client, stop the daemon, remove dir. */
void gt_lease_teardown(gt_daemon *d, const char *dir, hr_client *client);

#ifdef __cplusplus
}
#endif

#endif /* HR_GPU_UTIL_H */
