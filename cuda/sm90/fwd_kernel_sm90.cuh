// fwd_kernel_sm90.cuh: the forward kernel of the Hopper family (sm_90a: wgmma, TMA, mbarriers,
// warp specialization). Owns the tile table, the traits, the producer (TMA loads of Q and of the
// K/V ring) and the consumers' mainloop (S = Q K^T and O += P V on the tensor cores, online softmax
// in between) and epilogue (O through shared memory and a TMA store, LSE from registers).
//
// Persistent: a CTA per SM (or fewer, for few tiles) walks the (query block, head, batch) tiles
// given by PersistentTileScheduler; the K/V ring and the mbarrier phases run on across tiles, so
// the producer loads the next tile's Q, K and V while the consumers finish the current one and
// store its O. Each CTA has 1 + kConsumerWGs warpgroups:
//   warpgroup 0, the producer: one thread issues every TMA load; the warpgroup gives its registers
//     away (setmaxnreg) to the consumers, which hold the accumulators.
//   warpgroups 1..kConsumerWGs, the consumers: each owns 64 query rows (one wgmma M), so each K/V
//     tile in shared memory feeds kConsumerWGs wgmmas.
// The ring: kStages slots of K and of V, each with a "full" mbarrier (TMA transaction count) and
// an "empty" one (one arrival per consumer warp once the wgmma reading the slot has completed).
//
// Inside a consumer the GEMMs overlap the softmax: iteration j issues S_j = Q K_j^T and
// O += P_{j-1} V_{j-1} back to back, waits for S_j only, runs the softmax of S_j on the CUDA cores
// while P_{j-1} V_{j-1} still runs on the tensor cores, then waits for that and rescales O.
#pragma once

#include <cuda.h>  // CUtensorMap (the type only: encoding goes through the runtime's driver entry point)
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "common/bias_cells.cuh"
#include "common/bias_stage.cuh"
#include "common/ptx.cuh"
#include "common/mask.cuh"
#include "common/score_mod.cuh"
#include "common/seqlen.cuh"
#include "common/dropout.cuh"
#include "common/softmax.cuh"
#include "common/tile_scheduler.cuh"
#include "flashsdpa/params.h"
#include "sm90/item_queue_sm90.cuh"
#include "sm90/ptx_sm90.cuh"

namespace flashsdpa {

// What the kernel receives: the family-neutral params plus the four TMA descriptors the host
// encoded for them (q, k, v: loads; o: the store).
struct FwdSm90Args {
  AttnFwdParams p;
  CUtensorMap tma_q;
  CUtensorMap tma_k;
  CUtensorMap tma_v;
  CUtensorMap tma_o;
  int32_t sched_group;  // the dynamic schedule's section size (fwd_sm90_scheduler), set by the launcher
  // The split tail (tile_scheduler.cuh's TailSplit; tiles = 0: none) and the workspace that holds
  // its tickets and slots (fwd_sm90::SplitWorkspace), set by the launcher.
  TailSplit split;
  char* workspace;
};

struct FwdTileShapeSm90 {
  int block_m;  // query rows per CTA: 64 per consumer warpgroup
  int block_n;  // keys per K/V tile
  int stages;   // K/V ring depth
};

// The tile table (host launcher and traits read it). Registers per consumer thread for the
// accumulators: O = kHeadDim / 2, S = kBlockN / 2, P (16-bit pairs) = kBlockN / 4.
//   d <= 64 : 192 x 128, three consumer warpgroups (160 registers each): O 32 + S 64 + P 32.
//   d <= 128: 128 x 128, two consumer warpgroups (240 registers): O 64 + S 64 + P 32.
//   d <= 256: 128 x 64, two consumer warpgroups: O 128 + S 32 + P 16; 192 KB of shared memory.
// Measured on the H200 (bf16, S = 8k, TFLOP/s non-causal / causal; docs/kernel_notes_fwd_sm90.md):
//   d128: 128x128 678 / 564; 128x176 614 / 555; 128x128 with 3 stages 632 / 570.
//   d64:  192x128 537 / 462; 128x128 (2 warpgroups) 416 / 364; 192x128 with 3 stages 508 / 441.
//   d256: 128x64 794 / 729; 128x80 771 / 702.
constexpr FwdTileShapeSm90 fwd_tile_shape_sm90(int head_dim) {
  return head_dim <= 64    ? FwdTileShapeSm90{192, 128, 2}
         : head_dim <= 128 ? FwdTileShapeSm90{128, 128, 2}
                           : FwdTileShapeSm90{128, 64, 2};
}
// The d <= 64 bucket's second tile, for short calls (tiles_sm90.cu's fwd_sm90_short_tile picks
// it; the plain kernel only): 128 rows on two consumer warpgroups. The 192-row tile's third
// warpgroup pays at long keys (8k: 537 against 416 TFLOP/s) but a few hundred rows leave most of
// its last row block empty (S 256: rows 256-383 of 192-383) and, causal, mask more keys per tile.
constexpr FwdTileShapeSm90 kFwdShortTileSm90{128, 128, 2};
// Whether this d <= 64 plain forward runs the short tile: the launcher (run_fwd_sm90_) and the
// workspace size (fwd_workspace_sm90) both ask (tiles_sm90.cu, with the measurements).
bool fwd_sm90_short_tile(const AttnFwdParams& params);

template <typename Elem_, int kHeadDim_, int kBlockM_, int kBlockN_, int kStages_, bool kPingPong_ = (kHeadDim_ <= 128),
          int kMaxQStages_ = 2, ModsKind kModsKind_ = kModsNone, bool kDropout_ = false>
struct FwdTraitsSm90 {
  using Elem = Elem_;
  // The score modifiers (softcap, ALiBi, sinks; the bias: common/score_mod.cuh's ScoreModFwd), in
  // their own instantiations as in the portable family, so the plain kernel's code is unchanged.
  static constexpr ModsKind kModsKind = kModsKind_;
  static constexpr bool kMods = kModsKind != kModsNone;
  // Dropout on P (common/dropout.cuh), its own instantiation (never with kMods): each consumer
  // warp's 16-row slice of the wgmma accumulator has the m16n8 C layout, one Philox per 32 keys.
  static constexpr bool kDropout = kDropout_;
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kBlockM = kBlockM_;
  static constexpr int kBlockN = kBlockN_;
  static constexpr int kStages = kStages_;
  // Consumer warpgroups take turns issuing their GEMMs (named barriers), so the tensor cores run
  // one warpgroup's GEMMs while the others run their softmax. S = 8k, TFLOP/s with / without:
  // d64 538 / 484 (causal 477 / 376), d128 658 / 633 (603 / 557); d256 786 / 800 (741 / 755),
  // where the P V GEMM (N = 256) is long enough to hide the softmax without taking turns.
  static constexpr bool kPingPong = kPingPong_;
  // The split tail (tile_scheduler.cuh's TailSplit: the last round's tiles in pieces of key
  // blocks, merged by the last piece) in the plain kernel only: a sink joins a row's denominator
  // once, which pieces would each add, and the other modifiers' and dropout's kernels keep their
  // code unchanged.
  // The d128 tile only (2048 tiles at 16k tokens x 2048 on 132 SMs: 3% of the SMs' time idle in
  // the last round). ptxas 13.0 spills elsewhere: the d64 tile's three warpgroups at 160 registers
  // 44 bytes around a piece's bookkeeping (its last round is fuller anyway: 2752 tiles at 8k, 0.7%),
  // the d256 consumers (O alone is 128 of their 240 registers) 496 bytes.
  static constexpr bool kTailSplit = kModsKind == kModsNone && !kDropout && kHeadDim == 128;

  static constexpr int kConsumerWGs = kBlockM / 64;
  static constexpr int kThreads = 128 * (kConsumerWGs + 1);
  // setmaxnreg budgets: the register file (64K) split so the consumers get as many as possible.
  // Two consumers: 24 x 128 + 240 x 256 = 64,512. Three: 32 x 128 + 160 x 384 = 65,536.
  // The bias kernels with two consumers at 32 / 232 (63,488): at 24 / 240 ptxas 13.0 spills the
  // producer 40 / 16 bytes at d128 / d256, at 32 / 232 nothing; timed 1.004x of 24 / 240 (H200,
  // 6 rounds, session 15: within noise), so the split buys no local-memory traffic for free.
  static constexpr bool kBiasSplit = kModsKind == kModsBias && kConsumerWGs == 2;
  static constexpr int kProducerRegs = kConsumerWGs == 2 ? (kBiasSplit ? 32 : 24) : 32;
  static constexpr int kConsumerRegs = kConsumerWGs == 2 ? (kBiasSplit ? 232 : 240) : 160;

  static constexpr int kColBlocks = kHeadDim / 64;  // 128-byte column blocks of a tile (TMA boxes)
  static constexpr int kMTiles = 1;                 // m16 tiles per warp (wgmma: 16 rows per warp)
  static constexpr int kNTiles = kBlockN / 8;       // n8 column groups of S
  static constexpr int kDTiles = kHeadDim / 8;      // n8 column groups of O
  static constexpr int kKStepsQK = kHeadDim / 16;
  static constexpr int kKStepsPV = kBlockN / 16;

  static constexpr int kQBytes = kBlockM * kHeadDim * 2;
  static constexpr int kKVBytes = kBlockN * kHeadDim * 2;  // one K or one V slot
  // The Q and K/V rings' mbarriers, then the tile queue (fwd_sm90::TileQueue: 4 slots x 48 bytes),
  // then one word per consumer warpgroup (a split-tail piece's verdict: merge_pieces).
  static constexpr int kBarrierBytes = 8 * (4 + 4 * kStages) + 192 + 16;
  // The bias kernel's staged bias (common/bias_stage.cuh): each consumer warp's 16 rows x kBlockN
  // keys, one key block ahead (d128: 32 KB, paid for by the second Q slot, which no longer fits).
  static constexpr int kBiasBytes = kModsKind == kModsBias ? kBlockM / 16 * WarpBiasTile<kBlockN>::kBytes : 0;
  // + 1 KB: the dynamic shared memory base is aligned up to 1024 bytes in the kernel (the swizzle
  // atoms of TMA and wgmma must be 1024-byte aligned).
  static constexpr int kBaseBytes = kQBytes + 2 * kStages * kKVBytes + kBiasBytes + kBarrierBytes + 1024;
  static constexpr int kSmemLimit = 227 * 1024;
  // O is staged for its TMA store in a region of its own where shared memory allows (d <= 128):
  // the next tile's Q then loads while this tile's O is stored. At d = 256 it has none (kOInKv).
  static constexpr bool kSeparateO = kBaseBytes + kQBytes <= kSmemLimit;
  // Two Q slots where they fit too (d <= 128): the next tile's Q lands while this tile's last
  // blocks run, instead of after its last Q K^T (persistent short sequences wait on it).
  static constexpr int kQStages = kMaxQStages_ > 1 && kSeparateO && kBaseBytes + 2 * kQBytes <= kSmemLimit ? 2 : 1;
  static constexpr int kSmemBytes = kBaseBytes + (kSeparateO ? kQBytes : 0) + (kQStages - 1) * kQBytes;
  // Where O has no region of its own (d256), it is staged in the tile's last K slot (warpgroup
  // 0's rows) and last V slot (warpgroup 1's), so Q's only slot is free at the tile's last Q K^T
  // (one arrival a warp) as with a region of its own; the two slots go back to the producer at
  // the next tile's first Q K^T, under which thread 0 waits for the O store's read (consume()).
  // Staged in Q's slot before (session 39's tile timeline, H100, d256 S 512): each tile waited
  // 4,732 / 5,149 cycles (wg 0 / 1) of its ~30,100 for its Q, which the producer could issue only
  // once the O store had read the slot; 120 / 120 staged here. Against O in Q's slot (session 40,
  // H100, 3 alternating rounds of bwd_ab.py --forward, TFLOP/s ratio, dense / causal): S 512
  // 1.047 / 1.071, 1k 1.027 / 1.030, 2k 1.021 / 1.007, 8k 1.015 / 1.007. The slots released at
  // this tile's end instead (thread 0 waiting there for the read): 1.049 / 1.060 ... 1.004 / 1.000.
  static constexpr bool kOInKv = !kSeparateO;
  // The consumer warpgroup's index ptxas can prove uniform (sm90::consumer_warpgroup) at d128,
  // d256 and d64's 192-row tile: the plain d128 kernel's R2UR 98 -> 50, 4,480 -> 4,392 SASS
  // instructions. Session 41
  // (H100, 3 alternating rounds of bwd_ab.py --forward, against the plain index): d128 +1.2-3.7% in
  // every cell but causal S 512 (0.995-0.999), GQA 16/4 +1.8-2.9%; d256 +0.7-1.2% dense, 0.99-1.02
  // causal; d64 at 2k / 8k (the 192-row tile) 0.999-1.025, causal 1.000-1.022, but at S <= 1k causal
  // (the short 128-row tile) 0.979-0.995 in every round, so not that tile. Not the d256 bias kernel
  // either: it spilled 44 bytes with it.
  static constexpr bool kUniformWg = (kHeadDim == 128 || kHeadDim == 256 || (kHeadDim == 64 && kBlockM == 192)) &&
                                     !(kHeadDim == 256 && kModsKind == kModsBias);
  // (kOInKv) the next tile's first K / V must land in another slot than the one its O store holds.
  static_assert(!kOInKv || kStages >= 2, "O in the last K / V slots needs a ring of two slots or more");

  static_assert(std::is_same<Elem, __half>::value || std::is_same<Elem, __nv_bfloat16>::value, "fp16 or bf16");
  static_assert(kHeadDim % 64 == 0 && kHeadDim <= 256, "head-dim buckets are whole 128-byte column blocks");
  static_assert(kBlockM % 64 == 0 && kConsumerWGs >= 1 && kConsumerWGs <= 3, "64 rows per consumer warpgroup");
  static_assert(kBlockN % 16 == 0 && kBlockN <= 256, "wgmma N: multiple of 16 (P V steps), at most 256");
  static_assert(!kDropout || (kBlockN % 32 == 0 && !kMods), "dropout: whole 32-key blocks, no modifiers");
  static_assert(kSmemBytes <= 227 * 1024, "over the sm_90 per-block shared memory limit");
};

// The bias kernels' traits (the launcher and the host's workspace size both name this type): d64
// takes 128 query rows, two consumers at 232 registers and 0 spills, where the plain tile's 192
// rows spilled the three 160-register consumers 62 bytes in the main loop and ran 1.9% slower
// (H200, bias (1, H, S, S), 6 interleaved rounds; kernel_notes_fwd_sm90.md, session 17).
template <typename Elem, int kHeadDim>
using FwdBiasTraitsSm90 =
    FwdTraitsSm90<Elem, kHeadDim, kHeadDim <= 64 ? 128 : fwd_tile_shape_sm90(kHeadDim).block_m,
                  fwd_tile_shape_sm90(kHeadDim).block_n, fwd_tile_shape_sm90(kHeadDim).stages, (kHeadDim <= 128), 2,
                  kModsBias>;

namespace fwd_sm90 {

// Named barrier ids (0 is __syncthreads): per consumer warpgroup, its epilogue (1..3) and its
// ping-pong turn (4..6).
constexpr int kBarEpilogue = 1;
constexpr int kBarTurn = 4;
constexpr int kBarTileGemms = 7;  // (kOInKv) every consumer warpgroup's GEMMs of the tile have retired

// ---- one CTA's tile timeline (dev only: -DFLASHSDPA_SM90_FWD_TIMELINE=1) ----------------------------
// clock64 stamps of each consumer warpgroup's thread 0 in CTA fwd_timeline_cta, per tile with keys
// (the CTA's t-th), read back by scripts/dev/fwd_timeline.cu: where a tile's boundary goes at short
// sequences (issue 12's S 512 cells; session 35's ncu put ~2.4 key blocks' worth of stall samples
// on each tile's own code, against cuDNN's ~0.7). Off by default: tl_stamp() is then empty and the
// kernels' SASS is the same as without it.
#ifndef FLASHSDPA_SM90_FWD_TIMELINE
#define FLASHSDPA_SM90_FWD_TIMELINE 0
#endif
enum TimelineEvent {
  kTlTileStart,  // consume() entered with the tile
  kTlQLanded,    // its Q has landed
  kTlFirstTurn,  // the first block's turn taken (K landed)
  kTlFirstS,     // the first block's S complete
  kTlFirstSoft,  // the first block's softmax done, P in registers
  kTlLoopEnd,    // the middle blocks done
  kTlLastTurn,   // the last P V's turn taken
  kTlFinalized,  // (under the last P V) the rows' factors and LSE computed
  kTlOSlotFree,  // (under the last P V) the LSE stored, the staging rows free (the warpgroup synced)
  kTlLastPv,     // the last P V complete
  kTlStaged,     // O normalized, in shared memory, fenced, synced
  kTlStoreIssued,  // the TMA store issued (thread 0)
  kTlDone,       // epilogue done (O stored or staged, LSE written)
  kTlPopped,     // the next item popped from the tile queue (stamped on this tile's index)
  kTlEvents
};
constexpr int kTlTiles = 32, kTlWGs = 3;
#if FLASHSDPA_SM90_FWD_TIMELINE
__device__ long long fwd_timeline[kTlWGs * kTlEvents * kTlTiles];  // [warpgroup][event][tile]
__device__ int fwd_timeline_cta;
#endif
__device__ __forceinline__ void tl_stamp([[maybe_unused]] TimelineEvent event, [[maybe_unused]] int tile,
                                         [[maybe_unused]] int cwg, [[maybe_unused]] int tid) {
#if FLASHSDPA_SM90_FWD_TIMELINE
  if (tid == 0 && int(blockIdx.x) == fwd_timeline_cta && tile >= 0 && tile < kTlTiles && cwg < kTlWGs)
    fwd_timeline[(cwg * kTlEvents + event) * kTlTiles + tile] = clock64();
#endif
}


// S = Q K^T for this warpgroup's 64 rows (issued, committed; the caller waits). q_desc / k_desc
// describe column block 0 of this warpgroup's Q rows and of the K slot.
template <typename Traits>
__device__ __forceinline__ void gemm_qk(float (&s)[Traits::kBlockN / 2], uint64_t q_desc, uint64_t k_desc) {
  using Op = sm90::WgmmaOp<typename Traits::Elem, Traits::kBlockN>;
  sm90::wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < Traits::kKStepsQK; ++kk) {
    // k16 step kk: column block kk / 4, 32 bytes per step inside it (descriptor units of 16 bytes).
    const uint64_t q_off = ((kk / 4) * Traits::kBlockM * 128 + (kk % 4) * 32) >> 4;
    const uint64_t k_off = ((kk / 4) * Traits::kBlockN * 128 + (kk % 4) * 32) >> 4;
    Op::template ss<0>(s, q_desc + q_off, k_desc + k_off, kk > 0);
  }
  sm90::wgmma_commit();
}

// O += P V (issued, committed). V is the N-major B operand: 16 keys = 2048 bytes per k-step.
template <typename Traits>
__device__ __forceinline__ void gemm_pv(float (&o)[Traits::kHeadDim / 2], const uint32_t (&p16)[Traits::kKStepsPV][4],
                                        uint64_t v_desc) {
  using Op = sm90::WgmmaOp<typename Traits::Elem, Traits::kHeadDim>;
  sm90::wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < Traits::kKStepsPV; ++kk) {
    Op::template rs<1>(o, p16[kk], v_desc + ((kk * 2048) >> 4), 1);
  }
  sm90::wgmma_commit();
}

template <typename Traits>
struct SmemLayout {
  uint32_t q, k, v, bias, o, bars;
  __device__ __forceinline__ explicit SmemLayout(uint32_t base) {
    q = base;
    k = q + Traits::kQStages * Traits::kQBytes;
    v = k + Traits::kStages * Traits::kKVBytes;
    bias = v + Traits::kStages * Traits::kKVBytes;
    o = Traits::kSeparateO ? bias + Traits::kBiasBytes : 0;  // (kOInKv: O is staged in K / V slots)
    bars = bias + Traits::kBiasBytes + (Traits::kSeparateO ? Traits::kQBytes : 0);
  }
  __device__ __forceinline__ uint32_t q_slot(int s) const { return q + s * Traits::kQBytes; }
  __device__ __forceinline__ uint32_t q_full(int s) const { return bars + 8 * s; }
  __device__ __forceinline__ uint32_t q_empty(int s) const { return bars + 8 * (2 + s); }
  __device__ __forceinline__ uint32_t k_full(int s) const { return bars + 8 * (4 + s); }
  __device__ __forceinline__ uint32_t k_empty(int s) const { return bars + 8 * (4 + Traits::kStages + s); }
  __device__ __forceinline__ uint32_t v_full(int s) const { return bars + 8 * (4 + 2 * Traits::kStages + s); }
  __device__ __forceinline__ uint32_t v_empty(int s) const { return bars + 8 * (4 + 3 * Traits::kStages + s); }
  __device__ __forceinline__ uint32_t tile_queue() const { return bars + 8 * (4 + 4 * Traits::kStages); }
  __device__ __forceinline__ uint32_t piece_verdict(int cwg) const { return tile_queue() + 192 + 4 * cwg; }
  __device__ __forceinline__ uint32_t k_slot(int s) const { return k + s * Traits::kKVBytes; }
  __device__ __forceinline__ uint32_t v_slot(int s) const { return v + s * Traits::kKVBytes; }
};

// A tile's work: which key blocks its queries visit and which of those need element-wise masking,
// and where its sequence's rows start (varlen; 0 dense) as TMA coordinates. A varlen tile past its
// sequence's end (the grid covers the longest) has nothing to do, not even an epilogue.
struct TileWork {
  WorkTile tile;
  BlockMask mask;
  int n_block_min, n_block_max, n_unmasked_begin, n_unmasked_end;
  int q_row0, k_row0;  // TMA row coordinates of the sequence's first query and key (int32 in TMA)
  int tma_batch;       // the batch coordinate: 0 for varlen (one packed batch)
  int tail;            // a piece of split-tail tile `tail` (TailSplit; its key blocks above), -1: whole
  bool in_range;
  __device__ __forceinline__ bool has_keys() const { return n_block_max > n_block_min; }
  // Blocks outside [n_unmasked_begin, n_unmasked_end) need element-wise masking.
  __device__ __forceinline__ bool masked(int n) const { return n >= n_unmasked_end || n < n_unmasked_begin; }
};

template <typename Traits>
__device__ __forceinline__ TileWork tile_work(const AttnFwdParams& p, const WorkTile& tile) {
  const SeqlenInfo seq(p, tile.batch);
  // Key blocks outside the mask's range are never loaded (a 4k window on 32k keys costs 4k keys).
  const BlockMask mask(seq, p.mask);
  int n_block_min = mask.template n_block_min<Traits::kBlockM, Traits::kBlockN>(tile.block);
  int n_block_max = mask.template n_block_max<Traits::kBlockM, Traits::kBlockN>(tile.block);
  // Key blocks the bias hides at either end are not loaded either (bias_cells.cuh). The producer
  // and the consumers each compute this from the same summary, so they agree on every block.
  if constexpr (Traits::kModsKind == kModsBias) {
    BiasCells(p.mods, tile.batch, tile.head, seq.seqlen_q)
        .template narrow_keys<Traits::kBlockM, Traits::kBlockN>(tile.block, n_block_min, n_block_max);
  }
  const int n_unmasked_begin = max(mask.template full_begin<Traits::kBlockM, Traits::kBlockN>(tile.block), n_block_min);
  const int n_unmasked_end = min(mask.template full_end<Traits::kBlockM, Traits::kBlockN>(tile.block), n_block_max);
  const bool in_range = tile.block * Traits::kBlockM < seq.seqlen_q;
  return TileWork{tile, mask, n_block_min, in_range ? n_block_max : n_block_min, n_unmasked_begin, n_unmasked_end,
                  static_cast<int>(seq.q_row_offset), static_cast<int>(seq.k_row_offset),
                  p.cu_seqlens_q != nullptr ? 0 : tile.batch, -1, in_range};
}

// One item of a CTA's work as the producer hands it to the consumers: a tile, or (split tail) the
// piece of tail tile `tail` that visits key blocks [key_begin, key_end); tail -1: the whole tile.
struct FwdItem {
  WorkTile tile;
  int key_begin, key_end, tail;
};

template <typename Traits>
__device__ __forceinline__ TileWork item_work(const AttnFwdParams& p, const FwdItem& item) {
  TileWork w = tile_work<Traits>(p, item.tile);
  if (item.tail >= 0) {  // the split tail is dense and unmasked: every tile spans the same key blocks
    w.n_block_min = max(w.n_block_min, item.key_begin);
    w.n_block_max = min(w.n_block_max, item.key_end);
    w.n_unmasked_begin = max(w.n_unmasked_begin, w.n_block_min);
    w.n_unmasked_end = min(w.n_unmasked_end, w.n_block_max);
    w.tail = item.tail;
  }
  return w;
}

// Ring positions, counted over every tile this CTA has run, on both sides of the ring alike: the
// i-th K/V load of the CTA goes to slot i % kStages in phase (i / kStages) & 1; the t-th Q load
// (tiles with keys only) goes to Q slot t % kQStages in phase (t / kQStages) & 1.
struct RingState {
  int kv = 0;
  int q = 0;
  int o_pending = -1;  // (kOInKv, a consumer's thread 0) the K / V slot its last O store still reads
};

// The producer: per tile, Q once its slot is free, then K_j and V_j for j from the last visible
// key block down to the first.
template <typename Traits>
__device__ __forceinline__ void produce(const FwdSm90Args& args, const SmemLayout<Traits>& sm, const TileWork& w,
                                        RingState& ring) {
  const AttnFwdParams& p = args.p;
  const WorkTile& tile = w.tile;
  const int kv_head = tile.head / (p.heads_q / p.heads_kv);
  const int q_slot = ring.q % Traits::kQStages;
  sm90::mbar_wait(sm.q_empty(q_slot), ((ring.q / Traits::kQStages) & 1) ^ 1);
  sm90::mbar_arrive_expect_tx(sm.q_full(q_slot), Traits::kQBytes);
#pragma unroll
  for (int c = 0; c < Traits::kColBlocks; ++c) {
    sm90::tma_load_4d(sm.q_slot(q_slot) + c * Traits::kBlockM * 128, &args.tma_q, sm.q_full(q_slot), c * 64,
                      w.q_row0 + tile.block * Traits::kBlockM, tile.head, w.tma_batch);
  }
  ++ring.q;
  // One K or V tile into its ring slot, once the consumers have released the slot.
  auto load_kv = [&](uint32_t empty, uint32_t full, uint32_t slot, const CUtensorMap* map, uint32_t parity, int n) {
    sm90::mbar_wait(empty, parity ^ 1);
    sm90::mbar_arrive_expect_tx(full, Traits::kKVBytes);
#pragma unroll
    for (int c = 0; c < Traits::kColBlocks; ++c) {
      sm90::tma_load_4d(slot + c * Traits::kBlockN * 128, map, full, c * 64, w.k_row0 + n * Traits::kBlockN, kv_head,
                        w.tma_batch);
    }
  };
  for (int n = w.n_block_max - 1; n >= w.n_block_min; --n, ++ring.kv) {
    const int s = ring.kv % Traits::kStages;
    const uint32_t parity = (ring.kv / Traits::kStages) & 1;
    load_kv(sm.k_empty(s), sm.k_full(s), sm.k_slot(s), &args.tma_k, parity, n);
    load_kv(sm.v_empty(s), sm.v_full(s), sm.v_slot(s), &args.tma_v, parity, n);
  }
}

// The split tail's workspace (TailSplit), allocated by the caller at the bytes the host reports
// (fwd_workspace_sm90) and zeroed up to slots_offset() by the launcher: one ticket per (tail tile,
// consumer warpgroup) counting its finished pieces, then two slots per worker (TailSplit::slot),
// each holding one piece's normalized O (float32) and LSE per consumer warpgroup in the consumers'
// own fragment order: O as kOFloats / 4 float4 groups of 128 threads (one 2 KB store per group),
// then the LSE pair (rows g, g + 8) of every thread.
template <typename Traits>
struct SplitWorkspace {
  static constexpr int kOFloats = Traits::kHeadDim / 2;  // a consumer thread's O accumulator
  static constexpr int kWgBytes = 128 * (kOFloats + 2) * 4;
  static constexpr int64_t kSlotBytes = int64_t(Traits::kConsumerWGs) * kWgBytes;
  __host__ __device__ static int64_t slots_offset(const TailSplit& s) {
    return (int64_t(s.tiles) * Traits::kConsumerWGs * 4 + 255) / 256 * 256;
  }
  __host__ __device__ static int64_t bytes(const TailSplit& s) {
    return s.enabled() ? slots_offset(s) + 2 * int64_t(s.workers) * kSlotBytes : 0;
  }
};

// A split-tail piece's epilogue: its normalized O and LSE go to its slot (WorkTile::split), then
// its warpgroup adds the piece's key blocks to the tile's ticket; the piece that completes the
// tile's blocks reads every piece's slot in worker order (its own too, so the sum does not depend
// on which piece finished last: bitwise reproducible), merges them into o / lse (softmax.cuh's
// lse_weight / merged_lse) and returns true: it stores the tile. The others return false and
// store nothing. No piece waits for another, so the merge is safe however many of the grid's CTAs
// are resident.
template <typename Traits>
__device__ __forceinline__ bool merge_pieces(const FwdSm90Args& args, const SmemLayout<Traits>& sm,
                                             const TileWork& w, int cwg, float (&o)[Traits::kHeadDim / 2],
                                             float (&lse)[2]) {
  using Ws = SplitWorkspace<Traits>;
  constexpr int kGroups = Ws::kOFloats / 4;
  const int tid = threadIdx.x % 128;
  char* const wg_slots = args.workspace + Ws::slots_offset(args.split) + cwg * Ws::kWgBytes;
  auto o_part = [&](int slot) { return reinterpret_cast<float4*>(wg_slots + slot * Ws::kSlotBytes) + tid; };
  auto lse_part = [&](int slot) {
    return reinterpret_cast<float2*>(wg_slots + slot * Ws::kSlotBytes + Ws::kOFloats * 128 * 4) + tid;
  };
  {
    float4* dst = o_part(w.tile.split);
#pragma unroll
    for (int g = 0; g < kGroups; ++g) dst[g * 128] = make_float4(o[4 * g], o[4 * g + 1], o[4 * g + 2], o[4 * g + 3]);
    *lse_part(w.tile.split) = make_float2(lse[0], lse[1]);
  }
  __threadfence();  // every thread's partial is visible before the ticket that counts it
  sm90::named_sync(kBarEpilogue + cwg, 128);
  if (tid == 0) {
    int* ticket = reinterpret_cast<int*>(args.workspace) + w.tail * Traits::kConsumerWGs + cwg;
    const int blocks = w.n_block_max - w.n_block_min;
    st_shared_b32(sm.piece_verdict(cwg), atomicAdd(ticket, blocks) + blocks == args.split.units ? 1u : 0u);
  }
  sm90::named_sync(kBarEpilogue + cwg, 128);
  if (ld_shared_b32(sm.piece_verdict(cwg)) == 0u) return false;
  __threadfence();  // the other pieces' partials, counted before the last ticket, are read after it
  const uint32_t pieces = args.split.pieces(w.tail);
  const int count = piece_count(pieces);  // 2 or 3
  float max_lse[2] = {-INFINITY, -INFINITY};
  for (int i = 0; i < count; ++i) {
    const float2 l = __ldcg(lse_part(piece_slot(pieces, i)));
    max_lse[0] = fmaxf(max_lse[0], l.x);
    max_lse[1] = fmaxf(max_lse[1], l.y);
  }
#pragma unroll
  for (int i = 0; i < Ws::kOFloats; ++i) o[i] = 0.f;
  float sum[2] = {0.f, 0.f};
  for (int i = 0; i < count; ++i) {
    const int slot = piece_slot(pieces, i);
    const float2 l = __ldcg(lse_part(slot));
    const float weight[2] = {lse_weight(l.x, max_lse[0]), lse_weight(l.y, max_lse[1])};
    sum[0] += weight[0];
    sum[1] += weight[1];
    const float4* src = o_part(slot);
#pragma unroll
    for (int g = 0; g < kGroups; ++g) {
      const float4 v = __ldcg(src + g * 128);
      o[4 * g] += weight[0] * v.x;
      o[4 * g + 1] += weight[0] * v.y;
      o[4 * g + 2] += weight[1] * v.z;
      o[4 * g + 3] += weight[1] * v.w;
    }
  }
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const float inv = sum[h] > 0.f ? 1.f / sum[h] : 1.f;
#pragma unroll
    for (int g = 0; g < kGroups; ++g) {
      o[4 * g + 2 * h] *= inv;
      o[4 * g + 2 * h + 1] *= inv;
    }
    lse[h] = merged_lse(max_lse[h], sum[h], INFINITY);
  }
  return true;
}

// One consumer warpgroup, one tile: the mainloop over key blocks and the epilogue of its 64 rows.
template <typename Traits>
__device__ __forceinline__ void consume(const FwdSm90Args& args, const SmemLayout<Traits>& sm, const TileWork& w,
                                        RingState& ring, int cwg) {
  using Elem = typename Traits::Elem;
  constexpr int kBlockN = Traits::kBlockN;
  constexpr int kNTiles = Traits::kNTiles;
  constexpr int kDTiles = Traits::kDTiles;
  constexpr int kStages = Traits::kStages;
  const AttnFwdParams& p = args.p;
  const WorkTile& tile = w.tile;
  if (!w.in_range) return;  // (varlen) past its sequence: the producer loaded nothing for it either

  const int tid = threadIdx.x % 128;
  const int warp = tid / 32;
  const int lane = tid % 32;
  const int row_in_tile = cwg * 64 + warp * 16 + lane / 4;  // this thread's row g (and g + 8)
  const int first_row = tile.block * Traits::kBlockM + row_in_tile;

  float o_acc[Traits::kHeadDim / 2];
  float s_acc[kBlockN / 2];
  auto& o = *reinterpret_cast<float(*)[1][kDTiles][4]>(o_acc);
  auto& s = *reinterpret_cast<float(*)[1][kNTiles][4]>(s_acc);
#pragma unroll
  for (int i = 0; i < Traits::kHeadDim / 2; ++i) o_acc[i] = 0.f;
  uint32_t p16[Traits::kKStepsPV][4];
  OnlineSoftmax<1> softmax;
  // Dropout: this lane's Philox stream for the (batch, head); the warp's 16 rows start at warp_row.
  DropoutRng rng;
  if constexpr (Traits::kDropout) rng = DropoutRng(p.dropout, tile.batch, tile.head, p.heads_q, lane);
  const int warp_row = first_row - lane / 4;
  using Mod = ScoreModFwd<Traits::kModsKind>;
  // > 0: the host sends other scales to the portable family. With softcap the raw unit is the
  // softcap's (score_mod.cuh).
  const float scale_log2 = Traits::kMods ? Mod::scale_log2(p) : p.scale_log2;
  // The modifiers act on the raw scores of a key block before the mask (kMods only).
  // need: the block's (bias_cells.cuh), read when the block's bias is staged, a block ahead (one
  // register holds it until the block's modify()).
  auto block_need = [&](int n) {
    if constexpr (Traits::kModsKind == kModsBias) {
      return BiasCells(p.mods, tile.batch, tile.head, w.mask.seqlen_q).template need<Traits::kBlockM, Traits::kBlockN>(tile.block, n);
    } else {
      return TileNeed::kBias;
    }
  };
  // The bias (kModsBias): each warp stages its 16 rows' bias of a key block in shared memory one
  // block ahead (bias_stage.cuh), one cp.async group per block; modify() waits for it.
  [[maybe_unused]] const WarpBiasTile<kBlockN> bias_tile{sm.bias + (cwg * 4 + warp) * WarpBiasTile<kBlockN>::kBytes};
  auto stage_bias = [&](int n, TileNeed need) {
    if constexpr (Traits::kModsKind == kModsBias) {
      if (need == TileNeed::kBias) {
        const int64_t plane = bias_plane(tile.batch, tile.head, p.mods.bias_batch_stride, p.mods.bias_head_stride);
        // 16-byte copies where the plane and its rows are 16-byte aligned (any contiguous bias
        // with Sk % 8 == 0); 4-byte pairs otherwise. Uniform across the grid. bias_stage.cuh's
        // rows_aligned16 written out: through the call ptxas allocates the bias kernel's registers
        // otherwise (d256 +16 SASS instructions), a change left for a session with a GPU.
        const bool aligned16 = ((reinterpret_cast<uintptr_t>(p.mods.bias) |
                                 static_cast<uintptr_t>(p.mods.bias_batch_stride | p.mods.bias_head_stride |
                                                        p.mods.bias_row_stride) * 2) & 15) == 0;
        bias_tile.load(static_cast<const uint16_t*>(p.mods.bias) + plane, p.mods.bias_row_stride, aligned16, warp_row,
                       n * kBlockN, w.mask.seqlen_q, w.mask.seqlen_k, lane);
      }
      cp_async_commit();
    }
  };
  auto modify = [&](int n, TileNeed need) {
    if constexpr (Traits::kModsKind == kModsBias) {
      const SeqlenInfo seq(p, tile.batch);
      cp_async_wait<0>();
      __syncwarp();
      Mod::apply(p, seq, tile.batch, tile.head, s, first_row, n * kBlockN + 2 * (lane % 4), need, bias_tile);
      __syncwarp();  // every lane has read the tile before the next block's copies overwrite it
    } else if constexpr (Traits::kMods) {
      const SeqlenInfo seq(p, tile.batch);
      Mod::apply(p, seq, tile.batch, tile.head, s, first_row, n * kBlockN + 2 * (lane % 4), need);
    }
  };

  // Descriptors of column block 0: this warpgroup's Q rows, and K / V slot 0 (slots are kKVBytes apart).
  const int q_slot = ring.q % Traits::kQStages;
  const uint64_t q_desc = sm90::make_desc(sm.q_slot(q_slot) + cwg * 64 * 128, 16, 1024);
  const uint64_t k_desc0 = sm90::make_desc(sm.k, 16, 1024);
  const uint64_t v_desc0 = sm90::make_desc(sm.v, kBlockN * 128, 1024);
  constexpr uint64_t kSlotDesc = Traits::kKVBytes >> 4;
  const bool arriver = lane == 0;  // one arrival per warp on the "empty" barriers

  // Ping-pong turns: warpgroup w waits on barrier kBarTurn + w before issuing its GEMMs and passes
  // the turn to w + 1 after (128 waiting + 128 arriving threads per barrier). The chain runs on
  // across tiles (opened and closed once per kernel: see the kernel body), so warpgroup 0 starts
  // the next tile's Q K^T while the others finish this one and run their epilogues.
  constexpr int kWGs = Traits::kConsumerWGs;
  auto turn_begin = [&] {
    if constexpr (Traits::kPingPong) sm90::named_sync(kBarTurn + cwg, 256);
  };
  auto turn_end = [&] {
    if constexpr (Traits::kPingPong) sm90::named_arrive(kBarTurn + (cwg + 1) % kWGs, 256);
  };
  // Q's slot is free for the next tile once this warpgroup's last Q K^T has completed (O is
  // staged elsewhere: in a region of its own or, kOInKv, in the last K / V slots).
  auto release_q = [&] {
    if (arriver) sm90::mbar_arrive(sm.q_empty(q_slot));
  };
  // (kOInKv) a tile's last K / V slots, O's staging, back to the producer once every warpgroup has
  // released them: thread 0 of each adds its warpgroup's share (4 of the 4 x kConsumerWGs arrivals
  // each slot counts).
  auto release_o_slots = [&](int slot) {
    sm90::mbar_arrive(sm.k_empty(slot), 4);
    sm90::mbar_arrive(sm.v_empty(slot), 4);
  };

  // The epilogue's parts that do not need O (finish_rows, store_lse, wait_o_rows) run under the
  // last P V in a tile with keys. mult: the rows' factor on O (1 / sum, with dropout's 1 / (1 - p)).
  float mult[2], lse[2];
  auto finish_rows = [&] {
    if constexpr (Traits::kMods) {
      if (p.mods.sinks != nullptr) {
        softmax.finalize_rows_with_sink(Mod::scale(p), Mod::sink(p, tile.head), mult, lse);
      } else {
        softmax.finalize_rows(Mod::scale(p), mult, lse);
      }
    } else {
      // MUFU's log2 and reciprocal (finalize_rows<true>): +1.6% d128 S 512, +2-3% d64 S 512 / 1k
      // against logf and the IEEE division (session 37, H100); the LSE tests pass with it.
      softmax.template finalize_rows<true>(p.scale, mult, lse);
      if constexpr (Traits::kDropout) {  // the kept P's 1 / (1 - p), folded into the row's factor
        mult[0] *= p.dropout.rp_keep;
        mult[1] *= p.dropout.rp_keep;
      }
    }
  };
  // Not in the d64 192-row tile with the modifiers (128 registers): its four live scalars made
  // ptxas spill 4 bytes there (13.0); every other instantiation keeps 0 spills.
  constexpr bool kRowsUnderPv = !(Traits::kMods && Traits::kConsumerWGs == 3);
  // A split-tail piece's LSE is merged with the other pieces' first (merge_pieces): stored last.
  const bool whole = !Traits::kTailSplit || w.tail < 0;
  auto store_lse = [&] {
    if (lane % 4 == 0 && p.lse != nullptr) {
      float* lse_out = p.lse + tile.batch * p.lse_batch_stride + tile.head * p.lse_head_stride +
                       int64_t(w.q_row0) * p.lse_row_stride;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int row = first_row + 8 * h;
        if (row < w.mask.seqlen_q) lse_out[row * p.lse_row_stride] = lse[h];
      }
    }
  };
  // (O's region of its own) the staging rows of this warpgroup are free once its previous store
  // has read them: thread 0 waits for that before the barrier. (kOInKv stages O in this tile's
  // last K / V slots, which the producer refilled only after any earlier store had read them.)
  auto wait_o_rows = [&] {
    if (tid == 0) sm90::tma_store_wait_read();
    sm90::named_sync(kBarEpilogue + cwg, 128);
  };

  const int tl_tile = ring.q;  // (the timeline's tile index: the CTA's t-th tile with keys)
  int last_slot = 0;           // (kOInKv) the ring slot of the tile's last key block: O's staging
  if (w.has_keys()) {
    tl_stamp(kTlTileStart, tl_tile, cwg, tid);
    int n = w.n_block_max - 1;
    TileNeed need = block_need(n);
    stage_bias(n, need);  // the tile's first block: its copy runs under the Q / K waits and S_0 only
    sm90::mbar_wait(sm.q_full(q_slot), (ring.q / Traits::kQStages) & 1);
    tl_stamp(kTlQLanded, tl_tile, cwg, tid);
    ++ring.q;
    // First block: S only (nothing to multiply with V yet).
    {
      const int slot = ring.kv % kStages;
      sm90::mbar_wait(sm.k_full(slot), (ring.kv / kStages) & 1);
      turn_begin();
      tl_stamp(kTlFirstTurn, tl_tile, cwg, tid);
      gemm_qk<Traits>(s_acc, q_desc, k_desc0 + slot * kSlotDesc);
      turn_end();
      if constexpr (Traits::kOInKv) {
        // The previous tile's O store has long read its slots (a round trip ago, ~1,000 cycles at
        // d256 S 512): the wait, if any, runs under this first S. The slot is this tile's second.
        if (tid == 0 && ring.o_pending >= 0) {
          sm90::tma_store_wait_read();
          release_o_slots(ring.o_pending);
          ring.o_pending = -1;
        }
      }
      sm90::wgmma_wait<0>();
      sm90::fence_regs(s_acc);
      tl_stamp(kTlFirstS, tl_tile, cwg, tid);
      if (arriver && !(Traits::kOInKv && n == w.n_block_min)) sm90::mbar_arrive(sm.k_empty(slot));
      if (n == w.n_block_min) release_q();
      modify(n, need);
      if (n > w.n_block_min) stage_bias(n - 1, need = block_need(n - 1));
      float correction[2];
      if (w.masked(n)) w.mask.apply(s, first_row, n * kBlockN + 2 * (lane % 4), -INFINITY);
      softmax.template online_step<kNTiles>(s, scale_log2, correction);  // o is zero: no rescale needed
      if constexpr (Traits::kDropout) apply_dropout(rng, s, warp_row, n * kBlockN);  // after the row sums
      sm90::accumulator_to_a<Elem, kNTiles>(p16, s);
      tl_stamp(kTlFirstSoft, tl_tile, cwg, tid);
      ++ring.kv;
    }
    for (--n; n >= w.n_block_min; --n, ++ring.kv) {
      const int slot = ring.kv % kStages;
      const int prev = (ring.kv - 1) % kStages;
      sm90::mbar_wait(sm.k_full(slot), (ring.kv / kStages) & 1);
      turn_begin();
      gemm_qk<Traits>(s_acc, q_desc, k_desc0 + slot * kSlotDesc);
      sm90::mbar_wait(sm.v_full(prev), ((ring.kv - 1) / kStages) & 1);
      gemm_pv<Traits>(o_acc, p16, v_desc0 + prev * kSlotDesc);
      turn_end();
      sm90::wgmma_wait<1>();  // S_j is ready; P_{j-1} V_{j-1} may still run
      sm90::fence_regs(s_acc);
      if (arriver && !(Traits::kOInKv && n == w.n_block_min)) sm90::mbar_arrive(sm.k_empty(slot));
      if (n == w.n_block_min) release_q();
      modify(n, need);
      if (n > w.n_block_min) stage_bias(n - 1, need = block_need(n - 1));
      if (w.masked(n)) w.mask.apply(s, first_row, n * kBlockN + 2 * (lane % 4), -INFINITY);
      float correction[2];
      const bool rescale = softmax.template online_step<kNTiles>(s, scale_log2, correction);
      if constexpr (Traits::kDropout) apply_dropout(rng, s, warp_row, n * kBlockN);
      sm90::wgmma_wait<0>();
      sm90::fence_regs(o_acc);
      if (arriver) sm90::mbar_arrive(sm.v_empty(prev));
      if (rescale) softmax.template rescale<kDTiles>(o, correction);
      sm90::accumulator_to_a<Elem, kNTiles>(p16, s);
    }
    tl_stamp(kTlLoopEnd, tl_tile, cwg, tid);
    const int prev = (ring.kv - 1) % kStages;
    sm90::mbar_wait(sm.v_full(prev), ((ring.kv - 1) / kStages) & 1);
    turn_begin();
    tl_stamp(kTlLastTurn, tl_tile, cwg, tid);
    gemm_pv<Traits>(o_acc, p16, v_desc0 + prev * kSlotDesc);
    turn_end();
    // Under the last P V (~620 cycles at d128), what does not need O: the rows' scalars, a whole
    // tile's LSE store, and the wait for O's staging rows (session 37's timeline: these took ~1,400
    // of the epilogue's ~2,150 cycles at d128, the tensor cores mostly idle under them).
    if constexpr (kRowsUnderPv) {
      finish_rows();
      tl_stamp(kTlFinalized, tl_tile, cwg, tid);
      if (whole) store_lse();
    }
    if constexpr (!Traits::kOInKv) wait_o_rows();
    tl_stamp(kTlOSlotFree, tl_tile, cwg, tid);
    sm90::wgmma_wait<0>();
    sm90::fence_regs(o_acc);
    tl_stamp(kTlLastPv, tl_tile, cwg, tid);
    if constexpr (Traits::kOInKv) {
      // O goes into the last K and V slots, which every warpgroup's last Q K^T and P V read: held
      // (their releases moved to the O store) until every warpgroup's GEMMs have retired.
      last_slot = prev;
      sm90::named_sync(kBarTileGemms, 128 * Traits::kConsumerWGs);
    } else if (arriver) {
      sm90::mbar_arrive(sm.v_empty(prev));
    }
  }
  if (!w.has_keys()) {  // every row empty (finish_rows' empty case, with or without a sink)
    mult[0] = mult[1] = 1.f;
    lse[0] = lse[1] = INFINITY;
  } else if (!kRowsUnderPv) {
    finish_rows();
  }

  // ---- epilogue: normalize, stage O, TMA store ------------------------------------------------
  softmax.template rescale<kDTiles>(o, mult);
  if constexpr (Traits::kTailSplit) {
    if (w.tail >= 0 && !merge_pieces<Traits>(args, sm, w, cwg, o_acc, lse)) {
      // Another piece of the tile stores it. (O staged in the last K / V slots, d256, would have
      // to release them here: the split tail runs where O has a region of its own.)
      static_assert(Traits::kSeparateO, "a piece that stores nothing must release no staging slot");
      return;
    }
  }
  // O through shared memory: a TMA store (dense), or the valid rows copied out (varlen). Column
  // block c (64 values, 128 bytes) of the tile's staged row `row` starts at o_addr(c, row): in O's
  // region, kBlockM rows a column block, or (kOInKv) in the last K slot (warpgroup 0)
  // or V slot (warpgroup 1), whose 64 keys x 256 values hold the warpgroup's 64 rows x 256 values.
  // Either way a warpgroup's 64 rows of a column block start 1024-byte aligned (the swizzle's atom).
  static_assert(!Traits::kOInKv || (Traits::kConsumerWGs == 2 && Traits::kKVBytes == 64 * Traits::kHeadDim * 2),
                "kOInKv: one warpgroup's O fills one K / V slot");
  auto o_addr = [&](int c, int row) -> uint32_t {
    if constexpr (Traits::kOInKv) {
      return (cwg == 0 ? sm.k_slot(last_slot) : sm.v_slot(last_slot)) + c * 64 * 128 + (row - cwg * 64) * 128;
    } else {
      return sm.o + c * Traits::kBlockM * 128 + row * 128;
    }
  };
  auto stage_and_store_o = [&] {
    if (!w.has_keys()) wait_o_rows();  // (a tile with keys waited under its last P V)
#pragma unroll
    for (int j = 0; j < kDTiles; ++j) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int row = row_in_tile + 8 * h;  // row % 8 == lane / 4: the swizzle phase of this row
        const uint32_t addr = o_addr(j / 8, row) + (((j % 8) ^ (lane / 4)) << 4) + (lane % 4) * 4;
        st_shared_b32(addr, ElemTraits<Elem>::pack(o[0][j][2 * h], o[0][j][2 * h + 1]));
      }
    }
    sm90::fence_async_shared();
    sm90::named_sync(kBarEpilogue + cwg, 128);
    tl_stamp(kTlStaged, tl_tile, cwg, tid);
    if (p.cu_seqlens_q != nullptr) {
      // Varlen: a TMA store would write the tile's rows past the sequence into the next one's, so
      // the warpgroup copies its valid rows out of the staging tile with 16-byte stores.
      constexpr int kChunks = Traits::kHeadDim / 8;  // 16-byte chunks of a staged row
      const int row0 = tile.block * Traits::kBlockM + cwg * 64;  // the warpgroup's first row in its sequence
      const int rows = min(64, w.mask.seqlen_q - row0);
      Elem* out = static_cast<Elem*>(p.o) + tile.head * p.o_head_stride + (int64_t(w.q_row0) + row0) * p.o_row_stride;
      for (int i = tid; i < 64 * kChunks; i += 128) {
        const int r = i / kChunks, c = i % kChunks;
        if (r < rows && c * 8 < p.head_dim_v) {
          const uint32_t addr = o_addr(c / 8, cwg * 64 + r) + (((c % 8) ^ (r % 8)) << 4);
          *reinterpret_cast<uint4*>(out + int64_t(r) * p.o_row_stride + c * 8) = ld_shared_v4(addr);
        }
      }
      if constexpr (Traits::kOInKv) {
        // O sits in the last K / V slots: the next K / V may land there only after every thread
        // has read its rows.
        sm90::named_sync(kBarEpilogue + cwg, 128);
        if (tid == 0) release_o_slots(last_slot);  // (a tile with keys: a keyless one stages nothing)
      }
    } else if (tid == 0) {
#pragma unroll
      for (int c = 0; c < Traits::kColBlocks; ++c) {
        sm90::tma_store_4d(&args.tma_o, o_addr(c, cwg * 64), c * 64,
                           tile.block * Traits::kBlockM + cwg * 64, tile.head, tile.batch);
      }
      sm90::tma_store_commit();
      tl_stamp(kTlStoreIssued, tl_tile, cwg, tid);
      if constexpr (Traits::kOInKv) {
        // O sits in the last K / V slots: the next K / V may land there only after the store has
        // read it. The next tile's second block needs the slot: released at its first Q K^T.
        ring.o_pending = last_slot;
      }
    }
  };
  if (!Traits::kSeparateO && !w.has_keys()) {
    // O (0: no key) where it has no region of its own: this tile loaded no K / V, so it holds no
    // slot to stage O in; straight from registers, the tile's valid rows only.
    Elem* out = static_cast<Elem*>(p.o) + batch_offset(p, tile.batch, p.o_batch_stride) + tile.head * p.o_head_stride +
                int64_t(w.q_row0) * p.o_row_stride;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = first_row + 8 * h;
      if (row >= w.mask.seqlen_q) continue;
#pragma unroll
      for (int j = 0; j < kDTiles; ++j) {
        const int col = 8 * j + 2 * (lane % 4);
        if (col < p.head_dim_v)
          *reinterpret_cast<uint32_t*>(out + int64_t(row) * p.o_row_stride + col) =
              ElemTraits<Elem>::pack(o[0][j][2 * h], o[0][j][2 * h + 1]);
      }
    }
  } else {
    stage_and_store_o();
  }
  if (!(kRowsUnderPv && whole && w.has_keys())) store_lse();
  if (w.has_keys()) tl_stamp(kTlDone, tl_tile, cwg, tid);
}


// The persistent schedule: which tiles a CTA runs, in which order. Its producer thread walks it
// and hands each tile to the consumer warpgroups through a queue in shared memory (TileQueue), so
// a schedule may be dynamic: the consumers never compute it themselves.
// - Non-causal (every tile the same length): static, head-major, so the CTAs resident at any
//   moment share a few heads' K/V in L2; CTA c runs tile c of every round of gridDim.x tiles.
// - Masked (causal, windows: tiles of different lengths), with a tile counter (params.h's
//   tile_counter, in the call's workspace: fwd_workspace_plan): dynamic. Tiles are ordered in
//   sections of `group` (head, batch) pairs whose K and V fit in kL2SectionBytes, each section
//   longest-first (last query block first) with its heads inner; a CTA's first tile is blockIdx.x
//   and each later one the next of the counter (gridDim.x + atomicAdd), so a CTA that drew long
//   tiles draws fewer: the longest-processing-time rule, without a static split's imbalance. ncu (causal 2k d128 B8 H16, session 9): the
//   static block-major order below kept every head's K/V in flight at once (128 MB for 50 MB of
//   L2): L2 hit rate 33% (cuDNN 75%), DRAM 76% busy reading 1.1 GB, 4x the K/V bytes.
// - Masked without a counter (a caller that gave no workspace): static block-major, heaviest
//   first, rounds alternating direction (CTA c takes position c of even rounds and gridDim.x - 1 -
//   c of odd ones), so a CTA that drew a heavy tile draws a light one next (in plain round-robin
//   CTA 0 gets the heaviest tile of every round: 1.3x the work of the last CTA at d256, 8k).
//   Sections with this static split lost (session 8, `next/fwd-l2-groups`: 8k causal -18%): each
//   section ends in its own tail, which only a dynamic schedule fills.
struct PersistentTileScheduler {
  // Of the H100's / H200's 50 MB of L2, as the backward's grouped order (BwdGridOrder, measured
  // there: 32 MB 0.974 ms, 8 MB 0.975, everything in one group 1.20 at 2k causal d128).
  // 8 MB lost at d128 causal 8k / 16k (0.977 / 0.950 of 32 MB, session 19).
  static constexpr int64_t kL2SectionBytes = int64_t(32) << 20;
  int num_blocks, num_heads, batch;
  bool head_major;
  int32_t* counter;  // dynamic when non-null (masked calls only)
  int group;         // (head, batch) pairs per section of the dynamic order

  // Tile indices are int32: 2^31 tiles of 64+ query rows would be 16 TB of Q at d64 (the host's
  // launcher refuses a grid past INT_MAX anyway). Narrow indices keep the producer thread, which
  // runs on 24 registers after setmaxnreg, from spilling (int64: 28 bytes at d128).
  __host__ __device__ int64_t num_tiles() const { return int64_t(num_blocks) * num_heads * batch; }
  __host__ __device__ __forceinline__ bool dynamic() const { return counter != nullptr; }
  // This CTA's first tile (round 0 of every order).
  __device__ __forceinline__ int first() const { return blockIdx.x; }
  // The tile after `t` (>= num_tiles(): no more). Dynamic: fetched from the counter; static: the
  // position of round `round` + 1 (the caller counts rounds).
  __device__ __forceinline__ int next(int t, int num_tiles, int& round) const {
    if (dynamic()) return t < num_tiles ? static_cast<int>(gridDim.x) + atomicAdd(counter, 1) : t;
    ++round;
    const int base = round * static_cast<int>(gridDim.x);
    return (!head_major && (round & 1)) ? base + static_cast<int>(gridDim.x - 1 - blockIdx.x) : base + static_cast<int>(blockIdx.x);
  }
  // The last CTA to finish zeroes the counter again (every CTA's last fetch came before its own
  // arrival here, so no fetch follows the reset). The launcher's memset already zeroes it before
  // every launch, so this is redundant work (a CTA's one atomic); it stays because without it
  // ptxas 13.0 allocates the 24-register producer thread worse: 44-64 bytes of spill in the d128
  // and d256 kernels (measured, session 13), 0 with it.
  __device__ __forceinline__ void finish() const {
    if (!dynamic()) return;
    __threadfence();
    if (atomicAdd(counter + 1, 1) == static_cast<int>(gridDim.x) - 1) {
      atomicExch(counter, 0);
      atomicExch(counter + 1, 0);
    }
  }
  __device__ __forceinline__ WorkTile tile(int linear) const {
    WorkTile t;
    t.split = 0;
    if (head_major) {
      const int head_linear = linear / num_blocks;
      t.block = num_blocks - 1 - (linear - head_linear * num_blocks);
      t.head = head_linear % num_heads;
      t.batch = head_linear / num_heads;
    } else if (dynamic()) {
      const int per_section = group * num_blocks;
      const int section = linear / per_section;
      const int first = section * group;
      const int size = min(group, num_heads * batch - first);
      const int within = linear - section * per_section;
      t.block = num_blocks - 1 - within / size;
      const int head_batch = first + within % size;
      t.head = head_batch % num_heads;
      t.batch = head_batch / num_heads;
    } else {
      const int per_block = num_heads * batch;
      t.block = num_blocks - 1 - linear / per_block;
      const int rest = linear % per_block;
      t.head = rest % num_heads;
      t.batch = rest / num_heads;
    }
    return t;
  }
};

// group: the section size (sched_group below), which the launcher computes once (host) and the
// kernel reads from its parameters.
// Dynamic up to max_dynamic_blocks<Traits>() query blocks per head, static beyond (long tiles walk
// their keys in step under the static order and share them in L2 that way; short ones do not).
// Measured (H200, bf16, B*S = 16k, H*D = 2048, causal, TFLOP/s dynamic / static, two calls of 3
// interleaved rounds each; kernel_notes_fwd_sm90.md, session 9): d128 512 1.14-1.15x, 1k
// 1.19-1.22x, 2k 1.17-1.25x, 4k 0.90-1.02x, 8k 0.95-0.98x, 16k 0.98-0.99x; d256 2k 1.10x, 4k
// 0.91-1.00x, 8k 0.90-0.93x; d64 (192-row blocks) 2k 1.04-1.07x, 4k 1.00-1.02x: 16 blocks then.
// d128 since session 19 at every length: on today's kernel (3 interleaved rounds, dynamic /
// static, scripts/dev/fwd_order_ab.sh at 57cf4e7) 4k 1.079, 8k 1.042, 16k 1.016, GQA 16/4 8k
// 0.994, 2k 0.997 (16 blocks: dynamic in both); ncu causal 8k: L2 hit rate 66.1% -> 91.4%, DRAM
// reads 1.12 GB -> 239 MB, 839 -> 810 us. 8 MB sections instead of 32 lost (8k 0.977, 16k 0.950).
// d64 and d256 measured in session 20 (3 interleaved rounds, dynamic at every length / 16 blocks,
// scripts/dev/fwd_order_dims_ab.sh at 1433008; ncu causal 8k): d64 (192-row blocks) 4k 1.045, 8k
// 1.015, 16k 1.000 (L2 hit 48.5% -> 86.3%, DRAM 1.46 GB -> 263 MB): every length. d256 4k 1.024,
// 8k 0.971, 16k 0.944 (L2 hit 78.5% -> 87.3% yet 726 -> 746 us; why is unmeasured: the guess is
// that DRAM never limited d256, so only the order's cost shows): 32 blocks (4k).
// (1000000 rather than 1 << 30: the A/B's value, SASS-identical to its build; 1 << 30 cost the
// d128 producer 8 bytes of spill in ptxas 13.0.)
template <typename Traits>
__host__ __device__ constexpr int max_dynamic_blocks() {
  return Traits::kHeadDim == 256 ? 32 : 1000000;
}

// Whether the problem takes the dynamic order when it has a counter (masked, few query blocks).
template <typename Traits>
__host__ __device__ inline bool fwd_sm90_dynamic(const AttnFwdParams& p) {
  return !p.mask.is_none() && (p.seqlen_q + Traits::kBlockM - 1) / Traits::kBlockM <= max_dynamic_blocks<Traits>();
}

template <typename Traits>
__host__ __device__ inline PersistentTileScheduler fwd_sm90_scheduler(const AttnFwdParams& p, int group = 1) {
  const int num_blocks = (p.seqlen_q + Traits::kBlockM - 1) / Traits::kBlockM;
  return PersistentTileScheduler{num_blocks, p.heads_q, p.batch, p.mask.is_none(),
                                 fwd_sm90_dynamic<Traits>(p) ? p.tile_counter : nullptr, group};
}

// The split tail a persistent launch of this kernel runs (tile_scheduler.cuh's TailSplit; tiles 0:
// none): the plain kernel on a dense unmasked problem with more tiles than SMs, whose tiles all
// span the same key blocks (round robin then ends in a partial round), of at least
// kTailSplitMinBlocks key blocks. The host asks the same function for the workspace bytes
// (fwd_workspace_sm90), the launcher for the plan.
// Measured (H200, d128, B*S = 16k, H 16, 2048 tiles, 3 interleaved rounds, split / plain): Sk 512
// 0.930, 1k 0.978, 2k 1.059, 4k 1.018, 8k 1.034, 16k 1.022: a piece's fixed costs (its Q load,
// the partial's write and the merge's reads, the tickets' memset) outweigh half a round of 4-8
// key-block tiles.
constexpr int kTailSplitMinBlocks = 16;

template <typename Traits>
inline TailSplit fwd_sm90_tail_split(const AttnFwdParams& p) {
  const int64_t tiles = fwd_sm90_scheduler<Traits>(p).num_tiles();
  const int units = (p.seqlen_k + Traits::kBlockN - 1) / Traits::kBlockN;
  if (!Traits::kTailSplit || !p.mask.is_none() || p.cu_seqlens_q != nullptr || p.seqused_k != nullptr ||
      units < kTailSplitMinBlocks)
    return TailSplit{static_cast<int>(tiles), 0, units, 0};
  return make_tail_split(tiles, units, p.num_sms);
}

// What a launch does with the call's workspace (params.h): the dynamic schedule's counter (a masked
// problem with more tiles than SMs: PersistentTileScheduler's two int32) or
// the split tail (unmasked); `bytes` it needs, of which the first `zeroed` start at zero (the
// launcher's memset). Persistent launches only. The host reports `bytes` (fwd_workspace_sm90) and
// the launcher takes the plan from the same function.
struct FwdWorkspacePlan {
  bool counter;
  TailSplit split;
  int64_t bytes, zeroed;
};
constexpr int64_t kTileCounterBytes = 256;  // two int32 in use (tiles handed out, CTAs finished)

template <typename Traits>
inline FwdWorkspacePlan fwd_workspace_plan(const AttnFwdParams& p, bool persistent = true) {
  const int64_t tiles = fwd_sm90_scheduler<Traits>(p).num_tiles();
  if (persistent && fwd_sm90_dynamic<Traits>(p) && tiles > p.num_sms)
    return {true, TailSplit{static_cast<int>(tiles), 0, 0, 0}, kTileCounterBytes, kTileCounterBytes};
  const TailSplit split = persistent ? fwd_sm90_tail_split<Traits>(p) : TailSplit{static_cast<int>(tiles), 0, 0, 0};
  return {false, split, SplitWorkspace<Traits>::bytes(split), split.enabled() ? SplitWorkspace<Traits>::slots_offset(split) : 0};
}

// The dynamic order's section: the (head, batch) pairs whose K and V (one query head's share of
// its KV head's, GQA groups being adjacent) fit in kL2SectionBytes; with at most
// kWaveSectionBlocks query blocks a head, one wave's worth instead (ceil(grid / query blocks)
// pairs, when fewer). Why: a section runs longest first, so its first wave starts the longest
// tile of every pair in it at once, each streaming its pair's K / V from DRAM, and the later
// waves find them in L2 while DRAM idles. At S 512 (d128: 128 pairs a 32 MB section, 4 blocks)
// that first wave is DRAM-bound: its 4-block tiles took 20-22k cycles against 14.5k for a
// non-causal 4-block tile (tile timeline, session 48, H100), the 3-, 2- and 1-block tiles near
// their blocks' worth. With a wave's worth of pairs each wave starts ~grid / blocks new pairs
// and finishes older ones from L2, so the DRAM reads spread over the run. Measured (H100, 3
// alternating process rounds, bwd_ab.py --forward, causal, against 32 MB sections; one wave / two
// waves): d128 S 512 1.139 / 1.117 (0.836 -> 0.952x cuDNN), d64 S 512 1.044 / 1.033, d256 S 512
// 1.008 / 0.995; at more blocks a head it loses: 1k ~1.00, 2k 0.94 / 0.93 (d256 0.90 / 1.00), 8k
// 0.94-0.96, GQA 16/4 B 1 8k 0.83 / 0.90 (kernel_notes_fwd_sm90.md, "Sections of a wave"). As
// built, against the 32 MB sections: d128 causal S 256 / 384 / 512 1.099 / 1.097 / 1.137, d64
// 1.04-1.05, d256 1.00-1.06.
constexpr int kWaveSectionBlocks = 4;
inline int sched_group(const AttnFwdParams& p, int num_blocks, int64_t grid) {
  const int64_t bytes = int64_t(p.seqlen_k) * (p.head_dim_qk + p.head_dim_v) * 2 / (p.heads_q / p.heads_kv);
  const int64_t pairs = int64_t(p.heads_q) * p.batch;
  int64_t group = PersistentTileScheduler::kL2SectionBytes / (bytes > 0 ? bytes : 1);
  if (num_blocks > 0 && num_blocks <= kWaveSectionBlocks) {
    const int64_t wave = (grid + num_blocks - 1) / num_blocks;
    group = wave < group ? wave : group;
  }
  return static_cast<int>(group < 1 ? 1 : group > pairs ? pairs : group);
}

// The producer's hand-over of tiles to the consumers (sm90::ItemQueue): decoded tiles (block,
// head, batch; batch < 0 ends the CTA's work), the key range and tail index of a split piece.
struct TileQueue : sm90::ItemQueue {
  // Producer: the i-th item of this CTA (i counts from 0).
  __device__ __forceinline__ void push(int i, const FwdItem& item) const {
    const WorkTile& t = item.tile;
    ItemQueue::push(i, make_uint4(t.block, t.head, t.batch, t.split), make_uint4(item.key_begin, item.key_end, item.tail, 0));
  }
  // Consumer thread: the i-th item.
  __device__ __forceinline__ FwdItem pop(int i) const {
    uint4 v, r;
    ItemQueue::pop(i, v, r);
    return FwdItem{{static_cast<int>(v.x), static_cast<int>(v.y), static_cast<int>(v.z), static_cast<int>(v.w)},
                   static_cast<int>(r.x), static_cast<int>(r.y), static_cast<int>(r.z)};
  }
};
static_assert(TileQueue::kBytes == 192, "the traits' kBarrierBytes counts the queue as 192 bytes");

}  // namespace fwd_sm90

template <typename Traits>
__global__ void __launch_bounds__(Traits::kThreads, 1) flashsdpa_fwd_sm90_kernel(const __grid_constant__ FwdSm90Args args) {
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ == 900) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ __align__(128) char fwd_smem[];  // one alignment for every declaration of it
  const fwd_sm90::SmemLayout<Traits> sm((smem_u32(fwd_smem) + 1023u) & ~1023u);
  const AttnFwdParams& p = args.p;
  const fwd_sm90::PersistentTileScheduler scheduler = fwd_sm90::fwd_sm90_scheduler<Traits>(p, args.sched_group);
  const int num_tiles = static_cast<int>(scheduler.num_tiles());  // < 2^31: the launcher checked
  const fwd_sm90::TileQueue queue{sm.tile_queue()};
  if constexpr (Traits::kDropout) {
    if (blockIdx.x == 0 && threadIdx.x == 0) write_rng_state(p.dropout);
  }

  if (threadIdx.x == 0) {
#pragma unroll
    for (int s = 0; s < Traits::kQStages; ++s) {
      sm90::mbar_init(sm.q_full(s), 1);
      sm90::mbar_init(sm.q_empty(s), 4 * Traits::kConsumerWGs);  // released at the last Q K^T: one arriver a warp
    }
#pragma unroll
    for (int s = 0; s < Traits::kStages; ++s) {
      sm90::mbar_init(sm.k_full(s), 1);
      sm90::mbar_init(sm.v_full(s), 1);
      sm90::mbar_init(sm.k_empty(s), 4 * Traits::kConsumerWGs);
      sm90::mbar_init(sm.v_empty(s), 4 * Traits::kConsumerWGs);
    }
    queue.init(128 * Traits::kConsumerWGs);
    sm90::fence_mbar_init();
  }
  __syncthreads();

  fwd_sm90::RingState ring;
  const int warpgroup = threadIdx.x / 128;
  if (warpgroup == 0) {
    sm90::setmaxnreg_dec<Traits::kProducerRegs>();
    if (threadIdx.x == 0) {
      sm90::tma_prefetch_desc(&args.tma_q);
      sm90::tma_prefetch_desc(&args.tma_k);
      sm90::tma_prefetch_desc(&args.tma_v);
      // Whole tiles first (all of them but a split tail); the next one is fetched before this one's
      // loads are issued, so a dynamic fetch's round trip to L2 (~1 us) runs under them. Then the
      // split tail (static schedule only): this CTA's range of key blocks [x, end), tile by tile; a
      // piece's WorkTile::split is its partial's slot (TailSplit::slot: 2w for the CTA's first
      // item, 2w + 1 for its last). One call site of produce(): with a second one for the tail,
      // ptxas spilled the 24-register producer (8 bytes at d128).
      const TailSplit& split = args.split;
      const int whole = Traits::kTailSplit ? split.whole : num_tiles;
      int round = 0, i = 0;
      int t = scheduler.first();
      int x = Traits::kTailSplit && split.enabled() ? split.begin(blockIdx.x) : 0;
      const int end = Traits::kTailSplit && split.enabled() ? split.begin(blockIdx.x + 1) : 0;
      for (int slot = 2 * blockIdx.x;; ++i) {
        fwd_sm90::FwdItem item{WorkTile{0, 0, -1, 0}, 0, 0, -1};
        if (t < whole) {
          const int next = scheduler.next(t, num_tiles, round);
          item.tile = scheduler.tile(t);
          t = next;
        } else if (Traits::kTailSplit && x < end) {
          const int tail = x / split.units, first = tail * split.units;
          const int stop = min(end, first + split.units);
          item = fwd_sm90::FwdItem{scheduler.tile(split.whole + tail), x - first, stop - first,
                                   x > first || stop < first + split.units ? tail : -1};
          item.tile.split = slot;
          slot |= 1;
          x = stop;
        }
        queue.push(i, item);
        if (!item.tile.valid()) break;
        const fwd_sm90::TileWork w = fwd_sm90::item_work<Traits>(p, item);
        if (w.has_keys()) fwd_sm90::produce<Traits>(args, sm, w, ring);
      }
      scheduler.finish();
    }
  } else {
    sm90::setmaxnreg_inc<Traits::kConsumerRegs>();
    const int cwg = sm90::consumer_warpgroup<Traits::kUniformWg>(warpgroup);
    // The ping-pong chain: the last warpgroup opens warpgroup 0's first turn; every turn passes
    // the next one on, so warpgroup 0 takes one turn more than it is given by the others: it
    // closes the chain by taking the last warpgroup's final hand-over (balanced even when no
    // tile of this CTA has keys).
    if constexpr (Traits::kPingPong) {
      if (cwg == Traits::kConsumerWGs - 1) sm90::named_arrive(fwd_sm90::kBarTurn, 256);
    }
    for (int i = 0;; ++i) {
      const fwd_sm90::FwdItem item = queue.pop(i);
      fwd_sm90::tl_stamp(fwd_sm90::kTlPopped, ring.q - 1, cwg, threadIdx.x % 128);
      if (!item.tile.valid()) break;
      const fwd_sm90::TileWork w = fwd_sm90::item_work<Traits>(p, item);
      fwd_sm90::consume<Traits>(args, sm, w, ring, cwg);
    }
    if constexpr (Traits::kPingPong) {
      if (cwg == 0) sm90::named_sync(fwd_sm90::kBarTurn, 256);
    }
    if (threadIdx.x % 128 == 0) sm90::tma_store_wait_read();  // shared memory must outlive the last store's reads
  }
#endif
}

}  // namespace flashsdpa
