# test_masks_gpu.py: attn_mask (issue 14's first item) on our CUDA kernels through the direct API
# (flashsdpa.attention(attn_mask=...) -> flashsdpa::fwd_masked / bwd_masked): boolean and additive
# masks of the shapes models use ((B,1,1,S) key padding, (1,H,S,S), (B,H,S,S), (S,S)), rows with every
# key masked, Sq != Sk, awkward sizes, GQA, causal; out, lse, dq, dk, dv and the additive mask's
# gradient against a float64 textbook with the project's rule (max|ours - ref| <= 2 max|pt - ref| +
# 1e-5, pt = the textbook in the inputs' dtype, the mask's gradient through autograd's expand), outputs
# NaN-poisoned in a second launch. FLASHSDPA_FAMILY=sm80 runs the same rows on the portable family.
# test_masks_sanitizer_subset is the compute-sanitizer subset.
from __future__ import annotations

import math
import zlib

import pytest
import torch
from torch import Tensor

import flashsdpa
from flashsdpa import _backend, masks, ops_masks, reporting
from flashsdpa.masks import MaskSpec
from helpers import UNDER_SANITIZER, check_rule, default_scale, gpu_skip_reason, grads_or_zeros, skip_unless_compiled

GPU_SKIP = gpu_skip_reason()
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(GPU_SKIP is not None, reason=f"GPU suite: {GPU_SKIP}")]

DEVICE = "cuda"
# The yardsticks' device: the CPU under compute-sanitizer (racecheck stops inside PyTorch's GPU
# matmuls of the textbook: H100, sessions 53-54; helpers.UNDER_SANITIZER).
YARD = "cpu" if UNDER_SANITIZER else DEVICE


def _generator(request: pytest.FixtureRequest) -> torch.Generator:
    return torch.Generator(device=DEVICE).manual_seed(zlib.crc32(request.node.nodeid.encode()))


def textbook(q: Tensor, k: Tensor, v: Tensor, bias: Tensor, *, scale: float, mask: MaskSpec,
             dtype: torch.dtype) -> tuple[Tensor, Tensor]:  # fmt: skip
    """(B, Hq, Sq, D) attention with an additive bias, in ``dtype``: out, lse (+inf, out 0 for rows
    that see no key)."""
    groups = q.shape[1] // k.shape[1]
    q, k, v = q.to(dtype), k.to(dtype), v.to(dtype)
    k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)
    sq, sk = q.shape[2], k.shape[2]
    s = (q @ k.transpose(-1, -2)) * scale + bias.to(dtype)
    vis = masks.visible(mask, sq, sk, q.device)
    if vis is not None:
        s = s.masked_fill(~vis, -math.inf)
    row_max = s.amax(dim=-1, keepdim=True)
    seen = row_max > -math.inf
    top = torch.where(seen, row_max, 0.0).detach()
    e = torch.exp(s - top)
    total = e.sum(dim=-1, keepdim=True)
    p = torch.where(seen, e / torch.where(seen, total, 1.0), 0.0)
    lse = torch.where(seen, top + torch.log(torch.where(seen, total, 1.0)), math.inf).squeeze(-1)
    return p @ v, lse


def _make_mask(kind: str, shape: tuple[int, ...], sq: int, sk: int, dtype: torch.dtype, gen: torch.Generator,
               empty_row: bool) -> Tensor:  # fmt: skip
    """kind "bool": True = attend (~70%), "add": N(0, 1) with ~20% -inf. With ``empty_row``, query
    row sq // 2 sees no key (where the shape has a query dim), else every row keeps key 0."""
    if kind == "bool":
        m = torch.rand(shape, generator=gen, device=DEVICE) < 0.7
        m[..., 0] = True
        if empty_row and len(shape) >= 2 and shape[-2] == sq:
            m[..., sq // 2, :] = False
        return m
    m = torch.randn(shape, generator=gen, device=DEVICE)
    m = m.masked_fill(torch.rand(shape, generator=gen, device=DEVICE) < 0.2, -math.inf)
    m[..., 0] = torch.randn(m[..., 0].shape, generator=gen, device=DEVICE)
    if empty_row and len(shape) >= 2 and shape[-2] == sq:
        m[..., sq // 2, :] = -math.inf
    return m.to(dtype)


def _shape(name: str, b: int, h: int, sq: int, sk: int) -> tuple[int, ...]:
    return {"B11S": (b, 1, 1, sk), "1HSS": (1, h, sq, sk), "BHSS": (b, h, sq, sk), "SS": (sq, sk)}[name]


def run_masked(request: pytest.FixtureRequest, kind: str, shape_name: str, mask: MaskSpec, groups: int, sq: int,
               sk: int, dtype: torch.dtype, head_dim: int = 128, batch: int = 2, heads_kv: int = 2,
               empty_row: bool = False) -> None:  # fmt: skip
    skip_unless_compiled(dtype, head_dim)
    gen = _generator(request)
    heads = heads_kv * groups
    q = torch.randn(batch, heads, sq, head_dim, generator=gen, device=DEVICE).to(dtype)
    k = torch.randn(batch, heads_kv, sk, head_dim, generator=gen, device=DEVICE).to(dtype)
    v = torch.randn(batch, heads_kv, sk, head_dim, generator=gen, device=DEVICE).to(dtype)
    dout = torch.randn(batch, heads, sq, head_dim, generator=gen, device=DEVICE).to(dtype)
    attn_mask = _make_mask(kind, _shape(shape_name, batch, heads, sq, sk), sq, sk, dtype, gen, empty_row)
    additive = kind != "bool"
    scale = default_scale(head_dim)
    left, right, align = mask
    kw = {"window": (left, right), "causal_alignment": "bottom_right" if align == masks.BOTTOM_RIGHT else "top_left"}

    # Ours: the direct API, the additive mask a leaf that requires grad.
    leaves = [t.detach().requires_grad_() for t in (q, k, v)]
    m = attn_mask.detach().clone().requires_grad_(additive)
    fwd_before = reporting.counter("flashsdpa::fwd_masked")[0]
    out, lse = flashsdpa.attention(*leaves, attn_mask=m, scale=scale, return_lse=True, enable_gqa=True, **kw)
    assert reporting.counter("flashsdpa::fwd_masked")[0] == fwd_before + 1, "our masked kernel did not serve it"
    ours = [out.detach(), lse, *torch.autograd.grad(out, leaves + ([m] if additive else []), dout)]
    torch.cuda.synchronize()

    bias = ops_masks.additive(attn_mask, dtype)

    def results(d: torch.dtype) -> list[Tensor]:
        ls = [t.detach().to(YARD, d).requires_grad_() for t in (q, k, v)]
        b = bias.detach().to(YARD, d).requires_grad_(additive)
        o, l = textbook(*ls, b, scale=scale, mask=mask, dtype=d)
        g = grads_or_zeros(o, ls + ([b] if additive else []), dout.to(YARD, d))
        return [o.detach(), l.detach().float(), *g]

    ref, pt = results(torch.float64), results(dtype)
    names = ["out", "lse", "dq", "dk", "dv"] + (["d_mask"] if additive else [])
    for name, o, p, r in zip(names, ours, pt, ref):
        assert o.shape == r.shape, (name, tuple(o.shape), tuple(r.shape))
        assert not o.isnan().any(), f"{name}: NaN"
        check_rule(name, o, p, r, input_dtype=dtype)
    if empty_row and len(attn_mask.shape) >= 2 and attn_mask.shape[-2] == sq:
        # out exactly 0 (LSE +inf); dq at most the portable backward's exp2_fma floor: a -inf bias in
        # a tile without element-wise masking gives P = 2^-125, not 0 (dS ~ 1e-37).
        assert torch.all(ours[0][:, :, sq // 2] == 0) and torch.all(ours[1][:, :, sq // 2] == math.inf)
        assert ours[2][:, :, sq // 2].abs().max().item() <= 1e-30

    # NaN-poisoned outputs: the same launches must write every element (the forward bitwise).
    view = ops_masks.bias_view(bias, (batch, heads, sq, sk))
    mods = (0.0, None, None, view)
    out_p, lse_p = torch.full_like(out, math.nan), torch.full_like(lse, math.nan)
    _backend.launch_fwd(q, k, v, out_p, lse_p, scale, mask, None, mods=mods)
    torch.cuda.synchronize()
    assert torch.equal(out_p, ours[0]) and torch.equal(lse_p, lse), "forward left elements unwritten (NaN)"
    dq, dk, dv = (torch.full_like(t, math.nan) for t in (q, k, v))
    # The dense d_bias: unmasked (and without a summary, as here) the kernels store every element,
    # so ops_masks leaves it unfilled: poisoned here; with a causal mask / window, zeroed as there.
    fill = math.nan if mask[0] < 0 and mask[1] < 0 else 0.0
    d_full = torch.full((batch, heads, sq, sk), fill, dtype=dtype, device=DEVICE) if additive else None
    _backend.launch_bwd(dout, q, k, v, ours[0], lse, dq, dk, dv, scale, mask, None, mods, (None, None, d_full))
    torch.cuda.synchronize()
    poisoned = [dq, dk, dv] + ([ops_masks.reduce_to(d_full, tuple(attn_mask.shape))] if additive else [])
    for name, o, p, r in zip(names[2:], poisoned, pt[2:], ref[2:]):
        check_rule(name + " (poisoned)", o, p, r, input_dtype=dtype)


_SHAPES = ["B11S", "1HSS", "BHSS", "SS"]
_SIZES = [(1, 1), (7, 113), (113, 7), (1, 1023), (113, 1023), (1023, 1023)]


@pytest.mark.parametrize("kind", ["bool", "add"])
@pytest.mark.parametrize("shape_name", _SHAPES)
@pytest.mark.parametrize("sq,sk", _SIZES)
def test_masks(request: pytest.FixtureRequest, kind: str, shape_name: str, sq: int, sk: int) -> None:
    run_masked(request, kind, shape_name, masks.NO_MASK, 2, sq, sk, torch.bfloat16)


@pytest.mark.parametrize("kind", ["bool", "add"])
@pytest.mark.parametrize("mask", [masks.CAUSAL_TOP_LEFT, masks.CAUSAL_BOTTOM_RIGHT, (64, 0, masks.BOTTOM_RIGHT)])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
@pytest.mark.parametrize("head_dim", [64, 128])
def test_masks_with_causal(request: pytest.FixtureRequest, kind: str, mask: MaskSpec, dtype: torch.dtype,
                           head_dim: int) -> None:  # fmt: skip
    run_masked(request, kind, "BHSS", mask, 4, 300, 777, dtype, head_dim=head_dim)


@pytest.mark.parametrize("kind", ["bool", "add"])
@pytest.mark.parametrize("shape_name", ["1HSS", "BHSS", "SS"])
@pytest.mark.parametrize("sq,sk", [(7, 113), (200, 200)])
def test_masks_fully_masked_rows(request: pytest.FixtureRequest, kind: str, shape_name: str, sq: int, sk: int) -> None:
    run_masked(request, kind, shape_name, masks.NO_MASK, 1, sq, sk, torch.float16, empty_row=True)


def test_masks_key_padding_4k(request: pytest.FixtureRequest) -> None:
    """A padding mask as a model passes it: (B, 1, 1, S) booleans, each sequence's kept length."""
    run_masked(request, "bool", "B11S", masks.CAUSAL_TOP_LEFT, 1, 4096, 4096, torch.bfloat16, batch=2, heads_kv=4)


_SANITIZER = [("add", "B11S", masks.CAUSAL_BOTTOM_RIGHT, 7, 113), ("bool", "BHSS", masks.NO_MASK, 113, 7)]


@pytest.mark.parametrize("kind,shape_name,mask,sq,sk", _SANITIZER)
def test_masks_sanitizer_subset(request: pytest.FixtureRequest, kind: str, shape_name: str, mask: MaskSpec, sq: int,
                                sk: int) -> None:  # fmt: skip
    run_masked(request, kind, shape_name, mask, 2, sq, sk, torch.bfloat16, empty_row=True)


# ---- through SDPA inside enable(): the masked ops' routers (routers_masked.py) -------------------

_MASKED_OPS = (
    "aten::_scaled_dot_product_efficient_attention",
    "aten::_scaled_dot_product_cudnn_attention",
)


def _served(op_prefix: str) -> int:
    ops = flashsdpa.stats()["ops"]
    return sum(c["served"] for op, c in ops.items() if op.startswith(op_prefix))


@pytest.mark.parametrize("empty_row", [False, True], ids=["", "empty_row"])
@pytest.mark.parametrize("kind", ["bool", "add"])
@pytest.mark.parametrize("shape_name,sq,sk", [("B11S", 113, 1023), ("1HSS", 256, 256), ("SS", 17, 113)])
def test_masks_through_sdpa(request: pytest.FixtureRequest, kind: str, shape_name: str, sq: int, sk: int,
                            empty_row: bool) -> None:  # fmt: skip
    """F.scaled_dot_product_attention(attn_mask=...) inside enable(): PyTorch sends it to its cuDNN or
    efficient op (flash refuses masks), whose routers run our kernels forward and backward (the
    reporting counters say so), and the results pass the rule against the float64 textbook,
    the additive mask's gradient included (autograd's expand backward reduces ours). With
    ``empty_row`` query row sq // 2 sees no key (B11S: the last sequence none): out 0 there, a
    boolean mask too (PyTorch writes -65504 for its cuDNN op; entry.py converts to -inf first)."""
    import torch.nn.functional as F

    dtype, batch, heads, head_dim = torch.bfloat16, 2, 4, 128
    skip_unless_compiled(dtype, head_dim)
    gen = _generator(request)
    q, k, v = (torch.randn(batch, heads, s, head_dim, generator=gen, device=DEVICE).to(dtype) for s in (sq, sk, sk))
    dout = torch.randn(batch, heads, sq, head_dim, generator=gen, device=DEVICE).to(dtype)
    attn_mask = _make_mask(kind, _shape(shape_name, batch, heads, sq, sk), sq, sk, dtype, gen, empty_row)
    if empty_row and shape_name == "B11S":
        attn_mask[-1] = False if kind == "bool" else -math.inf
    additive = kind != "bool"
    leaves = [t.detach().requires_grad_() for t in (q, k, v)]
    m = attn_mask.detach().clone().requires_grad_(additive)
    fwd_before = sum(_served(op) for op in _MASKED_OPS)
    bwd_before = sum(_served(op + "_backward") for op in _MASKED_OPS)
    with flashsdpa.enable():
        out = F.scaled_dot_product_attention(*leaves, attn_mask=m)
        grads = torch.autograd.grad(out, leaves + ([m] if additive else []), dout)
    torch.cuda.synchronize()
    fwd_served = sum(_served(op) for op in _MASKED_OPS) - fwd_before
    bwd_served = sum(_served(op + "_backward") for op in _MASKED_OPS) - bwd_before
    # _served(op) counts the op and its backward (same prefix): the forward alone is the difference.
    assert fwd_served - bwd_served == 1 and bwd_served == 1, (flashsdpa.stats()["fallback_reasons"], fwd_served, bwd_served)

    bias = ops_masks.additive(attn_mask, dtype)
    scale = default_scale(head_dim)

    def results(d: torch.dtype) -> list[Tensor]:
        ls = [t.detach().to(YARD, d).requires_grad_() for t in (q, k, v)]
        b = bias.detach().to(YARD, d).requires_grad_(additive)
        o, _ = textbook(*ls, b, scale=scale, mask=masks.NO_MASK, dtype=d)
        return [o.detach(), *grads_or_zeros(o, ls + ([b] if additive else []), dout.to(YARD, d))]

    ref, pt = results(torch.float64), results(dtype)
    names = ["out", "dq", "dk", "dv"] + (["d_mask"] if additive else [])
    for name, o, p, r in zip(names, [out.detach(), *grads], pt, ref):
        assert o.shape == r.shape, (name, tuple(o.shape), tuple(r.shape))
        check_rule(name, o, p, r, input_dtype=dtype)


@pytest.mark.parametrize("sq", [1, 16])
def test_decode_sized_masked_sdpa_takes_the_decode_kernel(sq: int) -> None:
    """A masked SDPA call with at most DECODE_MAX_SEQLEN_Q query rows (padded batched generation)
    is ours now: the masked router serves it on the split-KV decode kernel's kModsBias instantiation
    (the capability table's decode path lists the bias), no decode-sized reason is counted or
    explained, and its output is within the rule against float64 (test_masked_decode_gpu.py holds such calls to
    the rule against float64 and checks that the decode kernel ran)."""
    import torch.nn.functional as F

    dtype, batch, heads, head_dim, sk = torch.bfloat16, 4, 8, 128, 2048
    skip_unless_compiled(dtype, head_dim)
    gen = torch.Generator(device=DEVICE).manual_seed(sq)
    q, k, v = (torch.randn(batch, heads, s, head_dim, generator=gen, device=DEVICE).to(dtype) for s in (sq, sk, sk))
    mask = torch.ones(batch, 1, sq, sk, dtype=torch.bool, device=DEVICE)
    mask[:, :, :, : sk // 3] = False  # left padding
    before = sum(_served(op) for op in _MASKED_OPS)
    flashsdpa.reset_stats()
    with flashsdpa.enable():
        got = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    torch.cuda.synchronize()
    assert sum(_served(op) for op in _MASKED_OPS) == 1 and before >= 0, flashsdpa.stats()["fallback_reasons"]
    reasons = flashsdpa.stats()["fallback_reasons"]
    assert not any("decode-sized" in r for r in reasons), reasons
    # By the rule against float64 (PyTorch's masked kernel and ours are two bf16 roundings: compared
    # with each other at assert_close's bf16 tolerance they differed by 3e-4 at values ~1e-2, H200).
    bias = ops_masks.additive(mask, dtype)
    ref, pt = (textbook(q, k, v, bias, scale=default_scale(head_dim), mask=masks.NO_MASK, dtype=d)[0]
               for d in (torch.float64, dtype))  # fmt: skip
    check_rule("out", got, pt, ref, input_dtype=dtype)
    assert flashsdpa.explain(q, k, v, attn_mask=mask) == []


# ---- the sm90 kernels' staged bias: both copy paths (common/bias_stage.cuh) -----------------------
# The sm90 forward and backward stage each warp's bias with 16-byte copies when the (b, h) plane and
# its rows are 16-byte aligned, with 4-byte pairs otherwise (the portable family reads global memory
# either way); the backward stores the mask's gradient by TMA (one 64 x 64 box per warpgroup a step)
# when Sk % 8 == 0 (its dense (B, H, Sq, Sk) buffer is then aligned), as 16-bit elements otherwise. Each layout below reaches
# the kernels as given (bias_view copies none of them: checked), with zeros staged past Sq and past
# Sk (the half-filled last chunk or pair). Sq 130: a query block past the end and a partial one.
def _bias_layout(layout: str, base: Tensor, sk: int) -> Tensor:
    """A (B, H, Sq, sk) view holding ``base``'s values in the named memory layout (differentiable:
    the mask's gradient reaches ``base``)."""
    b, h, sq = base.shape[:3]
    row = {"contiguous": sk, "row_pad_even": sk + 1, "row_pad_8": (sk + 7) // 8 * 8 + 8, "offset_4_bytes": sk + 8}[layout]
    start = 2 if layout == "offset_4_bytes" else 0
    store = torch.full((b, h, sq, row), float("nan"), dtype=base.dtype, device=DEVICE)
    store.narrow(3, start, sk).copy_(base)
    return store.narrow(3, start, sk)


@pytest.mark.parametrize("layout,sk,aligned16", [
    ("contiguous", 120, True), ("contiguous", 114, False), ("row_pad_even", 113, False),
    ("row_pad_8", 1001, True), ("offset_4_bytes", 120, False), ("row_pad_8", 7, True), ("contiguous", 1000, True),
    ("contiguous", 136, True),  # the sm90 backward's d_bias TMA box of keys 192-255 wholly past Sk
])  # fmt: skip
@pytest.mark.parametrize("head_dim", [64, 128, 256])
@pytest.mark.parametrize("mask", [masks.NO_MASK, masks.CAUSAL_BOTTOM_RIGHT], ids=["full", "causal"])
def test_masks_bias_layouts(request: pytest.FixtureRequest, layout: str, sk: int, aligned16: bool, head_dim: int,
                            mask: MaskSpec) -> None:  # fmt: skip
    dtype = torch.bfloat16
    skip_unless_compiled(dtype, head_dim)
    gen = _generator(request)
    b, h, sq = 2, 4, 130  # GQA 4 / 2: the backward's steps change query head
    q = torch.randn(b, h, sq, head_dim, generator=gen, device=DEVICE).to(dtype)
    k, v = (torch.randn(b, h // 2, sk, head_dim, generator=gen, device=DEVICE).to(dtype) for _ in range(2))
    dout = torch.randn(b, h, sq, head_dim, generator=gen, device=DEVICE).to(dtype)
    base = _make_mask("add", (b, h, sq, sk), sq, sk, dtype, gen, empty_row=False)
    leaves = [t.detach().requires_grad_() for t in (q, k, v, base)]
    bias = _bias_layout(layout, leaves[3], sk)
    view = ops_masks.bias_view(bias.detach(), (b, h, sq, sk))
    assert view.data_ptr() == bias.data_ptr() and view.stride() == bias.stride(), "bias_view copied the layout"
    assert ((view.data_ptr() | (view.stride(0) | view.stride(1) | view.stride(2)) * 2) % 16 == 0) == aligned16
    scale = default_scale(head_dim)
    left, right, align = mask
    kw = {"window": (left, right), "causal_alignment": "bottom_right" if align == masks.BOTTOM_RIGHT else "top_left"}
    out, lse = flashsdpa.attention(*leaves[:3], attn_mask=bias, scale=scale, return_lse=True, enable_gqa=True, **kw)
    ours = [out.detach(), lse, *torch.autograd.grad(out, leaves, dout)]

    def results(d: torch.dtype) -> list[Tensor]:
        ls = [t.detach().to(YARD, d).requires_grad_() for t in (q, k, v, base)]
        o, l = textbook(*ls, scale=scale, mask=mask, dtype=d)
        return [o.detach(), l.detach().float(), *grads_or_zeros(o, ls, dout.to(YARD, d))]

    ref, pt = results(torch.float64), results(dtype)
    for name, o, p, r in zip(["out", "lse", "dq", "dk", "dv", "d_mask"], ours, pt, ref):
        assert not o.isnan().any(), f"{name}: NaN"
        check_rule(name, o, p, r, input_dtype=dtype)
