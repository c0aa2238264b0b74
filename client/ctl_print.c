/*
 * ctl_print.c: what every headroomctl command prints with: the JSON
 * (--json), client text made safe for a terminal, budgets, policies,
 * durations and times.
 */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "ctl.h"

/* The bytes of a JSON line that may go to a terminal as they are. The
 * protocol's encoder escapes U+0000..U+001F; DEL and the C1 controls
 * (U+0080..U+009F, two bytes in UTF-8: a terminal may take U+009B for
 * CSI) it leaves, so they are escaped here, still valid JSON. */
static void put_json_safe(const char *s, size_t n)
{
  const unsigned char *p = (const unsigned char *)s;
  size_t i;

  for(i = 0; i < n; i++) {
    if(p[i] == 0x7f)
      fputs("\\u007f", stdout);
    else if(p[i] == 0xc2 && i + 1 < n && p[i + 1] >= 0x80 && p[i + 1] <= 0x9f)
      printf("\\u%04x", p[++i]);
    else
      putchar(p[i]);
  }
}

/* The reply's id is the wire's business, not the reader's: the line
 * starts {"id":N, (hr_reply.c puts it first), and that is left out. */
static size_t id_prefix(const char *s, size_t n)
{
  size_t i = 6;

  if(n < 8 || memcmp(s, "{\"id\":", 6))
    return 0;
  while(i < n && s[i] >= '0' && s[i] <= '9')
    i++;
  if(i == 6 || i >= n || s[i] != ',')
    return 0;
  return i;     /* the comma becomes the object's opening brace */
}

int ctl_print_json(const hr_reply *rep)
{
  hr_buf b;
  size_t skip;
  int err;

  hr_buf_init(&b, HR_PROTO_MAX_LINE);
  err = hr_proto_encode_reply(rep, &b);
  if(!err) {
    skip = id_prefix(b.data, b.len);
    if(skip) {
      putchar('{');
      skip++;
    }
    put_json_safe(b.data + skip, b.len - skip);
    fflush(stdout);
  }
  hr_buf_free(&b);
  if(err)
    fprintf(stderr, "headroomctl: cannot encode the reply: %s\n",
            hr_strerror(err));
  return err ? EXIT_REFUSED : EXIT_OK;
}

int ctl_print_reply(const ctl_cmd *cmd, hr_reply *rep,
                    void (*text)(const ctl_cmd *cmd, const hr_reply *rep))
{
  int rc = EXIT_OK;

  if(cmd->json)
    rc = ctl_print_json(rep);
  else
    text(cmd, rep);
  fflush(stdout);
  hr_reply_free(rep);
  return rc;
}

void ctl_escape(char *dst, size_t size, const char *src)
{
  const unsigned char *p = (const unsigned char *)src;
  size_t out = 0;
  char esc[8];
  const char *piece;
  size_t len;

  if(!size)
    return;
  for(; *p; p++) {
    if(*p < 0x20 || *p == 0x7f || *p == '\\') {
      if(*p == '\\')
        snprintf(esc, sizeof(esc), "\\\\");
      else
        snprintf(esc, sizeof(esc), "\\x%02x", *p);
      piece = esc;
    }
    else if(*p == 0xc2 && p[1] >= 0x80 && p[1] <= 0x9f) {
      snprintf(esc, sizeof(esc), "\\u%04x", p[1]);
      piece = esc;
      p++;
    }
    else {
      esc[0] = (char)*p;
      esc[1] = '\0';
      piece = esc;
    }
    len = strlen(piece);
    if(out + len >= size)
      break;
    memcpy(dst + out, piece, len);
    out += len;
  }
  dst[out] = '\0';
}

void ctl_print_budget(const hr_budget *b)
{
  printf("GPU %d: headroom %d, grid %d of %d SMs, NCCL max %d CTAs",
         b->gpu, b->headroom, b->grid, b->sms, b->nccl_max_ctas);
  if(b->nccl_min_ctas > 0)
    printf(" (min %d)", b->nccl_min_ctas);
  printf(", CGA %d, epoch %u", b->nccl_cga_cluster_size, b->epoch);
  if(b->partition_granularity > 0)
    printf(", partition %d comm SMs", b->partition_comm_sms);
  printf("\n");
}

void ctl_print_policy(const hr_policy *p)
{
  printf("min_headroom %d\nmax_headroom %d\nmin_grid %d\n"
         "incident_raise %s\n", p->min_headroom, p->max_headroom,
         p->min_grid, ctl_yes_no(p->incident_raise));
}

void ctl_print_uptime(int64_t ms)
{
  int64_t s = ms / 1000;
  if(s >= 86400)
    printf("%lldd%02lldh", (long long)(s / 86400),
           (long long)(s % 86400 / 3600));
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

