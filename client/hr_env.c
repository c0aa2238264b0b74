/*
 * hr_env.c: the environment, both ways.
 *
 * In: what the job was started with that the budgets computed with no
 * daemon (hr_fallback.c) take into account: DeepGEMM's
 * DG_MEGA_MOE_SM_HEADROOM (more headroom, never less), NCCL's own CTA
 * variables (a smaller cap), and HEADROOM_ALLOW_FULL_GRID.
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
#define ENV_FULL_GRID "HEADROOM_ALLOW_FULL_GRID"

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
  const char *full = getenv(ENV_FULL_GRID);

  memset(f, 0, sizeof(*f));
  if(s) {
    f->headroom_set = 1;
    snprintf(f->headroom_raw, sizeof(f->headroom_raw), "%s", s);
    if(!hr__parse_int(s, 0, HR_MAX_SMS - 1, &f->headroom)) {
      f->headroom_valid = 1;
    } else {
      f->headroom = 0;
      if(!quiet && !atomic_flag_test_and_set(&warned))
        fprintf(stderr, "headroom: ignoring %s=\"%s\" (not a number of SMs "
                "from 0 to %d)\n", ENV_DG_HEADROOM, f->headroom_raw,
                HR_MAX_SMS - 1);
    }
  }
  /* Exactly "1": a setting that can deadlock is never guessed from a
   * value that only looks like yes. */
  f->allow_full_grid = full && !strcmp(full, "1");
  f->nccl_min_ctas = env_nccl("NCCL_MIN_CTAS", HR_MAX_CTAS);
  f->nccl_max_ctas = env_nccl("NCCL_MAX_CTAS", HR_MAX_CTAS);
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
