/*
 * hr_fastenc.c: the replies and events the daemon sends most, written
 * straight into text without a cJSON tree.
 *
 * A lease round trip spent about a third of the daemon's CPU building a
 * tree and printing it. These encoders write the same bytes the tree
 * encoder in hr_reply.c prints (member order, integers printed in full,
 * strings escaped exactly as cJSON escapes them) and accept exactly the
 * structs it accepts; tests/unit/test_proto.c holds them to that against
 * the tree encoder, which stays the reference for every other message.
 */
#include <string.h>

#include "hr_internal.h"

/* The longest line written here is an error reply whose message is all
 * control characters (6 bytes each): well under this. */
#define LINE_MAX_FAST 2048
#define NVLS_MAX 2                  /* as in hr_payload.c */

typedef struct wr {
  char *p;
  char *end;
  int rc;                           /* HR_OK until the first failure */
} wr;

static void wr_fail(wr *w, int rc)
{
  if(!w->rc)
    w->rc = rc;
}

static void wr_raw(wr *w, const char *s, size_t n)
{
  if(w->rc)
    return;
  if((size_t)(w->end - w->p) < n) {
    wr_fail(w, HR_ETOOLARGE);
    return;
  }
  memcpy(w->p, s, n);
  w->p += n;
}

/* A literal: the compiler knows its length. */
#define WR_LIT(w, lit) wr_raw((w), (lit), sizeof(lit) - 1)
/* A literal (the member's name and what comes before its value), then an
 * integer in [min, max]. */
#define WR_INT(w, lit, v, min, max) \
  do { WR_LIT((w), lit); wr_i64((w), (v), (min), (max)); } while(0)

/* In full, as hr__enc_i64 prints it ("%" PRId64), never as "1e+15". */
static void wr_i64(wr *w, int64_t v, int64_t min, int64_t max)
{
  char text[24], *q = text + sizeof(text);
  uint64_t u;

  if(w->rc)
    return;
  if(v < min || v > max) {
    wr_fail(w, HR_EINVAL);
    return;
  }
  u = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
  do {
    *--q = (char)('0' + u % 10);
    u /= 10;
  } while(u);
  if(v < 0)
    *--q = '-';
  wr_raw(w, q, (size_t)(text + sizeof(text) - q));
}

static void wr_bool(wr *w, int v)
{
  if(v == 1)
    WR_LIT(w, "true");
  else if(v == 0)
    WR_LIT(w, "false");
  else
    wr_fail(w, HR_EINVAL);
}

/* A quoted string escaped as cJSON's printer does: the two-character
 * escapes for '"', '\\', \b, \f, \n, \r and \t, "\u00XX" (lower-case hex)
 * for the other bytes below 0x20, every other byte as it is. */
static void wr_string(wr *w, const char *s)
{
  static const char hex[] = "0123456789abcdef";
  const unsigned char *c;
  const char *run = s;
  char esc[6];
  size_t n;

  if(w->rc)
    return;
  if(!s) {
    wr_fail(w, HR_EINVAL);
    return;
  }
  WR_LIT(w, "\"");
  for(c = (const unsigned char *)s; *c; c++) {
    if(*c > 31 && *c != '"' && *c != '\\')
      continue;
    wr_raw(w, run, (size_t)((const char *)c - run));
    run = (const char *)c + 1;
    esc[0] = '\\';
    n = 2;
    switch(*c) {
    case '"': esc[1] = '"'; break;
    case '\\': esc[1] = '\\'; break;
    case '\b': esc[1] = 'b'; break;
    case '\f': esc[1] = 'f'; break;
    case '\n': esc[1] = 'n'; break;
    case '\r': esc[1] = 'r'; break;
    case '\t': esc[1] = 't'; break;
    default:
      esc[1] = 'u';
      esc[2] = '0';
      esc[3] = '0';
      esc[4] = hex[*c >> 4];
      esc[5] = hex[*c & 15];
      n = 6;
      break;
    }
    wr_raw(w, esc, n);
  }
  wr_raw(w, run, (size_t)((const char *)c - run));
  WR_LIT(w, "\"");
}

/* A free-text field: the checks of hr__enc_string, then the string. */
static void wr_text(wr *w, const char *s, size_t size)
{
  const char *nul;

  if(w->rc)
    return;
  nul = memchr(s, '\0', size);
  if(!nul || !hr__utf8_valid(s, (size_t)(nul - s))) {
    wr_fail(w, HR_EINVAL);
    return;
  }
  wr_string(w, s);
}

/* ,"budget":{...}: hr__budget_encode's members, in its order. */
static void wr_budget(wr *w, const hr_budget *b)
{
  if(!hr__cluster_valid(b->cluster))
    wr_fail(w, HR_EINVAL);
  WR_INT(w, ",\"budget\":{\"gpu\":", b->gpu, 0, HR_MAX_GPUS - 1);
  WR_INT(w, ",\"epoch\":", b->epoch, 0, HR__UINT32_MAX);
  WR_LIT(w, ",\"mode\":");
  wr_string(w, hr_mode_name(b->mode));
  WR_INT(w, ",\"sms\":", b->sms, 1, HR_MAX_SMS);
  WR_INT(w, ",\"cluster\":", b->cluster, 1, HR_MAX_CGA);
  WR_INT(w, ",\"headroom\":", b->headroom, 0, HR_MAX_SMS);
  WR_INT(w, ",\"grid\":", b->grid, 0, HR_MAX_SMS);
  WR_INT(w, ",\"nccl\":{\"min_ctas\":", b->nccl_min_ctas, 0, HR_MAX_CTAS);
  WR_INT(w, ",\"max_ctas\":", b->nccl_max_ctas, 0, HR_MAX_CTAS);
  WR_INT(w, ",\"cga_cluster_size\":", b->nccl_cga_cluster_size, 0, HR_MAX_CGA);
  WR_INT(w, ",\"nvls_enable\":", b->nccl_nvls_enable, 0, NVLS_MAX);
  WR_LIT(w, "},\"degraded\":");
  wr_bool(w, b->degraded);
  WR_INT(w, ",\"partition_granularity\":", b->partition_granularity,
         0, HR_MAX_SMS);
  WR_INT(w, ",\"partition_comm_sms\":", b->partition_comm_sms, 0, HR_MAX_SMS);
  WR_INT(w, ",\"partition_nccl_max_ctas\":", b->partition_nccl_max_ctas,
         0, HR_MAX_CTAS);
  WR_LIT(w, "}");
}

int hr__reply_fast(hr_msg_type type)
{
  switch(type) {
  case HR_MSG_REGISTER_COMM:
  case HR_MSG_UNREGISTER_COMM:
  case HR_MSG_LEASE:
  case HR_MSG_RELEASE:
  case HR_MSG_REPORT:
  case HR_MSG_SUBSCRIBE:
  case HR_MSG_BUDGET:
  case HR_MSG_SHUTDOWN:
  case HR_MSG_ERROR:
    return 1;
  default:
    return 0;
  }
}

int hr__reply_encode_fast(const hr_reply *rep, hr_buf *out)
{
  char line[LINE_MAX_FAST];
  wr w = { line, line + sizeof(line) - 1, HR_OK }; /* - 1: the '\n' */

  if(!rep || !out || !hr__reply_fast(rep->type))
    return HR_EINVAL;
  if(rep->type == HR_MSG_ERROR) {
    WR_LIT(&w, "{\"id\":");
    if(rep->id == -1)               /* the request's id was unreadable */
      WR_LIT(&w, "null");
    else
      wr_i64(&w, rep->id, 0, HR__MAX_ID);
    WR_LIT(&w, ",\"error\":{\"code\":");
    wr_string(&w, hr_wire_error_name(rep->u.error.code));
    WR_LIT(&w, ",\"message\":");
    wr_text(&w, rep->u.error.message, sizeof(rep->u.error.message));
    WR_LIT(&w, "}}");
    goto out;
  }
  if(rep->type == HR_MSG_BUDGET || rep->type == HR_MSG_SHUTDOWN) {
    WR_LIT(&w, "{\"type\":");       /* events carry no id */
  } else {
    WR_INT(&w, "{\"id\":", rep->id, 0, HR__MAX_ID);
    WR_LIT(&w, ",\"type\":");
  }
  wr_string(&w, hr_msg_type_name(rep->type));
  switch(rep->type) {
  case HR_MSG_REGISTER_COMM:
    WR_INT(&w, ",\"comm\":", rep->u.register_comm.comm, 1, HR__MAX_ID);
    break;
  case HR_MSG_LEASE:
    WR_INT(&w, ",\"lease\":", rep->u.lease.lease, 1, HR__MAX_ID);
    wr_budget(&w, &rep->u.lease.budget);
    break;
  case HR_MSG_REPORT:
    WR_INT(&w, ",\"incident\":", rep->u.report.incident, 1, HR__MAX_ID);
    wr_budget(&w, &rep->u.report.budget);
    break;
  case HR_MSG_BUDGET:
    wr_budget(&w, &rep->u.budget);
    break;
  case HR_MSG_SHUTDOWN:
    WR_LIT(&w, ",\"reason\":");
    wr_text(&w, rep->u.shutdown_reason, sizeof(rep->u.shutdown_reason));
    break;
  default:                          /* unregister_comm, release, subscribe */
    break;
  }
  WR_LIT(&w, "}");
out:
  if(w.rc)
    return w.rc;
  /* One append, so the whole line lands in the buffer or nothing does. */
  *w.p++ = '\n';
  return hr_buf_append(out, line, (size_t)(w.p - line));
}
