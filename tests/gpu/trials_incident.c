/*
 * trials_incident.c: test 4, an incident raises the headroom.
 *
 * Rank 0, under a headroom-mode lease of its own: a hog holds
 * (headroom + 4) SMs, so the lease's grid cannot be resident; the forward
 * times out, hr_moe_sync returns HR_EBARRIER_TIMEOUT and reports it. Then
 * the checks: the daemon pushed a new budget (hr_lease_wait_change sees
 * the epoch move) with a larger headroom and a smaller grid; headroomctl
 * shows GPU 0's raised headroom and the incident, GPU 1 untouched; the
 * next launch (the hog still there) was made with the new grid (its
 * failure detail says so); once the hog is released, a launch under the
 * lease completes with y_ref bitwise. Rank 1 holds a lease on GPU 1 all
 * along and checks that its budget never moved.
 */
#include "trials.h"

#include <string.h>
#include <unistd.h>

#include <cuda_runtime.h>

#include "trials_daemon.h"
#include "trials_hog.h"

#define INCIDENT_TIMEOUT_MS 500
#define INCIDENT_TI 1           /* T = 128 */

static int checks_failed;

#define CHECK(r, cond, ...)                                                    \
  do {                                                                         \
    if(!(cond)) {                                                              \
      char m_[300];                                                            \
      snprintf(m_, sizeof(m_), __VA_ARGS__);                                   \
      tr_log(r, "FAIL test 4: %s (%s)", m_, #cond);                            \
      checks_failed++;                                                         \
    }                                                                          \
  } while(0)

/* One forward under the lease on the rank's stream; its hr_moe_sync code
 * and, when it failed, the failure. */
static int forward(tr_rank *r, const hr_lease *l, int timeout_ms,
                   hr_moe_failure *f, double *ms)
{
  hr_moe_args a = tr_args(r, INCIDENT_TI, timeout_ms);
  double t0 = gt_now_ms();
  int rc;

  memset(f, 0, sizeof(*f));
  cudaMemsetAsync(r->g.y, 0xff, (size_t)a.tokens * r->g.s.H * 2,
                  (cudaStream_t)r->g.stream);
  rc = hr_moe_forward(r->g.m, l, &a, r->g.stream);
  if(!rc)
    rc = hr_moe_sync(r->g.m);
  *ms = gt_now_ms() - t0;
  if(rc)
    hr_moe_last_failure(r->g.m, f);
  return rc;
}

static void metrics_line(tr_rank *r, const char *when, const tr_gpu_metrics *g0,
                         const tr_gpu_metrics *g1)
{
  tr_log(r, "headroomctl metrics %s: GPU 0 headroom %d grid %d epoch %d "
         "raised %d barrier_timeout %d; GPU 1 headroom %d grid %d raised %d "
         "barrier_timeout %d", when, g0->headroom, g0->grid, g0->epoch,
         g0->raised, g0->barrier_timeouts, g1->headroom, g1->grid, g1->raised,
         g1->barrier_timeouts);
}

static int metrics(tr_rank *r, tr_gpu_metrics *g0, tr_gpu_metrics *g1)
{
  char why[300];
  if(tr_daemon_gpu_metrics(r->o.headroomctl, r->o.socket, 0, g0, why,
                           sizeof(why)) ||
     tr_daemon_gpu_metrics(r->o.headroomctl, r->o.socket, 1, g1, why,
                           sizeof(why))) {
    tr_log(r, "FAIL test 4: %s", why);
    checks_failed++;
    return -1;
  }
  return 0;
}

/* Rank 0's part; fills the numbers of the PASS line. */
typedef struct incident_numbers {
  int h0, h1, h2, g0, g1, g2, hog;
  double push_ms;
  int grid_second;
} incident_numbers;

static void rank0(tr_rank *r, const hr_lease *l, incident_numbers *nb)
{
  tr_gpu_metrics m0[2], m1[2];
  hr_moe_failure f;
  hr_budget b0, b1, b2;
  tr_hog hog;
  char why[300];
  double ms, t0;
  int rc;

  hr_lease_budget(l, &b0);
  nb->h0 = b0.headroom;
  nb->g0 = b0.grid;
  metrics(r, &m0[0], &m0[1]);
  metrics_line(r, "before", &m0[0], &m0[1]);

  /* The lease's grid runs on the idle GPU. */
  rc = forward(r, l, 10000, &f, &ms);
  CHECK(r, rc == HR_OK, "a launch under the lease on the idle GPU: %s",
        hr_strerror(rc));
  CHECK(r, rc || tr_output_matches(r, INCIDENT_TI, r->g.stream),
        "y under the lease (grid %d) is not y_ref", b0.grid);

  nb->hog = b0.headroom + 4;
  if(tr_hog_start(&hog, nb->hog, 20000, why, sizeof(why))) {
    CHECK(r, 0, "%s", why);
    tr_hog_release(&hog);
    return;
  }
  tr_log(r, "lease: headroom %d, grid %d, epoch %u; a hog now holds %d SMs",
         b0.headroom, b0.grid, b0.epoch, nb->hog);

  /* 1. The forced timeout, reported by hr_moe_sync. */
  rc = forward(r, l, INCIDENT_TIMEOUT_MS, &f, &ms);
  tr_log(r, "launch 1 (grid %d) beside the hog: %s after %.0f ms (barrier %d, "
         "%d of %d arrived, grid %d); hr_report: %s", b0.grid,
         hr_strerror(rc), ms, f.detail.barrier, f.detail.arrived,
         f.detail.expected, f.detail.grid, hr_strerror(f.reported));
  CHECK(r, rc == HR_EBARRIER_TIMEOUT, "launch 1 returned %s", hr_strerror(rc));
  CHECK(r, f.detail.grid == b0.grid, "launch 1's grid %d, the lease's %d",
        f.detail.grid, b0.grid);
  CHECK(r, f.reported == HR_OK, "the incident was not reported: %s",
        hr_strerror(f.reported));

  /* 2. The daemon raised GPU 0's headroom and pushed it. */
  t0 = gt_now_ms();
  rc = hr_lease_wait_change(l, b0.epoch, 5000);
  nb->push_ms = gt_now_ms() - t0;
  hr_lease_budget(l, &b1);
  nb->h1 = b1.headroom;
  nb->g1 = b1.grid;
  tr_log(r, "pushed: %s; epoch %u -> %u, headroom %d -> %d, grid %d -> %d "
         "(%.1f ms after hr_moe_sync returned)", hr_strerror(rc), b0.epoch,
         b1.epoch, b0.headroom, b1.headroom, b0.grid, b1.grid, nb->push_ms);
  CHECK(r, rc == HR_OK, "no new budget within 5 s: %s", hr_strerror(rc));
  CHECK(r, b1.headroom > b0.headroom && b1.grid < b0.grid,
        "headroom %d -> %d, grid %d -> %d", b0.headroom, b1.headroom, b0.grid,
        b1.grid);
  if(metrics(r, &m1[0], &m1[1]) == 0) {
    metrics_line(r, "after", &m1[0], &m1[1]);
    CHECK(r, m1[0].headroom == b1.headroom && m1[0].grid == b1.grid,
          "headroomctl: GPU 0 headroom %d grid %d, the lease %d %d",
          m1[0].headroom, m1[0].grid, b1.headroom, b1.grid);
    CHECK(r, m1[0].raised > m0[0].raised, "headroomctl: GPU 0 raised %d -> %d",
          m0[0].raised, m1[0].raised);
    CHECK(r, m1[0].barrier_timeouts == m0[0].barrier_timeouts + 1,
          "headroomctl: GPU 0 barrier timeouts %d -> %d",
          m0[0].barrier_timeouts, m1[0].barrier_timeouts);
    CHECK(r, m1[1].headroom == m0[1].headroom && m1[1].raised == m0[1].raised &&
          m1[1].barrier_timeouts == m0[1].barrier_timeouts,
          "headroomctl: GPU 1 moved (headroom %d -> %d, raised %d -> %d)",
          m0[1].headroom, m1[1].headroom, m0[1].raised, m1[1].raised);
  }

  /* 3. The next launch uses the new grid: beside the same hog (more SMs
   * than the new headroom) it fails again, and its detail says with
   * which grid. */
  CHECK(r, b1.headroom < nb->hog, "the raise (%d) already covers the hog "
        "(%d SMs): the next launch cannot show its grid", b1.headroom, nb->hog);
  rc = forward(r, l, INCIDENT_TIMEOUT_MS, &f, &ms);
  nb->grid_second = f.detail.grid;
  tr_log(r, "launch 2 beside the same hog: %s after %.0f ms with grid %d "
         "(the lease's grid %d)", hr_strerror(rc), ms, f.detail.grid, b1.grid);
  CHECK(r, rc == HR_EBARRIER_TIMEOUT, "launch 2 returned %s", hr_strerror(rc));
  CHECK(r, f.detail.grid == b1.grid, "launch 2 used grid %d, not the new %d",
        f.detail.grid, b1.grid);
  hr_lease_wait_change(l, b1.epoch, 5000);

  /* 4. Without the hog, the lease's grid completes and is right. */
  tr_hog_release(&hog);
  hr_lease_budget(l, &b2);
  nb->h2 = b2.headroom;
  nb->g2 = b2.grid;
  rc = forward(r, l, 10000, &f, &ms);
  tr_log(r, "hog released; launch 3 with grid %d (headroom %d): %s in %.1f ms",
         b2.grid, b2.headroom, hr_strerror(rc), ms);
  CHECK(r, rc == HR_OK, "launch 3 returned %s", hr_strerror(rc));
  CHECK(r, rc || tr_output_matches(r, INCIDENT_TI, r->g.stream),
        "y of launch 3 (grid %d) is not y_ref", b2.grid);
}

int tr_test_incident(tr_rank *r)
{
  incident_numbers nb;
  hr_lease *l = NULL;
  hr_budget b, after;
  double mine[9], all[18];
  char why[300] = "";
  int ok, rc, passed = 0;

  memset(&nb, 0, sizeof(nb));
  memset(&b, 0, sizeof(b));
  memset(&after, 0, sizeof(after));
  checks_failed = 0;
  if(r->o.no_gpu) {
    tr_say(r, "SKIP test4 incident: --no-gpu");
    return 1;
  }
  tr_watch(r, "test 4 (incident)", 120);
  rc = hr_lease_acquire(r->client, r->rank, r->o.cluster, HR_MODE_HEADROOM, &l);
  if(rc) {
    l = NULL;
    snprintf(why, sizeof(why), "hr_lease_acquire: %s", hr_strerror(rc));
  } else if((rc = tr_lease_settle(l)) || (rc = hr_lease_budget(l, &b))) {
    snprintf(why, sizeof(why), "the lease's budget: %s", hr_strerror(rc));
  }
  ok = rc == HR_OK;
  if(!ok)
    tr_log(r, "test 4: %s", why);
  if(!tr_agree(r, "incident.lease", ok)) {
    tr_say(r, "FAIL test4 incident: no lease");
    goto out;
  }

  if(r->rank == 0)
    rank0(r, l, &nb);
  tr_barrier(r, "incident.done");
  hr_lease_budget(l, &after);
  if(r->rank == 1) {
    tr_log(r, "GPU 1 lease: epoch %u -> %u, headroom %d -> %d", b.epoch,
           after.epoch, b.headroom, after.headroom);
    CHECK(r, after.epoch == b.epoch && after.headroom == b.headroom,
          "GPU 1's budget moved with GPU 0's incident");
  }

  mine[0] = checks_failed;
  mine[1] = nb.h0;
  mine[2] = nb.h1;
  mine[3] = nb.h2;
  mine[4] = nb.g0;
  mine[5] = nb.g1;
  mine[6] = nb.grid_second;
  mine[7] = nb.push_ms;
  mine[8] = nb.hog;
  tr_gather(r, "incident.results", mine, 9, all);
  passed = all[0] == 0 && all[9] == 0;
  tr_say(r, "%s test4 incident: GPU 0 headroom %d -> %d (grid %d -> %d) "
         "after a forced barrier timeout beside a hog on %d SMs, pushed in "
         "%.1f ms, shown by headroomctl; the next launch used grid %d; after "
         "a second timeout headroom %d, and the released GPU ran the lease's "
         "grid with y_ref bitwise; GPU 1 %s (%d failed checks)",
         tr_verdict(r, passed), (int)all[1], (int)all[2], (int)all[4],
         (int)all[5], (int)all[8], all[7], (int)all[6], (int)all[3],
         all[9] == 0 ? "unchanged" : "CHANGED", (int)(all[0] + all[9]));

out:
  alarm(0);
  if(l)
    hr_lease_release(l);
  return passed;
}
