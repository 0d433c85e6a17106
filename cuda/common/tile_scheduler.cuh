// tile_scheduler.cuh: the only place that reads blockIdx. Maps a 1-D grid onto (block, head, batch)
// work tiles, so batch x heads is never bound by gridDim.y/z's 65,535 limit, and the mainloops stay
// oblivious to the launch order (a persistent or LPT scheduler replaces this without touching them).
#pragma once

#include <cstdint>

namespace flashsdpa {

struct WorkTile {
  int block;  // query block (forward) or key block (backward dK/dV)
  int head;   // query head (forward) or kv head (backward dK/dV)
  int batch;
};

// Blocks vary slowest so that, at any moment, the resident CTAs of one wave work on the same
// block index of many heads: with causal masking the heaviest blocks (largest index, most keys)
// launch first, and the short ones fill the tail of the last wave (reverse order = LPT-like).
struct LinearTileScheduler {
  int num_blocks;
  int num_heads;
  int batch;

  __host__ __device__ int64_t grid_size() const {
    return static_cast<int64_t>(num_blocks) * num_heads * batch;
  }

  __device__ __forceinline__ WorkTile tile() const {
    const int64_t linear = blockIdx.x;
    const int64_t per_block = static_cast<int64_t>(num_heads) * batch;
    WorkTile t;
    t.block = num_blocks - 1 - static_cast<int>(linear / per_block);
    const int64_t rest = linear % per_block;
    t.head = static_cast<int>(rest % num_heads);
    t.batch = static_cast<int>(rest / num_heads);
    return t;
  }
};

// Heads (then batches) vary slowest and query blocks fastest, last block first. The CTAs resident
// at any moment then cover the blocks of a few heads and share those heads' K and V in L2: at
// S = 8k, D = 128 one head's K + V is 4 MB and two waves of 132 x 2 CTAs touch ~4 heads, where
// the block-major order touches every head at once (128 MB for B = 2, H = 16: far past the 50 MB
// L2, so K/V stream from HBM once per CTA). Within a head the heaviest causal blocks still start
// first; the light ones of the last heads fill the tail. Query heads sharing a KV head (GQA) are
// adjacent. The non-causal backward uses the same order over key blocks, where the shared, streamed
// tiles are the head's Q and dO (d = 64, S = 8k: +5%; kernel_notes_bwd.md, v9).
struct HeadMajorTileScheduler {
  int num_blocks;
  int num_heads;
  int batch;

  __host__ __device__ int64_t grid_size() const {
    return static_cast<int64_t>(num_blocks) * num_heads * batch;
  }

  __device__ __forceinline__ WorkTile tile() const {
    const int64_t linear = blockIdx.x;
    const int64_t head_linear = linear / num_blocks;
    WorkTile t;
    t.block = num_blocks - 1 - static_cast<int>(linear - head_linear * num_blocks);
    t.head = static_cast<int>(head_linear % num_heads);
    t.batch = static_cast<int>(head_linear / num_heads);
    return t;
  }
};

}  // namespace flashsdpa
