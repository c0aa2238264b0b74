/*
 * moe_bench.h: the benchmark hook, the one way past the API
 * (headroom_moe.h) into the production kernels: a launch of the same code
 * the shared library ships, with phases left out or run twice, so that
 * `make bench-phases` (bench/moe_phases.c) can say where the time goes by
 * differences of measured times; and with the tests' faults and forced
 * paths (tests/gpu/test_moe_grids.c, test_moe_tma_timeout.c). Every field
 * reaches the kernels as a kernel parameter that a production launch sets
 * to 0, read in uniform branches. The symbol is in libheadroom_moe.a
 * only, which holds the shared library's objects; the shared library
 * exports hr_moe_* alone (libheadroom_moe.map). docs/kernels.md,
 * "Benchmark hook".
 */
#ifndef HR_MOE_BENCH_H
#define HR_MOE_BENCH_H

#include "headroom_moe.h"
#include "moe_kernel.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct hr__moe_hook {
  int agnostic;        /* 1: the residency-agnostic kernel; 0: the barrier
                          kernel, ordinary launch, clusters of 2 */
  unsigned skip;       /* HR__MOE_PHASE_* bits: phases left out; and the
                          tests' faults, HR__MOE_FAULT_* (moe_kernel.h) */
  unsigned repeat;     /* HR__MOE_PHASE_* bits: phases run twice */
  int claim;           /* 1: the barrier kernel claims its units at any H,
                          as production does from HR__MOE_CLAIM_MIN_H */
  /* NULL, or device memory for the kernel's timeline (the agnostic
   * kernel writes it in a build with HR__MOE_TRACE_AGN only):
   * HR__MOE_TRACE_BUFFER_WORDS(grid) words (moe_kernel.h), zeroed by the
   * caller */
  unsigned long long *trace;
} hr__moe_hook;

/* hr_moe_forward_grid (or _agnostic_grid) through the hook. HR_EINVAL
 * for a NULL hook, or a bit of skip or repeat that names nothing (the
 * faults are skip's only). */
int hr__moe_forward_hook(hr_moe *m, int grid, const hr__moe_hook *h,
                         const hr_moe_args *args, void *stream);

/* hr_moe_backward_grid through the hook: skip's phase bits leave the
 * backward's stages out (HR__MOE_PHASE_GEMM1: dgu, GEMM2: the dx rows,
 * DW: the dW groups, COMBINE); repeat, claim and trace are not used.
 * HR_EINVAL for any other bit. */
int hr__moe_backward_hook(hr_moe *m, int grid, const hr__moe_hook *h,
                          const hr_moe_grad_args *args, void *stream);

/* The dynamic shared memory both kernels launch with, in bytes (for a
 * benchmark that launches something else alike). */
int hr__moe_smem_bytes(void);

#ifdef __cplusplus
}
#endif

#endif /* HR_MOE_BENCH_H */
