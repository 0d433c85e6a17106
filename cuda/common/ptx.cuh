// ptx.cuh: the small primitive layer of the portable (sm80+) kernels: async copies, ldmatrix,
// mma.sync m16n8k16, packing, quad reductions. Every inline asm of the project lives here, so a
// reader checks the instruction forms in one place and the kernels read like the algorithm.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cstdint>

namespace flashsdpa {

// ---- element types ---------------------------------------------------------------------------
template <typename Elem> struct ElemTraits;
template <> struct ElemTraits<__half> {
  static constexpr const char* kMmaType = "f16";
  __device__ __forceinline__ static uint32_t pack(float lo, float hi) {
    __half2 h = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&h);
  }
  __device__ __forceinline__ static float2 unpack(uint32_t v) {
    return __half22float2(*reinterpret_cast<__half2*>(&v));
  }
};
template <> struct ElemTraits<__nv_bfloat16> {
  static constexpr const char* kMmaType = "bf16";
  __device__ __forceinline__ static uint32_t pack(float lo, float hi) {
    __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&h);
  }
  __device__ __forceinline__ static float2 unpack(uint32_t v) {
    return __bfloat1622float2(*reinterpret_cast<__nv_bfloat162*>(&v));
  }
};

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// ---- cp.async (global -> shared, 16 bytes, bypassing L1) ---------------------------------------
// src_bytes (0..16) are read, the rest of the 16 destination bytes zero-filled: a tile's chunk past
// the end of a sequence or past head_dim becomes exact zeros (0: nothing is read), a staged bias
// row's last chunk only its keys (bias_stage.cuh).
__device__ __forceinline__ void cp_async_16_bytes(uint32_t smem_addr, const void* gmem, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr), "l"(gmem), "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_16(uint32_t smem_addr, const void* gmem, bool valid) {
  cp_async_16_bytes(smem_addr, gmem, valid ? 16 : 0);
}
// 4-byte form (through L1: .cg takes 16 bytes only): 0, 2 or 4 bytes of a 4-byte-aligned source,
// zero-filling the rest (per-row float vectors with any row stride; a pair of 16-bit elements whose
// second lies past a row's end: the staged biases).
__device__ __forceinline__ void cp_async_4_bytes(uint32_t smem_addr, const void* gmem, int src_bytes) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(smem_addr), "l"(gmem), "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_4(uint32_t smem_addr, const void* gmem, bool valid) {
  cp_async_4_bytes(smem_addr, gmem, valid ? 4 : 0);
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int kPendingGroups>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPendingGroups));
}

// ---- plain shared-memory accesses by 32-bit shared address (epilogue staging, in-place edits) ----
__device__ __forceinline__ void st_shared_b32(uint32_t smem_addr, uint32_t v) {
  asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(smem_addr), "r"(v) : "memory");
}
__device__ __forceinline__ uint32_t ld_shared_b32(uint32_t smem_addr) {
  uint32_t v;
  asm volatile("ld.shared.b32 %0, [%1];\n" : "=r"(v) : "r"(smem_addr) : "memory");
  return v;
}
__device__ __forceinline__ uint16_t ld_shared_u16(uint32_t smem_addr) {
  uint16_t v;
  asm volatile("ld.shared.u16 %0, [%1];\n" : "=h"(v) : "r"(smem_addr) : "memory");
  return v;
}
__device__ __forceinline__ uint4 ld_shared_v4(uint32_t smem_addr) {
  uint4 v;
  asm volatile("ld.shared.v4.b32 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "r"(smem_addr)
               : "memory");
  return v;
}
__device__ __forceinline__ void st_shared_v4(uint32_t smem_addr, uint4 v) {
  asm volatile("st.shared.v4.b32 [%0], {%1,%2,%3,%4};\n" ::"r"(smem_addr), "r"(v.x), "r"(v.y),
               "r"(v.z), "r"(v.w)
               : "memory");
}

// ---- ldmatrix ---------------------------------------------------------------------------------
// x4: lanes 0-7, 8-15, 16-23, 24-31 give the row addresses of matrices 0..3 (8x8 of 16-bit each).
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t smem_addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t smem_addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr));
}
__device__ __forceinline__ void ldmatrix_x2(uint32_t (&r)[2], uint32_t smem_addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n"
               : "=r"(r[0]), "=r"(r[1])
               : "r"(smem_addr));
}
__device__ __forceinline__ void ldmatrix_x2_trans(uint32_t (&r)[2], uint32_t smem_addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];\n"
               : "=r"(r[0]), "=r"(r[1])
               : "r"(smem_addr));
}

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
// stmatrix (sm_90): the store twin of ldmatrix. One x4 writes four 8x8 16-bit matrices (lanes
// 8j..8j+7 address the rows of matrix j; register j holds this lane's pair of matrix j): an
// accumulator pair of n8 tiles in one instruction where 32-bit stores take four.
__device__ __forceinline__ void stmatrix_x4(uint32_t smem_addr, uint32_t r0, uint32_t r1, uint32_t r2, uint32_t r3) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1,%2,%3,%4};\n" ::"r"(smem_addr), "r"(r0), "r"(r1),
               "r"(r2), "r"(r3)
               : "memory");
}
// The transposed form: lane t's pair (row t / 4, columns 2 (t % 4), + 1) of matrix j lands in
// column t / 4 of rows 2 (t % 4), + 1 (an accumulator tile stored as its transpose).
__device__ __forceinline__ void stmatrix_x4_trans(uint32_t smem_addr, uint32_t r0, uint32_t r1, uint32_t r2,
                                                  uint32_t r3) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1,%2,%3,%4};\n" ::"r"(smem_addr), "r"(r0),
               "r"(r1), "r"(r2), "r"(r3)
               : "memory");
}
#endif

// ---- mma.sync m16n8k16, fp32 accumulate --------------------------------------------------------
// Fragment layout (PTX ISA "mma.m16n8k16"), g = lane / 4, t = lane % 4:
//   A (16x16, row): a0 = (g, 2t..2t+1), a1 = (g+8, 2t..), a2 = (g, 2t+8..), a3 = (g+8, 2t+8..)
//   B (16x8, col):  b0 = (k 2t..2t+1, n g), b1 = (k 2t+8.., n g)
//   C (16x8):       c0,c1 = (g, 2t..2t+1), c2,c3 = (g+8, 2t..2t+1)
template <typename Elem>
__device__ __forceinline__ void mma_m16n8k16(float (&d)[4], const uint32_t (&a)[4],
                                             const uint32_t (&b)[2]);
template <>
__device__ __forceinline__ void mma_m16n8k16<__half>(float (&d)[4], const uint32_t (&a)[4],
                                                     const uint32_t (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
template <>
__device__ __forceinline__ void mma_m16n8k16<__nv_bfloat16>(float (&d)[4], const uint32_t (&a)[4],
                                                            const uint32_t (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// ---- reductions across the 4 lanes of a quad (the lanes that share an mma row) ----------------
__device__ __forceinline__ float quad_max(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
  return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}
__device__ __forceinline__ float quad_sum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

// min / max that keep NaN (PTX .NaN, sm_80+; one FMNMX.NAN): fminf / fmaxf return the other
// operand, which would turn a NaN score (NaN in q or k) into a finite probability.
__device__ __forceinline__ float fmin_nan(float a, float b) {
  float y;
  asm("min.NaN.f32 %0, %1, %2;\n" : "=f"(y) : "f"(a), "f"(b));
  return y;
}
__device__ __forceinline__ float fmax_nan(float a, float b) {
  float y;
  asm("max.NaN.f32 %0, %1, %2;\n" : "=f"(y) : "f"(a), "f"(b));
  return y;
}

__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// 2^x on the FMA pipe, for x <= ~0 (probabilities), so that part of a tile's exponentials can run
// beside the MUFU unit (16 ex2 per clock per SM against 128 FMAs). x = j + f with j = round(x),
// f in [-0.5, 0.5]; 2^f by a degree-4 polynomial (fitted for relative error: 5.2e-6, below half
// an fp16 ulp of 2.4e-4 by 50x); j goes into the exponent field with one integer add. Inputs below
// -125 give 2^-125 (not 0): callers use it only where every row has a finite LSE. NaN stays NaN.
__device__ __forceinline__ float exp2_fma(float x) {
  x = fmax_nan(x, -125.f);
  const float t = x + 12582912.f;  // 1.5 * 2^23: the sum's low mantissa bits hold round(x)
  const float f = x - (t - 12582912.f);
  float p = fmaf(0.009627114f, f, 0.05598684f);
  p = fmaf(p, f, 0.24023318f);
  p = fmaf(p, f, 0.69310886f);
  p = fmaf(p, f, 1.f);
  // t's bits are 0x4B400000 + round(x); shifted left by 23 only round(x) << 23 remains.
  return __int_as_float(__float_as_int(p) + (__float_as_int(t) << 23));
}

// Programmatic dependent launch (sm_90+; no-ops where a kernel was launched without it): the
// preprocess lets the main kernel's CTAs start as its own last wave drains (the main kernel loads
// K, V, Q and dO before it waits: they are not the preprocess's outputs), and the postprocess's
// CTAs wait on SMs the main kernel's last wave leaves idle instead of being launched after it.
// The backward's kernels use it (bwd_prepost.cuh, the sm90 main kernel), and the decode path
// (the decode kernel lets the split combine start; the combine waits before reading the partials);
// the launches are common/launch.cuh's. The gaps and ramps it hides: docs/kernel_notes_bwd_sm90.md
// (session 7), docs/kernel_notes_decode.md.
__device__ __forceinline__ void grid_dependents_launch() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}
// Waits until the grids this one depends on have completed and their writes are visible.
__device__ __forceinline__ void grid_dependency_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

// ---- a grid's timeline (dev only: -DFLASHSDPA_GRID_TIMELINE=1) ------------------------------------
// %globaltimer (nanoseconds, one clock for every SM) at points of each CTA's life, thread 0, for
// the decode path's two kernels (kernel 0: the split decode kernel, start / end; kernel 1: the
// split combine, start / past its grid-dependency wait / end / its LSEs in and reduced / its first
// column chunk's partials summed), read back by
// scripts/dev/decode_timeline.cu: how a B 1 x 8k decode call's ~16 us split into the grid's ramp,
// its CTAs, its tail and the combine (issue 11's 15 us bar). Off by default: grid_stamp() is then
// empty and the kernels' SASS is the same as without it.
#ifndef FLASHSDPA_GRID_TIMELINE
#define FLASHSDPA_GRID_TIMELINE 0
#endif
constexpr int kGridTimelineCtas = 4096, kGridTimelinePoints = 5;
#if FLASHSDPA_GRID_TIMELINE
__device__ unsigned long long grid_timeline[2 * kGridTimelinePoints * kGridTimelineCtas];  // [kernel][point][cta]
#endif
__device__ __forceinline__ void grid_stamp([[maybe_unused]] int kernel, [[maybe_unused]] int point) {
#if FLASHSDPA_GRID_TIMELINE
  if (threadIdx.x == 0 && blockIdx.x < kGridTimelineCtas) {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;\n" : "=l"(t));
    grid_timeline[(kernel * kGridTimelinePoints + point) * kGridTimelineCtas + blockIdx.x] = t;
  }
#endif
}

// An int32 load with acquire semantics at GPU scope (a flag another CTA releases).
__device__ __forceinline__ int ld_acquire_gpu_s32(const int32_t* p) {
  int v;
  asm volatile("ld.acquire.gpu.global.b32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
  return v;
}

// ---- float atomics into global memory (no return value: red, not atom) -------------------------
// The backward's dQ accumulation is the user.
// Four adjacent floats (16-byte aligned). sm_90: one red.global.add.v4.f32 (one L2 transaction,
// one LSU instruction); sm_80: four scalar reds. The _if form adds only where `pred` holds; the
// predicate lives inside the asm, since a C++ `if` around asm volatile compiles to a branch.
__device__ __forceinline__ void red_add_f32x4(float* gmem, float a, float b, float c, float d) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("red.global.add.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"l"(gmem), "f"(a), "f"(b), "f"(c), "f"(d));
#else
  atomicAdd(gmem, a);
  atomicAdd(gmem + 1, b);
  atomicAdd(gmem + 2, c);
  atomicAdd(gmem + 3, d);
#endif
}
__device__ __forceinline__ void red_add_f32x4_if(float* gmem, float a, float b, float c, float d, bool pred) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile(
      "{\n .reg .pred p;\n setp.ne.b32 p, %5, 0;\n @p red.global.add.v4.f32 [%0], {%1, %2, %3, %4};\n}\n" ::"l"(gmem),
      "f"(a), "f"(b), "f"(c), "f"(d), "r"(static_cast<int>(pred)));
#else
  if (pred) red_add_f32x4(gmem, a, b, c, d);
#endif
}

// ---- bulk asynchronous reduction shared -> global (sm_90: the TMA unit) -------------------------
// The backward's dQ tile goes to global memory this way on sm_90: the warps store their fp32
// fragments to shared memory (registers free at once) and one warp hands each row to the copy
// engine as one `cp.reduce.async.bulk ... add.f32`. Register-sourced reds held their source
// registers until the LSU drained them, so the next GEMM's ldmatrix waited (ncu: the red burst and
// the ldmatrix right after it took 15-18% of all stall samples; docs/kernel_notes_bwd.md).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
// Makes this thread's generic-proxy shared-memory writes visible to later async-proxy (bulk) reads.
__device__ __forceinline__ void fence_proxy_async_shared() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
// gmem[0 .. bytes/4) += smem[0 .. bytes/4) as float32; both 16-byte aligned, bytes a multiple of 16.
__device__ __forceinline__ void bulk_reduce_add_f32(float* gmem, uint32_t smem_addr, uint32_t bytes) {
  asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;\n" ::"l"(gmem),
               "r"(smem_addr), "r"(bytes)
               : "memory");
}
// gmem[0 .. bytes) = smem[0 .. bytes): a plain bulk copy (the first dQ tile of a query block).
__device__ __forceinline__ void bulk_store(void* gmem, uint32_t smem_addr, uint32_t bytes) {
  asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;\n" ::"l"(gmem), "r"(smem_addr),
               "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void bulk_commit_group() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
// Until this thread's committed bulk operations have finished reading shared memory.
__device__ __forceinline__ void bulk_wait_read_all() {
  asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory");
}
// Until they have completed (their global writes done).
__device__ __forceinline__ void bulk_wait_all() { asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory"); }
// Until all but the most recent committed group have completed.
__device__ __forceinline__ void bulk_wait_all_but_last() {
  asm volatile("cp.async.bulk.wait_group 1;\n" ::: "memory");
}
// *p += v with release semantics at GPU scope (no return value).
__device__ __forceinline__ void red_release_add_gpu(int32_t* p, int v) {
  asm volatile("red.release.gpu.global.add.s32 [%0], %1;\n" ::"l"(p), "r"(v) : "memory");
}
#endif

// ---- shared-memory swizzle ----------------------------------------------------------------------
// Tiles are stored row-major with rows of kRowChunks 16-byte chunks. The chunk index is XORed with
// (row % 8) inside each group of 8 chunks, so the 8 row addresses of one ldmatrix (same logical
// chunk, 8 consecutive rows) hit 8 different 16-byte bank groups: conflict-free for both cp.async
// stores (a warp writes 4 rows x 8 chunks) and ldmatrix reads, without padding.
template <int kRowChunks>
__device__ __forceinline__ int swizzled_offset_bytes(int row, int chunk) {
  static_assert(kRowChunks % 8 == 0, "rows must be a multiple of 128 bytes (64 half-precision elements)");
  return row * kRowChunks * 16 + (((chunk & ~7) | ((chunk ^ row) & 7)) * 16);
}

}  // namespace flashsdpa
