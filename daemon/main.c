/*
 * main.c: headroomd's entry point: flags, config, start, run.
 */
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include <uv.h>

#include "config.h"
#include "daemon.h"
#include "log.h"
#include "options.h"
#include "topology.h"

/* The exit status table that headroomctl and headroom-run share
 * (docs/operations.md): 1 an invalid value (the config), 2 usage, 3 could
 * not serve (the daemon's side of "cannot connect": its socket, its
 * event loop). */
enum {
  EXIT_INVALID = 1,
  EXIT_USAGE = 2,
  EXIT_CANNOT_SERVE = 3
};

/* --check-config: the whole configuration, and its policy against the
 * GPUs this node would run with. 0 good, 1 invalid (docs/config.md). */
static int check_config(const hr__config *cfg)
{
  char err[HR__CONFIG_ERR_MAX], why[256];
  static hr_topology topo;
  int gran[HR_MAX_GPUS];

  if(hr__topology_detect(cfg, &topo, gran, why, sizeof(why))) {
    fprintf(stderr, "headroomd: topology: %s\n", why);
    return EXIT_INVALID;
  }
  if(hr__config_check_policy(cfg, &topo, err, sizeof(err))) {
    fprintf(stderr, "headroomd: %s\n", err);
    return EXIT_INVALID;
  }
  printf("%s: OK\n", cfg->file[0] ? cfg->file : "built-in defaults");
  return 0;
}

int main(int argc, char **argv)
{
  char err[HR__CONFIG_ERR_MAX];
  static hr__daemon d; /* large (per-GPU incident rings): not on the stack */
  static hr__config cfg;
  hr__options opts;
  uv_loop_t loop;
  int rc;

  if(hr__options_parse(&opts, argc, argv, err, sizeof(err))) {
    fprintf(stderr, "headroomd: %s\nTry 'headroomd --help'.\n", err);
    return EXIT_USAGE;
  }
  switch(opts.action) {
  case HR_ACTION_HELP:
    hr__options_usage(stdout);
    return 0;
  case HR_ACTION_VERSION:
    printf("headroomd %s (protocol %d..%d)\n", HR_VERSION_STRING,
           HR_PROTO_VERSION_MIN, HR_PROTO_VERSION);
    return 0;
  default:
    break;
  }
  if(hr__config_build(&cfg, &opts.flags, err, sizeof(err))) {
    if(opts.action == HR_ACTION_CHECK_CONFIG)
      fprintf(stderr, "headroomd: %s\n", err);
    else
      hr__err("config: %s", err);
    return EXIT_INVALID;
  }
  if(opts.action == HR_ACTION_CHECK_CONFIG)
    return check_config(&cfg);

  /* A client that vanishes mid-write must cost us an EPIPE, not our life. */
  signal(SIGPIPE, SIG_IGN);
  if(uv_loop_init(&loop)) {
    hr__err("cannot create the event loop");
    return EXIT_CANNOT_SERVE;
  }
  rc = hr__daemon_start(&d, &loop, &cfg, &opts.flags);
  if(rc) {
    hr__daemon_abort(&d);
    uv_loop_close(&loop);
    hr__err("headroomd not started");
    return rc == HR_EINVAL ? EXIT_INVALID : EXIT_CANNOT_SERVE;
  }
  hr__daemon_run(&d);
  uv_loop_close(&loop);
  return 0;
}
