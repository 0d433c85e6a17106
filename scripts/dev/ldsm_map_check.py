"""ldsm_map_check.py (session 50; the lean forms became the tree's in session 51, the former pair() / at() and
per-copy addresses removed, and live on here as the reference): a host model of bias_stage.cuh's quad() against
pair() / at() under PTX's ldmatrix semantics (.x4: lanes 8i..8i+7 give matrix i's row addresses; thread t
gets row t / 4, columns 2 (t % 4) + {0, 1} of each matrix, or with .trans column t / 4 of rows 2 (t % 4) + {0, 1}),
with the tiles' chunk_offset formulas copied from the C++; and that each matrix's 8 rows sit on distinct 16-byte
bank groups; and the lean stage_rows copies and store_bias_grad stores against the former forms (the
same for every lane); and (session 54) the bias backward's dS in query rows: stmatrix.x4.trans into the TMA
box's positions, WarpBiasTileQ's reads (bwd_query_rows). Prints "fwd ok (block_n 128 / 64)" / "bwd ok" /
"stage_rows lean ok" / "store_bias_grad lean ok" / "store_bias_grad ldsm ok" (the variant in
scripts/dev/ab/bias_grad_ldsm.patch) / "bwd query rows ok". Since session 54 the backward's dS^T tile
(bwd, the bwd part of stage_rows_lean, store_bias_grad_*) is scripts/dev/ab/bias_grad_rows.patch's code.

    python3 scripts/dev/ldsm_map_check.py
"""

def fwd(block_n=128):
    # WarpBiasTile<block_n>: 128 keys at d64 / d128, 64 at d256 (its forward's key block).
    co = lambda r, c: r * 2 * block_n + ((c ^ (r & 7)) << 4)
    mem = {}
    for r in range(16):
        for key in range(block_n):
            mem[co(r, key // 8) + (key % 8) * 2] = (r, key)
    def pair(lane, h, nt):
        a = co(lane // 4 + 8 * h, nt) + (lane % 4) * 4
        return (mem[a], mem[a + 2])
    for nt in range(0, block_n // 8, 2):
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
    print(f"fwd ok (block_n {block_n})")

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

fwd(); fwd(64); bwd()


def stage_rows_lean() -> None:
    """FLASHSDPA_BIAS_LEAN's stage_rows (16-byte copies) against the tree's form: the same (tile
    offset, source element, bytes) set for every lane, both tiles, edge lengths and strides."""
    import random

    fwd_co = lambda r, c: r * 256 + ((c ^ (r & 7)) << 4)
    fwd64_co = lambda r, c: r * 128 + ((c ^ (r & 7)) << 4)  # d256's forward: 64-key blocks
    bwd_co = lambda q, c: q * 32 + ((c ^ ((q >> 2) & 1)) << 4)
    rng = random.Random(0)
    for co, rows, keys in ((fwd_co, 16, 128), (fwd64_co, 16, 64), (bwd_co, 64, 16)):
        chunks = keys // 8
        for _ in range(300):
            row0, key0 = rng.randrange(0, 300), rng.randrange(0, 300) // 8 * 8
            seqlen_q, seqlen_k = rng.randrange(1, 400), rng.randrange(1, 400)
            stride = rng.choice([0, 8, 136, 1000 // 8 * 8])
            for lane in range(32):
                tree = set()
                for j in range(rows * chunks // 32):
                    i = lane + 32 * j
                    r, c = i // chunks, i % chunks
                    q, k = row0 + r, key0 + 8 * c
                    nbytes = 2 * max(0, min(8, seqlen_k - k)) if q < seqlen_q else 0
                    tree.add((co(r, c), q * stride + k if nbytes > 0 else 0, nbytes))
                lean = set()
                pass_rows = 32 // chunks
                r0, c = lane // chunks, lane % chunks
                k = key0 + 8 * c
                key_bytes = 2 * max(0, min(8, seqlen_k - k))
                src = (row0 + r0) * stride + k
                for j in range(rows // pass_rows):
                    r = r0 + pass_rows * j
                    nbytes = key_bytes if row0 + r < seqlen_q else 0
                    lean.add((co(r, c), src if nbytes > 0 else 0, nbytes))
                    src += pass_rows * stride
                assert tree == lean, (rows, keys, lane, row0, key0, seqlen_q, seqlen_k, stride)
    print("stage_rows lean ok")


def store_bias_grad_lean() -> None:
    """FLASHSDPA_BIAS_LEAN's store_bias_grad (bwd_kernel_sm90.cuh) against the tree's: the same
    (shared-memory element, d_bias element, store kind) set for every thread of a warpgroup."""
    import random

    rng = random.Random(1)
    for _ in range(400):
        q_first, k_first = rng.randrange(0, 512, 64), rng.randrange(0, 512, 64)
        seqlen_q, seqlen_k = rng.randrange(1, 600), rng.randrange(1, 600)
        stride = rng.choice([8, 136, 520, 1024])
        for tid in range(128):
            tree = set()
            for it in range(4):
                idx = tid + 128 * it
                q, c = idx % 64, idx // 64
                k = k_first + 8 * c
                if q_first + q >= seqlen_q or k >= seqlen_k:
                    continue
                smem = tuple((8 * c + r) * 128 + (((q // 8) ^ r) << 4) + (q % 8) * 2 for r in range(8))
                tree.add((smem, (q_first + q) * stride + k, k + 8 <= seqlen_k))
            lean = set()
            q, c0 = tid % 64, tid // 64
            if q_first + q < seqlen_q:
                col = 8 * c0 * 128 + (q % 8) * 2
                row = (q_first + q) * stride + k_first + 8 * c0
                for it in range(4):
                    k = k_first + 8 * (c0 + 2 * it)
                    if k >= seqlen_k:
                        break
                    smem = tuple(col + (16 * it + r) * 128 + (((q // 8) ^ r) << 4) for r in range(8))
                    lean.add((smem, row + 16 * it, k + 8 <= seqlen_k))
            assert tree == lean, (tid, q_first, k_first, seqlen_q, seqlen_k, stride)
    print("store_bias_grad lean ok")


def store_bias_grad_ldsm() -> None:
    """FLASHSDPA_SM90_BWD_DBIAS_LDSM's store_bias_grad (session 51, prepared): ldmatrix.x4.trans
    reads of the warpgroup's 64 keys x 64 queries of dS^T (stored rows: keys, 128-byte swizzled),
    4-byte stores. Every in-bounds d_bias element of the tile written once with its own dS^T
    element, nothing out of bounds, 4-byte stores at even offsets, each matrix's rows on distinct
    16-byte bank groups."""
    import random

    elem = lambda row, q: row * 128 + (((q >> 3) ^ (row & 7)) << 4) + (q & 7) * 2  # buffer byte of (key row, query)
    value = {elem(row, q): (row, q) for row in range(64) for q in range(64)}  # cwg 0's rows; cwg adds 64 rows

    def ldsm_trans(addrs: list[int]) -> list[list[int]]:
        """Thread t's four 32-bit registers, each as (low, high) elements: matrix i's row 2 (t % 4)
        and 2 (t % 4) + 1 at column t / 4 (PTX ldmatrix .trans)."""
        return [[(value[addrs[8 * i + 2 * (t % 4)] + (t // 4) * 2], value[addrs[8 * i + 2 * (t % 4) + 1] + (t // 4) * 2])
                 for i in range(4)] for t in range(32)]

    rng = random.Random(2)
    for trial in range(300):
        q_first, k_first = rng.randrange(0, 512, 64), rng.randrange(0, 512, 128) + rng.choice([0, 64])
        seqlen_q, seqlen_k = rng.randrange(1, 600), rng.randrange(1, 600)
        stride = rng.choice([64, 136, 520, 1024])  # row strides of at least the tile's 64 keys
        written: dict[int, tuple[int, int]] = {}
        for warp in range(4):
            for m in range(4):
                addrs = []
                for lane in range(32):
                    r, mat = lane % 8, lane // 8
                    addrs.append((8 * (mat // 2) + r) * 128 + (((2 * warp + mat % 2) ^ r) << 4) + m * 2 * 8 * 128)
                for i in range(4):
                    assert len({(addrs[8 * i + r] % 128) // 16 for r in range(8)}) == 8, (warp, m, i)
                regs = ldsm_trans(addrs)
                for lane in range(32):
                    q0, k0 = q_first + 16 * warp + lane // 4, k_first + 2 * (lane % 4)
                    for i in range(4):
                        q, dk = q0 + 8 * (i % 2), 8 * (2 * m + i // 2)
                        k = k0 + dk
                        if not (q < seqlen_q and k < seqlen_k):
                            continue
                        dst = q * stride + k
                        pairs = regs[lane][i] if k + 1 < seqlen_k else regs[lane][i][:1]
                        assert (k - k_first) % 2 == 0  # 4-byte aligned within a 16-byte aligned row
                        for e, (row, qq) in enumerate(pairs):
                            assert dst + e not in written, (trial, warp, m, lane, i)
                            written[dst + e] = (k_first + row, q_first + qq)
        expected = {q * stride + k: (k, q) for q in range(q_first, min(q_first + 64, seqlen_q))
                    for k in range(k_first, min(k_first + 64, seqlen_k))}
        assert written == expected, (trial, q_first, k_first, seqlen_q, seqlen_k, stride)
    print("store_bias_grad ldsm ok")



def bwd_query_rows() -> None:
    """The sm90 bias backward's dS in query rows (session 54, kDsQueryRows; kernel_notes_features.md,
    "d_bias by TMA stores"): for each warpgroup half (64 queries x 64 keys, 128-byte rows), (1)
    store_ds_q's stmatrix.x4.trans puts every dS element (query q, key k) of the 4 warps exactly once
    where the TMA box of d_bias (and of the bias, kBiasTmaLoad) has it, at q * 128 + ((k / 8 ^ q % 8)
    * 16) + (k % 8) * 2, and only into the writing warp's own chunks (2 w, 2 w + 1: where its staged
    bias lies, the __syncwarp argument); (2) WarpBiasTileQ's quad() under ldmatrix.x4.trans gives
    each thread S^T's fragment pairs (key lane / 4 + 8 (i % 2), queries 8 (j + i / 2) + 2 (lane % 4)
    + {0, 1}); (3) every 8-row matrix of both sits on 8 distinct 16-byte bank groups."""
    box = lambda q, k: q * 128 + (((k // 8) ^ (q % 8)) << 4) + (k % 8) * 2  # the TMA 128-byte swizzle
    chunk_offset = lambda w, q, c: q * 128 + (((2 * w + c) ^ (q & 7)) << 4)  # WarpBiasTileQ, chunk0 = 2 w
    written: dict[int, tuple[int, int]] = {}
    for w in range(4):
        for m in range(4):
            # store_ds_q: lane L's row address; fragment j's element (fr, fc) = dS^T(key 16 w + 8 (j % 2)
            # + fr, query 16 m + 8 (j / 2) + fc) lands (.trans) in memory row fc of matrix j, element fr.
            addr = []
            for lane in range(32):
                row, chunk = 16 * m + 8 * (lane // 16) + lane % 8, 2 * w + (lane // 8) % 2
                addr.append(row * 128 + ((chunk ^ (lane % 8)) << 4))
            for j in range(4):
                assert len({(addr[8 * j + r] >> 4) % 8 for r in range(8)}) == 8, (w, m, j)  # distinct bank groups
                for fr in range(8):
                    for fc in range(8):
                        key, q = 16 * w + 8 * (j % 2) + fr, 16 * m + 8 * (j // 2) + fc
                        a = addr[8 * j + fc] + 2 * fr
                        assert a == box(q, key), (w, m, j, fr, fc)
                        assert (a % 128) // 16 in {(2 * w) ^ (q % 8), (2 * w + 1) ^ (q % 8)}, (w, q)
                        assert a not in written, (w, m, j, fr, fc)
                        written[a] = (q, key)
    assert sorted(written.values()) == [(q, k) for q in range(64) for k in range(64)]
    for w in range(4):
        for j in range(0, 8, 2):  # quad(j): the query groups j, j + 1 of the step's 64
            addr = [chunk_offset(w, 8 * (j + lane // 16) + lane % 8, lane // 8 % 2) for lane in range(32)]
            for i in range(4):
                assert len({(addr[8 * i + r] >> 4) % 8 for r in range(8)}) == 8, (w, j, i)
            for t in range(32):
                for i in range(4):
                    # .trans: thread t gets column t / 4 of matrix i's rows 2 (t % 4), + 1.
                    got = tuple(written[addr[8 * i + 2 * (t % 4) + e] + 2 * (t // 4)] for e in range(2))
                    key = 16 * w + t // 4 + 8 * (i % 2)
                    want = tuple((8 * (j + i // 2) + 2 * (t % 4) + e, key) for e in range(2))
                    assert got == want, (w, j, t, i, got, want)
    print("bwd query rows ok")


stage_rows_lean()
store_bias_grad_lean()
store_bias_grad_ldsm()
bwd_query_rows()
