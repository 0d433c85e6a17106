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
    assert [(r.name, str(r.type)) for r in ours.returns] == [(r.name, str(r.type)) for r in aten.returns]


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
    assert library.flashsdpa_routers_register(3) is None
    for op in HOT_OPS:
        [line] = cuda_kernels(op)
        assert "routers.cpp" in line, line
    assert library.flashsdpa_routers_register(3) == b"already registered"
    library.flashsdpa_routers_unregister()
    assert {op: cuda_kernels(op) for op in HOT_OPS} == before


@needs_library
def test_register_takes_only_the_ops_asked(library: Any) -> None:
    assert library.flashsdpa_routers_register(1) is None
    assert any("routers.cpp" in line for line in cuda_kernels(routers._SDPA_FWD))
    assert not any("routers.cpp" in line for line in cuda_kernels(routers._SDPA_BWD))


@needs_library
def test_enable_registers_cxx_routers_and_disable_removes_them(
    monkeypatch: pytest.MonkeyPatch, library: Any, fake_build: Any
) -> None:
    # What activation does on a GPU, with the C++ routers' registration forced (this torch has no CUDA).
    def register() -> frozenset[str]:
        assert library.flashsdpa_routers_register(3) is None
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
    assert collect_info()["routers"] == {"sdpa_flash": "python", "python_because": "libflashsdpa_routers.so was not built"}


def test_env_keeps_the_python_routers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cxx_routers, "_REASON", [])
    monkeypatch.setenv(cxx_routers.ROUTERS_ENV, "python")
    assert cxx_routers.unavailable_reason() == "FLASHSDPA_ROUTERS=python"
    assert cxx_routers.register() == frozenset()


# ---- the fallback ops' Python side ----------------------------------------------------------------------


class Native:
    """Stands in for PyTorch's captured kernel: returns, or raises PyTorch's error."""

    def __init__(self, error: Exception | None = None) -> None:
        self.error = error
        self.calls: list[tuple[Any, tuple[Any, ...], dict[str, Any]]] = []

    def call_boxed(self, keyset: Any, *args: Any, **kwargs: Any) -> str:
        self.calls.append((keyset, args, kwargs))
        if self.error is not None:
            raise self.error
        return "native result"


class FailRecorder:
    def __init__(self) -> None:
        self.messages: list[bytes] = []

    def flashsdpa_routers_fail(self, message: bytes) -> None:
        self.messages.append(message)


def test_forward_fallback_reports_the_python_reason(monkeypatch: pytest.MonkeyPatch, fake_build: Any) -> None:
    native = Native()
    monkeypatch.setitem(routers._NATIVE, routers._SDPA_FWD, native)
    q = torch.empty(1, 2, 8, 64, dtype=torch.float32)  # not half: selection's dtype sentence
    flashsdpa.reset_stats()
    got = cxx_routers._sdpa_forward_fallback("keys", q, q, q, 0.0, True, scale=0.5, reason="dtype: no compiled kernel")
    assert got == "native result"
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
    args = tuple(range(14))
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
