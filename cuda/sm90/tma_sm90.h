// tma_sm90.h: TMA descriptors (CUtensorMap) for the Hopper family, encoded on the host.
//
// cuTensorMapEncodeTiled is a driver API function; it is reached through the runtime's
// cudaGetDriverEntryPointByVersion, so _C links no libcuda (the driver is loaded by the runtime
// anyway). Encoding is a pure host computation (no GPU round trip, no synchronization), so a
// call captured into a CUDA graph keeps the descriptors it was captured with, by value, in the
// kernel's parameters.
//
// A (B, H, S, D) tensor with element strides (row, head, batch) and unit stride along D becomes a
// 4-D map {D, S, H, B}; boxes are 64 columns (128 bytes: the 128-byte swizzle's span) x `box_rows`
// rows of one (head, batch). Reads outside {D, S} are zero-filled and writes there are dropped,
// which is how ragged sequence ends and head dims below the bucket need no code in the kernel.
// TMA needs a 16-byte-aligned base and strides that are multiples of 16 bytes (below 2^40):
// tma_compatible() says whether a tensor qualifies; others take the portable family.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <initializer_list>
#include <mutex>

#include "flashsdpa/params.h"

namespace flashsdpa {

struct TmaTensor4d {
  const void* ptr;
  int64_t dim, rows, heads, batch;            // sizes, innermost first
  int64_t row_stride, head_stride, batch_stride;  // in elements (16-bit)
};

// The tensors of an attention call as TMA sees them: rows are queries (q, o, dout) or keys (k, v).
// Varlen (packed rows): one batch of total_q / total_k rows; a sequence's tiles start at its row
// offset (SeqlenInfo), and a tile's rows past the sequence read the next one's (masked or never
// stored by the kernel), zero-filled only past the last.
inline int64_t tma_rows_q(const AttnFwdParams& p) { return p.cu_seqlens_q != nullptr ? p.total_q : p.seqlen_q; }
inline int64_t tma_rows_k(const AttnFwdParams& p) { return p.cu_seqlens_q != nullptr ? p.total_k : p.seqlen_k; }
inline int64_t tma_batches(const AttnFwdParams& p) { return p.cu_seqlens_q != nullptr ? 1 : p.batch; }
inline TmaTensor4d tma_q(const AttnFwdParams& p) {
  return {p.q, p.head_dim_qk, tma_rows_q(p), p.heads_q, tma_batches(p), p.q_row_stride, p.q_head_stride, p.q_batch_stride};
}
inline TmaTensor4d tma_k(const AttnFwdParams& p) {
  return {p.k, p.head_dim_qk, tma_rows_k(p), p.heads_kv, tma_batches(p), p.k_row_stride, p.k_head_stride, p.k_batch_stride};
}
inline TmaTensor4d tma_v(const AttnFwdParams& p) {
  return {p.v, p.head_dim_v, tma_rows_k(p), p.heads_kv, tma_batches(p), p.v_row_stride, p.v_head_stride, p.v_batch_stride};
}
inline TmaTensor4d tma_o(const AttnFwdParams& p) {
  return {p.o, p.head_dim_v, tma_rows_q(p), p.heads_q, tma_batches(p), p.o_row_stride, p.o_head_stride, p.o_batch_stride};
}
inline TmaTensor4d tma_dout(const AttnBwdParams& p) {
  return {p.dout, p.head_dim_v, tma_rows_q(p), p.heads_q, tma_batches(p), p.dout_row_stride, p.dout_head_stride,
          p.dout_batch_stride};
}

// d_bias, the bias's gradient (B, Hq, Sq, Sk): the sm90 backward's dense layout only (its varlen
// calls take the portable family), so rows are the call's queries and the innermost dim its keys.
inline TmaTensor4d tma_d_bias(const AttnBwdParams& p) {
  return {p.d_bias, p.seqlen_k, p.seqlen_q, p.heads_q, p.batch, p.d_bias_row_stride, p.d_bias_head_stride,
          p.d_bias_batch_stride};
}

// The additive bias as the backward's staging reads it: (B, Hq, Sq, Sk) with the strides the params
// carry, a head or batch dim whose stride is 0 (broadcast) taken as size 1. A zero row stride (a
// bias broadcast over queries) is not a TMA layout: tma_compatible refuses it.
inline TmaTensor4d tma_bias(const AttnBwdParams& p) {
  const ScoreMods& m = p.mods;
  return {m.bias, p.seqlen_k, p.seqlen_q, m.bias_head_stride == 0 ? 1 : p.heads_q, m.bias_batch_stride == 0 ? 1 : p.batch,
          m.bias_row_stride, m.bias_head_stride, m.bias_batch_stride};
}

inline bool tma_stride_ok(int64_t stride_elems, int64_t size) {
  if (size <= 1) return true;  // never stepped over: replaced by a valid stride when encoding
  const int64_t bytes = stride_elems * 2;
  return bytes > 0 && bytes % 16 == 0 && bytes < (int64_t{1} << 40);
}

inline bool tma_compatible(const TmaTensor4d& t) {
  return reinterpret_cast<uintptr_t>(t.ptr) % 16 == 0 && tma_stride_ok(t.row_stride, t.rows) &&
         tma_stride_ok(t.head_stride, t.heads) && tma_stride_ok(t.batch_stride, t.batch);
}

using EncodeTiledFn = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                   const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                   CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

inline EncodeTiledFn encode_tiled_fn() {
  static EncodeTiledFn fn = nullptr;
  static std::once_flag once;
  std::call_once(once, [] {
    void* ptr = nullptr;
    cudaDriverEntryPointQueryResult status;
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &ptr, 12000, cudaEnableDefault, &status) ==
            cudaSuccess &&
        status == cudaDriverEntryPointSuccess) {
      fn = reinterpret_cast<EncodeTiledFn>(ptr);
    }
  });
  return fn;
}

inline cudaError_t encode_tma_4d(CUtensorMap* map, const TmaTensor4d& t, bool bf16, int box_rows);

// Encodes several descriptors; the first refusal is returned (cudaErrorNotSupported: the caller
// falls back to another family before anything ran).
struct TmaEncoding {
  CUtensorMap* map;
  TmaTensor4d tensor;
  int box_rows;
};
inline cudaError_t encode_tma_all(std::initializer_list<TmaEncoding> encodings, bool bf16) {
  for (const TmaEncoding& e : encodings) {
    const cudaError_t err = encode_tma_4d(e.map, e.tensor, bf16, e.box_rows);
    if (err != cudaSuccess) return err;
  }
  return cudaSuccess;
}

inline cudaError_t encode_tma_4d(CUtensorMap* map, const TmaTensor4d& t, bool bf16, int box_rows) {
  const EncodeTiledFn encode = encode_tiled_fn();
  if (encode == nullptr) return cudaErrorNotSupported;
  // Dimensions of size 1 are never stepped over; any valid stride stands in for whatever the
  // caller's tensor has there (torch leaves such strides arbitrary).
  const int64_t row_bytes = t.rows > 1 ? t.row_stride * 2 : ((t.dim * 2 + 15) / 16) * 16;
  const int64_t head_bytes = t.heads > 1 ? t.head_stride * 2 : row_bytes * t.rows;
  const int64_t batch_bytes = t.batch > 1 ? t.batch_stride * 2 : head_bytes * t.heads;
  const cuuint64_t dims[4] = {static_cast<cuuint64_t>(t.dim), static_cast<cuuint64_t>(t.rows),
                              static_cast<cuuint64_t>(t.heads), static_cast<cuuint64_t>(t.batch)};
  const cuuint64_t strides[3] = {static_cast<cuuint64_t>(row_bytes), static_cast<cuuint64_t>(head_bytes),
                                 static_cast<cuuint64_t>(batch_bytes)};
  const cuuint32_t box[4] = {64, static_cast<cuuint32_t>(box_rows), 1, 1};
  const cuuint32_t elem_strides[4] = {1, 1, 1, 1};
  // The encode is a driver call that wants a current context, which a thread that has only run
  // cached allocations and launches does not have yet: autograd's device thread at a process's
  // first backward, a new Python thread (torch's device guard skips cudaSetDevice when the device
  // already reads as current). Its CUDA_ERROR_INVALID_CONTEXT sent such calls to the portable
  // family without a word (compute-sanitizer reported it, session 15). So once per thread, and
  // again should the error come back, cudaSetDevice makes the current device's primary context
  // (torch's) current.
  thread_local bool context_made_current = false;
  auto make_context_current = [] {
    int device = 0;
    return cudaGetDevice(&device) == cudaSuccess && cudaSetDevice(device) == cudaSuccess;
  };
  if (!context_made_current) context_made_current = make_context_current();
  auto run = [&] {
    return encode(map, bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 4,
                  const_cast<void*>(t.ptr), dims, strides, box, elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
                  CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  };
  CUresult r = run();
  if (r == CUDA_ERROR_INVALID_CONTEXT && make_context_current()) r = run();
  return r == CUDA_SUCCESS ? cudaSuccess : cudaErrorNotSupported;
}

}  // namespace flashsdpa
