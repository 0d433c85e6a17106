// fwd512_check.cu (session 18, written without a GPU: compiled only): a standalone forward for head
// dim 512 on Hopper, the design of kernel_notes_features.md ("Head dim 512"), checked against a
// float32 reference and timed on the standard sweep's shape. Not in the package.
//
// Why a kernel of its own: O for 64 rows x 512 columns is 256 fp32 registers a thread, more than a
// consumer warpgroup has, and one CTA's shared memory holds only 32-key K / V blocks at D 512. So a
// cluster of two CTAs on two SMs splits D: CTA r (its %cluster_ctarank) owns columns
// [256 r, 256 r + 256) of Q, K, V and O, computes the partial S_r = Q_r K_r^T of its 128 rows
// against a 64-key block, sends it to the other CTA through distributed shared memory and adds the
// other's: S = S_0 + S_1 in both (fp32 addition commutes exactly, so both CTAs hold bitwise the same
// S, softmax, P and LSE). Each then accumulates its half O_r += P V_r. Per SM that is the D 256
// kernel's work and tiles (Q half 64 KB, two stages of 64-key K / V halves 128 KB) plus the
// exchange (one 16 KB slot per consumer warpgroup: 224 KB in all).
//
// Warp roles per CTA (384 threads): warpgroup 0 the producer (one thread issues the TMA loads),
// warpgroups 1 and 2 consumers of 64 query rows each. A consumer's step j: issue S_r(j), issue P
// V(j - 1) behind it, wait for S_r(j); hand S_r(j) to the peer warpgroup (same warpgroup index in
// the other CTA: the same rows and fragment layout) and take its S_{1-r}(j); softmax; wait for P
// V(j - 1); P(j) to registers. The exchange runs while P V(j - 1) is on the tensor cores.
// Exchange protocol per consumer warpgroup w and block n (x_full / x_empty: one-arrival mbarriers in
// each CTA): thread 0 arms my x_full for the slot's 16 KB (arrive + expect_tx); every thread waits
// for my x_empty (the peer has read what I wrote for block n - 1), sends its 32 floats into the
// peer's slot with st.async (completing bytes on the peer's x_full), waits for my x_full (acquire
// at cluster scope) and reads my slot; after a warpgroup barrier thread 0 arrives on the peer's
// x_empty (release at cluster scope: one MEMBAR.GPU a block, not one a thread). A cluster
// barrier after the barriers' initialization and one before exit keep every remote access inside
// both CTAs' lifetimes.
//
//   nvcc -std=c++17 -O3 -gencode arch=compute_90a,code=sm_90a --expt-relaxed-constexpr -Xptxas -v \
//        -I backend/include -I cuda scripts/dev/fwd512_check.cu -o .devbin/fwd512_check
//   .devbin/fwd512_check [check|bench|all]
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "common/seqlen.cuh"
#include "common/softmax.cuh"
#include "sm90/ptx_sm90.cuh"
#include "sm90/tma_sm90.h"

#include "check_cuda.cuh"
#include "fill_cuda.cuh"

using namespace flashsdpa;
using Elem = __nv_bfloat16;

namespace d512 {

constexpr int kHeadDim = 512;
constexpr int kHalf = kHeadDim / 2;  // columns per CTA of the cluster
constexpr int kBlockM = 128;         // query rows per cluster tile: 64 per consumer warpgroup
constexpr int kBlockN = 64;          // keys per step
constexpr int kStages = 2;
constexpr int kColBlocks = kHalf / 64;                // 128-byte column blocks of a half tile
constexpr int kQBytes = kBlockM * kHalf * 2;          // 65,536
constexpr int kKVBytes = kBlockN * kHalf * 2;         // 32,768: one K or V half
constexpr int kXBytes = 64 * kBlockN * 4;             // 16,384: one warpgroup's partial S
constexpr int kQ = 0;
constexpr int kK = kQ + kQBytes;
constexpr int kV = kK + kStages * kKVBytes;
constexpr int kX = kV + kStages * kKVBytes;
constexpr int kBars = kX + 2 * kXBytes;
// q_full, k_full[2], k_empty[2], v_full[2], v_empty[2], x_full[2], x_empty[2]
constexpr int kNumBars = 13;
constexpr int kSmemBytes = kBars + 8 * kNumBars + 1024;  // + the 1024-byte alignment of the base
static_assert(kSmemBytes <= 227 * 1024, "over the per-block shared memory limit");
constexpr int kThreads = 384;
constexpr int kProducerRegs = 24, kConsumerRegs = 240;
constexpr int kBarSlotRead = 1;  // named barriers 1, 2: a consumer warpgroup has read its slot

struct Params {
  CUtensorMap tma_q, tma_k, tma_v;
  Elem* o;     // (B, H, S, 512), contiguous
  float* lse;  // (B, H, S)
  int batch, heads, heads_kv, seqlen, causal;
  float scale, scale_log2;
};

__host__ __device__ constexpr uint32_t bar_q_full() { return kBars; }
__host__ __device__ constexpr uint32_t bar_k_full(int s) { return kBars + 8 * (1 + s); }
__host__ __device__ constexpr uint32_t bar_k_empty(int s) { return kBars + 8 * (3 + s); }
__host__ __device__ constexpr uint32_t bar_v_full(int s) { return kBars + 8 * (5 + s); }
__host__ __device__ constexpr uint32_t bar_v_empty(int s) { return kBars + 8 * (7 + s); }
__host__ __device__ constexpr uint32_t bar_x_full(int w) { return kBars + 8 * (9 + w); }
__host__ __device__ constexpr uint32_t bar_x_empty(int w) { return kBars + 8 * (11 + w); }

// ---- cluster primitives (sm_90) -------------------------------------------------------------------
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
// `cluster_bar` (as a TMA load would): the receiver's wait then sees the data, and no release
// fence is needed (a release-scoped arrive at cluster scope compiles to MEMBAR.ALL.GPU).
__device__ __forceinline__ void st_async_v4(uint32_t cluster_addr, uint32_t cluster_bar, float a, float b, float c,
                                            float d) {
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.f32 [%0], {%1, %2, %3, %4}, [%5];\n" ::"r"(
                   cluster_addr),
               "f"(a), "f"(b), "f"(c), "f"(d), "r"(cluster_bar)
               : "memory");
}
__device__ __forceinline__ float4 ld_shared_v4(uint32_t addr) {
  float4 v;
  asm volatile("ld.shared.v4.f32 {%0, %1, %2, %3}, [%4];\n" : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "r"(addr)
               : "memory");
  return v;
}
// An arrival on a barrier of another CTA of the cluster, ordering this thread's earlier accesses
// (its remote stores, its reads of the slot) before what the waiter does next.
__device__ __forceinline__ void mbar_arrive_remote(uint32_t cluster_addr) {
  asm volatile("mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0];\n" ::"r"(cluster_addr) : "memory");
}
__device__ __forceinline__ void mbar_wait_cluster(uint32_t bar, uint32_t parity) {
  uint32_t done = 0;
  while (!done) {
    asm volatile(
        "{\n .reg .pred p;\n mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], %2;\n"
        " selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
  }
}

// ---- the kernel ------------------------------------------------------------------------------------
__device__ __forceinline__ void produce(const Params& p, uint32_t base, int rank, int m_block, int head, int batch,
                                        int n_blocks) {
  const int kv_head = head / (p.heads / p.heads_kv);
  const int col0 = rank * kHalf;
  sm90::tma_prefetch_desc(&p.tma_q);
  sm90::tma_prefetch_desc(&p.tma_k);
  sm90::tma_prefetch_desc(&p.tma_v);
  sm90::mbar_arrive_expect_tx(base + bar_q_full(), kQBytes);
#pragma unroll
  for (int c = 0; c < kColBlocks; ++c) {
    sm90::tma_load_4d(base + kQ + c * kBlockM * 128, &p.tma_q, base + bar_q_full(), col0 + c * 64, m_block * kBlockM,
                      head, batch);
  }
  // One K or V half into its ring slot, once the consumers have released the slot.
  auto load_half = [&](uint32_t empty, uint32_t full, uint32_t slot, const CUtensorMap* map, uint32_t parity, int n) {
    sm90::mbar_wait(empty, parity ^ 1);
    sm90::mbar_arrive_expect_tx(full, kKVBytes);
#pragma unroll
    for (int c = 0; c < kColBlocks; ++c)
      sm90::tma_load_4d(slot + c * kBlockN * 128, map, full, col0 + c * 64, n * kBlockN, kv_head, batch);
  };
  for (int n = 0; n < n_blocks; ++n) {
    const int s = n % kStages;
    const uint32_t parity = (n / kStages) & 1;
    load_half(base + bar_k_empty(s), base + bar_k_full(s), base + kK + s * kKVBytes, &p.tma_k, parity, n);
    load_half(base + bar_v_empty(s), base + bar_v_full(s), base + kV + s * kKVBytes, &p.tma_v, parity, n);
  }
}

__device__ __forceinline__ void consume(const Params& p, uint32_t base, int rank, int cw, int m_block, int head,
                                        int batch, int n_blocks) {
  using OpS = sm90::WgmmaOp<Elem, kBlockN>;
  using OpO = sm90::WgmmaOp<Elem, kHalf>;
  constexpr int kNTiles = kBlockN / 8;  // 8
  constexpr int kDTiles = kHalf / 8;    // 32
  const int tid = threadIdx.x % 128, warp = tid / 32, lane = tid % 32;
  const bool arriver = lane == 0;
  const int row0 = m_block * kBlockM + cw * 64 + warp * 16 + lane / 4;  // and row0 + 8

  float o_acc[kHalf / 2], s_acc[kBlockN / 2];
  auto& o = *reinterpret_cast<float(*)[1][kDTiles][4]>(o_acc);
  auto& s = *reinterpret_cast<float(*)[1][kNTiles][4]>(s_acc);
#pragma unroll
  for (int i = 0; i < kHalf / 2; ++i) o_acc[i] = 0.f;
  uint32_t p16[kBlockN / 16][4];
  OnlineSoftmax<1> softmax;

  const uint64_t q_desc = sm90::make_desc(base + kQ + cw * 64 * 128, 16, 1024);
  const uint64_t k_desc0 = sm90::make_desc(base + kK, 16, 1024);
  const uint64_t v_desc0 = sm90::make_desc(base + kV, kBlockN * 128, 1024);
  constexpr uint64_t kSlotDesc = kKVBytes >> 4;
  const int peer = rank ^ 1;
  const uint32_t x_mine = base + kX + cw * kXBytes + tid * 16;  // this thread's float4 j at + 2048 j
  const uint32_t x_peer = map_to_rank(x_mine, peer);
  const uint32_t x_full = base + bar_x_full(cw), x_empty = base + bar_x_empty(cw);
  const uint32_t x_full_peer = map_to_rank(x_full, peer), x_empty_peer = map_to_rank(x_empty, peer);

  auto issue_s = [&](int slot) {
    sm90::wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kHalf / 16; ++kk) {
      const uint64_t q_off = ((kk / 4) * kBlockM * 128 + (kk % 4) * 32) >> 4;
      const uint64_t k_off = ((kk / 4) * kBlockN * 128 + (kk % 4) * 32) >> 4;
      OpS::template ss<0>(s_acc, q_desc + q_off, k_desc0 + slot * kSlotDesc + k_off, kk > 0);
    }
    sm90::wgmma_commit();
  };
  auto issue_pv = [&](int slot) {
    sm90::wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kBlockN / 16; ++kk) OpO::template rs<1>(o_acc, p16[kk], v_desc0 + slot * kSlotDesc + ((kk * 2048) >> 4), 1);
    sm90::wgmma_commit();
  };

  // After S_r(n) has landed in s_acc: hand it over, take the peer's, mask, and fold the block into
  // the softmax (correction per row; whether O needs it).
  auto exchange_and_softmax = [&](int n, float (&correction)[2]) {
    // (after my wait for block n - 1's phase: this arms phase n)
    if (tid == 0) sm90::mbar_arrive_expect_tx(x_full, kXBytes);
    mbar_wait_cluster(x_empty, (n & 1) ^ 1);  // the peer has read what I wrote for block n - 1
#pragma unroll
    for (int j = 0; j < kBlockN / 8; ++j)
      st_async_v4(x_peer + 2048 * j, x_full_peer, s_acc[4 * j], s_acc[4 * j + 1], s_acc[4 * j + 2], s_acc[4 * j + 3]);
    mbar_wait_cluster(x_full, n & 1);
#pragma unroll
    for (int j = 0; j < kBlockN / 8; ++j) {
      const float4 v = ld_shared_v4(x_mine + 2048 * j);
      s_acc[4 * j] += v.x, s_acc[4 * j + 1] += v.y, s_acc[4 * j + 2] += v.z, s_acc[4 * j + 3] += v.w;
    }
    sm90::named_sync(kBarSlotRead + cw, 128);  // every thread of the warpgroup has read the slot
    if (tid == 0) mbar_arrive_remote(x_empty_peer);
    // Keys past the sequence, and (causal, top-left: Sq == Sk here) keys after the row.
    const int key0 = n * kBlockN;
    if (key0 + kBlockN > p.seqlen || (p.causal && key0 + kBlockN - 1 > m_block * kBlockM)) {
#pragma unroll
      for (int i = 0; i < kBlockN / 2; ++i) {
        const int key = key0 + 8 * (i / 4) + 2 * (lane % 4) + (i % 2);
        const int row = row0 + 8 * ((i % 4) / 2);
        if (key >= p.seqlen || (p.causal && key > row)) s_acc[i] = -INFINITY;
      }
    }
    return softmax.template online_step<kNTiles>(s, p.scale_log2, correction);
  };

  sm90::mbar_wait(base + bar_q_full(), 0);
  // Block 0 (every tile has one): S only. Peeled, so no wgmma issue or wait sits under a runtime
  // branch (ptxas then serializes every wgmma: C7518).
  {
    sm90::mbar_wait(base + bar_k_full(0), 0);
    issue_s(0);
    sm90::wgmma_wait<0>();
    sm90::fence_regs(s_acc);
    if (arriver) sm90::mbar_arrive(base + bar_k_empty(0));
    float correction[2];
    exchange_and_softmax(0, correction);  // O is zero: nothing to rescale
    sm90::accumulator_to_a<Elem, kNTiles>(p16, s);
  }
  for (int n = 1; n < n_blocks; ++n) {
    const int slot = n % kStages, prev = (n - 1) % kStages;
    sm90::mbar_wait(base + bar_k_full(slot), (n / kStages) & 1);
    issue_s(slot);
    sm90::mbar_wait(base + bar_v_full(prev), ((n - 1) / kStages) & 1);
    issue_pv(prev);
    sm90::wgmma_wait<1>();  // S_r(n) is ready; P V(n - 1) may still run (under the exchange)
    sm90::fence_regs(s_acc);
    if (arriver) sm90::mbar_arrive(base + bar_k_empty(slot));
    float correction[2];
    const bool rescale = exchange_and_softmax(n, correction);
    sm90::wgmma_wait<0>();
    sm90::fence_regs(o_acc);
    if (arriver) sm90::mbar_arrive(base + bar_v_empty(prev));
    if (rescale) softmax.template rescale<kDTiles>(o, correction);
    sm90::accumulator_to_a<Elem, kNTiles>(p16, s);
  }
  {
    const int last = (n_blocks - 1) % kStages;
    sm90::mbar_wait(base + bar_v_full(last), ((n_blocks - 1) / kStages) & 1);
    issue_pv(last);
    sm90::wgmma_wait<0>();
    sm90::fence_regs(o_acc);
    if (arriver) sm90::mbar_arrive(base + bar_v_empty(last));
  }

  float lse[2];
  softmax.template finalize<kDTiles>(o, p.scale, lse);
  const int64_t plane = (int64_t(batch) * p.heads + head) * p.seqlen;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int row = row0 + 8 * h;
    if (row >= p.seqlen) continue;
    Elem* out = p.o + (plane + row) * kHeadDim + rank * kHalf + 2 * (lane % 4);
#pragma unroll
    for (int t = 0; t < kDTiles; ++t) {
      *reinterpret_cast<uint32_t*>(out + 8 * t) = ElemTraits<Elem>::pack(o[0][t][2 * h], o[0][t][2 * h + 1]);
    }
    if (rank == 0 && lane % 4 == 0) p.lse[plane + row] = lse[h];
  }
}

__global__ void __launch_bounds__(kThreads, 1) fwd512_kernel(const __grid_constant__ Params p) {
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ == 900) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ __align__(128) char smem[];
  const uint32_t base = (smem_u32(smem) + 1023u) & ~1023u;
  const int rank = cluster_rank();
  const int tile = blockIdx.x / 2;  // the cluster's (x, 1, 1) CTAs are consecutive in x
  const int m_blocks = ceil_div(p.seqlen, kBlockM);
  const int m_block = tile % m_blocks, head = (tile / m_blocks) % p.heads, batch = tile / (m_blocks * p.heads);
  const int all_blocks = ceil_div(p.seqlen, kBlockN);
  const int n_blocks = p.causal ? min(all_blocks, ceil_div((m_block + 1) * kBlockM, kBlockN)) : all_blocks;
  if (threadIdx.x == 0) {
    sm90::mbar_init(base + bar_q_full(), 1);
    for (int s = 0; s < kStages; ++s) {
      sm90::mbar_init(base + bar_k_full(s), 1);
      sm90::mbar_init(base + bar_v_full(s), 1);
      sm90::mbar_init(base + bar_k_empty(s), 8);  // lane 0 of each consumer warp
      sm90::mbar_init(base + bar_v_empty(s), 8);
    }
    for (int w = 0; w < 2; ++w) {
      sm90::mbar_init(base + bar_x_full(w), 1);   // this CTA's thread 0 of warpgroup w, + 16 KB of st.async
      sm90::mbar_init(base + bar_x_empty(w), 1);  // the peer's thread 0 of warpgroup w
    }
    sm90::fence_mbar_init();
  }
  __syncthreads();
  cluster_sync();  // both CTAs' barriers exist before any remote arrival
  const int wg = threadIdx.x / 128;
  if (wg == 0) {
    sm90::setmaxnreg_dec<kProducerRegs>();
    if (threadIdx.x == 0) produce(p, base, rank, m_block, head, batch, n_blocks);
  } else {
    sm90::setmaxnreg_inc<kConsumerRegs>();
    consume(p, base, rank, wg - 1, m_block, head, batch, n_blocks);
  }
  __syncwarp();    // (the producer's lane 0 rejoins its warp: the cluster barrier is .aligned)
  cluster_sync();  // no CTA leaves while the other may still write into its shared memory
#endif
}

}  // namespace d512

// ---- host: reference, comparison, cases, timing ------------------------------------------------------
// One block of 256 threads per (batch, head, row): the row's scores in shared memory (seqlen <=
// kRefMaxKeys), then max, exp, sum and P V in float32. Q, K, V, O as (B, H, S, 512).
constexpr int kRefMaxKeys = 4096;
__global__ void reference(const Elem* q, const Elem* k, const Elem* v, float* o_ref, float* lse_ref, int heads,
                          int heads_kv, int seqlen, int causal, float scale) {
  __shared__ float scores[kRefMaxKeys];
  __shared__ float qrow[d512::kHeadDim];
  __shared__ float red[256];
  const int row = blockIdx.x % seqlen, bh = blockIdx.x / seqlen, h = bh % heads, b = bh / heads;
  const int hk = h / (heads / heads_kv);
  const Elem* qp = q + (int64_t(bh) * seqlen + row) * d512::kHeadDim;
  const Elem* kp = k + (int64_t(b) * heads_kv + hk) * seqlen * d512::kHeadDim;
  const Elem* vp = v + (int64_t(b) * heads_kv + hk) * seqlen * d512::kHeadDim;
  for (int d = threadIdx.x; d < d512::kHeadDim; d += blockDim.x) qrow[d] = to_f(qp[d]);
  __syncthreads();
  const int limit = causal ? row + 1 : seqlen;
  float m = -INFINITY;
  for (int j = threadIdx.x; j < limit; j += blockDim.x) {
    float acc = 0.f;
    for (int d = 0; d < d512::kHeadDim; ++d) acc += qrow[d] * to_f(kp[int64_t(j) * d512::kHeadDim + d]);
    scores[j] = __fmul_rn(acc, scale);
    m = fmaxf(m, scores[j]);
  }
  red[threadIdx.x] = m;
  __syncthreads();
  for (int s = 128; s > 0; s >>= 1) {
    if (threadIdx.x < s) red[threadIdx.x] = fmaxf(red[threadIdx.x], red[threadIdx.x + s]);
    __syncthreads();
  }
  m = red[0];
  __syncthreads();
  float sum = 0.f;
  for (int j = threadIdx.x; j < limit; j += blockDim.x) sum += (scores[j] = expf(scores[j] - m));
  red[threadIdx.x] = sum;
  __syncthreads();
  for (int s = 128; s > 0; s >>= 1) {
    if (threadIdx.x < s) red[threadIdx.x] += red[threadIdx.x + s];
    __syncthreads();
  }
  const float l = red[0];
  float* orow = o_ref + (int64_t(bh) * seqlen + row) * d512::kHeadDim;
  for (int d = threadIdx.x; d < d512::kHeadDim; d += blockDim.x) {
    float acc = 0.f;
    for (int j = 0; j < limit; ++j) acc += scores[j] * to_f(vp[int64_t(j) * d512::kHeadDim + d]);
    orow[d] = acc / l;
  }
  if (threadIdx.x == 0) lse_ref[int64_t(bh) * seqlen + row] = m + logf(l);
}

// max over elements of |o - ref| / max(1, |ref|) and of |lse - ref|, as float bits (non-negative
// floats order as their bits); a non-finite output counts as an infinite error.
__global__ void compare(const Elem* o, const float* lse, const float* o_ref, const float* lse_ref, int64_t rows,
                        unsigned* o_err, unsigned* lse_err) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < rows * d512::kHeadDim;
       i += int64_t(gridDim.x) * blockDim.x) {
    const float x = to_f(o[i]), r = o_ref[i];
    const float e = isfinite(x) ? fabsf(x - r) / fmaxf(1.f, fabsf(r)) : INFINITY;
    atomicMax(o_err, __float_as_uint(e));
    if (i % d512::kHeadDim == 0) {
      const float y = lse[i / d512::kHeadDim], s = lse_ref[i / d512::kHeadDim];
      atomicMax(lse_err, __float_as_uint(isfinite(y) ? fabsf(y - s) : INFINITY));
    }
  }
}

struct Case {
  int batch, heads, heads_kv, seqlen, causal;
};

struct Buffers {
  Elem *q = nullptr, *k = nullptr, *v = nullptr, *o = nullptr;
  float* lse = nullptr;
  explicit Buffers(const Case& c) {
    const int64_t nq = int64_t(c.batch) * c.heads * c.seqlen * d512::kHeadDim;
    const int64_t nk = int64_t(c.batch) * c.heads_kv * c.seqlen * d512::kHeadDim;
    CHECK_CUDA(cudaMalloc(&q, nq * 2));
    CHECK_CUDA(cudaMalloc(&k, nk * 2));
    CHECK_CUDA(cudaMalloc(&v, nk * 2));
    CHECK_CUDA(cudaMalloc(&o, nq * 2));
    CHECK_CUDA(cudaMalloc(&lse, int64_t(c.batch) * c.heads * c.seqlen * 4));
    fill_random<<<512, 256>>>(q, nq, 1);
    fill_random<<<512, 256>>>(k, nk, 2);
    fill_random<<<512, 256>>>(v, nk, 3);
    CHECK_CUDA(cudaMemset(o, 0xFF, nq * 2));  // NaN poison: every row the kernel misses shows
    CHECK_CUDA(cudaMemset(lse, 0xFF, int64_t(c.batch) * c.heads * c.seqlen * 4));
  }
  ~Buffers() {
    cudaFree(q), cudaFree(k), cudaFree(v), cudaFree(o), cudaFree(lse);
  }
};

static cudaError_t launch(const Case& c, const Buffers& b, cudaStream_t stream) {
  d512::Params p{};
  auto tensor = [&](const Elem* ptr, int heads) {
    const int64_t row = d512::kHeadDim;
    return TmaTensor4d{ptr, d512::kHeadDim, c.seqlen, heads, c.batch, row, row * c.seqlen, row * c.seqlen * heads};
  };
  cudaError_t err = encode_tma_all({{&p.tma_q, tensor(b.q, c.heads), d512::kBlockM},
                                    {&p.tma_k, tensor(b.k, c.heads_kv), d512::kBlockN},
                                    {&p.tma_v, tensor(b.v, c.heads_kv), d512::kBlockN}},
                                   /*bf16=*/true);
  if (err != cudaSuccess) return err;
  p.o = b.o, p.lse = b.lse;
  p.batch = c.batch, p.heads = c.heads, p.heads_kv = c.heads_kv, p.seqlen = c.seqlen, p.causal = c.causal;
  p.scale = 1.f / std::sqrt(float(d512::kHeadDim));
  p.scale_log2 = p.scale * 1.4426950408889634f;
  const int64_t tiles = int64_t(ceil_div(c.seqlen, d512::kBlockM)) * c.heads * c.batch;
  if (2 * tiles > 0x7fffffff) return cudaErrorInvalidConfiguration;
  static bool attr_set = false;
  if (!attr_set) {
    err = cudaFuncSetAttribute(d512::fwd512_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, d512::kSmemBytes);
    if (err != cudaSuccess) return err;
    attr_set = true;
  }
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(static_cast<unsigned>(2 * tiles));
  cfg.blockDim = dim3(d512::kThreads);
  cfg.dynamicSmemBytes = d512::kSmemBytes;
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = 2, attr[0].val.clusterDim.y = 1, attr[0].val.clusterDim.z = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  return cudaLaunchKernelEx(&cfg, d512::fwd512_kernel, p);
}

static bool check_case(const Case& c) {
  Buffers b(c);
  CHECK_CUDA(launch(c, b, 0));
  CHECK_CUDA(cudaDeviceSynchronize());
  const int64_t rows = int64_t(c.batch) * c.heads * c.seqlen;
  float *o_ref, *lse_ref;
  unsigned* err;
  CHECK_CUDA(cudaMalloc(&o_ref, rows * d512::kHeadDim * 4));
  CHECK_CUDA(cudaMalloc(&lse_ref, rows * 4));
  CHECK_CUDA(cudaMalloc(&err, 8));
  CHECK_CUDA(cudaMemset(err, 0, 8));
  reference<<<static_cast<unsigned>(rows), 256>>>(b.q, b.k, b.v, o_ref, lse_ref, c.heads, c.heads_kv, c.seqlen, c.causal,
                                                  1.f / std::sqrt(float(d512::kHeadDim)));
  compare<<<1024, 256>>>(b.o, b.lse, o_ref, lse_ref, rows, err, err + 1);
  unsigned bits[2];
  CHECK_CUDA(cudaMemcpy(bits, err, 8, cudaMemcpyDeviceToHost));
  float o_err, lse_err;
  std::memcpy(&o_err, &bits[0], 4);
  std::memcpy(&lse_err, &bits[1], 4);
  // bf16 output: half an ulp is 2^-9 relative (2e-3); P in bf16 adds about as much again.
  const bool ok = o_err <= 1e-2f && lse_err <= 1e-3f;
  std::printf("%-4s B %d H %d/%d S %5d %s  O err %.3e  LSE err %.3e\n", ok ? "ok" : "FAIL", c.batch, c.heads,
              c.heads_kv, c.seqlen, c.causal ? "causal" : "      ", o_err, lse_err);
  cudaFree(o_ref), cudaFree(lse_ref), cudaFree(err);
  return ok;
}

static void bench_case(const Case& c) {
  Buffers b(c);
  cudaEvent_t e0, e1;
  CHECK_CUDA(cudaEventCreate(&e0));
  CHECK_CUDA(cudaEventCreate(&e1));
  for (int i = 0; i < 3; ++i) CHECK_CUDA(launch(c, b, 0));
  std::vector<float> ms;
  for (int i = 0; i < 20; ++i) {
    CHECK_CUDA(cudaEventRecord(e0));
    CHECK_CUDA(launch(c, b, 0));
    CHECK_CUDA(cudaEventRecord(e1));
    CHECK_CUDA(cudaEventSynchronize(e1));
    float t;
    CHECK_CUDA(cudaEventElapsedTime(&t, e0, e1));
    ms.push_back(t);
  }
  std::sort(ms.begin(), ms.end());
  const double flops = 4.0 * c.batch * c.heads * double(c.seqlen) * c.seqlen * d512::kHeadDim / (c.causal ? 2 : 1);
  std::printf("bench B %d H %d S %5d %s  %.3f ms  %.1f TFLOP/s\n", c.batch, c.heads, c.seqlen, c.causal ? "causal" : "      ",
              ms[ms.size() / 2], flops / (ms[ms.size() / 2] * 1e-3) / 1e12);
  cudaEventDestroy(e0), cudaEventDestroy(e1);
}

int main(int argc, char** argv) {
  // check: every case; small: the first five (for compute-sanitizer); bench: timing only; all.
  const char* mode = argc > 1 ? argv[1] : "all";
  bool ok = true;
  if (std::strcmp(mode, "bench") != 0) {
    // Awkward sizes: a 1-row sequence, one key block, partial blocks (Sq = Sk not a multiple of 64
    // or 128), GQA 3/1, 4/2 and 2/1, causal and not.
    const Case cases[] = {{1, 1, 1, 1, 0}, {1, 2, 2, 64, 0}, {1, 2, 2, 113, 1}, {2, 3, 1, 333, 0}, {1, 4, 2, 190, 1},
                          {1, 2, 2, 1000, 1}, {1, 4, 2, 777, 1}, {2, 2, 2, 2048, 0}, {1, 2, 1, 4096, 1}};
    const int count = std::strcmp(mode, "small") == 0 ? 5 : int(sizeof(cases) / sizeof(cases[0]));
    for (int i = 0; i < count; ++i) ok &= check_case(cases[i]);
  }
  if (std::strcmp(mode, "check") != 0 && std::strcmp(mode, "small") != 0) {
    // The standard sweep's shape at D 512: B * S = 16k tokens, H * D = 2048.
    for (int causal = 0; causal < 2; ++causal) {
      bench_case({2, 4, 4, 8192, causal});
      bench_case({8, 4, 4, 2048, causal});
    }
  }
  std::printf(ok ? "all cases ok\n" : "FAILED\n");
  return ok ? 0 : 1;
}
