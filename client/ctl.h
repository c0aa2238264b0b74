/*
 * ctl.h: what headroomctl's files share: the exit codes, the parsed
 * command line, and one table entry per command (ctl_main.c dispatches on
 * the command's name; each ctl_<command>.c defines its entry).
 */
#ifndef HR_CTL_H
#define HR_CTL_H

#include <stddef.h>
#include <stdint.h>

#include "hr_client_int.h"

/* The exit status table of all three tools (docs/operations.md). */
enum {
  EXIT_OK = 0,
  EXIT_REFUSED = 1,     /* the daemon refused: invalid value, not allowed */
  EXIT_USAGE = 2,
  EXIT_CONNECT = 3      /* cannot connect, or the connection was lost */
};

/* What the command line asked for, checked before connecting: a usage
 * error must not depend on whether a daemon is running. */
typedef struct ctl_cmd {
  int json;             /* --json: one JSON object (a line) for machines */
  int summary;          /* status --summary */
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

/* ctl_conn.c. Each returns an exit status. */
int ctl_usage_error(const char *fmt, const char *arg);
/* `answered`: the daemon replied with an error, as opposed to the
 * connection failing under us. */
int ctl_exit_code(int err, int answered);
/* Say what failed on stderr, with the daemon's message when it sent one. */
int ctl_fail(const char *what, int err, const hr_reply *rep);
/* Connect to `path` and say hello; `is_default`: no --socket and no
 * HEADROOM_SOCKET named it, so a missing socket gets a hint. */
int ctl_open(hr__conn *c, const char *path, int is_default);
/* Send one request and wait for its reply. */
int ctl_request(hr__conn *c, hr_request *req, hr_reply *rep,
                const char *what);

/* ctl_print.c */
/* A reply or event as one JSON line, without the wire's id. */
int ctl_print_json(const hr_reply *rep);
/* What a command prints of its reply: --json, the reply as ctl_print_json
 * writes it, else `text`'s lines; stdout flushed and the reply freed
 * either way, so that every command answers alike. An exit status. */
int ctl_print_reply(const ctl_cmd *cmd, hr_reply *rep,
                    void (*text)(const ctl_cmd *cmd, const hr_reply *rep));
/* `src` with every control character (C0, DEL, C1) and backslash
 * escaped, cut to fit `size`: client names and messages are the
 * client's, and must not reach an operator's terminal raw. */
void ctl_escape(char *dst, size_t size, const char *src);
void ctl_print_budget(const hr_budget *b);
void ctl_print_policy(const hr_policy *p);
void ctl_print_uptime(int64_t ms);
const char *ctl_yes_no(int v);
void ctl_print_time(int64_t unix_ms);

#endif
