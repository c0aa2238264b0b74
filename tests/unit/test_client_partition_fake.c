/*
 * test_client_partition_fake.c: hr_partition_create against a fake CUDA driver
 * (fake_libcuda.c, built beside this test as libfakecuda.so), so that the
 * driver paths run on machines without a GPU: the split it asks for, the
 * objects it makes, their destruction in order, and every failure on the
 * way cleaned up with one stderr line naming the call.
 *
 * The fake GPU 0 has 120 SMs in co-scheduling steps of 4, not an H200's
 * 132 and 8, so that a degraded budget visibly takes both from the driver;
 * GPU 1 has 4 SMs, too few to split.
 */
#include <dlfcn.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include <cuda.h>

#include "headroom.h"
#include "hr_client_int.h"
#include "unit_util.h"

#define FAKE_SMS 120
#define FAKE_STEP 4

static char fake_path[PATH_MAX];

static void (*fake_set)(const char *key, long v);
static long (*fake_get)(const char *key);
static void (*fake_fail)(const char *call, int nth, int code);
static CUresult (*fake_error_name)(CUresult r, const char **name);
static long (*fake_stream_sms)(void *stream);

static int group_setup(void **state)
{
  (void)state;
  return th_tmpdir_create("/tmp/hr-fake-XXXXXX");
}

static int test_setup(void **state)
{
  (void)state;
  th_env_clear();
  fake_fail("", 0, 0);
  fake_set("split_extra", 0);
  return 0;
}

static hr_lease *partition_lease(hr_client *c, int gpu)
{
  hr_lease *l = NULL;
  assert_int_equal(hr_lease_acquire(c, gpu, 2, HR_MODE_PARTITION, &l), HR_OK);
  return l;
}

static void expect_nothing_alive(void)
{
  assert_int_equal(fake_get("live_ctx"), 0);
  assert_int_equal(fake_get("live_streams"), 0);
  assert_int_equal(fake_get("order_errors"), 0);
  assert_int_equal(fake_get("proc_bad_flags"), 0);
}

struct create_call {
  const hr_lease *l;
  hr_partition **p;
  int rc;
};

static void call_create(void *arg)
{
  struct create_call *call = arg;

  call->rc = hr_partition_create(call->l, call->p);
}

/* hr_partition_create with stderr in a file; returns what it wrote. */
static int create_captured(const hr_lease *l, hr_partition **p, char *err,
                           size_t cap)
{
  struct create_call call = { l, p, 0 };
  char *text = th_capture_stderr(call_create, &call);

  snprintf(err, cap, "%s", text);
  free(text);
  return call.rc;
}

/* hr_partition_create refused with `want`: the output pointer untouched,
 * nothing left alive in the driver, and what it wrote to stderr in err. */
static void expect_create_refused(const hr_lease *l, int want, char *err,
                                  size_t cap)
{
  hr_partition *const sentinel = (hr_partition *)(uintptr_t)0x1;
  hr_partition *p = sentinel;

  assert_int_equal(create_captured(l, &p, err, cap), want);
  assert_ptr_equal(p, sentinel);
  expect_nothing_alive();
}

/* ---- a driver too old for green-context streams (12.4) -------------------
 * Runs first, in a child: which calls the driver has is decided once per
 * process. */
static void test_old_driver(void **state)
{
  pid_t pid;
  int st;
  (void)state;

  pid = fork();
  assert_true(pid >= 0);
  if(pid == 0) {
    hr_client *c;
    hr_lease *l;
    hr_partition *p = NULL;
    int rc;
    fake_set("driver_version", 12040);
    setenv("DG_MEGA_MOE_SM_HEADROOM", "4", 1);
    c = th_client_open_degraded();
    l = partition_lease(c, 0);
    rc = hr_partition_create(l, &p);
    hr_client_close(c);
    if(rc != HR_EUNSUPPORTED || p || fake_get("live_ctx") ||
       fake_get("live_streams")) {
      fprintf(stderr, "driver 12.4: hr_partition_create said %s\n",
              hr_strerror(rc));
      _exit(1);
    }
    _exit(0);
  }
  assert_int_equal(waitpid(pid, &st, 0), pid);
  assert_true(WIFEXITED(st));
  assert_int_equal(WEXITSTATUS(st), 0);
}

/* ---- degraded budgets from the driver ------------------------------------ */

static void test_degraded_from_driver(void **state)
{
  hr_client *c;
  hr_lease *l;
  hr_budget b;
  (void)state;

  assert_int_equal(hr__cuda_sms(0), FAKE_SMS);
  assert_int_equal(hr__cuda_sm_alignment(0), FAKE_STEP);
  assert_int_equal(hr__cuda_sms(1), 4);
  assert_int_equal(hr__cuda_sms(2), HR_ENOGPU);
  setenv("DG_MEGA_MOE_SM_HEADROOM", "6", 1);
  c = th_client_open_degraded();
  l = partition_lease(c, 0);
  assert_int_equal(hr_lease_budget(l, &b), HR_OK);
  assert_int_equal(b.sms, FAKE_SMS);
  assert_int_equal(b.partition_granularity, FAKE_STEP);
  assert_int_equal(b.partition_comm_sms, 8);        /* 6 in steps of 4 */
  assert_int_equal(b.headroom, 8);
  assert_int_equal(b.grid, FAKE_SMS - 8);
  assert_int_equal(b.nccl_max_ctas, 8);

  /* A GPU too small to split: refused, as a daemon refuses it; the other
   * modes still lease it. */
  l = NULL;
  assert_int_equal(hr_lease_acquire(c, 1, 2, HR_MODE_PARTITION, &l),
                   HR_EUNSUPPORTED);
  assert_null(l);
  assert_int_equal(hr_lease_acquire(c, 1, 2, HR_MODE_HEADROOM, &l), HR_OK);
  assert_int_equal(hr_lease_budget(l, &b), HR_OK);
  assert_int_equal(b.sms, 4);
  assert_int_equal(b.partition_granularity, 0);
  assert_int_equal(b.partition_comm_sms, 0);
  assert_int_equal(b.partition_nccl_max_ctas, 0);
  hr_client_close(c);
}

/* ---- the partition ------------------------------------------------------- */

static void test_create_destroy(void **state)
{
  hr_client *c;
  hr_lease *l;
  hr_partition *p = NULL;
  hr_budget b;
  long syncs;
  char err[512];
  (void)state;

  setenv("DG_MEGA_MOE_SM_HEADROOM", "10", 1);
  c = th_client_open_degraded();
  l = partition_lease(c, 0);
  assert_int_equal(hr_lease_budget(l, &b), HR_OK);
  assert_int_equal(b.headroom, 12);
  assert_int_equal(create_captured(l, &p, err, sizeof(err)), HR_OK);
  assert_string_equal(err, "");
  assert_non_null(p);
  /* The split asked for: the lease's headroom, in the device's own steps. */
  assert_int_equal(fake_get("last_split_min"), 12);
  assert_int_equal(fake_get("last_split_flags"), 0);
  assert_int_equal(hr_partition_comm_sms(p), 12);
  assert_int_equal(hr_partition_mega_sms(p), FAKE_SMS - 12);
  assert_int_equal(hr_partition_mega_sms(p), b.grid);
  assert_int_equal(fake_get("live_ctx"), 2);
  assert_int_equal(fake_get("live_streams"), 2);
  assert_non_null(hr_partition_comm_stream(p));
  assert_non_null(hr_partition_mega_stream(p));
  assert_ptr_not_equal(hr_partition_comm_stream(p), hr_partition_mega_stream(p));
  assert_int_equal(hr_partition_epoch(p), hr_lease_epoch(l));
  assert_int_equal(hr_partition_stale(p), 0);
  syncs = fake_get("syncs");
  hr_partition_destroy(p);
  /* Both streams waited for, then destroyed before their contexts. */
  assert_int_equal(fake_get("syncs"), syncs + 2);
  expect_nothing_alive();
  hr_client_close(c);
}

/* Extra streams: made in the side asked for, capped, a failed one leaves
 * nothing behind, and all of them go with the partition (waited for). */
static void test_extra_streams(void **state)
{
  hr_client *c;
  hr_lease *l;
  hr_partition *p = NULL;
  void *s[HR_PARTITION_MAX_STREAMS + 1];
  void *none = NULL;
  long syncs;
  int i;
  (void)state;

  setenv("DG_MEGA_MOE_SM_HEADROOM", "10", 1);
  c = th_client_open_degraded();
  l = partition_lease(c, 0);
  assert_int_equal(hr_partition_create(l, &p), HR_OK);
  assert_int_equal(hr_partition_stream_create(NULL, HR_PARTITION_COMM, &s[0]),
                   HR_EINVAL);
  assert_int_equal(hr_partition_stream_create(p, (hr_partition_side)2, &s[0]),
                   HR_EINVAL);
  assert_int_equal(hr_partition_stream_create(p, HR_PARTITION_COMM, NULL),
                   HR_EINVAL);
  assert_int_equal(fake_get("live_streams"), 2);

  assert_int_equal(hr_partition_stream_create(p, HR_PARTITION_COMM, &s[0]),
                   HR_OK);
  assert_int_equal(hr_partition_stream_create(p, HR_PARTITION_MEGA, &s[1]),
                   HR_OK);
  assert_ptr_not_equal(s[0], hr_partition_comm_stream(p));
  assert_ptr_not_equal(s[0], s[1]);
  assert_int_equal(fake_stream_sms(s[0]), hr_partition_comm_sms(p));
  assert_int_equal(fake_stream_sms(s[1]), hr_partition_mega_sms(p));
  assert_int_equal(fake_get("live_streams"), 4);

  fake_fail("cuGreenCtxStreamCreate", 1, CUDA_ERROR_OUT_OF_MEMORY);
  /* Said before the library's own line, so that a reader of a passing
   * run sees it was asked for. */
  printf("  expected next on stderr: cuGreenCtxStreamCreate made to fail "
         "(CUDA_ERROR_OUT_OF_MEMORY)\n");
  fflush(stdout);
  assert_int_equal(hr_partition_stream_create(p, HR_PARTITION_COMM, &none),
                   HR_ECUDA);
  assert_null(none);
  fake_fail("", 0, 0);
  assert_int_equal(fake_get("live_streams"), 4);

  for(i = 2; i < HR_PARTITION_MAX_STREAMS; i++)
    assert_int_equal(hr_partition_stream_create(p, i & 1 ? HR_PARTITION_MEGA :
                                                HR_PARTITION_COMM, &s[i]),
                     HR_OK);
  assert_int_equal(hr_partition_stream_create(p, HR_PARTITION_COMM,
                                              &s[HR_PARTITION_MAX_STREAMS]),
                   HR_ELIMIT);
  assert_int_equal(fake_get("live_streams"), 2 + HR_PARTITION_MAX_STREAMS);

  syncs = fake_get("syncs");
  hr_partition_destroy(p);
  assert_int_equal(fake_get("syncs"), syncs + 2 + HR_PARTITION_MAX_STREAMS);
  expect_nothing_alive();
  hr_client_close(c);
}

/* Every driver call of hr_partition_create, failed in turn. */
static void test_each_failure_cleans_up(void **state)
{
  static const struct {
    const char *call;
    int nth;                 /* which call of it (the comm side is first) */
    int code;
    int want;
  } cases[] = {
    { "cuDeviceGet", 1, CUDA_ERROR_OUT_OF_MEMORY, HR_ECUDA },
    { "cuDeviceGetDevResource", 1, CUDA_ERROR_OUT_OF_MEMORY, HR_ECUDA },
    { "cuDevSmResourceSplitByCount", 1, CUDA_ERROR_OUT_OF_MEMORY, HR_ECUDA },
    { "cuDevSmResourceSplitByCount", 1,
      CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION, HR_EUNSUPPORTED },
    { "cuDevResourceGenerateDesc", 1, CUDA_ERROR_OUT_OF_MEMORY, HR_ECUDA },
    { "cuDevResourceGenerateDesc", 2, CUDA_ERROR_OUT_OF_MEMORY, HR_ECUDA },
    { "cuGreenCtxCreate", 1, CUDA_ERROR_OUT_OF_MEMORY, HR_ECUDA },
    { "cuGreenCtxCreate", 2, CUDA_ERROR_OUT_OF_MEMORY, HR_ECUDA },
    { "cuGreenCtxCreate", 1, CUDA_ERROR_NOT_SUPPORTED, HR_EUNSUPPORTED },
    { "cuGreenCtxStreamCreate", 1, CUDA_ERROR_LAUNCH_FAILED, HR_ECUDA },
    { "cuGreenCtxStreamCreate", 2, CUDA_ERROR_OUT_OF_MEMORY, HR_ECUDA },
  };
  hr_partition *const sentinel = (hr_partition *)(uintptr_t)0x1;
  hr_client *c;
  hr_lease *l;
  size_t i;
  (void)state;

  setenv("DG_MEGA_MOE_SM_HEADROOM", "4", 1);
  c = th_client_open_degraded();
  l = partition_lease(c, 0);
  for(i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    hr_partition *p = sentinel;
    const char *name = NULL;
    char err[512];
    int rc;

    fake_fail(cases[i].call, cases[i].nth, cases[i].code);
    rc = create_captured(l, &p, err, sizeof(err));
    printf("  %s #%d made to fail (expected): %s; stderr: %s", cases[i].call,
           cases[i].nth, hr_strerror(rc),
           err[0] ? err : "(nothing)\n");
    if(rc != cases[i].want)
      fail_msg("%s #%d failing: got %s, want %s", cases[i].call, cases[i].nth,
               hr_strerror(rc), hr_strerror(cases[i].want));
    assert_ptr_equal(p, sentinel);
    expect_nothing_alive();
    /* One line, naming the call and the driver's name for the error. */
    assert_non_null(strstr(err, cases[i].call));
    assert_int_equal(fake_error_name((CUresult)cases[i].code, &name),
                     CUDA_SUCCESS);
    assert_non_null(strstr(err, name));
    assert_non_null(strchr(err, '\n'));
    assert_string_equal(strchr(err, '\n'), "\n");
  }
  /* And after all that, a partition is still made. */
  fake_fail("", 0, 0);
  {
    hr_partition *p = NULL;
    assert_int_equal(hr_partition_create(l, &p), HR_OK);
    hr_partition_destroy(p);
  }
  expect_nothing_alive();
  hr_client_close(c);
}

static void test_no_such_device(void **state)
{
  hr_client *c;
  hr_lease *l;
  char err[512];
  (void)state;

  c = th_client_open_degraded();
  l = partition_lease(c, 3);       /* the fake driver has two devices */
  expect_create_refused(l, HR_ENOGPU, err, sizeof(err));
  hr_client_close(c);
}

static void test_split_not_as_asked(void **state)
{
  hr_client *c;
  hr_lease *l;
  char err[512];
  (void)state;

  /* The driver rounds the comm side up further than the budget allows:
   * the mega partition would be smaller than the grid. */
  setenv("DG_MEGA_MOE_SM_HEADROOM", "4", 1);
  fake_set("split_extra", 4);
  c = th_client_open_degraded();
  l = partition_lease(c, 0);
  expect_create_refused(l, HR_EUNSUPPORTED, err, sizeof(err));
  printf("  %s", err);
  assert_non_null(strstr(err, "into 8 + 112"));
  assert_non_null(strstr(err, "needs 4 + 116"));
  /* No room at all for the group: no group comes back. */
  fake_set("split_extra", FAKE_SMS);
  expect_create_refused(l, HR_EUNSUPPORTED, err, sizeof(err));
  hr_client_close(c);
}

static void test_many_partitions(void **state)
{
  hr_partition *p[8];
  hr_client *c;
  hr_lease *l;
  int i;
  (void)state;

  setenv("DG_MEGA_MOE_SM_HEADROOM", "16", 1);
  c = th_client_open_degraded();
  l = partition_lease(c, 0);
  for(i = 0; i < 8; i++)
    assert_int_equal(hr_partition_create(l, &p[i]), HR_OK);
  assert_int_equal(fake_get("live_ctx"), 16);
  assert_int_equal(fake_get("live_streams"), 16);
  for(i = 0; i < 8; i++) {
    assert_int_equal(hr_partition_comm_sms(p[i]), 16);
    hr_partition_destroy(p[i]);
  }
  expect_nothing_alive();
  hr_client_close(c);
}

int main(int argc, char **argv)
{
#define T(fn) cmocka_unit_test_setup(fn, test_setup)
  const struct CMUnitTest tests[] = {
    T(test_old_driver),
    T(test_degraded_from_driver),
    T(test_create_destroy),
    T(test_extra_streams),
    T(test_each_failure_cleans_up),
    T(test_no_such_device),
    T(test_split_not_as_asked),
    T(test_many_partitions),
  };
#undef T
  char self[PATH_MAX - 32];
  ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  char *slash;
  void *fake;
  (void)argc;
  (void)argv;

  if(n <= 0)
    return 1;
  self[n] = '\0';
  slash = strrchr(self, '/');
  *slash = '\0';
  snprintf(fake_path, sizeof(fake_path), "%s/libfakecuda.so", self);
  /* Opened here first: libheadroom's dlopen of the same file then gets
   * this copy, whose knobs the tests turn. */
  fake = dlopen(fake_path, RTLD_NOW | RTLD_LOCAL);
  if(!fake) {
    fprintf(stderr, "test_client_partition_fake: %s\n", dlerror());
    return 1;
  }
  fake_set = (void (*)(const char *, long))dlsym(fake, "fake_cuda_set");
  fake_get = (long (*)(const char *))dlsym(fake, "fake_cuda_get");
  fake_stream_sms = (long (*)(void *))dlsym(fake, "fake_cuda_stream_sms");
  fake_fail = (void (*)(const char *, int, int))dlsym(fake, "fake_cuda_fail");
  fake_error_name = (CUresult (*)(CUresult, const char **))dlsym(fake,
                                                                 "cuGetErrorName");
  if(!fake_set || !fake_get || !fake_fail || !fake_error_name ||
     hr__cuda_use_library(fake_path) != HR_OK)
    return 1;
  fake_set("devices", 2);
  fake_set("sms", FAKE_SMS);
  fake_set("small_sms", 4);
  fake_set("align", FAKE_STEP);
  fake_set("min_part", FAKE_STEP);
  return cmocka_run_group_tests_name("partition_fake", tests, group_setup,
                                     th_tmpdir_teardown);
}
