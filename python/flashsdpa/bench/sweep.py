# bench/sweep.py: the standard sweep of `python -m flashsdpa bench`, in interleaved rounds.
#
# The sweep's problems, one measured configuration (timed, checked, and proved to have run the
# backend it is labelled with), the progress line, and the rounds: each round times every backend
# of every configuration once (backends rotated from round to round, and the configurations by a
# round's share of the list: rounds.spread), inputs regenerated from a
# per-problem seed so every round sees the same data, the correctness spot check in round 0 only.
"""The benchmark's sweep on a CUDA GPU."""

from __future__ import annotations

import argparse
import sys
import traceback
import zlib
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from flashsdpa.bench.check import Reference, check, spot_reference
from flashsdpa.bench.problems import THEIRS, Problem, Result, served_total
from flashsdpa.bench.rounds import Key, merge, rotated, spread
from flashsdpa.bench.timing import (
    UNSUPPORTED,
    backend_context,
    forward,
    input_sets,
    sets_needed,
    time_cuda_ms,
    unsupported_status,
)


def _forward_call(backend: str, s: tuple[Tensor, ...], causal: bool) -> Callable[[], Any]:
    """One timed forward: the backend's call on one input set (q, k, v, dout)."""
    q, k, v = s[0], s[1], s[2]
    return lambda: forward(backend, q, k, v, causal)


def _backward_call(out: Tensor, s: tuple[Tensor, ...]) -> Callable[[], Any]:
    """One timed backward: the gradients of one forward's output for its set's (q, k, v, dout)."""
    leaves, dout = s[:3], s[3]
    return lambda: torch.autograd.grad(out, leaves, dout, retain_graph=True)


def _measure(
    backend: str,
    problem: Problem,
    direction: str,
    sets: list[tuple[Tensor, ...]],
    reference: Reference | None,
    args: argparse.Namespace,
) -> Result:
    result = Result(direction, problem.head_dim, problem.seqlen, problem.causal, problem.batch, problem.heads, backend)
    served_before = served_total()
    calls: list[Callable[[], Any]]
    try:
        with backend_context(backend):
            if direction == "fwd":
                with torch.no_grad():
                    calls = [_forward_call(backend, s, problem.causal) for s in sets]
                    checked = [calls[0]()]
                    result.ms = time_cuda_ms(calls, warmup=args.warmup, reps=args.reps)
            else:
                outs = [forward(backend, s[0], s[1], s[2], problem.causal) for s in sets]
                calls = [_backward_call(o, s) for o, s in zip(outs, sets)]
                checked = list(calls[0]())
                result.ms = time_cuda_ms(calls, warmup=args.warmup, reps=args.reps)
                del outs, calls
    except torch.OutOfMemoryError:
        torch.cuda.empty_cache()
        result.status = "OOM"
        return result
    except UNSUPPORTED as exc:
        result.status = unsupported_status(exc)
        return result
    except Exception as exc:  # noqa: BLE001 - one backend's surprise must not end the run
        first = str(exc).strip().splitlines()[0][:100] if str(exc).strip() else ""
        result.status = f"error: {type(exc).__name__}: {first}"
        traceback.print_exc(limit=3, file=sys.stderr)
        return result

    result.tflops = problem.flops(direction) / (result.ms * 1e-3) / 1e12
    served = served_total() > served_before
    if backend == "flashsdpa-sdpa" and not served:
        result.status = "not served: PyTorch's kernel ran (see flashsdpa.explain)"
    elif backend in THEIRS and served:
        result.status = "not served: flashsdpa's kernels took PyTorch's call"
    if reference is not None:
        result.max_err, result.err_ratio = check(reference, checked)
        if result.err_ratio > 1.0 and result.status == "ok":
            result.status = "WRONG"
    return result


class _Progress:
    """tqdm when installed, else one self-rewriting line on stderr."""

    def __init__(self, total: int) -> None:
        self.total, self.done = total, 0
        try:
            from tqdm import tqdm

            self._bar: Any = tqdm(total=total, unit="run", dynamic_ncols=True, file=sys.stderr)
        except ImportError:
            self._bar = None

    def step(self, text: str) -> None:
        self.done += 1
        if self._bar is not None:
            self._bar.set_description_str(text)
            self._bar.update(1)
            return
        width = 30
        filled = width * self.done // max(self.total, 1)
        sys.stderr.write(f"\r[{'#' * filled}{'.' * (width - filled)}] {self.done}/{self.total} {text:<48}")
        sys.stderr.flush()

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
        else:
            sys.stderr.write("\n")


def _problems(args: argparse.Namespace) -> list[Problem]:
    causals = {"both": (False, True), "true": (True,), "false": (False,)}[args.causal]
    problems = []
    for d in args.head_dims:
        if args.hidden % d:
            raise SystemExit(f"bench: --hidden {args.hidden} is not a multiple of head dim {d}")
        for s in args.seqlens:
            for causal in causals:
                problems.append(Problem(d, s, causal, max(1, args.tokens // s), args.hidden // d))
    return problems


def _seed(problem: Problem) -> int:
    """A per-problem seed: every round draws the same inputs, so round 0's check covers them all."""
    return zlib.crc32(repr(problem).encode())


def sweep(
    args: argparse.Namespace, backends: list[str], dtype: torch.dtype, directions: tuple[str, ...]
) -> list[Result]:
    """Every backend of every configuration, once per round, for ``args.rounds`` rounds; one merged
    row per (direction, configuration, backend) carrying each round's values."""
    problems = _problems(args)
    per_round: dict[tuple[Key, str], list[Result]] = {}
    progress = _Progress(args.rounds * len(problems) * len(directions) * len(backends))
    try:
        for round_index in range(args.rounds):
            order = rotated(backends, round_index)
            for problem in spread(problems, round_index, args.rounds):
                torch.manual_seed(_seed(problem))
                sets = input_sets(problem, dtype, args.layout, sets_needed(problem, dtype))
                for direction in directions:
                    check_now = round_index == 0 and not args.no_check
                    reference = spot_reference(problem, sets[0], direction) if check_now else None
                    for backend in order:
                        key = ((direction, problem.head_dim, problem.seqlen, problem.causal), backend)
                        progress.step(f"r{round_index + 1} {direction} {problem.label} {backend}")
                        earlier = per_round.setdefault(key, [])
                        if earlier and (earlier[0].status.startswith("unsupported") or earlier[0].status == "OOM"):
                            # It did not run in round 0; it will not now: keep the status, skip the wait.
                            earlier.append(earlier[0])
                            continue
                        earlier.append(_measure(backend, problem, direction, sets, reference, args))
                    del reference
                del sets
                torch.cuda.empty_cache()
    finally:
        progress.close()
    return merge(per_round)
