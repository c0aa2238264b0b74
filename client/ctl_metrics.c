/*
 * ctl_metrics.c: `headroomctl metrics`, in the Prometheus text format or
 * as JSON.
 */
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "ctl.h"

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
  for(i = HR_MSG_HELLO; i <= HR_MSG_LAST_REQUEST; i++)
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

static void print_prometheus(const ctl_cmd *cmd, const hr_reply *rep)
{
  (void)cmd;
  print_daemon_metrics(&rep->u.metrics);
  print_latency(&rep->u.metrics);
  print_gpu_metrics(&rep->u.metrics);
}

static int metrics_parse(int argc, char **argv, ctl_cmd *cmd)
{
  int i;
  for(i = 0; i < argc; i++) {
    if(!strcmp(argv[i], "--json"))
      cmd->json = 1;
    else
      return ctl_usage_error("metrics: unknown argument '%s'", argv[i]);
  }
  return EXIT_OK;
}

static int metrics_run(hr__conn *c, ctl_cmd *cmd)
{
  hr_request req;
  hr_reply rep;
  int rc;

  memset(&req, 0, sizeof(req));
  req.type = HR_MSG_METRICS;
  rc = ctl_request(c, &req, &rep, "metrics");
  if(rc)
    return rc;
  return ctl_print_reply(cmd, &rep, print_prometheus);
}


const ctl_command ctl_metrics_command = {
  "metrics", metrics_parse, metrics_run
};
