// bwd_prepost.cuh: the family-neutral halves of every backward: the float32 dQ accumulator's
// layout (the contract between these kernels and a family's main kernel), the preprocess kernel
// (delta = rowsum(dO * O), zero dq_accum) and the dQ postprocess (scale, convert). A family's
// run_bwd launches preprocess -> its main kernel -> postprocess on one stream.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "common/launch.cuh"
#include "common/mask.cuh"
#include "common/ptx.cuh"
#include "common/seqlen.cuh"
#include "common/tile_scheduler.cuh"
#include "flashsdpa/params.h"

namespace flashsdpa {

constexpr float kLog2e = 1.4426950408889634f;

// Column order inside a dq_accum row (private to these kernels: preprocess zeroes whole rows,
// the main kernel adds, postprocess reads). Each aligned group of 16 columns is stored permuted:
// logical column 8a + 2t + j (a, j in {0, 1}, t in 0..3) lives at 4t + 2a + j, so an mma thread
// (t = lane % 4) owns 4 adjacent floats per row and n8-tile pair: one 16-byte red or store. On odd
// rows (absolute row index in the head) the groups are swapped in pairs (group g at g ^ 1), so the
// 8 rows of one warp-wide 16-byte store into the unpadded sm_90 staging tile alternate between the
// two halves of the banks: 4 wavefronts, the minimum, instead of 8. Buckets are multiples of 32
// columns, so every row has an even number of groups.
struct DqAccumLayout {
  __host__ __device__ static constexpr int group_position(int64_t row, int group) { return group ^ static_cast<int>(row & 1); }
  __host__ __device__ static constexpr int position(int64_t row, int col) {
    const int a = (col >> 3) & 1, t = (col >> 1) & 3, j = col & 1;
    return group_position(row, col >> 4) * 16 + 4 * t + 2 * a + j;
  }
};

// ---- preprocess: delta = rowsum(dO * O) in fp32, and zero dq_accum ------------------------------
// With the modifiers' gradients it also zeroes row_pdp and row_pdist (params.h), which the main
// kernel adds into and the postprocess reads.
// One CTA per 64 query rows of one (batch, head); delta by 4 of its warps on the tensor cores.
constexpr int kPrePostRows = 64;
// The key-block size of the family whose main kernel stores the first dQ tile of a query block
// (params.h's dq_first_store: the sm90 backward's kBlockN, which static_asserts it): the
// preprocess asks BlockMask with it which query blocks no key block visits.
constexpr int kDqFirstStoreBlockN = 128;
constexpr int kPrePostThreads = 256;

// The dq_semaphore word of the preprocess / postprocess CTA of 64-row block `block`, at the main
// kernel's granularity (params.h's dq_sem_rows: 64, or the sm90 d64 tall step's 128), and the
// key blocks that visit the word's rows, which that kernel counts in it.
struct DqSemBlock {
  bool tall;
  int index;
  __device__ __forceinline__ DqSemBlock(const AttnBwdParams& p, int block)
      : tall(p.dq_sem_rows == 2 * kPrePostRows), index(tall ? block / 2 : block) {}
  __device__ __forceinline__ int blocks(int seqlen_q) const { return ceil_div(seqlen_q, tall ? 2 * kPrePostRows : kPrePostRows); }
  __device__ __forceinline__ bool visited(const BlockMask& mask) const {
    return tall ? mask.template visited_by_key_blocks<2 * kPrePostRows, kDqFirstStoreBlockN>(index)
                : mask.template visited_by_key_blocks<kPrePostRows, kDqFirstStoreBlockN>(index);
  }
  __device__ __forceinline__ int key_blocks(const BlockMask& mask) const {
    return tall ? mask.template key_blocks_visiting<2 * kPrePostRows, kDqFirstStoreBlockN>(index)
                : mask.template key_blocks_visiting<kPrePostRows, kDqFirstStoreBlockN>(index);
  }
};

// One CTA per kPrePostRows query rows of one (batch, head); the launcher sizes the grid with it.
__host__ __device__ __forceinline__ SingleTileScheduler prepost_scheduler(const AttnBwdParams& p) {
  return SingleTileScheduler{ceil_div(p.seqlen_q, kPrePostRows), p.heads_q, p.batch, TileOrder::kBlockMajor};
}


template <typename Elem, int kHeadDim>
__global__ void __launch_bounds__(kPrePostThreads)
    flashsdpa_bwd_preprocess_kernel(const __grid_constant__ AttnBwdParams p) {
  grid_dependents_launch();
  const WorkTile tile = prepost_scheduler(p).initial_tile();
  const SeqlenInfo seq(p, tile.batch);
  const int row0 = tile.block * kPrePostRows;
  if (row0 >= seq.seqlen_q) return;
  const int tid = threadIdx.x;
  const int64_t q_row0 = seq.q_row_offset + row0;

  const Elem* dout = static_cast<const Elem*>(p.dout) + batch_offset(p, tile.batch, p.dout_batch_stride) +
                     tile.head * p.dout_head_stride + q_row0 * p.dout_row_stride;
  const Elem* out = static_cast<const Elem*>(p.o) + batch_offset(p, tile.batch, p.o_batch_stride) +
                    tile.head * p.o_head_stride + q_row0 * p.o_row_stride;
  float* delta = p.delta + batch_offset(p, tile.batch, p.delta_batch_stride) +
                 tile.head * p.delta_head_stride + q_row0 * p.delta_row_stride;
  float* dq_accum = p.dq_accum + batch_offset(p, tile.batch, p.dq_accum_batch_stride) +
                    tile.head * p.dq_accum_head_stride + q_row0 * p.dq_accum_row_stride;
  const int rows = min(kPrePostRows, seq.seqlen_q - row0);

  // delta in the tensor cores' own arithmetic: every family's dP (sm80's dO V^T with mma.sync,
  // sm90's V dO^T with wgmma) sums each row's products in k chunks of 16 from column 0 up, with a
  // float32 accumulator that starts at 0, so delta = dO . O summed the same way is bitwise dP
  // wherever the output row equals a value row (one visible key: Sk = 1, a window of 0, a one-hot
  // softmax), and dS = P (dP - delta) is then exactly 0, as in exact arithmetic (the H200 shows
  // wgmma and mma.sync agree bit for bit: tests/gpu/test_one_hot_grads.py). The FMA chain it
  // replaces left a residue of a few float32 ulps of |dO| |V| there, which the query and key sums
  // grew into dK (fp16 Sk 1: 1.25e-5 against the rule's 1e-5 floor; fp16 q = k = v = 65504 with 16
  // tied keys: 2110 against 1535). Elsewhere the error stays dP's own (delta in float64 moved the
  // first case by 6%). Cost: the whole backward at 0.995 of the chain's (median; d64 S 1k 0.983;
  // kernel_notes_bwd_sm90.md, session 15).
  // All threads stage the rows' dO and O in shared memory with 16-byte loads (columns past
  // head_dim_v and rows past the sequence as 0, as the main kernels load them), up to 128 columns
  // a pass; 4 warps then take 16 rows each through ldmatrix: an m16n8k16 with dO as A and O's rows
  // as the 8 columns of B, twice (rows 0-7, 8-15), whose diagonals are the rows' deltas. (Loaded
  // straight from global memory in fragment order, 4 bytes a lane, it cost 1.5% more.)
  constexpr int kDeltaWarps = kPrePostRows / 16;
  static_assert(kDeltaWarps <= kPrePostThreads / 32, "a warp per 16 rows");
  constexpr int kPass = kHeadDim < 128 ? kHeadDim : 128;
  constexpr int kPitch = kPass + 8;  // +16 bytes a row: ldmatrix's 8 row addresses hit 8 bank groups
  constexpr int kVecs = kPass / 8;   // 16-byte vectors of a row's pass
  __shared__ __align__(16) Elem s_do[kPrePostRows * kPitch], s_o[kPrePostRows * kPitch];
  const int warp = tid / 32, lane = tid % 32;
  float lo[4] = {0.f, 0.f, 0.f, 0.f}, hi[4] = {0.f, 0.f, 0.f, 0.f};
  // The sm90 d512 backward's dP^T is two sums, columns 0-255 and 256-511 (each CTA of its pair
  // sums its half from 0; sm90/bwd_kernel_sm90.cuh's kSplit), added once: delta sums the same
  // way, so that it stays bitwise dP where O is a value row. (Summed across the halves in one
  // chain it left dS^T a few float32 ulps from 0 on the diagonal window: dk 1.001e-5 against
  // the rule's 1e-5 floor, bf16, tests/gpu/test_hdim512.py, session 34.)
  constexpr int kFirstHalf = kHeadDim == 512 ? 256 : kHeadDim;
  float lo_first[4] = {0.f, 0.f, 0.f, 0.f}, hi_first[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
  for (int c0 = 0; c0 < kHeadDim; c0 += kPass) {
    if (c0 > 0) __syncthreads();  // the last pass's fragments are read
    if constexpr (kFirstHalf < kHeadDim) {
      if (c0 == kFirstHalf) {
#pragma unroll
        for (int e = 0; e < 4; ++e) lo_first[e] = lo[e], hi_first[e] = hi[e], lo[e] = 0.f, hi[e] = 0.f;
      }
    }
#pragma unroll
    for (int i = tid; i < kPrePostRows * kVecs; i += kPrePostThreads) {
      const int r = i / kVecs, c = c0 + (i % kVecs) * 8;
      uint4 a = make_uint4(0u, 0u, 0u, 0u), b = a;
      if (r < rows && c < p.head_dim_v) {  // (head_dim_v is a multiple of 8: whole vectors)
        a = *reinterpret_cast<const uint4*>(dout + r * p.dout_row_stride + c);
        b = *reinterpret_cast<const uint4*>(out + r * p.o_row_stride + c);
      }
      *reinterpret_cast<uint4*>(s_do + r * kPitch + (c - c0)) = a;
      *reinterpret_cast<uint4*>(s_o + r * kPitch + (c - c0)) = b;
    }
    __syncthreads();
    if (warp < kDeltaWarps) {
      const int r0 = warp * 16;
#pragma unroll
      for (int k0 = 0; k0 < kPass; k0 += 16) {
        // A = dO rows r0..r0+15 (a0..a3: rows 0-7 / 8-15 by k 0-7 / 8-15); B = O rows r0..r0+7
        // and r0+8..r0+15 as two n8 tiles (b0, b1 each: k 0-7, 8-15).
        uint32_t a[4], b[4];
        ldmatrix_x4(a, smem_u32(s_do + (r0 + lane % 16) * kPitch + k0 + (lane / 16) * 8));
        ldmatrix_x4(b, smem_u32(s_o + (r0 + (lane / 16) * 8 + lane % 8) * kPitch + k0 + ((lane / 8) % 2) * 8));
        const uint32_t b_lo[2] = {b[0], b[1]}, b_hi[2] = {b[2], b[3]};
        mma_m16n8k16<Elem>(lo, a, b_lo);
        mma_m16n8k16<Elem>(hi, a, b_hi);
      }
    }
  }
  if constexpr (kFirstHalf < kHeadDim) {
#pragma unroll
    for (int e = 0; e < 4; ++e) lo[e] = lo_first[e] + lo[e], hi[e] = hi_first[e] + hi[e];
  }
  if (warp < kDeltaWarps) {
    // C (g, 2t + e) is lo[e], (g + 8, 2t + e) is hi[2 + e] (g = lane / 4, t = lane % 4): row
    // r0 + g's delta sits at column g of the first product, row r0 + 8 + g's at column g of the
    // second, both in the lane with 2t + e = g. (Picked by a select: an index into the fragments
    // would put them in local memory.)
    const int g = lane / 4, t = lane % 4, r_lo = warp * 16 + g, r_hi = r_lo + 8;
    if (t == g / 2) {
      if (r_lo < rows) delta[r_lo * p.delta_row_stride] = g % 2 ? lo[1] : lo[0];
      if (r_hi < rows) delta[r_hi * p.delta_row_stride] = g % 2 ? hi[3] : hi[2];
    }
  }
  if (p.row_pdp != nullptr && tid < rows) {
    const int64_t at = (delta - p.delta) + tid * p.delta_row_stride;
    p.row_pdp[at] = 0.f;
    p.row_pdist[at] = 0.f;
  }

  const DqSemBlock sem_block(p, tile.block);
  if (p.dq_semaphore != nullptr && tid == 0) {  // (with 128-row words both of a word's CTAs zero it)
    p.dq_semaphore[(int64_t(tile.batch) * p.heads_q + tile.head) * sem_block.blocks(p.seqlen_q) + sem_block.index] = 0;
  }
  // With dq_first_store the main kernel writes every block some key block visits (its first tile
  // a plain copy; a tall tile all of its 128 rows): only the others are zeroed here.
  if (p.dq_first_store && p.dq_semaphore != nullptr && sem_block.visited(BlockMask(seq, p.mask))) {
    return;
  }
  constexpr int kVecPerRow = kHeadDim / 4;  // float4 stores; every kHeadDim column exists
  for (int i = tid; i < rows * kVecPerRow; i += kPrePostThreads) {
    const int r = i / kVecPerRow, c = i % kVecPerRow;
    *reinterpret_cast<float4*>(dq_accum + r * p.dq_accum_row_stride + c * 4) =
        make_float4(0.f, 0.f, 0.f, 0.f);
  }
}

// ---- postprocess: dq = dq_accum * scale, in the input dtype -------------------------------------
// With the modifiers' gradients it also finishes them from the rows' sums (row_pdp = sum_j P dP,
// delta computed exactly; row_pdist = sum_j P |distance|), one float atomic per warp and block:
// - sinks: d_sink[h] = -sum over rows of exp(sink[h] - lse) * delta (the sink's dS = P_sink
//   (0 - delta): it has no value row); rows that saw no key have lse = +inf and add 0.
// - ALiBi: the main kernel added -sum dS |distance| with dS = P (dP - delta) from the preprocess's
//   delta; the exact delta changes that by sum over rows of (row_pdp - delta) * row_pdist.
// From the rounded O, these were off by 6.3e-3 (sinks) and 1.3 (slopes) against the float64
// reference where the bf16 textbook is off by 1.7e-3 and 0.43 (tests/gpu/test_features_gpu.py);
// from the exact delta, 4e-8 for the sinks (scripts/dev/probe_mod_grads.py).
__device__ __forceinline__ void finish_mod_grads(const AttnBwdParams& p, const WorkTile& tile, int64_t q_row0, int rows) {
  const int r = threadIdx.x;  // warps 0 and 1: one row each
  float sink_part = 0.f, slope_part = 0.f;
  if (r < rows) {
    const int64_t at = batch_offset(p, tile.batch, p.delta_batch_stride) + tile.head * p.delta_head_stride +
                       (q_row0 + r) * p.delta_row_stride;
    const float pdp = p.row_pdp[at];
    if (p.d_sinks != nullptr) {
      const float lse = p.lse[batch_offset(p, tile.batch, p.lse_batch_stride) + tile.head * p.lse_head_stride +
                              (q_row0 + r) * p.lse_row_stride];
      sink_part = expf(p.mods.sinks[tile.head] - lse) * pdp;
    }
    if (p.d_alibi_slopes != nullptr) slope_part = (pdp - p.delta[at]) * p.row_pdist[at];
  }
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    sink_part += __shfl_xor_sync(0xffffffffu, sink_part, offset);
    slope_part += __shfl_xor_sync(0xffffffffu, slope_part, offset);
  }
  if (r % 32 == 0) {
    if (p.d_sinks != nullptr) atomicAdd(p.d_sinks + tile.head, -sink_part);
    if (p.d_alibi_slopes != nullptr)
      atomicAdd(p.d_alibi_slopes + static_cast<int64_t>(tile.batch) * p.mods.alibi_batch_stride + tile.head, slope_part);
  }
}

template <typename Elem, int kHeadDim>
__global__ void __launch_bounds__(kPrePostThreads)
    flashsdpa_bwd_dq_postprocess_kernel(const __grid_constant__ AttnBwdParams p) {
  // With first store (sm90) the main kernel counts each query block's landed dQ tiles in its
  // semaphore word, so a block converts as soon as its count reaches the key blocks that visit
  // it, on SMs the main kernel's last wave leaves idle (programmatic launch); otherwise, and
  // with the modifiers' row sums (float atomics the count does not cover), after the whole grid.
  const bool per_block = p.dq_first_store && p.dq_semaphore != nullptr && p.row_pdp == nullptr;
  if (!per_block) grid_dependency_wait();
  const WorkTile tile = prepost_scheduler(p).initial_tile();
  const SeqlenInfo seq(p, tile.batch);
  const int row0 = tile.block * kPrePostRows;
  if (row0 >= seq.seqlen_q) return;
  if (per_block) {
    if (threadIdx.x == 0) {
      const DqSemBlock sem_block(p, tile.block);
      const int target = sem_block.key_blocks(BlockMask(seq, p.mask));
      const int32_t* sem = p.dq_semaphore + (int64_t(tile.batch) * p.heads_q + tile.head) * sem_block.blocks(p.seqlen_q) +
                           sem_block.index;
      while (ld_acquire_gpu_s32(sem) < target) {
      }
    }
    __syncthreads();
  }
  const int64_t q_row0 = seq.q_row_offset + row0;
  const float* dq_accum = p.dq_accum + batch_offset(p, tile.batch, p.dq_accum_batch_stride) +
                          tile.head * p.dq_accum_head_stride + q_row0 * p.dq_accum_row_stride;
  Elem* dq = static_cast<Elem*>(p.dq) + batch_offset(p, tile.batch, p.dq_batch_stride) +
             tile.head * p.dq_head_stride + q_row0 * p.dq_row_stride;
  const int rows = min(kPrePostRows, seq.seqlen_q - row0);
  if (p.row_pdp != nullptr && threadIdx.x < kPrePostRows) finish_mod_grads(p, tile, q_row0, rows);
  const int chunks = p.head_dim_qk / 8;
  for (int i = threadIdx.x; i < rows * chunks; i += kPrePostThreads) {
    const int r = i / chunks, c = i % chunks;
    // Output columns 8c .. 8c+7 sit at 4t + 2(c % 2) + j, t = 0..3, j = 0..1, of their 16-group.
    const float* src = dq_accum + r * p.dq_accum_row_stride + DqAccumLayout::position(q_row0 + r, 8 * c);
    float2 v[4];
    // From L2 (ld.global.cg): with per-block waits the main kernel may still be running.
#pragma unroll
    for (int t = 0; t < 4; ++t) v[t] = __ldcg(reinterpret_cast<const float2*>(src + 4 * t));
    uint4 out;
    out.x = ElemTraits<Elem>::pack(v[0].x * p.scale, v[0].y * p.scale);
    out.y = ElemTraits<Elem>::pack(v[1].x * p.scale, v[1].y * p.scale);
    out.z = ElemTraits<Elem>::pack(v[2].x * p.scale, v[2].y * p.scale);
    out.w = ElemTraits<Elem>::pack(v[3].x * p.scale, v[3].y * p.scale);
    *reinterpret_cast<uint4*>(dq + r * p.dq_row_stride + c * 8) = out;
  }
}

// Launches the preprocess (before the family's main kernel) or the postprocess (after it).
// `programmatic`: the postprocess may start before the main kernel ends (it waits for it on the
// GPU: grid_dependency_wait), for a main kernel that lets it (the sm90 family's).
template <typename Elem, int kHeadDim, bool kPost>
cudaError_t launch_bwd_prepost(const AttnBwdParams& p, cudaStream_t stream, bool programmatic = false) {
  const int64_t grid = prepost_scheduler(p).grid_size();
  // 1-D grids: gridDim.x goes to 2^31 - 1, far beyond any batch x heads x blocks we can hold.
  if (grid > 0x7fffffff) return cudaErrorInvalidConfiguration;
  if (grid == 0) return cudaSuccess;
  if constexpr (kPost) {
    if (programmatic) {
      return launch_programmatic(flashsdpa_bwd_dq_postprocess_kernel<Elem, kHeadDim>, static_cast<unsigned>(grid),
                                 kPrePostThreads, 0, stream, p);
    }
    flashsdpa_bwd_dq_postprocess_kernel<Elem, kHeadDim><<<static_cast<unsigned>(grid), kPrePostThreads, 0, stream>>>(p);
  } else {
    flashsdpa_bwd_preprocess_kernel<Elem, kHeadDim><<<static_cast<unsigned>(grid), kPrePostThreads, 0, stream>>>(p);
  }
  return cudaGetLastError();
}

}  // namespace flashsdpa
