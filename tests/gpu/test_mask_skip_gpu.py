# test_mask_skip_gpu.py: issue 14's tile skipping (ops_masks.bias_cells -> cuda/common/bias_cells.cuh):
# key padding whose padded keys fill whole tiles, in both directions and both families
# (FLASHSDPA_FAMILY=sm80 runs the portable one), against the float64 textbook with the project's
# rule (max|ours - ref| <= 2 max|pt - ref| + 1e-5 per output, dq, dk, dv), the same launches with
# and without the summary, NaN-poisoned outputs (every mask summarized: the fixture below); rows with no visible key (out 0, LSE +inf, grads
# 0); the summary recomputed on every call (a mask mutated in place, a CUDA graph replayed with a
# changed mask).
from __future__ import annotations

import math
import zlib

import pytest
import torch
from torch import Tensor

import flashsdpa
from flashsdpa import _backend, masks, ops_masks, reporting
from flashsdpa.masks import MaskSpec
from helpers import check_rule, default_scale, gpu_skip_reason, grads_or_zeros, skip_unless_compiled
from .test_masks_gpu import textbook

GPU_SKIP = gpu_skip_reason()
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(GPU_SKIP is not None, reason=f"GPU suite: {GPU_SKIP}")]

DEVICE = "cuda"


@pytest.fixture(autouse=True)
def _summarize_every_mask(monkeypatch: pytest.MonkeyPatch) -> None:
    # The rows-without-keys masks (B, 1, Sq, Sk) at 4 heads are broadcast 4x, below the default
    # rule's 16x (ops_masks.summary_pays): summarized here anyway, so every test skips tiles.
    monkeypatch.setattr(ops_masks, "SUMMARY_MIN_BROADCAST", 1)


def _gen(request: pytest.FixtureRequest) -> torch.Generator:
    return torch.Generator(device=DEVICE).manual_seed(zlib.crc32(request.node.nodeid.encode()))


def _inputs(gen: torch.Generator, b: int, h: int, hkv: int, sq: int, sk: int, d: int,
            dtype: torch.dtype) -> tuple[Tensor, ...]:  # fmt: skip
    q = torch.randn(b, h, sq, d, generator=gen, device=DEVICE).to(dtype)
    k = torch.randn(b, hkv, sk, d, generator=gen, device=DEVICE).to(dtype)
    v = torch.randn(b, hkv, sk, d, generator=gen, device=DEVICE).to(dtype)
    dout = torch.randn(b, h, sq, d, generator=gen, device=DEVICE).to(dtype)
    return q, k, v, dout


def _padding(lengths: list[int], sk: int) -> Tensor:
    """(B, 1, 1, Sk) bool key padding: sequence b keeps keys [0, lengths[b])."""
    keep = torch.arange(sk, device=DEVICE)[None, :] < torch.tensor(lengths, device=DEVICE)[:, None]
    return keep[:, None, None, :]


def _check(q: Tensor, k: Tensor, v: Tensor, dout: Tensor, attn_mask: Tensor, mask: MaskSpec,
           dtype: torch.dtype) -> list[Tensor]:  # fmt: skip
    """Ours through the direct API (served: the counter moves) against the textbook; returns ours."""
    scale = default_scale(q.shape[-1])
    left, right, align = mask
    kw = {"window": (left, right), "causal_alignment": "bottom_right" if align == masks.BOTTOM_RIGHT else "top_left"}
    leaves = [t.detach().requires_grad_() for t in (q, k, v)]
    before = reporting.counter("flashsdpa::fwd_masked")[0]
    out, lse = flashsdpa.attention(*leaves, attn_mask=attn_mask, scale=scale, return_lse=True, enable_gqa=True, **kw)
    assert reporting.counter("flashsdpa::fwd_masked")[0] == before + 1, "our masked kernel did not serve it"
    ours = [out.detach(), lse, *torch.autograd.grad(out, leaves, dout)]
    torch.cuda.synchronize()
    bias = ops_masks.additive(attn_mask, dtype)

    def results(d: torch.dtype) -> list[Tensor]:
        ls = [t.detach().to(d).requires_grad_() for t in (q, k, v)]
        o, l = textbook(*ls, bias.to(d), scale=scale, mask=mask, dtype=d)
        return [o.detach(), l.detach().float(), *grads_or_zeros(o, ls, dout.to(d))]

    ref, pt = results(torch.float64), results(dtype)
    for name, o, p, r in zip(["out", "lse", "dq", "dk", "dv"], ours, pt, ref):
        assert not o.isnan().any(), f"{name}: NaN"
        check_rule(name, o, p, r, input_dtype=dtype)
    return ours


def _launch(q: Tensor, k: Tensor, v: Tensor, dout: Tensor, out: Tensor, lse: Tensor, bias: Tensor, mask: MaskSpec,
            skip: bool) -> list[Tensor]:  # fmt: skip
    """Both kernels launched directly into NaN-poisoned outputs, with or without the summary."""
    b, h, sq, _ = q.shape
    mods = ops_masks.masked_mods(0.0, None, None, bias, (b, h, sq, k.shape[2]), skip=skip)
    scale = default_scale(q.shape[-1])
    out_p, lse_p = torch.full_like(out, math.nan), torch.full_like(lse, math.nan)
    _backend.launch_fwd(q, k, v, out_p, lse_p, scale, mask, None, mods=mods)
    dq, dk, dv = (torch.full_like(t, math.nan) for t in (q, k, v))
    _backend.launch_bwd(dout, q, k, v, out, lse, dq, dk, dv, scale, mask, None, mods, (None, None, None))
    torch.cuda.synchronize()
    return [out_p, lse_p, dq, dk, dv]


# Kept lengths that leave whole key tiles of every family (64 / 128 keys) and whole 128-key CTAs of
# the backwards padded, one length not a multiple of 16 (a partial cell), one sequence unpadded.
_PADDING = [
    (1023, [300, 1023, 517]),
    (2048, [1024, 1500, 2048]),
]


@pytest.mark.parametrize("sk,lengths", _PADDING)
@pytest.mark.parametrize("mask", [masks.NO_MASK, masks.CAUSAL_TOP_LEFT], ids=["none", "causal"])
@pytest.mark.parametrize("head_dim", [64, 128])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
def test_key_padding_skips_tiles(request: pytest.FixtureRequest, sk: int, lengths: list[int], mask: MaskSpec,
                                 head_dim: int, dtype: torch.dtype) -> None:  # fmt: skip
    skip_unless_compiled(dtype, head_dim)
    q, k, v, dout = _inputs(_gen(request), len(lengths), 4, 2, sk, sk, head_dim, dtype)
    attn_mask = _padding(lengths, sk)
    ours = _check(q, k, v, dout, attn_mask, mask, dtype)
    bias = ops_masks.additive(attn_mask, dtype)
    # dK, dV of padded keys are 0: exactly in skipped tiles, <= 1e-30 in the tile holding the
    # boundary (the portable backward's exp2_fma floors P at 2^-125 in tiles without element masks).
    for b, n in enumerate(lengths):
        if n < sk:
            assert ours[3][b, :, n:].abs().max().item() <= 1e-30
            assert ours[4][b, :, n:].abs().max().item() <= 1e-30
    skipped = _launch(q, k, v, dout, ours[0], ours[1], bias, mask, skip=True)
    plain = _launch(q, k, v, dout, ours[0], ours[1], bias, mask, skip=False)
    for name, a, c in zip(["out", "lse", "dq", "dk", "dv"], skipped, plain):
        assert not a.isnan().any(), f"{name}: NaN left in a poisoned output (skipped tiles must still write)"
        # Skipped tiles add nothing (P = 0 there), so the sums match to rounding: a few ulps.
        torch.testing.assert_close(a.float(), c.float(), rtol=2e-2, atol=2e-3, msg=name)


@pytest.mark.parametrize("head_dim", [64, 128])
def test_rows_without_visible_keys(request: pytest.FixtureRequest, head_dim: int) -> None:
    """(B, 1, Sq, Sk) masks whose rows 200..455 see no key (whole hidden query tiles, and a partial
    one): those rows give out 0, LSE +inf, dq 0 (<= 1e-30: the portable backward's exp2 floor)."""
    dtype = torch.bfloat16
    skip_unless_compiled(dtype, head_dim)
    sq, sk = 700, 900
    q, k, v, dout = _inputs(_gen(request), 2, 4, 4, sq, sk, head_dim, dtype)
    keep = torch.rand(2, 1, sq, sk, generator=_gen(request), device=DEVICE) < 0.8
    keep[..., 0] = True
    keep[:, :, 200:456] = False
    keep[:, :, :, 600:] = False  # hidden key tiles too
    ours = _check(q, k, v, dout, keep, masks.NO_MASK, dtype)
    assert torch.all(ours[0][:, :, 200:456] == 0) and torch.all(ours[1][:, :, 200:456] == math.inf)
    assert ours[2][:, :, 200:456].abs().max().item() <= 1e-30
    assert ours[3][:, :, 600:].abs().max().item() <= 1e-30 and ours[4][:, :, 600:].abs().max().item() <= 1e-30


def test_summary_recomputed_after_in_place_change(request: pytest.FixtureRequest) -> None:
    dtype = torch.bfloat16
    skip_unless_compiled(dtype, 128)
    q, k, v, dout = _inputs(_gen(request), 2, 4, 4, 512, 1024, 128, dtype)
    attn_mask = _padding([300, 1024], 1024)
    _check(q, k, v, dout, attn_mask, masks.NO_MASK, dtype)
    attn_mask.copy_(_padding([1024, 130], 1024))  # other tiles hidden now, same tensor
    _check(q, k, v, dout, attn_mask, masks.NO_MASK, dtype)


def test_summary_recomputed_under_cuda_graph_replay(request: pytest.FixtureRequest) -> None:
    """A forward captured in a CUDA graph reads the mask's memory at replay: the summary ops are in
    the graph, so a mask changed in place (no version bump reaches the graph) is summarized anew."""
    dtype = torch.bfloat16
    skip_unless_compiled(dtype, 128)
    q, k, v, _ = _inputs(_gen(request), 2, 4, 4, 512, 1024, 128, dtype)
    bias = ops_masks.additive(_padding([300, 1024], 1024), dtype)
    scale = default_scale(128)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(2):  # warm-up outside the capture (allocator, lazy init)
            flashsdpa.attention(q, k, v, attn_mask=bias, scale=scale)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = flashsdpa.attention(q, k, v, attn_mask=bias, scale=scale)
    for lengths in ([300, 1024], [1024, 77], [64, 512]):
        bias.copy_(ops_masks.additive(_padding(lengths, 1024), dtype))
        graph.replay()
        torch.cuda.synchronize()
        ref, _ = textbook(q.double(), k.double(), v.double(), bias.double(), scale=scale, mask=masks.NO_MASK,
                          dtype=torch.float64)  # fmt: skip
        pt, _ = textbook(q, k, v, bias, scale=scale, mask=masks.NO_MASK, dtype=dtype)
        check_rule(f"out {lengths}", out, pt, ref, input_dtype=dtype)


_SANITIZER = [(1023, [300, 1023, 517])]


@pytest.mark.parametrize("sk,lengths", _SANITIZER)
def test_mask_skip_sanitizer_subset(request: pytest.FixtureRequest, sk: int, lengths: list[int]) -> None:
    dtype = torch.bfloat16
    skip_unless_compiled(dtype, 128)
    q, k, v, dout = _inputs(_gen(request), len(lengths), 2, 2, 200, sk, 128, dtype)
    _check(q, k, v, dout, _padding(lengths, sk), masks.CAUSAL_BOTTOM_RIGHT, dtype)


def test_deterministic_backward_ignores_the_summary(request: pytest.FixtureRequest) -> None:
    """A deterministic backward handed a summary anyway (launched directly) must drop it (api.cpp:
    the sm90 family's ordered dQ adds wait for every key block the mask lists, so a skipped block
    would hang them): it completes, bitwise the same twice, and equals the launch without one."""
    dtype = torch.bfloat16
    skip_unless_compiled(dtype, 128)
    q, k, v, dout = _inputs(_gen(request), 2, 4, 2, 700, 1024, 128, dtype)
    attn_mask = _padding([300, 1024], 1024)
    ours = _check(q, k, v, dout, attn_mask, masks.CAUSAL_BOTTOM_RIGHT, dtype)
    bias = ops_masks.additive(attn_mask, dtype)
    prior = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        why = _backend.deterministic_reason(q, v, masks.CAUSAL_BOTTOM_RIGHT, False, _backend.FEATURE_BITS["bias"])
        if why is not None:  # the portable family (FLASHSDPA_FAMILY=sm80) has no deterministic backward
            pytest.skip(why)
        first = _launch(q, k, v, dout, ours[0], ours[1], bias, masks.CAUSAL_BOTTOM_RIGHT, skip=True)
        second = _launch(q, k, v, dout, ours[0], ours[1], bias, masks.CAUSAL_BOTTOM_RIGHT, skip=True)
        plain = _launch(q, k, v, dout, ours[0], ours[1], bias, masks.CAUSAL_BOTTOM_RIGHT, skip=False)
    finally:
        torch.use_deterministic_algorithms(prior)
    for name, a, b, c in zip(["dq", "dk", "dv"], first[2:], second[2:], plain[2:]):
        assert torch.equal(a, b), f"{name}: not bitwise reproducible"
        assert torch.equal(a, c), f"{name}: differs from the launch without a summary (it was not dropped)"
