"""hdim512_time.py (session 28): the head-dim-512 forward (cuda/sm90/fwd512_kernel_sm90.cuh)
against what PyTorch runs at D 512 without flashsdpa (its SDPA: flash and cuDNN refuse D > 256 on
torch 2.11, so the efficient kernel, or math with GQA), no grad, bf16, B*S = 16k, H 4 (H*D =
2048), CUDA events around 20 calls after 5 warm-up calls, median, rounds interleaved; TFLOP/s as
FlashAttention counts them (4 B H S^2 D, halved causal).
`--train` (session 32) times forward + backward instead (FLOPs 3.5x the forward's): ours is our
forward with PyTorch's efficient backward on its output (ops.py's _efficient_backward), SDPA inside
enable(); PyTorch's is its SDPA (efficient both ways).
  PYTHONPATH=python python3 scripts/dev/hdim512_time.py --rounds 3 [--train]
"""

from __future__ import annotations

import argparse
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
    ap.add_argument("--train", action="store_true", help="forward + backward (inputs require grad)")
    args = ap.parse_args()
    rows: dict[tuple[int, int, bool, str], list[float]] = {}
    cases = [(2, 8192), (8, 2048)]
    for _ in range(args.rounds):
        for batch, seqlen in cases:
            for causal in (False, True):
                q, k, v = (torch.randn(batch, 4, seqlen, 512, device="cuda", dtype=torch.bfloat16,
                                       requires_grad=args.train) for _ in range(3))  # fmt: skip
                flops = (3.5 if args.train else 1.0) * 4 * batch * 4 * seqlen * seqlen * 512 / (2 if causal else 1)
                dout = torch.randn_like(q)

                def step(ours: bool) -> object:
                    if not args.train:
                        with torch.no_grad():
                            return (flashsdpa.attention(q, k, v, causal=causal) if ours
                                    else F.scaled_dot_product_attention(q, k, v, is_causal=causal))  # fmt: skip
                    with flashsdpa.enable() if ours else torch.enable_grad():
                        out = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
                    return torch.autograd.grad(out, (q, k, v), dout)

                for name in ("ours", "pytorch"):
                    ms = time_ms(lambda: step(name == "ours"))
                    rows.setdefault((batch, seqlen, causal, name), []).append(flops / ms / 1e9)
    what = "forward + backward, inputs require grad" if args.train else "forward, no grad"
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
