"""bwd_launch_spy.py: the launch configurations of the backward kernels PyTorch's cuDNN and flash
backends and flashsdpa run, read from torch.profiler's trace (kernel name, grid, block, registers
per thread, dynamic + static shared memory, GPU time), so their work splits can be compared without
hardware counters: the grid and block say how many keys (or queries) a CTA owns and how many
warpgroups compute, the registers and shared memory what each holds. Problems: B*S = 16k tokens,
H*D = 2048, bf16, (B, S, H, D) memory as the sweep; forward and backward, 3 iterations after a warm-up.

    python3 scripts/dev/bwd_launch_spy.py [--dims 128 64] [--seqlen 8192] [--json out.json]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import tempfile
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.profiler import ProfilerActivity, profile

import flashsdpa

BACKENDS: dict[str, Callable[[], Any]] = {
    "cudnn": lambda: sdpa_kernel(SDPBackend.CUDNN_ATTENTION),
    "flash": lambda: sdpa_kernel(SDPBackend.FLASH_ATTENTION),
    "flashsdpa": flashsdpa.enable,
    # The direct API (no SDPA in between): session 17's spy saw a 94 us copy kernel (64 MiB) in
    # the flash-op road's step, ours and PyTorch flash's alike, and none in cuDNN's; this row says
    # whether our own road has it.
    "direct": contextlib.nullcontext,
}


def kernels(backend: str, d: int, s: int, causal: bool) -> list[dict[str, Any]]:
    b, h = max(1, 16384 // s), 2048 // d
    q, k, v = (torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16).transpose(1, 2).requires_grad_()
               for _ in range(3))  # fmt: skip
    dout = torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16)

    def step() -> None:
        # The backward inside the context too: after leaving enable() PyTorch's flash backward runs
        # on our forward's outputs (docs/usage.md), which session 17's first run of this script saw.
        with BACKENDS[backend]():
            if backend == "direct":
                out = flashsdpa.attention(q, k, v, causal=causal)
            else:
                out = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
            torch.autograd.grad(out, (q, k, v), dout)

    step()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(3):
            step()
        torch.cuda.synchronize()
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "trace.json")
        prof.export_chrome_trace(path)
        with open(path) as f:
            events = json.load(f)["traceEvents"]
    rows: dict[str, dict[str, Any]] = {}
    for e in events:
        if e.get("cat") != "kernel":
            continue
        a = e.get("args", {})
        row = rows.setdefault(e["name"], {"name": e["name"], "calls": 0, "us": 0.0, "grid": a.get("grid"),
                                          "block": a.get("block"), "regs": a.get("registers per thread"),
                                          "smem": (a.get("shared memory") or 0)})  # fmt: skip
        row["calls"] += 1
        row["us"] += float(e.get("dur", 0.0))
    for row in rows.values():
        row["us"] /= max(1, row["calls"])
    return sorted(rows.values(), key=lambda r: -r["us"] * r["calls"])


def _short(name: str) -> str:
    """The name's head and tail: cuDNN's generated names carry the tile ("..._64x128x128_4x1x1...")
    at the end, past the first 110 characters."""
    return name if len(name) <= 160 else f"{name[:60]}...{name[-100:]}"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--dims", type=int, nargs="+", default=[128, 64])
    parser.add_argument("--seqlen", type=int, default=8192)
    parser.add_argument("--json", help="also write every row here")
    args = parser.parse_args()
    out = []
    for d in args.dims:
        for causal in (False, True):
            for backend in BACKENDS:
                try:
                    found = kernels(backend, d, args.seqlen, causal)
                except RuntimeError as exc:  # e.g. a head dim this build has no kernel for
                    print(f"d{d} {'causal' if causal else 'dense '} {backend:9s} raised: {str(exc)[:120]}")
                    continue
                for r in found:
                    r.update(backend=backend, head_dim=d, causal=causal)
                    out.append(r)
                    print(f"d{d} {'causal' if causal else 'dense '} {backend:9s} {r['us']:9.1f} us x{r['calls'] // 3} "
                          f"grid {r['grid']} block {r['block']} regs {r['regs']} smem {r['smem']}  {_short(r['name'])}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
