/*
 * lease.c: what a C trainer does with libheadroom, start to end: open a
 * client, register the footprint of its communicators, take a lease, fill
 * an ncclConfig_t (when nccl.h is available), and print the grid to launch
 * the mega kernel with.
 *
 * Build, from the repository root after `make` (which writes the header as
 * installed, build/include/headroom.h; tests/python/run.sh builds it with
 * exactly this line):
 *
 *   mkdir -p build/examples && cc -std=c11 -Wall -Wextra -Ibuild/include -o build/examples/lease examples/lease.c -Lbuild/lib -lheadroom -Wl,-rpath,'$ORIGIN/../lib'
 *
 * With NCCL, add its and CUDA's include folders (for example
 * -I/usr/local/cuda/include -I$NCCL_HOME/include) and the program also
 * fills an ncclConfig_t; nothing from NCCL is linked.
 *
 * Run (headroomd listening on $HEADROOM_SOCKET, else
 * /run/headroom/headroom.sock; with none, the lease is degraded):
 *
 *   build/examples/lease [--socket PATH] [GPU]
 *
 * It prints one "key value" line per number and ends with "grid N".
 * Exit status: 0, or 1 with the failing call and hr_strerror's text.
 */
#if defined(__has_include)
#if __has_include(<nccl.h>) && __has_include(<cuda_runtime.h>)
#include <nccl.h>      /* before headroom.h: enables hr_lease_fill_nccl_config */
#define HAVE_NCCL 1
#endif
#endif

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "headroom.h"

/* This process's communicators: a data-parallel one whose all-gather and
 * reduce-scatter overlap (2 collectives in flight), of 8 CTAs each. */
#define COMM_CTAS 8
#define COMM_CONCURRENT 2
#define CLUSTER 2      /* the mega kernel's CTAs per cluster */

#ifdef HAVE_NCCL
static int nccl_field(int v)
{
#ifdef NCCL_CONFIG_UNDEF_INT
  if(v == NCCL_CONFIG_UNDEF_INT)
    return -1;
#endif
  return v;
}
#endif

static int fail(const char *what, int err)
{
  fprintf(stderr, "lease: %s: %s\n", what, hr_strerror(err));
  return 1;
}

int main(int argc, char **argv)
{
  const char *socket_path = NULL;
  hr_client_options opts;
  hr_client *client = NULL;
  hr_lease *lease = NULL;
  hr_budget b;
  const char *what = NULL;    /* the call that failed */
  int gpu = 0, err, i;

  for(i = 1; i < argc; i++) {
    if(!strcmp(argv[i], "--socket") && i + 1 < argc)
      socket_path = argv[++i];
    else if(argv[i][0] >= '0' && argv[i][0] <= '9')
      gpu = atoi(argv[i]);
    else {
      fprintf(stderr, "usage: %s [--socket PATH] [GPU]\n", argv[0]);
      return 2;
    }
  }

  memset(&opts, 0, sizeof(opts));
  opts.name = "lease-example";
  err = hr_client_open(&client, socket_path, &opts);
  if(err)
    return fail("hr_client_open", err);
  printf("connected %d\n", hr_client_connected(client));

  /* The footprint first, so the lease's budget already covers it. */
  err = hr_comm_register(client, gpu, "dp", COMM_CTAS, 1, COMM_CONCURRENT,
                         NULL);
  if(err) {
    what = "hr_comm_register";
    goto out;
  }
  err = hr_lease_acquire(client, gpu, CLUSTER, HR_MODE_HEADROOM, &lease);
  if(err) {
    what = "hr_lease_acquire";
    goto out;
  }
  err = hr_lease_budget(lease, &b);
  if(err) {
    what = "hr_lease_budget";
    goto out;
  }
  printf("gpu %d\nsms %d\nheadroom %d\nepoch %u\ndegraded %d\n", b.gpu, b.sms,
         b.headroom, (unsigned)b.epoch, b.degraded);
  printf("nccl_min_ctas %d\nnccl_max_ctas %d\nnccl_cga_cluster_size %d\n",
         b.nccl_min_ctas, b.nccl_max_ctas, b.nccl_cga_cluster_size);

#ifdef HAVE_NCCL
  {
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    err = hr_lease_fill_nccl_config(lease, &cfg);
    if(err) {
      what = "hr_lease_fill_nccl_config";
      goto out;
    }
    /* ncclCommInitRankConfig(&comm, nranks, id, rank, &cfg) goes here.
     * A field the budget leaves open keeps NCCL's "undefined" (its own
     * default), printed as -1. */
    printf("ncclConfig_t minCTAs %d maxCTAs %d cgaClusterSize %d\n",
           nccl_field(cfg.minCTAs), nccl_field(cfg.maxCTAs),
           nccl_field(cfg.cgaClusterSize));
  }
#else
  printf("ncclConfig_t not filled (built without nccl.h)\n");
#endif

  /* What a trainer reads before every launch: no lock, no syscall. */
  printf("grid %d\n", hr_lease_grid(lease));

  hr_lease_release(lease);

out:
  /* Closing the client also gives back a lease still held. */
  hr_client_close(client);
  return what ? fail(what, err) : 0;
}
