/*
 * trials_sync.h: how the two rank processes of the overlap trials keep in
 * step, through the launcher that started them.
 *
 * Each rank holds one end of a socketpair; the launcher holds the other
 * ends (the hub). A rank sends "G <tag> <n> <v1> ... <vn>\n" and blocks;
 * once both ranks have sent the same tag with the same n, the hub answers
 * both with "R <tag> <2n> <rank 0's values> <rank 1's values>\n": an
 * all-gather that is also a barrier. The hub answers "X <why>\n" when the
 * tags or counts differ (the ranks lost step) or the other rank exited,
 * and kills both ranks when one waits longer than its limit for the
 * other: a rank stuck in a GPU wait never answers, and the run must end.
 * No GPU is involved, so the barrier between trials never competes with
 * the kernels under test for SMs.
 */
#ifndef HR_TRIALS_SYNC_H
#define HR_TRIALS_SYNC_H

#include <stddef.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TR_TAG_MAX 64

/* ---- rank side ---------------------------------------------------------- */

typedef struct tr_sync {
  int fd;
  char *buf;            /* bytes read past the last reply */
  size_t len, cap;
} tr_sync;

void tr_sync_init(tr_sync *s, int fd);
void tr_sync_free(tr_sync *s);

/* Send `n` values under `tag` (no spaces, under TR_TAG_MAX bytes), wait
 * for both ranks' values in `all` (2n of them, rank 0's first; may be NULL
 * when n is 0). 0, or -1 with the reason in `why`. */
int tr_sync_gather(tr_sync *s, const char *tag, const double *mine, int n,
                   double *all, char *why, size_t wn);

/* ---- launcher side ------------------------------------------------------ */

typedef struct tr_hub_rank {
  int fd;               /* -1 once the rank closed its end */
  pid_t pid;            /* 0 once reaped */
  int status;           /* wait status once reaped */
  char *buf;
  size_t len, cap;
  char *pending;        /* a complete G line waiting for the other rank */
} tr_hub_rank;

typedef struct tr_hub {
  tr_hub_rank r[2];
  char last[TR_TAG_MAX];  /* the last tag both ranks reached */
  int killed;             /* the hub killed the ranks */
  char why[256];          /* why, when it did */
} tr_hub;

void tr_hub_init(tr_hub *h);

/* Serve both ranks until both have exited. A rank waiting more than
 * `wait_s` for the other, or the whole run passing `total_s`, gets both
 * killed (SIGKILL; h->killed, h->why). Returns 0 when both exited with
 * status 0, else -1. */
int tr_hub_serve(tr_hub *h, int wait_s, int total_s);

void tr_hub_free(tr_hub *h);

#ifdef __cplusplus
}
#endif

#endif /* HR_TRIALS_SYNC_H */
