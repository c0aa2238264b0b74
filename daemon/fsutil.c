/*
 * fsutil.c: mkdir -p and dirname without modifying their argument, and
 * reading a whole small file.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fsutil.h"

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

int hr__read_file(const char *path, size_t max, char **out, size_t *len)
{
  FILE *f;
  char *buf = NULL;
  size_t got;
  int e = 0;

  *out = NULL;
  *len = 0;
  f = fopen(path, "rb");
  if(!f)
    return errno;
  /* One read of max + 1 bytes: getting them all says it is too large. */
  buf = malloc(max + 1);
  if(!buf) {
    e = ENOMEM;
    goto out;
  }
  got = fread(buf, 1, max + 1, f);
  if(ferror(f)) {
    e = EIO;
    goto out;
  }
  if(got > max) {
    e = EFBIG;
    goto out;
  }
  buf[got] = '\0';
  *out = buf;
  *len = got;
  buf = NULL;
out:
  free(buf);
  fclose(f);
  return e;
}
