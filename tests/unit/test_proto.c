/*
 * test_proto.c: the wire codec.
 *
 * Every request, reply and event is encoded, decoded again and compared
 * field by field; every class of bad input is fed to the decoders and must
 * come back with the right wire code and a message that names the field;
 * the decoders must never read past the length they were given; the
 * encoders must refuse structs outside the ranges and lines past the cap;
 * and every example in proto/PROTOCOL.md must be exactly what the encoder
 * produces, so the spec cannot drift from the code.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cmocka.h>

#include "hr_internal.h"   /* the tree encoder, the reference for the fast one */
#include "hr_proto.h"

/* ---- Helpers ----------------------------------------------------------- */

/* Encode with `enc`, check the framing, and hand back the line without its
 * '\n' in `b`. */
static void encoded_request(const hr_request *req, hr_buf *b)
{
  hr_buf_init(b, 0);
  assert_int_equal(hr_proto_encode_request(req, b), HR_OK);
  assert_true(b->len > 1);
  assert_int_equal(b->data[b->len - 1], '\n');
  assert_null(memchr(b->data, '\n', b->len - 1));
}

static void encoded_reply(const hr_reply *rep, hr_buf *b)
{
  hr_buf_init(b, 0);
  assert_int_equal(hr_proto_encode_reply(rep, b), HR_OK);
  assert_true(b->len > 1);
  assert_int_equal(b->data[b->len - 1], '\n');
  assert_null(memchr(b->data, '\n', b->len - 1));
}

static void roundtrip_request(const hr_request *in, hr_request *out)
{
  hr_proto_error err;
  hr_buf b;
  int rc;

  encoded_request(in, &b);
  rc = hr_proto_decode_request(b.data, b.len - 1, out, &err);
  if(rc)
    print_error("decode of %s failed: %s\n", b.data, err.message);
  assert_int_equal(rc, HR_OK);
  assert_int_equal(out->type, in->type);
  assert_int_equal(out->id, in->id);
  hr_buf_free(&b);
}

static void roundtrip_reply(const hr_reply *in, hr_reply *out)
{
  hr_proto_error err;
  hr_buf b;
  int rc;

  encoded_reply(in, &b);
  rc = hr_proto_decode_reply(b.data, b.len - 1, out, &err);
  if(rc)
    print_error("decode of %s failed: %s\n", b.data, err.message);
  assert_int_equal(rc, HR_OK);
  assert_int_equal(out->type, in->type);
  assert_int_equal(out->id, in->id);
  hr_buf_free(&b);
}

static void sample_budget(hr_budget *b, int gpu)
{
  memset(b, 0, sizeof(*b));
  b->gpu = gpu;
  b->epoch = 4000000000u;           /* above INT32_MAX: must stay unsigned */
  b->mode = HR_MODE_COOPERATIVE;
  b->sms = 132;
  b->cluster = 2;
  b->headroom = 16;
  b->grid = 116;
  b->nccl_min_ctas = 1;
  b->nccl_max_ctas = 8;
  b->nccl_cga_cluster_size = 1;
  b->nccl_nvls_enable = 0;
  b->degraded = 1;
  b->partition_granularity = 8;
  b->partition_comm_sms = 16;
  b->partition_nccl_max_ctas = 8;
}

static void assert_budget_equal(const hr_budget *a, const hr_budget *b)
{
  assert_int_equal(a->gpu, b->gpu);
  assert_int_equal(a->epoch, b->epoch);
  assert_int_equal(a->mode, b->mode);
  assert_int_equal(a->sms, b->sms);
  assert_int_equal(a->cluster, b->cluster);
  assert_int_equal(a->headroom, b->headroom);
  assert_int_equal(a->grid, b->grid);
  assert_int_equal(a->nccl_min_ctas, b->nccl_min_ctas);
  assert_int_equal(a->nccl_max_ctas, b->nccl_max_ctas);
  assert_int_equal(a->nccl_cga_cluster_size, b->nccl_cga_cluster_size);
  assert_int_equal(a->nccl_nvls_enable, b->nccl_nvls_enable);
  assert_int_equal(a->degraded, b->degraded);
  assert_int_equal(a->partition_granularity, b->partition_granularity);
  assert_int_equal(a->partition_comm_sms, b->partition_comm_sms);
  assert_int_equal(a->partition_nccl_max_ctas, b->partition_nccl_max_ctas);
}

static void assert_policy_equal(const hr_policy *a, const hr_policy *b)
{
  assert_int_equal(a->min_headroom, b->min_headroom);
  assert_int_equal(a->max_headroom, b->max_headroom);
  assert_int_equal(a->min_grid, b->min_grid);
  assert_int_equal(a->incident_raise, b->incident_raise);
}

static void assert_detail_equal(const hr_incident_detail *a,
                                const hr_incident_detail *b)
{
  assert_int_equal(a->barrier, b->barrier);
  assert_int_equal(a->arrived, b->arrived);
  assert_int_equal(a->expected, b->expected);
  assert_int_equal(a->sm, b->sm);
  assert_int_equal(a->grid, b->grid);
  assert_int_equal(a->timeout_ms, b->timeout_ms);
  assert_int_equal(a->cuda_error, b->cuda_error);
}

static void unknown_detail(hr_incident_detail *dt)
{
  dt->barrier = dt->arrived = dt->expected = dt->sm = -1;
  dt->grid = dt->timeout_ms = dt->cuda_error = -1;
}

/* Decode `line` as a request and expect failure with `code`, a message
 * containing `needle`, and `id` echoed. */
static void expect_request_error(const char *line, size_t len,
                                 hr_wire_error code, const char *needle,
                                 int64_t id)
{
  hr_proto_error err;
  hr_request req;
  int rc;

  rc = hr_proto_decode_request(line, len, &req, &err);
  if(rc != HR_EPROTO || err.code != code || !strstr(err.message, needle) ||
     req.id != id)
    print_error("line %.*s\n  rc %d code %s id %lld message \"%s\"\n"
                "  want code %s id %lld message containing \"%s\"\n",
                (int)len, line, rc, hr_wire_error_name(err.code),
                (long long)req.id, err.message, hr_wire_error_name(code),
                (long long)id, needle);
  assert_int_equal(rc, HR_EPROTO);
  assert_int_equal(err.code, code);
  assert_non_null(strstr(err.message, needle));
  assert_int_equal(req.id, id);
  assert_int_equal(req.type, HR_MSG_NONE);
}

static void expect_reply_error(const char *line, hr_wire_error code,
                               const char *needle)
{
  hr_proto_error err;
  hr_reply rep;
  int rc;

  rc = hr_proto_decode_reply(line, strlen(line), &rep, &err);
  if(rc != HR_EPROTO || err.code != code || !strstr(err.message, needle))
    print_error("line %s\n  rc %d code %s message \"%s\"\n"
                "  want code %s message containing \"%s\"\n", line, rc,
                hr_wire_error_name(err.code), err.message,
                hr_wire_error_name(code), needle);
  assert_int_equal(rc, HR_EPROTO);
  assert_int_equal(err.code, code);
  assert_non_null(strstr(err.message, needle));
  assert_int_equal(rep.type, HR_MSG_NONE);
}

/* ---- Name tables ------------------------------------------------------- */

static void test_names(void **state)
{
  static const struct { hr_wire_error code; const char *name; int hr; }
  errors[] = {
    { HR_WERR_BAD_REQUEST, "bad_request", HR_EPROTO },
    { HR_WERR_HELLO_REQUIRED, "hello_required", HR_EHELLO },
    { HR_WERR_UNSUPPORTED_VERSION, "unsupported_version", HR_EVERSION },
    { HR_WERR_UNKNOWN_TYPE, "unknown_type", HR_EPROTO },
    { HR_WERR_NOT_FOUND, "not_found", HR_ENOTFOUND },
    { HR_WERR_PERMISSION_DENIED, "permission_denied", HR_EPERM },
    { HR_WERR_LIMIT_EXCEEDED, "limit_exceeded", HR_ELIMIT },
    { HR_WERR_TOO_LARGE, "too_large", HR_ETOOLARGE },
    { HR_WERR_UNSUPPORTED, "unsupported", HR_EUNSUPPORTED },
    { HR_WERR_SHUTTING_DOWN, "shutting_down", HR_ESHUTDOWN },
    { HR_WERR_INTERNAL, "internal", HR_EINTERNAL },
    { HR_WERR_INVALID_VALUE, "invalid_value", HR_EINVAL },
  };
  static const char *const types[HR_MSG_COUNT] = {
    NULL, "hello", "register_comm", "unregister_comm", "lease", "release",
    "report", "status", "subscribe", "policy_get", "policy_set", "metrics",
    "raises_get", "raises_clear", "budget", "shutdown", "error",
  };
  hr_wire_error code;
  hr_incident_kind kind;
  hr_mode mode;
  size_t i;
  int t;

  (void)state;
  assert_int_equal(sizeof(errors) / sizeof(errors[0]), HR_WERR_COUNT);
  for(i = 0; i < HR_WERR_COUNT; i++) {
    assert_string_equal(hr_wire_error_name(errors[i].code), errors[i].name);
    assert_int_equal(hr_wire_error_from_name(errors[i].name, &code), HR_OK);
    assert_int_equal(code, errors[i].code);
    assert_int_equal(hr_wire_error_to_hr(errors[i].code), errors[i].hr);
  }
  assert_null(hr_wire_error_name(HR_WERR_COUNT));
  assert_null(hr_wire_error_name((hr_wire_error)-1));
  assert_int_equal(hr_wire_error_from_name("nope", &code), HR_EINVAL);
  assert_int_equal(hr_wire_error_from_name(NULL, &code), HR_EINVAL);
  assert_int_equal(hr_wire_error_from_name("Bad_Request", &code), HR_EINVAL);
  assert_int_equal(hr_wire_error_to_hr(HR_WERR_COUNT), HR_EINTERNAL);

  for(t = 0; t < HR_MSG_COUNT; t++) {
    if(types[t])
      assert_string_equal(hr_msg_type_name((hr_msg_type)t), types[t]);
    else
      assert_null(hr_msg_type_name((hr_msg_type)t));
  }
  assert_null(hr_msg_type_name(HR_MSG_COUNT));

  assert_string_equal(hr_mode_name(HR_MODE_HEADROOM), "headroom");
  assert_string_equal(hr_mode_name(HR_MODE_COOPERATIVE), "cooperative");
  assert_string_equal(hr_mode_name(HR_MODE_AGNOSTIC), "agnostic");
  assert_string_equal(hr_mode_name(HR_MODE_PARTITION), "partition");
  assert_null(hr_mode_name(HR_MODE_COUNT));
  assert_null(hr_mode_name((hr_mode)-1));
  assert_int_equal(hr_mode_from_name("cooperative", &mode), HR_OK);
  assert_int_equal(mode, HR_MODE_COOPERATIVE);
  assert_int_equal(hr_mode_from_name("headroom", &mode), HR_OK);
  assert_int_equal(mode, HR_MODE_HEADROOM);
  assert_int_equal(hr_mode_from_name("agnostic", &mode), HR_OK);
  assert_int_equal(mode, HR_MODE_AGNOSTIC);
  assert_int_equal(hr_mode_from_name("partition", &mode), HR_OK);
  assert_int_equal(mode, HR_MODE_PARTITION);
  assert_int_equal(hr_mode_from_name("green", &mode), HR_EINVAL);
  assert_int_equal(hr_mode_from_name("headroom", NULL), HR_EINVAL);

  assert_string_equal(hr_incident_kind_name(HR_INCIDENT_BARRIER_TIMEOUT),
                      "barrier_timeout");
  assert_string_equal(hr_incident_kind_name(HR_INCIDENT_LAUNCH_FAILURE),
                      "launch_failure");
  assert_null(hr_incident_kind_name(HR_INCIDENT_COUNT));
  assert_int_equal(hr_incident_kind_from_name("launch_failure", &kind), HR_OK);
  assert_int_equal(kind, HR_INCIDENT_LAUNCH_FAILURE);
  assert_int_equal(hr_incident_kind_from_name("barrier_timeout", &kind),
                   HR_OK);
  assert_int_equal(kind, HR_INCIDENT_BARRIER_TIMEOUT);
  assert_int_equal(hr_incident_kind_from_name("", &kind), HR_EINVAL);

  assert_string_equal(hr_topology_source_name(HR_TOPO_DEFAULT), "default");
  assert_string_equal(hr_topology_source_name(HR_TOPO_CONFIG), "config");
  assert_string_equal(hr_topology_source_name(HR_TOPO_CUDA), "cuda");
  assert_null(hr_topology_source_name(HR_TOPO_COUNT));
}

/* ---- hr_buf ------------------------------------------------------------ */

static void test_buf(void **state)
{
  char big[1000];
  hr_buf b;
  int i;

  (void)state;
  memset(big, 'x', sizeof(big));
  hr_buf_init(&b, 0);
  assert_int_equal(b.cap, HR_PROTO_MAX_LINE);   /* 0: one message */
  hr_buf_free(&b);

  hr_buf_init(&b, 10);
  assert_int_equal(hr_buf_append(&b, "hello", 5), HR_OK);
  assert_int_equal(b.len, 5);
  assert_string_equal(b.data, "hello");         /* always '\0'-terminated */
  assert_int_equal(hr_buf_append(&b, "world", 5), HR_OK);
  assert_int_equal(b.len, 10);
  assert_memory_equal(b.data, "helloworld", 10);
  assert_true(b.size <= 11);                    /* never past cap + '\0' */
  /* One more byte would pass the cap: refused, buffer as it was. */
  assert_int_equal(hr_buf_append(&b, "!", 1), HR_ETOOLARGE);
  assert_int_equal(b.len, 10);
  assert_string_equal(b.data, "helloworld");
  assert_int_equal(hr_buf_append(&b, "", 0), HR_OK);
  assert_int_equal(hr_buf_append(&b, big, (size_t)-1), HR_ETOOLARGE);
  hr_buf_reset(&b);
  assert_int_equal(b.len, 0);
  assert_string_equal(b.data, "");
  assert_int_equal(hr_buf_append(&b, big, 11), HR_ETOOLARGE);
  assert_int_equal(b.len, 0);
  hr_buf_free(&b);
  assert_null(b.data);
  assert_int_equal(b.len, 0);

  /* Growth across several reallocations keeps the bytes. */
  hr_buf_init(&b, 100000);
  for(i = 0; i < 90; i++) {
    big[0] = (char)('a' + i % 26);
    assert_int_equal(hr_buf_append(&b, big, sizeof(big)), HR_OK);
  }
  assert_int_equal(b.len, 90000);
  for(i = 0; i < 90; i++)
    assert_int_equal(b.data[i * 1000], 'a' + i % 26);
  assert_int_equal(b.data[b.len], '\0');
  assert_int_equal(hr_buf_append(&b, big, sizeof(big) * 11), HR_ETOOLARGE);
  hr_buf_free(&b);

  assert_int_equal(hr_buf_append(NULL, "x", 1), HR_EINVAL);
  hr_buf_init(&b, 10);
  assert_int_equal(hr_buf_append(&b, NULL, 1), HR_EINVAL);
  assert_int_equal(hr_buf_append(&b, NULL, 0), HR_OK);
  hr_buf_free(&b);
  hr_buf_free(NULL);
  hr_buf_reset(NULL);
}

/* ---- Requests round-trip ----------------------------------------------- */

static void test_request_hello(void **state)
{
  hr_request in, out;

  (void)state;
  memset(&in, 0, sizeof(in));
  in.type = HR_MSG_HELLO;
  in.id = 0;
  in.u.hello.n_versions = HR_MAX_VERSIONS;
  for(int i = 0; i < HR_MAX_VERSIONS; i++)
    in.u.hello.versions[i] = i == 0 ? 1000 : i;
  strcpy(in.u.hello.client, "trainer rank 3 \xc3\xa9\xe2\x82\xac \"q\"\\");
  roundtrip_request(&in, &out);
  assert_int_equal(out.u.hello.n_versions, HR_MAX_VERSIONS);
  assert_memory_equal(out.u.hello.versions, in.u.hello.versions,
                      sizeof(in.u.hello.versions));
  assert_string_equal(out.u.hello.client, in.u.hello.client);
  assert_int_equal(out.u.hello.degraded_ms, 0);

  /* No client name: left out, read back as "". */
  in.u.hello.n_versions = 1;
  in.u.hello.client[0] = '\0';
  in.id = HR_PROTO_MAX_ID;
  roundtrip_request(&in, &out);
  assert_int_equal(out.u.hello.n_versions, 1);
  assert_int_equal(out.u.hello.versions[0], 1000);
  assert_string_equal(out.u.hello.client, "");

  /* A client back from running degraded says for how long; the largest
   * value and the smallest both come back. */
  in.u.hello.degraded_ms = HR_PROTO_MAX_ID;
  roundtrip_request(&in, &out);
  assert_int_equal(out.u.hello.degraded_ms, HR_PROTO_MAX_ID);
  in.u.hello.degraded_ms = 1;
  roundtrip_request(&in, &out);
  assert_int_equal(out.u.hello.degraded_ms, 1);
}

/* 0 means "was not degraded": written as nothing, and a hello without the
 * member reads back as 0. */
static void test_request_hello_degraded(void **state)
{
  static const char plain[] = "{\"id\":1,\"type\":\"hello\",\"versions\":[1]}";
  static const char zero[] =
    "{\"id\":1,\"type\":\"hello\",\"versions\":[1],\"degraded_ms\":0}";
  hr_proto_error err;
  hr_request in, out;
  hr_buf b;

  (void)state;
  memset(&in, 0, sizeof(in));
  in.type = HR_MSG_HELLO;
  in.id = 1;
  in.u.hello.n_versions = 1;
  in.u.hello.versions[0] = 1;
  encoded_request(&in, &b);
  assert_int_equal(b.len - 1, strlen(plain));
  assert_memory_equal(b.data, plain, b.len - 1);
  hr_buf_free(&b);
  assert_int_equal(hr_proto_decode_request(zero, strlen(zero), &out, &err),
                   HR_OK);
  assert_int_equal(out.u.hello.degraded_ms, 0);
  in.u.hello.degraded_ms = 5400;
  encoded_request(&in, &b);
  assert_non_null(strstr(b.data, ",\"degraded_ms\":5400}"));
  hr_buf_free(&b);
}

static void test_request_comms(void **state)
{
  hr_request in, out;

  (void)state;
  memset(&in, 0, sizeof(in));
  in.type = HR_MSG_REGISTER_COMM;
  in.id = 3;
  in.u.register_comm.gpu = 63;
  memset(in.u.register_comm.name, 'n', HR_NAME_MAX - 1);   /* longest */
  in.u.register_comm.ctas = 64;
  in.u.register_comm.cga = 8;
  in.u.register_comm.concurrent = 64;
  roundtrip_request(&in, &out);
  assert_int_equal(out.u.register_comm.gpu, 63);
  assert_string_equal(out.u.register_comm.name, in.u.register_comm.name);
  assert_int_equal(out.u.register_comm.ctas, 64);
  assert_int_equal(out.u.register_comm.cga, 8);
  assert_int_equal(out.u.register_comm.concurrent, 64);

  memset(&in, 0, sizeof(in));
  in.type = HR_MSG_REGISTER_COMM;
  in.id = 4;
  in.u.register_comm.ctas = 1;
  in.u.register_comm.cga = 1;
  in.u.register_comm.concurrent = 1;
  roundtrip_request(&in, &out);
  assert_int_equal(out.u.register_comm.gpu, 0);
  assert_string_equal(out.u.register_comm.name, "");
  assert_int_equal(out.u.register_comm.ctas, 1);

  memset(&in, 0, sizeof(in));
  in.type = HR_MSG_UNREGISTER_COMM;
  in.id = 5;
  in.u.unregister_comm.comm = HR_PROTO_MAX_ID;
  roundtrip_request(&in, &out);
  assert_int_equal(out.u.unregister_comm.comm, HR_PROTO_MAX_ID);
}

static void test_request_leases(void **state)
{
  static const int clusters[] = { 1, 2, 4, 8 };
  hr_request in, out;
  size_t i;

  (void)state;
  for(i = 0; i < 8; i++) {
    memset(&in, 0, sizeof(in));
    in.type = HR_MSG_LEASE;
    in.id = 6;
    in.u.lease.gpu = (int)i;
    in.u.lease.cluster = clusters[i % 4];
    in.u.lease.mode = (hr_mode)(i % HR_MODE_COUNT);
    roundtrip_request(&in, &out);
    assert_int_equal(out.u.lease.gpu, in.u.lease.gpu);
    assert_int_equal(out.u.lease.cluster, clusters[i % 4]);
    assert_int_equal(out.u.lease.mode, in.u.lease.mode);
  }

  memset(&in, 0, sizeof(in));
  in.type = HR_MSG_RELEASE;
  in.id = 7;
  in.u.release.lease = 42;
  roundtrip_request(&in, &out);
  assert_int_equal(out.u.release.lease, 42);
}

static void test_request_report(void **state)
{
  hr_request in, out;

  (void)state;
  memset(&in, 0, sizeof(in));
  in.type = HR_MSG_REPORT;
  in.id = 8;
  in.u.report.gpu = 2;
  in.u.report.kind = HR_INCIDENT_BARRIER_TIMEOUT;
  in.u.report.lease = 9;
  in.u.report.detail.barrier = 3;
  in.u.report.detail.arrived = 130;
  in.u.report.detail.expected = 132;
  in.u.report.detail.sm = 0;
  in.u.report.detail.grid = 132;
  in.u.report.detail.timeout_ms = 2147483647;
  in.u.report.detail.cuda_error = -1;
  memset(in.u.report.message, 'm', HR_MESSAGE_MAX - 1);
  roundtrip_request(&in, &out);
  assert_int_equal(out.u.report.gpu, 2);
  assert_int_equal(out.u.report.kind, HR_INCIDENT_BARRIER_TIMEOUT);
  assert_int_equal(out.u.report.lease, 9);
  assert_detail_equal(&out.u.report.detail, &in.u.report.detail);
  assert_string_equal(out.u.report.message, in.u.report.message);

  /* Nothing optional: no lease, every detail unknown, no message. */
  memset(&in, 0, sizeof(in));
  in.type = HR_MSG_REPORT;
  in.id = 9;
  in.u.report.kind = HR_INCIDENT_LAUNCH_FAILURE;
  unknown_detail(&in.u.report.detail);
  roundtrip_request(&in, &out);
  assert_int_equal(out.u.report.kind, HR_INCIDENT_LAUNCH_FAILURE);
  assert_int_equal(out.u.report.lease, 0);
  assert_detail_equal(&out.u.report.detail, &in.u.report.detail);
  assert_string_equal(out.u.report.message, "");
}

/* `in` encodes to exactly `want` ('\n' included). */
static void expect_request_bytes(const hr_request *in, const char *want)
{
  hr_buf b;

  encoded_request(in, &b);
  if(b.len != strlen(want) || memcmp(b.data, want, b.len))
    print_error("encoded %.*s\n   want %s", (int)b.len, b.data, want);
  assert_int_equal(b.len, strlen(want));
  assert_memory_equal(b.data, want, b.len);
  hr_buf_free(&b);
}

/* raises_clear: gpu required, -1..63; the reply's list is checked like
 * any other. */
static void test_raises(void **state)
{
  static const struct { const char *line; const char *why; } bad[] = {
    {"{\"id\":1,\"type\":\"raises_clear\"}", "gpu"},
    {"{\"id\":1,\"type\":\"raises_clear\",\"gpu\":-2}", "gpu"},
    {"{\"id\":1,\"type\":\"raises_clear\",\"gpu\":64}", "gpu"},
    {"{\"id\":1,\"type\":\"raises_clear\",\"gpu\":\"all\"}", "gpu"},
  };
  static const struct { const char *line; const char *why; } bad_rep[] = {
    {"{\"id\":1,\"type\":\"raises_get\"}", "raises"},
    {"{\"id\":1,\"type\":\"raises_get\",\"raises\":[{\"gpu\":0,"
     "\"raised\":2000,\"headroom\":4,\"raises\":1}]}", "raises[0].raised"},
    {"{\"id\":1,\"type\":\"raises_get\",\"raises\":[7]}", "raises[0]"},
    {"{\"id\":1,\"type\":\"raises_clear\",\"raises\":[]}", "cleared"},
  };
  hr_request req;
  hr_reply rep;
  hr_proto_error err;
  hr_buf b;
  size_t i;

  (void)state;
  for(i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    assert_int_equal(hr_proto_decode_request(bad[i].line, strlen(bad[i].line),
                                             &req, &err), HR_EPROTO);
    assert_int_equal(err.code, HR_WERR_BAD_REQUEST);
    assert_non_null(strstr(err.message, bad[i].why));
  }
  for(i = 0; i < sizeof(bad_rep) / sizeof(bad_rep[0]); i++) {
    assert_int_equal(hr_proto_decode_reply(bad_rep[i].line,
                                           strlen(bad_rep[i].line), &rep,
                                           &err), HR_EPROTO);
    if(!strstr(err.message, bad_rep[i].why))
      fail_msg("'%s': %s", bad_rep[i].line, err.message);
  }
  /* The encoder refuses what the decoder would. */
  hr_buf_init(&b, HR_PROTO_MAX_LINE);
  memset(&req, 0, sizeof(req));
  req.type = HR_MSG_RAISES_CLEAR;
  req.u.raises_clear.gpu = -2;
  assert_int_equal(hr_proto_encode_request(&req, &b), HR_EINVAL);
  memset(&rep, 0, sizeof(rep));
  rep.type = HR_MSG_RAISES_GET;
  rep.u.raises.n_gpus = HR_MAX_GPUS + 1;
  assert_int_equal(hr_proto_encode_reply(&rep, &b), HR_EINVAL);
  /* Every GPU of a full node fits a line. */
  rep.u.raises.n_gpus = HR_MAX_GPUS;
  for(i = 0; i < HR_MAX_GPUS; i++) {
    rep.u.raises.gpus[i].gpu = (int)i;
    rep.u.raises.gpus[i].raised = HR_MAX_SMS;
    rep.u.raises.gpus[i].headroom = HR_MAX_SMS;
    rep.u.raises.gpus[i].raises = 2147483647;
    rep.u.raises.gpus[i].last_time_ms = HR_PROTO_MAX_ID;
    rep.u.raises.gpus[i].last_uid = 2147483647;
    rep.u.raises.gpus[i].last_incident = HR_PROTO_MAX_ID;
  }
  hr_buf_reset(&b);
  assert_int_equal(hr_proto_encode_reply(&rep, &b), HR_OK);
  assert_int_equal(hr_proto_decode_reply(b.data, b.len - 1, &rep, &err),
                   HR_OK);
  assert_int_equal(rep.u.raises.n_gpus, HR_MAX_GPUS);
  assert_int_equal(rep.u.raises.gpus[63].last_uid, 2147483647);
  hr_buf_free(&b);
}

static void test_request_small(void **state)
{
  hr_request in, out;
  unsigned f;

  (void)state;
  memset(&in, 0, sizeof(in));
  in.type = HR_MSG_STATUS;
  in.id = 10;
  roundtrip_request(&in, &out);

  assert_int_equal(out.u.status.detail, HR_STATUS_FULL);
  expect_request_bytes(&in, "{\"id\":10,\"type\":\"status\"}\n");
  in.u.status.detail = HR_STATUS_SUMMARY;
  roundtrip_request(&in, &out);
  assert_int_equal(out.u.status.detail, HR_STATUS_SUMMARY);
  expect_request_bytes(&in, "{\"id\":10,\"type\":\"status\","
                       "\"detail\":\"summary\"}\n");
  /* "full" may be sent; it is the default, so it is never written. */
  {
    static const char full[] = "{\"id\":3,\"type\":\"status\","
                               "\"detail\":\"full\"}";
    hr_proto_error err;
    assert_int_equal(hr_proto_decode_request(full, strlen(full), &out, &err),
                     HR_OK);
    assert_int_equal(out.u.status.detail, HR_STATUS_FULL);
  }
  {
    hr_buf b;
    hr_buf_init(&b, 0);
    in.u.status.detail = HR_STATUS_DETAIL_COUNT;
    assert_int_equal(hr_proto_encode_request(&in, &b), HR_EINVAL);
    in.u.status.detail = (hr_status_detail)-1;
    assert_int_equal(hr_proto_encode_request(&in, &b), HR_EINVAL);
    assert_int_equal(b.len, 0);
    hr_buf_free(&b);
  }
  memset(&in, 0, sizeof(in));
  in.id = 10;

  in.type = HR_MSG_POLICY_GET;
  roundtrip_request(&in, &out);

  in.type = HR_MSG_METRICS;
  roundtrip_request(&in, &out);

  in.type = HR_MSG_SUBSCRIBE;
  in.u.subscribe.gpu = -1;
  roundtrip_request(&in, &out);
  assert_int_equal(out.u.subscribe.gpu, -1);
  in.u.subscribe.gpu = 5;
  roundtrip_request(&in, &out);
  assert_int_equal(out.u.subscribe.gpu, 5);

  /* policy_set: every subset of the four fields comes back as sent. */
  for(f = 1; f < 16; f++) {
    memset(&in, 0, sizeof(in));
    in.type = HR_MSG_POLICY_SET;
    in.id = 11;
    in.u.policy_set.fields = f;
    in.u.policy_set.policy.min_headroom = 4;
    in.u.policy_set.policy.max_headroom = 1024;
    in.u.policy_set.policy.min_grid = 1;
    in.u.policy_set.policy.incident_raise = 1;
    roundtrip_request(&in, &out);
    assert_int_equal(out.u.policy_set.fields, f);
    if(f & HR_POLICY_MIN_HEADROOM)
      assert_int_equal(out.u.policy_set.policy.min_headroom, 4);
    if(f & HR_POLICY_MAX_HEADROOM)
      assert_int_equal(out.u.policy_set.policy.max_headroom, 1024);
    if(f & HR_POLICY_MIN_GRID)
      assert_int_equal(out.u.policy_set.policy.min_grid, 1);
    if(f & HR_POLICY_INCIDENT_RAISE)
      assert_int_equal(out.u.policy_set.policy.incident_raise, 1);
  }
  in.u.policy_set.fields = HR_POLICY_INCIDENT_RAISE;
  in.u.policy_set.policy.incident_raise = 0;
  roundtrip_request(&in, &out);
  assert_int_equal(out.u.policy_set.policy.incident_raise, 0);
}

/* ---- Replies and events round-trip ------------------------------------- */

static void test_reply_hello(void **state)
{
  hr_reply in, out;
  int i;

  (void)state;
  memset(&in, 0, sizeof(in));
  in.type = HR_MSG_HELLO;
  in.id = 1;
  in.u.hello.version = 1;
  strcpy(in.u.hello.daemon, "headroomd 0.1.0");
  in.u.hello.client = 12;
  in.u.hello.topology.source = HR_TOPO_CUDA;
  in.u.hello.topology.n_gpus = HR_MAX_GPUS;
  for(i = 0; i < HR_MAX_GPUS; i++) {
    in.u.hello.topology.gpus[i].index = i;
    in.u.hello.topology.gpus[i].sms = i == 0 ? 1024 : 132;
    snprintf(in.u.hello.topology.gpus[i].name, HR_NAME_MAX,
             i % 2 ? "NVIDIA H200" : "");
  }
  roundtrip_reply(&in, &out);
  assert_int_equal(out.u.hello.version, 1);
  assert_string_equal(out.u.hello.daemon, "headroomd 0.1.0");
  assert_int_equal(out.u.hello.client, 12);
  assert_int_equal(out.u.hello.topology.source, HR_TOPO_CUDA);
  assert_int_equal(out.u.hello.topology.n_gpus, HR_MAX_GPUS);
  for(i = 0; i < HR_MAX_GPUS; i++) {
    assert_int_equal(out.u.hello.topology.gpus[i].index, i);
    assert_int_equal(out.u.hello.topology.gpus[i].sms,
                     in.u.hello.topology.gpus[i].sms);
    assert_string_equal(out.u.hello.topology.gpus[i].name,
                        in.u.hello.topology.gpus[i].name);
  }

  in.u.hello.topology.source = HR_TOPO_CONFIG;
  in.u.hello.topology.n_gpus = 0;    /* a node with no GPU is still valid */
  roundtrip_reply(&in, &out);
  assert_int_equal(out.u.hello.topology.source, HR_TOPO_CONFIG);
  assert_int_equal(out.u.hello.topology.n_gpus, 0);
}

static void test_reply_others(void **state)
{
  static const hr_msg_type empty[] = {
    HR_MSG_UNREGISTER_COMM, HR_MSG_RELEASE, HR_MSG_SUBSCRIBE,
  };
  hr_reply in, out;
  size_t i;

  (void)state;
  memset(&in, 0, sizeof(in));
  in.type = HR_MSG_REGISTER_COMM;
  in.id = 3;
  in.u.register_comm.comm = 17;
  roundtrip_reply(&in, &out);
  assert_int_equal(out.u.register_comm.comm, 17);

  for(i = 0; i < sizeof(empty) / sizeof(empty[0]); i++) {
    memset(&in, 0, sizeof(in));
    in.type = empty[i];
    in.id = 100 + (int64_t)i;
    roundtrip_reply(&in, &out);
  }

  memset(&in, 0, sizeof(in));
  in.type = HR_MSG_LEASE;
  in.id = 5;
  in.u.lease.lease = 99;
  sample_budget(&in.u.lease.budget, 3);
  roundtrip_reply(&in, &out);
  assert_int_equal(out.u.lease.lease, 99);
  assert_budget_equal(&out.u.lease.budget, &in.u.lease.budget);

  memset(&in, 0, sizeof(in));
  in.type = HR_MSG_REPORT;
  in.id = 6;
  in.u.report.incident = 7;
  sample_budget(&in.u.report.budget, 0);
  in.u.report.budget.mode = HR_MODE_HEADROOM;
  in.u.report.budget.degraded = 0;
  in.u.report.budget.nccl_nvls_enable = 2;
  roundtrip_reply(&in, &out);
  assert_int_equal(out.u.report.incident, 7);
  assert_budget_equal(&out.u.report.budget, &in.u.report.budget);

  for(i = 0; i < 2; i++) {
    memset(&in, 0, sizeof(in));
    in.type = i ? HR_MSG_POLICY_SET : HR_MSG_POLICY_GET;
    in.id = 8;
    in.u.policy.min_headroom = 2;
    in.u.policy.max_headroom = 32;
    in.u.policy.min_grid = 64;
    in.u.policy.incident_raise = (int)i;
    roundtrip_reply(&in, &out);
    assert_policy_equal(&out.u.policy, &in.u.policy);
  }
}

static void test_reply_events_and_errors(void **state)
{
  hr_reply in, out;
  hr_proto_error err;
  hr_buf b;
  int code;

  (void)state;
  memset(&in, 0, sizeof(in));
  in.type = HR_MSG_BUDGET;
  in.id = -1;
  sample_budget(&in.u.budget, 7);
  roundtrip_reply(&in, &out);
  assert_budget_equal(&out.u.budget, &in.u.budget);

  /* An event's id is never written, whatever the struct says. */
  in.id = 55;
  encoded_reply(&in, &b);
  assert_null(strstr(b.data, "\"id\""));
  assert_int_equal(hr_proto_decode_reply(b.data, b.len - 1, &out, &err),
                   HR_OK);
  assert_int_equal(out.id, -1);
  hr_buf_free(&b);

  memset(&in, 0, sizeof(in));
  in.type = HR_MSG_SHUTDOWN;
  in.id = -1;
  strcpy(in.u.shutdown_reason, "SIGTERM: stopping");
  roundtrip_reply(&in, &out);
  assert_string_equal(out.u.shutdown_reason, "SIGTERM: stopping");

  for(code = 0; code < HR_WERR_COUNT; code++) {
    memset(&in, 0, sizeof(in));
    in.type = HR_MSG_ERROR;
    in.id = code == 0 ? -1 : code;
    in.u.error.code = (hr_wire_error)code;
    snprintf(in.u.error.message, sizeof(in.u.error.message), "because %d",
             code);
    roundtrip_reply(&in, &out);
    assert_int_equal(out.u.error.code, code);
    assert_string_equal(out.u.error.message, in.u.error.message);
  }
}

/* A status with several of everything, allocated as the daemon would. */
static void sample_status(hr_status *s)
{
  int g, i;

  memset(s, 0, sizeof(*s));
  strcpy(s->daemon, "headroomd 0.1.0");
  s->uptime_ms = 123456789;
  s->requests = HR_PROTO_MAX_ID;
  s->topology_source = HR_TOPO_CONFIG;
  s->policy.min_headroom = 2;
  s->policy.max_headroom = 32;
  s->policy.min_grid = 64;
  s->policy.incident_raise = 1;
  s->n_clients = 3;
  s->clients = calloc(3, sizeof(*s->clients));
  assert_non_null(s->clients);
  for(i = 0; i < 3; i++) {
    s->clients[i].id = i + 1;
    s->clients[i].pid = 1000 + i;
    s->clients[i].uid = i == 0 ? 0 : 1000;
    s->clients[i].gid = i == 2 ? -1 : 100;
    snprintf(s->clients[i].name, HR_NAME_MAX, "client-%d", i);
    s->clients[i].operator_ = i == 0;
    s->clients[i].subscribed = i != 1;
  }
  s->n_gpus = 3;
  s->gpus = calloc(3, sizeof(*s->gpus));
  assert_non_null(s->gpus);
  for(g = 0; g < 3; g++) {
    hr_status_gpu *gp = &s->gpus[g];
    gp->info.index = g;
    gp->info.sms = 132;
    strcpy(gp->info.name, "NVIDIA H200");
    sample_budget(&gp->budget, g);
    gp->budget.mode = HR_MODE_HEADROOM;
    gp->budget.degraded = 0;
    gp->comm_ctas = 24 * g;
    gp->raised = 2 * g;
    gp->n_clients = g;
    /* GPU 0 has nothing: empty arrays must round-trip too. */
    gp->n_comms = g;
    gp->n_leases = g;
    gp->n_incidents = g * 2;
    gp->comms = g ? calloc((size_t)g, sizeof(*gp->comms)) : NULL;
    gp->leases = g ? calloc((size_t)g, sizeof(*gp->leases)) : NULL;
    gp->incidents = g ? calloc((size_t)g * 2, sizeof(*gp->incidents)) : NULL;
    for(i = 0; i < gp->n_comms; i++) {
      gp->comms[i].id = 10 * g + i + 1;
      gp->comms[i].client = i + 1;
      snprintf(gp->comms[i].name, HR_NAME_MAX, "comm-%d-%d", g, i);
      gp->comms[i].ctas = 8;
      gp->comms[i].cga = 1 + i;
      gp->comms[i].concurrent = 3;
    }
    for(i = 0; i < gp->n_leases; i++) {
      gp->leases[i].id = 20 * g + i + 1;
      gp->leases[i].client = 2;
      gp->leases[i].cluster = 1 << i;
      gp->leases[i].mode = (hr_mode)(i % 2);
    }
    for(i = 0; i < gp->n_incidents; i++) {
      hr_status_incident *in = &gp->incidents[i];
      in->id = 30 * g + i + 1;
      in->client = i % 2 ? 0 : 3;   /* 0: a client from before a restart */
      in->lease = i % 2 ? 0 : 5;
      in->time_ms = 1718000000000LL + i;
      in->kind = (hr_incident_kind)(i % 2);
      unknown_detail(&in->detail);
      if(i % 2 == 0) {
        in->detail.barrier = 1;
        in->detail.arrived = 128;
        in->detail.expected = 130;
        in->detail.timeout_ms = 2000;
        strcpy(in->message, "barrier 1 timed out");
      }
      else
        in->detail.cuda_error = 720;
    }
  }
}

static void assert_status_equal(const hr_status *a, const hr_status *b)
{
  int g, i;

  assert_string_equal(a->daemon, b->daemon);
  assert_int_equal(a->uptime_ms, b->uptime_ms);
  assert_int_equal(a->requests, b->requests);
  assert_int_equal(a->topology_source, b->topology_source);
  assert_policy_equal(&a->policy, &b->policy);
  assert_int_equal(a->n_clients, b->n_clients);
  for(i = 0; i < a->n_clients; i++) {
    assert_int_equal(a->clients[i].id, b->clients[i].id);
    assert_int_equal(a->clients[i].pid, b->clients[i].pid);
    assert_int_equal(a->clients[i].uid, b->clients[i].uid);
    assert_int_equal(a->clients[i].gid, b->clients[i].gid);
    assert_string_equal(a->clients[i].name, b->clients[i].name);
    assert_int_equal(a->clients[i].operator_, b->clients[i].operator_);
    assert_int_equal(a->clients[i].subscribed, b->clients[i].subscribed);
  }
  assert_int_equal(a->n_gpus, b->n_gpus);
  for(g = 0; g < a->n_gpus; g++) {
    const hr_status_gpu *x = &a->gpus[g], *y = &b->gpus[g];
    assert_int_equal(x->info.index, y->info.index);
    assert_int_equal(x->info.sms, y->info.sms);
    assert_string_equal(x->info.name, y->info.name);
    assert_budget_equal(&x->budget, &y->budget);
    assert_int_equal(x->comm_ctas, y->comm_ctas);
    assert_int_equal(x->raised, y->raised);
    assert_int_equal(x->n_clients, y->n_clients);
    assert_int_equal(x->n_comms, y->n_comms);
    assert_int_equal(x->n_leases, y->n_leases);
    assert_int_equal(x->n_incidents, y->n_incidents);
    for(i = 0; i < x->n_comms; i++) {
      assert_int_equal(x->comms[i].id, y->comms[i].id);
      assert_int_equal(x->comms[i].client, y->comms[i].client);
      assert_string_equal(x->comms[i].name, y->comms[i].name);
      assert_int_equal(x->comms[i].ctas, y->comms[i].ctas);
      assert_int_equal(x->comms[i].cga, y->comms[i].cga);
      assert_int_equal(x->comms[i].concurrent, y->comms[i].concurrent);
    }
    for(i = 0; i < x->n_leases; i++) {
      assert_int_equal(x->leases[i].id, y->leases[i].id);
      assert_int_equal(x->leases[i].client, y->leases[i].client);
      assert_int_equal(x->leases[i].cluster, y->leases[i].cluster);
      assert_int_equal(x->leases[i].mode, y->leases[i].mode);
    }
    for(i = 0; i < x->n_incidents; i++) {
      assert_int_equal(x->incidents[i].id, y->incidents[i].id);
      assert_int_equal(x->incidents[i].client, y->incidents[i].client);
      assert_int_equal(x->incidents[i].lease, y->incidents[i].lease);
      assert_int_equal(x->incidents[i].time_ms, y->incidents[i].time_ms);
      assert_int_equal(x->incidents[i].kind, y->incidents[i].kind);
      assert_detail_equal(&x->incidents[i].detail, &y->incidents[i].detail);
      assert_string_equal(x->incidents[i].message, y->incidents[i].message);
    }
  }
}

static void test_reply_status(void **state)
{
  hr_reply in, out;

  (void)state;
  memset(&in, 0, sizeof(in));
  in.type = HR_MSG_STATUS;
  in.id = 77;
  sample_status(&in.u.status);
  roundtrip_reply(&in, &out);
  assert_status_equal(&out.u.status, &in.u.status);
  /* A full status is counted from its lists as it is read. */
  assert_int_equal(out.u.status.detail, HR_STATUS_FULL);
  assert_false(out.u.status.truncated);
  assert_int_equal(out.u.status.client_count, 3);
  assert_int_equal(out.u.status.gpus[2].comm_count, 2);
  assert_int_equal(out.u.status.gpus[2].lease_count[HR_MODE_HEADROOM], 1);
  assert_int_equal(out.u.status.gpus[2].lease_count[HR_MODE_COOPERATIVE], 1);
  assert_int_equal(out.u.status.gpus[2].lease_count[HR_MODE_AGNOSTIC], 0);
  assert_int_equal(out.u.status.gpus[2].incident_count, 4);
  assert_int_equal(out.u.status.gpus[0].incident_count, 0);
  hr_reply_free(&out);
  assert_null(out.u.status.gpus);
  assert_null(out.u.status.clients);
  hr_reply_free(&out);              /* twice is harmless */
  hr_status_free(&in.u.status);

  /* Nothing at all: a daemon that just started on a GPU-less node. */
  memset(&in, 0, sizeof(in));
  in.type = HR_MSG_STATUS;
  in.id = 78;
  in.u.status.policy.min_grid = 1;
  roundtrip_reply(&in, &out);
  assert_status_equal(&out.u.status, &in.u.status);
  assert_null(out.u.status.gpus);
  hr_reply_free(&out);
}

/* sample_status() as a summary: the counts, and no list. */
static void sample_summary(hr_status *s, int truncated)
{
  int g, m;

  sample_status(s);
  free(s->clients);
  s->clients = NULL;
  s->n_clients = 0;
  s->detail = HR_STATUS_SUMMARY;
  s->truncated = truncated;
  s->client_count = 612;
  for(g = 0; g < s->n_gpus; g++) {
    hr_status_gpu *gp = &s->gpus[g];
    gp->comm_count = 100 * g + 1;
    for(m = 0; m < HR_MODE_COUNT; m++)
      gp->lease_count[m] = 10 * g + m;
    gp->incident_count = g * 2;
    free(gp->comms);
    free(gp->leases);
    free(gp->incidents);
    gp->comms = NULL;
    gp->leases = NULL;
    gp->incidents = NULL;
    gp->n_comms = gp->n_leases = gp->n_incidents = 0;
  }
}

static void test_reply_status_summary(void **state)
{
  hr_reply in, out;
  hr_buf b;
  int g, m, t;

  (void)state;
  for(t = 0; t < 2; t++) {
    memset(&in, 0, sizeof(in));
    in.type = HR_MSG_STATUS;
    in.id = 79;
    sample_summary(&in.u.status, t);
    roundtrip_reply(&in, &out);
    assert_int_equal(out.u.status.detail, HR_STATUS_SUMMARY);
    assert_int_equal(out.u.status.truncated, t);
    assert_int_equal(out.u.status.client_count, 612);
    assert_int_equal(out.u.status.n_clients, 0);
    assert_null(out.u.status.clients);
    assert_int_equal(out.u.status.n_gpus, 3);
    for(g = 0; g < 3; g++) {
      const hr_status_gpu *x = &out.u.status.gpus[g];
      const hr_status_gpu *y = &in.u.status.gpus[g];
      assert_budget_equal(&x->budget, &y->budget);
      assert_int_equal(x->n_clients, y->n_clients);
      assert_int_equal(x->comm_ctas, y->comm_ctas);
      assert_int_equal(x->raised, y->raised);
      assert_int_equal(x->comm_count, y->comm_count);
      for(m = 0; m < HR_MODE_COUNT; m++)
        assert_int_equal(x->lease_count[m], y->lease_count[m]);
      assert_int_equal(x->incident_count, y->incident_count);
      assert_int_equal(x->n_comms + x->n_leases + x->n_incidents, 0);
      assert_null(x->comms);
      assert_null(x->leases);
      assert_null(x->incidents);
    }
    hr_reply_free(&out);
    /* No list on the wire, not even an empty one: a reader from before
     * summaries must refuse it rather than see an idle node. */
    encoded_reply(&in, &b);
    assert_null(strstr(b.data, "\"clients\":["));
    assert_null(strstr(b.data, "\"comms\""));
    assert_null(strstr(b.data, "\"leases\""));
    assert_null(strstr(b.data, "\"incidents\""));
    assert_non_null(strstr(b.data, "\"detail\":\"summary\""));
    hr_buf_free(&b);
    hr_status_free(&in.u.status);
  }

  /* Only a summary is ever truncated; a detail must have a name. */
  memset(&in, 0, sizeof(in));
  in.type = HR_MSG_STATUS;
  in.id = 80;
  sample_status(&in.u.status);
  hr_buf_init(&b, 0);
  in.u.status.truncated = 1;
  assert_int_equal(hr_proto_encode_reply(&in, &b), HR_EINVAL);
  in.u.status.truncated = 0;
  in.u.status.detail = HR_STATUS_DETAIL_COUNT;
  assert_int_equal(hr_proto_encode_reply(&in, &b), HR_EINVAL);
  assert_int_equal(b.len, 0);
  hr_buf_free(&b);
  hr_status_free(&in.u.status);
}

/* The largest summary there can be, 64 GPUs with every name and number at
 * its longest, still fits one line: it is what the daemon falls back to. */
static void test_summary_always_fits(void **state)
{
  hr_reply rep, out;
  hr_proto_error err;
  hr_status *s = &rep.u.status;
  hr_buf b;
  int g, m;

  (void)state;
  memset(&rep, 0, sizeof(rep));
  rep.type = HR_MSG_STATUS;
  rep.id = HR_PROTO_MAX_ID;
  /* '"' is written as two bytes: the longest name a peer can give. */
  memset(s->daemon, '"', HR_NAME_MAX - 1);
  s->uptime_ms = s->requests = HR_PROTO_MAX_ID;
  s->topology_source = HR_TOPO_DEFAULT;
  s->policy.min_headroom = s->policy.max_headroom = 1000;
  s->policy.min_grid = 1000;
  s->policy.incident_raise = 0;
  s->detail = HR_STATUS_SUMMARY;
  s->truncated = 1;
  s->client_count = 2147483647;
  s->n_gpus = HR_MAX_GPUS;
  s->gpus = calloc(HR_MAX_GPUS, sizeof(*s->gpus));
  assert_non_null(s->gpus);
  for(g = 0; g < HR_MAX_GPUS; g++) {
    hr_status_gpu *gp = &s->gpus[g];
    gp->info.index = g;
    gp->info.sms = 1024;
    memset(gp->info.name, '"', HR_NAME_MAX - 1);
    gp->budget.gpu = g;
    gp->budget.epoch = 4294967295u;
    gp->budget.mode = HR_MODE_HEADROOM;
    gp->budget.sms = 1024;
    gp->budget.cluster = 8;
    gp->budget.headroom = 1000;
    gp->budget.grid = 1000;
    gp->budget.nccl_min_ctas = 64;
    gp->budget.nccl_max_ctas = 64;
    gp->budget.nccl_cga_cluster_size = 8;
    gp->budget.nccl_nvls_enable = 2;
    gp->budget.degraded = 0;
    gp->budget.partition_granularity = 1000;
    gp->budget.partition_comm_sms = 1000;
    gp->budget.partition_nccl_max_ctas = 64;
    gp->budget_source = HR_SOURCE_CALIBRATED;
    gp->comm_ctas = gp->n_clients = 2147483647;
    gp->raised = 1024;
    gp->comm_count = gp->incident_count = 2147483647;
    for(m = 0; m < HR_MODE_COUNT; m++)
      gp->lease_count[m] = 2147483647;
  }
  hr_buf_init(&b, HR_PROTO_MAX_LINE);
  assert_int_equal(hr_proto_encode_reply(&rep, &b), HR_OK);
  /* With room to spare for a few more members in later versions. */
  assert_true(b.len < HR_PROTO_MAX_LINE * 7 / 8);
  assert_int_equal(hr_proto_decode_reply(b.data, b.len - 1, &out, &err),
                   HR_OK);
  assert_int_equal(out.u.status.n_gpus, HR_MAX_GPUS);
  assert_int_equal(out.u.status.gpus[63].lease_count[HR_MODE_PARTITION],
                   2147483647);
  hr_reply_free(&out);
  hr_buf_free(&b);
  hr_status_free(s);
}

/* Metrics with every counter set and `n_gpus` GPUs; `big` puts every
 * counter at its largest value. */
static void sample_metrics(hr_metrics *m, int n_gpus, int big)
{
  int64_t top = big ? HR_PROTO_MAX_ID : 0;
  int i, g, k;

  memset(m, 0, sizeof(*m));
  strcpy(m->daemon, "headroomd 0.1.0");
  m->uptime_ms = big ? HR_PROTO_MAX_ID : 81234;
  m->clients = big ? 2147483647 : 2;
  m->clients_resumed = big ? top : 1;
  m->client_degraded_ms = big ? top : 5400;
  for(i = HR_MSG_HELLO; i <= HR_MSG_METRICS; i++)
    m->requests[i] = big ? top : i * 3;
  m->requests[HR_MSG_NONE] = big ? top : 1;
  for(i = 0; i < HR_WERR_COUNT; i++)
    m->errors[i] = big ? top : i;
  for(i = 0; i < HR_METRICS_BUCKETS; i++) {
    /* count = sum of buckets must fit 2^53 - 1 too */
    m->latency[i] = big ? top / HR_METRICS_BUCKETS : i * 7;
    m->latency_count += m->latency[i];
  }
  m->latency_sum_us = big ? top : 1234;
  m->n_gpus = n_gpus;
  for(g = 0; g < n_gpus; g++) {
    hr_metrics_gpu *x = &m->gpus[g];
    x->index = g;
    x->sms = big ? 1024 : 132;
    x->headroom = big ? 1024 : 16 + g;
    x->grid = big ? 0 : 116 - g;
    x->epoch = big ? 4294967295u : (uint32_t)g + 3;
    x->nccl_max_ctas = big ? 64 : 8;
    x->partition_granularity = big ? 1024 : 8;
    x->partition_comm_sms = big ? 1024 : 8 * (g + 1);
    x->partition_nccl_max_ctas = big ? 64 : 4;
    x->clients = big ? 2147483647 : g;
    x->comms = big ? 2147483647 : g + 1;
    x->comm_ctas = big ? 2147483647 : 8 * g;
    for(k = 0; k < HR_MODE_COUNT; k++)
      x->leases[k] = big ? 2147483647 : g + k;
    x->raised = big ? 1024 : 2;
    for(k = 0; k < HR_INCIDENT_COUNT; k++)
      x->incidents[k] = big ? top : g * 2 + k;
  }
}

static void assert_metrics_equal(const hr_metrics *a, const hr_metrics *b)
{
  int i, g;

  assert_string_equal(a->daemon, b->daemon);
  assert_int_equal(a->uptime_ms, b->uptime_ms);
  assert_int_equal(a->clients, b->clients);
  assert_int_equal(a->clients_resumed, b->clients_resumed);
  assert_int_equal(a->client_degraded_ms, b->client_degraded_ms);
  for(i = 0; i < HR_MSG_COUNT; i++)
    assert_int_equal(a->requests[i], b->requests[i]);
  for(i = 0; i < HR_WERR_COUNT; i++)
    assert_int_equal(a->errors[i], b->errors[i]);
  for(i = 0; i < HR_METRICS_BUCKETS; i++)
    assert_int_equal(a->latency[i], b->latency[i]);
  assert_int_equal(a->latency_count, b->latency_count);
  assert_int_equal(a->latency_sum_us, b->latency_sum_us);
  assert_int_equal(a->n_gpus, b->n_gpus);
  for(g = 0; g < a->n_gpus; g++) {
    const hr_metrics_gpu *x = &a->gpus[g], *y = &b->gpus[g];
    assert_int_equal(x->index, y->index);
    assert_int_equal(x->sms, y->sms);
    assert_int_equal(x->headroom, y->headroom);
    assert_int_equal(x->grid, y->grid);
    assert_int_equal(x->epoch, y->epoch);
    assert_int_equal(x->nccl_max_ctas, y->nccl_max_ctas);
    assert_int_equal(x->partition_granularity, y->partition_granularity);
    assert_int_equal(x->partition_comm_sms, y->partition_comm_sms);
    assert_int_equal(x->partition_nccl_max_ctas, y->partition_nccl_max_ctas);
    assert_int_equal(x->clients, y->clients);
    assert_int_equal(x->comms, y->comms);
    assert_int_equal(x->comm_ctas, y->comm_ctas);
    for(i = 0; i < HR_MODE_COUNT; i++)
      assert_int_equal(x->leases[i], y->leases[i]);
    assert_int_equal(x->raised, y->raised);
    for(i = 0; i < HR_INCIDENT_COUNT; i++)
      assert_int_equal(x->incidents[i], y->incidents[i]);
  }
}

static void test_reply_metrics(void **state)
{
  static hr_reply in, out;          /* a few KiB each: off the stack */
  hr_buf b;

  (void)state;
  memset(&in, 0, sizeof(in));
  in.type = HR_MSG_METRICS;
  in.id = 13;
  sample_metrics(&in.u.metrics, 8, 0);
  roundtrip_reply(&in, &out);
  assert_metrics_equal(&out.u.metrics, &in.u.metrics);

  /* Every counter at 2^53 - 1 on 64 GPUs: the largest metrics reply there
   * can be still fits one line with room to spare, whatever the number of
   * clients, which status cannot promise. */
  sample_metrics(&in.u.metrics, HR_MAX_GPUS, 1);
  roundtrip_reply(&in, &out);
  assert_metrics_equal(&out.u.metrics, &in.u.metrics);
  encoded_reply(&in, &b);
  assert_true(b.len < HR_PROTO_MAX_LINE / 2);
  assert_true(b.len <= 30 * 1024); /* what PROTOCOL.md promises (§9) */
  hr_buf_free(&b);

  /* A daemon with no GPU and nothing counted yet. */
  sample_metrics(&in.u.metrics, 0, 0);
  memset(in.u.metrics.latency, 0, sizeof(in.u.metrics.latency));
  in.u.metrics.latency_count = 0;
  roundtrip_reply(&in, &out);
  assert_metrics_equal(&out.u.metrics, &in.u.metrics);
}

/* Counters named by a newer daemon are ignored, and names an older one
 * lacks read as 0, so either side can add a request type or error code. */
static void test_metrics_names_forward(void **state)
{
  static const char line[] =
    "{\"id\":1,\"type\":\"metrics\",\"metrics\":{\"daemon\":\"d\","
    "\"uptime_ms\":1,\"clients\":0,\"clients_resumed\":0,"
    "\"client_degraded_ms\":0,\"requests\":{\"hello\":4,\"teleport\":9},"
    "\"errors\":{\"rate_limited\":3},\"latency_us\":{\"buckets\":[1,0,0,0,"
    "0,0,0,0,0,0,0,1],\"count\":2,\"sum\":30000},\"gpus\":[{\"index\":0,"
    "\"sms\":132,\"headroom\":2,\"grid\":130,\"epoch\":1,"
    "\"nccl_max_ctas\":16,\"clients\":0,\"comms\":0,\"comm_ctas\":0,"
    "\"leases\":{\"partition\":1,\"teleport\":2},\"raised\":0,"
    "\"incidents\":{}}]}}";
  static hr_reply rep;
  hr_proto_error err;
  int i;

  (void)state;
  assert_int_equal(hr_proto_decode_reply(line, strlen(line), &rep, &err),
                   HR_OK);
  assert_int_equal(rep.type, HR_MSG_METRICS);
  assert_int_equal(rep.u.metrics.requests[HR_MSG_HELLO], 4);
  assert_int_equal(rep.u.metrics.requests[HR_MSG_LEASE], 0);
  assert_int_equal(rep.u.metrics.requests[HR_MSG_NONE], 0);
  for(i = 0; i < HR_WERR_COUNT; i++)
    assert_int_equal(rep.u.metrics.errors[i], 0);
  assert_int_equal(rep.u.metrics.latency[HR_METRICS_BUCKETS - 1], 1);
  assert_int_equal(rep.u.metrics.n_gpus, 1);
  for(i = 0; i < HR_MODE_COUNT; i++)
    assert_int_equal(rep.u.metrics.gpus[0].leases[i],
                     i == HR_MODE_PARTITION ? 1 : 0);
  /* No partition fields: a daemon from before partition mode. */
  assert_int_equal(rep.u.metrics.gpus[0].partition_granularity, 0);
  assert_int_equal(rep.u.metrics.gpus[0].partition_comm_sms, 0);
  assert_int_equal(rep.u.metrics.gpus[0].partition_nccl_max_ctas, 0);
}

/* ---- Bad input --------------------------------------------------------- */

#define BAD HR_WERR_BAD_REQUEST
#define UNKNOWN HR_WERR_UNKNOWN_TYPE

typedef struct bad_case {
  const char *line;
  hr_wire_error code;
  const char *needle;             /* the message must contain it */
  int64_t id;                     /* echoed id, -1 when unreadable */
} bad_case;

static const bad_case bad_requests[] = {
  /* Framing and JSON. */
  { "", BAD, "invalid JSON", -1 },
  { "   ", BAD, "invalid JSON", -1 },
  { "{", BAD, "invalid JSON", -1 },
  { "{\"id\":1,\"type\":\"status\"", BAD, "invalid JSON", -1 },
  { "{\"id\":1,}", BAD, "invalid JSON", -1 },
  { "{'id':1}", BAD, "invalid JSON", -1 },
  { "{\"id\":1,\"type\":\"status\",\"x\":NaN}", BAD, "invalid JSON", -1 },
  { "{\"id\":1,\"type\":\"status\",\"x\":\"\\ud800\"}", BAD, "invalid JSON",
    -1 },
  { "[1,2]", BAD, "message: must be a JSON object", -1 },
  { "\"status\"", BAD, "message: must be a JSON object", -1 },
  { "42", BAD, "message: must be a JSON object", -1 },
  { "null", BAD, "message: must be a JSON object", -1 },
  { "{\"id\":1,\"type\":\"status\"}x", BAD, "after the object", -1 },
  { "{\"id\":1,\"type\":\"status\"} {}", BAD, "after the object", -1 },
  { "{\"id\":1,\"type\":\"status\"}}", BAD, "after the object", -1 },
  { "{\"id\":1,\"type\":\"st\x01us\"}", BAD, "control byte 0x01", -1 },
  { "{\"id\":1,\"type\":\"status\",\"x\":\"\xff\"}", BAD, "UTF-8", -1 },
  { "{\"id\":1,\"type\":\"status\",\"x\":\"\xc0\xaf\"}", BAD, "UTF-8", -1 },
  { "{\"id\":1,\"type\":\"status\",\"x\":\"\xed\xa0\x80\"}", BAD, "UTF-8",
    -1 },
  { "{\"id\":1,\"type\":\"hello\",\"versions\":[1],\"client\":\"a\\u0000b\"}",
    BAD, "\\u0000 in a string", -1 },
  /* id. */
  { "{\"type\":\"status\"}", BAD, "id: required", -1 },
  { "{\"id\":\"1\",\"type\":\"status\"}", BAD, "id: must be an integer", -1 },
  { "{\"id\":null,\"type\":\"status\"}", BAD, "id: must be an integer", -1 },
  { "{\"id\":true,\"type\":\"status\"}", BAD, "id: must be an integer", -1 },
  { "{\"id\":[1],\"type\":\"status\"}", BAD, "id: must be an integer", -1 },
  { "{\"id\":-1,\"type\":\"status\"}", BAD, "id: must be an integer 0..", -1 },
  { "{\"id\":1.5,\"type\":\"status\"}", BAD, "id: must be an integer", -1 },
  { "{\"id\":1e300,\"type\":\"status\"}", BAD, "id: must be an integer", -1 },
  { "{\"id\":-1e300,\"type\":\"status\"}", BAD, "id: must be an integer",
    -1 },
  { "{\"id\":1e400,\"type\":\"status\"}", BAD, "id: must be an integer", -1 },
  { "{\"id\":9007199254740992,\"type\":\"status\"}", BAD,
    "id: must be an integer 0..9007199254740991", -1 },
  { "{\"id\":1,\"id\":2,\"type\":\"status\"}", BAD,
    "id: given more than once", -1 },
  /* type. */
  { "{\"id\":4}", BAD, "type: required", 4 },
  { "{\"id\":4,\"type\":7}", BAD, "type: must be a string", 4 },
  { "{\"id\":4,\"type\":null}", BAD, "type: must be a string", 4 },
  { "{\"id\":4,\"type\":\"bogus\"}", UNKNOWN, "type: \"bogus\"", 4 },
  { "{\"id\":4,\"type\":\"STATUS\"}", UNKNOWN, "type: \"STATUS\"", 4 },
  { "{\"id\":4,\"type\":\"budget\"}", UNKNOWN, "type: \"budget\"", 4 },
  { "{\"id\":4,\"type\":\"shutdown\"}", UNKNOWN, "type:", 4 },
  { "{\"id\":4,\"type\":\"error\"}", UNKNOWN, "type:", 4 },
  { "{\"id\":4,\"type\":\"\"}", UNKNOWN, "type:", 4 },
  { "{\"id\":4,\"type\":\"status\",\"type\":\"hello\"}", BAD,
    "type: given more than once", 4 },
  /* hello. */
  { "{\"id\":5,\"type\":\"hello\"}", BAD, "versions: required", 5 },
  { "{\"id\":5,\"type\":\"hello\",\"versions\":1}", BAD,
    "versions: must be an array", 5 },
  { "{\"id\":5,\"type\":\"hello\",\"versions\":[]}", BAD,
    "versions: must list 1..8", 5 },
  { "{\"id\":5,\"type\":\"hello\",\"versions\":[1,2,3,4,5,6,7,8,9]}", BAD,
    "versions: must have at most 8 items", 5 },
  { "{\"id\":5,\"type\":\"hello\",\"versions\":[1,0]}", BAD,
    "versions[1]: must be an integer 1..1000", 5 },
  { "{\"id\":5,\"type\":\"hello\",\"versions\":[1001]}", BAD,
    "versions[0]: must be an integer 1..1000", 5 },
  { "{\"id\":5,\"type\":\"hello\",\"versions\":[\"1\"]}", BAD,
    "versions[0]: must be an integer", 5 },
  { "{\"id\":5,\"type\":\"hello\",\"versions\":[1.5]}", BAD,
    "versions[0]: must be an integer", 5 },
  { "{\"id\":5,\"type\":\"hello\",\"versions\":[1],\"client\":5}", BAD,
    "client: must be a string", 5 },
  { "{\"id\":5,\"type\":\"hello\",\"versions\":[1],\"degraded_ms\":-1}",
    BAD, "degraded_ms: must be an integer 0..9007199254740991", 5 },
  { "{\"id\":5,\"type\":\"hello\",\"versions\":[1],\"degraded_ms\":1.5}",
    BAD, "degraded_ms: must be an integer", 5 },
  { "{\"id\":5,\"type\":\"hello\",\"versions\":[1],\"degraded_ms\":"
    "9007199254740992}", BAD, "degraded_ms: must be an integer", 5 },
  { "{\"id\":5,\"type\":\"hello\",\"versions\":[1],\"degraded_ms\":"
    "\"5\"}", BAD, "degraded_ms: must be an integer", 5 },
  { "{\"id\":5,\"type\":\"hello\",\"versions\":[1],\"client\":\""
    "0123456789012345678901234567890123456789012345678901234567890123\"}",
    BAD, "client: must be a string of at most 63 bytes", 5 },
  /* Names are shown to operators: no control character, even escaped. */
  { "{\"id\":5,\"type\":\"hello\",\"versions\":[1],\"client\":"
    "\"x\\u001b]0;pwned\\u0007\"}", BAD,
    "client: must not hold control characters (U+001B at byte 1)", 5 },
  { "{\"id\":5,\"type\":\"hello\",\"versions\":[1],\"client\":"
    "\"rank\\t0\"}", BAD,
    "client: must not hold control characters (U+0009 at byte 4)", 5 },
  { "{\"id\":5,\"type\":\"hello\",\"versions\":[1],\"client\":"
    "\"\\u007f\"}", BAD,
    "client: must not hold control characters (U+007F at byte 0)", 5 },
  { "{\"id\":5,\"type\":\"hello\",\"versions\":[1],\"client\":"
    "\"ab\xc2\x9b" "31m\"}", BAD,
    "client: must not hold control characters (U+009B at byte 2)", 5 },
  { "{\"id\":5,\"type\":\"hello\",\"versions\":[1],\"client\":"
    "\"\\u0085\"}", BAD,
    "client: must not hold control characters (U+0085 at byte 0)", 5 },
  { "{\"id\":6,\"type\":\"register_comm\",\"gpu\":0,\"name\":\"dp\\n\","
    "\"ctas\":8,\"cga\":1,\"concurrent\":1}", BAD,
    "name: must not hold control characters (U+000A at byte 2)", 6 },
  /* register_comm. */
  { "{\"id\":6,\"type\":\"register_comm\",\"name\":\"dp\",\"ctas\":8,\"cga\":1,"
    "\"concurrent\":3}", BAD, "gpu: required", 6 },
  { "{\"id\":6,\"type\":\"register_comm\",\"gpu\":0,\"ctas\":8,\"cga\":1,"
    "\"concurrent\":3}", BAD, "name: required", 6 },
  { "{\"id\":6,\"type\":\"register_comm\",\"gpu\":0,\"name\":\"dp\",\"cga\":1,"
    "\"concurrent\":3}", BAD, "ctas: required", 6 },
  { "{\"id\":6,\"type\":\"register_comm\",\"gpu\":0,\"name\":\"dp\","
    "\"ctas\":8,\"concurrent\":3}", BAD, "cga: required", 6 },
  { "{\"id\":6,\"type\":\"register_comm\",\"gpu\":0,\"name\":\"dp\","
    "\"ctas\":8,\"cga\":1}", BAD, "concurrent: required", 6 },
  { "{\"id\":6,\"type\":\"register_comm\",\"gpu\":64,\"name\":\"dp\","
    "\"ctas\":8,\"cga\":1,\"concurrent\":3}", BAD,
    "gpu: must be an integer 0..63", 6 },
  { "{\"id\":6,\"type\":\"register_comm\",\"gpu\":-1,\"name\":\"dp\","
    "\"ctas\":8,\"cga\":1,\"concurrent\":3}", BAD, "gpu: must be", 6 },
  { "{\"id\":6,\"type\":\"register_comm\",\"gpu\":\"0\",\"name\":\"dp\","
    "\"ctas\":8,\"cga\":1,\"concurrent\":3}", BAD, "gpu: must be", 6 },
  { "{\"id\":6,\"type\":\"register_comm\",\"gpu\":0.5,\"name\":\"dp\","
    "\"ctas\":8,\"cga\":1,\"concurrent\":3}", BAD, "gpu: must be", 6 },
  { "{\"id\":6,\"type\":\"register_comm\",\"gpu\":0,\"name\":7,"
    "\"ctas\":8,\"cga\":1,\"concurrent\":3}", BAD, "name: must be a string",
    6 },
  { "{\"id\":6,\"type\":\"register_comm\",\"gpu\":0,\"name\":\""
    "0123456789012345678901234567890123456789012345678901234567890123\","
    "\"ctas\":8,\"cga\":1,\"concurrent\":3}", BAD,
    "name: must be a string of at most 63 bytes", 6 },
  { "{\"id\":6,\"type\":\"register_comm\",\"gpu\":0,\"name\":\"dp\","
    "\"ctas\":0,\"cga\":1,\"concurrent\":3}", BAD,
    "ctas: must be an integer 1..64", 6 },
  { "{\"id\":6,\"type\":\"register_comm\",\"gpu\":0,\"name\":\"dp\","
    "\"ctas\":65,\"cga\":1,\"concurrent\":3}", BAD,
    "ctas: must be an integer 1..64", 6 },
  { "{\"id\":6,\"type\":\"register_comm\",\"gpu\":0,\"name\":\"dp\","
    "\"ctas\":1e300,\"cga\":1,\"concurrent\":3}", BAD,
    "ctas: must be an integer 1..64", 6 },
  { "{\"id\":6,\"type\":\"register_comm\",\"gpu\":0,\"name\":\"dp\","
    "\"ctas\":2147483648,\"cga\":1,\"concurrent\":3}", BAD,
    "ctas: must be an integer 1..64", 6 },
  { "{\"id\":6,\"type\":\"register_comm\",\"gpu\":0,\"name\":\"dp\","
    "\"ctas\":8,\"cga\":9,\"concurrent\":3}", BAD,
    "cga: must be an integer 1..8", 6 },
  { "{\"id\":6,\"type\":\"register_comm\",\"gpu\":0,\"name\":\"dp\","
    "\"ctas\":8,\"cga\":1,\"concurrent\":65}", BAD,
    "concurrent: must be an integer 1..64", 6 },
  { "{\"id\":6,\"type\":\"register_comm\",\"gpu\":0,\"name\":\"dp\","
    "\"ctas\":8,\"cga\":1,\"concurrent\":true}", BAD,
    "concurrent: must be an integer", 6 },
  /* unregister_comm, release. */
  { "{\"id\":7,\"type\":\"unregister_comm\"}", BAD, "comm: required", 7 },
  { "{\"id\":7,\"type\":\"unregister_comm\",\"comm\":0}", BAD,
    "comm: must be an integer 1..9007199254740991", 7 },
  { "{\"id\":7,\"type\":\"release\",\"lease\":-3}", BAD,
    "lease: must be an integer 1..", 7 },
  { "{\"id\":7,\"type\":\"release\",\"lease\":\"5\"}", BAD,
    "lease: must be an integer", 7 },
  /* lease. */
  { "{\"id\":8,\"type\":\"lease\",\"gpu\":0,\"cluster\":3,\"mode\":"
    "\"headroom\"}", BAD, "cluster: must be 1, 2, 4 or 8", 8 },
  { "{\"id\":8,\"type\":\"lease\",\"gpu\":0,\"cluster\":16,\"mode\":"
    "\"headroom\"}", BAD, "cluster: must be", 8 },
  { "{\"id\":8,\"type\":\"lease\",\"gpu\":0,\"cluster\":0,\"mode\":"
    "\"headroom\"}", BAD, "cluster: must be", 8 },
  { "{\"id\":8,\"type\":\"lease\",\"gpu\":0,\"cluster\":2}", BAD,
    "mode: required", 8 },
  { "{\"id\":8,\"type\":\"lease\",\"gpu\":0,\"cluster\":2,\"mode\":"
    "\"green\"}", BAD,
    "mode: must be \"headroom\", \"cooperative\", \"agnostic\" or "
    "\"partition\"", 8 },
  { "{\"id\":8,\"type\":\"lease\",\"gpu\":0,\"cluster\":2,\"mode\":"
    "\"Agnostic\"}", BAD, "mode: must be", 8 },
  { "{\"id\":8,\"type\":\"lease\",\"gpu\":0,\"cluster\":2,\"mode\":0}", BAD,
    "mode: must be", 8 },
  /* report. */
  { "{\"id\":9,\"type\":\"report\",\"gpu\":0}", BAD, "kind: required", 9 },
  { "{\"id\":9,\"type\":\"report\",\"gpu\":0,\"kind\":\"oops\"}", BAD,
    "kind: must be \"barrier_timeout\" or \"launch_failure\"", 9 },
  { "{\"id\":9,\"type\":\"report\",\"gpu\":0,\"kind\":\"launch_failure\","
    "\"lease\":0}", BAD, "lease: must be an integer 1..", 9 },
  { "{\"id\":9,\"type\":\"report\",\"gpu\":0,\"kind\":\"launch_failure\","
    "\"detail\":[]}", BAD, "detail: must be an object", 9 },
  { "{\"id\":9,\"type\":\"report\",\"gpu\":0,\"kind\":\"launch_failure\","
    "\"detail\":{\"barrier\":-2}}", BAD,
    "detail.barrier: must be an integer -1..2147483647", 9 },
  { "{\"id\":9,\"type\":\"report\",\"gpu\":0,\"kind\":\"launch_failure\","
    "\"detail\":{\"sm\":2147483648}}", BAD, "detail.sm: must be", 9 },
  { "{\"id\":9,\"type\":\"report\",\"gpu\":0,\"kind\":\"launch_failure\","
    "\"detail\":{\"cuda_error\":\"x\"}}", BAD, "detail.cuda_error:", 9 },
  { "{\"id\":9,\"type\":\"report\",\"gpu\":0,\"kind\":\"launch_failure\","
    "\"message\":false}", BAD, "message: must be a string", 9 },
  /* subscribe. */
  { "{\"id\":10,\"type\":\"subscribe\",\"gpu\":64}", BAD,
    "gpu: must be an integer 0..63", 10 },
  { "{\"id\":10,\"type\":\"subscribe\",\"gpu\":-1}", BAD, "gpu: must be", 10 },
  /* status. */
  { "{\"id\":12,\"type\":\"status\",\"detail\":\"short\"}", BAD,
    "detail: must be \"full\" or \"summary\"", 12 },
  { "{\"id\":12,\"type\":\"status\",\"detail\":1}", BAD,
    "detail: must be", 12 },
  { "{\"id\":12,\"type\":\"status\",\"detail\":\"full\","
    "\"detail\":\"summary\"}", BAD, "detail: given more than once", 12 },
  /* policy_set. */
  { "{\"id\":11,\"type\":\"policy_set\"}", BAD, "policy: required", 11 },
  { "{\"id\":11,\"type\":\"policy_set\",\"policy\":3}", BAD,
    "policy: must be an object", 11 },
  { "{\"id\":11,\"type\":\"policy_set\",\"policy\":{}}", BAD,
    "policy: must set at least one", 11 },
  { "{\"id\":11,\"type\":\"policy_set\",\"policy\":{\"future\":1}}", BAD,
    "policy: must set at least one", 11 },
  { "{\"id\":11,\"type\":\"policy_set\",\"policy\":{\"min_headroom\":1025}}",
    BAD, "policy.min_headroom: must be an integer 0..1024", 11 },
  { "{\"id\":11,\"type\":\"policy_set\",\"policy\":{\"max_headroom\":-1}}",
    BAD, "policy.max_headroom: must be an integer 0..1024", 11 },
  { "{\"id\":11,\"type\":\"policy_set\",\"policy\":{\"min_grid\":0}}", BAD,
    "policy.min_grid: must be an integer 1..1024", 11 },
  { "{\"id\":11,\"type\":\"policy_set\",\"policy\":{\"incident_raise\":1}}",
    BAD, "policy.incident_raise: must be true or false", 11 },
  { "{\"id\":11,\"type\":\"policy_set\",\"policy\":{\"incident_raise\":"
    "\"true\"}}", BAD, "policy.incident_raise: must be true or false", 11 },
  { "{\"id\":11,\"type\":\"policy_set\",\"policy\":{\"min_grid\":8,"
    "\"min_grid\":9}}", BAD, "policy.min_grid: given more than once", 11 },
};

static void test_bad_requests(void **state)
{
  size_t i;

  (void)state;
  for(i = 0; i < sizeof(bad_requests) / sizeof(bad_requests[0]); i++)
    expect_request_error(bad_requests[i].line, strlen(bad_requests[i].line),
                         bad_requests[i].code, bad_requests[i].needle,
                         bad_requests[i].id);
}

/* Things that look odd but are valid, and must stay so. */
static void test_lenient_requests(void **state)
{
  static const char *const ok[] = {
    /* Unknown members are ignored: newer clients may send more. */
    "{\"id\":1,\"type\":\"status\",\"future\":{\"a\":[1,2,{}]},\"x\":null}",
    /* Members in any order, whitespace anywhere JSON allows it. */
    " {\t\"type\" : \"status\" ,\r\"id\" : 1 } \t\r",
    /* Integers written as other JSON numbers with an integral value. */
    "{\"id\":1.0,\"type\":\"lease\",\"gpu\":-0,\"cluster\":2e0,"
    "\"mode\":\"headroom\"}",
    "{\"id\":9007199254740991,\"type\":\"status\"}",
    /* Escapes, and any UTF-8, in strings; control characters in free
     * text (a name refuses them: bad_requests). */
    "{\"id\":1,\"type\":\"st\\u0061tus\"}",
    "{\"id\":1,\"type\":\"hello\",\"versions\":[1],\"client\":\"\\u00e9"
    "\xe2\x82\xac\xf0\x9f\x98\x80\\u00a0\"}",
    "{\"id\":1,\"type\":\"report\",\"gpu\":0,\"kind\":\"launch_failure\","
    "\"message\":\"tab\\there, ESC \\u001b[31m, CSI \\u009b\"}",
    /* An escaped backslash before "u0000" is no NUL. */
    "{\"id\":1,\"type\":\"hello\",\"versions\":[1],\"client\":\"a\\\\u0000\"}",
    /* A byte-order mark is tolerated by the parser. */
    "\xef\xbb\xbf{\"id\":1,\"type\":\"status\"}",
  };
  hr_proto_error err;
  hr_request req;
  size_t i;

  (void)state;
  for(i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
    int rc = hr_proto_decode_request(ok[i], strlen(ok[i]), &req, &err);
    if(rc)
      print_error("%s: %s\n", ok[i], err.message);
    assert_int_equal(rc, HR_OK);
  }
  assert_int_equal(hr_proto_decode_request(ok[2], strlen(ok[2]), &req, &err),
                   HR_OK);
  assert_int_equal(req.id, 1);
  assert_int_equal(req.u.lease.gpu, 0);
  assert_int_equal(req.u.lease.cluster, 2);
  assert_int_equal(hr_proto_decode_request(ok[5], strlen(ok[5]), &req, &err),
                   HR_OK);
  assert_string_equal(req.u.hello.client,
                      "\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\xc2\xa0");
  assert_int_equal(hr_proto_decode_request(ok[6], strlen(ok[6]), &req, &err),
                   HR_OK);
  assert_string_equal(req.u.report.message,
                      "tab\there, ESC \x1b[31m, CSI \xc2\x9b");

  /* Deep nesting inside an ignored member is bounded by cJSON's limit. */
  {
    char deep[4200];
    size_t n = 0;
    int k;
    n += (size_t)sprintf(deep, "{\"id\":1,\"type\":\"status\",\"x\":");
    for(k = 0; k < 2000; k++)
      deep[n++] = '[';
    for(k = 0; k < 2000; k++)
      deep[n++] = ']';
    deep[n++] = '}';
    expect_request_error(deep, n, BAD, "invalid JSON", -1);
  }
}

static void test_bad_args(void **state)
{
  hr_proto_error err;
  hr_request req;
  hr_reply rep;
  hr_buf b;

  (void)state;
  hr_buf_init(&b, 0);
  assert_int_equal(hr_proto_decode_request(NULL, 1, &req, &err), HR_EINVAL);
  assert_int_equal(hr_proto_decode_request("{}", 2, NULL, &err), HR_EINVAL);
  assert_int_equal(hr_proto_decode_request("{}", 2, &req, NULL), HR_EINVAL);
  assert_int_equal(hr_proto_decode_reply(NULL, 1, &rep, &err), HR_EINVAL);
  assert_int_equal(hr_proto_decode_reply("{}", 2, NULL, &err), HR_EINVAL);
  /* NULL with length 0 is just an empty line. */
  expect_request_error(NULL, 0, BAD, "invalid JSON", -1);
  assert_int_equal(hr_proto_encode_request(NULL, &b), HR_EINVAL);
  assert_int_equal(hr_proto_encode_reply(NULL, &b), HR_EINVAL);
  memset(&req, 0, sizeof(req));
  req.type = HR_MSG_STATUS;
  assert_int_equal(hr_proto_encode_request(&req, NULL), HR_EINVAL);
  assert_int_equal(hr_proto_encode_error(1, HR_WERR_COUNT, "x", &b),
                   HR_EINVAL);
  assert_int_equal(hr_proto_encode_error(-2, HR_WERR_INTERNAL, "x", &b),
                   HR_EINVAL);
  assert_int_equal(b.len, 0);
  hr_buf_free(&b);
}

/* A metrics reply up to its counters, and a valid latency and GPU, for
 * the bad-input rows below. */
#define METRICS_HEAD \
  "{\"id\":1,\"type\":\"metrics\",\"metrics\":{\"daemon\":\"d\"," \
  "\"uptime_ms\":1,\"clients\":0,\"clients_resumed\":0," \
  "\"client_degraded_ms\":0,"
#define METRICS_LATENCY \
  "\"latency_us\":{\"buckets\":[0,0,0,0,0,0,0,0,0,0,0,0],\"count\":0," \
  "\"sum\":0}"
#define METRICS_GPU_HEAD \
  "{\"index\":0,\"sms\":132,\"headroom\":2,\"grid\":130,\"epoch\":1,"

/* A status up to its policy, and a GPU up to its clients, for the rows
 * below. */
#define STATUS_HEAD \
  "{\"id\":1,\"type\":\"status\",\"status\":{\"daemon\":\"d\"," \
  "\"uptime_ms\":1,\"requests\":1,\"topology_source\":\"cuda\"," \
  "\"policy\":{\"min_headroom\":2,\"max_headroom\":32,\"min_grid\":64," \
  "\"incident_raise\":true},"
#define STATUS_GPU_HEAD \
  "{\"index\":0,\"sms\":132,\"name\":\"\",\"budget\":{\"gpu\":0," \
  "\"epoch\":3,\"mode\":\"headroom\",\"sms\":132,\"cluster\":2," \
  "\"headroom\":16,\"grid\":116,\"nccl\":{\"min_ctas\":1,\"max_ctas\":8," \
  "\"cga_cluster_size\":1,\"nvls_enable\":0},\"degraded\":false}," \
  "\"comm_ctas\":0,\"raised\":0,\"clients\":0,"

static void test_bad_replies(void **state)
{
  static const char budget_ok[] =
    "{\"gpu\":0,\"epoch\":3,\"mode\":\"headroom\",\"sms\":132,\"cluster\":2,"
    "\"headroom\":16,\"grid\":116,\"nccl\":{\"min_ctas\":1,\"max_ctas\":8,"
    "\"cga_cluster_size\":1,\"nvls_enable\":0},\"degraded\":false}";
  static const struct { const char *line; hr_wire_error code;
                        const char *needle; } cases[] = {
    { "[]", BAD, "message: must be a JSON object" },
    { "{\"id\":1,\"type\":\"status\"} x", BAD, "after the object" },
    { "{\"id\":1,\"error\":\"bad\"}", BAD, "error: must be an object" },
    { "{\"error\":{\"code\":\"internal\"}}", BAD, "id: required" },
    { "{\"id\":-5,\"error\":{\"code\":\"internal\"}}", BAD, "id: must be" },
    { "{\"id\":1,\"error\":{}}", BAD, "error.code: required" },
    { "{\"id\":1,\"error\":{\"code\":5}}", BAD, "error.code: must be a string" },
    { "{\"id\":1,\"error\":{\"code\":\"internal\",\"message\":[]}}", BAD,
      "error.message: must be a string" },
    { "{\"id\":1}", BAD, "type: required" },
    { "{\"id\":1,\"type\":\"nonsense\"}", UNKNOWN, "type: \"nonsense\"" },
    { "{\"id\":1,\"type\":\"error\"}", BAD, "error: required" },
    { "{\"type\":\"status\",\"status\":{}}", BAD, "id: required" },
    { "{\"id\":1,\"type\":\"register_comm\",\"comm\":0}", BAD,
      "comm: must be an integer 1.." },
    { "{\"id\":1,\"type\":\"lease\",\"lease\":5}", BAD, "budget: required" },
    { "{\"id\":1,\"type\":\"lease\",\"lease\":5,\"budget\":{}}", BAD,
      "budget.gpu: required" },
    { "{\"id\":1,\"type\":\"lease\",\"lease\":5,\"budget\":{\"gpu\":0,"
      "\"epoch\":4294967296}}", BAD,
      "budget.epoch: must be an integer 0..4294967295" },
    { "{\"id\":1,\"type\":\"lease\",\"lease\":5,\"budget\":{\"gpu\":0,"
      "\"epoch\":1,\"mode\":\"x\"}}", BAD, "budget.mode: must be" },
    { "{\"id\":1,\"type\":\"lease\",\"lease\":5,\"budget\":{\"gpu\":0,"
      "\"epoch\":1,\"mode\":\"headroom\",\"sms\":132,\"cluster\":6}}", BAD,
      "budget.cluster: must be 1, 2, 4 or 8" },
    { "{\"id\":1,\"type\":\"lease\",\"lease\":5,\"budget\":{\"gpu\":0,"
      "\"epoch\":1,\"mode\":\"headroom\",\"sms\":132,\"cluster\":2,"
      "\"headroom\":4,\"grid\":128}}", BAD, "budget.nccl: required" },
    { "{\"id\":1,\"type\":\"lease\",\"lease\":5,\"budget\":{\"gpu\":0,"
      "\"epoch\":1,\"mode\":\"headroom\",\"sms\":132,\"cluster\":2,"
      "\"headroom\":4,\"grid\":128,\"nccl\":{\"min_ctas\":1,\"max_ctas\":65}"
      "}}", BAD, "budget.nccl.max_ctas: must be an integer 0..64" },
    { "{\"id\":1,\"type\":\"lease\",\"lease\":5,\"budget\":{\"gpu\":0,"
      "\"epoch\":1,\"mode\":\"headroom\",\"sms\":132,\"cluster\":2,"
      "\"headroom\":4,\"grid\":128,\"nccl\":{\"min_ctas\":1,\"max_ctas\":8,"
      "\"cga_cluster_size\":1,\"nvls_enable\":0},\"degraded\":0}}", BAD,
      "budget.degraded: must be true or false" },
    { "{\"id\":1,\"type\":\"lease\",\"lease\":5,\"budget\":{\"gpu\":0,"
      "\"epoch\":1,\"mode\":\"headroom\",\"sms\":132,\"cluster\":2,"
      "\"headroom\":4,\"grid\":128,\"nccl\":{\"min_ctas\":1,\"max_ctas\":8,"
      "\"cga_cluster_size\":1,\"nvls_enable\":0},\"degraded\":false,"
      "\"partition_granularity\":-8}}", BAD,
      "budget.partition_granularity: must be an integer 0..1024" },
    { "{\"id\":1,\"type\":\"lease\",\"lease\":5,\"budget\":{\"gpu\":0,"
      "\"epoch\":1,\"mode\":\"headroom\",\"sms\":132,\"cluster\":2,"
      "\"headroom\":4,\"grid\":128,\"nccl\":{\"min_ctas\":1,\"max_ctas\":8,"
      "\"cga_cluster_size\":1,\"nvls_enable\":0},\"degraded\":false,"
      "\"partition_comm_sms\":\"8\"}}", BAD,
      "budget.partition_comm_sms: must be an integer 0..1024" },
    { "{\"id\":1,\"type\":\"lease\",\"lease\":5,\"budget\":{\"gpu\":0,"
      "\"epoch\":1,\"mode\":\"headroom\",\"sms\":132,\"cluster\":2,"
      "\"headroom\":4,\"grid\":128,\"nccl\":{\"min_ctas\":1,\"max_ctas\":8,"
      "\"cga_cluster_size\":1,\"nvls_enable\":0},\"degraded\":false,"
      "\"partition_nccl_max_ctas\":128}}", BAD,
      "budget.partition_nccl_max_ctas: must be an integer 0..64" },
    { "{\"id\":1,\"type\":\"hello\",\"version\":1,\"daemon\":\"d\","
      "\"client\":1,\"topology\":{\"source\":\"nvml\",\"gpus\":[]}}", BAD,
      "topology.source: must be \"default\", \"config\" or \"cuda\"" },
    { "{\"id\":1,\"type\":\"hello\",\"version\":1,\"daemon\":\"d\","
      "\"client\":1,\"topology\":{\"source\":\"cuda\",\"gpus\":[{\"index\":0,"
      "\"sms\":132},7]}}", BAD, "topology.gpus[1]: must be an object" },
    { "{\"id\":1,\"type\":\"hello\",\"version\":1,\"daemon\":\"d\","
      "\"client\":1,\"topology\":{\"source\":\"cuda\",\"gpus\":[{\"index\":0,"
      "\"sms\":0}]}}", BAD, "topology.gpus[0].sms: must be an integer 1..1024"
    },
    { "{\"id\":1,\"type\":\"policy_get\",\"policy\":{\"min_headroom\":2,"
      "\"max_headroom\":32,\"min_grid\":64}}", BAD,
      "policy.incident_raise: required" },
    { "{\"type\":\"shutdown\"}", BAD, "reason: required" },
    { "{\"type\":\"budget\"}", BAD, "budget: required" },
    { "{\"id\":1,\"type\":\"metrics\"}", BAD, "metrics: required" },
    { "{\"id\":1,\"type\":\"metrics\",\"metrics\":[]}", BAD,
      "metrics: must be an object" },
    { "{\"id\":1,\"type\":\"metrics\",\"metrics\":{\"daemon\":\"d\","
      "\"uptime_ms\":1,\"clients\":0,\"client_degraded_ms\":0}}", BAD,
      "metrics.clients_resumed: required" },
    { METRICS_HEAD "\"errors\":{}}}", BAD, "metrics.requests: required" },
    { METRICS_HEAD "\"requests\":{\"hello\":-1}}}", BAD,
      "metrics.requests.hello: must be an integer 0..9007199254740991" },
    { METRICS_HEAD "\"requests\":{\"invalid\":1.5}}}", BAD,
      "metrics.requests.invalid: must be an integer" },
    { METRICS_HEAD "\"requests\":{},\"errors\":{\"internal\":\"1\"}}}",
      BAD, "metrics.errors.internal: must be an integer" },
    { METRICS_HEAD "\"requests\":{},\"errors\":{},\"latency_us\":{"
      "\"buckets\":[0,0,0],\"count\":0,\"sum\":0}}}", BAD,
      "metrics.latency_us.buckets: must have 12 items" },
    { METRICS_HEAD "\"requests\":{},\"errors\":{},\"latency_us\":{"
      "\"buckets\":[0,0,0,0,0,0,0,0,0,0,0,0,0],\"count\":0,\"sum\":0}}}",
      BAD, "metrics.latency_us.buckets: must have at most 12 items" },
    { METRICS_HEAD "\"requests\":{},\"errors\":{},\"latency_us\":{"
      "\"buckets\":[0,0,0,0,0,0,-1,0,0,0,0,0],\"count\":0,\"sum\":0}}}",
      BAD, "metrics.latency_us.buckets[6]: must be an integer 0.." },
    { METRICS_HEAD "\"requests\":{},\"errors\":{},\"latency_us\":{"
      "\"buckets\":[1,0,0,0,0,0,0,0,0,0,0,1],\"count\":3,\"sum\":0}}}",
      BAD, "metrics.latency_us.count: must be the sum of the buckets (2)" },
    { METRICS_HEAD "\"requests\":{},\"errors\":{}," METRICS_LATENCY "}}",
      BAD, "metrics.gpus: required" },
    { METRICS_HEAD "\"requests\":{},\"errors\":{}," METRICS_LATENCY
      ",\"gpus\":[" METRICS_GPU_HEAD "\"clients\":0,\"comms\":0,"
      "\"comm_ctas\":0,\"leases\":{},\"raised\":0,\"incidents\":{}}]}}",
      BAD, "metrics.gpus[0].nccl_max_ctas: required" },
    { METRICS_HEAD "\"requests\":{},\"errors\":{}," METRICS_LATENCY
      ",\"gpus\":[" METRICS_GPU_HEAD "\"nccl_max_ctas\":16,\"clients\":0,"
      "\"comms\":0,\"comm_ctas\":0,\"leases\":{\"agnostic\":-1},"
      "\"raised\":0,\"incidents\":{}}]}}", BAD,
      "metrics.gpus[0].leases.agnostic: must be an integer 0..2147483647" },
    { METRICS_HEAD "\"requests\":{},\"errors\":{}," METRICS_LATENCY
      ",\"gpus\":[" METRICS_GPU_HEAD "\"nccl_max_ctas\":16,\"clients\":0,"
      "\"comms\":0,\"comm_ctas\":0,\"leases\":{},\"raised\":0,"
      "\"incidents\":[]}]}}", BAD,
      "metrics.gpus[0].incidents: must be an object" },
    { METRICS_HEAD "\"requests\":{},\"errors\":{}," METRICS_LATENCY
      ",\"gpus\":[7]}}", BAD, "metrics.gpus[0]: must be an object" },
    { "{\"id\":1,\"type\":\"status\",\"status\":{\"daemon\":\"d\","
      "\"uptime_ms\":1,\"requests\":1,\"topology_source\":\"cuda\","
      "\"policy\":{\"min_headroom\":2,\"max_headroom\":32,\"min_grid\":64,"
      "\"incident_raise\":true},\"clients\":[{\"id\":1,\"pid\":1,\"uid\":0,"
      "\"gid\":0,\"name\":\"x\",\"subscribed\":true}],\"gpus\":[]}}", BAD,
      "status.clients[0].operator: required" },
    /* A summary: its own members are required, the lists are not. */
    { STATUS_HEAD "\"detail\":\"brief\",\"gpus\":[]}}", BAD,
      "status.detail: must be \"full\" or \"summary\"" },
    { STATUS_HEAD "\"detail\":\"summary\",\"client_count\":3,"
      "\"gpus\":[]}}", BAD, "status.truncated: required" },
    { STATUS_HEAD "\"detail\":\"summary\",\"truncated\":1,"
      "\"client_count\":3,\"gpus\":[]}}", BAD,
      "status.truncated: must be true or false" },
    { STATUS_HEAD "\"detail\":\"summary\",\"truncated\":true,"
      "\"gpus\":[]}}", BAD, "status.client_count: required" },
    { STATUS_HEAD "\"detail\":\"summary\",\"truncated\":true,"
      "\"client_count\":3}}", BAD, "status.gpus: required" },
    { STATUS_HEAD "\"detail\":\"summary\",\"truncated\":true,"
      "\"client_count\":3,\"gpus\":[" STATUS_GPU_HEAD "\"lease_count\":{},"
      "\"incident_count\":0}]}}", BAD, "status.gpus[0].comm_count: required" },
    { STATUS_HEAD "\"detail\":\"summary\",\"truncated\":true,"
      "\"client_count\":3,\"gpus\":[" STATUS_GPU_HEAD "\"comm_count\":0,"
      "\"incident_count\":0}]}}", BAD, "status.gpus[0].lease_count: required" },
    { STATUS_HEAD "\"detail\":\"summary\",\"truncated\":true,"
      "\"client_count\":3,\"gpus\":[" STATUS_GPU_HEAD "\"comm_count\":0,"
      "\"lease_count\":{\"partition\":-2},\"incident_count\":0}]}}", BAD,
      "status.gpus[0].lease_count.partition: must be an integer" },
    { STATUS_HEAD "\"detail\":\"summary\",\"truncated\":true,"
      "\"client_count\":3,\"gpus\":[" STATUS_GPU_HEAD "\"comm_count\":0,"
      "\"lease_count\":{}}]}}", BAD,
      "status.gpus[0].incident_count: required" },
    /* A full status still needs its lists. */
    { STATUS_HEAD "\"gpus\":[]}}", BAD, "status.clients: required" },
    { STATUS_HEAD "\"detail\":\"full\",\"clients\":[],\"gpus\":["
      STATUS_GPU_HEAD "\"comm_count\":0,\"lease_count\":{},"
      "\"incident_count\":0}]}}", BAD, "status.gpus[0].comms: required" },
  };
  size_t i;
  char line[1024];

  (void)state;
  for(i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
    expect_reply_error(cases[i].line, cases[i].code, cases[i].needle);

  /* The metrics rows are built from these parts, which do make a valid
   * reply once complete. */
  {
    static const char ok[] = METRICS_HEAD "\"requests\":{},\"errors\":{},"
      METRICS_LATENCY ",\"gpus\":[" METRICS_GPU_HEAD "\"nccl_max_ctas\":16,"
      "\"clients\":0,\"comms\":0,\"comm_ctas\":0,\"leases\":{},"
      "\"raised\":0,\"incidents\":{}}]}}";
    static hr_reply rep;
    hr_proto_error err;
    assert_int_equal(hr_proto_decode_reply(ok, strlen(ok), &rep, &err),
                     HR_OK);
    assert_int_equal(rep.u.metrics.gpus[0].grid, 130);
  }

  /* A budget event whose budget is complete decodes, the same with one
   * field broken does not: the table above is not failing for another
   * reason. */
  snprintf(line, sizeof(line), "{\"type\":\"budget\",\"budget\":%s}",
           budget_ok);
  {
    hr_proto_error err;
    hr_reply rep;
    assert_int_equal(hr_proto_decode_reply(line, strlen(line), &rep, &err),
                     HR_OK);
    assert_int_equal(rep.u.budget.headroom, 16);
    /* Without the partition fields (a daemon from before partition mode)
     * they read as 0: partition leases are not to be had. */
    assert_int_equal(rep.u.budget.partition_granularity, 0);
    assert_int_equal(rep.u.budget.partition_comm_sms, 0);
    assert_int_equal(rep.u.budget.partition_nccl_max_ctas, 0);
  }
}

/* A status that fails deep inside, after arrays were allocated: the decoder
 * must free them (the test binary is also run under valgrind/ASan). */
static void test_bad_status_frees(void **state)
{
  hr_reply in, out;
  hr_proto_error err;
  hr_buf b;
  char *p;

  (void)state;
  memset(&in, 0, sizeof(in));
  in.type = HR_MSG_STATUS;
  in.id = 1;
  sample_status(&in.u.status);
  encoded_reply(&in, &b);
  hr_status_free(&in.u.status);
  /* Break the kind of the last incident of the last GPU. */
  p = strstr(b.data, "\"kind\":\"launch_failure\",\"detail\":{\"cuda_error\""
             ":720}}]}]}");
  assert_non_null(p);
  memcpy(p + 8, "launch_failurX", 14);
  memset(&out, 0xab, sizeof(out));
  assert_int_equal(hr_proto_decode_reply(b.data, b.len - 1, &out, &err),
                   HR_EPROTO);
  assert_non_null(strstr(err.message, "status.gpus[2].incidents[3].kind"));
  assert_int_equal(out.type, HR_MSG_NONE);
  assert_null(out.u.status.gpus);
  assert_null(out.u.status.clients);
  hr_reply_free(&out);
  hr_buf_free(&b);
}

static void test_unknown_error_code(void **state)
{
  static const char line[] =
    "{\"id\":4,\"error\":{\"code\":\"rate_limited\",\"message\":\"slow "
    "down\"}}";
  static const char null_id[] =
    "{\"id\":null,\"error\":{\"code\":\"too_large\",\"message\":\"x\"},"
    "\"type\":\"ignored\"}";
  hr_proto_error err;
  hr_reply rep;

  (void)state;
  assert_int_equal(hr_proto_decode_reply(line, strlen(line), &rep, &err),
                   HR_OK);
  assert_int_equal(rep.type, HR_MSG_ERROR);
  assert_int_equal(rep.id, 4);
  assert_int_equal(rep.u.error.code, HR_WERR_INTERNAL);
  assert_string_equal(rep.u.error.message,
                      "unknown error code \"rate_limited\": slow down");
  assert_int_equal(hr_proto_decode_reply(null_id, strlen(null_id), &rep,
                                         &err), HR_OK);
  assert_int_equal(rep.id, -1);
  assert_int_equal(rep.u.error.code, HR_WERR_TOO_LARGE);
  assert_int_equal(hr_wire_error_to_hr(rep.u.error.code), HR_ETOOLARGE);
}

/* ---- Reading never passes len ------------------------------------------ */

/* A page whose end is followed by an inaccessible page: a line copied to
 * the very end of it makes any read past `len` a SIGSEGV. */
typedef struct fence {
  char *page;
  size_t size;
} fence;

static void fence_init(fence *f)
{
  long ps = sysconf(_SC_PAGESIZE);

  f->size = (size_t)ps * 17;       /* 16 usable pages: room for 64 KiB */
  f->page = mmap(NULL, f->size, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  assert_true(f->page != MAP_FAILED);
  assert_int_equal(mprotect(f->page + f->size - (size_t)ps, (size_t)ps,
                            PROT_NONE), 0);
  f->size -= (size_t)ps;
}

static const char *fence_put(fence *f, const char *line, size_t len)
{
  char *p = f->page + f->size - len;

  memcpy(p, line, len);
  return p;
}

static void test_no_read_past_len(void **state)
{
  static const char *const lines[] = {
    "{\"id\":3,\"type\":\"register_comm\",\"gpu\":0,\"name\":\"dp\","
    "\"ctas\":8,\"cga\":1,\"concurrent\":3}",
    "{\"id\":1,\"type\":\"hello\",\"versions\":[1,2],\"client\":\"\\u00e9x\"}",
    "{\"id\":1,\"type\":\"report\",\"gpu\":0,\"kind\":\"barrier_timeout\","
    "\"detail\":{\"barrier\":1,\"arrived\":12345}}",
    "{\"id\":2,\"type\":\"status\",\"x\":[true,false,null,-1.5e-3]}",
    "\xef\xbb\xbf{\"id\":2,\"type\":\"status\"}",
  };
  hr_proto_error err;
  hr_request req;
  hr_reply rep;
  fence f;
  size_t i, n;

  (void)state;
  fence_init(&f);
  /* Every prefix of every line, at the very end of readable memory, in
   * both decoders: whatever they answer, they must not fault. */
  for(i = 0; i < sizeof(lines) / sizeof(lines[0]); i++) {
    size_t len = strlen(lines[i]);
    for(n = 0; n <= len; n++) {
      const char *p = fence_put(&f, lines[i], n);
      int rc = hr_proto_decode_request(p, n, &req, &err);
      assert_int_equal(rc, n == len ? HR_OK : HR_EPROTO);
      rc = hr_proto_decode_reply(p, n, &rep, &err);
      hr_reply_free(&rep);
    }
  }
  munmap(f.page, f.size + (size_t)sysconf(_SC_PAGESIZE));

  /* Bytes after `len` that would change the meaning must be ignored. */
  {
    static const char buf[] = "{\"id\":1,\"type\":\"status\"}\"garbage";
    static const char cut[] = "{\"id\":12,\"type\":\"status\"}";
    assert_int_equal(hr_proto_decode_request(buf, 24, &req, &err), HR_OK);
    assert_int_equal(req.id, 1);
    /* "{"id":1" then "2,...": the 2 is not part of the line. */
    expect_request_error(cut, 7, BAD, "invalid JSON", -1);
  }
}

/* ---- Encoder limits ---------------------------------------------------- */

static hr_status big_status(int n_clients)
{
  hr_status s;
  int i;

  memset(&s, 0, sizeof(s));
  strcpy(s.daemon, "headroomd 0.1.0");
  s.policy.min_grid = 64;
  s.n_clients = n_clients;
  s.clients = calloc((size_t)n_clients, sizeof(*s.clients));
  assert_non_null(s.clients);
  for(i = 0; i < n_clients; i++) {
    s.clients[i].id = i + 1;
    s.clients[i].pid = 100000 + i;
    s.clients[i].uid = 1000;
    s.clients[i].gid = 1000;
  }
  return s;
}

static void test_encode_too_large(void **state)
{
  hr_reply rep, out;
  hr_proto_error err;
  hr_request req;
  hr_buf b;
  int n, lo, hi, i;
  size_t base, need;

  (void)state;
  /* Hundreds of clients: past 64 KiB, refused cleanly, buffer untouched. */
  memset(&rep, 0, sizeof(rep));
  rep.type = HR_MSG_STATUS;
  rep.id = 1;
  rep.u.status = big_status(1000);
  for(i = 0; i < 1000; i++)
    memset(rep.u.status.clients[i].name, 'c', HR_NAME_MAX - 1);
  hr_buf_init(&b, 1 << 20);
  assert_int_equal(hr_buf_append(&b, "kept\n", 5), HR_OK);
  assert_int_equal(hr_proto_encode_reply(&rep, &b), HR_ETOOLARGE);
  assert_int_equal(b.len, 5);
  assert_string_equal(b.data, "kept\n");
  hr_status_free(&rep.u.status);

  /* The exact boundary: find the most clients (empty names) that fit, then
   * pad names so the line is exactly HR_PROTO_MAX_LINE with its '\n'. */
  lo = 1;
  hi = 2000;
  while(lo < hi) {                  /* largest n that encodes */
    int mid = (lo + hi + 1) / 2;
    rep.u.status = big_status(mid);
    hr_buf_reset(&b);
    if(hr_proto_encode_reply(&rep, &b) == HR_OK)
      lo = mid;
    else
      hi = mid - 1;
    hr_status_free(&rep.u.status);
  }
  n = lo;
  rep.u.status = big_status(n);
  hr_buf_reset(&b);
  assert_int_equal(hr_proto_encode_reply(&rep, &b), HR_OK);
  base = b.len;
  need = HR_PROTO_MAX_LINE - base;
  for(i = 0; need > 0; i++) {
    size_t k = need < HR_NAME_MAX - 1 ? need : HR_NAME_MAX - 1;
    memset(rep.u.status.clients[i].name, 'p', k);
    need -= k;
  }
  hr_buf_reset(&b);
  assert_int_equal(hr_proto_encode_reply(&rep, &b), HR_OK);
  assert_int_equal(b.len, HR_PROTO_MAX_LINE);
  /* ...which the decoder accepts (65535 bytes without the '\n')... */
  assert_int_equal(hr_proto_decode_reply(b.data, b.len - 1, &out, &err),
                   HR_OK);
  assert_int_equal(out.u.status.n_clients, n);
  hr_reply_free(&out);
  /* ...and one byte more is too large for both. */
  rep.u.status.clients[i].name[strlen(rep.u.status.clients[i].name)] = 'p';
  hr_buf_reset(&b);
  assert_int_equal(hr_proto_encode_reply(&rep, &b), HR_ETOOLARGE);
  assert_int_equal(b.len, 0);
  hr_status_free(&rep.u.status);
  hr_buf_free(&b);
  {
    char *huge = malloc(HR_PROTO_MAX_LINE);
    assert_non_null(huge);
    memset(huge, ' ', HR_PROTO_MAX_LINE);
    memcpy(huge, "{\"id\":1,\"type\":\"status\"}", 24);
    assert_int_equal(hr_proto_decode_request(huge, HR_PROTO_MAX_LINE - 1,
                                             &req, &err), HR_OK);
    expect_request_error(huge, HR_PROTO_MAX_LINE, HR_WERR_TOO_LARGE,
                         "message: longer than 65536", -1);
    free(huge);
  }

  /* The buffer's own cap counts too. */
  memset(&req, 0, sizeof(req));
  req.type = HR_MSG_STATUS;
  req.id = 1;
  hr_buf_init(&b, 10);
  assert_int_equal(hr_proto_encode_request(&req, &b), HR_ETOOLARGE);
  assert_int_equal(b.len, 0);
  hr_buf_free(&b);
  hr_buf_init(&b, 25);              /* {"id":1,"type":"status"}\n */
  assert_int_equal(hr_proto_encode_request(&req, &b), HR_OK);
  assert_int_equal(b.len, 25);
  assert_int_equal(hr_proto_encode_request(&req, &b), HR_ETOOLARGE);
  assert_int_equal(b.len, 25);
  hr_buf_free(&b);
}

/* Structs outside the ranges are refused, never sent. */
static void test_encode_invalid(void **state)
{
  hr_request req;
  hr_reply rep;
  hr_buf b;

  (void)state;
  hr_buf_init(&b, 0);
#define REQ_INVALID(setup) do {                                          \
    memset(&req, 0, sizeof(req));                                        \
    req.type = HR_MSG_REGISTER_COMM;                                     \
    req.id = 1;                                                          \
    req.u.register_comm.ctas = 8;                                        \
    req.u.register_comm.cga = 1;                                         \
    req.u.register_comm.concurrent = 1;                                  \
    setup;                                                               \
    assert_int_equal(hr_proto_encode_request(&req, &b), HR_EINVAL);      \
    assert_int_equal(b.len, 0);                                          \
  } while(0)

  /* The baseline encodes; each change below breaks one rule. */
  REQ_INVALID(req.u.register_comm.ctas = 0);
  REQ_INVALID(req.u.register_comm.ctas = 65);
  REQ_INVALID(req.u.register_comm.gpu = 64);
  REQ_INVALID(req.u.register_comm.cga = 9);
  REQ_INVALID(req.u.register_comm.concurrent = 0);
  REQ_INVALID(memset(req.u.register_comm.name, 'x', HR_NAME_MAX));
  REQ_INVALID(strcpy(req.u.register_comm.name, "bad \xff utf-8"));
  REQ_INVALID(req.id = -1);
  REQ_INVALID(req.id = HR_PROTO_MAX_ID + 1);
  REQ_INVALID(req.type = HR_MSG_NONE);
  REQ_INVALID(req.type = HR_MSG_BUDGET);
  REQ_INVALID(req.type = HR_MSG_ERROR);
  REQ_INVALID(req.type = HR_MSG_COUNT);
  REQ_INVALID((req.type = HR_MSG_HELLO, req.u.hello.n_versions = 0));
  REQ_INVALID((req.type = HR_MSG_HELLO, req.u.hello.n_versions = 9));
  REQ_INVALID((req.type = HR_MSG_HELLO, req.u.hello.n_versions = 1,
               req.u.hello.versions[0] = 0));
  REQ_INVALID((req.type = HR_MSG_LEASE, req.u.lease.cluster = 3));
  REQ_INVALID((req.type = HR_MSG_LEASE, req.u.lease.cluster = 2,
               req.u.lease.mode = HR_MODE_COUNT));
  REQ_INVALID((req.type = HR_MSG_RELEASE, req.u.release.lease = 0));
  REQ_INVALID((req.type = HR_MSG_UNREGISTER_COMM,
               req.u.unregister_comm.comm = -4));
  REQ_INVALID((req.type = HR_MSG_REPORT,
               req.u.report.kind = HR_INCIDENT_COUNT));
  REQ_INVALID((req.type = HR_MSG_REPORT, req.u.report.lease = -1));
  REQ_INVALID((req.type = HR_MSG_REPORT, unknown_detail(&req.u.report.detail),
               req.u.report.detail.sm = -2));
  REQ_INVALID((req.type = HR_MSG_REPORT,
               memset(req.u.report.message, 'm', HR_MESSAGE_MAX)));
  REQ_INVALID((req.type = HR_MSG_SUBSCRIBE, req.u.subscribe.gpu = 64));
  REQ_INVALID((req.type = HR_MSG_POLICY_SET, req.u.policy_set.fields = 0));
  REQ_INVALID((req.type = HR_MSG_POLICY_SET, req.u.policy_set.fields = 16,
               req.u.policy_set.policy.min_grid = 1));
  REQ_INVALID((req.type = HR_MSG_POLICY_SET,
               req.u.policy_set.fields = HR_POLICY_MIN_GRID));
  REQ_INVALID((req.type = HR_MSG_POLICY_SET,
               req.u.policy_set.fields = HR_POLICY_INCIDENT_RAISE,
               req.u.policy_set.policy.incident_raise = 2));
#undef REQ_INVALID
  memset(&req, 0, sizeof(req));
  req.type = HR_MSG_REGISTER_COMM;
  req.id = 1;
  req.u.register_comm.ctas = 8;
  req.u.register_comm.cga = 1;
  req.u.register_comm.concurrent = 1;
  assert_int_equal(hr_proto_encode_request(&req, &b), HR_OK);
  hr_buf_reset(&b);

#define REP_INVALID(setup) do {                                          \
    memset(&rep, 0, sizeof(rep));                                        \
    rep.type = HR_MSG_LEASE;                                             \
    rep.id = 1;                                                          \
    rep.u.lease.lease = 1;                                               \
    sample_budget(&rep.u.lease.budget, 0);                               \
    setup;                                                               \
    assert_int_equal(hr_proto_encode_reply(&rep, &b), HR_EINVAL);        \
    assert_int_equal(b.len, 0);                                          \
  } while(0)

  REP_INVALID(rep.u.lease.lease = 0);
  REP_INVALID(rep.id = -1);         /* only errors may lack an id */
  REP_INVALID(rep.u.lease.budget.cluster = 3);
  REP_INVALID(rep.u.lease.budget.sms = 0);
  REP_INVALID(rep.u.lease.budget.headroom = 1025);
  REP_INVALID(rep.u.lease.budget.nccl_max_ctas = 65);
  REP_INVALID(rep.u.lease.budget.nccl_nvls_enable = 3);
  REP_INVALID(rep.u.lease.budget.degraded = 2);
  REP_INVALID(rep.u.lease.budget.mode = HR_MODE_COUNT);
  REP_INVALID(rep.u.lease.budget.partition_granularity = -1);
  REP_INVALID(rep.u.lease.budget.partition_comm_sms = 1025);
  REP_INVALID(rep.u.lease.budget.partition_nccl_max_ctas = 65);
  REP_INVALID(rep.type = HR_MSG_NONE);
  REP_INVALID((rep.type = HR_MSG_ERROR, rep.u.error.code = HR_WERR_COUNT));
  REP_INVALID((rep.type = HR_MSG_ERROR,
               memset(rep.u.error.message, 'x', HR_MESSAGE_MAX)));
  REP_INVALID((rep.type = HR_MSG_SHUTDOWN,
               memset(rep.u.shutdown_reason, 'x', HR_MESSAGE_MAX)));
  REP_INVALID((rep.type = HR_MSG_HELLO, rep.u.hello.version = 1,
               rep.u.hello.topology.n_gpus = 65));
  REP_INVALID((rep.type = HR_MSG_HELLO, rep.u.hello.version = 1,
               rep.u.hello.topology.n_gpus = 1));    /* sms 0 */
  REP_INVALID((rep.type = HR_MSG_HELLO, rep.u.hello.version = 1,
               rep.u.hello.topology.source = HR_TOPO_COUNT));
  REP_INVALID((rep.type = HR_MSG_POLICY_GET, rep.u.policy.min_grid = 0));
  REP_INVALID((rep.type = HR_MSG_STATUS, rep.u.status.policy.min_grid = 1,
               rep.u.status.n_clients = 2));         /* clients NULL */
  REP_INVALID((rep.type = HR_MSG_STATUS, rep.u.status.policy.min_grid = 1,
               rep.u.status.n_gpus = -1));
  REP_INVALID((rep.type = HR_MSG_METRICS,
               sample_metrics(&rep.u.metrics, 2, 0),
               rep.u.metrics.n_gpus = HR_MAX_GPUS + 1));
  REP_INVALID((rep.type = HR_MSG_METRICS,
               sample_metrics(&rep.u.metrics, 2, 0),
               rep.u.metrics.latency_count++));    /* not the buckets' sum */
  REP_INVALID((rep.type = HR_MSG_METRICS,
               sample_metrics(&rep.u.metrics, 2, 0),
               rep.u.metrics.requests[HR_MSG_LEASE] = -1));
  REP_INVALID((rep.type = HR_MSG_METRICS,
               sample_metrics(&rep.u.metrics, 2, 0),
               rep.u.metrics.errors[HR_WERR_INTERNAL] = HR_PROTO_MAX_ID + 1));
  REP_INVALID((rep.type = HR_MSG_METRICS,
               sample_metrics(&rep.u.metrics, 2, 0),
               rep.u.metrics.gpus[1].leases[HR_MODE_AGNOSTIC] = -1));
  REP_INVALID((rep.type = HR_MSG_METRICS,
               sample_metrics(&rep.u.metrics, 2, 0),
               rep.u.metrics.gpus[0].sms = 0));
  REP_INVALID((rep.type = HR_MSG_METRICS,
               sample_metrics(&rep.u.metrics, 2, 0),
               rep.u.metrics.gpus[0].incidents[0] = -3));
#undef REP_INVALID
  hr_buf_free(&b);
}

static void test_encode_error(void **state)
{
  char longmsg[600];
  hr_proto_error err;
  hr_reply rep;
  hr_buf b;

  (void)state;
  hr_buf_init(&b, 0);
  assert_int_equal(hr_proto_encode_error(-1, HR_WERR_BAD_REQUEST,
                                         "invalid JSON", &b), HR_OK);
  assert_string_equal(b.data, "{\"id\":null,\"error\":{\"code\":"
                      "\"bad_request\",\"message\":\"invalid JSON\"}}\n");
  hr_buf_reset(&b);
  assert_int_equal(hr_proto_encode_error(7, HR_WERR_NOT_FOUND, NULL, &b),
                   HR_OK);
  assert_string_equal(b.data, "{\"id\":7,\"error\":{\"code\":\"not_found\","
                      "\"message\":\"\"}}\n");
  hr_buf_reset(&b);

  /* Too long, cut inside a 2-byte character, and bad UTF-8: an error
   * must still go out, valid and within HR_MESSAGE_MAX. */
  memset(longmsg, 'a', sizeof(longmsg));
  longmsg[0] = '\xff';
  memcpy(longmsg + 254, "\xc3\xa9", 2);
  longmsg[sizeof(longmsg) - 1] = '\0';
  assert_int_equal(hr_proto_encode_error(3, HR_WERR_INTERNAL, longmsg, &b),
                   HR_OK);
  assert_int_equal(hr_proto_decode_reply(b.data, b.len - 1, &rep, &err),
                   HR_OK);
  assert_int_equal(rep.u.error.code, HR_WERR_INTERNAL);
  assert_int_equal(strlen(rep.u.error.message), 254);
  assert_int_equal(rep.u.error.message[0], '?');
  assert_int_equal(rep.u.error.message[253], 'a');
  hr_buf_free(&b);
}

/* ---- The direct encoder against the tree ------------------------------- */

/* xorshift64: the same structs on every run, so a failure reproduces. */
static uint64_t rnd_state = 0x9e3779b97f4a7c15ULL;

static uint64_t rnd(void)
{
  rnd_state ^= rnd_state << 13;
  rnd_state ^= rnd_state >> 7;
  rnd_state ^= rnd_state << 17;
  return rnd_state;
}

/* One in `n`. */
static int rnd_one_in(unsigned n)
{
  return rnd() % n == 0;
}

/* An int in lo..hi, its ends more often than chance, and now and then one
 * step outside the range so the two encoders must refuse alike. */
static int64_t rnd_range(int64_t lo, int64_t hi)
{
  switch(rnd() % 16) {
  case 0: return lo;
  case 1: return hi;
  case 2: return rnd_one_in(4) ? lo - 1 : lo;
  case 3: return rnd_one_in(4) ? hi + 1 : hi;
  default: return lo + (int64_t)(rnd() % (uint64_t)(hi - lo + 1));
  }
}

static int64_t rnd_id(int64_t lo)
{
  return rnd_range(lo, HR_PROTO_MAX_ID);
}

static void rnd_budget(hr_budget *b)
{
  static const int clusters[] = { 1, 2, 4, 8, 1, 2, 4, 8, 0, 3, 5, 9 };

  b->gpu = (int)rnd_range(0, HR_MAX_GPUS - 1);
  b->epoch = rnd_one_in(4) ? (rnd_one_in(2) ? 0 : UINT32_MAX)
                           : (uint32_t)rnd();
  b->mode = (hr_mode)rnd_range(0, HR_MODE_COUNT - 1);
  b->sms = (int)rnd_range(1, HR_MAX_SMS);
  b->cluster = clusters[rnd() % (sizeof(clusters) / sizeof(clusters[0]))];
  b->headroom = (int)rnd_range(0, HR_MAX_SMS);
  b->grid = (int)rnd_range(0, HR_MAX_SMS);
  b->nccl_min_ctas = (int)rnd_range(0, HR_MAX_CTAS);
  b->nccl_max_ctas = (int)rnd_range(0, HR_MAX_CTAS);
  b->nccl_cga_cluster_size = (int)rnd_range(0, HR_MAX_CGA);
  b->nccl_nvls_enable = (int)rnd_range(0, 2);
  b->degraded = (int)rnd_range(0, 1);
  b->partition_granularity = (int)rnd_range(0, HR_MAX_SMS);
  b->partition_comm_sms = (int)rnd_range(0, HR_MAX_SMS);
  b->partition_nccl_max_ctas = (int)rnd_range(0, HR_MAX_CTAS);
}

/* Free text that exercises the escaping: control bytes, quotes,
 * backslashes, DEL, 2- to 4-byte characters, now and then a byte that is
 * not UTF-8, and now and then no '\0' at all. */
static void rnd_text(char *dst, size_t size)
{
  static const char *const pieces[] = {
    "a", "Z", " ", "\"", "\\", "/", "\b", "\f", "\n", "\r", "\t", "\x01",
    "\x1f", "\x7f", "\xc3\xa9", "\xe2\x82\xac", "\xf0\x9f\x98\x80", "{}",
    "lease 42", ":", ",",
  };
  size_t len = 0, want = rnd_one_in(8) ? size - 1 : rnd() % size, n;
  const char *piece;

  while(len < want) {
    piece = pieces[rnd() % (sizeof(pieces) / sizeof(pieces[0]))];
    n = strlen(piece);
    if(len + n > want)
      break;
    memcpy(dst + len, piece, n);
    len += n;
  }
  if(len && rnd_one_in(32))
    dst[rnd() % len] = (char)0xff;  /* not UTF-8 */
  if(rnd_one_in(64)) {
    memset(dst, 'x', size);         /* not terminated */
    return;
  }
  dst[len] = '\0';
}

static void rnd_reply(hr_reply *rep)
{
  static const hr_msg_type types[] = {
    HR_MSG_REGISTER_COMM, HR_MSG_UNREGISTER_COMM, HR_MSG_LEASE,
    HR_MSG_RELEASE, HR_MSG_REPORT, HR_MSG_SUBSCRIBE, HR_MSG_BUDGET,
    HR_MSG_SHUTDOWN, HR_MSG_ERROR,
  };

  memset(rep, 0, sizeof(*rep));
  rep->type = types[rnd() % (sizeof(types) / sizeof(types[0]))];
  rep->id = rnd_id(0);
  switch(rep->type) {
  case HR_MSG_REGISTER_COMM:
    rep->u.register_comm.comm = rnd_id(1);
    break;
  case HR_MSG_LEASE:
    rep->u.lease.lease = rnd_id(1);
    rnd_budget(&rep->u.lease.budget);
    break;
  case HR_MSG_REPORT:
    rep->u.report.incident = rnd_id(1);
    rnd_budget(&rep->u.report.budget);
    break;
  case HR_MSG_BUDGET:
    rep->id = -1;
    rnd_budget(&rep->u.budget);
    break;
  case HR_MSG_SHUTDOWN:
    rep->id = -1;
    rnd_text(rep->u.shutdown_reason, sizeof(rep->u.shutdown_reason));
    break;
  case HR_MSG_ERROR:
    if(rnd_one_in(4))
      rep->id = -1;                 /* "id": null */
    rep->u.error.code = (hr_wire_error)rnd_range(0, HR_WERR_COUNT - 1);
    rnd_text(rep->u.error.message, sizeof(rep->u.error.message));
    break;
  default:
    break;
  }
}

/* Each encoder appends to a buffer that already holds a line, as the
 * daemon's write queue does; a refusal must leave that line alone. */
static void test_fast_matches_tree(void **state)
{
  static const char prefix[] = "{\"earlier\":1}\n";
  int i, rc_tree, rc_fast, rc_pub, ok = 0, refused = 0;
  int seen[HR_MSG_COUNT] = { 0 };
  hr_buf tree, fast, pub;
  hr_reply rep;
  size_t plen = sizeof(prefix) - 1;

  (void)state;
  hr_buf_init(&tree, 0);
  hr_buf_init(&fast, 0);
  hr_buf_init(&pub, 0);
  for(i = 0; i < 200000; i++) {
    rnd_reply(&rep);
    hr_buf_reset(&tree);
    hr_buf_reset(&fast);
    hr_buf_reset(&pub);
    assert_int_equal(hr_buf_append(&tree, prefix, plen), HR_OK);
    assert_int_equal(hr_buf_append(&fast, prefix, plen), HR_OK);
    assert_int_equal(hr_buf_append(&pub, prefix, plen), HR_OK);
    assert_true(hr__reply_fast(rep.type));
    rc_tree = hr__reply_encode_tree(&rep, &tree);
    rc_fast = hr__reply_encode_fast(&rep, &fast);
    rc_pub = hr_proto_encode_reply(&rep, &pub);
    if(rc_tree != rc_fast || tree.len != fast.len ||
       memcmp(tree.data, fast.data, tree.len) != 0)
      fail_msg("struct %d (type %s, rc %d/%d):\n tree %s fast %s", i,
               hr_msg_type_name(rep.type), rc_tree, rc_fast, tree.data,
               fast.data);
    assert_int_equal(rc_pub, rc_tree);
    assert_int_equal(pub.len, tree.len);
    assert_memory_equal(pub.data, tree.data, tree.len);
    if(rc_tree == HR_OK) {
      ok++;
      seen[rep.type]++;
    } else {
      refused++;
      assert_int_equal(rc_tree, HR_EINVAL);
      assert_int_equal(fast.len, plen);
    }
  }
  /* Both sides of the comparison were exercised, for every type. */
  assert_true(ok > 50000);
  assert_true(refused > 10000);
  assert_true(seen[HR_MSG_LEASE] > 1000 && seen[HR_MSG_BUDGET] > 1000 &&
              seen[HR_MSG_REPORT] > 1000 && seen[HR_MSG_ERROR] > 1000 &&
              seen[HR_MSG_SHUTDOWN] > 1000 && seen[HR_MSG_RELEASE] > 1000 &&
              seen[HR_MSG_SUBSCRIBE] > 1000 &&
              seen[HR_MSG_UNREGISTER_COMM] > 1000 &&
              seen[HR_MSG_REGISTER_COMM] > 1000);
  /* The types left to the tree are refused by the direct encoder. */
  assert_false(hr__reply_fast(HR_MSG_STATUS));
  assert_false(hr__reply_fast(HR_MSG_HELLO));
  rep.type = HR_MSG_STATUS;
  assert_int_equal(hr__reply_encode_fast(&rep, &fast), HR_EINVAL);
  hr_buf_free(&tree);
  hr_buf_free(&fast);
  hr_buf_free(&pub);
}

/* The buffer's cap holds for the direct encoder too, all or nothing. */
static void test_fast_cap(void **state)
{
  hr_reply rep;
  hr_buf b;

  (void)state;
  memset(&rep, 0, sizeof(rep));
  rep.type = HR_MSG_RELEASE;
  rep.id = 12;
  hr_buf_init(&b, 30);
  assert_int_equal(hr_proto_encode_reply(&rep, &b), HR_OK);
  assert_string_equal(b.data, "{\"id\":12,\"type\":\"release\"}\n");
  assert_int_equal(hr_proto_encode_reply(&rep, &b), HR_ETOOLARGE);
  assert_int_equal(b.len, 27);
  hr_buf_free(&b);
}

/* ---- PROTOCOL.md ------------------------------------------------------- */

static char *read_file(const char *path, size_t *len)
{
  FILE *f = fopen(path, "rb");
  char *data = NULL;
  long n;

  if(!f)
    return NULL;
  if(fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) >= 0 &&
     fseek(f, 0, SEEK_SET) == 0 && (data = malloc((size_t)n + 1))) {
    *len = fread(data, 1, (size_t)n, f);
    data[*len] = '\0';
  }
  fclose(f);
  return data;
}

/* 1 when `line` decodes as a request or a reply and encodes back to the
 * very same bytes. */
static int example_is_exact(const char *line, size_t len)
{
  hr_proto_error err;
  hr_request req;
  hr_reply rep;
  hr_buf b;
  int same = 0;

  hr_buf_init(&b, 0);
  if(hr_proto_decode_request(line, len, &req, &err) == HR_OK &&
     hr_proto_encode_request(&req, &b) == HR_OK)
    same = b.len == len + 1 && !memcmp(b.data, line, len);
  hr_buf_reset(&b);
  if(!same && hr_proto_decode_reply(line, len, &rep, &err) == HR_OK) {
    if(hr_proto_encode_reply(&rep, &b) == HR_OK)
      same = b.len == len + 1 && !memcmp(b.data, line, len);
    hr_reply_free(&rep);
  }
  hr_buf_free(&b);
  return same;
}

static void test_protocol_examples(void **state)
{
  const char *dir = getenv("HEADROOM_SRCDIR");
  char path[4096];
  char *doc, *line, *next;
  size_t len;
  int in_json = 0, examples = 0, lineno = 0, bad = 0;

  (void)state;
  snprintf(path, sizeof(path), "%s/proto/PROTOCOL.md", dir ? dir : ".");
  doc = read_file(path, &len);
  if(!doc)
    print_error("cannot read %s (run from the repository root or set "
                "HEADROOM_SRCDIR)\n", path);
  assert_non_null(doc);
  for(line = doc; line && *line; line = next) {
    next = strchr(line, '\n');
    if(next)
      *next++ = '\0';
    lineno++;
    if(!strncmp(line, "```", 3)) {
      in_json = !in_json && !strcmp(line, "```json");
      continue;
    }
    if(!in_json || !*line)
      continue;
    examples++;
    if(!example_is_exact(line, strlen(line))) {
      print_error("PROTOCOL.md:%d: not what the encoder writes: %s\n",
                  lineno, line);
      bad++;
    }
  }
  free(doc);
  assert_int_equal(bad, 0);
  /* Every message has an example; fewer means the scan found nothing. */
  assert_true(examples >= 30);
}

int main(void)
{
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_names),
    cmocka_unit_test(test_buf),
    cmocka_unit_test(test_request_hello),
    cmocka_unit_test(test_request_hello_degraded),
    cmocka_unit_test(test_request_comms),
    cmocka_unit_test(test_request_leases),
    cmocka_unit_test(test_request_report),
    cmocka_unit_test(test_request_small),
    cmocka_unit_test(test_raises),
    cmocka_unit_test(test_reply_hello),
    cmocka_unit_test(test_reply_others),
    cmocka_unit_test(test_reply_events_and_errors),
    cmocka_unit_test(test_reply_status),
    cmocka_unit_test(test_reply_status_summary),
    cmocka_unit_test(test_summary_always_fits),
    cmocka_unit_test(test_reply_metrics),
    cmocka_unit_test(test_metrics_names_forward),
    cmocka_unit_test(test_bad_requests),
    cmocka_unit_test(test_lenient_requests),
    cmocka_unit_test(test_bad_args),
    cmocka_unit_test(test_bad_replies),
    cmocka_unit_test(test_bad_status_frees),
    cmocka_unit_test(test_unknown_error_code),
    cmocka_unit_test(test_no_read_past_len),
    cmocka_unit_test(test_encode_too_large),
    cmocka_unit_test(test_encode_invalid),
    cmocka_unit_test(test_encode_error),
    cmocka_unit_test(test_fast_matches_tree),
    cmocka_unit_test(test_fast_cap),
    cmocka_unit_test(test_protocol_examples),
  };

  return cmocka_run_group_tests(tests, NULL, NULL);
}
