/*
 * hr_proto.h: the headroom wire protocol as plain C structs.
 *
 * One JSON object per line ('\n'-terminated) over a Unix stream socket;
 * PROTOCOL.md beside this file is the specification. This module is the
 * only place that builds or parses JSON: the daemon and the client library
 * both go through it, so the two sides cannot drift apart.
 *
 * Direction matters: a client sends requests (hr_request) and receives
 * replies and events (hr_reply); the daemon the other way round. Every
 * decoder validates types, ranges and required fields and reports the
 * first problem as an hr_proto_error whose code is the wire error code.
 */
#ifndef HR_PROTO_H
#define HR_PROTO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hr_types.h"

#define HR_PROTO_VERSION 1          /* the version this build speaks best */
#define HR_PROTO_VERSION_MIN 1      /* the oldest it still speaks */
#define HR_PROTO_MAX_LINE 65536     /* bytes in one message, '\n' included */
#define HR_PROTO_MAX_ID 9007199254740991LL /* 2^53 - 1: exact in a double */

/* Ranges every decoder enforces (inclusive). */
#define HR_MAX_GPUS 64
#define HR_MAX_SMS 1024
#define HR_MAX_CTAS 64              /* NCCL's MAXCHANNELS */
#define HR_MAX_CGA 8
#define HR_MAX_CONCURRENT 64
#define HR_MAX_VERSIONS 8
#define HR_NAME_MAX 64              /* names, '\0' included */
#define HR_MESSAGE_MAX 256          /* free text, '\0' included */

/* ---- Message types ----------------------------------------------------- */

typedef enum hr_msg_type {
  HR_MSG_NONE = 0,
  HR_MSG_HELLO,
  HR_MSG_REGISTER_COMM,
  HR_MSG_UNREGISTER_COMM,
  HR_MSG_LEASE,
  HR_MSG_RELEASE,
  HR_MSG_REPORT,
  HR_MSG_STATUS,
  HR_MSG_SUBSCRIBE,
  HR_MSG_POLICY_GET,
  HR_MSG_POLICY_SET,
  HR_MSG_METRICS,
  HR_MSG_RAISES_GET,                /* operators: learned raises, per GPU */
  HR_MSG_RAISES_CLEAR,              /* operators: forget them */
  /* daemon-to-client only */
  HR_MSG_BUDGET,                    /* event: a GPU's budget changed */
  HR_MSG_SHUTDOWN,                  /* event: the daemon is stopping */
  HR_MSG_ERROR,                     /* reply: a request failed */
  HR_MSG_COUNT
} hr_msg_type;

/* The last request type: requests are HR_MSG_HELLO..HR_MSG_LAST_REQUEST. */
#define HR_MSG_LAST_REQUEST HR_MSG_RAISES_CLEAR

/* Wire name of a type ("register_comm"); NULL when out of range. */
const char *hr_msg_type_name(hr_msg_type type);

/* ---- Wire errors --------------------------------------------------------
 * Error replies carry a code string; each maps to one HR_E* value. */
typedef enum hr_wire_error {
  HR_WERR_BAD_REQUEST = 0,          /* invalid JSON, type, field or range */
  HR_WERR_HELLO_REQUIRED,           /* request before hello */
  HR_WERR_UNSUPPORTED_VERSION,      /* no version in common */
  HR_WERR_UNKNOWN_TYPE,             /* "type" names no message */
  HR_WERR_NOT_FOUND,                /* no such GPU, footprint or lease */
  HR_WERR_PERMISSION_DENIED,        /* operator-only request */
  HR_WERR_LIMIT_EXCEEDED,           /* a per-client limit */
  HR_WERR_TOO_LARGE,                /* message over HR_PROTO_MAX_LINE */
  HR_WERR_UNSUPPORTED,              /* valid but not supported (a mode) */
  HR_WERR_SHUTTING_DOWN,            /* daemon draining */
  HR_WERR_INTERNAL,                 /* daemon bug or resource failure */
  HR_WERR_INVALID_VALUE,            /* well formed, value refused (policy) */
  HR_WERR_COUNT
} hr_wire_error;

const char *hr_wire_error_name(hr_wire_error code); /* "bad_request" */
int hr_wire_error_from_name(const char *name, hr_wire_error *out);
int hr_wire_error_to_hr(hr_wire_error code);        /* -> HR_E* */

/* Filled by decoders on failure: the code to send back and why. */
typedef struct hr_proto_error {
  hr_wire_error code;
  char message[HR_MESSAGE_MAX];
} hr_proto_error;

/* ---- Shared payload structs -------------------------------------------- */

typedef struct hr_gpu_info {
  int index;                        /* CUDA device index */
  int sms;                          /* multiprocessor count */
  char name[HR_NAME_MAX];           /* "NVIDIA H200", or "" */
} hr_gpu_info;

typedef enum hr_topology_source {
  HR_TOPO_DEFAULT = 0,              /* embedded: 8 x 132 SMs */
  HR_TOPO_CONFIG,                   /* the config file */
  HR_TOPO_CUDA,                     /* read from the CUDA driver */
  HR_TOPO_COUNT
} hr_topology_source;

const char *hr_topology_source_name(hr_topology_source s);

/* Where a GPU's headroom came from: the policy's theory (cluster x comm
 * CTAs), or a safe headroom measured on the node by headroom-calibrate
 * (docs/calibration.md) for the NCCL budget the policy hands out. */
typedef enum hr_budget_source {
  HR_SOURCE_THEORY = 0,
  HR_SOURCE_CALIBRATED,
  HR_SOURCE_COUNT
} hr_budget_source;

const char *hr_budget_source_name(hr_budget_source s); /* "calibrated" */

typedef struct hr_topology {
  hr_topology_source source;
  int n_gpus;
  hr_gpu_info gpus[HR_MAX_GPUS];
} hr_topology;

/* The operator's policy. Applies to every GPU of the node. */
typedef struct hr_policy {
  int min_headroom;                 /* floor, SMs (rounded up to cluster) */
  int max_headroom;                 /* ceiling, SMs */
  int min_grid;                     /* never leave the mega kernel less */
  int incident_raise;               /* 1: a barrier timeout raises headroom */
} hr_policy;

/* Which fields of an hr_policy a policy_set carries. */
enum {
  HR_POLICY_MIN_HEADROOM = 1 << 0,
  HR_POLICY_MAX_HEADROOM = 1 << 1,
  HR_POLICY_MIN_GRID = 1 << 2,
  HR_POLICY_INCIDENT_RAISE = 1 << 3
};

/* ---- Requests (client -> daemon) --------------------------------------- */

typedef struct hr_req_hello {
  int n_versions;
  int versions[HR_MAX_VERSIONS];    /* protocol versions the client speaks */
  char client[HR_NAME_MAX];         /* free-form name for status ("" ok) */
  int64_t degraded_ms;              /* ran this long without a daemon just
                                     * before this connection; 0: did not */
} hr_req_hello;

typedef struct hr_req_register_comm {
  int gpu;
  char name[HR_NAME_MAX];
  int ctas;                         /* CTAs per collective, 1..64 */
  int cga;                          /* CGA cluster size, 1..8 */
  int concurrent;                   /* collectives in flight, 1..64 */
} hr_req_register_comm;

typedef struct hr_req_unregister_comm {
  int64_t comm;                     /* id from the register_comm reply */
} hr_req_unregister_comm;

typedef struct hr_req_lease {
  int gpu;
  int cluster;                      /* 1, 2, 4 or 8 */
  hr_mode mode;
} hr_req_lease;

typedef struct hr_req_release {
  int64_t lease;
} hr_req_release;

typedef struct hr_req_report {
  int gpu;
  hr_incident_kind kind;
  int64_t lease;                    /* 0: not tied to a lease */
  hr_incident_detail detail;        /* -1 fields were absent */
  char message[HR_MESSAGE_MAX];
} hr_req_report;

typedef struct hr_req_subscribe {
  int gpu;                          /* -1: every GPU */
} hr_req_subscribe;

/* How much a status reply holds (§5.6): everything, or the budgets and
 * the counts without a list, whose size does not grow with the clients. */
typedef enum hr_status_detail {
  HR_STATUS_FULL = 0,               /* every client, footprint, lease and
                                     * recent incident, listed */
  HR_STATUS_SUMMARY,                /* budgets and counts only */
  HR_STATUS_DETAIL_COUNT
} hr_status_detail;

const char *hr_status_detail_name(hr_status_detail detail); /* "summary" */

typedef struct hr_req_status {
  hr_status_detail detail;          /* HR_STATUS_FULL: left out */
} hr_req_status;

typedef struct hr_req_policy_set {
  unsigned fields;                  /* HR_POLICY_* bits present */
  hr_policy policy;
} hr_req_policy_set;

typedef struct hr_req_raises_clear {
  int gpu;                          /* -1: every GPU */
} hr_req_raises_clear;

typedef struct hr_request {
  hr_msg_type type;
  int64_t id;                       /* 0..HR_PROTO_MAX_ID, echoed */
  union {
    hr_req_hello hello;
    hr_req_register_comm register_comm;
    hr_req_unregister_comm unregister_comm;
    hr_req_lease lease;
    hr_req_release release;
    hr_req_report report;
    hr_req_subscribe subscribe;
    hr_req_status status;
    hr_req_policy_set policy_set;
    hr_req_raises_clear raises_clear;
    /* policy_get, metrics and raises_get carry nothing */
  } u;
} hr_request;

/* ---- Status (the reply to "status") ------------------------------------ */

typedef struct hr_status_client {
  int64_t id;
  int pid, uid, gid;                /* from SO_PEERCRED */
  char name[HR_NAME_MAX];
  bool operator_;                   /* may set policy */
  bool subscribed;
} hr_status_client;

typedef struct hr_status_comm {
  int64_t id, client;
  char name[HR_NAME_MAX];
  int ctas, cga, concurrent;
} hr_status_comm;

typedef struct hr_status_lease {
  int64_t id, client;
  int cluster;
  hr_mode mode;
} hr_status_lease;

typedef struct hr_status_incident {
  int64_t id, client, lease;
  int64_t time_ms;                  /* Unix time, milliseconds */
  hr_incident_kind kind;
  hr_incident_detail detail;
  char message[HR_MESSAGE_MAX];
} hr_status_incident;

typedef struct hr_status_gpu {
  hr_gpu_info info;
  hr_budget budget;                 /* mode field: HR_MODE_HEADROOM */
  hr_budget_source budget_source;   /* what decided budget.headroom */
  int comm_ctas;                    /* CTAs in flight, all footprints */
  int raised;                       /* headroom added by incidents */
  int n_clients;                    /* clients holding state on this GPU */
  /* What the GPU holds, counted, in either kind of status: a decoder
   * fills them from the lists of a full one. */
  int comm_count;                   /* footprints */
  int lease_count[HR_MODE_COUNT];   /* leases by mode */
  int incident_count;               /* incidents kept (at most 32) */
  /* The lists: full status only (a summary has none: 0 and NULL). */
  int n_comms, n_leases, n_incidents;
  hr_status_comm *comms;
  hr_status_lease *leases;
  hr_status_incident *incidents;    /* most recent last, capped */
} hr_status_gpu;

typedef struct hr_status {
  char daemon[HR_NAME_MAX];         /* "headroomd 0.1.0" */
  int64_t uptime_ms;
  int64_t requests;                 /* served since start */
  hr_topology_source topology_source;
  hr_policy policy;
  hr_status_detail detail;
  /* A summary sent in answer to a full request, because the full status
   * would have passed HR_PROTO_MAX_LINE. Summary only. */
  bool truncated;
  int client_count;                 /* connected clients, in either kind */
  int n_clients;                    /* listed: full status only */
  hr_status_client *clients;
  int n_gpus;
  hr_status_gpu *gpus;
} hr_status;

/* Free the arrays of a status filled by hr_proto_decode_reply (or built by
 * the daemon with malloc); the struct itself is the caller's. */
void hr_status_free(hr_status *status);

/* ---- Metrics (the reply to "metrics") ---------------------------------- *
 * Counters since the daemon started and gauges now, with no per-client
 * list: the reply stays a few KiB whatever the number of clients. */

/* Request latency buckets: upper bounds in microseconds; a last bucket,
 * without a bound (+Inf), holds the rest. */
#define HR_METRICS_BUCKETS 12
#define HR_METRICS_BUCKET_BOUNDS_US \
  { 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 25000 }

typedef struct hr_metrics_gpu {
  int index, sms;
  int headroom, grid;               /* of the headroom-mode budget */
  uint32_t epoch;
  int nccl_max_ctas;
  /* The budget's partition fields (0: partition mode unsupported here). */
  int partition_granularity, partition_comm_sms, partition_nccl_max_ctas;
  int clients;                      /* clients holding state here */
  int comms;                        /* footprints */
  int comm_ctas;                    /* CTAs in flight over all footprints */
  int leases[HR_MODE_COUNT];        /* leases by mode */
  int raised;                       /* headroom added by incidents */
  hr_budget_source budget_source;   /* as in status */
  int64_t incidents[HR_INCIDENT_COUNT]; /* reported since the start, by kind */
} hr_metrics_gpu;

typedef struct hr_metrics {
  char daemon[HR_NAME_MAX];         /* "headroomd 0.1.0" */
  int64_t uptime_ms;
  int clients;                      /* connected now */
  int64_t clients_resumed;          /* hellos that had run degraded */
  int64_t client_degraded_ms;       /* the degraded_ms of those, summed */
  /* Lines served, by the request type they named; [HR_MSG_NONE] counts
   * the lines that did not decode ("invalid" on the wire). Only request
   * types are used. */
  int64_t requests[HR_MSG_COUNT];
  int64_t errors[HR_WERR_COUNT];    /* error replies, by code */
  int64_t latency[HR_METRICS_BUCKETS]; /* per bucket, not cumulative */
  int64_t latency_count;            /* the sum of latency[] */
  int64_t latency_sum_us;
  int n_gpus;
  hr_metrics_gpu gpus[HR_MAX_GPUS];
} hr_metrics;

/* ---- Replies and events (daemon -> client) ----------------------------- */

typedef struct hr_rep_hello {
  int version;                      /* the chosen protocol version */
  char daemon[HR_NAME_MAX];         /* "headroomd 0.1.0" */
  int64_t client;                   /* this connection's client id */
  hr_topology topology;
} hr_rep_hello;

typedef struct hr_rep_register_comm {
  int64_t comm;
} hr_rep_register_comm;

typedef struct hr_rep_lease {
  int64_t lease;
  hr_budget budget;
} hr_rep_lease;

typedef struct hr_rep_report {
  int64_t incident;
  hr_budget budget;                 /* the GPU's budget after the report */
} hr_rep_report;

/* One GPU's learned raise: the headroom barrier timeouts added to its
 * floor, and the latest raise (PROTOCOL.md §5.10). */
typedef struct hr_raise {
  int gpu;
  int raised;                       /* SMs added to the floor */
  int headroom;                     /* the GPU's headroom now */
  int raises;                       /* timeouts that raised it since the
                                     * last clear */
  int64_t last_time_ms;             /* Unix ms of the latest; 0: none */
  int last_uid;                     /* its reporter's uid; -1: unknown */
  int64_t last_incident;            /* its incident id; 0: none */
} hr_raise;

typedef struct hr_rep_raises {
  int cleared;                      /* raises_clear: GPUs it cleared */
  int n_gpus;
  hr_raise gpus[HR_MAX_GPUS];       /* every GPU of the node, in order */
} hr_rep_raises;

typedef struct hr_reply {
  hr_msg_type type;                 /* type of the request, or an event */
  int64_t id;                       /* echoed; -1 for events */
  union {
    hr_rep_hello hello;
    hr_rep_register_comm register_comm;
    hr_rep_lease lease;
    hr_rep_report report;
    hr_status status;               /* owns arrays: hr_status_free */
    hr_metrics metrics;             /* metrics */
    hr_policy policy;               /* policy_get and policy_set */
    hr_rep_raises raises;           /* raises_get and raises_clear */
    hr_budget budget;               /* HR_MSG_BUDGET event */
    hr_proto_error error;           /* HR_MSG_ERROR */
    char shutdown_reason[HR_MESSAGE_MAX]; /* HR_MSG_SHUTDOWN event */
    /* unregister_comm, release and subscribe replies carry nothing */
  } u;
} hr_reply;

/* Free what a decoded reply owns (only status does). */
void hr_reply_free(hr_reply *reply);

/* ---- Output buffer ----------------------------------------------------- */

/* A capped, growable byte buffer: encoders append one line ('\n' included)
 * and fail with HR_ETOOLARGE rather than exceed `cap`. */
typedef struct hr_buf {
  char *data;
  size_t len, size, cap;
} hr_buf;

void hr_buf_init(hr_buf *b, size_t cap);
void hr_buf_free(hr_buf *b);
void hr_buf_reset(hr_buf *b);
int hr_buf_append(hr_buf *b, const void *data, size_t len);

/* ---- Codec ------------------------------------------------------------- */

/* Encode one message as a JSON line appended to `out`. Returns HR_OK,
 * HR_EINVAL for a struct that violates the ranges above, HR_ENOMEM, or
 * HR_ETOOLARGE when the line would pass HR_PROTO_MAX_LINE. */
int hr_proto_encode_request(const hr_request *req, hr_buf *out);
int hr_proto_encode_reply(const hr_reply *rep, hr_buf *out);

/* Decode one line (without its '\n'; `len` bytes, need not be
 * '\0'-terminated). Returns HR_OK, or HR_EPROTO with `err` filled. A request
 * that fails after its id was read sets `req->id` so the error reply can
 * echo it; otherwise `req->id` is -1. */
int hr_proto_decode_request(const char *line, size_t len, hr_request *req,
                            hr_proto_error *err);
int hr_proto_decode_reply(const char *line, size_t len, hr_reply *rep,
                          hr_proto_error *err);

/* Convenience for the daemon: encode an error reply for request `id`
 * (-1: no id known). */
int hr_proto_encode_error(int64_t id, hr_wire_error code, const char *message,
                          hr_buf *out);

/* The byte offset of the first control character in the name s[0..len)
 * (C0, DEL, or C1 as UTF-8: U+0080..U+009F), or -1 when there is none.
 * Names are shown to operators (status, the log, headroomctl): the wire
 * refuses raw control bytes, but an escape such as \u001b decodes to ESC,
 * so names are checked after decoding. Free text (messages) may hold
 * them; whoever prints it escapes it. */
long hr_proto_name_control(const char *s, size_t len);

/* Name tables shared with headroom.h. */
int hr_mode_from_name(const char *name, hr_mode *out);
int hr_incident_kind_from_name(const char *name, hr_incident_kind *out);

#endif /* HR_PROTO_H */
