/*
 * headroomctl: the operator's view of headroomd.
 *
 * People read its default output; scripts rely on two things: every
 * --json line is the protocol's own encoding of what was decoded (never
 * passed through unchecked), without the wire id, and the exit status says
 * which kind of failure happened (the table in the usage text below).
 */
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctl.h"

#define DEFAULT_TIMEOUT_MS 5000

static const char usage_text[] =
"NAME\n"
"    headroomctl - query and steer headroomd, the GPU SM broker\n"
"\n"
"SYNOPSIS\n"
"    headroomctl [OPTIONS] status [--summary] [--json]\n"
"    headroomctl [OPTIONS] metrics [--json]\n"
"    headroomctl [OPTIONS] watch [--gpu N] [--json]\n"
"    headroomctl [OPTIONS] policy get [--json]\n"
"    headroomctl [OPTIONS] policy set KEY=VALUE... [--json]\n"
"    headroomctl [OPTIONS] raises [--json]\n"
"    headroomctl [OPTIONS] raises clear (--gpu N | --all) [--json]\n"
"    headroomctl --help | --version\n"
"\n"
"DESCRIPTION\n"
"    Talks to the headroomd of this node over its Unix socket (see\n"
"    proto/PROTOCOL.md). Every command prints for people by default;\n"
"    --json prints for machines instead: one JSON object per line (the\n"
"    protocol's reply or event, without its wire id). Text that clients\n"
"    chose (names, incident messages) is printed with every control\n"
"    character escaped (\\xNN), so it cannot drive the terminal.\n"
"\n"
"COMMANDS\n"
"    status      Tables: per GPU the SMs, headroom, grid, epoch, NCCL\n"
"                cap, comm CTAs in flight, headroom raised by incidents\n"
"                and the counts; what a partition-mode lease gets there\n"
"                (green-context step, comm and mega SMs, NCCL cap); then\n"
"                the footprints, leases (with their mode: headroom,\n"
"                cooperative, agnostic or partition), recent incidents\n"
"                and clients. (--pretty, the old name of this, is taken.)\n"
"    status --summary\n"
"                Only the daemon, the policy and per GPU its budget and the\n"
"                counts (clients, footprints, leases by mode, incidents):\n"
"                no list, so it stays small on a node with any number of\n"
"                clients.\n"
"                When the full status would pass the protocol's 64 KiB\n"
"                message limit (hundreds of clients), the daemon sends the\n"
"                summary instead, marked \"truncated\":true in the JSON;\n"
"                headroomctl then says so on stderr (and in the tables)\n"
"                and still exits 0.\n"
"    metrics     The daemon's counters and gauges in the Prometheus text\n"
"                format (names headroom_*): uptime, clients, requests by\n"
"                type, error replies by code, the request latency\n"
"                histogram, time clients ran without a daemon, and per GPU\n"
"                its budget and partition numbers, clients, footprints,\n"
"                leases by mode, headroom raised and incidents by kind.\n"
"                For node_exporter's textfile collector, write it to a\n"
"                temporary file and rename that into place (see\n"
"                docs/operations.md).\n"
"    watch [--gpu N]\n"
"                The budget of GPU N (or of every GPU) as it is now, one\n"
"                line per GPU, then a line for each change, flushed at\n"
"                once, until interrupted (SIGINT or SIGTERM: exit 0) or\n"
"                the daemon goes away (exit 3).\n"
"    policy get  The operator's policy, one KEY VALUE per line.\n"
"    policy set KEY=VALUE...\n"
"                Change the policy (operators only: root, or a member of\n"
"                the daemon's operator_group) and print the new one. Keys:\n"
"                  min_headroom=SMS    floor on every GPU's headroom\n"
"                  max_headroom=SMS    ceiling on it\n"
"                  min_grid=SMS        never leave the mega kernel less\n"
"                  incident_raise=yes|no\n"
"                                      a reported barrier timeout raises\n"
"                                      the GPU's headroom by one cluster\n"
"    raises      Per GPU the headroom reported barrier timeouts added to\n"
"                its floor: RAISED, learned and kept across restarts;\n"
"                HELD, in force now (more while a reporter whose own\n"
"                footprints explained more is connected); the headroom,\n"
"                the number of raises and the latest (time, uid,\n"
"                incident). Operators only.\n"
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
"    -j, --json          JSON for machines, for any command\n"
"    -h, --help          this text\n"
"    -V, --version       the version of headroomctl and its protocol\n"
"\n"
"ENVIRONMENT\n"
"    HEADROOM_SOCKET     the socket, when --socket is not given\n"
"\n"
"EXIT STATUS (the same table for headroomctl, headroom-run, headroomd)\n"
"    0   success\n"
"    1   refused or invalid value: the daemon answered with an error\n"
"        (permission denied, a value it does not take), or a value\n"
"        on the command line cannot be one\n"
"    2   usage error (unknown command, option or key)\n"
"    3   cannot connect to the daemon, or the connection was lost\n"
"\n"
"EXAMPLES\n"
"    headroomctl status\n"
"    headroomctl status --summary\n"
"    headroomctl status --json | jq '.status.gpus[0].budget'\n"
"    headroomctl metrics > h.prom.$$ && mv h.prom.$$ h.prom\n"
"    headroomctl watch --gpu 0\n"
"    headroomctl policy set max_headroom=24 incident_raise=no\n"
"    headroomctl raises clear --gpu 3\n";

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

int main(int argc, char **argv)
{
  static const struct option opts[] = {
    {"socket", required_argument, NULL, 's'},
    {"timeout", required_argument, NULL, 't'},
    {"json", no_argument, NULL, 'j'},
    {"help", no_argument, NULL, 'h'},
    {"version", no_argument, NULL, 'V'},
    {NULL, 0, NULL, 0}
  };
  const char *path = NULL, *name;
  ctl_cmd cmd;
  hr__conn conn;
  int opt, rc, i, json = 0, is_default = 0;

  opterr = 0;
  while((opt = getopt_long(argc, argv, "+s:t:jhV", opts, NULL)) != -1) {
    switch(opt) {
    case 's':
      path = optarg;
      break;
    case 't':
      if(hr__parse_int(optarg, 1, 3600 * 1000, &ctl_timeout_ms))
        return ctl_usage_error("--timeout wants milliseconds, not '%s'",
                               optarg);
      break;
    case 'j':
      json = 1;
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
    return ctl_usage_error("%s", "no command (status, metrics, watch, "
                           "policy, raises)");
  memset(&cmd, 0, sizeof(cmd));
  cmd.gpu = -1;
  cmd.json = json;
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
    if(!path || !*path) {
      path = HR_DEFAULT_SOCKET;
      is_default = 1;
    }
  }
  signal(SIGPIPE, SIG_IGN);

  rc = ctl_open(&conn, path, is_default);
  if(!rc)
    rc = commands[i]->run(&conn, &cmd);
  hr__conn_free(&conn);
  return rc;
}
