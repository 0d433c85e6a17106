// launch.cuh: programmatic dependent launch (PDL), shared by every family's launchers: the
// backward's dQ postprocess and sm90 main kernel (bwd_prepost.cuh, sm90/bwd_launch_sm90.cuh) and
// the decode path's split combine (split_combine.cuh). The kernels' halves of the contract are
// ptx.cuh's grid_dependents_launch / grid_dependency_wait.
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
#include <utility>

namespace flashsdpa {

// A launch that may begin while the stream's previous kernel still runs (programmatic stream
// serialization): the kernel itself waits for it where it needs its results (grid_dependency_wait).
// `cluster` > 1: clusters of that many consecutive CTAs in x (the sm90 d512 backward's pairs).
template <typename... KernelArgs, typename... Args>
cudaError_t launch_programmatic_clusters(void (*kernel)(KernelArgs...), unsigned grid, unsigned cluster,
                                         unsigned threads, size_t smem, cudaStream_t stream, Args&&... args) {
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(grid);
  config.blockDim = dim3(threads);
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  cudaLaunchAttribute attribute[2];
  attribute[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute[0].val.programmaticStreamSerializationAllowed = 1;
  attribute[1].id = cudaLaunchAttributeClusterDimension;
  attribute[1].val.clusterDim.x = cluster;
  attribute[1].val.clusterDim.y = 1;
  attribute[1].val.clusterDim.z = 1;
  config.attrs = attribute;
  config.numAttrs = cluster > 1 ? 2 : 1;
  return cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
}

template <typename... KernelArgs, typename... Args>
cudaError_t launch_programmatic(void (*kernel)(KernelArgs...), unsigned grid, unsigned threads, size_t smem,
                                cudaStream_t stream, Args&&... args) {
  return launch_programmatic_clusters(kernel, grid, 1u, threads, smem, stream, std::forward<Args>(args)...);
}

// Whether kKernel, as loaded on the current device, was compiled from sm_90+ PTX, so that its
// griddepcontrol.wait exists (ptx.cuh compiles it out below sm_90): only such a kernel may be
// launched programmatically after one whose results it reads. A portable kernel on an H200 is not
// always one: a build for FLASHSDPA_ARCHS=80 runs there from compute_80 PTX, without the wait.
// Answered once per (kernel, device) from cudaFuncGetAttributes (ptxVersion), then two bit tests
// and the cudaGetDevice the launchers already pay; the sm90 family's kernels need no asking.
template <auto kKernel>
cudaError_t programmatic_capable(bool& capable) {
  static std::atomic<uint64_t> devices_known{0}, devices_capable{0};
  int device = 0;
  cudaError_t err = cudaGetDevice(&device);
  if (err != cudaSuccess) return err;
  const uint64_t bit = device < 64 ? (uint64_t{1} << device) : 0;
  if (bit != 0 && (devices_known.load(std::memory_order_relaxed) & bit)) {
    capable = (devices_capable.load(std::memory_order_relaxed) & bit) != 0;
    return cudaSuccess;
  }
  cudaFuncAttributes attributes;
  if ((err = cudaFuncGetAttributes(&attributes, kKernel)) != cudaSuccess) return err;
  capable = attributes.ptxVersion >= 90;
  // Capable before known: a reader racing this sees at worst "known, not capable", a plain launch.
  if (capable) devices_capable.fetch_or(bit, std::memory_order_relaxed);
  devices_known.fetch_or(bit, std::memory_order_relaxed);
  return cudaSuccess;
}

}  // namespace flashsdpa
