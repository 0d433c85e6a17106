// bwd_launch_sm90.cuh: run_bwd_sm90_<Elem, kHeadDim>, the host launcher of the Hopper backward:
// TMA descriptors -> preprocess (delta, zeroed dq_accum and dQ semaphores) -> main kernel -> dQ
// postprocess, on one stream; the first and last kernels are common/bwd_prepost.cuh's. The
// descriptors are encoded first, so a refused one (cudaErrorNotSupported: the launcher's caller
// then takes the next family) leaves nothing launched.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <climits>
#include <cstdint>

#include "common/launch.cuh"
#include "common/sanitizer_marks.cuh"
#include "common/smem_optin.cuh"
#include "sm90/bwd_kernel_sm90.cuh"
#include "sm90/tma_sm90.h"

namespace flashsdpa {

template <typename Traits>
cudaError_t encode_bwd_sm90(const AttnBwdParams& params, BwdSm90Args& args) {
  args.p = params;
  return encode_tma_all({{&args.tma_q, tma_q(params), Traits::kBlockM},
                         {&args.tma_do, tma_dout(params), Traits::kBlockM},
                         {&args.tma_k, tma_k(params), Traits::kBlockN},
                         {&args.tma_v, tma_v(params), Traits::kBlockN}},
                        params.dtype == DType::kBFloat16);
}

// Preprocess, main kernel and dQ postprocess of one instantiation. The descriptors are its own
// (the Q / dO box is its kBlockM: the d64 plain kernel's tall step takes 128 rows, its
// score-modifier and dropout kernels 64), encoded and the shared memory opted in before anything
// is launched; the dQ semaphores count its kBlockM rows (params.h's dq_sem_rows).
template <typename Traits>
cudaError_t run_bwd_sm90_with(const AttnBwdParams& params_in, cudaStream_t stream) {
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
  cudaError_t err = encode_bwd_sm90<Traits>(params, args);
  if (err != cudaSuccess) return err;
  const int64_t n_blocks = (params.seqlen_k + Traits::kBlockN - 1) / Traits::kBlockN;
  constexpr int kCluster = Traits::kSplit ? 2 : 1;  // d512: a CTA pair per key block
  const int64_t grid = kCluster * n_blocks * params.heads_kv * params.batch;
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

template <typename Elem, int kHeadDim>
cudaError_t run_bwd_sm90_(const AttnBwdParams& params, cudaStream_t stream) {
  using Traits = BwdTraitsSm90<Elem, kHeadDim>;
  if constexpr (Traits::kWide) {  // d256, d512: the plain tile only (capabilities.cpp's bucket limits)
    if (params.dropout.enabled() || mods_kind(params.mods) != kModsNone) return cudaErrorNotSupported;
    return run_bwd_sm90_with<Traits>(params, stream);
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
      default: return run_bwd_sm90_with<Traits>(params, stream);
    }
  }
}

}  // namespace flashsdpa
