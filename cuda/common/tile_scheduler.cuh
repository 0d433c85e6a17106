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

// Stream-K over the tail of a persistent grid of equal tiles. With T tiles of U key blocks each on
// G workers (one CTA per SM), round robin takes ceil(T / G) rounds, and its last one runs T % G
// tiles while the other SMs idle: at 16k tokens x 2048 (d128: T = 2048 on 132 SMs) 16 rounds for
// 15.52 rounds of work, 3% of every d128 forward. So the last X tiles (the remainder, plus one full
// round when the remainder is under half a round, so that every worker's share is at least half a
// tile) are cut into G contiguous ranges of key blocks, equal to within one block: worker w takes
// tail units [begin(w), begin(w + 1)) of the X * U, tile by tile, after its (T - X) / G whole
// tiles. A tile whose blocks land on several workers is computed in pieces (one per worker, at
// most 3, as every share is >= floor(U / 2): tests/cpp/tail_split_plan.cu checks it) whose
// normalized outputs and LSEs the piece that finishes last merges (the forward's epilogue); a
// piece's partial lives in a slot of its worker's: 2w for the worker's first tail item, 2w + 1 for
// its last one.
// Host and device compute the same plan from (T, U, G); tiles = 0: no tail split. Its arithmetic is
// int32 (the producer thread that walks it runs on 24 registers): make_tail_split declines a plan
// whose products (units x workers x tiles) reach 2^31.
struct TailSplit {
  int whole;    // tiles [0, whole) run whole, round robin; a multiple of workers
  int tiles;    // the tail: tiles [whole, whole + tiles)
  int units;    // key blocks per tile
  int workers;  // the persistent grid

  __host__ __device__ __forceinline__ bool enabled() const { return tiles > 0; }
  __host__ __device__ __forceinline__ int total() const { return tiles * units; }
  // Worker w's first tail unit (w = workers: the end): equal shares, the remainder spread.
  __host__ __device__ __forceinline__ int begin(int w) const { return w * total() / workers; }
  // The worker whose range holds tail unit x: the largest w with begin(w) <= x.
  __host__ __device__ __forceinline__ int worker_of(int x) const { return ((x + 1) * workers - 1) / total(); }
  // The workers sharing tail tile tau, first to last (one: it runs whole).
  __host__ __device__ __forceinline__ int first_worker(int tau) const { return worker_of(tau * units); }
  __host__ __device__ __forceinline__ int last_worker(int tau) const { return worker_of((tau + 1) * units - 1); }
  // Worker w's partial slot for its piece of tail tile tau: a piece that starts the worker's range
  // is its first item (slot 2w), any other piece ends it (2w + 1).
  __host__ __device__ __forceinline__ int slot(int w, int tau) const {
    return 2 * w + (begin(w) >= tau * units ? 0 : 1);
  }
  // The slots of tail tile tau's pieces in one word, in worker order whichever piece merges them
  // (so the merged sum, hence every bit, is the same run to run): bits 0-9, 10-19, 20-29 (unused:
  // 0) and the number of pieces - 1 (30-31). Slots < 1024: make_tail_split takes <= 511 workers.
  __host__ __device__ __forceinline__ uint32_t pieces(int tau) const {
    const int first = first_worker(tau), last = last_worker(tau);
    uint32_t word = static_cast<uint32_t>(last - first) << 30;
    for (int k = first; k <= last; ++k) word |= static_cast<uint32_t>(slot(k, tau)) << (10 * (k - first));
    return word;
  }
};
// The fields of TailSplit::pieces' word.
__host__ __device__ __forceinline__ int piece_slot(uint32_t pieces, int i) {
  return static_cast<int>(pieces >> (10 * i)) & 1023;
}
__host__ __device__ __forceinline__ int piece_count(uint32_t pieces) { return static_cast<int>(pieces >> 30) + 1; }

__host__ __device__ inline TailSplit make_tail_split(int64_t num_tiles, int units, int workers) {
  TailSplit s{static_cast<int>(num_tiles), 0, units, workers};
  if (workers < 2 || workers > 511 || units < 2 || num_tiles <= workers) return s;
  const int rem = static_cast<int>(num_tiles % workers);
  if (rem == 0) return s;
  const int tiles = 2 * rem >= workers ? rem : rem + workers;
  if (int64_t(tiles) * units * workers + workers >= (int64_t(1) << 31)) return s;
  s.tiles = tiles;
  s.whole = static_cast<int>(num_tiles) - tiles;
  return s;
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
