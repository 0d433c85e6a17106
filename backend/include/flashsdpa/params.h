// params.h: the one POD contract between the host (backend/) and the kernels (cuda/).
//
// Filled in exactly one place (backend/src/api.cpp), passed to kernels by __grid_constant__ value.
// No torch, no CUDA runtime types: this header compiles in a plain C++ translation unit.
//
// Layout convention (SDPA's): q (B, Hq, Sq, Dqk), k (B, Hkv, Sk, Dqk), v (B, Hkv, Sk, Dv),
// o (B, Hq, Sq, Dv). Every tensor carries its own element strides for batch, head and row; the last
// dimension has unit stride (SDPA's transposed views qualify, so there is never a hidden copy).
//
// Varlen (packed) mode: when cu_seqlens_q != nullptr, tensors are (total, H, D); the batch strides
// are ignored and batch b owns rows [cu_seqlens_q[b], cu_seqlens_q[b+1]) of q/o/lse (likewise k/v
// with cu_seqlens_k, optionally truncated to seqused_k[b] keys). seqlen_q / seqlen_k then hold the
// maxima over the batch, which size the grid; total_q / total_k bound every offset (clamped).
#pragma once

#include <cstdint>

namespace flashsdpa {

enum class DType : int32_t { kFloat16 = 0, kBFloat16 = 1 };

// The largest head dim any family's table can hold (the sm90 forward's 512 bucket); which family
// and direction serve a head dim is the capability table's question (capabilities.cpp).
constexpr int kMaxHeadDim = 512;

// Host-and-device helpers without CUDA headers: this file also compiles in plain C++ (backend/).
#if defined(__CUDACC__)
#define FLASHSDPA_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define FLASHSDPA_HOST_DEVICE inline
#endif

// Which diagonal a window is measured from. With Sq / Sk the lengths of one sequence (per
// sequence in varlen mode), query row i sits on key column
//   kTopLeft:     i                   (SDPA's is_causal=True, causal_upper_left)
//   kBottomRight: i + Sk - Sq         (causal_lower_right, FlashAttention, a KV cache)
enum class MaskAlign : int32_t { kTopLeft = 0, kBottomRight = 1 };

// Which (query row i, key column j) pairs may attend: j < Sk and
//   diag(i) - window_left <= j <= diag(i) + window_right,   diag(i) = i (+ Sk - Sq if bottom-right)
// with -1 meaning unbounded on that side. No mask is (-1, -1); causal is (-1, 0); a sliding window
// of the last 4096 keys is (4095, 0). The host normalizes a bound that no row can reach (>= the
// longer of the two lengths) to -1, so kernels and tables see one spelling per mask.
// cuda/common/mask.cuh turns it into block ranges and element-wise masking.
struct MaskSpec {
  int32_t window_left;   // -1 = unbounded
  int32_t window_right;  // -1 = unbounded; causal is (-1, 0)
  MaskAlign align;

  FLASHSDPA_HOST_DEVICE bool is_none() const { return window_left < 0 && window_right < 0; }
  FLASHSDPA_HOST_DEVICE bool is_causal() const { return window_left < 0 && window_right == 0; }
  // A bounded left side: the "window" mask kind (a right-only bound other than 0 is one too).
  FLASHSDPA_HOST_DEVICE bool is_window() const { return !is_none() && !is_causal(); }
  FLASHSDPA_HOST_DEVICE bool has_left() const { return window_left >= 0; }
  FLASHSDPA_HOST_DEVICE bool has_right() const { return window_right >= 0; }
  // Key column of query row 0's diagonal for one sequence.
  FLASHSDPA_HOST_DEVICE int diagonal_offset(int seqlen_q, int seqlen_k) const {
    return align == MaskAlign::kBottomRight ? seqlen_k - seqlen_q : 0;
  }
};

// Score modifiers (issue 14), applied by cuda/common/score_mod.cuh in the order
//   s = scale * q.k;  s = softcap * tanh(s / softcap);  s -= slope[b, h] * |i + Sk - Sq - j|;
//   s += bias[b, h, i, j];  mask
// and a sink logit per query head in every row's softmax denominator (no value row). Zero / null
// is off; the host fills them (api.cpp) and the capability table says which families serve them.
struct ScoreMods {
  float softcap;                // > 0: logit softcapping (a compile-time switch of the kernels); 0 = off
  // Filled by the host from softcap and scale, so that the kernels read them from the constant
  // bank as FMUL / FFMA operands instead of holding them in registers (the d128 kernels sit at
  // the 255-register cap): scale / softcap (the tanh's argument per unit of q.k; the forward
  // takes its absolute value, its q being negated for a negative scale) and softcap * log2(e).
  float softcap_tanh_scale;
  float softcap_log2;
  const float* alibi_slopes;    // float32, slope of (batch b, query head h) at b * alibi_batch_stride + h
  int64_t alibi_batch_stride;   // 0: one slope per head (shape (Hq,)); Hq: per batch (shape (B, Hq))
  const float* sinks;           // float32 (Hq,), natural-log logits; nullptr = no sinks
  // Additive attention bias (SDPA's attn_mask; a boolean mask arrives as 0 / -inf), natural units,
  // in the call's dtype, broadcast to (B, Hq, Sq, Sk): element (b, h, i, j) of a dense problem at
  // b * bias_batch_stride + h * bias_head_stride + i * bias_row_stride + j (a 0 stride broadcasts;
  // the key dimension has unit stride). Kernels read only i < Sq, j < Sk. nullptr = none.
  const void* bias;
  int64_t bias_batch_stride, bias_head_stride, bias_row_stride;
  // The bias's summary (issue 14's tile skipping; cuda/common/bias_cells.cuh): one byte per cell of
  // 64 queries x 16 keys, bit 0 "some element is not -inf" (visible), bit 1 "some element is not 0",
  // elements past Sq / Sk counting as neither. Cell (b, h, qc, kc) at b * batch + h * head + qc * row
  // + kc (0 strides broadcast; rows padded to 16 cells and 16-byte aligned, checks.cpp). Computed by
  // Python in the call's stream on every call (ops_masks.bias_cells); nullptr = no summary (every
  // tile loads and adds its bias; a deterministic backward ignores it: api.cpp).
  const uint8_t* bias_cells;
  int64_t bias_cells_batch_stride, bias_cells_head_stride, bias_cells_row_stride;

  FLASHSDPA_HOST_DEVICE bool any() const {
    return softcap > 0.f || alibi_slopes != nullptr || sinks != nullptr || bias != nullptr;
  }
};

// Dropout on P with PyTorch's FlashAttention-2 mask (issue 14; cuda/common/dropout.cuh has the
// scheme, docs/kernel_notes_dropout.md its sources). Off when threshold_plus1 == 0 (zeroed params).
// The Philox seed and offset are the values below, or, where a pointer is set, read from device
// memory when the kernel starts (CUDA-graph capture: PyTorch's rng state tensor, written by the
// generator's graph-safe path on every replay): seed = seed_ptr ? *seed_ptr : seed,
// offset = (offset_ptr ? *offset_ptr : 0) + offset.
struct DropoutSpec {
  uint32_t threshold_plus1;  // floor((1 - p) * 255) + 1: a random byte b keeps its element when b < this; 0 = off
  float rp_keep;             // 1 / (1 - p): the kept P's scale (applied to O, dV, dS)
  uint64_t seed;
  uint64_t offset;
  const uint64_t* seed_ptr;    // nullptr: use seed
  const uint64_t* offset_ptr;  // nullptr: use offset alone
  // The forward writes the resolved (seed, offset) here (PyTorch's uint64[2] rng state, which its
  // backward reads), from one thread; nullptr: not wanted (the caller's tensor already holds them).
  uint64_t* rng_state;

  FLASHSDPA_HOST_DEVICE bool enabled() const { return threshold_plus1 != 0u; }
};

struct AttnFwdParams {
  const void* q;
  const void* k;
  const void* v;
  void* o;
  float* lse;  // natural log, float32; (B, Hq, Sq) dense or (Hq, total_q) varlen, via the strides below

  int64_t q_batch_stride, q_head_stride, q_row_stride;
  int64_t k_batch_stride, k_head_stride, k_row_stride;
  int64_t v_batch_stride, v_head_stride, v_row_stride;
  int64_t o_batch_stride, o_head_stride, o_row_stride;
  int64_t lse_batch_stride, lse_head_stride, lse_row_stride;

  int32_t batch;
  int32_t heads_q;
  int32_t heads_kv;      // heads_q % heads_kv == 0; query head h reads kv head h / (heads_q / heads_kv)
  int32_t seqlen_q;      // dense: the length; varlen: the maximum over the batch
  int32_t seqlen_k;
  int32_t head_dim_qk;   // multiple of 8, <= kMaxHeadDim
  int32_t head_dim_v;    // multiple of 8, <= kMaxHeadDim
  int32_t head_dim_bucket;  // the family's compile-time kHeadDim serving both, chosen by the host

  const int32_t* cu_seqlens_q;  // nullptr: dense. Else int32[batch + 1], device memory
  const int32_t* cu_seqlens_k;  // set iff cu_seqlens_q is set
  const int32_t* seqused_k;     // optional int32[batch]: keys actually used per sequence (varlen or dense)
  // Added to every seqused_k[b] (0 but on the decode path): the rows a KV-cache call appends before
  // attending, so that its seqused_k is the caller's cache_seqlens as they are, not a tensor
  // cache_seqlens + Snew made by one more device add (a kernel and ~5 us of host time a call).
  int32_t seqused_k_add;
  // Varlen: the packed rows of q/o/lse/dq (total_q) and of k/v/dk/dv (total_k); -1 when dense. The
  // offsets above live in device memory the host does not read (that would synchronise), so the
  // kernels clamp every offset to these bounds (cuda/common/seqlen.cuh): bad metadata gives wrong
  // rows, never an access outside the tensors.
  int64_t total_q;
  int64_t total_k;

  float scale;       // softmax scale applied to q.k
  float scale_log2;  // scale * log2(e): scores go through exp2, so the multiply folds into one FFMA

  MaskSpec mask;
  ScoreMods mods;
  DropoutSpec dropout;
  DType dtype;
  // The forward's workspace: caller-allocated (torch's caching allocator), at least the bytes the
  // host reports for the call (_C.fwd_workspace_bytes; 0 = none wanted), nullptr = none. The sm90
  // forward's launcher carves it (fwd_launch_sm90.cuh) into the dynamic schedule's tile counter
  // (masked calls) or the split tail's tickets and slots (unmasked d128: tile_scheduler.cuh's
  // TailSplit) and zeroes what must start at zero with one memset on the stream; without it the
  // kernel runs its static schedule. Other kernels ignore it.
  void* workspace;
  int64_t workspace_bytes;
  // Set by the sm90 launcher from the workspace, never by the caller: the dynamic schedule's
  // counter (fwd_kernel_sm90.cuh's PersistentTileScheduler: tiles handed out), nullptr = static.
  int32_t* tile_counter;
  // Facts of the launch device, filled by the host launcher (backend/src/launch.cpp):
  int32_t num_sms;           // schedulers may size persistent grids from it
  int32_t cc_major;          // compute capability major: sm_90 code takes more shared memory
  int32_t smem_optin_bytes;  // dynamic shared memory a block may opt in to: picks the tiles

  // ---- the decode path (split-KV, GQA-packed, paged; cuda/<family>/decode_*, issue 11) ----------
  // Set only by a decode call (num_splits >= 1); the other kernels never read these fields.
  // Paged K/V: k / v point at (num_pages, page_size, Hkv, D) pools, k/v_batch_stride is then the
  // page stride, and key j of sequence b lives in page block_table[b * block_table_batch_stride +
  // j / page_size] at row j % page_size. block_table == nullptr: contiguous (batch-strided) K/V.
  const int32_t* block_table;
  int64_t block_table_batch_stride;
  int32_t page_size;
  int32_t num_pages;  // pages in the pool: the kernel clamps every block-table entry to [0, num_pages)
  // log2(page_size) when it is a power of two (16 .. 1024: a serving engine's sizes), else -1: the
  // kernel then finds a key's page by shift and mask instead of an integer division (tens of
  // instructions per copied row, on the path from one tile's wait to the next tile's copies).
  int32_t page_shift;
  // Split-KV: the keys of one (batch, kv head) are cut into num_splits ranges of key blocks, one
  // CTA each. num_splits == 1 writes o / lse directly; > 1 writes float32 partials to the
  // caller-allocated workspace (the host reports its size: backend/src/decode.cpp), which the
  // combine kernel (cuda/common/split_combine.cuh) merges into o / lse:
  //   o_accum   [num_splits, batch, heads_q, seqlen_q, head_dim_v]  (normalized partial outputs)
  //   lse_accum [num_splits, batch, heads_q, seqlen_q]              (natural log; -inf: no key)
  int32_t num_splits;
  float* o_accum;
  float* lse_accum;
};

// The most splits of a decode call: flash_attn's bound; the combine kernel holds one weight per
// split per row in registers (4 per lane) and the host's heuristic and checks stop there.
constexpr int kMaxSplits = 128;

// Backward: dO, and the forward's O and LSE in; dQ, dK, dV out. The host reports the workspace
// bytes (api.cpp's workspace_layout, from the bucket _C.select reports) and the caller allocates them;
// the kernels zero what they need.
struct AttnBwdParams : AttnFwdParams {
  const void* dout;
  void* dq;
  void* dk;
  void* dv;

  int64_t dout_batch_stride, dout_head_stride, dout_row_stride;
  int64_t dq_batch_stride, dq_head_stride, dq_row_stride;
  int64_t dk_batch_stride, dk_head_stride, dk_row_stride;
  int64_t dv_batch_stride, dv_head_stride, dv_row_stride;

  // Workspace: two caller-allocated buffers, sized and checked by backend/src/api.cpp
  // (WorkspaceLayout), the sizes reported to Python by _C.bwd_plan:
  float* dq_accum;  // float32 dQ accumulator, rows x Hq x head_dim_bucket, zeroed by the preprocess kernel
  float* delta;     // float32 rowsum(dO * O), rows x Hq
  // dq_accum holds head_dim_bucket floats per row of delta: its strides are delta's times the
  // bucket, set by the launcher with the family it picks (launch.cpp).
  int64_t dq_accum_row_stride, dq_accum_head_stride, dq_accum_batch_stride;
  int64_t delta_row_stride, delta_head_stride, delta_batch_stride;

  // Gradients of the score modifiers (float32, caller-zeroed: the kernels add into them), nullptr
  // when not wanted: d_alibi_slopes has alibi_slopes' layout, d_sinks (Hq,).
  float* d_alibi_slopes;
  float* d_sinks;
  // The bias's gradient dS (the final score's), dense (B, Hq, Sq, Sk) in the call's dtype at these
  // strides (unit key stride), caller-zeroed: each element a tile visits is stored once (plain
  // stores), elements no tile visits (fully masked blocks) stay 0. nullptr: not wanted.
  void* d_bias;
  int64_t d_bias_batch_stride, d_bias_head_stride, d_bias_row_stride;
  // With either: per query row, sum_j P dP (delta computed exactly: rowsum(dO * O) from the rounded
  // O is off by ~1e-2 at |delta| ~ 8 in bf16, which the sinks' and slopes' gradients sum over whole
  // heads) and, for the slopes, sum_j P |distance|; delta's layout, in its workspace buffer (api.cpp),
  // zeroed by the preprocess, added by the main kernel, read by the postprocess. nullptr otherwise.
  float* row_pdp;
  float* row_pdist;

  bool deterministic;  // the caller asked for bitwise-reproducible gradients (families that can: dq_semaphore)
  // Ordered or first-stored dQ (sm90 family): int32 per (batch, head_q, query block of dq_sem_rows
  // rows), dense index (batch * heads_q + head) * ceil(seqlen_q / dq_sem_rows) + block, zeroed by
  // the preprocess (the workspace has a word per 64 rows). In
  // deterministic mode the key blocks add their dQ tiles to a query block in a fixed order (the
  // grid's launch order) by waiting for their predecessor's mark; with dq_first_store the first
  // one stores. nullptr: neither.
  int32_t* dq_semaphore;
  // The main kernel stores (not adds) the first dQ tile of each query block, so the preprocess
  // zeroes only the blocks no key block sees (BlockMask::visited_by_key_blocks); needs
  // dq_semaphore (a query block's word turns non-zero once its first tile has landed). The sm90
  // family's (FamilyCaps::dq_first_store): it saves the preprocess writing every dq_accum byte.
  bool dq_first_store;
  // The query rows one dq_semaphore word counts: 64 (kPrePostRows), or the sm90 backward kernel's
  // kBlockM where its dQ tile is taller (the d64 tall step: 128), set by its launcher; the
  // preprocess's first-store zeroing and the postprocess's counts read it. Any other value reads as 64.
  int32_t dq_sem_rows;
  int32_t bwd_tile;    // the family's backward tile, chosen once by the host (FamilyCaps::bwd_plan)
};

// The bias-summary kernel's arguments (cuda/common/bias_cells_summary.cu; filled by
// backend/src/api.cpp's bias_cells from _C.bias_cells, called by ops_masks.bias_cells): it writes
// the uint8 (batch, heads, cell_rows, row_cells) summary that ScoreMods::bias_cells points to, from
// the bias's own (un-broadcast) shape. Sizes and strides in elements; a size-1 dim has stride 0.
struct BiasCellsParams {
  enum ElementType : int32_t { kFloat16 = 0, kBFloat16 = 1, kFloat32 = 2 };  // DType's codes, plus float32
  static constexpr uint32_t kVisible = 1, kNonZero = 2;                        // common/bias_cells.cuh's bits

  const void* bias;
  int32_t dtype;  // ElementType
  // The bias's sizes: rows 1 (a broadcast query dim: one cell row) or seqlen_q, keys 1 (a
  // broadcast key dim: key_stride 0) or seqlen_k.
  int32_t batch, heads, rows, keys;
  int64_t batch_stride, head_stride, row_stride, key_stride;
  int32_t seqlen_q, seqlen_k;
  int32_t cell_rows;  // 1 when rows == 1, else ceil(seqlen_q / 64)
  int32_t row_cells;  // ceil(seqlen_k / 256) * 16: cells per row, padded to 16 (every byte written)
  uint8_t* cells;     // contiguous (batch, heads, cell_rows, row_cells)
};

}  // namespace flashsdpa
