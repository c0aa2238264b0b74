/*
 * notify.h: the systemd service protocol, without libsystemd.
 *
 * sd_notify is one datagram of "KEY=VALUE" lines to $NOTIFY_SOCKET;
 * socket activation hands us listening sockets from fd 3 on, named by
 * $LISTEN_PID and $LISTEN_FDS. Both are small enough to speak directly,
 * which keeps the daemon free of a dependency for a few lines of code.
 * Everything here is a no-op when not run by systemd.
 */
#ifndef HR_DAEMON_NOTIFY_H
#define HR_DAEMON_NOTIFY_H

#include <stdint.h>

#define HR__LISTEN_FDS_START 3

/* Send `state` ("READY=1", "STATUS=...", ...) when $NOTIFY_SOCKET is set.
 * Returns 1 sent, 0 not run under a notify socket, < 0 on error. */
int hr__notify(const char *state);

/* The watchdog interval in microseconds, 0 when the watchdog is off (or
 * meant for another process). */
uint64_t hr__notify_watchdog_usec(void);

/* The socket systemd passed (fd 3) when it is meant for this process,
 * else -1. The LISTEN_* variables are cleared so children do not inherit
 * them. */
int hr__notify_listen_fd(void);

#endif /* HR_DAEMON_NOTIFY_H */
