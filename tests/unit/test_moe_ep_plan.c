/*
 * test_moe_ep_plan.c: the expert-parallel forward's host logic that needs
 * no GPU (kernels/moe_ep_plan.c), on any machine: hr_moe_ep_create's
 * argument checks (bad rank, nranks 0 or > 8, E % R != 0, a NULL or
 * empty bootstrap, a bad exchange or backward flag), the two
 * allocations' layout with and without the backward's regions and
 * hr_moe_ep_memory / hr_moe_ep_memory_backward (every region 256-byte aligned, none overlapping,
 * the sizes headroom_moe.h states, the DeepSeek-V3 and Qwen3 figures
 * it quotes), and the bootstrap's exchange through an in-process
 * allgather of threads: every rank finds the others' blocks by pointer,
 * agrees on a peer's failure, refuses a rank of another shape, and IPC
 * is picked for (and only for) records of another process.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "headroom.h"
#include "headroom_moe.h"
#include "moe_ep.h"

static const hr_moe_shape QWEN3 = { 128, 2048, 768, 8, 4096 };
static const hr_moe_shape DSV3 = { 256, 7168, 2048, 8, 4096 };
static const hr_moe_shape SMALL = { 8, 256, 512, 2, 64 };

static int ag_never(void *ctx, const void *send, void *recv, size_t n)
{
  (void)ctx;
  (void)send;
  (void)recv;
  (void)n;
  return 0;
}

static void test_args_check(void **state)
{
  const hr_moe_ep_bootstrap ok = { ag_never, NULL, HR_MOE_EP_EXCHANGE_AUTO, 0 };
  hr_moe_ep_bootstrap b = ok;
  hr_moe_shape s = QWEN3;
  (void)state;

  assert_int_equal(hr__moe_ep_args_check(&s, 0, 8, &ok), HR_OK);
  assert_int_equal(hr__moe_ep_args_check(&s, 7, 8, &ok), HR_OK);
  assert_int_equal(hr__moe_ep_args_check(&s, 0, 1, &ok), HR_OK);
  /* the rank */
  assert_int_equal(hr__moe_ep_args_check(&s, -1, 8, &ok), HR_EINVAL);
  assert_int_equal(hr__moe_ep_args_check(&s, 8, 8, &ok), HR_EINVAL);
  /* nranks 0, > 8, not dividing E */
  assert_int_equal(hr__moe_ep_args_check(&s, 0, 0, &ok), HR_EINVAL);
  assert_int_equal(hr__moe_ep_args_check(&s, 0, 9, &ok), HR_EINVAL);
  assert_int_equal(hr__moe_ep_args_check(&s, 0, 16, &ok), HR_EINVAL);
  s.experts = 60;                              /* 60 % 8 */
  assert_int_equal(hr__moe_ep_args_check(&s, 0, 8, &ok), HR_EINVAL);
  assert_int_equal(hr__moe_ep_args_check(&s, 0, 4, &ok), HR_OK);
  assert_int_equal(hr__moe_ep_args_check(&s, 0, 3, &ok), HR_OK);
  s = QWEN3;
  s.hidden = 300;                              /* hr_moe_create's rules too */
  assert_int_equal(hr__moe_ep_args_check(&s, 0, 2, &ok), HR_EINVAL);
  s = QWEN3;
  s.max_tokens = 1 << 25;                      /* 8 * 2^25 * 8 pairs > 2^30 */
  assert_int_equal(hr__moe_ep_args_check(&s, 0, 8, &ok), HR_EINVAL);
  assert_int_equal(hr__moe_ep_args_check(NULL, 0, 8, &ok), HR_EINVAL);
  /* the bootstrap */
  assert_int_equal(hr__moe_ep_args_check(&QWEN3, 0, 8, NULL), HR_EINVAL);
  b.allgather = NULL;
  assert_int_equal(hr__moe_ep_args_check(&QWEN3, 0, 8, &b), HR_EINVAL);
  b = ok;
  b.exchange = 3;
  assert_int_equal(hr__moe_ep_args_check(&QWEN3, 0, 8, &b), HR_EINVAL);
  b.exchange = -1;
  assert_int_equal(hr__moe_ep_args_check(&QWEN3, 0, 8, &b), HR_EINVAL);
  b = ok;
  b.backward = 1;
  assert_int_equal(hr__moe_ep_args_check(&QWEN3, 0, 8, &b), HR_OK);
  b.backward = 2;
  assert_int_equal(hr__moe_ep_args_check(&QWEN3, 0, 8, &b), HR_EINVAL);
  b.backward = -1;
  assert_int_equal(hr__moe_ep_args_check(&QWEN3, 0, 8, &b), HR_EINVAL);
}

/* [off, off + n) regions: aligned, inside, disjoint. */
static void expect_regions(const uint64_t *off, const uint64_t *len, int n, uint64_t total)
{
  int i, j;
  for(i = 0; i < n; i++) {
    assert_true(off[i] % 256 == 0);
    assert_true(off[i] + len[i] <= total);
    for(j = 0; j < n; j++)
      if(i != j)
        assert_true(off[i] + len[i] <= off[j] || off[j] + len[j] <= off[i]);
  }
}

static void check_layout(const hr_moe_shape *s, int R, int backward)
{
  hr__moe_ep_layout l;
  uint64_t peer = 0, local = 0, peer_min, local_min;
  const uint64_t H = (uint64_t)s->hidden, I = (uint64_t)s->inter, k = (uint64_t)s->topk;
  const uint64_t cap = (uint64_t)s->max_tokens, rows = R * cap, pairs = rows * k;

  assert_int_equal(hr__moe_ep_layout_of(s, R, backward, &l), HR_OK);
  assert_int_equal(l.backward, backward);
  assert_int_equal(l.local_experts, s->experts / R);
  assert_int_equal(l.rows, (int64_t)rows);
  assert_int_equal(l.pairs, (int64_t)pairs);
  assert_int_equal(l.flags, 0);                /* the kernel finds them at 0 */
  if(backward) {
    const uint64_t off[] = { l.flags, l.recv_ids, l.recv_tok, l.recv_x, l.ret, l.recv_w,
                             l.recv_dy, l.ret_dw };
    const uint64_t len[] = { sizeof(hr__moe_ep_flags), pairs * 4, rows * 4, rows * H * 2,
                             cap * k * H * 2, pairs * 4, rows * H * 2, cap * k * 4 };
    expect_regions(off, len, 8, l.peer_bytes);
  } else {
    const uint64_t off[] = { l.flags, l.recv_ids, l.recv_tok, l.recv_x, l.ret };
    const uint64_t len[] = { sizeof(hr__moe_ep_flags), pairs * 4, rows * 4, rows * H * 2,
                             cap * k * H * 2 };
    expect_regions(off, len, 5, l.peer_bytes);
    assert_int_equal(l.recv_w + l.recv_dy + l.ret_dw, 0);
  }
  if(backward) {
    const uint64_t off[] = { l.sync, l.sorted_tok, l.pos_of, l.src_pos, l.h, l.ypair,
                             l.sorted_pair, l.dh, l.dwp };
    const uint64_t len[] = { l.reset_bytes, pairs * 4, pairs * 4, cap * k * 4, pairs * I * 2,
                             pairs * H * 2, pairs * 4, pairs * 2 * I * 2, pairs * (I / 64) * 4 };
    expect_regions(off, len, 9, l.local_bytes);
  } else {
    const uint64_t off[] = { l.sync, l.sorted_tok, l.pos_of, l.src_pos, l.h, l.ypair };
    const uint64_t len[] = { l.reset_bytes, pairs * 4, pairs * 4, cap * k * 4, pairs * I * 2,
                             pairs * H * 2 };
    expect_regions(off, len, 6, l.local_bytes);
    assert_int_equal(l.sorted_pair + l.dh + l.dwp, 0);
  }
  assert_true(l.reset_bytes >= 1024);
  /* the agnostic form's schedule and counters: in what a failure clears */
  assert_int_equal(l.tiles, (int64_t)(pairs / 16 + s->experts / R + 1));
  {
    const uint64_t off[] = { l.sync, l.agn, l.g1_done, l.g2_done };
    const uint64_t len[] = { 1024, 640, (uint64_t)l.tiles * 4, (uint64_t)l.tiles * 4 };
    expect_regions(off, len, 4, l.reset_bytes);
  }
  /* headroom_moe.h's formulas, within the alignment and the flags */
  if(backward)
    assert_int_equal(hr_moe_ep_memory_backward(s, R, &peer, &local), HR_OK);
  else
    assert_int_equal(hr_moe_ep_memory(s, R, &peer, &local), HR_OK);
  assert_int_equal(peer, l.peer_bytes);
  assert_int_equal(local, l.local_bytes);
  peer_min = rows * (2 * H + 4 * k + 4) + cap * k * 2 * H;
  local_min = pairs * (2 * I + 2 * H + 8) + cap * k * 4 + 1024 + 8 * (uint64_t)l.tiles;
  if(backward) {
    peer_min += rows * (2 * H + 4 * k) + cap * k * 4;
    local_min += pairs * (4 * I + 4 + I / 16);
  }
  assert_true(peer >= peer_min);
  assert_true(peer <= peer_min + 8192);
  assert_true(local >= local_min);
  assert_true(local <= local_min + 8192);
}

static void test_layout(void **state)
{
  static const hr_moe_shape *shapes[] = { &SMALL, &QWEN3, &DSV3 };
  static const int ranks[] = { 1, 2, 4, 8 };
  hr__moe_ep_layout l;
  uint64_t peer, local;
  size_t i, j;
  int b;
  (void)state;

  for(i = 0; i < sizeof(shapes) / sizeof(shapes[0]); i++)
    for(j = 0; j < sizeof(ranks) / sizeof(ranks[0]); j++)
      for(b = 0; b < 2; b++)
        check_layout(shapes[i], ranks[j], b);
  /* the figures headroom_moe.h quotes, to 0.01 GB */
  assert_int_equal(hr_moe_ep_memory(&QWEN3, 8, &peer, &local), HR_OK);
  assert_true(peer > 0.265e9 && peer < 0.275e9);
  assert_true(local > 1.475e9 && local < 1.485e9);
  assert_int_equal(hr_moe_ep_memory(&DSV3, 8, &peer, &local), HR_OK);
  assert_true(peer > 0.935e9 && peer < 0.945e9);
  assert_true(local > 4.83e9 && local < 4.84e9);
  /* either output may be NULL; bad shapes refused */
  assert_int_equal(hr_moe_ep_memory(&DSV3, 8, NULL, NULL), HR_OK);
  assert_int_equal(hr_moe_ep_memory(&DSV3, 0, &peer, &local), HR_EINVAL);
  assert_int_equal(hr_moe_ep_memory(&DSV3, 9, &peer, &local), HR_EINVAL);
  assert_int_equal(hr_moe_ep_memory(&DSV3, 3, &peer, &local), HR_EINVAL);
  assert_int_equal(hr_moe_ep_memory(NULL, 2, &peer, &local), HR_EINVAL);
  assert_int_equal(hr_moe_ep_memory_backward(&DSV3, 3, &peer, &local), HR_EINVAL);
  assert_int_equal(hr__moe_ep_layout_of(&DSV3, 8, 2, &l), HR_EINVAL);
}

static void test_fail_word(void **state)
{
  const unsigned long long w = HR__MOE_EP_FAIL_WORD(0xfedcba98u, 1, HR_MOE_EP_WAIT_DISPATCH, 7);
  const unsigned long long none = HR__MOE_EP_FAIL_WORD(5, 2, HR_MOE_EP_WAIT_RETURN, 0xff);
  (void)state;
  assert_int_equal(HR__MOE_EP_FAIL_EPOCH(w), 0xfedcba98u);
  assert_int_equal(HR__MOE_EP_FAIL_CODE(w), 1);
  assert_int_equal(HR__MOE_EP_FAIL_WAIT(w), HR_MOE_EP_WAIT_DISPATCH);
  assert_int_equal(HR__MOE_EP_FAIL_WAITED(w), 7);
  assert_int_equal(HR__MOE_EP_FAIL_WAITED(none), -1);
  assert_int_equal(HR__MOE_EP_FAIL_EPOCH(none), 5);
  /* a zero word (a fresh block) is no epoch's: epochs start at 1 */
  assert_int_equal(HR__MOE_EP_FAIL_EPOCH(0ULL), 0);
}

/* ---- an in-process allgather of R threads ------------------------------ */

typedef struct ag_group {
  pthread_barrier_t bar;
  unsigned char buf[HR_MOE_EP_MAX_RANKS * 512];
  int nranks;
  int fail_with;           /* returned by every call when nonzero */
} ag_group;

typedef struct ag_rank {
  ag_group *g;
  int rank;
} ag_rank;

static int ag_threads(void *ctx, const void *send, void *recv, size_t n)
{
  ag_rank *r = (ag_rank *)ctx;
  ag_group *g = r->g;
  if(g->fail_with)
    return g->fail_with;
  if(n > 512)
    return -100;
  memcpy(g->buf + (size_t)r->rank * n, send, n);
  pthread_barrier_wait(&g->bar);
  memcpy(recv, g->buf, (size_t)g->nranks * n);
  pthread_barrier_wait(&g->bar);           /* nobody writes the next round early */
  return 0;
}

/* What each thread does and finds. */
typedef struct ex_rank {
  ag_rank ag;
  hr_moe_shape shape;
  int status, exchange;
  int rc_check, rc_agree;
  int kinds[HR_MOE_EP_MAX_RANKS];
  uint64_t ptrs[HR_MOE_EP_MAX_RANKS];
} ex_rank;

/* One rank's create, without a GPU: its record (a made-up block
 * address), the allgather, the check, the agreement. */
static void *ex_main(void *arg)
{
  ex_rank *x = (ex_rank *)arg;
  const hr_moe_ep_bootstrap b = { ag_threads, &x->ag, x->exchange, 0 };
  hr__moe_ep_rec mine, all[HR_MOE_EP_MAX_RANKS];
  uint64_t peer_bytes = 0;
  int i, n = x->ag.g->nranks;

  hr_moe_ep_memory(&x->shape, n, &peer_bytes, NULL);
  hr__moe_ep_rec_fill(&mine, &x->shape, x->ag.rank, n, 0, x->status, peer_bytes,
                      0x7f0000000000ULL + 0x100000000ULL * (uint64_t)x->ag.rank, NULL, 0);
  x->rc_check = hr__moe_ep_allgather(&b, &mine, all, sizeof(mine));
  if(x->rc_check == HR_OK)
    x->rc_check = hr__moe_ep_recs_check(all, x->ag.rank, n, x->exchange, x->kinds);
  for(i = 0; i < n; i++)
    x->ptrs[i] = all[i].ptr;
  x->rc_agree = hr__moe_ep_agree(&b, n, x->rc_check);
  return NULL;
}

/* Run an exchange of n ranks; tweak(x, i) sets rank i's inputs. */
static void exchange_run(ex_rank *x, int n, int fail_with, void (*tweak)(ex_rank *, int))
{
  ag_group g;
  pthread_t th[HR_MOE_EP_MAX_RANKS];
  int i;

  memset(&g, 0, sizeof(g));
  g.nranks = n;
  g.fail_with = fail_with;
  assert_int_equal(pthread_barrier_init(&g.bar, NULL, (unsigned)n), 0);
  for(i = 0; i < n; i++) {
    memset(&x[i], 0, sizeof(x[i]));
    x[i].ag.g = &g;
    x[i].ag.rank = i;
    x[i].shape = SMALL;
    x[i].exchange = HR_MOE_EP_EXCHANGE_AUTO;
    if(tweak)
      tweak(&x[i], i);
  }
  for(i = 0; i < n; i++)
    assert_int_equal(pthread_create(&th[i], NULL, ex_main, &x[i]), 0);
  for(i = 0; i < n; i++)
    pthread_join(th[i], NULL);
  pthread_barrier_destroy(&g.bar);
}

static void test_exchange_in_process(void **state)
{
  static const int ranks[] = { 1, 2, 4, 8 };
  ex_rank x[HR_MOE_EP_MAX_RANKS];
  size_t c;
  int i, j;
  (void)state;

  for(c = 0; c < sizeof(ranks) / sizeof(ranks[0]); c++) {
    const int n = ranks[c];
    exchange_run(x, n, 0, NULL);
    for(i = 0; i < n; i++) {
      assert_int_equal(x[i].rc_check, HR_OK);
      assert_int_equal(x[i].rc_agree, HR_OK);
      for(j = 0; j < n; j++) {
        /* one process: pointers, its own block itself */
        assert_int_equal(x[i].kinds[j], i == j ? HR__MOE_EP_PEER_SELF : HR__MOE_EP_PEER_POINTER);
        assert_true(x[i].ptrs[j] == 0x7f0000000000ULL + 0x100000000ULL * (uint64_t)j);
      }
    }
  }
}

static void tweak_pointers(ex_rank *x, int i)
{
  (void)i;
  x->exchange = HR_MOE_EP_EXCHANGE_POINTERS;
}

static void tweak_ipc(ex_rank *x, int i)
{
  (void)i;
  x->exchange = HR_MOE_EP_EXCHANGE_IPC;
}

static void tweak_ipc_one(ex_rank *x, int i)
{
  if(i == 2)
    x->exchange = HR_MOE_EP_EXCHANGE_IPC;
}

static void tweak_shape(ex_rank *x, int i)
{
  if(i == 3)
    x->shape.hidden = 512;
}

static void tweak_nomem(ex_rank *x, int i)
{
  if(i == 1)
    x->status = HR_ENOMEM;
}

static void test_exchange_modes(void **state)
{
  ex_rank x[HR_MOE_EP_MAX_RANKS];
  int i;
  (void)state;

  /* pointers asked for, all in one process: as auto */
  exchange_run(x, 4, 0, tweak_pointers);
  for(i = 0; i < 4; i++) {
    assert_int_equal(x[i].rc_agree, HR_OK);
    assert_int_equal(x[i].kinds[(i + 1) % 4], HR__MOE_EP_PEER_POINTER);
  }
  /* IPC within one process: cudaIpcOpenMemHandle would refuse; every
   * rank refuses first */
  exchange_run(x, 4, 0, tweak_ipc);
  for(i = 0; i < 4; i++) {
    assert_int_equal(x[i].rc_check, HR_EINVAL);
    assert_int_equal(x[i].rc_agree, HR_EINVAL);
  }
  /* one rank alone asks for IPC: it alone finds the records wrong, and
   * the agreement makes every rank fail */
  exchange_run(x, 4, 0, tweak_ipc_one);
  for(i = 0; i < 4; i++) {
    assert_int_equal(x[i].rc_check, i == 2 ? HR_EINVAL : HR_OK);
    assert_int_equal(x[i].rc_agree, HR_EINVAL);
  }
}

static void test_exchange_disagree(void **state)
{
  ex_rank x[HR_MOE_EP_MAX_RANKS];
  int i;
  (void)state;

  /* a rank of another shape: every rank refuses */
  exchange_run(x, 8, 0, tweak_shape);
  for(i = 0; i < 8; i++) {
    assert_int_equal(x[i].rc_check, HR_EINVAL);
    assert_int_equal(x[i].rc_agree, HR_EINVAL);
  }
  /* a rank without a block: its code on every rank */
  exchange_run(x, 8, 0, tweak_nomem);
  for(i = 0; i < 8; i++) {
    assert_int_equal(x[i].rc_check, HR_ENOMEM);
    assert_int_equal(x[i].rc_agree, HR_ENOMEM);
  }
  /* the allgather's own failure: negative codes through, others
   * HR_ECONNECT */
  exchange_run(x, 2, HR_ETIMEDOUT, NULL);
  for(i = 0; i < 2; i++)
    assert_int_equal(x[i].rc_check, HR_ETIMEDOUT);
  exchange_run(x, 2, 3, NULL);
  for(i = 0; i < 2; i++)
    assert_int_equal(x[i].rc_check, HR_ECONNECT);
}

/* Records of other processes (as a real multi-process bootstrap gives):
 * IPC where they carry a handle. */
static void test_records_other_process(void **state)
{
  hr__moe_ep_rec recs[4];
  int kinds[4], i;
  const unsigned char handle[64] = { 1, 2, 3 };
  uint64_t peer_bytes;
  (void)state;

  hr_moe_ep_memory(&SMALL, 4, &peer_bytes, NULL);
  for(i = 0; i < 4; i++) {
    hr__moe_ep_rec_fill(&recs[i], &SMALL, i, 4, i, HR_OK, peer_bytes, 0x1000u * (i + 1), handle,
                        sizeof(handle));
    if(i != 1)
      recs[i].pid += 1000 + i;                 /* other processes */
  }
  assert_int_equal(hr__moe_ep_recs_check(recs, 1, 4, HR_MOE_EP_EXCHANGE_AUTO, kinds), HR_OK);
  assert_int_equal(kinds[0], HR__MOE_EP_PEER_IPC);
  assert_int_equal(kinds[1], HR__MOE_EP_PEER_SELF);
  assert_int_equal(kinds[2], HR__MOE_EP_PEER_IPC);
  assert_int_equal(hr__moe_ep_recs_check(recs, 1, 4, HR_MOE_EP_EXCHANGE_IPC, kinds), HR_OK);
  /* pointers to another process's memory: refused */
  assert_int_equal(hr__moe_ep_recs_check(recs, 1, 4, HR_MOE_EP_EXCHANGE_POINTERS, kinds),
                   HR_EINVAL);
  /* the same pid on another host is another process */
  recs[3].pid = recs[1].pid;
  strcpy(recs[3].host, "elsewhere");
  assert_int_equal(hr__moe_ep_recs_check(recs, 1, 4, HR_MOE_EP_EXCHANGE_AUTO, kinds), HR_OK);
  assert_int_equal(kinds[3], HR__MOE_EP_PEER_IPC);
  /* a peer in another process without a handle (IPC failed there) */
  recs[2].has_ipc = 0;
  assert_int_equal(hr__moe_ep_recs_check(recs, 1, 4, HR_MOE_EP_EXCHANGE_AUTO, kinds), HR_EINVAL);
  recs[2].has_ipc = 1;
  /* a record in the wrong place, or not one at all */
  recs[0].rank = 2;
  assert_int_equal(hr__moe_ep_recs_check(recs, 1, 4, HR_MOE_EP_EXCHANGE_AUTO, kinds), HR_EINVAL);
  recs[0].rank = 0;
  recs[0].magic = 0;
  assert_int_equal(hr__moe_ep_recs_check(recs, 1, 4, HR_MOE_EP_EXCHANGE_AUTO, kinds), HR_EINVAL);
  recs[0].magic = HR__MOE_EP_REC_MAGIC;
  recs[0].peer_bytes += 256;                   /* a block of another size */
  assert_int_equal(hr__moe_ep_recs_check(recs, 1, 4, HR_MOE_EP_EXCHANGE_AUTO, kinds), HR_EINVAL);
  recs[0].peer_bytes -= 256;
  assert_int_equal(hr__moe_ep_recs_check(recs, 1, 4, HR_MOE_EP_EXCHANGE_AUTO, kinds), HR_OK);
  assert_int_equal(hr__moe_ep_recs_check(recs, 4, 4, HR_MOE_EP_EXCHANGE_AUTO, kinds), HR_EINVAL);
  assert_int_equal(hr__moe_ep_recs_check(NULL, 1, 4, HR_MOE_EP_EXCHANGE_AUTO, kinds), HR_EINVAL);
}

int main(void)
{
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_args_check),
    cmocka_unit_test(test_layout),
    cmocka_unit_test(test_fail_word),
    cmocka_unit_test(test_exchange_in_process),
    cmocka_unit_test(test_exchange_modes),
    cmocka_unit_test(test_exchange_disagree),
    cmocka_unit_test(test_records_other_process),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
