/*
 * server.c: the listening socket (see server.h).
 */
#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "conn.h"
#include "fsutil.h"
#include "log.h"
#include "notify.h"
#include "server.h"

#define BACKLOG 128

static void on_connection(uv_stream_t *listener, int status)
{
  hr__daemon *d = listener->data;

  if(status < 0) {
    /* EMFILE and friends: the pending connection stays queued and we
     * are called again; say so, but do not stop serving others. */
    hr__warn("accept: %s", uv_strerror(status));
    return;
  }
  hr__conn_accept(d);
}

/* Is a daemon listening on the socket at `path`? 1 yes, 0 no (stale),
 * < 0 cannot tell (errno value negated). */
static int socket_live(const char *path)
{
  struct sockaddr_un sa;
  int fd, rc, e;

  memset(&sa, 0, sizeof(sa));
  sa.sun_family = AF_UNIX;
  memcpy(sa.sun_path, path, strlen(path) + 1);
  fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if(fd < 0)
    return -errno;
  rc = connect(fd, (struct sockaddr *)&sa, sizeof(sa));
  e = errno;
  close(fd);
  if(rc == 0)
    return 1;
  if(e == ECONNREFUSED)
    return 0;
  if(e == EAGAIN)
    return 1; /* listening, with a full backlog: very much alive */
  return -e;
}

/* Make room for the socket at `path`: parent folder, stale file. */
static int prepare_path(const char *path)
{
  char dir[HR__SOCKET_PATH_MAX];
  struct stat st;
  int e, live;

  e = hr__dirname(path, dir, sizeof(dir));
  if(!e)
    e = hr__mkdirs(dir, 0755);
  if(e) {
    hr__err("socket %s: cannot create its folder %s: %s", path, dir,
            strerror(e));
    return HR_EINTERNAL;
  }
  if(lstat(path, &st)) {
    if(errno == ENOENT)
      return HR_OK;
    hr__err("socket %s: %s", path, strerror(errno));
    return HR_EINTERNAL;
  }
  if(!S_ISSOCK(st.st_mode)) {
    hr__err("socket %s: exists and is not a socket; refusing to remove it",
            path);
    return HR_EINTERNAL;
  }
  live = socket_live(path);
  if(live > 0) {
    hr__err("socket %s: another headroomd is already listening there; "
            "not starting a second one", path);
    return HR_EINTERNAL;
  }
  if(live < 0) {
    hr__err("socket %s: cannot tell whether a daemon is listening (%s); "
            "not replacing it", path, strerror(-live));
    return HR_EINTERNAL;
  }
  if(unlink(path) && errno != ENOENT) {
    hr__err("socket %s: stale, but cannot remove it: %s", path,
            strerror(errno));
    return HR_EINTERNAL;
  }
  hr__notice("socket %s: removed a stale socket (nobody was listening)",
             path);
  return HR_OK;
}

static int listen_activated(hr__daemon *d, int fd)
{
  int rc;

  uv_pipe_init(d->loop, &d->listener, 0);
  d->listener.data = d;
  d->listening = 1;
  rc = uv_pipe_open(&d->listener, fd);
  if(!rc)
    rc = uv_listen((uv_stream_t *)&d->listener, BACKLOG, on_connection);
  if(rc) {
    hr__err("socket from systemd (fd %d): %s", fd, uv_strerror(rc));
    return HR_EINTERNAL;
  }
  d->activated = 1;
  hr__notice("listening on the socket systemd passed (fd %d)", fd);
  return HR_OK;
}

static int listen_bound(hr__daemon *d)
{
  const char *path = d->cfg.socket;
  struct stat st;
  mode_t old;
  int rc;

  rc = prepare_path(path);
  if(rc)
    return rc;
  uv_pipe_init(d->loop, &d->listener, 0);
  d->listener.data = d;
  d->listening = 1;
  /* Born private; opened up to socket_mode only once it is ours. */
  old = umask(0177);
  rc = uv_pipe_bind(&d->listener, path);
  umask(old);
  if(rc) {
    hr__err("socket %s: bind: %s%s", path, uv_strerror(rc),
            rc == UV_EADDRINUSE ? " (another daemon started at the same "
            "time?)" : "");
    return HR_EINTERNAL;
  }
  d->bound = 1;
  if(!stat(path, &st)) {
    d->sock_dev = st.st_dev;
    d->sock_ino = st.st_ino;
  }
  if(chmod(path, d->cfg.socket_mode)) {
    hr__err("socket %s: chmod %04o: %s", path, d->cfg.socket_mode,
            strerror(errno));
    return HR_EINTERNAL;
  }
  rc = uv_listen((uv_stream_t *)&d->listener, BACKLOG, on_connection);
  if(rc) {
    hr__err("socket %s: listen: %s", path, uv_strerror(rc));
    return HR_EINTERNAL;
  }
  hr__notice("listening on %s (mode %04o)", path, d->cfg.socket_mode);
  return HR_OK;
}

int hr__server_listen(hr__daemon *d)
{
  int fd = hr__notify_listen_fd();

  if(fd >= 0)
    return listen_activated(d, fd);
  return listen_bound(d);
}

void hr__server_close(hr__daemon *d)
{
  struct stat st;

  if(d->listening && !uv_is_closing((uv_handle_t *)&d->listener))
    uv_close((uv_handle_t *)&d->listener, NULL);
  d->listening = 0;
  if(!d->bound)
    return;
  d->bound = 0;
  /* Only our own socket: if someone replaced it meanwhile, it is theirs. */
  if(!lstat(d->cfg.socket, &st) && S_ISSOCK(st.st_mode) &&
     st.st_dev == d->sock_dev && st.st_ino == d->sock_ino)
    unlink(d->cfg.socket);
}
