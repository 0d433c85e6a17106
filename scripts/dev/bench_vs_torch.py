"""bench_vs_torch.py: runs fwd_check binaries' benchmarks and PyTorch's flash backend on the same
shapes, and prints TFLOP/s side by side.
Usage: python bench_vs_torch.py BIN[:MODE] ...   (MODE: bench (default) or bench_quick)"""
import subprocess
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel


def torch_flash_tflops(d, s, causal, dtype, bshd):
    b, h = 16384 // s, 2048 // d
    if bshd:
        q, k, v = (torch.randn(b, s, h, d, device="cuda", dtype=dtype).transpose(1, 2) for _ in range(3))
    else:
        q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=dtype) for _ in range(3))
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        for _ in range(5):
            F.scaled_dot_product_attention(q, k, v, is_causal=bool(causal))
        times = []
        for _ in range(20):
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record()
            F.scaled_dot_product_attention(q, k, v, is_causal=bool(causal))
            e1.record()
            e1.synchronize()
            times.append(e0.elapsed_time(e1))
    ms = sorted(times)[len(times) // 2]
    return 4.0 * b * h * s * s * d / (2 if causal else 1) / ms * 1e-9


def main():
    cache = {}
    print(f"{'binary':>16} {'config':>12} {'D':>4} {'S':>6} {'causal':>6} {'ours':>8} {'torch':>8} {'ratio':>6}")
    for arg in sys.argv[1:]:
        binary, _, mode = arg.partition(":")
        out = subprocess.run([binary, mode or "bench"], capture_output=True, text=True, check=True).stdout
        for line in out.splitlines():
            if not line.startswith("bench,") or line.startswith("bench,config"):
                continue
            _, name, d, s, causal, ms, tf = line.split(",")
            dtype = torch.float16 if name.startswith("fp16:") else torch.bfloat16
            key = (int(d), int(s), int(causal), dtype, "bshd:" in name)
            if key not in cache:
                cache[key] = torch_flash_tflops(*key)
            ref = cache[key]
            label = binary.rsplit("/", 1)[-1]
            print(f"{label:>16} {name:>12} {d:>4} {s:>6} {causal:>6} {float(tf):8.1f} {ref:8.1f} {float(tf) / ref:6.3f}")


if __name__ == "__main__":
    main()
