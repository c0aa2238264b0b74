/*
 * fsutil.c: mkdir -p and dirname without modifying their argument,
 * reading a whole small file that must be ours, and moving one aside.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fsutil.h"
#include "log.h"

#define PATH_BUF 4096

int hr__mkdirs(const char *path, mode_t mode)
{
  char buf[PATH_BUF];
  size_t len, i;
  struct stat st;

  if(!path || !*path)
    return EINVAL;
  len = strlen(path);
  if(len >= sizeof(buf))
    return ENAMETOOLONG;
  memcpy(buf, path, len + 1);
  for(i = 1; i <= len; i++) {
    if(buf[i] != '/' && buf[i] != '\0')
      continue;
    buf[i] = '\0';
    if(mkdir(buf, mode) && errno != EEXIST)
      return errno;
    buf[i] = path[i];
  }
  if(stat(path, &st))
    return errno;
  return S_ISDIR(st.st_mode) ? 0 : ENOTDIR;
}

int hr__dirname(const char *path, char *out, size_t n)
{
  const char *slash = strrchr(path, '/');
  size_t len;

  if(!slash) {
    if(n < 2)
      return ENAMETOOLONG;
    memcpy(out, ".", 2);
    return 0;
  }
  len = slash == path ? 1 : (size_t)(slash - path); /* "/x" -> "/" */
  if(len >= n)
    return ENAMETOOLONG;
  memcpy(out, path, len);
  out[len] = '\0';
  return 0;
}

/* What fstat says `st` is, for a refusal's reason. */
static const char *file_kind(const struct stat *st)
{
  if(S_ISDIR(st->st_mode))
    return "a folder";
  if(S_ISFIFO(st->st_mode))
    return "a FIFO";
  if(S_ISSOCK(st->st_mode))
    return "a socket";
  if(S_ISCHR(st->st_mode) || S_ISBLK(st->st_mode))
    return "a device";
  return "not a regular file";
}

int hr__read_file(const char *path, size_t max, int owners, char **out,
                  size_t *len, char *why, size_t n)
{
  struct stat st;
  char *buf = NULL;
  size_t got = 0;
  int fd, e = 0;

  *out = NULL;
  *len = 0;
  fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if(fd < 0) {
    e = errno;
    if(e == ENOENT)
      return e;
    if(e == ELOOP)
      return hr__why(EPERM, why, n, "a symbolic link, not followed");
    /* A socket cannot be opened at all: say what it is. */
    if(e == ENXIO && !lstat(path, &st))
      return hr__why(EPERM, why, n, "%s", file_kind(&st));
    return hr__why(e, why, n, "cannot open: %s", strerror(e));
  }
  if(fstat(fd, &st)) {
    e = hr__why(errno, why, n, "cannot stat: %s", strerror(errno));
    goto out;
  }
  if(!S_ISREG(st.st_mode)) {
    e = hr__why(EPERM, why, n, "%s", file_kind(&st));
    goto out;
  }
  if(st.st_uid != geteuid() &&
     !(owners == HR__OWNER_SELF_OR_ROOT && st.st_uid == 0)) {
    e = hr__why(EPERM, why, n, "owned by uid %ld, not by the daemon's "
                  "user (uid %ld)%s", (long)st.st_uid, (long)geteuid(),
                  owners == HR__OWNER_SELF_OR_ROOT ? " or root" : "");
    goto out;
  }
  /* Read up to max + 1 bytes: getting them all says it is too large. */
  buf = malloc(max + 1);
  if(!buf) {
    e = hr__why(ENOMEM, why, n, "out of memory");
    goto out;
  }
  while(got <= max) {
    ssize_t r = read(fd, buf + got, max + 1 - got);
    if(r < 0 && errno == EINTR)
      continue;
    if(r < 0) {
      e = hr__why(EIO, why, n, "read error: %s", strerror(errno));
      goto out;
    }
    if(r == 0)
      break;
    got += (size_t)r;
  }
  if(got > max) {
    e = hr__why(EFBIG, why, n, "larger than %zu bytes", max);
    goto out;
  }
  buf[got] = '\0';
  *out = buf;
  *len = got;
  buf = NULL;
out:
  free(buf);
  close(fd);
  return e;
}

/* Taken with link(2), which never replaces what is there, and the old
 * name unlinked only once the file has its new one: two files set aside
 * in the same second (a daemon restarted in a loop) are both kept. Where
 * link(2) cannot serve (a folder, a file system without hard links,
 * another owner's file under protected_hardlinks), rename(2) after
 * checking that the name is free (nothing else writes in the folder). */
#define ASIDE_TRIES 1000

int hr__set_aside(const char *path, const char *tag, long long now_s,
                  char *aside, size_t n)
{
  int i, e = EEXIST;

  for(i = 0; i < ASIDE_TRIES && e == EEXIST; i++) {
    if(i == 0)
      snprintf(aside, n, "%s.%s-%lld", path, tag, now_s);
    else
      snprintf(aside, n, "%s.%s-%lld.%d", path, tag, now_s, i);
    e = link(path, aside) ? errno : 0;
    if(e == EPERM || e == EOPNOTSUPP || e == EXDEV) {
      if(!lstat(aside, &(struct stat){0}))
        e = EEXIST;
      else
        e = rename(path, aside) ? errno : 0;
      if(!e)
        return 0;
    }
  }
  if(e)
    return e;
  if(unlink(path)) {
    /* Both names on one file: the next save replaces `path` with a new
     * file and the set-aside one keeps the old bytes. */
    hr__warn("cannot remove %s after linking it to %s (%s)", path, aside,
             strerror(errno));
  }
  return 0;
}
