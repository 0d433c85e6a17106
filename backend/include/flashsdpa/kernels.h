// kernels.h: the entry points that each kernel family in cuda/<family>/ exports to the host code
// in backend/.
//
// Plain C++ (no CUDA headers), so backend/ compiles with or without nvcc. The stream is passed as
// an opaque pointer (a cudaStream_t). Each run_* returns a cudaError_t value as int (0 = success)
// after launching asynchronously; it never synchronizes and never allocates device memory.
//
// A family is a row of backend/src/capabilities.cpp's table holding these functions; the host
// picks a family per (device, problem), so one GPU can run two families. A new family declares
// its run_fwd_<family> (and run_bwd_<family>, <dir>_plan_<family>) here.
#pragma once

#include <cstdlib>
#include <cstring>

#include "flashsdpa/params.h"

namespace flashsdpa {

// FLASHSDPA_SPEED_RULES=0 turns every speed rule off: the families' (capabilities.h's fwd_yields:
// each call takes the first family that serves it) and a family's choice among its tiles (the sm90
// forward's short tile), so the tests reach every kernel at the shapes the rules give away
// (scripts/gpu_check.sh's third run) and A/B scripts time both sides. Read once.
inline bool speed_rules_enabled() {
  static const bool on = [] {
    const char* v = std::getenv("FLASHSDPA_SPEED_RULES");
    return v == nullptr || std::strcmp(v, "0") != 0;
  }();
  return on;
}

// The tile a direction runs for a head-dim bucket on a device: tile 0 = the family's table tile,
// 1.. = smaller ones for parts with less shared memory; -1 = none fits (the host falls back).
struct TilePlan {
  int tile;
  int smem_bytes;  // dynamic shared memory per block of that tile
};

// Portable family "sm80": mma.sync + ldmatrix + cp.async; runs on sm_80 and newer. Dispatches on
// dtype x params.head_dim_bucket (generated: cuda/instantiations/dispatch_sm80.cu).
int run_fwd_sm80(const AttnFwdParams& params, void* stream);
int run_bwd_sm80(const AttnBwdParams& params, void* stream);
// Its tiles on a device of compute capability `major` with `smem_optin_bytes` per block
// (cuda/sm80/tiles_sm80.cu).
TilePlan fwd_plan_sm80(int bucket, int major, int smem_optin_bytes);
TilePlan bwd_plan_sm80(int bucket, int major, int smem_optin_bytes);

// The decode path (split-KV, GQA-packed, contiguous or paged K/V; params.num_splits >= 1). Its
// tile: block_m packed query rows (query rows x the GQA group) and block_n keys per CTA step;
// the host sizes the split grid and the workspace from it (backend/src/decode.cpp).
struct DecodeTile {
  int block_m;
  int block_n;
  int smem_bytes;
  int threads;
};
int run_decode_sm80(const AttnFwdParams& params, void* stream);
DecodeTile decode_tile_sm80(int bucket);

// Hopper family "sm90" (sm_90a: wgmma, TMA, warp specialization; cuda/sm90/), built when
// FLASHSDPA_ARCHS has 90; its backward has fewer buckets than its forward. <dir>_sm90_unsupported:
// nullptr when it takes this call (device facts filled), else why not; the host then takes the
// next family of the table (cuda/sm90/tiles_sm90.cu).
int run_fwd_sm90(const AttnFwdParams& params, void* stream);
int run_bwd_sm90(const AttnBwdParams& params, void* stream);
TilePlan fwd_plan_sm90(int bucket, int major, int smem_optin_bytes);
TilePlan bwd_plan_sm90(int bucket, int major, int smem_optin_bytes);
const char* fwd_sm90_unsupported(const AttnFwdParams& params);
// Why the portable family runs this forward faster (a speed rule: capabilities.h's fwd_yields),
// nullptr when this family should run it.
const char* fwd_sm90_yields(const AttnFwdParams& params);
// The split tail's workspace bytes for this forward (fwd_kernel_sm90.cuh's TailSplit; device
// facts and bucket filled), 0 when the launch would not split.
int64_t fwd_workspace_sm90(const AttnFwdParams& params);
const char* bwd_sm90_unsupported(const AttnBwdParams& params);

// The bias summary (cuda/common/bias_cells_summary.cu, built with every CUDA build whatever the
// families): one launch on `stream` writing every byte of params.cells; returns a cudaError_t.
int run_bias_cells(const BiasCellsParams& params, void* stream);

}  // namespace flashsdpa
