/*
 * notify.c: sd_notify and socket activation, spoken directly (notify.h).
 */
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "notify.h"

int hr__notify(const char *state)
{
  const char *path = getenv("NOTIFY_SOCKET");
  struct sockaddr_un sa;
  socklen_t salen;
  size_t len;
  ssize_t w;
  int fd;

  if(!state)
    return -EINVAL;
  if(!path || !*path)
    return 0;
  len = strlen(path);
  if((path[0] != '/' && path[0] != '@') || len >= sizeof(sa.sun_path))
    return -EINVAL;
  memset(&sa, 0, sizeof(sa));
  sa.sun_family = AF_UNIX;
  memcpy(sa.sun_path, path, len);
  if(path[0] == '@')
    sa.sun_path[0] = '\0'; /* Linux abstract namespace */
  salen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len);
  fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if(fd < 0)
    return -errno;
  w = sendto(fd, state, strlen(state), MSG_NOSIGNAL, (struct sockaddr *)&sa,
             salen);
  close(fd);
  return w < 0 ? -errno : 1;
}

/* A decimal environment variable, -1 when absent or malformed. */
static long long env_number(const char *name)
{
  const char *v = getenv(name);
  char *end;
  long long n;

  if(!v || !*v)
    return -1;
  errno = 0;
  n = strtoll(v, &end, 10);
  if(errno || *end || n < 0)
    return -1;
  return n;
}

uint64_t hr__notify_watchdog_usec(void)
{
  long long usec = env_number("WATCHDOG_USEC");
  long long pid = env_number("WATCHDOG_PID");

  if(usec <= 0)
    return 0;
  if(pid >= 0 && pid != (long long)getpid())
    return 0;
  return (uint64_t)usec;
}

int hr__notify_listen_fd(void)
{
  long long pid = env_number("LISTEN_PID");
  long long fds = env_number("LISTEN_FDS");
  int fd = -1;

  if(pid == (long long)getpid() && fds >= 1) {
    fd = HR__LISTEN_FDS_START;
    /* Our own descriptor from now on: not for the children we never
     * start, and not to be mistaken for theirs. */
    fcntl(fd, F_SETFD, FD_CLOEXEC);
  }
  unsetenv("LISTEN_PID");
  unsetenv("LISTEN_FDS");
  unsetenv("LISTEN_FDNAMES");
  return fd;
}
