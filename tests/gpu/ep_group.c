/*
 * ep_group.c: R virtual ranks of hr_moe_ep_* in one process (ep_group.h).
 */
#include "ep_group.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

static int ag_threads(void *ctx, const void *send, void *recv, size_t n)
{
  ep_rank *r = (ep_rank *)ctx;
  ep_group *G = r->G;
  if(n > 512)
    return HR_EINVAL;
  memcpy(G->buf + (size_t)r->rank * n, send, n);
  pthread_barrier_wait(&G->bar);
  memcpy(recv, G->buf, (size_t)G->R * n);
  pthread_barrier_wait(&G->bar);
  return 0;
}

static void *create_main(void *arg)
{
  ep_rank *r = (ep_rank *)arg;
  ep_group *G = r->G;
  const hr_moe_ep_bootstrap b = { ag_threads, r, HR_MOE_EP_EXCHANGE_POINTERS, G->backward };
  hr_moe_shape sh;
  sh.experts = G->s.E;
  sh.hidden = G->s.H;
  sh.inter = G->s.I;
  sh.topk = G->s.k;
  sh.max_tokens = G->cap;
  r->rc = hr_moe_ep_create(&G->ep[r->rank], 0, &sh, r->rank, G->R, &b);
  return NULL;
}

void group_create(ep_group *G, const gt_shape *s, int R, int cap, int sms, int backward)
{
  pthread_t th[HR_MOE_EP_MAX_RANKS];
  ep_rank r[HR_MOE_EP_MAX_RANKS];
  uint64_t peer = 0, local = 0;
  hr_moe_shape sh = { s->E, s->H, s->I, s->k, cap };
  int i;

  memset(G, 0, sizeof(*G));
  G->R = R;
  G->cap = cap;
  G->sms = sms;
  G->s = *s;
  G->backward = backward;
  G->mode = HR_MODE_HEADROOM;
  if(backward)
    hr_moe_ep_memory_backward(&sh, R, &peer, &local);
  else
    hr_moe_ep_memory(&sh, R, &peer, &local);
  pthread_barrier_init(&G->bar, NULL, (unsigned)R);
  for(i = 0; i < R; i++) {
    r[i].G = G;
    r[i].rank = i;
    r[i].rc = -1;
    pthread_create(&th[i], NULL, create_main, &r[i]);
  }
  for(i = 0; i < R; i++)
    pthread_join(th[i], NULL);
  pthread_barrier_destroy(&G->bar);
  for(i = 0; i < R; i++) {
    if(r[i].rc != HR_OK) {
      fprintf(stderr, "FAIL: hr_moe_ep_create(%s, rank %d of %d): %s\n", s->name, i, R,
              hr_strerror(r[i].rc));
      exit(1);
    }
    GT_CUDA(cudaStreamCreateWithFlags((cudaStream_t *)&G->st[i], cudaStreamNonBlocking));
  }
  GT_CUDA(cudaMalloc((void **)&G->y, (size_t)R * cap * s->H * 2));
  G->y_h = malloc((size_t)R * cap * s->H * 2);
  G->y_ref = malloc((size_t)R * cap * s->H * 2);
  if(!G->y_h || !G->y_ref) {
    fprintf(stderr, "FAIL: out of host memory\n");
    exit(1);
  }
  printf("%s, %d ranks of max_tokens %d%s: %.1f MB peer-visible + %.1f MB local a rank\n",
         s->name, R, cap, backward ? " (with the backward)" : "", peer / 1e6, local / 1e6);
}

void group_free(ep_group *G)
{
  int i;
  for(i = 0; i < G->R; i++) {
    hr_moe_ep_sync(G->ep[i]);
  }
  for(i = 0; i < G->R; i++) {          /* every rank synced: then destroy */
    hr_moe_ep_destroy(G->ep[i]);
    cudaStreamDestroy((cudaStream_t)G->st[i]);
  }
  cudaFree(G->y);
  free(G->y_h);
  free(G->y_ref);
}

hr_moe_args rank_args(const gt_moe *g, const ep_group *G, const int *cnt, int r,
                      int timeout_ms)
{
  const gt_shape *s = &g->s;
  const int el = s->E / G->R;
  hr_moe_args a;
  const int off = rank_first(cnt, r);
  memset(&a, 0, sizeof(a));
  a.tokens = cnt[r];
  a.experts = s->E;
  a.hidden = s->H;
  a.inter = s->I;
  a.topk = s->k;
  if(cnt[r] > 0) {                     /* a rank without tokens: NULL */
    a.x = g->x + (size_t)off * s->H;
    a.topk_ids = g->ids + (size_t)off * s->k;
    a.topk_weights = g->wts + (size_t)off * s->k;
    a.y = G->y + (size_t)off * s->H;
  }
  a.w1 = g->w1 + (size_t)r * el * 2 * s->I * s->H;
  a.w2 = g->w2 + (size_t)r * el * s->H * s->I;
  a.timeout_ms = timeout_ms;
  return a;
}

int rank_first(const int *cnt, int r)
{
  int off = 0, i;
  for(i = 0; i < r; i++)
    off += cnt[i];
  return off;
}

void split(const ep_group *G, int T, int last_empty, int *cnt)
{
  const int n = last_empty && G->R > 1 ? G->R - 1 : G->R;
  int r;
  for(r = 0; r < G->R; r++)
    cnt[r] = r < n ? T / n + (r < T % n) : 0;
}

/* ---- the forward against hr_moe_forward's -------------------------------- */

double run_ranks(const gt_moe *g, ep_group *G, const int *cnt, unsigned mask, int grid,
                 int timeout_ms, int block_ms, int *rc)
{
  double t0;
  int r;
  GT_CUDA(cudaMemset(G->y, 0xff, (size_t)g->T * g->s.H * 2));     /* NaN */
  GT_CUDA(cudaDeviceSynchronize());
  t0 = gt_now_ms();
  if(block_ms > 0)
    GT_EXPECT(gt_spin_launch(block_ms, G->st[G->R - 1]) == 0, "the blocking kernel");
  for(r = 0; r < G->R; r++) {
    hr_moe_args a = rank_args(g, G, cnt, r, timeout_ms);
    rc[r] = (mask >> r) & 1u ? hr_moe_ep_forward_grid(G->ep[r], grid, G->mode, &a, G->st[r])
                             : HR_OK;
  }
  for(r = 0; r < G->R; r++)
    if(((mask >> r) & 1u) && rc[r] == HR_OK)
      rc[r] = hr_moe_ep_sync(G->ep[r]);
  return gt_now_ms() - t0;
}

int reference(gt_moe *g, ep_group *G, const char *what)
{
  const int rc = gt_run(g, G->sms, HR_MODE_HEADROOM, 1, EP_TIMEOUT_MS);
  GT_EXPECT(rc == HR_OK, "%s %s T=%d: the single-GPU reference: %s", g->s.name, what, g->T,
            hr_strerror(rc));
  memcpy(G->y_ref, g->y_h, (size_t)g->T * g->s.H * 2);
  return rc == HR_OK;
}

int check_y(const gt_moe *g, ep_group *G, int grid, const char *what, double ms)
{
  const size_t n = (size_t)g->T * g->s.H;
  const char *mode = G->mode == HR_MODE_AGNOSTIC ? " agnostic" : "";
  size_t i, diff = 0, first = 0, bad = 0;

  GT_CUDA(cudaMemcpy(G->y_h, G->y, n * 2, cudaMemcpyDeviceToHost));
  for(i = 0; i < n; i++) {
    const uint16_t v = G->y_h[i];
    if((v & 0x7f80) == 0x7f80)
      bad++;                           /* NaN or Inf: not written */
    if(v != G->y_ref[i] && diff++ == 0)
      first = i;
  }
  GT_EXPECT(diff == 0 && bad == 0,
            "%s R=%d grid=%d%s T=%d %s: %zu of %zu elements differ from hr_moe_forward's "
            "(first: token %zu, column %zu: 0x%04x, not 0x%04x), %zu not finite",
            g->s.name, G->R, grid, mode, g->T, what, diff, n, first / g->s.H, first % g->s.H,
            G->y_h[first], G->y_ref[first], bad);
  if(diff == 0 && bad == 0)
    printf("ok: %s R=%d grid=%d%s T=%d %s: y bitwise hr_moe_forward's (%.2f ms, every rank)\n",
           g->s.name, G->R, grid, mode, g->T, what, ms);
  return diff == 0 && bad == 0;
}

void expect_bitwise(gt_moe *g, ep_group *G, const int *cnt, int grid, const char *what)
{
  int rc[HR_MOE_EP_MAX_RANKS], r, ok = 1;
  double ms = run_ranks(g, G, cnt, (1u << G->R) - 1u, grid, EP_TIMEOUT_MS, 0, rc);

  for(r = 0; r < G->R; r++) {
    GT_EXPECT(rc[r] == HR_OK, "%s R=%d grid=%d T=%d %s: rank %d: %s", g->s.name, G->R, grid,
              g->T, what, r, hr_strerror(rc[r]));
    ok &= rc[r] == HR_OK;
  }
  if(ok)
    check_y(g, G, grid, what, ms);
}

/* ---- routings ---------------------------------------------------------- */

static void upload_ids(gt_moe *g)
{
  GT_CUDA(cudaMemcpy(g->ids, g->ids_h, (size_t)g->T * g->s.k * 4, cudaMemcpyHostToDevice));
}

/* Every slot to rank d's experts (repeats where E/R < k). */
void route_to_rank(gt_moe *g, int T, int R, int d)
{
  const int k = g->s.k, el = g->s.E / R;
  int t, j;
  gt_route_random(g, T);
  for(t = 0; t < T; t++)
    for(j = 0; j < k; j++)
      g->ids_h[(size_t)t * k + j] = d * el + (int)((t + j) % el);
  upload_ids(g);
}

/* Random experts, none of rank d's. */
void route_avoiding(gt_moe *g, int T, int R, int d)
{
  const int k = g->s.k, el = g->s.E / R;
  size_t i;
  gt_route_random(g, T);
  for(i = 0; i < (size_t)T * k; i++) {
    int e = g->ids_h[i];
    if(e / el == d)
      e = (e + el) % g->s.E;           /* the next rank's expert */
    g->ids_h[i] = e;
  }
  upload_ids(g);
}

/* Random, with a quarter of the slots outside [0, E). */
void route_bad_ids(gt_moe *g, int T)
{
  static const int bad[] = { -1, 0, 7, INT_MIN, INT_MAX };
  size_t i;
  gt_route_random(g, T);
  for(i = 0; i < (size_t)T * g->s.k; i++) {
    if(gt_rand() % 4 == 0) {
      const int b = bad[gt_rand() % 5];
      g->ids_h[i] = b == 0 ? g->s.E : b == 7 ? g->s.E + 7 : b;
    }
  }
  upload_ids(g);
}

/* Every rank in `mask` ended with `code`, failed_rank in `from` (a mask),
 * at `wait`, having waited for rank `waited` (-1: any), noticed at
 * `noticed` (-1: any). */
void expect_failure(ep_group *G, const int *rc, unsigned mask, int code, unsigned from,
                    int wait, int waited, int noticed, const char *what)
{
  int r;
  for(r = 0; r < G->R; r++) {
    hr_moe_ep_failure f;
    int lf;
    if(!((mask >> r) & 1u))
      continue;
    GT_EXPECT(rc[r] == code, "%s: rank %d: %s, not %s", what, r, hr_strerror(rc[r]),
              hr_strerror(code));
    lf = hr_moe_ep_last_failure(G->ep[r], &f);
    GT_EXPECT(lf == HR_OK, "%s: rank %d: hr_moe_ep_last_failure: %s", what, r, hr_strerror(lf));
    if(lf != HR_OK)
      continue;
    printf("%s: rank %d: %s: rank %d failed at wait %d (waited for %d), noticed here at %d, "
           "epoch %u\n", what, r, hr_strerror(f.code), f.failed_rank, f.wait, f.waited_for,
           f.noticed_wait, f.epoch);
    GT_EXPECT(f.code == code, "%s: rank %d: failure code %s", what, r, hr_strerror(f.code));
    GT_EXPECT(f.failed_rank >= 0 && ((from >> f.failed_rank) & 1u),
              "%s: rank %d: failed_rank %d", what, r, f.failed_rank);
    GT_EXPECT(wait < 0 || f.wait == wait, "%s: rank %d: failed at wait %d, not %d", what, r,
              f.wait, wait);
    GT_EXPECT(waited < 0 || f.waited_for == waited, "%s: rank %d: waited for %d, not %d", what,
              r, f.waited_for, waited);
    GT_EXPECT(noticed < 0 || f.noticed_wait == noticed, "%s: rank %d: noticed at %d, not %d",
              what, r, f.noticed_wait, noticed);
  }
}

int ep_test_start(const char *name, const char *criterion)
{
  struct cudaDeviceProp prop;

  gt_require_gpu(name);
  gt_seed(name);
  GT_CUDA(cudaGetDeviceProperties(&prop, 0));
  printf("%s: R virtual ranks on GPU 0, each a stream and grid <= %d / R; criterion: %s\n",
         name, prop.multiProcessorCount, criterion);
  return prop.multiProcessorCount;
}

void ep_sweep(int sms, int qwen_cap, ep_case_fn run)
{
  int R;

  for(R = 1; R <= HR_MOE_EP_MAX_RANKS; R *= 2) {
    const int share = sms / R;
    const int small_grids[] = { share, share / 3 > 0 ? share / 3 : 1, 1 };
    const int qwen_grids[] = { share, share / 2 > 0 ? share / 2 : 1 };
    run(GT_SMALL, R, 256, sms, small_grids, 3);
    run(GT_QWEN3, R, qwen_cap, sms, qwen_grids, 2);
  }
}
