// initcheck_bulk_probe.cu (session 25): does compute-sanitizer's initcheck see global memory that
// only the TMA unit wrote (cp.async.bulk shared -> global, the sm90 backward's first dQ store of a
// query block into dq_accum)? Session 25's initcheck run reported 100 "uninitialized __global__
// memory read" in flashsdpa_bwd_dq_postprocess_kernel (bwd_prepost.cuh:238, the __ldcg of
// dq_accum) on san_tiny (bf16 d64, 7 x 7), whose answer passes the rule with outputs poisoned; the
// only writer of those words is bulk_store. Three fresh cudaMalloc buffers, each written one way,
// then read by the same kernel:
//   st      plain st.global from registers                       (control: initcheck must be silent)
//   bulk    cp.async.bulk.global.shared::cta (bulk_store's PTX)    (the question)
//   none    never written                                         (control: initcheck must report)
// Each read kernel sums its buffer into out[i], so the host can also check the values (1.0 each).
//   nvcc -std=c++17 -arch=sm_90a -o /tmp/probe scripts/dev/initcheck_bulk_probe.cu
//   compute-sanitizer --tool initcheck /tmp/probe
#include <cstdio>
#include <cstdint>
#include <cuda_runtime.h>

constexpr int kN = 256;  // floats per buffer (1 KiB: one bulk copy)

__global__ void write_st(float* g) { g[threadIdx.x] = 1.0f; }

__global__ void write_bulk(float* g) {
  __shared__ alignas(128) float s[kN];
  s[threadIdx.x] = 1.0f;
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
  __syncthreads();
  if (threadIdx.x == 0) {
    const uint32_t sa = static_cast<uint32_t>(__cvta_generic_to_shared(s));
    asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;\n" ::"l"(g), "r"(sa), "r"(kN * 4) : "memory");
    asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
    asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory");
  }
}

__global__ void read_sum(const float* g, float* out, int which) {
  __shared__ float part[kN];
  part[threadIdx.x] = __ldcg(g + threadIdx.x);
  __syncthreads();
  if (threadIdx.x == 0) {
    float sum = 0.f;
    for (int i = 0; i < kN; ++i) sum += part[i];
    out[which] = sum / kN;
  }
}

int main() {
  float *st = nullptr, *bulk = nullptr, *none = nullptr, *out = nullptr;
  cudaMalloc(&st, kN * 4), cudaMalloc(&bulk, kN * 4), cudaMalloc(&none, kN * 4), cudaMalloc(&out, 3 * 4);
  cudaMemset(out, 0, 3 * 4);
  write_st<<<1, kN>>>(st);
  write_bulk<<<1, kN>>>(bulk);
  std::printf("--- read st (expect no report)\n"); fflush(stdout);
  read_sum<<<1, kN>>>(st, out, 0);
  cudaDeviceSynchronize();
  std::printf("--- read bulk (the question)\n"); fflush(stdout);
  read_sum<<<1, kN>>>(bulk, out, 1);
  cudaDeviceSynchronize();
  std::printf("--- read none (expect reports)\n"); fflush(stdout);
  read_sum<<<1, kN>>>(none, out, 2);
  cudaDeviceSynchronize();
  float h[3];
  cudaMemcpy(h, out, sizeof h, cudaMemcpyDeviceToHost);
  std::printf("values: st %.3f bulk %.3f (1.000 expected), none %.3f; %s\n", h[0], h[1], h[2],
              cudaGetErrorString(cudaGetLastError()));
  return 0;
}
