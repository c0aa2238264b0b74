/*
 * calibration.h: the node's calibration file, as headroom-calibrate writes
 * it (docs/calibration.md gives the format).
 *
 * Loading is all or nothing: a file with any field missing, of the wrong
 * type or out of range is refused with the reason, and the daemon runs on
 * the policy's theory instead. A measured number is only worth trusting
 * when the whole file is.
 */
#ifndef HR_DAEMON_CALIBRATION_H
#define HR_DAEMON_CALIBRATION_H

#include <stddef.h>

#include "hr_proto.h"
#include "policy.h"

#define HR__CALIBRATION_FILE "calibration.json" /* in state_dir */
#define HR__CALIBRATION_VERSION 1
#define HR__CALIB_MAX_BUDGETS 64
#define HR__CALIB_FILE_MAX (1024 * 1024)
#define HR__CALIB_PATH_MAX 4096

typedef struct hr__calibration {
  int version;
  char date[HR_NAME_MAX];           /* when it was measured (ISO 8601) */
  char node[HR_NAME_MAX];           /* the host it was measured on */
  char nccl_version[HR_NAME_MAX];   /* "2.28.9" */
  int n_gpus;
  hr_gpu_info gpus[HR_MAX_GPUS];    /* the GPUs measured */
  int n_budgets;
  hr_calib_budget budgets[HR__CALIB_MAX_BUDGETS];
} hr__calibration;

/* Parse calibration text (`len` bytes). HR_EINVAL with why in `why`. */
int hr__calibration_parse(hr__calibration *out, const char *text, size_t len,
                          char *why, size_t n);

/* Read and parse the file at `path`: HR_ENOTFOUND when it does not exist,
 * HR_EINVAL when it cannot be read or parsed (why in `why`). Only a
 * regular file owned by the daemon's user or root is read; anything else
 * (a link, a FIFO, a folder, another user's file) is moved aside as
 * <path>.refused-<now_s> (hr__set_aside), which `why` says. */
int hr__calibration_load(hr__calibration *out, const char *path,
                         long long now_s, char *why, size_t n);

/* Whether the calibration applies to `gpu`: it lists the same index with
 * the same SM count (and name, where both have one). */
int hr__calibration_covers(const hr__calibration *c, const hr_gpu_info *gpu);

#endif /* HR_DAEMON_CALIBRATION_H */
