# bench/overhead.py: the shim's per-call host overhead on a tiny shape, against PyTorch's flash.
"""Per-call wall time of SDPA inside flashsdpa.enable(), PyTorch's flash and the direct API."""

from __future__ import annotations

import statistics
import time
from typing import Any

import torch

from flashsdpa.bench.timing import UNSUPPORTED, backend_context, forward, unsupported_status

OVERHEAD_SHAPE = (1, 4, 64, 64)
# Issue 9's per-call bars, microseconds over PyTorch's flash on the same call: the forward without
# grad on equal work (both write the LSE: the aten flash op), the forward with grad (the training
# forward through autograd and the routers), the backward alone. The training step (forward +
# backward) is the headline figure, reported without a bar of its own. "unserved step": a training
# step (forward + backward) in float32, which no kernel of ours takes, inside enable() against
# PyTorch alone (issue 9's "no tax on calls we do not serve"; session 19 measured +90 to +200 us,
# nearly all of it the efficient backward's Python router on autograd's device thread).
OVERHEAD_BARS_US = {"no grad, equal work": 0.0, "grad (fwd)": 2.0, "backward": 2.0, "unserved step (float32)": 2.0}
# Issue 9's attention-only small step: B 8, H 16, S 256, D 64, causal, forward + backward (a small
# model's attention, where host time and per-launch costs weigh as much as the kernels), wall us a
# step inside enable() against PyTorch's flash alone (the bar: <= 0 us), cuDNN alone and PyTorch's
# default beside it. Until session 25 only scripts/dev/shim_cost.py measured it (its host / kernel
# split of the gap to cuDNN stays there: a profiler pass per variant).
ATTENTION_STEP_SHAPE = (8, 16, 256, 64)
ATTENTION_STEP_BAR_US = 0.0

# Variant -> (backend, road): "sdpa" F.sdpa without grad (PyTorch writes the LSE, our eager path
# does not: not equal work, reported for what a user's inference call costs), "aten" the aten
# flash op without grad (both write the LSE: the no-grad bar's equal work; inside enable() our
# router serves it), "grad" F.sdpa on inputs that require grad, "step" that plus its backward
# (torch.autograd.grad). The "sdpa" and "grad" names are those of earlier reports' fields.
_OVERHEAD_VARIANTS: dict[str, tuple[str, str]] = {
    "torch-flash": ("torch-flash", "sdpa"),
    "flashsdpa-sdpa": ("flashsdpa-sdpa", "sdpa"),
    "flashsdpa": ("flashsdpa", "sdpa"),
    "torch-flash (aten)": ("torch-flash", "aten"),
    "flashsdpa-sdpa (aten)": ("flashsdpa-sdpa", "aten"),
    "torch-flash (grad)": ("torch-flash", "grad"),
    "flashsdpa-sdpa (grad)": ("flashsdpa-sdpa", "grad"),
    "torch-flash (step)": ("torch-flash", "step"),
    "flashsdpa-sdpa (step)": ("flashsdpa-sdpa", "step"),
    "torch-default (unserved)": ("torch-default", "unserved"),
    "flashsdpa-sdpa (unserved)": ("flashsdpa-sdpa", "unserved"),
    "torch-flash (attention step)": ("torch-flash", "attention"),
    "torch-cudnn (attention step)": ("torch-cudnn", "attention"),
    "torch-default (attention step)": ("torch-default", "attention"),
    "flashsdpa-sdpa (attention step)": ("flashsdpa-sdpa", "attention"),
}
_SIDES = ("torch-flash", "flashsdpa-sdpa")
_UNSERVED_SIDES = ("torch-default", "flashsdpa-sdpa")


def _minus(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a - b


def _paired(ours: list[float], theirs: list[float]) -> float | None:
    """The median over rounds of ours - theirs, each round's pair timed one after the other: the
    host's drift between rounds (an H200 host's float32 step spread 158-411 us over 61 rounds in
    session 25) cancels in each pair instead of widening both medians."""
    n = min(len(ours), len(theirs))
    return statistics.median(ours[i] - theirs[i] for i in range(n)) if n else None


def overhead_us(dtype: torch.dtype, rounds: int = 41, calls_per_round: int = 200) -> dict[str, Any]:
    """Wall microseconds per call on a tiny shape, where the GPU work is negligible and the host
    path (Python, dispatcher, router, launch) is what is measured: SDPA inside flashsdpa.enable()
    against PyTorch's own flash kernel on the same call, and the direct API. Without grad through
    F.sdpa (inference: our eager path skips the LSE, so not equal work) and through the aten flash
    op (both write the LSE: the bar's equal work); with grad, the forward alone and the training
    step (forward + backward, the headline); the backward alone is step - forward on each side.

    Rounds are interleaved (each times every variant once, in turn, so clock or load drift hits
    all alike) and each variant's median round is reported, with the spread of its rounds. 41
    rounds of 200 calls (about 3 seconds on an H200 host): with 9, past reports varied by several
    microseconds from run to run (PyTorch's flash 18-23 us, SDPA inside enable() 30-37 us), as much
    as the effects measured. The overheads (the bars) are medians of per-round differences, not
    differences of the two medians (session 51: the unserved float32 step read +2.5, +13.6, +5.9 us
    in sessions 48-50 by the latter, on hosts whose speed moved more than that between rounds).
    """
    q, k, v = (torch.randn(OVERHEAD_SHAPE, device="cuda", dtype=dtype) for _ in range(3))
    leaves = (q.detach().requires_grad_(), k.detach().requires_grad_(), v.detach().requires_grad_())
    dout = torch.randn(OVERHEAD_SHAPE, device="cuda", dtype=dtype)
    leaves32 = (q.detach().float().requires_grad_(), k.detach().float().requires_grad_(),
                v.detach().float().requires_grad_())  # fmt: skip
    dout32 = dout.float()
    att = (torch.randn(ATTENTION_STEP_SHAPE, device="cuda", dtype=dtype).requires_grad_(),
           torch.randn(ATTENTION_STEP_SHAPE, device="cuda", dtype=dtype).requires_grad_(),
           torch.randn(ATTENTION_STEP_SHAPE, device="cuda", dtype=dtype).requires_grad_())  # fmt: skip
    att_dout = torch.randn(ATTENTION_STEP_SHAPE, device="cuda", dtype=dtype)
    aten_flash = torch.ops.aten._scaled_dot_product_flash_attention.default

    def call(backend: str, road: str) -> None:
        if road == "aten":
            aten_flash(q, k, v)
        elif road == "sdpa":
            forward(backend, q, k, v, False)
        elif road == "unserved":
            torch.autograd.grad(forward(backend, *leaves32, False), leaves32, dout32)
        elif road == "attention":
            torch.autograd.grad(forward(backend, *att, True), att, att_dout)
        else:
            out = forward(backend, *leaves, False)
            if road == "step":
                torch.autograd.grad(out, leaves, dout)

    samples: dict[str, list[float]] = {name: [] for name in _OVERHEAD_VARIANTS}
    status: dict[str, str] = {}
    for _ in range(rounds):
        for name, (backend, road) in _OVERHEAD_VARIANTS.items():
            if name in status:
                continue
            try:
                # The attention step (~130-300 us a step on an H200's host) takes a quarter of the
                # tiny calls' count, so a round stays ~0.1 s a variant.
                calls = max(1, calls_per_round // 4) if road == "attention" else calls_per_round
                with backend_context(backend), torch.set_grad_enabled(road in ("grad", "step", "unserved", "attention")):
                    for _ in range(20):
                        call(backend, road)
                    torch.cuda.synchronize()
                    start = time.perf_counter()
                    for _ in range(calls):
                        call(backend, road)
                    torch.cuda.synchronize()
                    samples[name].append((time.perf_counter() - start) / calls * 1e6)
            except UNSUPPORTED as exc:
                status[name] = unsupported_status(exc)
    us = {name: statistics.median(s) if s else None for name, s in samples.items()}

    def by_side(road: str) -> dict[str, float | None]:
        return {side: us[f"{side} ({road})"] for side in _SIDES}

    def overhead(road: str, against: str = "torch-flash") -> float | None:
        """Ours over PyTorch on ``road``: the median of per-round differences (see _paired)."""
        suffix = "" if road == "sdpa" else f" ({road})"
        return _paired(samples[f"flashsdpa-sdpa{suffix}"], samples[f"{against}{suffix}"])

    def backward(side: str) -> list[float]:  # per round: the step less its forward
        return [s - g for s, g in zip(samples[f"{side} (step)"], samples[f"{side} (grad)"])]

    grad, step = by_side("grad"), by_side("step")
    bwd = {side: _minus(step[side], grad[side]) for side in _SIDES}
    unserved = {side: us[f"{side} (unserved)"] for side in _UNSERVED_SIDES}
    attention = {backend: us[f"{backend} (attention step)"]
                 for backend in ("torch-flash", "torch-cudnn", "torch-default", "flashsdpa-sdpa")}  # fmt: skip
    return {
        "shape": list(OVERHEAD_SHAPE),
        "dtype": str(dtype).removeprefix("torch."),
        "us_per_call": {name: us[name] for name in ("torch-flash", "flashsdpa-sdpa", "flashsdpa")},
        # F.sdpa without grad: not equal work (PyTorch's flash writes the LSE, our eager path not).
        "shim_overhead_us": overhead("sdpa"),
        "equal_us_per_call": by_side("aten"),
        "equal_shim_overhead_us": overhead("aten"),
        "grad_us_per_call": grad,
        "grad_shim_overhead_us": overhead("grad"),
        "step_us_per_call": step,
        "step_shim_overhead_us": overhead("step"),
        "bwd_us_per_call": bwd,
        "bwd_shim_overhead_us": _paired(backward("flashsdpa-sdpa"), backward("torch-flash")),
        "unserved_step_us_per_call": unserved,
        "unserved_step_overhead_us": overhead("unserved", "torch-default"),
        "attention_step_shape": list(ATTENTION_STEP_SHAPE),
        "attention_step_us_per_step": attention,
        "attention_step_vs_flash_us": overhead("attention step"),
        "attention_step_vs_cudnn_us": overhead("attention step", "torch-cudnn"),
        "bars_us": dict(OVERHEAD_BARS_US),
        "status": status,
        "us_spread": {name: [min(s), max(s)] if s else None for name, s in samples.items()},
        "us_rounds": samples,
        "rounds": rounds,
        "calls_per_round": calls_per_round,
    }
