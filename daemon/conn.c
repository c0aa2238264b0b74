/*
 * conn.c: one client connection: accept, framing, capped writes, close
 * (see conn.h).
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef __GLIBC__
#include <malloc.h>             /* malloc_trim */
#endif

#include "conn.h"
#include "dispatch.h"
#include "log.h"
#include "state.h"

/* How long a closing connection may take to flush its last replies before
 * it is cut off: a peer that stopped reading must not keep it forever. */
#define LINGER_MS 2000
#define RBUF_FIRST 4096
/* Give freed heap back to the system once the clients have fallen below
 * half of their high-water mark, when that mark was at least this. */
#define TRIM_MIN_CLIENTS 64

typedef struct write_req {
  uv_write_t req;
  hr__conn *conn;
  size_t event;                     /* bytes of budget events in data */
  char data[];
} write_req;

/* One read buffer for every connection: the loop is single-threaded and
 * each read is consumed before the next is allocated. */
static char read_buf[HR_PROTO_MAX_LINE];

/* The most clients at once since the heap was last trimmed. One daemon
 * per process, so this lives here rather than in hr__daemon. */
static int clients_high;

static void note_clients(const hr__daemon *d)
{
  if(d->n_clients > clients_high)
    clients_high = d->n_clients;
}

/* glibc keeps freed memory for reuse: a daemon that once served a
 * thousand clients would keep their footprint in RSS for good. Trimming
 * walks the heap, so it is done only after a large fall. */
static void trim_heap(const hr__daemon *d)
{
  if(clients_high < TRIM_MIN_CLIENTS || d->n_clients * 2 >= clients_high)
    return;
  clients_high = d->n_clients;
#ifdef __GLIBC__
  malloc_trim(0);
#endif
}

/* Drop what was held (the connection is going without it). */
static void stop_holding(hr__conn *c)
{
  if(c->holding) {
    c->holding = 0;
    c->d->n_holding--;
  }
  hr_buf_free(&c->held);
}

/* Take `c` off the daemon's list and free it with what it held. */
static void unlink_free(hr__conn *c)
{
  hr__daemon *d = c->d;

  if(c->prev)
    c->prev->next = c->next;
  else
    d->conns = c->next;
  if(c->next)
    c->next->prev = c->prev;
  stop_holding(c);
  free(c->rbuf);
  free(c);
}

static void on_handle_closed(uv_handle_t *h)
{
  hr__conn *c = h->data;
  hr__daemon *d = c->d;

  if(--c->handles > 0)
    return;
  unlink_free(c);
  trim_heap(d);
}

static void close_handles(hr__conn *c)
{
  if(c->sink)
    return;   /* detached: no handles; its owner frees it */
  if(!uv_is_closing((uv_handle_t *)&c->pipe))
    uv_close((uv_handle_t *)&c->pipe, on_handle_closed);
  if(!uv_is_closing((uv_handle_t *)&c->linger))
    uv_close((uv_handle_t *)&c->linger, on_handle_closed);
}

/* The moment a connection stops being a client: whatever it held goes. */
static void begin_close(hr__conn *c, hr__log_level level, const char *why)
{
  hr__daemon *d = c->d;

  c->closing = 1;
  if(c->id)
    hr__log(level, "client %lld (pid %d) disconnected: %s", (long long)c->id,
            c->peer.pid, why);
  c->ev_dirty = 0;
  hr__dispatch_gone(c);
  if(c->counted) {
    hr__tenant *t = hr__tenants_find(&d->tenants, c->peer.uid);
    c->counted = 0;
    d->n_clients--;
    if(t)
      t->conns--;
    hr__tenants_put(&d->tenants, c->peer.uid);
  }
}

void hr__conn_close(hr__conn *c, const char *why)
{
  if(!c)
    return;
  if(!c->closing)
    begin_close(c, HR_LOG_INFO, why);
  close_handles(c);
}

static void on_shutdown(uv_shutdown_t *req, int status)
{
  hr__conn *c = req->handle->data;

  (void)status;
  close_handles(c);
}

static void drain_at(hr__conn *c, hr__log_level level, const char *why);

/* The hello deadline shares the linger timer: it runs until the
 * connection either says hello or starts closing, and a drain restarts
 * the timer with on_linger. */
static void on_hello_deadline(uv_timer_t *t)
{
  hr__conn *c = t->data;
  const hr__daemon *d = c->d;
  char why[96];

  if(c->hello || c->closing)
    return;
  hr__conn_send_error(c, -1, HR_WERR_HELLO_REQUIRED,
                      "no hello within %d ms (hello_timeout_ms); closing",
                      d->cfg.hello_timeout_ms);
  snprintf(why, sizeof(why), "no hello within %d ms (hello_timeout_ms)",
           d->cfg.hello_timeout_ms);
  drain_at(c, HR_LOG_NOTICE, why);
}

static void on_linger(uv_timer_t *t)
{
  hr__conn *c = t->data;

  hr__debug("client %lld: final replies not read in %d ms; cut off",
            (long long)c->id, LINGER_MS);
  close_handles(c);
}

static int release(hr__conn *c);

static void drain_at(hr__conn *c, hr__log_level level, const char *why)
{
  if(!c || c->closing)
    return;
  /* Its last replies go out before the shutdown: what they acknowledge
   * is saved first, as the loop's check would. */
  if(c->holding) {
    hr__daemon_save(c->d);
    release(c);
  }
  begin_close(c, level, why);
  if(c->sink)
    return;   /* detached: what was sent is already in the sink */
  uv_read_stop((uv_stream_t *)&c->pipe);
  /* uv_shutdown completes once every queued write is out. */
  if(uv_shutdown(&c->shutdown_req, (uv_stream_t *)&c->pipe, on_shutdown)) {
    close_handles(c);
    return;
  }
  uv_timer_start(&c->linger, on_linger, LINGER_MS, 0);
}

void hr__conn_drain(hr__conn *c, const char *why)
{
  drain_at(c, HR_LOG_INFO, why);
}

int hr__conn_subscribed(const hr__conn *c, int gpu)
{
  if(gpu < 0 || gpu >= HR_MAX_GPUS)
    return 0;
  return c->sub_all || (c->sub_mask & ((hr__gpu_mask)1 << gpu));
}

hr__gpu_mask hr__conn_sub_mask(const hr__conn *c, int n_gpus)
{
  hr__gpu_mask all;

  if(!c || n_gpus <= 0)
    return 0;
  all = n_gpus >= HR_MAX_GPUS ? ~(hr__gpu_mask)0
                              : ((hr__gpu_mask)1 << n_gpus) - 1;
  return c->sub_all ? all : c->sub_mask & all;
}

size_t hr__conn_queued(const hr__conn *c)
{
  size_t q;

  if(!c)
    return 0;
  q = c->held.len;
  if(c->sink)
    return q;   /* what a detached one was sent is already delivered */
  if(!uv_is_closing((const uv_handle_t *)&c->pipe))
    q += uv_stream_get_write_queue_size((const uv_stream_t *)&c->pipe);
  return q;
}

int hr__conn_can_push(const hr__conn *c)
{
  if(!c || c->closing || !c->hello || c->holding)
    return 0;
  if(c->sink)
    return 1;
  return uv_stream_get_write_queue_size((const uv_stream_t *)&c->pipe) == 0;
}

/* ---- writing ----------------------------------------------------------- */

static void on_write(uv_write_t *req, int status)
{
  write_req *w = (write_req *)req;
  hr__conn *c = w->conn;

  c->ev_queued -= w->event < c->ev_queued ? w->event : c->ev_queued;
  free(w);
  if(status < 0 && status != UV_ECANCELED && !c->closing) {
    char why[96];
    snprintf(why, sizeof(why), "write failed: %s", uv_strerror(status));
    hr__conn_close(c, why);
    return;
  }
  /* The socket took everything: the budgets owed meanwhile go now, each
   * GPU's newest only. */
  if(c->ev_dirty && hr__conn_can_push(c))
    hr__dispatch_push(c);
}

/* Queue `msg`; `event`: it is a budget event, outside the cap. */
static int send_msg(hr__conn *c, const hr_buf *msg, int event)
{
  uv_stream_t *s;
  write_req *w;
  uv_buf_t buf;
  size_t queued, sent = 0;
  int rc;

  if(!c || !msg || !msg->len)
    return HR_EINVAL;
  if(c->closing)
    return HR_ECLOSED;
  s = (uv_stream_t *)&c->pipe;
  queued = c->sink ? c->sink->len : uv_stream_get_write_queue_size(s);
  queued += c->held.len;
  /* Only the client's own unread replies count: the events queued are
   * at most one per GPU (conn.h). */
  if(!event &&
     queued - c->ev_queued + msg->len > c->d->cfg.write_queue_max) {
    char why[160];
    snprintf(why, sizeof(why), "not reading: %zu bytes of replies queued, "
             "over write_queue_max (%zu)", queued - c->ev_queued + msg->len,
             c->d->cfg.write_queue_max);
    begin_close(c, HR_LOG_WARNING, why);
    close_handles(c);
    return HR_ELIMIT;
  }
  if(c->sink) {
    rc = hr_buf_append(c->sink, msg->data, msg->len);
    if(rc)
      hr__conn_close(c, "detached: sink full");
    return rc ? HR_ECLOSED : HR_OK;
  }
  if(c->holding) {
    rc = hr_buf_append(&c->held, msg->data, msg->len);
    if(rc) {
      hr__conn_close(c, "out of memory holding a reply");
      return HR_ECLOSED;
    }
    return HR_OK;
  }
  /* Nothing queued (the usual case): write now. A reply that goes out
   * whole costs one write(2); no request to allocate, copy into and
   * complete, and no change to the loop's epoll set. libuv refuses
   * (EAGAIN) while anything is queued, so order is kept. */
  if(!queued) {
    buf = uv_buf_init(msg->data, (unsigned)msg->len);
    rc = uv_try_write(s, &buf, 1);
    if(rc == (int)msg->len)
      return HR_OK;
    if(rc < 0 && rc != UV_EAGAIN) {
      char why[96];
      snprintf(why, sizeof(why), "write failed: %s", uv_strerror(rc));
      hr__conn_close(c, why);
      return HR_ECLOSED;
    }
    if(rc > 0)
      sent = (size_t)rc;
  }
  w = malloc(sizeof(*w) + msg->len - sent);
  if(!w) {
    hr__conn_close(c, "out of memory queueing a reply");
    return HR_ENOMEM;
  }
  w->conn = c;
  w->event = event ? msg->len - sent : 0;
  memcpy(w->data, msg->data + sent, msg->len - sent);
  buf = uv_buf_init(w->data, (unsigned)(msg->len - sent));
  rc = uv_write(&w->req, s, &buf, 1, on_write);
  if(rc) {
    char why[96];
    free(w);
    snprintf(why, sizeof(why), "write failed: %s", uv_strerror(rc));
    hr__conn_close(c, why);
    return HR_ECLOSED;
  }
  c->ev_queued += w->event;
  return HR_OK;
}

int hr__conn_send(hr__conn *c, const hr_buf *msg)
{
  return send_msg(c, msg, 0);
}

int hr__conn_send_event(hr__conn *c, const hr_buf *msg)
{
  return send_msg(c, msg, 1);
}

int hr__conn_send_error(hr__conn *c, int64_t id, hr_wire_error code,
                        const char *fmt, ...)
{
  va_list ap;
  int rc;

  va_start(ap, fmt);
  rc = hr__conn_send_verror(c, id, code, fmt, ap);
  va_end(ap);
  return rc;
}

int hr__conn_send_verror(hr__conn *c, int64_t id, hr_wire_error code,
                         const char *fmt, va_list ap)
{
  char msg[HR_MESSAGE_MAX];
  hr_buf *out;
  int rc;

  if(!c || !fmt)
    return HR_EINVAL;
  vsnprintf(msg, sizeof(msg), fmt, ap);
  out = &c->d->out;
  hr_buf_reset(out);
  rc = hr_proto_encode_error(id, code, msg, out);
  if(rc) {
    hr__err("client %lld: cannot encode an error reply (%s)",
            (long long)c->id, hr_strerror(rc));
    return rc;
  }
  return hr__conn_send(c, out);
}

void hr__conn_hold(hr__conn *c)
{
  if(!c || c->closing || c->sink || !c->d->persist.enabled || c->holding)
    return;
  c->holding = 1;
  c->d->n_holding++;
  /* No cap of its own: hr__conn_send holds it to write_queue_max, held
   * bytes included. Nothing is allocated until something is held. */
  if(!c->held.data)
    hr_buf_init(&c->held, SIZE_MAX);
}

/* Stop holding and send what was held, as one write. Returns 1 when `c`
 * was holding. */
static int release(hr__conn *c)
{
  hr_buf held;

  if(!c->holding)
    return 0;
  c->holding = 0;
  c->d->n_holding--;
  if(!c->held.len)
    return 1;
  /* Moved out first: hr__conn_send counts c->held toward the queue cap,
   * and these bytes are leaving it. */
  held = c->held;
  memset(&c->held, 0, sizeof(c->held));
  hr__conn_send(c, &held);
  hr_buf_free(&held);
  if(c->ev_dirty && hr__conn_can_push(c))
    hr__dispatch_push(c);
  return 1;
}

int hr__conn_release_all(hr__daemon *d)
{
  hr__conn *c;
  int n = 0;

  if(!d || !d->n_holding)
    return 0;
  /* Closed connections stay linked until libuv has closed them, so the
   * list is safe to walk while a send cuts a client off. */
  for(c = d->conns; c && d->n_holding; c = c->next)
    n += release(c);
  return n;
}

/* ---- reading ----------------------------------------------------------- */

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
  (void)h;
  (void)suggested;
  buf->base = read_buf;
  buf->len = sizeof(read_buf);
}

static int blank(const char *p, size_t len)
{
  size_t i;

  for(i = 0; i < len; i++)
    if(p[i] != ' ' && p[i] != '\t' && p[i] != '\r')
      return 0;
  return 1;
}

/* The loop's cached time: no clock read per message. A detached
 * connection has no loop; its clock stands still, so only the burst
 * applies to it. */
static uint64_t now_ms(const hr__daemon *d)
{
  return d->loop ? uv_now(d->loop) : 0;
}

/* A line answered here rather than by the dispatcher is still a line the
 * daemon answered: counted as one (status's requests, and the metrics) so
 * that the requests add up to the replies. */
static void count_refused(hr__daemon *d, hr_msg_type type, hr_wire_error code,
                          uint64_t t0)
{
  d->requests++;
  hr__metrics_refused(&d->metrics, type, code, uv_hrtime() - t0);
}

/* A line past the client's rate is answered, not served. It is decoded
 * only for its id, so the client can match the error to its request. */
static void refuse_line(hr__conn *c, const char *line, size_t len, int cut)
{
  const hr__config *cfg = &c->d->cfg;
  uint64_t t0 = uv_hrtime();
  hr_proto_error perr;
  hr_request req;
  char why[160];

  memset(&req, 0, sizeof(req));
  (void)hr_proto_decode_request(line, len, &req, &perr);
  if(req.id < 0)
    req.id = -1;
  hr__conn_send_error(c, req.id, HR_WERR_LIMIT_EXCEEDED,
                      "over %d messages a second, %d at once "
                      "(max_messages_per_second, max_message_burst)%s",
                      cfg->max_messages_per_second, cfg->max_message_burst,
                      cut ? "; disconnecting" : "");
  /* By the type it named; one that does not decode is "invalid", as the
   * dispatcher would have counted it. */
  count_refused(c->d, req.type, HR_WERR_LIMIT_EXCEEDED, t0);
  if(!cut)
    return;
  snprintf(why, sizeof(why), "flooding: %d messages in a row over "
           "max_messages_per_second (%d)", cfg->max_message_burst + 1,
           cfg->max_messages_per_second);
  drain_at(c, HR_LOG_WARNING, why);
}

static void handle_line(hr__conn *c, const char *line, size_t len)
{
  const hr__config *cfg = &c->d->cfg;
  hr__rate_verdict v;

  /* Blank lines (a stray "\r\n", a trailing newline) are not messages. */
  if(blank(line, len))
    return;
  v = hr__rate_take(&c->rate, now_ms(c->d), cfg->max_messages_per_second,
                    cfg->max_message_burst);
  if(v != HR__RATE_SERVE) {
    refuse_line(c, line, len, v == HR__RATE_CUT);
    return;
  }
  hr__dispatch_line(c, line, len);
}

static int rbuf_reserve(hr__conn *c, size_t need)
{
  size_t cap = c->rcap ? c->rcap : RBUF_FIRST;
  char *p;

  if(need <= c->rcap)
    return HR_OK;
  while(cap < need)
    cap *= 2;
  if(cap > HR_PROTO_MAX_LINE)
    cap = HR_PROTO_MAX_LINE;
  p = realloc(c->rbuf, cap);
  if(!p)
    return HR_ENOMEM;
  c->rbuf = p;
  c->rcap = cap;
  return HR_OK;
}

/* Split `n` bytes into lines. A line must fit HR_PROTO_MAX_LINE with its
 * '\n', so more than HR_PROTO_MAX_LINE - 1 bytes without one is already
 * too large; we answer at once rather than buffer without bound. */
void hr__conn_feed(hr__conn *c, const char *p, size_t n)
{
  if(!c || (!p && n))
    return;
  while(n > 0 && !c->closing) {
    const char *nl = memchr(p, '\n', n);
    size_t take = nl ? (size_t)(nl - p) : n;

    if(c->rlen + take > HR_PROTO_MAX_LINE - 1) {
      uint64_t t0 = uv_hrtime();
      hr__notice("client %lld (pid %d): message over %d bytes; closing",
                 (long long)c->id, c->peer.pid, HR_PROTO_MAX_LINE);
      hr__conn_send_error(c, -1, HR_WERR_TOO_LARGE,
                          "message longer than %d bytes", HR_PROTO_MAX_LINE);
      /* Never read, so never decoded: "invalid". */
      count_refused(c->d, HR_MSG_NONE, HR_WERR_TOO_LARGE, t0);
      hr__conn_drain(c, "message too large");
      return;
    }
    if(nl && c->rlen == 0) {
      /* The common case, a whole line in this read: no copy. */
      handle_line(c, p, take);
    } else {
      size_t len = c->rlen + take;
      if(rbuf_reserve(c, len)) {
        hr__conn_close(c, "out of memory buffering a message");
        return;
      }
      memcpy(c->rbuf + c->rlen, p, take);
      c->rlen = len;
      if(!nl)
        return;
      c->rlen = 0; /* before dispatch: the line is consumed either way */
      handle_line(c, c->rbuf, len);
    }
    p += take + 1;
    n -= take + 1;
  }
}

void hr__conn_feed_eof(hr__conn *c)
{
  if(!c)
    return;
  /* A last message without its '\n' (echo -n ... | socat) is still
   * answered: the peer may have shut down only its writing side. */
  if(c->rlen && !c->closing) {
    size_t len = c->rlen;
    c->rlen = 0;
    handle_line(c, c->rbuf, len);
  }
  hr__conn_drain(c, "closed by the client");
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
  hr__conn *c = s->data;
  hr__daemon *d = c->d;

  if(nread > 0) {
    hr__conn_feed(c, buf->base, (size_t)nread);
  } else if(nread == UV_EOF) {
    hr__conn_feed_eof(c);
  } else if(nread < 0) {
    char why[96];
    snprintf(why, sizeof(why), "read failed: %s", uv_strerror((int)nread));
    hr__conn_close(c, why);
  }
  hr__dispatch_flush(d);
}

/* ---- accepting --------------------------------------------------------- */

static void link_conn(hr__daemon *d, hr__conn *c)
{
  c->d = d;
  c->next = d->conns;
  if(d->conns)
    d->conns->prev = c;
  d->conns = c;
}

/* A refusal at connect, logged at warning at most once a second: a
 * tenant reconnecting in a loop must not flood the journal. The rest go
 * to debug, and the next warning says how many there were. */
static void log_refusal(hr__daemon *d, const hr__conn *c, int held,
                        const char *why)
{
  uint64_t now = now_ms(d);

  if(d->refusals_logged_ms && now - d->refusals_logged_ms < 1000) {
    d->refusals_quiet++;
    hr__debug("refusing pid %d uid %d (%d of its connections, %d in all): "
              "%s", c->peer.pid, c->peer.uid, held, d->n_clients, why);
    return;
  }
  if(d->refusals_quiet)
    hr__warn("refusing pid %d uid %d (%d of its connections, %d in all): "
             "%s; and %d more refused since the last such line",
             c->peer.pid, c->peer.uid, held, d->n_clients, why,
             d->refusals_quiet);
  else
    hr__warn("refusing pid %d uid %d (%d of its connections, %d in all): "
             "%s", c->peer.pid, c->peer.uid, held, d->n_clients, why);
  d->refusals_logged_ms = now ? now : 1;
  d->refusals_quiet = 0;
}

/* Count a new connection as a client, or refuse it (max_clients, and the
 * per-uid limits of tenant.h) with an error and a drain. Returns 0 when
 * admitted. */
static int admit(hr__daemon *d, hr__conn *c)
{
  hr__tenant *t = hr__tenants_find(&d->tenants, c->peer.uid);
  char why[HR_MESSAGE_MAX];

  if(hr__tenant_admit(&d->cfg, d->n_clients, t ? t->conns : 0, why,
                      sizeof(why))) {
    log_refusal(d, c, t ? t->conns : 0, why);
    hr__conn_send_error(c, -1, HR_WERR_LIMIT_EXCEEDED, "%s", why);
    hr__conn_drain(c, "refused at connect");
    return -1;
  }
  t = hr__tenants_get(&d->tenants, c->peer.uid);
  if(!t) {
    hr__err("accept: out of memory counting uid %d; refusing", c->peer.uid);
    hr__conn_send_error(c, -1, HR_WERR_INTERNAL, "out of memory");
    hr__conn_drain(c, "out of memory");
    return -1;
  }
  t->conns++;
  c->counted = 1;
  d->n_clients++;
  note_clients(d);
  c->id = hr__state_client_id(&d->state);
  hr__conn_check_operator(c);
  return 0;
}

void hr__conn_check_operator(hr__conn *c)
{
  uv_os_fd_t fd = -1;

  /* A detached connection has no socket: its uid and gid alone count. */
  if(!c->sink && uv_fileno((uv_handle_t *)&c->pipe, &fd))
    fd = -1;
  c->is_operator = hr__peer_is_operator(&c->peer, fd,
                                        c->d->has_operator_gid ?
                                        c->d->operator_gid : -1);
}

void hr__conn_accept(hr__daemon *d)
{
  hr__conn *c;
  uv_os_fd_t fd;
  int rc;

  c = calloc(1, sizeof(*c));
  if(!c) {
    hr__err("accept: out of memory");
    return;
  }
  uv_pipe_init(d->loop, &c->pipe, 0);
  uv_timer_init(d->loop, &c->linger);
  c->pipe.data = c;
  c->linger.data = c;
  c->handles = 2;
  link_conn(d, c);

  rc = uv_accept((uv_stream_t *)&d->listener, (uv_stream_t *)&c->pipe);
  if(rc) {
    hr__warn("accept: %s", uv_strerror(rc));
    c->closing = 1;
    close_handles(c);
    return;
  }
  if(uv_fileno((uv_handle_t *)&c->pipe, &fd) || hr__peer_read(fd, &c->peer)) {
    hr__warn("accept: cannot read peer credentials; refusing");
    c->closing = 1;
    close_handles(c);
    return;
  }
  if(admit(d, c))
    return;
  uv_timer_start(&c->linger, on_hello_deadline,
                 (uint64_t)d->cfg.hello_timeout_ms, 0);
  rc = uv_read_start((uv_stream_t *)&c->pipe, on_alloc, on_read);
  if(rc) {
    hr__conn_close(c, uv_strerror(rc));
    return;
  }
  hr__info("client %lld connected (pid %d, uid %d, gid %d%s)",
           (long long)c->id, c->peer.pid, c->peer.uid, c->peer.gid,
           c->is_operator ? ", operator" : "");
}

/* ---- detached ---------------------------------------------------------- */

hr__conn *hr__conn_open_detached(hr__daemon *d, const hr__peer *peer,
                                 hr_buf *sink)
{
  hr__conn *c;

  if(!d || !peer || !sink)
    return NULL;
  c = calloc(1, sizeof(*c));
  if(!c)
    return NULL;
  c->sink = sink;
  c->peer = *peer;
  link_conn(d, c);
  if(!admit(d, c))
    hr__debug("client %lld connected detached (pid %d, uid %d)",
              (long long)c->id, c->peer.pid, c->peer.uid);
  return c;
}

void hr__conn_free_detached(hr__conn *c)
{
  hr__daemon *d;

  if(!c || !c->sink)
    return;
  d = c->d;
  hr__conn_close(c, "detached connection freed");
  unlink_free(c);
  /* Its footprints and leases went: tell the others now, as the loop's
   * check callback would after a socket closed. */
  hr__dispatch_flush(d);
}
