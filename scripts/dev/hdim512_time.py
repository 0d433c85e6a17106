"""hdim512_time.py (session 28): the head-dim-512 kernels (cuda/sm90/fwd512_kernel_sm90.cuh; the
backward's CTA pairs, bwd_kernel_sm90.cuh's kSplit, session 34) against what PyTorch runs at D 512
without flashsdpa (its SDPA: flash and cuDNN refuse D > 256 on torch 2.11, so the efficient kernel,
or math with GQA), bf16, B*S = 16k, H 4 (H*D = 2048), CUDA events around 20 calls after 5 warm-up
calls, median, rounds interleaved; TFLOP/s as FlashAttention counts them (4 B H S^2 D, halved causal).
Modes: the forward without grad (default); `--train` forward + backward through SDPA, ours inside
enable() (FLOPs 3.5x the forward's); `--bwd` the backward alone (autograd.grad on a retained graph,
2.5x), ours the graph built inside enable().
  PYTHONPATH=python python3 scripts/dev/hdim512_time.py --rounds 3 [--train | --bwd] [--seqlens 2048 4096 8192]
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
from collections.abc import Callable

import torch
import torch.nn.functional as F

import flashsdpa


def time_ms(fn: Callable[[], object], calls: int = 20) -> float:
    for _ in range(5):
        fn()
    times = []
    for _ in range(calls):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--train", action="store_true", help="forward + backward (inputs require grad)")
    mode.add_argument("--bwd", action="store_true", help="the backward alone")
    ap.add_argument("--seqlens", type=int, nargs="+", default=[8192, 2048])
    args = ap.parse_args()
    grad = args.train or args.bwd
    rows: dict[tuple[int, int, bool, str], list[float]] = {}
    cases = [(max(1, 16384 // s), s) for s in args.seqlens]
    for _ in range(args.rounds):
        for batch, seqlen in cases:
            for causal in (False, True):
                q, k, v = (torch.randn(batch, 4, seqlen, 512, device="cuda", dtype=torch.bfloat16,
                                       requires_grad=grad) for _ in range(3))  # fmt: skip
                share = 3.5 if args.train else 2.5 if args.bwd else 1.0
                flops = share * 4 * batch * 4 * seqlen * seqlen * 512 / (2 if causal else 1)
                dout = torch.randn_like(q)
                for name in ("ours", "pytorch"):
                    ours = name == "ours"
                    inside = flashsdpa.enable() if ours else contextlib.nullcontext()
                    if args.bwd:
                        with inside:
                            out = F.scaled_dot_product_attention(q, k, v, is_causal=causal)

                        def step() -> object:
                            return torch.autograd.grad(out, (q, k, v), dout, retain_graph=True)
                    elif args.train:

                        def step() -> object:
                            with flashsdpa.enable() if ours else contextlib.nullcontext():
                                out = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
                            return torch.autograd.grad(out, (q, k, v), dout)
                    else:

                        def step() -> object:
                            with torch.no_grad():
                                return (flashsdpa.attention(q, k, v, causal=causal) if ours
                                        else F.scaled_dot_product_attention(q, k, v, is_causal=causal))  # fmt: skip

                    ms = time_ms(step)
                    rows.setdefault((batch, seqlen, causal, name), []).append(flops / ms / 1e9)
                    if args.bwd:
                        del out
    what = "forward + backward" if args.train else "backward" if args.bwd else "forward, no grad"
    print(f"D 512 {what}, bf16, TFLOP/s (median of rounds; ratio = ours / PyTorch's SDPA)")
    for batch, seqlen in cases:
        for causal in (False, True):
            ours = statistics.median(rows[(batch, seqlen, causal, "ours")])
            theirs = statistics.median(rows[(batch, seqlen, causal, "pytorch")])
            print(f"B {batch} H 4 S {seqlen:5d} {'causal' if causal else '      '}  ours {ours:6.1f}  "
                  f"PyTorch {theirs:6.1f}  ratio {ours / theirs:.2f}x  (rounds: "
                  f"{', '.join(f'{x:.1f}' for x in rows[(batch, seqlen, causal, 'ours')])})")


if __name__ == "__main__":
    main()
