# reference_kvcache.py: the semantics of attention with a KV cache (issue 11) in PyTorch: rotary
# embedding of the new rows, their append into a contiguous or paged cache, the gather of a paged
# cache into a contiguous one, and the attention itself through reference.py, per sequence.
#
# The rotary / append / gather helpers are plain torch ops on the tensors' own device, with every
# position computed on that device (no .tolist(), no .item()): the CUDA impl of
# flashsdpa::fwd_kvcache runs the very same functions (graph-safe), so there is one statement of
# where the new rows go. Only attention_with_kvcache() reads lengths on the host (CPU path).
"""KV-cache semantics (flash_attn's ``flash_attn_with_kvcache``) in PyTorch, float32.

Layouts are flash_attn's: ``q (B, Sq, Hq, D)``, new ``k (B, Snew, Hkv, D)``, ``v (B, Snew, Hkv, Dv)``;
a contiguous cache ``(B, S_cache, Hkv, D)`` or a paged one ``(num_pages, page_size, Hkv, D)`` with
``block_table (B, max_pages)`` int32: token ``p`` of sequence ``b`` lives in page
``block_table[b, p // page_size]`` at row ``p % page_size``. ``cache_seqlens (B,)`` int32 counts the
tokens already in each cache; the new rows go to positions ``cache_seqlens[b] + i`` and sequence
``b`` then attends to its first ``cache_seqlens[b] + Snew`` keys (bottom-right aligned masks).
Rotary (``cos``/``sin`` of shape ``(max_pos, rotary_dim / 2)``) rotates the first ``rotary_dim``
channels of the new q and k at positions ``cache_seqlens[b] + i``: GPT-NeoX halves
(``interleaved=False``) or GPT-J pairs (``interleaved=True``); computed in float32 and rounded once.
"""

from __future__ import annotations

import torch
from torch import Tensor

from flashsdpa import reference
from flashsdpa.masks import MaskSpec

__all__ = ["append_", "apply_rotary", "attention_with_kvcache", "gather_pages", "new_positions"]


def new_positions(cache_seqlens: Tensor, seqlen: int, limit: int | None = None) -> Tensor:
    """(B, seqlen), cache_seqlens' dtype (int32: an index type of its own): positions
    ``cache_seqlens[b] + i`` of the new rows, on the device; with ``limit``, clamped into
    [0, limit): on CUDA the values of cache_seqlens are not read on the host (a sync), and an index
    past a table would be a device-side assert that ends the CUDA context. Valid calls (the CPU path
    checks them first) never reach the bounds. A decode step (seqlen 1) is one kernel, the clamp:
    each torch op here is a launch and ~5 us of host time on the KV-cache path (issue 11)."""
    positions = cache_seqlens.unsqueeze(1)  # a view: never modified in place
    if seqlen != 1:
        positions = positions + torch.arange(seqlen, device=cache_seqlens.device, dtype=cache_seqlens.dtype)
    return positions if limit is None else positions.clamp(0, max(limit - 1, 0))


def apply_rotary(x: Tensor, cos: Tensor, sin: Tensor, positions: Tensor, interleaved: bool) -> Tensor:
    """``x (B, S, H, D)`` with its first ``2 * cos.size(1)`` channels rotated by the angles at
    ``positions (B, S)``; the other channels are copied. Float32 math (float64 for float64 x)."""
    compute = torch.float64 if x.dtype == torch.float64 else torch.float32
    half = cos.shape[1]
    c = cos.to(compute)[positions].unsqueeze(2)  # (B, S, 1, half)
    s = sin.to(compute)[positions].unsqueeze(2)
    rot = x[..., : 2 * half].to(compute)
    if interleaved:
        x0, x1 = rot[..., 0::2], rot[..., 1::2]
        rotated = torch.stack((x0 * c - x1 * s, x0 * s + x1 * c), dim=-1).flatten(-2)
    else:
        x0, x1 = rot[..., :half], rot[..., half:]
        rotated = torch.cat((x0 * c - x1 * s, x0 * s + x1 * c), dim=-1)
    return torch.cat((rotated.to(x.dtype), x[..., 2 * half :]), dim=-1)


def _cache_index(
    cache: Tensor, cache_seqlens: Tensor, seqlen: int, block_table: Tensor | None
) -> tuple[Tensor, Tensor]:
    """The (first, second) index pair of the cache rows the new rows go to: (B, 1) or (B, seqlen)
    and (B, seqlen), which index_put_ broadcasts."""
    # (B, 1) batch indices: index_put_ broadcasts them against the (B, seqlen) positions.
    batch = torch.arange(cache_seqlens.shape[0], device=cache_seqlens.device, dtype=cache_seqlens.dtype).unsqueeze(1)
    if block_table is None:
        return batch, new_positions(cache_seqlens, seqlen, cache.shape[1])
    page_size = cache.shape[1]
    positions = new_positions(cache_seqlens, seqlen, block_table.shape[1] * page_size)
    pages = block_table[batch, torch.div(positions, page_size, rounding_mode="floor")]
    # Entries outside the pool (unread bad metadata on CUDA) stay inside it, as in the kernel.
    return pages.clamp_(0, max(cache.shape[0] - 1, 0)), positions.remainder(page_size)


def append_(
    k_cache: Tensor, v_cache: Tensor, k: Tensor, v: Tensor, cache_seqlens: Tensor, block_table: Tensor | None
) -> None:
    """Write the new rows ``k``, ``v (B, Snew, Hkv, D)`` into the caches at positions
    ``cache_seqlens[b] + i``, in place; no other row of the caches is touched."""
    if k.shape[0] * k.shape[1] == 0:
        return
    index = _cache_index(k_cache, cache_seqlens, k.shape[1], block_table)
    k_cache.index_put_(index, k if k.dtype == k_cache.dtype else k.to(k_cache.dtype))
    v_cache.index_put_(index, v if v.dtype == v_cache.dtype else v.to(v_cache.dtype))


def gather_pages(cache: Tensor, block_table: Tensor) -> Tensor:
    """A paged cache ``(num_pages, page_size, H, D)`` as a contiguous ``(B, max_pages * page_size, H, D)``
    one. Entries of ``block_table`` past the pages a sequence uses may hold anything: they are
    clamped into range, and the keys they bring are past the sequence's length, never attended."""
    pages = block_table.to(torch.int64).clamp(0, max(cache.shape[0] - 1, 0))
    gathered = cache[pages]  # (B, max_pages, page_size, H, D)
    return gathered.flatten(1, 2)


@torch.no_grad()
def attention_with_kvcache(
    q: Tensor,
    k_cache: Tensor,
    v_cache: Tensor,
    k: Tensor | None,
    v: Tensor | None,
    cache_seqlens: Tensor,
    block_table: Tensor | None,
    rotary: tuple[Tensor, Tensor, bool] | None,
    *,
    scale: float,
    mask: MaskSpec,
) -> tuple[Tensor, Tensor]:
    """Rotate, append (mutating the caches), then attend. Returns ``out (B, Sq, Hq, Dv)`` in q's
    dtype and ``lse (B, Hq, Sq)`` float32 (+inf for rows that see no key). Lengths are read on
    the host: this is the CPU path."""
    seqlen_new = 0 if k is None else k.shape[1]
    if rotary is not None and k is not None:
        cos, sin, interleaved = rotary
        q = apply_rotary(q, cos, sin, new_positions(cache_seqlens, q.shape[1]), interleaved)
        k = apply_rotary(k, cos, sin, new_positions(cache_seqlens, seqlen_new), interleaved)
    if k is not None and v is not None:
        append_(k_cache, v_cache, k, v, cache_seqlens, block_table)
    keys, values = k_cache, v_cache
    if block_table is not None:
        keys, values = gather_pages(k_cache, block_table), gather_pages(v_cache, block_table)
    batch, seqlen_q, heads_q, _ = q.shape
    out = q.new_zeros(batch, seqlen_q, heads_q, v_cache.shape[-1])
    lse = torch.full((batch, heads_q, seqlen_q), float("inf"), dtype=torch.float32, device=q.device)
    for b, used in enumerate(cache_seqlens.tolist()):
        length = used + seqlen_new
        seq_out, seq_lse = reference.attention_forward(
            q[b : b + 1].transpose(1, 2),
            keys[b : b + 1, :length].transpose(1, 2),
            values[b : b + 1, :length].transpose(1, 2),
            scale=scale,
            mask=mask,
        )
        out[b] = seq_out[0].transpose(0, 1)
        lse[b] = seq_lse[0]
    return out, lse
