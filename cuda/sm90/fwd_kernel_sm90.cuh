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

#include "common/ptx.cuh"
#include "common/mask.cuh"
#include "common/score_mod.cuh"
#include "common/seqlen.cuh"
#include "common/softmax.cuh"
#include "common/tile_scheduler.cuh"
#include "flashsdpa/params.h"
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

template <typename Elem_, int kHeadDim_, int kBlockM_, int kBlockN_, int kStages_, bool kPingPong_ = (kHeadDim_ <= 128),
          int kMaxQStages_ = 2, bool kMods_ = false>
struct FwdTraitsSm90 {
  using Elem = Elem_;
  // The score modifiers (softcap, ALiBi, sinks: common/score_mod.cuh's ScoreModFwd), in their own
  // instantiation as in the portable family, so the plain kernel's code is unchanged.
  static constexpr bool kMods = kMods_;
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kBlockM = kBlockM_;
  static constexpr int kBlockN = kBlockN_;
  static constexpr int kStages = kStages_;
  // Consumer warpgroups take turns issuing their GEMMs (named barriers), so the tensor cores run
  // one warpgroup's GEMMs while the others run their softmax. S = 8k, TFLOP/s with / without:
  // d64 538 / 484 (causal 477 / 376), d128 658 / 633 (603 / 557); d256 786 / 800 (741 / 755),
  // where the P V GEMM (N = 256) is long enough to hide the softmax without taking turns.
  static constexpr bool kPingPong = kPingPong_;

  static constexpr int kConsumerWGs = kBlockM / 64;
  static constexpr int kThreads = 128 * (kConsumerWGs + 1);
  // setmaxnreg budgets: the register file (64K) split so the consumers get as many as possible.
  // Two consumers: 24 x 128 + 240 x 256 = 64,512. Three: 32 x 128 + 160 x 384 = 65,536.
  static constexpr int kProducerRegs = kConsumerWGs == 2 ? 24 : 32;
  static constexpr int kConsumerRegs = kConsumerWGs == 2 ? 240 : 160;

  static constexpr int kColBlocks = kHeadDim / 64;  // 128-byte column blocks of a tile (TMA boxes)
  static constexpr int kMTiles = 1;                 // m16 tiles per warp (wgmma: 16 rows per warp)
  static constexpr int kNTiles = kBlockN / 8;       // n8 column groups of S
  static constexpr int kDTiles = kHeadDim / 8;      // n8 column groups of O
  static constexpr int kKStepsQK = kHeadDim / 16;
  static constexpr int kKStepsPV = kBlockN / 16;

  static constexpr int kQBytes = kBlockM * kHeadDim * 2;
  static constexpr int kKVBytes = kBlockN * kHeadDim * 2;  // one K or one V slot
  static constexpr int kBarrierBytes = 8 * (4 + 4 * kStages);
  // + 1 KB: the dynamic shared memory base is aligned up to 1024 bytes in the kernel (the swizzle
  // atoms of TMA and wgmma must be 1024-byte aligned).
  static constexpr int kBaseBytes = kQBytes + 2 * kStages * kKVBytes + kBarrierBytes + 1024;
  static constexpr int kSmemLimit = 227 * 1024;
  // O is staged for its TMA store in a region of its own where shared memory allows (d <= 128):
  // the next tile's Q then loads while this tile's O is stored. At d = 256 it reuses the Q tile,
  // whose next load waits for the store to have read it.
  static constexpr bool kSeparateO = kBaseBytes + kQBytes <= kSmemLimit;
  // Two Q slots where they fit too (d <= 128): the next tile's Q lands while this tile's last
  // blocks run, instead of after its last Q K^T (persistent short sequences wait on it).
  static constexpr int kQStages = kMaxQStages_ > 1 && kSeparateO && kBaseBytes + 2 * kQBytes <= kSmemLimit ? 2 : 1;
  static constexpr int kSmemBytes = kBaseBytes + (kSeparateO ? kQBytes : 0) + (kQStages - 1) * kQBytes;

  static_assert(std::is_same<Elem, __half>::value || std::is_same<Elem, __nv_bfloat16>::value, "fp16 or bf16");
  static_assert(kHeadDim % 64 == 0 && kHeadDim <= 256, "head-dim buckets are whole 128-byte column blocks");
  static_assert(kBlockM % 64 == 0 && kConsumerWGs >= 1 && kConsumerWGs <= 3, "64 rows per consumer warpgroup");
  static_assert(kBlockN % 16 == 0 && kBlockN <= 256, "wgmma N: multiple of 16 (P V steps), at most 256");
  static_assert(kSmemBytes <= 227 * 1024, "over the sm_90 per-block shared memory limit");
};

namespace fwd_sm90 {

// Named barrier ids (0 is __syncthreads): per consumer warpgroup, its epilogue (1..3) and its
// ping-pong turn (4..6).
constexpr int kBarEpilogue = 1;
constexpr int kBarTurn = 4;


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
  uint32_t q, k, v, o, bars;
  __device__ __forceinline__ explicit SmemLayout(uint32_t base) {
    q = base;
    k = q + Traits::kQStages * Traits::kQBytes;
    v = k + Traits::kStages * Traits::kKVBytes;
    o = Traits::kSeparateO ? v + Traits::kStages * Traits::kKVBytes : q;
    bars = v + Traits::kStages * Traits::kKVBytes + (Traits::kSeparateO ? Traits::kQBytes : 0);
  }
  __device__ __forceinline__ uint32_t q_slot(int s) const { return q + s * Traits::kQBytes; }
  __device__ __forceinline__ uint32_t q_full(int s) const { return bars + 8 * s; }
  __device__ __forceinline__ uint32_t q_empty(int s) const { return bars + 8 * (2 + s); }
  __device__ __forceinline__ uint32_t k_full(int s) const { return bars + 8 * (4 + s); }
  __device__ __forceinline__ uint32_t k_empty(int s) const { return bars + 8 * (4 + Traits::kStages + s); }
  __device__ __forceinline__ uint32_t v_full(int s) const { return bars + 8 * (4 + 2 * Traits::kStages + s); }
  __device__ __forceinline__ uint32_t v_empty(int s) const { return bars + 8 * (4 + 3 * Traits::kStages + s); }
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
  const int n_block_min = mask.template n_block_min<Traits::kBlockM, Traits::kBlockN>(tile.block);
  const int n_block_max = mask.template n_block_max<Traits::kBlockM, Traits::kBlockN>(tile.block);
  const int n_unmasked_begin = max(mask.template full_begin<Traits::kBlockM, Traits::kBlockN>(tile.block), n_block_min);
  const int n_unmasked_end = min(mask.template full_end<Traits::kBlockM, Traits::kBlockN>(tile.block), n_block_max);
  const bool in_range = tile.block * Traits::kBlockM < seq.seqlen_q;
  return TileWork{tile, mask, n_block_min, in_range ? n_block_max : n_block_min, n_unmasked_begin, n_unmasked_end,
                  static_cast<int>(seq.q_row_offset), static_cast<int>(seq.k_row_offset),
                  p.cu_seqlens_q != nullptr ? 0 : tile.batch, in_range};
}

// Ring positions, counted over every tile this CTA has run, on both sides of the ring alike: the
// i-th K/V load of the CTA goes to slot i % kStages in phase (i / kStages) & 1; the t-th Q load
// (tiles with keys only) goes to Q slot t % kQStages in phase (t / kQStages) & 1.
struct RingState {
  int kv = 0;
  int q = 0;
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
  using Mod = ScoreModFwd<Traits::kMods>;
  // > 0: the host sends other scales to the portable family. With softcap the raw unit is the
  // softcap's (score_mod.cuh).
  const float scale_log2 = Traits::kMods ? Mod::scale_log2(p) : p.scale_log2;
  // The modifiers act on the raw scores of a key block before the mask (kMods only).
  auto modify = [&](int n) {
    if constexpr (Traits::kMods) {
      const SeqlenInfo seq(p, tile.batch);
      Mod::apply(p, seq, tile.batch, tile.head, s, first_row, n * kBlockN + 2 * (lane % 4));
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
  // Q's slot is free for the next tile once this warpgroup's last Q K^T has completed (O staged
  // apart), or once its O store has read the slot (O staged in Q's place: see the epilogue).
  auto release_q = [&] {
    if constexpr (Traits::kSeparateO) {
      if (arriver) sm90::mbar_arrive(sm.q_empty(q_slot));
    }
  };

  if (w.has_keys()) {
    sm90::mbar_wait(sm.q_full(q_slot), (ring.q / Traits::kQStages) & 1);
    ++ring.q;
    int n = w.n_block_max - 1;
    // First block: S only (nothing to multiply with V yet).
    {
      const int slot = ring.kv % kStages;
      sm90::mbar_wait(sm.k_full(slot), (ring.kv / kStages) & 1);
      turn_begin();
      gemm_qk<Traits>(s_acc, q_desc, k_desc0 + slot * kSlotDesc);
      turn_end();
      sm90::wgmma_wait<0>();
      sm90::fence_regs(s_acc);
      if (arriver) sm90::mbar_arrive(sm.k_empty(slot));
      if (n == w.n_block_min) release_q();
      modify(n);
      if (w.masked(n)) w.mask.apply(s, first_row, n * kBlockN + 2 * (lane % 4), -INFINITY);
      float correction[2];
      softmax.template online_step<kNTiles>(s, scale_log2, correction);  // o is zero: no rescale needed
      sm90::accumulator_to_a<Elem, kNTiles>(p16, s);
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
      if (arriver) sm90::mbar_arrive(sm.k_empty(slot));
      if (n == w.n_block_min) release_q();
      modify(n);
      if (w.masked(n)) w.mask.apply(s, first_row, n * kBlockN + 2 * (lane % 4), -INFINITY);
      float correction[2];
      const bool rescale = softmax.template online_step<kNTiles>(s, scale_log2, correction);
      sm90::wgmma_wait<0>();
      sm90::fence_regs(o_acc);
      if (arriver) sm90::mbar_arrive(sm.v_empty(prev));
      if (rescale) softmax.template rescale<kDTiles>(o, correction);
      sm90::accumulator_to_a<Elem, kNTiles>(p16, s);
    }
    const int prev = (ring.kv - 1) % kStages;
    sm90::mbar_wait(sm.v_full(prev), ((ring.kv - 1) / kStages) & 1);
    turn_begin();
    gemm_pv<Traits>(o_acc, p16, v_desc0 + prev * kSlotDesc);
    turn_end();
    sm90::wgmma_wait<0>();
    sm90::fence_regs(o_acc);
    if (arriver) sm90::mbar_arrive(sm.v_empty(prev));
  }

  // ---- epilogue: normalize, stage O, TMA store; LSE straight from registers ----------------------
  float lse[2];
  if constexpr (Traits::kMods) {
    if (p.mods.sinks != nullptr) {
      softmax.finalize_with_sink(o, Mod::scale(p), lse, Mod::sink(p, tile.head));
    } else {
      softmax.finalize(o, Mod::scale(p), lse);
    }
  } else {
    softmax.finalize(o, p.scale, lse);
  }
  // O through shared memory: a TMA store (dense), or the valid rows copied out (varlen).
  auto stage_and_store_o = [&] {
    // The staging rows of this warpgroup are free once its previous store has read them (thread 0
    // waited for that before this barrier) and, when O takes Q's slot, once Q K^T is done (it is).
    if (tid == 0) sm90::tma_store_wait_read();
    sm90::named_sync(kBarEpilogue + cwg, 128);
#pragma unroll
    for (int j = 0; j < kDTiles; ++j) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int row = row_in_tile + 8 * h;  // row % 8 == lane / 4: the swizzle phase of this row
        const uint32_t addr = sm.o + (j / 8) * Traits::kBlockM * 128 + row * 128 + (((j % 8) ^ (lane / 4)) << 4) +
                              (lane % 4) * 4;
        st_shared_b32(addr, ElemTraits<Elem>::pack(o[0][j][2 * h], o[0][j][2 * h + 1]));
      }
    }
    sm90::fence_async_shared();
    sm90::named_sync(kBarEpilogue + cwg, 128);
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
          const uint32_t addr = sm.o + (c / 8) * Traits::kBlockM * 128 + (cwg * 64 + r) * 128 + (((c % 8) ^ (r % 8)) << 4);
          *reinterpret_cast<uint4*>(out + int64_t(r) * p.o_row_stride + c * 8) = ld_shared_v4(addr);
        }
      }
      if constexpr (!Traits::kSeparateO) {
        // O sits in Q's slot: the next Q may land only after every thread has read its rows.
        sm90::named_sync(kBarEpilogue + cwg, 128);
        if (tid == 0 && w.has_keys()) sm90::mbar_arrive(sm.q_empty(0));
      }
    } else if (tid == 0) {
#pragma unroll
      for (int c = 0; c < Traits::kColBlocks; ++c) {
        sm90::tma_store_4d(&args.tma_o, sm.o + c * Traits::kBlockM * 128 + cwg * 64 * 128, c * 64,
                           tile.block * Traits::kBlockM + cwg * 64, tile.head, tile.batch);
      }
      sm90::tma_store_commit();
      if constexpr (!Traits::kSeparateO) {
        // O sits in Q's slot: the next Q may land only after the store has read it.
        sm90::tma_store_wait_read();
        if (w.has_keys()) sm90::mbar_arrive(sm.q_empty(0));
      }
    }
  };
  if (!Traits::kSeparateO && !w.has_keys()) {
    // O (0: no key) where it would be staged in Q's slot, which the producer may already be
    // filling with the next tile's Q (this tile loaded none, so nothing of its holds the slot):
    // straight from registers, the tile's valid rows only.
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
  if (lane % 4 == 0 && p.lse != nullptr) {
    float* lse_out = p.lse + tile.batch * p.lse_batch_stride + tile.head * p.lse_head_stride +
                     int64_t(w.q_row0) * p.lse_row_stride;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = first_row + 8 * h;
      if (row < w.mask.seqlen_q) lse_out[row * p.lse_row_stride] = lse[h];
    }
  }
}


// Static persistent schedule over the tiles in the order of the portable kernel's schedulers, one
// round of gridDim.x tiles at a time. Non-causal: head-major, so the CTAs resident at any moment
// share a few heads' K/V in L2; CTA c runs tile c of every round. Causal: block-major with the
// heaviest (last) query blocks first, and rounds alternate direction (CTA c takes position c of
// even rounds and gridDim.x - 1 - c of odd ones), so a CTA that drew a heavy tile draws a light
// one next and the per-CTA sums even out (in plain round-robin CTA 0 gets the heaviest tile of
// every round: 1.3x the work of the last CTA at d256, S = 8k, 7.75 tiles per CTA).
struct PersistentTileScheduler {
  int num_blocks, num_heads, batch;
  bool head_major;

  __host__ __device__ int64_t num_tiles() const { return int64_t(num_blocks) * num_heads * batch; }
  // The tile position of this CTA in round `round` (may be >= num_tiles() in the last round).
  __device__ __forceinline__ int64_t position(int64_t round) const {
    const int64_t base = round * gridDim.x;
    return (!head_major && (round & 1)) ? base + gridDim.x - 1 - blockIdx.x : base + blockIdx.x;
  }
  __device__ __forceinline__ WorkTile tile(int64_t linear) const {
    WorkTile t;
    if (head_major) {
      const int64_t head_linear = linear / num_blocks;
      t.block = num_blocks - 1 - static_cast<int>(linear - head_linear * num_blocks);
      t.head = static_cast<int>(head_linear % num_heads);
      t.batch = static_cast<int>(head_linear / num_heads);
    } else {
      const int64_t per_block = int64_t(num_heads) * batch;
      t.block = num_blocks - 1 - static_cast<int>(linear / per_block);
      const int64_t rest = linear % per_block;
      t.head = static_cast<int>(rest % num_heads);
      t.batch = static_cast<int>(rest / num_heads);
    }
    return t;
  }
};

template <typename Traits>
__host__ __device__ inline PersistentTileScheduler fwd_sm90_scheduler(const AttnFwdParams& p) {
  return PersistentTileScheduler{(p.seqlen_q + Traits::kBlockM - 1) / Traits::kBlockM, p.heads_q, p.batch,
                                 p.mask.is_none()};
}

}  // namespace fwd_sm90

template <typename Traits>
__global__ void __launch_bounds__(Traits::kThreads, 1) flashsdpa_fwd_sm90_kernel(const __grid_constant__ FwdSm90Args args) {
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ == 900) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ __align__(128) char fwd_smem[];  // one alignment for every declaration of it
  const fwd_sm90::SmemLayout<Traits> sm((smem_u32(fwd_smem) + 1023u) & ~1023u);
  const AttnFwdParams& p = args.p;
  const fwd_sm90::PersistentTileScheduler scheduler = fwd_sm90::fwd_sm90_scheduler<Traits>(p);
  const int64_t num_tiles = scheduler.num_tiles();

  if (threadIdx.x == 0) {
#pragma unroll
    for (int s = 0; s < Traits::kQStages; ++s) {
      sm90::mbar_init(sm.q_full(s), 1);
      sm90::mbar_init(sm.q_empty(s), Traits::kSeparateO ? 4 * Traits::kConsumerWGs : Traits::kConsumerWGs);
    }
#pragma unroll
    for (int s = 0; s < Traits::kStages; ++s) {
      sm90::mbar_init(sm.k_full(s), 1);
      sm90::mbar_init(sm.v_full(s), 1);
      sm90::mbar_init(sm.k_empty(s), 4 * Traits::kConsumerWGs);
      sm90::mbar_init(sm.v_empty(s), 4 * Traits::kConsumerWGs);
    }
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
      for (int64_t round = 0; round * gridDim.x < num_tiles; ++round) {
        const int64_t t = scheduler.position(round);
        if (t >= num_tiles) continue;
        const fwd_sm90::TileWork w = fwd_sm90::tile_work<Traits>(p, scheduler.tile(t));
        if (w.has_keys()) fwd_sm90::produce<Traits>(args, sm, w, ring);
      }
    }
  } else {
    sm90::setmaxnreg_inc<Traits::kConsumerRegs>();
    const int cwg = warpgroup - 1;
    // The ping-pong chain: the last warpgroup opens warpgroup 0's first turn; every turn passes
    // the next one on, so warpgroup 0 takes one turn more than it is given by the others: it
    // closes the chain by taking the last warpgroup's final hand-over (balanced even when no
    // tile of this CTA has keys).
    if constexpr (Traits::kPingPong) {
      if (cwg == Traits::kConsumerWGs - 1) sm90::named_arrive(fwd_sm90::kBarTurn, 256);
    }
    for (int64_t round = 0; round * gridDim.x < num_tiles; ++round) {
      const int64_t t = scheduler.position(round);
      if (t >= num_tiles) continue;
      const fwd_sm90::TileWork w = fwd_sm90::tile_work<Traits>(p, scheduler.tile(t));
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
