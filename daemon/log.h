/*
 * log.h: one line per event on stderr.
 *
 * Each line starts with a syslog level prefix ("<3>" .. "<7>") that
 * systemd-journald turns into the entry's priority, so the daemon needs no
 * syslog or journal library: run by hand it is plain stderr, run as a
 * service the journal files each line under the right level.
 */
#ifndef HR_DAEMON_LOG_H
#define HR_DAEMON_LOG_H

/* Syslog's numbers, so the prefix is the level itself. */
typedef enum hr__log_level {
  HR_LOG_ERR = 3,
  HR_LOG_WARNING = 4,
  HR_LOG_NOTICE = 5,
  HR_LOG_INFO = 6,
  HR_LOG_DEBUG = 7
} hr__log_level;

/* Lines above `level` are dropped. The default is HR_LOG_INFO. */
void hr__log_set_level(hr__log_level level);
hr__log_level hr__log_get_level(void);

/* "err", "warning", "notice", "info", "debug" <-> level. */
int hr__log_level_from_name(const char *name, hr__log_level *out);
const char *hr__log_level_name(hr__log_level level);

#if defined(__GNUC__)
#define HR__PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define HR__PRINTF(a, b)
#endif

/* Log one event; a trailing newline is added, embedded ones are flattened
 * so one call is always one journal entry. */
void hr__log(hr__log_level level, const char *fmt, ...) HR__PRINTF(2, 3);

/* Write a reason into why[n] (when `why` is not NULL and `n` > 0) for the
 * caller to log or report, and return `rc`: the one way the config, the
 * file readers and the calibration say why they failed. */
int hr__why(int rc, char *why, size_t n, const char *fmt, ...)
  HR__PRINTF(4, 5);

#define hr__err(...) hr__log(HR_LOG_ERR, __VA_ARGS__)
#define hr__warn(...) hr__log(HR_LOG_WARNING, __VA_ARGS__)
#define hr__notice(...) hr__log(HR_LOG_NOTICE, __VA_ARGS__)
#define hr__info(...) hr__log(HR_LOG_INFO, __VA_ARGS__)
#define hr__debug(...) hr__log(HR_LOG_DEBUG, __VA_ARGS__)

#endif /* HR_DAEMON_LOG_H */
