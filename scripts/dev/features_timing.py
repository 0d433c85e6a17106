"""features_timing.py: the score modifiers' cost on our kernels, one process (issue 14's bar:
softcap 50 at S 8k within 10% of no softcap). B 2, S 8192, H 16, D 128, bf16, non-causal and
causal: TFLOP/s of the forward and the backward through the flashsdpa:: ops, plain against each
modifier. FLOPs counted dense (causal: half), as docs/performance.md counts them.

    PYTHONPATH=python python3 scripts/dev/features_timing.py [--seqlen 8192] [--reps 20]
        [--head-dim 128] [--variants plain "softcap 50"] [--fwd-only] [--json]

--json prints one JSON line per (variant, causal) row as well (A/B scripts collect them); with
--fwd-only the backward is not timed (its columns read 0).
"""
from __future__ import annotations

import argparse
import json
import math
from collections.abc import Callable

import torch

import flashsdpa  # noqa: F401  (registers the flashsdpa:: ops)
from flashsdpa.bench.timing import time_cuda_ms


def time_ms(fn: Callable[[], object], reps: int) -> float:
    """Median ms per call (CUDA events around each call), the benchmark's own timer."""
    return time_cuda_ms([fn], warmup=3, reps=reps)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seqlen", type=int, default=8192)
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--head-dim", type=int, default=128, help="H x D stays 2048")
    parser.add_argument("--variants", nargs="+", default=None, help="a subset, by name (plain is always first)")
    parser.add_argument("--fwd-only", action="store_true")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    d = args.head_dim
    b, h, s = 16384 // args.seqlen, 2048 // d, args.seqlen
    gen = torch.Generator(device="cuda").manual_seed(0)
    q, k, v, dout = (torch.randn(b, h, s, d, generator=gen, device="cuda", dtype=torch.bfloat16) for _ in range(4))
    slopes = torch.exp2(-8.0 * torch.arange(1, h + 1, device="cuda") / h).float()
    sinks = torch.randn(h, generator=gen, device="cuda")
    scale = 1 / math.sqrt(d)
    ops = torch.ops.flashsdpa
    variants = {
        "plain": (0.0, None, None),
        "softcap 50": (50.0, None, None),
        "alibi": (0.0, slopes, None),
        "sinks": (0.0, None, sinks),
        "softcap+alibi+sinks": (50.0, slopes, sinks),
    }
    if args.variants is not None:
        variants = {name: value for name, value in variants.items() if name == "plain" or name in args.variants}
    print(f"B {b} H {h} S {s} D {d} bf16, TFLOP/s (dense FLOPs; causal counted half)")
    print(f"{'variant':<22} {'causal':<7} {'fwd':>8} {'bwd':>8} {'fwd vs plain':>13} {'bwd vs plain':>13}")
    for causal in (False, True):
        mask = [-1, 0, 1] if causal else [-1, -1, 0]
        flops = 4 * b * h * s * s * d * (0.5 if causal else 1.0)
        base: tuple[float, float] | None = None
        for name, (softcap, sl, sk) in variants.items():
            if name == "plain":
                out, lse = ops.fwd.default(q, k, v, scale, mask)
                fwd = time_ms(lambda: ops.fwd.default(q, k, v, scale, mask), args.reps)
                bwd = math.inf if args.fwd_only else time_ms(
                    lambda: ops.bwd.default(dout, q, k, v, out, lse, scale, mask), args.reps)
            else:
                out, lse = ops.fwd_mods.default(q, k, v, None, None, 0, 0, scale, mask, softcap, sl, sk)
                fwd = time_ms(lambda: ops.fwd_mods.default(q, k, v, None, None, 0, 0, scale, mask, softcap, sl, sk),
                              args.reps)  # fmt: skip
                want = [sl is not None, sk is not None]
                bwd = math.inf if args.fwd_only else time_ms(
                    lambda: ops.bwd_mods.default(dout, q, k, v, out, lse, None, None, 0, 0, scale, mask, softcap, sl,
                                                 sk, want), args.reps)  # fmt: skip
            tf_fwd, tf_bwd = flops / fwd / 1e9, 2.5 * flops / bwd / 1e9
            if base is None:
                base = (tf_fwd, max(tf_bwd, 1e-9))
            print(f"{name:<22} {str(causal):<7} {tf_fwd:8.1f} {tf_bwd:8.1f} {tf_fwd / base[0]:12.1%} "
                  f"{tf_bwd / base[1]:12.1%}")  # fmt: skip
            if args.json:
                print("JSON " + json.dumps({"variant": name, "causal": causal, "d": d, "seqlen": s,
                                            "fwd": tf_fwd, "bwd": tf_bwd}))  # fmt: skip


if __name__ == "__main__":
    main()
