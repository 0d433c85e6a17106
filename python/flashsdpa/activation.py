# activation.py: turning flashsdpa on and off.
#
# Owns enable() / install() / uninstall() / is_active() and the torch.nn.attention registry entry
# "FLASHSDPA", which share one refcount. The first activation registers the routers
# (routers.py), puts PyTorch's FLASH backend first in SDPA's priority order (on Hopper PyTorch
# prefers cuDNN) and pushes the TorchFunctionMode (mode.py); the last release undoes all three
# exactly. Importing flashsdpa offers the registry entry but never activates anything.
"""enable() / install() / the registry entry: activation of flashsdpa's routers and mode."""

from __future__ import annotations

import threading
import warnings
from dataclasses import dataclass

import torch

from flashsdpa import _backend
from flashsdpa.mode import FLASH, FlashSDPAMode, remove_mode
from flashsdpa.reporting import log
from flashsdpa.routers import register_routers, unregister_routers

__all__ = ["REGISTRY_NAME", "enable", "install", "is_active", "uninstall"]

REGISTRY_NAME = "FLASHSDPA"  # torch.nn.attention.activate_flash_attention_impl("FLASHSDPA")

# ---- SDPA's backend priority ---------------------------------------------------------------------

_priority_warmed = False


def _warm_priority() -> None:
    """Run PyTorch's lazy priority initialization now. It happens at the first SDPA selection on
    CUDA and, on Hopper with a recent cuDNN, rewrites the order to cuDNN-first; if that first
    selection came after we set our order, it would overwrite ours, and our restore would leave
    the process with the pre-init order (flash first) forever."""
    global _priority_warmed
    if _priority_warmed or not torch.cuda.is_available():
        return
    tiny = torch.zeros(1, 1, 1, 8, dtype=torch.float16, device="cuda")
    torch._fused_sdp_choice(tiny, tiny, tiny)
    _priority_warmed = True


def _prefer_flash() -> list[int] | None:
    """Put FLASH first in SDPA's priority order; returns the order to restore (None: unchanged).
    Calls that PyTorch's flash filter rejects (masks, for instance) still take the next backend
    in PyTorch's own order."""
    get_order = getattr(torch._C, "_get_sdp_priority_order", None)
    set_order = getattr(torch._C, "_set_sdp_priority_order", None)
    if get_order is None or set_order is None:
        return None
    _warm_priority()
    saved = [int(b) for b in get_order()]
    set_order([FLASH, *(b for b in saved if b != FLASH)])
    return saved


def _kernels_usable() -> bool:
    """Whether this process can run our kernels at all: a CUDA build of _C and a CUDA device."""
    return _backend.CUDA_KERNELS and torch.cuda.is_available()


# ---- activation ----------------------------------------------------------------------------------


@dataclass
class _Activation:
    library: torch.library.Library
    mode: FlashSDPAMode
    saved_order: list[int] | None


_lock = threading.RLock()
_refcount = 0
_active: _Activation | None = None
_installed = False
_warned_unusable = False


def _activate() -> _Activation:
    global _warned_unusable
    usable = _kernels_usable()
    if usable:
        _backend.prime_devices()  # device checks become dict reads that torch.compile can trace
    elif torch.cuda.is_available() and not _warned_unusable:
        _warned_unusable = True
        warnings.warn(f"flashsdpa: {_backend.UNAVAILABLE_REASON}; SDPA keeps PyTorch's kernels", stacklevel=4)
    library = register_routers()
    try:
        # Reordering only matters, and is only done, where our kernels can run.
        saved_order = _prefer_flash() if usable else None
        try:
            mode = FlashSDPAMode()
            mode.__enter__()
        except BaseException:
            _restore_order(saved_order)
            raise
    except BaseException:
        unregister_routers(library)
        raise
    return _Activation(library, mode, saved_order)


def _restore_order(saved_order: list[int] | None) -> None:
    if saved_order is not None:
        torch._C._set_sdp_priority_order(saved_order)


def _deactivate(state: _Activation) -> None:
    if not remove_mode(state.mode):
        log.warning(
            "flashsdpa: deactivated from a thread other than the one that activated it; "
            "that thread keeps flashsdpa's (then inert) TorchFunctionMode"
        )
    _restore_order(state.saved_order)
    unregister_routers(state.library)


def _acquire() -> None:
    global _refcount, _active
    with _lock:
        if _refcount == 0:
            _active = _activate()
        _refcount += 1


def _release() -> None:
    global _refcount, _active
    with _lock:
        if _refcount == 0:
            raise RuntimeError("flashsdpa: released more often than activated")
        _refcount -= 1
        if _refcount == 0:
            state, _active = _active, None
            assert state is not None
            _deactivate(state)


class enable:  # lowercase: used like torch.no_grad
    """Context manager: while active, SDPA calls our kernels can serve run them.

    ``with flashsdpa.enable(): ...``. Re-entrant and refcounted with install() and the registry
    activation: the first entry activates, the last exit deactivates, restoring SDPA's priority
    order and PyTorch's kernels exactly. Process-wide (SDPA's dispatch is), except the
    TorchFunctionMode, which lives on the entering thread.
    """

    def __enter__(self) -> enable:
        _acquire()
        return self

    def __exit__(self, *exc_info: object) -> None:
        _release()


def install() -> None:
    """Activate flashsdpa for the whole process (until uninstall()); idempotent."""
    global _installed
    with _lock:
        if not _installed:
            _acquire()
            _installed = True


def uninstall() -> None:
    """Undo install(); a no-op if not installed. Active enable() contexts stay active."""
    global _installed
    with _lock:
        if _installed:
            _installed = False
            _release()


def is_active() -> bool:
    """Whether flashsdpa's routers are registered (an enable() context, install() or the registry)."""
    return _refcount > 0


class _RegistryHandle:
    """What torch.nn.attention.activate_flash_attention_impl("FLASHSDPA") keeps: one activation,
    released by restore_flash_attention_impl() through remove()."""

    def __init__(self) -> None:
        _acquire()
        self._held = True

    def remove(self) -> None:
        if self._held:
            self._held = False
            _release()


def _register_with_torch() -> bool:
    """Offer flashsdpa to torch.nn.attention's registry (torch 2.10+). Never activates."""
    register = getattr(torch.nn.attention, "register_flash_attention_impl", None)
    if register is None:
        return False
    register(REGISTRY_NAME, register_fn=_RegistryHandle)
    return True


_register_with_torch()
