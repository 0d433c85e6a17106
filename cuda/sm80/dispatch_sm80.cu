// dispatch_sm80.cu: run_fwd_sm80 / run_bwd_sm80 switch on (dtype, head-dim bucket) into the
// per-TU instantiations of the portable family. Which combinations exist is decided by CMake
// (FLASHSDPA_DTYPE_<dtype> and FLASHSDPA_HDIM_<d> definitions), matching the TUs it compiles;
// the host checks have already rejected anything outside that set.
#include "flashsdpa/kernels.h"
#include "sm80/bwd_launch_sm80.cuh"  // the backward tile table (traits only; no kernel is instantiated here)
#include "sm80/launch_sm80.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace flashsdpa {
namespace {

// fn(std::integral_constant<int, bucket>) for a compiled head-dim bucket, else `none`.
template <typename Fn, typename R>
R by_bucket(int bucket, Fn&& fn, R none) {
  switch (bucket) {
#ifdef FLASHSDPA_HDIM_32
    case 32: return fn(std::integral_constant<int, 32>{});
#endif
#ifdef FLASHSDPA_HDIM_64
    case 64: return fn(std::integral_constant<int, 64>{});
#endif
#ifdef FLASHSDPA_HDIM_96
    case 96: return fn(std::integral_constant<int, 96>{});
#endif
#ifdef FLASHSDPA_HDIM_128
    case 128: return fn(std::integral_constant<int, 128>{});
#endif
#ifdef FLASHSDPA_HDIM_192
    case 192: return fn(std::integral_constant<int, 192>{});
#endif
#ifdef FLASHSDPA_HDIM_256
    case 256: return fn(std::integral_constant<int, 256>{});
#endif
    default: return none;
  }
}

template <typename Elem, typename Params, typename Launch>
cudaError_t by_head_dim(const Params& params, Launch&& launch) {
  return by_bucket(head_dim_bucket(params.head_dim_qk, params.head_dim_v), launch, cudaErrorNotSupported);
}

template <typename Params, typename LaunchForElem>
cudaError_t by_dtype(const Params& params, LaunchForElem&& launch) {
  switch (params.dtype) {
#ifdef FLASHSDPA_DTYPE_FP16
    case DType::kFloat16: return launch(__half{});
#endif
#ifdef FLASHSDPA_DTYPE_BF16
    case DType::kBFloat16: return launch(__nv_bfloat16{});
#endif
    default: return cudaErrorNotSupported;
  }
}

}  // namespace

int run_fwd_sm80(const AttnFwdParams& params, void* stream) {
  const auto s = static_cast<cudaStream_t>(stream);
  return by_dtype(params, [&](auto elem) {
    using Elem = decltype(elem);
    return by_head_dim<Elem>(params, [&](auto hdim) { return run_fwd_sm80_<Elem, decltype(hdim)::value>(params, s); });
  });
}

int bwd_smem_bytes_sm80(int head_dim_qk, int head_dim_v, int major, int smem_optin_bytes) {
  using namespace bwd_sm80;
  const auto bytes = [&](auto hdim) {
    constexpr int kHeadDim = decltype(hdim)::value;  // shared memory is the same for both dtypes
    switch (bwd_tile_choice<kHeadDim>(major, smem_optin_bytes)) {
      case 0: return smem_bytes_on<BwdTraitsFor<__half, kHeadDim>>(major);
      case 1: return smem_bytes_on<BwdTraitsSmallSmemFor<__half, kHeadDim>>(major);
      default: return 0;
    }
  };
  return by_bucket(head_dim_bucket(head_dim_qk, head_dim_v), bytes, 0);
}

int run_bwd_sm80(const AttnBwdParams& params, void* stream) {
  const auto s = static_cast<cudaStream_t>(stream);
  return by_dtype(params, [&](auto elem) {
    using Elem = decltype(elem);
    return by_head_dim<Elem>(params, [&](auto hdim) { return run_bwd_sm80_<Elem, decltype(hdim)::value>(params, s); });
  });
}

}  // namespace flashsdpa
