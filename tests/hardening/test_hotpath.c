/*
 * test_hotpath.c: the lease reads a trainer makes before every launch
 * (hr_lease_grid, _headroom, _epoch, _degraded) make no system call.
 *
 * A thread installs a seccomp filter that allows it nothing but exit, then
 * reads a lease a million times. Any system call on that path raises
 * SIGSYS in the thread; the handler records which call it was and ends
 * the thread, and the test fails naming it. The filter is the kernel's
 * count, not a tool's, so this runs everywhere the suite runs (it skips,
 * saying so, where seccomp filters are not allowed, and under valgrind,
 * whose own system calls the filter would catch).
 *
 * The test is checked against itself too: the same thread with a getpid()
 * in the loop must be caught.
 */
#include <errno.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "headroom.h"

#define READS 1000000
#define SKIP 77

typedef struct probe {
  const hr_lease *lease;
  int cheat;                /* 1: make a system call in the loop */
  int installed;            /* the filter took */
  int err;                  /* errno of a failed install */
  uint64_t sum;
  long reads;
} probe;

static volatile sig_atomic_t caught_nr = -1;

/* Runs in the filtered thread: no system call but exit. */
static void on_sigsys(int sig, siginfo_t *si, void *ctx)
{
  (void)sig;
  (void)ctx;
  caught_nr = si->si_syscall;
  syscall(SYS_exit, 0);
}

static int install_filter(void)
{
  struct sock_filter f[] = {
    BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0),
    BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),
    BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_exit, 0, 1),
    BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_TRAP),
  };
  struct sock_fprog prog = {(unsigned short)(sizeof(f) / sizeof(f[0])), f};

  if(prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0))
    return -1;
  /* The filter applies to this thread only (no TSYNC). */
  return prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog);
}

static void *run_probe(void *arg)
{
  probe *p = arg;
  uint64_t sum = 0;
  long i;

  if(install_filter()) {
    p->err = errno;
    return NULL;
  }
  p->installed = 1;
  for(i = 0; i < READS; i++) {
    sum += (uint64_t)hr_lease_grid(p->lease);
    sum += (uint64_t)hr_lease_headroom(p->lease);
    sum += hr_lease_epoch(p->lease);
    sum += (uint64_t)hr_lease_degraded(p->lease);
    if(p->cheat && i == READS / 2)
      sum += (uint64_t)syscall(SYS_getpid);
    p->reads = i + 1;
  }
  p->sum = sum;
  /* Leave as the filter allows: glibc's thread exit makes other calls. */
  syscall(SYS_exit, 0);
  return NULL;
}

static int run(const hr_lease *l, int cheat, probe *p)
{
  pthread_t t;

  memset(p, 0, sizeof(*p));
  p->lease = l;
  p->cheat = cheat;
  caught_nr = -1;
  if(pthread_create(&t, NULL, run_probe, p))
    return -1;
  pthread_join(t, NULL);
  return 0;
}

int main(void)
{
  const char *pre = getenv("LD_PRELOAD");
  hr_client_options o;
  struct sigaction sa;
  hr_client *c;
  hr_lease *l;
  probe p;
  int grid;

  if(pre && strstr(pre, "vgpreload")) {
    printf("SKIP: test_hotpath: under valgrind, whose own system calls the "
           "filter would catch\n");
    return SKIP;
  }
  /* No daemon: a degraded lease reads exactly as a daemon's does. */
  memset(&o, 0, sizeof(o));
  o.quiet = 1;
  o.reconnect_ms = 1000000;
  if(hr_client_open(&c, "/nonexistent/headroom-hotpath.sock", &o) ||
     hr_lease_acquire(c, 0, 2, HR_MODE_HEADROOM, &l)) {
    printf("FAIL: test_hotpath: cannot open a degraded client\n");
    return 1;
  }
  grid = hr_lease_grid(l);      /* every function once: any lazy binding */
  (void)hr_lease_headroom(l);   /* is resolved before the filter */
  (void)hr_lease_epoch(l);
  (void)hr_lease_degraded(l);

  memset(&sa, 0, sizeof(sa));
  sa.sa_sigaction = on_sigsys;
  sa.sa_flags = SA_SIGINFO;
  sigaction(SIGSYS, &sa, NULL);

  if(run(l, 1, &p)) {
    printf("FAIL: test_hotpath: pthread_create\n");
    return 1;
  }
  if(!p.installed) {
    printf("SKIP: test_hotpath: cannot install a seccomp filter here (%s)\n",
           strerror(p.err));
    return SKIP;
  }
  if(caught_nr != SYS_getpid) {
    printf("FAIL: test_hotpath: the filter did not catch a getpid() in the "
           "loop (caught %d)\n", (int)caught_nr);
    return 1;
  }
  printf("ok: the filter catches a system call in the loop (getpid after "
         "%ld reads)\n", p.reads);

  run(l, 0, &p);
  if(caught_nr >= 0 || p.reads != READS) {
    printf("FAIL: test_hotpath: the lease read made system call %d after "
           "%ld reads\n", (int)caught_nr, p.reads);
    return 1;
  }
  if(p.sum == 0 || grid <= 0) {
    printf("FAIL: test_hotpath: the reads returned nothing (grid %d)\n", grid);
    return 1;
  }
  printf("ok: %d x 4 lease reads (grid %d) made no system call\n", READS,
         grid);
  hr_lease_release(l);
  hr_client_close(c);
  return 0;
}
