/*
 * trials_plan.h: the seeded plan of the overlap trials, and the script
 * each rank follows in one trial.
 *
 * A trial is a token count, a launch order and a mix of collectives; it is
 * a pure function of (seed, index), so both ranks (separate processes)
 * derive the same plan from the seed alone, and a trial can be repeated
 * from the seed printed at the start of a run.
 *
 * The launch orders (per rank, "mega" = the mega-MoE kernel):
 *
 *   cross         the INC-1291 order: rank 1 launches its mega kernel
 *                 first, then both ranks enqueue the collectives, then,
 *                 2 ms later, rank 0 launches its own. One collective
 *                 (communicator 0) is already in flight on rank 1 when its
 *                 mega kernel starts, and rank 0 enqueues its partner
 *                 after its mega kernel: it stands for the mega kernel's
 *                 own cross-GPU traffic in INC-1291 (the expert dispatch),
 *                 which a kernel whose barriers are all on one GPU lacks.
 *                 Without it rank 1's kernel finishes alone and nothing
 *                 can deadlock; with it, a mega kernel that is only partly
 *                 resident on both GPUs closes the cycle
 *                 rank 0 mega -> rank 0 comm 1,2 -> rank 1 comm 1,2 ->
 *                 rank 1 mega -> rank 1 comm 0 -> rank 0 comm 0 -> rank 0
 *                 mega.
 *   coll-first    every collective first (one per communicator), a pause,
 *                 then the mega kernel, on both ranks.
 *   mega-first    the mega kernel first, a pause, then the collectives.
 *   back-to-back  two to four collectives queued on communicator 0's one
 *                 stream; each rank launches its mega kernel after its own
 *                 (random) number of them.
 *   concurrent    one collective on each of the three communicators, each
 *                 on its own stream; each rank launches its mega kernel
 *                 after its own (random) number of them.
 *
 * Collectives are all-reduce, all-gather or reduce-scatter of 1, 2, 4,
 * ... 64 MiB (the larger of the send and receive buffers), fp32 sum. At
 * most three are in flight on a GPU at once (one per communicator), which
 * is the footprint the trials register with the daemon.
 */
#ifndef HR_TRIALS_PLAN_H
#define HR_TRIALS_PLAN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TR_NCOMMS 3          /* communicators, each with its own stream */
#define TR_MAX_COLL 4        /* collectives in one trial */
#define TR_MAX_STEPS 16
#define TR_MAX_BYTES ((size_t)64 << 20)
#define TR_NTOKENS 3

/* Token counts a trial draws from. */
extern const int tr_tokens[TR_NTOKENS];

typedef enum tr_order {
  TR_ORDER_CROSS,
  TR_ORDER_COLL_FIRST,
  TR_ORDER_MEGA_FIRST,
  TR_ORDER_BACK_TO_BACK,
  TR_ORDER_CONCURRENT,
  TR_NORDERS
} tr_order;

typedef enum tr_op {
  TR_ALL_REDUCE,
  TR_ALL_GATHER,
  TR_REDUCE_SCATTER,
  TR_NOPS
} tr_op;

typedef struct tr_coll {
  int comm;             /* 0..TR_NCOMMS-1 */
  tr_op op;
  size_t bytes;         /* the larger buffer, per rank */
} tr_coll;

typedef struct tr_trial {
  int index;
  int tokens_i;         /* index into tr_tokens */
  tr_order order;
  int ncoll;
  tr_coll coll[TR_MAX_COLL];
  int mega_at[2];       /* back-to-back, concurrent: the rank's mega kernel
                           goes after this many of its collectives */
  int gap_us;           /* host pause between launches */
} tr_trial;

typedef enum tr_step_kind {
  TR_STEP_COLL,         /* arg: index into tr_trial.coll */
  TR_STEP_MEGA,
  TR_STEP_PAUSE         /* arg: microseconds */
} tr_step_kind;

typedef struct tr_step {
  tr_step_kind kind;
  int arg;
} tr_step;

/* Trial `index` of the plan of `seed`. */
void tr_plan_trial(tr_trial *t, uint64_t seed, int index);

/* The reproduction of test 1: the cross order, T = 1024, three concurrent
 * 64 MiB all-reduces. */
void tr_plan_repro(tr_trial *t, int index);

/* What `rank` (0 or 1) does in trial `t`, in order; returns the number of
 * steps (at most `cap`), or -1 when they do not fit or the rank is not 0
 * or 1. */
int tr_plan_script(const tr_trial *t, int rank, tr_step *steps, int cap);

const char *tr_order_name(tr_order o);
const char *tr_op_name(tr_op op);

/* The plan's mix for the record: trials per order and per token count,
 * collectives per op, smallest and largest size. */
typedef struct tr_plan_mix {
  int orders[TR_NORDERS];
  int tokens[TR_NTOKENS];
  int ops[TR_NOPS];
  int colls;
  size_t min_bytes, max_bytes;
} tr_plan_mix;

void tr_plan_mix_of(tr_plan_mix *mix, uint64_t seed, int trials);

#ifdef __cplusplus
}
#endif

#endif /* HR_TRIALS_PLAN_H */
