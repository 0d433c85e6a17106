# selection.py: which attention calls our kernels serve, and why not when they do not.
#
# Owns every rule of the form "needs X": the per-call predicates the SDPA routers, the SDPA entry's eager
# path and the direct API run (dense_ok / dense_reason, varlen_reason), the full explanation behind
# explain(), and the choice of the calls the SDPA entry (entry.py) sends straight to our op
# (entry.direct_causal_mode). Each reason is one sentence naming the argument and the limit, so that
# explain(), log lines and errors read the same; counting and reporting fallbacks is reporting.py's.
# Over 500 lines: the predicates and explain() read the same rules in two forms (the fast bool
# checks of the per-call path and the reason-building ones), and keeping them side by side is what
# keeps them in step.
"""Which attention calls flashsdpa's kernels serve, and why not."""

from __future__ import annotations

import torch
from torch import Tensor

from flashsdpa import _backend, masks

try:  # torch.nn.attention.bias (2.3+): causal_upper_left / causal_lower_right masks
    from torch.nn.attention.bias import CausalBias, CausalVariant
except ImportError:  # pragma: no cover - every supported torch has it
    CausalBias = CausalVariant = None  # type: ignore[assignment,misc]

__all__ = [
    "HALF_DTYPES",
    "dense_ok",
    "dense_reason",
    "dtype_reason",
    "explain",
    "head_dims_reason",
    "kernel_reasons",
    "layout_reason",
    "mask_reason",
    "servable",
    "varlen_reason",
]

HALF_DTYPES = (torch.float16, torch.bfloat16)

# Above it (the sm90 forward's 512 bucket) the table decides per problem: mask_reason asks it.
WIDE_HEAD_DIM = _backend.WIDE_HEAD_DIM
_DTYPE_FLAG = {"float16": "fp16", "bfloat16": "bf16"}  # FLASHSDPA_DTYPES spelling
_Bits = tuple[list[str], int]  # explain()'s parts: reasons, feature bits


# ---- the dense predicate: the routers' hot path ---------------------------------------------------


def dense_ok(query: Tensor, key: Tensor, value: Tensor) -> bool:
    """Whether our kernels run attention on these (B, H, S, D) views as they are: dense_reason() is
    None, without building a reason on failure (for callers that quietly take another road, such
    as the SDPA entry's eager path, where a float32 call must not pay for a message it never shows).

    The caller has settled everything that is not about the tensors (dropout, masks, ...). Runs on
    every routed SDPA call: only attribute reads and integer tests.
    """
    if not _backend.CUDA_KERNELS:
        return False
    dtype = query.dtype
    if dtype not in _backend.DTYPE_CODES or key.dtype is not dtype or value.dtype is not dtype or not query.is_cuda:
        return False
    # Unpacking checks the rank (ValueError otherwise: free when it does not raise, on 3.11+) and
    # costs less than len() and indexing (dense_ok 2.04 -> 1.82 us on CPU with the CUDA lookalike,
    # session 8).
    try:
        batch, heads_q, seqlen_q, head_dim = query.shape
        key_batch, heads_kv, seqlen_k, key_dim = key.shape
        value_batch, value_heads, value_len, head_dim_v = value.shape
        q0, q1, q2, q3 = query.stride()
        k0, k1, k2, k3 = key.stride()
        v0, v1, v2, v3 = value.stride()
    except ValueError:
        return False
    if (
        batch != key_batch
        or batch != value_batch
        or heads_kv != value_heads
        or seqlen_k != value_len
        or head_dim != key_dim
        or not (heads_kv and batch and heads_q and seqlen_q and seqlen_k)
        or heads_q % heads_kv
        or (head_dim, head_dim_v) not in _backend.HEAD_DIM_PAIRS
    ):
        return False
    # Rows must start on 16-byte boundaries (cp.async): strides and storage offsets multiples of 8
    # two-byte elements. One OR of all of them, tested once.
    misaligned = (
        q0 | q1 | q2 | k0 | k1 | k2 | v0 | v1 | v2 | query.storage_offset() | key.storage_offset() | value.storage_offset()  # type: ignore[operator]
    ) & 7  # (storage_offset is typed int | SymInt; the eager tensors here give ints)
    if misaligned or q3 != 1 or k3 != 1 or v3 != 1:
        return False
    device = query.get_device()
    if key.get_device() != device or value.get_device() != device:
        return False
    ok = _backend._DEVICE_OK.get(device)
    return ok or (ok is None and _backend.device_ok(device))


def dense_reason(query: Tensor, key: Tensor, value: Tensor) -> str | None:
    """Why our kernels cannot run attention on these (B, H, S, D) views as they are; None if they can.

    dense_ok() decides; on failure the message comes from kernel_reasons(), the one full statement
    of the rules. The two must agree (tests/test_selection.py checks them against each other over
    a grid of inputs).
    """
    if dense_ok(query, key, value):
        return None
    reasons = kernel_reasons(query, key, value, first=True)
    return reasons[0] if reasons else "internal error: the selection's fast and full checks disagree"


def servable(query: Tensor, key: Tensor, value: Tensor) -> bool:
    """Whether our kernels run attention on these (B, H, S, D) tensors, layout aside (flashsdpa's
    own ops copy rows they cannot read in place).

    Safe to trace with torch.compile: it reads only what Dynamo folds into guards (dtypes, device,
    sizes) and plain Python data (device facts are cached when flashsdpa activates), never
    storage offsets, and builds no message.
    Agrees with kernel_reasons(..., layout=False) == [] (tested over a grid of inputs).
    """
    if not _backend.CUDA_KERNELS or query.dim() != 4 or key.dim() != 4 or value.dim() != 4:
        return False
    dtype, device = query.dtype, query.device
    if dtype not in _backend.DTYPE_CODES or key.dtype != dtype or value.dtype != dtype or not query.is_cuda:
        return False
    if key.device != device or value.device != device:
        return False
    ok = _backend._DEVICE_OK.get(device.index)  # primed by enable(): a dict read when traced
    if not (ok or (ok is None and _backend.device_ok(device.index))):
        return False
    batch, heads_q, seqlen_q, head_dim = query.shape
    heads_kv, seqlen_k = key.shape[1], key.shape[2]
    return bool(
        batch == key.shape[0] == value.shape[0]
        and heads_kv == value.shape[1]
        and seqlen_k == value.shape[2]
        and head_dim == key.shape[3]
        and heads_kv
        and heads_q % heads_kv == 0
        and batch
        and heads_q
        and seqlen_q
        and seqlen_k
        and (head_dim, value.shape[3]) in _backend.HEAD_DIM_PAIRS
    )


def _dims_label(head_dim: int, head_dim_v: int) -> str:
    return f"head_dim={head_dim}" if head_dim == head_dim_v else f"head_dim={head_dim}, value head_dim={head_dim_v}"


def half_dtype_reason(dtype: torch.dtype) -> str:
    """dtype_reason's words for a dtype no kernel of ours takes (neither float16 nor bfloat16)."""
    return f"query.dtype={dtype}: needs float16 or bfloat16"


def dtype_reason(dtype: torch.dtype) -> str | None:
    """Why the kernels of this build cannot take ``dtype``, or None."""
    if dtype not in HALF_DTYPES:
        return half_dtype_reason(dtype)
    if _backend.CUDA_KERNELS and dtype not in _backend.DTYPE_CODES:
        name = str(dtype).removeprefix("torch.")
        return (
            f"query.dtype={dtype}: this build compiled {_backend.BUILD_INFO['dtypes']}; "
            f"rebuild with FLASHSDPA_DTYPES including {_DTYPE_FLAG[name]}"
        )
    return None


def head_dims_reason(head_dim: int, head_dim_v: int) -> str | None:
    """Why no compiled kernel takes this (query/key, value) head-dim pair, or None."""
    for label, d in (("head_dim", head_dim), ("value head_dim", head_dim_v)):
        if d > _backend.MAX_HEAD_DIM:
            return f"{label}={d}: exceeds {_backend.MAX_HEAD_DIM}"
        if d <= 0 or d % 8:
            return f"{label}={d}: needs a positive multiple of 8"
    if _backend.CUDA_KERNELS and (head_dim, head_dim_v) not in _backend.HEAD_DIM_PAIRS:
        return (
            f"{_dims_label(head_dim, head_dim_v)}: this build compiled head dims {_backend.BUILD_INFO['head_dims']}; "
            f"rebuild with FLASHSDPA_HEAD_DIMS including {max(head_dim, head_dim_v)} or larger"
        )
    return None


def layout_reason(name: str, t: Tensor, row_dims: tuple[int, ...]) -> str | None:
    """Why the kernels cannot read ``t`` (argument ``name``) in place: they need a unit stride
    along the head dim and rows (indexed by ``row_dims``) on 16-byte boundaries."""
    stride = t.stride()
    if stride[-1] != 1:
        return f"last dimension stride {stride[-1]} of {name}: needs 1"
    if not _backend.rows_aligned(t, row_dims):
        return (
            f"{name} strides {tuple(stride[d] for d in row_dims)} and storage offset {t.storage_offset()}: "
            f"need multiples of 8 elements (16-byte aligned rows)"
        )
    return None


def kernel_reasons(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    *,
    first: bool = False,
    head_dims: tuple[int, int] | None = None,
    layout: bool = True,
) -> list[str]:
    """Everything that stops our kernels from running attention on these (B, H, S, D) views.

    ``first``: stop at the first reason (the routers need one). ``head_dims``: judge these
    (head_dim, value head_dim) instead of the tensors' own, and skip the layout checks: what
    SDPA does when it pads the head dim to a multiple of 8 (a fresh copy) before its flash op.
    ``layout=False``: skip the layout checks (flashsdpa's own ops copy such inputs).
    """
    reasons: list[str] = []

    def fail(message: str | None) -> bool:
        """Record a reason (if any); True when the caller should stop here."""
        if message is None:
            return False
        reasons.append(message)
        return first

    named = (("query", query), ("key", key), ("value", value))
    if not _backend.CUDA_KERNELS and fail(_backend.UNAVAILABLE_REASON):
        return reasons
    for name, t in named:
        if t.dim() != 4 and fail(f"{name}.dim()={t.dim()}: needs 4 (batch, heads, seq_len, head_dim)"):
            return reasons
    if any(t.dim() != 4 for _, t in named):
        return reasons  # everything below reads four dimensions

    dtype = query.dtype
    if fail(dtype_reason(dtype)):
        return reasons
    for name, t in named[1:]:
        if t.dtype != dtype and fail(f"{name}.dtype={t.dtype}: differs from query.dtype={dtype}"):
            return reasons

    if not query.is_cuda:
        if fail(f"device {query.device}: needs a CUDA device"):
            return reasons
    elif _backend.CUDA_KERNELS and fail(_backend.device_reason(query.get_device())):
        return reasons
    for name, t in named[1:]:
        if t.device != query.device and fail(f"{name}.device={t.device}: differs from query.device={query.device}"):
            return reasons

    batch, heads_q, seqlen_q, head_dim = query.shape
    heads_kv, seqlen_k = key.shape[1], key.shape[2]
    for name, t in named[1:]:
        if t.shape[0] != batch and fail(f"{name}.size(0)={t.shape[0]}: differs from query.size(0)={batch} (batch)"):
            return reasons
    if value.shape[1] != heads_kv and fail(
        f"value.size(1)={value.shape[1]}: differs from key.size(1)={heads_kv} (heads)"
    ):
        return reasons
    if value.shape[2] != seqlen_k and fail(
        f"value.size(2)={value.shape[2]}: differs from key.size(2)={seqlen_k} (key sequence length)"
    ):
        return reasons
    if key.shape[3] != head_dim and fail(
        f"key.size(3)={key.shape[3]}: differs from query.size(3)={head_dim} (head_dim)"
    ):
        return reasons
    if (heads_kv == 0 or heads_q % heads_kv) and fail(
        f"query heads {heads_q}: must be a multiple of key/value heads {heads_kv}"
    ):
        return reasons
    for label, size in (("batch", batch), ("heads", heads_q), ("seqlen_q", seqlen_q), ("seqlen_k", seqlen_k)):
        if size == 0 and fail(f"{label}=0: empty inputs are left to PyTorch's kernels"):
            return reasons

    if fail(head_dims_reason(*((head_dim, value.shape[3]) if head_dims is None else head_dims))):
        return reasons
    if not reasons and max(head_dim, value.shape[3]) > WIDE_HEAD_DIM:  # the table's wide buckets: some GPUs
        grad = any(t.requires_grad for _, t in named)
        if fail(mask_reason(query, value, masks.NO_MASK, varlen=False, backward=grad)):
            return reasons
    if layout and head_dims is None:
        for name, t in named:
            if fail(layout_reason(name, t, (0, 1, 2))):
                return reasons
    return reasons


# ---- the mask predicate: which family serves a window ----------------------------------------------


def mask_reason(
    query: Tensor, value: Tensor, mask: masks.MaskSpec, *, varlen: bool | int, backward: bool = False
) -> str | None:
    """Why no kernel family serves ``mask`` for these tensors on their GPU (the capability table,
    asked once per problem and cached), or None. No mask and causal masks are served by every
    family that serves the tensors at all, so only windows are looked up, and head dims above
    WIDE_HEAD_DIM (which some families serve in one direction, on some GPUs, in some layouts: the
    sm90 forward's 512 bucket). The caller has checked the tensors (dense_reason / varlen_reason)."""
    kind = masks.kind(mask)
    if kind != 3 and max(query.shape[-1], value.shape[-1]) <= WIDE_HEAD_DIM:
        return None
    family, *_, why = _backend.select(
        query.get_device(), _backend.DTYPE_CODES[query.dtype], query.shape[-1], value.shape[-1], kind, varlen, backward
    )
    if family is not None:
        return None
    return f"window=({mask[0]}, {mask[1]}): {why}" if kind == 3 else why


# ---- the score-modifier predicate (softcap, ALiBi, sinks) -----------------------------------------


def features_reason(
    query: Tensor, value: Tensor, mask: masks.MaskSpec, bits: int, *, varlen: bool | int, backward: bool = False
) -> str | None:
    """Why no kernel family serves the score modifiers ``bits`` (_backend.FEATURE_BITS) with ``mask``
    for these tensors on their GPU (``varlen``: the layout, 2 decode), or None; the capability
    table's verdict, cached per problem. The caller has checked the tensors."""
    if not bits:
        return mask_reason(query, value, mask, varlen=varlen, backward=backward)
    family, *_, why = _backend.select(
        query.get_device(), _backend.DTYPE_CODES[query.dtype], query.shape[-1], value.shape[-1], masks.kind(mask),
        varlen, backward, bits,
    )  # fmt: skip
    if family is not None:
        return None
    names = ", ".join(n for n, b in _backend.FEATURE_BITS.items() if bits & b)
    return f"{names}: {why}"


def dropout_reason(
    query: Tensor, value: Tensor, mask: masks.MaskSpec, dropout_p: object, *, varlen: bool, backward: bool = False
) -> str | None:
    """Why no kernel family of ours runs this call's dropout (PyTorch's FlashAttention-2 mask,
    python/flashsdpa/dropout.py's generator use), or None. Dense calls only: PyTorch's varlen
    kernel offsets the mask per sequence start, which no test of ours pins down yet. The caller
    has checked the tensors; ``dropout_p`` > 0."""
    if type(dropout_p) is not float or not 0.0 < dropout_p < 1.0:
        return f"dropout_p={dropout_p!r}: needs a float in (0, 1)"
    if varlen:
        return f"dropout_p={dropout_p} with packed (varlen) inputs: not served (dense inputs are)"
    why = features_reason(query, value, mask, _backend.FEATURE_BITS["dropout"], varlen=False, backward=backward)
    return None if why is None else f"dropout_p={dropout_p}: {why}"


def feature_families() -> list[str]:
    """The compiled kernel families that serve score modifiers, with the ones they serve."""
    return [
        f"{f['family']} ({', '.join(f.get('features', []))})" for f in _backend.capabilities() if f.get("features")
    ]


# ---- the varlen predicate (aten::_flash_attention_forward with cum_seq_q) -------------------------


def varlen_reason(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    cu_seqlens_q: Tensor,
    cu_seqlens_k: Tensor,
    seqused_k: Tensor | None,
    max_seqlen_q: int,
    max_seqlen_k: int,
) -> str | None:
    """Why our kernels cannot run attention on packed (total, H, D) rows; None if they can.

    Reached only by packed calls (nested-tensor SDPA, varlen_attn), so it favours one plain
    sequence of early returns over the dense predicate's fused fast path.
    """
    if not _backend.CUDA_KERNELS:
        return _backend.UNAVAILABLE_REASON
    named = (("query", query), ("key", key), ("value", value))
    for name, t in named:
        if t.dim() != 3:
            return f"{name}.dim()={t.dim()}: packed sequences need 3 (total, heads, head_dim)"
    dtype = query.dtype
    reason = dtype_reason(dtype)
    if reason is not None:
        return reason
    if not query.is_cuda:
        return f"device {query.device}: needs a CUDA device"
    device = query.get_device()
    for name, t in named[1:]:
        if t.dtype != dtype:
            return f"{name}.dtype={t.dtype}: differs from query.dtype={dtype}"
        if t.device != query.device:
            return f"{name}.device={t.device}: differs from query.device={query.device}"
    reason = _backend.device_reason(device)
    if reason is not None:
        return reason
    heads_q, heads_kv, head_dim = query.shape[1], key.shape[1], query.shape[2]
    if value.shape[0] != key.shape[0] or value.shape[1] != heads_kv:
        return f"value {tuple(value.shape)}: differs from key {tuple(key.shape)} in rows or heads"
    if key.shape[2] != head_dim:
        return f"key.size(2)={key.shape[2]}: differs from query.size(2)={head_dim} (head_dim)"
    if heads_kv == 0 or heads_q % heads_kv:
        return f"query heads {heads_q}: must be a multiple of key/value heads {heads_kv}"
    reason = head_dims_reason(head_dim, value.shape[2])
    if reason is not None:
        return reason
    if query.shape[0] == 0 or key.shape[0] == 0 or max_seqlen_q < 1 or max_seqlen_k < 1:
        return "empty packed sequences are left to PyTorch's kernels"
    for name, t in named:
        reason = layout_reason(name, t, (0, 1))
        if reason is not None:
            return reason
    batch = cu_seqlens_q.shape[0] - 1 if cu_seqlens_q.dim() == 1 else 0
    for name, t in (("cum_seq_q", cu_seqlens_q), ("cum_seq_k", cu_seqlens_k)):
        if t.dtype != torch.int32 or t.dim() != 1 or t.stride(0) != 1 or t.device != query.device:
            return f"{name}: needs a 1-D contiguous int32 tensor on {query.device}"
        if batch < 1 or t.shape[0] != batch + 1:
            return f"{name} has {t.shape[0]} entries: needs batch + 1 >= 2, as many as cum_seq_q"
    if seqused_k is not None and (
        seqused_k.dtype != torch.int32
        or seqused_k.dim() != 1
        or seqused_k.stride(0) != 1
        or seqused_k.shape[0] != batch
        or seqused_k.device != query.device
    ):
        return f"seqused_k: needs a 1-D contiguous int32 tensor of {batch} entries on {query.device}"
    return None


# ---- SDPA-level decisions ------------------------------------------------------------------------


def _is_causal_bias(attn_mask: object) -> bool:
    return CausalBias is not None and isinstance(attn_mask, CausalBias)


def window_families() -> list[str]:
    """The compiled kernel families that serve sliding windows, with the directions they serve."""
    return [
        f"{f['family']} ({', '.join(f['directions'])})" for f in _backend.capabilities() if "window" in f["masks"]
    ]


def _window_reasons(query: Tensor, value: Tensor, is_causal: bool, window: tuple[int, int]) -> list[str]:
    """explain()'s window part: the window's own spelling, then whether a family serves it here."""
    try:
        spec = masks.make(is_causal, "top_left", window)
    except ValueError as error:
        return [str(error)]
    if masks.kind(spec) != 3:
        return []  # (-1, -1) or causal-equivalent: no window left
    if not query.is_cuda or query.dim() != 4 or query.dtype not in _backend.DTYPE_CODES:
        return []  # the tensor checks above say why, on any build: the window adds nothing there
    served = window_families()
    if not served:
        return [f"window={tuple(window)}: no compiled kernel family serves sliding windows"]
    backward = query.requires_grad or value.requires_grad
    why = mask_reason(query, value, spec, varlen=False, backward=backward)
    return [f"{why}; families serving windows: {', '.join(served)}"] if why else []


def _features_reasons(
    query: Tensor, key: Tensor, value: Tensor, is_causal: bool, window: tuple[int, int] | None, bits: int
) -> list[str]:
    """explain()'s score-modifier part: whether a family serves them at all, and with this problem."""
    if not bits:
        return []
    names = ", ".join(a for a, b in zip(("softcap", "alibi_slopes", "sinks", "attn_mask"), (1, 2, 4, 8)) if bits & b)
    if not _backend.CUDA_KERNELS or not any(f.get("features") for f in _backend.capabilities()):
        return [f"{names} given: no compiled kernel family serves score modifiers (the direct API runs them on CPU)"]
    if not query.is_cuda or query.dim() != 4 or value.dim() != 4 or query.dtype not in _backend.DTYPE_CODES:
        return []  # the tensor checks say why; the modifiers themselves are served (see info)
    if dense_reason(query, key, value) is not None:
        return []
    try:
        spec = masks.make(is_causal, "top_left", window)
    except ValueError:
        return []  # the window's own reason is reported
    backward = query.requires_grad or value.requires_grad
    why = features_reason(query, value, spec, bits, varlen=False, backward=backward)
    return [f"{why}; families serving score modifiers: {', '.join(feature_families())}"] if why else []


def _dropout_reasons(
    query: Tensor, key: Tensor, value: Tensor, dropout_p: float, is_causal: bool, bits: int
) -> list[str]:
    """explain()'s dropout part: served alone (no attn_mask, no modifiers) where a family lists it."""
    if bits:
        return [f"dropout_p={dropout_p} with attn_mask or score modifiers: no kernel serves both"]
    if not _backend.CUDA_KERNELS or not any("dropout" in f.get("features", []) for f in _backend.capabilities()):
        return [f"dropout_p={dropout_p}: no compiled kernel family serves dropout"]
    if not query.is_cuda or query.dim() != 4 or value.dim() != 4 or query.dtype not in _backend.DTYPE_CODES:
        return []  # the tensor checks say why
    if dense_reason(query, key, value) is not None:
        return []
    backward = query.requires_grad or key.requires_grad or value.requires_grad
    mask = masks.CAUSAL_BOTTOM_RIGHT if is_causal else masks.NO_MASK
    why = dropout_reason(query, value, mask, float(dropout_p), varlen=False, backward=backward)
    return [why] if why else []


def decode_sized_mask_reason(query: Tensor, value: Tensor, mask: masks.MaskSpec) -> str | None:
    """Why a masked call of <= DECODE_MAX_SEQLEN_Q query rows is left to PyTorch, or None (routers_masked.py)."""
    if query.shape[2] > _backend.DECODE_MAX_SEQLEN_Q:
        return None
    if not query.is_cuda or query.dtype not in _backend.DTYPE_CODES or query.dim() != 4 or value.dim() != 4:
        return None  # not a question for the table: the tensor checks after this one give the reason
    why = features_reason(query, value, mask, _backend.FEATURE_BITS["bias"], varlen=_backend.LAYOUT_DECODE)
    return why and (f"a masked call with {query.shape[2]} query rows (<= {_backend.DECODE_MAX_SEQLEN_Q}, "
                    f"decode-sized): the split-KV decode kernel does not take its mask here ({why})")


def _attn_mask_reasons(query: Tensor, key: Tensor, value: Tensor, attn_mask: object, softcap: float) -> _Bits:
    """explain()'s attn_mask part: (reasons, feature bits). SDPA sends masked calls to its cuDNN or
    efficient op, whose routers (routers_masked.py) run our kernels with the mask as an additive bias
    in the query's dtype; the efficient op takes no grouped-query call."""
    if not isinstance(attn_mask, Tensor):
        return [f"attn_mask of type {type(attn_mask).__name__}: needs a tensor"], 0
    if attn_mask.dtype not in (torch.bool, query.dtype):
        return [f"attn_mask.dtype={attn_mask.dtype}: needs torch.bool or query.dtype={query.dtype}"], 0
    if query.dim() == 4 and key.dim() == 4:
        target = (query.shape[0], query.shape[1], query.shape[2], key.shape[2])
        if attn_mask.dim() > 4 or any(n not in (1, t) for n, t in zip(reversed(attn_mask.shape), reversed(target))):
            return [f"attn_mask {tuple(attn_mask.shape)}: does not broadcast to (B, H, Sq, Sk) = {target}"], 0
        if query.shape[1] != key.shape[1]:
            return [f"attn_mask with grouped-query attention ({query.shape[1]} query heads, {key.shape[1]} key heads): "
                    "PyTorch's masked SDPA ops take equal heads (flashsdpa.attention(attn_mask=...) serves it)"], 0
    if softcap:
        return ["softcap with attn_mask: not served yet (the softcap backward would re-read the bias)"], 0
    if query.dim() == 4 and (why := decode_sized_mask_reason(query, value, masks.NO_MASK)) is not None:
        return [f"attn_mask{why.removeprefix('a masked call')} (flashsdpa.attention(attn_mask=...) serves it)"], 0
    return [], _backend.FEATURE_BITS["bias"]


def explain(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attn_mask: Tensor | None = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
    enable_gqa: bool = False,
    *,
    window: tuple[int, int] | None = None,
    softcap: float = 0.0,
    alibi_slopes: Tensor | None = None,
    sinks: Tensor | None = None,
) -> list[str]:
    """Why ``F.scaled_dot_product_attention(query, key, value, ...)`` with these arguments would not
    run flashsdpa's kernels inside ``flashsdpa.enable()``; an empty list means it would.

    Takes SDPA's arguments. Each reason names the argument and the limit, e.g.
    ``"dropout_p=0.1: dropout is not supported (needs 0.0)"``. ``scale`` never disqualifies a call.
    ``window=(left, right)`` asks about a sliding window as ``aten::_flash_attention_forward`` and the
    direct API take it (SDPA itself has none): which kernel families serve windows, and whether one
    serves this problem. ``softcap``, ``alibi_slopes`` and ``sinks`` ask about the direct API's
    features (flashsdpa.attention, forward and backward; SDPA has none of them): whether a kernel
    family serves them with this problem (the sm80 family does; sm90 does not yet, so such calls
    take sm80 on a Hopper GPU). ``alibi_slopes`` through ``aten::_flash_attention_forward`` (its
    keyword) is forward-only: that op's backward takes no slopes, so a call whose inputs require grad
    is left to PyTorch there (logged with that reason). ``attn_mask`` (bool or the query's dtype, any
    shape broadcasting to (B, H, Sq, Sk)) is served through SDPA's masked ops (cuDNN, efficient) and
    the direct API; ``dropout_p`` is served in dense calls of SDPA's flash op and
    ``aten::_flash_attention_forward`` with PyTorch's FlashAttention-2 mask (the same mask for
    the same generator state) by the families whose table lists "dropout", without attn_mask or
    the direct API's modifiers.
    """
    del scale  # any scale is served; the parameter mirrors SDPA's signature
    window_reasons = _window_reasons(query, value, is_causal, window) if window is not None else []
    for name, t in (("query", query), ("key", key), ("value", value)):
        if not isinstance(t, Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if query.is_nested or key.is_nested or value.is_nested:
        return [
            "nested tensors: explain() covers dense (B, H, S, D) inputs; nested SDPA calls reach "
            "aten::_flash_attention_forward, whose decisions are logged at DEBUG (logger 'flashsdpa')"
        ]
    reasons: list[str] = []
    causal_bias = _is_causal_bias(attn_mask)
    mask_bits = 0
    if attn_mask is not None and not causal_bias:
        mask_reasons, mask_bits = _attn_mask_reasons(query, key, value, attn_mask, softcap)
        reasons += mask_reasons
    if dropout_p != 0.0:
        # Any attn_mask left (even one whose own reason refused it: mask_bits 0) bars dropout.
        mask_left = attn_mask is not None and not causal_bias
        reasons += _dropout_reasons(query, key, value, dropout_p, is_causal, bits=(1 if mask_left else 0)
                                    | (2 if softcap else 0) | (4 if alibi_slopes is not None else 0)
                                    | (8 if sinks is not None else 0))
    bits = (
        (_backend.FEATURE_BITS["softcap"] if softcap else 0)
        | (_backend.FEATURE_BITS["alibi"] if alibi_slopes is not None else 0)
        | (_backend.FEATURE_BITS["sinks"] if sinks is not None else 0)
        | mask_bits
    )
    reasons += _features_reasons(query, key, value, is_causal, window, bits)
    if query.dim() != 4 or key.dim() != 4 or value.dim() != 4:
        return reasons + kernel_reasons(query, key, value)

    heads_q, heads_kv = query.shape[1], key.shape[1]
    if heads_q != heads_kv and not enable_gqa:
        reasons.append(
            f"query has {heads_q} heads, key and value {heads_kv}: "
            f"SDPA needs enable_gqa=True for grouped-query attention"
        )
    seqlen_q, seqlen_k = query.shape[2], key.shape[2]
    head_dim, head_dim_v = query.shape[3], value.shape[3]
    if causal_bias or (attn_mask is None and (head_dim != head_dim_v or (is_causal and seqlen_q != seqlen_k))):
        # Calls PyTorch's flash path turns away go straight to our op (entry.direct_causal_mode), which
        # takes the tensors as they are (and copies rows it cannot read in place).
        reasons += kernel_reasons(query, key, value, layout=False)
    elif head_dim % 8:
        # SDPA pads the head dim to a multiple of 8 (a fresh contiguous copy) before its flash op.
        padded = -(-head_dim // 8) * 8
        reasons += kernel_reasons(query, key, value, head_dims=(padded, padded))
    else:
        reasons += kernel_reasons(query, key, value)
    if query.is_cuda and not torch.backends.cuda.flash_sdp_enabled():
        reasons.append(
            "PyTorch's flash backend is disabled (torch.backends.cuda.enable_flash_sdp(False), or an "
            "sdpa_kernel context without FLASH_ATTENTION): SDPA never reaches flashsdpa"
        )
    reasons += window_reasons
    if query.is_cuda and _backend.CUDA_KERNELS and head_dim > 192 and _backend.device_ok(query.get_device()):
        info = _backend.device_info(query.get_device())
        if (info["major"], info["minor"]) in ((8, 6), (8, 9)) and any(t.requires_grad for t in (query, key, value)):
            reasons.append(
                f"head_dim={head_dim} with requires_grad on compute capability {info['major']}.{info['minor']}: "
                f"PyTorch's flash path does not train head dims over 192 on 8.6 and 8.9 GPUs"
            )
    return reasons
