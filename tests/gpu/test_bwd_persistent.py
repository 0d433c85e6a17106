# test_bwd_persistent.py: the sm90 backward's persistent grid (bwd_kernel_sm90.cuh's BwdItem): one
# CTA per SM running key-block items from a counter in the workspace, each CTA's ring, dS^T and dQ
# buffers and K / V barrier carried from item to item. A compile-time switch until it has been
# measured (FLASHSDPA_SM90_BWD_PERSISTENT=ON at build time; build_info()["switches"] says so): the
# file skips in builds without it. The shape table's problems have fewer items than SMs (one CTA
# each), so these cap the grid with FLASHSDPA_SM90_BWD_GRID=n (read per launch; 0 = one CTA per
# item) to give every CTA many items, of equal and of different lengths (causal, windows with key
# blocks no query sees, GQA, ragged blocks), and check:
# - the rule against the float64 reference (dq, dk, dv, NaN-poisoned outputs), at caps 1, 3, 7, and
#   the SM count (the default);
# - dK and dV bitwise equal to the one-CTA-per-item grid's (an item's sums run in the same order
#   on any CTA), dQ equal up to the order of its float32 adds;
# - deterministic mode: the same bits whatever the grid (the adds' order is the items' index
#   order, not the CTAs');
# - the score-modifier, bias and dropout instantiations, against their one-CTA-per-item runs.
from __future__ import annotations

import math
import zlib
from collections.abc import Callable, Iterator

import pytest
import torch
from torch import Tensor

import flashsdpa
from flashsdpa import _backend, masks
from helpers import Shape, check_attention, default_scale, gpu_skip_reason, make_qkv, skip_unless_compiled

GPU_SKIP = gpu_skip_reason()
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(GPU_SKIP is not None, reason=f"GPU suite: {GPU_SKIP}")]

DEVICE = "cuda"
BF16 = torch.bfloat16
KNOB = "FLASHSDPA_SM90_BWD_GRID"

# items = B x Hkv x ceil(Sk / 128)
CASES = [
    ("unmasked_gqa", Shape("p_gqa", 2, 8, 2, 700, 1100, 128), masks.NO_MASK),  # 36 items of 11 steps x 4 heads
    ("causal_ragged", Shape("p_causal", 2, 4, 4, 1023, 1023, 128), masks.CAUSAL_TOP_LEFT),  # 64 items, 2-16 steps
    ("causal_br_sq_lt_sk", Shape("p_br", 1, 6, 3, 300, 1500, 64), masks.CAUSAL_BOTTOM_RIGHT),
    ("window_empty_items", Shape("p_win", 1, 4, 2, 200, 1300, 128, 96), (5, 0, masks.TOP_LEFT)),  # key blocks past 205 see no query
    ("one_query_row", Shape("p_row", 3, 2, 2, 1, 900, 64), masks.NO_MASK),
    # More items than the H200's 132 SMs: the default grid is persistent too (the counter's items).
    ("many_items", Shape("p_many", 4, 16, 16, 1024, 1024, 64), masks.NO_MASK),  # 512 items of 16 steps
    ("many_items_causal", Shape("p_many_c", 3, 16, 4, 2048, 2048, 128), masks.CAUSAL_TOP_LEFT),  # 192 items, GQA 4
]
CAPS = ["1", "3", "7", "default"]


@pytest.fixture
def grid_cap(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[str], None]]:
    def set_cap(cap: str) -> None:
        if cap == "default":
            monkeypatch.delenv(KNOB, raising=False)
        else:
            monkeypatch.setenv(KNOB, cap)

    yield set_cap


def _sm90_backward() -> bool:
    return torch.cuda.get_device_capability() == (9, 0) and any(
        f["family"] == "sm90" and 128 in f["head_dims_by_direction"].get("backward", []) for f in _backend.capabilities()
    )


PERSISTENT_BUILT = "sm90_bwd_persistent" in flashsdpa.build_info().get("switches", [])
pytestmark.append(
    pytest.mark.skipif(not PERSISTENT_BUILT, reason="built without FLASHSDPA_SM90_BWD_PERSISTENT=ON (the switch's default)")
)


def _inputs(request: pytest.FixtureRequest, shape: Shape) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    skip_unless_compiled(BF16, shape.head_dim, shape.dv)
    if not _sm90_backward():
        pytest.skip("the persistent grid is the sm90 backward's (an H100 / H200 with the sm90 family built)")
    gen = torch.Generator(device=DEVICE).manual_seed(zlib.crc32(request.node.nodeid.encode()))
    q, k, v = make_qkv(shape, BF16, DEVICE, layout="bshd", generator=gen)
    dout = torch.randn(q.shape[0], q.shape[1], q.shape[2], shape.dv, generator=gen, device=DEVICE).to(BF16)
    return q, k, v, dout


def _mask_kwargs(mask: masks.MaskSpec) -> dict[str, object]:
    left, right, align = mask
    kwargs: dict[str, object] = {"causal": right == 0}
    if (left, right) != (-1, -1):
        kwargs["causal_alignment"] = "bottom_right" if align == masks.BOTTOM_RIGHT else "top_left"
    if left >= 0 or right > 0:
        kwargs["window"] = (left, right)
    return kwargs


def _launch_grads(q: Tensor, k: Tensor, v: Tensor, dout: Tensor, mask: masks.MaskSpec) -> tuple[Tensor, ...]:
    """out, lse from the forward, then dq, dk, dv into NaN-filled buffers (unwritten elements show)."""
    scale = default_scale(q.shape[-1])
    out = torch.full((*q.shape[:-1], v.shape[-1]), math.nan, device=DEVICE, dtype=q.dtype)
    lse = torch.full(q.shape[:-1], math.nan, device=DEVICE, dtype=torch.float32)
    _backend.launch_fwd(q, k, v, out, lse, scale, mask)
    dq, dk, dv = (torch.full_like(t, math.nan) for t in (q, k, v))
    _backend.launch_bwd(dout, q, k, v, out, lse, dq, dk, dv, scale, mask)
    torch.cuda.synchronize()
    return out, lse, dq, dk, dv


@pytest.mark.parametrize("cap", CAPS)
@pytest.mark.parametrize("name,shape,mask", CASES, ids=[c[0] for c in CASES])
def test_persistent_against_reference(
    request: pytest.FixtureRequest, grid_cap: Callable[[str], None], name: str, shape: Shape, mask: masks.MaskSpec,
    cap: str,
) -> None:  # fmt: skip
    q, k, v, dout = _inputs(request, shape)
    grid_cap(cap)
    out, lse, dq, dk, dv = _launch_grads(q, k, v, dout, mask)
    check_attention(q, k, v, dout, out, (dq, dk, dv), lse, scale=default_scale(shape.head_dim), causal_mode=mask)

    # The same backward on one CTA per item: dK / dV to the bit, dQ up to its adds' order.
    grid_cap("0")
    _, _, dq0, dk0, dv0 = _launch_grads(q, k, v, dout, mask)
    assert torch.equal(dk, dk0), "dk: the persistent grid's differs from one CTA per item"
    assert torch.equal(dv, dv0), "dv: the persistent grid's differs from one CTA per item"
    diff = (dq.float() - dq0.float()).abs().max().item()
    assert diff <= 2**-7 * dq0.float().abs().max().item(), f"dq: persistent vs one CTA per item differ by {diff}"


@pytest.mark.parametrize("name,shape,mask", CASES[:3], ids=[c[0] for c in CASES[:3]])
def test_persistent_deterministic_bits(
    request: pytest.FixtureRequest, grid_cap: Callable[[str], None], deterministic: Callable[[bool], None], name: str,
    shape: Shape, mask: masks.MaskSpec,
) -> None:  # fmt: skip
    # The dQ adds follow the items' index order (BwdGridOrder::turn), which the counter hands out in
    # order: any grid gives the same bits, the one-CTA-per-item grid included.
    q, k, v, dout = _inputs(request, shape)
    deterministic(False)
    runs = []
    for cap in ("0", "1", "5", "default", "5"):
        grid_cap(cap)
        runs.append(_launch_grads(q, k, v, dout, mask)[2:])
    for run in runs[1:]:
        for what, first, now in zip(("dq", "dk", "dv"), runs[0], run):
            assert torch.equal(first, now), f"{what}: deterministic bits differ between grids"


# The other instantiations of the kernel, each against its own one-CTA-per-item run (the suite's
# other files check them against their references): the score modifiers (softcap, ALiBi), the
# additive bias (its staged tiles and skipped steps: narrow_queries), dropout (the same seed).
_VARIANTS = ["softcap", "alibi", "bias", "bias_causal", "dropout"]


@pytest.mark.parametrize("variant", _VARIANTS)
def test_persistent_instantiations(request: pytest.FixtureRequest, grid_cap: Callable[[str], None], variant: str) -> None:
    shape = Shape("p_var", 2, 4, 2, 517, 1100, 128)
    q, k, v, dout = _inputs(request, shape)
    gen = torch.Generator(device=DEVICE).manual_seed(7)
    kwargs: dict[str, object] = {}
    if variant == "softcap":
        kwargs["softcap"] = 30.0
    elif variant == "alibi":
        kwargs["alibi_slopes"] = torch.rand(shape.heads_q, generator=gen, device=DEVICE) * 0.1
    elif variant.startswith("bias"):
        bias = torch.randn(shape.batch, shape.heads_q, shape.seqlen_q, shape.seqlen_k, generator=gen, device=DEVICE)
        bias[:, :, :, 700:] = -math.inf  # whole key blocks hidden: items with skipped steps
        kwargs["attn_mask"] = bias.to(BF16)
        kwargs["causal"] = variant == "bias_causal"
    elif variant == "dropout":
        kwargs["dropout_p"] = 0.2

    def grads(cap: str) -> tuple[Tensor, ...]:
        grid_cap(cap)
        torch.manual_seed(11)  # dropout: the same mask in both runs
        leaves = [t.detach().requires_grad_() for t in (q, k, v)]
        out = flashsdpa.attention(*leaves, **kwargs)
        assert isinstance(out, Tensor)
        result = (out, *torch.autograd.grad(out, leaves, dout))
        torch.cuda.synchronize()
        return result

    persistent, single = grads("3"), grads("0")
    for what, a, b in zip(("out", "dq", "dk", "dv"), persistent, single):
        assert torch.isfinite(a).all(), f"{variant} {what}: non-finite values"
        if what == "dq":
            diff = (a.float() - b.float()).abs().max().item()
            assert diff <= 2**-7 * b.float().abs().max().item(), f"{variant} dq: differs by {diff}"
        else:
            assert torch.equal(a, b), f"{variant} {what}: the persistent grid's differs from one CTA per item"
