// split_combine.cuh: the split-KV combine kernel, shared by every family's decode path. A decode
// kernel run with num_splits > 1 leaves, per (split, batch, query head, query row), a normalized
// float32 output and its LSE in the workspace (params.h: o_accum / lse_accum); this merges the
// splits of each row (lse_weight / merged_lse of common/softmax.cuh) into o (Elem) and lse.
//
// One CTA of kCombineWarps warps per row, warp w merging its contiguous share of the splits: a
// row's partials (splits x Dv floats, 33 x 128 x 4 = 17 KB for B 1, 8k keys on an H200) are all
// requested at once (33 splits: 5 per warp, one batch of 16-byte loads per lane), and the LSE
// loads overlap them (issued first: the partials do not need the weights). With B 1 x Hq 32 there
// are only 32 rows, so latency, not bandwidth (0.55 MB, ~1 us at L2 speed), decides: the kernel it
// replaced (one warp per row, 4 rows a CTA, 8 splits per batch) made 5 dependent L2 round trips
// after the LSEs' own. Measured (H200, bf16 d128, decode graph us, 3 interleaved rounds, session
// 18, scripts/dev/combine_ab.sh, in main's history at ca630cd; new / old): B 1 x 8k heuristic
// 16.1 / 17.2 (0.936), 128 splits 23.9 / 29.6; B 1 x 128k 125.8 / 127.1 (0.990); B 32 x 4k 122.9 /
// 122.9. The warps' sums meet in shared memory in warp order (the sum's order, hence every bit,
// fixed).
#pragma once

#include <cmath>
#include <cstdint>

#include <cuda_runtime.h>

#include "common/launch.cuh"
#include "common/ptx.cuh"
#include "common/softmax.cuh"
#include "flashsdpa/params.h"

namespace flashsdpa {

constexpr int kCombineWarps = 8;
constexpr int kCombineBatch = 8;  // a warp's splits in flight per lane (16-byte loads)

template <typename Elem>
__global__ void __launch_bounds__(32 * kCombineWarps)
    flashsdpa_split_combine_kernel(const __grid_constant__ AttnFwdParams p) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t rows = static_cast<int64_t>(p.batch) * p.heads_q * p.seqlen_q;
  const int64_t row = blockIdx.x;  // the grid is `rows` CTAs
  const int i = static_cast<int>(row % p.seqlen_q);
  const int h = static_cast<int>((row / p.seqlen_q) % p.heads_q);
  const int b = static_cast<int>(row / (static_cast<int64_t>(p.seqlen_q) * p.heads_q));
  grid_stamp(1, 0);
  grid_dependency_wait();  // (programmatic launch) the decode kernel's partials are complete
  // The next decode call (launched programmatically: decode_launch_sm80.cuh) may take SM slots
  // now, past the wait: the decode grid has ended, so its CTAs share the SMs with this small grid
  // only, and are resident when it ends (H100, graph, session 40: B 1 x 8k 18.8 -> 18.4 us, the
  // long calls unchanged). Triggered before the wait (session 39's first form), the next call's
  // 264 CTAs sat resident beside this call's running decode grid: 18.8 -> 19.6 us.
  grid_dependents_launch();
  grid_stamp(1, 1);

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
  grid_stamp(1, 3);

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
    if (c_base == 0) grid_stamp(1, 4);
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
  grid_stamp(1, 2);
}

// After the decode kernel, on the same stream. On sm_90+ (a combine compiled with its wait) the
// launch is programmatic: the decode kernel lets it start as it begins (grid_dependents_launch),
// so its CTAs are resident and waiting when the decode kernel's last CTAs drain, and the gap
// between the kernels (launch latency and ramp, ~2 us of the B 1 x 8k decode's ~17.5 us graph
// time on the H200) overlaps the decode kernel. Elsewhere a plain launch, as before.
template <typename Elem>
cudaError_t launch_split_combine(const AttnFwdParams& params, cudaStream_t stream) {
  const int64_t rows = static_cast<int64_t>(params.batch) * params.heads_q * params.seqlen_q;
  constexpr int kThreads = 32 * kCombineWarps;
  const int64_t grid = rows;  // one CTA per row
  if (grid == 0) return cudaSuccess;
  if (grid > 0x7fffffff) return cudaErrorInvalidConfiguration;
  constexpr auto kernel = &flashsdpa_split_combine_kernel<Elem>;
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
