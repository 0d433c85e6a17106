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
  const fwd_sm90::PersistentTileScheduler scheduler = fwd_sm90::fwd_sm90_scheduler<Traits>(params);
  const int64_t tiles = scheduler.num_tiles();
  if (tiles == 0) return cudaSuccess;
  const int64_t grid =
      !persistent ? tiles : (tiles < params.num_sms ? tiles : (params.num_sms > 0 ? params.num_sms : 1));
  // The kernel's tile indices are int32, and a dynamic fetch can reach tiles + grid.
  if (tiles + grid > INT_MAX) return cudaErrorInvalidConfiguration;

  FwdSm90Args args;
  args.p = params;
  args.sched_group = fwd_sm90::sched_group(params);
  // The split tail where the caller gave its workspace (else the plain round robin: a caller that
  // did not ask for the bytes, the dev harness, still runs); its tickets zeroed on the stream.
  args.split = persistent ? fwd_sm90::fwd_sm90_tail_split<Traits>(params) : TailSplit{static_cast<int>(tiles), 0, 0, 0};
  args.split_ws = static_cast<char*>(params.split_ws);
  if (args.split.enabled() && (params.split_ws == nullptr ||
                               params.split_ws_bytes < fwd_sm90::SplitWorkspace<Traits>::bytes(args.split)))
    args.split = TailSplit{static_cast<int>(tiles), 0, 0, 0};
  if (args.split.enabled()) {
    const cudaError_t zeroed =
        cudaMemsetAsync(params.split_ws, 0, fwd_sm90::SplitWorkspace<Traits>::slots(args.split), stream);
    if (zeroed != cudaSuccess) return zeroed;
  }
  // The tile counter (params.h) is one buffer per stream that each launch leaves zeroed for the
  // next; replays of captured graphs could share it across streams at once, so a launch being
  // captured takes the static schedule. One CTA per tile needs no counter, nor does a schedule
  // that stays static (fwd_sm90_scheduler): the kernel must see the same choice.
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  if (!scheduler.dynamic() || grid == tiles || cudaStreamIsCapturing(stream, &capture) != cudaSuccess ||
      capture != cudaStreamCaptureStatusNone)
    args.p.tile_counter = nullptr;
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
  return cudaGetLastError();
}

template <typename Elem, int kHeadDim>
cudaError_t run_fwd_sm90_(const AttnFwdParams& params, cudaStream_t stream) {
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
      return launch_fwd_sm90<FwdTraitsSm90<Elem, kHeadDim, kM, kN, kS, kPingPong, 2, kModsBias>>(params, stream);
    default:
      return launch_fwd_sm90<FwdTraitsSm90<Elem, kHeadDim, kM, kN, kS>>(params, stream);
  }
}

}  // namespace flashsdpa
