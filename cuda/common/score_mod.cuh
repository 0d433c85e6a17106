// score_mod.cuh: the score modifiers of issue 14 (params.h's ScoreMods) as one policy per
// direction, so that the kernels call hooks and never test a feature themselves:
//   softcap   s = softcap * tanh(scale * q.k / softcap)        compile-time (kSoftcap): a tanh per score
//   ALiBi     s -= slope[b, h] * |i + Sk - Sq - j|             runtime (a null slope pointer skips the pass)
//   sinks     exp(sink[h]) joins each row's denominator        runtime, the forward's epilogue only
// in that order, before the mask (mask.cuh sets -inf / 0 after). The online softmax stays in
// softmax.cuh: the forward hands it raw scores and a scale_log2, as before, only both now come
// from here. docs/kernel_notes_features.md has the derivation and the costs.
//
// Units. The forward's softmax takes "raw" scores x and exponentiates exp2(x * scale_log2 - ..):
// without softcap x = q.k (q negated for a negative scale) and scale_log2 = |scale| log2(e); with
// softcap x = tanh(|scale| q.k / softcap) and scale_log2 = softcap * log2(e) (FlashAttention-2's
// folding, so the softmax code is the same). ALiBi is added in those raw units (slope / scale per
// key), once per tile. The backward computes P = exp2(x * scale_log2 - lse * log2(e)) with its own
// (signed-scale) raw units, so it has its own policy below.
#pragma once

#include <cmath>

#include "common/seqlen.cuh"
#include "flashsdpa/params.h"

namespace flashsdpa {

struct ScoreModConst {
  static constexpr float kLog2e = 1.4426950408889634f;
  static constexpr float kLn2 = 0.6931471805599453f;
};

// MUFU.TANH (sm_75+): one instruction, relative error <= 2^-10.99 (PTX ISA), below the fp16
// rounding of the score it feeds; tanhf is ~20 instructions per score (FlashAttention-2 uses the
// same approximation).
__device__ __forceinline__ float tanh_approx(float x) {
  float y;
  asm("tanh.approx.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// s += per_key * |i + diag - j| over a score tile of kMT x kNT stacked m16n8 C fragments (the
// layout of BlockMask::apply: row0 / col0 are the sequence row and column of the thread's element
// 0). Distances are exact in float below 2^24 keys. Rows >= row_end get nothing: the backward's
// zero-filled rows past seqlen_q must keep P = exp2(0) = 1 (a negative slope could otherwise
// overflow P to inf there, and inf * 0 = NaN in dS).
template <int kMT, int kNT>
__device__ __forceinline__ void add_alibi(float (&s)[kMT][kNT][4], int row0, int col0, float diag, float per_key,
                                          int row_end) {
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = row0 + mt * 16 + h * 8;
      const float slope = row < row_end ? per_key : 0.f;
      const float d0 = static_cast<float>(row - col0) + diag;  // distance to the thread's column col0
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          s[mt][nt][2 * h + e] = fmaf(slope, fabsf(d0 - static_cast<float>(nt * 8 + e)), s[mt][nt][2 * h + e]);
        }
      }
    }
  }
}

// ---- forward ------------------------------------------------------------------------------------
// Stateless: every value is derived from the params (constant bank) where it is used, so that a
// call without ALiBi holds no register for it through the mainloop (the d = 128 kernel sits at the
// 255-register cap; members held across the loop added 32 bytes of spill loads on sm_90).
template <bool kSoftcap>
struct ScoreModFwd {
  // The natural-log value of one raw score unit (the LSE is max * scale + ln(sum)) and that times
  // log2(e) (> 0: OnlineSoftmax's multiplier). Without softcap the kernel negates q for a negative
  // scale and loads zeros for a zero one; then any positive scale_log2 keeps exp2(-inf) = 0 for
  // masked keys, and 1 makes a raw unit ln 2 (which matters only with ALiBi: without it a
  // zero-scale row max is exactly 0).
  __device__ __forceinline__ static float scale(const AttnFwdParams& p) {
    if constexpr (kSoftcap) return p.mods.softcap;
    return p.scale == 0.f ? ScoreModConst::kLn2 : fabsf(p.scale);
  }
  __device__ __forceinline__ static float scale_log2(const AttnFwdParams& p) {
    if constexpr (kSoftcap) return p.mods.softcap * ScoreModConst::kLog2e;
    return p.scale == 0.f ? 1.f : fabsf(p.scale_log2);
  }

  // The raw q.k scores of one key block -> the softmax's raw scores, before the mask. row0 / col0:
  // as BlockMask::apply's.
  template <int kMT, int kNT>
  __device__ __forceinline__ static void apply(const AttnFwdParams& p, const SeqlenInfo& seq, int batch, int head,
                                               float (&s)[kMT][kNT][4], int row0, int col0) {
    if constexpr (kSoftcap) {
      const float tanh_scale = fabsf(p.scale) / p.mods.softcap;  // raw q.k -> the tanh's argument
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) s[mt][nt][e] = tanh_approx(s[mt][nt][e] * tanh_scale);
    }
    if (p.mods.alibi_slopes != nullptr) {  // uniform: one compare per key block without ALiBi
      const float slope = p.mods.alibi_slopes[static_cast<int64_t>(batch) * p.mods.alibi_batch_stride + head];
      add_alibi(s, row0, col0, static_cast<float>(seq.seqlen_k - seq.seqlen_q), -slope / scale(p), seq.seqlen_q);
    }
  }

  // This head's sink logit (natural log), -inf without sinks.
  __device__ __forceinline__ static float sink(const AttnFwdParams& p, int head) {
    return p.mods.sinks == nullptr ? -INFINITY : p.mods.sinks[head];
  }
};

// ---- backward -----------------------------------------------------------------------------------
// P = exp2(x * scale_log2 - lse * log2(e)) with x = q.k (scale signed: the backward does not negate
// q), or x = tanh(scale q.k / softcap) and scale_log2 = softcap log2(e); ALiBi is added to x per
// iteration (its slope belongs to the iteration's query head). dS = P (dP - delta) is the gradient
// of the final score: ALiBi's slope gradient sums -dS * distance, and the softcap multiplies dS by
// 1 - tanh^2 before dS leaves registers (the scale is applied to dK and dQ at the end, as before).
// Stateless for the forward's reason. A zero scale without softcap (scale_log2 = 0) cannot carry
// ALiBi in these units: the host refuses that combination (checks.cpp).
template <bool kSoftcap>
struct ScoreModBwd {
  __device__ __forceinline__ static float scale_log2(const AttnBwdParams& p) {
    if constexpr (kSoftcap) return p.mods.softcap * ScoreModConst::kLog2e;
    return p.scale_log2;  // a constant-bank operand of the probabilities' FFMA, as before
  }

  // S = q.k of one (query head, query block) -> x, before the probabilities; dtanh keeps
  // 1 - tanh^2 for grads() (kSoftcap only; otherwise never touched and compiled away).
  // row0() / col0(): the thread's first element's sequence row and column (BlockMask::apply's),
  // evaluated only inside the ALiBi branch.
  template <int kMT, int kNT, typename Row0, typename Col0>
  __device__ __forceinline__ static void apply(const AttnBwdParams& p, const SeqlenInfo& seq, int batch, int head,
                                               float (&s)[kMT][kNT][4], float (&dtanh)[kMT][kNT][4], Row0&& row0,
                                               Col0&& col0) {
    if constexpr (kSoftcap) {
      const float tanh_scale = p.scale / p.mods.softcap;
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const float t = tanh_approx(s[mt][nt][e] * tanh_scale);
            s[mt][nt][e] = t;
            dtanh[mt][nt][e] = fmaf(-t, t, 1.f);
          }
    }
    if (p.mods.alibi_slopes != nullptr) {
      const float slope = p.mods.alibi_slopes[static_cast<int64_t>(batch) * p.mods.alibi_batch_stride + head];
      add_alibi(s, row0(), col0(), static_cast<float>(seq.seqlen_k - seq.seqlen_q),
                -slope * ScoreModConst::kLog2e / scale_log2(p), seq.seqlen_q);
    }
  }

  // dS (gradient of the final score, 0 where masked or past seqlen_q) -> the slope's gradient (one
  // float atomic per warp and iteration: 8 per 64 x 128 tile) and, with softcap, the gradient of
  // the tanh's input.
  template <int kMT, int kNT, typename Row0, typename Col0>
  __device__ __forceinline__ static void grads(const AttnBwdParams& p, const SeqlenInfo& seq, int batch, int head,
                                               float (&ds)[kMT][kNT][4], const float (&dtanh)[kMT][kNT][4],
                                               Row0&& row0, Col0&& col0) {
    if (p.d_alibi_slopes != nullptr) {
      const float diag = static_cast<float>(seq.seqlen_k - seq.seqlen_q);
      const int r0 = row0(), c0 = col0();
      float acc = 0.f;
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const float d0 = static_cast<float>(r0 + mt * 16 + h * 8 - c0) + diag;
#pragma unroll
          for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
            for (int e = 0; e < 2; ++e)
              acc = fmaf(ds[mt][nt][2 * h + e], fabsf(d0 - static_cast<float>(nt * 8 + e)), acc);
        }
#pragma unroll
      for (int offset = 16; offset > 0; offset >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, offset);
      if ((threadIdx.x & 31) == 0)
        atomicAdd(p.d_alibi_slopes + static_cast<int64_t>(batch) * p.mods.alibi_batch_stride + head, -acc);
    }
    if constexpr (kSoftcap) {
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) ds[mt][nt][e] *= dtanh[mt][nt][e];
    }
  }
};

}  // namespace flashsdpa
