# routers.py: flashsdpa's kernels behind PyTorch's fused SDPA ops, at their CUDA dispatch key.
#
# Owns the routers: Python kernels registered (by activation.py) at the CUDA key of
# aten::_scaled_dot_product_flash_attention[_backward] and aten::_flash_attention_forward
# [_no_dropout_inplace] / _backward, which run our kernels when selection.py says they can and
# otherwise hand the call, unchanged, to the kernel PyTorch had there (captured before we
# registered); the outputs they allocate in each op's meta contract; the route table, checked
# against the live schemas; and the one torch.library.Library that holds them.
#
# Over 500 lines: the five routers share their plans, fallback and output contracts here, and
# splitting the dense flash ops from SDPA's would put one route table in two modules.
#
# Routers never override aten::scaled_dot_product_attention itself (that breaks autograd and is
# ignored by torch.compile) and never register at Meta / Autograd: autograd, autocast, fake
# tensors and Inductor stay PyTorch's; only the CUDA kernel behind the flash ops changes.
"""The routers at the CUDA key of PyTorch's flash ops, with per-call fallback to PyTorch's kernel."""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from flashsdpa import _backend, dropout, masks, reporting, selection
from flashsdpa.reporting import log

__all__ = ["OVERRIDE_WARNING", "ROUTED", "capture_native", "register_routers", "routable", "schema_mismatch",
           "sdpa_backward_reason", "sdpa_forward_reason", "softmax_scale", "unregister_routers"]  # fmt: skip

# Forward calls that reached a router, served or not: the SDPA entry (entry.py) reads it around
# PyTorch's SDPA to learn, for one index read and compare, whether a router saw the call (it then
# counts the call itself if not). One increment per forward, on the calling thread. int64 memory
# (reporting.int64_cells): the C++ routers (cxx_routers.py) bump the same cell.
ROUTED = reporting.int64_cells(1)

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


def softmax_scale(scale: float | None, head_dim: int) -> float:
    # PyTorch's calculate_scale: the given scale, else 1/sqrt of the (already padded) head dim.
    return 1.0 / math.sqrt(head_dim) if scale is None else scale


# PyTorch's warning on the first kernel registered over another in a process. Its text starts
# with "Warning only once for all operators, ..." and a newline: without (?s) the filter's match
# stopped at that newline and the warning reached stderr (seen on the H200 in session 6).
OVERRIDE_WARNING = r"(?s).*previously registered kernel"

# ---- fallback ------------------------------------------------------------------------------------

# aten op name -> PyTorch's own CUDA kernel (SafeKernelFunction), captured before our router was
# registered; None where torch has no CUDA kernel (a CPU-only torch, where CUDA is never reached).
_NATIVE: dict[str, Any] = {}


def _fall_back(
    op: str, counts: reporting.Counts, reason: str, keyset: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    """Hand the call to PyTorch's kernel with the arguments exactly as the dispatcher gave them."""
    counts[1] += 1
    reporting.note_fallback(f"aten::{op}", reason)
    native = _NATIVE.get(op)
    if native is None:
        raise RuntimeError(f"flashsdpa: aten::{op} has no PyTorch CUDA kernel to fall back to ({reason})")
    # call_boxed with our keyset runs the captured kernel directly: calling torch.ops.aten.<op>
    # here would dispatch back into this router.
    return native.call_boxed(keyset, *args, **kwargs)


def _dropout_reason(dropout_p: float) -> str:
    # The masked routers' (routers_masked.py): dropout kernels exist beside the plain ones only.
    return f"dropout_p={dropout_p}: dropout is not served with attn_mask (without a mask it is)"


_DEBUG_MASK_REASON = "return_debug_mask=True: the debug attention mask is not supported"

# Our backward adds dQ contributions with float32 atomics, so its dQ is not bitwise reproducible.


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
_SDPA_FWD_COUNTS = reporting.counter(f"aten::{_SDPA_FWD}")
_SDPA_BWD_COUNTS = reporting.counter(f"aten::{_SDPA_BWD}")


# SDPA's flash op sends only square causal calls (its filter), where both alignments agree: its
# kernel aligns causal masks bottom-right, so the routers do too.
_SDPA_MASKS = (masks.NO_MASK, masks.CAUSAL_BOTTOM_RIGHT)  # by is_causal


def sdpa_forward_reason(
    query: Tensor, key: Tensor, value: Tensor, dropout_p: float, return_debug_mask: bool
) -> str | None:
    """Why the forward router leaves this call to PyTorch's kernel, or None (it serves it)."""
    if return_debug_mask:
        return _DEBUG_MASK_REASON
    reason = selection.dense_reason(query, key, value)
    if reason is None and value.shape[3] != query.shape[3]:
        reason = f"value head_dim={value.shape[3]}: this op needs query's head_dim={query.shape[3]}"
    if reason is None and dropout_p != 0.0:  # both masks of this op are served alike
        backward = query.requires_grad or key.requires_grad or value.requires_grad
        reason = selection.dropout_reason(query, value, masks.NO_MASK, dropout_p, varlen=False, backward=backward)
    return reason


def sdpa_backward_reason(args: tuple[Any, ...]) -> str | None:
    """Why the backward router leaves this call (its positional arguments) to PyTorch's kernel, or None."""
    grad_out, query, key, value, out, logsumexp, cum_seq_q, cum_seq_k, _, _, dropout_p, is_causal, seed, _ = args
    if cum_seq_q is not None or cum_seq_k is not None:
        return "cum_seq_q / cum_seq_k given: the dense SDPA backward takes none"
    reason = selection.dense_reason(query, key, value)
    if reason is None and dropout_p != 0.0:
        reason = selection.dropout_reason(
            query, value, _SDPA_MASKS[is_causal], dropout_p, varlen=False, backward=True
        ) or dropout.rng_state_reason(seed, query.device)
    # A user who asked for deterministic algorithms gets a family of ours whose backward is
    # bitwise reproducible (sm90), else PyTorch's kernel (which honours the flag).
    bits = _backend.FEATURE_BITS["dropout"] if dropout_p != 0.0 else 0
    return (
        reason
        or _bwd_tensors_reason(grad_out, out, logsumexp, query, value, tuple(query.shape[:3]))
        or _backend.deterministic_reason(query, value, _SDPA_MASKS[is_causal], False, bits)
    )


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
    # (The C++ routers' fallback op calls it for dropout calls, which it serves: cxx_routers.py.)
    ROUTED[0] += 1
    reason = sdpa_forward_reason(query, key, value, dropout_p, return_debug_mask)
    if reason is not None:
        args = (query, key, value, dropout_p, is_causal, return_debug_mask)
        return _fall_back(_SDPA_FWD, _SDPA_FWD_COUNTS, reason, keyset, args, {"scale": scale})
    batch, heads, seqlen_q, head_dim = query.shape
    out = torch.empty_like(query)
    lse = query.new_empty(batch, heads, seqlen_q, dtype=torch.float32)
    if dropout_p != 0.0:  # PyTorch's generator use and rng state format (dropout.py)
        rng = dropout.take(dropout_p, batch, heads, query.device, _NATIVE.get(_FLASH_FWD))
        _backend.launch_fwd(query, key, value, out, lse, softmax_scale(scale, head_dim), _SDPA_MASKS[is_causal],
                            dropout=rng.item)  # fmt: skip
        _SDPA_FWD_COUNTS[0] += 1
        return (out, lse, None, None, seqlen_q, key.shape[2], rng.philox_seed, rng.philox_offset,
                _unused_outputs(query)[2])  # fmt: skip
    _backend.launch_fwd(query, key, value, out, lse, softmax_scale(scale, head_dim), _SDPA_MASKS[is_causal])
    _SDPA_FWD_COUNTS[0] += 1
    return (out, lse, None, None, seqlen_q, key.shape[2], *_unused_outputs(query))


def _sdpa_flash_backward(keyset: Any, *args: Any, scale: float | None = None) -> Any:
    # (grad_out, query, key, value, out, logsumexp, cum_seq_q, cum_seq_k, max_q, max_k, dropout_p,
    #  is_causal, philox_seed, philox_offset): all required, so always all there.
    grad_out, query, key, value, out, logsumexp, _, _, _, _, dropout_p, is_causal, seed, _ = args
    reason = sdpa_backward_reason(args)
    if reason is not None:
        return _fall_back(_SDPA_BWD, _SDPA_BWD_COUNTS, reason, keyset, args, {"scale": scale})
    dq, dk, dv = torch.empty_like(query), torch.empty_like(key), torch.empty_like(value)
    grad_out = _backend.aligned_rows(grad_out)
    scale_ = softmax_scale(scale, query.shape[3])
    drop = dropout.from_rng_state(dropout_p, seed) if dropout_p != 0.0 else None
    _backend.launch_bwd(grad_out, query, key, value, out, logsumexp, dq, dk, dv, scale_, _SDPA_MASKS[is_causal],
                        dropout=drop)  # fmt: skip
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
_FLASH_FWD_COUNTS = reporting.counter(f"aten::{_FLASH_FWD}")
_FLASH_FWD_INPLACE_COUNTS = reporting.counter(f"aten::{_FLASH_FWD_INPLACE}")
_FLASH_BWD_COUNTS = reporting.counter(f"aten::{_FLASH_BWD}")

# Keyword-only arguments the routers read. num_splits sets the decode kernel's split count (dense
# calls of <= 16 query rows; elsewhere it has nothing to split); alibi_slopes is served by the
# forward (below); any other keyword given (block_table, newer ones) means math our kernels do not do.
_FLASH_KEYWORDS = frozenset(
    {"scale", "window_size_left", "window_size_right", "seqused_k", "num_splits", "alibi_slopes"}
)
# ALiBi on this road is forward-only: _flash_attention_backward takes no slopes, so the gradient of
# a forward with ALiBi could not include it (PyTorch's own backward ignores them too). A forward
# whose inputs require grad is therefore left to PyTorch, with this reason; flashsdpa.attention(
# alibi_slopes=...) trains ALiBi (gradients of q, k, v and the slopes).
_ALIBI_GRAD_REASON = (
    "alibi_slopes with inputs that require grad: aten::_flash_attention_backward takes no slopes "
    "(ALiBi is forward-only on this op; flashsdpa.attention(alibi_slopes=...) trains it)"
)


def _alibi_reason(slopes: Tensor, query: Tensor, batch: int, heads: int) -> str | None:
    if not isinstance(slopes, Tensor) or slopes.dtype != torch.float32 or slopes.device != query.device:
        return f"alibi_slopes: needs a float32 tensor on {query.device}"
    if tuple(slopes.shape) not in ((heads,), (batch, heads)):
        return f"alibi_slopes {tuple(slopes.shape)}: needs ({heads},) or ({batch}, {heads})"
    return None


@dataclass(frozen=True)
class _FlashPlan:
    """A served _flash_attention_* call: the mask, and dense views or packed tensors."""

    mask: masks.MaskSpec
    varlen: bool
    q: Tensor  # dense: (B, H, S, D) views of the (B, S, H, D) arguments; varlen: the (total, H, D) rows
    k: Tensor
    v: Tensor
    mods: _backend.Mods | None = None  # ALiBi (forward only)
    dropout_p: float = 0.0


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
    for name, given in kwargs.items():
        if name not in _FLASH_KEYWORDS and given is not None:
            return f"{name} given: not supported by flashsdpa", None
    if (cum_seq_q is None) != (cum_seq_k is None):
        return "cum_seq_q / cum_seq_k: give both or neither", None
    varlen = cum_seq_q is not None
    if varlen and dropout_p != 0.0:
        return f"dropout_p={dropout_p} with packed (varlen) inputs: not served (dense inputs are)", None
    if not varlen and (query.dim() != 4 or key.dim() != 4):
        return f"query.dim()={query.dim()}: dense inputs need 4 (batch, seq_len, heads, head_dim)", None
    # PyTorch's kernel reads windows, is_causal and the lengths as masks.torch_flash spells out.
    left, right = kwargs.get("window_size_left"), kwargs.get("window_size_right")
    seqlen_q, seqlen_k = (max_q, max_k) if varlen else (query.shape[1], key.shape[1])
    mask = masks.torch_flash(is_causal, left, right, seqlen_q, seqlen_k)
    if value.shape[-1] != query.shape[-1]:
        return f"value head_dim={value.shape[-1]}: this op needs query's head_dim={query.shape[-1]}", None
    seqused_k = kwargs.get("seqused_k")
    slopes = kwargs.get("alibi_slopes")
    mods: _backend.Mods | None = None
    if slopes is not None:  # only a forward has the keyword
        if query.requires_grad or key.requires_grad or value.requires_grad:
            return _ALIBI_GRAD_REASON, None
        heads, batch = query.shape[-2], (cum_seq_q.shape[0] - 1 if varlen else query.shape[0])  # type: ignore[union-attr]
        reason = _alibi_reason(slopes, query, batch, heads)
        if reason is not None:
            return reason, None
        mods = (0.0, slopes.contiguous(), None)
    bits = _backend.feature_bits(mods)
    if varlen:
        reason = selection.varlen_reason(
            query, key, value, cum_seq_q, cum_seq_k, seqused_k, max_q, max_k  # type: ignore[arg-type]
        ) or selection.features_reason(query, value, mask, bits, varlen=True, backward=backward)
        return reason, (None if reason else _FlashPlan(mask, True, query, key, value, mods))
    if seqused_k is not None:
        return "seqused_k given with dense inputs: PyTorch's dense kernel ignores it; left to it", None
    q, k, v = query.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2)
    reason = selection.dense_reason(q, k, v)
    if reason is None and dropout_p != 0.0:
        if mods is not None:
            return f"dropout_p={dropout_p} with alibi_slopes: no kernel serves both", None
        grad = backward or query.requires_grad or key.requires_grad or value.requires_grad
        why = selection.dropout_reason(q, v, mask, dropout_p, varlen=False, backward=grad)
        return why, (None if why else _FlashPlan(mask, False, q, k, v, None, dropout_p))
    reason = reason or selection.features_reason(q, v, mask, bits, varlen=False, backward=backward)
    return reason, (None if reason else _FlashPlan(mask, False, q, k, v, mods))


def _flash_forward_run(
    plan: _FlashPlan, out: Tensor, args: tuple[Any, ...], kwargs: dict[str, Any], drop: Any = None
) -> Tensor:
    """Run a planned forward into ``out`` (laid out like the query argument); returns the LSE.
    ``args`` are the forward's (query, key, value, cum_seq_q, cum_seq_k, max_q, max_k, ...);
    ``drop``: spec.dropout of a dropout call (dense only)."""
    cum_seq_q, cum_seq_k, max_q, max_k = args[3:7]
    scale = softmax_scale(kwargs.get("scale"), plan.q.shape[-1])
    if plan.varlen:
        lse = out.new_empty(plan.q.shape[1], plan.q.shape[0], dtype=torch.float32)
        seqused_k = kwargs.get("seqused_k")
        varlen = (cum_seq_q, cum_seq_k, seqused_k, max_q, max_k)
        _backend.launch_fwd(plan.q, plan.k, plan.v, out, lse, scale, plan.mask, varlen, mods=plan.mods)
    else:
        batch, heads, seqlen_q = plan.q.shape[:3]
        lse = out.new_empty(batch, heads, seqlen_q, dtype=torch.float32)
        # num_splits (torch >= 2.12): the decode kernel's split count where a call takes it (<= 16
        # query rows), as PyTorch's kernel honours it; 0 / None: our heuristic.
        splits = min(max(int(kwargs.get("num_splits") or 0), 0), _backend.MAX_SPLITS)
        if drop is not None:  # the forward kernel (the decode one has no dropout)
            _backend.launch_fwd(plan.q, plan.k, plan.v, out.transpose(1, 2), lse, scale, plan.mask, dropout=drop)
        elif plan.mods is None:
            _backend.launch_fwd(plan.q, plan.k, plan.v, out.transpose(1, 2), lse, scale, plan.mask, num_splits=splits)
        else:  # the decode kernel takes no score modifiers: such a call runs the forward kernel
            _backend.launch_fwd(plan.q, plan.k, plan.v, out.transpose(1, 2), lse, scale, plan.mask, mods=plan.mods)
    return lse


def _flash_forward(keyset: Any, *args: Any, **kwargs: Any) -> Any:
    # (query, key, value, cum_seq_q, cum_seq_k, max_q, max_k, dropout_p, is_causal, return_debug_mask)
    query, key, value, cum_seq_q, cum_seq_k, max_q, max_k, dropout_p, is_causal, return_debug_mask = args
    ROUTED[0] += 1
    reason, plan = _flash_plan(query, key, value, cum_seq_q, cum_seq_k, max_q, max_k, dropout_p, is_causal, kwargs)
    if plan is not None and return_debug_mask:
        reason, plan = _DEBUG_MASK_REASON, None
    if plan is None:
        return _fall_back(_FLASH_FWD, _FLASH_FWD_COUNTS, str(reason), keyset, args, kwargs)
    out = torch.empty_like(query)
    if plan.dropout_p != 0.0:  # PyTorch's generator use and rng state format (dropout.py)
        rng = dropout.take(plan.dropout_p, plan.q.shape[0], plan.q.shape[1], query.device, _NATIVE.get(_FLASH_FWD))
        lse = _flash_forward_run(plan, out, args, kwargs, rng.item)
        _FLASH_FWD_COUNTS[0] += 1
        return (out, lse, rng.philox_seed, rng.philox_offset, _unused_outputs(query)[2])
    lse = _flash_forward_run(plan, out, args, kwargs)
    _FLASH_FWD_COUNTS[0] += 1
    return (out, lse, *_unused_outputs(query))


def _flash_forward_inplace(keyset: Any, *args: Any, **kwargs: Any) -> Any:
    # (out, then _flash_attention_forward's arguments); writes out, returns the LSE.
    out, query, key, value, cum_seq_q, cum_seq_k, max_q, max_k, dropout_p, is_causal, return_debug_mask = args
    reason, plan = _flash_plan(query, key, value, cum_seq_q, cum_seq_k, max_q, max_k, dropout_p, is_causal, kwargs)
    if plan is not None and return_debug_mask:
        reason, plan = _DEBUG_MASK_REASON, None
    if plan is not None and dropout_p != 0.0:
        reason, plan = f"dropout_p={dropout_p}: this op is the no-dropout one (PyTorch's kernel says so)", None
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
    grad_out, query, key, value, out, logsumexp, cum_seq_q, cum_seq_k, max_q, max_k, dropout_p, is_causal = args[:12]
    seed = args[12]  # the forward's rng state
    reason, plan = _flash_plan(
        query, key, value, cum_seq_q, cum_seq_k, max_q, max_k, dropout_p, is_causal, kwargs, backward=True
    )
    if plan is not None and plan.dropout_p != 0.0:  # the forward's rng state, PyTorch's format
        reason = dropout.rng_state_reason(seed, query.device)
        plan = None if reason else plan
    if plan is not None:  # deterministic mode: a family of ours that has it, else PyTorch's kernel
        bits = _backend.FEATURE_BITS["dropout"] if plan.dropout_p != 0.0 else 0
        reason = _backend.deterministic_reason(plan.q, plan.v, plan.mask, plan.varlen, bits)
        plan = None if reason else plan
    if plan is not None:
        lse_shape = (query.shape[1], query.shape[0]) if plan.varlen else tuple(plan.q.shape[:3])
        reason = _bwd_tensors_reason(grad_out, out, logsumexp, query, value, lse_shape)
        plan = None if reason else plan
    if plan is None:
        return _fall_back(_FLASH_BWD, _FLASH_BWD_COUNTS, str(reason), keyset, args, kwargs)
    grad_out = _backend.aligned_rows(grad_out)
    dq, dk, dv = torch.empty_like(query), torch.empty_like(key), torch.empty_like(value)
    scale = softmax_scale(kwargs.get("scale"), query.shape[-1])
    if plan.varlen:
        varlen = (cum_seq_q, cum_seq_k, None, max_q, max_k)
        _backend.launch_bwd(grad_out, query, key, value, out, logsumexp, dq, dk, dv, scale, plan.mask, varlen)
    else:
        views = (t.transpose(1, 2) for t in (grad_out, out, dq, dk, dv))
        grad_out_, out_, dq_, dk_, dv_ = views
        drop = dropout.from_rng_state(plan.dropout_p, seed) if plan.dropout_p != 0.0 else None
        _backend.launch_bwd(grad_out_, plan.q, plan.k, plan.v, out_, logsumexp, dq_, dk_, dv_, scale, plan.mask,
                            dropout=drop)  # fmt: skip
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

# routers_masked.py appends the masked ops' routes at its import (the package imports it).
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


def routable(route: _Route) -> bool:
    """Whether this torch has ``route``'s op with a schema its router takes (logged when not)."""
    packet = getattr(torch.ops.aten, route.op, None)
    if packet is None:
        return False  # older torch: the op does not exist (e.g. the inplace forward before 2.12)
    mismatch = schema_mismatch(route, packet.default._schema)
    if mismatch is not None:
        log.warning("flashsdpa: not routing aten::%s on this torch: %s", route.op, mismatch)
        return False
    return True


def capture_native(op: str) -> None:
    """Capture PyTorch's CUDA kernel of ``op`` for the fallback: before any router of ours is
    registered there (afterwards get_kernel would return ours)."""
    _NATIVE[op] = _native_kernel(op)


def register_routers(skip: frozenset[str] = frozenset()) -> torch.library.Library:
    """One Library holding every router this torch can take, but those of the ops in ``skip``
    (the C++ routers' ops, when they serve); destroying it restores PyTorch's kernels."""
    lib = torch.library.Library("aten", "IMPL")
    for route in _ROUTES:
        if route.op in skip or not routable(route):
            continue
        capture_native(route.op)
        with warnings.catch_warnings():
            # "Overriding a previously registered kernel ...": overriding is the point.
            warnings.filterwarnings("ignore", message=OVERRIDE_WARNING)
            lib.impl(route.op, route.router, "CUDA", with_keyset=True)
    return lib


def unregister_routers(lib: torch.library.Library) -> None:
    """Destroy the Library register_routers() made: PyTorch's kernels are back at once."""
    # _destroy() deregisters now; merely dropping the reference would wait for the GC.
    destroy = getattr(lib, "_destroy", None)
    if destroy is not None:
        destroy()

