// launch_sm80.h: the per-instantiation launchers of the portable path. One template per direction,
// instantiated per (dtype, head-dim bucket) in cuda/instantiations/ (generated, one TU each, so the
// build parallelizes). The generated cuda/instantiations/dispatch_sm80.cu switches into them.
#pragma once

#include <cuda_runtime.h>

#include "flashsdpa/params.h"

namespace flashsdpa {

template <typename Elem, int kHeadDim>
cudaError_t run_fwd_sm80_(const AttnFwdParams& params, cudaStream_t stream);

template <typename Elem, int kHeadDim>
cudaError_t run_bwd_sm80_(const AttnBwdParams& params, cudaStream_t stream);

// The decode path (split-KV, GQA-packed, paged; decode_launch_sm80.cuh).
template <typename Elem, int kHeadDim>
cudaError_t run_decode_sm80_(const AttnFwdParams& params, cudaStream_t stream);

}  // namespace flashsdpa
