# bench/deterministic.py: the deterministic-mode rows, `python -m flashsdpa bench --deterministic`
# (part of the full run; issue 13's bar "deterministic mode within 15% of the default mode"). Our
# backward (flashsdpa.attention, the direct API) timed under torch.use_deterministic_algorithms(True)
# against the same call in the default mode, on the same inputs, the two modes alternating in every
# round (rotated order, cases spread over the round: rounds.py); the bar is the worst case's median of
# per-round time ratios (deterministic / default). Round 0 also proves the mode's point: two
# deterministic backwards of the same inputs must be bitwise equal (dq, dk, dv), else the row is
# marked WRONG and the benchmark exits 1, as a wrong kernel does in the sweep. A case the
# deterministic mode does not serve (the table sends no such call to a nondeterministic kernel: it
# raises, as PyTorch does for an op without a deterministic kernel) reads "unsupported" and is left
# out of the bar. Budget on an H200: a few seconds a round.
"""Deterministic-mode rows: our backward under torch.use_deterministic_algorithms(True) / default."""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from flashsdpa.bench import problems
from flashsdpa.bench.problems import DTYPES, Problem, api
from flashsdpa.bench.rounds import median, ratio_over_rounds, rotated, spread
from flashsdpa.bench.timing import UNSUPPORTED, time_cuda_ms, unsupported_status

DET_REPS, DET_WARMUP = 10, 3
MODES = ("default", "deterministic")


@dataclass(frozen=True)
class DetCase:
    """One backward: (B, Hq, Hkv, S, D), causal or not; FLOPs as FlashAttention counts them."""

    batch: int
    heads_q: int
    heads_kv: int
    seqlen: int
    head_dim: int
    causal: bool

    @property
    def label(self) -> str:
        gqa = f" GQA {self.heads_q}/{self.heads_kv}" if self.heads_q != self.heads_kv else ""
        s = f"{self.seqlen // 1024}k" if self.seqlen % 1024 == 0 else str(self.seqlen)
        return f"D{self.head_dim} S {s}{' causal' if self.causal else ''}{gqa} B{self.batch}"

    def flops(self) -> float:
        return Problem(self.head_dim, self.seqlen, self.causal, self.batch, self.heads_q).flops("bwd")


# The standard sweep's shapes (B * S = 16k tokens, H * D = 2048) at the head dims the sm90 family
# runs deterministically (the d256 tile adds dQ by unordered float reductions: no deterministic
# mode there, so the table turns such calls away), plus the Llama train shape (GQA 16/4, one 8k
# sequence), where a key block meets its predecessors once per head of the group; and causal 1k, whose
# launch order is the wave groups (bwd_kernel_sm90.cuh's BwdGridOrder: a wave holds all of a head's
# key blocks, whose dQ turns then chain).
CASES: tuple[DetCase, ...] = (
    *(DetCase(16384 // s, 2048 // d, 2048 // d, s, d, c) for d in (64, 128) for s in (2048, 8192) for c in (False, True)),
    *(DetCase(16, 2048 // d, 2048 // d, 1024, d, True) for d in (64, 128)),
    DetCase(1, 16, 4, 8192, 128, True),
)


@contextlib.contextmanager
def _mode(mode: str) -> Iterator[None]:
    """torch.use_deterministic_algorithms(True) for "deterministic", the process's setting restored after."""
    was, warn_only = torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()
    torch.use_deterministic_algorithms(mode == "deterministic")
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(was, warn_only=warn_only)


def _inputs(case: DetCase, dtype: torch.dtype) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    def make(heads: int) -> Tensor:  # (B, H, S, D) views of (B, S, H, D) memory, as models pass them
        return torch.randn(case.batch, case.seqlen, heads, case.head_dim, device=problems.DEVICE, dtype=dtype).transpose(1, 2)

    q, k, v = make(case.heads_q).requires_grad_(), make(case.heads_kv).requires_grad_(), make(case.heads_kv).requires_grad_()
    return q, k, v, make(case.heads_q)


def _backward(case: DetCase, q: Tensor, k: Tensor, v: Tensor, dout: Tensor) -> Callable[[], tuple[Tensor, ...]]:
    """One timed backward: the gradients of one forward's output (the forward runs once, outside)."""
    out = api().attention(q, k, v, causal=case.causal)
    return lambda: torch.autograd.grad(out, (q, k, v), dout, retain_graph=True)


def _bitwise(case: DetCase, q: Tensor, k: Tensor, v: Tensor, dout: Tensor) -> bool:
    """Two deterministic backwards of the same inputs (each with its own forward) agree bit for bit."""
    with _mode("deterministic"):
        first = _backward(case, q, k, v, dout)()
        second = _backward(case, q, k, v, dout)()
    return all(torch.equal(a, b) for a, b in zip(first, second))


def run_deterministic(args: argparse.Namespace) -> dict[str, Any]:
    """Per case and round: the backward's ms in each mode; per case the median of the per-round
    ratios deterministic / default and round 0's bitwise verdict."""
    started = time.perf_counter()
    dtype = DTYPES[args.dtype]
    rounds = max(1, args.rounds)
    ms: dict[tuple[DetCase, str], list[float | None]] = {(c, m): [] for c in CASES for m in MODES}
    status: dict[DetCase, str] = {c: "ok" for c in CASES}
    bitwise: dict[DetCase, bool | None] = {c: None for c in CASES}
    for round_index in range(rounds):
        for case in spread(CASES, round_index, rounds):
            torch.manual_seed(round_index * 1000 + CASES.index(case))
            q, k, v, dout = _inputs(case, dtype)
            for mode in rotated(MODES, round_index + CASES.index(case)):
                value: float | None = None
                if status[case] == "ok":
                    try:
                        with _mode(mode):
                            value = time_cuda_ms([_backward(case, q, k, v, dout)], warmup=DET_WARMUP, reps=DET_REPS)
                    except torch.OutOfMemoryError:
                        torch.cuda.empty_cache()
                        status[case] = "OOM"
                    except UNSUPPORTED as exc:
                        status[case] = unsupported_status(exc)
                        print(f"bench: deterministic {case.label} {mode}: {status[case]}", file=sys.stderr)
                ms[(case, mode)].append(value)
            if round_index == 0 and status[case] == "ok":
                bitwise[case] = _bitwise(case, q, k, v, dout)
                if not bitwise[case]:
                    status[case] = "WRONG: two deterministic backwards differ"
            del q, k, v, dout
        torch.cuda.empty_cache()
    rows = []
    for case in CASES:
        ratio, per_round = ratio_over_rounds(ms[(case, "deterministic")], ms[(case, "default")])
        default_ms, det_ms = median(ms[(case, "default")]), median(ms[(case, "deterministic")])
        rows.append({
            "case": case.label, "batch": case.batch, "heads_q": case.heads_q, "heads_kv": case.heads_kv,
            "seqlen": case.seqlen, "head_dim": case.head_dim, "causal": case.causal,
            "default_ms": default_ms, "deterministic_ms": det_ms,
            "default_tflops": case.flops() / (default_ms * 1e9) if default_ms else None,
            "deterministic_tflops": case.flops() / (det_ms * 1e9) if det_ms else None,
            "round_default_ms": ms[(case, "default")], "round_deterministic_ms": ms[(case, "deterministic")],
            "ratio": ratio if status[case] == "ok" else None, "round_ratios": per_round,
            "bitwise": bitwise[case], "status": status[case],
        })  # fmt: skip
    return {"rows": rows, "seconds": time.perf_counter() - started}


def print_deterministic(result: dict[str, Any] | None, out: Any = None) -> None:
    out = out or sys.stdout  # bound at call time: pytest and callers may swap sys.stdout
    if not result or not result.get("rows"):
        return
    print(
        f"\nDeterministic mode: our backward under torch.use_deterministic_algorithms(True) against the default "
        f"mode, ms (TFLOP/s), median over rounds; ratio = median of per-round time ratios ({result['seconds']:.0f} s)",
        file=out,
    )
    for r in result["rows"]:
        if r["status"] != "ok":
            print(f"  {r['case']:<28} {r['status']}", file=out)
            continue
        cells = [f"{r[f'{m}_ms']:8.3f} ({r[f'{m}_tflops']:5.1f})" if r[f"{m}_ms"] else f"{'-':>16}" for m in MODES]
        ratio = f"{r['ratio']:.3f}x" if r["ratio"] else "-"
        print(f"  {r['case']:<28} default {cells[0]}  deterministic {cells[1]}  {ratio}  bitwise {r['bitwise']}", file=out)


def wrong_rows(result: dict[str, Any] | None) -> list[dict[str, Any]]:
    """Rows whose deterministic backwards differed bit for bit (the benchmark's exit code 1)."""
    return [r for r in (result or {}).get("rows", []) if r["status"].startswith("WRONG")]
