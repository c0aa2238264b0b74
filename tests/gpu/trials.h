/*
 * trials.h: the rank side of test_overlap_trials (one process per GPU).
 *
 *   trials_rank.c      setup (device, client, MoE data and y_ref), the
 *                      barrier, the watchdog, logging, leases
 *   trials_run.c       one trial: the rank's script of launches, the waits,
 *                      the times, the output check
 *   trials_report.c    statistics of a series over both ranks, the tables
 *   trials_repro.c     test 1, the reproduction without a lease
 *   trials_modes.c     tests 2 and 3, the trials in headroom and partition
 *                      mode
 *   trials_incident.c  test 4, an incident raises the headroom
 */
#ifndef HR_TRIALS_H
#define HR_TRIALS_H

#include <stdint.h>

/* nccl.h first: headroom.h then defines hr_lease_fill_nccl_config. */
#include "trials_nccl.h"

#include "gpu_util.h"
#include "trials_plan.h"
#include "trials_sync.h"

#ifdef __cplusplus
extern "C" {
#endif

enum {
  TR_TEST_REPRO = 1,
  TR_TEST_HEADROOM = 2,
  TR_TEST_PARTITION = 4,
  TR_TEST_INCIDENT = 8,
  TR_TEST_ALL = 15
};

#define TR_PATH_MAX 512

typedef struct tr_opts {
  uint64_t seed;
  int trials;             /* per mode, tests 2 and 3 */
  int tests;              /* TR_TEST_* */
  int timeout_ms;         /* barrier timeout of every trial launch */
  int repro_timeout_ms;   /* ... of test 1's launches */
  int repro_trials;
  int cluster;            /* mega kernel cluster size */
  int no_gpu;             /* orchestration only (see test_overlap_trials.c) */
  char dir[TR_PATH_MAX];  /* the run's temporary folder */
  char socket[TR_PATH_MAX];
  char headroomctl[TR_PATH_MAX];
} tr_opts;

/* One token count's inputs on the device and its reference output. */
typedef struct tr_input {
  uint16_t *x;
  int32_t *ids;
  float *wts;
  uint16_t *y_ref;        /* host */
} tr_input;

/* What one rank saw in one trial. */
typedef struct tr_outcome {
  int rc;                 /* the launch's or hr_moe_sync's code */
  int wrong;              /* y not bitwise y_ref (only when rc is HR_OK) */
  int grid;               /* the grid launched */
  double mega_ms;         /* mega kernel, events on its stream; -1: failed */
  double coll_ms;         /* first collective enqueued to last done */
  double sync_ms;         /* host: launch to hr_moe_sync's return */
  int barrier, arrived, expected;  /* of a failed launch, else -1 */
  int trapped;            /* the context reported an error afterwards */
  int after_rc, after_wrong;       /* test 1: the idle launch after it */
} tr_outcome;

#define TR_OUTCOME_FIELDS 12

/* A series over both ranks, as printed. */
typedef struct tr_summary {
  int valid;
  int trials, launches, timeouts, errors, wrong;
  int grid_min, grid_max;
  double mega_p50, mega_p99, coll_p50, coll_p99;
  double mega_p50_t[TR_NTOKENS], mega_p99_t[TR_NTOKENS];
  int order_n[TR_NORDERS], order_timeouts[TR_NORDERS], order_wrong[TR_NORDERS];
  double order_mega_p50[TR_NORDERS], order_coll_p50[TR_NORDERS],
         order_coll_p99[TR_NORDERS];
  /* the budget in force (rank 0's, then rank 1's) */
  int headroom[2], grid[2], nccl_max_ctas[2], comm_sms[2], mega_sms[2];
} tr_summary;

typedef struct tr_rank {
  tr_opts o;
  int rank, sms;
  tr_sync sync;
  hr_client *client;
  gt_moe g;                     /* context, weights, y; g.stream = mega */
  tr_input in[TR_NTOKENS];
  void *comm_stream[TR_NCOMMS]; /* ordinary streams for tests 1, 2 */
  void *ev[2 + 2 * TR_NCOMMS];  /* mega start, end; per comm start, end */
  tr_summary headroom;          /* test 2's, shown beside test 3's */
  int failed;                   /* tests that failed */
} tr_rank;

/* Where one series launches. */
typedef struct tr_env {
  const char *name;             /* tag prefix: "repro", "headroom", ... */
  const hr_lease *lease;        /* NULL: grid and cluster below */
  int grid, cluster;
  int timeout_ms;
  void *mega_stream;
  tr_nccl_set *nccl;            /* its streams are the comm streams */
} tr_env;

/* ---- trials_rank.c ----------------------------------------------------- */

/* The whole life of a rank; returns its exit code. */
int tr_rank_main(const tr_opts *o, int rank, int sync_fd);

/* "[rank N] ..." on stdout. */
void tr_log(const tr_rank *r, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Rank 0 only, no prefix: the lines a run is read by. */
void tr_say(const tr_rank *r, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Both ranks reach `tag`; 1 when both say ok. A rank that cannot reach
 * the other (the launcher stopped the run) exits here. */
int tr_agree(tr_rank *r, const char *tag, int ok);
void tr_barrier(tr_rank *r, const char *tag);

/* Gather `n` values of each rank (rank 0's first in `all`); exits like
 * tr_agree on failure. */
void tr_gather(tr_rank *r, const char *tag, const double *mine, int n,
               double *all);

/* Arm the watchdog: a rank that makes no progress past `what` for
 * `seconds` says so and exits 3 (a GPU wait that never ends). */
void tr_watch(const tr_rank *r, const char *what, int seconds);

/* Wait until the lease's budget has held still for 300 ms (5 s at most). */
int tr_lease_settle(const hr_lease *l);

/* The NCCL config a lease gives (blocking). */
ncclConfig_t tr_nccl_config(const hr_lease *l);

/* hr_moe_args of token count index ti, y = the rank's y. */
hr_moe_args tr_args(const tr_rank *r, int ti, int timeout_ms);

/* Copy y of token count index ti back; 1 when it is bitwise y_ref. */
int tr_output_matches(tr_rank *r, int ti, void *stream);

void tr_sleep_us(int us);

/* ---- trials_run.c ------------------------------------------------------ */

/* Run trial `t` under `e`: barrier with the other rank, the rank's
 * script, wait for everything, check y. Exits the process (2) when a
 * collective or the mega kernel never finishes. */
void tr_trial_run(tr_rank *r, const tr_env *e, const tr_trial *t,
                  tr_outcome *out);

/* ---- trials_report.c --------------------------------------------------- */

/* Gather n outcomes of each rank into both[2n] (rank 0's first). */
void tr_gather_outcomes(tr_rank *r, const char *tag, const tr_outcome *mine,
                        int n, tr_outcome *both);

/* Summarise the trials 0..n-1 of the plan of `seed` (both[2n]). */
void tr_summarize(const tr_outcome *both, int n, uint64_t seed,
                  tr_summary *s);

/* The tables of one series (rank 0 prints); `ref`, when valid, is
 * printed beside it. */
void tr_print_summary(const tr_rank *r, const char *mode, const tr_summary *s,
                      const tr_summary *ref);

double tr_percentile(const double *v, int n, double p);

/* "0.412", or "-" where nothing was measured (v < 0). */
const char *tr_ms(char *buf, size_t n, double v);

/* The first word of a test's line: PASS, FAIL, or DRY-RUN under --no-gpu
 * (where nothing was measured, so nothing passed). */
const char *tr_verdict(const tr_rank *r, int passed);

/* ---- the tests: 1 when passed ------------------------------------------ */

int tr_test_repro(tr_rank *r);
int tr_test_mode(tr_rank *r, hr_mode mode);
int tr_test_incident(tr_rank *r);

#ifdef __cplusplus
}
#endif

#endif /* HR_TRIALS_H */
