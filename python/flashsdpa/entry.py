# entry.py: flashsdpa's F.scaled_dot_product_attention, the function that stands behind that name
# (and behind torch._C._nn.scaled_dot_product_attention) while flashsdpa is active, and its eager path.
# Over 500 lines: one call's whole road in front of PyTorch's SDPA (the eager path, the direct
# route, the hand-over with its refusals and its counted reasons, the patching) shares the
# module's state (_active, _EAGER_PATH, _REFUSED, the counts) that tests and activation reach here.
#
# It replaces the TorchFunctionMode of earlier versions. A mode on the stack runs Python for every
# torch call (a float32 model that never reaches our kernels took 16% longer per step on the
# H200; +2 us per op on CPU) and makes has_torch_function() true for every tensor, which turns off
# PyTorch's native paths (nn.MultiheadAttention's and TransformerEncoder's fast path, nested-tensor
# inputs to them). Standing behind the name costs nothing on any other call, and keeps what the
# mode was for:
# - torch.compile: Dynamo guards on the function it loads for F.scaled_dot_product_attention (an
#   ID match on the attribute), so a function compiled on one side of enable() recompiles on the
#   other. Calls inside torch itself are not guarded that way; the one that matters,
#   nn.MultiheadAttention's F.multi_head_attention_forward, is swapped for a copy with its own code
#   object while active, and Dynamo guards on that code object.
# - the eager path (where the Python router serves SDPA's flash forward; against the C++ router
#   SDPA's own road is the cheaper): calls that need no autograd run our kernel right here
#   (_eager_skip_reason), skipping SDPA's dispatch and the router;
# - the calls PyTorch's flash path turns away but our kernels serve (top-left causal with
#   seqlen_q != seqlen_k, value head dim != query's, CausalBias masks) go to flashsdpa's op.
# - a boolean CUDA attn_mask reaches PyTorch's SDPA as 0 / -inf (_with_additive_mask: PyTorch's
#   conversion for its cuDNN op writes -65504, which gives rows that see no key the unmasked answer).
# Everything else goes to PyTorch's SDPA unchanged; tensor subclasses and torch-function modes see
# the call first, as they see any Python function of torch.nn.functional (handle_torch_function).
"""flashsdpa's F.scaled_dot_product_attention while active: the eager path, the direct route, fallbacks."""

from __future__ import annotations

import os
import types
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.overrides import handle_torch_function

from flashsdpa import _backend, eager, masks, ops, reporting, selection
from flashsdpa.features import additive
from flashsdpa.routers import ROUTED, softmax_scale

__all__ = ["EAGER_SDPA", "FLASH", "SDPA", "Patch", "patch_torch", "scaled_dot_product_attention", "unpatch_torch"]

FLASH = 1  # int(torch.nn.attention.SDPBackend.FLASH_ATTENTION), the value _sdp_priority_order uses

# PyTorch's SDPA: the C function torch.nn.functional exports under the same name.
_TORCH_SDPA: Callable[..., Tensor] = torch._C._nn.scaled_dot_product_attention
_TORCH_MHA: Callable[..., Any] = F.multi_head_attention_forward

# stats() names: the calls the eager path serves, and the calls this function hands to PyTorch's
# SDPA that then never reach a router (float32, masks, CPU, flash disabled, ...), with their reason.
EAGER_SDPA = "F.scaled_dot_product_attention (eager, no grad)"
SDPA = "F.scaled_dot_product_attention"
_EAGER_COUNTS = reporting.counter(EAGER_SDPA)
_SDPA_COUNTS = reporting.counter(SDPA)

# What the entry asks on every call beyond eager.wrapped_reason, bound to module names (one global
# lookup instead of an attribute chain saves 20-40 ns a call on CPU); the C function behind
# torch.backends.cuda.flash_sdp_enabled() costs 40 ns against the wrapper's 155. The torch._C
# internals fall back to answers that keep every call on the usual roads, should a torch lack one.
_is_grad_enabled = eager._is_grad_enabled
_is_compiling = eager._is_compiling
_reports_each_call = reporting.reports_each_call
_has_torch_function: Callable[[Any], bool] = torch._C._has_torch_function
_flash_sdp_enabled: Callable[[], bool] = getattr(
    torch._C, "_get_flash_sdp_enabled", torch.backends.cuda.flash_sdp_enabled
)
_sdp_priority_order = getattr(torch._C, "_get_sdp_priority_order", None)
_WIDE_HEAD_DIM = selection.WIDE_HEAD_DIM  # PyTorch's flash limit: above it, the table's wide buckets

# Whether flashsdpa is active (activation.py sets it with the patch). A function object taken from
# F while active and called later runs PyTorch's SDPA; Dynamo guards on this global in graphs that
# inline the function, one more reason for them to recompile on the other side.
_active = False
# Calls inside handle_torch_function: a torch-function mode (or subclass) saw the call and calls
# this function again with itself off the stack; the eager path stays off for such calls, as it
# does while any mode is active (the mode may rely on SDPA's own ops). A count, not a flag, for
# nesting; shared by threads (another thread's handler only sends a call down the usual road).
_IN_HANDLER = [0]
# Whether calls without grad take the eager path (our kernel run from here, skipping SDPA and the
# router). It was built when the routers were Python (a router body of ~9 us); with the C++ router
# serving SDPA's flash forward the road through SDPA is the cheaper one (session 22,
# scripts/dev/eager_ab.py, H200 bf16, medians of 15 interleaved rounds, wall us a call: tiny
# (1, 4, 64, 64) eager 26.8 / through SDPA 26.1, decode 1 x 4k GQA 32/8 and 16/4 36.5 / 32.1,
# prefill 16 x 2k causal 45.7 / 45.7; the Llama-style decoder generating after a 4k prompt 8.89 /
# 7.19 ms a token, PyTorch alone 7.31; the bench's row, enable() / default, 1.004 on the eager path
# in session 21, 0.962 through SDPA). So patch_torch() turns it on only where the Python router
# would serve that op. FLASHSDPA_EAGER=1 / 0 (read at import; _EAGER_OVERRIDE) forces it either way.
def _eager_override(value: str | None) -> bool | None:
    if value is None or not value.strip():
        return None
    return value.strip().lower() not in ("0", "off", "false")


_EAGER_OVERRIDE: bool | None = _eager_override(os.environ.get("FLASHSDPA_EAGER"))
_EAGER_PATH = True  # set by patch_torch() on every activation


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


def _dense(query: Any, key: Any, value: Any) -> bool:
    """Three tensors, none nested: what the direct route can read (a strided nested tensor has no
    .shape: asking raises "NestedTensorImpl doesn't support sizes" where SDPA says something else,
    "No available kernel" for a dense query with nested key and value under FLASH_ATTENTION)."""
    return (
        isinstance(query, Tensor)
        and isinstance(key, Tensor)
        and isinstance(value, Tensor)
        and not (query.is_nested or key.is_nested or value.is_nested)
    )


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
    if not _dense(query, key, value) or not query.is_cuda:
        return None
    # Eager only (Dynamo can trace neither, and guards on neither): a subclass or a torch-function
    # mode sees the call first (it comes back here with itself off the stack), and an sdpa_kernel
    # context (or enable_flash_sdp(False)) that excludes flash keeps the call away from us too.
    if not _is_compiling() and (_has_torch_function((query, key, value)) or not _flash_sdp_enabled()):
        return None
    mode = direct_causal_mode(query, key, value, attn_mask, dropout_p, is_causal, enable_gqa)
    if mode is None:
        return None
    scale_ = softmax_scale(scale, query.shape[-1])
    return torch.ops.flashsdpa.fwd.default(query, key, value, scale_, masks.BY_CAUSAL_MODE[mode])[0]


def direct_causal_mode(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attn_mask: object,
    dropout_p: float,
    is_causal: bool,
    enable_gqa: bool,
) -> int | None:
    """For an F.scaled_dot_product_attention call that PyTorch's flash path turns away but our
    kernels serve, the causal mode to run it with on flashsdpa's own op; None: leave it to SDPA.
    Runs in this entry, which Dynamo traces under torch.compile: see selection.servable().

    PyTorch's flash filter rejects is_causal with seqlen_q != seqlen_k (its kernel aligns causal
    masks bottom-right, SDPA's is_causal means top-left), value head dims that differ from the
    query's, causal_upper_left / causal_lower_right masks, and head dims over 256. Our kernels do
    all of them (head dims over 256 in the table's wide buckets, where a family runs them).
    Calls it accepts go through SDPA as usual (to the routers, with less overhead than our op).
    """
    if dropout_p != 0.0 or not isinstance(query, Tensor) or query.dim() != 4 or key.dim() != 4 or value.dim() != 4:
        return None
    same_lengths = query.shape[2] == key.shape[2]
    same_dims = query.shape[3] == value.shape[3]
    # Head dims above PyTorch's flash limit (256): the table's wide buckets, where they serve.
    wide = max(query.shape[3], value.shape[3]) > _WIDE_HEAD_DIM
    if attn_mask is None:
        mode = 1 if is_causal else 0
        if same_dims and (same_lengths or not is_causal) and not wide:
            return None
    elif selection._is_causal_bias(attn_mask) and not is_causal:
        mode = 1 if attn_mask.variant == selection.CausalVariant.UPPER_LEFT else 2  # type: ignore[attr-defined]
        if same_dims and same_lengths:
            return None  # CausalBias itself turns this into is_causal=True: the routers serve it
    else:
        return None
    if query.shape[1] != key.shape[1] and not enable_gqa:
        return None  # SDPA raises its own error for this
    if not selection.servable(query, key, value):
        return None
    if wide:  # the table's verdict for the forward, and for the backward where autograd will want it
        spec = masks.BY_CAUSAL_MODE[mode]
        if selection.mask_reason(query, value, spec, varlen=False) is not None:
            return None
        grad = torch.is_grad_enabled() and (query.requires_grad or key.requires_grad or value.requires_grad)
        if grad and selection.mask_reason(query, value, spec, varlen=False, backward=True) is not None:
            return None
    return mode


def _flash_path_shapes(query: Any, key: Any, value: Any, is_causal: bool) -> bool:
    """For a call without attn_mask: whether PyTorch's flash path accepts its shapes as they are
    (value head dim equal to the query's and at most 256; equal lengths when causal), so that
    _direct_sdpa has nothing to decide. That is the common call: skipping _direct_sdpa's flag reads
    and tensor checks takes the decision from 1.4-1.6 us to 0.45-0.75 us (CPU, timeit).

    Anything whose shapes it cannot read (non-tensors, fewer than two dims, strided nested
    tensors) answers False: _direct_sdpa then decides.
    """
    try:
        shape = query.shape  # read once: each .shape builds a torch.Size (about 0.1 us)
        return (
            value.shape[-1] == shape[-1] <= _WIDE_HEAD_DIM and (not is_causal or shape[-2] == key.shape[-2])
        )
    except (AttributeError, IndexError, RuntimeError, TypeError):
        return False


def _eager_skip_reason(query: Any, key: Any, value: Any, dropout_p: float, enable_gqa: bool) -> str | None:
    """Why a call without attn_mask cannot skip SDPA and run our kernel right here; None if it can.
    (SDPA's argument parser has not run: the entry has checked the types of the scalars; the
    tensors may be anything, and nothing here may raise.)

    The eager path serves what SDPA would send to the routers (or this function to our op) anyway,
    with exactly their result, and nothing whose meaning something else on the way would change:
    autograd, torch.compile, autocast, functorch transforms, forward AD, torch-function or dispatch
    modes, tensor subclasses, a flash backend that SDPA would not pick. Each reason is a constant
    (nothing is formatted: on the training path every call ends here), tested in order of cost and
    of how often it decides.
    """
    reason = eager.wrapped_reason(query, key, value)
    if reason is not None:
        return reason
    if dropout_p != 0.0:
        return "dropout: the flash op's router takes it (the generator use is PyTorch's flash op's)"
    if _IN_HANDLER[0]:
        return eager.MODES
    if not _flash_sdp_enabled() or (_sdp_priority_order is not None and _sdp_priority_order()[0] != FLASH):
        return "PyTorch's flash backend is disabled or not first: SDPA may pick another backend"
    if not selection.dense_ok(query, key, value):
        return "our kernels cannot read these tensors as they are: the routers' or the direct route's checks decide"
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
    _backend.launch_fwd(query, key, value, out, None, softmax_scale(scale, head_dim), _EAGER_MASKS[is_causal])
    _EAGER_COUNTS[0] += 1
    return out


_DTYPE_REASONS: dict[torch.dtype, str] = {}  # _unserved_reason's dtype reasons, formatted once each


def _dtype_reason(dtype: torch.dtype) -> str:
    reason = _DTYPE_REASONS.get(dtype)
    if reason is None:  # formatting a dtype is ~0.5 us: once per dtype
        reason = _DTYPE_REASONS[dtype] = f"query.dtype={dtype}: needs float16 or bfloat16"
    return reason


# The commonest unserved calls (a float32 / float64 model's, a CPU call) are counted, while no
# fallback is logged or warned about, without their reason: one int64 bump in a block stats() reads
# as note_fallback's "F.scaled_dot_product_attention: reason" keys (reporting.native_reason_cells).
# Session 51 (timeit, 2-core CPU, 1x1x4x8 float32 CPU SDPA): the entry's cost over PyTorch's SDPA
# +4.6-5.0 -> +2.9 us (_unserved_reason + note_fallback, 0.9 + 0.3 us alone, cost ~2 in place).
_FLOAT_CELLS = reporting.native_reason_cells(
    (SDPA,), ("device cpu: needs a CUDA device", _dtype_reason(torch.float32), _dtype_reason(torch.float64)))
_CUDA_FLOAT_CELL = {torch.float32: 1, torch.float64: 2}  # a CPU call: cell 0 (the device comes first)


def _float_cell(query: Any, key: Any, value: Any) -> int | None:
    """The _FLOAT_CELLS cell of _unserved_reason's answer where it is one of theirs, else None."""
    if not _dense(query, key, value):
        return None
    if query.is_cuda:
        return _CUDA_FLOAT_CELL.get(query.dtype)
    return 0 if query.is_cpu else None


def _unserved_reason(query: Any, key: Any, value: Any, attn_mask: Any, dropout_p: float, is_causal: bool,
                     enable_gqa: bool) -> str:  # fmt: skip
    """Why a call SDPA ran never reached a router: explain()'s first reason, the cheap ones first.
    Only calls we do not serve pay for it, once each (about 1 us on CPU; explain() 5-10 us)."""
    if not _dense(query, key, value):
        return "nested or non-tensor inputs that never reached flashsdpa's routers"
    if not query.is_cuda:
        return f"device {query.device.type}: needs a CUDA device"
    if query.dtype not in selection.HALF_DTYPES:
        return _dtype_reason(query.dtype)
    try:
        reasons = selection.explain(query, key, value, attn_mask, dropout_p, is_causal, None, enable_gqa)
    except Exception:  # noqa: BLE001 - a reason is only a report; the call has run already
        reasons = []
    return reasons[0] if reasons else "PyTorch's SDPA chose another backend (its priority order or flash filter)"


# Calls every SDPA backend refuses because query and key head dims differ (q @ k^T cannot be
# formed), by everything that describes the call, with the exception PyTorch raised the first
# time: (type, args). Such a call must raise PyTorch's error every time, but with SDPA's priority
# order flash-first (activation.py) it goes to cuDNN on Hopper, and on torch 2.11 a second cuDNN
# call with a shape whose graph failed to build crashed the process in run_cudnn_SDP_fprop
# (scripts/dev/repro_headdims.py) instead of raising again. PyTorch's dispatch does not keep it
# away from cuDNN (its cuDNN filter reads the query's and the value's head dims only), so the
# entry does: a repeat is answered from here and never reaches cuDNN again. Only calls that raise
# are recorded, so calls that run pay one truthiness test of an empty dict.
_REFUSED: dict[tuple[Any, ...], tuple[type[BaseException], tuple[Any, ...]]] = {}
_REFUSED_LIMIT = 256


def _refusal_key(query: Any, key: Any, value: Any, attn_mask: Any, dropout_p: float, is_causal: bool,
                 scale: Any, enable_gqa: bool) -> tuple[Any, ...] | None:  # fmt: skip
    """The call's description when it is one every backend refuses (plain dense tensors whose
    query and key head dims differ), else None."""
    if not _dense(query, key, value) or query.dim() < 2 or key.dim() < 2 or query.shape[-1] == key.shape[-1]:
        return None
    tensors = [(t.device, t.dtype, tuple(t.shape), t.stride(), t.requires_grad) for t in (query, key, value)]
    mask = (attn_mask.device, attn_mask.dtype, tuple(attn_mask.shape), attn_mask.stride()) if isinstance(
        attn_mask, Tensor) else attn_mask  # fmt: skip
    return (*tensors, mask, dropout_p, is_causal, scale, enable_gqa, _is_grad_enabled(), _sdp_backends())


# The SDPA backends a call may take (sdpa_kernel / enable_*_sdp) and their order: they pick the
# error PyTorch raises for the same tensors (math: a bmm size error; flash alone: "No available
# kernel" after a warning), so a refusal recorded under one setting must not answer another.
_SDP_FLAGS: tuple[Callable[[], Any], ...] = tuple(
    f for f in (getattr(torch._C, f"_get_{name}_sdp_enabled", None)
                for name in ("flash", "mem_efficient", "math", "cudnn", "overrideable")) if f is not None
)  # fmt: skip


def _sdp_backends() -> tuple[Any, ...]:
    order = tuple(_sdp_priority_order()) if _sdp_priority_order is not None else ()
    return (*(flag() for flag in _SDP_FLAGS), order)


def _to_pytorch(
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    query: Any,
    key: Any,
    value: Any,
    attn_mask: Any,
    dropout_p: float,
    is_causal: bool,
    enable_gqa: bool,
    scale: Any = None,
    remember: bool = True,
) -> Any:
    """PyTorch's SDPA on the call as given; a call that reaches no router is counted as a fallback.
    ``remember``: whether the arguments above describe the call exactly (see _REFUSED)."""
    if _is_compiling():
        return _TORCH_SDPA(*args, **kwargs)  # Dynamo handles modes and subclasses itself
    relevant = (query, key, value, attn_mask)
    if _has_torch_function(relevant):
        # As every Python function of torch.nn.functional does: subclasses and torch-function modes
        # see this function (so `func is F.scaled_dot_product_attention` holds there, as
        # CausalBias and nested tensors test) and call it again with themselves off the stack.
        _IN_HANDLER[0] += 1
        try:
            return handle_torch_function(scaled_dot_product_attention, relevant, *args, **kwargs)
        finally:
            _IN_HANDLER[0] -= 1
    if _REFUSED and remember:
        refusal = _refusal_key(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa)
        known = None if refusal is None else _REFUSED.get(refusal)
        if known is not None:
            raise known[0](*known[1])
    routed = ROUTED[0]
    try:
        out = _TORCH_SDPA(*args, **kwargs)
    except RuntimeError as exc:
        refusal = _refusal_key(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa) if remember else None
        if refusal is not None:
            if len(_REFUSED) >= _REFUSED_LIMIT:
                _REFUSED.clear()
            _REFUSED[refusal] = (type(exc), exc.args)
        raise
    if ROUTED[0] == routed:  # no router saw it: PyTorch chose another backend (or the CPU)
        _SDPA_COUNTS[1] += 1
        cell = None if _reports_each_call() else _float_cell(query, key, value)
        if cell is not None:
            _FLOAT_CELLS[cell] += 1
        else:
            reason = _unserved_reason(query, key, value, attn_mask, dropout_p, is_causal, enable_gqa)
            reporting.note_fallback(SDPA, reason)
    return out


def scaled_dot_product_attention(*args: Any, **kwargs: Any) -> Any:
    # PyTorch's docstring is copied below: help(F.scaled_dot_product_attention) reads the same.
    if not _active:
        return _TORCH_SDPA(*args, **kwargs)
    try:
        # Python's own binding of SDPA's signature is the cheapest reading of the call (0.1 to
        # 0.2 us on CPU, with any mix of positional and keyword arguments) and the exact one.
        query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa = _sdpa_arguments(*args, **kwargs)
    except TypeError:
        return _TORCH_SDPA(*args, **kwargs)  # SDPA reports its own argument error
    # SDPA's parser has not run: arguments of any other type go to it as they are (it raises, or
    # converts what it accepts: numpy scalars, ...). About 60 ns on CPU. Spelled with type() ... is:
    # Dynamo traces this function, and a set of classes (`__class__ in {float, int}`) sent traced
    # calls with a plain float dropout_p down this road.
    if (
        type(is_causal) is not bool
        or type(enable_gqa) is not bool
        or (type(dropout_p) is not float and type(dropout_p) is not int)
        or (scale is not None and type(scale) is not float and type(scale) is not int)
    ):
        return _to_pytorch(args, kwargs, query, key, value, attn_mask, 0.0, False, False, remember=False)
    if attn_mask is None:
        if type(query) is Tensor and query.dtype not in selection.HALF_DTYPES:
            # float32 / float64: neither the eager path nor the direct route serves the call (both
            # need float16 / bfloat16), so skip their tests (timeit on CPU, session 23: 0.47 +
            # 0.74 us of the unserved float32 call's ~5 us of entry Python) and hand it over.
            return _to_pytorch(args, kwargs, query, key, value, None, dropout_p, is_causal, enable_gqa, scale)
        if _EAGER_PATH and _eager_skip_reason(query, key, value, dropout_p, enable_gqa) is None:
            return _eager_sdpa(query, key, value, is_causal, scale)
        direct = not _flash_path_shapes(query, key, value, is_causal)
    else:
        direct = True
    if direct and isinstance(query, Tensor) and isinstance(key, Tensor) and isinstance(value, Tensor):
        out = _direct_sdpa(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa)
        if out is not None:
            return out
    if type(attn_mask) is Tensor and attn_mask.dtype == torch.bool and type(query) is Tensor and query.is_cuda:
        args, kwargs = _with_additive_mask(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa)
    return _to_pytorch(args, kwargs, query, key, value, attn_mask, dropout_p, is_causal, enable_gqa, scale)


def _with_additive_mask(query: Tensor, key: Any, value: Any, attn_mask: Tensor, dropout_p: float, is_causal: bool,
                        scale: Any, enable_gqa: bool) -> tuple[tuple[Any, ...], dict[str, Any]]:  # fmt: skip
    """The call with its boolean CUDA mask as 0 / -inf in query's dtype: how PyTorch converts one
    for its math and efficient kernels, but not for cuDNN, SDPA's first masked backend on Hopper:
    convert_boolean_attn_mask_cudnn (aten attention.cpp, a cuDNN -inf workaround) writes -65504, and
    a row that sees no key then gets the unmasked answer instead of 0 (softmax is shift-invariant),
    from PyTorch's cuDNN kernel and from our cuDNN router alike (H200, torch 2.11: error 1.7 on a
    fully padded sequence, test_masked_decode_gpu.py). Converted here, every router and every
    PyTorch kernel sees -inf. The one op PyTorch would run itself (it passes float masks through);
    under torch.compile it is traced into the graph with the rest of this function."""
    mask = additive(attn_mask, query.dtype) if query.is_floating_point() else attn_mask
    kwargs = {"attn_mask": mask, "dropout_p": dropout_p, "is_causal": is_causal, "scale": scale, "enable_gqa": enable_gqa}
    return (query, key, value), kwargs


scaled_dot_product_attention.__doc__ = _TORCH_SDPA.__doc__


# ---- standing behind the names ---------------------------------------------------------------------


def _copy_with_own_code(fn: types.FunctionType) -> types.FunctionType:
    """``fn`` with an equal but distinct code object: it runs exactly as ``fn``, and Dynamo's guard
    on ``fn.__code__`` (an identity check) fails for it, so graphs recompile on the other side."""
    copy = types.FunctionType(fn.__code__.replace(), fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)
    copy.__kwdefaults__ = fn.__kwdefaults__
    copy.__dict__.update(fn.__dict__)
    copy.__doc__, copy.__qualname__, copy.__module__ = fn.__doc__, fn.__qualname__, fn.__module__
    copy.__annotations__ = fn.__annotations__
    return copy


# One copy for the process: a fresh one per activation would make graphs traced inside recompile
# on every entry.
_MHA_COPY = _copy_with_own_code(_TORCH_MHA)  # type: ignore[arg-type]


@dataclass(frozen=True)
class Patch:
    """What patch_torch() replaced: (module, attribute name, the object that stood there, ours)."""

    replaced: tuple[tuple[Any, str, Any, Any], ...]


def patch_torch(cxx_forward: bool = False) -> Patch:
    """Stand behind F.scaled_dot_product_attention, torch._C._nn.scaled_dot_product_attention and
    F.multi_head_attention_forward (the last as a copy of itself, for Dynamo's guards; its global
    name is F's attribute, so its inner SDPA call and handle_torch_function see ours too).
    ``cxx_forward``: the C++ router serves SDPA's flash forward (no eager path then, unless
    FLASHSDPA_EAGER=1 asks for it)."""
    global _active, _EAGER_PATH
    _EAGER_PATH = (not cxx_forward) if _EAGER_OVERRIDE is None else _EAGER_OVERRIDE
    ours = (
        (F, "scaled_dot_product_attention", scaled_dot_product_attention),
        (torch._C._nn, "scaled_dot_product_attention", scaled_dot_product_attention),
        (F, "multi_head_attention_forward", _MHA_COPY),
    )
    # What is there now goes back on release: PyTorch's objects, or whatever stood there before.
    replaced = tuple((module, name, getattr(module, name), mine) for module, name, mine in ours)
    for module, name, _, mine in replaced:
        setattr(module, name, mine)
    _active = True
    return Patch(replaced)


def unpatch_torch(patch: Patch) -> bool:
    """Put PyTorch's objects back; False if something else had replaced ours meanwhile (it stays,
    and ours, still reachable through it, runs PyTorch's SDPA from now on)."""
    global _active
    _active = False
    clean = True
    for module, name, theirs, ours in patch.replaced:
        if getattr(module, name) is ours:
            setattr(module, name, theirs)
        else:
            clean = False
    return clean
