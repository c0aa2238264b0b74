/*
 * hr_fallback.c: the budget this process computes for itself while no
 * daemon answers.
 *
 * Without a daemon nobody knows the other tenants of a GPU, but this
 * process knows its own footprints and leases, and the daemon's policy
 * is a pure function (policy/policy.h) linked in here too: the fallback
 * is what a daemon with the default policy would say if this process were
 * the GPU's only tenant. It is never the full grid, the launch that
 * deadlocks when a comm kernel holds a single SM, unless the operator
 * forced it with two variables at once; and the NCCL caps that make the
 * headroom hold are always decided.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "hr_client_int.h"

static int round_up(int v, int m) { return (v + m - 1) / m * m; }

int hr__fallback_sms(int gpu)
{
  int sms = hr__cuda_sms(gpu);
  return sms > 0 && sms <= HR_MAX_SMS ? sms : HR_POLICY_DEFAULT_SMS;
}

int hr__fallback_granularity(int gpu)
{
  int g = hr__cuda_sm_alignment(gpu);
  /* Without a driver that says, the co-scheduling step of H100/H200;
   * never the finer split that gives up co-scheduling, which only an
   * operator can choose. */
  return g > 0 && g <= HR_MAX_SMS ? g : HR__DEFAULT_PARTITION_GRANULARITY;
}

int hr__fallback_full_grid(const hr__fallback *f)
{
  return f && f->allow_full_grid && f->headroom_valid && f->headroom == 0;
}

void hr__partition_fields(hr_budget *b, int sms, int granularity, int need,
                          int collectives, int ceiling, int nccl_max_ctas)
{
  if(sms < 2) {
    hr__policy_partition_size(b, 0, 0, 0, 0, 0);   /* no partition at all */
    return;
  }
  if(ceiling > sms - 1)
    ceiling = sms - 1;      /* the mega partition keeps an SM at least */
  hr__policy_partition_size(b, granularity, need, ceiling, collectives,
                            HR_MAX_CTAS);
  /* NCCL_MAX_CTAS from the environment caps it as it stands, even where
   * it is no power of two: what the operator set is what NCCL will do. */
  if(nccl_max_ctas > 0 && b->partition_nccl_max_ctas > nccl_max_ctas)
    b->partition_nccl_max_ctas = nccl_max_ctas;
}

static int collectives_of(const hr__fallback_in *in)
{
  long k = 0;
  int i;
  for(i = 0; i < in->n_footprints; i++)
    k += in->footprints[i].concurrent;
  return k < 1 ? 1 : k > HR_MAX_SMS ? HR_MAX_SMS : (int)k;
}

int hr__fallback_budget(const hr__fallback *f, const hr__fallback_in *in,
                        hr_mode mode, hr_budget *out)
{
  hr_policy policy;
  hr_policy_input pin;
  int sms, c, g, floor_, err;

  if(!f || !in || !out || (in->n_footprints > 0 && !in->footprints))
    return HR_EINVAL;
  sms = in->sms >= 1 && in->sms <= HR_MAX_SMS ? in->sms
                                               : HR_POLICY_DEFAULT_SMS;
  c = in->cluster == 1 || in->cluster == 2 || in->cluster == 4 ||
      in->cluster == 8 ? in->cluster : HR_POLICY_DEFAULT_CLUSTER;
  g = in->granularity >= 0 && in->granularity <= HR_MAX_SMS ?
      in->granularity : 0;

  hr__policy_default(&policy);
  memset(&pin, 0, sizeof(pin));
  pin.sms = sms;
  pin.cluster = c;
  pin.n_footprints = in->n_footprints < 0 ? 0 : in->n_footprints;
  pin.footprints = in->footprints;
  pin.granularity = g;
  memset(out, 0, sizeof(*out));
  err = hr__policy_budget(&policy, &pin, out);
  if(err)
    return err;           /* not with the inputs checked above */

  /* The floor holds even where the default ceiling leaves nothing (a GPU
   * of fewer than min_grid + floor SMs), while a cluster stays for the
   * kernel. */
  floor_ = round_up(HR_POLICY_DEFAULT_MIN_HEADROOM, c);
  if(out->headroom < floor_ && floor_ + c <= sms)
    out->headroom = floor_;
  /* DG_MEGA_MOE_SM_HEADROOM can ask for more, in whole clusters and
   * leaving a cluster at least; never for less. Only both variables
   * together give the full grid back. */
  if(hr__fallback_full_grid(f)) {
    out->headroom = 0;
  } else if(f->headroom_valid) {
    int h = round_up(f->headroom, c);
    if(h > out->headroom && h + c <= sms)
      out->headroom = h;
  }
  out->grid = sms - out->headroom;

  /* NCCL's caps, always: the policy's maxCTAs, or the environment's when
   * smaller (a larger one would not fit the headroom); minCTAs no more
   * than that; CGA 1 and NVLS off from the policy. */
  if(f->nccl_max_ctas > 0 && f->nccl_max_ctas < out->nccl_max_ctas)
    out->nccl_max_ctas = f->nccl_max_ctas;
  if(f->nccl_min_ctas > 0)
    out->nccl_min_ctas = f->nccl_min_ctas;
  if(out->nccl_min_ctas > out->nccl_max_ctas)
    out->nccl_min_ctas = out->nccl_max_ctas;

  /* The comm partition: the policy's, or the environment's headroom where
   * that asks for more (up to every SM but one). */
  if(f->headroom_valid && f->headroom > out->partition_comm_sms)
    hr__partition_fields(out, sms, g, f->headroom, collectives_of(in),
                         sms - 1, f->nccl_max_ctas);
  else if(f->nccl_max_ctas > 0 &&
          out->partition_nccl_max_ctas > f->nccl_max_ctas)
    out->partition_nccl_max_ctas = f->nccl_max_ctas;

  out->gpu = in->gpu;
  out->epoch = 0;
  out->degraded = 1;
  /* An agnostic kernel needs no headroom, daemon or not, and a partition
   * lease takes the partition's numbers. */
  return hr__policy_for_mode(out, mode);
}

void hr__fallback_notice(const hr__fallback *f, const char *path,
                         const char *why, const hr_budget *b)
{
  static atomic_flag said = ATOMIC_FLAG_INIT;
  char env[160] = "";

  if(atomic_flag_test_and_set(&said))
    return;
  if(hr__fallback_full_grid(f))
    snprintf(env, sizeof(env), "; HEADROOM_ALLOW_FULL_GRID=1 and "
             "DG_MEGA_MOE_SM_HEADROOM=0: the FULL GRID, which deadlocks if a "
             "comm kernel holds one SM");
  else if(f->headroom_valid && f->headroom < b->headroom)
    snprintf(env, sizeof(env), "; DG_MEGA_MOE_SM_HEADROOM=%d cannot lower it",
             f->headroom);
  fprintf(stderr, "headroom: no daemon at %s (%s); until it answers, budgets "
          "computed here (default policy, this process's footprints): GPU %d "
          "headroom %d, grid %d of %d SMs, NCCL maxCTAs %d, cgaClusterSize 1, "
          "NVLS off%s\n", path, why && *why ? why : "no answer", b->gpu,
          b->headroom, b->grid, b->sms, b->nccl_max_ctas, env);
}
