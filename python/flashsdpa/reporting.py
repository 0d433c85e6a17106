# reporting.py: what the routers and flashsdpa's ops did, for the user and for the tests.
#
# Owns the served / fallen-back counts per op (each caller binds its own counter list once and bumps
# it in place: one list index per call on the hot path), stats() / reset_stats(), and the report
# of each fallback: a per-reason count, a DEBUG line on the "flashsdpa" logger and, opt-in, a
# FallbackWarning once per distinct reason. The rules that decide a fallback are selection.py's.
"""Counts of served and fallen-back calls, and the fallback log and warnings."""

from __future__ import annotations

import logging
import os
import warnings
from typing import Any

__all__ = ["FallbackWarning", "counter", "log", "note_fallback", "reset_stats", "set_fallback_warnings", "stats"]

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


# Served / fallen-back counts per op: each router binds its own [served, fallback] list once and
# bumps it in place, one list index per call; stats() copies them out.
_COUNTS: dict[str, list[int]] = {}
_REASON_COUNTS: dict[str, int] = {}


def counter(op: str) -> list[int]:
    """The live ``[served, fallback]`` counts of ``op``, created on first use."""
    return _COUNTS.setdefault(op, [0, 0])


def stats() -> dict[str, Any]:
    """Counts since import (or reset_stats): ``{"served": n, "fallback": n, "ops": {op: {"served": n,
    "fallback": n}}, "fallback_reasons": {"op: reason": n}}``. Ops are the aten ops the routers
    override (``aten::_scaled_dot_product_flash_attention`` ...), flashsdpa's own CUDA ops
    (``flashsdpa::fwd`` ...; these never fall back, they raise) and ``F.scaled_dot_product_attention
    (eager, no grad)``, the calls the mode runs on our kernel itself (never a fallback either: the
    calls it declines take one of the other roads)."""
    ops = {op: {"served": c[0], "fallback": c[1]} for op, c in sorted(_COUNTS.items())}
    return {
        "served": sum(c["served"] for c in ops.values()),
        "fallback": sum(c["fallback"] for c in ops.values()),
        "ops": ops,
        "fallback_reasons": dict(_REASON_COUNTS),
    }


def reset_stats() -> None:
    """Zero every count of stats()."""
    for c in _COUNTS.values():
        c[0] = c[1] = 0
    _REASON_COUNTS.clear()


def note_fallback(where: str, reason: str) -> None:
    """Report that ``where`` (an op name) left a call to PyTorch's kernel, and why. The caller
    has counted the call; this keeps the per-reason count, the DEBUG log and the opt-in warning."""
    key = f"{where}: {reason}"
    _REASON_COUNTS[key] = _REASON_COUNTS.get(key, 0) + 1
    log.debug("%s: falling back to PyTorch's kernel: %s", where, reason)
    if _warn_fallbacks and reason not in _warned:
        _warned.add(reason)
        warnings.warn(f"flashsdpa: {where} falls back to PyTorch's kernel: {reason}", FallbackWarning, stacklevel=2)
