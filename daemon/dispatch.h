/*
 * dispatch.h: a decoded request becomes a state change, a reply, events.
 *
 * Order on the wire: a request's reply is queued first, then the budget
 * events its change caused, to every subscriber of the GPUs concerned.
 * Events are collected in the daemon's pending mask and pushed by
 * hr__dispatch_flush, which the connection code calls once it is done
 * with a read, so one event per GPU carries the latest budget.
 */
#ifndef HR_DAEMON_DISPATCH_H
#define HR_DAEMON_DISPATCH_H

#include <stddef.h>

#include "conn.h"
#include "daemon.h"

/* Serve one line (without its '\n') from `c`. */
void hr__dispatch_line(hr__conn *c, const char *line, size_t len);

/* `c` is closing: drop its footprints and leases; events are pending. */
void hr__dispatch_gone(hr__conn *c);

/* Push a budget event for each GPU in d->pending to its subscribers. */
void hr__dispatch_flush(hr__daemon *d);

/* The uid of the connected client `client` of daemon `ctx`, -1 when it
 * is gone: the state's uid_of (state.h), so a raise leaves out every
 * footprint of the reporter's uid. */
int hr__dispatch_uid_of(const void *ctx, int64_t client);

/* Send the shutdown event to `c`. */
int hr__dispatch_send_shutdown(hr__conn *c, const char *why);

#endif /* HR_DAEMON_DISPATCH_H */
