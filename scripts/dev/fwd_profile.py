"""fwd_profile.py: forwards of ours (flashsdpa.attention, the sm90 family on an H100/H200) and of
PyTorch's cuDNN backend on one shape of the standard sweep (B*S = 16k, H*D = 2048, bf16, the
(B, S, H, D) memory the benchmark uses), for ncu: the next step on the forward's causal 2k gap
(0.90x cuDNN, docs/kernel_notes_fwd_sm90.md "Next").

    ncu --clock-control none -k regex:'fwd_sm90|cudnn|sm90_xmma|flash' python scripts/dev/fwd_profile.py D S CAUSAL [HKV [B]]

HKV: key / value heads (GQA; default: as many as the query heads); B: the batch (default 16k / S).
"""

import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import flashsdpa

d, s, causal = int(sys.argv[1]), int(sys.argv[2]), bool(int(sys.argv[3]))
b, h = max(1, 16384 // s), 2048 // d
hkv = int(sys.argv[4]) if len(sys.argv) > 4 else h
b = int(sys.argv[5]) if len(sys.argv) > 5 else b
q = torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16).transpose(1, 2)
k, v = (torch.randn(b, s, hkv, d, device="cuda", dtype=torch.bfloat16).transpose(1, 2) for _ in range(2))
for _ in range(3):
    flashsdpa.attention(q, k, v, causal=causal)
    with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
        F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=hkv != h)
torch.cuda.synchronize()
