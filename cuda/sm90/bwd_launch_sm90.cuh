// bwd_launch_sm90.cuh: run_bwd_sm90_<Elem, kHeadDim>, the host launcher of the Hopper backward —
// IN DEVELOPMENT (see bwd_kernel_sm90.cuh's status). Preprocess (delta, zeroed dq_accum) -> main
// kernel -> dQ postprocess, on one stream; the first and last are common/bwd_prepost.cuh's.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <climits>
#include <cstdint>

#include "common/smem_optin.cuh"
#include "sm90/bwd_kernel_sm90.cuh"
#include "sm90/tma_sm90.h"

namespace flashsdpa {

template <typename Traits>
cudaError_t launch_bwd_sm90_main(const AttnBwdParams& params, cudaStream_t stream) {
  const int64_t n_blocks = (params.seqlen_k + Traits::kBlockN - 1) / Traits::kBlockN;
  const int64_t grid = n_blocks * params.heads_kv * params.batch;
  if (grid == 0) return cudaSuccess;
  if (grid > INT_MAX) return cudaErrorInvalidConfiguration;
  BwdSm90Args args;
  args.p = params;
  const bool bf16 = params.dtype == DType::kBFloat16;
  cudaError_t err = encode_tma_all({{&args.tma_q, tma_q(params), Traits::kBlockM},
                                    {&args.tma_do, tma_dout(params), Traits::kBlockM},
                                    {&args.tma_k, tma_k(params), Traits::kBlockN},
                                    {&args.tma_v, tma_v(params), Traits::kBlockN}},
                                   bf16);
  if (err != cudaSuccess) return err;
  if ((err = opt_in_dynamic_smem<&flashsdpa_bwd_sm90_kernel<Traits>>(Traits::kSmemBytes)) != cudaSuccess) return err;
  flashsdpa_bwd_sm90_kernel<Traits><<<static_cast<unsigned>(grid), Traits::kThreads, Traits::kSmemBytes, stream>>>(args);
  return cudaGetLastError();
}

template <typename Elem, int kHeadDim>
cudaError_t run_bwd_sm90_(const AttnBwdParams& params, cudaStream_t stream) {
  cudaError_t err = launch_bwd_prepost<Elem, kHeadDim, false>(params, stream);
  if (err != cudaSuccess) return err;
  if ((err = launch_bwd_sm90_main<BwdTraitsSm90<Elem, kHeadDim>>(params, stream)) != cudaSuccess) return err;
  AttnBwdParams post = params;
  post.scale = 1.f;  // the main kernel stages dQ already scaled
  return launch_bwd_prepost<Elem, kHeadDim, true>(post, stream);
}

}  // namespace flashsdpa
