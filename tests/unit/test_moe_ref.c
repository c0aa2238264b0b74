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
