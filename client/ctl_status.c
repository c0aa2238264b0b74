/*
 * ctl_status.c: `headroomctl status`, as tables or as JSON (--json).
 */
#include <stdio.h>
#include <string.h>

#include "ctl.h"

/* Why a summary lists nothing, in place of a table's rows. */
static void print_not_listed(const hr_status *st)
{
  if(st->truncated)
    printf("(not listed: status truncated, see above)\n");
  else
    printf("(not listed: summary)\n");
}

static int lease_total(const hr_status_gpu *g)
{
  int m, n = 0;

  for(m = 0; m < HR_MODE_COUNT; m++)
    n += g->lease_count[m];
  return n;
}

static void print_pretty(const ctl_cmd *cmd, const hr_reply *rep)
{
  const hr_status *st = &rep->u.status;
  const char *src = hr_topology_source_name(st->topology_source);
  int summary = st->detail == HR_STATUS_SUMMARY;
  char text[4 * HR_MESSAGE_MAX];
  int i, j, any;

  (void)cmd;
  ctl_escape(text, sizeof(text), st->daemon);
  printf("%s, up ", text);
  ctl_print_uptime(st->uptime_ms);
  printf(", %lld requests served, topology from %s, %d client%s\n",
         (long long)st->requests, src ? src : "?", st->client_count,
         st->client_count == 1 ? "" : "s");
  if(st->truncated)
    printf("STATUS TRUNCATED: the full status (%d clients) would pass the "
           "%d-byte message limit;\nshowing budgets and counts only, no "
           "footprint, lease, incident or client listed.\n",
           st->client_count, HR_PROTO_MAX_LINE);
  printf("policy: min_headroom %d, max_headroom %d, min_grid %d, "
         "incident_raise %s\n\n", st->policy.min_headroom,
         st->policy.max_headroom, st->policy.min_grid,
         ctl_yes_no(st->policy.incident_raise));

  printf("%-4s %5s %9s %5s %6s %9s %4s %10s %7s %8s %6s %7s %10s\n", "GPU",
         "SMS", "HEADROOM", "GRID", "EPOCH", "NCCL_CAP", "CGA", "COMM_CTAS",
         "RAISED", "CLIENTS", "COMMS", "LEASES", "INCIDENTS");
  for(i = 0; i < st->n_gpus; i++) {
    const hr_status_gpu *g = &st->gpus[i];
    char cap[24];
    if(g->budget.nccl_min_ctas > 0)
      snprintf(cap, sizeof(cap), "%d-%d", g->budget.nccl_min_ctas,
               g->budget.nccl_max_ctas);
    else
      snprintf(cap, sizeof(cap), "%d", g->budget.nccl_max_ctas);
    printf("%-4d %5d %9d %5d %6u %9s %4d %10d %7d %8d %6d %7d %10d\n",
           g->info.index, g->info.sms, g->budget.headroom, g->budget.grid,
           g->budget.epoch, cap, g->budget.nccl_cga_cluster_size,
           g->comm_ctas, g->raised, g->n_clients, g->comm_count,
           lease_total(g), g->incident_count);
  }

  /* Partition mode: what a partition lease gets on each GPU. */
  printf("\nPARTITION MODE (green contexts)\n");
  printf("%-4s %5s %9s %9s %9s\n", "GPU", "STEP", "COMM_SMS", "MEGA_SMS",
         "NCCL_CAP");
  for(i = 0; i < st->n_gpus; i++) {
    const hr_budget *b = &st->gpus[i].budget;
    if(b->partition_granularity > 0)
      printf("%-4d %5d %9d %9d %9d\n", st->gpus[i].info.index,
             b->partition_granularity, b->partition_comm_sms,
             b->sms - b->partition_comm_sms, b->partition_nccl_max_ctas);
    else
      printf("%-4d %5s %9s %9s %9s  (unsupported here)\n",
             st->gpus[i].info.index, "-", "-", "-", "-");
  }

  if(summary) {
    /* No list to show: the leases by mode are what is left of them. */
    printf("\nLEASES BY MODE\n");
    printf("%-4s", "GPU");
    for(j = 0; j < HR_MODE_COUNT; j++)
      printf(" %12s", hr_mode_name((hr_mode)j));
    printf("\n");
    for(i = 0; i < st->n_gpus; i++) {
      printf("%-4d", st->gpus[i].info.index);
      for(j = 0; j < HR_MODE_COUNT; j++)
        printf(" %12d", st->gpus[i].lease_count[j]);
      printf("\n");
    }
    printf("\nFOOTPRINTS, LEASES, RECENT INCIDENTS, CLIENTS\n");
    print_not_listed(st);
    return;
  }

  printf("\nFOOTPRINTS\n");
  printf("%-4s %6s %7s %-20s %5s %4s %11s\n", "GPU", "ID", "CLIENT", "NAME",
         "CTAS", "CGA", "CONCURRENT");
  for(i = 0, any = 0; i < st->n_gpus; i++) {
    const hr_status_gpu *g = &st->gpus[i];
    for(j = 0; j < g->n_comms; j++, any++) {
      const hr_status_comm *m = &g->comms[j];
      ctl_escape(text, sizeof(text), m->name[0] ? m->name : "-");
      printf("%-4d %6lld %7lld %-20s %5d %4d %11d\n", g->info.index,
             (long long)m->id, (long long)m->client, text, m->ctas, m->cga,
             m->concurrent);
    }
  }
  if(!any)
    printf("(none)\n");

  printf("\nLEASES\n");
  printf("%-4s %6s %7s %8s %-12s\n", "GPU", "ID", "CLIENT", "CLUSTER", "MODE");
  for(i = 0, any = 0; i < st->n_gpus; i++) {
    const hr_status_gpu *g = &st->gpus[i];
    for(j = 0; j < g->n_leases; j++, any++) {
      const hr_status_lease *l = &g->leases[j];
      const char *mode = hr_mode_name(l->mode);
      printf("%-4d %6lld %7lld %8d %-12s\n", g->info.index, (long long)l->id,
             (long long)l->client, l->cluster, mode ? mode : "?");
    }
  }
  if(!any)
    printf("(none)\n");

  printf("\nRECENT INCIDENTS\n");
  for(i = 0, any = 0; i < st->n_gpus; i++) {
    const hr_status_gpu *g = &st->gpus[i];
    for(j = 0; j < g->n_incidents; j++, any++) {
      const hr_status_incident *in = &g->incidents[j];
      const char *kind = hr_incident_kind_name(in->kind);
      ctl_escape(text, sizeof(text), in->message);
      printf("GPU %d #%lld ", g->info.index, (long long)in->id);
      ctl_print_time(in->time_ms);
      printf(" %s client %lld lease %lld: barrier %d, %d of %d arrived, "
             "SM %d, grid %d, timeout %d ms, CUDA error %d%s%s\n",
             kind ? kind : "?", (long long)in->client, (long long)in->lease,
             in->detail.barrier, in->detail.arrived, in->detail.expected,
             in->detail.sm, in->detail.grid, in->detail.timeout_ms,
             in->detail.cuda_error, text[0] ? ": " : "", text);
    }
  }
  if(!any)
    printf("(none)\n");

  printf("\nCLIENTS\n");
  printf("%6s %8s %6s %6s %-20s %8s %10s\n", "ID", "PID", "UID", "GID",
         "NAME", "OPERATOR", "SUBSCRIBED");
  for(i = 0; i < st->n_clients; i++) {
    const hr_status_client *c = &st->clients[i];
    ctl_escape(text, sizeof(text), c->name[0] ? c->name : "-");
    printf("%6lld %8d %6d %6d %-20s %8s %10s\n", (long long)c->id, c->pid,
           c->uid, c->gid, text, ctl_yes_no(c->operator_),
           ctl_yes_no(c->subscribed));
  }
  if(!st->n_clients)
    printf("(none)\n");
}

static int status_parse(int argc, char **argv, ctl_cmd *cmd)
{
  int i;
  for(i = 0; i < argc; i++) {
    /* --pretty: the tables, which are the default now; still taken so
     * that scripts written for it keep working. */
    if(!strcmp(argv[i], "--pretty") || !strcmp(argv[i], "-p"))
      cmd->json = 0;
    else if(!strcmp(argv[i], "--json"))
      cmd->json = 1;
    else if(!strcmp(argv[i], "--summary"))
      cmd->summary = 1;
    else
      return ctl_usage_error("status: unknown argument '%s'", argv[i]);
  }
  return EXIT_OK;
}

static int status_run(hr__conn *c, ctl_cmd *cmd)
{
  hr_request req;
  hr_reply rep;
  int rc;

  memset(&req, 0, sizeof(req));
  req.type = HR_MSG_STATUS;
  req.u.status.detail = cmd->summary ? HR_STATUS_SUMMARY : HR_STATUS_FULL;
  rc = ctl_request(c, &req, &rep, "status");
  if(rc)
    return rc;
  /* Said on stderr too, so that a script reading the JSON from stdout
   * leaves a trace in its log when it did not get the lists. */
  if(rep.u.status.truncated)
    fprintf(stderr, "headroomctl: status truncated: the full status of %d "
            "clients would pass the %d-byte message limit; the daemon sent "
            "the summary (budgets and counts, no lists)\n",
            rep.u.status.client_count, HR_PROTO_MAX_LINE);
  return ctl_print_reply(cmd, &rep, print_pretty);
}


const ctl_command ctl_status_command = {
  "status", status_parse, status_run
};
