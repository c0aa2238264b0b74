/*
 * fsutil.c: mkdir -p and dirname without modifying their argument.
 */
#include <errno.h>
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
