# eager.py: whether a call may run our CUDA code right away, without the dispatcher, the op's
# autograd wrapper or SDPA's own dispatch: nothing would record, trace, cast or wrap it. Shared by
# the SDPA entry's eager path (entry._eager_skip_reason, which adds SDPA's own conditions) and the
# direct API (direct.attention), where the torch.library op costs tens of microseconds of host
# time a call on the H200 (65 µs for a decode-shaped flashsdpa.attention against 25 through SDPA's
# router, session 5's decode rows) for an answer the CUDA implementation alone gives.
"""The conditions under which a call may skip the dispatcher and run our CUDA implementation."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor
from torch.autograd import forward_ad

# Bound once: one global lookup instead of an attribute chain (torch.is_grad_enabled(): 57 -> 37 ns
# on CPU). The torch._C internals fall back to answers that keep every call on the usual roads.
_is_grad_enabled = torch.is_grad_enabled
_is_compiling = torch.compiler.is_compiling
_is_autocast_enabled = torch.is_autocast_enabled
_functorch_active: Callable[[], bool] = getattr(torch._C, "_are_functorch_transforms_active", lambda: True)
_function_modes: Callable[[], int] = getattr(torch._C, "_len_torch_function_stack", lambda: 1)
_dispatch_modes: Callable[[], int] = getattr(torch._C, "_len_torch_dispatch_stack", lambda: 1)

# The reasons (constants: on the training path every call ends at one of them, nothing is formatted).
NOT_PLAIN = "not three plain tensors: subclasses (FakeTensor, DTensor, jagged nested, ...) take SDPA's road"
GRAD = "gradients needed: the flash op's autograd node records the backward"
COMPILING = "torch.compile is tracing: the graph records SDPA's own choice"
NOT_CUDA = "not a dense CUDA tensor (query on the CPU, or a strided nested query, key or value)"
AUTOCAST = "CUDA autocast: SDPA casts the inputs first"
TRANSFORMS = "forward AD or a functorch transform (vmap, grad, ...) is active: it wraps SDPA's ops"
MODES = "another torch-function or dispatch mode is active: it would not see SDPA's ops"


def wrapped_reason(query: Any, key: Any, value: Any) -> str | None:
    """Why this call must go through the dispatcher (something would record, trace, cast or wrap
    it), or None: three plain dense CUDA tensors, no gradient to record, no compile, autocast,
    forward AD, functorch transform, torch-function or dispatch mode. Never raises. Tested in order
    of cost and of how often each decides."""
    if type(query) is not Tensor or type(key) is not Tensor or type(value) is not Tensor:
        return NOT_PLAIN
    if _is_grad_enabled() and (query.requires_grad or key.requires_grad or value.requires_grad):
        return GRAD
    if _is_compiling():
        return COMPILING
    if not query.is_cuda or query.is_nested or key.is_nested or value.is_nested:
        return NOT_CUDA
    if _is_autocast_enabled("cuda"):
        return AUTOCAST
    if getattr(forward_ad, "_current_level", 0) >= 0 or _functorch_active():  # no attribute: as if a level were on
        return TRANSFORMS
    if _function_modes() or _dispatch_modes():
        return MODES
    return None
