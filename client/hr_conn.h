/*
 * hr_conn.h: one blocking, line-oriented connection to headroomd.
 *
 * Shared by the threaded client library, headroomctl and headroom-run so
 * that all three frame, cap and time out messages the same way. The socket
 * is non-blocking underneath; every wait is a poll() with a deadline, so no
 * call here can hang past its timeout. A second descriptor (`intr_fd`) can
 * be polled alongside the socket: when it becomes readable the wait ends
 * with HR__EINTR. The library uses it to stop its I/O thread, the tools to
 * stop on a signal.
 *
 * Not thread-safe: the caller serializes writers and owns the reader side.
 */
#ifndef HR_CONN_H
#define HR_CONN_H

#include <stddef.h>
#include <stdint.h>

#include "hr_proto.h"

/* A wait ended because `intr_fd` became readable (never seen by users of
 * the public API). */
#define HR__EINTR (-100)

typedef struct hr__conn {
  int fd;               /* -1 when closed */
  int intr_fd;          /* -1, or polled beside fd: readable = interrupted */
  char *in;             /* received bytes, HR_PROTO_MAX_LINE at most */
  size_t in_start;      /* first byte not yet handed out as a line */
  size_t in_len;        /* bytes held in `in` */
  size_t in_scan;       /* bytes after in_start already searched for '\n' */
  int64_t next_id;      /* last request id used by hr__conn_call */
  hr_buf out;           /* encode buffer for hr__conn_send */
} hr__conn;

/* Called by hr__conn_call for every message that is not the awaited reply
 * (events, and replies to other ids). The callee may keep nothing that the
 * reply owns; hr__conn_call frees it afterwards. */
typedef void (*hr__conn_other_cb)(void *arg, hr_reply *rep);

void hr__conn_init(hr__conn *c);

/* Connect to the Unix socket at `path`. HR_ECONNECT (nothing listening, no
 * such file), HR_EPERM (EACCES), HR_ETIMEDOUT, HR_EINVAL (path too long),
 * HR_ENOMEM. On failure `why` (if not NULL) says what happened. */
int hr__conn_connect(hr__conn *c, const char *path, int timeout_ms,
                     char *why, size_t why_len);

/* Close the socket and drop buffered input. Safe on a closed connection. */
void hr__conn_close(hr__conn *c);

/* Close, and free the buffers too (the struct itself is the caller's). */
void hr__conn_free(hr__conn *c);

/* Put the socket back into blocking mode (before handing it to a child
 * process, which shares the file status flags). */
int hr__conn_set_blocking(hr__conn *c);

/* Write all of `len` bytes, waiting at most `timeout_ms` in total.
 * HR_ECLOSED when the peer is gone. Never raises SIGPIPE. */
int hr__conn_write(hr__conn *c, const char *data, size_t len, int timeout_ms);

/* The same on a bare descriptor, for writers that do not own the
 * hr__conn (the library's requesting threads). */
int hr__fd_write(int fd, const char *data, size_t len, int timeout_ms);

/* Encode `req` (its id as set by the caller) and write it. */
int hr__conn_send(hr__conn *c, const hr_request *req, int timeout_ms);

/* One read() of whatever the socket has. HR_OK (possibly with nothing
 * new), HR_ECLOSED at end of stream or on a reset, HR_ETOOLARGE when a line
 * has filled the 64 KiB buffer without its '\n'. */
int hr__conn_read_some(hr__conn *c);

/* Hand out the next complete line already buffered (without its '\n').
 * Returns 1 and sets line/len (valid until the next call on `c`), or 0 when
 * no complete line is buffered. */
int hr__conn_take_line(hr__conn *c, const char **line, size_t *len);

/* Wait up to `timeout_ms` (-1: forever) for the next message and decode
 * it into `rep` (free it with hr_reply_free). HR_ETIMEDOUT, HR_ECLOSED,
 * HR_ETOOLARGE, HR_EPROTO (the daemon sent something undecodable) or
 * HR__EINTR. */
int hr__conn_read_reply(hr__conn *c, int timeout_ms, hr_reply *rep);

/* Send `req` with the next id and wait for its reply; everything else that
 * arrives meanwhile goes to `other` (may be NULL). An error reply returns
 * its HR_E* code, with `rep` holding the message. On HR_OK the caller
 * frees `rep` with hr_reply_free; on error it is already freed or holds
 * only an error. */
int hr__conn_call(hr__conn *c, hr_request *req, hr_reply *rep,
                  int timeout_ms, hr__conn_other_cb other, void *arg);

/* The hello exchange: offer every version this build speaks, as `name`,
 * saying how long the caller ran without a daemon just before
 * (`degraded_ms`, 0: it did not). HR_EVERSION when the daemon shares
 * none. */
int hr__conn_hello(hr__conn *c, const char *name, int64_t degraded_ms,
                   int timeout_ms, hr_rep_hello *out,
                   hr__conn_other_cb other, void *arg);

#endif /* HR_CONN_H */
