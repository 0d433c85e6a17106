"""bias_profile.py: where the additive-bias forward's time goes (development tool, a GPU).

The bench's additive-bias row ((1, H, S, S) bf16 bias, B 8, H 16, S 2k, D 128) runs at ~112 TFLOP/s
(2.46 ms) through SDPA inside enable(), where the bias bytes alone (134 MB per batch row, ~1.07 GB
if L2 keeps none of it) would take ~0.3 ms. Per variant (the bias's shape and strides, through
SDPA and through flashsdpa.attention directly): ms per call (CUDA events, median of 10), and a
torch.profiler table of the kernels of one call, so the kernel's time is told apart from copies.

    PYTHONPATH=python python3 scripts/dev/bias_profile.py
"""

from __future__ import annotations

import statistics
from collections.abc import Callable

import torch
import torch.nn.functional as F

import flashsdpa

B, H, S, D = 8, 16, 2048, 128
FLOP = 4 * B * H * S * S * D


def ms(fn: Callable[[], object], reps: int = 10) -> float:
    for _ in range(3):
        fn()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b))
    return statistics.median(times)


def kernels(fn: Callable[[], object]) -> str:
    fn()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return prof.key_averages().table(sort_by="cuda_time_total", row_limit=6, max_name_column_width=90)


def main() -> None:
    torch.manual_seed(0)
    q, k, v = (torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    bias1 = torch.randn(1, H, S, S, device="cuda", dtype=torch.bfloat16)
    variants = {
        "(1,H,S,S)": bias1,
        "(B,H,S,S) contiguous": bias1.expand(B, H, S, S).contiguous(),
        "(1,1,S,S)": bias1[:, :1].contiguous(),
        "zeros (1,H,S,S)": torch.zeros_like(bias1),
    }
    with torch.no_grad():
        plain = ms(lambda: flashsdpa.attention(q, k, v))
        print(f"no bias (flashsdpa.attention): {plain:.3f} ms, {FLOP / plain / 1e9:.1f} TFLOP/s")
        for name, bias in variants.items():
            with flashsdpa.enable():
                t_sdpa = ms(lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=bias))
            t_direct = ms(lambda: flashsdpa.attention(q, k, v, attn_mask=bias))
            print(f"{name:24s} SDPA in enable() {t_sdpa:.3f} ms ({FLOP / t_sdpa / 1e9:.1f} TFLOP/s), "
                  f"flashsdpa.attention {t_direct:.3f} ms ({FLOP / t_direct / 1e9:.1f})")
        for backend in ("EFFICIENT_ATTENTION",):
            from torch.nn.attention import SDPBackend, sdpa_kernel
            with sdpa_kernel([getattr(SDPBackend, backend)]):
                t = ms(lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=bias1))
            print(f"torch {backend} (1,H,S,S): {t:.3f} ms ({FLOP / t / 1e9:.1f})")
        with flashsdpa.enable():
            print(kernels(lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=bias1)))


if __name__ == "__main__":
    main()
