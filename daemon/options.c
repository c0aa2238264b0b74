/*
 * options.c: headroomd's flags and --help (see options.h).
 */
#include <getopt.h>
#include <string.h>

#include "options.h"

enum {
  OPT_CONFIG = 'c',
  OPT_SOCKET = 's',
  OPT_STATE_DIR = 'd',
  OPT_LOG_LEVEL = 'l',
  OPT_TOPOLOGY = 't',
  OPT_HELP = 'h',
  OPT_VERSION = 'V',
  OPT_CHECK_CONFIG = 256
};

static const struct option long_options[] = {
  {"config", required_argument, NULL, OPT_CONFIG},
  {"socket", required_argument, NULL, OPT_SOCKET},
  {"state-dir", required_argument, NULL, OPT_STATE_DIR},
  {"log-level", required_argument, NULL, OPT_LOG_LEVEL},
  {"topology", required_argument, NULL, OPT_TOPOLOGY},
  {"check-config", no_argument, NULL, OPT_CHECK_CONFIG},
  {"help", no_argument, NULL, OPT_HELP},
  {"version", no_argument, NULL, OPT_VERSION},
  {NULL, 0, NULL, 0}
};

int hr__options_parse(hr__options *opts, int argc, char **argv, char *err,
                      size_t n)
{
  int c;

  if(!opts || argc < 1 || !argv) {
    if(err && n)
      snprintf(err, n, "no arguments");
    return HR_EINVAL;
  }
  memset(opts, 0, sizeof(*opts));
  opterr = 0;  /* our own messages, through `err` */
  optind = 0;  /* 0, not 1: makes glibc re-initialise between calls */
  while((c = getopt_long(argc, argv, "+c:s:d:l:t:hV", long_options,
                         NULL)) != -1) {
    switch(c) {
    case OPT_CONFIG: opts->flags.config = optarg; break;
    case OPT_SOCKET: opts->flags.socket = optarg; break;
    case OPT_STATE_DIR: opts->flags.state_dir = optarg; break;
    case OPT_LOG_LEVEL: opts->flags.log_level = optarg; break;
    case OPT_TOPOLOGY: opts->flags.topology = optarg; break;
    case OPT_CHECK_CONFIG: opts->action = HR_ACTION_CHECK_CONFIG; break;
    case OPT_HELP: opts->action = HR_ACTION_HELP; return HR_OK;
    case OPT_VERSION: opts->action = HR_ACTION_VERSION; return HR_OK;
    case ':':
    case '?':
    default:
      if(err && n) {
        /* Name the option as it was written: "--socket", not "-s". */
        const char *arg = argv[optind > 1 ? optind - 1 : 1];
        if(strncmp(arg, "--", 2) && optopt)
          snprintf(err, n, "unknown or incomplete option '-%c'", optopt);
        else
          snprintf(err, n, "unknown or incomplete option '%s'", arg);
      }
      return HR_EINVAL;
    }
  }
  if(optind < argc) {
    if(err && n)
      snprintf(err, n, "unexpected argument '%s'", argv[optind]);
    return HR_EINVAL;
  }
  return HR_OK;
}

void hr__options_usage(FILE *out)
{
  fprintf(out,
"Usage: headroomd [OPTION]...\n"
"The headroom daemon: sizes the SMs a persistent mega kernel may use on\n"
"each GPU so that NCCL's kernels always have room beside it.\n"
"\n"
"Options (each overrides the config file):\n"
"  -c, --config PATH     config file (default %s;\n"
"                        a missing default file is fine, a missing\n"
"                        explicit one is an error)\n"
"  -s, --socket PATH     listen on PATH (default %s)\n"
"  -d, --state-dir DIR   keep learned state in DIR (default %s)\n"
"  -l, --log-level L     err, warning, notice, info or debug (default info)\n"
"  -t, --topology T      auto, cuda, config or default (default auto)\n"
"      --check-config    validate the configuration and its policy against\n"
"                        this node's GPUs: exit 0 if good, 1 if not\n"
"  -h, --help            this text\n"
"  -V, --version         print the version\n"
"\n"
"Config file: 'key = value' lines; '#' starts a comment (at the start of a\n"
"line, or after whitespace); blank lines are ignored. Unknown keys, bad\n"
"values and duplicate keys are errors reported as FILE:LINE. Keys:\n"
"  socket = PATH             listening socket (%s)\n"
"  socket_mode = OCTAL       permissions of the socket file (0660)\n"
"  operator_group = GROUP    members may set policy (root always may;\n"
"                            default: root only)\n"
"  state_dir = DIR           learned state (%s);\n"
"                            if unusable, the daemon runs without it\n"
"  log_level = LEVEL         err|warning|notice|info|debug (info)\n"
"  topology = MODE           auto|cuda|config|default (auto: CUDA if a\n"
"                            device is found, else the config if 'gpus' is\n"
"                            set, else the embedded 8 GPUs x 132 SMs)\n"
"  gpus = N                  GPUs of a config topology, 1..64\n"
"  sms = N                   SMs of each such GPU, 1..1024 (132)\n"
"  gpu.N.sms = M             SMs of GPU N, overriding 'sms'\n"
"  min_headroom = N          headroom floor, SMs, at least 1 (2)\n"
"  max_headroom = N          headroom ceiling, SMs (32)\n"
"  min_grid = N              never leave the mega kernel fewer CTAs (64)\n"
"  incident_raise = yes|no   a reported barrier timeout raises headroom (yes)\n"
"  incident_raise_interval = SECONDS\n"
"                            a uid's timeouts raise one GPU at most once\n"
"                            in this long (60; 0: no limit)\n"
"  partition_ignore_coscheduling = true|false\n"
"                            partition mode in the finer steps a split\n"
"                            ignoring SM co-scheduling allows (2 SMs on\n"
"                            H200 instead of 8); read at start (false)\n"
"  max_clients = N           connections at once (1024)\n"
"  max_comms_per_client = N  footprints one client may register (64)\n"
"  max_leases_per_client = N leases one client may hold (16)\n"
"  write_queue_max = BYTES   unsent bytes to one client before it is\n"
"                            disconnected; K/M/G suffixes (1M)\n"
"  max_messages_per_second = N  messages one client may send a second;\n"
"                            past it they are answered limit_exceeded\n"
"                            (1000; 0: no limit)\n"
"  max_message_burst = N     ... and at once; a client refused this many\n"
"                            times in a row is disconnected (500)\n"
"  max_clients_per_uid = N   connections of one uid at once (256)\n"
"  reserved_clients = N      the last N of max_clients go only to uids\n"
"                            holding fewer than N connections (64)\n"
"  max_comms_per_uid = N     footprints of one uid, all its clients (512)\n"
"  max_comm_ctas_per_uid = N CTAs in flight one uid may register on one\n"
"                            GPU, ctas x concurrent summed (256)\n"
"  hello_timeout_ms = N      a connection that has not said hello by then\n"
"                            is closed (5000)\n"
"  calibration = PATH        safe headrooms measured by headroom-calibrate\n"
"                            (STATE_DIR/calibration.json when present)\n"
"\n"
"The policy must leave every GPU a headroom of at least its floor for\n"
"every cluster size (1, 2, 4, 8): min(max_headroom, SMs - min_grid)\n"
"rounded down to the cluster >= min_headroom rounded up to it.\n"
"\n"
"Signals: SIGHUP reloads the config file (policy, log level, limits) and\n"
"the calibration file;\n"
"SIGTERM or SIGINT stops the daemon cleanly.\n"
"\n"
"Exit status (the same table as headroomctl's and headroom-run's):\n"
"  0  stopped cleanly (SIGTERM, SIGINT), or --check-config found it good\n"
"  1  invalid configuration: a bad key or value, in the file or a flag\n"
"  2  usage error: an unknown option or argument\n"
"  3  could not serve: the socket could not be bound or created\n"
"See docs/config.md for the full reference.\n",
          HR__DEFAULT_CONFIG, HR_DEFAULT_SOCKET, HR__DEFAULT_STATE_DIR,
          HR_DEFAULT_SOCKET, HR__DEFAULT_STATE_DIR);
}
