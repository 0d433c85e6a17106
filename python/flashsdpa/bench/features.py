# bench/features.py: issue 14's feature rows, `python -m flashsdpa bench --features` (part of the
# full run). Until session 54 these bars were measured by dev scripts only (scripts/dev/
# dropout_timing.py, features_timing.py); the issue wants them in the benchmark.
# - Dropout 0.1 at S 4k (B 4, H 16, D 128), through SDPA as a model trains with attention dropout:
#   ours inside enable() (checked served) against PyTorch's backends that take dropout (its flash
#   kernel, cuDNN, efficient) and its default choice, forward and backward (the backward timed alone
#   on a retained graph: the same dropout mask replayed). TFLOP/s dense (forward 4 B H S^2 D,
#   backward 2.5x). Bars: >= 560 / 450 TFLOP/s, and ours >= the best of PyTorch's.
# - Softcap 50 at S 8k (B 2, H 16, D 128), through flashsdpa.attention (SDPA has no softcap
#   argument): with and without the softcap on the same inputs, both ours. Bar: the softcap's rate
#   within 10% of no softcap's (ratio >= 0.9), forward and backward.
# Interleaved rounds (the backends' order rotated per round); ratios are medians of per-round
# ratios; CUDA events, median of the reps. Budget on an H200: a few seconds a round.
"""Issue 14's feature rows: dropout through SDPA against PyTorch's, softcap against no softcap."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from flashsdpa.bench import problems
from flashsdpa.bench.masked import sdpa_backend
from flashsdpa.bench.problems import DTYPES, api
from flashsdpa.bench.rounds import median, ratio_over_rounds
from flashsdpa.bench.timing import time_cuda_ms

FEATURE_REPS, FEATURE_WARMUP = 10, 3
DROPOUT_P = 0.1
DROPOUT_SHAPE = (4, 16, 4096, 128)  # (batch, heads, seqlen, head dim)
SOFTCAP = 50.0
SOFTCAP_SHAPE = (2, 16, 8192, 128)
DROPOUT_NAME = "dropout 0.1 S 4k"
SOFTCAP_NAME = "softcap 50 S 8k"
# Dropout backends: ours is SDPA inside enable(); PyTorch's are its kernels that take dropout,
# forced, and its default choice.
DROPOUT_BACKENDS = ("ours", "torch-flash", "torch-cudnn", "torch-efficient", "torch-default")
DROPOUT_THEIRS = DROPOUT_BACKENDS[1:]
SOFTCAP_VARIANTS = ("softcap", "plain")
DIRECTIONS = ("fwd", "bwd")


def _inputs(shape: tuple[int, int, int, int], dtype: torch.dtype, seed: int) -> tuple[list[torch.Tensor], torch.Tensor]:
    """(q, k, v that require grad, dO) with fresh values per round."""
    gen = torch.Generator(device=problems.DEVICE).manual_seed(seed)
    q, k, v, dout = (torch.randn(*shape, generator=gen, device=problems.DEVICE).to(dtype) for _ in range(4))
    return [t.requires_grad_() for t in (q, k, v)], dout


def _time_pair(forward: Callable[[], torch.Tensor], qkv: list[torch.Tensor], dout: torch.Tensor,
               must_serve: bool) -> tuple[float, float]:  # fmt: skip
    """(forward ms without grad, backward ms on a retained graph) of one call form; with
    ``must_serve``, raises unless our kernels ran it (never a PyTorch time under our label)."""
    served = problems.served_total()
    with torch.no_grad():
        fwd = time_cuda_ms([forward], warmup=FEATURE_WARMUP, reps=FEATURE_REPS)
    out = forward()
    bwd = time_cuda_ms([lambda: torch.autograd.grad(out, qkv, dout, retain_graph=True)],
                       warmup=FEATURE_WARMUP, reps=FEATURE_REPS)  # fmt: skip
    if must_serve and problems.served_total() == served:
        raise RuntimeError("not served: our kernels ran none of these calls (see flashsdpa.explain)")
    return fwd, bwd


def _rates(label: str, flops: float, forward: Callable[[], torch.Tensor], qkv: list[torch.Tensor],
           dout: torch.Tensor, must_serve: bool) -> tuple[float | None, float | None]:  # fmt: skip
    """(forward, backward) TFLOP/s of one column, or n/a for one that refuses or raises (said on stderr)."""
    try:
        fwd, bwd = _time_pair(forward, qkv, dout, must_serve)
        return flops / fwd * 1e-9, 2.5 * flops / bwd * 1e-9
    except Exception as exc:  # noqa: BLE001 - a backend that refuses the case scores n/a
        print(f"bench: features {label}: {type(exc).__name__}: {str(exc)[:200]}", file=sys.stderr)
        return None, None


def _record(rates: dict[tuple[str, str], list[float | None]], column: str, values: tuple[float | None, ...]) -> None:
    for direction, value in zip(DIRECTIONS, values):
        rates.setdefault((column, direction), []).append(value)


def _dense_flops(shape: tuple[int, int, int, int]) -> float:
    b, h, s, d = shape
    return 4.0 * b * h * s * s * d


def _dropout_round(dtype: torch.dtype, rnd: int, rates: dict[tuple[str, str], list[float | None]]) -> None:
    qkv, dout = _inputs(DROPOUT_SHAPE, dtype, seed=5000 + rnd)
    q, k, v = qkv
    order = DROPOUT_BACKENDS[rnd % len(DROPOUT_BACKENDS):] + DROPOUT_BACKENDS[: rnd % len(DROPOUT_BACKENDS)]
    for backend in order:
        with sdpa_backend(backend):
            values = _rates(f"{DROPOUT_NAME} {backend}", _dense_flops(DROPOUT_SHAPE),
                            lambda: F.scaled_dot_product_attention(q, k, v, dropout_p=DROPOUT_P), qkv, dout,
                            must_serve=backend == "ours")  # fmt: skip
        _record(rates, backend, values)


def _softcap_round(dtype: torch.dtype, rnd: int, rates: dict[tuple[str, str], list[float | None]]) -> None:
    qkv, dout = _inputs(SOFTCAP_SHAPE, dtype, seed=6000 + rnd)
    q, k, v = qkv
    fs = api()
    for variant in SOFTCAP_VARIANTS if rnd % 2 == 0 else tuple(reversed(SOFTCAP_VARIANTS)):
        softcap = SOFTCAP if variant == "softcap" else 0.0
        values = _rates(f"{SOFTCAP_NAME} {variant}", _dense_flops(SOFTCAP_SHAPE),
                        lambda: fs.attention(q, k, v, softcap=softcap), qkv, dout, must_serve=True)  # fmt: skip
        _record(rates, variant, values)


@dataclass(frozen=True)
class _Table:
    case: str
    columns: tuple[str, ...]
    rates: dict[tuple[str, str], list[float | None]]


def run_features(args: argparse.Namespace) -> dict[str, Any]:
    """Per case, column and direction: TFLOP/s per round and their median; per case and direction,
    the bar's ratio (dropout: ours over the best of PyTorch's; softcap: softcap over plain) as the
    median of per-round ratios."""
    started = time.perf_counter()
    dtype = DTYPES[args.dtype]
    dropout: dict[tuple[str, str], list[float | None]] = {}
    softcap: dict[tuple[str, str], list[float | None]] = {}
    for rnd in range(max(1, args.rounds)):
        _dropout_round(dtype, rnd, dropout)
        _softcap_round(dtype, rnd, softcap)
    tables = (_Table(DROPOUT_NAME, DROPOUT_BACKENDS, dropout), _Table(SOFTCAP_NAME, SOFTCAP_VARIANTS, softcap))
    rows = [{"case": t.case, "column": c, "direction": d, "tflops": median(t.rates.get((c, d), [])),
             "round_tflops": t.rates.get((c, d), [])}
            for t in tables for d in DIRECTIONS for c in t.columns]  # fmt: skip
    summary = []
    for direction in DIRECTIONS:
        ours = dropout.get(("ours", direction), [])
        best = [max((v for v in vals if v is not None), default=None)
                for vals in zip(*(dropout.get((b, direction), []) for b in DROPOUT_THEIRS))]  # fmt: skip
        value, per_round = ratio_over_rounds(ours, best)
        summary.append({"case": DROPOUT_NAME, "direction": direction, "ours_tflops": median(ours),
                        "ratio_name": "ours / best PyTorch", "ratio": value, "rounds": per_round})  # fmt: skip
    for direction in DIRECTIONS:
        capped = softcap.get(("softcap", direction), [])
        value, per_round = ratio_over_rounds(capped, softcap.get(("plain", direction), []))
        summary.append({"case": SOFTCAP_NAME, "direction": direction, "ours_tflops": median(capped),
                        "ratio_name": "softcap / plain", "ratio": value, "rounds": per_round})  # fmt: skip
    return {"rows": rows, "summary": summary, "seconds": time.perf_counter() - started}


def print_features(result: dict[str, Any] | None, out: Any = None) -> None:
    out = out or sys.stdout  # bound at call time: pytest and callers may swap sys.stdout
    if not result or not result.get("rows"):
        return
    by_key = {(r["case"], r["column"], r["direction"]): r["tflops"] for r in result["rows"]}
    ratio = {(s["case"], s["direction"]): s for s in result["summary"]}
    print(f"\nFeatures (issue 14): TFLOP/s with dense FLOPs, backward alone (median over rounds; "
          f"{result['seconds']:.0f} s)", file=out)  # fmt: skip
    for case, columns in ((DROPOUT_NAME, DROPOUT_BACKENDS), (SOFTCAP_NAME, SOFTCAP_VARIANTS)):
        shape = DROPOUT_SHAPE if case == DROPOUT_NAME else SOFTCAP_SHAPE
        name = ratio[(case, DIRECTIONS[0])]["ratio_name"]
        print(f"  {case} (B {shape[0]}, H {shape[1]}, D {shape[3]})", file=out)
        print(f"    {'dir':<4} " + " ".join(f"{c:>16}" for c in columns) + f"   {name}", file=out)
        for direction in DIRECTIONS:
            cells = " ".join(f"{by_key[(case, c, direction)]:16.1f}" if by_key.get((case, c, direction))
                             else f"{'n/a':>16}" for c in columns)  # fmt: skip
            r = ratio[(case, direction)]["ratio"]
            print(f"    {direction:<4} {cells}   {f'{r:.3f}' if r else '-'}", file=out)
