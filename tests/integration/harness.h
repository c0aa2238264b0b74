/*
 * harness.h: start a real headroomd on a temporary socket, and talk to it
 * either through libheadroom or through a raw socket (for the requests the
 * library never sends: garbage, half lines, other users, status).
 */
#ifndef HR_TEST_HARNESS_H
#define HR_TEST_HARNESS_H

#include <stddef.h>
#include <sys/types.h>

#include "hr_proto.h"

typedef struct hr_daemon {
  char dir[256];                /* temporary folder, removed at stop */
  char socket[300];
  char config[300];
  char state_dir[300];
  char log[300];
  pid_t pid;
} hr_daemon;

/* Build folder of the binaries: $HEADROOM_BUILD or "build". */
const char *th_build_dir(void);

/* Create the folder and a config (`extra` is appended to it; may be NULL),
 * then start headroomd and wait until it accepts connections. */
int th_daemon_start(hr_daemon *d, const char *extra);
/* Start again on the same folder, socket and state (after a kill). */
int th_daemon_restart(hr_daemon *d);
/* SIGTERM and wait; returns the exit status (or -1 on a signal/timeout). */
int th_daemon_stop(hr_daemon *d);
/* SIGKILL and reap. */
void th_daemon_kill(hr_daemon *d);
/* Remove the folder. */
void th_daemon_cleanup(hr_daemon *d);
/* Print the daemon's log (on failure, to see why). */
void th_daemon_dump_log(const hr_daemon *d);
/* Whether the first 64 KiB of the daemon's log hold `needle`. */
int th_daemon_log_has(const hr_daemon *d, const char *needle);
/* How many lines of the whole log hold `needle`. */
int th_daemon_log_count(const hr_daemon *d, const char *needle);

/* A raw connection with its own line buffer. */
typedef struct th_raw {
  int fd;
  size_t len;
  char buf[2 * HR_PROTO_MAX_LINE];
} th_raw;

int th_raw_connect(th_raw *r, const char *path);
void th_raw_close(th_raw *r);
int th_raw_send(th_raw *r, const void *data, size_t len);
int th_raw_send_str(th_raw *r, const char *s);
/* Format one line (at most 4 KiB), add its '\n' and send it; -1 when it
 * does not fit or cannot be sent. */
int th_raw_send_line(th_raw *r, const char *fmt, ...)
  __attribute__((format(printf, 2, 3)));
/* Read one line (without '\n') into out; returns its length, -1 on EOF or
 * error, -2 on timeout. */
long th_raw_read_line(th_raw *r, char *out, size_t cap, int timeout_ms);
/* Read lines until a reply (not an event) arrives and decode it. */
int th_raw_reply(th_raw *r, hr_reply *rep, int timeout_ms);
/* Encode and send a request, then wait for its reply. */
int th_raw_request(th_raw *r, const hr_request *req, hr_reply *rep);
/* Send a lease request with `id` and wait for its reply (the lease, or
 * an error: what the daemon says to a request the library would not
 * send, or before the library's own checks). */
int th_raw_lease(th_raw *r, int64_t id, int gpu, int cluster, hr_mode mode,
                 hr_reply *rep);
/* Connect and say hello. */
int th_raw_open(th_raw *r, const char *path);

/* Fetch the daemon's status over a fresh connection; hr_status_free it. */
int th_status(const char *path, hr_status *st);
/* The same for the daemon's metrics (nothing to free). */
int th_metrics(const char *path, hr_metrics *m);

/* Run a program to completion with a timeout; returns its exit code, or
 * -1 when it was killed. stdout goes to `out` (may be NULL) if given. */
int th_run(char *const argv[], const char *out_path, int timeout_ms);

/* Check the JSON status in the file `path` against
 * proto/status.schema.json (tests/integration/validate_json.py); the
 * checker's exit code, 0 when it is valid. */
int th_status_validate(const char *path);
/* Decode one line that `headroomctl --json` printed (`n` bytes, no
 * newline): the protocol's reply without its wire id, so the id is put
 * back for the protocol's own decoder. 0, or -1 when it does not decode. */
int th_ctl_decode(const char *line, size_t n, hr_reply *rep);

/* Wait until the lease's grid is `grid`, from pushed updates only (the
 * caller never asks the daemon); 0, or -1 after `timeout_ms`. */
struct hr_lease;
int th_wait_grid(const struct hr_lease *l, int grid, int timeout_ms);

/* Milliseconds on a monotonic clock. */
long long th_now_ms(void);

/* ---- harness_cmocka.c ------------------------------------------------------
 * For the cmocka tests only (the stress program links harness.c without
 * cmocka): these fail the running test instead of returning an error. */

/* A quiet client of `d` named `name` (may be NULL), retrying every
 * `reconnect_ms` (0: the library's default), whether or not the daemon
 * is up. */
struct hr_client;
struct hr_client *th_client_open(const hr_daemon *d, const char *name,
                                 int reconnect_ms);
/* The same, connected to the daemon when it returns. */
struct hr_client *th_client_open_connected(const hr_daemon *d,
                                           const char *name,
                                           int reconnect_ms);
/* The whole of a file, NUL-terminated; free() it. */
char *th_file_read(const char *path);
/* Write `text` to the file `path`, replacing what was there. */
void th_file_write(const char *path, const char *text);
/* Run headroomctl on `d`'s socket with `args` (NULL-terminated, at most
 * 8); the test fails unless it exits 0. What it printed is left in
 * <d->dir>/ctl.out (for th_status_validate) and returned: free() it. */
char *th_ctl(const hr_daemon *d, const char *const *args);
/* Run `argv` (th_run, 5 s) with stdout into `out_path`; the test fails
 * unless it exits 0 and prints a line. That first line, '\n' kept, into
 * `line`: what headroom-run's command echoes of the environment it got. */
void th_run_line(char *const argv[], const char *out_path, char *line,
                 size_t cap);

#endif /* HR_TEST_HARNESS_H */
