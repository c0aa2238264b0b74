/*
 * ctl_policy.c: `headroomctl policy get` and `policy set KEY=VALUE...`:
 * the policy (the new one, after set) as KEY VALUE lines or as JSON.
 */
#include <stdio.h>
#include <string.h>

#include "ctl.h"

/* A known key with a value that cannot be one: "invalid value" in the
 * exit status table, as when the daemon refuses it. */
static int invalid_value(const char *fmt, const char *arg)
{
  fprintf(stderr, "headroomctl: ");
  fprintf(stderr, fmt, arg);
  fprintf(stderr, "\n");
  return EXIT_REFUSED;
}

/* One KEY=VALUE of `policy set` into the request. */
static int policy_arg(const char *arg, hr_req_policy_set *ps)
{
  static const struct {
    const char *key;
    unsigned bit;
  } keys[] = {
    {"min_headroom", HR_POLICY_MIN_HEADROOM},
    {"max_headroom", HR_POLICY_MAX_HEADROOM},
    {"min_grid", HR_POLICY_MIN_GRID},
    {"incident_raise", HR_POLICY_INCIDENT_RAISE},
  };
  const char *eq = strchr(arg, '=');
  const char *v;
  size_t i, klen;
  int n;

  if(!eq)
    return ctl_usage_error("policy set: '%s' is not KEY=VALUE", arg);
  klen = (size_t)(eq - arg);
  v = eq + 1;
  for(i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
    if(strlen(keys[i].key) == klen && !strncmp(arg, keys[i].key, klen))
      break;
  }
  if(i == sizeof(keys) / sizeof(keys[0]))
    return ctl_usage_error("policy set: unknown key in '%s' (min_headroom, "
                       "max_headroom, min_grid, incident_raise)", arg);
  if(keys[i].bit == HR_POLICY_INCIDENT_RAISE) {
    if(!strcmp(v, "yes") || !strcmp(v, "true") || !strcmp(v, "1"))
      n = 1;
    else if(!strcmp(v, "no") || !strcmp(v, "false") || !strcmp(v, "0"))
      n = 0;
    else
      return invalid_value("policy set: incident_raise wants yes or no, "
                           "not '%s'", v);
    ps->policy.incident_raise = n;
  }
  else {
    if(hr__parse_int(v, 0, HR_MAX_SMS, &n))
      return invalid_value("policy set: '%s' wants a number of SMs", arg);
    if(keys[i].bit == HR_POLICY_MIN_HEADROOM)
      ps->policy.min_headroom = n;
    else if(keys[i].bit == HR_POLICY_MAX_HEADROOM)
      ps->policy.max_headroom = n;
    else
      ps->policy.min_grid = n;
  }
  ps->fields |= keys[i].bit;
  return EXIT_OK;
}

static int policy_parse(int argc, char **argv, ctl_cmd *cmd)
{
  hr_request *req = &cmd->req;
  int i, rc, n = 0;

  memset(req, 0, sizeof(*req));
  /* --json anywhere after `policy`; the rest is the subcommand. */
  for(i = 0; i < argc; i++) {
    if(!strcmp(argv[i], "--json"))
      cmd->json = 1;
    else
      argv[n++] = argv[i];
  }
  argc = n;
  if(argc < 1)
    return ctl_usage_error("policy: %s",
                           "expected 'get' or 'set KEY=VALUE...'");
  if(!strcmp(argv[0], "get")) {
    if(argc > 1)
      return ctl_usage_error("policy get: unknown argument '%s'", argv[1]);
    req->type = HR_MSG_POLICY_GET;
    return EXIT_OK;
  }
  if(strcmp(argv[0], "set"))
    return ctl_usage_error("policy: unknown subcommand '%s'", argv[0]);
  if(argc < 2)
    return ctl_usage_error("policy set: %s", "expected KEY=VALUE...");
  req->type = HR_MSG_POLICY_SET;
  for(i = 1; i < argc; i++) {
    rc = policy_arg(argv[i], &req->u.policy_set);
    if(rc)
      return rc;
  }
  return EXIT_OK;
}

static void print_policy(const ctl_cmd *cmd, const hr_reply *rep)
{
  (void)cmd;
  ctl_print_policy(&rep->u.policy);
}

static int policy_run(hr__conn *c, ctl_cmd *cmd)
{
  hr_request *req = &cmd->req;
  hr_reply rep;
  int rc = ctl_request(c, req, &rep, req->type == HR_MSG_POLICY_GET ?
                       "policy get" : "policy set");
  if(rc)
    return rc;
  return ctl_print_reply(cmd, &rep, print_policy);
}

const ctl_command ctl_policy_command = {
  "policy", policy_parse, policy_run
};
