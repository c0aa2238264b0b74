/*
 * hr_buf.c: a capped, growable byte buffer.
 *
 * Encoders append whole lines to it, and the daemon queues outgoing lines
 * in it, so it must never grow without bound: an append that would pass
 * the cap fails with HR_ETOOLARGE and leaves the buffer as it was. The
 * bytes are always followed by a '\0' (not counted in len) so a buffer of
 * text can be printed or logged directly.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "hr_proto.h"

#define BUF_MIN_SIZE 256

void hr_buf_init(hr_buf *b, size_t cap)
{
  if(!b)
    return;
  b->data = NULL;
  b->len = 0;
  b->size = 0;
  /* 0 means "one message": the common case for an encoder's scratch. */
  b->cap = cap ? cap : HR_PROTO_MAX_LINE;
  if(b->cap > SIZE_MAX - 1)
    b->cap = SIZE_MAX - 1;          /* room for the '\0' */
}

void hr_buf_free(hr_buf *b)
{
  if(!b)
    return;
  free(b->data);
  b->data = NULL;
  b->len = 0;
  b->size = 0;
}

void hr_buf_reset(hr_buf *b)
{
  if(!b)
    return;
  b->len = 0;
  if(b->data)
    b->data[0] = '\0';
}

int hr_buf_append(hr_buf *b, const void *data, size_t len)
{
  size_t want, size;
  char *p;

  if(!b || (!data && len))
    return HR_EINVAL;
  if(len > b->cap || b->len > b->cap - len)
    return HR_ETOOLARGE;
  want = b->len + len + 1;          /* + the trailing '\0' */
  if(want > b->size) {
    size = b->size ? b->size : BUF_MIN_SIZE;
    while(size < want)
      size = size > SIZE_MAX / 2 ? want : size * 2;
    if(size > b->cap + 1)
      size = b->cap + 1;            /* never hold more than the cap allows */
    p = realloc(b->data, size);
    if(!p)
      return HR_ENOMEM;
    b->data = p;
    b->size = size;
  }
  if(len)
    memcpy(b->data + b->len, data, len);
  b->len += len;
  b->data[b->len] = '\0';
  return HR_OK;
}
