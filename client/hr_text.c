/*
 * hr_text.c: names and messages as the protocol wants them.
 *
 * The wire refuses strings that are not UTF-8 and strings longer than their
 * field (PROTOCOL.md section 2). So the library refuses a caller's bad
 * name up front (HR_EINVAL, rather than a refusal from the daemon later,
 * or never while degraded), and cuts free text and its own default names
 * at a character boundary so they always go through.
 */
#include <string.h>

#include "hr_client_int.h"

/* Length of the well-formed UTF-8 character at `s` (1 to 4 bytes, within
 * `avail`), or 0 when none starts there: overlong forms, surrogates and
 * code points past U+10FFFF are not characters. */
static size_t char_len(const unsigned char *s, size_t avail)
{
  unsigned cp;
  size_t n, i;

  if(s[0] < 0x80)
    return 1;
  if(s[0] >= 0xc2 && s[0] <= 0xdf) {
    n = 2;
    cp = s[0] & 0x1fu;
  }
  else if(s[0] >= 0xe0 && s[0] <= 0xef) {
    n = 3;
    cp = s[0] & 0x0fu;
  }
  else if(s[0] >= 0xf0 && s[0] <= 0xf4) {
    n = 4;
    cp = s[0] & 0x07u;
  }
  else {
    return 0;
  }
  if(avail < n)
    return 0;
  for(i = 1; i < n; i++) {
    if((s[i] & 0xc0) != 0x80)
      return 0;
    cp = cp << 6 | (s[i] & 0x3fu);
  }
  if((n == 3 && cp < 0x800) || (n == 4 && (cp < 0x10000 || cp > 0x10ffff)) ||
     (cp >= 0xd800 && cp <= 0xdfff))
    return 0;
  return n;
}

int hr__text_valid(const char *s)
{
  const unsigned char *p = (const unsigned char *)s;
  size_t left = strlen(s);
  while(left) {
    size_t n = char_len(p, left);
    if(!n)
      return 0;
    p += n;
    left -= n;
  }
  return 1;
}

void hr__text_copy(char *dst, size_t size, const char *src)
{
  const unsigned char *p = (const unsigned char *)src;
  size_t left = strlen(src), out = 0;

  if(!size)
    return;
  while(left) {
    size_t n = char_len(p, left);
    if(!n) {
      /* Not a character: one '?' for the byte, and go on. */
      if(out + 1 >= size)
        break;
      dst[out++] = '?';
      p++;
      left--;
      continue;
    }
    if(out + n >= size)
      break;    /* never half a character */
    memcpy(dst + out, p, n);
    out += n;
    p += n;
    left -= n;
  }
  dst[out] = '\0';
}

int hr__name_valid(const char *s)
{
  return hr__text_valid(s) && hr_proto_name_control(s, strlen(s)) < 0;
}

void hr__name_copy(char *dst, size_t size, const char *src)
{
  long at;

  hr__text_copy(dst, size, src);
  /* A C1 control's two bytes become "??", as a C0 one's byte becomes '?':
   * the result stays UTF-8. */
  while((at = hr_proto_name_control(dst, strlen(dst))) >= 0) {
    if((unsigned char)dst[at] == 0xc2)
      dst[at++] = '?';
    dst[at] = '?';
  }
}
