// bwd_launch_sm90.cuh: run_bwd_sm90_<Elem, kHeadDim>, the host launcher of the Hopper backward:
// TMA descriptors -> preprocess (delta, zeroed dq_accum and dQ semaphores) -> main kernel -> dQ
// postprocess, on one stream; the first and last kernels are common/bwd_prepost.cuh's. The
// descriptors are encoded first, so a refused one (cudaErrorNotSupported: the launcher's caller
// then takes the next family) leaves nothing launched.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstdlib>

#include "common/launch.cuh"
#include "common/sanitizer_marks.cuh"
#include "common/smem_optin.cuh"
#include "sm90/bwd_kernel_sm90.cuh"
#include "sm90/tma_sm90.h"

namespace flashsdpa {

template <typename Traits>
cudaError_t encode_bwd_sm90(const AttnBwdParams& params, BwdSm90Args& args) {
  args.p = params;
  args.dbias_tma = 0;
  const bool bf16 = params.dtype == DType::kBFloat16;
  const cudaError_t err = encode_tma_all({{&args.tma_q, tma_q(params), Traits::kBlockM},
                                          {&args.tma_do, tma_dout(params), Traits::kBlockM},
                                          {&args.tma_k, tma_k(params), Traits::kBlockN},
                                          {&args.tma_v, tma_v(params), Traits::kBlockN}},
                                         bf16);
  if (err != cudaSuccess) return err;
  // (kDsQueryRows) d_bias's map where it can have one (16-byte base and strides: the dense buffer
  // Python allocates when Sk % 8 == 0); without it the kernel stores d_bias from registers.
  if constexpr (Traits::kDsQueryRows) {
    if (params.d_bias != nullptr) {
      const TmaTensor4d d_bias = tma_d_bias(params);
      args.dbias_tma = tma_compatible(d_bias) && encode_tma_4d(&args.tma_dbias, d_bias, bf16, Traits::kBlockM) == cudaSuccess;
    }
  }
  // (kBiasTmaLoad) the bias's map, its broadcast head / batch dims as size 1 (coordinate 0 there);
  // a zero row stride (key padding) or an unaligned layout keeps the warps' copies.
  args.bias_tma = 0;
  if constexpr (Traits::kBiasTmaLoad) {
    if (params.mods.bias != nullptr) {
      const TmaTensor4d bias = tma_bias(params);
      args.bias_tma = tma_compatible(bias) && encode_tma_4d(&args.tma_bias, bias, bf16, Traits::kBlockM) == cudaSuccess;
    }
  }
  return cudaSuccess;
}

// Preprocess, main kernel and dQ postprocess of one instantiation. The descriptors are its own
// (the Q / dO box is its kBlockM: the d64 plain kernel's tall step takes 128 rows, its
// score-modifier and dropout kernels 64), encoded and the shared memory opted in before anything
// is launched; the dQ semaphores count its kBlockM rows (params.h's dq_sem_rows).
// Items (key blocks) a CTA of the grouped d64 tall kernel runs one after the other (1: the plain
// kernel, one CTA an item). What grouping buys is a CTA's fixed cost (start, barrier set-up, the
// first K / V and Q / dO loads' latency, the dK / dV stores with nothing behind them) spread over k
// items, so it pays where items are short, and more where their lengths differ (causal: the
// next item's work covers a short one's tail). Session 42, H100, d64 B x H 32 x S = 16k tokens, 3
// alternating rounds, k = 2 / k = 4 against the plain kernel: S 512 1.085 / 1.041, causal 1.033 /
// 1.135; 1k 1.055 / 1.056, causal 1.162 / 1.239; 2k 1.019 / 1.005, causal 1.074 / 1.081; 8k
// 0.94-0.99 / 0.92-0.99, causal 1.006-1.041 / 0.947-0.958. So by the query blocks a key block
// visits, about: dense, 2 up to 16 blocks (2k), else 1; one side unbounded (causal), 4 up to 8
// blocks (2k), 2 up to 16 (4k, between 2k's +7% and 8k's nothing: not measured), else 1; a window
// bounded on both sides counts as dense. Never fewer than two waves of CTAs (k items a CTA leave the
// last wave k times coarser). The rule against the plain kernel, session 45, H100, two calls of 3
// rounds each: S 512 1.084 / 1.089, causal 1.130 / 1.140; 1k 1.056 / 1.056, causal 1.234 / 1.233;
// 2k 1.016 / 1.010, causal 1.077 / 1.074; 8k (k = 1 both sides) 1.039 / 1.002; 8k causal with
// k = 2 (session 42's bound, 33 blocks) 1.011 / 0.934: the bound is 16 since.
// FLASHSDPA_SM90_BWD_GROUP=k (1-8) forces k: the tests run every k on small problems, which the
// rule leaves at 1; 1 keeps the plain kernel; unset or "auto", the rule.
template <typename Traits>
int bwd_group_sm90(const AttnBwdParams& p, int64_t items) {
  const char* asked = std::getenv("FLASHSDPA_SM90_BWD_GROUP");
  if (asked != nullptr) {
    const int k = std::atoi(asked);
    if (k >= 1 && k <= 8) return k;
  }
  // d128: forced k only (session 45, H100: its grouped form, whose producer spills 92 bytes, loses
  // 4-7% dense at every length and wins only causal S 512, +6% / +13% at k 2 / 4). d512: no
  // grouped form (its CTA pairs).
  if constexpr (Traits::kSplit || Traits::kHeadDim == 128) return 1;
  // Deterministic mode: the ordered dQ adds make a key block wait for its predecessor's turn on
  // every query block, and a CTA's k items walk their blocks in series, so k key blocks' turns
  // chain (session 46, H100, bench --deterministic: d64 2k at k = 2 2.75x the default mode's
  // time, 2k causal at k = 4 1.25x; with the plain kernel 1.05-1.09x at 8k, 1.15-1.28x at 2k, and
  // since session 47's launch order 1.03-1.07x at 8k, 1.10-1.18x at 2k).
  if (p.deterministic) return 1;
  const int m_blocks = (p.seqlen_q + Traits::kBlockM - 1) / Traits::kBlockM;
  const MaskSpec& m = p.mask;
  int k = 1;
  if constexpr (Traits::kWide) {
    // d256 (64 keys and 64 queries a step): causal only, k = 2 up to 8 query blocks a key block
    // on average (S 1k). Session 46, H100, B x H 8 x 16k tokens, 3 alternating rounds, k = 2 / 4
    // against the plain kernel: causal S 512 1.235 / 1.256, 1k 1.218 / 1.121, 2k 1.022 / 0.905, 8k
    // 0.992 / 0.926; dense S 512 0.931 / 0.719, 1k 0.995 / 0.869, 2k 1.012 / 0.977, 8k 0.990 /
    // 0.990. Its step is twice d64's columns, so less of an item is fixed cost: dense never pays.
    if (m.is_none() || (m.has_left() && m.has_right())) return 1;
    k = (m_blocks + 1) / 2 <= 8 ? 2 : 1;
  } else if (m.is_none() || (m.has_left() && m.has_right())) {
    int visits = m_blocks;
    if (!m.is_none()) visits = std::min<int64_t>(m_blocks, (int64_t(m.window_left) + m.window_right) / Traits::kBlockM + 2);
    k = visits <= 16 ? 2 : 1;
  } else {
    const int visits = (m_blocks + 1) / 2;
    k = visits <= 8 ? 4 : visits <= 16 ? 2 : 1;
  }
  const int64_t waves2 = 2 * int64_t(std::max(p.num_sms, 1));
  while (k > 1 && items < waves2 * k) --k;
  return k;
}

template <typename Traits>
cudaError_t run_bwd_sm90_with(const AttnBwdParams& params_in, cudaStream_t stream, int group = 1) {
  using Elem = typename Traits::Elem;
  AttnBwdParams params = params_in;
  params.dq_sem_rows = Traits::kBlockM;
  if constexpr (Traits::kWide) {
    // The d256 and d512 tiles add dQ by float reductions (no writer warp): no first store, no ordered
    // adds (the table refuses deterministic calls there), so no semaphores and a zeroed dq_accum.
    if (params.deterministic) return cudaErrorNotSupported;
    params.dq_first_store = false;
    params.dq_semaphore = nullptr;
  }
  BwdSm90Args args;
  args.group = group;
  cudaError_t err = encode_bwd_sm90<Traits>(params, args);
  if (err != cudaSuccess) return err;
  const int64_t n_blocks = (params.seqlen_k + Traits::kBlockN - 1) / Traits::kBlockN;
  constexpr int kCluster = Traits::kSplit ? 2 : 1;  // d512: a CTA pair per key block
  // (kGrouped) a CTA per `group` consecutive items (bwd_sm90::for_each_item).
  const int64_t grid = kCluster * ((n_blocks * params.heads_kv * params.batch + group - 1) / group);
  if (grid > INT_MAX) return cudaErrorInvalidConfiguration;
  if ((err = opt_in_dynamic_smem<&flashsdpa_bwd_sm90_kernel<Traits>>(Traits::kSmemBytes)) != cudaSuccess) return err;
  if ((err = launch_bwd_prepost<Elem, Traits::kHeadDim, false>(params, stream)) != cudaSuccess) return err;
  if (grid > 0) {
    // Programmatic: its CTAs may start while the preprocess's last wave drains (they wait for it
    // before reading delta or adding to dq_accum: grid_dependency_wait in the kernel).
    err = launch_programmatic_clusters(flashsdpa_bwd_sm90_kernel<Traits>, static_cast<unsigned>(grid), kCluster,
                                       Traits::kThreads, Traits::kSmemBytes, stream, args);
    if (err != cudaSuccess) return err;
  }
  // dq_accum's words are the TMA unit's (bulk store / reduce-add) but for the blocks the
  // preprocess zeroes: tell initcheck before the postprocess reads them, when asked.
  if (sanitizer_marks_enabled())
    mark_initialized(params.dq_accum,
                     strided_extent_bytes(params.batch, params.dq_accum_batch_stride, params.seqlen_q,
                                          params.dq_accum_row_stride, params.heads_q, params.dq_accum_head_stride,
                                          params.head_dim_bucket, 4),
                     stream);
  AttnBwdParams post = params;
  post.scale = 1.f;  // the main kernel stages dQ already scaled
  return launch_bwd_prepost<Elem, Traits::kHeadDim, true>(post, stream, /*programmatic=*/true);
}

// The plain kernel of these traits, or its grouped form (kGrouped: the d64 tall and d256 kernels;
// d128 under FLASHSDPA_SM90_BWD_GROUP_D128) where bwd_group_sm90 picks k > 1.
template <typename Traits>
cudaError_t run_bwd_sm90_plain(const AttnBwdParams& params, cudaStream_t stream) {
  using Grouped = BwdTraitsSm90<typename Traits::Elem, Traits::kHeadDim, Traits::kStages, kModsNone, false, true>;
  if constexpr (Grouped::kGrouped) {
    const int64_t items = (params.seqlen_k + Traits::kBlockN - 1) / Traits::kBlockN * params.heads_kv * params.batch;
    const int group = bwd_group_sm90<Traits>(params, items);
    if (group > 1) return run_bwd_sm90_with<Grouped>(params, stream, group);
  }
  return run_bwd_sm90_with<Traits>(params, stream);
}

template <typename Elem, int kHeadDim>
cudaError_t run_bwd_sm90_(const AttnBwdParams& params, cudaStream_t stream) {
  using Traits = BwdTraitsSm90<Elem, kHeadDim>;
  if constexpr (Traits::kWide) {  // d256, d512: the plain tile only (capabilities.cpp's bucket limits)
    if (params.dropout.enabled() || mods_kind(params.mods) != kModsNone) return cudaErrorNotSupported;
    return run_bwd_sm90_plain<Traits>(params, stream);
  } else {
    // The score modifiers' instantiations (softcap, ALiBi; sinks too: it sums the rows their
    // gradient is finished from; the bias), picked by score_mod.cuh's mods_kind as
    // bwd_launch_sm80.cuh picks the portable ones.
    using ScoreTraits = BwdTraitsSm90<Elem, kHeadDim, Traits::kStages, kModsScore>;
    using BiasTraits = BwdTraitsSm90<Elem, kHeadDim, Traits::kStages, kModsBias>;
    // Dropout: its own instantiation, plain otherwise (the host pairs it with no modifier).
    using DropoutTraits = BwdTraitsSm90<Elem, kHeadDim, Traits::kStages, kModsNone, true>;
    if (params.dropout.enabled()) return run_bwd_sm90_with<DropoutTraits>(params, stream);
    switch (mods_kind(params.mods)) {
      case kModsScore: return run_bwd_sm90_with<ScoreTraits>(params, stream);
      case kModsBias: return run_bwd_sm90_with<BiasTraits>(params, stream);
      default: return run_bwd_sm90_plain<Traits>(params, stream);
    }
  }
}

}  // namespace flashsdpa
