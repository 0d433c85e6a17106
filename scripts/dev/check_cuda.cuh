// check_cuda.cuh: the standalone dev checks' one error check (scripts/dev/*_check*.cu).
#pragma once

#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

// Exits with code 2 and the call's location on any CUDA error.
#define CHECK_CUDA(x)                                                                      \
  do {                                                                                     \
    cudaError_t e_ = (x);                                                                  \
    if (e_ != cudaSuccess) {                                                               \
      std::printf("CUDA error %s at %s:%d\n", cudaGetErrorString(e_), __FILE__, __LINE__); \
      std::exit(2);                                                                        \
    }                                                                                      \
  } while (0)
