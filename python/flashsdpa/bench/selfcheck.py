# bench/selfcheck.py: what `python -m flashsdpa bench` runs on a machine without a CUDA GPU.
#
# flashsdpa.attention on CPU (the blockwise reference) against PyTorch's math SDPA, forward and
# backward, with the project's rule; and SDPA inside flashsdpa.enable() unchanged on CPU.
"""The CPU self-check of the shim."""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.nn.attention import SDPBackend, sdpa_kernel

from flashsdpa.bench.problems import EXIT_OK, EXIT_WRONG, RULE_ATOL, RULE_FACTOR, api

_SELF_CHECK_CASES: tuple[tuple[str, int, int, int, int, int, int, int, str | None, torch.dtype], ...] = (
    ("square", 2, 4, 4, 128, 128, 64, 64, None, torch.float32),
    ("causal gqa", 1, 8, 2, 113, 239, 64, 64, "top_left", torch.float32),
    ("kv-cache", 2, 4, 4, 239, 113, 32, 32, "bottom_right", torch.float32),
    ("decode mqa", 1, 8, 1, 1, 1023, 128, 128, "bottom_right", torch.bfloat16),
    ("dv != dqk", 1, 4, 4, 7, 7, 16, 32, None, torch.float16),
    ("awkward", 1, 2, 2, 1023, 1023, 8, 8, "top_left", torch.bfloat16),
)


def _math_with_lse(
    q: Tensor, k: Tensor, v: Tensor, scale: float, visible: Tensor | None, dout: Tensor
) -> tuple[Tensor, Tensor, tuple[Tensor, ...]]:
    """PyTorch's math SDPA (output, gradients) plus the LSE of the same scores, in the inputs' dtype
    (fp16/bf16 upcast to float32 by the math backend)."""
    q, k, v = (t.detach().requires_grad_() for t in (q, k, v))
    gqa = q.shape[1] != k.shape[1]
    with sdpa_kernel([SDPBackend.MATH]):
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=visible, scale=scale, enable_gqa=gqa)
    grads = torch.autograd.grad(out, (q, k, v), dout)
    acc = torch.float64 if q.dtype == torch.float64 else torch.float32
    kk = k.detach().to(acc).repeat_interleave(q.shape[1] // k.shape[1], dim=1)
    scores = (q.detach().to(acc) @ kk.transpose(-1, -2)) * scale
    if visible is not None:
        scores = scores.masked_fill(~visible, float("-inf"))
    lse = torch.logsumexp(scores, dim=-1)
    return out.detach(), lse.masked_fill(lse == float("-inf"), float("inf")), grads


def _err(ours: Tensor, ref: Tensor) -> float:
    if ours.numel() == 0:
        return 0.0
    ours, ref = ours.detach().double(), ref.detach().double()
    finite = torch.isfinite(ref)
    if not torch.equal(torch.isfinite(ours), finite) or not torch.equal(ours[~finite], ref[~finite]):
        return math.inf
    return (ours[finite] - ref[finite]).abs().max().item() if bool(finite.any()) else 0.0


def self_check() -> int:
    """flashsdpa.attention on CPU (the blockwise reference) against PyTorch's math SDPA, forward and
    backward, with the project's rule; and SDPA inside flashsdpa.enable() unchanged on CPU."""
    fs = api()
    gen = torch.Generator().manual_seed(0)
    print(
        f"{'case':<12} {'dtype':<9} {'shape (B,Hq,Hkv,Sq,Sk,D,Dv)':<30} {'causal':<13} "
        f"{'out':>9} {'lse':>9} {'dq':>9} {'dk':>9} {'dv':>9}  result"
    )
    failures = 0
    for name, b, hq, hkv, sq, sk, d, dv, align, dtype in _SELF_CHECK_CASES:
        q = torch.randn(b, hq, sq, d, generator=gen).to(dtype)
        k = torch.randn(b, hkv, sk, d, generator=gen).to(dtype)
        v = torch.randn(b, hkv, sk, dv, generator=gen).to(dtype)
        dout = torch.randn(b, hq, sq, dv, generator=gen).to(dtype)
        scale = 1.0 / math.sqrt(d)
        visible = None
        if align is not None:
            diag = 0 if align == "top_left" else sk - sq
            visible = torch.arange(sk)[None, :] <= torch.arange(sq)[:, None] + diag

        qg, kg, vg = (t.clone().requires_grad_() for t in (q, k, v))
        kwargs: dict[str, Any] = {"causal": align is not None, "scale": scale, "return_lse": True}
        if align is not None:
            kwargs["causal_alignment"] = align
        out, lse = fs.attention(qg, kg, vg, **kwargs)
        grads = torch.autograd.grad(out, (qg, kg, vg), dout)
        ref = _math_with_lse(q.double(), k.double(), v.double(), scale, visible, dout.double())
        pt = _math_with_lse(q, k, v, scale, visible, dout)

        errs, ok = [], True
        for ours_t, pt_t, ref_t in zip((out, lse, *grads), (pt[0], pt[1], *pt[2]), (ref[0], ref[1], *ref[2])):
            err, bound = _err(ours_t, ref_t), RULE_FACTOR * _err(pt_t, ref_t) + RULE_ATOL
            errs.append(err)
            ok &= err <= bound
        failures += not ok
        shape = f"({b},{hq},{hkv},{sq},{sk},{d},{dv})"
        print(
            f"{name:<12} {str(dtype).removeprefix('torch.'):<9} {shape:<30} {align!s:<13} "
            + " ".join(f"{e:9.2e}" for e in errs)
            + f"  {'PASS' if ok else 'FAIL'}"
        )

    # The shim on a CPU-only machine: entering the context must leave CPU SDPA exactly as it was.
    q, k, v = (torch.randn(2, 4, 64, 32, generator=gen) for _ in range(3))
    plain = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    with fs.enable():
        inside = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    same = torch.equal(plain, inside)
    failures += not same
    print(
        f"{'sdpa':<12} {'float32':<9} {'(2,4,4,64,64,32,32)':<30} {'top_left':<13} "
        f"SDPA inside flashsdpa.enable() on CPU is PyTorch's own result: {'PASS' if same else 'FAIL'}"
    )
    print(
        f"\nself-check: {'all passed' if not failures else f'{failures} FAILED'} "
        f"(errors are max |ours - float64 math|; rule: <= 2 x PyTorch's math SDPA in the input dtype + 1e-5)"
    )
    return EXIT_OK if not failures else EXIT_WRONG
