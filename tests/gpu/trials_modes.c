/*
 * trials_modes.c: tests 2 and 3, the randomized trials under a lease.
 *
 * Test 2 (headroom mode): each rank leases its GPU, registers the
 * footprints of its three communicators, builds them from the lease's
 * ncclConfig_t, and runs the trials with hr_moe_forward on an ordinary
 * stream. Test 3 (partition mode): the same with a partition lease;
 * collectives on streams of the comm partition, the mega kernel on the
 * mega partition's stream. Both pass when no launch timed out or failed
 * and every y is y_ref bitwise.
 *
 * The footprints and the NCCL cap depend on each other: the cap the
 * daemon hands out shrinks as collectives in flight are registered, and
 * the footprint must say the CTAs the communicators will really use. So
 * the footprints are registered with the cap the lease gives, and again
 * with the new cap until the two agree (the cap depends on how many
 * collectives are in flight, not on their CTAs, so the second round
 * holds).
 */
#include "trials.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cuda_runtime.h>


typedef struct mode_run {
  hr_mode mode;
  const char *name;             /* "headroom", "partition" */
  int test;                     /* 2, 3 */
  hr_lease *lease;
  hr_comm *comm[TR_NCOMMS];
  int ctas;                     /* registered per footprint */
  hr_budget b;
  hr_partition *p;
  void *streams[TR_NCOMMS];
  void *mega_stream;
  tr_nccl_set set;
  int have_set;
} mode_run;

static void footprints_drop(mode_run *m)
{
  int c;
  for(c = 0; c < TR_NCOMMS; c++) {
    if(m->comm[c])
      hr_comm_unregister(m->comm[c]);
    m->comm[c] = NULL;
  }
}

static int lease_take(tr_rank *r, mode_run *m, char *why, size_t n)
{
  char name[64];
  int rc, c, round, cap;

  rc = hr_lease_acquire(r->client, r->rank, r->o.cluster, m->mode, &m->lease);
  if(rc) {
    m->lease = NULL;
    snprintf(why, n, "hr_lease_acquire(GPU %d, cluster %d, %s): %s", r->rank,
             r->o.cluster, m->name, hr_strerror(rc));
    return -1;
  }
  if((rc = tr_lease_settle(m->lease)) || (rc = hr_lease_budget(m->lease, &m->b))) {
    snprintf(why, n, "the lease's budget: %s", hr_strerror(rc));
    return -1;
  }
  if(m->b.degraded) {
    snprintf(why, n, "the lease is degraded (no daemon)");
    return -1;
  }
  cap = m->b.nccl_max_ctas;
  for(round = 0; round < 4; round++) {
    for(c = 0; c < TR_NCOMMS; c++) {
      snprintf(name, sizeof(name), "trials-%s-%d", m->name, c);
      rc = hr_comm_register(r->client, r->rank, name, cap, 1, 1, &m->comm[c]);
      if(rc) {
        m->comm[c] = NULL;
        snprintf(why, n, "hr_comm_register(%d CTAs): %s", cap, hr_strerror(rc));
        return -1;
      }
    }
    m->ctas = cap;
    if((rc = tr_lease_settle(m->lease)) ||
       (rc = hr_lease_budget(m->lease, &m->b))) {
      snprintf(why, n, "the lease's budget: %s", hr_strerror(rc));
      return -1;
    }
    if(m->b.nccl_max_ctas == cap)
      return 0;
    footprints_drop(m);
    cap = m->b.nccl_max_ctas;
    if(cap < 1) {
      snprintf(why, n, "the budget gives NCCL %d CTAs", cap);
      return -1;
    }
  }
  snprintf(why, n, "the NCCL cap did not settle (last %d, registered %d)",
           m->b.nccl_max_ctas, m->ctas);
  return -1;
}

static int partition_make(tr_rank *r, mode_run *m, char *why, size_t n)
{
  int i, rc = hr_partition_create(m->lease, &m->p);

  if(rc) {
    m->p = NULL;
    snprintf(why, n, "hr_partition_create: %s", hr_strerror(rc));
    return -1;
  }
  m->mega_stream = hr_partition_mega_stream(m->p);
  m->streams[0] = hr_partition_comm_stream(m->p);
  /* One stream per communicator, all in the comm partition: collectives of
   * different communicators queued on one stream would run one after the
   * other, and the cross order issues them in opposite orders. */
  for(i = 1; i < TR_NCOMMS; i++) {
    rc = hr_partition_stream_create(m->p, HR_PARTITION_COMM, &m->streams[i]);
    if(rc) {
      snprintf(why, n, "hr_partition_stream_create: %s", hr_strerror(rc));
      return -1;
    }
  }
  tr_log(r, "partition: comm %d SMs, mega %d SMs (driver's split; lease "
         "headroom %d, grid %d, granularity %d), epoch %u", hr_partition_comm_sms(m->p),
         hr_partition_mega_sms(m->p), m->b.headroom, m->b.grid,
         m->b.partition_granularity, hr_partition_epoch(m->p));
  if(m->b.grid > hr_partition_mega_sms(m->p)) {
    snprintf(why, n, "the lease's grid %d exceeds the mega partition's %d SMs",
             m->b.grid, hr_partition_mega_sms(m->p));
    return -1;
  }
  return 0;
}

static void mode_teardown(mode_run *m)
{
  if(m->have_set)
    tr_nccl_set_destroy(&m->set);
  if(m->p)
    hr_partition_destroy(m->p);      /* its extra streams with it */
  footprints_drop(m);
  if(m->lease)
    hr_lease_release(m->lease);
  memset(m, 0, sizeof(*m));
}

/* Both ranks' budgets into the summary. */
static void budgets(tr_rank *r, mode_run *m, tr_summary *s)
{
  double mine[5], all[10];
  int j;

  mine[0] = m->b.headroom;
  mine[1] = m->b.grid;
  mine[2] = m->b.nccl_max_ctas;
  mine[3] = m->p ? hr_partition_comm_sms(m->p) : m->b.headroom;
  mine[4] = m->p ? hr_partition_mega_sms(m->p) : m->b.grid;
  tr_gather(r, m->mode == HR_MODE_PARTITION ? "partition.budget"
                                            : "headroom.budget", mine, 5, all);
  for(j = 0; j < 2; j++) {
    s->headroom[j] = (int)all[5 * j];
    s->grid[j] = (int)all[5 * j + 1];
    s->nccl_max_ctas[j] = (int)all[5 * j + 2];
    s->comm_sms[j] = (int)all[5 * j + 3];
    s->mega_sms[j] = (int)all[5 * j + 4];
  }
}

int tr_test_mode(tr_rank *r, hr_mode mode)
{
  const int n = r->o.trials;
  tr_outcome *mine = calloc((size_t)n, sizeof(*mine));
  tr_outcome *both = calloc((size_t)n * 2, sizeof(*both));
  mode_run m;
  tr_summary s;
  tr_env e;
  tr_trial t;
  ncclConfig_t cfg;
  char why[300] = "", tag[TR_TAG_MAX];
  uint32_t epoch0;
  int ok, i, passed = 0;

  memset(&m, 0, sizeof(m));
  memset(&s, 0, sizeof(s));
  m.mode = mode;
  m.name = mode == HR_MODE_PARTITION ? "partition" : "headroom";
  m.test = mode == HR_MODE_PARTITION ? 3 : 2;
  if(!mine || !both) {
    tr_log(r, "FAIL: out of memory");
    goto out;
  }

  /* The lease and footprints, then (partition) the green contexts. */
  tr_watch(r, "the lease and footprints", 120);
  ok = lease_take(r, &m, why, sizeof(why)) == 0;
  if(ok && mode == HR_MODE_PARTITION && !r->o.no_gpu)
    ok = partition_make(r, &m, why, sizeof(why)) == 0;
  if(ok && mode == HR_MODE_HEADROOM) {
    memcpy(m.streams, r->comm_stream, sizeof(m.streams));
    m.mega_stream = r->g.stream;
  }
  if(!ok)
    tr_log(r, "%s mode: %s", m.name, why);
  snprintf(tag, sizeof(tag), "%s.lease", m.name);
  if(!tr_agree(r, tag, ok)) {
    tr_say(r, "FAIL test%d %s: no lease to run the trials under (the "
           "reasons are above)", m.test, m.name);
    goto out;
  }
  cfg = tr_nccl_config(m.lease);
  tr_log(r, "%s lease on GPU %d: %d SMs, headroom %d, grid %d, cluster %d; "
         "ncclConfig_t minCTAs %d maxCTAs %d cgaClusterSize %d; %d "
         "footprints x %d CTAs (cga 1, 1 in flight); epoch %u", m.name,
         r->rank, m.b.sms, m.b.headroom, m.b.grid, m.b.cluster, cfg.minCTAs,
         cfg.maxCTAs, cfg.cgaClusterSize, TR_NCOMMS, m.ctas, m.b.epoch);

  /* The communicators, from the lease's config. */
  ok = 1;
  if(!r->o.no_gpu) {
    tr_watch(r, "NCCL communicators from the lease's config", 180);
    ok = tr_nccl_set_create(&m.set, r->o.dir, m.name, r->rank, &cfg,
                            m.streams, why, sizeof(why)) == 0;
    m.have_set = 1;
    if(!ok)
      tr_log(r, "%s mode: %s", m.name, why);
  }
  snprintf(tag, sizeof(tag), "%s.nccl", m.name);
  if(!tr_agree(r, tag, ok)) {
    tr_say(r, "FAIL test%d %s: the communicators could not be made", m.test,
           m.name);
    goto out;
  }
  hr_lease_budget(m.lease, &m.b);
  epoch0 = m.b.epoch;

  memset(&e, 0, sizeof(e));
  e.name = m.name;
  e.lease = m.lease;
  e.timeout_ms = r->o.timeout_ms;
  e.mega_stream = m.mega_stream;
  e.nccl = &m.set;
  for(i = 0; i < n; i++) {
    tr_plan_trial(&t, r->o.seed, i);
    tr_trial_run(r, &e, &t, &mine[i]);
    if(mine[i].rc || mine[i].wrong)
      tr_log(r, "%s trial %d (%s, T=%d): %s%s, grid %d", m.name, i,
             tr_order_name(t.order), tr_tokens[t.tokens_i],
             mine[i].rc ? hr_strerror(mine[i].rc) : "completed",
             mine[i].wrong ? ", y differs from y_ref" : "", mine[i].grid);
  }
  alarm(0);
  if(hr_lease_epoch(m.lease) != epoch0)
    tr_log(r, "%s mode: the budget changed during the trials (epoch %u -> "
           "%u, grid %d -> %d)%s", m.name, epoch0, hr_lease_epoch(m.lease),
           m.b.grid, hr_lease_grid(m.lease),
           m.p && hr_partition_stale(m.p) == 1 ? "; the partition is stale" : "");

  snprintf(tag, sizeof(tag), "%s.results", m.name);
  tr_gather_outcomes(r, tag, mine, n, both);
  tr_summarize(both, n, r->o.seed, &s);
  budgets(r, &m, &s);
  passed = s.timeouts == 0 && s.wrong == 0 && s.errors == 0 && n > 0;
  if(mode == HR_MODE_HEADROOM)
    r->headroom = s;
  tr_print_summary(r, m.name, &s, mode == HR_MODE_PARTITION ? &r->headroom : NULL);
  {
    char a[16], b[16], c[16], d[16];
    tr_ms(a, sizeof(a), s.mega_p50);
    tr_ms(b, sizeof(b), s.mega_p99);
    tr_ms(c, sizeof(c), s.coll_p50);
    tr_ms(d, sizeof(d), s.coll_p99);
    if(mode == HR_MODE_PARTITION)
      tr_say(r, "%s test3 partition: %d trials (%d launches), %d timeouts, "
             "%d wrong, %d errors; comm partition %d/%d SMs, mega partition "
             "%d/%d SMs, grid %d..%d, NCCL maxCTAs %d/%d (GPU 0/1); mega p50 "
             "%s ms p99 %s ms, collectives p50 %s ms p99 %s ms%s",
             tr_verdict(r, passed), n, s.launches, s.timeouts, s.wrong,
             s.errors, s.comm_sms[0], s.comm_sms[1], s.mega_sms[0],
             s.mega_sms[1], s.grid_min, s.grid_max, s.nccl_max_ctas[0],
             s.nccl_max_ctas[1], a, b, c, d,
             r->headroom.valid ? " (headroom mode's beside it above)" : "");
    else
      tr_say(r, "%s test2 headroom: %d trials (%d launches), %d timeouts, "
             "%d wrong, %d errors; headroom %d/%d, grid %d..%d, NCCL maxCTAs "
             "%d/%d (GPU 0/1); mega p50 %s ms p99 %s ms, collectives p50 %s "
             "ms p99 %s ms", tr_verdict(r, passed), n, s.launches, s.timeouts,
             s.wrong, s.errors, s.headroom[0], s.headroom[1], s.grid_min,
             s.grid_max, s.nccl_max_ctas[0], s.nccl_max_ctas[1], a, b, c, d);
  }

out:
  alarm(0);
  mode_teardown(&m);
  free(mine);
  free(both);
  return passed;
}
