/*
 * metrics.h: the daemon's counters, and the reply to "metrics".
 *
 * The dispatcher counts as it serves: each line by the request type it
 * named, each error reply by its code, the time from a line being framed
 * to its reply being queued, the degraded time clients report in hello,
 * and incidents by GPU and kind. Gauges (clients, footprints, leases, the
 * budgets) are not kept here: hr__metrics_build reads them from the live
 * state when asked, so they can never drift from what status shows.
 *
 * Counters only go up, from 0 at start (a restart resets them, as
 * Prometheus expects of a counter), and stop at 2^53 - 1, the protocol's
 * largest integer, rather than wrap.
 */
#ifndef HR_DAEMON_METRICS_H
#define HR_DAEMON_METRICS_H

#include <stdint.h>

#include "hr_proto.h"

struct hr__daemon;

typedef struct hr__metrics {
  int64_t requests[HR_MSG_COUNT];   /* [HR_MSG_NONE]: did not decode */
  int64_t errors[HR_WERR_COUNT];
  int64_t latency[HR_METRICS_BUCKETS];
  int64_t latency_count, latency_sum_us;
  int64_t resumed, degraded_ms;
  int64_t incidents[HR_MAX_GPUS][HR_INCIDENT_COUNT];
  int64_t events_coalesced;
} hr__metrics;

/* One line served, naming `type` (HR_MSG_NONE: it did not decode). */
void hr__metrics_request(hr__metrics *m, hr_msg_type type);

/* One error reply with `code`. */
void hr__metrics_error(hr__metrics *m, hr_wire_error code);

/* One request's latency, framed to reply queued, in nanoseconds. */
void hr__metrics_latency(hr__metrics *m, uint64_t ns);

/* One line answered with an error before it was served (over the client's
 * message rate, or over the size limit), `ns` after it was framed: counted
 * as a request of `type` (HR_MSG_NONE: it was not read), an error of
 * `code` and a latency, as a served line is, so that the requests add up
 * to the successful replies plus the errors. */
void hr__metrics_refused(hr__metrics *m, hr_msg_type type,
                         hr_wire_error code, uint64_t ns);

/* A hello from a client that ran `degraded_ms` (> 0) without a daemon. */
void hr__metrics_resumed(hr__metrics *m, int64_t degraded_ms);

/* An incident of `kind` reported on `gpu`. */
void hr__metrics_incident(hr__metrics *m, int gpu, hr_incident_kind kind);

/* Budget events still owed to a subscriber replaced by a newer budget
 * before they were sent: one per bit of `gpus`. */
void hr__metrics_coalesced(hr__metrics *m, uint64_t gpus);

/* Fill `out` from the counters and the daemon's live state. */
int hr__metrics_build(struct hr__daemon *d, hr_metrics *out);

#endif /* HR_DAEMON_METRICS_H */
