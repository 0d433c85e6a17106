// dense_fwd_cuda.cuh: the dev timelines' forward problem (scripts/dev/fwd_timeline.cu,
// fwd512_timeline.cu, decode_timeline.cu): q, k, v, o and LSE allocated, q / k / v filled with
// fill_random, and AttnFwdParams set for dense bf16 inputs in either memory order, no mask, the
// launch device's facts. The caller adds the mask, a workspace or the decode fields.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "check_cuda.cuh"
#include "fill_cuda.cuh"
#include "flashsdpa/params.h"

struct DenseFwd {
  __nv_bfloat16 *q = nullptr, *k = nullptr, *v = nullptr, *o = nullptr;
  float* lse = nullptr;
  flashsdpa::AttnFwdParams p{};
  void release() {
    for (void* t : {(void*)q, (void*)k, (void*)v, (void*)o, (void*)lse}) CHECK_CUDA(cudaFree(t));
  }
};

// bshd: (B, S, H, D) memory behind (B, H, S, D) views, as the benchmark's inputs and a KV cache;
// else (B, H, S, D) contiguous. LSE (B, Hq, Sq).
inline DenseFwd make_dense_fwd(int B, int Hq, int Hkv, int Sq, int Sk, int D, bool bshd) {
  using Elem = __nv_bfloat16;
  DenseFwd r;
  const int64_t nq = int64_t(B) * Hq * Sq * D, nkv = int64_t(B) * Hkv * Sk * D;
  CHECK_CUDA(cudaMalloc(&r.q, nq * sizeof(Elem)));
  CHECK_CUDA(cudaMalloc(&r.o, nq * sizeof(Elem)));
  CHECK_CUDA(cudaMalloc(&r.k, nkv * sizeof(Elem)));
  CHECK_CUDA(cudaMalloc(&r.v, nkv * sizeof(Elem)));
  CHECK_CUDA(cudaMalloc(&r.lse, int64_t(B) * Hq * Sq * sizeof(float)));
  fill_random<Elem><<<1024, 256>>>(r.q, nq, 1);
  fill_random<Elem><<<1024, 256>>>(r.k, nkv, 2);
  fill_random<Elem><<<1024, 256>>>(r.v, nkv, 3);
  flashsdpa::AttnFwdParams& p = r.p;
  p.q = r.q, p.k = r.k, p.v = r.v, p.o = r.o, p.lse = r.lse;
  p.q_batch_stride = p.o_batch_stride = int64_t(Hq) * Sq * D;
  p.k_batch_stride = p.v_batch_stride = int64_t(Hkv) * Sk * D;
  if (bshd) {
    p.q_head_stride = p.o_head_stride = p.k_head_stride = p.v_head_stride = D;
    p.q_row_stride = p.o_row_stride = int64_t(Hq) * D;
    p.k_row_stride = p.v_row_stride = int64_t(Hkv) * D;
  } else {
    p.q_head_stride = p.o_head_stride = int64_t(Sq) * D;
    p.k_head_stride = p.v_head_stride = int64_t(Sk) * D;
    p.q_row_stride = p.o_row_stride = p.k_row_stride = p.v_row_stride = D;
  }
  p.lse_batch_stride = int64_t(Hq) * Sq, p.lse_head_stride = Sq, p.lse_row_stride = 1;
  p.batch = B, p.heads_q = Hq, p.heads_kv = Hkv, p.seqlen_q = Sq, p.seqlen_k = Sk;
  p.head_dim_qk = p.head_dim_v = p.head_dim_bucket = D;
  p.total_q = p.total_k = -1;
  p.scale = 1.f / std::sqrt(float(D)), p.scale_log2 = p.scale * 1.4426950408889634f;
  p.mask = flashsdpa::MaskSpec{-1, -1, flashsdpa::MaskAlign::kTopLeft};
  p.dtype = flashsdpa::DType::kBFloat16;
  p.page_shift = -1;
  int sms = 0;
  CHECK_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  p.num_sms = sms, p.cc_major = 9, p.smem_optin_bytes = 227 * 1024;
  return r;
}
