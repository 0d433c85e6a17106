# bench/problems.py: what the benchmark measures and how a measurement is recorded.
#
# The backends side by side, the standard and quick sweeps (FlashAttention's: B * S = 16k tokens,
# H * D = 2048), the correctness rule's constants, one sweep point (Problem) with its FLOP count,
# one measured row (Result), sizes as the command line spells them, and the lazy access to
# flashsdpa itself that every part of the benchmark goes through.
"""The benchmark's backends, sweeps, problems and result rows."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.nn.attention import SDPBackend

EXIT_OK, EXIT_WRONG, EXIT_USAGE, EXIT_NO_KERNELS, EXIT_PART_FAILED = 0, 1, 2, 3, 4

# Where the GPU path puts its tensors. The CPU tests set it to "cpu" (with fake CUDA events) to
# drive the whole GPU path through tiny shapes before a scarce GPU run does.
DEVICE = "cuda"

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
# PyTorch's own choice, no sdpa_kernel around the call: what a user gets without opting in.
TORCH_DEFAULT = "torch-default"
# FlashAttention-4 (flash_attn.cute, the flash-attn-4 package): measured where it imports; where it
# does not, its anchor values (anchors.py) stand in as a labelled column, never as a measurement.
FA4 = "fa4"
THEIRS = (*PYTORCH, TORCH_DEFAULT, FA4)  # every backend that is not ours
TORCH_ALL = (*PYTORCH, TORCH_DEFAULT)  # PyTorch's backends: "best of PyTorch" is over these
BACKENDS = (*OURS, *PYTORCH, TORCH_DEFAULT, FA4)

STANDARD_HEAD_DIMS = (64, 128, 256)
STANDARD_SEQLENS = (512, 1024, 2048, 4096, 8192, 16384)
QUICK_HEAD_DIMS = (128,)
QUICK_SEQLENS = (2048, 8192)
MEMORY_SEQLEN = 16384
# A ratio bar is judged on the median of at least three interleaved rounds in one process.
DEFAULT_ROUNDS, QUICK_ROUNDS = 3, 1
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
    status: str = "ok"  # ok | WRONG | unsupported: ... | OOM | not served: ... | error: ...
    # One entry per interleaved round (None where that round did not run it); ms and tflops above
    # are the median round's. Empty for a row measured once outside the rounds.
    round_ms: list[float | None] = field(default_factory=list)
    round_tflops: list[float | None] = field(default_factory=list)


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
