# routers_masked.py: the routers of the ops PyTorch's SDPA sends masked calls to (issue 14): flash
# refuses an attn_mask, so such calls reach aten::_scaled_dot_product_cudnn_attention (first on
# Hopper in PyTorch's own order) or _scaled_dot_product_efficient_attention, and their backwards.
# They run our kernels with the mask as params.h's ScoreMods.bias and otherwise hand the call to
# PyTorch's kernel, as routers.py's do; their routes join routers.py's table at this module's import
# (the package's __init__ imports it), checked against the live schemas like the others (a torch
# whose schema differs keeps its own kernel, logged).
"""The routers of the masked SDPA ops (efficient attention, cuDNN), with per-call fallback."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from flashsdpa import _backend, masks, ops_masks, reporting, routers, selection
from flashsdpa.routers import (
    _DEBUG_MASK_REASON,
    ROUTED,
    _bwd_tensors_reason,
    _dropout_reason,
    _fall_back,
    _Route,
    softmax_scale,
)

__all__ = ["eff_forward_reason"]

# ---- routers: aten::_scaled_dot_product_efficient_attention[_backward] -----------------------------
# Where SDPA sends masked calls (flash refuses an attn_mask): (B, H, S, D) views, attn_bias the mask
# as SDPA prepared it (a boolean one converted to 0 / -inf, in the query's dtype, broadcast views
# with the last dim padded to 16 and sliced back), is_causal top-left (this op's mask type). The
# bias is our kernels' ScoreMods.bias (ops_masks.py's view: 0 strides where it broadcasts), its
# gradient dS (grad_input_mask[3]) returned in attn_bias's shape as PyTorch's kernel does.
# Its outputs follow torch/_meta_registrations.py: out (B, S, H, Dv) memory seen as (B, H, S, Dv),
# logsumexp (B, H, ceil(S / 32) * 32) (0 wide without compute_log_sumexp), and with dropout 0 the
# philox seed / offset as PyTorch's kernel leaves them (empty int64 scalars, host memory).

_EFF_FWD = "_scaled_dot_product_efficient_attention"
_EFF_BWD = "_scaled_dot_product_efficient_attention_backward"
_EFF_FWD_COUNTS = reporting.counter(f"aten::{_EFF_FWD}")
_EFF_BWD_COUNTS = reporting.counter(f"aten::{_EFF_BWD}")
_EFF_MASKS = (masks.NO_MASK, masks.CAUSAL_TOP_LEFT)  # by is_causal
_BIAS_BITS = _backend.FEATURE_BITS["bias"]  # every served call's: _bias_reason leaves unmasked ones to PyTorch


# An unmasked call reaches the efficient or cuDNN op inside enable() only where the user chose that
# backend (sdpa_kernel without flash; enable() puts flash first): that choice stands.
NO_BIAS_REASON = "no attn_mask: an unmasked call reaches this op only where sdpa_kernel chose it over flash; left to it"


def _bias_reason(attn_bias: Tensor | None, query: Tensor, key: Tensor, value: Tensor, is_causal: bool) -> str | None:
    # A decode-sized call (padded batched generation: 1..16 query rows) is ours where the table's
    # decode path takes the bias (decode_kernel_sm80.cuh's kModsBias): the forward kernel would run
    # one 128-row CTA per (batch, head) over every key, so elsewhere PyTorch's masked kernels keep
    # it. Forward and backward ask the same rule: a served call's backward is the dense masked one
    # (the decode path is forward only), a left call's PyTorch's, never one paired with the other's.
    if attn_bias is None:
        return NO_BIAS_REASON
    target = (query.shape[0], query.shape[1], query.shape[2], key.shape[2])
    if attn_bias.dtype != query.dtype or attn_bias.device != query.device:
        return f"attn_bias {attn_bias.dtype} on {attn_bias.device}: needs query's dtype {query.dtype} on {query.device}"
    if attn_bias.dim() > 4 or any(n not in (1, t) for n, t in zip(reversed(attn_bias.shape), reversed(target))):
        return f"attn_bias {tuple(attn_bias.shape)}: does not broadcast to {target}"
    return selection.decode_sized_mask_reason(query, value, _EFF_MASKS[is_causal])


def _eff_mods(attn_bias: Tensor, query: Tensor, key: Tensor, backward: bool) -> _backend.Mods:
    """A served call's modifiers: the mask alone (_bias_reason leaves no served call without one), with
    its per-call summary (ops_masks.bias_cells: the tiles it hides are skipped) except for a
    deterministic backward, whose host drops it (api.cpp)."""
    shape = (query.shape[0], query.shape[1], query.shape[2], key.shape[2])
    skip = not (backward and torch.are_deterministic_algorithms_enabled())
    return ops_masks.masked_mods(0.0, None, None, attn_bias, shape, skip=skip)


# The reasons the C++ routers (routers.cpp's NativeReason) find themselves, in its order, for the
# calls they run on PyTorch's kernel without Python: eff_forward_reason's first two checks give
# exactly these sentences, so a call is reported the same on either road.
NATIVE_REASONS = (selection.half_dtype_reason(torch.float32), selection.half_dtype_reason(torch.float64), NO_BIAS_REASON)


def eff_forward_reason(query: Tensor, key: Tensor, value: Tensor, attn_bias: Tensor | None, dropout_p: float,
                       is_causal: bool, backward: bool = False) -> str | None:  # fmt: skip
    """Why the efficient-attention routers leave this call to PyTorch's kernel, or None. The first
    two checks are the C++ routers' (NATIVE_REASONS), in their order."""
    if query.dtype not in selection.HALF_DTYPES:
        return selection.dtype_reason(query.dtype)
    if attn_bias is None:
        return NO_BIAS_REASON
    if dropout_p != 0.0:
        return _dropout_reason(dropout_p)
    reason = selection.dense_reason(query, key, value)
    if reason is None and key.shape[1] != query.shape[1]:
        reason = f"key heads={key.shape[1]}: this op takes as many as query's ({query.shape[1]})"
    if reason is None:
        reason = _bias_reason(attn_bias, query, key, value, is_causal)
    if reason is None:
        reason = selection.features_reason(query, value, _EFF_MASKS[is_causal], _BIAS_BITS, varlen=False, backward=backward)
    return reason


def _eff_forward(keyset: Any, *args: Any, scale: float | None = None) -> Any:
    # (query, key, value, attn_bias, compute_log_sumexp[, dropout_p[, is_causal]])
    query, key, value, attn_bias, compute_lse = args[:5]
    dropout_p = args[5] if len(args) > 5 else 0.0
    is_causal = args[6] if len(args) > 6 else False
    ROUTED[0] += 1
    reason = eff_forward_reason(query, key, value, attn_bias, dropout_p, is_causal)
    if reason is not None:
        return _fall_back(_EFF_FWD, _EFF_FWD_COUNTS, reason, keyset, args, {"scale": scale})
    batch, heads, seqlen_q, _ = query.shape
    out = query.new_empty(batch, seqlen_q, heads, value.shape[3]).transpose(1, 2)
    lse_full = query.new_empty(batch, heads, (seqlen_q + 31) // 32 * 32 if compute_lse else 0, dtype=torch.float32)
    lse = lse_full.narrow(2, 0, seqlen_q) if compute_lse else None
    scale_ = softmax_scale(scale, query.shape[3])
    _backend.launch_fwd(query, key, value, out, lse, scale_, _EFF_MASKS[is_causal],
                        mods=_eff_mods(attn_bias, query, key, backward=False))
    _EFF_FWD_COUNTS[0] += 1
    return out, lse_full, torch.empty((), dtype=torch.long), torch.empty((), dtype=torch.long)


def _eff_backward(keyset: Any, *args: Any, scale: float | None = None) -> Any:
    # (grad_out_, query, key, value, attn_bias, out, logsumexp, philox_seed, philox_offset, dropout_p,
    #  grad_input_mask[, is_causal])
    grad_out, query, key, value, attn_bias, out, logsumexp, _, _, dropout_p, grad_input_mask = args[:11]
    is_causal = args[11] if len(args) > 11 else False
    reason = eff_forward_reason(query, key, value, attn_bias, dropout_p, is_causal, backward=True)
    seqlen_q = query.shape[2]
    lse_shape = (query.shape[0], query.shape[1], (seqlen_q + 31) // 32 * 32)
    if reason is None and (logsumexp.dtype != torch.float32 or tuple(logsumexp.shape) != lse_shape):
        reason = f"logsumexp {tuple(logsumexp.shape)} {logsumexp.dtype}: needs {lse_shape} float32"
    if reason is None:
        reason = _bwd_tensors_reason(grad_out, out, logsumexp.narrow(2, 0, seqlen_q), query, value, tuple(query.shape[:3]))
    if reason is None:
        reason = _backend.deterministic_reason(query, value, _EFF_MASKS[is_causal], False, _BIAS_BITS)
    if reason is not None:
        return _fall_back(_EFF_BWD, _EFF_BWD_COUNTS, reason, keyset, args, {"scale": scale})
    batch, heads, _, head_dim = query.shape
    seqlen_k = key.shape[2]
    dq = query.new_empty(batch, seqlen_q, heads, head_dim).transpose(1, 2)
    dk = key.new_empty(batch, seqlen_k, heads, head_dim).transpose(1, 2)
    dv = value.new_empty(batch, seqlen_k, heads, value.shape[3]).transpose(1, 2)
    grad_out = _backend.aligned_rows(grad_out)
    mods = _eff_mods(attn_bias, query, key, backward=True)
    # The dense gradient buffer, filled only where some elements are never stored (ops_masks.dense_grad).
    d_full = (ops_masks.dense_grad(query, (batch, heads, seqlen_q, seqlen_k), unvisited=is_causal or len(mods) > 4)
              if grad_input_mask[3] else None)  # fmt: skip
    _backend.launch_bwd(grad_out, query, key, value, out, logsumexp.narrow(2, 0, seqlen_q), dq, dk, dv,
                        softmax_scale(scale, head_dim), _EFF_MASKS[is_causal], None, mods, (None, None, d_full))
    _EFF_BWD_COUNTS[0] += 1
    grad_bias = None if d_full is None else ops_masks.reduce_to(d_full, tuple(attn_bias.shape))
    return dq, dk, dv, grad_bias


# ---- routers: aten::_scaled_dot_product_cudnn_attention[_backward] --------------------------------
# SDPA's first backend on Hopper in PyTorch's own order: a masked call that flash turns away goes
# here before the efficient op. Same math as the efficient routers (is_causal top-left, SDPA's
# meaning); outputs as its meta: out in the query's layout, logsumexp (B, H, S, 1), cum_seq_q /
# cum_seq_k / the debug mask undefined, max_q / max_k the lengths. Its backward returns no bias
# gradient (PyTorch's neither), so only dq, dk, dv.

_CUDNN_FWD = "_scaled_dot_product_cudnn_attention"
_CUDNN_BWD = "_scaled_dot_product_cudnn_attention_backward"
_CUDNN_FWD_COUNTS = reporting.counter(f"aten::{_CUDNN_FWD}")
_CUDNN_BWD_COUNTS = reporting.counter(f"aten::{_CUDNN_BWD}")


def _like_query(query: Tensor, dv: int) -> Tensor:
    """(B, H, S, dv) in the query's dimension order (the meta's alloc_with_matching_layout)."""
    strides = query.stride()
    order = sorted(range(4), key=lambda d: -strides[d])
    shape = (*query.shape[:3], dv)
    return torch.empty_permuted(shape, order, dtype=query.dtype, device=query.device)


def _cudnn_forward(keyset: Any, *args: Any, scale: float | None = None) -> Any:
    # (query, key, value, attn_bias, compute_log_sumexp[, dropout_p[, is_causal[, return_debug_mask]]])
    query, key, value, attn_bias, _ = args[:5]
    dropout_p = args[5] if len(args) > 5 else 0.0
    is_causal = args[6] if len(args) > 6 else False
    return_debug_mask = args[7] if len(args) > 7 else False
    ROUTED[0] += 1
    reason = _DEBUG_MASK_REASON if return_debug_mask else None
    if reason is None:
        reason = selection.dense_reason(query, key, value) or _bias_reason(attn_bias, query, key, value, is_causal)
    if reason is None and dropout_p != 0.0:
        reason = _dropout_reason(dropout_p)
    if reason is None:
        reason = selection.features_reason(query, value, _EFF_MASKS[is_causal], _BIAS_BITS, varlen=False)
    if reason is not None:
        return _fall_back(_CUDNN_FWD, _CUDNN_FWD_COUNTS, reason, keyset, args, {"scale": scale})
    batch, heads, seqlen_q, head_dim = query.shape
    out = _like_query(query, value.shape[3])
    lse = query.new_empty(batch, heads, seqlen_q, 1, dtype=torch.float32)
    _backend.launch_fwd(query, key, value, out, lse.select(3, 0), softmax_scale(scale, head_dim), _EFF_MASKS[is_causal],
                        mods=_eff_mods(attn_bias, query, key, backward=False))  # fmt: skip
    _CUDNN_FWD_COUNTS[0] += 1
    return (out, lse, None, None, seqlen_q, key.shape[2], torch.empty((), dtype=torch.long),
            torch.empty((), dtype=torch.long), None)  # fmt: skip


def _cudnn_backward(keyset: Any, *args: Any, scale: float | None = None) -> Any:
    # (grad_out, query, key, value, out, logsumexp, philox_seed, philox_offset, attn_bias, cum_seq_q,
    #  cum_seq_k, max_q, max_k, dropout_p, is_causal)
    grad_out, query, key, value, out, logsumexp, _, _, attn_bias, cum_seq_q, cum_seq_k, _, _, dropout_p, is_causal = args
    reason = None
    if cum_seq_q is not None and cum_seq_q.numel() or cum_seq_k is not None and cum_seq_k.numel():
        reason = "cum_seq_q / cum_seq_k given: the dense SDPA backward takes none"
    attn_bias = attn_bias if attn_bias is not None and attn_bias.numel() else None
    if reason is None:
        reason = selection.dense_reason(query, key, value) or _bias_reason(attn_bias, query, key, value, is_causal)
    if reason is None and dropout_p != 0.0:
        reason = _dropout_reason(dropout_p)
    lse_shape = (*query.shape[:3], 1)
    if reason is None and (logsumexp.dtype != torch.float32 or tuple(logsumexp.shape) != lse_shape):
        reason = f"logsumexp {tuple(logsumexp.shape)} {logsumexp.dtype}: needs {lse_shape} float32"
    if reason is None:
        reason = (
            selection.features_reason(query, value, _EFF_MASKS[is_causal], _BIAS_BITS, varlen=False, backward=True)
            or _bwd_tensors_reason(grad_out, out, logsumexp.select(3, 0), query, value, tuple(query.shape[:3]))
            or _backend.deterministic_reason(query, value, _EFF_MASKS[is_causal], False, _BIAS_BITS)
        )
    if reason is not None:
        return _fall_back(_CUDNN_BWD, _CUDNN_BWD_COUNTS, reason, keyset, args, {"scale": scale})
    assert attn_bias is not None  # (_bias_reason refuses unmasked calls: NO_BIAS_REASON)
    dq, dk, dv = torch.empty_like(query), torch.empty_like(key), torch.empty_like(value)
    mods = _eff_mods(attn_bias, query, key, backward=True)
    grad_out = _backend.aligned_rows(grad_out)
    _backend.launch_bwd(grad_out, query, key, value, out, logsumexp.select(3, 0), dq, dk, dv,
                        softmax_scale(scale, query.shape[3]), _EFF_MASKS[is_causal], None, mods)  # fmt: skip
    _CUDNN_BWD_COUNTS[0] += 1
    return dq, dk, dv


# ---- the routes ------------------------------------------------------------------------------------

_EFF_FWD_ARGS = ("query", "key", "value", "attn_bias", "compute_log_sumexp", "dropout_p", "is_causal")
_EFF_BWD_ARGS = ("grad_out_", "query", "key", "value", "attn_bias", "out", "logsumexp", "philox_seed", "philox_offset",
                 "dropout_p", "grad_input_mask", "is_causal")  # fmt: skip
_CUDNN_FWD_ARGS = ("query", "key", "value", "attn_bias", "compute_log_sumexp", "dropout_p", "is_causal",
                   "return_debug_mask")  # fmt: skip
_CUDNN_BWD_ARGS = ("grad_out", "query", "key", "value", "out", "logsumexp", "philox_seed", "philox_offset", "attn_bias",
                   "cum_seq_q", "cum_seq_k", "max_q", "max_k", "dropout_p", "is_causal")  # fmt: skip

ROUTES: tuple[_Route, ...] = (
    _Route(_EFF_FWD, _eff_forward, _EFF_FWD_ARGS, frozenset({"scale"})),
    _Route(_EFF_BWD, _eff_backward, _EFF_BWD_ARGS, frozenset({"scale"})),
    _Route(_CUDNN_FWD, _cudnn_forward, _CUDNN_FWD_ARGS, frozenset({"scale"})),
    _Route(_CUDNN_BWD, _cudnn_backward, _CUDNN_BWD_ARGS, frozenset({"scale"})),
)
if not any(route.op == _EFF_FWD for route in routers._ROUTES):  # once, also under importlib.reload
    routers._ROUTES = (*routers._ROUTES, *ROUTES)
