"""fwd_order_sim.py: the sm90 forward's causal tile orders simulated (no GPU): 132 CTAs, a tile of
query block b costing b + 1 key blocks plus 1.5 of fixed cost; per order the makespan, the balance
(mean CTA time / makespan) and how many (head, batch) pairs have a tile in flight (their K/V is the
L2 working set). Orders: static block-major with snake rounds (today's for > 16 query blocks),
static pair-major, static bands of G pairs, and the dynamic counter order with sections of G pairs
(longest first within; today's for <= 16 query blocks). kernel_notes_fwd_sm90.md, "The causal order
and L2" (session 18).

    python3 scripts/dev/fwd_order_sim.py
"""

from __future__ import annotations

import heapq
import statistics
from collections.abc import Callable

CTAS = 132
OVERHEAD = 1.5  # a tile's fixed cost (Q load, epilogue) in key blocks

Tile = tuple[int, int]  # (pair, query block)
Event = tuple[float, float, int]  # (start, end, pair)


def sectioned(nb: int, pairs: int, group: int) -> Callable[[int], Tile]:
    """Linear index -> tile: sections of `group` pairs, each block-major longest first, pairs inner
    (group = pairs: today's static block-major order; group = 1: pair-major)."""

    def tile(linear: int) -> Tile:
        per = group * nb
        first = (linear // per) * group
        size = min(group, pairs - first)
        within = linear % per
        return first + within % size, nb - 1 - within // size

    return tile


def static_snake(nb: int, pairs: int, order: Callable[[int], Tile]) -> list[Event]:
    """CTA c takes position c of even rounds and CTAS - 1 - c of odd ones."""
    events: list[Event] = []
    for c in range(CTAS):
        t, r, linear = 0.0, 0, c
        while linear < nb * pairs:
            pair, block = order(linear)
            events.append((t, t + block + 1 + OVERHEAD, pair))
            t = events[-1][1]
            r += 1
            linear = r * CTAS + (CTAS - 1 - c if r % 2 else c)
    return events


def dynamic(nb: int, pairs: int, order: Callable[[int], Tile]) -> list[Event]:
    """Each CTA takes the next tile of the order when it finishes one (the tile counter)."""
    free = [(0.0, c) for c in range(CTAS)]
    events: list[Event] = []
    for linear in range(nb * pairs):
        t, c = heapq.heappop(free)
        pair, block = order(linear)
        events.append((t, t + block + 1 + OVERHEAD, pair))
        heapq.heappush(free, (events[-1][1], c))
    return events


def summary(events: list[Event]) -> tuple[float, float, float, int]:
    end = max(e[1] for e in events)
    busy = sum(e[1] - e[0] for e in events)
    in_flight = [len({p for a, b, p in events if a <= end * k / 50 < b}) for k in range(1, 50)]
    return end, busy / CTAS / end, statistics.median(in_flight), max(in_flight)


def main() -> None:
    # (seqlen, 128-row tiles: d128; 192-row: d64), B * S = 16k tokens, H * D = 2048
    for s, block_m in ((4096, 128), (8192, 128), (16384, 128), (8192, 192), (16384, 192)):
        nb = (s + block_m - 1) // block_m
        pairs = (16384 // s) * (2048 // (128 if block_m == 128 else 64))
        rows = [("static block-major", static_snake(nb, pairs, sectioned(nb, pairs, pairs))),
                ("static pair-major", static_snake(nb, pairs, sectioned(nb, pairs, 1)))]
        rows += [(f"static bands of {g}", static_snake(nb, pairs, sectioned(nb, pairs, g))) for g in (2, 4, 8)]
        rows += [(f"dynamic sections of {g}", dynamic(nb, pairs, sectioned(nb, pairs, g))) for g in (1, 2, 4, 8, pairs)]
        for name, events in rows:
            end, balance, median, most = summary(events)
            print(f"S {s:5d} M {block_m} ({nb} blocks, {pairs} pairs) {name:26s} makespan {end:7.1f} "
                  f"balance {balance:.3f} pairs in flight median {median:g} max {most}")


if __name__ == "__main__":
    main()
