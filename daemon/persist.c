/*
 * persist.c: the learned state file (see persist.h).
 *
 * This is the one place in the daemon that builds JSON with cJSON
 * directly: the state file is not a wire message, so it does not go
 * through proto/; every message on the socket still does.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stddef.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "fsutil.h"
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

/* An integer member in [min, max]. cJSON's valueint saturates, so the
 * double is checked: it must be finite, whole and in range. */
static int get_int(const cJSON *o, const char *key, double min, double max,
                   long long *out)
{
  const cJSON *it = cJSON_GetObjectItemCaseSensitive(o, key);
  double v;

  if(!cJSON_IsNumber(it))
    return HR_EINVAL;
  v = it->valuedouble;
  /* Range first: only then is the cast below defined. */
  if(!isfinite(v) || v < min || v > max || (double)(long long)v != v)
    return HR_EINVAL;
  *out = (long long)v;
  return HR_OK;
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

static int decode_incident(const cJSON *o, hr_status_incident *inc,
                           int *uid, char *why, size_t n)
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
  const cJSON *kind, *msg, *d;
  long long v;
  hr_incident_kind k;
  size_t i;

  if(!cJSON_IsObject(o))
    return fail(why, n, "incident is not an object");
  memset(inc, 0, sizeof(*inc));
  if(get_int(o, "id", 1, HR_PROTO_MAX_ID, &v))
    return fail(why, n, "incident id");
  inc->id = v;
  if(get_int(o, "time_ms", 0, HR_PROTO_MAX_ID, &v))
    return fail(why, n, "incident %lld: time_ms", (long long)inc->id);
  inc->time_ms = v;
  if(get_int(o, "client", 0, HR_PROTO_MAX_ID, &v))
    return fail(why, n, "incident %lld: client", (long long)inc->id);
  inc->client = v;
  if(get_int(o, "lease", 0, HR_PROTO_MAX_ID, &v))
    return fail(why, n, "incident %lld: lease", (long long)inc->id);
  inc->lease = v;
  /* Absent in a file from before per-uid quotas: unknown. */
  *uid = -1;
  if(cJSON_GetObjectItemCaseSensitive(o, "uid")) {
    if(get_int(o, "uid", -1, 2147483647.0, &v))
      return fail(why, n, "incident %lld: uid", (long long)inc->id);
    *uid = (int)v;
  }
  kind = cJSON_GetObjectItemCaseSensitive(o, "kind");
  if(!cJSON_IsString(kind) ||
     hr_incident_kind_from_name(kind->valuestring, &k))
    return fail(why, n, "incident %lld: kind", (long long)inc->id);
  inc->kind = k;
  msg = cJSON_GetObjectItemCaseSensitive(o, "message");
  if(!cJSON_IsString(msg) || strlen(msg->valuestring) >= HR_MESSAGE_MAX)
    return fail(why, n, "incident %lld: message", (long long)inc->id);
  memcpy(inc->message, msg->valuestring, strlen(msg->valuestring) + 1);
  d = cJSON_GetObjectItemCaseSensitive(o, "detail");
  if(!cJSON_IsObject(d))
    return fail(why, n, "incident %lld: detail", (long long)inc->id);
  for(i = 0; i < sizeof(det) / sizeof(det[0]); i++) {
    if(get_int(d, det[i].key, -2147483648.0, 2147483647.0, &v))
      return fail(why, n, "incident %lld: detail.%s", (long long)inc->id,
                  det[i].key);
    *(int *)((char *)&inc->detail + det[i].off) = (int)v;
  }
  return HR_OK;
}

static int decode_gpu(const cJSON *o, const hr__state *s, learned *all,
                      char *why, size_t n)
{
  const cJSON *incs, *it, *r;
  learned *l;
  long long idx, sms, v;
  int i;

  if(!cJSON_IsObject(o))
    return fail(why, n, "gpu entry is not an object");
  if(get_int(o, "gpu", 0, HR_MAX_GPUS - 1, &idx))
    return fail(why, n, "gpu index");
  if(get_int(o, "sms", 1, HR_MAX_SMS, &sms))
    return fail(why, n, "gpu %lld: sms", idx);
  l = &all[idx];
  if(l->present)
    return fail(why, n, "gpu %lld listed twice", idx);
  l->present = 1;
  if(get_int(o, "raised", 0, HR_MAX_SMS, &v))
    return fail(why, n, "gpu %lld: raised", idx);
  l->raised = (int)v;
  l->raise.last_uid = -1;
  if((r = cJSON_GetObjectItemCaseSensitive(o, "raise"))) {
    if(!cJSON_IsObject(r) || get_int(r, "raises", 0, 2147483647.0, &v))
      return fail(why, n, "gpu %lld: raise.raises", idx);
    l->raise.raises = (int)v;
    if(get_int(r, "last_ms", 0, HR_PROTO_MAX_ID, &v))
      return fail(why, n, "gpu %lld: raise.last_ms", idx);
    l->raise.last_ms = v;
    if(get_int(r, "last_uid", -1, 2147483647.0, &v))
      return fail(why, n, "gpu %lld: raise.last_uid", idx);
    l->raise.last_uid = (int)v;
    if(get_int(r, "last_incident", 0, HR_PROTO_MAX_ID, &v))
      return fail(why, n, "gpu %lld: raise.last_incident", idx);
    l->raise.last_incident = v;
  }
  if(get_int(o, "epoch", 1, 4294967295.0, &v))
    return fail(why, n, "gpu %lld: epoch", idx);
  l->epoch = (uint32_t)v;
  incs = cJSON_GetObjectItemCaseSensitive(o, "incidents");
  if(!cJSON_IsArray(incs))
    return fail(why, n, "gpu %lld: incidents", idx);
  i = 0;
  cJSON_ArrayForEach(it, incs) {
    /* Keep the newest: shift out the oldest once the array is full. */
    if(i == HR__INCIDENTS_KEPT) {
      memmove(&l->inc[0], &l->inc[1],
              (HR__INCIDENTS_KEPT - 1) * sizeof(l->inc[0]));
      memmove(&l->uid[0], &l->uid[1],
              (HR__INCIDENTS_KEPT - 1) * sizeof(l->uid[0]));
      i--;
    }
    if(decode_incident(it, &l->inc[i], &l->uid[i], why, n))
      return HR_EINVAL;
    i++;
  }
  l->n = i;
  /* Learned on other hardware (a different GPU at this index, or a
   * changed config topology): its lessons do not apply here. */
  if(idx >= s->n_gpus || s->gpus[idx].info.sms != sms) {
    hr__notice("state file: gpu %lld (%lld SMs) is not in this topology; "
               "its learned state is ignored", idx, sms);
    l->present = 0;
  }
  return HR_OK;
}

int hr__persist_decode(hr__state *s, const char *text, size_t len, char *why,
                       size_t n)
{
  cJSON *root = NULL;
  const cJSON *gpus, *it;
  learned *all = NULL;
  long long v;
  int rc = HR_EINVAL, g;

  if(!s || !text)
    return fail(why, n, "no input");
  all = calloc(HR_MAX_GPUS, sizeof(*all));
  if(!all)
    return HR_ENOMEM;
  root = cJSON_ParseWithLength(text, len);
  if(!root) {
    fail(why, n, "not valid JSON (truncated?)");
    goto out;
  }
  if(!cJSON_IsObject(root)) {
    fail(why, n, "not a JSON object");
    goto out;
  }
  if(get_int(root, "format", HR__STATE_FORMAT, HR__STATE_FORMAT, &v)) {
    fail(why, n, "missing or unknown format (want %d)", HR__STATE_FORMAT);
    goto out;
  }
  if(get_int(root, "next_incident", 1, HR_PROTO_MAX_ID, &v)) {
    fail(why, n, "next_incident");
    goto out;
  }
  gpus = cJSON_GetObjectItemCaseSensitive(root, "gpus");
  if(!cJSON_IsArray(gpus)) {
    fail(why, n, "gpus is not an array");
    goto out;
  }
  cJSON_ArrayForEach(it, gpus) {
    if(decode_gpu(it, s, all, why, n))
      goto out;
  }
  /* Everything checked: only now touch the live state. A restart is a
   * change (the old daemon's footprints and leases are gone), so the
   * epoch moves on from the saved one. */
  if(v > s->next_incident)
    s->next_incident = v;
  for(g = 0; g < s->n_gpus; g++) {
    uint32_t epoch;
    int i;
    if(!all[g].present)
      continue;
    /* Client ids belong to one daemon's life: an old one would name
     * whichever new client got the same number. 0 means "not connected"
     * (PROTOCOL.md, status). */
    for(i = 0; i < all[g].n; i++)
      all[g].inc[i].client = 0;
    epoch = all[g].epoch + 1 ? all[g].epoch + 1 : 1;
    if(hr__state_restore(s, g, all[g].raised, epoch, all[g].inc, all[g].uid,
                         all[g].n) ||
       hr__state_restore_raise(s, g, &all[g].raise)) {
      fail(why, n, "gpu %d: cannot restore", g);
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

/* Move a damaged file aside under a name nothing has yet:
 * state.json.corrupt-<now_s>, then the same with .1, .2, ... Two damaged files
 * set aside in the same second (a daemon restarted in a loop) must both
 * be kept, so the name is taken with link(2), which never replaces what
 * is there, and the file is unlinked only once it has its new name. On a
 * file system without hard links, rename(2) after checking that the name
 * is free (nothing else writes in the state folder). Returns 0 with the
 * name in `aside`, or an errno value. */
#define ASIDE_TRIES 1000

static int set_aside(const hr__persist *p, long long now_s, char *aside,
                     size_t n)
{
  int i, e = EEXIST;

  for(i = 0; i < ASIDE_TRIES && e == EEXIST; i++) {
    if(i == 0)
      snprintf(aside, n, "%s.corrupt-%lld", p->path, now_s);
    else
      snprintf(aside, n, "%s.corrupt-%lld.%d", p->path, now_s, i);
    e = link(p->path, aside) ? errno : 0;
    if(e == EPERM || e == EOPNOTSUPP || e == EXDEV) {
      if(!access(aside, F_OK))
        e = EEXIST;
      else
        e = rename(p->path, aside) ? errno : 0;
      if(!e)
        return 0;
    }
  }
  if(e)
    return e;
  if(unlink(p->path)) {
    /* Both names on one file: the next save replaces state.json with a
     * new file and the set-aside one keeps the damaged bytes. */
    hr__warn("state: cannot remove %s after linking it to %s (%s)", p->path,
             aside, strerror(errno));
  }
  return 0;
}

int hr__persist_load(hr__persist *p, hr__state *s, long long now_s)
{
  char why[256], aside[sizeof(p->path) + 48];
  char *text = NULL;
  size_t len = 0;
  int rc, e;

  if(!p || !s)
    return HR_EINVAL;
  if(!p->enabled)
    return HR_OK;
  e = hr__read_file(p->path, HR__STATE_FILE_MAX, &text, &len);
  rc = e == ENOENT ? HR_ENOTFOUND : e == ENOMEM ? HR_ENOMEM :
       e ? HR_EINVAL : HR_OK;
  if(rc == HR_ENOTFOUND) {
    hr__info("state: no %s yet; starting fresh", p->path);
    return HR_OK;
  }
  if(rc == HR_ENOMEM)
    return rc;
  if(rc)
    snprintf(why, sizeof(why), "unreadable or larger than %d bytes",
             HR__STATE_FILE_MAX);
  else
    rc = hr__persist_decode(s, text, len, why, sizeof(why));
  free(text);
  if(rc == HR_ENOMEM)
    return rc;
  if(rc) {
    e = set_aside(p, now_s, aside, sizeof(aside));
    if(e)
      hr__err("state: %s is corrupt (%s) and could not be moved aside (%s); "
              "ignoring it", p->path, why, strerror(e));
    else
      hr__err("state: %s is corrupt (%s); moved to %s, starting fresh",
              p->path, why, aside);
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
