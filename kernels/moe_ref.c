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
