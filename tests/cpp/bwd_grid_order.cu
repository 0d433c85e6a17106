// bwd_grid_order.cu: the sm90 backward's item order (bwd_kernel_sm90.cuh's BwdGridOrder) replayed
// on the host over a grid of problems (key blocks, KV heads, batch, GQA group, masks, lengths, head
// dims), checking what the grid (one CTA per item, launched in index order) relies on:
// - decode is a bijection from [0, items) onto (key block, KV head, batch), up to the launcher's
//   INT_MAX items;
// - within one (KV head, batch), a key block's dQ turn (BwdGridOrder::turn over the key blocks
//   that visit a query block) grows with its item index: the key block an add waits for in
//   deterministic mode (turn - 1) and the first store's (turn 0) come earlier in index order, so
//   a running CTA has taken them, which is the grid's argument against deadlock;
// - turns over [n_min, n_max) are 0 .. n_max - n_min - 1, each once;
// all of it in the default mode and in deterministic mode (whose dense calls launch grouped over a
// wave's heads: num_sms 132, and 1, where a group is one head), and for the plain kernel's wave
// groups of masked calls with few key blocks (`waves`: Sk <= 2048 here).
// Built and run by tests/test_bwd_grid_order.py when nvcc is found; prints "ok <problems>" or the
// first failures and exits 1.
#include <cstdint>
#include <cstdio>
#include <vector>

#include "sm90/bwd_kernel_sm90.cuh"

namespace fs = flashsdpa;

namespace {

int g_failures = 0;

void fail(const char* what, const fs::AttnBwdParams& p, long a = -1, long b = -1) {
  if (g_failures++ < 5)
    std::printf("FAIL %s: Sk %d Sq %d Hkv %d Hq %d B %d d %d mask (%d, %d, %d) (%ld, %ld)\n", what, p.seqlen_k,
                p.seqlen_q, p.heads_kv, p.heads_q, p.batch, p.head_dim_qk, p.mask.window_left, p.mask.window_right,
                static_cast<int>(p.mask.align), a, b);
}

constexpr int kBlockN = 128;

void check(const fs::AttnBwdParams& p, bool waves) {
  const fs::bwd_sm90::BwdGridOrder order(p, kBlockN, true, waves);
  const int n_blocks = order.n_blocks, pairs = order.heads_batches;
  const long items = static_cast<long>(n_blocks) * pairs;
  std::vector<long> index_of(items, -1);  // by (pair, n_block)
  for (long t = 0; t < items; ++t) {
    int n64 = 0, h64 = 0, b64 = 0;
    order.decode(static_cast<int64_t>(t), n64, h64, b64);
    if (n64 < 0 || n64 >= n_blocks || h64 < 0 || h64 >= p.heads_kv || b64 < 0 || b64 >= p.batch) {
      fail("decode out of range", p, t);
      continue;
    }
    long& slot = index_of[(static_cast<long>(b64) * p.heads_kv + h64) * n_blocks + n64];
    if (slot >= 0) fail("two items decode to one key block", p, t, slot);
    slot = t;
  }
  // Every visiting range [n_min, n_max) of consecutive key blocks: turn order = index order.
  for (int pair = 0; pair < pairs; ++pair) {
    for (int n_min = 0; n_min < n_blocks; ++n_min) {
      for (int n_max = n_min + 1; n_max <= n_blocks; ++n_max) {
        std::vector<int> seen(n_max - n_min, 0);
        for (int n = n_min; n < n_max; ++n) {
          const int turn = order.turn(n, n_min, n_max);
          if (turn < 0 || turn >= n_max - n_min || seen[turn]++) fail("turns not a permutation", p, n, turn);
          for (int m = n + 1; m < n_max; ++m) {
            const bool earlier_index = index_of[static_cast<long>(pair) * n_blocks + n] <
                                       index_of[static_cast<long>(pair) * n_blocks + m];
            const bool earlier_turn = turn < order.turn(m, n_min, n_max);
            if (earlier_index != earlier_turn) fail("turn order is not index order", p, n, m);
          }
        }
      }
    }
  }
}

// Grids near the launcher's INT_MAX items: sampled indices, the last ones included, decode in range
// and distinct (the 2048 last ones: no two on one key block).
void check_large(int seqlen_k, int heads_kv, int batch, const fs::MaskSpec& mask, bool deterministic) {
  fs::AttnBwdParams p{};
  p.deterministic = deterministic;
  p.num_sms = 132;
  p.seqlen_k = seqlen_k;
  p.seqlen_q = 4096;
  p.heads_kv = p.heads_q = heads_kv;
  p.batch = batch;
  p.head_dim_qk = p.head_dim_v = 128;
  p.mask = mask;
  const fs::bwd_sm90::BwdGridOrder order(p, kBlockN, true);
  const long items = static_cast<long>(order.n_blocks) * order.heads_batches;
  if (items > 0x7fffffffL) {
    fail("test shape past INT_MAX items", p, items);
    return;
  }
  std::vector<long> last;  // (pair, n_block) of the last 2048 items
  for (long k = 0; k < 4096; ++k) {
    const long t = k < 2048 ? items - 1 - k : (k * 1048573L) % items;
    int n = 0, h = 0, b = 0;
    order.decode(static_cast<int64_t>(t), n, h, b);
    if (n < 0 || n >= order.n_blocks || h < 0 || h >= p.heads_kv || b < 0 || b >= p.batch) {
      fail("decode out of range (large)", p, t);
    } else if (k < 2048) {
      const long key = (static_cast<long>(b) * p.heads_kv + h) * order.n_blocks + n;
      for (long seen : last)
        if (seen == key) fail("two items decode to one key block (large)", p, t);
      last.push_back(key);
    }
  }
}

}  // namespace

int main() {
  const fs::MaskSpec masks[] = {
      {-1, -1, fs::MaskAlign::kTopLeft},  {-1, 0, fs::MaskAlign::kTopLeft}, {-1, 0, fs::MaskAlign::kBottomRight},
      {100, 0, fs::MaskAlign::kTopLeft},  {100, -1, fs::MaskAlign::kTopLeft}, {-1, 50, fs::MaskAlign::kBottomRight},
  };
  long problems = 0;
  for (int seqlen_k : {1, 127, 128, 129, 1000, 2048, 4100})
    for (int seqlen_q : {1, 300, 2048, 65536})
      for (int heads_kv : {1, 3, 8})
        for (int group : {1, 4})
          for (int batch : {1, 2, 5})
            for (int d : {64, 128})
              for (const fs::MaskSpec& mask : masks)
                for (int det : {0, 1})
                  for (bool waves : {false, true}) {
                  fs::AttnBwdParams p{};
                  p.deterministic = det != 0;
                  p.num_sms = seqlen_q == 300 ? 1 : 132;
                  p.seqlen_k = seqlen_k;
                  p.seqlen_q = seqlen_q;
                  p.heads_kv = heads_kv;
                  p.heads_q = heads_kv * group;
                  p.batch = batch;
                  p.head_dim_qk = p.head_dim_v = d;
                  p.mask = mask;
                  check(p, waves);
                  ++problems;
                }
  // 8192 key blocks x 262143 (KV head, batch) pairs: 2,147,475,456 items, 8,191 below INT_MAX.
  for (const fs::MaskSpec& mask : masks)
    for (bool det : {false, true}) check_large(8192 * kBlockN, 7, 37449, mask, det);
  check_large(1, 1, 0x7fffffff, masks[0], false);
  check_large(1, 1, 0x7fffffff, masks[0], true);
  if (g_failures) {
    std::printf("%d failures\n", g_failures);
    return 1;
  }
  std::printf("ok %ld problems\n", problems);
  return 0;
}
