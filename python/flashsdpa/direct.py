# direct.py: the direct API, flashsdpa.attention() and attention_varlen(): their argument checks
# (each error names the argument and the limit), the common call's fast path, and which of
# flashsdpa's ops a call takes (flashsdpa::fwd / fwd_varlen in ops.py, fwd_mods for the score
# modifiers, fwd_masked for an attn_mask, fwd_dropout through features.py). Kept apart from the
# ops, whose four impls each share ops.py's output allocation and checks.
"""The direct API ``flashsdpa.attention`` / ``flashsdpa.attention_varlen``."""

from __future__ import annotations

import math

import torch
from torch import Tensor

from flashsdpa import _backend, eager, features, masks, ops, selection, validation

__all__ = ["attention", "attention_varlen"]

_CPU_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def _scale(scale: float | None, head_dim: int) -> float:
    if scale is None:
        return 1.0 / math.sqrt(head_dim)  # SDPA's default, from the query/key head dim
    if isinstance(scale, bool) or not isinstance(scale, (int, float)):
        raise TypeError(f"scale={scale!r}: needs a float or None")
    return float(scale)


def _check_tensors(query: Tensor, key: Tensor, value: Tensor, rank: int, layout: str) -> None:
    """Type, rank, dtype and device checks shared by attention() and attention_varlen()."""
    named = (("query", query), ("key", key), ("value", value))
    for name, t in named:
        if not isinstance(t, Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dim() != rank:
            raise ValueError(f"{name}.dim()={t.dim()}: needs {rank} {layout}")
    allowed = selection.HALF_DTYPES if query.is_cuda else _CPU_DTYPES
    if query.dtype not in allowed:
        names = ", ".join(str(d).removeprefix("torch.") for d in allowed)
        raise TypeError(f"query.dtype={query.dtype}: needs one of {names} on {query.device.type}")
    for name, t in named[1:]:
        if t.dtype != query.dtype:
            raise TypeError(f"{name}.dtype={t.dtype}: differs from query.dtype={query.dtype}")
        if t.device != query.device:
            raise ValueError(f"{name}.device={t.device}: differs from query.device={query.device}")


def _check_heads(heads_q: int, heads_kv: int, enable_gqa: bool) -> None:
    if heads_kv == 0 and heads_q == 0:
        return
    if heads_kv == 0 or heads_q % heads_kv:
        raise ValueError(f"query heads {heads_q}: must be a multiple of key/value heads {heads_kv}")
    if heads_q != heads_kv and not enable_gqa:
        raise ValueError(f"query heads {heads_q} != key/value heads {heads_kv}: pass enable_gqa=True for GQA/MQA")


def _check_cuda(query: Tensor, head_dim: int, head_dim_v: int) -> None:
    """What our kernels need beyond the math: a CUDA build, a compiled dtype and head dims. The
    GPU itself is checked at run time by the CUDA impl, which also copies rows it cannot read in
    place: neither is traceable by torch.compile, and this function is traced."""
    if not _backend.CUDA_KERNELS:
        raise RuntimeError(f"flashsdpa.attention on {query.device}: {_backend.UNAVAILABLE_REASON}")
    reason = selection.dtype_reason(query.dtype)
    if reason is not None:
        raise TypeError(reason)
    reason = selection.head_dims_reason(head_dim, head_dim_v)
    if reason is not None:
        raise ValueError(reason)


def _check_grad_head_dims(query: Tensor, key: Tensor, value: Tensor, mask: masks.MaskSpec) -> None:
    """Above selection.WIDE_HEAD_DIM a family may run the forward and not the backward (the
    table's bucket limits: the sm90 512 bucket's backward takes dense calls without score modifiers,
    bias or dropout): with inputs that require grad the capability table is asked for the backward
    at the forward, which would otherwise fail only once the gradient is asked for. The table's
    reason is the message's second line."""
    if max(query.shape[3], value.shape[3]) <= selection.WIDE_HEAD_DIM or not torch.is_grad_enabled():
        return
    if not (query.requires_grad or key.requires_grad or value.requires_grad):
        return
    if query.dtype not in selection.HALF_DTYPES or selection.head_dims_reason(query.shape[3], value.shape[3]):
        return  # a dtype or head dims no kernel takes: _check_cuda's error, below
    reason = selection.mask_reason(query, value, mask, varlen=False, backward=True)
    if reason is not None:
        raise ValueError(
            f"head dims {query.shape[3]} (query) and {value.shape[3]} (value) with inputs that require grad: no "
            f"backward of ours takes them here; the forward runs under torch.no_grad() or on detached inputs\n{reason}"
        )


# The direct API's common call (no window, modifier, mask tensor or LSE; causal or not), decided
# before attention()'s argument checks: selection.dense_ok() passing implies everything they and
# _fwd_cuda() would establish (shapes consistent, dtype and head dims compiled, rows readable in
# place, the device served, no empty dimension), and nothing records the call
# (eager.wrapped_reason). The decode loop's call (1 query, GQA 32/8, 8k keys) took 46 us of host
# time on the H200 through the full path against 30 through the SDPA entry's eager path (session
# 8, bench --decode); on CPU with the launch mocked the full path is 18 us, this one 7.
_PLAIN_MASKS: dict[tuple[bool, str], masks.MaskSpec] = {
    (causal, alignment): masks.make(causal, alignment, None) for causal in (False, True) for alignment in masks.ALIGNMENTS
}


def _plain_eager(query: Tensor, key: Tensor, value: Tensor, scale: float, mask: masks.MaskSpec) -> Tensor:
    """attention() on its fast path: the output as _fwd_outputs lays it out, no LSE (nothing reads it)."""
    out = ops._empty_out(query, value.shape[3])
    _backend.launch_fwd(query, key, value, out, None, scale, mask)
    ops._FWD_COUNTS[0] += 1
    return out


def attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    *,
    causal: bool = False,
    causal_alignment: str = "top_left",
    window: tuple[int, int] | None = None,
    scale: float | None = None,
    return_lse: bool = False,
    enable_gqa: bool = True,
    attn_mask: Tensor | None = None,
    dropout_p: float = 0.0,
    softcap: float = 0.0,
    alibi_slopes: Tensor | None = None,
    sinks: Tensor | None = None,
) -> Tensor | tuple[Tensor, Tensor]:
    """Exact attention ``softmax(scale * query @ key^T) @ value`` in SDPA's layout.

    query (B, Hq, Sq, D), key (B, Hkv, Sk, D), value (B, Hkv, Sk, Dv), with Hq a multiple of Hkv
    (grouped-query attention; Hq != Hkv needs ``enable_gqa=True``, the default). Returns the
    output (B, Hq, Sq, Dv) in the layout of ``query`` and, with ``return_lse=True``, the float32
    log-sum-exp (B, Hq, Sq) as well (natural log; +inf for rows that see no key; no gradient).

    ``causal_alignment``: "top_left" (SDPA's ``is_causal``: query i sees keys j <= i) or
    "bottom_right" (the KV-cache alignment: query i sees keys j <= i + Sk - Sq); it also places
    ``window=(left, right)``: query i sees keys diag(i) - left <= j <= diag(i) + right, with diag(i)
    = i (top-left) or i + Sk - Sq (bottom-right) and -1 unbounded (a sliding window of the last
    4096 keys: ``causal=True, window=(4095, 0)``; rows that see no key give 0 and LSE +inf). ``scale``
    defaults to 1 / sqrt(D). On CUDA it runs flashsdpa's kernels (float16 / bfloat16, head dims
    multiples of 8 up to 256, and up to 512 on Hopper; inputs whose rows are not unit-stride and
    16-byte aligned are copied first); on CPU the float32 blockwise reference.
    Differentiable and ``torch.compile(fullgraph=True)``-friendly. Bad arguments raise TypeError or
    ValueError naming the argument and the limit.

    Score modifiers (our kernels: the capability table's family, sm90 on Hopper both ways; on
    CPU the reference; differentiable, with the slopes' and sinks' gradients): ``softcap`` (scores
    ``softcap * tanh(s / softcap)`` before mask and bias); ``alibi_slopes`` float32 (Hq,) or (B, Hq)
    (scores gain ``-slope * |i + Sk - Sq - j|``); ``sinks`` float32 or query.dtype (Hq,), a learnable
    logit per head in each row's softmax denominator with no value row. They combine with causal masks,
    windows and GQA. ``attn_mask`` bool (True = attend) or additive (its gradient), broadcasting to
    (B, Hq, Sq, Sk): our kernels (in q's dtype); ``dropout_p`` alone: our kernels too (ops_dropout.py).
    """
    if (window is None and not return_lse and attn_mask is None and alibi_slopes is None and sinks is None
            and type(causal) is bool and type(causal_alignment) is str and eager.wrapped_reason(query, key, value) is None
            and selection.dense_ok(query, key, value) and (enable_gqa or query.shape[1] == key.shape[1])
            and not dropout_p and not softcap and (causal, causal_alignment) in _PLAIN_MASKS):  # fmt: skip
        return _plain_eager(query, key, value, _scale(scale, query.shape[3]), _PLAIN_MASKS[causal, causal_alignment])
    _check_tensors(query, key, value, 4, "(batch, heads, seq_len, head_dim)")
    batch, heads_q, _, head_dim = query.shape
    for name, t in (("key", key), ("value", value)):
        if t.shape[0] != batch:
            raise ValueError(f"{name}.size(0)={t.shape[0]}: differs from query.size(0)={batch} (batch)")
    if value.shape[1] != key.shape[1] or value.shape[2] != key.shape[2]:
        raise ValueError(f"value {tuple(value.shape)}: differs from key {tuple(key.shape)} in heads or sequence length")
    if key.shape[3] != head_dim:
        raise ValueError(f"key.size(3)={key.shape[3]}: differs from query.size(3)={head_dim} (head_dim)")
    if head_dim == 0 or value.shape[3] == 0:
        raise ValueError(f"head dims {head_dim} (query) and {value.shape[3]} (value): need at least 1")
    _check_heads(heads_q, key.shape[1], enable_gqa)
    mask = masks.make(causal, causal_alignment, window)
    plain = attn_mask is None and not dropout_p and not softcap and alibi_slopes is None and sinks is None
    if query.is_cuda and _backend.CUDA_KERNELS:  # (without kernels _check_cuda says so)
        _check_grad_head_dims(query, key, value, mask)
    if not plain:
        target = (batch, heads_q, query.shape[2], key.shape[2])
        extras = features.check(query, target, batch, attn_mask, dropout_p, softcap, alibi_slopes, sinks)
        if features.kernel_served(extras):  # softcap, ALiBi, sinks: flashsdpa::fwd_mods (ops_mods.py)
            if query.is_cuda:
                _check_cuda(query, head_dim, value.shape[3])
            out, lse = torch.ops.flashsdpa.fwd_mods.default(
                query, key, value, None, None, 0, 0, _scale(scale, head_dim), mask, extras.softcap,
                extras.alibi_slopes, extras.sinks,
            )  # fmt: skip
        elif query.is_cuda and extras.attn_mask is not None and extras.dropout_p == 0.0:  # ops_masks.py
            _check_cuda(query, head_dim, value.shape[3])
            bias = features.additive(extras.attn_mask, query.dtype)
            out, lse = torch.ops.flashsdpa.fwd_masked.default(query, key, value, bias, _scale(scale, head_dim), mask,
                                                              extras.softcap, extras.alibi_slopes, extras.sinks)
        else:
            out, lse = features.attention(query, key, value, mask, _scale(scale, head_dim), extras)
        return (out, lse) if return_lse else out
    if query.is_cuda:
        _check_cuda(query, head_dim, value.shape[3])
        if eager.wrapped_reason(query, key, value) is None:  # nothing to record: the op's CUDA code, directly
            out, lse = ops._fwd_cuda(query, key, value, _scale(scale, head_dim), list(mask))
            return (out, lse) if return_lse else out
    out, lse = torch.ops.flashsdpa.fwd.default(query, key, value, _scale(scale, head_dim), mask)
    return (out, lse) if return_lse else out


def attention_varlen(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    cu_seqlens_q: Tensor,
    cu_seqlens_k: Tensor,
    max_seqlen_q: int,
    max_seqlen_k: int,
    *,
    causal: bool = False,
    causal_alignment: str = "top_left",
    window: tuple[int, int] | None = None,
    scale: float | None = None,
    return_lse: bool = False,
    validate: bool = False,
    attn_mask: Tensor | None = None,
    dropout_p: float = 0.0,
    softcap: float = 0.0,
    alibi_slopes: Tensor | None = None,
    sinks: Tensor | None = None,
) -> Tensor | tuple[Tensor, Tensor]:
    """Attention over a batch of packed sequences of different lengths.

    query (total_q, Hq, D), key (total_k, Hkv, D), value (total_k, Hkv, Dv); sequence b owns query
    rows ``cu_seqlens_q[b]:cu_seqlens_q[b + 1]`` and key rows ``cu_seqlens_k[b]:cu_seqlens_k[b + 1]``
    (int32, B + 1 entries, starting at 0). ``max_seqlen_q/k`` bound the lengths. Returns the output
    (total_q, Hq, Dv) and, with ``return_lse=True``, the float32 LSE (Hq, total_q) (PyTorch's varlen
    format). Causal masks and windows apply per sequence. Otherwise as :func:`attention`.
    Offsets must start at 0, not decrease and end within the rows, and ``max_seqlen_q/k`` be at least
    the longest sequence: checked on CPU always, for CUDA metadata with ``validate=True`` or
    ``FLASHSDPA_VALIDATE=1`` (reading the offsets synchronises the stream).
    The features are :func:`attention`'s; ``attn_mask`` broadcasts to (Hq, total_q, total_k) and
    sequence b reads its diagonal block; ``alibi_slopes`` is (Hq,) or (B, Hq).
    """
    _check_tensors(query, key, value, 3, "(total, heads, head_dim)")
    for name, t in (("cu_seqlens_q", cu_seqlens_q), ("cu_seqlens_k", cu_seqlens_k)):
        if not isinstance(t, Tensor) or t.dtype != torch.int32 or t.dim() != 1 or t.device != query.device:
            raise ValueError(f"{name}: needs a 1-D int32 tensor on {query.device}")
    if cu_seqlens_q.shape[0] != cu_seqlens_k.shape[0] or cu_seqlens_q.shape[0] < 2:
        raise ValueError(
            f"cu_seqlens_q has {cu_seqlens_q.shape[0]} entries, cu_seqlens_k {cu_seqlens_k.shape[0]}: "
            f"need the same number, batch + 1 >= 2"
        )
    head_dim = query.shape[2]
    if key.shape[2] != head_dim:
        raise ValueError(f"key.size(2)={key.shape[2]}: differs from query.size(2)={head_dim} (head_dim)")
    if value.shape[0] != key.shape[0] or value.shape[1] != key.shape[1]:
        raise ValueError(f"value {tuple(value.shape)}: differs from key {tuple(key.shape)} in rows or heads")
    if head_dim == 0 or value.shape[2] == 0:
        raise ValueError(f"head dims {head_dim} (query) and {value.shape[2]} (value): need at least 1")
    _check_heads(query.shape[1], key.shape[1], True)
    # The structure here (traceable); the values in the op's impls, or now when asked (a sync).
    validation.check_varlen(
        query, key, cu_seqlens_q, cu_seqlens_k, None, max_seqlen_q, max_seqlen_k, values=validate
    )
    mask = masks.make(causal, causal_alignment, window)
    if attn_mask is not None or dropout_p or softcap or alibi_slopes is not None or sinks is not None:
        target = (query.shape[1], query.shape[0], key.shape[0])
        batch = cu_seqlens_q.shape[0] - 1
        extras = features.check(query, target, batch, attn_mask, dropout_p, softcap, alibi_slopes, sinks)
        if features.kernel_served(extras):
            if query.is_cuda:
                _check_cuda(query, head_dim, value.shape[2])
            out, lse = torch.ops.flashsdpa.fwd_mods.default(
                query, key, value, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, _scale(scale, head_dim),
                mask, extras.softcap, extras.alibi_slopes, extras.sinks,
            )  # fmt: skip
        else:
            out, lse = features.attention_varlen(
                query, key, value, cu_seqlens_q, cu_seqlens_k, mask, _scale(scale, head_dim), extras
            )
        return (out, lse) if return_lse else out
    if query.is_cuda:
        _check_cuda(query, head_dim, value.shape[2])
    out, lse = torch.ops.flashsdpa.fwd_varlen.default(
        query, key, value, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, _scale(scale, head_dim), mask
    )
    return (out, lse) if return_lse else out
