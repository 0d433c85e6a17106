"""bad_inputs_probe.py: the cases of test_sdpa_inside_enable_on_cuda outside enable() in a fresh
process, with what each call returned (session 29, H200, torch 2.11: run alone, the test failed on
the zero-batch case, whose SDPA returned None, an undefined tensor; in the whole suite it passes).
Then the zero batch under each backend forced, twice. `--no-import`: without importing flashsdpa
(is it PyTorch's own?).

    python3 scripts/dev/bad_inputs_probe.py [--no-import]
"""

from __future__ import annotations

import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

if "--no-import" not in sys.argv:
    import flashsdpa  # noqa: F401 - as the test: imported, not active

BF16 = torch.bfloat16


def qkv(hkv: int = 4, sk: int = 47, d: int = 128) -> tuple[torch.Tensor, ...]:
    return (torch.randn(2, 4, 33, d, device="cuda", dtype=BF16), torch.randn(2, hkv, sk, d, device="cuda", dtype=BF16),
            torch.randn(2, hkv, sk, d, device="cuda", dtype=BF16))  # fmt: skip


def show(name: str, call: object) -> None:
    try:
        r = call()  # type: ignore[operator]
        torch.cuda.synchronize()
        print(name, "->", type(r).__name__, None if r is None else tuple(r.shape))
    except Exception as exc:  # noqa: BLE001 - the probe reports every outcome
        print(name, "->", type(exc).__name__, str(exc).splitlines()[0][:150])


q, k, v = qkv()
sdpa = F.scaled_dot_product_attention
cases = {
    "served": lambda: sdpa(q, k, v, is_causal=True),
    "float32": lambda: sdpa(q.float(), k.float(), v.float()),
    "dropout": lambda: sdpa(q, k, v, dropout_p=0.5),
    "head_dim 100": lambda: sdpa(*qkv(d=100)),
    "head_dim 512": lambda: sdpa(*qkv(d=512)),
    "mixed dtypes": lambda: sdpa(q, k.half(), v),
    "head dims differ": lambda: sdpa(q, k[..., :64], v),
    "gqa without the flag": lambda: sdpa(q, k[:, :2], v[:, :2]),
    "zero batch": lambda: sdpa(q[:0], k[:0], v[:0]),
}
for name, call in cases.items():
    show(name, call)
for backend in (SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH):
    for attempt in (1, 2):
        with sdpa_kernel([backend]):
            show(f"zero batch, {backend.name}, call {attempt}", lambda: sdpa(q[:0], k[:0], v[:0]))
