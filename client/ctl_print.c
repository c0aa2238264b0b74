/*
 * ctl_print.c: what every headroomctl command prints with: the protocol's
 * own JSON encoding, durations and times.
 */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "ctl.h"

/* Print a reply (or event) as the one JSON line the protocol defines. */
int ctl_print_json(const hr_reply *rep)
{
  hr_buf b;
  int err;
  hr_buf_init(&b, HR_PROTO_MAX_LINE);
  err = hr_proto_encode_reply(rep, &b);
  if(!err) {
    fwrite(b.data, 1, b.len, stdout);
    fflush(stdout);
  }
  hr_buf_free(&b);
  if(err)
    fprintf(stderr, "headroomctl: cannot encode the reply: %s\n",
            hr_strerror(err));
  return err ? EXIT_DAEMON : EXIT_OK;
}


void ctl_print_uptime(int64_t ms)
{
  int64_t s = ms / 1000;
  if(s >= 86400)
    printf("%lldd%02lldh", (long long)(s / 86400), (long long)(s % 86400 / 3600));
  else if(s >= 3600)
    printf("%lldh%02lldm", (long long)(s / 3600), (long long)(s % 3600 / 60));
  else
    printf("%lldm%02llds", (long long)(s / 60), (long long)(s % 60));
}

const char *ctl_yes_no(int v)
{
  return v ? "yes" : "no";
}

void ctl_print_time(int64_t unix_ms)
{
  time_t t = (time_t)(unix_ms / 1000);
  struct tm tm;
  char text[32];
  if(localtime_r(&t, &tm) && strftime(text, sizeof(text), "%Y-%m-%d %H:%M:%S",
                                      &tm))
    printf("%s", text);
  else
    printf("%lld", (long long)unix_ms);
}

