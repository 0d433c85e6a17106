"""bwd_ncu.py: one forward + backward step of one backend, for Nsight Compute to profile the
backward's main kernel (scripts/dev/bwd_ncu.sh): B*S = 16k tokens, H*D = 2048, bf16, (B, S, H, D)
memory as the sweep. Two warm-up steps, then one step between cudaProfilerStart / Stop (ncu runs
with --profile-from-start off), so only that step's kernels are profiled.

    python3 scripts/dev/bwd_ncu.py --backend flashsdpa|cudnn [--head-dim 128] [--seqlen 8192] [--causal] [--bias]

--bias adds an additive bf16 attn_mask (1, H, S, S) that requires grad (issue 14's bias row: our
bias backward 234 TFLOP/s against the 300 bar), which SDPA sends to its cuDNN / efficient ops.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import flashsdpa

BACKENDS: dict[str, Callable[[], Any]] = {
    "cudnn": lambda: sdpa_kernel(SDPBackend.CUDNN_ATTENTION),
    "flash": lambda: sdpa_kernel(SDPBackend.FLASH_ATTENTION),
    "flashsdpa": flashsdpa.enable,
}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--backend", choices=sorted(BACKENDS), required=True)
    parser.add_argument("--head-dim", type=int, default=128)
    parser.add_argument("--seqlen", type=int, default=8192)
    parser.add_argument("--causal", action="store_true")
    parser.add_argument("--bias", action="store_true")
    args = parser.parse_args()
    s, d = args.seqlen, args.head_dim
    b, h = max(1, 16384 // s), 2048 // d
    q, k, v = (torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16).transpose(1, 2).requires_grad_()
               for _ in range(3))  # fmt: skip
    dout = torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16)
    bias = torch.randn(1, h, s, s, device="cuda", dtype=torch.bfloat16).requires_grad_() if args.bias else None
    leaves = (q, k, v) if bias is None else (q, k, v, bias)

    def step() -> None:
        with BACKENDS[args.backend]():
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=bias, is_causal=args.causal and bias is None)
            torch.autograd.grad(out, leaves, dout)

    for _ in range(2):
        step()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStart()
    step()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStop()
    if args.backend == "flashsdpa":
        print(flashsdpa.stats())


if __name__ == "__main__":
    main()
