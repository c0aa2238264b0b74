/*
 * fuzz_reply.c: libFuzzer target over what a client does with the bytes
 * a daemon sends: the library's line framing (hr__conn_take_line), the
 * reply decoder (hr_proto_decode_reply), and the library's handling of
 * each message (hr__io_handle: replies matched to requests, pushed
 * budgets applied to leases, orphaned replies undone, shutdown noticed).
 *
 * The client is a real hr_client with no daemon (its I/O thread sleeps),
 * holding two leases that the target marks as held on a connection, so
 * budgets for their GPUs reach them exactly as from a daemon.
 *
 * Besides what the sanitizers catch, the target aborts when:
 *  - a reply the decoder accepts cannot be encoded (the two disagree on
 *    what is valid), or does not survive decode(encode(x)) byte for byte;
 *  - a lease's hot-path word and its full budget disagree on the grid;
 *  - a lease's epoch went backwards.
 */
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sanitizer/common_interface_defs.h>

#include "hr_client_int.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

static hr_client *client;
static hr_lease *leases[2];
static uint32_t last_epoch[2];
static char *inbuf;

/* Through the sanitizer's report channel: the target's own stderr is
 * closed under -close_fd_mask=2, the reports' channel is not. */
static void die(const char *what)
{
  char line[256];

  snprintf(line, sizeof(line), "fuzz_reply: invariant broken: %s", what);
  __sanitizer_report_error_summary(line);
  abort();
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
  hr_client_options o;
  int i;

  (void)argc;
  (void)argv;
  memset(&o, 0, sizeof(o));
  o.name = "fuzz";
  o.quiet = 1;
  o.reconnect_ms = INT_MAX;     /* the I/O thread never tries again */
  if(hr_client_open(&client, "/nonexistent/headroom-fuzz.sock", &o) ||
     hr_lease_acquire(client, 0, 2, HR_MODE_HEADROOM, &leases[0]) ||
     hr_lease_acquire(client, 1, 4, HR_MODE_COOPERATIVE, &leases[1]))
    die("cannot set up the client");
  /* As if a daemon had granted both on connection 1. */
  pthread_mutex_lock(&client->mu);
  client->gen = 1;
  for(i = 0; i < 2; i++) {
    leases[i]->gen = 1;
    leases[i]->daemon_id = i + 1;
    last_epoch[i] = hr_lease_epoch(leases[i]);
  }
  pthread_mutex_unlock(&client->mu);
  inbuf = malloc(HR_PROTO_MAX_LINE);
  if(!inbuf)
    die("out of memory");
  return 0;
}

/* decode(x) succeeded: encode it, decode that, encode again: the two
 * encodings must be the same bytes. */
static void check_round_trip(const hr_reply *rep)
{
  hr_proto_error err;
  hr_reply again;
  hr_buf b1, b2;
  int rc;

  hr_buf_init(&b1, 0);
  hr_buf_init(&b2, 0);
  rc = hr_proto_encode_reply(rep, &b1);
  /* A decoded line fits 64 KiB, but its encoding may not: escapes the
   * sender left out can come back longer. Anything else is a bug. */
  if(rc && rc != HR_ETOOLARGE) {
    fprintf(stderr, "encode: %s\n", hr_strerror(rc));
    die("the decoder accepted a reply the encoder refuses");
  }
  if(!rc) {
    if(b1.len < 1 || b1.data[b1.len - 1] != '\n')
      die("an encoded reply does not end its line");
    if(hr_proto_decode_reply(b1.data, b1.len - 1, &again, &err)) {
      fprintf(stderr, "%s(%s)\n", b1.data, err.message);
      die("the decoder refuses what the encoder wrote");
    }
    rc = hr_proto_encode_reply(&again, &b2);
    hr_reply_free(&again);
    if(rc || b1.len != b2.len || memcmp(b1.data, b2.data, b1.len)) {
      fprintf(stderr, "first:  %ssecond: %s\n", b1.data,
              b2.data ? b2.data : "(none)");
      die("decode(encode(x)) is not x");
    }
  }
  hr_buf_free(&b1);
  hr_buf_free(&b2);
}

static void check_leases(void)
{
  int i;

  for(i = 0; i < 2; i++) {
    hr_budget b;
    uint32_t e = hr_lease_epoch(leases[i]);

    if(hr_lease_budget(leases[i], &b))
      die("hr_lease_budget failed");
    if(hr_lease_grid(leases[i]) != (b.grid < 0 ? 0 : b.grid > 0xffff ?
                                    0xffff : b.grid))
      die("a lease's grid word and its budget disagree");
    if(e < last_epoch[i])
      die("a lease's epoch went backwards");
    last_epoch[i] = e;
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  hr__conn conn;
  const char *line;
  size_t len;

  /* The library holds at most 64 KiB of input; past that it drops the
   * connection before framing anything. */
  if(size > HR_PROTO_MAX_LINE)
    size = HR_PROTO_MAX_LINE;
  hr__conn_init(&conn);
  memcpy(inbuf, data, size);
  conn.in = inbuf;
  conn.in_len = size;
  while(hr__conn_take_line(&conn, &line, &len)) {
    hr_proto_error err;
    hr_reply rep;

    memset(&rep, 0, sizeof(rep));
    if(hr_proto_decode_reply(line, len, &rep, &err))
      continue;             /* the library skips such a line */
    check_round_trip(&rep);
    hr__io_handle(client, &rep);
    hr_reply_free(&rep);
    check_leases();
  }
  conn.in = NULL;           /* ours, not the connection's */
  hr__conn_free(&conn);
  return 0;
}
