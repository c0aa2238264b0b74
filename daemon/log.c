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

void hr__log(hr__log_level level, const char *fmt, ...)
{
  char line[1024];
  va_list ap;
  int n;
  char *p;

  if(level > current_level)
    return;
  n = snprintf(line, sizeof(line), "<%d>", (int)level);
  va_start(ap, fmt);
  vsnprintf(line + n, sizeof(line) - (size_t)n, fmt, ap);
  va_end(ap);
  /* A client-supplied name or message must not split one event into two
   * journal entries, forge a second one with its own level prefix, or
   * send escape sequences to an operator's terminal. */
  for(p = line + n; *p; p++)
    if((unsigned char)*p < 0x20 || *p == 0x7f)
      *p = ' ';
  /* One write per line: a line is never interleaved with another. */
  fprintf(stderr, "%s\n", line);
}
