/*
 * hotpath.c: hr_lease_grid called N times on a lease, for counting its
 * instructions (valgrind --tool=callgrind --toggle-collect=hr_lease_grid)
 * and its system calls: the loop sits between two getppid() calls, which
 * nothing else here makes, so `strace -o FILE hotpath N` (the main thread
 * only) shows every system call of the loop between the two markers.
 *
 *   hotpath N
 *
 * The lease is a degraded one (no daemon): the read is the same load of
 * the same word either way.
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "headroom.h"

int main(int argc, char **argv)
{
  hr_client_options o = {0};
  hr_client *c;
  hr_lease *l;
  long n, i;
  long long sum = 0;

  n = argc > 1 ? atol(argv[1]) : 1000000;
  o.quiet = 1;
  o.reconnect_ms = INT_MAX;     /* the I/O thread sleeps, no retries */
  if(hr_client_open(&c, "/nonexistent/headroom-hotpath.sock", &o) ||
     hr_lease_acquire(c, 0, 2, HR_MODE_HEADROOM, &l))
    return 1;
  syscall(SYS_getppid);         /* marker: the loop starts */
  for(i = 0; i < n; i++)
    sum += hr_lease_grid(l);
  syscall(SYS_getppid);         /* marker: the loop ended */
  printf("%ld calls, grid %d, sum %lld\n", n, hr_lease_grid(l), sum);
  hr_lease_release(l);
  hr_client_close(c);
  return 0;
}
