/*
 * test_policy.c: the budget policy against a table of cases, including
 * every one-GPU case measured in docs/measurements.md §1 and §3, and the
 * partition fields against the green-context splits of §2.
 *
 * A "hog" of k SMs in docs/measurements.md §1 is modelled as one
 * footprint of k CTAs, one collective in flight: k SMs held by something
 * else when the mega grid launches.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "policy.h"

typedef struct policy_case {
  const char *what;
  int sms, cluster, raised;
  int min_headroom, max_headroom, min_grid;
  int n;                         /* footprints below */
  hr_footprint fp[4];
  int want_headroom, want_grid, want_max_ctas;
} policy_case;

#define DEF 2, 32, 64           /* the default policy */

static const policy_case cases[] = {
  /* Nothing registered: the floor, one cluster. */
  {"idle GPU", 132, 2, 0, DEF, 0, {{0}}, 2, 130, 16},
  /* docs/measurements.md §1: cluster of 2 against k hog SMs needs 2k
   * (pair waste). */
  {"F1 cluster2 hog1: grid 130 completes", 132, 2, 0, DEF, 1,
   {{1, 1, 1}}, 2, 130, 16},
  {"F1 cluster2 hog3 scattered: 128 timed out, 126 completes", 132, 2, 0, DEF,
   1, {{3, 1, 1}}, 6, 126, 16},
  {"F1 cluster2 hog8: 2k", 132, 2, 0, DEF, 1, {{8, 1, 1}}, 16, 116, 16},
  /* docs/measurements.md §1: an ordinary grid (cluster 1) needs exactly
   * k; the floor still keeps one cluster free when k is smaller. */
  {"F1 plain hog1 (floor)", 132, 1, 0, DEF, 1, {{1, 1, 1}}, 2, 130, 32},
  {"F1 plain hog4", 132, 1, 0, DEF, 1, {{4, 1, 1}}, 4, 128, 32},
  {"F1 plain hog16", 132, 1, 0, DEF, 1, {{16, 1, 1}}, 16, 116, 32},
  /* docs/measurements.md §3: 3 concurrent all-reduces of 8 CTAs = 24
   * comm CTAs: the theory wants 48 SMs; the default ceiling holds it at
   * 32 and tells NCCL to create further communicators with 4 CTAs
   * (3 x 4 x 2 <= 32). */
  {"F3 3x8 CTAs, default ceiling", 132, 2, 0, DEF, 1, {{8, 1, 3}}, 32, 100, 4},
  {"F3 3x8 CTAs, ceiling 64", 132, 2, 0, 2, 64, 64, 1, {{8, 1, 3}}, 48, 84, 8},
  {"F3 3x4 CTAs", 132, 2, 0, DEF, 1, {{4, 1, 3}}, 24, 108, 4},
  /* Several footprints from several clients add up. */
  {"two clients", 132, 2, 0, DEF, 2, {{2, 1, 1}, {4, 1, 2}}, 20, 112, 4},
  /* The minimum grid lowers the ceiling: 132 - 120 = 12. */
  {"min_grid caps", 132, 2, 0, 2, 32, 120, 1, {{8, 1, 1}}, 12, 120, 4},
  /* The floor rounds up to the cluster. */
  {"floor rounds up", 132, 2, 0, 5, 32, 64, 0, {{0}}, 6, 126, 16},
  {"floor cluster 4", 132, 4, 0, 2, 32, 64, 0, {{0}}, 4, 128, 8},
  /* Incidents raise the floor. */
  {"raised 2", 132, 2, 2, DEF, 0, {{0}}, 4, 128, 16},
  {"raised past ceiling", 132, 2, 100, DEF, 0, {{0}}, 32, 100, 16},
  /* A ceiling below one cluster rounds to 0: the operator asked for it. */
  {"ceiling under a cluster", 65, 2, 0, DEF, 0, {{0}}, 0, 65, 1},
  /* Saturating footprints stay at the ceiling, no overflow. */
  {"huge footprints", 132, 2, 0, DEF, 4,
   {{64, 8, 64}, {64, 8, 64}, {64, 8, 64}, {64, 8, 64}}, 32, 100, 1},
  /* A smaller GPU. */
  {"114-SM part", 114, 2, 0, DEF, 1, {{3, 1, 1}}, 6, 108, 16},
};

static void run_case(const policy_case *c)
{
  hr_policy p = {c->min_headroom, c->max_headroom, c->min_grid, 1};
  hr_policy_input in = {c->sms, c->cluster, c->raised, c->n, c->fp, 0, NULL,
                        0};
  hr_budget b;

  memset(&b, 0xff, sizeof(b));
  if(hr__policy_budget(&p, &in, &b) != HR_OK)
    fail_msg("%s: policy refused valid input", c->what);
  if(b.headroom != c->want_headroom || b.grid != c->want_grid ||
     b.nccl_max_ctas != c->want_max_ctas)
    fail_msg("%s: headroom %d grid %d maxCTAs %d, want %d %d %d", c->what,
             b.headroom, b.grid, b.nccl_max_ctas, c->want_headroom,
             c->want_grid, c->want_max_ctas);
  /* Invariants every budget keeps. */
  assert_int_equal(b.sms, c->sms);
  assert_int_equal(b.cluster, c->cluster);
  assert_int_equal(b.grid + b.headroom, c->sms);
  assert_int_equal(b.headroom % c->cluster, 0);
  assert_true(b.headroom <= c->max_headroom);
  assert_true(b.grid >= c->min_grid);
  assert_int_equal(b.nccl_max_ctas & (b.nccl_max_ctas - 1), 0);
  assert_true(b.nccl_min_ctas >= 1 && b.nccl_min_ctas <= b.nccl_max_ctas);
  assert_int_equal(b.nccl_cga_cluster_size, 1);
  assert_int_equal(b.nccl_nvls_enable, 0);
  assert_int_equal(b.degraded, 0);
}

static void test_table(void **state)
{
  size_t i;
  (void)state;
  for(i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
    run_case(&cases[i]);
}

/* ---- partition mode ---------------------------------------------------- */

typedef struct partition_case {
  const char *what;
  int sms, cluster, raised;
  int min_headroom, max_headroom, min_grid;
  int granularity;
  int n;
  hr_footprint fp[4];
  int want_comm, want_mega, want_max_ctas; /* comm 0: no partition here */
} partition_case;

static const partition_case partition_cases[] = {
  /* docs/measurements.md §2: an H200 splits in steps of 8
   * (minSmPartitionSize and smCoscheduledAlignment); an idle GPU gets one
   * step for NCCL. */
  {"F2 H200 idle, g 8", 132, 2, 0, DEF, 8, 0, {{0}}, 8, 124, 8},
  /* ... and in steps of 2 when co-scheduling is ignored. */
  {"F2 H200 idle, g 2", 132, 2, 0, DEF, 2, 0, {{0}}, 2, 130, 2},
  /* N = ctas x concurrent, no cluster multiplier: 8 x 3 = 24, already a
   * multiple of 8; NCCL gets 8 x 3 <= 24 but no more than the GPU's cap
   * (32 / 2 / 3 -> 4; with clusters of 8, 32 / 8 / 3 -> 1). */
  {"F3 3x8 CTAs, g 8", 132, 2, 0, DEF, 8, 1, {{8, 1, 3}}, 24, 108, 4},
  {"F3 3x8 CTAs, cluster 8: no multiplier", 132, 8, 0, DEF, 8, 1,
   {{8, 1, 3}}, 24, 108, 1},
  /* 9 CTAs round up to two steps of 8, or to 10 in steps of 2. */
  {"9 CTAs, g 8", 132, 2, 0, DEF, 8, 1, {{9, 1, 1}}, 16, 116, 16},
  {"9 CTAs, g 2", 132, 2, 0, DEF, 2, 1, {{9, 1, 1}}, 10, 122, 8},
  /* Several footprints add up: 2 + 4 x 2 = 10 -> 16, K = 3. */
  {"two clients, g 8", 132, 2, 0, DEF, 8, 2, {{2, 1, 1}, {4, 1, 2}}, 16,
   116, 4},
  /* The floor: min_headroom + raised, rounded up to g. */
  {"floor 10, g 8", 132, 2, 0, 10, 32, 64, 8, 0, {{0}}, 16, 116, 16},
  {"raised 10, g 8", 132, 2, 10, DEF, 8, 0, {{0}}, 16, 116, 16},
  {"raised 10, g 2", 132, 2, 10, DEF, 2, 0, {{0}}, 12, 120, 8},
  {"raised past the ceiling", 132, 2, 100, DEF, 8, 0, {{0}}, 32, 100, 16},
  /* The smallest floor, 1, still leaves NCCL one step. */
  {"floor 1, g 8", 132, 2, 0, 1, 32, 64, 8, 0, {{0}}, 8, 124, 8},
  /* The ceiling, rounded down to g: max_headroom 20 -> 16; NCCL 4 x 3
   * <= 16, but the GPU's own cap is 20 / 2 / 3 -> 2. */
  {"ceiling 20 -> 16", 132, 2, 0, 2, 20, 64, 8, 1, {{8, 1, 3}}, 16, 116, 2},
  {"ceiling 30 -> 24", 132, 2, 0, 2, 30, 64, 8, 1, {{20, 1, 2}}, 24, 108,
   4},
  /* min_grid lowers the ceiling: 132 - 120 = 12 -> 8. */
  {"min_grid caps", 132, 2, 0, 2, 32, 120, 8, 1, {{8, 1, 1}}, 8, 124, 4},
  /* A ceiling of exactly one step; NCCL 2 x 3 <= 8, held to the GPU's
   * own cap (8 / 2 / 3 -> 1). */
  {"ceiling one step", 72, 2, 0, DEF, 8, 1, {{8, 1, 3}}, 8, 64, 1},
  /* More collectives than SMs in the partition: NCCL still gets one CTA. */
  {"K over comm", 132, 2, 0, DEF, 8, 4,
   {{64, 8, 64}, {64, 8, 64}, {64, 8, 64}, {64, 8, 64}}, 32, 100, 1},
  /* A ceiling under one step: no partition on this GPU. */
  {"ceiling under a step", 132, 2, 0, 2, 4, 64, 8, 0, {{0}}, 0, 0, 0},
  {"min_grid leaves under a step", 70, 2, 0, DEF, 8, 0, {{0}}, 0, 0, 0},
  /* ... where a finer step still fits. */
  {"ceiling 4, g 2", 132, 2, 0, 2, 4, 64, 2, 1, {{8, 1, 1}}, 4, 128, 2},
  /* A driver without green contexts. */
  {"no green contexts", 132, 2, 0, DEF, 0, 1, {{8, 1, 1}}, 0, 0, 0},
};

static void run_partition_case(const partition_case *c)
{
  hr_policy p = {c->min_headroom, c->max_headroom, c->min_grid, 1};
  hr_policy_input in = {c->sms, c->cluster, c->raised, c->n, c->fp, 0, NULL,
                        c->granularity};
  hr_budget b, lease;
  int k = 0, i, rc;

  memset(&b, 0xff, sizeof(b));
  if(hr__policy_budget(&p, &in, &b) != HR_OK)
    fail_msg("%s: policy refused valid input", c->what);
  if(b.partition_comm_sms != c->want_comm ||
     b.partition_nccl_max_ctas != c->want_max_ctas)
    fail_msg("%s: comm %d maxCTAs %d, want %d %d", c->what,
             b.partition_comm_sms, b.partition_nccl_max_ctas, c->want_comm,
             c->want_max_ctas);
  b.mode = HR_MODE_HEADROOM;
  rc = hr__policy_lease_budget(&b, HR_MODE_PARTITION, &lease);
  if(!c->want_comm) {
    /* All three 0, and a partition lease is refused. */
    assert_int_equal(b.partition_granularity, 0);
    assert_int_equal(b.partition_nccl_max_ctas, 0);
    assert_int_equal(rc, HR_EUNSUPPORTED);
    return;
  }
  assert_int_equal(rc, HR_OK);
  if(lease.grid != c->want_mega)
    fail_msg("%s: mega partition %d, want %d", c->what, lease.grid,
             c->want_mega);
  /* Invariants every partition keeps. */
  for(i = 0; i < c->n; i++)
    k += c->fp[i].concurrent;
  k = k ? k : 1;
  assert_int_equal(b.partition_granularity, c->granularity);
  assert_int_equal(b.partition_comm_sms % c->granularity, 0);
  assert_true(b.partition_comm_sms <= c->max_headroom);
  assert_true(c->sms - b.partition_comm_sms >= c->min_grid);
  assert_int_equal(b.partition_nccl_max_ctas &
                   (b.partition_nccl_max_ctas - 1), 0);
  assert_true(b.partition_nccl_max_ctas <= b.nccl_max_ctas);
  assert_true(b.partition_nccl_max_ctas == 1 ||
              b.partition_nccl_max_ctas * k <= b.partition_comm_sms);
  assert_int_equal(lease.mode, HR_MODE_PARTITION);
  assert_int_equal(lease.headroom, b.partition_comm_sms);
  assert_int_equal(lease.grid + lease.headroom, c->sms);
  assert_int_equal(lease.nccl_max_ctas, b.partition_nccl_max_ctas);
  assert_true(lease.nccl_min_ctas <= lease.nccl_max_ctas);
  assert_int_equal(lease.nccl_cga_cluster_size, 1);
  /* The headroom-mode numbers beside them are the table's above. */
  assert_int_equal(b.grid + b.headroom, c->sms);
}

static void test_partition_table(void **state)
{
  size_t i;
  (void)state;
  for(i = 0; i < sizeof(partition_cases) / sizeof(partition_cases[0]); i++)
    run_partition_case(&partition_cases[i]);
}

/* Whatever the cluster size, the comm partition is the same: inside a
 * green context no comm CTA can strand a cluster partner. Only the NCCL
 * cap can differ, since it never passes the GPU's own. */
static void test_partition_ignores_cluster(void **state)
{
  static const int clusters[] = { 1, 2, 4, 8 };
  hr_footprint fp = {5, 1, 2};
  hr_policy_input in = {132, 1, 0, 1, &fp, 0, NULL, 8};
  hr_policy p;
  hr_budget b;
  size_t i;
  (void)state;
  hr__policy_default(&p);
  for(i = 0; i < 4; i++) {
    in.cluster = clusters[i];
    assert_int_equal(hr__policy_budget(&p, &in, &b), HR_OK);
    assert_int_equal(b.partition_granularity, 8);
    assert_int_equal(b.partition_comm_sms, 16);
    /* The headroom does depend on it: 10 CTAs strand up to 10 x c. */
    assert_int_equal(b.headroom, 10 * clusters[i] > 32 ? 32
                                                       : 10 * clusters[i]);
  }
  /* A granularity out of range is refused like any bad input. */
  in.granularity = -8;
  assert_int_equal(hr__policy_budget(&p, &in, &b), HR_EINVAL);
  in.granularity = HR_MAX_SMS + 1;
  assert_int_equal(hr__policy_budget(&p, &in, &b), HR_EINVAL);
}

/* ---- calibration ------------------------------------------------------ */

/* docs/measurements.md §3's table as a calibration file would carry it:
 * the budget, then the smallest headroom with no deadlock. */
static const hr_calib_budget f3_table[] = {
  {0, 0, 6, 0.62, 3, 1},      /* default / default */
  {0, 1, 2, 0.64, 3, 1},      /* default / 1 */
  {8, 0, 6, 0.65, 3, 1},
  {8, 1, 2, 0.65, 3, 1},
  {4, 0, 6, 0.92, 3, 1},
  {4, 1, 2, 0.92, 3, 1},
  {2, 1, 2, 1.68, 3, 1},
  {1, 1, 2, 3.25, 3, 1},
  {16, 1, -1, 0.60, 3, 1},    /* none safe up to the largest tried */
};
#define F3_N ((int)(sizeof(f3_table) / sizeof(f3_table[0])))

typedef struct calib_case {
  const char *what;
  int sms, cluster, raised;
  int min_headroom, max_headroom, min_grid;
  int n;
  hr_footprint fp[4];
  int n_calib;                   /* 0: none, else F3_N */
  int want_headroom, want_grid, want_max_ctas;
  hr_budget_source want_source;
} calib_case;

static const calib_case calib_cases[] = {
  /* docs/measurements.md §3: cga 1 at maxCTAs 8 was safe at headroom 2. Two
   * collectives in flight make the cap 32 / 2 / 2 = 8: theory wants
   * 2 x 16 = 32 SMs, the calibration 2. */
  {"F3 8/1 calibrated", 132, 2, 0, DEF, 1, {{8, 1, 2}}, F3_N, 2, 130, 8,
   HR_SOURCE_CALIBRATED},
  {"F3 8/1 theory", 132, 2, 0, DEF, 1, {{8, 1, 2}}, 0, 32, 100, 8,
   HR_SOURCE_THEORY},
  /* Three collectives: cap 4, entry 4/1 -> 2. */
  {"F3 4/1 calibrated", 132, 2, 0, DEF, 1, {{4, 1, 3}}, F3_N, 2, 130, 4,
   HR_SOURCE_CALIBRATED},
  /* A cluster of 4: the safe headroom rounds up to one cluster. */
  {"rounds up to cluster 4", 132, 4, 0, DEF, 1, {{4, 1, 2}}, F3_N, 4, 128,
   4, HR_SOURCE_CALIBRATED},
  /* The floor and incidents still apply on top. */
  {"raised over calibration", 132, 2, 6, DEF, 1, {{8, 1, 2}}, F3_N, 8, 124,
   8, HR_SOURCE_CALIBRATED},
  {"floor over calibration", 132, 2, 0, 10, 32, 64, 1, {{8, 1, 2}}, F3_N, 10,
   122, 8, HR_SOURCE_CALIBRATED},
  /* The cap handed out (16 on an idle GPU) has no safe entry: theory. */
  {"cap 16 not safe in the file", 132, 2, 0, DEF, 0, {{0}}, F3_N, 2, 130, 16,
   HR_SOURCE_THEORY},
  /* A footprint outside the measured budget: NCCL's default CGA, or more
   * CTAs than the cap, was never measured at that headroom. */
  {"footprint with default cga", 132, 2, 0, DEF, 1, {{8, 0, 2}}, F3_N, 32,
   100, 8, HR_SOURCE_THEORY},
  {"footprint over the cap", 132, 2, 0, DEF, 2, {{8, 1, 1}, {16, 1, 1}},
   F3_N, 32, 100, 8, HR_SOURCE_THEORY},
  /* The ceiling still caps a large calibrated value (min_grid 126 -> 6). */
  {"ceiling over calibration", 132, 2, 0, 2, 32, 126, 1, {{1, 1, 1}}, F3_N,
   2, 130, 2, HR_SOURCE_CALIBRATED},
};

static void run_calib_case(const calib_case *c)
{
  hr_policy p = {c->min_headroom, c->max_headroom, c->min_grid, 1};
  hr_policy_input in = {c->sms, c->cluster, c->raised, c->n, c->fp,
                        c->n_calib, c->n_calib ? f3_table : NULL, 0};
  hr_budget_source src = HR_SOURCE_COUNT;
  hr_budget b;

  memset(&b, 0xff, sizeof(b));
  if(hr__policy_budget_src(&p, &in, &b, &src) != HR_OK)
    fail_msg("%s: policy refused valid input", c->what);
  if(b.headroom != c->want_headroom || b.grid != c->want_grid ||
     b.nccl_max_ctas != c->want_max_ctas || src != c->want_source)
    fail_msg("%s: headroom %d grid %d maxCTAs %d source %d, want %d %d %d %d",
             c->what, b.headroom, b.grid, b.nccl_max_ctas, (int)src,
             c->want_headroom, c->want_grid, c->want_max_ctas,
             (int)c->want_source);
  assert_int_equal(b.nccl_cga_cluster_size, 1);
}

static void test_calibration(void **state)
{
  size_t i;

  (void)state;
  for(i = 0; i < sizeof(calib_cases) / sizeof(calib_cases[0]); i++)
    run_calib_case(&calib_cases[i]);
}

/* A large calibrated headroom is held by the ceiling, and raising after a
 * timeout starts from the calibrated headroom, not theory's. */
static void test_calibration_ceiling_and_raise(void **state)
{
  static const hr_calib_budget big[] = {{8, 1, 40, 0.7, 3, 4}};
  hr_policy p = {2, 32, 64, 1};
  hr_footprint fp = {8, 1, 2};
  hr_policy_input in = {132, 2, 0, 1, &fp, 1, big, 0};
  hr_budget b;

  (void)state;
  assert_int_equal(hr__policy_budget(&p, &in, &b), HR_OK);
  assert_int_equal(b.headroom, 32);
  in.calib = f3_table;
  in.n_calib = F3_N;
  assert_int_equal(hr__policy_budget(&p, &in, &b), HR_OK);
  assert_int_equal(b.headroom, 2);
  /* One cluster above 2: raised becomes 4 - min_headroom = 2. */
  assert_int_equal(hr__policy_raise(&p, &in), 2);
  /* Bad calibration input is refused like any bad input. */
  in.calib = NULL;
  assert_int_equal(hr__policy_budget(&p, &in, &b), HR_EINVAL);
  in.n_calib = -1;
  assert_int_equal(hr__policy_budget(&p, &in, &b), HR_EINVAL);
  assert_null(hr__policy_calib_find(&in, 8, 1));
}

static void test_default_policy(void **state)
{
  hr_policy p;
  char why[128];
  (void)state;
  hr__policy_default(&p);
  assert_int_equal(p.min_headroom, 2);
  assert_int_equal(p.max_headroom, 32);
  assert_int_equal(p.min_grid, 64);
  assert_int_equal(p.incident_raise, 1);
  assert_int_equal(hr__policy_validate(&p, why, sizeof(why)), HR_OK);
}

static void test_validate_rejects(void **state)
{
  static const struct {
    hr_policy p;
    const char *word;           /* the message names the field */
  } bad[] = {
    {{-1, 32, 64, 1}, "min_headroom"},
    {{0, 32, 64, 1}, "min_headroom must be 1"},
    {{2, 2000, 64, 1}, "max_headroom"},
    {{40, 32, 64, 1}, "exceed"},
    {{2, 32, 0, 1}, "min_grid"},
    {{2, 32, 64, 7}, "incident_raise"},
  };
  char why[128];
  size_t i;
  (void)state;
  for(i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    why[0] = '\0';
    assert_int_equal(hr__policy_validate(&bad[i].p, why, sizeof(why)),
                     HR_EINVAL);
    assert_non_null(strstr(why, bad[i].word));
  }
  assert_int_equal(hr__policy_validate(NULL, why, sizeof(why)), HR_EINVAL);
}

/* ---- the policy against the topology ---------------------------------- */

static hr_topology topo_of(int n, const int *sms)
{
  hr_topology t;
  int g;

  memset(&t, 0, sizeof(t));
  t.n_gpus = n;
  for(g = 0; g < n; g++) {
    t.gpus[g].index = g;
    t.gpus[g].sms = sms[g];
  }
  return t;
}

/* Each refusal names the key, its value and the limit; the limit itself
 * passes. */
static void test_validate_for(void **state)
{
  static const int h200[8] = {132, 132, 132, 132, 132, 132, 132, 132};
  static const int mixed[2] = {132, 114};
  static const struct {
    hr_policy p;
    int mixed;
    unsigned blame;               /* 0: valid */
    const char *words;            /* key and value, then the limit */
    const char *limit;
  } vcases[] = {
    {{2, 32, 64, 1}, 0, 0, NULL, NULL},
    /* The reported attack: headroom 0, grid 132 on every GPU. */
    {{2, 32, 200, 1}, 0, HR_POLICY_MIN_GRID, "min_grid 200", "at most 124"},
    {{2, 32, 124, 1}, 0, 0, NULL, NULL},    /* ceiling 8: one cluster of 8 */
    {{2, 32, 125, 1}, 0, HR_POLICY_MIN_GRID, "min_grid 125", "at most 124"},
    {{9, 32, 116, 1}, 0, 0, NULL, NULL},    /* floor 16, ceiling 16 */
    {{9, 32, 117, 1}, 0, HR_POLICY_MIN_GRID, "min_grid 117", "at most 116"},
    {{2, 7, 64, 1}, 0, HR_POLICY_MAX_HEADROOM, "max_headroom 7",
     "at least 8"},
    {{2, 8, 64, 1}, 0, 0, NULL, NULL},
    {{0, 32, 64, 1}, 0, HR_POLICY_MIN_HEADROOM, "min_headroom", "1..1024"},
    /* A smaller GPU decides: 114 - 110 = 4 SMs, under a cluster of 8. */
    {{2, 32, 110, 1}, 1, HR_POLICY_MIN_GRID, "gpu 1 (114 SMs)",
     "at most 106"},
    {{2, 32, 120, 1}, 0, 0, NULL, NULL},
  };
  char why[256];
  unsigned blame;
  size_t i;
  hr_topology t;

  (void)state;
  for(i = 0; i < sizeof(vcases) / sizeof(vcases[0]); i++) {
    t = vcases[i].mixed ? topo_of(2, mixed) : topo_of(8, h200);
    why[0] = '\0';
    blame = 99;
    if(!vcases[i].blame) {
      if(hr__policy_validate_for(&vcases[i].p, &t, why, sizeof(why), &blame))
        fail_msg("case %zu refused: %s", i, why);
      assert_int_equal(blame, 0);
      continue;
    }
    assert_int_equal(hr__policy_validate_for(&vcases[i].p, &t, why,
                                             sizeof(why), &blame), HR_EINVAL);
    assert_int_equal(blame, vcases[i].blame);
    if(!strstr(why, vcases[i].words) || !strstr(why, vcases[i].limit))
      fail_msg("case %zu: '%s' lacks '%s' or '%s'", i, why, vcases[i].words,
               vcases[i].limit);
  }
  t = topo_of(8, h200);
  assert_int_equal(hr__policy_validate_for(NULL, &t, why, sizeof(why), NULL),
                   HR_EINVAL);
  assert_int_equal(hr__policy_validate_for(&vcases[0].p, NULL, why,
                                           sizeof(why), NULL), HR_EINVAL);
}

/* The condition is exact: over a grid of policies and GPU sizes, a policy
 * passes if and only if every cluster size, every raise and every load
 * gets a headroom of at least its floor (so never 0, never the full grid),
 * by the budget function itself. */
static void test_validate_for_exact(void **state)
{
  static const int sizes[] = {132, 114, 78, 16, 9};
  static const int grids[] = {1, 8, 60, 64, 100, 106, 110, 120, 124, 125,
                              128, 131, 132};
  static const int clusters[] = {1, 2, 4, 8};
  static const hr_footprint loads[] = {{1, 1, 1}, {64, 8, 64}};
  hr_policy p;
  hr_topology t;
  hr_budget b;
  int si, mh, xh, gi, ci, li, raised;

  (void)state;
  for(si = 0; si < (int)(sizeof(sizes) / sizeof(sizes[0])); si++) {
    t = topo_of(1, &sizes[si]);
    for(mh = 1; mh <= 12; mh++)
      for(xh = mh; xh <= 40; xh++)
        for(gi = 0; gi < (int)(sizeof(grids) / sizeof(grids[0])); gi++) {
          int ok = 1, valid;
          p.min_headroom = mh;
          p.max_headroom = xh;
          p.min_grid = grids[gi];
          p.incident_raise = 1;
          valid = !hr__policy_validate_for(&p, &t, NULL, 0, NULL);
          for(ci = 0; ci < 4; ci++)
            for(li = -1; li < 2; li++)
              for(raised = 0; raised <= 64; raised += 16) {
                int c = clusters[ci];
                hr_policy_input in = {sizes[si], c, raised, li < 0 ? 0 : 1,
                                      li < 0 ? NULL : &loads[li], 0, NULL,
                                      0};
                assert_int_equal(hr__policy_budget(&p, &in, &b), HR_OK);
                if(b.headroom < (mh + c - 1) / c * c || b.headroom < 1 ||
                   b.grid >= sizes[si])
                  ok = 0;
              }
          if(ok != valid)
            fail_msg("sms %d min_headroom %d max_headroom %d min_grid %d: "
                     "validate says %s, budgets say %s", sizes[si], mh, xh,
                     grids[gi], valid ? "valid" : "invalid",
                     ok ? "safe" : "unsafe");
        }
  }
}

static void test_bad_input(void **state)
{
  hr_policy p;
  hr_footprint fp = {1, 1, 1};
  hr_budget b;
  hr_policy_input in = {132, 2, 0, 0, NULL, 0, NULL, 0};
  (void)state;
  hr__policy_default(&p);

  assert_int_equal(hr__policy_budget(&p, &in, NULL), HR_EINVAL);
  assert_int_equal(hr__policy_budget(&p, NULL, &b), HR_EINVAL);
  assert_int_equal(hr__policy_budget(NULL, &in, &b), HR_EINVAL);
  in.sms = 0;
  assert_int_equal(hr__policy_budget(&p, &in, &b), HR_EINVAL);
  in.sms = 132;
  in.cluster = 0;
  assert_int_equal(hr__policy_budget(&p, &in, &b), HR_EINVAL);
  in.cluster = 2;
  in.raised = -2;
  assert_int_equal(hr__policy_budget(&p, &in, &b), HR_EINVAL);
  in.raised = 0;
  in.n_footprints = 1;          /* count without the array */
  assert_int_equal(hr__policy_budget(&p, &in, &b), HR_EINVAL);
  in.footprints = &fp;
  assert_int_equal(hr__policy_budget(&p, &in, &b), HR_OK);
  p.min_headroom = 99;          /* invalid policy: floor above ceiling */
  assert_int_equal(hr__policy_budget(&p, &in, &b), HR_EINVAL);
}

/* A barrier timeout lifts the headroom in force by one cluster. */
static void test_raise(void **state)
{
  hr_policy p;
  hr_footprint fp = {3, 1, 1};
  hr_policy_input in = {132, 2, 0, 0, NULL, 0, NULL, 0};
  hr_budget b;
  (void)state;
  hr__policy_default(&p);

  /* From the floor: 2 -> 4 -> 6. */
  in.raised = hr__policy_raise(&p, &in);
  assert_int_equal(in.raised, 2);
  assert_int_equal(hr__policy_budget(&p, &in, &b), HR_OK);
  assert_int_equal(b.headroom, 4);
  in.raised = hr__policy_raise(&p, &in);
  assert_int_equal(hr__policy_budget(&p, &in, &b), HR_OK);
  assert_int_equal(b.headroom, 6);

  /* When footprints decided the headroom (6), the raise goes above it. */
  in.raised = 0;
  in.n_footprints = 1;
  in.footprints = &fp;
  in.raised = hr__policy_raise(&p, &in);
  assert_int_equal(hr__policy_budget(&p, &in, &b), HR_OK);
  assert_int_equal(b.headroom, 8);

  /* At the ceiling it stops growing. */
  in.raised = 30;
  assert_int_equal(hr__policy_raise(&p, &in), 30);
  in.raised = 29;
  assert_int_equal(hr__policy_raise(&p, &in), 30);

  /* Switched off: unchanged. */
  p.incident_raise = 0;
  in.raised = 4;
  assert_int_equal(hr__policy_raise(&p, &in), 4);
}

static void test_comm_ctas(void **state)
{
  hr_footprint fp[2] = {{8, 1, 3}, {2, 2, 2}};
  hr_policy_input in = {132, 2, 0, 2, fp, 0, NULL, 0};
  (void)state;
  assert_int_equal(hr__policy_comm_ctas(&in), 28);
  in.n_footprints = 0;
  assert_int_equal(hr__policy_comm_ctas(&in), 0);
}

/* The budget each lease mode gets: the GPU's for headroom and cooperative
 * leases; headroom 0 and the whole GPU for an agnostic one, with the NCCL
 * cap the footprints on the GPU were sized for. */
static void test_lease_budget(void **state)
{
  /* docs/measurements.md §3's shape: 3 all-reduces of 8 CTAs beside the
   * mega kernel. */
  hr_footprint fp = {8, 1, 3};
  hr_policy_input in = {132, 2, 0, 1, &fp, 0, NULL, 0};
  hr_budget gpu, b;
  hr_policy p;
  int m;
  (void)state;
  hr__policy_default(&p);
  assert_int_equal(hr__policy_budget(&p, &in, &gpu), HR_OK);
  gpu.gpu = 3;
  gpu.epoch = 7;
  gpu.mode = HR_MODE_HEADROOM;
  assert_int_equal(gpu.headroom, 32);
  assert_int_equal(gpu.grid, 100);

  for(m = 0; m < HR_MODE_COUNT; m++) {
    if(m == HR_MODE_PARTITION)
      continue;                 /* below, and in test_partition_table */
    memset(&b, 0xff, sizeof(b));
    assert_int_equal(hr__policy_lease_budget(&gpu, (hr_mode)m, &b), HR_OK);
    assert_int_equal(b.mode, m);
    assert_int_equal(b.gpu, 3);
    assert_int_equal(b.epoch, 7);
    assert_int_equal(b.sms, 132);
    assert_int_equal(b.cluster, gpu.cluster);
    /* Whatever the mode, the communicators keep to the same cap: the
     * headroom of the other leases on the GPU depends on it. */
    assert_int_equal(b.nccl_min_ctas, gpu.nccl_min_ctas);
    assert_int_equal(b.nccl_max_ctas, 4);
    assert_int_equal(b.nccl_cga_cluster_size, 1);
    assert_int_equal(b.nccl_nvls_enable, 0);
    assert_int_equal(b.degraded, 0);
    assert_int_equal(b.grid + b.headroom, 132);
    if(m == HR_MODE_AGNOSTIC) {
      assert_int_equal(b.headroom, 0);
      assert_int_equal(b.grid, 132);
    } else {
      assert_int_equal(b.headroom, 32);
      assert_int_equal(b.grid, 100);
    }
  }
  /* The GPU's budget itself is left alone. */
  assert_int_equal(gpu.mode, HR_MODE_HEADROOM);
  assert_int_equal(gpu.grid, 100);

  /* No green contexts (granularity 0): a partition lease is refused and
   * keeps the headroom-mode numbers. */
  assert_int_equal(hr__policy_lease_budget(&gpu, HR_MODE_PARTITION, &b),
                   HR_EUNSUPPORTED);
  assert_int_equal(b.mode, HR_MODE_PARTITION);
  assert_int_equal(b.headroom, 32);
  assert_int_equal(b.grid, 100);
  /* Steps of 8: NCCL in 24 SMs, the mega kernel in the other 108. */
  in.granularity = 8;
  assert_int_equal(hr__policy_budget(&p, &in, &gpu), HR_OK);
  gpu.epoch = 7;
  assert_int_equal(hr__policy_lease_budget(&gpu, HR_MODE_PARTITION, &b),
                   HR_OK);
  assert_int_equal(b.mode, HR_MODE_PARTITION);
  assert_int_equal(b.epoch, 7);
  assert_int_equal(b.headroom, 24);
  assert_int_equal(b.grid, 108);
  assert_int_equal(b.nccl_max_ctas, 4);
  assert_int_equal(b.nccl_cga_cluster_size, 1);

  assert_int_equal(hr__policy_lease_budget(&gpu, HR_MODE_COUNT, &b),
                   HR_EINVAL);
  assert_int_equal(hr__policy_lease_budget(&gpu, (hr_mode)-1, &b),
                   HR_EINVAL);
  assert_int_equal(hr__policy_lease_budget(NULL, HR_MODE_AGNOSTIC, &b),
                   HR_EINVAL);
  assert_int_equal(hr__policy_lease_budget(&gpu, HR_MODE_AGNOSTIC, NULL),
                   HR_EINVAL);
}

/* The budget each lease mode gets from its GPU's budget. */
static void test_budget_for_mode(void **state)
{
  hr_budget gpu, b;

  (void)state;
  memset(&gpu, 0, sizeof(gpu));
  gpu.gpu = 1;
  gpu.epoch = 4000000000u;
  gpu.sms = 132;
  gpu.cluster = 2;
  gpu.headroom = 16;
  gpu.grid = 116;
  gpu.nccl_min_ctas = 1;
  gpu.nccl_max_ctas = 8;
  gpu.nccl_cga_cluster_size = 1;
  gpu.degraded = 1;
  gpu.partition_granularity = 8;
  gpu.partition_comm_sms = 16;
  gpu.partition_nccl_max_ctas = 8;
  gpu.mode = HR_MODE_HEADROOM;
  b = gpu;
  hr__policy_for_mode(&b, HR_MODE_COOPERATIVE);
  assert_int_equal(b.mode, HR_MODE_COOPERATIVE);
  assert_int_equal(b.headroom, 16);
  assert_int_equal(b.grid, 116);
  b = gpu;
  hr__policy_for_mode(&b, HR_MODE_AGNOSTIC);
  assert_int_equal(b.mode, HR_MODE_AGNOSTIC);
  assert_int_equal(b.headroom, 0);
  assert_int_equal(b.grid, 132);
  /* What the other leases rely on stays. */
  assert_int_equal(b.epoch, gpu.epoch);
  assert_int_equal(b.cluster, gpu.cluster);
  assert_int_equal(b.nccl_min_ctas, gpu.nccl_min_ctas);
  assert_int_equal(b.nccl_max_ctas, gpu.nccl_max_ctas);
  assert_int_equal(b.nccl_cga_cluster_size, gpu.nccl_cga_cluster_size);
  assert_int_equal(b.nccl_nvls_enable, gpu.nccl_nvls_enable);
  assert_int_equal(b.degraded, gpu.degraded);
  /* Applied again it changes nothing more. */
  hr__policy_for_mode(&b, HR_MODE_AGNOSTIC);
  assert_int_equal(b.grid, 132);
  assert_int_equal(b.headroom, 0);

  /* Partition: the comm partition is the headroom, NCCL gets the cap
   * inside it (minCTAs clamped under it) and a CGA size of 1. */
  gpu.partition_granularity = 8;
  gpu.partition_comm_sms = 24;
  gpu.partition_nccl_max_ctas = 4;
  gpu.nccl_min_ctas = 6;
  gpu.nccl_cga_cluster_size = 2;
  b = gpu;
  assert_int_equal(hr__policy_for_mode(&b, HR_MODE_PARTITION), HR_OK);
  assert_int_equal(b.mode, HR_MODE_PARTITION);
  assert_int_equal(b.headroom, 24);
  assert_int_equal(b.grid, 108);
  assert_int_equal(b.nccl_max_ctas, 4);
  assert_int_equal(b.nccl_min_ctas, 4);
  assert_int_equal(b.nccl_cga_cluster_size, 1);
  assert_int_equal(b.epoch, gpu.epoch);
  assert_int_equal(b.partition_comm_sms, 24);
  /* Applied again it changes nothing more. */
  assert_int_equal(hr__policy_for_mode(&b, HR_MODE_PARTITION), HR_OK);
  assert_int_equal(b.grid, 108);
  assert_int_equal(b.nccl_min_ctas, 4);
  /* A minCTAs already under the cap stays. */
  b = gpu;
  b.nccl_min_ctas = 1;
  assert_int_equal(hr__policy_for_mode(&b, HR_MODE_PARTITION), HR_OK);
  assert_int_equal(b.nccl_min_ctas, 1);

  /* A GPU that cannot be split: unsupported, and the headroom-mode
   * numbers stay, safe for an ordinary launch. */
  b = gpu;
  b.partition_granularity = 0;
  assert_int_equal(hr__policy_for_mode(&b, HR_MODE_PARTITION),
                   HR_EUNSUPPORTED);
  assert_int_equal(b.mode, HR_MODE_PARTITION);
  assert_int_equal(b.headroom, gpu.headroom);
  assert_int_equal(b.grid, gpu.grid);
  assert_int_equal(b.nccl_max_ctas, gpu.nccl_max_ctas);
  /* Nor is a comm partition of no SMs, or of every SM, a partition. */
  b = gpu;
  b.partition_comm_sms = 0;
  assert_int_equal(hr__policy_for_mode(&b, HR_MODE_PARTITION),
                   HR_EUNSUPPORTED);
  b = gpu;
  b.partition_comm_sms = b.sms;
  assert_int_equal(hr__policy_for_mode(&b, HR_MODE_PARTITION),
                   HR_EUNSUPPORTED);
  assert_int_equal(b.grid, gpu.grid);
  /* The other modes never refuse. */
  b = gpu;
  b.partition_granularity = 0;
  assert_int_equal(hr__policy_for_mode(&b, HR_MODE_HEADROOM), HR_OK);
  assert_int_equal(hr__policy_for_mode(&b, HR_MODE_AGNOSTIC), HR_OK);
}

int main(void)
{
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_table),
    cmocka_unit_test(test_partition_table),
    cmocka_unit_test(test_partition_ignores_cluster),
    cmocka_unit_test(test_calibration),
    cmocka_unit_test(test_calibration_ceiling_and_raise),
    cmocka_unit_test(test_default_policy),
    cmocka_unit_test(test_validate_rejects),
    cmocka_unit_test(test_validate_for),
    cmocka_unit_test(test_validate_for_exact),
    cmocka_unit_test(test_bad_input),
    cmocka_unit_test(test_raise),
    cmocka_unit_test(test_comm_ctas),
    cmocka_unit_test(test_lease_budget),
    cmocka_unit_test(test_budget_for_mode),
  };
  return cmocka_run_group_tests_name("policy", tests, NULL, NULL);
}
