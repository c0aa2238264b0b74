/*
 * hr_raises.c: the body of the raises_get and raises_clear replies, both
 * ways: one object per GPU with the headroom incidents added to its floor
 * and the latest raise (PROTOCOL.md §5.10).
 */
#include <stdio.h>

#include "hr_internal.h"

#define UID_MAX HR__INT32_MAX

static void encode_one(hr__enc *e, cJSON *o, const hr_raise *r)
{
  hr__enc_i64(e, o, "gpu", r->gpu, 0, HR_MAX_GPUS - 1);
  hr__enc_i64(e, o, "raised", r->raised, 0, HR_MAX_SMS);
  hr__enc_i64(e, o, "headroom", r->headroom, 0, HR_MAX_SMS);
  hr__enc_i64(e, o, "raises", r->raises, 0, HR__INT32_MAX);
  /* The latest raise, when there is one since the last clear. */
  if(r->last_incident) {
    hr__enc_i64(e, o, "last_time_ms", r->last_time_ms, 0, HR__MAX_ID);
    if(r->last_uid >= 0)
      hr__enc_i64(e, o, "last_uid", r->last_uid, 0, UID_MAX);
    hr__enc_i64(e, o, "last_incident", r->last_incident, 1, HR__MAX_ID);
  }
}

void hr__raises_encode(hr__enc *e, cJSON *o, int cleared,
                       const hr_rep_raises *r)
{
  cJSON *list;
  int i;

  if(r->n_gpus < 0 || r->n_gpus > HR_MAX_GPUS) {
    hr__enc_fail(e, HR_EINVAL);
    return;
  }
  if(cleared)
    hr__enc_i64(e, o, "cleared", r->cleared, 0, HR_MAX_GPUS);
  list = hr__enc_array(e, o, "raises");
  for(i = 0; !e->rc && i < r->n_gpus; i++)
    encode_one(e, hr__enc_object(e, list, NULL), &r->gpus[i]);
}

static void decode_one(hr__dec *d, const cJSON *o, hr_raise *r)
{
  hr__dec_int(d, o, "gpu", HR__REQUIRED, 0, HR_MAX_GPUS - 1, &r->gpu);
  hr__dec_int(d, o, "raised", HR__REQUIRED, 0, HR_MAX_SMS, &r->raised);
  hr__dec_int(d, o, "headroom", HR__REQUIRED, 0, HR_MAX_SMS, &r->headroom);
  hr__dec_int(d, o, "raises", HR__REQUIRED, 0, HR__INT32_MAX, &r->raises);
  r->last_time_ms = 0;
  r->last_uid = -1;
  r->last_incident = 0;
  hr__dec_i64(d, o, "last_time_ms", HR__OPTIONAL, 0, HR__MAX_ID,
              &r->last_time_ms);
  hr__dec_int(d, o, "last_uid", HR__OPTIONAL, 0, UID_MAX, &r->last_uid);
  hr__dec_i64(d, o, "last_incident", HR__OPTIONAL, 1, HR__MAX_ID,
              &r->last_incident);
}

void hr__raises_decode(hr__dec *d, const cJSON *o, int cleared,
                       hr_rep_raises *r)
{
  const cJSON *list, *it;
  int n = 0, i = 0;

  r->cleared = 0;
  r->n_gpus = 0;
  if(cleared)
    hr__dec_int(d, o, "cleared", HR__REQUIRED, 0, HR_MAX_GPUS, &r->cleared);
  list = hr__dec_array(d, o, "raises", HR__REQUIRED, HR_MAX_GPUS, &n);
  for(it = list ? list->child : NULL; it && !d->rc; it = it->next, i++) {
    size_t mark = hr__dec_enter_index(d, "raises", i);
    hr__dec_expect_object(d, it);
    if(!d->rc)
      decode_one(d, it, &r->gpus[i]);
    hr__dec_leave(d, mark);
  }
  r->n_gpus = d->rc ? 0 : n;
}
