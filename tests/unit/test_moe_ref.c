/*
 * test_moe_ref.c: the CPU reference of the MoE forward against a naive
 * double-precision formulation written the other way round (expert by
 * expert, no intermediate rounding), plus exact properties: empty experts
 * are never read, zero weights add exactly nothing, bad ids are skipped.
 *
 * The two formulations differ only by the reference's bf16 roundings (of h
 * and of each expert's output row, 2^-9 relative each), so their relative
 * L2 distance stays near 3e-3; the bound asserted is 1e-2. A formulation
 * that swaps gate and up is checked to land far outside it, so the bound
 * can fail.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "headroom.h"
#include "moe_ref.h"

#define REL_L2_BOUND 1e-2
#define FD_BOUND 1e-6

static uint64_t rng_state;

static uint64_t rng_next(void)
{
  /* xorshift64*: plenty for test data, and reproducible from the seed. */
  rng_state ^= rng_state >> 12;
  rng_state ^= rng_state << 25;
  rng_state ^= rng_state >> 27;
  return rng_state * 0x2545F4914F6CDD1DULL;
}

static float rng_uniform(float lo, float hi)
{
  return lo + (hi - lo) * (float)((rng_next() >> 40) * (1.0 / 16777216.0));
}

/* A problem with its own storage. */
typedef struct problem {
  hr_moe_ref_problem p;
  uint16_t *x, *w1, *w2;
  int32_t *ids;
  float *wts;
} problem;

static void problem_init(problem *pr, int T, int E, int H, int I, int k)
{
  size_t i;
  memset(pr, 0, sizeof(*pr));
  pr->x = malloc(sizeof(uint16_t) * (size_t)T * H + 2);
  pr->w1 = malloc(sizeof(uint16_t) * (size_t)E * 2 * I * H);
  pr->w2 = malloc(sizeof(uint16_t) * (size_t)E * H * I);
  pr->ids = malloc(sizeof(int32_t) * (size_t)T * k + 4);
  pr->wts = malloc(sizeof(float) * (size_t)T * k + 4);
  assert_non_null(pr->x);
  assert_non_null(pr->w1);
  assert_non_null(pr->w2);
  assert_non_null(pr->ids);
  assert_non_null(pr->wts);
  for(i = 0; i < (size_t)T * H; i++)
    pr->x[i] = hr_moe_float_to_bf16(rng_uniform(-1.0f, 1.0f));
  for(i = 0; i < (size_t)E * 2 * I * H; i++)
    pr->w1[i] = hr_moe_float_to_bf16(rng_uniform(-1.0f, 1.0f) / sqrtf((float)H));
  for(i = 0; i < (size_t)E * H * I; i++)
    pr->w2[i] = hr_moe_float_to_bf16(rng_uniform(-1.0f, 1.0f) / sqrtf((float)I));
  for(i = 0; i < (size_t)T * k; i++) {
    pr->ids[i] = (int32_t)(rng_next() % (uint64_t)E);
    pr->wts[i] = rng_uniform(0.05f, 1.0f);
  }
  pr->p.tokens = T;
  pr->p.experts = E;
  pr->p.hidden = H;
  pr->p.inter = I;
  pr->p.topk = k;
  pr->p.x = pr->x;
  pr->p.topk_ids = pr->ids;
  pr->p.topk_weights = pr->wts;
  pr->p.w1 = pr->w1;
  pr->p.w2 = pr->w2;
}

static void problem_free(problem *pr)
{
  free(pr->x);
  free(pr->w1);
  free(pr->w2);
  free(pr->ids);
  free(pr->wts);
}

/* Fill every weight of expert e with NaN: any read of it poisons y. */
static void expert_poison(problem *pr, int e)
{
  const int H = pr->p.hidden, I = pr->p.inter;
  size_t i;
  for(i = 0; i < (size_t)2 * I * H; i++)
    pr->w1[(size_t)e * 2 * I * H + i] = 0x7fc0;
  for(i = 0; i < (size_t)H * I; i++)
    pr->w2[(size_t)e * H * I + i] = 0x7fc0;
}

/* The naive formulation: for each expert, every (token, slot) routed to
 * it, all in double, nothing rounded. `swap` exchanges gate and up, a
 * deliberate mistake the comparison must catch. */
static double *naive_forward(const hr_moe_ref_problem *p, int swap)
{
  const int T = p->tokens, H = p->hidden, I = p->inter, k = p->topk;
  double *y = calloc((size_t)T * H, sizeof(double));
  double *h = malloc(sizeof(double) * (size_t)I);
  int e, t, j, r, c, i;
  assert_non_null(y);
  assert_non_null(h);
  for(e = 0; e < p->experts; e++) {
    const uint16_t *w1 = p->w1 + (size_t)e * 2 * I * H;
    const uint16_t *w2 = p->w2 + (size_t)e * H * I;
    for(t = 0; t < T; t++) {
      for(j = 0; j < k; j++) {
        if(p->topk_ids[(size_t)t * k + j] != e)
          continue;
        const uint16_t *xt = p->x + (size_t)t * H;
        for(r = 0; r < I; r++) {
          double g = 0, u = 0;
          for(i = 0; i < H; i++) {
            double xv = hr_moe_bf16_to_float(xt[i]);
            g += hr_moe_bf16_to_float(w1[(size_t)r * H + i]) * xv;
            u += hr_moe_bf16_to_float(w1[(size_t)(I + r) * H + i]) * xv;
          }
          if(swap) {
            double s = g;
            g = u;
            u = s;
          }
          h[r] = g / (1.0 + exp(-g)) * u;
        }
        for(c = 0; c < H; c++) {
          double o = 0;
          for(r = 0; r < I; r++)
            o += hr_moe_bf16_to_float(w2[(size_t)c * I + r]) * h[r];
          y[(size_t)t * H + c] += p->topk_weights[(size_t)t * k + j] * o;
        }
      }
    }
  }
  free(h);
  return y;
}

/* ||y - ref|| / ||ref||; +inf when y holds a NaN or Inf. */
static double rel_l2(const uint16_t *y, const double *ref, size_t n)
{
  double num = 0, den = 0;
  size_t i;
  for(i = 0; i < n; i++) {
    double v = hr_moe_bf16_to_float(y[i]);
    if(!isfinite(v))
      return INFINITY;
    num += (v - ref[i]) * (v - ref[i]);
    den += ref[i] * ref[i];
  }
  return den > 0 ? sqrt(num / den) : sqrt(num);
}

static uint16_t *ref_run(const problem *pr)
{
  size_t n = (size_t)pr->p.tokens * pr->p.hidden;
  uint16_t *y = malloc(sizeof(uint16_t) * n + 2);
  assert_non_null(y);
  assert_int_equal(hr_moe_ref_forward(&pr->p, y), 0);
  return y;
}

static void check_against_naive(const problem *pr)
{
  size_t n = (size_t)pr->p.tokens * pr->p.hidden;
  uint16_t *y = ref_run(pr);
  double *ref = naive_forward(&pr->p, 0);
  double err = rel_l2(y, ref, n);
  if(!(err < REL_L2_BOUND))
    print_error("rel L2 %.3g (bound %.0e)\n", err, REL_L2_BOUND);
  assert_true(err < REL_L2_BOUND);
  free(y);
  free(ref);
}

static void test_bf16_rounding(void **state)
{
  (void)state;
  /* Exact values survive; halfway cases go to the even neighbour. */
  assert_int_equal(hr_moe_float_to_bf16(1.0f), 0x3f80);
  assert_int_equal(hr_moe_float_to_bf16(-2.0f), 0xc000);
  assert_int_equal(hr_moe_float_to_bf16(1.0f + 0x1p-8f), 0x3f80);  /* tie, even down */
  assert_int_equal(hr_moe_float_to_bf16(1.0f + 0x3p-8f), 0x3f82);  /* tie, even up */
  assert_int_equal(hr_moe_float_to_bf16(1.0f + 0x1p-8f + 0x1p-20f), 0x3f81);
  assert_int_equal(hr_moe_float_to_bf16(INFINITY), 0x7f80);
  assert_true(isnan(hr_moe_bf16_to_float(hr_moe_float_to_bf16(NAN))));
  /* The largest finite float rounds up to infinity, as IEEE says. */
  assert_int_equal(hr_moe_float_to_bf16(3.4028235e38f), 0x7f80);
  assert_true(hr_moe_bf16_to_float(0x3f81) == 1.0078125f);
}

static void test_swiglu(void **state)
{
  (void)state;
  assert_true(hr_moe_swiglu(0.0f, 5.0f) == 0.0f);
  assert_true(fabsf(hr_moe_swiglu(2.0f, 3.0f) - 3.0f * 2.0f / (1.0f + expf(-2.0f))) < 1e-6f);
  assert_true(fabsf(hr_moe_swiglu(-20.0f, 1.0f)) < 1e-6f);
}

static void test_small_shapes(void **state)
{
  static const int shapes[][5] = {
    /* T, E, H, I, k */
    { 1, 4, 32, 16, 2 },
    { 7, 8, 64, 32, 2 },
    { 16, 8, 128, 64, 4 },
    { 33, 5, 48, 80, 3 },
  };
  size_t s;
  (void)state;
  for(s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++) {
    problem pr;
    problem_init(&pr, shapes[s][0], shapes[s][1], shapes[s][2], shapes[s][3],
                 shapes[s][4]);
    check_against_naive(&pr);
    problem_free(&pr);
  }
}

static void test_wrong_formula_is_caught(void **state)
{
  problem pr;
  uint16_t *y;
  double *wrong;
  (void)state;
  problem_init(&pr, 9, 4, 64, 32, 2);
  y = ref_run(&pr);
  wrong = naive_forward(&pr.p, 1);
  assert_true(rel_l2(y, wrong, (size_t)9 * 64) > 0.1);
  free(y);
  free(wrong);
  problem_free(&pr);
}

static void test_experts_without_tokens(void **state)
{
  problem pr;
  uint16_t *y;
  size_t i;
  (void)state;
  problem_init(&pr, 12, 6, 64, 32, 2);
  /* Only experts 0 and 3 receive tokens; the rest are NaN. */
  for(i = 0; i < (size_t)12 * 2; i++)
    pr.ids[i] = (i % 3 == 0) ? 0 : 3;
  expert_poison(&pr, 1);
  expert_poison(&pr, 2);
  expert_poison(&pr, 4);
  expert_poison(&pr, 5);
  check_against_naive(&pr);
  y = ref_run(&pr);
  for(i = 0; i < (size_t)12 * 64; i++)
    assert_true(isfinite(hr_moe_bf16_to_float(y[i])));
  free(y);
  problem_free(&pr);
}

static void test_all_tokens_one_expert(void **state)
{
  problem pr;
  size_t i;
  (void)state;
  problem_init(&pr, 20, 4, 64, 32, 2);
  for(i = 0; i < (size_t)20 * 2; i++)
    pr.ids[i] = 2;                   /* both slots of every token */
  expert_poison(&pr, 0);
  expert_poison(&pr, 1);
  expert_poison(&pr, 3);
  check_against_naive(&pr);
  problem_free(&pr);
}

static void test_k1(void **state)
{
  problem pr;
  (void)state;
  problem_init(&pr, 10, 4, 64, 32, 1);
  check_against_naive(&pr);
  problem_free(&pr);
}

static void test_zero_weights(void **state)
{
  problem pr, one;
  uint16_t *y, *y1;
  size_t i;
  (void)state;
  problem_init(&pr, 6, 4, 64, 32, 2);
  /* All weights zero: y is exactly +0. */
  for(i = 0; i < (size_t)6 * 2; i++)
    pr.wts[i] = 0.0f;
  y = ref_run(&pr);
  for(i = 0; i < (size_t)6 * 64; i++)
    assert_int_equal(y[i], 0);
  free(y);
  /* Slot 1 weighted zero: y equals the k=1 forward of slot 0, bit for bit. */
  for(i = 0; i < 6; i++)
    pr.wts[i * 2] = rng_uniform(0.1f, 1.0f);
  y = ref_run(&pr);
  problem_init(&one, 6, 4, 64, 32, 1);
  memcpy(one.x, pr.x, sizeof(uint16_t) * 6 * 64);
  memcpy(one.w1, pr.w1, sizeof(uint16_t) * 4 * 2 * 32 * 64);
  memcpy(one.w2, pr.w2, sizeof(uint16_t) * 4 * 64 * 32);
  for(i = 0; i < 6; i++) {
    one.ids[i] = pr.ids[i * 2];
    one.wts[i] = pr.wts[i * 2];
  }
  y1 = ref_run(&one);
  assert_memory_equal(y, y1, sizeof(uint16_t) * 6 * 64);
  free(y);
  free(y1);
  problem_free(&one);
  problem_free(&pr);
}

static void test_bad_ids_skipped(void **state)
{
  problem pr;
  uint16_t *y, *y_clean;
  size_t i;
  (void)state;
  problem_init(&pr, 8, 4, 64, 32, 2);
  y_clean = ref_run(&pr);
  /* Out-of-range ids (with a real weight) in every second slot. */
  for(i = 0; i < 8; i++)
    pr.ids[i * 2 + 1] = (i & 1) ? -1 : 4;
  y = ref_run(&pr);
  /* Now only slot 0 counts: compare with the naive formulation, which also
   * matches no expert for those ids. */
  check_against_naive(&pr);
  assert_memory_not_equal(y, y_clean, sizeof(uint16_t) * 8 * 64);
  free(y);
  free(y_clean);
  problem_free(&pr);
}

static void test_bad_arguments(void **state)
{
  problem pr;
  uint16_t y[64];
  (void)state;
  problem_init(&pr, 1, 2, 64, 32, 1);
  assert_int_equal(hr_moe_ref_forward(NULL, y), HR_EINVAL);
  assert_int_equal(hr_moe_ref_forward(&pr.p, NULL), HR_EINVAL);
  pr.p.hidden = 0;
  assert_int_equal(hr_moe_ref_forward(&pr.p, y), HR_EINVAL);
  problem_free(&pr);
}

/* ---- the backward ------------------------------------------------------ */

/* The backward's outputs, each with its own storage, filled with `fill`
 * bytes first so that a test can tell what was written. */
typedef struct grads {
  uint16_t *dx;     /* [T, H] bf16 (the reference) */
  float *dxf;       /* [T, H] fp32 (the unrounded mode) */
  float *dw1, *dw2, *dtw;
} grads;

static void grads_init(grads *g, const hr_moe_ref_problem *p, int fill)
{
  const size_t th = (size_t)p->tokens * p->hidden;
  const size_t n1 = (size_t)p->experts * 2 * p->inter * p->hidden;
  const size_t n2 = (size_t)p->experts * p->hidden * p->inter;
  const size_t tk = (size_t)p->tokens * p->topk;
  g->dx = malloc(sizeof(uint16_t) * th + 2);
  g->dxf = malloc(sizeof(float) * th + 4);
  g->dw1 = malloc(sizeof(float) * n1);
  g->dw2 = malloc(sizeof(float) * n2);
  g->dtw = malloc(sizeof(float) * tk + 4);
  assert_non_null(g->dx);
  assert_non_null(g->dxf);
  assert_non_null(g->dw1);
  assert_non_null(g->dw2);
  assert_non_null(g->dtw);
  memset(g->dx, fill, sizeof(uint16_t) * th + 2);
  memset(g->dxf, fill, sizeof(float) * th + 4);
  memset(g->dw1, fill, sizeof(float) * n1);
  memset(g->dw2, fill, sizeof(float) * n2);
  memset(g->dtw, fill, sizeof(float) * tk + 4);
}

static void grads_free(grads *g)
{
  free(g->dx);
  free(g->dxf);
  free(g->dw1);
  free(g->dw2);
  free(g->dtw);
}

static uint16_t *dy_random(int T, int H)
{
  uint16_t *dy = malloc(sizeof(uint16_t) * (size_t)T * H + 2);
  size_t i;
  assert_non_null(dy);
  for(i = 0; i < (size_t)T * H; i++)
    dy[i] = hr_moe_float_to_bf16(rng_uniform(-1.0f, 1.0f));
  return dy;
}

/* The inputs in double, so that the finite differences can move them by
 * less than a bf16 ulp. */
typedef struct dproblem {
  int T, E, H, I, k;
  const int32_t *ids;
  double *x, *w1, *w2, *wts, *dy;
} dproblem;

static void dproblem_init(dproblem *d, const problem *pr, const uint16_t *dy)
{
  const hr_moe_ref_problem *p = &pr->p;
  const size_t th = (size_t)p->tokens * p->hidden;
  const size_t n1 = (size_t)p->experts * 2 * p->inter * p->hidden;
  const size_t n2 = (size_t)p->experts * p->hidden * p->inter;
  const size_t tk = (size_t)p->tokens * p->topk;
  size_t i;
  d->T = p->tokens;
  d->E = p->experts;
  d->H = p->hidden;
  d->I = p->inter;
  d->k = p->topk;
  d->ids = p->topk_ids;
  d->x = malloc(sizeof(double) * th + 8);
  d->w1 = malloc(sizeof(double) * n1);
  d->w2 = malloc(sizeof(double) * n2);
  d->wts = malloc(sizeof(double) * tk + 8);
  d->dy = malloc(sizeof(double) * th + 8);
  assert_non_null(d->x);
  assert_non_null(d->w1);
  assert_non_null(d->w2);
  assert_non_null(d->wts);
  assert_non_null(d->dy);
  for(i = 0; i < th; i++) {
    d->x[i] = hr_moe_bf16_to_float(pr->x[i]);
    d->dy[i] = hr_moe_bf16_to_float(dy[i]);
  }
  for(i = 0; i < n1; i++)
    d->w1[i] = hr_moe_bf16_to_float(pr->w1[i]);
  for(i = 0; i < n2; i++)
    d->w2[i] = hr_moe_bf16_to_float(pr->w2[i]);
  for(i = 0; i < tk; i++)
    d->wts[i] = pr->wts[i];
}

static void dproblem_free(dproblem *d)
{
  free(d->x);
  free(d->w1);
  free(d->w2);
  free(d->wts);
  free(d->dy);
}

/* L = <dy, y> with y the forward in double, nothing rounded. */
static double loss_double(const dproblem *d)
{
  const int H = d->H, I = d->I, k = d->k;
  double L = 0.0, h[64];
  int t, j, r, c, i;
  assert_true(I <= 64);
  for(t = 0; t < d->T; t++)
    for(j = 0; j < k; j++) {
      const int e = d->ids[(size_t)t * k + j];
      const double *xt = d->x + (size_t)t * H;
      if(e < 0 || e >= d->E)
        continue;
      const double *w1 = d->w1 + (size_t)e * 2 * I * H;
      const double *w2 = d->w2 + (size_t)e * H * I;
      for(r = 0; r < I; r++) {
        double g = 0, u = 0;
        for(i = 0; i < H; i++) {
          g += w1[(size_t)r * H + i] * xt[i];
          u += w1[(size_t)(I + r) * H + i] * xt[i];
        }
        h[r] = g / (1.0 + exp(-g)) * u;
      }
      for(c = 0; c < H; c++) {
        double o = 0;
        for(r = 0; r < I; r++)
          o += w2[(size_t)c * I + r] * h[r];
        L += d->dy[(size_t)t * H + c] * d->wts[(size_t)t * k + j] * o;
      }
    }
  return L;
}

/* The central difference of L in v[i]; v[i] is restored. */
static double fd(dproblem *d, double *v, size_t i)
{
  const double step = 1e-5, v0 = v[i];
  double lp, lm;
  v[i] = v0 + step;
  lp = loss_double(d);
  v[i] = v0 - step;
  lm = loss_double(d);
  v[i] = v0;
  return (lp - lm) / (2 * step);
}

/* One input's gradient against its finite differences: the unrounded mode
 * within FD_BOUND of the largest |derivative|, element by element.
 * Derivatives the finite differences find exactly 0 (an empty expert's
 * weights, a skipped slot's weight) must be exactly 0 in the reference
 * too. (The reference's own distance from the exact gradient is
 * test_backward_rounding's: on problems this small a sum of a few terms
 * may cancel, and a bf16 rounding is then large relative to it.) */
static void fd_compare(const char *what, dproblem *d, double *v, size_t n,
                       const float *exact, const float *ref,
                       const uint16_t *ref_bf16)
{
  double *num = malloc(sizeof(double) * n);
  double scale = 0, worst = 0;
  size_t i;
  assert_non_null(num);
  for(i = 0; i < n; i++) {
    num[i] = fd(d, v, i);
    if(fabs(num[i]) > scale)
      scale = fabs(num[i]);
  }
  for(i = 0; i < n; i++) {
    double r = ref_bf16 ? hr_moe_bf16_to_float(ref_bf16[i]) : ref[i];
    double diff = fabs(exact[i] - num[i]);
    if(diff > worst)
      worst = diff;
    if(num[i] == 0.0 && (exact[i] != 0.0f || r != 0.0)) {
      print_error("%s[%zu]: finite differences 0, gradient %g (reference %g)\n",
                  what, i, (double)exact[i], r);
      fail();
    }
  }
  worst = scale > 0 ? worst / scale : worst;
  if(getenv("HR_TEST_SHOW_ERR") || !(worst < FD_BOUND))
    print_error("%s: %.3g of the largest derivative (bound %.0e)\n", what,
                worst, FD_BOUND);
  assert_true(worst < FD_BOUND);
  free(num);
}

/* Every input element of a problem perturbed alone: x, W1, W2 and the
 * routing weights. */
static void fd_check(problem *pr)
{
  const hr_moe_ref_problem *p = &pr->p;
  const size_t th = (size_t)p->tokens * p->hidden;
  const size_t n1 = (size_t)p->experts * 2 * p->inter * p->hidden;
  const size_t n2 = (size_t)p->experts * p->hidden * p->inter;
  const size_t tk = (size_t)p->tokens * p->topk;
  uint16_t *dy = dy_random(p->tokens, p->hidden);
  grads ref, ex;
  dproblem d;
  grads_init(&ref, p, 0xa5);
  grads_init(&ex, p, 0xa5);
  assert_int_equal(hr_moe_ref_backward(p, dy, ref.dx, ref.dw1, ref.dw2, ref.dtw), 0);
  assert_int_equal(hr__moe_ref_backward_unrounded(p, dy, ex.dxf, ex.dw1, ex.dw2, ex.dtw), 0);
  dproblem_init(&d, pr, dy);
  fd_compare("dx", &d, d.x, th, ex.dxf, NULL, ref.dx);
  fd_compare("dW1", &d, d.w1, n1, ex.dw1, ref.dw1, NULL);
  fd_compare("dW2", &d, d.w2, n2, ex.dw2, ref.dw2, NULL);
  fd_compare("d(w)", &d, d.wts, tk, ex.dtw, ref.dtw, NULL);
  dproblem_free(&d);
  grads_free(&ref);
  grads_free(&ex);
  free(dy);
}

static void test_backward_finite_differences(void **state)
{
  problem pr;
  (void)state;
  /* T=3 E=4 H=8 I=4 k=2: expert 2 gets no pair, one slot a bad id. */
  problem_init(&pr, 3, 4, 8, 4, 2);
  pr.ids[0] = 0;
  pr.ids[1] = 1;
  pr.ids[2] = 3;
  pr.ids[3] = -1;
  pr.ids[4] = 1;
  pr.ids[5] = 0;
  fd_check(&pr);
  problem_free(&pr);
  /* Random routing, both slots of a token on one expert allowed. */
  problem_init(&pr, 3, 4, 8, 4, 2);
  fd_check(&pr);
  problem_free(&pr);
  /* k = 1; T = 1; both; a wider shape. */
  problem_init(&pr, 4, 3, 8, 4, 1);
  fd_check(&pr);
  problem_free(&pr);
  problem_init(&pr, 1, 4, 8, 4, 2);
  fd_check(&pr);
  problem_free(&pr);
  problem_init(&pr, 1, 2, 8, 4, 1);
  fd_check(&pr);
  problem_free(&pr);
  problem_init(&pr, 2, 3, 32, 16, 3);
  fd_check(&pr);
  problem_free(&pr);
}

/* ||ref - exact|| / ||exact|| over n floats; +inf when ref has a NaN or Inf. */
static double rel_l2_f(const float *ref, const float *exact, size_t n)
{
  double num = 0, den = 0;
  size_t i;
  for(i = 0; i < n; i++) {
    if(!isfinite(ref[i]))
      return INFINITY;
    num += ((double)ref[i] - exact[i]) * ((double)ref[i] - exact[i]);
    den += (double)exact[i] * exact[i];
  }
  return den > 0 ? sqrt(num / den) : sqrt(num);
}

/* The reference against the unrounded mode (the exact gradient, checked
 * against finite differences above) on the forward's shapes: the bf16
 * roundings of dg, du, w a, a and the dx rows stay within REL_L2_BOUND. */
static void test_backward_rounding(void **state)
{
  static const int shapes[][5] = {
    /* T, E, H, I, k */
    { 7, 8, 64, 32, 2 },
    { 16, 8, 128, 64, 4 },
    { 33, 5, 48, 80, 3 },
  };
  size_t s, i;
  (void)state;
  for(s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++) {
    problem pr;
    grads ref, ex;
    uint16_t *dy;
    float *dxr;
    double err[4];
    const char *names[4] = { "dx", "dW1", "dW2", "d(w)" };
    int q;
    problem_init(&pr, shapes[s][0], shapes[s][1], shapes[s][2], shapes[s][3],
                 shapes[s][4]);
    const size_t th = (size_t)pr.p.tokens * pr.p.hidden;
    const size_t n1 = (size_t)pr.p.experts * 2 * pr.p.inter * pr.p.hidden;
    const size_t n2 = (size_t)pr.p.experts * pr.p.hidden * pr.p.inter;
    const size_t tk = (size_t)pr.p.tokens * pr.p.topk;
    dy = dy_random(pr.p.tokens, pr.p.hidden);
    grads_init(&ref, &pr.p, 0xa5);
    grads_init(&ex, &pr.p, 0xa5);
    assert_int_equal(hr_moe_ref_backward(&pr.p, dy, ref.dx, ref.dw1, ref.dw2, ref.dtw), 0);
    assert_int_equal(hr__moe_ref_backward_unrounded(&pr.p, dy, ex.dxf, ex.dw1, ex.dw2, ex.dtw), 0);
    dxr = malloc(sizeof(float) * th);
    assert_non_null(dxr);
    for(i = 0; i < th; i++)
      dxr[i] = hr_moe_bf16_to_float(ref.dx[i]);
    err[0] = rel_l2_f(dxr, ex.dxf, th);
    err[1] = rel_l2_f(ref.dw1, ex.dw1, n1);
    err[2] = rel_l2_f(ref.dw2, ex.dw2, n2);
    err[3] = rel_l2_f(ref.dtw, ex.dtw, tk);
    for(q = 0; q < 4; q++) {
      if(getenv("HR_TEST_SHOW_ERR") || !(err[q] < REL_L2_BOUND))
        print_error("shape %zu %s: rel L2 %.3g (bound %.0e)\n", s, names[q],
                    err[q], REL_L2_BOUND);
      assert_true(err[q] < REL_L2_BOUND);
    }
    free(dxr);
    grads_free(&ref);
    grads_free(&ex);
    free(dy);
    problem_free(&pr);
  }
}

int main(void)
{
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_bf16_rounding),
    cmocka_unit_test(test_swiglu),
    cmocka_unit_test(test_small_shapes),
    cmocka_unit_test(test_wrong_formula_is_caught),
    cmocka_unit_test(test_experts_without_tokens),
    cmocka_unit_test(test_all_tokens_one_expert),
    cmocka_unit_test(test_k1),
    cmocka_unit_test(test_zero_weights),
    cmocka_unit_test(test_bad_ids_skipped),
    cmocka_unit_test(test_bad_arguments),
    cmocka_unit_test(test_backward_finite_differences),
    cmocka_unit_test(test_backward_rounding),
  };
  const char *env = getenv("HR_TEST_SEED");
  uint64_t seed = env ? strtoull(env, NULL, 0)
                      : ((uint64_t)time(NULL) << 20) ^ (uint64_t)clock();
  if(!seed)
    seed = 1;
  rng_state = seed;
  printf("test_moe_ref: seed %llu (HR_TEST_SEED to repeat)\n",
         (unsigned long long)seed);
  return cmocka_run_group_tests(tests, NULL, NULL);
}
