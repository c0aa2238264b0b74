/*
 * hr_names.c: every name the wire uses for a C enum, in both directions.
 *
 * One table per enum, indexed by the enum value, so adding a value means
 * adding one string here and nothing else in the codec.
 */
#include <string.h>

#include "hr_internal.h"

static const char *const msg_type_names[HR_MSG_COUNT] = {
  [HR_MSG_NONE] = NULL,
  [HR_MSG_HELLO] = "hello",
  [HR_MSG_REGISTER_COMM] = "register_comm",
  [HR_MSG_UNREGISTER_COMM] = "unregister_comm",
  [HR_MSG_LEASE] = "lease",
  [HR_MSG_RELEASE] = "release",
  [HR_MSG_REPORT] = "report",
  [HR_MSG_STATUS] = "status",
  [HR_MSG_SUBSCRIBE] = "subscribe",
  [HR_MSG_POLICY_GET] = "policy_get",
  [HR_MSG_POLICY_SET] = "policy_set",
  [HR_MSG_METRICS] = "metrics",
  [HR_MSG_RAISES_GET] = "raises_get",
  [HR_MSG_RAISES_CLEAR] = "raises_clear",
  [HR_MSG_BUDGET] = "budget",
  [HR_MSG_SHUTDOWN] = "shutdown",
  [HR_MSG_ERROR] = "error",
};

static const char *const wire_error_names[HR_WERR_COUNT] = {
  [HR_WERR_BAD_REQUEST] = "bad_request",
  [HR_WERR_HELLO_REQUIRED] = "hello_required",
  [HR_WERR_UNSUPPORTED_VERSION] = "unsupported_version",
  [HR_WERR_UNKNOWN_TYPE] = "unknown_type",
  [HR_WERR_NOT_FOUND] = "not_found",
  [HR_WERR_PERMISSION_DENIED] = "permission_denied",
  [HR_WERR_LIMIT_EXCEEDED] = "limit_exceeded",
  [HR_WERR_TOO_LARGE] = "too_large",
  [HR_WERR_UNSUPPORTED] = "unsupported",
  [HR_WERR_SHUTTING_DOWN] = "shutting_down",
  [HR_WERR_INTERNAL] = "internal",
  [HR_WERR_INVALID_VALUE] = "invalid_value",
};

/* What a client library returns for each wire error. An unknown_type is a
 * protocol violation from the client's point of view, like bad_request. */
static const int wire_error_codes[HR_WERR_COUNT] = {
  [HR_WERR_BAD_REQUEST] = HR_EPROTO,
  [HR_WERR_HELLO_REQUIRED] = HR_EHELLO,
  [HR_WERR_UNSUPPORTED_VERSION] = HR_EVERSION,
  [HR_WERR_UNKNOWN_TYPE] = HR_EPROTO,
  [HR_WERR_NOT_FOUND] = HR_ENOTFOUND,
  [HR_WERR_PERMISSION_DENIED] = HR_EPERM,
  [HR_WERR_LIMIT_EXCEEDED] = HR_ELIMIT,
  [HR_WERR_TOO_LARGE] = HR_ETOOLARGE,
  [HR_WERR_UNSUPPORTED] = HR_EUNSUPPORTED,
  [HR_WERR_SHUTTING_DOWN] = HR_ESHUTDOWN,
  [HR_WERR_INTERNAL] = HR_EINTERNAL,
  [HR_WERR_INVALID_VALUE] = HR_EINVAL,
};

static const char *const topology_source_names[HR_TOPO_COUNT] = {
  [HR_TOPO_DEFAULT] = "default",
  [HR_TOPO_CONFIG] = "config",
  [HR_TOPO_CUDA] = "cuda",
};

static const char *const mode_names[HR_MODE_COUNT] = {
  [HR_MODE_HEADROOM] = "headroom",
  [HR_MODE_COOPERATIVE] = "cooperative",
  [HR_MODE_AGNOSTIC] = "agnostic",
  [HR_MODE_PARTITION] = "partition",
};

static const char *const incident_kind_names[HR_INCIDENT_COUNT] = {
  [HR_INCIDENT_BARRIER_TIMEOUT] = "barrier_timeout",
  [HR_INCIDENT_LAUNCH_FAILURE] = "launch_failure",
};

static const char *const budget_source_names[HR_SOURCE_COUNT] = {
  [HR_SOURCE_THEORY] = "theory",
  [HR_SOURCE_CALIBRATED] = "calibrated",
};

static const char *const status_detail_names[HR_STATUS_DETAIL_COUNT] = {
  [HR_STATUS_FULL] = "full",
  [HR_STATUS_SUMMARY] = "summary",
};

/* Index of `name` in table[0..count), or -1. NULL entries never match. */
static int table_find(const char *const *table, int count, const char *name)
{
  int i;

  if(!name)
    return -1;
  for(i = 0; i < count; i++)
    if(table[i] && !strcmp(table[i], name))
      return i;
  return -1;
}

/* table[i], or NULL when `i` is out of [0, count). */
static const char *table_name(const char *const *table, int count, int i)
{
  return i >= 0 && i < count ? table[i] : NULL;
}

const char *hr_msg_type_name(hr_msg_type type)
{
  return table_name(msg_type_names, HR_MSG_COUNT, (int)type);
}

int hr__msg_type_from_name(const char *name, hr_msg_type *out)
{
  int i = table_find(msg_type_names, HR_MSG_COUNT, name);

  if(i < 0 || !out)
    return HR_EINVAL;
  *out = (hr_msg_type)i;
  return HR_OK;
}

void hr__dec_msg_type(hr__dec *d, const cJSON *root,
                      int (*accept)(hr_msg_type), const char *what,
                      hr_msg_type *type)
{
  const cJSON *it = hr__dec_field(d, root, "type", HR__REQUIRED);
  char quoted[48];

  if(!it)
    return;
  if(!cJSON_IsString(it) || !it->valuestring) {
    hr__dec_field_fail(d, "type", "must be a string");
    return;
  }
  if(hr__msg_type_from_name(it->valuestring, type) == HR_OK &&
     (!accept || accept(*type)))
    return;
  hr__quote(quoted, sizeof(quoted), it->valuestring, 32);
  hr__dec_fail(d, HR_WERR_UNKNOWN_TYPE, "type: \"%s\" is not a %s type",
               quoted, what);
}

const char *hr_wire_error_name(hr_wire_error code)
{
  return table_name(wire_error_names, HR_WERR_COUNT, (int)code);
}

int hr_wire_error_from_name(const char *name, hr_wire_error *out)
{
  int i = table_find(wire_error_names, HR_WERR_COUNT, name);

  if(i < 0 || !out)
    return HR_EINVAL;
  *out = (hr_wire_error)i;
  return HR_OK;
}

int hr_wire_error_to_hr(hr_wire_error code)
{
  if((int)code < 0 || code >= HR_WERR_COUNT)
    return HR_EINTERNAL;
  return wire_error_codes[code];
}

const char *hr_topology_source_name(hr_topology_source s)
{
  return table_name(topology_source_names, HR_TOPO_COUNT, (int)s);
}

const char *hr_budget_source_name(hr_budget_source s)
{
  return table_name(budget_source_names, HR_SOURCE_COUNT, (int)s);
}

const char *hr_status_detail_name(hr_status_detail detail)
{
  return table_name(status_detail_names, HR_STATUS_DETAIL_COUNT, (int)detail);
}

const char *hr_mode_name(hr_mode mode)
{
  return table_name(mode_names, HR_MODE_COUNT, (int)mode);
}

int hr_mode_from_name(const char *name, hr_mode *out)
{
  int i = table_find(mode_names, HR_MODE_COUNT, name);

  if(i < 0 || !out)
    return HR_EINVAL;
  *out = (hr_mode)i;
  return HR_OK;
}

const char *hr_incident_kind_name(hr_incident_kind kind)
{
  return table_name(incident_kind_names, HR_INCIDENT_COUNT, (int)kind);
}

int hr_incident_kind_from_name(const char *name, hr_incident_kind *out)
{
  int i = table_find(incident_kind_names, HR_INCIDENT_COUNT, name);

  if(i < 0 || !out)
    return HR_EINVAL;
  *out = (hr_incident_kind)i;
  return HR_OK;
}

/* int-indexed views for hr__dec_enum (a cast function pointer would be
 * undefined behaviour). */
const char *hr__mode_name_i(int i) { return hr_mode_name((hr_mode)i); }

const char *hr__wire_error_name_i(int i)
{
  return hr_wire_error_name((hr_wire_error)i);
}

const char *hr__incident_kind_name_i(int i)
{
  return hr_incident_kind_name((hr_incident_kind)i);
}

const char *hr__topology_source_name_i(int i)
{
  return hr_topology_source_name((hr_topology_source)i);
}

const char *hr__budget_source_name_i(int i)
{
  return hr_budget_source_name((hr_budget_source)i);
}

const char *hr__status_detail_name_i(int i)
{
  return hr_status_detail_name((hr_status_detail)i);
}
