// compare_cuda.cuh: the standalone dev checks' one bf16 comparison (scripts/dev/*_check*.cu).
#pragma once

#include <cuda_bf16.h>

#include <cmath>
#include <cstdint>

// max |a - b| into *err_bits and max |b| into *ref_bits over n elements; a NaN in `a` counts as
// an infinite error. Non-negative floats order as their bit patterns, so unsigned atomicMax on
// the bits is a float max (the buffers start at 0).
__global__ void max_abs_diff_bf16(const __nv_bfloat16* a, const __nv_bfloat16* b, int64_t n, unsigned* err_bits,
                                  unsigned* ref_bits) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const float x = __bfloat162float(a[i]), y = __bfloat162float(b[i]);
    atomicMax(err_bits, __float_as_uint(x == x ? fabsf(x - y) : INFINITY));
    atomicMax(ref_bits, __float_as_uint(fabsf(y)));
  }
}
