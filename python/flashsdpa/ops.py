# ops.py: flashsdpa's own torch ops, which the direct API (direct.py) and the routers call.
#
# Four ops in namespace flashsdpa, declared with torch.library define/impl (no custom_op wrapper,
# whose per-call checks cost tens of microseconds): fwd / bwd on SDPA's (B, H, S, D) views and
# fwd_varlen / bwd_varlen on packed (total, H, D) rows. Each has a CUDA impl (our kernels through
# _backend), a CPU impl (reference.py, the same algorithm in PyTorch), a fake impl for
# torch.compile, and autograd; the output allocation and checks here are also the feature ops'
# (ops_mods.py, ops_masks.py).
"""The ``flashsdpa::`` torch ops."""

from __future__ import annotations

import math
import warnings
from typing import Any

import torch
from torch import Tensor

from flashsdpa import _backend, masks, reference, reporting, selection, validation

_lib = torch.library.Library("flashsdpa", "DEF")
_lib.define("fwd(Tensor q, Tensor k, Tensor v, float scale, int[] mask) -> (Tensor out, Tensor lse)")
_lib.define(
    "bwd(Tensor dout, Tensor q, Tensor k, Tensor v, Tensor out, Tensor lse, float scale, int[] mask)"
    " -> (Tensor dq, Tensor dk, Tensor dv)"
)
_lib.define(
    "fwd_varlen(Tensor q, Tensor k, Tensor v, Tensor cu_seqlens_q, Tensor cu_seqlens_k, SymInt max_seqlen_q,"
    " SymInt max_seqlen_k, float scale, int[] mask) -> (Tensor out, Tensor lse)"
)
_lib.define(
    "bwd_varlen(Tensor dout, Tensor q, Tensor k, Tensor v, Tensor out, Tensor lse, Tensor cu_seqlens_q,"
    " Tensor cu_seqlens_k, SymInt max_seqlen_q, SymInt max_seqlen_k, float scale, int[] mask)"
    " -> (Tensor dq, Tensor dk, Tensor dv)"
)


# ---- output allocation: one rule for the real and the fake impls ---------------------------------


def _empty_out(q: Tensor, head_dim_v: int) -> Tensor:
    """The output buffer: like ``empty_like(q)`` (what SDPA's flash ops return, so a model's
    ``out.transpose(1, 2).reshape(...)`` stays a view) with the value head dim last."""
    if q.shape[-1] == head_dim_v:
        return torch.empty_like(q)
    if q.dim() == 4 and q.stride(1) < q.stride(2):  # (B, S, H, D) memory seen as (B, H, S, D)
        b, h, s, _ = q.shape
        return q.new_empty((b, s, h, head_dim_v)).transpose(1, 2)
    return q.new_empty((*q.shape[:-1], head_dim_v))


def _fwd_outputs(q: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
    out = _empty_out(q, v.shape[-1])
    lse = q.new_empty(q.shape[:-1], dtype=torch.float32)
    return out, lse


def _varlen_outputs(q: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
    out = _empty_out(q, v.shape[-1])
    lse = q.new_empty((q.shape[1], q.shape[0]), dtype=torch.float32)  # (H, total_q), PyTorch's varlen LSE
    return out, lse


def _grads_like(q: Tensor, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)


def _is_empty(q: Tensor, k: Tensor) -> bool:
    # Empty problems never reach a kernel (ours refuses them): no rows (batch, heads or queries
    # 0), or no keys. A zero head dim is not empty: its scores are all 0, the kernel refuses it.
    return 0 in q.shape[:-1] or k.shape[2] == 0


def _is_empty_varlen(q: Tensor, k: Tensor, max_q: int, max_k: int) -> bool:
    return 0 in q.shape[:-1] or k.shape[0] == 0 or max_q == 0 or max_k == 0


def _fill_empty_fwd(out: Tensor, lse: Tensor) -> tuple[Tensor, Tensor]:
    # Rows that see no key: output 0 and LSE +inf, the kernels' and reference.py's convention.
    return out.zero_(), lse.fill_(math.inf)


def _check_mask(mask: list[int]) -> masks.MaskSpec:
    """The op's ``int[] mask`` as a MaskSpec tuple (what _C reads), checked."""
    if len(mask) != 3 or mask[0] < -1 or mask[1] < -1 or mask[2] not in (0, 1):
        raise ValueError(
            f"mask={list(mask)}: needs [window_left, window_right, align] with each side >= 0 or -1 "
            f"(unbounded) and align 0 (top-left) or 1 (bottom-right)"
        )
    return (mask[0], mask[1], mask[2])


_FWD_COUNTS = reporting.counter("flashsdpa::fwd")
_BWD_COUNTS = reporting.counter("flashsdpa::bwd")
_FWD_VARLEN_COUNTS = reporting.counter("flashsdpa::fwd_varlen")
_BWD_VARLEN_COUNTS = reporting.counter("flashsdpa::bwd_varlen")


# The CPU impls run flashsdpa.reference, not our kernels: counted as fallbacks (issue 10, item 6).
_CPU_REASON = "device cpu: flashsdpa.reference runs (our kernels need a CUDA device)"


def _count_cpu(counts: reporting.Counts, op: str) -> None:
    counts[1] += 1
    reporting.note_fallback(op, _CPU_REASON)


def _require_kernels(reason: str | None) -> None:
    # attention() has validated the arguments; what remains is the GPU or the build.
    if reason is not None:
        raise RuntimeError(f"flashsdpa: our kernels cannot run this call: {reason}")


def _backward_reason(q: Tensor, v: Tensor) -> str | None:
    # The forward ran, so the device and head dims are served; what can still fail is the
    # backward's shared memory on smaller GPUs. SDPA falls back there; the direct API says why.
    return _backend.backward_reason(q.get_device(), q.shape[-1], v.shape[-1])


def _readable(*tensors: Tensor) -> list[Tensor]:
    """The tensors, each copied if the kernels cannot read its rows in place (a last-dim stride
    other than 1, rows off 16-byte boundaries). SDPA's views never need it; strided slices might.
    Done here, at run time, because torch.compile cannot trace storage offsets."""
    return [_backend.aligned_rows(t) for t in tensors]


# ---- flashsdpa::fwd / bwd ------------------------------------------------------------------------


def _fwd_cuda(q: Tensor, k: Tensor, v: Tensor, scale: float, mask: list[int]) -> tuple[Tensor, Tensor]:
    spec = _check_mask(mask)
    out, lse = _fwd_outputs(q, v)
    if _is_empty(q, k):
        return _fill_empty_fwd(out, lse)
    q, k, v = _readable(q, k, v)
    _require_kernels(selection.dense_reason(q, k, v) or selection.mask_reason(q, v, spec, varlen=False))
    _backend.launch_fwd(q, k, v, out, lse, scale, spec)
    _FWD_COUNTS[0] += 1
    return out, lse


def _fwd_cpu(q: Tensor, k: Tensor, v: Tensor, scale: float, mask: list[int]) -> tuple[Tensor, Tensor]:
    spec = _check_mask(mask)
    _count_cpu(_FWD_COUNTS, "flashsdpa::fwd")
    out, lse = _fwd_outputs(q, v)
    if _is_empty(q, k):
        return _fill_empty_fwd(out, lse)
    ref_out, ref_lse = reference.attention_forward(q, k, v, scale=scale, mask=spec)
    return out.copy_(ref_out), lse.copy_(ref_lse)


def _fwd_fake(q: Tensor, k: Tensor, v: Tensor, scale: float, mask: list[int]) -> tuple[Tensor, Tensor]:
    return _fwd_outputs(q, v)


def _alert_nondeterministic(
    op: str, q: Tensor, v: Tensor, spec: masks.MaskSpec, varlen: bool, features: int = 0
) -> None:
    """PyTorch's contract for ops without a deterministic implementation, where no family of ours
    runs this backward deterministically (the sm90 family does: ordered dQ adds; the portable one
    adds dQ with float atomics): under torch.use_deterministic_algorithms(True) an error, with
    warn_only=True a warning. The SDPA routers fall back to PyTorch instead."""
    why = _backend.deterministic_reason(q, v, spec, varlen, features)
    if why is None:
        return
    message = (
        f"{op} does not have a deterministic implementation for this call ({why}), but you "
        "set 'torch.use_deterministic_algorithms(True)'. Use SDPA outside flashsdpa, or "
        "torch.use_deterministic_algorithms(True, warn_only=True) to allow it."
    )
    if torch.is_deterministic_algorithms_warn_only_enabled():
        warnings.warn(message, stacklevel=3)
    else:
        raise RuntimeError(message)


def _bwd_cuda(
    dout: Tensor, q: Tensor, k: Tensor, v: Tensor, out: Tensor, lse: Tensor, scale: float, mask: list[int]
) -> tuple[Tensor, Tensor, Tensor]:
    spec = _check_mask(mask)
    dq, dk, dv = _grads_like(q, k, v)
    if _is_empty(q, k):
        return dq.zero_(), dk.zero_(), dv.zero_()
    dout, q, k, v, out = _readable(dout, q, k, v, out)
    _require_kernels(
        selection.dense_reason(q, k, v) or selection.mask_reason(q, v, spec, varlen=False) or _backward_reason(q, v)
    )
    _alert_nondeterministic("flashsdpa::bwd", q, v, spec, False)
    _backend.launch_bwd(dout, q, k, v, out, lse, dq, dk, dv, scale, spec)
    _BWD_COUNTS[0] += 1
    return dq, dk, dv


def _bwd_cpu(
    dout: Tensor, q: Tensor, k: Tensor, v: Tensor, out: Tensor, lse: Tensor, scale: float, mask: list[int]
) -> tuple[Tensor, Tensor, Tensor]:
    spec = _check_mask(mask)
    _count_cpu(_BWD_COUNTS, "flashsdpa::bwd")
    dq, dk, dv = _grads_like(q, k, v)
    if _is_empty(q, k):
        return dq.zero_(), dk.zero_(), dv.zero_()
    ref = reference.attention_backward(dout, q, k, v, out, lse, scale=scale, mask=spec)
    return dq.copy_(ref[0]), dk.copy_(ref[1]), dv.copy_(ref[2])


def _bwd_fake(
    dout: Tensor, q: Tensor, k: Tensor, v: Tensor, out: Tensor, lse: Tensor, scale: float, mask: list[int]
) -> tuple[Tensor, Tensor, Tensor]:
    return _grads_like(q, k, v)


# ---- flashsdpa::fwd_varlen / bwd_varlen ----------------------------------------------------------


def _fwd_varlen_cuda(
    q: Tensor, k: Tensor, v: Tensor, cu_q: Tensor, cu_k: Tensor, max_q: int, max_k: int, scale: float, mask: list[int]
) -> tuple[Tensor, Tensor]:
    spec = _check_mask(mask)
    validation.check_varlen(q, k, cu_q, cu_k, None, max_q, max_k)  # values: CPU, or FLASHSDPA_VALIDATE=1
    out, lse = _varlen_outputs(q, v)
    if _is_empty_varlen(q, k, max_q, max_k):
        return _fill_empty_fwd(out, lse)
    q, k, v = _readable(q, k, v)
    _require_kernels(
        selection.varlen_reason(q, k, v, cu_q, cu_k, None, max_q, max_k) or selection.mask_reason(q, v, spec, varlen=True)
    )
    _backend.launch_fwd(q, k, v, out, lse, scale, spec, (cu_q, cu_k, None, max_q, max_k))
    _FWD_VARLEN_COUNTS[0] += 1
    return out, lse


def _fwd_varlen_cpu(
    q: Tensor, k: Tensor, v: Tensor, cu_q: Tensor, cu_k: Tensor, max_q: int, max_k: int, scale: float, mask: list[int]
) -> tuple[Tensor, Tensor]:
    spec = _check_mask(mask)
    validation.check_varlen(q, k, cu_q, cu_k, None, max_q, max_k)  # bad offsets would give wrong rows
    _count_cpu(_FWD_VARLEN_COUNTS, "flashsdpa::fwd_varlen")
    out, lse = _fill_empty_fwd(*_varlen_outputs(q, v))  # rows outside every sequence stay 0 / +inf
    for _, rows_q, rows_k in reference.varlen_sequences(cu_q, cu_k):
        seq_out, seq_lse = reference.attention_forward(
            reference.as_batch(q[rows_q]),
            reference.as_batch(k[rows_k]),
            reference.as_batch(v[rows_k]),
            scale=scale,
            mask=spec,
        )
        out[rows_q] = seq_out[0].transpose(0, 1)
        lse[:, rows_q] = seq_lse[0]
    return out, lse


def _fwd_varlen_fake(
    q: Tensor, k: Tensor, v: Tensor, cu_q: Tensor, cu_k: Tensor, max_q: int, max_k: int, scale: float, mask: list[int]
) -> tuple[Tensor, Tensor]:
    return _varlen_outputs(q, v)


def _bwd_varlen_cuda(
    dout: Tensor,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    out: Tensor,
    lse: Tensor,
    cu_q: Tensor,
    cu_k: Tensor,
    max_q: int,
    max_k: int,
    scale: float,
    mask: list[int],
) -> tuple[Tensor, Tensor, Tensor]:
    spec = _check_mask(mask)
    validation.check_varlen(q, k, cu_q, cu_k, None, max_q, max_k)
    dq, dk, dv = _grads_like(q, k, v)
    if _is_empty_varlen(q, k, max_q, max_k):
        return dq.zero_(), dk.zero_(), dv.zero_()
    dout, q, k, v, out = _readable(dout, q, k, v, out)
    _require_kernels(
        selection.varlen_reason(q, k, v, cu_q, cu_k, None, max_q, max_k)
        or selection.mask_reason(q, v, spec, varlen=True)
        or _backward_reason(q, v)
    )
    _alert_nondeterministic("flashsdpa::bwd_varlen", q, v, spec, True)
    _backend.launch_bwd(dout, q, k, v, out, lse, dq, dk, dv, scale, spec, (cu_q, cu_k, None, max_q, max_k))
    _BWD_VARLEN_COUNTS[0] += 1
    return dq, dk, dv


def _bwd_varlen_cpu(
    dout: Tensor,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    out: Tensor,
    lse: Tensor,
    cu_q: Tensor,
    cu_k: Tensor,
    max_q: int,
    max_k: int,
    scale: float,
    mask: list[int],
) -> tuple[Tensor, Tensor, Tensor]:
    spec = _check_mask(mask)
    validation.check_varlen(q, k, cu_q, cu_k, None, max_q, max_k)
    _count_cpu(_BWD_VARLEN_COUNTS, "flashsdpa::bwd_varlen")
    dq, dk, dv = (g.zero_() for g in _grads_like(q, k, v))
    for _, rows_q, rows_k in reference.varlen_sequences(cu_q, cu_k):
        if rows_k.stop > rows_k.start:
            grads = reference.attention_backward(
                reference.as_batch(dout[rows_q]),
                reference.as_batch(q[rows_q]),
                reference.as_batch(k[rows_k]),
                reference.as_batch(v[rows_k]),
                reference.as_batch(out[rows_q]),
                lse[:, rows_q].unsqueeze(0),
                scale=scale,
                mask=spec,
            )
            dq[rows_q] = grads[0][0].transpose(0, 1)
            dk[rows_k] = grads[1][0].transpose(0, 1)
            dv[rows_k] = grads[2][0].transpose(0, 1)
    return dq, dk, dv


def _bwd_varlen_fake(
    dout: Tensor,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    out: Tensor,
    lse: Tensor,
    cu_q: Tensor,
    cu_k: Tensor,
    max_q: int,
    max_k: int,
    scale: float,
    mask: list[int],
) -> tuple[Tensor, Tensor, Tensor]:
    return _grads_like(q, k, v)


# ---- autograd ------------------------------------------------------------------------------------
# The LSE output carries no gradient (marked non-differentiable): the kernels' backward takes dO
# only, as FlashAttention's does. Double backward raises rather than silently giving zeros.
# Grads are not materialized: autograd would otherwise allocate a zero (B, H, Sq) float32 dLSE
# for every backward (2 MiB at B*S = 16k tokens, H = 32) only for it to be ignored.


def _fwd_setup_context(ctx: Any, inputs: tuple[Any, ...], output: tuple[Tensor, Tensor]) -> None:
    q, k, v, scale, mask = inputs
    out, lse = output
    ctx.save_for_backward(q, k, v, out, lse)
    ctx.scale, ctx.mask = scale, mask
    ctx.mark_non_differentiable(lse)
    ctx.set_materialize_grads(False)


def _fwd_backward(ctx: Any, dout: Tensor | None, _dlse: Tensor | None) -> tuple[Tensor | None, ...]:
    if dout is None:  # nothing downstream used the output
        return None, None, None, None, None
    q, k, v, out, lse = ctx.saved_tensors
    dq, dk, dv = torch.ops.flashsdpa.bwd.default(dout, q, k, v, out, lse, ctx.scale, ctx.mask)
    return dq, dk, dv, None, None


def _fwd_varlen_setup_context(ctx: Any, inputs: tuple[Any, ...], output: tuple[Tensor, Tensor]) -> None:
    q, k, v, cu_q, cu_k, max_q, max_k, scale, mask = inputs
    out, lse = output
    ctx.save_for_backward(q, k, v, out, lse, cu_q, cu_k)
    ctx.max_q, ctx.max_k, ctx.scale, ctx.mask = max_q, max_k, scale, mask
    ctx.mark_non_differentiable(lse)
    ctx.set_materialize_grads(False)


def _fwd_varlen_backward(ctx: Any, dout: Tensor | None, _dlse: Tensor | None) -> tuple[Tensor | None, ...]:
    if dout is None:  # nothing downstream used the output
        return (None,) * 9
    q, k, v, out, lse, cu_q, cu_k = ctx.saved_tensors
    dq, dk, dv = torch.ops.flashsdpa.bwd_varlen.default(
        dout, q, k, v, out, lse, cu_q, cu_k, ctx.max_q, ctx.max_k, ctx.scale, ctx.mask
    )
    return dq, dk, dv, None, None, None, None, None, None


def _no_double_backward(ctx: Any, *grads: Tensor) -> tuple[Tensor, ...]:
    raise RuntimeError("flashsdpa: double backward (gradients of the attention backward) is not supported")


for _name, _cuda, _cpu, _fake in (
    ("fwd", _fwd_cuda, _fwd_cpu, _fwd_fake),
    ("bwd", _bwd_cuda, _bwd_cpu, _bwd_fake),
    ("fwd_varlen", _fwd_varlen_cuda, _fwd_varlen_cpu, _fwd_varlen_fake),
    ("bwd_varlen", _bwd_varlen_cuda, _bwd_varlen_cpu, _bwd_varlen_fake),
):
    _lib.impl(_name, _cuda, "CUDA")
    _lib.impl(_name, _cpu, "CPU")
    torch.library.register_fake(f"flashsdpa::{_name}", _fake, lib=_lib)
torch.library.register_autograd("flashsdpa::fwd", _fwd_backward, setup_context=_fwd_setup_context, lib=_lib)
torch.library.register_autograd(
    "flashsdpa::fwd_varlen", _fwd_varlen_backward, setup_context=_fwd_varlen_setup_context, lib=_lib
)
torch.library.register_autograd("flashsdpa::bwd", _no_double_backward, lib=_lib)
torch.library.register_autograd("flashsdpa::bwd_varlen", _no_double_backward, lib=_lib)
