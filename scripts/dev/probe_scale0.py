# probe_scale0.py: scale 0 with a causal mask, by route and alignment: NaN counts of out, LSE and
# the gradients (the extreme suite's "scale 0, causal" through SDPA gave dk NaN in rows 1..47).
import torch
import torch.nn.functional as F

import flashsdpa

g = torch.Generator(device="cuda").manual_seed(0)
q, k, v, do = (torch.randn(1, 2, 48, 64, generator=g, device="cuda").bfloat16() for _ in range(4))


def report(name, out, lse, grads):
    nan = lambda t: int(torch.isnan(t.float()).sum()) if t is not None else -1  # noqa: E731
    print(f"{name:40s} out {nan(out)} lse {nan(lse)} dq {nan(grads[0])} dk {nan(grads[1])} dv {nan(grads[2])}"
          + ("" if lse is None else f" lse[0,0,:4] {lse[0, 0, :4].tolist()}"))


for align in ("top_left", "bottom_right"):
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    out, lse = flashsdpa.attention(*leaves, causal=True, causal_alignment=align, scale=0.0, return_lse=True)
    report(f"attention causal {align}", out, lse, torch.autograd.grad(out, leaves, do))
for grad in (False, True):
    leaves = [t.clone().requires_grad_(grad) for t in (q, k, v)]
    with flashsdpa.enable():
        out = F.scaled_dot_product_attention(*leaves, is_causal=True, scale=0.0)
        grads = torch.autograd.grad(out, leaves, do) if grad else (None, None, None)
    report(f"sdpa in enable, grad {grad}", out, None, grads)
with flashsdpa.enable():
    o, lse, *_ = torch.ops.aten._scaled_dot_product_flash_attention(q, k, v, 0.0, True, False, scale=0.0)
    report("aten flash op in enable", o, lse, (None, None, None))
    res = torch.ops.aten._scaled_dot_product_flash_attention_backward(
        do, q, k, v, o, lse, None, None, 48, 48, 0.0, True, torch.zeros(2, dtype=torch.uint64, device="cuda"),
        torch.zeros((), dtype=torch.uint64, device="cuda"), scale=0.0)
    report("aten flash bwd op in enable", None, None, res)
