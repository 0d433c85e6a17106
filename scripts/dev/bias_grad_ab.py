"""bias_grad_ab.py (session 50): the bias gradient's float32 accumulator against the dense buffer,
in one process, interleaved rounds. Needs scripts/dev/ab/bias_grad_accumulate.patch applied (the
accumulator lost 4% and is not in the tree: kernel_notes_features.md, "The broadcast bias
gradient's bytes"). The SDPA row is not valid as written: its backward runs outside enable(). The direct API (flashsdpa.attention with a (1, H, S, S) bf16
bias that requires grad; ops_masks.accumulates() decides), B 8 x H 16 x S 2k, d128 (the bench's
additive-bias row's shape); the backward alone on a retained graph (autograd.grad), CUDA events,
median of the reps per round, ops_masks._BIAS_GRAD_DENSE flipped between modes (what
FLASHSDPA_BIAS_GRAD=dense sets). TFLOP/s counted dense (2.5 x 4 B H S^2 D). The SDPA row: the same
call through SDPA inside enable() (the masked routers, whose bias arrives expanded to (B, H, S, S):
always the dense buffer).

    python3 scripts/dev/bias_grad_ab.py [--rounds 5] [--head-dim 128] [--seqlen 2048]
"""

from __future__ import annotations

import argparse
import statistics

import torch
import torch.nn.functional as F

import flashsdpa
from flashsdpa import masks, ops_masks
from flashsdpa.bench.timing import time_cuda_ms


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--head-dim", type=int, default=128)
    parser.add_argument("--seqlen", type=int, default=2048)
    args = parser.parse_args()
    d, s = args.head_dim, args.seqlen
    b, h = max(1, 16384 // s), 2048 // d
    flops = 2.5 * 4.0 * b * h * s * s * d
    rates: dict[str, list[float]] = {"dense": [], "accumulate": [], "sdpa": []}
    for rnd in range(args.rounds):
        gen = torch.Generator(device="cuda").manual_seed(rnd)
        q, k, v, dout = (torch.randn(b, h, s, d, generator=gen, device="cuda").to(torch.bfloat16) for _ in range(4))
        bias = torch.randn(1, h, s, s, generator=gen, device="cuda").to(torch.bfloat16)
        leaves = [t.requires_grad_() for t in (q, k, v, bias.requires_grad_())]
        modes = ["dense", "accumulate", "sdpa"]
        for mode in modes[rnd % 3:] + modes[: rnd % 3]:
            ops_masks._BIAS_GRAD_DENSE = mode == "dense"
            if mode == "sdpa":
                with flashsdpa.enable():
                    out = F.scaled_dot_product_attention(q, k, v, attn_mask=bias)
            else:
                out = flashsdpa.attention(q, k, v, attn_mask=bias)
            grads = torch.autograd.grad(out, leaves, dout, retain_graph=True)
            assert grads[3].shape == bias.shape
            ms = time_cuda_ms([lambda: torch.autograd.grad(out, leaves, dout, retain_graph=True)], warmup=5, reps=20)
            rates[mode].append(flops / ms * 1e-9)
            del out, grads
    acc = ops_masks.accumulates(q, v, bias, masks.NO_MASK, (0.0, None, None, bias))
    print(f"bias grad d{d} S {s} B {b}: accumulator used where asked: {acc}")
    for mode, vals in rates.items():
        print(f"  {mode:<11} bwd TFLOP/s median {statistics.median(vals):7.1f}  rounds " + " ".join(f"{x:.1f}" for x in vals))
    ratios = [a / dn for a, dn in zip(rates["accumulate"], rates["dense"])]
    print(f"  accumulate / dense (rate) per round: " + " ".join(f"{x:.3f}" for x in ratios) +
          f"; median {statistics.median(ratios):.3f}")


if __name__ == "__main__":
    main()
