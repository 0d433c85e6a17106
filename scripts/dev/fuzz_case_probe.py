"""fuzz_case_probe.py (session 34): the GPU fuzz example that failed dk on the d128 bucket (B 1, H 1,
Sq 1, Sk 2, D 8, Dv 112, bf16, no mask, seed 0: ours 1.230e-2 against the rule's 9.86e-3) and its
neighbours (other seeds), against the float64 textbook: ours, PyTorch's math SDPA in bf16 (the
rule's yardstick), PyTorch's efficient kernel (which, like ours and FlashAttention, takes delta =
dO . O from the bf16 output), and the kernels' dK arithmetic emulated with delta from our bf16 O
and with the exact delta, to say whether the miss is delta's, i.e. the rounded O's.
  PYTHONPATH=python python3 scripts/dev/fuzz_case_probe.py
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))
import flashsdpa  # noqa: E402

from helpers import Shape, default_scale, make_qkv, textbook_with_grads, torch_math_attention  # noqa: E402


def errors(shape: Shape, seed: int) -> str:
    gen = torch.Generator(device="cuda").manual_seed(seed)
    q, k, v = make_qkv(shape, torch.bfloat16, "cuda", generator=gen)
    for t in (q, k, v):
        t.requires_grad_()
    scale = default_scale(shape.head_dim)
    out, lse = flashsdpa.attention(q, k, v, scale=scale, return_lse=True)
    dout = torch.randn(out.shape, generator=gen, device="cuda").to(torch.bfloat16)
    ours = torch.autograd.grad(out, (q, k, v), dout)
    ref_out, _, ref = textbook_with_grads(q, k, v, dout, scale=scale, causal_mode=0)
    leaves = [t.detach().requires_grad_() for t in (q, k, v)]
    pt = torch.autograd.grad(torch_math_attention(*leaves, scale=scale, causal_mode=0), leaves, dout)
    leaves = [t.detach().requires_grad_() for t in (q, k, v)]
    with sdpa_kernel([SDPBackend.EFFICIENT_ATTENTION]):
        eff = torch.autograd.grad(F.scaled_dot_product_attention(*leaves, scale=scale), leaves, dout)
    # The kernels' arithmetic emulated in float32 (P from the LSE, dS = P (dP - delta) rounded to
    # bf16 for the dK product), once with delta = dO . O from our bf16 O (what every fused kernel
    # does) and once with the exact delta = sum_j P dP: which of the two gives ours' error.
    qd, kd, vd, od = (t.detach().float() for t in (q, k, v, out))
    p = torch.exp(qd @ kd.transpose(-1, -2) * scale - lse.unsqueeze(-1))
    dp = dout.float() @ vd.transpose(-1, -2)
    emul = {}
    for name, delta in (("O", (dout.float() * od).sum(-1, keepdim=True)),
                        ("exact", (p.double() * dp.double()).sum(-1, keepdim=True).float())):  # fmt: skip
        ds = (p * (dp - delta)).to(torch.bfloat16).float()
        emul[name] = (scale * ds.transpose(-1, -2) @ qd).to(torch.bfloat16)

    def err(g: torch.Tensor, r: torch.Tensor) -> float:
        return (g.double() - r.double().to(g.device)).abs().max().item()

    cells = []
    for i, name in enumerate(("dq", "dk", "dv")):
        cells.append(f"{name} ours {err(ours[i], ref[i]):.2e} math {err(pt[i], ref[i]):.2e} "
                     f"eff {err(eff[i], ref[i]):.2e}")  # fmt: skip
    cells.append(f"dk emulated, delta from O {err(emul['O'], ref[1]):.2e}, exact {err(emul['exact'], ref[1]):.2e}")
    return " | ".join(cells)


def main() -> None:
    for seed in range(6):
        print(f"seed {seed}: {errors(Shape('fuzz', 1, 1, 1, 1, 2, 8, 112), seed)}")
    print(f"D 64 Sk 2 seed 0: {errors(Shape('fuzz', 1, 1, 1, 1, 2, 64, 64), 0)}")


if __name__ == "__main__":
    main()
