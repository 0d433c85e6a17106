// split_combine.cuh: the split-KV combine kernel, shared by every family's decode path. A decode
// kernel run with num_splits > 1 leaves, per (split, batch, query head, query row), a normalized
// float32 output and its LSE in the workspace (params.h: o_accum / lse_accum); this merges the
// splits of each row (lse_weight / merged_lse of common/softmax.cuh) into o (Elem) and lse.
//
// One warp per row, 4 rows per 128-thread CTA: a row's partials are num_splits x Dv floats (33 x
// 128 x 4 = 17 KB for B 1, 8k keys on an H200), read once as float4 per lane, so the kernel moves
// B * Hq * Sq * (splits * (Dv + 1) * 4 + Dv * 2) bytes: 0.55 MB for B 1, Hq 32, 33 splits, i.e.
// ~1 us at L2 speed plus the launch, provided the loads overlap: with 32 rows there are only 8
// CTAs, so latency, not bandwidth, decides. The weights are computed once per split (lane s % 32),
// and each lane keeps 8 splits' loads in flight (session 7, prepared: a split per iteration, with
// its weight recomputed and a branch on it, made ~32 dependent L2 round trips per row; B 1 x 8k
// decode took 25.8 us of GPU time against cuDNN's 15.5, the split kernel ~8 us by its bytes).
#pragma once

#include <cmath>
#include <cstdint>

#include <cuda_runtime.h>

#include "common/ptx.cuh"
#include "common/softmax.cuh"
#include "flashsdpa/params.h"

namespace flashsdpa {

constexpr int kCombineRowsPerCta = 4;

template <typename Elem>
__global__ void __launch_bounds__(32 * kCombineRowsPerCta)
    flashsdpa_split_combine_kernel(const __grid_constant__ AttnFwdParams p) {
  const int lane = threadIdx.x & 31;
  const int64_t rows = static_cast<int64_t>(p.batch) * p.heads_q * p.seqlen_q;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kCombineRowsPerCta + (threadIdx.x >> 5);
  if (row >= rows) return;
  // row = (b * Hq + h) * Sq + i, split s at s * rows + row (the decode kernel's partial_row).
  const int i = static_cast<int>(row % p.seqlen_q);
  const int h = static_cast<int>((row / p.seqlen_q) % p.heads_q);
  const int b = static_cast<int>(row / (static_cast<int64_t>(p.seqlen_q) * p.heads_q));

  // Split s's weight lives in lane s % 32, register s / 32 (kMaxSplits = 128: 4 registers).
  static_assert(kMaxSplits % 32 == 0 && kMaxSplits <= 128, "four weight registers per lane");
  const int splits = min(p.num_splits, kMaxSplits);
  float lse_part[kMaxSplits / 32];
  float max_lse = -INFINITY;
#pragma unroll
  for (int k = 0; k < kMaxSplits / 32; ++k) {
    const int s = 32 * k + lane;
    lse_part[k] = s < splits ? p.lse_accum[s * rows + row] : -INFINITY;
    max_lse = fmaxf(max_lse, lse_part[k]);
  }
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) max_lse = fmaxf(max_lse, __shfl_xor_sync(0xffffffffu, max_lse, offset));
  float weight[kMaxSplits / 32];
  float weight_sum = 0.f;
#pragma unroll
  for (int k = 0; k < kMaxSplits / 32; ++k) {
    weight[k] = lse_weight(lse_part[k], max_lse);  // 0 for an empty split and past the last
    weight_sum += weight[k];
  }
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) weight_sum += __shfl_xor_sync(0xffffffffu, weight_sum, offset);
  const float inv_sum = weight_sum > 0.f ? 1.f / weight_sum : 0.f;

  Elem* out = static_cast<Elem*>(p.o) + b * p.o_batch_stride + h * p.o_head_stride + static_cast<int64_t>(i) * p.o_row_stride;
  // Dv is a multiple of 8: each lane owns 4 columns per 128 (an 8-byte store of 4 Elems). The
  // splits go 8 at a time: 8 independent 16-byte loads in flight per lane, then their sum. One
  // split per iteration made every load wait for the previous one's sum (and its branch): ~32
  // dependent L2 round trips per row at B 1, 8k keys (32 splits). Every lane runs every
  // iteration (the weights come by __shfl_sync over the whole warp): with Dv < 128, or a last
  // partial group of 128 columns, the lanes past Dv load and store nothing. Looping only the lanes
  // with columns left the shuffle's other lanes absent (undefined: a wrong output at Dv 8, found
  // by the GPU fuzz test, session 8).
  for (int c0 = 0; c0 < p.head_dim_v; c0 += 128) {
    const int c = c0 + lane * 4;
    const bool has_columns = c < p.head_dim_v;
    float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
    for (int s0 = 0; s0 < splits; s0 += 8) {
      // The 8 splits' weights share a register index (s0 is a multiple of 8, 32 of 8).
      const int k = s0 >> 5;
      const float wk = k == 0 ? weight[0] : k == 1 ? weight[1] : k == 2 ? weight[2] : weight[3];
      float4 x[8];
#pragma unroll
      for (int u = 0; u < 8; ++u) {
        const int s = s0 + u;
        x[u] = has_columns && s < splits ? *reinterpret_cast<const float4*>(p.o_accum + (s * rows + row) * p.head_dim_v + c)
                          : make_float4(0.f, 0.f, 0.f, 0.f);
      }
#pragma unroll
      for (int u = 0; u < 8; ++u) {
        // An empty split (weight 0) adds nothing, whatever its partial holds.
        const float w = __shfl_sync(0xffffffffu, wk, (s0 & 31) + u);
        if (w != 0.f) acc.x += w * x[u].x, acc.y += w * x[u].y, acc.z += w * x[u].z, acc.w += w * x[u].w;
      }
    }
    uint2 packed;
    packed.x = ElemTraits<Elem>::pack(acc.x * inv_sum, acc.y * inv_sum);
    packed.y = ElemTraits<Elem>::pack(acc.z * inv_sum, acc.w * inv_sum);
    if (has_columns) *reinterpret_cast<uint2*>(out + c) = packed;
  }
  if (lane == 0 && p.lse != nullptr) {
    p.lse[b * p.lse_batch_stride + h * p.lse_head_stride + static_cast<int64_t>(i) * p.lse_row_stride] =
        merged_lse(max_lse, weight_sum, INFINITY);
  }
}

template <typename Elem>
cudaError_t launch_split_combine(const AttnFwdParams& params, cudaStream_t stream) {
  const int64_t rows = static_cast<int64_t>(params.batch) * params.heads_q * params.seqlen_q;
  const int64_t grid = (rows + kCombineRowsPerCta - 1) / kCombineRowsPerCta;
  if (grid == 0) return cudaSuccess;
  if (grid > 0x7fffffff) return cudaErrorInvalidConfiguration;
  flashsdpa_split_combine_kernel<Elem><<<static_cast<unsigned>(grid), 32 * kCombineRowsPerCta, 0, stream>>>(params);
  return cudaGetLastError();
}

}  // namespace flashsdpa
