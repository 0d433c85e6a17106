// bwd_launch_sm80.cuh: the backward tile table of the portable path and run_bwd_sm80_, which
// launches preprocess -> main (dK, dV, dQ_accum) -> dQ postprocess on one stream (the first and
// last are common/bwd_prepost.cuh's). Included by the
// generated per-(dtype, head-dim) instantiation files; numbers behind the table are in
// docs/kernel_notes_bwd.md.
#pragma once

#include <cuda_runtime.h>

#include <type_traits>

#include "sm80/bwd_kernel_sm80.cuh"
#include "sm80/launch_sm80.h"

namespace flashsdpa {
namespace bwd_sm80 {

// Tile table (kBlockM query rows per inner step x kBlockN keys per CTA, 8 warps; warp grids for
// S/dP, dK/dV, dQ as rows-split counts). Measured in docs/kernel_notes_bwd.md.
//   d <= 64:  128 x 128, 4/4/4. S and dP 64 registers each, dK + dV 64: the larger M tile halves
//             the per-row overhead (syncs, LSE, reds) against 64 x 128: 233 -> 256 TFLOP/s at
//             d = 64, S = 8k. 178 KB smem.
//   d = 96, 128: 64 x 128, 2/4/2 at 128, 2/4/4 at 96 (96 columns do not make 4 warp tiles of
//             whole 16-column blocks). dK + dV are
//             128 registers, S + dP 64; 128 x 128 would need 256 before fragments. 171 KB smem.
//   d > 128:  64 x 64, 4/2/2, so dK + dV stay at 2 * 64 * d / 256 <= 128 registers; 217 KB smem
//             at d = 256. 4/2/2 makes the dK/dV and dQ warp tiles 32 x d/4 instead of 16 x d/2: 6
//             ldmatrix per 16 mma instead of 9; d = 256, S = 8k: 208 -> 221 TFLOP/s (2/4/4 before).
template <typename Elem, int kHeadDim>
using BwdTraitsFor = std::conditional_t<
    (kHeadDim <= 64), BwdTraits<Elem, kHeadDim, 128, 128, 8, 4, 4, 4>,
    std::conditional_t<(kHeadDim <= 128), BwdTraits<Elem, kHeadDim, 64, 128, 8, 2, 4, (kHeadDim == 128 ? 2 : 4)>,
                       BwdTraits<Elem, kHeadDim, 64, 64, 8, 4, 2, 2>>>;

// Parts with less shared memory per block than the table tile needs (sm_80 / sm_87: 163 KB,
// sm_86 / sm_89: 99 KB; the table is sized for sm_90's 227 KB) take 64 x 64 tiles (2/4/4): 73 KB
// at d = 64, 123 KB at d = 128. Above d = 128 the table tile already is 64 x 64, with no smaller one.
// Buckets whose smallest tile still does not fit are not served there (bwd_plan_sm80 says so and
// the host falls back).
template <typename Elem, int kHeadDim>
using BwdTraitsSmallSmemFor =
    std::conditional_t<(kHeadDim > 128), BwdTraitsFor<Elem, kHeadDim>, BwdTraits<Elem, kHeadDim, 64, 64, 8, 2, 4, 4>>;

// Dynamic shared memory of one traits configuration on a device of compute capability `major`
// (sm_90 code adds the dQ staging tile).
template <typename T>
constexpr int smem_bytes_on(int major) {
  return major >= 9 ? T::kSmemBytesSm90 : T::kSmemBytes;
}

// 0: the table tile fits; 1: the small tile; -1: neither fits in `optin_bytes`.
template <int kHeadDim>
constexpr int bwd_tile_choice(int major, int optin_bytes) {
  using T = BwdTraitsFor<__half, kHeadDim>;
  using S = BwdTraitsSmallSmemFor<__half, kHeadDim>;
  if (smem_bytes_on<T>(major) <= optin_bytes) return 0;
  if (!std::is_same_v<T, S> && smem_bytes_on<S>(major) <= optin_bytes) return 1;
  return -1;
}

template <typename T, ModsKind kMods = kModsNone, bool kDropout = false>
cudaError_t launch_bwd_main(const AttnBwdParams& params, cudaStream_t stream, int major) {
  if constexpr (kMods == kModsNone && !kDropout) {
    // Dropout: its own kernel (the host never pairs it with the score modifiers).
    if (params.dropout.enabled()) return launch_bwd_main<T, kModsNone, true>(params, stream, major);
    // Sinks too: the modifier kernels sum the rows their gradient is finished from (row_pdp).
    switch (mods_kind(params.mods)) {
      case kModsScore: return launch_bwd_main<T, kModsScore>(params, stream, major);
      case kModsBias: return launch_bwd_main<T, kModsBias>(params, stream, major);
      default: break;
    }
  }
  const int64_t grid = bwd_scheduler_sm80<T>(params).grid_size();
  if (grid > 0x7fffffff) return cudaErrorInvalidConfiguration;
  // Runs even when no query row sees a key block: it must still write dK = dV = 0 there.
  if (grid == 0) return cudaSuccess;
  auto kernel = flashsdpa_bwd_sm80_dkdv_kernel<T, kMods, kDropout>;
  const int smem_bytes = smem_bytes_on<T>(major);
  // Set on every call (about a microsecond): the attribute is per device, and a static
  // "done once" flag would be wrong on the second GPU of a multi-GPU process.
  cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes);
  if (err != cudaSuccess) return err;
  kernel<<<static_cast<unsigned>(grid), T::kThreads, smem_bytes, stream>>>(params);
  return cudaGetLastError();
}

}  // namespace bwd_sm80

template <typename Elem, int kHeadDim>
cudaError_t run_bwd_sm80_(const AttnBwdParams& params, cudaStream_t stream) {
  using namespace bwd_sm80;
  // The host chose the tile once (bwd_plan_sm80, from the device's shared memory) and checked
  // that one fits: 0 = the table tile, 1 = the small one.
  const int major = params.cc_major;
  if (params.bwd_tile < 0) return cudaErrorNotSupported;
  cudaError_t err = launch_bwd_prepost<Elem, kHeadDim, false>(params, stream);
  if (err != cudaSuccess) return err;

  using Table = BwdTraitsFor<Elem, kHeadDim>;
  using Small = BwdTraitsSmallSmemFor<Elem, kHeadDim>;
  if constexpr (std::is_same_v<Table, Small>) {
    err = launch_bwd_main<Table>(params, stream, major);
  } else {
    err = params.bwd_tile == 0 ? launch_bwd_main<Table>(params, stream, major)
                               : launch_bwd_main<Small>(params, stream, major);
  }
  if (err != cudaSuccess) return err;
  return launch_bwd_prepost<Elem, kHeadDim, true>(params, stream);
}

}  // namespace flashsdpa
