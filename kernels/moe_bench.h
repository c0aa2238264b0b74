/*
 * moe_bench.h: the benchmark's way into the launch path, not part of the
 * API (headroom_moe.h): a launch that leaves phases out or runs them
 * twice, so that `make bench-phases` (bench/moe_phases.c) can say where
 * the time goes by differences of measured times. The symbol is in
 * libheadroom_moe.a only; the shared library exports hr_moe_* alone
 * (libheadroom_moe.map), and production launches pass no variant.
 */
#ifndef HR_MOE_BENCH_H
#define HR_MOE_BENCH_H

#include "headroom_moe.h"
#include "moe_kernel.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct hr__moe_variant {
  int agnostic;        /* 1: the residency-agnostic kernel; 0: the barrier
                          kernel, ordinary launch, clusters of 2 */
  unsigned skip;       /* HR__MOE_PHASE_* bits: phases left out */
  unsigned repeat;     /* HR__MOE_PHASE_* bits: phases run twice */
  unsigned gemm;       /* HR__MOE_VAR_* bits: variants of the GEMMs */
  /* NULL, or device memory for the kernel's timeline (the agnostic
   * kernel writes it in a build with HR__MOE_TRACE_AGN only):
   * HR__MOE_TRACE_BUFFER_WORDS(grid) words (moe_kernel.h), zeroed by the
   * caller */
  unsigned long long *trace;
} hr__moe_variant;

/* hr_moe_forward_grid (or _agnostic_grid) with the variant's phases and
 * GEMMs. */
int hr__moe_forward_variant(hr_moe *m, int grid, const hr__moe_variant *v,
                            const hr_moe_args *args, void *stream);

/* The dynamic shared memory both kernels launch with, in bytes (for a
 * benchmark that launches something else alike). */
int hr__moe_smem_bytes(void);

#ifdef __cplusplus
}
#endif

#endif /* HR_MOE_BENCH_H */
