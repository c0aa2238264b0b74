/*
 * ctl_conn.c: headroomctl's connection and requests to the daemon, and the
 * exit status each kind of failure gets (the table in ctl_main.c's usage
 * text, shared with headroom-run and headroomd: docs/operations.md).
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "ctl.h"

int ctl_usage_error(const char *fmt, const char *arg)
{
  fprintf(stderr, "headroomctl: ");
  fprintf(stderr, fmt, arg);
  fprintf(stderr, "\nTry 'headroomctl --help'.\n");
  return EXIT_USAGE;
}

/* hr__conn_call's transport failures; every other code came in an error
 * reply from the daemon. */
static int is_transport_error(int err)
{
  return err == HR_ECONNECT || err == HR_ECLOSED || err == HR_ETIMEDOUT ||
         err == HR__EINTR;
}

int ctl_exit_code(int err, int answered)
{
  if(err == HR_OK)
    return EXIT_OK;
  return answered ? EXIT_REFUSED : EXIT_CONNECT;
}

int ctl_fail(const char *what, int err, const hr_reply *rep)
{
  char msg[4 * HR_MESSAGE_MAX];

  if(rep && rep->type == HR_MSG_ERROR && rep->u.error.message[0]) {
    ctl_escape(msg, sizeof(msg), rep->u.error.message);
    fprintf(stderr, "headroomctl: %s: %s (%s)\n", what, hr_strerror(err),
            msg);
  }
  else if(err == HR_EINVAL && (!rep || rep->type != HR_MSG_ERROR)) {
    /* Refused before it was sent: the encoder checks every field. */
    fprintf(stderr, "headroomctl: %s: invalid value (outside what the "
            "protocol carries; see proto/PROTOCOL.md)\n", what);
  }
  else {
    fprintf(stderr, "headroomctl: %s: %s\n", what, hr_strerror(err));
  }
  if(err == HR_EPERM)
    fprintf(stderr, "headroomctl: %s is for operators: root, or a member "
            "of the daemon's operator_group (docs/operations.md)\n", what);
  return ctl_exit_code(err, !is_transport_error(err));
}

int ctl_open(hr__conn *c, const char *path, int is_default)
{
  hr_rep_hello hello;
  char why[128];
  int err, missing;

  hr__conn_init(c);
  err = hr__conn_connect(c, path, ctl_timeout_ms, why, sizeof(why));
  if(err) {
    missing = access(path, F_OK) && errno == ENOENT;
    fprintf(stderr, "headroomctl: cannot connect to %s: %s\n", path, why);
    if(missing && is_default)
      fprintf(stderr, "headroomctl: no daemon at the default socket; start "
              "one (systemctl start headroomd.socket, or make run in the "
              "source tree), or name its socket with HEADROOM_SOCKET=PATH "
              "or --socket PATH\n");
    else if(missing)
      fprintf(stderr, "headroomctl: no such socket; is headroomd running "
              "there? (HEADROOM_SOCKET or --socket names the socket)\n");
    return ctl_exit_code(err, 0);
  }
  err = hr__conn_hello(c, "headroomctl", 0, ctl_timeout_ms, &hello, NULL,
                       NULL);
  if(err)
    return ctl_fail("hello", err, NULL);
  return EXIT_OK;
}

int ctl_request(hr__conn *c, hr_request *req, hr_reply *rep,
                const char *what)
{
  int err = hr__conn_call(c, req, rep, ctl_timeout_ms, NULL, NULL);
  if(err)
    return ctl_fail(what, err, rep);
  return EXIT_OK;
}
