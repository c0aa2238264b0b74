/*
 * daemon.h: the headroomd process: one libuv loop and everything it owns.
 *
 * One thread, one loop. Connections (conn.c) frame lines and queue
 * writes; the dispatcher (dispatch.c) turns each request into a state
 * change (state.c) and a reply; the daemon itself (daemon.c) owns the
 * listener, the signals, the timers and the persistence of learned state.
 */
#ifndef HR_DAEMON_DAEMON_H
#define HR_DAEMON_DAEMON_H

#include <stdint.h>
#include <sys/types.h>

#include <uv.h>

#include "config.h"
#include "hr_proto.h"
#include "metrics.h"
#include "persist.h"
#include "state.h"
#include "tenant.h"

typedef struct hr__conn hr__conn;

typedef struct hr__daemon {
  uv_loop_t *loop;
  hr__config cfg;                   /* in force */
  hr__config_flags flags;           /* kept for SIGHUP: flags still win */
  hr_topology topo;
  int granularity[HR_MAX_GPUS];     /* green-context step of each GPU */
  hr__state state;
  hr__persist persist;
  /* cfg.operator_group resolved at load and reload. A daemon zeroed and
   * never started (the fuzz target's) has no operator group: root only. */
  int has_operator_gid;
  long operator_gid;

  /* The listener (server.c). */
  uv_pipe_t listener;
  int listening;
  int activated;                    /* the socket came from systemd */
  int bound;                        /* we created the socket file */
  dev_t sock_dev;                   /* ... this one, so we unlink only it */
  ino_t sock_ino;

  uv_signal_t sig_hup, sig_term, sig_int;
  uv_check_t save_check;            /* saves learned state once per turn */
  uv_timer_t save_timer;            /* ... or within SAVE_PERIOD_MS */
  int save_timer_on;
  uv_timer_t watchdog;              /* WATCHDOG=1 to systemd */
  uv_timer_t status_timer;          /* STATUS= to systemd */
  uv_timer_t stop_timer;            /* bounds a shutdown's flush */
  int watchdog_on, status_on, stop_timer_on;
  char last_status[128];

  hr__conn *conns;                  /* every open connection */
  int n_clients;                    /* accepted, not closing */
  hr__tenants tenants;              /* per-uid counts (tenant.h) */
  uint64_t refusals_logged_ms;      /* last refusal at connect logged */
  int refusals_quiet;               /* ... and those not logged since */
  uint64_t start_ns;                /* uv_hrtime() at start */
  int64_t requests;                 /* lines served */
  hr__metrics metrics;              /* counters for "metrics" (dispatch.c) */
  hr__gpu_mask pending;             /* budgets to push (dispatch.c) */
  hr__gpu_mask ev_valid;            /* ev[g] holds GPU g's newest budget */
  hr_buf ev[HR_MAX_GPUS];           /* encoded budget events, per GPU */
  int n_holding;                    /* connections holding sends (conn.c) */
  int flushing;
  hr_buf out;                       /* encoder scratch, one message */
  int stopping;
} hr__daemon;

/* Set everything up and start listening: topology, state, persistence,
 * socket, signals, sd_notify. `cfg` was built by hr__config_build.
 * Returns 0; after logging why the daemon cannot start, HR_EINVAL when
 * the configuration cannot run on this node's GPUs (the topology, the
 * policy), else 1. */
int hr__daemon_start(hr__daemon *d, uv_loop_t *loop, const hr__config *cfg,
                     const hr__config_flags *flags);

/* Run until stopped by SIGTERM/SIGINT; then free everything. Returns the
 * process exit status. */
int hr__daemon_run(hr__daemon *d);

/* Undo a start that failed half way: close what was opened, free. */
void hr__daemon_abort(hr__daemon *d);

/* Begin an orderly stop: no more accepts, a shutdown event to each client,
 * flush, close. `why` goes into the event and the log. */
void hr__daemon_stop(hr__daemon *d, const char *why);

/* Re-read the config file (SIGHUP). An invalid file changes nothing. */
void hr__daemon_reload(hr__daemon *d);

/* Free what the daemon owns beside its state and handles: the encoder
 * buffers, the cached events, the per-uid table (the run and the abort
 * call it; so does a caller that set a daemon up by hand). */
void hr__daemon_free_owned(hr__daemon *d);

/* Save the learned state now if it changed since the last save. */
void hr__daemon_save(hr__daemon *d);

/* Milliseconds since the Unix epoch (incident times). */
int64_t hr__daemon_time_ms(void);

#endif /* HR_DAEMON_DAEMON_H */
