/*
 * hr_env.c: the environment, both ways.
 *
 * In: with no daemon, a lease falls back to what the job was started with
 * before headroom existed: DeepGEMM's DG_MEGA_MOE_SM_HEADROOM (unset means
 * 0, the historical full grid) and NCCL's own CTA variables.
 * Out: a lease exported as those same variables, for libraries that read
 * them instead of taking an ncclConfig_t.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hr_client_int.h"

#define ENV_DG_HEADROOM "DG_MEGA_MOE_SM_HEADROOM"

int hr__parse_int(const char *s, int min, int max, int *out)
{
  char *end;
  long v;
  if(!s || !out || !*s)
    return HR_EINVAL;
  /* strtol accepts leading blanks and a '+'; a count of SMs is digits. */
  if(!(*s >= '0' && *s <= '9') && !(*s == '-' && s[1] >= '0' && s[1] <= '9'))
    return HR_EINVAL;
  errno = 0;
  v = strtol(s, &end, 10);
  if(errno || *end || v < min || v > max)
    return HR_EINVAL;
  *out = (int)v;
  return HR_OK;
}

/* An NCCL variable as a budget field: 0 ("not decided") unless set to a
 * value NCCL would take. */
static int env_nccl(const char *name, int max)
{
  int v;
  if(hr__parse_int(getenv(name), 1, max, &v))
    return 0;
  return v;
}

void hr__fallback_read(hr__fallback *f, int quiet)
{
  static atomic_flag warned = ATOMIC_FLAG_INIT;
  const char *s = getenv(ENV_DG_HEADROOM);

  memset(f, 0, sizeof(*f));
  if(s) {
    f->headroom_set = 1;
    snprintf(f->headroom_raw, sizeof(f->headroom_raw), "%s", s);
    if(hr__parse_int(s, 0, HR_MAX_SMS - 1, &f->headroom)) {
      f->headroom = 0;
      if(!quiet && !atomic_flag_test_and_set(&warned))
        fprintf(stderr, "headroom: ignoring %s=\"%s\" (not a number of SMs "
                "from 0 to %d); using 0\n", ENV_DG_HEADROOM, f->headroom_raw,
                HR_MAX_SMS - 1);
    }
  }
  f->nccl_min_ctas = env_nccl("NCCL_MIN_CTAS", HR_MAX_CTAS);
  f->nccl_max_ctas = env_nccl("NCCL_MAX_CTAS", HR_MAX_CTAS);
  f->nccl_cga_cluster_size = env_nccl("NCCL_CGA_CLUSTER_SIZE", HR_MAX_CGA);
}

void hr__partition_fields(hr_budget *b, int sms, int granularity, int need,
                          int collectives, int ceiling, int nccl_max_ctas)
{
  if(sms < 2) {
    hr__policy_partition_size(b, 0, 0, 0, 0, 0);    /* no partition at all */
    return;
  }
  if(ceiling > sms - 1)
    ceiling = sms - 1;      /* the mega partition keeps an SM at least */
  hr__policy_partition_size(b, granularity, need, ceiling, collectives, HR_MAX_CTAS);
  /* NCCL_MAX_CTAS from the environment caps it as it stands, even where
   * it is no power of two: what the operator set is what NCCL will do. */
  if(nccl_max_ctas > 0 && b->partition_nccl_max_ctas > nccl_max_ctas)
    b->partition_nccl_max_ctas = nccl_max_ctas;
}

int hr__fallback_budget(const hr__fallback *f, int gpu, int sms,
                        int cluster, hr_mode mode, hr_budget *out)
{
  int g = hr__cuda_sm_alignment(gpu);

  memset(out, 0, sizeof(*out));
  out->gpu = gpu;
  out->epoch = 0;
  out->mode = mode;
  out->sms = sms;
  out->cluster = cluster;
  /* A headroom that leaves the kernel no SM cannot be what was meant. */
  out->headroom = f->headroom < sms ? f->headroom : 0;
  out->grid = sms - out->headroom;
  out->nccl_min_ctas = f->nccl_min_ctas;
  out->nccl_max_ctas = f->nccl_max_ctas;
  out->nccl_cga_cluster_size = f->nccl_cga_cluster_size;
  out->nccl_nvls_enable = 0;
  out->degraded = 1;
  /* The environment's headroom as the comm partition, in the device's
   * co-scheduling steps (8 on H100/H200 when no driver says): without an
   * operator, never the finer split that gives up co-scheduling. */
  hr__partition_fields(out, sms, g > 0 ? g : HR__DEFAULT_PARTITION_GRANULARITY,
                       f->headroom < sms ? f->headroom : 0, 1, sms - 1,
                       f->nccl_max_ctas);
  /* Without a daemon too, an agnostic kernel needs no headroom, and a
   * partition lease takes the partition's numbers. */
  return hr__policy_for_mode(out, mode);
}

void hr__fallback_notice(const hr__fallback *f, const char *path,
                         const char *why, int sms)
{
  static atomic_flag said = ATOMIC_FLAG_INIT;
  int headroom = f->headroom < sms ? f->headroom : 0;
  if(atomic_flag_test_and_set(&said))
    return;
  fprintf(stderr, "headroom: no daemon at %s (%s); using %s=%d (grid %d of "
          "%d SMs) until it answers\n", path, why && *why ? why : "no answer",
          ENV_DG_HEADROOM, headroom, sms - headroom, sms);
}

static int set_int(const char *name, int v)
{
  char text[16];
  snprintf(text, sizeof(text), "%d", v);
  return setenv(name, text, 1) ? HR_ENOMEM : HR_OK;
}

int hr__budget_export_env(const hr_budget *b)
{
  int err;
  if(!b)
    return HR_EINVAL;
  err = set_int(ENV_DG_HEADROOM, b->headroom);
  if(!err && b->nccl_min_ctas > 0)
    err = set_int("NCCL_MIN_CTAS", b->nccl_min_ctas);
  if(!err && b->nccl_max_ctas > 0)
    err = set_int("NCCL_MAX_CTAS", b->nccl_max_ctas);
  if(!err && b->nccl_cga_cluster_size > 0)
    err = set_int("NCCL_CGA_CLUSTER_SIZE", b->nccl_cga_cluster_size);
  /* NVLink SHARP kernels take 16+ CTAs no cap applies to: always off. */
  if(!err)
    err = set_int("NCCL_NVLS_ENABLE", 0);
  return err;
}
