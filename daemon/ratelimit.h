/*
 * ratelimit.h: each client's message rate, as a token bucket.
 *
 * A client may send `per_second` messages a second on average, and up to
 * `burst` at once after a quiet spell. A message past that is refused: it
 * is answered limit_exceeded and not served, so a flood costs the daemon
 * a decode and a short reply, never a state change and the budget events
 * it would push to every subscriber. A client that goes on sending while
 * refused (more than `burst` refusals in a row, none served in between) is
 * not reading its errors; the caller disconnects it.
 *
 * No clock here: the caller passes the time, so the bucket is a pure
 * function of the times it is given (the tests drive it directly).
 */
#ifndef HR_DAEMON_RATELIMIT_H
#define HR_DAEMON_RATELIMIT_H

#include <stdint.h>

typedef struct hr__rate {
  int64_t milli;                    /* messages available, x1000 */
  uint64_t last_ms;                 /* when `milli` was last topped up */
  int started;                      /* the first message has been seen */
  int refused;                      /* refused in a row */
} hr__rate;

typedef enum hr__rate_verdict {
  HR__RATE_SERVE = 0,               /* within the rate */
  HR__RATE_REFUSE,                  /* over it: answer limit_exceeded */
  HR__RATE_CUT                      /* over it and not backing off */
} hr__rate_verdict;

/* Account one message at `now_ms` (any monotonic millisecond clock).
 * `per_second` 0 means no limit; `burst` is at least 1. */
hr__rate_verdict hr__rate_take(hr__rate *r, uint64_t now_ms, int per_second,
                               int burst);

#endif /* HR_DAEMON_RATELIMIT_H */
