// bwd_launch_sm80.cuh: the backward tile table of the portable path and run_bwd_sm80_, which
// launches preprocess -> main (dK, dV, dQ_accum) -> dQ postprocess on one stream. Included by the
// generated per-(dtype, head-dim) instantiation files; numbers behind the table are in
// docs/kernel_notes_bwd.md.
#pragma once

#include <cuda_runtime.h>

#include <type_traits>

#include "sm80/bwd_kernel_sm80.cuh"
#include "sm80/launch_sm80.h"

namespace flashsdpa {
namespace bwd_sm80 {

// Tile table (kBlockM query rows per inner step x kBlockN keys per CTA, 8 warps; warp grids for
// S/dP, dK/dV, dQ as rows-split counts). Measured in docs/kernel_notes_bwd.md.
//   d <= 64:  128 x 128, 4/4/4. S and dP 64 registers each, dK + dV 64: the larger M tile halves
//             the per-row overhead (syncs, LSE, reds) against 64 x 128: 233 -> 256 TFLOP/s at
//             d = 64, S = 8k. 178 KB smem.
//   d = 96, 128: 64 x 128, 2/4/2 at 128, 2/4/4 at 96 (96 columns do not make 4 warp tiles of
//             whole 16-column blocks). dK + dV are
//             128 registers, S + dP 64; 128 x 128 would need 256 before fragments. 171 KB smem.
//   d > 128:  64 x 64, 2/4/4, so dK + dV stay at 2 * 64 * d / 256 <= 128 registers; 217 KB smem
//             at d = 256.
template <typename Elem, int kHeadDim>
using BwdTraitsFor = std::conditional_t<
    (kHeadDim <= 64), BwdTraits<Elem, kHeadDim, 128, 128, 8, 4, 4, 4>,
    std::conditional_t<(kHeadDim <= 128), BwdTraits<Elem, kHeadDim, 64, 128, 8, 2, 4, (kHeadDim == 128 ? 2 : 4)>,
                       BwdTraits<Elem, kHeadDim, 64, 64, 8, 2, 4, 4>>>;

}  // namespace bwd_sm80

template <typename Elem, int kHeadDim>
cudaError_t run_bwd_sm80_(const AttnBwdParams& params, cudaStream_t stream) {
  using namespace bwd_sm80;
  using T = BwdTraitsFor<Elem, kHeadDim>;

  const LinearTileScheduler rows_sched{ceil_div(params.seqlen_q, kPrePostRows), params.heads_q,
                                       params.batch};
  const LinearTileScheduler keys_sched{ceil_div(params.seqlen_k, T::kBlockN), params.heads_kv,
                                       params.batch};
  // 1-D grids: gridDim.x goes to 2^31 - 1, far beyond any batch x heads x blocks we can hold.
  if (rows_sched.grid_size() > 0x7fffffff || keys_sched.grid_size() > 0x7fffffff)
    return cudaErrorInvalidConfiguration;

  if (rows_sched.grid_size() > 0) {
    flashsdpa_bwd_sm80_preprocess_kernel<Elem, kHeadDim>
        <<<static_cast<unsigned>(rows_sched.grid_size()), kPrePostThreads, 0, stream>>>(params);
    cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess) return err;
  }

  // Runs even when no query row exists (dense seqlen_q == 0): it must still write dK = dV = 0.
  if (keys_sched.grid_size() > 0) {
    auto kernel = flashsdpa_bwd_sm80_dkdv_kernel<T>;
    // Set on every call (about a microsecond): the attribute is per device, and a static
    // "done once" flag would be wrong on the second GPU of a multi-GPU process.
    cudaError_t err =
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, T::kSmemBytes);
    if (err != cudaSuccess) return err;
    kernel<<<static_cast<unsigned>(keys_sched.grid_size()), T::kThreads, T::kSmemBytes, stream>>>(params);
    err = cudaGetLastError();
    if (err != cudaSuccess) return err;
  }

  if (rows_sched.grid_size() > 0) {
    flashsdpa_bwd_sm80_dq_postprocess_kernel<Elem, kHeadDim>
        <<<static_cast<unsigned>(rows_sched.grid_size()), kPrePostThreads, 0, stream>>>(params);
    cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess) return err;
  }
  return cudaSuccess;
}

}  // namespace flashsdpa
