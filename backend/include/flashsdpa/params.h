// params.h: the one POD contract between the host (backend/) and the kernels (cuda/).
//
// Filled in exactly one place (backend/src/api.cpp), passed to kernels by __grid_constant__ value.
// No torch, no CUDA runtime types: this header compiles in a plain C++ translation unit.
//
// Layout convention (SDPA's): q (B, Hq, Sq, Dqk), k (B, Hkv, Sk, Dqk), v (B, Hkv, Sk, Dv),
// o (B, Hq, Sq, Dv). Every tensor carries its own element strides for batch, head and row; the last
// dimension has unit stride (SDPA's transposed views qualify, so there is never a hidden copy).
//
// Varlen (packed) mode: when cu_seqlens_q != nullptr, tensors are (total, H, D); the batch strides
// are ignored and batch b owns rows [cu_seqlens_q[b], cu_seqlens_q[b+1]) of q/o/lse (likewise k/v
// with cu_seqlens_k, optionally truncated to seqused_k[b] keys). seqlen_q / seqlen_k then hold the
// maxima over the batch, which size the grid.
#pragma once

#include <cstdint>

namespace flashsdpa {

enum class DType : int32_t { kFloat16 = 0, kBFloat16 = 1 };

// Which (query row, key column) pairs may attend. Both alignments of SDPA exist:
//   kTopLeft:     key j visible to query i iff j <= i                   (SDPA is_causal=True)
//   kBottomRight: key j visible to query i iff j <= i + (Sk - Sq)       (causal_lower_right, KV cache)
// In varlen mode Sq/Sk are the per-sequence lengths.
enum class CausalMode : int32_t { kNone = 0, kTopLeft = 1, kBottomRight = 2 };

struct AttnFwdParams {
  const void* q;
  const void* k;
  const void* v;
  void* o;
  float* lse;  // natural log, float32; (B, Hq, Sq) dense or (Hq, total_q) varlen, via the strides below

  int64_t q_batch_stride, q_head_stride, q_row_stride;
  int64_t k_batch_stride, k_head_stride, k_row_stride;
  int64_t v_batch_stride, v_head_stride, v_row_stride;
  int64_t o_batch_stride, o_head_stride, o_row_stride;
  int64_t lse_batch_stride, lse_head_stride, lse_row_stride;

  int32_t batch;
  int32_t heads_q;
  int32_t heads_kv;      // heads_q % heads_kv == 0; query head h reads kv head h / (heads_q / heads_kv)
  int32_t seqlen_q;      // dense: the length; varlen: the maximum over the batch
  int32_t seqlen_k;
  int32_t head_dim_qk;   // multiple of 8, <= 256
  int32_t head_dim_v;    // multiple of 8, <= 256

  const int32_t* cu_seqlens_q;  // nullptr: dense. Else int32[batch + 1], device memory
  const int32_t* cu_seqlens_k;  // set iff cu_seqlens_q is set
  const int32_t* seqused_k;     // optional int32[batch]: keys actually used per sequence (varlen or dense)

  float scale;       // softmax scale applied to q.k
  float scale_log2;  // scale * log2(e): scores go through exp2, so the multiply folds into one FFMA

  CausalMode causal;
  DType dtype;
  // Facts of the launch device, filled by the host launcher (backend/src/launch.cpp):
  int32_t num_sms;           // schedulers may size persistent grids from it
  int32_t cc_major;          // compute capability major: sm_90 code takes more shared memory
  int32_t smem_optin_bytes;  // dynamic shared memory a block may opt in to: picks the tiles
};

// Backward: dO, and the forward's O and LSE in; dQ, dK, dV out. The host reports the workspace
// bytes (bwd_workspace_bytes) and the caller allocates them; the kernels zero what they need.
struct AttnBwdParams : AttnFwdParams {
  const void* dout;
  void* dq;
  void* dk;
  void* dv;

  int64_t dout_batch_stride, dout_head_stride, dout_row_stride;
  int64_t dq_batch_stride, dq_head_stride, dq_row_stride;
  int64_t dk_batch_stride, dk_head_stride, dk_row_stride;
  int64_t dv_batch_stride, dv_head_stride, dv_row_stride;

  // Workspace, carved by the host from one caller-allocated buffer (see workspace.h):
  float* dq_accum;  // float32 dQ accumulator, rows x Hq x head_dim_qk_rounded, zeroed by the preprocess kernel
  float* delta;     // float32 rowsum(dO * O), rows x Hq
  int64_t dq_accum_row_stride, dq_accum_head_stride, dq_accum_batch_stride;
  int64_t delta_row_stride, delta_head_stride, delta_batch_stride;

  bool deterministic;  // reserved: the current kernels accumulate dQ with fp32 atomics
};

}  // namespace flashsdpa
