// api.cpp: fills AttnFwdParams / AttnBwdParams from raw arguments (the only place that does),
// runs the checks, and launches. See api.h.
#include "api.h"

#include <cmath>
#include <stdexcept>
#include <string>

#include "checks.h"
#include "flashsdpa/kernels.h"
#include "launch.h"

namespace flashsdpa {
namespace {

constexpr float kLog2e = 1.4426950408889634f;
constexpr int64_t kWorkspaceAlign = 256;


template <typename T>
T* ptr(uintptr_t p) {
  return reinterpret_cast<T*>(p);
}

void fill_fwd(AttnFwdParams& p, uintptr_t q, uintptr_t k, uintptr_t v, uintptr_t o, uintptr_t lse,
              const Strides& qs, const Strides& ks, const Strides& vs, const Strides& os, const Strides& ls,
              const ProblemShape& shape, const VarlenArgs& varlen, float scale, int causal, int dtype) {
  p = AttnFwdParams{};
  p.q = ptr<const void>(q);
  p.k = ptr<const void>(k);
  p.v = ptr<const void>(v);
  p.o = ptr<void>(o);
  p.lse = ptr<float>(lse);
  p.q_batch_stride = qs[0], p.q_head_stride = qs[1], p.q_row_stride = qs[2];
  p.k_batch_stride = ks[0], p.k_head_stride = ks[1], p.k_row_stride = ks[2];
  p.v_batch_stride = vs[0], p.v_head_stride = vs[1], p.v_row_stride = vs[2];
  p.o_batch_stride = os[0], p.o_head_stride = os[1], p.o_row_stride = os[2];
  p.lse_batch_stride = ls[0], p.lse_head_stride = ls[1], p.lse_row_stride = ls[2];
  p.batch = shape.batch;
  p.heads_q = shape.heads_q;
  p.heads_kv = shape.heads_kv;
  p.seqlen_q = shape.seqlen_q;
  p.seqlen_k = shape.seqlen_k;
  p.head_dim_qk = shape.head_dim_qk;
  p.head_dim_v = shape.head_dim_v;
  p.cu_seqlens_q = ptr<const int32_t>(varlen.cu_seqlens_q);
  p.cu_seqlens_k = ptr<const int32_t>(varlen.cu_seqlens_k);
  p.seqused_k = ptr<const int32_t>(varlen.seqused_k);
  p.scale = scale;
  p.scale_log2 = scale * kLog2e;
  p.causal = static_cast<CausalMode>(causal);
  p.dtype = static_cast<DType>(dtype);
}

// Workspace: two buffers, dq_accum and delta, rows indexed like q (dense: per batch; varlen:
// packed). Two rather than one carved buffer so that a caching allocator accounts them as
// PyTorch's own flash backward does: one 129 MiB request (d = 128, S = 16k, 16 heads) lands in a
// 130 MiB segment whose 1 MiB remainder is too small to split off, and counted 1 MiB more.
struct WorkspaceLayout {
  int64_t rows_per_head;   // dense: seqlen_q, varlen: total_q
  int64_t dq_accum_bytes;  // float32 rows x heads_q x bucket, per (batch) in dense mode
  int64_t delta_bytes;     // float32 rows x heads_q
  int bucket;
};

WorkspaceLayout workspace_layout(int32_t batch, int32_t heads_q, int32_t seqlen_q, int32_t head_dim_qk,
                                 int32_t head_dim_v, int64_t total_q) {
  WorkspaceLayout w{};
  w.bucket = head_dim_bucket(head_dim_qk, head_dim_v);
  const bool varlen = total_q >= 0;
  const int64_t batches = varlen ? 1 : batch;
  w.rows_per_head = varlen ? total_q : seqlen_q;
  const int64_t rows = batches * heads_q * w.rows_per_head;
  w.dq_accum_bytes = rows * w.bucket * int64_t(sizeof(float));
  w.delta_bytes = rows * int64_t(sizeof(float));
  return w;
}

}  // namespace

void fwd(uintptr_t q, uintptr_t k, uintptr_t v, uintptr_t o, uintptr_t lse, const Strides& q_strides,
         const Strides& k_strides, const Strides& v_strides, const Strides& o_strides,
         const Strides& lse_strides, const ProblemShape& shape, const VarlenArgs& varlen, float scale,
         int causal, int dtype, int device, uintptr_t stream) {
  AttnFwdParams p;
  fill_fwd(p, q, k, v, o, lse, q_strides, k_strides, v_strides, o_strides, lse_strides, shape, varlen, scale,
           causal, dtype);
  check_fwd_params(p);
  launch_fwd(p, device, reinterpret_cast<void*>(stream));
}

std::pair<int64_t, int64_t> bwd_workspace_bytes(int32_t batch, int32_t heads_q, int32_t seqlen_q,
                                                int32_t head_dim_qk, int32_t head_dim_v, int64_t total_q) {
  const WorkspaceLayout w = workspace_layout(batch, heads_q, seqlen_q, head_dim_qk, head_dim_v, total_q);
  return {w.dq_accum_bytes, w.delta_bytes};
}

void bwd(uintptr_t dout, uintptr_t q, uintptr_t k, uintptr_t v, uintptr_t o, uintptr_t lse, uintptr_t dq,
         uintptr_t dk, uintptr_t dv, const Strides& dout_strides, const Strides& q_strides,
         const Strides& k_strides, const Strides& v_strides, const Strides& o_strides,
         const Strides& lse_strides, const Strides& dq_strides, const Strides& dk_strides,
         const Strides& dv_strides, const ProblemShape& shape, const VarlenArgs& varlen, float scale,
         int causal, int dtype, const Workspace& workspace, int64_t total_q, int device, uintptr_t stream) {
  AttnBwdParams p;
  fill_fwd(p, q, k, v, o, lse, q_strides, k_strides, v_strides, o_strides, lse_strides, shape, varlen, scale,
           causal, dtype);
  p.dout = ptr<const void>(dout);
  p.dq = ptr<void>(dq);
  p.dk = ptr<void>(dk);
  p.dv = ptr<void>(dv);
  p.dout_batch_stride = dout_strides[0], p.dout_head_stride = dout_strides[1], p.dout_row_stride = dout_strides[2];
  p.dq_batch_stride = dq_strides[0], p.dq_head_stride = dq_strides[1], p.dq_row_stride = dq_strides[2];
  p.dk_batch_stride = dk_strides[0], p.dk_head_stride = dk_strides[1], p.dk_row_stride = dk_strides[2];
  p.dv_batch_stride = dv_strides[0], p.dv_head_stride = dv_strides[1], p.dv_row_stride = dv_strides[2];
  check_bwd_params(p);

  const bool varlen_mode = varlen.cu_seqlens_q != 0;
  if (varlen_mode != (total_q >= 0))
    throw std::invalid_argument("total_q=" + std::to_string(total_q) +
                                ": must be >= 0 exactly when cu_seqlens_q is given (packed rows), else -1");
  const WorkspaceLayout w = workspace_layout(shape.batch, shape.heads_q, shape.seqlen_q, shape.head_dim_qk,
                                             shape.head_dim_v, total_q);
  const auto check_buffer = [](const char* name, uintptr_t address, int64_t bytes, int64_t needed) {
    // 16-byte aligned rows: the kernels' vector stores and the sm_90 bulk reduction need it.
    if (address == 0 || address % kWorkspaceAlign != 0)
      throw std::invalid_argument(std::string(name) + ": needs a 256-byte aligned device buffer");
    if (bytes < needed)
      throw std::invalid_argument(std::string(name) + "_bytes=" + std::to_string(bytes) + ": needs at least " +
                                  std::to_string(needed) + " (bwd_workspace_bytes)");
  };
  check_buffer("dq_accum", workspace.dq_accum, workspace.dq_accum_bytes, w.dq_accum_bytes);
  check_buffer("delta", workspace.delta, workspace.delta_bytes, w.delta_bytes);
  p.dq_accum = ptr<float>(workspace.dq_accum);
  p.delta = ptr<float>(workspace.delta);
  // Rows are indexed as (batch, head, q_row_offset + row), like every other tensor: in varlen
  // mode the batch stride is 0 and the packed row offset selects the sequence.
  p.dq_accum_row_stride = w.bucket;
  p.dq_accum_head_stride = w.rows_per_head * w.bucket;
  p.dq_accum_batch_stride = varlen_mode ? 0 : int64_t(shape.heads_q) * p.dq_accum_head_stride;
  p.delta_row_stride = 1;
  p.delta_head_stride = w.rows_per_head;
  p.delta_batch_stride = varlen_mode ? 0 : int64_t(shape.heads_q) * w.rows_per_head;
  p.deterministic = false;
  launch_bwd(p, device, reinterpret_cast<void*>(stream));
}

}  // namespace flashsdpa
