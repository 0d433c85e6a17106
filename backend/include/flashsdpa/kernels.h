// kernels.h: the entry points that cuda/ exports to the host code in backend/.
//
// Plain C++ (no CUDA headers), so backend/ compiles with or without nvcc. The stream is passed as
// an opaque pointer (a cudaStream_t). Each entry returns a cudaError_t value as int (0 = success)
// after launching asynchronously; it never synchronizes and never allocates device memory.
//
// Arch-specific kernel families live side by side: launch.cpp picks one per device. A Hopper-only
// family adds run_*_sm90 here and one branch in launch.cpp; callers never change.
#pragma once

#include "flashsdpa/params.h"

namespace flashsdpa {

// Portable path: mma.sync + ldmatrix + cp.async; runs on sm_80 and newer (compiled for 80 and 90).
// Dispatches on dtype x head-dim bucket inside (cuda/sm80/dispatch_sm80.cu).
int run_fwd_sm80(const AttnFwdParams& params, void* stream);
int run_bwd_sm80(const AttnBwdParams& params, void* stream);
// Dynamic shared memory the backward's main kernel takes for this head-dim pair on a device of
// compute capability `major` with `smem_optin_bytes` per block, or 0 when no tile fits there (or
// no bucket serves the pair): the host then leaves the backward to PyTorch.
int bwd_smem_bytes_sm80(int head_dim_qk, int head_dim_v, int major, int smem_optin_bytes);

// Hopper family (sm_90a: wgmma, TMA, warp specialization), built when FLASHSDPA_ARCHS has 90.
// fwd_sm90_unsupported: nullptr when the family serves the problem (params' device facts filled),
// else the reason; the host then launches the portable family.
int run_fwd_sm90(const AttnFwdParams& params, void* stream);
const char* fwd_sm90_unsupported(const AttnFwdParams& params);

// The head-dim bucket (the kernel's compile-time kHeadDim) that serves max(head_dim_qk, head_dim_v),
// or 0 if this build has none large enough. Buckets are the compiled head dims (FLASHSDPA_HEAD_DIMS).
int head_dim_bucket(int head_dim_qk, int head_dim_v);

}  // namespace flashsdpa
