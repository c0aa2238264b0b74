/*
 * options.h: headroomd's command line.
 *
 * Kept apart from main() so the flag parsing is unit-tested like the file
 * parser: the flags become an hr__config_flags, which config.c layers over
 * the file.
 */
#ifndef HR_DAEMON_OPTIONS_H
#define HR_DAEMON_OPTIONS_H

#include <stdio.h>

#include "config.h"

typedef enum hr__action {
  HR_ACTION_RUN = 0,
  HR_ACTION_CHECK_CONFIG,   /* --check-config: validate and exit 0/1 */
  HR_ACTION_HELP,           /* --help */
  HR_ACTION_VERSION         /* --version */
} hr__action;

typedef struct hr__options {
  hr__action action;
  hr__config_flags flags;   /* points into argv */
} hr__options;

/* Parse argv. HR_EINVAL with the reason in `err` on a bad flag or a
 * stray argument. Safe to call more than once (tests do). */
int hr__options_parse(hr__options *opts, int argc, char **argv, char *err,
                      size_t n);

/* The --help text: every flag and every config key. */
void hr__options_usage(FILE *out);

#endif /* HR_DAEMON_OPTIONS_H */
