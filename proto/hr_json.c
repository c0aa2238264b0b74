/*
 * hr_json.c: checked field access on top of cJSON (see hr_json.h).
 *
 * cJSON is trusted to tokenize and nothing more: every number is checked
 * through valuedouble (valueint saturates, so 1e300 would read as INT_MAX),
 * every string against its buffer, and every member is looked up exactly
 * (case-sensitive, and a member given twice is refused rather than letting
 * the first or the last one silently win).
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hr_json.h"

/* ---- Decoding ---------------------------------------------------------- */

void hr__dec_init(hr__dec *d, hr_proto_error *err)
{
  memset(d, 0, sizeof(*d));
  d->err = err;
  d->rc = HR_OK;
  memset(err, 0, sizeof(*err));
  err->code = HR_WERR_BAD_REQUEST;
}

static int dec_vfail(hr__dec *d, hr_wire_error code, const char *field,
                     const char *fmt, va_list ap)
{
  size_t n = 0;

  if(d->rc)
    return d->rc;                 /* keep the first problem */
  d->rc = HR_EPROTO;
  d->err->code = code;
  if(field)
    n = (size_t)snprintf(d->err->message, sizeof(d->err->message), "%s%s: ",
                         d->path, field);
  if(n < sizeof(d->err->message))
    vsnprintf(d->err->message + n, sizeof(d->err->message) - n, fmt, ap);
  return d->rc;
}

int hr__dec_fail(hr__dec *d, hr_wire_error code, const char *fmt, ...)
{
  va_list ap;
  int rc;

  va_start(ap, fmt);
  rc = dec_vfail(d, code, NULL, fmt, ap);
  va_end(ap);
  return rc;
}

int hr__dec_field_fail(hr__dec *d, const char *field, const char *fmt, ...)
{
  va_list ap;
  int rc;

  va_start(ap, fmt);
  rc = dec_vfail(d, HR_WERR_BAD_REQUEST, field, fmt, ap);
  va_end(ap);
  return rc;
}

static size_t dec_path_append(hr__dec *d, const char *text)
{
  size_t mark = d->path_len;
  int n = snprintf(d->path + mark, sizeof(d->path) - mark, "%s", text);

  /* A path deeper than the buffer only shortens messages; it is cut. */
  if(n > 0)
    d->path_len += (size_t)n < sizeof(d->path) - mark
                   ? (size_t)n : sizeof(d->path) - mark - 1;
  return mark;
}

size_t hr__dec_enter(hr__dec *d, const char *name)
{
  char part[64];

  snprintf(part, sizeof(part), "%s.", name);
  return dec_path_append(d, part);
}

size_t hr__dec_enter_index(hr__dec *d, const char *name, int index)
{
  char part[64];

  snprintf(part, sizeof(part), "%s[%d].", name, index);
  return dec_path_append(d, part);
}

void hr__dec_leave(hr__dec *d, size_t mark)
{
  d->path_len = mark;
  d->path[mark] = '\0';
}

/* JSON's own whitespace; cJSON treats every byte <= 32 as whitespace, which
 * is why control bytes are refused before it ever sees them. */
static int is_json_space(char c)
{
  return c == ' ' || c == '\t' || c == '\r' || c == '\n';
}

/* 1 when a string in the line holds the escape \u0000. cJSON would decode
 * it into a '\0' that silently cuts the C string short ("a\u0000b" read
 * as "a"), and strings are refused rather than cut. */
static int has_escaped_nul(const char *line, size_t len)
{
  int in_string = 0;
  size_t i;

  for(i = 0; i < len; i++) {
    if(!in_string) {
      in_string = line[i] == '"';
      continue;
    }
    if(line[i] == '"') {
      in_string = 0;
    }
    else if(line[i] == '\\' && i + 1 < len) {
      i++;                        /* the escaped character */
      if(line[i] == 'u' && len - i > 4 && !memcmp(line + i + 1, "0000", 4))
        return 1;
    }
  }
  return 0;
}

static cJSON *dec_parse(hr__dec *d, const char *line, size_t len,
                        const char *what);

cJSON *hr__dec_parse(hr__dec *d, const char *line, size_t len)
{
  if(len == 0) {
    hr__dec_fail(d, HR_WERR_BAD_REQUEST, "invalid JSON: empty message");
    return NULL;
  }
  if(len >= HR_PROTO_MAX_LINE) {
    hr__dec_fail(d, HR_WERR_TOO_LARGE,
                 "message: longer than %d bytes with its newline",
                 HR_PROTO_MAX_LINE);
    return NULL;
  }
  return dec_parse(d, line, len, "message");
}

cJSON *hr__dec_parse_doc(hr__dec *d, const char *text, size_t len,
                         size_t max)
{
  if(len == 0) {
    hr__dec_fail(d, HR_WERR_BAD_REQUEST, "invalid JSON: empty file");
    return NULL;
  }
  if(len > max) {
    hr__dec_fail(d, HR_WERR_TOO_LARGE, "larger than %zu bytes", max);
    return NULL;
  }
  return dec_parse(d, text, len, "file");
}

static cJSON *dec_parse(hr__dec *d, const char *line, size_t len,
                        const char *what)
{
  const char *end = NULL;
  cJSON *root;
  size_t i;

  /* JSON text is UTF-8 without raw control characters. Checking the whole
   * line up front means every string cJSON hands back is valid UTF-8 too,
   * so whatever a client names itself can be echoed in status safely. */
  for(i = 0; i < len; i++) {
    unsigned char c = (unsigned char)line[i];
    if(c < 0x20 && !is_json_space((char)c)) {
      hr__dec_fail(d, HR_WERR_BAD_REQUEST,
                   "invalid JSON: control byte 0x%02x at offset %zu", c, i);
      return NULL;
    }
  }
  if(has_escaped_nul(line, len)) {
    hr__dec_fail(d, HR_WERR_BAD_REQUEST,
                 "invalid JSON: \\u0000 in a string");
    return NULL;
  }
  if(!hr__utf8_valid(line, len)) {
    hr__dec_fail(d, HR_WERR_BAD_REQUEST, "invalid JSON: not valid UTF-8");
    return NULL;
  }
  /* With a length, cJSON stops at `len`: the line is not '\0'-terminated
   * and the bytes after it belong to the next message. */
  root = cJSON_ParseWithLengthOpts(line, len, &end, 0);
  if(!root) {
    hr__dec_fail(d, HR_WERR_BAD_REQUEST, "invalid JSON");
    return NULL;
  }
  for(; end && end < line + len; end++) {
    if(!is_json_space(*end)) {
      hr__dec_fail(d, HR_WERR_BAD_REQUEST,
                   "invalid JSON: characters after the object at offset %zu",
                   (size_t)(end - line));
      cJSON_Delete(root);
      return NULL;
    }
  }
  if(!cJSON_IsObject(root)) {
    hr__dec_fail(d, HR_WERR_BAD_REQUEST, "%s: must be a JSON object", what);
    cJSON_Delete(root);
    return NULL;
  }
  return root;
}

const cJSON *hr__dec_field(hr__dec *d, const cJSON *obj, const char *name,
                           int required)
{
  const cJSON *it, *found = NULL;

  if(d->rc || !obj)
    return NULL;
  for(it = obj->child; it; it = it->next) {
    if(!it->string || strcmp(it->string, name))
      continue;
    if(found) {
      hr__dec_field_fail(d, name, "given more than once");
      return NULL;
    }
    found = it;
  }
  if(!found && required)
    hr__dec_field_fail(d, name, "required");
  return found;
}

void hr__dec_value_i64(hr__dec *d, const cJSON *item, const char *label,
                       int64_t min, int64_t max, int64_t *out)
{
  double v;

  if(d->rc)
    return;
  if(!cJSON_IsNumber(item))
    goto bad;
  v = item->valuedouble;
  /* Range first, in doubles: min and max are at most 2^53 in magnitude, so
   * the comparison is exact and the cast below cannot overflow. The cast
   * back then catches fractions (and needs no libm). */
  if(!isfinite(v) || v < (double)min || v > (double)max)
    goto bad;
  if((double)(int64_t)v != v)
    goto bad;
  *out = (int64_t)v;
  return;
bad:
  hr__dec_field_fail(d, label, "must be an integer %" PRId64 "..%" PRId64,
                     min, max);
}

void hr__dec_double(hr__dec *d, const cJSON *obj, const char *name,
                    int required, double min, double max, double *out)
{
  const cJSON *it = hr__dec_field(d, obj, name, required);

  if(!it)
    return;
  if(!cJSON_IsNumber(it) || !isfinite(it->valuedouble) ||
     it->valuedouble < min || it->valuedouble > max) {
    hr__dec_field_fail(d, name, "must be a number %g..%g", min, max);
    return;
  }
  *out = it->valuedouble;
}

void hr__dec_i64(hr__dec *d, const cJSON *obj, const char *name, int required,
                 int64_t min, int64_t max, int64_t *out)
{
  const cJSON *it = hr__dec_field(d, obj, name, required);

  if(it)
    hr__dec_value_i64(d, it, name, min, max, out);
}

void hr__dec_int(hr__dec *d, const cJSON *obj, const char *name, int required,
                 int64_t min, int64_t max, int *out)
{
  int64_t v = *out;

  hr__dec_i64(d, obj, name, required, min, max, &v);
  if(!d->rc)
    *out = (int)v;
}

void hr__dec_bool(hr__dec *d, const cJSON *obj, const char *name,
                  int required, bool *out)
{
  const cJSON *it = hr__dec_field(d, obj, name, required);

  if(!it)
    return;
  if(!cJSON_IsBool(it)) {
    hr__dec_field_fail(d, name, "must be true or false");
    return;
  }
  *out = cJSON_IsTrue(it) != 0;
}

void hr__dec_string(hr__dec *d, const cJSON *obj, const char *name,
                    int required, char *dst, size_t size)
{
  const cJSON *it = hr__dec_field(d, obj, name, required);
  size_t n;

  if(!it)
    return;
  if(!cJSON_IsString(it) || !it->valuestring) {
    hr__dec_field_fail(d, name, "must be a string");
    return;
  }
  n = strlen(it->valuestring);
  if(n >= size) {
    /* Refused, not cut: a cut name would silently alias another one. */
    hr__dec_field_fail(d, name, "must be a string of at most %zu bytes",
                       size - 1);
    return;
  }
  memcpy(dst, it->valuestring, n + 1);
}

void hr__dec_name(hr__dec *d, const cJSON *obj, const char *name,
                  int required, char *dst, size_t size)
{
  char copy[HR_MESSAGE_MAX];
  long at;

  if(d->rc || size > sizeof(copy))
    return;
  copy[0] = '\0';
  hr__dec_string(d, obj, name, required, copy, size);
  if(d->rc)
    return;
  at = hr_proto_name_control(copy, strlen(copy));
  if(at >= 0) {
    unsigned c = (unsigned char)copy[at];
    /* A C1 control is two bytes in UTF-8: U+0080..U+009F. */
    if(c == 0xc2)
      c = (unsigned char)copy[at + 1];
    hr__dec_field_fail(d, name, "must not hold control characters "
                       "(U+%04X at byte %ld)", c, at);
    return;
  }
  memcpy(dst, copy, strlen(copy) + 1);
}

void hr__dec_enum(hr__dec *d, const cJSON *obj, const char *name,
                  int required, const char *(*name_of)(int), int count,
                  int *out)
{
  const cJSON *it = hr__dec_field(d, obj, name, required);
  char list[160];
  size_t n = 0;
  int i;

  if(!it)
    return;
  if(cJSON_IsString(it) && it->valuestring) {
    for(i = 0; i < count; i++) {
      if(!strcmp(it->valuestring, name_of(i))) {
        *out = i;
        return;
      }
    }
  }
  list[0] = '\0';
  for(i = 0; i < count && n < sizeof(list); i++)
    n += (size_t)snprintf(list + n, sizeof(list) - n, "%s\"%s\"",
                          i == 0 ? "" : i == count - 1 ? " or " : ", ",
                          name_of(i));
  hr__dec_field_fail(d, name, "must be %s", list);
}

const cJSON *hr__dec_object(hr__dec *d, const cJSON *obj, const char *name,
                            int required)
{
  const cJSON *it = hr__dec_field(d, obj, name, required);

  if(it && !cJSON_IsObject(it)) {
    hr__dec_field_fail(d, name, "must be an object");
    return NULL;
  }
  return it;
}

void hr__dec_expect_object(hr__dec *d, const cJSON *item)
{
  if(d->rc || cJSON_IsObject(item))
    return;
  /* The path ends in '.', which the message leaves out. */
  hr__dec_fail(d, HR_WERR_BAD_REQUEST, "%.*s: must be an object",
               (int)(d->path_len ? d->path_len - 1 : 0), d->path);
}

const cJSON *hr__dec_array(hr__dec *d, const cJSON *obj, const char *name,
                           int required, int max, int *count)
{
  const cJSON *it = hr__dec_field(d, obj, name, required), *item;
  int n = 0;

  *count = 0;
  if(!it)
    return NULL;
  if(!cJSON_IsArray(it)) {
    hr__dec_field_fail(d, name, "must be an array");
    return NULL;
  }
  /* Counted by walking, and stopped at the cap, so a huge array costs no
   * more than the cap. */
  for(item = it->child; item; item = item->next) {
    if(n == max) {
      hr__dec_field_fail(d, name, "must have at most %d items", max);
      return NULL;
    }
    n++;
  }
  *count = n;
  return it;
}

/* ---- Encoding ---------------------------------------------------------- */

void hr__enc_fail(hr__enc *e, int rc)
{
  if(!e->rc)
    e->rc = rc;
}

/* Attach `item` to `parent` as member `name` or as an array item. */
static cJSON *enc_attach(hr__enc *e, cJSON *parent, const char *name,
                         cJSON *item)
{
  cJSON_bool ok;

  if(!item) {
    hr__enc_fail(e, HR_ENOMEM);
    return NULL;
  }
  /* Member names are string literals: the CS variant skips a copy. */
  ok = name ? cJSON_AddItemToObjectCS(parent, name, item)
            : cJSON_AddItemToArray(parent, item);
  if(!ok) {
    cJSON_Delete(item);
    hr__enc_fail(e, HR_ENOMEM);
    return NULL;
  }
  return item;
}

static cJSON *enc_container(hr__enc *e, cJSON *parent, const char *name,
                            cJSON *item)
{
  if(e->rc || (!parent && name)) {
    hr__enc_fail(e, HR_EINVAL);
    cJSON_Delete(item);
    return NULL;
  }
  if(!parent) {
    if(!item)
      hr__enc_fail(e, HR_ENOMEM);
    return item;
  }
  return enc_attach(e, parent, name, item);
}

cJSON *hr__enc_object(hr__enc *e, cJSON *parent, const char *name)
{
  if(e->rc)
    return NULL;
  return enc_container(e, parent, name, cJSON_CreateObject());
}

cJSON *hr__enc_array(hr__enc *e, cJSON *parent, const char *name)
{
  if(e->rc)
    return NULL;
  return enc_container(e, parent, name, cJSON_CreateArray());
}

void hr__enc_i64(hr__enc *e, cJSON *obj, const char *name, int64_t v,
                 int64_t min, int64_t max)
{
  char text[24];

  if(e->rc || !obj)
    return;
  if(v < min || v > max) {
    hr__enc_fail(e, HR_EINVAL);
    return;
  }
  /* Printed by us, as a raw number: cJSON would print large integers such
   * as 1e+15 through "%g", which is valid JSON but hard on operators. */
  snprintf(text, sizeof(text), "%" PRId64, v);
  enc_attach(e, obj, name, cJSON_CreateRaw(text));
}

void hr__enc_bool(hr__enc *e, cJSON *obj, const char *name, int v)
{
  if(e->rc || !obj)
    return;
  if(v != 0 && v != 1) {
    hr__enc_fail(e, HR_EINVAL);
    return;
  }
  enc_attach(e, obj, name, cJSON_CreateBool(v));
}

void hr__enc_null(hr__enc *e, cJSON *obj, const char *name)
{
  if(e->rc || !obj)
    return;
  enc_attach(e, obj, name, cJSON_CreateNull());
}

void hr__enc_string(hr__enc *e, cJSON *obj, const char *name, const char *s,
                    size_t size)
{
  const char *nul;

  if(e->rc || !obj)
    return;
  nul = s ? memchr(s, '\0', size) : NULL;
  if(!nul || !hr__utf8_valid(s, (size_t)(nul - s))) {
    hr__enc_fail(e, HR_EINVAL);
    return;
  }
  enc_attach(e, obj, name, cJSON_CreateString(s));
}

void hr__enc_name_string(hr__enc *e, cJSON *obj, const char *name,
                         const char *s, size_t size)
{
  const char *nul = s ? memchr(s, '\0', size) : NULL;

  if(nul && hr_proto_name_control(s, (size_t)(nul - s)) >= 0)
    hr__enc_fail(e, HR_EINVAL);
  hr__enc_string(e, obj, name, s, size);
}

void hr__enc_name(hr__enc *e, cJSON *obj, const char *name,
                  const char *wire_name)
{
  if(e->rc || !obj)
    return;
  if(!wire_name) {
    hr__enc_fail(e, HR_EINVAL);
    return;
  }
  enc_attach(e, obj, name, cJSON_CreateString(wire_name));
}

int hr__enc_finish(hr__enc *e, cJSON *root, hr_buf *out)
{
  char *text = NULL;
  size_t n;
  int err = e->rc;

  if(err)
    goto out;
  text = cJSON_PrintUnformatted(root);
  if(!text) {
    err = HR_ENOMEM;
    goto out;
  }
  n = strlen(text);
  if(n + 1 > HR_PROTO_MAX_LINE) {
    err = HR_ETOOLARGE;
    goto out;
  }
  /* The '\0' becomes the '\n' so the line goes in with one append: either
   * the whole line lands in the buffer or nothing does. */
  text[n] = '\n';
  err = hr_buf_append(out, text, n + 1);
out:
  if(text)
    cJSON_free(text);
  cJSON_Delete(root);
  return err;
}

/* ---- Text -------------------------------------------------------------- */

int hr__utf8_valid(const char *s, size_t len)
{
  const unsigned char *p = (const unsigned char *)s;
  size_t i = 0;

  while(i < len) {
    unsigned c = p[i];
    size_t need, k;
    unsigned cp, lo;

    if(c < 0x80) {
      i++;
      continue;
    }
    if(c >= 0xc2 && c <= 0xdf) {
      need = 1; cp = c & 0x1f; lo = 0x80;
    }
    else if(c >= 0xe0 && c <= 0xef) {
      need = 2; cp = c & 0x0f; lo = 0x800;
    }
    else if(c >= 0xf0 && c <= 0xf4) {
      need = 3; cp = c & 0x07; lo = 0x10000;
    }
    else
      return 0;                   /* continuation byte, 0xc0/0xc1, > 0xf4 */
    if(len - i <= need)
      return 0;
    for(k = 1; k <= need; k++) {
      if((p[i + k] & 0xc0) != 0x80)
        return 0;
      cp = (cp << 6) | (p[i + k] & 0x3f);
    }
    if(cp < lo || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
      return 0;                   /* overlong, too big, or a surrogate */
    i += need + 1;
  }
  return 1;
}

long hr_proto_name_control(const char *s, size_t len)
{
  const unsigned char *p = (const unsigned char *)s;
  size_t i;

  if(!s)
    return -1;
  for(i = 0; i < len; i++) {
    if(p[i] < 0x20 || p[i] == 0x7f)
      return (long)i;
    if(p[i] == 0xc2 && i + 1 < len && p[i + 1] >= 0x80 && p[i + 1] <= 0x9f)
      return (long)i;
  }
  return -1;
}

void hr__quote(char *dst, size_t size, const char *src, size_t max)
{
  size_t i, n = 0;

  if(!size)
    return;
  for(i = 0; src[i] && n + 1 < size; i++) {
    unsigned char c = (unsigned char)src[i];
    if(i == max) {
      size_t k;
      for(k = 0; k < 3 && n + 1 < size; k++)
        dst[n++] = '.';
      break;
    }
    dst[n++] = c >= 0x20 && c < 0x7f && c != '"' && c != '\\' ? (char)c : '?';
  }
  dst[n] = '\0';
}

/* Length of the UTF-8 sequence that a lead byte starts, 0 for a byte that
 * cannot start one. */
static size_t utf8_seq_len(unsigned char c)
{
  if(c < 0x80)
    return 1;
  if(c >= 0xc2 && c <= 0xdf)
    return 2;
  if(c >= 0xe0 && c <= 0xef)
    return 3;
  if(c >= 0xf0 && c <= 0xf4)
    return 4;
  return 0;
}

void hr__utf8_copy(char *dst, size_t size, const char *src)
{
  size_t i = 0, n = 0;

  if(!size)
    return;
  while(src && src[i]) {
    size_t k = utf8_seq_len((unsigned char)src[i]), avail;
    for(avail = 0; avail < k && src[i + avail]; avail++)
      ;
    if(k == 0 || avail < k || !hr__utf8_valid(src + i, k)) {
      if(n + 1 >= size)
        break;
      dst[n++] = '?';
      i++;
      continue;
    }
    if(n + k >= size)
      break;                      /* cut before a character, not inside */
    memcpy(dst + n, src + i, k);
    n += k;
    i += k;
  }
  dst[n] = '\0';
}
