/*
 * unit_util.h: what the libheadroom unit tests share. They all run against
 * a socket path in an empty temporary folder, where no daemon ever serves,
 * so every client they open is degraded.
 */
#ifndef HR_TEST_UNIT_UTIL_H
#define HR_TEST_UNIT_UTIL_H

#include "headroom.h"

/* The folder and the socket path in it, set by th_tmpdir_create. */
extern char th_tmpdir[64];
extern char th_sock_path[96];

/* Make the folder from the mkdtemp template `tmpl` (each test program its
 * own, so a folder left behind names its program); 0, or -1. */
int th_tmpdir_create(const char *tmpl);
/* Remove the socket, where a test made one, and the folder; a cmocka
 * group teardown. */
int th_tmpdir_teardown(void **state);

/* Unset every variable libheadroom reads or exports, so that the
 * degraded budget comes from what the test sets and nothing else. */
void th_env_clear(void);
/* th_env_clear as a cmocka setup, so that no test sees the last one's. */
int th_env_reset(void **state);

/* A quiet client on th_sock_path, retrying every 20 ms; the test fails
 * unless it opens (degraded: no daemon there). */
hr_client *th_client_open_degraded(void);

/* Run fn(arg) with stderr going to a file in th_tmpdir; what it wrote,
 * NUL-terminated: free() it. */
char *th_capture_stderr(void (*fn)(void *), void *arg);

#endif /* HR_TEST_UNIT_UTIL_H */
