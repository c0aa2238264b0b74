/*
 * test_moe_backward.c: the mega-MoE backward (hr_moe_backward_grid)
 * against the CPU reference hr_moe_ref_backward (kernels/moe_ref.h).
 *
 *  1. correctness: the small, Qwen3-30B-A3B and DeepSeek-V3 shapes with
 *     random routing at several T, experts without tokens (their weights
 *     NaN: a kernel that reads them fails; their dW must be exactly 0),
 *     every slot to one expert, and ids outside [0, E) (their d(w)
 *     exactly 0, no contribution). Each input set runs the barrier kernel
 *     with dW in fp32 and in bf16 and the agnostic kernel with fp32, each
 *     against one reference: relative L2 error under GT_REL_L2_BOUND for
 *     dx, dW1, dW2 and d(w) (bf16 dW against bf16 of the reference's fp32
 *     sums), and every output element written and finite (all are NaN
 *     before each launch).
 *  2. grids: the same inputs on grids 1, 2, 7, 33 and SMs, in both
 *     kernels, with fp32 and bf16 dW (and the cooperative launch): dx,
 *     dW1, dW2 and d(w) bitwise the same as the full grid's; and bf16 dW
 *     bitwise bf16(fp32 dW), dx and d(w) the same bytes with either.
 *  3. timeout: a hog holds 4 SMs; the barrier backward on the full grid
 *     returns HR_EBARRIER_TIMEOUT about TIMEOUT after launch with barrier
 *     20..22 in the failure detail; the next launch gives the same
 *     results. hr_moe_abort: HR_EABORTED promptly. The agnostic backward
 *     beside hogs of 16 and all SMs completes with the same results.
 *  4. bad arguments: HR_EINVAL and nothing launched (outputs keep their
 *     poison).
 *  5. forward and backward interleaved on one context, with and without
 *     host waits between them: each gives the same bytes as alone.
 *
 * The reference on a sample. dx and d(w) of a token depend on that
 * token's pairs only, and dW[e] on expert e's pairs only, so the CPU
 * computes one problem per sampled pair (one token, one valid slot, its
 * expert alone: its dx is that pair's bf16 row, exactly, and the k rows
 * are combined here as moe_ref.c combines them) and one per sampled expert
 * (the tokens routed to it, every other slot made invalid), in parallel
 * threads. Sampled: every token and expert of the small shape, the first,
 * last and random other tokens and three (two) experts of Qwen3
 * (DeepSeek-V3), the most loaded among them. HR_TEST_SEED repeats a run.
 */
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cuda_runtime.h>

#include "gpu_bwd.h"
#include "gpu_util.h"
#include "moe_ref.h"

#define NAME "test_moe_backward"
/* Grid 1 streams every weight and writes every dW element through one SM. */
#define TIMEOUT_MS 30000
#define HOG_SMS 4
#define HOG_MS 1500
#define SHORT_TIMEOUT_MS 200
#define SLACK_MS 150

/* ---- the backward's buffers beside a gt_moe ----------------------------- */

typedef struct gb {
  gt_moe *g;
  size_t n1, n2;             /* elements of dW1 (E 2I H) and dW2 (E H I) */
  uint16_t *dy, *dx;         /* device [max_T, H] */
  void *dw1, *dw2;           /* device, fp32-sized */
  float *dtw;                /* device [max_T, k] */
  uint16_t *dy_h, *dx_h;     /* host [max_T, H] */
  float *dtw_h;              /* host [max_T, k] */
  float last_ms;
} gb;

/* A device copy of one launch's outputs, for bitwise comparisons. */
typedef struct gb_snap {
  void *dx, *dw1, *dw2, *dtw;
  int dtype;
} gb_snap;

static size_t dw_bytes(size_t n, int dtype)
{
  return n * (dtype == HR_MOE_DW_BF16 ? 2 : 4);
}

static void gb_init(gb *b, gt_moe *g)
{
  const size_t E = g->s.E, H = g->s.H, I = g->s.I, k = g->s.k, T = g->max_T;
  memset(b, 0, sizeof(*b));
  b->g = g;
  b->n1 = E * 2 * I * H;
  b->n2 = E * H * I;
  GT_CUDA(cudaMalloc((void **)&b->dy, T * H * 2));
  GT_CUDA(cudaMalloc((void **)&b->dx, T * H * 2));
  GT_CUDA(cudaMalloc(&b->dw1, b->n1 * 4));
  GT_CUDA(cudaMalloc(&b->dw2, b->n2 * 4));
  GT_CUDA(cudaMalloc((void **)&b->dtw, T * k * 4));
  b->dy_h = malloc(T * H * 2);
  b->dx_h = malloc(T * H * 2);
  b->dtw_h = malloc(T * k * 4);
  if(!b->dy_h || !b->dx_h || !b->dtw_h) {
    fprintf(stderr, "FAIL: out of host memory\n");
    exit(1);
  }
}

static void gb_free(gb *b)
{
  cudaFree(b->dy);
  cudaFree(b->dx);
  cudaFree(b->dw1);
  cudaFree(b->dw2);
  cudaFree(b->dtw);
  free(b->dy_h);
  free(b->dx_h);
  free(b->dtw_h);
  memset(b, 0, sizeof(*b));
}

/* dy for the current T, uniform in [-1, 1), uploaded. */
static void gb_fresh_dy(gb *b)
{
  const size_t n = (size_t)b->g->T * b->g->s.H;
  size_t i;
  for(i = 0; i < n; i++)
    b->dy_h[i] = hr_moe_float_to_bf16(gt_uniform(-1.0f, 1.0f));
  GT_CUDA(cudaMemcpy(b->dy, b->dy_h, n * 2, cudaMemcpyHostToDevice));
  GT_CUDA(cudaDeviceSynchronize());    /* before a launch on g's non-blocking stream */
}

static hr_moe_grad_args gb_args(const gb *b, int dtype, int timeout_ms)
{
  hr_moe_grad_args a;
  memset(&a, 0, sizeof(a));
  a.fwd = gt_args(b->g, timeout_ms);
  a.fwd.y = NULL;                      /* not read by the backward */
  a.dy = b->dy;
  a.dx = b->dx;
  a.dw1 = b->dw1;
  a.dw2 = b->dw2;
  a.dtopk_weights = b->dtw;
  a.dw_dtype = dtype;
  return a;
}

/* Every output byte 0xff: NaN in fp32 and in bf16. */
static void gb_poison(gb *b)
{
  cudaStream_t st = (cudaStream_t)b->g->stream;
  const size_t T = b->g->T, H = b->g->s.H, k = b->g->s.k;
  GT_CUDA(cudaMemsetAsync(b->dx, 0xff, T * H * 2, st));
  GT_CUDA(cudaMemsetAsync(b->dw1, 0xff, b->n1 * 4, st));
  GT_CUDA(cudaMemsetAsync(b->dw2, 0xff, b->n2 * 4, st));
  GT_CUDA(cudaMemsetAsync(b->dtw, 0xff, T * k * 4, st));
}

/* Poison, launch on g's stream; the launch's code (nothing waited for). */
static int gb_launch(gb *b, int grid, hr_mode mode, int dtype, int timeout_ms)
{
  hr_moe_grad_args a = gb_args(b, dtype, timeout_ms);
  gb_poison(b);
  return hr_moe_backward_grid(b->g->m, grid, mode, &a, b->g->stream);
}

/* Poison, launch (reading g and u from gu unless NULL), hr_moe_sync;
 * b->last_ms from events around the launch. */
static int gb_run_gu(gb *b, int grid, hr_mode mode, int dtype, int timeout_ms, float *gu)
{
  cudaStream_t st = (cudaStream_t)b->g->stream;
  cudaEvent_t e0, e1;
  hr_moe_grad_args a = gb_args(b, dtype, timeout_ms);
  int rc;

  a.fwd.gate_up = gu;
  GT_CUDA(cudaEventCreate(&e0));
  GT_CUDA(cudaEventCreate(&e1));
  gb_poison(b);
  GT_CUDA(cudaEventRecord(e0, st));
  rc = hr_moe_backward_grid(b->g->m, grid, mode, &a, st);
  if(rc == HR_OK) {
    GT_CUDA(cudaEventRecord(e1, st));
    rc = hr_moe_sync(b->g->m);
  }
  b->last_ms = -1;
  if(rc == HR_OK) {
    GT_CUDA(cudaEventSynchronize(e1));
    GT_CUDA(cudaEventElapsedTime(&b->last_ms, e0, e1));
  }
  GT_CUDA(cudaStreamSynchronize(st));
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  return rc;
}

static int gb_run(gb *b, int grid, hr_mode mode, int dtype, int timeout_ms)
{
  return gb_run_gu(b, grid, mode, dtype, timeout_ms, NULL);
}

/* dx and d(w) to the host. */
static void gb_fetch_small(gb *b)
{
  const size_t T = b->g->T, H = b->g->s.H, k = b->g->s.k;
  GT_CUDA(cudaMemcpy(b->dx_h, b->dx, T * H * 2, cudaMemcpyDeviceToHost));
  GT_CUDA(cudaMemcpy(b->dtw_h, b->dtw, T * k * 4, cudaMemcpyDeviceToHost));
}

/* Elements of the four outputs not finite (or never written). */
static size_t gb_nonfinite(gb *b, int dtype)
{
  const size_t T = b->g->T, H = b->g->s.H, k = b->g->s.k;
  const int bf = dtype == HR_MOE_DW_BF16;
  size_t n, sum = 0;
  GT_CUDA(gt_dev_count_nonfinite(b->dx, T * H, 1, b->g->stream, &n));
  sum += n;
  GT_CUDA(gt_dev_count_nonfinite(b->dw1, b->n1, bf, b->g->stream, &n));
  sum += n;
  GT_CUDA(gt_dev_count_nonfinite(b->dw2, b->n2, bf, b->g->stream, &n));
  sum += n;
  GT_CUDA(gt_dev_count_nonfinite(b->dtw, T * k, 0, b->g->stream, &n));
  return sum + n;
}

/* Every output still all poison: nothing ran. */
static int gb_untouched(gb *b)
{
  const size_t T = b->g->T, H = b->g->s.H, k = b->g->s.k;
  size_t n;
  GT_CUDA(cudaDeviceSynchronize());
  GT_CUDA(gt_dev_count_nonfinite(b->dx, T * H, 1, b->g->stream, &n));
  if(n != T * H)
    return 0;
  GT_CUDA(gt_dev_count_nonfinite(b->dw1, b->n1, 0, b->g->stream, &n));
  if(n != b->n1)
    return 0;
  GT_CUDA(gt_dev_count_nonfinite(b->dw2, b->n2, 0, b->g->stream, &n));
  if(n != b->n2)
    return 0;
  GT_CUDA(gt_dev_count_nonfinite(b->dtw, T * k, 0, b->g->stream, &n));
  return n == T * k;
}

static void snap_alloc(gb *b, gb_snap *s)
{
  const size_t T = b->g->max_T, H = b->g->s.H, k = b->g->s.k;
  memset(s, 0, sizeof(*s));
  GT_CUDA(cudaMalloc(&s->dx, T * H * 2));
  GT_CUDA(cudaMalloc(&s->dw1, b->n1 * 4));
  GT_CUDA(cudaMalloc(&s->dw2, b->n2 * 4));
  GT_CUDA(cudaMalloc(&s->dtw, T * k * 4));
}

static void snap_free(gb_snap *s)
{
  cudaFree(s->dx);
  cudaFree(s->dw1);
  cudaFree(s->dw2);
  cudaFree(s->dtw);
  memset(s, 0, sizeof(*s));
}

/* On g's stream, and waited for: a device-to-device cudaMemcpy may
 * return before it is done, and on the legacy stream it is not ordered
 * before the next launch's poison on g's non-blocking stream. */
static void snap_take(gb *b, gb_snap *s, int dtype)
{
  const size_t T = b->g->T, H = b->g->s.H, k = b->g->s.k;
  cudaStream_t st = (cudaStream_t)b->g->stream;
  s->dtype = dtype;
  GT_CUDA(cudaMemcpyAsync(s->dx, b->dx, T * H * 2, cudaMemcpyDeviceToDevice, st));
  GT_CUDA(cudaMemcpyAsync(s->dw1, b->dw1, dw_bytes(b->n1, dtype), cudaMemcpyDeviceToDevice, st));
  GT_CUDA(cudaMemcpyAsync(s->dw2, b->dw2, dw_bytes(b->n2, dtype), cudaMemcpyDeviceToDevice, st));
  GT_CUDA(cudaMemcpyAsync(s->dtw, b->dtw, T * k * 4, cudaMemcpyDeviceToDevice, st));
  GT_CUDA(cudaStreamSynchronize(st));
}

/* Words in which the last launch's outputs differ from the snapshot's,
 * per output: dx, dw1, dw2, dtw. Returns the sum. */
static size_t snap_diff(gb *b, const gb_snap *s, size_t d[4])
{
  const size_t T = b->g->T, H = b->g->s.H, k = b->g->s.k;
  void *st = b->g->stream;
  GT_CUDA(gt_dev_count_diff(s->dx, b->dx, T * H * 2, st, &d[0]));
  GT_CUDA(gt_dev_count_diff(s->dw1, b->dw1, dw_bytes(b->n1, s->dtype), st, &d[1]));
  GT_CUDA(gt_dev_count_diff(s->dw2, b->dw2, dw_bytes(b->n2, s->dtype), st, &d[2]));
  GT_CUDA(gt_dev_count_diff(s->dtw, b->dtw, T * k * 4, st, &d[3]));
  return d[0] + d[1] + d[2] + d[3];
}

/* ---- the sampled CPU reference ------------------------------------------ */

/* One problem for a worker thread: a pair alone (kind PAIR: token tok,
 * slot j) or a chunk of an expert's tokens (kind EXPERT: tokens
 * toks[0..ntok), expert e), each with its one expert's weights. */
enum { JOB_PAIR, JOB_EXPERT };

typedef struct ref_job {
  int kind, e, tok, j;
  const int *toks;
  int ntok;
  /* the answer */
  uint16_t *row;            /* PAIR: [H], the pair's bf16 dx row */
  float dtw;                /* PAIR: d(w) of the pair */
  float *dw1, *dw2;         /* EXPERT: this chunk's sums */
  int rc;
} ref_job;

typedef struct ref_pool {
  const gb *b;
  ref_job *jobs;
  int njobs, next;
  pthread_mutex_t lock;
} ref_pool;

/* Build and solve one job's problem. Weights come from the device. */
static int ref_job_run(const gb *b, ref_job *jb)
{
  const gt_moe *g = b->g;
  const int H = g->s.H, I = g->s.I, k = g->s.k;
  const size_t w1n = (size_t)2 * I * H, w2n = (size_t)H * I;
  const int ntok = jb->kind == JOB_PAIR ? 1 : jb->ntok;
  const size_t nt = ntok ? (size_t)ntok : 1;   /* an expert with no tokens */
  uint16_t *w1 = malloc(w1n * 2), *w2 = malloc(w2n * 2);
  uint16_t *x = malloc(nt * H * 2), *dy = malloc(nt * H * 2);
  uint16_t *dx = malloc(nt * H * 2);
  int32_t *ids = malloc(nt * k * 4);
  float *wts = malloc(nt * k * 4), *dtw = malloc(nt * k * 4);
  float *dw1 = jb->kind == JOB_EXPERT ? jb->dw1 : malloc(w1n * 4);
  float *dw2 = jb->kind == JOB_EXPERT ? jb->dw2 : malloc(w2n * 4);
  hr_moe_ref_problem p;
  int rc = HR_ENOMEM, i, j;

  if(!w1 || !w2 || !x || !dy || !dx || !ids || !wts || !dtw || !dw1 || !dw2)
    goto out;
  if(cudaMemcpy(w1, g->w1 + (size_t)jb->e * w1n, w1n * 2, cudaMemcpyDeviceToHost) ||
     cudaMemcpy(w2, g->w2 + (size_t)jb->e * w2n, w2n * 2, cudaMemcpyDeviceToHost)) {
    rc = HR_ECUDA;
    goto out;
  }
  for(i = 0; i < ntok; i++) {
    const int t = jb->kind == JOB_PAIR ? jb->tok : jb->toks[i];
    memcpy(x + (size_t)i * H, g->x_h + (size_t)t * H, (size_t)H * 2);
    memcpy(dy + (size_t)i * H, b->dy_h + (size_t)t * H, (size_t)H * 2);
    for(j = 0; j < k; j++) {
      const int e = g->ids_h[(size_t)t * k + j];
      const int mine = jb->kind == JOB_PAIR ? j == jb->j : e == jb->e;
      ids[(size_t)i * k + j] = mine ? 0 : -1;
      wts[(size_t)i * k + j] = g->wts_h[(size_t)t * k + j];
    }
  }
  p.tokens = ntok;
  p.experts = 1;
  p.hidden = H;
  p.inter = I;
  p.topk = k;
  p.x = x;
  p.topk_ids = ids;
  p.topk_weights = wts;
  p.w1 = w1;
  p.w2 = w2;
  rc = hr_moe_ref_backward(&p, dy, dx, dw1, dw2, dtw);
  if(rc == HR_OK && jb->kind == JOB_PAIR) {
    /* One valid slot: dx = bf16(0 + row) = the row, bitwise. */
    memcpy(jb->row, dx, (size_t)H * 2);
    jb->dtw = dtw[jb->j];
  }
out:
  free(w1);
  free(w2);
  free(x);
  free(dy);
  free(dx);
  free(ids);
  free(wts);
  free(dtw);
  if(jb->kind == JOB_PAIR) {
    free(dw1);
    free(dw2);
  }
  return rc;
}

static void *ref_worker(void *arg)
{
  ref_pool *pool = arg;
  for(;;) {
    int i;
    pthread_mutex_lock(&pool->lock);
    i = pool->next++;
    pthread_mutex_unlock(&pool->lock);
    if(i >= pool->njobs)
      return NULL;
    pool->jobs[i].rc = ref_job_run(pool->b, &pool->jobs[i]);
  }
}

static int run_jobs(const gb *b, ref_job *jobs, int njobs)
{
  ref_pool pool;
  pthread_t th[32];
  int started[32], nth, i, rc = HR_OK;
  long ncpu = sysconf(_SC_NPROCESSORS_ONLN);

  pool.b = b;
  pool.jobs = jobs;
  pool.njobs = njobs;
  pool.next = 0;
  pthread_mutex_init(&pool.lock, NULL);
  nth = (int)(ncpu < 1 ? 1 : ncpu > 32 ? 32 : ncpu);
  if(nth > njobs)
    nth = njobs > 0 ? njobs : 1;
  for(i = 0; i < nth; i++)
    started[i] = pthread_create(&th[i], NULL, ref_worker, &pool) == 0;
  if(!started[0])
    ref_worker(&pool);                   /* no threads: do it all here */
  for(i = 0; i < nth; i++)
    if(started[i])
      pthread_join(th[i], NULL);
  pthread_mutex_destroy(&pool.lock);
  for(i = 0; i < njobs; i++)
    if(jobs[i].rc != HR_OK)
      rc = jobs[i].rc;
  return rc;
}

/* The reference's answer on a sample of tokens and experts. */
typedef struct ref_ans {
  int ntok, nexp;
  int *tok;                  /* [ntok] sampled tokens */
  int *exp;                  /* [nexp] sampled experts */
  uint16_t *dx;              /* [ntok, H] */
  float *dtw;                /* [ntok, k] */
  float *dw1, *dw2;          /* [nexp, 2I, H], [nexp, H, I] */
  double cpu_ms;             /* wall time of the reference */
} ref_ans;

static void ref_ans_free(ref_ans *r)
{
  free(r->tok);
  free(r->exp);
  free(r->dx);
  free(r->dtw);
  free(r->dw1);
  free(r->dw2);
  memset(r, 0, sizeof(*r));
}

static int valid_id(const gt_moe *g, int e)
{
  return e >= 0 && e < g->s.E;
}

/* ntok tokens (all when T <= ntok: the first, the last, random others)
 * and experts: all when nexp >= E, else the most loaded, the one of token
 * 0's first valid slot, then random pairs' experts (nexp at most, fewer
 * when fewer have pairs). Then the reference for them. */
static int ref_compute(const gb *b, int ntok, int nexp, ref_ans *r)
{
  const gt_moe *g = b->g;
  const int T = g->T, E = g->s.E, H = g->s.H, I = g->s.I, k = g->s.k;
  const size_t w1n = (size_t)2 * I * H, w2n = (size_t)H * I;
  /* Tokens per expert-chunk job: enough jobs for the threads, not more. */
  const int chunk_pairs = 8;
  int *load = calloc((size_t)E, sizeof(int)), *etoks = NULL;
  char *picked = calloc((size_t)T, 1);
  ref_job *jobs = NULL;
  uint16_t *rows = NULL;
  int njobs = 0, i, j, rc = HR_ENOMEM, c, x;
  double t0 = gt_now_ms();

  memset(r, 0, sizeof(*r));
  if(!load || !picked)
    goto out;
  for(i = 0; i < T * k; i++)
    if(valid_id(g, g->ids_h[i]))
      load[g->ids_h[i]]++;

  /* tokens */
  if(ntok > T)
    ntok = T;
  r->ntok = ntok;
  r->tok = malloc(sizeof(int) * (ntok ? ntok : 1));
  if(!r->tok)
    goto out;
  for(i = 0; i < ntok; i++) {
    int t = i == 0 ? 0 : i == 1 ? T - 1 : (int)(gt_rand() % (uint64_t)T);
    if(ntok == T)
      t = i;
    while(picked[t])
      t = (t + 1) % T;
    picked[t] = 1;
    r->tok[i] = t;
  }

  /* experts */
  r->exp = malloc(sizeof(int) * (E + 1));
  if(!r->exp)
    goto out;
  if(nexp >= E) {
    for(i = 0; i < E; i++)
      r->exp[r->nexp++] = i;
  } else {
    int best = -1;
    for(i = 0; i < E; i++)
      if(load[i] && (best < 0 || load[i] > load[best]))
        best = i;
    if(best >= 0 && nexp > 0)
      r->exp[r->nexp++] = best;
    for(j = 0; j < k && r->nexp < nexp; j++) {
      int e = g->ids_h[j];
      if(valid_id(g, e)) {
        for(x = 0; x < r->nexp && r->exp[x] != e; x++)
          ;
        if(x == r->nexp)
          r->exp[r->nexp++] = e;
        break;
      }
    }
    for(c = 0; c < 64 && r->nexp < nexp; c++) {
      int e = g->ids_h[gt_rand() % (uint64_t)(T * k)];
      if(!valid_id(g, e))
        continue;
      for(x = 0; x < r->nexp && r->exp[x] != e; x++)
        ;
      if(x == r->nexp)
        r->exp[r->nexp++] = e;
    }
  }

  /* jobs: a pair job per valid slot of each sampled token, then each
   * sampled expert's tokens in chunks of about chunk_pairs pairs. */
  {
    size_t maxjobs = (size_t)ntok * k + (size_t)T * k + (size_t)r->nexp + 1;
    jobs = calloc(maxjobs, sizeof(ref_job));
    rows = malloc((size_t)(ntok ? ntok : 1) * k * H * 2);
    etoks = malloc(sizeof(int) * ((size_t)r->nexp * T + 1));
    r->dx = malloc((size_t)(ntok ? ntok : 1) * H * 2);
    r->dtw = calloc((size_t)(ntok ? ntok : 1) * k, sizeof(float));
    r->dw1 = malloc(w1n * 4 * (r->nexp ? r->nexp : 1));
    r->dw2 = malloc(w2n * 4 * (r->nexp ? r->nexp : 1));
    if(!jobs || !rows || !etoks || !r->dx || !r->dtw || !r->dw1 || !r->dw2)
      goto out;
  }
  for(i = 0; i < ntok; i++)
    for(j = 0; j < k; j++) {
      const int e = g->ids_h[(size_t)r->tok[i] * k + j];
      if(!valid_id(g, e))
        continue;
      jobs[njobs].kind = JOB_PAIR;
      jobs[njobs].e = e;
      jobs[njobs].tok = r->tok[i];
      jobs[njobs].j = j;
      jobs[njobs].row = rows + ((size_t)i * k + j) * H;
      njobs++;
    }
  {
    const int first_expert_job = njobs;
    for(x = 0; x < r->nexp; x++) {
      const int e = r->exp[x];
      int *toks = etoks + (size_t)x * T, n = 0, pairs = 0, start = 0, t;
      for(t = 0; t < T; t++)
        for(j = 0; j < k; j++)
          if(g->ids_h[(size_t)t * k + j] == e) {
            toks[n++] = t;
            break;
          }
      /* Chunks of whole tokens, in token order (the reference's pair order
       * within each). An expert without pairs gets one job of no tokens:
       * dW 0. */
      for(t = 0; t <= n; t++) {
        int here = 0;
        if(t < n)
          for(j = 0; j < k; j++)
            here += g->ids_h[(size_t)toks[t] * k + j] == e;
        if(t == n || (pairs > 0 && pairs + here > chunk_pairs)) {
          if(t > start || (n == 0 && t == 0)) {
            jobs[njobs].kind = JOB_EXPERT;
            jobs[njobs].e = e;
            jobs[njobs].toks = toks + start;
            jobs[njobs].ntok = t - start;
            jobs[njobs].tok = x;            /* which sampled expert */
            jobs[njobs].dw1 = malloc(w1n * 4);
            jobs[njobs].dw2 = malloc(w2n * 4);
            if(!jobs[njobs].dw1 || !jobs[njobs].dw2) {
              njobs++;
              goto out;
            }
            njobs++;
          }
          start = t;
          pairs = 0;
        }
        pairs += here;
      }
    }
    rc = run_jobs(b, jobs, njobs);
    if(rc != HR_OK)
      goto out;

    /* dW: the chunks' fp32 sums added in double in chunk order. */
    for(x = 0; x < r->nexp; x++) {
      float *o1 = r->dw1 + (size_t)x * w1n, *o2 = r->dw2 + (size_t)x * w2n;
      double *a1 = calloc(w1n, sizeof(double)), *a2 = calloc(w2n, sizeof(double));
      size_t q;
      if(!a1 || !a2) {
        free(a1);
        free(a2);
        rc = HR_ENOMEM;
        goto out;
      }
      for(c = first_expert_job; c < njobs; c++) {
        if(jobs[c].tok != x)
          continue;
        for(q = 0; q < w1n; q++)
          a1[q] += jobs[c].dw1[q];
        for(q = 0; q < w2n; q++)
          a2[q] += jobs[c].dw2[q];
      }
      for(q = 0; q < w1n; q++)
        o1[q] = (float)a1[q];
      for(q = 0; q < w2n; q++)
        o2[q] = (float)a2[q];
      free(a1);
      free(a2);
    }
  }

  /* dx of each sampled token: its valid rows summed in fp32 in slot order,
   * rounded once (moe_ref.c's combine); d(w) 0 for invalid ids. */
  for(c = 0; c < njobs; c++)
    if(jobs[c].kind == JOB_PAIR) {
      for(i = 0; i < ntok && r->tok[i] != jobs[c].tok; i++)
        ;
      r->dtw[(size_t)i * k + jobs[c].j] = jobs[c].dtw;
    }
  for(i = 0; i < ntok; i++) {
    const int t = r->tok[i];
    for(c = 0; c < H; c++) {
      float acc = 0.0f;
      for(j = 0; j < k; j++)
        if(valid_id(g, g->ids_h[(size_t)t * k + j]))
          acc += hr_moe_bf16_to_float(rows[((size_t)i * k + j) * H + c]);
      r->dx[(size_t)i * H + c] = hr_moe_float_to_bf16(acc);
    }
  }
  rc = HR_OK;

out:
  for(c = 0; jobs && c < njobs; c++)
    if(jobs[c].kind == JOB_EXPERT) {
      free(jobs[c].dw1);
      free(jobs[c].dw2);
    }
  free(jobs);
  free(rows);
  free(etoks);
  free(load);
  free(picked);
  r->cpu_ms = gt_now_ms() - t0;
  return rc;
}

/* ---- comparisons --------------------------------------------------------- */

typedef struct l2 {
  double num, den, max_abs;
  int bad;                   /* a non-finite value seen */
} l2;

static void l2_add(l2 *a, double v, double ref)
{
  if(!isfinite(v)) {
    a->bad = 1;
    return;
  }
  a->num += (v - ref) * (v - ref);
  a->den += ref * ref;
  if(fabs(v - ref) > a->max_abs)
    a->max_abs = fabs(v - ref);
}

static double l2_rel(const l2 *a)
{
  if(a->bad)
    return INFINITY;
  return a->den > 0 ? sqrt(a->num / a->den) : sqrt(a->num);
}

/* The last launch's outputs against the reference: rel[0..3] for dx, dW1,
 * dW2, d(w). dW of the sampled experts comes from the device here. */
static void compare(gb *b, const ref_ans *r, int dtype, double rel[4])
{
  const gt_moe *g = b->g;
  const int H = g->s.H, I = g->s.I, k = g->s.k;
  const size_t w1n = (size_t)2 * I * H, w2n = (size_t)H * I;
  const int bf = dtype == HR_MOE_DW_BF16;
  l2 a[4];
  void *buf = malloc((w1n > w2n ? w1n : w2n) * 4);
  int i, j, x;
  size_t q;

  memset(a, 0, sizeof(a));
  gb_fetch_small(b);
  for(i = 0; i < r->ntok; i++) {
    const int t = r->tok[i];
    for(j = 0; j < H; j++)
      l2_add(&a[0], hr_moe_bf16_to_float(b->dx_h[(size_t)t * H + j]),
             hr_moe_bf16_to_float(r->dx[(size_t)i * H + j]));
    for(j = 0; j < k; j++)
      l2_add(&a[3], b->dtw_h[(size_t)t * k + j], r->dtw[(size_t)i * k + j]);
  }
  for(x = 0; buf && x < r->nexp; x++) {
    const int e = r->exp[x];
    for(i = 0; i < 2; i++) {
      const size_t n = i == 0 ? w1n : w2n;
      const char *src = (const char *)(i == 0 ? b->dw1 : b->dw2) + dw_bytes(n, dtype) * e;
      const float *ref = (i == 0 ? r->dw1 : r->dw2) + n * x;
      GT_CUDA(cudaMemcpy(buf, src, dw_bytes(n, dtype), cudaMemcpyDeviceToHost));
      for(q = 0; q < n; q++) {
        double v = bf ? hr_moe_bf16_to_float(((uint16_t *)buf)[q]) : ((float *)buf)[q];
        double want = bf ? hr_moe_bf16_to_float(hr_moe_float_to_bf16(ref[q])) : ref[q];
        l2_add(&a[1 + i], v, want);
      }
    }
  }
  if(!buf)
    a[1].bad = a[2].bad = 1;
  free(buf);
  for(i = 0; i < 4; i++)
    rel[i] = l2_rel(&a[i]);
}

/* Elements of dW of experts without pairs that are not exactly zero. */
static size_t empty_experts_nonzero(gb *b, int dtype, int *nempty)
{
  const gt_moe *g = b->g;
  const int E = g->s.E, k = g->s.k, T = g->T;
  const size_t w1n = b->n1 / E, w2n = b->n2 / E;
  const int bf = dtype == HR_MOE_DW_BF16;
  char *used = calloc((size_t)E, 1);
  size_t sum = 0, n;
  int e, i;

  *nempty = 0;
  if(!used)
    return 1;
  for(i = 0; i < T * k; i++)
    if(valid_id(g, g->ids_h[i]))
      used[g->ids_h[i]] = 1;
  for(e = 0; e < E; e++) {
    if(used[e])
      continue;
    (*nempty)++;
    GT_CUDA(gt_dev_count_nonzero((const char *)b->dw1 + dw_bytes(w1n, dtype) * e,
                                 w1n, bf, g->stream, &n));
    sum += n;
    GT_CUDA(gt_dev_count_nonzero((const char *)b->dw2 + dw_bytes(w2n, dtype) * e,
                                 w2n, bf, g->stream, &n));
    sum += n;
  }
  free(used);
  return sum;
}

static const char *mode_name(hr_mode mode)
{
  return mode == HR_MODE_AGNOSTIC ? "agnostic" :
         mode == HR_MODE_COOPERATIVE ? "cooperative" : "barrier";
}

static const char *dtype_name(int dtype)
{
  return dtype == HR_MOE_DW_BF16 ? "bf16" : "fp32";
}

/* One launch of the current inputs against the reference. */
static void check_launch(gb *b, const ref_ans *r, hr_mode mode, int dtype,
                         const char *what)
{
  const gt_moe *g = b->g;
  const int sms = hr_moe_sms(g->m), T = g->T, k = g->s.k;
  double rel[4];
  size_t bad, nz;
  int rc, nempty, i, badw = 0;

  rc = gb_run(b, sms, mode, dtype, TIMEOUT_MS);
  GT_EXPECT(rc == HR_OK, "%s %s T=%d %s dW %s: %s", g->s.name, what, T,
            mode_name(mode), dtype_name(dtype), hr_strerror(rc));
  if(rc != HR_OK)
    return;
  bad = gb_nonfinite(b, dtype);
  nz = empty_experts_nonzero(b, dtype, &nempty);
  compare(b, r, dtype, rel);
  /* d(w) of every id outside [0, E): exactly 0 (all T tokens). */
  for(i = 0; i < T * k; i++)
    if(!valid_id(g, g->ids_h[i]) && b->dtw_h[i] != 0.0f)
      badw++;
  printf("  %-14s %-18s T=%-4d %-8s dW %s: rel L2 dx %.1e dW1 %.1e dW2 %.1e "
         "d(w) %.1e (%d tok, %d exp); %zu non-finite; %d empty experts, %zu "
         "nonzero; %.2f ms\n", g->s.name, what, T, mode_name(mode),
         dtype_name(dtype), rel[0], rel[1], rel[2], rel[3], r->ntok, r->nexp,
         bad, nempty, nz, b->last_ms);
  GT_EXPECT(bad == 0, "%s %s T=%d %s %s: %zu output elements not finite or "
            "not written", g->s.name, what, T, mode_name(mode),
            dtype_name(dtype), bad);
  GT_EXPECT(nz == 0, "%s %s T=%d: %zu dW elements of experts without pairs "
            "not 0", g->s.name, what, T, nz);
  GT_EXPECT(badw == 0, "%s %s T=%d: %d d(w) of ids outside [0, E) not 0",
            g->s.name, what, T, badw);
  for(i = 0; i < 4; i++)
    GT_EXPECT(rel[i] < GT_REL_L2_BOUND, "%s %s T=%d %s dW %s: rel L2 of %s %.3g",
              g->s.name, what, T, mode_name(mode), dtype_name(dtype),
              (const char *[]){ "dx", "dW1", "dW2", "d(w)" }[i], rel[i]);
}

/* Fresh dy, the reference once, then the barrier kernel with fp32 and bf16
 * dW and the agnostic kernel with fp32, each against it. */
static void check_case(gb *b, int ntok, int nexp, const char *what)
{
  ref_ans r;
  int rc;

  gb_fresh_dy(b);
  rc = ref_compute(b, ntok, nexp, &r);
  GT_EXPECT(rc == HR_OK, "%s %s: the CPU reference: %s", b->g->s.name, what,
            hr_strerror(rc));
  if(rc == HR_OK) {
    printf("  %-14s %-18s T=%-4d reference: %d tokens, %d experts, %.0f ms\n",
           b->g->s.name, what, b->g->T, r.ntok, r.nexp, r.cpu_ms);
    check_launch(b, &r, HR_MODE_HEADROOM, HR_MOE_DW_FP32, what);
    check_launch(b, &r, HR_MODE_HEADROOM, HR_MOE_DW_BF16, what);
    check_launch(b, &r, HR_MODE_AGNOSTIC, HR_MOE_DW_FP32, what);
  }
  ref_ans_free(&r);
}

/* Random routing with some ids outside [0, E): -1, E, a large one, and
 * one token with none valid. */
static void route_bad_ids(gt_moe *g, int T)
{
  const int k = g->s.k, E = g->s.E;
  const int32_t bad[] = { -1, E, E + 7, INT_MAX, INT_MIN, -E };
  int i, j;
  gt_route_random(g, T);
  for(i = 0; i < T * k; i += 3)
    g->ids_h[i] = bad[(i / 3) % (int)(sizeof(bad) / sizeof(bad[0]))];
  if(T > 1)
    for(j = 0; j < k; j++)
      g->ids_h[(size_t)(T / 2) * k + j] = -1 - j;
  GT_CUDA(cudaMemcpy(g->ids, g->ids_h, (size_t)T * k * 4, cudaMemcpyHostToDevice));
  GT_CUDA(cudaDeviceSynchronize());
}

/* ---- 1. correctness -------------------------------------------------------- */

typedef struct shape_plan {
  int shape, max_T, ntok, nexp;
  int tokens[4], ntokens;
  int one_T, subset_T, bad_T;
  int prepare;               /* hr_moe_backward_prepare first, or not */
} shape_plan;

static const shape_plan plans[] = {
  /* small: every token and expert; the first backward allocates */
  { GT_SMALL, 300, 300, 8, { 1, 7, 64, 300 }, 4, 300, 64, 64, 0 },
  { GT_QWEN3, 300, 16, 3, { 1, 128, 300 }, 3, 16, 64, 64, 1 },
  { GT_DSV3, 128, 4, 2, { 1, 128 }, 2, 1, 16, 0, 1 },
};

static void correctness(const shape_plan *pl)
{
  gt_moe g;
  gb b;
  int i;
  double t0 = gt_now_ms();

  gt_moe_init(&g, &gt_shapes[pl->shape], pl->max_T);
  gb_init(&b, &g);
  if(pl->prepare) {
    GT_EXPECT(hr_moe_backward_prepare(g.m) == HR_OK, "prepare");
    GT_EXPECT(hr_moe_backward_prepare(g.m) == HR_OK, "prepare again");
  }
  for(i = 0; i < pl->ntokens; i++) {
    gt_route_random(&g, pl->tokens[i]);
    check_case(&b, pl->ntok, pl->nexp, "random routing");
  }
  if(pl->bad_T) {
    route_bad_ids(&g, pl->bad_T);
    check_case(&b, pl->ntok, pl->nexp, "ids outside [0,E)");
  }
  gt_route_one(&g, pl->one_T, g.s.E - 1);
  check_case(&b, pl->ntok, pl->nexp, "all to one expert");
  /* Only every fourth expert gets tokens; the others' weights are NaN. */
  for(i = 0; i < g.s.E; i++)
    if(i % 4 != 0)
      gt_poison_expert(&g, i);
  gt_route_subset(&g, pl->subset_T, 4);
  check_case(&b, pl->ntok, pl->nexp, "3/4 experts empty");
  gb_free(&b);
  gt_moe_free(&g);
  printf("  %s: %.1f s\n", gt_shapes[pl->shape].name, (gt_now_ms() - t0) / 1e3);
}

/* ---- 2. grids --------------------------------------------------------------- */

static void grids_case(gb *b, int T)
{
  gt_moe *g = b->g;
  const int sms = hr_moe_sms(g->m);
  const int grids[] = { sms, 33, 7, 2, 1 };
  const hr_mode modes[] = { HR_MODE_HEADROOM, HR_MODE_AGNOSTIC };
  const int dtypes[] = { HR_MOE_DW_FP32, HR_MOE_DW_BF16 };
  gb_snap snaps[2];
  size_t d[4], bad, n;
  int di, gi, mi, rc;

  gt_route_random(g, T);
  gb_fresh_dy(b);
  snap_alloc(b, &snaps[0]);
  snap_alloc(b, &snaps[1]);
  for(di = 0; di < 2; di++) {
    const int dt = dtypes[di];
    gb_snap snap = snaps[di];
    rc = gb_run(b, sms, HR_MODE_HEADROOM, dt, TIMEOUT_MS);
    GT_EXPECT(rc == HR_OK, "%s T=%d grid %d dW %s: %s", g->s.name, T, sms,
              dtype_name(dt), hr_strerror(rc));
    bad = gb_nonfinite(b, dt);
    GT_EXPECT(bad == 0, "%s T=%d grid %d: %zu not finite", g->s.name, T, sms, bad);
    snap_take(b, &snap, dt);
    for(mi = 0; mi < 2; mi++)
      for(gi = 0; gi < (int)(sizeof(grids) / sizeof(grids[0])); gi++) {
        const int grid = grids[gi];
        size_t diff;
        if(grid > sms || (mi == 0 && gi == 0))
          continue;
        rc = gb_run(b, grid, modes[mi], dt, TIMEOUT_MS);
        GT_EXPECT(rc == HR_OK, "%s T=%d grid %d %s dW %s: %s", g->s.name, T,
                  grid, mode_name(modes[mi]), dtype_name(dt), hr_strerror(rc));
        diff = snap_diff(b, &snap, d);
        printf("  %-14s T=%-4d dW %s grid %3d %-8s %s (%.2f ms)\n", g->s.name, T,
               dtype_name(dt), grid, mode_name(modes[mi]),
               diff ? "DIFFERENT" : "identical", b->last_ms);
        GT_EXPECT(diff == 0, "%s T=%d dW %s: grid %d %s differs from grid %d: "
                  "words dx %zu dW1 %zu dW2 %zu d(w) %zu", g->s.name, T,
                  dtype_name(dt), grid, mode_name(modes[mi]), sms, d[0], d[1],
                  d[2], d[3]);
      }
    rc = gb_run(b, sms, HR_MODE_COOPERATIVE, dt, TIMEOUT_MS);
    GT_EXPECT(rc == HR_OK, "cooperative: %s", hr_strerror(rc));
    GT_EXPECT(snap_diff(b, &snap, d) == 0, "%s T=%d dW %s: the cooperative "
              "launch differs", g->s.name, T, dtype_name(dt));
    snaps[di] = snap;
  }

  /* The dtype changes dW's rounding alone: bf16 dW is bf16(the fp32 dW),
   * bitwise, and dx and d(w) are the same bytes. */
  {
    const size_t TH = (size_t)T * g->s.H, Tk = (size_t)T * g->s.k;
    size_t r1, r2;
    GT_CUDA(gt_dev_count_not_rounded(snaps[0].dw1, snaps[1].dw1, b->n1, g->stream, &r1));
    GT_CUDA(gt_dev_count_not_rounded(snaps[0].dw2, snaps[1].dw2, b->n2, g->stream, &r2));
    GT_EXPECT(r1 == 0 && r2 == 0, "%s T=%d: bf16 dW is not bf16(fp32 dW): %zu "
              "dW1 and %zu dW2 elements", g->s.name, T, r1, r2);
    GT_CUDA(gt_dev_count_diff(snaps[0].dx, snaps[1].dx, TH * 2, g->stream, &n));
    GT_CUDA(gt_dev_count_diff(snaps[0].dtw, snaps[1].dtw, Tk * 4, g->stream, &d[0]));
    GT_EXPECT(n == 0 && d[0] == 0, "%s T=%d: dx or d(w) depend on dW's dtype "
              "(%zu, %zu words)", g->s.name, T, n, d[0]);
    printf("  %-14s T=%-4d bf16 dW = bf16(fp32 dW): %s; dx, d(w) the same with "
           "either: %s\n", g->s.name, T, r1 + r2 ? "NO" : "yes",
           n + d[0] ? "NO" : "yes");
  }
  snap_free(&snaps[0]);
  snap_free(&snaps[1]);
}

static void grids(void)
{
  gt_moe g;
  gb b;

  gt_moe_init(&g, &gt_shapes[GT_SMALL], 300);
  gb_init(&b, &g);
  grids_case(&b, 300);
  grids_case(&b, 7);
  gb_free(&b);
  gt_moe_free(&g);

  gt_moe_init(&g, &gt_shapes[GT_QWEN3], 300);
  gb_init(&b, &g);
  grids_case(&b, 300);
  grids_case(&b, 1);
  gb_free(&b);
  gt_moe_free(&g);
}

/* ---- 3. timeout and abort ---------------------------------------------------- */

static void agnostic_beside_hog(gb *b, const gb_snap *good, int ctas)
{
  const int sms = hr_moe_sms(b->g->m);
  gt_hog hog;
  size_t d[4];
  double t0, dt;
  int rc;

  gt_hog_start(&hog, ctas, 600);
  t0 = gt_now_ms();
  rc = gb_launch(b, sms, HR_MODE_AGNOSTIC, good->dtype, SHORT_TIMEOUT_MS);
  GT_EXPECT(rc == HR_OK, "agnostic launch beside a hog: %s", hr_strerror(rc));
  rc = hr_moe_sync(b->g->m);
  dt = gt_now_ms() - t0;
  gt_hog_wait(&hog);
  printf("  agnostic backward, grid %d, beside a hog on %d SMs for 600 ms: "
         "%s after %.1f ms\n", sms, ctas, hr_strerror(rc), dt);
  GT_EXPECT(rc == HR_OK, "agnostic beside a hog on %d SMs: %s", ctas,
            hr_strerror(rc));
  GT_EXPECT(snap_diff(b, good, d) == 0, "agnostic beside a hog on %d SMs: "
            "results differ", ctas);
  gt_hog_free(&hog);
}

static void timeouts(void)
{
  gt_moe g;
  gb b;
  gb_snap good;
  gt_hog hog;
  hr_moe_failure f;
  size_t d[4];
  double t0, dt;
  int sms, rc;

  gt_moe_init(&g, &gt_shapes[GT_SMALL], 128);
  gb_init(&b, &g);
  sms = hr_moe_sms(g.m);
  gt_route_random(&g, 128);
  gb_fresh_dy(&b);
  snap_alloc(&b, &good);
  rc = gb_run(&b, sms, HR_MODE_HEADROOM, HR_MOE_DW_FP32, SHORT_TIMEOUT_MS);
  GT_EXPECT(rc == HR_OK, "baseline: %s", hr_strerror(rc));
  snap_take(&b, &good, HR_MOE_DW_FP32);

  /* a forced timeout */
  gt_hog_start(&hog, HOG_SMS, HOG_MS);
  t0 = gt_now_ms();
  rc = gb_launch(&b, sms, HR_MODE_HEADROOM, HR_MOE_DW_FP32, SHORT_TIMEOUT_MS);
  GT_EXPECT(rc == HR_OK, "launch beside the hog: %s", hr_strerror(rc));
  rc = hr_moe_sync(g.m);
  dt = gt_now_ms() - t0;
  printf("  barrier backward of %d beside a hog on %d SMs: %s after %.1f ms "
         "(timeout %d ms)\n", sms, HOG_SMS, hr_strerror(rc), dt, SHORT_TIMEOUT_MS);
  GT_EXPECT(rc == HR_EBARRIER_TIMEOUT, "got %s", hr_strerror(rc));
  GT_EXPECT(dt >= SHORT_TIMEOUT_MS * 0.9 && dt < SHORT_TIMEOUT_MS + SLACK_MS,
            "sync returned after %.1f ms", dt);
  rc = hr_moe_last_failure(g.m, &f);
  GT_EXPECT(rc == HR_OK, "failure recorded: %s", hr_strerror(rc));
  if(rc == HR_OK) {
    printf("  detail: barrier %d, %d of %d arrived, CTA %d on SM %d, grid %d, "
           "timeout %d ms\n", f.detail.barrier, f.detail.arrived,
           f.detail.expected, f.cta, f.detail.sm, f.detail.grid,
           f.detail.timeout_ms);
    GT_EXPECT(f.code == HR_EBARRIER_TIMEOUT, "code %d", f.code);
    GT_EXPECT(f.detail.barrier >= 20 && f.detail.barrier <= 22, "barrier %d",
              f.detail.barrier);
    GT_EXPECT(f.detail.expected == sms, "expected %d", f.detail.expected);
    GT_EXPECT(f.detail.arrived >= 1 && f.detail.arrived <= sms - HOG_SMS,
              "arrived %d", f.detail.arrived);
    GT_EXPECT(f.detail.sm >= 0 && f.detail.sm < sms, "sm %d", f.detail.sm);
    GT_EXPECT(f.detail.grid == sms && f.detail.timeout_ms == SHORT_TIMEOUT_MS,
              "grid %d timeout %d", f.detail.grid, f.detail.timeout_ms);
    GT_EXPECT(f.reported == 1, "no lease, nothing reported: %d", f.reported);
  }
  rc = gb_run(&b, sms, HR_MODE_HEADROOM, HR_MOE_DW_FP32, SHORT_TIMEOUT_MS * 20);
  GT_EXPECT(rc == HR_OK, "launch after the timeout: %s", hr_strerror(rc));
  GT_EXPECT(snap_diff(&b, &good, d) == 0, "results after the timeout differ");
  printf("  next launch: %s, results %s\n", hr_strerror(rc),
         snap_diff(&b, &good, d) == 0 ? "identical" : "DIFFERENT");
  gt_hog_free(&hog);

  /* abort */
  gt_hog_start(&hog, HOG_SMS, HOG_MS);
  rc = gb_launch(&b, sms, HR_MODE_HEADROOM, HR_MOE_DW_FP32, 60000);
  GT_EXPECT(rc == HR_OK, "launch: %s", hr_strerror(rc));
  gt_sleep_ms(50);
  t0 = gt_now_ms();
  GT_EXPECT(hr_moe_abort(g.m) == HR_OK, "abort");
  rc = hr_moe_sync(g.m);
  dt = gt_now_ms() - t0;
  printf("  abort: %s %.1f ms after hr_moe_abort\n", hr_strerror(rc), dt);
  GT_EXPECT(rc == HR_EABORTED, "got %s", hr_strerror(rc));
  GT_EXPECT(dt < SLACK_MS, "abort took %.1f ms", dt);
  rc = gb_run(&b, sms, HR_MODE_HEADROOM, HR_MOE_DW_FP32, SHORT_TIMEOUT_MS * 20);
  GT_EXPECT(rc == HR_OK && snap_diff(&b, &good, d) == 0,
            "launch after abort: %s", hr_strerror(rc));
  gt_hog_free(&hog);

  /* the agnostic kernel never needs the SMs the hog holds */
  agnostic_beside_hog(&b, &good, 16);
  agnostic_beside_hog(&b, &good, sms);

  snap_free(&good);
  gb_free(&b);
  gt_moe_free(&g);
}

/* ---- 4. bad arguments --------------------------------------------------------- */

static void expect_refused(gb *b, hr_moe_grad_args a, int grid, hr_mode mode,
                           const char *what)
{
  int rc;
  gb_poison(b);
  rc = hr_moe_backward_grid(b->g->m, grid, mode, &a, b->g->stream);
  GT_EXPECT(rc == HR_EINVAL, "%s (%s): got %s", what, mode_name(mode),
            hr_strerror(rc));
  GT_EXPECT(hr_moe_sync(b->g->m) == HR_OK, "%s: sync after a refusal", what);
  GT_EXPECT(gb_untouched(b), "%s (%s): something was launched", what,
            mode_name(mode));
}

static void bad_args(void)
{
  gt_moe g;
  gb b;
  hr_moe_grad_args a, x;
  const hr_mode modes[] = { HR_MODE_HEADROOM, HR_MODE_AGNOSTIC };
  void *host_buf;
  int sms, mi, rc;

  gt_moe_init(&g, &gt_shapes[GT_SMALL], 64);
  gb_init(&b, &g);
  sms = hr_moe_sms(g.m);
  gt_route_random(&g, 64);
  gb_fresh_dy(&b);
  GT_CUDA(cudaHostAlloc(&host_buf, 64 * 256 * 2, cudaHostAllocDefault));
  a = gb_args(&b, HR_MOE_DW_FP32, 1000);
  for(mi = 0; mi < 2; mi++) {
    const hr_mode m = modes[mi];
    x = a; x.dy = NULL; expect_refused(&b, x, sms, m, "dy NULL");
    x = a; x.dx = NULL; expect_refused(&b, x, sms, m, "dx NULL");
    x = a; x.dw1 = NULL; expect_refused(&b, x, sms, m, "dw1 NULL");
    x = a; x.dw2 = NULL; expect_refused(&b, x, sms, m, "dw2 NULL");
    x = a; x.dtopk_weights = NULL; expect_refused(&b, x, sms, m, "dtopk_weights NULL");
    x = a; x.dw_dtype = 2; expect_refused(&b, x, sms, m, "dw_dtype 2");
    x = a; x.dw_dtype = -1; expect_refused(&b, x, sms, m, "dw_dtype -1");
    x = a; x.dy = (const char *)a.dy + 2; expect_refused(&b, x, sms, m, "dy misaligned");
    x = a; x.dx = (char *)a.dx + 2; expect_refused(&b, x, sms, m, "dx misaligned");
    x = a; x.dw1 = (char *)a.dw1 + 4; expect_refused(&b, x, sms, m, "dw1 misaligned");
    x = a; x.dw2 = (char *)a.dw2 + 8; expect_refused(&b, x, sms, m, "dw2 misaligned");
    x = a; x.dtopk_weights = (float *)((char *)a.dtopk_weights + 2);
    expect_refused(&b, x, sms, m, "dtopk_weights misaligned");
    x = a; x.dy = host_buf; expect_refused(&b, x, sms, m, "dy in pinned host memory");
    x = a; x.fwd.tokens = 0; expect_refused(&b, x, sms, m, "tokens 0");
    x = a; x.fwd.tokens = 65; expect_refused(&b, x, sms, m, "tokens over max_tokens");
    x = a; x.fwd.tokens = -1; expect_refused(&b, x, sms, m, "tokens -1");
    x = a; x.fwd.experts = 16; expect_refused(&b, x, sms, m, "experts differ");
    x = a; x.fwd.hidden = 512; expect_refused(&b, x, sms, m, "hidden differs");
    x = a; x.fwd.x = NULL; expect_refused(&b, x, sms, m, "x NULL");
    x = a; x.fwd.w1 = NULL; expect_refused(&b, x, sms, m, "w1 NULL");
    x = a; x.fwd.topk_ids = NULL; expect_refused(&b, x, sms, m, "ids NULL");
    x = a; x.fwd.timeout_ms = -1; expect_refused(&b, x, sms, m, "negative timeout");
    x = a; x.fwd.gate_up = (float *)((char *)b.dw1 + 4);
    expect_refused(&b, x, sms, m, "gate_up misaligned");
    x = a; x.fwd.gate_up = host_buf; expect_refused(&b, x, sms, m, "gate_up in pinned host memory");
    expect_refused(&b, a, 0, m, "grid 0");
    expect_refused(&b, a, -1, m, "grid -1");
    expect_refused(&b, a, sms + 1, m, "grid over the SMs");
  }
  gb_poison(&b);
  GT_EXPECT(hr_moe_backward_grid(g.m, sms, HR_MODE_COUNT, &a, g.stream) == HR_EINVAL,
            "unknown mode");
  GT_EXPECT(hr_moe_backward_grid(g.m, sms, HR_MODE_HEADROOM, NULL, g.stream) ==
                HR_EINVAL, "NULL args");
  GT_EXPECT(hr_moe_backward_grid(NULL, sms, HR_MODE_HEADROOM, &a, g.stream) ==
                HR_EINVAL, "NULL context");
  GT_EXPECT(hr_moe_backward(g.m, NULL, &a, g.stream) == HR_EINVAL, "NULL lease");
  GT_EXPECT(hr_moe_sync(g.m) == HR_OK, "sync after the refusals");
  GT_EXPECT(gb_untouched(&b), "something was launched by a refused call");
  cudaFreeHost(host_buf);

  /* And the arguments it was refusing around work: y given (not read),
   * the default timeout, grid 1. */
  a.fwd.y = g.y;
  a.fwd.timeout_ms = 0;
  gb_poison(&b);
  rc = hr_moe_backward_grid(g.m, 1, HR_MODE_HEADROOM, &a, g.stream);
  GT_EXPECT(rc == HR_OK, "grid 1 with y set: %s", hr_strerror(rc));
  rc = hr_moe_sync(g.m);
  GT_EXPECT(rc == HR_OK, "sync: %s", hr_strerror(rc));
  GT_EXPECT(gb_nonfinite(&b, HR_MOE_DW_FP32) == 0, "grid 1: outputs not written");
  gb_free(&b);
  gt_moe_free(&g);
}

/* ---- 5. forward and backward on one context ------------------------------------ */

static void interleaved(void)
{
  gt_moe g;
  gb b;
  gb_snap grads;
  uint16_t *y0;
  size_t d[4], ybytes;
  int sms, rc;

  gt_moe_init(&g, &gt_shapes[GT_QWEN3], 128);
  gb_init(&b, &g);
  sms = hr_moe_sms(g.m);
  gt_route_random(&g, 128);
  gb_fresh_dy(&b);
  ybytes = (size_t)g.T * g.s.H * 2;
  y0 = malloc(ybytes);
  snap_alloc(&b, &grads);

  rc = gt_run(&g, sms, HR_MODE_HEADROOM, 2, TIMEOUT_MS);
  GT_EXPECT(rc == HR_OK, "forward: %s", hr_strerror(rc));
  gt_expect_correct(&g, "forward first");
  memcpy(y0, g.y_h, ybytes);

  rc = gb_run(&b, sms, HR_MODE_HEADROOM, HR_MOE_DW_FP32, TIMEOUT_MS);
  GT_EXPECT(rc == HR_OK, "backward after a forward: %s", hr_strerror(rc));
  GT_EXPECT(gb_nonfinite(&b, HR_MOE_DW_FP32) == 0, "backward outputs");
  snap_take(&b, &grads, HR_MOE_DW_FP32);

  rc = gt_run(&g, sms, HR_MODE_HEADROOM, 2, TIMEOUT_MS);
  GT_EXPECT(rc == HR_OK && memcmp(y0, g.y_h, ybytes) == 0,
            "forward after a backward: %s, y %s", hr_strerror(rc),
            memcmp(y0, g.y_h, ybytes) ? "differs" : "same");
  rc = gb_run(&b, sms, HR_MODE_AGNOSTIC, HR_MOE_DW_FP32, TIMEOUT_MS);
  GT_EXPECT(rc == HR_OK && snap_diff(&b, &grads, d) == 0,
            "agnostic backward after a forward: %s", hr_strerror(rc));
  rc = gt_run(&g, sms, HR_MODE_AGNOSTIC, 1, TIMEOUT_MS);
  GT_EXPECT(rc == HR_OK && memcmp(y0, g.y_h, ybytes) == 0,
            "agnostic forward after a backward: %s", hr_strerror(rc));
  rc = gb_run(&b, sms, HR_MODE_HEADROOM, HR_MOE_DW_BF16, TIMEOUT_MS);
  GT_EXPECT(rc == HR_OK, "bf16 backward: %s", hr_strerror(rc));
  rc = gt_run(&g, sms, HR_MODE_HEADROOM, 2, TIMEOUT_MS);
  GT_EXPECT(rc == HR_OK && memcmp(y0, g.y_h, ybytes) == 0,
            "forward after a bf16 backward: %s", hr_strerror(rc));

  /* Queued back to back, no host wait between: forward, backward,
   * forward; the context orders them. */
  {
    hr_moe_args fa = gt_args(&g, TIMEOUT_MS);
    hr_moe_grad_args ba = gb_args(&b, HR_MOE_DW_FP32, TIMEOUT_MS);
    cudaStream_t st = (cudaStream_t)g.stream;
    GT_CUDA(cudaMemsetAsync(g.y, 0xff, ybytes, st));
    gb_poison(&b);
    rc = hr_moe_forward_grid(g.m, sms, HR_MODE_HEADROOM, 2, &fa, st);
    GT_EXPECT(rc == HR_OK, "queued forward: %s", hr_strerror(rc));
    rc = hr_moe_backward_grid(g.m, sms, HR_MODE_HEADROOM, &ba, st);
    GT_EXPECT(rc == HR_OK, "queued backward: %s", hr_strerror(rc));
    rc = hr_moe_forward_agnostic_grid(g.m, sms, &fa, st);
    GT_EXPECT(rc == HR_OK, "queued agnostic forward: %s", hr_strerror(rc));
    rc = hr_moe_sync(g.m);
    GT_EXPECT(rc == HR_OK, "sync of the queue: %s", hr_strerror(rc));
    GT_CUDA(cudaStreamSynchronize(st));
    GT_CUDA(cudaMemcpy(g.y_h, g.y, ybytes, cudaMemcpyDeviceToHost));
    GT_EXPECT(memcmp(y0, g.y_h, ybytes) == 0, "queued: y differs");
    GT_EXPECT(snap_diff(&b, &grads, d) == 0, "queued: gradients differ "
              "(words dx %zu dW1 %zu dW2 %zu d(w) %zu)", d[0], d[1], d[2], d[3]);
    printf("  forward, backward, forward queued on one context: y %s, "
           "gradients %s\n", memcmp(y0, g.y_h, ybytes) ? "DIFFERENT" : "identical",
           snap_diff(&b, &grads, d) ? "DIFFERENT" : "identical");
  }

  snap_free(&grads);
  free(y0);
  gb_free(&b);
  gt_moe_free(&g);
}

/* ---- 6. g and u kept by the forward ------------------------------------------- */

/* The forward into y with gate_up = gu (poisoned first), synchronized; y
 * copied to y_h. The launch's or hr_moe_sync's code. */
static int kept_forward(gt_moe *g, hr_mode mode, float *gu, size_t gubytes)
{
  cudaStream_t st = (cudaStream_t)g->stream;
  const int sms = hr_moe_sms(g->m);
  hr_moe_args fa = gt_args(g, TIMEOUT_MS);
  int rc;

  fa.gate_up = gu;
  GT_CUDA(cudaMemsetAsync(gu, 0xff, gubytes, st));
  GT_CUDA(cudaMemsetAsync(g->y, 0xff, (size_t)g->T * g->s.H * 2, st));
  rc = mode == HR_MODE_AGNOSTIC ? hr_moe_forward_agnostic_grid(g->m, sms, &fa, st)
                                : hr_moe_forward_grid(g->m, sms, mode, 2, &fa, st);
  if(rc == HR_OK)
    rc = hr_moe_sync(g->m);
  GT_CUDA(cudaStreamSynchronize(st));
  GT_CUDA(cudaMemcpy(g->y_h, g->y, (size_t)g->T * g->s.H * 2, cudaMemcpyDeviceToHost));
  return rc;
}

/* One routing: the forwards keeping g and u (barrier and agnostic, whose
 * tiles differ at some T) give y as without and the same g and u, every
 * valid pair's row written and no other; the backwards reading them
 * (barrier at two grids, agnostic) give the recomputing backward's
 * results, bitwise: the sums are GEMM1's in the same K order. */
static void kept_case(gb *b, float *gu, float *gu2)
{
  gt_moe *g = b->g;
  const int sms = hr_moe_sms(g->m), T = g->T;
  const size_t H = g->s.H, I = g->s.I, k = g->s.k;
  const size_t gubytes = (size_t)T * k * 2 * I * 4, ybytes = (size_t)T * H * 2;
  const int grids_[] = { sms, 7 };
  const hr_mode bmodes[] = { HR_MODE_HEADROOM, HR_MODE_HEADROOM, HR_MODE_AGNOSTIC };
  uint16_t *y0 = malloc(ybytes);
  gb_snap ref;
  size_t d[4], bad, rest, diff, gdiff, bsum = 0;
  float ms_re, ms_kept = -1;
  int rc, npairs = 0, i;

  GT_EXPECT(y0 != NULL, "host memory");
  if(!y0)
    return;
  for(i = 0; i < T * (int)k; i++)
    npairs += valid_id(g, g->ids_h[i]);
  gb_fresh_dy(b);
  snap_alloc(b, &ref);
  rc = gb_run(b, sms, HR_MODE_HEADROOM, HR_MOE_DW_FP32, TIMEOUT_MS);
  GT_EXPECT(rc == HR_OK, "%s T=%d: the recomputing backward: %s", g->s.name, T,
            hr_strerror(rc));
  ms_re = b->last_ms;
  snap_take(b, &ref, HR_MOE_DW_FP32);
  rc = gt_run(g, sms, HR_MODE_HEADROOM, 2, TIMEOUT_MS);
  GT_EXPECT(rc == HR_OK, "%s T=%d: forward: %s", g->s.name, T, hr_strerror(rc));
  memcpy(y0, g->y_h, ybytes);

  rc = kept_forward(g, HR_MODE_HEADROOM, gu, gubytes);
  GT_EXPECT(rc == HR_OK && memcmp(y0, g->y_h, ybytes) == 0, "%s T=%d: forward keeping "
            "g, u: %s, y %s", g->s.name, T, hr_strerror(rc),
            memcmp(y0, g->y_h, ybytes) ? "differs" : "the same");
  GT_CUDA(gt_dev_count_nonfinite(gu, (size_t)npairs * 2 * I, 0, g->stream, &bad));
  GT_CUDA(gt_dev_count_nonfinite(gu + (size_t)npairs * 2 * I,
                                 ((size_t)T * k - npairs) * 2 * I, 0, g->stream, &rest));
  GT_EXPECT(bad == 0, "%s T=%d: %zu g, u values of the %d pairs not written", g->s.name,
            T, bad, npairs);
  GT_EXPECT(rest == ((size_t)T * k - npairs) * 2 * I, "%s T=%d: %zu values written past "
            "the %d pairs' rows", g->s.name, T, ((size_t)T * k - npairs) * 2 * I - rest,
            npairs);
  rc = kept_forward(g, HR_MODE_AGNOSTIC, gu2, gubytes);
  GT_CUDA(gt_dev_count_diff(gu, gu2, gubytes, g->stream, &gdiff));
  GT_EXPECT(rc == HR_OK && gdiff == 0 && memcmp(y0, g->y_h, ybytes) == 0,
            "%s T=%d: the agnostic forward keeping g, u: %s, %zu words of g, u "
            "differ from the barrier kernel's, y %s", g->s.name, T, hr_strerror(rc),
            gdiff, memcmp(y0, g->y_h, ybytes) ? "differs" : "the same");

  for(i = 0; i < 3; i++) {
    const int grid = i < 2 ? grids_[i] : sms;
    rc = gb_run_gu(b, grid, bmodes[i], HR_MOE_DW_FP32, TIMEOUT_MS, gu);
    GT_EXPECT(rc == HR_OK, "%s T=%d: backward reading g, u: %s", g->s.name, T,
              hr_strerror(rc));
    if(i == 0)
      ms_kept = b->last_ms;
    diff = snap_diff(b, &ref, d);
    bsum += diff;
    GT_EXPECT(diff == 0, "%s T=%d grid %d %s: reading g, u differs from recomputing: "
              "words dx %zu dW1 %zu dW2 %zu d(w) %zu", g->s.name, T, grid,
              mode_name(bmodes[i]), d[0], d[1], d[2], d[3]);
  }
  printf("  %-14s T=%-5d %6d pairs: y the same keeping g, u: %s; agnostic g, u the "
         "same: %s; backward reading them = recomputing: %s (%.2f against %.2f ms)\n",
         g->s.name, T, npairs, memcmp(y0, g->y_h, ybytes) ? "NO" : "yes",
         gdiff == 0 ? "yes" : "NO", bsum ? "NO" : "yes", ms_kept, ms_re);
  snap_free(&ref);
  free(y0);
}

/* Every forward tile's epilogue (the tile follows the pairs per expert:
 * docs/kernels.md) and both of the big tile's token paths. */
static void kept(void)
{
  static const struct { int shape, max_T, T[6], n; } cases[] = {
    { GT_SMALL, 300, { 300, 7 }, 2 },
    { GT_QWEN3, 4096, { 64, 300, 700, 1024, 1200, 4096 }, 6 },
    { GT_DSV3, 3072, { 1024, 3072 }, 2 },
  };
  size_t c;
  int i;

  for(c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
    const gt_shape *s = &gt_shapes[cases[c].shape];
    const size_t gubytes = (size_t)cases[c].max_T * s->k * 2 * s->I * 4;
    gt_moe g;
    gb b;
    float *gu, *gu2;
    gt_moe_init(&g, s, cases[c].max_T);
    gb_init(&b, &g);
    GT_CUDA(cudaMalloc((void **)&gu, gubytes));
    GT_CUDA(cudaMalloc((void **)&gu2, gubytes));
    for(i = 0; i < cases[c].n; i++) {
      gt_route_random(&g, cases[c].T[i]);
      kept_case(&b, gu, gu2);
    }
    if(cases[c].shape == GT_QWEN3) {
      route_bad_ids(&g, 300);
      kept_case(&b, gu, gu2);
    }
    cudaFree(gu);
    cudaFree(gu2);
    gb_free(&b);
    gt_moe_free(&g);
  }
}

int main(void)
{
  double t0;
  size_t i;

  gt_require_gpu(NAME);
  gt_seed(NAME);
  t0 = gt_now_ms();
  printf("1. correctness against the CPU reference\n");
  for(i = 0; i < sizeof(plans) / sizeof(plans[0]); i++)
    correctness(&plans[i]);
  printf("2. grids (%.1f s)\n", (gt_now_ms() - t0) / 1e3);
  grids();
  printf("3. timeout and abort (%.1f s)\n", (gt_now_ms() - t0) / 1e3);
  timeouts();
  printf("4. bad arguments (%.1f s)\n", (gt_now_ms() - t0) / 1e3);
  bad_args();
  printf("5. forward and backward interleaved (%.1f s)\n", (gt_now_ms() - t0) / 1e3);
  interleaved();
  printf("6. g and u kept by the forward (%.1f s)\n", (gt_now_ms() - t0) / 1e3);
  kept();
  printf("%s: %.1f s\n", NAME, (gt_now_ms() - t0) / 1e3);
  return gt_finish(NAME);
}
