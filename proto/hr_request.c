/*
 * hr_request.c: requests, client to daemon, both ways.
 *
 * The daemon decodes whatever a client sends with hr_proto_decode_request,
 * so this is the protocol's front door: it must refuse anything malformed
 * with a message that names the field and the rule, and never crash.
 */
#include <stdio.h>
#include <string.h>

#include "hr_internal.h"

static int is_request_type(hr_msg_type t)
{
  return t >= HR_MSG_HELLO && t <= HR_MSG_LAST_REQUEST;
}

/* ---- Encoding ---------------------------------------------------------- */

static void encode_hello(hr__enc *e, cJSON *o, const hr_req_hello *r)
{
  cJSON *versions;
  int i;

  if(r->n_versions < 1 || r->n_versions > HR_MAX_VERSIONS)
    hr__enc_fail(e, HR_EINVAL);
  versions = hr__enc_array(e, o, "versions");
  for(i = 0; !e->rc && i < r->n_versions; i++)
    hr__enc_i64(e, versions, NULL, r->versions[i], 1, HR__VERSION_MAX);
  if(r->client[0])
    hr__enc_name_string(e, o, "client", r->client, sizeof(r->client));
  if(r->degraded_ms)                /* 0: was not degraded, left out */
    hr__enc_i64(e, o, "degraded_ms", r->degraded_ms, 1, HR__MAX_ID);
}

static void encode_register_comm(hr__enc *e, cJSON *o,
                                 const hr_req_register_comm *r)
{
  hr__enc_i64(e, o, "gpu", r->gpu, 0, HR_MAX_GPUS - 1);
  hr__enc_name_string(e, o, "name", r->name, sizeof(r->name));
  hr__enc_i64(e, o, "ctas", r->ctas, 1, HR_MAX_CTAS);
  hr__enc_i64(e, o, "cga", r->cga, 1, HR_MAX_CGA);
  hr__enc_i64(e, o, "concurrent", r->concurrent, 1, HR_MAX_CONCURRENT);
}

static void encode_lease(hr__enc *e, cJSON *o, const hr_req_lease *r)
{
  if(!hr__cluster_valid(r->cluster))
    hr__enc_fail(e, HR_EINVAL);
  hr__enc_i64(e, o, "gpu", r->gpu, 0, HR_MAX_GPUS - 1);
  hr__enc_i64(e, o, "cluster", r->cluster, 1, HR_MAX_CGA);
  hr__enc_name(e, o, "mode", hr_mode_name(r->mode));
}

static void encode_report(hr__enc *e, cJSON *o, const hr_req_report *r)
{
  hr__enc_i64(e, o, "gpu", r->gpu, 0, HR_MAX_GPUS - 1);
  hr__enc_name(e, o, "kind", hr_incident_kind_name(r->kind));
  if(r->lease)                      /* 0: not tied to a lease, left out */
    hr__enc_i64(e, o, "lease", r->lease, 1, HR__MAX_ID);
  hr__detail_encode(e, o, "detail", &r->detail);
  /* Left out when empty; an unterminated one still reaches the check. */
  if(!memchr(r->message, '\0', sizeof(r->message)) || r->message[0])
    hr__enc_string(e, o, "message", r->message, sizeof(r->message));
}

static void encode_body(hr__enc *e, cJSON *o, const hr_request *req)
{
  switch(req->type) {
  case HR_MSG_HELLO:
    encode_hello(e, o, &req->u.hello);
    break;
  case HR_MSG_REGISTER_COMM:
    encode_register_comm(e, o, &req->u.register_comm);
    break;
  case HR_MSG_UNREGISTER_COMM:
    hr__enc_i64(e, o, "comm", req->u.unregister_comm.comm, 1, HR__MAX_ID);
    break;
  case HR_MSG_LEASE:
    encode_lease(e, o, &req->u.lease);
    break;
  case HR_MSG_RELEASE:
    hr__enc_i64(e, o, "lease", req->u.release.lease, 1, HR__MAX_ID);
    break;
  case HR_MSG_REPORT:
    encode_report(e, o, &req->u.report);
    break;
  case HR_MSG_SUBSCRIBE:
    if(req->u.subscribe.gpu != -1)  /* -1: every GPU, left out */
      hr__enc_i64(e, o, "gpu", req->u.subscribe.gpu, 0, HR_MAX_GPUS - 1);
    break;
  case HR_MSG_STATUS:
    if(req->u.status.detail != HR_STATUS_FULL) /* the default, left out */
      hr__enc_name(e, o, "detail",
                   hr_status_detail_name(req->u.status.detail));
    break;
  case HR_MSG_POLICY_SET:
    if(!req->u.policy_set.fields || (req->u.policy_set.fields &
                                     ~(unsigned)HR__POLICY_ALL))
      hr__enc_fail(e, HR_EINVAL);
    hr__policy_encode(e, o, "policy", &req->u.policy_set.policy,
                      req->u.policy_set.fields);
    break;
  case HR_MSG_RAISES_CLEAR:
    hr__enc_i64(e, o, "gpu", req->u.raises_clear.gpu, -1, HR_MAX_GPUS - 1);
    break;
  default:                          /* policy_get, metrics, raises_get */
    break;
  }
}

int hr_proto_encode_request(const hr_request *req, hr_buf *out)
{
  hr__enc e = { HR_OK };
  cJSON *root;

  if(!req || !out || !is_request_type(req->type))
    return HR_EINVAL;
  root = hr__enc_object(&e, NULL, NULL);
  hr__enc_i64(&e, root, "id", req->id, 0, HR__MAX_ID);
  hr__enc_name(&e, root, "type", hr_msg_type_name(req->type));
  encode_body(&e, root, req);
  return hr__enc_finish(&e, root, out);
}

/* ---- Decoding ---------------------------------------------------------- */

static void decode_hello(hr__dec *d, const cJSON *o, hr_req_hello *r)
{
  const cJSON *versions, *it;
  int n = 0, i = 0;

  versions = hr__dec_array(d, o, "versions", HR__REQUIRED, HR_MAX_VERSIONS,
                           &n);
  if(versions && n == 0)
    hr__dec_field_fail(d, "versions", "must list 1..%d versions",
                       HR_MAX_VERSIONS);
  for(it = versions ? versions->child : NULL; it && !d->rc;
      it = it->next, i++) {
    int64_t v = 0;
    char label[32];
    snprintf(label, sizeof(label), "versions[%d]", i);
    hr__dec_value_i64(d, it, label, 1, HR__VERSION_MAX, &v);
    r->versions[i] = (int)v;
  }
  r->n_versions = d->rc ? 0 : n;
  hr__dec_name(d, o, "client", HR__OPTIONAL, r->client, sizeof(r->client));
  r->degraded_ms = 0;
  hr__dec_i64(d, o, "degraded_ms", HR__OPTIONAL, 0, HR__MAX_ID,
              &r->degraded_ms);
}

static void decode_register_comm(hr__dec *d, const cJSON *o,
                                 hr_req_register_comm *r)
{
  hr__dec_int(d, o, "gpu", HR__REQUIRED, 0, HR_MAX_GPUS - 1, &r->gpu);
  hr__dec_name(d, o, "name", HR__REQUIRED, r->name, sizeof(r->name));
  hr__dec_int(d, o, "ctas", HR__REQUIRED, 1, HR_MAX_CTAS, &r->ctas);
  hr__dec_int(d, o, "cga", HR__REQUIRED, 1, HR_MAX_CGA, &r->cga);
  hr__dec_int(d, o, "concurrent", HR__REQUIRED, 1, HR_MAX_CONCURRENT,
              &r->concurrent);
}

static void decode_lease(hr__dec *d, const cJSON *o, hr_req_lease *r)
{
  int mode = 0;

  hr__dec_int(d, o, "gpu", HR__REQUIRED, 0, HR_MAX_GPUS - 1, &r->gpu);
  hr__dec_int(d, o, "cluster", HR__REQUIRED, 1, HR_MAX_CGA, &r->cluster);
  if(!d->rc && !hr__cluster_valid(r->cluster))
    hr__dec_field_fail(d, "cluster", "must be 1, 2, 4 or 8");
  hr__dec_enum(d, o, "mode", HR__REQUIRED, hr__mode_name_i, HR_MODE_COUNT,
               &mode);
  r->mode = (hr_mode)mode;
}

static void decode_report(hr__dec *d, const cJSON *o, hr_req_report *r)
{
  int kind = 0;

  hr__dec_int(d, o, "gpu", HR__REQUIRED, 0, HR_MAX_GPUS - 1, &r->gpu);
  hr__dec_enum(d, o, "kind", HR__REQUIRED, hr__incident_kind_name_i,
               HR_INCIDENT_COUNT, &kind);
  r->kind = (hr_incident_kind)kind;
  r->lease = 0;
  hr__dec_i64(d, o, "lease", HR__OPTIONAL, 1, HR__MAX_ID, &r->lease);
  hr__detail_decode(d, o, "detail", &r->detail);
  hr__dec_string(d, o, "message", HR__OPTIONAL, r->message,
                 sizeof(r->message));
}

static void decode_status(hr__dec *d, const cJSON *o, hr_req_status *r)
{
  int detail = HR_STATUS_FULL;

  hr__dec_enum(d, o, "detail", HR__OPTIONAL, hr__status_detail_name_i,
               HR_STATUS_DETAIL_COUNT, &detail);
  r->detail = (hr_status_detail)detail;
}

static void decode_policy_set(hr__dec *d, const cJSON *o,
                              hr_req_policy_set *r)
{
  hr__policy_decode(d, o, "policy", &r->policy, 0, &r->fields);
  if(!d->rc && !r->fields)
    hr__dec_field_fail(d, "policy", "must set at least one of "
                       "min_headroom, max_headroom, min_grid, "
                       "incident_raise");
}

static void decode_body(hr__dec *d, const cJSON *o, hr_request *req)
{
  switch(req->type) {
  case HR_MSG_HELLO:
    decode_hello(d, o, &req->u.hello);
    break;
  case HR_MSG_REGISTER_COMM:
    decode_register_comm(d, o, &req->u.register_comm);
    break;
  case HR_MSG_UNREGISTER_COMM:
    hr__dec_i64(d, o, "comm", HR__REQUIRED, 1, HR__MAX_ID,
                &req->u.unregister_comm.comm);
    break;
  case HR_MSG_LEASE:
    decode_lease(d, o, &req->u.lease);
    break;
  case HR_MSG_RELEASE:
    hr__dec_i64(d, o, "lease", HR__REQUIRED, 1, HR__MAX_ID,
                &req->u.release.lease);
    break;
  case HR_MSG_REPORT:
    decode_report(d, o, &req->u.report);
    break;
  case HR_MSG_SUBSCRIBE:
    req->u.subscribe.gpu = -1;
    hr__dec_int(d, o, "gpu", HR__OPTIONAL, 0, HR_MAX_GPUS - 1,
                &req->u.subscribe.gpu);
    break;
  case HR_MSG_STATUS:
    decode_status(d, o, &req->u.status);
    break;
  case HR_MSG_POLICY_SET:
    decode_policy_set(d, o, &req->u.policy_set);
    break;
  case HR_MSG_RAISES_CLEAR:
    /* Required: clearing every GPU must be asked for (-1), never be what
     * a missing member means. */
    hr__dec_int(d, o, "gpu", HR__REQUIRED, -1, HR_MAX_GPUS - 1,
                &req->u.raises_clear.gpu);
    break;
  default:                          /* policy_get, metrics, raises_get */
    break;
  }
}

int hr_proto_decode_request(const char *line, size_t len, hr_request *req,
                            hr_proto_error *err)
{
  hr__dec d;
  cJSON *root = NULL;
  int64_t id = -1;

  if((!line && len) || !req || !err)
    return HR_EINVAL;
  memset(req, 0, sizeof(*req));
  req->id = -1;
  hr__dec_init(&d, err);
  root = hr__dec_parse(&d, line, len);
  if(!root)
    goto out;
  hr__dec_i64(&d, root, "id", HR__REQUIRED, 0, HR__MAX_ID, &id);
  if(d.rc)
    goto out;
  /* From here on an error reply can echo the id. */
  req->id = id;
  hr__dec_msg_type(&d, root, is_request_type, "request", &req->type);
  if(d.rc)
    goto out;
  decode_body(&d, root, req);
out:
  cJSON_Delete(root);
  if(d.rc) {
    id = req->id;
    memset(req, 0, sizeof(*req));
    req->id = id;
  }
  return d.rc;
}
