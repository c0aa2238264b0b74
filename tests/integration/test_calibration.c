/*
 * test_calibration.c: headroomd reading a calibration file: the lease a
 * client gets and what status says, with a good file, a bad one, and one
 * that appears later and is read on SIGHUP.
 *
 * The daemon's topology is the harness's (2 GPUs of 132 SMs). The files
 * calibrate GPU 0 only, so GPU 1 shows the policy's theory beside it.
 */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "harness.h"
#include "headroom.h"

static hr_daemon daemon_;
static char cal_dir[64];
static char cal_path[128];

/* docs/measurements.md §3 as headroom-calibrate would write it, for GPU 0:
 * with NCCL's CGA size at 1, a headroom of 2 was safe at every CTA cap. */
static const char good_file[] =
  "{\"version\":1,\"date\":\"2026-12-01T10:00:00Z\",\"node\":\"test\","
  "\"nccl_version\":\"2.28.9\","
  "\"gpus\":[{\"index\":0,\"sms\":132,\"name\":\"\"}],"
  "\"budgets\":["
  "{\"max_ctas\":8,\"cga_cluster_size\":0,\"safe_headroom\":6,"
  "\"collective_ms\":0.65,\"trials\":3,\"orders\":4},"
  "{\"max_ctas\":8,\"cga_cluster_size\":1,\"safe_headroom\":2,"
  "\"collective_ms\":0.65,\"trials\":3,\"orders\":4},"
  "{\"max_ctas\":4,\"cga_cluster_size\":1,\"safe_headroom\":2,"
  "\"collective_ms\":0.92,\"trials\":3,\"orders\":4},"
  "{\"max_ctas\":16,\"cga_cluster_size\":1,\"safe_headroom\":null,"
  "\"collective_ms\":0.60,\"trials\":3,\"orders\":4}]}\n";

static int setup(void **state)
{
  (void)state;
  snprintf(cal_dir, sizeof(cal_dir), "/tmp/hr-cal-XXXXXX");
  if(!mkdtemp(cal_dir))
    return -1;
  snprintf(cal_path, sizeof(cal_path), "%s/calibration.json", cal_dir);
  return 0;
}

static int teardown(void **state)
{
  (void)state;
  th_daemon_cleanup(&daemon_);
  unlink(cal_path);
  rmdir(cal_dir);
  return 0;
}

static hr_client *open_client(const char *name)
{
  return th_client_open(&daemon_, name, 50);
}


static void expect_sources(hr_budget_source gpu0, hr_budget_source gpu1)
{
  hr_status st;

  memset(&st, 0, sizeof(st));
  assert_int_equal(th_status(daemon_.socket, &st), 0);
  assert_int_equal(st.n_gpus, 2);
  assert_int_equal(st.gpus[0].budget_source, gpu0);
  assert_int_equal(st.gpus[1].budget_source, gpu1);
  hr_status_free(&st);
}

/* Whether the daemon's log holds `needle`. */
static int log_has(const char *needle)
{
  return th_daemon_log_has(&daemon_, needle);
}

/* headroomd with `text` as the file its calibration key names. */
static void start_calibrated(const char *text)
{
  char extra[256];

  th_file_write(cal_path, text);
  snprintf(extra, sizeof(extra), "calibration = %s\n", cal_path);
  assert_int_equal(th_daemon_start(&daemon_, extra), 0);
}

/* Two collectives of 8 CTAs on each GPU: the policy's cap is
 * 32 / 2 / 2 = 8. Theory asks 2 x 16 = 32 SMs (held at the ceiling); the
 * calibrated 8/1 entry says 2. */
static void register_load(hr_client *c)
{
  assert_int_equal(hr_comm_register(c, 0, "dp0", 8, 1, 2, NULL), HR_OK);
  assert_int_equal(hr_comm_register(c, 1, "dp1", 8, 1, 2, NULL), HR_OK);
}

static void test_calibrated_lease(void **state)
{
  hr_client *c;
  hr_lease *l0, *l1;
  hr_budget b;
  (void)state;

  start_calibrated(good_file);
  c = open_client("calibrated");
  register_load(c);
  assert_int_equal(hr_lease_acquire(c, 0, 2, HR_MODE_HEADROOM, &l0), HR_OK);
  assert_int_equal(hr_lease_acquire(c, 1, 2, HR_MODE_HEADROOM, &l1), HR_OK);
  assert_int_equal(hr_lease_budget(l0, &b), HR_OK);
  assert_int_equal(b.nccl_max_ctas, 8);
  assert_int_equal(b.nccl_cga_cluster_size, 1);
  assert_int_equal(b.headroom, 2);
  assert_int_equal(b.grid, 130);
  assert_int_equal(hr_lease_budget(l1, &b), HR_OK);
  assert_int_equal(b.nccl_max_ctas, 8);
  assert_int_equal(b.headroom, 32);
  assert_int_equal(b.grid, 100);
  expect_sources(HR_SOURCE_CALIBRATED, HR_SOURCE_THEORY);
  assert_true(log_has("covers 1 of 2 GPUs"));
  hr_client_close(c);
}

/* headroomd on the calibration file `text`, which it must refuse whole
 * with `why` in the log: GPU 0 runs on theory. */
static void expect_refused_file(const char *text, const char *why)
{
  hr_client *c;
  hr_lease *l0;

  start_calibrated(text);
  c = open_client("theory");
  register_load(c);
  assert_int_equal(hr_lease_acquire(c, 0, 2, HR_MODE_HEADROOM, &l0), HR_OK);
  assert_int_equal(hr_lease_grid(l0), 100);
  expect_sources(HR_SOURCE_THEORY, HR_SOURCE_THEORY);
  assert_true(log_has(why));
  assert_true(log_has("ignored, using the policy's theory"));
  hr_client_close(c);
}

/* A file with one bad value is refused whole: GPU 0 runs on theory. */
static void test_bad_file_ignored(void **state)
{
  char bad[sizeof(good_file) + 1];
  const char *p;
  size_t at;
  (void)state;

  /* The 8/1 entry's safe headroom made negative: valid JSON, bad value. */
  p = strstr(good_file, "\"safe_headroom\":2");
  assert_non_null(p);
  at = (size_t)(p - good_file) + strlen("\"safe_headroom\":");
  memcpy(bad, good_file, at);
  bad[at] = '-';
  memcpy(bad + at + 1, good_file + at, sizeof(good_file) - at);
  expect_refused_file(bad, "budgets[1].safe_headroom");
}

/* A member given twice is refused as the wire refuses it: the second
 * safe_headroom would otherwise be silently dropped (cJSON finds the
 * first). The whole file is ignored. */
static void test_duplicate_member_ignored(void **state)
{
  char bad[sizeof(good_file) + 32];
  const char *p = strstr(good_file, "\"safe_headroom\":2,");
  size_t at;
  (void)state;

  assert_non_null(p);
  at = (size_t)(p - good_file);
  memcpy(bad, good_file, at);
  snprintf(bad + at, sizeof(bad) - at, "\"safe_headroom\":40,%s",
           good_file + at);
  expect_refused_file(bad, "budgets[1].safe_headroom: given more than once");
}

/* No calibration key: the default file in state_dir, absent at start,
 * written later and read on SIGHUP; the lease is pushed the new grid.
 * Then a broken rewrite and SIGHUP drop back to theory. */
static void test_default_file_on_sighup(void **state)
{
  char path[400];
  hr_client *c;
  hr_lease *l0;
  (void)state;

  assert_int_equal(th_daemon_start(&daemon_, NULL), 0);
  c = open_client("sighup");
  register_load(c);
  assert_int_equal(hr_lease_acquire(c, 0, 2, HR_MODE_HEADROOM, &l0), HR_OK);
  assert_int_equal(hr_lease_grid(l0), 100);
  expect_sources(HR_SOURCE_THEORY, HR_SOURCE_THEORY);

  snprintf(path, sizeof(path), "%s/calibration.json", daemon_.state_dir);
  th_file_write(path, good_file);
  assert_int_equal(kill(daemon_.pid, SIGHUP), 0);
  assert_int_equal(th_wait_grid(l0, 130, 3000), 0);
  expect_sources(HR_SOURCE_CALIBRATED, HR_SOURCE_THEORY);

  th_file_write(path, "{\"version\":1,");
  assert_int_equal(kill(daemon_.pid, SIGHUP), 0);
  assert_int_equal(th_wait_grid(l0, 100, 3000), 0);
  expect_sources(HR_SOURCE_THEORY, HR_SOURCE_THEORY);
  assert_true(log_has("invalid JSON"));
  unlink(path);
  hr_client_close(c);
}

int main(void)
{
  const struct CMUnitTest tests[] = {
    cmocka_unit_test_setup_teardown(test_calibrated_lease, setup, teardown),
    cmocka_unit_test_setup_teardown(test_bad_file_ignored, setup, teardown),
    cmocka_unit_test_setup_teardown(test_duplicate_member_ignored, setup,
                                    teardown),
    cmocka_unit_test_setup_teardown(test_default_file_on_sighup, setup,
                                    teardown),
  };

  return cmocka_run_group_tests(tests, NULL, NULL);
}
