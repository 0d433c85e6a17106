// tiles_sm90.cu: the host's view of the Hopper family beyond its capability-table row: the tile
// each head-dim bucket runs (fwd_plan_sm90, bwd_plan_sm90) and the per-call facts a table cannot
// express (fwd_sm90_unsupported, bwd_sm90_unsupported: a negative scale, no keys, TMA alignment). Its dispatch switch is generated (cuda/instantiations/dispatch_sm90.cu).
// Compiled for sm_90a only (wgmma, setmaxnreg): it runs on compute capability 9.0 and nowhere else.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <type_traits>

#include "flashsdpa/kernels.h"
#include "sm90/bwd_kernel_sm90.cuh"
#include "sm90/fwd_kernel_sm90.cuh"
#include "sm90/tma_sm90.h"

namespace flashsdpa {

// The family's buckets are whole 128-byte column blocks (TMA boxes, wgmma K steps): 64, 128, 256.
// A head dim runs in the smallest one that holds it; the columns above it are zero-filled by TMA
// and never stored. One tile per bucket (no smaller one: every sm_90 part has 227 KB per block).
TilePlan fwd_plan_sm90(int bucket, int major, int smem_optin_bytes) {
  (void)major;
  const auto plan = [&](auto hdim) {
    constexpr int kHeadDim = decltype(hdim)::value;
    constexpr FwdTileShapeSm90 kShape = fwd_tile_shape_sm90(kHeadDim);
    constexpr int kBytes = FwdTraitsSm90<__half, kHeadDim, kShape.block_m, kShape.block_n, kShape.stages>::kSmemBytes;
    return kBytes <= smem_optin_bytes ? TilePlan{0, kBytes} : TilePlan{-1, 0};
  };
  switch (bucket) {
    case 64: return plan(std::integral_constant<int, 64>{});
    case 128: return plan(std::integral_constant<int, 128>{});
    case 256: return plan(std::integral_constant<int, 256>{});
    default: return TilePlan{-1, 0};
  }
}

// The backward's tile (bwd_kernel_sm90.cuh's BwdTraitsSm90: 64 queries x 128 keys, 2 stages) per
// bucket; the buckets are the generator's sm90 "bwd" list, so a new one adds its case here.
TilePlan bwd_plan_sm90(int bucket, int major, int smem_optin_bytes) {
  (void)major;
  const auto plan = [&](auto traits) {
    constexpr int kBytes = decltype(traits)::kSmemBytes;
    return kBytes <= smem_optin_bytes ? TilePlan{0, kBytes} : TilePlan{-1, 0};
  };
  switch (bucket) {
    case 64: return plan(BwdTraitsSm90<__half, 64>{});
    case 128: return plan(BwdTraitsSm90<__half, 128>{});
    default: return TilePlan{-1, 0};
  }
}

// The forward's workspace (fwd_kernel_sm90.cuh's fwd_workspace_plan): the dynamic schedule's
// counter, which every instantiation of a bucket takes (one tile shape a bucket), or the split
// tail, which only the plain kernel runs (FwdTraitsSm90::kTailSplit): the score modifiers and
// dropout take their own instantiations (run_fwd_sm90_ in fwd_launch_sm90.cuh).
int64_t fwd_workspace_sm90(const AttnFwdParams& p) {
  const bool plain = mods_kind(p.mods) == kModsNone && !p.dropout.enabled();
  const auto bytes = [&](auto hdim) -> int64_t {
    constexpr int kHeadDim = decltype(hdim)::value;
    constexpr FwdTileShapeSm90 kShape = fwd_tile_shape_sm90(kHeadDim);
    using Traits = FwdTraitsSm90<__half, kHeadDim, kShape.block_m, kShape.block_n, kShape.stages>;
    // The bias kernels' tile may have fewer rows (FwdBiasTraitsSm90), hence more tiles: the
    // dynamic schedule's counter is wanted where that tile's count exceeds the SMs.
    const fwd_sm90::FwdWorkspacePlan plan = mods_kind(p.mods) == kModsBias
                                                ? fwd_sm90::fwd_workspace_plan<FwdBiasTraitsSm90<__half, kHeadDim>>(p)
                                                : fwd_sm90::fwd_workspace_plan<Traits>(p);
    return plan.counter || plain ? plan.bytes : 0;
  };
  switch (p.head_dim_bucket) {
    case 64: return bytes(std::integral_constant<int, 64>{});
    case 128: return bytes(std::integral_constant<int, 128>{});
    case 256: return bytes(std::integral_constant<int, 256>{});
    default: return 0;
  }
}

const char* fwd_sm90_unsupported(const AttnFwdParams& p) {
  if (p.seqused_k != nullptr) return "seqused_k: portable family";
  if (!(p.scale > 0.f)) return "softmax scale <= 0: portable family";
  if (p.seqlen_k == 0) return "no keys (a TMA descriptor needs non-empty dimensions): portable family";
  const TmaTensor4d tensors[4] = {tma_q(p), tma_k(p), tma_v(p), tma_o(p)};
  for (const TmaTensor4d& t : tensors) {
    if (!tma_compatible(t)) return "TMA needs 16-byte aligned pointers and strides: portable family";
  }
  return nullptr;
}

// The backward reads q, k, v and dout through TMA (o only in the common preprocess, dq / dk / dv
// by plain stores), and its dQ reduction order is arbitrary.
const char* bwd_sm90_unsupported(const AttnBwdParams& p) {
  if (p.seqused_k != nullptr) return "seqused_k: portable family";
  if (!(p.scale > 0.f)) return "softmax scale <= 0: portable family";
  if (p.seqlen_k == 0 || p.seqlen_q == 0)
    return "no keys or no queries (a TMA descriptor needs non-empty dimensions): portable family";
  const TmaTensor4d tensors[4] = {tma_q(p), tma_k(p), tma_v(p), tma_dout(p)};
  for (const TmaTensor4d& t : tensors) {
    if (!tma_compatible(t)) return "TMA needs 16-byte aligned pointers and strides: portable family";
  }
  return nullptr;
}

}  // namespace flashsdpa
