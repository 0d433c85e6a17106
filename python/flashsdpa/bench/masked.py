# bench/masked.py: the attention-mask rows, `python -m flashsdpa bench --masks` (part of the full
# run; issue 14's bars). SDPA with an attn_mask, as a model calls it: inside enable() (ours, through
# the masked routers) against PyTorch's own backends for masked calls in the same process (cuDNN,
# efficient, and its default choice). Cases: a key-padding bool mask (B, 1, 1, S) with each
# sequence's kept length uniform in [S/2, S] (B * S = 16k, H 16, D 128, S 2k and 8k), and an
# additive bias (1, H, S, S) that requires grad at S 2k. TFLOP/s with FLOPs counted dense (forward
# 4 * B * H * S^2 * D; backward 2.5x that, timed alone on a retained graph), as the bars
# count them. Interleaved rounds; ratios are medians of per-round ratios. CUDA events, median of
# the reps. Budget on an H200: ~10 s a round.
# The decode row (issue 11 / 14: padded batched generation): one query row per sequence, B 8, H 32,
# D 128, 8k keys with a key-padding bool mask (kept lengths uniform in [S/2, S]), forward without
# grad: µs and TB/s, the bytes counted being the kept keys' K and V (what a kernel must read:
# 2 * B * H * sum(kept) * D * 2 bytes, ~0.8 GB on average, so ~190 µs at 4.25 TB/s), against the
# fastest of PyTorch's masked backends per round.
"""The attention-mask rows: key padding and an additive bias through SDPA, ours against PyTorch's."""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from flashsdpa.bench import problems
from flashsdpa.bench.problems import DTYPES, api
from flashsdpa.bench.rounds import median, ratio_over_rounds
from flashsdpa.bench.timing import time_cuda_ms

TOKENS, HEADS, HEAD_DIM = 16384, 16, 128
MASKED_REPS, MASKED_WARMUP = 10, 3
# Backends: ours is SDPA inside enable(); PyTorch's are its masked kernels, forced or as it picks.
BACKENDS = ("ours", "torch-cudnn", "torch-efficient", "torch-default")
THEIRS = BACKENDS[1:]
DECODE_BATCH, DECODE_HEADS, DECODE_KEYS = 8, 32, 8192
DECODE_NAME = "decode key padding B 8 S 8k"


@dataclass(frozen=True)
class MaskCase:
    name: str
    kind: str  # "padding": bool (B, 1, 1, S); "bias": additive (1, H, S, S) that requires grad
    seqlen: int


CASES: tuple[MaskCase, ...] = (
    MaskCase("key padding S 2k", "padding", 2048),
    MaskCase("key padding S 8k", "padding", 8192),
    MaskCase("additive bias S 2k", "bias", 2048),
)


_FORCED = {"torch-flash": SDPBackend.FLASH_ATTENTION, "torch-cudnn": SDPBackend.CUDNN_ATTENTION,
           "torch-efficient": SDPBackend.EFFICIENT_ATTENTION}  # fmt: skip


@contextlib.contextmanager
def sdpa_backend(name: str) -> Iterator[None]:
    """SDPA calls inside it run as the row's backend: ours (inside enable()), one of PyTorch's forced
    (torch-flash / torch-cudnn / torch-efficient), or PyTorch's own choice (anything else). Also
    features.py's."""
    if name == "ours":
        with api().enable():
            yield
    elif name in _FORCED:
        with sdpa_kernel([_FORCED[name]]):
            yield
    else:
        yield


def _inputs(case: MaskCase, dtype: torch.dtype, seed: int) -> tuple[list[torch.Tensor], torch.Tensor, torch.Tensor]:
    """(q, k, v that require grad, the mask, dO) for one round (fresh values per round)."""
    s = case.seqlen
    batch = max(1, TOKENS // s)
    gen = torch.Generator(device=problems.DEVICE).manual_seed(seed)
    q, k, v, dout = (
        torch.randn(batch, HEADS, s, HEAD_DIM, generator=gen, device=problems.DEVICE).to(dtype) for _ in range(4)
    )
    if case.kind == "padding":
        kept = torch.randint(s // 2, s + 1, (batch,), generator=gen, device=problems.DEVICE)
        mask = (torch.arange(s, device=problems.DEVICE)[None, :] < kept[:, None]).view(batch, 1, 1, s)
    else:
        mask = torch.randn(1, HEADS, s, s, generator=gen, device=problems.DEVICE).to(dtype).requires_grad_()
    return [t.requires_grad_() for t in (q, k, v)], mask, dout


def _times(backend: str, qkv: list[torch.Tensor], mask: torch.Tensor, dout: torch.Tensor) -> tuple[float, float]:
    """(forward ms without grad, backward ms on a retained graph) for one backend."""
    inputs = [*qkv, mask] if mask.requires_grad else qkv
    served = problems.served_total()
    q, k, v = qkv
    with sdpa_backend(backend):
        with torch.no_grad():
            fwd = time_cuda_ms([lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=mask)],
                               warmup=MASKED_WARMUP, reps=MASKED_REPS)  # fmt: skip
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        bwd = time_cuda_ms([lambda: torch.autograd.grad(out, inputs, dout, retain_graph=True)],
                           warmup=MASKED_WARMUP, reps=MASKED_REPS)  # fmt: skip
    if backend == "ours" and problems.served_total() == served:
        raise RuntimeError("not served: our kernels ran none of these calls (see flashsdpa.explain)")
    return fwd, bwd


def _decode_inputs(dtype: torch.dtype, seed: int) -> tuple[list[torch.Tensor], torch.Tensor, int]:
    """(q, k, v, the (B, 1, 1, S) key-padding mask, the kept keys' K and V bytes) of one round."""
    b, h, s = DECODE_BATCH, DECODE_HEADS, DECODE_KEYS
    gen = torch.Generator(device=problems.DEVICE).manual_seed(seed)
    qkv = [torch.randn(b, h, n, HEAD_DIM, generator=gen, device=problems.DEVICE).to(dtype) for n in (1, s, s)]
    kept = torch.randint(s // 2, s + 1, (b,), generator=gen, device=problems.DEVICE)
    mask = (torch.arange(s, device=problems.DEVICE)[None, :] < kept[:, None]).view(b, 1, 1, s)
    return qkv, mask, 2 * h * int(kept.sum().item()) * HEAD_DIM * qkv[0].element_size()


def run_masked_decode(dtype: torch.dtype, rounds: int) -> dict[str, Any]:
    """The decode row: per backend, µs per round and TB/s (kept K/V bytes), and ours over the
    fastest of PyTorch's as the median of per-round time ratios (< 1: ours faster)."""
    us: dict[str, list[float | None]] = {b: [] for b in BACKENDS}
    tbs: dict[str, list[float | None]] = {b: [] for b in BACKENDS}
    for rnd in range(max(1, rounds)):
        (q, k, v), mask, nbytes = _decode_inputs(dtype, seed=7000 + rnd)
        for backend in BACKENDS[rnd % len(BACKENDS):] + BACKENDS[: rnd % len(BACKENDS)]:
            served = problems.served_total()
            try:
                with sdpa_backend(backend), torch.no_grad():
                    ms = time_cuda_ms([lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=mask)],
                                      warmup=MASKED_WARMUP, reps=MASKED_REPS)  # fmt: skip
                if backend == "ours" and problems.served_total() == served:
                    raise RuntimeError("not served: our kernels ran none of these calls (see flashsdpa.explain)")
                value: float | None = ms * 1e3
            except Exception as exc:  # noqa: BLE001 - a backend that refuses the case scores n/a
                print(f"bench: masks {DECODE_NAME} {backend}: {type(exc).__name__}: {str(exc)[:200]}", file=sys.stderr)
                value = None
            us[backend].append(value)
            tbs[backend].append(None if value is None else nbytes / (value * 1e-6) * 1e-12)
    best = [min((v for v in vals if v is not None), default=None) for vals in zip(*(us[b] for b in THEIRS))]
    ratio, per_round = ratio_over_rounds(us["ours"], best)
    rows = [{"case": DECODE_NAME, "backend": b, "us": median(us[b]), "tb_s": median(tbs[b]), "round_us": us[b]}
            for b in BACKENDS]  # fmt: skip
    return {"rows": rows, "ours_time_over_best_torch": ratio, "rounds": per_round}


def run_masked(args: argparse.Namespace) -> dict[str, Any]:
    """Per case, backend and round: forward and backward TFLOP/s (dense FLOPs); per case and
    direction, ours over the best of PyTorch's as the median of per-round ratios."""
    started = time.perf_counter()
    dtype = DTYPES[args.dtype]
    rates: dict[tuple[str, str, str], list[float | None]] = {}
    for rnd in range(max(1, args.rounds)):
        for i, case in enumerate(CASES):
            qkv, mask, dout = _inputs(case, dtype, seed=1000 * rnd + i)
            flops = 4.0 * qkv[0].shape[0] * HEADS * case.seqlen**2 * HEAD_DIM
            order = BACKENDS[rnd % len(BACKENDS):] + BACKENDS[: rnd % len(BACKENDS)]  # rotated per round
            for backend in order:
                try:
                    fwd, bwd = _times(backend, qkv, mask, dout)
                    values: tuple[float | None, float | None] = (flops / fwd * 1e-9, 2.5 * flops / bwd * 1e-9)
                except Exception as exc:  # noqa: BLE001 - a backend that refuses the case scores n/a
                    print(f"bench: masks {case.name} {backend}: {type(exc).__name__}: {str(exc)[:200]}", file=sys.stderr)
                    values = (None, None)
                for direction, value in zip(("fwd", "bwd"), values):
                    rates.setdefault((case.name, backend, direction), []).append(value)
    rows, summary = [], []
    for case in CASES:
        for direction in ("fwd", "bwd"):
            for backend in BACKENDS:
                per_round = rates.get((case.name, backend, direction), [])
                rows.append({"case": case.name, "backend": backend, "direction": direction,
                             "tflops": median(per_round), "round_tflops": per_round})  # fmt: skip
            ours = rates.get((case.name, "ours", direction), [])
            best = [max((v for v in vals if v is not None), default=None)
                    for vals in zip(*(rates.get((case.name, b, direction), []) for b in THEIRS))]  # fmt: skip
            value, per_round_ratio = ratio_over_rounds(ours, best)
            summary.append({"case": case.name, "direction": direction, "ours_tflops": median(ours),
                            "ours_over_best_torch": value, "rounds": per_round_ratio})  # fmt: skip
    decode = run_masked_decode(dtype, args.rounds)
    return {"rows": rows, "summary": summary, "decode": decode, "seconds": time.perf_counter() - started}


def print_masked(result: dict[str, Any] | None, out: Any = None) -> None:
    out = out or sys.stdout  # bound at call time: pytest and callers may swap sys.stdout
    if not result or not result.get("rows"):
        return
    print(
        f"\nMasks through SDPA: B * S = {TOKENS}, H {HEADS}, D {HEAD_DIM}; TFLOP/s with dense FLOPs, backward "
        f"alone (median over rounds; {result['seconds']:.0f} s)",
        file=out,
    )
    print(f"  {'case':<20} {'dir':<4} " + " ".join(f"{b:>16}" for b in BACKENDS) + "   ours / best PyTorch", file=out)
    by_key = {(r["case"], r["direction"], r["backend"]): r["tflops"] for r in result["rows"]}
    for s in result["summary"]:
        cells = " ".join(
            f"{by_key[(s['case'], s['direction'], b)]:16.1f}" if by_key.get((s["case"], s["direction"], b)) else f"{'n/a':>16}"
            for b in BACKENDS
        )
        ratio = f"{s['ours_over_best_torch']:.2f}x" if s["ours_over_best_torch"] else "-"
        print(f"  {s['case']:<20} {s['direction']:<4} {cells}   {ratio}", file=out)
    decode = result.get("decode")
    if decode and decode.get("rows"):
        print(f"  {DECODE_NAME} (H {DECODE_HEADS}, one query row, fwd): µs / TB/s of kept K and V; "
              "ours' time over the fastest PyTorch's", file=out)  # fmt: skip
        cells = " ".join(f"{r['us']:7.1f}/{r['tb_s']:5.2f}" if r["us"] else f"{'n/a':>13}" for r in decode["rows"])
        ratio = decode["ours_time_over_best_torch"]
        print(f"    {' '.join(f'{b:>13}' for b in BACKENDS)}\n    {cells}   {f'{ratio:.2f}x' if ratio else '-'}",
              file=out)  # fmt: skip

