# features.py: the direct API's training features (issue 14): attn_mask, dropout_p, softcap,
# alibi_slopes and sinks of flashsdpa.attention / attention_varlen. Owns their argument checks,
# the functional reference over them (dense and varlen, forward and backward, on top of
# reference.py and reference_features.py) and the CPU autograd path for masks and dropout. The
# score modifiers alone (softcap, ALiBi, sinks) go through ops.py's fwd_mods / bwd_mods (our
# kernels on CUDA: on Hopper sm90 both ways (the backward at head dims 64 and 128); forward() / backward() here
# on CPU); a CUDA call with attn_mask or dropout_p raises NotImplementedError (never a silent
# fallback). ops.py calls in here only when one of the arguments is given, so the existing path
# pays nothing for it.
"""Masks, dropout, softcap, ALiBi and sinks in the direct API, through the float32 reference."""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import Any, NamedTuple

import torch
from torch import Tensor

from flashsdpa import reference
from flashsdpa.masks import MaskSpec
from flashsdpa.reference_features import Features

__all__ = ["Grads", "additive", "attention", "attention_varlen", "backward", "backward_varlen", "forward", "forward_varlen"]

FEATURE_NAMES = ("attn_mask", "dropout_p", "softcap", "alibi_slopes", "sinks")


class Grads(NamedTuple):
    dq: Tensor
    dk: Tensor
    dv: Tensor
    d_mask: Tensor | None  # additive masks only, the mask's shape
    d_sinks: Tensor | None
    d_alibi: Tensor | None


@dataclass(frozen=True)
class Extras:
    """The feature arguments of one call (dense layout, or varlen's packed one)."""

    attn_mask: Tensor | None = None
    softcap: float = 0.0
    alibi_slopes: Tensor | None = None
    sinks: Tensor | None = None
    dropout_p: float = 0.0
    dropout_keep: Tensor | None = None


# ---- the functional reference ---------------------------------------------------------------------


def _features(shape: tuple[int, int, int, int], extras: Extras) -> Features:
    return Features(
        shape,
        attn_mask=extras.attn_mask,
        softcap=extras.softcap,
        alibi_slopes=extras.alibi_slopes,
        sinks=extras.sinks,
        dropout_p=extras.dropout_p,
        dropout_keep=extras.dropout_keep,
    )


def _shape(q: Tensor, k: Tensor) -> tuple[int, int, int, int]:
    return (q.shape[0], q.shape[1], q.shape[2], k.shape[2])


def forward(
    q: Tensor, k: Tensor, v: Tensor, *, scale: float, mask: MaskSpec, extras: Extras, block_size: int = 128
) -> tuple[Tensor, Tensor]:
    """reference.attention_forward with the features: ``out`` (B, Hq, Sq, Dv), ``lse`` (B, Hq, Sq)."""
    features = _features(_shape(q, k), extras)
    return reference.attention_forward(q, k, v, scale=scale, mask=mask, block_size=block_size, features=features)


def backward(
    dout: Tensor,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    out: Tensor,
    lse: Tensor,
    *,
    scale: float,
    mask: MaskSpec,
    extras: Extras,
    block_size: int = 128,
) -> Grads:
    features = _features(_shape(q, k), extras)
    dq, dk, dv = reference.attention_backward(
        dout, q, k, v, out, lse, scale=scale, mask=mask, block_size=block_size, features=features
    )
    return Grads(dq, dk, dv, features.d_mask, features.d_sinks, features.d_alibi)


def _seq_slice(t: Tensor | None, rows_q: slice, rows_k: slice) -> Tensor | None:
    """Sequence b's part of a varlen (H | 1, total_q | 1, total_k | 1) mask, as (1, H | 1, Sq, Sk)."""
    if t is None:
        return None
    t3 = t.reshape((1,) * (3 - t.dim()) + tuple(t.shape))
    return t3[:, rows_q if t3.shape[1] != 1 else slice(None), rows_k if t3.shape[2] != 1 else slice(None)][None]


def _seq_extras(extras: Extras, b: int, rows_q: slice, rows_k: slice) -> Extras:
    slopes = extras.alibi_slopes
    return Extras(
        attn_mask=_seq_slice(extras.attn_mask, rows_q, rows_k),
        softcap=extras.softcap,
        alibi_slopes=slopes if slopes is None or slopes.dim() == 1 else slopes[b],
        sinks=extras.sinks,
        dropout_p=extras.dropout_p,
        dropout_keep=_seq_slice(extras.dropout_keep, rows_q, rows_k),
    )


def forward_varlen(
    q: Tensor, k: Tensor, v: Tensor, cu_q: Tensor, cu_k: Tensor, *, scale: float, mask: MaskSpec, extras: Extras
) -> tuple[Tensor, Tensor]:
    """Varlen forward: ``out`` (total_q, Hq, Dv), ``lse`` (Hq, total_q). ``attn_mask`` and
    ``dropout_keep`` broadcast to (Hq, total_q, total_k); sequence b reads its diagonal block.
    ``alibi_slopes`` (Hq,) or (B, Hq); ALiBi's distance uses each sequence's own lengths."""
    out = q.new_zeros(q.shape[0], q.shape[1], v.shape[2])
    lse = torch.full((q.shape[1], q.shape[0]), math.inf, dtype=torch.float32, device=q.device)
    for b, rows_q, rows_k in reference.varlen_sequences(cu_q, cu_k):
        seq_out, seq_lse = forward(
            reference.as_batch(q[rows_q]),
            reference.as_batch(k[rows_k]),
            reference.as_batch(v[rows_k]),
            scale=scale,
            mask=mask,
            extras=_seq_extras(extras, b, rows_q, rows_k),
        )
        out[rows_q] = seq_out[0].transpose(0, 1)
        lse[:, rows_q] = seq_lse[0]
    return out, lse


def _accumulate(total: Tensor | None, part: Tensor | None, index: tuple[Any, ...] = ()) -> Tensor | None:
    if part is None:
        return total
    if total is None:
        raise AssertionError("gradient accumulator missing")
    total[index] += part.reshape(total[index].shape)
    return total


def backward_varlen(
    dout: Tensor,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    out: Tensor,
    lse: Tensor,
    cu_q: Tensor,
    cu_k: Tensor,
    *,
    scale: float,
    mask: MaskSpec,
    extras: Extras,
) -> Grads:
    dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
    acc = torch.float64 if q.dtype == torch.float64 else torch.float32
    am = extras.attn_mask
    mask3 = None if am is None else am.reshape((1,) * (3 - am.dim()) + tuple(am.shape))
    d_mask = torch.zeros(mask3.shape, dtype=acc) if mask3 is not None and mask3.is_floating_point() else None
    slopes, sinks = extras.alibi_slopes, extras.sinks
    d_alibi = None if slopes is None else torch.zeros(slopes.shape, dtype=acc)
    d_sinks = None if sinks is None else torch.zeros(sinks.shape, dtype=acc)
    for b, rows_q, rows_k in reference.varlen_sequences(cu_q, cu_k):
        g = backward(
            reference.as_batch(dout[rows_q]),
            reference.as_batch(q[rows_q]),
            reference.as_batch(k[rows_k]),
            reference.as_batch(v[rows_k]),
            reference.as_batch(out[rows_q]),
            lse[:, rows_q].unsqueeze(0),
            scale=scale,
            mask=mask,
            extras=_seq_extras(extras, b, rows_q, rows_k),
        )
        dq[rows_q], dk[rows_k], dv[rows_k] = g.dq[0].transpose(0, 1), g.dk[0].transpose(0, 1), g.dv[0].transpose(0, 1)
        if d_mask is not None:  # (H | 1, total_q | 1, total_k | 1): the sequence's block
            rows = tuple(r if n != 1 else slice(None) for r, n in zip((rows_q, rows_k), d_mask.shape[1:]))
            _accumulate(d_mask, g.d_mask, (slice(None), *rows))
        if d_alibi is not None and slopes is not None:
            _accumulate(d_alibi, g.d_alibi, (b,) if slopes.dim() == 2 else ())
        _accumulate(d_sinks, g.d_sinks)

    def cast(t: Tensor | None, like: Tensor | None) -> Tensor | None:
        return None if t is None or like is None else t.to(like.dtype)

    d_mask = None if d_mask is None or am is None else d_mask.reshape(am.shape)
    return Grads(dq, dk, dv, cast(d_mask, am), cast(d_sinks, sinks), cast(d_alibi, slopes))


# ---- argument checks --------------------------------------------------------------------------------


def _number(name: str, value: object, low: float, high: float, high_open: bool) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(float(value)):
        raise TypeError(f"{name}={value!r}: needs a finite float")
    x = float(value)
    if x < low or (x >= high if high_open else x > high):
        bound = f"< {high}" if high_open else "finite"
        raise ValueError(f"{name}={value!r}: needs {low} <= {name} {bound}")
    return x


def _tensor(name: str, t: object, query: Tensor) -> Tensor:
    if not isinstance(t, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.device != query.device:
        raise ValueError(f"{name}.device={t.device}: differs from query.device={query.device}")
    return t


def check(
    query: Tensor,
    target: tuple[int, ...],
    batch: int,
    attn_mask: object,
    dropout_p: object,
    softcap: object,
    alibi_slopes: object,
    sinks: object,
) -> Extras:
    """The feature arguments, checked (errors name the argument and the limit). ``target`` is the
    shape the mask must broadcast to: (B, Hq, Sq, Sk), or varlen's (Hq, total_q, total_k)."""
    heads = target[-3]
    mask = None
    if attn_mask is not None:
        mask = _tensor("attn_mask", attn_mask, query)
        if mask.dtype not in (torch.bool, query.dtype, torch.float32):
            raise TypeError(f"attn_mask.dtype={mask.dtype}: needs torch.bool, float32 or query.dtype={query.dtype}")
        if mask.dim() > len(target) or any(n not in (1, t) for n, t in zip(reversed(mask.shape), reversed(target))):
            raise ValueError(f"attn_mask {tuple(mask.shape)}: needs a shape that broadcasts to {target}")
    slopes = None
    if alibi_slopes is not None:
        slopes = _tensor("alibi_slopes", alibi_slopes, query)
        if slopes.dtype != torch.float32 or tuple(slopes.shape) not in ((heads,), (batch, heads)):
            raise ValueError(
                f"alibi_slopes {tuple(slopes.shape)} {slopes.dtype}: needs float32 ({heads},) or ({batch}, {heads})"
            )
    sink = None
    if sinks is not None:
        sink = _tensor("sinks", sinks, query)
        if sink.dtype not in (torch.float32, query.dtype) or tuple(sink.shape) != (heads,):
            raise ValueError(f"sinks {tuple(sink.shape)} {sink.dtype}: needs float32 or query.dtype, shape ({heads},)")
    return Extras(
        attn_mask=mask,
        softcap=0.0 if softcap is None else _number("softcap", softcap, 0.0, math.inf, False),
        alibi_slopes=slopes,
        sinks=sink,
        dropout_p=_number("dropout_p", dropout_p, 0.0, 1.0, True),
    )


def _given(extras: Extras) -> list[str]:
    values = (extras.attn_mask, extras.dropout_p, extras.softcap, extras.alibi_slopes, extras.sinks)
    return [n for n, x in zip(FEATURE_NAMES, values) if x is not None and (not isinstance(x, float) or x != 0.0)]


def kernel_served(extras: Extras) -> bool:
    """Whether only the score modifiers (softcap, ALiBi, sinks) are given: ops.py's fwd_mods /
    bwd_mods ops serve those (our kernels on CUDA, this module's reference on CPU); attn_mask and
    dropout still take :func:`attention` (CPU only)."""
    return extras.attn_mask is None and extras.dropout_p == 0.0


def dropout_only(extras: Extras) -> bool:
    """Whether dropout is the only feature given: ops_dropout.py's ops serve that on CUDA."""
    return (extras.dropout_p != 0.0 and extras.attn_mask is None and extras.softcap == 0.0
            and extras.alibi_slopes is None and extras.sinks is None)  # fmt: skip


def additive(attn_mask: Tensor, dtype: torch.dtype) -> Tensor:
    """attn_mask as the kernels take it (flashsdpa::fwd_masked): a boolean mask (True = attend) as
    0 / -inf, a float one in ``dtype`` (PyTorch converts the same way before its fused kernels)."""
    if attn_mask.dtype == torch.bool:
        zero = torch.zeros((), dtype=dtype, device=attn_mask.device)
        return torch.where(attn_mask, zero, torch.full((), -torch.inf, dtype=dtype, device=attn_mask.device))
    return attn_mask.to(dtype)


def not_served(api: str, extras: Extras) -> NotImplementedError:
    # attn_mask alone is served on CUDA by flashsdpa::fwd_masked (dense), dropout alone by
    # flashsdpa::fwd_dropout (dense); both together, or varlen, not yet.
    names = ", ".join(n for n in _given(extras) if n in ("attn_mask", "dropout_p"))
    return NotImplementedError(
        f"flashsdpa.{api} on CUDA: {names} not served by flashsdpa's kernels yet (issue 14; the CPU reference "
        f"implements them). See flashsdpa.explain(...) for what the kernels serve, or call "
        f"torch.nn.functional.scaled_dot_product_attention (attn_mask, dropout_p) instead"
    )


# ---- the CPU autograd path ----------------------------------------------------------------------------


@dataclass(frozen=True)
class _Call:
    scale: float
    mask: MaskSpec
    softcap: float
    dropout_p: float
    varlen: tuple[Tensor, Tensor] | None = None  # (cu_seqlens_q, cu_seqlens_k)


class _Attention(torch.autograd.Function):
    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        attn_mask: Tensor | None,
        alibi_slopes: Tensor | None,
        sinks: Tensor | None,
        keep: Tensor | None,
        call: _Call,
    ) -> tuple[Tensor, Tensor]:
        extras = Extras(attn_mask, call.softcap, alibi_slopes, sinks, call.dropout_p, keep)
        if call.varlen is None:
            out, lse = forward(q, k, v, scale=call.scale, mask=call.mask, extras=extras)
        else:
            out, lse = forward_varlen(q, k, v, *call.varlen, scale=call.scale, mask=call.mask, extras=extras)
        ctx.save_for_backward(q, k, v, out, lse, attn_mask, alibi_slopes, sinks, keep)
        ctx.call = call
        ctx.mark_non_differentiable(lse)
        return out, lse

    @staticmethod
    def backward(ctx: Any, dout: Tensor, _dlse: Tensor) -> tuple[Tensor | None, ...]:  # type: ignore[override]
        q, k, v, out, lse, attn_mask, slopes, sinks, keep = ctx.saved_tensors
        call: _Call = ctx.call
        extras = Extras(attn_mask, call.softcap, slopes, sinks, call.dropout_p, keep)
        if call.varlen is None:
            g = backward(dout, q, k, v, out, lse, scale=call.scale, mask=call.mask, extras=extras)
        else:
            g = backward_varlen(dout, q, k, v, out, lse, *call.varlen, scale=call.scale, mask=call.mask, extras=extras)
        need = ctx.needs_input_grad
        return (
            g.dq,
            g.dk,
            g.dv,
            g.d_mask if need[3] else None,
            g.d_alibi if need[4] else None,
            g.d_sinks if need[5] else None,
            None,
            None,
        )


def _keep(shape: tuple[int, ...], dropout_p: float, device: torch.device) -> Tensor | None:
    """The CPU path's dropout keep-mask, from the default generator (the kernels make their own)."""
    return None if dropout_p == 0.0 else torch.rand(shape, device=device) >= dropout_p


def attention(
    query: Tensor, key: Tensor, value: Tensor, mask: MaskSpec, scale: float, extras: Extras
) -> tuple[Tensor, Tensor]:
    """flashsdpa.attention with features (arguments checked by direct.attention and :func:`check`).
    On CUDA, dropout alone: flashsdpa::fwd_dropout (ops_dropout.py), PyTorch's flash mask."""
    if query.is_cuda and dropout_only(extras):
        out, lse, _ = torch.ops.flashsdpa.fwd_dropout.default(query, key, value, scale, list(mask), extras.dropout_p)
        return out, lse
    if query.is_cuda:
        raise not_served("attention", extras)
    keep = _keep(_shape(query, key), extras.dropout_p, query.device)
    call = _Call(scale, mask, extras.softcap, extras.dropout_p)
    out, lse = _Attention.apply(query, key, value, extras.attn_mask, extras.alibi_slopes, extras.sinks, keep, call)
    return out, lse


def attention_varlen(
    query: Tensor, key: Tensor, value: Tensor, cu_q: Tensor, cu_k: Tensor, mask: MaskSpec, scale: float, extras: Extras
) -> tuple[Tensor, Tensor]:
    if query.is_cuda:
        raise not_served("attention_varlen", extras)
    keep = _keep((query.shape[1], query.shape[0], key.shape[0]), extras.dropout_p, query.device)
    call = _Call(scale, mask, extras.softcap, extras.dropout_p, (cu_q, cu_k))
    out, lse = _Attention.apply(query, key, value, extras.attn_mask, extras.alibi_slopes, extras.sinks, keep, call)
    return out, lse
