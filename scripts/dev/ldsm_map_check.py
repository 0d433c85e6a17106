"""ldsm_map_check.py (session 50): a host model of bias_stage.cuh's quad() (FLASHSDPA_BIAS_LEAN) against
pair() / at() under PTX's ldmatrix semantics (.x4: lanes 8i..8i+7 give matrix i's row addresses; thread t
gets row t / 4, columns 2 (t % 4) + {0, 1} of each matrix, or with .trans column t / 4 of rows 2 (t % 4) + {0, 1}),
with the tiles' chunk_offset formulas copied from the C++; and that each matrix's 8 rows sit on distinct 16-byte
bank groups. Prints "fwd ok" / "bwd ok".

    python3 scripts/dev/ldsm_map_check.py
"""

def fwd():
    co = lambda r, c: r * 256 + ((c ^ (r & 7)) << 4)
    mem = {}
    for r in range(16):
        for key in range(128):
            mem[co(r, key // 8) + (key % 8) * 2] = (r, key)
    def pair(lane, h, nt):
        a = co(lane // 4 + 8 * h, nt) + (lane % 4) * 4
        return (mem[a], mem[a + 2])
    for nt in range(0, 16, 2):
        addr = [co((l // 8 % 2) * 8 + l % 8, nt + l // 16) for l in range(32)]
        for t in range(32):
            for i in range(4):
                a = addr[8 * i + t // 4] + (t % 4) * 4
                got = (mem[a], mem[a + 2])
                assert got == pair(t, i % 2, nt + i // 2), (nt, t, i, got, pair(t, i % 2, nt + i // 2))
        # bank check: each matrix's 8 row addresses hit distinct 16-byte bank groups
        for i in range(4):
            groups = {(addr[8 * i + r] % 128) // 16 for r in range(8)}
            assert len(groups) == 8, (nt, i, groups)
    print("fwd ok")

def bwd():
    co = lambda q, c: q * 32 + ((c ^ ((q >> 2) & 1)) << 4)
    mem = {}
    for q in range(64):
        for key in range(16):
            mem[co(q, key // 8) + (key % 8) * 2] = (q, key)
    def at(lane, h, j, e):
        return mem[co(8 * j + 2 * (lane % 4) + e, h) + (lane // 4) * 2]
    for j in range(0, 8, 2):
        addr = [co(8 * (j + l // 16) + l % 8, l // 8 % 2) for l in range(32)]
        for t in range(32):
            for i in range(4):
                for e in range(2):
                    got = mem[addr[8 * i + 2 * (t % 4) + e] + (t // 4) * 2]
                    assert got == at(t, i % 2, j + i // 2, e), (j, t, i, e)
        for i in range(4):
            groups = {(addr[8 * i + r] % 128) // 16 for r in range(8)}
            assert len(groups) == 8, (j, i, sorted(groups))
    print("bwd ok")

fwd(); bwd()
