/*
 * config.h: headroomd's configuration: defaults, the config file, flags.
 *
 * The file is `key = value` lines with `#` comments (docs/config.md lists
 * every key). A configuration is built in three layers, each overriding
 * the one before: the embedded defaults, the file, the command-line flags.
 * Every value, from the file or a flag, goes through one setter, so a flag
 * is checked exactly like the key it overrides. Errors name their origin:
 * "FILE:LINE: message" for the file, "--flag: message" for a flag.
 *
 * Building is all or nothing: on error the output is left unusable and the
 * caller keeps whatever configuration it had (SIGHUP relies on that).
 */
#ifndef HR_DAEMON_CONFIG_H
#define HR_DAEMON_CONFIG_H

#include <stddef.h>
#include <sys/un.h>

#include "hr_proto.h"
#include "log.h"

#define HR__DEFAULT_CONFIG "/etc/headroom/headroomd.conf"
#define HR__DEFAULT_STATE_DIR "/var/lib/headroom"
#define HR__DEFAULT_SOCKET_MODE 0660
#define HR__DEFAULT_GPUS 8
#define HR__DEFAULT_MAX_CLIENTS 1024
#define HR__DEFAULT_MAX_COMMS 64
#define HR__DEFAULT_MAX_LEASES 16
#define HR__DEFAULT_WRITE_QUEUE_MAX (1024 * 1024)
#define HR__DEFAULT_MSG_RATE 1000     /* messages a second, per client */
#define HR__DEFAULT_MSG_BURST 500     /* ... and at once */
/* Seconds between two raises of one GPU by one uid's barrier timeouts. */
#define HR__DEFAULT_RAISE_INTERVAL 60
#define HR__RAISE_INTERVAL_LIMIT 86400

/* A config file larger than this is refused: it cannot be a real one. */
#define HR__CONFIG_FILE_MAX (1024 * 1024)
#define HR__CONFIG_PATH_MAX 4096
#define HR__CONFIG_ERR_MAX 512
/* sun_path's size: the socket path, '\0' included, must fit. */
#define HR__SOCKET_PATH_MAX ((int)sizeof(((struct sockaddr_un *)0)->sun_path))

typedef enum hr__topology_mode {
  HR_TOPOLOGY_AUTO = 0,   /* CUDA, else the config's gpus, else default */
  HR_TOPOLOGY_CUDA,       /* CUDA or fail */
  HR_TOPOLOGY_CONFIG,     /* `gpus` and `sms` from the file */
  HR_TOPOLOGY_DEFAULT     /* the embedded 8 x 132 SMs */
} hr__topology_mode;

const char *hr__topology_mode_name(hr__topology_mode mode);

/* Where a key's value came from: 0 default, > 0 a line of the file,
 * HR__FROM_FLAG a command-line flag. */
#define HR__FROM_FLAG (-1)

typedef enum hr__config_key {
  HR_KEY_SOCKET = 0,
  HR_KEY_SOCKET_MODE,
  HR_KEY_OPERATOR_GROUP,
  HR_KEY_STATE_DIR,
  HR_KEY_LOG_LEVEL,
  HR_KEY_TOPOLOGY,
  HR_KEY_GPUS,
  HR_KEY_SMS,
  HR_KEY_MIN_HEADROOM,
  HR_KEY_MAX_HEADROOM,
  HR_KEY_MIN_GRID,
  HR_KEY_INCIDENT_RAISE,
  HR_KEY_INCIDENT_RAISE_INTERVAL,
  HR_KEY_MAX_CLIENTS,
  HR_KEY_MAX_COMMS_PER_CLIENT,
  HR_KEY_MAX_LEASES_PER_CLIENT,
  HR_KEY_WRITE_QUEUE_MAX,
  HR_KEY_MAX_MESSAGES_PER_SECOND,
  HR_KEY_MAX_MESSAGE_BURST,
  HR_KEY_CALIBRATION,
  HR_KEY_PARTITION_IGNORE_COSCHEDULING,
  HR_KEY_COUNT
} hr__config_key;

/* The name of a key in the file ("socket_mode"); NULL when out of range. */
const char *hr__config_key_name(hr__config_key key);

typedef struct hr__config {
  char socket[HR__SOCKET_PATH_MAX];
  unsigned socket_mode;             /* permission bits of the socket file */
  char operator_group[HR_NAME_MAX]; /* group name or number; "" = root only */
  char state_dir[HR__CONFIG_PATH_MAX];
  hr__log_level log_level;
  hr__topology_mode topology;
  int gpus;                         /* 0 = not set */
  int sms;                          /* SMs of each GPU in the config */
  int gpu_sms[HR_MAX_GPUS];         /* gpu.N.sms; 0 = use `sms` */
  hr_policy policy;
  int incident_raise_interval;      /* seconds; 0: no limit */
  int max_clients;
  int max_comms_per_client;
  int max_leases_per_client;
  size_t write_queue_max;           /* bytes queued to one client */
  int max_messages_per_second;      /* per client; 0 = no limit */
  int max_message_burst;            /* per client, at once */
  /* The calibration file; "" = <state_dir>/calibration.json when it
   * exists (docs/calibration.md). */
  char calibration[HR__CONFIG_PATH_MAX];
  /* 1: partition budgets in the fine steps a split ignoring SM
   * co-scheduling allows (2 SMs on H200, not 8), for clients that split
   * with CU_DEV_SM_RESOURCE_SPLIT_IGNORE_SM_COSCHEDULING. Read at start. */
  int partition_ignore_coscheduling;

  /* Provenance, for error messages and for `topology = auto`. */
  char file[HR__CONFIG_PATH_MAX];   /* the file read, "" when none */
  int from[HR_KEY_COUNT];           /* see HR__FROM_FLAG */
  int gpu_sms_from[HR_MAX_GPUS];
} hr__config;

/* The flags that override the file; NULL fields were not given. */
typedef struct hr__config_flags {
  const char *config;               /* NULL: HR__DEFAULT_CONFIG */
  const char *socket;
  const char *state_dir;
  const char *log_level;
  const char *topology;
} hr__config_flags;

/* The embedded defaults, no file and no flag. */
void hr__config_default(hr__config *cfg);

/* Set `key` (a file key such as "gpu.3.sms") from its text form, recording
 * `from` as its origin. HR_EINVAL with the reason in `why`, without the
 * origin prefix (the caller knows the line or the flag). */
int hr__config_set(hr__config *cfg, const char *key, const char *value,
                   int from, char *why, size_t n);

/* Parse config text (`len` bytes) named `file` on top of `cfg`. Errors:
 * "FILE:LINE: message" in `err`, HR_EINVAL. */
int hr__config_parse(hr__config *cfg, const char *text, size_t len,
                     const char *file, char *err, size_t n);

/* Read and parse the file at `path`. A missing file is HR_ENOTFOUND with
 * `cfg` untouched; the caller decides whether that is an error. */
int hr__config_load(hr__config *cfg, const char *path, char *err, size_t n);

/* Checks between keys (gpu.N.sms against gpus, topology = config without
 * gpus, the policy as a whole), made once every layer is in. */
int hr__config_check(const hr__config *cfg, char *err, size_t n);

/* The policy against the GPUs it will run on (hr__policy_validate_for):
 * "FILE:LINE: why" naming the key blamed, HR_EINVAL. Made once the
 * topology is known: at start, on reload, by --check-config. */
int hr__config_check_policy(const hr__config *cfg, const hr_topology *topo,
                            char *err, size_t n);

/* Defaults, then the file (flags->config or the default path; a missing
 * default file is fine, a missing explicit one is an error), then the
 * flags, then the checks. */
int hr__config_build(hr__config *cfg, const hr__config_flags *flags,
                     char *err, size_t n);

#endif /* HR_DAEMON_CONFIG_H */
