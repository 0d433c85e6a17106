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

// Short forwards at d <= 64 on few tiles run faster on the portable family: this family's d64 tile
// is 192 query rows (three consumer warpgroups: 537 TFLOP/s at 8k against 416 for 128 rows), which
// at a few hundred rows leaves a mostly empty last row block (S 256: rows 192-255 of 192-383) and,
// causal, more masked keys; its persistent grid also waits on a tile-counter memset (a second
// graph node). On many tiles its throughput wins back all but the causal S <= 256 case.
// Session 26, H200, bf16, CUDA-graph GPU time a call (scripts/dev/small_graph_times.py, the rule
// off / on), sm90 / portable, us, causal then non-causal:
//   (B, H, S) = (16, 16, 128), 256 tiles:   13.4 / 9.1,    9.9 / 8.6
//               (8, 16, 256), 256 tiles:    16.7 / 11.5,  12.9 / 11.8
//               (4, 16, 512), 192 tiles:    19.6 / 16.6,  18.8 / 18.6
//               (64, 32, 256), 4096 tiles: 175.5 / 144.4, 145.0 / 165.7
//               (32, 32, 512), 3072 tiles: 170.6 / 194.7, 182.8 / 264.7
// and at S 1024 sm90 wins ((2, 16, 1024) 26.9 / 27.9, 30.1 / 32.5), at d 128 at every size (its
// tile is 128 rows). So: d <= 64, at most 512 query rows and keys, and either at most two waves
// of sm90 tiles or a causal call of at most 256 keys. The plain kernel only (the modifiers' and
// dropout's kernels were not measured there). The backward stays here (its d64 kernel is faster).
const char* fwd_sm90_yields(const AttnFwdParams& p) {
  constexpr int kShortSeqlen = 512, kShortCausal = 256;
  constexpr int kBlockM = fwd_tile_shape_sm90(64).block_m;
  const bool plain = mods_kind(p.mods) == kModsNone && !p.dropout.enabled();
  if (!plain || p.head_dim_qk > 64 || p.head_dim_v > 64 || p.seqlen_q > kShortSeqlen || p.seqlen_k > kShortSeqlen)
    return nullptr;
  const int64_t tiles = int64_t(p.batch) * p.heads_q * ((p.seqlen_q + kBlockM - 1) / kBlockM);
  if (tiles <= 2 * int64_t(p.num_sms > 0 ? p.num_sms : 1))
    return "d <= 64, <= 512 rows and keys, <= 2 waves of 192-row tiles: the portable family's 128-row tiles are faster";
  if (p.mask.is_causal() && p.seqlen_k <= kShortCausal)
    return "d <= 64, causal, <= 512 rows and <= 256 keys: the portable family's 128-row tiles are faster";
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
