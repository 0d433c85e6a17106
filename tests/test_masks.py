"""attn_mask on our kernels, the host side (CPU): flashsdpa::fwd_masked / bwd_masked (ops_masks.py),
the bias view the kernels read, the gradient's reduction, the launch items, and the reference
against PyTorch's math path."""

from __future__ import annotations

import math
import re
from typing import Any

import pytest
import torch
import torch.nn.functional as F

import flashsdpa
from flashsdpa import _backend, masks, ops_masks, selection

B, H, HKV, SQ, SK, D = 2, 4, 2, 7, 13, 16


def _qkv(dtype: torch.dtype = torch.float32, grad: bool = False) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(0)
    q = torch.randn(B, H, SQ, D, generator=g, dtype=dtype)
    k = torch.randn(B, HKV, SK, D, generator=g, dtype=dtype)
    v = torch.randn(B, HKV, SK, D, generator=g, dtype=dtype)
    return tuple(t.requires_grad_(grad) for t in (q, k, v))


def test_additive_converts_bool_and_float() -> None:
    m = torch.tensor([[True, False], [False, True]])
    a = ops_masks.additive(m, torch.bfloat16)
    assert a.dtype == torch.bfloat16
    assert a.tolist() == [[0.0, -math.inf], [-math.inf, 0.0]]
    f = torch.randn(3, 5)
    assert ops_masks.additive(f, torch.float16).dtype == torch.float16


@pytest.mark.parametrize(
    "shape", [(B, 1, 1, SK), (1, H, SQ, SK), (B, H, SQ, SK), (SQ, SK), (SK,), (B, H, SQ, 1), (1, 1, 1, 1)]
)
def test_bias_view_broadcasts_without_copies_except_keys(shape: tuple[int, ...]) -> None:
    bias = torch.randn(shape)
    view = ops_masks.bias_view(bias, (B, H, SQ, SK))
    assert tuple(view.shape) == (B, H, SQ, SK)
    assert view.stride(3) == 1  # the kernels' unit key stride
    torch.testing.assert_close(view, bias.expand(B, H, SQ, SK) if bias.dim() == 4 else bias.reshape(
        (1,) * (4 - bias.dim()) + shape).expand(B, H, SQ, SK))
    padded = (1,) * (4 - len(shape)) + shape
    for d in range(3):  # broadcast dims are stride 0 (never materialized)
        if padded[d] == 1 and view.shape[d] != 1:
            assert view.stride(d) == 0
    assert all(s % 2 == 0 for s in view.stride()[:3]) and view.data_ptr() % 4 == 0  # 4-byte key pairs
    b4 = bias.reshape(padded)
    in_place = shape[-1] == SK and all(b4.stride(d) % 2 == 0 for d in range(3) if padded[d] != 1)
    assert (view.data_ptr() == bias.data_ptr()) == in_place  # copied only for the keys or an odd stride


def test_bias_view_keeps_even_row_strides_in_place() -> None:
    bias = torch.randn(SQ, SK + 3)[:, :SK]  # row stride 16: even, read in place
    assert ops_masks.bias_view(bias, (B, H, SQ, SK)).data_ptr() == bias.data_ptr()
    odd = torch.randn(SQ, SK)  # row stride 13: copied into padded rows
    view = ops_masks.bias_view(odd, (B, H, SQ, SK))
    assert view.stride(2) == 16 and view.data_ptr() != odd.data_ptr()
    torch.testing.assert_close(view[1, 2], odd)


def test_bias_view_copies_a_strided_key_dim() -> None:
    base = torch.randn(SQ, 2 * SK)
    bias = base[:, ::2]  # key stride 2
    view = ops_masks.bias_view(bias, (B, H, SQ, SK))
    assert view.stride(3) == 1 and view.stride(0) == 0 and view.stride(1) == 0
    torch.testing.assert_close(view[0, 0], bias)


@pytest.mark.parametrize("shape", [(B, 1, 1, SK), (1, H, SQ, SK), (SQ, SK), (B, H, SQ, SK), (H, 1, SK)])
def test_reduce_to_matches_expand_backward(shape: tuple[int, ...]) -> None:
    bias = torch.randn(shape, dtype=torch.float64, requires_grad=True)
    grad = torch.randn(B, H, SQ, SK, dtype=torch.float64)
    bias.expand(B, H, SQ, SK).backward(grad)
    torch.testing.assert_close(ops_masks.reduce_to(grad, shape), bias.grad)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_reduce_to_sums_half_gradients_in_float32(dtype: torch.dtype) -> None:
    # 2048 then 63 ones: summed in the 16-bit type each 1 would vanish against 2048 (the spacing
    # there is 2 in float16, 16 in bfloat16) and the sum stay 2048; in float32 it is 2111, rounded
    # once: 2112 in either type.
    grad = torch.ones(64, 2, 3, 4, dtype=dtype)
    grad[0] = 2048
    out = ops_masks.reduce_to(grad, (1, 2, 3, 4))
    assert out.dtype == dtype and out.shape == (1, 2, 3, 4)
    assert torch.equal(out, torch.full((1, 2, 3, 4), 2112.0, dtype=dtype))


def test_launch_items_carry_the_bias() -> None:
    bias = ops_masks.bias_view(torch.randn(B, 1, 1, SK, dtype=torch.float16), (B, H, SQ, SK))
    mods = (0.0, None, None, bias)
    assert _backend.feature_bits(mods) == _backend.FEATURE_BITS["bias"] == 8
    assert _backend.feature_bits((0.0, None, None)) == 0
    item = _backend._mods_item(mods)
    assert item[:4] == (0.0, 0, 0, 0)
    assert item[4:] == (bias.data_ptr(), 16, 0, 0)  # (batch, head, row) element strides (rows padded: SK odd)
    assert len(_backend._mods_item((0.0, None, None))) == 4  # the old spec, unchanged


def _math(q, k, v, mask, scale, causal=False):  # type: ignore[no-untyped-def]
    return F.scaled_dot_product_attention(
        q, k, v, attn_mask=mask, scale=scale, is_causal=causal, enable_gqa=True
    )  # fmt: skip


@pytest.mark.parametrize("kind", ["bool", "additive"])
@pytest.mark.parametrize("shape", [(B, 1, 1, SK), (1, H, SQ, SK), (SQ, SK)])
@pytest.mark.parametrize("causal", [False, True])
def test_fwd_bwd_masked_against_math(kind: str, shape: tuple[int, ...], causal: bool) -> None:
    q, k, v = _qkv(torch.float64, grad=True)
    g = torch.Generator().manual_seed(1)
    if kind == "bool":
        mask = torch.rand(shape, generator=g) > 0.3
        mask[..., 0] = True  # every row keeps a key (the math path gives NaN for empty rows)
        bias = ops_masks.additive(mask, q.dtype)
        ref_mask = mask
    else:
        bias = torch.randn(shape, generator=g, dtype=torch.float64).requires_grad_(True)
        ref_mask = bias
    scale = 0.3
    spec = list(masks.make(causal, "top_left", None))
    out, lse = torch.ops.flashsdpa.fwd_masked.default(q, k, v, bias, scale, spec, 0.0, None, None)
    ref = _math(q, k, v, ref_mask if not causal else _with_causal(ref_mask), scale)
    torch.testing.assert_close(out, ref, atol=2e-5, rtol=2e-5)  # the reference accumulates in float32
    dout = torch.randn_like(out)
    grads = torch.autograd.grad(out, [q, k, v] + ([bias] if kind == "additive" else []), dout)
    ref_grads = torch.autograd.grad(ref, [q, k, v] + ([bias] if kind == "additive" else []), dout)
    for a, b in zip(grads, ref_grads):
        torch.testing.assert_close(a, b, atol=2e-5, rtol=2e-5)
    if kind == "additive":
        assert grads[3].shape == bias.shape


def _with_causal(mask: torch.Tensor) -> torch.Tensor:
    causal = torch.ones(SQ, SK, dtype=torch.bool).tril()
    if mask.dtype == torch.bool:
        return mask & causal
    return mask + torch.zeros(SQ, SK, dtype=mask.dtype).masked_fill(~causal, -math.inf)


def test_fully_masked_rows_give_zero_and_no_nan() -> None:
    q, k, v = _qkv(torch.float64, grad=True)
    mask = torch.ones(B, 1, SQ, SK, dtype=torch.bool)
    mask[:, :, 3] = False  # row 3 sees no key
    bias = ops_masks.additive(mask, q.dtype)
    out, lse = torch.ops.flashsdpa.fwd_masked.default(q, k, v, bias, 0.25, [-1, -1, 0], 0.0, None, None)
    assert torch.all(out[:, :, 3] == 0) and torch.all(lse[:, :, 3] == math.inf)
    dq, dk, dv = torch.autograd.grad(out.sum(), [q, k, v])
    assert torch.all(dq[:, :, 3] == 0)
    assert not any(t.isnan().any() for t in (out, dq, dk, dv))


def test_direct_api_mask_grad_on_cpu() -> None:
    q, k, v = _qkv(torch.float64, grad=True)
    bias = torch.randn(B, 1, 1, SK, dtype=torch.float64, requires_grad=True)
    out = flashsdpa.attention(q, k, v, attn_mask=bias, enable_gqa=True)
    ref = _math(q, k, v, bias, 1 / math.sqrt(D))
    torch.testing.assert_close(out, ref, atol=2e-5, rtol=2e-5)  # the reference accumulates in float32
    (g,) = torch.autograd.grad(out.square().sum(), [bias])
    (rg,) = torch.autograd.grad(ref.square().sum(), [bias])
    torch.testing.assert_close(g, rg, atol=2e-5, rtol=2e-5)


@pytest.mark.parametrize(
    ("bias", "error", "match"),
    [
        (torch.zeros(B, H, SQ, SK, dtype=torch.float16), TypeError, "attn_mask .*dtype"),
        (torch.zeros(B, H, SQ + 1, SK), ValueError, r"attn_mask .*broadcasts"),
        (torch.zeros(3, H, SQ, SK), ValueError, r"attn_mask .*broadcasts"),
        (torch.zeros(1, B, H, SQ, SK), ValueError, r"attn_mask .*broadcasts"),
    ],
)
def test_fwd_masked_checks_name_the_mask(bias: torch.Tensor, error: type, match: str) -> None:
    q, k, v = _qkv()
    with pytest.raises(error, match=match):
        torch.ops.flashsdpa.fwd_masked.default(q, k, v, bias, 0.25, [-1, -1, 0], 0.0, None, None)


def test_opcheck_masked_ops() -> None:
    q, k, v = _qkv()
    bias = torch.randn(B, 1, SQ, SK)
    args = (q, k, v, bias, 0.25, [-1, 0, 0], 0.0, None, None)
    torch.library.opcheck(torch.ops.flashsdpa.fwd_masked.default, args)
    out, lse = torch.ops.flashsdpa.fwd_masked.default(*args)
    dout = torch.randn_like(out)
    bwd_args = (dout, q, k, v, out, lse, bias, 0.25, [-1, 0, 0], 0.0, None, None, [False, False, True])
    torch.library.opcheck(torch.ops.flashsdpa.bwd_masked.default, bwd_args)
    *_, d_bias = torch.ops.flashsdpa.bwd_masked.default(*bwd_args)
    assert d_bias.shape == bias.shape


# ---- the SDPA routers of the masked ops (a fake CUDA build, FakeTensors) --------------------------

F16 = torch.float16


class _Native:
    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def call_boxed(self, keyset: Any, *args: Any, **kwargs: Any) -> str:
        self.calls.append(args)
        return "native result"


@pytest.fixture
def native(monkeypatch: pytest.MonkeyPatch) -> _Native:
    from flashsdpa import routers, routers_masked

    recorder = _Native()
    for route in routers._ROUTES:
        monkeypatch.setitem(routers._NATIVE, route.op, recorder)
    return recorder


def _same_meta(ours: torch.Tensor, meta: torch.Tensor) -> bool:
    return ours.shape == meta.shape and ours.stride() == meta.stride() and ours.dtype == meta.dtype


def test_efficient_router_serves_a_bias(fake_build: Any, native: _Native, fake_mode: Any,
                                        monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    from flashsdpa import routers, routers_masked

    build = fake_build()
    monkeypatch.setattr(_backend, "_current_stream", lambda device: 77)
    q, k, v = (torch.empty(2, 4, 100, 64, dtype=F16, device="cuda") for _ in range(3))
    bias = torch.empty(2, 1, 1, 100, dtype=F16, device="cuda").expand(2, 4, 100, 100)
    out, lse, seed, offset = routers_masked._eff_forward("keys", q, k, v, bias, True, 0.0, True)
    assert not native.calls
    meta = torch.ops.aten._scaled_dot_product_efficient_attention.default(q, k, v, bias, True, 0.0, True)
    assert _same_meta(out, meta[0]) and _same_meta(lse, meta[1])
    [(name, (spec,))] = build.calls
    assert name == "fwd" and spec[3] == masks.CAUSAL_TOP_LEFT  # is_causal: top-left on this op
    item = spec[9]
    assert item[:4] == (0.0, 0, 0, 0) and item[4] == bias.data_ptr() and item[5:8] == (100, 0, 0)
    # The per-call summary of the (2, 1, 1, 100) mask: (2, 1, 1, 16) cells, byte strides (16, 0, 0).
    assert len(item) == 12 and item[9:] == (16, 0, 0)
    # The backward with grad_input_mask[3]: dS into a zeroed dense buffer, returned in attn_bias's shape.
    dout = torch.empty_like(out)
    grads = routers_masked._eff_backward("keys", dout, q, k, v, bias, out, lse, seed, offset, 0.0, [True, True, True, True],
                                  True)  # fmt: skip
    assert not native.calls
    meta_g = torch.ops.aten._scaled_dot_product_efficient_attention_backward.default(
        dout, q, k, v, bias, out, lse, seed, offset, 0.0, [True, True, True, True], True
    )
    for ours, m in zip(grads[:3], meta_g[:3]):
        assert _same_meta(ours, m)
    assert grads[3].shape == bias.shape
    name, (bspec, bgrads) = build.calls[1]
    assert name == "bwd" and len(bgrads[4]) == 3  # (d_slopes, d_sinks, d_bias) pointers (0 for FakeTensors)
    assert len(bspec[9]) == 12 and bspec[9][5:8] == (100, 0, 0) and bspec[9][9:] == (16, 0, 0)  # bias, cells


@pytest.mark.parametrize(
    ("bias", "dropout", "reason"),
    [
        (torch.float32, 0.0, "attn_bias .*float32.*needs query's dtype"),
        (F16, 0.1, "dropout"),
        ("3d-bad", 0.0, "does not broadcast"),
    ],
)
def test_efficient_router_falls_back_with_reasons(fake_build: Any, native: _Native, fake_mode: Any, bias: Any,
                                                  dropout: float, reason: str) -> None:  # fmt: skip
    from flashsdpa import reporting, routers_masked

    fake_build()
    q, k, v = (torch.empty(2, 4, 100, 64, dtype=F16, device="cuda") for _ in range(3))
    if bias == "3d-bad":
        b = torch.empty(3, 100, 100, dtype=F16, device="cuda")
    else:
        b = torch.empty(2, 4, 100, 100, dtype=bias, device="cuda")
    reporting.reset_stats()
    assert routers_masked._eff_forward("keys", q, k, v, b, True, dropout, False) == "native result"
    assert len(native.calls) == 1
    reasons = reporting.stats()["fallback_reasons"]
    assert any(re.search(reason, key) for key in reasons), reasons


@pytest.mark.parametrize("decode_features", [8, 0])
@pytest.mark.parametrize("sq", [1, 16, 17])
def test_masked_routers_send_decode_sized_calls_to_the_decode_path(
    fake_build: Any, native: _Native, fake_mode: Any, monkeypatch: pytest.MonkeyPatch, sq: int, decode_features: int
) -> None:
    """A masked call of at most DECODE_MAX_SEQLEN_Q query rows (padded batched generation, key
    padding (B, 1, 1, Sk)) runs the split-KV decode kernel with the bias where the table's decode
    path takes it (decode_features 8: the spec carries the decode item and the bias); where it takes
    no modifier (0) the call stays with PyTorch's masked ops with the reason, in both routers and in
    explain. 17 query rows run the forward kernel (no decode item) either way. The backward follows
    the forward: the dense masked backward where ours ran the forward, PyTorch's where PyTorch's did.
    An unmasked call is left to the op SDPA chose."""
    from flashsdpa import reporting, routers_masked

    build = fake_build(decode_features=decode_features)
    monkeypatch.setattr(_backend, "DECODE_MAX_SEQLEN_Q", 16)
    monkeypatch.setattr(_backend, "_current_stream", lambda device: 77)
    q = torch.empty(2, 4, sq, 64, dtype=F16, device="cuda")
    k = v = torch.empty(2, 4, 300, 64, dtype=F16, device="cuda")
    bias = torch.empty(2, 1, 1, 300, dtype=F16, device="cuda").expand(2, 4, sq, 300)
    left = sq <= 16 and not decode_features
    reporting.reset_stats()
    for route in (routers_masked._eff_forward, routers_masked._cudnn_forward):
        args = (q, k, v, bias, True, 0.0, False) + ((False,) if route is routers_masked._cudnn_forward else ())
        result = route("keys", *args)
        assert (type(result) is str and result == "native result") == left
    reasons = reporting.stats()["fallback_reasons"]
    assert (sum("decode-sized" in key for key in reasons) == 2) == left, reasons
    assert any("decode-sized" in r for r in selection.explain(q, k, v, attn_mask=bias)) == left
    fwd_specs = [args[0] for name, args in build.calls if name == "fwd"]
    assert len(fwd_specs) == (0 if left else 2)
    for spec in fwd_specs:
        decode, mods = spec[8], spec[9]
        assert (decode is not None) == (sq <= 16), decode  # the decode item: (num_splits, ...)
        assert decode is None or decode[0] == 3  # the stand-in plan's split count
        assert mods[:4] == (0.0, 0, 0, 0) and mods[4] == bias.data_ptr()  # the bias alone
    # The backward of such a call (grad_input_mask as SDPA's autograd asks).
    meta = torch.ops.aten._scaled_dot_product_efficient_attention.default(q, k, v, bias, True, 0.0, False)
    build.calls.clear()
    native.calls.clear()
    grads = routers_masked._eff_backward("keys", torch.empty_like(meta[0]), q, k, v, bias, meta[0], meta[1], meta[2],
                                         meta[3], 0.0, [True, True, True, False], False)  # fmt: skip
    assert (type(grads) is str) == left
    assert [name for name, _ in build.calls] == ([] if left else ["bwd"])
    assert len(native.calls) == (1 if left else 0)
    native.calls.clear()
    assert routers_masked._eff_forward("keys", q, k, v, None, True, 0.0, False) == "native result"
    assert any(routers_masked.NO_BIAS_REASON in key for key in reporting.stats()["fallback_reasons"])


def test_decode_sized_masked_call_in_float32_falls_back_with_its_dtype(
    fake_build: Any, native: _Native, fake_mode: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A float32 (or CPU) decode-sized masked call is no question for the capability table (it has
    no float32 row): the routers leave it to PyTorch naming the dtype, explain says so too, and
    neither raises (CI's CUDA build once raised KeyError: torch.float32 in explain)."""
    from flashsdpa import reporting, routers_masked

    fake_build(decode_features=8)
    monkeypatch.setattr(_backend, "DECODE_MAX_SEQLEN_Q", 16)
    q = torch.empty(2, 4, 1, 64, dtype=torch.float32, device="cuda")
    k = v = torch.empty(2, 4, 300, 64, dtype=torch.float32, device="cuda")
    bias = torch.empty(2, 1, 1, 300, dtype=torch.float32, device="cuda")
    reporting.reset_stats()
    assert routers_masked._eff_forward("keys", q, k, v, bias, True, 0.0, False) == "native result"
    assert any("float32" in key for key in reporting.stats()["fallback_reasons"]), reporting.stats()
    assert selection.decode_sized_mask_reason(q, v, masks.NO_MASK) is None
    cpu = torch.randn(1, 2, 1, 16)
    assert selection.decode_sized_mask_reason(cpu, cpu, masks.NO_MASK) is None
    assert any("float32" in r for r in selection.explain(q, k, v, attn_mask=bias))


@pytest.mark.parametrize("softcap", [0.0, 30.0])
def test_launch_fwd_takes_the_decode_path_for_the_bias_alone(fake_build: Any, fake_mode: Any,
                                                             monkeypatch: pytest.MonkeyPatch, softcap: float) -> None:  # fmt: skip
    """flashsdpa.attention's masked decode-sized launch: the bias alone takes the decode kernel (its
    plan asked with the bias's feature bit, the decode item and the bias both in the spec); softcap
    with it has no decode kernel (decode_features), so the forward kernel runs it (no decode item)."""
    from flashsdpa import ops_masks

    build = fake_build()
    monkeypatch.setattr(_backend, "_current_stream", lambda device: 77)
    planned: list[int] = []
    plan = build.decode_plan
    monkeypatch.setattr(build, "decode_plan", lambda *args: planned.append(args[6]) or plan(*args))
    q = torch.empty(3, 8, 1, 128, dtype=F16, device="cuda")
    k = v = torch.empty(3, 2, 1000, 128, dtype=F16, device="cuda")
    bias = torch.empty(3, 1, 1, 1000, dtype=F16, device="cuda")
    out = torch.empty_like(q)
    mods = ops_masks.masked_mods(softcap, None, None, bias, (3, 8, 1, 1000), skip=False)
    _backend.launch_fwd(q, k, v, out, None, 0.125, masks.NO_MASK, mods=mods)
    [(name, (spec,))] = build.calls
    assert name == "fwd" and (spec[8] is not None) == (softcap == 0.0)
    assert spec[9][4] == bias.data_ptr() and spec[9][0] == softcap
    assert planned == [_backend.FEATURE_BITS["bias"] | (_backend.FEATURE_BITS["softcap"] if softcap else 0)]


def test_cudnn_router_outputs_match_its_meta(fake_build: Any, native: _Native, fake_mode: Any,
                                             monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    from flashsdpa import routers, routers_masked

    build = fake_build()
    monkeypatch.setattr(_backend, "_current_stream", lambda device: 77)
    q = torch.empty(2, 100, 4, 64, dtype=F16, device="cuda").transpose(1, 2)
    k = torch.empty(2, 80, 2, 64, dtype=F16, device="cuda").transpose(1, 2)
    v = torch.empty(2, 80, 2, 64, dtype=F16, device="cuda").transpose(1, 2)
    bias = torch.empty(100, 80, dtype=F16, device="cuda")
    ours = routers_masked._cudnn_forward("keys", q, k, v, bias, True, 0.0, False, False)
    assert not native.calls
    meta = torch.ops.aten._scaled_dot_product_cudnn_attention.default(q, k, v, bias, True, 0.0, False, False)
    assert _same_meta(ours[0], meta[0]) and _same_meta(ours[1], meta[1])
    assert ours[4:6] == (100, 80)
    [(name, (spec,))] = build.calls
    # (Sq, Sk) broadcast 8 times over (2, 4, 100, 80): no summary (ops_masks.summary_pays).
    assert spec[3] == masks.NO_MASK and spec[9][4:] == (bias.data_ptr(), 0, 0, 80)


# ---- the bias's summary for tile skipping (ops_masks.bias_cells, cuda/common/bias_cells.cuh) -----


def _cells_reference(bias: torch.Tensor, sq: int, sk: int) -> torch.Tensor:
    """bias_cells by loops over the dense (B?, H?, Sq?, Sk) bias: per cell of 64 x 16 the OR of
    1 (an element that is not -inf) and 2 (one that is not 0), elements past Sq / Sk ignored."""
    b4 = bias.reshape((1,) * (4 - bias.dim()) + tuple(bias.shape))
    b4 = b4.expand(*b4.shape[:3], sk)
    bb, hb, qb = b4.shape[:3]
    qc, kc = -(-qb // 64), -(-sk // 16)
    out = torch.zeros(bb, hb, qc, -(-kc // 16) * 16, dtype=torch.uint8)
    for b in range(bb):
        for h in range(hb):
            for i in range(qc):
                for j in range(kc):
                    cell = b4[b, h, 64 * i : 64 * (i + 1), 16 * j : 16 * (j + 1)].float()
                    vis = bool((cell != -math.inf).any())
                    nz = bool((cell != 0).any())
                    out[b, h, i, j] = int(vis) | (2 * int(nz))
    return out


def _random_bias(shape: tuple[int, ...], seed: int) -> torch.Tensor:
    """Zeros, -inf and values mixed by cell-sized stripes, so cells of each kind (all -inf, all 0,
    partial) occur, in bfloat16."""
    g = torch.Generator().manual_seed(seed)
    kind = torch.randint(0, 4, shape, generator=g)
    stripes = torch.randint(0, 3, (shape[-1] // 16 + 1,), generator=g).repeat_interleave(16)[: shape[-1]]
    values = torch.randn(shape, generator=g)
    out = torch.where(stripes == 0, torch.zeros(()), torch.where(stripes == 1, torch.full((), -math.inf), values))
    out = torch.where(kind == 0, values, out)  # some partial elements everywhere
    return out.to(torch.bfloat16)


@pytest.mark.parametrize(
    ("shape", "sq", "sk"),
    [
        ((3, 1, 1, 1023), 113, 1023),  # key padding (B, 1, 1, S)
        ((1, 4, 113, 7), 113, 7),  # (1, H, Sq, Sk), Sq != Sk
        ((2, 3, 7, 113), 7, 113),  # (B, H, Sq, Sk)
        ((113, 113), 113, 113),  # (Sq, Sk)
        ((1, 1), 1, 1),  # Sq = Sk = 1
        ((2, 1, 1, 1), 130, 40),  # a broadcast key dim
        ((1, 2, 200, 300), 200, 300),  # several query cells
    ],
)
def test_bias_cells_against_loops(shape: tuple[int, ...], sq: int, sk: int) -> None:
    bias = _random_bias(shape, seed=sum(shape))
    cells = ops_masks.bias_cells(bias, sq, sk)
    ref = _cells_reference(bias, sq, sk)
    assert cells.dtype == torch.uint8 and cells.is_contiguous()
    assert cells.shape == ref.shape and cells.shape[3] % 16 == 0  # 16-byte rows (checks.cpp)
    assert torch.equal(cells, ref)


def test_bias_cells_key_padding_tiles() -> None:
    # (B, 1, 1, S) key padding with kept lengths 100 and 1000 of S = 1023: cells up to the length
    # are visible and zero (1), cells past it hidden (2: all -inf, not zero), the cell holding the
    # boundary partial (3); padding cells 0.
    lengths = torch.tensor([100, 1000])
    keep = torch.arange(1023)[None, :] < lengths[:, None]
    bias = ops_masks.additive(keep[:, None, None, :], torch.float16)
    cells = ops_masks.bias_cells(bias, 50, 1023)
    assert cells.shape == (2, 1, 1, 64)
    row0 = cells[0, 0, 0].tolist()
    assert row0[:6] == [1] * 6 and row0[6] == 3 and row0[7:64] == [2] * 57  # 100 = 6 x 16 + 4
    row1 = cells[1, 0, 0].tolist()
    assert row1[:62] == [1] * 62 and row1[62] == 3 and row1[63] == 2  # 1000 = 62 x 16 + 8; 1023 in cell 63


def test_bias_cells_pad_never_makes_a_cell_partial() -> None:
    # Sq = 7, Sk = 13: one cell of 64 x 16 holding 7 x 13 elements. All -inf -> 2 (hidden), all 0
    # -> 1 (visible, no bias), whatever the padding; a row with no visible key is still hidden.
    assert ops_masks.bias_cells(torch.full((7, 13), -math.inf), 7, 13)[0, 0, 0, 0] == 2
    assert ops_masks.bias_cells(torch.zeros(7, 13), 7, 13)[0, 0, 0, 0] == 1
    assert ops_masks.bias_cells(torch.zeros(7, 13), 7, 13)[0, 0, 0, 1:].eq(0).all()  # padding cells: 0


def test_bias_cells_nan_counts_as_visible_and_nonzero() -> None:
    bias = torch.full((1, 1, 64, 16), -math.inf)
    bias[0, 0, 3, 5] = math.nan  # must reach the output as PyTorch's kernels give it: never skipped
    assert ops_masks.bias_cells(bias, 64, 16)[0, 0, 0, 0] == 3


def test_masked_mods_carry_the_cells() -> None:
    bias = _random_bias((B, 1, 1, SK), seed=1)
    mods = ops_masks.masked_mods(0.0, None, None, bias, (B, H, SQ, SK))
    assert len(mods) == 5 and torch.equal(mods[4], ops_masks.bias_cells(bias, SQ, SK))
    item = _backend._mods_item(mods)
    assert len(item) == 12 and item[8] == mods[4].data_ptr() and item[9:] == (16, 0, 0)
    assert len(ops_masks.masked_mods(0.0, None, None, bias, (B, H, SQ, SK), skip=False)) == 4
    # (1, H, 7, 13) is broadcast only B = 2 times: not summarized (summary_pays), unless the rule allows it.
    per_head_bias = _random_bias((1, H, SQ, SK), seed=2)
    assert len(ops_masks.masked_mods(0.0, None, None, per_head_bias, (B, H, SQ, SK))) == 4


def test_summary_pays_counts_distinct_elements(monkeypatch: pytest.MonkeyPatch) -> None:
    target = (8, 16, 2048, 2048)
    assert ops_masks.summary_pays(torch.empty(8, 1, 1, 2048), target)  # key padding: 1 / (16 * 2048)
    assert ops_masks.summary_pays(torch.empty(8, 1, 2048, 2048), target)  # (B, 1, S, S) at 16 heads: 1 / 16
    assert not ops_masks.summary_pays(torch.empty(1, 16, 2048, 2048), target)  # 1 / 8
    assert not ops_masks.summary_pays(torch.empty(8, 16, 2048, 2048), target)
    # An expanded view counts its distinct elements (SDPA's routers get (B, H, Sq, Sk) expansions).
    assert ops_masks.summary_pays(torch.empty(8, 1, 1, 2048).expand(target), target)
    monkeypatch.setattr(ops_masks, "SUMMARY_MIN_BROADCAST", 1)
    per_head = ops_masks.masked_mods(0.0, None, None, _random_bias((1, H, SQ, SK), seed=2), (B, H, SQ, SK))
    assert _backend._mods_item(per_head)[9:] == (0, 16, 0)  # (1, H, 7, 13): one query cell, 16-cell rows


def test_bias_cells_recomputed_per_call(monkeypatch: pytest.MonkeyPatch) -> None:
    # The launches get a summary of the mask's current contents on every call: mutating the mask in
    # place between two calls changes the cells the second launch reads.
    seen: list[torch.Tensor] = []
    real = ops_masks.bias_cells

    def spy(bias: torch.Tensor, sq: int, sk: int) -> torch.Tensor:
        seen.append(real(bias, sq, sk))
        return seen[-1]

    monkeypatch.setattr(ops_masks, "bias_cells", spy)
    mask = torch.zeros(B, 1, 1, SK, dtype=torch.float16)
    ops_masks.masked_mods(0.0, None, None, mask, (B, H, SQ, SK))
    mask[:, :, :, 4:] = -math.inf
    ops_masks.masked_mods(0.0, None, None, mask, (B, H, SQ, SK))
    assert seen[0][0, 0, 0, 0] == 1 and seen[1][0, 0, 0, 0] == 3


def test_routers_skip_tiles_except_in_a_deterministic_backward() -> None:
    from flashsdpa import routers_masked

    q = torch.empty(2, 4, 100, 64, dtype=F16)
    k = torch.empty(2, 4, 300, 64, dtype=F16)
    bias = torch.zeros(2, 1, 1, 300, dtype=F16).expand(2, 4, 100, 300)
    assert len(routers_masked._eff_mods(bias, q, k, backward=False)) == 5
    assert len(routers_masked._eff_mods(bias, q, k, backward=True)) == 5
    prior = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        assert len(routers_masked._eff_mods(bias, q, k, backward=False)) == 5  # the forward has no order to keep
        assert len(routers_masked._eff_mods(bias, q, k, backward=True)) == 4  # api.cpp would drop it
    finally:
        torch.use_deterministic_algorithms(prior)


# Every kernel tile (block_m x block_n, both families and directions) and the 4-byte word reads of
# bias_cells.cuh's BiasCells::bits, mirrored here: a tile's class from the cells must equal the
# class read off the dense mask directly, ragged edges included.
_KERNEL_TILES = [(192, 128), (128, 128), (128, 64), (64, 128), (64, 64)]


def _tile_bits_like_the_kernel(cells: torch.Tensor, b: int, h: int, m_block: int, n_block: int, block_m: int,
                               block_n: int, sq: int) -> int:  # fmt: skip
    plane = cells[min(b, cells.shape[0] - 1), min(h, cells.shape[1] - 1)]
    words = plane.contiguous().view(plane.shape[0], -1, 4)  # (query cell rows, 4-byte words, bytes)
    acc = 0
    for r in range(block_m // 64):
        row = m_block * (block_m // 64) + r
        if r > 0 and row * 64 >= sq:
            break
        row = min(row, plane.shape[0] - 1)  # a broadcast query dim: one row (stride 0)
        for w in range(n_block * block_n // 64, (n_block + 1) * block_n // 64):
            for byte in words[row, w].tolist():
                acc |= byte
    return acc & 3


@pytest.mark.parametrize(("shape", "sq", "sk"), [((2, 1, 1, 1023), 300, 1023), ((1, 2, 333, 517), 333, 517),
                                                  ((2, 1, 200, 1), 200, 700), ((129, 1000), 129, 1000)])  # fmt: skip
def test_tile_classes_from_cells_match_the_mask(shape: tuple[int, ...], sq: int, sk: int) -> None:
    bias = _random_bias(shape, seed=sum(shape) + 7)
    cells = ops_masks.bias_cells(bias, sq, sk)
    dense = bias.reshape((1,) * (4 - bias.dim()) + tuple(bias.shape)).float()
    dense = dense.expand(dense.shape[0], dense.shape[1], sq, sk)
    for block_m, block_n in _KERNEL_TILES:
        for b in range(dense.shape[0]):
            for h in range(dense.shape[1]):
                for m in range(-(-sq // block_m)):
                    for n in range(-(-sk // block_n)):
                        tile = dense[b, h, m * block_m : (m + 1) * block_m, n * block_n : (n + 1) * block_n]
                        want = int(bool((tile != -math.inf).any())) | 2 * int(bool((tile != 0).any()))
                        got = _tile_bits_like_the_kernel(cells, b, h, m, n, block_m, block_n, sq)
                        assert got == want, (block_m, block_n, b, h, m, n)


@pytest.mark.parametrize(
    ("mask_shape", "causal", "unvisited"),
    [
        ((1, 4, 100, 100), False, False),  # unmasked, no summary (a dense (1, H, S, S) bias): every element stored
        ((1, 4, 100, 100), True, True),  # causal: the blocks above the diagonal are never visited
        ((2, 1, 1, 100), False, True),  # key padding: its summary skips tiles
    ],
)
def test_dense_bias_gradient_is_filled_only_where_needed(fake_build: Any, fake_mode: Any, monkeypatch: pytest.MonkeyPatch,
                                                        mask_shape: tuple[int, ...], causal: bool, unvisited: bool) -> None:  # fmt: skip
    # The dense d_bias buffer: zeroed where some elements are never stored, left unfilled where the
    # kernels store every one (tests/gpu/test_masks_gpu.py poisons it with NaN to prove that).
    from flashsdpa import routers_masked

    fake_build()
    monkeypatch.setattr(_backend, "_current_stream", lambda device: 77)
    asked: list[bool] = []
    real = ops_masks.dense_grad
    monkeypatch.setattr(ops_masks, "dense_grad", lambda q, shape, unvisited: asked.append(unvisited) or real(q, shape, unvisited))
    q, k, v = (torch.empty(2, 4, 100, 64, dtype=F16, device="cuda") for _ in range(3))
    bias = torch.empty(mask_shape, dtype=F16, device="cuda").expand(2, 4, 100, 100)
    out, lse, seed, offset = routers_masked._eff_forward("keys", q, k, v, bias, True, 0.0, causal)
    routers_masked._eff_backward("keys", torch.empty_like(out), q, k, v, bias, out, lse, seed, offset, 0.0,
                                 [True, True, True, True], causal)  # fmt: skip
    assert asked == [unvisited]
