/*
 * trials_run.c: one trial on one rank (trials.h).
 */
#include "trials.h"

#include <string.h>
#include <unistd.h>

#include <cuda_runtime.h>

/* Longest a collective or the mega kernel may take to finish once the
 * mega kernel's own wait is over: a timed-out kernel frees its SMs, so
 * past this something waits on something that can never run. */
#define TR_WAIT_LIMIT_MS 30000

#define EV_MEGA0 0
#define EV_MEGA1 1
#define EV_COLL0(c) (2 + (c))
#define EV_COLL1(c) (2 + TR_NCOMMS + (c))

static void die(tr_rank *r, const char *tag, const char *what)
{
  tr_log(r, "FAIL %s: %s", tag, what);
  _exit(2);
}

static void record(tr_rank *r, const char *tag, int ev, void *stream)
{
  cudaError_t e = cudaEventRecord((cudaEvent_t)r->ev[ev], (cudaStream_t)stream);
  if(e != cudaSuccess)
    die(r, tag, cudaGetErrorString(e));
}

/* Poll until the event is done; -1 past the limit. */
static int wait_event(void *ev, double until_ms)
{
  for(;;) {
    cudaError_t q = cudaEventQuery((cudaEvent_t)ev);
    if(q == cudaSuccess)
      return 0;
    if(q != cudaErrorNotReady)
      return -2;
    if(gt_now_ms() > until_ms)
      return -1;
    tr_sleep_us(50);
  }
}

static double elapsed(tr_rank *r, int a, int b)
{
  float ms = -1;
  if(cudaEventElapsedTime(&ms, (cudaEvent_t)r->ev[a], (cudaEvent_t)r->ev[b]) !=
     cudaSuccess)
    return -1;
  return ms;
}

static void launch_mega(tr_rank *r, const tr_env *e, const tr_trial *t,
                        const char *tag, tr_outcome *out, int *launch_rc,
                        double *t0)
{
  hr_moe_args a = tr_args(r, t->tokens_i, e->timeout_ms);

  out->grid = e->lease ? hr_lease_grid(e->lease) : e->grid;
  record(r, tag, EV_MEGA0, e->mega_stream);
  *t0 = gt_now_ms();
  if(e->lease)
    *launch_rc = hr_moe_forward(r->g.m, e->lease, &a, e->mega_stream);
  else
    *launch_rc = hr_moe_forward_grid(r->g.m, e->grid, HR_MODE_HEADROOM,
                                     e->cluster, &a, e->mega_stream);
  record(r, tag, EV_MEGA1, e->mega_stream);
}

void tr_trial_run(tr_rank *r, const tr_env *e, const tr_trial *t,
                  tr_outcome *out)
{
  const size_t ybytes = (size_t)tr_tokens[t->tokens_i] * r->g.s.H * 2;
  tr_step steps[TR_MAX_STEPS];
  int used[TR_NCOMMS] = { 0 };
  int ns, i, first = -1, launch_rc = HR_OK, launched = 0;
  double t_launch = 0, until;
  char tag[TR_TAG_MAX], why[300];

  memset(out, 0, sizeof(*out));
  out->barrier = out->arrived = out->expected = -1;
  out->mega_ms = out->coll_ms = out->sync_ms = -1;
  snprintf(tag, sizeof(tag), "%s.%d", e->name, t->index);
  ns = tr_plan_script(t, r->rank, steps, TR_MAX_STEPS);
  if(ns < 0)
    die(r, tag, "the plan has no script for this rank");
  if(r->o.no_gpu) {
    tr_barrier(r, tag);
    return;
  }

  /* y poisoned (NaN) and the GPU idle before both ranks start. */
  if(cudaMemsetAsync(r->g.y, 0xff, ybytes, (cudaStream_t)e->mega_stream) ||
     cudaStreamSynchronize((cudaStream_t)e->mega_stream))
    die(r, tag, cudaGetErrorString(cudaGetLastError()));
  tr_watch(r, tag, 60 + e->timeout_ms / 1000);
  tr_barrier(r, tag);

  for(i = 0; i < ns; i++) {
    const tr_step *s = &steps[i];
    if(s->kind == TR_STEP_PAUSE) {
      tr_sleep_us(s->arg);
    } else if(s->kind == TR_STEP_MEGA) {
      launch_mega(r, e, t, tag, out, &launch_rc, &t_launch);
      launched = 1;
    } else {
      const tr_coll *c = &t->coll[s->arg];
      void *st = e->nccl->stream[c->comm];
      if(!used[c->comm]) {
        record(r, tag, EV_COLL0(c->comm), st);
        used[c->comm] = 1;
        if(first < 0)
          first = c->comm;
      }
      if(tr_nccl_run(e->nccl, c, why, sizeof(why)))
        die(r, tag, why);
      record(r, tag, EV_COLL1(c->comm), st);
    }
  }
  if(!launched)
    die(r, tag, "the script has no mega kernel");

  /* The mega kernel first: its barrier timeout bounds this wait. */
  out->rc = launch_rc ? launch_rc : hr_moe_sync(r->g.m);
  out->sync_ms = gt_now_ms() - t_launch;
  if(out->rc != HR_OK) {
    hr_moe_failure f;
    if(hr_moe_last_failure(r->g.m, &f) == HR_OK && f.code == out->rc) {
      out->barrier = f.detail.barrier;
      out->arrived = f.detail.arrived;
      out->expected = f.detail.expected;
      out->grid = f.detail.grid;
    }
  }
  until = gt_now_ms() + TR_WAIT_LIMIT_MS;
  for(i = 0; i < TR_NCOMMS; i++) {
    int w = used[i] ? wait_event(r->ev[EV_COLL1(i)], until) : 0;
    if(w) {
      snprintf(why, sizeof(why), "the collectives on communicator %d %s "
               "(mega kernel: %s)", i, w == -1 ? "never finished" :
               "failed", hr_strerror(out->rc));
      die(r, tag, why);
    }
  }
  if(wait_event(r->ev[EV_MEGA1], until))
    die(r, tag, "the mega kernel's stream never drained");

  if(out->rc == HR_OK) {
    out->mega_ms = elapsed(r, EV_MEGA0, EV_MEGA1);
    out->wrong = !tr_output_matches(r, t->tokens_i, e->mega_stream);
  }
  for(i = 0; i < TR_NCOMMS; i++) {
    double ms = used[i] ? elapsed(r, EV_COLL0(first), EV_COLL1(i)) : -1;
    if(ms > out->coll_ms)
      out->coll_ms = ms;
  }
}
