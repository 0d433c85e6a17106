// dropout.cuh: dropout on P with PyTorch's FlashAttention-2 mask, bit for bit (issue 14). Owns the
// Philox, the per-(16 x 32 block, lane) random bytes, the keep test and where each byte goes in a
// warp's m16n8 C fragments. docs/kernel_notes_dropout.md has the scheme and its sources;
// python/flashsdpa/reference_dropout.py computes the same mask on the host.
//
// The mask is a function of (batch b, query head h, row i, column j) of one sequence only, never
// of a kernel's tiling: the element is kept when byte (4 * t + e) of
//   Philox4x32-7(key = seed, counter = (offset_lo, offset_hi, i / 16, j / 32)),
//   offset = philox_offset + (b * Hq + h) * 32 + lane
// is below threshold_plus1, where lane = (i % 8) * 4 + (j % 8) / 2 is the lane of an m16n8k16 C
// fragment that holds (i % 16, j % 32) in n8 tile t = (j % 32) / 8 as element e = 2 * ((i % 16) / 8)
// + j % 2. So a warp whose C fragments tile a 16 x 32 block (4 n8 tiles of one m16 tile) computes
// one Philox per lane per block, and output word t feeds n8 tile t, byte e element e: no shuffles.
// Both families' fragments (mma.sync C, and wgmma's per-warp m16 slices) have this layout.
#pragma once

#include <cstdint>

#include "flashsdpa/params.h"

namespace flashsdpa {

// Philox4x32 with 7 rounds (FlashAttention-2's count: 6 rounds with key bumps, then one more).
// mul.wide gives hi and lo of each 32 x 32 product in one IMAD.WIDE.
__device__ __forceinline__ uint4 philox4x32_7(uint2 key, uint4 ctr) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;  // round multipliers
  constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;  // key schedule
#pragma unroll
  for (int r = 0; r < 7; ++r) {
    const uint64_t p0 = static_cast<uint64_t>(kM0) * ctr.x;
    const uint64_t p1 = static_cast<uint64_t>(kM1) * ctr.z;
    ctr = make_uint4(static_cast<uint32_t>(p1 >> 32) ^ ctr.y ^ key.x, static_cast<uint32_t>(p1),
                     static_cast<uint32_t>(p0 >> 32) ^ ctr.w ^ key.y, static_cast<uint32_t>(p0));
    key.x += kW0;
    key.y += kW1;
  }
  return ctr;
}

// One thread's dropout stream: the key and its counter's offset words, fixed for a (batch, head).
struct DropoutRng {
  uint2 key;
  uint32_t offset_lo, offset_hi;
  uint32_t threshold_plus1;

  // seed / offset resolved from the spec's values or device pointers (params.h).
  __device__ __forceinline__ static uint64_t seed_of(const DropoutSpec& d) {
    return d.seed_ptr != nullptr ? *d.seed_ptr : d.seed;
  }
  __device__ __forceinline__ static uint64_t offset_of(const DropoutSpec& d) {
    return (d.offset_ptr != nullptr ? *d.offset_ptr : 0ull) + d.offset;
  }

  DropoutRng() = default;
  __device__ __forceinline__ DropoutRng(const DropoutSpec& d, int batch, int head, int heads_q, int lane)
      : DropoutRng(seed_of(d), offset_of(d), d.threshold_plus1, batch, head, heads_q, lane) {}
  // From a seed and offset resolved once (a kernel that changes heads every step, the sm90
  // backward, reads the spec's device pointers once instead of once per step).
  __device__ __forceinline__ DropoutRng(uint64_t seed, uint64_t offset0, uint32_t threshold_plus1_, int batch, int head,
                                        int heads_q, int lane) {
    const uint64_t offset = offset0 + static_cast<uint64_t>(batch * heads_q + head) * 32u + lane;
    key = make_uint2(static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
    offset_lo = static_cast<uint32_t>(offset);
    offset_hi = static_cast<uint32_t>(offset >> 32);
    threshold_plus1 = threshold_plus1_;
  }

  // The lane's 16 random bytes of the 16 x 32 block (row16, col32) of its (batch, head).
  __device__ __forceinline__ uint4 bits(uint32_t row16, uint32_t col32) const {
    return philox4x32_7(key, make_uint4(offset_lo, offset_hi, row16, col32));
  }

  __device__ __forceinline__ bool keep(uint32_t word, int e) const { return ((word >> (8 * e)) & 0xffu) < threshold_plus1; }
};

// Calls f(mt, nt, word) for every n8 tile of a warp's C fragments acc[kMT][kNT][4] with the word
// of random bytes of its 4 elements (byte e: element e). The fragments are m16 tiles at sequence
// rows row0 + 16 * mt (row0 a multiple of 16) and n8 tiles at sequence columns col0 + 8 * nt:
// with kNT % 4 == 0, col0 must be a multiple of 32 (one Philox per 4 n8 tiles); with kNT == 2 a
// multiple of 16 (one Philox per 2 n8 tiles, half of its bytes used: the backward's small tile).
template <int kMT, int kNT, typename F>
__device__ __forceinline__ void for_each_dropout_word(const DropoutRng& rng, int row0, int col0, F&& f) {
  static_assert(kNT % 4 == 0 || kNT == 2, "n8 tiles come in 32-column blocks, or one 16-column half");
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt) {
    const uint32_t row16 = static_cast<uint32_t>(row0 / 16 + mt);
    if constexpr (kNT % 4 == 0) {
#pragma unroll
      for (int nt = 0; nt < kNT; nt += 4) {
        const uint4 r = rng.bits(row16, static_cast<uint32_t>((col0 + nt * 8) / 32));
        f(mt, nt, r.x);
        f(mt, nt + 1, r.y);
        f(mt, nt + 2, r.z);
        f(mt, nt + 3, r.w);
      }
    } else {
      const uint4 r = rng.bits(row16, static_cast<uint32_t>(col0 / 32));
      const bool upper = (col0 & 16) != 0;  // the block's second 16 columns: words 2, 3
      f(mt, 0, upper ? r.z : r.x);
      f(mt, 1, upper ? r.w : r.y);
    }
  }
}

// Zeroes the dropped elements of a warp's C fragments (the forward: P before P V; the 1 / keep
// scale is applied to O once at the end, as FlashAttention-2 does).
template <int kMT, int kNT>
__device__ __forceinline__ void apply_dropout(const DropoutRng& rng, float (&acc)[kMT][kNT][4], int row0, int col0) {
  for_each_dropout_word<kMT, kNT>(rng, row0, col0, [&](int mt, int nt, uint32_t word) {
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[mt][nt][e] = rng.keep(word, e) ? acc[mt][nt][e] : 0.f;
  });
}

// ---- The transposed layout: the sm90 backward's S^T = K Q^T ------------------------------------
// There keys are the wgmma M dimension: warp w of a consumer warpgroup holds 16 keys [k16, k16 + 16)
// (k16 % 16 == 0) x the step's queries [q0, q0 + 8 kNT) (q0 % 16 == 0) in the m16n8 C layout, lane
// L holding keys k16 + L / 4 + 8 h and queries q0 + 8 jt + 2 (L % 4) + c (element x = 2 h + c of
// n8 tile jt). Element (query i, key j) is FA2's byte 4 ((j % 32) / 8) + 2 ((i % 16) / 8) + j % 2
// of lane (i % 8) * 4 + (j % 8) / 2 of the 16-query x 32-key block (i / 16, j / 32). For this
// thread: i % 8 = 2 (L % 4) + c, j % 8 = L / 4 (so (j % 8) / 2 = L / 8, j % 2 = bit 2 of L),
// (j % 32) / 8 = 2 ((k16 / 16) % 2) + h, (i % 16) / 8 = jt % 2, i / 16 = q0 / 16 + jt / 2,
// j / 32 = k16 / 32. So the thread needs two streams, lanes L'(c) = (2 (L % 4) + c) * 4 + L / 8:
// per m16 query tile, of each stream's 16 bytes the 2 words of its key half (x, y for the block's
// first 16 keys, z, w for the second) and of each word bytes 2 (jt % 2) + (L / 4) % 2. Lanes L and
// L ^ 4 (the other key parity) need the same two streams and the other byte of each pair, so each
// computes one of them (c = (L / 4) % 2) and hands the partner its 4 bytes by one shuffle: half the
// Philox of computing both (tests/test_dropout.py emulates both ways lane by lane against
// reference_dropout's mask; docs/kernel_notes_dropout.md section 4 has the counts).

// The stream lane L'(c) of lane L in the transposed layout.
__host__ __device__ __forceinline__ constexpr int dropout_stream_lane_t(int lane, int c) {
  return (2 * (lane % 4) + c) * 4 + lane / 8;
}

// prmt selector gathering the bytes of key parity `kpar` from (word of key half h = 0, word of
// h = 1): result byte 2 h + t <- byte 2 t + kpar of word h (t = jt % 2).
__host__ __device__ __forceinline__ constexpr uint32_t dropout_prmt_t(int kpar) { return 0x6420u + 0x1111u * kpar; }

__device__ __forceinline__ uint32_t prmt_b32(uint32_t a, uint32_t b, uint32_t sel) {
  uint32_t r;
  asm("prmt.b32 %0, %1, %2, %3;\n" : "=r"(r) : "r"(a), "r"(b), "r"(sel));
  return r;
}

// The thread's dropout bytes of one step in the transposed layout: bytes[mt][c] holds, as byte
// 2 h + t, the byte of element x = 2 h + c of n8 tile jt = 2 mt + t. `rng` is the stream of lane
// dropout_stream_lane_t(lane, kShuffle ? (lane / 4) % 2 : 0); without kShuffle the thread computes
// the other stream too (lane + 4: offset + 4). Warp-uniform control flow required with kShuffle.
template <int kNT, bool kShuffle>
__device__ __forceinline__ void dropout_bytes_t(const DropoutRng& rng, int q0, int k16, int lane,
                                                uint32_t (&bytes)[kNT / 2][2]) {
  static_assert(kNT % 2 == 0, "m16 query tiles");
  const int kpar = (lane >> 2) & 1;
  const bool upper = (k16 & 16) != 0;  // the 32-key block's second 16 keys: words z, w
  const uint32_t col32 = static_cast<uint32_t>(k16 / 32);
#pragma unroll
  for (int mt = 0; mt < kNT / 2; ++mt) {
    const uint32_t row16 = static_cast<uint32_t>(q0 / 16 + mt);
    const uint4 r = rng.bits(row16, col32);
    const uint32_t w0 = upper ? r.z : r.x, w1 = upper ? r.w : r.y;
    if constexpr (kShuffle) {
      // This lane's stream is c = kpar; the partner (lane ^ 4, parity 1 - kpar) computed c = 1 - kpar.
      const uint32_t mine = prmt_b32(w0, w1, dropout_prmt_t(kpar));
      const uint32_t theirs = __shfl_xor_sync(0xffffffffu, prmt_b32(w0, w1, dropout_prmt_t(kpar ^ 1)), 4);
      bytes[mt][0] = kpar ? theirs : mine;
      bytes[mt][1] = kpar ? mine : theirs;
    } else {
      const uint32_t lo1 = rng.offset_lo + 4u;  // lane L'(1) = L'(0) + 4, with the 64-bit carry
      const uint32_t hi1 = rng.offset_hi + (lo1 < 4u ? 1u : 0u);
      const uint4 r1 = philox4x32_7(rng.key, make_uint4(lo1, hi1, row16, col32));
      bytes[mt][0] = prmt_b32(w0, w1, dropout_prmt_t(kpar));
      bytes[mt][1] = prmt_b32(upper ? r1.z : r1.x, upper ? r1.w : r1.y, dropout_prmt_t(kpar));
    }
  }
}

// The keep test on a byte moved to the top of its word: byte b of word w is kept when b <
// threshold_plus1 (1..256), i.e. b <= t with t = threshold_plus1 - 1 <= 255, i.e. (w << (24 - 8 k))
// <= (t << 24 | 0xffffff) as uint32: one shift and one compare per element (none for byte 3),
// where the byte extract of DropoutRng::keep costs a shift, a mask and a compare.
__host__ __device__ __forceinline__ constexpr uint32_t dropout_keep_bound(uint32_t threshold_plus1) {
  return ((threshold_plus1 - 1u) << 24) | 0xffffffu;
}

// Element (jt, x) of the transposed fragments: kept? `bound`: dropout_keep_bound of the threshold.
template <int kNT>
__device__ __forceinline__ bool dropout_keep_t(uint32_t bound, const uint32_t (&bytes)[kNT / 2][2], int jt, int x) {
  const int k = 2 * (x / 2) + jt % 2;  // the element's byte in bytes[jt / 2][x % 2]
  return (bytes[jt / 2][x % 2] << (24 - 8 * k)) <= bound;
}

// The forward's one thread that reports the call's (seed, offset) in PyTorch's rng state format.
__device__ __forceinline__ void write_rng_state(const DropoutSpec& d) {
  if (d.rng_state != nullptr) {
    d.rng_state[0] = DropoutRng::seed_of(d);
    d.rng_state[1] = DropoutRng::offset_of(d);
  }
}

}  // namespace flashsdpa
