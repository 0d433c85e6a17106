# kvcache.py: attention against a KV cache (issue 11): the op flashsdpa::fwd_kvcache, which
# appends the new k/v rows into the cache it is given (declared mutable: Tensor(a!), Tensor(b!)),
# and the direct API flashsdpa.attention_with_kvcache with its argument checks.
#
# CPU impl: reference_kvcache.py (float32). CUDA impl: rotate and append with torch ops in the
# caller's stream (reference_kvcache's own functions, graph-safe), then the decode kernel
# (cuda/sm80/decode_kernel_sm80.cuh: split-KV, GQA-packed, reading a paged cache through its block
# table in place) with per-sequence key counts cache_seqlens + Snew on the device: no host sync.
"""``flashsdpa.attention_with_kvcache``: decode / chunked prefill against a (paged) KV cache."""

from __future__ import annotations

import math

import torch
from torch import Tensor

from flashsdpa import _backend, eager, masks, reference_kvcache, reporting, selection, validation

__all__ = ["MAX_SPLITS", "attention_with_kvcache"]

MAX_SPLITS = 128  # num_splits' bound (flash_attn's; _C.MAX_SPLITS)
PAGE_MULTIPLE = 16  # a paged cache's page_size must be a multiple of this many tokens
_CPU_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)

_lib = torch.library.Library("flashsdpa", "FRAGMENT")
_lib.define(
    "fwd_kvcache(Tensor q, Tensor(a!) k_cache, Tensor(b!) v_cache, Tensor? k, Tensor? v, Tensor cache_seqlens,"
    " Tensor? block_table, Tensor? rotary_cos, Tensor? rotary_sin, bool rotary_interleaved, float scale,"
    " int[] mask, int num_splits) -> (Tensor out, Tensor lse)"
)

_COUNTS = reporting.counter("flashsdpa::fwd_kvcache")
_CPU_REASON = "device cpu: flashsdpa.reference_kvcache runs (our kernels need a CUDA device)"


# ---- value checks: free on CPU, on request for CUDA (they read device memory: a sync) ----------


def _has_data(t: Tensor) -> bool:
    if t.device.type == "meta":
        return False
    from torch._subclasses.fake_tensor import is_fake

    return not is_fake(t)


def _capacity(k_cache: Tensor, block_table: Tensor | None) -> int:
    """Tokens one sequence's cache can hold."""
    return k_cache.shape[1] if block_table is None else block_table.shape[1] * k_cache.shape[1]


def values_reason(
    k_cache: Tensor, cache_seqlens: Tensor, seqlen_q: int, seqlen_new: int, block_table: Tensor | None,
    rotary_cos: Tensor | None,
) -> str | None:  # fmt: skip
    """What is wrong with the values of cache_seqlens / block_table (reads them), or None."""
    capacity = _capacity(k_cache, block_table)
    used = cache_seqlens.tolist()
    for b, n in enumerate(used):
        if not 0 <= n <= capacity - seqlen_new:
            return (
                f"cache_seqlens[{b}]={n}: needs 0 <= cache_seqlens[{b}] <= {capacity - seqlen_new} (the cache holds "
                f"{capacity} tokens per sequence, {seqlen_new} new ones are appended)"
            )
    if rotary_cos is not None and seqlen_new > 0:
        last = max(used, default=0) + max(seqlen_q, seqlen_new)
        if last > rotary_cos.shape[0]:
            return (
                f"rotary_cos.size(0)={rotary_cos.shape[0]}: needs at least max(cache_seqlens) + "
                f"max(q.size(1), k.size(1)) = {last} positions"
            )
    if block_table is not None:
        page_size, pages = k_cache.shape[1], k_cache.shape[0]
        for b, (n, row) in enumerate(zip(used, block_table.tolist())):
            for i, page in enumerate(row[: math.ceil((n + seqlen_new) / page_size)]):
                if not 0 <= page < pages:
                    return f"block_table[{b}, {i}]={page}: needs 0 <= page < k_cache.size(0)={pages} (a page in use)"
    return None


def _check_values(
    k_cache: Tensor, k: Tensor | None, cache_seqlens: Tensor, seqlen_q: int, block_table: Tensor | None,
    rotary_cos: Tensor | None,
) -> None:  # fmt: skip
    device = cache_seqlens.device.type
    if (device == "cpu" or (validation.ENABLED and device == "cuda")) and _has_data(cache_seqlens):
        seqlen_new = 0 if k is None else k.shape[1]
        reason = values_reason(k_cache, cache_seqlens, seqlen_q, seqlen_new, block_table, rotary_cos)
        if reason is not None:
            raise ValueError(reason)


# ---- the op's impls ------------------------------------------------------------------------------


def _out(q: Tensor, v_cache: Tensor) -> Tensor:
    batch, seqlen_q, heads_q, _ = q.shape
    return q.new_empty(batch, seqlen_q, heads_q, v_cache.shape[3])


def _lse(q: Tensor) -> Tensor:
    batch, seqlen_q, heads_q, _ = q.shape
    return q.new_empty(batch, heads_q, seqlen_q, dtype=torch.float32)


def _outputs(q: Tensor, v_cache: Tensor) -> tuple[Tensor, Tensor]:
    return _out(q, v_cache), _lse(q)


def _rotary(cos: Tensor | None, sin: Tensor | None, interleaved: bool) -> tuple[Tensor, Tensor, bool] | None:
    return None if cos is None or sin is None else (cos, sin, interleaved)


def _fwd_kvcache_cpu(
    q: Tensor, k_cache: Tensor, v_cache: Tensor, k: Tensor | None, v: Tensor | None, cache_seqlens: Tensor,
    block_table: Tensor | None, rotary_cos: Tensor | None, rotary_sin: Tensor | None, rotary_interleaved: bool,
    scale: float, mask: list[int], num_splits: int,
) -> tuple[Tensor, Tensor]:  # fmt: skip
    _check_values(k_cache, k, cache_seqlens, q.shape[1], block_table, rotary_cos)
    _COUNTS[1] += 1
    reporting.note_fallback("flashsdpa::fwd_kvcache", _CPU_REASON)
    rotary = _rotary(rotary_cos, rotary_sin, rotary_interleaved)
    spec = (mask[0], mask[1], mask[2])
    return reference_kvcache.attention_with_kvcache(
        q, k_cache, v_cache, k, v, cache_seqlens, block_table, rotary, scale=scale, mask=spec
    )


def _kvcache_cuda(
    q: Tensor, k_cache: Tensor, v_cache: Tensor, k: Tensor | None, v: Tensor | None, cache_seqlens: Tensor,
    block_table: Tensor | None, rotary_cos: Tensor | None, rotary_sin: Tensor | None, rotary_interleaved: bool,
    scale: float, mask: masks.MaskSpec, num_splits: int, with_lse: bool,
) -> tuple[Tensor, Tensor | None]:  # fmt: skip
    """The op's CUDA implementation, and the direct API's eager path (``with_lse=False`` when the
    caller does not return the LSE: one allocation fewer, the kernels then write none)."""
    # Rotary and the append are torch ops in the current stream (reference_kvcache's own functions,
    # graph-safe); the attention is one decode-kernel launch (plus the split combine) that reads the
    # caches in place, paged or not. Nothing is read on the host.
    if validation.ENABLED:  # FLASHSDPA_VALIDATE=1: the values, read on the host (a sync)
        _check_values(k_cache, k, cache_seqlens, q.shape[1], block_table, rotary_cos)
    seqlen_new = 0
    if k is not None and v is not None:
        seqlen_new = k.shape[1]
        if rotary_cos is not None and rotary_sin is not None:
            rot, at = reference_kvcache.apply_rotary, reference_kvcache.new_positions
            rows = rotary_cos.shape[0]  # positions clamped into the table (see new_positions)
            q = rot(q, rotary_cos, rotary_sin, at(cache_seqlens, q.shape[1], rows), rotary_interleaved)
            k = rot(k, rotary_cos, rotary_sin, at(cache_seqlens, seqlen_new, rows), rotary_interleaved)
        reference_kvcache.append_(k_cache, v_cache, k, v, cache_seqlens, block_table)
    out = _out(q, v_cache)
    lse = _lse(q) if with_lse else None
    _COUNTS[0] += 1
    if q.numel() == 0 or _capacity(k_cache, block_table) == 0:  # nothing to attend: out 0, LSE +inf
        return out.zero_(), None if lse is None else lse.fill_(math.inf)
    if q.stride(3) != 1:  # rotary returns a fresh tensor; a caller's q may be any view
        q = q.contiguous()
    # Sequence b attends to cache_seqlens[b] + seqlen_new keys: the kernel adds seqlen_new to the
    # lengths it reads (params.h's seqused_k_add), so no device add makes a new lengths tensor.
    _backend.launch_kvcache(q, k_cache, v_cache, out, lse, scale, mask, cache_seqlens, block_table, num_splits,
                            seqlen_new)  # fmt: skip
    return out, lse


def _fwd_kvcache_cuda(
    q: Tensor, k_cache: Tensor, v_cache: Tensor, k: Tensor | None, v: Tensor | None, cache_seqlens: Tensor,
    block_table: Tensor | None, rotary_cos: Tensor | None, rotary_sin: Tensor | None, rotary_interleaved: bool,
    scale: float, mask: list[int], num_splits: int,
) -> tuple[Tensor, Tensor]:  # fmt: skip
    out, lse = _kvcache_cuda(q, k_cache, v_cache, k, v, cache_seqlens, block_table, rotary_cos, rotary_sin,
                             rotary_interleaved, scale, (mask[0], mask[1], mask[2]), num_splits, True)  # fmt: skip
    assert lse is not None
    return out, lse


def _fwd_kvcache_fake(
    q: Tensor, k_cache: Tensor, v_cache: Tensor, k: Tensor | None, v: Tensor | None, cache_seqlens: Tensor,
    block_table: Tensor | None, rotary_cos: Tensor | None, rotary_sin: Tensor | None, rotary_interleaved: bool,
    scale: float, mask: list[int], num_splits: int,
) -> tuple[Tensor, Tensor]:  # fmt: skip
    return _outputs(q, v_cache)


_lib.impl("fwd_kvcache", _fwd_kvcache_cuda, "CUDA")
_lib.impl("fwd_kvcache", _fwd_kvcache_cpu, "CPU")
torch.library.register_fake("flashsdpa::fwd_kvcache", _fwd_kvcache_fake, lib=_lib)


# ---- the direct API's checks (shapes and dtypes only: traceable, never a sync) ---------------------


def _tensor(name: str, t: object, rank: int, layout: str) -> Tensor:
    if not isinstance(t, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dim() != rank:
        raise ValueError(f"{name}.dim()={t.dim()}: needs {rank} {layout}")
    return t


def _same(name: str, t: Tensor, q: Tensor, dtype: torch.dtype | None) -> None:
    if t.device != q.device:
        raise ValueError(f"{name}.device={t.device}: differs from q.device={q.device}")
    if dtype is not None and t.dtype != dtype:
        raise TypeError(f"{name}.dtype={t.dtype}: needs {dtype}")


def _check_caches(q: Tensor, k_cache: Tensor, v_cache: Tensor, block_table: Tensor | None) -> None:
    batch, head_dim = q.shape[0], q.shape[3]
    paged = "(num_pages, page_size, heads_kv, head_dim)" if block_table is not None else None
    for name, t in (("k_cache", k_cache), ("v_cache", v_cache)):
        _tensor(name, t, 4, paged or "(batch, seqlen_cache, heads_kv, head_dim)")
        _same(name, t, q, q.dtype)
    if v_cache.shape[:3] != k_cache.shape[:3]:
        raise ValueError(
            f"v_cache {tuple(v_cache.shape)}: differs from k_cache {tuple(k_cache.shape)} in its first 3 dims"
        )
    if k_cache.shape[3] != head_dim:
        raise ValueError(f"k_cache.size(3)={k_cache.shape[3]}: differs from q.size(3)={head_dim} (head_dim)")
    if head_dim == 0 or v_cache.shape[3] == 0:
        raise ValueError(f"head dims {head_dim} (q) and {v_cache.shape[3]} (v_cache): need at least 1")
    heads_q, heads_kv = q.shape[2], k_cache.shape[2]
    if heads_kv == 0 or heads_q % heads_kv:
        raise ValueError(
            f"q.size(2)={heads_q} query heads: needs a multiple of k_cache.size(2)={heads_kv} key/value heads"
        )
    if block_table is None:
        if k_cache.shape[0] != batch:
            raise ValueError(f"k_cache.size(0)={k_cache.shape[0]}: differs from q.size(0)={batch} (batch)")
        return
    _tensor("block_table", block_table, 2, "(batch, max_pages_per_sequence)")
    _same("block_table", block_table, q, torch.int32)
    if block_table.shape[0] != batch:
        raise ValueError(f"block_table.size(0)={block_table.shape[0]}: differs from q.size(0)={batch} (batch)")
    page_size = k_cache.shape[1]
    if page_size == 0 or page_size % PAGE_MULTIPLE:
        raise ValueError(f"k_cache.size(1)={page_size} (page_size): needs a positive multiple of {PAGE_MULTIPLE}")


def _check_new(q: Tensor, k_cache: Tensor, v_cache: Tensor, k: Tensor | None, v: Tensor | None, capacity: int) -> int:
    if (k is None) != (v is None):
        given = ("None" if k is None else "given", "None" if v is None else "given")
        raise ValueError(f"k is {given[0]}, v is {given[1]}: pass both or neither")
    if k is None or v is None:
        return 0
    for name, t, cache in (("k", k, k_cache), ("v", v, v_cache)):
        _tensor(name, t, 4, "(batch, seqlen_new, heads_kv, head_dim)")
        _same(name, t, q, q.dtype)
        expected = (q.shape[0], k.shape[1], cache.shape[2], cache.shape[3])
        if tuple(t.shape) != expected:
            raise ValueError(f"{name} {tuple(t.shape)}: needs {expected} (batch, seqlen_new, heads_kv, head_dim)")
    if k.shape[1] > capacity:
        raise ValueError(f"k.size(1)={k.shape[1]} new tokens: exceeds the cache's {capacity} tokens per sequence")
    return k.shape[1]


def _check_rotary(q: Tensor, k: Tensor | None, cos: Tensor | None, sin: Tensor | None, interleaved: object) -> None:
    if not isinstance(interleaved, bool):
        raise TypeError(f"rotary_interleaved={interleaved!r}: needs a bool")
    if cos is None and sin is None:
        return
    if cos is None or sin is None:
        raise ValueError("rotary_cos and rotary_sin: pass both or neither")
    if k is None:
        raise ValueError("rotary_cos/rotary_sin: need the new k and v (rotary is applied to the rows being appended)")
    for name, t in (("rotary_cos", cos), ("rotary_sin", sin)):
        _tensor(name, t, 2, "(max_positions, rotary_dim / 2)")
        _same(name, t, q, None)
        if not t.dtype.is_floating_point:
            raise TypeError(f"{name}.dtype={t.dtype}: needs a floating-point dtype")
    if sin.shape != cos.shape:
        raise ValueError(f"rotary_sin {tuple(sin.shape)}: differs from rotary_cos {tuple(cos.shape)}")
    if not 0 < 2 * cos.shape[1] <= q.shape[3]:
        raise ValueError(
            f"rotary_cos.size(1)={cos.shape[1]}: needs 1 <= rotary_dim / 2 <= head_dim / 2 = {q.shape[3] // 2}"
        )


def _check_num_splits(num_splits: object) -> int:
    if num_splits is None:
        return 0
    if isinstance(num_splits, bool) or not isinstance(num_splits, int) or not 0 <= num_splits <= MAX_SPLITS:
        raise ValueError(
            f"num_splits={num_splits!r}: needs None or an int 0 <= num_splits <= {MAX_SPLITS} (0: heuristic)"
        )
    return num_splits


def attention_with_kvcache(
    q: Tensor,
    k_cache: Tensor,
    v_cache: Tensor,
    k: Tensor | None = None,
    v: Tensor | None = None,
    *,
    cache_seqlens: Tensor,
    block_table: Tensor | None = None,
    rotary_cos: Tensor | None = None,
    rotary_sin: Tensor | None = None,
    rotary_interleaved: bool = False,
    causal: bool = True,
    window: tuple[int, int] | None = None,
    scale: float | None = None,
    num_splits: int | None = None,
    return_lse: bool = False,
) -> Tensor | tuple[Tensor, Tensor]:
    """Attention of new queries against a KV cache, appending the new keys/values first
    (flash_attn's ``flash_attn_with_kvcache``).

    ``q (B, Sq, Hq, D)``; a contiguous cache ``k_cache (B, S_cache, Hkv, D)``, ``v_cache (B, S_cache,
    Hkv, Dv)``, or a paged one ``(num_pages, page_size, Hkv, D)`` with ``block_table (B, max_pages)``
    int32 (page_size a multiple of 16; entries past the pages in use are never read for the result).
    ``cache_seqlens (B,)`` int32: the tokens in each cache before this call. New ``k (B, Snew, Hkv, D)``
    and ``v`` are written **into the caches** (in place) at positions ``cache_seqlens[b] + i``; sequence
    b then attends to its first ``cache_seqlens[b] + Snew`` keys (the caller advances
    ``cache_seqlens`` by Snew afterwards). ``rotary_cos``/``rotary_sin (max_pos, rotary_dim / 2)``
    rotate the first rotary_dim channels of the new q and k at positions ``cache_seqlens[b] + i``
    (``rotary_interleaved``: GPT-J pairs instead of GPT-NeoX halves) before the append.

    ``causal`` and ``window=(left, right)`` are bottom-right aligned: the last query row sees the
    last key. Hq must be a multiple of Hkv (GQA). ``num_splits`` (None or 0: heuristic; 1..128) is
    the number of key ranges the split-KV kernel cuts each sequence into; it changes the result
    only by float32 rounding of the partials' merge. Returns the output
    ``(B, Sq, Hq, Dv)`` and, with ``return_lse=True``, the float32 LSE ``(B, Hq, Sq)``.

    A torch op that mutates the caches (``flashsdpa::fwd_kvcache``): works under
    ``torch.compile(fullgraph=True)`` and in CUDA graphs (no host synchronisation). Not
    differentiable. The values of ``cache_seqlens`` / ``block_table`` are checked on CPU, and on
    CUDA with ``FLASHSDPA_VALIDATE=1`` (a sync); bad values on CUDA otherwise index out of bounds.
    """
    _tensor("q", q, 4, "(batch, seqlen_q, heads_q, head_dim)")
    allowed = selection.HALF_DTYPES if q.is_cuda else _CPU_DTYPES
    if q.dtype not in allowed:
        names = ", ".join(str(d).removeprefix("torch.") for d in allowed)
        raise TypeError(f"q.dtype={q.dtype}: needs one of {names} on {q.device.type}")
    _check_caches(q, k_cache, v_cache, block_table)
    _check_new(q, k_cache, v_cache, k, v, _capacity(k_cache, block_table))
    _tensor("cache_seqlens", cache_seqlens, 1, "(batch,)")
    _same("cache_seqlens", cache_seqlens, q, torch.int32)
    if cache_seqlens.shape[0] != q.shape[0]:
        raise ValueError(f"cache_seqlens.size(0)={cache_seqlens.shape[0]}: differs from q.size(0)={q.shape[0]} (batch)")
    _check_rotary(q, k, rotary_cos, rotary_sin, rotary_interleaved)
    splits = _check_num_splits(num_splits)
    if not isinstance(return_lse, bool):
        raise TypeError(f"return_lse={return_lse!r}: needs a bool")
    mask = masks.make(causal, "bottom_right", window)
    head_dim = q.shape[3]
    if scale is None:
        scale = 1.0 / math.sqrt(head_dim)
    elif isinstance(scale, bool) or not isinstance(scale, (int, float)):
        raise TypeError(f"scale={scale!r}: needs a float or None")
    if q.is_cuda:
        if not _backend.CUDA_KERNELS:
            raise RuntimeError(f"flashsdpa.attention_with_kvcache on {q.device}: {_backend.UNAVAILABLE_REASON}")
        reason = selection.head_dims_reason(head_dim, v_cache.shape[3])
        if reason is not None:
            raise ValueError(reason)
    if (
        q.is_cuda
        and (k is None or type(k) is Tensor)
        and (v is None or type(v) is Tensor)
        and type(cache_seqlens) is Tensor
        and (block_table is None or type(block_table) is Tensor)
        and (rotary_cos is None or type(rotary_cos) is Tensor)
        and (rotary_sin is None or type(rotary_sin) is Tensor)
        and eager.wrapped_reason(q, k_cache, v_cache) is None
    ):
        # Nothing records or traces the call: the op's CUDA code, directly (no LSE unless asked).
        out, lse = _kvcache_cuda(q, k_cache, v_cache, k, v, cache_seqlens, block_table, rotary_cos, rotary_sin,
                                 rotary_interleaved, float(scale), mask, splits, return_lse)  # fmt: skip
    else:
        out, lse = torch.ops.flashsdpa.fwd_kvcache.default(
            q, k_cache, v_cache, k, v, cache_seqlens, block_table, rotary_cos, rotary_sin, rotary_interleaved,
            float(scale), list(mask), splits,
        )  # fmt: skip
    # (lse is a tensor whenever return_lse is set: _kvcache_cuda computes it only when asked)
    return (out, lse) if return_lse else out  # type: ignore[return-value]
