/*
 * config.c: the config file parser, value checks and layering (config.h).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "policy.h"

static const char *const key_names[HR_KEY_COUNT] = {
  [HR_KEY_SOCKET] = "socket",
  [HR_KEY_SOCKET_MODE] = "socket_mode",
  [HR_KEY_OPERATOR_GROUP] = "operator_group",
  [HR_KEY_STATE_DIR] = "state_dir",
  [HR_KEY_LOG_LEVEL] = "log_level",
  [HR_KEY_TOPOLOGY] = "topology",
  [HR_KEY_GPUS] = "gpus",
  [HR_KEY_SMS] = "sms",
  [HR_KEY_MIN_HEADROOM] = "min_headroom",
  [HR_KEY_MAX_HEADROOM] = "max_headroom",
  [HR_KEY_MIN_GRID] = "min_grid",
  [HR_KEY_INCIDENT_RAISE] = "incident_raise",
  [HR_KEY_INCIDENT_RAISE_INTERVAL] = "incident_raise_interval",
  [HR_KEY_MAX_CLIENTS] = "max_clients",
  [HR_KEY_MAX_COMMS_PER_CLIENT] = "max_comms_per_client",
  [HR_KEY_MAX_LEASES_PER_CLIENT] = "max_leases_per_client",
  [HR_KEY_WRITE_QUEUE_MAX] = "write_queue_max",
  [HR_KEY_MAX_MESSAGES_PER_SECOND] = "max_messages_per_second",
  [HR_KEY_MAX_MESSAGE_BURST] = "max_message_burst",
  [HR_KEY_CALIBRATION] = "calibration",
  [HR_KEY_PARTITION_IGNORE_COSCHEDULING] = "partition_ignore_coscheduling",
};

static const char *const topology_names[] = {
  [HR_TOPOLOGY_AUTO] = "auto",
  [HR_TOPOLOGY_CUDA] = "cuda",
  [HR_TOPOLOGY_CONFIG] = "config",
  [HR_TOPOLOGY_DEFAULT] = "default",
};

/* Limits on the limits: generous, but a typo of three extra zeros is
 * caught before it becomes a daemon that accepts a million sockets. */
#define MAX_CLIENTS_LIMIT 65536
#define MAX_PER_CLIENT_LIMIT 4096
#define WRITE_QUEUE_MIN HR_PROTO_MAX_LINE /* one full reply must fit */
#define WRITE_QUEUE_LIMIT (1024L * 1024 * 1024)
#define LINE_MAX_LEN 4096
#define MSG_RATE_LIMIT 1000000

const char *hr__config_key_name(hr__config_key key)
{
  if((int)key < 0 || key >= HR_KEY_COUNT)
    return NULL;
  return key_names[key];
}

const char *hr__topology_mode_name(hr__topology_mode mode)
{
  if((int)mode < 0 || mode > HR_TOPOLOGY_DEFAULT)
    return NULL;
  return topology_names[mode];
}

void hr__config_default(hr__config *cfg)
{
  memset(cfg, 0, sizeof(*cfg));
  snprintf(cfg->socket, sizeof(cfg->socket), "%s", HR_DEFAULT_SOCKET);
  cfg->socket_mode = HR__DEFAULT_SOCKET_MODE;
  snprintf(cfg->state_dir, sizeof(cfg->state_dir), "%s",
           HR__DEFAULT_STATE_DIR);
  cfg->log_level = HR_LOG_INFO;
  cfg->topology = HR_TOPOLOGY_AUTO;
  cfg->gpus = 0;
  cfg->sms = HR_POLICY_DEFAULT_SMS;
  hr__policy_default(&cfg->policy);
  cfg->incident_raise_interval = HR__DEFAULT_RAISE_INTERVAL;
  cfg->max_clients = HR__DEFAULT_MAX_CLIENTS;
  cfg->max_comms_per_client = HR__DEFAULT_MAX_COMMS;
  cfg->max_leases_per_client = HR__DEFAULT_MAX_LEASES;
  cfg->write_queue_max = HR__DEFAULT_WRITE_QUEUE_MAX;
  cfg->max_messages_per_second = HR__DEFAULT_MSG_RATE;
  cfg->max_message_burst = HR__DEFAULT_MSG_BURST;
}

/* Every failure here is an invalid config. */
#define fail(why, n, ...) hr__why(HR_EINVAL, why, n, __VA_ARGS__)

/* ---- value parsers ----------------------------------------------------- */

/* A plain decimal integer in [min, max]: digits only, so "1e3", " 12",
 * "+4" and "0x10" are all refused rather than half-understood. */
static int parse_int(const char *s, long min, long max, long *out)
{
  long v = 0;

  if(!*s || strlen(s) > 10)
    return HR_EINVAL;
  for(; *s; s++) {
    if(*s < '0' || *s > '9')
      return HR_EINVAL;
    v = v * 10 + (*s - '0');
  }
  if(v < min || v > max)
    return HR_EINVAL;
  *out = v;
  return HR_OK;
}

/* Bytes, with an optional K, M or G suffix (powers of 1024). */
static int parse_size(const char *s, long *out)
{
  char digits[16];
  size_t len = strlen(s);
  long v, mult = 1;

  if(len == 0 || len >= sizeof(digits))
    return HR_EINVAL;
  memcpy(digits, s, len + 1);
  switch(digits[len - 1]) {
  case 'K': case 'k': mult = 1024L; break;
  case 'M': case 'm': mult = 1024L * 1024; break;
  case 'G': case 'g': mult = 1024L * 1024 * 1024; break;
  default: break;
  }
  if(mult > 1)
    digits[len - 1] = '\0';
  if(parse_int(digits, 0, WRITE_QUEUE_LIMIT, &v))
    return HR_EINVAL;
  if(v > WRITE_QUEUE_LIMIT / mult)
    return HR_EINVAL;
  *out = v * mult;
  return HR_OK;
}

static int parse_octal_mode(const char *s, unsigned *out)
{
  unsigned v = 0;
  size_t len = strlen(s);

  if(len == 0 || len > 4)
    return HR_EINVAL;
  for(; *s; s++) {
    if(*s < '0' || *s > '7')
      return HR_EINVAL;
    v = v * 8 + (unsigned)(*s - '0');
  }
  if(v > 0777)
    return HR_EINVAL;
  *out = v;
  return HR_OK;
}

/* yes or no; true and false too, as operators write either. */
static int parse_yes_no(const char *s, int *out)
{
  if(!strcmp(s, "yes") || !strcmp(s, "true"))
    *out = 1;
  else if(!strcmp(s, "no") || !strcmp(s, "false"))
    *out = 0;
  else
    return HR_EINVAL;
  return HR_OK;
}

/* A group name as useradd accepts it, or a numeric gid. */
static int valid_group(const char *s)
{
  size_t len = strlen(s);

  if(len == 0 || len >= HR_NAME_MAX)
    return 0;
  if(s[0] == '-')
    return 0;
  for(; *s; s++) {
    char c = *s;
    if(!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
         (c >= '0' && c <= '9') || c == '_' || c == '-' || c == '.'))
      return 0;
  }
  return 1;
}

static int set_path(char *dst, size_t size, const char *value, char *why,
                    size_t n)
{
  const char *p;

  if(!*value)
    return fail(why, n, "empty path");
  for(p = value; *p; p++)
    if((unsigned char)*p < 0x20)
      return fail(why, n, "control character in path");
  if(strlen(value) >= size)
    return fail(why, n, "path longer than %zu bytes", size - 1);
  memcpy(dst, value, strlen(value) + 1);
  return HR_OK;
}

/* gpu.N.sms -> N, or -1 when `key` is not of that form. */
static int gpu_key_index(const char *key)
{
  const char *p;
  long idx;
  char digits[8];
  size_t len;

  if(strncmp(key, "gpu.", 4))
    return -1;
  p = strchr(key + 4, '.');
  if(!p || strcmp(p, ".sms"))
    return -1;
  len = (size_t)(p - (key + 4));
  if(len == 0 || len >= sizeof(digits))
    return -2;
  memcpy(digits, key + 4, len);
  digits[len] = '\0';
  if(parse_int(digits, 0, HR_MAX_GPUS - 1, &idx))
    return -2;
  if(len > 1 && digits[0] == '0')
    return -2; /* "gpu.01.sms" would be a second spelling of gpu.1 */
  return (int)idx;
}

static int find_key(const char *key)
{
  int k;

  for(k = 0; k < HR_KEY_COUNT; k++)
    if(!strcmp(key, key_names[k]))
      return k;
  return -1;
}

static int set_known(hr__config *cfg, hr__config_key k, const char *value,
                     char *why, size_t n)
{
  long v;
  int t;

  switch(k) {
  case HR_KEY_SOCKET:
    return set_path(cfg->socket, sizeof(cfg->socket), value, why, n);
  case HR_KEY_STATE_DIR:
    return set_path(cfg->state_dir, sizeof(cfg->state_dir), value, why, n);
  case HR_KEY_CALIBRATION:
    return set_path(cfg->calibration, sizeof(cfg->calibration), value, why,
                    n);
  case HR_KEY_SOCKET_MODE:
    if(parse_octal_mode(value, &cfg->socket_mode))
      return fail(why, n, "bad socket_mode '%s' (octal, 0000..0777)", value);
    return HR_OK;
  case HR_KEY_OPERATOR_GROUP:
    if(!valid_group(value))
      return fail(why, n, "bad operator_group '%s' (a group name or gid)",
                  value);
    snprintf(cfg->operator_group, sizeof(cfg->operator_group), "%s", value);
    return HR_OK;
  case HR_KEY_LOG_LEVEL: {
    hr__log_level l;
    if(hr__log_level_from_name(value, &l))
      return fail(why, n, "bad log_level '%s' "
                  "(err, warning, notice, info or debug)", value);
    cfg->log_level = l;
    return HR_OK;
  }
  case HR_KEY_TOPOLOGY:
    for(t = 0; t <= HR_TOPOLOGY_DEFAULT; t++) {
      if(!strcmp(value, topology_names[t])) {
        cfg->topology = (hr__topology_mode)t;
        return HR_OK;
      }
    }
    return fail(why, n, "bad topology '%s' (auto, cuda, config or default)",
                value);
  case HR_KEY_GPUS:
    if(parse_int(value, 1, HR_MAX_GPUS, &v))
      return fail(why, n, "bad gpus '%s' (1..%d)", value, HR_MAX_GPUS);
    cfg->gpus = (int)v;
    return HR_OK;
  case HR_KEY_SMS:
    if(parse_int(value, 1, HR_MAX_SMS, &v))
      return fail(why, n, "bad sms '%s' (1..%d)", value, HR_MAX_SMS);
    cfg->sms = (int)v;
    return HR_OK;
  case HR_KEY_MIN_HEADROOM:
    if(parse_int(value, HR__POLICY_MIN_FLOOR, HR_MAX_SMS, &v))
      return fail(why, n, "bad min_headroom '%s' (%d..%d; 0 leaves no SM "
                  "free, and one NCCL CTA beside the grid deadlocks it)",
                  value, HR__POLICY_MIN_FLOOR, HR_MAX_SMS);
    cfg->policy.min_headroom = (int)v;
    return HR_OK;
  case HR_KEY_MAX_HEADROOM:
    if(parse_int(value, 0, HR_MAX_SMS, &v))
      return fail(why, n, "bad max_headroom '%s' (0..%d)", value, HR_MAX_SMS);
    cfg->policy.max_headroom = (int)v;
    return HR_OK;
  case HR_KEY_MIN_GRID:
    if(parse_int(value, 1, HR_MAX_SMS, &v))
      return fail(why, n, "bad min_grid '%s' (1..%d)", value, HR_MAX_SMS);
    cfg->policy.min_grid = (int)v;
    return HR_OK;
  case HR_KEY_INCIDENT_RAISE:
    if(parse_yes_no(value, &t))
      return fail(why, n, "bad incident_raise '%s' (yes or no)", value);
    cfg->policy.incident_raise = t;
    return HR_OK;
  case HR_KEY_INCIDENT_RAISE_INTERVAL:
    if(parse_int(value, 0, HR__RAISE_INTERVAL_LIMIT, &v))
      return fail(why, n, "bad incident_raise_interval '%s' (seconds, "
                  "0..%d; 0: no limit)", value, HR__RAISE_INTERVAL_LIMIT);
    cfg->incident_raise_interval = (int)v;
    return HR_OK;
  case HR_KEY_PARTITION_IGNORE_COSCHEDULING:
    if(parse_yes_no(value, &t))
      return fail(why, n, "bad partition_ignore_coscheduling '%s' "
                  "(true or false)", value);
    cfg->partition_ignore_coscheduling = t;
    return HR_OK;
  case HR_KEY_MAX_CLIENTS:
    if(parse_int(value, 1, MAX_CLIENTS_LIMIT, &v))
      return fail(why, n, "bad max_clients '%s' (1..%d)", value,
                  MAX_CLIENTS_LIMIT);
    cfg->max_clients = (int)v;
    return HR_OK;
  case HR_KEY_MAX_COMMS_PER_CLIENT:
    if(parse_int(value, 1, MAX_PER_CLIENT_LIMIT, &v))
      return fail(why, n, "bad max_comms_per_client '%s' (1..%d)", value,
                  MAX_PER_CLIENT_LIMIT);
    cfg->max_comms_per_client = (int)v;
    return HR_OK;
  case HR_KEY_MAX_LEASES_PER_CLIENT:
    if(parse_int(value, 1, MAX_PER_CLIENT_LIMIT, &v))
      return fail(why, n, "bad max_leases_per_client '%s' (1..%d)", value,
                  MAX_PER_CLIENT_LIMIT);
    cfg->max_leases_per_client = (int)v;
    return HR_OK;
  case HR_KEY_WRITE_QUEUE_MAX:
    if(parse_size(value, &v) || v < WRITE_QUEUE_MIN)
      return fail(why, n, "bad write_queue_max '%s' "
                  "(bytes, K/M/G suffix allowed; 64K..1G)", value);
    cfg->write_queue_max = (size_t)v;
    return HR_OK;
  case HR_KEY_MAX_MESSAGES_PER_SECOND:
    if(parse_int(value, 0, MSG_RATE_LIMIT, &v))
      return fail(why, n, "bad max_messages_per_second '%s' (0..%d; 0: no "
                  "limit)", value, MSG_RATE_LIMIT);
    cfg->max_messages_per_second = (int)v;
    return HR_OK;
  case HR_KEY_MAX_MESSAGE_BURST:
    if(parse_int(value, 1, MSG_RATE_LIMIT, &v))
      return fail(why, n, "bad max_message_burst '%s' (1..%d)", value,
                  MSG_RATE_LIMIT);
    cfg->max_message_burst = (int)v;
    return HR_OK;
  case HR_KEY_COUNT:
    break;
  }
  return fail(why, n, "unknown key");
}

int hr__config_set(hr__config *cfg, const char *key, const char *value,
                   int from, char *why, size_t n)
{
  int k, g, err;

  if(!cfg || !key || !value)
    return fail(why, n, "no key or value");
  g = gpu_key_index(key);
  if(g == -2)
    return fail(why, n, "bad key '%s' (gpu.N.sms takes N in 0..%d)", key,
                HR_MAX_GPUS - 1);
  if(g >= 0) {
    long v;
    if(parse_int(value, 1, HR_MAX_SMS, &v))
      return fail(why, n, "bad %s '%s' (1..%d)", key, value, HR_MAX_SMS);
    cfg->gpu_sms[g] = (int)v;
    cfg->gpu_sms_from[g] = from;
    return HR_OK;
  }
  k = find_key(key);
  if(k < 0)
    return fail(why, n, "unknown key '%s'", key);
  err = set_known(cfg, (hr__config_key)k, value, why, n);
  if(!err)
    cfg->from[k] = from;
  return err;
}

/* ---- the file ---------------------------------------------------------- */

static int is_space(char c)
{
  return c == ' ' || c == '\t';
}

/* Trim spaces and tabs at both ends, in place. */
static char *trim(char *s)
{
  char *end;

  while(is_space(*s))
    s++;
  end = s + strlen(s);
  while(end > s && is_space(end[-1]))
    *--end = '\0';
  return s;
}

/* The line a file key was first set on, 0 when not yet set by the file. */
static int first_line(const hr__config *cfg, const char *key)
{
  int k, g = gpu_key_index(key);

  if(g >= 0)
    return cfg->gpu_sms_from[g] > 0 ? cfg->gpu_sms_from[g] : 0;
  k = find_key(key);
  if(k >= 0 && cfg->from[k] > 0)
    return cfg->from[k];
  return 0;
}

static int parse_line(hr__config *cfg, char *line, int lineno, char *why,
                      size_t n)
{
  char *eq, *key, *value, *p;
  int prev;

  for(p = line; *p; p++)
    if((unsigned char)*p < 0x20 && *p != '\t')
      return fail(why, n, "control character in line");
  line = trim(line);
  if(!*line || *line == '#')
    return HR_OK;
  eq = strchr(line, '=');
  if(!eq)
    return fail(why, n, "expected 'key = value'");
  *eq = '\0';
  key = trim(line);
  value = eq + 1;
  /* A comment may follow a value after whitespace; a '#' inside a value
   * (a path such as /run/a#b) stays part of it. */
  for(p = value; *p; p++) {
    if(*p == '#' && p > value && is_space(p[-1])) {
      *p = '\0';
      break;
    }
  }
  value = trim(value);
  if(!*key)
    return fail(why, n, "missing key before '='");
  if(!*value)
    return fail(why, n, "missing value for '%s'", key);
  prev = first_line(cfg, key);
  if(prev)
    return fail(why, n, "duplicate key '%s' (first set on line %d)", key,
                prev);
  return hr__config_set(cfg, key, value, lineno, why, n);
}

int hr__config_parse(hr__config *cfg, const char *text, size_t len,
                     const char *file, char *err, size_t n)
{
  char line[LINE_MAX_LEN + 1];
  char why[HR__CONFIG_ERR_MAX];
  size_t pos = 0;
  int lineno = 0;

  if(!cfg || (!text && len) || !file)
    return fail(err, n, "config: bad arguments");
  snprintf(cfg->file, sizeof(cfg->file), "%s", file);
  while(pos < len) {
    const char *start = text + pos;
    const char *nl = memchr(start, '\n', len - pos);
    size_t l = nl ? (size_t)(nl - start) : len - pos;

    lineno++;
    pos += l + (nl ? 1 : 0);
    if(l && start[l - 1] == '\r')
      l--; /* a file written on Windows */
    if(l > LINE_MAX_LEN)
      return fail(err, n, "%s:%d: line longer than %d bytes", file, lineno,
                  LINE_MAX_LEN);
    if(memchr(start, '\0', l))
      return fail(err, n, "%s:%d: NUL byte in line", file, lineno);
    memcpy(line, start, l);
    line[l] = '\0';
    if(parse_line(cfg, line, lineno, why, sizeof(why)))
      return fail(err, n, "%s:%d: %s", file, lineno, why);
  }
  return HR_OK;
}

int hr__config_load(hr__config *cfg, const char *path, char *err, size_t n)
{
  FILE *f = NULL;
  char *text = NULL;
  size_t len = 0;
  int rc;

  if(!cfg || !path)
    return fail(err, n, "config: no path");
  f = fopen(path, "rb");
  if(!f) {
    rc = errno == ENOENT ? HR_ENOTFOUND : HR_EINVAL;
    fail(err, n, "%s: %s", path, strerror(errno));
    goto out;
  }
  text = malloc(HR__CONFIG_FILE_MAX + 1);
  if(!text) {
    rc = fail(err, n, "%s: out of memory", path);
    goto out;
  }
  len = fread(text, 1, HR__CONFIG_FILE_MAX + 1, f);
  if(ferror(f)) {
    rc = fail(err, n, "%s: read error", path);
    goto out;
  }
  if(len > HR__CONFIG_FILE_MAX) {
    rc = fail(err, n, "%s: larger than %d bytes", path, HR__CONFIG_FILE_MAX);
    goto out;
  }
  rc = hr__config_parse(cfg, text, len, path, err, n);
out:
  free(text);
  if(f)
    fclose(f);
  return rc;
}

/* "FILE:LINE: " or "--flag: " or "" for a value's origin. */
static void origin(const hr__config *cfg, int from, const char *flag,
                   char *buf, size_t n)
{
  if(from > 0)
    snprintf(buf, n, "%s:%d: ", cfg->file, from);
  else if(from == HR__FROM_FLAG)
    snprintf(buf, n, "%s: ", flag);
  else
    buf[0] = '\0';
}

int hr__config_check(const hr__config *cfg, char *err, size_t n)
{
  char where[HR__CONFIG_PATH_MAX + 32];
  char why[HR__CONFIG_ERR_MAX];
  const hr_policy *p;
  int g;

  if(!cfg)
    return fail(err, n, "config: none");
  p = &cfg->policy;
  for(g = 0; g < HR_MAX_GPUS; g++) {
    if(!cfg->gpu_sms[g] || g < cfg->gpus)
      continue;
    origin(cfg, cfg->gpu_sms_from[g], "", where, sizeof(where));
    if(!cfg->gpus)
      return fail(err, n, "%sgpu.%d.sms needs 'gpus' to be set", where, g);
    return fail(err, n, "%sgpu.%d.sms: no GPU %d (gpus = %d)", where, g, g,
                cfg->gpus);
  }
  if(cfg->topology == HR_TOPOLOGY_CONFIG && !cfg->gpus) {
    origin(cfg, cfg->from[HR_KEY_TOPOLOGY], "--topology", where,
           sizeof(where));
    return fail(err, n, "%stopology = config needs 'gpus' in the config file",
                where);
  }
  if(p->min_headroom > p->max_headroom) {
    /* Blame whichever of the two was written last: that is the line an
     * operator just edited. */
    int a = cfg->from[HR_KEY_MIN_HEADROOM], b = cfg->from[HR_KEY_MAX_HEADROOM];
    origin(cfg, a > b ? a : b, "", where, sizeof(where));
    return fail(err, n, "%smin_headroom (%d) exceeds max_headroom (%d)",
                where, p->min_headroom, p->max_headroom);
  }
  if(hr__policy_validate(p, why, sizeof(why)))
    return fail(err, n, "%s: %s", cfg->file[0] ? cfg->file : "policy", why);
  return HR_OK;
}

int hr__config_check_policy(const hr__config *cfg, const hr_topology *topo,
                            char *err, size_t n)
{
  char where[HR__CONFIG_PATH_MAX + 32];
  char why[HR__CONFIG_ERR_MAX];
  unsigned blame = 0;
  int from = 0;

  if(!cfg || !topo)
    return fail(err, n, "config: none");
  if(!hr__policy_validate_for(&cfg->policy, topo, why, sizeof(why), &blame))
    return HR_OK;
  if(blame == HR_POLICY_MIN_HEADROOM)
    from = cfg->from[HR_KEY_MIN_HEADROOM];
  else if(blame == HR_POLICY_MAX_HEADROOM)
    from = cfg->from[HR_KEY_MAX_HEADROOM];
  else if(blame == HR_POLICY_MIN_GRID)
    from = cfg->from[HR_KEY_MIN_GRID];
  if(from > 0)
    origin(cfg, from, "", where, sizeof(where));
  else
    snprintf(where, sizeof(where), "%s: ",
             cfg->file[0] ? cfg->file : "policy");
  return fail(err, n, "%s%s", where, why);
}

int hr__config_build(hr__config *cfg, const hr__config_flags *flags,
                     char *err, size_t n)
{
  static const hr__config_flags none;
  struct { const char *value, *flag; hr__config_key key; } over[4];
  char why[HR__CONFIG_ERR_MAX];
  const char *path;
  int rc, i;

  if(!cfg)
    return fail(err, n, "config: none");
  if(!flags)
    flags = &none;
  hr__config_default(cfg);
  path = flags->config ? flags->config : HR__DEFAULT_CONFIG;
  rc = hr__config_load(cfg, path, err, n);
  if(rc == HR_ENOTFOUND && !flags->config) {
    cfg->file[0] = '\0'; /* no file at the default path: defaults it is */
    rc = HR_OK;
  }
  if(rc)
    return HR_EINVAL;

  over[0].value = flags->socket;
  over[0].flag = "--socket";
  over[0].key = HR_KEY_SOCKET;
  over[1].value = flags->state_dir;
  over[1].flag = "--state-dir";
  over[1].key = HR_KEY_STATE_DIR;
  over[2].value = flags->log_level;
  over[2].flag = "--log-level";
  over[2].key = HR_KEY_LOG_LEVEL;
  over[3].value = flags->topology;
  over[3].flag = "--topology";
  over[3].key = HR_KEY_TOPOLOGY;
  for(i = 0; i < 4; i++) {
    if(!over[i].value)
      continue;
    if(hr__config_set(cfg, key_names[over[i].key], over[i].value,
                      HR__FROM_FLAG, why, sizeof(why)))
      return fail(err, n, "%s: %s", over[i].flag, why);
  }
  return hr__config_check(cfg, err, n);
}
