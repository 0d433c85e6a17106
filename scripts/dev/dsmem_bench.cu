// dsmem_bench.cu: what one step of the CTA pairs' exchange costs alone (issue 14's d512 forward,
// whose wait for the peer's partial S is ~32% of its consumer warps' stall samples at 8k on the
// H100, session 36). Clusters of two CTAs trade fp32 tiles with ptx_sm90.cuh's PairExchange
// protocol, no GEMMs: cycles per step and the SM-to-SM bytes a second, for
//   xchg  st.async from registers (the kernels' form: 16 bytes a thread per instruction),
//   bulk  the tile staged in this CTA's shared memory, then one cp.async.bulk shared::cta ->
//         shared::cluster of the whole tile (the TMA engine does the transfer),
//   self  st.async to this CTA's own slot (the protocol's cost without the SM-to-SM network),
//   push  plain remote stores (st.shared::cluster), a warpgroup barrier, one thread's release
//         arrival on the peer's barrier, waits that acquire at cluster scope,
//   pull  the tile stored in this CTA's own slot, the same release, the peer's slot read by
//         remote loads (ld.shared::cluster),
// per warpgroup 2 / 8 / 16 / 32 KB (kVecs 1 / 4 / 8 / 16), one or two warpgroups exchanging at once,
// on one cluster (latency) and on 66 (every SM: the network's throughput).
// Then the exchange beside a GEMM (`contend`): warpgroups 0 and 1 trade 16 KB each a step (st.async,
// as above) while warpgroup 2 runs wgmma groups on garbage shared-memory operands: the S GEMM's form
// (m64n64k16, Q and K both from shared memory, 16 a group: 128 bytes a clock at the tensor rate),
// the same with A from registers (64 bytes a clock), P V's form (m64n256k16, A from registers, V from
// shared memory: 64 bytes a clock); each beside the exchange and alone: the exchange's cycles a step
// and the GEMM's FLOP a clock, to see whether a GEMM's operand reads leave the exchange room.
// Results (session 36, H100): kernel_notes_features.md, "Where the forward's time goes".
// Build: nvcc -gencode=arch=compute_90a,code=sm_90a -O3 -std=c++17 -Icuda -Ibackend/include
//        -o dsmem_bench scripts/dev/dsmem_bench.cu
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "common/ptx.cuh"
#include "sm90/ptx_sm90.cuh"
#include "sm90/wgmma_ops.cuh"

using namespace flashsdpa;

enum Mode { kXchg = 0, kBulk = 1, kSelf = 2, kPush = 3, kPull = 4 };

__device__ __forceinline__ void st_cluster_v4(uint32_t addr, float a, float b, float c, float d) {
  asm volatile("st.shared::cluster.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "f"(a), "f"(b), "f"(c), "f"(d)
               : "memory");
}
__device__ __forceinline__ uint4 ld_cluster_v4(uint32_t addr) {
  uint4 v;
  asm volatile("ld.shared::cluster.v4.u32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "r"(addr)
               : "memory");
  return v;
}
__device__ __forceinline__ void st_shared_v4(uint32_t addr, const float* acc, int j) {
  asm volatile("st.shared.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "f"(acc[4 * j]), "f"(acc[4 * j + 1]),
               "f"(acc[4 * j + 2]), "f"(acc[4 * j + 3])
               : "memory");
}
// acc's float4 j += v (PairExchange::take's add, for the transports that read the slot otherwise).
__device__ __forceinline__ void add_v4(float* acc, int j, uint4 v) {
  acc[4 * j] += __uint_as_float(v.x), acc[4 * j + 1] += __uint_as_float(v.y);
  acc[4 * j + 2] += __uint_as_float(v.z), acc[4 * j + 3] += __uint_as_float(v.w);
}
// One thread's release at cluster scope (after a warpgroup barrier: cumulative over the others'
// writes) and the peer's barrier's arrival.
__device__ __forceinline__ void arrive_remote_release(uint32_t cluster_bar) {
  asm volatile("fence.acq_rel.cluster;\nmbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0];\n" ::"r"(
                   cluster_bar)
               : "memory");
}
__device__ __forceinline__ void wait_acquire_cluster(uint32_t bar, uint32_t parity) {
  uint32_t done = 0;
  while (!done) {
    asm volatile(
        "{\n .reg .pred p;\n mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], %2;\n"
        " selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
  }
}

__device__ __forceinline__ void bulk_to_cluster(uint32_t dst_cluster, uint32_t src, uint32_t bytes, uint32_t bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.shared::cta.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
          dst_cluster),
      "r"(src), "r"(bytes), "r"(bar)
      : "memory");
}

// Shared memory: per warpgroup a receive slot and a staging tile of kVecs * 2 KB each, then the
// barriers (x_full, x_empty per warpgroup).
template <int kVecs>
__global__ void __cluster_dims__(2, 1, 1) __launch_bounds__(256)
    bench(int mode, int wgs, int steps, long long* cycles, float* sink) {
  extern __shared__ __align__(1024) uint8_t smem[];
  constexpr int kTile = kVecs * 2048;
  const uint32_t base = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  const int wg = threadIdx.x / 128, tid = threadIdx.x % 128;
  const uint32_t slot = base + wg * 2 * kTile, stage = slot + kTile;
  const uint32_t bars = base + 4 * kTile;
  const uint32_t full = bars + 16 * wg, empty = full + 8;
  if (threadIdx.x == 0) {
    for (int w = 0; w < 2; ++w) {
      sm90::mbar_init(bars + 16 * w, 1);
      sm90::mbar_init(bars + 16 * w + 8, 1);
    }
    sm90::fence_mbar_init();
  }
  sm90::cluster_sync();
  const int rank = sm90::cluster_rank();
  const int peer_rank = mode == kSelf ? rank : rank ^ 1;
  float acc[4 * kVecs];
#pragma unroll
  for (int i = 0; i < 4 * kVecs; ++i) acc[i] = 1e-7f * (threadIdx.x + i);
  long long t0 = 0;
  if (wg < wgs) {
    const sm90::PairExchange x(slot, full, empty, peer_rank, tid);
    auto for_vecs = [&](auto&& f) {
#pragma unroll
      for (int j = 0; j < kVecs; ++j) f(j);
    };
    const uint32_t stage_mine = stage + 16 * tid;
    const uint32_t peer_slot = sm90::map_to_rank(slot, peer_rank);
    for (int s = -32; s < steps; ++s) {
      if (s == 0) t0 = clock64();
      const int phase = s + 32;
      if (mode == kXchg || mode == kSelf) {
        x.add<kVecs>(acc, phase, 1 + wg, tid);
      } else if (mode == kPush) {  // plain remote stores, one release per warpgroup
        sm90::mbar_wait(empty, (phase & 1) ^ 1);
        for_vecs([&](int j) {
          st_cluster_v4(x.peer + 2048 * j, acc[4 * j], acc[4 * j + 1], acc[4 * j + 2], acc[4 * j + 3]);
        });
        sm90::named_sync(3 + wg, 128);
        if (tid == 0) arrive_remote_release(x.full_peer);
        wait_acquire_cluster(full, phase & 1);
        for_vecs([&](int j) { add_v4(acc, j, ld_shared_v4(x.mine + 2048 * j)); });
        x.release(1 + wg, tid);
      } else if (mode == kPull) {  // local stores, one release, remote loads
        sm90::mbar_wait(empty, (phase & 1) ^ 1);  // the peer has read my previous tile
        for_vecs([&](int j) { st_shared_v4(x.mine + 2048 * j, acc, j); });
        sm90::named_sync(3 + wg, 128);
        if (tid == 0) arrive_remote_release(x.full_peer);
        wait_acquire_cluster(full, phase & 1);  // the peer's tile is in its slot
        for_vecs([&](int j) { add_v4(acc, j, ld_cluster_v4(x.peer + 2048 * j)); });
        x.release(1 + wg, tid);
      } else {
        if (tid == 0) sm90::mbar_arrive_expect_tx(full, kTile);
        for_vecs([&](int j) { st_shared_v4(stage_mine + 2048 * j, acc, j); });
        sm90::fence_async_shared();
        sm90::named_sync(3 + wg, 128);
        if (tid == 0) {
          sm90::mbar_wait(empty, (phase & 1) ^ 1);
          bulk_to_cluster(peer_slot, stage, kTile, x.full_peer);
          sm90::tma_store_commit();
        }
        x.take<kVecs>(acc, phase);
        if (tid == 0) sm90::tma_store_wait_read();  // the stage may be rewritten
        x.release(1 + wg, tid);
      }
    }
    if (tid == 0) cycles[blockIdx.x * 2 + wg] = clock64() - t0;
  }
  float sum = 0.f;
#pragma unroll
  for (int i = 0; i < 4 * kVecs; ++i) sum += acc[i];
  sink[blockIdx.x * 256 + threadIdx.x] = sum;
  sm90::cluster_sync();  // no CTA exits while the other may still write to it
}

template <int kVecs>
void run(int mode, int wgs, int ctas) {
  const int steps = 4000;
  const size_t smem = 4 * kVecs * 2048 + 64;
  cudaFuncSetAttribute(bench<kVecs>, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
  long long* cycles;
  float* sink;
  cudaMalloc(&cycles, ctas * 2 * sizeof(long long));
  cudaMalloc(&sink, ctas * 256 * sizeof(float));
  cudaMemset(cycles, 0, ctas * 2 * sizeof(long long));
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  bench<kVecs><<<ctas, 256, smem>>>(mode, wgs, steps, cycles, sink);  // warm-up
  cudaEventRecord(a);
  bench<kVecs><<<ctas, 256, smem>>>(mode, wgs, steps, cycles, sink);
  cudaEventRecord(b);
  cudaError_t err = cudaDeviceSynchronize();
  if (err != cudaSuccess) {
    std::printf("error: %s\n", cudaGetErrorString(err));
    std::exit(1);
  }
  float ms = 0.f;
  cudaEventElapsedTime(&ms, a, b);
  std::vector<long long> h(ctas * 2);
  cudaMemcpy(h.data(), cycles, h.size() * sizeof(long long), cudaMemcpyDeviceToHost);
  double sum = 0.0;
  int n = 0;
  for (int c = 0; c < ctas; ++c)
    for (int w = 0; w < wgs; ++w) sum += static_cast<double>(h[2 * c + w]), ++n;
  const double cyc = sum / n / steps;
  const double bytes = static_cast<double>(ctas) * wgs * kVecs * 2048.0 * steps;  // sent, all CTAs
  static const char* names[] = {"xchg", "bulk", "self", "push", "pull"};
  std::printf("%-5s %2d KB/wg  wgs %d  ctas %3d  | %7.0f cycles/step  %6.1f B/clk/SM sent  %7.2f TB/s"
              " (events %.3f ms)\n",
              names[mode], 2 * kVecs, wgs, ctas, cyc, wgs * kVecs * 2048.0 / cyc, bytes / (ms * 1e-3) / 1e12, ms);
  cudaFree(cycles);
  cudaFree(sink);
}

enum Gemm { kNone = 0, kSS64 = 1, kRS64 = 2, kRS256 = 3 };

// 384 threads: warpgroups 0-1 exchange (`steps`), warpgroup 2 runs `gemm_iters` groups of `gemm`;
// each times the window [kWindow0, kWindow1) of its own loop, which lies inside the other's run
// (run_contend sizes the runs). Shared memory: the two warpgroups'
// slots (16 KB each), then A (64 x 256 bf16: 32 KB) and B (32 KB), then the barriers.
constexpr int kWindow0 = 500, kWindow1 = 1500;
template <int gemm>
__global__ void __cluster_dims__(2, 1, 1) __launch_bounds__(384, 1)
    contend(int steps, int gemm_iters, long long* out, float* sink) {
  extern __shared__ __align__(1024) uint8_t smem[];
  constexpr int kVecs = 8, kTile = kVecs * 2048;
  const uint32_t base = (static_cast<uint32_t>(__cvta_generic_to_shared(smem)) + 1023u) & ~1023u;
  const int wg = threadIdx.x / 128, tid = threadIdx.x % 128;
  const uint32_t a_base = base + 2 * kTile, b_base = a_base + 32768;
  const uint32_t bars = b_base + 32768;
  if (threadIdx.x == 0) {
    for (int w = 0; w < 2; ++w) {
      sm90::mbar_init(bars + 16 * w, 1);
      sm90::mbar_init(bars + 16 * w + 8, 1);
    }
    sm90::fence_mbar_init();
  }
  __syncthreads();
  sm90::cluster_sync();
  const int rank = sm90::cluster_rank();
  float sum = 0.f;
  if (wg < 2) {
    sm90::setmaxnreg_dec<136>();  // frees what the inc below takes (it waits for free ones)
    if (steps > 0) {
      const sm90::PairExchange x(base + wg * kTile, bars + 16 * wg, bars + 16 * wg + 8, rank ^ 1, tid);
      float v[4 * kVecs];
#pragma unroll
      for (int i = 0; i < 4 * kVecs; ++i) v[i] = 1e-7f * (threadIdx.x + i);
      long long t0 = 0, t1 = 0;
      for (int s = 0; s < steps; ++s) {
        if (s == kWindow0) t0 = clock64();
        if (s == kWindow1) t1 = clock64();
        x.add<kVecs>(v, s, 1 + wg, tid);
      }
      if (tid == 0) out[blockIdx.x * 4 + wg] = t1 - t0;
#pragma unroll
      for (int i = 0; i < 4 * kVecs; ++i) sum += v[i];
    }
  } else if constexpr (gemm != kNone) {
    sm90::setmaxnreg_inc<200>();
    using Op64 = sm90::WgmmaOp<__nv_bfloat16, 64>;
    using Op256 = sm90::WgmmaOp<__nv_bfloat16, 256>;
    const uint64_t a_desc = sm90::make_desc(a_base, 16, 1024), k_desc = sm90::make_desc(b_base, 16, 1024);
    const uint64_t v_desc = sm90::make_desc(b_base, 64 * 128, 1024);
    float acc[gemm == kRS256 ? 128 : 32];
#pragma unroll
    for (int i = 0; i < (gemm == kRS256 ? 128 : 32); ++i) acc[i] = 0.f;
    uint32_t afrag[4][4];  // (reused: the values do not matter)
#pragma unroll
    for (int k = 0; k < 4; ++k)
      for (int j = 0; j < 4; ++j) afrag[k][j] = 0x3c003c00u ^ (tid + k + j);
    auto& acc64 = *reinterpret_cast<float(*)[32]>(acc);
    sm90::wgmma_fence();
    long long t0 = 0, t1 = 0;
    for (int it = 0; it < gemm_iters; ++it) {
      if (it == kWindow0) t0 = clock64();
      if (it == kWindow1) t1 = clock64();
      sm90::wgmma_fence();
      if constexpr (gemm == kSS64) {
#pragma unroll
        for (int kk = 0; kk < 16; ++kk) {
          const uint64_t off = ((kk / 4) * 64 * 128 + (kk % 4) * 32) >> 4;
          Op64::template ss<0>(acc64, a_desc + off, k_desc + off, 1);
        }
      } else if constexpr (gemm == kRS64) {
#pragma unroll
        for (int kk = 0; kk < 16; ++kk) {
          const uint64_t off = ((kk / 4) * 64 * 128 + (kk % 4) * 32) >> 4;
          Op64::template rs<0>(acc64, afrag[kk % 4], k_desc + off, 1);
        }
      } else {
#pragma unroll
        for (int kk = 0; kk < 4; ++kk) Op256::template rs<1>(acc, afrag[kk], v_desc + ((kk * 2048) >> 4), 1);
      }
      sm90::wgmma_commit();
      sm90::wgmma_wait<1>();
    }
    sm90::wgmma_wait<0>();
    sm90::fence_regs(acc);
    if (tid == 0) out[blockIdx.x * 4 + 2] = t1 - t0;
#pragma unroll
    for (int i = 0; i < (gemm == kRS256 ? 128 : 32); ++i) sum += acc[i];
  }
  sink[blockIdx.x * 384 + threadIdx.x] = sum;
  sm90::cluster_sync();
}

template <int gemm>
void run_contend(bool with_exchange) {
  // Beside the exchange the GEMM runs 16,000 groups (>= 8 M cycles) so that it outlasts the
  // exchange's window (step 1,500 at <= 6 M cycles); its own window ends by 3 M cycles, inside
  // the exchange's 4,000 steps (>= 7 M cycles).
  const int ctas = 132, steps = with_exchange ? 4000 : 0;
  const int gemm_iters = gemm == kNone ? 0 : with_exchange ? 16000 : 2000;
  const size_t smem = 2 * 16384 + 65536 + 256 + 1024;
  cudaFuncSetAttribute(contend<gemm>, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
  long long* out;
  float* sink;
  cudaMalloc(&out, ctas * 4 * sizeof(long long));
  cudaMalloc(&sink, ctas * 384 * sizeof(float));
  cudaMemset(out, 0, ctas * 4 * sizeof(long long));
  contend<gemm><<<ctas, 384, smem>>>(steps, gemm_iters, out, sink);
  contend<gemm><<<ctas, 384, smem>>>(steps, gemm_iters, out, sink);
  cudaError_t err = cudaDeviceSynchronize();
  if (err != cudaSuccess) {
    std::printf("error: %s\n", cudaGetErrorString(err));
    std::exit(1);
  }
  std::vector<long long> h(ctas * 4);
  cudaMemcpy(h.data(), out, h.size() * sizeof(long long), cudaMemcpyDeviceToHost);
  double xc = 0, gc = 0;
  for (int c = 0; c < ctas; ++c) xc += 0.5 * (h[4 * c] + h[4 * c + 1]), gc += h[4 * c + 2];
  const int window = kWindow1 - kWindow0;
  static const char* names[] = {"none", "S form (ss m64n64, 128 B/clk)", "rs m64n64 (64 B/clk)",
                                "P V form (rs m64n256, 64 B/clk)"};
  const double flop = 16.0 * 64 * 64 * 16 * 2;  // a group: 2.1 MFLOP in every form
  std::printf("gemm %-32s exchange %-3s | exchange %6.0f cycles/step | gemm %7.1f FLOP/clk/SM\n", names[gemm],
              with_exchange ? "on" : "off", with_exchange ? xc / ctas / window : 0.0,
              gemm != kNone && gc > 0 ? flop * window * ctas / gc : 0.0);
  cudaFree(out);
  cudaFree(sink);
}

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // rows as they come (a hang still shows the rows before it)
  const bool transports = argc < 2 || std::string(argv[1]) != "contend";  // `dsmem_bench contend`: the second part only
  int sms = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  const int full = sms / 2 * 2;
  for (int mode : {kXchg, kPush, kPull, kBulk, kSelf}) {
    if (!transports) break;
    for (int ctas : {2, full}) {
      for (int wgs : {1, 2}) {
        run<1>(mode, wgs, ctas);
        run<4>(mode, wgs, ctas);
        run<8>(mode, wgs, ctas);
        run<16>(mode, wgs, ctas);
      }
    }
  }
  run_contend<kNone>(true);
  run_contend<kSS64>(true);
  run_contend<kSS64>(false);
  run_contend<kRS64>(true);
  run_contend<kRS64>(false);
  run_contend<kRS256>(true);
  run_contend<kRS256>(false);
  return 0;
}
