# test_hdim512.py: the head-dim bucket 512 (issue 14; Gemma's global layers): the sm90 family's
# forward of its own (cuda/sm90/fwd512_kernel_sm90.cuh, two-CTA clusters), through the direct API
# and through SDPA inside enable(), against the float64 textbook with the project's rule, outputs
# poisoned with NaN. Its backward is not built: a training call runs PyTorch's efficient backward on
# our forward's output (counted a fallback, with the reason), and calls that road cannot take (a
# window, Dv != Dqk) are refused at the forward with a clear error.
from __future__ import annotations

import math
import zlib

import pytest
import torch
import torch.nn.functional as F

import flashsdpa
from flashsdpa import _backend, masks, roads
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


# Training above 256: no family of ours has that backward, so PyTorch's efficient backward runs on
# our forward's output and LSE (ops.py's _efficient_backward; selection.backward_road:
# no window, equal head dims, causal from the top-left or on equal lengths). Awkward lengths, GQA,
# the bucket's narrowest head dim, both causal alignments where they coincide.
ROAD = [
    (Shape("gqa_q_longer", 1, 4, 2, 239, 113, 512), 0),
    (Shape("tiny_causal", 2, 2, 2, 7, 7, 512), 1),
    (Shape("square_bottom_right", 1, 2, 1, 333, 333, 512), 2),  # the same diagonal as top-left
    (Shape("k_longer_causal", 1, 2, 2, 113, 1023, 512), 1),
    (Shape("narrowest", 1, 4, 4, 300, 257, 264), 0),
]


def _counts(op: str) -> tuple[int, int]:
    row = flashsdpa.stats()["ops"].get(op, {})
    return row.get("served", 0), row.get("fallback", 0)


@pytest.mark.parametrize("dtype", DTYPES.values(), ids=DTYPES.keys())
@pytest.mark.parametrize("shape,causal_mode", ROAD, ids=[c[0].name for c in ROAD])
def test_direct_training_on_the_efficient_road(request: pytest.FixtureRequest, shape: Shape, dtype: torch.dtype,
                                               causal_mode: int) -> None:  # fmt: skip
    """flashsdpa.attention with inputs that require grad: our forward (served), PyTorch's efficient
    backward (a fallback with its reason); output, LSE and gradients within the rule."""
    _served_here(dtype, shape)
    q, k, v = (t.requires_grad_() for t in _inputs(request, shape, dtype))
    dout = torch.randn(q.shape[:-1] + (shape.dv,), device=DEVICE, dtype=dtype)
    scale = default_scale(shape.head_dim)
    kwargs: dict[str, object] = {"causal": causal_mode > 0, "scale": scale, "return_lse": True,
                                 "causal_alignment": "bottom_right" if causal_mode == 2 else "top_left"}  # fmt: skip
    fwd0, bwd0 = _counts("flashsdpa::fwd"), _counts("flashsdpa::bwd")
    out, lse = flashsdpa.attention(q, k, v, **kwargs)
    grads = torch.autograd.grad(out, (q, k, v), dout)
    torch.cuda.synchronize()
    assert _counts("flashsdpa::fwd")[0] == fwd0[0] + 1, "our forward serves it"
    assert _counts("flashsdpa::bwd") == (bwd0[0], bwd0[1] + 1), "PyTorch's efficient backward, counted a fallback"
    check_attention(q, k, v, dout, out.detach(), list(grads), lse, scale=scale, causal_mode=causal_mode)


def test_sdpa_training_on_the_efficient_road(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """F.scaled_dot_product_attention at D 512 with grad, GQA, causal, inside enable(): our op's
    forward, PyTorch's efficient backward on its output, the reason in the stats; explain() says
    the call is served; the gradients within the rule. (SDPA takes the road from
    roads.ROAD_MIN_KEYS keys; lowered here, so that a small shape checks the road's numbers.)"""
    monkeypatch.setattr(roads, "ROAD_MIN_KEYS", 1)
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
    assert _counts("flashsdpa::bwd") == (bwd0[0], bwd0[1] + 1)
    assert any("efficient backward" in key for key in flashsdpa.stats()["fallback_reasons"]), flashsdpa.stats()
    check_attention(q, k, v, dout, out.detach(), list(grads), None, scale=default_scale(512), causal_mode=1)


def test_sdpa_training_below_the_road_length_keeps_pytorch(request: pytest.FixtureRequest) -> None:
    """Below roads.ROAD_MIN_KEYS keys (where the road measured slower than PyTorch's SDPA), a
    training call at D 512 inside enable() runs PyTorch's kernels both ways: none of ours serves
    it, explain() gives the length rule, and the gradients are PyTorch's own (within the rule);
    without grad the same call is ours."""
    shape = Shape("short", 2, 4, 2, 200, 200, 512)
    _served_here(torch.bfloat16, shape)
    q, k, v = (t.requires_grad_() for t in _inputs(request, shape, torch.bfloat16))
    dout = torch.randn_like(q)
    [why] = flashsdpa.explain(q, k, v, is_causal=True, enable_gqa=True)
    assert why == roads.speed_reason(k) and f"below {roads.ROAD_MIN_KEYS} keys" in why, why
    fwd0, bwd0 = _counts("flashsdpa::fwd"), _counts("flashsdpa::bwd")
    with flashsdpa.enable():
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        grads = torch.autograd.grad(out, (q, k, v), dout)
        with torch.no_grad():
            F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    torch.cuda.synchronize()
    assert _counts("flashsdpa::fwd") == (fwd0[0] + 1, fwd0[1]), "only the no-grad call is ours"
    assert _counts("flashsdpa::bwd") == bwd0
    check_attention(q, k, v, dout, out.detach(), list(grads), None, scale=default_scale(512), causal_mode=1)


@pytest.mark.parametrize("case", ["window", "bottom_right_sq_ne_sk", "dv_differs"])
def test_direct_training_refused_off_the_road(case: str) -> None:
    """Where neither a backward of ours nor PyTorch's efficient one on our output takes the call
    (a window; the bottom-right diagonal with Sq != Sk; Dv != Dqk), the direct API refuses inputs
    that require grad at the forward, with both reasons; detached, the same call runs."""
    dv = 320 if case == "dv_differs" else 512
    shape = Shape("bwd", 1, 2, 2, 64, 100 if case == "bottom_right_sq_ne_sk" else 64, 512, dv)
    _served_here(torch.bfloat16, shape)
    q, k, v = (t.requires_grad_() for t in make_qkv(shape, torch.bfloat16, DEVICE))
    kwargs: dict[str, object] = {"window": (16, 0)} if case == "window" else (
        {"causal": True, "causal_alignment": "bottom_right"} if case == "bottom_right_sq_ne_sk" else {})  # fmt: skip
    with pytest.raises(ValueError, match=r"require grad: no backward of ours takes them here(.|\n)*"
                                         r"PyTorch's efficient backward on our output cannot either"):
        flashsdpa.attention(q, k, v, **kwargs)
    with torch.no_grad():
        out = flashsdpa.attention(q, k, v, **kwargs)
    assert isinstance(out, torch.Tensor) and out.shape == (1, 2, 64, dv) and bool(torch.isfinite(out).all())


def test_sanitizer_subset(request: pytest.FixtureRequest) -> None:
    """scripts/gpu_check.sh runs this under compute-sanitizer: GQA, ragged lengths, causal."""
    shape = Shape("san", 1, 4, 2, 190, 130, 512)
    _served_here(torch.bfloat16, shape)
    q, k, v = _inputs(request, shape, torch.bfloat16)
    out, lse = flashsdpa.attention(q, k, v, causal=True, causal_alignment="bottom_right", return_lse=True)
    torch.cuda.synchronize()
    check_attention(q, k, v, None, out, None, lse, scale=default_scale(512), causal_mode=2)
