/*
 * hr_clock.h: the monotonic clock, in the units its callers count in.
 *
 * One definition for the library, the daemon's tools, the kernels' host
 * code, the benchmarks and the tests: header-only, so a program that links
 * nothing of libheadroom (a benchmark, the CUDA host code) can use it, and
 * C and C++ alike can include it.
 */
#ifndef HR_CLOCK_H
#define HR_CLOCK_H

#include <stdint.h>
#include <time.h>

/* Nanoseconds, and milliseconds, on CLOCK_MONOTONIC. */
static inline int64_t hr__clock_ns(void)
{
  struct timespec ts;

  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static inline int64_t hr__clock_ms(void)
{
  return hr__clock_ns() / 1000000;
}

/* The absolute CLOCK_MONOTONIC time `ms` (>= 0) from now, for
 * pthread_cond_timedwait on a condition variable set to that clock. */
static inline void hr__clock_deadline(struct timespec *ts, int ms)
{
  clock_gettime(CLOCK_MONOTONIC, ts);
  ts->tv_sec += ms / 1000;
  ts->tv_nsec += (long)(ms % 1000) * 1000000L;
  if(ts->tv_nsec >= 1000000000L) {
    ts->tv_sec++;
    ts->tv_nsec -= 1000000000L;
  }
}

#endif /* HR_CLOCK_H */
