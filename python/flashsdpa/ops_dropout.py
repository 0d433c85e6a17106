# ops_dropout.py: the flashsdpa::fwd_dropout / bwd_dropout ops behind flashsdpa.attention(
# dropout_p=...) on CUDA (issue 14): our kernels with PyTorch's FlashAttention-2 dropout mask
# (common/dropout.cuh), the generator consumed as PyTorch's flash op consumes it (dropout.py), the
# rng state returned in PyTorch's format (uint64[2] = (seed, offset)) and read back by the backward
# on the device. Dense (B, H, S, D) inputs, any mask the direct API takes; CUDA, fake and autograd
# kernels (the CPU path of the direct API is features.py's, with its own keep-mask).
"""flashsdpa::fwd_dropout / bwd_dropout: the direct API's dropout on our kernels."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from flashsdpa import _backend, dropout, masks, reporting, routers, selection
from flashsdpa.direct import _check_cuda
from flashsdpa.ops import _check_mask

__all__ = ["attention_dropout"]

_lib = torch.library.Library("flashsdpa", "FRAGMENT")
_lib.define(
    "fwd_dropout(Tensor q, Tensor k, Tensor v, float scale, int[] mask, float dropout_p) "
    "-> (Tensor out, Tensor lse, Tensor rng_state)"
)
_lib.define(
    "bwd_dropout(Tensor dout, Tensor q, Tensor k, Tensor v, Tensor out, Tensor lse, Tensor rng_state, "
    "float scale, int[] mask, float dropout_p) -> (Tensor dq, Tensor dk, Tensor dv)"
)

_FWD_COUNTS = reporting.counter("flashsdpa::fwd_dropout")
_BWD_COUNTS = reporting.counter("flashsdpa::bwd_dropout")


def _outputs(q: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
    out = torch.empty(*q.shape[:3], v.shape[3], dtype=q.dtype, device=q.device)
    lse = torch.empty(*q.shape[:3], dtype=torch.float32, device=q.device)
    return out, lse


def _reason(q: Tensor, k: Tensor, v: Tensor, spec: masks.MaskSpec, p: float, backward: bool) -> str | None:
    return selection.dense_reason(q, k, v) or selection.dropout_reason(q, v, spec, p, varlen=False, backward=backward)


def _fwd_cuda(q: Tensor, k: Tensor, v: Tensor, scale: float, mask: list[int], dropout_p: float) -> tuple[Tensor, ...]:
    spec = _check_mask(mask)
    _check_cuda(q, q.shape[3], v.shape[3])  # dtype, head dims, device: the direct API's errors
    out, lse = _outputs(q, v)
    rng = dropout.take(dropout_p, q.shape[0], q.shape[1], q.device, routers._NATIVE.get(routers._FLASH_FWD))
    if q.shape[0] * q.shape[1] * q.shape[2] == 0 or k.shape[2] == 0:  # no launch: PyTorch's empty results
        out.zero_()
        lse.fill_(float("inf"))
        return out, lse, rng.philox_seed
    q, k, v = (_backend.aligned_rows(t) for t in (q, k, v))
    reason = _reason(q, k, v, spec, dropout_p, backward=False)
    if reason is not None:
        raise NotImplementedError(f"flashsdpa.attention(dropout_p=...) on CUDA: {reason}")
    _backend.launch_fwd(q, k, v, out, lse, scale, spec, dropout=rng.item)
    _FWD_COUNTS[0] += 1
    return out, lse, rng.philox_seed


def _fwd_fake(q: Tensor, k: Tensor, v: Tensor, scale: float, mask: list[int], dropout_p: float) -> tuple[Tensor, ...]:
    out, lse = _outputs(q, v)
    return out, lse, torch.empty(2, dtype=torch.uint64, device=q.device)


def _bwd_cuda(dout: Tensor, q: Tensor, k: Tensor, v: Tensor, out: Tensor, lse: Tensor, rng_state: Tensor,
              scale: float, mask: list[int], dropout_p: float) -> tuple[Tensor, Tensor, Tensor]:  # fmt: skip
    spec = _check_mask(mask)
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    if q.shape[0] * q.shape[1] * q.shape[2] == 0 or k.shape[2] == 0:
        return dq.zero_(), dk.zero_(), dv.zero_()
    q, k, v, out, dout = (_backend.aligned_rows(t) for t in (q, k, v, out, dout))
    reason = _reason(q, k, v, spec, dropout_p, backward=True) or dropout.rng_state_reason(rng_state, q.device)
    if reason is not None:
        raise NotImplementedError(f"flashsdpa.attention(dropout_p=...) backward on CUDA: {reason}")
    drop = dropout.from_rng_state(dropout_p, rng_state)
    _backend.launch_bwd(dout, q, k, v, out, lse, dq, dk, dv, scale, spec, dropout=drop)
    _BWD_COUNTS[0] += 1
    return dq, dk, dv


def _bwd_fake(dout: Tensor, q: Tensor, k: Tensor, v: Tensor, out: Tensor, lse: Tensor, rng_state: Tensor,
              scale: float, mask: list[int], dropout_p: float) -> tuple[Tensor, Tensor, Tensor]:  # fmt: skip
    return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)


def _setup_context(ctx: Any, inputs: tuple[Any, ...], output: tuple[Tensor, ...]) -> None:
    q, k, v, scale, mask, dropout_p = inputs
    out, lse, rng_state = output
    ctx.save_for_backward(q, k, v, out, lse, rng_state)
    ctx.scale, ctx.mask, ctx.dropout_p = scale, mask, dropout_p
    ctx.mark_non_differentiable(lse, rng_state)
    ctx.set_materialize_grads(False)


def _backward(ctx: Any, dout: Tensor | None, *_: Tensor | None) -> tuple[Tensor | None, ...]:
    if dout is None:
        return None, None, None, None, None, None
    q, k, v, out, lse, rng_state = ctx.saved_tensors
    dq, dk, dv = torch.ops.flashsdpa.bwd_dropout.default(
        dout, q, k, v, out, lse, rng_state, ctx.scale, ctx.mask, ctx.dropout_p
    )
    return dq, dk, dv, None, None, None


def _no_double_backward(ctx: Any, *grads: Tensor) -> tuple[Tensor, ...]:
    raise RuntimeError("flashsdpa::bwd_dropout: double backward is not supported")


_lib.impl("fwd_dropout", _fwd_cuda, "CUDA")
_lib.impl("bwd_dropout", _bwd_cuda, "CUDA")
torch.library.register_fake("flashsdpa::fwd_dropout", _fwd_fake, lib=_lib)
torch.library.register_fake("flashsdpa::bwd_dropout", _bwd_fake, lib=_lib)
torch.library.register_autograd("flashsdpa::fwd_dropout", _backward, setup_context=_setup_context, lib=_lib)
torch.library.register_autograd("flashsdpa::bwd_dropout", _no_double_backward, lib=_lib)


def attention_dropout(
    query: Tensor, key: Tensor, value: Tensor, scale: float, mask: masks.MaskSpec, dropout_p: float
) -> tuple[Tensor, Tensor]:
    """(out, lse) of flashsdpa.attention(dropout_p=...) on CUDA. The mask is PyTorch's flash
    kernel's for the default CUDA generator's state at the call: reproduce it with
    reference_dropout.keep_mask(seed, offset, ...) from (torch.cuda.initial_seed(), the
    generator's get_offset()) read just before the call, or call torch.ops.flashsdpa.fwd_dropout,
    which returns the rng state, directly."""
    out, lse, _ = torch.ops.flashsdpa.fwd_dropout.default(query, key, value, scale, list(mask), dropout_p)
    return out, lse
