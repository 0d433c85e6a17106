// smem_optin.cuh: the per-device opt-in to more than 48 KB of dynamic shared memory, shared by
// every family's launchers.
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>

namespace flashsdpa {

// Above 48 KB a kernel must opt in to dynamic shared memory, once per (kernel, device). One bit
// per device remembers which devices are set, so the per-call cost is one cudaGetDevice. A
// template on the kernel itself: each kernel has its own bits (kernels of one signature share a
// function-pointer type, so a template on the type alone would share them).
template <auto kKernel>
cudaError_t opt_in_dynamic_smem(int bytes) {
  if (bytes <= 48 * 1024) return cudaSuccess;
  static std::atomic<uint64_t> devices_set{0};
  int device = 0;
  cudaError_t err = cudaGetDevice(&device);
  if (err != cudaSuccess) return err;
  const uint64_t bit = device < 64 ? (uint64_t{1} << device) : 0;
  if (bit == 0 || !(devices_set.load(std::memory_order_relaxed) & bit)) {
    err = cudaFuncSetAttribute(kKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
    if (err != cudaSuccess) return err;
    devices_set.fetch_or(bit, std::memory_order_relaxed);
  }
  return cudaSuccess;
}

}  // namespace flashsdpa
