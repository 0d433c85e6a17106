# ops.py: flashsdpa's own torch ops and the direct API on top of them.
#
# Four ops in namespace flashsdpa, declared with torch.library define/impl (no custom_op wrapper,
# whose per-call checks cost tens of microseconds): fwd / bwd on SDPA's (B, H, S, D) views and
# fwd_varlen / bwd_varlen on packed (total, H, D) rows. Each has a CUDA impl (our kernels through
# _backend), a CPU impl (reference.py, the same algorithm in PyTorch), a fake impl for
# torch.compile, and autograd. attention() / attention_varlen() check arguments and call them.
# Over 500 lines: four ops times four impls and the direct API share their argument checks, so
# they stay together; the one launcher of issue 8 (item 5) is to shrink them.
"""The ``flashsdpa::`` torch ops and the direct API ``flashsdpa.attention``."""

from __future__ import annotations

import math
import warnings
from typing import Any

import torch
from torch import Tensor

from flashsdpa import _backend, eager, features, masks, reference, reporting, selection, validation

__all__ = ["attention", "attention_varlen"]

_CPU_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)

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


def _count_cpu(counts: list[int], op: str) -> None:
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


# ---- the direct API ------------------------------------------------------------------------------


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
    out = _empty_out(query, value.shape[3])
    _backend.launch_fwd(query, key, value, out, None, scale, mask)
    _FWD_COUNTS[0] += 1
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
    multiples of 8 up to 256; inputs whose rows are not unit-stride and 16-byte aligned are
    copied first); on CPU the float32 blockwise reference.
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
    if attn_mask is not None or dropout_p or softcap or alibi_slopes is not None or sinks is not None:
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
            out, lse = _fwd_cuda(query, key, value, _scale(scale, head_dim), list(mask))
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
