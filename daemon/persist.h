/*
 * persist.h: the learned state file, <state_dir>/state.json.
 *
 * What the daemon learns and must not forget across restarts: per GPU the
 * headroom raised by incidents, the epoch (so a restarted daemon's epochs
 * keep going up), and the recent incidents. Footprints and leases are not
 * kept: they belong to connections, which a restart ends.
 *
 * Writes are atomic (temporary file, fsync, rename, fsync of the folder),
 * so a crash leaves the old file or the new one, never half of either.
 * Reading opens no link and blocks on nothing (hr__read_file): anything
 * but a regular file of the daemon's user (a link, a FIFO, a folder,
 * another user's file) is moved aside unread as
 * state.json.refused-<unix time>; a file that fails to parse or check as
 * state.json.corrupt-<unix time> (.1, .2, ... after either when that name
 * is taken: one never replaces another). Neither is trusted.
 */
#ifndef HR_DAEMON_PERSIST_H
#define HR_DAEMON_PERSIST_H

#include <stddef.h>

#include "config.h"
#include "state.h"

#define HR__STATE_FILE "state.json"
#define HR__STATE_FORMAT 1
#define HR__STATE_FILE_MAX (16 * 1024 * 1024)

typedef struct hr__persist {
  int enabled;                      /* 0: no usable state_dir */
  int failing;                      /* the last save failed (log once) */
  char dir[HR__CONFIG_PATH_MAX];
  char path[HR__CONFIG_PATH_MAX + 16];
} hr__persist;

/* Create `state_dir` (and its parents) if missing. On failure logs a
 * warning, leaves persistence off and returns the error; the daemon runs
 * on without it. */
int hr__persist_open(hr__persist *p, const char *state_dir);

/* Load the file into `s` (whose topology is already set). No file: HR_OK
 * with nothing restored. A corrupt one is moved aside, logged, and HR_OK
 * with nothing restored. `now_s` names the moved file. */
int hr__persist_load(hr__persist *p, hr__state *s, long long now_s);

/* Save `s` atomically; logs a failure (once per run of failures). */
int hr__persist_save(hr__persist *p, const hr__state *s, long long now_ms);

/* The codec alone, for tests: JSON text (malloc'd, caller frees) and
 * back. Decoding checks everything before touching `s`. */
int hr__persist_encode(const hr__state *s, long long now_ms, char **out);
int hr__persist_decode(hr__state *s, const char *text, size_t len,
                       char *why, size_t n);

#endif /* HR_DAEMON_PERSIST_H */
