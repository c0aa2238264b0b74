/*
 * nccl_dl.h: finding NCCL at run time, shared by the two programs that
 * open it with dlopen so that they still start (and say why) where it is
 * missing: headroom-calibrate (calib_nccl.c) and the overlap trials
 * (tests/gpu/trials_nccl.c). They share the table of the functions they
 * call (each program has its own copy), where the library is looked for
 * and how the version reads.
 */
#ifndef HR_NCCL_DL_H
#define HR_NCCL_DL_H

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nccl.h>

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

/* The NCCL functions either program calls. */
typedef struct hr__nccl_fns {
  void *lib;
  ncclResult_t (*get_version)(int *);
  ncclResult_t (*get_unique_id)(ncclUniqueId *);
  ncclResult_t (*init_rank_config)(ncclComm_t *, int, ncclUniqueId, int,
                                   ncclConfig_t *);
  ncclResult_t (*finalize)(ncclComm_t);   /* NULL before 2.14 */
  ncclResult_t (*destroy)(ncclComm_t);
  ncclResult_t (*all_reduce)(const void *, void *, size_t, ncclDataType_t,
                             ncclRedOp_t, ncclComm_t, cudaStream_t);
  ncclResult_t (*all_gather)(const void *, void *, size_t, ncclDataType_t,
                             ncclComm_t, cudaStream_t);
  ncclResult_t (*reduce_scatter)(const void *, void *, size_t,
                                 ncclDataType_t, ncclRedOp_t, ncclComm_t,
                                 cudaStream_t);
  ncclResult_t (*group_start)(void);
  ncclResult_t (*group_end)(void);
  const char *(*error_string)(ncclResult_t);
} hr__nccl_fns;

/* Open libnccl into *t, once (later calls only read the version): 0, or
 * -1 with why in `why` (`who` names the program that needs it). `version`
 * gets "2.28.9". */
static inline int hr__nccl_load(hr__nccl_fns *t, const char *who, char *version,
                                size_t vn, char *why, size_t n)
{
  int v = 0;

  if(!t->lib) {
    t->lib = hr__nccl_dlopen(why, n);
    if(!t->lib)
      return -1;
    if(HR__NCCL_SYM(*t, "ncclGetVersion", get_version) ||
       HR__NCCL_SYM(*t, "ncclGetUniqueId", get_unique_id) ||
       HR__NCCL_SYM(*t, "ncclCommInitRankConfig", init_rank_config) ||
       HR__NCCL_SYM(*t, "ncclCommDestroy", destroy) ||
       HR__NCCL_SYM(*t, "ncclAllReduce", all_reduce) ||
       HR__NCCL_SYM(*t, "ncclAllGather", all_gather) ||
       HR__NCCL_SYM(*t, "ncclReduceScatter", reduce_scatter) ||
       HR__NCCL_SYM(*t, "ncclGroupStart", group_start) ||
       HR__NCCL_SYM(*t, "ncclGroupEnd", group_end) ||
       HR__NCCL_SYM(*t, "ncclGetErrorString", error_string)) {
      snprintf(why, n, "libnccl.so.2 lacks a function %s needs "
               "(NCCL 2.17 or later)", who);
      dlclose(t->lib);
      memset(t, 0, sizeof(*t));
      return -1;
    }
    if(HR__NCCL_SYM(*t, "ncclCommFinalize", finalize))
      t->finalize = NULL;               /* before 2.14: destroy alone */
  }
  t->get_version(&v);
  hr__nccl_version_text(v, version, vn);
  return 0;
}

/* NCCL's words for r. */
static inline const char *hr__nccl_why(const hr__nccl_fns *t, ncclResult_t r)
{
  return t->error_string ? t->error_string(r) : "NCCL error";
}

#endif /* HR_NCCL_DL_H */
