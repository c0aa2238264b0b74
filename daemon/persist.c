/*
 * persist.c: the learned state file (see persist.h).
 *
 * This is the one place in the daemon that builds JSON with cJSON
 * directly: the state file is not a wire message. It is read back with
 * the wire's checked reader (proto/hr_json.h) all the same, so it refuses
 * what the wire refuses: a member given twice, \u0000, numbers that do
 * not fit.
 */
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "fsutil.h"
#include "hr_json.h"
#include "log.h"
#include "persist.h"

int hr__persist_open(hr__persist *p, const char *state_dir)
{
  int e;

  if(!p || !state_dir)
    return HR_EINVAL;
  memset(p, 0, sizeof(*p));
  if(strlen(state_dir) >= sizeof(p->dir)) {
    hr__warn("state_dir %s: path too long; running without persistence",
             state_dir);
    return HR_EINVAL;
  }
  snprintf(p->dir, sizeof(p->dir), "%s", state_dir);
  snprintf(p->path, sizeof(p->path), "%s/%s", state_dir, HR__STATE_FILE);
  e = hr__mkdirs(state_dir, 0755);
  if(!e && access(state_dir, W_OK | X_OK))
    e = errno;
  if(e) {
    hr__warn("state_dir %s: %s; running without persistence (learned "
             "headroom and incidents will not survive a restart)",
             state_dir, strerror(e));
    return HR_EINVAL;
  }
  p->enabled = 1;
  return HR_OK;
}

/* ---- encoding ---------------------------------------------------------- */

static int add_num(cJSON *o, const char *key, double v)
{
  return cJSON_AddNumberToObject(o, key, v) ? 0 : -1;
}

static cJSON *incident_json(const hr_status_incident *inc, int uid)
{
  cJSON *o = cJSON_CreateObject(), *d;
  const char *kind = hr_incident_kind_name(inc->kind);
  int bad = 0;

  if(!o)
    return NULL;
  bad |= add_num(o, "id", (double)inc->id);
  bad |= add_num(o, "time_ms", (double)inc->time_ms);
  bad |= add_num(o, "client", (double)inc->client);
  bad |= add_num(o, "lease", (double)inc->lease);
  bad |= add_num(o, "uid", uid);    /* whose quota it counts in */
  bad |= !cJSON_AddStringToObject(o, "kind", kind ? kind : "?");
  bad |= !cJSON_AddStringToObject(o, "message", inc->message);
  d = cJSON_AddObjectToObject(o, "detail");
  if(!d) {
    bad = 1;
  } else {
    bad |= add_num(d, "barrier", inc->detail.barrier);
    bad |= add_num(d, "arrived", inc->detail.arrived);
    bad |= add_num(d, "expected", inc->detail.expected);
    bad |= add_num(d, "sm", inc->detail.sm);
    bad |= add_num(d, "grid", inc->detail.grid);
    bad |= add_num(d, "timeout_ms", inc->detail.timeout_ms);
    bad |= add_num(d, "cuda_error", inc->detail.cuda_error);
  }
  if(bad) {
    cJSON_Delete(o);
    return NULL;
  }
  return o;
}

int hr__persist_encode(const hr__state *s, long long now_ms, char **out)
{
  cJSON *root = NULL, *gpus, *g, *incs, *inc, *raise;
  int rc = HR_ENOMEM, gi, i, bad = 0;

  if(!s || !out)
    return HR_EINVAL;
  *out = NULL;
  root = cJSON_CreateObject();
  if(!root)
    goto out;
  bad |= add_num(root, "format", HR__STATE_FORMAT);
  bad |= add_num(root, "saved_ms", (double)now_ms);
  bad |= add_num(root, "next_incident", (double)s->next_incident);
  gpus = cJSON_AddArrayToObject(root, "gpus");
  if(bad || !gpus)
    goto out;
  for(gi = 0; gi < s->n_gpus; gi++) {
    const hr__gpu *gp = &s->gpus[gi];
    g = cJSON_CreateObject();
    if(!g)
      goto out;
    cJSON_AddItemToArray(gpus, g);
    bad |= add_num(g, "gpu", gi);
    bad |= add_num(g, "sms", gp->info.sms);
    bad |= add_num(g, "raised", gp->raised);
    bad |= add_num(g, "epoch", gp->epoch);
    /* What raised it, for the operator's raises_get after a restart. */
    raise = cJSON_AddObjectToObject(g, "raise");
    if(!raise)
      goto out;
    bad |= add_num(raise, "raises", gp->raise.raises);
    bad |= add_num(raise, "last_ms", (double)gp->raise.last_ms);
    bad |= add_num(raise, "last_uid", gp->raise.last_uid);
    bad |= add_num(raise, "last_incident", (double)gp->raise.last_incident);
    incs = cJSON_AddArrayToObject(g, "incidents");
    if(bad || !incs)
      goto out;
    for(i = 0; i < gp->n_incidents; i++) {
      inc = incident_json(&gp->incidents[i], gp->incident_uid[i]);
      if(!inc)
        goto out;
      cJSON_AddItemToArray(incs, inc);
    }
  }
  *out = cJSON_Print(root);
  if(*out)
    rc = HR_OK;
out:
  cJSON_Delete(root);
  return rc;
}

/* ---- decoding ---------------------------------------------------------- */

/* Through the wire's checked reader (proto/hr_json.h): exact member names,
 * a member given twice refused, integers checked as doubles, strings
 * against their buffers. */

static const char *kind_name_i(int i)
{
  return hr_incident_kind_name((hr_incident_kind)i);
}

/* One GPU's learned state, checked but not yet applied. */
typedef struct learned {
  int present;
  int raised;
  uint32_t epoch;
  int n;
  hr_status_incident inc[HR__INCIDENTS_KEPT];
  int uid[HR__INCIDENTS_KEPT];
  hr__raise_rec raise;
} learned;

static void decode_incident(hr__dec *d, const cJSON *o,
                            hr_status_incident *inc, int *uid)
{
  static const struct { const char *key; size_t off; } det[] = {
    {"barrier", offsetof(hr_incident_detail, barrier)},
    {"arrived", offsetof(hr_incident_detail, arrived)},
    {"expected", offsetof(hr_incident_detail, expected)},
    {"sm", offsetof(hr_incident_detail, sm)},
    {"grid", offsetof(hr_incident_detail, grid)},
    {"timeout_ms", offsetof(hr_incident_detail, timeout_ms)},
    {"cuda_error", offsetof(hr_incident_detail, cuda_error)},
  };
  const cJSON *dt;
  int kind = 0;
  size_t i, mark;

  memset(inc, 0, sizeof(*inc));
  hr__dec_expect_object(d, o);
  hr__dec_i64(d, o, "id", HR__REQUIRED, 1, HR_PROTO_MAX_ID, &inc->id);
  hr__dec_i64(d, o, "time_ms", HR__REQUIRED, 0, HR_PROTO_MAX_ID,
              &inc->time_ms);
  hr__dec_i64(d, o, "client", HR__REQUIRED, 0, HR_PROTO_MAX_ID,
              &inc->client);
  hr__dec_i64(d, o, "lease", HR__REQUIRED, 0, HR_PROTO_MAX_ID, &inc->lease);
  /* Absent in a file from before per-uid quotas: unknown. */
  *uid = -1;
  hr__dec_int(d, o, "uid", HR__OPTIONAL, -1, 2147483647LL, uid);
  hr__dec_enum(d, o, "kind", HR__REQUIRED, kind_name_i, HR_INCIDENT_COUNT,
               &kind);
  inc->kind = (hr_incident_kind)kind;
  hr__dec_string(d, o, "message", HR__REQUIRED, inc->message,
                 sizeof(inc->message));
  dt = hr__dec_object(d, o, "detail", HR__REQUIRED);
  mark = hr__dec_enter(d, "detail");
  for(i = 0; dt && i < sizeof(det) / sizeof(det[0]); i++)
    hr__dec_int(d, dt, det[i].key, HR__REQUIRED, -2147483648LL, 2147483647LL,
                (int *)((char *)&inc->detail + det[i].off));
  hr__dec_leave(d, mark);
}

static void decode_gpu(hr__dec *d, const cJSON *o, const hr__state *s,
                       learned *all)
{
  const cJSON *incs, *it, *r;
  learned *l;
  int64_t idx = 0, sms = 0, v = 0;
  int i = 0, n;

  hr__dec_expect_object(d, o);
  hr__dec_i64(d, o, "gpu", HR__REQUIRED, 0, HR_MAX_GPUS - 1, &idx);
  hr__dec_i64(d, o, "sms", HR__REQUIRED, 1, HR_MAX_SMS, &sms);
  if(d->rc)
    return;
  l = &all[idx];
  if(l->present) {
    hr__dec_field_fail(d, "gpu", "gpu %lld listed twice", (long long)idx);
    return;
  }
  l->present = 1;
  hr__dec_i64(d, o, "raised", HR__REQUIRED, 0, HR_MAX_SMS, &v);
  l->raised = (int)v;
  l->raise.last_uid = -1;
  r = hr__dec_object(d, o, "raise", HR__OPTIONAL);
  if(r) {
    size_t mark = hr__dec_enter(d, "raise");
    hr__dec_int(d, r, "raises", HR__REQUIRED, 0, 2147483647LL,
                &l->raise.raises);
    hr__dec_i64(d, r, "last_ms", HR__REQUIRED, 0, HR_PROTO_MAX_ID,
                &l->raise.last_ms);
    hr__dec_int(d, r, "last_uid", HR__REQUIRED, -1, 2147483647LL,
                &l->raise.last_uid);
    hr__dec_i64(d, r, "last_incident", HR__REQUIRED, 0, HR_PROTO_MAX_ID,
                &l->raise.last_incident);
    hr__dec_leave(d, mark);
  }
  hr__dec_i64(d, o, "epoch", HR__REQUIRED, 1, 4294967295LL, &v);
  l->epoch = (uint32_t)v;
  /* As many as the file holds (its size caps them); the newest kept. */
  incs = hr__dec_array(d, o, "incidents", HR__REQUIRED, 1 << 20, &n);
  for(it = incs ? incs->child : NULL; it && !d->rc; it = it->next) {
    size_t mark;
    /* Keep the newest: shift out the oldest once the array is full. */
    if(i == HR__INCIDENTS_KEPT) {
      memmove(&l->inc[0], &l->inc[1],
              (HR__INCIDENTS_KEPT - 1) * sizeof(l->inc[0]));
      memmove(&l->uid[0], &l->uid[1],
              (HR__INCIDENTS_KEPT - 1) * sizeof(l->uid[0]));
      i--;
    }
    mark = hr__dec_enter_index(d, "incidents", i);
    decode_incident(d, it, &l->inc[i], &l->uid[i]);
    hr__dec_leave(d, mark);
    i++;
  }
  l->n = i;
  if(d->rc)
    return;
  /* Learned on other hardware (a different GPU at this index, or a
   * changed config topology): its lessons do not apply here. */
  if(idx >= s->n_gpus || s->gpus[idx].info.sms != sms) {
    hr__notice("state file: gpu %lld (%lld SMs) is not in this topology; "
               "its learned state is ignored", (long long)idx,
               (long long)sms);
    l->present = 0;
  }
}

int hr__persist_decode(hr__state *s, const char *text, size_t len, char *why,
                       size_t n)
{
  hr_proto_error err;
  hr__dec d;
  cJSON *root = NULL;
  const cJSON *gpus, *it;
  learned *all = NULL;
  int64_t format = 0, next = 0;
  int rc = HR_EINVAL, g, count, i = 0;

  if(!s || !text)
    return hr__why(HR_EINVAL, why, n, "no input");
  all = calloc(HR_MAX_GPUS, sizeof(*all));
  if(!all)
    return HR_ENOMEM;
  hr__dec_init(&d, &err);
  root = hr__dec_parse_doc(&d, text, len, HR__STATE_FILE_MAX);
  hr__dec_i64(&d, root, "format", HR__REQUIRED, 0, HR_PROTO_MAX_ID, &format);
  if(!d.rc && format != HR__STATE_FORMAT)
    hr__dec_field_fail(&d, "format", "%lld, and this headroomd reads %d",
                       (long long)format, HR__STATE_FORMAT);
  hr__dec_i64(&d, root, "next_incident", HR__REQUIRED, 1, HR_PROTO_MAX_ID,
              &next);
  gpus = hr__dec_array(&d, root, "gpus", HR__REQUIRED, HR_MAX_GPUS, &count);
  for(it = gpus ? gpus->child : NULL; it && !d.rc; it = it->next, i++) {
    size_t mark = hr__dec_enter_index(&d, "gpus", i);
    decode_gpu(&d, it, s, all);
    hr__dec_leave(&d, mark);
  }
  if(d.rc) {
    hr__why(HR_EINVAL, why, n, "%s", err.message);
    goto out;
  }
  /* Everything checked: only now touch the live state. A restart is a
   * change (the old daemon's footprints and leases are gone), so the
   * epoch moves on from the saved one. */
  if(next > s->next_incident)
    s->next_incident = next;
  for(g = 0; g < s->n_gpus; g++) {
    uint32_t epoch;
    int k;
    if(!all[g].present)
      continue;
    /* Client ids belong to one daemon's life: an old one would name
     * whichever new client got the same number. 0 means "not connected"
     * (PROTOCOL.md, status). */
    for(k = 0; k < all[g].n; k++)
      all[g].inc[k].client = 0;
    epoch = all[g].epoch + 1 ? all[g].epoch + 1 : 1;
    if(hr__state_restore(s, g, all[g].raised, epoch, all[g].inc, all[g].uid,
                         all[g].n) ||
       hr__state_restore_raise(s, g, &all[g].raise)) {
      hr__why(HR_EINVAL, why, n, "gpu %d: cannot restore", g);
      goto out;
    }
    /* Write the moved-on epoch back, so two restarts in a row without a
     * change in between still never hand out an epoch twice. */
    s->dirty = 1;
  }
  rc = HR_OK;
out:
  cJSON_Delete(root);
  free(all);
  return rc;
}

/* ---- files ------------------------------------------------------------- */

int hr__persist_load(hr__persist *p, hr__state *s, long long now_s)
{
  char why[256], aside[sizeof(p->path) + 48];
  const char *tag = "corrupt";
  char *text = NULL;
  size_t len = 0;
  int rc, e;

  if(!p || !s)
    return HR_EINVAL;
  if(!p->enabled)
    return HR_OK;
  e = hr__read_file(p->path, HR__STATE_FILE_MAX, HR__OWNER_SELF, &text, &len,
                    why, sizeof(why));
  if(e == ENOENT) {
    hr__info("state: no %s yet; starting fresh", p->path);
    return HR_OK;
  }
  if(e == ENOMEM)
    return HR_ENOMEM;
  /* Not a file of ours (a link, a FIFO, a folder, another user's): none
   * of it is read, and it goes aside under a name that says so. */
  if(e == EPERM)
    tag = "refused";
  rc = e ? HR_EINVAL : hr__persist_decode(s, text, len, why, sizeof(why));
  free(text);
  if(rc == HR_ENOMEM)
    return rc;
  if(rc) {
    e = hr__set_aside(p->path, tag, now_s, aside, sizeof(aside));
    if(e)
      hr__err("state: %s is %s (%s) and could not be moved aside (%s); "
              "left where it is and ignored, starting fresh", p->path,
              tag, why, strerror(e));
    else
      hr__err("state: %s is %s (%s); moved to %s, starting fresh", p->path,
              tag, why, aside);
    return HR_OK;
  }
  hr__info("state: loaded %s", p->path);
  return HR_OK;
}

static int write_all(int fd, const char *data, size_t len)
{
  while(len) {
    ssize_t w = write(fd, data, len);
    if(w < 0) {
      if(errno == EINTR)
        continue;
      return -1;
    }
    data += w;
    len -= (size_t)w;
  }
  return 0;
}

/* Write `text` to p->path atomically. Returns 0, or an errno value with
 * the step that failed in `*step`; a failed attempt leaves no temporary
 * file behind. */
static int write_atomic(const hr__persist *p, const char *text,
                        const char **step)
{
  char tmp[sizeof(p->path) + 8];
  int fd = -1, dfd = -1, e = 0, tmp_made = 0;

  snprintf(tmp, sizeof(tmp), "%s.tmp", p->path);
  *step = "create";
  /* A new file, never one found there: whatever sits at the temporary
   * name (a leftover, or a link planted toward a file of ours to
   * clobber) is removed, and O_EXCL | O_NOFOLLOW refuse anything put
   * back in between. */
  if(unlink(tmp) && errno != ENOENT) {
    e = errno;
    goto out;
  }
  fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  if(fd < 0) {
    e = errno;
    goto out;
  }
  tmp_made = 1;
  *step = "write";
  if(write_all(fd, text, strlen(text)) || write_all(fd, "\n", 1)) {
    e = errno;
    goto out;
  }
  *step = "fsync";
  if(fsync(fd)) {
    e = errno;
    goto out;
  }
  *step = "close";
  e = close(fd) ? errno : 0;
  fd = -1;
  if(e)
    goto out;
  *step = "rename";
  if(rename(tmp, p->path)) {
    e = errno;
    goto out;
  }
  tmp_made = 0;
  /* The rename is durable only once the folder's entry is on disk. */
  *step = "fsync folder";
  dfd = open(p->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if(dfd < 0 || fsync(dfd))
    e = errno;
out:
  if(fd >= 0)
    close(fd);
  if(dfd >= 0)
    close(dfd);
  if(tmp_made)
    unlink(tmp);
  return e;
}

int hr__persist_save(hr__persist *p, const hr__state *s, long long now_ms)
{
  const char *step = "encode";
  char *text = NULL;
  int rc, e;

  if(!p || !s)
    return HR_EINVAL;
  if(!p->enabled)
    return HR_OK;
  rc = hr__persist_encode(s, now_ms, &text);
  if(rc)
    goto out;
  e = write_atomic(p, text, &step);
  if(e) {
    /* Once per run of failures: a full disk must not flood the log. */
    if(!p->failing)
      hr__warn("state: cannot save %s (%s: %s); will retry on the next "
               "change", p->path, step, strerror(e));
    p->failing = 1;
    rc = HR_EINTERNAL;
    goto out;
  }
  if(p->failing)
    hr__notice("state: %s written again", p->path);
  p->failing = 0;
out:
  free(text);
  return rc;
}
