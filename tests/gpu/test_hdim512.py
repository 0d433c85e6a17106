# test_hdim512.py: the head-dim bucket 512 (issue 14; Gemma's global layers): the sm90 family's
# forward of its own (cuda/sm90/fwd512_kernel_sm90.cuh, two-CTA clusters), through the direct API
# and through SDPA inside enable(), against the float64 textbook with the project's rule, outputs
# poisoned with NaN; and its backward (bwd_kernel_sm90.cuh's kSplit) the same ways, windows included.
from __future__ import annotations

import math
import zlib

import pytest
import torch
import torch.nn.functional as F

import flashsdpa
from flashsdpa import _backend, masks
from helpers import Shape, check_attention, default_scale, gpu_skip_reason, make_qkv, skip_unless_compiled

GPU_SKIP = gpu_skip_reason()
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(GPU_SKIP is not None, reason=f"GPU suite: {GPU_SKIP}")]

DEVICE = "cuda"
DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}

# Awkward lengths (1, 7, 113, 1023; Sq != Sk both ways), GQA and MQA, the bucket's smallest head dim
# (264: columns above it zero-filled by TMA and never stored) and Dv != Dqk.
SHAPES = (
    Shape("one", 1, 2, 2, 1, 1, 512),
    Shape("tiny", 2, 2, 2, 7, 7, 512),
    Shape("q_longer", 1, 4, 2, 239, 113, 512),
    Shape("k_longer", 2, 2, 1, 113, 1023, 512),
    Shape("square1023", 1, 2, 2, 1023, 1023, 512),
    Shape("gqa4_d384", 1, 8, 2, 300, 300, 384),
    Shape("d264", 2, 2, 2, 129, 257, 264),
    Shape("dv_narrower", 1, 2, 2, 200, 200, 512, 320),
)


def _served_here(dtype: torch.dtype, shape: Shape) -> None:
    """Skip unless this build and GPU run the 512 bucket's forward (the sm90 family: 9.0 only)."""
    skip_unless_compiled(dtype, shape.head_dim, shape.dv)
    family, *_, why = _backend.select(
        torch.cuda.current_device(), _backend.DTYPE_CODES[dtype], shape.head_dim, shape.dv, 0, False, False
    )
    if family is None:
        pytest.skip(f"no family runs head dim {shape.head_dim} here: {why}")


def _inputs(request: pytest.FixtureRequest, shape: Shape, dtype: torch.dtype) -> tuple[torch.Tensor, ...]:
    gen = torch.Generator(device=DEVICE).manual_seed(zlib.crc32(request.node.nodeid.encode()))
    return make_qkv(shape, dtype, DEVICE, generator=gen)


@pytest.mark.parametrize("causal_mode", [0, 1, 2], ids=["none", "top_left", "bottom_right"])
@pytest.mark.parametrize("dtype", DTYPES.values(), ids=DTYPES.keys())
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_forward(request: pytest.FixtureRequest, shape: Shape, dtype: torch.dtype, causal_mode: int) -> None:
    _served_here(dtype, shape)
    q, k, v = _inputs(request, shape, dtype)
    scale = default_scale(shape.head_dim)
    kwargs: dict[str, object] = {"causal": causal_mode > 0, "scale": scale, "return_lse": True}
    if causal_mode:
        kwargs["causal_alignment"] = "bottom_right" if causal_mode == 2 else "top_left"
    before = flashsdpa.stats()["ops"].get("flashsdpa::fwd", {}).get("served", 0)
    out, lse = flashsdpa.attention(q, k, v, **kwargs)
    torch.cuda.synchronize()
    assert flashsdpa.stats()["ops"]["flashsdpa::fwd"]["served"] == before + 1
    check_attention(q, k, v, None, out, None, lse, scale=scale, causal_mode=causal_mode)
    # Into NaN-filled outputs: the forward is deterministic, so only bitwise equality shows that
    # every element (O's stored columns, every row's LSE) was written.
    out_p, lse_p = torch.full_like(out, math.nan), torch.full_like(lse, math.nan)
    _backend.launch_fwd(q, k, v, out_p, lse_p, scale, masks.BY_CAUSAL_MODE[causal_mode])
    torch.cuda.synchronize()
    assert torch.equal(out_p, out) and torch.equal(lse_p, lse), "unwritten output or LSE elements"


@pytest.mark.parametrize("window", [(100, 0), (64, 64)], ids=["left100", "both64"])
def test_window(request: pytest.FixtureRequest, window: tuple[int, int]) -> None:
    shape = Shape("window", 1, 4, 2, 700, 900, 512)
    _served_here(torch.bfloat16, shape)
    q, k, v = _inputs(request, shape, torch.bfloat16)
    scale = default_scale(512)
    out, lse = flashsdpa.attention(q, k, v, window=window, causal_alignment="bottom_right", scale=scale, return_lse=True)
    torch.cuda.synchronize()
    spec = masks.make(False, "bottom_right", window)
    check_attention(q, k, v, None, out, None, lse, scale=scale, causal_mode=spec)


def test_larger_logits(request: pytest.FixtureRequest) -> None:
    """q, k x 3 at D 512 (scaled scores of standard deviation ~9, row maxima ~30): the rule holds.
    (x 30 puts the bf16 math yardstick itself 3.1 away from the float64 textbook.)"""
    shape = Shape("large", 1, 2, 2, 257, 257, 512)
    _served_here(torch.bfloat16, shape)
    q, k, v = _inputs(request, shape, torch.bfloat16)
    q.mul_(3), k.mul_(3)
    out, lse = flashsdpa.attention(q, k, v, causal=True, return_lse=True)
    torch.cuda.synchronize()
    assert torch.isfinite(out).all() and torch.isfinite(lse).all()
    check_attention(q, k, v, None, out, None, lse, scale=default_scale(512), causal_mode=1)


@pytest.mark.parametrize("is_causal", [False, True], ids=["none", "causal"])
def test_sdpa_inference_served(request: pytest.FixtureRequest, is_causal: bool) -> None:
    """F.scaled_dot_product_attention at D 512 with GQA, no grad, inside enable(): our op serves it
    (PyTorch would run its math or efficient kernel), the answer within the rule."""
    shape = Shape("sdpa", 2, 8, 2, 333, 333, 512)
    _served_here(torch.bfloat16, shape)
    q, k, v = _inputs(request, shape, torch.bfloat16)
    with torch.no_grad(), flashsdpa.enable():
        before = flashsdpa.stats()["ops"].get("flashsdpa::fwd", {}).get("served", 0)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=is_causal, enable_gqa=True)
        served = flashsdpa.stats()["ops"]["flashsdpa::fwd"]["served"] - before
    torch.cuda.synchronize()
    assert served == 1
    check_attention(q, k, v, None, out, None, None, scale=default_scale(512), causal_mode=int(is_causal))


# Training: the sm90 family's backward of its own (bwd_kernel_sm90.cuh's kSplit: a CTA pair per 64
# keys, one column half each, S^T and dP^T partials exchanged). Awkward lengths (1, 7, 113, 1023;
# Sq != Sk both ways, bottom-right rows that see no key), GQA and MQA, the bucket's narrowest head
# dim and Dv != Dqk; each case then runs again into NaN-filled dq, dk, dv (dQ is added with float
# reductions in any order, so the rerun is checked by the rule, not bitwise).
TRAIN = [
    (Shape("one", 1, 2, 2, 1, 1, 512), 0),
    (Shape("tiny_causal", 2, 2, 2, 7, 7, 512), 1),
    (Shape("gqa_q_longer", 1, 4, 2, 239, 113, 512), 0),
    (Shape("q_longer_bottom_right", 1, 2, 2, 300, 113, 512), 2),  # rows 0-186 see no key
    (Shape("k_longer_causal", 1, 2, 2, 113, 1023, 512), 1),
    (Shape("k_longer_bottom_right", 2, 2, 1, 113, 1023, 512), 2),
    (Shape("square1023", 1, 2, 2, 1023, 1023, 512), 1),
    (Shape("gqa4_d384", 1, 8, 2, 300, 300, 384), 2),
    (Shape("narrowest", 1, 4, 4, 300, 257, 264), 0),
    (Shape("dv_narrower", 1, 2, 2, 200, 200, 512, 320), 1),
]


def _counts(op: str) -> tuple[int, int]:
    row = flashsdpa.stats()["ops"].get(op, {})
    return row.get("served", 0), row.get("fallback", 0)


def _train_and_check(request: pytest.FixtureRequest, shape: Shape, dtype: torch.dtype, mask: masks.MaskSpec,
                     scale_inputs: float = 1.0) -> None:  # fmt: skip
    """flashsdpa.attention forward and backward, both ours (counted served), out, LSE and gradients
    within the rule; then the backward again into NaN-filled gradients, within the rule."""
    _served_here(dtype, shape)
    q, k, v = _inputs(request, shape, dtype)
    for t in (q, k, v):
        t.mul_(scale_inputs).requires_grad_()
    dout = torch.randn(q.shape[:-1] + (shape.dv,), device=DEVICE, dtype=dtype)
    scale = default_scale(shape.head_dim)
    left, right, align = mask
    kwargs: dict[str, object] = {"causal": right == 0, "scale": scale, "return_lse": True,
                                 "causal_alignment": "bottom_right" if align == masks.BOTTOM_RIGHT else "top_left"}  # fmt: skip
    if left >= 0 or right > 0:
        kwargs["window"] = (left, right)
    fwd0, bwd0 = _counts("flashsdpa::fwd"), _counts("flashsdpa::bwd")
    out, lse = flashsdpa.attention(q, k, v, **kwargs)
    grads = torch.autograd.grad(out, (q, k, v), dout)
    torch.cuda.synchronize()
    assert _counts("flashsdpa::fwd")[0] == fwd0[0] + 1, "our forward serves it"
    assert _counts("flashsdpa::bwd") == (bwd0[0] + 1, bwd0[1]), "our backward serves it"
    check_attention(q, k, v, dout, out.detach(), list(grads), lse, scale=scale, causal_mode=mask)
    qd, kd, vd = q.detach(), k.detach(), v.detach()
    poisoned = [torch.full_like(t, math.nan) for t in (qd, kd, vd)]
    _backend.launch_bwd(dout, qd, kd, vd, out.detach(), lse, *poisoned, scale, mask)
    torch.cuda.synchronize()
    check_attention(q, k, v, dout, out.detach(), poisoned, lse, scale=scale, causal_mode=mask)


@pytest.mark.parametrize("dtype", DTYPES.values(), ids=DTYPES.keys())
@pytest.mark.parametrize("shape,causal_mode", TRAIN, ids=[c[0].name for c in TRAIN])
def test_training(request: pytest.FixtureRequest, shape: Shape, dtype: torch.dtype, causal_mode: int) -> None:
    _train_and_check(request, shape, dtype, masks.BY_CAUSAL_MODE[causal_mode])


@pytest.mark.parametrize("window", [(100, 0), (64, 64), (0, 0)], ids=["left100", "both64", "diagonal"])
def test_training_window(request: pytest.FixtureRequest, window: tuple[int, int]) -> None:
    """Windows (the diagonal alone: one visible key a row, dS exactly 0) with bottom-right
    alignment on Sq != Sk."""
    _train_and_check(request, Shape("window", 1, 4, 2, 700, 900, 512), torch.bfloat16,
                     masks.make(False, "bottom_right", window))  # fmt: skip


def test_training_larger_logits(request: pytest.FixtureRequest) -> None:
    """q, k x 3 (scaled scores of standard deviation ~9: P near one-hot in many rows), causal."""
    _train_and_check(request, Shape("large", 1, 2, 2, 257, 321, 512), torch.bfloat16, masks.CAUSAL_TOP_LEFT, 3.0)


def test_training_many_blocks_gqa(request: pytest.FixtureRequest) -> None:
    """Many 64-key blocks (CTA pairs) and 64-query steps over a GQA group of 4: dK and dV summed
    over the group's heads in registers, dQ over 33 key blocks."""
    _train_and_check(request, Shape("many", 2, 8, 2, 1500, 2100, 512), torch.bfloat16, masks.NO_MASK)


def test_sdpa_training_served(request: pytest.FixtureRequest) -> None:
    """F.scaled_dot_product_attention at D 512 with grad, GQA, causal, inside enable(): our forward
    and backward (PyTorch would run its math kernel for GQA here); explain() has nothing to say;
    the gradients within the rule."""
    shape = Shape("train", 2, 4, 2, 200, 200, 512)
    _served_here(torch.bfloat16, shape)
    q, k, v = (t.requires_grad_() for t in _inputs(request, shape, torch.bfloat16))
    dout = torch.randn_like(q)
    assert flashsdpa.explain(q, k, v, is_causal=True, enable_gqa=True) == []
    fwd0, bwd0 = _counts("flashsdpa::fwd"), _counts("flashsdpa::bwd")
    with flashsdpa.enable():
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        grads = torch.autograd.grad(out, (q, k, v), dout)
    torch.cuda.synchronize()
    assert _counts("flashsdpa::fwd")[0] == fwd0[0] + 1
    assert _counts("flashsdpa::bwd") == (bwd0[0] + 1, bwd0[1])
    check_attention(q, k, v, dout, out.detach(), list(grads), None, scale=default_scale(512), causal_mode=1)


def test_deterministic_refused_with_the_reason() -> None:
    """dQ is added with float reductions in any order: under torch.use_deterministic_algorithms the
    table refuses the bucket, naming it (ops.py then raises as PyTorch does)."""
    _served_here(torch.bfloat16, Shape("det", 1, 1, 1, 1, 1, 512))
    family, *_, why = _backend.select(torch.cuda.current_device(), _backend.DTYPE_CODES[torch.bfloat16], 512, 512, 0,
                                      False, _backend.BACKWARD_DETERMINISTIC)  # fmt: skip
    assert family is None, (family, why)
    assert "head-dim bucket 512" in why and "use_deterministic_algorithms" in why, why


def test_sanitizer_subset(request: pytest.FixtureRequest) -> None:
    """scripts/gpu_check.sh runs this under compute-sanitizer: GQA, ragged lengths, causal, forward
    and backward."""
    shape = Shape("san", 1, 4, 2, 190, 130, 512)
    _served_here(torch.bfloat16, shape)
    q, k, v = (t.requires_grad_() for t in _inputs(request, shape, torch.bfloat16))
    dout = torch.randn_like(q)
    out, lse = flashsdpa.attention(q, k, v, causal=True, causal_alignment="bottom_right", return_lse=True)
    grads = torch.autograd.grad(out, (q, k, v), dout)
    torch.cuda.synchronize()
    check_attention(q, k, v, dout, out.detach(), list(grads), lse, scale=default_scale(512), causal_mode=2)
