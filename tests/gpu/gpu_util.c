/*
 * gpu_util.c: see gpu_util.h.
 */
#include "gpu_util.h"
#include "gpu_probe.h"
#include "hr_clock.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cuda_runtime.h>

#include "moe_ref.h"

int gt_failures;

/* name, E, H, I, k, tokens sampled per check. The CPU reference costs
 * 2 * k * 3 * H * I flops per token: all tokens of the small shape, a few
 * dozen of Qwen3's, eight of DeepSeek-V3's (0.7 GFLOP each). */
const gt_shape gt_shapes[GT_NSHAPES] = {
  { "small", 8, 256, 512, 2, 256 },
  { "qwen3-30b-a3b", 128, 2048, 768, 8, 32 },
  { "deepseek-v3", 256, 7168, 2048, 8, 8 },
};

void gt_cuda_check(int err, const char *what, const char *file, int line)
{
  if(err == 0)
    return;
  fprintf(stderr, "FAIL %s:%d: %s: %s\n", file, line, what,
          cudaGetErrorString((cudaError_t)err));
  exit(1);
}

void gt_require_gpu(const char *name)
{
  struct cudaDeviceProp prop;
  int n = 0;
  cudaError_t e;
  /* A line at a time, also into a log file: a test stopped for running
   * too long (tests/run_tests.sh) still shows how far it got. */
  setvbuf(stdout, NULL, _IOLBF, 0);
  e = cudaGetDeviceCount(&n);
  if(e != cudaSuccess || n == 0) {
    char why[256];
    int seen;
    hr_moe_shape s = { 8, 256, 512, 2, 16 };
    hr_moe *m = NULL;
    int rc = hr_moe_create(&m, -1, &s);
    if(rc != HR_ENOGPU) {
      fprintf(stderr, "FAIL: %s: no CUDA device, but hr_moe_create said %d (%s), "
              "not HR_ENOGPU\n", name, rc, hr_strerror(rc));
      exit(1);
    }
    /* The driver's own answer says which is missing; the runtime's
     * error is kept for the case the driver sees a device it does not. */
    if(gt_probe_cuda(why, sizeof(why), &seen))
      printf("SKIP: %s: %s\n", name, why);
    else
      printf("SKIP: %s: the driver sees %d device%s, the CUDA runtime "
             "none (%s)\n", name, seen, seen == 1 ? "" : "s",
             e != cudaSuccess ? cudaGetErrorString(e) : "no device found");
    exit(77);
  }
  GT_CUDA(cudaGetDeviceProperties(&prop, 0));
  if(prop.major != 9 || prop.minor != 0) {
    printf("SKIP: %s: wrong GPU model: the kernel needs sm_90 (H100, H200),"
           " GPU 0 is %s, sm_%d%d\n", name, prop.name, prop.major,
           prop.minor);
    exit(77);
  }
  printf("%s: %s, %d SMs\n", name, prop.name, prop.multiProcessorCount);
}

/* ---- random numbers and time ------------------------------------------ */

static uint64_t rng_state = 1;

void gt_seed(const char *name)
{
  const char *env = getenv("HR_TEST_SEED");
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  rng_state = env ? strtoull(env, NULL, 0)
                  : ((uint64_t)ts.tv_sec << 30) ^ (uint64_t)ts.tv_nsec ^
                        ((uint64_t)getpid() << 16);
  if(!rng_state)
    rng_state = 1;
  printf("%s: seed %llu (HR_TEST_SEED=%llu repeats this run)\n", name,
         (unsigned long long)rng_state, (unsigned long long)rng_state);
}

uint64_t gt_rand(void)
{
  rng_state ^= rng_state >> 12;
  rng_state ^= rng_state << 25;
  rng_state ^= rng_state >> 27;
  return rng_state * 0x2545F4914F6CDD1DULL;
}

float gt_uniform(float lo, float hi)
{
  return lo + (hi - lo) * (float)((gt_rand() >> 40) * (1.0 / 16777216.0));
}

double gt_now_ms(void)
{
  return hr__clock_ns() / 1e6;
}

void gt_sleep_ms(int ms)
{
  struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
  while(nanosleep(&ts, &ts) == -1 && errno == EINTR)
    ;
}

int gt_finish(const char *name)
{
  if(gt_failures) {
    printf("%s: %d check(s) failed\n", name, gt_failures);
    return 1;
  }
  printf("%s: all checks passed\n", name);
  return 0;
}

/* ---- test data --------------------------------------------------------- */

int gt_moe_init_on(gt_moe *g, int device, const gt_shape *s, int max_T,
                   char *why, size_t n)
{
  hr_moe_shape ms;
  size_t w1n = (size_t)s->E * 2 * s->I * s->H, w2n = (size_t)s->E * s->H * s->I;
  int rc;

  memset(g, 0, sizeof(*g));
  g->s = *s;
  g->max_T = max_T;
  ms.experts = s->E;
  ms.hidden = s->H;
  ms.inter = s->I;
  ms.topk = s->k;
  ms.max_tokens = max_T;
  rc = hr_moe_create(&g->m, device, &ms);
  if(rc) {
    snprintf(why, n, "hr_moe_create(%s): %s", s->name, hr_strerror(rc));
    return -1;
  }
  g->x_h = malloc((size_t)max_T * s->H * 2);
  g->y_h = malloc((size_t)max_T * s->H * 2);
  g->ids_h = malloc((size_t)max_T * s->k * 4);
  g->wts_h = malloc((size_t)max_T * s->k * 4);
  if(!g->x_h || !g->y_h || !g->ids_h || !g->wts_h) {
    snprintf(why, n, "out of host memory");
    return -1;
  }
  /* Weights scaled so that gate, up and outputs stay near 1. */
  if(cudaStreamCreateWithFlags((cudaStream_t *)&g->stream,
                               cudaStreamNonBlocking) != cudaSuccess ||
     cudaMalloc((void **)&g->w1, w1n * 2) != cudaSuccess ||
     cudaMalloc((void **)&g->w2, w2n * 2) != cudaSuccess ||
     cudaMalloc((void **)&g->x, (size_t)max_T * s->H * 2) != cudaSuccess ||
     cudaMalloc((void **)&g->y, (size_t)max_T * s->H * 2) != cudaSuccess ||
     cudaMalloc((void **)&g->ids, (size_t)max_T * s->k * 4) != cudaSuccess ||
     cudaMalloc((void **)&g->wts, (size_t)max_T * s->k * 4) != cudaSuccess ||
     gt_fill_bf16(g->w1, w1n, gt_rand(), 1.0f / sqrtf((float)s->H), g->stream) ||
     gt_fill_bf16(g->w2, w2n, gt_rand(), 1.0f / sqrtf((float)s->I), g->stream) ||
     cudaStreamSynchronize((cudaStream_t)g->stream) != cudaSuccess) {
    snprintf(why, n, "MoE buffers: %s", cudaGetErrorString(cudaGetLastError()));
    return -1;
  }
  return 0;
}

void gt_moe_init(gt_moe *g, const gt_shape *s, int max_T)
{
  char why[256];

  if(gt_moe_init_on(g, 0, s, max_T, why, sizeof(why))) {
    fprintf(stderr, "FAIL: %s\n", why);
    exit(1);
  }
}

void gt_moe_free(gt_moe *g)
{
  hr_moe_destroy(g->m);
  cudaFree(g->w1);
  cudaFree(g->w2);
  cudaFree(g->x);
  cudaFree(g->y);
  cudaFree(g->ids);
  cudaFree(g->wts);
  cudaStreamDestroy((cudaStream_t)g->stream);
  free(g->x_h);
  free(g->y_h);
  free(g->ids_h);
  free(g->wts_h);
  memset(g, 0, sizeof(*g));
}

static void upload(gt_moe *g)
{
  const int T = g->T, H = g->s.H, k = g->s.k;
  cudaStream_t st = (cudaStream_t)g->stream;
  GT_CUDA(cudaMemcpyAsync(g->x, g->x_h, (size_t)T * H * 2, cudaMemcpyHostToDevice, st));
  GT_CUDA(cudaMemcpyAsync(g->ids, g->ids_h, (size_t)T * k * 4, cudaMemcpyHostToDevice, st));
  GT_CUDA(cudaMemcpyAsync(g->wts, g->wts_h, (size_t)T * k * 4, cudaMemcpyHostToDevice, st));
  GT_CUDA(cudaStreamSynchronize(st));
}

static void fresh_x_and_weights(gt_moe *g, int T)
{
  size_t i;
  if(T > g->max_T) {
    fprintf(stderr, "FAIL: T %d > max %d\n", T, g->max_T);
    exit(1);
  }
  g->T = T;
  for(i = 0; i < (size_t)T * g->s.H; i++)
    g->x_h[i] = hr_moe_float_to_bf16(gt_uniform(-1.0f, 1.0f));
  for(i = 0; i < (size_t)T * g->s.k; i++)
    g->wts_h[i] = gt_uniform(0.05f, 1.0f);
}

/* k distinct experts among those with e % stride == 0 (if there are k). */
static void route_distinct(gt_moe *g, int T, int stride)
{
  const int k = g->s.k, pool = (g->s.E + stride - 1) / stride;
  int t, j, i;
  fresh_x_and_weights(g, T);
  for(t = 0; t < T; t++) {
    for(j = 0; j < k; j++) {
      int e, again;
      do {
        e = (int)(gt_rand() % (uint64_t)pool) * stride;
        again = 0;
        for(i = 0; i < j && pool >= k; i++)
          again |= g->ids_h[(size_t)t * k + i] == e;
      } while(again);
      g->ids_h[(size_t)t * k + j] = e;
    }
  }
  upload(g);
}

void gt_route_random(gt_moe *g, int T)
{
  route_distinct(g, T, 1);
}

void gt_route_subset(gt_moe *g, int T, int stride)
{
  route_distinct(g, T, stride);
}

void gt_route_balanced(gt_moe *g, int T)
{
  size_t i;
  fresh_x_and_weights(g, T);
  for(i = 0; i < (size_t)T * g->s.k; i++)
    g->ids_h[i] = (int)(i % (size_t)g->s.E);
  upload(g);
}

void gt_route_one(gt_moe *g, int T, int e)
{
  size_t i;
  fresh_x_and_weights(g, T);
  for(i = 0; i < (size_t)T * g->s.k; i++)
    g->ids_h[i] = e;
  upload(g);
}

void gt_poison_expert(gt_moe *g, int e)
{
  const size_t w1n = (size_t)2 * g->s.I * g->s.H, w2n = (size_t)g->s.H * g->s.I;
  GT_CUDA(cudaMemset(g->w1 + (size_t)e * w1n, 0xff, w1n * 2));
  GT_CUDA(cudaMemset(g->w2 + (size_t)e * w2n, 0xff, w2n * 2));
}

hr_moe_args gt_args(const gt_moe *g, int timeout_ms)
{
  hr_moe_args a;
  memset(&a, 0, sizeof(a));
  a.tokens = g->T;
  a.experts = g->s.E;
  a.hidden = g->s.H;
  a.inter = g->s.I;
  a.topk = g->s.k;
  a.x = g->x;
  a.topk_ids = g->ids;
  a.topk_weights = g->wts;
  a.w1 = g->w1;
  a.w2 = g->w2;
  a.y = g->y;
  a.timeout_ms = timeout_ms;
  return a;
}

/* gt_run's launch: the public entry points. */
typedef struct gt_run_ctx {
  int grid, cluster;
  hr_mode mode;
} gt_run_ctx;

static int gt_launch_public(gt_moe *g, const hr_moe_args *a, void *ctx)
{
  const gt_run_ctx *c = (const gt_run_ctx *)ctx;
  /* The agnostic kernel through its own entry point, so that its tests
   * time and check the call an application makes. */
  if(c->mode == HR_MODE_AGNOSTIC)
    return hr_moe_forward_agnostic_grid(g->m, c->grid, a, g->stream);
  return hr_moe_forward_grid(g->m, c->grid, c->mode, c->cluster, a, g->stream);
}

int gt_run_with(gt_moe *g, gt_launch_fn launch, void *ctx, int timeout_ms)
{
  cudaStream_t st = (cudaStream_t)g->stream;
  cudaEvent_t e0, e1;
  hr_moe_args a = gt_args(g, timeout_ms);
  int rc;

  GT_CUDA(cudaEventCreate(&e0));
  GT_CUDA(cudaEventCreate(&e1));
  GT_CUDA(cudaMemsetAsync(g->y, 0xff, (size_t)g->T * g->s.H * 2, st));  /* NaN */
  GT_CUDA(cudaEventRecord(e0, st));
  rc = launch(g, &a, ctx);
  if(rc == 0) {
    GT_CUDA(cudaEventRecord(e1, st));
    rc = hr_moe_sync(g->m);
  }
  if(rc == 0) {
    GT_CUDA(cudaEventSynchronize(e1));
    GT_CUDA(cudaEventElapsedTime(&g->last_ms, e0, e1));
  }
  GT_CUDA(cudaMemcpyAsync(g->y_h, g->y, (size_t)g->T * g->s.H * 2,
                          cudaMemcpyDeviceToHost, st));
  GT_CUDA(cudaStreamSynchronize(st));
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  return rc;
}

int gt_run(gt_moe *g, int grid, hr_mode mode, int cluster, int timeout_ms)
{
  gt_run_ctx c;
  c.grid = grid;
  c.cluster = cluster;
  c.mode = mode;
  return gt_run_with(g, gt_launch_public, &c, timeout_ms);
}

size_t gt_count_nonfinite(const gt_moe *g)
{
  size_t i, bad = 0;
  for(i = 0; i < (size_t)g->T * g->s.H; i++)
    bad += !isfinite(hr_moe_bf16_to_float(g->y_h[i]));
  return bad;
}

/* ---- the sampled CPU reference ----------------------------------------- */

typedef struct ref_job {
  hr_moe_ref_problem p;
  uint16_t *y;
  int rc;
} ref_job;

static void *ref_thread(void *arg)
{
  ref_job *j = arg;
  j->rc = hr_moe_ref_forward(&j->p, j->y);
  return NULL;
}

double gt_check_sampled(const gt_moe *g, int n, double *max_abs)
{
  const int T = g->T, E = g->s.E, H = g->s.H, I = g->s.I, k = g->s.k;
  const size_t w1n = (size_t)2 * I * H, w2n = (size_t)H * I;
  int *tok = NULL, *local = NULL, nex = 0, i, j, nth;
  char *picked = NULL;
  uint16_t *w1c = NULL, *w2c = NULL, *xc = NULL, *yc = NULL;
  int32_t *idc = NULL;
  float *wc = NULL;
  ref_job jobs[16];
  pthread_t th[16];
  int running[16];
  double num = 0, den = 0, mx = 0, rel = INFINITY;
  long ncpu = sysconf(_SC_NPROCESSORS_ONLN);

  if(n > T)
    n = T;
  tok = malloc(sizeof(int) * n);
  picked = calloc((size_t)T, 1);
  local = malloc(sizeof(int) * E);
  if(!tok || !picked || !local)
    goto out;
  /* The first and last tokens (edges of the token tiles), then random. */
  for(i = 0; i < n; i++) {
    int t = i == 0 ? 0 : i == 1 ? T - 1 : (int)(gt_rand() % (uint64_t)T);
    if(n == T)
      t = i;
    while(picked[t])
      t = (t + 1) % T;
    picked[t] = 1;
    tok[i] = t;
  }
  for(i = 0; i < E; i++)
    local[i] = -1;
  for(i = 0; i < n; i++)
    for(j = 0; j < k; j++) {
      int e = g->ids_h[(size_t)tok[i] * k + j];
      if(e >= 0 && e < E && local[e] < 0)
        local[e] = nex++;
    }

  /* A problem of the sampled tokens alone, with their experts' weights
   * copied back from the GPU: tokens are independent, so its answer is the
   * big problem's answer for these rows. */
  w1c = malloc(w1n * 2 * (nex ? nex : 1));
  w2c = malloc(w2n * 2 * (nex ? nex : 1));
  xc = malloc((size_t)n * H * 2);
  yc = malloc((size_t)n * H * 2);
  idc = malloc((size_t)n * k * 4);
  wc = malloc((size_t)n * k * 4);
  if(!w1c || !w2c || !xc || !yc || !idc || !wc)
    goto out;
  for(i = 0; i < E; i++) {
    if(local[i] < 0)
      continue;
    GT_CUDA(cudaMemcpy(w1c + (size_t)local[i] * w1n, g->w1 + (size_t)i * w1n,
                       w1n * 2, cudaMemcpyDeviceToHost));
    GT_CUDA(cudaMemcpy(w2c + (size_t)local[i] * w2n, g->w2 + (size_t)i * w2n,
                       w2n * 2, cudaMemcpyDeviceToHost));
  }
  for(i = 0; i < n; i++) {
    memcpy(xc + (size_t)i * H, g->x_h + (size_t)tok[i] * H, (size_t)H * 2);
    for(j = 0; j < k; j++) {
      int e = g->ids_h[(size_t)tok[i] * k + j];
      idc[(size_t)i * k + j] = (e >= 0 && e < E) ? local[e] : -1;
      wc[(size_t)i * k + j] = g->wts_h[(size_t)tok[i] * k + j];
    }
  }

  nth = (int)(ncpu < 1 ? 1 : ncpu > 16 ? 16 : ncpu);
  if(nth > n)
    nth = n;
  for(i = 0; i < nth; i++) {
    int a = (int)((long)n * i / nth), b = (int)((long)n * (i + 1) / nth);
    ref_job *jb = &jobs[i];
    jb->p.tokens = b - a;
    jb->p.experts = nex ? nex : 1;
    jb->p.hidden = H;
    jb->p.inter = I;
    jb->p.topk = k;
    jb->p.x = xc + (size_t)a * H;
    jb->p.topk_ids = idc + (size_t)a * k;
    jb->p.topk_weights = wc + (size_t)a * k;
    jb->p.w1 = w1c;
    jb->p.w2 = w2c;
    jb->y = yc + (size_t)a * H;
    jb->rc = -1;
    running[i] = pthread_create(&th[i], NULL, ref_thread, jb) == 0;
    if(!running[i])
      ref_thread(jb);                  /* no thread: do it here */
  }
  for(i = 0; i < nth; i++) {
    if(running[i])
      pthread_join(th[i], NULL);
    if(jobs[i].rc != 0)
      goto out;
  }

  for(i = 0; i < n; i++) {
    for(j = 0; j < H; j++) {
      double v = hr_moe_bf16_to_float(g->y_h[(size_t)tok[i] * H + j]);
      double r = hr_moe_bf16_to_float(yc[(size_t)i * H + j]);
      if(!isfinite(v))
        goto out;                                  /* rel stays +inf */
      num += (v - r) * (v - r);
      den += r * r;
      if(fabs(v - r) > mx)
        mx = fabs(v - r);
    }
  }
  rel = den > 0 ? sqrt(num / den) : sqrt(num);

out:
  if(max_abs)
    *max_abs = mx;
  free(tok);
  free(picked);
  free(local);
  free(w1c);
  free(w2c);
  free(xc);
  free(yc);
  free(idc);
  free(wc);
  return rel;
}

void gt_expect_correct(const gt_moe *g, const char *what)
{
  size_t bad = gt_count_nonfinite(g);
  double mx = 0, rel = gt_check_sampled(g, g->s.sample, &mx);
  int n = g->s.sample < g->T ? g->s.sample : g->T;
  printf("  %-14s %-22s T=%-5d rel L2 %.2e (bound %.0e) max|diff| %.3g over "
         "%d tokens; %zu unwritten; %.3f ms\n", g->s.name, what, g->T, rel,
         GT_REL_L2_BOUND, mx, n, bad, g->last_ms);
  GT_EXPECT(bad == 0, "%s %s T=%d: %zu elements of y not written or not finite",
            g->s.name, what, g->T, bad);
  GT_EXPECT(rel < GT_REL_L2_BOUND, "%s %s T=%d: rel L2 %.3g", g->s.name, what,
            g->T, rel);
}

/* ---- the hog ----------------------------------------------------------- */

void gt_hog_start(gt_hog *h, int ctas, int ms)
{
  unsigned *dev;
  double t0;
  int i, n;
  memset(h, 0, sizeof(*h));
  h->ctas = ctas;
  GT_CUDA(cudaHostAlloc((void **)&h->started, sizeof(unsigned) * ctas,
                        cudaHostAllocMapped));
  memset(h->started, 0, sizeof(unsigned) * ctas);
  GT_CUDA(cudaHostGetDevicePointer((void **)&dev, h->started, 0));
  GT_CUDA(cudaStreamCreateWithFlags((cudaStream_t *)&h->stream,
                                    cudaStreamNonBlocking));
  GT_CUDA(cudaEventCreate((cudaEvent_t *)&h->end_event));
  GT_CUDA(gt_hog_launch(ctas, ms, h->stream, dev));
  GT_CUDA(cudaEventRecord((cudaEvent_t)h->end_event, (cudaStream_t)h->stream));
  t0 = gt_now_ms();
  do {
    for(n = 0, i = 0; i < ctas; i++)
      n += ((volatile unsigned *)h->started)[i] != 0;
    if(n == ctas)
      return;
  } while(gt_now_ms() - t0 < 5000);
  fprintf(stderr, "FAIL: only %d of %d hog CTAs started in 5 s\n", n, ctas);
  exit(1);
}

void gt_hog_wait(gt_hog *h)
{
  GT_CUDA(cudaStreamSynchronize((cudaStream_t)h->stream));
}

void gt_hog_free(gt_hog *h)
{
  cudaStreamSynchronize((cudaStream_t)h->stream);
  cudaEventDestroy((cudaEvent_t)h->end_event);
  cudaStreamDestroy((cudaStream_t)h->stream);
  cudaFreeHost(h->started);
  memset(h, 0, sizeof(*h));
}

/* ---- headroomd on a temporary socket ------------------------------------ */

int gt_daemon_start(gt_daemon *d, const char *bin, const char *dir,
                    const char *conf)
{
  char state[600], cfg[600];
  hr_client *c = NULL;
  hr_client_options o;
  double t0;

  snprintf(d->sock, sizeof(d->sock), "%s/headroom.sock", dir);
  snprintf(state, sizeof(state), "%s/state", dir);
  snprintf(cfg, sizeof(cfg), "%s/headroomd.conf", dir);
  mkdir(state, 0700);
  if(conf) {
    FILE *f = fopen(cfg, "w");
    if(!f)
      return -1;
    fputs(conf, f);
    fclose(f);
  }
  d->pid = fork();
  if(d->pid < 0)
    return -1;
  if(d->pid == 0) {
    if(conf)
      execl(bin, bin, "--config", cfg, "--socket", d->sock, "--state-dir",
            state, (char *)NULL);
    else
      execl(bin, bin, "--socket", d->sock, "--state-dir", state, (char *)NULL);
    _exit(127);
  }
  memset(&o, 0, sizeof(o));
  o.quiet = 1;
  t0 = gt_now_ms();
  while(gt_now_ms() - t0 < 5000) {
    if(access(d->sock, F_OK) == 0 && hr_client_open(&c, d->sock, &o) == HR_OK) {
      int up = hr_client_connected(c);
      hr_client_close(c);
      if(up)
        return 0;
    }
    gt_sleep_ms(50);
  }
  return -1;
}

void gt_daemon_stop(gt_daemon *d)
{
  int st;
  if(d->pid <= 0)
    return;
  kill(d->pid, SIGTERM);
  waitpid(d->pid, &st, 0);
  d->pid = -1;
}

const char *gt_daemon_bin(void)
{
  const char *bin = getenv("HEADROOMD");
  return bin ? bin : "build/bin/headroomd";
}

int gt_daemon_start_or_degrade(gt_daemon *d, const char *bin, const char *dir)
{
  int with_daemon;

  with_daemon = access(bin, X_OK) == 0 && gt_daemon_start(d, bin, dir, NULL) == 0;
  if(!with_daemon) {
    gt_daemon_stop(d);
    snprintf(d->sock, sizeof(d->sock), "%s/nobody-listens.sock", dir);
    unsetenv("DG_MEGA_MOE_SM_HEADROOM");
  }
  printf("  %s\n", with_daemon ? "lease from headroomd on a temporary socket"
                               : "degraded lease (no headroomd)");
  return with_daemon;
}

int gt_lease_setup(gt_daemon *d, const char *bin, char *dir,
                   hr_client **client)
{
  hr_client_options o;
  int with_daemon, rc;

  if(!mkdtemp(dir)) {
    fprintf(stderr, "FAIL: mkdtemp: %s\n", strerror(errno));
    return -1;
  }
  with_daemon = gt_daemon_start_or_degrade(d, bin, dir);
  memset(&o, 0, sizeof(o));
  o.quiet = 1;
  rc = hr_client_open(client, d->sock, &o);
  GT_EXPECT(rc == HR_OK, "hr_client_open: %s", hr_strerror(rc));
  return with_daemon;
}

void gt_lease_teardown(gt_daemon *d, const char *dir, hr_client *client)
{
  char cmd[700];

  hr_client_close(client);
  gt_daemon_stop(d);
  snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
  if(system(cmd) != 0)
    fprintf(stderr, "could not remove %s\n", dir);
}
