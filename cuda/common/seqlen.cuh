// seqlen.cuh: where one (batch, head) problem lives. SeqlenInfo resolves the dense and the varlen
// (packed) layouts into the lengths of one sequence and the rows before it; kernels index every
// tensor with it and never read cu_seqlens themselves.
#pragma once

#include "flashsdpa/params.h"

namespace flashsdpa {

__host__ __device__ constexpr int ceil_div(int a, int b) { return (a + b - 1) / b; }

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

// In varlen mode batch strides are ignored: the row offsets from cu_seqlens place the sequence.
__device__ __forceinline__ int64_t batch_offset(const AttnFwdParams& p, int batch, int64_t stride) {
  return p.cu_seqlens_q != nullptr ? 0 : static_cast<int64_t>(batch) * stride;
}

}  // namespace flashsdpa
