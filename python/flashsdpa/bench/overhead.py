# bench/overhead.py: the shim's per-call host overhead on a tiny shape, against PyTorch's flash.
"""Per-call wall time of SDPA inside flashsdpa.enable(), PyTorch's flash and the direct API."""

from __future__ import annotations

import statistics
import time
from typing import Any

import torch

from flashsdpa.bench.timing import UNSUPPORTED, backend_context, forward, unsupported_status

OVERHEAD_SHAPE = (1, 4, 64, 64)
OVERHEAD_BAR_US = 6.0  # the bar: SDPA inside flashsdpa.enable() at most this over PyTorch's flash

# (backend, gradients) of each variant the overhead report times; the no-grad ones keep their
# backend's name (the JSON fields of earlier reports), the training path's get a suffix.
_OVERHEAD_VARIANTS: dict[str, tuple[str, bool]] = {
    "torch-flash": ("torch-flash", False),
    "flashsdpa-sdpa": ("flashsdpa-sdpa", False),
    "flashsdpa": ("flashsdpa", False),
    "torch-flash (grad)": ("torch-flash", True),
    "flashsdpa-sdpa (grad)": ("flashsdpa-sdpa", True),
}


def overhead_us(dtype: torch.dtype, rounds: int = 41, calls_per_round: int = 200) -> dict[str, Any]:
    """Wall microseconds per forward call on a tiny shape, where the GPU work is negligible and the
    host path (Python, dispatcher, router, launch) is what is measured: SDPA inside
    flashsdpa.enable() against PyTorch's own flash kernel, and the direct API, under no_grad (the
    bar's setting: inference, the mode's eager path); and SDPA with inputs that require grad under
    enable_grad (the training forward: autograd and the routers), reported beside it.

    Rounds are interleaved (each times every variant once, in turn, so clock or load drift hits
    all alike) and each variant's median round is reported, with the spread of its rounds. 41
    rounds of 200 calls (5 x 41 x 220 calls of 20-40 us: about a second and a half): with 9, past
    reports varied by several microseconds from run to run (PyTorch's flash 18-23 us, SDPA inside
    enable() 30-37 us), as much as the effects measured.
    """
    q, k, v = (torch.randn(OVERHEAD_SHAPE, device="cuda", dtype=dtype) for _ in range(3))
    leaves = [t.detach().requires_grad_() for t in (q, k, v)]
    samples: dict[str, list[float]] = {name: [] for name in _OVERHEAD_VARIANTS}
    status: dict[str, str] = {}
    for _ in range(rounds):
        for name, (backend, grad) in _OVERHEAD_VARIANTS.items():
            if name in status:
                continue
            inputs = leaves if grad else (q, k, v)
            try:
                with backend_context(backend), torch.set_grad_enabled(grad):
                    for _ in range(20):
                        forward(backend, *inputs, False)
                    torch.cuda.synchronize()
                    start = time.perf_counter()
                    for _ in range(calls_per_round):
                        forward(backend, *inputs, False)
                    torch.cuda.synchronize()
                    samples[name].append((time.perf_counter() - start) / calls_per_round * 1e6)
            except UNSUPPORTED as exc:
                status[name] = unsupported_status(exc)
    us = {name: statistics.median(s) if s else None for name, s in samples.items()}

    def overhead(ours: str, theirs: str) -> float | None:
        mine, reference = us[ours], us[theirs]
        return None if mine is None or reference is None else mine - reference

    return {
        "shape": list(OVERHEAD_SHAPE),
        "dtype": str(dtype).removeprefix("torch."),
        "us_per_call": {name: us[name] for name in ("torch-flash", "flashsdpa-sdpa", "flashsdpa")},
        "shim_overhead_us": overhead("flashsdpa-sdpa", "torch-flash"),
        "bar_us": OVERHEAD_BAR_US,
        "status": status,
        "grad_us_per_call": {name: us[f"{name} (grad)"] for name in ("torch-flash", "flashsdpa-sdpa")},
        "grad_shim_overhead_us": overhead("flashsdpa-sdpa (grad)", "torch-flash (grad)"),
        "us_spread": {name: [min(s), max(s)] if s else None for name, s in samples.items()},
        "rounds": rounds,
        "calls_per_round": calls_per_round,
    }
