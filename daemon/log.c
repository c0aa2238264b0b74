/*
 * log.c: leveled, line-oriented logging to stderr (see log.h).
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "hr_types.h"
#include "log.h"

static hr__log_level current_level = HR_LOG_INFO;

static const char *const level_names[] = {
  [HR_LOG_ERR] = "err",
  [HR_LOG_WARNING] = "warning",
  [HR_LOG_NOTICE] = "notice",
  [HR_LOG_INFO] = "info",
  [HR_LOG_DEBUG] = "debug",
};

void hr__log_set_level(hr__log_level level)
{
  if(level >= HR_LOG_ERR && level <= HR_LOG_DEBUG)
    current_level = level;
}

hr__log_level hr__log_get_level(void)
{
  return current_level;
}

int hr__log_level_from_name(const char *name, hr__log_level *out)
{
  int l;

  if(!name || !out)
    return HR_EINVAL;
  for(l = HR_LOG_ERR; l <= HR_LOG_DEBUG; l++) {
    if(!strcmp(name, level_names[l])) {
      *out = (hr__log_level)l;
      return HR_OK;
    }
  }
  return HR_EINVAL;
}

const char *hr__log_level_name(hr__log_level level)
{
  if(level < HR_LOG_ERR || level > HR_LOG_DEBUG)
    return "?";
  return level_names[level];
}

int hr__why(int rc, char *why, size_t n, const char *fmt, ...)
{
  va_list ap;

  if(why && n) {
    va_start(ap, fmt);
    vsnprintf(why, n, fmt, ap);
    va_end(ap);
  }
  return rc;
}

/* Copy `src` to `dst` (size bytes) with every control character written
 * out as an escape: C0 and DEL as \xNN, C1 (UTF-8 c2 80..c2 9f) as
 * \u00NN. A client-supplied name or message must not split one event into
 * two journal entries, forge a second one with its own level prefix, or
 * send escape sequences to an operator's terminal; and an operator
 * reading the log should see what was sent, not a blank. */
static void escape_controls(char *dst, size_t size, const char *src)
{
  const unsigned char *p = (const unsigned char *)src;
  size_t n = 0;

  for(; *p && n + 1 < size; p++) {
    if(*p < 0x20 || *p == 0x7f || (*p == 0xc2 && p[1] >= 0x80 &&
                                   p[1] <= 0x9f)) {
      int c1 = *p == 0xc2;
      if(n + 7 >= size)
        break;
      if(c1)
        p++;
      n += (size_t)snprintf(dst + n, size - n, c1 ? "\\u%04x" : "\\x%02x",
                            *p);
      continue;
    }
    dst[n++] = (char)*p;
  }
  dst[n] = '\0';
}

void hr__log(hr__log_level level, const char *fmt, ...)
{
  char line[1024], out[1024];
  va_list ap;

  if(level > current_level)
    return;
  va_start(ap, fmt);
  vsnprintf(line, sizeof(line), fmt, ap);
  va_end(ap);
  escape_controls(out, sizeof(out), line);
  /* One write per line: a line is never interleaved with another. */
  fprintf(stderr, "<%d>%s\n", (int)level, out);
}
