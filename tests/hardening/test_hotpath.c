/*
 * test_hotpath.c: the lease reads a trainer makes before every launch
 * (hr_lease_grid, _headroom, _epoch, _degraded) make no system call.
 *
 * A child process (forked from one holding a lease) installs a seccomp
 * filter that allows it nothing but exit_group, then reads the lease a
 * million times. Any system call on that path raises SIGSYS; the handler
 * records which call it was in memory shared with the parent and exits,
 * and the test fails naming it. The filter is the kernel's count, not a
 * tool's, so this runs everywhere the suite runs (it skips, saying so,
 * where seccomp filters are not allowed, and under valgrind, whose own
 * system calls the filter would catch).
 *
 * The test is checked against itself too: the same loop with a getpid()
 * in it must be caught.
 */
#include <errno.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "headroom.h"

#define READS 1000000
#define SKIP 77

/* Shared between the parent and the filtered child. */
typedef struct probe {
  int installed;            /* the filter took */
  int err;                  /* errno of a failed install */
  int caught;               /* the system call the filter caught, or -1 */
  long reads;               /* loop iterations done */
  uint64_t sum;
} probe;

static probe *shared;

/* Runs in the filtered child: no system call but exit_group. */
static void on_sigsys(int sig, siginfo_t *si, void *ctx)
{
  (void)sig;
  (void)ctx;
  shared->caught = si->si_syscall;
  syscall(SYS_exit_group, 3);
}

static int install_filter(void)
{
  struct sock_filter f[] = {
    BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0),
    BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),
    BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_exit_group, 0, 1),
    BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_TRAP),
  };
  struct sock_fprog prog = {(unsigned short)(sizeof(f) / sizeof(f[0])), f};

  if(prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0))
    return -1;
  return prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog);
}

/* The child: the client's I/O thread is not copied by fork, but the
 * lease is, word and all: the read is the same instructions. */
static void probe_main(const hr_lease *l, int cheat)
{
  uint64_t sum = 0;
  long i;

  if(install_filter()) {
    shared->err = errno;
    _exit(2);
  }
  shared->installed = 1;
  for(i = 0; i < READS; i++) {
    sum += (uint64_t)hr_lease_grid(l);
    sum += (uint64_t)hr_lease_headroom(l);
    sum += hr_lease_epoch(l);
    sum += (uint64_t)hr_lease_degraded(l);
    if(cheat && i == READS / 2)
      sum += (uint64_t)syscall(SYS_getpid);
    shared->reads = i + 1;
  }
  shared->sum = sum;
  /* Straight out, as the filter allows: exit() would flush and free. */
  syscall(SYS_exit_group, 0);
}

static int run(const hr_lease *l, int cheat)
{
  int status;
  pid_t pid;

  memset(shared, 0, sizeof(*shared));
  shared->caught = -1;
  pid = fork();
  if(pid < 0)
    return -1;
  if(pid == 0)
    probe_main(l, cheat);
  if(waitpid(pid, &status, 0) != pid)
    return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

int main(void)
{
  const char *pre = getenv("LD_PRELOAD");
  hr_client_options o;
  struct sigaction sa;
  hr_client *c;
  hr_lease *l;
  int grid, rc;

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

  shared = mmap(NULL, sizeof(*shared), PROT_READ | PROT_WRITE,
                MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if(shared == MAP_FAILED) {
    printf("FAIL: test_hotpath: mmap\n");
    return 1;
  }
  memset(&sa, 0, sizeof(sa));
  sa.sa_sigaction = on_sigsys;
  sa.sa_flags = SA_SIGINFO;
  sigaction(SIGSYS, &sa, NULL);

  rc = run(l, 1);
  if(!shared->installed) {
    printf("SKIP: test_hotpath: cannot install a seccomp filter here (%s)\n",
           strerror(shared->err));
    return SKIP;
  }
  if(rc != 3 || shared->caught != SYS_getpid) {
    printf("FAIL: test_hotpath: the filter did not catch a getpid() in the "
           "loop (exit %d, caught %d)\n", rc, shared->caught);
    return 1;
  }
  printf("ok: the filter catches a system call in the loop (getpid after "
         "%ld reads)\n", shared->reads);

  rc = run(l, 0);
  if(rc != 0 || shared->caught >= 0 || shared->reads != READS) {
    printf("FAIL: test_hotpath: the lease read made system call %d after "
           "%ld reads (exit %d)\n", shared->caught, shared->reads, rc);
    return 1;
  }
  if(shared->sum == 0 || grid <= 0) {
    printf("FAIL: test_hotpath: the reads returned nothing (grid %d)\n",
           grid);
    return 1;
  }
  printf("ok: %d x 4 lease reads (grid %d) made no system call\n", READS,
         grid);
  hr_lease_release(l);
  hr_client_close(c);
  return 0;
}
