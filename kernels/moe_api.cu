/*
 * moe_api.cu: the launch path of the mega-MoE kernel (headroom_moe.h):
 * the context, argument checks, the launch in the lease's mode, and the
 * wait that turns the kernel's error word into HR_E* codes and incidents.
 *
 * Host code only; plain C in a .cu file because it is built into the same
 * library as the kernel with the CUDA runtime linked statically.
 */
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime.h>

#include "headroom.h"
#include "hr_clock.h"
#include "headroom_moe.h"
#include "moe_backward.h"
#include "moe_bench.h"
#include "moe_ep_kernel.h"
#include "moe_host.h"
#include "moe_kernel.h"

/* Busy-poll the launch this long before sleeping between polls: a forward
 * takes tens of microseconds to milliseconds and a sleep would add its
 * own latency to every hr_moe_sync. */
#define SYNC_SPIN_NS 2000000LL
#define SYNC_SLEEP_NS 50000L


/* cuTensorMapEncodeTiled, found through the runtime: the library links
 * no driver library. */
typedef CUresult (*tmap_encode_fn)(CUtensorMap *, CUtensorMapDataType, cuuint32_t, void *,
                                   const cuuint64_t *, const cuuint64_t *, const cuuint32_t *,
                                   const cuuint32_t *, CUtensorMapInterleave,
                                   CUtensorMapSwizzle, CUtensorMapL2promotion,
                                   CUtensorMapFloatOOBfill);

struct hr_moe {
  int device;
  int sms;
  hr_moe_shape shape;

  /* device workspace, one allocation */
  void *ws;
  size_t ws_bytes;
  hr__moe_sync *sync;
  hr__moe_agn *agn;        /* the agnostic kernel's schedule */
  unsigned *g1_done, *g2_done;
  size_t reset_bytes;      /* from ws: what a failed launch leaves dirty */
  int32_t *sorted_tok;
  int32_t *pos_of;
  uint16_t *h;
  uint16_t *ypair;

  /* the backward's workspace (hr_moe_backward_prepare), one allocation */
  void *bws;
  size_t bws_bytes;
  int32_t *sorted_pair;
  uint16_t *dh;
  float *dwp;

  /* The TMA pipeline's tensor maps (moe_gemm_tma.cuh): the workspace's
   * made once, the weights' again whenever the caller's pointers change
   * (a host-side encoding, no device call). */
  tmap_encode_fn encode;
  CUtensorMap tm_xs, tm_h, tm_w1, tm_w2;
  const void *tm_w1_src, *tm_w2_src;

  /* pinned, mapped error and abort words */
  hr__moe_host_words *host;
  hr__moe_host_words *host_dev;

  cudaEvent_t done;        /* recorded after each launch */
  cudaStream_t stream;     /* of the last launch */
  uint32_t seq;            /* of the last launch */
  int in_flight;           /* a launch no wait has yet seen end or fail */
  int needs_reset;         /* the barrier words must be cleared */

  /* about the last launch, for the incident */
  const hr_lease *lease;
  int agnostic;
  int grid;
  int timeout_ms;

  int has_failure;
  hr_moe_failure failure;
};

/* ---- helpers ----------------------------------------------------------- */

int hr__moe_err_from_cuda(cudaError_t e)
{
  switch(e) {
  case cudaSuccess:
    return HR_OK;
  case cudaErrorCooperativeLaunchTooLarge:
    return HR_ECOOP_TOO_LARGE;
  case cudaErrorMemoryAllocation:
    return HR_ENOMEM;
  case cudaErrorNoDevice:
  case cudaErrorInsufficientDriver:
  case cudaErrorInitializationError:
  case cudaErrorStubLibrary:
  case cudaErrorDevicesUnavailable:
  case cudaErrorSystemDriverMismatch:
  case cudaErrorCompatNotSupportedOnDevice:
    return HR_ENOGPU;
  default:
    return HR_ECUDA;
  }
}

int hr__moe_device_enter(int device, int *prev)
{
  if(cudaGetDevice(prev) != cudaSuccess)
    *prev = -1;
  if(*prev != device && cudaSetDevice(device) != cudaSuccess)
    return HR_ECUDA;
  return HR_OK;
}

void hr__moe_device_leave(int device, int prev)
{
  if(prev >= 0 && prev != device)
    cudaSetDevice(prev);
}

static int shape_valid(const hr_moe_shape *s)
{
  return s && s->experts >= 1 && s->experts <= HR_MOE_MAX_EXPERTS &&
         s->hidden >= 256 && s->hidden % 256 == 0 &&
         s->inter >= 128 && s->inter % 128 == 0 &&
         s->topk >= 1 && s->topk <= HR_MOE_MAX_TOPK &&
         s->max_tokens >= 1 &&
         (long long)s->max_tokens * s->topk <= (1LL << 30);
}

static size_t align_up(size_t n)
{
  return (n + 255) & ~(size_t)255;
}

/* A tensor map of `type` and `rank` dimensions (innermost first; strides
 * in bytes of dimensions 1..rank-1), boxes `box`, the 128-byte swizzle
 * the wgmma tiles read and the dW stores write. */
static int tmap_encode(tmap_encode_fn encode, CUtensorMap *map, CUtensorMapDataType type,
                       const void *base, unsigned rank, const cuuint64_t *dims,
                       const cuuint64_t *strides, const cuuint32_t *box)
{
  const cuuint32_t ones[5] = { 1, 1, 1, 1, 1 };
  CUresult r = encode(map, type, rank, (void *)base, dims, strides, box, ones,
                      CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                      CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  return r == CUDA_SUCCESS ? HR_OK : HR_ECUDA;
}

/* A bf16 one, with the context's encoder. */
static int tmap_make(const hr_moe *m, CUtensorMap *map, const void *base, unsigned rank,
                     const cuuint64_t *dims, const cuuint64_t *strides,
                     const cuuint32_t *box)
{
  return tmap_encode(m->encode, map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, base, rank, dims,
                     strides, box);
}

/* The workspace's maps: the x rows in expert order (in ypair's memory)
 * [pairs][H] and h [pairs][I], boxes of 64 K by HR__MOE_TMA_TOK_BOX rows
 * (moe_gemm_tma.cuh). */
static int tmap_workspace(hr_moe *m)
{
  const cuuint64_t pairs = (cuuint64_t)m->shape.max_tokens * m->shape.topk;
  const cuuint64_t H = (cuuint64_t)m->shape.hidden, I = (cuuint64_t)m->shape.inter;
  const cuuint32_t box[2] = { 64, HR__MOE_TMA_TOK_BOX };
  cuuint64_t dims[2], strides[1];
  int err;

  dims[0] = H;
  dims[1] = pairs;
  strides[0] = H * 2;
  err = tmap_make(m, &m->tm_xs, m->ypair, 2, dims, strides, box);
  if(err)
    return err;
  dims[0] = I;
  strides[0] = I * 2;
  return tmap_make(m, &m->tm_h, m->h, 2, dims, strides, box);
}

/* The weights' maps, when the pointers are new. W1 [E][2I][H] seen as
 * [E][I/8][2][8][H]: a box of (64 K, 8 rows, gate and up, 4 groups) is 64
 * rows in GEMM1's order (per 16: 8 gate rows, then the same features'
 * up rows). W2 [E][H][I]: boxes of 64 rows. */
static int tmap_weights(hr_moe *m, const void *w1, const void *w2)
{
  const cuuint64_t E = (cuuint64_t)m->shape.experts;
  const cuuint64_t H = (cuuint64_t)m->shape.hidden, I = (cuuint64_t)m->shape.inter;
  int err;

  if(w1 != m->tm_w1_src) {
    const cuuint64_t dims[5] = { H, 8, 2, I / 8, E };
    const cuuint64_t strides[4] = { H * 2, I * H * 2, 8 * H * 2, 2 * I * H * 2 };
    const cuuint32_t box[5] = { 64, 8, 2, 4, 1 };
    m->tm_w1_src = NULL;
    err = tmap_make(m, &m->tm_w1, w1, 5, dims, strides, box);
    if(err)
      return err;
    m->tm_w1_src = w1;
  }
  if(w2 != m->tm_w2_src) {
    const cuuint64_t dims[3] = { I, H, E };
    const cuuint64_t strides[2] = { I * 2, H * I * 2 };
    const cuuint32_t box[3] = { 64, 64, 1 };
    m->tm_w2_src = NULL;
    err = tmap_make(m, &m->tm_w2, w2, 3, dims, strides, box);
    if(err)
      return err;
    m->tm_w2_src = w2;
  }
  return HR_OK;
}

/* The driver's cuTensorMapEncodeTiled, or NULL (a driver without TMA). */
static tmap_encode_fn tmap_encoder(void)
{
  enum cudaDriverEntryPointQueryResult q;
  void *fn = NULL;
  if(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault,
                                      &q) != cudaSuccess ||
     q != cudaDriverEntryPointSuccess || !fn) {
    cudaGetLastError();
    return NULL;
  }
  return (tmap_encode_fn)fn;
}

/* The expert-parallel launch path's maps (moe_ep_kernel.h): the same
 * encoding as a context's, on a stand-in context that holds only what
 * tmap_workspace and tmap_weights read. */
extern "C" int hr__moe_encode_maps(const hr_moe_shape *s, void *ypair, void *h, const void *w1,
                                   const void *w2, CUtensorMap *tm_xs, CUtensorMap *tm_h,
                                   CUtensorMap *tm_w1, CUtensorMap *tm_w2)
{
  static tmap_encode_fn encode;   /* the driver's, the same for every call */
  hr_moe m;
  int err;

  if(!encode && !(encode = tmap_encoder()))
    return HR_EUNSUPPORTED;
  memset(&m, 0, sizeof(m));
  m.encode = encode;
  m.shape = *s;
  m.ypair = (uint16_t *)ypair;
  m.h = (uint16_t *)h;
  if(tm_xs && tm_h) {
    err = tmap_workspace(&m);
    if(err)
      return err;
    *tm_xs = m.tm_xs;
    *tm_h = m.tm_h;
  }
  if(tm_w1 && tm_w2) {
    err = tmap_weights(&m, w1, w2);
    if(err)
      return err;
    *tm_w1 = m.tm_w1;
    *tm_w2 = m.tm_w2;
  }
  return HR_OK;
}

/* dW1 [E 2I][H] and dW2 [E H][I], in boxes of 128 bytes by 128 rows: a
 * 128 x 128 dW tile is 2 boxes in bf16, 4 in fp32 (bwd_dw_store). Made
 * at every backward launch (a CUDA graph replays the captured ones): the
 * caller's dW pointers and dtype may change at any call, and an encoding
 * is host work alone, no device call. */
extern "C" int hr__moe_encode_dw_maps(const hr_moe_shape *s, hr__moe_bwd_params *p)
{
  static tmap_encode_fn encode;   /* the driver's, the same for every call */
  const cuuint64_t E = (cuuint64_t)s->experts;
  const cuuint64_t H = (cuuint64_t)s->hidden, I = (cuuint64_t)s->inter;
  const cuuint64_t es = p->dw_bf16 ? 2 : 4;
  const CUtensorMapDataType type =
      p->dw_bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT32;
  const cuuint32_t box[2] = { (cuuint32_t)(128 / es), 128 };
  cuuint64_t dims[2], strides[1];
  int err;

  if(!encode && !(encode = tmap_encoder()))
    return HR_EUNSUPPORTED;
  dims[0] = H;
  dims[1] = E * 2 * I;
  strides[0] = H * es;
  err = tmap_encode(encode, &p->tm_dw1, type, p->dw1, 2, dims, strides, box);
  if(err)
    return err;
  dims[0] = I;
  dims[1] = E * H;
  strides[0] = I * es;
  return tmap_encode(encode, &p->tm_dw2, type, p->dw2, 2, dims, strides, box);
}

/* ---- create / destroy -------------------------------------------------- */

int hr_moe_create(hr_moe **out, int device, const hr_moe_shape *shape)
{
  hr_moe *m = NULL;
  struct cudaDeviceProp prop;
  cudaError_t ce;
  int count = 0, prev = -1, entered = 0, err = HR_OK;
  size_t pairs, tiles, off;

  if(!out || !shape_valid(shape))
    return HR_EINVAL;
  *out = NULL;

  /* The first CUDA call: without a driver or device it fails here, with a
   * clear code, and nothing else has been touched. */
  ce = cudaGetDeviceCount(&count);
  if(ce != cudaSuccess || count == 0) {
    cudaGetLastError();
    return HR_ENOGPU;
  }
  if(device < 0 && cudaGetDevice(&device) != cudaSuccess)
    return HR_ECUDA;
  if(device >= count)
    return HR_EINVAL;
  if(cudaGetDeviceProperties(&prop, device) != cudaSuccess)
    return HR_ECUDA;
  if(prop.major != 9 || prop.minor != 0)
    return HR_EUNSUPPORTED;            /* the kernel is built for sm_90a */

  m = (hr_moe *)calloc(1, sizeof(*m));
  if(!m)
    return HR_ENOMEM;
  m->device = device;
  m->sms = prop.multiProcessorCount;
  m->shape = *shape;

  err = hr__moe_device_enter(device, &prev);
  if(err)
    goto out;
  entered = 1;
  err = hr__moe_err_from_cuda(hr__moe_prepare());
  if(!err)
    err = hr__moe_err_from_cuda(hr__moe_agnostic_prepare());
  if(!err)
    err = hr__moe_err_from_cuda(hr__moe_bwd_prepare());
  if(err)
    goto out;

  /* The words every launch starts from zero (the barrier's, the agnostic
   * schedule and its per-token-tile counters: at most pairs / 16 + E
   * tiles, 16 being the narrowest tile), then the pairs' buffers. */
  pairs = (size_t)shape->max_tokens * shape->topk;
  tiles = pairs / 16 + (size_t)shape->experts + 1;
  m->reset_bytes = align_up(sizeof(hr__moe_sync)) + align_up(sizeof(hr__moe_agn)) +
                   2 * align_up(tiles * 4);
  m->ws_bytes = m->reset_bytes + 2 * align_up(pairs * 4) + align_up(pairs * shape->inter * 2) +
                align_up(pairs * shape->hidden * 2);
  err = hr__moe_err_from_cuda(cudaMalloc(&m->ws, m->ws_bytes));
  if(err)
    goto out;
  off = 0;
  m->sync = (hr__moe_sync *)((char *)m->ws + off);
  off += align_up(sizeof(hr__moe_sync));
  m->agn = (hr__moe_agn *)((char *)m->ws + off);
  off += align_up(sizeof(hr__moe_agn));
  m->g1_done = (unsigned *)((char *)m->ws + off);
  off += align_up(tiles * 4);
  m->g2_done = (unsigned *)((char *)m->ws + off);
  off += align_up(tiles * 4);
  m->sorted_tok = (int32_t *)((char *)m->ws + off);
  off += align_up(pairs * 4);
  m->pos_of = (int32_t *)((char *)m->ws + off);
  off += align_up(pairs * 4);
  m->h = (uint16_t *)((char *)m->ws + off);
  off += align_up(pairs * shape->inter * 2);
  m->ypair = (uint16_t *)((char *)m->ws + off);
  err = hr__moe_err_from_cuda(cudaMemset(m->ws, 0, m->reset_bytes));
  if(err)
    goto out;
  m->encode = tmap_encoder();
  if(!m->encode) {
    err = HR_EUNSUPPORTED;             /* a driver without TMA */
    goto out;
  }
  err = tmap_workspace(m);
  if(err)
    goto out;

  err = hr__moe_err_from_cuda(cudaHostAlloc((void **)&m->host, sizeof(*m->host),
                                    cudaHostAllocMapped));
  if(err)
    goto out;
  memset((void *)m->host, 0, sizeof(*m->host));
  err = hr__moe_err_from_cuda(cudaHostGetDevicePointer((void **)&m->host_dev,
                                               (void *)m->host, 0));
  if(err)
    goto out;
  err = hr__moe_err_from_cuda(cudaEventCreateWithFlags(&m->done,
                                               cudaEventDisableTiming));
  if(err)
    goto out;
  m->failure.reported = 1;

out:
  if(err) {
    cudaGetLastError();
    if(m) {
      if(m->done)
        cudaEventDestroy(m->done);
      if(m->host)
        cudaFreeHost((void *)m->host);
      if(m->ws)
        cudaFree(m->ws);
      free(m);
    }
    m = NULL;
  }
  if(entered)
    hr__moe_device_leave(device, prev);
  *out = m;
  return err;
}

void hr_moe_destroy(hr_moe *m)
{
  int prev;
  if(!m)
    return;
  if(hr__moe_device_enter(m->device, &prev) == HR_OK) {
    cudaEventSynchronize(m->done);     /* the last launch may use the words */
    cudaEventDestroy(m->done);
    cudaFreeHost((void *)m->host);
    cudaFree(m->ws);
    if(m->bws)
      cudaFree(m->bws);
    cudaGetLastError();
    hr__moe_device_leave(m->device, prev);
  }
  free(m);
}

int hr_moe_sms(const hr_moe *m)
{
  return m ? m->sms : HR_EINVAL;
}

uint64_t hr_moe_workspace_bytes(const hr_moe *m)
{
  return m ? (uint64_t)(m->ws_bytes + m->bws_bytes) : 0;
}

/* ---- argument checks --------------------------------------------------- */

/* Device or managed memory of this context's device; a host pointer would
 * fault the kernel and take the CUDA context down with it. */
static int pointer_ok(const hr_moe *m, const void *p, unsigned align)
{
  struct cudaPointerAttributes a;
  if(!p || ((uintptr_t)p % align) != 0)
    return 0;
  if(cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  if(a.type == cudaMemoryTypeManaged)
    return 1;
  return a.type == cudaMemoryTypeDevice && a.device == m->device;
}

/* The forward's inputs, shapes and pointers (y too where `with_y`: the
 * backward does not read it). */
static int inputs_ok(const hr_moe *m, const hr_moe_args *a, int with_y)
{
  const hr_moe_shape *s = &m->shape;
  if(a->tokens < 1 || a->tokens > s->max_tokens || a->experts != s->experts ||
     a->hidden != s->hidden || a->inter != s->inter || a->topk != s->topk ||
     a->timeout_ms < 0)
    return 0;
  return pointer_ok(m, a->x, 16) && pointer_ok(m, a->w1, 16) &&
         pointer_ok(m, a->w2, 16) && (!with_y || pointer_ok(m, a->y, 16)) &&
         pointer_ok(m, a->topk_ids, 4) && pointer_ok(m, a->topk_weights, 4) &&
         (!a->gate_up || pointer_ok(m, a->gate_up, 16));
}

static int args_ok(const hr_moe *m, const hr_moe_args *a)
{
  return a && inputs_ok(m, a, 1);
}

/* The backward's: the forward's inputs but y, and its outputs. */
static int grad_args_ok(const hr_moe *m, const hr_moe_grad_args *g)
{
  if(!g || (g->dw_dtype != HR_MOE_DW_FP32 && g->dw_dtype != HR_MOE_DW_BF16))
    return 0;
  return inputs_ok(m, &g->fwd, 0) && pointer_ok(m, g->dy, 16) && pointer_ok(m, g->dx, 16) &&
         pointer_ok(m, g->dw1, 16) && pointer_ok(m, g->dw2, 16) &&
         pointer_ok(m, g->dtopk_weights, 4);
}

/* ---- launch ------------------------------------------------------------ */

static int failure_take(hr_moe *m);
static int bwd_alloc(hr_moe *m);

/* mode HR_MODE_HEADROOM or HR_MODE_COOPERATIVE: the barrier kernel;
 * HR_MODE_PARTITION: the same ordinary launch (the green context the
 * stream belongs to keeps NCCL off its SMs; the grid is that partition's);
 * HR_MODE_AGNOSTIC: the residency-agnostic kernel, an ordinary launch of
 * `grid` CTAs without clusters (it needs neither: any grid is correct).
 * `h`: the benchmark hook (moe_bench.h), NULL for every production
 * launch. */
static int launch(hr_moe *m, const hr_lease *lease, int grid, int mode,
                  int cluster, const hr_moe_args *a, const hr_moe_grad_args *g,
                  cudaStream_t stream, const hr__moe_hook *h)
{
  hr__moe_params p;
  hr__moe_bwd_params bp;
  cudaStreamCaptureStatus cap;
  cudaError_t ce;
  int prev, err, timeout_ms, capturing;
  const int agnostic = mode == HR_MODE_AGNOSTIC;

  if(!m || (g ? !grad_args_ok(m, g) : !args_ok(m, a)))
    return HR_EINVAL;
  if(g)
    a = &g->fwd;
  if(mode == HR_MODE_PARTITION)
    mode = HR_MODE_HEADROOM;
  if((mode != HR_MODE_HEADROOM && mode != HR_MODE_COOPERATIVE && !agnostic) ||
     (cluster != 1 && cluster != 2) || grid < 1 || (!agnostic && grid % cluster != 0))
    return HR_EINVAL;
  /* An ordinary launch larger than the device could never pass its first
   * barrier. A cooperative one is left to CUDA, which refuses it. The
   * agnostic kernel would be correct with more, but its CTAs beyond one
   * per SM only queue to find no work. */
  if(mode != HR_MODE_COOPERATIVE && grid > m->sms)
    return HR_EINVAL;

  err = hr__moe_device_enter(m->device, &prev);
  if(err)
    return err;
  if(g) {
    err = bwd_alloc(m);
    if(err)
      goto out;
  }

  /* The last launch was never waited for, and has already failed: take
   * the record now so the barrier words get cleared below. */
  if(m->in_flight && m->host->seq == m->seq) {
    failure_take(m);
    m->in_flight = 0;
  }
  /* Into a CUDA graph: the event is waited for and recorded as the
   * graph's own external nodes, so each replay is ordered after what ran
   * before it and a wait after a replay waits for the replay. */
  if(cudaStreamIsCapturing(stream, &cap) != cudaSuccess) {
    cudaGetLastError();
    cap = cudaStreamCaptureStatusNone;
  }
  capturing = cap == cudaStreamCaptureStatusActive;
  /* One launch at a time per context: the next is ordered after the last
   * (on its stream already; on another stream through the event). */
  if((m->in_flight || m->needs_reset) && stream != m->stream) {
    err = hr__moe_err_from_cuda(cudaStreamWaitEvent(stream, m->done,
                                            capturing ? cudaEventWaitExternal : 0));
    if(err)
      goto out;
  }
  /* After a failure the barrier words are in an unknown state; clear them
   * once the failed launch has drained (stream order). */
  if(m->needs_reset) {
    err = hr__moe_err_from_cuda(cudaMemsetAsync(m->ws, 0, m->reset_bytes, stream));
    if(err)
      goto out;
    m->needs_reset = 0;
  }

  timeout_ms = a->timeout_ms ? a->timeout_ms : HR_MOE_DEFAULT_TIMEOUT_MS;
  memset(&p, 0, sizeof(p));
  p.x = (const uint16_t *)a->x;
  p.ids = a->topk_ids;
  p.wts = a->topk_weights;
  p.w1 = (const uint16_t *)a->w1;
  p.w2 = (const uint16_t *)a->w2;
  p.y = (uint16_t *)a->y;
  p.T = a->tokens;
  p.E = a->experts;
  p.H = a->hidden;
  p.I = a->inter;
  p.k = a->topk;
  p.sorted_tok = m->sorted_tok;
  p.pos_of = m->pos_of;
  p.h = m->h;
  p.gu = a->gate_up;
  p.ypair = m->ypair;
  err = tmap_weights(m, a->w1, a->w2);
  if(err)
    goto out;
  p.tm_w1 = m->tm_w1;
  p.tm_w2 = m->tm_w2;
  p.tm_xs = m->tm_xs;
  p.tm_h = m->tm_h;
  p.agn = m->agn;
  p.g1_done = m->g1_done;
  p.g2_done = m->g2_done;
  p.sync = m->sync;
  p.host = m->host_dev;
  p.seq = m->seq + 1;
  p.timeout_ns = (unsigned long long)timeout_ms * 1000000ULL;
  if(h) {
    p.skip = h->skip;
    p.repeat = h->repeat;
    p.trace = h->trace;
  }
  /* long GEMM units: the barrier kernel claims them (moe_kernel.h) */
  if(p.H >= HR__MOE_CLAIM_MIN_H || (h && h->claim))
    p.flags |= HR__MOE_FLAG_CLAIM;

  /* A cooperative grid larger than the device: CUDA would refuse it too,
   * but with clusters its answer varies; say it the same way always. */
  if(g) {
    memset(&bp, 0, sizeof(bp));
    bp.f = p;
    bp.dy = (const uint16_t *)g->dy;
    bp.dx = (uint16_t *)g->dx;
    bp.dw1 = g->dw1;
    bp.dw2 = g->dw2;
    bp.dtw = g->dtopk_weights;
    bp.dw_bf16 = g->dw_dtype == HR_MOE_DW_BF16;
    bp.sorted_pair = m->sorted_pair;
    bp.dh = m->dh;
    bp.wa = m->h;
    bp.dxrow = m->ypair;
    bp.dwp = m->dwp;
    err = hr__moe_encode_dw_maps(&m->shape, &bp);
    if(err)
      goto out;
  }
  if(mode == HR_MODE_COOPERATIVE && grid > m->sms)
    ce = cudaErrorCooperativeLaunchTooLarge;
  else if(g)
    ce = hr__moe_bwd_launch(&bp, grid, agnostic, mode == HR_MODE_COOPERATIVE, stream);
  else if(agnostic)
    ce = hr__moe_agnostic_launch(&p, grid, stream);
  else
    ce = hr__moe_launch(&p, grid, mode == HR_MODE_COOPERATIVE, cluster, stream);
  if(ce != cudaSuccess) {
    cudaGetLastError();              /* not sticky: keep it from the app */
    err = hr__moe_err_from_cuda(ce);
    if(err == HR_ENOGPU || err == HR_ENOMEM)
      err = HR_ECUDA;
    if(lease) {
      hr_incident_detail d;
      char msg[160];
      memset(&d, -1, sizeof(d));
      d.grid = grid;
      d.timeout_ms = timeout_ms;
      d.cuda_error = (int)ce;
      snprintf(msg, sizeof(msg), "mega-MoE %s launch of %d CTAs (%s, cluster %d) failed: %s",
               g ? "backward" : "forward", grid,
               agnostic ? "agnostic" : hr_mode_name((hr_mode)mode),
               agnostic ? 1 : cluster, cudaGetErrorString(ce));
      hr_report(hr_lease_client(lease), lease, HR_INCIDENT_LAUNCH_FAILURE,
                &d, msg);
    }
    goto out;
  }
  m->seq = p.seq;
  m->stream = stream;
  m->in_flight = 1;
  m->lease = lease;
  m->agnostic = agnostic;
  m->grid = grid;
  m->timeout_ms = timeout_ms;
  err = hr__moe_err_from_cuda(capturing ? cudaEventRecordWithFlags(m->done, stream, cudaEventRecordExternal)
                               : cudaEventRecord(m->done, stream));
  if(err == HR_ENOGPU || err == HR_ENOMEM)
    err = HR_ECUDA;

out:
  hr__moe_device_leave(m->device, prev);
  return err;
}

int hr_moe_forward_grid(hr_moe *m, int grid, hr_mode mode, int cluster,
                        const hr_moe_args *args, void *stream)
{
  return launch(m, NULL, grid, (int)mode, cluster, args, NULL, (cudaStream_t)stream, NULL);
}

int hr_moe_forward_agnostic_grid(hr_moe *m, int grid, const hr_moe_args *args,
                                 void *stream)
{
  return launch(m, NULL, grid, HR_MODE_AGNOSTIC, 1, args, NULL, (cudaStream_t)stream, NULL);
}

int hr__moe_forward_hook(hr_moe *m, int grid, const hr__moe_hook *h,
                         const hr_moe_args *args, void *stream)
{
  const unsigned phases = HR__MOE_PHASE_ROUTE | HR__MOE_PHASE_GEMM1 | HR__MOE_PHASE_GEMM2 |
                         HR__MOE_PHASE_COMBINE;
  const unsigned faults = HR__MOE_FAULT_TMA_REFILL | HR__MOE_FAULT_TMA_REFILL_LATE;

  if(!h || (h->skip & ~(phases | faults)) || (h->repeat & ~phases))
    return HR_EINVAL;
  return launch(m, NULL, grid, h->agnostic ? HR_MODE_AGNOSTIC : HR_MODE_HEADROOM,
                h->agnostic ? 1 : 2, args, NULL, (cudaStream_t)stream, h);
}

int hr_moe_forward(hr_moe *m, const hr_lease *lease, const hr_moe_args *args,
                   void *stream)
{
  hr_mode mode;
  int grid, cluster, err;

  if(!m || !lease)
    return HR_EINVAL;
  /* The hot path: one lock-free read, grid and cluster from one budget. */
  err = hr_lease_launch_config(lease, &grid, &cluster, &mode);
  if(err)
    return err;
  /* The kernel's clusters are 1 or 2 CTAs; a grid budgeted for larger
   * clusters is a multiple of 2 and safe with pairs. A lease in the
   * agnostic mode runs the residency-agnostic kernel (no clusters), which
   * is correct with any grid, headroom 0 included. */
  return launch(m, lease, grid, (int)mode, cluster > 1 ? 2 : 1, args, NULL,
                (cudaStream_t)stream, NULL);
}

/* ---- the backward ------------------------------------------------------ */

/* The backward's workspace, for max_tokens * k pairs: the place -> pair
 * table, dh (dg | du, bf16) and the d(w) partials (fp32, I / 64 a pair);
 * w a and the dx rows use the forward's h and ypair. */
static int bwd_alloc(hr_moe *m)
{
  const size_t pairs = (size_t)m->shape.max_tokens * m->shape.topk;
  const size_t I = (size_t)m->shape.inter;
  size_t bytes, off = 0;
  void *p = NULL;
  int err;

  if(m->bws)
    return HR_OK;
  bytes = align_up(pairs * 4) + align_up(pairs * 2 * I * 2) + align_up(pairs * (I / 64) * 4);
  err = hr__moe_err_from_cuda(cudaMalloc(&p, bytes));
  if(err) {
    cudaGetLastError();
    return err == HR_ENOMEM ? HR_ENOMEM : HR_ECUDA;
  }
  m->bws = p;
  m->bws_bytes = bytes;
  m->sorted_pair = (int32_t *)((char *)p + off);
  off += align_up(pairs * 4);
  m->dh = (uint16_t *)((char *)p + off);
  off += align_up(pairs * 2 * I * 2);
  m->dwp = (float *)((char *)p + off);
  return HR_OK;
}

int hr_moe_backward_prepare(hr_moe *m)
{
  int prev, err;
  if(!m)
    return HR_EINVAL;
  err = hr__moe_device_enter(m->device, &prev);
  if(err)
    return err;
  err = bwd_alloc(m);
  hr__moe_device_leave(m->device, prev);
  return err;
}

int hr_moe_backward_grid(hr_moe *m, int grid, hr_mode mode, const hr_moe_grad_args *args,
                         void *stream)
{
  return launch(m, NULL, grid, (int)mode, 1, NULL, args, (cudaStream_t)stream, NULL);
}

int hr__moe_backward_hook(hr_moe *m, int grid, const hr__moe_hook *h,
                          const hr_moe_grad_args *args, void *stream)
{
  const unsigned phases = HR__MOE_PHASE_GEMM1 | HR__MOE_PHASE_GEMM2 | HR__MOE_PHASE_DW |
                          HR__MOE_PHASE_COMBINE;
  if(!h || (h->skip & ~phases) || h->repeat)
    return HR_EINVAL;
  return launch(m, NULL, grid, h->agnostic ? HR_MODE_AGNOSTIC : HR_MODE_HEADROOM, 1, NULL, args,
                (cudaStream_t)stream, h);
}

int hr_moe_backward(hr_moe *m, const hr_lease *lease, const hr_moe_grad_args *args,
                    void *stream)
{
  hr_mode mode;
  int grid, cluster, err;

  if(!m || !lease)
    return HR_EINVAL;
  err = hr_lease_launch_config(lease, &grid, &cluster, &mode);
  if(err)
    return err;
  /* No clusters: the grid of any cluster size is a grid of single CTAs. */
  return launch(m, lease, grid, (int)mode, 1, NULL, args, (cudaStream_t)stream, NULL);
}

/* ---- waiting ----------------------------------------------------------- */

/* The error word says launch m->seq failed: keep the record, report a
 * timeout under a lease, and plan the barrier reset. */
static int failure_take(hr_moe *m)
{
  volatile hr__moe_host_words *w = m->host;
  hr_moe_failure *f = &m->failure;
  int code = w->code;

  memset(f, 0, sizeof(*f));
  /* An abort, or a launch refused because an earlier failure was never
   * waited for: HR_EABORTED; a barrier timeout: HR_EBARRIER_TIMEOUT. */
  f->code = code == HR__MOE_FAIL_TIMEOUT ? HR_EBARRIER_TIMEOUT : HR_EABORTED;
  f->detail.barrier = w->barrier;
  f->detail.arrived = w->arrived;
  f->detail.expected = w->expected;
  f->detail.sm = w->sm;
  f->detail.grid = m->grid;
  f->detail.timeout_ms = m->timeout_ms;
  f->detail.cuda_error = -1;
  f->cta = w->cta;
  f->reported = 1;
  m->has_failure = 1;
  m->needs_reset = 1;
  /* A wait of the agnostic kernel never depends on residency, so more
   * headroom cannot help it: its timeout is a bug (or a dead context), not
   * an incident for the daemon. */
  if(f->code == HR_EBARRIER_TIMEOUT && m->lease && !m->agnostic) {
    char msg[200];
    snprintf(msg, sizeof(msg),
             "mega-MoE barrier %d timed out after %d ms: %d of %d CTAs "
             "arrived (noticed on SM %d, grid %d)",
             f->detail.barrier, f->detail.timeout_ms, f->detail.arrived,
             f->detail.expected, f->detail.sm, f->detail.grid);
    f->reported = hr_report(hr_lease_client(m->lease), m->lease,
                            HR_INCIDENT_BARRIER_TIMEOUT, &f->detail, msg);
  }
  return f->code;
}

/* Wait for the last launch until it ends or fails, or `timeout_ns` (< 0:
 * no bound) has passed. On HR_ETIMEDOUT the launch stays in flight and the
 * error word unread, so a later wait (or an abort and a wait) still gets
 * its code and reports its incident, once. */
int hr__moe_wait_launch(cudaEvent_t done, const volatile uint32_t *seq_word, uint32_t seq,
                        long long timeout_ns)
{
  const long long start = hr__clock_ns();
  long long waited;

  for(;;) {
    cudaError_t q = cudaEventQuery(done);
    /* Read the word after the query: once the launch is complete, what
     * the word says now is final. */
    if(*seq_word == seq)
      return 1;
    if(q == cudaSuccess)
      return 0;
    if(q != cudaErrorNotReady) {
      cudaGetLastError();
      return HR_ECUDA;
    }
    /* Checked after a poll, so a bound of 0 still looks once. */
    waited = hr__clock_ns() - start;
    if(timeout_ns >= 0 && waited >= timeout_ns)
      return HR_ETIMEDOUT;
    if(waited < SYNC_SPIN_NS) {
      sched_yield();
    } else {
      struct timespec ts = { 0, SYNC_SLEEP_NS };
      while(nanosleep(&ts, &ts) == -1 && errno == EINTR)
        ;
    }
  }
}

static int sync_wait(hr_moe *m, long long timeout_ns)
{
  int prev, err;

  if(!m->in_flight)
    return HR_OK;
  err = hr__moe_device_enter(m->device, &prev);
  if(err)
    return err;
  err = hr__moe_wait_launch(m->done, &m->host->seq, m->seq, timeout_ns);
  if(err != HR_ETIMEDOUT) {            /* still in flight past the bound */
    if(err == 1)
      err = failure_take(m);
    m->in_flight = 0;
  }
  hr__moe_device_leave(m->device, prev);
  return err;
}

int hr_moe_sync(hr_moe *m)
{
  if(!m)
    return HR_EINVAL;
  return sync_wait(m, -1);
}

int hr_moe_sync_timeout(hr_moe *m, int timeout_ms)
{
  if(!m || timeout_ms < 0)
    return HR_EINVAL;
  return sync_wait(m, (long long)timeout_ms * 1000000LL);
}

int hr_moe_outputs_ready(const hr_moe *m)
{
  cudaError_t q;
  int prev;

  if(!m)
    return HR_EINVAL;
  if(m->seq == 0 || m->host->seq == m->seq)
    return 0;                          /* nothing launched, or it failed */
  if(m->host->done_seq == m->seq)
    return 1;
  if(hr__moe_device_enter(m->device, &prev) != HR_OK)
    return HR_ECUDA;
  q = cudaEventQuery(m->done);
  hr__moe_device_leave(m->device, prev);
  if(q == cudaSuccess)
    return m->host->seq == m->seq ? 0 : 1;
  if(q == cudaErrorNotReady)
    return 0;
  cudaGetLastError();
  return HR_ECUDA;
}

int hr_moe_last_failure(const hr_moe *m, hr_moe_failure *out)
{
  if(!m || !out)
    return HR_EINVAL;
  if(!m->has_failure)
    return HR_ENOTFOUND;
  *out = m->failure;
  return HR_OK;
}

int hr_moe_abort(hr_moe *m)
{
  if(!m)
    return HR_EINVAL;
  m->host->abort_seq = m->seq;
  __sync_synchronize();
  return HR_OK;
}
