/*
 * trials_daemon.h: the real headroomd of an overlap-trials run, and what
 * headroomctl says about it.
 *
 * The daemon runs on a socket and state folder inside the run's temporary
 * folder, with its log there; it is stopped with SIGTERM at the end, and a
 * daemon that died during the run, or did not exit 0 when told to, fails
 * the run.
 */
#ifndef HR_TRIALS_DAEMON_H
#define HR_TRIALS_DAEMON_H

#include <stddef.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tr_daemon {
  pid_t pid;
  char socket[512];
  char log[512];
} tr_daemon;

/* Write dir/headroomd.conf (`config`: its lines), start `bin` on
 * dir/headroom.sock with state in dir/state, and wait until a client gets
 * an answer (10 s). 0, or -1 with the reason (the daemon is then
 * stopped). */
int tr_daemon_start(tr_daemon *d, const char *bin, const char *dir,
                    const char *config, char *why, size_t n);

/* 1 while the daemon runs; 0 when it has exited (and says how in why). */
int tr_daemon_alive(tr_daemon *d, char *why, size_t n);

/* SIGTERM, then wait (10 s; then SIGKILL). 0 when it exited with status
 * 0, else -1 with how it ended. */
int tr_daemon_stop(tr_daemon *d, char *why, size_t n);

/* Print the last `lines` lines of the daemon's log on stdout. */
void tr_daemon_log_tail(const tr_daemon *d, int lines);

/* One GPU of `headroomctl metrics --json`. */
typedef struct tr_gpu_metrics {
  int headroom, grid, epoch, nccl_max_ctas, raised;
  int barrier_timeouts;
  int comm_ctas;
} tr_gpu_metrics;

/* Run `ctl` --socket S metrics --json and read GPU `gpu`. */
int tr_daemon_gpu_metrics(const char *ctl, const char *socket, int gpu,
                          tr_gpu_metrics *out, char *why, size_t n);

#ifdef __cplusplus
}
#endif

#endif /* HR_TRIALS_DAEMON_H */
