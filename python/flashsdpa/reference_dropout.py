# reference_dropout.py: the dropout mask of PyTorch's FlashAttention-2 kernels (aten's
# transformers/cuda/flash_attn), bit for bit, in plain torch int64 arithmetic (any device).
#
# What the kernels compute (docs/kernel_notes_dropout.md has the derivation and the sources):
# Philox4x32 with 7 rounds, key = the generator's 64-bit seed, counter = (offset lo, offset hi,
# row // 16, col // 32) with offset = philox_offset + (b * Hq + h) * 32 + lane, where the lane is
# the thread of an m16n8k16 C fragment that holds (row % 16, col % 32). Its 16 output bytes
# cover the lane's 16 elements of that 16 x 32 block: byte 4 * t + e is element e of the lane's
# C fragment of n8 tile t (element e at row lane // 4 + 8 * (e // 2), column 8 * t + 2 * (lane % 4)
# + e % 2). An element is kept when its byte <= floor((1 - dropout_p) * 255).
"""FlashAttention-2's dropout mask (PyTorch's flash kernels) as a bool tensor, and its Philox."""

from __future__ import annotations

import math

import torch
from torch import Tensor

__all__ = ["FA2_PHILOX_ROUNDS", "keep_mask", "keep_mask_of", "keep_rate", "keep_threshold", "philox4x32",
           "rng_state_values"]

_M0, _M1 = 0xD2511F53, 0xCD9E8D57  # Philox4x32 round multipliers (Salmon et al., SC'11)
_W0, _W1 = 0x9E3779B9, 0xBB67AE85  # key schedule (Weyl) increments
_MASK32 = 0xFFFFFFFF
# FlashAttention-2's philox() runs 6 rounds with key bumps and a 7th without: Philox4x32-7, not
# the -10 of curand and Random123's defaults (PyTorch's other kernels use curand's Philox4x32-10).
FA2_PHILOX_ROUNDS = 7


def _mulhilo(m: int, x: Tensor) -> tuple[Tensor, Tensor]:
    """(hi, lo) 32-bit halves of m * x for x holding uint32 values in int64, without overflowing
    int64: x is split into 16-bit limbs, each product < 2**48."""
    t0 = x.bitwise_and(0xFFFF) * m
    t1 = x.bitwise_right_shift(16) * m
    u = t0.bitwise_right_shift(16) + t1  # < 2**49
    lo = t0.bitwise_and(0xFFFF).bitwise_or(u.bitwise_and(0xFFFF).bitwise_left_shift(16))
    hi = u.bitwise_right_shift(16)  # m * x < 2**64, so this is < 2**32
    return hi, lo


def philox4x32(
    counter: tuple[Tensor, Tensor, Tensor, Tensor], key: tuple[int, int], rounds: int = 10
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Philox4x32-``rounds`` of ``counter`` (four int64 tensors of uint32 values, broadcastable)
    under ``key`` (two uint32): the four output words, int64 tensors of uint32 values."""
    c0, c1, c2, c3 = (torch.as_tensor(c, dtype=torch.int64) for c in counter)
    c0, c1, c2, c3 = torch.broadcast_tensors(c0, c1, c2, c3)
    k0, k1 = key[0] & _MASK32, key[1] & _MASK32
    for r in range(rounds):
        if r > 0:
            k0, k1 = (k0 + _W0) & _MASK32, (k1 + _W1) & _MASK32
        hi0, lo0 = _mulhilo(_M0, c0)
        hi1, lo1 = _mulhilo(_M1, c2)
        c0, c1, c2, c3 = hi1.bitwise_xor(c1).bitwise_xor(k0), lo1, hi0.bitwise_xor(c3).bitwise_xor(k1), lo0
    return c0, c1, c2, c3


def keep_threshold(dropout_p: float) -> int:
    """The uint8 threshold FlashAttention-2 compares a random byte against (kept when <=):
    floor(keep * 255) in float32, keep = 1 - dropout_p in float32 (flash_api.cpp's arithmetic)."""
    if not 0.0 <= dropout_p < 1.0:
        raise ValueError(f"dropout_p={dropout_p}: needs 0 <= dropout_p < 1")
    keep = torch.tensor(1.0, dtype=torch.float32) - torch.tensor(dropout_p, dtype=torch.float32)
    return int(math.floor(float(keep * 255.0)))


def keep_rate(dropout_p: float) -> float:
    """The exact probability of keeping an element: (threshold + 1) / 256. Not 1 - dropout_p in
    general (p = 0.1: 230 / 256 = 0.8984); the outputs are still scaled by 1 / (1 - dropout_p), as
    PyTorch's flash kernels do, so E[out] = keep_rate / (1 - p) * out_without_dropout."""
    return (keep_threshold(dropout_p) + 1) / 256.0


def rng_state_values(philox_seed: Tensor) -> tuple[int, int]:
    """(seed, offset) as Python ints from PyTorch's flash rng state: uint64[2] = (seed, offset)
    (the format since PyTorch 2.5; older ones returned two int64 scalars, seed and offset)."""
    values = philox_seed.detach().to("cpu")
    if values.dtype == torch.uint64:
        values = values.view(torch.int64)
    seed, offset = (int(x) & 0xFFFFFFFFFFFFFFFF for x in values.reshape(-1).tolist())
    return seed, offset


# Within a 16 x 32 block: element (r, c) is byte _BYTE[r, c] of lane _LANE[r, c]'s 16 bytes.
def _block_maps(device: torch.device) -> tuple[Tensor, Tensor]:
    r = torch.arange(16, device=device)[:, None]
    c = torch.arange(32, device=device)[None, :]
    lane = (r % 8) * 4 + (c % 8) // 2
    byte = (c // 8) * 4 + (r // 8) * 2 + c % 2  # n8 tile t = c // 8 -> word t, element e -> byte e
    return lane.expand(16, 32), byte.expand(16, 32)


def keep_mask(
    seed: int,
    offset: int,
    batch: int,
    heads: int,
    seqlen_q: int,
    seqlen_k: int,
    dropout_p: float,
    device: torch.device | str = "cpu",
) -> Tensor:
    """The keep-mask (B, Hq, Sq, Sk), bool, that PyTorch's flash kernels (and ours) apply for the
    generator state (seed, offset) of the call: True where P is kept (and scaled by 1 / (1 - p))."""
    device = torch.device(device)
    threshold = keep_threshold(dropout_p)
    rows16, cols32 = -(-seqlen_q // 16), -(-seqlen_k // 32)
    shape = (batch, heads, rows16, cols32, 32)
    if batch * heads * rows16 * cols32 == 0:
        return torch.zeros(batch, heads, seqlen_q, seqlen_k, dtype=torch.bool, device=device)
    bh = torch.arange(batch * heads, dtype=torch.int64, device=device).view(batch, heads, 1, 1, 1)
    lanes = torch.arange(32, dtype=torch.int64, device=device).view(1, 1, 1, 1, 32)
    # offset + (b * H + h) * 32 + lane as uint64, split into 32-bit halves (offset < 2**63 always:
    # PyTorch's generator offsets count from 0 in steps of a call's B * H * 32).
    thread_offset = bh * 32 + lanes + offset
    off_lo = thread_offset.bitwise_and(_MASK32).expand(shape)
    off_hi = thread_offset.bitwise_right_shift(32).expand(shape)
    row = torch.arange(rows16, dtype=torch.int64, device=device).view(1, 1, rows16, 1, 1).expand(shape)
    col = torch.arange(cols32, dtype=torch.int64, device=device).view(1, 1, 1, cols32, 1).expand(shape)
    words = philox4x32((off_lo, off_hi, row, col), (seed & _MASK32, seed >> 32), FA2_PHILOX_ROUNDS)
    # (B, H, R, C, lane, word) -> bytes (B, H, R, C, lane, 16), byte 4 * word + k = bits 8k..8k+7.
    shifts = torch.arange(0, 32, 8, dtype=torch.int64, device=device)
    w = torch.stack(words, dim=-1)  # (..., 32, 4)
    rnd = w.unsqueeze(-1).bitwise_right_shift(shifts).bitwise_and(0xFF).flatten(-2)  # (..., 32, 16)
    lane, byte = _block_maps(device)
    flat = rnd.flatten(-2)  # (..., 512): lane * 16 + byte
    blocks = flat[..., (lane * 16 + byte).flatten()].view(batch, heads, rows16, cols32, 16, 32)
    keep = (blocks <= threshold).permute(0, 1, 2, 4, 3, 5).reshape(batch, heads, rows16 * 16, cols32 * 32)
    return keep[:, :, :seqlen_q, :seqlen_k].contiguous()


def keep_mask_of(philox_seed: Tensor, batch: int, heads: int, seqlen_q: int, seqlen_k: int, dropout_p: float) -> Tensor:
    """The debug option: the keep-mask a call applied, from the rng state it returned (the flash
    ops' ``philox_seed`` output, ours or PyTorch's, or torch.ops.flashsdpa.fwd_dropout's third
    output), on that tensor's device. Reads the state on the host (a sync): for tests and debugging."""
    seed, offset = rng_state_values(philox_seed)
    return keep_mask(seed, offset, batch, heads, seqlen_q, seqlen_k, dropout_p, philox_seed.device)
