// router_table.cpp: _C's table for the C++ SDPA routers (flashsdpa/router_table.h). Each entry is a
// thin, non-throwing adapter over the function Python's predicates and launchers already call
// (device_info, select, decode_plan, workspace_layout, fwd, bwd), so both router implementations
// ask the same C++ for every verdict.
#include "flashsdpa/router_table.h"

#include <algorithm>
#include <cstring>
#include <exception>
#include <string>

#include "api.h"
#include "capabilities.h"
#include "decode.h"
#include "launch.h"

namespace flashsdpa {
namespace {

constexpr int kMaxHeadDim = 256;  // _backend.MAX_HEAD_DIM

int table_device_ok(int device) {
  try {
    return device_info(device).family.empty() ? 0 : 1;
  } catch (const std::exception&) {  // no driver, no such device: _backend.device_reason's "no usable GPU"
    return 0;
  }
}

int table_select_bucket(int device, int dtype, int head_dim_qk, int head_dim_v, int mask_kind, int layout,
                        int backward) {
  try {
    const Selection s = select(device, static_cast<DType>(dtype), head_dim_qk, head_dim_v,
                               static_cast<MaskKind>(mask_kind), static_cast<Layout>(layout),
                               backward ? Direction::kBackward : Direction::kForward, backward == 2);
    return s.family == nullptr ? 0 : s.bucket;
  } catch (const std::exception&) {
    return 0;
  }
}

int table_decode_plan(int device, int dtype, const int32_t* sizes, int mask_kind, int32_t* num_splits,
                      int64_t* o_accum_bytes, int64_t* lse_accum_bytes) {
  try {
    const DecodeShape shape{sizes[0], sizes[1], sizes[2], sizes[3], sizes[4], sizes[5], sizes[6]};
    const DecodePlan plan =
        decode_plan(device, static_cast<DType>(dtype), shape, static_cast<MaskKind>(mask_kind), false, 0);
    if (plan.family == nullptr) return 0;
    *num_splits = plan.num_splits;
    *o_accum_bytes = plan.o_accum_bytes;
    *lse_accum_bytes = plan.lse_accum_bytes;
    return 1;
  } catch (const std::exception&) {
    return 0;
  }
}

void table_workspace_bytes(const ProblemShape* shape, int64_t total_q, int bucket, int64_t* dq_accum_bytes,
                           int64_t* delta_bytes) {
  const WorkspaceLayout w = workspace_layout(*shape, total_q, bucket);
  *dq_accum_bytes = w.dq_accum_bytes;
  *delta_bytes = w.delta_bytes;
}

// The error of a failed launch, truncated to the caller's buffer (always terminated).
int64_t table_fwd_workspace_bytes(const FwdSpec* spec) {
  try {
    return fwd_workspace_bytes(*spec);
  } catch (const std::exception&) {
    return 0;
  }
}

int failed(const char* what, char* error, size_t error_size) {
  if (error_size > 0) {
    std::strncpy(error, what, error_size - 1);
    error[error_size - 1] = '\0';
  }
  return 1;
}

// fwd / bwd with their exceptions turned into the table's error result.
template <typename Spec, void (*Launch)(const Spec&)>
int guarded(const Spec* spec, char* error, size_t error_size) {
  try {
    Launch(*spec);
    return 0;
  } catch (const std::exception& e) {
    return failed(e.what(), error, error_size);
  }
}

RouterTable make_table() {
  RouterTable t{};
  t.version = kRouterTableVersion;
  t.size = sizeof(RouterTable);
  int largest = 0;
  for (const FamilyCaps& f : families()) {
    for (const std::string& name : f.dtypes) t.dtype_bits |= 1u << static_cast<int>(name == "bfloat16");
    for (int d : f.all_head_dims()) largest = std::max(largest, d);
  }
  t.max_head_dim = std::min(largest, kMaxHeadDim);
  t.decode_max_seqlen_q = kDecodeMaxSeqlenQ;
  t.device_ok = &table_device_ok;
  t.select_bucket = &table_select_bucket;
  t.decode_plan = &table_decode_plan;
  t.workspace_bytes = &table_workspace_bytes;
  t.fwd_workspace_bytes = &table_fwd_workspace_bytes;
  t.fwd = &guarded<FwdSpec, fwd>;
  t.bwd = &guarded<BwdSpec, bwd>;
  return t;
}

}  // namespace

const RouterTable& router_table() {
  static const RouterTable table = make_table();
  return table;
}

}  // namespace flashsdpa
