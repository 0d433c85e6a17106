// ptx_sm90.cuh: the Hopper-only (sm_90a) primitives of the sm90 kernel family, over PTX: wgmma
// matrix descriptors and fences, mbarriers, TMA (bulk tensor) loads and stores, setmaxnreg and
// named barriers. The companion of common/ptx.cuh; every inline asm of the family lives here or in
// the generated wgmma_ops.cuh, so the kernels read like the algorithm.
//
// Shared-memory tiles of this family are stored the way TMA's 128-byte swizzle writes them: a
// tile of R rows x D columns (16-bit) is D / 64 column blocks of R rows x 128 bytes, each block
// 1024-byte aligned, and inside a block the 16-byte chunk c of row r sits at chunk c ^ (r % 8).
// wgmma reads that layout directly through a descriptor with swizzle mode "128B".
#pragma once

#include <cstdint>

#include "common/ptx.cuh"
#include "sm90/wgmma_ops.cuh"

namespace flashsdpa {
namespace sm90 {

// ---- wgmma matrix descriptors ------------------------------------------------------------------
// 64-bit descriptor (PTX ISA "matrix descriptor format"): start address >> 4 in bits 0-13,
// leading-dimension byte offset >> 4 in 16-29, stride-dimension byte offset >> 4 in 32-45,
// swizzle mode in 62-63 (1 = 128-byte swizzle). Base offset 0: every 8-row atom is 1024-aligned.
//
// K-major operand (rows of the M/N dimension, K contiguous: Q and K): 8 rows x 128 bytes form a
// swizzle atom; the next 8 rows are SBO = 1024 bytes on; LBO is unused for swizzled K-major
// operands (1 by convention). A k16 step inside a 64-column block advances the start by 32 bytes.
//
// MN-major operand (K rows, N contiguous: V read as the B of P V): each 128-byte row holds 64 N
// values of one k; 8 k rows form an atom; the next 8 k rows are SBO = 1024 bytes on, the next 64
// N values (the next column block) LBO = rows * 128 bytes on.
__device__ __forceinline__ uint64_t make_desc(uint32_t smem_addr, uint32_t lbo_bytes, uint32_t sbo_bytes) {
  return static_cast<uint64_t>((smem_addr & 0x3FFFF) >> 4) | (static_cast<uint64_t>(lbo_bytes >> 4) << 16) |
         (static_cast<uint64_t>(sbo_bytes >> 4) << 32) | (uint64_t{1} << 62);
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int kPending>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
}
// Keeps the compiler from moving reads or writes of an accumulator across an asynchronous wgmma
// (it cannot see that the tensor cores own those registers between issue and wait).
template <int N>
__device__ __forceinline__ void fence_regs(float (&r)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(r[i])::"memory");
}

// An fp32 accumulator in the wgmma C layout (kNTiles n8 column groups) -> the 16-bit A fragments
// of an RS wgmma, k-step by k-step: the C fragments of column groups 2kk and 2kk + 1 are exactly the
// A fragment of step kk (the forward's P for P V; the backward's P^T and dS^T).
template <typename Elem, int kNTiles>
__device__ __forceinline__ void accumulator_to_a(uint32_t (&a)[kNTiles / 2][4], const float (&c)[1][kNTiles][4]) {
#pragma unroll
  for (int kk = 0; kk < kNTiles / 2; ++kk) {
    a[kk][0] = ElemTraits<Elem>::pack(c[0][2 * kk][0], c[0][2 * kk][1]);
    a[kk][1] = ElemTraits<Elem>::pack(c[0][2 * kk][2], c[0][2 * kk][3]);
    a[kk][2] = ElemTraits<Elem>::pack(c[0][2 * kk + 1][0], c[0][2 * kk + 1][1]);
    a[kk][3] = ElemTraits<Elem>::pack(c[0][2 * kk + 1][2], c[0][2 * kk + 1][3]);
  }
}

// ---- mbarriers ---------------------------------------------------------------------------------
__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
// Makes the initializations visible to the async proxy (TMA completes transactions on them).
__device__ __forceinline__ void fence_mbar_init() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
// `count` arrivals at once (one thread standing for a warpgroup's four warps).
__device__ __forceinline__ void mbar_arrive(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
// One arrival plus `bytes` of expected TMA transactions for the current phase.
__device__ __forceinline__ void mbar_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ bool mbar_try_wait(uint32_t bar, uint32_t parity) {
  uint32_t done;
  asm volatile(
      "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}\n"
      : "=r"(done)
      : "r"(bar), "r"(parity)
      : "memory");
  return done != 0;
}
// Until the phase of parity `parity` has completed (a fresh barrier counts as having completed
// the phase of parity 1, so producers wait on `phase ^ 1` for empty slots on their first pass).
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
  while (!mbar_try_wait(bar, parity)) {
  }
}

// ---- TMA (bulk tensor copies) -----------------------------------------------------------------
// The tensor map is a __grid_constant__ kernel parameter; its generic address is what PTX takes.
__device__ __forceinline__ void tma_prefetch_desc(const void* tmap) {
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(tmap)) : "memory");
}
// Global -> shared, one box at coordinates (c0 innermost .. c3), completing `bytes` on `bar`.
// Out-of-bounds parts of the box are filled with zeros.
__device__ __forceinline__ void tma_load_4d(uint32_t smem, const void* tmap, uint32_t bar, int c0, int c1, int c2,
                                            int c3) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5, %6}], "
      "[%2];\n" ::"r"(smem),
      "l"(reinterpret_cast<uint64_t>(tmap)), "r"(bar), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
      : "memory");
}
// Shared -> global; out-of-bounds parts of the box are not written.
__device__ __forceinline__ void tma_store_4d(const void* tmap, uint32_t smem, int c0, int c1, int c2, int c3) {
  asm volatile("cp.async.bulk.tensor.4d.global.shared::cta.bulk_group [%0, {%2, %3, %4, %5}], [%1];\n" ::"l"(
                   reinterpret_cast<uint64_t>(tmap)),
               "r"(smem), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
               : "memory");
}
__device__ __forceinline__ void tma_store_commit() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
// Until the committed stores have read their shared-memory source (it may then be reused or freed).
__device__ __forceinline__ void tma_store_wait_read() {
  asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory");
}
// Orders this thread's ordinary shared-memory writes before later async-proxy (TMA, wgmma) reads.
__device__ __forceinline__ void fence_async_shared() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

// ---- clusters (the head-dim-512 forward's CTA pairs) ----------------------------------------------
__device__ __forceinline__ int cluster_rank() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
  return static_cast<int>(r);
}
// Every thread of both CTAs; release / acquire at cluster scope.
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}
// The shared::cluster address of `addr` (a shared::cta address of this CTA's layout) in CTA `rank`.
__device__ __forceinline__ uint32_t map_to_rank(uint32_t addr, int rank) {
  uint32_t out;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(out) : "r"(addr), "r"(rank));
  return out;
}
// 16 bytes into another CTA's shared memory, completing 16 bytes of transactions on its barrier
// `cluster_bar` (as a TMA load would): the receiver's wait then sees the data.
__device__ __forceinline__ void st_async_v4(uint32_t cluster_addr, uint32_t cluster_bar, float a, float b, float c,
                                            float d) {
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.f32 [%0], {%1, %2, %3, %4}, [%5];\n" ::"r"(
                   cluster_addr),
               "f"(a), "f"(b), "f"(c), "f"(d), "r"(cluster_bar)
               : "memory");
}
// An arrival on a barrier of another CTA of the cluster, relaxed. The CTA pairs' exchange
// (PairExchange below) needs neither a release here nor a cluster-scope acquire in its waits: a
// slot's x_full completes when the other CTA's st.async bytes have landed in it (complete_tx on this
// CTA's own barrier, as a TMA load's do, which every consumer waits for at CTA scope), and its
// x_empty arrival follows reads of the slot whose values the arriving warpgroup has already added (a
// warpgroup barrier in between). The cluster-scope forms cost a CCTL.IVALL after every wait and a
// MEMBAR.ALL.GPU before every arrival (which waits for the arriving thread's dQ reductions in
// flight): 1.12-1.26x the d512 kernels' time (session 34; the switch that built them is at f69d713).
__device__ __forceinline__ void mbar_arrive_remote_relaxed(uint32_t cluster_addr) {
  asm volatile("mbarrier.arrive.relaxed.cluster.shared::cluster.b64 _, [%0];\n" ::"r"(cluster_addr) : "memory");
}

// ---- flags between CTAs (deterministic reductions) ------------------------------------------------
__device__ __forceinline__ int ld_acquire_gpu(const int32_t* p) {
  int v;
  asm volatile("ld.acquire.gpu.global.b32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void st_release_gpu(int32_t* p, int v) {
  asm volatile("st.release.gpu.global.b32 [%0], %1;\n" ::"l"(p), "r"(v) : "memory");
}
// Orders this thread's completed async-proxy (bulk copy) global writes before its later generic
// accesses (the release of a flag that tells another CTA they are done).
__device__ __forceinline__ void fence_proxy_async_global() {
  asm volatile("fence.proxy.async.global;\n" ::: "memory");
}

// ---- registers and barriers among warpgroups ------------------------------------------------------
template <int kRegs>
__device__ __forceinline__ void setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}
template <int kRegs>
__device__ __forceinline__ void setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}
// The consumer warpgroup index (warpgroup - 1). kUniform: as a shuffle from lane 0, which ptxas
// knows to be warp-uniform (threadIdx.x / 128 it cannot prove so), so that the wgmma descriptors
// derived from it stay in uniform registers instead of moving there (R2UR) before every HGMMA
// (session 41: both kernels' traits say where it pays, with the numbers). A whole warp calls it.
template <bool kUniform>
__device__ __forceinline__ int consumer_warpgroup(int warpgroup) {
  return kUniform ? __shfl_sync(0xffffffffu, warpgroup - 1, 0) : warpgroup - 1;
}
// Named barriers 1..15 (0 is __syncthreads). `threads` counts every participant, a multiple of 32.
__device__ __forceinline__ void named_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void named_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// ---- the CTA pairs' exchange (after named_sync, which it uses) -------------------------------------
// One warpgroup's fp32 partial tile traded with the same warpgroup of the other CTA of a pair and
// the other's added (fwd512_kernel_sm90.cuh's S, the d512 backward's S^T and dP^T): both CTAs then
// hold the same sum, bitwise (fp32 addition commutes). Each thread's kVecs float4 sit at slot + 16
// tid + 2048 j in both CTAs (the same warpgroup holds the same fragments there). The protocol, per
// exchange `phase` (0, 1, 2, ... on the slot): thread 0 arms x_full for the slot's bytes; every
// thread waits for x_empty (the other CTA has read exchange phase - 1 from its slot), sends its
// floats with st.async (completing bytes on the other's x_full: no release fence), waits for x_full
// and adds its slot's; once the warpgroup has read the slot (named barrier `read_bar`, 128
// threads), thread 0 arrives on the other's x_empty.
struct PairExchange {
  uint32_t mine = 0, peer = 0, full = 0, empty = 0, full_peer = 0, empty_peer = 0;
  PairExchange() = default;
  __device__ __forceinline__ PairExchange(uint32_t slot, uint32_t full_bar, uint32_t empty_bar, int peer_rank, int tid)
      : mine(slot + 16 * tid),
        peer(map_to_rank(mine, peer_rank)),
        full(full_bar),
        empty(empty_bar),
        full_peer(map_to_rank(full_bar, peer_rank)),
        empty_peer(map_to_rank(empty_bar, peer_rank)) {}
  // The protocol's parts, apart so that a caller can place them (add() below in order;
  // scripts/dev/dsmem_bench.cu composes other transports from them).
  template <int kVecs>
  __device__ __forceinline__ void send(const float (&acc)[4 * kVecs], int phase, int tid) const {
    if (tid == 0) mbar_arrive_expect_tx(full, kVecs * 2048);
    mbar_wait(empty, (phase & 1) ^ 1);
#pragma unroll
    for (int j = 0; j < kVecs; ++j)
      st_async_v4(peer + 2048 * j, full_peer, acc[4 * j], acc[4 * j + 1], acc[4 * j + 2], acc[4 * j + 3]);
  }
  template <int kVecs>
  __device__ __forceinline__ void take(float (&acc)[4 * kVecs], int phase) const {
    mbar_wait(full, phase & 1);
#pragma unroll
    for (int j = 0; j < kVecs; ++j) {
      const uint4 v = ld_shared_v4(mine + 2048 * j);
      acc[4 * j] += __uint_as_float(v.x), acc[4 * j + 1] += __uint_as_float(v.y);
      acc[4 * j + 2] += __uint_as_float(v.z), acc[4 * j + 3] += __uint_as_float(v.w);
    }
  }
  __device__ __forceinline__ void release(int read_bar, int tid) const {
    named_sync(read_bar, 128);
    if (tid == 0) mbar_arrive_remote_relaxed(empty_peer);
  }
  template <int kVecs>
  __device__ __forceinline__ void add(float (&acc)[4 * kVecs], int phase, int read_bar, int tid) const {
    send<kVecs>(acc, phase, tid);
    take<kVecs>(acc, phase);
    release(read_bar, tid);
  }
};

}  // namespace sm90
}  // namespace flashsdpa
