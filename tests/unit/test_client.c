/*
 * test_client.c: libheadroom with no daemon.
 *
 * Everything here runs against a socket path in an empty temporary folder
 * (or a socket nobody serves), so it covers what a trainer sees when the
 * daemon is missing: error names, the degraded fallback from the
 * environment, argument checks, the exported environment and the NCCL
 * config. The daemon side is covered by tests/integration.
 */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

/* hr_lease_fill_nccl_config is defined only when NCCL's header came first;
 * without NCCL, a struct laid out like its ncclConfig_t stands in. */
#if defined(__has_include)
/* nccl.h includes CUDA's runtime header: both must be there. */
#if __has_include(<nccl.h>) && __has_include(<cuda_runtime.h>)
#include <nccl.h>
#define HAVE_REAL_NCCL 1
#endif
#endif
#ifndef HAVE_REAL_NCCL
typedef struct ncclConfig_v22800 {
  size_t size;
  unsigned int magic;
  unsigned int version;
  int blocking;
  int cgaClusterSize;
  int minCTAs;
  int maxCTAs;
  const char *netName;
  int splitShare;
  int trafficClass;
} ncclConfig_t;
#define NCCL_CONFIG_UNDEF_INT INT_MIN
#define NCCL_CONFIG_INITIALIZER                                              \
  {sizeof(ncclConfig_t), 0xcafebeef, 22800, NCCL_CONFIG_UNDEF_INT,           \
   NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, NULL, \
   NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT}
#endif

#include "headroom.h"
#include "hr_proto.h"      /* HR_NAME_MAX */
#include "unit_util.h"

extern char **environ;

static int group_setup(void **state)
{
  (void)state;
  return th_tmpdir_create("/tmp/hr-unit-XXXXXX");
}

static hr_lease *lease_on(hr_client *c, int gpu)
{
  hr_lease *l = NULL;
  assert_int_equal(hr_lease_acquire(c, gpu, 2, HR_MODE_HEADROOM, &l), HR_OK);
  assert_non_null(l);
  return l;
}

static int count_lines_with(const char *text, const char *needle)
{
  int n = 0;
  const char *line = text;
  while(*line) {
    const char *end = strchr(line, '\n');
    size_t len = end ? (size_t)(end - line) : strlen(line);
    char buf[1024];
    snprintf(buf, sizeof(buf), "%.*s", (int)len, line);
    if(strstr(buf, needle))
      n++;
    line += len + (end ? 1 : 0);
  }
  return n;
}

/* ---- hr_strerror -------------------------------------------------------- */

static void test_strerror_names_every_code(void **state)
{
  static const int codes[] = {
    HR_OK, HR_EINVAL, HR_ENOMEM, HR_ECONNECT, HR_EPROTO, HR_EVERSION,
    HR_EPERM, HR_ENOTFOUND, HR_ELIMIT, HR_ETIMEDOUT, HR_ECLOSED,
    HR_EDEGRADED, HR_ETOOLARGE, HR_EINTERNAL, HR_EUNSUPPORTED, HR_ESHUTDOWN,
    HR_EHELLO, HR_ENOGPU, HR_ECUDA, HR_EBARRIER_TIMEOUT, HR_ECOOP_TOO_LARGE,
    HR_EABORTED,
  };
  const size_t n = sizeof(codes) / sizeof(codes[0]);
  const char *unknown = hr_strerror(-12345);
  size_t i, j;
  (void)state;

  assert_non_null(unknown);
  for(i = 0; i < n; i++) {
    const char *s = hr_strerror(codes[i]);
    assert_non_null(s);
    assert_true(strlen(s) > 3);
    if(s == unknown || !strcmp(s, unknown))
      fail_msg("code %d has no name of its own", codes[i]);
    for(j = 0; j < i; j++) {
      if(!strcmp(s, hr_strerror(codes[j])))
        fail_msg("codes %d and %d share the name '%s'", codes[i], codes[j], s);
    }
  }
  /* Codes that do not exist, including the gaps in the numbering. */
  assert_string_equal(hr_strerror(1), unknown);
  assert_string_equal(hr_strerror(-17), unknown);
  assert_string_equal(hr_strerror(-19), unknown);
  assert_string_equal(hr_strerror(-25), unknown);
  assert_string_equal(hr_strerror(INT_MIN), unknown);
}

/* ---- degraded mode ------------------------------------------------------ */

static void check_word_matches_budget(const hr_lease *l)
{
  hr_budget b;
  assert_int_equal(hr_lease_budget(l, &b), HR_OK);
  assert_int_equal(hr_lease_grid(l), b.grid);
  assert_int_equal(hr_lease_headroom(l), b.headroom);
  assert_int_equal(hr_lease_epoch(l), b.epoch);
  assert_int_equal(hr_lease_degraded(l), b.degraded);
  {
    int grid, cluster;
    hr_mode mode;
    assert_int_equal(hr_lease_launch_config(l, &grid, &cluster, &mode), HR_OK);
    assert_int_equal(grid, b.grid);
    assert_int_equal(cluster, b.cluster);
    assert_int_equal(mode, b.mode);
    assert_int_equal(hr_lease_launch_config(l, &grid, NULL, &mode), HR_EINVAL);
    assert_int_equal(hr_lease_launch_config(NULL, &grid, &cluster, &mode),
                     HR_EINVAL);
  }
}

/* What the default policy gives a GPU of `sms` SMs whose only tenant is
 * a lease of cluster 2 and `n` collectives of `ctas` CTAs in flight,
 * written out here from policy/policy.h's rule, not by the library:
 * headroom max(2 x comm CTAs, floor 2) under the ceiling min(32, sms -
 * 64), and NCCL's cap the largest power of two p with 2 x p x K <= the
 * ceiling. */
static void expect_default(int sms, int ctas, int n, int *headroom, int *cap)
{
  int ceiling = 32 < sms - 64 ? 32 : sms - 64, k = n > 0 ? n : 1, p = 1;
  ceiling = ceiling < 0 ? 0 : ceiling / 2 * 2;
  *headroom = 2 * ctas * n > 2 ? 2 * ctas * n : 2;
  if(*headroom > ceiling)
    *headroom = ceiling;
  if(*headroom < 2)
    *headroom = 2;      /* the floor holds under any ceiling */
  while(2 * (p * 2) * k <= ceiling && p * 2 <= 64)
    p *= 2;
  *cap = p;
}

/* No daemon: the daemon's own policy on the default policy, for this
 * process alone, never the full grid, with NCCL's caps decided. */
static void test_degraded_open_policy_budget(void **state)
{
  hr_client *c = th_client_open_degraded();
  hr_lease *l;
  hr_budget b;
  int headroom, cap;
  (void)state;

  assert_int_equal(hr_client_connected(c), 0);
  assert_int_equal(hr_client_gpu_count(c), 0);
  assert_int_equal(hr_client_gpu_sms(c, 0), HR_ENOTFOUND);
  l = lease_on(c, 1);
  assert_int_equal(hr_lease_budget(l, &b), HR_OK);
  assert_int_equal(b.degraded, 1);
  assert_int_equal(b.epoch, 0);
  assert_int_equal(b.gpu, 1);
  assert_int_equal(b.mode, HR_MODE_HEADROOM);
  assert_int_equal(b.cluster, 2);
  assert_true(b.sms > 0 && b.sms <= 1024);
  expect_default(b.sms, 0, 0, &headroom, &cap);
  if(b.sms == 132) {
    /* No driver here: the defaults, 132 SMs. */
    assert_int_equal(headroom, 2);
    assert_int_equal(cap, 16);
  }
  /* DG_MEGA_MOE_SM_HEADROOM unset: the policy's floor, not 0. */
  assert_int_equal(b.headroom, headroom);
  assert_int_equal(b.grid, b.sms - headroom);
  assert_true(b.headroom > 0);
  /* No NCCL variables: the caps are decided all the same. */
  assert_int_equal(b.nccl_min_ctas, 1);
  assert_int_equal(b.nccl_max_ctas, cap);
  assert_int_equal(b.nccl_cga_cluster_size, 1);
  assert_int_equal(b.nccl_nvls_enable, 0);
  assert_int_equal(hr_lease_degraded(l), 1);
  assert_int_equal(hr_lease_gpu(l), 1);
  assert_ptr_equal(hr_lease_client(l), c);
  check_word_matches_budget(l);
  assert_int_equal(hr_lease_release(l), HR_OK);
  hr_client_close(c);
}

static void test_degraded_headroom_from_env(void **state)
{
  hr_client *c;
  hr_lease *l, *coop;
  hr_budget b;
  (void)state;

  setenv("DG_MEGA_MOE_SM_HEADROOM", "8", 1);
  c = th_client_open_degraded();
  l = lease_on(c, 0);
  assert_int_equal(hr_lease_budget(l, &b), HR_OK);
  assert_int_equal(b.headroom, 8);
  assert_int_equal(b.grid, b.sms - 8);
  assert_int_equal(hr_lease_grid(l), b.sms - 8);
  assert_int_equal(hr_lease_headroom(l), 8);
  check_word_matches_budget(l);
  /* The mode is the lease's own; the cluster the GPU's largest, for
   * every lease on it, as the daemon does. */
  assert_int_equal(hr_lease_acquire(c, 0, 4, HR_MODE_COOPERATIVE, &coop),
                   HR_OK);
  assert_int_equal(hr_lease_budget(coop, &b), HR_OK);
  assert_int_equal(b.mode, HR_MODE_COOPERATIVE);
  assert_int_equal(b.cluster, 4);
  assert_int_equal(b.headroom, 8);
  assert_int_equal(hr_lease_budget(l, &b), HR_OK);
  assert_int_equal(b.cluster, 4);
  check_word_matches_budget(l);
  hr_client_close(c);     /* also frees both leases */

  /* More than the computed headroom, in whole clusters. */
  setenv("DG_MEGA_MOE_SM_HEADROOM", "7", 1);
  c = th_client_open_degraded();
  l = lease_on(c, 0);
  assert_int_equal(hr_lease_headroom(l), 8);
  hr_client_close(c);
}

/* Nothing in the environment lowers the headroom under the computed one,
 * and only both variables together give the full grid. */
static void test_degraded_env_never_lowers(void **state)
{
  static const struct { const char *dg, *allow; int full; } cases[] = {
    { "0", NULL, 0 }, { "1", NULL, 0 }, { NULL, "1", 0 }, { "2", "1", 0 },
    { "0", "yes", 0 }, { "0", "true", 0 }, { "0", "", 0 }, { "0", "1", 1 },
  };
  size_t i;
  (void)state;

  for(i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    hr_client *c;
    hr_lease *l;
    hr_budget b;
    int headroom, cap;

    th_env_clear();
    if(cases[i].dg)
      setenv("DG_MEGA_MOE_SM_HEADROOM", cases[i].dg, 1);
    if(cases[i].allow)
      setenv("HEADROOM_ALLOW_FULL_GRID", cases[i].allow, 1);
    c = th_client_open_degraded();
    l = lease_on(c, 0);
    assert_int_equal(hr_lease_budget(l, &b), HR_OK);
    expect_default(b.sms, 0, 0, &headroom, &cap);
    if(cases[i].full)
      headroom = 0;
    if(b.headroom != headroom || b.grid != b.sms - headroom)
      fail_msg("DG_MEGA_MOE_SM_HEADROOM=%s HEADROOM_ALLOW_FULL_GRID=%s: "
               "headroom %d, want %d", cases[i].dg ? cases[i].dg : "-",
               cases[i].allow ? cases[i].allow : "-", b.headroom, headroom);
    /* The full grid, when forced, still caps NCCL. */
    assert_int_equal(b.nccl_max_ctas, cap);
    assert_int_equal(b.nccl_cga_cluster_size, 1);
    assert_int_equal(b.nccl_nvls_enable, 0);
    /* A footprint lowers nothing either. */
    assert_int_equal(hr_comm_register(c, 0, "dp", 4, 1, 1, NULL), HR_OK);
    assert_int_equal(hr_lease_budget(l, &b), HR_OK);
    expect_default(b.sms, 4, 1, &headroom, &cap);
    if(cases[i].full)
      headroom = 0;
    assert_int_equal(b.headroom, headroom);
    hr_client_close(c);
  }
}

static void test_degraded_invalid_env_ignored(void **state)
{
  static const char *const bad[] = {
    "abc", "-3", "4x", "", " 5", "+5", "1e3", "99999", "5000000000", "0x10",
    "1000",   /* parses, but leaves no SM on a 132-SM GPU */
  };
  size_t i;
  (void)state;

  for(i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    hr_client *c;
    hr_lease *l;
    hr_budget b;
    int headroom, cap;
    setenv("DG_MEGA_MOE_SM_HEADROOM", bad[i], 1);
    setenv("HEADROOM_ALLOW_FULL_GRID", "1", 1);   /* not with these */
    c = th_client_open_degraded();
    l = lease_on(c, 0);
    assert_int_equal(hr_lease_budget(l, &b), HR_OK);
    hr_client_close(c);
    if(b.sms > 1000 && !strcmp(bad[i], "1000"))
      continue;   /* a GPU this large would take it */
    expect_default(b.sms, 0, 0, &headroom, &cap);
    if(b.headroom != headroom || b.grid != b.sms - headroom)
      fail_msg("DG_MEGA_MOE_SM_HEADROOM=\"%s\" gave headroom %d, want %d",
               bad[i], b.headroom, headroom);
  }
}

static void test_degraded_nccl_from_env(void **state)
{
  hr_client *c;
  hr_lease *l;
  hr_budget b;
  int headroom, cap;
  (void)state;

  /* Smaller caps than the policy's are taken. */
  setenv("NCCL_MIN_CTAS", "2", 1);
  setenv("NCCL_MAX_CTAS", "8", 1);
  setenv("NCCL_CGA_CLUSTER_SIZE", "1", 1);
  c = th_client_open_degraded();
  l = lease_on(c, 0);
  assert_int_equal(hr_lease_budget(l, &b), HR_OK);
  expect_default(b.sms, 0, 0, &headroom, &cap);
  assert_int_equal(b.nccl_min_ctas, 2);
  assert_int_equal(b.nccl_max_ctas, 8 < cap ? 8 : cap);
  assert_int_equal(b.nccl_cga_cluster_size, 1);
  assert_int_equal(b.nccl_nvls_enable, 0);
  hr_client_close(c);

  /* Larger ones would not fit the headroom: the policy's hold, and CGA
   * stays 1; a minCTAs over the cap comes down to it. */
  setenv("NCCL_MIN_CTAS", "64", 1);
  setenv("NCCL_MAX_CTAS", "64", 1);
  setenv("NCCL_CGA_CLUSTER_SIZE", "4", 1);
  c = th_client_open_degraded();
  l = lease_on(c, 0);
  assert_int_equal(hr_lease_budget(l, &b), HR_OK);
  assert_int_equal(b.nccl_max_ctas, cap);
  assert_int_equal(b.nccl_min_ctas, cap);
  assert_int_equal(b.nccl_cga_cluster_size, 1);
  hr_client_close(c);

  /* Values NCCL would not take count as unset: the policy's numbers. */
  setenv("NCCL_MIN_CTAS", "0", 1);
  setenv("NCCL_MAX_CTAS", "65", 1);
  setenv("NCCL_CGA_CLUSTER_SIZE", "many", 1);
  c = th_client_open_degraded();
  l = lease_on(c, 0);
  assert_int_equal(hr_lease_budget(l, &b), HR_OK);
  assert_int_equal(b.nccl_min_ctas, 1);
  assert_int_equal(b.nccl_max_ctas, cap);
  assert_int_equal(b.nccl_cga_cluster_size, 1);
  hr_client_close(c);
}

/* The budgets computed here follow what the process registers: a
 * footprint raises them (the epoch moves, so waiters wake), its
 * unregistration lowers them, and a footprint registered before the
 * lease counts as well. */
static void test_degraded_follows_footprints(void **state)
{
  hr_client *c = th_client_open_degraded();
  hr_lease *l, *agn;
  hr_comm *m;
  hr_budget b;
  uint32_t e0;
  int headroom, cap;
  (void)state;

  l = lease_on(c, 0);
  assert_int_equal(hr_lease_acquire(c, 0, 1, HR_MODE_AGNOSTIC, &agn), HR_OK);
  e0 = hr_lease_epoch(l);
  assert_int_equal(hr_comm_register(c, 0, "tp", 8, 1, 2, &m), HR_OK);
  assert_int_equal(hr_lease_wait_change(l, e0, 0), HR_OK);
  assert_int_equal(hr_lease_budget(l, &b), HR_OK);
  expect_default(b.sms, 8, 2, &headroom, &cap);
  if(b.sms == 132) {
    assert_int_equal(headroom, 32);       /* 2 x 16 CTAs, at the ceiling */
    assert_int_equal(cap, 8);
  }
  assert_int_equal(b.headroom, headroom);
  assert_int_equal(b.grid, b.sms - headroom);
  assert_int_equal(b.nccl_max_ctas, cap);
  assert_int_equal(b.degraded, 1);
  check_word_matches_budget(l);
  /* The agnostic lease keeps the full grid with the same caps. */
  assert_int_equal(hr_lease_budget(agn, &b), HR_OK);
  assert_int_equal(b.headroom, 0);
  assert_int_equal(b.grid, b.sms);
  assert_int_equal(b.nccl_max_ctas, cap);
  /* A footprint on another GPU changes nothing here. */
  e0 = hr_lease_epoch(l);
  assert_int_equal(hr_comm_register(c, 1, "other", 64, 1, 64, NULL), HR_OK);
  assert_int_equal(hr_lease_epoch(l), e0);
  assert_int_equal(hr_lease_headroom(l), headroom);
  /* Gone again: back to the floor. */
  assert_int_equal(hr_comm_unregister(m), HR_OK);
  assert_int_equal(hr_lease_wait_change(l, e0, 0), HR_OK);
  expect_default(b.sms, 0, 0, &headroom, &cap);
  assert_int_equal(hr_lease_headroom(l), headroom);
  hr_client_close(c);

  /* Registered first, counted in the lease's first budget. */
  c = th_client_open_degraded();
  assert_int_equal(hr_comm_register(c, 0, "dp", 4, 1, 1, NULL), HR_OK);
  l = lease_on(c, 0);
  assert_int_equal(hr_lease_budget(l, &b), HR_OK);
  expect_default(b.sms, 4, 1, &headroom, &cap);
  assert_int_equal(b.headroom, headroom);
  assert_int_equal(b.nccl_max_ctas, cap);
  hr_client_close(c);
}

/* The environment is read when the client opens, not later: a lease
 * exported into the environment must not become the next fallback. */
static void test_degraded_env_read_at_open(void **state)
{
  hr_client *c;
  hr_lease *l;
  (void)state;

  setenv("DG_MEGA_MOE_SM_HEADROOM", "6", 1);
  c = th_client_open_degraded();
  setenv("DG_MEGA_MOE_SM_HEADROOM", "20", 1);
  l = lease_on(c, 0);
  assert_int_equal(hr_lease_headroom(l), 6);
  hr_client_close(c);
}

static void open_two_noisy(void *arg)
{
  hr_client_options o;
  hr_client *a = NULL, *b = NULL;
  (void)arg;
  memset(&o, 0, sizeof(o));
  o.reconnect_ms = 20;
  setenv("HEADROOM_SOCKET", th_sock_path, 1);
  setenv("DG_MEGA_MOE_SM_HEADROOM", "4", 1);
  assert_int_equal(hr_client_open(&a, NULL, &o), HR_OK);
  assert_int_equal(hr_client_open(&b, NULL, &o), HR_OK);
  usleep(100 * 1000);     /* several reconnect attempts: still one line */
  hr_client_close(a);
  hr_client_close(b);
}

static void test_degraded_notice_once_per_process(void **state)
{
  char *text;
  char expect[256];
  (void)state;

  text = th_capture_stderr(open_two_noisy, NULL);
  assert_int_equal(count_lines_with(text, "headroom: no daemon at"), 1);
  /* The path came from $HEADROOM_SOCKET. */
  snprintf(expect, sizeof(expect), "no daemon at %s (", th_sock_path);
  assert_non_null(strstr(text, expect));
  /* What the first lease on GPU 0 gets: the policy's, raised to 4. */
  assert_non_null(strstr(text, "budgets computed here"));
  assert_non_null(strstr(text, "GPU 0 headroom 4, grid "));
  assert_non_null(strstr(text, "cgaClusterSize 1, NVLS off"));
  assert_non_null(strstr(text, "until it answers"));
  /* No per-retry chatter, no other lines. */
  assert_int_equal(count_lines_with(text, "headroom"), 1);
  free(text);
}

static void open_bad_env_noisy(void *arg)
{
  hr_client_options o;
  hr_client *c = NULL;
  (void)arg;
  memset(&o, 0, sizeof(o));
  setenv("DG_MEGA_MOE_SM_HEADROOM", "lots", 1);
  assert_int_equal(hr_client_open(&c, th_sock_path, &o), HR_OK);
  hr_client_close(c);
}

static void test_degraded_invalid_env_warns(void **state)
{
  char *text;
  (void)state;
  text = th_capture_stderr(open_bad_env_noisy, NULL);
  assert_int_equal(count_lines_with(text, "DG_MEGA_MOE_SM_HEADROOM=\"lots\""),
                   1);
  free(text);
}

/* A socket file nobody listens on (a daemon that died): still degraded. */
static void test_degraded_stale_socket(void **state)
{
  struct sockaddr_un sa;
  hr_client *c;
  hr_lease *l;
  int fd;
  (void)state;

  fd = socket(AF_UNIX, SOCK_STREAM, 0);
  assert_true(fd >= 0);
  memset(&sa, 0, sizeof(sa));
  sa.sun_family = AF_UNIX;
  snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", th_sock_path);
  assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
  c = th_client_open_degraded();
  l = lease_on(c, 0);
  assert_int_equal(hr_lease_degraded(l), 1);
  assert_int_equal(hr_client_connected(c), 0);
  hr_client_close(c);
  close(fd);
  unlink(th_sock_path);
}

/* A listener that never answers hello: hr_client_open must not hang. */
static void test_degraded_silent_listener_bounded(void **state)
{
  struct sockaddr_un sa;
  hr_client_options o;
  hr_client *c = NULL;
  struct timespec t0, t1;
  long ms;
  int fd;
  (void)state;

  fd = socket(AF_UNIX, SOCK_STREAM, 0);
  assert_true(fd >= 0);
  memset(&sa, 0, sizeof(sa));
  sa.sun_family = AF_UNIX;
  snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", th_sock_path);
  assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
  assert_int_equal(listen(fd, 16), 0);
  memset(&o, 0, sizeof(o));
  o.quiet = 1;
  o.request_timeout_ms = 150;
  o.reconnect_ms = 1000;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  assert_int_equal(hr_client_open(&c, th_sock_path, &o), HR_OK);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  ms = (t1.tv_sec - t0.tv_sec) * 1000 + (t1.tv_nsec - t0.tv_nsec) / 1000000;
  assert_true(ms >= 100 && ms < 1000);
  assert_int_equal(hr_client_connected(c), 0);
  hr_client_close(c);
  close(fd);
  unlink(th_sock_path);
}

static void test_degraded_footprints_kept(void **state)
{
  hr_client *c = th_client_open_degraded();
  hr_comm *m = NULL;
  (void)state;

  assert_int_equal(hr_comm_register(c, 0, "dp", 8, 1, 2, &m), HR_OK);
  assert_non_null(m);
  assert_int_equal(hr_comm_register(c, 0, NULL, 4, 2, 1, NULL), HR_OK);
  assert_int_equal(hr_comm_unregister(m), HR_OK);
  hr_client_close(c);     /* frees the one registered with out == NULL */
}

static void test_wait_change_times_out(void **state)
{
  hr_client *c = th_client_open_degraded();
  hr_lease *l = lease_on(c, 0);
  struct timespec t0, t1;
  uint32_t e = hr_lease_epoch(l);
  long ms;
  (void)state;

  clock_gettime(CLOCK_MONOTONIC, &t0);
  assert_int_equal(hr_lease_wait_change(l, e, 60), HR_ETIMEDOUT);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  ms = (t1.tv_sec - t0.tv_sec) * 1000 + (t1.tv_nsec - t0.tv_nsec) / 1000000;
  assert_true(ms >= 50);
  /* Already different: returns at once. */
  assert_int_equal(hr_lease_wait_change(l, e + 1, 5000), HR_OK);
  assert_int_equal(hr_lease_wait_change(l, e, 0), HR_ETIMEDOUT);
  hr_client_close(c);
}

typedef struct report_args {
  hr_client *c;
  hr_lease *l;
} report_args;

static void report_twice(void *arg)
{
  report_args *a = arg;
  hr_incident_detail d = {2, 120, 130, 17, 130, 200, -1};
  assert_int_equal(hr_report(a->c, a->l, HR_INCIDENT_BARRIER_TIMEOUT, &d,
                             "barrier 2"), HR_EDEGRADED);
  /* No lease: filed against the GPU of the client's lease. */
  assert_int_equal(hr_report(a->c, NULL, HR_INCIDENT_LAUNCH_FAILURE, NULL,
                             NULL), HR_EDEGRADED);
}

static void test_report_degraded_logs(void **state)
{
  report_args a;
  char *text;
  (void)state;

  a.c = th_client_open_degraded();
  a.l = lease_on(a.c, 3);
  text = th_capture_stderr(report_twice, &a);
  assert_int_equal(count_lines_with(text, "barrier_timeout on GPU 3"), 1);
  assert_int_equal(count_lines_with(text, "120 of 130 CTAs arrived"), 1);
  assert_int_equal(count_lines_with(text, ": barrier 2; no daemon"), 1);
  assert_int_equal(count_lines_with(text, "launch_failure on GPU 3"), 1);
  free(text);
  hr_client_close(a.c);
}

static void report_long_message(void *arg)
{
  report_args *a = arg;
  char msg[601];
  int i;
  /* 300 two-byte characters: more than the 255 bytes the wire takes. */
  for(i = 0; i < 300; i++)
    memcpy(msg + 2 * i, "\xc3\xa9", 2);
  msg[600] = '\0';
  assert_int_equal(hr_report(a->c, a->l, HR_INCIDENT_LAUNCH_FAILURE, NULL,
                             msg), HR_EDEGRADED);
}

static void test_report_cuts_long_message(void **state)
{
  report_args a;
  char *text, *start, *end;
  (void)state;

  a.c = th_client_open_degraded();
  a.l = lease_on(a.c, 0);
  text = th_capture_stderr(report_long_message, &a);
  start = strstr(text, "): ");
  if(!start)
    start = strstr(text, "GPU 0: ");
  assert_non_null(start);
  start = strchr(start, ':') + 2;
  end = strstr(start, "; no daemon");
  assert_non_null(end);
  /* Cut at a character boundary: 127 whole characters, 254 bytes. */
  assert_int_equal((int)(end - start), 254);
  assert_int_equal((unsigned char)start[252], 0xc3);
  assert_int_equal((unsigned char)start[253], 0xa9);
  free(text);
  hr_client_close(a.c);
}

/* ---- argument checks ---------------------------------------------------- */

static void test_invalid_open(void **state)
{
  hr_client_options o;
  hr_client *c = (hr_client *)&o;   /* must stay untouched */
  char longname[HR_NAME_MAX + 1];
  char longpath[200];
  (void)state;

  assert_int_equal(hr_client_open(NULL, th_sock_path, NULL), HR_EINVAL);
  memset(&o, 0, sizeof(o));
  o.request_timeout_ms = -1;
  assert_int_equal(hr_client_open(&c, th_sock_path, &o), HR_EINVAL);
  o.request_timeout_ms = 0;
  o.reconnect_ms = -5;
  assert_int_equal(hr_client_open(&c, th_sock_path, &o), HR_EINVAL);
  o.reconnect_ms = 0;
  memset(longname, 'n', sizeof(longname) - 1);
  longname[sizeof(longname) - 1] = '\0';
  o.name = longname;
  assert_int_equal(hr_client_open(&c, th_sock_path, &o), HR_EINVAL);
  o.name = "trainer\xff";
  assert_int_equal(hr_client_open(&c, th_sock_path, &o), HR_EINVAL);
  o.name = NULL;
  memset(longpath, 'p', sizeof(longpath) - 1);
  longpath[0] = '/';
  longpath[sizeof(longpath) - 1] = '\0';
  assert_int_equal(hr_client_open(&c, longpath, &o), HR_EINVAL);
  assert_int_equal(hr_client_open(&c, "", &o), HR_EINVAL);
  assert_ptr_equal(c, (hr_client *)&o);

  assert_int_equal(hr_client_connected(NULL), HR_EINVAL);
  assert_int_equal(hr_client_gpu_count(NULL), HR_EINVAL);
  assert_int_equal(hr_client_gpu_sms(NULL, 0), HR_EINVAL);
  hr_client_close(NULL);
}

static void test_invalid_register(void **state)
{
  hr_client *c = th_client_open_degraded();
  char longname[HR_NAME_MAX + 1];
  hr_comm *m = (hr_comm *)&m;
  (void)state;

  memset(longname, 'n', sizeof(longname) - 1);
  longname[sizeof(longname) - 1] = '\0';
  assert_int_equal(hr_comm_register(NULL, 0, "x", 8, 1, 1, &m), HR_EINVAL);
  assert_int_equal(hr_comm_register(c, -1, "x", 8, 1, 1, &m), HR_EINVAL);
  assert_int_equal(hr_comm_register(c, 64, "x", 8, 1, 1, &m), HR_EINVAL);
  assert_int_equal(hr_comm_register(c, 0, "x", 0, 1, 1, &m), HR_EINVAL);
  assert_int_equal(hr_comm_register(c, 0, "x", 65, 1, 1, &m), HR_EINVAL);
  assert_int_equal(hr_comm_register(c, 0, "x", 8, 0, 1, &m), HR_EINVAL);
  assert_int_equal(hr_comm_register(c, 0, "x", 8, 9, 1, &m), HR_EINVAL);
  assert_int_equal(hr_comm_register(c, 0, "x", 8, 1, 0, &m), HR_EINVAL);
  assert_int_equal(hr_comm_register(c, 0, "x", 8, 1, 65, &m), HR_EINVAL);
  assert_int_equal(hr_comm_register(c, 0, longname, 8, 1, 1, &m), HR_EINVAL);
  /* The wire carries UTF-8 only: a truncated character, a surrogate, an
   * overlong '/'. */
  assert_int_equal(hr_comm_register(c, 0, "dp\xc3", 8, 1, 1, &m), HR_EINVAL);
  assert_int_equal(hr_comm_register(c, 0, "\xed\xa0\x80", 8, 1, 1, &m),
                   HR_EINVAL);
  assert_int_equal(hr_comm_register(c, 0, "\xc0\xaf", 8, 1, 1, &m), HR_EINVAL);
  assert_ptr_equal(m, (hr_comm *)&m);
  /* The edges of every range are fine. */
  assert_int_equal(hr_comm_register(c, 63, "x", 64, 8, 64, NULL), HR_OK);
  assert_int_equal(hr_comm_register(c, 0, "x", 1, 1, 1, NULL), HR_OK);
  assert_int_equal(hr_comm_register(c, 0, "d\xc3\xa9p \xf0\x9f\x9a\x80", 1, 1,
                                    1, NULL), HR_OK);
  assert_int_equal(hr_comm_unregister(NULL), HR_EINVAL);
  hr_client_close(c);
}

static void test_invalid_lease(void **state)
{
  hr_client *c = th_client_open_degraded();
  hr_lease *l = (hr_lease *)&l, *ok;
  hr_budget b;
  (void)state;

  assert_int_equal(hr_lease_acquire(NULL, 0, 2, HR_MODE_HEADROOM, &l),
                   HR_EINVAL);
  assert_int_equal(hr_lease_acquire(c, 0, 2, HR_MODE_HEADROOM, NULL),
                   HR_EINVAL);
  assert_int_equal(hr_lease_acquire(c, -1, 2, HR_MODE_HEADROOM, &l),
                   HR_EINVAL);
  assert_int_equal(hr_lease_acquire(c, 64, 2, HR_MODE_HEADROOM, &l),
                   HR_EINVAL);
  assert_int_equal(hr_lease_acquire(c, 0, 0, HR_MODE_HEADROOM, &l), HR_EINVAL);
  assert_int_equal(hr_lease_acquire(c, 0, 3, HR_MODE_HEADROOM, &l), HR_EINVAL);
  assert_int_equal(hr_lease_acquire(c, 0, 16, HR_MODE_HEADROOM, &l),
                   HR_EINVAL);
  assert_int_equal(hr_lease_acquire(c, 0, -2, HR_MODE_HEADROOM, &l),
                   HR_EINVAL);
  assert_int_equal(hr_lease_acquire(c, 0, 2, (hr_mode)-1, &l), HR_EINVAL);
  assert_int_equal(hr_lease_acquire(c, 0, 2, HR_MODE_COUNT, &l), HR_EINVAL);
  assert_ptr_equal(l, (hr_lease *)&l);
  assert_int_equal(hr_lease_acquire(c, 0, 1, HR_MODE_HEADROOM, &ok), HR_OK);
  assert_int_equal(hr_lease_acquire(c, 63, 8, HR_MODE_COOPERATIVE, &ok),
                   HR_OK);

  assert_int_equal(hr_lease_release(NULL), HR_EINVAL);
  assert_int_equal(hr_lease_grid(NULL), HR_EINVAL);
  assert_int_equal(hr_lease_headroom(NULL), HR_EINVAL);
  assert_int_equal(hr_lease_degraded(NULL), HR_EINVAL);
  assert_int_equal(hr_lease_epoch(NULL), HR_EINVAL);
  assert_int_equal(hr_lease_budget(NULL, &b), HR_EINVAL);
  assert_int_equal(hr_lease_budget_sized(ok, NULL, sizeof(b)), HR_EINVAL);
  assert_int_equal(hr_lease_gpu(NULL), HR_EINVAL);
  assert_null(hr_lease_client(NULL));
  assert_int_equal(hr_lease_wait_change(NULL, 0, 10), HR_EINVAL);
  assert_int_equal(hr_lease_wait_change(ok, 0, -1), HR_EINVAL);
  assert_int_equal(hr_lease_export_env(NULL), HR_EINVAL);
  assert_int_equal(hr_client_gpu_sms(c, -1), HR_EINVAL);
  assert_int_equal(hr_client_gpu_sms(c, 64), HR_EINVAL);
  hr_client_close(c);
}

static void test_invalid_report(void **state)
{
  hr_client *a = th_client_open_degraded(), *b = th_client_open_degraded();
  hr_lease *lb = lease_on(b, 0);
  hr_incident_detail d = {-1, -1, -1, -1, -1, -1, -1};
  (void)state;

  assert_int_equal(hr_report(NULL, NULL, HR_INCIDENT_BARRIER_TIMEOUT, NULL,
                             NULL), HR_EINVAL);
  assert_int_equal(hr_report(a, NULL, (hr_incident_kind)-1, NULL, NULL),
                   HR_EINVAL);
  assert_int_equal(hr_report(a, NULL, HR_INCIDENT_COUNT, NULL, NULL),
                   HR_EINVAL);
  /* Another client's lease. */
  assert_int_equal(hr_report(a, lb, HR_INCIDENT_BARRIER_TIMEOUT, NULL, NULL),
                   HR_EINVAL);
  d.arrived = -2;
  assert_int_equal(hr_report(a, NULL, HR_INCIDENT_BARRIER_TIMEOUT, &d, NULL),
                   HR_EINVAL);
  d.arrived = -1;
  d.cuda_error = -7;
  assert_int_equal(hr_report(a, NULL, HR_INCIDENT_LAUNCH_FAILURE, &d, NULL),
                   HR_EINVAL);
  hr_client_close(a);
  hr_client_close(b);
}

/* ---- the API's rules (headroom.h, Conventions) -------------------------- */

/* Handles outlive hr_client_close, closed: every call on them is
 * HR_ECLOSED, never a use-after-free (the suite runs under ASan and
 * valgrind), until their owner frees them. */
static void test_handles_outlive_close(void **state)
{
  hr_client *c = th_client_open_degraded();
  hr_lease *l, *p;
  hr_comm *m;
  hr_budget b;
  hr_partition *part = NULL;
  int grid, cluster;
  hr_mode mode;
  (void)state;

  l = lease_on(c, 0);
  assert_int_equal(hr_lease_acquire(c, 0, 1, HR_MODE_PARTITION, &p), HR_OK);
  assert_int_equal(hr_comm_register(c, 0, "dp", 4, 1, 1, &m), HR_OK);
  assert_int_equal(hr_comm_register(c, 0, "anon", 2, 1, 1, NULL), HR_OK);
  assert_true(hr_lease_grid(l) > 0);
  hr_client_close(c);

  assert_int_equal(hr_lease_grid(l), HR_ECLOSED);
  assert_int_equal(hr_lease_headroom(l), HR_ECLOSED);
  assert_int_equal(hr_lease_degraded(l), HR_ECLOSED);
  assert_int_equal(hr_lease_epoch(l), HR_ECLOSED);
  assert_int_equal(hr_lease_launch_config(l, &grid, &cluster, &mode),
                   HR_ECLOSED);
  assert_int_equal(hr_lease_budget(l, &b), HR_ECLOSED);
  assert_int_equal(hr_lease_gpu(l), HR_ECLOSED);
  assert_null(hr_lease_client(l));
  assert_int_equal(hr_lease_wait_change(l, 0, 10), HR_ECLOSED);
  assert_int_equal(hr_lease_export_env(l), HR_ECLOSED);
  assert_int_equal(hr_partition_create(p, &part), HR_ECLOSED);
  assert_null(part);
  /* The owner frees them: nothing left to release at a daemon. */
  assert_int_equal(hr_lease_release(l), HR_OK);
  assert_int_equal(hr_lease_release(p), HR_OK);
  assert_int_equal(hr_comm_unregister(m), HR_OK);

  /* A handle freed before the close is simply gone from the client. */
  c = th_client_open_degraded();
  l = lease_on(c, 1);
  assert_int_equal(hr_lease_release(l), HR_OK);
  hr_client_close(c);
}

/* Getters: the value, never negative, or a negative HR_E* code; pointer
 * getters NULL. */
static void test_getter_convention(void **state)
{
  hr_client *c = th_client_open_degraded();
  hr_lease *l = lease_on(c, 0);
  (void)state;

  assert_int_equal(hr_client_connected(NULL), HR_EINVAL);
  assert_int_equal(hr_client_connected(c), 0);
  assert_int_equal(hr_client_gpu_count(NULL), HR_EINVAL);
  assert_int_equal(hr_client_gpu_sms(NULL, 0), HR_EINVAL);
  assert_int_equal(hr_client_gpu_sms(c, -1), HR_EINVAL);
  assert_int_equal(hr_lease_epoch(NULL), HR_EINVAL);
  assert_true(hr_lease_epoch(l) >= 0);
  assert_int_equal(hr_lease_gpu(l), 0);
  assert_int_equal(hr_partition_epoch(NULL), HR_EINVAL);
  assert_int_equal(hr_partition_stale(NULL), HR_EINVAL);
  assert_null(hr_lease_client(NULL));
  assert_null(hr_partition_comm_stream(NULL));
  assert_null(hr_mode_name(HR_MODE_COUNT));
  assert_null(hr_incident_kind_name(HR_INCIDENT_COUNT));
  assert_non_null(hr_strerror(12345));
  hr_client_close(c);
  assert_int_equal(hr_lease_release(l), HR_OK);
}

static void test_version(void **state)
{
  (void)state;
  assert_int_equal(hr_version(), HR_VERSION_HEX);
  assert_int_equal(hr_version(), (HR_VERSION_MAJOR << 16) |
                                 (HR_VERSION_MINOR << 8) | HR_VERSION_PATCH);
  assert_string_equal(hr_version_string(), HR_VERSION_STRING);
}

/* hr_client_options by size: 0 and the first layout's size work as the
 * whole struct, a newer caller's larger struct is read as far as this
 * library knows it, and a size shorter than the first layout is refused. */
static void test_options_by_size(void **state)
{
  struct newer {
    hr_client_options o;
    int future_option;
  } n;
  hr_client_options o;
  hr_client *c = NULL;
  size_t v1 = offsetof(hr_client_options, quiet) + sizeof(int);
  (void)state;

  memset(&o, 0, sizeof(o));
  o.quiet = 1;
  o.name = "sized";
  o.size = 0;
  assert_int_equal(hr_client_open(&c, th_sock_path, &o), HR_OK);
  hr_client_close(c);
  o.size = sizeof(o);
  assert_int_equal(hr_client_open(&c, th_sock_path, &o), HR_OK);
  hr_client_close(c);
  o.size = v1;
  assert_int_equal(hr_client_open(&c, th_sock_path, &o), HR_OK);
  hr_client_close(c);
  /* The members it covers are still checked. */
  o.name = "bad\nname";
  assert_int_equal(hr_client_open(&c, th_sock_path, &o), HR_EINVAL);
  o.name = "sized";
  o.size = v1 - 1;
  c = (hr_client *)&o;
  assert_int_equal(hr_client_open(&c, th_sock_path, &o), HR_EINVAL);
  o.size = 1;
  assert_int_equal(hr_client_open(&c, th_sock_path, &o), HR_EINVAL);
  memset(&n, 0, sizeof(n));
  n.o.size = sizeof(n);
  n.o.quiet = 1;
  n.future_option = 7;
  assert_int_equal(hr_client_open(&c, th_sock_path, &n.o), HR_OK);
  hr_client_close(c);
}

/* hr_budget by size: an older caller (the budget before partition mode)
 * gets exactly its members and nothing written past them; a newer one's
 * members this library does not know read 0. */
static void test_budget_by_size(void **state)
{
  struct newer {
    hr_budget b;
    int future_field;
  } n;
  unsigned char raw[sizeof(hr_budget) + 16];
  hr_client *c = th_client_open_degraded();
  hr_lease *l = lease_on(c, 0);
  hr_budget full, *old = (hr_budget *)(void *)raw;
  size_t i;
  (void)state;

  assert_int_equal(hr_lease_budget(l, &full), HR_OK);
  memset(raw, 0x5a, sizeof(raw));
  assert_int_equal(hr_lease_budget_sized(l, old, HR_BUDGET_SIZE_V1), HR_OK);
  assert_memory_equal(raw, &full, HR_BUDGET_SIZE_V1);
  for(i = HR_BUDGET_SIZE_V1; i < sizeof(raw); i++)
    if(raw[i] != 0x5a)
      fail_msg("byte %zu past an old caller's budget was written", i);
  assert_int_equal(hr_lease_budget_sized(l, old, HR_BUDGET_SIZE_V1 - 1),
                   HR_EINVAL);
  assert_int_equal(hr_lease_budget_sized(l, old, 0), HR_EINVAL);

  memset(&n, 0x5a, sizeof(n));
  assert_int_equal(hr_lease_budget(l, &n.b), HR_OK);
  assert_int_equal(hr_lease_budget_sized(l, &n.b, sizeof(n)), HR_OK);
  assert_memory_equal(&n.b, &full, sizeof(full));
  assert_int_equal(n.future_field, 0);
  hr_client_close(c);
  assert_int_equal(hr_lease_release(l), HR_OK);
}

/* ---- the environment, exported ------------------------------------------ */

typedef struct env_copy {
  int n;
  char **vars;
} env_copy;

static void env_snapshot(env_copy *e)
{
  int i;
  for(e->n = 0; environ[e->n]; e->n++)
    ;
  e->vars = calloc((size_t)e->n + 1, sizeof(char *));
  assert_non_null(e->vars);
  for(i = 0; i < e->n; i++) {
    e->vars[i] = strdup(environ[i]);
    assert_non_null(e->vars[i]);
  }
}

static int env_has(const env_copy *e, const char *entry)
{
  int i;
  for(i = 0; i < e->n; i++) {
    if(!strcmp(e->vars[i], entry))
      return 1;
  }
  return 0;
}

static void env_free(env_copy *e)
{
  int i;
  for(i = 0; i < e->n; i++)
    free(e->vars[i]);
  free(e->vars);
}

/* Every entry of the environment now that was not there before, joined
 * with ' ' in environment order. */
static void env_added(const env_copy *before, char *out, size_t cap)
{
  int i;
  out[0] = '\0';
  for(i = 0; environ[i]; i++) {
    if(!env_has(before, environ[i])) {
      strncat(out, environ[i], cap - strlen(out) - 1);
      strncat(out, " ", cap - strlen(out) - 1);
    }
  }
}

static void test_export_env_exact(void **state)
{
  hr_client *c;
  hr_lease *l;
  env_copy before;
  char added[512];
  (void)state;

  setenv("DG_MEGA_MOE_SM_HEADROOM", "6", 1);
  setenv("NCCL_MAX_CTAS", "4", 1);
  c = th_client_open_degraded();
  l = lease_on(c, 0);
  th_env_clear();
  env_snapshot(&before);
  assert_int_equal(hr_lease_export_env(l), HR_OK);
  env_added(&before, added, sizeof(added));
  assert_string_equal(getenv("DG_MEGA_MOE_SM_HEADROOM"), "6");
  assert_string_equal(getenv("NCCL_MAX_CTAS"), "4");
  assert_string_equal(getenv("NCCL_NVLS_ENABLE"), "0");
  /* Decided with no daemon too: minCTAs 1, CGA 1. */
  assert_string_equal(getenv("NCCL_MIN_CTAS"), "1");
  assert_string_equal(getenv("NCCL_CGA_CLUSTER_SIZE"), "1");
  {
    /* The added set, whatever the order setenv put them in. */
    int n = 0;
    char *tok, *save = NULL;
    for(tok = strtok_r(added, " ", &save); tok;
        tok = strtok_r(NULL, " ", &save)) {
      if(strcmp(tok, "DG_MEGA_MOE_SM_HEADROOM=6") &&
         strcmp(tok, "NCCL_MAX_CTAS=4") && strcmp(tok, "NCCL_NVLS_ENABLE=0") &&
         strcmp(tok, "NCCL_MIN_CTAS=1") && strcmp(tok, "NCCL_CGA_CLUSTER_SIZE=1"))
        fail_msg("hr_lease_export_env set %s", tok);
      n++;
    }
    assert_int_equal(n, 5);
  }
  {
    int i;
    for(i = 0; i < before.n; i++) {
      char name[256];
      const char *eq = strchr(before.vars[i], '=');
      if(!eq)
        continue;
      snprintf(name, sizeof(name), "%.*s", (int)(eq - before.vars[i]),
               before.vars[i]);
      if(!getenv(name))
        fail_msg("hr_lease_export_env removed %s", name);
    }
  }
  env_free(&before);

  /* Values that are there are replaced, not duplicated. */
  setenv("DG_MEGA_MOE_SM_HEADROOM", "99", 1);
  setenv("NCCL_NVLS_ENABLE", "1", 1);
  assert_int_equal(hr_lease_export_env(l), HR_OK);
  assert_string_equal(getenv("DG_MEGA_MOE_SM_HEADROOM"), "6");
  assert_string_equal(getenv("NCCL_NVLS_ENABLE"), "0");
  hr_client_close(c);
}

static void test_export_env_full_budget(void **state)
{
  hr_client *c;
  hr_lease *l;
  (void)state;

  setenv("NCCL_MIN_CTAS", "2", 1);
  setenv("NCCL_MAX_CTAS", "4", 1);
  setenv("NCCL_CGA_CLUSTER_SIZE", "1", 1);
  c = th_client_open_degraded();
  l = lease_on(c, 0);
  th_env_clear();
  assert_int_equal(hr_lease_export_env(l), HR_OK);
  /* No daemon and no variable asking for more: the policy's floor, never
   * the full grid (0). */
  assert_string_equal(getenv("DG_MEGA_MOE_SM_HEADROOM"), "2");
  assert_string_equal(getenv("NCCL_MIN_CTAS"), "2");
  assert_string_equal(getenv("NCCL_MAX_CTAS"), "4");
  assert_string_equal(getenv("NCCL_CGA_CLUSTER_SIZE"), "1");
  assert_string_equal(getenv("NCCL_NVLS_ENABLE"), "0");
  hr_client_close(c);
}

/* ---- ncclConfig_t ------------------------------------------------------- */

static void test_fill_nccl_config(void **state)
{
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  ncclConfig_t pristine = NCCL_CONFIG_INITIALIZER;
  hr_client *c;
  hr_lease *l;
  (void)state;

  /* No daemon and no NCCL variable: the caps are decided all the same,
   * and land in their fields only. */
  c = th_client_open_degraded();
  l = lease_on(c, 0);
  {
    hr_budget b;
    assert_int_equal(hr_lease_budget(l, &b), HR_OK);
    assert_int_equal(hr_lease_fill_nccl_config(l, &cfg), HR_OK);
    assert_int_equal(cfg.minCTAs, 1);
    assert_int_equal(cfg.maxCTAs, b.nccl_max_ctas);
    assert_true(cfg.maxCTAs >= 1 && cfg.maxCTAs <= 64);
    assert_int_equal(cfg.cgaClusterSize, 1);
    assert_int_equal(cfg.size, pristine.size);
    assert_int_equal(cfg.magic, pristine.magic);
    assert_int_equal(cfg.blocking, pristine.blocking);
  }
  assert_int_equal(hr_lease_fill_nccl_config(NULL, &cfg), HR_EINVAL);
  assert_int_equal(hr_lease_fill_nccl_config(l, NULL), HR_EINVAL);
  hr_client_close(c);
  cfg = pristine;

  /* Decided fields land in theirs, and only there. */
  setenv("NCCL_MIN_CTAS", "2", 1);
  setenv("NCCL_MAX_CTAS", "8", 1);
  setenv("NCCL_CGA_CLUSTER_SIZE", "1", 1);
  c = th_client_open_degraded();
  l = lease_on(c, 0);
  assert_int_equal(hr_lease_fill_nccl_config(l, &cfg), HR_OK);
  assert_int_equal(cfg.minCTAs, 2);
  assert_int_equal(cfg.maxCTAs, 8);
  assert_int_equal(cfg.cgaClusterSize, 1);
  assert_int_equal(cfg.size, pristine.size);
  assert_int_equal(cfg.magic, pristine.magic);
  assert_int_equal(cfg.version, pristine.version);
  assert_int_equal(cfg.blocking, pristine.blocking);
  assert_ptr_equal(cfg.netName, pristine.netName);
  assert_int_equal(cfg.splitShare, pristine.splitShare);
  hr_client_close(c);
}

/* ---- threads ------------------------------------------------------------ */

static void *churn(void *arg)
{
  hr_client *c = arg;
  int i;
  for(i = 0; i < 200; i++) {
    hr_lease *l;
    hr_comm *m;
    if(hr_lease_acquire(c, i % 8, 2, HR_MODE_HEADROOM, &l) ||
       hr_comm_register(c, i % 8, "churn", 1 + i % 64, 1, 1, &m))
      return (void *)1;
    if(hr_lease_grid(l) <= 0 || !hr_lease_degraded(l))
      return (void *)2;
    if(hr_comm_unregister(m) || hr_lease_release(l))
      return (void *)3;
  }
  return NULL;
}

static void test_threads_share_a_client(void **state)
{
  hr_client *c = th_client_open_degraded();
  pthread_t t[4];
  int i;
  (void)state;

  for(i = 0; i < 4; i++)
    assert_int_equal(pthread_create(&t[i], NULL, churn, c), 0);
  for(i = 0; i < 4; i++) {
    void *rv;
    assert_int_equal(pthread_join(t[i], &rv), 0);
    assert_null(rv);
  }
  hr_client_close(c);
}

int main(void)
{
#define T(fn) cmocka_unit_test_setup(fn, th_env_reset)
  const struct CMUnitTest tests[] = {
    T(test_strerror_names_every_code),
    T(test_handles_outlive_close),
    T(test_getter_convention),
    T(test_version),
    T(test_options_by_size),
    T(test_budget_by_size),
    T(test_degraded_open_policy_budget),
    T(test_degraded_headroom_from_env),
    T(test_degraded_env_never_lowers),
    T(test_degraded_invalid_env_ignored),
    T(test_degraded_nccl_from_env),
    T(test_degraded_follows_footprints),
    T(test_degraded_env_read_at_open),
    T(test_degraded_notice_once_per_process),
    T(test_degraded_invalid_env_warns),
    T(test_degraded_stale_socket),
    T(test_degraded_silent_listener_bounded),
    T(test_degraded_footprints_kept),
    T(test_wait_change_times_out),
    T(test_report_degraded_logs),
    T(test_report_cuts_long_message),
    T(test_invalid_open),
    T(test_invalid_register),
    T(test_invalid_lease),
    T(test_invalid_report),
    T(test_export_env_exact),
    T(test_export_env_full_budget),
    T(test_fill_nccl_config),
    T(test_threads_share_a_client),
  };
#undef T
  return cmocka_run_group_tests_name("client", tests, group_setup,
                                     th_tmpdir_teardown);
}
