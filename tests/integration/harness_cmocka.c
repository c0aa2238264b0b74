/*
 * harness_cmocka.c: the harness's helpers that fail the running cmocka
 * test on error (see harness.h). Apart from harness.c so that programs
 * without cmocka can still link the rest.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "harness.h"
#include "headroom.h"

hr_client *th_client_open(const hr_daemon *d, const char *name,
                          int reconnect_ms)
{
  hr_client_options o;
  hr_client *c = NULL;

  memset(&o, 0, sizeof(o));
  o.name = name;
  o.quiet = 1;
  o.reconnect_ms = reconnect_ms;
  assert_int_equal(hr_client_open(&c, d->socket, &o), HR_OK);
  assert_non_null(c);
  return c;
}

hr_client *th_client_open_connected(const hr_daemon *d, const char *name,
                                    int reconnect_ms)
{
  hr_client *c = th_client_open(d, name, reconnect_ms);

  assert_int_equal(hr_client_connected(c), 1);
  return c;
}

char *th_file_read(const char *path)
{
  char *text;
  FILE *f;
  long n;

  f = fopen(path, "r");
  assert_non_null(f);
  fseek(f, 0, SEEK_END);
  n = ftell(f);
  fseek(f, 0, SEEK_SET);
  text = calloc(1, (size_t)n + 1);
  assert_non_null(text);
  assert_int_equal(fread(text, 1, (size_t)n, f), (size_t)n);
  fclose(f);
  return text;
}

void th_file_write(const char *path, const char *text)
{
  FILE *f = fopen(path, "w");

  assert_non_null(f);
  assert_true(fputs(text, f) >= 0);
  assert_int_equal(fclose(f), 0);
}

char *th_ctl(const hr_daemon *d, const char *const *args)
{
  char bin[512], out[400];
  char *argv[12];
  int i = 0, j;

  snprintf(bin, sizeof(bin), "%s/bin/headroomctl", th_build_dir());
  snprintf(out, sizeof(out), "%s/ctl.out", d->dir);
  argv[i++] = bin;
  argv[i++] = "--socket";
  argv[i++] = (char *)d->socket;
  for(j = 0; args[j]; j++) {
    assert_true(j < 8);
    argv[i++] = (char *)args[j];
  }
  argv[i] = NULL;
  assert_int_equal(th_run(argv, out, 5000), 0);
  return th_file_read(out);
}

void th_run_line(char *const argv[], const char *out_path, char *line,
                 size_t cap)
{
  FILE *f;

  assert_int_equal(th_run(argv, out_path, 5000), 0);
  f = fopen(out_path, "r");
  assert_non_null(f);
  assert_non_null(fgets(line, (int)cap, f));
  fclose(f);
}
