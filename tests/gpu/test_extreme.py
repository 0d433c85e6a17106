# test_extreme.py: extreme values through the Python API, forward and backward (issue 10, "what to
# build": huge and tiny magnitudes in each of q, k, v; +-inf and NaN inputs; rows whose every key is
# masked; scale 0 and very large scales; fp16 near its maximum).
#
# The spec is PyTorch's flash kernel on the same inputs where it serves them (no mask, top-left
# causal): every output and gradient must be NaN exactly where PyTorch's flash gives NaN, +-inf
# exactly where it gives +-inf (NaN in, NaN out in the affected rows only), or, where PyTorch's
# flash departs from the float64 reference, exactly where the reference has them; elsewhere as close
# to a float64 reference as the project's rule demands (at most 2x PyTorch flash's error + 1e-5).
# Where PyTorch's flash does not serve the mask (windows, bottom-right causal with Sq > Sk), PyTorch's
# math kernel in the input dtype (P rounded before P @ V) is the yardstick and rows that see no key must give 0 out, +inf LSE
# and zero dq. Each case runs through flashsdpa.attention and, where SDPA can express it, through
# F.scaled_dot_product_attention inside enable().
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor
from torch.nn.attention import SDPBackend, sdpa_kernel

import flashsdpa
from flashsdpa import masks
from helpers import gpu_skip_reason, skip_unless_compiled, torch_math_attention

GPU_SKIP = gpu_skip_reason()
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(GPU_SKIP is not None, reason=f"GPU suite: {GPU_SKIP}")]

BF16, FP16 = torch.bfloat16, torch.float16
D = 64
RULE_FACTOR, RULE_ATOL = 2.0, 1e-5


@dataclass(frozen=True)
class Case:
    """One extreme input: ``make`` builds (q, k, v) in ``dtype``; the mask is flashsdpa's spelling."""

    make: Callable[[torch.Generator], tuple[Tensor, Tensor, Tensor]]
    dtype: torch.dtype = BF16
    causal: bool = False
    alignment: str = "top_left"
    window: tuple[int, int] | None = None
    scale: float | None = None

    @property
    def pytorch_flash_serves(self) -> bool:
        """PyTorch's flash takes no mask and top-left causal with Sq == Sk only."""
        return self.window is None and (not self.causal or self.alignment == "top_left")

    def mask_spec(self) -> masks.MaskSpec:
        return masks.make(self.causal, self.alignment, self.window)


def _randn(shape: tuple[int, ...], dtype: torch.dtype, g: torch.Generator, scale: float = 1.0) -> Tensor:
    return (torch.randn(shape, generator=g, device="cuda", dtype=torch.float64) * scale).to(dtype)


def _qkv(sq: int = 48, sk: int = 48, dtype: torch.dtype = BF16, sq_scale: float = 1.0, sk_scale: float = 1.0,
         sv_scale: float = 1.0, h: int = 2) -> Callable[[torch.Generator], tuple[Tensor, Tensor, Tensor]]:  # fmt: skip
    def make(g: torch.Generator) -> tuple[Tensor, Tensor, Tensor]:
        return (_randn((1, h, sq, D), dtype, g, sq_scale), _randn((1, h, sk, D), dtype, g, sk_scale),
                _randn((1, h, sk, D), dtype, g, sv_scale))  # fmt: skip

    return make


def _filled(value: float, s: int, dtype: torch.dtype = BF16) -> Callable[[torch.Generator], tuple[Tensor, Tensor, Tensor]]:
    def make(g: torch.Generator) -> tuple[Tensor, Tensor, Tensor]:
        return tuple(torch.full((1, 1, s, D), value, device="cuda", dtype=dtype) for _ in range(3))  # type: ignore[return-value]

    return make


def _poisoned(which: str, value: float, row: int, *, whole_row: bool = True, dtype: torch.dtype = BF16
              ) -> Callable[[torch.Generator], tuple[Tensor, Tensor, Tensor]]:  # fmt: skip
    """Normal inputs with ``value`` (NaN, +-inf) in one row of q, k or v (head 1 only: head 0
    must stay finite), in the whole row or in one element of it."""
    base = _qkv(dtype=dtype)

    def make(g: torch.Generator) -> tuple[Tensor, Tensor, Tensor]:
        q, k, v = base(g)
        t = {"q": q, "k": k, "v": v}[which]
        if whole_row:
            t[0, 1, row] = value
        else:
            t[0, 1, row, 5] = value
        return q, k, v

    return make


NAN, INF = float("nan"), float("inf")
CASES: dict[str, Case] = {
    # Issue 10, item 1: finite inputs whose logits are huge (133120^2 * 64 / 8 = 1.4e11).
    "q=k=v=133120, one key": Case(_filled(133120.0, 1)),
    "q=k=v=133120, 33 keys, causal": Case(_filled(133120.0, 33), causal=True),
    "huge q (1e18)": Case(_qkv(sq_scale=1e18)),
    "huge k (1e18), causal": Case(_qkv(sk_scale=1e18), causal=True),
    "huge v (1e36)": Case(_qkv(sv_scale=1e36)),
    "logits past float32 (q, k 1e20)": Case(_qkv(sq_scale=1e20, sk_scale=1e20)),
    "tiny q (1e-30)": Case(_qkv(sq_scale=1e-30)),
    "tiny k (1e-30), causal": Case(_qkv(sk_scale=1e-30), causal=True),
    "tiny v (1e-30)": Case(_qkv(sv_scale=1e-30)),
    "fp16 tiny q, k, v (1e-6: subnormal)": Case(_qkv(dtype=FP16, sq_scale=1e-6, sk_scale=1e-6, sv_scale=1e-6), FP16),
    "fp16 q near max (2e4 sd)": Case(_qkv(dtype=FP16, sq_scale=2e4), FP16),
    "fp16 k near max (2e4 sd), causal": Case(_qkv(dtype=FP16, sk_scale=2e4), FP16, causal=True),
    "fp16 v near max (2e4 sd)": Case(_qkv(dtype=FP16, sv_scale=2e4), FP16),
    "fp16 q=k=v=65504, 16 keys": Case(_filled(65504.0, 16, FP16), FP16),
    "NaN in a q row": Case(_poisoned("q", NAN, 7)),
    "NaN in a q row, causal": Case(_poisoned("q", NAN, 7), causal=True),
    "NaN in a k row": Case(_poisoned("k", NAN, 9)),
    "NaN in a k row, causal": Case(_poisoned("k", NAN, 30), causal=True),
    "NaN in a v row": Case(_poisoned("v", NAN, 9)),
    "NaN in one q element": Case(_poisoned("q", NAN, 3, whole_row=False)),
    "+inf in a q row": Case(_poisoned("q", INF, 7)),
    "-inf in one k element": Case(_poisoned("k", -INF, 11, whole_row=False)),
    "+inf in one k element, causal": Case(_poisoned("k", INF, 20, whole_row=False), causal=True),
    "+inf in a v row": Case(_poisoned("v", INF, 2)),
    "-inf in one v element": Case(_poisoned("v", -INF, 2, whole_row=False)),
    "fp16 NaN in a k row": Case(_poisoned("k", NAN, 9, dtype=FP16), FP16),
    # Rows whose every key is masked: 0 out, LSE +inf, no gradient to their query.
    "causal bottom-right, Sq 40 > Sk 8": Case(_qkv(sq=40, sk=8), causal=True, alignment="bottom_right"),
    "window (0, 0) top-left, Sq 40 > Sk 8": Case(_qkv(sq=40, sk=8), window=(0, 0)),
    "window (2, 0) bottom-right, Sq 40 > Sk 8": Case(_qkv(sq=40, sk=8), window=(2, 0), alignment="bottom_right"),
    "fp16 causal bottom-right, Sq 64 > Sk 1": Case(_qkv(sq=64, sk=1, dtype=FP16), FP16, causal=True,
                                                    alignment="bottom_right"),
    # Scales.
    "scale 0": Case(_qkv(), scale=0.0),
    "scale 0, causal": Case(_qkv(), causal=True, scale=0.0),
    "scale 1e4": Case(_qkv(), scale=1e4),
    "scale 1e30, causal": Case(_qkv(), causal=True, scale=1e30),
    "scale 1e-30": Case(_qkv(), scale=1e-30),
    "fp16 scale 1e4": Case(_qkv(dtype=FP16), FP16, scale=1e4),
}  # fmt: skip


# ---- references ------------------------------------------------------------------------------------


def _visible(case: Case, sq: int, sk: int) -> Tensor:
    """Bool (Sq, Sk): which keys each query row sees (all of them without a mask)."""
    visible = masks.visible(case.mask_spec(), sq, sk, "cuda")
    return torch.ones(sq, sk, dtype=torch.bool, device="cuda") if visible is None else visible


def _reference64(case: Case, q: Tensor, k: Tensor, v: Tensor, dout: Tensor) -> tuple[Tensor, Tensor, list[Tensor]]:
    """out, lse, [dq, dk, dv] in float64: rows that see no key give 0 out and +inf LSE, and NaN
    or +-inf in the inputs propagates as the arithmetic says."""
    leaves = [t.detach().double().requires_grad_() for t in (q, k, v)]
    qd, kd, vd = leaves
    scale = 1 / math.sqrt(D) if case.scale is None else case.scale
    visible = _visible(case, q.shape[2], k.shape[2])
    s = (qd @ kd.transpose(-1, -2) * scale).masked_fill(~visible, -math.inf)
    m = s.amax(-1, keepdim=True)
    empty = m == -math.inf
    m = torch.where(empty, 0.0, m)
    p = torch.exp(s - m)
    l = p.sum(-1, keepdim=True)
    l_safe = torch.where(empty, 1.0, l)
    out = torch.where(empty, 0.0, (p / l_safe) @ vd)
    lse = torch.where(empty, math.inf, m + torch.log(l_safe)).squeeze(-1)
    grads = torch.autograd.grad(out, leaves, dout.double())
    return out.detach(), lse.detach(), list(grads)


def _pytorch(case: Case, q: Tensor, k: Tensor, v: Tensor, dout: Tensor) -> tuple[Tensor, Tensor | None, list[Tensor]]:
    """PyTorch's own answer (flashsdpa inactive): its flash kernel where it serves the mask, else
    its math kernel in the input dtype. LSE only from the flash kernel."""
    assert not flashsdpa.is_active()
    scale = 1 / math.sqrt(D) if case.scale is None else case.scale
    leaves = [t.detach().requires_grad_() for t in (q, k, v)]
    if case.pytorch_flash_serves:
        with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
            out = F.scaled_dot_product_attention(*leaves, is_causal=case.causal, scale=scale)
        lse = torch.ops.aten._scaled_dot_product_flash_attention(q, k, v, 0.0, case.causal, False, scale=scale)[1]
    else:
        # P rounded to the input dtype before P @ V, as the kernels do (FlashAttention's "pt").
        out = torch_math_attention(*leaves, scale=scale, causal_mode=case.mask_spec(), reduced_precision=True)
        lse = None
    grads = torch.autograd.grad(out, leaves, dout)
    return out.detach(), lse, list(grads)


def _ours(case: Case, q: Tensor, k: Tensor, v: Tensor, dout: Tensor, api: str) -> tuple[Tensor, Tensor | None, list[Tensor]]:
    leaves = [t.detach().requires_grad_() for t in (q, k, v)]
    lse = None
    if api == "attention":
        out, lse = flashsdpa.attention(*leaves, causal=case.causal, causal_alignment=case.alignment,
                                       window=case.window, scale=case.scale, return_lse=True)  # fmt: skip
        grads = torch.autograd.grad(out, leaves, dout)
    else:
        # The backward inside enable() too: outside it, autograd would run PyTorch's flash backward
        # on our forward's outputs (the routers are gone), which is PyTorch's answer, not ours.
        with flashsdpa.enable():
            out = F.scaled_dot_product_attention(*leaves, is_causal=case.causal, scale=case.scale)
            grads = torch.autograd.grad(out, leaves, dout)
    return out.detach(), lse, list(grads)


# ---- the comparison ---------------------------------------------------------------------------------


def _same_non_finite(name: str, ours: Tensor, theirs: Tensor) -> None:
    """NaN exactly where theirs has NaN, +inf / -inf exactly where theirs has them."""
    for what, pick in (("NaN", torch.isnan), ("+inf", lambda t: t == math.inf), ("-inf", lambda t: t == -math.inf)):
        a, b = pick(ours.float()), pick(theirs.float())
        if not torch.equal(a, b):
            rows_ours = sorted({tuple(i[:-1]) for i in a.nonzero().tolist()})[:8]
            rows_theirs = sorted({tuple(i[:-1]) for i in b.nonzero().tolist()})[:8]
            raise AssertionError(f"{name}: {what} at {int(a.sum())} places (rows {rows_ours}), PyTorch's at "
                                 f"{int(b.sum())} (rows {rows_theirs})")  # fmt: skip


def _rule(name: str, ours: Tensor, theirs: Tensor, ref: Tensor) -> None:
    """On entries finite in all three: max|ours - ref| <= 2 max|theirs - ref| + 1e-5."""
    finite = torch.isfinite(ours) & torch.isfinite(theirs) & torch.isfinite(ref)
    if not bool(finite.any()):
        return
    err = (ours.double() - ref)[finite].abs().max().item()
    their_err = (theirs.double() - ref)[finite].abs().max().item()
    bound = RULE_FACTOR * their_err + RULE_ATOL
    assert err <= bound, f"{name}: max|ours - ref| = {err:.3e} > 2 * PyTorch's {their_err:.3e} + 1e-5"


def _check(case: Case, api: str) -> None:
    g = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = case.make(g)
    dout = _randn((q.shape[0], q.shape[1], q.shape[2], D), case.dtype, g)
    ref_out, ref_lse, ref_grads = _reference64(case, q, k, v, dout)
    pt_out, pt_lse, pt_grads = _pytorch(case, q, k, v, dout)
    out, lse, grads = _ours(case, q, k, v, dout, api)
    torch.cuda.synchronize()

    pairs = [("out", out, pt_out, ref_out)] + [
        (name, ours, theirs, ref) for name, ours, theirs, ref in zip(("dq", "dk", "dv"), grads, pt_grads, ref_grads)
    ]
    if lse is not None and pt_lse is not None:
        pairs.append(("lse", lse, pt_lse, ref_lse))
    elif lse is not None:  # no PyTorch LSE to measure against: where it is +-inf / NaN, as the reference
        _same_non_finite("lse", lse, ref_lse)
    for name, ours, theirs, ref in pairs:
        try:
            _same_non_finite(name, ours, theirs)
        except AssertionError:
            # Where PyTorch's flash departs from the float64 reference (its scale=0 gives NaN
            # everywhere), ours must match the reference's pattern in the output dtype instead:
            # NaN from finite inputs is never the spec.
            _same_non_finite(name, ours, ref.to(ours.dtype))
        _rule(name, ours, theirs, ref)

    # Rows that see no key: 0 out, +inf LSE, zero dq (not only "as close as PyTorch").
    empty = ~_visible(case, q.shape[2], k.shape[2]).any(-1)
    if bool(empty.any()):
        assert bool((out[..., empty, :] == 0).all()), "rows with no key: out must be 0"
        assert bool((grads[0][..., empty, :] == 0).all()), "rows with no key: dq must be 0"
        if lse is not None:
            assert bool((lse[..., empty] == math.inf).all()), "rows with no key: LSE must be +inf"
    # Head 0 never holds a poisoned value: it must stay finite wherever PyTorch's is, or where
    # PyTorch departs from the reference (scale 0), wherever the reference is.
    finite = bool(torch.isfinite(out[:, 0]).all())
    assert finite in (bool(torch.isfinite(pt_out[:, 0]).all()), bool(torch.isfinite(ref_out[:, 0].to(out.dtype)).all()))


@pytest.mark.parametrize("name", list(CASES))
def test_extreme_direct_api(name: str) -> None:
    case = CASES[name]
    skip_unless_compiled(case.dtype, D)
    _check(case, "attention")


SDPA_CASES = [name for name, case in CASES.items() if case.pytorch_flash_serves]


@pytest.mark.parametrize("name", SDPA_CASES)
def test_extreme_sdpa_inside_enable(name: str) -> None:
    case = CASES[name]
    skip_unless_compiled(case.dtype, D)
    _check(case, "sdpa")


def test_sdpa_inside_enable_takes_our_kernel() -> None:
    """The SDPA half above judges our kernels only if the calls reach them: count them."""
    skip_unless_compiled(BF16, D)
    before = flashsdpa.stats()["served"]
    q, k, v = (torch.randn(1, 2, 48, D, device="cuda", dtype=BF16, requires_grad=True) for _ in range(3))
    with flashsdpa.enable():
        F.scaled_dot_product_attention(q, k, v, scale=0.0).sum().backward()
    torch.cuda.synchronize()
    assert flashsdpa.stats()["served"] - before >= 2  # the forward and the backward
