/*
 * calibration.c: reading the calibration file (calibration.h).
 *
 * Like persist.c, this reads JSON with cJSON directly: the calibration
 * file is written by headroom-calibrate for the daemon to read at start
 * and on SIGHUP; it is not a wire message, so it does not go through
 * proto/.
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "calibration.h"
#include "fsutil.h"
#include "log.h"

static int fail(char *why, size_t n, const char *fmt, ...) HR__PRINTF(3, 4);

static int fail(char *why, size_t n, const char *fmt, ...)
{
  va_list ap;

  if(why && n) {
    va_start(ap, fmt);
    vsnprintf(why, n, fmt, ap);
    va_end(ap);
  }
  return HR_EINVAL;
}

/* An integer member in [min, max]; a fraction or an exponent that is not
 * a whole number is refused, not truncated. */
static int get_int(const cJSON *o, const char *key, int min, int max,
                   int *out)
{
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
  double d;

  if(!cJSON_IsNumber(v))
    return HR_EINVAL;
  d = v->valuedouble;
  if(!isfinite(d) || d != floor(d) || d < min || d > max)
    return HR_EINVAL;
  *out = (int)d;
  return HR_OK;
}

static int get_string(const cJSON *o, const char *key, char *dst,
                      size_t size)
{
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
  size_t len;

  if(!cJSON_IsString(v) || !v->valuestring)
    return HR_EINVAL;
  len = strlen(v->valuestring);
  if(len >= size)
    return HR_EINVAL;
  memcpy(dst, v->valuestring, len + 1);
  return HR_OK;
}

static int parse_gpu(const cJSON *o, int i, hr_gpu_info *g, char *why,
                     size_t n)
{
  if(!cJSON_IsObject(o))
    return fail(why, n, "gpus[%d]: not an object", i);
  if(get_int(o, "index", 0, HR_MAX_GPUS - 1, &g->index))
    return fail(why, n, "gpus[%d].index: an integer 0..%d", i,
                HR_MAX_GPUS - 1);
  if(get_int(o, "sms", 1, HR_MAX_SMS, &g->sms))
    return fail(why, n, "gpus[%d].sms: an integer 1..%d", i, HR_MAX_SMS);
  if(get_string(o, "name", g->name, sizeof(g->name)))
    return fail(why, n, "gpus[%d].name: a string under %d bytes", i,
                HR_NAME_MAX);
  return HR_OK;
}

static int parse_budget(const cJSON *o, int i, hr_calib_budget *b,
                        char *why, size_t n)
{
  const cJSON *safe, *ms;

  if(!cJSON_IsObject(o))
    return fail(why, n, "budgets[%d]: not an object", i);
  if(get_int(o, "max_ctas", 0, HR_MAX_CTAS, &b->max_ctas))
    return fail(why, n, "budgets[%d].max_ctas: an integer 0..%d (0: NCCL's "
                "default)", i, HR_MAX_CTAS);
  if(get_int(o, "cga_cluster_size", 0, HR_MAX_CGA, &b->cga))
    return fail(why, n, "budgets[%d].cga_cluster_size: an integer 0..%d "
                "(0: NCCL's default)", i, HR_MAX_CGA);
  /* null: no headroom tried was safe. Said out loud in the file rather
   * than left out, so a truncated entry cannot pass for one. */
  safe = cJSON_GetObjectItemCaseSensitive(o, "safe_headroom");
  if(cJSON_IsNull(safe))
    b->safe_headroom = -1;
  else if(get_int(o, "safe_headroom", 0, HR_MAX_SMS, &b->safe_headroom))
    return fail(why, n, "budgets[%d].safe_headroom: an integer 0..%d or null",
                i, HR_MAX_SMS);
  ms = cJSON_GetObjectItemCaseSensitive(o, "collective_ms");
  if(!cJSON_IsNumber(ms) || !isfinite(ms->valuedouble) ||
     ms->valuedouble < 0 || ms->valuedouble > 1e6)
    return fail(why, n, "budgets[%d].collective_ms: a number >= 0", i);
  b->collective_ms = ms->valuedouble;
  if(get_int(o, "trials", 1, 1000000, &b->trials))
    return fail(why, n, "budgets[%d].trials: an integer >= 1", i);
  if(get_int(o, "orders", 1, 1000, &b->orders))
    return fail(why, n, "budgets[%d].orders: an integer >= 1", i);
  return HR_OK;
}

static int parse_root(const cJSON *root, hr__calibration *c, char *why,
                      size_t n)
{
  const cJSON *list, *item;
  int i, j;

  if(!cJSON_IsObject(root))
    return fail(why, n, "not a JSON object");
  if(get_int(root, "version", 0, 1000000, &c->version))
    return fail(why, n, "version: an integer");
  if(c->version != HR__CALIBRATION_VERSION)
    return fail(why, n, "version %d: this headroomd reads version %d",
                c->version, HR__CALIBRATION_VERSION);
  if(get_string(root, "date", c->date, sizeof(c->date)))
    return fail(why, n, "date: a string under %d bytes", HR_NAME_MAX);
  if(get_string(root, "node", c->node, sizeof(c->node)))
    return fail(why, n, "node: a string under %d bytes", HR_NAME_MAX);
  if(get_string(root, "nccl_version", c->nccl_version,
                sizeof(c->nccl_version)))
    return fail(why, n, "nccl_version: a string under %d bytes",
                HR_NAME_MAX);

  list = cJSON_GetObjectItemCaseSensitive(root, "gpus");
  if(!cJSON_IsArray(list) || cJSON_GetArraySize(list) < 1 ||
     cJSON_GetArraySize(list) > HR_MAX_GPUS)
    return fail(why, n, "gpus: an array of 1..%d GPUs", HR_MAX_GPUS);
  i = 0;
  cJSON_ArrayForEach(item, list) {
    if(parse_gpu(item, i, &c->gpus[i], why, n))
      return HR_EINVAL;
    for(j = 0; j < i; j++)
      if(c->gpus[j].index == c->gpus[i].index)
        return fail(why, n, "gpus[%d]: index %d listed twice", i,
                    c->gpus[i].index);
    i++;
  }
  c->n_gpus = i;

  list = cJSON_GetObjectItemCaseSensitive(root, "budgets");
  if(!cJSON_IsArray(list) || cJSON_GetArraySize(list) < 1 ||
     cJSON_GetArraySize(list) > HR__CALIB_MAX_BUDGETS)
    return fail(why, n, "budgets: an array of 1..%d budgets",
                HR__CALIB_MAX_BUDGETS);
  i = 0;
  cJSON_ArrayForEach(item, list) {
    if(parse_budget(item, i, &c->budgets[i], why, n))
      return HR_EINVAL;
    /* Two answers for one budget: which one was measured last is not in
     * the file, so neither can be trusted. */
    for(j = 0; j < i; j++)
      if(c->budgets[j].max_ctas == c->budgets[i].max_ctas &&
         c->budgets[j].cga == c->budgets[i].cga)
        return fail(why, n, "budgets[%d]: max_ctas %d, cga_cluster_size %d "
                    "listed twice", i, c->budgets[i].max_ctas,
                    c->budgets[i].cga);
    i++;
  }
  c->n_budgets = i;
  return HR_OK;
}

int hr__calibration_parse(hr__calibration *out, const char *text, size_t len,
                          char *why, size_t n)
{
  hr__calibration *c = NULL;
  cJSON *root = NULL;
  int rc;

  if(!out || !text)
    return fail(why, n, "no calibration text");
  c = calloc(1, sizeof(*c));
  if(!c)
    return fail(why, n, "out of memory");
  root = cJSON_ParseWithLength(text, len);
  if(!root) {
    rc = fail(why, n, "not valid JSON");
    goto out;
  }
  rc = parse_root(root, c, why, n);
  if(!rc)
    *out = *c;
out:
  cJSON_Delete(root);
  free(c);
  return rc;
}

int hr__calibration_load(hr__calibration *out, const char *path,
                         long long now_s, char *why, size_t n)
{
  char reason[192], aside[HR__CALIB_PATH_MAX + 48];
  char *text = NULL;
  size_t len;
  int rc, e;

  if(!out || !path)
    return fail(why, n, "no path");
  /* headroom-calibrate is often run as root: root's file is trusted too,
   * as no tenant can have planted it. */
  e = hr__read_file(path, HR__CALIB_FILE_MAX, HR__OWNER_SELF_OR_ROOT, &text,
                    &len, reason, sizeof(reason));
  if(e == ENOENT)
    return HR_ENOTFOUND;            /* no file is not a bad one */
  if(e == EPERM) {
    /* Not a file to read at all: moved aside, so the next calibration
     * run writes a real one there. */
    e = hr__set_aside(path, "refused", now_s, aside, sizeof(aside));
    if(e)
      rc = fail(why, n, "%s; could not be moved aside (%s), left where it "
                "is", reason, strerror(e));
    else
      rc = fail(why, n, "%s; moved to %s", reason, aside);
  } else if(e) {
    rc = fail(why, n, "%s", reason);
  } else {
    rc = hr__calibration_parse(out, text, len, why, n);
  }
  free(text);
  return rc;
}

int hr__calibration_covers(const hr__calibration *c, const hr_gpu_info *gpu)
{
  int i;

  if(!c || !gpu)
    return 0;
  for(i = 0; i < c->n_gpus; i++) {
    const hr_gpu_info *m = &c->gpus[i];
    if(m->index != gpu->index)
      continue;
    if(m->sms != gpu->sms)
      return 0;
    /* A different part with the same SM count is a different machine. */
    if(m->name[0] && gpu->name[0] && strcmp(m->name, gpu->name))
      return 0;
    return 1;
  }
  return 0;
}
