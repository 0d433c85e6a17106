"""det_chain_sim.py: a model of the sm90 backward's deterministic dQ hand-over chain (the launch
order, the dQ turns, two staging buffers, SMs taken in launch order), to compare turn orders before
timing them (kernel_notes_bwd_sm90.md, "Deterministic turns shortest first").

    python3 scripts/dev/det_chain_sim.py [--seqlen 1024] [--heads 256] [--group 17] ...

Each CTA is a key block of one head (MHA), walking its query blocks from the last down (StepRange):
causal top-left with 64-row query blocks and 128-key blocks, key block n sees query blocks 2n ..
2N - 1. A step computes for T cycles, then stages its dQ tile in one of two buffers (the next step
waits while both are held); the writer adds each tile in order, taking `add` cycles for the add to
land, and in deterministic mode first waits for the query block's turn, which the previous turn
hands over `flag` cycles after its add landed (the default mode holds a tile only until the TMA unit
has read it, `read` cycles). A CTA ends when its last add has landed; CTAs take
SMs in launch order as they free. Prints the makespan of the default mode (no turns), of ascending
turns (the tree: the longest key block first) and of descending ones (shortest first), each with
the launch order that matches its turns. A model: its T, add and flag come from session 37's and
47's timelines (d128: a step ~4,800 cycles, a hand-over ~2,300).
"""

from __future__ import annotations

import argparse
import heapq


def simulate(seqlen: int, heads: int, group: int, sms: int, t_step: float, add: float, flag: float, mode: str,
             read: float = 600.0) -> float:
    n_blocks = (seqlen + 127) // 128
    m_blocks = (seqlen + 63) // 64
    ascending = mode != "descending"
    ordered = mode != "default"
    # Launch order: groups of `group` heads, key block outer, heads inner (BwdGridOrder::decode).
    order = []
    for first in range(0, heads, group):
        size = min(group, heads - first)
        for n in range(n_blocks):
            for h in range(first, first + size):
                order.append((h, n if ascending else n_blocks - 1 - n))
    free = [0.0] * sms  # SM free times (a heap)
    heapq.heapify(free)
    handed: dict[tuple[int, int], float] = {}  # (head, query block) -> when the next turn may add
    end = 0.0
    for head, n in order:
        start = heapq.heappop(free)
        steps = list(range(m_blocks - 1, 2 * n - 1, -1))  # query blocks, last first
        compute_end = start
        writer = [start]  # writer_done per step (index s + 1)
        for s, m in enumerate(steps):
            buffer_free = writer[s - 1] if s >= 2 else start  # step s - 2's tile added
            compute_end = max(compute_end, buffer_free) + t_step
            begin = max(compute_end, writer[s])
            if ordered:
                begin = max(begin, handed.get((head, m), 0.0))
            done = begin + (add if ordered else read)  # the default mode frees a tile once it is read
            if ordered:
                handed[(head, m)] = done + flag
            writer.append(done)
        finish = writer[-1]
        end = max(end, finish)
        heapq.heappush(free, finish)
    return end


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seqlen", type=int, nargs="+", default=[1024, 2048])
    ap.add_argument("--heads", type=int, default=None, help="(KV head, batch) pairs; default 16k tokens x 16 heads")
    ap.add_argument("--group", type=int, default=None, help="heads a launch group; default ceil(sms / key blocks)")
    ap.add_argument("--sms", type=int, default=132)
    ap.add_argument("--step", type=float, default=4800.0, help="cycles a step (d128: ~4,800)")
    ap.add_argument("--add", type=float, default=1500.0, help="cycles from a tile's add to its landing")
    ap.add_argument("--flag", type=float, default=800.0, help="cycles from landing to the next turn's add")
    ap.add_argument("--read", type=float, default=600.0, help="(default mode) cycles a tile is held")
    args = ap.parse_args()
    print(f"{'S':>6} {'group':>5} {'default':>10} {'ascending':>10} {'descending':>10}  asc/def  desc/def")
    for seqlen in args.seqlen:
        heads = args.heads or 16 * 16384 // seqlen
        n_blocks = (seqlen + 127) // 128
        group = args.group or -(-args.sms // n_blocks)
        t = {m: simulate(seqlen, heads, group, args.sms, args.step, args.add, args.flag, m, args.read)
             for m in ("default", "ascending", "descending")}  # fmt: skip
        print(f"{seqlen:>6} {group:>5} {t['default']:>10.0f} {t['ascending']:>10.0f} {t['descending']:>10.0f}"
              f"  {t['ascending'] / t['default']:7.3f}  {t['descending'] / t['default']:7.3f}")  # fmt: skip


if __name__ == "__main__":
    main()
