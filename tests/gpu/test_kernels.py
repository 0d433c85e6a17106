# test_kernels.py: flashsdpa's CUDA kernels through the direct API (flashsdpa.attention), forward
# and backward, over the named shape table x dtypes x head dims x causal alignments x GQA ratios x
# strided views x Dv != Dqk, against a float64 reference with the project's rule, outputs poisoned
# with NaN before every launch. Each call takes the family the capability table picks (on an
# H100/H200 the sm90 one where it serves); scripts/gpu_check.sh runs the file again with
# FLASHSDPA_FAMILY=sm80, so every shape runs on both families. test_sanitizer_subset is what
# scripts/gpu_check.sh runs under compute-sanitizer.
from __future__ import annotations

import math
import os
import zlib
from collections.abc import Callable

import pytest
import torch

import flashsdpa
from flashsdpa import _backend, masks
from helpers import (
    CAUSAL_MODES,
    SHAPES,
    Shape,
    assert_all_finite,
    check_attention,
    default_scale,
    gpu_skip_reason,
    make_qkv,
    skip_unless_compiled,
)

GPU_SKIP = gpu_skip_reason()
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(GPU_SKIP is not None, reason=f"GPU suite: {GPU_SKIP}")]

DEVICE = "cuda"
DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}
HEAD_DIMS = (32, 64, 72, 96, 128, 136, 192, 256)  # every bucket, and two that need padding (72, 136)


def _generator(request: pytest.FixtureRequest) -> torch.Generator:
    # Fresh inputs for every case, reproducible from the test id.
    return torch.Generator(device=DEVICE).manual_seed(zlib.crc32(request.node.nodeid.encode()))


def run_and_check(
    request: pytest.FixtureRequest,
    shape: Shape,
    dtype: torch.dtype,
    causal_mode: int | masks.MaskSpec,
    *,
    layout: str = "bhsd",
    scale: float | None = None,
    input_scale: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor, tuple[torch.Tensor, ...]]:
    """Forward and backward through flashsdpa.attention; out, lse, dq, dk, dv against the float64
    textbook with PyTorch's math SDPA in the input dtype as the yardstick (helpers.check_attention).
    ``causal_mode``: 0 / 1 / 2 (none, top-left, bottom-right causal) or a MaskSpec (windows).
    Returns ours."""
    skip_unless_compiled(dtype, shape.head_dim, shape.dv)
    gen = _generator(request)
    q, k, v = make_qkv(shape, dtype, DEVICE, layout=layout, generator=gen)
    if input_scale != 1.0:
        for t in (q, k, v):
            t.mul_(input_scale)
    for t in (q, k, v):
        t.requires_grad_()
    dout = torch.randn(shape.batch, shape.heads_q, shape.seqlen_q, shape.dv, generator=gen, device=DEVICE).to(dtype)
    scale = default_scale(shape.head_dim) if scale is None else scale
    mask = masks.BY_CAUSAL_MODE[causal_mode] if isinstance(causal_mode, int) else causal_mode
    left, right, align = mask
    kwargs: dict[str, object] = {"causal": right == 0, "scale": scale, "return_lse": True}
    if (left, right) != (-1, -1):  # the alignment places causal masks and windows alike
        kwargs["causal_alignment"] = "bottom_right" if align == masks.BOTTOM_RIGHT else "top_left"
    if left >= 0 or right > 0:
        kwargs["window"] = (left, right)

    out, lse = flashsdpa.attention(q, k, v, **kwargs)
    grads = torch.autograd.grad(out, (q, k, v), dout)
    torch.cuda.synchronize()
    check_attention(q, k, v, dout, out, grads, lse, scale=scale, causal_mode=causal_mode)

    # Unwritten elements: run the same kernels again into NaN-filled outputs. The forward is
    # deterministic, so anything but bitwise equality (NaN != NaN) means an element was missed;
    # the backward's dQ is accumulated with atomics, so its poisoned run is checked by the rule.
    if q.numel() and k.numel() and all(_backend.rows_aligned(t, (0, 1, 2)) for t in (q, k, v)):
        qd, kd, vd = q.detach(), k.detach(), v.detach()
        out_p = torch.full_like(out, math.nan)
        lse_p = torch.full_like(lse, math.nan)
        _backend.launch_fwd(qd, kd, vd, out_p, lse_p, scale, mask)
        dq_p, dk_p, dv_p = (torch.full_like(t, math.nan) for t in (qd, kd, vd))
        _backend.launch_bwd(dout, qd, kd, vd, out.detach(), lse.detach(), dq_p, dk_p, dv_p, scale, mask)
        torch.cuda.synchronize()
        assert torch.equal(out_p, out), "forward into NaN-poisoned buffers differs: unwritten output elements"
        assert torch.equal(lse_p, lse), "forward into NaN-poisoned buffers differs: unwritten LSE elements"
        check_attention(q, k, v, dout, out_p, (dq_p, dk_p, dv_p), lse_p, scale=scale, causal_mode=causal_mode)
    return out, lse, grads


_SHAPE_CASES = [(name, causal, dtype) for name in SHAPES for causal in CAUSAL_MODES for dtype in DTYPES]


@pytest.mark.parametrize("name,causal,dtype", _SHAPE_CASES, ids=[f"{n}-{c}-{d}" for n, c, d in _SHAPE_CASES])
def test_shape_table(request: pytest.FixtureRequest, name: str, causal: str, dtype: str) -> None:
    run_and_check(request, SHAPES[name], DTYPES[dtype], CAUSAL_MODES[causal])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("causal", CAUSAL_MODES)
@pytest.mark.parametrize("head_dim", HEAD_DIMS)
def test_head_dims(request: pytest.FixtureRequest, head_dim: int, causal: str, dtype: str) -> None:
    # GQA 2:1 and ragged tiles on both axes; Sq < Sk or Sq > Sk depending on the head dim.
    sq, sk = (113, 239) if head_dim % 64 else (239, 113)
    run_and_check(request, Shape("head_dim", 2, 4, 2, sq, sk, head_dim), DTYPES[dtype], CAUSAL_MODES[causal])


@pytest.mark.parametrize("dims", [(64, 128), (128, 64), (32, 256), (256, 32), (72, 136), (192, 96)], ids=str)
@pytest.mark.parametrize("causal", CAUSAL_MODES)
def test_value_head_dim_differs(request: pytest.FixtureRequest, dims: tuple[int, int], causal: str) -> None:
    head_dim, head_dim_v = dims
    shape = Shape("dv", 2, 4, 2, 239, 113, head_dim, head_dim_v)
    run_and_check(request, shape, torch.bfloat16, CAUSAL_MODES[causal])


@pytest.mark.parametrize("lengths", [(1, 239), (113, 1023), (1023, 113)], ids=lambda p: f"q{p[0]}k{p[1]}")
@pytest.mark.parametrize("causal", CAUSAL_MODES)
@pytest.mark.parametrize("ratio", [1, 2, 8], ids=lambda r: f"gqa{r}")
def test_gqa(request: pytest.FixtureRequest, ratio: int, causal: str, lengths: tuple[int, int]) -> None:
    shape = Shape("gqa", 2, 2 * ratio, 2, lengths[0], lengths[1], 128)
    run_and_check(request, shape, torch.float16 if ratio == 2 else torch.bfloat16, CAUSAL_MODES[causal])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("causal", CAUSAL_MODES)
@pytest.mark.parametrize("layout", ["bshd", "packed"])
def test_strided_views(request: pytest.FixtureRequest, layout: str, causal: str, dtype: str) -> None:
    """Transposed (B, S, H, D) memory and slices of one packed QKV projection, used as they are."""
    run_and_check(request, Shape("strided", 2, 4, 2, 239, 239, 64), DTYPES[dtype], CAUSAL_MODES[causal], layout=layout)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", ["q_longer", "q_much_longer", "single_key"])
def test_rows_without_keys(request: pytest.FixtureRequest, name: str, dtype: str) -> None:
    """Bottom-right causal with Sq > Sk: the first Sq - Sk rows see no key. Output exactly 0, LSE
    +inf, their dq exactly 0, never NaN (outputs are NaN-poisoned, so unwritten rows would show)."""
    shape = SHAPES[name]
    out, lse, (dq, dk, dv) = run_and_check(request, shape, DTYPES[dtype], CAUSAL_MODES["bottom_right"])
    empty = shape.seqlen_q - shape.seqlen_k
    assert torch.equal(out[:, :, :empty], torch.zeros_like(out[:, :, :empty]))
    assert bool((lse[:, :, :empty] == math.inf).all())
    assert bool(torch.isfinite(lse[:, :, empty:]).all())
    assert torch.equal(dq[:, :, :empty], torch.zeros_like(dq[:, :, :empty]))
    for t in (out, dq, dk, dv):
        assert_all_finite(name, t)


@pytest.mark.parametrize("scale", [0.01, 0.5, 2.0])
def test_scale(request: pytest.FixtureRequest, scale: float) -> None:
    run_and_check(request, Shape("scale", 2, 4, 4, 113, 239, 64), torch.bfloat16, CAUSAL_MODES["top_left"], scale=scale)


@pytest.mark.parametrize("dtype", DTYPES)
def test_large_logits(request: pytest.FixtureRequest, dtype: str) -> None:
    """Inputs x4 (scores with a standard deviation near 16): the online softmax rescaling of the
    running max must keep every exp in range."""
    run_and_check(request, Shape("hot", 1, 4, 4, 239, 1023, 128), DTYPES[dtype], CAUSAL_MODES["none"], input_scale=4.0)


# ---- the Hopper backward's bucket (128) -----------------------------------------------------------
# On an H100/H200 the capability table gives these backwards to the sm90 family (bucket 128: any
# max(head_dim_qk, head_dim_v) in (64, 128]); with FLASHSDPA_FAMILY=sm80 the portable family runs
# the same shapes. Awkward lengths around its 64-query x 128-key tile, Sq != Sk both ways (bottom-right
# then leaves rows without keys), GQA and MQA (its CTA loops the group's query heads), and head
# dims below the bucket (TMA zero-fills the columns past them).
_BWD128_SHAPES = [
    Shape("b128_one", 1, 2, 2, 1, 1, 128),
    Shape("b128_tiny", 2, 2, 2, 7, 7, 128),
    Shape("b128_113", 2, 4, 4, 113, 113, 128),
    Shape("b128_1023", 1, 2, 2, 1023, 1023, 128),
    Shape("b128_q_longer", 2, 2, 2, 1023, 113, 128),
    Shape("b128_k_longer", 2, 2, 2, 113, 1023, 128),
    Shape("b128_decode", 2, 4, 4, 1, 1023, 128),
    Shape("b128_single_key", 2, 2, 2, 113, 1, 128),
    Shape("b128_gqa4", 2, 8, 2, 239, 1023, 128),
    Shape("b128_mqa", 1, 8, 1, 1023, 239, 128),
    Shape("b128_dv_wider", 2, 4, 2, 239, 113, 96, 128),
    Shape("b128_dv_narrower", 2, 4, 2, 113, 239, 128, 96),
    Shape("b128_d72", 2, 4, 2, 239, 239, 72),
]


def _backward_family(q: torch.Tensor, v: torch.Tensor, mask: masks.MaskSpec) -> str | None:
    """The family the capability table gives this backward (aligned tensors, no deterministic
    mode: the per-call hooks then agree with it)."""
    code = _backend.DTYPE_CODES[q.dtype]
    return _backend.select(q.get_device(), code, q.shape[-1], v.shape[-1], masks.kind(mask), False, True)[0]


def _sm90_serves(mask: masks.MaskSpec) -> bool:
    """Whether this GPU and build should give a bucket-128 backward with ``mask`` to sm90."""
    rows = [f for f in _backend.capabilities() if f["family"] == "sm90"]
    return (
        torch.cuda.get_device_capability() == (9, 0)
        and bool(rows)
        and 128 in rows[0]["head_dims_by_direction"].get("backward", [])
        and masks.KIND_NAMES[masks.kind(mask)] in rows[0]["masks"]
    )


_BWD128_CASES = [(shape, causal, dtype) for shape in _BWD128_SHAPES for causal in CAUSAL_MODES for dtype in DTYPES]


@pytest.mark.parametrize(
    "shape,causal,dtype", _BWD128_CASES, ids=[f"{s.name}-{c}-{d}" for s, c, d in _BWD128_CASES]
)
def test_bwd_bucket128(request: pytest.FixtureRequest, shape: Shape, causal: str, dtype: str) -> None:
    mask = masks.BY_CAUSAL_MODE[CAUSAL_MODES[causal]]
    skip_unless_compiled(DTYPES[dtype], shape.head_dim, shape.dv)
    if "FLASHSDPA_FAMILY" not in os.environ and _sm90_serves(mask):
        # Without this the rows could pass on the portable family alone after a table regression.
        probe = torch.empty(1, 1, 1, shape.head_dim, device=DEVICE, dtype=DTYPES[dtype])
        family = _backward_family(probe, probe.new_empty(1, 1, 1, shape.dv), mask)
        assert family == "sm90", f"the capability table gives this backward to {family}, not sm90"
    run_and_check(request, shape, DTYPES[dtype], CAUSAL_MODES[causal])


# Windows at the same bucket: left 0, 1, 127, 128, 129 around the 64 / 128 tiles, causal and not,
# both alignments, Sq != Sk both ways (lengths above every left, so no side is normalized away).
# On an H100/H200 the sm90 backward serves them (its row lists every mask kind: BlockMask's ranges
# and partial tiles); FLASHSDPA_FAMILY=sm80 runs the same rows on the portable family.
_WINDOW_LENGTHS = ((300, 517), (517, 300))


@pytest.mark.parametrize("right", [0, -1], ids=lambda r: f"right{r}")
@pytest.mark.parametrize("left", [0, 1, 127, 128, 129], ids=lambda w: f"left{w}")
@pytest.mark.parametrize("lengths", _WINDOW_LENGTHS, ids=lambda s: f"q{s[0]}k{s[1]}")
@pytest.mark.parametrize("align", [masks.TOP_LEFT, masks.BOTTOM_RIGHT], ids=["top_left", "bottom_right"])
def test_bwd_bucket128_windows(
    request: pytest.FixtureRequest, align: int, lengths: tuple[int, int], left: int, right: int
) -> None:
    run_and_check(request, Shape("b128_window", 1, 4, 2, *lengths, 128, 96), torch.bfloat16, (left, right, align))


# Deterministic mode (torch.use_deterministic_algorithms(True)): where a family of ours runs it
# (the sm90 backward: key blocks add dQ in a fixed order), 20 backwards of one shape with many key
# and query blocks and GQA give bitwise-identical dq, dk, dv, equal to the default mode's but for
# the order of the adds (the usual rule is checked on the same kernel by the rows above).
def _deterministic_runs(
    request: pytest.FixtureRequest, head_dim: int, causal: str, runs: int
) -> tuple[tuple[torch.Tensor, ...], Callable[[], tuple[torch.Tensor, ...]]]:
    """``runs`` backwards of one shape with many key and query blocks and GQA, asserted bitwise
    equal; returns the first run's (dq, dk, dv) and a function running one more backward (under
    whatever mode and kernel choice hold when it is called)."""
    torch.manual_seed(zlib.crc32(request.node.name.encode()))
    q = torch.randn(2, 8, 1023, head_dim, device=DEVICE, dtype=torch.bfloat16, requires_grad=True)
    k = torch.randn(2, 2, 1500, head_dim, device=DEVICE, dtype=torch.bfloat16, requires_grad=True)
    v = torch.randn(2, 2, 1500, head_dim, device=DEVICE, dtype=torch.bfloat16, requires_grad=True)
    dout = torch.randn(2, 8, 1023, head_dim, device=DEVICE, dtype=torch.bfloat16)

    def backward() -> tuple[torch.Tensor, ...]:
        out = flashsdpa.attention(q, k, v, causal=causal != "none")
        return torch.autograd.grad(out, (q, k, v), dout)

    grads = [backward() for _ in range(runs)]
    for run in grads[1:]:
        for name, first, now in zip(("dq", "dk", "dv"), grads[0], run):
            assert torch.equal(first, now), f"{name} differs between deterministic runs"
    return grads[0], backward


@pytest.mark.parametrize("causal", ["none", "top_left"])
@pytest.mark.parametrize("head_dim", [64, 128])
def test_bwd_deterministic_bitwise(
    request: pytest.FixtureRequest, causal: str, head_dim: int, deterministic: Callable[[bool], None]
) -> None:
    skip_unless_compiled(torch.bfloat16, head_dim, head_dim)
    mask = masks.BY_CAUSAL_MODE[CAUSAL_MODES[causal]]
    code = _backend.DTYPE_CODES[torch.bfloat16]
    verdict = _backend.select(0, code, head_dim, head_dim, masks.kind(mask), False, _backend.BACKWARD_DETERMINISTIC)
    if verdict[0] is None:
        pytest.skip("no deterministic backward of ours on this GPU / build (the sm90 family's)")
    deterministic(False)  # not warn_only: a nondeterministic path would raise
    first, backward = _deterministic_runs(request, head_dim, causal, 20)
    # The same kernel without the ordering: equal up to the order of the fp32 dQ adds (a bf16 ulp
    # of the largest gradient at most); a skipped or doubled dQ tile would be O(1) off.
    torch.use_deterministic_algorithms(False)  # (the fixture restores the caller's setting)
    for name, ours, other in zip(("dq", "dk", "dv"), first, backward()):
        diff = (ours.float() - other.float()).abs().max().item()
        assert diff <= 2**-7 * other.float().abs().max().item(), f"{name}: deterministic vs default differ by {diff}"


# Dense deterministic calls launch grouped over the heads one wave holds (bwd_kernel_sm90.cuh's
# BwdGridOrder: ceil(num_sms / key blocks) (KV head, batch) pairs a group, key block outer): here 12
# key blocks, so groups of 11 pairs on a 132-SM part, and 15 pairs, so a full group and a partial
# one. Every dQ tile must land once (the rule against the float64 textbook, the references computed
# in the default mode) and two deterministic runs agree bit for bit.
@pytest.mark.parametrize("head_dim", [64, 128])
def test_bwd_deterministic_head_groups(
    request: pytest.FixtureRequest, head_dim: int, deterministic: Callable[[bool], None]
) -> None:
    skip_unless_compiled(torch.bfloat16, head_dim, head_dim)
    verdict = _backend.select(0, _backend.DTYPE_CODES[torch.bfloat16], head_dim, head_dim,
                              masks.kind(masks.BY_CAUSAL_MODE[0]), False, _backend.BACKWARD_DETERMINISTIC)  # fmt: skip
    if verdict[0] is None:
        pytest.skip("no deterministic backward of ours on this GPU / build (the sm90 family's)")
    shape = Shape("det_groups", 3, 10, 5, 777, 1500, head_dim)
    gen = _generator(request)
    q, k, v = make_qkv(shape, torch.bfloat16, DEVICE, generator=gen)
    for t in (q, k, v):
        t.requires_grad_()
    dout = torch.randn(3, 10, 777, head_dim, generator=gen, device=DEVICE).to(torch.bfloat16)
    deterministic(False)  # not warn_only: a nondeterministic path would raise
    runs = []
    for _ in range(2):
        out, lse = flashsdpa.attention(q, k, v, return_lse=True)
        runs.append(torch.autograd.grad(out, (q, k, v), dout))
    for name, a, b in zip(("dq", "dk", "dv"), *runs):
        assert torch.equal(a, b), f"{name} differs between deterministic runs"
    # The references (PyTorch's math and flash backwards among them) in the default mode.
    torch.use_deterministic_algorithms(False)  # (the fixture restores the caller's setting)
    torch.cuda.synchronize()
    check_attention(q, k, v, dout, out, runs[0], lse, scale=default_scale(head_dim), causal_mode=0)


# Masked deterministic calls with at most 8 key blocks a head take the wave groups (bwd_kernel_sm90.cuh's
# BwdGridOrder, kDetWaveGroupBlocks; session 49): ceil(num_sms / key blocks) (KV head, batch) pairs a
# group, every key block of a group's heads in one wave, their dQ turns chaining from the first step.
# 8 key blocks (groups of 17 pairs on a 132-SM part) and 3 (groups of 44), with more pairs than one
# group: a full group and a partial one; causal top-left and bottom-right (Sq != Sk), GQA. Every dQ
# tile must land once, in the same order every run.
@pytest.mark.parametrize("causal", ["top_left", "bottom_right"])
@pytest.mark.parametrize("seqlen_k,batch", [(1000, 3), (300, 5)], ids=["8_blocks", "3_blocks"])
@pytest.mark.parametrize("head_dim", [64, 128])
def test_bwd_deterministic_wave_groups(
    request: pytest.FixtureRequest, head_dim: int, seqlen_k: int, batch: int, causal: str,
    deterministic: Callable[[bool], None],
) -> None:  # fmt: skip
    skip_unless_compiled(torch.bfloat16, head_dim, head_dim)
    mask = masks.BY_CAUSAL_MODE[CAUSAL_MODES[causal]]
    verdict = _backend.select(0, _backend.DTYPE_CODES[torch.bfloat16], head_dim, head_dim, masks.kind(mask), False,
                              _backend.BACKWARD_DETERMINISTIC)  # fmt: skip
    if verdict[0] is None:
        pytest.skip("no deterministic backward of ours on this GPU / build (the sm90 family's)")
    shape = Shape("det_waves", batch, 20, 10, 700, seqlen_k, head_dim)
    gen = _generator(request)
    q, k, v = make_qkv(shape, torch.bfloat16, DEVICE, generator=gen)
    for t in (q, k, v):
        t.requires_grad_()
    dout = torch.randn(batch, 20, 700, head_dim, generator=gen, device=DEVICE).to(torch.bfloat16)
    deterministic(False)  # not warn_only: a nondeterministic path would raise
    kwargs = {"causal": True, "causal_alignment": causal, "return_lse": True}
    runs = []
    for _ in range(2):
        out, lse = flashsdpa.attention(q, k, v, **kwargs)  # type: ignore[arg-type]
        runs.append(torch.autograd.grad(out, (q, k, v), dout))
    for name, a, b in zip(("dq", "dk", "dv"), *runs):
        assert torch.equal(a, b), f"{name} differs between deterministic runs"
    torch.use_deterministic_algorithms(False)  # (the fixture restores the caller's setting)
    torch.cuda.synchronize()
    check_attention(q, k, v, dout, out, runs[0], lse, scale=default_scale(head_dim),
                    causal_mode=CAUSAL_MODES[causal])  # fmt: skip


# The sm90 backward stores (not adds) the first dQ tile of each query block and the preprocess
# zeroes only the blocks no key block visits (params.h's dq_first_store): with every workspace
# byte poisoned (0xFF: NaN floats, -1 semaphores), a block the kernels neither store nor zero shows
# up as NaN in dq. Rows that see no key (bottom-right causal with Sq > Sk, windows), ragged blocks,
# GQA, one query row, and deterministic mode (the same words count turns).
_POISONED_WORKSPACE_CASES = [
    ("sq_gt_sk_bottom_right", Shape("ws_br", 2, 4, 2, 300, 70, 128), masks.CAUSAL_BOTTOM_RIGHT),
    # The d64 tall step's 128-row words: rows 0-229 see no key, so query block 0 is nobody's (the
    # preprocess zeroes it) and block 1's first 64 rows are stored as zeros with its last 64.
    ("sq_gt_sk_bottom_right_tall", Shape("ws_br64", 2, 4, 2, 300, 70, 64), masks.CAUSAL_BOTTOM_RIGHT),
    ("window_empty_rows", Shape("ws_win", 1, 4, 4, 257, 120, 64), (5, 0, masks.BOTTOM_RIGHT)),
    ("ragged_gqa_top_left", Shape("ws_gqa", 2, 8, 2, 131, 389, 128), masks.CAUSAL_TOP_LEFT),
    ("one_row", Shape("ws_one", 3, 2, 2, 1, 200, 64), masks.NO_MASK),
    ("unmasked_long", Shape("ws_long", 1, 2, 1, 700, 1100, 128), masks.NO_MASK),
]


@pytest.mark.parametrize("deterministic", [False, True])
@pytest.mark.parametrize("name,shape,mask", _POISONED_WORKSPACE_CASES, ids=[c[0] for c in _POISONED_WORKSPACE_CASES])
def test_bwd_poisoned_workspace(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, name: str, shape: Shape, mask: masks.MaskSpec,
    deterministic: bool,
) -> None:  # fmt: skip
    _check_poisoned_workspace(request, monkeypatch, [(shape, mask)], deterministic)


def _check_poisoned_workspace(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, cases: list[tuple[Shape, masks.MaskSpec]],
    deterministic: bool,
) -> None:  # fmt: skip
    """run_and_check of each (shape, mask), bf16, with every workspace byte 0xFF, in deterministic
    mode or not."""
    monkeypatch.setattr(
        _backend, "_workspace", lambda n, like: torch.full((n,), 0xFF, dtype=torch.uint8, device=like.device)
    )
    before = (torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled())
    torch.use_deterministic_algorithms(deterministic, warn_only=True)  # where no family orders dQ: a warning
    try:
        for shape, mask in cases:
            run_and_check(request, shape, torch.bfloat16, mask)
    finally:
        torch.use_deterministic_algorithms(before[0], warn_only=before[1])


# Varlen forwards on every head-dim bucket and mask kind, GQA, fp16 and bf16, sequences with no
# queries or no keys, against the per-sequence float64 reference (the varlen backward runs too:
# the portable family's). On an H100/H200 the forward is the sm90 family's (packed rows through
# TMA, O by plain stores: rows past a sequence must not reach the next one), the launch then
# repeated into NaN-poisoned outputs so that an unwritten row shows.
_VARLEN_CASES = [
    (d, dtype, causal) for d in (64, 128, 256) for dtype in ("bf16", "fp16") for causal in ("none", "top_left", "bottom_right")
]


@pytest.mark.parametrize("head_dim,dtype,causal", _VARLEN_CASES, ids=[f"d{d}-{t}-{c}" for d, t, c in _VARLEN_CASES])
def test_varlen_table(request: pytest.FixtureRequest, head_dim: int, dtype: str, causal: str) -> None:
    torch_dtype = DTYPES[dtype]
    skip_unless_compiled(torch_dtype, head_dim)
    gen = _generator(request)
    lengths_q, lengths_k = (0, 130, 1, 517, 64, 300), (300, 0, 1, 517, 700, 77)
    cu_q = torch.tensor([0, *torch.tensor(lengths_q).cumsum(0).tolist()], dtype=torch.int32, device=DEVICE)
    cu_k = torch.tensor([0, *torch.tensor(lengths_k).cumsum(0).tolist()], dtype=torch.int32, device=DEVICE)
    q = torch.randn(sum(lengths_q), 4, head_dim, generator=gen, device=DEVICE).to(torch_dtype).requires_grad_()
    k, v = (torch.randn(sum(lengths_k), 2, head_dim, generator=gen, device=DEVICE).to(torch_dtype).requires_grad_()
            for _ in "kv")  # fmt: skip
    dout = torch.randn_like(q)
    mask = masks.BY_CAUSAL_MODE[CAUSAL_MODES[causal]]
    kwargs: dict[str, object] = {"causal": causal != "none", "return_lse": True}
    if causal == "bottom_right":
        kwargs["causal_alignment"] = "bottom_right"
    out, lse = flashsdpa.attention_varlen(q, k, v, cu_q, cu_k, max(lengths_q), max(lengths_k), **kwargs)
    dq, dk, dv = torch.autograd.grad(out, (q, k, v), dout)
    scale = default_scale(head_dim)
    # The same forward into NaN-filled outputs: bitwise equal, or a row was left unwritten.
    out_p, lse_p = torch.full_like(out, math.nan), torch.full_like(lse, math.nan)
    _backend.launch_fwd(q.detach(), k.detach(), v.detach(), out_p, lse_p, scale, mask,
                        (cu_q, cu_k, None, max(lengths_q), max(lengths_k)))  # fmt: skip
    torch.cuda.synchronize()
    assert torch.equal(out_p, out.detach()), "varlen forward into NaN-poisoned buffers differs: unwritten rows"
    assert torch.equal(lse_p, lse), "varlen forward into NaN-poisoned buffers differs: unwritten LSE rows"
    for b in range(len(lengths_q)):
        if lengths_q[b] == 0:
            continue
        rq = slice(int(cu_q[b]), int(cu_q[b + 1]))
        rk = slice(int(cu_k[b]), int(cu_k[b + 1]))
        if lengths_k[b] == 0:  # rows that see no key: output 0, LSE +inf, no gradient
            assert not out[rq].any() and not dq[rq].any(), f"sequence {b} has no keys: output and dq must be 0"
            assert torch.all(lse[:, rq] == math.inf), f"sequence {b} has no keys: LSE must be +inf"
            continue
        one = [t.detach()[r].transpose(0, 1).unsqueeze(0) for t, r in ((q, rq), (k, rk), (v, rk))]
        grads = [g[r].transpose(0, 1).unsqueeze(0) for g, r in ((dq, rq), (dk, rk), (dv, rk))]
        check_attention(
            *one, dout[rq].transpose(0, 1).unsqueeze(0), out[rq].transpose(0, 1).unsqueeze(0), grads,
            lse[:, rq].unsqueeze(0), scale=scale, causal_mode=CAUSAL_MODES[causal],
        )  # fmt: skip


def test_varlen_forward_family() -> None:
    """The capability table: on an H100/H200 varlen forwards go to the sm90 family where it is
    built, varlen backwards to the portable one (the sm90 backward is dense only)."""
    rows = {f["family"]: f for f in _backend.capabilities()}
    if "sm90" not in rows or torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("no sm90 family on this GPU / build")
    assert rows["sm90"]["layouts_by_direction"] == {"forward": ["dense", "varlen"], "backward": ["dense"]}
    dtype, code = next(iter(_backend.DTYPE_CODES.items()))
    # The queries below name head dim 128: a build without it selects nothing (session 27's d64-only
    # build failed here with None).
    skip_unless_compiled(dtype, 128)
    forced = os.environ.get("FLASHSDPA_FAMILY")
    if forced is not None:  # gpu_check.sh's second run: the forced family takes both directions
        assert _backend.select(0, code, 128, 128, 0, True, False)[0] == forced
        assert _backend.select(0, code, 128, 128, 0, True, True)[0] == forced
        return
    assert _backend.select(0, code, 128, 128, 0, True, False)[0] == "sm90"
    assert _backend.select(0, code, 128, 128, 0, True, True)[0] == "sm80"


# The sm90 family's forward speed rule (tiles_sm90.cu's fwd_sm90_yields): causal d <= 64 forwards
# of at most 256 query rows and keys on at most two waves of 128-row tiles go to the portable
# family (9.3 against 11.3 us at B 16 x H 16 x S 128 on the H200), the rest stay on sm90 (its
# d64 short tile: 114.7 against 144.4 us at B 64 x H 32 x S 256 causal).
# (shape (B, H, Sq, Sk, D), mask, the family with the rule on; tiles = B x H x ceil(Sq / 128)
# against 2 x 132 SMs on the H200, 2 x 114 on an H100 PCIe).
_RULE_CASES = [
    ((4, 16, 256, 256, 64), masks.CAUSAL_TOP_LEFT, "sm80"),  # 128 tiles
    ((2, 4, 100, 37, 48), masks.CAUSAL_BOTTOM_RIGHT, "sm80"),  # d 48: the same bucket
    ((2, 4, 256, 256, 64), masks.NO_MASK, "sm90"),  # not causal: the short tile wins
    ((64, 32, 256, 256, 64), masks.CAUSAL_TOP_LEFT, "sm90"),  # 4096 tiles
    ((2, 4, 257, 256, 64), masks.CAUSAL_TOP_LEFT, "sm90"),  # 257 rows
    ((2, 4, 256, 257, 64), masks.CAUSAL_BOTTOM_RIGHT, "sm90"),  # 257 keys
    ((32, 32, 512, 512, 64), masks.CAUSAL_TOP_LEFT, "sm90"),
    ((8, 16, 256, 256, 128), masks.CAUSAL_TOP_LEFT, "sm90"),  # d 128: sm90 wins at every size
]


@pytest.mark.parametrize("sizes,mask,family", _RULE_CASES, ids=[f"{'x'.join(map(str, c[0]))}-{c[2]}" for c in _RULE_CASES])
def test_forward_speed_rule(sizes: tuple[int, int, int, int, int], mask: masks.MaskSpec, family: str) -> None:
    """The forward family of each case (_C.fwd_family: the launch's own choice), with the rule
    on, off (FLASHSDPA_SPEED_RULES=0: sm90 takes every case) and under FLASHSDPA_FAMILY."""
    b, h, sq, sk, d = sizes
    rows = {f["family"]: f for f in _backend.capabilities()}
    if "sm90" not in rows or "sm80" not in rows or torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("needs an sm_90 GPU and both families built")
    skip_unless_compiled(torch.bfloat16, d)
    q = torch.randn(b, h, sq, d, device=DEVICE, dtype=torch.bfloat16)
    k, v = (torch.randn(b, h, sk, d, device=DEVICE, dtype=torch.bfloat16) for _ in range(2))
    out = torch.empty_like(q)
    lse = torch.empty(b, h, sq, device=DEVICE, dtype=torch.float32)
    got, why = _backend._C.fwd_family(_backend._spec(q, k, v, out, lse, d**-0.5, mask, None))
    forced = os.environ.get("FLASHSDPA_FAMILY")
    if forced is not None:
        assert (got, why) == (forced, None)
    elif os.environ.get("FLASHSDPA_SPEED_RULES") == "0":
        assert (got, why) == ("sm90", None)
    else:
        assert got == family
        # The handed-on calls say why (the sm90 row's rule), the others say nothing.
        assert (why is not None and why.startswith("family sm90 yields: d <= 64")) == (family == "sm80"), why


_SANITIZER_CASES = [
    (Shape("san_tiny", 1, 2, 2, 7, 7, 64), "none", torch.bfloat16),
    (Shape("san_gqa", 1, 4, 2, 113, 239, 128), "bottom_right", torch.float16),
    (Shape("san_decode", 1, 2, 1, 1, 65, 32), "top_left", torch.bfloat16),
    (Shape("san_dv", 1, 2, 2, 33, 17, 64, 128), "bottom_right", torch.bfloat16),
    # Two key blocks and three query blocks of the sm90 backward's tile, GQA 4 (its group loop).
    (Shape("san_bwd128", 1, 4, 1, 130, 257, 128), "top_left", torch.bfloat16),
    # The sm90 d64 forward's short tile (tiles_sm90.cu's fwd_sm90_short_tile: causal, <= 1024 rows
    # and keys; past the speed rule's 256), three 128-row blocks, the last of one row. Not 600 rows:
    # there racecheck stops on "Internal Sanitizer Error: The Sanitizer failed to handle a hardware
    # exception" inside the tests' bf16 math reference, our kernels not involved (session 27, H200:
    # scripts/dev/racecheck_probe.py torch_reduced 600 alone; clean at 257).
    (Shape("san_short64", 1, 2, 2, 257, 257, 64), "top_left", torch.bfloat16),
    # The sm90 d64 backward's tall step (128-query steps, 128-row dQ semaphores): GQA 2, Sq != Sk,
    # a ragged last query block and three key blocks.
    (Shape("san_tall64", 1, 4, 2, 200, 329, 64), "bottom_right", torch.float16),
    # The sm90 d256 backward's 64-key tile (dQ by float reductions): GQA 2, Sq != Sk, ragged
    # last blocks on both axes, three key blocks.
    (Shape("san_wide256", 1, 4, 2, 97, 150, 256), "bottom_right", torch.bfloat16),
]


@pytest.mark.parametrize("shape,causal,dtype", _SANITIZER_CASES, ids=[str(c[0]) for c in _SANITIZER_CASES])
def test_sanitizer_subset(request: pytest.FixtureRequest, shape: Shape, causal: str, dtype: torch.dtype) -> None:
    """A few small cases covering every kernel path, fast enough under compute-sanitizer (on an
    H100/H200 the bucket-128 backwards take the sm90 family, the others the portable one)."""
    run_and_check(request, shape, dtype, CAUSAL_MODES[causal])


# ---- the sm90 backward's grouped items (bwd_kernel_sm90.cuh's kGrouped; d64 and d256, and d128 in
# dev builds; issue 13): a CTA runs k consecutive key blocks, the ring counting its steps over all
# of them, the next item's K / V loaded once the consumers have read this one's (kv_empty). The launcher picks k from the shape
# (bwd_launch_sm90.cuh's bwd_group_sm90: 1 on problems this small); FLASHSDPA_SM90_BWD_GROUP=k
# forces it. Item counts that k does not divide (the last CTA runs fewer), items without steps
# (key blocks no query sees: top-left causal with Sq < Sk; rows without keys: bottom-right with Sq
# > Sk; windows), GQA, one query row, both dtypes, deterministic mode bitwise and a poisoned
# workspace (the first-store protocol across a CTA's items).
_GROUPED_SHAPES = [
    Shape("grp_ragged", 3, 4, 2, 389, 850, 64),  # 7 key blocks x 2 KV heads x 3 = 42 items
    Shape("grp_no_steps", 2, 4, 2, 131, 700, 64),  # top-left: key blocks 2-5 see no query
    Shape("grp_no_keys", 2, 4, 2, 300, 70, 64),  # bottom-right: rows 0-229 see no key
    Shape("grp_two_items", 1, 2, 1, 200, 130, 64),  # 2 items: k = 3, 4 leave a CTA short
    Shape("grp_one_row", 3, 2, 2, 1, 600, 64),
]
# The head dims whose grouped kernels the build has: d64's and d256's always (a build with
# -DFLASHSDPA_SM90_BWD_GROUP_WIDE=0 has no d256 one: FLASHSDPA_TEST_GROUPED_DIMS=64 then); a dev
# build with -DFLASHSDPA_SM90_BWD_GROUP_D128=1 names 128 in FLASHSDPA_TEST_GROUPED_DIMS ("64,128,256"),
# whose kernel is otherwise not compiled (forced k then runs the plain kernel).
_GROUPED_DIMS = [int(d) for d in os.environ.get("FLASHSDPA_TEST_GROUPED_DIMS", "64,256").split(",") if d.strip()]
_GROUPED_CASES = [
    (shape.replace(head_dim=dim), causal, group)
    for dim in _GROUPED_DIMS
    for shape in _GROUPED_SHAPES
    for causal in CAUSAL_MODES
    for group in (2, 3, 4)
]


def _grouped_kernels_ran(fn: Callable[[], object], head_dim: int = 64) -> set[bool]:
    """Whether the sm90 plain backwards of ``head_dim`` that ``fn`` launches are the grouped form
    (its traits' last argument), by the profiler's kernel names."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    kinds = set()
    for event in prof.events():
        name = event.name.replace(" ", "")
        if "flashsdpa_bwd_sm90_kernel" in name and "BwdTraitsSm90<" in name:
            args = name.split("BwdTraitsSm90<", 1)[1].split(">", 1)[0].split(",")
            if args[1] == str(head_dim):  # <Elem, head dim, stages, mods, dropout, grouped>
                kinds.add(args[-1] == "true" and len(args) == 6)
    return kinds


def _sm90_backward_bucket(head_dim: int) -> bool:
    """Whether this build's sm90 family has a backward bucket of exactly this head dim."""
    sm90 = [f for f in _backend.CAPABILITIES if f.get("family") == "sm90"]
    return bool(sm90) and head_dim in sm90[0]["head_dims_by_direction"].get("backward", [])


def _skip_unless_sm90_backward(head_dim: int = 64) -> None:
    skip_unless_compiled(torch.bfloat16, head_dim)
    # A narrowed build may serve d64 on its 256 bucket (zero-filled columns): then the kernels that
    # ran are d256's, and neither the rule nor the name check below is about them.
    if not _sm90_backward_bucket(head_dim):
        pytest.skip(f"this build has no sm90 backward bucket of d{head_dim}'s own")
    if "FLASHSDPA_FAMILY" in os.environ or _backward_family(
        torch.empty(1, 1, 1, head_dim, device=DEVICE, dtype=torch.bfloat16),
        torch.empty(1, 1, 1, head_dim, device=DEVICE, dtype=torch.bfloat16),
        masks.NO_MASK,
    ) != "sm90":
        pytest.skip(f"the sm90 d{head_dim} backward does not serve here (GPU, build or FLASHSDPA_FAMILY)")


@pytest.mark.parametrize(
    "shape,causal,group", _GROUPED_CASES, ids=[f"{s.name}-{c}-k{g}" for s, c, g in _GROUPED_CASES]
)
def test_bwd_grouped_items(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, shape: Shape, causal: str, group: int
) -> None:
    _skip_unless_sm90_backward(shape.head_dim)
    monkeypatch.setenv("FLASHSDPA_SM90_BWD_GROUP", str(group))
    dtype = torch.float16 if shape.name == "grp_ragged" and group == 3 else torch.bfloat16
    ran = _grouped_kernels_ran(lambda: run_and_check(request, shape, dtype, CAUSAL_MODES[causal]), shape.head_dim)
    assert ran == {True}


@pytest.mark.parametrize("head_dim", _GROUPED_DIMS, ids=lambda d: f"d{d}")
@pytest.mark.parametrize("group", [2, 4])
@pytest.mark.parametrize("left", [0, 127, 129], ids=lambda w: f"left{w}")
def test_bwd_grouped_windows(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, left: int, group: int, head_dim: int
) -> None:
    _skip_unless_sm90_backward(head_dim)
    monkeypatch.setenv("FLASHSDPA_SM90_BWD_GROUP", str(group))
    shape = Shape("grp_window", 2, 4, 2, 517, 700, head_dim)
    ran = _grouped_kernels_ran(lambda: run_and_check(request, shape, torch.bfloat16, (left, 0, masks.BOTTOM_RIGHT)), head_dim)
    assert ran == {True}


# (d256 has no deterministic mode, no first store: capabilities.cpp's bucket limits)
_GROUPED_DQ_WRITER_DIMS = [d for d in _GROUPED_DIMS if d <= 128]


@pytest.mark.parametrize("head_dim", _GROUPED_DQ_WRITER_DIMS, ids=lambda d: f"d{d}")
@pytest.mark.parametrize("group", [2, 4])
@pytest.mark.parametrize("causal", ["none", "top_left"])
def test_bwd_grouped_deterministic_bitwise(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, causal: str, group: int, head_dim: int,
    deterministic: Callable[[bool], None],
) -> None:  # fmt: skip
    _skip_unless_sm90_backward(head_dim)
    monkeypatch.setenv("FLASHSDPA_SM90_BWD_GROUP", str(group))
    deterministic(False)
    first, backward = _deterministic_runs(request, head_dim, causal, 10)
    monkeypatch.setenv("FLASHSDPA_SM90_BWD_GROUP", "1")  # the plain kernel, deterministic too: the same adds in the same order
    for name, ours, other in zip(("dq", "dk", "dv"), first, backward()):
        assert torch.equal(ours, other), f"{name}: grouped (k = {group}) and plain deterministic backwards differ"


@pytest.mark.parametrize("head_dim", _GROUPED_DQ_WRITER_DIMS, ids=lambda d: f"d{d}")
@pytest.mark.parametrize("deterministic", [False, True])
@pytest.mark.parametrize("group", [2, 3])
def test_bwd_grouped_poisoned_workspace(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, group: int, deterministic: bool, head_dim: int
) -> None:
    _skip_unless_sm90_backward(head_dim)
    monkeypatch.setenv("FLASHSDPA_SM90_BWD_GROUP", str(group))
    cases = [
        (Shape("grp_ws", 2, 4, 2, 300, 70, head_dim), masks.CAUSAL_BOTTOM_RIGHT),
        (Shape("grp_ws_long", 1, 2, 1, 700, 1100, head_dim), masks.NO_MASK),
    ]
    _check_poisoned_workspace(request, monkeypatch, cases, deterministic)


# The launcher's own pick (its default since session 45; FLASHSDPA_SM90_BWD_GROUP=auto names it). d64:
# a training-sized short causal backward (16 x 32 heads x 1k: 4,096 items, the rule's k = 4) runs
# grouped, a small one (1 x 2 heads x 256: 4 items, under two waves) plain; causal 4k (16 query blocks
# a key block, the bound) grouped, 8k (32, past the bound that session 45's A/B set) plain; a dense
# 8k plain; deterministic mode plain (its ordered adds chain across a CTA's items). d256 (session
# 46): causal 1k (8 query blocks a key block on average) grouped, causal 2k and dense 1k plain.
_RULE_CASES = [
    # (head dim, batch, heads, seqlen, causal, deterministic, grouped)
    (64, 16, 32, 1024, True, False, True),
    (64, 1, 2, 256, True, False, False),
    (64, 4, 32, 4096, True, False, True),
    (64, 2, 32, 8192, True, False, False),
    (64, 2, 32, 8192, False, False, False),
    (64, 16, 32, 1024, True, True, False),
    (256, 16, 8, 1024, True, False, True),
    (256, 8, 8, 2048, True, False, False),
    (256, 16, 8, 1024, False, False, False),
]


@pytest.mark.parametrize("asked", [None, "auto"], ids=["default", "auto"])
@pytest.mark.parametrize(
    "head_dim,batch,heads,seqlen,causal,det,grouped", _RULE_CASES,
    ids=[f"d{c[0]}-{c[1]}x{c[2]}x{c[3]}{'-causal' if c[4] else ''}{'-det' if c[5] else ''}" for c in _RULE_CASES],
)  # fmt: skip
def test_bwd_group_rule(
    monkeypatch: pytest.MonkeyPatch, deterministic: Callable[[bool], None], head_dim: int, batch: int, heads: int,
    seqlen: int, causal: bool, det: bool, grouped: bool, asked: str | None,
) -> None:  # fmt: skip
    _skip_unless_sm90_backward(head_dim)
    if asked is None:
        monkeypatch.delenv("FLASHSDPA_SM90_BWD_GROUP", raising=False)
    else:
        monkeypatch.setenv("FLASHSDPA_SM90_BWD_GROUP", asked)
    q, k, v = (torch.randn(batch, heads, seqlen, head_dim, device=DEVICE, dtype=torch.bfloat16, requires_grad=True)
               for _ in range(3))  # fmt: skip
    out = flashsdpa.attention(q, k, v, causal=causal)
    if det:
        deterministic(False)  # (on; the fixture restores the process's setting)
    assert _grouped_kernels_ran(lambda: out.backward(torch.randn_like(out)), head_dim) == {grouped}


# ---- the sm90 family's head-dim-256 backward (bwd_kernel_sm90.cuh's 64-key tile, kWide; issue 13):
# which calls it takes (plain, dense, not deterministic: capabilities.cpp's bucket limits, each
# refusal naming the bucket), and its gradients on shapes with many key blocks and query steps, GQA,
# both causal alignments, a window and the bucket's narrower head dims (columns zero-filled by TMA,
# never stored). The tables above run it too (every 128 < d <= 256 backward row, on an H100 / H200).
def _verdict256(head_dim: int, backward: int, features: int = 0, dtype: torch.dtype = torch.bfloat16) -> tuple:
    return _backend.select(
        torch.cuda.current_device(), _backend.DTYPE_CODES[dtype], head_dim, head_dim, 0, False, backward, features
    )


def _sm90_bwd256_here() -> None:
    skip_unless_compiled(torch.bfloat16, 256)
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("the sm90 family runs on compute capability 9.0 only")
    if not _sm90_backward_bucket(256):
        pytest.skip("this build has no sm90 backward in the 256 bucket")


@pytest.mark.parametrize("head_dim", [160, 192, 256])
def test_bwd256_plain_takes_the_sm90_tile(head_dim: int) -> None:
    _sm90_bwd256_here()
    family, *_, why = _verdict256(head_dim, 1)
    assert family == "sm90", why


@pytest.mark.parametrize("feature", list(_backend.FEATURE_BITS))
def test_bwd256_modified_goes_elsewhere(feature: str) -> None:
    """Score modifiers, the bias and dropout have no d256 sm90 instantiation: the table hands them
    to the portable family, naming the bucket."""
    _sm90_bwd256_here()
    family, *_, why = _verdict256(256, 1, _backend.FEATURE_BITS[feature])
    assert family != "sm90"
    if family is None:
        assert "head-dim bucket 256" in why and feature in why, why


def test_bwd256_deterministic_refused_with_the_reason() -> None:
    _sm90_bwd256_here()
    family, *_, why = _verdict256(256, _backend.BACKWARD_DETERMINISTIC)
    assert family is None, (family, why)
    assert "head-dim bucket 256" in why and "use_deterministic_algorithms" in why, why


_BWD256_SHAPES = [
    # Several 64-key blocks and 64-query steps, GQA 4 (the step loop changes head), ragged ends.
    Shape("gqa4", 2, 8, 2, 1023, 1500, 256),
    Shape("q_longer", 1, 4, 4, 700, 130, 256),
    Shape("one_key", 1, 2, 1, 113, 1, 256),
    Shape("one_query", 2, 2, 2, 1, 257, 256),
    Shape("d192", 1, 4, 2, 300, 333, 192),
    Shape("dv_narrower", 1, 2, 2, 200, 260, 256, 136),
]


@pytest.mark.parametrize("causal", ["none", "top_left", "bottom_right", "window"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
@pytest.mark.parametrize("shape", _BWD256_SHAPES, ids=str)
def test_bwd256_gradients(request: pytest.FixtureRequest, shape: Shape, dtype: torch.dtype, causal: str) -> None:
    _sm90_bwd256_here()
    mode = (100, 30, masks.BOTTOM_RIGHT) if causal == "window" else CAUSAL_MODES[causal]
    run_and_check(request, shape, dtype, mode)


def test_bwd256_large_logits(request: pytest.FixtureRequest) -> None:
    """Inputs scaled 8x (logits in the hundreds: one key dominates each row, P near 1 or 0)."""
    _sm90_bwd256_here()
    run_and_check(request, Shape("hot", 1, 4, 2, 333, 444, 256), torch.bfloat16, 0, input_scale=8.0)
