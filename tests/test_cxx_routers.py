# test_cxx_routers.py: the C++ routers (routers/routers.cpp, python/flashsdpa/cxx_routers.py) on the
# CPU: the library builds where nvcc does and loads against this torch, checks _C's RouterTable
# version, registers at the CUDA key and deregisters leaving PyTorch's kernels in place; the fallback
# ops' schemas are the aten ops' plus `reason`; the fallback reports the Python routers' reason and
# hands PyTorch's errors to the C++ router; without the library the Python routers take every op.
# What the routers do with real calls is tests/gpu/test_cxx_routers.py's.
from __future__ import annotations

import ctypes
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

import flashsdpa
from flashsdpa import _backend, activation, cxx_routers, routers
from flashsdpa.info import collect_info

F16 = torch.float16
HOT_OPS = (routers._SDPA_FWD, routers._SDPA_BWD)
NVCC_BUILD = shutil.which("nvcc") is not None and _backend.CUDA_KERNELS
needs_library = pytest.mark.skipif(not cxx_routers.LIBRARY.exists(), reason="libflashsdpa_routers was not built")


def cuda_kernels(op: str) -> list[str]:
    """The CUDA line of the dispatcher's table for aten::<op> (empty when no kernel is there)."""
    return [line for line in torch._C._dispatch_dump(f"aten::{op}").splitlines() if line.startswith("CUDA:")]


@pytest.fixture
def library() -> Iterator[Any]:
    """The real library, initialized with _C's table (registration works on a CPU-only torch: no
    CUDA kernel of aten ever runs to reach it); deregistered afterwards whatever the test did."""
    if not cxx_routers.LIBRARY.exists():
        pytest.skip("libflashsdpa_routers was not built")
    lib, reason = cxx_routers.load()
    assert reason is None, reason
    yield lib
    lib.flashsdpa_routers_unregister()


# ---- the fallback ops' schemas ----------------------------------------------------------------------


@pytest.mark.parametrize("op", HOT_OPS)
def test_fallback_schema_is_the_aten_schema_plus_reason(op: str) -> None:
    aten = getattr(torch.ops.aten, op).default._schema
    ours = torch._C.parse_schema(f"flashsdpa::{cxx_routers.fallback_schema(op)}")

    def described(args: Any) -> list[tuple[str, str, Any, bool]]:
        return [(a.name, str(a.type), a.default_value, a.kwarg_only) for a in args]

    assert described(ours.arguments) == [*described(aten.arguments), ("reason", "str", None, True)]
    order = cxx_routers.RETURN_ORDER.get(op, range(len(aten.returns)))
    assert [(r.name, str(r.type)) for r in ours.returns] == [(aten.returns[i].name, str(aten.returns[i].type))
                                                              for i in order]  # fmt: skip
    types = [str(r.type) for r in ours.returns]
    assert types == types[::-1]  # what torch_call_dispatcher's return conversion needs


# ---- building, loading, the table version -----------------------------------------------------------


@pytest.mark.skipif(not NVCC_BUILD, reason="a CUDA build of _C: the library is built beside it")
def test_library_built_and_loads_against_this_torch() -> None:
    assert cxx_routers.LIBRARY.exists(), "CMake builds libflashsdpa_routers wherever it builds _C's kernels"
    lib, reason = cxx_routers.load()
    assert reason is None and lib.flashsdpa_routers_table_version() == _backend._C.ROUTER_TABLE_VERSION
    # A CPU-only torch has no libtorch_cuda: the routers may register (below) but never serve.
    assert lib.flashsdpa_routers_has_cuda() == int(torch.version.cuda is not None)


@needs_library
@pytest.mark.parametrize("version, size", [(999, None), (None, 8)], ids=["version", "size"])
def test_library_refuses_a_table_of_another_version(version: int | None, size: int | None) -> None:
    real = (ctypes.c_uint32 * 2).from_address(_backend._C.router_table())
    table = (ctypes.c_uint32 * 2)(real[0] if version is None else version, real[1] if size is None else size)
    _, reason = cxx_routers.load(table=ctypes.addressof(table))
    assert reason is not None and f"RouterTable is version {table[0]} ({table[1]} bytes)" in reason, reason


@needs_library
def test_library_refuses_a_c_module_of_another_version(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_backend._C, "ROUTER_TABLE_VERSION", 999, raising=False)
    _, reason = cxx_routers.load()
    assert reason is not None and "flashsdpa._C has 999: rebuild both together" in reason


# ---- registration -----------------------------------------------------------------------------------


@needs_library
def test_register_and_unregister_leave_pytorchs_kernels(library: Any) -> None:
    before = {op: cuda_kernels(op) for op in HOT_OPS}
    assert library.flashsdpa_routers_register(3, b"CUDA") is None
    for op in HOT_OPS:
        [line] = cuda_kernels(op)
        assert "routers.cpp" in line, line
    assert library.flashsdpa_routers_register(3, b"CUDA") == b"already registered"
    library.flashsdpa_routers_unregister()
    assert {op: cuda_kernels(op) for op in HOT_OPS} == before


@needs_library
def test_register_takes_only_the_ops_asked(library: Any) -> None:
    assert library.flashsdpa_routers_register(1, b"CUDA") is None
    assert any("routers.cpp" in line for line in cuda_kernels(routers._SDPA_FWD))
    assert not any("routers.cpp" in line for line in cuda_kernels(routers._SDPA_BWD))


@needs_library
def test_enable_registers_cxx_routers_and_disable_removes_them(
    monkeypatch: pytest.MonkeyPatch, library: Any, fake_build: Any
) -> None:
    # What activation does on a GPU, with the C++ routers' registration forced (this torch has no CUDA).
    def register() -> frozenset[str]:
        assert library.flashsdpa_routers_register(3, b"CUDA") is None
        return frozenset(HOT_OPS)

    monkeypatch.setattr(activation, "_kernels_usable", lambda: True)
    monkeypatch.setattr(activation, "_prefer_flash", lambda: None)
    monkeypatch.setattr(cxx_routers, "register", register)
    monkeypatch.setattr(cxx_routers, "_LIB", library)
    before = {op: cuda_kernels(op) for op in HOT_OPS}
    with flashsdpa.enable():
        for op in HOT_OPS:  # the C++ routers, not the Python ones, stand there
            assert [line for line in cuda_kernels(op) if "routers.cpp" in line], cuda_kernels(op)
        others = [route.op for route in routers._ROUTES if route.op not in HOT_OPS and hasattr(torch.ops.aten, route.op)]
        for op in others:
            assert [line for line in cuda_kernels(op) if "routers.py" in line], cuda_kernels(op)
    assert {op: cuda_kernels(op) for op in HOT_OPS} == before


# ---- the Python routers where the C++ ones cannot serve -----------------------------------------------


def test_absent_library_is_reported(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    lib, reason = cxx_routers.load(tmp_path / "libflashsdpa_routers.so")
    assert lib is None and reason == (
        "libflashsdpa_routers.so was not built (it needs nvcc and torch's stable-ABI headers at build time)"
    )


def test_python_routers_take_every_op_without_the_cxx_ones(monkeypatch: pytest.MonkeyPatch, fake_build: Any) -> None:
    monkeypatch.setattr(cxx_routers, "_REASON", ["libflashsdpa_routers.so was not built"])
    monkeypatch.setattr(activation, "_kernels_usable", lambda: True)
    monkeypatch.setattr(activation, "_prefer_flash", lambda: None)
    with flashsdpa.enable():
        for route in routers._ROUTES:
            if hasattr(torch.ops.aten, route.op):
                assert [line for line in cuda_kernels(route.op) if "routers.py" in line], route.op
    assert collect_info()["routers"] == {"sdpa_flash": "python", "python_because": "libflashsdpa_routers.so was not built",
                                         "sdpa_efficient": "python",
                                         "efficient_python_because": "libflashsdpa_routers.so was not built"}  # fmt: skip


def test_env_keeps_the_python_routers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cxx_routers, "_REASON", [])
    monkeypatch.setenv(cxx_routers.ROUTERS_ENV, "python")
    assert cxx_routers.unavailable_reason() == "FLASHSDPA_ROUTERS=python"
    assert cxx_routers.register() == frozenset()


# ---- the fallback ops' Python side ----------------------------------------------------------------------


class Native:
    """Stands in for PyTorch's captured kernel: returns, or raises PyTorch's error."""

    def __init__(self, error: Exception | None = None, result: Any = "native result") -> None:
        self.error = error
        self.result = result
        self.calls: list[tuple[Any, tuple[Any, ...], dict[str, Any]]] = []

    def call_boxed(self, keyset: Any, *args: Any, **kwargs: Any) -> Any:
        self.calls.append((keyset, args, kwargs))
        if self.error is not None:
            raise self.error
        return self.result


class FailRecorder:
    def __init__(self) -> None:
        self.messages: list[bytes] = []

    def flashsdpa_routers_fail(self, message: bytes) -> None:
        self.messages.append(message)


def test_forward_fallback_reports_the_python_reason(monkeypatch: pytest.MonkeyPatch, fake_build: Any) -> None:
    native = Native(result=tuple(f"output {i}" for i in range(9)))
    monkeypatch.setitem(routers._NATIVE, routers._SDPA_FWD, native)
    q = torch.empty(1, 2, 8, 64, dtype=torch.float32)  # not half: selection's dtype sentence
    flashsdpa.reset_stats()
    got = cxx_routers._sdpa_forward_fallback("keys", q, q, q, 0.0, True, scale=0.5, reason="dtype: no compiled kernel")
    assert got == tuple(f"output {i}" for i in (0, 1, 2, 4, 3, 5, 6, 7, 8))  # in RETURN_ORDER
    assert native.calls == [("keys", (q, q, q, 0.0, True, False), {"scale": 0.5})]
    stats = flashsdpa.stats()
    assert stats["ops"][f"aten::{routers._SDPA_FWD}"] == {"served": 0, "fallback": 1}
    [key] = stats["fallback_reasons"]
    assert key == f"aten::{routers._SDPA_FWD}: query.dtype=torch.float32: needs float16 or bfloat16"


def test_backward_fallback_keeps_the_cxx_reason_where_python_has_none(
    monkeypatch: pytest.MonkeyPatch, fake_build: Any
) -> None:
    native = Native()
    monkeypatch.setitem(routers._NATIVE, routers._SDPA_BWD, native)
    monkeypatch.setattr(routers, "sdpa_backward_reason", lambda args: None)
    flashsdpa.reset_stats()
    args = (*range(10), 0.0, *range(11, 14))  # dropout_p 0: dropout calls go to the Python router
    assert cxx_routers._sdpa_backward_fallback("keys", *args, reason="some C++ refusal") == "native result"
    assert flashsdpa.stats()["fallback_reasons"] == {f"aten::{routers._SDPA_BWD}: some C++ refusal": 1}


def test_fallback_hands_pytorchs_error_to_the_cxx_router(monkeypatch: pytest.MonkeyPatch, fake_build: Any) -> None:
    monkeypatch.setitem(routers._NATIVE, routers._SDPA_FWD, Native(RuntimeError("FlashAttention only supports ...")))
    fails = FailRecorder()
    monkeypatch.setattr(cxx_routers, "_LIB", fails)
    q = torch.empty(1, 2, 8, 64, dtype=F16)
    got = cxx_routers._sdpa_forward_fallback(None, q, q, q, 0.1, reason="dropout_p != 0")
    assert got == cxx_routers._FORWARD_PLACEHOLDER and len(got) == 9
    assert fails.messages == [b"FlashAttention only supports ..."]


# ---- the whole fallback road, driven with CPU tensors ------------------------------------------------
# The C++ routers registered at the CPU key of the two ops and the fallback ops given a CPU
# implementation: a CPU call then takes the road an unserved CUDA call takes (the C++ predicate, the
# stable dispatcher shim, the Python fallback op, the captured kernel, the outputs back through C++),
# with the routed and fallback counts and the kernel's errors. The ops have no CPU kernel, so the
# captured one is a stand-in built on PyTorch's CPU flash kernels, in the ops' contract.


class CpuFlash:
    """Stands in for PyTorch's captured kernel (a SafeKernelFunction) of one op."""

    def __init__(self, fn: Any) -> None:
        self.fn = fn

    def call_boxed(self, keyset: Any, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)


def cpu_forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, dropout_p: float = 0.0, is_causal: bool = False,
                return_debug_mask: bool = False, *, scale: float | None = None) -> tuple[Any, ...]:  # fmt: skip
    out, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, dropout_p, is_causal, scale=scale)
    uint64 = torch.uint64
    spares = (torch.empty(2, dtype=uint64), torch.empty((), dtype=uint64), torch.empty(0, dtype=q.dtype))
    return (out, lse, None, None, q.shape[2], k.shape[2], *spares)


def cpu_backward(grad_out: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor,
                 lse: torch.Tensor, *rest: Any, scale: float | None = None) -> tuple[torch.Tensor, ...]:  # fmt: skip
    dropout_p, is_causal = rest[4], rest[5]
    return tuple(torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward(
        grad_out, q, k, v, out, lse, dropout_p, is_causal, scale=scale))  # fmt: skip


@pytest.fixture
def cpu_road(library: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    cxx_routers._define_fallbacks()
    impls = torch.library.Library("flashsdpa", "IMPL")
    for op, fallback in cxx_routers._FALLBACKS.items():
        impls.impl(cxx_routers.fallback_name(op), fallback, "CPU", with_keyset=True)
    monkeypatch.setitem(routers._NATIVE, routers._SDPA_FWD, CpuFlash(cpu_forward))
    monkeypatch.setitem(routers._NATIVE, routers._SDPA_BWD, CpuFlash(cpu_backward))
    monkeypatch.setattr(cxx_routers, "_LIB", library)
    assert library.flashsdpa_routers_register(3, b"CPU") is None
    try:
        yield
    finally:
        library.flashsdpa_routers_unregister()
        impls._destroy()


def test_fallback_road_gives_the_kernels_results_and_counts(cpu_road: None) -> None:
    q, k, v = (torch.randn(2, 3, 16, 32, requires_grad=True) for _ in range(3))
    flashsdpa.reset_stats()
    routed = routers.ROUTED[0]
    out = torch.ops.aten._scaled_dot_product_flash_attention(q, k, v, 0.0, True, scale=0.3)
    grads = torch.autograd.grad(out[0], (q, k, v), torch.ones_like(out[0]))
    assert routers.ROUTED[0] == routed + 1  # bumped by the C++ forward router, read by the SDPA entry
    stats = flashsdpa.stats()
    fwd, bwd = (f"aten::{op}" for op in HOT_OPS)
    assert stats["ops"][fwd] == stats["ops"][bwd] == {"served": 0, "fallback": 1}
    (fwd_reason, fwd_count), (bwd_reason, bwd_count) = sorted(stats["fallback_reasons"].items())
    assert fwd_count == bwd_count == 1
    assert fwd_reason.startswith(f"{fwd}: ") and bwd_reason.startswith(f"{bwd}: ")
    assert "float32" in fwd_reason, fwd_reason  # the Python routers' sentence, not the C++ few words
    with torch.no_grad():
        expected = cpu_forward(q, k, v, 0.0, True, scale=0.3)
    assert out[2] is None and out[3] is None and tuple(out[4:6]) == (16, 16)
    assert torch.equal(out[0], expected[0]) and torch.equal(out[1], expected[1])
    seed, offset = out[6], out[7]
    expected_grads = cpu_backward(torch.ones_like(out[0]), q, k, v, expected[0], expected[1], None, None, 16, 16,
                                  0.0, True, seed, offset, scale=0.3)  # fmt: skip
    for got, want in zip(grads, expected_grads):
        assert torch.equal(got, want)


def test_fallback_road_raises_the_kernels_error(cpu_road: None) -> None:
    q, k = torch.randn(2, 3, 16, 32), torch.randn(2, 3, 16, 24)  # head dims differ: the CPU kernel refuses

    def error(call: Any) -> tuple[type, str]:
        with pytest.raises(Exception) as info:
            call()
        return type(info.value), str(info.value)

    expected = error(lambda: cpu_forward(q, k, k))
    assert error(lambda: torch.ops.aten._scaled_dot_product_flash_attention(q, k, k)) == expected


# ---- the efficient-attention ops (routers.cpp's eff_forward / eff_backward) --------------------------


def test_native_reasons_agree_with_the_python_router() -> None:
    """routers.cpp finds the first two of routers_masked.eff_forward_reason's reasons itself (query
    dtype, then no attn_bias) and reports them by index into NATIVE_REASONS: the Python router must
    give exactly those sentences, in that order, for the same calls."""
    from flashsdpa import routers_masked

    q = torch.randn(1, 2, 8, 16)
    bias = torch.zeros(1, 1, 8, 8)
    for dtype, index in ((torch.float32, 0), (torch.float64, 1)):
        t = q.to(dtype)
        for b in (None, bias.to(dtype)):  # the dtype decides first, with or without a mask
            assert routers_masked.eff_forward_reason(t, t, t, b, 0.0, False) == routers_masked.NATIVE_REASONS[index]
    half = q.to(torch.bfloat16)
    assert routers_masked.eff_forward_reason(half, half, half, None, 0.1, True) == routers_masked.NATIVE_REASONS[2]
    assert routers_masked.NATIVE_REASONS[2] == routers_masked.NO_BIAS_REASON


@needs_library
def test_library_has_as_many_native_reasons_as_python() -> None:
    from flashsdpa import routers_masked

    lib = cxx_routers._open(cxx_routers.LIBRARY)
    assert lib.flashsdpa_routers_native_reasons() == len(routers_masked.NATIVE_REASONS)


@needs_library
def test_masked_ops_stay_python_without_cudas_native_kernels(library: Any) -> None:
    """On a torch without libtorch_cuda's AOTInductor shims (a CPU-only torch) the library refuses the
    efficient-attention ops: their Python routers keep them, with the reason in `info`."""
    if torch.cuda.is_available():
        pytest.skip("this torch has CUDA: tests/gpu/test_cxx_routers.py covers the masked ops")
    assert "aoti_torch_cuda__scaled_dot_product_efficient_attention" in (cxx_routers._MASKED_REASON[0] or "")
    assert library.flashsdpa_routers_register(4, b"CUDA") is not None  # refused: nothing registered


def test_masked_ops_python_road_runs_the_router_and_hands_its_errors_on(monkeypatch: pytest.MonkeyPatch) -> None:
    """The efficient-attention ops' fallback ops run routers_masked.py's router, looked up per call,
    with the arguments as given; an error it raises goes to the C++ router (flashsdpa_routers_fail)
    and the op returns placeholders of the right arity."""
    from flashsdpa import routers_masked

    seen: list[tuple[Any, ...]] = []
    def router(keyset: Any, *args: Any, scale: Any = None) -> str:
        seen.append((keyset, args, scale))
        return "out"

    monkeypatch.setattr(routers_masked, "_eff_forward", router)
    road = cxx_routers._FALLBACKS[routers_masked._EFF_FWD]
    assert road("ks", 1, 2, 3, scale=0.5, reason="") == "out" and seen == [("ks", (1, 2, 3), 0.5)]

    failed: list[bytes] = []

    class FakeLib:
        def flashsdpa_routers_fail(self, message: bytes) -> None:
            failed.append(message)

    def refuse(keyset: Any, *args: Any, scale: Any = None) -> Any:
        raise RuntimeError("PyTorch's message")

    monkeypatch.setattr(cxx_routers, "_LIB", FakeLib())
    monkeypatch.setattr(routers_masked, "_eff_backward", refuse)
    road = cxx_routers._FALLBACKS[routers_masked._EFF_BWD]
    assert road("ks", 1, reason="") == (None, None, None, None) and failed == [b"PyTorch's message"]
