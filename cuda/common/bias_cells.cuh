// bias_cells.cuh: what a tile of a biased call needs (issue 14's tile skipping). The one place
// that reads params.h's ScoreMods::bias_cells, the per-call summary of the bias that Python
// computes in the call's stream (ops_masks.bias_cells: one launch of common/bias_cells_summary.cu):
// a byte per cell of 64 queries x 16 keys,
//   bit 0 (kVisible) some element of the cell is not -inf (NaN counts: it must reach the output),
//   bit 1 (kNonZero) some element is not 0,
// elements past Sq / Sk counting as neither. A tile's bits are the OR of its cells':
//   no kVisible  -> kSkip:   every score of the tile is -inf; its P, dS and dP are 0, so the tile
//                            contributes nothing to O, the LSE or any gradient: not loaded at all
//                            where it is at the ends of a range (the [n_min, n_max) of a query tile,
//                            the [m_min, m_max) of a key tile), its scores set to -inf without a
//                            bias load where it is inside one (the K / V pipelines stay as they are);
//   no kNonZero  -> kPlain:  the bias adds 0: no bias loads;
//   otherwise    -> kBias:   the bias is loaded and added as before.
// Every kernel tile is a whole number of cells (64-row, 16-key multiples; static_asserts below),
// so the OR is exact. Key padding (B, 1, 1, S) with kept lengths L_b: the query tiles' ranges end
// at the last block holding a key < L_b and the key tiles past L_b see no query block, so the
// call costs what the unpadded lengths cost (plus the scan below: ~1 L1 hit per block).
#pragma once

#include <cstdint>

#include "flashsdpa/params.h"

namespace flashsdpa {

enum class TileNeed : uint32_t { kSkip = 0, kPlain = 1, kBias = 2 };

struct BiasCells {
  static constexpr int kRows = 64;  // queries per cell
  static constexpr int kKeys = 16;  // keys per cell
  static constexpr uint32_t kVisible = 1, kNonZero = 2;

  const uint8_t* cells;  // this (batch, head)'s plane; nullptr: no summary (every tile kBias)
  // In-plane offsets are int32: a plane is ceil(Sq / 64) x ceil(Sk / 256) x 16 bytes (< 2^31 below
  // 2^41 (query, key) pairs); int64 ones made the sm90 forward's producer (24 registers) spill more.
  int32_t row_stride;
  int seqlen_q;

  __device__ __forceinline__ BiasCells(const ScoreMods& m, int batch, int head, int seqlen_q_)
      : cells(m.bias_cells == nullptr ? nullptr
                                      : m.bias_cells + static_cast<int64_t>(batch) * m.bias_cells_batch_stride +
                                            static_cast<int64_t>(head) * m.bias_cells_head_stride),
        row_stride(static_cast<int32_t>(m.bias_cells_row_stride)),
        seqlen_q(seqlen_q_) {}

  // The OR of the cells of query rows [m_block kBlockM, +kBlockM) x keys [n_block kBlockN, +kBlockN):
  // kBlockN / 64 four-byte words per cell row (a row is padded to 16 cells, so the words of a
  // block past Sk read zeros, never past the row), rows past seqlen_q not read.
  template <int kBlockM, int kBlockN>
  __device__ __forceinline__ uint32_t bits(int m_block, int n_block) const {
    static_assert(kBlockM % kRows == 0 && kBlockN % (4 * kKeys) == 0, "tiles are whole cells, 4-byte words of them");
    if (cells == nullptr) return kVisible | kNonZero;
    constexpr int kCellRows = kBlockM / kRows, kWords = kBlockN / (4 * kKeys);
    uint32_t acc = 0;
#pragma unroll
    for (int r = 0; r < kCellRows; ++r) {
      const int row = m_block * kCellRows + r;
      if (r > 0 && row * kRows >= seqlen_q) break;
      const uint32_t* at = reinterpret_cast<const uint32_t*>(cells + row * row_stride) + n_block * kWords;
#pragma unroll
      for (int w = 0; w < kWords; ++w) acc |= __ldg(at + w);
    }
    acc |= acc >> 16;
    return (acc | (acc >> 8)) & (kVisible | kNonZero);
  }
  template <int kBlockM, int kBlockN>
  __device__ __forceinline__ TileNeed need(int m_block, int n_block) const {
    const uint32_t b = bits<kBlockM, kBlockN>(m_block, n_block);
    return !(b & kVisible) ? TileNeed::kSkip : (b & kNonZero) ? TileNeed::kBias : TileNeed::kPlain;
  }
  template <int kBlockM, int kBlockN>
  __device__ __forceinline__ bool visible(int m_block, int n_block) const {
    return (bits<kBlockM, kBlockN>(m_block, n_block) & kVisible) != 0;
  }

  // A query tile's key blocks [n_min, n_max) without the skipped ones at either end (the result
  // may be empty: n_max <= n_min, a tile that sees no key: O = 0, LSE = +inf as for masks).
  template <int kBlockM, int kBlockN>
  __device__ __forceinline__ void narrow_keys(int m_block, int& n_min, int& n_max) const {
    if (cells == nullptr) return;
    while (n_max > n_min && !visible<kBlockM, kBlockN>(m_block, n_max - 1)) --n_max;
    while (n_min < n_max && !visible<kBlockM, kBlockN>(m_block, n_min)) ++n_min;
  }
};

// A key tile's query blocks [m_min, m_max) without those that every query head of its group
// (heads [head0, head0 + heads)) skips at either end (the backward's range; its steps inside still
// ask BiasCells::need per head).
template <int kBlockM, int kBlockN>
__device__ __forceinline__ void narrow_queries(const ScoreMods& m, int batch, int head0, int heads, int seqlen_q,
                                               int n_block, int& m_min, int& m_max) {
  if (m.bias_cells == nullptr) return;
  auto any_head = [&](int m_block) {
    for (int h = 0; h < heads; ++h)
      if (BiasCells(m, batch, head0 + h, seqlen_q).template visible<kBlockM, kBlockN>(m_block, n_block)) return true;
    return false;
  };
  while (m_max > m_min && !any_head(m_max - 1)) --m_max;
  while (m_min < m_max && !any_head(m_min)) ++m_min;
}

}  // namespace flashsdpa
