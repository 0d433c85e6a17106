// fwd_kernel_sm80.cuh: the forward kernel of the portable path (sm80+: mma.sync m16n8k16, ldmatrix,
// cp.async). Owns the tile table, the traits of each configuration, the mainloop (Q tile, pipelined
// K/V loads, S = Q K^T, mask, online softmax, O += P V) and the epilogue (O and LSE stores).
//
// One CTA computes one (query block, head, batch) tile. Warp w owns query rows
// [w * kRowsPerWarp, (w + 1) * kRowsPerWarp) of the block as kMTiles m16 tiles, so every K or V
// fragment it reads from shared memory feeds kMTiles mma's (with 16 rows per warp the kernel
// would be bound by shared-memory bandwidth).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "common/ptx.cuh"
#include "common/dropout.cuh"
#include "common/mask.cuh"
#include "common/score_mod.cuh"
#include "common/seqlen.cuh"
#include "common/softmax.cuh"
#include "common/tile_scheduler.cuh"
#include "flashsdpa/params.h"

namespace flashsdpa {

struct FwdTileShapeSm80 {
  int block_m;
  int block_n;
  int warps;
};

// The tile table, read by the launcher and the traits alike. Register budget per thread (fp32
// accumulators): O = kMTiles * kHeadDim / 2, S = kMTiles * kBlockN / 2, with kMTiles = 2 at 4 warps.
//   d <= 64 : 128 x 128, 4 warps: O 64 + S 128 registers; Q, K, V tiles 16 KB each (d = 64).
//   d <= 128: 128 x 64, 4 warps:  O 128 + S 64 registers; 64 KB smem, two CTAs per SM.
//   d <= 256: 128 x 64, 8 warps of 16 rows (kMTiles = 1): O 128 + S 32; 128 KB smem at d = 256.
// Measured on the H200 at S = 8k (TFLOP/s, non-causal / causal, against these defaults):
//   d128: 128x32x4w 350/325, 128x128x8w 321/303, 64x64x4w 303/290 (default 381/350);
//   d64:  128x64x4w 327/308, 128x128x8w 281/270 (default 332/310).
constexpr FwdTileShapeSm80 fwd_tile_shape_sm80(int head_dim) {
  return head_dim <= 64    ? FwdTileShapeSm80{128, 128, 4}
         : head_dim <= 128 ? FwdTileShapeSm80{128, 64, 4}
                           : FwdTileShapeSm80{128, 64, 8};
}

// For devices whose per-block shared-memory limit (sm_86 / sm_89: 99 KB) is below what the table's
// tile needs (d = 224, 256: 112-128 KB): 64 query rows, 4 warps of 16 rows, 96 KB at d = 256.
constexpr FwdTileShapeSm80 fwd_tile_shape_sm80_small_smem(int head_dim) {
  return head_dim <= 128 ? fwd_tile_shape_sm80(head_dim) : FwdTileShapeSm80{64, 64, 4};
}

template <typename Elem_, int kHeadDim_, int kBlockM_, int kBlockN_, int kNWarps_>
struct FwdTraitsSm80 {
  using Elem = Elem_;
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kBlockM = kBlockM_;
  static constexpr int kBlockN = kBlockN_;
  static constexpr int kNWarps = kNWarps_;
  static constexpr int kNThreads = 32 * kNWarps;

  // Shared-memory rows are padded to a multiple of 64 elements (128 bytes) so that every tile uses
  // the 8-chunk XOR swizzle of ptx.cuh: conflict-free cp.async stores and ldmatrix reads. Only the
  // buckets 32, 96, 160, 224 pay padding.
  static constexpr int kHeadDimSmem = (kHeadDim + 63) / 64 * 64;
  static constexpr int kRowBytes = kHeadDimSmem * 2;
  static constexpr int kRowChunkGroups = kHeadDimSmem / 64;  // groups of 8 16-byte chunks per row

  static constexpr int kRowsPerWarp = kBlockM / kNWarps;
  static constexpr int kMTiles = kRowsPerWarp / 16;  // m16 tiles per warp
  static constexpr int kNTiles = kBlockN / 8;        // n8 tiles of S per m16 tile
  static constexpr int kDTiles = kHeadDim / 8;       // n8 tiles of O per m16 tile
  static constexpr int kKStepsQK = kHeadDim / 16;
  static constexpr int kKStepsPV = kBlockN / 16;

  // Global <-> shared copies: 8 threads cover one 128-byte chunk group of a row, so a warp moves 4
  // rows x 128 bytes per instruction and each thread's swizzle (row % 8) is fixed over passes.
  static constexpr int kCopyRowsPerPass = kNThreads / 8;

  static constexpr int kSmemQBytes = kBlockM * kRowBytes;  // also stages O in the epilogue
  static constexpr int kSmemKBytes = kBlockN * kRowBytes;
  static constexpr int kSmemVBytes = kBlockN * kRowBytes;
  static constexpr int kSmemBytes = kSmemQBytes + kSmemKBytes + kSmemVBytes;

  static_assert(std::is_same<Elem, __half>::value || std::is_same<Elem, __nv_bfloat16>::value,
                "fp16 or bf16");
  static_assert(kHeadDim % 32 == 0 && kHeadDim <= 256, "head-dim buckets are multiples of 32");
  static_assert(kBlockM % (16 * kNWarps) == 0, "each warp owns whole m16 tiles");
  static_assert(kBlockN % 16 == 0, "P V consumes keys in k16 steps; S n8 tiles go in pairs");
  static_assert(kBlockM % kCopyRowsPerPass == 0 && kBlockN % kCopyRowsPerPass == 0,
                "tile copies are whole passes");
  static_assert(kCopyRowsPerPass % 8 == 0, "a thread's swizzle row (row % 8) is fixed over passes");
  static_assert(kSmemBytes <= 227 * 1024, "over the sm_90 per-block shared memory limit");
  static_assert(kMTiles * (kHeadDim + kBlockN) / 2 <= 192,
                "accumulators leave too few of the 255 registers for fragments and addresses");
};

namespace fwd_sm80 {

// Byte address of an access into a swizzled tile (see swizzled_offset_bytes in ptx.cuh).
// lane_base = 128-byte-aligned tile base + the lane's row * row bytes + ((lane chunk bits ^ row) & 7) * 16
// folds in everything that depends on the lane; `chunk` is the compile-time part of the chunk index
// (its bits must not overlap the lane's chunk bits), `row_offset_bytes` a compile-time multiple of
// 8 rows. The XOR only touches address bits 4..6, which is why tile bases must be 128-byte aligned.
__device__ __forceinline__ uint32_t swizzled(uint32_t lane_base, int chunk, int row_offset_bytes) {
  return (lane_base ^ ((chunk & 7) << 4)) + ((chunk >> 3) << 7) + row_offset_bytes;
}

// Copies kRows x (head_dim_valid) elements of a row-major global tile into a swizzled shared tile,
// zero-filling rows >= rows_valid and columns >= head_dim_valid (columns up to kHeadDimSmem).
// smem_thread / gmem_thread point at this thread's first (row, chunk). A masked-off copy reads
// nothing (src-size 0), so its address may lie outside the tensor.
template <typename Traits, int kRows, bool kCheckRows>
__device__ __forceinline__ void copy_tile_async(uint32_t smem_thread,
                                                const typename Traits::Elem* gmem_thread,
                                                int64_t row_stride, int rows_left, int chunks_left) {
#pragma unroll
  for (int pass = 0; pass < kRows / Traits::kCopyRowsPerPass; ++pass) {
    const bool row_ok = !kCheckRows || pass * Traits::kCopyRowsPerPass < rows_left;
    const typename Traits::Elem* src = gmem_thread + pass * Traits::kCopyRowsPerPass * row_stride;
#pragma unroll
    for (int group = 0; group < Traits::kRowChunkGroups; ++group) {
      cp_async_16(smem_thread + pass * Traits::kCopyRowsPerPass * Traits::kRowBytes + group * 128,
                  src + group * 64, row_ok && group * 8 < chunks_left);
    }
  }
}

// Flips the sign bit of every element this thread copied into the Q tile (a negative scale
// becomes |scale| on -q; exact in fp16 and bf16).
template <typename Traits>
__device__ __forceinline__ void negate_own_chunks(uint32_t smem_thread) {
#pragma unroll
  for (int pass = 0; pass < Traits::kBlockM / Traits::kCopyRowsPerPass; ++pass) {
#pragma unroll
    for (int group = 0; group < Traits::kRowChunkGroups; ++group) {
      const uint32_t addr = smem_thread + pass * Traits::kCopyRowsPerPass * Traits::kRowBytes + group * 128;
      uint4 v = ld_shared_v4(addr);
      v.x ^= 0x80008000u;
      v.y ^= 0x80008000u;
      v.z ^= 0x80008000u;
      v.w ^= 0x80008000u;
      st_shared_v4(addr, v);
    }
  }
}

// S = Q K^T for this warp's kMTiles x kBlockN scores. q_lane / k_lane: see swizzled().
template <typename Traits>
__device__ __forceinline__ void gemm_qk(float (&s)[Traits::kMTiles][Traits::kNTiles][4],
                                        uint32_t q_lane, uint32_t k_lane) {
  using Elem = typename Traits::Elem;
#pragma unroll
  for (int kk = 0; kk < Traits::kKStepsQK; ++kk) {
    uint32_t a[Traits::kMTiles][4];
#pragma unroll
    for (int i = 0; i < Traits::kMTiles; ++i) {
      ldmatrix_x4(a[i], swizzled(q_lane, 2 * kk, i * 16 * Traits::kRowBytes));
    }
#pragma unroll
    for (int jp = 0; jp < Traits::kNTiles / 2; ++jp) {
      uint32_t b[4];  // b0, b1 of key tile 2*jp, then of 2*jp + 1
      ldmatrix_x4(b, swizzled(k_lane, 2 * kk, jp * 16 * Traits::kRowBytes));
      const uint32_t b_even[2] = {b[0], b[1]};
      const uint32_t b_odd[2] = {b[2], b[3]};
#pragma unroll
      for (int i = 0; i < Traits::kMTiles; ++i) {
        mma_m16n8k16<Elem>(s[i][2 * jp], a[i], b_even);
        mma_m16n8k16<Elem>(s[i][2 * jp + 1], a[i], b_odd);
      }
    }
  }
}

// O += P V. P comes straight from the S accumulators: the C fragments of key tiles 2*kk and
// 2*kk + 1 are, once packed to 16 bits, exactly the A fragment of k-step kk. V (keys x d, row
// major) is read transposed by ldmatrix.trans into B fragments.
template <typename Traits>
__device__ __forceinline__ void gemm_pv(float (&o)[Traits::kMTiles][Traits::kDTiles][4],
                                        const float (&p)[Traits::kMTiles][Traits::kNTiles][4],
                                        uint32_t v_lane) {
  using Elem = typename Traits::Elem;
#pragma unroll
  for (int kk = 0; kk < Traits::kKStepsPV; ++kk) {
    uint32_t a[Traits::kMTiles][4];
#pragma unroll
    for (int i = 0; i < Traits::kMTiles; ++i) {
      a[i][0] = ElemTraits<Elem>::pack(p[i][2 * kk][0], p[i][2 * kk][1]);
      a[i][1] = ElemTraits<Elem>::pack(p[i][2 * kk][2], p[i][2 * kk][3]);
      a[i][2] = ElemTraits<Elem>::pack(p[i][2 * kk + 1][0], p[i][2 * kk + 1][1]);
      a[i][3] = ElemTraits<Elem>::pack(p[i][2 * kk + 1][2], p[i][2 * kk + 1][3]);
    }
#pragma unroll
    for (int jp = 0; jp < Traits::kDTiles / 2; ++jp) {
      uint32_t b[4];  // b0, b1 of d tile 2*jp, then of 2*jp + 1
      ldmatrix_x4_trans(b, swizzled(v_lane, 2 * jp, kk * 16 * Traits::kRowBytes));
      const uint32_t b_even[2] = {b[0], b[1]};
      const uint32_t b_odd[2] = {b[2], b[3]};
#pragma unroll
      for (int i = 0; i < Traits::kMTiles; ++i) {
        mma_m16n8k16<Elem>(o[i][2 * jp], a[i], b_even);
        mma_m16n8k16<Elem>(o[i][2 * jp + 1], a[i], b_odd);
      }
    }
  }
}

template <typename Traits, ModsKind kMods, bool kDropout>
__device__ __forceinline__ void compute_tile(const AttnFwdParams& p, const WorkTile& tile,
                                             uint32_t smem) {
  using Elem = typename Traits::Elem;
  constexpr int kBlockM = Traits::kBlockM;
  constexpr int kBlockN = Traits::kBlockN;
  constexpr int kMTiles = Traits::kMTiles;
  constexpr int kRowBytes = Traits::kRowBytes;

  const SeqlenInfo seq(p, tile.batch);
  const int m_block = tile.block;
  const int row_begin = m_block * kBlockM;
  // Varlen: the grid is sized for the longest sequence. The whole CTA leaves before any barrier.
  if (row_begin >= seq.seqlen_q) return;

  // Key blocks [n_block_min, n_block_max) hold every key a row of this block sees; a window's
  // other blocks are never loaded. Inside, [full_begin, full_end) need no element-wise mask.
  const BlockMask mask(seq, p.mask);
  int n_block_min = mask.template n_block_min<kBlockM, kBlockN>(m_block);
  int n_block_max = mask.template n_block_max<kBlockM, kBlockN>(m_block);
  // The bias's summary: key blocks it hides at either end are never loaded (bias_cells.cuh).
  const BiasCells cells(p.mods, tile.batch, tile.head, seq.seqlen_q);
  if constexpr (kMods == kModsBias) cells.template narrow_keys<kBlockM, kBlockN>(m_block, n_block_min, n_block_max);
  const int full_begin = mask.template full_begin<kBlockM, kBlockN>(m_block);
  const int full_end = mask.template full_end<kBlockM, kBlockN>(m_block);

  const int tid = threadIdx.x;
  const int lane = tid & 31;
  const int warp_row0 = (tid >> 5) * Traits::kRowsPerWarp;
  const int rows_q = seq.seqlen_q - row_begin;  // valid rows of this block (may exceed kBlockM)
  const int kv_head = tile.head / (p.heads_q / p.heads_kv);

  const Elem* q = static_cast<const Elem*>(p.q) + tile.batch * p.q_batch_stride +
                  tile.head * p.q_head_stride + (seq.q_row_offset + row_begin) * p.q_row_stride;
  const Elem* k = static_cast<const Elem*>(p.k) + tile.batch * p.k_batch_stride +
                  kv_head * p.k_head_stride + seq.k_row_offset * p.k_row_stride;
  const Elem* v = static_cast<const Elem*>(p.v) + tile.batch * p.v_batch_stride +
                  kv_head * p.v_head_stride + seq.k_row_offset * p.v_row_stride;

  const uint32_t smem_q = smem;
  const uint32_t smem_k = smem_q + Traits::kSmemQBytes;
  const uint32_t smem_v = smem_k + Traits::kSmemKBytes;

  // This thread's (row, chunk) in every tile copy and the swizzled shared offset it maps to.
  const int copy_row = tid >> 3;
  const int copy_chunk = tid & 7;
  const uint32_t copy_smem_offset = copy_row * kRowBytes + (((copy_chunk ^ copy_row) & 7) << 4);

  // ldmatrix lane bases (see swizzled()): Q as A (x4 = rows 0-15 x k 0-15), K as B (x4 = two key
  // tiles x k 0-15), V as B via .trans (x4 = keys 0-15 x two d tiles).
  const uint32_t q_lane = smem_q + (warp_row0 + (lane & 15)) * kRowBytes +
                          ((((lane >> 4) ^ lane) & 7) << 4);
  const uint32_t k_lane = smem_k + ((lane & 7) + ((lane >> 4) << 3)) * kRowBytes +
                          (((((lane >> 3) & 1) ^ lane) & 7) << 4);
  const uint32_t v_lane = smem_v + ((lane & 7) + (((lane >> 3) & 1) << 3)) * kRowBytes +
                          ((((lane >> 4) ^ lane) & 7) << 4);

  float o[kMTiles][Traits::kDTiles][4];
#pragma unroll
  for (int i = 0; i < kMTiles; ++i)
#pragma unroll
    for (int d = 0; d < Traits::kDTiles; ++d)
#pragma unroll
      for (int e = 0; e < 4; ++e) o[i][d][e] = 0.f;
  OnlineSoftmax<kMTiles> softmax;

  // A zero scale makes every score 0 whatever q holds: q is loaded as zeros and any positive
  // scale_log2 keeps exp2(-inf * scale_log2) = 0 for masked keys (0 * -inf would be NaN). The
  // score modifiers (softcap, ALiBi, sinks) own the softmax's units: common/score_mod.cuh.
  using Mod = ScoreModFwd<kMods>;
  const float scale_log2 = Mod::scale_log2(p);
  // Dropout (common/dropout.cuh): this lane's Philox stream for the (batch, head).
  DropoutRng rng;
  if constexpr (kDropout) rng = DropoutRng(p.dropout, tile.batch, tile.head, p.heads_q, lane);

  if (n_block_max > n_block_min) {
    const int q_chunks = p.scale == 0.f ? 0 : p.head_dim_qk / 8;
    copy_tile_async<Traits, kBlockM, true>(smem_q + copy_smem_offset,
                                           q + copy_row * p.q_row_stride + copy_chunk * 8,
                                           p.q_row_stride, rows_q - copy_row,
                                           q_chunks - copy_chunk);
    cp_async_commit();
    if (p.scale < 0.f) {
      cp_async_wait<0>();  // wait_group only covers committed groups: commit first
      negate_own_chunks<Traits>(smem_q + copy_smem_offset);
    }

    const Elem* k_thread = k + copy_row * p.k_row_stride + copy_chunk * 8;
    const Elem* v_thread = v + copy_row * p.v_row_stride + copy_chunk * 8;
    const int k_chunks_left = p.head_dim_qk / 8 - copy_chunk;
    const int v_chunks_left = p.head_dim_v / 8 - copy_chunk;
    auto copy_k = [&](int n_block, auto check_rows) {
      copy_tile_async<Traits, kBlockN, decltype(check_rows)::value>(
          smem_k + copy_smem_offset,
          k_thread + static_cast<int64_t>(n_block * kBlockN) * p.k_row_stride,
          p.k_row_stride, seq.seqlen_k - n_block * kBlockN - copy_row, k_chunks_left);
    };
    auto copy_v = [&](int n_block, auto check_rows) {
      copy_tile_async<Traits, kBlockN, decltype(check_rows)::value>(
          smem_v + copy_smem_offset,
          v_thread + static_cast<int64_t>(n_block * kBlockN) * p.v_row_stride,
          p.v_row_stride, seq.seqlen_k - n_block * kBlockN - copy_row, v_chunks_left);
    };

    int n_block = n_block_max - 1;
    copy_k(n_block, std::true_type{});
    cp_async_commit();

    // One key block. Shared memory holds one K and one V tile; the copies overlap compute as
    // V_j lands during S_j = Q K_j^T, and K_{j-1} during the softmax and O += P_j V_j.
    // Blocks run from the last to the first, so the ones that need masking on the right (the
    // diagonal, the ragged end of the keys) come first, then the unmasked run, then those a
    // window's left edge crosses. Only the last block loaded can be ragged: any block below
    // full_end is whole.
    auto step = [&](int n_block, auto masked) {
      constexpr bool kMasked = decltype(masked)::value;
      float s[kMTiles][Traits::kNTiles][4];
#pragma unroll
      for (int i = 0; i < kMTiles; ++i)
#pragma unroll
        for (int j = 0; j < Traits::kNTiles; ++j)
#pragma unroll
          for (int e = 0; e < 4; ++e) s[i][j][e] = 0.f;

      cp_async_wait<0>();  // K_j (and Q) landed
      __syncthreads();     // ... for every thread; and every warp is done reading V_{j+1}
      copy_v(n_block, std::integral_constant<bool, kMasked>{});  // only the last block is ragged
      cp_async_commit();

      gemm_qk<Traits>(s, q_lane, k_lane);
      TileNeed need = TileNeed::kBias;
      if constexpr (kMods == kModsBias) need = cells.template need<kBlockM, kBlockN>(m_block, n_block);
      Mod::apply(p, seq, tile.batch, tile.head, s, row_begin + warp_row0 + (lane >> 2), n_block * kBlockN + 2 * (lane & 3),
                 need);
      if constexpr (kMasked) {
        mask.apply(s, row_begin + warp_row0 + (lane >> 2), n_block * kBlockN + 2 * (lane & 3), -INFINITY);
      }

      cp_async_wait<0>();  // V_j landed
      __syncthreads();     // ... for every thread; and every warp is done reading K_j
      if (n_block > n_block_min) {
        copy_k(n_block - 1, std::false_type{});
        cp_async_commit();
      }

      softmax.update(s, o, scale_log2);
      // Dropped P are zeroed after the row sums took them (the softmax is of the whole row).
      if constexpr (kDropout) apply_dropout(rng, s, row_begin + warp_row0, n_block * kBlockN);
      gemm_pv<Traits>(o, s, v_lane);
    };

    // One masked call site and one unmasked loop (a third loop for the left edge would inline the
    // masked step twice). Without a left bound full_begin <= n_block_min, so this is the masked
    // blocks then the unmasked loop, as before windows.
    while (n_block >= n_block_min) {
      if (n_block >= full_end || n_block < full_begin) {
        step(n_block, std::true_type{});
        --n_block;
      } else {
        const int stop = max(full_begin, n_block_min);
        for (; n_block >= stop; --n_block) step(n_block, std::false_type{});
      }
    }
  }

  // ---- epilogue: normalize, stage O through shared memory (the Q tile's space), store -------------
  float lse[2 * kMTiles];
  if constexpr (kDropout) {  // the kept P's 1 / (1 - p), once on O (FlashAttention-2's place)
#pragma unroll
    for (int i = 0; i < kMTiles; ++i)
#pragma unroll
      for (int d = 0; d < Traits::kDTiles; ++d)
#pragma unroll
        for (int e = 0; e < 4; ++e) o[i][d][e] *= p.dropout.rp_keep;
  }
  // The scores are of q (negated for a negative scale: see negate_own_chunks), so the LSE is in
  // units of |scale| (or of the softcap: Mod::scale).
  if (kMods != kModsNone && p.mods.sinks != nullptr) {
    softmax.finalize_with_sink(o, Mod::scale(p), lse, Mod::sink(p, tile.head));
  } else {
    softmax.finalize(o, Mod::scale(p), lse);
  }

  __syncthreads();  // every warp has finished reading Q and V
  const uint32_t o_lane =
      smem_q + (warp_row0 + (lane >> 2)) * kRowBytes + ((lane >> 2) << 4) + ((lane & 3) << 2);
#pragma unroll
  for (int i = 0; i < kMTiles; ++i)
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int d = 0; d < Traits::kDTiles; ++d) {
        st_shared_b32(swizzled(o_lane, d, (i * 16 + h * 8) * kRowBytes),
                      ElemTraits<Elem>::pack(o[i][d][2 * h], o[i][d][2 * h + 1]));
      }
  __syncthreads();

  Elem* out = static_cast<Elem*>(p.o) + tile.batch * p.o_batch_stride + tile.head * p.o_head_stride +
              (seq.q_row_offset + row_begin) * p.o_row_stride;
  const int o_chunks_left = p.head_dim_v / 8 - copy_chunk;
#pragma unroll
  for (int pass = 0; pass < kBlockM / Traits::kCopyRowsPerPass; ++pass) {
    const int row = copy_row + pass * Traits::kCopyRowsPerPass;
    if (row < rows_q) {
#pragma unroll
      for (int group = 0; group < Traits::kRowChunkGroups; ++group) {
        if (group * 8 < o_chunks_left) {
          const uint4 val = ld_shared_v4(smem_q + copy_smem_offset +
                                         pass * Traits::kCopyRowsPerPass * kRowBytes + group * 128);
          *reinterpret_cast<uint4*>(out + row * p.o_row_stride + group * 64 + copy_chunk * 8) = val;
        }
      }
    }
  }

  if ((lane & 3) == 0 && p.lse != nullptr) {  // null: the caller wants no LSE (inference)
    float* lse_out = p.lse + tile.batch * p.lse_batch_stride + tile.head * p.lse_head_stride +
                     (seq.q_row_offset + row_begin) * p.lse_row_stride;
#pragma unroll
    for (int i = 0; i < kMTiles; ++i)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int row = warp_row0 + i * 16 + h * 8 + (lane >> 2);
        if (row < rows_q) lse_out[row * p.lse_row_stride] = lse[2 * i + h];
      }
  }
}

}  // namespace fwd_sm80

// The forward's scheduler, built the same way by the launcher (grid size) and the kernel (tiles).
// Tile order: head-major where every query block costs about the same (no mask, a sliding window
// with a left bound), so resident CTAs share the K/V of a few heads in L2 (d128, S = 8k: 381 vs
// 356 TFLOP/s block-major); block-major where the cost grows with the block (causal, any bound
// on the right only), so the heaviest blocks of every head start first and the waves stay
// balanced (368 vs 350).
template <typename Traits>
__host__ __device__ __forceinline__ SingleTileScheduler fwd_scheduler_sm80(const AttnFwdParams& p) {
  const bool triangular = !p.mask.has_left() && p.mask.has_right();
  return SingleTileScheduler{ceil_div(p.seqlen_q, Traits::kBlockM), p.heads_q, p.batch,
                             triangular ? TileOrder::kBlockMajor : TileOrder::kHeadMajor};
}

// kMods: the score modifiers, softcap, ALiBi and sinks (score_mod.cuh), in their own
// instantiation so that calls without them carry none of their code (docs/kernel_notes_features.md).
// kDropout: dropout on P (common/dropout.cuh), its own instantiation too (without kMods): a
// Philox of 7 rounds per 16 elements of P is ~14 IMAD.WIDE per 16 exp2, not a runtime branch.
template <typename Traits, ModsKind kMods = kModsNone, bool kDropout = false>
__global__ void __launch_bounds__(Traits::kNThreads, 1)
    flashsdpa_fwd_sm80_kernel(const __grid_constant__ AttnFwdParams params) {
  // 128-byte alignment is what the XOR swizzle of swizzled() needs (the runtime gives more).
  extern __shared__ __align__(128) char fwd_smem[];
  if constexpr (kDropout) {
    if (blockIdx.x == 0 && threadIdx.x == 0) write_rng_state(params.dropout);
  }
  const SingleTileScheduler sched = fwd_scheduler_sm80<Traits>(params);
  for (WorkTile tile = sched.initial_tile(); tile.valid(); tile = sched.next_tile(tile)) {
    fwd_sm80::compute_tile<Traits, kMods, kDropout>(params, tile, smem_u32(fwd_smem));
  }
}

}  // namespace flashsdpa
