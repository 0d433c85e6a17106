# ops_mods.py: the flashsdpa:: ops of issue 14's score modifiers (softcap, ALiBi, sinks):
# fwd_mods / bwd_mods, dense (cu_seqlens None, (B, H, S, D) views) and varlen (packed (total, H, D)
# rows) in one schema each, with CUDA impls (our sm80 kernels through _backend, the modifiers as
# float32 device tensors), CPU impls (features.py's reference), fake impls and autograd (dq, dk,
# dv and the slopes' and sinks' gradients). Separate from ops.py's plain ops so that those keep
# their schemas and their per-call cost; direct.attention() / attention_varlen() call these when the
# modifiers are the only features given. Registered by importing the package (__init__.py).
"""The ``flashsdpa::fwd_mods`` / ``bwd_mods`` ops: softcap, ALiBi and sinks on our kernels."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from flashsdpa import _backend, features, masks, ops, reporting, selection, validation

__all__: list[str] = []

# A fragment of the namespace ops.py defines ("DEF" may be taken once per namespace).
_lib = torch.library.Library("flashsdpa", "FRAGMENT")

# grads = (want d_alibi_slopes, want d_sinks); an unwanted gradient comes back as an empty (0,).
_lib.define(
    "fwd_mods(Tensor q, Tensor k, Tensor v, Tensor? cu_seqlens_q, Tensor? cu_seqlens_k, SymInt max_seqlen_q,"
    " SymInt max_seqlen_k, float scale, int[] mask, float softcap, Tensor? alibi_slopes, Tensor? sinks)"
    " -> (Tensor out, Tensor lse)"
)
_lib.define(
    "bwd_mods(Tensor dout, Tensor q, Tensor k, Tensor v, Tensor out, Tensor lse, Tensor? cu_seqlens_q,"
    " Tensor? cu_seqlens_k, SymInt max_seqlen_q, SymInt max_seqlen_k, float scale, int[] mask, float softcap,"
    " Tensor? alibi_slopes, Tensor? sinks, bool[] grads)"
    " -> (Tensor dq, Tensor dk, Tensor dv, Tensor d_alibi_slopes, Tensor d_sinks)"
)



_FWD_MODS_COUNTS = reporting.counter("flashsdpa::fwd_mods")
_BWD_MODS_COUNTS = reporting.counter("flashsdpa::bwd_mods")


def _mods_outputs(q: Tensor, v: Tensor, cu_q: Tensor | None) -> tuple[Tensor, Tensor]:
    return ops._fwd_outputs(q, v) if cu_q is None else ops._varlen_outputs(q, v)


def _mods_grads(
    q: Tensor, k: Tensor, v: Tensor, slopes: Tensor | None, sinks: Tensor | None, grads: list[bool]
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """dq, dk, dv (empty_like) and the modifiers' gradients: zeros of the input's shape where
    wanted (the kernels add into them), else an empty (0,) tensor."""
    d_slopes = q.new_zeros(slopes.shape, dtype=torch.float32) if grads[0] and slopes is not None else q.new_empty(0)
    d_sinks = q.new_zeros(sinks.shape, dtype=sinks.dtype) if grads[1] and sinks is not None else q.new_empty(0)
    return (*ops._grads_like(q, k, v), d_slopes, d_sinks)


def _launch_mods(softcap: float, slopes: Tensor | None, sinks: Tensor | None) -> _backend.Mods:
    """The kernels read float32 contiguous slopes and sinks (sinks may come in the query's dtype)."""
    def f32(t: Tensor | None) -> Tensor | None:
        return None if t is None else t.to(torch.float32).contiguous()

    return (softcap, f32(slopes), f32(sinks))


def _mods_reason(
    q: Tensor, k: Tensor, v: Tensor, cu_q: Tensor | None, cu_k: Tensor | None, max_q: int, max_k: int,
    spec: masks.MaskSpec, mods: _backend.Mods, backward: bool,
) -> str | None:
    varlen = cu_q is not None
    reason = (
        selection.varlen_reason(q, k, v, cu_q, cu_k, None, max_q, max_k)  # type: ignore[arg-type]
        if varlen
        else selection.dense_reason(q, k, v)
    )
    if reason is None:
        reason = selection.features_reason(q, v, spec, _backend.feature_bits(mods), varlen=varlen, backward=backward)
    if reason is None and backward:
        reason = ops._backward_reason(q, v)
    return reason


def _varlen_args(cu_q: Tensor | None, cu_k: Tensor | None, max_q: int, max_k: int) -> _backend.Varlen | None:
    return None if cu_q is None or cu_k is None else (cu_q, cu_k, None, max_q, max_k)


def _is_empty_mods(q: Tensor, k: Tensor, cu_q: Tensor | None, max_q: int, max_k: int) -> bool:
    return ops._is_empty(q, k) if cu_q is None else ops._is_empty_varlen(q, k, max_q, max_k)


def _fwd_mods_cuda(
    q: Tensor, k: Tensor, v: Tensor, cu_q: Tensor | None, cu_k: Tensor | None, max_q: int, max_k: int,
    scale: float, mask: list[int], softcap: float, slopes: Tensor | None, sinks: Tensor | None,
) -> tuple[Tensor, Tensor]:
    spec = ops._check_mask(mask)
    if cu_q is not None:
        validation.check_varlen(q, k, cu_q, cu_k, None, max_q, max_k)
    out, lse = _mods_outputs(q, v, cu_q)
    if _is_empty_mods(q, k, cu_q, max_q, max_k):
        return ops._fill_empty_fwd(out, lse)
    q, k, v = ops._readable(q, k, v)
    mods = _launch_mods(softcap, slopes, sinks)
    ops._require_kernels(_mods_reason(q, k, v, cu_q, cu_k, max_q, max_k, spec, mods, backward=False))
    _backend.launch_fwd(q, k, v, out, lse, scale, spec, _varlen_args(cu_q, cu_k, max_q, max_k), mods=mods)
    _FWD_MODS_COUNTS[0] += 1
    return out, lse


def _fwd_mods_cpu(
    q: Tensor, k: Tensor, v: Tensor, cu_q: Tensor | None, cu_k: Tensor | None, max_q: int, max_k: int,
    scale: float, mask: list[int], softcap: float, slopes: Tensor | None, sinks: Tensor | None,
) -> tuple[Tensor, Tensor]:
    spec = ops._check_mask(mask)
    ops._count_cpu(_FWD_MODS_COUNTS, "flashsdpa::fwd_mods")
    extras = features.Extras(softcap=softcap, alibi_slopes=slopes, sinks=sinks)
    out, lse = ops._fill_empty_fwd(*_mods_outputs(q, v, cu_q))
    if cu_q is None or cu_k is None:
        if ops._is_empty(q, k):
            return out, lse
        ref_out, ref_lse = features.forward(q, k, v, scale=scale, mask=spec, extras=extras)
    else:
        validation.check_varlen(q, k, cu_q, cu_k, None, max_q, max_k)
        ref_out, ref_lse = features.forward_varlen(q, k, v, cu_q, cu_k, scale=scale, mask=spec, extras=extras)
    return out.copy_(ref_out), lse.copy_(ref_lse)


def _fwd_mods_fake(
    q: Tensor, k: Tensor, v: Tensor, cu_q: Tensor | None, cu_k: Tensor | None, max_q: int, max_k: int,
    scale: float, mask: list[int], softcap: float, slopes: Tensor | None, sinks: Tensor | None,
) -> tuple[Tensor, Tensor]:
    return _mods_outputs(q, v, cu_q)


def _bwd_mods_cuda(
    dout: Tensor, q: Tensor, k: Tensor, v: Tensor, out: Tensor, lse: Tensor, cu_q: Tensor | None,
    cu_k: Tensor | None, max_q: int, max_k: int, scale: float, mask: list[int], softcap: float,
    slopes: Tensor | None, sinks: Tensor | None, grads: list[bool],
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    spec = ops._check_mask(mask)
    if cu_q is not None:
        validation.check_varlen(q, k, cu_q, cu_k, None, max_q, max_k)
    dq, dk, dv, d_slopes, d_sinks = _mods_grads(q, k, v, slopes, sinks, grads)
    if _is_empty_mods(q, k, cu_q, max_q, max_k):
        return dq.zero_(), dk.zero_(), dv.zero_(), d_slopes, d_sinks
    dout, q, k, v, out = ops._readable(dout, q, k, v, out)
    mods = _launch_mods(softcap, slopes, sinks)
    ops._require_kernels(_mods_reason(q, k, v, cu_q, cu_k, max_q, max_k, spec, mods, backward=True))
    ops._alert_nondeterministic("flashsdpa::bwd_mods", q, v, spec, cu_q is not None, _backend.feature_bits(mods))
    # The kernels add float32 atomics into the sinks' gradient: a float32 buffer, cast on return.
    d_sinks32 = d_sinks if d_sinks.numel() == 0 or d_sinks.dtype == torch.float32 else d_sinks.float()
    mod_grads = (d_slopes if d_slopes.numel() else None, d_sinks32 if d_sinks32.numel() else None)
    varlen = _varlen_args(cu_q, cu_k, max_q, max_k)
    _backend.launch_bwd(dout, q, k, v, out, lse, dq, dk, dv, scale, spec, varlen, mods, mod_grads)
    _BWD_MODS_COUNTS[0] += 1
    return dq, dk, dv, d_slopes, d_sinks32.to(d_sinks.dtype)


def _bwd_mods_cpu(
    dout: Tensor, q: Tensor, k: Tensor, v: Tensor, out: Tensor, lse: Tensor, cu_q: Tensor | None,
    cu_k: Tensor | None, max_q: int, max_k: int, scale: float, mask: list[int], softcap: float,
    slopes: Tensor | None, sinks: Tensor | None, grads: list[bool],
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    spec = ops._check_mask(mask)
    ops._count_cpu(_BWD_MODS_COUNTS, "flashsdpa::bwd_mods")
    dq, dk, dv, d_slopes, d_sinks = _mods_grads(q, k, v, slopes, sinks, grads)
    extras = features.Extras(softcap=softcap, alibi_slopes=slopes, sinks=sinks)
    if cu_q is None or cu_k is None:
        if ops._is_empty(q, k):
            return dq.zero_(), dk.zero_(), dv.zero_(), d_slopes, d_sinks
        g = features.backward(dout, q, k, v, out, lse, scale=scale, mask=spec, extras=extras)
    else:
        validation.check_varlen(q, k, cu_q, cu_k, None, max_q, max_k)
        g = features.backward_varlen(dout, q, k, v, out, lse, cu_q, cu_k, scale=scale, mask=spec, extras=extras)
    if d_slopes.numel() and g.d_alibi is not None:
        d_slopes.copy_(g.d_alibi)
    if d_sinks.numel() and g.d_sinks is not None:
        d_sinks.copy_(g.d_sinks)
    return dq.copy_(g.dq), dk.copy_(g.dk), dv.copy_(g.dv), d_slopes, d_sinks


def _bwd_mods_fake(
    dout: Tensor, q: Tensor, k: Tensor, v: Tensor, out: Tensor, lse: Tensor, cu_q: Tensor | None,
    cu_k: Tensor | None, max_q: int, max_k: int, scale: float, mask: list[int], softcap: float,
    slopes: Tensor | None, sinks: Tensor | None, grads: list[bool],
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    return _mods_grads(q, k, v, slopes, sinks, grads)


# ---- autograd (the LSE carries no gradient, as for ops.py's ops) ---------------------------------


def _fwd_mods_setup_context(ctx: Any, inputs: tuple[Any, ...], output: tuple[Tensor, Tensor]) -> None:
    q, k, v, cu_q, cu_k, max_q, max_k, scale, mask, softcap, slopes, sinks = inputs
    out, lse = output
    ctx.save_for_backward(q, k, v, out, lse, cu_q, cu_k, slopes, sinks)
    ctx.max_q, ctx.max_k, ctx.scale, ctx.mask, ctx.softcap = max_q, max_k, scale, mask, softcap
    ctx.mark_non_differentiable(lse)
    ctx.set_materialize_grads(False)


def _fwd_mods_backward(ctx: Any, dout: Tensor | None, _dlse: Tensor | None) -> tuple[Tensor | None, ...]:
    if dout is None:  # nothing downstream used the output
        return (None,) * 12
    q, k, v, out, lse, cu_q, cu_k, slopes, sinks = ctx.saved_tensors
    need = ctx.needs_input_grad
    want = [bool(need[10]) and slopes is not None, bool(need[11]) and sinks is not None]
    dq, dk, dv, d_slopes, d_sinks = torch.ops.flashsdpa.bwd_mods.default(
        dout, q, k, v, out, lse, cu_q, cu_k, ctx.max_q, ctx.max_k, ctx.scale, ctx.mask, ctx.softcap, slopes, sinks,
        want,
    )  # fmt: skip
    return (dq, dk, dv, None, None, None, None, None, None, None, d_slopes if want[0] else None,
            d_sinks if want[1] else None)  # fmt: skip


for _name, _cuda, _cpu, _fake in (
    ("fwd_mods", _fwd_mods_cuda, _fwd_mods_cpu, _fwd_mods_fake),
    ("bwd_mods", _bwd_mods_cuda, _bwd_mods_cpu, _bwd_mods_fake),
):
    _lib.impl(_name, _cuda, "CUDA")
    _lib.impl(_name, _cpu, "CPU")
    torch.library.register_fake(f"flashsdpa::{_name}", _fake, lib=_lib)
torch.library.register_autograd(
    "flashsdpa::fwd_mods", _fwd_mods_backward, setup_context=_fwd_mods_setup_context, lib=_lib
)
torch.library.register_autograd("flashsdpa::bwd_mods", ops._no_double_backward, lib=_lib)
