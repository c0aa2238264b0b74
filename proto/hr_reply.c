/*
 * hr_reply.c: replies and events, daemon to client, both ways.
 *
 * A reply echoes its request's id and type; an error reply carries an
 * "error" object instead of a type; events (budget, shutdown) carry no id.
 * The bodies of the status and metrics replies live in hr_status.c and
 * hr_metrics.c.
 */
#include <stdio.h>
#include <string.h>

#include "hr_internal.h"

static int is_event(hr_msg_type t)
{
  return t == HR_MSG_BUDGET || t == HR_MSG_SHUTDOWN;
}

static int is_reply_type(hr_msg_type t)
{
  return t > HR_MSG_NONE && t < HR_MSG_COUNT;
}

/* ---- Encoding ---------------------------------------------------------- */

static void encode_hello(hr__enc *e, cJSON *o, const hr_rep_hello *r)
{
  hr__enc_i64(e, o, "version", r->version, 1, HR__VERSION_MAX);
  hr__enc_string(e, o, "daemon", r->daemon, sizeof(r->daemon));
  hr__enc_i64(e, o, "client", r->client, 0, HR__MAX_ID);
  hr__topology_encode(e, o, "topology", &r->topology);
}

static void encode_error(hr__enc *e, cJSON *root, const hr_reply *rep)
{
  cJSON *o;

  if(rep->id == -1)                 /* the request's id was unreadable */
    hr__enc_null(e, root, "id");
  else
    hr__enc_i64(e, root, "id", rep->id, 0, HR__MAX_ID);
  o = hr__enc_object(e, root, "error");
  hr__enc_name(e, o, "code", hr_wire_error_name(rep->u.error.code));
  hr__enc_string(e, o, "message", rep->u.error.message,
                 sizeof(rep->u.error.message));
}

static void encode_body(hr__enc *e, cJSON *o, const hr_reply *rep)
{
  switch(rep->type) {
  case HR_MSG_HELLO:
    encode_hello(e, o, &rep->u.hello);
    break;
  case HR_MSG_REGISTER_COMM:
    hr__enc_i64(e, o, "comm", rep->u.register_comm.comm, 1, HR__MAX_ID);
    break;
  case HR_MSG_LEASE:
    hr__enc_i64(e, o, "lease", rep->u.lease.lease, 1, HR__MAX_ID);
    hr__budget_encode(e, o, "budget", &rep->u.lease.budget);
    break;
  case HR_MSG_REPORT:
    hr__enc_i64(e, o, "incident", rep->u.report.incident, 1, HR__MAX_ID);
    hr__budget_encode(e, o, "budget", &rep->u.report.budget);
    break;
  case HR_MSG_STATUS:
    hr__status_encode(e, o, "status", &rep->u.status);
    break;
  case HR_MSG_METRICS:
    hr__metrics_encode(e, o, "metrics", &rep->u.metrics);
    break;
  case HR_MSG_POLICY_GET:
  case HR_MSG_POLICY_SET:
    hr__policy_encode(e, o, "policy", &rep->u.policy, HR__POLICY_ALL);
    break;
  case HR_MSG_RAISES_GET:
  case HR_MSG_RAISES_CLEAR:
    hr__raises_encode(e, o, rep->type == HR_MSG_RAISES_CLEAR,
                      &rep->u.raises);
    break;
  case HR_MSG_BUDGET:
    hr__budget_encode(e, o, "budget", &rep->u.budget);
    break;
  case HR_MSG_SHUTDOWN:
    hr__enc_string(e, o, "reason", rep->u.shutdown_reason,
                   sizeof(rep->u.shutdown_reason));
    break;
  default:                          /* unregister_comm, release, subscribe */
    break;
  }
}

int hr__reply_encode_tree(const hr_reply *rep, hr_buf *out)
{
  hr__enc e = { HR_OK };
  cJSON *root;

  if(!rep || !out || !is_reply_type(rep->type))
    return HR_EINVAL;
  root = hr__enc_object(&e, NULL, NULL);
  if(rep->type == HR_MSG_ERROR) {
    encode_error(&e, root, rep);
    return hr__enc_finish(&e, root, out);
  }
  if(!is_event(rep->type))          /* events carry no id */
    hr__enc_i64(&e, root, "id", rep->id, 0, HR__MAX_ID);
  hr__enc_name(&e, root, "type", hr_msg_type_name(rep->type));
  encode_body(&e, root, rep);
  return hr__enc_finish(&e, root, out);
}

int hr_proto_encode_reply(const hr_reply *rep, hr_buf *out)
{
  if(!rep || !out || !is_reply_type(rep->type))
    return HR_EINVAL;
  /* The hot replies skip the tree; the tree encoder stays the reference
   * for their bytes (test_proto.c compares the two). */
  if(hr__reply_fast(rep->type))
    return hr__reply_encode_fast(rep, out);
  return hr__reply_encode_tree(rep, out);
}

int hr_proto_encode_error(int64_t id, hr_wire_error code, const char *message,
                          hr_buf *out)
{
  hr_reply rep;

  if(!out || !hr_wire_error_name(code) || id < -1 || id > HR__MAX_ID)
    return HR_EINVAL;
  memset(&rep, 0, sizeof(rep));
  rep.type = HR_MSG_ERROR;
  rep.id = id;
  rep.u.error.code = code;
  /* An error must always be sendable, so the message is made to fit
   * instead of being refused like a bad field would be. */
  hr__utf8_copy(rep.u.error.message, sizeof(rep.u.error.message),
                message ? message : "");
  return hr_proto_encode_reply(&rep, out);
}

/* ---- Decoding ---------------------------------------------------------- */

static void decode_hello(hr__dec *d, const cJSON *o, hr_rep_hello *r)
{
  hr__dec_int(d, o, "version", HR__REQUIRED, 1, HR__VERSION_MAX, &r->version);
  hr__dec_string(d, o, "daemon", HR__REQUIRED, r->daemon, sizeof(r->daemon));
  hr__dec_i64(d, o, "client", HR__REQUIRED, 0, HR__MAX_ID, &r->client);
  hr__topology_decode(d, o, "topology", &r->topology);
}

static void decode_error(hr__dec *d, const cJSON *o, hr_proto_error *r)
{
  char code[HR_NAME_MAX], quoted[48], joined[2 * HR_MESSAGE_MAX];
  size_t mark = hr__dec_enter(d, "error");

  code[0] = '\0';
  hr__dec_string(d, o, "code", HR__REQUIRED, code, sizeof(code));
  hr__dec_string(d, o, "message", HR__OPTIONAL, r->message,
                 sizeof(r->message));
  hr__dec_leave(d, mark);
  if(d->rc || hr_wire_error_from_name(code, &r->code) == HR_OK)
    return;
  /* A code from a newer daemon: still an error, with nothing lost. */
  r->code = HR_WERR_INTERNAL;
  hr__quote(quoted, sizeof(quoted), code, 32);
  snprintf(joined, sizeof(joined), "unknown error code \"%s\": %s", quoted,
           r->message);
  hr__utf8_copy(r->message, sizeof(r->message), joined);
}

static void decode_body(hr__dec *d, const cJSON *o, hr_reply *rep)
{
  unsigned fields;

  switch(rep->type) {
  case HR_MSG_HELLO:
    decode_hello(d, o, &rep->u.hello);
    break;
  case HR_MSG_REGISTER_COMM:
    hr__dec_i64(d, o, "comm", HR__REQUIRED, 1, HR__MAX_ID,
                &rep->u.register_comm.comm);
    break;
  case HR_MSG_LEASE:
    hr__dec_i64(d, o, "lease", HR__REQUIRED, 1, HR__MAX_ID,
                &rep->u.lease.lease);
    hr__budget_decode(d, o, "budget", &rep->u.lease.budget);
    break;
  case HR_MSG_REPORT:
    hr__dec_i64(d, o, "incident", HR__REQUIRED, 1, HR__MAX_ID,
                &rep->u.report.incident);
    hr__budget_decode(d, o, "budget", &rep->u.report.budget);
    break;
  case HR_MSG_STATUS:
    hr__status_decode(d, o, "status", &rep->u.status);
    break;
  case HR_MSG_METRICS:
    hr__metrics_decode(d, o, "metrics", &rep->u.metrics);
    break;
  case HR_MSG_POLICY_GET:
  case HR_MSG_POLICY_SET:
    hr__policy_decode(d, o, "policy", &rep->u.policy, HR__POLICY_ALL,
                      &fields);
    break;
  case HR_MSG_RAISES_GET:
  case HR_MSG_RAISES_CLEAR:
    hr__raises_decode(d, o, rep->type == HR_MSG_RAISES_CLEAR,
                      &rep->u.raises);
    break;
  case HR_MSG_BUDGET:
    hr__budget_decode(d, o, "budget", &rep->u.budget);
    break;
  case HR_MSG_SHUTDOWN:
    hr__dec_string(d, o, "reason", HR__REQUIRED, rep->u.shutdown_reason,
                   sizeof(rep->u.shutdown_reason));
    break;
  default:                          /* unregister_comm, release, subscribe */
    break;
  }
}

int hr_proto_decode_reply(const char *line, size_t len, hr_reply *rep,
                          hr_proto_error *err)
{
  hr__dec d;
  cJSON *root = NULL;
  const cJSON *error, *id;

  if((!line && len) || !rep || !err)
    return HR_EINVAL;
  memset(rep, 0, sizeof(*rep));
  rep->id = -1;
  hr__dec_init(&d, err);
  root = hr__dec_parse(&d, line, len);
  if(!root)
    goto out;
  error = hr__dec_object(&d, root, "error", HR__OPTIONAL);
  if(d.rc)
    goto out;
  if(error) {
    rep->type = HR_MSG_ERROR;
    /* null: the daemon could not read the request's id */
    id = hr__dec_field(&d, root, "id", HR__REQUIRED);
    if(id && !cJSON_IsNull(id))
      hr__dec_i64(&d, root, "id", HR__REQUIRED, 0, HR__MAX_ID, &rep->id);
    decode_error(&d, error, &rep->u.error);
    goto out;
  }
  hr__dec_msg_type(&d, root, NULL, "reply", &rep->type);
  if(!d.rc && rep->type == HR_MSG_ERROR)  /* the code lives in "error" */
    hr__dec_field_fail(&d, "error", "required when type is \"error\"");
  if(d.rc)
    goto out;
  if(!is_event(rep->type))
    hr__dec_i64(&d, root, "id", HR__REQUIRED, 0, HR__MAX_ID, &rep->id);
  decode_body(&d, root, rep);
out:
  cJSON_Delete(root);
  if(d.rc) {
    hr_reply_free(rep);
    memset(rep, 0, sizeof(*rep));
    rep->id = -1;
  }
  return d.rc;
}

void hr_reply_free(hr_reply *reply)
{
  if(reply && reply->type == HR_MSG_STATUS)
    hr_status_free(&reply->u.status);
}
