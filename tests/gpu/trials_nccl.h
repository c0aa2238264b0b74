/*
 * trials_nccl.h: the NCCL calls of the overlap trials, through dlopen.
 *
 * Types come from nccl.h at build time; the library is opened at run time
 * ($NCCL_HOME/lib/libnccl.so.2, then the loader's path), so the program
 * builds and skips cleanly where NCCL is not installed, and runs against
 * the NCCL of the Python wheel on the GPU machine.
 *
 * One rank per process: the unique id of a communicator goes from rank 0
 * to rank 1 through a file in the run's folder (written aside, then
 * renamed into place, so rank 1 never reads half of it).
 */
#ifndef HR_TRIALS_NCCL_H
#define HR_TRIALS_NCCL_H

#include <stddef.h>

#include <nccl.h>

#include "trials_plan.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Open libnccl.so.2 and find every function used here. 0 with the
 * version ("2.28.9"), or -1 with the reason. */
int tr_nccl_open(char *version, size_t vn, char *why, size_t n);

/* Rank 0 makes the id of communicator `name` and publishes it in `dir`;
 * rank 1 waits for it up to `timeout_ms`. */
int tr_nccl_id_share(const char *dir, const char *name, int rank,
                     int timeout_ms, ncclUniqueId *id, char *why, size_t n);

/* A set of TR_NCOMMS communicators of 2 ranks made with one config, each
 * with a send and a receive buffer of TR_MAX_BYTES and a stream (not
 * owned: the caller's, per communicator). */
typedef struct tr_nccl_set {
  ncclComm_t comm[TR_NCOMMS];
  void *stream[TR_NCOMMS];
  void *send[TR_NCOMMS], *recv[TR_NCOMMS];
} tr_nccl_set;

/* Collective over both ranks (rank 1 waits for rank 0's ids). `config`
 * is copied per communicator (NCCL writes into it). */
int tr_nccl_set_create(tr_nccl_set *s, const char *dir, const char *name,
                       int rank, const ncclConfig_t *config,
                       void *const streams[TR_NCOMMS], char *why, size_t n);
void tr_nccl_set_destroy(tr_nccl_set *s);

/* Enqueue collective `c` on its communicator's stream. */
int tr_nccl_run(tr_nccl_set *s, const tr_coll *c, char *why, size_t n);

#ifdef __cplusplus
}
#endif

#endif /* HR_TRIALS_NCCL_H */
