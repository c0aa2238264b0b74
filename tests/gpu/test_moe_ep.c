/*
 * test_moe_ep.c: the expert-parallel forward (hr_moe_ep_*) with R virtual
 * ranks in this process on GPU 0, each on a non-blocking stream of its own
 * with grid <= SMs / R (so all of them are resident at once), against the
 * single-GPU kernel.
 *
 * The criterion: y BITWISE equal to hr_moe_forward_grid's over the same
 * global W1, W2, x, ids and weights (rank r holds experts r E/R .. and
 * the tokens of its share; its y rows are compared with the same rows of
 * the single-GPU y), with no element left unwritten (y is NaN before).
 * For R = 1, 2, 4, 8 and several grids per rank, on the small shape
 * (E 8, H 256, I 512, k 2) and a Qwen3-30B-A3B one (E 128, H 2048,
 * I 768, k 8):
 *   - random routing, every rank full (max_tokens each);
 *   - few tokens, shared unevenly, the last rank with none (NULL x, y);
 *   - every slot of every token routed to one rank's experts;
 *   - routing that gives rank 0's experts no token;
 *   - ids outside [0, E) (-1, E, E + 7, INT_MIN, INT_MAX) in a quarter
 *     of the slots;
 *   - one token in all.
 * Then the failures (small shape, R = 4, timeout 300 ms), each followed by
 * a normal epoch on every rank that must give y bitwise again:
 *   - one rank's call refused for its arguments (so never launched): the
 *     others end with HR_EBARRIER_TIMEOUT at the dispatch wait, naming
 *     that rank as the one waited for, within a few timeouts;
 *   - one rank launched late, past the timeout: the others as above, and
 *     the late one leaves at its start with the same failure;
 *   - one rank's stream blocked behind a 1.5 s kernel: the same;
 *   - hr_moe_ep_abort on one rank while all wait for a missing one: every
 *     rank ends with HR_EABORTED naming the aborted rank, long before the
 *     (10 s) timeout.
 * And the launch's argument checks on a real context (grid 0, too many
 * tokens, agnostic mode), made on every rank so the epochs stay in step.
 */
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "gpu_util.h"

#define NAME "test_moe_ep"
#define TIMEOUT_MS 5000
#define FAIL_TIMEOUT_MS 300

/* ---- a group of virtual ranks ------------------------------------------ */

typedef struct ep_group {
  int R, cap, sms;
  gt_shape s;
  hr_moe_ep *ep[HR_MOE_EP_MAX_RANKS];
  void *st[HR_MOE_EP_MAX_RANKS];
  uint16_t *y;                /* [R cap, H]: every rank's y rows in order */
  uint16_t *y_h, *y_ref;
  /* the bootstrap: an allgather of threads */
  pthread_barrier_t bar;
  unsigned char buf[HR_MOE_EP_MAX_RANKS * 512];
} ep_group;

typedef struct ep_rank {
  ep_group *G;
  int rank, rc;
} ep_rank;

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
  const hr_moe_ep_bootstrap b = { ag_threads, r, HR_MOE_EP_EXCHANGE_POINTERS };
  hr_moe_shape sh;
  sh.experts = G->s.E;
  sh.hidden = G->s.H;
  sh.inter = G->s.I;
  sh.topk = G->s.k;
  sh.max_tokens = G->cap;
  r->rc = hr_moe_ep_create(&G->ep[r->rank], 0, &sh, r->rank, G->R, &b);
  return NULL;
}

/* R ranks of shape s, max_tokens cap each; exits on failure. */
static void group_create(ep_group *G, const gt_shape *s, int R, int cap, int sms)
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
  printf("%s: %s, %d ranks of max_tokens %d: %.1f MB peer-visible + %.1f MB local a rank\n",
         NAME, s->name, R, cap, peer / 1e6, local / 1e6);
}

static void group_free(ep_group *G)
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

/* Rank r's args: cnt[r] of g's tokens from off[r], its experts' weights. */
static hr_moe_args rank_args(const gt_moe *g, const ep_group *G, const int *cnt, int r,
                             int timeout_ms)
{
  const gt_shape *s = &g->s;
  const int el = s->E / G->R;
  hr_moe_args a;
  int off = 0, i;
  for(i = 0; i < r; i++)
    off += cnt[i];
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

/* Launch the ranks in `mask` (their args from cnt), then wait for them:
 * rc[r], and the ms from the first launch to the last wait's end. */
/* Every rank in `mask` launches an epoch, then syncs; the ms it took.
 * block_ms > 0: the last rank's stream first gets a kernel that holds it
 * that long (queued past the device-wide sync here, which would wait for
 * it). */
static double run_ranks(const gt_moe *g, ep_group *G, const int *cnt, unsigned mask, int grid,
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
    rc[r] = (mask >> r) & 1u ? hr_moe_ep_forward_grid(G->ep[r], grid, HR_MODE_HEADROOM, &a,
                                                      G->st[r])
                             : HR_OK;
  }
  for(r = 0; r < G->R; r++)
    if(((mask >> r) & 1u) && rc[r] == HR_OK)
      rc[r] = hr_moe_ep_sync(G->ep[r]);
  return gt_now_ms() - t0;
}

/* g's T tokens shared as evenly as can be, or with the last rank empty. */
static void split(const ep_group *G, int T, int last_empty, int *cnt)
{
  const int n = last_empty && G->R > 1 ? G->R - 1 : G->R;
  int r;
  for(r = 0; r < G->R; r++)
    cnt[r] = r < n ? T / n + (r < T % n) : 0;
}

/* The single-GPU y for g's inputs, into G->y_ref. */
static int reference(gt_moe *g, ep_group *G, const char *what)
{
  const int rc = gt_run(g, G->sms, HR_MODE_HEADROOM, 1, TIMEOUT_MS);
  GT_EXPECT(rc == HR_OK, "%s %s T=%d: the single-GPU reference: %s", g->s.name, what, g->T,
            hr_strerror(rc));
  memcpy(G->y_ref, g->y_h, (size_t)g->T * g->s.H * 2);
  return rc == HR_OK;
}

/* Every rank's launch of an epoch, y against the reference. */
static void expect_bitwise(gt_moe *g, ep_group *G, const int *cnt, int grid, const char *what)
{
  const size_t n = (size_t)g->T * g->s.H;
  int rc[HR_MOE_EP_MAX_RANKS], r, ok = 1;
  size_t i, diff = 0, first = 0, bad = 0;
  double ms = run_ranks(g, G, cnt, (1u << G->R) - 1u, grid, TIMEOUT_MS, 0, rc);

  for(r = 0; r < G->R; r++) {
    GT_EXPECT(rc[r] == HR_OK, "%s R=%d grid=%d T=%d %s: rank %d: %s", g->s.name, G->R, grid,
              g->T, what, r, hr_strerror(rc[r]));
    ok &= rc[r] == HR_OK;
  }
  if(!ok)
    return;
  GT_CUDA(cudaMemcpy(G->y_h, G->y, n * 2, cudaMemcpyDeviceToHost));
  for(i = 0; i < n; i++) {
    const uint16_t v = G->y_h[i];
    if((v & 0x7f80) == 0x7f80)
      bad++;                           /* NaN or Inf: not written */
    if(v != G->y_ref[i] && diff++ == 0)
      first = i;
  }
  GT_EXPECT(diff == 0 && bad == 0,
            "%s R=%d grid=%d T=%d %s: %zu of %zu elements differ from hr_moe_forward's "
            "(first: token %zu, column %zu: 0x%04x, not 0x%04x), %zu not finite",
            g->s.name, G->R, grid, g->T, what, diff, n, first / g->s.H, first % g->s.H,
            G->y_h[first], G->y_ref[first], bad);
  if(diff == 0 && bad == 0)
    printf("ok: %s R=%d grid=%d T=%d %s: y bitwise hr_moe_forward's (%.2f ms, every rank)\n",
           g->s.name, G->R, grid, g->T, what, ms);
}

/* ---- routings ---------------------------------------------------------- */

static void upload_ids(gt_moe *g)
{
  GT_CUDA(cudaMemcpy(g->ids, g->ids_h, (size_t)g->T * g->s.k * 4, cudaMemcpyHostToDevice));
}

/* Every slot to rank d's experts (repeats where E/R < k). */
static void route_to_rank(gt_moe *g, int T, int R, int d)
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
static void route_avoiding(gt_moe *g, int T, int R, int d)
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
static void route_bad_ids(gt_moe *g, int T)
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

/* ---- the correctness cases ---------------------------------------------- */

static void correctness(int shape, int R, int cap, int sms, const int *grids, int ngrids)
{
  gt_moe g;
  ep_group G;
  int cnt[HR_MOE_EP_MAX_RANKS], i, T;
  char what[96];

  gt_moe_init(&g, &gt_shapes[shape], R * cap);
  group_create(&G, &gt_shapes[shape], R, cap, sms);

  /* random, every rank full, each grid */
  gt_route_random(&g, R * cap);
  split(&G, g.T, 0, cnt);
  if(reference(&g, &G, "random"))
    for(i = 0; i < ngrids; i++)
      expect_bitwise(&g, &G, cnt, grids[i], "random routing, every rank full");

  /* few tokens, the last rank with none */
  T = 5 * R + 3;
  gt_route_random(&g, T);
  split(&G, T, 1, cnt);
  if(reference(&g, &G, "uneven"))
    for(i = 0; i < ngrids; i++)
      expect_bitwise(&g, &G, cnt, grids[i], "random, uneven, last rank without tokens");

  /* everything to one rank */
  route_to_rank(&g, R * cap / 2, R, R / 2);
  split(&G, g.T, 0, cnt);
  snprintf(what, sizeof(what), "every slot to rank %d", R / 2);
  if(reference(&g, &G, what))
    expect_bitwise(&g, &G, cnt, grids[0], what);

  /* rank 0 receives nothing */
  if(R > 1) {
    route_avoiding(&g, R * cap / 2, R, 0);
    split(&G, g.T, 0, cnt);
    if(reference(&g, &G, "rank 0 gets no tokens"))
      for(i = 0; i < ngrids; i++)
        expect_bitwise(&g, &G, cnt, grids[i], "no token for rank 0's experts");
  }

  /* ids outside [0, E) */
  route_bad_ids(&g, R * cap / 2 + 1);
  split(&G, g.T, 0, cnt);
  if(reference(&g, &G, "bad ids"))
    expect_bitwise(&g, &G, cnt, grids[0], "a quarter of the ids outside [0, E)");

  /* one token in all */
  gt_route_random(&g, 1);
  split(&G, 1, 0, cnt);
  if(reference(&g, &G, "one token"))
    expect_bitwise(&g, &G, cnt, grids[ngrids - 1], "one token in all");

  group_free(&G);
  gt_moe_free(&g);
}

/* ---- the failures --------------------------------------------------------- */

/* Every rank in `mask` ended with `code`, failed_rank in `from` (a mask),
 * at `wait`, having waited for rank `waited` (-1: any), noticed at
 * `noticed` (-1: any). */
static void expect_failure(ep_group *G, const int *rc, unsigned mask, int code, unsigned from,
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
    GT_EXPECT(f.wait == wait, "%s: rank %d: failed at wait %d, not %d", what, r, f.wait, wait);
    GT_EXPECT(waited < 0 || f.waited_for == waited, "%s: rank %d: waited for %d, not %d", what,
              r, f.waited_for, waited);
    GT_EXPECT(noticed < 0 || f.noticed_wait == noticed, "%s: rank %d: noticed at %d, not %d",
              what, r, f.noticed_wait, noticed);
  }
}

static void failures(int sms)
{
  const int R = 4, cap = 64, grid = sms / R - 1;   /* room for the blocker's CTA */
  const unsigned all = (1u << R) - 1u, first3 = all & ~(1u << (R - 1));
  gt_moe g;
  ep_group G;
  int cnt[HR_MOE_EP_MAX_RANKS], rc[HR_MOE_EP_MAX_RANKS], r;
  double ms;
  hr_moe_args a;

  gt_moe_init(&g, &gt_shapes[GT_SMALL], R * cap);
  group_create(&G, &gt_shapes[GT_SMALL], R, cap, sms);
  gt_route_random(&g, R * cap);
  split(&G, g.T, 0, cnt);
  if(!reference(&g, &G, "failures")) {
    group_free(&G);
    gt_moe_free(&g);
    return;
  }
  expect_bitwise(&g, &G, cnt, grid, "before the failures");

  /* Argument checks on a real context, on every rank (an epoch each). */
  for(r = 0; r < R; r++) {
    a = rank_args(&g, &G, cnt, r, TIMEOUT_MS);
    rc[r] = hr_moe_ep_forward_grid(G.ep[r], 0, HR_MODE_HEADROOM, &a, G.st[r]);
    GT_EXPECT(rc[r] == HR_EINVAL, "grid 0: rank %d: %s", r, hr_strerror(rc[r]));
  }
  for(r = 0; r < R; r++) {
    a = rank_args(&g, &G, cnt, r, TIMEOUT_MS);
    a.tokens = cap + 1;
    rc[r] = hr_moe_ep_forward_grid(G.ep[r], grid, HR_MODE_HEADROOM, &a, G.st[r]);
    GT_EXPECT(rc[r] == HR_EINVAL, "tokens > max_tokens: rank %d: %s", r, hr_strerror(rc[r]));
  }
  for(r = 0; r < R; r++) {
    a = rank_args(&g, &G, cnt, r, TIMEOUT_MS);
    rc[r] = hr_moe_ep_forward_grid(G.ep[r], grid, HR_MODE_AGNOSTIC, &a, G.st[r]);
    GT_EXPECT(rc[r] == HR_EUNSUPPORTED, "agnostic: rank %d: %s", r, hr_strerror(rc[r]));
  }
  expect_bitwise(&g, &G, cnt, grid, "after refused calls on every rank");

  /* 1. The last rank's call refused (tokens < 0): it never launches. */
  GT_CUDA(cudaMemset(G.y, 0xff, (size_t)g.T * g.s.H * 2));
  ms = gt_now_ms();
  for(r = 0; r < R; r++) {
    a = rank_args(&g, &G, cnt, r, FAIL_TIMEOUT_MS);
    if(r == R - 1)
      a.tokens = -1;
    rc[r] = hr_moe_ep_forward_grid(G.ep[r], grid, HR_MODE_HEADROOM, &a, G.st[r]);
  }
  GT_EXPECT(rc[R - 1] == HR_EINVAL, "tokens -1: %s", hr_strerror(rc[R - 1]));
  for(r = 0; r < R - 1; r++)
    if(rc[r] == HR_OK)
      rc[r] = hr_moe_ep_sync(G.ep[r]);
  ms = gt_now_ms() - ms;
  printf("one rank never launched: the others ended after %.0f ms (timeout %d ms)\n", ms,
         FAIL_TIMEOUT_MS);
  GT_EXPECT(ms < 4 * FAIL_TIMEOUT_MS + 1000, "one rank never launched: %.0f ms", ms);
  expect_failure(&G, rc, first3, HR_EBARRIER_TIMEOUT, first3, HR_MOE_EP_WAIT_DISPATCH, R - 1,
                 HR_MOE_EP_WAIT_DISPATCH, "one rank never launched");
  expect_bitwise(&g, &G, cnt, grid, "after a rank that never launched");

  /* 2. The last rank launched late, past the others' timeout. */
  ms = run_ranks(&g, &G, cnt, first3, grid, FAIL_TIMEOUT_MS, 0, rc);
  printf("one rank late: the others ended after %.0f ms\n", ms);
  GT_EXPECT(ms < 4 * FAIL_TIMEOUT_MS + 1000, "one rank late: %.0f ms", ms);
  expect_failure(&G, rc, first3, HR_EBARRIER_TIMEOUT, first3, HR_MOE_EP_WAIT_DISPATCH, R - 1,
                 HR_MOE_EP_WAIT_DISPATCH, "one rank late (the others)");
  a = rank_args(&g, &G, cnt, R - 1, FAIL_TIMEOUT_MS);
  rc[R - 1] = hr_moe_ep_forward_grid(G.ep[R - 1], grid, HR_MODE_HEADROOM, &a, G.st[R - 1]);
  if(rc[R - 1] == HR_OK)
    rc[R - 1] = hr_moe_ep_sync(G.ep[R - 1]);
  expect_failure(&G, rc, 1u << (R - 1), HR_EBARRIER_TIMEOUT, first3, HR_MOE_EP_WAIT_DISPATCH,
                 R - 1, HR_MOE_EP_WAIT_START, "one rank late (the late one)");
  expect_bitwise(&g, &G, cnt, grid, "after a late rank");

  /* 3. The last rank's stream blocked behind a kernel for 1.5 s. */
  ms = run_ranks(&g, &G, cnt, all, grid, FAIL_TIMEOUT_MS, 1500, rc);
  printf("one rank's stream blocked: every rank ended after %.0f ms\n", ms);
  GT_EXPECT(ms >= 1500 && ms < 1500 + 4 * FAIL_TIMEOUT_MS + 1000,
            "one rank's stream blocked: %.0f ms (the block is 1500)", ms);
  expect_failure(&G, rc, first3, HR_EBARRIER_TIMEOUT, first3, HR_MOE_EP_WAIT_DISPATCH, R - 1,
                 HR_MOE_EP_WAIT_DISPATCH, "one rank's stream blocked (the others)");
  expect_failure(&G, rc, 1u << (R - 1), HR_EBARRIER_TIMEOUT, first3, HR_MOE_EP_WAIT_DISPATCH,
                 R - 1, HR_MOE_EP_WAIT_START, "one rank's stream blocked (the blocked one)");
  expect_bitwise(&g, &G, cnt, grid, "after a blocked stream");

  /* 4. An abort on rank 1 while ranks 0..2 wait for rank 3 (not launched
   * yet), with a 10 s timeout: all end at once, HR_EABORTED, rank 1's. */
  GT_CUDA(cudaMemset(G.y, 0xff, (size_t)g.T * g.s.H * 2));
  for(r = 0; r < R - 1; r++) {
    a = rank_args(&g, &G, cnt, r, 10000);
    rc[r] = hr_moe_ep_forward_grid(G.ep[r], grid, HR_MODE_HEADROOM, &a, G.st[r]);
  }
  gt_sleep_ms(50);
  ms = gt_now_ms();
  hr_moe_ep_abort(G.ep[1]);
  for(r = 0; r < R - 1; r++)
    if(rc[r] == HR_OK)
      rc[r] = hr_moe_ep_sync(G.ep[r]);
  ms = gt_now_ms() - ms;
  printf("abort on rank 1: every waiting rank ended %.0f ms after it (timeout 10000 ms)\n", ms);
  GT_EXPECT(ms < 2000, "abort: %.0f ms", ms);
  expect_failure(&G, rc, first3, HR_EABORTED, 1u << 1, HR_MOE_EP_WAIT_DISPATCH, -1, -1,
                 "abort on rank 1");
  a = rank_args(&g, &G, cnt, R - 1, 10000);
  rc[R - 1] = hr_moe_ep_forward_grid(G.ep[R - 1], grid, HR_MODE_HEADROOM, &a, G.st[R - 1]);
  if(rc[R - 1] == HR_OK)
    rc[R - 1] = hr_moe_ep_sync(G.ep[R - 1]);
  expect_failure(&G, rc, 1u << (R - 1), HR_EABORTED, 1u << 1, HR_MOE_EP_WAIT_DISPATCH, -1,
                 HR_MOE_EP_WAIT_START, "abort on rank 1 (the late rank)");
  expect_bitwise(&g, &G, cnt, grid, "after an abort");

  group_free(&G);
  gt_moe_free(&g);
}

int main(void)
{
  struct cudaDeviceProp prop;
  int R, sms;

  gt_require_gpu(NAME);
  gt_seed(NAME);
  GT_CUDA(cudaGetDeviceProperties(&prop, 0));
  sms = prop.multiProcessorCount;
  printf("%s: R virtual ranks on GPU 0, each a stream and grid <= %d / R; "
         "criterion: y bitwise hr_moe_forward_grid's\n", NAME, sms);
  for(R = 1; R <= HR_MOE_EP_MAX_RANKS; R *= 2) {
    const int share = sms / R;
    const int small_grids[] = { share, share / 3 > 0 ? share / 3 : 1, 1 };
    const int qwen_grids[] = { share, share / 2 > 0 ? share / 2 : 1 };
    correctness(GT_SMALL, R, 256, sms, small_grids, 3);
    correctness(GT_QWEN3, R, 256, sms, qwen_grids, 2);
  }
  failures(sms);
  return gt_finish(NAME);
}
