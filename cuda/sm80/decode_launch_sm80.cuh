// decode_launch_sm80.cuh: run_decode_sm80_<Elem, kHeadDim>, the host launcher of the decode path
// (decode_kernel_sm80.cuh): the decode kernel over SplitKvScheduler's grid, then, with more than
// one split, the combine kernel of common/split_combine.cuh on the same stream (programmatically
// on sm_90+: launch_split_combine). Included by the
// generated cuda/instantiations/decode_sm80_<dtype>_hdim<d>.cu files.
//
// num_splits is a runtime value (params.num_splits), not a template axis: the only code it
// changes is the epilogue's store (Elem to out, or float32 to the workspace), a branch per CTA.
#pragma once

#include <cuda_runtime.h>

#include <climits>
#include <cstdint>

#include "common/smem_optin.cuh"
#include "common/split_combine.cuh"
#include "sm80/decode_kernel_sm80.cuh"
#include "sm80/launch_sm80.h"

namespace flashsdpa {

template <typename Elem, int kHeadDim>
using DecodeTraitsSm80For = DecodeTraitsSm80<Elem, kHeadDim, decode_tile_shape_sm80(kHeadDim).warps,
                                             decode_tile_shape_sm80(kHeadDim).stages>;

template <typename Elem, int kHeadDim, ModsKind kMods>
cudaError_t run_decode_sm80_mods(const AttnFwdParams& params, cudaStream_t stream) {
  using Traits = DecodeTraitsSm80For<Elem, kHeadDim>;
  auto* kernel = &flashsdpa_decode_sm80_kernel<Traits, kMods>;
  const int64_t grid = decode_scheduler_sm80<Traits>(params).grid_size();
  if (grid == 0) return cudaSuccess;
  if (grid > INT_MAX) return cudaErrorInvalidConfiguration;
  // The bias kernel's staged bias rows sit after the plain kernel's layout (DecodeTraitsSm80).
  constexpr int kSmem = Traits::kSmemBytes + (kMods == kModsBias ? Traits::kSmemBiasBytes : 0);
  if (const cudaError_t err = opt_in_dynamic_smem<&flashsdpa_decode_sm80_kernel<Traits, kMods>>(kSmem);
      err != cudaSuccess)
    return err;
  // Programmatic where the kernel has its wait (sm_90+): the combine before it (split_combine.cuh)
  // lets it launch past its own wait, so its CTAs are resident when the previous call ends.
  bool programmatic = false;
  if (params.cc_major >= 9) {
    if (const cudaError_t err = programmatic_capable<&flashsdpa_decode_sm80_kernel<Traits, kMods>>(programmatic);
        err != cudaSuccess)
      return err;
  }
  if (programmatic) {
    if (const cudaError_t err = launch_programmatic(kernel, static_cast<unsigned>(grid), Traits::kNThreads, kSmem,
                                                    stream, params);
        err != cudaSuccess)
      return err;
  } else {
    kernel<<<static_cast<unsigned>(grid), Traits::kNThreads, kSmem, stream>>>(params);
  }
  if (const cudaError_t err = cudaGetLastError(); err != cudaSuccess) return err;
  return params.num_splits > 1 ? launch_split_combine<Elem>(params, stream) : cudaSuccess;
}

// The bias (a masked decode-sized call, issue 14) has a kernel of its own, as in the forward
// (score_mod.cuh's ModsKind): the plain kernel keeps its SASS, and only the bias one pays for the
// bias rows' registers. The host sends no other modifier here (decode.cpp, capabilities.cpp).
template <typename Elem, int kHeadDim>
cudaError_t run_decode_sm80_(const AttnFwdParams& params, cudaStream_t stream) {
  return params.mods.bias != nullptr ? run_decode_sm80_mods<Elem, kHeadDim, kModsBias>(params, stream)
                                     : run_decode_sm80_mods<Elem, kHeadDim, kModsNone>(params, stream);
}

}  // namespace flashsdpa
