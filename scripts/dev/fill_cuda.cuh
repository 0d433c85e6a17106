// fill_cuda.cuh: the standalone dev checks' random inputs and 16-bit conversions
// (scripts/dev/fwd_check.cu, scripts/dev/fwd512_check.cu).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>

template <typename Elem> __device__ float to_f(Elem x);
template <> __device__ float to_f(__half x) { return __half2float(x); }
template <> __device__ float to_f(__nv_bfloat16 x) { return __bfloat162float(x); }
template <typename Elem> __device__ Elem from_f(float x);
template <> __device__ __half from_f(float x) { return __float2half_rn(x); }
template <> __device__ __nv_bfloat16 from_f(float x) { return __float2bfloat16_rn(x); }

__device__ uint32_t hash32(uint64_t x) {
  x ^= x >> 33; x *= 0xff51afd7ed558ccdull; x ^= x >> 33; x *= 0xc4ceb9fe1a85ec53ull; x ^= x >> 33;
  return static_cast<uint32_t>(x);
}

// Roughly normal values (sum of 4 uniforms, variance 1): no zeros, every element different.
template <typename Elem>
__global__ void fill_random(Elem* x, int64_t n, uint64_t seed, float magnitude = 1.f, float constant = NAN) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    float s = 0.f;
    for (int r = 0; r < 4; ++r) s += hash32(seed * 0x9E3779B97F4A7C15ull + i * 4 + r) * (1.f / 4294967296.f);
    x[i] = from_f<Elem>(constant == constant ? constant : (s - 2.f) * 1.7320508f * magnitude);
  }
}
