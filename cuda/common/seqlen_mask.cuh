// seqlen_mask.cuh: where one (batch, head) problem lives, and which keys each query may see.
//
// SeqlenInfo resolves dense vs varlen (packed) layouts into per-sequence lengths and row offsets.
// AttentionMask is the masking policy: it answers the loop bounds (which key blocks a query block
// touches, which query blocks a key block touches, and which of those need element-wise masking)
// and applies the element-wise mask to a score fragment. Kernels ask it; they never test causality
// themselves.
#pragma once

#include "flashsdpa/params.h"

namespace flashsdpa {

struct SeqlenInfo {
  int seqlen_q;
  int seqlen_k;
  int64_t q_row_offset;  // rows of q/o/lse/dq before this sequence (varlen), else 0
  int64_t k_row_offset;  // rows of k/v/dk/dv before this sequence (varlen), else 0

  __device__ __forceinline__ SeqlenInfo(const AttnFwdParams& p, int batch) {
    if (p.cu_seqlens_q != nullptr) {
      q_row_offset = p.cu_seqlens_q[batch];
      k_row_offset = p.cu_seqlens_k[batch];
      seqlen_q = p.cu_seqlens_q[batch + 1] - p.cu_seqlens_q[batch];
      seqlen_k = p.cu_seqlens_k[batch + 1] - p.cu_seqlens_k[batch];
    } else {
      q_row_offset = 0;
      k_row_offset = 0;
      seqlen_q = p.seqlen_q;
      seqlen_k = p.seqlen_k;
    }
    if (p.seqused_k != nullptr) seqlen_k = min(seqlen_k, p.seqused_k[batch]);
  }
};

// Key column j is visible to query row i iff j < seqlen_k and, when causal, j <= i + diag_offset,
// where diag_offset = 0 (top-left) or seqlen_k - seqlen_q (bottom-right).
struct AttentionMask {
  int seqlen_q;
  int seqlen_k;
  int diag_offset;
  bool causal;

  __device__ __forceinline__ AttentionMask(const SeqlenInfo& s, CausalMode mode)
      : seqlen_q(s.seqlen_q),
        seqlen_k(s.seqlen_k),
        diag_offset(mode == CausalMode::kBottomRight ? s.seqlen_k - s.seqlen_q : 0),
        causal(mode != CausalMode::kNone) {}

  // Last visible column + 1 for query row `row` (may be <= 0: the row sees nothing).
  __device__ __forceinline__ int col_limit(int row) const {
    return causal ? min(seqlen_k, row + diag_offset + 1) : seqlen_k;
  }

  // Key blocks [n_min, n_max) that query block m_block (rows m_block*kBlockM ..) touches.
  template <int kBlockM, int kBlockN>
  __device__ __forceinline__ int n_block_max(int m_block) const {
    const int n_blocks = (seqlen_k + kBlockN - 1) / kBlockN;
    if (!causal) return n_blocks;
    const int last_row = min((m_block + 1) * kBlockM, seqlen_q) - 1;
    const int limit = last_row + diag_offset + 1;  // exclusive column bound of the block's last row
    return limit <= 0 ? 0 : min(n_blocks, (limit + kBlockN - 1) / kBlockN);
  }
  // The first `n_block_max - n_unmasked_end` blocks from the top need no element-wise masking.
  // Returns the exclusive end of the blocks that are fully visible to every row of the query block
  // (so the mainloop runs blocks >= this one with apply(), and the rest without).
  template <int kBlockM, int kBlockN>
  __device__ __forceinline__ int n_block_unmasked_end(int m_block) const {
    const int full_cols = causal ? min(seqlen_k, m_block * kBlockM + diag_offset + 1) : seqlen_k;
    return full_cols <= 0 ? 0 : full_cols / kBlockN;  // blocks entirely below every row's limit
  }

  // Query blocks [m_min, m_blocks) that key block n_block touches (backward's outer loop is over keys).
  template <int kBlockM, int kBlockN>
  __device__ __forceinline__ int m_block_min(int n_block) const {
    if (!causal) return 0;
    // first row i with n_block*kBlockN <= i + diag_offset
    const int first_row = max(0, n_block * kBlockN - diag_offset);
    return first_row / kBlockM;
  }

  // Whether (row, col) is visible. Kernels call this on the fragments of blocks that need masking.
  __device__ __forceinline__ bool visible(int row, int col) const { return col < col_limit(row); }
};

}  // namespace flashsdpa
