// fwd_timeline.cu: one CTA's tiles in the sm90 forward (cuda/sm90/fwd_kernel_sm90.cuh built with
// -DFLASHSDPA_SM90_FWD_TIMELINE=1), issue 12's short-sequence cells: per consumer warpgroup, the
// median over the CTA's tiles of each phase of a tile (Q wait, K wait and turn, the first block's
// S and softmax, the middle blocks, the last P V, the epilogue, the hand-over to the next tile),
// the tile's period and its cost in middle-block units, and the kernel's time, bf16, the standard
// sweep's shapes (B * S = 16k, H * D = 2048), the package's launcher with a workspace (so the split
// tail and the dynamic schedule are what the package runs).
//   nvcc -gencode=arch=compute_90a,code=sm_90a -O3 -DNDEBUG --expt-relaxed-constexpr -std=c++17 -lineinfo \
//     -Ibackend/include -Icuda -DFLASHSDPA_SM90_FWD_TIMELINE=1 -o /tmp/fwd_tl scripts/dev/fwd_timeline.cu \
//     cuda/sm90/tiles_sm90.cu
//   /tmp/fwd_tl D S CAUSAL [CTA ...]   (D 64, 128 or 256; default CTAs 0 and 77; FWD_TL_WINDOW=W: a causal
//   window of W keys; FWD_TL_RAW=1: every tile's phases also when not causal)
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "sm90/fwd_launch_sm90.cuh"

#include "dense_fwd_cuda.cuh"

using namespace flashsdpa;
using Elem = __nv_bfloat16;

#if !FLASHSDPA_SM90_FWD_TIMELINE
#error "build with -DFLASHSDPA_SM90_FWD_TIMELINE=1"
#endif

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: fwd_tl D S CAUSAL [CTA ...]\n");
    return 2;
  }
  const int D = std::atoi(argv[1]), S = std::atoi(argv[2]), causal = std::atoi(argv[3]);
  const int B = std::max(1, 16384 / S), H = 2048 / D;
  std::vector<int> ctas;
  for (int a = 4; a < argc; ++a) ctas.push_back(std::atoi(argv[a]));
  if (ctas.empty()) ctas = {0, 77};
  DenseFwd prob = make_dense_fwd(B, H, H, S, S, D, /*bshd=*/true);
  AttnFwdParams& p = prob.p;
  p.mask = MaskSpec{-1, causal ? 0 : -1, MaskAlign::kTopLeft};
  // FWD_TL_WINDOW=W: a causal window of W keys (the bench's window row: fwd_tl 128 32768 1 with
  // FWD_TL_WINDOW=4096 is its B 1 x H 16 x 32k problem)
  if (const char* w = std::getenv("FWD_TL_WINDOW")) p.mask = MaskSpec{std::atoi(w) - 1, 0, MaskAlign::kTopLeft};
  // a workspace, so the split tail and the dynamic schedule run as in the package
  const int64_t workspace_bytes = 64 << 20;
  CHECK_CUDA(cudaMalloc(&p.workspace, workspace_bytes));
  p.workspace_bytes = workspace_bytes;
  auto launch = [&] {
    return D == 64    ? run_fwd_sm90_tiles_<Elem, 64>(p, 0)
           : D == 256 ? run_fwd_sm90_tiles_<Elem, 256>(p, 0)
                      : run_fwd_sm90_tiles_<Elem, 128>(p, 0);
  };

  using namespace fwd_sm90;
  static const char* phases[] = {"Q wait",          "K wait + turn", "first S",         "first softmax",
                                 "middle blocks",   "V wait + turn", "rows' scalars",   "LSE, O rows sync",
                                 "last P V wait",   "scale+stage O", "TMA store issue", "tail of epilogue",
                                 "queue pop",       "tile work"};
  static_assert(sizeof(phases) / sizeof(phases[0]) == kTlEvents, "a name per phase");
  cudaEvent_t e0, e1;
  CHECK_CUDA(cudaEventCreate(&e0));
  CHECK_CUDA(cudaEventCreate(&e1));
  for (int cta : ctas) {
    CHECK_CUDA(cudaMemcpyToSymbol(fwd_timeline_cta, &cta, sizeof cta));
    std::vector<long long> h(kTlWGs * kTlEvents * kTlTiles, 0);
    CHECK_CUDA(cudaMemcpyToSymbol(fwd_timeline, h.data(), h.size() * sizeof(long long)));
    CHECK_CUDA(launch());  // warm-up
    CHECK_CUDA(cudaMemcpyToSymbol(fwd_timeline, h.data(), h.size() * sizeof(long long)));
    CHECK_CUDA(cudaEventRecord(e0));
    CHECK_CUDA(launch());
    CHECK_CUDA(cudaEventRecord(e1));
    CHECK_CUDA(cudaDeviceSynchronize());
    float ms = 0.f;
    CHECK_CUDA(cudaEventElapsedTime(&ms, e0, e1));
    CHECK_CUDA(cudaMemcpyFromSymbol(h.data(), fwd_timeline, h.size() * sizeof(long long)));
    auto at = [&](int w, int ev, int t) { return h[(w * kTlEvents + ev) * kTlTiles + t]; };
    int tiles = 0;
    while (tiles < kTlTiles && at(0, kTlTileStart, tiles) != 0) ++tiles;
    const double tflops = 4.0 * B * H * double(S) * S * D / (causal ? 2 : 1) / (ms * 1e-3) / 1e12;
    std::printf("d%d S %d%s B %d H %d, CTA %d: kernel %.1f us (%.1f TFLOP/s, with the stamps); %d tiles with keys "
                "stamped; median cycles over tiles 1..%d\n",
                D, S, causal ? " causal" : "", B, H, cta, ms * 1e3, tflops, tiles, tiles - 2);
    int wgs = 0;
    while (wgs < kTlWGs && at(wgs, kTlTileStart, 0) != 0) ++wgs;
    std::printf("%-18s", "phase");
    for (int w = 0; w < wgs; ++w) std::printf("   wg %d", w);
    std::printf("\n");
    auto median = [](std::vector<long long> d) {
      if (d.empty()) return 0.0;
      std::sort(d.begin(), d.end());
      return double(d[d.size() / 2]);
    };
    for (int ph = 0; ph < kTlEvents; ++ph) {
      std::printf("%-18s", phases[ph]);
      for (int w = 0; w < wgs; ++w) {
        std::vector<long long> d;
        for (int t = 1; t + 1 < tiles; ++t) {
          const long long a = at(w, ph, t), b = ph + 1 < kTlEvents ? at(w, ph + 1, t) : at(w, kTlTileStart, t + 1);
          if (a != 0 && b != 0) d.push_back(b - a);
        }
        std::printf(" %6.0f", median(d));
      }
      std::printf("\n");
    }
    std::printf("%-18s", "tile period");
    for (int w = 0; w < wgs; ++w) {
      std::vector<long long> d;
      for (int t = 1; t + 1 < tiles; ++t) d.push_back(at(w, kTlTileStart, t + 1) - at(w, kTlTileStart, t));
      std::printf(" %6.0f", median(d));
    }
    // The middle blocks' own rate (non-causal: every tile has S / kBlockN blocks, the first and
    // the last P V apart): what a tile would cost at that rate, and its excess in blocks.
    const int block_n = D == 64 ? (fwd_sm90_short_tile(p) ? kFwdShortTileSm90.block_n : fwd_tile_shape_sm90(64).block_n)
                                : fwd_tile_shape_sm90(D).block_n;  // (d256: 64 keys; session 39's d256 rows assumed 128)
    const int blocks = (S + block_n - 1) / block_n;
    if (!causal && blocks > 2) {
      std::printf("\n%-18s", "per middle block");
      for (int w = 0; w < wgs; ++w) {
        std::vector<long long> d;
        for (int t = 1; t + 1 < tiles; ++t) d.push_back((at(w, kTlLoopEnd, t) - at(w, kTlFirstSoft, t)) / (blocks - 2));
        std::printf(" %6.0f", median(d));
      }
      std::printf("\n%-18s", "excess, blocks");
      for (int w = 0; w < wgs; ++w) {
        std::vector<long long> per, period;
        for (int t = 1; t + 1 < tiles; ++t) {
          per.push_back((at(w, kTlLoopEnd, t) - at(w, kTlFirstSoft, t)) / (blocks - 2));
          period.push_back(at(w, kTlTileStart, t + 1) - at(w, kTlTileStart, t));
        }
        const double b = median(per);
        std::printf(" %6.2f", b > 0 ? median(period) / b - blocks : 0.0);
      }
      std::printf("   (%d blocks of %d keys a tile)", blocks, block_n);
    }
    std::printf("\n");
    // Causal (tiles of different lengths, so the medians above mix them): every tile's phases, in
    // the CTA's order (longest first under the dynamic schedule), for the causal-only cost that
    // the sweep shows (session 48: d128 S 512 causal takes 0.89 of the non-causal time for 10 / 16
    // of its blocks, cuDNN 0.79).
    if (causal || std::getenv("FWD_TL_RAW") != nullptr) {
      std::printf("%-4s %3s %7s %6s %6s %6s %6s %6s %6s %6s %6s %7s\n", "tile", "wg", "period", "Q", "K+turn",
                  "firstS", "1stsoft", "middle", "lastturn", "lastPV", "epilog", "to next");
      for (int t = 0; t + 1 < tiles; ++t) {
        for (int w = 0; w < wgs; ++w) {
          auto d = [&](int a, int b) { return at(w, b, t) != 0 && at(w, a, t) != 0 ? at(w, b, t) - at(w, a, t) : -1LL; };
          std::printf("%-4d %3d %7lld %6lld %6lld %6lld %6lld %6lld %6lld %6lld %6lld %7lld\n", t, w,
                      at(w, kTlTileStart, t + 1) - at(w, kTlTileStart, t), d(kTlTileStart, kTlQLanded),
                      d(kTlQLanded, kTlFirstTurn), d(kTlFirstTurn, kTlFirstS), d(kTlFirstS, kTlFirstSoft),
                      d(kTlFirstSoft, kTlLoopEnd), d(kTlLoopEnd, kTlLastTurn), d(kTlLastTurn, kTlLastPv),
                      d(kTlLastPv, kTlDone), at(w, kTlTileStart, t + 1) - at(w, kTlDone, t));
        }
      }
    }
    std::printf("\n");
  }
  return 0;
}
