// tiles_sm80.cu: the host's view of the portable family's tile tables: which tile each direction
// runs for a head-dim bucket on a device, and the shared memory it takes. Traits only; no kernel
// is instantiated here. backend/src/capabilities.cpp reads these through its family table.
#include "flashsdpa/kernels.h"
#include "sm80/bwd_launch_sm80.cuh"
#include "sm80/decode_kernel_sm80.cuh"
#include "sm80/fwd_launch_sm80.cuh"

#include <cuda_fp16.h>

namespace flashsdpa {
namespace {

// fn(std::integral_constant<int, bucket>) for a bucket of the family, else `none`. Every bucket
// is listed whether or not this build compiled it: tables describe the family, not the build.
template <typename Fn>
TilePlan by_bucket(int bucket, Fn&& fn) {
  switch (bucket) {
    case 32: return fn(std::integral_constant<int, 32>{});
    case 64: return fn(std::integral_constant<int, 64>{});
    case 96: return fn(std::integral_constant<int, 96>{});
    case 128: return fn(std::integral_constant<int, 128>{});
    case 192: return fn(std::integral_constant<int, 192>{});
    case 256: return fn(std::integral_constant<int, 256>{});
    default: return TilePlan{-1, 0};
  }
}

}  // namespace

TilePlan fwd_plan_sm80(int bucket, int major, int smem_optin_bytes) {
  (void)major;  // the forward's shared memory is the same on every architecture
  return by_bucket(bucket, [&](auto hdim) {
    constexpr int kHeadDim = decltype(hdim)::value;  // shared memory is the same for both dtypes
    constexpr FwdTileShapeSm80 kTable = fwd_tile_shape_sm80(kHeadDim);
    constexpr FwdTileShapeSm80 kSmall = fwd_tile_shape_sm80_small_smem(kHeadDim);
    constexpr int kTableBytes = FwdTraitsSm80<__half, kHeadDim, kTable.block_m, kTable.block_n, kTable.warps>::kSmemBytes;
    constexpr int kSmallBytes = FwdTraitsSm80<__half, kHeadDim, kSmall.block_m, kSmall.block_n, kSmall.warps>::kSmemBytes;
    if (kTableBytes <= smem_optin_bytes) return TilePlan{0, kTableBytes};
    if (kSmallBytes <= smem_optin_bytes) return TilePlan{1, kSmallBytes};
    return TilePlan{-1, 0};
  });
}

TilePlan bwd_plan_sm80(int bucket, int major, int smem_optin_bytes) {
  using namespace bwd_sm80;
  return by_bucket(bucket, [&](auto hdim) {
    constexpr int kHeadDim = decltype(hdim)::value;
    switch (bwd_tile_choice<kHeadDim>(major, smem_optin_bytes)) {
      case 0: return TilePlan{0, smem_bytes_on<BwdTraitsFor<__half, kHeadDim>>(major)};
      case 1: return TilePlan{1, smem_bytes_on<BwdTraitsSmallSmemFor<__half, kHeadDim>>(major)};
      default: return TilePlan{-1, 0};
    }
  });
}

DecodeTile decode_tile_sm80(int bucket) {
  DecodeTile tile{0, 0, 0, 0};
  by_bucket(bucket, [&](auto hdim) {
    constexpr int kHeadDim = decltype(hdim)::value;
    constexpr DecodeTileShapeSm80 kShape = decode_tile_shape_sm80(kHeadDim);
    using Traits = DecodeTraitsSm80<__half, kHeadDim, kShape.warps, kShape.stages>;
    tile = DecodeTile{Traits::kBlockM, Traits::kBlockN, Traits::kSmemBytes, Traits::kNThreads};
    return TilePlan{0, Traits::kSmemBytes};
  });
  return tile;
}

}  // namespace flashsdpa
