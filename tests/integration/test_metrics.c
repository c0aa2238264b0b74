/*
 * test_metrics.c: `headroomctl metrics` against a real headroomd, and the
 * agnostic lease mode end to end.
 *
 * The traffic is driven through the real library and raw sockets, the
 * metrics are read the way a scraper would (headroomctl's stdout), and
 * every line must be valid Prometheus text exposition: a checker below
 * parses it (comments, HELP and TYPE, metric and label names, label value
 * escapes, float values, families kept together, counters named _total,
 * cumulative histogram buckets) before any value is looked at. The
 * checker is itself fed broken text, so a checker that accepts anything
 * fails the suite.
 */
#include <ctype.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "harness.h"
#include "headroom.h"

static hr_daemon daemon_;

static int setup(void **state)
{
  (void)state;
  return th_daemon_start(&daemon_, NULL);
}

static int teardown(void **state)
{
  (void)state;
  th_daemon_cleanup(&daemon_);
  return 0;
}

/* ---- a Prometheus text format checker ------------------------------------ */

#define PROM_MAX_SAMPLES 1024
#define PROM_MAX_FAMILIES 128

typedef struct prom_sample {
  char name[128];
  char labels[256];             /* as written between the braces */
  double value;
} prom_sample;

typedef struct prom_family {
  char name[128];
  char type[32];                /* "" until its TYPE line */
  int help, closed;
} prom_family;

typedef struct prom {
  prom_sample s[PROM_MAX_SAMPLES];
  int n;
  prom_family f[PROM_MAX_FAMILIES];
  int nf;
  int current;                  /* family of the last sample, -1 */
  char err[256];
} prom;

static int prom_fail(prom *p, int line, const char *fmt, ...)
{
  va_list ap;
  int n = snprintf(p->err, sizeof(p->err), "line %d: ", line);

  va_start(ap, fmt);
  vsnprintf(p->err + n, sizeof(p->err) - (size_t)n, fmt, ap);
  va_end(ap);
  return -1;
}

/* [a-zA-Z_:][a-zA-Z0-9_:]* for metrics, no ':' for labels; the length. */
static size_t name_len(const char *s, int colon)
{
  size_t i = 0;

  if(!(isalpha((unsigned char)s[0]) || s[0] == '_' || (colon && s[0] == ':')))
    return 0;
  while(isalnum((unsigned char)s[i]) || s[i] == '_' || (colon && s[i] == ':'))
    i++;
  return i;
}

/* A float as the format allows: Go's ParseFloat, and +Inf, -Inf, NaN. */
static int parse_value(const char *s, double *out)
{
  char *end;

  if(!strcmp(s, "+Inf") || !strcmp(s, "Inf")) {
    *out = INFINITY;
    return 0;
  }
  if(!strcmp(s, "-Inf")) {
    *out = -INFINITY;
    return 0;
  }
  if(!strcmp(s, "NaN")) {
    *out = NAN;
    return 0;
  }
  if(!*s || isspace((unsigned char)*s))
    return -1;
  *out = strtod(s, &end);
  /* strtod also takes hex floats and "infinity": not in the format. */
  if(*end || strpbrk(s, "xXiInN"))
    return -1;
  return 0;
}

static prom_family *family_find(prom *p, const char *name)
{
  int i;

  for(i = 0; i < p->nf; i++)
    if(!strcmp(p->f[i].name, name))
      return &p->f[i];
  return NULL;
}

static prom_family *family_add(prom *p, const char *name)
{
  prom_family *f = family_find(p, name);

  if(f || p->nf == PROM_MAX_FAMILIES)
    return f;
  f = &p->f[p->nf++];
  memset(f, 0, sizeof(*f));
  snprintf(f->name, sizeof(f->name), "%s", name);
  return f;
}

static int ends_with(const char *s, const char *tail)
{
  size_t a = strlen(s), b = strlen(tail);
  return a >= b && !strcmp(s + a - b, tail);
}

/* The family a sample belongs to: its own name, or a histogram's name
 * without _bucket, _sum or _count. */
static prom_family *sample_family(prom *p, const char *name)
{
  static const char *const tails[] = { "_bucket", "_sum", "_count" };
  char base[128];
  prom_family *f;
  size_t i, n;

  f = family_find(p, name);
  if(f && f->type[0])
    return f;
  for(i = 0; i < 3; i++) {
    if(!ends_with(name, tails[i]))
      continue;
    n = strlen(name) - strlen(tails[i]);
    snprintf(base, sizeof(base), "%.*s", (int)n, name);
    f = family_find(p, base);
    if(f && !strcmp(f->type, "histogram"))
      return f;
  }
  return NULL;
}

static int parse_comment(prom *p, int ln, const char *line)
{
  char name[128], type[32];
  const char *rest;
  prom_family *f;
  size_t n;
  int help;

  help = !strncmp(line, "# HELP ", 7);
  if(!help && strncmp(line, "# TYPE ", 7))
    return 0;                     /* any other comment is allowed */
  rest = line + 7;
  n = name_len(rest, 1);
  if(!n || n >= sizeof(name) || (rest[n] != ' ' && rest[n] != '\0'))
    return prom_fail(p, ln, "bad metric name in '%s'", line);
  snprintf(name, sizeof(name), "%.*s", (int)n, rest);
  rest += n;
  f = family_add(p, name);
  if(!f)
    return prom_fail(p, ln, "too many families");
  if(f->closed)
    return prom_fail(p, ln, "%s described after its samples", name);
  if(help) {
    const char *c;
    if(f->help++)
      return prom_fail(p, ln, "second HELP for %s", name);
    /* Only \\ and \n are escapes in HELP text. */
    for(c = rest; *c; c++) {
      if(*c != '\\')
        continue;
      if(c[1] != '\\' && c[1] != 'n')
        return prom_fail(p, ln, "bad escape in HELP of %s", name);
      c++;
    }
    return 0;
  }
  if(*rest != ' ' || sscanf(rest + 1, "%31s", type) != 1 ||
     strlen(rest + 1) != strlen(type))
    return prom_fail(p, ln, "TYPE of %s: want one word", name);
  if(strcmp(type, "counter") && strcmp(type, "gauge") &&
     strcmp(type, "histogram") && strcmp(type, "summary") &&
     strcmp(type, "untyped"))
    return prom_fail(p, ln, "TYPE of %s: unknown type '%s'", name, type);
  if(f->type[0])
    return prom_fail(p, ln, "second TYPE for %s", name);
  snprintf(f->type, sizeof(f->type), "%s", type);
  return 0;
}

/* {name="value",...}: label names, quotes and escapes; no name twice. */
static int parse_labels(prom *p, int ln, const char **sp, char *out,
                        size_t size)
{
  const char *s = *sp + 1, *start = *sp + 1;
  char seen[8][64];
  int n_seen = 0, i;

  while(*s != '}') {
    size_t n = name_len(s, 0);
    if(!n || n >= sizeof(seen[0]))
      return prom_fail(p, ln, "bad label name at '%s'", s);
    for(i = 0; i < n_seen; i++)
      if(strlen(seen[i]) == n && !strncmp(seen[i], s, n))
        return prom_fail(p, ln, "label given twice at '%s'", s);
    if(n_seen < 8)
      snprintf(seen[n_seen++], sizeof(seen[0]), "%.*s", (int)n, s);
    s += n;
    if(s[0] != '=' || s[1] != '"')
      return prom_fail(p, ln, "label needs =\"...\" at '%s'", s);
    for(s += 2; *s != '"'; s++) {
      if(!*s)
        return prom_fail(p, ln, "unterminated label value");
      if(*s == '\\') {
        if(s[1] != '\\' && s[1] != '"' && s[1] != 'n')
          return prom_fail(p, ln, "bad escape in a label value");
        s++;
      }
    }
    s++;
    if(*s == ',')
      s++;
    else if(*s != '}')
      return prom_fail(p, ln, "expected , or } at '%s'", s);
  }
  if((size_t)(s - start) >= size)
    return prom_fail(p, ln, "labels too long");
  snprintf(out, size, "%.*s", (int)(s - start), start);
  *sp = s + 1;
  return 0;
}

static int parse_sample(prom *p, int ln, const char *line)
{
  prom_sample *x;
  prom_family *f;
  const char *s = line;
  char value[64], ts[32];
  size_t n = name_len(s, 1);
  int i, k;

  if(p->n == PROM_MAX_SAMPLES)
    return prom_fail(p, ln, "too many samples");
  x = &p->s[p->n];
  memset(x, 0, sizeof(*x));
  if(!n || n >= sizeof(x->name))
    return prom_fail(p, ln, "bad metric name in '%s'", line);
  snprintf(x->name, sizeof(x->name), "%.*s", (int)n, s);
  s += n;
  if(*s == '{' && parse_labels(p, ln, &s, x->labels, sizeof(x->labels)))
    return -1;
  if(*s != ' ')
    return prom_fail(p, ln, "expected a space before the value");
  k = sscanf(s + 1, "%63s %31s", value, ts);
  if(k < 1 || parse_value(value, &x->value))
    return prom_fail(p, ln, "bad value in '%s'", line);
  if(k == 2) {                    /* a timestamp: an integer, and last */
    for(i = ts[0] == '-'; ts[i]; i++)
      if(!isdigit((unsigned char)ts[i]))
        return prom_fail(p, ln, "bad timestamp in '%s'", line);
  }
  f = sample_family(p, x->name);
  if(!f)
    return prom_fail(p, ln, "%s has no TYPE line before it", x->name);
  if(f->closed)
    return prom_fail(p, ln, "%s: family %s is not kept together", x->name,
                     f->name);
  if(p->current >= 0 && &p->f[p->current] != f)
    p->f[p->current].closed = 1;
  p->current = (int)(f - p->f);
  for(i = 0; i < p->n; i++)
    if(!strcmp(p->s[i].name, x->name) && !strcmp(p->s[i].labels, x->labels))
      return prom_fail(p, ln, "%s{%s} given twice", x->name, x->labels);
  p->n++;
  return 0;
}

/* A histogram's buckets: le ascending, counts not decreasing, the last
 * one +Inf and equal to _count. */
static int check_histograms(prom *p)
{
  int i, j;

  for(i = 0; i < p->nf; i++) {
    char bucket[160], count[160];
    double last_le = -INFINITY, last = 0;
    int buckets = 0, inf = 0;
    if(strcmp(p->f[i].type, "histogram"))
      continue;
    snprintf(bucket, sizeof(bucket), "%s_bucket", p->f[i].name);
    snprintf(count, sizeof(count), "%s_count", p->f[i].name);
    for(j = 0; j < p->n; j++) {
      const char *le;
      double v;
      char text[64];
      if(!strcmp(p->s[j].name, count)) {
        if(!inf || p->s[j].value != last)
          return prom_fail(p, 0, "%s is not its +Inf bucket", count);
        continue;
      }
      if(strcmp(p->s[j].name, bucket))
        continue;
      le = strstr(p->s[j].labels, "le=\"");
      if(!le || sscanf(le + 4, "%63[^\"]", text) != 1 ||
         parse_value(text, &v))
        return prom_fail(p, 0, "%s without a numeric le", bucket);
      if(v <= last_le || p->s[j].value < last)
        return prom_fail(p, 0, "%s: buckets not cumulative", bucket);
      last_le = v;
      last = p->s[j].value;
      inf = isinf(v);
      buckets++;
    }
    if(!buckets || !inf)
      return prom_fail(p, 0, "%s: no +Inf bucket", p->f[i].name);
  }
  return 0;
}

/* Parse and check a whole exposition; 0, or -1 with p->err. */
static int prom_parse(const char *text, prom *p)
{
  char line[1024];
  const char *s = text, *nl;
  int ln = 0, i;

  memset(p, 0, sizeof(*p));
  p->current = -1;
  if(!*text)
    return prom_fail(p, 0, "empty");
  for(; *s; s = nl + 1) {
    nl = strchr(s, '\n');
    ln++;
    if(!nl)
      return prom_fail(p, ln, "last line without its newline");
    if((size_t)(nl - s) >= sizeof(line))
      return prom_fail(p, ln, "line too long");
    snprintf(line, sizeof(line), "%.*s", (int)(nl - s), s);
    if(!line[0])
      return prom_fail(p, ln, "empty line");
    if(line[0] == '#' ? parse_comment(p, ln, line)
                      : parse_sample(p, ln, line))
      return -1;
  }
  for(i = 0; i < p->nf; i++) {
    if(!p->f[i].type[0])
      return prom_fail(p, 0, "%s has HELP but no TYPE", p->f[i].name);
    if(!strcmp(p->f[i].type, "counter") && !ends_with(p->f[i].name, "_total"))
      return prom_fail(p, 0, "counter %s does not end in _total",
                       p->f[i].name);
    if(strncmp(p->f[i].name, "headroom_", 9))
      return prom_fail(p, 0, "%s lacks the headroom_ prefix", p->f[i].name);
  }
  return check_histograms(p);
}

/* The value of one sample; NAN when it is not there. */
static double prom_value(const prom *p, const char *name, const char *labels)
{
  int i;

  for(i = 0; i < p->n; i++)
    if(!strcmp(p->s[i].name, name) && !strcmp(p->s[i].labels, labels))
      return p->s[i].value;
  return NAN;
}

static void expect_sample(const prom *p, const char *name, const char *labels,
                         double want)
{
  double v = prom_value(p, name, labels);

  if(!(v == want))
    fail_msg("%s{%s} is %g, want %g", name, labels, v, want);
}

/* The sum of every sample of `name`. */
static double prom_sum(const prom *p, const char *name)
{
  double sum = 0;
  int i;

  for(i = 0; i < p->n; i++)
    if(!strcmp(p->s[i].name, name))
      sum += p->s[i].value;
  return sum;
}

/* ---- helpers ------------------------------------------------------------- */

static hr_client *open_client(const char *name)
{
  return th_client_open(&daemon_, name, 50);
}


static int wait_connected(hr_client *c, int timeout_ms)
{
  long long end = th_now_ms() + timeout_ms;

  while(!hr_client_connected(c)) {
    if(th_now_ms() >= end)
      return -1;
    usleep(10 * 1000);
  }
  return 0;
}

/* Run `headroomctl metrics [extra]`; its stdout, malloc'ed. */
static char *run_metrics(const char *extra)
{
  const char *args[] = { "metrics", extra, NULL };

  return th_ctl(&daemon_, args);
}

/* headroomctl metrics, parsed and checked. */
static void scrape(prom *p)
{
  char *text = run_metrics(NULL);

  if(prom_parse(text, p)) {
    fprintf(stderr, "%s", text);
    fail_msg("not valid exposition text: %s", p->err);
  }
  free(text);
}

static void expect_error(th_raw *r, int64_t id, hr_wire_error code)
{
  hr_reply rep;

  assert_int_equal(th_raw_reply(r, &rep, 3000), 0);
  assert_int_equal(rep.type, HR_MSG_ERROR);
  assert_int_equal(rep.u.error.code, code);
  assert_true(rep.id == id);
}

/* ---- tests --------------------------------------------------------------- */

/* The checker must refuse what a scraper would refuse. */
static void test_checker_refuses_bad_text(void **state)
{
  static const char good[] =
    "# HELP headroom_x_total A counter.\n"
    "# TYPE headroom_x_total counter\n"
    "headroom_x_total{gpu=\"0\",kind=\"a\\\"b\"} 3\n"
    "# just a comment\n"
    "# TYPE headroom_h histogram\n"
    "headroom_h_bucket{le=\"0.5\"} 1\n"
    "headroom_h_bucket{le=\"+Inf\"} 2\n"
    "headroom_h_sum 0.75\n"
    "headroom_h_count 2\n";
  static const char *const bad[] = {
    "",
    "# TYPE headroom_x gauge\nheadroom_x 1",                 /* no newline */
    "# TYPE headroom_x gauge\n\nheadroom_x 1\n",              /* empty line */
    "headroom_x 1\n",                                         /* no TYPE */
    "# TYPE headroom_x gauges\nheadroom_x 1\n",
    "# TYPE headroom_x gauge\n# TYPE headroom_x gauge\nheadroom_x 1\n",
    "# TYPE 1headroom gauge\n1headroom 1\n",
    "# TYPE headroom_x gauge\nheadroom-x 1\n",
    "# TYPE headroom_x gauge\nheadroom_x{gpu=0} 1\n",
    "# TYPE headroom_x gauge\nheadroom_x{gpu=\"0} 1\n",
    "# TYPE headroom_x gauge\nheadroom_x{gpu=\"0\" 1\n",
    "# TYPE headroom_x gauge\nheadroom_x{0gpu=\"0\"} 1\n",
    "# TYPE headroom_x gauge\nheadroom_x{gpu=\"0\",gpu=\"1\"} 1\n",
    "# TYPE headroom_x gauge\nheadroom_x{gpu=\"\\t\"} 1\n",
    "# TYPE headroom_x gauge\nheadroom_x abc\n",
    "# TYPE headroom_x gauge\nheadroom_x 0x10\n",
    "# TYPE headroom_x gauge\nheadroom_x\n",
    "# TYPE headroom_x gauge\nheadroom_x 1 1.5\n",
    "# TYPE headroom_x gauge\nheadroom_x 1\nheadroom_x 2\n",
    "# TYPE headroom_x counter\nheadroom_x 1\n",              /* _total */
    "# TYPE other_total counter\nother_total 1\n",             /* prefix */
    "# TYPE headroom_a gauge\n# TYPE headroom_b gauge\nheadroom_a 1\n"
    "headroom_b 1\nheadroom_a{gpu=\"1\"} 1\n",                 /* split */
    "# TYPE headroom_h histogram\nheadroom_h_bucket{le=\"1\"} 2\n"
    "headroom_h_bucket{le=\"+Inf\"} 1\nheadroom_h_count 1\n",
    "# TYPE headroom_h histogram\nheadroom_h_bucket{le=\"1\"} 1\n"
    "headroom_h_count 1\n",                                   /* no +Inf */
    "# TYPE headroom_h histogram\nheadroom_h_bucket{le=\"+Inf\"} 2\n"
    "headroom_h_count 3\n",
    "# HELP headroom_x bad \\q escape\n# TYPE headroom_x gauge\n"
    "headroom_x 1\n",
  };
  static prom p;
  size_t i;

  (void)state;
  if(prom_parse(good, &p))
    fail_msg("good text refused: %s", p.err);
  assert_int_equal(p.n, 5);
  expect_sample(&p, "headroom_x_total", "gpu=\"0\",kind=\"a\\\"b\"", 3);
  for(i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
    if(!prom_parse(bad[i], &p))
      fail_msg("bad text %zu accepted:\n%s", i, bad[i]);
}

static void test_metrics_after_traffic(void **state)
{
  hr_client *a = open_client("barrier"), *b = open_client("agnostic");
  hr_incident_detail d = {1, 114, 116, 9, 116, 2000, -1};
  hr_lease *la, *lb;
  hr_reply rep;
  static prom p;
  char *json;
  th_raw r;
  (void)state;

  /* Two library clients (hello and subscribe each), a lease each, a
   * footprint, a barrier timeout. */
  assert_int_equal(hr_lease_acquire(a, 0, 2, HR_MODE_HEADROOM, &la), HR_OK);
  assert_int_equal(hr_comm_register(b, 0, "dp", 4, 1, 2, NULL), HR_OK);
  assert_int_equal(th_wait_grid(la, 116, 2000), 0);
  assert_int_equal(hr_lease_acquire(b, 0, 2, HR_MODE_AGNOSTIC, &lb), HR_OK);
  assert_int_equal(hr_report(a, la, HR_INCIDENT_BARRIER_TIMEOUT, &d,
                             "combine barrier"), HR_OK);
  /* One cluster above the 16 in force: floor 2 + raised 16 = 18. */
  assert_int_equal(th_wait_grid(la, 114, 2000), 0);

  /* A raw client: a line that is no JSON, a lease the decoder refuses, a
   * lease for a GPU the node does not have. */
  assert_int_equal(th_raw_open(&r, daemon_.socket), 0);
  th_raw_send_str(&r, "not json at all\n");
  expect_error(&r, -1, HR_WERR_BAD_REQUEST);
  th_raw_send_str(&r, "{\"id\":4,\"type\":\"lease\",\"gpu\":0,\"cluster\":3,"
                      "\"mode\":\"headroom\"}\n");
  expect_error(&r, 4, HR_WERR_BAD_REQUEST);
  th_raw_send_str(&r, "{\"id\":5,\"type\":\"lease\",\"gpu\":7,\"cluster\":2,"
                      "\"mode\":\"headroom\"}\n");
  expect_error(&r, 5, HR_WERR_NOT_FOUND);

  scrape(&p);
  /* Connected now: a, b, the raw client and headroomctl itself. */
  expect_sample(&p, "headroom_clients", "", 4);
  assert_true(prom_value(&p, "headroom_uptime_seconds", "") > 0);
  expect_sample(&p, "headroom_info", "daemon=\"headroomd " HR_VERSION_STRING
               "\"", 1);
  expect_sample(&p, "headroom_requests_total", "type=\"hello\"", 4);
  expect_sample(&p, "headroom_requests_total", "type=\"subscribe\"", 2);
  expect_sample(&p, "headroom_requests_total", "type=\"lease\"", 3);
  expect_sample(&p, "headroom_requests_total", "type=\"register_comm\"", 1);
  expect_sample(&p, "headroom_requests_total", "type=\"report\"", 1);
  expect_sample(&p, "headroom_requests_total", "type=\"metrics\"", 1);
  expect_sample(&p, "headroom_requests_total", "type=\"status\"", 0);
  expect_sample(&p, "headroom_requests_total", "type=\"invalid\"", 2);
  expect_sample(&p, "headroom_errors_total", "code=\"bad_request\"", 2);
  expect_sample(&p, "headroom_errors_total", "code=\"not_found\"", 1);
  expect_sample(&p, "headroom_errors_total", "code=\"internal\"", 0);
  assert_true(prom_sum(&p, "headroom_errors_total") == 3);
  /* Every request but this metrics one has its latency recorded. */
  expect_sample(&p, "headroom_request_duration_seconds_count", "",
               prom_sum(&p, "headroom_requests_total") - 1);
  expect_sample(&p, "headroom_request_duration_seconds_bucket",
               "le=\"+Inf\"", 14 - 1);
  assert_true(prom_value(&p, "headroom_request_duration_seconds_sum", "") >
              0);
  assert_true(prom_value(&p, "headroom_request_duration_seconds_sum", "") <
              13 * 0.025 + 1);
  assert_false(isnan(prom_value(&p, "headroom_request_duration_seconds_bucket",
                                "le=\"0.00001\"")));

  /* GPU 0 holds it all. */
  expect_sample(&p, "headroom_gpu_sms", "gpu=\"0\"", 132);
  expect_sample(&p, "headroom_gpu_headroom", "gpu=\"0\"", 18);
  expect_sample(&p, "headroom_gpu_grid", "gpu=\"0\"", 114);
  expect_sample(&p, "headroom_gpu_epoch", "gpu=\"0\"", hr_lease_epoch(la));
  expect_sample(&p, "headroom_gpu_nccl_max_ctas", "gpu=\"0\"", 8);
  expect_sample(&p, "headroom_gpu_clients", "gpu=\"0\"", 2);
  expect_sample(&p, "headroom_gpu_footprints", "gpu=\"0\"", 1);
  expect_sample(&p, "headroom_gpu_footprint_ctas", "gpu=\"0\"", 8);
  expect_sample(&p, "headroom_gpu_leases", "gpu=\"0\",mode=\"headroom\"", 1);
  expect_sample(&p, "headroom_gpu_leases", "gpu=\"0\",mode=\"cooperative\"",
               0);
  expect_sample(&p, "headroom_gpu_leases", "gpu=\"0\",mode=\"agnostic\"", 1);
  expect_sample(&p, "headroom_gpu_raised", "gpu=\"0\"", 16);
  expect_sample(&p, "headroom_gpu_incidents_total",
               "gpu=\"0\",kind=\"barrier_timeout\"", 1);
  expect_sample(&p, "headroom_gpu_incidents_total",
               "gpu=\"0\",kind=\"launch_failure\"", 0);
  /* GPU 1 is idle, and present. */
  expect_sample(&p, "headroom_gpu_grid", "gpu=\"1\"", 130);
  expect_sample(&p, "headroom_gpu_leases", "gpu=\"1\",mode=\"agnostic\"", 0);
  expect_sample(&p, "headroom_gpu_incidents_total",
               "gpu=\"1\",kind=\"barrier_timeout\"", 0);
  expect_sample(&p, "headroom_clients_resumed_total", "", 0);
  expect_sample(&p, "headroom_client_degraded_seconds_total", "", 0);

  /* --json is the protocol's reply, without its wire id, and says the
   * same. */
  json = run_metrics("--json");
  assert_true(strlen(json) > 1 && json[strlen(json) - 1] == '\n');
  assert_int_equal(th_ctl_decode(json, strlen(json) - 1, &rep), 0);
  assert_int_equal(rep.type, HR_MSG_METRICS);
  assert_int_equal(rep.u.metrics.gpus[0].grid, 114);
  assert_int_equal(rep.u.metrics.gpus[0].leases[HR_MODE_AGNOSTIC], 1);
  assert_int_equal(rep.u.metrics.requests[HR_MSG_METRICS], 2);
  free(json);
  th_raw_close(&r);
  hr_client_close(a);
  hr_client_close(b);
}

/* One headroom-mode lease and one agnostic lease on a GPU with a
 * footprint: the first gets 132 - need, the second 132, and keeps it when
 * a change is pushed, while taking the new NCCL cap and epoch. */
static void test_agnostic_lease(void **state)
{
  hr_client *a = open_client("barrier"), *b = open_client("agnostic");
  hr_client *c = open_client("comm");
  hr_lease *la, *lb;
  hr_budget ba, bb;
  hr_reply rep;
  hr_status st;
  static prom p;
  long long end;
  th_raw r;
  int i, agnostic = 0;
  (void)state;

  assert_int_equal(hr_lease_acquire(a, 1, 2, HR_MODE_HEADROOM, &la), HR_OK);
  /* Clusters of 8: were they counted, the need below would round to 24. */
  assert_int_equal(hr_lease_acquire(b, 1, 8, HR_MODE_AGNOSTIC, &lb), HR_OK);
  assert_int_equal(hr_lease_grid(lb), 132);
  assert_int_equal(hr_lease_headroom(lb), 0);

  /* The agnostic process's own communicator counts for the other lease:
   * 3 CTAs x 1 in flight x cluster 2 = 6. */
  assert_int_equal(hr_comm_register(b, 1, "ep", 3, 1, 1, NULL), HR_OK);
  assert_int_equal(th_wait_grid(la, 126, 2000), 0);
  assert_int_equal(hr_lease_headroom(la), 6);
  end = th_now_ms() + 2000;
  while(hr_lease_epoch(lb) != hr_lease_epoch(la) && th_now_ms() < end)
    hr_lease_wait_change(lb, hr_lease_epoch(lb), 50);
  assert_int_equal(hr_lease_grid(lb), 132);
  assert_int_equal(hr_lease_headroom(lb), 0);
  assert_int_equal(hr_lease_budget(la, &ba), HR_OK);
  assert_int_equal(hr_lease_budget(lb, &bb), HR_OK);
  assert_int_equal(ba.cluster, 2);
  assert_int_equal(bb.mode, HR_MODE_AGNOSTIC);
  assert_int_equal(bb.epoch, ba.epoch);
  assert_int_equal(bb.nccl_max_ctas, ba.nccl_max_ctas);
  assert_int_equal(bb.nccl_max_ctas, 16);

  /* Another footprint, pushed: (3 + 2) x 2 = 10 for the headroom lease,
   * two collectives in flight halve the NCCL cap for both, and the
   * agnostic lease stays at the whole GPU. */
  assert_int_equal(hr_comm_register(c, 1, "tp", 2, 1, 1, NULL), HR_OK);
  assert_int_equal(th_wait_grid(la, 122, 2000), 0);
  end = th_now_ms() + 2000;
  while(hr_lease_epoch(lb) != hr_lease_epoch(la) && th_now_ms() < end)
    hr_lease_wait_change(lb, hr_lease_epoch(lb), 50);
  assert_int_equal(hr_lease_epoch(lb), hr_lease_epoch(la));
  assert_int_equal(hr_lease_grid(lb), 132);
  assert_int_equal(hr_lease_headroom(lb), 0);
  assert_int_equal(hr_lease_budget(lb, &bb), HR_OK);
  assert_int_equal(bb.nccl_max_ctas, 8);
  assert_int_equal(bb.grid, 132);

  /* Status shows the modes; the GPU's budget is the headroom one. */
  assert_int_equal(th_status(daemon_.socket, &st), 0);
  assert_int_equal(st.gpus[1].budget.grid, 122);
  assert_int_equal(st.gpus[1].budget.cluster, 2);
  assert_int_equal(st.gpus[1].n_leases, 2);
  for(i = 0; i < st.gpus[1].n_leases; i++)
    if(st.gpus[1].leases[i].mode == HR_MODE_AGNOSTIC) {
      agnostic++;
      assert_int_equal(st.gpus[1].leases[i].cluster, 8);
    }
  assert_int_equal(agnostic, 1);
  hr_status_free(&st);

  scrape(&p);
  expect_sample(&p, "headroom_gpu_leases", "gpu=\"1\",mode=\"agnostic\"", 1);
  expect_sample(&p, "headroom_gpu_leases", "gpu=\"1\",mode=\"headroom\"", 1);
  expect_sample(&p, "headroom_gpu_grid", "gpu=\"1\"", 122);
  expect_sample(&p, "headroom_gpu_footprint_ctas", "gpu=\"1\"", 5);
  expect_sample(&p, "headroom_gpu_clients", "gpu=\"1\"", 3);

  /* The daemon's own lease reply says so too, not just the library. */
  assert_int_equal(th_raw_open(&r, daemon_.socket), 0);
  assert_int_equal(th_raw_lease(&r, 2, 1, 2, HR_MODE_AGNOSTIC, &rep), 0);
  assert_int_equal(rep.type, HR_MSG_LEASE);
  assert_int_equal(rep.u.lease.budget.mode, HR_MODE_AGNOSTIC);
  assert_int_equal(rep.u.lease.budget.headroom, 0);
  assert_int_equal(rep.u.lease.budget.grid, 132);
  assert_int_equal(rep.u.lease.budget.sms, 132);
  assert_int_equal(rep.u.lease.budget.nccl_max_ctas, 8);
  assert_int_equal(rep.u.lease.budget.epoch, hr_lease_epoch(la));
  th_raw_close(&r);
  hr_client_close(a);
  hr_client_close(b);
  hr_client_close(c);
}

/* Without a daemon an agnostic lease still gets the whole GPU, where a
 * headroom lease falls back to the environment's headroom; after the
 * daemon went away, the same. */
static void test_agnostic_degraded(void **state)
{
  hr_client_options o;
  hr_client *c;
  hr_lease *lh, *la;
  hr_budget b;
  uint32_t epoch;
  int sms;
  (void)state;

  setenv("DG_MEGA_MOE_SM_HEADROOM", "8", 1);
  memset(&o, 0, sizeof(o));
  o.quiet = 1;
  o.reconnect_ms = 50;
  assert_int_equal(hr_client_open(&c, "/nonexistent/headroom.sock", &o),
                   HR_OK);
  unsetenv("DG_MEGA_MOE_SM_HEADROOM");
  assert_int_equal(hr_lease_acquire(c, 0, 2, HR_MODE_HEADROOM, &lh), HR_OK);
  assert_int_equal(hr_lease_acquire(c, 0, 2, HR_MODE_AGNOSTIC, &la), HR_OK);
  assert_int_equal(hr_lease_budget(la, &b), HR_OK);
  sms = b.sms;
  assert_true(sms > 8);
  assert_int_equal(hr_lease_degraded(la), 1);
  assert_int_equal(hr_lease_headroom(lh), 8);
  assert_int_equal(hr_lease_grid(lh), sms - 8);
  assert_int_equal(hr_lease_headroom(la), 0);
  assert_int_equal(hr_lease_grid(la), sms);
  assert_int_equal(b.mode, HR_MODE_AGNOSTIC);
  hr_client_close(c);

  /* headroom-run computes its own fallback: the same rule. */
  {
    char bin[512], out[400], text[64] = "";
    char *argv[] = { bin, "--socket", "/nonexistent/headroom.sock", "--gpu",
                     "0", "--mode", "agnostic", "--quiet", "--", "/bin/sh",
                     "-c", "echo $DG_MEGA_MOE_SM_HEADROOM", NULL };

    snprintf(bin, sizeof(bin), "%s/bin/headroom-run", th_build_dir());
    snprintf(out, sizeof(out), "%s/run.out", daemon_.dir);
    setenv("DG_MEGA_MOE_SM_HEADROOM", "8", 1);
    th_run_line(argv, out, text, sizeof(text));
    unsetenv("DG_MEGA_MOE_SM_HEADROOM");
    assert_string_equal(text, "0\n");
  }

  /* Connected, then the daemon dies: the agnostic lease keeps the GPU. */
  c = open_client("agnostic");
  assert_int_equal(hr_lease_acquire(c, 1, 2, HR_MODE_AGNOSTIC, &la), HR_OK);
  assert_int_equal(hr_lease_grid(la), 132);
  epoch = hr_lease_epoch(la);       /* before: the change may come at once */
  th_daemon_kill(&daemon_);
  assert_int_equal(hr_lease_wait_change(la, epoch, 3000), HR_OK);
  assert_int_equal(hr_lease_degraded(la), 1);
  assert_int_equal(hr_lease_grid(la), 132);
  assert_int_equal(hr_lease_headroom(la), 0);
  hr_client_close(c);
}

/* Clients that ran without a daemon say for how long when they are back:
 * one that lost the daemon, one that never had it. */
static void test_resumed_clients(void **state)
{
  hr_client *a = open_client("survivor"), *b;
  hr_lease *la;
  static prom p;
  double degraded;
  long long down;
  (void)state;

  assert_int_equal(hr_lease_acquire(a, 0, 2, HR_MODE_HEADROOM, &la), HR_OK);
  assert_int_equal(hr_client_connected(a), 1);
  th_daemon_kill(&daemon_);
  down = th_now_ms();
  b = open_client("latecomer");               /* degraded from the start */
  assert_int_equal(hr_client_connected(b), 0);
  usleep(400 * 1000);
  assert_int_equal(th_daemon_restart(&daemon_), 0);
  assert_int_equal(wait_connected(a, 3000), 0);
  assert_int_equal(wait_connected(b, 3000), 0);
  down = th_now_ms() - down;

  scrape(&p);
  expect_sample(&p, "headroom_clients_resumed_total", "", 2);
  degraded = prom_value(&p, "headroom_client_degraded_seconds_total", "");
  /* Each was down at least the 0.4 s slept, at most the whole outage. */
  if(!(degraded >= 0.8 && degraded <= 2.0 * (double)down / 1000 + 0.1))
    fail_msg("degraded seconds %g for an outage of %lld ms", degraded, down);
  /* Counters of the new daemon start from 0 again. */
  expect_sample(&p, "headroom_requests_total", "type=\"lease\"", 1);
  hr_client_close(a);
  hr_client_close(b);
}

/* Lines answered by the connection code rather than served (over the
 * message rate, over the size limit) are requests too: the requests add
 * up to the successful replies plus the error replies, and each has a
 * latency, whoever answered it. */
static void test_refused_lines_add_up(void **state)
{
  static char big[HR_PROTO_MAX_LINE + 16];
  static char lines[32 * 64];
  int64_t sum_req = 0, sum_err = 0;
  int i, ok = 0, errs = 0, limited = 0;
  size_t len = 0;
  hr_request req;
  hr_reply rep;
  th_raw r, o, m;
  (void)state;

  assert_int_equal(th_daemon_start(&daemon_, "max_messages_per_second = 1\n"
                                   "max_message_burst = 10\n"), 0);
  /* hello takes one of the 10: of 16 policy_gets in one write, 9 are
   * served (the rate adds at most one more) and the rest refused, fewer
   * in a row than would cut the client off. */
  assert_int_equal(th_raw_open(&r, daemon_.socket), 0);
  ok++;
  for(i = 0; i < 16; i++)
    len += (size_t)snprintf(lines + len, sizeof(lines) - len,
                            "{\"id\":%d,\"type\":\"policy_get\"}\n", 10 + i);
  assert_int_equal(th_raw_send(&r, lines, len), 0);
  for(i = 0; i < 16; i++) {
    assert_int_equal(th_raw_reply(&r, &rep, 3000), 0);
    assert_true(rep.id == 10 + i);
    if(rep.type == HR_MSG_POLICY_GET) {
      ok++;
    } else {
      assert_int_equal(rep.type, HR_MSG_ERROR);
      assert_int_equal(rep.u.error.code, HR_WERR_LIMIT_EXCEEDED);
      errs++;
      limited++;
    }
  }
  assert_in_range(limited, 5, 7);

  /* A line over 64 KiB: too_large, and the connection is closed. */
  assert_int_equal(th_raw_open(&o, daemon_.socket), 0);
  ok++;
  memset(big, 'x', sizeof(big) - 1);
  big[sizeof(big) - 1] = '\n';
  assert_int_equal(th_raw_send(&o, big, sizeof(big)), 0);
  expect_error(&o, -1, HR_WERR_TOO_LARGE);
  errs++;
  th_raw_close(&o);

  /* Read the counters from a third client: its hello and this metrics
   * request are counted, the metrics request's latency not yet. */
  assert_int_equal(th_raw_open(&m, daemon_.socket), 0);
  ok++;
  memset(&req, 0, sizeof(req));
  req.type = HR_MSG_METRICS;
  req.id = 2;
  assert_int_equal(th_raw_request(&m, &req, &rep), 0);
  assert_int_equal(rep.type, HR_MSG_METRICS);
  for(i = 0; i < HR_MSG_COUNT; i++)
    sum_req += rep.u.metrics.requests[i];
  for(i = 0; i < HR_WERR_COUNT; i++)
    sum_err += rep.u.metrics.errors[i];
  assert_int_equal(rep.u.metrics.requests[HR_MSG_POLICY_GET], 16);
  assert_int_equal(rep.u.metrics.requests[HR_MSG_NONE], 1);
  assert_int_equal(rep.u.metrics.errors[HR_WERR_LIMIT_EXCEEDED], limited);
  assert_int_equal(rep.u.metrics.errors[HR_WERR_TOO_LARGE], 1);
  assert_int_equal(sum_err, errs);
  assert_int_equal(sum_req, ok + errs + 1);
  assert_int_equal(rep.u.metrics.latency_count, sum_req - 1);
  th_raw_close(&m);
  th_raw_close(&r);
}

int main(void)
{
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_checker_refuses_bad_text),
    cmocka_unit_test_setup_teardown(test_metrics_after_traffic, setup,
                                    teardown),
    cmocka_unit_test_setup_teardown(test_agnostic_lease, setup, teardown),
    cmocka_unit_test_setup_teardown(test_agnostic_degraded, setup,
                                    teardown),
    cmocka_unit_test_setup_teardown(test_resumed_clients, setup, teardown),
    cmocka_unit_test_teardown(test_refused_lines_add_up, teardown),
  };

  return cmocka_run_group_tests(tests, NULL, NULL);
}
