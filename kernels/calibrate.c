/*
 * calibrate.c: headroom-calibrate, the smallest safe headroom of this node
 * for a set of NCCL budgets, measured (docs/calibration.md).
 *
 * For each budget (maxCTAs, cgaClusterSize) it creates three two-rank
 * communicators over GPUs 0 and 1, then tries headrooms 0, 2, 4, ... : at
 * each, every launch order runs `trials` times, a barrier probe on each
 * GPU (calib_probe.h) with grid = SMs - headroom beside 64 MiB
 * all-reduces. A probe that times out is a deadlock; the first headroom
 * with none, in every order and trial, is the budget's safe headroom.
 * The table goes to stdout, the calibration file to --output.
 */
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <cuda_runtime.h>

#include "calib_nccl.h"
#include "hr_clock.h"
#include "calib_probe.h"

#define MAX_BUDGETS 32
#define EXIT_SKIP 77

typedef enum {
  ORDER_ONE_FIRST = 0,  /* GPU 1's probe, collectives, GPU 0's probe */
  ORDER_PROBES_FIRST,   /* both probes, then the collectives */
  ORDER_SERIAL,         /* as ONE_FIRST, all-reduces back to back */
  ORDER_COLLS_FIRST,    /* the collectives on both GPUs, then the probes */
  ORDER_COUNT
} order_t;

static const char *const order_names[ORDER_COUNT] = {
  "one_first", "probes_first", "serial", "colls_first",
};

typedef struct budget {
  int max_ctas, cga;    /* 0: NCCL's default */
  int safe;             /* -1: none up to max_headroom */
  int deadlocks;        /* trials that deadlocked, all headrooms */
  double ms;            /* three concurrent all-reduces */
} budget;

typedef struct opts {
  int trials, max_headroom, timeout_ms;
  size_t bytes;
  const char *output;
  int n_budgets;
  budget budgets[MAX_BUDGETS];
} opts;

typedef struct ctx {
  int sms[HR__NCCL_GPUS];
  char name[HR__NCCL_GPUS][256];
  cudaStream_t probe_stream[HR__NCCL_GPUS];
  unsigned *counter;                  /* on GPU 0 */
  int *err[HR__NCCL_GPUS];            /* on each GPU */
  long long timeout_ns;
} ctx;

static void on_alarm(int sig)
{
  static const char msg[] =
    "headroom-calibrate: a trial did not finish in 60 s after its probes "
    "timed out: NCCL itself is stuck; stopping\n";
  (void)sig;
  if(write(2, msg, sizeof(msg) - 1) < 0) {
    /* nothing left to tell */
  }
  _exit(1);
}

static int cuda_ok(cudaError_t e, const char *what)
{
  if(e == cudaSuccess)
    return 1;
  fprintf(stderr, "headroom-calibrate: %s: %s\n", what, cudaGetErrorString(e));
  return 0;
}

/* "8/1", "8/default", "default/1": maxCTAs / cgaClusterSize. */
static int parse_budget(const char *s, budget *b)
{
  char a[16], c[16];
  const char *slash = strchr(s, '/');
  size_t la;
  char *end;
  long v;

  if(!slash || (la = (size_t)(slash - s)) == 0 || la >= sizeof(a) ||
     strlen(slash + 1) == 0 || strlen(slash + 1) >= sizeof(c))
    return -1;
  memcpy(a, s, la);
  a[la] = '\0';
  strcpy(c, slash + 1);
  memset(b, 0, sizeof(*b));
  if(strcmp(a, "default")) {
    v = strtol(a, &end, 10);
    if(*end || v < 1 || v > 64)
      return -1;
    b->max_ctas = (int)v;
  }
  if(strcmp(c, "default")) {
    v = strtol(c, &end, 10);
    if(*end || v < 1 || v > 8)
      return -1;
    b->cga = (int)v;
  }
  return 0;
}

static int parse_budgets(const char *list, opts *o)
{
  char buf[512], *tok, *save = NULL;

  if(strlen(list) >= sizeof(buf))
    return -1;
  strcpy(buf, list);
  o->n_budgets = 0;
  for(tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
    if(o->n_budgets == MAX_BUDGETS ||
       parse_budget(tok, &o->budgets[o->n_budgets]))
      return -1;
    o->n_budgets++;
  }
  return o->n_budgets ? 0 : -1;
}

static void usage(FILE *f)
{
  fprintf(f,
"usage: headroom-calibrate [--trials N] [--budgets LIST] [--max-headroom H]\n"
"                          [--timeout-ms MS] [--mib M] [--output PATH]\n"
"\n"
"Measures on GPUs 0 and 1 the smallest headroom (SMs left free beside a\n"
"whole-grid barrier kernel) with no deadlock against real NCCL all-reduces,\n"
"for each NCCL budget, over four launch orders; prints a table and writes\n"
"the calibration file headroomd reads (docs/calibration.md).\n"
"\n"
"  --trials N        trials per launch order and headroom (3)\n"
"  --budgets LIST    maxCTAs/cgaClusterSize pairs, 'default' for NCCL's\n"
"                    own (8/default,8/1,4/1,2/1,1/1)\n"
"  --max-headroom H  largest headroom tried, even (16)\n"
"  --timeout-ms MS   probe barrier timeout: a deadlock costs this (1000)\n"
"  --mib M           MiB per all-reduce (64)\n"
"  --output PATH     calibration file (calibration.json)\n"
"Exit: 0 done, 77 fewer than 2 GPUs with peer access, 1 error.\n");
}

static int parse_args(int argc, char **argv, opts *o)
{
  static const struct option longs[] = {
    {"trials", required_argument, NULL, 't'},
    {"budgets", required_argument, NULL, 'b'},
    {"max-headroom", required_argument, NULL, 'm'},
    {"timeout-ms", required_argument, NULL, 'T'},
    {"mib", required_argument, NULL, 'M'},
    {"output", required_argument, NULL, 'o'},
    {"help", no_argument, NULL, 'h'},
    {NULL, 0, NULL, 0},
  };
  int ch;
  long v;
  char *end;

  memset(o, 0, sizeof(*o));
  o->trials = 3;
  o->max_headroom = 16;
  o->timeout_ms = 1000;
  o->bytes = (size_t)64 << 20;
  o->output = "calibration.json";
  parse_budgets("8/default,8/1,4/1,2/1,1/1", o);
  while((ch = getopt_long(argc, argv, "h", longs, NULL)) != -1) {
    switch(ch) {
    case 'b':
      if(parse_budgets(optarg, o)) {
        fprintf(stderr, "headroom-calibrate: bad --budgets '%s'\n", optarg);
        return -1;
      }
      break;
    case 't': case 'm': case 'T': case 'M':
      v = strtol(optarg, &end, 10);
      if(*end || v < (ch == 'm' ? 0 : 1) || v > 100000) {
        fprintf(stderr, "headroom-calibrate: bad number '%s'\n", optarg);
        return -1;
      }
      if(ch == 't')
        o->trials = (int)v;
      else if(ch == 'm')
        o->max_headroom = (int)v & ~1;
      else if(ch == 'T')
        o->timeout_ms = (int)v;
      else
        o->bytes = (size_t)v << 20;
      break;
    case 'o':
      o->output = optarg;
      break;
    case 'h':
      usage(stdout);
      exit(0);
    default:
      usage(stderr);
      return -1;
    }
  }
  if(optind != argc) {
    usage(stderr);
    return -1;
  }
  return 0;
}

/* Two GPUs with peer access both ways, each set up for the probe. Returns
 * 0, EXIT_SKIP, or 1. */
static int ctx_open(ctx *x, const opts *o)
{
  int n = 0, a = 0, b = 0, g;

  memset(x, 0, sizeof(*x));
  if(cudaGetDeviceCount(&n) != cudaSuccess || n < 2) {
    printf("SKIP: headroom-calibrate needs 2 GPUs; this machine has %d\n",
           n < 0 ? 0 : n);
    return EXIT_SKIP;
  }
  cudaDeviceCanAccessPeer(&a, 0, 1);
  cudaDeviceCanAccessPeer(&b, 1, 0);
  if(!a || !b) {
    printf("SKIP: headroom-calibrate needs peer access between GPUs 0 "
           "and 1\n");
    return EXIT_SKIP;
  }
  for(g = 0; g < HR__NCCL_GPUS; g++) {
    struct cudaDeviceProp p;
    if(!cuda_ok(cudaSetDevice(g), "cudaSetDevice") ||
       !cuda_ok(cudaGetDeviceProperties(&p, g), "device properties") ||
       !cuda_ok(cudaDeviceEnablePeerAccess(1 - g, 0), "peer access") ||
       !cuda_ok(hr__probe_setup(), "probe setup") ||
       !cuda_ok(cudaStreamCreateWithFlags(&x->probe_stream[g],
                                          cudaStreamNonBlocking), "stream") ||
       !cuda_ok(cudaMalloc((void **)&x->err[g], sizeof(int)), "cudaMalloc"))
      return 1;
    x->sms[g] = p.multiProcessorCount;
    snprintf(x->name[g], sizeof(x->name[g]), "%s", p.name);
  }
  cudaSetDevice(0);
  if(!cuda_ok(cudaMalloc((void **)&x->counter, sizeof(unsigned)),
              "cudaMalloc"))
    return 1;
  x->timeout_ns = (long long)o->timeout_ms * 1000000LL;
  return 0;
}

static int launch_probe(ctx *x, int g, int headroom)
{
  int grid0 = (x->sms[0] - headroom) & ~1, grid1 = (x->sms[1] - headroom) & ~1;
  int grid = g ? grid1 : grid0;

  cudaSetDevice(g);
  return cuda_ok(hr__probe_launch(grid, x->counter, (unsigned)(grid0 + grid1),
                                  x->timeout_ns, x->err[g],
                                  x->probe_stream[g]), "probe launch") ? 0 : -1;
}

static void sleep_ms(int ms)
{
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

static int sync_all(void)
{
  int g, ok = 1;

  for(g = 0; g < HR__NCCL_GPUS; g++) {
    cudaSetDevice(g);
    ok &= cuda_ok(cudaDeviceSynchronize(), "synchronize");
  }
  return ok ? 0 : -1;
}

/* One trial: 1 deadlocked, 0 did not, -1 error. `s` NULL: probes alone. */
static int trial(ctx *x, hr__nccl_set *s, order_t order, int headroom)
{
  char why[256];
  int g, e[HR__NCCL_GPUS] = {0, 0}, rc = 0;

  for(g = 0; g < HR__NCCL_GPUS; g++) {
    cudaSetDevice(g);
    cudaMemset(x->err[g], 0, sizeof(int));
  }
  cudaSetDevice(0);
  cudaMemset(x->counter, 0, sizeof(unsigned));
  if(sync_all())
    return -1;
  if(!s)
    order = ORDER_PROBES_FIRST;
  switch(order) {
  case ORDER_ONE_FIRST:
  case ORDER_SERIAL:
    rc = launch_probe(x, 1, headroom);
    if(!rc)
      rc = hr__nccl_set_allreduce(s, order == ORDER_ONE_FIRST, why,
                                  sizeof(why));
    sleep_ms(2);
    if(!rc)
      rc = launch_probe(x, 0, headroom);
    break;
  case ORDER_PROBES_FIRST:
    rc = launch_probe(x, 0, headroom);
    if(!rc)
      rc = launch_probe(x, 1, headroom);
    if(!rc && s)
      rc = hr__nccl_set_allreduce(s, 1, why, sizeof(why));
    break;
  case ORDER_COLLS_FIRST:
  case ORDER_COUNT:
    rc = hr__nccl_set_allreduce(s, 1, why, sizeof(why));
    if(!rc)
      rc = launch_probe(x, 0, headroom);
    if(!rc)
      rc = launch_probe(x, 1, headroom);
    break;
  }
  if(rc) {
    fprintf(stderr, "headroom-calibrate: %s\n", why);
    return -1;
  }
  /* The probes end by their timeout, after which NCCL has its SMs: a
   * trial that still does not finish is NCCL's own hang. */
  alarm((unsigned)(x->timeout_ns / 1000000000LL) + 60);
  rc = sync_all();
  alarm(0);
  if(rc)
    return -1;
  for(g = 0; g < HR__NCCL_GPUS; g++) {
    cudaSetDevice(g);
    cudaMemcpy(&e[g], x->err[g], sizeof(int), cudaMemcpyDeviceToHost);
  }
  return e[0] || e[1];
}

static double now_ms(void)
{
  return hr__clock_ns() / 1e6;
}

/* Three concurrent all-reduces on both GPUs, alone: mean of 5 after 2
 * warm-up runs. */
static double time_collectives(hr__nccl_set *s)
{
  char why[256];
  double t0 = 0;
  int i;

  for(i = 0; i < 7; i++) {
    if(i == 2)
      t0 = now_ms();
    if(hr__nccl_set_allreduce(s, 1, why, sizeof(why)) || sync_all())
      return -1;
  }
  return (now_ms() - t0) / 5;
}

static void budget_label(const budget *b, char *buf, size_t n)
{
  char a[16], c[16];

  if(b->max_ctas)
    snprintf(a, sizeof(a), "%d", b->max_ctas);
  else
    snprintf(a, sizeof(a), "default");
  if(b->cga)
    snprintf(c, sizeof(c), "%d", b->cga);
  else
    snprintf(c, sizeof(c), "default");
  snprintf(buf, n, "%s/%s", a, c);
}

/* Headrooms 0, 2, ... until one passes every trial of every order. */
static int measure(ctx *x, const opts *o, budget *b)
{
  char label[40], why[256];
  hr__nccl_set s;
  int h, ord, t, d, rc = 0;

  budget_label(b, label, sizeof(label));
  if(hr__nccl_set_create(&s, b->max_ctas, b->cga, o->bytes, why,
                         sizeof(why))) {
    fprintf(stderr, "headroom-calibrate: budget %s: %s\n", label, why);
    hr__nccl_set_destroy(&s);
    return -1;
  }
  b->ms = time_collectives(&s);
  b->safe = -1;
  for(h = 0; h <= o->max_headroom && b->safe < 0; h += 2) {
    int failed = 0;
    for(ord = 0; ord < ORDER_COUNT && !failed; ord++) {
      for(t = 0; t < o->trials && !failed; t++) {
        d = trial(x, &s, (order_t)ord, h);
        if(d < 0) {
          rc = -1;
          goto out;
        }
        if(d) {
          failed = 1;
          b->deadlocks++;
          printf("  budget %-12s headroom %2d: deadlock (order %s, trial "
                 "%d)\n", label, h, order_names[ord], t + 1);
        }
      }
    }
    if(!failed) {
      b->safe = h;
      printf("  budget %-12s headroom %2d: %d trials x %d orders, no "
             "deadlock\n", label, h, o->trials, ORDER_COUNT);
    }
    fflush(stdout);
  }
out:
  hr__nccl_set_destroy(&s);
  return rc;
}

static int write_json(const ctx *x, const opts *o, const char *nccl_version)
{
  cJSON *root = cJSON_CreateObject(), *gpus, *list, *it;
  char date[32], host[64] = "", *text = NULL;
  time_t now = time(NULL);
  struct tm tm;
  FILE *f = NULL;
  int g, i, rc = -1;

  gmtime_r(&now, &tm);
  strftime(date, sizeof(date), "%Y-%m-%dT%H:%M:%SZ", &tm);
  gethostname(host, sizeof(host) - 1);
  if(!root)
    goto out;
  cJSON_AddNumberToObject(root, "version", 1);
  cJSON_AddStringToObject(root, "date", date);
  cJSON_AddStringToObject(root, "node", host);
  cJSON_AddStringToObject(root, "nccl_version", nccl_version);
  gpus = cJSON_AddArrayToObject(root, "gpus");
  for(g = 0; gpus && g < HR__NCCL_GPUS; g++) {
    it = cJSON_CreateObject();
    cJSON_AddNumberToObject(it, "index", g);
    cJSON_AddNumberToObject(it, "sms", x->sms[g]);
    cJSON_AddStringToObject(it, "name", x->name[g]);
    cJSON_AddItemToArray(gpus, it);
  }
  list = cJSON_AddArrayToObject(root, "budgets");
  for(i = 0; list && i < o->n_budgets; i++) {
    const budget *b = &o->budgets[i];
    it = cJSON_CreateObject();
    cJSON_AddNumberToObject(it, "max_ctas", b->max_ctas);
    cJSON_AddNumberToObject(it, "cga_cluster_size", b->cga);
    if(b->safe >= 0)
      cJSON_AddNumberToObject(it, "safe_headroom", b->safe);
    else
      cJSON_AddNullToObject(it, "safe_headroom");
    /* Microsecond precision is all a wall-clock mean can claim. */
    cJSON_AddNumberToObject(it, "collective_ms",
                            (double)(long)(b->ms * 1000 + 0.5) / 1000);
    cJSON_AddNumberToObject(it, "trials", o->trials);
    cJSON_AddNumberToObject(it, "orders", ORDER_COUNT);
    cJSON_AddItemToArray(list, it);
  }
  text = cJSON_Print(root);
  if(!text)
    goto out;
  f = fopen(o->output, "w");
  if(!f || fprintf(f, "%s\n", text) < 0 || fclose(f)) {
    f = NULL;
    perror(o->output);
    goto out;
  }
  f = NULL;
  rc = 0;
out:
  if(f)
    fclose(f);
  free(text);
  cJSON_Delete(root);
  return rc;
}

int main(int argc, char **argv)
{
  char why[256], version[32], label[40];
  double t0 = now_ms();
  opts o;
  ctx x;
  int rc, i, h;

  if(parse_args(argc, argv, &o))
    return 2;
  rc = ctx_open(&x, &o);
  if(rc)
    return rc;
  if(hr__nccl_open(version, sizeof(version), why, sizeof(why))) {
    fprintf(stderr, "headroom-calibrate: %s\n", why);
    return 1;
  }
  signal(SIGALRM, on_alarm);
  printf("headroom-calibrate: GPUs 0 and 1 (%s, %d and %d SMs), NCCL %s, "
         "%d trials x %d orders, headroom up to %d, timeout %d ms\n",
         x.name[0], x.sms[0], x.sms[1], version, o.trials, ORDER_COUNT,
         o.max_headroom, o.timeout_ms);
  /* The probe alone: the headroom below which it cannot be resident even
   * with nothing beside it, so what follows is read against that. */
  for(h = 0; h <= o.max_headroom; h += 2) {
    rc = trial(&x, NULL, ORDER_PROBES_FIRST, h);
    if(rc < 0)
      return 1;
    if(!rc)
      break;
  }
  hr__probe_max_clusters(&i);
  printf("  probe alone: completes at headroom %d (clusters of %d resident "
         "at once: %d)\n", h, HR__PROBE_CLUSTER, i);
  for(i = 0; i < o.n_budgets; i++)
    if(measure(&x, &o, &o.budgets[i]))
      return 1;

  printf("\n| budget (maxCTAs/cga) | safe headroom | deadlocked trials | "
         "3 all-reduces (ms) |\n|---|---|---|---|\n");
  for(i = 0; i < o.n_budgets; i++) {
    budget_label(&o.budgets[i], label, sizeof(label));
    if(o.budgets[i].safe >= 0)
      printf("| %s | %d | %d | %.3f |\n", label, o.budgets[i].safe,
             o.budgets[i].deadlocks, o.budgets[i].ms);
    else
      printf("| %s | none <= %d | %d | %.3f |\n", label, o.max_headroom,
             o.budgets[i].deadlocks, o.budgets[i].ms);
  }
  if(write_json(&x, &o, version))
    return 1;
  printf("\nwrote %s in %.1f s\n", o.output, (now_ms() - t0) / 1000);
  return 0;
}
