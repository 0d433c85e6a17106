"""hdim512_time.py (session 28): the head-dim-512 forward (cuda/sm90/fwd512_kernel_sm90.cuh)
against what PyTorch runs at D 512 without flashsdpa (its SDPA: flash and cuDNN refuse D > 256 on
torch 2.11, so the efficient kernel, or math with GQA), no grad, bf16, B*S = 16k, H 4 (H*D =
2048), CUDA events around 20 calls after 5 warm-up calls, median, rounds interleaved; TFLOP/s as
FlashAttention counts them (4 B H S^2 D, halved causal).
`--train` (session 32) times forward + backward instead (FLOPs 3.5x the forward's): ours is our
forward with PyTorch's efficient backward on its output (ops.py's _efficient_backward), SDPA inside
enable(); PyTorch's is its SDPA (efficient both ways). It times the road at every length: the
length rule that keeps SDPA's short training calls on PyTorch (roads.ROAD_MIN_KEYS, session 33) is
lowered to 1 for "ours". `--road-asis` (session 33, for the next A/B) adds a third column, the road
with its (B, S, H, D) copies left out (ops._bsdh as the identity: PyTorch's efficient backward takes
any strides with a contiguous last dimension), interleaved with the other two.
  PYTHONPATH=python python3 scripts/dev/hdim512_time.py --rounds 3 [--train [--road-asis]] [--seqlens 2048 4096 8192]
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Callable

import torch
import torch.nn.functional as F

import flashsdpa
from flashsdpa import ops, roads


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
    ap.add_argument("--road-asis", action="store_true", help="with --train: also the road without its copies")
    ap.add_argument("--seqlens", type=int, nargs="+", default=[8192, 2048])
    args = ap.parse_args()
    rows: dict[tuple[int, int, bool, str], list[float]] = {}
    cases = [(max(1, 16384 // s), s) for s in args.seqlens]
    names = ["ours", "pytorch"] + (["asis"] if args.train and args.road_asis else [])
    roads.ROAD_MIN_KEYS = 1  # time the road at every length (SDPA's length rule would skip it)
    copy = ops._bsdh
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

                for name in names:
                    ops._bsdh = (lambda t: t) if name == "asis" else copy  # type: ignore[assignment]
                    ms = time_ms(lambda: step(name != "pytorch"))
                    rows.setdefault((batch, seqlen, causal, name), []).append(flops / ms / 1e9)
                ops._bsdh = copy
    what = "forward + backward, inputs require grad" if args.train else "forward, no grad"
    print(f"D 512 {what}, bf16, TFLOP/s (median of rounds; ratio = ours / PyTorch's SDPA)")
    for batch, seqlen in cases:
        for causal in (False, True):
            ours = statistics.median(rows[(batch, seqlen, causal, "ours")])
            theirs = statistics.median(rows[(batch, seqlen, causal, "pytorch")])
            asis = (f"  as-is road {statistics.median(rows[(batch, seqlen, causal, 'asis')]):6.1f}"
                    if "asis" in names else "")  # fmt: skip
            print(f"B {batch} H 4 S {seqlen:5d} {'causal' if causal else '      '}  ours {ours:6.1f}  "
                  f"PyTorch {theirs:6.1f}  ratio {ours / theirs:.2f}x{asis}  (rounds: "
                  f"{', '.join(f'{x:.1f}' for x in rows[(batch, seqlen, causal, 'ours')])})")


if __name__ == "__main__":
    main()
