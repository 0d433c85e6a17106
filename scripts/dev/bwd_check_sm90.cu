// bwd_check_sm90.cu: standalone check of the Hopper backward in development (cuda/sm90/
// bwd_kernel_sm90.cuh) against the portable backward, which the GPU suite verifies against the
// float64 reference: same inputs, same forward (O, LSE), both backwards, max |difference| of dq,
// dk, dv relative to the largest portable value. Then both are timed on the d128 bar shapes.
// "mods": the same comparison for the score modifiers' instantiations (softcap, ALiBi, sinks) with
// the slopes' and sinks' gradients.
//
//   bash scripts/dev/build_bwd_check_sm90.sh && /tmp/bwd_check_sm90 [check|bench|all|det|mods] [64|128]
//   bash scripts/dev/build_bwd_check_sm90.sh /tmp/bwd_tl -DFLASHSDPA_SM90_BWD_TIMELINE=1 && /tmp/bwd_tl timeline 128 [CTA]
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "sm80/bwd_launch_sm80.cuh"
#include "sm80/fwd_launch_sm80.cuh"
#include "sm90/bwd_launch_sm90.cuh"

#include "check_cuda.cuh"
#include "compare_cuda.cuh"

using namespace flashsdpa;
using Elem = __nv_bfloat16;


__global__ void fill(Elem* x, int64_t n, uint64_t seed) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    uint64_t h = (seed + i) * 0x9E3779B97F4A7C15ull;
    h ^= h >> 31;
    h *= 0xBF58476D1CE4E5B9ull;
    h ^= h >> 29;
    x[i] = __float2bfloat16(((h >> 40) * (1.f / 16777216.f) - 0.5f) * 3.4641016f);  // variance 1
  }
}

struct Problem {
  int B, Hq, Hkv, Sq, Sk, causal;  // causal: 0 none, 1 top-left, 2 bottom-right
  int window_left = -1;            // >= 0: a window (window_left, window_right), aligned as `causal` says
  int window_right = -1;
};

struct Run {
  Elem *q, *k, *v, *o, *dout, *dq, *dk, *dv, *dq2, *dk2, *dv2;
  float *lse, *dq_accum, *delta;
  int32_t* sem;  // the dQ semaphores (first store, deterministic mode): int32 per (batch, head, 64 rows)
  AttnBwdParams p;
};

int g_dim = 128;  // head dim of every case (argv[2]: 64 or 128)
bool g_first_store = true;  // the sm90 backward's first-store dQ (argv[3] "nofs": off, to compare)

// The forward (portable family) runs with `mods`, so both backwards see its O and LSE.
Run setup(const Problem& pr, const ScoreMods& mods = ScoreMods{}) {
  const int D = g_dim;
  Run r{};
  const int64_t nq = int64_t(pr.B) * pr.Hq * pr.Sq * D, nk = int64_t(pr.B) * pr.Hkv * pr.Sk * D;
  for (Elem** t : {&r.q, &r.o, &r.dout, &r.dq, &r.dq2}) CHECK_CUDA(cudaMalloc(t, std::max<int64_t>(nq, 8) * 2));
  for (Elem** t : {&r.k, &r.v, &r.dk, &r.dv, &r.dk2, &r.dv2}) CHECK_CUDA(cudaMalloc(t, std::max<int64_t>(nk, 8) * 2));
  const int64_t rows = int64_t(pr.B) * pr.Hq * pr.Sq;
  CHECK_CUDA(cudaMalloc(&r.lse, std::max<int64_t>(rows, 1) * 4));
  CHECK_CUDA(cudaMalloc(&r.delta, std::max<int64_t>(rows, 1) * 4));
  CHECK_CUDA(cudaMalloc(&r.dq_accum, std::max<int64_t>(rows, 1) * D * 4));
  CHECK_CUDA(cudaMalloc(&r.sem, std::max<int64_t>(int64_t(pr.B) * pr.Hq * ((pr.Sq + 63) / 64), 1) * 4));
  fill<<<1024, 256>>>(r.q, nq, 1);
  fill<<<1024, 256>>>(r.k, nk, 2);
  fill<<<1024, 256>>>(r.v, nk, 3);
  fill<<<1024, 256>>>(r.dout, nq, 4);
  AttnBwdParams& p = r.p;
  p = AttnBwdParams{};
  p.q = r.q; p.k = r.k; p.v = r.v; p.o = r.o; p.lse = r.lse; p.dout = r.dout;
  p.q_batch_stride = p.o_batch_stride = p.dout_batch_stride = p.dq_batch_stride = int64_t(pr.Hq) * pr.Sq * D;
  p.q_head_stride = p.o_head_stride = p.dout_head_stride = p.dq_head_stride = int64_t(pr.Sq) * D;
  p.q_row_stride = p.o_row_stride = p.dout_row_stride = p.dq_row_stride = D;
  p.k_batch_stride = p.v_batch_stride = p.dk_batch_stride = p.dv_batch_stride = int64_t(pr.Hkv) * pr.Sk * D;
  p.k_head_stride = p.v_head_stride = p.dk_head_stride = p.dv_head_stride = int64_t(pr.Sk) * D;
  p.k_row_stride = p.v_row_stride = p.dk_row_stride = p.dv_row_stride = D;
  p.lse_batch_stride = int64_t(pr.Hq) * pr.Sq; p.lse_head_stride = pr.Sq; p.lse_row_stride = 1;
  p.batch = pr.B; p.heads_q = pr.Hq; p.heads_kv = pr.Hkv; p.seqlen_q = pr.Sq; p.seqlen_k = pr.Sk;
  p.head_dim_qk = p.head_dim_v = D; p.head_dim_bucket = D; p.bwd_tile = 0;
  p.scale = 1.f / std::sqrt(float(D)); p.scale_log2 = p.scale * 1.4426950408889634f;
  const MaskAlign align = pr.causal == 2 ? MaskAlign::kBottomRight : MaskAlign::kTopLeft;
  p.mask = pr.window_left >= 0 ? MaskSpec{pr.window_left, pr.window_right, align}
                               : MaskSpec{-1, pr.causal ? 0 : -1, align};
  p.mods = mods;
  p.dtype = DType::kBFloat16;
  p.num_sms = 132; p.cc_major = 9; p.smem_optin_bytes = 227 * 1024;
  p.dq_accum = r.dq_accum; p.delta = r.delta;
  p.dq_accum_row_stride = D; p.dq_accum_head_stride = int64_t(pr.Sq) * D;
  p.dq_accum_batch_stride = int64_t(pr.Hq) * pr.Sq * D;
  p.delta_row_stride = 1; p.delta_head_stride = pr.Sq; p.delta_batch_stride = int64_t(pr.Hq) * pr.Sq;
  CHECK_CUDA((g_dim == 64 ? run_fwd_sm80_<Elem, 64>(p, 0) : run_fwd_sm80_<Elem, 128>(p, 0)));
  return r;
}

void release(Run& r) {
  for (void* t : {(void*)r.q, (void*)r.k, (void*)r.v, (void*)r.o, (void*)r.dout, (void*)r.dq, (void*)r.dk,
                  (void*)r.dv, (void*)r.dq2, (void*)r.dk2, (void*)r.dv2, (void*)r.lse, (void*)r.dq_accum,
                  (void*)r.delta, (void*)r.sem})
    CHECK_CUDA(cudaFree(t));
}

cudaError_t run_family(Run& r, bool sm90, bool second) {
  AttnBwdParams p = r.p;
  p.dq = second ? r.dq2 : r.dq; p.dk = second ? r.dk2 : r.dk; p.dv = second ? r.dv2 : r.dv;
  // As api.cpp gives them: the sm90 family gets the semaphores (first store, deterministic mode).
  p.dq_semaphore = sm90 && (g_first_store || p.deterministic) ? r.sem : nullptr;
  p.dq_first_store = sm90 && g_first_store;
  p.deterministic = sm90 && p.deterministic;
  if (g_dim == 64) return sm90 ? run_bwd_sm90_<Elem, 64>(p, 0) : run_bwd_sm80_<Elem, 64>(p, 0);
  return sm90 ? run_bwd_sm90_<Elem, 128>(p, 0) : run_bwd_sm80_<Elem, 128>(p, 0);
}

// NaN-poisons the sm90 run's outputs (dq2, dk2, dv2), so anything it does not write fails.
void poison_second(Run& r, const Problem& pr) {
  const int64_t nq = int64_t(pr.B) * pr.Hq * pr.Sq * g_dim, nk = int64_t(pr.B) * pr.Hkv * pr.Sk * g_dim;
  CHECK_CUDA(cudaMemset(r.dq2, 0xFF, std::max<int64_t>(nq, 8) * 2));
  CHECK_CUDA(cudaMemset(r.dk2, 0xFF, std::max<int64_t>(nk, 8) * 2));
  CHECK_CUDA(cudaMemset(r.dv2, 0xFF, std::max<int64_t>(nk, 8) * 2));
}

// f: max |sm90 - portable| and max |portable| of dq, dk, dv; whether they agree.
bool compare_dqkv(const Run& r, const Problem& pr, float (&f)[6]) {
  const int64_t nq = int64_t(pr.B) * pr.Hq * pr.Sq * g_dim, nk = int64_t(pr.B) * pr.Hkv * pr.Sk * g_dim;
  unsigned* bits;
  CHECK_CUDA(cudaMalloc(&bits, 6 * 4));
  CHECK_CUDA(cudaMemset(bits, 0, 6 * 4));
  max_abs_diff_bf16<<<1024, 256>>>(r.dq2, r.dq, nq, bits + 0, bits + 1);
  max_abs_diff_bf16<<<1024, 256>>>(r.dk2, r.dk, nk, bits + 2, bits + 3);
  max_abs_diff_bf16<<<1024, 256>>>(r.dv2, r.dv, nk, bits + 4, bits + 5);
  unsigned h[6];
  CHECK_CUDA(cudaMemcpy(h, bits, sizeof(h), cudaMemcpyDeviceToHost));
  CHECK_CUDA(cudaFree(bits));
  for (int i = 0; i < 6; ++i) std::memcpy(&f[i], &h[i], 4);
  // Both round P and dS to bf16 for their GEMMs in different orders: a few bf16 ulps of the
  // largest gradient apart is agreement; a wrong tile, mask or reduction is O(1).
  bool ok = true;
  for (int i = 0; i < 3; ++i) ok = ok && f[2 * i] <= 2e-2f * std::max(f[2 * i + 1], 1e-3f);
  return ok;
}

bool check(const Problem& pr) {
  Run r = setup(pr);
  poison_second(r, pr);
  CHECK_CUDA(run_family(r, false, false));
  CHECK_CUDA(run_family(r, true, true));
  CHECK_CUDA(cudaDeviceSynchronize());
  float f[6];
  const bool ok = compare_dqkv(r, pr, f);
  std::printf("%-4s d%d B%d H%d/%d %dx%d causal %d  |ddq| %.2e of %.2e  |ddk| %.2e of %.2e  |ddv| %.2e of %.2e\n",
              ok ? "ok" : "FAIL", g_dim, pr.B, pr.Hq, pr.Hkv, pr.Sq, pr.Sk, pr.causal, f[0], f[1], f[2], f[3], f[4], f[5]);
  release(r);
  return ok;
}

void bench(int S, int causal, int B = 0, int H = 16, int Hkv = 16) {
  if (B == 0) B = 16384 / S;
  Run r = setup(Problem{B, H, Hkv, S, S, causal});
  const double flops = 2.5 * 4.0 * B * H * double(S) * S * g_dim / (causal ? 2 : 1);
  cudaEvent_t e0, e1;
  CHECK_CUDA(cudaEventCreate(&e0));
  CHECK_CUDA(cudaEventCreate(&e1));
  for (bool sm90 : {false, true}) {
    std::vector<float> ms;
    for (int it = 0; it < 20; ++it) {
      CHECK_CUDA(cudaEventRecord(e0));
      CHECK_CUDA(run_family(r, sm90, false));
      CHECK_CUDA(cudaEventRecord(e1));
      CHECK_CUDA(cudaEventSynchronize(e1));
      float t;
      CHECK_CUDA(cudaEventElapsedTime(&t, e0, e1));
      if (it >= 5) ms.push_back(t);
    }
    std::sort(ms.begin(), ms.end());
    std::printf("bench,bwd,%s,d%d,B%d,H%d/%d,S%d,causal%d,%.4f ms,%.1f TFLOP/s\n", sm90 ? "sm90" : "sm80", g_dim, B, H, Hkv, S, causal,
                ms[ms.size() / 2], flops / ms[ms.size() / 2] * 1e-9);
  }
  release(r);
}

// "small": the issue-9 attention shape (B 8, H 16, S 256, causal) and S 512, where the fixed
// passes and launch gaps weigh most: 100 back-to-back calls between two events, per call.
void bench_small() {
  for (int S : {256, 512}) {
    Run r = setup(Problem{8, 16, 16, S, S, 1});
    cudaEvent_t e0, e1;
    CHECK_CUDA(cudaEventCreate(&e0));
    CHECK_CUDA(cudaEventCreate(&e1));
    std::vector<float> us;
    for (int round = 0; round < 7; ++round) {
      CHECK_CUDA(cudaEventRecord(e0));
      for (int it = 0; it < 100; ++it) CHECK_CUDA(run_family(r, true, false));
      CHECK_CUDA(cudaEventRecord(e1));
      CHECK_CUDA(cudaEventSynchronize(e1));
      float ms;
      CHECK_CUDA(cudaEventElapsedTime(&ms, e0, e1));
      if (round > 0) us.push_back(ms * 10.f);
    }
    std::sort(us.begin(), us.end());
    std::printf("small,bwd,sm90,d%d,B8 H16 S%d causal,%.2f us per call\n", g_dim, S, us[us.size() / 2]);
    release(r);
  }
}

// The main kernel alone, as run_bwd_sm90_with launches it (a plain launch here: the parts are timed
// apart, so nothing overlaps the preprocess).
template <typename Traits>
cudaError_t launch_bwd_sm90_main(const BwdSm90Args& args, cudaStream_t stream) {
  const AttnBwdParams& p = args.p;
  const int64_t grid = (Traits::kSplit ? 2 : 1) * int64_t((p.seqlen_k + Traits::kBlockN - 1) / Traits::kBlockN) *
                       p.heads_kv * p.batch;
  cudaError_t err = opt_in_dynamic_smem<&flashsdpa_bwd_sm90_kernel<Traits>>(Traits::kSmemBytes);
  if (err != cudaSuccess || grid == 0) return err;
  flashsdpa_bwd_sm90_kernel<Traits><<<static_cast<unsigned>(grid), Traits::kThreads, Traits::kSmemBytes, stream>>>(args);
  return cudaGetLastError();
}

// "parts": the preprocess, the main kernel and the dQ postprocess timed apart (d128 or d64, bf16),
// to see what the fixed passes cost against the main loop at short and long S.
template <int kD>
void bench_parts_d(int S, int causal) {
  const int B = 16384 / S, H = 16;
  Run r = setup(Problem{B, H, H, S, S, causal});
  using Traits = BwdTraitsSm90<Elem, kD>;
  r.p.dq = r.dq;  // as run_family sets them
  r.p.dk = r.dk;
  r.p.dv = r.dv;
  r.p.dq_semaphore = g_first_store ? r.sem : nullptr;
  r.p.dq_first_store = g_first_store;
  BwdSm90Args args;
  CHECK_CUDA(encode_bwd_sm90<Traits>(r.p, args));
  AttnBwdParams post = r.p;
  post.scale = 1.f;
  cudaEvent_t e[4];
  for (auto& x : e) CHECK_CUDA(cudaEventCreate(&x));
  std::vector<float> t[3];
  for (int it = 0; it < 20; ++it) {
    CHECK_CUDA(cudaEventRecord(e[0]));
    CHECK_CUDA((launch_bwd_prepost<Elem, kD, false>(r.p, 0)));
    CHECK_CUDA(cudaEventRecord(e[1]));
    CHECK_CUDA(launch_bwd_sm90_main<Traits>(args, 0));
    CHECK_CUDA(cudaEventRecord(e[2]));
    CHECK_CUDA((launch_bwd_prepost<Elem, kD, true>(post, 0)));
    CHECK_CUDA(cudaEventRecord(e[3]));
    CHECK_CUDA(cudaEventSynchronize(e[3]));
    for (int k = 0; k < 3; ++k) {
      float ms;
      CHECK_CUDA(cudaEventElapsedTime(&ms, e[k], e[k + 1]));
      if (it >= 5) t[k].push_back(ms * 1e3f);
    }
  }
  for (auto& v : t) std::sort(v.begin(), v.end());
  const double flops = 2.5 * 4.0 * B * H * double(S) * S * kD / (causal ? 2 : 1);
  const float main_us = t[1][t[1].size() / 2];
  std::printf("parts,d%d,S%d,causal%d,pre %.1f us,main %.1f us (%.1f TFLOP/s),post %.1f us\n", kD, S, causal,
              t[0][t[0].size() / 2], main_us, flops / main_us * 1e-6, t[2][t[2].size() / 2]);
  release(r);
}

// ---- "mods": the sm90 backward's score-modifier instantiation against the portable one ------------
// Same inputs and the same forward (portable, with the modifiers: O and LSE) through both families'
// kMods backwards; dq, dk, dv as in check() (NaN-poisoned sm90 outputs, a few bf16 ulps of the
// largest gradient), and the slopes' and sinks' gradients relative to the largest portable value:
// both sum float32 terms over whole heads, in different orders (per tile and atomics), so they agree
// to ~1e-5 relative, where a wrong distance, column or row sum is off by O(1). The portable backward
// is the one the GPU suite checks against the float32 reference (tests/gpu/test_features_gpu.py);
// this is the gate before the capability table lists the modifiers for the sm90 row's backward.
struct ModsCase {
  int d;
  Problem pr;
  float softcap;  // 0: off
  int alibi;      // 0: off, 1: slopes (Hq,), 2: slopes (B, Hq)
  bool sinks;
};

bool check_mods(const ModsCase& c) {
  g_dim = c.d;
  const Problem& pr = c.pr;
  const float scale = 1.f / std::sqrt(float(c.d));
  const int n_slopes = c.alibi == 2 ? pr.B * pr.Hq : pr.Hq;
  std::vector<float> h_slopes(n_slopes), h_sinks(pr.Hq);
  for (int i = 0; i < n_slopes; ++i)  // ALiBi's geometric slopes, a different set per batch for (B, Hq)
    h_slopes[i] = std::pow(2.f, -8.f * (i % pr.Hq + 1) / pr.Hq) * (1.f + 0.25f * (i / pr.Hq));
  for (int h = 0; h < pr.Hq; ++h) h_sinks[h] = 0.5f * h - 1.f;
  float *slopes, *sinks, *grads;  // grads: d_slopes then d_sinks, portable then sm90
  const int n_grads = n_slopes + pr.Hq;
  CHECK_CUDA(cudaMalloc(&slopes, n_slopes * 4));
  CHECK_CUDA(cudaMalloc(&sinks, pr.Hq * 4));
  CHECK_CUDA(cudaMalloc(&grads, 2 * n_grads * 4));
  CHECK_CUDA(cudaMemcpy(slopes, h_slopes.data(), n_slopes * 4, cudaMemcpyHostToDevice));
  CHECK_CUDA(cudaMemcpy(sinks, h_sinks.data(), pr.Hq * 4, cudaMemcpyHostToDevice));
  CHECK_CUDA(cudaMemset(grads, 0, 2 * n_grads * 4));  // caller-zeroed: the kernels add into them
  ScoreMods m{};
  m.softcap = c.softcap;
  m.softcap_tanh_scale = c.softcap > 0.f ? scale / c.softcap : 0.f;
  m.softcap_log2 = c.softcap * 1.4426950408889634f;
  m.alibi_slopes = c.alibi ? slopes : nullptr;
  m.alibi_batch_stride = c.alibi == 2 ? pr.Hq : 0;
  m.sinks = c.sinks ? sinks : nullptr;

  Run r = setup(pr, m);
  const int64_t rows = int64_t(pr.B) * pr.Hq * pr.Sq;
  float* row_stats;  // row_pdp, row_pdist: delta's layout (api.cpp puts them after delta)
  CHECK_CUDA(cudaMalloc(&row_stats, 2 * std::max<int64_t>(rows, 1) * 4));
  const bool mod_grads = c.alibi || c.sinks;
  r.p.row_pdp = mod_grads ? row_stats : nullptr;
  r.p.row_pdist = mod_grads ? row_stats + std::max<int64_t>(rows, 1) : nullptr;
  poison_second(r, pr);
  for (int sm90 = 0; sm90 < 2; ++sm90) {
    float* g = grads + sm90 * n_grads;
    r.p.d_alibi_slopes = c.alibi ? g : nullptr;
    r.p.d_sinks = c.sinks ? g + n_slopes : nullptr;
    CHECK_CUDA(run_family(r, sm90, sm90));
  }
  CHECK_CUDA(cudaDeviceSynchronize());
  float f[6];
  bool ok = compare_dqkv(r, pr, f);
  std::vector<float> hg(2 * n_grads);
  CHECK_CUDA(cudaMemcpy(hg.data(), grads, hg.size() * 4, cudaMemcpyDeviceToHost));
  // Relative difference of one modifier gradient (portable at [0, n), sm90 at [n_grads, +n)); NaN fails.
  auto rel = [&](int begin, int n) {
    float err = 0.f, ref = 0.f;
    for (int i = begin; i < begin + n; ++i) {
      const float a = hg[n_grads + i], b = hg[i];
      err = std::max(err, a == a ? std::fabs(a - b) : INFINITY);
      ref = std::max(ref, std::fabs(b));
    }
    return err / std::max(ref, 1e-6f);
  };
  const float rel_slopes = c.alibi ? rel(0, n_slopes) : 0.f, rel_sinks = c.sinks ? rel(n_slopes, pr.Hq) : 0.f;
  ok = ok && rel_slopes <= 1e-3f && rel_sinks <= 1e-3f;
  std::printf("%-4s mods d%d B%d H%d/%d %dx%d causal %d window (%d, %d) softcap %.0f alibi %d sinks %d  |ddq| %.2e of "
              "%.2e  |ddk| %.2e of %.2e  |ddv| %.2e of %.2e  d_slopes rel %.2e  d_sinks rel %.2e\n",
              ok ? "ok" : "FAIL", g_dim, pr.B, pr.Hq, pr.Hkv, pr.Sq, pr.Sk, pr.causal, pr.window_left, pr.window_right,
              c.softcap, c.alibi, int(c.sinks), f[0], f[1], f[2], f[3], f[4], f[5], rel_slopes, rel_sinks);
  for (void* t : {(void*)slopes, (void*)sinks, (void*)grads, (void*)row_stats}) CHECK_CUDA(cudaFree(t));
  release(r);
  return ok;
}

int run_mods() {
  // Each modifier alone (ALiBi with both slope shapes), then all three; causal both alignments,
  // windows both alignments, Sq != Sk both ways (1000 x 300 bottom-right: rows that see no key),
  // GQA 2 and 4, Sq = 1, d64 and d128.
  const ModsCase cases[] = {
      {128, {2, 4, 4, 1000, 1000, 0}, 30.f, 0, false},
      {128, {2, 4, 4, 1000, 1000, 1}, 0.f, 1, false},
      {64, {1, 4, 4, 113, 1023, 0}, 0.f, 2, false},
      {128, {2, 4, 2, 300, 1000, 2}, 0.f, 0, true},
      {64, {2, 4, 4, 1000, 1000, 2}, 50.f, 0, false},
      {128, {1, 8, 2, 777, 777, 1}, 50.f, 2, true},
      {64, {2, 6, 3, 1000, 300, 2}, 20.f, 1, true},
      {128, {2, 4, 4, 1000, 1000, 2, 96, 32}, 20.f, 1, true},
      {64, {2, 4, 2, 500, 700, 1, 200, 0}, 0.f, 2, true},
      {64, {3, 2, 2, 1, 113, 0}, 10.f, 1, true},
      {128, {1, 2, 2, 4096, 4096, 1}, 30.f, 1, true},
  };
  int failures = 0;
  for (const ModsCase& c : cases) failures += !check_mods(c);
  std::printf("mods: %d failed\n", failures);
  return failures;
}

// ---- "timeline": one CTA's dQ hand-over, step by step (build with -DFLASHSDPA_SM90_BWD_TIMELINE=1) ----
// The bar shape (B 2, H 16, S 8k, non-causal; 128 steps per key block), warmed up, then one call with
// the stamps zeroed; clock64 cycles from the CTA's first stamp. Per step: the consumer's step start,
// its Q stage's arrival, the staging's wait for a free buffer (got - wait), the writer's tile seen,
// flag seen, buffer read by the TMA unit and freed, and the producer's Q loads issued; then the
// medians that say where the consumers' dq_empty wait comes from.
int run_timeline(int cta) {
#if FLASHSDPA_SM90_BWD_TIMELINE
  using namespace bwd_sm90;
  // TL_SHAPE="B,H,S,causal" (default the bar shape 2,16,8192,0) and TL_DET=1 (deterministic mode:
  // the writer's flag wait is then its turn, kernel_notes_bwd_sm90.md "Outcomes, session 46").
  Problem pr{2, 16, 16, 8192, 8192, 0};
  if (const char* s = std::getenv("TL_SHAPE")) {
    if (std::sscanf(s, "%d,%d,%d,%d", &pr.B, &pr.Hq, &pr.Sq, &pr.causal) != 4) {
      std::fprintf(stderr, "TL_SHAPE: B,H,S,causal\n");
      return 2;
    }
    pr.Hkv = pr.Hq, pr.Sk = pr.Sq;
  }
  Run r = setup(pr);
  const char* det = std::getenv("TL_DET");
  r.p.deterministic = det != nullptr && std::atoi(det) != 0;
  std::printf("timeline problem: B %d H %d S %d causal %d, deterministic %d\n", pr.B, pr.Hq, pr.Sq, pr.causal,
              int(r.p.deterministic));
  CHECK_CUDA(cudaMemcpyToSymbol(timeline_cta, &cta, sizeof cta));
  for (int it = 0; it < 3; ++it) CHECK_CUDA(run_family(r, true, false));
  std::vector<long long> h(kTimelineEvents * kTimelineSteps, 0);
  CHECK_CUDA(cudaMemcpyToSymbol(timeline, h.data(), h.size() * sizeof(long long)));
  CHECK_CUDA(run_family(r, true, false));
  CHECK_CUDA(cudaDeviceSynchronize());
  CHECK_CUDA(cudaMemcpyFromSymbol(h.data(), timeline, h.size() * sizeof(long long)));
  auto at = [&](int event, int step) { return h[event * kTimelineSteps + step]; };
  long long base = 0;
  int steps = 0;
  for (int step = 0; step < kTimelineSteps; ++step) {
    if (at(kTlStepStart, step) == 0) break;
    steps = step + 1;
  }
  for (int e = 0; e < kTimelineEvents; ++e)
    for (int step = 0; step < steps; ++step)
      if (at(e, step) != 0 && (base == 0 || at(e, step) < base)) base = at(e, step);
  static const char* names[kTimelineEvents] = {"start",  "q_full", "stg_wait", "stg_got", "staged",
                                               "w_full", "w_flag", "w_read",   "w_free",  "load",
                                               "st_done", "pt_done", "dp_done", "ds_stored", "gemms"};
  std::printf("timeline of CTA %d (d%d), %d steps, cycles from its first stamp\nstep", cta, g_dim, steps);
  for (const char* n : names) std::printf(" %9s", n);
  std::printf(" | step len  stg wait  flag wait  tma read  staged->freed\n");
  std::vector<long long> len, wait, flag, read, lag;
  for (int step = 0; step < steps; ++step) {
    std::printf("%4d", step);
    for (int e = 0; e < kTimelineEvents; ++e) std::printf(" %9lld", at(e, step) ? at(e, step) - base : -1);
    const long long l = step + 1 < steps ? at(kTlStepStart, step + 1) - at(kTlStepStart, step) : 0;
    const long long w = at(kTlStageGot, step) - at(kTlStageWait, step);
    const long long f = at(kTlWriterFlag, step) - at(kTlWriterFull, step);
    const long long t = at(kTlWriterRead, step) - at(kTlWriterFlag, step);
    const long long g = at(kTlWriterFree, step) - at(kTlStaged, step);
    std::printf(" | %8lld %9lld %10lld %9lld %14lld\n", l, w, f, t, g);
    if (l > 0) len.push_back(l);
    wait.push_back(w), flag.push_back(f), read.push_back(t), lag.push_back(g);
  }
  auto med = [](std::vector<long long> v) {
    if (v.empty()) return 0ll;
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  const long long waited = std::count_if(wait.begin(), wait.end(), [](long long w) { return w > 200; });
  std::printf("medians (cycles): step %lld, staging wait %lld (steps waiting > 200: %lld of %d), flag wait %lld, "
              "TMA read %lld, staged -> freed %lld\n", med(len), med(wait), waited, steps, med(flag), med(read), med(lag));
  // The consumer's step in phases (session 36: the d512 forward's timeline found its softmax running
  // with the tensor pipe idle; the same question for this step's 4,500 cycles at d128, 2,560 of them
  // tensor work): medians over steps 8 .. steps - 8, warpgroup 0.
  struct Phase {
    const char* name;
    int from, to;  // events; to = -1: the next step's start
  };
  static const Phase phases[] = {{"Q wait", kTlStepStart, kTlQFull},
                                 {"dQ staged + S^T GEMM", kTlQFull, kTlStDone},
                                 {"P^T (exponentials)", kTlStDone, kTlPtDone},
                                 {"dV issue + dP^T wait", kTlPtDone, kTlDpDone},
                                 {"dS^T + stores + barrier", kTlDpDone, kTlDsStored},
                                 {"dQ, dK issue + dV, dQ wait", kTlDsStored, kTlGemmsDone},
                                 {"to the next step", kTlGemmsDone, -1}};
  std::printf("consumer phases, medians over steps 8 .. %d (warpgroup 0):\n", steps - 8);
  long long sum = 0;
  for (const Phase& ph : phases) {
    std::vector<long long> d;
    for (int step = 8; step + 8 < steps; ++step) {
      const long long a = at(ph.from, step), b = ph.to >= 0 ? at(ph.to, step) : at(kTlStepStart, step + 1);
      if (a != 0 && b != 0) d.push_back(b - a);
    }
    sum += med(d);
    std::printf("  %-28s %6lld\n", ph.name, med(d));
  }
  std::printf("  %-28s %6lld\n", "sum of medians", sum);
  release(r);
  return 0;
#else
  (void)cta;
  std::fprintf(stderr, "timeline: build with -DFLASHSDPA_SM90_BWD_TIMELINE=1\n");
  return 2;
#endif
}

int main(int argc, char** argv) {
  const std::string what = argc > 1 ? argv[1] : "all";
  if (argc > 2) g_dim = std::atoi(argv[2]);
  if (argc > 3 && std::string(argv[3]) == "nofs") g_first_store = false;
  if (g_dim != 64 && g_dim != 128) {
    std::fprintf(stderr, "head dim %d: 64 or 128\n", g_dim);
    return 2;
  }
  int failures = 0;
  if (what == "mods") return run_mods() ? 1 : 0;  // head dims per case
  if (what == "check" || what == "all") {
    const Problem cases[] = {{1, 1, 1, 64, 128, 0},   {2, 4, 4, 1000, 1000, 0}, {2, 4, 4, 1000, 1000, 1},
                             {2, 4, 4, 1000, 1000, 2}, {2, 4, 4, 300, 1000, 2},  {2, 4, 4, 1000, 300, 1},
                             {1, 8, 2, 777, 777, 1},  {3, 2, 2, 1, 113, 0},     {2, 2, 1, 113, 1, 0},
                             {1, 2, 2, 4096, 4096, 1}};
    for (const Problem& pr : cases) failures += !check(pr);
    std::printf("checks: %d failed\n", failures);
  }
  if (what == "det") {  // deterministic mode: 20 runs bitwise equal; time against the default
    const Problem pr{2, 16, 4, 4096, 4096, 1};
    for (int causal : {0, 1}) {
      Problem q = pr;
      q.causal = causal;
      Run r = setup(q);
      const int64_t nq = int64_t(q.B) * q.Hq * q.Sq * g_dim;
      const int64_t nk = int64_t(q.B) * q.Hkv * q.Sk * g_dim;
      std::vector<uint16_t> first(nq + 2 * nk), now(nq + 2 * nk);
      auto grab = [&](std::vector<uint16_t>& h) {
        CHECK_CUDA(cudaMemcpy(h.data(), r.dq2, nq * 2, cudaMemcpyDeviceToHost));
        CHECK_CUDA(cudaMemcpy(h.data() + nq, r.dk2, nk * 2, cudaMemcpyDeviceToHost));
        CHECK_CUDA(cudaMemcpy(h.data() + nq + nk, r.dv2, nk * 2, cudaMemcpyDeviceToHost));
      };
      int mismatches = 0, default_mismatches = 0;
      for (int det : {0, 1}) {
        r.p.deterministic = det;
        for (int it = 0; it < 20; ++it) {
          CHECK_CUDA(cudaMemset(r.dq2, 0xFF, nq * 2));
          CHECK_CUDA(run_family(r, true, true));
          CHECK_CUDA(cudaDeviceSynchronize());
          grab(it == 0 ? first : now);
          if (it > 0 && std::memcmp(first.data(), now.data(), first.size() * 2) != 0) ++(det ? mismatches : default_mismatches);
        }
      }
      std::vector<float> t(2);
      cudaEvent_t e0, e1;
      CHECK_CUDA(cudaEventCreate(&e0));
      CHECK_CUDA(cudaEventCreate(&e1));
      for (int det : {0, 1}) {
        r.p.deterministic = det;
        std::vector<float> ms;
        for (int it = 0; it < 15; ++it) {
          CHECK_CUDA(cudaEventRecord(e0));
          CHECK_CUDA(run_family(r, true, false));
          CHECK_CUDA(cudaEventRecord(e1));
          CHECK_CUDA(cudaEventSynchronize(e1));
          float x;
          CHECK_CUDA(cudaEventElapsedTime(&x, e0, e1));
          if (it >= 5) ms.push_back(x);
        }
        std::sort(ms.begin(), ms.end());
        t[det] = ms[ms.size() / 2];
      }
      std::printf("det causal %d: deterministic runs differing %d/19 (default mode: %d/19), time %.3f ms vs %.3f ms "
                  "(%.2fx)\n", causal, mismatches, default_mismatches, t[1], t[0], t[1] / t[0]);
      failures += mismatches;
      release(r);
    }
  }
  if (what == "prof") {  // one sm90 call on a bar shape, for ncu
    Run r = setup(Problem{2, 16, 16, 8192, 8192, 0});
    CHECK_CUDA(run_family(r, true, false));
    CHECK_CUDA(cudaDeviceSynchronize());
    release(r);
  }
  if (what == "timeline") return run_timeline(argc > 3 ? std::atoi(argv[3]) : 1000);
  if (what == "small") bench_small();
  if (what == "gqa") {  // the Llama-style model's training shapes (GQA 16/4, causal)
    bench(8192, 1, 1, 16, 4);
    bench(2048, 1, 4, 16, 4);
  }
  if (what == "parts") {
    for (int causal : {0, 1})
      for (int S : {2048, 8192}) {
        if (g_dim == 64) bench_parts_d<64>(S, causal);
        else bench_parts_d<128>(S, causal);
      }
  }
  if (what == "bench" || what == "all") {
    for (int causal : {0, 1})
      for (int S : {2048, 8192}) bench(S, causal);
  }
  return failures ? 1 : 0;
}
