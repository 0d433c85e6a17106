# cxx_routers.py: the C++ routers of PyTorch's two hot flash ops, from Python.
#
# Owns loading libflashsdpa_routers (routers/routers.cpp: aten::_scaled_dot_product_flash_attention
# and its _backward at the CUDA key, on torch's stable ABI) and handing it, once, _C's RouterTable and
# the counters it bumps (routers.ROUTED and the two ops' reporting counts: int64 memory Python owns);
# registering and deregistering them with each activation (activation.py asks register() first; the
# Python routers of routers.py take the ops the C++ ones do not: all of them where the library is
# absent or refused, with the reason in `flashsdpa info`); and the fallback ops the C++ routers call
# for a call they leave to PyTorch.
#
# Fallback. A stable-ABI library cannot call the kernel PyTorch had at the CUDA key before ours
# (no stable get_kernel / redispatch), so the C++ router calls, through the stable dispatcher shim,
# flashsdpa::<op>_fallback: the aten op's schema plus `str reason`, implemented here at the CUDA key.
# It reports the call (routers._fall_back: counts, reason, log, FallbackWarning) with the Python
# routers' own reason sentence and runs the captured kernel with native.call_boxed, as the Python
# router does. The keyset it passes is the fallback op's own (CUDA and below): PyTorch's CUDA
# kernels of these ops are unboxed wrapper functions without a DispatchKeySet parameter, so their
# boxed adapter never reads it; any keyset that reaches the CUDA kernel serves. Warnings PyTorch's
# kernel issues become Python warnings here as they do in the Python router (call_boxed is a Python
# binding). An exception it raises cannot cross the stable dispatcher shim (2.11 turns it into an
# error code), so the fallback op hands its message to the C++ router (flashsdpa_routers_fail),
# which raises it: the caller sees a RuntimeError with PyTorch's message, which is what PyTorch's
# TORCH_CHECKs raise; an error of another type arrives as a RuntimeError with the same message.
"""The C++ SDPA routers (libflashsdpa_routers): loading, registration and their fallback ops."""

from __future__ import annotations

import ctypes
import os
import warnings
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from flashsdpa import _backend, reporting, routers, routers_masked
from flashsdpa.reporting import log

__all__ = ["LIBRARY", "RETURN_ORDER", "fallback_schema", "masked_unavailable_reason", "register", "unavailable_reason",
           "unregister"]  # fmt: skip

LIBRARY = Path(__file__).with_name("libflashsdpa_routers.so")
# FLASHSDPA_ROUTERS=python keeps the Python routers (A/B measurements, debugging).
ROUTERS_ENV = "FLASHSDPA_ROUTERS"

# The ops the C++ routers take, by their bit in flashsdpa_routers_register's mask. The efficient-
# attention ones only where the library found PyTorch's kernels of them in AOTInductor's C shim
# (flashsdpa_routers_init_masked): routers.cpp runs the calls only PyTorch takes (no attn_bias, a
# float32 / float64 query) there, without Python, and hands the rest to routers_masked.py's router.
_OP_BITS = {routers._SDPA_FWD: 1, routers._SDPA_BWD: 2}
_MASKED_OP_BITS = {routers_masked._EFF_FWD: 4, routers_masked._EFF_BWD: 8}
# The ops of reporting.native_reason_cells' block, in routers.cpp's [op] order.
_NATIVE_OPS = (f"aten::{routers_masked._EFF_FWD}", f"aten::{routers_masked._EFF_BWD}")


def fallback_name(op: str) -> str:
    return f"{op}_fallback"


# The order of each fallback op's returns, as indices into the aten op's returns; the C++ router
# puts them back (routers.cpp's fall_back). torch_call_dispatcher (2.10 to 2.13 at least) converts
# the i-th return popped from the end with the type of the i-th return from the start: right only
# where the return types read the same both ways. The forward's (T, T, T, T, SymInt, SymInt, T, T, T)
# do not; with max_q and cum_seq_k swapped, (T, T, T, SymInt, T, SymInt, T, T, T) do, and stay right
# once torch pairs them correctly. The backward's three tensors need nothing.
RETURN_ORDER = {routers._SDPA_FWD: (0, 1, 2, 4, 3, 5, 6, 7, 8)}


def fallback_schema(op: str) -> str:
    """The schema of flashsdpa::<op>_fallback: aten::<op>'s as this torch has it, plus a last
    keyword-only ``str reason`` (the C++ router's stack is the aten call's, then the reason), its
    returns in RETURN_ORDER."""
    schema = str(getattr(torch.ops.aten, op).default._schema)
    head, _, rest = schema.partition("(")
    arguments, arrow, returns = rest.partition(") -> ")
    if head != f"aten::{op}" or not arrow:
        raise RuntimeError(f"flashsdpa: unexpected schema of aten::{op}: {schema}")
    extra = ", str reason" if "*" in arguments.split(", ") else ", *, str reason"
    order = RETURN_ORDER.get(op)
    if order is not None:
        listed = returns.removeprefix("(").removesuffix(")").split(", ")
        returns = "(" + ", ".join(listed[i] for i in order) + ")"
    return f"{fallback_name(op)}({arguments}{extra}) -> {returns}"


# ---- the fallback ops ------------------------------------------------------------------------------

_LIB: Any = None  # the loaded library (ctypes.CDLL) once usable, else None
_FALLBACK_LIBRARY: torch.library.Library | None = None  # holds the fallback ops for the process

# What a fallback op returns when PyTorch's kernel raised: placeholders of the right arity (None is
# an undefined tensor), discarded by the C++ router, which raises the message it was handed.
_FORWARD_PLACEHOLDER = (None, None, None, 0, None, 0, None, None, None)  # in RETURN_ORDER
_BACKWARD_PLACEHOLDER = (None, None, None)


def _run_native(op: str, counts: reporting.Counts, reason: str, keyset: Any, args: tuple[Any, ...],
                kwargs: dict[str, Any], placeholder: tuple[Any, ...]) -> Any:  # fmt: skip
    try:
        return routers._fall_back(op, counts, reason, keyset, args, kwargs)
    except Exception as exc:  # noqa: BLE001 - handed to the C++ router, which raises it
        _LIB.flashsdpa_routers_fail(str(exc).encode())
        return placeholder


# The forward's optional positional arguments (dropout_p, is_causal, return_debug_mask): the
# dispatcher leaves out trailing ones equal to their defaults.
_SDPA_FWD_DEFAULTS = (0.0, False, False)


def _sdpa_forward_fallback(keyset: Any, *args: Any, scale: float | None = None, reason: str) -> Any:
    args = (*args, *_SDPA_FWD_DEFAULTS[len(args) - 3 :])
    query, key, value, dropout_p, is_causal, return_debug_mask = args
    if dropout_p != 0.0 and not return_debug_mask:
        # The C++ routers leave dropout to the Python router, which serves it (dropout.py's
        # generator use needs Python) or falls back itself.
        try:
            result = routers._sdpa_flash_forward(keyset, query, key, value, dropout_p, is_causal, False, scale=scale)
        except Exception as exc:  # noqa: BLE001 - handed to the C++ router, which raises it
            _LIB.flashsdpa_routers_fail(str(exc).encode())
            return _FORWARD_PLACEHOLDER
        finally:
            routers.ROUTED[0] -= 1  # the C++ router counted the call already
        return tuple(result[i] for i in RETURN_ORDER[routers._SDPA_FWD])
    # The Python router's sentence where it has one (the C++ reason is a few words); the C++ one where
    # only the C++ predicate refused (they agree on the verdict: tests/gpu/test_cxx_routers.py).
    why = routers.sdpa_forward_reason(query, key, value, dropout_p, return_debug_mask) or reason
    counts = routers._SDPA_FWD_COUNTS
    result = _run_native(routers._SDPA_FWD, counts, why, keyset, args, {"scale": scale}, _FORWARD_PLACEHOLDER)
    if result is _FORWARD_PLACEHOLDER:
        return result
    return tuple(result[i] for i in RETURN_ORDER[routers._SDPA_FWD])


def _sdpa_backward_fallback(keyset: Any, *args: Any, scale: float | None = None, reason: str) -> Any:
    if args[10] != 0.0:  # dropout_p: the Python router (see the forward's fallback)
        try:
            return routers._sdpa_flash_backward(keyset, *args, scale=scale)
        except Exception as exc:  # noqa: BLE001 - handed to the C++ router, which raises it
            _LIB.flashsdpa_routers_fail(str(exc).encode())
            return _BACKWARD_PLACEHOLDER
    why = routers.sdpa_backward_reason(args) or reason
    counts = routers._SDPA_BWD_COUNTS
    return _run_native(routers._SDPA_BWD, counts, why, keyset, args, {"scale": scale}, _BACKWARD_PLACEHOLDER)


_FOUR_PLACEHOLDERS = (None, None, None, None)


def _python_road(router: str) -> Any:
    """The fallback op of a masked op: routers_masked.<router> decides (serves, or falls back with
    its own reason and count); looked up per call. Its errors go to the C++ router, which raises them."""

    def road(keyset: Any, *args: Any, scale: float | None = None, reason: str) -> Any:
        try:
            return getattr(routers_masked, router)(keyset, *args, scale=scale)
        except Exception as exc:  # noqa: BLE001 - handed to the C++ router, which raises it
            _LIB.flashsdpa_routers_fail(str(exc).encode())
            return _FOUR_PLACEHOLDERS

    return road


_FALLBACKS = {
    routers._SDPA_FWD: _sdpa_forward_fallback,
    routers._SDPA_BWD: _sdpa_backward_fallback,
    routers_masked._EFF_FWD: _python_road("_eff_forward"),
    routers_masked._EFF_BWD: _python_road("_eff_backward"),
}


def _define_fallbacks() -> None:
    """Define the fallback ops once per process (they run only when a C++ router calls them)."""
    global _FALLBACK_LIBRARY
    if _FALLBACK_LIBRARY is not None:
        return
    lib = torch.library.Library("flashsdpa", "FRAGMENT")
    for op, fallback in _FALLBACKS.items():
        lib.define(fallback_schema(op))
        lib.impl(fallback_name(op), fallback, "CUDA", with_keyset=True)
    _FALLBACK_LIBRARY = lib


# ---- the library -----------------------------------------------------------------------------------


def _cell_address(cells: reporting.Counts) -> int:
    return ctypes.addressof(ctypes.c_char.from_buffer(cells.obj))


def _open(path: Path) -> Any:
    lib = ctypes.CDLL(str(path))
    lib.flashsdpa_routers_table_version.restype = ctypes.c_uint32
    lib.flashsdpa_routers_init.restype = ctypes.c_char_p
    lib.flashsdpa_routers_init.argtypes = [ctypes.c_size_t, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
    lib.flashsdpa_routers_has_cuda.restype = ctypes.c_int
    lib.flashsdpa_routers_register.restype = ctypes.c_char_p
    lib.flashsdpa_routers_register.argtypes = [ctypes.c_int, ctypes.c_char_p]
    lib.flashsdpa_routers_unregister.restype = None
    lib.flashsdpa_routers_fail.restype = None
    lib.flashsdpa_routers_fail.argtypes = [ctypes.c_char_p]
    lib.flashsdpa_routers_init_masked.restype = ctypes.c_char_p
    lib.flashsdpa_routers_init_masked.argtypes = [ctypes.c_void_p] * 4
    lib.flashsdpa_routers_native_reasons.restype = ctypes.c_int
    return lib


def load(path: Path = LIBRARY, table: int | None = None) -> tuple[Any, str | None]:
    """Load the library at ``path`` and initialize it with _C's RouterTable (or the table at address
    ``table``, for tests): (the library, None), or (the library or None, why it cannot serve)."""
    if not path.exists():
        return None, f"{path.name} was not built (it needs nvcc and torch's stable-ABI headers at build time)"
    try:
        lib = _open(path)
    except OSError as exc:
        return None, f"{path.name} does not load: {exc}"
    expected = getattr(_backend._C, "ROUTER_TABLE_VERSION", None)
    if lib.flashsdpa_routers_table_version() != expected:
        return lib, (f"{path.name} needs RouterTable version {lib.flashsdpa_routers_table_version()}, flashsdpa._C "
                     f"has {expected}: rebuild both together")  # fmt: skip
    address = _backend._C.router_table() if table is None else table
    fwd_counts, bwd_counts = routers._SDPA_FWD_COUNTS, routers._SDPA_BWD_COUNTS
    refused = lib.flashsdpa_routers_init(address, _cell_address(routers.ROUTED), _cell_address(fwd_counts),
                                         _cell_address(bwd_counts))  # fmt: skip
    if refused is None:
        _init_masked(lib)
    return lib, None if refused is None else refused.decode()


_MASKED_REASON: list[str | None] = [None]  # why the C++ routers leave the masked ops to Python, or None


def _init_masked(lib: Any) -> None:
    """Hand the library the masked ops' counts and report flag; where it refuses (no native shims
    in this torch), routers_masked.py's Python routers keep those ops (the reason in `info`)."""
    if lib.flashsdpa_routers_native_reasons() != len(routers_masked.NATIVE_REASONS):
        _MASKED_REASON[0] = "routers.cpp's native reasons do not match routers_masked.NATIVE_REASONS: rebuild"
        return
    cells = reporting.native_reason_cells(_NATIVE_OPS, routers_masked.NATIVE_REASONS)
    refused = lib.flashsdpa_routers_init_masked(
        _cell_address(routers_masked._EFF_FWD_COUNTS), _cell_address(routers_masked._EFF_BWD_COUNTS),
        _cell_address(cells), _cell_address(reporting.REPORT_EACH_CALL))  # fmt: skip
    _MASKED_REASON[0] = None if refused is None else refused.decode()


def masked_unavailable_reason() -> str | None:
    """Why the C++ routers do not take the efficient-attention ops here, or None."""
    reason = unavailable_reason()
    return reason if reason is not None else _MASKED_REASON[0]


_REASON: list[str | None] = []  # [why the C++ routers do not serve, or None], once decided


def unavailable_reason() -> str | None:
    """Why the C++ routers do not serve in this process (the Python routers then take every op), or
    None. Decided once, at the first activation (or `flashsdpa info`)."""
    global _LIB
    if not _REASON:
        reason: str | None
        lib = None
        if os.environ.get(ROUTERS_ENV, "").strip().lower() == "python":
            reason = f"{ROUTERS_ENV}=python"
        elif not _backend.CUDA_KERNELS:
            reason = _backend.UNAVAILABLE_REASON
        else:
            lib, reason = load()
            if reason is None and not lib.flashsdpa_routers_has_cuda():
                reason = "this torch has no CUDA (libtorch_cuda is not loaded)"
        _LIB = lib if reason is None else None
        _REASON.append(reason)
    return _REASON[0]


_override_warning_spent = False


def _spend_override_warning() -> None:
    """PyTorch warns once per process, on the first kernel registered over another ("Overriding a
    previously registered kernel ..."). Through the stable C shim nothing turns it into a Python
    warning, so it would print to stderr; spend it on a Python registration, silenced as routers.py
    silences its own, and destroy that at once."""
    global _override_warning_spent
    if _override_warning_spent:
        return
    _override_warning_spent = True
    lib = torch.library.Library("aten", "IMPL")
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=routers.OVERRIDE_WARNING)
        lib.impl(routers._SDPA_FWD, _sdpa_forward_fallback, "CUDA", with_keyset=True)
    lib._destroy()


def register() -> frozenset[str]:
    """Register the C++ routers at the CUDA key of the ops whose live schema they take; returns those
    ops (empty when the C++ routers do not serve here, or registration failed: it is logged)."""
    if unavailable_reason() is not None:
        return frozenset()
    bits = dict(_OP_BITS)
    if _MASKED_REASON[0] is None:
        bits.update(_MASKED_OP_BITS)
    ops = frozenset(route.op for route in routers._ROUTES if route.op in bits and routers.routable(route))
    if not ops:
        return ops
    _define_fallbacks()
    for op in ops:
        routers.capture_native(op)  # before registering: afterwards it would be ours
    _spend_override_warning()
    reporting.report_each_call()  # the DEBUG level as of this activation
    refused = _LIB.flashsdpa_routers_register(sum(bits[op] for op in ops), b"CUDA")
    if refused is not None:
        log.warning("flashsdpa: the C++ routers did not register (%s); the Python routers serve", refused.decode())
        return frozenset()
    return ops


def unregister() -> None:
    """Deregister the C++ routers: PyTorch's kernels are back at once."""
    if _LIB is not None:
        _LIB.flashsdpa_routers_unregister()
