// seqlen.cuh: where one (batch, head) problem lives. SeqlenInfo resolves the dense and the varlen
// (packed) layouts into the lengths of one sequence and the rows before it; kernels index every
// tensor with it and never read cu_seqlens themselves.
#pragma once

#include "flashsdpa/params.h"

namespace flashsdpa {

__host__ __device__ constexpr int ceil_div(int a, int b) { return (a + b - 1) / b; }

// Offsets and lengths come from device memory the host checks only on request (reading it would
// synchronise the stream: python/flashsdpa/validation.py), so every value is clamped here, the one
// place kernels read them: a sequence's rows always lie inside the packed tensors (start and end in
// [0, total], end >= start), and its lengths never exceed the maxima that sized every kernel's grid
// (so the forward, the backward's kernels and their workspace rows all see the same sequence). On
// valid metadata every clamp is the identity; on bad metadata results are wrong but memory is safe.
struct SeqlenInfo {
  int seqlen_q;
  int seqlen_k;
  int64_t q_row_offset;  // rows of q/o/lse/dq before this sequence (varlen), else 0
  int64_t k_row_offset;  // rows of k/v/dk/dv before this sequence (varlen), else 0

  __device__ __forceinline__ SeqlenInfo(const AttnFwdParams& p, int batch) {
    if (p.cu_seqlens_q != nullptr) {
      q_row_offset = clamp_row(p.cu_seqlens_q[batch], 0, p.total_q);
      k_row_offset = clamp_row(p.cu_seqlens_k[batch], 0, p.total_k);
      seqlen_q = length(q_row_offset, clamp_row(p.cu_seqlens_q[batch + 1], q_row_offset, p.total_q), p.seqlen_q);
      seqlen_k = length(k_row_offset, clamp_row(p.cu_seqlens_k[batch + 1], k_row_offset, p.total_k), p.seqlen_k);
    } else {
      q_row_offset = 0;
      k_row_offset = 0;
      seqlen_q = p.seqlen_q;
      seqlen_k = p.seqlen_k;
    }
    if (p.seqused_k != nullptr) {
      // In int64: the entry is device data the host never read, the sum must not wrap.
      const int64_t used = static_cast<int64_t>(p.seqused_k[batch]) + p.seqused_k_add;
      seqlen_k = static_cast<int>(min(static_cast<int64_t>(seqlen_k), max(used, int64_t{0})));
    }
  }

 private:
  __device__ __forceinline__ static int64_t clamp_row(int32_t offset, int64_t lo, int64_t hi) {
    return min(max(static_cast<int64_t>(offset), lo), hi);
  }
  // end - start, at most the grid's maximum (fits in int: both come from int32 values).
  __device__ __forceinline__ static int length(int64_t start, int64_t end, int32_t longest) {
    return static_cast<int>(min(end - start, static_cast<int64_t>(longest)));
  }
};

// In varlen mode batch strides are ignored: the row offsets from cu_seqlens place the sequence.
__device__ __forceinline__ int64_t batch_offset(const AttnFwdParams& p, int batch, int64_t stride) {
  return p.cu_seqlens_q != nullptr ? 0 : static_cast<int64_t>(batch) * stride;
}

}  // namespace flashsdpa
