"""bwd_profile.py: one backward of ours and of PyTorch's flash backend on one shape, for ncu.

    ncu --clock-control none -k regex:'dkdv|dq_dk_dv' python scripts/dev/bwd_profile.py D S CAUSAL
"""
import math
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
import torch  # noqa: E402

import bwd_check as bc  # noqa: E402

d, s, causal = int(sys.argv[1]), int(sys.argv[2]), bool(int(sys.argv[3]))
b, h = max(1, 16384 // s), 2048 // d
q, k, v, do = (torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16) for _ in range(4))
scale = 1.0 / math.sqrt(d)
out = torch.ops.aten._scaled_dot_product_flash_attention(q, k, v, 0.0, causal, False, scale=scale)
dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
for _ in range(2):
    bc.dense_bwd(do, q, k, v, out[0], out[1], dq, dk, dv, scale, int(causal))
    torch.ops.aten._scaled_dot_product_flash_attention_backward(
        do, q, k, v, out[0], out[1], out[2], out[3], out[4], out[5], 0.0, causal, out[6], out[7], scale=scale)
torch.cuda.synchronize()
