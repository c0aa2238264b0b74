/*
 * trials_green.h: more streams in the green context of a given stream.
 *
 * hr_partition_comm_stream() is one stream, but the trials run three
 * communicators whose collectives must be able to run at once (and must,
 * for the cross order: queued on one stream, two communicators issued in
 * opposite orders on the two ranks deadlock NCCL by themselves). These
 * streams are made in the same comm partition (cuStreamGetGreenCtx, then
 * cuGreenCtxStreamCreate, CUDA 12.5+, found through the runtime's driver
 * entry points so that nothing links libcuda).
 */
#ifndef HR_TRIALS_GREEN_H
#define HR_TRIALS_GREEN_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* `n` new non-blocking streams in the green context `stream` belongs to.
 * 0, or -1 with the reason (not a green-context stream, no driver
 * support, a failed call). */
int tr_green_streams(void *stream, int n, void **out, char *why, size_t wn);

/* Destroy streams made above (NULL entries are skipped). */
void tr_green_streams_free(void **s, int n);

#ifdef __cplusplus
}
#endif

#endif /* HR_TRIALS_GREEN_H */
