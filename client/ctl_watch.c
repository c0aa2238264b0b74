/*
 * ctl_watch.c: `headroomctl watch`: the budgets as they are, then each
 * change as it comes, until SIGINT or SIGTERM.
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
    if(!strcmp(argv[i], "--json")) {
      cmd->json = 1;
      continue;
    }
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

/* One budget, as a line of text or as the protocol's budget event. */
static void print_budget(const ctl_cmd *cmd, const hr_budget *b)
{
  hr_reply ev;

  if(!cmd->json) {
    ctl_print_budget(b);
    fflush(stdout);
    return;
  }
  memset(&ev, 0, sizeof(ev));
  ev.type = HR_MSG_BUDGET;
  ev.id = -1;
  ev.u.budget = *b;
  ctl_print_json(&ev);
}

/* ctl_request for the watch's own requests: a stop signal that comes
 * while one is in flight ends the watch as one after it does, exit 0
 * (*stopped), rather than as a failed request. */
static int watch_request(hr__conn *c, hr_request *req, hr_reply *rep, const char *what,
                         int *stopped)
{
  int err = hr__conn_call(c, req, rep, ctl_timeout_ms, NULL, NULL);
  *stopped = err == HR__EINTR;
  if(err && !*stopped)
    return ctl_fail(what, err, rep);
  return EXIT_OK;
}

/* The budgets as they are now, before any change: asked for after
 * subscribing, so that no change falls between the two (an event that
 * arrives first is older than the status, which already holds it).
 * `epochs`: what was printed, per GPU, so that such an event is not
 * printed again. */
static int print_current(hr__conn *c, const ctl_cmd *cmd, int64_t *epochs, int *stopped)
{
  hr_request req;
  hr_reply rep;
  int i, rc;

  memset(&req, 0, sizeof(req));
  req.type = HR_MSG_STATUS;
  req.u.status.detail = HR_STATUS_SUMMARY;
  rc = watch_request(c, &req, &rep, "status", stopped);
  if(rc || *stopped)
    return rc;
  for(i = 0; i < rep.u.status.n_gpus; i++) {
    const hr_budget *b = &rep.u.status.gpus[i].budget;
    if(cmd->gpu >= 0 && b->gpu != cmd->gpu)
      continue;
    print_budget(cmd, b);
    if(b->gpu >= 0 && b->gpu < HR_MAX_GPUS)
      epochs[b->gpu] = b->epoch;
  }
  hr_reply_free(&rep);
  return EXIT_OK;
}

static int watch_run(hr__conn *c, ctl_cmd *cmd)
{
  int64_t epochs[HR_MAX_GPUS];
  char text[4 * HR_MESSAGE_MAX];
  hr_request req;
  hr_reply rep;
  int i, rc, err, g, stopped;

  for(i = 0; i < HR_MAX_GPUS; i++)
    epochs[i] = -1;
  if(watch_signals(c))
    return ctl_fail("watch", HR_ENOMEM, NULL);
  memset(&req, 0, sizeof(req));
  req.type = HR_MSG_SUBSCRIBE;
  req.u.subscribe.gpu = cmd->gpu;
  rc = watch_request(c, &req, &rep, "subscribe", &stopped);
  if(rc || stopped)
    return rc;
  hr_reply_free(&rep);
  rc = print_current(c, cmd, epochs, &stopped);
  if(rc || stopped)
    return rc;
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
    if(rep.type == HR_MSG_BUDGET) {
      g = rep.u.budget.gpu;
      /* Epochs only go up (a restarted daemon is a new connection). */
      if(g >= 0 && g < HR_MAX_GPUS &&
         (int64_t)rep.u.budget.epoch > epochs[g]) {
        print_budget(cmd, &rep.u.budget);
        epochs[g] = rep.u.budget.epoch;
      }
    }
    else if(rep.type == HR_MSG_SHUTDOWN && cmd->json) {
      ctl_print_json(&rep);
    }
    else if(rep.type == HR_MSG_SHUTDOWN) {
      ctl_escape(text, sizeof(text), rep.u.shutdown_reason);
      printf("daemon stopping: %s\n", text[0] ? text : "no reason given");
      fflush(stdout);
    }
    hr_reply_free(&rep);
  }
}

const ctl_command ctl_watch_command = {
  "watch", watch_parse, watch_run
};
