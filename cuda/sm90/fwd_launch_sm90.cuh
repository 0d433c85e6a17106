// fwd_launch_sm90.cuh: run_fwd_sm90_<Elem, kHeadDim>, the host launcher of the Hopper forward.
// Encodes the four TMA descriptors of the call, raises the dynamic shared-memory limit once per
// device, sizes the 1-D grid from the scheduler and launches. Included by the generated
// cuda/instantiations/fwd_sm90_<dtype>_hdim<d>.cu files.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <climits>
#include <cstdint>

#include "common/smem_optin.cuh"
#include "sm90/fwd_kernel_sm90.cuh"
#include "sm90/tma_sm90.h"

namespace flashsdpa {

// persistent = false launches one CTA per tile instead (the same kernel: each CTA then runs one
// loop trip), for measuring what persistence buys.
template <typename Traits>
cudaError_t launch_fwd_sm90(const AttnFwdParams& params, cudaStream_t stream, bool persistent = true) {
  constexpr int kSmemBytes = Traits::kSmemBytes;
  auto* kernel = &flashsdpa_fwd_sm90_kernel<Traits>;
  // Persistent: one CTA per SM (the tile needs all of an SM's shared memory), fewer for few tiles.
  const int64_t tiles = fwd_sm90::fwd_sm90_scheduler<Traits>(params).num_tiles();
  if (tiles == 0) return cudaSuccess;
  const int64_t grid =
      !persistent ? tiles : (tiles < params.num_sms ? tiles : (params.num_sms > 0 ? params.num_sms : 1));
  if (grid > INT_MAX) return cudaErrorInvalidConfiguration;

  FwdSm90Args args;
  args.p = params;
  const bool bf16 = params.dtype == DType::kBFloat16;
  const TmaTensor4d q{params.q, params.head_dim_qk, params.seqlen_q, params.heads_q, params.batch,
                      params.q_row_stride, params.q_head_stride, params.q_batch_stride};
  const TmaTensor4d k{params.k, params.head_dim_qk, params.seqlen_k, params.heads_kv, params.batch,
                      params.k_row_stride, params.k_head_stride, params.k_batch_stride};
  const TmaTensor4d v{params.v, params.head_dim_v, params.seqlen_k, params.heads_kv, params.batch,
                      params.v_row_stride, params.v_head_stride, params.v_batch_stride};
  const TmaTensor4d o{params.o, params.head_dim_v, params.seqlen_q, params.heads_q, params.batch,
                      params.o_row_stride, params.o_head_stride, params.o_batch_stride};
  // An encoding the driver refuses comes back as cudaErrorNotSupported before anything ran: the
  // host then launches the portable family instead.
  cudaError_t err;
  if ((err = encode_tma_4d(&args.tma_q, q, bf16, Traits::kBlockM)) != cudaSuccess) return err;
  if ((err = encode_tma_4d(&args.tma_k, k, bf16, Traits::kBlockN)) != cudaSuccess) return err;
  if ((err = encode_tma_4d(&args.tma_v, v, bf16, Traits::kBlockN)) != cudaSuccess) return err;
  if ((err = encode_tma_4d(&args.tma_o, o, bf16, 64)) != cudaSuccess) return err;

  if ((err = opt_in_dynamic_smem<&flashsdpa_fwd_sm90_kernel<Traits>>(kSmemBytes)) != cudaSuccess) return err;
  kernel<<<static_cast<unsigned>(grid), Traits::kThreads, kSmemBytes, stream>>>(args);
  return cudaGetLastError();
}

template <typename Elem, int kHeadDim>
cudaError_t run_fwd_sm90_(const AttnFwdParams& params, cudaStream_t stream) {
  constexpr FwdTileShapeSm90 kShape = fwd_tile_shape_sm90(kHeadDim);
  return launch_fwd_sm90<FwdTraitsSm90<Elem, kHeadDim, kShape.block_m, kShape.block_n, kShape.stages>>(params,
                                                                                                       stream);
}

}  // namespace flashsdpa
