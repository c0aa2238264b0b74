/*
 * gpu_bwd.h: device-side checks of large outputs (tests/gpu/gpu_bwd_kernels.cu)
 * for test_moe_backward.c. Each counts on `stream`, waits for it and puts
 * the count in *out; returns 0 or a cudaError_t.
 */
#ifndef HR_GPU_BWD_H
#define HR_GPU_BWD_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Elements of p[0..n) (bf16 when `bf16`, else fp32) that are Inf or NaN. */
int gt_dev_count_nonfinite(const void *p, size_t n, int bf16, void *stream,
                           size_t *out);
/* Elements that are not exactly zero (+0 or -0); NaN is not zero. */
int gt_dev_count_nonzero(const void *p, size_t n, int bf16, void *stream,
                         size_t *out);
/* 4-byte words of a and b (then single bytes of a tail) that differ. */
int gt_dev_count_diff(const void *a, const void *b, size_t bytes, void *stream,
                      size_t *out);

/* Elements i where b[i] (bf16) is not f[i] (fp32) rounded to nearest even. */
int gt_dev_count_not_rounded(const float *f, const uint16_t *b, size_t n,
                             void *stream, size_t *out);

#ifdef __cplusplus
}
#endif

#endif /* HR_GPU_BWD_H */
