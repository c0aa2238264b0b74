/*
 * moe_ref.c: CPU reference of the mega-MoE forward. See moe_ref.h.
 *
 * Written for clarity, not speed: one token at a time, one slot at a time,
 * the way the math reads. Tests use it on every shape by sampling tokens.
 */
#include "moe_ref.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "headroom.h"

float hr_moe_bf16_to_float(uint16_t b)
{
  uint32_t u = (uint32_t)b << 16;
  float f;
  memcpy(&f, &u, sizeof(f));
  return f;
}

uint16_t hr_moe_float_to_bf16(float f)
{
  uint32_t u;
  memcpy(&u, &f, sizeof(u));
  if((u & 0x7fffffffu) > 0x7f800000u)      /* NaN: keep it NaN, quiet */
    return (uint16_t)((u >> 16) | 0x0040u);
  /* Round to nearest, ties to even: add 0x7fff plus the lowest kept bit. */
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}

/* IEEE division here; the kernels divide with __fdividef (within 2 ulp:
 * moe_gemm.cuh, hr__swiglu), a difference the tests' bound absorbs. */
float hr_moe_swiglu(float gate, float up)
{
  float silu = gate / (1.0f + expf(-gate));
  return silu * up;
}

/* Dot product of a bf16 weight row and a float vector, accumulated in
 * double and returned as the float an fp32 accumulator would hold. */
static float dot_bf16(const uint16_t *row, const float *v, int n)
{
  double acc = 0.0;
  int i;
  for(i = 0; i < n; i++)
    acc += (double)hr_moe_bf16_to_float(row[i]) * (double)v[i];
  return (float)acc;
}

static int problem_valid(const hr_moe_ref_problem *p)
{
  return p && p->tokens >= 0 && p->experts > 0 && p->hidden > 0 &&
         p->inter > 0 && p->topk > 0 && p->x && p->topk_ids &&
         p->topk_weights && p->w1 && p->w2;
}

int hr_moe_ref_forward(const hr_moe_ref_problem *p, uint16_t *y)
{
  float *xf = NULL, *hf = NULL, *acc = NULL, *row = NULL;
  int err = HR_OK;
  int t, j, r, c;

  if(!problem_valid(p) || !y)
    return HR_EINVAL;

  const int H = p->hidden, I = p->inter, k = p->topk;
  xf = malloc(sizeof(float) * (size_t)H);
  hf = malloc(sizeof(float) * (size_t)I);
  acc = malloc(sizeof(float) * (size_t)H);
  row = malloc(sizeof(float) * (size_t)H);
  if(!xf || !hf || !acc || !row) {
    err = HR_ENOMEM;
    goto out;
  }

  for(t = 0; t < p->tokens; t++) {
    for(c = 0; c < H; c++) {
      xf[c] = hr_moe_bf16_to_float(p->x[(size_t)t * H + c]);
      acc[c] = 0.0f;
    }
    for(j = 0; j < k; j++) {
      int e = p->topk_ids[(size_t)t * k + j];
      float w = p->topk_weights[(size_t)t * k + j];
      if(e < 0 || e >= p->experts)
        continue;                          /* the kernel skips these too */
      const uint16_t *w1 = p->w1 + (size_t)e * 2 * I * H;
      const uint16_t *w2 = p->w2 + (size_t)e * H * I;
      /* GEMM1 + SwiGLU; h is rounded to bf16, as the kernel stores it. */
      for(r = 0; r < I; r++) {
        float gate = dot_bf16(w1 + (size_t)r * H, xf, H);
        float up = dot_bf16(w1 + (size_t)(I + r) * H, xf, H);
        hf[r] = hr_moe_bf16_to_float(
            hr_moe_float_to_bf16(hr_moe_swiglu(gate, up)));
      }
      /* GEMM2; each expert's row is rounded to bf16 before the sum. */
      for(c = 0; c < H; c++)
        row[c] = hr_moe_bf16_to_float(
            hr_moe_float_to_bf16(dot_bf16(w2 + (size_t)c * I, hf, I)));
      for(c = 0; c < H; c++)
        acc[c] = fmaf(w, row[c], acc[c]);
    }
    for(c = 0; c < H; c++)
      y[(size_t)t * H + c] = hr_moe_float_to_bf16(acc[c]);
  }

out:
  free(xf);
  free(hf);
  free(acc);
  free(row);
  return err;
}

/* ---- the backward ------------------------------------------------------
 *
 * Expert by expert, and within an expert pair by pair in the stable order
 * the forward's routing makes: dW is a sum over an expert's pairs, so this
 * is the order in which a kernel would walk them. Each pair's dx row waits
 * in `rows` until the end, where the k rows of each token are combined in
 * slot order as the forward combines y.
 *
 * `exact` (the tests' unrounded mode) skips every rounding below; r32 is
 * what an fp32 register holds, r16 what a bf16 operand or output holds. */
static double r32(double v, int exact)
{
  return exact ? v : (double)(float)v;
}

static double r16(double v, int exact)
{
  return exact ? v : (double)hr_moe_bf16_to_float(hr_moe_float_to_bf16((float)v));
}

/* A bf16 row dotted with a double vector, accumulated in double. */
static double dot_bf16_d(const uint16_t *row, const double *v, int n)
{
  double acc = 0.0;
  int i;
  for(i = 0; i < n; i++)
    acc += (double)hr_moe_bf16_to_float(row[i]) * v[i];
  return acc;
}

static int backward(const hr_moe_ref_problem *p, const uint16_t *dy, int exact,
                    uint16_t *dx, float *dx_exact, float *dw1, float *dw2,
                    float *dtw)
{
  double *xf = NULL, *dyf = NULL, *g = NULL, *u = NULL, *a = NULL;
  double *q = NULL, *dg = NULL, *du = NULL, *wa = NULL;
  double *gw1 = NULL, *gw2 = NULL, *rows = NULL;
  int err = HR_OK;
  int e, t, j, r, c;
  size_t pair, i;

  if(!problem_valid(p) || !dy || !(exact ? (void *)dx_exact : (void *)dx) ||
     !dw1 || !dw2 || !dtw)
    return HR_EINVAL;

  const int T = p->tokens, E = p->experts, H = p->hidden, I = p->inter;
  const int k = p->topk;
  const size_t pairs = (size_t)T * k;
  const size_t n1 = (size_t)2 * I * H, n2 = (size_t)H * I;
  xf = malloc(sizeof(double) * (size_t)H);
  dyf = malloc(sizeof(double) * (size_t)H);
  g = malloc(sizeof(double) * (size_t)I);
  u = malloc(sizeof(double) * (size_t)I);
  a = malloc(sizeof(double) * (size_t)I);
  q = malloc(sizeof(double) * (size_t)I);
  dg = malloc(sizeof(double) * (size_t)I);
  du = malloc(sizeof(double) * (size_t)I);
  wa = malloc(sizeof(double) * (size_t)I);
  gw1 = malloc(sizeof(double) * n1);
  gw2 = malloc(sizeof(double) * n2);
  rows = calloc(pairs * H + 1, sizeof(double));   /* + 1: T may be 0 */
  if(!xf || !dyf || !g || !u || !a || !q || !dg || !du || !wa || !gw1 ||
     !gw2 || !rows) {
    err = HR_ENOMEM;
    goto out;
  }

  /* Pairs with an id outside [0, E) contribute nothing: d(w) 0, a zero dx
   * row that the combine skips. */
  for(pair = 0; pair < pairs; pair++)
    dtw[pair] = 0.0f;

  for(e = 0; e < E; e++) {
    const uint16_t *w1g = p->w1 + (size_t)e * n1;       /* [I, H] */
    const uint16_t *w1u = w1g + (size_t)I * H;          /* [I, H] */
    const uint16_t *w2 = p->w2 + (size_t)e * n2;        /* [H, I] */
    for(i = 0; i < n1; i++)
      gw1[i] = 0.0;
    for(i = 0; i < n2; i++)
      gw2[i] = 0.0;

    for(pair = 0; pair < pairs; pair++) {
      if(p->topk_ids[pair] != e)
        continue;
      t = (int)(pair / (size_t)k);
      const double w = p->topk_weights[pair];
      double dwt = 0.0;
      for(c = 0; c < H; c++) {
        xf[c] = hr_moe_bf16_to_float(p->x[(size_t)t * H + c]);
        dyf[c] = hr_moe_bf16_to_float(dy[(size_t)t * H + c]);
      }

      /* The forward's GEMM1 and SwiGLU: g, u as its fp32 accumulators held
       * them (what it saves) and a = h, bitwise what GEMM2 was given. */
      for(r = 0; r < I; r++) {
        g[r] = r32(dot_bf16_d(w1g + (size_t)r * H, xf, H), exact);
        u[r] = r32(dot_bf16_d(w1u + (size_t)r * H, xf, H), exact);
        if(exact)
          a[r] = g[r] / (1.0 + exp(-g[r])) * u[r];
        else
          a[r] = hr_moe_bf16_to_float(hr_moe_float_to_bf16(
              hr_moe_swiglu((float)g[r], (float)u[r])));
      }

      /* q = W2[e]^T dy_t: the gradient at GEMM2's input before the routing
       * weight, y_t = ... + w W2[e] a. A column of W2 a row of q. */
      for(r = 0; r < I; r++) {
        double acc = 0.0;
        for(c = 0; c < H; c++)
          acc += (double)hr_moe_bf16_to_float(w2[(size_t)c * I + r]) * dyf[c];
        q[r] = r32(acc, exact);
      }

      /* d(w) = <dy_t, W2[e] a> = <q, a>. */
      for(r = 0; r < I; r++)
        dwt += q[r] * a[r];
      dtw[pair] = (float)r32(dwt, exact);

      /* Through the SwiGLU, a = silu(g) u with da = w q:
       *   du = da silu(g),  dg = da u silu'(g),
       *   silu'(g) = s + g s (1 - s) = s (1 + g (1 - s)),  s = 1/(1 + e^-g).
       * dg and du are bf16: the operands of the dx and dW1 GEMMs. */
      for(r = 0; r < I; r++) {
        const double s = 1.0 / (1.0 + exp(-g[r]));
        const double da = w * q[r];
        du[r] = r16(da * g[r] * s, exact);
        dg[r] = r16(da * u[r] * s * (1.0 + g[r] * (1.0 - s)), exact);
        wa[r] = r16(w * a[r], exact);
      }

      /* dW2[e] += do a^T with do = w dy_t, the weight folded into a: it
       * varies along this sum over pairs, so it rides in an operand. */
      for(c = 0; c < H; c++)
        for(r = 0; r < I; r++)
          gw2[(size_t)c * I + r] += dyf[c] * wa[r];

      /* dW1gate[e] += dg x^T, dW1up[e] += du x^T. */
      for(r = 0; r < I; r++)
        for(c = 0; c < H; c++) {
          gw1[(size_t)r * H + c] += dg[r] * xf[c];
          gw1[(size_t)(I + r) * H + c] += du[r] * xf[c];
        }

      /* This pair's dx row: W1gate[e]^T dg + W1up[e]^T du, one GEMM with
       * K = 2I whose fp32 result is stored in bf16, as the forward's rows. */
      for(c = 0; c < H; c++) {
        double acc = 0.0;
        for(r = 0; r < I; r++)
          acc += (double)hr_moe_bf16_to_float(w1g[(size_t)r * H + c]) * dg[r] +
                 (double)hr_moe_bf16_to_float(w1u[(size_t)r * H + c]) * du[r];
        rows[pair * H + c] = r16(acc, exact);
      }
    }

    /* The sums over the expert's pairs, in fp32; 0 for an expert with none. */
    for(i = 0; i < n1; i++)
      dw1[(size_t)e * n1 + i] = (float)gw1[i];
    for(i = 0; i < n2; i++)
      dw2[(size_t)e * n2 + i] = (float)gw2[i];
  }

  /* dx_t = sum over the valid slots of the pair rows, in slot order: in
   * fp32 and rounded once to bf16, or in double and given as fp32. */
  for(t = 0; t < T; t++)
    for(c = 0; c < H; c++) {
      float acc = 0.0f;
      double acc_exact = 0.0;
      for(j = 0; j < k; j++) {
        pair = (size_t)t * k + j;
        e = p->topk_ids[pair];
        if(e < 0 || e >= E)
          continue;
        acc += (float)rows[pair * H + c];
        acc_exact += rows[pair * H + c];
      }
      if(exact)
        dx_exact[(size_t)t * H + c] = (float)acc_exact;
      else
        dx[(size_t)t * H + c] = hr_moe_float_to_bf16(acc);
    }

out:
  free(xf);
  free(dyf);
  free(g);
  free(u);
  free(a);
  free(q);
  free(dg);
  free(du);
  free(wa);
  free(gw1);
  free(gw2);
  free(rows);
  return err;
}

int hr_moe_ref_backward(const hr_moe_ref_problem *p, const uint16_t *dy,
                        uint16_t *dx, float *dw1, float *dw2,
                        float *dtopk_weights)
{
  return backward(p, dy, 0, dx, NULL, dw1, dw2, dtopk_weights);
}

int hr__moe_ref_backward_unrounded(const hr_moe_ref_problem *p,
                                   const uint16_t *dy, float *dx, float *dw1,
                                   float *dw2, float *dtopk_weights)
{
  return backward(p, dy, 1, NULL, dx, dw1, dw2, dtopk_weights);
}
