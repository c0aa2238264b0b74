/*
 * headroom-run: run a command under a lease.
 *
 * It registers the command's comm footprint, takes a lease, exports the
 * budget as the environment variables DeepGEMM and NCCL read, and execs
 * the command with the connection to the daemon still open. The command
 * inherits that descriptor without knowing it; when the command exits, for
 * whatever reason, the kernel closes it and the daemon drops the footprint
 * and the lease at once. No process is left behind to supervise anything.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <libgen.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hr_client_int.h"

/* The exit status table that headroomctl and headroomd share
 * (docs/operations.md), for when CMD never ran; then env(1)'s. */
enum {
  EXIT_REFUSED = 1,     /* the daemon refused the footprint or the lease */
  EXIT_USAGE = 2,
  EXIT_FAILED = 125,    /* headroom-run itself failed; CMD never ran */
  EXIT_NOEXEC = 126,    /* CMD is not executable */
  EXIT_NOTFOUND = 127   /* CMD was not found */
};

#define DEFAULT_TIMEOUT_MS 5000

static const char usage_text[] =
"NAME\n"
"    headroom-run - run a command under a headroom lease\n"
"\n"
"SYNOPSIS\n"
"    headroom-run --gpu N [--ctas C [--concurrent K] [--cga G]]\n"
"                 [--cluster S]\n"
"                 [--mode headroom|cooperative|agnostic|partition]\n"
"                 [--name NAME] [--socket PATH] [--timeout MS] [--quiet]\n"
"                 -- CMD [ARGS...]\n"
"\n"
"DESCRIPTION\n"
"    Connects to headroomd, registers the comm footprint of CMD on GPU N\n"
"    (when --ctas is given), acquires a lease for a mega kernel of cluster\n"
"    size S, exports the budget to the environment and executes CMD in its\n"
"    place. The connection stays open in CMD as an inherited descriptor,\n"
"    so the footprint and the lease last exactly as long as CMD runs; the\n"
"    daemon drops both the moment CMD exits or is killed.\n"
"\n"
"    With no daemon answering, headroom-run says so once on stderr,\n"
"    exports the budget libheadroom computes for CMD's footprint and lease\n"
"    with the default policy (the NCCL caps always; never the full grid\n"
"    unless HEADROOM_ALLOW_FULL_GRID=1 and DG_MEGA_MOE_SM_HEADROOM=0) and\n"
"    runs CMD anyway.\n"
"\n"
"OPTIONS\n"
"    -g, --gpu N          the CUDA device index the command uses (required)\n"
"    -c, --ctas C         CTAs per collective of its communicators (NCCL\n"
"                         channels), 1..64; registers a footprint\n"
"    -k, --concurrent K   collectives in flight at once, 1..64 (default 1)\n"
"    -G, --cga G          NCCL CGA cluster size the communicators were\n"
"                         created with, 1..8 (default 1)\n"
"    -C, --cluster S      cluster size of the mega kernel: 1, 2, 4 or 8\n"
"                         (default 2)\n"
"    -m, --mode MODE      headroom (default), cooperative, agnostic (a\n"
"                         kernel with no grid barrier: headroom 0), or\n"
"                         partition (green contexts: docs/partition.md)\n"
"    -n, --name NAME      shown in headroomctl status (default: CMD's name)\n"
"    -s, --socket PATH    the daemon's socket (default: $HEADROOM_SOCKET,\n"
"                         else " HR_DEFAULT_SOCKET ")\n"
"    -t, --timeout MS     give up on the daemon after MS milliseconds\n"
"                         (default 5000)\n"
"    -q, --quiet          no notice on stderr when no daemon answers\n"
"    -h, --help           this text\n"
"    -V, --version        the version\n"
"\n"
"ENVIRONMENT\n"
"    Read: HEADROOM_SOCKET; with no daemon, DG_MEGA_MOE_SM_HEADROOM (more\n"
"    headroom, never less), NCCL_MIN_CTAS and NCCL_MAX_CTAS (smaller caps)\n"
"    and HEADROOM_ALLOW_FULL_GRID.\n"
"    Set for CMD:\n"
"      DG_MEGA_MOE_SM_HEADROOM  SMs left free for communication kernels\n"
"      NCCL_MIN_CTAS, NCCL_MAX_CTAS, NCCL_CGA_CLUSTER_SIZE\n"
"                               the NCCL budget (only those decided)\n"
"      NCCL_NVLS_ENABLE=0       NVLink SHARP kernels stay off\n"
"      HEADROOM_SOCKET          the daemon's socket\n"
"      HEADROOM_GPU             N\n"
"      HEADROOM_FD              the inherited connection that holds the\n"
"                               lease (unset with no daemon); leave it open\n"
"                               and do not read or write it\n"
"\n"
"EXIT STATUS\n"
"    Once CMD runs, its own exit status: headroom-run has become CMD\n"
"    (exec), so a status of 1 to 3 may be CMD's too; the lines on stderr\n"
"    that start 'headroom-run:' tell them apart. Before CMD runs, the\n"
"    table headroomctl and headroomd share, then env(1)'s:\n"
"    1    refused: the daemon refused the footprint or the lease, or\n"
"         speaks no protocol version in common\n"
"    2    usage error\n"
"    3    cannot connect to the daemon: not used, since with no daemon\n"
"         answering CMD runs on the fallback (see DESCRIPTION)\n"
"    125  headroom-run failed otherwise (out of memory, the environment)\n"
"    126  CMD was found but could not be executed\n"
"    127  CMD was not found\n"
"\n"
"EXAMPLES\n"
"    headroom-run --gpu 0 --ctas 8 --concurrent 2 -- python train.py\n"
"    headroom-run --gpu 3 -- ./bench --grid auto\n";

typedef struct run_opts {
  int gpu;
  int ctas;             /* 0: no footprint */
  int concurrent;
  int cga;
  int cluster;
  hr_mode mode;
  const char *name;
  const char *path;
  int timeout_ms;
  int quiet;
  int path_is_default;  /* neither --socket nor HEADROOM_SOCKET named it */
  char **cmd;
} run_opts;

static int usage_error(const char *fmt, const char *arg)
{
  fprintf(stderr, "headroom-run: ");
  fprintf(stderr, fmt, arg);
  fprintf(stderr, "\nTry 'headroom-run --help'.\n");
  return EXIT_USAGE;
}

static int parse_range(const char *opt, const char *v, int min, int max,
                       int *out)
{
  if(hr__parse_int(v, min, max, out)) {
    fprintf(stderr, "headroom-run: %s wants %d..%d, not '%s'\n"
            "Try 'headroom-run --help'.\n", opt, min, max, v);
    return EXIT_USAGE;
  }
  return 0;
}

/* Returns 0, EXIT_USAGE, or -1 after --help/--version (exit 0). */
static int parse_args(int argc, char **argv, run_opts *o)
{
  static const struct option opts[] = {
    {"gpu", required_argument, NULL, 'g'},
    {"ctas", required_argument, NULL, 'c'},
    {"concurrent", required_argument, NULL, 'k'},
    {"cga", required_argument, NULL, 'G'},
    {"cluster", required_argument, NULL, 'C'},
    {"mode", required_argument, NULL, 'm'},
    {"name", required_argument, NULL, 'n'},
    {"socket", required_argument, NULL, 's'},
    {"timeout", required_argument, NULL, 't'},
    {"quiet", no_argument, NULL, 'q'},
    {"help", no_argument, NULL, 'h'},
    {"version", no_argument, NULL, 'V'},
    {NULL, 0, NULL, 0}
  };
  int opt, rc = 0, have_k = 0, have_g = 0;

  memset(o, 0, sizeof(*o));
  o->gpu = -1;
  o->concurrent = 1;
  o->cga = 1;
  o->cluster = 2;
  o->mode = HR_MODE_HEADROOM;
  o->timeout_ms = DEFAULT_TIMEOUT_MS;
  opterr = 0;
  /* '+': stop at CMD, whose options are its own. */
  while(!rc && (opt = getopt_long(argc, argv, "+g:c:k:G:C:m:n:s:t:qhV", opts,
                                  NULL)) != -1) {
    switch(opt) {
    case 'g':
      rc = parse_range("--gpu", optarg, 0, HR_MAX_GPUS - 1, &o->gpu);
      break;
    case 'c':
      rc = parse_range("--ctas", optarg, 1, HR_MAX_CTAS, &o->ctas);
      break;
    case 'k':
      rc = parse_range("--concurrent", optarg, 1, HR_MAX_CONCURRENT,
                       &o->concurrent);
      have_k = 1;
      break;
    case 'G':
      rc = parse_range("--cga", optarg, 1, HR_MAX_CGA, &o->cga);
      have_g = 1;
      break;
    case 'C':
      rc = parse_range("--cluster", optarg, 1, 8, &o->cluster);
      if(!rc && (o->cluster & (o->cluster - 1)))
        rc = usage_error("--cluster wants 1, 2, 4 or 8, not '%s'", optarg);
      break;
    case 'm':
      if(hr_mode_from_name(optarg, &o->mode))
        rc = usage_error("--mode wants headroom, cooperative, agnostic or "
                         "partition, "
                         "not '%s'", optarg);
      break;
    case 'n':
      if(strlen(optarg) >= HR_NAME_MAX || !hr__text_valid(optarg))
        rc = usage_error("--name '%s' is too long or not UTF-8", optarg);
      o->name = optarg;
      break;
    case 's':
      o->path = optarg;
      break;
    case 't':
      rc = parse_range("--timeout", optarg, 1, 3600 * 1000, &o->timeout_ms);
      break;
    case 'q':
      o->quiet = 1;
      break;
    case 'h':
      fputs(usage_text, stdout);
      return -1;
    case 'V':
      printf("headroom-run %s (protocol %d)\n", HR_VERSION_STRING,
             HR_PROTO_VERSION);
      return -1;
    default:
      rc = usage_error("unknown or incomplete option '%s'", argv[optind - 1]);
    }
  }
  if(rc)
    return rc;
  if(o->gpu < 0)
    return usage_error("%s", "--gpu N is required");
  if((have_k || have_g) && !o->ctas)
    return usage_error("%s", "--concurrent and --cga describe a footprint: "
                       "give --ctas too");
  if(optind >= argc)
    return usage_error("%s", "no command given (headroom-run ... -- CMD)");
  o->cmd = argv + optind;
  if(!o->path) {
    o->path = getenv(HR_ENV_SOCKET);
    if(!o->path || !*o->path) {
      o->path = HR_DEFAULT_SOCKET;
      o->path_is_default = 1;
    }
  }
  return 0;
}

/* What to do when no daemon answers at the socket: said once, beside
 * the fallback notice, when the socket file is not there at all. */
static void socket_hint(const run_opts *o)
{
  if(o->quiet || !access(o->path, F_OK) || errno != ENOENT)
    return;
  if(o->path_is_default)
    fprintf(stderr, "headroom-run: no daemon at the default socket; start "
            "one (systemctl start headroomd.socket, or make run in the "
            "source tree), or name its socket with HEADROOM_SOCKET=PATH or "
            "--socket PATH\n");
  else
    fprintf(stderr, "headroom-run: no such socket %s; is headroomd running "
            "there?\n", o->path);
}

/* Register and lease on `conn`. HR_OK with `budget` filled; a daemon
 * refusal returns its code with *refused = 1. */
static int take_lease(hr__conn *conn, const run_opts *o, hr_budget *budget,
                      int *refused)
{
  hr_rep_hello hello;
  hr_request req;
  hr_reply rep;
  char name[HR_NAME_MAX];
  char *base, *copy;
  int err;

  *refused = 0;
  copy = strdup(o->cmd[0]);
  base = copy ? basename(copy) : o->cmd[0];
  hr__name_copy(name, sizeof(name), o->name ? o->name : base);
  free(copy);

  err = hr__conn_hello(conn, name, 0, o->timeout_ms, &hello, NULL, NULL);
  if(err == HR_EVERSION)
    *refused = 1;
  if(err)
    return err;

  if(o->ctas) {
    memset(&req, 0, sizeof(req));
    req.type = HR_MSG_REGISTER_COMM;
    req.u.register_comm.gpu = o->gpu;
    memcpy(req.u.register_comm.name, name, sizeof(name));
    req.u.register_comm.ctas = o->ctas;
    req.u.register_comm.cga = o->cga;
    req.u.register_comm.concurrent = o->concurrent;
    err = hr__conn_call(conn, &req, &rep, o->timeout_ms, NULL, NULL);
    if(err) {
      *refused = rep.type == HR_MSG_ERROR;
      if(*refused)
        fprintf(stderr, "headroom-run: the daemon refused the footprint: "
                "%s (%s)\n", hr_strerror(err), rep.u.error.message);
      return err;
    }
    hr_reply_free(&rep);
  }

  memset(&req, 0, sizeof(req));
  req.type = HR_MSG_LEASE;
  req.u.lease.gpu = o->gpu;
  req.u.lease.cluster = o->cluster;
  req.u.lease.mode = o->mode;
  err = hr__conn_call(conn, &req, &rep, o->timeout_ms, NULL, NULL);
  if(err) {
    *refused = rep.type == HR_MSG_ERROR;
    if(*refused)
      fprintf(stderr, "headroom-run: the daemon refused the lease: %s (%s)\n",
              hr_strerror(err), rep.u.error.message);
    return err;
  }
  *budget = rep.u.lease.budget;
  hr_reply_free(&rep);
  return HR_OK;
}

static int set_int_env(const char *name, int v)
{
  char text[16];
  snprintf(text, sizeof(text), "%d", v);
  return setenv(name, text, 1);
}

/* Make the connection survive exec: blocking again (the file status flags
 * are shared with CMD) and without close-on-exec. */
static int hand_down(hr__conn *conn)
{
  int flags;
  if(hr__conn_set_blocking(conn))
    return -1;
  flags = fcntl(conn->fd, F_GETFD);
  if(flags < 0 || fcntl(conn->fd, F_SETFD, flags & ~FD_CLOEXEC) < 0)
    return -1;
  return set_int_env("HEADROOM_FD", conn->fd);
}

int main(int argc, char **argv)
{
  run_opts o;
  hr__conn conn;
  hr_budget b;
  char why[128];
  int rc, err, refused = 0;

  rc = parse_args(argc, argv, &o);
  if(rc)
    return rc < 0 ? 0 : rc;

  hr__conn_init(&conn);
  err = hr__conn_connect(&conn, o.path, o.timeout_ms, why, sizeof(why));
  if(!err) {
    err = take_lease(&conn, &o, &b, &refused);
    if(err)
      snprintf(why, sizeof(why), "%s", hr_strerror(err));
  }
  if(err && (refused || err == HR_ENOMEM)) {
    if(err == HR_EVERSION)
      fprintf(stderr, "headroom-run: the daemon at %s speaks no protocol "
              "version this build does\n", o.path);
    rc = refused ? EXIT_REFUSED : EXIT_FAILED;
    goto out;
  }
  if(err) {
    /* No daemon: the library's fallback, for what CMD would have
     * registered (its footprint and its lease): the NCCL caps and a
     * headroom the policy gives it, never the full grid unless the
     * environment forces it (hr_fallback.c). */
    hr__fallback f;
    hr__fallback_in in;
    hr_footprint fp = {o.ctas, o.cga, o.concurrent};
    hr__conn_close(&conn);
    hr__fallback_read(&f, o.quiet);
    memset(&in, 0, sizeof(in));
    in.gpu = o.gpu;
    in.sms = hr__fallback_sms(o.gpu);
    in.granularity = hr__fallback_granularity(o.gpu);
    in.cluster = o.mode == HR_MODE_HEADROOM || o.mode == HR_MODE_COOPERATIVE ?
                 o.cluster : HR_POLICY_DEFAULT_CLUSTER;
    in.n_footprints = o.ctas ? 1 : 0;
    in.footprints = &fp;
    hr__fallback_budget(&f, &in, o.mode, &b);
    if(!o.quiet)
      hr__fallback_notice(&f, o.path, why, &b);
    socket_hint(&o);
    unsetenv("HEADROOM_FD");
  }
  else if(hand_down(&conn)) {
    fprintf(stderr, "headroom-run: cannot pass the connection on: %s\n",
            strerror(errno));
    rc = EXIT_FAILED;
    goto out;
  }

  if(hr__budget_export_env(&b) || setenv(HR_ENV_SOCKET, o.path, 1) ||
     set_int_env("HEADROOM_GPU", o.gpu)) {
    fprintf(stderr, "headroom-run: cannot set the environment: %s\n",
            strerror(errno));
    rc = EXIT_FAILED;
    goto out;
  }

  execvp(o.cmd[0], o.cmd);
  rc = errno == ENOENT || errno == ENOTDIR ? EXIT_NOTFOUND : EXIT_NOEXEC;
  fprintf(stderr, "headroom-run: %s: %s\n", o.cmd[0],
          rc == EXIT_NOTFOUND ? "command not found" : strerror(errno));
out:
  /* Only when CMD never ran: closing the socket gives the lease back. */
  hr__conn_free(&conn);
  return rc;
}
