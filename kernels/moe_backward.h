/*
 * moe_backward.h: what the launch path (moe_api.cu) and the backward
 * kernels (moe_backward.cu) share. Internal: prefix hr__.
 *
 * The backward's four stages (headroom_moe.h says what it computes):
 *
 *   1. route     the forward's routing again (moe_route.cuh), and the
 *                inverse of pos_of: the pair at each expert-order place
 *   2. dgu       per tile of 128 pairs x 64 features: g, u = W1 x again
 *                and q = W2^T dy, three GEMMs over one K = H loop; then
 *                a = bf16(silu(g) u), d(w) partials <q, a>, dg, du, w a
 *   3. grads     the dx rows (dh W1, K = 2I), dW1 = dh^T x and
 *                dW2 = dy^T (w a), K = the expert's pairs
 *   4. combine   dx[t] = sum_j dx row (t, j); d(w[t,j]) = sum of partials
 *
 * The barrier kernel separates them by whole-grid barriers 20, 21, 22;
 * the agnostic kernel by counts of finished tasks (waits 31..34).
 */
#ifndef HR_MOE_BACKWARD_H
#define HR_MOE_BACKWARD_H

#include "headroom_moe.h"
#include "moe_kernel.h"

/* Features per stage-2 tile: the d(w) partials are per pair and per
 * 64 features (I / 64 of them a pair). */
#define HR__MOE_BWD_DGU_N 64
/* Pairs per M tile (stages 2 and 3's dx rows). */
#define HR__MOE_BWD_TILE_M 128
/* Pairs an agnostic route task places. */
#define HR__MOE_BWD_PIECE 2048
/* Tokens a combine task of the agnostic kernel sums. */
#define HR__MOE_BWD_COMBINE_TOKENS 32

/* The barriers (barrier kernel) and waits (agnostic kernel), as the
 * failure detail's `barrier`. */
enum {
  HR__MOE_BWD_BARRIER_ROUTED = 20,
  HR__MOE_BWD_BARRIER_DGU = 21,
  HR__MOE_BWD_BARRIER_GRADS = 22,
  HR__MOE_BWD_WAIT_ROUTE = 31,   /* a dgu tile, for every route piece */
  HR__MOE_BWD_WAIT_DGU = 32,     /* a grads tile, for every dgu tile */
  HR__MOE_BWD_WAIT_DX = 33,      /* a combine task, for every dx tile */
  HR__MOE_BWD_WAIT_CLAIM = 34    /* noticed between tasks (an abort) */
};

typedef struct hr__moe_bwd_params {
  /* The forward's parameters: the inputs, the routing workspace
   * (sorted_tok, pos_of), the failure words, seq and timeout; the route
   * and the barrier take them as they are. The TMA maps, h, ypair and
   * trace are not used through it. */
  hr__moe_params f;
  const uint16_t *dy;   /* [T, H] */
  uint16_t *dx;         /* [T, H] */
  void *dw1;            /* [E, 2I, H] fp32 or bf16 */
  void *dw2;            /* [E, H, I] */
  /* dW1 as [E 2I][H] and dW2 as [E H][I] in dW's type, boxes of 128
   * bytes (the 128-byte swizzle) by 128 rows: the TMA stores of the dW
   * tiles (bwd_dw_store; hr__moe_encode_dw_maps makes them). */
  CUtensorMap tm_dw1, tm_dw2;
  float *dtw;           /* [T, k] */
  int dw_bf16;          /* 1: dW stored in bf16 */
  /* workspace, for max_tokens * k pairs, in expert order */
  int32_t *sorted_pair; /* [pairs]: the pair t k + j at each place */
  uint16_t *dh;         /* [pairs, 2I]: dg then du (bf16) */
  uint16_t *wa;         /* [pairs, I]: w a (bf16), the forward's h memory */
  uint16_t *dxrow;      /* [pairs, H]: the dx rows, the forward's ypair */
  float *dwp;           /* [pairs, I / 64]: d(w) partials */
} hr__moe_bwd_params;

#ifdef __cplusplus
extern "C" {
#endif

cudaError_t hr__moe_bwd_prepare(void);
/* tm_dw1 and tm_dw2 of `p` for dW1, dW2 (p->dw1, dw2, dw_bf16) of `s`'s
 * experts (a rank's own, in expert parallel); HR_OK or HR_ECUDA (or
 * HR_EUNSUPPORTED: a driver without TMA). */
int hr__moe_encode_dw_maps(const hr_moe_shape *s, hr__moe_bwd_params *p);
/* agnostic 0: the barrier kernel (coop: the cooperative attribute);
 * 1: the residency-agnostic kernel. */
cudaError_t hr__moe_bwd_launch(const hr__moe_bwd_params *p, int grid, int agnostic,
                               int coop, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif /* HR_MOE_BACKWARD_H */
