# bench/window.py: the sliding-window row, `python -m flashsdpa bench --window` (part of the full
# run; issue 8's bar). A causal window of the last 4096 keys on 32k tokens against dense causal
# attention, both through flashsdpa.attention: forward, and forward + backward. TFLOP/s are counted
# on the (query, key) pairs each mask leaves visible (4 · pairs · d forward, 2.5x that backward), so
# a kernel whose cost follows the window reads the dense causal rate; the bar is the window rate
# >= 0.9x the causal one, judged on the median of per-round ratios (interleaved rounds). CUDA events,
# median of the reps. Budget on an H200: a few seconds a round.
"""The sliding-window row: a 4k window on 32k tokens against dense causal, rates on visible pairs."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from typing import Any

import torch

from flashsdpa import masks
from flashsdpa.bench import problems
from flashsdpa.bench.problems import DTYPES, api
from flashsdpa.bench.rounds import median, ratio_over_rounds
from flashsdpa.bench.timing import time_cuda_ms

WINDOW_SHAPE = (1, 16, 32768, 128)  # (batch, heads, tokens, head dim): issue 8's row
WINDOW_KEYS = 4096
WINDOW_REPS, WINDOW_WARMUP = 5, 2
# (label, window argument of flashsdpa.attention with causal=True)
MASKS: tuple[tuple[str, tuple[int, int] | None], ...] = (("causal", None), ("window", (WINDOW_KEYS - 1, 0)))


DIRECTIONS = ("fwd", "fwd+bwd")
DIRECTION_FLOPS = {"fwd": 1.0, "fwd+bwd": 3.5}  # forward + backward: 1 + 2.5 forwards' FLOPs


def _round_order(r: int) -> list[tuple[str, str]]:
    """Round r's timings, (mask, direction): A B B A within the round (the forwards, then the forward
    + backwards in the other order) and the masks swapped every other round, so that whatever
    drifts through a round (clocks, power after the heaviest call, the 22 ms causal forward +
    backward) weighs on both masks alike. Session 48 timed causal fwd, causal fwd+bwd, window fwd,
    window fwd+bwd every round, the window forward always right after the heaviest call: 0.88x the
    causal rate, where session 49's tile timeline (the kernels alone, stamped, one launch each)
    read 0.93x."""
    order = [label for label, _ in MASKS]
    if r % 2:
        order.reverse()
    return [(label, "fwd") for label in order] + [(label, "fwd+bwd") for label in reversed(order)]


def _calls(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, dout: torch.Tensor, window: tuple[int, int] | None
) -> tuple[Callable[[], object], Callable[[], object]]:
    fs = api()

    def forward() -> object:
        with torch.no_grad():
            return fs.attention(q, k, v, causal=True, window=window)

    def forward_backward() -> object:
        out = fs.attention(q, k, v, causal=True, window=window)
        return torch.autograd.grad(out, (q, k, v), dout)

    return forward, forward_backward


def run_window(args: argparse.Namespace) -> dict[str, Any]:
    """Per mask and round: forward and forward + backward ms and TFLOP/s on visible pairs; the
    window-over-causal rate ratios as medians of per-round ratios."""
    started = time.perf_counter()
    batch, heads, tokens, head_dim = WINDOW_SHAPE
    dtype = DTYPES[args.dtype]
    q, k, v = (
        torch.randn(batch, heads, tokens, head_dim, device=problems.DEVICE, dtype=dtype, requires_grad=True)
        for _ in range(3)
    )
    dout = torch.randn(batch, heads, tokens, head_dim, device=problems.DEVICE, dtype=dtype)
    rates: dict[tuple[str, str], list[float | None]] = {(label, d): [] for label, _ in MASKS for d in DIRECTIONS}
    calls = {label: dict(zip(DIRECTIONS, _calls(q, k, v, dout, window))) for label, window in MASKS}
    flops = {
        label: 4.0 * head_dim * batch * heads * masks.visible_pairs(masks.make(True, "top_left", window), tokens, tokens)
        for label, window in MASKS
    }
    for r in range(max(1, args.rounds)):
        for label, direction in _round_order(r):
            try:
                ms = time_cuda_ms([calls[label][direction]], warmup=WINDOW_WARMUP, reps=WINDOW_REPS)
            except Exception as exc:  # noqa: BLE001 - one mask's surprise must not end the part
                print(f"bench: window {label} {direction}: {type(exc).__name__}: {exc}", file=sys.stderr)
                ms = None
            scale = DIRECTION_FLOPS[direction]
            rates[(label, direction)].append(scale * flops[label] / ms * 1e-9 if ms else None)
    rows = [
        {"mask": label, "direction": direction, "tflops": median(values), "round_tflops": values}
        for (label, direction), values in rates.items()
    ]
    summary = {}
    for direction in DIRECTIONS:
        value, per_round = ratio_over_rounds(rates[("window", direction)], rates[("causal", direction)])
        summary[direction] = {"window_over_causal": value, "rounds": per_round}
    return {
        "shape": {"batch": batch, "heads": heads, "tokens": tokens, "head_dim": head_dim, "window": WINDOW_KEYS},
        "rows": rows,
        "summary": summary,
        "seconds": time.perf_counter() - started,
    }


def print_window(result: dict[str, Any] | None, out: Any = None) -> None:
    out = out or sys.stdout  # bound at call time: pytest and callers may swap sys.stdout
    if not result or not result.get("rows"):
        return
    s = result["shape"]
    print(
        f"\nSliding window: B {s['batch']}, H {s['heads']}, {s['tokens']} tokens, D {s['head_dim']}; a causal window "
        f"of {s['window']} keys against dense causal, TFLOP/s on visible pairs (median over rounds; "
        f"{result['seconds']:.0f} s)",
        file=out,
    )
    for r in result["rows"]:
        value = f"{r['tflops']:8.1f}" if r["tflops"] else f"{'-':>8}"
        print(f"  {r['mask']:<8} {r['direction']:<8} {value}", file=out)
    for direction, d in result["summary"].items():
        ratio = f"{d['window_over_causal']:.2f}x" if d["window_over_causal"] else "-"
        print(f"  {direction}: window / causal rate = {ratio}", file=out)
