/*
 * headroomctl: the operator's view of headroomd.
 *
 * Scripts rely on two things here: every JSON line printed is one the
 * protocol's own decoder accepts (replies and events are decoded, then
 * encoded again, never passed through unchecked), and the exit code says
 * which kind of failure happened (see usage()).
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "hr_client_int.h"

enum {
  EXIT_OK = 0,
  EXIT_DAEMON = 1,      /* the daemon answered with an error */
  EXIT_USAGE = 2,
  EXIT_CONNECT = 3,     /* cannot connect, or the connection was lost */
  EXIT_PERM = 4         /* permission denied */
};

#define DEFAULT_TIMEOUT_MS 5000

static const char usage_text[] =
"NAME\n"
"    headroomctl - query and steer headroomd, the GPU SM broker\n"
"\n"
"SYNOPSIS\n"
"    headroomctl [--socket PATH] [--timeout MS] status [--pretty] [--summary]\n"
"    headroomctl [--socket PATH] [--timeout MS] metrics [--json]\n"
"    headroomctl [--socket PATH] [--timeout MS] watch [--gpu N]\n"
"    headroomctl [--socket PATH] [--timeout MS] policy get\n"
"    headroomctl [--socket PATH] [--timeout MS] policy set KEY=VALUE...\n"
"    headroomctl --help | --version\n"
"\n"
"DESCRIPTION\n"
"    Talks to the headroomd of this node over its Unix socket, one JSON\n"
"    object per line (see proto/PROTOCOL.md).\n"
"\n"
"COMMANDS\n"
"    status      Print the daemon's status as one JSON line: topology,\n"
"                policy, clients, and per GPU its budget, footprints,\n"
"                leases and recent incidents.\n"
"    status --pretty\n"
"                The same as tables: per GPU the SMs, headroom, grid,\n"
"                epoch, NCCL cap, comm CTAs in flight, headroom raised by\n"
"                incidents and the counts; what a partition-mode lease\n"
"                gets there (green-context step, comm and mega SMs, NCCL\n"
"                cap); then the footprints, leases (with their mode:\n"
"                headroom, cooperative, agnostic or partition), recent\n"
"                incidents and clients.\n"
"    status --summary\n"
"                Only the daemon, the policy and per GPU its budget and the\n"
"                counts (clients, footprints, leases by mode, incidents):\n"
"                no list, so it stays small on a node with any number of\n"
"                clients. With --pretty, as tables.\n"
"                When the full status would pass the protocol's 64 KiB\n"
"                message limit (hundreds of clients), the daemon sends the\n"
"                summary instead, marked \"truncated\":true in the JSON;\n"
"                headroomctl then says so on stderr (and in the --pretty\n"
"                tables) and still exits 0.\n"
"    metrics     Print the daemon's counters and gauges in the Prometheus\n"
"                text format (names headroom_*): uptime, clients, requests\n"
"                by type, error replies by code, the request latency\n"
"                histogram, time clients ran without a daemon, and per GPU\n"
"                its budget and partition numbers, clients, footprints,\n"
"                leases by mode, headroom raised and incidents by kind.\n"
"                For node_exporter's textfile collector, write it to a\n"
"                temporary file and rename that into place (see\n"
"                docs/operations.md).\n"
"    metrics --json\n"
"                The same as one JSON line (the protocol's metrics reply).\n"
"    watch [--gpu N]\n"
"                Subscribe to budget changes (of GPU N, or of every GPU)\n"
"                and print each pushed event as one JSON line, flushed at\n"
"                once, until interrupted (SIGINT or SIGTERM: exit 0) or\n"
"                the daemon goes away (exit 3).\n"
"    policy get  Print the operator's policy as one JSON line.\n"
"    policy set KEY=VALUE...\n"
"                Change the policy (operators only: root, or a member of\n"
"                the daemon's operator group) and print the new one. Keys:\n"
"                  min_headroom=SMS    floor on every GPU's headroom\n"
"                  max_headroom=SMS    ceiling on it\n"
"                  min_grid=SMS        never leave the mega kernel less\n"
"                  incident_raise=yes|no\n"
"                                      a reported barrier timeout raises\n"
"                                      the GPU's headroom by one cluster\n"
"\n"
"OPTIONS\n"
"    -s, --socket PATH   the daemon's socket (default: $HEADROOM_SOCKET,\n"
"                        else " HR_DEFAULT_SOCKET ")\n"
"    -t, --timeout MS    give up on a reply after MS milliseconds\n"
"                        (default 5000)\n"
"    -h, --help          this text\n"
"    -V, --version       the version of headroomctl and its protocol\n"
"\n"
"ENVIRONMENT\n"
"    HEADROOM_SOCKET     the socket, when --socket is not given\n"
"\n"
"EXIT STATUS\n"
"    0   success\n"
"    1   the daemon answered with an error\n"
"    2   usage error\n"
"    3   cannot connect to the daemon, or the connection was lost\n"
"    4   permission denied (the socket, or an operator-only request)\n"
"\n"
"EXAMPLES\n"
"    headroomctl status --pretty\n"
"    headroomctl status --summary --pretty\n"
"    headroomctl metrics > h.prom.$$ && mv h.prom.$$ h.prom\n"
"    headroomctl watch --gpu 0\n"
"    sudo headroomctl policy set max_headroom=24 incident_raise=no\n";

static int timeout_ms = DEFAULT_TIMEOUT_MS;
static int stop_pipe[2] = {-1, -1};

static int usage_error(const char *fmt, const char *arg)
{
  fprintf(stderr, "headroomctl: ");
  fprintf(stderr, fmt, arg);
  fprintf(stderr, "\nTry 'headroomctl --help'.\n");
  return EXIT_USAGE;
}

/* The exit code for a failure. `answered`: the daemon replied with an
 * error, as opposed to the connection failing under us. */
static int exit_code(int err, int answered)
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

static int fail(const char *what, int err, const hr_reply *rep)
{
  int answered = rep ? rep->type == HR_MSG_ERROR : !is_transport_error(err);
  if(rep && rep->type == HR_MSG_ERROR && rep->u.error.message[0])
    fprintf(stderr, "headroomctl: %s: %s (%s)\n", what, hr_strerror(err),
            rep->u.error.message);
  else
    fprintf(stderr, "headroomctl: %s: %s\n", what, hr_strerror(err));
  return exit_code(err, answered);
}

/* Connect and say hello; returns an exit code. */
static int open_conn(hr__conn *c, const char *path)
{
  hr_rep_hello hello;
  char why[128];
  int err;

  hr__conn_init(c);
  err = hr__conn_connect(c, path, timeout_ms, why, sizeof(why));
  if(err) {
    fprintf(stderr, "headroomctl: cannot connect to %s: %s\n", path, why);
    return exit_code(err, 0);
  }
  err = hr__conn_hello(c, "headroomctl", 0, timeout_ms, &hello, NULL, NULL);
  if(err)
    return fail("hello", err, NULL);
  return EXIT_OK;
}

/* Print a reply (or event) as the one JSON line the protocol defines. */
static int print_json(const hr_reply *rep)
{
  hr_buf b;
  int err;
  hr_buf_init(&b, HR_PROTO_MAX_LINE);
  err = hr_proto_encode_reply(rep, &b);
  if(!err) {
    fwrite(b.data, 1, b.len, stdout);
    fflush(stdout);
  }
  hr_buf_free(&b);
  if(err)
    fprintf(stderr, "headroomctl: cannot encode the reply: %s\n",
            hr_strerror(err));
  return err ? EXIT_DAEMON : EXIT_OK;
}

/* Send one request and wait for its reply; returns an exit code. */
static int request(hr__conn *c, hr_request *req, hr_reply *rep,
                   const char *what)
{
  int err = hr__conn_call(c, req, rep, timeout_ms, NULL, NULL);
  if(err)
    return fail(what, err, rep);
  return EXIT_OK;
}

/* ---- status --pretty ---------------------------------------------------- */

static void print_uptime(int64_t ms)
{
  int64_t s = ms / 1000;
  if(s >= 86400)
    printf("%lldd%02lldh", (long long)(s / 86400), (long long)(s % 86400 / 3600));
  else if(s >= 3600)
    printf("%lldh%02lldm", (long long)(s / 3600), (long long)(s % 3600 / 60));
  else
    printf("%lldm%02llds", (long long)(s / 60), (long long)(s % 60));
}

static const char *yes_no(int v)
{
  return v ? "yes" : "no";
}

static void print_time(int64_t unix_ms)
{
  time_t t = (time_t)(unix_ms / 1000);
  struct tm tm;
  char text[32];
  if(localtime_r(&t, &tm) && strftime(text, sizeof(text), "%Y-%m-%d %H:%M:%S",
                                      &tm))
    printf("%s", text);
  else
    printf("%lld", (long long)unix_ms);
}

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

static void print_pretty(const hr_status *st)
{
  const char *src = hr_topology_source_name(st->topology_source);
  int summary = st->detail == HR_STATUS_SUMMARY;
  int i, j, any;

  printf("%s, up ", st->daemon);
  print_uptime(st->uptime_ms);
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
         yes_no(st->policy.incident_raise));

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
      printf("%-4d %6lld %7lld %-20s %5d %4d %11d\n", g->info.index,
             (long long)m->id, (long long)m->client,
             m->name[0] ? m->name : "-", m->ctas, m->cga, m->concurrent);
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
      printf("GPU %d #%lld ", g->info.index, (long long)in->id);
      print_time(in->time_ms);
      printf(" %s client %lld lease %lld: barrier %d, %d of %d arrived, "
             "SM %d, grid %d, timeout %d ms, CUDA error %d%s%s\n",
             kind ? kind : "?", (long long)in->client, (long long)in->lease,
             in->detail.barrier, in->detail.arrived, in->detail.expected,
             in->detail.sm, in->detail.grid, in->detail.timeout_ms,
             in->detail.cuda_error, in->message[0] ? ": " : "", in->message);
    }
  }
  if(!any)
    printf("(none)\n");

  printf("\nCLIENTS\n");
  printf("%6s %8s %6s %6s %-20s %8s %10s\n", "ID", "PID", "UID", "GID",
         "NAME", "OPERATOR", "SUBSCRIBED");
  for(i = 0; i < st->n_clients; i++) {
    const hr_status_client *c = &st->clients[i];
    printf("%6lld %8d %6d %6d %-20s %8s %10s\n", (long long)c->id, c->pid,
           c->uid, c->gid, c->name[0] ? c->name : "-", yes_no(c->operator_),
           yes_no(c->subscribed));
  }
  if(!st->n_clients)
    printf("(none)\n");
}

/* ---- metrics: the Prometheus text format --------------------------------
 * One family at a time: a HELP and a TYPE line, then every sample of it
 * (per GPU, per label value) together, as the format requires. Counters end
 * in _total; times are in seconds, written as exact decimals from the
 * daemon's integer milliseconds and microseconds, so nothing is lost to
 * float printing. */

/* `v` / 10^`decimals` as the shortest exact decimal: 10, 6 -> "0.00001". */
static void fmt_fixed(char *buf, size_t n, int64_t v, int decimals)
{
  int64_t scale = 1;
  size_t len;
  int i;

  for(i = 0; i < decimals; i++)
    scale *= 10;
  snprintf(buf, n, "%lld.%0*lld", (long long)(v / scale), decimals,
           (long long)(v % scale));
  len = strlen(buf);
  while(len > 0 && buf[len - 1] == '0')
    buf[--len] = '\0';
  if(len > 0 && buf[len - 1] == '.')
    buf[--len] = '\0';
}

/* A label value: backslash, double quote and newline escaped. */
static void put_label_value(const char *v)
{
  for(; *v; v++) {
    if(*v == '\\' || *v == '"')
      printf("\\%c", *v);
    else if(*v == '\n')
      printf("\\n");
    else
      putchar(*v);
  }
}

static void family(const char *name, const char *type, const char *help)
{
  printf("# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void sample_i64(const char *name, int64_t v)
{
  printf("%s %lld\n", name, (long long)v);
}

/* name{gpu="N"} v, or name{gpu="N",label="value"} v when label is set. */
static void gpu_sample(const char *name, int gpu, const char *label,
                       const char *value, int64_t v)
{
  printf("%s{gpu=\"%d\"", name, gpu);
  if(label) {
    printf(",%s=\"", label);
    put_label_value(value);
    putchar('"');
  }
  printf("} %lld\n", (long long)v);
}

/* The same gauge for every GPU: the int at offset `field` of each. */
static void gpu_family(const hr_metrics *m, const char *name,
                       const char *help, size_t field)
{
  int i;

  family(name, "gauge", help);
  for(i = 0; i < m->n_gpus; i++)
    gpu_sample(name, m->gpus[i].index, NULL, NULL,
               *(const int *)((const char *)&m->gpus[i] + field));
}

#define GPU_FIELD(f) offsetof(hr_metrics_gpu, f)

static void print_daemon_metrics(const hr_metrics *m)
{
  char num[48];
  int i;

  family("headroom_info", "gauge", "The daemon that answered, as a label.");
  printf("headroom_info{daemon=\"");
  put_label_value(m->daemon);
  printf("\"} 1\n");
  family("headroom_uptime_seconds", "gauge", "Time since headroomd started.");
  fmt_fixed(num, sizeof(num), m->uptime_ms, 3);
  printf("headroom_uptime_seconds %s\n", num);
  family("headroom_clients", "gauge", "Clients connected now.");
  sample_i64("headroom_clients", m->clients);
  family("headroom_clients_resumed_total", "counter",
         "Clients that connected after running without a daemon, on their "
         "fallback budget (hellos with degraded_ms).");
  sample_i64("headroom_clients_resumed_total", m->clients_resumed);
  family("headroom_client_degraded_seconds_total", "counter",
         "Time those clients had run without a daemon, summed.");
  fmt_fixed(num, sizeof(num), m->client_degraded_ms, 3);
  printf("headroom_client_degraded_seconds_total %s\n", num);

  family("headroom_requests_total", "counter",
         "Request lines served, by the type they named; \"invalid\": "
         "lines that did not decode as a request.");
  for(i = HR_MSG_HELLO; i <= HR_MSG_METRICS; i++)
    printf("headroom_requests_total{type=\"%s\"} %lld\n",
           hr_msg_type_name((hr_msg_type)i), (long long)m->requests[i]);
  printf("headroom_requests_total{type=\"invalid\"} %lld\n",
         (long long)m->requests[HR_MSG_NONE]);
  family("headroom_errors_total", "counter",
         "Error replies to requests, by wire code.");
  for(i = 0; i < HR_WERR_COUNT; i++)
    printf("headroom_errors_total{code=\"%s\"} %lld\n",
           hr_wire_error_name((hr_wire_error)i), (long long)m->errors[i]);
  family("headroom_queued_bytes", "gauge",
         "Bytes queued to clients and not yet written.");
  sample_i64("headroom_queued_bytes", m->queued_bytes);
  family("headroom_events_coalesced_total", "counter",
         "Budget events replaced by a newer budget of the same GPU before "
         "the subscriber could take them.");
  sample_i64("headroom_events_coalesced_total", m->events_coalesced);
}

static void print_latency(const hr_metrics *m)
{
  static const int64_t bounds[HR_METRICS_BUCKETS - 1] =
    HR_METRICS_BUCKET_BOUNDS_US;
  const char *name = "headroom_request_duration_seconds";
  int64_t cumulative = 0;
  char num[48];
  int i;

  family(name, "histogram",
         "From a request line being framed to its reply being queued.");
  for(i = 0; i < HR_METRICS_BUCKETS; i++) {
    cumulative += m->latency[i];
    if(i < HR_METRICS_BUCKETS - 1)
      fmt_fixed(num, sizeof(num), bounds[i], 6);
    else
      snprintf(num, sizeof(num), "+Inf");
    printf("%s_bucket{le=\"%s\"} %lld\n", name, num, (long long)cumulative);
  }
  fmt_fixed(num, sizeof(num), m->latency_sum_us, 6);
  printf("%s_sum %s\n%s_count %lld\n", name, num, name,
         (long long)m->latency_count);
}

static void print_gpu_metrics(const hr_metrics *m)
{
  int i, j;

  gpu_family(m, "headroom_gpu_sms", "SMs on the GPU.", GPU_FIELD(sms));
  gpu_family(m, "headroom_gpu_headroom", "SMs left free for communication "
             "kernels beside a headroom-mode lease.", GPU_FIELD(headroom));
  gpu_family(m, "headroom_gpu_grid", "CTAs a headroom-mode lease launches "
             "the mega kernel with.", GPU_FIELD(grid));
  family("headroom_gpu_epoch", "gauge",
         "Budget epoch: goes up with every change of the GPU's budget.");
  for(i = 0; i < m->n_gpus; i++)
    gpu_sample("headroom_gpu_epoch", m->gpus[i].index, NULL, NULL,
               m->gpus[i].epoch);
  gpu_family(m, "headroom_gpu_nccl_max_ctas", "NCCL CTA cap per "
             "communicator (maxCTAs) in the budget.",
             GPU_FIELD(nccl_max_ctas));
  gpu_family(m, "headroom_gpu_partition_granularity", "SMs per green-context "
             "step for partition-mode leases; 0: partition mode is refused "
             "on the GPU.", GPU_FIELD(partition_granularity));
  gpu_family(m, "headroom_gpu_partition_comm_sms", "SMs of the comm "
             "partition a partition-mode lease gets (0: none).",
             GPU_FIELD(partition_comm_sms));
  gpu_family(m, "headroom_gpu_partition_nccl_max_ctas", "NCCL CTA cap per "
             "communicator (maxCTAs) inside the comm partition.",
             GPU_FIELD(partition_nccl_max_ctas));
  gpu_family(m, "headroom_gpu_clients", "Clients holding a footprint or a "
             "lease on the GPU.", GPU_FIELD(clients));
  gpu_family(m, "headroom_gpu_footprints", "Communication footprints "
             "registered on the GPU.", GPU_FIELD(comms));
  gpu_family(m, "headroom_gpu_footprint_ctas", "CTAs in flight over all "
             "footprints: sum of CTAs x concurrent collectives.",
             GPU_FIELD(comm_ctas));
  family("headroom_gpu_leases", "gauge", "Leases on the GPU, by mode.");
  for(i = 0; i < m->n_gpus; i++)
    for(j = 0; j < HR_MODE_COUNT; j++)
      gpu_sample("headroom_gpu_leases", m->gpus[i].index, "mode",
                 hr_mode_name((hr_mode)j), m->gpus[i].leases[j]);
  family("headroom_gpu_budget_source", "gauge", "1 for the source of the "
         "GPU's headroom: the policy's theory, or a safe headroom measured "
         "on the node by headroom-calibrate.");
  for(i = 0; i < m->n_gpus; i++)
    for(j = 0; j < HR_SOURCE_COUNT; j++)
      gpu_sample("headroom_gpu_budget_source", m->gpus[i].index, "source",
                 hr_budget_source_name((hr_budget_source)j),
                 m->gpus[i].budget_source == (hr_budget_source)j);
  gpu_family(m, "headroom_gpu_raised", "Headroom added by reported barrier "
             "timeouts (kept across restarts).", GPU_FIELD(raised));
  family("headroom_gpu_incidents_total", "counter",
         "Incidents reported since headroomd started, by kind.");
  for(i = 0; i < m->n_gpus; i++)
    for(j = 0; j < HR_INCIDENT_COUNT; j++)
      gpu_sample("headroom_gpu_incidents_total", m->gpus[i].index, "kind",
                 hr_incident_kind_name((hr_incident_kind)j),
                 m->gpus[i].incidents[j]);
}

static void print_prometheus(const hr_metrics *m)
{
  print_daemon_metrics(m);
  print_latency(m);
  print_gpu_metrics(m);
  fflush(stdout);
}

/* ---- commands ----------------------------------------------------------- */

/* What the command line asked for, checked before connecting: a usage
 * error must not depend on whether a daemon is running. */
typedef enum { CMD_STATUS, CMD_METRICS, CMD_WATCH, CMD_POLICY } ctl_kind;

typedef struct ctl_cmd {
  ctl_kind kind;
  int pretty;           /* status --pretty */
  int summary;          /* status --summary */
  int json;             /* metrics --json */
  int gpu;              /* watch --gpu, -1: every GPU */
  hr_request req;       /* policy get/set */
} ctl_cmd;

static int status_parse(int argc, char **argv, ctl_cmd *cmd)
{
  int i;
  for(i = 0; i < argc; i++) {
    if(!strcmp(argv[i], "--pretty") || !strcmp(argv[i], "-p"))
      cmd->pretty = 1;
    else if(!strcmp(argv[i], "--summary"))
      cmd->summary = 1;
    else
      return usage_error("status: unknown argument '%s'", argv[i]);
  }
  return EXIT_OK;
}

static int cmd_status(hr__conn *c, const ctl_cmd *cmd)
{
  hr_request req;
  hr_reply rep;
  int rc;

  memset(&req, 0, sizeof(req));
  req.type = HR_MSG_STATUS;
  req.u.status.detail = cmd->summary ? HR_STATUS_SUMMARY : HR_STATUS_FULL;
  rc = request(c, &req, &rep, "status");
  if(rc)
    return rc;
  /* Said on stderr too, so that a script reading the JSON from stdout
   * leaves a trace in its log when it did not get the lists. */
  if(rep.u.status.truncated)
    fprintf(stderr, "headroomctl: status truncated: the full status of %d "
            "clients would pass the %d-byte message limit; the daemon sent "
            "the summary (budgets and counts, no lists)\n",
            rep.u.status.client_count, HR_PROTO_MAX_LINE);
  if(cmd->pretty) {
    print_pretty(&rep.u.status);
    fflush(stdout);
  }
  else {
    rc = print_json(&rep);
  }
  hr_reply_free(&rep);
  return rc;
}

static int metrics_parse(int argc, char **argv, ctl_cmd *cmd)
{
  int i;
  for(i = 0; i < argc; i++) {
    if(!strcmp(argv[i], "--json"))
      cmd->json = 1;
    else
      return usage_error("metrics: unknown argument '%s'", argv[i]);
  }
  return EXIT_OK;
}

static int cmd_metrics(hr__conn *c, const ctl_cmd *cmd)
{
  hr_request req;
  hr_reply rep;
  int rc;

  memset(&req, 0, sizeof(req));
  req.type = HR_MSG_METRICS;
  rc = request(c, &req, &rep, "metrics");
  if(rc)
    return rc;
  if(cmd->json)
    rc = print_json(&rep);
  else
    print_prometheus(&rep.u.metrics);
  hr_reply_free(&rep);
  return rc;
}

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
      return usage_error("watch: unknown argument '%s'", argv[i]);
    if(hr__parse_int(v, 0, HR_MAX_GPUS - 1, &cmd->gpu))
      return usage_error("watch: --gpu wants 0..63, not '%s'", v);
  }
  return EXIT_OK;
}

static int cmd_watch(hr__conn *c, const ctl_cmd *cmd)
{
  hr_request req;
  hr_reply rep;
  int rc, err;

  if(watch_signals(c))
    return fail("watch", HR_ENOMEM, NULL);
  memset(&req, 0, sizeof(req));
  req.type = HR_MSG_SUBSCRIBE;
  req.u.subscribe.gpu = cmd->gpu;
  rc = request(c, &req, &rep, "subscribe");
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
      print_json(&rep);
    hr_reply_free(&rep);
  }
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
    return usage_error("policy set: '%s' is not KEY=VALUE", arg);
  klen = (size_t)(eq - arg);
  v = eq + 1;
  for(i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
    if(strlen(keys[i].key) == klen && !strncmp(arg, keys[i].key, klen))
      break;
  }
  if(i == sizeof(keys) / sizeof(keys[0]))
    return usage_error("policy set: unknown key in '%s' (min_headroom, "
                       "max_headroom, min_grid, incident_raise)", arg);
  if(keys[i].bit == HR_POLICY_INCIDENT_RAISE) {
    if(!strcmp(v, "yes") || !strcmp(v, "true") || !strcmp(v, "1"))
      n = 1;
    else if(!strcmp(v, "no") || !strcmp(v, "false") || !strcmp(v, "0"))
      n = 0;
    else
      return usage_error("policy set: incident_raise wants yes or no, not "
                         "'%s'", v);
    ps->policy.incident_raise = n;
  }
  else {
    if(hr__parse_int(v, 0, HR_MAX_SMS, &n))
      return usage_error("policy set: '%s' wants a number of SMs", arg);
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

static int policy_parse(int argc, char **argv, hr_request *req)
{
  int i, rc;
  memset(req, 0, sizeof(*req));
  if(argc < 1)
    return usage_error("policy: %s", "expected 'get' or 'set KEY=VALUE...'");
  if(!strcmp(argv[0], "get")) {
    if(argc > 1)
      return usage_error("policy get: unknown argument '%s'", argv[1]);
    req->type = HR_MSG_POLICY_GET;
    return EXIT_OK;
  }
  if(strcmp(argv[0], "set"))
    return usage_error("policy: unknown subcommand '%s'", argv[0]);
  if(argc < 2)
    return usage_error("policy set: %s", "expected KEY=VALUE...");
  req->type = HR_MSG_POLICY_SET;
  for(i = 1; i < argc; i++) {
    rc = policy_arg(argv[i], &req->u.policy_set);
    if(rc)
      return rc;
  }
  return EXIT_OK;
}

static int cmd_policy(hr__conn *c, hr_request *req)
{
  hr_reply rep;
  int rc = request(c, req, &rep, req->type == HR_MSG_POLICY_GET ?
                   "policy get" : "policy set");
  if(rc)
    return rc;
  rc = print_json(&rep);
  hr_reply_free(&rep);
  return rc;
}

int main(int argc, char **argv)
{
  static const struct option opts[] = {
    {"socket", required_argument, NULL, 's'},
    {"timeout", required_argument, NULL, 't'},
    {"help", no_argument, NULL, 'h'},
    {"version", no_argument, NULL, 'V'},
    {NULL, 0, NULL, 0}
  };
  const char *path = NULL, *name;
  ctl_cmd cmd;
  hr__conn conn;
  int opt, rc;

  opterr = 0;
  while((opt = getopt_long(argc, argv, "+s:t:hV", opts, NULL)) != -1) {
    switch(opt) {
    case 's':
      path = optarg;
      break;
    case 't':
      if(hr__parse_int(optarg, 1, 3600 * 1000, &timeout_ms))
        return usage_error("--timeout wants milliseconds, not '%s'", optarg);
      break;
    case 'h':
      fputs(usage_text, stdout);
      return EXIT_OK;
    case 'V':
      printf("headroomctl %s (protocol %d)\n", HR_VERSION_STRING,
             HR_PROTO_VERSION);
      return EXIT_OK;
    default:
      return usage_error("unknown or incomplete option '%s'",
                         argv[optind - 1]);
    }
  }
  if(optind >= argc)
    return usage_error("%s", "no command (status, metrics, watch, policy)");
  memset(&cmd, 0, sizeof(cmd));
  cmd.gpu = -1;
  name = argv[optind++];
  if(!strcmp(name, "status")) {
    cmd.kind = CMD_STATUS;
    rc = status_parse(argc - optind, argv + optind, &cmd);
  }
  else if(!strcmp(name, "metrics")) {
    cmd.kind = CMD_METRICS;
    rc = metrics_parse(argc - optind, argv + optind, &cmd);
  }
  else if(!strcmp(name, "watch")) {
    cmd.kind = CMD_WATCH;
    rc = watch_parse(argc - optind, argv + optind, &cmd);
  }
  else if(!strcmp(name, "policy")) {
    cmd.kind = CMD_POLICY;
    rc = policy_parse(argc - optind, argv + optind, &cmd.req);
  }
  else {
    rc = usage_error("unknown command '%s'", name);
  }
  if(rc)
    return rc;
  if(!path) {
    path = getenv(HR_ENV_SOCKET);
    if(!path || !*path)
      path = HR_DEFAULT_SOCKET;
  }
  signal(SIGPIPE, SIG_IGN);

  rc = open_conn(&conn, path);
  if(!rc) {
    if(cmd.kind == CMD_STATUS)
      rc = cmd_status(&conn, &cmd);
    else if(cmd.kind == CMD_METRICS)
      rc = cmd_metrics(&conn, &cmd);
    else if(cmd.kind == CMD_WATCH)
      rc = cmd_watch(&conn, &cmd);
    else
      rc = cmd_policy(&conn, &cmd.req);
  }
  hr__conn_free(&conn);
  return rc;
}
