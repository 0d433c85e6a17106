// softmax.cuh: the online softmax of the forward kernels, in one place. It owns the running row
// max and row sum, the exp2 of the scores (the only exponentials of the forward pass), the rescale
// of the output accumulator when the max grows, and the final normalization and log-sum-exp.
//
// Layout: scores and output live in mma.sync m16n8k16 C fragments. A thread owns, per m16 tile i,
// rows g and g+8 (g = lane / 4): c0,c1 belong to row g and c2,c3 to row g+8, so the thread's
// row r = 2*i + h uses elements [2h] and [2h+1] of every n8 fragment. The four lanes of a quad
// share a row; row statistics are reduced across the quad.
//
// Scores enter raw (q.k, not yet scaled). scale_log2 = scale * log2(e) > 0, so
//   p = exp2(s * scale_log2 - max * scale_log2)
// is one FFMA and one MUFU.EX2 per score, and the row max of raw scores is also the max of the
// scaled ones. (The kernel turns a negative scale into a positive one by negating q.)
#pragma once

#include <cmath>

#include "common/ptx.cuh"

namespace flashsdpa {

// Every exponential on MUFU.EX2. Moving 1, 2 or 4 of every 8 scores' exponentials to the FMA pipe
// (a degree-4 polynomial, ~12 FMA / ALU instructions each) lost 5%, 8% and 16% in the sm90 forward
// (H200, d128, session 19; kernel_notes_fwd_sm90.md "Exponentials on the FMA pipe"): the
// forward's FMA / ALU pipes are as busy as MUFU.
template <int kMTiles>
struct OnlineSoftmax {
  static constexpr int kRows = 2 * kMTiles;
  static constexpr float kRescaleThresholdLog2 = 8.f;

  float row_max[kRows];  // raw-score max over the keys seen so far; -inf until a visible key
  float row_sum[kRows];  // this lane's share of sum(p); the quad's lanes are added in finalize()
  bool huge_logits;      // some row of the warp has |max * scale_log2| >= 2^14: exact exponents (step())

  __device__ __forceinline__ OnlineSoftmax() {
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      row_max[r] = -INFINITY;
      row_sum[r] = 0.f;
    }
    huge_logits = false;
  }

  // Folds one key block into the running state. s holds raw scores (-inf where masked) and is
  // replaced by p = exp2((s - max) * scale_log2); o is rescaled by exp2((old_max - max) * scale_log2).
  //
  // The max only moves (and o, 128 FMULs per thread at d = 128, is only rescaled) when some row of
  // the warp grew by more than kRescaleThresholdLog2 in exp2 units; otherwise the stale max stays,
  // so p <= 2^8 = 256: exact enough in fp32 sums and in 16-bit P (relative precision does not
  // depend on magnitude), far from overflow. After the first few key blocks a new block rarely
  // beats the running max by that much, so most iterations skip the rescale (measured on the
  // H200: +1% at d128 non-causal, +4% causal, against rescaling every block).
  template <int kNTiles, int kDTiles>
  __device__ __forceinline__ void update(float (&s)[kMTiles][kNTiles][4],
                                         float (&o)[kMTiles][kDTiles][4], float scale_log2) {
    step(s, scale_log2, [&](int r, float correction) {
#pragma unroll
      for (int d = 0; d < kDTiles; ++d) {
        o[r / 2][d][2 * (r % 2)] *= correction;
        o[r / 2][d][2 * (r % 2) + 1] *= correction;
      }
    });
  }

  // update() without touching o, for kernels whose O accumulator is still being written by an
  // asynchronous GEMM (the sm90 family overlaps this softmax with the previous P V): returns
  // whether o must be rescaled by `correction` (per row, rescale()) before the next P V
  // accumulates into it. The decision is uniform across the warp (__any_sync).
  template <int kNTiles>
  __device__ __forceinline__ bool online_step(float (&s)[kMTiles][kNTiles][4], float scale_log2,
                                              float (&correction)[kRows]) {
    return step(s, scale_log2, [&](int r, float c) { correction[r] = c; });
  }

  // The shared body: on_rescale(row, correction) runs inside the rescale branch, before the
  // exponentials, so update() compiles to what it was before online_step existed (deferring the
  // o rescale past the exp loop cost the portable kernel 1-4%, measured on the H200).
  template <int kNTiles, typename OnRescale>
  __device__ __forceinline__ bool step(float (&s)[kMTiles][kNTiles][4], float scale_log2, OnRescale&& on_rescale) {
    float new_max[kRows];
    bool grew = false;
#pragma unroll
    for (int i = 0; i < kMTiles; ++i) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int r = 2 * i + h;
        float block_max = row_max[r];
#pragma unroll
        for (int j = 0; j < kNTiles; ++j) {
          block_max = fmaxf(block_max, fmaxf(s[i][j][2 * h], s[i][j][2 * h + 1]));
        }
        new_max[r] = quad_max(block_max);
        // -inf - -inf = NaN compares false: a row that still sees nothing never forces a rescale;
        // a first visible key (finite - -inf = inf) always does.
        grew |= (new_max[r] - row_max[r]) * scale_log2 > kRescaleThresholdLog2;
      }
    }
    const bool rescaled = __any_sync(0xffffffffu, grew);
    if (rescaled) {
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        // The difference first, then the scale: old * c - new * c would subtract two rounded
        // products, off by up to half an ulp of each (at logits ~1e11, thousands: exp2 = inf).
        // -inf guard: with no visible key yet the max stays -inf (correction unused: sum and o
        // are 0); a first visible key gives exp2(-inf) = 0.
        const float correction = new_max[r] == -INFINITY ? 1.f : fast_exp2((row_max[r] - new_max[r]) * scale_log2);
        row_max[r] = new_max[r];
        row_sum[r] *= correction;
        on_rescale(r, correction);
      }
      // p = exp2(s * c - max * c) is one FFMA per score, but max * c is a rounded product while
      // the FFMA keeps s * c exact: the max element's argument is then the rounding error of
      // max * c, up to half an ulp of it. Below |max * c| = 2^14 that is <= 2^-10 (p off by
      // < 0.07%, under half a bf16 ulp); above it (huge logits: |q.k * scale| > ~11,000) the warp
      // takes the exact form exp2((s - max) * c), whose largest argument is exactly 0, so a row
      // can neither overflow to inf (NaN after normalizing) nor lose its own maximum. The maxima
      // only move here, so the warp decides here (a vote per step cost the portable kernel 2-4%).
      bool huge = false;
#pragma unroll
      for (int r = 0; r < kRows; ++r) huge |= fabsf(row_max[r] * scale_log2) >= 16384.f;
      huge_logits = __any_sync(0xffffffffu, huge);
    }
    exponentiate(s, scale_log2);
    return rescaled;
  }

  // s -> p = exp2((s - row_max) * scale_log2), summed into row_sum. The usual form is one FFMA,
  // exp2(s * c - max * c); with huge logits (see step()) the maxima are subtracted first, in a
  // pre-pass, so the one exponent loop serves both (a second unrolled loop made the portable d64
  // kernel spill more and run 2-4% slower).
  template <int kNTiles>
  __device__ __forceinline__ void exponentiate(float (&s)[kMTiles][kNTiles][4], float scale_log2) {
    if (huge_logits) {
#pragma unroll
      for (int i = 0; i < kMTiles; ++i) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const float max = row_max[2 * i + h] == -INFINITY ? 0.f : row_max[2 * i + h];
#pragma unroll
          for (int j = 0; j < kNTiles; ++j) {
            s[i][j][2 * h] -= max;
            s[i][j][2 * h + 1] -= max;
          }
        }
      }
    }
#pragma unroll
    for (int i = 0; i < kMTiles; ++i) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int r = 2 * i + h;
        // A row with no visible key keeps max -inf: use 0 so that every exp2(-inf) stays 0.
        const float max_scaled = huge_logits || row_max[r] == -INFINITY ? 0.f : row_max[r] * scale_log2;
        // Two partial sums halve the dependent FADD chain (kNTiles * 2 = 16 adds at kBlockN 64).
        float sum_even = 0.f, sum_odd = 0.f;
#pragma unroll
        for (int j = 0; j < kNTiles; ++j) {
          const float p0 = fast_exp2(fmaf(s[i][j][2 * h], scale_log2, -max_scaled));
          const float p1 = fast_exp2(fmaf(s[i][j][2 * h + 1], scale_log2, -max_scaled));
          s[i][j][2 * h] = p0;
          s[i][j][2 * h + 1] = p1;
          sum_even += p0;
          sum_odd += p1;
        }
        row_sum[r] += sum_even + sum_odd;
      }
    }
  }

  // o *= correction, row by row (the deferred half of update(), after online_step()).
  template <int kDTiles>
  __device__ __forceinline__ void rescale(float (&o)[kMTiles][kDTiles][4], const float (&correction)[kRows]) const {
#pragma unroll
    for (int i = 0; i < kMTiles; ++i) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
#pragma unroll
        for (int d = 0; d < kDTiles; ++d) {
          o[i][d][2 * h] *= correction[2 * i + h];
          o[i][d][2 * h + 1] *= correction[2 * i + h];
        }
      }
    }
  }

  // Divides o by the row sums and returns the natural-log LSE per row. A row that saw no visible
  // key has sum 0: its o stayed exactly 0 (every p was 0) and its LSE is +inf, PyTorch's FA2
  // convention, so a backward pass recomputes p = exp(s - inf) = 0 for it.
  // LSE = max * scale + ln(sum), with the natural `scale` rather than (max * scale_log2 +
  // log2(sum)) * ln 2: that form rounds twice more at |max * scale_log2| ~ 100+ (large logits),
  // where one fp32 ulp is 8e-6 (test_large_logits measured 4.6e-5 with it).
  template <int kDTiles>
  __device__ __forceinline__ void finalize(float (&o)[kMTiles][kDTiles][4], float scale,
                                           float (&lse)[kRows]) {
    float mult[kRows];
    finalize_rows(scale, mult, lse);
    rescale<kDTiles>(o, mult);
  }

  // finalize()'s per-row scalars without o: the factor o is multiplied by (rescale()) and the LSE.
  // The row sums are final after the last key block's step, so the sm90 forward computes these
  // (quad sums, logf, a reciprocal: a ~300-cycle dependent chain) under its last P V, which o
  // must wait for (session 37's tile timeline: the epilogue's finalize took 764 cycles at d128).
  // kFast: MUFU's log2 and reciprocal (__logf, __fdividef: FA2's forms, it builds with fast math)
  // instead of logf's polynomial and the IEEE division with its slow path: ~60 fewer SASS
  // instructions on that chain. sum is in [1, 2^8 Sk] (the stale max's bound), where __logf's
  // absolute error is ~3 ulp of the log (< 1e-5 at 16k keys) and __fdividef's ~2 ulp.
  template <bool kFast = false>
  __device__ __forceinline__ void finalize_rows(float scale, float (&mult)[kRows], float (&lse)[kRows]) const {
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const float sum = quad_sum(row_sum[r]);
      const bool empty = !(sum > 0.f);  // also catches NaN from non-finite inputs
      mult[r] = empty ? 1.f : kFast ? __fdividef(1.f, sum) : 1.f / sum;
      lse[r] = empty ? INFINITY : fmaf(row_max[r], scale, kFast ? __logf(sum) : logf(sum));
    }
  }

  // finalize() with an attention sink (gpt-oss): exp(sink) (natural log) joins every row's
  // denominator and has no value row, so o shrinks by the keys' share exp(lse_keys - lse) and
  // lse = logaddexp(lse_keys, sink), taken as the larger plus log1p(exp(-|difference|)) so that
  // neither a large sink nor large keys overflow. A row that sees no key stays empty (o = 0, LSE
  // +inf; the sink alone does not make a row visible: reference_features.py's convention), which
  // keeps the backward's P = 0 and the sink's gradient 0 there.
  template <int kDTiles>
  __device__ __forceinline__ void finalize_with_sink(float (&o)[kMTiles][kDTiles][4], float scale,
                                                     float (&lse)[kRows], float sink) {
    float mult[kRows];
    finalize_rows_with_sink(scale, sink, mult, lse);
    rescale<kDTiles>(o, mult);
  }

  // finalize_with_sink()'s per-row scalars without o (see finalize_rows()).
  __device__ __forceinline__ void finalize_rows_with_sink(float scale, float sink, float (&mult)[kRows],
                                                          float (&lse)[kRows]) const {
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const float sum = quad_sum(row_sum[r]);
      const bool empty = !(sum > 0.f);
      const float lse_keys = fmaf(row_max[r], scale, logf(sum));
      const float hi = fmaxf(lse_keys, sink), lo = fminf(lse_keys, sink);
      const float total = hi + log1pf(expf(lo - hi));
      lse[r] = empty ? INFINITY : total;
      mult[r] = empty ? 1.f : expf(lse_keys - total) / sum;
    }
  }
};

// Merging softmax results over disjoint key sets (the decode kernel's warps, the split-KV
// partials): part i is a normalized output o_i with its natural-log LSE l_i (-inf: it saw no key).
// The whole is o = sum_i w_i o_i / sum_i w_i with w_i = exp(l_i - max_j l_j), and LSE max + log(sum
// w_i). Weights use the accurate expf (a part at the max has weight exactly 1): the merged LSE must
// stay within 1e-4 relative of a float64 one, and this runs once per row, not per score.
__device__ __forceinline__ float lse_weight(float lse, float max_lse) {
  return max_lse == -INFINITY ? 0.f : expf(lse - max_lse);
}
// The merged LSE; `empty` is what a row that saw no key gets: -inf for a partial that is merged
// again, +inf for a final LSE (PyTorch's FA2 convention, see OnlineSoftmax::finalize).
__device__ __forceinline__ float merged_lse(float max_lse, float weight_sum, float empty) {
  return max_lse == -INFINITY || !(weight_sum > 0.f) ? empty : max_lse + logf(weight_sum);
}

// ---- the backward's recomputed probabilities ------------------------------------------------
// P = 2^x with x = S * scale_log2 - LSE * log2(e), <= 0 in exact arithmetic (the LSE bounds every
// score of its row). In float32 both terms are rounded: with huge logits (q = k = v = 133120 in
// bf16 at d 64: LSE 1.4e11, an ulp of 16384) x lands above 0 by thousands, 2^x is inf and
// dS = inf * 0 is NaN (the extreme suite: dq NaN in 64 to 1,920 places on the sm90 backward).
// Capping keeps P <= 1 for one FMNMX per score; NaN (from NaN in q or k) stays NaN. Below
// |LSE * log2(e)| = 2^14 (the forward's huge-logit bound) x is off by at most a few 2^-10, so the
// sm90 backward caps P after its exponent loop, only in a step where some row reaches the bound
// (huge_lse2; capping every score cost it 1-4% at d128). The sm80 backward caps every exponent
// before its exponentials: exp2_fma gives garbage, not inf, for a large x, and a branch to an
// uncapped copy cost it spills (bwd_kernel_sm80.cuh).
__device__ __forceinline__ float capped_exponent(float x) { return fmin_nan(x, 0.f); }
// min(2^x, 1) = 2^min(x, 0): the same cap after ex2.approx, which overflows to inf for a large x.
__device__ __forceinline__ float capped_probability(float p) { return fmin_nan(p, 1.f); }
__device__ __forceinline__ bool huge_lse2(float lse2) { return fabsf(lse2) >= 16384.f && lse2 != INFINITY; }

// The forward's LSE as the backward subtracts it: LSE * log2(e); a row that saw no key +inf (P = 0;
// a forward that wrote -inf for it is read the same, else 2^(+inf) = NaN). Past |LSE2| = 2^24 an ulp
// of it is >= 2 and the row's top score no longer meets it at x ~ 0: the fused S c - LSE2 is exact
// where the forward rounded (half an ulp), the natural-log round trip adds ~2 ulps and the sm90
// backward's S^T = K Q^T sums in another order than the forward's Q K^T (~2^-20 relative, wgmma).
// Landing below, 2^x is 0 instead of 1: the extreme suite (q or k = 1e18, H200, session 11) had dv
// off by 6 (the dO row of the top key lost). There the offset is lowered by 2^-19 |LSE2| (32 ulps):
// the top score caps at P = 1, and any score that far below the top keeps 2^-(>= 32) of its
// weight at most, as the forward's own P for it (<= 2^-32 at that magnitude) says. Scores closer
// to the top than 2^-19 relative are not told apart by float32 S at all. Below 2^24 unchanged.
// Both backwards (the sm80 one failed the same two cases without it). Cost: ptxas -v, sm_90a, the
// sm80 d128 score-mod backward spills 12 bytes (stores only; 0 before); the others are unchanged.
__device__ __forceinline__ float backward_lse2(float lse) {
  constexpr float kLog2e = 1.4426950408889634f;
  const float lse2 = lse == -INFINITY ? INFINITY : lse * kLog2e;
  return fabsf(lse2) >= 16777216.f && lse2 != INFINITY ? lse2 - fabsf(lse2) * 0x1p-19f : lse2;
}

}  // namespace flashsdpa
