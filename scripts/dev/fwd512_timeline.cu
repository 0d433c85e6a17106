// fwd512_timeline.cu: one cluster's step timeline in the head-dim-512 forward
// (cuda/sm90/fwd512_kernel_sm90.cuh built with -DFLASHSDPA_SM90_FWD512_TIMELINE=1): per consumer
// warpgroup of both CTAs, the median over steps 8..119 of each phase of a step (waits for K and V,
// the issue, S's GEMM, the exchange, the softmax, P V's tail, the rescale) at B 2 x H 4 x 8k, bf16,
// non-causal then causal, the kernel's time, and a check of sampled rows of O and LSE against a
// float64 reference on the host (a variant's first signal; the GPU suite is the real check).
// Session 36's question: where the ~4,500 cycles of a step go when the exchange alone costs ~1,900
// (scripts/dev/dsmem_bench.cu) and the kernel without it runs 1.53x faster
// (kernel_notes_features.md, "Where the forward's time goes").
//   nvcc -gencode=arch=compute_90a,code=sm_90a -O3 -DNDEBUG --expt-relaxed-constexpr -std=c++17 -lineinfo \
//     -Ibackend/include -Icuda -DFLASHSDPA_SM90_FWD512_TIMELINE=1 -o /tmp/fwd512_tl scripts/dev/fwd512_timeline.cu
//   /tmp/fwd512_tl [cluster ...]   (default: clusters 3, 200, 500 of the 512)
// (the stamps cost the kernel ~7%)
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "sm90/fwd512_kernel_sm90.cuh"

#include "dense_fwd_cuda.cuh"

using namespace flashsdpa;
using Elem = __nv_bfloat16;

#if !FLASHSDPA_SM90_FWD512_TIMELINE
#error "build with -DFLASHSDPA_SM90_FWD512_TIMELINE=1"
#endif

int main(int argc, char** argv) {
  const int B = 2, H = 4, S = 8192, D = 512;
  const int64_t n = int64_t(B) * H * S * D;
  DenseFwd prob = make_dense_fwd(B, H, H, S, S, D, /*bshd=*/false);
  AttnFwdParams& p = prob.p;
  const Elem *q = prob.q, *k = prob.k, *v = prob.v, *o = prob.o;
  const float* lse = prob.lse;

  std::vector<int> clusters;
  for (int a = 1; a < argc; ++a) clusters.push_back(std::atoi(argv[a]));
  if (clusters.empty()) clusters = {3, 200, 500};
  constexpr int kEvents = fwd512_sm90::kTlEvents, kSteps = fwd512_sm90::kTlSteps;
  static const char* phases[] = {"K wait + S issue + V wait", "P V issue", "S GEMM wait", "exchange",
                                 "mask + softmax", "P V wait", "rescale + P", "to next step"};
  cudaEvent_t e0, e1;
  CHECK_CUDA(cudaEventCreate(&e0));
  CHECK_CUDA(cudaEventCreate(&e1));
  std::vector<uint16_t> hq(n), hk(n), hv(n), ho(n);
  std::vector<float> hlse(int64_t(B) * H * S);
  CHECK_CUDA(cudaMemcpy(hq.data(), q, n * 2, cudaMemcpyDeviceToHost));
  CHECK_CUDA(cudaMemcpy(hk.data(), k, n * 2, cudaMemcpyDeviceToHost));
  CHECK_CUDA(cudaMemcpy(hv.data(), v, n * 2, cudaMemcpyDeviceToHost));
  auto f = [](uint16_t x) {
    const uint32_t u = uint32_t(x) << 16;
    float r;
    std::memcpy(&r, &u, 4);
    return double(r);
  };
  int failures = 0;
  for (int causal = 0; causal < 2; ++causal) {
  p.mask = MaskSpec{-1, causal ? 0 : -1, MaskAlign::kTopLeft};
  std::printf("==== %s ====\n", causal ? "causal" : "non-causal");
  for (int cluster : clusters) {
    CHECK_CUDA(cudaMemcpyToSymbol(fwd512_sm90::fwd512_timeline_cluster, &cluster, sizeof cluster));
    std::vector<long long> h(2 * 2 * kEvents * kSteps, 0);
    CHECK_CUDA(cudaMemcpyToSymbol(fwd512_sm90::fwd512_timeline, h.data(), h.size() * sizeof(long long)));
    CHECK_CUDA(launch_fwd512_sm90<Elem>(p, 0));  // warm-up
    CHECK_CUDA(cudaEventRecord(e0));
    CHECK_CUDA(launch_fwd512_sm90<Elem>(p, 0));
    CHECK_CUDA(cudaEventRecord(e1));
    CHECK_CUDA(cudaDeviceSynchronize());
    float ms = 0.f;
    CHECK_CUDA(cudaEventElapsedTime(&ms, e0, e1));
    CHECK_CUDA(cudaMemcpyFromSymbol(h.data(), fwd512_sm90::fwd512_timeline, h.size() * sizeof(long long)));
    const double tflops = 4.0 * B * H * double(S) * S * D / (ms * 1e-3) / 1e12 / (causal ? 2 : 1);
    std::printf("cluster %d: kernel %.3f ms (%.1f TFLOP/s, with the stamps); median cycles over steps 8..119\n",
                cluster, ms, tflops);
    std::printf("%-28s", "phase");
    for (int r = 0; r < 2; ++r)
      for (int w = 0; w < 2; ++w) std::printf("  CTA %d wg %d", r, w);
    std::printf("\n");
    auto at = [&](int r, int w, int ev, int step) { return h[((r * 2 + w) * kEvents + ev) * kSteps + step]; };
    double total[4] = {0, 0, 0, 0};
    for (int ph = 0; ph < kEvents; ++ph) {
      std::printf("%-28s", phases[ph]);
      for (int r = 0; r < 2; ++r) {
        for (int w = 0; w < 2; ++w) {
          std::vector<long long> d;
          for (int i = 8; i < 120; ++i) {
            const long long a = at(r, w, ph, i);
            const long long b = ph + 1 < kEvents ? at(r, w, ph + 1, i) : at(r, w, 0, i + 1);
            if (a != 0 && b != 0) d.push_back(b - a);
          }
          std::sort(d.begin(), d.end());
          const double med = d.empty() ? 0.0 : double(d[d.size() / 2]);
          total[r * 2 + w] += med;
          std::printf("  %11.0f", med);
        }
      }
      std::printf("\n");
    }
    std::printf("%-28s", "sum of medians");
    for (double t : total) std::printf("  %11.0f", t);
    std::printf("\n");
    // The skew the exchange absorbs: when each CTA's warpgroup 0 finished S (its own clock) relative
    // to its previous exchange's end; and a few raw steps for warpgroup 0 of CTA 0.
    std::printf("raw steps, CTA 0 wg 0 (cycles from the step's top):");
    for (int i : {8, 9, 64, 100}) {
      std::printf("\n  step %3d:", i);
      for (int ev = 1; ev < kEvents; ++ev) std::printf(" %6lld", at(0, 0, ev, i) - at(0, 0, 0, i));
      std::printf(" | next top %6lld", at(0, 0, 0, i + 1) - at(0, 0, 0, i));
    }
    std::printf("\n\n");
  }
  // Sampled rows against float64 (O through bf16: the rule's yardstick is the GPU suite's; this
  // prints the errors and fails only on a gross miss or a non-finite value).
  CHECK_CUDA(cudaMemcpy(ho.data(), o, n * 2, cudaMemcpyDeviceToHost));
  CHECK_CUDA(cudaMemcpy(hlse.data(), lse, hlse.size() * 4, cudaMemcpyDeviceToHost));
  double worst_o = 0, worst_lse = 0;
  for (int bh : {0, 7, 5}) {
    for (int row : {0, 1, 63, 64, 127, 128, 4095, 4100, 8191}) {
      const int64_t plane = int64_t(bh) * S * D;
      const int keys = causal ? row + 1 : S;
      std::vector<double> sc(keys);
      double mx = -INFINITY;
      for (int j = 0; j < keys; ++j) {
        double d = 0;
        for (int c = 0; c < D; ++c) d += f(hq[plane + int64_t(row) * D + c]) * f(hk[plane + int64_t(j) * D + c]);
        sc[j] = d * p.scale;
        mx = std::max(mx, sc[j]);
      }
      double sum = 0;
      for (int j = 0; j < keys; ++j) sum += (sc[j] = std::exp(sc[j] - mx));
      for (int c = 0; c < D; ++c) {
        double acc = 0;
        for (int j = 0; j < keys; ++j) acc += sc[j] * f(hv[plane + int64_t(j) * D + c]);
        const double got = f(ho[plane + int64_t(row) * D + c]);
        const double err = std::isfinite(got) ? std::fabs(got - acc / sum) : INFINITY;
        worst_o = std::max(worst_o, err);
      }
      const double lse_ref = mx + std::log(sum), got = hlse[int64_t(bh) * S + row];
      worst_lse = std::max(worst_lse, std::isfinite(got) ? std::fabs(got - lse_ref) : INFINITY);
    }
  }
  const bool ok = worst_o < 2e-2 && worst_lse < 1e-3;
  failures += !ok;
  std::printf("check (%s, 27 rows): max |O - ref| %.3e, max |LSE - ref| %.3e: %s\n\n", causal ? "causal" : "non-causal",
              worst_o, worst_lse, ok ? "ok" : "FAILED");
  }
  return failures ? 1 : 0;
}
