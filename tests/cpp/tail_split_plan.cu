// tail_split_plan.cu: cuda/common/tile_scheduler.cuh's TailSplit (the sm90 forward's split tail)
// replayed on the host over a grid of (tiles, units, workers), walking each worker's range exactly
// as the forward's producer does (fwd_kernel_sm90.cuh: whole tiles round robin, then tail items
// tile by tile, a piece's slot 2w for the worker's first item and 2w + 1 after), and checking what
// the kernel relies on: every key block of every tile is computed exactly once; the whole tiles are
// whole rounds; every worker's share is at least half a tile (rounded down); a tile has at most 3
// pieces and a worker at most 3 items; the slot the producer gives a piece is TailSplit::slot; no two pieces
// share a slot; the merging piece's word (TailSplit::pieces) lists the tile's pieces' slots in worker order;
// the tickets (each piece adds its blocks) reach the tile's units exactly at its last piece.
// Built and run by tests/test_split_tail.py when nvcc is found; prints "ok <plans>" or the first
// failure and exits 1.
#include <cstdio>
#include <cstdlib>
#include <map>
#include <set>
#include <vector>

#include "common/tile_scheduler.cuh"

namespace fs = flashsdpa;

namespace {

int g_failures = 0;

void fail(const char* what, long tiles, int units, int workers, long a = -1, long b = -1) {
  if (g_failures++ < 5)
    std::printf("FAIL %s: tiles %ld units %d workers %d (%ld, %ld)\n", what, tiles, units, workers, a, b);
}

struct Piece {
  int worker, begin, end, slot;
};

void check(long tiles, int units, int workers) {
  const fs::TailSplit s = fs::make_tail_split(tiles, units, workers);
  const long expected_rem = tiles % workers;
  const long tail = 2 * expected_rem >= workers ? expected_rem : expected_rem + workers;
  const bool fits = tail * units * static_cast<long>(workers) + workers < (1L << 31);  // int32 arithmetic
  const bool should = workers >= 2 && workers <= 511 && units >= 2 && tiles > workers && expected_rem != 0 && fits;
  if (!s.enabled()) {
    if (should) fail("declined a plan it should make", tiles, units, workers);
    if (s.whole != tiles) fail("a declined plan must leave every tile whole", tiles, units, workers, s.whole);
    return;
  }
  if (!should) fail("made a plan it should decline", tiles, units, workers);
  if (s.whole % workers != 0) fail("whole tiles are not whole rounds", tiles, units, workers, s.whole);
  if (s.whole + s.tiles != tiles) fail("whole + tail != tiles", tiles, units, workers, s.whole, s.tiles);
  if (2 * s.tiles < workers || s.tiles >= 2 * workers) fail("tail outside [G/2, 2G)", tiles, units, workers, s.tiles);
  std::vector<int> covered(static_cast<size_t>(s.tiles) * units, 0);
  std::map<int, std::vector<Piece>> pieces;  // tail tile -> its pieces
  std::set<int> slots;
  for (int w = 0; w < workers; ++w) {
    const int begin = s.begin(w), end = s.begin(w + 1);
    if (2 * (end - begin) < units - 1) fail("a worker's share is under half a tile, rounded down", tiles, units, workers, w, end - begin);
    int items = 0;
    for (int x = begin, slot = 2 * w; x < end; slot |= 1) {
      const int tail = x / units, first = tail * units;
      const int stop = end < first + units ? end : first + units;
      for (int u = x; u < stop; ++u) ++covered[u];
      if (x > first || stop < first + units) {
        if (slot != s.slot(w, tail)) fail("producer slot != TailSplit::slot", tiles, units, workers, w, tail);
        if (!slots.insert(slot).second) fail("two pieces share a slot", tiles, units, workers, slot);
        pieces[tail].push_back(Piece{w, x - first, stop - first, slot});
      } else if (s.first_worker(tail) != w || s.last_worker(tail) != w) {
        fail("a whole tail tile with several workers", tiles, units, workers, w, tail);
      }
      ++items;
      x = stop;
    }
    if (items > 3) fail("a worker with more than 3 items", tiles, units, workers, w, items);
  }
  for (size_t u = 0; u < covered.size(); ++u) {
    if (covered[u] != 1) fail("a key block computed other than once", tiles, units, workers, long(u), covered[u]);
  }
  for (const auto& [tail, list] : pieces) {
    const int count = static_cast<int>(list.size());
    if (count < 2 || count > 3) fail("a split tile with under 2 or over 3 pieces", tiles, units, workers, tail, count);
    if (s.last_worker(tail) - s.first_worker(tail) + 1 != count)
      fail("first/last_worker disagree with the walk", tiles, units, workers, tail, count);
    int ticket = 0;
    for (int i = 0; i < count; ++i) {
      ticket += list[i].end - list[i].begin;
      if ((ticket == units) != (i == count - 1)) fail("ticket reaches units before the last piece", tiles, units, workers, tail, i);
    }
    // Whichever piece merges, the word lists the tile's pieces' slots in worker order.
    const uint32_t word = s.pieces(tail);
    if (fs::piece_count(word) != count) fail("pieces word's count", tiles, units, workers, tail, fs::piece_count(word));
    for (int i = 0; i < count; ++i) {
      if (fs::piece_slot(word, i) != list[i].slot) fail("pieces word's slots", tiles, units, workers, tail, i);
    }
  }
}

}  // namespace

int main() {
  long plans = 0;
  const int worker_counts[] = {2, 3, 7, 64, 78, 108, 114, 132, 148, 511, 512};
  const int unit_counts[] = {1, 2, 3, 4, 7, 8, 16, 64, 65, 128, 1024};
  for (int workers : worker_counts) {
    for (int units : unit_counts) {
      for (long tiles = 1; tiles <= 3L * workers + 3; ++tiles) {
        check(tiles, units, workers);
        ++plans;
      }
      for (long tiles : {2048L, 1024L, 2752L, 4096L, 100000L}) {
        check(tiles, units, workers);
        ++plans;
      }
    }
  }
  // Either side of the int32 bound make_tail_split guards: made below it, declined above (never wrapped).
  check((1L << 20) + 1, 1 << 14, 132);
  check((1L << 20) + 1, 1 << 17, 132);
  plans += 2;
  if (g_failures) {
    std::printf("%d failures\n", g_failures);
    return 1;
  }
  std::printf("ok %ld plans\n", plans);
  return 0;
}
