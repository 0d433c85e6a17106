# reporting.py: what the routers and flashsdpa's ops did, for the user and for the tests.
#
# Owns the served / fallen-back counts per op (each caller binds its own counter list once and bumps
# it in place: one list index per call on the hot path; callers are the routers, flashsdpa's ops and
# the SDPA entry), stats() / reset_stats(), and the report of each fallback: a per-reason count, a
# DEBUG line on the "flashsdpa" logger and, opt-in, a FallbackWarning once per distinct reason. The
# rules that decide a fallback are selection.py's.
"""Counts of served and fallen-back calls, and the fallback log and warnings."""

from __future__ import annotations

import logging
import os
import warnings
from typing import Any

__all__ = ["Counts", "FallbackWarning", "REPORT_EACH_CALL", "counter", "int64_cells", "log", "native_reason_cells",
           "note_fallback", "report_each_call", "reset_stats", "set_fallback_warnings", "stats"]  # fmt: skip

log = logging.getLogger("flashsdpa")


class FallbackWarning(UserWarning):
    """A call went to PyTorch's kernel instead of flashsdpa's; issued once per distinct reason
    when ``flashsdpa.set_fallback_warnings(True)`` or ``FLASHSDPA_WARN_FALLBACK=1``."""


_warn_fallbacks: bool = os.environ.get("FLASHSDPA_WARN_FALLBACK", "0") not in ("", "0")
_warned: set[str] = set()


def set_fallback_warnings(enabled: bool = True) -> None:
    """Warn (FallbackWarning) once per distinct reason whenever a call falls back to PyTorch's
    kernel. Off by default; fallbacks are always logged at DEBUG on the 'flashsdpa' logger.
    Turning it on starts afresh: reasons warned about before are warned about again."""
    global _warn_fallbacks
    _warn_fallbacks = bool(enabled)
    _warned.clear()
    report_each_call()




# Served / fallen-back counts per op: each router binds its own [served, fallback] pair once and
# bumps it in place, one index per call; stats() copies them out. The pairs are int64 memory (a
# memoryview of a bytearray, indexed like a list at ~25 ns against ~12) so that the C++ routers
# (cxx_routers.py) bump the same counts through a pointer, with no Python on their served path.
Counts = memoryview
_COUNTS: dict[str, Counts] = {}
_REASON_COUNTS: dict[str, int] = {}


def int64_cells(n: int) -> Counts:
    """``n`` zeroed int64 counters, indexable and writable from Python and, by address, from C++."""
    return memoryview(bytearray(8 * n)).cast("q")


# Whether every fallback must reach Python (the opt-in warning, or the DEBUG log): int64 memory the
# C++ routers read before they run a masked call's PyTorch kernel without Python (cxx_routers.py).
# Updated when warnings are switched and at each activation (a logger level set while active is
# seen at the next enable()).
REPORT_EACH_CALL = int64_cells(1)


def reports_each_call() -> bool:
    """Whether a fallback is warned about or logged now (a logger level set while active counts)."""
    return _warn_fallbacks or log.isEnabledFor(logging.DEBUG)


def report_each_call() -> bool:
    """Refresh and return REPORT_EACH_CALL: True while a fallback is warned about or logged."""
    each = reports_each_call()
    REPORT_EACH_CALL[0] = int(each)
    return each


report_each_call()


def counter(op: str) -> Counts:
    """The live ``[served, fallback]`` counts of ``op``, created on first use."""
    counts = _COUNTS.get(op)
    if counts is None:
        counts = _COUNTS[op] = int64_cells(2)
    return counts


# Fallbacks the C++ routers ran without Python (cxx_routers.py): per op, one int64 count per reason
# of a fixed table (routers_masked.NATIVE_REASONS), folded into stats()' reasons as the Python
# router's own "op: reason" keys, so a call reads the same whichever road it took.
_NATIVE_BLOCKS: dict[tuple[tuple[str, ...], tuple[str, ...]], Counts] = {}


def native_reason_cells(ops: tuple[str, ...], reasons: tuple[str, ...]) -> Counts:
    """One block of len(ops) x len(reasons) int64 counts ([op][reason], by address from C++), the
    same block for the same ops and reasons on every call."""
    cells = _NATIVE_BLOCKS.get((ops, reasons))
    if cells is None:
        cells = _NATIVE_BLOCKS[(ops, reasons)] = int64_cells(len(ops) * len(reasons))
    return cells


def _reason_counts() -> dict[str, int]:
    counts = dict(_REASON_COUNTS)
    for (ops, reasons), cells in _NATIVE_BLOCKS.items():
        for i, n in enumerate(cells):
            if n:
                key = f"{ops[i // len(reasons)]}: {reasons[i % len(reasons)]}"
                counts[key] = counts.get(key, 0) + n
    return counts


def stats() -> dict[str, Any]:
    """Counts since import (or reset_stats): ``{"served": n, "fallback": n, "ops": {op: {"served": n,
    "fallback": n}}, "fallback_reasons": {"op: reason": n}}``. Ops are the aten ops the routers
    override (``aten::_scaled_dot_product_flash_attention`` ...), flashsdpa's own ops
    (``flashsdpa::fwd`` ...: served for CUDA launches, a fallback where the CPU reference runs),
    ``F.scaled_dot_product_attention (eager, no grad)`` (the calls flashsdpa's SDPA function runs
    on our kernel itself) and ``F.scaled_dot_product_attention`` (the calls it hands to PyTorch's
    SDPA that reach no router: float32, masks, CPU, flash disabled; counted as fallbacks). Each
    call is counted once: docs/usage.md lists exactly which calls are."""
    ops = {op: {"served": c[0], "fallback": c[1]} for op, c in sorted(_COUNTS.items())}
    return {
        "served": sum(c["served"] for c in ops.values()),
        "fallback": sum(c["fallback"] for c in ops.values()),
        "ops": ops,
        "fallback_reasons": _reason_counts(),
    }


def reset_stats() -> None:
    """Zero every count of stats()."""
    for c in _COUNTS.values():
        c[0] = c[1] = 0
    _REASON_COUNTS.clear()
    for cells in _NATIVE_BLOCKS.values():
        for i in range(len(cells)):
            cells[i] = 0


def note_fallback(where: str, reason: str) -> None:
    """Report that ``where`` (an op name) left a call to PyTorch's kernel, and why. The caller
    has counted the call; this keeps the per-reason count, the DEBUG log and the opt-in warning."""
    key = f"{where}: {reason}"
    _REASON_COUNTS[key] = _REASON_COUNTS.get(key, 0) + 1
    # Asked first: log.debug's own call (its arguments packed) is half of this function's ~0.5 us
    # on the 2-core CI machine, at every unserved SDPA call (session 43, timeit: 538 -> 322 ns).
    if log.isEnabledFor(logging.DEBUG):
        log.debug("%s: falling back to PyTorch's kernel: %s", where, reason)
    if _warn_fallbacks and reason not in _warned:
        _warned.add(reason)
        warnings.warn(f"flashsdpa: {where} falls back to PyTorch's kernel: {reason}", FallbackWarning, stacklevel=2)
