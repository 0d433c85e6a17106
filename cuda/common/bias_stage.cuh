// bias_stage.cuh: one warp's 16 query rows x kBlockN keys of the additive bias (attn_mask), staged
// in shared memory by the warp itself with cp.async one key block ahead, and read back as the m16n8
// C fragments' key pairs (score_mod.cuh's add_bias, query-row layout). The sm90 forward's kModsBias
// kernel uses it: loading the bias from global memory right after the S GEMM put a full L2 / DRAM
// round trip into every step's chain, and with 168 registers at entry the loads were not all in
// flight at once: 2.49 ms for the bench's (1, H, S, S) bias at B 8, S 2k, D 128 against 0.45 ms
// without a bias (H200, session 12; ncu: DRAM 9.7% busy, 55% of the stalls on L1TEX scoreboards).
// Staged a block ahead, the copy runs under the rest of the step and the next S GEMM.
//
// Layout: row r's 16-byte chunk c (keys 8c..8c+7) at r * kBlockN * 2 + ((c ^ (r % 8)) * 16). The
// fragment read of one instruction (8 rows at lane / 4, one chunk, 4 lanes x 4 bytes) then covers
// all 32 banks; unswizzled, the 8 rows 256 bytes apart would hit the same 4 banks (8-way conflict).
// No padding: the d128 kernel's shared memory is full (one Q slot instead of two pays for it).
// Outside the sequence (query >= seqlen_q, key >= seqlen_k) the tile holds zeros: adding them is
// adding nothing, as the global path's skipped elements (fmaf(0, factor, x) = x, -inf included).
#pragma once

#include <cstdint>

#include "common/ptx.cuh"

namespace flashsdpa {

// Whether a (B, H, rows, keys) 16-bit tensor's planes and rows all start 16-byte aligned (pointer and
// the three element strides): the staged bias's 16-byte copies, the backward's 16-byte gradient rows.
__device__ __forceinline__ bool rows_aligned16(const void* ptr, int64_t batch_stride, int64_t head_stride,
                                               int64_t row_stride) {
  return ((reinterpret_cast<uintptr_t>(ptr) | static_cast<uintptr_t>(batch_stride | head_stride | row_stride) * 2) &
          15) == 0;
}

// Issues the copies of rows row0..row0+kRows-1 (sequence rows; those >= seqlen_q become zeros) and
// keys key0..key0+kKeys-1 (>= seqlen_k: zeros) of `plane` (the (b, h) plane: element (i, j) at
// i * row_stride + j) into a tile whose 16-byte chunk c (keys 8c..8c+7) of row r sits at
// tile.base + tile.chunk_offset(r, c). aligned16: the plane pointer and row stride allow 16-byte
// copies; otherwise 4-byte pairs, which the host's checks allow for any served bias (even strides,
// 4-byte aligned pointer). Every lane of the warp calls it; the caller commits the group.
// kPairUnroll: the 4-byte loop's unroll (each tile's as first compiled: SASS kept).
template <typename Tile, int kRows, int kKeys, int kPairUnroll>
__device__ __forceinline__ void stage_rows(const Tile& tile, const uint16_t* plane, int64_t row_stride, bool aligned16,
                                           int row0, int key0, int seqlen_q, int seqlen_k, int lane) {
  if (aligned16) {
    constexpr int kChunks = kKeys / 8;
    static_assert(kRows * kChunks % 32 == 0, "whole passes of 16-byte copies per warp");
    // Copy j: row lane / kChunks + j 32 / kChunks, chunk lane % kChunks. What does not change from
    // pass to pass is computed once (the lane's keys and their byte count, its first row's address:
    // one 64-bit multiply), then a 64-bit add a pass. Recomputing q * row_stride and the key bound
    // per copy cost ~10 instructions of address arithmetic a copy in the forward's SASS (ptxas
    // 13.0). With quad()'s ldmatrix reads and the backward's lean gradient rows (session 51, H100,
    // bf16 d128, 3 alternating rounds of `bench --masks`, per-round medians,
    // kernel_notes_features.md): bias 2k forward +5.1% (413 -> 434 TFLOP/s), backward +3.6%, key
    // padding's forward +0.0%, backward 2k +1.2%.
    static_assert(32 % kChunks == 0, "a pass covers whole rows");
    constexpr int kPassRows = 32 / kChunks;
    const int r0 = lane / kChunks, c = lane % kChunks, k = key0 + 8 * c;
    const int key_bytes = 2 * max(0, min(8, seqlen_k - k));
    const int64_t pass_stride = static_cast<int64_t>(kPassRows) * row_stride;
    const uint16_t* src = plane + static_cast<int64_t>(row0 + r0) * row_stride + k;
#pragma unroll
    for (int j = 0; j < kRows / kPassRows; ++j) {
      const int r = r0 + kPassRows * j;
      const int bytes = row0 + r < seqlen_q ? key_bytes : 0;
      cp_async_16_bytes(tile.base + tile.chunk_offset(r, c), bytes > 0 ? src : plane, bytes);
      src += pass_stride;
    }
  } else {
    constexpr int kPairs = kKeys / 2;
#pragma unroll kPairUnroll
    for (int j = 0; j < kRows * kPairs / 32; ++j) {
      const int i = lane + 32 * j, r = i / kPairs, pair = i % kPairs;
      const int q = row0 + r, k = key0 + 2 * pair;
      const int bytes = q < seqlen_q ? 2 * max(0, min(2, seqlen_k - k)) : 0;
      const uint16_t* src = bytes > 0 ? plane + static_cast<int64_t>(q) * row_stride + k : plane;
      cp_async_4_bytes(tile.base + tile.chunk_offset(r, pair / 4) + (pair % 4) * 4, src, bytes);
    }
  }
}

template <int kBlockN>
struct WarpBiasTile {
  static constexpr int kRows = 16;
  static constexpr int kRowBytes = kBlockN * 2;
  static constexpr int kChunks = kBlockN / 8;  // 16-byte chunks per row
  static constexpr int kBytes = kRows * kRowBytes;
  static_assert(kChunks >= 8 && kChunks % 2 == 0, "the swizzle permutes 8 chunks: kBlockN >= 64");

  uint32_t base;  // shared-memory address of this warp's tile

  __device__ __forceinline__ static uint32_t chunk_offset(int r, int c) { return r * kRowBytes + ((c ^ (r & 7)) << 4); }

  // Rows row0..row0+15 x keys key0..key0+kBlockN-1 (stage_rows): 8 16-byte copies per lane per
  // 128-key block, or 32 4-byte pairs.
  __device__ __forceinline__ void load(const uint16_t* plane, int64_t row_stride, bool aligned16, int row0, int key0,
                                       int seqlen_q, int seqlen_k, int lane) const {
    stage_rows<WarpBiasTile, kRows, kBlockN, 8>(*this, plane, row_stride, aligned16, row0, key0, seqlen_q, seqlen_k, lane);
  }

  // The thread's C-fragment pairs of n8 tiles nt and nt + 1 (keys 8 (nt + k / 2) + 2 (lane % 4) +
  // {0, 1} of row lane / 4 + 8 (k % 2): the low half the first key) into w[k], k = 0..3, with one
  // ldmatrix.x4: its matrices are rows 0-7 / 8-15 of chunks nt and nt + 1, lane l giving row
  // (l / 8 % 2) 8 + l % 8 of chunk nt + l / 16 (the swizzle keeps each matrix's 8 rows on distinct
  // banks). Every lane of the warp calls it. (One LDS.32 a pair before: 32 a thread a block.)
  __device__ __forceinline__ void quad(int nt, uint32_t (&w)[4]) const {
    const int lane = threadIdx.x % 32;
    ldmatrix_x4(w, base + chunk_offset((lane / 8 % 2) * 8 + lane % 8, nt + lane / 16));
  }
};

// The sm90 backward's tile (S^T's key rows): one warp's 16 keys x 64 queries of a step, kept
// query-major as the bias is, staged a step ahead into the part of a dS buffer that the warp's own
// dS values overwrite only later in the step it is read in (bwd_kernel_sm90.cuh says why that
// buffer is free then). Before staging: 2-byte __ldg's per element after the S^T GEMM, each its own
// 32-byte sector, the round trip in every step's chain (the bias backward ran at 79 TFLOP/s, 0.76x
// of PyTorch's efficient kernel, H200). The buffer holds dS in query rows (kDsQueryRows, session
// 54): the warpgroup's half is 64 query rows of 128 bytes, 16-byte chunk c' of row q at q * 128 +
// ((c' ^ (q % 8)) * 16) (the TMA's 128-byte swizzle: the half is the box of d_bias's store and of
// the bias's TMA load); the warp's keys 16 w .. 16 w + 15 are chunks c' = 2 w + c, c = 0 / 1, where
// its dS values go, so the __syncwarp argument holds. A fragment read (8 query rows, one chunk)
// covers 8 distinct chunk positions: conflict-free. (Until session 54 the tile was the warp's 2 KB
// of a dS^T buffer, 64 rows of 32 bytes: scripts/dev/ab/bias_grad_rows.patch.)
struct WarpBiasTileQ {
  static constexpr int kQueries = 64;

  uint32_t base;  // the warpgroup's half of the dS buffer
  int chunk0;     // 2 * warp

  __device__ __forceinline__ uint32_t chunk_offset(int q, int c) const { return q * 128 + (((chunk0 + c) ^ (q & 7)) << 4); }

  // Queries q0..q0+63 (sequence rows; >= seqlen_q zero) x keys key0..key0+15 (>= seqlen_k zero):
  // 4 16-byte copies per lane, or 16 4-byte pairs (stage_rows).
  __device__ __forceinline__ void load(const uint16_t* plane, int64_t row_stride, bool aligned16, int q0, int key0,
                                       int seqlen_q, int seqlen_k, int lane) const {
    stage_rows<WarpBiasTileQ, kQueries, 16, 4>(*this, plane, row_stride, aligned16, q0, key0, seqlen_q, seqlen_k, lane);
  }

  // Elements (key lane / 4 + 8 (k % 2), queries 8 (j + k / 2) + 2 (lane % 4) + {0, 1}: S^T's
  // fragment layout) as the low / high half of w[k], k = 0..3, with one ldmatrix.x4.trans (one
  // 16-bit LDS an element before: 32 a thread a step): its matrices are queries 8 j .. 8 j + 7 /
  // 8 (j + 1) .. + 7 (rows) of chunk 0 / 1 (keys 0-7 / 8-15), transposed, so each thread gets one
  // key's two adjacent queries; lane l gives query row 8 (j + l / 16) + l % 8 of chunk l / 8 % 2.
  // Every lane of the warp calls it.
  __device__ __forceinline__ void quad(int j, uint32_t (&w)[4]) const {
    const int lane = threadIdx.x % 32;
    ldmatrix_x4_trans(w, base + chunk_offset(8 * (j + lane / 16) + lane % 8, lane / 8 % 2));
  }
};

}  // namespace flashsdpa
