/*
 * ctl_raises.c: `headroomctl raises` (what barrier timeouts added to each
 * GPU's headroom) and `raises clear (--gpu N | --all)`. Operators only.
 */
#include <stdio.h>
#include <string.h>

#include "ctl.h"

static int raises_parse(int argc, char **argv, ctl_cmd *cmd)
{
  hr_request *req = &cmd->req;
  int i = 0, all = 0, gpu = -1;

  memset(req, 0, sizeof(*req));
  req->type = HR_MSG_RAISES_GET;
  if(argc > 0 && !strcmp(argv[0], "clear")) {
    req->type = HR_MSG_RAISES_CLEAR;
    i = 1;
  }
  for(; i < argc; i++) {
    if(!strcmp(argv[i], "--json")) {
      cmd->json = 1;
    } else if(req->type == HR_MSG_RAISES_CLEAR && !strcmp(argv[i], "--all")) {
      all = 1;
    } else if(req->type == HR_MSG_RAISES_CLEAR && !strcmp(argv[i], "--gpu")) {
      if(i + 1 >= argc)
        return ctl_usage_error("raises clear: %s", "--gpu wants a GPU index");
      if(hr__parse_int(argv[++i], 0, HR_MAX_GPUS - 1, &gpu))
        return ctl_usage_error("raises clear: --gpu wants 0..63, not '%s'",
                               argv[i]);
    } else {
      return ctl_usage_error("raises: unknown argument '%s'", argv[i]);
    }
  }
  if(req->type == HR_MSG_RAISES_CLEAR) {
    /* Clearing every GPU is asked for by name, never a default. */
    if(all == (gpu >= 0))
      return ctl_usage_error("raises clear: %s",
                             "give exactly one of --gpu N and --all");
    req->u.raises_clear.gpu = all ? -1 : gpu;
  }
  return EXIT_OK;
}

static void print_table(const hr_rep_raises *r)
{
  int i;

  printf("GPU  RAISED  HELD  HEADROOM  RAISES  LAST RAISE           UID     "
         "INCIDENT\n");
  for(i = 0; i < r->n_gpus; i++) {
    const hr_raise *x = &r->gpus[i];
    printf("%-4d %-7d %-5d %-9d %-7d ", x->gpu, x->raised, x->held,
           x->headroom, x->raises);
    if(!x->last_incident) {
      printf("-\n");
      continue;
    }
    ctl_print_time(x->last_time_ms);
    if(x->last_uid >= 0)
      printf("  %-7d %lld\n", x->last_uid, (long long)x->last_incident);
    else
      printf("  %-7s %lld\n", "?", (long long)x->last_incident);
  }
}

static void print_raises(const ctl_cmd *cmd, const hr_reply *rep)
{
  if(cmd->req.type == HR_MSG_RAISES_CLEAR)
    printf("cleared the raise of %d GPU%s\n", rep->u.raises.cleared,
           rep->u.raises.cleared == 1 ? "" : "s");
  print_table(&rep->u.raises);
}

static int raises_run(hr__conn *c, ctl_cmd *cmd)
{
  hr_request *req = &cmd->req;
  hr_reply rep;
  int rc = ctl_request(c, req, &rep, req->type == HR_MSG_RAISES_GET ?
                       "raises" : "raises clear");

  if(rc)
    return rc;
  return ctl_print_reply(cmd, &rep, print_raises);
}

const ctl_command ctl_raises_command = {"raises", raises_parse, raises_run};
