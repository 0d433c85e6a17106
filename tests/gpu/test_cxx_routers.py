# test_cxx_routers.py: the C++ routers of SDPA's flash forward and backward (routers/routers.cpp) on a
# GPU. They stand at the CUDA key while flashsdpa is active, serve with and without grad (counters
# and profiler kernel names), give outputs in the ops' meta contract, leave unserved calls to
# PyTorch's kernel with PyTorch's errors and the Python routers' reasons, keep the SDPA entry's
# routed count, run under CUDA-graph capture and torch.compile(fullgraph=True), and are gone after
# disable(). tests/gpu/test_shim.py's whole suite runs through them too (they are the default).
from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F

from torch._subclasses.fake_tensor import FakeTensorMode

import flashsdpa
from flashsdpa import cxx_routers, routers, routers_masked
from helpers import fresh_compile, gpu_skip_reason, skip_unless_compiled

GPU_SKIP = gpu_skip_reason()
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(GPU_SKIP is not None, reason=f"GPU suite: {GPU_SKIP}")]

DEVICE = "cuda"
BF16 = torch.bfloat16
D = 128
FWD, BWD = f"aten::{routers._SDPA_FWD}", f"aten::{routers._SDPA_BWD}"
INNER_FWD = f"aten::{routers._FLASH_FWD}"


def outer_reasons() -> dict[str, int]:
    """The fallback reasons, less those of aten::_flash_attention_forward: PyTorch's kernel for the
    SDPA flash op calls that op through the dispatcher, where the Python router stands and reports
    the same call again under its own name."""
    return {k: n for k, n in flashsdpa.stats()["fallback_reasons"].items() if not k.startswith(f"{INNER_FWD}: ")}


@pytest.fixture(autouse=True)
def _cxx_routers_serve() -> None:
    # FLASHSDPA_ROUTERS=python is the one way to run this suite without them; anywhere else the
    # library is built with _C's kernels and must serve, so its absence fails rather than skips.
    reason = cxx_routers.unavailable_reason()
    if reason == f"{cxx_routers.ROUTERS_ENV}=python":
        pytest.skip(reason)
    assert reason is None, f"the C++ routers do not serve: {reason}"
    skip_unless_compiled(BF16, D)


def qkv(b: int = 2, h: int = 4, s: int = 256, grad: bool = False, layout: str = "bhsd") -> list[torch.Tensor]:
    shape = (b, s, h, D) if layout == "bshd" else (b, h, s, D)
    tensors = [torch.randn(shape, device=DEVICE, dtype=BF16) for _ in range(3)]
    if layout == "bshd":
        tensors = [t.transpose(1, 2) for t in tensors]
    return [t.detach().requires_grad_(grad) for t in tensors]


def cuda_kernel_line(op: str) -> str:
    [line] = [line for line in torch._C._dispatch_dump(op).splitlines() if line.startswith("CUDA:")]
    return line


def served(op: str) -> int:
    return flashsdpa.stats()["ops"].get(op, {"served": 0})["served"]


def kernel_names(step: Callable[[], Any]) -> set[str]:
    activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=activities) as prof:
        step()
        torch.cuda.synchronize()
    return {e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA}


def ours(names: set[str], direction: str) -> bool:
    """Whether a kernel of ours ran in ``direction`` ("fwd": the forward or, for up to 16 query rows,
    the decode kernel; "bwd")."""
    parts = ("fwd", "decode") if direction == "fwd" else (direction,)
    return any("flashsdpa" in n and any(p in n for p in parts) for n in names)


def test_cxx_routers_stand_at_the_cuda_key_while_active() -> None:
    with flashsdpa.enable():
        assert "routers.cpp" in cuda_kernel_line(FWD) and "routers.cpp" in cuda_kernel_line(BWD)
    assert "routers.cpp" not in cuda_kernel_line(FWD) and "routers.cpp" not in cuda_kernel_line(BWD)


@pytest.mark.parametrize("seqlen", [16, 256], ids=["decode-path", "forward-kernel"])
def test_training_call_served_forward_and_backward(seqlen: int) -> None:
    q, k, v = qkv(s=seqlen, grad=True)
    dout = torch.randn_like(q)
    expected_out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    expected = torch.autograd.grad(expected_out, (q, k, v), dout)
    flashsdpa.reset_stats()
    with flashsdpa.enable():
        saved: dict[str, Any] = {}

        def step() -> None:
            saved["out"] = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            saved["grads"] = torch.autograd.grad(saved["out"], (q, k, v), dout)

        names = kernel_names(step)
    assert ours(names, "fwd") and ours(names, "bwd"), sorted(names)
    assert served(FWD) == 1 and served(BWD) == 1, flashsdpa.stats()
    # The SDPA entry saw the C++ router's routed count move: no fallback of F.sdpa counted.
    assert flashsdpa.stats()["ops"].get("F.scaled_dot_product_attention", {"fallback": 0})["fallback"] == 0
    torch.testing.assert_close(saved["out"], expected_out, atol=2e-2, rtol=2e-2)
    for got, want in zip(saved["grads"], expected):
        torch.testing.assert_close(got, want, atol=5e-2, rtol=5e-2)


@pytest.mark.parametrize("layout", ["bhsd", "bshd"])
@pytest.mark.parametrize("is_causal", [False, True])
def test_forward_without_grad_in_the_meta_contract(layout: str, is_causal: bool) -> None:
    q, k, v = qkv(layout=layout)
    op = torch.ops.aten._scaled_dot_product_flash_attention.default
    theirs = op(q, k, v, 0.0, is_causal, scale=0.3)
    with FakeTensorMode() as mode:  # the op's meta function: the contract both implementations keep
        meta = op(*(mode.from_tensor(t) for t in (q, k, v)), 0.0, is_causal, scale=0.3)
    flashsdpa.reset_stats()
    with flashsdpa.enable():
        mine = op(q, k, v, 0.0, is_causal, scale=0.3)
    assert served(FWD) == 1
    assert len(mine) == len(meta) == 9
    for i in (0, 1, 6, 7, 8):  # out, lse, rng_state, unused, debug mask: shapes, strides, dtypes
        assert (mine[i].shape, mine[i].stride(), mine[i].dtype) == (meta[i].shape, meta[i].stride(), meta[i].dtype), i
    assert mine[2] is None and mine[3] is None and mine[4:6] == (256, 256)
    torch.testing.assert_close(mine[0], theirs[0], atol=2e-2, rtol=2e-2)
    torch.testing.assert_close(mine[1], theirs[1], atol=1e-3, rtol=1e-3)


def test_backward_copies_a_strided_grad_out() -> None:
    q, k, v = qkv(grad=True)
    flashsdpa.reset_stats()
    with flashsdpa.enable():
        out = F.scaled_dot_product_attention(q, k, v)
        grads = torch.autograd.grad(out.sum(), (q, k, v))  # grad_out has stride 0 everywhere
    assert served(BWD) == 1
    expected = torch.autograd.grad(F.scaled_dot_product_attention(q, k, v).sum(), (q, k, v))
    for got, want in zip(grads, expected):
        torch.testing.assert_close(got, want, atol=5e-2, rtol=5e-2)


def outcome(call: Callable[[], Any]) -> Any:
    """(exception type, message) or the result's first tensor on the CPU, and PyTorch's warnings."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            result: Any = call()[0].detach().cpu()
        except Exception as exc:  # noqa: BLE001 - the error itself is the outcome compared
            result = (type(exc), str(exc))
    return result, sorted({(w.category.__name__, str(w.message)) for w in caught
                           if not issubclass(w.category, flashsdpa.FallbackWarning)})  # fmt: skip


def test_unserved_forward_raises_pytorchs_error() -> None:
    q, k, v = (t.float() for t in qkv())
    op = torch.ops.aten._scaled_dot_product_flash_attention.default
    expected = outcome(lambda: op(q, k, v))
    assert isinstance(expected[0], tuple), expected  # PyTorch's flash kernel takes no float32
    flashsdpa.reset_stats()
    with flashsdpa.enable():
        got = outcome(lambda: op(q, k, v))
    assert got == expected
    assert outer_reasons() == {f"{FWD}: query.dtype=torch.float32: needs float16 or bfloat16": 1}


@pytest.mark.parametrize("kwargs, reason", [
    ({"dropout_p": 1.0}, "dropout_p=1.0: needs a float in (0, 1)"),  # (0.1 is ours: test_dropout_gpu.py)
    ({"return_debug_mask": True}, "return_debug_mask=True: the debug attention mask is not supported"),
])  # fmt: skip
def test_unserved_forward_runs_pytorchs_kernel_with_the_python_reason(kwargs: dict[str, Any], reason: str) -> None:
    q, k, v = qkv(s=64)
    op = torch.ops.aten._scaled_dot_product_flash_attention.default
    # PyTorch's own answer (a dropout output, or its error: return_debug_mask needs dropout there).
    expected = outcome(lambda: op(q, k, v, **kwargs))
    flashsdpa.reset_stats()
    with flashsdpa.enable():
        got = outcome(lambda: op(q, k, v, **kwargs))
    if isinstance(expected[0], tuple):
        assert got == expected
    else:  # dropout draws differ from call to call: compare what is deterministic
        assert not isinstance(got[0], tuple) and got[0].shape == expected[0].shape and got[1] == expected[1]
    assert flashsdpa.stats()["ops"][FWD] == {"served": 0, "fallback": 1}
    assert outer_reasons() == {f"{FWD}: {reason}": 1}


def test_deterministic_backward_served_or_left_to_pytorch() -> None:
    q, k, v = qkv(grad=True)
    dout = torch.randn_like(q)

    def grads() -> tuple[torch.Tensor, ...]:
        return torch.autograd.grad(F.scaled_dot_product_attention(q, k, v, is_causal=True), (q, k, v), dout)

    flashsdpa.reset_stats()
    with flashsdpa.enable(), torch_deterministic():
        first = outcome(grads)
        second = outcome(grads)
    stats = flashsdpa.stats()
    if stats["ops"][BWD]["served"]:  # a family of ours with a deterministic backward (sm90): bitwise equal
        assert isinstance(first[0], torch.Tensor) and torch.equal(first[0], second[0])
    else:  # PyTorch's kernel, which raises as it does without flashsdpa
        with torch_deterministic():
            assert first == outcome(grads)
        assert all("use_deterministic_algorithms" in r for r in stats["fallback_reasons"]), stats


class torch_deterministic:  # noqa: N801 - used like torch's own context managers
    def __enter__(self) -> None:
        self.saved = torch.are_deterministic_algorithms_enabled()
        torch.use_deterministic_algorithms(True)

    def __exit__(self, *exc: object) -> None:
        torch.use_deterministic_algorithms(self.saved)


def test_cuda_graph_capture_replays_our_kernels() -> None:
    q, k, v = qkv(grad=True)
    dout = torch.randn_like(q)
    with flashsdpa.enable():
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):  # warm-up off the default stream, as graph capture wants
            for _ in range(2):
                torch.autograd.grad(F.scaled_dot_product_attention(q, k, v), (q, k, v), dout)
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        flashsdpa.reset_stats()
        with torch.cuda.graph(graph):
            captured = torch.autograd.grad(F.scaled_dot_product_attention(q, k, v), (q, k, v), dout)
        assert served(FWD) == 1 and served(BWD) == 1
        names = kernel_names(graph.replay)
        expected = torch.autograd.grad(F.scaled_dot_product_attention(q, k, v), (q, k, v), dout)
    assert ours(names, "fwd") and ours(names, "bwd"), sorted(names)
    for got, want in zip(captured, expected):
        torch.testing.assert_close(got, want, atol=1e-2, rtol=1e-2)  # the same kernels (dQ adds in any order)


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_compile_fullgraph_runs_our_kernels(backend: str) -> None:
    q, k, v = qkv(grad=True)

    def fn(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True).float().sum()

    with fresh_compile(), flashsdpa.enable():
        compiled = torch.compile(fn, backend=backend, fullgraph=True)
        compiled(q, k, v).backward()  # compile
        flashsdpa.reset_stats()
        names = kernel_names(lambda: compiled(q, k, v).backward())
    assert served(FWD) == 1 and served(BWD) == 1, flashsdpa.stats()
    assert ours(names, "fwd") and ours(names, "bwd"), sorted(names)


def test_disable_leaves_pytorchs_kernels_untaxed() -> None:
    q, k, v = qkv(grad=True)
    with flashsdpa.enable():
        F.scaled_dot_product_attention(q, k, v).sum().backward()
    flashsdpa.reset_stats()
    routed = routers.ROUTED[0]

    def step() -> None:
        from torch.nn.attention import SDPBackend, sdpa_kernel

        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            F.scaled_dot_product_attention(q, k, v).sum().backward()

    names = kernel_names(step)
    assert not ours(names, "fwd") and not ours(names, "bwd"), sorted(names)
    assert routers.ROUTED[0] == routed and served(FWD) == served(BWD) == 0


# ---- the efficient-attention ops: PyTorch's kernel without Python for the calls only it takes -----
# routers.cpp's eff_forward / eff_backward run a call with no attn_bias or a float32 / float64 query
# on PyTorch's CUDA kernel through AOTInductor's C shim (no Python: issue 9's unserved-call cost),
# and hand every other call to routers_masked.py's router. These tests hold them to PyTorch's own
# results, errors and warnings, the Python routers' reasons, and to no Python on that road.
EFF_FWD = f"aten::{routers_masked._EFF_FWD}"
EFF_BWD = f"aten::{routers_masked._EFF_BWD}"


@pytest.fixture
def python_road(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The calls that reached routers_masked.py's efficient-attention routers (which still run)."""
    seen: list[str] = []
    for name in ("_eff_forward", "_eff_backward"):
        real = getattr(routers_masked, name)

        def spy(*args: Any, _real: Callable[..., Any] = real, _name: str = name, **kwargs: Any) -> Any:
            seen.append(_name)
            return _real(*args, **kwargs)

        monkeypatch.setattr(routers_masked, name, spy)
    return seen


def _masked_cxx() -> None:
    reason = cxx_routers.masked_unavailable_reason()
    assert reason is None, f"the C++ routers do not take the efficient-attention ops: {reason}"


def train_step(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, dout: torch.Tensor,
               **kwargs: Any) -> list[torch.Tensor]:  # fmt: skip
    """Output and the three gradients of one SDPA call (fresh leaves each time)."""
    leaves = [t.detach().clone().requires_grad_(True) for t in (q, k, v)]
    out = F.scaled_dot_product_attention(*leaves, **kwargs)
    out.backward(dout)
    return [out.detach(), *(t.grad for t in leaves)]


def float32_case(mask: bool) -> tuple[list[torch.Tensor], dict[str, Any]]:
    torch.manual_seed(7)
    q, k, v = (torch.randn(2, 4, 65, 64, device=DEVICE) for _ in range(3))
    dout = torch.randn(2, 4, 65, 64, device=DEVICE)
    kwargs: dict[str, Any] = {"is_causal": not mask}
    if mask:  # a boolean key-padding mask: the entry hands it to SDPA as 0 / -inf
        keep = torch.ones(2, 1, 65, 65, dtype=torch.bool, device=DEVICE)
        keep[1, :, :, 50:] = False
        kwargs["attn_mask"] = keep
    return [q, k, v, dout], kwargs


@pytest.mark.parametrize("mask", [False, True], ids=["causal", "masked"])
def test_float32_training_call_runs_pytorchs_kernel_without_python(mask: bool, python_road: list[str]) -> None:
    _masked_cxx()
    (q, k, v, dout), kwargs = float32_case(mask)
    expected, again = train_step(q, k, v, dout, **kwargs), train_step(q, k, v, dout, **kwargs)
    flashsdpa.reset_stats()
    with flashsdpa.enable():
        assert "routers.cpp" in cuda_kernel_line(EFF_FWD) and "routers.cpp" in cuda_kernel_line(EFF_BWD)
        got = train_step(q, k, v, dout, **kwargs)
    assert python_road == []
    for name, g, e, a in zip(("out", "dq", "dk", "dv"), got, expected, again):
        # PyTorch's kernel on both sides: bitwise where it is reproducible itself, else within its own
        # run-to-run spread.
        spread = (a - e).abs().max().item()
        assert (g - e).abs().max().item() <= 2 * spread, (name, (g - e).abs().max().item(), spread)
    stats = flashsdpa.stats()
    assert stats["ops"][EFF_FWD] == {"served": 0, "fallback": 1}
    assert stats["ops"][EFF_BWD] == {"served": 0, "fallback": 1}
    reason = routers_masked.NATIVE_REASONS[0]
    assert {k: n for k, n in stats["fallback_reasons"].items() if k.startswith((EFF_FWD, EFF_BWD))} == {
        f"{EFF_FWD}: {reason}": 1, f"{EFF_BWD}: {reason}": 1}  # fmt: skip
    assert "routers.cpp" not in cuda_kernel_line(EFF_FWD)


def test_fallback_warnings_send_float32_calls_down_the_python_road(python_road: list[str]) -> None:
    _masked_cxx()
    (q, k, v, dout), kwargs = float32_case(False)
    expected = train_step(q, k, v, dout, **kwargs)
    flashsdpa.reset_stats()
    flashsdpa.set_fallback_warnings(True)
    try:
        with flashsdpa.enable(), warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            got = train_step(q, k, v, dout, **kwargs)
    finally:
        flashsdpa.set_fallback_warnings(False)
    assert python_road == ["_eff_forward", "_eff_backward"]
    reason = routers_masked.NATIVE_REASONS[0]
    assert any(issubclass(w.category, flashsdpa.FallbackWarning) and reason in str(w.message) for w in caught)
    assert torch.equal(got[0], expected[0])
    # The same reasons, counted once each, as on the native road.
    assert {k: n for k, n in flashsdpa.stats()["fallback_reasons"].items() if k.startswith((EFF_FWD, EFF_BWD))} == {
        f"{EFF_FWD}: {reason}": 1, f"{EFF_BWD}: {reason}": 1}  # fmt: skip


def test_unmasked_half_call_on_the_efficient_op_runs_natively(python_road: list[str]) -> None:
    """sdpa_kernel(EFFICIENT_ATTENTION) on an unmasked bf16 call: the user's choice stands (PyTorch's kernel)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    _masked_cxx()
    q, k, v = qkv(s=64)
    with sdpa_kernel(SDPBackend.EFFICIENT_ATTENTION):
        expected = F.scaled_dot_product_attention(q, k, v)
        flashsdpa.reset_stats()
        with flashsdpa.enable():
            got = F.scaled_dot_product_attention(q, k, v)
    assert python_road == [] and torch.equal(got, expected)
    assert flashsdpa.stats()["fallback_reasons"].get(f"{EFF_FWD}: {routers_masked.NO_BIAS_REASON}") == 1


def test_masked_half_call_on_the_efficient_op_is_served_through_the_python_road(python_road: list[str]) -> None:
    from torch.nn.attention import SDPBackend, sdpa_kernel

    _masked_cxx()
    q, k, v = qkv(s=64)
    bias = torch.randn(2, 4, 64, 64, device=DEVICE, dtype=BF16)
    op = torch.ops.aten._scaled_dot_product_efficient_attention.default
    reference = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), attn_mask=bias.double())
    flashsdpa.reset_stats()
    with sdpa_kernel(SDPBackend.EFFICIENT_ATTENTION), flashsdpa.enable():
        out = op(q, k, v, bias, True)[0]
    assert python_road == ["_eff_forward"]
    assert flashsdpa.stats()["ops"][EFF_FWD]["served"] == 1
    torch_err = (op(q, k, v, bias, True)[0].double() - reference).abs().max().item()
    assert (out.double() - reference).abs().max().item() <= 2 * torch_err + 1e-5


def test_native_road_raises_pytorchs_error() -> None:
    _masked_cxx()
    q = torch.randn(1, 2, 16, 64, device=DEVICE)
    k = v = torch.randn(1, 2, 16, 32, device=DEVICE)  # head dims differ: PyTorch's kernel refuses
    op = torch.ops.aten._scaled_dot_product_efficient_attention.default
    expected = outcome(lambda: op(q, k, v, None, True))
    assert isinstance(expected[0], tuple), expected
    with flashsdpa.enable():
        got = outcome(lambda: op(q, k, v, None, True))
    assert got == expected


@pytest.mark.parametrize("warn_only", [True, False])
def test_native_backward_keeps_pytorchs_deterministic_alert(warn_only: bool) -> None:
    """Under torch.use_deterministic_algorithms, PyTorch's efficient backward warns or raises: so
    does the same call inside enable()."""
    _masked_cxx()
    (q, k, v, dout), kwargs = float32_case(False)

    def step() -> Any:
        return train_step(q, k, v, dout, **kwargs)[1:]

    was = torch.are_deterministic_algorithms_enabled()
    was_warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    torch.use_deterministic_algorithms(True, warn_only=warn_only)
    try:
        # Twice outside: the warn-only alert is PyTorch's TORCH_WARN_ONCE (session 21 saw it on the first
        # call of the process only), so the call inside enable() is compared with a repeat call.
        outcome(step)
        expected = outcome(step)
        with flashsdpa.enable():
            got = outcome(step)
    finally:
        torch.use_deterministic_algorithms(was, warn_only=was_warn_only)
    if isinstance(expected[0], tuple):
        assert got == expected
    else:
        assert got[1] == expected[1] and torch.equal(got[0], expected[0])
