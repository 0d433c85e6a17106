# bench.py: `python -m flashsdpa bench`, flashsdpa's kernels against PyTorch's SDPA backends, in one
# process, on the standard sweep; plus peak extra memory at S = 16k, the shim's per-call overhead,
# and a correctness spot check of every timed configuration. Without a CUDA GPU it runs a self-check
# of the shim on the CPU reference path instead.
"""Benchmark flashsdpa against PyTorch's SDPA backends.

The standard sweep (FlashAttention's): B * S = 16k tokens, H * D = 2048, D in {64, 128, 256},
S in {512, 1k, 2k, 4k, 8k, 16k}, causal and not, forward and backward, bf16. Backends, side by side:

  flashsdpa        flashsdpa.attention (the direct API)
  flashsdpa-sdpa   F.scaled_dot_product_attention inside flashsdpa.enable() (the shim's path)
  torch-flash      PyTorch's flash backend   (sdpa_kernel(FLASH_ATTENTION))
  torch-cudnn      PyTorch's cuDNN backend   (sdpa_kernel(CUDNN_ATTENTION))
  torch-efficient  PyTorch's efficient backend (sdpa_kernel(EFFICIENT_ATTENTION))

FLOPs as FlashAttention counts them: forward 4 * B * H * Sq * Sk * D, halved when causal;
backward 2.5 x forward. Times are CUDA-event medians after warm-up. Every timed configuration is
spot-checked against a float32 reference on one (batch, head) slice, with the project's rule
(error <= 2 x that of PyTorch's math SDPA in the input dtype + 1e-5), so a fast but wrong kernel
is marked WRONG instead of winning.

Writes results.csv, results.json and tflops.png (if matplotlib is installed) to --out.
Exit codes: 0 ran and every check of ours passed; 1 one of our kernels failed its correctness check,
or a row did not run the backend it is labelled with (or the CPU self-check failed);
2 bad arguments; 3 a CUDA GPU is present but flashsdpa's kernels cannot run on it (only PyTorch's
backends were measured).
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import datetime
import json
import math
import statistics
import sys
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.nn.attention import SDPBackend, sdpa_kernel

EXIT_OK, EXIT_WRONG, EXIT_USAGE, EXIT_NO_KERNELS = 0, 1, 2, 3

DTYPES: dict[str, torch.dtype] = {
    "bf16": torch.bfloat16,
    "fp16": torch.float16,
    "fp32": torch.float32,
    "fp64": torch.float64,
}

OURS = ("flashsdpa", "flashsdpa-sdpa")
PYTORCH = {
    "torch-flash": SDPBackend.FLASH_ATTENTION,
    "torch-cudnn": SDPBackend.CUDNN_ATTENTION,
    "torch-efficient": SDPBackend.EFFICIENT_ATTENTION,
}
BACKENDS = (*OURS, *PYTORCH)

STANDARD_HEAD_DIMS = (64, 128, 256)
STANDARD_SEQLENS = (512, 1024, 2048, 4096, 8192, 16384)
QUICK_HEAD_DIMS = (128,)
QUICK_SEQLENS = (2048, 8192)
MEMORY_SEQLEN = 16384
RULE_FACTOR, RULE_ATOL = 2.0, 1e-5


def parse_count(text: str) -> int:
    """'8192', '8k' (8192) or '1M' (1048576): sizes on the command line."""
    scale = {"k": 1024, "m": 1024 * 1024}.get(text[-1:].lower(), 1)
    digits = text[:-1] if scale > 1 else text
    try:
        value = int(digits) * scale
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (examples: 512, 8k, 1M)") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"sizes are non-negative, got {text!r}")
    return value


@dataclass(frozen=True)
class Problem:
    """One sweep point: the batch and heads follow from the token and hidden budgets."""

    head_dim: int
    seqlen: int
    causal: bool
    batch: int
    heads: int

    def flops(self, direction: str) -> float:
        fwd = 4.0 * self.batch * self.heads * self.seqlen * self.seqlen * self.head_dim
        fwd /= 2 if self.causal else 1
        return fwd * (2.5 if direction == "bwd" else 1.0)

    @property
    def label(self) -> str:
        return f"D={self.head_dim} S={self.seqlen} {'causal' if self.causal else 'non-causal'}"


@dataclass
class Result:
    direction: str
    head_dim: int
    seqlen: int
    causal: bool
    batch: int
    heads: int
    backend: str
    ms: float | None = None
    tflops: float | None = None
    max_err: float | None = None  # vs the float32 reference, worst over out (fwd) or dq, dk, dv (bwd)
    err_ratio: float | None = None  # worst error / rule bound: <= 1 passes
    status: str = "ok"  # ok | WRONG | unsupported: ... | OOM | not served: ...


# ---- access to flashsdpa (imported lazily: `bench --help` must not need the compiled module) ------


def _flashsdpa() -> Any:
    import flashsdpa

    return flashsdpa


def _served_total() -> int:
    """How many calls flashsdpa's kernels have served so far (routers and flashsdpa's own ops).

    Proves that a row labelled flashsdpa-sdpa really ran our kernels and that rows labelled
    torch-* did not.
    """
    return int(_flashsdpa().stats()["served"])


# ---- timing ---------------------------------------------------------------------------------------


@contextlib.contextmanager
def _backend_context(backend: str) -> Iterator[None]:
    with warnings.catch_warnings():
        # PyTorch warns at length about every backend it rejects; the status column says it once.
        warnings.simplefilter("ignore")
        if backend == "flashsdpa-sdpa":
            with _flashsdpa().enable():
                yield
        elif backend in PYTORCH:
            with sdpa_kernel([PYTORCH[backend]]):
                yield
        else:
            yield


def _forward(backend: str, q: Tensor, k: Tensor, v: Tensor, causal: bool) -> Tensor:
    if backend == "flashsdpa":
        return _flashsdpa().attention(q, k, v, causal=causal)
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


def _input_sets(problem: Problem, dtype: torch.dtype, layout: str, count: int) -> list[tuple[Tensor, ...]]:
    """``count`` sets of (q, k, v, dout), (B, H, S, D) views; "bshd" = transposed, as models pass them."""
    b, h, s, d = problem.batch, problem.heads, problem.seqlen, problem.head_dim

    def make() -> Tensor:
        if layout == "bshd":
            return torch.randn(b, s, h, d, device="cuda", dtype=dtype).transpose(1, 2)
        return torch.randn(b, h, s, d, device="cuda", dtype=dtype)

    sets = []
    for _ in range(count):
        q, k, v, dout = make(), make(), make(), make()
        sets.append((q.requires_grad_(), k.requires_grad_(), v.requires_grad_(), dout))
    return sets


def _sets_needed(problem: Problem, dtype: torch.dtype) -> int:
    """Input sets to rotate through so that no timed call finds its inputs in L2."""
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    l2 = getattr(props, "L2_cache_size", 50 << 20)
    set_bytes = (
        4
        * problem.batch
        * problem.heads
        * problem.seqlen
        * problem.head_dim
        * torch.empty((), dtype=dtype).element_size()
    )
    return 1 if set_bytes >= 2 * l2 else min(8, math.ceil(2 * l2 / set_bytes) + 1)


# ---- correctness spot check -----------------------------------------------------------------------


@contextlib.contextmanager
def _reduced_precision_math() -> Iterator[None]:
    before = torch.backends.cuda.fp16_bf16_reduction_math_sdp_allowed()
    torch.backends.cuda.allow_fp16_bf16_reduction_math_sdp(True)
    try:
        yield
    finally:
        torch.backends.cuda.allow_fp16_bf16_reduction_math_sdp(before)


@dataclass
class _Reference:
    """float32 reference and PyTorch's math SDPA in the input dtype, on one (batch, head) slice."""

    index: tuple[int, int]
    ref: list[Tensor]  # fwd: [out]; bwd: [dq, dk, dv]
    pt_err: list[float]


def _slice(t: Tensor, index: tuple[int, int]) -> Tensor:
    b, h = index
    return t[b : b + 1, h : h + 1]


def _math_attention(q: Tensor, k: Tensor, v: Tensor, causal: bool, dout: Tensor | None) -> list[Tensor]:
    q, k, v = (t.detach().requires_grad_(dout is not None) for t in (q, k, v))
    with sdpa_kernel([SDPBackend.MATH]):
        out = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    if dout is None:
        return [out.detach()]
    return list(torch.autograd.grad(out, (q, k, v), dout))


def _reference(problem: Problem, inputs: tuple[Tensor, ...], direction: str) -> _Reference:
    # The last batch and head: an indexing bug (strides, grid limits) shows there first.
    index = (problem.batch - 1, problem.heads - 1)
    q, k, v, dout = (_slice(t, index) for t in inputs)
    upcast_dout = dout.float() if direction == "bwd" else None
    ref = _math_attention(q.float(), k.float(), v.float(), problem.causal, upcast_dout)
    with _reduced_precision_math():
        pt = _math_attention(q, k, v, problem.causal, dout if direction == "bwd" else None)
    pt_err = [(p.float() - r).abs().max().item() for p, r in zip(pt, ref)]
    return _Reference(index, ref, pt_err)


def _check(reference: _Reference, ours: Sequence[Tensor]) -> tuple[float, float]:
    """(max error, worst error / bound) of ``ours`` (full tensors) on the reference's slice."""
    errs = [
        (_slice(t, reference.index).float() - r).abs().max().item() if bool(torch.isfinite(t).all()) else math.inf
        for t, r in zip(ours, reference.ref)
    ]
    ratios = [e / (RULE_FACTOR * p + RULE_ATOL) for e, p in zip(errs, reference.pt_err)]
    return max(errs), max(ratios)


# ---- one configuration ----------------------------------------------------------------------------


# What a backend raises for a configuration it does not take: PyTorch's "No available kernel"
# (RuntimeError), flashsdpa's argument checks (TypeError / ValueError, e.g. a head dim this build
# did not compile).
_UNSUPPORTED = (RuntimeError, TypeError, ValueError, NotImplementedError)


def _unsupported(exc: BaseException) -> str:
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return f"unsupported: {first[:100]}"


def _measure(
    backend: str,
    problem: Problem,
    direction: str,
    sets: list[tuple[Tensor, ...]],
    reference: _Reference | None,
    args: argparse.Namespace,
) -> Result:
    result = Result(direction, problem.head_dim, problem.seqlen, problem.causal, problem.batch, problem.heads, backend)
    served_before = _served_total()
    try:
        with _backend_context(backend):
            if direction == "fwd":
                with torch.no_grad():
                    calls = [lambda s=s: _forward(backend, s[0], s[1], s[2], problem.causal) for s in sets]
                    checked = [calls[0]()]
                    result.ms = time_cuda_ms(calls, warmup=args.warmup, reps=args.reps)
            else:
                outs = [_forward(backend, s[0], s[1], s[2], problem.causal) for s in sets]
                calls = [
                    lambda o=o, s=s: torch.autograd.grad(o, s[:3], s[3], retain_graph=True) for o, s in zip(outs, sets)
                ]
                checked = list(calls[0]())
                result.ms = time_cuda_ms(calls, warmup=args.warmup, reps=args.reps)
                del outs, calls
    except torch.OutOfMemoryError:
        torch.cuda.empty_cache()
        result.status = "OOM"
        return result
    except _UNSUPPORTED as exc:
        result.status = _unsupported(exc)
        return result

    result.tflops = problem.flops(direction) / (result.ms * 1e-3) / 1e12
    served = _served_total() > served_before
    if backend == "flashsdpa-sdpa" and not served:
        result.status = "not served: PyTorch's kernel ran (see flashsdpa.explain)"
    elif backend in PYTORCH and served:
        result.status = "not served: flashsdpa's kernels took PyTorch's call"
    if reference is not None:
        result.max_err, result.err_ratio = _check(reference, checked)
        if result.err_ratio > 1.0 and result.status == "ok":
            result.status = "WRONG"
    return result


# ---- memory and overhead --------------------------------------------------------------------------


def _peak_extra_mib(backend: str, problem: Problem, dtype: torch.dtype, layout: str) -> dict[str, Any]:
    """Peak memory above the inputs (q, k, v, dout) during a forward, and during forward + backward."""
    row: dict[str, Any] = {
        "backend": backend,
        "head_dim": problem.head_dim,
        "seqlen": problem.seqlen,
        "batch": problem.batch,
        "heads": problem.heads,
        "fwd_mib": None,
        "fwd_bwd_mib": None,
    }
    ((q, k, v, dout),) = _input_sets(problem, dtype, layout, 1)
    try:
        with _backend_context(backend):
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            base = torch.cuda.memory_allocated()
            out = _forward(backend, q, k, v, problem.causal)
            torch.cuda.synchronize()
            row["fwd_mib"] = (torch.cuda.max_memory_allocated() - base) / 2**20
            grads = torch.autograd.grad(out, (q, k, v), dout)
            torch.cuda.synchronize()
            row["fwd_bwd_mib"] = (torch.cuda.max_memory_allocated() - base) / 2**20
            del out, grads
    except torch.OutOfMemoryError:
        row["status"] = "OOM"
    except _UNSUPPORTED as exc:
        row["status"] = _unsupported(exc)
    else:
        row["status"] = "ok"
    del q, k, v, dout
    torch.cuda.empty_cache()
    return row


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


def _overhead_us(dtype: torch.dtype, rounds: int = 41, calls_per_round: int = 200) -> dict[str, Any]:
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
                with _backend_context(backend), torch.set_grad_enabled(grad):
                    for _ in range(20):
                        _forward(backend, *inputs, False)
                    torch.cuda.synchronize()
                    start = time.perf_counter()
                    for _ in range(calls_per_round):
                        _forward(backend, *inputs, False)
                    torch.cuda.synchronize()
                    samples[name].append((time.perf_counter() - start) / calls_per_round * 1e6)
            except _UNSUPPORTED as exc:
                status[name] = _unsupported(exc)
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


# ---- reporting ------------------------------------------------------------------------------------


def _env() -> dict[str, Any]:
    from flashsdpa.cli import collect_info

    info = collect_info()
    info["date"] = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    return info


def _fmt(value: float | None, width: int = 7, digits: int = 1) -> str:
    return f"{value:{width}.{digits}f}" if value is not None else f"{'-':>{width}}"


def _ratio(value: float | None) -> str:
    return f"{value:7.2f}x" if value is not None else f"{'-':>8}"


def _cell(result: Result | None) -> str:
    if result is None:
        return f"{'':>8}"
    if result.tflops is None:
        return f"{'n/a' if result.status.startswith('unsupported') else result.status[:8]:>8}"
    mark = "" if result.status == "ok" else ("!" if result.status == "WRONG" else "?")
    return f"{result.tflops:7.1f}{mark or ' '}"


def _counts(r: Result | None) -> bool:
    """Whether a row's TFLOP/s stand: ours only when checked correct and served as labelled;
    PyTorch's whenever they ran (counting them even past the rule's bound keeps our ratios
    conservative: the check is there to catch our kernels, not to discount theirs)."""
    if r is None or r.tflops is None:
        return False
    return r.status == "ok" or (r.backend in PYTORCH and r.status == "WRONG")


def ratios(results: Sequence[Result]) -> list[dict[str, Any]]:
    """Per configuration: ours (direct API) over flash, cuDNN and the best PyTorch backend."""
    by_key: dict[tuple, dict[str, Result]] = {}
    for r in results:
        by_key.setdefault((r.direction, r.head_dim, r.seqlen, r.causal), {})[r.backend] = r
    rows = []
    for (direction, d, s, causal), row in by_key.items():
        tflops = {name: r.tflops for name, r in row.items() if _counts(r)}
        best = max((tflops[n] for n in PYTORCH if n in tflops), default=None)
        mine, flash, cudnn = tflops.get("flashsdpa"), tflops.get("torch-flash"), tflops.get("torch-cudnn")
        rows.append(
            {
                "direction": direction,
                "head_dim": d,
                "seqlen": s,
                "causal": causal,
                "ours_over_flash": mine / flash if mine and flash else None,
                "ours_over_cudnn": mine / cudnn if mine and cudnn else None,
                "ours_over_best": mine / best if mine and best else None,
            }
        )
    return rows


def print_table(results: Sequence[Result], backends: Sequence[str], out: Any = sys.stdout) -> None:
    ratio_rows = {(r["direction"], r["head_dim"], r["seqlen"], r["causal"]): r for r in ratios(results)}
    by_key = {(r.direction, r.head_dim, r.seqlen, r.causal, r.backend): r for r in results}
    panels = sorted({(r.direction, r.head_dim, r.causal) for r in results}, key=lambda p: (p[0] != "fwd", p[1], p[2]))
    names = {
        "flashsdpa": "ours",
        "flashsdpa-sdpa": "ours-sdpa",
        "torch-flash": "flash",
        "torch-cudnn": "cudnn",
        "torch-efficient": "effic.",
    }
    print("\nTFLOP/s (! = failed the correctness check, ? = not what the label says; n/a = unsupported)", file=out)
    for direction, d, causal in panels:
        print(f"\n{direction} D={d} {'causal' if causal else 'non-causal'}", file=out)
        header = f"{'S':>6} " + " ".join(f"{names[b]:>8}" for b in backends) + "    /flash   /cudnn    /best"
        print(header, file=out)
        for s in sorted({r.seqlen for r in results if (r.direction, r.head_dim, r.causal) == (direction, d, causal)}):
            cells = " ".join(_cell(by_key.get((direction, d, s, causal, b))) for b in backends)
            rr = ratio_rows.get((direction, d, s, causal), {})
            ratio_cells = " ".join(_ratio(rr.get(k)) for k in ("ours_over_flash", "ours_over_cudnn", "ours_over_best"))
            print(f"{s:>6} {cells}  {ratio_cells}", file=out)


def _print_memory(rows: Sequence[dict[str, Any]]) -> None:
    if not rows:
        return
    print(f"\nPeak extra memory above the inputs (MiB), S = {MEMORY_SEQLEN}, non-causal")
    print(f"{'D':>4} {'backend':<16} {'fwd':>9} {'fwd+bwd':>9}  status")
    for r in rows:
        print(
            f"{r['head_dim']:>4} {r['backend']:<16} {_fmt(r['fwd_mib'], 9)} {_fmt(r['fwd_bwd_mib'], 9)}  {r['status']}"
        )
    for verdict in memory_verdicts(rows):
        print(verdict)


def memory_verdicts(rows: Sequence[dict[str, Any]]) -> list[str]:
    """Per head dim: flashsdpa's peak against PyTorch's flash backend's (the bar: no more)."""
    by_dim: dict[int, dict[str, dict[str, Any]]] = {}
    for r in rows:
        by_dim.setdefault(r["head_dim"], {})[r["backend"]] = r
    lines = []
    for d, row in sorted(by_dim.items()):
        ours, flash = row.get("flashsdpa"), row.get("torch-flash")
        if not ours or not flash or ours["fwd_bwd_mib"] is None or flash["fwd_bwd_mib"] is None:
            continue
        worst = max(ours["fwd_mib"] - flash["fwd_mib"], ours["fwd_bwd_mib"] - flash["fwd_bwd_mib"])
        verdict = "within" if worst <= 0 else f"OVER by {worst:.1f} MiB"
        lines.append(f"  D={d}: flashsdpa vs PyTorch's flash: {verdict} (bar: no more than flash)")
    return lines


def _print_overhead(o: dict[str, Any] | None) -> None:
    if not o:
        return
    print(
        f"\nPer-call wall time on a tiny shape {tuple(o['shape'])} {o['dtype']}, forward, median of "
        f"{o['rounds']} interleaved rounds (us)"
    )
    print(f"  {'':<16} {'no grad':>8} {'grad':>8}")
    for name, us in o["us_per_call"].items():
        grad = o["grad_us_per_call"].get(name)
        notes = "  ".join(o["status"][n] for n in (name, f"{name} (grad)") if n in o["status"])
        print(f"  {name:<16} {_fmt(us, 8)} {_fmt(grad, 8)}  {notes}".rstrip())
    overhead = o["shim_overhead_us"]
    line = f"  {'shim overhead':<16} {_fmt(overhead, 8)} {_fmt(o['grad_shim_overhead_us'], 8)}"
    if overhead is not None:
        verdict = "within" if overhead <= o["bar_us"] else "OVER"
        line += f"  ({verdict} the {o['bar_us']:.0f} us bar, judged without grad)"
    print(line)
    print("  (grad: inputs that require grad, the training forward through autograd and the routers)")


def write_files(out_dir: Path, results: Sequence[Result], payload: dict[str, Any]) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    csv_path = out_dir / "results.csv"
    with csv_path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(asdict(results[0]).keys()) if results else ["backend"])
        writer.writeheader()
        for r in results:
            writer.writerow(asdict(r))
    written.append(csv_path)
    json_path = out_dir / "results.json"
    json_path.write_text(json.dumps(payload, indent=1, default=str))
    written.append(json_path)
    return written


def plot(results: Sequence[Result], path: Path) -> str:
    """TFLOP/s against sequence length, one panel per head dim x causality; fwd solid, bwd dashed."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed: no plot (pip install matplotlib)"
    head_dims = sorted({r.head_dim for r in results})
    causals = sorted({r.causal for r in results})
    fig, axes = plt.subplots(
        len(head_dims), len(causals), figsize=(6 * len(causals), 4 * len(head_dims)), squeeze=False
    )
    colors = {b: f"C{i}" for i, b in enumerate(BACKENDS)}
    for i, d in enumerate(head_dims):
        for j, causal in enumerate(causals):
            ax = axes[i][j]
            for backend in BACKENDS:
                for direction, style in (("fwd", "-"), ("bwd", "--")):
                    pts = sorted(
                        (r.seqlen, r.tflops)
                        for r in results
                        if (r.head_dim, r.causal, r.backend, r.direction) == (d, causal, backend, direction)
                        and _counts(r)
                    )
                    if pts:
                        ax.plot(
                            *zip(*pts), style, marker="o", ms=3, color=colors[backend], label=f"{backend} {direction}"
                        )
            ax.set_xscale("log", base=2)
            seqlens = sorted({r.seqlen for r in results})
            ax.set_xticks(seqlens, [f"{s // 1024}k" if s % 1024 == 0 else str(s) for s in seqlens])
            ax.set_ylim(bottom=0)
            ax.set_title(f"D={d}, {'causal' if causal else 'non-causal'}")
            ax.set_xlabel("sequence length")
            ax.set_ylabel("TFLOP/s")
            ax.grid(alpha=0.3)
    handles, labels = axes[0][0].get_legend_handles_labels()
    if handles:
        fig.legend(handles, labels, loc="lower center", ncol=min(5, len(labels)), fontsize=8)
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return f"plot: {path}"


# ---- progress -------------------------------------------------------------------------------------


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


# ---- the GPU run ----------------------------------------------------------------------------------


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


def _run_gpu(args: argparse.Namespace) -> int:
    fs = _flashsdpa()
    dtype = DTYPES[args.dtype]
    backends = list(args.backends)
    probe = torch.empty(1, 1, 128, 128, device="cuda", dtype=dtype)
    reasons = fs.explain(probe, probe, probe)
    kernels_ok = not reasons
    exit_code = EXIT_OK
    if not kernels_ok:
        print("flashsdpa's kernels cannot run here: " + "; ".join(reasons), file=sys.stderr)
        print("Measuring PyTorch's backends only.", file=sys.stderr)
        backends = [b for b in backends if b not in OURS]
        exit_code = EXIT_NO_KERNELS
    directions = ("fwd", "bwd") if args.direction == "both" else (args.direction,)
    problems = _problems(args)
    env = _env()
    gpu = env["gpus"][torch.cuda.current_device()]
    print(
        f"{gpu['name']} ({gpu['sms']} SMs), torch {torch.__version__}, CUDA {torch.version.cuda}, "
        f"cuDNN {env['torch']['cudnn']}, flashsdpa {env['flashsdpa']}, {args.dtype}, "
        f"B*S = {args.tokens}, H*D = {args.hidden}, {args.reps} timed reps"
    )

    # The per-call overhead first, in a fresh process's state: measured after the sweep (device
    # run 7 of 2026-11-30) the difference read 8.0 us, in a fresh process (run 8) 4.3 us. Not
    # explained yet; the sweep leaves gigabytes of cached blocks in the caching allocator, and our
    # path allocates differently from PyTorch's kernel.
    overhead = None if args.no_overhead or not kernels_ok else _overhead_us(dtype)

    results: list[Result] = []
    progress = _Progress(len(problems) * len(directions) * len(backends))
    try:
        for problem in problems:
            sets = _input_sets(problem, dtype, args.layout, _sets_needed(problem, dtype))
            for direction in directions:
                reference = None if args.no_check else _reference(problem, sets[0], direction)
                for backend in backends:
                    progress.step(f"{direction} {problem.label} {backend}")
                    results.append(_measure(backend, problem, direction, sets, reference, args))
                del reference
            del sets
            torch.cuda.empty_cache()
    finally:
        progress.close()

    memory: list[dict[str, Any]] = []
    if not args.no_memory:
        for d in args.head_dims:
            problem = Problem(d, MEMORY_SEQLEN, False, max(1, args.tokens // MEMORY_SEQLEN), args.hidden // d)
            memory += [_peak_extra_mib(b, problem, dtype, args.layout) for b in backends if b != "torch-efficient"]

    print_table(results, backends)
    _print_memory(memory)
    _print_overhead(overhead)
    wrong = [r for r in results if r.status == "WRONG" and r.backend in OURS]
    theirs_wrong = [r for r in results if r.status == "WRONG" and r.backend in PYTORCH]
    mislabelled = [r for r in results if r.status.startswith("not served")]
    payload = {
        "env": env,
        "args": {k: v for k, v in vars(args).items() if k != "func"},
        "results": [asdict(r) for r in results],
        "ratios": ratios(results),
        "memory": memory,
        "overhead": overhead,
    }
    out_dir = Path(args.out)
    if results:
        for path in write_files(out_dir, results, payload):
            print(f"wrote {path}")
        if not args.no_plot:
            print(plot(results, out_dir / "tflops.png"))
    if theirs_wrong:
        print(
            f"\nNote: PyTorch's own kernels exceeded the rule's bound in {len(theirs_wrong)} row(s) "
            f"(informational; their TFLOP/s still count):",
            file=sys.stderr,
        )
        for r in theirs_wrong:
            print(
                f"  {r.direction} D={r.head_dim} S={r.seqlen} causal={r.causal} {r.backend}: "
                f"max err {r.max_err:.3e} = {r.err_ratio:.1f} x the bound",
                file=sys.stderr,
            )
    if wrong:
        print(f"\n{len(wrong)} flashsdpa configuration(s) FAILED the correctness spot check:", file=sys.stderr)
        for r in wrong:
            print(
                f"  {r.direction} D={r.head_dim} S={r.seqlen} causal={r.causal} {r.backend}: "
                f"max err {r.max_err:.3e} = {r.err_ratio:.1f} x the bound",
                file=sys.stderr,
            )
        return EXIT_WRONG
    if mislabelled:
        print(f"\n{len(mislabelled)} row(s) did not run the backend they are labelled with:", file=sys.stderr)
        for r in mislabelled:
            print(
                f"  {r.direction} D={r.head_dim} S={r.seqlen} causal={r.causal} {r.backend}: {r.status}",
                file=sys.stderr,
            )
        return EXIT_WRONG
    return exit_code


# ---- the CPU self-check ---------------------------------------------------------------------------

# (name, batch, heads_q, heads_kv, seqlen_q, seqlen_k, head_dim, head_dim_v, causal alignment or None, dtype)
_SELF_CHECK_CASES: tuple[tuple[str, int, int, int, int, int, int, int, str | None, torch.dtype], ...] = (
    ("square", 2, 4, 4, 128, 128, 64, 64, None, torch.float32),
    ("causal gqa", 1, 8, 2, 113, 239, 64, 64, "top_left", torch.float32),
    ("kv-cache", 2, 4, 4, 239, 113, 32, 32, "bottom_right", torch.float32),
    ("decode mqa", 1, 8, 1, 1, 1023, 128, 128, "bottom_right", torch.bfloat16),
    ("dv != dqk", 1, 4, 4, 7, 7, 16, 32, None, torch.float16),
    ("awkward", 1, 2, 2, 1023, 1023, 8, 8, "top_left", torch.bfloat16),
)


def _math_with_lse(
    q: Tensor, k: Tensor, v: Tensor, scale: float, visible: Tensor | None, dout: Tensor
) -> tuple[Tensor, Tensor, tuple[Tensor, ...]]:
    """PyTorch's math SDPA (output, gradients) plus the LSE of the same scores, in the inputs' dtype
    (fp16/bf16 upcast to float32 by the math backend)."""
    q, k, v = (t.detach().requires_grad_() for t in (q, k, v))
    gqa = q.shape[1] != k.shape[1]
    with sdpa_kernel([SDPBackend.MATH]):
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=visible, scale=scale, enable_gqa=gqa)
    grads = torch.autograd.grad(out, (q, k, v), dout)
    acc = torch.float64 if q.dtype == torch.float64 else torch.float32
    kk = k.detach().to(acc).repeat_interleave(q.shape[1] // k.shape[1], dim=1)
    scores = (q.detach().to(acc) @ kk.transpose(-1, -2)) * scale
    if visible is not None:
        scores = scores.masked_fill(~visible, float("-inf"))
    lse = torch.logsumexp(scores, dim=-1)
    return out.detach(), lse.masked_fill(lse == float("-inf"), float("inf")), grads


def _err(ours: Tensor, ref: Tensor) -> float:
    if ours.numel() == 0:
        return 0.0
    ours, ref = ours.detach().double(), ref.detach().double()
    finite = torch.isfinite(ref)
    if not torch.equal(torch.isfinite(ours), finite) or not torch.equal(ours[~finite], ref[~finite]):
        return math.inf
    return (ours[finite] - ref[finite]).abs().max().item() if bool(finite.any()) else 0.0


def self_check() -> int:
    """flashsdpa.attention on CPU (the blockwise reference) against PyTorch's math SDPA, forward and
    backward, with the project's rule; and SDPA inside flashsdpa.enable() unchanged on CPU."""
    fs = _flashsdpa()
    gen = torch.Generator().manual_seed(0)
    print(
        f"{'case':<12} {'dtype':<9} {'shape (B,Hq,Hkv,Sq,Sk,D,Dv)':<30} {'causal':<13} "
        f"{'out':>9} {'lse':>9} {'dq':>9} {'dk':>9} {'dv':>9}  result"
    )
    failures = 0
    for name, b, hq, hkv, sq, sk, d, dv, align, dtype in _SELF_CHECK_CASES:
        q = torch.randn(b, hq, sq, d, generator=gen).to(dtype)
        k = torch.randn(b, hkv, sk, d, generator=gen).to(dtype)
        v = torch.randn(b, hkv, sk, dv, generator=gen).to(dtype)
        dout = torch.randn(b, hq, sq, dv, generator=gen).to(dtype)
        scale = 1.0 / math.sqrt(d)
        visible = None
        if align is not None:
            diag = 0 if align == "top_left" else sk - sq
            visible = torch.arange(sk)[None, :] <= torch.arange(sq)[:, None] + diag

        qg, kg, vg = (t.clone().requires_grad_() for t in (q, k, v))
        kwargs = {"causal": align is not None, "scale": scale, "return_lse": True}
        if align is not None:
            kwargs["causal_alignment"] = align
        out, lse = fs.attention(qg, kg, vg, **kwargs)
        grads = torch.autograd.grad(out, (qg, kg, vg), dout)
        ref = _math_with_lse(q.double(), k.double(), v.double(), scale, visible, dout.double())
        pt = _math_with_lse(q, k, v, scale, visible, dout)

        errs, ok = [], True
        for ours_t, pt_t, ref_t in zip((out, lse, *grads), (pt[0], pt[1], *pt[2]), (ref[0], ref[1], *ref[2])):
            err, bound = _err(ours_t, ref_t), RULE_FACTOR * _err(pt_t, ref_t) + RULE_ATOL
            errs.append(err)
            ok &= err <= bound
        failures += not ok
        shape = f"({b},{hq},{hkv},{sq},{sk},{d},{dv})"
        print(
            f"{name:<12} {str(dtype).removeprefix('torch.'):<9} {shape:<30} {align!s:<13} "
            + " ".join(f"{e:9.2e}" for e in errs)
            + f"  {'PASS' if ok else 'FAIL'}"
        )

    # The shim on a CPU-only machine: entering the context must leave CPU SDPA exactly as it was.
    q, k, v = (torch.randn(2, 4, 64, 32, generator=gen) for _ in range(3))
    plain = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    with fs.enable():
        inside = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    same = torch.equal(plain, inside)
    failures += not same
    print(
        f"{'sdpa':<12} {'float32':<9} {'(2,4,4,64,64,32,32)':<30} {'top_left':<13} "
        f"SDPA inside flashsdpa.enable() on CPU is PyTorch's own result: {'PASS' if same else 'FAIL'}"
    )
    print(
        f"\nself-check: {'all passed' if not failures else f'{failures} FAILED'} "
        f"(errors are max |ours - float64 math|; rule: <= 2 x PyTorch's math SDPA in the input dtype + 1e-5)"
    )
    return EXIT_OK if not failures else EXIT_WRONG


# ---- entry ----------------------------------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--head-dims",
        type=parse_count,
        nargs="+",
        default=None,
        metavar="D",
        help=f"head dims (default {' '.join(map(str, STANDARD_HEAD_DIMS))})",
    )
    parser.add_argument(
        "--seqlens",
        type=parse_count,
        nargs="+",
        default=None,
        metavar="S",
        help="sequence lengths, k suffix allowed (default 512 1k 2k 4k 8k 16k)",
    )
    parser.add_argument("--causal", choices=("both", "true", "false"), default="both")
    parser.add_argument("--direction", choices=("fwd", "bwd", "both"), default="both")
    parser.add_argument(
        "--backends",
        nargs="+",
        choices=BACKENDS,
        default=list(BACKENDS),
        metavar="NAME",
        help=f"subset of: {' '.join(BACKENDS)}",
    )
    parser.add_argument("--dtype", choices=("bf16", "fp16"), default="bf16")
    parser.add_argument("--tokens", type=parse_count, default=16384, help="B * S (default 16k)")
    parser.add_argument("--hidden", type=parse_count, default=2048, help="H * D (default 2048)")
    parser.add_argument(
        "--layout",
        choices=("bshd", "bhsd"),
        default="bshd",
        help="memory order behind the (B, H, S, D) views (default bshd, as models pass them)",
    )
    parser.add_argument("--reps", type=int, default=None, help="timed calls per measurement (default 20; quick 10)")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--out", default="bench_results", help="directory for results.csv/json and tflops.png")
    parser.add_argument(
        "--quick",
        action="store_true",
        help=f"about a minute: D {' '.join(map(str, QUICK_HEAD_DIMS))}, S "
        f"{' '.join(map(str, QUICK_SEQLENS))} (explicit --head-dims/--seqlens win)",
    )
    parser.add_argument("--no-check", action="store_true", help="skip the correctness spot checks")
    parser.add_argument("--no-memory", action="store_true", help="skip the peak-memory report")
    parser.add_argument("--no-overhead", action="store_true", help="skip the per-call overhead report")
    parser.add_argument("--no-plot", action="store_true")


def run(args: argparse.Namespace) -> int:
    if args.head_dims is None:
        args.head_dims = list(QUICK_HEAD_DIMS if args.quick else STANDARD_HEAD_DIMS)
    if args.seqlens is None:
        args.seqlens = list(QUICK_SEQLENS if args.quick else STANDARD_SEQLENS)
    if args.reps is None:
        args.reps = 10 if args.quick else 20
    if args.reps < 1 or args.warmup < 0 or any(s < 1 for s in args.seqlens) or any(d < 1 for d in args.head_dims):
        print("bench: --reps, --seqlens and --head-dims must be positive", file=sys.stderr)
        return EXIT_USAGE
    if not torch.cuda.is_available():
        print(
            f"No CUDA GPU on this machine (torch {torch.__version__}, "
            f"{'CUDA ' + torch.version.cuda if torch.version.cuda else 'a CPU-only build'}): nothing to benchmark."
        )
        print(
            "Running the self-check of the shim on the reference path instead: flashsdpa.attention on CPU "
            "(the blockwise PyTorch reference) against PyTorch's math SDPA, forward and backward.\n"
        )
        return self_check()
    return _run_gpu(args)
