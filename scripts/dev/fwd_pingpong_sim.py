"""fwd_pingpong_sim.py: the sm90 forward's two consumer warpgroups in ping-pong on one tensor pipe,
as a discrete-event model (cycles, no GPU): which of a tile's boundary phases are on its critical
path, and what shortening one is worth at B key blocks a tile (kernel_notes_fwd_sm90.md, "Prepared
(session 38, compiled only): O stored straight from registers").

Per warpgroup and tile of B key blocks, as consume() runs it:
    setup U (queue pop, TileWork) + Q / K waits W
    turn: issue S_1          | wait S_1 | first softmax F
    turn: issue S_j, PV_j-1  | wait S_j | softmax X | wait PV_j-1        (j = 2 .. B)
    turn: issue PV_B         | work under it R | wait PV_B | epilogue E
GEMMs run FIFO in issue order, G cycles each (one warpgroup's 64 rows x 128 keys x 128 columns);
turns alternate strictly between the warpgroups across tiles (the named-barrier chain, opened
once a kernel). Calibrated on session 37's d128 timeline (H100): G = 700 gives the long tiles'
~2,850 cycles a block; the model's 4-block tile is then 13,650 cycles against 15,112 measured, so
it puts ~60% of the measured boundary on the chain and overstates what a shortened phase saves
(the epilogue moved under the last P V: model +4-6%, measured +1.4% at S 512).

    python3 scripts/dev/fwd_pingpong_sim.py
"""

from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(frozen=True)
class Phases:
    G: float = 700  # one GEMM job (S or P V of one warpgroup and block)
    F: float = 1500  # the first block's softmax (peeled: nothing under it)
    X: float = 1150  # a middle block's softmax
    U: float = 650  # queue pop + the tile's setup
    W: float = 300  # Q / K waits at a tile's start (landed: fixed latency)
    R: float = 1000  # epilogue work issued under the last P V (row scalars, LSE, O rows' wait)
    E: float = 1300  # epilogue after the last P V's wait (scale, stage / store O)
    issue: float = 40  # a turn's GEMM issue


def tile_period(B: int, ph: Phases, tiles: int = 40) -> float:
    """Cycles per tile over `tiles` tiles of B key blocks, both warpgroups."""
    progs: list[list[tuple]] = []
    for _ in range(2):
        prog: list[tuple] = []
        for _ in range(tiles):
            prog.append(("cpu", ph.U + ph.W))
            prog += [("turn", 1), ("wait_s",), ("cpu", ph.F)]
            for _ in range(2, B + 1):
                prog += [("turn", 2), ("wait_s",), ("cpu", ph.X), ("wait_pv",)]
            prog += [("turn", 0), ("under", ph.R), ("wait_pv",), ("cpu", ph.E)]
        progs.append(prog)
    now = [0.0, 0.0]
    pc = [0, 0]
    s_done = [0.0, 0.0]
    pv_done = [0.0, 0.0]
    under_end = [0.0, 0.0]
    turn_at: list[float | None] = [0.0, None]  # warpgroup 0 holds the first turn
    pipe_free = 0.0

    def gemms(at: float, n: int) -> list[float]:
        nonlocal pipe_free
        done = []
        for _ in range(n):
            pipe_free = max(at, pipe_free) + ph.G
            done.append(pipe_free)
        return done

    while pc[0] < len(progs[0]) or pc[1] < len(progs[1]):
        ready: list[tuple[float, int]] = []
        for w in (0, 1):
            if pc[w] >= len(progs[w]):
                continue
            op = progs[w][pc[w]]
            if op[0] == "turn":
                at = turn_at[w]
                if at is None:
                    continue
                ready.append((max(now[w], at), w))
            else:
                ready.append((now[w], w))
        t, w = min(ready)
        op = progs[w][pc[w]]
        pc[w] += 1
        if op[0] == "cpu":
            now[w] = t + op[1]
        elif op[0] == "turn":
            turn_at[w] = None
            now[w] = t + ph.issue
            if op[1] == 1:
                s_done[w] = gemms(now[w], 1)[0]
            elif op[1] == 2:
                s_done[w], pv_done[w] = gemms(now[w], 2)
            else:
                pv_done[w] = gemms(now[w], 1)[0]
            turn_at[1 - w] = now[w]
        elif op[0] == "wait_s":
            now[w] = max(now[w], s_done[w])
        elif op[0] == "wait_pv":
            now[w] = max(now[w], pv_done[w], under_end[w])
        else:  # under
            under_end[w] = now[w] + op[1]
    return max(now) / tiles


def main() -> None:
    base = Phases()
    long_block = tile_period(64, base, tiles=4) / 64
    print(f"long tiles: {long_block:.0f} cycles a block (session 37, d128 8k: ~2,860)")
    variants = {
        "O from registers (E -700, R -250)": replace(base, E=base.E - 700, R=base.R - 250),
        "setup -400 (U)": replace(base, U=base.U - 400),
        "first softmax -500 (F)": replace(base, F=base.F - 500),
    }
    print(f"{'blocks':>6} {'tile':>7}  " + "  ".join(f"{name:>34}" for name in variants))
    for B in (1, 2, 3, 4, 8):
        t = tile_period(B, base)
        cells = "  ".join(f"{t / tile_period(B, ph):>33.3f}x" for ph in variants.values())
        print(f"{B:>6} {t:>7.0f}  {cells}")


if __name__ == "__main__":
    main()
