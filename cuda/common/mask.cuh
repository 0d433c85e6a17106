// mask.cuh: which keys each query sees, for every kernel family. BlockMask turns the MaskSpec of
// params.h and one sequence's lengths into
//   - the key blocks a query tile visits (n_block_min / n_block_max: the forward's loop bounds;
//     blocks outside are never loaded, which is what makes a 4k window on 32k keys cost 4k),
//   - the key blocks of that range every row sees whole (full_begin / full_end: the mainloop runs
//     them without element-wise masking),
//   - the query blocks a key tile is seen by (m_block_min / m_block_max: the backward's bounds),
//   - apply(): the element-wise mask of a score tile held as stacked m16n8 C fragments.
// Kernels ask it; they never test causality or windows themselves. Nothing here depends on the
// sm80 tiles: the Hopper wgmma accumulator of a warp has the same (row g / g + 8, column 8j + 2t)
// layout as kMT stacked mma.m16n8 C fragments, so apply() serves it too.
#pragma once

#include <cmath>

#include "common/seqlen.cuh"
#include "flashsdpa/params.h"

namespace flashsdpa {

struct BlockMask {
  // Row i sees columns [max(0, i + lo), min(seqlen_k, i + hi)): lo = diag - left, hi = diag + right
  // + 1, with diag = 0 (top-left) or Sk - Sq (bottom-right). An unbounded side is 2^30 away, which
  // no row reaches (lengths are int32, and the host keeps windows below the longer length) and
  // no sum overflows: two offsets instead of a window and a flag keep the mask at 4 registers (the
  // backward's d = 64 kernel sits at the 255-register cap) and every bound branch-free.
  static constexpr int kUnbounded = 1 << 30;
  int seqlen_q;
  int seqlen_k;
  int lo;
  int hi;

  __device__ __forceinline__ BlockMask(const SeqlenInfo& s, const MaskSpec& m) : seqlen_q(s.seqlen_q), seqlen_k(s.seqlen_k) {
    const int diag = m.diagonal_offset(s.seqlen_q, s.seqlen_k);
    lo = m.window_left < 0 ? -kUnbounded : diag - m.window_left;
    hi = m.window_right < 0 ? kUnbounded : diag + m.window_right + 1;
  }

  // Visible key columns of query row `row`: [col_begin, col_end), possibly empty (a row that sees
  // no key gets output 0 and LSE +inf).
  __device__ __forceinline__ int col_begin(int row) const { return max(0, row + lo); }
  __device__ __forceinline__ int col_end(int row) const { return min(seqlen_k, row + hi); }

  // ---- forward: key blocks of query block m_block (rows m_block * kBlockM ..) -------------------
  // Rows past seqlen_q (the ragged last block) are computed but never stored: the range follows
  // the block's valid rows only.
  template <int kBlockM>
  __device__ __forceinline__ int last_row(int m_block) const {
    return min((m_block + 1) * kBlockM, seqlen_q) - 1;
  }
  template <int kBlockM, int kBlockN>
  __device__ __forceinline__ int n_block_min(int m_block) const {
    return col_begin(m_block * kBlockM) / kBlockN;
  }
  // Exclusive; <= n_block_min when no row of the block sees a key.
  template <int kBlockM, int kBlockN>
  __device__ __forceinline__ int n_block_max(int m_block) const {
    return ceil_div(max(0, col_end(last_row<kBlockM>(m_block))), kBlockN);
  }
  // Blocks [full_begin, full_end) are visible to every row of the query block (col_begin and
  // col_end grow with the row, so the last row bounds the left side and the first row the right).
  // Everything else in [n_block_min, n_block_max) needs apply(). The range may be empty.
  template <int kBlockM, int kBlockN>
  __device__ __forceinline__ int full_begin(int m_block) const {
    return ceil_div(col_begin(last_row<kBlockM>(m_block)), kBlockN);
  }
  template <int kBlockM, int kBlockN>
  __device__ __forceinline__ int full_end(int m_block) const {
    return max(0, col_end(m_block * kBlockM)) / kBlockN;
  }

  // ---- backward: query blocks that see key block n_block (keys n_block * kBlockN ..) -----------
  // Row i sees column j iff j - hi < i <= j - lo.
  template <int kBlockM, int kBlockN>
  __device__ __forceinline__ int m_block_min(int n_block) const {
    return max(0, n_block * kBlockN - hi + 1) / kBlockM;
  }
  // Exclusive; <= m_block_min when no row sees the block (its dK, dV are zero).
  template <int kBlockM, int kBlockN>
  __device__ __forceinline__ int m_block_max(int n_block) const {
    const int last_col = min((n_block + 1) * kBlockN, seqlen_k) - 1;
    const int last_row = last_col - lo;  // the last row that sees the block's last column
    return last_row < 0 ? 0 : min(ceil_div(seqlen_q, kBlockM), last_row / kBlockM + 1);
  }
  // Whether some key block's backward CTA visits query block m_block (m_block_min <= m_block <
  // m_block_max for some n). The key blocks that do form a range starting at n_block_min(m_block)
  // (the conditions are n >= floor((m kBlockM + lo) / kBlockN), clamped at 0, which is
  // n_block_min, and n <= floor((m kBlockM + kBlockM - 2 + hi) / kBlockN)), so asking the first one
  // answers for all. Where none does, nobody writes the block's dQ (its rows see no key).
  template <int kBlockM, int kBlockN>
  __device__ __forceinline__ bool visited_by_key_blocks(int m_block) const {
    const int n = n_block_min<kBlockM, kBlockN>(m_block);
    return n * kBlockN < seqlen_k && m_block_min<kBlockM, kBlockN>(n) <= m_block &&
           m_block < m_block_max<kBlockM, kBlockN>(n);
  }
  // How many key blocks' backward CTAs visit query block m_block: the range from n_block_min, asked
  // block by block with the CTAs' own bounds (0 when the first does not visit it).
  template <int kBlockM, int kBlockN>
  __device__ __forceinline__ int key_blocks_visiting(int m_block) const {
    int count = 0;
    for (int n = n_block_min<kBlockM, kBlockN>(m_block);
         n * kBlockN < seqlen_k && m_block_min<kBlockM, kBlockN>(n) <= m_block && m_block < m_block_max<kBlockM, kBlockN>(n);
         ++n) {
      ++count;
    }
    return count;
  }
  // Whether tile (m_block, n_block) needs apply(): some valid row misses some column of it.
  template <int kBlockM, int kBlockN>
  __device__ __forceinline__ bool partial(int m_block, int n_block) const {
    return col_end(m_block * kBlockM) < (n_block + 1) * kBlockN ||
           col_begin(last_row<kBlockM>(m_block)) > n_block * kBlockN;
  }

  // ---- forward over explicit query rows [first_row, last_row] (GQA-packed tiles, where tile row
  // r holds query row r / group: the rows are not the tile's index range) -------------------------
  template <int kBlockN>
  __device__ __forceinline__ int n_block_min_rows(int first_row) const { return col_begin(first_row) / kBlockN; }
  template <int kBlockN>
  __device__ __forceinline__ int n_block_max_rows(int last_row) const {
    return ceil_div(max(0, col_end(last_row)), kBlockN);
  }
  template <int kBlockN>
  __device__ __forceinline__ int full_begin_rows(int last_row) const { return ceil_div(col_begin(last_row), kBlockN); }
  template <int kBlockN>
  __device__ __forceinline__ int full_end_rows(int first_row) const { return max(0, col_end(first_row)) / kBlockN; }

  // apply() for a thread whose fragment rows are given one by one: rows[mt][h] is the query row
  // of fragment row g + 8h of m-tile mt (the packed tile maps rows to queries by a division).
  template <int kMT, int kNT>
  __device__ __forceinline__ void apply_rows(float (&s)[kMT][kNT][4], const int (&rows)[kMT][2], int col0,
                                             float fill) const {
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int begin = col_begin(rows[mt][h]) - col0, end = col_end(rows[mt][h]) - col0;
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt) {
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int c = nt * 8 + e;
            if (c < begin || c >= end) s[mt][nt][2 * h + e] = fill;
          }
        }
      }
    }
  }

  // Sets the invisible entries of a score tile to `fill` (-inf before a softmax, 0 after an exp).
  // s[mt][nt][e]: the thread's C fragments of kMT x kNT stacked m16n8 tiles; row0 is the sequence
  // row of its fragment row g in m-tile 0 (lane / 4 included), col0 the sequence column of its
  // element 0 in n-tile 0 (2 * (lane % 4) included). Entry e sits at row row0 + 16 mt + 8 (e / 2),
  // column col0 + 8 nt + e % 2.
  template <int kMT, int kNT>
  __device__ __forceinline__ void apply(float (&s)[kMT][kNT][4], int row0, int col0, float fill) const {
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int row = row0 + mt * 16 + h * 8;
        const int begin = col_begin(row) - col0, end = col_end(row) - col0;
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt) {
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int c = nt * 8 + e;
            if (c < begin || c >= end) s[mt][nt][2 * h + e] = fill;
          }
        }
      }
    }
  }
};

}  // namespace flashsdpa
