#!/usr/bin/env python3
"""Benchmark row of issue 8: a 4k sliding window on 32k tokens against dense causal attention.

    python scripts/bench_window.py [--dtype bf16] [--head-dim 128] [--heads 16] [--seqlen 32768] [--window 4096]

Times flashsdpa.attention forward (and forward + backward) for causal attention and for a causal
window of the last `--window` keys, and reports TFLOP/s counted on the visible (query, key) pairs
only (4 * pairs * d flops forward, 2.5x that for forward + backward), so a kernel whose cost is
proportional to the window reads the same rate as the dense causal one. Done when the window rate
is >= 0.9x the causal rate (issue 8). CUDA events, median of --reps after --warmup.
"""
from __future__ import annotations

import argparse
import statistics

import torch

import flashsdpa
from flashsdpa import masks


def _time_ms(fn: object, warmup: int, reps: int) -> float:
    for _ in range(warmup):
        fn()  # type: ignore[operator]
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()  # type: ignore[operator]
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dtype", choices=("bf16", "fp16"), default="bf16")
    parser.add_argument("--head-dim", type=int, default=128)
    parser.add_argument("--heads", type=int, default=16)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--seqlen", type=int, default=32768)
    parser.add_argument("--window", type=int, default=4096)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--reps", type=int, default=10)
    args = parser.parse_args()
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float16
    b, h, s, d = args.batch, args.heads, args.seqlen, args.head_dim
    q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=dtype, requires_grad=True) for _ in range(3))
    dout = torch.randn_like(q)
    rows = []
    for label, window in (("causal", None), (f"window {args.window}", (args.window - 1, 0))):
        mask = masks.make(True, "top_left", window)
        pairs = b * h * masks.visible_pairs(mask, s, s)
        flops_fwd = 4 * pairs * d

        def fwd() -> torch.Tensor:
            with torch.no_grad():
                return flashsdpa.attention(q, k, v, causal=True, window=window)  # type: ignore[return-value]

        def fwd_bwd() -> None:
            out = flashsdpa.attention(q, k, v, causal=True, window=window)
            torch.autograd.grad(out, (q, k, v), dout)  # type: ignore[arg-type]

        ms_f = _time_ms(fwd, args.warmup, args.reps)
        ms_fb = _time_ms(fwd_bwd, args.warmup, args.reps)
        rows.append((label, pairs, ms_f, flops_fwd / ms_f / 1e9, ms_fb, 3.5 * flops_fwd / ms_fb / 1e9))
    print(f"B={b} H={h} S={s} d={d} {args.dtype}; TFLOP/s on visible pairs")
    print(f"{'mask':<14} {'pairs':>14} {'fwd ms':>8} {'fwd TF/s':>9} {'f+b ms':>8} {'f+b TF/s':>9}")
    for label, pairs, ms_f, tf_f, ms_fb, tf_fb in rows:
        print(f"{label:<14} {pairs:>14} {ms_f:>8.2f} {tf_f:>9.1f} {ms_fb:>8.2f} {tf_fb:>9.1f}")
    print(f"window / causal rate: forward {rows[1][3] / rows[0][3]:.2f}x, forward + backward "
          f"{rows[1][5] / rows[0][5]:.2f}x (target >= 0.9x)")  # fmt: skip


if __name__ == "__main__":
    main()
