// decode_kernel_sm80.cuh: the decode forward of the portable path (issue 11): split-KV, GQA-packed,
// contiguous or paged K/V, on the forward's mma.sync primitives (gemm_qk / gemm_pv of
// fwd_kernel_sm80.cuh), the online softmax of common/softmax.cuh and the masks of common/mask.cuh.
//
// Why a second kernel: a decode call has 1..16 query rows per head, so the forward's 128-row tiles
// waste 127/128 of their mma's and read each K/V head once per query head; its grid (query blocks x
// heads x batch) leaves most SMs idle at small batch. Here
//   - the query heads sharing a KV head are packed into one 16-row tile: packed row r of (batch,
//     kv head) is query row r / group of query head kv_head * group + r % group, so each K/V byte
//     is read once per packed block (once per kv head up to Sq * group = 16 rows);
//   - the warps split each key tile (warp w takes keys [16w, 16w + 16)) instead of the rows, each
//     with its own online softmax over the same 16 rows, merged through shared memory at the end;
//   - one CTA owns one split of the key blocks (SplitKvScheduler), so B * Hkv * splits CTAs fill
//     the GPU; splits > 1 write float32 partials that common/split_combine.cuh merges;
//   - K/V are double-buffered (kStages tiles in flight): a decode CTA does ~1 mma per 32 bytes
//     loaded, so the loop is a copy loop and its depth decides the bandwidth.
#pragma once

#include "common/bias_cells.cuh"
#include "common/mask.cuh"
#include "common/ptx.cuh"
#include "common/seqlen.cuh"
#include "common/softmax.cuh"
#include "common/tile_scheduler.cuh"
#include "flashsdpa/params.h"
#include "sm80/fwd_kernel_sm80.cuh"

namespace flashsdpa {

struct DecodeTileShapeSm80 {
  int warps;
  int stages;
};

// The decode tile table, read by the launcher, the traits and the host's plan (tiles_sm80.cu).
// Key tile = 16 keys per warp. Shared memory (Q 16 rows + kStages x (K + V)):
//   d <= 128: 4 warps, 64-key tiles, 2 stages: 68 KB at d = 128 (3 CTAs per H200 SM, 1 on 99 KB parts)
//   d = 256 : 2 warps, 32-key tiles, 2 stages: 72 KB (O takes 128 fp32 registers per thread)
// In flight per SM at d = 128: 3 CTAs x 32 KB = 96 KB against the ~26 KB that 32 B/ns/SM (4.25 TB/s
// over 132 SMs) x ~800 ns of DRAM latency needs, so the stage count is not the limit.
constexpr DecodeTileShapeSm80 decode_tile_shape_sm80(int head_dim) {
  return head_dim <= 128 ? DecodeTileShapeSm80{4, 2} : DecodeTileShapeSm80{2, 2};
}

template <typename Elem_, int kHeadDim_, int kNWarps_, int kStages_>
struct DecodeTraitsSm80 {
  using Elem = Elem_;
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kNWarps = kNWarps_;
  static constexpr int kStages = kStages_;
  static constexpr int kNThreads = 32 * kNWarps;

  static constexpr int kBlockM = 16;    // packed rows per CTA: one m16 tile that every warp multiplies
  static constexpr int kWarpKeys = 16;  // keys per warp per key tile (two n8 tiles: gemm_qk's pairs)
  static constexpr int kBlockN = kWarpKeys * kNWarps;

  // Shared-memory rows as in the forward (FwdTraitsSm80): padded to 64 elements for the swizzle.
  static constexpr int kHeadDimSmem = (kHeadDim + 63) / 64 * 64;
  static constexpr int kRowBytes = kHeadDimSmem * 2;
  static constexpr int kRowChunkGroups = kHeadDimSmem / 64;

  // One warp's view, as gemm_qk / gemm_pv read it: 16 rows x kWarpKeys keys, O of 16 x kHeadDim.
  static constexpr int kMTiles = 1;
  static constexpr int kNTiles = kWarpKeys / 8;
  static constexpr int kDTiles = kHeadDim / 8;
  static constexpr int kKStepsQK = kHeadDim / 16;
  static constexpr int kKStepsPV = kWarpKeys / 16;

  static constexpr int kCopyRowsPerPass = kNThreads / 8;  // 8 threads per 128-byte chunk group of a row

  static constexpr int kSmemQBytes = kBlockM * kRowBytes;
  static constexpr int kSmemTileBytes = kBlockN * kRowBytes;  // one K or one V tile
  static constexpr int kSmemStageBytes = 2 * kSmemTileBytes;
  // The warps' merge (after the loop, over the K/V stages): each warp's normalized fp32 O, rows
  // padded by 8 floats so the fragment stores of 8 rows fall in different banks, then the LSEs.
  static constexpr int kMergeStride = kHeadDim + 8;
  static constexpr int kSmemMergeOBytes = kNWarps * kBlockM * kMergeStride * 4;
  static constexpr int kSmemMergeBytes = kSmemMergeOBytes + kNWarps * kBlockM * 4;
  static constexpr int kSmemLoopBytes = kStages * kSmemStageBytes;
  static constexpr int kSmemBytes =
      kSmemQBytes + (kSmemLoopBytes > kSmemMergeBytes ? kSmemLoopBytes : kSmemMergeBytes);
  // The kModsBias kernel's bias stages, after everything above (the merge reuses the K/V stages,
  // never these): per K/V stage the 16 packed rows' bias over its kBlockN keys, copied with the
  // tile (cp.async, the same commit group), so the loop reads it from shared memory instead of
  // waiting on 4-byte global loads issued in the step that uses them (session 11: the masked decode
  // ran at 1.14 TB/s against the plain kernel's ~4). Rows padded by 16 bytes: a fragment's 8 rows x
  // 4 key pairs then fall in 32 distinct banks (row stride 36 words at 64 keys: 4g + t; 20 words at
  // 32 keys: distinct too). 2 x 16 x 144 = 4.5 KB at d <= 128 (72.5 KB in all, still 3 CTAs per
  // H200 SM), 2.5 KB at d 256.
  static constexpr int kBiasRowBytes = kBlockN * 2 + 16;
  static constexpr int kSmemBiasStageBytes = kBlockM * kBiasRowBytes;
  static constexpr int kSmemBiasBytes = kStages * kSmemBiasStageBytes;
  static constexpr int kBiasPairsPerThread = kBlockM * kBlockN / 2 / kNThreads;

  static_assert(kHeadDim % 32 == 0 && kHeadDim <= 256, "head-dim buckets are multiples of 32");
  static_assert(kStages >= 2, "the loop issues tile j + kStages - 1 while computing tile j");
  static_assert(kBlockM % kCopyRowsPerPass == 0 && kBlockN % kCopyRowsPerPass == 0, "tile copies are whole passes");
  static_assert(kCopyRowsPerPass % 8 == 0, "a thread's swizzle row (row % 8) is fixed over passes");
  static_assert(kNThreads % kBlockM == 0, "the merge gives each packed row the same number of threads");
  static_assert(kSmemBytes + kSmemBiasBytes <= 99 * 1024, "the decode tile fits every sm_8x part (99 KB per block)");
  static_assert(kBlockM * kBlockN / 2 % kNThreads == 0, "the bias stage copies are whole passes");
};

namespace decode_sm80 {

using fwd_sm80::gemm_pv;
using fwd_sm80::gemm_qk;

// Whether any element of keys [n_block kBlockN, +kBlockN) of the tile's packed rows may be visible
// under the bias (BiasCells: a cell is 64 queries x 16 keys, read as 64-key words, so a 32-key d256
// block asks its enclosing 64 keys: a superset, never a wrong skip). The tile's heads are those of
// packed rows row_begin .. + min(group, rows_here) - 1 (every head of the KV group once the tile
// holds a whole group); its query rows first_q .. last_q (< 16 on the dense decode path: one cell row).
template <int kBlockN>
__device__ __forceinline__ bool bias_visible(const ScoreMods& m, int batch, int kv_head, int group, int row_begin,
                                             int rows_here, int first_q, int last_q, int seqlen_q, int n_block) {
  constexpr int kCellBlockN = kBlockN < 64 ? 64 : kBlockN;
  const int cell_block = n_block * kBlockN / kCellBlockN;
  const int heads = min(group, rows_here);
  for (int i = 0; i < heads; ++i) {
    const BiasCells cells(m, batch, kv_head * group + (row_begin + i) % group, seqlen_q);
    for (int mb = first_q / BiasCells::kRows; mb <= last_q / BiasCells::kRows; ++mb)
      if (cells.template visible<BiasCells::kRows, kCellBlockN>(mb, cell_block)) return true;
  }
  return false;
}

// kMods: kModsNone (the plain kernel, no bias code at all) or kModsBias (the additive bias alone:
// the host sends no softcap / ALiBi / sinks call here, decode.cpp's plan and the routers).
template <typename Traits, ModsKind kMods = kModsNone>
__device__ __forceinline__ void compute_tile(const AttnFwdParams& p, const WorkTile& tile, char* smem_ptr) {
  using Elem = typename Traits::Elem;
  constexpr int kBlockM = Traits::kBlockM;
  constexpr int kBlockN = Traits::kBlockN;
  constexpr int kRowBytes = Traits::kRowBytes;
  constexpr int kStages = Traits::kStages;
  const uint32_t smem = smem_u32(smem_ptr);

  const SeqlenInfo seq(p, tile.batch);
  const int group = p.heads_q / p.heads_kv;
  const int packed_rows = seq.seqlen_q * group;
  const int row_begin = tile.block * kBlockM;
  if (row_begin >= packed_rows) return;  // the whole CTA leaves before any barrier
  const int rows_here = min(kBlockM, packed_rows - row_begin);
  const int kv_head = tile.head;

  // The key blocks this split owns: the tile's rows see [n_min, n_max), cut into num_splits equal
  // shares. Inside, [full_begin, full_end) need no element-wise mask.
  const BlockMask mask(seq, p.mask);
  const int first_q = row_begin / group, last_q = (row_begin + rows_here - 1) / group;
  int n_min = mask.template n_block_min_rows<kBlockN>(first_q);
  int n_max = mask.template n_block_max_rows<kBlockN>(last_q);
  if constexpr (kMods == kModsBias) {
    // Key blocks that every row of the tile hides at either end (key padding: the blocks past the
    // sequence's kept length) are not split, loaded or computed: every split shares what is left,
    // and a split left empty gives weight 0 in the combine (LSE -inf), as a causal call's do.
    if (p.mods.bias_cells != nullptr) {
      while (n_max > n_min && !bias_visible<kBlockN>(p.mods, tile.batch, kv_head, group, row_begin, rows_here, first_q,
                                                     last_q, seq.seqlen_q, n_max - 1))
        --n_max;
      while (n_min < n_max && !bias_visible<kBlockN>(p.mods, tile.batch, kv_head, group, row_begin, rows_here, first_q,
                                                     last_q, seq.seqlen_q, n_min))
        ++n_min;
    }
  }
  const BlockRange range = split_range(n_min, n_max, tile.split, p.num_splits);
  const int full_begin = mask.template full_begin_rows<kBlockN>(last_q);
  const int full_end = mask.template full_end_rows<kBlockN>(first_q);

  const int tid = threadIdx.x;
  const int lane = tid & 31;
  const int warp = tid >> 5;
  const int copy_row = tid >> 3;
  const int copy_chunk = tid & 7;
  const uint32_t copy_smem_offset = copy_row * kRowBytes + (((copy_chunk ^ copy_row) & 7) << 4);

  const uint32_t smem_q = smem;
  const uint32_t smem_kv = smem + Traits::kSmemQBytes;
  // ldmatrix lane bases as in the forward; every warp reads all 16 Q rows and its own 16 keys
  // (16 * warp rows down: a multiple of 8, so the swizzle term is unchanged).
  const uint32_t q_lane = smem_q + (lane & 15) * kRowBytes + ((((lane >> 4) ^ lane) & 7) << 4);
  const uint32_t k_lane = smem_kv + (warp * Traits::kWarpKeys + (lane & 7) + ((lane >> 4) << 3)) * kRowBytes +
                          (((((lane >> 3) & 1) ^ lane) & 7) << 4);
  const uint32_t v_lane = smem_kv + Traits::kSmemTileBytes +
                          (warp * Traits::kWarpKeys + (lane & 7) + (((lane >> 3) & 1) << 3)) * kRowBytes +
                          ((((lane >> 4) ^ lane) & 7) << 4);

  float o[1][Traits::kDTiles][4];
#pragma unroll
  for (int d = 0; d < Traits::kDTiles; ++d)
#pragma unroll
    for (int e = 0; e < 4; ++e) o[0][d][e] = 0.f;
  OnlineSoftmax<1> softmax;
  // Zero scale: q loaded as zeros, any positive scale_log2 (see the forward's compute_tile).
  const float scale_log2 = p.scale == 0.f ? 1.f : fabsf(p.scale_log2);

  if (range.end > range.begin) {
    // ---- Q: packed rows, (query row, head) = (r / group, kv_head * group + r % group) ----------
    const Elem* q = static_cast<const Elem*>(p.q) + tile.batch * p.q_batch_stride;
    const int q_chunks_left = (p.scale == 0.f ? 0 : p.head_dim_qk / 8) - copy_chunk;
#pragma unroll
    for (int pass = 0; pass < kBlockM / Traits::kCopyRowsPerPass; ++pass) {
      const int r = copy_row + pass * Traits::kCopyRowsPerPass;
      const int packed = row_begin + r;
      const bool row_ok = r < rows_here;
      const Elem* src = q + (row_ok ? (kv_head * group + packed % group) * p.q_head_stride +
                                          static_cast<int64_t>(packed / group) * p.q_row_stride
                                    : 0) + copy_chunk * 8;
#pragma unroll
      for (int g = 0; g < Traits::kRowChunkGroups; ++g) {
        cp_async_16(smem_q + copy_smem_offset + pass * Traits::kCopyRowsPerPass * kRowBytes + g * 128, src + g * 64,
                    row_ok && g * 8 < q_chunks_left);
      }
    }
    cp_async_commit();
    if (p.scale < 0.f) {  // |scale| on -q (exact sign flips), as the forward does
      cp_async_wait<0>();
#pragma unroll
      for (int pass = 0; pass < kBlockM / Traits::kCopyRowsPerPass; ++pass)
#pragma unroll
        for (int g = 0; g < Traits::kRowChunkGroups; ++g) {
          const uint32_t a = smem_q + copy_smem_offset + pass * Traits::kCopyRowsPerPass * kRowBytes + g * 128;
          uint4 x = ld_shared_v4(a);
          x.x ^= 0x80008000u, x.y ^= 0x80008000u, x.z ^= 0x80008000u, x.w ^= 0x80008000u;
          st_shared_v4(a, x);
        }
    }

    // ---- K/V tile copies: contiguous (batch-strided) or paged ---------------------------------
    const bool paged = p.block_table != nullptr;
    const int32_t* pages = paged ? p.block_table + tile.batch * p.block_table_batch_stride : nullptr;
    const Elem* k_base = static_cast<const Elem*>(p.k) + kv_head * p.k_head_stride +
                         (paged ? 0 : tile.batch * p.k_batch_stride) + copy_chunk * 8;
    const Elem* v_base = static_cast<const Elem*>(p.v) + kv_head * p.v_head_stride +
                         (paged ? 0 : tile.batch * p.v_batch_stride) + copy_chunk * 8;
    const int k_chunks_left = p.head_dim_qk / 8 - copy_chunk;
    const int v_chunks_left = p.head_dim_v / 8 - copy_chunk;
    const uint16_t* bias_base = static_cast<const uint16_t*>(p.mods.bias);
    const uint32_t smem_bias = smem + Traits::kSmemBytes;
    auto load_kv = [&](int n_block, int stage) {
      const uint32_t sk = smem_kv + stage * Traits::kSmemStageBytes + copy_smem_offset;
#pragma unroll
      for (int pass = 0; pass < kBlockN / Traits::kCopyRowsPerPass; ++pass) {
        const int key = n_block * kBlockN + copy_row + pass * Traits::kCopyRowsPerPass;
        const bool ok = key < seq.seqlen_k;  // rows past the end: zero-filled copies of row 0
        // The pass is straight-line: selects and one predicated block-table load, no branches.
        // Keys past the end read row 0 (their copy is zero-filled), a contiguous cache takes
        // page 0. Against the branchy form (a branch on `ok`, one on `paged`, the page_shift test):
        // page 64 shuffled 1.112 -> 1.040x of the contiguous cache at B 1 x 128k, 1.053 -> 1.030x
        // at B 32 x 4k; 1024-key pages in order 1.07 -> 1.03x (session 28, H200, CUDA-graph GPU
        // time, scripts/dev/session28_decode.sh). Shift and mask for a power-of-two page
        // (params.h's page_shift): the division's road read ~1.2x (session 26).
        const int row = ok ? key : 0;
        const bool pow2 = p.page_shift >= 0;
        const int page_index = !paged ? 0 : pow2 ? row >> p.page_shift : row / p.page_size;
        const int in_page = !paged ? row : pow2 ? row & (p.page_size - 1) : row - page_index * p.page_size;
        // A block-table entry outside the pool (bad metadata the host did not read: that is a
        // sync) is clamped into it: wrong values for that sequence, never memory outside.
        const int64_t page = paged ? min(max(__ldg(pages + page_index), 0), p.num_pages - 1) : 0;
        const int64_t k_off = page * p.k_batch_stride + int64_t(in_page) * p.k_row_stride;
        const int64_t v_off = page * p.v_batch_stride + int64_t(in_page) * p.v_row_stride;
        const uint32_t row_smem = sk + pass * Traits::kCopyRowsPerPass * kRowBytes;
#pragma unroll
        for (int g = 0; g < Traits::kRowChunkGroups; ++g) {
          cp_async_16(row_smem + g * 128, k_base + k_off + g * 64, ok && g * 8 < k_chunks_left);
          cp_async_16(row_smem + Traits::kSmemTileBytes + g * 128, v_base + v_off + g * 64,
                      ok && g * 8 < v_chunks_left);
        }
      }
      if constexpr (kMods == kModsBias) {
        // Key pairs of the 16 packed rows (consecutive threads: consecutive pairs of a row, so a
        // warp reads 128 contiguous bytes of a row, or of two). bias_view keeps the key stride 1,
        // the other strides even and the base 4-byte aligned: every pair is an aligned word; the
        // half of a pair past seqlen_k, and rows / keys past the tile, are zero-filled (they add 0
        // and the mask hides those keys).
        const uint32_t sb = smem_bias + stage * Traits::kSmemBiasStageBytes;
#pragma unroll
        for (int j = 0; j < Traits::kBiasPairsPerThread; ++j) {
          const int i = tid + j * Traits::kNThreads;
          const int r = i / (kBlockN / 2);
          const int key = n_block * kBlockN + 2 * (i % (kBlockN / 2));
          const int packed = row_begin + r;
          const int left = r < rows_here ? min(2, seq.seqlen_k - key) : 0;
          const uint16_t* src = bias_base;
          if (left > 0)
            src += bias_plane(tile.batch, kv_head * group + packed % group, p.mods.bias_batch_stride,
                              p.mods.bias_head_stride) +
                   static_cast<int64_t>(packed / group) * p.mods.bias_row_stride + key;
          cp_async_4_bytes(sb + r * Traits::kBiasRowBytes + 2 * (i % (kBlockN / 2)) * 2, src, left > 0 ? 2 * left : 0);
        }
      }
    };

    // The query rows of this thread's two fragment rows (g and g + 8), for the mask.
    const int frag_rows[1][2] = {{(row_begin + (lane >> 2)) / group, (row_begin + (lane >> 2) + 8) / group}};
    // Prologue: tiles begin .. begin + kStages - 2. One commit group per tile slot, empty or not,
    // so that "tile j landed" is always "at most kStages - 2 groups pending".
#pragma unroll
    for (int s = 0; s < kStages - 1; ++s) {
      if (range.begin + s < range.end) load_kv(range.begin + s, s);
      cp_async_commit();
    }
    for (int n = range.begin; n < range.end; ++n) {
      cp_async_wait<kStages - 2>();  // tile n (and Q) landed for this thread
      __syncthreads();               // ... for every thread; and every warp is done with tile n - 1
      const int ahead = n + kStages - 1;  // into the stage tile n - 1 used
      if (ahead < range.end) load_kv(ahead, (ahead - range.begin) % kStages);
      cp_async_commit();

      const uint32_t stage_offset = ((n - range.begin) % kStages) * Traits::kSmemStageBytes;
      float s[1][Traits::kNTiles][4];
#pragma unroll
      for (int j = 0; j < Traits::kNTiles; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) s[0][j][e] = 0.f;
      gemm_qk<Traits>(s, q_lane, k_lane + stage_offset);
      if constexpr (kMods == kModsBias) {
        // Natural units -> raw ones, as the forward's ScoreModFwd::apply (1 / |scale|); before the
        // mask, so a masked key stays -inf whatever its bias. This thread's rows g, g + 8 and key
        // pairs warp * 16 + nt * 8 + 2 (lane % 4) of the stage's bias (landed with its K/V tile).
        const float factor = 1.f / ScoreModFwd<kModsBias>::scale(p);
        const uint32_t sb = smem_bias + ((n - range.begin) % kStages) * Traits::kSmemBiasStageBytes +
                            (lane >> 2) * Traits::kBiasRowBytes + (warp * Traits::kWarpKeys + 2 * (lane & 3)) * 2;
#pragma unroll
        for (int h = 0; h < 2; ++h)
#pragma unroll
          for (int nt = 0; nt < Traits::kNTiles; ++nt) {
            const uint32_t bits = ld_shared_b32(sb + h * 8 * Traits::kBiasRowBytes + nt * 16);
            s[0][nt][2 * h] = fmaf(bias_to_float(static_cast<uint16_t>(bits), p.dtype), factor, s[0][nt][2 * h]);
            s[0][nt][2 * h + 1] = fmaf(bias_to_float(static_cast<uint16_t>(bits >> 16), p.dtype), factor, s[0][nt][2 * h + 1]);
          }
      }
      if (n >= full_end || n < full_begin) {  // a ragged end, the causal diagonal, a window's edge
        mask.apply_rows(s, frag_rows, n * kBlockN + warp * Traits::kWarpKeys + 2 * (lane & 3), -INFINITY);
      }
      softmax.update(s, o, scale_log2);
      gemm_pv<Traits>(o, s, v_lane + stage_offset);
    }
    cp_async_wait<0>();  // nothing in flight when the stages become the merge buffer
  }

  // ---- epilogue: merge the warps' softmax results, store out / lse or the split's partials --------
  float lse[2];
  // LSE in units of |scale| (q negated for a negative one); the bias kernel asks the forward's
  // ScoreModFwd::scale, the unit its bias was converted with (|scale| on every call served:
  // checks.cpp refuses scale 0 with a mask, where that function would say ln 2).
  softmax.finalize(o, kMods == kModsBias ? ScoreModFwd<kModsBias>::scale(p) : fabsf(p.scale), lse);
  __syncthreads();                           // every warp is done with the K/V stages
  float* merge_o = reinterpret_cast<float*>(smem_ptr + Traits::kSmemQBytes);
  float* merge_lse = reinterpret_cast<float*>(smem_ptr + Traits::kSmemQBytes + Traits::kSmemMergeOBytes);
  {
    const int g = lane >> 2, t = lane & 3;
    float* mine = merge_o + warp * kBlockM * Traits::kMergeStride;
#pragma unroll
    for (int d = 0; d < Traits::kDTiles; ++d) {
      *reinterpret_cast<float2*>(mine + g * Traits::kMergeStride + 8 * d + 2 * t) = make_float2(o[0][d][0], o[0][d][1]);
      *reinterpret_cast<float2*>(mine + (g + 8) * Traits::kMergeStride + 8 * d + 2 * t) =
          make_float2(o[0][d][2], o[0][d][3]);
    }
    if (t == 0) {
      // finalize() says +inf for a warp that saw no key; as a part to merge that is weight 0.
      merge_lse[warp * kBlockM + g] = lse[0] == INFINITY ? -INFINITY : lse[0];
      merge_lse[warp * kBlockM + g + 8] = lse[1] == INFINITY ? -INFINITY : lse[1];
    }
  }
  __syncthreads();

  constexpr int kThreadsPerRow = Traits::kNThreads / kBlockM;
  const int r = tid / kThreadsPerRow;
  if (r >= rows_here) return;
  const int packed = row_begin + r;
  const int q_row = packed / group;
  const int head = kv_head * group + packed % group;
  float weight[Traits::kNWarps];
  float max_lse = -INFINITY;
#pragma unroll
  for (int w = 0; w < Traits::kNWarps; ++w) max_lse = fmaxf(max_lse, merge_lse[w * kBlockM + r]);
  float weight_sum = 0.f;
#pragma unroll
  for (int w = 0; w < Traits::kNWarps; ++w) {
    weight[w] = lse_weight(merge_lse[w * kBlockM + r], max_lse);
    weight_sum += weight[w];
  }
  const float inv_sum = weight_sum > 0.f ? 1.f / weight_sum : 0.f;
  const bool final_output = p.num_splits == 1;
  // Split partials: row ((split * B + b) * Hq + head) * Sq + q_row of the workspace.
  const int64_t partial_row =
      ((static_cast<int64_t>(tile.split) * p.batch + tile.batch) * p.heads_q + head) * seq.seqlen_q + q_row;
  Elem* out = static_cast<Elem*>(p.o) + tile.batch * p.o_batch_stride + head * p.o_head_stride +
              static_cast<int64_t>(q_row) * p.o_row_stride;
  for (int c = tid % kThreadsPerRow; c * 8 < p.head_dim_v; c += kThreadsPerRow) {
    float acc[8];
#pragma unroll
    for (int e = 0; e < 8; ++e) acc[e] = 0.f;
#pragma unroll
    for (int w = 0; w < Traits::kNWarps; ++w) {
      const float* src = merge_o + (w * kBlockM + r) * Traits::kMergeStride + c * 8;
      const float4 a = *reinterpret_cast<const float4*>(src);
      const float4 b = *reinterpret_cast<const float4*>(src + 4);
      acc[0] += weight[w] * a.x, acc[1] += weight[w] * a.y, acc[2] += weight[w] * a.z, acc[3] += weight[w] * a.w;
      acc[4] += weight[w] * b.x, acc[5] += weight[w] * b.y, acc[6] += weight[w] * b.z, acc[7] += weight[w] * b.w;
    }
#pragma unroll
    for (int e = 0; e < 8; ++e) acc[e] *= inv_sum;
    if (final_output) {
      uint4 packed8;
      packed8.x = ElemTraits<Elem>::pack(acc[0], acc[1]);
      packed8.y = ElemTraits<Elem>::pack(acc[2], acc[3]);
      packed8.z = ElemTraits<Elem>::pack(acc[4], acc[5]);
      packed8.w = ElemTraits<Elem>::pack(acc[6], acc[7]);
      *reinterpret_cast<uint4*>(out + c * 8) = packed8;
    } else {
      float* dst = p.o_accum + partial_row * p.head_dim_v + c * 8;
      *reinterpret_cast<float4*>(dst) = make_float4(acc[0], acc[1], acc[2], acc[3]);
      *reinterpret_cast<float4*>(dst + 4) = make_float4(acc[4], acc[5], acc[6], acc[7]);
    }
  }
  if (tid % kThreadsPerRow == 0) {
    if (final_output) {
      if (p.lse != nullptr)
        p.lse[tile.batch * p.lse_batch_stride + head * p.lse_head_stride + q_row * p.lse_row_stride] =
            merged_lse(max_lse, weight_sum, INFINITY);
    } else {
      p.lse_accum[partial_row] = merged_lse(max_lse, weight_sum, -INFINITY);
    }
  }
}

}  // namespace decode_sm80

template <typename Traits>
__host__ __device__ __forceinline__ SplitKvScheduler decode_scheduler_sm80(const AttnFwdParams& p) {
  const int packed_rows = p.seqlen_q * (p.heads_q / p.heads_kv);
  return SplitKvScheduler{ceil_div(packed_rows, Traits::kBlockM), p.num_splits, p.heads_kv, p.batch};
}

template <typename Traits, ModsKind kMods = kModsNone>
__global__ void __launch_bounds__(Traits::kNThreads)
    flashsdpa_decode_sm80_kernel(const __grid_constant__ AttnFwdParams params) {
  extern __shared__ __align__(128) char decode_smem[];
  grid_stamp(0, 0);
  // The split combine (launched programmatically after this kernel on sm_90+) may start now: it
  // waits on the GPU for this grid's completion before reading the partials, and its few CTAs
  // (B * Hq * Sq / 4) take SM slots only once every CTA of this grid has started. Only where a
  // combine follows: a call of one split is followed by whatever comes next, the next decode call
  // among them, whose waiting CTAs would take this grid's SM slots (session 39's trigger in every
  // call: B 32 x 4k, one split, 172.4 -> 194.5 us on the H100). No-op below sm_90.
  if (params.num_splits > 1) grid_dependents_launch();
  // (decode_launch_sm80.cuh: launched programmatically on sm_90+) the previous kernel's outputs,
  // q and the caches among them, are complete and visible only past this wait; nothing of global
  // memory is read before it. A plain launch returns at once.
  grid_dependency_wait();
  const SplitKvScheduler sched = decode_scheduler_sm80<Traits>(params);
  for (WorkTile tile = sched.initial_tile(); tile.valid(); tile = sched.next_tile(tile)) {
    decode_sm80::compute_tile<Traits, kMods>(params, tile, decode_smem);
  }
  grid_stamp(0, 1);
}

}  // namespace flashsdpa
