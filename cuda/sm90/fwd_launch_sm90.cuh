// fwd_launch_sm90.cuh: run_fwd_sm90_<Elem, kHeadDim>, the host launcher of the Hopper forward.
// Encodes the four TMA descriptors of the call, raises the dynamic shared-memory limit once per
// device, sizes the 1-D grid from the scheduler and launches. Included by the generated
// cuda/instantiations/fwd_sm90_<dtype>_hdim<d>.cu files.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <atomic>
#include <climits>
#include <cstdint>

#include "common/sanitizer_marks.cuh"
#include "common/smem_optin.cuh"
#include "sm90/fwd512_kernel_sm90.cuh"
#include "sm90/fwd_kernel_sm90.cuh"
#include "sm90/tma_sm90.h"

namespace flashsdpa {

// Whether `pairs` clusters of two CTAs of kKernel can be resident at once on this device (the
// persistent pair grid assumes every worker runs from the start: a worker that waits for a free
// pair of SMs doubles the call). Two CTAs of a cluster need SMs of one GPC, so a part whose GPCs
// have odd SM counts holds fewer pairs than SMs / 2. Asked once per (kernel, device): two bits per
// device (known, fits), as opt_in_dynamic_smem remembers its opt-in. cudaOccupancyMaxActiveClusters
// wants the kernel's shared-memory opt-in first.
template <auto kKernel>
bool fwd_sm90_pairs_fit(int threads, int smem_bytes, int pairs) {
  static std::atomic<uint64_t> known{0}, fits{0};
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess || device >= 64) return false;
  const uint64_t bit = uint64_t{1} << device;
  if (!(known.load(std::memory_order_relaxed) & bit)) {
    int clusters = 0;
    cudaLaunchConfig_t config = {};
    config.gridDim = dim3(2 * static_cast<unsigned>(pairs > 0 ? pairs : 1));
    config.blockDim = dim3(threads);
    config.dynamicSmemBytes = smem_bytes;
    cudaLaunchAttribute attribute[1];
    attribute[0].id = cudaLaunchAttributeClusterDimension;
    attribute[0].val.clusterDim.x = 2;
    attribute[0].val.clusterDim.y = 1;
    attribute[0].val.clusterDim.z = 1;
    config.attrs = attribute;
    config.numAttrs = 1;
    const bool ok = opt_in_dynamic_smem<kKernel>(smem_bytes) == cudaSuccess &&
                    cudaOccupancyMaxActiveClusters(&clusters, kKernel, &config) == cudaSuccess && clusters >= pairs;
    (void)cudaGetLastError();  // a refused query leaves no sticky error for the next launch to report
    if (ok) fits.fetch_or(bit, std::memory_order_relaxed);
    known.fetch_or(bit, std::memory_order_relaxed);
  }
  return (fits.load(std::memory_order_relaxed) & bit) != 0;
}

// persistent = false launches one CTA per tile instead (the same kernel: each CTA then runs one
// loop trip), for measuring what persistence buys.
template <typename Traits>
cudaError_t launch_fwd_sm90(const AttnFwdParams& params, cudaStream_t stream, bool persistent = true) {
  constexpr int kSmemBytes = Traits::kSmemBytes;
  auto* kernel = &flashsdpa_fwd_sm90_kernel<Traits>;
  // Persistent: one CTA per SM (the tile needs all of an SM's shared memory), fewer for few tiles.
  // CTA pairs (Traits::kCluster): a worker per two SMs, its tiles pairs of query blocks.
  constexpr int kCluster = Traits::kCluster;
  static_assert(kCluster == 1 || kCluster == 2, "CTAs alone or in pairs");
  const auto scheduler = fwd_sm90::fwd_sm90_scheduler<Traits>(params);
  const int64_t tiles = scheduler.num_tiles();
  if (tiles == 0) return cudaSuccess;
  const int64_t workers = params.num_sms / kCluster > 0 ? params.num_sms / kCluster : 1;
  if (kCluster > 1 && !persistent) return cudaErrorInvalidConfiguration;  // (pairs run persistent only)
  const int64_t grid = kCluster * (!persistent ? tiles : (tiles < workers ? tiles : workers));
  // The kernel's tile indices are int32, and a dynamic fetch can reach tiles + grid.
  if (tiles + grid > INT_MAX) return cudaErrorInvalidConfiguration;

  FwdSm90Args args;
  args.p = params;
  args.sched_group = fwd_sm90::sched_group(params);
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
  // (CTA pairs: each CTA loads half of a K / V tile's rows.)
  cudaError_t err = encode_tma_all({{&args.tma_q, tma_q(params), Traits::kBlockM},
                                    {&args.tma_k, tma_k(params), Traits::kBlockN / kCluster},
                                    {&args.tma_v, tma_v(params), Traits::kBlockN / kCluster},
                                    {&args.tma_o, tma_o(params), 64}},
                                   bf16);
  if (err != cudaSuccess) return err;
  if ((err = opt_in_dynamic_smem<&flashsdpa_fwd_sm90_kernel<Traits>>(kSmemBytes)) != cudaSuccess) return err;
  cudaError_t launched;
  if constexpr (kCluster == 1) {
    kernel<<<static_cast<unsigned>(grid), Traits::kThreads, kSmemBytes, stream>>>(args);
    launched = cudaGetLastError();
  } else {
    cudaLaunchConfig_t config = {};
    config.gridDim = dim3(static_cast<unsigned>(grid));
    config.blockDim = dim3(Traits::kThreads);
    config.dynamicSmemBytes = kSmemBytes;
    config.stream = stream;
    cudaLaunchAttribute attribute[1];
    attribute[0].id = cudaLaunchAttributeClusterDimension;
    attribute[0].val.clusterDim.x = kCluster;
    attribute[0].val.clusterDim.y = 1;
    attribute[0].val.clusterDim.z = 1;
    config.attrs = attribute;
    config.numAttrs = 1;
    launched = cudaLaunchKernelEx(&config, kernel, args);
  }
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
      if constexpr (kHeadDim == 128) {  // unmasked dense calls: CTA pairs (fwd_sm90_cluster)
        using Pairs = FwdTraitsSm90<Elem, kHeadDim, kM, kN, kS, kPingPong, 2, kModsNone, false, 2>;
        if (fwd_sm90_cluster(params) &&
            fwd_sm90_pairs_fit<&flashsdpa_fwd_sm90_kernel<Pairs>>(Pairs::kThreads, Pairs::kSmemBytes, params.num_sms / 2))
          return launch_fwd_sm90<Pairs>(params, stream);
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
