// tiles_sm90.cu: the host's view of the Hopper family beyond its capability-table row: the tile
// each head-dim bucket runs (fwd_plan_sm90, bwd_plan_sm90) and the per-call facts a table cannot
// express (fwd_sm90_unsupported, bwd_sm90_unsupported: a negative scale, no keys, TMA alignment). Its dispatch switch is generated (cuda/instantiations/dispatch_sm90.cu).
// Compiled for sm_90a only (wgmma, setmaxnreg): it runs on compute capability 9.0 and nowhere else.
#include <algorithm>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <type_traits>

#include "flashsdpa/kernels.h"
#include "sm90/bwd_kernel_sm90.cuh"
#include "sm90/fwd512_kernel_sm90.cuh"
#include "sm90/fwd_kernel_sm90.cuh"
#include "sm90/tma_sm90.h"

namespace flashsdpa {

// The family's buckets are whole 128-byte column blocks (TMA boxes, wgmma K steps): 64, 128, 256
// and, for the forward, 512 (a kernel of its own: fwd512_kernel_sm90.cuh).
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
    case 512: {  // fwd512_kernel_sm90.cuh's cluster tile
      constexpr int kBytes = Fwd512TraitsSm90<__half>::kSmemBytes;
      return kBytes <= smem_optin_bytes ? TilePlan{0, kBytes} : TilePlan{-1, 0};
    }
    default: return TilePlan{-1, 0};
  }
}

// The backward's tile (bwd_kernel_sm90.cuh's BwdTraitsSm90: 64 queries x 128 keys, 2 stages; the
// d64 plain kernel's tall step 128 queries; d256 64 x 64; d512 64 x 64 on each CTA of a pair) per
// bucket, in the most shared memory of the bucket's instantiations (plain, score modifiers, bias,
// dropout; d256 and d512 have the plain one only); the buckets are the generator's sm90 "bwd" list,
// so a new one adds its case here.
TilePlan bwd_plan_sm90(int bucket, int major, int smem_optin_bytes) {
  (void)major;
  const auto plan = [&](auto traits) {
    using T = decltype(traits);
    int bytes = T::kSmemBytes;
    if constexpr (!T::kWide) {
      bytes = std::max({bytes, BwdTraitsSm90<__half, T::kHeadDim, T::kStages, kModsScore>::kSmemBytes,
                        BwdTraitsSm90<__half, T::kHeadDim, T::kStages, kModsBias>::kSmemBytes,
                        BwdTraitsSm90<__half, T::kHeadDim, T::kStages, kModsNone, true>::kSmemBytes});
    }
    return bytes <= smem_optin_bytes ? TilePlan{0, bytes} : TilePlan{-1, 0};
  };
  switch (bucket) {
    case 64: return plan(BwdTraitsSm90<__half, 64>{});
    case 128: return plan(BwdTraitsSm90<__half, 128>{});
    case 256: return plan(BwdTraitsSm90<__half, 256>{});
    case 512: return plan(BwdTraitsSm90<__half, 512>{});  // a CTA pair's tile (kSplit)
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
    if constexpr (kHeadDim <= 64) {  // the launcher's choice of tile (run_fwd_sm90_)
      constexpr FwdTileShapeSm90 kT = kFwdShortTileSm90;
      using Short = FwdTraitsSm90<__half, kHeadDim, kT.block_m, kT.block_n, kT.stages>;
      if (plain && fwd_sm90_short_tile(p)) return fwd_sm90::fwd_workspace_plan<Short>(p).bytes;
    }
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

// Whether the call's short tiles (kFwdShortTileSm90's rows) fill at most two waves of the SMs:
// both d64 rules below ask it.
namespace {
bool within_two_short_waves(const AttnFwdParams& p) {
  constexpr int kBlockM = kFwdShortTileSm90.block_m;
  const int64_t tiles = int64_t(p.batch) * p.heads_q * ((p.seqlen_q + kBlockM - 1) / kBlockM);
  return tiles <= 2 * int64_t(p.num_sms > 0 ? p.num_sms : 1);
}
}  // namespace

// Short causal forwards at d <= 64 on few tiles run faster on the portable family, whose
// persistent-less grid needs no tile-counter memset (a second graph node) and whose kernel starts
// sooner. Session 27, H200, bf16, CUDA-graph GPU time a call (scripts/dev/small_graph_times.py,
// session27_third.sh: two interleaved rounds agreed within 0.3 us), this family on its short
// tile (128 rows) / on its 192-row tile / the portable family, us, causal then non-causal:
//   (B, H, S) = (16, 16, 128), 256 tiles:  11.3 / 13.0 / 9.3,      8.0 / 9.9 / 8.7
//               (8, 16, 256), 256 tiles:   12.4 / 16.8 / 11.6,    10.9 / 12.8 / 12.0
//               (4, 16, 512), 256 tiles:   16.1 / 19.4 / 17.2,    15.5 / 18.6 / 18.9
//               (64, 32, 256), 4096 tiles: 114.7 / 170.2 / 144.4, 119.4 / 144.8 / 161.8
//               (2, 16, 1024), 256 tiles:  22.7 / 26.8 / 28.2,    24.5 / 30.0 / 33.2
// (session 26's rule, on the 192-row tile alone, gave the portable family every call of <= 512
// rows on <= 2 waves and causal ones of <= 256 keys: the short tile takes them back.) So: causal,
// d <= 64, at most 256 rows and keys on at most two waves of 128-row tiles. The plain kernel only
// (the modifiers' and dropout's kernels were not measured there). The backward stays here (its
// d64 kernel is faster).
const char* fwd_sm90_yields(const AttnFwdParams& p) {
  constexpr int kShortCausal = 256;
  const bool plain = mods_kind(p.mods) == kModsNone && !p.dropout.enabled();
  if (!plain || !p.mask.is_causal() || p.head_dim_qk > 64 || p.head_dim_v > 64 || p.seqlen_q > kShortCausal ||
      p.seqlen_k > kShortCausal || !within_two_short_waves(p))
    return nullptr;
  return "d <= 64, causal, <= 256 rows and keys, <= 2 waves of 128-row tiles: the portable family is faster";
}

// The d <= 64 plain forward's tile: kFwdShortTileSm90 (128 rows) for short calls, the table's 192
// rows otherwise. Session 26, H200, bf16, CUDA-graph GPU time a call (small_graph_times.py, speed
// rules off), 192 / 128 rows, us, causal then non-causal:
//   (B, H, S) = (64, 32, 256):  169.6 / 114.6,  143.0 / 120.4
//               (8, 16, 1024):   70.4 / 61.9,    82.7 / 88.3
//               (32, 32, 512):  169.7 / 153.5,  179.6 / 190.8
//               (16, 32, 1024): 246.3 / 220.6,  320.1 / 336.7
// and every grid of at most two waves faster at 128 rows. So causal calls of at most 1024 rows and
// keys, and non-causal ones of at most 1024 rows with at most 256 keys, or at most 1024 keys on
// at most two waves of 128-row tiles; masks other than none and causal keep the table's tile (not
// measured). Off with the speed rules (FLASHSDPA_SPEED_RULES=0: A/B scripts time the 192 rows).
bool fwd_sm90_short_tile(const AttnFwdParams& p) {
  constexpr int kShort = 1024, kShortKeys = 256;
  if (!speed_rules_enabled() || p.head_dim_qk > 64 || p.head_dim_v > 64 || p.seqlen_q > kShort || p.seqlen_k > kShort)
    return false;
  if (p.mask.is_causal()) return true;
  return p.mask.is_none() && (p.seqlen_k <= kShortKeys || within_two_short_waves(p));
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
