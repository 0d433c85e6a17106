"""racecheck_probe.py (session 27): one attention shape, forward + backward, either on our kernels
(`ours`) or on PyTorch's math SDPA (`torch`), to run alone under compute-sanitizer: session 27's
racecheck of test_kernels' subset (--kernel-name kns=flashsdpa) stopped on "Internal Sanitizer
Error: The Sanitizer failed to handle a hardware exception" inside the test's math reference
(torch_math_attention) at san_short64 (1 x 2 x 600 x 64, causal), after our kernels had run and
synchronized; memcheck of the same subset read 0 errors. This asks which side raises it.

    compute-sanitizer --tool racecheck --kernel-name kns=flashsdpa python3 racecheck_probe.py torch
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import flashsdpa


def main() -> None:
    side = sys.argv[1]
    sq = int(sys.argv[2]) if len(sys.argv) > 2 else 600
    q, k, v = (torch.randn(1, 2, sq, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    if side == "ours":
        out, _ = flashsdpa.attention(q, k, v, causal=True, return_lse=True)
    elif side == "torch":
        with sdpa_kernel([SDPBackend.MATH]):
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    else:  # torch_reduced: the tests' reference (bf16 arithmetic in the math SDPA)
        sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
        from tests.helpers import torch_math_attention

        out = torch_math_attention(q, k, v, scale=64**-0.5, causal_mode=1, reduced_precision=True)
    torch.autograd.grad(out, (q, k, v), torch.randn_like(out))
    torch.cuda.synchronize()
    print(f"{side} {sq}: ok")


if __name__ == "__main__":
    main()
