// checks.cpp: see checks.h. One predicate per rule; the message says which argument broke which limit.
#include "checks.h"

#include <climits>
#include <cmath>
#include <stdexcept>
#include <utility>

#include "api.h"
#include "build_config.h"
#include "capabilities.h"
#include "flashsdpa/kernels.h"

namespace flashsdpa {
namespace {

[[noreturn]] void fail(const std::string& message) { throw std::invalid_argument(message); }

std::string str(int64_t v) { return std::to_string(v); }

void check_positive_sizes(const AttnFwdParams& p) {
  // Empty problems never reach the kernels: the Python layer returns empty outputs / zero grads
  // for them, so a kernel can assume at least one row and one key per launch.
  if (p.batch < 1) fail("batch=" + str(p.batch) + ": must be >= 1 (empty problems are handled in Python)");
  if (p.heads_q < 1) fail("heads_q=" + str(p.heads_q) + ": must be >= 1");
  if (p.heads_kv < 1) fail("heads_kv=" + str(p.heads_kv) + ": must be >= 1");
  if (p.seqlen_q < 1) fail("seqlen_q=" + str(p.seqlen_q) + ": must be >= 1 (empty problems are handled in Python)");
  if (p.seqlen_k < 1) fail("seqlen_k=" + str(p.seqlen_k) + ": must be >= 1 (empty problems are handled in Python)");
}

void check_gqa(const AttnFwdParams& p) {
  if (p.heads_q % p.heads_kv != 0)
    fail("heads_q=" + str(p.heads_q) + ", heads_kv=" + str(p.heads_kv) +
         ": the number of query heads must be a multiple of the number of key/value heads");
}

void check_head_dim(const char* name, int d) {
  if (d <= 0 || d % 8 != 0) fail(std::string(name) + "=" + str(d) + ": must be a positive multiple of 8");
  if (d > kMaxHeadDim)
    fail(std::string(name) + "=" + str(d) + ": exceeds the maximum head dim " + str(kMaxHeadDim));
}

// Device-independent: some compiled family serves this dtype, head-dim pair and mask at all
// (the device's own limits are judged when launch.cpp picks the family).
void check_served(const AttnFwdParams& p, Direction direction) {
  const Problem problem{0, 0, p.dtype, p.head_dim_qk, p.head_dim_v, mask_kind(p.mask), layout_of(p), direction,
                        false, feature_bits(p)};
  if (select_family(problem) == nullptr) fail(refusal(problem));
}

// 16-byte cp.async needs every row start 16-byte aligned: the base pointer, and every batch, head
// and row stride a multiple of 8 two-byte elements.
void check_aligned(const char* name, const void* ptr, int64_t sb, int64_t sh, int64_t sr) {
  if (ptr == nullptr) fail(std::string(name) + ": null data pointer");
  if (reinterpret_cast<uintptr_t>(ptr) % 16 != 0)
    fail(std::string(name) + ": data pointer must be 16-byte aligned");
  if (sb % 8 != 0 || sh % 8 != 0 || sr % 8 != 0)
    fail(std::string(name) + " strides (batch=" + str(sb) + ", head=" + str(sh) + ", row=" + str(sr) +
         "): must be multiples of 8 elements (16 bytes)");
}

void check_dtype(DType d) {
  if (d != DType::kFloat16 && d != DType::kBFloat16) fail("dtype=" + str(int(d)) + ": must be 0 (float16) or 1 (bfloat16)");
}

void check_mask(const MaskSpec& m) {
  if (m.window_left < -1 || m.window_right < -1)
    fail("window=(" + str(m.window_left) + ", " + str(m.window_right) + "): each side must be >= 0, or -1 (unbounded)");
  if (m.align != MaskAlign::kTopLeft && m.align != MaskAlign::kBottomRight)
    fail("mask alignment=" + str(int(m.align)) + ": must be 0 (top-left) or 1 (bottom-right)");
}

void check_varlen(const AttnFwdParams& p) {
  if ((p.cu_seqlens_q == nullptr) != (p.cu_seqlens_k == nullptr))
    fail("cu_seqlens_q and cu_seqlens_k: give both or neither");
  // The kernels clamp offsets to the packed rows; without them there is no bound to clamp to.
  if (p.cu_seqlens_q != nullptr && (p.total_q < 0 || p.total_k < 0))
    fail("total_q=" + str(p.total_q) + ", total_k=" + str(p.total_k) +
         ": varlen needs the packed rows of query and key (>= 0), the bounds of every cu_seqlens offset");
}

// The forward may skip the LSE (lse = 0: a caller with no backward to feed); the backward reads it.
void check_lse_given(const AttnFwdParams& p) {
  if (p.lse == nullptr) fail("lse: null data pointer (the backward reads the forward's LSE)");
}

// The decode path: dense rows only (its lengths come from seqused_k), a page size for a block table.
void check_decode(const AttnFwdParams& p) {
  if (p.num_splits == 0) return;
  if (p.cu_seqlens_q != nullptr) fail("num_splits=" + str(p.num_splits) + ": the decode path takes no cu_seqlens");
  if (p.seqused_k_add < 0 || (p.seqused_k_add > 0 && p.seqused_k == nullptr))
    fail("seqused_k_add=" + str(p.seqused_k_add) + ": needs >= 0, and a seqused_k to add to");
  if (p.block_table != nullptr) {
    if (reinterpret_cast<uintptr_t>(p.block_table) % 4 != 0) fail("block_table: data pointer must be 4-byte aligned");
    if (p.page_size < 1) fail("page_size=" + str(p.page_size) + ": must be >= 1 with a block table");
    if (p.block_table_batch_stride < 0) fail("block_table batch stride=" + str(p.block_table_batch_stride) + ": must be >= 0");
    if (p.num_pages < 1) fail("num_pages=" + str(p.num_pages) + ": a block table needs a pool of at least one page");
  }
}

// The score modifiers (params.h's ScoreMods). A zero scale without softcap has no raw-score unit
// to carry ALiBi in the backward (common/score_mod.cuh), so that degenerate pair is refused in
// both directions, the same way, rather than served forward only.
void check_mods(const AttnFwdParams& p) {
  const ScoreMods& m = p.mods;
  if (!(m.softcap >= 0.f) || m.softcap == INFINITY)
    fail("softcap=" + std::to_string(m.softcap) + ": must be finite and >= 0 (0 = off)");
  for (const auto& [name, ptr] : {std::pair<const char*, const float*>{"alibi_slopes", m.alibi_slopes},
                                  std::pair<const char*, const float*>{"sinks", m.sinks}}) {
    if (reinterpret_cast<uintptr_t>(ptr) % 4 != 0) fail(std::string(name) + ": data pointer must be 4-byte aligned");
  }
  if (m.alibi_slopes != nullptr && m.alibi_batch_stride != 0 && m.alibi_batch_stride < p.heads_q)
    fail("alibi_batch_stride=" + str(m.alibi_batch_stride) + ": must be 0 (slopes (Hq,)) or >= heads_q=" +
         str(p.heads_q) + " (slopes (B, Hq))");
  if (m.alibi_slopes != nullptr && p.scale == 0.f && !(m.softcap > 0.f))
    fail("scale=0 with alibi_slopes: not served (ALiBi is applied in units of the scale)");
  if (m.bias != nullptr) {
    // The kernels read 16-bit elements at any (b, h, i, j) < (B, Hq, Sq, Sk): dense layout only.
    if (p.cu_seqlens_q != nullptr) fail("attn_mask: not served with cu_seqlens (varlen); dense calls only");
    // The decode path takes it on dense decode-sized calls (decode_kernel_sm80.cuh's kModsBias);
    // a KV-cache call's keys are the cache's rows (paged or per-sequence lengths), which no bias
    // layout of ours names: refused.
    if (p.num_splits >= 1 && (p.block_table != nullptr || p.seqused_k != nullptr))
      fail("attn_mask: not served with a KV cache (the decode path takes it on dense calls)");
    // The kernels load two adjacent keys at once (score_mod.cuh's add_bias): 4-byte pairs.
    if (reinterpret_cast<uintptr_t>(m.bias) % 4 != 0) fail("attn_mask: data pointer must be 4-byte aligned");
    if (m.bias_batch_stride < 0 || m.bias_head_stride < 0 || m.bias_row_stride < 0 ||
        (m.bias_batch_stride | m.bias_head_stride | m.bias_row_stride) % 2 != 0)
      fail("attn_mask strides (batch=" + str(m.bias_batch_stride) + ", head=" + str(m.bias_head_stride) +
           ", row=" + str(m.bias_row_stride) + "): must be even and >= 0 (0 broadcasts; the key dimension has unit "
           "stride)");
    if (p.scale == 0.f && !(m.softcap > 0.f))
      fail("scale=0 with attn_mask: not served (the bias is applied in units of the scale)");
    // The softcap's backward recovers tanh from P (score_mod.cuh), which would need the bias read
    // again per score: +184 bytes of spill stores in the sm90 d128 kMods backward (ptxas -v).
    if (m.softcap > 0.f) fail("softcap with attn_mask: not served yet (the backward's tanh recovery)");
  }
  if (m.bias_cells != nullptr) {
    if (m.bias == nullptr) fail("bias_cells: given without attn_mask");
    // A tile reads its kBlockN / 16 cells of a row as 4-byte words (common/bias_cells.cuh); rows
    // padded to 16 cells keep every block's words inside the row.
    if (reinterpret_cast<uintptr_t>(m.bias_cells) % 16 != 0) fail("bias_cells: data pointer must be 16-byte aligned");
    if (m.bias_cells_batch_stride < 0 || m.bias_cells_head_stride < 0 || m.bias_cells_row_stride < 0 ||
        (m.bias_cells_batch_stride | m.bias_cells_head_stride | m.bias_cells_row_stride) % 16 != 0)
      fail("bias_cells strides (batch=" + str(m.bias_cells_batch_stride) + ", head=" + str(m.bias_cells_head_stride) +
           ", row=" + str(m.bias_cells_row_stride) + "): must be multiples of 16 and >= 0 (0 broadcasts)");
  }
}

void check_common(const AttnFwdParams& p, Direction direction) {
  check_positive_sizes(p);
  check_gqa(p);
  check_head_dim("head_dim_qk", p.head_dim_qk);
  check_head_dim("head_dim_v", p.head_dim_v);
  check_dtype(p.dtype);
  check_mask(p.mask);
  check_varlen(p);
  check_decode(p);
  check_mods(p);
  check_served(p, direction);
  check_aligned("q", p.q, p.q_batch_stride, p.q_head_stride, p.q_row_stride);
  check_aligned("k", p.k, p.k_batch_stride, p.k_head_stride, p.k_row_stride);
  check_aligned("v", p.v, p.v_batch_stride, p.v_head_stride, p.v_row_stride);
  check_aligned("out", p.o, p.o_batch_stride, p.o_head_stride, p.o_row_stride);
}

}  // namespace

void check_fwd_params(const AttnFwdParams& p) { check_common(p, Direction::kForward); }

void check_bwd_params(const AttnBwdParams& p) {
  check_common(p, Direction::kBackward);
  check_lse_given(p);
  check_aligned("grad_out", p.dout, p.dout_batch_stride, p.dout_head_stride, p.dout_row_stride);
  check_aligned("grad_query", p.dq, p.dq_batch_stride, p.dq_head_stride, p.dq_row_stride);
  check_aligned("grad_key", p.dk, p.dk_batch_stride, p.dk_head_stride, p.dk_row_stride);
  check_aligned("grad_value", p.dv, p.dv_batch_stride, p.dv_head_stride, p.dv_row_stride);
  if (p.d_alibi_slopes != nullptr && p.mods.alibi_slopes == nullptr)
    fail("d_alibi_slopes: given without alibi_slopes");
  if (p.d_sinks != nullptr && p.mods.sinks == nullptr) fail("d_sinks: given without sinks");
  if (p.d_bias != nullptr && p.mods.bias == nullptr) fail("d_bias (grad of attn_mask): given without attn_mask");
  if (reinterpret_cast<uintptr_t>(p.d_bias) % 2 != 0) fail("d_bias (grad of attn_mask): data pointer must be 2-byte aligned");
}

// ---- _C.bias_cells (the bias summary's kernel, cuda/common/bias_cells_summary.cu) ----------------

namespace {

void check_bias_cells_dtype(const BiasCellsSpec& s) {
  if (s.dtype < BiasCellsParams::kFloat16 || s.dtype > BiasCellsParams::kFloat32)
    fail("dtype=" + str(s.dtype) + ": must be 0 (float16), 1 (bfloat16) or 2 (float32)");
  const int64_t bytes = s.dtype == BiasCellsParams::kFloat32 ? 4 : 2;
  if (s.bias == 0) fail("bias: null data pointer");
  if (s.bias % bytes != 0) fail("bias: data pointer must be " + str(bytes) + "-byte aligned (its element size)");
  if (s.cells == 0) fail("cells: null data pointer");
}

// Lengths and sizes fit the kernel's int32 fields; the query / key sizes are the problem's
// lengths or 1 (broadcast), as ops_masks._check_bias guarantees for SDPA's masks.
void check_bias_cells_sizes(const BiasCellsSpec& s) {
  for (const auto& [name, v] : {std::pair<const char*, int64_t>{"seqlen_q", s.seqlen_q}, {"seqlen_k", s.seqlen_k},
                                {"sizes[0] (batch)", s.sizes[0]}, {"sizes[1] (heads)", s.sizes[1]}}) {
    if (v < 1 || v > INT32_MAX) fail(std::string(name) + "=" + str(v) + ": must be in [1, 2^31 - 1]");
  }
  if (s.sizes[2] != 1 && s.sizes[2] != s.seqlen_q)
    fail("sizes[2] (query rows)=" + str(s.sizes[2]) + ": must be 1 (broadcast) or seqlen_q=" + str(s.seqlen_q));
  if (s.sizes[3] != 1 && s.sizes[3] != s.seqlen_k)
    fail("sizes[3] (keys)=" + str(s.sizes[3]) + ": must be 1 (broadcast) or seqlen_k=" + str(s.seqlen_k));
  for (int d = 0; d < 4; ++d) {
    if (s.strides[d] < 0) fail("strides[" + str(d) + "]=" + str(s.strides[d]) + ": must be >= 0");
  }
  if (s.device < 0) fail("device=" + str(s.device) + ": must be a CUDA device index >= 0");
}

// One CTA per summary row (grid.x <= 2^31 - 1) and the caller's buffer holds every byte written.
void check_bias_cells_output(const BiasCellsSpec& s) {
  const int64_t rows = s.sizes[0] * s.sizes[1] * bias_cells_rows(s.sizes[2], s.seqlen_q);
  if (rows > INT32_MAX)
    fail("summary rows (batch x heads x ceil(seqlen_q / 64))=" + str(rows) + ": must be <= 2^31 - 1 (the grid's x limit)");
  const int64_t need = rows * bias_cells_row_cells(s.seqlen_k);
  if (s.cells_bytes < need)
    fail("cells_bytes=" + str(s.cells_bytes) + ": the summary (" + str(s.sizes[0]) + ", " + str(s.sizes[1]) + ", " +
         str(bias_cells_rows(s.sizes[2], s.seqlen_q)) + ", " + str(bias_cells_row_cells(s.seqlen_k)) + ") needs " +
         str(need) + " bytes");
}

}  // namespace

void check_bias_cells_spec(const BiasCellsSpec& s) {
  check_bias_cells_dtype(s);
  check_bias_cells_sizes(s);
  check_bias_cells_output(s);
}

}  // namespace flashsdpa
