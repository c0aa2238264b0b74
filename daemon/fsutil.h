/*
 * fsutil.h: small file-system helpers shared by the socket, state and
 * calibration code.
 */
#ifndef HR_DAEMON_FSUTIL_H
#define HR_DAEMON_FSUTIL_H

#include <sys/types.h>

/* mkdir -p `path`: each missing component created with `mode`. Returns 0
 * or an errno value (ENOTDIR when `path` exists but is not a folder). */
int hr__mkdirs(const char *path, mode_t mode);

/* The folder part of `path` into `out` ("." for a bare name). Returns 0,
 * or ENAMETOOLONG when it does not fit in `n` bytes. */
int hr__dirname(const char *path, char *out, size_t n);

/* Whose files hr__read_file accepts. */
enum {
  HR__OWNER_SELF = 0,               /* the daemon's own user only */
  HR__OWNER_SELF_OR_ROOT = 1        /* or root, who could replace it anyway */
};

/* The whole file at `path`, at most `max` bytes, into a malloc'd buffer
 * with a '\0' after its `*len` bytes (free it). The file is opened with
 * O_NOFOLLOW (a symbolic link is refused, not followed) and O_NONBLOCK (a
 * FIFO would block the read, and start-up with it), and read only when
 * fstat on the open descriptor says it is a regular file owned as `owners`
 * allows, so what is checked is what is read. Returns 0; ENOENT when
 * there is none; EPERM when it was refused for what it is (a link, a
 * FIFO, a folder, a device, another owner); else an errno value: open's,
 * ENOMEM, EFBIG when it is larger than `max`, EIO when reading fails.
 * Every error but ENOENT leaves the reason in why[n]. */
int hr__read_file(const char *path, size_t max, int owners, char **out,
                  size_t *len, char *why, size_t n);

/* Move `path` aside under a name nothing has yet: <path>.<tag>-<now_s>,
 * then the same with .1, .2, ... Returns 0 with the name in aside[n], or
 * an errno value (the file is then left where it is). */
int hr__set_aside(const char *path, const char *tag, long long now_s,
                  char *aside, size_t n);

#endif /* HR_DAEMON_FSUTIL_H */
