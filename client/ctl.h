/*
 * ctl.h: what headroomctl's files share: the exit codes, the parsed
 * command line, and one table entry per command (ctl_main.c dispatches on
 * the command's name; each ctl_<command>.c defines its entry).
 */
#ifndef HR_CTL_H
#define HR_CTL_H

#include <stdint.h>

#include "hr_client_int.h"

enum {
  EXIT_OK = 0,
  EXIT_DAEMON = 1,      /* the daemon answered with an error */
  EXIT_USAGE = 2,
  EXIT_CONNECT = 3,     /* cannot connect, or the connection was lost */
  EXIT_PERM = 4         /* permission denied */
};

/* What the command line asked for, checked before connecting: a usage
 * error must not depend on whether a daemon is running. */
typedef struct ctl_cmd {
  int pretty;           /* status --pretty */
  int summary;          /* status --summary */
  int json;             /* metrics --json */
  int gpu;              /* watch --gpu, -1: every GPU */
  hr_request req;       /* policy get/set */
} ctl_cmd;

typedef struct ctl_command {
  const char *name;
  /* The arguments after the command's name, into `cmd`; an exit code. */
  int (*parse)(int argc, char **argv, ctl_cmd *cmd);
  /* Talk to the daemon and print; an exit code. */
  int (*run)(hr__conn *c, ctl_cmd *cmd);
} ctl_command;

extern const ctl_command ctl_status_command;
extern const ctl_command ctl_metrics_command;
extern const ctl_command ctl_watch_command;
extern const ctl_command ctl_policy_command;
extern const ctl_command ctl_raises_command;

/* --timeout, for every reply waited on. */
extern int ctl_timeout_ms;

/* ctl_conn.c */
int ctl_usage_error(const char *fmt, const char *arg);
int ctl_exit_code(int err, int answered);
int ctl_fail(const char *what, int err, const hr_reply *rep);
int ctl_request(hr__conn *c, hr_request *req, hr_reply *rep,
                const char *what);

/* ctl_print.c */
int ctl_print_json(const hr_reply *rep);
void ctl_print_uptime(int64_t ms);
const char *ctl_yes_no(int v);
void ctl_print_time(int64_t unix_ms);

#endif
