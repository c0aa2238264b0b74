/*
 * unit_util.c: the temporary folder and degraded client of the libheadroom
 * unit tests (see unit_util.h).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "unit_util.h"

char th_tmpdir[64];
char th_sock_path[96];

static const char *const env_vars[] = {
  "DG_MEGA_MOE_SM_HEADROOM", "NCCL_MIN_CTAS", "NCCL_MAX_CTAS",
  "NCCL_CGA_CLUSTER_SIZE", "NCCL_NVLS_ENABLE", "HEADROOM_SOCKET",
  "HEADROOM_ALLOW_FULL_GRID",
};

int th_tmpdir_create(const char *tmpl)
{
  snprintf(th_tmpdir, sizeof(th_tmpdir), "%s", tmpl);
  if(!mkdtemp(th_tmpdir))
    return -1;
  snprintf(th_sock_path, sizeof(th_sock_path), "%s/h.sock", th_tmpdir);
  return 0;
}

int th_tmpdir_teardown(void **state)
{
  (void)state;
  unlink(th_sock_path);
  rmdir(th_tmpdir);
  return 0;
}

void th_env_clear(void)
{
  size_t i;
  for(i = 0; i < sizeof(env_vars) / sizeof(env_vars[0]); i++)
    unsetenv(env_vars[i]);
}

int th_env_reset(void **state)
{
  (void)state;
  th_env_clear();
  return 0;
}

hr_client *th_client_open_degraded(void)
{
  hr_client_options o;
  hr_client *c = NULL;
  memset(&o, 0, sizeof(o));
  o.quiet = 1;
  o.reconnect_ms = 20;
  assert_int_equal(hr_client_open(&c, th_sock_path, &o), HR_OK);
  assert_non_null(c);
  return c;
}

char *th_capture_stderr(void (*fn)(void *), void *arg)
{
  char path[128];
  FILE *f;
  char *text;
  long n;
  int saved, fd;

  snprintf(path, sizeof(path), "%s/stderr.txt", th_tmpdir);
  fflush(stderr);
  saved = dup(2);
  assert_true(saved >= 0);
  f = fopen(path, "w+");
  assert_non_null(f);
  fd = fileno(f);
  assert_true(dup2(fd, 2) == 2);
  fn(arg);
  fflush(stderr);
  dup2(saved, 2);
  close(saved);
  fseek(f, 0, SEEK_END);
  n = ftell(f);
  rewind(f);
  text = calloc(1, (size_t)n + 1);
  assert_non_null(text);
  assert_int_equal(fread(text, 1, (size_t)n, f), (size_t)n);
  fclose(f);
  unlink(path);
  return text;
}
