# test_mode.py: the decisions of flashsdpa's TorchFunctionMode on F.scaled_dot_product_attention
# calls: the shortcut for calls PyTorch's flash path takes as they are, and the road of every
# other call (our op for the calls PyTorch's flash path turns away, SDPA for the rest).
#
# CPU only: real CPU tensors pass for CUDA ones (Tensor.is_cuda patched to True) with a stand-in
# CUDA build (conftest.FakeCudaBuild), so that every decision runs as on a GPU; flashsdpa's op then
# runs its CPU implementation (the reference) and SDPA its CPU kernels, both deterministic.
from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor
from torch.nn.attention.bias import causal_lower_right

from flashsdpa import sdpa

BF16 = torch.bfloat16


@pytest.fixture
def cuda_lookalike(monkeypatch: pytest.MonkeyPatch, fake_build: Any) -> None:
    """CPU tensors answer is_cuda=True, and the build looks like a CUDA one."""
    monkeypatch.setattr(Tensor, "is_cuda", property(lambda self: True))


@pytest.fixture
def direct_calls(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """For each call that reaches sdpa._direct_sdpa (the mode's full decision): whether it served it."""
    calls: list[bool] = []
    full = sdpa._direct_sdpa

    def recorded(*args: Any) -> Tensor | None:
        out = full(*args)
        calls.append(out is not None)
        return out

    monkeypatch.setattr(sdpa, "_direct_sdpa", recorded)
    return calls


def tensors(b: int = 1, hq: int = 2, hkv: int = 2, sq: int = 8, sk: int = 8, d: int = 64, dv: int = 64) -> list[Tensor]:
    """q, k, v (B, H, S, D) in bf16 requiring grad: the mode's eager path never takes them."""
    return [
        torch.randn(b, h, s, dim, dtype=BF16, requires_grad=True)
        for h, s, dim in ((hq, sq, d), (hkv, sk, d), (hkv, sk, dv))
    ]


def before_shortcut(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Tensor:
    """What the mode did with every call before the shortcut: bind, ask _direct_sdpa, else SDPA."""
    try:
        bound = sdpa._sdpa_arguments(*args, **kwargs)
    except TypeError:
        bound = None
    out = None if bound is None else sdpa._direct_sdpa(*bound)
    return F.scaled_dot_product_attention(*args, **kwargs) if out is None else out


def outcome(call: Callable[[], Tensor]) -> Tensor | tuple[type[BaseException], str]:
    torch.manual_seed(1)  # the same dropout mask for both roads
    try:
        return call().detach()
    except Exception as exc:  # noqa: BLE001 - the error itself is the outcome compared
        return type(exc), str(exc)


def same(a: Tensor | tuple[type[BaseException], str], b: Tensor | tuple[type[BaseException], str]) -> bool:
    if isinstance(a, Tensor) and isinstance(b, Tensor):
        if a.is_nested or b.is_nested:
            return a.is_nested and b.is_nested and all(same(x, y) for x, y in zip(a.unbind(), b.unbind()))
        return a.shape == b.shape and a.stride() == b.stride() and torch.equal(a, b)
    return a == b


def strided_nested() -> list[Tensor]:
    """(B, H, *, D) nested tensors of the strided layout: type Tensor, but without .shape."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "nested tensors are in prototype stage"
        return [torch.nested.nested_tensor([torch.randn(2, s, 64, dtype=BF16) for s in (5, 9)]) for _ in range(3)]


def _mask_lower_right(sq: int, sk: int) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "Lower right causal bias will produce NaNs ..." (sq > sk)
        return causal_lower_right(sq, sk)


# (label, (q, k, v) maker, positional extras, keywords, the decision's road): "shortcut" for calls
# PyTorch's flash path takes as they are (the mode decides without _direct_sdpa); "ours" and
# "sdpa" for the others, which _direct_sdpa sends to our op or leaves to SDPA; "parser" for calls
# SDPA's argument parser rejects before any mode sees them.
CALLS: list[tuple[str, Callable[[], list[Tensor]], tuple[Any, ...], dict[str, Any], str]] = [
    ("plain", tensors, (), {}, "shortcut"),
    ("causal square", tensors, (), {"is_causal": True}, "shortcut"),
    ("keywords, as Hugging Face passes them", tensors, (),
     {"attn_mask": None, "dropout_p": 0.0, "scale": 0.125, "is_causal": True}, "shortcut"),
    ("positional, as nn.MultiheadAttention passes them", tensors, (None, 0.0, True), {}, "shortcut"),
    ("dropout", tensors, (), {"dropout_p": 0.5}, "shortcut"),
    ("gqa", lambda: tensors(hq=4, hkv=2), (), {"enable_gqa": True, "is_causal": True}, "shortcut"),
    ("non-causal, sq != sk", lambda: tensors(sq=5, sk=9), (), {}, "shortcut"),
    ("three dims", lambda: [t[0] for t in tensors()], (), {"is_causal": True}, "shortcut"),
    ("causal, sq < sk: our op", lambda: tensors(sq=5, sk=9), (), {"is_causal": True}, "ours"),
    ("causal, sq > sk: our op", lambda: tensors(sq=9, sk=5), (), {"is_causal": True}, "ours"),
    ("value head dim differs: our op", lambda: tensors(dv=128), (), {}, "ours"),
    ("causal gqa, sq != sk: our op", lambda: tensors(hq=4, hkv=2, sq=5, sk=9), (),
     {"is_causal": True, "enable_gqa": True}, "ours"),
    ("causal_lower_right mask: our op", lambda: tensors(sq=5, sk=9), (), {"attn_mask": _mask_lower_right(5, 9)},
     "ours"),
    ("boolean mask: SDPA", tensors, (), {"attn_mask": torch.ones(8, 8, dtype=torch.bool)}, "sdpa"),
    ("strided nested tensors: SDPA", strided_nested, (), {"is_causal": True}, "sdpa"),
    ("gqa without enable_gqa, causal sq != sk: SDPA's error", lambda: tensors(hq=4, hkv=2, sq=5, sk=9), (),
     {"is_causal": True}, "sdpa"),
    ("unknown keyword: SDPA's error", tensors, (), {"causal": True}, "parser"),
    ("query twice: SDPA's error", tensors, (), {"query": None}, "parser"),
    ("query None: SDPA's error", lambda: [None, *tensors()[1:]], (), {}, "parser"),  # type: ignore[list-item]
]  # fmt: skip


@pytest.mark.parametrize("label, make, extra, kwargs, road", CALLS, ids=[c[0] for c in CALLS])
def test_mode_matches_its_full_decision(
    label: str,
    make: Callable[[], list[Tensor]],
    extra: tuple[Any, ...],
    kwargs: dict[str, Any],
    road: str,
    cuda_lookalike: None,
    direct_calls: list[bool],
) -> None:
    args = (*make(), *extra)
    expected = outcome(lambda: before_shortcut(args, kwargs))
    direct_calls.clear()
    with sdpa._FlashSDPAMode():
        got = outcome(lambda: F.scaled_dot_product_attention(*args, **kwargs))
    assert same(got, expected), (got, expected)
    assert direct_calls == {"ours": [True], "sdpa": [False]}.get(road, []), direct_calls
