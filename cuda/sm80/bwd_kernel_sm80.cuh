// bwd_kernel_sm80.cuh: the FlashAttention-2 backward of the portable path (mma.sync m16n8k16,
// ldmatrix, cp.async; sm_80 and newer): the key-major main kernel (dK, dV in registers, dQ added
// into the fp32 accumulator). The family is portable, but its code takes sm_90-only paths where
// the SASS is compiled for sm_90 (__CUDA_ARCH__ >= 900): the dQ tile goes to dq_accum as one
// bulk reduction from shared memory (cp.reduce.async.bulk) and P / dS leave registers through
// stmatrix; sm_8x SASS uses register reds and 32-bit stores. The preprocess and the dQ
// postprocess around it are family-neutral (common/bwd_prepost.cuh). The tile table that instantiates BwdTraits is bwd_launch_sm80.cuh;
// docs/kernel_notes_bwd.md has the derivation, the measurements and the rejected variants.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "common/ptx.cuh"
#include "common/bwd_prepost.cuh"
#include "common/dropout.cuh"
#include "common/mask.cuh"
#include "common/score_mod.cuh"
#include "common/seqlen.cuh"
#include "common/softmax.cuh"
#include "common/tile_scheduler.cuh"
#include "flashsdpa/params.h"

namespace flashsdpa {
namespace bwd_sm80 {

// A kRows x kChunks tile of 16-byte chunks in shared memory, row-major, each row padded by one
// chunk: with an odd row stride (in 16-byte units) the 8 rows of any ldmatrix 8x8 matrix, and the
// 8 rows a quad-group stores into, start in 8 different 16-byte bank groups, so reads and writes
// are conflict-free. Padding rather than ptx.cuh's XOR swizzle because the address then stays
// linear in (row, chunk): every ldmatrix is one per-warp base register plus an immediate, where
// the XOR form cost a LOP3 per load and, hoisted out of the loop by ptxas, ~100 live address
// registers (336 bytes of spills at d = 128; docs/kernel_notes_bwd.md).
template <int kRows, int kChunks>
struct SmemTile {
  static constexpr int kStride = kChunks | 1;
  static constexpr int kBytes = kRows * kStride * 16;
  __host__ __device__ __forceinline__ static constexpr uint32_t offset(uint32_t row, uint32_t chunk) {
    return (row * kStride + chunk) * 16;
  }
  // Byte offset of element `col` (16-bit elements) of row `row`.
  __host__ __device__ __forceinline__ static constexpr uint32_t elem_offset(uint32_t row, uint32_t col) {
    return offset(row, col / 8) + (col % 8) * 2;
  }
};

// Every compile-time choice of one backward configuration.
//   kBlockN keys per CTA (held for the whole CTA), kBlockM query rows per inner iteration.
//   Warp grids: S = Q K^T and dP = dO V^T split kBlockM x kBlockN as kWarpsM_SdP x (rest);
//   dV += P^T dO and dK += dS^T Q split kBlockN x kHeadDim as kWarpsN_dKV x (rest);
//   dQ = dS K splits kBlockM x kHeadDim as kWarpsM_dQ x (rest).
template <typename Elem_, int kHeadDim_, int kBlockM_, int kBlockN_, int kWarps_, int kWarpsM_SdP_,
          int kWarpsN_dKV_, int kWarpsM_dQ_>
struct BwdTraits {
  using Elem = Elem_;
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kBlockM = kBlockM_;
  static constexpr int kBlockN = kBlockN_;
  static constexpr int kWarps = kWarps_;
  static constexpr int kThreads = kWarps * 32;

  static constexpr int kWarpsM_SdP = kWarpsM_SdP_;
  static constexpr int kWarpsN_SdP = kWarps / kWarpsM_SdP;
  static constexpr int kWarpRowsS = kBlockM / kWarpsM_SdP;
  static constexpr int kWarpColsS = kBlockN / kWarpsN_SdP;

  static constexpr int kWarpsN_dKV = kWarpsN_dKV_;
  static constexpr int kWarpsD_dKV = kWarps / kWarpsN_dKV;
  static constexpr int kWarpRowsKV = kBlockN / kWarpsN_dKV;
  static constexpr int kWarpColsKV = kHeadDim / kWarpsD_dKV;

  static constexpr int kWarpsM_dQ = kWarpsM_dQ_;
  static constexpr int kWarpsD_dQ = kWarps / kWarpsM_dQ;
  static constexpr int kWarpRowsQ = kBlockM / kWarpsM_dQ;
  static constexpr int kWarpColsQ = kHeadDim / kWarpsD_dQ;

  // Every warp tile is whole 16x16 ldmatrix blocks: A fragments are 16 rows, B fragments are
  // loaded two n8 tiles (16 columns) per ldmatrix.x4.
  static_assert(kHeadDim % 32 == 0 && kHeadDim <= 256, "head-dim buckets are multiples of 32");
  static_assert(kWarpsN_SdP * kWarpsM_SdP == kWarps && kWarpsD_dKV * kWarpsN_dKV == kWarps &&
                    kWarpsD_dQ * kWarpsM_dQ == kWarps, "warp grids must use every warp");
  static_assert(kWarpRowsS % 16 == 0 && kWarpColsS % 16 == 0, "S/dP warp tile");
  static_assert(kWarpRowsKV % 16 == 0 && kWarpColsKV % 16 == 0, "dK/dV warp tile");
  static_assert(kWarpRowsQ % 16 == 0 && kWarpColsQ % 16 == 0, "dQ warp tile");

  using TileQ = SmemTile<kBlockM, kHeadDim / 8>;  // Q and dO: [kBlockM][kHeadDim]
  using TileK = SmemTile<kBlockN, kHeadDim / 8>;  // K and V:  [kBlockN][kHeadDim]
  using TileP = SmemTile<kBlockM, kBlockN / 8>;   // P and dS: [kBlockM][kBlockN]

  // Q and dO are double-buffered: tile it+1 streams in (cp.async) while tile it is computed.
  static constexpr int kOffK = 0;
  static constexpr int kOffV = kOffK + TileK::kBytes;
  static constexpr int kOffQ = kOffV + TileK::kBytes;
  static constexpr int kOffdO = kOffQ + 2 * TileQ::kBytes;
  static constexpr int kOffP = kOffdO + 2 * TileQ::kBytes;
  static constexpr int kOffdS = kOffP + TileP::kBytes;
  // LSE * log2(e) source and delta rows of the two Q stages: [2][kBlockM] floats each.
  static constexpr int kOffLse = kOffdS + TileP::kBytes;
  static constexpr int kOffDelta = kOffLse + 2 * kBlockM * 4;
  static constexpr int kSmemBytes = kOffDelta + 2 * kBlockM * 4;  // sm_8x: everything above
  static_assert(kSmemBytes <= 227 * 1024, "over the sm_90 per-block shared-memory limit");

  // sm_90 adds a staging tile for the dQ bulk reduction: kBlockM rows of kHeadDim floats laid out
  // exactly like the tile's rows of dq_accum (contiguous, DqAccumLayout order), so one bulk
  // reduction adds the whole tile. Where it does not fit (d = 256: 281 KB) dQ keeps the reds.
  static constexpr int kDqStageRowBytes = kHeadDim * 4;
  static constexpr int kOffDqStage = kSmemBytes;
  static constexpr bool kDqBulk = kOffDqStage + kBlockM * kDqStageRowBytes <= 227 * 1024;
  static constexpr int kSmemBytesSm90 = kDqBulk ? kOffDqStage + kBlockM * kDqStageRowBytes : kSmemBytes;
};

// ---- helpers ------------------------------------------------------------------------------------

// Global -> shared copy of a kRows x kChunks tile (16-byte chunks) with cp.async. Consecutive
// threads take consecutive chunks of a row, so a warp reads whole 256-byte rows at d = 128.
// kPredicated: rows >= valid_rows and columns >= valid_cols (a multiple of 8) are zero-filled,
// never read; the unpredicated form serves full tiles (every block but a sequence's last one),
// with one 64-bit address add per chunk.
template <typename Tile, int kRows, int kChunks, int kThreads, bool kPredicated, typename Elem>
__device__ __forceinline__ void load_tile_async(uint32_t smem, const Elem* gmem, int64_t row_stride,
                                                int valid_rows, int valid_cols, int tid) {
  if constexpr (kThreads % kChunks == 0) {
    // Each thread keeps one chunk column: one base address, then constant row steps.
    constexpr int kRowsPerPass = kThreads / kChunks;
    const int row0 = tid / kChunks, chunk = tid % kChunks;
    const Elem* src = gmem + row0 * row_stride + chunk * 8;
    const uint32_t dst = smem + Tile::offset(row0, chunk);
#pragma unroll
    for (int i = 0; i < ceil_div(kRows, kRowsPerPass); ++i) {
      const int row = row0 + i * kRowsPerPass;
      if (kRows % kRowsPerPass != 0 && row >= kRows) break;
      const bool valid = !kPredicated || (row < valid_rows && chunk * 8 < valid_cols);
      cp_async_16(dst + Tile::offset(i * kRowsPerPass, 0), valid ? src + i * kRowsPerPass * row_stride : gmem,
                  valid);
    }
  } else {
    // Row widths that do not divide the thread count (head dims 96, 192): plain index walk.
    constexpr int kTotal = kRows * kChunks;
#pragma unroll
    for (int i = 0; i < ceil_div(kTotal, kThreads); ++i) {
      const int idx = i * kThreads + tid;
      if (kTotal % kThreads != 0 && idx >= kTotal) break;
      const int row = idx / kChunks, chunk = idx % kChunks;
      const bool valid = !kPredicated || (row < valid_rows && chunk * 8 < valid_cols);
      cp_async_16(smem + Tile::offset(row, chunk), valid ? gmem + row * row_stride + chunk * 8 : gmem, valid);
    }
  }
}

template <typename Tile, int kRows, int kChunks, int kThreads, typename Elem>
__device__ __forceinline__ void load_tile_async(uint32_t smem, const Elem* gmem, int64_t row_stride,
                                                int valid_rows, int valid_cols, int tid) {
  if (valid_rows >= kRows && valid_cols >= kChunks * 8) {
    load_tile_async<Tile, kRows, kChunks, kThreads, false>(smem, gmem, row_stride, valid_rows, valid_cols, tid);
  } else {
    load_tile_async<Tile, kRows, kChunks, kThreads, true>(smem, gmem, row_stride, valid_rows, valid_cols, tid);
  }
}

// acc[kMT][kNT] += A * B for one warp: A is (kMT*16) x kK starting at row a_row0, B is kK x (kNT*8)
// starting at column b_col0, both read from shared memory with ldmatrix.
//   kATrans = false: A stored [row][k] (Q, dO, dS);  true: A stored [k][row] (P^T, dS^T from P, dS)
//   kBTrans = false: B stored [col][k] (K, V);       true: B stored [k][col] (dO, Q, K for dQ)
// Lane address patterns (l = lane): "X" rows l%16, chunk +l/16; "Y" rows (l/16)*8 + l%8, chunk
// +(l/8)%2. Non-transposed A and transposed B use X; transposed A and non-transposed B use Y. Both
// give the register order of the PTX fragments (a0..a3; b0,b1 of two n8 tiles) directly.
// Tile offsets are linear, so each address is (tile + warp + lane) base + a compile-time immediate:
// the loops below add only constants, and ldmatrix takes them in its [reg + imm] operand.
template <typename Elem, typename ATile, typename BTile, int kMT, int kNT, int kK, bool kATrans,
          bool kBTrans>
__device__ __forceinline__ void warp_mma(float (&acc)[kMT][kNT][4], uint32_t a_smem, uint32_t a_row0,
                                         uint32_t b_smem, uint32_t b_col0, uint32_t lane) {
  static_assert(kNT % 2 == 0 && kK % 16 == 0, "whole ldmatrix.x4 blocks");
  const uint32_t x_row = lane % 16, x_chunk = lane / 16;
  const uint32_t y_row = (lane / 16) * 8 + lane % 8, y_chunk = (lane / 8) % 2;
  const uint32_t a_base =
      kATrans ? a_smem + ATile::offset(y_row, a_row0 / 8 + y_chunk) : a_smem + ATile::offset(a_row0 + x_row, x_chunk);
  const uint32_t b_base =
      kBTrans ? b_smem + BTile::offset(x_row, b_col0 / 8 + x_chunk) : b_smem + BTile::offset(b_col0 + y_row, y_chunk);
#pragma unroll
  for (int k0 = 0; k0 < kK; k0 += 16) {
    uint32_t a[kMT][4];
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt) {
      if constexpr (!kATrans) {
        ldmatrix_x4(a[mt], a_base + ATile::offset(mt * 16, k0 / 8));
      } else {
        ldmatrix_x4_trans(a[mt], a_base + ATile::offset(k0, mt * 2));
      }
    }
    uint32_t b[kNT][2];
#pragma unroll
    for (int np = 0; np < kNT / 2; ++np) {
      uint32_t r[4];
      if constexpr (!kBTrans) {
        ldmatrix_x4(r, b_base + BTile::offset(np * 16, k0 / 8));
      } else {
        ldmatrix_x4_trans(r, b_base + BTile::offset(k0, np * 2));
      }
      b[2 * np][0] = r[0];
      b[2 * np][1] = r[1];
      b[2 * np + 1][0] = r[2];
      b[2 * np + 1][1] = r[3];
    }
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt) mma_m16n8k16<Elem>(acc[mt][nt], a[mt], b[nt]);
    }
  }
}

template <int kMT, int kNT>
__device__ __forceinline__ void zero(float (&acc)[kMT][kNT][4]) {
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[mt][nt][e] = 0.f;
}

// Writes a warp's accumulator fragment (rows row0.., cols col0..) to a [rows][cols] smem tile as
// Elem, times `mult`. sm_90: one stmatrix.x4 per pair of n8 tiles (lanes 8j..8j+7 give the rows of
// matrix j = (half h = j % 2, tile nt + j / 2)). Before: each quad writes 4 x 4 bytes into one
// 16-byte chunk of 8 different rows, four times as many store instructions; at d = 64 the P and
// dS stores were 64 of the ~290 shared-memory-pipe instructions a thread issues per iteration, and
// ncu had that pipe's queue ("mio throttle") as the top stall. With the padded rows both forms are
// conflict-free.
template <typename Elem, typename Tile, int kMT, int kNT>
__device__ __forceinline__ void store_frag(unsigned char* smem, const float (&acc)[kMT][kNT][4],
                                           uint32_t row0, uint32_t col0, uint32_t lane, float mult) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  static_assert(kNT % 2 == 0, "pairs of n8 tiles");
  const uint32_t base = smem_u32(smem) + Tile::offset(row0 + ((lane / 8) % 2) * 8 + lane % 8, col0 / 8 + lane / 16);
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
    for (int nt = 0; nt < kNT; nt += 2) {
      stmatrix_x4(base + Tile::offset(mt * 16, nt),
                  ElemTraits<Elem>::pack(acc[mt][nt][0] * mult, acc[mt][nt][1] * mult),
                  ElemTraits<Elem>::pack(acc[mt][nt][2] * mult, acc[mt][nt][3] * mult),
                  ElemTraits<Elem>::pack(acc[mt][nt + 1][0] * mult, acc[mt][nt + 1][1] * mult),
                  ElemTraits<Elem>::pack(acc[mt][nt + 1][2] * mult, acc[mt][nt + 1][3] * mult));
    }
#else
  // col0 is a multiple of 8, so the lane's element offset plus per-fragment immediates is exact.
  unsigned char* base = smem + Tile::elem_offset(row0 + lane / 4, col0 + 2 * (lane % 4));
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        *reinterpret_cast<uint32_t*>(base + Tile::offset(mt * 16 + h * 8, nt)) =
            ElemTraits<Elem>::pack(acc[mt][nt][2 * h] * mult, acc[mt][nt][2 * h + 1] * mult);
      }
#endif
}

// ---- main kernel: one CTA per (key block, kv head, batch) ---------------------------------------
// Loads K_n, V_n once, then for every query head of the GQA group and every query block m that can
// see key block n: S = Q K^T, P = exp2(S * scale_log2 - LSE * log2e), dP = dO V^T,
// dS = P * (dP - delta), dV += P^T dO, dK += dS^T Q, dQ_accum[m] += dS K (fp32 adds).

// The main kernel's scheduler over (key block, kv head, batch), built the same way by the launcher
// and the kernel. Causal (a bound on the right only): block-major, whose highest block index goes
// first; the heaviest key block is then the lowest (seen by the most query blocks), so the kernel
// flips the index to keep longest-first scheduling. No mask or a window with a left bound: every
// key block costs about the same, and head-major order makes the resident CTAs the key blocks of
// one or two heads, which stream the same Q/dO tiles through L2 in step: d = 64, S = 4k-16k +2-5%
// (8k: 279 -> 294 TFLOP/s), d = 128 +0-3% (docs/kernel_notes_bwd.md, v9).
template <typename T>
__host__ __device__ __forceinline__ SingleTileScheduler bwd_scheduler_sm80(const AttnBwdParams& p) {
  const bool triangular = !p.mask.has_left() && p.mask.has_right();
  return SingleTileScheduler{ceil_div(p.seqlen_k, T::kBlockN), p.heads_kv, p.batch,
                             triangular ? TileOrder::kBlockMajor : TileOrder::kHeadMajor};
}

template <typename T, ModsKind kMods, bool kDropout>
__device__ __forceinline__ void dkdv_tile(const AttnBwdParams& p, const WorkTile& tile, unsigned char* smem) {
  using Mod = ScoreModBwd<kMods>;  // softcap, ALiBi (common/score_mod.cuh)
  using Elem = typename T::Elem;
  using TileQ = typename T::TileQ;
  using TileK = typename T::TileK;
  using TileP = typename T::TileP;
  constexpr int kBlockM = T::kBlockM, kBlockN = T::kBlockN, kHeadDim = T::kHeadDim;
  constexpr int kChunksD = kHeadDim / 8;
  constexpr int kMTS = T::kWarpRowsS / 16, kNTS = T::kWarpColsS / 8;
  constexpr int kMTKV = T::kWarpRowsKV / 16, kNTKV = T::kWarpColsKV / 8;
  constexpr int kMTQ = T::kWarpRowsQ / 16, kNTQ = T::kWarpColsQ / 8;

  const uint32_t s_base = smem_u32(smem);
  const uint32_t sK = s_base + T::kOffK, sV = s_base + T::kOffV;
  const uint32_t sP = s_base + T::kOffP, sdS = s_base + T::kOffdS;

  const int tid = threadIdx.x;
  const uint32_t lane = threadIdx.x % 32, warp = threadIdx.x / 32;

  const int n_block = ceil_div(p.seqlen_k, kBlockN) - 1 - tile.block;  // longest first, see above
  const int kv_head = tile.head, batch = tile.batch;
  const SeqlenInfo seq(p, batch);
  if (n_block * kBlockN >= seq.seqlen_k) return;  // varlen: this sequence has fewer key blocks
  // Query blocks [m_begin, m_end) see this key block; a window's others are never loaded. An empty
  // range (no row sees these keys) still writes dK = dV = 0 below.
  const BlockMask mask(seq, p.mask);
  int m_begin = mask.m_block_min<kBlockM, kBlockN>(n_block);
  int m_last = mask.m_block_max<kBlockM, kBlockN>(n_block);
  // The bias's summary: query blocks it hides from this key block for every head of the group, at
  // either end, are never loaded (bias_cells.cuh); an emptied range writes dK = dV = 0 as above.
  if constexpr (kMods == kModsBias) {
    const int heads = p.heads_q / p.heads_kv;
    narrow_queries<kBlockM, kBlockN>(p.mods, batch, kv_head * heads, heads, seq.seqlen_q, n_block, m_begin, m_last);
  }
  const int num_m = max(0, m_last - m_begin);
  const int group = p.heads_q / p.heads_kv;
  const int iters = group * num_m;  // (query head, query block) pairs, head-major
  const int keys_valid = seq.seqlen_k - n_block * kBlockN;
  const int64_t key_row0 = seq.k_row_offset + static_cast<int64_t>(n_block) * kBlockN;

  const Elem* q_base = static_cast<const Elem*>(p.q) + batch_offset(p, batch, p.q_batch_stride);
  const Elem* do_base = static_cast<const Elem*>(p.dout) + batch_offset(p, batch, p.dout_batch_stride);
  const float* lse_base = p.lse + batch_offset(p, batch, p.lse_batch_stride);
  const float* delta_base = p.delta + batch_offset(p, batch, p.delta_batch_stride);
  float* dqa_base = p.dq_accum + batch_offset(p, batch, p.dq_accum_batch_stride);

  // Iterations walk (query head, query block) pairs head-major: hq from kv_head * group, m from
  // m_begin to m_end - 1. Carried incrementally: a division per iteration showed up in the SASS.
  const int m_end = m_begin + num_m;
  auto advance = [&](int& hq, int& m) {
    if (++m == m_end) {
      m = m_begin;
      ++hq;
    }
  };
  auto load_q_do = [&](int hq, int m, int stage) {
    const int64_t row0 = seq.q_row_offset + static_cast<int64_t>(m) * kBlockM;
    const int rows = seq.seqlen_q - m * kBlockM;
    load_tile_async<TileQ, kBlockM, kChunksD, T::kThreads>(
        s_base + T::kOffQ + stage * TileQ::kBytes, q_base + hq * p.q_head_stride + row0 * p.q_row_stride,
        p.q_row_stride, rows, p.head_dim_qk, tid);
    load_tile_async<TileQ, kBlockM, kChunksD, T::kThreads>(
        s_base + T::kOffdO + stage * TileQ::kBytes,
        do_base + hq * p.dout_head_stride + row0 * p.dout_row_stride, p.dout_row_stride, rows,
        p.head_dim_v, tid);
    // LSE and delta travel with their Q/dO tile (4-byte copies: LSE rows may have any stride).
    // Rows past seqlen_q read as 0: their Q and dO rows are zero, so P = exp2(0) = 1 there but
    // dV += P^T dO and dS = P * (dO V^T - 0) both add exact zeros.
    static_assert(2 * kBlockM <= T::kThreads, "one thread per LSE and per delta row");
    if (tid < 2 * kBlockM) {
      const int r = tid % kBlockM;
      const bool valid = r < rows;
      if (tid < kBlockM) {
        cp_async_4(s_base + T::kOffLse + (stage * kBlockM + r) * 4,
                   lse_base + hq * p.lse_head_stride + (valid ? (row0 + r) * p.lse_row_stride : 0), valid);
      } else {
        cp_async_4(s_base + T::kOffDelta + (stage * kBlockM + r) * 4,
                   delta_base + hq * p.delta_head_stride + (valid ? (row0 + r) * p.delta_row_stride : 0),
                   valid);
      }
    }
  };

  int hq = kv_head * group, m = m_begin;  // this iteration's query head and block
  if (iters > 0) {
    load_tile_async<TileK, kBlockN, kChunksD, T::kThreads>(
        sK,
        static_cast<const Elem*>(p.k) + batch_offset(p, batch, p.k_batch_stride) +
            kv_head * p.k_head_stride + key_row0 * p.k_row_stride,
        p.k_row_stride, keys_valid, p.head_dim_qk, tid);
    load_tile_async<TileK, kBlockN, kChunksD, T::kThreads>(
        sV,
        static_cast<const Elem*>(p.v) + batch_offset(p, batch, p.v_batch_stride) +
            kv_head * p.v_head_stride + key_row0 * p.v_row_stride,
        p.v_row_stride, keys_valid, p.head_dim_v, tid);
    load_q_do(hq, m, 0);
    cp_async_commit();
  }

  // Warp coordinates in the three warp grids.
  const uint32_t s_row0 = (warp % T::kWarpsM_SdP) * T::kWarpRowsS;
  const uint32_t s_col0 = (warp / T::kWarpsM_SdP) * T::kWarpColsS;
  const uint32_t kv_row0 = (warp % T::kWarpsN_dKV) * T::kWarpRowsKV;
  const uint32_t kv_col0 = (warp / T::kWarpsN_dKV) * T::kWarpColsKV;
  const uint32_t q_row0w = (warp % T::kWarpsM_dQ) * T::kWarpRowsQ;
  const uint32_t q_col0w = (warp / T::kWarpsM_dQ) * T::kWarpColsQ;

  float acc_dk[kMTKV][kNTKV][4], acc_dv[kMTKV][kNTKV][4];
  zero(acc_dk);
  zero(acc_dv);

  // dQ on sm_90: iteration it stages its dQ tile in shared memory; at the top of iteration it+1
  // (after the barrier that makes the tile complete) thread 0 hands it to the copy engine as one
  // bulk reduction, and waits for that to have read shared memory before the mid-iteration
  // barrier, after which the tile is overwritten. (pending_hq, pending_m) names the staged tile.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  constexpr bool kBulkDq = T::kDqBulk;
#else
  constexpr bool kBulkDq = false;
#endif
  const uint32_t sDqStage = s_base + T::kOffDqStage;
  // Every dq row this thread touches has the parity of its first one (tile and fragment row steps
  // are even), so each of its n8-tile pairs sits at one fixed column of the DqAccumLayout row.
  int dq_col[kNTQ / 2];
  {
    const int parity = static_cast<int>((seq.q_row_offset + q_row0w + lane / 4) & 1);
#pragma unroll
    for (int np = 0; np < kNTQ / 2; ++np)
      dq_col[np] = DqAccumLayout::group_position(parity, q_col0w / 16 + np) * 16 + 4 * (lane % 4);
  }
  int pending_hq = -1, pending_m = 0;
  auto issue_dq_bulk = [&](int hq_, int m_) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    // dq_accum rows are kHeadDim floats apart (api.cpp), so the valid rows of the tile are one
    // contiguous range; staged rows past seqlen_q are left out.
    const int rows = min(kBlockM, seq.seqlen_q - m_ * kBlockM);
    float* dst = dqa_base + hq_ * p.dq_accum_head_stride +
                 (seq.q_row_offset + static_cast<int64_t>(m_) * kBlockM) * p.dq_accum_row_stride;
    bulk_reduce_add_f32(dst, sDqStage, rows * T::kDqStageRowBytes);
    bulk_commit_group();
#endif
  };

  for (int it = 0; it < iters; ++it) {
    const int stage = it & 1;
    const uint32_t sQ = s_base + T::kOffQ + stage * TileQ::kBytes;
    const uint32_t sdO = s_base + T::kOffdO + stage * TileQ::kBytes;

    // Tile `it` has landed (this thread's copies) and every warp is past iteration it-1, so the
    // other stage and sP/sdS are free to overwrite.
    cp_async_wait<0>();
    __syncthreads();
    int hq_next = hq, m_next = m;
    advance(hq_next, m_next);
    if (it + 1 < iters) load_q_do(hq_next, m_next, stage ^ 1);
    cp_async_commit();
    if constexpr (kBulkDq) {
      if (tid == 0 && pending_hq >= 0) issue_dq_bulk(pending_hq, pending_m);
    }

    const int64_t q_row0 = seq.q_row_offset + static_cast<int64_t>(m) * kBlockM;
    const int rows_valid = seq.seqlen_q - m * kBlockM;
    const float* s_lse = reinterpret_cast<const float*>(smem + T::kOffLse) + stage * kBlockM;
    const float* s_delta = reinterpret_cast<const float*>(smem + T::kOffDelta) + stage * kBlockM;

    // LSE (natural log) becomes a log2 offset. A row that sees no key has LSE = +inf from the
    // forward, so P = exp2(-inf) = 0 and its gradients are exact zeros; a forward that wrote -inf
    // for such a row is treated the same (else exp2(+inf) = NaN).
    float lse2[kMTS][2], dlt[kMTS][2];
#pragma unroll
    for (int mt = 0; mt < kMTS; ++mt)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int r = s_row0 + mt * 16 + h * 8 + lane / 4;
        const float l = s_lse[r];
        lse2[mt][h] = backward_lse2(l);
        dlt[mt][h] = s_delta[r];
      }

    // P = exp2(S * scale_log2 - LSE * log2e) in place of S. Element-wise masking (P = 0) only
    // where the block is not fully visible (blocks a diagonal or a window edge crosses, the ragged
    // last key block): a separate unrolled copy, so full blocks carry no compare/select per element.
    // Masking after exp2 (not S = -inf before it) stays right for a negative or zero scale.
    auto probs = [&](auto& s, auto masked) {
#pragma unroll
      for (int mt = 0; mt < kMTS; ++mt)
#pragma unroll
        for (int nt = 0; nt < kNTS; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            // Capped at 0 (softmax.cuh). Every score: a branch to an uncapped copy for blocks
            // without a huge LSE (as sm90's) made ptxas spill 116 bytes in the d128 kMods kernel.
            const float x = capped_exponent(fmaf(s[mt][nt][e], Mod::scale_log2(p), -lse2[mt][e / 2]));
            if constexpr (decltype(masked)::value) {
              s[mt][nt][e] = fast_exp2(x);  // masked entries are overwritten below
            } else {
              // 2 of every 8 on the FMA pipe: the MUFU unit sits behind the same queue as
              // ldmatrix and the P/dS stores, the top stall at d = 64 (ncu); 2/8 measured best
              // (d = 64, S = 8k: 275 -> 281 TFLOP/s; 3/8: 278, 4/8: 276).
              s[mt][nt][e] = ((nt * 4 + e) % 8) < 2 ? exp2_fma(x) : fast_exp2(x);
            }
          }
      if constexpr (decltype(masked)::value) {
        mask.apply(s, m * kBlockM + static_cast<int>(s_row0 + lane / 4),
                   n_block * kBlockN + static_cast<int>(s_col0 + 2 * (lane % 4)), 0.f);
      }
    };
    // S = Q K^T, the score modifiers (common/score_mod.cuh), then P in place.
    // The sequence row and column of the thread's first S element, as mask.apply takes them; a
    // lambda each, so the hooks compute them only inside their feature branches (held across
    // the iteration they cost 20 bytes of spills at d = 128 on sm_90).
    auto mod_row0 = [&] { return m * kBlockM + static_cast<int>(s_row0 + lane / 4); };
    auto mod_col0 = [&] { return n_block * kBlockN + static_cast<int>(s_col0 + 2 * (lane % 4)); };
    auto compute_p = [&](float (&s)[kMTS][kNTS][4]) {
      zero(s);
      warp_mma<Elem, TileQ, TileK, kMTS, kNTS, kHeadDim, false, false>(s, sQ, s_row0, sK, s_col0, lane);
      TileNeed need = TileNeed::kBias;
      if constexpr (kMods == kModsBias)
        need = BiasCells(p.mods, batch, hq, seq.seqlen_q).template need<kBlockM, kBlockN>(m, n_block);
      Mod::apply(p, seq, batch, hq, s, mod_row0, mod_col0, need);
      if (mask.partial<kBlockM, kBlockN>(m, n_block)) {
        probs(s, std::true_type{});
      } else {
        probs(s, std::false_type{});
      }
    };
    // dP = dO V^T.
    auto compute_dp = [&](float (&dp)[kMTS][kNTS][4]) {
      zero(dp);
      warp_mma<Elem, TileQ, TileK, kMTS, kNTS, kHeadDim, false, false>(dp, sdO, s_row0, sV, s_col0, lane);
    };

    // dQ_accum[m] += dS K. dq_accum stores each aligned group of 16 columns permuted
    // (DqAccumLayout), so the two n8 tiles a thread holds for a row (columns 2t, 2t+1 and 8+2t,
    // 8+2t+1) are 4 adjacent floats: one 16-byte red (sm_8x, and d = 256 on sm_90), or one 16-byte
    // store into the staging tile that the copy engine reduces into dq_accum (sm_90). The reds
    // held their source registers until the LSU drained them: the red burst and the ldmatrix after
    // it took 15-18% of ncu's stall samples; staging took d = 128, S = 8k from 282 to 311 TFLOP/s.
    auto dq_step = [&]() {
      float dq[kMTQ][kNTQ][4];
      const int r0 = q_row0w + lane / 4;
      float* dqa = dqa_base + hq * p.dq_accum_head_stride + (q_row0 + r0) * p.dq_accum_row_stride;
      const int rows_left = rows_valid - r0;
      // Full tiles (all but a sequence's last query block) take an unpredicated copy: ptxas turns
      // even an in-asm predicate into a branch per red. Columns need no predicate: past head_dim_qk
      // K is zero-filled, so those adds are exact zeros into columns that exist (kHeadDim wide).
      const bool full_dq = rows_valid >= kBlockM;
      constexpr int kReds = kMTQ * 2 * (kNTQ / 2);  // red.v4 per thread per iteration
      auto red = [&](int i, auto predicated) {       // i enumerates (mt, h, n8-tile pair)
        const int mt = i / kNTQ, h = (i / (kNTQ / 2)) % 2, np = i % (kNTQ / 2);
        float* dst = dqa + (mt * 16 + h * 8) * p.dq_accum_row_stride + dq_col[np];
        const float* lo = dq[mt][2 * np];
        const float* hi = dq[mt][2 * np + 1];
        if constexpr (decltype(predicated)::value) {
          red_add_f32x4_if(dst, lo[2 * h], lo[2 * h + 1], hi[2 * h], hi[2 * h + 1], mt * 16 + h * 8 < rows_left);
        } else {
          red_add_f32x4(dst, lo[2 * h], lo[2 * h + 1], hi[2 * h], hi[2 * h + 1]);
        }
      };

      // dQ = dS K, then its reds or its staging. Spreading the reds through the next GEMM's k steps
      // in source order changes nothing: ptxas hoists them back into one burst.
      zero(dq);
      warp_mma<Elem, TileP, TileK, kMTQ, kNTQ, kBlockN, false, true>(dq, sdS, q_row0w, sK, q_col0w, lane);
      if constexpr (kBulkDq) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
        // Stage the tile: the 4 floats a thread holds per (row, n8-tile pair) are adjacent in
        // DqAccumLayout order, one 16-byte store each. Rows past seqlen_q are staged too (they are
        // exact zeros) but never reduced.
        const uint32_t stage_row = sDqStage + (q_row0w + lane / 4) * T::kDqStageRowBytes;
#pragma unroll
        for (int mt = 0; mt < kMTQ; ++mt)
#pragma unroll
          for (int h = 0; h < 2; ++h)
#pragma unroll
            for (int np = 0; np < kNTQ / 2; ++np) {
              const float* lo = dq[mt][2 * np];
              const float* hi = dq[mt][2 * np + 1];
              st_shared_v4(stage_row + (mt * 16 + h * 8) * T::kDqStageRowBytes + dq_col[np] * 4,
                           make_uint4(__float_as_uint(lo[2 * h]), __float_as_uint(lo[2 * h + 1]),
                                      __float_as_uint(hi[2 * h]), __float_as_uint(hi[2 * h + 1])));
            }
        fence_proxy_async_shared();
        pending_hq = hq;
        pending_m = m;
#endif
      } else if (full_dq) {
#pragma unroll
        for (int i = 0; i < kReds; ++i) red(i, std::false_type{});
      } else {
#pragma unroll
        for (int i = 0; i < kReds; ++i) red(i, std::true_type{});
      }
    };
    float s[kMTS][kNTS][4], dp[kMTS][kNTS][4];
    // The two halves of the warps take S/P and dP in opposite orders. Warps w and w + 4 share a
    // scheduler (SMSP = warp % 4), so one warp's exponentials (MUFU) overlap the other's GEMM
    // instead of every warp reaching the exp2 phase at once right after the barrier: +1-3% at
    // d = 128, neutral at d = 64 (docs/kernel_notes_bwd.md, v8).
    if (warp >= T::kWarps / 2) {
      compute_dp(dp);
      compute_p(s);
    } else {
      compute_p(s);
      compute_dp(dp);
    }
    Mod::row_sums(p, seq, batch, hq, s, dp, mod_row0, mod_col0);  // the sinks' and slopes' exact delta
    // dS = P * (dP - delta) in place of dP; masked elements have P = 0, so dS = 0 there.
    if constexpr (kDropout) {
      // The forward's O is (Z P / keep) V with Z the mask (common/dropout.cuh), so dP_ij is
      // Z_ij (dO V^T)_ij / keep and delta (rowsum(dO O)) is unchanged: dS = P (Z dP / keep - delta).
      // dV takes Z P here and its 1 / keep in the epilogue.
      const DropoutRng rng(p.dropout, batch, hq, p.heads_q, lane);
      const float rp_keep = p.dropout.rp_keep;
      for_each_dropout_word<kMTS, kNTS>(
          rng, m * kBlockM + static_cast<int>(s_row0), n_block * kBlockN + static_cast<int>(s_col0),
          [&](int mt, int nt, uint32_t word) {
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              const bool keep = rng.keep(word, e);
              dp[mt][nt][e] = s[mt][nt][e] * ((keep ? dp[mt][nt][e] * rp_keep : 0.f) - dlt[mt][e / 2]);
              s[mt][nt][e] = keep ? s[mt][nt][e] : 0.f;
            }
          });
    } else {
#pragma unroll
      for (int mt = 0; mt < kMTS; ++mt)
#pragma unroll
        for (int nt = 0; nt < kNTS; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) dp[mt][nt][e] = s[mt][nt][e] * (dp[mt][nt][e] - dlt[mt][e / 2]);
    }
    Mod::grads(p, seq, batch, hq, dp, s, lse2, mod_row0, mod_col0);  // ALiBi's slope gradient, softcap's factor
    store_frag<Elem, TileP>(smem + T::kOffP, s, s_row0, s_col0, lane, 1.f);
    store_frag<Elem, TileP>(smem + T::kOffdS, dp, s_row0, s_col0, lane, 1.f);
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if constexpr (kBulkDq) {
      if (tid == 0) bulk_wait_read_all();  // the staged dQ tile may be overwritten after the barrier
    }
#endif
    __syncthreads();
    // Register reds go first, so they drain through the LSU while the dV and dK GEMMs run (dQ
    // between dV and dK: 284 -> first: 293 TFLOP/s at d = 128, S = 8k). Staged bulk dQ goes last:
    // its 16-byte stores then drain while warps wait at the next iteration's barrier instead of
    // queueing in front of the dV GEMM's ldmatrix (d = 64, S = 8k: 279 -> 286 TFLOP/s).
    if constexpr (!kBulkDq) dq_step();
    // dV += P^T dO, dK += dS^T Q
    warp_mma<Elem, TileP, TileQ, kMTKV, kNTKV, kBlockM, true, true>(acc_dv, sP, kv_row0, sdO, kv_col0, lane);
    warp_mma<Elem, TileP, TileQ, kMTKV, kNTKV, kBlockM, true, true>(acc_dk, sdS, kv_row0, sQ, kv_col0, lane);
    if constexpr (kBulkDq) dq_step();
    hq = hq_next;
    m = m_next;
  }

  // Epilogue: stage dK * scale and dV as Elem in the K/V buffers, then 16-byte predicated stores.
  // Key blocks that no query sees arrive here with zero accumulators and write dK = dV = 0.
  cp_async_wait<0>();
  __syncthreads();
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if constexpr (kBulkDq) {
    if (tid == 0 && pending_hq >= 0) {
      issue_dq_bulk(pending_hq, pending_m);
      bulk_wait_all();  // the staging tile is released at exit; the postprocess kernel reads dq_accum
    }
  }
#endif
  store_frag<Elem, TileK>(smem + T::kOffK, acc_dk, kv_row0, kv_col0, lane, p.scale);
  store_frag<Elem, TileK>(smem + T::kOffV, acc_dv, kv_row0, kv_col0, lane, kDropout ? p.dropout.rp_keep : 1.f);
  __syncthreads();
  Elem* dk = static_cast<Elem*>(p.dk) + batch_offset(p, batch, p.dk_batch_stride) +
             kv_head * p.dk_head_stride + key_row0 * p.dk_row_stride;
  Elem* dv = static_cast<Elem*>(p.dv) + batch_offset(p, batch, p.dv_batch_stride) +
             kv_head * p.dv_head_stride + key_row0 * p.dv_row_stride;
  constexpr int kTotal = kBlockN * kChunksD;
#pragma unroll
  for (int i = 0; i < ceil_div(kTotal, T::kThreads); ++i) {
    const int idx = i * T::kThreads + tid;
    if (kTotal % T::kThreads != 0 && idx >= kTotal) break;
    const int row = idx / kChunksD, chunk = idx % kChunksD;
    if (row >= keys_valid) continue;
    const int off = TileK::offset(row, chunk);
    if (chunk * 8 < p.head_dim_qk)
      *reinterpret_cast<uint4*>(dk + row * p.dk_row_stride + chunk * 8) =
          *reinterpret_cast<const uint4*>(smem + T::kOffK + off);
    if (chunk * 8 < p.head_dim_v)
      *reinterpret_cast<uint4*>(dv + row * p.dv_row_stride + chunk * 8) =
          *reinterpret_cast<const uint4*>(smem + T::kOffV + off);
  }
}

// One CTA per (key block, kv head, batch): K_n, V_n stay in shared memory while every query head
// of the GQA group and every query block that sees them streams through.
// kMods: softcap (a tanh per score, its derivative recovered for dS) and ALiBi (score_mod.cuh), in
// their own instantiation so that calls without them carry none of their code.
// kDropout: dropout's mask re-created from the forward's rng state (common/dropout.cuh), its own
// instantiation (without kMods).
template <typename T, ModsKind kMods = kModsNone, bool kDropout = false>
__global__ void __launch_bounds__(T::kThreads, 1)
    flashsdpa_bwd_sm80_dkdv_kernel(const __grid_constant__ AttnBwdParams p) {
  extern __shared__ __align__(128) unsigned char smem[];
  const SingleTileScheduler sched = bwd_scheduler_sm80<T>(p);
  for (WorkTile tile = sched.initial_tile(); tile.valid(); tile = sched.next_tile(tile))
    dkdv_tile<T, kMods, kDropout>(p, tile, smem);
}

}  // namespace bwd_sm80
}  // namespace flashsdpa
