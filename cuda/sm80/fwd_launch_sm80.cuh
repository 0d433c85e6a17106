// fwd_launch_sm80.cuh: run_fwd_sm80_<Elem, kHeadDim>, the host launcher of the portable forward
// kernel. Picks the traits of the head-dim bucket from the tile table, raises the dynamic
// shared-memory limit once per device, sizes the 1-D grid from the scheduler and launches.
// Included by the generated cuda/instantiations/fwd_sm80_<dtype>_hdim<d>.cu files.
#pragma once

#include <cuda_runtime.h>

#include <climits>
#include <cstdint>

#include "common/smem_optin.cuh"
#include "sm80/fwd_kernel_sm80.cuh"
#include "sm80/launch_sm80.h"

namespace flashsdpa {

// Launches the forward kernel of one traits configuration (with score modifiers: the instantiation
// score_mod.cuh's mods_kind picks; with dropout: its kDropout one, which the host never pairs with
// modifiers).
template <typename Traits, ModsKind kMods = kModsNone, bool kDropout = false>
cudaError_t launch_fwd_sm80(const AttnFwdParams& params, cudaStream_t stream) {
  if constexpr (kMods == kModsNone && !kDropout) {
    if (params.dropout.enabled()) return launch_fwd_sm80<Traits, kModsNone, true>(params, stream);
    switch (mods_kind(params.mods)) {
      case kModsScore: return launch_fwd_sm80<Traits, kModsScore>(params, stream);
      case kModsBias: return launch_fwd_sm80<Traits, kModsBias>(params, stream);
      default: break;
    }
  }
  constexpr int kSmemBytes = Traits::kSmemBytes;
  auto* kernel = &flashsdpa_fwd_sm80_kernel<Traits, kMods, kDropout>;

  // One CTA per (query block, head, batch), in the order of the kernel's scheduler.
  const int64_t grid = fwd_scheduler_sm80<Traits>(params).grid_size();
  if (grid == 0) return cudaSuccess;  // no query rows: nothing to write
  if (grid > INT_MAX) return cudaErrorInvalidConfiguration;

  if (const cudaError_t err = opt_in_dynamic_smem<&flashsdpa_fwd_sm80_kernel<Traits, kMods, kDropout>>(kSmemBytes); err != cudaSuccess)
    return err;

  kernel<<<static_cast<unsigned>(grid), Traits::kNThreads, kSmemBytes, stream>>>(params);
  return cudaGetLastError();
}

template <typename Elem, int kHeadDim>
cudaError_t run_fwd_sm80_(const AttnFwdParams& params, cudaStream_t stream) {
  constexpr FwdTileShapeSm80 kShape = fwd_tile_shape_sm80(kHeadDim);
  using Traits = FwdTraitsSm80<Elem, kHeadDim, kShape.block_m, kShape.block_n, kShape.warps>;
  // sm_80 and sm_90 give every bucket its table tile; only parts with 99 KB per block (sm_86,
  // sm_89) fall back to the smaller tile for d > 192.
  if constexpr (Traits::kSmemBytes > 99 * 1024) {
    if (params.smem_optin_bytes < Traits::kSmemBytes) {
      constexpr FwdTileShapeSm80 kSmall = fwd_tile_shape_sm80_small_smem(kHeadDim);
      return launch_fwd_sm80<FwdTraitsSm80<Elem, kHeadDim, kSmall.block_m, kSmall.block_n, kSmall.warps>>(
          params, stream);
    }
  }
  return launch_fwd_sm80<Traits>(params, stream);
}

}  // namespace flashsdpa
