"""Repro of the GPU bad-input case 'head dims differ' (query/value 128, key 64) inside enable()."""
import torch
import torch.nn.functional as F

import flashsdpa

q = torch.randn(2, 4, 33, 128, device="cuda", dtype=torch.bfloat16)
k = torch.randn(2, 4, 47, 64, device="cuda", dtype=torch.bfloat16)
v = torch.randn(2, 4, 47, 128, device="cuda", dtype=torch.bfloat16)
print("default order", torch._C._get_sdp_priority_order(), flush=True)
try:
    F.scaled_dot_product_attention(q, k, v)
    torch.cuda.synchronize()
    print("outside: ok", flush=True)
except Exception as e:  # noqa: BLE001
    print("outside:", type(e).__name__, str(e).splitlines()[0], flush=True)
with flashsdpa.enable():
    print("enable order", torch._C._get_sdp_priority_order(), flush=True)
    try:
        F.scaled_dot_product_attention(q, k, v)
        torch.cuda.synchronize()
        print("inside: ok", flush=True)
    except Exception as e:  # noqa: BLE001
        print("inside:", type(e).__name__, str(e).splitlines()[0], flush=True)
