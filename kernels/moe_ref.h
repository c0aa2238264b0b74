/*
 * moe_ref.h: the CPU reference of the mega-MoE forward (plain C11).
 *
 * Computes exactly what kernels/headroom_moe.h describes, in the same
 * steps and with the same roundings: fp32 results of each dot product
 * (accumulated here in double, which only makes the reference more exact),
 * h = bf16(silu(gate) * up), each expert's output row rounded to bf16, then
 * y = bf16(sum over j of w[t,j] * row_j), summed in fp32 with fmaf in slot
 * order. Tokens are independent, so a test can check a sample of tokens of
 * a large problem by building a smaller problem of those tokens alone.
 */
#ifndef HR_MOE_REF_H
#define HR_MOE_REF_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* bf16 is the upper half of an IEEE float; conversion to bf16 rounds to
 * nearest even and keeps NaN a (quiet) NaN. */
float hr_moe_bf16_to_float(uint16_t b);
uint16_t hr_moe_float_to_bf16(float f);

/* silu(g) * u in fp32, the SwiGLU the kernel computes before rounding. */
float hr_moe_swiglu(float gate, float up);

typedef struct hr_moe_ref_problem {
  int tokens, experts, hidden, inter, topk;
  const uint16_t *x;        /* [T, H] bf16 */
  const int32_t *topk_ids;  /* [T, k]; ids outside [0, E) are skipped */
  const float *topk_weights;/* [T, k] */
  const uint16_t *w1;       /* [E, 2I, H] bf16: gate rows, then up rows */
  const uint16_t *w2;       /* [E, H, I] bf16 */
} hr_moe_ref_problem;

/* y [T, H] bf16. 0, or HR_EINVAL (-1) for a bad problem, HR_ENOMEM (-2). */
int hr_moe_ref_forward(const hr_moe_ref_problem *p, uint16_t *y);

#ifdef __cplusplus
}
#endif

#endif /* HR_MOE_REF_H */
