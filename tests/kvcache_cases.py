# kvcache_cases.py: what the CPU and GPU KV-cache suites share: a straightforward float64
# statement of flash_attn_with_kvcache (python loops over sequences and new rows, rotary through
# complex multiplication, a materialised mask), the case builder (ragged cache_seqlens with 0 and
# full, contiguous or paged caches with shuffled pages and garbage past the pages in use), and the
# check that an append wrote exactly the new rows.
"""Float64 KV-cache reference and case builder for tests/test_kvcache.py and tests/gpu/test_kvcache.py."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass
class Case:
    q: Tensor
    k_cache: Tensor
    v_cache: Tensor
    k: Tensor | None
    v: Tensor | None
    cache_seqlens: Tensor
    block_table: Tensor | None
    cos: Tensor | None
    sin: Tensor | None
    interleaved: bool

    def kwargs(self) -> dict[str, object]:
        return {
            "cache_seqlens": self.cache_seqlens,
            "block_table": self.block_table,
            "rotary_cos": self.cos,
            "rotary_sin": self.sin,
            "rotary_interleaved": self.interleaved,
        }


def make_case(
    *, batch: int = 4, seqlen_q: int = 1, seqlen_new: int | None = None, heads_q: int = 8, heads_kv: int = 2,
    head_dim: int = 32, capacity: int = 128, page_size: int | None = None, rotary: str | None = None,
    rotary_dim: int | None = None, dtype: torch.dtype = torch.float32, device: str = "cpu", seed: int = 0,
) -> Case:  # fmt: skip
    """``rotary``: None, "halves" or "pairs". ``seqlen_new`` 0 means no new k/v (None: seqlen_q).
    cache_seqlens cycle through 0, full (capacity - Snew) and values in between."""
    gen = torch.Generator().manual_seed(seed)
    snew = seqlen_q if seqlen_new is None else seqlen_new

    def randn(*shape: int) -> Tensor:
        return torch.randn(*shape, generator=gen).to(dtype).to(device)

    full = capacity - snew
    pattern = [0, full, min(5, full), max(full - 17, 0), min(37, full), 1]
    seqlens = torch.tensor([pattern[b % len(pattern)] for b in range(batch)], dtype=torch.int32, device=device)
    block_table = None
    if page_size is None:
        k_cache, v_cache = randn(batch, capacity, heads_kv, head_dim), randn(batch, capacity, heads_kv, head_dim)
    else:
        assert capacity % page_size == 0, f"capacity={capacity}: needs whole pages of {page_size} (the reference's block table)"
        pages_per_seq = capacity // page_size
        num_pages = batch * pages_per_seq + 3
        order = torch.randperm(num_pages, generator=gen)[: batch * pages_per_seq].view(batch, pages_per_seq)
        table = order.clone()
        for b in range(batch):  # entries past the pages in use: anything (here out of range)
            used_pages = math.ceil((int(seqlens[b]) + snew) / page_size)
            table[b, used_pages:] = 10**6 + b
        block_table = table.to(torch.int32).to(device)
        k_cache, v_cache = randn(num_pages, page_size, heads_kv, head_dim), randn(num_pages, page_size, heads_kv, head_dim)
    k = randn(batch, snew, heads_kv, head_dim) if snew else None
    v = randn(batch, snew, heads_kv, head_dim) if snew else None
    cos = sin = None
    if rotary is not None:
        half = (rotary_dim or head_dim) // 2
        angles = torch.rand(capacity + seqlen_q, half, generator=gen, dtype=torch.float64) * 2 * math.pi
        cos, sin = angles.cos().to(dtype).to(device), angles.sin().to(dtype).to(device)
    q = randn(batch, seqlen_q, heads_q, head_dim)
    return Case(q, k_cache, v_cache, k, v, seqlens, block_table, cos, sin, rotary == "pairs")


def _rotate(x: Tensor, cos: Tensor, sin: Tensor, pos: int, interleaved: bool) -> Tensor:
    """x (H, D) float64 rotated at position pos, through complex multiplication."""
    half = cos.shape[1]
    turn = torch.complex(cos[pos].double(), sin[pos].double())
    if interleaved:
        z = torch.complex(x[:, 0 : 2 * half : 2], x[:, 1 : 2 * half : 2]) * turn
        rot = torch.stack((z.real, z.imag), dim=-1).flatten(-2)
    else:
        z = torch.complex(x[:, :half], x[:, half : 2 * half]) * turn
        rot = torch.cat((z.real, z.imag), dim=-1)
    return torch.cat((rot, x[:, 2 * half :]), dim=-1)


def _slot(case: Case, b: int, pos: int) -> tuple[int, int]:
    if case.block_table is None:
        return b, pos
    page_size = case.k_cache.shape[1]
    return int(case.block_table[b, pos // page_size]), pos % page_size


def naive(case: Case, *, causal: bool = True, window: tuple[int, int] | None = None, scale: float | None = None) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """(out (B, Sq, Hq, Dv), lse (B, Hq, Sq), k_cache, v_cache after the append), float64 on the CPU,
    from the case's inputs before the call (pass a case whose caches are not yet mutated)."""
    q = case.q.double().cpu()
    k_cache, v_cache = case.k_cache.double().cpu().clone(), case.v_cache.double().cpu().clone()
    cos = None if case.cos is None else case.cos.cpu()
    sin = None if case.sin is None else case.sin.cpu()
    batch, seqlen_q, heads_q, head_dim = q.shape
    snew = 0 if case.k is None else case.k.shape[1]
    groups = heads_q // k_cache.shape[2]
    scale = 1.0 / math.sqrt(head_dim) if scale is None else scale
    left, right = window if window is not None else (-1, -1)
    if causal:
        right = 0
    out = torch.zeros(batch, seqlen_q, heads_q, v_cache.shape[-1], dtype=torch.float64)
    lse = torch.full((batch, heads_q, seqlen_q), math.inf, dtype=torch.float64)
    for b in range(batch):
        n = int(case.cache_seqlens[b])
        qb = q[b].clone()
        for i in range(snew):
            kb = case.k[b, i].double().cpu()  # type: ignore[index]
            if cos is not None:
                kb = _rotate(kb, cos, sin, n + i, case.interleaved)  # type: ignore[arg-type]
            slot = _slot(case, b, n + i)
            # the cache holds the rotated row rounded to the cache's dtype
            k_cache[slot] = kb.to(case.k_cache.dtype).double()
            v_cache[slot] = case.v[b, i].double().cpu()  # type: ignore[index]
        if cos is not None and snew:
            for i in range(seqlen_q):
                qb[i] = _rotate(qb[i], cos, sin, n + i, case.interleaved)  # type: ignore[arg-type]
            qb = qb.to(case.q.dtype).double()  # ours rounds the rotated q to its dtype
        length = n + snew
        keys = torch.stack([k_cache[_slot(case, b, j)] for j in range(length)]) if length else k_cache.new_zeros(0, *k_cache.shape[2:])
        values = torch.stack([v_cache[_slot(case, b, j)] for j in range(length)]) if length else v_cache.new_zeros(0, *v_cache.shape[2:])
        for h in range(heads_q):
            s = (qb[:, h] @ keys[:, h // groups].T) * scale  # (Sq, L)
            rows = torch.arange(seqlen_q)[:, None] + length - seqlen_q
            cols = torch.arange(length)[None, :]
            seen = torch.ones(seqlen_q, length, dtype=torch.bool)
            if left >= 0:
                seen &= cols >= rows - left
            if right >= 0:
                seen &= cols <= rows + right
            s = s.masked_fill(~seen, -math.inf)
            for i in range(seqlen_q):
                if bool(seen[i].any()):
                    lse[b, h, i] = torch.logsumexp(s[i], 0)
                    out[b, i, h] = torch.softmax(s[i], 0) @ values[:, h // groups]
    return out, lse, k_cache, v_cache


def written(case: Case) -> Tensor:
    """Bool over the cache's first two dims: the rows the append writes."""
    mask = torch.zeros(case.k_cache.shape[:2], dtype=torch.bool)
    snew = 0 if case.k is None else case.k.shape[1]
    for b in range(case.q.shape[0]):
        for i in range(snew):
            mask[_slot(case, b, int(case.cache_seqlens[b]) + i)] = True
    return mask


def check_append(case: Case, before: tuple[Tensor, Tensor], expected: tuple[Tensor, Tensor], atol: float) -> None:
    """The caches after the call: bitwise unchanged outside the new rows; the new rows as expected
    (bitwise without rotary: they are the given k / v)."""
    rows = written(case).to(case.k_cache.device)
    for name, after, old, exp in zip(("k_cache", "v_cache"), (case.k_cache, case.v_cache), before, expected):
        assert torch.equal(after[~rows], old[~rows]), f"{name}: rows other than the new ones changed"
        new, want = after[rows].double().cpu(), exp.to(after.device)[rows].double().cpu()
        if case.cos is None or name == "v_cache":
            assert torch.equal(new, want), f"{name}: the new rows are not the given ones"
        else:
            assert (new - want).abs().max().item() <= atol, f"{name}: rotated rows off by {(new - want).abs().max().item():.3e}"
