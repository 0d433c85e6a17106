# bench/problems.py: what the benchmark measures and how a measurement is recorded.
#
# The backends side by side, the standard and quick sweeps (FlashAttention's: B * S = 16k tokens,
# H * D = 2048), the correctness rule's constants, one sweep point (Problem) with its FLOP count,
# one measured row (Result), sizes as the command line spells them, and the lazy access to
# flashsdpa itself that every part of the benchmark goes through.
"""The benchmark's backends, sweeps, problems and result rows."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Any

import torch
from torch.nn.attention import SDPBackend

EXIT_OK, EXIT_WRONG, EXIT_USAGE, EXIT_NO_KERNELS = 0, 1, 2, 3

DTYPES: dict[str, torch.dtype] = {
    "bf16": torch.bfloat16,
    "fp16": torch.float16,
    "fp32": torch.float32,
    "fp64": torch.float64,
}

OURS = ("flashsdpa", "flashsdpa-sdpa")
PYTORCH = {
    "torch-flash": SDPBackend.FLASH_ATTENTION,
    "torch-cudnn": SDPBackend.CUDNN_ATTENTION,
    "torch-efficient": SDPBackend.EFFICIENT_ATTENTION,
}
BACKENDS = (*OURS, *PYTORCH)

STANDARD_HEAD_DIMS = (64, 128, 256)
STANDARD_SEQLENS = (512, 1024, 2048, 4096, 8192, 16384)
QUICK_HEAD_DIMS = (128,)
QUICK_SEQLENS = (2048, 8192)
MEMORY_SEQLEN = 16384
RULE_FACTOR, RULE_ATOL = 2.0, 1e-5


def parse_count(text: str) -> int:
    """'8192', '8k' (8192) or '1M' (1048576): sizes on the command line."""
    scale = {"k": 1024, "m": 1024 * 1024}.get(text[-1:].lower(), 1)
    digits = text[:-1] if scale > 1 else text
    try:
        value = int(digits) * scale
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (examples: 512, 8k, 1M)") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"sizes are non-negative, got {text!r}")
    return value


@dataclass(frozen=True)
class Problem:
    """One sweep point: the batch and heads follow from the token and hidden budgets."""

    head_dim: int
    seqlen: int
    causal: bool
    batch: int
    heads: int

    def flops(self, direction: str) -> float:
        fwd = 4.0 * self.batch * self.heads * self.seqlen * self.seqlen * self.head_dim
        fwd /= 2 if self.causal else 1
        return fwd * (2.5 if direction == "bwd" else 1.0)

    @property
    def label(self) -> str:
        return f"D={self.head_dim} S={self.seqlen} {'causal' if self.causal else 'non-causal'}"


@dataclass
class Result:
    direction: str
    head_dim: int
    seqlen: int
    causal: bool
    batch: int
    heads: int
    backend: str
    ms: float | None = None
    tflops: float | None = None
    max_err: float | None = None  # vs the float32 reference, worst over out (fwd) or dq, dk, dv (bwd)
    err_ratio: float | None = None  # worst error / rule bound: <= 1 passes
    status: str = "ok"  # ok | WRONG | unsupported: ... | OOM | not served: ...


# ---- access to flashsdpa (imported lazily: `bench --help` must not need the compiled module) ------


def api() -> Any:
    """The flashsdpa package, imported on first use."""
    import flashsdpa

    return flashsdpa


def served_total() -> int:
    """How many calls flashsdpa's kernels have served so far (routers and flashsdpa's own ops).

    Proves that a row labelled flashsdpa-sdpa really ran our kernels and that rows labelled
    torch-* did not.
    """
    return int(api().stats()["served"])
