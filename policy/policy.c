/*
 * policy.c: the budget policy (see policy.h for the rules and why).
 */
#include <stdarg.h>
#include <stdio.h>

#include "policy.h"

void hr__policy_default(hr_policy *policy)
{
  policy->min_headroom = HR_POLICY_DEFAULT_MIN_HEADROOM;
  policy->max_headroom = HR_POLICY_DEFAULT_MAX_HEADROOM;
  policy->min_grid = HR_POLICY_DEFAULT_MIN_GRID;
  policy->incident_raise = HR_POLICY_DEFAULT_INCIDENT_RAISE;
}

int hr__policy_validate(const hr_policy *p, char *why, size_t n)
{
  const char *msg = NULL;

  if(!p)
    msg = "no policy";
  else if(p->min_headroom < HR__POLICY_MIN_FLOOR ||
          p->min_headroom > HR_MAX_SMS)
    msg = "min_headroom must be 1..1024 (0 leaves no SM free: one NCCL "
          "CTA resident beside the grid deadlocks its barrier)";
  else if(p->max_headroom < 0 || p->max_headroom > HR_MAX_SMS)
    msg = "max_headroom must be 0..1024";
  else if(p->min_headroom > p->max_headroom)
    msg = "min_headroom must not exceed max_headroom";
  else if(p->min_grid < 1 || p->min_grid > HR_MAX_SMS)
    msg = "min_grid must be 1..1024";
  else if(p->incident_raise != 0 && p->incident_raise != 1)
    msg = "incident_raise must be 0 or 1";
  if(msg) {
    if(why && n)
      snprintf(why, n, "%s", msg);
    return HR_EINVAL;
  }
  return HR_OK;
}

int hr__policy_for_mode(hr_budget *b, hr_mode mode)
{
  b->mode = mode;
  if(mode == HR_MODE_AGNOSTIC) {
    b->headroom = 0;
    b->grid = b->sms;
  } else if(mode == HR_MODE_PARTITION) {
    if(b->partition_granularity <= 0 || b->partition_comm_sms <= 0 ||
       b->partition_comm_sms >= b->sms)
      return HR_EUNSUPPORTED;
    b->headroom = b->partition_comm_sms;
    b->grid = b->sms - b->partition_comm_sms;
    b->nccl_max_ctas = b->partition_nccl_max_ctas;
    if(b->nccl_min_ctas > b->nccl_max_ctas)
      b->nccl_min_ctas = b->nccl_max_ctas;
    b->nccl_cga_cluster_size = 1;
  }
  return HR_OK;
}


void hr__policy_partition_size(hr_budget *b, int g, int need, int ceiling,
                               int collectives, int cap_limit)
{
  int comm, cap = 1;

  b->partition_granularity = 0;
  b->partition_comm_sms = 0;
  b->partition_nccl_max_ctas = 0;
  if(g < 1 || collectives < 1)
    return;
  ceiling = ceiling / g * g;
  if(ceiling < g)
    return;
  if(need < 1)
    need = 1;
  comm = need >= ceiling ? ceiling : (need + g - 1) / g * g;
  while(cap * 2 * collectives <= comm && cap * 2 <= cap_limit)
    cap *= 2;
  b->partition_granularity = g;
  b->partition_comm_sms = comm;
  b->partition_nccl_max_ctas = cap;
}


static int round_up(int v, int m) { return (v + m - 1) / m * m; }
static int round_down(int v, int m) { return v / m * m; }

static int say(char *why, size_t n, unsigned key, unsigned *blame,
               const char *fmt, ...)
  __attribute__((format(printf, 5, 6)));

static int say(char *why, size_t n, unsigned key, unsigned *blame,
               const char *fmt, ...)
{
  va_list ap;

  if(why && n) {
    va_start(ap, fmt);
    vsnprintf(why, n, fmt, ap);
    va_end(ap);
  }
  if(blame)
    *blame = key;
  return HR_EINVAL;
}

int hr__policy_validate_for(const hr_policy *p, const hr_topology *topo,
                            char *why, size_t n, unsigned *blame)
{
  static const int clusters[] = {8, 4, 2, 1}; /* every size a lease has */
  int g, i;

  if(blame)
    *blame = 0;
  if(!topo || topo->n_gpus < 0 || topo->n_gpus > HR_MAX_GPUS)
    return say(why, n, 0, blame, "no topology");
  if(hr__policy_validate(p, why, n)) {
    if(blame)
      *blame = !p || p->min_headroom < HR__POLICY_MIN_FLOOR ||
               p->min_headroom > HR_MAX_SMS ? HR_POLICY_MIN_HEADROOM : 0;
    return HR_EINVAL;
  }
  /* headroom = min(max(need, floor), ceiling) stays >= floor exactly when
   * ceiling >= floor: a multiple of c in [min_headroom, min(max_headroom,
   * S - min_grid)] for every cluster c a lease can have. Raised floors
   * cannot break it: the ceiling caps them, and the ceiling is at least
   * the policy's own floor. */
  for(i = 0; i < (int)(sizeof(clusters) / sizeof(clusters[0])); i++) {
    int c = clusters[i], floor_ = round_up(p->min_headroom, c);
    if(round_down(p->max_headroom, c) >= floor_)
      continue;
    return say(why, n, HR_POLICY_MAX_HEADROOM, blame,
               "max_headroom %d is below the floor of %d SMs (min_headroom "
               "%d rounded up to a cluster of %d): max_headroom must be at "
               "least %d", p->max_headroom, floor_, p->min_headroom, c,
               floor_);
  }
  for(g = 0; g < topo->n_gpus; g++) {
    int sms = topo->gpus[g].sms;
    for(i = 0; i < (int)(sizeof(clusters) / sizeof(clusters[0])); i++) {
      int c = clusters[i], floor_ = round_up(p->min_headroom, c);
      int ceiling = round_down(hr__policy_ceiling(p, sms), c);
      if(ceiling >= floor_)
        continue;
      if(sms - floor_ < 1)
        return say(why, n, HR_POLICY_MIN_HEADROOM, blame,
                   "min_headroom %d is the whole of gpu %d (%d SMs) once "
                   "rounded up to a cluster of %d: min_headroom must be at "
                   "most %d", p->min_headroom, g, sms, c,
                   round_down(sms - 1, c));
      return say(why, n, HR_POLICY_MIN_GRID, blame,
                 "min_grid %d leaves gpu %d (%d SMs) a ceiling of %d SMs, "
                 "below its floor of %d (min_headroom %d rounded up to a "
                 "cluster of %d): min_grid must be at most %d", p->min_grid,
                 g, sms, ceiling, floor_, p->min_headroom, c, sms - floor_);
    }
  }
  return HR_OK;
}

static int input_valid(const hr_policy_input *in)
{
  if(!in || in->sms < 1 || in->sms > HR_MAX_SMS)
    return 0;
  if(in->cluster < 1 || in->cluster > HR_MAX_CGA || in->raised < 0)
    return 0;
  if(in->n_footprints < 0 || (in->n_footprints > 0 && !in->footprints))
    return 0;
  if(in->n_calib < 0 || (in->n_calib > 0 && !in->calib))
    return 0;
  if(in->granularity < 0 || in->granularity > HR_MAX_SMS)
    return 0;
  return 1;
}

int hr__policy_comm_ctas(const hr_policy_input *in)
{
  long total = 0;
  int i;

  for(i = 0; i < in->n_footprints; i++) {
    const hr_footprint *f = &in->footprints[i];
    total += (long)f->ctas * f->concurrent;
    if(total > HR_MAX_SMS * HR_MAX_CTAS)
      return HR_MAX_SMS * HR_MAX_CTAS; /* saturate: far past any ceiling */
  }
  return (int)total;
}

/* Collectives in flight on the GPU, at least 1: a GPU with no footprint
 * yet is budgeted for one collective, so its first communicator fits. */
static int collectives(const hr_policy_input *in)
{
  long k = 0;
  int i;

  for(i = 0; i < in->n_footprints; i++)
    k += in->footprints[i].concurrent;
  if(k < 1)
    k = 1;
  return k > HR_MAX_SMS ? HR_MAX_SMS : (int)k;
}

int hr__policy_ceiling(const hr_policy *p, int sms)
{
  int ceiling = p->max_headroom;

  if(ceiling > sms - p->min_grid)
    ceiling = sms - p->min_grid;
  return ceiling < 0 ? 0 : ceiling;
}

static int ceiling_of(const hr_policy *p, const hr_policy_input *in)
{
  return round_down(hr__policy_ceiling(p, in->sms), in->cluster);
}

const hr_calib_budget *hr__policy_calib_find(const hr_policy_input *in,
                                             int max_ctas, int cga)
{
  int i;

  if(!in || in->n_calib < 1 || !in->calib)
    return NULL;
  for(i = 0; i < in->n_calib; i++) {
    const hr_calib_budget *b = &in->calib[i];
    if(b->max_ctas == max_ctas && b->cga == cga && b->safe_headroom >= 0 &&
       b->safe_headroom <= HR_MAX_SMS)
      return b;
  }
  return NULL;
}

/* Every footprint inside the measured budget: no more CTAs than the cap,
 * and a CGA size of 1 (0, NCCL's default, was measured to need more). */
static int footprints_within(const hr_policy_input *in, int cap)
{
  int i;

  for(i = 0; i < in->n_footprints; i++)
    if(in->footprints[i].ctas > cap || in->footprints[i].cga != 1)
      return 0;
  return 1;
}

/* The partition fields (policy.h); `gpu_cap` is the GPU's own NCCL cap. */
static void partition_of(const hr_policy *p, const hr_policy_input *in,
                         int gpu_cap, hr_budget *out)
{
  long need = hr__policy_comm_ctas(in);
  long floor_ = (long)p->min_headroom + in->raised;

  if(floor_ > need)
    need = floor_ > HR_MAX_SMS ? HR_MAX_SMS : floor_;
  hr__policy_partition_size(out, in->granularity, (int)need,
                    hr__policy_ceiling(p, in->sms), collectives(in), gpu_cap);
}

int hr__policy_budget(const hr_policy *p, const hr_policy_input *in,
                      hr_budget *out)
{
  return hr__policy_budget_src(p, in, out, NULL);
}

int hr__policy_budget_src(const hr_policy *p, const hr_policy_input *in,
                          hr_budget *out, hr_budget_source *source)
{
  const hr_calib_budget *cal;
  int c, ceiling, need, floor_, headroom, per, cap;
  long comm;

  if(!out || hr__policy_validate(p, NULL, 0) || !input_valid(in))
    return HR_EINVAL;

  c = in->cluster;
  ceiling = ceiling_of(p, in);

  /* The NCCL cap: K collectives of p CTAs each, c SMs per CTA. */
  per = ceiling / c / collectives(in);
  cap = 1;
  while(cap * 2 <= per && cap * 2 <= HR_MAX_CTAS)
    cap *= 2;

  cal = hr__policy_calib_find(in, cap, 1);
  if(cal && !footprints_within(in, cap))
    cal = NULL;
  if(cal) {
    need = round_up(cal->safe_headroom, c);
  } else {
    comm = hr__policy_comm_ctas(in);
    need = comm * c > HR_MAX_SMS ? HR_MAX_SMS : (int)(comm * c);
  }
  floor_ = round_up(p->min_headroom + in->raised, c);

  headroom = need > floor_ ? need : floor_;
  if(headroom > ceiling)
    headroom = ceiling;

  out->sms = in->sms;
  out->cluster = c;
  out->headroom = headroom;
  out->grid = in->sms - headroom;
  out->nccl_min_ctas = 1;
  out->nccl_max_ctas = cap;
  out->nccl_cga_cluster_size = 1;
  out->nccl_nvls_enable = 0;
  out->degraded = 0;
  partition_of(p, in, cap, out);
  if(source)
    *source = cal ? HR_SOURCE_CALIBRATED : HR_SOURCE_THEORY;
  return HR_OK;
}

int hr__policy_lease_budget(const hr_budget *gpu, hr_mode mode,
                            hr_budget *out)
{
  if(!gpu || !out || (int)mode < 0 || mode >= HR_MODE_COUNT)
    return HR_EINVAL;
  *out = *gpu;
  /* One rule for both sides: libheadroom applies the same function to
   * the budgets the daemon pushes for the whole GPU. */
  return hr__policy_for_mode(out, mode);
}

int hr__policy_raise(const hr_policy *p, const hr_policy_input *in)
{
  hr_budget now;
  int target;

  if(!in)
    return 0;
  if(!p || !p->incident_raise || hr__policy_budget(p, in, &now))
    return in->raised;
  /* One cluster above what failed, so the headroom in force really grows,
   * even when the footprints (not the floor) decided it; never past the
   * ceiling, where raising further would only make the number lie. */
  target = now.headroom + in->cluster;
  if(target > ceiling_of(p, in))
    target = ceiling_of(p, in);
  if(target - p->min_headroom > in->raised)
    return target - p->min_headroom;
  return in->raised;
}
