/*
 * trials_rank.c: the life of one rank of test_overlap_trials (trials.h).
 */
#include "trials.h"

#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cuda_runtime.h>

/* ---- logging, time ----------------------------------------------------- */

void tr_log(const tr_rank *r, const char *fmt, ...)
{
  char line[2048];
  va_list ap;
  int n = snprintf(line, sizeof(line), "[rank %d] ", r->rank);
  va_start(ap, fmt);
  vsnprintf(line + n, sizeof(line) - (size_t)n, fmt, ap);
  va_end(ap);
  /* One write per line: the two ranks share the terminal. */
  printf("%s\n", line);
  fflush(stdout);
}

void tr_say(const tr_rank *r, const char *fmt, ...)
{
  char line[4096];
  va_list ap;
  if(r->rank != 0)
    return;
  va_start(ap, fmt);
  vsnprintf(line, sizeof(line), fmt, ap);
  va_end(ap);
  printf("%s\n", line);
  fflush(stdout);
}

void tr_sleep_us(int us)
{
  struct timespec ts = { us / 1000000, (long)(us % 1000000) * 1000L };
  while(us > 0 && nanosleep(&ts, &ts) == -1 && errno == EINTR)
    ;
}

/* ---- the watchdog -------------------------------------------------------- */

/* Prepared outside the handler, which only writes it and exits. */
static char watch_msg[256];
static size_t watch_len;

static void on_alarm(int sig)
{
  ssize_t w;
  (void)sig;
  w = write(1, watch_msg, watch_len);
  (void)w;
  _exit(3);
}

void tr_watch(const tr_rank *r, const char *what, int seconds)
{
  int n = snprintf(watch_msg, sizeof(watch_msg),
                   "[rank %d] FAIL: no progress for %d s at %s (a GPU wait "
                   "that never ended)\n", r->rank, seconds, what);
  watch_len = n < 0 ? 0 : (size_t)n >= sizeof(watch_msg) ? sizeof(watch_msg) - 1
                                                           : (size_t)n;
  alarm((unsigned)seconds);
}

/* ---- keeping in step ----------------------------------------------------- */

static void lost(tr_rank *r, const char *why)
{
  tr_log(r, "FAIL: %s", why);
  _exit(1);
}

void tr_gather(tr_rank *r, const char *tag, const double *mine, int n,
               double *all)
{
  char why[300];
  if(tr_sync_gather(&r->sync, tag, mine, n, all, why, sizeof(why)))
    lost(r, why);
}

int tr_agree(tr_rank *r, const char *tag, int ok)
{
  double mine = ok ? 1 : 0, all[2];
  tr_gather(r, tag, &mine, 1, all);
  return all[0] != 0 && all[1] != 0;
}

void tr_barrier(tr_rank *r, const char *tag)
{
  tr_gather(r, tag, NULL, 0, NULL);
}

/* ---- leases, NCCL config, MoE arguments ---------------------------------- */

int tr_lease_settle(const hr_lease *l)
{
  double t0 = gt_now_ms();
  for(;;) {
    int rc = hr_lease_wait_change(l, hr_lease_epoch(l), 300);
    if(rc == HR_ETIMEDOUT)
      return HR_OK;
    if(rc)
      return rc;
    if(gt_now_ms() - t0 > 5000)
      return HR_ETIMEDOUT;
  }
}

ncclConfig_t tr_nccl_config(const hr_lease *l)
{
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 1;
  if(l)
    hr_lease_fill_nccl_config(l, &cfg);
  return cfg;
}

hr_moe_args tr_args(const tr_rank *r, int ti, int timeout_ms)
{
  hr_moe_args a;
  memset(&a, 0, sizeof(a));
  a.tokens = tr_tokens[ti];
  a.experts = r->g.s.E;
  a.hidden = r->g.s.H;
  a.inter = r->g.s.I;
  a.topk = r->g.s.k;
  a.x = r->in[ti].x;
  a.topk_ids = r->in[ti].ids;
  a.topk_weights = r->in[ti].wts;
  a.w1 = r->g.w1;
  a.w2 = r->g.w2;
  a.y = r->g.y;
  a.timeout_ms = timeout_ms;
  return a;
}

int tr_output_matches(tr_rank *r, int ti, void *stream)
{
  const size_t bytes = (size_t)tr_tokens[ti] * r->g.s.H * 2;
  if(cudaMemcpyAsync(r->g.y_h, r->g.y, bytes, cudaMemcpyDeviceToHost,
                     (cudaStream_t)stream) != cudaSuccess ||
     cudaStreamSynchronize((cudaStream_t)stream) != cudaSuccess)
    return 0;
  return memcmp(r->g.y_h, r->in[ti].y_ref, bytes) == 0;
}

/* ---- setup ------------------------------------------------------------- */

/* Per token count: random routing, its inputs kept on the device, and y_ref
 * from the full grid on the idle GPU, checked against the CPU reference. */
static int inputs_init(tr_rank *r)
{
  gt_moe *g = &r->g;
  const int grid = r->sms / r->o.cluster * r->o.cluster;
  char what[64];
  int ti;

  for(ti = 0; ti < TR_NTOKENS; ti++) {
    const int T = tr_tokens[ti];
    tr_input *in = &r->in[ti];
    const int before = gt_failures;
    int rc;

    gt_route_random(g, T);
    in->y_ref = malloc((size_t)T * g->s.H * 2);
    if(!in->y_ref ||
       cudaMalloc((void **)&in->x, (size_t)T * g->s.H * 2) != cudaSuccess ||
       cudaMalloc((void **)&in->ids, (size_t)T * g->s.k * 4) != cudaSuccess ||
       cudaMalloc((void **)&in->wts, (size_t)T * g->s.k * 4) != cudaSuccess ||
       cudaMemcpy(in->x, g->x, (size_t)T * g->s.H * 2,
                  cudaMemcpyDeviceToDevice) != cudaSuccess ||
       cudaMemcpy(in->ids, g->ids, (size_t)T * g->s.k * 4,
                  cudaMemcpyDeviceToDevice) != cudaSuccess ||
       cudaMemcpy(in->wts, g->wts, (size_t)T * g->s.k * 4,
                  cudaMemcpyDeviceToDevice) != cudaSuccess) {
      tr_log(r, "FAIL: inputs of T=%d: %s", T,
             cudaGetErrorString(cudaGetLastError()));
      return -1;
    }
    rc = gt_run(g, grid, HR_MODE_HEADROOM, r->o.cluster, 10000);
    if(rc) {
      tr_log(r, "FAIL: y_ref of T=%d at the full grid %d: %s", T, grid,
             hr_strerror(rc));
      return -1;
    }
    snprintf(what, sizeof(what), "rank %d y_ref, grid %d", r->rank, grid);
    gt_expect_correct(g, what);
    if(gt_failures != before)
      return -1;
    memcpy(in->y_ref, g->y_h, (size_t)T * g->s.H * 2);
  }
  return 0;
}

static int setup(tr_rank *r)
{
  hr_client_options co;
  struct cudaDeviceProp prop;
  char name[64], version[32], why[300];
  int rc, i;

  memset(&co, 0, sizeof(co));
  snprintf(name, sizeof(name), "overlap-trials rank %d", r->rank);
  co.name = name;
  rc = hr_client_open(&r->client, r->o.socket, &co);
  if(rc || !hr_client_connected(r->client)) {
    tr_log(r, "FAIL: no headroomd on %s (%s)", r->o.socket,
           rc ? hr_strerror(rc) : "degraded client");
    return -1;
  }
  if(hr_client_gpu_count(r->client) < 2) {
    tr_log(r, "FAIL: headroomd reports %d GPUs, the trials need 2",
           hr_client_gpu_count(r->client));
    return -1;
  }
  if(r->o.no_gpu) {
    r->sms = hr_client_gpu_sms(r->client, r->rank);
    return 0;
  }
  if(tr_nccl_open(version, sizeof(version), why, sizeof(why))) {
    tr_log(r, "FAIL: %s", why);
    return -1;
  }
  if(cudaSetDevice(r->rank) != cudaSuccess ||
     cudaGetDeviceProperties(&prop, r->rank) != cudaSuccess) {
    tr_log(r, "FAIL: CUDA device %d: %s", r->rank,
           cudaGetErrorString(cudaGetLastError()));
    return -1;
  }
  r->sms = prop.multiProcessorCount;
  if(hr_client_gpu_sms(r->client, r->rank) != r->sms) {
    tr_log(r, "FAIL: headroomd says GPU %d has %d SMs, CUDA says %d", r->rank,
           hr_client_gpu_sms(r->client, r->rank), r->sms);
    return -1;
  }
  tr_log(r, "CUDA device %d: %s, %d SMs; NCCL %s; headroomd on %s", r->rank,
         prop.name, r->sms, version, r->o.socket);
  if(gt_moe_init_on(&r->g, r->rank, &gt_shapes[GT_QWEN3], tr_tokens[TR_NTOKENS - 1],
                    why, sizeof(why))) {
    tr_log(r, "FAIL: %s", why);
    return -1;
  }
  if(inputs_init(r))
    return -1;
  for(i = 0; i < TR_NCOMMS; i++)
    if(cudaStreamCreateWithFlags((cudaStream_t *)&r->comm_stream[i],
                                 cudaStreamNonBlocking) != cudaSuccess)
      return -1;
  for(i = 0; i < (int)(sizeof(r->ev) / sizeof(r->ev[0])); i++)
    if(cudaEventCreate((cudaEvent_t *)&r->ev[i]) != cudaSuccess)
      return -1;
  return 0;
}

static void teardown(tr_rank *r)
{
  int i;

  if(!r->o.no_gpu) {
    for(i = 0; i < (int)(sizeof(r->ev) / sizeof(r->ev[0])); i++)
      if(r->ev[i])
        cudaEventDestroy((cudaEvent_t)r->ev[i]);
    for(i = 0; i < TR_NCOMMS; i++)
      if(r->comm_stream[i])
        cudaStreamDestroy((cudaStream_t)r->comm_stream[i]);
    for(i = 0; i < TR_NTOKENS; i++) {
      cudaFree(r->in[i].x);
      cudaFree(r->in[i].ids);
      cudaFree(r->in[i].wts);
      free(r->in[i].y_ref);
    }
    if(r->g.m)
      gt_moe_free(&r->g);
  }
  hr_client_close(r->client);
  r->client = NULL;
}

int tr_rank_main(const tr_opts *o, int rank, int sync_fd)
{
  static tr_rank rk;
  tr_rank *r = &rk;
  char seed[32];
  int ok, all_passed;

  memset(r, 0, sizeof(*r));
  r->o = *o;
  r->rank = rank;
  tr_sync_init(&r->sync, sync_fd);
  signal(SIGALRM, on_alarm);
  setvbuf(stdout, NULL, _IOLBF, 0);

  /* The data's seed is the run's: HR_TEST_SEED=seed repeats both. */
  snprintf(seed, sizeof(seed), "%llu", (unsigned long long)o->seed);
  setenv("HR_TEST_SEED", seed, 1);
  if(!o->no_gpu) {
    char what[32];
    snprintf(what, sizeof(what), "[rank %d] data", rank);
    gt_seed(what);
  }

  tr_watch(r, "setup (MoE data, y_ref against the CPU reference)", 600);
  ok = setup(r) == 0;
  if(!tr_agree(r, "setup", ok)) {
    if(ok)
      tr_log(r, "the other rank failed its setup");
    teardown(r);
    return 1;
  }
  alarm(0);

  /* Test 1 provokes the deadlock on purpose; it runs last so that, should
   * it ever end in a hang the watchdog has to kill, tests 2-4 have already
   * given their verdicts. */
  if(o->tests & TR_TEST_HEADROOM)
    r->failed += !tr_test_mode(r, HR_MODE_HEADROOM);
  if(o->tests & TR_TEST_PARTITION)
    r->failed += !tr_test_mode(r, HR_MODE_PARTITION);
  if(o->tests & TR_TEST_INCIDENT)
    r->failed += !tr_test_incident(r);
  if(o->tests & TR_TEST_REPRO)
    r->failed += !tr_test_repro(r);
  alarm(0);

  all_passed = tr_agree(r, "done", r->failed == 0);
  teardown(r);
  tr_sync_free(&r->sync);
  return all_passed ? 0 : 1;
}
