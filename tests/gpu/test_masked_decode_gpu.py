# test_masked_decode_gpu.py: masked decode-sized calls (issue 14 / issue 11) on the split-KV decode
# kernel's kModsBias instantiation (decode_kernel_sm80.cuh): 1..16 query rows, 1..8k keys, boolean
# and additive masks, key padding (B, 1, 1, Sk) with padded lengths uniform in [Sk / 2, Sk] (one
# sequence fully padded: its rows see no key) and general (B, H, Sq, Sk) masks with a fully masked
# row, GQA 32/8 packed into one tile, forced split counts (partials and the combine), outputs
# NaN-poisoned. Every result is held to the project's rule against the float64 textbook
# (test_masks_gpu.textbook): max|ours - ref| <= 2 max|pt - ref| + 1e-5, pt the textbook in the inputs'
# dtype. A spy on _C.fwd asserts that the decode kernel (a spec with a decode item) took the bias.
from __future__ import annotations

import math
import zlib
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor

import flashsdpa
from flashsdpa import _backend, masks, ops_masks
from helpers import check_rule, default_scale, gpu_skip_reason, grads_or_zeros, skip_unless_compiled
from .test_masks_gpu import _MASKED_OPS, _served, textbook

GPU_SKIP = gpu_skip_reason()
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(GPU_SKIP is not None, reason=f"GPU suite: {GPU_SKIP}")]

DEVICE = "cuda"


class _DecodeSpy:
    """_backend._C with fwd recorded: how many launches took the decode kernel with a bias (a spec
    with a decode item, module.cpp's 9th, and a mods item whose bias pointer is set)."""

    def __init__(self, c: Any) -> None:
        self._c = c
        self.decode_with_bias = 0
        self.other = 0

    def fwd(self, spec: tuple[Any, ...]) -> None:
        decode = len(spec) > 8 and spec[8] is not None
        bias = len(spec) > 9 and spec[9] is not None and len(spec[9]) > 4 and spec[9][4] != 0
        if decode and bias:
            self.decode_with_bias += 1
        else:
            self.other += 1
        self._c.fwd(spec)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._c, name)


@pytest.fixture
def spy(monkeypatch: pytest.MonkeyPatch) -> _DecodeSpy:
    s = _DecodeSpy(_backend._C)
    monkeypatch.setattr(_backend, "_C", s)
    return s


def _gen(request: pytest.FixtureRequest) -> torch.Generator:
    return torch.Generator(device=DEVICE).manual_seed(zlib.crc32(request.node.nodeid.encode()))


def _mask(kind: str, shape_name: str, b: int, h: int, sq: int, sk: int, dtype: torch.dtype,
          gen: torch.Generator) -> Tensor:  # fmt: skip
    """key padding "B11S": sequence i keeps keys [0, L_i), L_i uniform in [sk / 2, sk], the last
    sequence none (every row of it sees no key); "BHSS": ~70% kept at random (additive: N(0, 1),
    -inf elsewhere), key 0 kept, query row sq // 2 of every head sees no key."""
    if shape_name == "B11S":
        lengths = torch.randint(max(1, sk // 2), sk + 1, (b,), generator=gen, device=DEVICE)
        lengths[-1] = 0
        keep = (torch.arange(sk, device=DEVICE) < lengths[:, None]).view(b, 1, 1, sk)
    else:
        keep = torch.rand(b, h, sq, sk, generator=gen, device=DEVICE) < 0.7
        keep[..., 0] = True
        keep[:, :, sq // 2, :] = False
    if kind == "bool":
        return keep
    values = torch.randn(keep.shape, generator=gen, device=DEVICE)
    return values.masked_fill(~keep, -math.inf).to(dtype)


def _check(ours: list[Tensor], q: Tensor, k: Tensor, v: Tensor, bias: Tensor, scale: float,
           dtype: torch.dtype, names: tuple[str, ...] = ("out", "lse")) -> None:  # fmt: skip
    """out (and lse) against the float64 textbook by the rule; rows that see no key: LSE +inf
    exactly where the textbook's is (compared as 0 after that), out 0 (inside the rule)."""
    ref = textbook(q, k, v, bias, scale=scale, mask=masks.NO_MASK, dtype=torch.float64)
    pt = textbook(q, k, v, bias, scale=scale, mask=masks.NO_MASK, dtype=dtype)
    for name, o, p, r in zip(names, ours, pt, ref):
        assert not o.isnan().any(), f"{name}: NaN"
        if name == "lse":
            unseen = r == math.inf
            assert torch.equal(o == math.inf, unseen), f"{name}: +inf rows differ"
            o, p, r = (torch.where(unseen, 0.0, t.double()) for t in (o, p, r))
            o = o.float()
        check_rule(name, o, p, r, input_dtype=dtype)


@pytest.mark.parametrize("kind", ["bool", "add"])
@pytest.mark.parametrize("shape_name", ["B11S", "BHSS"])
@pytest.mark.parametrize("sk", [1, 7, 113, 1023, 8192])
@pytest.mark.parametrize("sq", [1, 4, 16])
def test_masked_decode_through_sdpa(request: pytest.FixtureRequest, spy: _DecodeSpy, kind: str, shape_name: str,
                                    sq: int, sk: int) -> None:  # fmt: skip
    """F.scaled_dot_product_attention(attn_mask=...) inside enable() with 1..16 query rows: the
    masked router serves it (counters) on the decode kernel (the spy), out within the rule; then the
    same launch into NaN-poisoned out / lse (bitwise the same), and with 1, 3 and 16 forced splits
    (the combine: a fully padded split gives weight 0)."""
    dtype, batch, heads, head_dim = torch.bfloat16, 3, 4, 128
    skip_unless_compiled(dtype, head_dim)
    gen = _gen(request)
    q, k, v = (torch.randn(batch, heads, s, head_dim, generator=gen, device=DEVICE).to(dtype) for s in (sq, sk, sk))
    attn_mask = _mask(kind, shape_name, batch, heads, sq, sk, dtype, gen)
    before = sum(_served(op) for op in _MASKED_OPS)
    with flashsdpa.enable():
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask)
    torch.cuda.synchronize()
    assert sum(_served(op) for op in _MASKED_OPS) == before + 1, flashsdpa.stats()["fallback_reasons"]
    assert spy.decode_with_bias == 1 and spy.other == 0, (spy.decode_with_bias, spy.other)
    assert flashsdpa.explain(q, k, v, attn_mask=attn_mask) == []
    bias = ops_masks.additive(attn_mask, dtype)
    scale = default_scale(head_dim)
    _check([out], q, k, v, bias, scale, dtype, ("out",))

    shape = (batch, heads, sq, sk)
    for splits in (0, 1, 3, 16):
        out_p = torch.full_like(out, math.nan)
        lse_p = torch.full((batch, heads, sq), math.nan, dtype=torch.float32, device=DEVICE)
        mods = ops_masks.masked_mods(0.0, None, None, bias, shape)
        _backend.launch_fwd(q, k, v, out_p, lse_p, scale, masks.NO_MASK, None, num_splits=splits, mods=mods)
        torch.cuda.synchronize()
        if splits == 0:  # the heuristic's split count, as the router's launch
            assert torch.equal(out_p, out), "forward left elements unwritten (NaN)"
        _check([out_p, lse_p], q, k, v, bias, scale, dtype)


@pytest.mark.parametrize("kind", ["bool", "add"])
@pytest.mark.parametrize("sq,sk", [(1, 1), (1, 8192), (4, 1023), (16, 113)])
def test_masked_decode_gqa(request: pytest.FixtureRequest, spy: _DecodeSpy, kind: str, sq: int, sk: int) -> None:
    """GQA 32/8 through flashsdpa.attention(attn_mask=..., enable_gqa=True): 4 query heads of a KV
    head in one packed tile, each packed row's bias row its own (head, row) of a (B, 32, Sq, Sk) mask;
    forward on the decode kernel, backward on the dense masked one (the decode path is forward only),
    both within the rule, the additive mask's gradient included."""
    dtype, batch, hq, hkv, head_dim = torch.float16, 2, 32, 8, 128
    skip_unless_compiled(dtype, head_dim)
    gen = _gen(request)
    q = torch.randn(batch, hq, sq, head_dim, generator=gen, device=DEVICE).to(dtype)
    k, v = (torch.randn(batch, hkv, sk, head_dim, generator=gen, device=DEVICE).to(dtype) for _ in range(2))
    dout = torch.randn(batch, hq, sq, head_dim, generator=gen, device=DEVICE).to(dtype)
    attn_mask = _mask(kind, "BHSS", batch, hq, sq, sk, dtype, gen)
    additive = kind != "bool"
    leaves = [t.detach().requires_grad_() for t in (q, k, v)]
    m = attn_mask.detach().clone().requires_grad_(additive)
    scale = default_scale(head_dim)
    out, lse = flashsdpa.attention(*leaves, attn_mask=m, scale=scale, return_lse=True, enable_gqa=True)
    assert spy.decode_with_bias == 1 and spy.other == 0, (spy.decode_with_bias, spy.other)
    grads = torch.autograd.grad(out, leaves + ([m] if additive else []), dout)
    torch.cuda.synchronize()
    bias = ops_masks.additive(attn_mask, dtype)
    _check([out.detach(), lse], q, k, v, bias, scale, dtype)

    def results(d: torch.dtype) -> list[Tensor]:
        ls = [t.detach().to(d).requires_grad_() for t in (q, k, v)]
        b = bias.detach().to(d).requires_grad_(additive)
        o, _ = textbook(*ls, b, scale=scale, mask=masks.NO_MASK, dtype=d)
        return grads_or_zeros(o, ls + ([b] if additive else []), dout.to(d))

    ref, pt = results(torch.float64), results(dtype)
    for name, o, p, r in zip(["dq", "dk", "dv", "d_mask"], grads, pt, ref):
        check_rule(name, o, p, r, input_dtype=dtype)


def test_masked_decode_with_alibi_runs_the_forward_kernel(spy: _DecodeSpy) -> None:
    """ALiBi with a mask has no decode kernel (capabilities.cpp's decode_features: the bias alone):
    flashsdpa.attention runs a decode-sized call with both on the forward kernel, which takes them."""
    dtype, head_dim = torch.bfloat16, 128
    skip_unless_compiled(dtype, head_dim)
    q = torch.randn(2, 8, 1, head_dim, device=DEVICE, dtype=dtype)
    k, v = (torch.randn(2, 8, 300, head_dim, device=DEVICE, dtype=dtype) for _ in range(2))
    mask = torch.ones(2, 1, 1, 300, dtype=torch.bool, device=DEVICE)
    mask[0, ..., 200:] = False
    slopes = torch.rand(8, device=DEVICE, dtype=torch.float32)
    out = flashsdpa.attention(q, k, v, attn_mask=mask, alibi_slopes=slopes)
    torch.cuda.synchronize()
    assert spy.decode_with_bias == 0 and spy.other == 1, (spy.decode_with_bias, spy.other)
    assert torch.isfinite(out).all()


@pytest.mark.parametrize("scale", [-0.09, 0.3])
def test_masked_decode_scales(request: pytest.FixtureRequest, spy: _DecodeSpy, scale: float) -> None:
    """The bias in raw units: 1 / |scale| (q negated for a negative scale), the LSE converted back
    in the same unit (ScoreModFwd::scale). Scale 0 with a mask is refused by checks.cpp."""
    dtype, batch, hq, hkv, head_dim, sq, sk = torch.bfloat16, 2, 8, 2, 64, 3, 777
    skip_unless_compiled(dtype, head_dim)
    gen = _gen(request)
    q = torch.randn(batch, hq, sq, head_dim, generator=gen, device=DEVICE).to(dtype)
    k, v = (torch.randn(batch, hkv, sk, head_dim, generator=gen, device=DEVICE).to(dtype) for _ in range(2))
    bias = _mask("add", "BHSS", batch, hq, sq, sk, dtype, gen)
    out = torch.full_like(q, math.nan)
    lse = torch.full((batch, hq, sq), math.nan, dtype=torch.float32, device=DEVICE)
    mods = ops_masks.masked_mods(0.0, None, None, bias, (batch, hq, sq, sk))
    _backend.launch_fwd(q, k, v, out, lse, scale, masks.NO_MASK, None, mods=mods)
    torch.cuda.synchronize()
    assert spy.decode_with_bias == 1
    _check([out, lse], q, k, v, bias, scale, dtype)
