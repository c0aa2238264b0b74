/*
 * test_ctl_print.c: headroomctl's escaping of client text (names,
 * messages) before it reaches a terminal, and its --json line: without
 * the wire id, with DEL and the C1 controls escaped, still JSON that the
 * protocol's decoder reads back.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "ctl.h"

static void test_escape_controls(void **state)
{
  char out[256];
  (void)state;

  ctl_escape(out, sizeof(out), "plain name");
  assert_string_equal(out, "plain name");
  /* OSC title, BEL, CSI clear, a C1 CSI (U+009B), DEL, a newline. */
  ctl_escape(out, sizeof(out), "\033]0;pwned\007x\033[2J\xc2\x9b" "1m\177\n");
  assert_string_equal(out, "\\x1b]0;pwned\\x07x\\x1b[2J\\u009b1m\\x7f\\x0a");
  /* A backslash is escaped too, so that what is shown is unambiguous. */
  ctl_escape(out, sizeof(out), "a\\x1b");
  assert_string_equal(out, "a\\\\x1b");
  /* Other UTF-8 stays as it is. */
  ctl_escape(out, sizeof(out), "GPU \xc3\xa9t\xc3\xa9 \xc2\xa0");
  assert_string_equal(out, "GPU \xc3\xa9t\xc3\xa9 \xc2\xa0");
}

static void test_escape_cuts_whole_escapes(void **state)
{
  char out[8];
  (void)state;

  /* "ab" + "\x1b" (4) fits in 7; the next escape does not, and no half
   * escape is left. */
  ctl_escape(out, sizeof(out), "ab\033\033");
  assert_string_equal(out, "ab\\x1b");
  ctl_escape(out, 1, "abc");
  assert_string_equal(out, "");
}

/* What ctl_print_json writes, read back from a temporary file. */
static char *json_of(const hr_reply *rep)
{
  char path[] = "/tmp/hr-ctl-print-XXXXXX";
  static char text[HR_PROTO_MAX_LINE + 64];
  int fd = mkstemp(path), saved = dup(1);
  FILE *f;
  size_t n;

  assert_true(fd >= 0 && saved >= 0);
  fflush(stdout);
  assert_true(dup2(fd, 1) == 1);
  assert_int_equal(ctl_print_json(rep), EXIT_OK);
  fflush(stdout);
  assert_true(dup2(saved, 1) == 1);
  close(saved);
  close(fd);
  f = fopen(path, "r");
  assert_non_null(f);
  n = fread(text, 1, sizeof(text) - 1, f);
  fclose(f);
  unlink(path);
  text[n] = '\0';
  return text;
}

static void test_json_has_no_wire_id(void **state)
{
  hr_reply rep;
  char *text;
  (void)state;

  memset(&rep, 0, sizeof(rep));
  rep.type = HR_MSG_POLICY_GET;
  rep.id = 42;
  rep.u.policy.min_headroom = 2;
  rep.u.policy.max_headroom = 32;
  rep.u.policy.min_grid = 64;
  rep.u.policy.incident_raise = 1;
  text = json_of(&rep);
  assert_string_equal(text, "{\"type\":\"policy_get\",\"policy\":"
                      "{\"min_headroom\":2,\"max_headroom\":32,"
                      "\"min_grid\":64,\"incident_raise\":true}}\n");
}

static void test_json_escapes_del_and_c1(void **state)
{
  hr_reply rep, back;
  hr_proto_error perr;
  char line[HR_PROTO_MAX_LINE + 64];
  char *text;
  (void)state;

  memset(&rep, 0, sizeof(rep));
  rep.type = HR_MSG_SHUTDOWN;
  rep.id = -1;
  snprintf(rep.u.shutdown_reason, sizeof(rep.u.shutdown_reason),
           "bye\033[2J\xc2\x9b" "1m\177");
  text = json_of(&rep);
  assert_null(strchr(text, '\033'));
  assert_null(strchr(text, '\177'));
  assert_null(strstr(text, "\xc2\x9b"));
  assert_non_null(strstr(text, "\\u009b1m\\u007f"));
  /* Still the same text to a JSON reader. */
  snprintf(line, sizeof(line), "%s", text);
  line[strlen(line) - 1] = '\0';
  assert_int_equal(hr_proto_decode_reply(line, strlen(line), &back, &perr),
                   HR_OK);
  assert_int_equal(back.type, HR_MSG_SHUTDOWN);
  assert_string_equal(back.u.shutdown_reason, rep.u.shutdown_reason);
}

int main(void)
{
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_escape_controls),
    cmocka_unit_test(test_escape_cuts_whole_escapes),
    cmocka_unit_test(test_json_has_no_wire_id),
    cmocka_unit_test(test_json_escapes_del_and_c1),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
