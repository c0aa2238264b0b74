/*
 * hr_json.h: the checked JSON building blocks the codec is made of.
 *
 * Internal to proto/, and the daemon's reader of its own files (state.json,
 * the calibration file), which must refuse what the wire refuses.
 * Decoding goes through an hr__dec and encoding through an hr__enc; both
 * keep the *first* failure and turn every later call into a no-op, so a
 * message codec reads as a flat list of fields with one check at the end
 * instead of a test after each line. The ranges each field accepts are
 * passed in by the caller, and the encoder checks the very same ranges, so
 * a struct the daemon can send is always one the client can read.
 */
#ifndef HR_JSON_H
#define HR_JSON_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "hr_proto.h"

#define HR__INT32_MAX 2147483647LL
#define HR__UINT32_MAX 4294967295LL

enum { HR__OPTIONAL = 0, HR__REQUIRED = 1 };

/* ---- Decoding ---------------------------------------------------------- */

typedef struct hr__dec {
  hr_proto_error *err;      /* filled at the first failure */
  int rc;                   /* HR_OK until then, HR_EPROTO after */
  size_t path_len;
  char path[128];           /* "status.gpus[2]." : prefix for messages */
} hr__dec;

void hr__dec_init(hr__dec *d, hr_proto_error *err);

/* Record a failure (the first one wins). Returns d->rc. */
int hr__dec_fail(hr__dec *d, hr_wire_error code, const char *fmt, ...)
  __attribute__((format(printf, 3, 4)));
/* The same, prefixed with "<path><field>: ". */
int hr__dec_field_fail(hr__dec *d, const char *field, const char *fmt, ...)
  __attribute__((format(printf, 3, 4)));

/* Extend the path for a nested object ("budget.") or an array element
 * ("gpus[3]."); hr__dec_leave() takes the returned mark. */
size_t hr__dec_enter(hr__dec *d, const char *name);
size_t hr__dec_enter_index(hr__dec *d, const char *name, int index);
void hr__dec_leave(hr__dec *d, size_t mark);

/* Parse one line: text checks, cJSON, nothing but whitespace after the
 * value, and the value must be an object. NULL (and d->rc set) on error. */
cJSON *hr__dec_parse(hr__dec *d, const char *line, size_t len);

/* The same for a whole document of at most `max` bytes (a file the
 * daemon reads, such as state.json): every check of a line (UTF-8, no raw
 * control byte but whitespace, no \u0000, one object and nothing after
 * it) but the line's size. */
cJSON *hr__dec_parse_doc(hr__dec *d, const char *text, size_t len,
                         size_t max);

/* The member `name` of `obj`; NULL when absent (a failure if required) or
 * when it appears twice. */
const cJSON *hr__dec_field(hr__dec *d, const cJSON *obj, const char *name,
                           int required);

/* Typed fields. An optional field that is absent leaves *out untouched, so
 * callers store the default first. */
void hr__dec_i64(hr__dec *d, const cJSON *obj, const char *name, int required,
                 int64_t min, int64_t max, int64_t *out);
void hr__dec_int(hr__dec *d, const cJSON *obj, const char *name, int required,
                 int64_t min, int64_t max, int *out);
/* A finite number in [min, max], fractions allowed. */
void hr__dec_double(hr__dec *d, const cJSON *obj, const char *name,
                    int required, double min, double max, double *out);
void hr__dec_bool(hr__dec *d, const cJSON *obj, const char *name,
                  int required, bool *out);
void hr__dec_string(hr__dec *d, const cJSON *obj, const char *name,
                    int required, char *dst, size_t size);
/* The same, for a name that is shown to operators: a control character
 * in it (hr_proto_name_control) is refused, naming the member. */
void hr__dec_name(hr__dec *d, const cJSON *obj, const char *name,
                  int required, char *dst, size_t size);
/* A string from a name table: name_of(0..count-1). */
void hr__dec_enum(hr__dec *d, const cJSON *obj, const char *name,
                  int required, const char *(*name_of)(int), int count,
                  int *out);
const cJSON *hr__dec_object(hr__dec *d, const cJSON *obj, const char *name,
                            int required);
/* An array of at most `max` items; *count gets its length. */
const cJSON *hr__dec_array(hr__dec *d, const cJSON *obj, const char *name,
                           int required, int max, int *count);

/* Fail unless `item` (the element the path points at now, entered with
 * hr__dec_enter_index) is an object. */
void hr__dec_expect_object(hr__dec *d, const cJSON *item);

/* The checks behind the typed fields, for values that are not members
 * (array items); `label` names the value in a message. */
void hr__dec_value_i64(hr__dec *d, const cJSON *item, const char *label,
                       int64_t min, int64_t max, int64_t *out);

/* ---- Encoding ---------------------------------------------------------- */

typedef struct hr__enc {
  int rc;                   /* HR_OK until the first failure */
} hr__enc;

/* A new object member (or array item when `name` is NULL) of `parent`;
 * `parent` NULL makes a root object. NULL once the encoder failed. */
cJSON *hr__enc_object(hr__enc *e, cJSON *parent, const char *name);
cJSON *hr__enc_array(hr__enc *e, cJSON *parent, const char *name);

/* Members (or array items when `name` is NULL). Values outside min..max,
 * strings not '\0'-terminated within `size` or not UTF-8, and names the
 * tables do not know (NULL) fail the encoder with HR_EINVAL. */
void hr__enc_i64(hr__enc *e, cJSON *obj, const char *name, int64_t v,
                 int64_t min, int64_t max);
void hr__enc_bool(hr__enc *e, cJSON *obj, const char *name, int v);
void hr__enc_null(hr__enc *e, cJSON *obj, const char *name);
void hr__enc_string(hr__enc *e, cJSON *obj, const char *name, const char *s,
                    size_t size);
void hr__enc_name(hr__enc *e, cJSON *obj, const char *name,
                  const char *wire_name);
/* A string that hr__dec_name must read back: no control characters. */
void hr__enc_name_string(hr__enc *e, cJSON *obj, const char *name,
                         const char *s, size_t size);
/* Fail the encoder (HR_EINVAL for a bad struct). */
void hr__enc_fail(hr__enc *e, int rc);

/* Print `root` as one line, append it with its '\n' to `out` (all or
 * nothing) and free `root`. Returns the encoder's first failure, else
 * HR_ETOOLARGE past HR_PROTO_MAX_LINE or the buffer's cap, else HR_OK. */
int hr__enc_finish(hr__enc *e, cJSON *root, hr_buf *out);

/* ---- Text -------------------------------------------------------------- */

/* 1 when s[0..len) is well-formed UTF-8 (no overlongs, no surrogates). */
int hr__utf8_valid(const char *s, size_t len);

/* Copy `src` into dst[size] for use inside a message: at most `max` bytes,
 * anything but printable ASCII replaced by '?', "..." when cut. Messages
 * quote what a peer sent, and must stay short and valid UTF-8 however
 * hostile it was. */
void hr__quote(char *dst, size_t size, const char *src, size_t max);

/* Copy the '\0'-terminated `src` into dst[size], cut at a character
 * boundary when too long and with '?' for each byte that is not part of
 * valid UTF-8: for text the daemon must always be able to send. */
void hr__utf8_copy(char *dst, size_t size, const char *src);

#endif /* HR_JSON_H */
