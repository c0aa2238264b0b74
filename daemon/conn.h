/*
 * conn.h: one client connection: line framing in, a capped queue out.
 *
 * Reads are split into '\n'-terminated lines of at most HR_PROTO_MAX_LINE
 * bytes ('\n' included), however the bytes arrive: a line may span many
 * reads and one read may hold many lines. A longer line gets a too_large
 * error and the connection is closed once that reply is flushed.
 *
 * Writes are queued, never waited for. A client that stops reading only
 * fills its own queue; past write_queue_max of replies it is
 * disconnected, so it can never hold up the loop or anyone else.
 *
 * Budget events are not queued one per change: a connection keeps a mask
 * of the GPUs whose budget changed since it was last sent one, and each
 * GPU's newest budget is encoded when the socket can take it (nothing
 * else queued). A subscriber that reads slowly gets fewer events, never
 * a stale one, and at most one per GPU sits in its queue; events never
 * count toward write_queue_max, so nobody is disconnected for them.
 *
 * A connection must say hello within hello_timeout_ms or it is closed:
 * a slot held by a socket that never speaks is a slot another tenant
 * cannot have. Connections are counted per uid too (tenant.h).
 *
 * Each line is counted against the client's message rate (ratelimit.h)
 * before it is served; past it the line is answered limit_exceeded, and a
 * client that keeps flooding is disconnected.
 *
 * A connection's footprints and leases are dropped the moment it starts
 * closing, for whatever reason (EOF, error, too_large, flooding, shutdown).
 *
 * A connection can also live without a socket ("detached"): bytes are fed
 * in by the caller and what the daemon would write is appended to a
 * buffer. Everything between the bytes and the buffer (framing, the rate,
 * decode, dispatch, state, the write cap) is the code a socket runs; the
 * fuzz targets and tests use this to drive it in-process.
 */
#ifndef HR_DAEMON_CONN_H
#define HR_DAEMON_CONN_H

#include <stdarg.h>
#include <stdint.h>

#include <uv.h>

#include "daemon.h"
#include "hr_proto.h"
#include "log.h"
#include "peer.h"
#include "ratelimit.h"

struct hr__conn {
  uv_pipe_t pipe;                   /* first: the handle's data is the conn */
  uv_timer_t linger;                /* caps the wait for a closing flush */
  uv_shutdown_t shutdown_req;
  hr__daemon *d;
  hr__conn *prev, *next;
  int64_t id;                       /* client id */
  hr__peer peer;
  int is_operator;
  char name[HR_NAME_MAX];           /* from hello */
  int hello;                        /* hello accepted */
  int version;                      /* protocol version chosen */
  int sub_all;                      /* subscribed to every GPU */
  hr__gpu_mask sub_mask;            /* ... or to these */
  int n_comms, n_leases;            /* for the per-client limits */
  char *rbuf;                       /* the line being received */
  size_t rlen, rcap;
  int counted;                      /* counts toward max_clients */
  hr__gpu_mask ev_dirty;            /* GPUs whose newest budget is owed */
  size_t ev_queued;                 /* event bytes in the write queue */
  int closing;                      /* no more reads, replies or events */
  int handles;                      /* libuv handles not yet closed */
  hr__rate rate;                    /* messages a second */
  hr_buf *sink;                     /* detached: no socket, writes go here */
  int holding;                      /* sends wait in `held` for the save */
  hr_buf held;
};

/* Accept one pending connection on the listener. */
void hr__conn_accept(hr__daemon *d);

/* Queue one encoded message (`msg`, '\n' included). Past the client's
 * write queue cap the client is disconnected: HR_ELIMIT. HR_ECLOSED when
 * it is already closing. */
int hr__conn_send(hr__conn *c, const hr_buf *msg);

/* Encode and queue an error reply for request `id` (-1: unknown). */
int hr__conn_send_error(hr__conn *c, int64_t id, hr_wire_error code,
                        const char *fmt, ...) HR__PRINTF(4, 5);

/* The same with the arguments in a va_list. */
int hr__conn_send_verror(hr__conn *c, int64_t id, hr_wire_error code,
                         const char *fmt, va_list ap) HR__PRINTF(4, 0);

/* Hold back everything sent to `c` from now until the loop's next save
 * of the learned state is done (hr__conn_release_all, after it): the
 * reply to a report must not reach the client before the incident it
 * acknowledges is on disk, or a SIGKILL in between would lose an
 * incident the client was told was recorded. Held bytes count toward
 * write_queue_max and keep their order. A no-op without persistence and
 * for a detached connection (nothing is saved for it to wait for). */
void hr__conn_hold(hr__conn *c);

/* Send what every connection held; call right after the save. Returns
 * the number of connections released. */
int hr__conn_release_all(hr__daemon *d);

/* Set c->is_operator from its peer's credentials and the daemon's
 * operator_gid (at admission, and again when a reload changes it). */
void hr__conn_check_operator(hr__conn *c);

/* Close after what is queued has been flushed (bounded by a timer). */
void hr__conn_drain(hr__conn *c, const char *why);

/* Close now; queued writes are dropped. */
void hr__conn_close(hr__conn *c, const char *why);

/* Subscribed to `gpu`'s budget events. */
int hr__conn_subscribed(const hr__conn *c, int gpu);

/* The GPUs of `n_gpus` whose budget events `c` is subscribed to. */
hr__gpu_mask hr__conn_sub_mask(const hr__conn *c, int n_gpus);

/* Whether the socket can take events now: open, said hello, nothing
 * queued or held. A detached connection always can. */
int hr__conn_can_push(const hr__conn *c);

/* Queue one encoded budget event: as hr__conn_send, but outside
 * write_queue_max (at most one per GPU is queued: callers send only
 * when hr__conn_can_push). */
int hr__conn_send_event(hr__conn *c, const hr_buf *msg);

/* Bytes queued to `c` now and not yet written: replies, events, held. */
size_t hr__conn_queued(const hr__conn *c);

/* Frame `len` received bytes into lines and serve each one. */
void hr__conn_feed(hr__conn *c, const char *data, size_t len);

/* The peer closed its side: serve a last line left without its '\n',
 * then close once the replies are out. */
void hr__conn_feed_eof(hr__conn *c);

/* ---- detached connections (no socket) ---------------------------------- */

/* A client of `d` with credentials `peer`, counted like an accepted one
 * (max_clients included: past it the refusal lands in `sink` and the
 * connection is closing). Everything it is sent is appended to `sink`;
 * past sink's cap it is closed as a client that does not read would be.
 * NULL when out of memory. Feed it with hr__conn_feed. */
hr__conn *hr__conn_open_detached(hr__daemon *d, const hr__peer *peer,
                                 hr_buf *sink);

/* Close it if it is still open (dropping what it holds) and free it. */
void hr__conn_free_detached(hr__conn *c);

#endif /* HR_DAEMON_CONN_H */
