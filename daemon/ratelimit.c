/*
 * ratelimit.c: the per-client token bucket (ratelimit.h).
 */
#include "ratelimit.h"

hr__rate_verdict hr__rate_take(hr__rate *r, uint64_t now_ms, int per_second,
                               int burst)
{
  int64_t full;

  if(!r || per_second <= 0)
    return HR__RATE_SERVE;
  if(burst < 1)
    burst = 1;
  full = (int64_t)burst * 1000;
  if(!r->started) {
    /* A new client starts with a full bucket: the messages of a resync
     * after a daemon restart arrive all at once. */
    r->started = 1;
    r->milli = full;
    r->last_ms = now_ms;
  } else if(now_ms > r->last_ms) {
    /* per_second messages a second is per_second milli-messages a ms. A
     * long silence only fills the bucket, so cap the gap before the
     * product can overflow. */
    uint64_t gap = now_ms - r->last_ms;
    if(gap > (uint64_t)full)
      gap = (uint64_t)full;
    r->milli += (int64_t)gap * per_second;
    if(r->milli > full)
      r->milli = full;
    r->last_ms = now_ms;
  }
  if(r->milli >= 1000) {
    r->milli -= 1000;
    r->refused = 0;
    return HR__RATE_SERVE;
  }
  if(r->refused < burst) {
    r->refused++;
    return HR__RATE_REFUSE;
  }
  return HR__RATE_CUT;
}
