// decode_timeline.cu: a decode call's grid from one clock (issue 11's B 1 x 8k bar, 15 us; 16.1 in a
// replayed graph on the H200 against cuDNN's 15.5, and the K / V bytes alone ~8 us at the card's
// copy rate). The decode kernel and its split combine built with -DFLASHSDPA_GRID_TIMELINE=1
// (common/ptx.cuh's grid_stamp: %globaltimer at each CTA's start and end, and the combine's start,
// past its grid-dependency wait, its LSEs reduced, its first chunk's partials summed, and end; the
// timer ticks every ~0.256 us on the H100) run as the package runs them (run_decode_sm80_: the
// programmatic combine on sm_90), plain and captured in a CUDA graph replayed, one query token,
// GQA 32 / 8, D 128, bf16, a contiguous cache. Prints, in microseconds from the decode grid's first
// CTA start: the last CTA start (the ramp), the CTAs' durations (min / median / max), the first and
// last ends (the tail), the combine's first start, its waits' end, its two inner points, its last
// end; and the call's time
// by events.
//   nvcc -gencode=arch=compute_90a,code=sm_90a -O3 -DNDEBUG --expt-relaxed-constexpr -std=c++17 \
//     -Ibackend/include -Icuda -DFLASHSDPA_GRID_TIMELINE=1 -o /tmp/decode_tl scripts/dev/decode_timeline.cu
//   /tmp/decode_tl [B Sk splits ...]   (default: 1 8192 33, then 1 131072 33, then 32 4096 1)
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "sm80/decode_launch_sm80.cuh"

#include "dense_fwd_cuda.cuh"

using namespace flashsdpa;
using Elem = __nv_bfloat16;

#if !FLASHSDPA_GRID_TIMELINE
#error "build with -DFLASHSDPA_GRID_TIMELINE=1"
#endif

namespace {

constexpr int kHq = 32, kHkv = 8, kD = 128;

void run_case(int B, int Sk, int splits) {
  const int64_t nq = int64_t(B) * kHq * kD;
  // q / o (B, 1, Hq, D); the cache (B, Sk, Hkv, D): flash_attn's kvcache layout
  DenseFwd prob = make_dense_fwd(B, kHq, kHkv, 1, Sk, kD, /*bshd=*/true);
  AttnFwdParams& p = prob.p;
  p.mask = MaskSpec{-1, -1, MaskAlign::kBottomRight};
  float *o_accum, *lse_accum;
  CHECK_CUDA(cudaMalloc(&o_accum, std::max(1, splits) * nq * sizeof(float)));
  CHECK_CUDA(cudaMalloc(&lse_accum, std::max(1, splits) * int64_t(B) * kHq * sizeof(float)));
  p.num_splits = std::max(1, splits);
  p.o_accum = o_accum, p.lse_accum = lse_accum;
  cudaStream_t stream;
  CHECK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  auto call = [&] { CHECK_CUDA((run_decode_sm80_<Elem, kD>(p, stream))); };

  std::vector<unsigned long long> h(2 * kGridTimelinePoints * kGridTimelineCtas);
  auto zero = [&] {
    std::fill(h.begin(), h.end(), 0ull);
    CHECK_CUDA(cudaMemcpyToSymbol(grid_timeline, h.data(), h.size() * sizeof(h[0])));
  };
  auto report = [&](const char* how, float call_us) {
    CHECK_CUDA(cudaMemcpyFromSymbol(h.data(), grid_timeline, h.size() * sizeof(h[0])));
    auto at = [&](int kernel, int point, int cta) { return h[(kernel * kGridTimelinePoints + point) * kGridTimelineCtas + cta]; };
    int ctas = 0, combine = 0;
    while (ctas < kGridTimelineCtas && at(0, 0, ctas) != 0) ++ctas;
    while (combine < kGridTimelineCtas && at(1, 0, combine) != 0) ++combine;
    unsigned long long t0 = ~0ull;
    for (int c = 0; c < ctas; ++c) t0 = std::min(t0, at(0, 0, c));
    auto us = [&](unsigned long long t) { return (double(t) - double(t0)) * 1e-3; };
    std::vector<double> starts, ends, durs, cstarts, cwaits, cends, clse, cparts;
    for (int c = 0; c < ctas; ++c) {
      starts.push_back(us(at(0, 0, c)));
      ends.push_back(us(at(0, 1, c)));
      durs.push_back(us(at(0, 1, c)) - us(at(0, 0, c)));
    }
    for (int c = 0; c < combine; ++c) {
      cstarts.push_back(us(at(1, 0, c)));
      cwaits.push_back(us(at(1, 1, c)));
      cends.push_back(us(at(1, 2, c)));
      clse.push_back(us(at(1, 3, c)));
      cparts.push_back(us(at(1, 4, c)));
    }
    for (auto* x : {&starts, &ends, &durs, &cstarts, &cwaits, &cends, &clse, &cparts}) std::sort(x->begin(), x->end());
    auto med = [](const std::vector<double>& x) { return x.empty() ? 0.0 : x[x.size() / 2]; };
    auto last = [](const std::vector<double>& x) { return x.empty() ? 0.0 : x.back(); };
    auto first = [](const std::vector<double>& x) { return x.empty() ? 0.0 : x.front(); };
    const double kv_bytes = 2.0 * B * Sk * kHkv * kD * 2;
    std::printf("B %d x %d keys, %d splits, %s: call %.2f us by events (%.2f TB/s of K / V)\n", B, Sk, p.num_splits,
                how, call_us, kv_bytes / (call_us * 1e-6) / 1e12);
    std::printf("  decode grid %d CTAs: starts %.2f .. %.2f us; CTA durations min %.2f, median %.2f, max %.2f; "
                "ends %.2f .. %.2f (median %.2f)\n",
                ctas, first(starts), last(starts), first(durs), med(durs), last(durs), first(ends), last(ends), med(ends));
    if (combine > 0)
      std::printf("  combine %d CTAs: starts %.2f .. %.2f; past the wait %.2f .. %.2f; LSEs reduced %.2f .. %.2f; "
                  "partials summed %.2f .. %.2f; ends %.2f .. %.2f\n",
                  combine, first(cstarts), last(cstarts), first(cwaits), last(cwaits), first(clse), last(clse),
                  first(cparts), last(cparts), first(cends), last(cends));
    std::printf("  from the first start to the last end: %.2f us\n", combine > 0 ? last(cends) : last(ends));
  };

  cudaEvent_t e0, e1;
  CHECK_CUDA(cudaEventCreate(&e0));
  CHECK_CUDA(cudaEventCreate(&e1));
  for (int it = 0; it < 5; ++it) call();
  zero();
  CHECK_CUDA(cudaEventRecord(e0, stream));
  call();
  CHECK_CUDA(cudaEventRecord(e1, stream));
  CHECK_CUDA(cudaStreamSynchronize(stream));
  float ms = 0.f;
  CHECK_CUDA(cudaEventElapsedTime(&ms, e0, e1));
  report("plain launches", ms * 1e3f);

  // One call captured in a graph and replayed (the bench's graph column replays 20 calls: the
  // last replay's stamps are one call's).
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  CHECK_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  call();
  CHECK_CUDA(cudaStreamEndCapture(stream, &graph));
  CHECK_CUDA(cudaGraphInstantiate(&exec, graph, 0));
  for (int it = 0; it < 5; ++it) CHECK_CUDA(cudaGraphLaunch(exec, stream));
  CHECK_CUDA(cudaStreamSynchronize(stream));
  zero();
  CHECK_CUDA(cudaEventRecord(e0, stream));
  CHECK_CUDA(cudaGraphLaunch(exec, stream));
  CHECK_CUDA(cudaEventRecord(e1, stream));
  CHECK_CUDA(cudaStreamSynchronize(stream));
  CHECK_CUDA(cudaEventElapsedTime(&ms, e0, e1));
  report("a replayed graph", ms * 1e3f);
  std::printf("\n");
  CHECK_CUDA(cudaGraphExecDestroy(exec));
  CHECK_CUDA(cudaGraphDestroy(graph));
  prob.release();
  for (void* t : {(void*)o_accum, (void*)lse_accum}) CHECK_CUDA(cudaFree(t));
  CHECK_CUDA(cudaStreamDestroy(stream));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 4) {
    for (int a = 1; a + 2 < argc; a += 3) run_case(std::atoi(argv[a]), std::atoi(argv[a + 1]), std::atoi(argv[a + 2]));
  } else {
    run_case(1, 8192, 33);
    run_case(1, 131072, 33);
    run_case(32, 4096, 1);
  }
  return 0;
}
