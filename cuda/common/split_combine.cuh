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

#include "common/launch.cuh"
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
  // Launched programmatically (sm_90, launch_split_combine), this CTA may be resident while the
  // decode kernel still runs: wait for its completion (and its partials' visibility) before the
  // first read. Launched plainly, a no-op.
  grid_dependency_wait();

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
  // The weights go through shared memory (this warp's row of kMaxSplits floats, 2 KB a CTA), not
  // by __shfl_sync inside the column loop below: with Dv < 128 (or a last partial group of 128
  // columns) only some lanes run that loop, and a shuffle from an absent lane is undefined (a wrong
  // output at Dv 8, found by the GPU fuzz test, session 8). (A column loop every lane runs, with
  // the shuffles kept, made ptxas sink each load into its use: one in flight, 40 registers.)
  __shared__ float weight_smem[kCombineRowsPerCta][kMaxSplits];
  float* const my_weights = weight_smem[threadIdx.x >> 5];
#pragma unroll
  for (int k = 0; k < kMaxSplits / 32; ++k) my_weights[32 * k + lane] = weight[k];
  __syncwarp();

  Elem* out = static_cast<Elem*>(p.o) + b * p.o_batch_stride + h * p.o_head_stride + static_cast<int64_t>(i) * p.o_row_stride;
  // Dv is a multiple of 8: each lane owns 4 columns per 128 (an 8-byte store of 4 Elems). The
  // splits go 8 at a time: 8 independent 16-byte loads in flight per lane, then their sum. One
  // split per iteration made every load wait for the previous one's sum (and its branch): ~32
  // dependent L2 round trips per row at B 1, 8k keys (32 splits).
  for (int c = lane * 4; c < p.head_dim_v; c += 128) {
    float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
    for (int s0 = 0; s0 < splits; s0 += 8) {
      float4 x[8];
#pragma unroll
      for (int u = 0; u < 8; ++u) {
        const int s = s0 + u;
        x[u] = s < splits ? *reinterpret_cast<const float4*>(p.o_accum + (s * rows + row) * p.head_dim_v + c)
                          : make_float4(0.f, 0.f, 0.f, 0.f);
      }
      // Keeps the 8 loads ahead of their uses: without it ptxas sinks each load into its FMAs
      // (one in flight, 52 registers; with it 80, the 8 loads back to back in the SASS).
      __syncwarp(__activemask());
#pragma unroll
      for (int u = 0; u < 8; ++u) {
        // An empty split (weight 0) adds nothing, whatever its partial holds.
        const float w = my_weights[s0 + u];  // s0 + u < kMaxSplits: s0 <= splits - 1 - (splits - 1) % 8
        if (w != 0.f) acc.x += w * x[u].x, acc.y += w * x[u].y, acc.z += w * x[u].z, acc.w += w * x[u].w;
      }
    }
    uint2 packed;
    packed.x = ElemTraits<Elem>::pack(acc.x * inv_sum, acc.y * inv_sum);
    packed.y = ElemTraits<Elem>::pack(acc.z * inv_sum, acc.w * inv_sum);
    *reinterpret_cast<uint2*>(out + c) = packed;
  }
  if (lane == 0 && p.lse != nullptr) {
    p.lse[b * p.lse_batch_stride + h * p.lse_head_stride + static_cast<int64_t>(i) * p.lse_row_stride] =
        merged_lse(max_lse, weight_sum, INFINITY);
  }
}

// Experiment (session 17, compiled only; kernel_notes_decode.md, "The combine in one round trip"):
// one CTA of kCombineWarps warps per row, warp w merging its contiguous share of the splits, so a
// row's partials are all loaded at once (33 splits: 5 per warp, one batch) instead of 8 splits per
// batch one after the other (5 dependent L2 round trips, after the LSEs' own), and the LSE loads
// overlap the partials' (issued first: they do not need the weights). The warps' sums meet in
// shared memory, in warp order (the sum's order, hence every bit, fixed). Selected by
// -DFLASHSDPA_COMBINE_ROW_CTA=1 for the A/B (scripts/dev/combine_ab.sh); the default build keeps
// the kernel above.
#ifndef FLASHSDPA_COMBINE_ROW_CTA
#define FLASHSDPA_COMBINE_ROW_CTA 0
#endif
constexpr int kCombineWarps = 8;
constexpr int kCombineBatch = 8;  // a warp's splits in flight per lane (16-byte loads)

template <typename Elem>
__global__ void __launch_bounds__(32 * kCombineWarps)
    flashsdpa_split_combine_row_kernel(const __grid_constant__ AttnFwdParams p) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t rows = static_cast<int64_t>(p.batch) * p.heads_q * p.seqlen_q;
  const int64_t row = blockIdx.x;  // the grid is `rows` CTAs
  const int i = static_cast<int>(row % p.seqlen_q);
  const int h = static_cast<int>((row / p.seqlen_q) % p.heads_q);
  const int b = static_cast<int>(row / (static_cast<int64_t>(p.seqlen_q) * p.heads_q));
  grid_dependency_wait();  // (programmatic launch) the decode kernel's partials are complete

  const int splits = min(p.num_splits, kMaxSplits);
  const int per_warp = (splits + kCombineWarps - 1) / kCombineWarps;
  const int s_begin = min(splits, warp * per_warp), s_end = min(splits, s_begin + per_warp);
  __shared__ float lse_smem[kMaxSplits];
  __shared__ float4 part_smem[kCombineWarps][32];
  static_assert(32 * kCombineWarps >= kMaxSplits, "one LSE per thread");

  // This warp's first batch of partials for column chunk 0, issued before the LSEs are known.
  const int c0 = lane * 4;
  float4 x[kCombineBatch];
  auto load_batch = [&](int s0, int c) {
#pragma unroll
    for (int u = 0; u < kCombineBatch; ++u) {
      const int s = s0 + u;
      x[u] = s < s_end && c < p.head_dim_v
                 ? *reinterpret_cast<const float4*>(p.o_accum + (s * rows + row) * p.head_dim_v + c)
                 : make_float4(0.f, 0.f, 0.f, 0.f);
    }
  };
  load_batch(s_begin, c0);
  if (threadIdx.x < kMaxSplits) lse_smem[threadIdx.x] = threadIdx.x < splits ? p.lse_accum[threadIdx.x * rows + row] : -INFINITY;
  __syncthreads();
  // Every warp reduces the row's LSEs itself (lane l: splits l, l + 32, ...): max, then the sum of
  // the weights, the order fixed by the shuffle tree.
  float max_lse = -INFINITY;
#pragma unroll
  for (int k = 0; k < kMaxSplits / 32; ++k) max_lse = fmaxf(max_lse, lse_smem[32 * k + lane]);
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) max_lse = fmaxf(max_lse, __shfl_xor_sync(0xffffffffu, max_lse, offset));
  float weight_sum = 0.f;
#pragma unroll
  for (int k = 0; k < kMaxSplits / 32; ++k) weight_sum += lse_weight(lse_smem[32 * k + lane], max_lse);
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) weight_sum += __shfl_xor_sync(0xffffffffu, weight_sum, offset);
  const float inv_sum = weight_sum > 0.f ? 1.f / weight_sum : 0.f;

  Elem* out = static_cast<Elem*>(p.o) + b * p.o_batch_stride + h * p.o_head_stride + static_cast<int64_t>(i) * p.o_row_stride;
  // Column chunks of 128 (Dv <= 128: one); every warp runs every chunk (the barriers below).
  for (int c_base = 0; c_base < p.head_dim_v; c_base += 128) {
    const int c = c_base + c0;
    float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
    for (int s0 = s_begin; s0 < s_end; s0 += kCombineBatch) {
      if (s0 != s_begin || c_base != 0) load_batch(s0, c);
#pragma unroll
      for (int u = 0; u < kCombineBatch; ++u) {
        const int s = s0 + u;
        // An empty split (weight 0) and a split past this warp's share add nothing.
        const float w = s < s_end ? lse_weight(lse_smem[s], max_lse) : 0.f;
        if (w != 0.f) acc.x += w * x[u].x, acc.y += w * x[u].y, acc.z += w * x[u].z, acc.w += w * x[u].w;
      }
    }
    part_smem[warp][lane] = acc;
    __syncthreads();
    if (warp == 0 && c < p.head_dim_v) {
      float4 sum = part_smem[0][lane];
#pragma unroll
      for (int w = 1; w < kCombineWarps; ++w) {
        const float4 v = part_smem[w][lane];
        sum.x += v.x, sum.y += v.y, sum.z += v.z, sum.w += v.w;
      }
      uint2 packed;
      packed.x = ElemTraits<Elem>::pack(sum.x * inv_sum, sum.y * inv_sum);
      packed.y = ElemTraits<Elem>::pack(sum.z * inv_sum, sum.w * inv_sum);
      *reinterpret_cast<uint2*>(out + c) = packed;
    }
    __syncthreads();  // part_smem is rewritten by the next chunk
  }
  if (threadIdx.x == 0 && p.lse != nullptr) {
    p.lse[b * p.lse_batch_stride + h * p.lse_head_stride + static_cast<int64_t>(i) * p.lse_row_stride] =
        merged_lse(max_lse, weight_sum, INFINITY);
  }
}

// After the decode kernel, on the same stream. On sm_90+ (a combine compiled with its wait) the
// launch is programmatic: the decode kernel lets it start as it begins (grid_dependents_launch),
// so its CTAs are resident and waiting when the decode kernel's last CTAs drain, and the gap
// between the kernels (launch latency and ramp, ~2 us of the B 1 x 8k decode's ~17.5 us graph
// time on the H200) overlaps the decode kernel. Elsewhere a plain launch, as before.
template <typename Elem>
cudaError_t launch_split_combine(const AttnFwdParams& params, cudaStream_t stream) {
  const int64_t rows = static_cast<int64_t>(params.batch) * params.heads_q * params.seqlen_q;
  constexpr int kRowsPerCta = FLASHSDPA_COMBINE_ROW_CTA ? 1 : kCombineRowsPerCta;
  constexpr int kThreads = FLASHSDPA_COMBINE_ROW_CTA ? 32 * kCombineWarps : 32 * kCombineRowsPerCta;
  const int64_t grid = (rows + kRowsPerCta - 1) / kRowsPerCta;
  if (grid == 0) return cudaSuccess;
  if (grid > 0x7fffffff) return cudaErrorInvalidConfiguration;
#if FLASHSDPA_COMBINE_ROW_CTA  // (only the selected kernel is instantiated: the default build's SASS is unchanged)
  constexpr auto kernel = &flashsdpa_split_combine_row_kernel<Elem>;
#else
  constexpr auto kernel = &flashsdpa_split_combine_kernel<Elem>;
#endif
  bool programmatic = false;
  if (params.cc_major >= 9) {
    if (const cudaError_t err = programmatic_capable<kernel>(programmatic); err != cudaSuccess) return err;
  }
  if (programmatic) {
    return launch_programmatic(kernel, static_cast<unsigned>(grid), kThreads, 0, stream, params);
  }
  kernel<<<static_cast<unsigned>(grid), kThreads, 0, stream>>>(params);
  return cudaGetLastError();
}

}  // namespace flashsdpa
