/*
 * dispatch.h: a decoded request becomes a state change, a reply, events.
 *
 * Order on the wire: a request's reply is queued first, then the budget
 * events its change caused, to every subscriber of the GPUs concerned.
 * Events are collected in the daemon's pending mask and marked owed by
 * hr__dispatch_flush, which the connection code calls once it is done
 * with a read; each subscriber is sent, when its socket can take it, one
 * event per owed GPU with that GPU's budget as it is then (conn.h). An
 * event is encoded once per change, whatever the subscribers.
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

/* GPUs in `changed` have a new budget: to be pushed at the next flush. */
void hr__dispatch_pend(hr__daemon *d, hr__gpu_mask changed);

/* Owe each subscriber of a GPU in d->pending its budget, and send what
 * every subscriber whose socket can take it is owed. */
void hr__dispatch_flush(hr__daemon *d);

/* Send `c` the budget events it is owed (hr__conn_can_push must hold). */
void hr__dispatch_push(hr__conn *c);

/* The uid of the connected client `client` of daemon `ctx`, -1 when it
 * is gone: the state's uid_of (state.h), so a raise leaves out every
 * footprint of the reporter's uid. */
int hr__dispatch_uid_of(const void *ctx, int64_t client);

/* Send the shutdown event to `c`. */
int hr__dispatch_send_shutdown(hr__conn *c, const char *why);

#endif /* HR_DAEMON_DISPATCH_H */
