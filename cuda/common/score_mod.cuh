// score_mod.cuh: the score modifiers of issue 14 (params.h's ScoreMods) as one policy per
// direction, so that the kernels call hooks and never test a feature themselves:
//   softcap   s = softcap * tanh(scale * q.k / softcap)        a tanh per score
//   ALiBi     s -= slope[b, h] * |i + Sk - Sq - j|             a pass per key block
//   sinks     exp(sink[h]) joins each row's denominator        the forward's epilogue, the backward's postprocess
//   bias      s += bias[b, h, i, j] (attn_mask)                 a 16-bit load per score; its gradient dS stored
// Three instantiations of every kernel (ModsKind, chosen on the host by mods_kind() alone): the
// plain one has none of their code; kModsScore serves softcap, ALiBi and sinks, kModsBias the bias
// with ALiBi and sinks (each a uniform runtime branch inside it; the host refuses softcap with a bias).
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

#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "common/bias_cells.cuh"
#include "common/bias_stage.cuh"  // add_bias reads a staged tile with its quad()
#include "common/seqlen.cuh"
#include "flashsdpa/params.h"

namespace flashsdpa {

struct ScoreModConst {
  static constexpr float kLog2e = 1.4426950408889634f;
  static constexpr float kLn2 = 0.6931471805599453f;
};

// A hook argument given as a value or as a callable that computes it where a feature's branch
// needs it (the sm90 backward's query head is a division per step: computed once and held across
// the step, its one register cost the d128 kMods kernel an 8-byte spill).
template <typename T>
__device__ __forceinline__ auto lazy(const T& x) {
  if constexpr (std::is_invocable_v<const T&>) {
    return x();
  } else {
    return x;
  }
}

// MUFU.TANH (sm_75+): one instruction, relative error <= 2^-10.99 (PTX ISA), below the fp16
// rounding of the score it feeds; tanhf is ~20 instructions per score (FlashAttention-2 uses the
// same approximation).
__device__ __forceinline__ float tanh_approx(float x) {
  float y;
  asm("tanh.approx.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// The softcap's raw score, tanh(s * factor), over a score tile of kMT x kNT stacked C fragments.
template <int kMT, int kNT>
__device__ __forceinline__ void softcap_tanh(float (&s)[kMT][kNT][4], float factor) {
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[mt][nt][e] = tanh_approx(s[mt][nt][e] * factor);
}

// ALiBi's slope of (batch, head): alibi_slopes is (Hq,) (batch stride 0) or (B, Hq).
__device__ __forceinline__ float alibi_slope(const ScoreMods& m, int batch, int head) {
  return m.alibi_slopes[static_cast<int64_t>(batch) * m.alibi_batch_stride + head];
}

// The layouts of a score tile of kMT x kNT stacked m16n8 C fragments: rows are queries (S = Q K^T:
// the portable kernels, the sm90 forward) or keys (S^T = K Q^T: the sm90 backward, whose wgmma M
// dimension is the key block). row0 / col0 are the sequence row and column of the thread's element
// 0 (BlockMask::apply's, or apply_mask_t's key0 / q0), element x of fragment (mt, nt) sits at row
// row0 + 16 mt + 8 (x / 2) and column col0 + 8 nt + x % 2. The hooks below take the layout as a
// template argument, so each modifier's arithmetic is written once for both.
enum class ScoreLayout { kQueryRows, kKeyRows };

template <ScoreLayout kLayout>
struct ScoreTile {
  static constexpr bool kKeyRows = kLayout == ScoreLayout::kKeyRows;
  // ALiBi's distance |q + diag - key| of the element in fragment row `row` and column col0 + c is
  // |d0(row, col0, diag) - c|: (row - col0) + diag with query rows, (row - col0) - diag with key rows
  // (the same distance negated). Exact in float below 2^24 keys.
  __device__ __forceinline__ static float d0(int row, int col0, float diag) {
    return static_cast<float>(row - col0) + (kKeyRows ? -diag : diag);
  }
  // The element's query and key (sequence indices).
  __device__ __forceinline__ static int query(int row, int col0, int c) { return kKeyRows ? col0 + c : row; }
  __device__ __forceinline__ static int key(int row, int col0, int c) { return kKeyRows ? row : col0 + c; }
  // ALiBi's per-key value for the elements of fragment row `row` (row_slope) and for the element
  // (row, col0 + c) (slope), 0 for queries >= q_end. Two steps so that with query rows the select
  // stays one per row (selected per element, the portable kernels' SASS changed).
  __device__ __forceinline__ static float row_slope(int row, int q_end, float per_key) {
    return kKeyRows || row < q_end ? per_key : 0.f;
  }
  __device__ __forceinline__ static float slope(float row_slope, int col0, int c, int q_end, float per_key) {
    return kKeyRows ? (col0 + c < q_end ? per_key : 0.f) : row_slope;
  }
  // The element's LSE in log2 units from the kernel's per-query values: per row, lse2[mt][h] (the
  // portable backward), or per column pair, lse2[nt] with .x / .y for columns + 0, + 1 (the sm90 one).
  template <int kMT>
  __device__ __forceinline__ static float lse2_at(const float (&lse2)[kMT][2], int mt, int h, int, int) {
    return lse2[mt][h];
  }
  template <int kNT>
  __device__ __forceinline__ static float lse2_at(const float2 (&lse2)[kNT], int, int, int nt, int e) {
    return e ? lse2[nt].y : lse2[nt].x;
  }
};

// s += per_key * |i + diag - j| over a score tile (kLayout above). Queries >= q_end get nothing:
// the portable backward's zero-filled rows past seqlen_q must keep P = exp2(0) = 1 (a negative
// slope could otherwise overflow P to inf there, and inf * 0 = NaN in dS); the sm90 backward's
// columns past seqlen_q have LSE +inf (P = 0 whatever the bias) and are zeroed the same way so
// that both layouts compute the same x for every element.
template <ScoreLayout kLayout = ScoreLayout::kQueryRows, int kMT, int kNT>
__device__ __forceinline__ void add_alibi(float (&s)[kMT][kNT][4], int row0, int col0, float diag, float per_key,
                                          int q_end) {
  using Tile = ScoreTile<kLayout>;
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = row0 + mt * 16 + h * 8;
      const float row_slope = Tile::row_slope(row, q_end, per_key);
      const float d0 = Tile::d0(row, col0, diag);  // distance to the thread's column col0
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const float slope = Tile::slope(row_slope, col0, nt * 8 + e, q_end, per_key);
          s[mt][nt][2 * h + e] = fmaf(slope, fabsf(d0 - static_cast<float>(nt * 8 + e)), s[mt][nt][2 * h + e]);
        }
      }
    }
  }
}

// ---- the additive bias (attn_mask) --------------------------------------------------------------
// fn(x, q, k) for each element x of a score tile (ScoreTile<kLayout>'s layouts) whose query q and
// key k lie inside (seqlen_q, seqlen_k): the one walk of the bias's element-wise paths (a skipped
// tile's -inf, the key-rows loads, the portable backward's gradient stores).
template <ScoreLayout kLayout, int kMT, int kNT, typename Fn>
__device__ __forceinline__ void for_each_in_range(float (&s)[kMT][kNT][4], int row0, int col0, int seqlen_q,
                                                  int seqlen_k, Fn&& fn) {
  using Tile = ScoreTile<kLayout>;
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int row = row0 + mt * 16 + h * 8;
          const int q = Tile::query(row, col0, nt * 8 + e), k = Tile::key(row, col0, nt * 8 + e);
          if (q < seqlen_q && k < seqlen_k) fn(s[mt][nt][2 * h + e], q, k);
        }
}

// 16-bit values of the call's dtype <-> float (the bias and its gradient are in q's dtype, as
// PyTorch's efficient-attention kernel takes and returns them).
__device__ __forceinline__ float bias_to_float(uint16_t bits, DType dtype) {
  return dtype == DType::kBFloat16 ? __uint_as_float(static_cast<uint32_t>(bits) << 16)
                                   : __half2float(__ushort_as_half(bits));
}
__device__ __forceinline__ uint16_t float_to_bias(float x, DType dtype) {
  if (dtype == DType::kBFloat16) {
    // Round to nearest even (NaN stays NaN: the quiet bit survives the shift).
    const uint32_t u = __float_as_uint(x);
    if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);
    return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
  }
  return __half_as_ushort(__float2half_rn(x));
}

// (b, h)'s plane of a (B, Hq, Sq, Sk)-broadcast 16-bit tensor at the given strides.
__device__ __forceinline__ int64_t bias_plane(int batch, int head, int64_t batch_stride, int64_t head_stride) {
  return static_cast<int64_t>(batch) * batch_stride + static_cast<int64_t>(head) * head_stride;
}

// s0 += factor * at[0], and s1 += factor * at[1] when pair (the second key is < seqlen_k): one query
// row's two adjacent keys, one 4-byte load (the host keeps the bias's strides even and its pointer
// 4-byte aligned, checks.cpp; the key is even); a pair that ends at seqlen_k reads its first
// element alone. Half the loads and half the registers of 16-bit loads (those made the sm90 d64
// forward spill 154 bytes). The portable kernels' load policy for query-row tiles (the sm90 kernels stage
// theirs with cp.async a block ahead, bias_stage.cuh; the decode kernel with each K/V tile).
__device__ __forceinline__ void add_bias_pair(float& s0, float& s1, const uint16_t* at, bool pair, DType dtype,
                                              float factor) {
  if (pair) {
    const uint32_t bits = __ldg(reinterpret_cast<const unsigned int*>(at));
    s0 = fmaf(bias_to_float(static_cast<uint16_t>(bits), dtype), factor, s0);
    s1 = fmaf(bias_to_float(static_cast<uint16_t>(bits >> 16), dtype), factor, s1);
  } else {
    s0 = fmaf(bias_to_float(__ldg(at), dtype), factor, s0);
  }
}

// s += factor * bias[b, h, query, key] over a score tile (ScoreTile's layouts), factor converting
// natural units into the kernel's raw ones. Elements with query >= seqlen_q or key >= seqlen_k get
// nothing and read nothing (the bias has only Sq x Sk elements per plane; the portable backward's
// zero-filled rows must keep x = 0 there, as add_alibi's). -inf (a masked key) stays -inf
// (+inf with the backward's signed negative scale, whose scale_log2 < 0 then makes it -inf again).
// need (bias_cells.cuh, the tile's summary): kPlain adds nothing and loads nothing; kSkip sets the
// elements in range to what a -inf bias gives (-inf x factor) without loading it.
// staged: where the query-row pairs come from: global memory (GlobalBias, the default) or the
// warp's tile in shared memory (bias_stage.cuh's WarpBiasTile, the sm90 forward: one m16 tile
// per warp, staged with zeros outside the sequence, so every pair is read unconditionally).
struct GlobalBias {};

template <ScoreLayout kLayout = ScoreLayout::kQueryRows, int kMT, int kNT, typename Staged = GlobalBias>
__device__ __forceinline__ void add_bias(float (&s)[kMT][kNT][4], const ScoreMods& m, DType dtype, int batch,
                                         int head, int row0, int col0, int seqlen_q, int seqlen_k, float factor,
                                         TileNeed need = TileNeed::kBias, const Staged& staged = {}) {
  using Tile = ScoreTile<kLayout>;
  if (need == TileNeed::kPlain) return;
  if (need == TileNeed::kSkip) {
    const float hidden = factor < 0.f ? INFINITY : -INFINITY;
    for_each_in_range<kLayout>(s, row0, col0, seqlen_q, seqlen_k, [&](float& x, int, int) { x = hidden; });
    return;
  }
  if constexpr (!std::is_same_v<Staged, GlobalBias>) {
    static_assert(kMT == 1, "a staged tile is one warp's 16 rows");
    // Four fragments' pairs a warp instruction (bias_stage.cuh's quad): 8 ldmatrix.x4 a thread for
    // the forward's 128 keys instead of 32 4-byte loads, 4 .trans for the backward's 64 queries
    // instead of 32 16-bit loads.
    static_assert(kNT % 2 == 0, "fragments in pairs of n8 tiles");
#pragma unroll
    for (int nt = 0; nt < kNT; nt += 2) {
      uint32_t w[4];
      staged.quad(nt, w);
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        float& x0 = s[0][nt + k / 2][2 * (k % 2)];
        float& x1 = s[0][nt + k / 2][2 * (k % 2) + 1];
        x0 = fmaf(bias_to_float(static_cast<uint16_t>(w[k]), dtype), factor, x0);
        x1 = fmaf(bias_to_float(static_cast<uint16_t>(w[k] >> 16), dtype), factor, x1);
      }
    }
    return;
  }
  const uint16_t* base =
      static_cast<const uint16_t*>(m.bias) + bias_plane(batch, head, m.bias_batch_stride, m.bias_head_stride);
  if constexpr (Tile::kKeyRows) {
    for_each_in_range<kLayout>(s, row0, col0, seqlen_q, seqlen_k, [&](float& x, int q, int k) {
      x = fmaf(bias_to_float(__ldg(base + static_cast<int64_t>(q) * m.bias_row_stride + k), dtype), factor, x);
    });
  } else {
    // Query rows: elements e = 0, 1 are adjacent keys of one row (add_bias_pair).
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int row = row0 + mt * 16 + h * 8;
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt) {
          const int k = col0 + nt * 8;
          if (row < seqlen_q && k < seqlen_k) {
            add_bias_pair(s[mt][nt][2 * h], s[mt][nt][2 * h + 1],
                          base + static_cast<int64_t>(row) * m.bias_row_stride + k, k + 1 < seqlen_k, dtype, factor);
          }
        }
      }
  }
}

// ---- which instantiation ------------------------------------------------------------------------
// The kernels' template argument (it replaced a bool kMods: true is now kModsScore or kModsBias;
// the traits keep `kMods` as "any modifier"). As runtime branches in the plain kernel the modifiers cost the plain d32 / d64 /
// d96 forwards new spills (ptxas -v, sm_90: d64 from 0 to 80 bytes), because a branch keeps its
// operands live through the mainloop; for the same reason the bias, whose loads made the one
// modifier kernel spill (sm90 fwd d64 0 -> 82 bytes of stores, bwd d128 0 -> 24), has a kernel of
// its own, so softcap / ALiBi / sinks calls run the pre-bias kModsScore code
// (docs/kernel_notes_features.md, "The bias in its own instantiation").
enum ModsKind : int {
  kModsNone = 0,   // no modifier: the plain kernel
  kModsScore = 1,  // softcap, ALiBi, sinks (no bias)
  kModsBias = 2,   // the additive bias (attn_mask), with ALiBi and sinks alongside; never softcap
};

// The one place that picks the instantiation of a call (both directions; the backward's main kernel
// sums the rows the sinks' gradient is finished from, so sinks alone need a modifier kernel too).
FLASHSDPA_HOST_DEVICE ModsKind mods_kind(const ScoreMods& m) {
  return m.bias != nullptr ? kModsBias : m.any() ? kModsScore : kModsNone;
}

// ---- forward ------------------------------------------------------------------------------------
// Stateless: every value is read from the params (constant bank) where it is used. Softcap's code
// is in kModsScore only, the bias's in kModsBias only.
template <ModsKind kMods>
struct ScoreModFwd {
  static constexpr bool kSoftcap = kMods == kModsScore;
  // The natural-log value of one raw score unit (the LSE is max * scale + ln(sum)) and that times
  // log2(e) (> 0: OnlineSoftmax's multiplier). Without softcap the kernel negates q for a negative
  // scale and loads zeros for a zero one; then any positive scale_log2 keeps exp2(-inf) = 0 for
  // masked keys, and 1 makes a raw unit ln 2 (which matters only with ALiBi: without it a
  // zero-scale row max is exactly 0).
  __device__ __forceinline__ static float scale(const AttnFwdParams& p) {
    if (kSoftcap && p.mods.softcap > 0.f) return p.mods.softcap;
    return p.scale == 0.f ? ScoreModConst::kLn2 : fabsf(p.scale);
  }
  __device__ __forceinline__ static float scale_log2(const AttnFwdParams& p) {
    if (kSoftcap && p.mods.softcap > 0.f) return p.mods.softcap_log2;
    return p.scale == 0.f ? 1.f : fabsf(p.scale_log2);
  }

  // The raw q.k scores of one key block -> the softmax's raw scores, before the mask. row0 / col0:
  // as BlockMask::apply's. The branches are uniform (params), one compare each per key block.
  // need: the tile's (bias_cells.cuh), read by the kModsBias kernels only.
  template <int kMT, int kNT, typename Staged = GlobalBias>
  __device__ __forceinline__ static void apply(const AttnFwdParams& p, const SeqlenInfo& seq, int batch, int head,
                                               float (&s)[kMT][kNT][4], int row0, int col0,
                                               TileNeed need = TileNeed::kBias, const Staged& staged = {}) {
    if constexpr (kMods != kModsNone) {
      if (kSoftcap && p.mods.softcap > 0.f) softcap_tanh(s, fabsf(p.mods.softcap_tanh_scale));
      if (p.mods.alibi_slopes != nullptr) {
        const float per_key = -alibi_slope(p.mods, batch, head) / scale(p);
        add_alibi(s, row0, col0, static_cast<float>(seq.seqlen_k - seq.seqlen_q), per_key, seq.seqlen_q);
      }
      if constexpr (kMods == kModsBias) {  // mods_kind: the bias is set
        add_bias(s, p.mods, p.dtype, batch, head, row0, col0, seq.seqlen_q, seq.seqlen_k, 1.f / scale(p), need, staged);
      }
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
// tanh is recovered from P rather than held from the recomputation: t = (log2 P + lse log2 e) /
// scale_log2 - ALiBi (one MUFU.LG2 per score). Holding 1 - tanh^2 took kMTS * kNTS * 4 registers
// (64 at d = 64) in kernels at the 255 cap: 312 / 408 bytes of spill stores at d64 (sm_80 /
// sm_90). exp2 and log2 are accurate to ~2^-17 relative (exp2_fma) or better, so t is off by
// < 1e-5 / softcap; t is clamped to [-1, 1], which also maps P = 0 (masked, or a row with LSE +inf,
// where dS is 0 anyway) to 1 - t^2 = 0 instead of NaN.
// kMods as the forward's (softcap in kModsScore only, the bias and its gradient in kModsBias only).
// A zero scale without softcap (scale_log2 = 0) cannot carry ALiBi in these units: the host refuses that combination (checks.cpp).
// Both layouts (ScoreTile): the portable backward's S (query rows, per-row LSE) and the sm90
// backward's S^T (key rows: its wgmma M is the key block; per-column LSE), selected by the hooks'
// kLayout argument; the arithmetic of each modifier is the same code for both.
template <ModsKind kMods>
struct ScoreModBwd {
  static constexpr bool kSoftcap = kMods == kModsScore;
  static constexpr bool kBias = kMods == kModsBias;
  __device__ __forceinline__ static float scale_log2(const AttnBwdParams& p) {
    if (kSoftcap && p.mods.softcap > 0.f) return p.mods.softcap_log2;
    return p.scale_log2;  // the plain kernel: a constant-bank operand of the probabilities' FFMA, as before
  }

  // ALiBi per key of distance in x's units for query head `head` (0 without ALiBi).
  __device__ __forceinline__ static float alibi_per_key(const AttnBwdParams& p, int batch, int head) {
    if (p.mods.alibi_slopes == nullptr) return 0.f;
    return -alibi_slope(p.mods, batch, head) * ScoreModConst::kLog2e / scale_log2(p);
  }

  // The bias's raw units per natural unit (x's: P = exp2(x scale_log2 - ..), signed).
  __device__ __forceinline__ static float bias_per_unit(const AttnBwdParams& p) {
    return ScoreModConst::kLog2e / scale_log2(p);
  }

  // The bias's gradient in the sm90 backward, from dS^T as its 16-bit wgmma A fragments (word
  // [j / 2][(j % 2) * 2 + h]: fragment j's key row key0 + 8 h, queries q0 + 8 j + 0 / + 1 in the
  // low / high half): two 16-bit stores per word. Re-using the rounded words the dK GEMM reads
  // holds no float: stored from the float dS^T inside grads(), the d128 kMods kernel spilled
  // 108 bytes of stores (ptxas -v, sm_90a); from these words 24 (the bias loads in apply()).
  template <int kA, typename Head>
  __device__ __forceinline__ static void bias_grad_t(const AttnBwdParams& p, const SeqlenInfo& seq, int batch,
                                                     const Head& head, const uint32_t (&ds16)[kA][4], int key0, int q0) {
    if constexpr (kBias) {
      if (p.d_bias == nullptr) return;
      uint16_t* out = static_cast<uint16_t*>(p.d_bias) +
                      bias_plane(batch, lazy(head), p.d_bias_batch_stride, p.d_bias_head_stride);
#pragma unroll
      for (int j = 0; j < 2 * kA; ++j)
#pragma unroll
        for (int h = 0; h < 2; ++h)
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int key = key0 + 8 * h, q = q0 + 8 * j + e;
            if (q < seq.seqlen_q && key < seq.seqlen_k)
              out[static_cast<int64_t>(q) * p.d_bias_row_stride + key] =
                  static_cast<uint16_t>(ds16[j / 2][(j % 2) * 2 + h] >> (16 * e));
          }
    }
  }

  // S = q.k of one (query head, query block) -> x, before the probabilities, in either tile layout
  // (ScoreTile). row0() / col0(): the thread's first element's sequence row and column
  // (BlockMask::apply's, or the sm90 backward's key0 / q0), evaluated only inside the ALiBi branch.
  template <ScoreLayout kLayout = ScoreLayout::kQueryRows, int kMT, int kNT, typename Head, typename Row0,
            typename Col0, typename Staged = GlobalBias>
  __device__ __forceinline__ static void apply(const AttnBwdParams& p, const SeqlenInfo& seq, int batch, const Head& head,
                                               float (&s)[kMT][kNT][4], Row0&& row0, Col0&& col0,
                                               TileNeed need = TileNeed::kBias, const Staged& staged = {}) {
    if constexpr (kMods != kModsNone) {
      if (kSoftcap && p.mods.softcap > 0.f) softcap_tanh(s, p.mods.softcap_tanh_scale);
      if (p.mods.alibi_slopes != nullptr) {
        add_alibi<kLayout>(s, row0(), col0(), static_cast<float>(seq.seqlen_k - seq.seqlen_q),
                           alibi_per_key(p, batch, lazy(head)), seq.seqlen_q);
      }
      if constexpr (kBias) {
        add_bias<kLayout>(s, p.mods, p.dtype, batch, lazy(head), row0(), col0(), seq.seqlen_q, seq.seqlen_k,
                          bias_per_unit(p), need, staged);
      }
    }
  }

  // P and dP (before dS replaces it) -> the per-query sums the postprocess finishes the modifiers'
  // gradients from (bwd_prepost.cuh): row_pdp += sum_keys P dP (delta, exactly) and, for the slopes,
  // row_pdist += sum_keys P |distance|. Query rows (the portable backward): quad sums, one float
  // atomic per row, array and iteration. Key rows (the sm90 backward's S^T, kMT = 1, kNT = 8: 64
  // queries of a warp's 16 keys): column sums, each thread's 2 keys, then a reduce-scatter over the
  // 8 lanes of a column pair (lane bits 2-4 halve the columns a lane keeps: 8 + 4 + 2 shuffles per
  // array where an all-reduce takes 3 x 16), after which lane l holds its pair's sums of column
  // group l / 4: one float atomic per (warp, column), array and step, from every lane at once.
  template <ScoreLayout kLayout = ScoreLayout::kQueryRows, int kMT, int kNT, typename Head, typename Row0,
            typename Col0>
  __device__ __forceinline__ static void row_sums(const AttnBwdParams& p, const SeqlenInfo& seq, int batch, const Head& head,
                                                  const float (&prob)[kMT][kNT][4], const float (&dp)[kMT][kNT][4],
                                                  Row0&& row0, Col0&& col0) {
    if constexpr (kMods != kModsNone) {
      using Tile = ScoreTile<kLayout>;
      if (p.row_pdp == nullptr) return;
      const bool slopes = p.d_alibi_slopes != nullptr;  // uniform
      const float diag = static_cast<float>(seq.seqlen_k - seq.seqlen_q);
      const int r0 = row0(), c0 = col0();
      const int64_t base = batch_offset(p, batch, p.delta_batch_stride) + lazy(head) * p.delta_head_stride;
      auto add = [&](int query, float pdp, float pdist) {  // query < seqlen_q
        const int64_t at = base + (seq.q_row_offset + query) * p.delta_row_stride;
        atomicAdd(p.row_pdp + at, pdp);
        if (slopes) atomicAdd(p.row_pdist + at, pdist);
      };
      if constexpr (!Tile::kKeyRows) {
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int row = r0 + mt * 16 + h * 8;
            const float d0 = Tile::d0(row, c0, diag);
            float pdp = 0.f, pdist = 0.f;
#pragma unroll
            for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
              for (int e = 0; e < 2; ++e) {
                const float pr = prob[mt][nt][2 * h + e];
                pdp = fmaf(pr, dp[mt][nt][2 * h + e], pdp);
                if (slopes) pdist = fmaf(pr, fabsf(d0 - static_cast<float>(nt * 8 + e)), pdist);
              }
            pdp = quad_sum(pdp);
            if (slopes) pdist = quad_sum(pdist);
            if ((threadIdx.x & 3) == 0 && row < seq.seqlen_q) add(row, pdp, pdist);
          }
      } else {
        static_assert(kMT == 1 && kNT == 8, "the reduce-scatter below: 16 columns per thread over 8 lanes");
        const int lane = threadIdx.x & 31;
        // One array at a time, its first halving (lane bit 4: column groups 0-3 or 4-7) fused with
        // the per-thread sums, so at most 8 + 2 of its values are live: the d128 kernel's step has
        // no 16 registers to spare here (all 32 sums at once: 396 bytes of spill stores).
        auto column_sums = [&](auto&& value) {  // value(nt, e): the thread's 2 keys' term of column 8 nt + e
          float v[kNT];  // after the first halving: column group nt = (lane & 16 ? 4 : 0) + i / 2, e = i % 2
          const bool upper = (lane & 16) != 0;
#pragma unroll
          for (int i = 0; i < kNT; ++i) {
            const float lo = value(i / 2, i % 2), hi = value(kNT / 2 + i / 2, i % 2);
            v[i] = (upper ? hi : lo) + __shfl_xor_sync(0xffffffffu, upper ? lo : hi, 16);
          }
          // Lane bits 3, 2: the upper or lower n of the 2n kept. Constant trip counts: a halving loop
          // variable is not unrolled (v went to local memory).
#pragma unroll
          for (int step = 1; step < 3; ++step) {
            const int n = kNT >> step;  // 4, 2
            const bool up = (lane & (2 * n)) != 0;
#pragma unroll
            for (int i = 0; i < kNT / 2; ++i)
              if (i < n) v[i] = (up ? v[i + n] : v[i]) + __shfl_xor_sync(0xffffffffu, up ? v[i] : v[i + n], 2 * n);
          }
          return make_float2(v[0], v[1]);  // column group lane / 4: columns 8 (lane / 4) + 0, 1
        };
        const float2 pdp = column_sums([&](int nt, int e) {
          return fmaf(prob[0][nt][e], dp[0][nt][e], prob[0][nt][2 + e] * dp[0][nt][2 + e]);
        });
        float2 pdist = make_float2(0.f, 0.f);
        if (slopes) {
          const float d0 = Tile::d0(r0, c0, diag);  // key row r0; key row r0 + 8: d0 + 8
          pdist = column_sums([&](int nt, int e) {
            const float c = static_cast<float>(nt * 8 + e);
            return fmaf(prob[0][nt][e], fabsf(d0 - c), prob[0][nt][2 + e] * fabsf(d0 + 8.f - c));
          });
        }
        const int q = Tile::query(r0, c0, 8 * (lane / 4));
        if (q < seq.seqlen_q) add(q, pdp.x, pdist.x);
        if (q + 1 < seq.seqlen_q) add(q + 1, pdp.y, pdist.y);
      }
    }
  }

  // dS (gradient of the final score, 0 where masked or past seqlen_q), P and the queries' LSE in
  // log2 units (ScoreTile::lse2_at: per row or per column) -> the slope's gradient (one warp reduce
  // and one float atomic per warp and iteration: 8 per 64 x 128 tile) and, with softcap, dS times
  // 1 - tanh^2 (the gradient of the tanh's input), in either tile layout.
  template <ScoreLayout kLayout = ScoreLayout::kQueryRows, int kMT, int kNT, typename Head, typename Lse2,
            typename Row0, typename Col0>
  __device__ __forceinline__ static void grads(const AttnBwdParams& p, const SeqlenInfo& seq, int batch, const Head& head,
                                               float (&ds)[kMT][kNT][4], const float (&prob)[kMT][kNT][4],
                                               const Lse2& lse2, Row0&& row0, Col0&& col0) {
    if constexpr (kMods != kModsNone) {
      using Tile = ScoreTile<kLayout>;
      const float diag = static_cast<float>(seq.seqlen_k - seq.seqlen_q);
      if (kBias && !Tile::kKeyRows && p.d_bias != nullptr) {
        // The bias is added after the ALiBi term, so its gradient is dS itself (the host refuses
        // softcap with a bias). Each (query, key) of a (b, h) plane is one element of one tile:
        // plain stores. The sm90 backward stores it from its 16-bit dS^T instead (bias_grad_t).
        uint16_t* out = static_cast<uint16_t*>(p.d_bias) +
                        bias_plane(batch, lazy(head), p.d_bias_batch_stride, p.d_bias_head_stride);
        for_each_in_range<kLayout>(ds, row0(), col0(), seq.seqlen_q, seq.seqlen_k, [&](float& x, int q, int k) {
          out[static_cast<int64_t>(q) * p.d_bias_row_stride + k] = float_to_bias(x, p.dtype);
        });
      }
      if (p.d_alibi_slopes != nullptr) {
        const int r0 = row0(), c0 = col0();
        float acc = 0.f;
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const float d0 = Tile::d0(r0 + mt * 16 + h * 8, c0, diag);
#pragma unroll
            for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
              for (int e = 0; e < 2; ++e)
                acc = fmaf(ds[mt][nt][2 * h + e], fabsf(d0 - static_cast<float>(nt * 8 + e)), acc);
          }
#pragma unroll
        for (int offset = 16; offset > 0; offset >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, offset);
        if ((threadIdx.x & 31) == 0)
          atomicAdd(p.d_alibi_slopes + static_cast<int64_t>(batch) * p.mods.alibi_batch_stride + lazy(head), -acc);
      }
      if (kSoftcap && p.mods.softcap > 0.f) {
        const float inv_scale_log2 = 1.f / p.mods.softcap_log2;
        const float per_key = alibi_per_key(p, batch, lazy(head));
        const int r0 = row0(), c0 = col0();
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int row = r0 + mt * 16 + h * 8;
            const float row_key = Tile::row_slope(row, seq.seqlen_q, per_key);  // as add_alibi
            const float d0 = Tile::d0(row, c0, diag);
#pragma unroll
            for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
              for (int e = 0; e < 2; ++e) {
                const float key = Tile::slope(row_key, c0, nt * 8 + e, seq.seqlen_q, per_key);
                const float x = __log2f(prob[mt][nt][2 * h + e]) + Tile::lse2_at(lse2, mt, h, nt, e);
                const float alibi = key * fabsf(d0 - static_cast<float>(nt * 8 + e));
                const float t = fminf(fmaxf(fmaf(x, inv_scale_log2, -alibi), -1.f), 1.f);
                ds[mt][nt][2 * h + e] *= fmaf(-t, t, 1.f);
              }
          }
      }
    }
  }
};

}  // namespace flashsdpa
