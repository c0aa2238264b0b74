/*
 * headroomctl: the operator's view of headroomd.
 *
 * Scripts rely on two things here: every JSON line printed is one the
 * protocol's own decoder accepts (replies and events are decoded, then
 * encoded again, never passed through unchecked), and the exit code says
 * which kind of failure happened (see the usage text below).
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ctl.h"

#define DEFAULT_TIMEOUT_MS 5000

static const char usage_text[] =
"NAME\n"
"    headroomctl - query and steer headroomd, the GPU SM broker\n"
"\n"
"SYNOPSIS\n"
"    headroomctl [--socket PATH] [--timeout MS] status [--pretty] [--summary]\n"
"    headroomctl [--socket PATH] [--timeout MS] metrics [--json]\n"
"    headroomctl [--socket PATH] [--timeout MS] watch [--gpu N]\n"
"    headroomctl [--socket PATH] [--timeout MS] policy get\n"
"    headroomctl [--socket PATH] [--timeout MS] policy set KEY=VALUE...\n"
"    headroomctl [--socket PATH] [--timeout MS] raises [--json]\n"
"    headroomctl [--socket PATH] [--timeout MS] raises clear (--gpu N | --all)\n"
"    headroomctl --help | --version\n"
"\n"
"DESCRIPTION\n"
"    Talks to the headroomd of this node over its Unix socket, one JSON\n"
"    object per line (see proto/PROTOCOL.md).\n"
"\n"
"COMMANDS\n"
"    status      Print the daemon's status as one JSON line: topology,\n"
"                policy, clients, and per GPU its budget, footprints,\n"
"                leases and recent incidents.\n"
"    status --pretty\n"
"                The same as tables: per GPU the SMs, headroom, grid,\n"
"                epoch, NCCL cap, comm CTAs in flight, headroom raised by\n"
"                incidents and the counts; what a partition-mode lease\n"
"                gets there (green-context step, comm and mega SMs, NCCL\n"
"                cap); then the footprints, leases (with their mode:\n"
"                headroom, cooperative, agnostic or partition), recent\n"
"                incidents and clients.\n"
"    status --summary\n"
"                Only the daemon, the policy and per GPU its budget and the\n"
"                counts (clients, footprints, leases by mode, incidents):\n"
"                no list, so it stays small on a node with any number of\n"
"                clients. With --pretty, as tables.\n"
"                When the full status would pass the protocol's 64 KiB\n"
"                message limit (hundreds of clients), the daemon sends the\n"
"                summary instead, marked \"truncated\":true in the JSON;\n"
"                headroomctl then says so on stderr (and in the --pretty\n"
"                tables) and still exits 0.\n"
"    metrics     Print the daemon's counters and gauges in the Prometheus\n"
"                text format (names headroom_*): uptime, clients, requests\n"
"                by type, error replies by code, the request latency\n"
"                histogram, time clients ran without a daemon, and per GPU\n"
"                its budget and partition numbers, clients, footprints,\n"
"                leases by mode, headroom raised and incidents by kind.\n"
"                For node_exporter's textfile collector, write it to a\n"
"                temporary file and rename that into place (see\n"
"                docs/operations.md).\n"
"    metrics --json\n"
"                The same as one JSON line (the protocol's metrics reply).\n"
"    watch [--gpu N]\n"
"                Subscribe to budget changes (of GPU N, or of every GPU)\n"
"                and print each pushed event as one JSON line, flushed at\n"
"                once, until interrupted (SIGINT or SIGTERM: exit 0) or\n"
"                the daemon goes away (exit 3).\n"
"    policy get  Print the operator's policy as one JSON line.\n"
"    policy set KEY=VALUE...\n"
"                Change the policy (operators only: root, or a member of\n"
"                the daemon's operator group) and print the new one. Keys:\n"
"                  min_headroom=SMS    floor on every GPU's headroom\n"
"                  max_headroom=SMS    ceiling on it\n"
"                  min_grid=SMS        never leave the mega kernel less\n"
"                  incident_raise=yes|no\n"
"                                      a reported barrier timeout raises\n"
"                                      the GPU's headroom by one cluster\n"
"    raises [--json]\n"
"                Per GPU the headroom that reported barrier timeouts added\n"
"                to its floor, the number of raises and the latest (time,\n"
"                uid, incident), as a table, or one JSON line (operators\n"
"                only).\n"
"    raises clear (--gpu N | --all)\n"
"                Forget what timeouts taught GPU N (or every GPU): its\n"
"                floor goes back to the policy's, at once and across\n"
"                restarts; the incidents stay listed (operators only).\n"
"\n"
"OPTIONS\n"
"    -s, --socket PATH   the daemon's socket (default: $HEADROOM_SOCKET,\n"
"                        else " HR_DEFAULT_SOCKET ")\n"
"    -t, --timeout MS    give up on a reply after MS milliseconds\n"
"                        (default 5000)\n"
"    -h, --help          this text\n"
"    -V, --version       the version of headroomctl and its protocol\n"
"\n"
"ENVIRONMENT\n"
"    HEADROOM_SOCKET     the socket, when --socket is not given\n"
"\n"
"EXIT STATUS\n"
"    0   success\n"
"    1   the daemon answered with an error\n"
"    2   usage error\n"
"    3   cannot connect to the daemon, or the connection was lost\n"
"    4   permission denied (the socket, or an operator-only request)\n"
"\n"
"EXAMPLES\n"
"    headroomctl status --pretty\n"
"    headroomctl status --summary --pretty\n"
"    headroomctl metrics > h.prom.$$ && mv h.prom.$$ h.prom\n"
"    headroomctl watch --gpu 0\n"
"    sudo headroomctl policy set max_headroom=24 incident_raise=no\n"
"    sudo headroomctl raises clear --gpu 3\n";


int ctl_timeout_ms = DEFAULT_TIMEOUT_MS;

/* Every command, by the name on the command line. */
static const ctl_command *const commands[] = {
  &ctl_status_command,
  &ctl_metrics_command,
  &ctl_watch_command,
  &ctl_policy_command,
  &ctl_raises_command,
  NULL
};

/* Connect and say hello; returns an exit code. */
static int open_conn(hr__conn *c, const char *path)
{
  hr_rep_hello hello;
  char why[128];
  int err;

  hr__conn_init(c);
  err = hr__conn_connect(c, path, ctl_timeout_ms, why, sizeof(why));
  if(err) {
    fprintf(stderr, "headroomctl: cannot connect to %s: %s\n", path, why);
    return ctl_exit_code(err, 0);
  }
  err = hr__conn_hello(c, "headroomctl", 0, ctl_timeout_ms, &hello, NULL, NULL);
  if(err)
    return ctl_fail("hello", err, NULL);
  return EXIT_OK;
}

int main(int argc, char **argv)
{
  static const struct option opts[] = {
    {"socket", required_argument, NULL, 's'},
    {"timeout", required_argument, NULL, 't'},
    {"help", no_argument, NULL, 'h'},
    {"version", no_argument, NULL, 'V'},
    {NULL, 0, NULL, 0}
  };
  const char *path = NULL, *name;
  ctl_cmd cmd;
  hr__conn conn;
  int opt, rc, i;

  opterr = 0;
  while((opt = getopt_long(argc, argv, "+s:t:hV", opts, NULL)) != -1) {
    switch(opt) {
    case 's':
      path = optarg;
      break;
    case 't':
      if(hr__parse_int(optarg, 1, 3600 * 1000, &ctl_timeout_ms))
        return ctl_usage_error("--timeout wants milliseconds, not '%s'", optarg);
      break;
    case 'h':
      fputs(usage_text, stdout);
      return EXIT_OK;
    case 'V':
      printf("headroomctl %s (protocol %d)\n", HR_VERSION_STRING,
             HR_PROTO_VERSION);
      return EXIT_OK;
    default:
      return ctl_usage_error("unknown or incomplete option '%s'",
                         argv[optind - 1]);
    }
  }
  if(optind >= argc)
    return ctl_usage_error("%s", "no command (status, metrics, watch, policy, raises)");
  memset(&cmd, 0, sizeof(cmd));
  cmd.gpu = -1;
  name = argv[optind++];
  for(i = 0; commands[i]; i++) {
    if(!strcmp(name, commands[i]->name))
      break;
  }
  if(!commands[i])
    return ctl_usage_error("unknown command '%s'", name);
  rc = commands[i]->parse(argc - optind, argv + optind, &cmd);
  if(rc)
    return rc;
  if(!path) {
    path = getenv(HR_ENV_SOCKET);
    if(!path || !*path)
      path = HR_DEFAULT_SOCKET;
  }
  signal(SIGPIPE, SIG_IGN);

  rc = open_conn(&conn, path);
  if(!rc)
    rc = commands[i]->run(&conn, &cmd);
  hr__conn_free(&conn);
  return rc;
}
