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
 *
 * hr_moe_ref_backward, below, is the backward's reference: dx, dW1, dW2
 * and the routing weights' gradient, with the roundings its kernels will
 * make, and what the forward must save for it.
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

/*
 * The backward. Given dy [T, H] (bf16, the gradient of the loss at y), per
 * pair (t, j) with e = ids[t,j] in [0, E), x = x_t, w = w[t,j]:
 *
 *   g = W1gate[e] x,  u = W1up[e] x       the forward's GEMM1 (fp32 values)
 *   a = bf16(silu(g) * u)                  the forward's h, bitwise
 *   q = W2[e]^T dy_t                       GEMM2's gradient, before w
 *   d(w[t,j]) = <q, a>                     = <dy_t, W2[e] a> = <dy_t, o>
 *   da = w q
 *   du = bf16(da * silu(g))
 *   dg = bf16(da * u * silu'(g)),          silu'(g) = s(g) (1 + g (1 - s(g)))
 *   dW2[e]     += dy_t (bf16(w a))^T
 *   dW1gate[e] += dg x^T,  dW1up[e] += du x^T
 *   dxrow      = bf16(W1gate[e]^T dg + W1up[e]^T du)
 *   dx_t = bf16(sum over j of dxrow_j), in fp32 in slot order
 *
 * Pairs with ids outside [0, E) contribute nothing and get d(w) = 0; an
 * expert without pairs gets dW exactly 0 and its weights are never read.
 * d(w) is taken as <q, a> rather than <dy_t, o>: the same number in exact
 * arithmetic, and so the backward needs neither o nor a second GEMM2.
 *
 * Roundings (what the GPU kernels will do; the dot products' fp32 results
 * are accumulated here in double, as in the forward):
 * - dg, du and w a are rounded to bf16 because they are the bf16 operands
 *   of the next GEMMs (dx and dW1 take dg, du; dW2 takes w a: the routing
 *   weight varies along dW2's reduction, so it must go into an operand).
 * - dx is combined as the forward combines y: each pair's row rounded to
 *   bf16 (it is stored in expert order), the k rows summed in fp32 in slot
 *   order and rounded once, so dx is bitwise the same for any split of the
 *   pairs over CTAs.
 * - dW1 and dW2 are fp32: the sum over an expert's pairs (k T / E of them:
 *   64 at Qwen3 T = 1024, 1024 at T = 16384) is the backward's one long
 *   reduction, kept in fp32 so that a kernel may split an expert's pairs
 *   over CTAs and add the fp32 partials in a fixed order; and optimizers
 *   keep fp32 master weights (FSDP reduces gradients in fp32 under mixed
 *   precision). A bf16 parameter's gradient is bf16(dW), rounded once at
 *   the end. The cost is 4 bytes a weight (Qwen3-30B-A3B E=128: 2.25 GiB a
 *   layer; DeepSeek-V3 E=256: 42 GiB a layer, 21 GiB in bf16).
 * - d(w) is fp32, the routing weights' type.
 * The dW sums here run over an expert's pairs in pair order t k + j, the
 * stable expert order of the forward's routing (moe_route.cuh), in double;
 * a kernel's fp32 sum in another fixed order is within rounding of it.
 *
 * What the forward saves for this: g and u in fp32 per pair, in expert
 * order (its GEMM1 epilogue writes them beside h), and its routing
 * (sorted_tok and pos_of, int32). Per token: k 2I 4 + 8k bytes, 49216 B
 * (48 KiB) for Qwen3-30B-A3B (E=128 H=2048 I=768 k=8) and 131136 B
 * (128 KiB) for DeepSeek-V3 (E=256 H=7168 I=2048 k=8). x, ids and w are
 * the op's inputs, held anyway. With g, u saved the backward's GEMMs are
 * q, dx, dW1, dW2: 12 I H flops a pair, against the forward's 6 I H.
 * The alternatives, for the record: recompute GEMM1 from x (64 B a token,
 * the routing only; 4 I H more flops a pair, +33% on the backward and a
 * second pass over W1, bitwise the same g, u because the forward's GEMM1
 * is grid-independent) for a trainer short of memory; g, u in bf16 (24 KiB
 * / 64 KiB) changes silu(g), silu'(g) and a, unless h is saved too (36 KiB
 * / 96 KiB in all). torch autograd of bench_moe.py's reference keeps, by
 * our count, x in expert order, GEMM1's output, silu(g), h and GEMM2's
 * output in bf16, k (2H + 4I) 2 bytes: 112 KiB / 352 KiB a token.
 *
 * Outputs (written in full): dx [T, H] bf16, dw1 [E, 2I, H] fp32 (gate
 * rows, then up rows), dw2 [E, H, I] fp32, dtopk_weights [T, k] fp32.
 * 0, or HR_EINVAL (-1) for a bad problem or a NULL pointer (nothing is
 * written), HR_ENOMEM (-2).
 */
int hr_moe_ref_backward(const hr_moe_ref_problem *p, const uint16_t *dy,
                        uint16_t *dx, float *dw1, float *dw2,
                        float *dtopk_weights);

/* For the tests: the same math with nothing rounded on the way (g, u, q
 * and a are not rounded to fp32 or bf16, nor dg, du, w a and the dx rows;
 * the k rows are summed in double), and dx in fp32: the derivative of the
 * forward with no roundings at all, to check against finite differences. */
int hr__moe_ref_backward_unrounded(const hr_moe_ref_problem *p,
                                   const uint16_t *dy, float *dx, float *dw1,
                                   float *dw2, float *dtopk_weights);

#ifdef __cplusplus
}
#endif

#endif /* HR_MOE_REF_H */
