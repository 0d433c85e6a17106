// api.h: the host entry points behind flashsdpa._C. Raw pointers, element strides and sizes in;
// params filled in one place (api.cpp), checked (checks.cpp), launched on the caller's stream with
// the tensors' device current (launch.cpp). No torch, no allocation: the backward's workspace size
// is reported here and allocated by the caller.
#pragma once

#include <array>
#include <cstdint>
#include <utility>

#include "flashsdpa/params.h"

namespace flashsdpa {

using Strides = std::array<int64_t, 3>;  // (batch, head, row) in elements; the last dim has stride 1

struct ProblemShape {
  int32_t batch, heads_q, heads_kv, seqlen_q, seqlen_k, head_dim_qk, head_dim_v;
};

struct VarlenArgs {
  uintptr_t cu_seqlens_q, cu_seqlens_k, seqused_k;  // device int32 pointers, 0 = none
};

void fwd(uintptr_t q, uintptr_t k, uintptr_t v, uintptr_t o, uintptr_t lse, const Strides& q_strides,
         const Strides& k_strides, const Strides& v_strides, const Strides& o_strides,
         const Strides& lse_strides, const ProblemShape& shape, const VarlenArgs& varlen, float scale,
         int causal, int dtype, int device, uintptr_t stream);

// Bytes of the two workspace buffers bwd() needs: the float32 dQ accumulator (rows x heads_q x
// head-dim bucket) and float32 delta = rowsum(dO * O) (rows x heads_q). total_q < 0: dense.
std::pair<int64_t, int64_t> bwd_workspace_bytes(int32_t batch, int32_t heads_q, int32_t seqlen_q,
                                                int32_t head_dim_qk, int32_t head_dim_v, int64_t total_q);

// The caller-allocated workspace buffers (device addresses, 256-byte aligned) and their sizes.
struct Workspace {
  uintptr_t dq_accum;
  int64_t dq_accum_bytes;
  uintptr_t delta;
  int64_t delta_bytes;
};

void bwd(uintptr_t dout, uintptr_t q, uintptr_t k, uintptr_t v, uintptr_t o, uintptr_t lse, uintptr_t dq,
         uintptr_t dk, uintptr_t dv, const Strides& dout_strides, const Strides& q_strides,
         const Strides& k_strides, const Strides& v_strides, const Strides& o_strides,
         const Strides& lse_strides, const Strides& dq_strides, const Strides& dk_strides,
         const Strides& dv_strides, const ProblemShape& shape, const VarlenArgs& varlen, float scale,
         int causal, int dtype, const Workspace& workspace, int64_t total_q, int device, uintptr_t stream);

}  // namespace flashsdpa
