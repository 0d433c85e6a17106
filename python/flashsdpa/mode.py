# mode.py: flashsdpa's TorchFunctionMode on F.scaled_dot_product_attention, and its eager path.
#
# While flashsdpa is active (activation.py pushes the mode) it sees every Python call of SDPA.
# It sends the calls PyTorch's flash path turns away but our kernels serve (top-left causal with
# seqlen_q != seqlen_k, value head dim != query's, CausalBias masks) to flashsdpa's op, and runs
# eager calls that need no autograd on our kernel itself (the eager path, which skips SDPA's
# dispatch and the router); every other call goes on to SDPA unchanged. Being on the mode stack
# also makes Dynamo recompile a function traced outside the context (and back).
"""The TorchFunctionMode that routes F.scaled_dot_product_attention calls, and its eager path."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.autograd import forward_ad
from torch.overrides import TorchFunctionMode

from flashsdpa import _backend, masks, ops, reporting, selection
from flashsdpa.routers import softmax_scale

__all__ = ["EAGER_SDPA", "FLASH", "FlashSDPAMode", "remove_mode"]

FLASH = 1  # int(torch.nn.attention.SDPBackend.FLASH_ATTENTION), the value _sdp_priority_order uses

_SDPA = F.scaled_dot_product_attention

# The calls the mode's eager path serves, counted apart from the routers' aten ops so that stats()
# shows which road a call took.
EAGER_SDPA = "F.scaled_dot_product_attention (eager, no grad)"
_EAGER_COUNTS = reporting.counter(EAGER_SDPA)

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
    scale_ = softmax_scale(scale, query.shape[-1])
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
    if not _flash_sdp_enabled() or (_sdp_priority_order is not None and _sdp_priority_order()[0] != FLASH):
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
    _backend.launch_fwd(query, key, value, out, None, softmax_scale(scale, head_dim), _EAGER_MASKS[is_causal])
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


class FlashSDPAMode(TorchFunctionMode):
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


def remove_mode(mode: TorchFunctionMode) -> bool:
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
