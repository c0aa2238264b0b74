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

/* The whole file at `path`, at most `max` bytes, into a malloc'd buffer
 * with a '\0' after its `*len` bytes (free it). Returns 0, or an errno
 * value: fopen's (ENOENT when there is none), ENOMEM, EFBIG when it is
 * larger than `max`, EIO when reading fails. */
int hr__read_file(const char *path, size_t max, char **out, size_t *len);

#endif /* HR_DAEMON_FSUTIL_H */
