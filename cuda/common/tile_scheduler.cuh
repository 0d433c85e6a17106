// tile_scheduler.cuh: the only place that reads blockIdx, and the interface every kernel family's
// launcher and kernels share. A scheduler hands a CTA its work tiles:
//
//   Scheduler sched{...};                       // built identically by the launcher and the kernel
//   grid = sched.grid_size();                   // host: the 1-D grid to launch
//   for (WorkTile t = sched.initial_tile(); t.valid(); t = sched.next_tile(t)) { ... }
//
// SingleTileScheduler gives each CTA one tile (next_tile ends the loop, and the compiler folds the
// loop away). A persistent scheduler (grid = SM count, next_tile strides by gridDim.x) or a split-KV
// scheduler (WorkTile::split in [0, num_splits), each split owning a slice of the key blocks, see
// split_range) is a new class with the same three members: no kernel body changes.
// A 1-D grid means batch x heads is never bound by gridDim.y/z's 65,535 limit.
#pragma once

#include <cstdint>

namespace flashsdpa {

struct WorkTile {
  int block;  // query block (forward) or key block (backward dK/dV)
  int head;   // query head (forward) or kv head (backward dK/dV)
  int batch;  // < 0: no tile (the end of the CTA's work)
  int split;  // split-KV index, 0 without splitting

  __device__ __forceinline__ bool valid() const { return batch >= 0; }
};

// The order in which tiles reach the GPU; both cover the same grid.
enum class TileOrder : int32_t {
  // Blocks vary slowest: at any moment the resident CTAs of one wave work on the same block index
  // of many heads. With causal masking the heaviest blocks launch first and the short ones fill
  // the tail of the last wave (reverse order = LPT-like).
  kBlockMajor = 0,
  // Heads (then batches) vary slowest and blocks fastest, last block first. The CTAs resident at
  // any moment cover the blocks of a few heads and share those heads' K and V in L2: at S = 8k,
  // D = 128 one head's K + V is 4 MB and two waves of 132 x 2 CTAs touch ~4 heads, where the
  // block-major order touches every head at once (128 MB for B = 2, H = 16: far past the 50 MB
  // L2, so K/V stream from HBM once per CTA). Query heads sharing a KV head (GQA) are adjacent.
  // The backward uses it over key blocks, where the shared, streamed tiles are the head's Q and
  // dO (d = 64, S = 8k: +5%; kernel_notes_bwd.md, v9).
  kHeadMajor = 1,
};

// The key blocks [begin, end) that split `split` of `num_splits` owns of [n_min, n_max): equal
// shares, the remainder to the first splits. For split-KV schedulers; one split owns everything.
struct BlockRange {
  int begin, end;
};
__host__ __device__ __forceinline__ BlockRange split_range(int n_min, int n_max, int split, int num_splits) {
  const int total = n_max > n_min ? n_max - n_min : 0;
  const int base = total / num_splits, extra = total % num_splits;
  const int begin = n_min + split * base + (split < extra ? split : extra);
  return {begin, begin + base + (split < extra ? 1 : 0)};
}

struct SingleTileScheduler {
  int num_blocks;
  int num_heads;
  int batch;
  TileOrder order;

  __host__ __device__ int64_t grid_size() const {
    return static_cast<int64_t>(num_blocks) * num_heads * batch;
  }

  __device__ __forceinline__ WorkTile initial_tile() const {
    const int64_t linear = blockIdx.x;
    WorkTile t;
    t.split = 0;
    if (order == TileOrder::kBlockMajor) {
      const int64_t per_block = static_cast<int64_t>(num_heads) * batch;
      t.block = num_blocks - 1 - static_cast<int>(linear / per_block);
      const int64_t rest = linear % per_block;
      t.head = static_cast<int>(rest % num_heads);
      t.batch = static_cast<int>(rest / num_heads);
    } else {
      const int64_t head_linear = linear / num_blocks;
      t.block = num_blocks - 1 - static_cast<int>(linear - head_linear * num_blocks);
      t.head = static_cast<int>(head_linear % num_heads);
      t.batch = static_cast<int>(head_linear / num_heads);
    }
    return t;
  }

  __device__ __forceinline__ WorkTile next_tile(const WorkTile&) const { return WorkTile{0, 0, -1, 0}; }
};

// The decode path's scheduler: one CTA per (packed query block, split, kv head, batch), query
// blocks fastest, then splits. The query blocks of one (kv head, split) read the same keys, so
// launching them adjacently makes every block after the first find its K/V in L2 (Sq 16 x GQA 8
// = 8 blocks of 16 packed rows: one HBM read, seven L2 reads); splits next so that one kv head's
// cache streams through the resident CTAs in order. WorkTile::head is the kv head here.
struct SplitKvScheduler {
  int num_blocks;  // packed query blocks: ceil(seqlen_q * heads_q / heads_kv / block_m)
  int num_splits;
  int num_heads;   // kv heads
  int batch;

  __host__ __device__ int64_t grid_size() const {
    return static_cast<int64_t>(num_blocks) * num_splits * num_heads * batch;
  }

  __device__ __forceinline__ WorkTile initial_tile() const {
    int64_t linear = blockIdx.x;
    WorkTile t;
    t.block = static_cast<int>(linear % num_blocks);
    linear /= num_blocks;
    t.split = static_cast<int>(linear % num_splits);
    linear /= num_splits;
    t.head = static_cast<int>(linear % num_heads);
    t.batch = static_cast<int>(linear / num_heads);
    return t;
  }

  __device__ __forceinline__ WorkTile next_tile(const WorkTile&) const { return WorkTile{0, 0, -1, 0}; }
};

}  // namespace flashsdpa
