/*
 * server.h: the listening socket.
 *
 * Either the one systemd passed (socket activation: fd 3), or one bound at
 * the configured path. Binding is careful with what is already there: a
 * stale socket (nobody listening) is replaced, a live one means another
 * daemon and we refuse to start, and anything that is not a socket is
 * never removed.
 */
#ifndef HR_DAEMON_SERVER_H
#define HR_DAEMON_SERVER_H

#include "daemon.h"

/* Start listening. Returns 0, or HR_E* after logging why at err level. */
int hr__server_listen(hr__daemon *d);

/* Stop accepting and remove the socket file if it is still the one we
 * created. Safe to call twice. */
void hr__server_close(hr__daemon *d);

#endif /* HR_DAEMON_SERVER_H */
