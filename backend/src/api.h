// api.h: the host entry points behind flashsdpa._C. A call arrives as one spec struct (raw
// pointers, element strides, sizes, the mask); params are filled in one place (api.cpp), checked
// (checks.cpp), given a kernel family for the device (launch.cpp) and launched on the caller's
// stream. No torch, no allocation: the backward's workspace is allocated by the caller, sized by
// the bucket that _C.select reports (WorkspaceLayout below).
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "flashsdpa/params.h"

namespace flashsdpa {

using Strides = std::array<int64_t, 3>;  // (batch, head, row) in elements; the last dim has stride 1

struct TensorArg {
  uintptr_t ptr;  // device address, 0 = none
  Strides strides;
};

struct ProblemShape {
  int32_t batch, heads_q, heads_kv, seqlen_q, seqlen_k, head_dim_qk, head_dim_v;
};

struct VarlenArgs {
  uintptr_t cu_seqlens_q, cu_seqlens_k, seqused_k;  // device int32 pointers, 0 = none (dense)
  int64_t total_q;                                  // packed query rows; -1 when dense
  int64_t total_k;                                  // packed key/value rows; -1 when dense
};

// The decode path's arguments (num_splits 0: not a decode call). The workspace is two
// caller-allocated float32 buffers (256-byte aligned) of at least the bytes decode_plan reported
// for num_splits; unused (0) with one split. block_table 0: a contiguous (batch-strided) cache.
struct DecodeArgs {
  int32_t num_splits;
  uintptr_t o_accum;
  uintptr_t lse_accum;
  int64_t o_accum_bytes;
  int64_t lse_accum_bytes;
  uintptr_t block_table;  // device int32 [batch, max_pages]
  int64_t block_table_batch_stride;
  int32_t page_size;
  int32_t num_pages;  // the pool's pages (k_cache.size(0)) with a block table, else 0
  int32_t seqused_k_add;  // rows appended by a KV-cache call: added to seqused_k[b] (params.h)
};

// The score modifiers of one call (params.h's ScoreMods): device float32 pointers, 0 = none.
struct ModsArg {
  float softcap;                // 0 = off
  uintptr_t alibi_slopes;       // (Hq,) or (B, Hq)
  int64_t alibi_batch_stride;   // 0 for (Hq,), else the row stride of (B, Hq)
  uintptr_t sinks;              // (Hq,)
  uintptr_t bias;               // additive attn_mask in the call's dtype, broadcast to (B, Hq, Sq, Sk); 0 = none
  int64_t bias_batch_stride, bias_head_stride, bias_row_stride;  // elements, 0 = broadcast; unit key stride
  uintptr_t bias_cells;         // params.h's ScoreMods::bias_cells (uint8 summary), 0 = none
  int64_t bias_cells_batch_stride, bias_cells_head_stride, bias_cells_row_stride;  // bytes, 0 = broadcast
};

// Dropout of one call (params.h's DropoutSpec): p = 0 is off. seed / offset as values, or device
// uint64 pointers (0 = none) read by the kernels; rng_state: where the forward writes (seed, offset).
struct DropoutArg {
  float p;
  uint64_t seed, offset;
  uintptr_t seed_ptr, offset_ptr, rng_state;
};

// One forward call. lse.ptr may be 0 (inference: no LSE written).
struct FwdSpec {
  TensorArg q, k, v, out, lse;
  ProblemShape shape;
  VarlenArgs varlen;
  DecodeArgs decode;
  MaskSpec mask;  // normalized by fill (a bound no row reaches becomes -1)
  float scale;
  ModsArg mods;  // all zero without score modifiers
  DropoutArg dropout;  // all zero without dropout
  // params.h's workspace: at least the bytes fwd_workspace_bytes reports for this spec (0 / 0 =
  // none: the kernels' static schedule).
  uintptr_t workspace;
  int64_t workspace_bytes;
  int32_t dtype;  // DType
  int32_t device;
  uintptr_t stream;
};

// The caller-allocated workspace buffers (device addresses, 256-byte aligned) and their sizes.
struct Workspace {
  uintptr_t dq_accum;
  int64_t dq_accum_bytes;
  uintptr_t delta;
  int64_t delta_bytes;
};

// One backward call: the forward's spec (out and lse are the forward's outputs), dO and the grads.
struct BwdSpec {
  FwdSpec fwd;
  TensorArg dout, dq, dk, dv;
  Workspace workspace;
  bool deterministic;  // torch.are_deterministic_algorithms_enabled(): families that add dQ in arbitrary order refuse it
  uintptr_t d_alibi_slopes, d_sinks;  // caller-zeroed float32 gradients of the modifiers, 0 = not wanted
  // The bias's gradient: caller-zeroed, the call's dtype, dense (B, Hq, Sq, Sk) contiguous; 0 = not wanted.
  uintptr_t d_bias;
};

// One bias-summary call (_C.bias_cells; params.h's BiasCellsParams, ops_masks.bias_cells): the
// bias's own sizes and element strides (batch, head, query, key) after Python narrowed its
// 0-stride broadcast dims to size 1, the problem's lengths, and the caller-allocated contiguous
// uint8 summary (batch, head, cell_rows, row_cells) of cells_bytes bytes.
struct BiasCellsSpec {
  uintptr_t bias;  // device address
  int32_t dtype;   // BiasCellsParams::ElementType: 0 float16, 1 bfloat16, 2 float32
  std::array<int64_t, 4> sizes, strides;
  int64_t seqlen_q, seqlen_k;
  uintptr_t cells;
  int64_t cells_bytes;
  int32_t device;
  uintptr_t stream;
};

void bias_cells(const BiasCellsSpec& spec);
// The summary's geometry (ops_masks.bias_cells allocates the same): a row of cells per 64 queries
// (one for a broadcast query dim), ceil(Sk / 16) cells per row padded to 16.
inline int64_t bias_cells_rows(int64_t rows, int64_t seqlen_q) { return rows == 1 ? 1 : (seqlen_q + 63) / 64; }
inline int64_t bias_cells_row_cells(int64_t seqlen_k) { return (seqlen_k + 255) / 256 * 16; }

void fwd(const FwdSpec& spec);
void bwd(const BwdSpec& spec);
// The workspace bytes a forward of this spec can use (the family the launch would pick: the sm90
// forward's dynamic-schedule counter or split tail, fwd_launch_sm90.cuh), 0 when none: the caller
// allocates that much and passes it as spec.workspace, or runs the same call without it.
int64_t fwd_workspace_bytes(const FwdSpec& spec);
// The family a forward of this spec runs on (the table's first taker, after the per-call hooks and
// speed rules: capabilities.h's fwd_yields; the decode path's for a decode spec), and the speed
// rule's reason where a family that takes the call handed it on (empty otherwise).
struct FwdFamily {
  std::string name;
  std::string yielded;
};
FwdFamily fwd_family(const FwdSpec& spec);

// Workspace of the backward for a head-dim bucket: float32 dq_accum (rows x heads_q x bucket) and
// delta = rowsum(dO * O) (rows x heads_q), rows = seqlen_q per batch (dense) or total_q (varlen).
// Python computes the same sizes from the bucket _C.select reports (one _C call per backward).
struct WorkspaceLayout {
  int64_t rows_per_head;
  int64_t delta_floats;  // delta's rows: batches x heads x rows_per_head (row_pdp, row_pdist follow)
  int64_t dq_accum_bytes;
  int64_t delta_bytes;      // delta's floats, then (mod_rows) row_pdp's and row_pdist's, then semaphore_bytes
  int64_t semaphore_bytes;  // deterministic dQ: int32 per (batch, head, 64-row query block); 0 for varlen
};
// mod_rows: the score modifiers' gradients are wanted (params.h's row_pdp / row_pdist).
WorkspaceLayout workspace_layout(const ProblemShape& shape, int64_t total_q, int bucket, bool mod_rows = false);

}  // namespace flashsdpa
