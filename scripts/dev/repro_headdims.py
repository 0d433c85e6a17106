"""Repro of the GPU bad-input case 'head dims differ' (query/value 128, key 64), outside and then
inside enable(). On torch 2.11 (H200) the second call of this shape crashed inside PyTorch's cuDNN
SDPA (run_cudnn_SDP_fprop); run it under `cuda-gdb -batch -ex run -ex bt --args python3 ...`."""
import torch
import torch.nn.functional as F

import flashsdpa

q = torch.randn(2, 4, 33, 128, device="cuda", dtype=torch.bfloat16)
k = torch.randn(2, 4, 47, 64, device="cuda", dtype=torch.bfloat16)
v = torch.randn(2, 4, 47, 128, device="cuda", dtype=torch.bfloat16)


def attempt(label: str) -> None:
    print(label, "priority order", torch._C._get_sdp_priority_order(), flush=True)
    try:
        F.scaled_dot_product_attention(q, k, v)
        torch.cuda.synchronize()
        print(label, "ok", flush=True)
    except Exception as e:  # noqa: BLE001 - the repro reports whatever PyTorch raises
        print(label, type(e).__name__, str(e).splitlines()[0], flush=True)


attempt("outside")
with flashsdpa.enable():
    attempt("inside")
