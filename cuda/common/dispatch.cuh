// dispatch.cuh: what every family's generated dispatch (cuda/instantiations/dispatch_<family>.cu)
// shares: the case key of its switch over (dtype, head-dim bucket), and the headers of the element
// types. The host has chosen the family and its bucket (params.head_dim_bucket) and checked that
// this build compiled them; a case the build left out answers cudaErrorNotSupported.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "flashsdpa/kernels.h"
#include "flashsdpa/params.h"

namespace flashsdpa {

constexpr int dispatch_key(DType dtype, int head_dim_bucket) {
  return static_cast<int>(dtype) * 1024 + head_dim_bucket;  // buckets are <= 256
}

}  // namespace flashsdpa
