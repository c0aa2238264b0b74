/*
 * gpu_probe.h: which of the three things a GPU test needs is missing on
 * this machine: the NVIDIA driver (libcuda.so.1), a device the driver can
 * see, or a GPU the kernel runs on (sm_90). Asked of the driver itself
 * through dlopen, because the CUDA runtime reports a missing driver as
 * "CUDA driver version is insufficient for CUDA runtime version", which
 * sends a reader looking for a driver upgrade on a machine that has no
 * driver at all. Header only: the skip stubs, built without nvcc or the
 * runtime, include it too.
 */
#ifndef GT_GPU_PROBE_H
#define GT_GPU_PROBE_H

#include <dlfcn.h>
#include <stdio.h>

/* 0 when the driver sees at least one device (`*count` of them); else 1
 * with `why` naming what is missing, for a SKIP line. */
static int gt_probe_cuda(char *why, size_t n, int *count)
{
  typedef int (*init_fn)(unsigned);
  typedef int (*int_fn)(int *);
  typedef int (*name_fn)(int, const char **);
  void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  init_fn cu_init;
  int_fn cu_count, cu_version;
  name_fn cu_err_name;
  const char *err = "?";
  int rc, version = 0;

  *count = 0;
  if(!h) {
    snprintf(why, n, "no NVIDIA driver: libcuda.so.1 cannot be loaded "
             "(install the driver, or run where one is)");
    return 1;
  }
  cu_init = (init_fn)dlsym(h, "cuInit");
  cu_count = (int_fn)dlsym(h, "cuDeviceGetCount");
  cu_version = (int_fn)dlsym(h, "cuDriverGetVersion");
  cu_err_name = (name_fn)dlsym(h, "cuGetErrorName");
  if(!cu_init || !cu_count) {
    snprintf(why, n, "the NVIDIA driver's libcuda.so.1 lacks cuInit");
    dlclose(h);
    return 1;
  }
  if(cu_version)
    cu_version(&version);
  rc = cu_init(0);
  if(rc == 0)
    rc = cu_count(count);
  if(rc != 0 || *count == 0) {
    if(rc && cu_err_name)
      cu_err_name(rc, &err);
    snprintf(why, n, "NVIDIA driver %d.%d found, but no CUDA device: %s "
             "(check nvidia-smi and CUDA_VISIBLE_DEVICES)", version / 1000,
             version % 1000 / 10, rc ? err : "it sees 0 devices");
    dlclose(h);
    return 1;
  }
  dlclose(h);
  return 0;
}

#endif
