# test_entry.py: the decisions of flashsdpa's F.scaled_dot_product_attention (entry.py), the function
# behind torch's SDPA names while active: the shortcut for calls PyTorch's flash path takes as they
# are, the road of every other call (our op for the calls PyTorch's flash path turns away, SDPA for
# the rest), the eager path (calls without autograd run on our kernel from the entry: when it
# serves, with what arguments, and each condition that keeps a call off it), and what it must not
# change: other torch calls, PyTorch's fast paths, SDPA's errors.
#
# CPU only: real CPU tensors pass for CUDA ones (Tensor.is_cuda patched to True) with a stand-in
# CUDA build (conftest.FakeCudaBuild), so that every decision runs as on a GPU; flashsdpa's op then
# runs its CPU implementation (the reference) and SDPA its CPU kernels, both deterministic.
from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor
from torch.autograd import forward_ad
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.nn.attention.bias import causal_lower_right
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

import flashsdpa
from flashsdpa import _backend, entry, masks, ops
from helpers import flashsdpa_entries

BF16 = torch.bfloat16


@pytest.fixture
def cuda_lookalike(monkeypatch: pytest.MonkeyPatch, fake_build: Any) -> None:
    """CPU tensors answer is_cuda=True, and the build looks like a CUDA one."""
    monkeypatch.setattr(Tensor, "is_cuda", property(lambda self: True))


@pytest.fixture
def direct_calls(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """For each call that reaches entry._direct_sdpa (the mode's full decision): whether it served it."""
    calls: list[bool] = []
    full = entry._direct_sdpa

    def recorded(*args: Any) -> Tensor | None:
        out = full(*args)
        calls.append(out is not None)
        return out

    monkeypatch.setattr(entry, "_direct_sdpa", recorded)
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
        bound = entry._sdpa_arguments(*args, **kwargs)
    except TypeError:
        bound = None
    out = None if bound is None else entry._direct_sdpa(*bound)
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
    with flashsdpa.enable():
        got = outcome(lambda: F.scaled_dot_product_attention(*args, **kwargs))
    assert same(got, expected), (got, expected)
    assert direct_calls == {"ours": [True], "sdpa": [False]}.get(road, []), direct_calls


# ---- the eager path: no-grad calls run on our kernel inside the mode ------------------------------


class Launches:
    """Stands in for _backend.launch_fwd: records each launch's arguments."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls: list[tuple[Any, ...]] = []
        monkeypatch.setattr(_backend, "launch_fwd", lambda *args: self.calls.append(args))


@pytest.fixture
def launches(monkeypatch: pytest.MonkeyPatch, cuda_lookalike: None) -> Launches:
    flashsdpa.reset_stats()
    return Launches(monkeypatch)


def plain(
    b: int = 2, hq: int = 4, hkv: int = 4, sq: int = 16, sk: int = 16, d: int = 64, dv: int = 64, layout: str = "bhsd"
) -> list[Tensor]:
    """q, k, v (B, H, S, D) in bf16, not requiring grad; "bshd" views (B, S, H, D) memory."""

    def make(h: int, s: int, dim: int) -> Tensor:
        if layout == "bshd":
            return torch.randn(b, s, h, dim, dtype=BF16).transpose(1, 2)
        return torch.randn(b, h, s, dim, dtype=BF16)

    return [make(hq, sq, d), make(hkv, sk, d), make(hkv, sk, dv)]


def served_eagerly() -> int:
    return flashsdpa.stats()["ops"].get(entry.EAGER_SDPA, {"served": 0})["served"]


# (label, (q, k, v) maker, keywords, expected causal mode, expected scale)
EAGER_CALLS: list[tuple[str, Callable[[], list[Tensor]], dict[str, Any], int, float]] = [
    ("plain", plain, {}, 0, 0.125),
    ("causal square", plain, {"is_causal": True}, 1, 0.125),
    ("causal, sq < sk", lambda: plain(sq=5, sk=9), {"is_causal": True}, 1, 0.125),
    ("causal, sq > sk", lambda: plain(sq=9, sk=5), {"is_causal": True}, 1, 0.125),
    ("gqa", lambda: plain(hq=8, hkv=2), {"enable_gqa": True}, 0, 0.125),
    ("scale", plain, {"scale": 0.3, "attn_mask": None, "dropout_p": 0.0}, 0, 0.3),
    ("bshd views", lambda: plain(layout="bshd"), {"is_causal": True}, 1, 0.125),
    ("value head dim differs", lambda: plain(dv=128, layout="bshd"), {}, 0, 0.125),
]


@pytest.mark.parametrize("label, make, kwargs, causal, scale", EAGER_CALLS, ids=[c[0] for c in EAGER_CALLS])
@pytest.mark.parametrize("grad", ["no_grad", "inference_mode", "no input requires grad"])
def test_eager_path_serves(
    label: str,
    make: Callable[[], list[Tensor]],
    kwargs: dict[str, Any],
    causal: int,
    scale: float,
    grad: str,
    launches: Launches,
) -> None:
    q, k, v = make()
    context = {"no_grad": torch.no_grad, "inference_mode": torch.inference_mode}.get(grad, torch.enable_grad)
    with flashsdpa.enable(), context():
        out = F.scaled_dot_product_attention(q, k, v, **kwargs)
    [(lq, lk, lv, lout, lse, lscale, lcausal)] = launches.calls
    assert (lq, lk, lv, lout) == (q, k, v, out) and (lcausal, lscale) == (masks.BY_CAUSAL_MODE[causal], pytest.approx(scale))
    assert lse is None  # nothing reads the LSE of an eager no-grad call: the kernel skips it
    # Laid out as SDPA's flash path and flashsdpa's op lay it: like the query.
    expected = ops._empty_out(q, v.shape[3])
    assert out.shape == expected.shape and out.stride() == expected.stride() and out.dtype == q.dtype
    assert not out.requires_grad
    stats = flashsdpa.stats()
    assert stats["ops"]["F.scaled_dot_product_attention (eager, no grad)"] == {"served": 1, "fallback": 0}
    assert stats["served"] == 1 and stats["fallback"] == 0


def test_eager_path_off_sends_no_grad_calls_through_sdpa(monkeypatch: pytest.MonkeyPatch, launches: Launches) -> None:
    """FLASHSDPA_EAGER=0 (entry._EAGER_OVERRIDE): a call the eager path would serve goes through
    PyTorch's SDPA instead (to the routers on a GPU), with SDPA's own answer."""
    monkeypatch.setattr(entry, "_EAGER_OVERRIDE", False)
    q, k, v = plain()
    with flashsdpa.enable(), torch.no_grad():
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert launches.calls == [] and served_eagerly() == 0
    torch.testing.assert_close(out, entry._TORCH_SDPA(q, k, v, is_causal=True), rtol=0, atol=0)


@pytest.mark.parametrize(
    "override,cxx_forward,expected",
    [(None, False, True), (None, True, False), (True, True, True), (False, False, False)],
)
def test_eager_path_only_where_the_python_router_would_serve(
    monkeypatch: pytest.MonkeyPatch, override: bool | None, cxx_forward: bool, expected: bool
) -> None:
    """Each activation decides: the eager path where SDPA's flash forward has the Python router
    (the cheaper road then), not where the C++ router serves it (through SDPA is cheaper);
    FLASHSDPA_EAGER forces either."""
    monkeypatch.setattr(entry, "_EAGER_OVERRIDE", override)
    patch = entry.patch_torch(cxx_forward)
    try:
        assert entry._EAGER_PATH is expected
    finally:
        assert entry.unpatch_torch(patch)


@pytest.mark.parametrize(
    "value,expected", [(None, None), ("", None), (" 1 ", True), ("on", True), ("0", False), ("Off", False), ("false", False)]
)
def test_eager_override_from_the_environment(value: str | None, expected: bool | None) -> None:
    assert entry._eager_override(value) is expected


@contextlib.contextmanager
def cuda_autocast() -> Iterator[None]:
    torch.set_autocast_enabled("cuda", True)  # torch.autocast("cuda") turns itself off without a GPU
    try:
        yield
    finally:
        torch.set_autocast_enabled("cuda", False)


class Subclass(Tensor):
    pass


class OtherFunctionMode(TorchFunctionMode):
    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        return func(*args, **(kwargs or {}))


class OtherDispatchMode(TorchDispatchMode):
    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        return func(*args, **(kwargs or {}))


@contextlib.contextmanager
def flash_not_first() -> Iterator[None]:
    saved = torch._C._get_sdp_priority_order()
    torch._C._set_sdp_priority_order([3, *(b for b in saved if b != 3)])  # cuDNN first, as a user may set it
    try:
        yield
    finally:
        torch._C._set_sdp_priority_order(saved)


def jagged_nested() -> list[Tensor]:
    return [
        torch.nested.nested_tensor([torch.randn(s, 4, 64, dtype=BF16) for s in (5, 9)], layout=torch.jagged).transpose(
            1, 2
        )
        for _ in range(3)
    ]


# (label, (q, k, v) maker, keywords, context, the start of the eager path's reason to decline, or
# None where the mode does not ask, having an attn_mask): each one thing that keeps a call off it.
NOT_EAGER: list[tuple[str, Callable[[], list[Tensor]], dict[str, Any], Callable[[], Any], str | None]] = [
    ("gradients needed", lambda: [t.requires_grad_() for t in plain()], {}, contextlib.nullcontext,
     "gradients needed"),
    ("one input requires grad", lambda: [plain()[0], plain()[1].requires_grad_(), plain()[2]], {},
     contextlib.nullcontext, "gradients needed"),
    ("cuda autocast", plain, {}, cuda_autocast, "CUDA autocast"),
    ("tensor subclass", lambda: [t.as_subclass(Subclass) for t in plain()], {}, contextlib.nullcontext,
     "not three plain tensors"),
    ("strided nested tensors", strided_nested, {}, contextlib.nullcontext, "not a dense CUDA tensor"),
    ("jagged nested tensors", jagged_nested, {}, contextlib.nullcontext, "not three plain tensors"),
    ("attn_mask", plain, {"attn_mask": torch.ones(16, 16, dtype=torch.bool)}, contextlib.nullcontext, None),
    ("dropout", plain, {"dropout_p": 0.5}, contextlib.nullcontext, "dropout"),
    ("flash excluded by sdpa_kernel", plain, {}, lambda: sdpa_kernel([SDPBackend.MATH]),
     "PyTorch's flash backend is disabled or not first"),
    ("flash not first in the priority order", plain, {}, flash_not_first,
     "PyTorch's flash backend is disabled or not first"),
    ("forward AD level", plain, {}, forward_ad.dual_level, "forward AD or a functorch transform"),
    ("a torch-function mode below ours", plain, {}, OtherFunctionMode, "another torch-function or dispatch mode"),
    ("a dispatch mode", plain, {}, OtherDispatchMode, "another torch-function or dispatch mode"),
    # float32: the entry's dtype lane hands it over before the eager path's test (None: never asked;
    # test_unserved_dtype_skips_our_roads below); a float16 call our kernels cannot read is asked.
    ("float32", lambda: [t.float() for t in plain()], {}, contextlib.nullcontext, None),
    ("head dim not a multiple of 8", lambda: plain(d=100, dv=100), {}, contextlib.nullcontext, "our kernels cannot"),
    ("rows not 16-byte aligned", lambda: [t[..., 1:-7] for t in plain(d=72, dv=72)], {}, contextlib.nullcontext,
     "our kernels cannot"),
    ("gqa without enable_gqa: SDPA's error", lambda: plain(hq=8, hkv=2), {}, contextlib.nullcontext,
     "query and key heads differ"),
]  # fmt: skip


@pytest.mark.parametrize("label, make, kwargs, context, reason", NOT_EAGER, ids=[c[0] for c in NOT_EAGER])
def test_eager_path_not_taken(
    label: str,
    make: Callable[[], list[Tensor]],
    kwargs: dict[str, Any],
    context: Callable[[], Any],
    reason: str | None,
    launches: Launches,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    q, k, v = make()
    reasons: list[str | None] = []
    decide = entry._eager_skip_reason

    def recorded(*args: Any) -> str | None:
        reasons.append(decide(*args))
        return reasons[-1]

    monkeypatch.setattr(entry, "_eager_skip_reason", recorded)
    with context():
        expected = outcome(lambda: F.scaled_dot_product_attention(q, k, v, **kwargs))
    condition = context()
    if isinstance(condition, TorchFunctionMode):  # entered first, it sits below ours
        with condition, flashsdpa.enable():
            got = outcome(lambda: F.scaled_dot_product_attention(q, k, v, **kwargs))
    else:  # entered inside enable(), which may reorder SDPA's priorities (on a GPU machine)
        with flashsdpa.enable(), condition:
            got = outcome(lambda: F.scaled_dot_product_attention(q, k, v, **kwargs))
    assert launches.calls == [] and served_eagerly() == 0
    assert same(got, expected), (got, expected)  # SDPA's own result (or error) on the normal road
    if reason is None:
        assert reasons == []
    else:
        # Under a torch-function mode, or with a subclass whose __torch_function__ is Tensor's, the
        # call passes twice: the mode or subclass sees F.scaled_dot_product_attention first
        # (handle_torch_function) and calls it again with itself off the stack (or disabled).
        calls = 2 if label in ("a torch-function mode below ours", "tensor subclass") else 1
        assert len(reasons) == calls and all(str(r).startswith(reason) for r in reasons), reasons


def test_eager_path_not_taken_under_vmap(launches: Launches) -> None:
    q, k, v = (t[None].expand(3, *t.shape).contiguous() for t in plain())
    with flashsdpa.enable(), torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "... not yet implemented the batching rule for aten::_scaled_dot_..."
        torch.vmap(F.scaled_dot_product_attention)(q, k, v)
    assert launches.calls == [] and served_eagerly() == 0


def test_eager_path_not_taken_while_compiling(launches: Launches) -> None:
    # aot_eager: the graph runs aten ops, as Inductor's do. (backend="eager" runs the traced Python
    # calls themselves, F.scaled_dot_product_attention included, under the mode: plain eager code.)
    def attend(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True) * 2

    q, k, v = plain()
    torch._dynamo.reset()
    try:
        with flashsdpa.enable(), torch.no_grad():
            out = torch.compile(attend, backend="aot_eager", fullgraph=True)(q, k, v)
    finally:
        torch._dynamo.reset()
    assert launches.calls == [] and served_eagerly() == 0
    torch.testing.assert_close(out, attend(q, k, v))


# ---- no tax on other calls, PyTorch's own paths unchanged (issue 9) --------------------------------


def test_model_step_runs_flashsdpa_python_only_for_attention() -> None:
    # An eager training step of a small float32 model (none of its attention is ours): the only
    # flashsdpa Python it runs is the SDPA entry, once per attention call. The TorchFunctionMode of
    # earlier versions ran for every torch call of the step.
    layer = torch.nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True)
    model = torch.nn.TransformerEncoder(layer, 3, enable_nested_tensor=False)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(2, 8, 32)

    def step() -> None:
        model(x, is_causal=True, mask=torch.nn.Transformer.generate_square_subsequent_mask(8)).square().mean().backward()
        opt.step()
        opt.zero_grad()

    with flashsdpa.enable():
        step()  # warm-up: lazy imports, optimizer state
        assert flashsdpa_entries(step) == {"scaled_dot_product_attention": 3}
    assert flashsdpa_entries(step) == {}


def test_transformer_encoder_nested_fast_path_unchanged() -> None:
    # In inference nn.TransformerEncoder turns a padded batch into a nested tensor and takes its
    # native fast path, which needs has_torch_function() to be false for its tensors: a
    # TorchFunctionMode made it true and the nested input then raised.
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True)
    model = torch.nn.TransformerEncoder(layer, 2, enable_nested_tensor=True).eval()
    x = torch.randn(3, 7, 32)
    padding = torch.zeros(3, 7, dtype=torch.bool)
    padding[0, 5:] = padding[2, 3:] = True
    with torch.no_grad():
        expected = model(x, src_key_padding_mask=padding)
        with flashsdpa.enable():
            assert not torch.overrides.has_torch_function((x,))
            got = model(x, src_key_padding_mask=padding)
            mha = model.layers[0].self_attn
            fast = mha(x, x, x, need_weights=False)[0]  # nn.MultiheadAttention's own fast path
        assert torch.equal(fast, mha(x, x, x, need_weights=False)[0])
    assert torch.equal(got, expected)


def dense_query_nested_kv() -> list[Any]:
    q = torch.randn(2, 4, 5, 64, dtype=BF16, requires_grad=True)
    return [q, *(t.requires_grad_() for t in strided_nested()[:2])]


# (label, q/k/v maker, positional extras, keywords): calls PyTorch's SDPA rejects (on some builds
# or devices); inside enable() each must raise exactly what PyTorch raises (type and message), or
# return what it returns.
ERRORS: list[tuple[str, Callable[[], list[Any]], tuple[Any, ...], dict[str, Any]]] = [
    ("query None", lambda: [None, *plain()[1:]], (), {}),
    ("key a list", lambda: [plain()[0], [1.0], plain()[2]], (), {}),
    ("one-dimensional query", lambda: [plain()[0][0, 0, 0], *plain()[1:]], (), {}),
    ("dtypes differ", lambda: [plain()[0], plain()[1].float(), plain()[2]], (), {}),
    ("batch differs", lambda: [plain(b=2)[0], *plain(b=3)[1:]], (), {}),
    ("head dims differ", lambda: [plain(d=64)[0], *plain(d=32, dv=32)[1:]], (), {}),
    ("attn_mask and is_causal", plain, (), {"attn_mask": torch.ones(16, 16, dtype=torch.bool), "is_causal": True}),
    ("mask of the wrong shape", plain, (), {"attn_mask": torch.ones(3, 5, dtype=torch.bool)}),
    ("heads differ without enable_gqa", lambda: plain(hq=8, hkv=2), (), {"is_causal": True}),
    ("heads not a multiple with enable_gqa", lambda: plain(hq=6, hkv=4), (), {"enable_gqa": True}),
    ("causal, sq != sk, heads differ without enable_gqa", lambda: plain(hq=8, hkv=2, sq=5, sk=9), (),
     {"is_causal": True}),
    ("scale a string", plain, (), {"scale": "0.1"}),
    ("is_causal a string", plain, (), {"is_causal": "yes"}),
    ("unknown keyword", plain, (), {"causal": True}),
    ("too many positional arguments", plain, (None, 0.0, False, None, False, 1), {}),
    ("dense query, nested key and value requiring grad", dense_query_nested_kv, (), {}),
    ("nested query, dense key and value", lambda: [strided_nested()[0], *plain()[1:]], (), {}),
]  # fmt: skip


@pytest.mark.parametrize("lookalike", [False, True], ids=["cpu", "cuda-lookalike"])
@pytest.mark.parametrize("label, make, extra, kwargs", ERRORS, ids=[c[0] for c in ERRORS])
def test_sdpa_errors_unchanged(
    label: str,
    make: Callable[[], list[Any]],
    extra: tuple[Any, ...],
    kwargs: dict[str, Any],
    lookalike: bool,
    request: pytest.FixtureRequest,
) -> None:
    if lookalike:  # our decisions then run as on a GPU with a CUDA build; SDPA still runs on the CPU
        request.getfixturevalue("launches")
    args = (*make(), *extra)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # nested tensors' prototype warning, on either side
        expected = outcome(lambda: F.scaled_dot_product_attention(*args, **kwargs))
        with flashsdpa.enable():
            got = outcome(lambda: F.scaled_dot_product_attention(*args, **kwargs))
    assert same(got, expected), (got, expected)


def test_refused_call_is_answered_again_without_pytorch(monkeypatch: pytest.MonkeyPatch) -> None:
    """A call every backend refuses (query and key head dims differ) raises PyTorch's error every
    time inside enable(), but reaches PyTorch's SDPA only once per call description: on Hopper
    the second such call went to cuDNN again and crashed the process (entry._REFUSED)."""
    q, k, v = torch.randn(1, 2, 5, 16), torch.randn(1, 2, 7, 8), torch.randn(1, 2, 7, 16)
    with pytest.raises(RuntimeError) as outside:
        F.scaled_dot_product_attention(q, k, v)
    reached = [0]
    real = entry._TORCH_SDPA

    def counting(*args: Any, **kwargs: Any) -> Any:
        reached[0] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(entry, "_TORCH_SDPA", counting)
    monkeypatch.setattr(entry, "_REFUSED", {})
    with flashsdpa.enable():
        for call in (lambda: F.scaled_dot_product_attention(q, k, v),
                     lambda: F.scaled_dot_product_attention(q, k, v, None, 0.0, False),
                     lambda: F.scaled_dot_product_attention(query=q, key=k, value=v)):  # fmt: skip
            with pytest.raises(RuntimeError) as inside:
                call()
            assert type(inside.value) is type(outside.value) and str(inside.value) == str(outside.value)
        assert reached[0] == 1
        # Another description (a different key length, a scale, causal) asks PyTorch again.
        for call in (lambda: F.scaled_dot_product_attention(q, k[:, :, :6], v[:, :, :6]),
                     lambda: F.scaled_dot_product_attention(q, k, v, scale=0.5),
                     lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True)):  # fmt: skip
            with pytest.raises(RuntimeError):
                call()
        assert reached[0] == 4
        # Another backend setting asks PyTorch again and gets its own error: flash alone refuses
        # with "No available kernel" where the math kernel's bmm raised a size error.
        with pytest.raises(RuntimeError) as flash_outside, sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            real(q, k, v)
        with pytest.raises(RuntimeError) as flash_inside, sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            F.scaled_dot_product_attention(q, k, v)
        assert str(flash_inside.value) == str(flash_outside.value) != str(outside.value)
        assert reached[0] == 5
        # Calls that run are never remembered.
        F.scaled_dot_product_attention(q, q, v)
        assert len(entry._REFUSED) == 5


# ---- the direct API's eager call: flashsdpa.attention without the dispatcher ---------------------


def test_direct_api_runs_the_cuda_code_directly_when_nothing_records(launches: Launches) -> None:
    # No gradient, no transform or mode: flashsdpa.attention calls the op's CUDA implementation
    # itself (the op's dispatch costs tens of microseconds a call). These CPU lookalikes would reach
    # the op's CPU implementation (the reference, no launch) through the dispatcher, so a launch
    # proves the direct call; the output and LSE have the op's shapes.
    q, k, v = plain(hq=8, hkv=2, sq=1, sk=40)
    out, lse = flashsdpa.attention(q, k, v, causal=True, causal_alignment="bottom_right", return_lse=True)
    assert len(launches.calls) == 1 and launches.calls[0][6] == masks.CAUSAL_BOTTOM_RIGHT
    assert out.shape == (2, 8, 1, 64) and lse.shape == (2, 8, 1) and lse.dtype == torch.float32
    assert flashsdpa.stats()["ops"]["flashsdpa::fwd"]["served"] == 1


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("alignment", ["top_left", "bottom_right"])
@pytest.mark.parametrize(
    "make", [lambda: plain(hq=8, hkv=2, sq=1, sk=40), lambda: plain(sq=9, sk=5, dv=128), lambda: plain(layout="bshd")],
    ids=["decode_gqa", "sq_gt_sk_dv128", "bshd"],
)
def test_direct_api_plain_call_launches_as_the_full_path(
    make: Callable[[], list[Tensor]], causal: bool, alignment: str, launches: Launches
) -> None:
    # The plain call (no window, modifier or LSE) skips attention()'s argument checks and the LSE
    # (ops._plain_eager): it must launch exactly what the full path (return_lse=True) launches,
    # bar the LSE, and return an output laid out the same.
    q, k, v = make()
    fast = flashsdpa.attention(q, k, v, causal=causal, causal_alignment=alignment, scale=0.2)
    full, lse = flashsdpa.attention(q, k, v, causal=causal, causal_alignment=alignment, scale=0.2, return_lse=True)
    (f_q, f_k, f_v, f_out, f_lse, *f_rest), (q2, k2, v2, out2, lse2, *rest) = launches.calls
    assert f_lse is None and lse2 is lse
    assert all(a is b for a, b in ((f_q, q2), (f_k, k2), (f_v, v2))) and f_rest == rest
    assert f_out is fast and out2 is full and fast.shape == full.shape and fast.stride() == full.stride()
    assert flashsdpa.stats()["ops"]["flashsdpa::fwd"]["served"] == 2


@pytest.mark.parametrize(
    "kwargs, error",
    [
        ({"causal": 1}, TypeError),
        ({"causal_alignment": "middle"}, ValueError),
        ({"scale": "0.1"}, TypeError),
        ({"enable_gqa": False}, ValueError),
    ],
    ids=["int_causal", "bad_alignment", "str_scale", "gqa_without_enable"],
)
def test_direct_api_plain_call_keeps_the_argument_errors(
    kwargs: dict[str, Any], error: type[Exception], launches: Launches
) -> None:
    # Arguments the fast path does not recognise take the full path and its errors; nothing launches.
    q, k, v = plain(hq=8, hkv=2)
    with pytest.raises(error):
        flashsdpa.attention(q, k, v, **kwargs)
    assert launches.calls == []


@pytest.mark.parametrize(
    "label, make, context",
    [
        ("requires grad", lambda: [t.requires_grad_() for t in plain()], contextlib.nullcontext),
        ("forward AD level", plain, forward_ad.dual_level),
        ("a dispatch mode", plain, OtherDispatchMode),
    ],
    ids=lambda x: x if isinstance(x, str) else "",
)
def test_direct_api_keeps_the_op_when_something_records(
    label: str, make: Callable[[], list[Tensor]], context: Callable[[], Any], launches: Launches
) -> None:
    # Autograd, forward AD and modes must see flashsdpa::fwd: the call goes through the dispatcher
    # (here to the op's CPU implementation, the reference: no launch).
    q, k, v = make()
    with context():
        out = flashsdpa.attention(q, k, v)
    assert launches.calls == [] and out.shape == q.shape


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("is_causal", [False, True])
def test_unserved_dtype_skips_our_roads(monkeypatch: pytest.MonkeyPatch, dtype: torch.dtype, is_causal: bool) -> None:
    """A float32 / float64 call without a mask goes straight to PyTorch's SDPA: neither the eager
    path's nor the direct route's tests run (none of them can serve it), the answer is PyTorch's
    bit for bit, with the gradient, and the call is counted as a fallback with its reason."""

    def never(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("an unserved dtype reached one of the entry's roads")

    monkeypatch.setattr(entry, "_eager_skip_reason", never)
    monkeypatch.setattr(entry, "_direct_sdpa", never)
    monkeypatch.setattr(entry, "_flash_path_shapes", never)
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 3, 5, 16, dtype=dtype, requires_grad=True) for _ in range(3))
    expected = entry._TORCH_SDPA(q, k, v, is_causal=is_causal)
    (dq_expected,) = torch.autograd.grad(expected.sum(), (q,))
    before = entry._SDPA_COUNTS[1]
    with flashsdpa.enable():
        out = F.scaled_dot_product_attention(q, k, v, is_causal=is_causal)
    assert entry._SDPA_COUNTS[1] == before + 1
    assert torch.equal(out, expected)
    (dq,) = torch.autograd.grad(out.sum(), (q,))
    assert torch.equal(dq, dq_expected)
    if dtype is torch.float32:
        assert entry._unserved_reason(q, k, v, None, 0.0, False, False).startswith("device cpu")
