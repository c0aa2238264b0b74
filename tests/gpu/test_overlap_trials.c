/*
 * test_overlap_trials.c: the mega-MoE kernel beside real NCCL collectives
 * on 2 GPUs, one process per GPU, against a real headroomd:
 *
 *   test 1 (repro)      the stock full-device grid, no lease, NCCL at its
 *                       default config, in the INC-1291 order: the
 *                       deadlock happens and comes back as
 *                       HR_EBARRIER_TIMEOUT, nothing traps, the next launch
 *                       on the idle GPU is right
 *   test 2 (headroom)   leases in headroom mode, communicators built from
 *                       the lease's ncclConfig_t, hr_moe_forward: zero
 *                       timeouts and y_ref bitwise over the randomized
 *                       trials (launch orders and collective mixes of
 *                       trials_plan.h)
 *   test 3 (partition)  the same trials in partition mode (green
 *                       contexts), times beside headroom mode's
 *   test 4 (incident)   a forced timeout raises GPU 0's headroom, the
 *                       daemon pushes it, the next launch uses it
 *
 * This process is the launcher: it checks for 2 GPUs and NCCL (else
 * prints "SKIP: ..." and exits 77), starts headroomd in a temporary
 * folder, re-executes itself once per GPU (--rank N; ranks on CUDA devices
 * 0 and 1), keeps the ranks in step (trials_sync.h), stops the daemon
 * with SIGTERM (a daemon that crashed fails the run), and exits 0 only
 * when every selected test passed. Each test prints one "PASS testN ..."
 * or "FAIL testN ..." line with its numbers; docs/gpu-tests.md says how to
 * read them.
 *
 *   test_overlap_trials [--trials N] [--tests repro,headroom,partition,
 *                       incident] [--seed S] [--timeout-ms MS] ...
 *   (--help lists every option; HR_TRIALS and HR_TEST_SEED set the first
 *   and the seed too)
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cuda_runtime.h>

#include "trials.h"
#include "trials_daemon.h"

#define NAME "test_overlap_trials"

enum {
  OPT_TRIALS = 256, OPT_TESTS, OPT_SEED, OPT_TIMEOUT, OPT_REPRO_TIMEOUT,
  OPT_REPRO_TRIALS, OPT_CLUSTER, OPT_LIMIT, OPT_NO_GPU, OPT_HEADROOMD,
  OPT_HEADROOMCTL, OPT_KEEP, OPT_RANK, OPT_SYNC_FD, OPT_DIR, OPT_SOCKET,
  OPT_HELP
};

static const struct option long_options[] = {
  {"trials", required_argument, NULL, OPT_TRIALS},
  {"tests", required_argument, NULL, OPT_TESTS},
  {"seed", required_argument, NULL, OPT_SEED},
  {"timeout-ms", required_argument, NULL, OPT_TIMEOUT},
  {"repro-timeout-ms", required_argument, NULL, OPT_REPRO_TIMEOUT},
  {"repro-trials", required_argument, NULL, OPT_REPRO_TRIALS},
  {"cluster", required_argument, NULL, OPT_CLUSTER},
  {"limit-s", required_argument, NULL, OPT_LIMIT},
  {"no-gpu", no_argument, NULL, OPT_NO_GPU},
  {"headroomd", required_argument, NULL, OPT_HEADROOMD},
  {"headroomctl", required_argument, NULL, OPT_HEADROOMCTL},
  {"keep", no_argument, NULL, OPT_KEEP},
  {"rank", required_argument, NULL, OPT_RANK},
  {"sync-fd", required_argument, NULL, OPT_SYNC_FD},
  {"dir", required_argument, NULL, OPT_DIR},
  {"socket", required_argument, NULL, OPT_SOCKET},
  {"help", no_argument, NULL, OPT_HELP},
  {NULL, 0, NULL, 0}
};

static const char usage_text[] =
"Usage: " NAME " [OPTION]...\n"
"The mega-MoE kernel beside NCCL on 2 GPUs against a real headroomd:\n"
"test 1 repro, 2 headroom mode, 3 partition mode, 4 incident.\n"
"\n"
"  --trials N            randomized trials per mode, tests 2 and 3 (200;\n"
"                        or $HR_TRIALS)\n"
"  --tests LIST          comma-separated: repro,headroom,partition,incident\n"
"                        (all; test 1, repro, runs last)\n"
"  --seed S              the plan's and the data's seed (else $HR_TEST_SEED,\n"
"                        else the clock; printed either way)\n"
"  --timeout-ms MS       barrier timeout of every trial launch (2000)\n"
"  --repro-timeout-ms MS barrier timeout of test 1 (1000)\n"
"  --repro-trials N      test 1's trials (3)\n"
"  --cluster C           mega kernel cluster size, 1 or 2 (2)\n"
"  --limit-s S           kill the ranks past S seconds in all (420)\n"
"  --headroomd PATH      the daemon (else $HEADROOMD, else ../bin/headroomd\n"
"                        beside this program's folder)\n"
"  --headroomctl PATH    (likewise, $HEADROOMCTL)\n"
"  --keep                keep the temporary folder (logs, NCCL ids)\n"
"  --no-gpu              only the harness: a daemon with a config topology\n"
"                        of 2 x 132 SMs, the ranks, leases, footprints, the\n"
"                        plan and the barriers; no CUDA, no NCCL, no kernel\n"
"  --help                this text\n";

static int parse_int(const char *s, int lo, int hi, int *out)
{
  char *end;
  long v;
  errno = 0;
  v = strtol(s, &end, 10);
  if(errno || end == s || *end || v < lo || v > hi)
    return -1;
  *out = (int)v;
  return 0;
}

static int parse_tests(const char *s, int *out)
{
  static const char *const names[] = { "repro", "headroom", "partition",
                                       "incident" };
  char buf[256], *tok, *save = NULL;
  int i, bits = 0;

  snprintf(buf, sizeof(buf), "%s", s);
  for(tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
    for(i = 0; i < 4; i++)
      if(!strcmp(tok, names[i]))
        break;
    if(i == 4)
      return -1;
    bits |= 1 << i;
  }
  *out = bits;
  return bits ? 0 : -1;
}

typedef struct launch_opts {
  tr_opts o;
  int rank, sync_fd, limit_s, keep, seed_given;
  char headroomd[TR_PATH_MAX];
} launch_opts;

/* Beside this program: build/tests/X -> build/bin/NAME. */
static void default_bin(char *out, size_t n, const char *env, const char *name)
{
  char self[PATH_MAX];
  ssize_t len;
  char *slash;

  if(getenv(env) && *getenv(env)) {
    snprintf(out, n, "%s", getenv(env));
    return;
  }
  len = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if(len <= 0) {
    snprintf(out, n, "build/bin/%s", name);
    return;
  }
  self[len] = '\0';
  slash = strrchr(self, '/');
  if(slash)
    *slash = '\0';
  if(strlen(self) + strlen(name) + 9 >= n)
    snprintf(out, n, "build/bin/%s", name);
  else
    snprintf(out, n, "%.*s/../bin/%s", (int)(n - 9 - strlen(name)), self, name);
}

static int parse(int argc, char **argv, launch_opts *lo)
{
  tr_opts *o = &lo->o;
  const char *env;
  int c, v;

  memset(lo, 0, sizeof(*lo));
  lo->rank = -1;
  lo->sync_fd = -1;
  lo->limit_s = 420;
  o->trials = 200;
  o->tests = TR_TEST_ALL;
  o->timeout_ms = 2000;
  o->repro_timeout_ms = 1000;
  o->repro_trials = 3;
  o->cluster = 2;
  if((env = getenv("HR_TRIALS")) && parse_int(env, 1, 100000, &o->trials)) {
    fprintf(stderr, NAME ": bad HR_TRIALS '%s'\n", env);
    return -1;
  }
  if((env = getenv("HR_TEST_SEED")) && *env) {
    o->seed = strtoull(env, NULL, 0);
    lo->seed_given = 1;
  }
  default_bin(lo->headroomd, sizeof(lo->headroomd), "HEADROOMD", "headroomd");
  default_bin(o->headroomctl, sizeof(o->headroomctl), "HEADROOMCTL",
              "headroomctl");
  while((c = getopt_long(argc, argv, "", long_options, NULL)) != -1) {
    switch(c) {
    case OPT_TRIALS:
      if(parse_int(optarg, 1, 100000, &o->trials))
        goto bad;
      break;
    case OPT_TESTS:
      if(parse_tests(optarg, &o->tests))
        goto bad;
      break;
    case OPT_SEED:
      o->seed = strtoull(optarg, NULL, 0);
      lo->seed_given = 1;
      break;
    case OPT_TIMEOUT:
      if(parse_int(optarg, 10, 600000, &o->timeout_ms))
        goto bad;
      break;
    case OPT_REPRO_TIMEOUT:
      if(parse_int(optarg, 10, 600000, &o->repro_timeout_ms))
        goto bad;
      break;
    case OPT_REPRO_TRIALS:
      if(parse_int(optarg, 1, 100, &o->repro_trials))
        goto bad;
      break;
    case OPT_CLUSTER:
      if(parse_int(optarg, 1, 2, &o->cluster))
        goto bad;
      break;
    case OPT_LIMIT:
      if(parse_int(optarg, 10, 86400, &lo->limit_s))
        goto bad;
      break;
    case OPT_NO_GPU: o->no_gpu = 1; break;
    case OPT_HEADROOMD:
      snprintf(lo->headroomd, sizeof(lo->headroomd), "%s", optarg);
      break;
    case OPT_HEADROOMCTL:
      snprintf(o->headroomctl, sizeof(o->headroomctl), "%s", optarg);
      break;
    case OPT_KEEP: lo->keep = 1; break;
    case OPT_RANK:
      if(parse_int(optarg, 0, 1, &lo->rank))
        goto bad;
      break;
    case OPT_SYNC_FD:
      if(parse_int(optarg, 0, 1 << 20, &v))
        goto bad;
      lo->sync_fd = v;
      break;
    case OPT_DIR: snprintf(o->dir, sizeof(o->dir), "%s", optarg); break;
    case OPT_SOCKET: snprintf(o->socket, sizeof(o->socket), "%s", optarg); break;
    case OPT_HELP:
      fputs(usage_text, stdout);
      exit(0);
    default:
      goto bad;
    }
  }
  if(optind < argc)
    goto bad;
  if(!o->seed)
    o->seed = 1;
  return 0;
bad:
  fprintf(stderr, NAME ": bad arguments (see --help)\n");
  return -1;
}

/* ---- the launcher ------------------------------------------------------ */

static void require_gpus(void)
{
  struct cudaDeviceProp p0, p1;
  int n = 0;

  gt_require_gpu(NAME);                 /* SKIP without any GPU */
  if(cudaGetDeviceCount(&n) != cudaSuccess || n < 2) {
    printf("SKIP: %s: needs 2 GPUs, found %d\n", NAME, n);
    exit(77);
  }
  if(cudaGetDeviceProperties(&p0, 0) != cudaSuccess ||
     cudaGetDeviceProperties(&p1, 1) != cudaSuccess) {
    printf("FAIL: %s: cudaGetDeviceProperties: %s\n", NAME,
           cudaGetErrorString(cudaGetLastError()));
    exit(1);
  }
  if(p1.major != 9 || p1.minor != 0) {
    printf("SKIP: %s: the kernel needs sm_90 on both GPUs; GPU 1 (%s) is "
           "sm_%d%d\n", NAME, p1.name, p1.major, p1.minor);
    exit(77);
  }
}

/* The environment both ranks inherit: NCCL must obey the configs the
 * trials give it, so the variables that override them go. */
static void nccl_environment(void)
{
  static const char *const overrides[] = {
    "NCCL_MIN_CTAS", "NCCL_MAX_CTAS", "NCCL_CGA_CLUSTER_SIZE",
    "NCCL_MIN_NCHANNELS", "NCCL_MAX_NCHANNELS"
  };
  size_t i;

  for(i = 0; i < sizeof(overrides) / sizeof(overrides[0]); i++) {
    if(getenv(overrides[i])) {
      printf("  unsetting %s=%s: it would override the configs under test\n",
             overrides[i], getenv(overrides[i]));
      unsetenv(overrides[i]);
    }
  }
  /* NVLink SHARP kernels take 16+ CTAs, outside any budget
   * (docs/measurements.md §4). */
  setenv("NCCL_NVLS_ENABLE", "0", 1);
  /* One node: NCCL's bootstrap stays on loopback unless told otherwise. */
  setenv("NCCL_SOCKET_IFNAME", getenv("NCCL_SOCKET_IFNAME") ?
         getenv("NCCL_SOCKET_IFNAME") : "lo", 1);
  /* Connect every peer at init, not inside the first collective that
   * needs it: such a first call blocks the host until the peer makes the
   * same call, and the cross order issues the first collectives of two
   * communicators in opposite orders (trials_nccl.c also warms up). */
  setenv("NCCL_RUNTIME_CONNECT", "0", 1);
  printf("  environment: NCCL_NVLS_ENABLE=0 NCCL_RUNTIME_CONNECT=0 "
         "NCCL_SOCKET_IFNAME=%s\n", getenv("NCCL_SOCKET_IFNAME"));
}

static void banner(const launch_opts *lo, int argc, char **argv,
                   const char *nccl)
{
  char host[256] = "?", date[64] = "?", cmd[1024] = "";
  time_t now = time(NULL);
  struct tm tm;
  int i, rt = 0, drv = 0;
  size_t len = 0;

  gethostname(host, sizeof(host) - 1);
  if(gmtime_r(&now, &tm))
    strftime(date, sizeof(date), "%Y-%m-%d %H:%M UTC", &tm);
  for(i = 0; i < argc && len < sizeof(cmd) - 2; i++)
    len += (size_t)snprintf(cmd + len, sizeof(cmd) - len, "%s%s",
                            i ? " " : "", argv[i]);
  printf("%s: %s on %s; command: %s\n", NAME, date, host, cmd);
  if(!lo->o.no_gpu) {
    for(i = 0; i < 2; i++) {
      struct cudaDeviceProp p;
      if(cudaGetDeviceProperties(&p, i) == cudaSuccess)
        printf("  GPU %d: %s, %d SMs, %zu MiB\n", i, p.name,
               p.multiProcessorCount, p.totalGlobalMem >> 20);
    }
    cudaDriverGetVersion(&drv);
    cudaRuntimeGetVersion(&rt);
    printf("  CUDA driver API %d.%d, runtime %d.%d, NCCL %s\n", drv / 1000,
           drv % 1000 / 10, rt / 1000, rt % 1000 / 10, nccl);
  }
  printf("  seed %llu (HR_TEST_SEED=%llu repeats this run); %d trials per "
         "mode; barrier timeout %d ms (test 1: %d ms, %d trials); mega kernel "
         "clusters of %d; Qwen3-30B-A3B shape (E=128 H=2048 I=768 k=8)\n",
         (unsigned long long)lo->o.seed, (unsigned long long)lo->o.seed,
         lo->o.trials, lo->o.timeout_ms, lo->o.repro_timeout_ms,
         lo->o.repro_trials, lo->o.cluster);
}

static void print_plan(const tr_opts *o)
{
  tr_plan_mix m;
  int k;
  char line[512];
  size_t n = 0;

  tr_plan_mix_of(&m, o->seed, o->trials);
  for(k = 0; k < TR_NORDERS; k++)
    n += (size_t)snprintf(line + n, sizeof(line) - n, "%s%s %d", k ? ", " : "",
                          tr_order_name((tr_order)k), m.orders[k]);
  printf("  plan (tests 2 and 3): orders %s\n", line);
  printf("  plan: T=%d %d, T=%d %d, T=%d %d; %d collectives: %s %d, %s %d, "
         "%s %d; %zu..%zu MiB\n", tr_tokens[0], m.tokens[0], tr_tokens[1],
         m.tokens[1], tr_tokens[2], m.tokens[2], m.colls, tr_op_name(TR_ALL_REDUCE),
         m.ops[TR_ALL_REDUCE], tr_op_name(TR_ALL_GATHER), m.ops[TR_ALL_GATHER],
         tr_op_name(TR_REDUCE_SCATTER), m.ops[TR_REDUCE_SCATTER],
         m.min_bytes >> 20, m.max_bytes >> 20);
}

static pid_t spawn_rank(const launch_opts *lo, int rank, int fd, int other_fd)
{
  char self[PATH_MAX], a_rank[8], a_fd[16], a_seed[32], a_trials[16],
       a_tests[64], a_to[16], a_rto[16], a_rtr[16], a_cl[16];
  ssize_t len = readlink("/proc/self/exe", self, sizeof(self) - 1);
  const tr_opts *o = &lo->o;
  pid_t pid;

  if(len <= 0)
    return -1;
  self[len] = '\0';
  snprintf(a_rank, sizeof(a_rank), "%d", rank);
  snprintf(a_fd, sizeof(a_fd), "%d", fd);
  snprintf(a_seed, sizeof(a_seed), "%llu", (unsigned long long)o->seed);
  snprintf(a_trials, sizeof(a_trials), "%d", o->trials);
  snprintf(a_tests, sizeof(a_tests), "%s%s%s%s",
           o->tests & TR_TEST_REPRO ? "repro," : "",
           o->tests & TR_TEST_HEADROOM ? "headroom," : "",
           o->tests & TR_TEST_PARTITION ? "partition," : "",
           o->tests & TR_TEST_INCIDENT ? "incident" : "");
  snprintf(a_to, sizeof(a_to), "%d", o->timeout_ms);
  snprintf(a_rto, sizeof(a_rto), "%d", o->repro_timeout_ms);
  snprintf(a_rtr, sizeof(a_rtr), "%d", o->repro_trials);
  snprintf(a_cl, sizeof(a_cl), "%d", o->cluster);
  pid = fork();
  if(pid != 0)
    return pid;
  close(other_fd);
  /* The rank's end survives exec; every other end (close-on-exec) does not. */
  fcntl(fd, F_SETFD, 0);
  {
    char *args[32];
    int n = 0;
    args[n++] = self;
    args[n++] = "--rank"; args[n++] = a_rank;
    args[n++] = "--sync-fd"; args[n++] = a_fd;
    args[n++] = "--dir"; args[n++] = (char *)o->dir;
    args[n++] = "--socket"; args[n++] = (char *)o->socket;
    args[n++] = "--headroomctl"; args[n++] = (char *)o->headroomctl;
    args[n++] = "--seed"; args[n++] = a_seed;
    args[n++] = "--trials"; args[n++] = a_trials;
    args[n++] = "--tests"; args[n++] = a_tests;
    args[n++] = "--timeout-ms"; args[n++] = a_to;
    args[n++] = "--repro-timeout-ms"; args[n++] = a_rto;
    args[n++] = "--repro-trials"; args[n++] = a_rtr;
    args[n++] = "--cluster"; args[n++] = a_cl;
    if(o->no_gpu)
      args[n++] = "--no-gpu";
    args[n] = NULL;
    execv(self, args);
  }
  _exit(127);
}

static int launcher(launch_opts *lo, int argc, char **argv)
{
  tr_opts *o = &lo->o;
  char dir[] = "/tmp/hr-trials-XXXXXX", why[400], nccl[32] = "?";
  tr_daemon d;
  tr_hub hub;
  int sv[2][2] = { { -1, -1 }, { -1, -1 } };
  int i, rc = 1, served, daemon_ok;

  setvbuf(stdout, NULL, _IOLBF, 0);
  if(!o->no_gpu) {
    require_gpus();
    if(tr_nccl_open(nccl, sizeof(nccl), why, sizeof(why))) {
      printf("SKIP: %s: no NCCL (%s)\n", NAME, why);
      return 77;
    }
  }
  if(access(lo->headroomd, X_OK) || access(o->headroomctl, X_OK)) {
    printf("FAIL: %s: %s or %s is not built (run make)\n", NAME,
           lo->headroomd, o->headroomctl);
    return 1;
  }
  if(!lo->seed_given) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    o->seed = ((uint64_t)ts.tv_sec << 20) ^ (uint64_t)ts.tv_nsec ^ (uint64_t)getpid();
  }
  banner(lo, argc, argv, nccl);
  nccl_environment();
  print_plan(o);

  if(!mkdtemp(dir)) {
    printf("FAIL: %s: mkdtemp: %s\n", NAME, strerror(errno));
    return 1;
  }
  snprintf(o->dir, sizeof(o->dir), "%s", dir);
  if(tr_daemon_start(&d, lo->headroomd, dir,
                     o->no_gpu ? "topology = config\ngpus = 2\nsms = 132\n"
                               : "topology = cuda\n", why, sizeof(why))) {
    printf("FAIL: %s: %s\n", NAME, why);
    tr_daemon_log_tail(&d, 30);
    goto out;
  }
  snprintf(o->socket, sizeof(o->socket), "%s", d.socket);
  printf("  headroomd (pid %d) on %s; log %s\n", (int)d.pid, d.socket, d.log);

  tr_hub_init(&hub);
  for(i = 0; i < 2; i++) {
    if(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv[i])) {
      printf("FAIL: %s: socketpair: %s\n", NAME, strerror(errno));
      goto stop;
    }
  }
  for(i = 0; i < 2; i++) {
    hub.r[i].pid = spawn_rank(lo, i, sv[i][1], sv[i][0]);
    if(hub.r[i].pid < 0) {
      printf("FAIL: %s: cannot start rank %d\n", NAME, i);
      goto stop;
    }
    hub.r[i].fd = sv[i][0];
    close(sv[i][1]);
    sv[i][0] = sv[i][1] = -1;
  }
  served = tr_hub_serve(&hub, 180, lo->limit_s);
  if(hub.killed)
    printf("FAIL: %s: %s; both ranks killed\n", NAME, hub.why);
  for(i = 0; i < 2; i++) {
    int st = hub.r[i].status;
    if(!WIFEXITED(st) || WEXITSTATUS(st) != 0)
      printf("%s: rank %d %s %d\n", NAME, i,
             WIFEXITED(st) ? "exited with status" : "was killed by signal",
             WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
  }
  tr_hub_free(&hub);
  rc = served == 0 ? 0 : 1;

stop:
  for(i = 0; i < 2; i++) {
    if(sv[i][0] >= 0)
      close(sv[i][0]);
    if(sv[i][1] >= 0)
      close(sv[i][1]);
  }
  daemon_ok = tr_daemon_stop(&d, why, sizeof(why)) == 0;
  if(!daemon_ok) {
    printf("FAIL: %s: headroomd: %s\n", NAME, why);
    rc = 1;
  } else {
    printf("  headroomd stopped cleanly (SIGTERM, exit 0)\n");
  }
  if(rc)
    tr_daemon_log_tail(&d, 30);
out:
  if(lo->keep || rc) {
    printf("  the run's folder is kept: %s\n", dir);
  } else {
    char cmd[600];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    if(system(cmd) != 0)
      printf("  could not remove %s\n", dir);
  }
  printf("%s: %s\n", NAME, rc ? "FAIL" : o->no_gpu ?
         "DRY-RUN (the harness ran end to end; nothing ran on a GPU)" :
         "PASS (every selected test passed)");
  return rc;
}

int main(int argc, char **argv)
{
  launch_opts lo;

  if(parse(argc, argv, &lo))
    return 2;
  if(lo.rank >= 0) {
    if(lo.sync_fd < 0 || !lo.o.dir[0] || !lo.o.socket[0]) {
      fprintf(stderr, NAME ": --rank needs --sync-fd, --dir and --socket\n");
      return 2;
    }
    return tr_rank_main(&lo.o, lo.rank, lo.sync_fd);
  }
  return launcher(&lo, argc, argv);
}
