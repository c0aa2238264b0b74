/*
 * calibration.c: reading the calibration file (calibration.h).
 *
 * The calibration file is written by headroom-calibrate for the daemon to
 * read at start and on SIGHUP. It is no wire message, but it is read with
 * the wire's checked reader all the same, so it refuses what the wire
 * refuses.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "calibration.h"
#include "fsutil.h"
#include "hr_json.h"
#include "log.h"

/* Through the wire's checked reader (proto/hr_json.h): exact member names,
 * a member given twice refused, integers checked as doubles (a fraction
 * or an exponent that is not a whole number is refused, not truncated),
 * strings against their buffers. */

static void parse_gpu(hr__dec *d, const cJSON *o, hr_gpu_info *g)
{
  hr__dec_expect_object(d, o);
  hr__dec_int(d, o, "index", HR__REQUIRED, 0, HR_MAX_GPUS - 1, &g->index);
  hr__dec_int(d, o, "sms", HR__REQUIRED, 1, HR_MAX_SMS, &g->sms);
  hr__dec_name(d, o, "name", HR__REQUIRED, g->name, sizeof(g->name));
}

static void parse_budget(hr__dec *d, const cJSON *o, hr_calib_budget *b)
{
  const cJSON *safe;
  int64_t v = 0;

  hr__dec_expect_object(d, o);
  hr__dec_int(d, o, "max_ctas", HR__REQUIRED, 0, HR_MAX_CTAS, &b->max_ctas);
  hr__dec_int(d, o, "cga_cluster_size", HR__REQUIRED, 0, HR_MAX_CGA,
              &b->cga);
  /* null: no headroom tried was safe. Said out loud in the file rather
   * than left out, so a truncated entry cannot pass for one. */
  safe = hr__dec_field(d, o, "safe_headroom", HR__REQUIRED);
  if(cJSON_IsNull(safe)) {
    b->safe_headroom = -1;
  } else if(safe) {
    hr__dec_value_i64(d, safe, "safe_headroom", 0, HR_MAX_SMS, &v);
    b->safe_headroom = (int)v;
  }
  hr__dec_double(d, o, "collective_ms", HR__REQUIRED, 0, 1e6,
                 &b->collective_ms);
  hr__dec_int(d, o, "trials", HR__REQUIRED, 1, 1000000, &b->trials);
  hr__dec_int(d, o, "orders", HR__REQUIRED, 1, 1000, &b->orders);
}

static void parse_root(hr__dec *d, const cJSON *root, hr__calibration *c)
{
  const cJSON *list, *item;
  int i, j, count;
  size_t mark;

  hr__dec_int(d, root, "version", HR__REQUIRED, 0, 1000000, &c->version);
  if(!d->rc && c->version != HR__CALIBRATION_VERSION)
    hr__dec_field_fail(d, "version", "%d, and this headroomd reads "
                       "version %d", c->version, HR__CALIBRATION_VERSION);
  /* Shown in the log and status: names, so no control characters. */
  hr__dec_name(d, root, "date", HR__REQUIRED, c->date, sizeof(c->date));
  hr__dec_name(d, root, "node", HR__REQUIRED, c->node, sizeof(c->node));
  hr__dec_name(d, root, "nccl_version", HR__REQUIRED, c->nccl_version,
               sizeof(c->nccl_version));

  list = hr__dec_array(d, root, "gpus", HR__REQUIRED, HR_MAX_GPUS, &count);
  if(list && count < 1)
    hr__dec_field_fail(d, "gpus", "must list 1..%d GPUs", HR_MAX_GPUS);
  i = 0;
  for(item = list ? list->child : NULL; item && !d->rc; item = item->next) {
    mark = hr__dec_enter_index(d, "gpus", i);
    parse_gpu(d, item, &c->gpus[i]);
    for(j = 0; !d->rc && j < i; j++)
      if(c->gpus[j].index == c->gpus[i].index)
        hr__dec_field_fail(d, "index", "%d listed twice", c->gpus[i].index);
    hr__dec_leave(d, mark);
    i++;
  }
  c->n_gpus = i;

  list = hr__dec_array(d, root, "budgets", HR__REQUIRED,
                       HR__CALIB_MAX_BUDGETS, &count);
  if(list && count < 1)
    hr__dec_field_fail(d, "budgets", "must list 1..%d budgets",
                       HR__CALIB_MAX_BUDGETS);
  i = 0;
  for(item = list ? list->child : NULL; item && !d->rc; item = item->next) {
    mark = hr__dec_enter_index(d, "budgets", i);
    parse_budget(d, item, &c->budgets[i]);
    /* Two answers for one budget: which one was measured last is not in
     * the file, so neither can be trusted. */
    for(j = 0; !d->rc && j < i; j++)
      if(c->budgets[j].max_ctas == c->budgets[i].max_ctas &&
         c->budgets[j].cga == c->budgets[i].cga)
        hr__dec_field_fail(d, "max_ctas", "%d, cga_cluster_size %d listed "
                           "twice", c->budgets[i].max_ctas,
                           c->budgets[i].cga);
    hr__dec_leave(d, mark);
    i++;
  }
  c->n_budgets = i;
}

int hr__calibration_parse(hr__calibration *out, const char *text, size_t len,
                          char *why, size_t n)
{
  hr__calibration *c = NULL;
  hr_proto_error err;
  hr__dec d;
  cJSON *root;
  int rc = HR_OK;

  if(!out || !text)
    return hr__why(HR_EINVAL, why, n, "no calibration text");
  c = calloc(1, sizeof(*c));
  if(!c)
    return hr__why(HR_EINVAL, why, n, "out of memory");
  hr__dec_init(&d, &err);
  root = hr__dec_parse_doc(&d, text, len, HR__CALIB_FILE_MAX);
  parse_root(&d, root, c);
  if(d.rc)
    rc = hr__why(HR_EINVAL, why, n, "%s", err.message);
  else
    *out = *c;
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
    return hr__why(HR_EINVAL, why, n, "no path");
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
      rc = hr__why(HR_EINVAL, why, n, "%s; could not be moved aside (%s), left where it "
                "is", reason, strerror(e));
    else
      rc = hr__why(HR_EINVAL, why, n, "%s; moved to %s", reason, aside);
  } else if(e) {
    rc = hr__why(HR_EINVAL, why, n, "%s", reason);
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
