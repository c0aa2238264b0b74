/*
 * test_partition.c: partition mode on one GPU: green contexts made from a
 * lease, and what they do and do not confine.
 *
 * With build/bin/headroomd present (or $HEADROOMD), the test starts it on a
 * temporary socket and takes a partition lease from it; else it takes a
 * degraded one (DG_MEGA_MOE_SM_HEADROOM unset: a comm partition of one
 * step). A "hog" here is a kernel whose CTAs each hold a whole SM (200 KB
 * of shared memory) and spin until released, recording which SM they ran
 * on (tests/gpu/partition_kernels.cu).
 *   (a) hr_partition_create: comm SMs == the budget's headroom, mega SMs ==
 *       its grid (an H200: 8 + 124);
 *   (b) a hog of 4 x SMs CTAs on the COMM stream holds every SM it can
 *       reach, and no more than the comm partition's; hr_moe_forward on the
 *       MEGA stream beside it completes, y bitwise equal to the idle run;
 *   (c) the same hog on an ordinary stream (the primary context) lands on
 *       SMs of the mega partition too: the same forward times out
 *       (HR_EBARRIER_TIMEOUT), and the next one, after the hog, is right;
 *   (d) with a daemon: a footprint changes the GPU's budget, the partition
 *       turns stale, and a new one has the new numbers;
 *   (e) with a daemon set to partition_ignore_coscheduling: steps of 2 (an
 *       H200: 2 + 130), and a forward on that mega stream.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cuda_runtime.h>

#include "gpu_util.h"

#define NAME "test_partition"
#define SHORT_TIMEOUT_MS 300    /* the barrier timeout where one must fire */
#define LONG_TIMEOUT_MS 5000    /* where none may */
#define HOG_SAFETY_MS 20000     /* a hog never released ends by itself */
#define MAX_SM_ID 1024          /* %smid is below the device's SM count */

/* tests/gpu/partition_kernels.cu */
int pt_spin_launch(int ctas, void *stream, unsigned *release, unsigned *sm_of,
                   int timeout_ms);

/* ---- the hog ------------------------------------------------------------- */

typedef struct pt_hog {
  unsigned *release;       /* host-mapped */
  unsigned *sm_of;         /* host-mapped, per CTA: SM + 1, 0 = not yet */
  int ctas;
  void *stream;
} pt_hog;

static int hog_started(const pt_hog *h)
{
  int i, n = 0;
  for(i = 0; i < h->ctas; i++)
    n += ((volatile unsigned *)h->sm_of)[i] != 0;
  return n;
}

/* Distinct SMs the hog's CTAs ran on; `set` (MAX_SM_ID bytes) gets them. */
static int hog_sms(const pt_hog *h, unsigned char *set)
{
  int i, n = 0;
  memset(set, 0, MAX_SM_ID);
  for(i = 0; i < h->ctas; i++) {
    unsigned s = ((volatile unsigned *)h->sm_of)[i];
    if(s && s - 1 < MAX_SM_ID && !set[s - 1]) {
      set[s - 1] = 1;
      n++;
    }
  }
  return n;
}

/* Launch `ctas` hog CTAs on `stream` and wait until `resident` of them
 * run (5 s at most), then a little longer so that any CTA that could
 * still start has started. */
static void hog_start(pt_hog *h, int ctas, void *stream, int resident)
{
  unsigned *rel_dev, *sm_dev;
  double t0;

  memset(h, 0, sizeof(*h));
  h->ctas = ctas;
  h->stream = stream;
  GT_CUDA(cudaHostAlloc((void **)&h->release, sizeof(unsigned),
                        cudaHostAllocMapped));
  GT_CUDA(cudaHostAlloc((void **)&h->sm_of, sizeof(unsigned) * ctas,
                        cudaHostAllocMapped));
  *(volatile unsigned *)h->release = 0;
  memset(h->sm_of, 0, sizeof(unsigned) * ctas);
  GT_CUDA(cudaHostGetDevicePointer((void **)&rel_dev, h->release, 0));
  GT_CUDA(cudaHostGetDevicePointer((void **)&sm_dev, h->sm_of, 0));
  GT_CUDA(pt_spin_launch(ctas, stream, rel_dev, sm_dev, HOG_SAFETY_MS));
  t0 = gt_now_ms();
  while(hog_started(h) < resident && gt_now_ms() - t0 < 5000)
    gt_sleep_ms(1);
  gt_sleep_ms(50);
}

static void hog_release(pt_hog *h)
{
  *(volatile unsigned *)h->release = 1;
  __sync_synchronize();
  GT_CUDA(cudaStreamSynchronize((cudaStream_t)h->stream));
}

static void hog_free(pt_hog *h)
{
  cudaFreeHost(h->release);
  cudaFreeHost(h->sm_of);
  memset(h, 0, sizeof(*h));
}

/* ---- the forward ---------------------------------------------------------- */

static void budget_of(const hr_lease *lease, hr_budget *b)
{
  int rc = hr_lease_budget(lease, b);
  if(rc != HR_OK) {
    fprintf(stderr, "FAIL: hr_lease_budget: %s\n", hr_strerror(rc));
    exit(1);
  }
}

/* hr_moe_forward under `lease` on `stream`, waited for; y back in y_h. */
static int forward_on(gt_moe *g, const hr_lease *lease, void *stream,
                      int timeout_ms, double *ms)
{
  const size_t bytes = (size_t)g->T * g->s.H * 2;
  hr_moe_args a = gt_args(g, timeout_ms);
  double t0;
  int rc;

  GT_CUDA(cudaMemsetAsync(g->y, 0xff, bytes, (cudaStream_t)stream));   /* NaN */
  t0 = gt_now_ms();
  rc = hr_moe_forward(g->m, lease, &a, stream);
  if(rc == HR_OK)
    rc = hr_moe_sync(g->m);
  *ms = gt_now_ms() - t0;
  GT_CUDA(cudaMemcpyAsync(g->y_h, g->y, bytes, cudaMemcpyDeviceToHost,
                          (cudaStream_t)stream));
  GT_CUDA(cudaStreamSynchronize((cudaStream_t)stream));
  return rc;
}

static int same_y(const gt_moe *g, const uint16_t *good)
{
  return memcmp(good, g->y_h, (size_t)g->T * g->s.H * 2) == 0;
}

/* A partition of `lease`, checked against its budget. */
static hr_partition *partition_checked(const hr_lease *lease, const char *what)
{
  hr_partition *p = NULL;
  hr_budget b;
  int rc;

  budget_of(lease, &b);
  rc = hr_partition_create(lease, &p);
  GT_EXPECT(rc == HR_OK, "%s: hr_partition_create: %s", what, hr_strerror(rc));
  if(rc != HR_OK)
    return NULL;
  printf("  %s: steps of %d; comm %d SMs (budget headroom %d), mega %d SMs "
         "(budget grid %d), NCCL <= %d CTAs; epoch %u\n", what,
         b.partition_granularity, hr_partition_comm_sms(p), b.headroom,
         hr_partition_mega_sms(p), b.grid, b.nccl_max_ctas,
         (unsigned)hr_partition_epoch(p));
  GT_EXPECT(hr_partition_comm_sms(p) == b.headroom, "%s: comm %d, headroom %d",
            what, hr_partition_comm_sms(p), b.headroom);
  GT_EXPECT(hr_partition_mega_sms(p) == b.grid, "%s: mega %d, grid %d", what,
            hr_partition_mega_sms(p), b.grid);
  GT_EXPECT(b.headroom % b.partition_granularity == 0, "%s: %d not in steps "
            "of %d", what, b.headroom, b.partition_granularity);
  GT_EXPECT(hr_partition_stale(p) == 0, "%s: stale at birth", what);
  GT_EXPECT(hr_partition_comm_stream(p) && hr_partition_mega_stream(p) &&
            hr_partition_comm_stream(p) != hr_partition_mega_stream(p),
            "%s: streams", what);
  return p;
}

/* (e): a daemon that splits in the finer steps. */
static void fine_steps(const char *bin, const char *top, gt_moe *g,
                       const uint16_t *good)
{
  char dir[700];
  gt_daemon d = GT_DAEMON_INIT;
  hr_client_options o;
  hr_client *c = NULL;
  hr_lease *l = NULL;
  hr_partition *p;
  hr_budget b;
  double ms;
  int rc;

  snprintf(dir, sizeof(dir), "%s/fine", top);
  mkdir(dir, 0700);
  if(gt_daemon_start(&d, bin, dir, "partition_ignore_coscheduling = true\n")) {
    gt_daemon_stop(&d);
    GT_EXPECT(0, "(e) headroomd with partition_ignore_coscheduling did not start");
    return;
  }
  memset(&o, 0, sizeof(o));
  o.quiet = 1;
  GT_EXPECT(hr_client_open(&c, d.sock, &o) == HR_OK, "(e) open");
  rc = hr_lease_acquire(c, 0, 1, HR_MODE_PARTITION, &l);
  GT_EXPECT(rc == HR_OK, "(e) partition lease: %s", hr_strerror(rc));
  if(rc == HR_OK) {
    budget_of(l, &b);
    GT_EXPECT(b.partition_granularity >= 1 && b.partition_granularity < 8,
              "(e) steps of %d, not finer than 8", b.partition_granularity);
    p = partition_checked(l, "(e) partition, co-scheduling ignored");
    if(p) {
      if(b.sms == 132 && b.partition_granularity == 2)
        GT_EXPECT(hr_partition_comm_sms(p) == 2 && hr_partition_mega_sms(p) == 130,
                  "(e) an H200 in steps of 2: %d + %d", hr_partition_comm_sms(p),
                  hr_partition_mega_sms(p));
      rc = forward_on(g, l, hr_partition_mega_stream(p), LONG_TIMEOUT_MS, &ms);
      printf("  (e) forward of %d CTAs (cluster 1) on that mega stream: %s in "
             "%.1f ms, y %s\n", hr_lease_grid(l), hr_strerror(rc), ms,
             same_y(g, good) ? "bitwise equal to the idle run" : "DIFFERS");
      GT_EXPECT(rc == HR_OK, "(e) forward: %s", hr_strerror(rc));
      GT_EXPECT(same_y(g, good), "(e) y differs");
      hr_partition_destroy(p);
    }
  }
  if(l)
    hr_lease_release(l);
  hr_client_close(c);
  gt_daemon_stop(&d);
}

int main(void)
{
  char dir[] = "/tmp/hr-partition-XXXXXX";
  const char *bin = gt_daemon_bin();
  unsigned char comm_set[MAX_SM_ID], set[MAX_SM_ID];
  gt_daemon d = GT_DAEMON_INIT;
  hr_client *client = NULL;
  hr_lease *lease = NULL;
  hr_partition *p = NULL, *p2;
  hr_moe_failure f;
  hr_comm *comm = NULL;
  hr_budget b;
  pt_hog hog;
  gt_moe g;
  uint16_t *good = NULL;
  cudaStream_t ordinary;
  uint32_t e0;
  int with_daemon, rc, sms, n, i, outside, grid;
  double ms, t0;

  gt_require_gpu(NAME);
  gt_seed(NAME);
  with_daemon = gt_lease_setup(&d, bin, dir, &client);
  if(with_daemon < 0)
    return 1;
  rc = hr_lease_acquire(client, 0, 2, HR_MODE_PARTITION, &lease);
  GT_EXPECT(rc == HR_OK, "partition lease: %s", hr_strerror(rc));
  if(rc != HR_OK)
    goto out;
  budget_of(lease, &b);
  printf("  partition lease: %d SMs, steps of %d, comm %d, grid %d, NCCL %d..%d "
         "CTAs, CGA %d\n", b.sms, b.partition_granularity, b.headroom, b.grid,
         b.nccl_min_ctas, b.nccl_max_ctas, b.nccl_cga_cluster_size);
  /* Nothing registered yet: one step is the whole comm partition. */
  GT_EXPECT(b.headroom == b.partition_granularity, "comm %d, step %d",
            b.headroom, b.partition_granularity);

  /* (a) */
  p = partition_checked(lease, "(a) partition");
  if(!p)
    goto out;
  if(b.sms == 132 && b.partition_granularity == 8)
    GT_EXPECT(hr_partition_comm_sms(p) == 8 && hr_partition_mega_sms(p) == 124,
              "an H200 in steps of 8: %d + %d", hr_partition_comm_sms(p),
              hr_partition_mega_sms(p));
  e0 = hr_partition_epoch(p);

  gt_moe_init(&g, &gt_shapes[GT_SMALL], 256);
  sms = hr_moe_sms(g.m);
  gt_route_random(&g, 256);
  rc = forward_on(&g, lease, hr_partition_mega_stream(p), LONG_TIMEOUT_MS, &ms);
  GT_EXPECT(rc == HR_OK, "idle forward: %s", hr_strerror(rc));
  g.last_ms = (float)ms;
  gt_expect_correct(&g, "mega stream, idle");
  good = malloc((size_t)g.T * g.s.H * 2);
  memcpy(good, g.y_h, (size_t)g.T * g.s.H * 2);

  /* (b) every SM the comm stream can reach, held */
  hog_start(&hog, 4 * sms, hr_partition_comm_stream(p), hr_partition_comm_sms(p));
  n = hog_started(&hog);
  printf("  (b) hog of %d CTAs on the comm stream: %d running, on %d SMs\n",
         hog.ctas, n, hog_sms(&hog, comm_set));
  GT_EXPECT(n == hr_partition_comm_sms(p), "%d hog CTAs run in a %d-SM partition",
            n, hr_partition_comm_sms(p));
  grid = hr_lease_grid(lease);
  rc = forward_on(&g, lease, hr_partition_mega_stream(p), LONG_TIMEOUT_MS, &ms);
  printf("  (b) forward of %d CTAs on the mega stream beside it: %s in %.1f ms, "
         "y %s; hog CTAs running %d\n", grid, hr_strerror(rc), ms,
         same_y(&g, good) ? "bitwise equal to the idle run" : "DIFFERS",
         hog_started(&hog));
  GT_EXPECT(rc == HR_OK, "forward beside a comm-partition hog: %s", hr_strerror(rc));
  GT_EXPECT(same_y(&g, good), "y beside the comm-partition hog differs");
  GT_EXPECT(hog_started(&hog) == n, "the hog grew from %d to %d CTAs", n,
            hog_started(&hog));
  hog_release(&hog);
  n = hog_sms(&hog, set);
  printf("  (b) released: all %d hog CTAs ran, on %d distinct SMs (the comm "
         "partition has %d)\n", hog_started(&hog), n, hr_partition_comm_sms(p));
  GT_EXPECT(hog_started(&hog) == hog.ctas, "%d of %d hog CTAs ran",
            hog_started(&hog), hog.ctas);
  GT_EXPECT(n == hr_partition_comm_sms(p), "the comm stream's hog touched %d SMs",
            n);
  memcpy(comm_set, set, sizeof(set));
  hog_free(&hog);

  /* (c) a hog in the primary context. As large as in (b) it would hold
   * every SM and no mega CTA would start at all (nothing partial to time
   * out: the forward would only wait); comm + 8 CTAs, one per SM, which
   * the primary context places anywhere: 8 of them at least outside the
   * comm partition. */
  GT_CUDA(cudaStreamCreateWithFlags(&ordinary, cudaStreamNonBlocking));
  hog_start(&hog, hr_partition_comm_sms(p) + 8, ordinary,
            hr_partition_comm_sms(p) + 8);
  n = hog_sms(&hog, set);
  for(outside = 0, i = 0; i < MAX_SM_ID; i++)
    outside += set[i] && !comm_set[i];
  printf("  (c) hog of %d CTAs on an ordinary stream: %d running, on %d SMs, "
         "%d of them outside the comm partition\n", hog.ctas, hog_started(&hog),
         n, outside);
  GT_EXPECT(outside >= 8, "only %d hog SMs outside the comm partition", outside);
  grid = hr_lease_grid(lease);
  t0 = gt_now_ms();
  rc = forward_on(&g, lease, hr_partition_mega_stream(p), SHORT_TIMEOUT_MS, &ms);
  printf("  (c) forward of %d CTAs on the mega stream: %s after %.1f ms "
         "(barrier timeout %d ms)\n", grid, hr_strerror(rc), gt_now_ms() - t0,
         SHORT_TIMEOUT_MS);
  GT_EXPECT(rc == HR_EBARRIER_TIMEOUT, "beside a primary-context hog: %s",
            hr_strerror(rc));
  if(hr_moe_last_failure(g.m, &f) == HR_OK) {
    printf("  (c) barrier %d: %d of %d CTAs arrived; hr_report: %s\n",
           f.detail.barrier, f.detail.arrived, f.detail.expected,
           hr_strerror(f.reported));
    GT_EXPECT(f.detail.expected == grid, "expected %d, grid %d",
              f.detail.expected, grid);
  } else {
    GT_EXPECT(0, "no failure recorded");
  }
  hog_release(&hog);
  hog_free(&hog);
  GT_CUDA(cudaStreamDestroy(ordinary));
  rc = forward_on(&g, lease, hr_partition_mega_stream(p), LONG_TIMEOUT_MS, &ms);
  printf("  (c) after the hog: forward of %d CTAs: %s in %.1f ms, y %s\n",
         hr_lease_grid(lease), hr_strerror(rc), ms,
         same_y(&g, good) ? "bitwise equal to the idle run" : "DIFFERS");
  GT_EXPECT(rc == HR_OK, "forward after the hog: %s", hr_strerror(rc));
  GT_EXPECT(same_y(&g, good), "y after the hog differs");

  /* (d) */
  if(with_daemon) {
    int want = 2 * hr_partition_comm_sms(p);
    uint32_t e;
    /* A communicator of `want` CTAs: the comm partition must grow. */
    rc = hr_comm_register(client, 0, "dp", want, 1, 1, &comm);
    GT_EXPECT(rc == HR_OK, "register: %s", hr_strerror(rc));
    t0 = gt_now_ms();
    while(hr_lease_headroom(lease) < want && gt_now_ms() - t0 < 3000) {
      e = hr_lease_epoch(lease);
      hr_lease_wait_change(lease, e, 100);
    }
    budget_of(lease, &b);
    printf("  (d) footprint of %d CTAs: lease epoch %u -> %u, comm %d, grid %d; "
           "partition stale %d\n", want, (unsigned)e0, (unsigned)b.epoch,
           b.headroom, b.grid, hr_partition_stale(p));
    GT_EXPECT(b.headroom >= want, "comm partition %d after a %d-CTA footprint",
              b.headroom, want);
    GT_EXPECT(hr_partition_stale(p) == 1, "not stale after the budget changed");
    GT_EXPECT(hr_partition_epoch(p) == e0, "its epoch moved");
    p2 = partition_checked(lease, "(d) new partition");
    if(p2) {
      rc = forward_on(&g, lease, hr_partition_mega_stream(p2), LONG_TIMEOUT_MS, &ms);
      printf("  (d) forward of %d CTAs on the new mega stream: %s, y %s\n",
             hr_lease_grid(lease), hr_strerror(rc),
             same_y(&g, good) ? "bitwise equal to the idle run" : "DIFFERS");
      GT_EXPECT(rc == HR_OK, "forward in the new partition: %s", hr_strerror(rc));
      GT_EXPECT(same_y(&g, good), "y in the new partition differs");
      hr_partition_destroy(p2);
    }
    hr_comm_unregister(comm);
    /* (e) */
    fine_steps(bin, dir, &g, good);
  } else {
    printf("  (d), (e) not run: they need headroomd (a degraded lease's epoch "
           "never changes, and its steps are the device's)\n");
  }

  hr_partition_destroy(p);
  p = NULL;
  free(good);
  gt_moe_free(&g);

out:
  hr_partition_destroy(p);
  if(lease)
    hr_lease_release(lease);
  gt_lease_teardown(&d, dir, client);
  return gt_finish(NAME);
}
