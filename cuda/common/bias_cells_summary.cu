// bias_cells_summary.cu: the per-call summary of an additive bias (params.h's ScoreMods::bias_cells,
// read by common/bias_cells.cuh) in one launch. Python's ops_masks.bias_cells calls it through
// _C.bias_cells for CUDA biases; its torch reference (_bias_cells_torch) took 10-18 launches per
// call (aminmax over 16 keys, then over 64 rows, compares, casts, shift, or, pad): ~50-80 us of
// host time per call (PyTorch's ~5-8 us per op) and ~2-5 us of GPU time per launch.
//
// Work split: one CTA per (b, h, cell row, 256-key chunk). 256 keys = 16 cells = one 16-byte
// granule of the padded summary row (rows hold Kc16 = ceil(Sk / 256) * 16 cells), so every chunk is
// inside the row, and every byte of the output, padding cells included, is written by exactly one
// thread (no memset, no atomics). A warp covers the chunk, 8 keys a lane (16 bytes for 2-byte
// elements: one LDG.128; 32 bytes = two for float32): the warp reads 512 contiguous bytes per row
// (1 KB for float32). The CTA's 8 warps take rows w, w + 8, ... of the cell's 64 (8 rows a warp,
// their 8 loads issued back to back: rows past a ragged cell's last are clamped to it and keys past
// seqlen_k to its last, re-reading an element the OR already holds, so no load is predicated); a
// cell's two lanes OR through a shuffle, the 8 warps through 128 bytes of shared memory, and 16
// lanes store the chunk's 16 bytes. A broadcast query dim (key padding's (B, 1, 1, S)) has one
// row per cell row: one-warp CTAs. grid = (B Hb Qc, min(chunks, 65535)), CTAs looping over chunks
// past grid.y's limit (Sk > 16.7M).
//
// Numbers (bf16, sm_90a): a (B, 1, S, S) mask at B 8, S 2048 is 64 MB read once (2 bytes per
// element of the bias's own shape, each element once; no byte is read twice but for the clamps),
// 256 KB written, 256 x 8 = 2048 CTAs of 256 threads (64 registers: 4 resident per SM, ~4 waves
// over 132 SMs; 4 x 256 x 8 x 16 B = 128 KB of loads in flight per SM, 17 MB over the GPU, well
// past the ~4 MB that 4.8 TB/s x ~1 us of latency asks): ~15-20 us at 3.5-4 TB/s, against ~0.5 ms
// of forward at 16 heads, D 128 (the 16x broadcast rule of ops_masks.summary_pays). Key padding
// (B, 1, 1, S) at B S = 16k: 32 KB read, B x S / 256 = 64 one-warp CTAs: one launch's latency
// (~2-3 us on the GPU), where the torch reference took 10 launches.
//
// Byte semantics (as the torch reference): bit 0 (visible) iff some element of the cell is not
// -inf, bit 1 (nonzero) iff some element is not +-0; NaN counts as both. Tested on the raw bits:
// not -inf = bits != the -inf pattern, nonzero = (bits & ~sign) != 0 (NaN's exponent is all ones).
// Keys >= seqlen_k and rows >= the bias's rows are never read and count as neither.
//
// Vector path (kVector): unit key stride, a 16-byte aligned pointer and batch / head / row strides
// that are multiples of 16 bytes (vector_loads decides); a lane whose 8 keys cross seqlen_k reads
// them one by one. Otherwise (a strided or broadcast key dim, an odd row stride: a contiguous
// (S, S) mask of odd S) every element is a scalar load, same lanes and rows: the warp still reads
// each row's 512 bytes of keys once, in 8 instructions instead of one.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "flashsdpa/kernels.h"
#include "flashsdpa/params.h"

namespace flashsdpa {
namespace {

constexpr int kCellRows = 64;   // queries per cell (BiasCells::kRows)
constexpr int kCellKeys = 16;   // keys per cell (BiasCells::kKeys)
constexpr int kLaneKeys = 8;    // keys per lane: half a cell
constexpr int kChunkKeys = 32 * kLaneKeys;  // a warp's keys: 256
constexpr int kChunkCells = kChunkKeys / kCellKeys;  // 16: the summary row's padding granule
constexpr int kRowWarps = 8;    // warps of a CTA over the rows of a cell (when the query dim has rows)
constexpr int kMaxGridY = 65535;
static_assert(kCellRows % kRowWarps == 0, "every warp takes the same number of rows of a full cell");
static_assert(kChunkCells == 16, "a chunk is one 16-byte granule of the padded summary row");

// The element types by their bits: the -inf pattern and the mask of everything but the sign, and
// both repeated over a 32-bit word (two 2-byte elements, or one float).
template <typename T>
struct ElementBits;
template <>
struct ElementBits<__nv_bfloat16> {
  using Bits = uint16_t;
  static constexpr uint32_t kNegInf = 0xFF80u, kMagnitude = 0x7FFFu;
  static constexpr uint32_t kNegInfWord = 0xFF80FF80u, kMagnitudeWord = 0x7FFF7FFFu;
};
template <>
struct ElementBits<__half> {
  using Bits = uint16_t;
  static constexpr uint32_t kNegInf = 0xFC00u, kMagnitude = 0x7FFFu;
  static constexpr uint32_t kNegInfWord = 0xFC00FC00u, kMagnitudeWord = 0x7FFF7FFFu;
};
template <>
struct ElementBits<float> {
  using Bits = uint32_t;
  static constexpr uint32_t kNegInf = 0xFF800000u, kMagnitude = 0x7FFFFFFFu;
  static constexpr uint32_t kNegInfWord = kNegInf, kMagnitudeWord = kMagnitude;
};

// A lane's running OR over its elements: `visible` some element is not -inf, `nonzero` the OR of
// the elements' magnitude bits.
struct Flags {
  uint32_t visible = 0, nonzero = 0;

  FLASHSDPA_HOST_DEVICE void word(uint32_t w, uint32_t neg_inf_word, uint32_t magnitude_word) {
    visible |= static_cast<uint32_t>(w != neg_inf_word);
    nonzero |= w & magnitude_word;
  }
  FLASHSDPA_HOST_DEVICE uint32_t byte() const {
    return (visible != 0 ? uint32_t(BiasCellsParams::kVisible) : 0u) |
           (nonzero != 0 ? uint32_t(BiasCellsParams::kNonZero) : 0u);
  }
};

// A read-only load: through the non-coherent path on the device, plain on the host (the lane
// logic below also runs on the host: tests/cpp/bias_cells_lanes.cu replays it on CPU).
template <typename V>
FLASHSDPA_HOST_DEVICE V load(const V* at) {
#ifdef __CUDA_ARCH__
  return __ldg(at);
#else
  return *at;
#endif
}

FLASHSDPA_HOST_DEVICE int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

// The lane's kLaneKeys keys from `key0` (< seqlen_k) over the warp's rows of the cell. OR is
// idempotent, so reading a valid element twice changes nothing: rows past the cell's last are
// clamped to it and keys past seqlen_k to seqlen_k - 1 (the lane's own half cell, as key0 is a
// multiple of 8 below seqlen_k). No load is predicated or branched around: all of them (8 x 16 B
// vectors, or 64 scalars) issue back to back.
template <typename T, bool kVector, int kRows>
FLASHSDPA_HOST_DEVICE void read_cell(const T* plane, int64_t row_stride, int64_t key_stride, int first_row, int row_step,
                                     int rows, int64_t key0, int64_t seqlen_k, Flags& f) {
  using E = ElementBits<T>;
  using Bits = typename E::Bits;
  if (kVector && key0 + kLaneKeys <= seqlen_k) {
    constexpr int kVectors = kLaneKeys * int(sizeof(T)) / 16;  // 1 for 2-byte elements, 2 for float
    uint4 v[kRows][kVectors];
#pragma unroll
    for (int i = 0; i < kRows; ++i) {
      const int64_t r = min64(first_row + i * row_step, rows - 1);
      const uint4* at = reinterpret_cast<const uint4*>(plane + r * row_stride + key0);
#pragma unroll
      for (int j = 0; j < kVectors; ++j) v[i][j] = load(at + j);
    }
#pragma unroll
    for (int i = 0; i < kRows; ++i) {
#pragma unroll
      for (int j = 0; j < kVectors; ++j) {
        f.word(v[i][j].x, E::kNegInfWord, E::kMagnitudeWord);
        f.word(v[i][j].y, E::kNegInfWord, E::kMagnitudeWord);
        f.word(v[i][j].z, E::kNegInfWord, E::kMagnitudeWord);
        f.word(v[i][j].w, E::kNegInfWord, E::kMagnitudeWord);
      }
    }
    return;
  }
#pragma unroll
  for (int i = 0; i < kRows; ++i) {
    const Bits* row = reinterpret_cast<const Bits*>(plane + min64(first_row + i * row_step, rows - 1) * row_stride);
    Bits b[kLaneKeys];
#pragma unroll
    for (int j = 0; j < kLaneKeys; ++j) b[j] = load(row + min64(key0 + j, seqlen_k - 1) * key_stride);
#pragma unroll
    for (int j = 0; j < kLaneKeys; ++j) f.word(uint32_t(b[j]), E::kNegInf, E::kMagnitude);
  }
}

// The byte of one lane of one warp (kWarps of them over the cell's rows: warp w takes rows w,
// w + kWarps, ...) for one 256-key chunk of summary row `summary_row` = (b * heads + h) *
// cell_rows + qc, before the OR with its pair lane (lane ^ 1: the other half of its cell) and the
// other warps. The kernel's per-thread work; tests/cpp/bias_cells_lanes.cu calls it on the host.
template <typename T, bool kVector, int kWarps>
FLASHSDPA_HOST_DEVICE uint32_t lane_byte(const BiasCellsParams& p, int64_t summary_row, int chunk, int warp, int lane) {
  const int qc = int(summary_row % p.cell_rows);
  const int64_t bh = summary_row / p.cell_rows;
  const int h = int(bh % p.heads), b = int(bh / p.heads);
  const int row0 = qc * kCellRows;
  const int rows = kWarps == 1 ? 1 : int(min64(kCellRows, p.rows - row0));  // one warp: the bias has one row
  const T* plane = static_cast<const T*>(p.bias) + b * p.batch_stride + h * p.head_stride + row0 * p.row_stride;
  const int64_t key0 = int64_t(chunk) * kChunkKeys + lane * kLaneKeys;
  Flags f;
  // A warp whose first row is past a ragged last cell row (rows < 8) reads nothing.
  if (key0 < p.seqlen_k && warp < rows)
    read_cell<T, kVector, kWarps == 1 ? 1 : kCellRows / kWarps>(
        plane, p.row_stride, p.key_stride, warp, kWarps, rows, key0, p.seqlen_k, f);
  return f.byte();
}

// blockIdx.x: the (b, h, cell row) row of the summary, (b * heads + h) * cell_rows + qc;
// blockIdx.y (+ k gridDim.y): the 256-key chunk; threadIdx.x: the lane (8 keys), threadIdx.y: the
// warp. kWarps: kRowWarps, or 1 when the bias has one row (a broadcast query dim: one-warp CTAs).
template <typename T, bool kVector, int kWarps>
__global__ void __launch_bounds__(32 * kWarps) flashsdpa_bias_cells_kernel(const __grid_constant__ BiasCellsParams p) {
  __shared__ uint8_t warp_cells[kWarps][kChunkCells];
  const int lane = threadIdx.x, warp = kWarps == 1 ? 0 : threadIdx.y;
  const int64_t summary_row = blockIdx.x;
  uint8_t* out = p.cells + summary_row * p.row_cells;
  const int chunks = p.row_cells / kChunkCells;
  for (int chunk = blockIdx.y; chunk < chunks; chunk += gridDim.y) {
    uint32_t cell = lane_byte<T, kVector, kWarps>(p, summary_row, chunk, warp, lane);
    cell |= __shfl_xor_sync(0xffffffffu, cell, 1);  // lanes 2c, 2c + 1: cell c of the chunk
    if (kWarps == 1) {
      if ((lane & 1) == 0) out[chunk * kChunkCells + lane / 2] = uint8_t(cell);
      continue;
    }
    if ((lane & 1) == 0) warp_cells[warp][lane / 2] = uint8_t(cell);
    __syncthreads();
    if (warp == 0 && lane < kChunkCells) {
      uint32_t acc = 0;
#pragma unroll
      for (int w = 0; w < kWarps; ++w) acc |= warp_cells[w][lane];
      out[chunk * kChunkCells + lane] = uint8_t(acc);
    }
    __syncthreads();  // warp_cells is written again by the next chunk
  }
}

template <typename T, bool kVector>
cudaError_t launch(const BiasCellsParams& p, cudaStream_t stream) {
  const int chunks = p.row_cells / kChunkCells;
  const dim3 grid(static_cast<unsigned>(int64_t(p.batch) * p.heads * p.cell_rows),
                  static_cast<unsigned>(chunks < kMaxGridY ? chunks : kMaxGridY));
  if (p.rows == 1) {
    flashsdpa_bias_cells_kernel<T, kVector, 1><<<grid, dim3(32, 1), 0, stream>>>(p);
  } else {
    flashsdpa_bias_cells_kernel<T, kVector, kRowWarps><<<grid, dim3(32, kRowWarps), 0, stream>>>(p);
  }
  return cudaGetLastError();
}

// 16-byte loads: unit key stride, the pointer and every stride of a dim with more than one
// element a multiple of 16 bytes (the host zeroes the strides of size-1 dims).
template <typename T>
bool vector_loads(const BiasCellsParams& p) {
  constexpr int64_t kVectorElements = 16 / int64_t(sizeof(T));
  return p.key_stride == 1 && reinterpret_cast<uintptr_t>(p.bias) % 16 == 0 && p.batch_stride % kVectorElements == 0 &&
         p.head_stride % kVectorElements == 0 && p.row_stride % kVectorElements == 0;
}

template <typename T>
cudaError_t launch_for(const BiasCellsParams& p, cudaStream_t stream) {
  return vector_loads<T>(p) ? launch<T, true>(p, stream) : launch<T, false>(p, stream);
}

}  // namespace

int run_bias_cells(const BiasCellsParams& params, void* stream) {
  const auto s = static_cast<cudaStream_t>(stream);
  switch (params.dtype) {
    case BiasCellsParams::kFloat16: return static_cast<int>(launch_for<__half>(params, s));
    case BiasCellsParams::kBFloat16: return static_cast<int>(launch_for<__nv_bfloat16>(params, s));
    case BiasCellsParams::kFloat32: return static_cast<int>(launch_for<float>(params, s));
    default: return static_cast<int>(cudaErrorInvalidValue);
  }
}

}  // namespace flashsdpa
