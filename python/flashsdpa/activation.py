# activation.py: turning flashsdpa on and off.
#
# Owns enable() / install() / uninstall() / is_active() and the torch.nn.attention registry entry
# "FLASHSDPA", which share one refcount. The first activation registers the routers
# (the C++ ones of cxx_routers.py for SDPA's two flash ops where they serve, routers.py's for the
# rest), puts PyTorch's FLASH backend first in SDPA's priority order (on Hopper PyTorch
# prefers cuDNN), tags torch.compile's caches and stands flashsdpa's function behind
# F.scaled_dot_product_attention (entry.py); the last release undoes all four exactly. Importing
# flashsdpa offers the registry entry but never activates anything.
"""enable() / install() / the registry entry: activation of flashsdpa's routers and SDPA entry."""

from __future__ import annotations

import threading
import warnings
from dataclasses import dataclass

import torch

from flashsdpa import _backend, cxx_routers
from flashsdpa.entry import FLASH, Patch, patch_torch, unpatch_torch
from flashsdpa.reporting import log
from flashsdpa.routers import _SDPA_FWD, register_routers, unregister_routers

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


# ---- torch.compile's on-disk caches ---------------------------------------------------------------

# Appended to torch.compiler.config.cache_key_tag while active. Inductor's FX-graph cache and
# AOTAutograd's cache (whose details include the FX-graph ones) hash the tag into every key: a
# graph compiled inside enable() is never loaded outside it, in this process or a later one, nor
# the other way round. Their keys see the traced graph, not SDPA's backend choice or which of our
# names Dynamo traced (pytorch/pytorch#185449), so without the tag a cached graph of one side would
# be reused on the other.
CACHE_TAG = "flashsdpa"


def _tag_caches() -> str | None:
    """Add CACHE_TAG to torch.compile's cache key tag; returns the tag to restore (None: no such
    config on this torch)."""
    config = getattr(torch.compiler, "config", None)
    saved = getattr(config, "cache_key_tag", None)
    if saved is None:
        return None
    config.cache_key_tag = f"{saved}+{CACHE_TAG}" if saved else CACHE_TAG  # type: ignore[union-attr]
    return saved


def _untag_caches(saved: str | None) -> None:
    if saved is not None:
        torch.compiler.config.cache_key_tag = saved


# ---- activation ----------------------------------------------------------------------------------


@dataclass
class _Activation:
    library: torch.library.Library
    cxx_ops: frozenset[str]  # the ops the C++ routers took (cxx_routers.py); the library has the rest
    patch: Patch
    saved_order: list[int] | None
    saved_tag: str | None


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
    # The C++ routers take SDPA's two flash ops where they can (our kernels usable, the library
    # built and accepted); the Python routers take the other ops, and every op where they cannot.
    cxx_ops = cxx_routers.register() if usable else frozenset()
    try:
        library = register_routers(skip=cxx_ops)
    except BaseException:
        cxx_routers.unregister()
        raise
    try:
        # Reordering only matters, and is only done, where our kernels can run.
        saved_order = _prefer_flash() if usable else None
        try:
            saved_tag = _tag_caches()
            patch = patch_torch(_SDPA_FWD in cxx_ops)  # last: nothing after it can fail
        except BaseException:
            _restore_order(saved_order)
            raise
    except BaseException:
        _unregister(library, cxx_ops)
        raise
    return _Activation(library, cxx_ops, patch, saved_order, saved_tag)


def _unregister(library: torch.library.Library, cxx_ops: frozenset[str]) -> None:
    unregister_routers(library)
    if cxx_ops:
        cxx_routers.unregister()


def _restore_order(saved_order: list[int] | None) -> None:
    if saved_order is not None:
        torch._C._set_sdp_priority_order(saved_order)


def _deactivate(state: _Activation) -> None:
    if not unpatch_torch(state.patch):
        log.warning(
            "flashsdpa: something replaced torch.nn.functional.scaled_dot_product_attention (or "
            "multi_head_attention_forward) while flashsdpa was active; it stays, and flashsdpa's "
            "function behind it now runs PyTorch's SDPA"
        )
    _untag_caches(state.saved_tag)
    _restore_order(state.saved_order)
    _unregister(state.library, state.cxx_ops)


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
    order, PyTorch's kernels and F.scaled_dot_product_attention exactly. Process-wide, as SDPA's
    dispatch is: any thread may enter and leave.
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
