/*
 * trials_repro.c: test 1, the stock full-device grid against NCCL in the
 * INC-1291 order, without a lease.
 *
 * Three communicators at NCCL's default config (channels and CGA size its
 * own), three concurrent 64 MiB all-reduces, the mega kernel at the whole
 * device (grid = SMs, clusters of 2, an ordinary launch) in the cross
 * order of trials_plan.h. The test passes when the deadlock happens and
 * ends as it must: hr_moe_sync returns HR_EBARRIER_TIMEOUT on at least one
 * rank, every collective still completes, the context reports no error
 * (nothing trapped), and a full-grid launch on the idle GPU right after
 * gives y_ref bitwise.
 */
#include "trials.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cuda_runtime.h>

static void print_trial(const tr_rank *r, int i, const tr_outcome *o0,
                        const tr_outcome *o1)
{
  const tr_outcome *o[2] = { o0, o1 };
  char part[2][200];
  int j;

  for(j = 0; j < 2; j++) {
    if(o[j]->rc == HR_EBARRIER_TIMEOUT)
      snprintf(part[j], sizeof(part[j]), "rank %d HR_EBARRIER_TIMEOUT after "
               "%.0f ms (barrier %d, %d of %d CTAs arrived)", j, o[j]->sync_ms,
               o[j]->barrier, o[j]->arrived, o[j]->expected);
    else
      snprintf(part[j], sizeof(part[j]), "rank %d %s after %.1f ms", j,
               o[j]->rc ? hr_strerror(o[j]->rc) : "completed", o[j]->sync_ms);
  }
  tr_say(r, "  trial %d: %s; %s; collectives done (%.1f / %.1f ms); "
         "context %s; idle full-grid launch after: %s / %s", i + 1, part[0],
         part[1], o0->coll_ms, o1->coll_ms,
         o0->trapped || o1->trapped ? "REPORTED AN ERROR" : "healthy",
         o0->after_rc ? hr_strerror(o0->after_rc)
                      : o0->after_wrong ? "WRONG y" : "y_ref bitwise",
         o1->after_rc ? hr_strerror(o1->after_rc)
                      : o1->after_wrong ? "WRONG y" : "y_ref bitwise");
}

int tr_test_repro(tr_rank *r)
{
  const int n = r->o.repro_trials;
  const int grid = r->sms / r->o.cluster * r->o.cluster;
  tr_outcome *mine = calloc((size_t)n, sizeof(*mine));
  tr_outcome *both = calloc((size_t)n * 2, sizeof(*both));
  tr_nccl_set set;
  ncclConfig_t cfg = tr_nccl_config(NULL);
  tr_env e;
  tr_trial t;
  char why[300] = "", tag[TR_TAG_MAX];
  int ok, i, passed = 0, timed_out = 0, timeout_ranks[2] = { 0, 0 };
  int bad_after = 0, trapped = 0, errors = 0;

  memset(&set, 0, sizeof(set));
  if(!mine || !both) {
    tr_log(r, "FAIL: out of memory");
    goto out;
  }
  if(r->o.no_gpu) {
    tr_say(r, "SKIP test1 repro: --no-gpu");
    passed = 1;
    goto out;
  }
  tr_watch(r, "test 1: NCCL communicators (default config)", 180);
  ok = tr_nccl_set_create(&set, r->o.dir, "default", r->rank, &cfg,
                          r->comm_stream, why, sizeof(why)) == 0;
  if(!ok)
    tr_log(r, "test 1: %s", why);
  if(!tr_agree(r, "repro.nccl", ok)) {
    tr_say(r, "FAIL test1 repro: communicators at NCCL's default config "
           "could not be made");
    goto out;
  }
  tr_say(r, "test 1 (repro): no lease: grid %d (all %d SMs), clusters of %d, "
         "ordinary launch, barrier timeout %d ms; 3 communicators at NCCL's "
         "default config; cross order, T=%d, 3 x %zu MiB all-reduce at once; "
         "%d trials", grid, r->sms, r->o.cluster, r->o.repro_timeout_ms,
         tr_tokens[TR_NTOKENS - 1], TR_MAX_BYTES >> 20, n);

  memset(&e, 0, sizeof(e));
  e.name = "repro";
  e.grid = grid;
  e.cluster = r->o.cluster;
  e.timeout_ms = r->o.repro_timeout_ms;
  e.mega_stream = r->g.stream;
  e.nccl = &set;
  for(i = 0; i < n; i++) {
    tr_outcome *o = &mine[i];
    hr_moe_args a;
    cudaError_t ce;
    int rc;

    tr_plan_repro(&t, i);
    tr_trial_run(r, &e, &t, o);
    /* A trap would leave a sticky error on the context. */
    ce = cudaDeviceSynchronize();
    if(ce == cudaSuccess)
      ce = cudaGetLastError();
    o->trapped = ce != cudaSuccess;
    if(o->trapped)
      tr_log(r, "trial %d: the context reports %s", i + 1,
             cudaGetErrorString(ce));

    snprintf(tag, sizeof(tag), "repro.%d.after", i);
    tr_barrier(r, tag);
    a = tr_args(r, t.tokens_i, 10000);
    cudaMemsetAsync(r->g.y, 0xff, (size_t)a.tokens * r->g.s.H * 2,
                    (cudaStream_t)r->g.stream);
    rc = hr_moe_forward_grid(r->g.m, grid, HR_MODE_HEADROOM, r->o.cluster, &a,
                             r->g.stream);
    o->after_rc = rc ? rc : hr_moe_sync(r->g.m);
    o->after_wrong = o->after_rc == HR_OK &&
                     !tr_output_matches(r, t.tokens_i, r->g.stream);
  }
  alarm(0);

  tr_gather_outcomes(r, "repro.results", mine, n, both);
  for(i = 0; i < n; i++) {
    const tr_outcome *o0 = &both[i], *o1 = &both[n + i];
    print_trial(r, i, o0, o1);
    timed_out += o0->rc == HR_EBARRIER_TIMEOUT || o1->rc == HR_EBARRIER_TIMEOUT;
    timeout_ranks[0] += o0->rc == HR_EBARRIER_TIMEOUT;
    timeout_ranks[1] += o1->rc == HR_EBARRIER_TIMEOUT;
    trapped += o0->trapped + o1->trapped;
    bad_after += (o0->after_rc || o0->after_wrong) + (o1->after_rc || o1->after_wrong);
    errors += (o0->rc != HR_OK && o0->rc != HR_EBARRIER_TIMEOUT) +
              (o1->rc != HR_OK && o1->rc != HR_EBARRIER_TIMEOUT);
  }
  passed = timed_out > 0 && !trapped && !bad_after && !errors;
  tr_say(r, "%s test1 repro: full grid %d beside NCCL (default config), cross "
         "order: the barrier timed out in %d of %d trials (rank 0: %d, rank 1: "
         "%d), returned as HR_EBARRIER_TIMEOUT; %d other errors, %d contexts "
         "in error (trapped), %d of %d idle full-grid launches after it not "
         "y_ref", tr_verdict(r, passed), grid, timed_out, n,
         timeout_ranks[0], timeout_ranks[1], errors, trapped, bad_after, 2 * n);
  if(!timed_out)
    tr_say(r, "  (no deadlock reproduced: the test needs the failure it "
           "guards against to happen)");

out:
  alarm(0);
  if(!r->o.no_gpu)
    tr_nccl_set_destroy(&set);
  free(mine);
  free(both);
  return passed;
}
