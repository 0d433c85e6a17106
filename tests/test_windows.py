# test_windows.py: sliding windows on the CPU: the reference (reference.py) against the float64
# textbook with the project's rule, the mask spellings of masks.py (the direct API's and PyTorch's
# flash ops'), and the predicates that decide whether a window is served (capability table).
from __future__ import annotations

import zlib
from typing import Any

import pytest
import torch

import flashsdpa
from flashsdpa import _backend, masks, selection
from flashsdpa.reference import attention_backward, attention_forward
from helpers import Shape, check_attention, make_qkv

F32 = torch.float32
# (Sq, Sk): equal, more queries, more keys; lengths that are not block multiples.
LENGTHS = ((40, 40), (45, 23), (23, 45))
# Left windows 0, 1, block - 1, block, block + 1 (blocks of 8 below) and >= Sk; right: causal (0),
# a bound other than 0, unbounded.
WINDOWS = [(left, right) for left in (0, 1, 7, 8, 9, 64) for right in (0, 5, -1)]


@pytest.mark.parametrize("align", [masks.TOP_LEFT, masks.BOTTOM_RIGHT], ids=["top_left", "bottom_right"])
@pytest.mark.parametrize("window", WINDOWS, ids=str)
@pytest.mark.parametrize("lengths", LENGTHS, ids=str)
def test_reference_windows(lengths: tuple[int, int], window: tuple[int, int], align: int) -> None:
    seqlen_q, seqlen_k = lengths
    shape = Shape("w", 1, 4, 2, seqlen_q, seqlen_k, 16, 16)
    gen = torch.Generator().manual_seed(zlib.crc32(f"{lengths}{window}{align}".encode()))
    q, k, v = make_qkv(shape, F32, generator=gen)
    dout = torch.randn(1, 4, seqlen_q, 16, generator=gen)
    mask = (*window, align)
    out, lse = attention_forward(q, k, v, scale=0.25, mask=mask, block_size=8)
    grads = attention_backward(dout, q, k, v, out, lse, scale=0.25, mask=mask, block_size=8)
    check_attention(q, k, v, dout, out, grads, lse, scale=0.25, causal_mode=mask, reduced_precision=False)
    hidden = ~masks.visible(mask, seqlen_q, seqlen_k)  # type: ignore[operator]
    empty = hidden.all(dim=1)  # rows that see no key: out 0, LSE +inf
    assert torch.equal(lse[:, :, empty], torch.full_like(lse[:, :, empty], float("inf")))
    assert not out[:, :, empty].any()


def test_reference_window_equals_causal_when_unbounded() -> None:
    q, k, v = make_qkv(Shape("c", 1, 2, 2, 19, 33, 8, 8), F32)
    causal = attention_forward(q, k, v, scale=0.5, causal_mode=2, block_size=8)
    window = attention_forward(q, k, v, scale=0.5, mask=masks.CAUSAL_BOTTOM_RIGHT, block_size=8)
    assert all(torch.equal(a, b) for a, b in zip(causal, window))


def test_direct_api_windows_on_cpu() -> None:
    q, k, v = make_qkv(Shape("d", 1, 2, 2, 30, 50, 16, 16), F32)
    out = flashsdpa.attention(q, k, v, causal=True, causal_alignment="bottom_right", window=(9, 3))  # causal wins
    ref, _ = attention_forward(q, k, v, scale=0.25, mask=(9, 0, 1))
    torch.testing.assert_close(out, ref)
    cu = torch.tensor([0, 30], dtype=torch.int32)
    packed = [t[0].transpose(0, 1) for t in (q, k, v)]
    cu_k = torch.tensor([0, 50], dtype=torch.int32)
    out_v = flashsdpa.attention_varlen(*packed, cu, cu_k, 30, 50, window=(4, 4), causal_alignment="bottom_right")
    ref_v, _ = attention_forward(q, k, v, scale=0.25, mask=(4, 4, 1))
    torch.testing.assert_close(out_v, ref_v[0].transpose(0, 1))


@pytest.mark.parametrize(
    "causal, alignment, window, expected",
    [
        (False, "top_left", None, (-1, -1, 0)),
        (True, "top_left", None, (-1, 0, 0)),
        (True, "bottom_right", None, (-1, 0, 1)),
        (False, "bottom_right", (128, 0), (128, 0, 1)),
        (True, "top_left", (127, 5), (127, 0, 0)),  # causal hides everything right of the diagonal
        (False, "top_left", (-1, 3), (-1, 3, 0)),
    ],
)
def test_direct_api_mask(causal: bool, alignment: str, window: Any, expected: masks.MaskSpec) -> None:
    assert masks.make(causal, alignment, window) == expected


@pytest.mark.parametrize(
    "mask, kind",
    [((-1, -1, 0), 0), ((-1, -1, 1), 0), ((-1, 0, 0), 1), ((-1, 0, 1), 2), ((4, 0, 1), 3), ((-1, 3, 0), 3)],
)
def test_mask_kinds(mask: masks.MaskSpec, kind: int) -> None:
    assert masks.kind(mask) == kind and masks.KIND_NAMES[kind]


def test_visible_pairs_counts_the_window() -> None:
    assert masks.visible_pairs((-1, -1, 0), 10, 12) == 120
    assert masks.visible_pairs((-1, 0, 0), 4, 4) == 10
    assert masks.visible_pairs((1, 0, 0), 4, 4) == 7
    assert masks.visible_pairs((2, 0, 1), 5, 3) == int(masks.visible((2, 0, 1), 5, 3).sum())  # type: ignore[union-attr]


# ---- the predicates: windows read the capability table ------------------------------------------


def test_mask_reason_asks_the_table_only_for_windows(fake_build: Any, fake_mode: Any) -> None:
    build = fake_build()
    q = torch.empty(1, 2, 16, 64, dtype=torch.float16, device="cuda")
    asked: list[tuple[Any, ...]] = []
    original = build.select
    build.select = lambda *args: asked.append(args) or original(*args)
    assert selection.mask_reason(q, q, masks.CAUSAL_TOP_LEFT, varlen=False) is None
    assert asked == []
    assert selection.mask_reason(q, q, (4, 0, 1), varlen=False) is None
    assert selection.mask_reason(q, q, (4, 0, 1), varlen=False) is None  # cached per problem
    assert asked == [(0, 0, 64, 64, 3, False, False)]
    build.select = lambda *args: (None, 0, -1, 0, "family sm80: mask window: not supported")
    _backend._SELECT.clear()
    assert selection.mask_reason(q, q, (4, 0, 1), varlen=True) == "window=(4, 0): family sm80: mask window: not supported"


def test_capabilities_without_cuda(fake_build: Any) -> None:
    fake_build(with_cuda=False)
    table = flashsdpa.capabilities()
    assert list(table) == [] and table.reason == "flashsdpa._C was built without CUDA (no nvcc at build time)"


def test_capabilities_table(fake_build: Any) -> None:
    fake_build(head_dims=(64, 128))
    [family] = flashsdpa.capabilities()
    assert family["family"] == "sm80" and family["head_dims"] == [64, 128]
    assert family["masks"] == ["none", "causal_top_left", "causal_bottom_right", "window"]
    assert (64, 128) in _backend.HEAD_DIM_PAIRS and (64, 136) not in _backend.HEAD_DIM_PAIRS


def test_real_capabilities_load() -> None:
    # The compiled module's own table (CUDA or CPU-only build): a list, and a reason when empty.
    table = flashsdpa.capabilities()
    assert isinstance(table, list) and (bool(table) or table.reason)
    for family in table:
        assert set(family["dtypes"]) <= {"float16", "bfloat16"} and family["directions"]


def test_explain_reports_windows() -> None:
    # explain(window=...) spells the window's own limits, and on a build with kernels names the
    # families that serve windows (the capability table's "window" mask kind).
    q = torch.randn(1, 2, 8, 16)
    assert flashsdpa.explain(q, q, q, window=(-2, 0))[-1] == (
        "window=(-2, 0): needs (left, right), each an int >= 0 or -1 (unbounded)"
    )
    families = selection.window_families()
    served = [f["family"] for f in flashsdpa.capabilities() if "window" in f["masks"]]
    assert [f.split(" ")[0] for f in families] == served
    # A CPU tensor: the device reason; the window itself adds nothing there.
    reasons = flashsdpa.explain(q.half(), q.half(), q.half(), window=(4, 0))
    assert reasons and all("window" not in r for r in reasons), reasons
