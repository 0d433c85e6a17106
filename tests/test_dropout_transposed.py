# test_dropout_transposed.py: the sm90 backward's dropout map (and the row map of the other
# kernels), emulated lane by lane on the CPU.
#
# cuda/sm90/bwd_kernel_sm90.cuh computes S^T = K Q^T with keys as the wgmma M dimension, so each
# consumer warp holds 16 keys x 64 queries of the transposed tile, and cuda/common/dropout.cuh's
# dropout_bytes_t / dropout_keep_t read FlashAttention-2's (query-row) mask transposed. This test
# mirrors their integer arithmetic exactly (stream lane, prmt selectors, the shuffle with lane ^ 4,
# the no-shuffle variant's offset + 4 with its carry) for every (consumer warpgroup, warp, lane,
# fragment element) of a CTA's step and checks the keep decisions against reference_dropout's
# mask, which tests/test_dropout.py checks against the PTX fragment definition and the GPU tests
# against PyTorch's kernel.
from __future__ import annotations

import pytest
import torch
from torch import Tensor

from flashsdpa import reference_dropout

_MASK32 = 0xFFFFFFFF
BLOCK_M, BLOCK_N = 64, 128  # BwdTraitsSm90: query rows per step, keys per CTA (64 per warpgroup)
CONSUMER_WGS, WARPS = 2, 4
N_TILES = BLOCK_M // 8  # kMTiles: n8 query tiles of S^T per warp


def stream_lane_t(lane: Tensor, c: Tensor | int) -> Tensor:
    """dropout_stream_lane_t: (2 (L % 4) + c) * 4 + L / 8."""
    return (2 * (lane % 4) + c) * 4 + lane // 8


def prmt_sel_t(kpar: Tensor | int) -> Tensor | int:
    """dropout_prmt_t: 0x6420 + 0x1111 * kpar."""
    return 0x6420 + 0x1111 * kpar


def prmt(a: Tensor, b: Tensor, sel: Tensor | int) -> Tensor:
    """PTX prmt.b32 (default mode): result byte n <- byte (sel >> 4 n) & 7 of the 8 bytes {a, b}
    (a: bytes 0-3, b: 4-7), sign-replicated when bit 3 of the nibble is set."""
    sel_t = torch.as_tensor(sel, dtype=torch.int64)
    pool = torch.stack([a.bitwise_right_shift(8 * k).bitwise_and(0xFF) for k in range(4)]
                       + [b.bitwise_right_shift(8 * k).bitwise_and(0xFF) for k in range(4)], dim=-1)  # fmt: skip
    out = torch.zeros_like(a)
    for n in range(4):
        nib = sel_t.bitwise_right_shift(4 * n).bitwise_and(0xF)
        src = torch.gather(pool, -1, nib.bitwise_and(7).expand_as(a).unsqueeze(-1)).squeeze(-1)
        src = torch.where(nib.bitwise_and(8).expand_as(a) != 0,
                          torch.where(src.bitwise_and(0x80) != 0, 0xFF, 0), src)  # fmt: skip
        out = out.bitwise_or(src.bitwise_left_shift(8 * n))
    return out


def keep_bound(threshold_plus1: int) -> int:
    """dropout_keep_bound: (threshold_plus1 - 1) << 24 | 0xffffff, as uint32 (threshold_plus1 <= 256)."""
    return (((threshold_plus1 - 1) << 24) | 0xFFFFFF) & _MASK32


def philox_words(seed: int, lo: Tensor, hi: Tensor, row16: Tensor, col32: Tensor) -> tuple[Tensor, ...]:
    return reference_dropout.philox4x32((lo, hi, row16, col32), (seed & _MASK32, seed >> 32),
                                        reference_dropout.FA2_PHILOX_ROUNDS)  # fmt: skip


def device_keep(seed: int, offset: int, bh: int, heads_q: int, threshold: int, n_block: int, m_block: int,
                shuffle: bool) -> tuple[Tensor, Tensor, Tensor]:
    """One CTA step of the sm90 dropout backward: (keep, query, key), each (2 WGs, 4 warps, 32 lanes,
    N_TILES, 4), as the device computes them. bh = batch * heads_q + head."""
    del heads_q  # the device's (batch * heads_q + head) is bh
    cwg = torch.arange(CONSUMER_WGS).view(-1, 1, 1)
    warp = torch.arange(WARPS).view(1, -1, 1)
    lane = torch.arange(32).view(1, 1, -1)
    k16 = n_block * BLOCK_N + cwg * 64 + warp * 16  # drop_k16
    q0 = m_block * BLOCK_M
    kpar = lane.bitwise_right_shift(2).bitwise_and(1)
    upper = k16.bitwise_and(16) != 0
    col32 = (k16 // 32).expand(CONSUMER_WGS, WARPS, 32)
    c_rng = kpar if shuffle else 0
    # DropoutRng(seed, offset, ..., lane = dropout_stream_lane_t(lane, c)): 64-bit offset, split.
    thread_offset = offset + bh * 32 + stream_lane_t(lane, c_rng)
    thread_offset = thread_offset.expand(CONSUMER_WGS, WARPS, 32)
    off_lo, off_hi = thread_offset.bitwise_and(_MASK32), thread_offset.bitwise_right_shift(32)
    bytes_ = torch.zeros(CONSUMER_WGS, WARPS, 32, N_TILES // 2, 2, dtype=torch.int64)
    for mt in range(N_TILES // 2):
        row16 = torch.full_like(off_lo, q0 // 16 + mt)
        r = philox_words(seed, off_lo, off_hi, row16, col32)
        w0, w1 = torch.where(upper, r[2], r[0]), torch.where(upper, r[3], r[1])
        if shuffle:
            mine = prmt(w0, w1, prmt_sel_t(kpar))
            sent = prmt(w0, w1, prmt_sel_t(kpar ^ 1))
            theirs = sent[..., torch.arange(32) ^ 4]  # __shfl_xor_sync(..., 4)
            bytes_[..., mt, 0] = torch.where(kpar != 0, theirs, mine)
            bytes_[..., mt, 1] = torch.where(kpar != 0, mine, theirs)
        else:
            lo1 = (off_lo + 4).bitwise_and(_MASK32)
            hi1 = (off_hi + (lo1 < 4).long()).bitwise_and(_MASK32)
            r1 = philox_words(seed, lo1, hi1, row16, col32)
            bytes_[..., mt, 0] = prmt(w0, w1, prmt_sel_t(kpar))
            bytes_[..., mt, 1] = prmt(torch.where(upper, r1[2], r1[0]), torch.where(upper, r1[3], r1[1]),
                                      prmt_sel_t(kpar))  # fmt: skip
    keep = torch.zeros(CONSUMER_WGS, WARPS, 32, N_TILES, 4, dtype=torch.bool)
    query = torch.zeros(CONSUMER_WGS, WARPS, 32, N_TILES, 4, dtype=torch.int64)
    key = torch.zeros_like(query)
    key_row = cwg * 64 + warp * 16 + lane // 4  # consume()'s key_row
    for jt in range(N_TILES):
        for x in range(4):
            # dropout_keep_t: the element's byte k moved to the top, compared with dropout_keep_bound.
            k = 2 * (x // 2) + jt % 2
            top = bytes_[..., jt // 2, x % 2].bitwise_left_shift(24 - 8 * k).bitwise_and(_MASK32)
            keep[..., jt, x] = top <= keep_bound(threshold + 1)
            # The C fragment of S^T: element x of n8 tile jt at row g + 8 (x / 2), column 8 jt + 2 (L % 4) + x % 2.
            query[..., jt, x] = q0 + 8 * jt + 2 * (lane % 4) + x % 2
            key[..., jt, x] = n_block * BLOCK_N + key_row + 8 * (x // 2)
    return keep, query, key


CASES = [
    # seed, offset, batch, heads, seqlen_q, seqlen_k, p
    (0x0123456789ABCDEF, 0, 2, 3, 130, 300, 0.5),
    (7, 96, 1, 2, 64, 512, 0.1),
    # offset + (b H + h) * 32 + lane crosses 2**32: the high word and the no-shuffle carry.
    (2**64 - 3, 2**32 - 100, 2, 2, 192, 256, 0.3),
    (12345, 2**33 + 4, 3, 1, 100, 129, 0.25),
    # 1 - p rounds to 1.0f: threshold_plus1 = 256, everything kept (256 << 24 would wrap to 0).
    (99, 64, 1, 1, 64, 128, 1e-9),
]


@pytest.mark.parametrize("shuffle", [True, False], ids=["shuffle", "two-streams"])
@pytest.mark.parametrize("seed, offset, batch, heads, seqlen_q, seqlen_k, p", CASES)
def test_transposed_map_equals_reference(
    shuffle: bool, seed: int, offset: int, batch: int, heads: int, seqlen_q: int, seqlen_k: int, p: float
) -> None:
    ref = reference_dropout.keep_mask(seed, offset, batch, heads, seqlen_q, seqlen_k, p)
    threshold = reference_dropout.keep_threshold(p)
    n_blocks, m_blocks = -(-seqlen_k // BLOCK_N), -(-seqlen_q // BLOCK_M)
    checked = 0
    for b in range(batch):
        for h in range(heads):
            covered = torch.zeros(seqlen_q, seqlen_k, dtype=torch.int64)
            for n_block in range(n_blocks):
                for m_block in range(m_blocks):
                    keep, query, key = device_keep(seed, offset, b * heads + h, heads, threshold, n_block, m_block,
                                                   shuffle)  # fmt: skip
                    inside = (query < seqlen_q) & (key < seqlen_k)
                    qi, kj = query[inside], key[inside]
                    assert torch.equal(keep[inside], ref[b, h, qi, kj]), (b, h, n_block, m_block)
                    covered.index_put_((qi, kj), torch.ones_like(qi), accumulate=True)
                    checked += int(inside.sum())
            # The fragments tile the (query, key) plane exactly once: no element checked twice or missed.
            assert bool((covered == 1).all())
    assert checked == batch * heads * seqlen_q * seqlen_k


def test_stream_lanes_and_partner() -> None:
    """The worked example of docs/kernel_notes_dropout.md: lane L needs streams (2 (L % 4) + c) * 4
    + L / 8, and lane L ^ 4 needs the same two (so one shuffle pairs them)."""
    lanes = torch.arange(32)
    for c in (0, 1):
        s = stream_lane_t(lanes, c)
        assert torch.equal(s, stream_lane_t(lanes ^ 4, c))
        # Stream s covers queries i % 8 = s / 4 and keys (j % 8) / 2 = s % 4 (FA2's lane map).
        assert torch.equal(s // 4, 2 * (lanes % 4) + c) and torch.equal(s % 4, (lanes // 4) // 2)
    # The 32 lanes' two streams are all 32 lanes, each needed by exactly 2 lanes.
    both = torch.cat([stream_lane_t(lanes, 0), stream_lane_t(lanes, 1)])
    assert torch.equal(torch.bincount(both, minlength=32), torch.full((32,), 2))


def test_keep_bound_equals_the_byte_compare() -> None:
    """dropout_keep_t's shifted compare equals DropoutRng::keep's byte < threshold_plus1 for every
    byte value, byte position, threshold (1..256) and junk in the other bytes."""
    gen = torch.Generator().manual_seed(0)
    junk = torch.randint(0, 2**32, (4096,), generator=gen, dtype=torch.int64)
    for threshold_plus1 in (1, 2, 26, 128, 230, 255, 256):
        for k in range(4):
            byte = junk.bitwise_right_shift(8 * k).bitwise_and(0xFF)
            top = junk.bitwise_left_shift(24 - 8 * k).bitwise_and(_MASK32)
            assert torch.equal(top <= keep_bound(threshold_plus1), byte < threshold_plus1), (threshold_plus1, k)
    assert reference_dropout.keep_threshold(1e-9) + 1 == 256


def test_prmt_emulation() -> None:
    a, b = torch.tensor([0x33221100]), torch.tensor([0x77665544])
    assert int(prmt(a, b, 0x6420)) == 0x66442200
    assert int(prmt(a, b, 0x7531)) == 0x77553311
    assert int(prmt(a, b, 0x3210)) == 0x33221100
    # nibble 0 = 8: a's byte 0 (0x80) sign-replicated; nibbles 1-3 = 0: that byte as is
    assert int(prmt(torch.tensor([0x80]), b, 0x0008)) == 0x808080FF


def row_layout_keep(seed: int, offset: int, bh: int, threshold: int, row0: int, col0: int, n_tiles: int
                    ) -> tuple[Tensor, Tensor, Tensor]:  # fmt: skip
    """dropout.cuh's for_each_dropout_word<1, n_tiles> + DropoutRng::keep for one warp's m16 row
    slice (the forwards and the sm80 backward, rows = queries): (keep, row, col), each (32 lanes,
    n_tiles, 4). n_tiles % 4 == 0: col0 % 32 == 0, one Philox per 4 n8 tiles, word t to tile t;
    n_tiles == 2: col0 % 16 == 0, words 2, 3 for the block's second 16 columns."""
    lane = torch.arange(32)
    thread_offset = offset + bh * 32 + lane  # DropoutRng(spec, batch, head, heads_q, lane)
    lo, hi = thread_offset.bitwise_and(_MASK32), thread_offset.bitwise_right_shift(32)
    row16 = torch.full_like(lo, row0 // 16)
    keep = torch.zeros(32, n_tiles, 4, dtype=torch.bool)
    row, col = torch.zeros(32, n_tiles, 4, dtype=torch.int64), torch.zeros(32, n_tiles, 4, dtype=torch.int64)
    words: list[Tensor] = []
    if n_tiles % 4 == 0:
        for nt in range(0, n_tiles, 4):
            r = philox_words(seed, lo, hi, row16, torch.full_like(lo, (col0 + nt * 8) // 32))
            words += list(r)
    else:
        r = philox_words(seed, lo, hi, row16, torch.full_like(lo, col0 // 32))
        words = [r[2], r[3]] if col0 & 16 else [r[0], r[1]]
    for nt in range(n_tiles):
        for e in range(4):
            keep[:, nt, e] = words[nt].bitwise_right_shift(8 * e).bitwise_and(0xFF) < threshold + 1
            row[:, nt, e] = row0 + lane // 4 + 8 * (e // 2)
            col[:, nt, e] = col0 + 8 * nt + 2 * (lane % 4) + e % 2
    return keep, row, col


@pytest.mark.parametrize("n_tiles, col_step", [(16, 128), (8, 64), (2, 16)], ids=["128-cols", "64-cols", "16-cols"])
def test_row_layout_equals_reference(n_tiles: int, col_step: int) -> None:
    """The forwards' (sm80, and sm90's per-warp m16 slices of the wgmma accumulator) and the sm80
    backward's (its 16-column small tile too) row map against reference_dropout's mask, every warp
    row slice and column block of a problem, so the transposed map above and this one read one mask."""
    seed, offset, batch, heads, seqlen_q, seqlen_k, p = 2**40 + 3, 2**32 - 64, 2, 2, 70, 150, 0.4
    ref = reference_dropout.keep_mask(seed, offset, batch, heads, seqlen_q, seqlen_k, p)
    threshold = reference_dropout.keep_threshold(p)
    for b in range(batch):
        for h in range(heads):
            covered = torch.zeros(seqlen_q, seqlen_k, dtype=torch.int64)
            for row0 in range(0, seqlen_q, 16):
                for col0 in range(0, seqlen_k, col_step):
                    keep, row, col = row_layout_keep(seed, offset, b * heads + h, threshold, row0, col0, n_tiles)
                    inside = (row < seqlen_q) & (col < seqlen_k)
                    assert torch.equal(keep[inside], ref[b, h, row[inside], col[inside]]), (b, h, row0, col0)
                    covered.index_put_((row[inside], col[inside]), torch.ones_like(row[inside]), accumulate=True)
            assert bool((covered == 1).all())
