// bwd_kernel_sm90.cuh: the backward main kernel of the Hopper family (head dims 64, 128, 256, 512).
// Design, measurements and the variants that lost: docs/kernel_notes_bwd_sm90.md.
//
// One CTA per (key block of kBlockN = 128 keys, KV head, batch). The producer warpgroup: one
// thread loads K and V once (TMA), then streams Q and dO of every (query head of the KV head's
// group, query block of kBlockM = 64 rows, 128 in the d64 plain kernel's tall step, that sees the
// key block) through a kStages-deep mbarrier
// ring; a second warp puts the step's LSE * log2(e) and delta into the Q stage's shared memory; a
// third adds each staged dQ tile to dq_accum (one bulk reduce-add). Launched programmatically
// after the preprocess: the K / V / Q / dO loads start before the preprocess ends, every other
// role waits for it (bwd_prepost.cuh's grid_dependency_wait). Two consumer warpgroups each
// own 64 of the keys, so every product is computed transposed, keys as the wgmma M dimension:
//   S^T = K Q^T, dP^T = V dO^T (SS); P^T = exp2(S^T c - LSE log2 e); dS^T = P^T (dP^T - delta);
//   dV += P^T dO and dK += dS^T Q (RS, P^T and dS^T from registers);
//   dQ = dS K: dS^T of both warpgroups goes to shared memory (double-buffered; one barrier per
//   step); warpgroup w computes dQ's columns [w D/2, (w+1) D/2) (the tall step: its rows
//   [64 w, 64 w + 64)) over all 128 keys (SS, M-major A) and stages them, scaled, in dq_accum's
//   row order for the writer warp.
// dK, dV stay in float32 registers across the whole loop (GQA: across the group's query heads
// too, so no reduction over heads is needed); the epilogue scales dK and stores both.
// Masks (none, causal either alignment, windows) through BlockMask; dense layouts; scale > 0.
// Head dim 256 (kWide) has a tile of its own, consume_wide below: 64 keys a CTA, dQ by vector
// reductions from registers (no staging tile fits beside the stages), plain calls only; head dim
// 512 (kSplit) runs it on each CTA of a two-CTA cluster, one column half each.
// Deterministic mode: p.dq_semaphore (write_dq). The score modifiers (softcap, ALiBi, the sinks'
// and slopes' row sums) in the kMods instantiation: score_mod.cuh's ScoreModBwd hooks on S^T
// (its key-rows layout), docs/kernel_notes_features.md.
#pragma once

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "common/bias_cells.cuh"
#include "common/bias_stage.cuh"
#include "common/bwd_prepost.cuh"
#include "common/dropout.cuh"
#include "common/mask.cuh"
#include "common/ptx.cuh"
#include "common/score_mod.cuh"
#include "common/seqlen.cuh"
#include "common/softmax.cuh"
#include "flashsdpa/params.h"
#include "sm90/ptx_sm90.cuh"

// FLASHSDPA_SM90_BWD_GROUP_WIDE (1 since session 46): the d256 tile's grouped form too (kGrouped),
// which bwd_launch_sm90.cuh's rule runs on short causal calls (kernel_notes_bwd_sm90.md, "Grouped
// items at d256"); 0 builds no grouped d256 kernel (the plain one for every call).
#ifndef FLASHSDPA_SM90_BWD_GROUP_WIDE
#define FLASHSDPA_SM90_BWD_GROUP_WIDE 1
#endif
// FLASHSDPA_SM90_BWD_WAVE_GROUP_BLOCKS: BwdGridOrder::kWaveGroupBlocks (16; other values: dev A/Bs).
#ifndef FLASHSDPA_SM90_BWD_WAVE_GROUP_BLOCKS
#define FLASHSDPA_SM90_BWD_WAVE_GROUP_BLOCKS 16
#endif
// FLASHSDPA_SM90_BWD_DET_WAVE_GROUP_BLOCKS: BwdGridOrder::kDetWaveGroupBlocks (8; other values: dev A/Bs).
#ifndef FLASHSDPA_SM90_BWD_DET_WAVE_GROUP_BLOCKS
#define FLASHSDPA_SM90_BWD_DET_WAVE_GROUP_BLOCKS 8
#endif
// FLASHSDPA_SM90_BWD_WAVE_WIDE: the d256 plain kernel (64 keys a CTA; causal calls from 2k, where
// the grouped rule gives k = 1) takes BwdGridOrder's wave groups up to this many keys (2048: 32 of
// its key blocks; 0: none). Session 49 (H100, 3 alternating rounds, d256 causal 2k B 8 x H 8):
// 263.7 -> 268.2 TFLOP/s (1.017, every round within 0.2%; 0.848 -> 0.858x cuDNN); 4096 lost 2.7% at
// 4k. (Session 48's d256 loss, 2%, was its grouped kernel, which keeps the L2 group.)
#ifndef FLASHSDPA_SM90_BWD_WAVE_WIDE
#define FLASHSDPA_SM90_BWD_WAVE_WIDE 2048
#endif
// FLASHSDPA_SM90_BWD_GROUP_D128 (dev A/B, session 43 prepared; 0 default: no extra kernel, SASS
// unchanged): the plain d128 kernel's grouped form, at the plain kernel's 24 / 240 registers, with
// the producer's 92 bytes of spills (ptxas 13.0; its consumers need their 240). Whether a spill in
// the producer warpgroup costs anything was never measured: its roles wait on the consumers most of
// a step. Forced k only (FLASHSDPA_SM90_BWD_GROUP=k), as d256's.
#ifndef FLASHSDPA_SM90_BWD_GROUP_D128
#define FLASHSDPA_SM90_BWD_GROUP_D128 0
#endif

namespace flashsdpa {

struct BwdSm90Args {
  AttnBwdParams p;
  CUtensorMap tma_q;   // box 64 columns x kBlockM rows
  CUtensorMap tma_do;  // box 64 columns x kBlockM rows
  CUtensorMap tma_k;   // box 64 columns x kBlockN rows
  CUtensorMap tma_v;   // box 64 columns x kBlockN rows
  int group;           // (kGrouped) items a CTA runs; 1 otherwise
  int dbias_tma;       // (kDsQueryRows) tma_dbias was encoded: d_bias leaves by TMA stores
  CUtensorMap tma_dbias;  // (kDsQueryRows, dbias_tma) d_bias: box 64 keys x kBlockM queries (last: the
                          // other kernels' parameter offsets, hence their SASS, unchanged)
  CUtensorMap tma_bias;   // (kBiasTmaLoad, bias_tma) the bias: box 64 keys x kBlockM queries; a
                          // broadcast head / batch dim has size 1 (coordinate 0 there: stage_bias)
  int bias_tma;           // (kBiasTmaLoad) tma_bias was encoded: the staged bias arrives by TMA
};

// Two Q / dO stages and two dQ staging buffers: one buffer measured 0.984x and one buffer with a
// third stage 0.96x (H200, session 16; the parameters and the 80-query step that needed one
// buffer stay in main's history at 927f940: kernel_notes_bwd_sm90.md, session 16).
template <typename Elem_, int kHeadDim_, int kStages_ = 2, ModsKind kModsKind_ = kModsNone,
          bool kDropout_ = false, bool kGrouped_ = false>
struct BwdTraitsSm90 {
  using Elem = Elem_;
  // The score modifiers (softcap, ALiBi, sinks' and slopes' row sums; the bias and its gradient:
  // common/score_mod.cuh's ScoreModBwd on the transposed tile), in their own instantiations as in
  // the other kernels, so the plain kernel's code is unchanged.
  static constexpr ModsKind kModsKind = kModsKind_;
  static constexpr bool kMods = kModsKind != kModsNone;
  // Dropout (common/dropout.cuh's transposed map), its own instantiation beside the plain one only
  // (the host never pairs it with a modifier: capabilities.cpp's check_features).
  static constexpr bool kDropout = kDropout_;
  // Each lane computes one of the two Philox streams its transposed fragment needs and trades 4
  // bytes per m16 tile with lane ^ 4 (dropout_bytes_t), instead of computing both.
  static constexpr bool kDropoutShuffle = true;
  static_assert(!(kDropout && kMods), "dropout: plain instantiation only");
  static constexpr int kHeadDim = kHeadDim_;
  // The tall step (d64 plain kernel; kernel_notes_bwd_sm90.md, "The tall step at d64"): 128 query
  // rows a step instead of 64. Session 23's timeline put the d64 step at 3,534 cycles for 1,280
  // of tensor work (36%, d128: 4,506 for 2,560, 57%): its fixed costs (the barriers, the waits at
  // the step's ends, the dQ hand-over) are paid per step whatever its size, and FA3 runs d64 with
  // 128-query steps. It costs K / V in registers and the step overlap (no registers left: S^T 64 +
  // dP^T 64 + dV 32 + dK 32 of 240) and one dQ staging buffer (the second does not fit: 227 KB);
  // dQ is then split between the warpgroups by query rows, not columns. The kMods and dropout
  // kernels hold more a step: 64 rows. -DFLASHSDPA_SM90_BWD_TALL64=0 builds the 64-row d64 kernel.
#ifndef FLASHSDPA_SM90_BWD_TALL64
#define FLASHSDPA_SM90_BWD_TALL64 1
#endif
  static constexpr bool kTall = FLASHSDPA_SM90_BWD_TALL64 && kHeadDim_ == 64 && kModsKind_ == kModsNone && !kDropout_;
  static constexpr int kBlockM = kTall ? 128 : 64;  // query rows per step: the wgmma N of S^T
  // Head dim 256 (kernel_notes_bwd_sm90.md, "The d256 tile"): the transposed scheme's warpgroup
  // of 64 keys would hold dK and dV 64 x 256 (256 fp32 registers a thread), so the CTA takes 64
  // keys, both warpgroups compute S^T / dP^T for all of them over half the step's queries each
  // (wgmma N = 32) and dV / dK / dQ over half the columns each (N = 128): S^T 16 + dP^T 16 + dV 64
  // + dK 64 + dQ 64 = 224 fp32 registers, the d128 kernel's count. P^T and dS^T meet in shared
  // memory; dQ goes to dq_accum by red.global.add.v4.f32 (Q / dO stages 128 KB + K / V 64 KB +
  // P^T / dS^T 32 KB leave no room for a 64 KB staging tile). Plain calls only (no modifiers,
  // dropout, or deterministic order: capabilities.cpp's bucket limits).
  // Head dim 512 (kSplit; kernel_notes_bwd_sm90.md, "The d512 tile"): the d256 tile on each CTA of
  // a two-CTA cluster, CTA r owning columns [256 r, 256 r + 256) of Q, K, V, dO, dQ, dK and dV (the
  // head-dim-512 forward's split: fwd512_kernel_sm90.cuh). S^T and dP^T sum over all 512 columns,
  // so each CTA's partials go to the other through distributed shared memory and both add them
  // (fp32 addition commutes: both hold bitwise the same S^T and dP^T, hence the same P^T and dS^T);
  // the rest is the d256 step on 256 columns. The exchange slot (16 KB) leaves room for one P^T
  // and one dS^T buffer, not two: a barrier pair orders a step's stores after the other warpgroup's
  // GEMMs of the step before have retired.
  static constexpr bool kSplit = kHeadDim_ == 512;
  static constexpr bool kWide = kHeadDim_ >= 256;
  static_assert(!(kWide && (kModsKind_ != kModsNone || kDropout_)), "d256, d512: plain instantiation only");
  static constexpr int kBlockN = kWide ? 64 : 128;  // keys per CTA: 64 per consumer warpgroup (d256: 64 shared)
  static constexpr int kStages = kStages_;
  static constexpr int kConsumerWGs = 2;
  static constexpr int kThreads = 128 * (kConsumerWGs + 1);
  // Grouped items (kGrouped): CTA c runs items [c k, c k + k) one after the other, k the launch's
  // (BwdSm90Args::group; kernel_notes_bwd_sm90.md, "Grouped items"), the ring counting the CTA's
  // steps over all of them. The d64 tall kernel's producer roles, each with an item loop, spill at
  // 24 registers (ptxas 13.0: 180 bytes); its consumers need 224 (216: 260 bytes and C7512), so
  // there the split is 56 / 224 (the launch's 168 a thread either way: 56 x 128 + 224 x 256). Not
  // d128 by default: its consumers need their 240 (224: C7512), so its grouped form
  // (FLASHSDPA_SM90_BWD_GROUP_D128, a dev A/B) keeps 24 / 240 and its producer spills 92 bytes.
  // d256 (FLASHSDPA_SM90_BWD_GROUP_WIDE): its consumers also compile at 224 with 0 spills (216:
  // 516 bytes and C7512), and its producer has no dQ writer.
  static constexpr bool kGrouped = (kTall || (FLASHSDPA_SM90_BWD_GROUP_D128 && kHeadDim_ == 128) ||
                                     (FLASHSDPA_SM90_BWD_GROUP_WIDE && kWide && !kSplit)) && kGrouped_;
  // The grouped kernels whose producer warpgroup takes 56 registers (d128's keeps 24 / 240).
  static constexpr bool kGroupedRegs56 = kGrouped && kHeadDim_ != 128;
  static constexpr int kProducerRegs = kGroupedRegs56 ? 56 : 24;
#ifndef FLASHSDPA_SM90_BWD_CONSUMER_REGS  // (compile-only register studies: scripts/dev/live_regs.py)
#define FLASHSDPA_SM90_BWD_CONSUMER_REGS 240
#endif
  static constexpr int kConsumerRegs = kGroupedRegs56 ? 224 : FLASHSDPA_SM90_BWD_CONSUMER_REGS;  // d128: S^T 32 + dP^T 32 + dV 64 + dK 64 + dQ 2 x 32 fp32
  static constexpr int kCtaDim = kSplit ? kHeadDim / 2 : kHeadDim;  // the columns a CTA holds
  static constexpr int kColBlocks = kCtaDim / 64;
  static constexpr int kMTiles = kBlockM / 8;  // n8 column groups of S^T (queries)
  static constexpr int kDTiles = kHeadDim / 8;

  static constexpr int kQBytes = kBlockM * kCtaDim * 2;  // also dO's slot (head_dim_v == head_dim)
  static constexpr int kKBytes = kBlockN * kCtaDim * 2;  // also V
  // dS^T: keys x queries, in column blocks of 64 queries (128-byte swizzled rows of the 128 keys)
  static constexpr int kDsBytes = kBlockN * kBlockM * 2;
  static constexpr int kDqBytes = kBlockM * kHeadDim * 4;  // fp32 dQ staging, dq_accum's row order
  // Two dQ staging buffers: a third at d64 (room: 130 of 232 KB) ran 0.98-1.00x (session 23,
  // kernel_notes_bwd_sm90.md, "Counting the adds in pairs"); d128 has no room (1.9 KB left). The
  // tall step has room for one (two: 232,584 bytes, 136 over), as FA3's d64 backward has.
  static constexpr int kDqBufs = kWide ? 0 : kTall ? 1 : 2;  // (d256: reductions from registers)
  // LSE * log2(e) and delta of a stage's rows, then the stage's huge-LSE flag (16 bytes keep the
  // slots 16-byte aligned; at d128 the total is 230,536 of 232,448 bytes).
  static constexpr int kRowStatBytes = 2 * kBlockM * 4 + 16;
  // Two dS^T buffers: a warpgroup writes step i's half while the other may still read step i-1's
  // in its dQ GEMM (the one barrier per step orders i against i-2). Two dQ staging buffers: the
  // writer warp's bulk reduce-add of step i-1 reads one while the consumers fill the other.
  // d512: x_full and x_empty of each consumer warpgroup's exchange slot; kGrouped: kv_empty.
  // dS in query rows (the bias kernel; kernel_notes_features.md, "d_bias by TMA stores"): the dS
  // buffer holds dS (queries x keys: each warpgroup's 64 keys an 8 KB half of 64 query rows, the
  // 128-byte swizzle), written by stmatrix.trans, instead of dS^T. dQ's A is then K-major and late
  // dK's M-major (both allowed for 16-bit wgmma operands in shared memory), and each half is
  // already a box of d_bias (queries x keys), which one thread of the warpgroup stores by TMA after
  // the dS barrier. What it replaces (store_bias_grad: 32 16-bit shared loads, their packing and 4
  // 16-byte stores a thread a step, half of each 32-byte sector per store): ncu (H100, bias 2k
  // backward, session 54) put 20-25% of the consumer loop's stall samples there (short scoreboard
  // at the packing, long at the stores) and L2 at 84.7% of its peak with half-sector writes.
  // Session 54, H100, 3 alternating rounds of `bench --masks`: bias 2k backward 1.245x (235 -> 291
  // TFLOP/s), key padding 0.99-1.00; the former dS^T road (store_bias_grad's reads and 16-byte
  // row stores) is scripts/dev/ab/bias_grad_rows.patch (-DFLASHSDPA_SM90_BWD_DBIAS_TMA=0 there).
  static constexpr bool kDsQueryRows = kModsKind == kModsBias && !kTall && !kWide;
  // With dS in query rows the staged bias's half is a TMA box too (the bias's own map), so it may
  // arrive by TMA where the map can be encoded (args.bias_tma: any bias but a zero row stride, e.g.
  // key padding's (B, 1, 1, S), or unaligned rows, which keep the warps' cp.async copies): thread 0
  // of the warpgroup loads its half of step i + 1 after step i's dS barrier, completing on
  // bias_full(cwg, buffer), and the warps' four LDGSTS a lane, their addressing and the cp.async
  // wait leave the consumers (ncu after the TMA stores: the instruction after the copies held 4.7%
  // of the consumer loop's stall samples, long scoreboard). Prepared in session 54, compiled only
  // (no device time was left to run it): -DFLASHSDPA_SM90_BWD_BIAS_TMA_LOAD=1 builds it; the
  // default 0 keeps the copies always (every kernel's SASS as before it: sass_hashes.py).
#ifndef FLASHSDPA_SM90_BWD_BIAS_TMA_LOAD
#define FLASHSDPA_SM90_BWD_BIAS_TMA_LOAD 0
#endif
  static constexpr bool kBiasTmaLoad = kDsQueryRows && FLASHSDPA_SM90_BWD_BIAS_TMA_LOAD;
  static constexpr int kBarrierBytes =
      8 * (1 + 4 * kStages + 2 * kDqBufs + (kSplit ? 4 : 0) + (kGrouped ? 1 : 0) + (kBiasTmaLoad ? 4 : 0));
  // The tall step's P^T (keys x queries, dS^T's layout; each warpgroup its own 64 rows), the A of
  // its dV GEMM from shared memory (SS): held as the RS form's 16-bit registers beside P^T, dP^T,
  // dV and dK it peaked at 245 live and serialized the wgmmas (C7512, 64-byte spill); dS^T from
  // that 16-bit copy instead of P^T missed the rule (dq 1.44e-2 against 1.24e-2 at Sq 1023 x Sk 7
  // bottom-right, bf16: session 29).
  // d256: P^T of both warpgroups' queries, the A of dV (double-buffered as dS^T is).
  // d512: one buffer of each (kSplit above).
  static constexpr int kDsBufs = kSplit ? 1 : 2;
  static constexpr int kPtBytes = kTall ? kBlockN * kBlockM * 2 : kWide ? kDsBufs * kBlockN * kBlockM * 2 : 0;
  // d512: each consumer warpgroup's exchange slot, the other CTA's fp32 partial S^T, then dP^T, of
  // the warpgroup's 64 keys x 32 queries (the same warpgroup there holds the same fragments).
  static constexpr int kXBytes = kSplit ? 2 * kBlockN * (kBlockM / 2) * 4 : 0;
  // The base is rounded up to 1024 bytes (the 128-byte swizzle atoms); the dynamic window starts
  // at 0x400 on sm_90 (after the 1 KB the system reserves), so the tall step, 136 bytes short
  // with the slack, claims none and checks the alignment at entry instead.
  static constexpr int kSmemSlack = kTall ? 0 : 1024;
  static constexpr int kSmemBytes = 2 * kKBytes + 2 * kStages * kQBytes + kStages * kRowStatBytes + kDsBufs * kDsBytes +
                                    kPtBytes + kDqBufs * kDqBytes + kXBytes + kBarrierBytes + kSmemSlack;

  static_assert(std::is_same<Elem, __half>::value || std::is_same<Elem, __nv_bfloat16>::value, "fp16 or bf16");
  static_assert(kHeadDim == 64 || kHeadDim == 128 || kHeadDim == 256 || kHeadDim == 512, "head dims 64 to 512");
  // dQ is split between the consumer warpgroups over all kBlockN keys, so the dS^T tile is the
  // only thing they share: by columns (each kHeadDim / 2 of them, all kBlockM rows), or in the
  // tall step by rows (each 64 query rows, all columns: one wgmma M).
  static constexpr int kDqRows = kTall ? 64 : kBlockM;
  static constexpr int kDqCols = kTall ? kHeadDim : kHeadDim / 2;
  static constexpr int kDqAcc = kDqRows * kDqCols / 128;  // fp32 per thread
  // The dQ staging stores (stage_dq): 16-byte or 8-byte; dS^T is stored with stmatrix at every head
  // dim (it replaced 32-bit stores). ncu (H200, d128 S 8k, session 17): the wide
  // form takes the kernel's shared stores from 68.4 M to 18.1 M + 8.4 M stmatrix and their bank
  // conflicts from 69.5 M to 2.1 M; whole backward (3 alternating rounds, new / old) d128 1.004-1.029
  // (median 1.01, GQA 2k 1.029), d64 0.968-0.995 (its overlapped step stages dQ elsewhere).
  // Measured apart at d64 (session 20, 3 alternating rounds, scripts/dev/bwd64_stores_ab.sh at
  // 1433008, variant / old, S 2k, 2k causal, 8k, 8k causal): the 16-byte dQ stores 0.993, 0.995,
  // 0.982, 0.977 (the loser: they lengthen dq_prev's live range across the next S^T / dP^T issue);
  // stmatrix for dS^T 1.005, 1.002, 1.011, 1.001. So stmatrix at every head dim (one dS^T store
  // path), the 16-byte dQ stores at d128 and in the d64 tall step, which stages dQ as d128 does
  // (no overlap: dq_prev dies at the staging right after the S^T issue; not measured apart there).
  static constexpr bool kWideDqStores = kHeadDim == 128 || kTall;
  // K and V of the warpgroup's 64 keys held as the register A operands of S^T and dP^T (RS), read
  // from shared memory once per CTA instead of once per step: -512 of ~1650 shared-memory clocks per
  // d64 step (kernel_notes_bwd_sm90.md, "A budget per step on paper"), for 2 x 16 registers, which
  // only d64 has to spare (d128 would need 2 x 32 on top of 224). The kMods kernel keeps SS.
#ifndef FLASHSDPA_SM90_BWD_KV_REGS
#define FLASHSDPA_SM90_BWD_KV_REGS 1
#endif
  static constexpr bool kKVInRegs = FLASHSDPA_SM90_BWD_KV_REGS && kHeadDim == 64 && !kMods && !kTall;
  // Step overlap (d64 plain kernel only; kernel_notes_bwd_sm90.md, "Step overlap at d64"): step
  // i + 1's S^T (and, kOverlapDp, dP^T) GEMM is issued before the warpgroup waits for step i's
  // dV / dK / dQ, so the tensor pipe is not empty at the step boundary (the session-10 budget: the
  // step runs at ~35% of the tensor peak, bound by its serial chain, which the wgmma_wait<0> at its
  // end closes). Step i's Q / dO stage is released and its dQ staged once they retire, inside step
  // i + 1. Registers at the retire point: dV 32 + dK 32 + dQ 16 + S^T 32 (+ dP^T 32) in flight,
  // the P^T / dS^T A fragments 16 + 16 and K / V fragments 16 + 16: 176 (208) of 240. d128 would
  // need 256 + 32 (session 5's v2), the kMods and dropout kernels hold more per step: unchanged.
  // -DFLASHSDPA_SM90_BWD_OVERLAP=0 builds the kernel without it (same SASS as before).
#ifndef FLASHSDPA_SM90_BWD_OVERLAP
#define FLASHSDPA_SM90_BWD_OVERLAP 1
#endif
#ifndef FLASHSDPA_SM90_BWD_OVERLAP_DP
#define FLASHSDPA_SM90_BWD_OVERLAP_DP 1
#endif
  static constexpr bool kOverlap = FLASHSDPA_SM90_BWD_OVERLAP && kHeadDim == 64 && !kMods && !kDropout && !kTall;
  static constexpr bool kOverlapDp = kOverlap && FLASHSDPA_SM90_BWD_OVERLAP_DP;
  static_assert(!(kOverlap && kMods), "the bias kernel's staging (consume) assumes dQ retires within its step");
  // Late dK (the non-overlapped plain kernel: d128): dK's GEMM issued after dQ's instead of before
  // the dS^T stores, so the end-of-step wait retires dV and dQ only and dK runs on across the step
  // boundary (its accumulator is read by wgmmas alone in the loop, so ptxas keeps it asynchronous);
  // the Q stage it reads is freed at the next step's first wait. ncu (H200, d128 S 8k, session
  // 18): the end-of-step wait held 5.7% of the kernel's stall samples, the largest consumer wait.
  // Measured (H200, bf16 d128, 3 interleaved rounds, late / early, session 19,
  // scripts/dev/bwd_dklate_ab.sh at 77b4e43): S 2k 1.020, causal 1.006; 8k 0.997, causal 1.022;
  // GQA 16/4 8k 1.071, causal 1.052; 2k 1.045, causal 1.052. Same registers (no spill, 232 live).
  // The modifier kernels too since session 51 (H100, bf16 d128, 3 alternating rounds, late / early,
  // scripts/dev/session51_mods.sh; per-round medians): key padding 2k 1.032, 8k 1.052; the bias 2k
  // 1.016; softcap 50 8k 1.015 (kernel_notes_features.md, "dK late in the modifier kernels").
  static constexpr bool kDkLate = !kOverlap && !kDropout;
  static_assert(!kBiasTmaLoad || !kGrouped, "the bias barriers' phases count the steps of one item");
  static_assert(!kDsQueryRows || (kBlockM == 64 && kBlockN == 128 && kDkLate && !kOverlap),
                "dS in query rows: 64-query steps of two 64-key halves, dK from the buffer");
  // The consumer warpgroup's index ptxas can prove uniform (sm90::consumer_warpgroup: K's and V's
  // descriptors, the warpgroup's rows, in uniform registers), d256 only: its R2UR 131 -> 44. Session 41 (H100, 3 alternating rounds of bwd_ab.py, against
  // the plain index): d256 1.003-1.040 (8k 1.025-1.040, causal 0.992-1.016); d128 0.977-1.005 at
  // 1k / 2k and on GQA 16/4 2k, 0.93-1.10 at 8k (the tree's own rounds there 460-565 TFLOP/s): its
  // R2UR 101 -> 42 and S^T's eight HGMMAs over 23 instructions instead of 48, but ptxas then spilled
  // 8 bytes of the 24-register dQ writer (two LDL in its loop, the chain that paces the d128 step);
  // d64 0.955-1.029, median 1.00. So d256 only (d512's pair was not measured). Session 42, with the
  // writer's spill removed (its per-step range and batch opaque: 0 spills): d128 8k 0.917-0.989,
  // causal 8k +1-3.5%, 1k / 2k 1.00, d64 0.98-1.00; lost again (scripts/dev/ab/bwd_uniform_all.patch).
  static constexpr bool kUniformWg = kWide && !kSplit;
  static_assert(kSmemBytes <= 227 * 1024, "over the sm_90 per-block shared memory limit");
};

namespace bwd_sm90 {

// ---- the dQ hand-over's timeline (dev only: -DFLASHSDPA_SM90_BWD_TIMELINE=1) -------------------------
// Session 18's stall samples put 4.6% of the consumers' samples at the dq_empty wait with two
// staging buffers (the writer more than a step behind at times), and four reorderings of the
// writer's protocol did not say why (kernel_notes_bwd_sm90.md, "The dQ hand-over"). One CTA's
// clock64 stamps per step (one SM's counter: every role of the CTA reads the same clock), read back
// by scripts/dev/bwd_check_sm90.cu's `timeline` mode, say whether the wait is the writer's flag
// (another CTA's first store), the TMA unit's reduce, or the producer; the CTA is timeline_cta (set
// by the harness). Off by default: stamp() is then empty and the kernels' SASS is the same as
// without it (bf16 d128 / d64 checked). On, the sm90 backward kernels spill 4-8 bytes (ptxas 13.0):
// its times are a diagnostic of the protocol, not a measurement of the default kernel.
#ifndef FLASHSDPA_SM90_BWD_TIMELINE
#define FLASHSDPA_SM90_BWD_TIMELINE 0
#endif
enum TimelineEvent : int {
  kTlStepStart,   // consumer warpgroup 0, thread 0: top of step i
  kTlQFull,       //   step i's Q stage has landed
  kTlStageWait,   //   stage_dq(i): before waiting for a free staging buffer
  kTlStageGot,    //   ... the buffer is free
  kTlStaged,      //   ... tile i staged and published (dq_full)
  kTlWriterFull,  // writer: tile i seen
  kTlWriterFlag,  //   the block's flag seen (first store / deterministic), the bulk op next
  kTlWriterRead,  //   the TMA unit has read the buffer (or, first store, the copy has landed)
  kTlWriterFree,  //   buffer freed (dq_empty)
  kTlLoadEmpty,   // producer: step i's Q stage free and its loads issued
  // The consumer's step in phases (warpgroup 0, thread 0; the non-overlapped step, d128: session 36).
  kTlStDone,      //   S^T complete (the previous step's dQ staged before)
  kTlPtDone,      //   P^T in registers (the exponentials done), dV next
  kTlDpDone,      //   dP^T complete
  kTlDsStored,    //   dS^T stored and both warpgroups past the dS^T barrier
  kTlGemmsDone,   //   dV and dQ complete (dK may run on)
  kTimelineEvents
};
constexpr int kTimelineSteps = 256;
#if FLASHSDPA_SM90_BWD_TIMELINE
__device__ long long timeline[kTimelineEvents * kTimelineSteps];
__device__ int timeline_cta;
#endif
__device__ __forceinline__ void stamp([[maybe_unused]] TimelineEvent event, [[maybe_unused]] int step,
                                      [[maybe_unused]] bool who = true) {
#if FLASHSDPA_SM90_BWD_TIMELINE
  if (who && int(blockIdx.x) == timeline_cta && step < kTimelineSteps) timeline[event * kTimelineSteps + step] = clock64();
#endif
}

constexpr int kBarDs = 1;  // both consumer warpgroups: dS^T of the step written (256 threads)
constexpr int kBarPt = 2;  // + warpgroup: the tall step's P^T of the warpgroup written (128 threads)
constexpr int kBarSlotRead = 3;  // + warpgroup (d512): every thread of it has read its exchange slot (128)
constexpr int kBarFree = 5;      // + warpgroup (d512): its GEMMs of the step before have retired (256)

// Warps of the producer warpgroup: TMA loads (one thread), LSE / delta rows, the dQ writer.
constexpr int kWarpLoad = 0, kWarpDq = 1, kWarpRowStats = 2;

template <typename Traits>
struct SmemLayout {
  uint32_t k, v, q, dout, stats, ds, pt, dq, x, bars;
  __device__ __forceinline__ explicit SmemLayout(uint32_t base) {
    k = base;
    v = k + Traits::kKBytes;
    q = v + Traits::kKBytes;
    dout = q + Traits::kStages * Traits::kQBytes;
    ds = dout + Traits::kStages * Traits::kQBytes;
    pt = ds + Traits::kDsBufs * Traits::kDsBytes;
    dq = pt + Traits::kPtBytes;
    x = dq + Traits::kDqBufs * Traits::kDqBytes;
    stats = x + Traits::kXBytes;
    bars = stats + Traits::kStages * Traits::kRowStatBytes;
  }
  __device__ __forceinline__ uint32_t kv_full() const { return bars; }
  // q_full(s) also completes when the row-stats warp has written the stage's LSE and delta.
  __device__ __forceinline__ uint32_t q_full(int s) const { return bars + 8 * (1 + s); }
  __device__ __forceinline__ uint32_t q_empty(int s) const { return bars + 8 * (1 + Traits::kStages + s); }
  __device__ __forceinline__ uint32_t do_full(int s) const { return bars + 8 * (1 + 2 * Traits::kStages + s); }
  __device__ __forceinline__ uint32_t do_empty(int s) const { return bars + 8 * (1 + 3 * Traits::kStages + s); }
  __device__ __forceinline__ uint32_t dq_full(int b) const { return bars + 8 * (1 + 4 * Traits::kStages + b); }
  __device__ __forceinline__ uint32_t dq_empty(int b) const {
    return bars + 8 * (1 + 4 * Traits::kStages + Traits::kDqBufs + b);
  }
  // d512's exchange: x_full(w) completes when the other CTA's partial has landed in warpgroup w's
  // slot, x_empty(w) when the other CTA has read what this one wrote into its slot.
  __device__ __forceinline__ uint32_t x_full(int w) const {
    return bars + 8 * (1 + 4 * Traits::kStages + 2 * Traits::kDqBufs + w);
  }
  __device__ __forceinline__ uint32_t x_empty(int w) const {
    return bars + 8 * (3 + 4 * Traits::kStages + 2 * Traits::kDqBufs + w);
  }
  // (kGrouped) completes when every consumer thread is past an item's last GEMM (K / V read).
  __device__ __forceinline__ uint32_t kv_empty() const {
    return bars + 8 * (1 + 4 * Traits::kStages + 2 * Traits::kDqBufs + (Traits::kSplit ? 4 : 0));
  }
  // (kBiasTmaLoad) completes when warpgroup w's half of the bias for dS buffer b has landed.
  __device__ __forceinline__ uint32_t bias_full(int w, int b) const {
    return bars + 8 * (1 + 4 * Traits::kStages + 2 * Traits::kDqBufs + (Traits::kSplit ? 4 : 0) + (Traits::kGrouped ? 1 : 0) +
                       2 * b + w);
  }
  __device__ __forceinline__ uint32_t x_slot(int w) const { return x + w * (Traits::kXBytes / 2); }
  __device__ __forceinline__ uint32_t q_slot(int s) const { return q + s * Traits::kQBytes; }
  __device__ __forceinline__ uint32_t do_slot(int s) const { return dout + s * Traits::kQBytes; }
  __device__ __forceinline__ uint32_t lse_slot(int s) const { return stats + s * Traits::kRowStatBytes; }
  __device__ __forceinline__ uint32_t delta_slot(int s) const { return lse_slot(s) + Traits::kBlockM * 4; }
  __device__ __forceinline__ uint32_t huge_slot(int s) const { return delta_slot(s) + Traits::kBlockM * 4; }
  __device__ __forceinline__ uint32_t ds_buf(int b) const { return ds + b * Traits::kDsBytes; }
  __device__ __forceinline__ uint32_t pt_buf(int b) const { return pt + b * Traits::kDsBytes; }  // (d256: two)
  __device__ __forceinline__ uint32_t dq_buf(int b) const { return dq + b * Traits::kDqBytes; }
};

// The grid's order of the CTAs (key block, KV head, batch), which deterministic mode's dQ adds
// follow. Unmasked, every CTA has the same length: head-major, so the resident CTAs are the key
// blocks of a few heads walking the same Q / dO tiles in L2. Where the mask gives key blocks
// different numbers of query blocks (a causal key block n sees the query blocks from 2n on), the
// longest go first, key block by key block over a group of (KV head, batch) pairs whose Q and dO
// fit in kL2GroupBytes; groups follow each other. Measured (kernel_notes_bwd_sm90.md, session 7):
// over all heads at once, 2k causal d128 (128 heads) lost 18% (every CTA streams its own head's
// Q / dO from DRAM), while GQA 16/4 at 4k causal (256 CTAs, 2 waves) ran 1.45x faster than
// head-major. Ascending key blocks are the longest first where the right side is bounded (causal;
// with only the left side bounded a key block sees the rows from its own on, back to the
// window); descending otherwise. Deterministic dense calls take the grouped order too, over a wave's
// heads (the constructor says why).
struct BwdGridOrder {
  // Of the H100's / H200's 50 MB of L2. Measured (B 8 x H 16 x 2k causal d128 / B 1 x H 16/4 x 8k
  // causal): 8 MB 0.975 / 1.96 ms (the GQA groups then run head by head), 32 MB 0.974 / 1.36 ms,
  // every head in one group 1.20 / 1.37 ms.
  static constexpr int64_t kL2GroupBytes = int64_t(32) << 20;
  // Masked calls of the plain kernel with at most this many key blocks a head (`waves`) launch in
  // groups of a wave's worth of heads: with the 32 MB group (128 heads at d128 S 512) the first
  // wave starts the longest key block of 128 heads at once, each streaming its head's Q / dO from
  // DRAM, and later waves find them in L2 while DRAM idles (the forward's sections did the same:
  // fwd_kernel_sm90.cuh's sched_group). Measured (H100, 3 alternating process rounds, bwd_ab.py,
  // causal, against the 32 MB group): d128 S 512 (4 blocks) 1.198 (0.833 -> 0.998x cuDNN), 1k (8
  // blocks) 1.149 (0.842 -> 0.967x); GQA 16/4 controls 0.99-1.00. With grouped items (d64's k = 4
  // at S 512, d256's k = 2) it lost 19-29% at d64 and 2% at d256 (why is not measured: a wave then
  // holds k times the items the group was sized for), so those kernels keep the L2 group.
  // The bound is 16 key blocks: d128 causal 2k 1.048 against 8 (371 -> 389 TFLOP/s, 0.94 -> 0.99x
  // cuDNN; 3 rounds, spread under 0.3%), 4k and GQA 16/4 controls 0.99-1.00 (session 49); the
  // forward's sections lost 6-7% at 2k, but its tiles read K / V a block at a time where a
  // backward CTA reads all of its head's Q / dO. 32 / 64 (4k / 8k): 1.012 / 1.011 at 4k causal,
  // 0.98-0.99 at 8k, inside the rounds' noise (unaffected 16k cells read 0.96-0.98): not taken.
  // Deterministic mode takes them too, up to 8 key blocks, although a wave then holds all of a
  // head's key blocks and their dQ turns chain: det time against the L2 group (3 rounds, bench
  // --deterministic) d128 1k causal 0.88-0.89, d64 0.92-0.94 (session 49). At 16 (2k) the d64
  // tall kernel's det / default went 1.177-1.180 -> 1.220 and d128's stayed 1.116-1.171 -> 1.155.
  static constexpr int kWaveGroupBlocks = FLASHSDPA_SM90_BWD_WAVE_GROUP_BLOCKS;
  static constexpr int kDetWaveGroupBlocks = FLASHSDPA_SM90_BWD_DET_WAVE_GROUP_BLOCKS;
  int n_blocks, heads_kv, heads_batches, group;
  bool ascending;
  // ordered_dq: the tile's dQ writer keeps turns (d256 / d512 add dQ by reductions from registers
  // and have no deterministic mode: their order stays the default's).
  __host__ __device__ __forceinline__ BwdGridOrder(const AttnBwdParams& p, int kBlockN, bool ordered_dq,
                                                    bool waves = false)
      : n_blocks((p.seqlen_k + kBlockN - 1) / kBlockN),
        heads_kv(p.heads_kv),
        heads_batches(p.heads_kv * p.batch),
        group(1),
        ascending(p.mask.has_right()) {
    if (!p.mask.is_none()) {  // Q and dO bytes of one (KV head, batch): its query heads' rows
      const int64_t bytes = int64_t(p.heads_q / p.heads_kv) * p.seqlen_q * (p.head_dim_qk + p.head_dim_v) * 2;
      group = static_cast<int>(max(int64_t(1), min(int64_t(heads_batches), kL2GroupBytes / max(bytes, int64_t(1)))));
      // Few key blocks a head, one CTA an item (the plain kernel): a wave's worth of heads instead
      // (ceil(num_sms / key blocks)), so each wave's longest key blocks do not all start streaming
      // new heads' Q / dO from DRAM at once (kWaveGroupBlocks says what it measured).
      const int bound = !ordered_dq ? FLASHSDPA_SM90_BWD_WAVE_WIDE / kBlockN  // (the wide tiles)
                        : p.deterministic ? kDetWaveGroupBlocks : kWaveGroupBlocks;
      if (waves && n_blocks <= bound)
        group = max(1, min(group, (max(p.num_sms, 1) + n_blocks - 1) / n_blocks));
    } else if (ordered_dq && p.deterministic) {
      // Deterministic and dense: a group of the heads one wave holds (num_sms / key blocks). Head-
      // major, the SMs that one turn frees together (that turn of every resident head ends at
      // once) took the next head's consecutive key blocks, which then started in step and waited
      // for each other's hand-overs (~2,300 cycles each) on their first query block: 34,000
      // cycles for turn 15 at 2k (H100 timeline). Grouped, they take the next group's heads at
      // that turn, whose predecessors started a hand-over earlier. Measured (H100, 3 rounds,
      // deterministic time against head-major): d64 2k 0.84, 8k 0.95-0.97; d128 2k 0.92-0.96, 8k
      // 1.00; the masked calls' L2-sized group instead lost d64 2k 10%, and this group for causal
      // calls too lost 7-17% there (kernel_notes_bwd_sm90.md, "The deterministic launch order").
      group = max(1, min(heads_batches, (max(p.num_sms, 1) + n_blocks - 1) / n_blocks));
    }
  }
  // CTA `index` -> its key block, KV head and batch.
  __host__ __device__ __forceinline__ void decode(int64_t index, int& n_block, int& kv_head, int& batch) const {
    const int64_t per_group = int64_t(group) * n_blocks;
    const int first = static_cast<int>(index / per_group) * group;
    const int size = min(group, heads_batches - first);
    const int64_t within = index % per_group;
    const int n = static_cast<int>(within / size);
    const int head_batch = first + static_cast<int>(within % size);
    n_block = ascending ? n : n_blocks - 1 - n;
    kv_head = head_batch % heads_kv;
    batch = head_batch / heads_kv;
  }
  // Position of key block n_block among the key blocks [n_min, n_max) that add to one query block,
  // in launch order: deterministic mode's turn (0 adds first).
  __host__ __device__ __forceinline__ int turn(int n_block, int n_min, int n_max) const {
    return ascending ? n_block - n_min : n_max - 1 - n_block;
  }
};

// Which kernels take BwdGridOrder's wave groups: one CTA an item (the plain d64 / d128 tiles, and
// the d256 one when FLASHSDPA_SM90_BWD_WAVE_WIDE bounds it).
template <typename Traits>
constexpr bool kWaveGroup = !Traits::kGrouped && !Traits::kSplit && (!Traits::kWide || FLASHSDPA_SM90_BWD_WAVE_WIDE > 0);

// The (query head, query block) steps of one CTA: the query blocks that see the key block, from
// the last down, and for each the heads of the KV head's group. Every key block of a head thus
// starts at the same query block (causal: the last) and they walk it together, so that in
// deterministic mode a key block's predecessor in the dQ order (BwdGridOrder::turn, the longer
// CTA) reaches each (head, query block) in the same step; from the first query block up, a
// causal key block n met its predecessor's blocks 2 steps ahead of it, once per head of the
// group, and the waits chained (GQA 16/4 causal: deterministic 1.84x the default mode).
// (The d256 tile walks so too: a walk rotated by n_block query blocks, so that the resident key
// blocks add into different query blocks' rows, ran 0.91-0.93x: session 31.)
struct StepRange {
  int head_begin, heads, m_min, m_max;
  __device__ __forceinline__ int count() const { return m_max > m_min ? heads * (m_max - m_min) : 0; }
  __device__ __forceinline__ int head(int i) const { return head_begin + i % heads; }
  __device__ __forceinline__ int m_block(int i) const { return m_max - 1 - i / heads; }
};

// Element-wise mask of a transposed score tile: rows are keys, columns queries (the forward's
// apply() has them the other way round). Key row `key0` is the thread's fragment row g.
template <int kMTiles>
__device__ __forceinline__ void apply_mask_t(float (&s)[1][kMTiles][4], const BlockMask& mask, int key0, int col0,
                                             int seqlen_q, float fill) {
#pragma unroll
  for (int j = 0; j < kMTiles; ++j) {
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int q = col0 + 8 * j + e;
      const int begin = mask.col_begin(q), end = q < seqlen_q ? mask.col_end(q) : 0;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int key = key0 + 8 * h;
        if (key < begin || key >= end) s[0][j][2 * h + e] = fill;
      }
    }
  }
}

// P^T = exp2(S^T c - LSE log2 e) in place, the LSE pair of column group j from lse2(j); in a stage
// with a huge LSE the probabilities are then capped at 1 (softmax.cuh: 2^min(x, 0) = min(2^x, 1),
// NaN kept): a fix-up pass after the one exponent loop, where a capped copy of the loop (taken per
// stage) made ptxas spill 20 bytes at d64 and capping every exponent cost 1-4% at d128. (Masking
// is the caller's: apply_mask_t on partial tiles.)
//
// All exponentials stay on MUFU: k of 8 on the FMA pipe (exp2_fma of the capped exponent, the
// portable backward's 2 of 8) lost on the H100 (session 38, 3 rounds, bwd_ab.py): 2 of 8 0.97-1.02x,
// median 0.99; 4 of 8 0.95-1.03x, median 0.98; and NaN / inf inputs then failed test_extreme
// (exp2_fma of NaN is not NaN). The MUFU exponentials are not the step's critical path here.
template <int kMTiles, typename LsePair>
__device__ __forceinline__ void probabilities_t(float (&st)[1][kMTiles][4], float scale_log2, const LsePair& lse2,
                                                uint32_t huge) {
#pragma unroll
  for (int j = 0; j < kMTiles; ++j) {
    const float2 l = lse2(j);
#pragma unroll
    for (int x = 0; x < 4; ++x) st[0][j][x] = fast_exp2(fmaf(st[0][j][x], scale_log2, x % 2 ? -l.y : -l.x));
  }
  if (huge) {
#pragma unroll
    for (int j = 0; j < kMTiles; ++j) {
#pragma unroll
      for (int x = 0; x < 4; ++x) st[0][j][x] = capped_probability(st[0][j][x]);
    }
  }
}

template <typename Traits>
__device__ __forceinline__ void produce(const BwdSm90Args& args, const SmemLayout<Traits>& sm, int n_block,
                                        int kv_head, int batch, const StepRange& range, int col0, int step0 = 0,
                                        int item = 0) {
  sm90::tma_prefetch_desc(&args.tma_q);
  sm90::tma_prefetch_desc(&args.tma_do);
  auto load = [&](uint32_t empty, uint32_t full, uint32_t slot, const CUtensorMap* map, uint32_t parity, int head,
                  int m_block) {
    sm90::mbar_wait(empty, parity ^ 1);
    sm90::mbar_arrive_expect_tx(full, Traits::kQBytes);
#pragma unroll
    for (int c = 0; c < Traits::kColBlocks; ++c) {
      sm90::tma_load_4d(slot + c * Traits::kBlockM * 128, map, full, col0 + c * 64, m_block * Traits::kBlockM, head,
                        batch);
    }
  };
  auto load_step = [&](int i) {
    const int s = (step0 + i) % Traits::kStages;
    const uint32_t parity = ((step0 + i) / Traits::kStages) & 1;
    load(sm.q_empty(s), sm.q_full(s), sm.q_slot(s), &args.tma_q, parity, range.head(i), range.m_block(i));
    stamp(kTlLoadEmpty, i);
    load(sm.do_empty(s), sm.do_full(s), sm.do_slot(s), &args.tma_do, parity, range.head(i), range.m_block(i));
  };
  // (kGrouped) A later item's first Q / dO go first: their stage is the one the last item's
  // second-to-last step read, free during its last step; K / V wait until the consumers' last GEMM
  // of the last item has read theirs (kv_empty), while they store its dK / dV.
  int first = 0;
  if constexpr (Traits::kGrouped) {
    if (item > 0) {
      if (range.count() > 0) load_step(first++);
      sm90::mbar_wait(sm.kv_empty(), (item - 1) & 1);
    }
  }
  sm90::mbar_arrive_expect_tx(sm.kv_full(), 2 * Traits::kKBytes);
#pragma unroll
  for (int c = 0; c < Traits::kColBlocks; ++c) {
    sm90::tma_load_4d(sm.k + c * Traits::kBlockN * 128, &args.tma_k, sm.kv_full(), col0 + c * 64,
                      n_block * Traits::kBlockN, kv_head, batch);
    sm90::tma_load_4d(sm.v + c * Traits::kBlockN * 128, &args.tma_v, sm.kv_full(), col0 + c * 64,
                      n_block * Traits::kBlockN, kv_head, batch);
  }
  for (int i = first; i < range.count(); ++i) load_step(i);
}

// LSE * log2(e) and delta of each step's query rows into the Q stage's shared memory (+inf and 0
// past the sequence, so P and dS^T are 0 there), one warp: 2 rows per lane, and whether any row's
// |LSE * log2(e)| reaches 2^14 (huge_lse2: the consumers then cap the probabilities). The stage's
// q_full barrier counts the warp's 32 arrivals besides the TMA thread's.
template <typename Traits>
__device__ __forceinline__ void load_row_stats(const AttnBwdParams& p, const SmemLayout<Traits>& sm, int batch,
                                               const SeqlenInfo& seq, const StepRange& range, int lane,
                                               int step0 = 0) {
  grid_dependency_wait();  // delta is the preprocess's
  // Only now (the preprocess has completed) may the dQ postprocess's CTAs be placed on SMs this
  // grid leaves idle: with first store they start converting blocks before this grid ends and
  // read the semaphores, which must be the zeroed ones.
  grid_dependents_launch();
  for (int i = 0; i < range.count(); ++i) {
    const int s = (step0 + i) % Traits::kStages;
    const uint32_t parity = ((step0 + i) / Traits::kStages) & 1;
    const int head = range.head(i), m_block = range.m_block(i);
    const float* lse = p.lse + batch * p.lse_batch_stride + head * p.lse_head_stride;
    const float* delta = p.delta + batch * p.delta_batch_stride + head * p.delta_head_stride;
    float l[Traits::kBlockM / 32], d[Traits::kBlockM / 32];
#pragma unroll
    for (int r = 0; r < Traits::kBlockM / 32; ++r) {  // loads before the wait: they overlap it
      const int q = m_block * Traits::kBlockM + 32 * r + lane;
      const bool ok = q < seq.seqlen_q;
      // A forward that wrote -inf for a row that sees no key is read as +inf (P = 0), as sm80's.
      const float row_lse = ok ? lse[(seq.q_row_offset + q) * p.lse_row_stride] : INFINITY;
      l[r] = backward_lse2(row_lse);
      d[r] = ok ? delta[(seq.q_row_offset + q) * p.delta_row_stride] : 0.f;
    }
    bool huge = false;
#pragma unroll
    for (int r = 0; r < Traits::kBlockM / 32; ++r) huge |= huge_lse2(l[r]);
    const uint32_t any_huge = __any_sync(0xffffffffu, huge);
    sm90::mbar_wait(sm.q_empty(s), parity ^ 1);
    if (lane == 0) asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(sm.huge_slot(s)), "r"(any_huge) : "memory");
#pragma unroll
    for (int r = 0; r < Traits::kBlockM / 32; ++r) {
      asm volatile("st.shared.f32 [%0], %1;\n" ::"r"(sm.lse_slot(s) + (32 * r + lane) * 4), "f"(l[r]) : "memory");
      asm volatile("st.shared.f32 [%0], %1;\n" ::"r"(sm.delta_slot(s) + (32 * r + lane) * 4), "f"(d[r]) : "memory");
    }
    sm90::mbar_arrive(sm.q_full(s));
  }
}

// The dQ writer (one thread): adds each staged fp32 dQ tile to dq_accum with one bulk reduce-add
// and frees its buffer once the TMA unit has read it, so no consumer waits for the reduction.
// Deterministic mode (p.deterministic, p.dq_semaphore): the key blocks that see a query block add
// to it in the order the grid launches them (BwdGridOrder; so a CTA only ever waits for one
// launched before it: no deadlock). The key block whose turn is t waits until the block's
// semaphore reads t (it starts at 0: the first does not wait), adds, waits for its adds to land,
// and writes t + 1. The sum's order, hence every bit, is then fixed.
// First store (p.dq_first_store): turn 0 (the first visitor in launch order, which is a visitor
// whenever any key block is: BlockMask::visited_by_key_blocks) copies its tile onto the
// accumulator instead of adding, waits for it to land and writes 1; the others wait for a non-zero
// word (in deterministic mode: for their turn, as above) and add. The preprocess then zeroes only
// the blocks no key block visits: 128 MB less to write at 16k tokens x 2048 (d128), ~37 us of its
// 82 (kernel_notes_bwd_sm90.md, session 7).
template <typename Traits>
__device__ __forceinline__ void write_dq(const AttnBwdParams& p, const SmemLayout<Traits>& sm, int batch,
                                         const SeqlenInfo& seq, const BlockMask& mask, const StepRange& range,
                                         const BwdGridOrder& order, int n_block, int step0 = 0) {
#if defined(__CUDA_ARCH__)  // ptx.cuh declares the bulk copies for device passes of sm_90 only
  // dq_semaphore counts query blocks of this kernel's kBlockM rows (the host's p.dq_sem_rows, which
  // the pre- and postprocess read: bwd_launch_sm90.cuh sets it from these traits).
  static_assert(Traits::kBlockM == kPrePostRows || Traits::kBlockM == 2 * kPrePostRows, "the semaphore blocks");
  static_assert(Traits::kBlockN == kDqFirstStoreBlockN, "the preprocess finds the unvisited blocks with this tile");
  const int m_blocks = ceil_div(p.seqlen_q, Traits::kBlockM);
  // Deterministic: the key blocks add in launch order (BwdGridOrder::turn); first store: the first
  // of them stores instead (the preprocess zeroed only the blocks nobody visits). Both need the
  // semaphores, which the host gives the sm90 family for dense problems.
  const bool ordered = p.deterministic && p.dq_semaphore != nullptr;
  const bool first_store = p.dq_first_store && p.dq_semaphore != nullptr;
  grid_dependency_wait();  // dq_accum and the semaphores are zeroed by the preprocess
  // Semaphores by index into p.dq_semaphore (32 bits: B * H * m_blocks words, far below 2^31 for
  // any dq_accum that fits a GPU), so the writer's state fits the producer warpgroup's 24 registers.
  int pending = -1;  // (first store) the block of the last add not yet counted
  // The flag probe: once step i's bulk op is issued, step i + 1's flag is read once (acquire, no
  // spin) and, set, followed by the proxy fence, while the TMA unit reads step i's tile; step i + 1
  // then goes straight to its add. A turn-0 step's flag reads 0 (its own store sets it). Session
  // 22's timeline (B 2, H 16, S 8k, d128, CTA 1000) had the writer's ~4,500-cycle tile spend
  // ~1,100 between seeing the tile and issuing its add, and the consumers waiting ~190 cycles a
  // step for a staging buffer; with the probe (this form) the whole backward ran +2.0-4.9% at
  // d128, +2.7-5.2% at d64, +1.2-3.8% on the GQA train shapes (3 + 4 interleaved rounds,
  // kernel_notes_bwd_sm90.md, "The flag probe").
  bool flag_probed = false;  // this step's flag was read set (and fenced) during the last step
  // Step i + 1 is the next head of the same query block, or the first head of the block before.
  auto probe_next = [&](int i, int head, int sem_index) {
    flag_probed = false;
    if (!first_store || ordered || i + 1 >= range.count()) return;
    const int next = head + 1 - range.head_begin < range.heads ? sem_index + m_blocks
                                                                : sem_index - (range.heads - 1) * m_blocks - 1;
    flag_probed = sm90::ld_acquire_gpu(p.dq_semaphore + next) != 0;
    if (flag_probed) sm90::fence_proxy_async_global();  // the add after what the flag announced
  };
  for (int i = 0; i < range.count(); ++i) {
    const int b = (step0 + i) % Traits::kDqBufs;
    const int head = range.head(i), m_block = range.m_block(i);
    const int rows = min(Traits::kBlockM, seq.seqlen_q - m_block * Traits::kBlockM);
    float* dst = p.dq_accum + batch * p.dq_accum_batch_stride + head * p.dq_accum_head_stride +
                 (seq.q_row_offset + m_block * Traits::kBlockM) * p.dq_accum_row_stride;
    // Varlen runs carry no semaphore, and there the unused product (sequences x heads x the longest
    // sequence's query blocks) can pass 2^31: 0 keeps it from overflowing.
    const int sem_index =
        p.dq_semaphore == nullptr ? 0 : (batch * p.heads_q + head) * m_blocks + m_block;
    int32_t* sem = p.dq_semaphore == nullptr ? nullptr : p.dq_semaphore + sem_index;
    const uint32_t bytes = rows * Traits::kHeadDim * 4;
    sm90::mbar_wait(sm.dq_full(b), ((step0 + i) / Traits::kDqBufs) & 1);
    stamp(kTlWriterFull, i);
    // The turn from per-step copies the empty asm makes opaque: ptxas otherwise hoists
    // seqlen_q - 1 and ~n_block out of the loop into two vector registers and, with the probe's
    // state, spills them (4-12 bytes, reloaded every step) from the writer's 24.
    BlockMask m = mask;
    int nb = n_block;
    asm volatile("" : "+r"(m.seqlen_q), "+r"(nb));
    const int turn = sem == nullptr ? -1
                                    : order.turn(nb, m.template n_block_min<Traits::kBlockM, Traits::kBlockN>(m_block),
                                                 m.template n_block_max<Traits::kBlockM, Traits::kBlockN>(m_block));
    if (first_store && turn == 0) {
      // The block's first tile: a plain copy onto the unzeroed accumulator; the others add once
      // it has landed (the word turns 1).
      stamp(kTlWriterFlag, i);
      bulk_store(dst, sm.dq_buf(b), bytes);
      bulk_commit_group();
      probe_next(i, head, sem_index);
      bulk_wait_all();
      stamp(kTlWriterRead, i);
      sm90::fence_proxy_async_global();
      sm90::st_release_gpu(sem, 1);
      if (pending >= 0) {  // the previous add has landed too
        red_release_add_gpu(p.dq_semaphore + pending, 1);
        pending = -1;
      }
    } else {
      if (ordered) {
        while (sm90::ld_acquire_gpu(sem) != turn) {
        }
      } else if (first_store && !flag_probed) {
        while (sm90::ld_acquire_gpu(sem) == 0) {
        }
      }
      // the add after what the flag announced
      if (sem != nullptr && !flag_probed) sm90::fence_proxy_async_global();
      stamp(kTlWriterFlag, i);
      bulk_reduce_add_f32(dst, sm.dq_buf(b), bytes);
      bulk_commit_group();
      probe_next(i, head, sem_index);
      if (ordered) {
        // (Freeing the tile once the TMA unit has read it, before the landing and the hand-over,
        // ran 0.97-1.03x: session 47, kernel_notes_bwd_sm90.md.)
        bulk_wait_all();  // the adds have landed in global memory
        sm90::fence_proxy_async_global();
        sm90::st_release_gpu(sem, turn + 1);
      } else {
        bulk_wait_read_all();
        stamp(kTlWriterRead, i);
        if (first_store) {
          // Count the previous add once it has landed (one step late, so the wait costs nothing
          // here): the word then reaches the number of key blocks that visit the query block,
          // which the dQ postprocess waits for block by block.
          // (Counting two adds at once, one wait and fence per pair, ran 0.98-1.02x: session 23.)
          if (pending >= 0) {
            bulk_wait_all_but_last();
            sm90::fence_proxy_async_global();
            red_release_add_gpu(p.dq_semaphore + pending, 1);
          }
          pending = sem_index;
        }
      }
    }
    sm90::mbar_arrive(sm.dq_empty(b));
    stamp(kTlWriterFree, i);
  }
  bulk_wait_all();
  if (pending >= 0) {
    sm90::fence_proxy_async_global();
    red_release_add_gpu(p.dq_semaphore + pending, 1);
  }
#endif
}

template <typename Traits>
__device__ __forceinline__ void consume(const BwdSm90Args& args, const SmemLayout<Traits>& sm, int n_block,
                                        int kv_head, int batch, const SeqlenInfo& seq, const BlockMask& mask,
                                        const StepRange& range, int cwg, int step0 = 0, int item = 0) {
  using Elem = typename Traits::Elem;
  using Mod = ScoreModBwd<Traits::kModsKind>;
  constexpr int kMTiles = Traits::kMTiles;
  constexpr int kDTiles = Traits::kDTiles;
  constexpr int kBlockM = Traits::kBlockM;
  constexpr int kBlockN = Traits::kBlockN;
  using OpS = sm90::WgmmaOp<Elem, kBlockM>;               // S^T, dP^T: N = the step's queries
  using OpD = sm90::WgmmaOp<Elem, Traits::kHeadDim>;      // dV, dK: N = head dim
  using OpQ = sm90::WgmmaOp<Elem, Traits::kDqCols>;      // dQ: N = this warpgroup's columns
  const AttnBwdParams& p = args.p;
  const int tid = threadIdx.x % 128;
  const int warp = tid / 32, lane = tid % 32;
  const int key_row = cwg * 64 + warp * 16 + lane / 4;  // fragment row g of this thread in the key block
  const int key0 = n_block * kBlockN + key_row;          // its sequence key
  const bool arriver = lane == 0;

  float dv_acc[Traits::kHeadDim / 2], dk_acc[Traits::kHeadDim / 2];
#pragma unroll
  for (int i = 0; i < Traits::kHeadDim / 2; ++i) dv_acc[i] = dk_acc[i] = 0.f;
  float st_acc[kBlockM / 2], dpt_acc[kBlockM / 2], dq_acc[Traits::kDqAcc];
  auto& st = *reinterpret_cast<float(*)[1][kMTiles][4]>(st_acc);
  auto& dpt = *reinterpret_cast<float(*)[1][kMTiles][4]>(dpt_acc);
  float dq_prev[Traits::kDqAcc];  // the previous step's dQ tile (scaled), staged during this step's S^T GEMM
  auto& dq = *reinterpret_cast<float(*)[1][Traits::kDqCols / 8][4]>(dq_prev);
  uint32_t pt16[kMTiles / 2][4], dst16[kMTiles / 2][4];

  // Descriptors (column block 0): this warpgroup's K and V rows (K-major A), the Q / dO slots as
  // K-major B (S^T, dP^T) and as N-major B (dK, dV), dS^T as an M-major A and K's column block
  // cwg as an N-major B (dQ).
  const uint64_t k_desc = sm90::make_desc(sm.k + cwg * 64 * 128, 16, 1024);
  const uint64_t v_desc = sm90::make_desc(sm.v + cwg * 64 * 128, 16, 1024);
  const uint64_t q_kmaj0 = sm90::make_desc(sm.q, 16, 1024);
  const uint64_t do_kmaj0 = sm90::make_desc(sm.dout, 16, 1024);
  const uint64_t q_nmaj0 = sm90::make_desc(sm.q, kBlockM * 128, 1024);
  const uint64_t do_nmaj0 = sm90::make_desc(sm.dout, kBlockM * 128, 1024);
  const uint64_t ds_desc0 = sm90::make_desc(sm.ds, kBlockN * 128, 1024);
  // K's columns [cwg * kDqCols, +kDqCols) as the N-major B of dQ: column block c0 / 64, then
  // (d64) 2 * (c0 % 64) bytes into the 128-byte swizzled rows (the swizzle is a function of the
  // address, so a start inside the atom selects those columns, as the K-major k steps do).
  constexpr int kDqCol0 = Traits::kTall ? 0 : Traits::kDqCols;  // first column of warpgroup 1 (tall: all columns)
  const uint64_t kq_desc = sm90::make_desc(
      sm.k + (cwg * kDqCol0 / 64) * kBlockN * 128 + (cwg * kDqCol0 % 64) * 2, kBlockN * 128, 1024);
  constexpr uint64_t kSlot = Traits::kQBytes >> 4;
  constexpr uint64_t kDsBuf = Traits::kDsBytes >> 4;
  // The dQ GEMM's A: dS^T of buffer 0 as M-major (queries x keys); in the tall step this
  // warpgroup's 64 queries, the dS^T column block cwg.
  const uint64_t dq_a_desc = ds_desc0 + (Traits::kTall ? cwg * ((kBlockN * 128) >> 4) : 0);
  // A keys x queries tile (dS^T, the tall step's P^T) to shared memory, 16 queries m of it: one
  // stmatrix.x4, matrix q = (query chunk 2m + q / 2, key rows 8 (q % 2) ..), whose fragment is
  // frag[q] (the A layout); lane L gives row L % 8 of matrix L / 8, in this warpgroup's rows of
  // 128-byte swizzled rows, column block m / 4 (its 64 queries: 8 chunks of 16 bytes).
  auto store_ds_t = [&](uint32_t base, int m, const auto& frag) {  // (generic: stmatrix is device-only)
    const int ds_q = lane / 8, ds_row = cwg * 64 + warp * 16 + 8 * (ds_q % 2) + lane % 8;  // row % 8 == lane % 8
    const int chunk = 2 * (m % 4) + ds_q / 2;
    stmatrix_x4(base + (m / 4) * kBlockN * 128 + ds_row * 128 + ((chunk ^ (lane % 8)) << 4), frag[0], frag[1], frag[2],
                frag[3]);
  };
  // (kDsQueryRows) dS, 16 queries m of the step, to the warpgroup's half of the buffer, transposed
  // by stmatrix.x4.trans: matrix q of frag is keys 8 (q % 2) .. of the warp x queries 8 (2 m + q / 2)
  // .., stored as 8 query rows of 8 keys; lane L addresses query row 16 m + 8 (L / 16) + L % 8, key
  // chunk 2 warp + (L / 8) % 2 (WarpBiasTileQ's layout: the chunks the warp's staged bias took).
  [[maybe_unused]] auto store_ds_q = [&](uint32_t base, int m, const auto& frag) {
    const int row = 16 * m + 8 * (lane / 16) + lane % 8, chunk = 2 * warp + (lane / 8) % 2;  // row % 8 == lane % 8
    stmatrix_x4_trans(base + cwg * kBlockM * 128 + row * 128 + ((chunk ^ (lane % 8)) << 4), frag[0], frag[1], frag[2],
                      frag[3]);
  };
  const float scale_log2 = Mod::scale_log2(p);  // p.scale_log2 but with softcap (its raw unit)
  const int drop_k16 = n_block * kBlockN + cwg * 64 + warp * 16;  // the warp's first key (m16 slice of S^T)

  // Step i's dQ tile into staging buffer i % kDqBufs in dq_accum's (permuted) row order, for the writer
  // warp. Rows: this thread's queries (the M dimension of the dQ product; tall: in the warpgroup's
  // 64-row half). Called after step i + 1's S^T GEMM is issued, so the tensor cores have work while
  // the warpgroups stage it.
  auto stage_dq = [&](int step) {
    const int buf = (step0 + step) % Traits::kDqBufs;
    stamp(kTlStageWait, step, cwg == 0 && tid == 0);
    sm90::mbar_wait(sm.dq_empty(buf), (((step0 + step) / Traits::kDqBufs) & 1) ^ 1);
    stamp(kTlStageGot, step, cwg == 0 && tid == 0);
    const int q_row = (Traits::kTall ? 64 * cwg : 0) + warp * 16 + lane / 4;
    const int64_t row0 = seq.q_row_offset + int64_t(range.m_block(step)) * kBlockM;
    // DqAccumLayout puts a thread's pairs of two adjacent n8 blocks (j, j + 1: columns 8j + 2t, +1
    // and 8j + 8 + 2t, +1) in four consecutive floats, so one 16-byte store takes both, and the
    // group swap of odd rows spreads each quarter warp (rows g, g + 1) over all 32 banks. The
    // 8-byte form before it issued twice the stores with 2-way bank conflicts: ncu (session 17, d128
    // S 8k) counted 68.4 M shared stores and 69.5 M store bank conflicts in this kernel against
    // cuDNN's 17.8 M and 1.0 M, and 12x its MIO-throttle stalls.
#pragma unroll
    for (int j = 0; j < Traits::kDqCols / 8; j += (Traits::kWideDqStores ? 2 : 1)) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int row = q_row + 8 * h;
        const int col = kDqCol0 * cwg + 8 * j + 2 * (lane % 4);
        const uint32_t addr = sm.dq_buf(buf) + (row * Traits::kHeadDim + DqAccumLayout::position(row0 + row, col)) * 4;
        if constexpr (Traits::kWideDqStores) {
          asm volatile("st.shared.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "f"(dq[0][j][2 * h]),
                       "f"(dq[0][j][2 * h + 1]), "f"(dq[0][j + 1][2 * h]), "f"(dq[0][j + 1][2 * h + 1])
                       : "memory");
        } else {
          asm volatile("st.shared.v2.f32 [%0], {%1, %2};\n" ::"r"(addr), "f"(dq[0][j][2 * h]), "f"(dq[0][j][2 * h + 1])
                       : "memory");
        }
      }
    }
    sm90::fence_async_shared();
    sm90::mbar_arrive(sm.dq_full(buf));
    stamp(kTlStaged, step, cwg == 0 && tid == 0);
  };
  // (kOverlap) dQ[:, kDqCols cwg .. + kDqCols) = dS K over all 128 keys, dS^T from buffer `buf`
  // (M-major A, N-major B), one commit group.
  auto issue_dq = [&](int buf) {
    sm90::wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kBlockN / 16; ++kk)
      OpQ::template ss<1, 1>(dq_acc, dq_a_desc + buf * kDsBuf + ((kk * 2048) >> 4), kq_desc + ((kk * 2048) >> 4), kk > 0);
    sm90::wgmma_commit();
  };

  // kModsBias: the bias of step i, staged by each warp a step ahead (cp.async, one group per step;
  // kBiasTmaLoad: the warpgroup's TMA load) into dS buffer i % 2, in the chunks of its warpgroup's
  // half that the warp's dS values take later (bias_stage.cuh's WarpBiasTileQ: the warp's 16 keys x
  // 64 queries; the d128 kernel's shared memory has no 16 KB to spare). That buffer last held step
  // i - 2's dS, whose readers (both warpgroups' dQ GEMMs, late dK, the d_bias store of step i - 2)
  // are done once both warpgroups have passed step i - 1's dS barrier, where the copy is issued;
  // the warp's own dS values of step i overwrite it only after every lane has read it (__syncwarp).
  [[maybe_unused]] auto bias_tile = [&](int buf) {
    return WarpBiasTileQ{sm.ds_buf(buf) + cwg * kBlockM * 128, 2 * warp};
  };
  [[maybe_unused]] auto step_need = [&](int step) {
    if constexpr (Traits::kModsKind == kModsBias) {
      return BiasCells(p.mods, batch, range.head(step), seq.seqlen_q)
          .template need<kBlockM, kBlockN>(range.m_block(step), n_block);
    } else {
      return TileNeed::kBias;
    }
  };
  [[maybe_unused]] const bool bias_tma = Traits::kBiasTmaLoad && args.bias_tma != 0;
  auto stage_bias = [&](int step) {
    if constexpr (Traits::kBiasTmaLoad) {
      if (bias_tma) {
        // Thread 0 of the warpgroup, its half of buffer step % 2 (the bias kernel runs one item a
        // CTA: step0 = 0): every step completes the barrier's phase, with the box's bytes where the
        // tile needs the bias, by a plain arrival where it does not (not read then).
        if (tid == 0) {
          const uint32_t bar = sm.bias_full(cwg, step % 2);
          if (step_need(step) == TileNeed::kBias) {
            sm90::mbar_arrive_expect_tx(bar, kBlockM * 128);
            sm90::tma_load_4d(sm.ds_buf(step % 2) + cwg * kBlockM * 128, &args.tma_bias, bar,
                              n_block * kBlockN + cwg * 64, range.m_block(step) * kBlockM,
                              p.mods.bias_head_stride == 0 ? 0 : range.head(step),
                              p.mods.bias_batch_stride == 0 ? 0 : batch);
          } else {
            sm90::mbar_arrive(bar);
          }
        }
        return;
      }
    }
    if constexpr (Traits::kModsKind == kModsBias) {
      if (step_need(step) == TileNeed::kBias) {
        const bool aligned16 =
            rows_aligned16(p.mods.bias, p.mods.bias_batch_stride, p.mods.bias_head_stride, p.mods.bias_row_stride);
        const int64_t plane = bias_plane(batch, range.head(step), p.mods.bias_batch_stride, p.mods.bias_head_stride);
        bias_tile(step % 2).load(static_cast<const uint16_t*>(p.mods.bias) + plane, p.mods.bias_row_stride, aligned16,
                                 range.m_block(step) * kBlockM, n_block * kBlockN + cwg * 64 + warp * 16, seq.seqlen_q,
                                 seq.seqlen_k, lane);
      }
      cp_async_commit();
    }
  };
  // kModsBias (kDsQueryRows): d_bias by one TMA store of the warpgroup's half a step, where the
  // launcher encoded its map (base and strides 16-byte multiples: the dense buffer Python allocates
  // when Sk % 8 == 0); bias_grad_t's 16-bit stores from registers otherwise.
  [[maybe_unused]] const bool dbias_rows = Traits::kDsQueryRows && p.d_bias != nullptr && args.dbias_tma != 0;
  auto store_bias_grad = [&](int step, int buf) {
    if constexpr (Traits::kDsQueryRows) {
      // One thread of the warpgroup: the half is read by the TMA unit beside the dQ GEMM, and
      // waited for (tma_store_wait_read) before the next dS barrier, after which the buffer takes
      // the bias of step + 2. Rows past seqlen_q and keys past seqlen_k are the map's to drop.
      if (tid == 0) {
        sm90::tma_store_4d(&args.tma_dbias, sm.ds_buf(buf) + cwg * kBlockM * 128, n_block * kBlockN + cwg * 64,
                           range.m_block(step) * kBlockM, range.head(step), batch);
        sm90::tma_store_commit();
      }
    }
  };

  if (range.count() > 0) stage_bias(0);  // (a key block no query sees, through the mask or the bias, has no step)
  sm90::mbar_wait(sm.kv_full(), item & 1);
  // kKVInRegs: this warp's 16 key rows of K and V as RS A fragments, one per k step of 16 columns
  // (ldmatrix.x4: matrices rows 0-7 / 8-15 x columns 0-7 / 8-15 of the step, the A fragment's
  // a0..a3; the TMA tile's 128-byte rows hold 16-byte chunk c at c ^ (row % 8)).
  constexpr int kKSteps = Traits::kHeadDim / 16;
  uint32_t k_frag[Traits::kKVInRegs ? kKSteps : 1][4], v_frag[Traits::kKVInRegs ? kKSteps : 1][4];
  if constexpr (Traits::kKVInRegs) {
    static_assert(Traits::kColBlocks == 1, "one 128-byte column block: d64");
    const int row = cwg * 64 + warp * 16 + (lane / 8 % 2) * 8 + lane % 8;  // row % 8 == lane % 8
#pragma unroll
    for (int kk = 0; kk < kKSteps; ++kk) {
      const uint32_t at = row * 128 + (((2 * kk + lane / 16) ^ (lane % 8)) << 4);
      ldmatrix_x4(k_frag[kk], sm.k + at);
      ldmatrix_x4(v_frag[kk], sm.v + at);
    }
  }
  for (int i = 0; i < range.count(); ++i) {
    const int s = (step0 + i) % Traits::kStages;  // (the ring and the buffers count the CTA's steps)
    const uint32_t parity = ((step0 + i) / Traits::kStages) & 1;
    const int b = (step0 + i) % 2;  // dS^T buffer (dQ staging: stage_dq's own)
    const int m_block = range.m_block(i);
    const int c0 = 2 * (lane % 4);  // this thread's element-0 query within the block
    const int q0 = m_block * kBlockM + c0;

    // kOverlap: step i - 1's dQ GEMM, queued behind its dV and dK. Issued here, not at the end of
    // step i - 1 (its dS^T barrier was passed there), because ptxas serializes every wgmma (C7514)
    // when a group crosses the loop's back edge and a non-wgmma instruction (the staging) reads its
    // accumulator in the next iteration; dV and dK cross it freely (only wgmmas read theirs in the
    // loop). The runtime `if` costs nothing here: ptxas 13.0 keeps all 32 HGMMAs asynchronous.
    stamp(kTlStepStart, i, cwg == 0 && tid == 0);
    if constexpr (Traits::kOverlap) {
      if (i > 0) issue_dq((step0 + i - 1) % 2);
    }
    // S^T = K Q^T and dP^T = V dO^T, two commit groups; the previous step's dQ is staged between.
    sm90::mbar_wait(sm.q_full(s), parity);
    stamp(kTlQFull, i, cwg == 0 && tid == 0);
    sm90::wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < Traits::kHeadDim / 16; ++kk) {
      const uint64_t off_k = ((kk / 4) * kBlockN * 128 + (kk % 4) * 32) >> 4;
      const uint64_t off_q = ((kk / 4) * kBlockM * 128 + (kk % 4) * 32) >> 4;
      if constexpr (Traits::kKVInRegs) {
        OpS::template rs<0>(st_acc, k_frag[kk], q_kmaj0 + s * kSlot + off_q, kk > 0);
      } else {
        OpS::template ss<0>(st_acc, k_desc + off_k, q_kmaj0 + s * kSlot + off_q, kk > 0);
      }
    }
    sm90::wgmma_commit();
    // kOverlap: step i - 1's dV, dK and dQ groups are still queued ahead of this S^T (and dP^T).
    // Retire them (wait<left>: all but this step's `left` newest groups), then free step i - 1's
    // Q / dO stage, which they read, and stage its dQ. The wait is unconditional (at i = 0 it has
    // nothing to retire). The releases come later than without overlap by one or two GEMM issues:
    // the producer still has about a whole step to load step i + 1 into that stage.
    auto retire_prev = [&](auto left) {
      sm90::wgmma_wait<decltype(left)::value>();
      sm90::fence_regs(dv_acc);
      sm90::fence_regs(dk_acc);
      sm90::fence_regs(dq_acc);
      if (i > 0) {
        // Scaled into registers no wgmma defines, as the end of the step does without overlap.
#pragma unroll
        for (int x = 0; x < Traits::kDqAcc; ++x) dq_prev[x] = dq_acc[x] * p.scale;
        const int s_prev = (step0 + i - 1) % Traits::kStages;
        sm90::mbar_arrive(sm.q_empty(s_prev));
        if (arriver) sm90::mbar_arrive(sm.do_empty(s_prev));
        stage_dq(i - 1);
      }
    };
    if constexpr (!Traits::kOverlap) {
      if (i > 0) stage_dq(i - 1);
    } else if constexpr (!Traits::kOverlapDp) {
      retire_prev(std::integral_constant<int, 1>{});  // S^T of step i may still run
    }
    sm90::mbar_wait(sm.do_full(s), parity);
    sm90::wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < Traits::kHeadDim / 16; ++kk) {
      const uint64_t off_v = ((kk / 4) * kBlockN * 128 + (kk % 4) * 32) >> 4;
      const uint64_t off_do = ((kk / 4) * kBlockM * 128 + (kk % 4) * 32) >> 4;
      if constexpr (Traits::kKVInRegs) {
        OpS::template rs<0>(dpt_acc, v_frag[kk], do_kmaj0 + s * kSlot + off_do, kk > 0);
      } else {
        OpS::template ss<0>(dpt_acc, v_desc + off_v, do_kmaj0 + s * kSlot + off_do, kk > 0);
      }
    }
    sm90::wgmma_commit();
    if constexpr (Traits::kOverlapDp) retire_prev(std::integral_constant<int, 2>{});  // S^T, dP^T may still run
    // Dropout's bytes of the step (dropout.cuh's transposed map) while both GEMMs run: the Philox
    // (4 per thread, ~150 instructions per warp) in the integer pipes beside the S^T GEMM (512
    // tensor clocks at d128) instead of in the chain from the exponentials to the dV GEMM's issue,
    // where it sat first (same SASS count, +7); 8 words held until the marking below: 0 spills at
    // d64 and d128 (64 bytes at d128 while seed and offset were also held across the loop).
    // Seed and offset are re-read every step (L1 hits; device reads under capture): held, ptxas
    // spilled 12 bytes at d128 even with the Philox after the exponentials.
    uint32_t bytes[kMTiles / 2][2];
    if constexpr (Traits::kDropout) {
      const DropoutRng rng(p.dropout, batch, range.head(i), p.heads_q,
                           dropout_stream_lane_t(lane, Traits::kDropoutShuffle ? (lane >> 2) & 1 : 0));
      dropout_bytes_t<kMTiles, Traits::kDropoutShuffle>(rng, m_block * kBlockM, drop_k16, lane, bytes);
    }

    // The stage's per-query floats (LSE * log2 e, delta) of this thread's columns 8 j + c0, + 1.
    auto load_column = [&](float2& v, uint32_t slot, int j) {
      asm volatile("ld.shared.v2.f32 {%0, %1}, [%2];\n" : "=f"(v.x), "=f"(v.y) : "r"(slot + (8 * j + c0) * 4));
    };
    auto load_columns = [&](float2 (&v)[kMTiles], uint32_t slot) {
#pragma unroll
      for (int j = 0; j < kMTiles; ++j) load_column(v[j], slot, j);
    };
    // The LSEs while the GEMMs run, and whether a row of the stage has a huge one (one word). The
    // tall step reads each where it is used: its 32 words held across the waits beside S^T and
    // dP^T (64 + 64) made ptxas spill.
    float2 lse2[kMTiles];
    uint32_t huge;
    asm volatile("ld.shared.u32 %0, [%1];\n" : "=r"(huge) : "r"(sm.huge_slot(s)));
    if constexpr (!Traits::kTall) load_columns(lse2, sm.lse_slot(s));
    sm90::wgmma_wait<1>();
    sm90::fence_regs(st_acc);
    stamp(kTlStDone, i, cwg == 0 && tid == 0);
    if constexpr (Traits::kDkLate) {  // step i - 1's dK (older than this S^T) has retired too
      if (i > 0) sm90::mbar_arrive(sm.q_empty((step0 + i - 1) % Traits::kStages));
    }
    // The score modifiers (kMods only) on S^T, in score_mod.cuh's key-rows layout: this thread's
    // keys key0, key0 + 8 are its rows and its queries q0 + 8 j, + 1 its columns. Each hook reads
    // what it needs from the params inside its feature's branch (no register held across the step).
    auto mod_head = [&] { return range.head(i); };
    auto mod_key0 = [&] { return key0; };
    auto mod_q0 = [&] { return q0; };
    if constexpr (Traits::kModsKind == kModsBias) {
      if (Traits::kBiasTmaLoad && bias_tma) {
        sm90::mbar_wait(sm.bias_full(cwg, b), (i / 2) & 1);  // (b = i % 2: one item a CTA)
      } else {
        cp_async_wait<0>();  // this step's staged bias (the only group in flight)
        __syncwarp();
      }
      Mod::template apply<ScoreLayout::kKeyRows>(p, seq, batch, mod_head, st, mod_key0, mod_q0, step_need(i), bias_tile(b));
      __syncwarp();  // read by every lane before the warp's dS^T rows overwrite it
    } else {
      Mod::template apply<ScoreLayout::kKeyRows>(p, seq, batch, mod_head, st, mod_key0, mod_q0);
    }

    // P^T (probabilities_t), masked to 0 outside the mask.
    probabilities_t<kMTiles>(st, scale_log2, [&](int j) {
      if constexpr (Traits::kTall) load_column(lse2[j], sm.lse_slot(s), j);
      return lse2[j];
    }, huge);
    if (mask.template partial<kBlockM, kBlockN>(m_block, n_block)) apply_mask_t<kMTiles>(st, mask, key0, q0, seq.seqlen_q, 0.f);
    if constexpr (Traits::kDropout) {
      // A dropped P^T is kept negated, as FlashAttention-2's backward does (P >= 0, so the sign
      // bit is the mask, -0 included): dS^T below needs the undropped value and the mask, and the
      // sign frees the 8 words of bytes across the dP^T wait. dV takes Z P^T now and its 1 / keep
      // in the epilogue.
      const uint32_t bound = dropout_keep_bound(p.dropout.threshold_plus1);
      float zpt[1][kMTiles][4];
#pragma unroll
      for (int j = 0; j < kMTiles; ++j) {
#pragma unroll
        for (int x = 0; x < 4; ++x) {
          const bool keep = dropout_keep_t<kMTiles>(bound, bytes, j, x);
          zpt[0][j][x] = keep ? st[0][j][x] : 0.f;
          st[0][j][x] = keep ? st[0][j][x] : -st[0][j][x];
        }
      }
      sm90::accumulator_to_a<Elem, kMTiles>(pt16, zpt);
    } else if constexpr (Traits::kTall) {
      // P^T to this warpgroup's rows of its shared-memory buffer (the dV GEMM's A, below), packed
      // 16 queries at a time as dS^T is below; the warpgroup's four warps then meet (the GEMM
      // reads all 64 rows). The previous step's dV, its only reader, retired at that step's end.
#pragma unroll
      for (int m = 0; m < kMTiles / 2; ++m) {
        uint32_t a[1][4];
        sm90::accumulator_to_a<Elem, 2>(a, *reinterpret_cast<const float(*)[1][2][4]>(&st[0][2 * m][0]));
        store_ds_t(sm.pt, m, a[0]);
      }
      sm90::fence_async_shared();
      sm90::named_sync(kBarPt + cwg, 128);
    } else {
      sm90::accumulator_to_a<Elem, kMTiles>(pt16, st);
    }

    // dV += P^T dO (K steps over the step's queries), issued before dS^T exists.
    stamp(kTlPtDone, i, cwg == 0 && tid == 0);
    sm90::wgmma_fence();
    if constexpr (Traits::kTall) {
      const uint64_t pt_desc = sm90::make_desc(sm.pt + cwg * 64 * 128, 16, 1024);
#pragma unroll
      for (int kk = 0; kk < kBlockM / 16; ++kk)
        OpD::template ss<1>(dv_acc, pt_desc + (((kk / 4) * kBlockN * 128 + (kk % 4) * 32) >> 4),
                            do_nmaj0 + s * kSlot + ((kk * 2048) >> 4), 1);
    } else {
#pragma unroll
      for (int kk = 0; kk < kBlockM / 16; ++kk)
        OpD::template rs<1>(dv_acc, pt16[kk], do_nmaj0 + s * kSlot + ((kk * 2048) >> 4), 1);
    }
    sm90::wgmma_commit();

    // delta is loaded while the dP^T GEMM runs; in the kMods kernel after the modifiers' column sums
    // instead, whose registers the d128 step has only without delta's 16 live (else ptxas spills).
    float2 delta[kMTiles];
    if constexpr (!Traits::kMods && !Traits::kTall) load_columns(delta, sm.delta_slot(s));
    sm90::wgmma_wait<1>();  // dP^T done (dV may still run)
    sm90::fence_regs(dpt_acc);
    stamp(kTlDpDone, i, cwg == 0 && tid == 0);
    if constexpr (Traits::kMods) {
      // The sinks' and slopes' exact delta: column (query) sums of P dP and P |distance|.
      Mod::template row_sums<ScoreLayout::kKeyRows>(p, seq, batch, mod_head, st, dpt, mod_key0, mod_q0);
      load_columns(delta, sm.delta_slot(s));
    }
    // dS^T = P^T (dP^T - delta) (unscaled: dK is scaled in the epilogue, dQ before its staging).

    // Dropout: the forward's O is (Z P / keep) V, so dP is Z (dO V^T) / keep and delta (rowsum(dO O))
    // is unchanged: dS^T = P^T ((Z ? dP^T / keep : 0) - delta), the sm80 backward's form.
    if constexpr (Traits::kDropout) {
      const float rp_keep = p.dropout.rp_keep;
#pragma unroll
      for (int j = 0; j < kMTiles; ++j) {
#pragma unroll
        for (int x = 0; x < 4; ++x) {
          const bool keep = (__float_as_uint(st[0][j][x]) >> 31) == 0u;  // the sign bit set above
          dpt[0][j][x] = fabsf(st[0][j][x]) * ((keep ? dpt[0][j][x] * rp_keep : 0.f) - (x % 2 ? delta[j].y : delta[j].x));
        }
      }
    } else {
#pragma unroll
      for (int j = 0; j < kMTiles; ++j) {
        if constexpr (Traits::kTall) load_column(delta[j], sm.delta_slot(s), j);
#pragma unroll
        for (int x = 0; x < 4; ++x) dpt[0][j][x] = st[0][j][x] * (dpt[0][j][x] - (x % 2 ? delta[j].y : delta[j].x));
      }
    }
    if constexpr (Traits::kMods) {
      // ALiBi's slope gradient, softcap's factor 1 - tanh^2 (recovered from P^T and the column's
      // LSE, loaded again: held from the exponentials instead, the d128 kernel spills 8 bytes).
      load_columns(lse2, sm.lse_slot(s));
      Mod::template grads<ScoreLayout::kKeyRows>(p, seq, batch, mod_head, dpt, st, lse2, mod_key0, mod_q0);
    }
    sm90::accumulator_to_a<Elem, kMTiles>(dst16, dpt);

    // dK += dS^T Q (kDkLate: after the dQ GEMM, below).
    auto issue_dk = [&] {
      sm90::wgmma_fence();
      if constexpr (Traits::kDkLate) {
        // A = this warpgroup's 64 rows of the dS^T buffer (keys x queries, K-major, 128-byte
        // swizzled rows, written by the stmatrix below and ordered by the dS^T barrier), so the
        // dS^T fragments die at the stores instead of living until dK retires in step i + 1
        // (the register form serialized every wgmma: C7512, 233 live at 256).
        // (kDsQueryRows: the warpgroup's half of dS, its 64 keys contiguous in each query row: an
        // M-major A, 16 query rows a k step.)
        if constexpr (Traits::kDsQueryRows) {
          const uint64_t dsm_desc = sm90::make_desc(sm.ds_buf(b) + cwg * kBlockM * 128, kBlockM * 128, 1024);
#pragma unroll
          for (int kk = 0; kk < kBlockM / 16; ++kk)
            OpD::template ss<1, 1>(dk_acc, dsm_desc + ((kk * 2048) >> 4), q_nmaj0 + s * kSlot + ((kk * 2048) >> 4), 1);
        } else {
          const uint64_t dsk_desc = sm90::make_desc(sm.ds_buf(b) + cwg * 64 * 128, 16, 1024);
#pragma unroll
          for (int kk = 0; kk < kBlockM / 16; ++kk)  // 16 queries a k step: column block kk / 4
            OpD::template ss<1>(dk_acc, dsk_desc + (((kk / 4) * kBlockN * 128 + (kk % 4) * 32) >> 4),
                                q_nmaj0 + s * kSlot + ((kk * 2048) >> 4), 1);
        }
      } else {
#pragma unroll
        for (int kk = 0; kk < kBlockM / 16; ++kk) OpD::template rs<1>(dk_acc, dst16[kk], q_nmaj0 + s * kSlot + ((kk * 2048) >> 4), 1);
      }
      sm90::wgmma_commit();
    };
    if constexpr (!Traits::kDkLate) issue_dk();

    // dS^T to shared memory for dQ = dS K (store_ds_t: one stmatrix.x4 per 16 queries, a quarter
    // of the 32-bit stores it replaces; ncu, session 17: cuDNN's backward stores dS so too).
#pragma unroll
    for (int m = 0; m < kMTiles / 2; ++m) {
      if constexpr (Traits::kDsQueryRows) {
        store_ds_q(sm.ds_buf(b), m, dst16[m]);
      } else {
        store_ds_t(sm.ds_buf(b), m, dst16[m]);
      }
    }
    sm90::fence_async_shared();
    if constexpr (Traits::kModsKind == kModsBias) {  // attn_mask's gradient: scattered 16-bit stores where not aligned
      if (!dbias_rows) Mod::bias_grad_t(p, seq, batch, mod_head, dst16, key0, q0);
    }
    if constexpr (Traits::kDsQueryRows) {  // step i - 1's d_bias store has read its half (buffer (i + 1) % 2)
      if (dbias_rows && tid == 0) sm90::tma_store_wait_read();
    }
    sm90::named_sync(kBarDs, 256);  // both halves of dS^T written
    stamp(kTlDsStored, i, cwg == 0 && tid == 0);
    if constexpr (Traits::kModsKind == kModsBias) {
      if (i + 1 < range.count()) stage_bias(i + 1);  // into buffer (i + 1) % 2: free since this barrier
    }

    if constexpr (!Traits::kOverlap) {  // (kOverlap: dQ issued and retired in step i + 1, or below)
      // dQ[:, 64 cwg .. 64 cwg + 63] (tall: dQ[64 cwg .. 64 cwg + 63, :]) = dS K over all 128 keys
      // (M-major A, N-major B).
      sm90::wgmma_fence();
      if constexpr (Traits::kDsQueryRows) {  // A = dS, K-major: keys 16 kk .. in half kk / 4
        const uint64_t ds_kmaj0 = sm90::make_desc(sm.ds_buf(b), 16, 1024);
#pragma unroll
        for (int kk = 0; kk < kBlockN / 16; ++kk)
          OpQ::template ss<1, 0>(dq_acc, ds_kmaj0 + (((kk / 4) * kBlockM * 128 + (kk % 4) * 32) >> 4),
                                 kq_desc + ((kk * 2048) >> 4), kk > 0);
      } else {
#pragma unroll
        for (int kk = 0; kk < kBlockN / 16; ++kk)
          OpQ::template ss<1, 1>(dq_acc, dq_a_desc + b * kDsBuf + ((kk * 2048) >> 4), kq_desc + ((kk * 2048) >> 4),
                                 kk > 0);
      }
      sm90::wgmma_commit();
      if constexpr (Traits::kModsKind == kModsBias) {  // while the dQ GEMM runs (it reads the same buffer)
        if (dbias_rows) store_bias_grad(i, b);
      }
      if constexpr (Traits::kDkLate) {
        issue_dk();
        sm90::wgmma_wait<1>();  // dV and dQ done; dK may still run (it reads the Q stage only)
        sm90::fence_regs(dv_acc);
      } else {
        sm90::wgmma_wait<0>();  // dK, dV and dQ done: the Q / dO slot is free
        sm90::fence_regs(dv_acc);
        sm90::fence_regs(dk_acc);
      }
      stamp(kTlGemmsDone, i, cwg == 0 && tid == 0);
      // dQ is scaled here (the postprocess then runs with scale 1): the multiply redefines the
      // registers, which the staging reads after the next step's S^T GEMM is issued; read straight
      // from the wgmma, ptxas injects a wait for that GEMM there (C7517) and the overlap is lost.
#pragma unroll
      for (int x = 0; x < Traits::kDqAcc; ++x) dq_prev[x] = dq_acc[x] * p.scale;
      // Every consumer thread frees the Q stage (it read the stage's LSE and delta), lane 0 of each
      // warp the dO stage (read by the warpgroup's wgmmas only). kDkLate: the Q stage once dK has
      // retired (the next step's first wait, or after the loop).
      if constexpr (!Traits::kDkLate) sm90::mbar_arrive(sm.q_empty(s));
      if (arriver) sm90::mbar_arrive(sm.do_empty(s));
    }
  }
  if constexpr (Traits::kOverlap) {
    // The last step's dQ GEMM; its dV, dK and dQ retired, its stage released (nobody waits for it
    // any more: released as every other step's) and its dQ staged.
    if (range.count() > 0) issue_dq((step0 + range.count() - 1) % 2);
    sm90::wgmma_wait<0>();
    sm90::fence_regs(dv_acc);
    sm90::fence_regs(dk_acc);
    sm90::fence_regs(dq_acc);
    if (range.count() > 0) {
      const int last = range.count() - 1;
#pragma unroll
      for (int x = 0; x < Traits::kDqAcc; ++x) dq_prev[x] = dq_acc[x] * p.scale;
      sm90::mbar_arrive(sm.q_empty((step0 + last) % Traits::kStages));
      if (arriver) sm90::mbar_arrive(sm.do_empty((step0 + last) % Traits::kStages));
      stage_dq(last);
    }
  } else {
    if (range.count() > 0) stage_dq(range.count() - 1);
  }

  sm90::wgmma_wait<0>();  // (every group is done here, kDkLate's last dK included; this tells the compiler so)
  if constexpr (Traits::kDsQueryRows) {  // the last d_bias store has read its half before the CTA may exit
    if (dbias_rows && tid == 0) sm90::tma_store_wait_read();
  }
  if constexpr (Traits::kDkLate) {
    if (range.count() > 0) sm90::mbar_arrive(sm.q_empty((step0 + range.count() - 1) % Traits::kStages));
  }
  // (kGrouped) K and V are read: the load thread may fetch the next item's while the epilogue
  // stores this one's dK and dV from registers. Every thread arrives (after its own kv_full wait:
  // an item without steps has no wgmma to hold a lagging thread, which must not meet kv_full's
  // next phase before it has seen this one).
  if constexpr (Traits::kGrouped) sm90::mbar_arrive(sm.kv_empty());
  sm90::fence_regs(dv_acc);
  sm90::fence_regs(dk_acc);

  // ---- epilogue: dK * scale, dV; plain stores of this warpgroup's 64 keys (rows past Sk skipped) --
  Elem* dk = static_cast<Elem*>(p.dk) + batch * p.dk_batch_stride + kv_head * p.dk_head_stride +
             seq.k_row_offset * p.dk_row_stride;
  Elem* dv = static_cast<Elem*>(p.dv) + batch * p.dv_batch_stride + kv_head * p.dv_head_stride +
             seq.k_row_offset * p.dv_row_stride;
  auto& dk4 = *reinterpret_cast<float(*)[1][kDTiles][4]>(dk_acc);
  auto& dv4 = *reinterpret_cast<float(*)[1][kDTiles][4]>(dv_acc);
  // Dropout: dV summed Z P^T dO; the kept P's 1 / keep once here (constant 1 otherwise: folded away).
  const float dv_scale = Traits::kDropout ? p.dropout.rp_keep : 1.f;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int key = key0 + 8 * h;
    if (key >= seq.seqlen_k) continue;
#pragma unroll
    for (int j = 0; j < kDTiles; ++j) {
      const int col = 8 * j + 2 * (lane % 4);
      if (col < p.head_dim_qk)
        *reinterpret_cast<uint32_t*>(dk + int64_t(key) * p.dk_row_stride + col) =
            ElemTraits<Elem>::pack(dk4[0][j][2 * h] * p.scale, dk4[0][j][2 * h + 1] * p.scale);
      if (col < p.head_dim_v)
        *reinterpret_cast<uint32_t*>(dv + int64_t(key) * p.dv_row_stride + col) =
            ElemTraits<Elem>::pack(dv4[0][j][2 * h] * dv_scale, dv4[0][j][2 * h + 1] * dv_scale);
    }
  }
}

// The d256 tile's dQ reductions: this thread's dQ rows (warp * 16 + lane / 4 + 8 h, those below
// rows_left) x its columns (col0 + 8 j + 2 (lane % 4), + 1) of src, times mult, added to dq_accum
// (head_dq, at absolute row row0 of the head): DqAccumLayout puts the four floats of a pair of n8
// tiles (j even) together, one red.global.add.v4.f32 each.
template <int kTiles>
__device__ __forceinline__ void red_dq_tiles(float* head_dq, int64_t row0, int rows_left, int64_t row_stride, int col0,
                                             int warp, int lane, const float (&src)[1][kTiles][4], float mult) {
  static_assert(kTiles % 2 == 0, "whole pairs of n8 tiles");
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int row = warp * 16 + lane / 4 + 8 * h;
    if (row >= rows_left) continue;
    float* dst = head_dq + (row0 + row) * row_stride;
#pragma unroll
    for (int j = 0; j < kTiles; j += 2) {
      const int col = col0 + 8 * j + 2 * (lane % 4);
      red_add_f32x4(dst + DqAccumLayout::position(row0 + row, col), src[0][j][2 * h] * mult, src[0][j][2 * h + 1] * mult,
                    src[0][j + 1][2 * h] * mult, src[0][j + 1][2 * h + 1] * mult);
    }
  }
}

// ---- head dim 256: the 64-key tile (BwdTraitsSm90::kWide) --------------------------------------
// One CTA per 64 keys; both consumer warpgroups hold all 64 key rows of S^T and dP^T over their
// half of the step's 64 queries (cwg 0: queries 0-31, cwg 1: 32-63; wgmma M = 64 keys, N = 32),
// write their P^T and dS^T columns to shared memory, meet at one barrier, and then compute dV,
// dK (keys x their 128 columns, A = P^T / dS^T from shared memory) and dQ (queries x their 128
// columns, A = dS^T as M-major) over all 64 queries / keys. Per step and warpgroup: S^T and dP^T
// 16 k steps of K = 16 (N = 32), dV, dK, dQ 4 k steps (N = 128): 5 x 64 x 64 x 256 MACs a CTA,
// the d128 step's tensor work. dQ (scaled) goes straight from the retired accumulator to
// dq_accum with 16 red.global.add.v4.f32 a thread, in DqAccumLayout's order (the postprocess is
// the other kernels'), while the step's dK GEMM still runs. dK's GEMM retires in the next step,
// at the S^T wait (the d128 kernel's late dK), which frees the Q stage. The reductions bound it:
// 64 KB a step, 2.3 TB/s of L2 reductions at 8k (ncu: L2 at 79%); without them it ran 1.66-1.93x
// (session 31, H200). 64 keys is what the register file allows (dK, dV: 64 keys x 256 fp32).
//
// Dev-only switches of the d256 tile (A/B builds; kernel_notes_bwd_sm90.md, "The d256 tile, built"):
// FLASHSDPA_SM90_BWD256_DQ_RED=0 drops the dQ reductions: timing only (dQ is then wrong), the
// tile's ceiling without them (session 31: 1.66-1.93x). Two losing variants are in the notes, not
// here: dV issued after a barrier on P^T alone (0.96x), the reductions spread over the next step
// in 4 parts (1.00-1.01x).
#ifndef FLASHSDPA_SM90_BWD256_DQ_RED
#define FLASHSDPA_SM90_BWD256_DQ_RED 1
#endif
// Head dim 512 (kSplit): the same step on each CTA of a pair over its 256 columns (`rank`, its
// %cluster_ctarank), with S^T and dP^T completed by the other CTA's partials (exchange below) and
// one P^T / dS^T buffer (kBarFree orders its stores).
template <typename Traits>
__device__ __forceinline__ void consume_wide(const BwdSm90Args& args, const SmemLayout<Traits>& sm, int n_block,
                                             int kv_head, int batch, const SeqlenInfo& seq, const BlockMask& mask,
                                             const StepRange& range, int cwg, int rank, int step0 = 0, int item = 0) {
  using Elem = typename Traits::Elem;
  constexpr int kBlockM = Traits::kBlockM, kBlockN = Traits::kBlockN;
  static_assert(kBlockM == 64 && kBlockN == 64, "one 128-byte column block of P^T / dS^T: 64 queries");
  constexpr int kQueries = kBlockM / 2;         // this warpgroup's queries in S^T / dP^T
  constexpr int kMTiles = kQueries / 8;         // their n8 column groups
  constexpr int kCols = Traits::kCtaDim / 2;    // this warpgroup's columns of dV, dK and dQ (of its CTA's)
  constexpr int kAcc = kBlockN * kCols / 128;   // fp32 a thread of each of dV, dK, dQ (64 keys / queries)
  using OpS = sm90::WgmmaOp<Elem, kQueries>;
  using OpG = sm90::WgmmaOp<Elem, kCols>;
  const AttnBwdParams& p = args.p;
  const int tid = threadIdx.x % 128;
  const int warp = tid / 32, lane = tid % 32;
  const int key0 = n_block * kBlockN + warp * 16 + lane / 4;  // fragment row g: keys of S^T, dV, dK; queries of dQ
  const int c0 = 2 * (lane % 4);
  const int col_base = rank * Traits::kCtaDim + kCols * cwg;  // the head's column of this warpgroup's first
  const bool arriver = lane == 0;

  float dv_acc[kAcc], dk_acc[kAcc], dq_acc[kAcc];
#pragma unroll
  for (int x = 0; x < kAcc; ++x) dv_acc[x] = dk_acc[x] = 0.f;
  float st_acc[kQueries / 2], dpt_acc[kQueries / 2];
  auto& st = *reinterpret_cast<float(*)[1][kMTiles][4]>(st_acc);
  auto& dpt = *reinterpret_cast<float(*)[1][kMTiles][4]>(dpt_acc);
  auto& dq = *reinterpret_cast<float(*)[1][kCols / 8][4]>(dq_acc);
  uint32_t dst16[kMTiles / 2][4];

  // K and V as the K-major A of S^T / dP^T (all 64 rows); this warpgroup's 32 query rows of the Q
  // and dO stages as their K-major B (32 rows = 4 swizzle atoms: the offset keeps the phase);
  // its columns [kCols cwg, + kCols) = column blocks 2 cwg, 2 cwg + 1 of Q, dO (N-major B of dK,
  // dV) and K (N-major B of dQ).
  const uint64_t k_desc = sm90::make_desc(sm.k, 16, 1024);
  const uint64_t v_desc = sm90::make_desc(sm.v, 16, 1024);
  const uint64_t q_kmaj0 = sm90::make_desc(sm.q + cwg * kQueries * 128, 16, 1024);
  const uint64_t do_kmaj0 = sm90::make_desc(sm.dout + cwg * kQueries * 128, 16, 1024);
  const uint64_t q_nmaj0 = sm90::make_desc(sm.q + cwg * (kCols / 64) * kBlockM * 128, kBlockM * 128, 1024);
  const uint64_t do_nmaj0 = sm90::make_desc(sm.dout + cwg * (kCols / 64) * kBlockM * 128, kBlockM * 128, 1024);
  const uint64_t kq_desc = sm90::make_desc(sm.k + cwg * (kCols / 64) * kBlockN * 128, kBlockN * 128, 1024);
  constexpr uint64_t kSlot = Traits::kQBytes >> 4;
  const float scale_log2 = p.scale_log2;

  // 16 of this warpgroup's queries (m: 0, 1) of a keys x queries tile (P^T, dS^T) to its buffer:
  // one stmatrix.x4, matrix q = (query chunk 2 (kMTiles / 2 cwg + m) + q / 2, key rows 8 (q % 2)
  // ..) from frag[q] (the A layout), in 128-byte swizzled key rows (64 queries: 8 chunks).
  auto store_t = [&](uint32_t base, int m, const auto& frag) {
    const int mq = lane / 8, row = warp * 16 + 8 * (mq % 2) + lane % 8;  // row % 8 == lane % 8
    const int chunk = 2 * ((kMTiles / 2) * cwg + m) + mq / 2;
    stmatrix_x4(base + row * 128 + ((chunk ^ (lane % 8)) << 4), frag[0], frag[1], frag[2], frag[3]);
  };
  // Step `step`'s dQ tile, scaled, into dq_accum (red_dq_tiles: 16 red.v4 a thread; rows past the
  // sequence skipped: dS there is 0, as P^T was).
  auto add_dq = [&](int step) {
    if (!FLASHSDPA_SM90_BWD256_DQ_RED) return;
    float* head_dq = p.dq_accum + batch * p.dq_accum_batch_stride + range.head(step) * p.dq_accum_head_stride;
    red_dq_tiles(head_dq, seq.q_row_offset + int64_t(range.m_block(step)) * kBlockM,
                 seq.seqlen_q - range.m_block(step) * kBlockM, p.dq_accum_row_stride, col_base, warp, lane, dq,
                 p.scale);
  };
  // S^T = K Q^T or dP^T = V dO^T over this warpgroup's queries, one commit group of 16 k steps
  // (column block kk / 4, 32 bytes into its swizzled rows per k step).
  auto score_gemm = [&](float (&acc)[kQueries / 2], uint64_t a_desc, uint64_t b_desc) {
    sm90::wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < Traits::kCtaDim / 16; ++kk) {
      const uint64_t off_a = ((kk / 4) * kBlockN * 128 + (kk % 4) * 32) >> 4;
      const uint64_t off_b = ((kk / 4) * kBlockM * 128 + (kk % 4) * 32) >> 4;
      OpS::template ss<0>(acc, a_desc + off_a, b_desc + off_b, kk > 0);
    }
    sm90::wgmma_commit();
  };
  // A stage's per-query floats (LSE * log2 e, delta) of this thread's columns 8 j + c0, + 1.
  auto load_columns = [&](float2 (&v)[kMTiles], uint32_t slot) {
    const uint32_t col_bytes = (cwg * kQueries + c0) * 4;
#pragma unroll
    for (int j = 0; j < kMTiles; ++j)
      asm volatile("ld.shared.v2.f32 {%0, %1}, [%2];\n" : "=f"(v[j].x), "=f"(v[j].y) : "r"(slot + col_bytes + 32 * j));
  };

  // d512: this warpgroup's partial S^T or dP^T (16 floats a thread) traded with the same warpgroup
  // of the other CTA and the other's added (ptx_sm90.cuh's PairExchange; exchange e on the slot:
  // step i's S^T is 2 i, its dP^T 2 i + 1).
  sm90::PairExchange xchg;
  if constexpr (Traits::kSplit) {
    xchg = sm90::PairExchange(sm.x_slot(cwg), sm.x_full(cwg), sm.x_empty(cwg), rank ^ 1, tid);
  }
  auto exchange = [&](float (&acc)[kQueries / 2], int e) {
    if constexpr (Traits::kSplit) xchg.add<kQueries / 8>(acc, e, kBarSlotRead + cwg, tid);
  };

  sm90::mbar_wait(sm.kv_full(), item & 1);
  for (int i = 0; i < range.count(); ++i) {
    const int s = (step0 + i) % Traits::kStages;  // (the ring and the buffers count the CTA's steps)
    const uint32_t parity = ((step0 + i) / Traits::kStages) & 1;
    const int b = Traits::kDsBufs == 2 ? (step0 + i) % 2 : 0;  // P^T / dS^T buffer
    const int m_block = range.m_block(i);
    const int q0 = m_block * kBlockM + cwg * kQueries + c0;  // this thread's element-0 query

    // S^T and dP^T: two commit groups.
    sm90::mbar_wait(sm.q_full(s), parity);
    score_gemm(st_acc, k_desc, q_kmaj0 + s * kSlot);
    sm90::mbar_wait(sm.do_full(s), parity);
    score_gemm(dpt_acc, v_desc, do_kmaj0 + s * kSlot);

    // The LSEs while the GEMMs run, and whether a row of the stage has a huge one (one word).
    float2 lse2[kMTiles], delta[kMTiles];
    uint32_t huge;
    asm volatile("ld.shared.u32 %0, [%1];\n" : "=r"(huge) : "r"(sm.huge_slot(s)));
    load_columns(lse2, sm.lse_slot(s));
    sm90::wgmma_wait<1>();  // S^T done, and step i - 1's dK (older): its Q stage is free
    sm90::fence_regs(st_acc);
    if (i > 0) sm90::mbar_arrive(sm.q_empty((step0 + i - 1) % Traits::kStages));
    // d512: this warpgroup's GEMMs of step i - 1 have all retired (dV and dQ at its end, dK now)
    if constexpr (Traits::kSplit) sm90::named_arrive(kBarFree + cwg, 256);
    exchange(st_acc, 2 * i);  // (d512: under dP^T's GEMM)

    // P^T (probabilities_t), masked to 0.
    probabilities_t<kMTiles>(st, scale_log2, [&](int j) { return lse2[j]; }, huge);
    if (mask.template partial<kBlockM, kBlockN>(m_block, n_block)) apply_mask_t<kMTiles>(st, mask, key0, q0, seq.seqlen_q, 0.f);
    // P^T (16-bit) to buffer b, this warpgroup's queries; the buffer's last readers (step i - 2's
    // dV) retired before either warpgroup passed step i - 1's barrier. d512's one buffer: step
    // i - 1's dV, dQ and dK of the other warpgroup read it last.
    if constexpr (Traits::kSplit) sm90::named_sync(kBarFree + (cwg ^ 1), 256);
#pragma unroll
    for (int m = 0; m < kMTiles / 2; ++m) {
      uint32_t a[1][4];
      sm90::accumulator_to_a<Elem, 2>(a, *reinterpret_cast<const float(*)[1][2][4]>(&st[0][2 * m][0]));
      store_t(sm.pt_buf(b), m, a[0]);
    }
    load_columns(delta, sm.delta_slot(s));
    sm90::wgmma_wait<0>();  // dP^T done
    sm90::fence_regs(dpt_acc);
    exchange(dpt_acc, 2 * i + 1);
    // dS^T = P^T (dP^T - delta), unscaled (dK is scaled in the epilogue, dQ at its reduction).
#pragma unroll
    for (int j = 0; j < kMTiles; ++j) {
#pragma unroll
      for (int x = 0; x < 4; ++x) dpt[0][j][x] = st[0][j][x] * (dpt[0][j][x] - (x % 2 ? delta[j].y : delta[j].x));
    }
    sm90::accumulator_to_a<Elem, kMTiles>(dst16, dpt);
#pragma unroll
    for (int m = 0; m < kMTiles / 2; ++m) store_t(sm.ds_buf(b), m, dst16[m]);
    sm90::fence_async_shared();
    sm90::named_sync(kBarDs, 256);  // both warpgroups' P^T and dS^T columns written

    // dV += P^T dO and dQ = dS K (one group), then dK += dS^T Q (retired in the next step).
    const uint64_t pt_desc = sm90::make_desc(sm.pt_buf(b), 16, 1024);
    const uint64_t ds_kmaj = sm90::make_desc(sm.ds_buf(b), 16, 1024);
    const uint64_t ds_mmaj = sm90::make_desc(sm.ds_buf(b), kBlockN * 128, 1024);
    sm90::wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kBlockM / 16; ++kk)
      OpG::template ss<1>(dv_acc, pt_desc + ((kk * 32) >> 4), do_nmaj0 + s * kSlot + ((kk * 2048) >> 4), 1);
#pragma unroll
    for (int kk = 0; kk < kBlockN / 16; ++kk)
      OpG::template ss<1, 1>(dq_acc, ds_mmaj + ((kk * 2048) >> 4), kq_desc + ((kk * 2048) >> 4), kk > 0);
    sm90::wgmma_commit();
#pragma unroll
    for (int kk = 0; kk < kBlockM / 16; ++kk)
      OpG::template ss<1>(dk_acc, ds_kmaj + ((kk * 32) >> 4), q_nmaj0 + s * kSlot + ((kk * 2048) >> 4), 1);
    sm90::wgmma_commit();
    sm90::wgmma_wait<1>();  // dV and dQ done (dK may still run: it reads the Q stage and dS^T only)
    sm90::fence_regs(dv_acc);
    sm90::fence_regs(dq_acc);
    if (arriver) sm90::mbar_arrive(sm.do_empty(s));
    add_dq(i);
  }
  sm90::wgmma_wait<0>();  // the last dK
  if (range.count() > 0) sm90::mbar_arrive(sm.q_empty((step0 + range.count() - 1) % Traits::kStages));
  if constexpr (Traits::kGrouped) sm90::mbar_arrive(sm.kv_empty());  // (as consume's: K / V read)
  sm90::fence_regs(dv_acc);
  sm90::fence_regs(dk_acc);

  // ---- epilogue: dK * scale, dV; this warpgroup's columns of the 64 keys (rows past Sk skipped) ---
  Elem* dk = static_cast<Elem*>(p.dk) + batch * p.dk_batch_stride + kv_head * p.dk_head_stride +
             seq.k_row_offset * p.dk_row_stride;
  Elem* dv = static_cast<Elem*>(p.dv) + batch * p.dv_batch_stride + kv_head * p.dv_head_stride +
             seq.k_row_offset * p.dv_row_stride;
  auto& dk4 = *reinterpret_cast<float(*)[1][kCols / 8][4]>(dk_acc);
  auto& dv4 = *reinterpret_cast<float(*)[1][kCols / 8][4]>(dv_acc);
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int key = key0 + 8 * h;
    if (key >= seq.seqlen_k) continue;
#pragma unroll
    for (int j = 0; j < kCols / 8; ++j) {
      const int col = col_base + 8 * j + c0;
      if (col < p.head_dim_qk)
        *reinterpret_cast<uint32_t*>(dk + int64_t(key) * p.dk_row_stride + col) =
            ElemTraits<Elem>::pack(dk4[0][j][2 * h] * p.scale, dk4[0][j][2 * h + 1] * p.scale);
      if (col < p.head_dim_v)
        *reinterpret_cast<uint32_t*>(dv + int64_t(key) * p.dv_row_stride + col) =
            ElemTraits<Elem>::pack(dv4[0][j][2 * h], dv4[0][j][2 * h + 1]);
    }
  }
}

// (kGrouped) The CTA's items [blockIdx.x k, + k) in order (k = args.group), each decoded by the role that calls
// this (no hand-over between roles), with the CTA's steps before it (step0: the ring's count).
// Plain kernels only (no bias narrowing of the range).
template <typename Traits, typename Body>
__device__ __forceinline__ void for_each_item(const AttnBwdParams& p, int group, Body&& body) {
  int step0 = 0;
  for (int k = 0; k < group; ++k) {
    // Only k and step0 live across items: everything else is decoded from the params again (the
    // producer's roles have 24 registers; holding the grid order across items spilled 132 bytes
    // at d128), and the empty asm keeps ptxas from hoisting what it decodes out of the loop.
    int kk = k;
    asm volatile("" : "+r"(kk));
    const BwdGridOrder order(p, Traits::kBlockN, !Traits::kWide, kWaveGroup<Traits>);
    const int64_t t = int64_t(blockIdx.x) * group + kk;
    if (t >= int64_t(order.n_blocks) * order.heads_batches) break;
    int n_block, kv_head, batch;
    order.decode(t, n_block, kv_head, batch);
    const SeqlenInfo seq(p, batch);
    const BlockMask mask(seq, p.mask);
    const int heads_per_kv = p.heads_q / p.heads_kv;
    const StepRange range{kv_head * heads_per_kv, heads_per_kv, mask.template m_block_min<Traits::kBlockM, Traits::kBlockN>(n_block),
                          mask.template m_block_max<Traits::kBlockM, Traits::kBlockN>(n_block)};
    body(kk, step0, n_block, kv_head, batch, seq, mask, range);
    step0 += range.count();
  }
}

}  // namespace bwd_sm90

template <typename Traits>
__global__ void __launch_bounds__(Traits::kThreads, 1) flashsdpa_bwd_sm90_kernel(const __grid_constant__ BwdSm90Args args) {
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ == 900) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ __align__(128) char fwd_smem[];  // the family's one dynamic shared-memory name
  if constexpr (Traits::kSmemSlack == 0) {
    if ((smem_u32(fwd_smem) & 1023u) != 0) __trap();  // (kSmemSlack: never seen; a test would stop here)
  }
  const bwd_sm90::SmemLayout<Traits> sm((smem_u32(fwd_smem) + 1023u) & ~1023u);
  const AttnBwdParams& p = args.p;
  const bwd_sm90::BwdGridOrder order(p, Traits::kBlockN, !Traits::kWide, bwd_sm90::kWaveGroup<Traits>);
  int n_block, kv_head, batch;
  // d512: a cluster's two CTAs are consecutive in x and take the same key block, one column half each
  const int rank = Traits::kSplit ? sm90::cluster_rank() : 0;
  order.decode(blockIdx.x / (Traits::kSplit ? 2 : 1), n_block, kv_head, batch);
  const SeqlenInfo seq(p, batch);
  const BlockMask mask(seq, p.mask);
  const int group = p.heads_q / p.heads_kv;
  int m_min = mask.template m_block_min<Traits::kBlockM, Traits::kBlockN>(n_block);
  int m_max = mask.template m_block_max<Traits::kBlockM, Traits::kBlockN>(n_block);
  // Query blocks the bias hides from this key block for the whole head group, at either end, are
  // not steps at all (bias_cells.cuh): every role walks this one range. With skipped tiles the host
  // turns first store off and deterministic mode drops the summary (api.cpp), whose protocols count
  // every key block BlockMask lists for a query block.
  if constexpr (Traits::kModsKind == kModsBias)
    narrow_queries<Traits::kBlockM, Traits::kBlockN>(p.mods, batch, kv_head * group, group, seq.seqlen_q, n_block, m_min,
                                                     m_max);
  const bwd_sm90::StepRange range{kv_head * group, group, m_min, m_max};

  if (threadIdx.x == 0) {
    sm90::mbar_init(sm.kv_full(), 1);
#pragma unroll
    for (int s = 0; s < Traits::kStages; ++s) {
      sm90::mbar_init(sm.q_full(s), 1 + 32);  // the TMA thread's arrive + tx, the row-stats warp
      sm90::mbar_init(sm.do_full(s), 1);
      sm90::mbar_init(sm.q_empty(s), 128 * Traits::kConsumerWGs);
      sm90::mbar_init(sm.do_empty(s), 4 * Traits::kConsumerWGs);
    }
#pragma unroll
    for (int b = 0; b < Traits::kDqBufs; ++b) {
      sm90::mbar_init(sm.dq_full(b), 128 * Traits::kConsumerWGs);
      sm90::mbar_init(sm.dq_empty(b), 1);
    }
    if constexpr (Traits::kGrouped) sm90::mbar_init(sm.kv_empty(), 128 * Traits::kConsumerWGs);
    if constexpr (Traits::kBiasTmaLoad) {
      for (int b = 0; b < 2; ++b)
        for (int w = 0; w < Traits::kConsumerWGs; ++w) sm90::mbar_init(sm.bias_full(w, b), 1);  // thread 0 of w (+ tx)
    }
    if constexpr (Traits::kSplit) {
      for (int w = 0; w < Traits::kConsumerWGs; ++w) {
        sm90::mbar_init(sm.x_full(w), 1);   // this CTA's thread 0 of warpgroup w, + 8 KB of st.async
        sm90::mbar_init(sm.x_empty(w), 1);  // the other CTA's thread 0 of warpgroup w
      }
    }
    sm90::fence_mbar_init();
  }
  __syncthreads();
  if constexpr (Traits::kSplit) sm90::cluster_sync();  // both CTAs' barriers exist before any remote arrival

  const int warpgroup = threadIdx.x / 128;
  if constexpr (Traits::kGrouped) {  // grouped items (the plain d64 tall and d256 kernels; d128 as a dev A/B)
    using bwd_sm90::StepRange;
    if (warpgroup == 0) {
      sm90::setmaxnreg_dec<Traits::kProducerRegs>();
      const int warp = threadIdx.x / 32;
      const int role = warp == bwd_sm90::kWarpLoad || warp == bwd_sm90::kWarpDq ? (threadIdx.x % 32 == 0 ? warp : -1)
                                                                                : warp;
      if (role == bwd_sm90::kWarpLoad || role == bwd_sm90::kWarpDq || role == bwd_sm90::kWarpRowStats) {
        // One item loop for the three roles, the role chosen inside it: at d64's 56 registers 0
        // spills (ptxas 13.0; at 24, d128: 92 bytes, a loop in each role's branch more, the load
        // thread alone 4: the roles' common state across the branch does not fit there).
        bwd_sm90::for_each_item<Traits>(p, args.group, [&](int k, int step0, int nb, int kh, int b, const SeqlenInfo& sq,
                                               const BlockMask& m, const StepRange& r) {
          if (role == bwd_sm90::kWarpLoad) {
            bwd_sm90::produce<Traits>(args, sm, nb, kh, b, r, 0, step0, k);
          } else if (role == bwd_sm90::kWarpDq) {
            if constexpr (!Traits::kWide) {  // (d256 adds dQ from the consumers' registers)
              const bwd_sm90::BwdGridOrder o(p, Traits::kBlockN, true);  // (turns only)
              bwd_sm90::write_dq<Traits>(p, sm, b, sq, m, r, o, nb, step0);
            }
          } else {
            bwd_sm90::load_row_stats<Traits>(p, sm, b, sq, r, threadIdx.x % 32, step0);
          }
        });
      }
    } else {
      sm90::setmaxnreg_inc<Traits::kConsumerRegs>();
      grid_dependency_wait();
      const int cwg = sm90::consumer_warpgroup<Traits::kUniformWg>(warpgroup);
      bwd_sm90::for_each_item<Traits>(p, args.group, [&](int k, int step0, int nb, int kh, int b, const SeqlenInfo& sq,
                                                    const BlockMask& m, const StepRange& r) {
        if constexpr (Traits::kWide) {
          bwd_sm90::consume_wide<Traits>(args, sm, nb, kh, b, sq, m, r, cwg, 0, step0, k);
        } else {
          bwd_sm90::consume<Traits>(args, sm, nb, kh, b, sq, m, r, cwg, step0, k);
        }
      });
    }
    return;
  }
  if (warpgroup == 0) {
    sm90::setmaxnreg_dec<Traits::kProducerRegs>();
    const int warp = threadIdx.x / 32;
    if (warp == bwd_sm90::kWarpLoad && threadIdx.x % 32 == 0) {
      bwd_sm90::produce<Traits>(args, sm, n_block, kv_head, batch, range, rank * Traits::kCtaDim);
    } else if (warp == bwd_sm90::kWarpDq && threadIdx.x % 32 == 0) {
      if constexpr (!Traits::kWide) bwd_sm90::write_dq<Traits>(p, sm, batch, seq, mask, range, order, n_block);
    } else if (warp == bwd_sm90::kWarpRowStats) {
      bwd_sm90::load_row_stats<Traits>(p, sm, batch, seq, range, threadIdx.x % 32);
    }
  } else {
    sm90::setmaxnreg_inc<Traits::kConsumerRegs>();
    grid_dependency_wait();  // (the kMods kernel adds into row_pdp, which the preprocess zeroes)
    const int cwg = sm90::consumer_warpgroup<Traits::kUniformWg>(warpgroup);
    if constexpr (Traits::kWide) {
      bwd_sm90::consume_wide<Traits>(args, sm, n_block, kv_head, batch, seq, mask, range, cwg, rank);
    } else {
      bwd_sm90::consume<Traits>(args, sm, n_block, kv_head, batch, seq, mask, range, cwg);
    }
  }
  if constexpr (Traits::kSplit) {
    __syncwarp();          // (the producer warps' lane 0 rejoins its warp: the cluster barrier is .aligned)
    sm90::cluster_sync();  // no CTA leaves while the other may still write into its shared memory
  }
#endif
}

}  // namespace flashsdpa
