"""masks_timing.py: attn_mask on our kernels against PyTorch's own SDPA (cuDNN / efficient, whatever
it picks outside enable()), one process, issue 14's rows: a key-padding mask (B, 1, 1, S) with each
sequence's kept length uniform in [S/2, S], B*S = 16k, H 16, D 128, S 2k and 8k; an additive bias
(1, H, S, S) with its gradient at S 2k. bf16, TFLOP/s with FLOPs counted dense (backward 2.5x the
forward), as the issue's bars count them. Ours: flashsdpa::fwd_masked / bwd_masked (the ops the
direct API and the masked SDPA routers launch); PyTorch: F.scaled_dot_product_attention.

    PYTHONPATH=python python3 scripts/dev/masks_timing.py [--reps 20]
"""
from __future__ import annotations

import argparse
import math
from collections.abc import Callable

import torch
import torch.nn.functional as F

import flashsdpa  # noqa: F401  (registers the flashsdpa:: ops)
from flashsdpa.bench.timing import time_cuda_ms
from flashsdpa.features import additive


def time_ms(fn: Callable[[], object], reps: int) -> float:
    return time_cuda_ms([fn], warmup=3, reps=reps)


def row(name: str, s: int, mask: torch.Tensor, grad_mask: bool, reps: int) -> None:
    b, h, d = 16384 // s, 16, 128
    gen = torch.Generator(device="cuda").manual_seed(0)
    q, k, v, dout = (torch.randn(b, h, s, d, generator=gen, device="cuda", dtype=torch.bfloat16) for _ in range(4))
    scale = 1 / math.sqrt(d)
    flops = 4 * b * h * s * s * d
    bias = additive(mask, torch.bfloat16)
    ops = torch.ops.flashsdpa
    out, lse = ops.fwd_masked.default(q, k, v, bias, scale, [-1, -1, 0], 0.0, None, None)
    fwd = time_ms(lambda: ops.fwd_masked.default(q, k, v, bias, scale, [-1, -1, 0], 0.0, None, None), reps)
    want = [False, False, grad_mask]
    bwd = time_ms(lambda: ops.bwd_masked.default(dout, q, k, v, out, lse, bias, scale, [-1, -1, 0], 0.0, None, None,
                                                 want), reps)  # fmt: skip
    # PyTorch: its own SDPA backend choice for a masked call (outside enable()).
    qs, ks, vs = (t.detach().requires_grad_() for t in (q, k, v))
    m = bias.detach().clone().requires_grad_(grad_mask) if grad_mask else mask
    t_fwd = time_ms(lambda: F.scaled_dot_product_attention(qs, ks, vs, attn_mask=m), reps)
    o = F.scaled_dot_product_attention(qs, ks, vs, attn_mask=m)
    inputs = (qs, ks, vs, m) if grad_mask else (qs, ks, vs)
    t_bwd = time_ms(lambda: torch.autograd.grad(o, inputs, dout, retain_graph=True), reps)
    tf = lambda ms, mult=1.0: mult * flops / ms / 1e9  # noqa: E731
    print(f"{name:<34} {s:>5} {tf(fwd):8.1f} {tf(bwd, 2.5):8.1f} {tf(t_fwd):10.1f} {tf(t_bwd, 2.5):10.1f}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--reps", type=int, default=20)
    args = parser.parse_args()
    print("bf16, H 16, D 128, B*S = 16k, TFLOP/s (dense FLOPs; backward 2.5x)")
    print(f"{'case':<34} {'S':>5} {'ours fwd':>8} {'ours bwd':>8} {'torch fwd':>10} {'torch bwd':>10}")
    gen = torch.Generator(device="cuda").manual_seed(1)
    for s in (2048, 8192):
        b = 16384 // s
        kept = torch.randint(s // 2, s + 1, (b,), generator=gen, device="cuda")
        pad = (torch.arange(s, device="cuda")[None, :] < kept[:, None]).view(b, 1, 1, s)
        row("key padding (B,1,1,S) bool", s, pad, False, args.reps)
    s = 2048
    bias = torch.randn(1, 16, s, s, generator=gen, device="cuda", dtype=torch.bfloat16)
    row("additive bias (1,H,S,S) + grad", s, bias, True, args.reps)


if __name__ == "__main__":
    main()
