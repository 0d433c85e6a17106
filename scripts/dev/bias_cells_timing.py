"""bias_cells_timing.py: the bias summary's cost per call, kernel (_C.bias_cells, one launch) against
its torch reference (ops_masks._bias_cells_torch, 10-18 launches), on a GPU (development tool).

Per shape: host microseconds per call (wall time of 200 calls issued back to back, divided; the
GPU work of the small shapes is below it, so it is the host's) and GPU microseconds per call (CUDA
events around 50 calls after a synchronize, so the queue is full and launch gaps count), plus the
bytes the kernel reads and its rate. Shapes: the bench's key padding (B, 1, 1, S) at B S = 16k
(S 2k, 8k), a (B, 1, S, S) mask at B 8, S 2k (HF's causal + padding), (1, 1, S, S) at S 4k, in
bfloat16. docs/kernel_notes_features.md's "Bias summary in one launch" has the predictions.

    PYTHONPATH=python python3 scripts/dev/bias_cells_timing.py
"""

from __future__ import annotations

import time
from collections.abc import Callable

import torch
from torch import Tensor

from flashsdpa import _backend, ops_masks

SHAPES: tuple[tuple[str, tuple[int, ...], int, int], ...] = (
    ("key padding B 8 S 2k", (8, 1, 1, 2048), 2048, 2048),
    ("key padding B 2 S 8k", (2, 1, 1, 8192), 8192, 8192),
    ("(B, 1, S, S) B 8 S 2k", (8, 1, 2048, 2048), 2048, 2048),
    ("(1, 1, S, S) S 4k", (1, 1, 4096, 4096), 4096, 4096),
)


def host_us(fn: Callable[[], Tensor], calls: int = 200) -> float:
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    elapsed = time.perf_counter() - start
    torch.cuda.synchronize()
    return elapsed / calls * 1e6


def gpu_us(fn: Callable[[], Tensor], calls: int = 50) -> float:
    begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    begin.record()
    for _ in range(calls):
        fn()
    end.record()
    end.synchronize()
    return begin.elapsed_time(end) / calls * 1e3


def main() -> None:
    assert torch.cuda.is_available() and hasattr(_backend._C, "bias_cells") and _backend.CUDA_KERNELS
    print(f"{'shape':28} {'host us kernel / torch':>24} {'gpu us kernel / torch':>24} {'read MB':>8} {'TB/s':>6}")
    for name, shape, sq, sk in SHAPES:
        keep = torch.rand(shape, device="cuda") < 0.7
        bias = torch.zeros(shape, device="cuda", dtype=torch.bfloat16).masked_fill_(~keep, float("-inf"))
        kernel = lambda: ops_masks.bias_cells(bias, sq, sk)  # noqa: E731
        reference = lambda: ops_masks._bias_cells_torch(bias, sq, sk)  # noqa: E731
        assert torch.equal(kernel(), reference())
        for fn in (kernel, reference):  # warm-up
            fn()
        hk, ht = host_us(kernel), host_us(reference)
        gk, gt = gpu_us(kernel), gpu_us(reference)
        mb = bias.numel() * bias.element_size() / 1e6
        print(f"{name:28} {hk:11.1f} / {ht:10.1f} {gk:11.1f} / {gt:10.1f} {mb:8.2f} {mb / gk:6.2f}")


if __name__ == "__main__":
    main()
