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
// The warps that compute delta (delta_product's mma): 16 rows each.
constexpr int kDeltaWarps = kPrePostRows / 16;
static_assert(kDeltaWarps <= kPrePostThreads / 32, "a warp per 16 rows");

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


// ---- delta's products ----------------------------------------------------------------------------
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
// Columns a staging pass holds: up to 128 (the shared memory of 2 x 64 rows).
__host__ __device__ constexpr int delta_pass(int head_dim) { return head_dim < 128 ? head_dim : 128; }
// +16 bytes a row: ldmatrix's 8 row addresses hit 8 bank groups.
__host__ __device__ constexpr int delta_pitch(int head_dim) { return delta_pass(head_dim) + 8; }

// Rows 16w .. 16w + 15 of A (warp w < 4) times 16 rows of B (kDiagonal: rows 16w .. 16w + 15, the
// same rows as A's; else rows 0 .. 15 for every warp), summed over `cols` columns: c[0..3] is the
// m16n8 C fragment of B's first 8 rows, c[4..7] of the next 8. All threads stage A's 64 rows and B's
// rows in shared memory with 16-byte loads (columns past `cols` and rows past a_rows / b_rows as 0,
// as the main kernels load them), up to 128 columns a pass; 4 warps then take 16 rows each through
// ldmatrix: m16n8k16s with A as A and B's rows as the 8 columns of B. (Loaded straight from global
// memory in fragment order, 4 bytes a lane, it cost 1.5% more.) Every thread calls it.
template <typename Elem, int kHeadDim, bool kDiagonal>
__device__ __forceinline__ void delta_product(const Elem* a, int64_t a_stride, int a_rows, const Elem* b, int64_t b_stride,
                                              int b_rows, int cols, Elem* s_a, Elem* s_b, float (&c)[8]) {
  constexpr int kPass = delta_pass(kHeadDim);
  constexpr int kPitch = delta_pitch(kHeadDim);
  constexpr int kVecs = kPass / 8;  // 16-byte vectors of a row's pass
  constexpr int kBRows = kDiagonal ? kPrePostRows : 16;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
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
      const int r = i / kVecs, col = c0 + (i % kVecs) * 8;
      const bool in_cols = col < cols;  // (cols is a multiple of 8: whole vectors)
      uint4 va = make_uint4(0u, 0u, 0u, 0u);
      if (r < a_rows && in_cols) va = *reinterpret_cast<const uint4*>(a + r * a_stride + col);
      *reinterpret_cast<uint4*>(s_a + r * kPitch + (col - c0)) = va;
      if (r < kBRows) {
        uint4 vb = make_uint4(0u, 0u, 0u, 0u);
        if (r < b_rows && in_cols) vb = *reinterpret_cast<const uint4*>(b + r * b_stride + col);
        *reinterpret_cast<uint4*>(s_b + r * kPitch + (col - c0)) = vb;
      }
    }
    __syncthreads();
    if (warp < kDeltaWarps) {
      const int r0 = warp * 16, b0 = kDiagonal ? r0 : 0;
#pragma unroll
      for (int k0 = 0; k0 < kPass; k0 += 16) {
        // A = rows r0..r0+15 (a0..a3: rows 0-7 / 8-15 by k 0-7 / 8-15); B = rows b0..b0+7 and
        // b0+8..b0+15 as two n8 tiles (b0, b1 each: k 0-7, 8-15).
        uint32_t af[4], bf[4];
        ldmatrix_x4(af, smem_u32(s_a + (r0 + lane % 16) * kPitch + k0 + (lane / 16) * 8));
        ldmatrix_x4(bf, smem_u32(s_b + (b0 + (lane / 16) * 8 + lane % 8) * kPitch + k0 + ((lane / 8) % 2) * 8));
        const uint32_t b_lo[2] = {bf[0], bf[1]}, b_hi[2] = {bf[2], bf[3]};
        mma_m16n8k16<Elem>(lo, af, b_lo);
        mma_m16n8k16<Elem>(hi, af, b_hi);
      }
    }
  }
  if constexpr (kFirstHalf < kHeadDim) {
#pragma unroll
    for (int e = 0; e < 4; ++e) lo[e] = lo_first[e] + lo[e], hi[e] = hi_first[e] + hi[e];
  }
#pragma unroll
  for (int e = 0; e < 4; ++e) c[e] = lo[e], c[4 + e] = hi[e];
}

// The exact delta where one key block holds every key: delta = sum_j P_j dP_j, from the scores and
// dP of the row's own keys (delta_product's fragments), instead of dO . O with O rounded to the
// input dtype. With two keys dP_j - delta is a small difference of large terms, and the rounded O
// moved it enough that dK missed the accuracy rule in 18-32% of bf16 draws at Sq 1 / Sk 2 (D 8 to
// 128), 7% at Sk 7, 1% at Sk 16; from sum_j P dP 0-3% (scripts/dev/tiny_sk_delta_emulation.py,
// kernel_notes_bwd_sm90.md, session 52). Past 16 keys the misses are gone either way, and the
// product would need the keys' own pass over K and V, so the rounded O serves there. Only the
// plain softmax: the score modifiers (their P is score_mod.cuh's) and dropout (P's mask) keep O.
constexpr int kExactDeltaMaxKeys = 16;
__device__ __forceinline__ bool exact_delta_applies(const AttnBwdParams& p) {
  return p.seqlen_k <= kExactDeltaMaxKeys && !p.mods.any() && !p.dropout.enabled();
}

// Rows `row` + g and `row` + g + 8 of a warp's 16 (the first `rows` valid; `delta` points at the
// warp's first row), their scores s and dP as delta_product's C fragments (element e of tile n:
// row g + 8 (e / 2), key 8n + 2t + e % 2). delta = (sum_j w_j dP_j) / (sum_j w_j), w_j =
// exp2(scale_log2 s_j - max): the softmax's own normalisation, so that one visible key (or a one-hot
// softmax: every other w_j is exactly 0) gives delta = dP_j bitwise (w_j = 1), as the O path does,
// and 16 tied keys sum equal terms in a balanced tree (exact). A row that sees no key gets 0, as its P.
__device__ __forceinline__ void exact_delta_store(const AttnBwdParams& p, const SeqlenInfo& seq, int row, int rows,
                                                  int lane, const float (&s)[8], const float (&dp)[8], float* delta) {
  const BlockMask mask(seq, p.mask);
  const int g = lane / 4, t = lane % 4;
#pragma unroll
  for (int half = 0; half < 2; ++half) {  // rows g, g + 8
    const int r = row + g + 8 * half, begin = mask.col_begin(r), end = mask.col_end(r);
    float x[4], d[4], m = -INFINITY;
#pragma unroll
    for (int n = 0; n < 2; ++n) {
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const int e = 4 * n + 2 * half + j, key = 8 * n + 2 * t + j;
        x[2 * n + j] = key >= begin && key < end ? s[e] * p.scale_log2 : -INFINITY;
        d[2 * n + j] = dp[e];
        m = fmaxf(m, x[2 * n + j]);
      }
    }
    m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 1));
    m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 2));
    float w[4], wd[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      // The row's maximum weighs exactly 1 (also where it is +inf); a masked key exactly 0, and its
      // dP (maybe not finite) none.
      w[j] = x[j] == -INFINITY ? 0.f : (x[j] == m ? 1.f : exp2f(x[j] - m));
      wd[j] = w[j] == 0.f ? 0.f : w[j] * d[j];
    }
    float num = (wd[0] + wd[1]) + (wd[2] + wd[3]), den = (w[0] + w[1]) + (w[2] + w[3]);
    num += __shfl_xor_sync(0xffffffffu, num, 1);
    den += __shfl_xor_sync(0xffffffffu, den, 1);
    num += __shfl_xor_sync(0xffffffffu, num, 2);
    den += __shfl_xor_sync(0xffffffffu, den, 2);
    const int local = g + 8 * half;
    if (t == 0 && local < rows) delta[local * p.delta_row_stride] = den > 0.f ? __fdiv_rn(num, den) : 0.f;
  }
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

  // delta in the tensor cores' own arithmetic (delta_product below); where every key fits in 16
  // (exact_delta_applies) from the scores and dP themselves instead of the rounded O.
  constexpr int kPitch = delta_pitch(kHeadDim);
  __shared__ __align__(16) Elem s_a[kPrePostRows * kPitch], s_b[kPrePostRows * kPitch];
  const int warp = tid / 32, lane = tid % 32;
  if (exact_delta_applies(p)) {
    const int kv_head = tile.head / (p.heads_q / p.heads_kv);
    const Elem* q = static_cast<const Elem*>(p.q) + batch_offset(p, tile.batch, p.q_batch_stride) +
                    tile.head * p.q_head_stride + q_row0 * p.q_row_stride;
    const Elem* k = static_cast<const Elem*>(p.k) + batch_offset(p, tile.batch, p.k_batch_stride) +
                    kv_head * p.k_head_stride + seq.k_row_offset * p.k_row_stride;
    const Elem* v = static_cast<const Elem*>(p.v) + batch_offset(p, tile.batch, p.v_batch_stride) +
                    kv_head * p.v_head_stride + seq.k_row_offset * p.v_row_stride;
    float s[8], dp[8];  // keys 0-7 then 8-15 of rows (g, g + 8) of the warp's 16: delta_product's C
    delta_product<Elem, kHeadDim, false>(q, p.q_row_stride, rows, k, p.k_row_stride, seq.seqlen_k, p.head_dim_qk,
                                         s_a, s_b, s);
    // From d192 on the scores wait in shared memory while dP is computed: held in registers across
    // the second product they made those preprocess kernels spill (ptxas 13.0, 64 registers: 16
    // bytes sm_80, 12 sm_90a; a separate 4 KB array instead cost 4-9 more registers elsewhere).
    // They go to s_b's rows 16-63, which a product of 16 B rows never touches (each lane its own
    // 8, element-major: no bank conflict).
    constexpr bool kStashScores = kHeadDim >= 192;
    float* stash = reinterpret_cast<float*>(s_b + 16 * kPitch) + warp * 8 * 32 + lane;
    static_assert(!kStashScores || (kPrePostRows - 16) * kPitch * sizeof(Elem) >= kDeltaWarps * 8 * 32 * sizeof(float),
                  "the stash fits in s_b's rows 16-63");
    if (kStashScores && warp < kDeltaWarps) {
#pragma unroll
      for (int e = 0; e < 8; ++e) stash[e * 32] = s[e];
    }
    __syncthreads();  // the scores' fragments are read before dO / V overwrite them
    delta_product<Elem, kHeadDim, false>(dout, p.dout_row_stride, rows, v, p.v_row_stride, seq.seqlen_k,
                                         p.head_dim_v, s_a, s_b, dp);
    if (kStashScores && warp < kDeltaWarps) {
#pragma unroll
      for (int e = 0; e < 8; ++e) s[e] = stash[e * 32];
    }
    if (warp < kDeltaWarps) {
      exact_delta_store(p, seq, row0 + warp * 16, rows - warp * 16, lane, s, dp, delta + warp * 16 * p.delta_row_stride);
    }
  } else {
    float c[8];  // dO rows by O rows: the diagonals are the deltas
    delta_product<Elem, kHeadDim, true>(dout, p.dout_row_stride, rows, out, p.o_row_stride, rows, p.head_dim_v, s_a,
                                        s_b, c);
    if (warp < kDeltaWarps) {
      // C (g, 2t + e) of the first is c[e], (g + 8, 2t + e) of the second c[6 + e] (g = lane / 4, t = lane % 4):
      // row r0 + g's delta sits at column g of the first product, row r0 + 8 + g's at column g of
      // the second, both in the lane with 2t + e = g. (Picked by a select: an index into the
      // fragments would put them in local memory.)
      const int g = lane / 4, t = lane % 4, r_lo = warp * 16 + g, r_hi = r_lo + 8;
      if (t == g / 2) {
        if (r_lo < rows) delta[r_lo * p.delta_row_stride] = g % 2 ? c[1] : c[0];
        if (r_hi < rows) delta[r_hi * p.delta_row_stride] = g % 2 ? c[7] : c[6];
      }
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
