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
 *
 * The backward (hr_moe_ref_backward): its unrounded mode against central
 * finite differences of a double forward, every input element of six tiny
 * problems (bound 1e-6 of the largest derivative, measured 6e-8: fp32
 * outputs); the reference against the unrounded mode on the forward's
 * shapes (rel L2 bound 1e-2, measured up to 4.3e-3); empty experts, bad
 * ids, T = 0; the contract a kernel is held to (an expert's dW is the sum
 * of its pairs' in any order or split, dx and d(w) bitwise); the rounding
 * points bit for bit where H = I = 1; bad arguments write nothing.
 * HR_TEST_SHOW_ERR=1 prints the measured errors.
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

/* T = 12, E = 6, H = 64, I = 32, k = 2 where only experts 0 and 3
 * receive tokens; the others' weights are NaN, so reading them shows. */
static void problem_two_experts(problem *pr)
{
  size_t i;
  problem_init(pr, 12, 6, 64, 32, 2);
  for(i = 0; i < (size_t)12 * 2; i++)
    pr->ids[i] = (i % 3 == 0) ? 0 : 3;
  expert_poison(pr, 1);
  expert_poison(pr, 2);
  expert_poison(pr, 4);
  expert_poison(pr, 5);
}

static void test_experts_without_tokens(void **state)
{
  problem pr;
  uint16_t *y;
  size_t i;
  (void)state;
  problem_two_experts(&pr);
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
  static const int shapes[][5] = {   /* T, E, H, I, k */
    {3, 4, 8, 4, 2}, {4, 3, 8, 4, 1}, {1, 4, 8, 4, 2}, {1, 2, 8, 4, 1},
    {2, 3, 32, 16, 3},
  };
  problem pr;
  size_t i;
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
  /* Random routing (both slots of a token on one expert allowed); then
   * k = 1; T = 1; both; a wider shape. */
  for(i = 0; i < sizeof(shapes) / sizeof(shapes[0]); i++) {
    const int *sh = shapes[i];
    problem_init(&pr, sh[0], sh[1], sh[2], sh[3], sh[4]);
    fd_check(&pr);
    problem_free(&pr);
  }
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

static int all_zero_bits(const void *v, size_t bytes)
{
  const unsigned char *b = v;
  size_t i;
  for(i = 0; i < bytes; i++)
    if(b[i])
      return 0;
  return 1;
}

static void backward_ok(const hr_moe_ref_problem *p, const uint16_t *dy, grads *g)
{
  grads_init(g, p, 0xa5);
  assert_int_equal(hr_moe_ref_backward(p, dy, g->dx, g->dw1, g->dw2, g->dtw), 0);
}

/* Experts without pairs: dW exactly +0 and their (NaN) weights never read;
 * and T = 0: every dW +0. */
static void test_backward_empty_experts(void **state)
{
  problem pr;
  grads g;
  uint16_t *dy;
  size_t i;
  int e;
  (void)state;
  problem_two_experts(&pr);
  dy = dy_random(12, 64);
  backward_ok(&pr.p, dy, &g);
  const size_t n1 = (size_t)2 * 32 * 64, n2 = (size_t)64 * 32;
  for(e = 0; e < 6; e++) {
    int empty = e != 0 && e != 3;
    assert_int_equal(all_zero_bits(g.dw1 + e * n1, sizeof(float) * n1), empty);
    assert_int_equal(all_zero_bits(g.dw2 + e * n2, sizeof(float) * n2), empty);
  }
  for(i = 0; i < 6 * n1; i++)
    assert_true(isfinite(g.dw1[i]));
  for(i = 0; i < 6 * n2; i++)
    assert_true(isfinite(g.dw2[i]));
  for(i = 0; i < (size_t)12 * 64; i++)
    assert_true(isfinite(hr_moe_bf16_to_float(g.dx[i])));
  for(i = 0; i < (size_t)12 * 2; i++)
    assert_true(isfinite(g.dtw[i]) && g.dtw[i] != 0.0f);
  grads_free(&g);
  /* No tokens at all. */
  pr.p.tokens = 0;
  backward_ok(&pr.p, dy, &g);
  assert_true(all_zero_bits(g.dw1, sizeof(float) * 6 * n1));
  assert_true(all_zero_bits(g.dw2, sizeof(float) * 6 * n2));
  grads_free(&g);
  free(dy);
  problem_free(&pr);
}

/* Ids outside [0, E), with NaN weights, in every second slot: d(w) is +0
 * there, and everything else is bitwise the k = 1 backward of slot 0. */
static void test_backward_bad_ids(void **state)
{
  problem pr, one;
  grads g, g1;
  uint16_t *dy;
  size_t i;
  (void)state;
  problem_init(&pr, 8, 4, 64, 32, 2);
  for(i = 0; i < 8; i++) {
    pr.ids[i * 2 + 1] = (i & 1) ? -1 : 4;
    pr.wts[i * 2 + 1] = NAN;
  }
  dy = dy_random(8, 64);
  backward_ok(&pr.p, dy, &g);
  problem_init(&one, 8, 4, 64, 32, 1);
  memcpy(one.x, pr.x, sizeof(uint16_t) * 8 * 64);
  memcpy(one.w1, pr.w1, sizeof(uint16_t) * 4 * 2 * 32 * 64);
  memcpy(one.w2, pr.w2, sizeof(uint16_t) * 4 * 64 * 32);
  for(i = 0; i < 8; i++) {
    one.ids[i] = pr.ids[i * 2];
    one.wts[i] = pr.wts[i * 2];
  }
  backward_ok(&one.p, dy, &g1);
  assert_memory_equal(g.dx, g1.dx, sizeof(uint16_t) * 8 * 64);
  assert_memory_equal(g.dw1, g1.dw1, sizeof(float) * 4 * 2 * 32 * 64);
  assert_memory_equal(g.dw2, g1.dw2, sizeof(float) * 4 * 64 * 32);
  for(i = 0; i < 8; i++) {
    assert_memory_equal(&g.dtw[i * 2], &g1.dtw[i], sizeof(float));
    assert_true(all_zero_bits(&g.dtw[i * 2 + 1], sizeof(float)));
  }
  grads_free(&g);
  grads_free(&g1);
  free(dy);
  problem_free(&one);
  problem_free(&pr);
}

/* dW summed over pairs in `order` (pair indices), each pair's dW from its
 * own one-pair backward, in fp32: what a kernel that splits an expert's
 * pairs over CTAs adds up. `mag` gets the sum of the |terms|. */
static void pair_sum(float *const *pw, size_t npairs, const size_t *order,
                     size_t n, float *sum, double *mag)
{
  size_t i, q;
  for(i = 0; i < n; i++) {
    sum[i] = 0.0f;
    mag[i] = 0.0;
  }
  for(q = 0; q < npairs; q++) {
    const float *c = pw[order[q]];
    if(!c)
      continue;
    for(i = 0; i < n; i++) {
      sum[i] += c[i];
      mag[i] += fabs(c[i]);
    }
  }
}

/* |full - sum| within 1e-5 of the sum of the |terms|: fp32 sums of a few
 * terms in any order agree to ~1e-7 of it. */
static void assert_sum_close(const char *what, const float *full, const float *sum,
                             const double *mag, size_t n)
{
  size_t i;
  for(i = 0; i < n; i++)
    if(!(fabs((double)full[i] - sum[i]) <= 1e-5 * mag[i])) {
      print_error("%s[%zu]: %.9g, summed by pair %.9g (|terms| %.3g)\n", what, i,
                  (double)full[i], (double)sum[i], mag[i]);
      fail();
    }
}

/* The rounding contract a kernel is held to: an expert's dW is the sum of
 * its pairs' one-pair dW, in any order and any split over tokens (within
 * fp32 rounding); d(w) of a pair is bitwise its one-pair d(w); dx of a
 * token is bitwise bf16 of the fp32 sum, in slot order, of its pairs'
 * one-pair dx. */
static void test_backward_pair_sums(void **state)
{
  problem pr;
  grads g, *one;
  uint16_t *dy;
  float **pw1, **pw2, *sum1, *sum2;
  double *mag1, *mag2;
  size_t *order, i, q;
  int t, j, c;
  (void)state;
  const int T = 12, E = 4, H = 32, I = 16, k = 3;
  const size_t P = (size_t)T * k, n1 = (size_t)E * 2 * I * H, n2 = (size_t)E * H * I;
  problem_init(&pr, T, E, H, I, k);
  pr.ids[5] = -1;                      /* a skipped slot among them */
  dy = dy_random(T, H);
  backward_ok(&pr.p, dy, &g);
  for(i = 0; i < (size_t)T * H; i++)
    assert_true(isfinite(hr_moe_bf16_to_float(g.dx[i])));
  for(i = 0; i < n1; i++)
    assert_true(isfinite(g.dw1[i]));
  for(i = 0; i < n2; i++)
    assert_true(isfinite(g.dw2[i]));
  for(i = 0; i < P; i++)
    assert_true(isfinite(g.dtw[i]));

  one = calloc(P, sizeof(grads));
  pw1 = calloc(P, sizeof(float *));
  pw2 = calloc(P, sizeof(float *));
  order = malloc(sizeof(size_t) * P);
  sum1 = malloc(sizeof(float) * n1);
  sum2 = malloc(sizeof(float) * n2);
  mag1 = malloc(sizeof(double) * n1);
  mag2 = malloc(sizeof(double) * n2);
  assert_non_null(one);
  assert_non_null(pw1);
  assert_non_null(pw2);
  assert_non_null(order);
  assert_non_null(sum1);
  assert_non_null(sum2);
  assert_non_null(mag1);
  assert_non_null(mag2);
  /* Each pair alone: T = 1, k = 1, pointing into the full problem. */
  for(q = 0; q < P; q++) {
    hr_moe_ref_problem p1 = pr.p;
    t = (int)(q / k);
    p1.tokens = 1;
    p1.topk = 1;
    p1.x = pr.x + (size_t)t * H;
    p1.topk_ids = pr.ids + q;
    p1.topk_weights = pr.wts + q;
    backward_ok(&p1, dy + (size_t)t * H, &one[q]);
    if(pr.ids[q] >= 0) {
      pw1[q] = one[q].dw1;
      pw2[q] = one[q].dw2;
    }
    assert_memory_equal(&g.dtw[q], &one[q].dtw[0], sizeof(float));
  }
  for(t = 0; t < T; t++)
    for(c = 0; c < H; c++) {
      float acc = 0.0f;
      for(j = 0; j < k; j++)
        if(pr.ids[(size_t)t * k + j] >= 0)
          acc += hr_moe_bf16_to_float(one[(size_t)t * k + j].dx[c]);
      assert_int_equal(g.dx[(size_t)t * H + c], hr_moe_float_to_bf16(acc));
    }
  /* In pair order, reversed, and shuffled. */
  for(q = 0; q < P; q++)
    order[q] = q;
  pair_sum(pw1, P, order, n1, sum1, mag1);
  pair_sum(pw2, P, order, n2, sum2, mag2);
  assert_sum_close("dW1 in order", g.dw1, sum1, mag1, n1);
  assert_sum_close("dW2 in order", g.dw2, sum2, mag2, n2);
  for(q = 0; q < P; q++)
    order[q] = P - 1 - q;
  pair_sum(pw1, P, order, n1, sum1, mag1);
  pair_sum(pw2, P, order, n2, sum2, mag2);
  assert_sum_close("dW1 reversed", g.dw1, sum1, mag1, n1);
  assert_sum_close("dW2 reversed", g.dw2, sum2, mag2, n2);
  for(q = P - 1; q > 0; q--) {
    size_t r = (size_t)(rng_next() % (q + 1)), s = order[q];
    order[q] = order[r];
    order[r] = s;
  }
  pair_sum(pw1, P, order, n1, sum1, mag1);
  pair_sum(pw2, P, order, n2, sum2, mag2);
  assert_sum_close("dW1 shuffled", g.dw1, sum1, mag1, n1);
  assert_sum_close("dW2 shuffled", g.dw2, sum2, mag2, n2);
  /* The tokens split in two, as over two CTAs: dW adds up, dx and d(w)
   * are bitwise the full problem's. */
  {
    hr_moe_ref_problem pa = pr.p, pb = pr.p;
    grads ga, gb;
    const int Ta = 5;
    pa.tokens = Ta;
    pb.tokens = T - Ta;
    pb.x = pr.x + (size_t)Ta * H;
    pb.topk_ids = pr.ids + (size_t)Ta * k;
    pb.topk_weights = pr.wts + (size_t)Ta * k;
    backward_ok(&pa, dy, &ga);
    backward_ok(&pb, dy + (size_t)Ta * H, &gb);
    for(i = 0; i < n1; i++) {
      sum1[i] = ga.dw1[i] + gb.dw1[i];
      mag1[i] = fabs(ga.dw1[i]) + fabs(gb.dw1[i]);
    }
    for(i = 0; i < n2; i++) {
      sum2[i] = ga.dw2[i] + gb.dw2[i];
      mag2[i] = fabs(ga.dw2[i]) + fabs(gb.dw2[i]);
    }
    assert_sum_close("dW1 split", g.dw1, sum1, mag1, n1);
    assert_sum_close("dW2 split", g.dw2, sum2, mag2, n2);
    assert_memory_equal(g.dx, ga.dx, sizeof(uint16_t) * Ta * H);
    assert_memory_equal(g.dx + (size_t)Ta * H, gb.dx, sizeof(uint16_t) * (T - Ta) * H);
    assert_memory_equal(g.dtw, ga.dtw, sizeof(float) * Ta * k);
    assert_memory_equal(g.dtw + (size_t)Ta * k, gb.dtw, sizeof(float) * (T - Ta) * k);
    grads_free(&ga);
    grads_free(&gb);
  }
  for(q = 0; q < P; q++)
    grads_free(&one[q]);
  free(one);
  free(pw1);
  free(pw2);
  free(order);
  free(sum1);
  free(sum2);
  free(mag1);
  free(mag2);
  grads_free(&g);
  free(dy);
  problem_free(&pr);
}

static double bf(double v)
{
  return hr_moe_bf16_to_float(hr_moe_float_to_bf16((float)v));
}

/* The rounding points, bit for bit: one pair with H = I = 1, where every
 * dot product is one exact product, so each value the header names can be
 * written out here: a = bf16(silu(g) u), dg, du and w a in bf16, dW and
 * d(w) in fp32, the dx row in bf16. Leaving out any one of those roundings
 * changes some bits in 200 draws, though none moves the results out of
 * test_backward_rounding's bound. */
static void test_backward_rounding_points(void **state)
{
  problem pr;
  int n;
  (void)state;
  problem_init(&pr, 1, 1, 1, 1, 1);
  for(n = 0; n < 200; n++) {
    uint16_t dy, dx;
    float dw1[2], dw2, dtw;
    pr.x[0] = hr_moe_float_to_bf16(rng_uniform(-2.0f, 2.0f));
    pr.w1[0] = hr_moe_float_to_bf16(rng_uniform(-2.0f, 2.0f));
    pr.w1[1] = hr_moe_float_to_bf16(rng_uniform(-2.0f, 2.0f));
    pr.w2[0] = hr_moe_float_to_bf16(rng_uniform(-2.0f, 2.0f));
    pr.wts[0] = rng_uniform(0.05f, 1.0f);
    pr.ids[0] = 0;
    dy = hr_moe_float_to_bf16(rng_uniform(-2.0f, 2.0f));
    assert_int_equal(hr_moe_ref_backward(&pr.p, &dy, &dx, dw1, &dw2, &dtw), 0);

    const double x = hr_moe_bf16_to_float(pr.x[0]);
    const double wg = hr_moe_bf16_to_float(pr.w1[0]);
    const double wu = hr_moe_bf16_to_float(pr.w1[1]);
    const double w2 = hr_moe_bf16_to_float(pr.w2[0]);
    const double d = hr_moe_bf16_to_float(dy), w = pr.wts[0];
    const double g = wg * x, u = wu * x;            /* exact in fp32 */
    const double a = hr_moe_bf16_to_float(
        hr_moe_float_to_bf16(hr_moe_swiglu((float)g, (float)u)));
    const double q = w2 * d;                        /* exact in fp32 */
    const double sg = 1.0 / (1.0 + exp(-g));
    const double da = w * q;
    const double du = bf(da * g * sg);
    const double dg = bf(da * u * sg * (1.0 + g * (1.0 - sg)));
    const double wa = bf(w * a);
    assert_true(dtw == (float)(q * a));
    assert_true(dw1[0] == (float)(dg * x));
    assert_true(dw1[1] == (float)(du * x));
    assert_true(dw2 == (float)(d * wa));
    assert_int_equal(dx, hr_moe_float_to_bf16((float)(wg * dg + wu * du)));
  }
  problem_free(&pr);
}

/* Every bad argument: HR_EINVAL, and not a byte of the outputs written. */
static void test_backward_bad_arguments(void **state)
{
  problem pr;
  grads g, clean;
  uint16_t *dy;
  int c;
  (void)state;
  problem_init(&pr, 2, 3, 64, 32, 2);
  dy = dy_random(2, 64);
  grads_init(&clean, &pr.p, 0xa5);
  for(c = 0; c < 17; c++) {
    hr_moe_ref_problem bad = pr.p;
    const hr_moe_ref_problem *pp = &bad;
    const uint16_t *ddy = dy;
    int rc;
    grads_init(&g, &pr.p, 0xa5);
    uint16_t *dx = g.dx;
    float *dxf = g.dxf, *dw1 = g.dw1, *dw2 = g.dw2, *dtw = g.dtw;
    switch(c) {
    case 0: pp = NULL; break;
    case 1: ddy = NULL; break;
    case 2: dx = NULL; break;
    case 3: dw1 = NULL; break;
    case 4: dw2 = NULL; break;
    case 5: dtw = NULL; break;
    case 6: bad.tokens = -1; break;
    case 7: bad.experts = 0; break;
    case 8: bad.hidden = 0; break;
    case 9: bad.inter = -4; break;
    case 10: bad.topk = 0; break;
    case 11: bad.x = NULL; break;
    case 12: bad.topk_ids = NULL; break;
    case 13: bad.topk_weights = NULL; break;
    case 14: bad.w1 = NULL; break;
    case 15: bad.w2 = NULL; break;
    case 16: dxf = NULL; break;
    }
    if(c == 16)
      rc = hr__moe_ref_backward_unrounded(pp, ddy, dxf, dw1, dw2, dtw);
    else
      rc = hr_moe_ref_backward(pp, ddy, dx, dw1, dw2, dtw);
    if(rc != HR_EINVAL)
      print_error("case %d: %d\n", c, rc);
    assert_int_equal(rc, HR_EINVAL);
    assert_memory_equal(g.dx, clean.dx, sizeof(uint16_t) * 2 * 64);
    assert_memory_equal(g.dxf, clean.dxf, sizeof(float) * 2 * 64);
    assert_memory_equal(g.dw1, clean.dw1, sizeof(float) * 3 * 2 * 32 * 64);
    assert_memory_equal(g.dw2, clean.dw2, sizeof(float) * 3 * 64 * 32);
    assert_memory_equal(g.dtw, clean.dtw, sizeof(float) * 2 * 2);
    grads_free(&g);
  }
  grads_free(&clean);
  free(dy);
  problem_free(&pr);
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
    cmocka_unit_test(test_backward_empty_experts),
    cmocka_unit_test(test_backward_bad_ids),
    cmocka_unit_test(test_backward_pair_sums),
    cmocka_unit_test(test_backward_rounding_points),
    cmocka_unit_test(test_backward_bad_arguments),
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
