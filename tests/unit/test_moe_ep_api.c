/*
 * test_moe_ep_api.c: hr_moe_ep_* through libheadroom_moe itself (built
 * where nvcc is), on any machine: the arguments are checked before
 * anything else (HR_EINVAL, the bootstrap's allgather never called), every
 * other entry point (the backward's too) refuses NULL, and a valid create on a machine without
 * a GPU fails the same way on every rank (HR_ENOGPU, after the exchange:
 * the collective ends on every rank). On a machine with a GPU the create
 * of two virtual ranks succeeds instead, and is destroyed.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "headroom.h"
#include "headroom_moe.h"

static const hr_moe_shape SMALL = { 8, 256, 512, 2, 64 };

static int calls;

static int ag_count(void *ctx, const void *send, void *recv, size_t n)
{
  (void)ctx;
  memcpy(recv, send, n);                       /* a group of one */
  calls++;
  return 0;
}

static void test_create_args(void **state)
{
  const hr_moe_ep_bootstrap b = { ag_count, NULL, HR_MOE_EP_EXCHANGE_AUTO, 0 };
  hr_moe_ep_bootstrap nog = b;
  hr_moe_shape s = SMALL;
  hr_moe_ep *ep = (hr_moe_ep *)&ep;
  (void)state;

  calls = 0;
  assert_int_equal(hr_moe_ep_create(NULL, 0, &s, 0, 2, &b), HR_EINVAL);
  assert_int_equal(hr_moe_ep_create(&ep, 0, &s, -1, 2, &b), HR_EINVAL);
  assert_null(ep);                             /* *out cleared */
  assert_int_equal(hr_moe_ep_create(&ep, 0, &s, 2, 2, &b), HR_EINVAL);
  assert_int_equal(hr_moe_ep_create(&ep, 0, &s, 0, 0, &b), HR_EINVAL);
  assert_int_equal(hr_moe_ep_create(&ep, 0, &s, 0, 9, &b), HR_EINVAL);
  assert_int_equal(hr_moe_ep_create(&ep, 0, &s, 0, 3, &b), HR_EINVAL);   /* 8 % 3 */
  assert_int_equal(hr_moe_ep_create(&ep, 0, &s, 0, 2, NULL), HR_EINVAL);
  nog.allgather = NULL;
  assert_int_equal(hr_moe_ep_create(&ep, 0, &s, 0, 2, &nog), HR_EINVAL);
  nog = b;
  nog.exchange = 7;
  assert_int_equal(hr_moe_ep_create(&ep, 0, &s, 0, 2, &nog), HR_EINVAL);
  nog = b;
  nog.backward = 2;
  assert_int_equal(hr_moe_ep_create(&ep, 0, &s, 0, 2, &nog), HR_EINVAL);
  s.topk = 0;
  assert_int_equal(hr_moe_ep_create(&ep, 0, &s, 0, 2, &b), HR_EINVAL);
  assert_int_equal(hr_moe_ep_create(&ep, 0, NULL, 0, 2, &b), HR_EINVAL);
  assert_int_equal(calls, 0);                  /* nothing exchanged */
}

static void test_null(void **state)
{
  hr_moe_ep_failure f;
  hr_moe_args a;
  hr_moe_grad_args g;
  (void)state;
  memset(&a, 0, sizeof(a));
  memset(&g, 0, sizeof(g));
  assert_int_equal(hr_moe_ep_backward(NULL, NULL, &g, NULL), HR_EINVAL);
  assert_int_equal(hr_moe_ep_backward_grid(NULL, 1, HR_MODE_HEADROOM, &g, NULL), HR_EINVAL);
  assert_int_equal(hr_moe_ep_forward(NULL, NULL, &a, NULL), HR_EINVAL);
  assert_int_equal(hr_moe_ep_forward_grid(NULL, 1, HR_MODE_HEADROOM, &a, NULL), HR_EINVAL);
  assert_int_equal(hr_moe_ep_sync(NULL), HR_EINVAL);
  assert_int_equal(hr_moe_ep_sync_timeout(NULL, 0), HR_EINVAL);
  assert_int_equal(hr_moe_ep_last_failure(NULL, &f), HR_EINVAL);
  assert_int_equal(hr_moe_ep_abort(NULL), HR_EINVAL);
  hr_moe_ep_destroy(NULL);
}

/* Two ranks in threads over a barrier allgather. */
typedef struct pair_group {
  pthread_barrier_t bar;
  unsigned char buf[2 * 512];
} pair_group;

typedef struct pair_rank {
  pair_group *g;
  int rank, rc;
  hr_moe_ep *ep;
} pair_rank;

static int ag_pair(void *ctx, const void *send, void *recv, size_t n)
{
  pair_rank *r = (pair_rank *)ctx;
  if(n > 512)
    return -100;
  memcpy(r->g->buf + (size_t)r->rank * n, send, n);
  pthread_barrier_wait(&r->g->bar);
  memcpy(recv, r->g->buf, 2 * n);
  pthread_barrier_wait(&r->g->bar);
  return 0;
}

static void *pair_main(void *arg)
{
  pair_rank *r = (pair_rank *)arg;
  const hr_moe_ep_bootstrap b = { ag_pair, r, HR_MOE_EP_EXCHANGE_POINTERS, 0 };
  r->rc = hr_moe_ep_create(&r->ep, 0, &SMALL, r->rank, 2, &b);
  return NULL;
}

static void test_create_collective(void **state)
{
  pair_group g;
  pair_rank r[2];
  pthread_t th[2];
  int i;
  (void)state;

  assert_int_equal(pthread_barrier_init(&g.bar, NULL, 2), 0);
  for(i = 0; i < 2; i++) {
    memset(&r[i], 0, sizeof(r[i]));
    r[i].g = &g;
    r[i].rank = i;
    assert_int_equal(pthread_create(&th[i], NULL, pair_main, &r[i]), 0);
  }
  for(i = 0; i < 2; i++)
    pthread_join(th[i], NULL);
  pthread_barrier_destroy(&g.bar);
  /* no GPU: both say so (HR_EUNSUPPORTED on a GPU that is not sm_90);
   * with one, both have a context */
  assert_int_equal(r[0].rc, r[1].rc);
  if(r[0].rc == HR_OK) {
    assert_non_null(r[0].ep);
    assert_non_null(r[1].ep);
  } else {
    assert_true(r[0].rc == HR_ENOGPU || r[0].rc == HR_EUNSUPPORTED);
    assert_null(r[0].ep);
    assert_null(r[1].ep);
  }
  hr_moe_ep_destroy(r[0].ep);
  hr_moe_ep_destroy(r[1].ep);
}

int main(void)
{
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_create_args),
    cmocka_unit_test(test_null),
    cmocka_unit_test(test_create_collective),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
