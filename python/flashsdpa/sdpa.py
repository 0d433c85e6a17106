# sdpa.py: flashsdpa as a backend of torch.nn.functional.scaled_dot_product_attention.
#
# Owns (1) the routers: Python kernels at the CUDA dispatch key of PyTorch's flash ops, which run
# our kernels when selection.py says they can and otherwise hand the call, unchanged, to the
# kernel PyTorch had there (captured before we registered); (2) activation: enable() / install()
# / the torch.nn.attention registry entry "FLASHSDPA", refcounted, which registers the routers,
# puts PyTorch's FLASH backend first in SDPA's priority order (on Hopper PyTorch prefers cuDNN)
# and pushes a TorchFunctionMode, and on the last exit undoes all three exactly. The mode sends
# the SDPA calls PyTorch's flash path turns away to our op, and runs eager calls that need no
# autograd on our kernel itself (the eager path, which skips SDPA's dispatch and the router).
#
# Routers never override aten::scaled_dot_product_attention itself (that breaks autograd and is
# ignored by torch.compile) and never register at Meta / Autograd: autograd, autocast, fake
# tensors and Inductor stay PyTorch's; only the CUDA kernel behind the flash ops changes.
"""Routing of SDPA's flash ops to flashsdpa's kernels, and enable() / install()."""

from __future__ import annotations

import math
import threading
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.autograd import forward_ad
from torch.overrides import TorchFunctionMode

from flashsdpa import _backend, masks, ops, selection

__all__ = ["REGISTRY_NAME", "enable", "install", "is_active", "uninstall"]

REGISTRY_NAME = "FLASHSDPA"  # torch.nn.attention.activate_flash_attention_impl("FLASHSDPA")

_log = selection._log
_FLASH = 1  # int(torch.nn.attention.SDPBackend.FLASH_ATTENTION), the value _sdp_priority_order uses


# ---- outputs in each op's meta contract (torch/_meta_registrations.py) ---------------------------

# (device index, dtype) -> templates of rng_state uint64[2] and the unused offset uint64[], and the
# empty debug mask itself. torch.empty_like of a template skips most of torch.empty's argument
# parsing (about a microsecond per tensor on the routers' hot path); keying on get_device()'s int
# rather than the torch.device saves another 60 ns per call (1.95 -> 1.89 us on CPU, against 1.58
# for the two allocations alone). The float32 LSE is allocated as query.new_empty(B, H, S,
# dtype=torch.float32): with the sizes as separate ints the cheapest spelling measured (1.07 us on
# CPU, against 1.20 for torch.empty(..., device=query.device) and 1.52 with the sizes as one tuple).
_SPARES: dict[tuple[int, torch.dtype], tuple[Tensor, Tensor, Tensor]] = {}


def _unused_outputs(query: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """rng_state uint64[2], the unused philox offset uint64[] and the empty debug mask.

    With dropout 0 nothing reads rng_state or the offset (PyTorch's kernel also leaves them
    uninitialized), so no fill kernel is launched; each call gets fresh tensors, since graphs may
    recycle a dead output's memory. The zero-element debug mask is shared: it has no memory to
    write into, so sharing it cannot alias anything, and it saves an allocation.
    """
    spares = _SPARES.get((query.get_device(), query.dtype))
    if spares is None:
        device = query.device
        spares = _SPARES[(query.get_device(), query.dtype)] = (
            torch.empty(2, dtype=torch.uint64, device=device),
            torch.empty((), dtype=torch.uint64, device=device),
            torch.empty(0, dtype=query.dtype, device=device),
        )
    rng_state, unused, debug_mask = spares
    return torch.empty_like(rng_state), torch.empty_like(unused), debug_mask


def _softmax_scale(scale: float | None, head_dim: int) -> float:
    # PyTorch's calculate_scale: the given scale, else 1/sqrt of the (already padded) head dim.
    return 1.0 / math.sqrt(head_dim) if scale is None else scale


# ---- fallback ------------------------------------------------------------------------------------

# aten op name -> PyTorch's own CUDA kernel (SafeKernelFunction), captured before our router was
# registered; None where torch has no CUDA kernel (a CPU-only torch, where CUDA is never reached).
_NATIVE: dict[str, Any] = {}


def _fall_back(
    op: str, counts: list[int], reason: str, keyset: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    """Hand the call to PyTorch's kernel with the arguments exactly as the dispatcher gave them."""
    counts[1] += 1
    selection.note_fallback(f"aten::{op}", reason)
    native = _NATIVE.get(op)
    if native is None:
        raise RuntimeError(f"flashsdpa: aten::{op} has no PyTorch CUDA kernel to fall back to ({reason})")
    # call_boxed with our keyset runs the captured kernel directly: calling torch.ops.aten.<op>
    # here would dispatch back into this router.
    return native.call_boxed(keyset, *args, **kwargs)


def _dropout_reason(dropout_p: float) -> str:
    return f"dropout_p={dropout_p}: dropout is not supported (needs 0.0)"


_DEBUG_MASK_REASON = "return_debug_mask=True: the debug attention mask is not supported"

# Our backward adds dQ contributions with float32 atomics, so its dQ is not bitwise reproducible.
# A user who asked for deterministic algorithms gets PyTorch's kernel (which honours the flag).
_DETERMINISTIC_REASON = (
    "torch.use_deterministic_algorithms(True): flashsdpa's backward accumulates dQ with float atomics "
    "(not bitwise reproducible)"
)


def _bwd_tensors_reason(
    grad_out: Tensor, out: Tensor, logsumexp: Tensor, query: Tensor, value: Tensor, lse_shape: tuple[int, ...]
) -> str | None:
    """The backward's extra tensors: out and grad_out shaped like the forward's output, the LSE
    float32, out readable in place (grad_out is copied when it is not: see aligned_rows); and a
    backward tile that fits the GPU's shared memory (_backend.backward_reason)."""
    out_shape = (*query.shape[:-1], value.shape[-1])
    if out.dtype != query.dtype or out.shape != out_shape or grad_out.shape != out_shape:
        return f"out {tuple(out.shape)} / grad_out {tuple(grad_out.shape)}: need {out_shape} in {query.dtype}"
    if logsumexp.dtype != torch.float32 or tuple(logsumexp.shape) != lse_shape:
        return f"logsumexp {tuple(logsumexp.shape)} {logsumexp.dtype}: needs {lse_shape} float32"
    return selection.layout_reason("out", out, tuple(range(out.dim() - 1))) or _backend.backward_reason(
        query.get_device(), query.shape[-1], value.shape[-1]
    )


# ---- routers: aten::_scaled_dot_product_flash_attention[_backward] --------------------------------
# (B, H, S, D) views, the form SDPA's flash path passes: GQA allowed, head dims padded to x8 and
# the scale computed from the unpadded dim by SDPA before the call. is_causal is bottom-right
# aligned, as in PyTorch's FA2 kernel (SDPA only sends it with seqlen_q == seqlen_k, where the
# two alignments agree; a direct call with unequal lengths gets exactly what PyTorch computes).
#
# Routers receive what the dispatcher unboxes: positional arguments positionally (trailing ones
# equal to their defaults left out), keyword-only ones as keywords, only when not the default.

_SDPA_FWD = "_scaled_dot_product_flash_attention"
_SDPA_BWD = "_scaled_dot_product_flash_attention_backward"
_SDPA_FWD_COUNTS = selection.counter(f"aten::{_SDPA_FWD}")
_SDPA_BWD_COUNTS = selection.counter(f"aten::{_SDPA_BWD}")


# SDPA's flash op sends only square causal calls (its filter), where both alignments agree: its
# kernel aligns causal masks bottom-right, so the routers do too.
_SDPA_MASKS = (masks.NO_MASK, masks.CAUSAL_BOTTOM_RIGHT)  # by is_causal


def _sdpa_flash_forward(
    keyset: Any,
    query: Tensor,
    key: Tensor,
    value: Tensor,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    return_debug_mask: bool = False,
    *,
    scale: float | None = None,
) -> Any:
    # Named parameters rather than *args: this is the hottest router, and binding is free here.
    if dropout_p != 0.0:
        reason: str | None = _dropout_reason(dropout_p)
    elif return_debug_mask:
        reason = _DEBUG_MASK_REASON
    else:
        reason = selection.dense_reason(query, key, value)
        if reason is None and value.shape[3] != query.shape[3]:
            reason = f"value head_dim={value.shape[3]}: this op needs query's head_dim={query.shape[3]}"
    if reason is not None:
        args = (query, key, value, dropout_p, is_causal, return_debug_mask)
        return _fall_back(_SDPA_FWD, _SDPA_FWD_COUNTS, reason, keyset, args, {"scale": scale})
    batch, heads, seqlen_q, head_dim = query.shape
    out = torch.empty_like(query)
    lse = query.new_empty(batch, heads, seqlen_q, dtype=torch.float32)
    _backend.launch_fwd(query, key, value, out, lse, _softmax_scale(scale, head_dim), _SDPA_MASKS[is_causal])
    _SDPA_FWD_COUNTS[0] += 1
    return (out, lse, None, None, seqlen_q, key.shape[2], *_unused_outputs(query))


def _sdpa_flash_backward(keyset: Any, *args: Any, scale: float | None = None) -> Any:
    # (grad_out, query, key, value, out, logsumexp, cum_seq_q, cum_seq_k, max_q, max_k, dropout_p,
    #  is_causal, philox_seed, philox_offset): all required, so always all there.
    grad_out, query, key, value, out, logsumexp, cum_seq_q, cum_seq_k, _, _, dropout_p, is_causal, _, _ = args
    if dropout_p != 0.0:
        reason: str | None = _dropout_reason(dropout_p)
    elif torch.are_deterministic_algorithms_enabled():
        reason = _DETERMINISTIC_REASON
    elif cum_seq_q is not None or cum_seq_k is not None:
        reason = "cum_seq_q / cum_seq_k given: the dense SDPA backward takes none"
    else:
        reason = selection.dense_reason(query, key, value) or _bwd_tensors_reason(
            grad_out, out, logsumexp, query, value, tuple(query.shape[:3])
        )
    if reason is not None:
        return _fall_back(_SDPA_BWD, _SDPA_BWD_COUNTS, reason, keyset, args, {"scale": scale})
    dq, dk, dv = torch.empty_like(query), torch.empty_like(key), torch.empty_like(value)
    grad_out = _backend.aligned_rows(grad_out)
    scale_ = _softmax_scale(scale, query.shape[3])
    _backend.launch_bwd(grad_out, query, key, value, out, logsumexp, dq, dk, dv, scale_, _SDPA_MASKS[is_causal])
    _SDPA_BWD_COUNTS[0] += 1
    return dq, dk, dv


# ---- routers: aten::_flash_attention_forward[_no_dropout_inplace] / _backward ---------------------
# Dense (B, S, H, D) tensors, which we hand to the kernels as (B, H, S, D) views (no copy), or
# packed (total, H, D) rows with cum_seq_q / cum_seq_k (nested-tensor SDPA, varlen_attn). Their
# positional arguments have no defaults; keyword-only ones grew in 2.12 (block_table, num_splits)
# and are judged per call, so these routers take any.

_FLASH_FWD = "_flash_attention_forward"
_FLASH_FWD_INPLACE = "_flash_attention_forward_no_dropout_inplace"
_FLASH_BWD = "_flash_attention_backward"
_FLASH_FWD_COUNTS = selection.counter(f"aten::{_FLASH_FWD}")
_FLASH_FWD_INPLACE_COUNTS = selection.counter(f"aten::{_FLASH_FWD_INPLACE}")
_FLASH_BWD_COUNTS = selection.counter(f"aten::{_FLASH_BWD}")

# Keyword-only arguments the routers read. num_splits only tunes how PyTorch's kernel splits the
# keys, so it is ignored; any other keyword given (alibi_slopes, block_table, newer ones) means math
# our kernels do not do.
_FLASH_KEYWORDS = frozenset({"scale", "window_size_left", "window_size_right", "seqused_k", "num_splits"})


@dataclass(frozen=True)
class _FlashPlan:
    """A served _flash_attention_* call: the mask, and dense views or packed tensors."""

    mask: masks.MaskSpec
    varlen: bool
    q: Tensor  # dense: (B, H, S, D) views of the (B, S, H, D) arguments; varlen: the (total, H, D) rows
    k: Tensor
    v: Tensor


def _flash_plan(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    cum_seq_q: Tensor | None,
    cum_seq_k: Tensor | None,
    max_q: int,
    max_k: int,
    dropout_p: float,
    is_causal: bool,
    kwargs: dict[str, Any],
    backward: bool = False,
) -> tuple[str | None, _FlashPlan | None]:
    """Decide one _flash_attention_* call: (reason to fall back, None) or (None, plan)."""
    if dropout_p != 0.0:
        return _dropout_reason(dropout_p), None
    for name, given in kwargs.items():
        if name not in _FLASH_KEYWORDS and given is not None:
            return f"{name} given: not supported by flashsdpa", None
    if (cum_seq_q is None) != (cum_seq_k is None):
        return "cum_seq_q / cum_seq_k: give both or neither", None
    varlen = cum_seq_q is not None
    if not varlen and (query.dim() != 4 or key.dim() != 4):
        return f"query.dim()={query.dim()}: dense inputs need 4 (batch, seq_len, heads, head_dim)", None
    # PyTorch's kernel reads windows, is_causal and the lengths as masks.torch_flash spells out.
    left, right = kwargs.get("window_size_left"), kwargs.get("window_size_right")
    seqlen_q, seqlen_k = (max_q, max_k) if varlen else (query.shape[1], key.shape[1])
    mask = masks.torch_flash(is_causal, left, right, seqlen_q, seqlen_k)
    if value.shape[-1] != query.shape[-1]:
        return f"value head_dim={value.shape[-1]}: this op needs query's head_dim={query.shape[-1]}", None
    seqused_k = kwargs.get("seqused_k")
    if varlen:
        reason = selection.varlen_reason(
            query, key, value, cum_seq_q, cum_seq_k, seqused_k, max_q, max_k  # type: ignore[arg-type]
        ) or selection.mask_reason(query, value, mask, varlen=True, backward=backward)
        return reason, (None if reason else _FlashPlan(mask, True, query, key, value))
    if seqused_k is not None:
        return "seqused_k given with dense inputs: PyTorch's dense kernel ignores it; left to it", None
    q, k, v = query.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2)
    reason = selection.dense_reason(q, k, v) or selection.mask_reason(q, v, mask, varlen=False, backward=backward)
    return reason, (None if reason else _FlashPlan(mask, False, q, k, v))


def _flash_forward_run(plan: _FlashPlan, out: Tensor, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Tensor:
    """Run a planned forward into ``out`` (laid out like the query argument); returns the LSE.
    ``args`` are the forward's (query, key, value, cum_seq_q, cum_seq_k, max_q, max_k, ...)."""
    cum_seq_q, cum_seq_k, max_q, max_k = args[3:7]
    scale = _softmax_scale(kwargs.get("scale"), plan.q.shape[-1])
    if plan.varlen:
        lse = out.new_empty(plan.q.shape[1], plan.q.shape[0], dtype=torch.float32)
        seqused_k = kwargs.get("seqused_k")
        varlen = (cum_seq_q, cum_seq_k, seqused_k, max_q, max_k)
        _backend.launch_fwd(plan.q, plan.k, plan.v, out, lse, scale, plan.mask, varlen)
    else:
        batch, heads, seqlen_q = plan.q.shape[:3]
        lse = out.new_empty(batch, heads, seqlen_q, dtype=torch.float32)
        _backend.launch_fwd(plan.q, plan.k, plan.v, out.transpose(1, 2), lse, scale, plan.mask)
    return lse


def _flash_forward(keyset: Any, *args: Any, **kwargs: Any) -> Any:
    # (query, key, value, cum_seq_q, cum_seq_k, max_q, max_k, dropout_p, is_causal, return_debug_mask)
    query, key, value, cum_seq_q, cum_seq_k, max_q, max_k, dropout_p, is_causal, return_debug_mask = args
    reason, plan = _flash_plan(query, key, value, cum_seq_q, cum_seq_k, max_q, max_k, dropout_p, is_causal, kwargs)
    if plan is not None and return_debug_mask:
        reason, plan = _DEBUG_MASK_REASON, None
    if plan is None:
        return _fall_back(_FLASH_FWD, _FLASH_FWD_COUNTS, str(reason), keyset, args, kwargs)
    out = torch.empty_like(query)
    lse = _flash_forward_run(plan, out, args, kwargs)
    _FLASH_FWD_COUNTS[0] += 1
    return (out, lse, *_unused_outputs(query))


def _flash_forward_inplace(keyset: Any, *args: Any, **kwargs: Any) -> Any:
    # (out, then _flash_attention_forward's arguments); writes out, returns the LSE.
    out, query, key, value, cum_seq_q, cum_seq_k, max_q, max_k, dropout_p, is_causal, return_debug_mask = args
    reason, plan = _flash_plan(query, key, value, cum_seq_q, cum_seq_k, max_q, max_k, dropout_p, is_causal, kwargs)
    if plan is not None and return_debug_mask:
        reason, plan = _DEBUG_MASK_REASON, None
    if plan is not None and (out.dtype != query.dtype or out.shape != query.shape or out.device != query.device):
        reason, plan = f"out {tuple(out.shape)} {out.dtype}: needs the query's shape, dtype and device", None
    if plan is not None:
        reason = selection.layout_reason("out", out, tuple(range(out.dim() - 1)))
        plan = None if reason else plan
    if plan is None:
        return _fall_back(_FLASH_FWD_INPLACE, _FLASH_FWD_INPLACE_COUNTS, str(reason), keyset, args, kwargs)
    lse = _flash_forward_run(plan, out, args[1:], kwargs)
    _FLASH_FWD_INPLACE_COUNTS[0] += 1
    return lse


def _flash_backward(keyset: Any, *args: Any, **kwargs: Any) -> Any:
    # (grad_out, query, key, value, out, logsumexp, cum_seq_q, cum_seq_k, max_q, max_k, dropout_p,
    #  is_causal, rng_state, unused)
    grad_out, query, key, value, out, logsumexp, cum_seq_q, cum_seq_k, max_q, max_k, dropout_p, is_causal, _, _ = args
    reason, plan = _flash_plan(
        query, key, value, cum_seq_q, cum_seq_k, max_q, max_k, dropout_p, is_causal, kwargs, backward=True
    )
    if plan is not None and torch.are_deterministic_algorithms_enabled():
        reason, plan = _DETERMINISTIC_REASON, None
    if plan is not None:
        lse_shape = (query.shape[1], query.shape[0]) if plan.varlen else tuple(plan.q.shape[:3])
        reason = _bwd_tensors_reason(grad_out, out, logsumexp, query, value, lse_shape)
        plan = None if reason else plan
    if plan is None:
        return _fall_back(_FLASH_BWD, _FLASH_BWD_COUNTS, str(reason), keyset, args, kwargs)
    grad_out = _backend.aligned_rows(grad_out)
    dq, dk, dv = torch.empty_like(query), torch.empty_like(key), torch.empty_like(value)
    scale = _softmax_scale(kwargs.get("scale"), query.shape[-1])
    if plan.varlen:
        varlen = (cum_seq_q, cum_seq_k, None, max_q, max_k)
        _backend.launch_bwd(grad_out, query, key, value, out, logsumexp, dq, dk, dv, scale, plan.mask, varlen)
    else:
        views = (t.transpose(1, 2) for t in (grad_out, out, dq, dk, dv))
        grad_out_, out_, dq_, dk_, dv_ = views
        _backend.launch_bwd(grad_out_, plan.q, plan.k, plan.v, out_, logsumexp, dq_, dk_, dv_, scale, plan.mask)
    _FLASH_BWD_COUNTS[0] += 1
    return dq, dk, dv


# ---- the route table, checked against the live schemas -------------------------------------------


@dataclass(frozen=True)
class _Route:
    op: str
    router: Callable[..., Any]
    positional: tuple[str, ...]  # the schema's positional arguments, in order, as the router unpacks them
    keywords: frozenset[str] | None  # the keyword-only arguments it names; None: it takes any


# The positional arguments of each op, in schema order: what each router unpacks.
_SDPA_FWD_ARGS = ("query", "key", "value", "dropout_p", "is_causal", "return_debug_mask")
_SDPA_BWD_ARGS = ("grad_out", "query", "key", "value", "out", "logsumexp", "cum_seq_q", "cum_seq_k", "max_q", "max_k",
                  "dropout_p", "is_causal", "philox_seed", "philox_offset")  # fmt: skip
_FLASH_FWD_ARGS = ("query", "key", "value", "cum_seq_q", "cum_seq_k", "max_q", "max_k", "dropout_p", "is_causal",
                   "return_debug_mask")  # fmt: skip
_FLASH_BWD_ARGS = ("grad_out", "query", "key", "value", "out", "logsumexp", "cum_seq_q", "cum_seq_k", "max_q", "max_k",
                   "dropout_p", "is_causal", "rng_state", "unused")  # fmt: skip

_ROUTES: tuple[_Route, ...] = (
    _Route(_SDPA_FWD, _sdpa_flash_forward, _SDPA_FWD_ARGS, frozenset({"scale"})),
    _Route(_SDPA_BWD, _sdpa_flash_backward, _SDPA_BWD_ARGS, frozenset({"scale"})),
    _Route(_FLASH_FWD, _flash_forward, _FLASH_FWD_ARGS, None),
    _Route(_FLASH_FWD_INPLACE, _flash_forward_inplace, ("out", *_FLASH_FWD_ARGS), None),
    _Route(_FLASH_BWD, _flash_backward, _FLASH_BWD_ARGS, None),
)


def schema_mismatch(route: _Route, schema: Any) -> str | None:
    """Why ``route`` cannot take this torch's schema of its op, or None. Positional arguments must
    match by name and order (the routers unpack them); keyword-only ones must be those the router
    names, unless it takes any (it then judges each per call)."""
    positional = tuple(a.name for a in schema.arguments if not a.kwarg_only)
    if positional != route.positional:
        return f"positional arguments {positional}, expected {route.positional}"
    keywords = {a.name for a in schema.arguments if a.kwarg_only}
    if route.keywords is not None and keywords - route.keywords:
        return f"unknown keyword arguments {sorted(keywords - route.keywords)}"
    return None


def _native_kernel(op: str) -> Any:
    get_kernel = getattr(torch.library, "get_kernel", None)
    if get_kernel is None:
        return None
    try:
        return get_kernel(f"aten::{op}", "CUDA")
    except RuntimeError:  # no CUDA kernel: a CPU-only torch
        return None


def _register_routers() -> torch.library.Library:
    """One Library holding every router this torch can take; destroying it restores PyTorch's kernels."""
    lib = torch.library.Library("aten", "IMPL")
    for route in _ROUTES:
        packet = getattr(torch.ops.aten, route.op, None)
        if packet is None:
            continue  # older torch: the op does not exist (e.g. the inplace forward before 2.12)
        mismatch = schema_mismatch(route, packet.default._schema)
        if mismatch is not None:
            _log.warning("flashsdpa: not routing aten::%s on this torch: %s", route.op, mismatch)
            continue
        _NATIVE[route.op] = _native_kernel(route.op)  # before registering: afterwards it would be ours
        with warnings.catch_warnings():
            # "Overriding a previously registered kernel ...": overriding is the point.
            warnings.filterwarnings("ignore", message=".*previously registered kernel.*")
            lib.impl(route.op, route.router, "CUDA", with_keyset=True)
    return lib


def _destroy(lib: torch.library.Library) -> None:
    # _destroy() deregisters now; merely dropping the reference would wait for the GC.
    destroy = getattr(lib, "_destroy", None)
    if destroy is not None:
        destroy()


# ---- the TorchFunctionMode -----------------------------------------------------------------------

_SDPA = F.scaled_dot_product_attention

# The calls the mode's eager path serves, counted apart from the routers' aten ops so that stats()
# shows which road a call took.
EAGER_SDPA = "F.scaled_dot_product_attention (eager, no grad)"
_EAGER_COUNTS = selection.counter(EAGER_SDPA)

# What the eager path asks on every call, bound to module names: one global lookup instead of an
# attribute chain saves 20-40 ns a call on CPU (torch.is_grad_enabled(): 57 -> 37 ns), and the C
# function behind torch.backends.cuda.flash_sdp_enabled() costs 40 ns against the wrapper's 155.
# The torch._C internals fall back to answers that keep every call on the usual roads, should a
# torch lack one (torch 2.13 has them all).
_is_grad_enabled = torch.is_grad_enabled
_is_compiling = torch.compiler.is_compiling
_is_autocast_enabled = torch.is_autocast_enabled
_functorch_active: Callable[[], bool] = getattr(torch._C, "_are_functorch_transforms_active", lambda: True)
_function_modes: Callable[[], int] = getattr(torch._C, "_len_torch_function_stack", lambda: 1)
_dispatch_modes: Callable[[], int] = getattr(torch._C, "_len_torch_dispatch_stack", lambda: 1)
_flash_sdp_enabled: Callable[[], bool] = getattr(
    torch._C, "_get_flash_sdp_enabled", torch.backends.cuda.flash_sdp_enabled
)
_sdp_priority_order = getattr(torch._C, "_get_sdp_priority_order", None)


def _sdpa_arguments(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attn_mask: Any = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
    enable_gqa: bool = False,
) -> tuple[Tensor, Tensor, Tensor, Any, float, bool, float | None, bool]:
    return query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa


def _direct_sdpa(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attn_mask: Any,
    dropout_p: float,
    is_causal: bool,
    scale: float | None,
    enable_gqa: bool,
) -> Tensor | None:
    """Run an SDPA call that PyTorch's flash path turns away on our op; None leaves it to SDPA."""
    if not isinstance(query, Tensor) or not query.is_cuda or query.is_nested:
        return None  # nested tensors take SDPA's road (to the varlen routers); strided ones have no .shape
    # An sdpa_kernel context (or enable_flash_sdp(False)) that excludes flash keeps the call away
    # from us too. Read in eager only: Dynamo cannot trace the flag (and does not guard on it).
    if not torch.compiler.is_compiling() and not torch.backends.cuda.flash_sdp_enabled():
        return None
    mode = selection.direct_causal_mode(query, key, value, attn_mask, dropout_p, is_causal, enable_gqa)
    if mode is None:
        return None
    scale_ = _softmax_scale(scale, query.shape[-1])
    return torch.ops.flashsdpa.fwd.default(query, key, value, scale_, masks.BY_CAUSAL_MODE[mode])[0]


def _flash_path_shapes(query: Any, key: Any, value: Any, is_causal: bool) -> bool:
    """For a call without attn_mask: whether PyTorch's flash path accepts its shapes as they are
    (value head dim equal to the query's; equal lengths when causal), so that _direct_sdpa has
    nothing to decide. That is the common call: skipping _direct_sdpa's flag reads and tensor
    checks takes the mode's decision from 1.4-1.6 us to 0.45-0.75 us (CPU, timeit).

    Anything whose shapes it cannot read (non-tensors, fewer than two dims, strided nested
    tensors) answers False: _direct_sdpa then decides.
    """
    try:
        shape = query.shape  # read once: each .shape builds a torch.Size (about 0.1 us)
        return value.shape[-1] == shape[-1] and (not is_causal or shape[-2] == key.shape[-2])
    except (AttributeError, IndexError, RuntimeError, TypeError):
        return False


def _eager_skip_reason(query: Any, key: Any, value: Any, dropout_p: float, enable_gqa: bool) -> str | None:
    """Why a call without attn_mask cannot skip SDPA and run our kernel right here; None if it can.
    (SDPA's argument parser has run: is_causal and enable_gqa are bools, scale None or a number.)

    The eager path serves what SDPA would send to the routers (or the mode to our op) anyway, with
    exactly their result, and nothing whose meaning something else on the way would change:
    autograd, torch.compile, autocast, functorch transforms, forward AD, other torch-function or
    dispatch modes, tensor subclasses, a flash backend that SDPA would not pick. Each reason is a
    constant (nothing is formatted: on the training path every call ends here), tested in order of
    cost and of how often it decides.
    """
    if type(query) is not Tensor or type(key) is not Tensor or type(value) is not Tensor:
        return "not three plain tensors: subclasses (FakeTensor, DTensor, jagged nested, ...) take SDPA's road"
    if _is_grad_enabled() and (query.requires_grad or key.requires_grad or value.requires_grad):
        return "gradients needed: the flash op's autograd node records the backward"
    if _is_compiling():
        return "torch.compile is tracing: the graph records SDPA's own choice"
    if dropout_p != 0.0:
        return "dropout: the routers send it to PyTorch's kernel"
    if not query.is_cuda or query.is_nested:
        return "not a dense CUDA tensor"
    if _is_autocast_enabled("cuda"):
        return "CUDA autocast: SDPA casts the inputs first"
    if getattr(forward_ad, "_current_level", 0) >= 0 or _functorch_active():  # no attribute: as if a level were on
        return "forward AD or a functorch transform (vmap, grad, ...) is active: it wraps SDPA's ops"
    if _function_modes() or _dispatch_modes():
        # Counted with this mode off its stack: only modes below it, and every dispatch mode.
        return "another torch-function or dispatch mode is active: it would not see SDPA's call"
    if not _flash_sdp_enabled() or (_sdp_priority_order is not None and _sdp_priority_order()[0] != _FLASH):
        return "PyTorch's flash backend is disabled or not first: SDPA may pick another backend"
    if not selection.dense_ok(query, key, value):
        return "our kernels cannot read these tensors as they are: the routers' or the mode's checks decide"
    if not enable_gqa and query.shape[1] != key.shape[1]:
        return "query and key heads differ without enable_gqa=True: SDPA raises its own error"
    return None


_EAGER_MASKS = (masks.NO_MASK, masks.CAUSAL_TOP_LEFT)  # by SDPA's is_causal (top-left)


def _eager_sdpa(query: Tensor, key: Tensor, value: Tensor, is_causal: bool, scale: float | None) -> Tensor:
    """Run a call that _eager_skip_reason() passed: our kernel on the tensors as they are, no
    autograd node (none is needed), SDPA's output. The output is laid out as SDPA's flash path and
    flashsdpa's op lay theirs (empty_like(query); ops._empty_out when the value head dim differs).
    No LSE: nothing reads it here, and its allocation was 2.3 of the path's ~19 us (H200 probe)."""
    head_dim = query.shape[3]
    head_dim_v = value.shape[3]
    out = torch.empty_like(query) if head_dim_v == head_dim else ops._empty_out(query, head_dim_v)
    # SDPA's is_causal is top-left (mode 1); with seqlen_q == seqlen_k, where the routers run it as
    # bottom-right (2), the two are the same diagonal.
    _backend.launch_fwd(query, key, value, out, None, _softmax_scale(scale, head_dim), _EAGER_MASKS[is_causal])
    _EAGER_COUNTS[0] += 1
    return out


def _route_sdpa(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Tensor | None:
    """The mode's decision for one F.scaled_dot_product_attention call: its output when the mode
    serves it (the eager path, or our op for what PyTorch's flash path turns away), None when SDPA
    runs it (reaching the routers when PyTorch's flash path takes it)."""
    try:
        # Python's own binding of SDPA's signature is the cheapest reading of the call (0.1 to
        # 0.2 us on CPU, with any mix of positional and keyword arguments) and the exact one.
        query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa = _sdpa_arguments(*args, **kwargs)
    except TypeError:
        return None  # let SDPA report its own argument error
    if attn_mask is None:
        if _eager_skip_reason(query, key, value, dropout_p, enable_gqa) is None:
            return _eager_sdpa(query, key, value, is_causal, scale)
        if _flash_path_shapes(query, key, value, is_causal):
            return None
    return _direct_sdpa(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa)


class _FlashSDPAMode(TorchFunctionMode):
    """On the torch-function mode stack while flashsdpa is active.

    Dynamo guards on the mode stack, so a function compiled outside recompiles when called inside
    and back: SDPA's backend choice is made at trace time and is not otherwise guarded, so without
    the mode a graph traced outside would keep PyTorch's choice inside, and the other way round.
    It also sends the F.scaled_dot_product_attention calls that PyTorch's flash path turns away
    but our kernels serve (top-left causal with seqlen_q != seqlen_k, value head dim != query's,
    causal_lower_right masks) straight to flashsdpa's op, and in eager code without autograd runs
    the calls our kernels serve right here (_eager_skip_reason), skipping SDPA, the dispatcher and
    the routers. Default __enter__/__exit__, as Dynamo requires for graph breaks under a mode.
    """

    def __torch_function__(
        self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None
    ) -> Any:
        if kwargs is None:
            kwargs = {}
        if func is _SDPA:
            out = _route_sdpa(args, kwargs)
            if out is not None:
                return out
        return func(*args, **kwargs)


def _remove_mode(mode: TorchFunctionMode) -> bool:
    """Take ``mode`` off this thread's torch-function stack wherever it sits (install() and
    uninstall() need not nest with other modes); False if it is not on this thread's stack."""
    above = []
    found = False
    while torch._C._len_torch_function_stack() > 0:
        top = torch._C._pop_torch_function_stack()
        if top is mode:
            found = True
            break
        above.append(top)
    for m in reversed(above):
        torch._C._push_on_torch_function_stack(m)
    return found


# ---- SDPA's backend priority ---------------------------------------------------------------------

_priority_warmed = False


def _warm_priority() -> None:
    """Run PyTorch's lazy priority initialization now. It happens at the first SDPA selection on
    CUDA and, on Hopper with a recent cuDNN, rewrites the order to cuDNN-first; if that first
    selection came after we set our order, it would overwrite ours, and our restore would leave
    the process with the pre-init order (flash first) forever."""
    global _priority_warmed
    if _priority_warmed or not torch.cuda.is_available():
        return
    tiny = torch.zeros(1, 1, 1, 8, dtype=torch.float16, device="cuda")
    torch._fused_sdp_choice(tiny, tiny, tiny)
    _priority_warmed = True


def _prefer_flash() -> list[int] | None:
    """Put FLASH first in SDPA's priority order; returns the order to restore (None: unchanged).
    Calls that PyTorch's flash filter rejects (masks, for instance) still take the next backend
    in PyTorch's own order."""
    get_order = getattr(torch._C, "_get_sdp_priority_order", None)
    set_order = getattr(torch._C, "_set_sdp_priority_order", None)
    if get_order is None or set_order is None:
        return None
    _warm_priority()
    saved = [int(b) for b in get_order()]
    set_order([_FLASH, *(b for b in saved if b != _FLASH)])
    return saved


def _kernels_usable() -> bool:
    """Whether this process can run our kernels at all: a CUDA build of _C and a CUDA device."""
    return _backend.CUDA_KERNELS and torch.cuda.is_available()


# ---- activation ----------------------------------------------------------------------------------


@dataclass
class _Activation:
    library: torch.library.Library
    mode: _FlashSDPAMode
    saved_order: list[int] | None


_lock = threading.RLock()
_refcount = 0
_active: _Activation | None = None
_installed = False
_warned_unusable = False


def _activate() -> _Activation:
    global _warned_unusable
    usable = _kernels_usable()
    if usable:
        _backend.prime_devices()  # device checks become dict reads that torch.compile can trace
    elif torch.cuda.is_available() and not _warned_unusable:
        _warned_unusable = True
        warnings.warn(f"flashsdpa: {_backend.UNAVAILABLE_REASON}; SDPA keeps PyTorch's kernels", stacklevel=4)
    library = _register_routers()
    try:
        # Reordering only matters, and is only done, where our kernels can run.
        saved_order = _prefer_flash() if usable else None
        try:
            mode = _FlashSDPAMode()
            mode.__enter__()
        except BaseException:
            _restore_order(saved_order)
            raise
    except BaseException:
        _destroy(library)
        raise
    return _Activation(library, mode, saved_order)


def _restore_order(saved_order: list[int] | None) -> None:
    if saved_order is not None:
        torch._C._set_sdp_priority_order(saved_order)


def _deactivate(state: _Activation) -> None:
    if not _remove_mode(state.mode):
        _log.warning(
            "flashsdpa: deactivated from a thread other than the one that activated it; "
            "that thread keeps flashsdpa's (then inert) TorchFunctionMode"
        )
    _restore_order(state.saved_order)
    _destroy(state.library)


def _acquire() -> None:
    global _refcount, _active
    with _lock:
        if _refcount == 0:
            _active = _activate()
        _refcount += 1


def _release() -> None:
    global _refcount, _active
    with _lock:
        if _refcount == 0:
            raise RuntimeError("flashsdpa: released more often than activated")
        _refcount -= 1
        if _refcount == 0:
            state, _active = _active, None
            assert state is not None
            _deactivate(state)


class enable:  # lowercase: used like torch.no_grad
    """Context manager: while active, SDPA calls our kernels can serve run them.

    ``with flashsdpa.enable(): ...``. Re-entrant and refcounted with install() and the registry
    activation: the first entry activates, the last exit deactivates, restoring SDPA's priority
    order and PyTorch's kernels exactly. Process-wide (SDPA's dispatch is), except the
    TorchFunctionMode, which lives on the entering thread.
    """

    def __enter__(self) -> enable:
        _acquire()
        return self

    def __exit__(self, *exc_info: object) -> None:
        _release()


def install() -> None:
    """Activate flashsdpa for the whole process (until uninstall()); idempotent."""
    global _installed
    with _lock:
        if not _installed:
            _acquire()
            _installed = True


def uninstall() -> None:
    """Undo install(); a no-op if not installed. Active enable() contexts stay active."""
    global _installed
    with _lock:
        if _installed:
            _installed = False
            _release()


def is_active() -> bool:
    """Whether flashsdpa's routers are registered (an enable() context, install() or the registry)."""
    return _refcount > 0


class _RegistryHandle:
    """What torch.nn.attention.activate_flash_attention_impl("FLASHSDPA") keeps: one activation,
    released by restore_flash_attention_impl() through remove()."""

    def __init__(self) -> None:
        _acquire()
        self._held = True

    def remove(self) -> None:
        if self._held:
            self._held = False
            _release()


def _register_with_torch() -> bool:
    """Offer flashsdpa to torch.nn.attention's registry (torch 2.10+). Never activates."""
    register = getattr(torch.nn.attention, "register_flash_attention_impl", None)
    if register is None:
        return False
    register(REGISTRY_NAME, register_fn=_RegistryHandle)
    return True


_register_with_torch()
