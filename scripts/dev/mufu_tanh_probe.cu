// mufu_tanh_probe.cu: the MUFU unit's rate for tanh.approx.f32, tanh.approx.f16x2 (two
// MUFU.TANH.F16 in SASS) and ex2.approx.f32, in results per clock per SM. Whether softcap's tanh
// gets cheaper in half precision (docs/kernel_notes_features.md, "Softcap's tanh in half
// precision") turns on whether a MUFU.TANH.F16 issues faster than a MUFU.TANH.
//   nvcc -gencode=arch=compute_90a,code=sm_90a -O3 -std=c++17 -o /tmp/mufu scripts/dev/mufu_tanh_probe.cu && /tmp/mufu
#include <cuda_fp16.h>
#include <cstdio>

constexpr int kChains = 8;   // independent values per thread: enough to cover MUFU's latency
constexpr int kIters = 4096;

// kEx2: ex2.approx.ftz.f32, else tanh.approx.f32, chained kIters deep on kChains values.
template <bool kEx2>
__global__ void chain_f32(float* out, float seed) {
  float x[kChains];
  for (int c = 0; c < kChains; ++c) x[c] = seed + 1e-3f * (threadIdx.x + c);
  for (int i = 0; i < kIters; ++i)
#pragma unroll
    for (int c = 0; c < kChains; ++c) {
      if constexpr (kEx2) {
        asm volatile("ex2.approx.ftz.f32 %0, %0;" : "+f"(x[c]));
      } else {
        asm volatile("tanh.approx.f32 %0, %0;" : "+f"(x[c]));
      }
    }
  float s = 0.f;
  for (int c = 0; c < kChains; ++c) s += x[c];
  out[blockIdx.x * blockDim.x + threadIdx.x] = s;
}

__global__ void tanh_f16x2(float* out, float seed) {
  unsigned x[kChains];  // two halves each: two results per instruction
  for (int c = 0; c < kChains; ++c) {
    const __half2 h = __floats2half2_rn(seed + 1e-3f * (threadIdx.x + c), seed - 1e-3f * c);
    x[c] = *reinterpret_cast<const unsigned*>(&h);
  }
  for (int i = 0; i < kIters; ++i)
#pragma unroll
    for (int c = 0; c < kChains; ++c) asm volatile("tanh.approx.f16x2 %0, %0;" : "+r"(x[c]));
  float s = 0.f;
  for (int c = 0; c < kChains; ++c) {
    const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&x[c]));
    s += f.x + f.y;
  }
  out[blockIdx.x * blockDim.x + threadIdx.x] = s;
}

template <typename Kernel>
double results_per_clock_sm(Kernel k, int per_instr, float* out, int sms, int clock_khz) {
  const int blocks = sms * 4, threads = 512;
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  k<<<blocks, threads>>>(out, 0.1f);  // warm-up
  cudaEventRecord(a);
  for (int r = 0; r < 5; ++r) k<<<blocks, threads>>>(out, -0.2f);
  cudaEventRecord(b);
  cudaEventSynchronize(b);
  float ms = 0.f;
  cudaEventElapsedTime(&ms, a, b);
  const double results = 5.0 * blocks * threads * kIters * kChains * per_instr;
  const double clocks = ms * 1e-3 * clock_khz * 1e3;  // at the nominal clock: a lower bound
  return results / clocks / sms;
}

int main() {
  cudaDeviceProp prop;
  cudaGetDeviceProperties(&prop, 0);
  int clock_khz = 0;
  cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, 0);
  float* out;
  cudaMalloc(&out, sizeof(float) * prop.multiProcessorCount * 4 * 512);
  const int sms = prop.multiProcessorCount;
  printf("%s, %d SMs, clock %d MHz (results per clock per SM at that clock)\n", prop.name, sms, clock_khz / 1000);
  printf("tanh.approx.f32    %6.2f\n", results_per_clock_sm(chain_f32<false>, 1, out, sms, clock_khz));
  printf("tanh.approx.f16x2  %6.2f (halves)\n", results_per_clock_sm(tanh_f16x2, 2, out, sms, clock_khz));
  printf("ex2.approx.f32     %6.2f\n", results_per_clock_sm(chain_f32<true>, 1, out, sms, clock_khz));
  const cudaError_t err = cudaDeviceSynchronize();
  printf("%s\n", cudaGetErrorString(err));
  return err == cudaSuccess ? 0 : 1;
}
