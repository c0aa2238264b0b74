/*
 * daemon.c: start-up, signals, timers, reload and shutdown (daemon.h).
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "calibration.h"
#include "conn.h"
#include "daemon.h"
#include "dispatch.h"
#include "log.h"
#include "notify.h"
#include "peer.h"
#include "server.h"
#include "topology.h"

/* How long clients get to read their shutdown event before the daemon
 * closes what is left and exits. */
#define STOP_GRACE_MS 3000
#define STATUS_PERIOD_MS 1000

int64_t hr__daemon_time_ms(void)
{
  struct timespec ts;

  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* "8 GPUs x 132 SMs", or a list when they differ. */
static void describe_topology(const hr_topology *t, char *buf, size_t n)
{
  size_t len;
  int g, same = 1;

  for(g = 1; g < t->n_gpus; g++)
    if(t->gpus[g].sms != t->gpus[0].sms)
      same = 0;
  if(same) {
    snprintf(buf, n, "%d GPU%s x %d SMs", t->n_gpus,
             t->n_gpus == 1 ? "" : "s", t->gpus[0].sms);
  } else {
    len = (size_t)snprintf(buf, n, "%d GPUs, SMs:", t->n_gpus);
    for(g = 0; g < t->n_gpus && len < n; g++)
      len += (size_t)snprintf(buf + len, n - len, " %d", t->gpus[g].sms);
  }
  if(t->n_gpus > 0 && t->gpus[0].name[0]) {
    len = strlen(buf);
    if(len < n)
      snprintf(buf + len, n - len, ", %s", t->gpus[0].name);
  }
}

/* "partitions in steps of 8 SMs", or of each GPU's when they differ. */
static void describe_granularity(const hr_topology *t, const int *gran,
                                 char *buf, size_t n)
{
  size_t len;
  int g, same = 1;

  for(g = 1; g < t->n_gpus; g++)
    if(gran[g] != gran[0])
      same = 0;
  if(same && gran[0]) {
    snprintf(buf, n, "partitions in steps of %d SMs", gran[0]);
  } else if(same) {
    snprintf(buf, n, "no partition mode");
  } else {
    len = (size_t)snprintf(buf, n, "partition steps (0: none):");
    for(g = 0; g < t->n_gpus && len < n; g++)
      len += (size_t)snprintf(buf + len, n - len, " %d", gran[g]);
  }
}

/* ---- persistence, sd_notify -------------------------------------------- */

void hr__daemon_save(hr__daemon *d)
{
  if(!d || !d->state.dirty)
    return;
  d->state.dirty = 0;
  hr__persist_save(&d->persist, &d->state, hr__daemon_time_ms());
}

/* Once per loop turn, after all I/O callbacks: many changes in one turn
 * cost one write, and each change is on disk before the loop sleeps.
 * Replies held back for that write (reports: conn.h) go out after it. */
static void on_check(uv_check_t *h)
{
  hr__daemon *d = h->data;

  hr__dispatch_flush(d); /* events of closes outside a read callback */
  hr__daemon_save(d);
  if(hr__conn_release_all(d)) {
    /* A release can cut off a client that does not read: its state goes,
     * and the loop may sleep next, so push and save that now. */
    hr__dispatch_flush(d);
    hr__daemon_save(d);
  }
}

static void send_status(hr__daemon *d)
{
  char line[sizeof(d->last_status)];

  snprintf(line, sizeof(line), "STATUS=serving %d client%s on %d GPU%s",
           d->n_clients, d->n_clients == 1 ? "" : "s", d->state.n_gpus,
           d->state.n_gpus == 1 ? "" : "s");
  if(!strcmp(line, d->last_status))
    return;
  memcpy(d->last_status, line, sizeof(line));
  hr__notify(line);
}

static void on_status_timer(uv_timer_t *t)
{
  send_status(t->data);
}

static void on_watchdog(uv_timer_t *t)
{
  (void)t;
  hr__notify("WATCHDOG=1");
}

static void start_notify_timers(hr__daemon *d)
{
  uint64_t usec = hr__notify_watchdog_usec();
  uint64_t ms;

  if(usec) {
    /* Half the interval, as systemd advises: one late turn is not death. */
    ms = usec / 2000;
    if(ms < 1)
      ms = 1;
    uv_timer_init(d->loop, &d->watchdog);
    d->watchdog.data = d;
    uv_timer_start(&d->watchdog, on_watchdog, ms, ms);
    uv_unref((uv_handle_t *)&d->watchdog);
    d->watchdog_on = 1;
    hr__info("systemd watchdog: pinging every %llu ms",
             (unsigned long long)ms);
  }
  if(getenv("NOTIFY_SOCKET")) {
    uv_timer_init(d->loop, &d->status_timer);
    d->status_timer.data = d;
    uv_timer_start(&d->status_timer, on_status_timer, STATUS_PERIOD_MS,
                   STATUS_PERIOD_MS);
    uv_unref((uv_handle_t *)&d->status_timer);
    d->status_on = 1;
  }
}

/* The operator group's gid, looked up here (config load and reload) so
 * that no connection waits on the group database. A group that does not
 * resolve makes only root an operator: say so, or an operator would find
 * out from a permission_denied. */
static long resolve_operator_group(const char *group)
{
  long gid = hr__peer_group_gid(group);

  if(group[0] && gid < 0)
    hr__warn("operator_group '%s' does not exist: only root may set policy",
             group);
  return gid;
}

/* Each client costs a descriptor. Raise the soft limit toward the hard
 * one so max_clients can really be served; where that is not allowed
 * (a seccomp filter, a low hard limit) say what will happen instead. */
static void fit_fd_limit(int max_clients)
{
  struct rlimit rl;
  rlim_t want = (rlim_t)max_clients + 64; /* listener, logs, state, CUDA */

  if(getrlimit(RLIMIT_NOFILE, &rl) || rl.rlim_cur >= want)
    return;
  if(rl.rlim_max != RLIM_INFINITY && rl.rlim_max < want)
    want = rl.rlim_max;
  if(want > rl.rlim_cur) {
    rlim_t old = rl.rlim_cur;
    rl.rlim_cur = want;
    if(setrlimit(RLIMIT_NOFILE, &rl))
      rl.rlim_cur = old;
  }
  if(rl.rlim_cur < (rlim_t)max_clients + 64)
    hr__warn("open file limit %llu is below max_clients (%d) + 64: "
             "connections past it will fail to be accepted",
             (unsigned long long)rl.rlim_cur, max_clients);
}

/* ---- signals ----------------------------------------------------------- */

static void on_signal(uv_signal_t *h, int signum)
{
  hr__daemon *d = h->data;

  if(signum == SIGHUP) {
    hr__daemon_reload(d);
    return;
  }
  hr__daemon_stop(d, signum == SIGTERM ? "SIGTERM" : "SIGINT");
}

static void watch_signal(hr__daemon *d, uv_signal_t *h, int signum)
{
  uv_signal_init(d->loop, h);
  h->data = d;
  uv_signal_start(h, on_signal, signum);
}

/* ---- calibration ------------------------------------------------------- */

/* Read the calibration file the config names (or the default one) and put
 * it in force; a file that is bad in any way is logged with the reason
 * and the GPUs run on theory: half-trusted measurements are worse than
 * none. */
static void load_calibration(hr__daemon *d, const hr__config *cfg,
                             hr__gpu_mask *changed)
{
  char path[HR__CONFIG_PATH_MAX + 32], why[HR__CALIB_PATH_MAX + 512];
  hr__calibration *c = NULL;
  int rc, covered, explicit_ = cfg->calibration[0] != '\0';

  if(explicit_)
    snprintf(path, sizeof(path), "%s", cfg->calibration);
  else
    snprintf(path, sizeof(path), "%s/%s", cfg->state_dir,
             HR__CALIBRATION_FILE);
  c = malloc(sizeof(*c));
  if(!c) {
    hr__err("calibration: out of memory; using the policy's theory");
    goto out;
  }
  rc = hr__calibration_load(c, path, hr__daemon_time_ms() / 1000, why,
                            sizeof(why));
  if(rc == HR_ENOTFOUND && !explicit_) {
    hr__debug("calibration: none at %s; using the policy's theory", path);
  } else if(rc) {
    hr__err("calibration %s: %s; ignored, using the policy's theory", path,
            why);
  }
  covered = hr__state_set_calibration(&d->state, rc ? NULL : c, changed);
  if(covered < 0)
    hr__err("calibration: out of memory; using the policy's theory");
  else if(!rc)
    hr__notice("calibration %s: measured %s on %s (NCCL %s), %d budgets, "
               "covers %d of %d GPUs", path, c->date, c->node,
               c->nccl_version, c->n_budgets, covered, d->state.n_gpus);
out:
  free(c);
}

/* ---- start ------------------------------------------------------------- */

int hr__daemon_start(hr__daemon *d, uv_loop_t *loop, const hr__config *cfg,
                     const hr__config_flags *flags)
{
  char why[256], topo[256], parts[256], err[HR__CONFIG_ERR_MAX];

  memset(d, 0, sizeof(*d));
  d->loop = loop;
  d->cfg = *cfg;
  if(flags)
    d->flags = *flags;
  d->start_ns = uv_hrtime();
  hr_buf_init(&d->out, HR_PROTO_MAX_LINE);
  hr__log_set_level(cfg->log_level);
  hr__notice("headroomd %s starting (config: %s)", HR_VERSION_STRING,
             cfg->file[0] ? cfg->file : "none, built-in defaults");

  if(hr__topology_detect(cfg, &d->topo, d->granularity, why, sizeof(why))) {
    hr__err("topology: %s", why);
    return HR_EINVAL;
  }
  describe_topology(&d->topo, topo, sizeof(topo));
  hr__notice("topology: %s (%s)", topo, why);
  if(hr__config_check_policy(cfg, &d->topo, err, sizeof(err))) {
    hr__err("config: %s", err);
    return HR_EINVAL;
  }
  describe_granularity(&d->topo, d->granularity, parts, sizeof(parts));
  hr__notice("green contexts: %s%s", parts,
             cfg->partition_ignore_coscheduling ?
             " (partition_ignore_coscheduling)" : "");

  if(hr__state_init(&d->state, &d->topo, d->granularity, &cfg->policy)) {
    hr__err("cannot set up per-GPU state");
    return 1;
  }
  d->state.raise_interval_ms = (int64_t)cfg->incident_raise_interval * 1000;
  d->state.uid_of = hr__dispatch_uid_of;
  d->state.uid_ctx = d;
  /* Before the learned state, whose restore recomputes without bumping
   * the epoch it restores. */
  load_calibration(d, cfg, NULL);
  if(!hr__persist_open(&d->persist, cfg->state_dir) &&
     hr__persist_load(&d->persist, &d->state, hr__daemon_time_ms() / 1000)) {
    hr__err("state: out of memory loading %s", d->persist.path);
    return 1;
  }
  fit_fd_limit(cfg->max_clients);
  /* Signals before the socket: whoever sees the daemon accept may stop
   * it at once, and a SIGTERM with no handler yet would kill it outright
   * (no final save, no clean exit status). */
  watch_signal(d, &d->sig_hup, SIGHUP);
  watch_signal(d, &d->sig_term, SIGTERM);
  watch_signal(d, &d->sig_int, SIGINT);
  d->operator_gid = resolve_operator_group(cfg->operator_group);
  d->has_operator_gid = d->operator_gid >= 0;
  if(hr__server_listen(d))
    return 1;

  uv_check_init(loop, &d->save_check);
  d->save_check.data = d;
  uv_check_start(&d->save_check, on_check);
  uv_unref((uv_handle_t *)&d->save_check);
  start_notify_timers(d);

  hr__notice("policy: min_headroom %d, max_headroom %d, min_grid %d, "
             "incident_raise %s", d->state.policy.min_headroom,
             d->state.policy.max_headroom, d->state.policy.min_grid,
             d->state.policy.incident_raise ? "yes" : "no");
  hr__notify("READY=1");
  send_status(d);
  return 0;
}

/* ---- reload ------------------------------------------------------------ */

static int policy_equal(const hr_policy *a, const hr_policy *b)
{
  return a->min_headroom == b->min_headroom &&
         a->max_headroom == b->max_headroom && a->min_grid == b->min_grid &&
         a->incident_raise == b->incident_raise;
}

/* Keys read once at start: a reload notes their change but keeps them. */
static void keep_restart_only(hr__daemon *d, hr__config *next)
{
  const hr__config *cur = &d->cfg;

  if(strcmp(cur->socket, next->socket) ||
     cur->socket_mode != next->socket_mode)
    hr__notice("reload: socket settings changed; they apply at restart");
  if(strcmp(cur->state_dir, next->state_dir))
    hr__notice("reload: state_dir changed; it applies at restart");
  if(cur->topology != next->topology || cur->gpus != next->gpus ||
     cur->sms != next->sms ||
     memcmp(cur->gpu_sms, next->gpu_sms, sizeof(cur->gpu_sms)))
    hr__notice("reload: topology settings changed; they apply at restart");
  if(cur->partition_ignore_coscheduling != next->partition_ignore_coscheduling)
    hr__notice("reload: partition_ignore_coscheduling changed; it applies "
               "at restart");
  memcpy(next->socket, cur->socket, sizeof(next->socket));
  next->socket_mode = cur->socket_mode;
  memcpy(next->state_dir, cur->state_dir, sizeof(next->state_dir));
  next->topology = cur->topology;
  next->gpus = cur->gpus;
  next->sms = cur->sms;
  memcpy(next->gpu_sms, cur->gpu_sms, sizeof(next->gpu_sms));
  /* Clients split their GPUs by the step they were told: a partition
   * made in steps of 2 is not one in steps of 8. */
  next->partition_ignore_coscheduling = cur->partition_ignore_coscheduling;
}

void hr__daemon_reload(hr__daemon *d)
{
  char err[HR__CONFIG_ERR_MAX];
  hr__gpu_mask changed = 0;
  hr__config next;
  hr__conn *c;
  long gid;

  if(d->stopping)
    return;
  hr__notice("SIGHUP: reloading %s",
             d->flags.config ? d->flags.config : HR__DEFAULT_CONFIG);
  if(hr__config_build(&next, &d->flags, err, sizeof(err))) {
    hr__err("reload failed, keeping the running configuration: %s", err);
    return;
  }
  keep_restart_only(d, &next);
  /* The topology stays the one the daemon started with: the policy must
   * hold on those GPUs, or the old one stays in force. */
  if(hr__config_check_policy(&next, &d->topo, err, sizeof(err))) {
    hr__err("reload failed, keeping the running configuration: %s", err);
    return;
  }
  hr__log_set_level(next.log_level);
  d->state.raise_interval_ms = (int64_t)next.incident_raise_interval * 1000;
  /* The file's policy wins on reload, over one set at run time too: the
   * file is what the operator wants the node to run with. */
  if(!policy_equal(&next.policy, &d->state.policy)) {
    hr__state_set_policy(&d->state, &next.policy, &changed);
    hr__notice("reload: policy now min_headroom %d, max_headroom %d, "
               "min_grid %d, incident_raise %s", next.policy.min_headroom,
               next.policy.max_headroom, next.policy.min_grid,
               next.policy.incident_raise ? "yes" : "no");
  }
  /* Re-read even when the path is the same: calibrating a node rewrites
   * the file in place, then signals the daemon. */
  load_calibration(d, &next, &changed);
  /* Looked up again even when the name is the same: the group database
   * may have changed under it. */
  gid = resolve_operator_group(next.operator_group);
  if(gid != (d->has_operator_gid ? d->operator_gid : -1)) {
    d->operator_gid = gid;
    d->has_operator_gid = gid >= 0;
    for(c = d->conns; c; c = c->next)
      if(!c->closing && c->id)
        hr__conn_check_operator(c);
  }
  d->cfg = next;
  hr__notice("reload done (log level %s)",
             hr__log_level_name(next.log_level));
  d->pending |= changed;
  hr__dispatch_flush(d);
}

/* ---- stop -------------------------------------------------------------- */

static void close_handle(uv_handle_t *h)
{
  if(!uv_is_closing(h))
    uv_close(h, NULL);
}

static void on_stop_timer(uv_timer_t *t)
{
  hr__daemon *d = t->data;
  hr__conn *c, *next;
  int n = 0;

  for(c = d->conns; c; c = next) {
    next = c->next;
    hr__conn_close(c, "daemon stopped");
    n++;
  }
  if(n)
    hr__notice("stop: closed %d connection%s that had not finished", n,
               n == 1 ? "" : "s");
  close_handle((uv_handle_t *)t);
}

void hr__daemon_stop(hr__daemon *d, const char *why)
{
  hr__conn *c, *next;

  if(d->stopping) {
    hr__notice("%s: already stopping", why);
    return;
  }
  hr__notice("%s: stopping", why);
  hr__notify("STOPPING=1");
  /* Budgets still owed go out before the goodbye. */
  hr__dispatch_flush(d);
  d->stopping = 1;
  hr__server_close(d);
  for(c = d->conns; c; c = next) {
    next = c->next;
    hr__dispatch_send_shutdown(c, why);
    hr__conn_drain(c, "daemon stopping");
  }
  close_handle((uv_handle_t *)&d->sig_hup);
  close_handle((uv_handle_t *)&d->sig_term);
  close_handle((uv_handle_t *)&d->sig_int);
  close_handle((uv_handle_t *)&d->save_check);
  if(d->watchdog_on)
    close_handle((uv_handle_t *)&d->watchdog);
  if(d->status_on)
    close_handle((uv_handle_t *)&d->status_timer);
  /* Drains end by themselves; this only bounds a client that never reads
   * (it is unref'd so it never keeps the loop alive on its own). */
  uv_timer_init(d->loop, &d->stop_timer);
  d->stop_timer.data = d;
  uv_timer_start(&d->stop_timer, on_stop_timer, STOP_GRACE_MS, 0);
  uv_unref((uv_handle_t *)&d->stop_timer);
  d->stop_timer_on = 1;
  hr__daemon_save(d);
}

/* Close whatever is still open (a failed start) and let libuv finish. */
static void close_all(uv_handle_t *h, void *arg)
{
  (void)arg;
  close_handle(h);
}

int hr__daemon_run(hr__daemon *d)
{
  int rc;

  rc = uv_run(d->loop, UV_RUN_DEFAULT);
  (void)rc;
  hr__daemon_save(d);
  hr__server_close(d);
  uv_walk(d->loop, close_all, NULL);
  uv_run(d->loop, UV_RUN_DEFAULT);
  hr__state_free(&d->state);
  hr_buf_free(&d->out);
  hr__notice("stopped");
  return 0;
}

void hr__daemon_abort(hr__daemon *d)
{
  hr__server_close(d);
  uv_walk(d->loop, close_all, NULL);
  uv_run(d->loop, UV_RUN_DEFAULT);
  hr__state_free(&d->state);
  hr_buf_free(&d->out);
}
