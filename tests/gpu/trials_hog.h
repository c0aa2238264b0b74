/*
 * trials_hog.h: a kernel that holds SMs until it is released, standing in
 * for a communication kernel that never finishes while the mega kernel
 * waits: one CTA per SM (200 KB of shared memory, so no mega-kernel CTA
 * fits beside it), launched on an ordinary stream of the primary context.
 * It gives up by itself after `max_ms`, so a test that dies never leaves
 * the GPU held.
 */
#ifndef HR_TRIALS_HOG_H
#define HR_TRIALS_HOG_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tr_hog {
  void *stream;
  unsigned *words;      /* host-mapped: [0] release, [1 + i] CTA i runs */
  int ctas;
} tr_hog;

/* Launch `ctas` CTAs on the current device and return once every one of
 * them runs. 0, or -1 with the reason. */
int tr_hog_start(tr_hog *h, int ctas, int max_ms, char *why, size_t n);

/* Let it go and wait for it to end; then free it. */
void tr_hog_release(tr_hog *h);

#ifdef __cplusplus
}
#endif

#endif /* HR_TRIALS_HOG_H */
