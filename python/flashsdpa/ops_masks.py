# ops_masks.py: the flashsdpa:: ops of issue 14's attention masks: fwd_masked / bwd_masked, dense
# (B, H, S, D) views, an additive bias (attn_mask; boolean masks arrive converted to 0 / -inf) in
# the query's dtype of any shape broadcasting to (B, Hq, Sq, Sk), together with the score modifiers
# (softcap, ALiBi, sinks). CUDA impls (our kernels' kMods instantiations: params.h's ScoreMods.bias),
# CPU impls (features.py's reference), fake impls and autograd (dq, dk, dv, the bias's gradient
# reduced to its shape, the slopes' and sinks'). Separate from ops_mods.py so that its ops keep their
# schemas. The SDPA routers of the masked ops (routers_masked.py) call bias_view / the launches directly.
"""The ``flashsdpa::fwd_masked`` / ``bwd_masked`` ops: attn_mask (additive bias) on our kernels."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from flashsdpa import _backend, features, masks, ops, ops_mods, reporting, selection
from flashsdpa.features import additive

__all__ = [
    "CELL_KEYS", "CELL_NONZERO", "CELL_ROWS", "CELL_VISIBLE", "SUMMARY_MIN_BROADCAST", "additive", "bias_cells",
    "bias_view", "dense_grad", "masked_mods", "reduce_to", "summary_pays",
]

_lib = torch.library.Library("flashsdpa", "FRAGMENT")

# bias: additive, query.dtype, broadcasting to (B, Hq, Sq, Sk). grads = (want d_alibi_slopes,
# want d_sinks, want d_bias); an unwanted gradient comes back as an empty (0,).
_lib.define(
    "fwd_masked(Tensor q, Tensor k, Tensor v, Tensor bias, float scale, int[] mask, float softcap,"
    " Tensor? alibi_slopes, Tensor? sinks) -> (Tensor out, Tensor lse)"
)
_lib.define(
    "bwd_masked(Tensor dout, Tensor q, Tensor k, Tensor v, Tensor out, Tensor lse, Tensor bias, float scale,"
    " int[] mask, float softcap, Tensor? alibi_slopes, Tensor? sinks, bool[] grads)"
    " -> (Tensor dq, Tensor dk, Tensor dv, Tensor d_alibi_slopes, Tensor d_sinks, Tensor d_bias)"
)

_FWD_COUNTS = reporting.counter("flashsdpa::fwd_masked")
_BWD_COUNTS = reporting.counter("flashsdpa::bwd_masked")


def bias_view(bias: Tensor, shape: tuple[int, int, int, int]) -> Tensor:
    """``bias`` as the (B, Hq, Sq, Sk) view the kernels read: broadcast dims get stride 0 (never a
    copy), the key dim unit stride, the other strides even and the pointer 4-byte aligned (the
    kernels load key pairs: checks.cpp). Anything else (a broadcast or strided key dim, an odd row
    stride such as a contiguous (S, S) mask of odd S) is copied once into rows padded to 8 keys."""
    b4 = bias.reshape((1,) * (4 - bias.dim()) + tuple(bias.shape))
    view = b4.expand(shape)
    if view.stride(3) == 1 and all(s % 2 == 0 for s in view.stride()[:3]) and view.data_ptr() % 4 == 0:
        return view
    keys = shape[3]
    padded = b4.new_empty(*b4.shape[:3], (keys + 7) // 8 * 8).narrow(3, 0, keys)
    padded.copy_(b4.expand(*b4.shape[:3], keys))
    return padded.expand(shape)


# The bias's summary (cuda/common/bias_cells.cuh, params.h's ScoreMods::bias_cells): a byte per
# cell of CELL_ROWS queries x CELL_KEYS keys. 64 x 16 divides every kernel tile of both families and
# directions (sm90 fwd 192/128 x 128/64, sm90 bwd 64 x 128, sm80 fwd 128/64 x 128/64, sm80 bwd
# 64/128 x 64/128); bias_cells.cuh static_asserts it per tile.
CELL_ROWS = 64
CELL_KEYS = 16
CELL_VISIBLE = 1  # some element is not -inf (NaN counts: it must reach the output)
CELL_NONZERO = 2  # some element is not 0
_ROW_CELLS = 16  # cells per summary row are padded to 16 (16-byte rows: the kernels read 4-byte words)


def _cells_minmax(x: Tensor, dim: int, size: int) -> tuple[Tensor, Tensor]:
    """(min, max) over groups of ``size`` along ``dim`` (the last group ragged): one aminmax over
    the whole groups (a view, one read of x) and one over the tail, if any."""
    n = x.shape[dim]
    full = n // size * size
    parts: list[tuple[Tensor, Tensor]] = []
    if full:
        lo, hi = torch.aminmax(x.narrow(dim, 0, full).unflatten(dim, (full // size, size)), dim=dim + 1)
        parts.append((lo, hi))
    if n > full:
        lo, hi = torch.aminmax(x.narrow(dim, full, n - full), dim=dim, keepdim=True)
        parts.append((lo, hi))
    if len(parts) == 1:
        return parts[0]
    return torch.cat([p[0] for p in parts], dim), torch.cat([p[1] for p in parts], dim)


def _own(bias: Tensor) -> Tensor:
    """``bias`` as 4-D on its own (un-broadcast) shape: leading 1s added, and the dims of an expanded
    view (0 stride, size > 1: SDPA's routers get one) narrowed to one row, summarized once."""
    b4 = bias.reshape((1,) * (4 - bias.dim()) + tuple(bias.shape))
    for dim in range(3):
        if b4.stride(dim) == 0 and b4.shape[dim] > 1:
            b4 = b4.narrow(dim, 0, 1)
    return b4


# _C.bias_cells's element-type codes (params.h's BiasCellsParams::ElementType).
_KERNEL_DTYPES = {torch.float16: 0, torch.bfloat16: 1, torch.float32: 2}


def bias_cells(bias: Tensor, seqlen_q: int, seqlen_k: int) -> Tensor:
    """The per-call summary of an additive bias broadcasting to (B, H, seqlen_q, seqlen_k), computed
    on the bias's own (un-broadcast) shape: uint8 (Bb, Hb, Qc, Kc) with Bb, Hb the bias's batch and
    head sizes (1 where it broadcasts, also as a 0-stride expanded view), Qc = ceil(seqlen_q / 64)
    (1 when the query dim broadcasts), Kc = ceil(seqlen_k / 16) rounded up to 16. Each byte ORs
    CELL_VISIBLE (an element is not -inf: the cell's max is not -inf, NaN included) and
    CELL_NONZERO (an element is not 0: its min or max is not 0, NaN included) over the cell's
    elements; elements past seqlen_q / seqlen_k and the padding cells count as neither (0), so they
    never make a tile look partial.

    Computed on every call in the call's stream (a mask changed in place, or one replayed in a CUDA
    graph with new contents, is summarized anew). A CUDA bias (float16, bfloat16, float32) on a
    CUDA build: one launch (_C.bias_cells, cuda/common/bias_cells_summary.cu) reading each element
    of the bias's own shape once and writing every byte of a torch-allocated output (no fill, no
    host sync: graph-capturable); ~6-12 us of host time. Elsewhere (CPU tensors, a build without
    CUDA kernels) the torch reference, _bias_cells_torch: 10-18 launches."""
    b4 = _own(bias)
    code = _KERNEL_DTYPES.get(b4.dtype)
    kernel = getattr(_backend._C, "bias_cells", None) if _backend.CUDA_KERNELS and b4.is_cuda else None
    if kernel is None or code is None or b4.numel() == 0:
        return _bias_cells_torch(bias, seqlen_q, seqlen_k)
    bb, hb, sq, _ = b4.shape
    qc = 1 if sq == 1 else -(-seqlen_q // CELL_ROWS)
    kc = -(-seqlen_k // (CELL_KEYS * _ROW_CELLS)) * _ROW_CELLS
    cells = torch.empty((bb, hb, qc, kc), dtype=torch.uint8, device=b4.device)
    index = b4.device.index
    kernel(b4.data_ptr(), code, b4.shape, b4.stride(), seqlen_q, seqlen_k, cells.data_ptr(), cells.numel(), index,
           _backend._current_stream(index))  # fmt: skip
    return cells


def _bias_cells_torch(bias: Tensor, seqlen_q: int, seqlen_k: int) -> Tensor:
    """bias_cells in torch ops (the kernel's reference; the path of CPU tensors and of builds without
    the kernel). Cost: one read of the bias (aminmax over 16 keys: 2 bytes per element of its own
    shape) writing 1/8 of it, then ops on that 1/16-size (min, max) pair: 12 launches when Sq is a
    multiple of 64 and Sk of 16, up to 18 otherwise (a tail aminmax and a cat per ragged dim); key
    padding (B, 1, 1, S), whose rows need no reduction: 10 launches reading 2 B S bytes (32 KB at
    B S = 16k), ~50-80 us of host time (PyTorch's ~5-8 us per op)."""
    b4 = _own(bias)
    if b4.shape[3] != seqlen_k:  # a broadcast key dim: per key the same value (a view, no copy)
        b4 = b4.expand(*b4.shape[:3], seqlen_k)
    lo, hi = _cells_minmax(b4, 3, CELL_KEYS)
    if lo.shape[2] > 1:  # (a broadcast query dim, key padding's, is one cell row already)
        lo, hi = _cells_minmax(lo, 2, CELL_ROWS)[0], _cells_minmax(hi, 2, CELL_ROWS)[1]
    visible = hi != float("-inf")
    nonzero = (hi != 0) | (lo != 0)
    cells = visible.to(torch.uint8) | (nonzero.to(torch.uint8) << 1)
    kc = cells.shape[3]
    return torch.nn.functional.pad(cells, (0, -(-kc // _ROW_CELLS) * _ROW_CELLS - kc))


# A summary is computed only where it costs little next to the attention: when the bias is
# broadcast at least this many times over (B, Hq, Sq, Sk). Its one read is 2 bytes per bias
# element (~0.7 ps at ~3 TB/s) against ~0.85 ps of forward per (b, h, i, j) pair at D 128 and
# 600 TFLOP/s: at 16x, <= 5% of the forward where no tile is skipped (a (B, 1, S, S) mask at 16
# heads: HF's causal + padding mask), ~0 for key padding (B, 1, 1, S). A dense (B, H, S, S) or a
# (1, H, S, S) bias at B 8 would cost 10-80% more reading with nothing known to skip: not summarized.
SUMMARY_MIN_BROADCAST = 16


def summary_pays(bias: Tensor, shape: tuple[int, int, int, int]) -> bool:
    """Whether bias_cells is worth computing for a bias broadcasting to ``shape`` (see above);
    a 0-stride expanded view counts by its distinct elements."""
    own = 1
    for n, st in zip(bias.shape, bias.stride()):
        own *= 1 if st == 0 else n
    return own * SUMMARY_MIN_BROADCAST <= shape[0] * shape[1] * shape[2] * shape[3]


def masked_mods(softcap: float, slopes: Tensor | None, sinks: Tensor | None, bias: Tensor,
                shape: tuple[int, int, int, int], skip: bool = True) -> _backend.Mods:  # fmt: skip
    """A masked launch's modifiers: (softcap, slopes, sinks, the bias's kernel view[, its cells]):
    the cells where skip and summary_pays (else every tile is computed, as without them)."""
    mods = (*ops_mods._launch_mods(softcap, slopes, sinks), bias_view(bias, shape))
    return (*mods, bias_cells(bias, shape[2], shape[3])) if skip and summary_pays(bias, shape) else mods


def dense_grad(q: Tensor, shape: tuple[int, ...], unvisited: bool) -> Tensor:
    """The kernels' dense (B, Hq, Sq, Sk) bias-gradient buffer: zeroed where some elements are
    never visited (a mask, skipped tiles), else left unfilled (every element is stored)."""
    return q.new_zeros(shape) if unvisited else q.new_empty(shape)


def reduce_to(grad: Tensor, shape: tuple[int, ...]) -> Tensor:
    """A dense (B, Hq, Sq, Sk) gradient summed over the dims a tensor of ``shape`` broadcasts along
    (float32 sums, float64 for float64, rounded once into grad's dtype), reshaped to ``shape``.
    PyTorch's sum of float16 / bfloat16 accumulates in float32 (its acc_type, CPU and CUDA) and
    rounds once at the end, so it is asked in grad's dtype: the same values as summing with
    dtype=float32 and converting, without the float32 result's round trip through memory (at B 8 x
    H 16 x S 2k, a (1, H, S, S) bias: 256 MB written and read and 128 MB written, ~0.17 ms of the
    H100's bandwidth in a ~3 ms backward)."""
    lead = 4 - len(shape)
    s4 = (1,) * lead + tuple(shape)
    dims = [d for d in range(4) if s4[d] == 1 and grad.shape[d] != 1]
    if not dims:
        return grad.reshape(shape)
    return grad.sum(dim=dims, keepdim=True).reshape(shape)


def _shape(q: Tensor, k: Tensor) -> tuple[int, int, int, int]:
    return (q.shape[0], q.shape[1], q.shape[2], k.shape[2])


def _check_bias(q: Tensor, k: Tensor, bias: Tensor) -> None:
    target = _shape(q, k)
    if bias.dtype != q.dtype:
        raise TypeError(f"attn_mask (bias) dtype={bias.dtype}: needs query.dtype={q.dtype} (convert bool masks first)")
    if bias.device != q.device:
        raise ValueError(f"attn_mask (bias) device={bias.device}: differs from query.device={q.device}")
    if bias.dim() > 4 or any(n not in (1, t) for n, t in zip(reversed(bias.shape), reversed(target))):
        raise ValueError(f"attn_mask (bias) {tuple(bias.shape)}: needs a shape that broadcasts to {target}")


def reason(q: Tensor, k: Tensor, v: Tensor, spec: masks.MaskSpec, mods: _backend.Mods, backward: bool) -> str | None:
    """Why our kernels cannot run this masked call (dense), or None."""
    if mods[0] > 0:  # checks.cpp refuses it too
        return "softcap with attn_mask: not served yet (the softcap backward's tanh recovery would re-read the bias)"
    why = selection.dense_reason(q, k, v)
    if why is None:
        why = selection.features_reason(q, v, spec, _backend.feature_bits(mods), varlen=False, backward=backward)
    if why is None and backward:
        why = ops._backward_reason(q, v)
    return why


def _fwd_cuda(
    q: Tensor, k: Tensor, v: Tensor, bias: Tensor, scale: float, mask: list[int], softcap: float,
    slopes: Tensor | None, sinks: Tensor | None,
) -> tuple[Tensor, Tensor]:
    spec = ops._check_mask(mask)
    _check_bias(q, k, bias)
    out, lse = ops._fwd_outputs(q, v)
    if ops._is_empty(q, k):
        return ops._fill_empty_fwd(out, lse)
    q, k, v = ops._readable(q, k, v)
    mods = masked_mods(softcap, slopes, sinks, bias, _shape(q, k))
    ops._require_kernels(reason(q, k, v, spec, mods, backward=False))
    _backend.launch_fwd(q, k, v, out, lse, scale, spec, None, mods=mods)
    _FWD_COUNTS[0] += 1
    return out, lse


def _extras(bias: Tensor, softcap: float, slopes: Tensor | None, sinks: Tensor | None) -> features.Extras:
    return features.Extras(attn_mask=bias, softcap=softcap, alibi_slopes=slopes, sinks=sinks)


def _fwd_cpu(
    q: Tensor, k: Tensor, v: Tensor, bias: Tensor, scale: float, mask: list[int], softcap: float,
    slopes: Tensor | None, sinks: Tensor | None,
) -> tuple[Tensor, Tensor]:
    spec = ops._check_mask(mask)
    _check_bias(q, k, bias)
    ops._count_cpu(_FWD_COUNTS, "flashsdpa::fwd_masked")
    out, lse = ops._fill_empty_fwd(*ops._fwd_outputs(q, v))
    if ops._is_empty(q, k):
        return out, lse
    ref_out, ref_lse = features.forward(q, k, v, scale=scale, mask=spec, extras=_extras(bias, softcap, slopes, sinks))
    return out.copy_(ref_out), lse.copy_(ref_lse)


def _fwd_fake(
    q: Tensor, k: Tensor, v: Tensor, bias: Tensor, scale: float, mask: list[int], softcap: float,
    slopes: Tensor | None, sinks: Tensor | None,
) -> tuple[Tensor, Tensor]:
    return ops._fwd_outputs(q, v)


def _grads(
    q: Tensor, k: Tensor, v: Tensor, bias: Tensor, slopes: Tensor | None, sinks: Tensor | None, grads: list[bool]
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:
    dq, dk, dv, d_slopes, d_sinks = ops_mods._mods_grads(q, k, v, slopes, sinks, grads[:2])
    d_bias = q.new_empty(bias.shape) if grads[2] else q.new_empty(0)
    return dq, dk, dv, d_slopes, d_sinks, d_bias


def _bwd_cuda(
    dout: Tensor, q: Tensor, k: Tensor, v: Tensor, out: Tensor, lse: Tensor, bias: Tensor, scale: float,
    mask: list[int], softcap: float, slopes: Tensor | None, sinks: Tensor | None, grads: list[bool],
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:
    spec = ops._check_mask(mask)
    _check_bias(q, k, bias)
    # d_bias: the reduction of the kernels' dense buffer below (no placeholder allocated first).
    dq, dk, dv, d_slopes, d_sinks = ops_mods._mods_grads(q, k, v, slopes, sinks, grads[:2])
    if ops._is_empty(q, k):
        d_bias = q.new_zeros(bias.shape) if grads[2] else q.new_empty(0)
        return dq.zero_(), dk.zero_(), dv.zero_(), d_slopes, d_sinks, d_bias
    dout, q, k, v, out = ops._readable(dout, q, k, v, out)
    shape = _shape(q, k)
    # No summary in deterministic mode: the host would drop it (api.cpp: the ordered dQ adds count
    # every key block the mask lists), so it is not computed.
    mods = masked_mods(softcap, slopes, sinks, bias, shape, skip=not torch.are_deterministic_algorithms_enabled())
    ops._require_kernels(reason(q, k, v, spec, mods, backward=True))
    ops._alert_nondeterministic("flashsdpa::bwd_masked", q, v, spec, False, _backend.feature_bits(mods))
    d_sinks32 = d_sinks if d_sinks.numel() == 0 or d_sinks.dtype == torch.float32 else d_sinks.float()
    # The kernels store dS per visited element of a dense buffer, reduced to the bias's shape below.
    # Elements a causal mask / window or the summary's skipped tiles leave unvisited must read 0 (a
    # zeroed buffer); unmasked and without a summary both families store every element, so no fill
    # (its bytes: 1.07 GB at B 8, H 16, S 2k; tests/gpu/test_masks_gpu.py poisons it with NaN).
    d_full = dense_grad(q, shape, unvisited=spec[0] >= 0 or spec[1] >= 0 or len(mods) > 4) if grads[2] else None
    mod_grads = (d_slopes if d_slopes.numel() else None, d_sinks32 if d_sinks32.numel() else None, d_full)
    _backend.launch_bwd(dout, q, k, v, out, lse, dq, dk, dv, scale, spec, None, mods, mod_grads)
    _BWD_COUNTS[0] += 1
    d_bias = q.new_empty(0) if d_full is None else reduce_to(d_full, tuple(bias.shape))
    return dq, dk, dv, d_slopes, d_sinks32.to(d_sinks.dtype), d_bias


def _bwd_cpu(
    dout: Tensor, q: Tensor, k: Tensor, v: Tensor, out: Tensor, lse: Tensor, bias: Tensor, scale: float,
    mask: list[int], softcap: float, slopes: Tensor | None, sinks: Tensor | None, grads: list[bool],
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:
    spec = ops._check_mask(mask)
    _check_bias(q, k, bias)
    ops._count_cpu(_BWD_COUNTS, "flashsdpa::bwd_masked")
    dq, dk, dv, d_slopes, d_sinks, d_bias = _grads(q, k, v, bias, slopes, sinks, grads)
    if ops._is_empty(q, k):
        return dq.zero_(), dk.zero_(), dv.zero_(), d_slopes, d_sinks, d_bias.zero_()
    g = features.backward(dout, q, k, v, out, lse, scale=scale, mask=spec, extras=_extras(bias, softcap, slopes, sinks))
    if d_slopes.numel() and g.d_alibi is not None:
        d_slopes.copy_(g.d_alibi)
    if d_sinks.numel() and g.d_sinks is not None:
        d_sinks.copy_(g.d_sinks)
    if grads[2] and g.d_mask is not None:
        d_bias.copy_(g.d_mask)
    return dq.copy_(g.dq), dk.copy_(g.dk), dv.copy_(g.dv), d_slopes, d_sinks, d_bias


def _bwd_fake(
    dout: Tensor, q: Tensor, k: Tensor, v: Tensor, out: Tensor, lse: Tensor, bias: Tensor, scale: float,
    mask: list[int], softcap: float, slopes: Tensor | None, sinks: Tensor | None, grads: list[bool],
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:
    return _grads(q, k, v, bias, slopes, sinks, grads)


# ---- autograd (the LSE carries no gradient, as for ops.py's ops) ---------------------------------


def _setup_context(ctx: Any, inputs: tuple[Any, ...], output: tuple[Tensor, Tensor]) -> None:
    q, k, v, bias, scale, mask, softcap, slopes, sinks = inputs
    out, lse = output
    ctx.save_for_backward(q, k, v, out, lse, bias, slopes, sinks)
    ctx.scale, ctx.mask, ctx.softcap = scale, mask, softcap
    ctx.mark_non_differentiable(lse)
    ctx.set_materialize_grads(False)


def _backward(ctx: Any, dout: Tensor | None, _dlse: Tensor | None) -> tuple[Tensor | None, ...]:
    if dout is None:
        return (None,) * 9
    q, k, v, out, lse, bias, slopes, sinks = ctx.saved_tensors
    need = ctx.needs_input_grad
    want = [bool(need[7]) and slopes is not None, bool(need[8]) and sinks is not None, bool(need[3])]
    dq, dk, dv, d_slopes, d_sinks, d_bias = torch.ops.flashsdpa.bwd_masked.default(
        dout, q, k, v, out, lse, bias, ctx.scale, ctx.mask, ctx.softcap, slopes, sinks, want
    )
    return (dq, dk, dv, d_bias if want[2] else None, None, None, None, d_slopes if want[0] else None,
            d_sinks if want[1] else None)  # fmt: skip


for _name, _cuda, _cpu, _fake in (
    ("fwd_masked", _fwd_cuda, _fwd_cpu, _fwd_fake),
    ("bwd_masked", _bwd_cuda, _bwd_cpu, _bwd_fake),
):
    _lib.impl(_name, _cuda, "CUDA")
    _lib.impl(_name, _cpu, "CPU")
    torch.library.register_fake(f"flashsdpa::{_name}", _fake, lib=_lib)
torch.library.register_autograd("flashsdpa::fwd_masked", _backward, setup_context=_setup_context, lib=_lib)
torch.library.register_autograd("flashsdpa::bwd_masked", ops._no_double_backward, lib=_lib)
