/*
 * test_overlap_plan.c: the CPU half of test_overlap_trials, on every
 * machine: the seeded plan and the ranks' scripts (trials_plan.c), and the
 * launcher's hub that keeps the ranks in step (trials_sync.c).
 *
 * The plan must give both ranks scripts NCCL can run: each collective
 * exactly once per rank, the collectives of one communicator in the same
 * order on both ranks (else NCCL pairs the wrong operations), one mega
 * kernel, at most three collectives in flight (the footprint registered).
 * The cross order must have the shape that closes the deadlock cycle at
 * the full grid. The hub must exchange values, stop ranks that lost step
 * or whose peer died, and kill a rank that never arrives.
 */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "trials_plan.h"
#include "trials_sync.h"

#define SEEDS 4
#define TRIALS 5000

static const uint64_t seeds[SEEDS] = { 1, 42, 0x9e3779b97f4a7c15ULL, 7777 };

static void test_plan_deterministic(void **state)
{
  tr_trial a, b;
  int i, differ = 0;

  (void)state;
  for(i = 0; i < 200; i++) {
    tr_plan_trial(&a, 42, i);
    tr_plan_trial(&b, 42, i);
    assert_memory_equal(&a, &b, sizeof(a));
    tr_plan_trial(&b, 43, i);
    differ += memcmp(&a, &b, sizeof(a)) != 0;
  }
  assert_true(differ > 150);
}

/* The per-communicator sequence of collective indices in a script. */
static void comm_sequences(const tr_trial *t, const tr_step *s, int n,
                           int seq[TR_NCOMMS][TR_MAX_COLL], int len[TR_NCOMMS])
{
  int i;
  memset(len, 0, sizeof(int) * TR_NCOMMS);
  for(i = 0; i < n; i++)
    if(s[i].kind == TR_STEP_COLL) {
      int c = t->coll[s[i].arg].comm;
      seq[c][len[c]++] = s[i].arg;
    }
}

static void test_plan_scripts_runnable(void **state)
{
  tr_step s[2][TR_MAX_STEPS];
  int seq[2][TR_NCOMMS][TR_MAX_COLL], len[2][TR_NCOMMS];
  tr_trial t;
  int k, i, r, j, c;

  (void)state;
  for(k = 0; k < SEEDS; k++) {
    for(i = 0; i < TRIALS; i++) {
      int n[2];
      tr_plan_trial(&t, seeds[k], i);
      assert_true(t.ncoll >= 1 && t.ncoll <= TR_MAX_COLL);
      assert_true(t.tokens_i >= 0 && t.tokens_i < TR_NTOKENS);
      for(j = 0; j < t.ncoll; j++) {
        size_t b = t.coll[j].bytes;
        assert_true(t.coll[j].comm >= 0 && t.coll[j].comm < TR_NCOMMS);
        assert_true((int)t.coll[j].op >= 0 && t.coll[j].op < TR_NOPS);
        assert_true(b >= ((size_t)1 << 20) && b <= TR_MAX_BYTES);
        assert_true((b & (b - 1)) == 0);
        if(t.order == TR_ORDER_BACK_TO_BACK)
          assert_int_equal(t.coll[j].comm, 0);
      }
      for(r = 0; r < 2; r++) {
        int mega = 0, seen[TR_MAX_COLL] = { 0 };
        n[r] = tr_plan_script(&t, r, s[r], TR_MAX_STEPS);
        assert_true(n[r] > 0);
        for(j = 0; j < n[r]; j++) {
          if(s[r][j].kind == TR_STEP_MEGA)
            mega++;
          else if(s[r][j].kind == TR_STEP_COLL)
            seen[s[r][j].arg]++;
          else
            assert_true(s[r][j].arg > 0 && s[r][j].arg <= 2000);
        }
        assert_int_equal(mega, 1);
        for(j = 0; j < t.ncoll; j++)
          assert_int_equal(seen[j], 1);
        comm_sequences(&t, s[r], n[r], seq[r], len[r]);
      }
      /* NCCL pairs the operations of a communicator in issue order. */
      for(c = 0; c < TR_NCOMMS; c++) {
        assert_int_equal(len[0][c], len[1][c]);
        for(j = 0; j < len[0][c]; j++)
          assert_int_equal(seq[0][c][j], seq[1][c][j]);
      }
    }
  }
}

static void test_plan_mix_covers_everything(void **state)
{
  tr_plan_mix m;
  int k, total = 0;

  (void)state;
  tr_plan_mix_of(&m, 42, 1000);
  for(k = 0; k < TR_NORDERS; k++) {
    assert_true(m.orders[k] > 120);     /* about 200 each */
    total += m.orders[k];
  }
  assert_int_equal(total, 1000);
  for(k = 0; k < TR_NTOKENS; k++)
    assert_true(m.tokens[k] > 250);
  for(k = 0; k < TR_NOPS; k++)
    assert_true(m.ops[k] > m.colls / 5);
  assert_int_equal(m.min_bytes, (size_t)1 << 20);
  assert_int_equal(m.max_bytes, TR_MAX_BYTES);
  /* 200 trials, the default, still hold every order. */
  tr_plan_mix_of(&m, 42, 200);
  for(k = 0; k < TR_NORDERS; k++)
    assert_true(m.orders[k] > 0);
}

/* Index of the first step of `kind` (and, for a collective, on `comm`). */
static int find(const tr_trial *t, const tr_step *s, int n, tr_step_kind kind,
                int comm)
{
  int i;
  for(i = 0; i < n; i++)
    if(s[i].kind == kind &&
       (kind != TR_STEP_COLL || t->coll[s[i].arg].comm == comm))
      return i;
  return -1;
}

static void test_plan_cross_closes_the_cycle(void **state)
{
  tr_step s0[TR_MAX_STEPS], s1[TR_MAX_STEPS];
  tr_trial t;
  int n0, n1, j;

  (void)state;
  tr_plan_repro(&t, 0);
  assert_int_equal(t.order, TR_ORDER_CROSS);
  assert_int_equal(tr_tokens[t.tokens_i], 1024);
  assert_int_equal(t.ncoll, 3);
  for(j = 0; j < 3; j++) {
    assert_int_equal(t.coll[j].op, TR_ALL_REDUCE);
    assert_int_equal(t.coll[j].bytes, TR_MAX_BYTES);
    assert_int_equal(t.coll[j].comm, j);
  }
  n0 = tr_plan_script(&t, 0, s0, TR_MAX_STEPS);
  n1 = tr_plan_script(&t, 1, s1, TR_MAX_STEPS);
  /* Rank 1: comm 0 in flight before its mega kernel, comms 1 and 2 after. */
  assert_int_equal(find(&t, s1, n1, TR_STEP_COLL, 0), 0);
  assert_true(find(&t, s1, n1, TR_STEP_MEGA, 0) < find(&t, s1, n1, TR_STEP_COLL, 1));
  assert_true(find(&t, s1, n1, TR_STEP_MEGA, 0) < find(&t, s1, n1, TR_STEP_COLL, 2));
  /* Rank 0: comms 1 and 2 first, its mega kernel later (after rank 1's),
   * comm 0 after it. */
  assert_true(find(&t, s0, n0, TR_STEP_COLL, 1) < find(&t, s0, n0, TR_STEP_MEGA, 0));
  assert_true(find(&t, s0, n0, TR_STEP_COLL, 2) < find(&t, s0, n0, TR_STEP_MEGA, 0));
  assert_true(find(&t, s0, n0, TR_STEP_MEGA, 0) < find(&t, s0, n0, TR_STEP_COLL, 0));
  assert_int_equal(s0[find(&t, s0, n0, TR_STEP_MEGA, 0) - 1].kind, TR_STEP_PAUSE);
  assert_int_equal(s0[find(&t, s0, n0, TR_STEP_MEGA, 0) - 1].arg, 2000);
}

static void test_plan_script_refuses(void **state)
{
  tr_step s[TR_MAX_STEPS];
  tr_trial t;

  (void)state;
  tr_plan_trial(&t, 1, 0);
  assert_int_equal(tr_plan_script(&t, 2, s, TR_MAX_STEPS), -1);
  assert_int_equal(tr_plan_script(&t, -1, s, TR_MAX_STEPS), -1);
  assert_int_equal(tr_plan_script(&t, 0, s, 1), -1);
  assert_int_equal(tr_plan_script(NULL, 0, s, TR_MAX_STEPS), -1);
  t.ncoll = 0;
  assert_int_equal(tr_plan_script(&t, 0, s, TR_MAX_STEPS), -1);
}

/* ---- the hub ------------------------------------------------------------ */

typedef int (*rank_fn)(tr_sync *s, int rank);

/* Two children running `fn` against a hub here; the hub's verdict. */
static int run_hub(rank_fn fn, int wait_s, tr_hub *h, int status[2])
{
  int sv[2][2], i, rc;

  tr_hub_init(h);
  for(i = 0; i < 2; i++)
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv[i]), 0);
  for(i = 0; i < 2; i++) {
    pid_t pid = fork();
    assert_true(pid >= 0);
    if(pid == 0) {
      tr_sync s;
      close(sv[0][0]);
      close(sv[1][0]);
      close(sv[1 - i][1]);
      tr_sync_init(&s, sv[i][1]);
      _exit(fn(&s, i));
    }
    h->r[i].pid = pid;
  }
  for(i = 0; i < 2; i++) {
    close(sv[i][1]);
    h->r[i].fd = sv[i][0];
  }
  rc = tr_hub_serve(h, wait_s, 60);
  for(i = 0; i < 2; i++)
    status[i] = h->r[i].status;
  return rc;
}

static int exchange(tr_sync *s, int rank)
{
  double mine[3] = { rank * 10 + 1, rank * 10 + 2.5, -rank - 0.125 };
  double all[6];
  char why[200];
  int round;

  for(round = 0; round < 50; round++) {
    if(tr_sync_gather(s, "round", mine, 3, all, why, sizeof(why)))
      return 10;
    if(all[0] != 1 || all[1] != 2.5 || all[2] != -0.125 || all[3] != 11 ||
       all[4] != 12.5 || all[5] != -1.125)
      return 11;
  }
  if(tr_sync_gather(s, "barrier", NULL, 0, NULL, why, sizeof(why)))
    return 12;
  return 0;
}

static void test_hub_exchanges(void **state)
{
  tr_hub h;
  int st[2];

  (void)state;
  assert_int_equal(run_hub(exchange, 10, &h, st), 0);
  assert_true(WIFEXITED(st[0]) && WEXITSTATUS(st[0]) == 0);
  assert_true(WIFEXITED(st[1]) && WEXITSTATUS(st[1]) == 0);
  assert_string_equal(h.last, "barrier");
  assert_false(h.killed);
  tr_hub_free(&h);
}

/* Rank 1 is one step ahead: both are told, neither hangs. */
static int out_of_step(tr_sync *s, int rank)
{
  char why[200];
  double v = rank, all[2];
  if(tr_sync_gather(s, rank ? "trial.2" : "trial.1", &v, 1, all, why,
                    sizeof(why)) == 0)
    return 10;
  return strstr(why, "lost step") ? 3 : 11;
}

static void test_hub_lost_step(void **state)
{
  tr_hub h;
  int st[2];

  (void)state;
  assert_int_equal(run_hub(out_of_step, 10, &h, st), -1);
  assert_true(WIFEXITED(st[0]) && WEXITSTATUS(st[0]) == 3);
  assert_true(WIFEXITED(st[1]) && WEXITSTATUS(st[1]) == 3);
  assert_false(h.killed);
  tr_hub_free(&h);
}

/* Rank 0 dies before the barrier: rank 1 is told instead of waiting. */
static int peer_dies(tr_sync *s, int rank)
{
  char why[200];
  if(rank == 0)
    return 5;
  if(tr_sync_gather(s, "after", NULL, 0, NULL, why, sizeof(why)) == 0)
    return 10;
  return strstr(why, "rank 0 exited") ? 4 : 11;
}

static void test_hub_peer_dies(void **state)
{
  tr_hub h;
  int st[2];

  (void)state;
  assert_int_equal(run_hub(peer_dies, 10, &h, st), -1);
  assert_true(WIFEXITED(st[0]) && WEXITSTATUS(st[0]) == 5);
  assert_true(WIFEXITED(st[1]) && WEXITSTATUS(st[1]) == 4);
  tr_hub_free(&h);
}

/* Rank 1 never arrives (a GPU wait that never ends): both are killed once
 * rank 0 has waited the limit. */
static int stuck(tr_sync *s, int rank)
{
  char why[200];
  if(rank == 1) {
    sleep(60);
    return 0;
  }
  tr_sync_gather(s, "never", NULL, 0, NULL, why, sizeof(why));
  sleep(60);
  return 0;
}

static void test_hub_kills_a_stuck_rank(void **state)
{
  tr_hub h;
  int st[2];

  (void)state;
  assert_int_equal(run_hub(stuck, 1, &h, st), -1);
  assert_true(h.killed);
  assert_non_null(strstr(h.why, "rank 1 did not catch up"));
  assert_true(WIFSIGNALED(st[0]) && WTERMSIG(st[0]) == SIGKILL);
  assert_true(WIFSIGNALED(st[1]) && WTERMSIG(st[1]) == SIGKILL);
  tr_hub_free(&h);
}

int main(void)
{
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_plan_deterministic),
    cmocka_unit_test(test_plan_scripts_runnable),
    cmocka_unit_test(test_plan_mix_covers_everything),
    cmocka_unit_test(test_plan_cross_closes_the_cycle),
    cmocka_unit_test(test_plan_script_refuses),
    cmocka_unit_test(test_hub_exchanges),
    cmocka_unit_test(test_hub_lost_step),
    cmocka_unit_test(test_hub_peer_dies),
    cmocka_unit_test(test_hub_kills_a_stuck_rank),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
