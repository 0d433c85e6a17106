// bias_cells_lanes.cu: the bias summary kernel's per-lane logic (cuda/common/bias_cells_summary.cu's
// lane_byte: addressing, the vector / scalar choice, the row and key clamps, the ragged ends) run
// on the host for every (summary row, chunk, warp, lane) of a grid and combined as the kernel does
// (pair lanes, then warps), against a brute-force summary in float arithmetic (a cell is visible if
// some element is not -inf, nonzero if some element is not 0; NaN both). No GPU: the kernel's
// shuffles and shared memory are not exercised here (tests/gpu/test_bias_cells_gpu.py runs it).
// Built and run by tests/test_bias_cells.py when nvcc is found; prints "ok <cases>" or the first
// mismatch and exits 1.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "common/bias_cells_summary.cu"

namespace fs = flashsdpa;

namespace {

int64_t g_byte_counts[4] = {};  // how often each byte value was expected (the cases' coverage)

struct Case {
  int batch, heads, rows, keys;      // the bias's own sizes (rows 1 or seqlen_q, keys 1 or seqlen_k)
  int64_t sb, sh, sr, sk;            // its element strides (sk 0: a key dim expanded to seqlen_k)
  int seqlen_q, seqlen_k;
  int64_t offset;                    // elements from the buffer's 16-byte aligned start
};

float to_float(uint16_t bits, int dtype) {
  if (dtype == fs::BiasCellsParams::kFloat16) {
    __half_raw raw;
    raw.x = bits;
    return __half2float(__half(raw));
  }
  uint32_t w = uint32_t(bits) << 16;
  float f;
  std::memcpy(&f, &w, 4);
  return f;
}

// A random element of a block of one kind, as tests/gpu/test_bias_cells_gpu.py's fill: random,
// -inf, +-0, or a rare (1 in 2048) NaN / 0 / 1 in a block of -inf / -inf / 0.
float element(std::mt19937& rng, int kind) {
  std::uniform_real_distribution<float> u(0.f, 1.f);
  const bool rare = u(rng) < 1.f / 2048;
  switch (kind) {
    case 0: return std::normal_distribution<float>(0.f, 1.f)(rng);
    case 1: return -INFINITY;
    case 2: return u(rng) < 0.5f ? -0.f : 0.f;
    case 3: return rare ? NAN : -INFINITY;
    case 4: return rare ? 0.f : -INFINITY;
    default: return rare ? 1.f : 0.f;
  }
}

uint32_t bits_of(float x, int dtype) {
  uint32_t w;
  std::memcpy(&w, &x, 4);
  if (dtype == fs::BiasCellsParams::kFloat32) return w;
  if (dtype == fs::BiasCellsParams::kBFloat16) return std::isnan(x) ? 0x7FC0u : w >> 16;  // truncated: some bf16
  const __half_raw h = __float2half(x);
  return h.x;
}

template <typename T, bool kVector, int kWarps>
void emulate(const fs::BiasCellsParams& p, std::vector<uint8_t>& out) {
  const int chunks = p.row_cells / fs::kChunkCells;
  for (int64_t row = 0; row < int64_t(p.batch) * p.heads * p.cell_rows; ++row) {
    for (int chunk = 0; chunk < chunks; ++chunk) {
      uint32_t cells[fs::kChunkCells] = {};
      for (int warp = 0; warp < kWarps; ++warp)
        for (int lane = 0; lane < 32; ++lane) cells[lane / 2] |= fs::lane_byte<T, kVector, kWarps>(p, row, chunk, warp, lane);
      for (int c = 0; c < fs::kChunkCells; ++c) out[row * p.row_cells + chunk * fs::kChunkCells + c] = uint8_t(cells[c]);
    }
  }
}

template <typename T>
bool run_case(const Case& c, int dtype, std::mt19937& rng, int index) {
  // The buffer: every element any stride reaches, filled by kind blocks of the logical (b, h, r, k).
  const int64_t keys_read = c.sk == 0 ? 1 : c.keys;
  const int64_t span = c.offset + (c.batch - 1) * c.sb + (c.heads - 1) * c.sh + (c.rows - 1) * c.sr +
                       (keys_read - 1) * c.sk + 1;
  std::vector<T> storage(size_t(span) + 16 / sizeof(T));
  auto* base = reinterpret_cast<T*>((reinterpret_cast<uintptr_t>(storage.data()) + 15) / 16 * 16);
  std::vector<uint32_t> raw(size_t(span), 0);
  // Kinds per block of 32 rows x 8 keys; in 60% of the cells (64 x 16) one kind for the whole
  // cell, so that cells of every byte value occur.
  std::uniform_int_distribution<int> kinds(0, 5);
  std::uniform_real_distribution<float> u(0.f, 1.f);
  const int64_t cell_rows = (c.rows + 63) / 64, cell_keys = (keys_read + 15) / 16;
  std::vector<int> cell_kind(size_t(c.batch) * c.heads * cell_rows * cell_keys);
  for (int& k : cell_kind) k = u(rng) < 0.6f ? kinds(rng) : -1;
  for (int b = 0; b < c.batch; ++b)
    for (int h = 0; h < c.heads; ++h)
      for (int r0 = 0; r0 < c.rows; r0 += 32)
        for (int k0 = 0; k0 < keys_read; k0 += 8) {
          const int whole = cell_kind[((size_t(b) * c.heads + h) * cell_rows + r0 / 64) * cell_keys + k0 / 16];
          const int kind = whole >= 0 ? whole : kinds(rng);
          for (int r = r0; r < std::min(r0 + 32, c.rows); ++r)
            for (int k = k0; k < std::min<int64_t>(k0 + 8, keys_read); ++k)
              raw[c.offset + b * c.sb + h * c.sh + r * c.sr + k * c.sk] = bits_of(element(rng, kind), dtype);
        }
  for (int64_t i = 0; i < span; ++i) {
    if constexpr (sizeof(T) == 4) {
      std::memcpy(&base[i], &raw[i], 4);
    } else {
      const uint16_t v = uint16_t(raw[i]);
      std::memcpy(&base[i], &v, 2);
    }
  }
  auto value = [&](int b, int h, int r, int k) {
    const int64_t at = c.offset + b * c.sb + h * c.sh + r * c.sr + (c.keys == 1 ? 0 : k) * c.sk;
    if constexpr (sizeof(T) == 4) {
      float f;
      std::memcpy(&f, &raw[at], 4);
      return f;
    } else {
      return to_float(uint16_t(raw[at]), dtype);
    }
  };

  // The params as backend/src/api.cpp's bias_cells fills them.
  fs::BiasCellsParams p{};
  p.bias = base + c.offset;
  p.dtype = dtype;
  p.batch = c.batch, p.heads = c.heads, p.rows = c.rows, p.keys = c.keys;
  p.batch_stride = c.batch > 1 ? c.sb : 0;
  p.head_stride = c.heads > 1 ? c.sh : 0;
  p.row_stride = c.rows > 1 ? c.sr : 0;
  p.key_stride = c.keys > 1 ? c.sk : 0;
  p.seqlen_q = c.seqlen_q, p.seqlen_k = c.seqlen_k;
  p.cell_rows = c.rows == 1 ? 1 : (c.seqlen_q + 63) / 64;
  p.row_cells = int32_t((c.seqlen_k + 255) / 256 * 16);
  std::vector<uint8_t> got(size_t(c.batch) * c.heads * p.cell_rows * p.row_cells, 0xAB);
  const bool vector = fs::vector_loads<T>(p);
  if (c.rows == 1) {
    vector ? emulate<T, true, 1>(p, got) : emulate<T, false, 1>(p, got);
  } else {
    vector ? emulate<T, true, fs::kRowWarps>(p, got) : emulate<T, false, fs::kRowWarps>(p, got);
  }

  for (int b = 0; b < c.batch; ++b)
    for (int h = 0; h < c.heads; ++h)
      for (int qc = 0; qc < p.cell_rows; ++qc)
        for (int kc = 0; kc < p.row_cells; ++kc) {
          uint32_t want = 0;
          for (int r = qc * 64; r < std::min(qc * 64 + 64, c.rows); ++r)
            for (int k = kc * 16; k < std::min(kc * 16 + 16, c.seqlen_k); ++k) {
              const float x = value(b, h, r, k);
              want |= (x == -INFINITY ? 0u : 1u) | (x == 0.f ? 0u : 2u);
            }
          const uint8_t g = got[((size_t(b) * c.heads + h) * p.cell_rows + qc) * p.row_cells + kc];
          ++g_byte_counts[want];
          if (g != want) {
            std::printf("case %d dtype %d (%d, %d, %d, %d) strides (%lld, %lld, %lld, %lld) Sq %d Sk %d offset %lld "
                        "vector %d: cell (%d, %d, %d, %d) = %u, want %u\n",
                        index, dtype, c.batch, c.heads, c.rows, c.keys, (long long)c.sb, (long long)c.sh,
                        (long long)c.sr, (long long)c.sk, c.seqlen_q, c.seqlen_k, (long long)c.offset, int(vector), b,
                        h, qc, kc, unsigned(g), want);
            return false;
          }
        }
  return true;
}

}  // namespace

int main() {
  std::mt19937 rng(1234);
  std::vector<Case> cases;
  const int qs[] = {1, 7, 64, 65, 113};
  const int ks[] = {1, 15, 16, 17, 113, 1000};
  for (int sq : qs)
    for (int sk : ks) {
      const int64_t pad = (sk + 7) / 8 * 8;
      cases.push_back({2, 1, 1, sk, sk, sk, sk, 1, sq, sk, 0});                           // (B, 1, 1, S)
      cases.push_back({2, 3, sq, sk, 3 * sq * sk, sq * sk, sk, 1, sq, sk, 0});            // (B, H, S, S)
      cases.push_back({1, 1, sq, sk, 0, 0, sk, 1, sq, sk, 0});                            // (S, S)
      cases.push_back({2, 1, sq, sk, sq * pad, sq * pad, pad, 1, sq, sk, 0});             // rows padded to 8
      cases.push_back({2, 1, sq, sk, sq * pad + 3, sq * pad, pad, 1, sq, sk, 1});         // misaligned
      cases.push_back({2, 1, sq, sk, sq * sk, sq * sk, 1, sq, sq, sk, 0});                // transposed
      cases.push_back({2, 1, sq, sk, 2 * sq * sk, 2 * sq * sk, 2 * sk, 2, sq, sk, 0});    // key stride 2
      cases.push_back({2, 1, sq, 1, sq, sq, 1, 1, sq, sk, 0});                            // key dim size 1
      cases.push_back({2, 1, sq, sk, sq, sq, 1, 0, sq, sk, 0});                           // key dim expanded
      cases.push_back({1, 2, sq, sk, 0, sq * pad * 3, pad, 1, sq, sk, 0});                // every third head
    }
  cases.push_back({1, 2, 1023, 4096, 0, 1023 * 4096, 4096, 1, 1023, 4096, 0});          // several cell rows and chunks
  cases.push_back({3, 1, 1, 4096, 4096, 4096, 4096, 1, 1023, 4096, 0});
  int n = 0;
  for (const int dtype : {0, 1, 2}) {
    for (size_t i = 0; i < cases.size(); ++i) {
      const Case& c = cases[i];
      const bool ok = dtype == 0   ? run_case<__half>(c, dtype, rng, int(i))
                      : dtype == 1 ? run_case<__nv_bfloat16>(c, dtype, rng, int(i))
                                   : run_case<float>(c, dtype, rng, int(i));
      if (!ok) return 1;
      ++n;
    }
  }
  std::printf("ok %d cases; cells by byte 0/1/2/3: %lld %lld %lld %lld\n", n, (long long)g_byte_counts[0],
              (long long)g_byte_counts[1], (long long)g_byte_counts[2], (long long)g_byte_counts[3]);
  return 0;
}
