# bench/timing.py: running one backend and timing it.
#
# The context each backend runs in (flashsdpa.enable(), sdpa_kernel(...)), one forward call per
# backend, CUDA-event timing of interchangeable calls, the input sets rotated so that no timed
# call finds its inputs in L2, and what a backend raises for a configuration it does not take.
# FlashAttention-4 is called through flash_attn.cute where that imports (it takes (B, S, H, D)).
"""Running one backend and timing it with CUDA events."""

from __future__ import annotations

import contextlib
import functools
import math
import statistics
import warnings
from collections.abc import Callable, Iterator, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.nn.attention import sdpa_kernel

from flashsdpa.bench import problems
from flashsdpa.bench.problems import FA4, PYTORCH, Problem, api


@contextlib.contextmanager
def backend_context(backend: str) -> Iterator[None]:
    with warnings.catch_warnings():
        # PyTorch warns at length about every backend it rejects; the status column says it once.
        warnings.simplefilter("ignore")
        if backend == "flashsdpa-sdpa":
            with api().enable():
                yield
        elif backend in PYTORCH:
            with sdpa_kernel([PYTORCH[backend]]):
                yield
        else:
            yield


@functools.cache
def _fa4_import() -> tuple[Callable[..., object] | None, str | None]:
    """(flash_attn.cute.flash_attn_func, None), or (None, why it does not import)."""
    try:
        from flash_attn.cute import flash_attn_func  # type: ignore[import-not-found]
    except Exception as exc:  # noqa: BLE001 - the CuTe DSL fails in many ways on a machine it does not fit
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        return None, f"{type(exc).__name__}: {first[:120]}"
    return flash_attn_func, None


def fa4_unavailable() -> str | None:
    """None where FlashAttention-4 (flash_attn.cute) imports, else why not."""
    return _fa4_import()[1]


def forward(backend: str, q: Tensor, k: Tensor, v: Tensor, causal: bool) -> Tensor:
    if backend == "flashsdpa":
        return api().attention(q, k, v, causal=causal)
    if backend == FA4:
        fn = _fa4_import()[0]
        if fn is None:
            raise NotImplementedError(f"FA4 does not import: {fa4_unavailable()}")
        # FA4 takes (B, S, H, D); the sweep's (B, H, S, D) views are transposes of exactly that.
        out = fn(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), causal=causal)
        out = out[0] if isinstance(out, tuple) else out
        return out.transpose(1, 2)  # type: ignore[union-attr]
    return F.scaled_dot_product_attention(q, k, v, is_causal=causal)


def time_cuda_ms(calls: Sequence[Callable[[], object]], *, warmup: int, reps: int) -> float:
    """Median time of one call in milliseconds, by CUDA events around each call.

    ``calls`` are interchangeable (one per input set); cycling through them keeps a set that fits
    in L2 from being measured warm.
    """
    for i in range(warmup):
        calls[i % len(calls)]()
    torch.cuda.synchronize()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for i in range(reps):
        starts[i].record()
        calls[i % len(calls)]()
        ends[i].record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in zip(starts, ends))


def graph_us(calls: Sequence[Callable[[], object]], per_graph: int = 20, replays: int = 5) -> float:
    """GPU µs per call with the host out of the way: ``per_graph`` calls (cycling through the
    interchangeable ``calls``) captured in one CUDA graph after a warm-up on a side stream (workspaces,
    plans, autotuning outside the capture), replayed between CUDA events; median over ``replays``.
    Raises what capture raises (a backend that cannot be captured)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for i in range(3):
            calls[i % len(calls)]()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for i in range(per_graph):
            calls[i % len(calls)]()
    graph.replay()
    torch.cuda.synchronize()
    samples = []
    for _ in range(replays):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        torch.cuda.synchronize()
        samples.append(start.elapsed_time(end) * 1e3 / per_graph)
    return statistics.median(samples)


def input_sets(problem: Problem, dtype: torch.dtype, layout: str, count: int) -> list[tuple[Tensor, ...]]:
    """``count`` sets of (q, k, v, dout), (B, H, S, D) views; "bshd" = transposed, as models pass them."""
    b, h, s, d = problem.batch, problem.heads, problem.seqlen, problem.head_dim

    def make() -> Tensor:
        if layout == "bshd":
            return torch.randn(b, s, h, d, device=problems.DEVICE, dtype=dtype).transpose(1, 2)
        return torch.randn(b, h, s, d, device=problems.DEVICE, dtype=dtype)

    sets: list[tuple[Tensor, ...]] = []
    for _ in range(count):
        q, k, v, dout = make(), make(), make(), make()
        sets.append((q.requires_grad_(), k.requires_grad_(), v.requires_grad_(), dout))
    return sets


def sets_needed(problem: Problem, dtype: torch.dtype) -> int:
    """Input sets to rotate through so that no timed call finds its inputs in L2."""
    set_bytes = (
        4
        * problem.batch
        * problem.heads
        * problem.seqlen
        * problem.head_dim
        * torch.empty((), dtype=dtype).element_size()
    )
    return sets_for_bytes(set_bytes)


def sets_for_bytes(set_bytes: int) -> int:
    """How many sets of ``set_bytes`` each to rotate through so that none is still in L2 when its
    turn comes again (at least twice L2 in flight; 8 at most)."""
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    l2 = getattr(props, "L2_cache_size", 50 << 20)
    return 1 if set_bytes >= 2 * l2 else min(8, math.ceil(2 * l2 / set_bytes) + 1)


# What a backend raises for a configuration it does not take: PyTorch's "No available kernel"
# (RuntimeError), flashsdpa's argument checks (TypeError / ValueError, e.g. a head dim this build
# did not compile).
UNSUPPORTED = (RuntimeError, TypeError, ValueError, NotImplementedError)


def unsupported_status(exc: BaseException) -> str:
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return f"unsupported: {first[:100]}"
