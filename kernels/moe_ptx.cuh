/*
 * moe_ptx.cuh: the few PTX instructions the MoE kernel uses, one small
 * wrapper each, so the kernel itself reads as plain C.
 */
#ifndef HR_MOE_PTX_CUH
#define HR_MOE_PTX_CUH

#include <stdint.h>

/* Shared-memory address of a generic pointer, for cp.async and ldmatrix. */
static __device__ __forceinline__ uint32_t smem_addr(const void *p)
{
  return (uint32_t)__cvta_generic_to_shared(p);
}

/* 16 bytes global -> shared without passing through registers; .cg keeps
 * the line out of L1 (every byte is used once per CTA). */
static __device__ __forceinline__ void cp_async16(uint32_t dst, const void *src)
{
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n"
               :: "r"(dst), "l"(src) : "memory");
}

/* An L2 policy with no preference: the TMA loads' cache hint (tma_refill,
 * moe_gemm_tma.cuh). */
static __device__ __forceinline__ uint64_t l2_policy_evict_normal(void)
{
  uint64_t p;
  asm volatile("createpolicy.fractional.L2::evict_normal.b64 %0, 1.0;\n" : "=l"(p));
  return p;
}

static __device__ __forceinline__ void cp_async_commit(void)
{
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}

/* Wait until at most N committed groups are still in flight. */
template <int N>
static __device__ __forceinline__ void cp_async_wait(void)
{
  asm volatile("cp.async.wait_group %0;\n" :: "n"(N) : "memory");
}

/* Four 8x8 b16 matrices from shared memory; lanes 8i..8i+7 give the row
 * addresses of matrix i, and each thread gets one 32-bit pair of each. */
static __device__ __forceinline__ void ldmatrix_x4(uint32_t r[4], uint32_t addr)
{
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr) : "memory");
}

/* cp_async16, or 16 zero bytes where !valid (src is then not read, but
 * must still be a global address). */
static __device__ __forceinline__ void cp_async16_zfill(uint32_t dst, const void *src, int valid)
{
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n"
               :: "r"(dst), "l"(src), "r"(valid ? 16 : 0) : "memory");
}

/* c += a (16x16, row-major) * b (16x8, column-major): bf16 in, fp32 out. */
static __device__ __forceinline__ void mma_bf16_16816(float c[4], const uint32_t a[4],
                                               uint32_t b0, uint32_t b1)
{
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
               "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* Loads of the barrier words. acquire: what the releasing CTA wrote before
 * its release is visible after. relaxed .gpu: a fresh value from L2, no
 * ordering. relaxed .sys: the host-mapped abort word, fresh from the host. */
static __device__ __forceinline__ unsigned ld_acquire_gpu(const unsigned *p)
{
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
  return v;
}

static __device__ __forceinline__ unsigned ld_relaxed_gpu(const unsigned *p)
{
  unsigned v;
  asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
  return v;
}

static __device__ __forceinline__ unsigned ld_relaxed_sys(const volatile unsigned *p)
{
  unsigned v;
  asm volatile("ld.relaxed.sys.global.u32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
  return v;
}

/* Counters between CTAs (the agnostic kernel's completion counts). After
 * a __syncthreads, one thread's release add publishes what the whole CTA
 * wrote before it; one thread's acquire load (or acq_rel add) that sees
 * the count, followed by a __syncthreads, makes it visible to the CTA. */
static __device__ __forceinline__ void red_add_release_gpu(unsigned *p, unsigned v)
{
  asm volatile("red.release.gpu.global.add.u32 [%0], %1;\n" :: "l"(p), "r"(v) : "memory");
}

/* A fence then relaxed adds: one fence publishes for several counters. */
static __device__ __forceinline__ void fence_acq_rel_gpu(void)
{
  asm volatile("fence.acq_rel.gpu;\n" ::: "memory");
}

static __device__ __forceinline__ void red_add_relaxed_gpu(unsigned *p, unsigned v)
{
  asm volatile("red.relaxed.gpu.global.add.u32 [%0], %1;\n" :: "l"(p), "r"(v) : "memory");
}

static __device__ __forceinline__ unsigned atom_add_acq_rel_gpu(unsigned *p, unsigned v)
{
  unsigned old;
  asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], %2;\n"
               : "=r"(old) : "l"(p), "r"(v) : "memory");
  return old;
}

/* Nanoseconds, the same clock on every SM (it ticks in steps of about a
 * microsecond, plenty for millisecond timeouts). */
static __device__ __forceinline__ unsigned long long global_timer_ns(void)
{
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;\n" : "=l"(t));
  return t;
}

static __device__ __forceinline__ int sm_id(void)
{
  unsigned r;
  asm volatile("mov.u32 %0, %%smid;\n" : "=r"(r));
  return (int)r;
}

/* bf16 <-> fp32. bf16 is the upper half of the float; conversion rounds to
 * nearest even (cvt.rn.bf16x2.f32), `lo` in the low half. */
static __device__ __forceinline__ float bf16_lo(uint32_t v) { return __uint_as_float(v << 16); }
static __device__ __forceinline__ float bf16_hi(uint32_t v) { return __uint_as_float(v & 0xffff0000u); }

static __device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi)
{
  uint32_t r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}

static __device__ __forceinline__ uint16_t to_bf16(float f)
{
  return (uint16_t)(pack_bf16x2(f, 0.0f) & 0xffffu);
}

/* ---- wgmma (sm_90a): the warpgroup MMAs of the big tile ------------------ */

/* cp.async wrote the tiles through the generic proxy; wgmma reads shared
 * memory through the async proxy. Each thread fences its own copies after
 * waiting for them, before the __syncthreads that hands the stage over. */
static __device__ __forceinline__ void fence_proxy_async_shared(void)
{
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

/* Before a warpgroup's first wgmma of a step: orders the accumulator
 * registers' earlier reads and writes before the MMAs. */
static __device__ __forceinline__ void wgmma_fence(void)
{
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}

static __device__ __forceinline__ void wgmma_commit(void)
{
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}

/* Wait until at most N committed wgmma groups of this warpgroup are in
 * flight. */
template <int N>
static __device__ __forceinline__ void wgmma_wait(void)
{
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" :: "n"(N) : "memory");
}

/* The accumulators are written by the asynchronous MMAs behind the
 * compiler's back: after wgmma_wait, this keeps each read of them from
 * being moved above the wait. */
template <int NT>
static __device__ __forceinline__ void wgmma_fence_acc(float (&d)[NT][4])
{
#pragma unroll
  for(int j = 0; j < NT; j++)
#pragma unroll
    for(int i = 0; i < 4; i++)
      asm volatile("" : "+f"(d[j][i]) :: "memory");
}

/* Shared-memory matrix descriptor of a K-major tile stored as the loader
 * stores it: rows of 128 bytes (64 bf16 of K), the 16-byte chunks of row r
 * XOR-ed with r & 7, which is the 128-byte swizzle; 8-row groups 1024
 * bytes apart (the stride byte offset); the leading byte offset is unused
 * in this layout. The tile must start on 1024 bytes, and the k-th 16-deep
 * slice starts k * 32 bytes further (the swizzle is applied to the
 * address bits, so the slice's chunks are found where the loader put
 * them). */
static __device__ __forceinline__ uint64_t wgmma_desc_sw128(uint32_t saddr)
{
  return (uint64_t)((saddr & 0x3ffffu) >> 4) | ((uint64_t)1 << 16) |
         ((uint64_t)(1024 >> 4) << 32) | ((uint64_t)1 << 62);
}

/* A descriptor `bytes` further on than `desc` (the k-th slice of a tile,
 * its next 64-row block): the address field is the low 14 bits, addr / 16
 * of an address below 256 KB, so adding to the low word cannot carry out
 * of it; one add per MMA instead of the masks and shifts per address. */
static __device__ __forceinline__ uint64_t wgmma_desc_add(uint64_t desc, uint32_t bytes)
{
  const uint32_t lo = (uint32_t)desc + (bytes >> 4);
  return ((desc >> 32) << 32) | lo;
}

/* The accumulators as in-out asm operands, 4 per 8-column block j: the
 * operand lists of the shapes below differ only in their length. */
#define HR__WGMMA_ACC1(j)                                                    \
  "+f"(d[j][0]), "+f"(d[j][1]), "+f"(d[j][2]), "+f"(d[j][3])
#define HR__WGMMA_ACC2(j) HR__WGMMA_ACC1(j), HR__WGMMA_ACC1(j + 1)
#define HR__WGMMA_ACC4(j) HR__WGMMA_ACC2(j), HR__WGMMA_ACC2(j + 2)
#define HR__WGMMA_ACC8(j) HR__WGMMA_ACC4(j), HR__WGMMA_ACC4(j + 4)
#define HR__WGMMA_ACC10(j) HR__WGMMA_ACC8(j), HR__WGMMA_ACC2(j + 8)
#define HR__WGMMA_ACC12(j) HR__WGMMA_ACC8(j), HR__WGMMA_ACC4(j + 8)
#define HR__WGMMA_ACC16(j) HR__WGMMA_ACC8(j), HR__WGMMA_ACC8(j + 8)
#define HR__WGMMA_ACC32(j) HR__WGMMA_ACC16(j), HR__WGMMA_ACC16(j + 16)
/* m64n256's 128 accumulator operands, as the instruction's text names them */
#define HR__WGMMA_D128                                                        \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "     \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, " \
  "%31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, " \
  "%46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, " \
  "%61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, " \
  "%76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, " \
  "%91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, " \
  "%105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, "   \
  "%117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"

/* Shared-memory matrix descriptor of an MN-major tile in the 128-byte
 * swizzle: per K row 64 bf16 of M (or N) in 128 bytes, the 16-byte chunks
 * of K row k XOR-ed with k & 7; 8 K rows (1024 bytes) a swizzle atom, the
 * next 8 K rows `sbo` bytes on, the next 64 columns `lbo` bytes on. The
 * tile starts on 1024 bytes; a 16-deep K slice is 2 * sbo further. Used
 * with the transpose bits of wgmma (wgmma_m64k16_t). */
static __device__ __forceinline__ uint64_t wgmma_desc_mn_sw128(uint32_t saddr, uint32_t lbo,
                                                               uint32_t sbo)
{
  return (uint64_t)((saddr & 0x3ffffu) >> 4) | ((uint64_t)((lbo >> 4) & 0x3fffu) << 16) |
         ((uint64_t)((sbo >> 4) & 0x3fffu) << 32) | ((uint64_t)1 << 62);
}

/* d[64 x N] (+)= A[64 x 16] * B[N x 16]^T, both K-major in shared memory
 * (descriptors da, db), bf16 in, fp32 accumulators; scale_d 0 starts the
 * sum from zero. Thread t of the warpgroup holds, for each 8-column block
 * j, d[j][0..1] = row 16 * (t / 32) + (t % 32) / 4, columns 8j + 2 (t % 4)
 * + 0..1, and d[j][2..3] the same 8 rows further: the mma.sync m16n8
 * layout, warp w owning rows 16w..16w+15. N is 16, 32, 64, 80, 96, 128 or
 * 256. */
template <int N, int NT>
static __device__ __forceinline__ void wgmma_m64k16(float (&d)[NT][4], uint64_t da,
                                                    uint64_t db, int scale_d)
{
  static_assert(N % 16 == 0 && N / 8 <= NT, "accumulators");
  if constexpr(N == 256) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {"
                 HR__WGMMA_D128 "}, %128, %129, p, 1, 1, 0, 0;\n}\n"
                 : HR__WGMMA_ACC32(0)
                 : "l"(da), "l"(db), "r"(scale_d));
  } else if constexpr(N == 128) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
                 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
                 "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
                 "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
                 "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
                 "%64, %65, p, 1, 1, 0, 0;\n}\n"
                 : HR__WGMMA_ACC16(0)
                 : "l"(da), "l"(db), "r"(scale_d));
  } else if constexpr(N == 96) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %50, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n96k16.f32.bf16.bf16 {"
                 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
                 "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
                 "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47}, "
                 "%48, %49, p, 1, 1, 0, 0;\n}\n"
                 : HR__WGMMA_ACC12(0)
                 : "l"(da), "l"(db), "r"(scale_d));
  } else if constexpr(N == 80) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %42, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n80k16.f32.bf16.bf16 {"
                 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
                 "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
                 "%32, %33, %34, %35, %36, %37, %38, %39}, "
                 "%40, %41, p, 1, 1, 0, 0;\n}\n"
                 : HR__WGMMA_ACC10(0)
                 : "l"(da), "l"(db), "r"(scale_d));
  } else if constexpr(N == 64) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {"
                 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
                 "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
                 "%32, %33, p, 1, 1, 0, 0;\n}\n"
                 : HR__WGMMA_ACC8(0)
                 : "l"(da), "l"(db), "r"(scale_d));
  } else if constexpr(N == 32) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 {"
                 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, "
                 "%16, %17, p, 1, 1, 0, 0;\n}\n"
                 : HR__WGMMA_ACC4(0)
                 : "l"(da), "l"(db), "r"(scale_d));
  } else if constexpr(N == 16) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %10, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 {"
                 "%0, %1, %2, %3, %4, %5, %6, %7}, "
                 "%8, %9, p, 1, 1, 0, 0;\n}\n"
                 : HR__WGMMA_ACC2(0)
                 : "l"(da), "l"(db), "r"(scale_d));
  }
}

/* d[64 x N] += A[64 x 16] * B[16 x N] from shared memory (N 64, 128 or 256),
 * each operand K-major (wgmma_desc_sw128) or, where TA / TB is 1, MN-major
 * (wgmma_desc_mn_sw128; the transpose bit set), bf16 in, fp32
 * accumulators in wgmma_m64k16's layout. The backward's GEMMs, whose
 * operands run along their M or N (the weights along their other
 * dimension, everything along the pairs). With add 0 the product
 * replaces d instead (wgmma's scale-d): a tile's first MMA, so its
 * accumulators need no zeroing. */
template <int N, int TA, int TB>
static __device__ __forceinline__ void wgmma_m64k16_t(float (&d)[N / 8][4], uint64_t da,
                                                      uint64_t db, int add = 1)
{
  static_assert(N == 64 || N == 128 || N == 256, "the backward's widths");
  if constexpr(N == 256)
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %132, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {"
                 HR__WGMMA_D128 "}, %128, %129, p, 1, 1, %130, %131;\n}\n"
                 : HR__WGMMA_ACC32(0)
                 : "l"(da), "l"(db), "n"(TA), "n"(TB), "r"(add));
  else if constexpr(N == 128)
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %68, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
                 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
                 "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
                 "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
                 "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
                 "%64, %65, p, 1, 1, %66, %67;\n}\n"
                 : HR__WGMMA_ACC16(0)
                 : "l"(da), "l"(db), "n"(TA), "n"(TB), "r"(add));
  else
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %36, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {"
                 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
                 "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
                 "%32, %33, p, 1, 1, %34, %35;\n}\n"
                 : HR__WGMMA_ACC8(0)
                 : "l"(da), "l"(db), "n"(TA), "n"(TB), "r"(add));
}

#undef HR__WGMMA_D128
#undef HR__WGMMA_ACC32
#undef HR__WGMMA_ACC16
#undef HR__WGMMA_ACC12
#undef HR__WGMMA_ACC8
#undef HR__WGMMA_ACC4
#undef HR__WGMMA_ACC2
#undef HR__WGMMA_ACC1

/* ---- named barriers: the warp-specialized barrier kernel ---------------- */

/* Wait until n threads (whole warps) have reached barrier `id`. */
static __device__ __forceinline__ void bar_sync(int id, int n)
{
  asm volatile("bar.sync %0, %1;\n" :: "r"(id), "r"(n) : "memory");
}

/* The same where the threads of a warp may come to it apart (barrier.sync,
 * not the warp-aligned bar.sync). */
static __device__ __forceinline__ void barrier_sync(int id, int n)
{
  asm volatile("barrier.sync %0, %1;\n" :: "r"(id), "r"(n) : "memory");
}

/* Barrier `id` over n threads, nonzero when v was nonzero in any. */
static __device__ __forceinline__ int bar_sync_or(int id, int n, int v)
{
  int r;
  asm volatile("{\n.reg .pred p, q;\nsetp.ne.s32 p, %3, 0;\n"
               "bar.red.or.pred q, %1, %2, p;\nselp.s32 %0, 1, 0, q;\n}\n"
               : "=r"(r) : "r"(id), "r"(n), "r"(v) : "memory");
  return r;
}

/* Where the barrier kernel runs a producer warpgroup beside the 256 MMA
 * threads (HR__MOE_WS, moe_kernel.cu), the code every kernel shares
 * synchronizes those 256 on named barrier 1, never the whole CTA:
 * HR__SYNC and HR__SYNC_OR for __syncthreads and __syncthreads_or. With
 * 256 threads a CTA the two are the same barrier. */
#ifndef HR__MOE_WS
#define HR__MOE_WS 0
#endif
#if HR__MOE_WS
#define HR__SYNC() bar_sync(1, HR__MOE_THREADS)
#define HR__SYNC_OR(v) bar_sync_or(1, HR__MOE_THREADS, (v))
#else
#define HR__SYNC() __syncthreads()
#define HR__SYNC_OR(v) __syncthreads_or(v)
#endif

/* ---- mbarriers and TMA (sm_90a): the TMA pipeline of moe_gemm_tma.cuh ---- */

/* A shared-memory barrier that completes a phase when `count` arrivals
 * (and, with expect_tx, the bytes announced) have come. */
static __device__ __forceinline__ void mbar_init(uint64_t *bar, unsigned count)
{
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n"
               :: "r"(smem_addr(bar)), "r"(count) : "memory");
}

/* Before its memory is used for anything else. */
static __device__ __forceinline__ void mbar_inval(uint64_t *bar)
{
  asm volatile("mbarrier.inval.shared::cta.b64 [%0];\n" :: "r"(smem_addr(bar)) : "memory");
}

/* Makes mbar_init visible to the async proxy (the TMA unit). */
static __device__ __forceinline__ void fence_mbar_init(void)
{
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}

static __device__ __forceinline__ void mbar_arrive(uint64_t *bar)
{
  asm volatile("{\n.reg .b64 st;\nmbarrier.arrive.shared::cta.b64 st, [%0];\n}\n"
               :: "r"(smem_addr(bar)) : "memory");
}

/* One arrival that also announces `bytes` the TMA loads will deliver. */
static __device__ __forceinline__ void mbar_arrive_expect_tx(uint64_t *bar, unsigned bytes)
{
  asm volatile("{\n.reg .b64 st;\n"
               "mbarrier.arrive.expect_tx.shared::cta.b64 st, [%0], %1;\n}\n"
               :: "r"(smem_addr(bar)), "r"(bytes) : "memory");
}

/* One arrival on `bar` once every cp.async this thread issued before it
 * has landed. .noinc: the barrier's expected count includes this
 * arrival (the TMA pipeline's gathered token rows, moe_gemm_tma.cuh). */
static __device__ __forceinline__ void cp_async_mbar_arrive(uint64_t *bar)
{
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n"
               :: "r"(smem_addr(bar)) : "memory");
}

/* 1 when the phase of parity `parity` has completed (the hardware may
 * suspend the thread a while before answering 0). */
static __device__ __forceinline__ int mbar_try_wait(uint64_t *bar, unsigned parity)
{
  unsigned done;
  asm volatile("{\n.reg .pred p;\n"
               "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
               "selp.u32 %0, 1, 0, p;\n}\n"
               : "=r"(done) : "r"(smem_addr(bar)), "r"(parity) : "memory");
  return (int)done;
}

/* Generic-proxy writes to global memory (the x rows copied in expert
 * order, GEMM1's h) and TMA reads of them: the reading thread fences
 * after it acquires them, the writing one before it releases. */
static __device__ __forceinline__ void fence_proxy_async_global(void)
{
  asm volatile("fence.proxy.async.global;\n" ::: "memory");
}

/* TMA tile loads into shared memory, completing on `bar`. c0 is the
 * innermost coordinate (elements), as the tensor map's dimensions. */
static __device__ __forceinline__ void tma_load_2d(uint32_t dst, const void *map,
                                                   uint64_t *bar, int c0, int c1)
{
  asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
               " [%0], [%1, {%3, %4}], [%2];\n"
               :: "r"(dst), "l"(map), "r"(smem_addr(bar)), "r"(c0), "r"(c1) : "memory");
}

/* The weights' loads take an L2 policy (l2_policy_*). */
static __device__ __forceinline__ void tma_load_3d(uint32_t dst, const void *map,
                                                   uint64_t *bar, int c0, int c1, int c2,
                                                   uint64_t policy)
{
  asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
               ".L2::cache_hint [%0], [%1, {%3, %4, %5}], [%2], %6;\n"
               :: "r"(dst), "l"(map), "r"(smem_addr(bar)), "r"(c0), "r"(c1), "r"(c2),
                  "l"(policy)
               : "memory");
}

static __device__ __forceinline__ void tma_load_5d(uint32_t dst, const void *map,
                                                   uint64_t *bar, int c0, int c1, int c2,
                                                   int c3, int c4, uint64_t policy)
{
  asm volatile("cp.async.bulk.tensor.5d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
               ".L2::cache_hint [%0], [%1, {%3, %4, %5, %6, %7}], [%2], %8;\n"
               :: "r"(dst), "l"(map), "r"(smem_addr(bar)), "r"(c0), "r"(c1), "r"(c2),
                  "r"(c3), "r"(c4), "l"(policy)
               : "memory");
}

/* TMA tile stores from shared memory (the dW tiles, moe_bwd_tiles.cuh):
 * issued by one thread into its bulk group; the threads' writes to the
 * box must be fenced (fence_proxy_async_shared) and synchronized first.
 * bulk_wait_read<N> returns once at most N of the thread's committed
 * groups still read shared memory, so their boxes may be written again;
 * the global writes themselves complete on their own (a kernel's end
 * waits for them). */
static __device__ __forceinline__ void tma_store_2d(const void *map, uint32_t src, int c0, int c1)
{
  asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%2, %3}], [%1];\n"
               :: "l"(map), "r"(src), "r"(c0), "r"(c1) : "memory");
}

static __device__ __forceinline__ void bulk_commit(void)
{
  asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
}

template <int N>
static __device__ __forceinline__ void bulk_wait_read(void)
{
  asm volatile("cp.async.bulk.wait_group.read %0;\n" :: "n"(N) : "memory");
}

#endif /* HR_MOE_PTX_CUH */
