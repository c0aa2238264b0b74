/*
 * nccl_dl.h: finding NCCL at run time, shared by the two programs that
 * open it with dlopen so that they still start (and say why) where it is
 * missing: headroom-calibrate (calib_nccl.c) and the overlap trials
 * (tests/gpu/trials_nccl.c). Each keeps its own table of the functions it
 * needs; what they share is where the library is looked for, how a symbol
 * becomes a function pointer and how the version reads.
 */
#ifndef HR_NCCL_DL_H
#define HR_NCCL_DL_H

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* libnccl.so.2 from $NCCL_HOME/lib, else from the loader's path; NULL,
 * with the reason in why, when neither has it. */
static inline void *hr__nccl_dlopen(char *why, size_t n)
{
  const char *home = getenv("NCCL_HOME");
  char path[4096];
  void *h = NULL;

  if(home && *home) {
    snprintf(path, sizeof(path), "%s/lib/libnccl.so.2", home);
    h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  }
  if(!h)
    h = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
  if(!h)
    snprintf(why, n, "libnccl.so.2 not found ($NCCL_HOME/lib, then the "
             "loader's path): %s", dlerror());
  return h;
}

/* dlsym into a function pointer: through memcpy, since ISO C has no cast
 * from an object pointer to a function pointer. */
static inline int hr__nccl_sym(void *lib, const char *name, void *fn,
                               size_t size)
{
  void *p = dlsym(lib, name);

  if(!p)
    return -1;
  memcpy(fn, &p, size);
  return 0;
}

/* Member `field` of the function table `tab` (which has `lib`). */
#define HR__NCCL_SYM(tab, name, field)                                       \
  hr__nccl_sym((tab).lib, name, &(tab).field, sizeof((tab).field))

/* ncclGetVersion's code as "major.minor.patch". */
static inline void hr__nccl_version_text(int v, char *out, size_t n)
{
  /* Codes since 2.9: major * 10000 + minor * 100 + patch. */
  snprintf(out, n, "%d.%d.%d", v / 10000, v / 100 % 100, v % 100);
}

#endif /* HR_NCCL_DL_H */
