/*
 * ctl_watch.c: `headroomctl watch`: budget events as they come, until
 * SIGINT or SIGTERM.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "ctl.h"

static int stop_pipe[2] = {-1, -1};

static void on_stop_signal(int sig)
{
  int saved = errno;
  (void)sig;
  if(write(stop_pipe[1], "x", 1) < 0) {
    /* nothing to do: a byte is already waiting */
  }
  errno = saved;
}

static int watch_signals(hr__conn *c)
{
  struct sigaction sa;
  if(pipe2(stop_pipe, O_CLOEXEC | O_NONBLOCK))
    return -1;
  memset(&sa, 0, sizeof(sa));
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
  c->intr_fd = stop_pipe[0];
  return 0;
}

static int watch_parse(int argc, char **argv, ctl_cmd *cmd)
{
  const char *v;
  int i;
  for(i = 0; i < argc; i++) {
    if(!strcmp(argv[i], "--gpu") && i + 1 < argc)
      v = argv[++i];
    else if(!strncmp(argv[i], "--gpu=", 6))
      v = argv[i] + 6;
    else
      return ctl_usage_error("watch: unknown argument '%s'", argv[i]);
    if(hr__parse_int(v, 0, HR_MAX_GPUS - 1, &cmd->gpu))
      return ctl_usage_error("watch: --gpu wants 0..63, not '%s'", v);
  }
  return EXIT_OK;
}

static int watch_run(hr__conn *c, ctl_cmd *cmd)
{
  hr_request req;
  hr_reply rep;
  int rc, err;

  if(watch_signals(c))
    return ctl_fail("watch", HR_ENOMEM, NULL);
  memset(&req, 0, sizeof(req));
  req.type = HR_MSG_SUBSCRIBE;
  req.u.subscribe.gpu = cmd->gpu;
  rc = ctl_request(c, &req, &rep, "subscribe");
  if(rc)
    return rc;
  hr_reply_free(&rep);
  for(;;) {
    err = hr__conn_read_reply(c, -1, &rep);
    if(err == HR__EINTR)
      return EXIT_OK;
    if(err == HR_EPROTO)
      continue;       /* the daemon's to fix; keep watching */
    if(err) {
      fprintf(stderr, "headroomctl: watch: the daemon went away (%s)\n",
              hr_strerror(err));
      return EXIT_CONNECT;
    }
    if(rep.id < 0 && rep.type != HR_MSG_ERROR)
      ctl_print_json(&rep);
    hr_reply_free(&rep);
  }
}

/* One KEY=VALUE of `policy set` into the request. */

const ctl_command ctl_watch_command = {"watch", watch_parse, watch_run};
