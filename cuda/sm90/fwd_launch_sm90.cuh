// fwd_launch_sm90.cuh: run_fwd_sm90_<Elem, kHeadDim>, the host launcher of the Hopper forward.
// Encodes the four TMA descriptors of the call, raises the dynamic shared-memory limit once per
// device, sizes the 1-D grid from the scheduler and launches. Included by the generated
// cuda/instantiations/fwd_sm90_<dtype>_hdim<d>.cu files.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <climits>
#include <cstdint>

#include "common/sanitizer_marks.cuh"
#include "common/smem_optin.cuh"
#include "sm90/fwd512_kernel_sm90.cuh"
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
  const fwd_sm90::PersistentTileScheduler scheduler = fwd_sm90::fwd_sm90_scheduler<Traits>(params);
  const int64_t tiles = scheduler.num_tiles();
  if (tiles == 0) return cudaSuccess;
  const int64_t grid =
      !persistent ? tiles : (tiles < params.num_sms ? tiles : (params.num_sms > 0 ? params.num_sms : 1));
  // The kernel's tile indices are int32, and a dynamic fetch can reach tiles + grid.
  if (tiles + grid > INT_MAX) return cudaErrorInvalidConfiguration;

  FwdSm90Args args;
  args.p = params;
  args.sched_group = fwd_sm90::sched_group(params, scheduler.num_blocks, grid);
  // The workspace (params.h), where the caller gave one of the bytes fwd_workspace_sm90 reports
  // (else the static schedule: a caller that did not ask, the dev harness, still runs): the dynamic
  // schedule's tile counter for a masked grid of more tiles than CTAs, the split tail's tickets
  // and slots for an unmasked one; what must start at zero is zeroed on the stream (a memset node
  // under graph capture, where the workspace comes from the graph's pool: replays on several
  // streams at once never share it). The kernel sees the choice through args.p / args.split.
  const fwd_sm90::FwdWorkspacePlan ws = fwd_sm90::fwd_workspace_plan<Traits>(params, persistent);
  const bool given = params.workspace != nullptr && params.workspace_bytes >= ws.bytes && ws.bytes > 0;
  args.p.tile_counter = given && ws.counter ? static_cast<int32_t*>(params.workspace) : nullptr;
  args.split = given && ws.split.enabled() ? ws.split : TailSplit{static_cast<int>(tiles), 0, 0, 0};
  args.workspace = static_cast<char*>(params.workspace);
  if (given) {
    const cudaError_t zeroed = cudaMemsetAsync(params.workspace, 0, ws.zeroed, stream);
    if (zeroed != cudaSuccess) return zeroed;
  }
  const bool bf16 = params.dtype == DType::kBFloat16;
  // An encoding the driver refuses comes back as cudaErrorNotSupported before anything ran: the
  // host then launches the portable family instead.
  cudaError_t err = encode_tma_all({{&args.tma_q, tma_q(params), Traits::kBlockM},
                                    {&args.tma_k, tma_k(params), Traits::kBlockN},
                                    {&args.tma_v, tma_v(params), Traits::kBlockN},
                                    {&args.tma_o, tma_o(params), 64}},
                                   bf16);
  if (err != cudaSuccess) return err;
  if ((err = opt_in_dynamic_smem<&flashsdpa_fwd_sm90_kernel<Traits>>(kSmemBytes)) != cudaSuccess) return err;
  kernel<<<static_cast<unsigned>(grid), Traits::kThreads, kSmemBytes, stream>>>(args);
  const cudaError_t launched = cudaGetLastError();
  // A dense O is the TMA unit's store (varlen rows go by plain stores): tell initcheck, when asked.
  if (launched == cudaSuccess && params.cu_seqlens_q == nullptr && sanitizer_marks_enabled())
    mark_initialized(params.o,
                     strided_extent_bytes(params.batch, params.o_batch_stride, params.seqlen_q, params.o_row_stride,
                                          params.heads_q, params.o_head_stride, params.head_dim_v, 2),
                     stream);
  return launched;
}

// The buckets up to 256: fwd_kernel_sm90.cuh's tiles.
template <typename Elem, int kHeadDim>
cudaError_t run_fwd_sm90_tiles_(const AttnFwdParams& params, cudaStream_t stream) {
  constexpr FwdTileShapeSm90 kShape = fwd_tile_shape_sm90(kHeadDim);
  constexpr int kM = kShape.block_m, kN = kShape.block_n, kS = kShape.stages;
  // The score modifiers' instantiations (softcap, ALiBi, sinks; the bias: score_mod.cuh's mods_kind).
  constexpr bool kPingPong = kHeadDim <= 128;
  if (params.dropout.enabled())  // dropout: its own instantiation (the host pairs it with no modifier)
    return launch_fwd_sm90<FwdTraitsSm90<Elem, kHeadDim, kM, kN, kS, kPingPong, 2, kModsNone, true>>(params, stream);
  switch (mods_kind(params.mods)) {
    case kModsScore:
      return launch_fwd_sm90<FwdTraitsSm90<Elem, kHeadDim, kM, kN, kS, kPingPong, 2, kModsScore>>(params, stream);
    case kModsBias:
      return launch_fwd_sm90<FwdBiasTraitsSm90<Elem, kHeadDim>>(params, stream);
    default:
      if constexpr (kHeadDim <= 64) {  // short calls: the 128-row tile (fwd_sm90_short_tile)
        constexpr FwdTileShapeSm90 kT = kFwdShortTileSm90;
        if (fwd_sm90_short_tile(params))
          return launch_fwd_sm90<FwdTraitsSm90<Elem, kHeadDim, kT.block_m, kT.block_n, kT.stages>>(params, stream);
      }
      return launch_fwd_sm90<FwdTraitsSm90<Elem, kHeadDim, kM, kN, kS>>(params, stream);
  }
}

template <typename Elem, int kHeadDim>
cudaError_t run_fwd_sm90_(const AttnFwdParams& params, cudaStream_t stream) {
  if constexpr (kHeadDim == 512) {  // its own kernel (two-CTA clusters); the bucket's limits: capabilities.cpp
    return launch_fwd512_sm90<Elem>(params, stream);
  } else {
    return run_fwd_sm90_tiles_<Elem, kHeadDim>(params, stream);
  }
}

}  // namespace flashsdpa
