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

/* The same, telling L2 to drop these bytes first: for weight tiles read
 * once, so that what many CTAs share (the token rows) stays cached. */
static __device__ __forceinline__ void cp_async16_stream(uint32_t dst, const void *src,
                                                         uint64_t policy)
{
  asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2;\n"
               :: "r"(dst), "l"(src), "l"(policy) : "memory");
}

/* An L2 policy that marks every access it is given evict-first. */
static __device__ __forceinline__ uint64_t l2_policy_evict_first(void)
{
  uint64_t p;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(p));
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

#endif /* HR_MOE_PTX_CUH */
