/*
 * ctl_conn.c: headroomctl's requests to the daemon, and the exit code each
 * kind of failure gets (the table in ctl_main.c's usage text).
 */
#include <stdio.h>
#include <string.h>

#include "ctl.h"

int ctl_usage_error(const char *fmt, const char *arg)
{
  fprintf(stderr, "headroomctl: ");
  fprintf(stderr, fmt, arg);
  fprintf(stderr, "\nTry 'headroomctl --help'.\n");
  return EXIT_USAGE;
}

/* The exit code for a failure. `answered`: the daemon replied with an
 * error, as opposed to the connection failing under us. */
int ctl_exit_code(int err, int answered)
{
  if(err == HR_OK)
    return EXIT_OK;
  if(err == HR_EPERM)
    return EXIT_PERM;
  return answered ? EXIT_DAEMON : EXIT_CONNECT;
}

/* hr__conn_call's transport failures; every other code came in an error
 * reply from the daemon. */
static int is_transport_error(int err)
{
  return err == HR_ECONNECT || err == HR_ECLOSED || err == HR_ETIMEDOUT ||
         err == HR__EINTR;
}

int ctl_fail(const char *what, int err, const hr_reply *rep)
{
  int answered = rep ? rep->type == HR_MSG_ERROR : !is_transport_error(err);
  if(rep && rep->type == HR_MSG_ERROR && rep->u.error.message[0])
    fprintf(stderr, "headroomctl: %s: %s (%s)\n", what, hr_strerror(err),
            rep->u.error.message);
  else
    fprintf(stderr, "headroomctl: %s: %s\n", what, hr_strerror(err));
  return ctl_exit_code(err, answered);
}


/* Send one request and wait for its reply; returns an exit code. */
int ctl_request(hr__conn *c, hr_request *req, hr_reply *rep,
                   const char *what)
{
  int err = hr__conn_call(c, req, rep, ctl_timeout_ms, NULL, NULL);
  if(err)
    return ctl_fail(what, err, rep);
  return EXIT_OK;
}
