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
  const TmaTensor4d q{params.q, params.head_dim_qk, params.seqlen_q, params.heads_q, params.batch,
                      params.q_row_stride, params.q_head_stride, params.q_batch_stride};
  const TmaTensor4d dout{params.dout, params.head_dim_v, params.seqlen_q, params.heads_q, params.batch,
                         params.dout_row_stride, params.dout_head_stride, params.dout_batch_stride};
  const TmaTensor4d k{params.k, params.head_dim_qk, params.seqlen_k, params.heads_kv, params.batch,
                      params.k_row_stride, params.k_head_stride, params.k_batch_stride};
  const TmaTensor4d v{params.v, params.head_dim_v, params.seqlen_k, params.heads_kv, params.batch,
                      params.v_row_stride, params.v_head_stride, params.v_batch_stride};
  cudaError_t err;
  if ((err = encode_tma_4d(&args.tma_q, q, bf16, Traits::kBlockM)) != cudaSuccess) return err;
  if ((err = encode_tma_4d(&args.tma_do, dout, bf16, Traits::kBlockM)) != cudaSuccess) return err;
  if ((err = encode_tma_4d(&args.tma_k, k, bf16, Traits::kBlockN)) != cudaSuccess) return err;
  if ((err = encode_tma_4d(&args.tma_v, v, bf16, Traits::kBlockN)) != cudaSuccess) return err;
  if ((err = opt_in_dynamic_smem<&flashsdpa_bwd_sm90_kernel<Traits>>(Traits::kSmemBytes)) != cudaSuccess) return err;
  flashsdpa_bwd_sm90_kernel<Traits><<<static_cast<unsigned>(grid), Traits::kThreads, Traits::kSmemBytes, stream>>>(args);
  return cudaGetLastError();
}

template <typename Elem, int kHeadDim>
cudaError_t run_bwd_sm90_(const AttnBwdParams& params, cudaStream_t stream) {
  cudaError_t err = launch_bwd_prepost<Elem, kHeadDim, false>(params, stream);
  if (err != cudaSuccess) return err;
  if ((err = launch_bwd_sm90_main<BwdTraitsSm90<Elem, kHeadDim>>(params, stream)) != cudaSuccess) return err;
  return launch_bwd_prepost<Elem, kHeadDim, true>(params, stream);
}

}  // namespace flashsdpa
