"""overhead_check.py: the bench's overhead measurement in a fresh process, with flashsdpa.stats()
afterwards (which road the calls took), and the same loop with and without the bench's
warnings.catch_warnings() around it. Development tool for the GPU machine."""

import time
import warnings

import torch
import torch.nn.functional as F

import flashsdpa
from flashsdpa import bench

r = bench._overhead_us(torch.bfloat16, rounds=21)
print({k: r[k] for k in ("us_per_call", "shim_overhead_us", "grad_us_per_call", "grad_shim_overhead_us")})
print(flashsdpa.stats()["ops"])
q, k, v = (torch.randn(1, 4, 64, 64, device="cuda", dtype=torch.bfloat16) for _ in range(3))


def loop(n: int = 2000) -> float:
    for _ in range(100):
        F.scaled_dot_product_attention(q, k, v, is_causal=False)
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(n):
        F.scaled_dot_product_attention(q, k, v, is_causal=False)
    torch.cuda.synchronize()
    return (time.perf_counter() - t) / n * 1e6


with torch.no_grad():
    for _ in range(3):
        with flashsdpa.enable():
            plain = loop()
        with warnings.catch_warnings(), flashsdpa.enable():
            warnings.simplefilter("ignore")
            caught = loop()
        with torch.nn.attention.sdpa_kernel([torch.nn.attention.SDPBackend.FLASH_ATTENTION]):
            torch_flash = loop()
        print(f"enable(): {plain:.2f} us, with catch_warnings: {caught:.2f} us, torch flash: {torch_flash:.2f} us")
