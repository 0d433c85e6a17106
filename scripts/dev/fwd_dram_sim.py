"""fwd_dram_sim.py: the sm90 forward's dynamic causal order with DRAM in the model (no GPU), for the
section size of short problems (session 48; kernel_notes_fwd_sm90.md, "Sections of a wave").

132 CTAs take tiles from the counter in order (sections of G (head, batch) pairs, longest tile
first within a section, pairs inner: PersistentTileScheduler's dynamic order). A tile of query block
b costs (b + 1 + OVERHEAD) key blocks of BLOCK cycles of compute and reads Q and writes O (QO bytes)
from / to DRAM, plus its pair's K / V blocks (KV bytes a pair, b + 1 of nb blocks) when it is the
first tile of its pair to start (later ones find them in L2). DRAM's BANDWIDTH bytes a cycle are
shared by water-filling among the running tiles, and a tile progresses at
min(1, its share / its need), its need being its bytes over its compute time. Prints the makespan
per section size. It is a fluid model (no latency, no L2 capacity): it put session 47's sections at
201.7k cycles for d128 S 512 causal, near the sweep's ~209k, and wave-sized sections at 173-177k
(-13%; measured -12%), but it also predicted -10% at 1k, where the measurement found nothing.

    python3 scripts/dev/fwd_dram_sim.py [query blocks] [pairs] [K / V bytes a pair]
"""

from __future__ import annotations

import sys
from collections.abc import Callable

from fwd_order_sim import CTAS, Tile, sectioned  # the dynamic order's sections, as the kernel walks them

BLOCK = 2860.0  # cycles a key block (d128, the long tiles' rate; session 37's timeline)
BANDWIDTH = 1714.0  # bytes a cycle: ~3 TB/s at ~1.75 GHz (H100)
OVERHEAD = 1.3  # a tile's boundary in key blocks (session 37: ~3,650 cycles)
QO = 64e3  # Q read and O written by a 128-row d128 tile, bytes



def makespan(nb: int, pairs: int, order: Callable[[int], Tile], kv: float, dt: float = 20.0) -> float:
    tiles = [order(i) for i in range(nb * pairs)]
    loaded: set[int] = set()
    nxt = 0

    def start() -> list[float]:
        nonlocal nxt
        pair, block = tiles[nxt]
        nxt += 1
        work = (block + 1 + OVERHEAD) * BLOCK
        need = QO + (kv * (block + 1) / nb if pair not in loaded else 0.0)
        loaded.add(pair)
        return [work, need / work]

    active = [start() for _ in range(min(CTAS, len(tiles)))]
    t = 0.0
    while active:
        by_need = sorted(range(len(active)), key=lambda i: active[i][1])
        left, alloc = BANDWIDTH, [0.0] * len(active)
        for k, i in enumerate(by_need):
            alloc[i] = min(active[i][1], left / (len(active) - k))
            left -= alloc[i]
        running = []
        for i, tile in enumerate(active):
            tile[0] -= dt * (1.0 if tile[1] == 0 else min(1.0, alloc[i] / tile[1]))
            if tile[0] > 0:
                running.append(tile)
            elif nxt < len(tiles):
                running.append(start())
        active = running
        t += dt
    return t


def main() -> None:
    nb = int(sys.argv[1]) if len(sys.argv) > 1 else 4
    pairs = int(sys.argv[2]) if len(sys.argv) > 2 else 512
    kv = float(sys.argv[3]) if len(sys.argv) > 3 else 256e3
    for group in sorted({pairs, 128, 2 * -(-CTAS // nb), -(-CTAS // nb), 16, 1}, reverse=True):
        print(f"section of {group:4d} pairs: makespan {makespan(nb, pairs, sectioned(nb, pairs, group), kv) / 1e3:8.1f}k cycles")


if __name__ == "__main__":
    main()
