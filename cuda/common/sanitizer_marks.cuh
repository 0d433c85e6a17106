// sanitizer_marks.cuh: tells compute-sanitizer's initcheck which global memory the TMA unit wrote,
// while FLASHSDPA_SANITIZER_MARKS=1 (read once; unset or 0: one branch on a static, nothing else).
//
// Why: initcheck does not record writes made by cp.async.bulk[.tensor] / cp.reduce.async.bulk
// (shared -> global). Session 25's probe (scripts/dev/initcheck_bulk_probe.cu, compute-sanitizer
// 2025.3.1, H200) wrote one buffer with st.global and one with cp.async.bulk, and read both back:
// right values in both, yet a report per word of the bulk-written one, as of a never-written
// buffer. Our two reads of such words (the dQ postprocess's dq_accum, the sm90 backward's bulk
// store / reduce; the preprocess's and PyTorch's reads of O, the sm90 forward's TMA store) then
// flooded initcheck with ~37,000 reports on test_kernels' sanitizer subset, so it could not finish
// nor show anything else. Marked here after the kernel that writes them (NVTX's memory API, on the
// kernel's stream), the rest of initcheck's view stays whole. What initcheck cannot say about
// those words, the GPU tests check by poisoning (test_bwd_poisoned_workspace; the forwards into
// NaN-filled outputs, bitwise). Header-only NVTX v3 (the CUDA toolkit's): without a tool attached
// its calls return at once.
#pragma once

#include <cuda_runtime.h>
#include <nvtx3/nvToolsExtMemCudaRt.h>

#include <cstdint>
#include <cstdlib>

namespace flashsdpa {

inline bool sanitizer_marks_enabled() {
  static const bool on = [] {
    const char* v = std::getenv("FLASHSDPA_SANITIZER_MARKS");
    return v != nullptr && v[0] != '\0' && !(v[0] == '0' && v[1] == '\0');
  }();
  return on;
}

// The bytes [ptr, ptr + bytes) are initialized as of this point of `stream`. Callers ask
// sanitizer_marks_enabled() first (and only then work out the range).
inline void mark_initialized(const void* ptr, int64_t bytes, cudaStream_t stream) {
  if (ptr == nullptr || bytes <= 0) return;
  static const nvtxDomainHandle_t domain = nvtxDomainCreateA("flashsdpa");
  nvtxMemVirtualRangeDesc_t range{};
  range.size = static_cast<size_t>(bytes);
  range.ptr = ptr;
  nvtxMemMarkInitializedBatch_t desc{};
  desc.extCompatID = NVTX_EXT_COMPATID_MEM;
  desc.structSize = sizeof(desc);
  desc.regionType = NVTX_MEM_TYPE_VIRTUAL_ADDRESS;
  desc.regionDescCount = 1;
  desc.regionDescElementSize = sizeof(range);
  desc.regionDescElements = &range;
  nvtxMemCudaMarkInitialized(domain, stream, 0, &desc);
}

// The bytes a (batch, rows, heads, row_elems) strided view spans from its first element to one past
// its last (strides in elements, each >= 0): the range to mark for an output written by TMA.
inline int64_t strided_extent_bytes(int64_t batch, int64_t batch_stride, int64_t rows, int64_t row_stride, int64_t heads,
                                    int64_t head_stride, int64_t row_elems, int64_t elem_bytes) {
  if (batch <= 0 || rows <= 0 || heads <= 0 || row_elems <= 0) return 0;
  const int64_t last = (batch - 1) * batch_stride + (rows - 1) * row_stride + (heads - 1) * head_stride + row_elems;
  return last * elem_bytes;
}

}  // namespace flashsdpa
