"""varlen_timing.py: the varlen forward's time on the family the table picks (on an H200, sm90)
against the portable family (run the script again with FLASHSDPA_FAMILY=sm80: the variable is read
once per process). Packed sequences of mixed lengths, 16k tokens in all, H 16 / 4 (GQA), D 128,
bf16, causal and not; median ms of the forward through flashsdpa.attention_varlen (no grad),
CUDA events. Prints one CSV row per case, prefixed with the family that served it.

    PYTHONPATH=python python3 scripts/dev/varlen_timing.py
    FLASHSDPA_FAMILY=sm80 PYTHONPATH=python python3 scripts/dev/varlen_timing.py
"""
from __future__ import annotations

import os

import torch

import flashsdpa
from flashsdpa.bench.timing import time_cuda_ms


def main() -> None:
    gen = torch.Generator().manual_seed(0)
    family = os.environ.get("FLASHSDPA_FAMILY", "default")
    for name, lengths in (
        ("mixed 100-4000", torch.randint(100, 4000, (8,), generator=gen).tolist()),
        ("8 x 2048", [2048] * 8),
        ("64 x 256", [256] * 64),
    ):
        total = sum(lengths)
        cu = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32, device="cuda")
        q = torch.randn(total, 16, 128, device="cuda", dtype=torch.bfloat16)
        k, v = (torch.randn(total, 4, 128, device="cuda", dtype=torch.bfloat16) for _ in "kv")
        for causal in (False, True):
            def fwd() -> object:
                return flashsdpa.attention_varlen(q, k, v, cu, cu, max(lengths), max(lengths), causal=causal)

            ms = time_cuda_ms([fwd], warmup=5, reps=30)
            flops = sum(4.0 * 16 * s * s * 128 / (2 if causal else 1) for s in lengths)
            print(f"varlen,{family},{name},causal{int(causal)},{ms:.4f} ms,{flops / ms * 1e-9:.1f} TFLOP/s")


if __name__ == "__main__":
    main()
