// api.cpp: fills AttnFwdParams / AttnBwdParams from a spec (the only place that does), runs the
// checks, picks the family and launches. See api.h.
#include "api.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "capabilities.h"
#include "checks.h"
#include "decode.h"
#include "launch.h"

namespace flashsdpa {
namespace {

constexpr float kLog2e = 1.4426950408889634f;
constexpr int64_t kWorkspaceAlign = 256;

template <typename T>
T* ptr(uintptr_t p) {
  return reinterpret_cast<T*>(p);
}

// A window side that no row can reach is unbounded: with lengths up to L = max(Sq, Sk) (the
// maxima in varlen mode) every |diag(i) - j| < L, so a bound >= L never masks anything. One
// spelling per mask keeps kernels' integer math small and the mask kind exact (causal stays causal).
int32_t normalized_side(int32_t side, int32_t longest) { return side >= longest ? -1 : side; }

// The part both directions share: the forward's tensors, sizes, mask and scale.
void fill_common(AttnFwdParams& p, const FwdSpec& s) {
  p = AttnFwdParams{};
  p.q = ptr<const void>(s.q.ptr);
  p.k = ptr<const void>(s.k.ptr);
  p.v = ptr<const void>(s.v.ptr);
  p.o = ptr<void>(s.out.ptr);
  p.lse = ptr<float>(s.lse.ptr);
  p.q_batch_stride = s.q.strides[0], p.q_head_stride = s.q.strides[1], p.q_row_stride = s.q.strides[2];
  p.k_batch_stride = s.k.strides[0], p.k_head_stride = s.k.strides[1], p.k_row_stride = s.k.strides[2];
  p.v_batch_stride = s.v.strides[0], p.v_head_stride = s.v.strides[1], p.v_row_stride = s.v.strides[2];
  p.o_batch_stride = s.out.strides[0], p.o_head_stride = s.out.strides[1], p.o_row_stride = s.out.strides[2];
  p.lse_batch_stride = s.lse.strides[0], p.lse_head_stride = s.lse.strides[1], p.lse_row_stride = s.lse.strides[2];
  p.batch = s.shape.batch;
  p.heads_q = s.shape.heads_q;
  p.heads_kv = s.shape.heads_kv;
  p.seqlen_q = s.shape.seqlen_q;
  p.seqlen_k = s.shape.seqlen_k;
  p.head_dim_qk = s.shape.head_dim_qk;
  p.head_dim_v = s.shape.head_dim_v;
  p.cu_seqlens_q = ptr<const int32_t>(s.varlen.cu_seqlens_q);
  p.cu_seqlens_k = ptr<const int32_t>(s.varlen.cu_seqlens_k);
  p.seqused_k = ptr<const int32_t>(s.varlen.seqused_k);
  p.total_q = s.varlen.total_q;
  p.total_k = s.varlen.total_k;
  p.scale = s.scale;
  p.scale_log2 = s.scale * kLog2e;
  const int32_t longest = std::max(s.shape.seqlen_q, s.shape.seqlen_k);
  p.mask = MaskSpec{normalized_side(s.mask.window_left, longest), normalized_side(s.mask.window_right, longest),
                    s.mask.align};
  const bool softcap = s.mods.softcap > 0.f;
  p.mods = ScoreMods{s.mods.softcap, softcap ? s.scale / s.mods.softcap : 0.f, s.mods.softcap * kLog2e,
                     ptr<const float>(s.mods.alibi_slopes), s.mods.alibi_batch_stride, ptr<const float>(s.mods.sinks),
                     ptr<const void>(s.mods.bias), s.mods.bias_batch_stride, s.mods.bias_head_stride,
                     s.mods.bias_row_stride, ptr<const uint8_t>(s.mods.bias_cells), s.mods.bias_cells_batch_stride,
                     s.mods.bias_cells_head_stride, s.mods.bias_cells_row_stride};
  if (s.dropout.p > 0.f) {
    // FlashAttention-2's arithmetic (flash_api.cpp), in float32: keep = 1 - p, the byte threshold
    // floor(keep * 255) (kept when a byte is <= it), the kept values' scale 1 / keep.
    const float keep = 1.f - s.dropout.p;
    p.dropout.threshold_plus1 = static_cast<uint32_t>(std::floor(keep * 255.f)) + 1u;
    p.dropout.rp_keep = 1.f / keep;
    p.dropout.seed = s.dropout.seed;
    p.dropout.offset = s.dropout.offset;
    p.dropout.seed_ptr = ptr<const uint64_t>(s.dropout.seed_ptr);
    p.dropout.offset_ptr = ptr<const uint64_t>(s.dropout.offset_ptr);
    p.dropout.rng_state = ptr<uint64_t>(s.dropout.rng_state);
  }
  p.dtype = static_cast<DType>(s.dtype);
  p.workspace = ptr<void>(s.workspace);
  p.workspace_bytes = s.workspace != 0 ? s.workspace_bytes : 0;
}

void set_tensor(const TensorArg& t, const void*& p, int64_t& sb, int64_t& sh, int64_t& sr) {
  p = ptr<const void>(t.ptr);
  sb = t.strides[0], sh = t.strides[1], sr = t.strides[2];
}
void set_tensor(const TensorArg& t, void*& p, int64_t& sb, int64_t& sh, int64_t& sr) {
  p = ptr<void>(t.ptr);
  sb = t.strides[0], sh = t.strides[1], sr = t.strides[2];
}

// Workspace rows of one head: its queries (dense), or every packed query row (varlen).
int64_t rows_per_head(const ProblemShape& shape, int64_t total_q) { return total_q >= 0 ? total_q : shape.seqlen_q; }

}  // namespace

// Two buffers rather than one carved buffer so that a caching allocator accounts them as PyTorch's
// own flash backward does: one 129 MiB request (d = 128, S = 16k, 16 heads) lands in a 130 MiB
// segment whose 1 MiB remainder is too small to split off, and counted 1 MiB more.
WorkspaceLayout workspace_layout(const ProblemShape& shape, int64_t total_q, int bucket, bool mod_rows) {
  WorkspaceLayout w{};
  const bool varlen = total_q >= 0;
  const int64_t batches = varlen ? 1 : shape.batch;
  w.rows_per_head = rows_per_head(shape, total_q);
  const int64_t rows = w.delta_floats = batches * shape.heads_q * w.rows_per_head;
  w.dq_accum_bytes = rows * bucket * int64_t(sizeof(float));
  // Deterministic dQ (params.h's dq_semaphore): one int32 per (batch, head, 64-row query block),
  // dense layouts only (the family that orders its adds serves no varlen), after delta's floats.
  w.semaphore_bytes = varlen ? 0 : shape.batch * shape.heads_q * ((shape.seqlen_q + 63) / 64) * int64_t(sizeof(int32_t));
  // With the modifiers' gradients, row_pdp and row_pdist (params.h) follow delta: 3 floats a row.
  w.delta_bytes = (mod_rows ? 3 : 1) * rows * int64_t(sizeof(float)) + w.semaphore_bytes;
  return w;
}

// The decode path's fields (spec.decode.num_splits >= 1), and its workspace checked against the
// bytes decode_plan reports for that split count.
static void fill_decode(AttnFwdParams& p, const FwdSpec& s) {
  const DecodeArgs& d = s.decode;
  p.num_splits = d.num_splits;
  p.block_table = ptr<const int32_t>(d.block_table);
  p.block_table_batch_stride = d.block_table_batch_stride;
  p.page_size = d.page_size;
  p.num_pages = d.num_pages;
  p.page_shift = -1;
  for (int s = 0; s < 31; ++s)
    if (d.page_size == (1 << s)) p.page_shift = s;
  p.seqused_k_add = d.seqused_k_add;
  p.o_accum = ptr<float>(d.o_accum);
  p.lse_accum = ptr<float>(d.lse_accum);
  if (d.num_splits <= 1) return;
  int64_t o_bytes = 0, lse_bytes = 0;
  decode_workspace(DecodeShape{s.shape.batch, s.shape.heads_q, s.shape.heads_kv, s.shape.seqlen_q, s.shape.seqlen_k,
                               s.shape.head_dim_qk, s.shape.head_dim_v},
                   d.num_splits, &o_bytes, &lse_bytes);
  const auto check_buffer = [](const char* name, uintptr_t address, int64_t bytes, int64_t needed) {
    if (address == 0 || address % kWorkspaceAlign != 0)
      throw std::invalid_argument(std::string(name) + ": needs a 256-byte aligned device buffer with num_splits > 1");
    if (bytes < needed)
      throw std::invalid_argument(std::string(name) + "_bytes=" + std::to_string(bytes) + ": needs at least " +
                                  std::to_string(needed) + " (what _C.decode_plan reports for this num_splits)");
  };
  check_buffer("o_accum", d.o_accum, d.o_accum_bytes, o_bytes);
  check_buffer("lse_accum", d.lse_accum, d.lse_accum_bytes, lse_bytes);
}

// A forward spec's params, checked (the decode path's fields where spec.decode asks for it).
static AttnFwdParams fwd_params(const FwdSpec& spec) {
  AttnFwdParams p;
  fill_common(p, spec);
  if (spec.decode.num_splits != 0) {
    if (spec.decode.num_splits < 0 || spec.decode.num_splits > kMaxSplits)
      throw std::invalid_argument("num_splits=" + std::to_string(spec.decode.num_splits) + ": needs 1 to " +
                                  std::to_string(kMaxSplits) + " on the decode path");
    fill_decode(p, spec);
  }
  check_fwd_params(p);
  return p;
}

void fwd(const FwdSpec& spec) {
  AttnFwdParams p = fwd_params(spec);
  const FamilyCaps& family = plan_fwd(p, spec.device);
  launch_fwd(family, p, spec.device, reinterpret_cast<void*>(spec.stream));
}

FwdFamily fwd_family(const FwdSpec& spec) {
  AttnFwdParams p = fwd_params(spec);
  FwdFamily out;
  out.name = plan_fwd(p, spec.device, &out.yielded).name;
  return out;
}

int64_t fwd_workspace_bytes(const FwdSpec& spec) {
  if (spec.decode.num_splits != 0) return 0;  // the decode path has its own (decode_plan)
  AttnFwdParams p = fwd_params(spec);
  const FamilyCaps& family = plan_fwd(p, spec.device);
  return family.fwd_workspace != nullptr ? family.fwd_workspace(p) : 0;
}

void bwd(const BwdSpec& spec) {
  AttnBwdParams p{};
  fill_common(p, spec.fwd);
  set_tensor(spec.dout, p.dout, p.dout_batch_stride, p.dout_head_stride, p.dout_row_stride);
  set_tensor(spec.dq, p.dq, p.dq_batch_stride, p.dq_head_stride, p.dq_row_stride);
  set_tensor(spec.dk, p.dk, p.dk_batch_stride, p.dk_head_stride, p.dk_row_stride);
  set_tensor(spec.dv, p.dv, p.dv_batch_stride, p.dv_head_stride, p.dv_row_stride);
  p.d_alibi_slopes = ptr<float>(spec.d_alibi_slopes);
  p.d_sinks = ptr<float>(spec.d_sinks);
  p.d_bias = ptr<void>(spec.d_bias);
  p.d_bias_row_stride = p.seqlen_k;  // dense (B, Hq, Sq, Sk)
  p.d_bias_head_stride = int64_t(p.seqlen_q) * p.seqlen_k;
  p.d_bias_batch_stride = int64_t(p.heads_q) * p.d_bias_head_stride;
  check_bwd_params(p);

  const int64_t total_q = spec.fwd.varlen.total_q;
  const bool varlen_mode = spec.fwd.varlen.cu_seqlens_q != 0;
  if (varlen_mode != (total_q >= 0))
    throw std::invalid_argument("total_q=" + std::to_string(total_q) +
                                ": must be >= 0 exactly when cu_seqlens_q is given (packed rows), else -1");
  // delta's rows are indexed as (batch, head, q_row_offset + row), like every other tensor: in
  // varlen mode the batch stride is 0 and the packed row offset selects the sequence. The launcher
  // derives dq_accum's strides from these and the bucket of the family it picks.
  const int64_t rows = rows_per_head(spec.fwd.shape, total_q);
  p.delta_row_stride = 1;
  p.delta_head_stride = rows;
  p.delta_batch_stride = varlen_mode ? 0 : int64_t(spec.fwd.shape.heads_q) * rows;
  p.deterministic = spec.deterministic;  // before the family is picked: the sm90 family refuses it
  // No tile skipping in deterministic mode: the ordered dQ adds wait for every key block BlockMask
  // lists for a query block (sm90's turns), so every such block must take its turn.
  if (p.deterministic) p.mods.bias_cells = nullptr;
  const FamilyCaps& family = plan_bwd(p, spec.fwd.device);
  const bool mod_rows = p.d_alibi_slopes != nullptr || p.d_sinks != nullptr;
  const WorkspaceLayout w = workspace_layout(spec.fwd.shape, total_q, p.head_dim_bucket, mod_rows);
  const auto check_buffer = [](const char* name, uintptr_t address, int64_t bytes, int64_t needed) {
    // 16-byte aligned rows: the kernels' vector stores and the sm_90 bulk reduction need it.
    if (address == 0 || address % kWorkspaceAlign != 0)
      throw std::invalid_argument(std::string(name) + ": needs a 256-byte aligned device buffer");
    if (bytes < needed)
      throw std::invalid_argument(std::string(name) + "_bytes=" + std::to_string(bytes) + ": needs at least " +
                                  std::to_string(needed) + " (rows x heads x the bucket _C.select reports)");
  };
  const Workspace& ws = spec.workspace;
  check_buffer("dq_accum", ws.dq_accum, ws.dq_accum_bytes, w.dq_accum_bytes);
  check_buffer("delta", ws.delta, ws.delta_bytes, w.delta_bytes);
  p.dq_accum = ptr<float>(ws.dq_accum);
  p.delta = ptr<float>(ws.delta);
  p.row_pdp = mod_rows ? p.delta + w.delta_floats : nullptr;
  p.row_pdist = mod_rows ? p.delta + 2 * w.delta_floats : nullptr;
  // Deterministic mode on a family that has it, or a family that stores each query block's first
  // dQ tile: the dQ semaphores live after delta's floats (dense only).
  const bool ordered = p.deterministic && family.deterministic_backward;
  p.dq_semaphore = (ordered || family.dq_first_store) && w.semaphore_bytes > 0
                       ? reinterpret_cast<int32_t*>(ws.delta + w.delta_bytes - w.semaphore_bytes)
                       : nullptr;
  // Skipped tiles (bias_cells) leave query blocks unvisited by key blocks BlockMask says visit
  // them: the first-store protocol would wait for them, so the preprocess zeroes all of dq_accum.
  p.dq_first_store = family.dq_first_store && p.dq_semaphore != nullptr && p.mods.bias_cells == nullptr;
  p.dq_sem_rows = 64;  // a word per 64 rows; the sm90 launcher sets its kernel's own (bwd_launch_sm90.cuh)
  launch_bwd(family, p, spec.fwd.device, reinterpret_cast<void*>(spec.fwd.stream));
}

void bias_cells(const BiasCellsSpec& s) {
  check_bias_cells_spec(s);
  BiasCellsParams p{};
  p.bias = ptr<const void>(s.bias);
  p.dtype = s.dtype;
  p.batch = static_cast<int32_t>(s.sizes[0]);
  p.heads = static_cast<int32_t>(s.sizes[1]);
  p.rows = static_cast<int32_t>(s.sizes[2]);
  p.keys = static_cast<int32_t>(s.sizes[3]);
  // A size-1 dim's stride is never used: 0, so that it cannot keep the kernel off its 16-byte loads
  // (a (B, 1, 1, S) view's head and row strides are anything torch chose). A broadcast key dim
  // reads its one element for every key.
  p.batch_stride = p.batch > 1 ? s.strides[0] : 0;
  p.head_stride = p.heads > 1 ? s.strides[1] : 0;
  p.row_stride = p.rows > 1 ? s.strides[2] : 0;
  p.key_stride = p.keys > 1 ? s.strides[3] : 0;
  p.seqlen_q = static_cast<int32_t>(s.seqlen_q);
  p.seqlen_k = static_cast<int32_t>(s.seqlen_k);
  p.cell_rows = static_cast<int32_t>(bias_cells_rows(s.sizes[2], s.seqlen_q));
  p.row_cells = static_cast<int32_t>(bias_cells_row_cells(s.seqlen_k));
  p.cells = ptr<uint8_t>(s.cells);
  launch_bias_cells(p, s.device, reinterpret_cast<void*>(s.stream));
}

}  // namespace flashsdpa
