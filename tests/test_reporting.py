# test_reporting.py: what flashsdpa reports about the calls it routes: the served / fallback counts
# of stats(), the DEBUG log line of each fallback and the opt-in FallbackWarning (reporting.py), and
# which calls are counted: every SDPA call that reaches flashsdpa's Python and does not run our kernels.
from __future__ import annotations

import contextlib
import logging
import os
import subprocess
import sys
import warnings
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import flashsdpa
from flashsdpa import entry, reporting, routers


def test_fallbacks_log_at_debug(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG, logger="flashsdpa"):
        reporting.note_fallback(
            "aten::_scaled_dot_product_flash_attention", "dropout_p=0.1: dropout is not supported (needs 0.0)"
        )
    assert caplog.records[-1].levelno == logging.DEBUG
    assert caplog.records[-1].getMessage() == (
        "aten::_scaled_dot_product_flash_attention: falling back to PyTorch's kernel: "
        "dropout_p=0.1: dropout is not supported (needs 0.0)"
    )


def test_fallback_warnings_once_per_reason() -> None:
    try:
        flashsdpa.set_fallback_warnings(True)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for _ in range(3):
                reporting.note_fallback("aten::op", "reason A")
                reporting.note_fallback("aten::op", "reason B")
        assert [str(w.message) for w in caught] == [
            "flashsdpa: aten::op falls back to PyTorch's kernel: reason A",
            "flashsdpa: aten::op falls back to PyTorch's kernel: reason B",
        ]
        assert all(issubclass(w.category, flashsdpa.FallbackWarning) for w in caught)
        flashsdpa.set_fallback_warnings(False)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            reporting.note_fallback("aten::op", "reason C")
        assert caught == []
    finally:
        flashsdpa.set_fallback_warnings(False)


def test_fallback_warnings_from_environment() -> None:
    # A fresh process: the variable is read once, at import.
    code = (
        "import warnings, flashsdpa.reporting as s\n"
        "with warnings.catch_warnings(record=True) as w:\n"
        "    warnings.simplefilter('always')\n"
        "    s.note_fallback('aten::op', 'why'); s.note_fallback('aten::op', 'why')\n"
        "print(len(w))\n"
    )
    for value, expected in (("1", "1"), ("0", "0")):
        env = {**os.environ, "FLASHSDPA_WARN_FALLBACK": value, "PYTHONPATH": os.pathsep.join(sys.path)}
        result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
        assert result.stdout.strip() == expected, result.stderr


def test_stats_count_per_op_and_reason() -> None:
    flashsdpa.reset_stats()
    counts = reporting.counter("aten::example")
    counts[0] += 2
    counts[1] += 1
    reporting.note_fallback("aten::example", "why")
    stats = flashsdpa.stats()
    assert stats["ops"]["aten::example"] == {"served": 2, "fallback": 1}
    assert stats["served"] >= 2 and stats["fallback"] >= 1
    assert stats["fallback_reasons"] == {"aten::example: why": 1}
    flashsdpa.reset_stats()
    assert flashsdpa.stats()["ops"]["aten::example"] == {"served": 0, "fallback": 0}
    assert flashsdpa.stats()["fallback_reasons"] == {}


# ---- SDPA calls that reach flashsdpa's Python and do not run our kernels (issue 10, item 6) ----------

SDPA_ENTRY = "F.scaled_dot_product_attention"


def entry_fallbacks() -> dict[str, int]:
    return {k: n for k, n in flashsdpa.stats()["fallback_reasons"].items() if k.startswith(f"{SDPA_ENTRY}: ")}


def test_cpu_calls_inside_enable_are_counted(caplog: pytest.LogCaptureFixture) -> None:
    q = torch.randn(1, 2, 8, 16)
    flashsdpa.reset_stats()
    with flashsdpa.enable(), caplog.at_level(logging.DEBUG, logger="flashsdpa"):
        F.scaled_dot_product_attention(q, q, q)
        F.scaled_dot_product_attention(q, q, q, is_causal=True)
    F.scaled_dot_product_attention(q, q, q)  # outside: not ours to count
    assert flashsdpa.stats()["ops"][SDPA_ENTRY] == {"served": 0, "fallback": 2}
    assert entry_fallbacks() == {f"{SDPA_ENTRY}: device cpu: needs a CUDA device": 2}
    assert [r.getMessage() for r in caplog.records] == [
        f"{SDPA_ENTRY}: falling back to PyTorch's kernel: device cpu: needs a CUDA device"
    ] * 2


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("cuda", [False, True], ids=["cpu", "cuda-lookalike"])
def test_float_calls_are_counted_as_the_general_road_reports_them(
    dtype: torch.dtype, cuda: bool, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
    fake_build: Any,
) -> None:  # fmt: skip
    # A float32 / float64 call (or a CPU one) is counted without its reason being formed
    # (entry._float_cell) unless fallbacks are logged or warned about; stats() must read the same
    # either way. The counted road must not form the reason at all.
    if cuda:
        monkeypatch.setattr(torch.Tensor, "is_cuda", property(lambda self: True))
    monkeypatch.setattr(entry, "_REFUSED", {})
    q = torch.randn(1, 2, 8, 16, dtype=dtype)
    general = entry._unserved_reason

    def not_formed(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the counted road formed the reason")

    seen = []
    for logged in (False, True):
        monkeypatch.setattr(entry, "_unserved_reason", general if logged else not_formed)
        flashsdpa.reset_stats()
        with flashsdpa.enable(), caplog.at_level(logging.DEBUG if logged else logging.WARNING, logger="flashsdpa"):
            out = F.scaled_dot_product_attention(q, q, q)
            F.scaled_dot_product_attention(q, q, q, is_causal=True)
        torch.testing.assert_close(out, torch._C._nn.scaled_dot_product_attention(q, q, q), rtol=0, atol=0)
        seen.append((flashsdpa.stats()["ops"][SDPA_ENTRY], entry_fallbacks(), flashsdpa.stats()["fallback"]))
        assert len(caplog.records) == 2 * logged
    reason = f"query.dtype={dtype}: needs float16 or bfloat16" if cuda else "device cpu: needs a CUDA device"
    assert seen[0] == seen[1] == ({"served": 0, "fallback": 2}, {f"{SDPA_ENTRY}: {reason}": 2}, 2)
    flashsdpa.reset_stats()
    assert entry_fallbacks() == {}


@contextlib.contextmanager
def _decode_path_without_bias() -> Any:
    """A stand-in build whose decode path takes no modifier: a decode-sized masked call keeps its
    reason (the default stand-in's decode path takes the bias, and serves it). The fake_build
    fixture restores the build afterwards."""
    from conftest import FakeCudaBuild

    from flashsdpa import _backend

    _backend._configure(FakeCudaBuild(decode_features=0))
    yield


@pytest.fixture
def cuda_lookalike(monkeypatch: pytest.MonkeyPatch, fake_build: Any) -> None:
    monkeypatch.setattr(torch.Tensor, "is_cuda", property(lambda self: True))


@pytest.mark.parametrize(
    "make, kwargs, context, reason",
    [
        (lambda: torch.randn(1, 2, 8, 64), {}, contextlib.nullcontext,
         "query.dtype=torch.float32: needs float16 or bfloat16"),
        (lambda: torch.randn(1, 2, 32, 64, dtype=torch.bfloat16), {"attn_mask": torch.ones(32, 32, dtype=torch.bool)},
         contextlib.nullcontext, "PyTorch's SDPA chose another backend"),
        (lambda: torch.randn(1, 2, 8, 64, dtype=torch.bfloat16), {"attn_mask": torch.ones(8, 8, dtype=torch.bool)},
         _decode_path_without_bias, "attn_mask with 8 query rows (<= 16, decode-sized)"),
        (lambda: torch.randn(1, 2, 8, 64, dtype=torch.bfloat16, requires_grad=True), {},
         lambda: sdpa_kernel([SDPBackend.MATH]), "PyTorch's flash backend is disabled"),
    ],
    ids=["float32", "masked", "masked decode-sized", "flash disabled"],
)
def test_unserved_calls_are_counted_with_their_reason(
    make: Any, kwargs: dict[str, Any], context: Any, reason: str, cuda_lookalike: None
) -> None:
    # CPU tensors that pass for CUDA ones with a stand-in CUDA build: our decisions run as on a GPU;
    # PyTorch's SDPA then runs on the CPU, where no router is reached.
    q = make()
    flashsdpa.reset_stats()
    try:
        flashsdpa.set_fallback_warnings(True)
        with flashsdpa.enable(), context(), warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            F.scaled_dot_product_attention(q, q, q, **kwargs)
    finally:
        flashsdpa.set_fallback_warnings(False)
    [(key, count)] = entry_fallbacks().items()
    assert key.startswith(f"{SDPA_ENTRY}: {reason}") and count == 1
    [warning] = [w for w in caught if issubclass(w.category, flashsdpa.FallbackWarning)]
    assert str(warning.message).startswith(f"flashsdpa: {SDPA_ENTRY} falls back to PyTorch's kernel: {reason}")


def test_calls_a_router_sees_are_counted_there_only(monkeypatch: pytest.MonkeyPatch) -> None:
    # The router counts what reaches it (served or fallen back); the entry counts only the calls
    # that reach no router, so no call is counted twice.
    def sdpa_reaching_a_router(*args: Any, **kwargs: Any) -> torch.Tensor:
        routers.ROUTED[0] += 1
        return args[0]

    monkeypatch.setattr(entry, "_TORCH_SDPA", sdpa_reaching_a_router)
    q = torch.randn(1, 2, 8, 16)
    flashsdpa.reset_stats()
    with flashsdpa.enable():
        F.scaled_dot_product_attention(q, q, q)
    assert flashsdpa.stats()["fallback"] == 0 and entry_fallbacks() == {}


def test_direct_api_on_cpu_is_counted() -> None:
    q = torch.randn(1, 2, 8, 16, requires_grad=True)
    flashsdpa.reset_stats()
    flashsdpa.attention(q, q, q).sum().backward()
    ops = flashsdpa.stats()["ops"]
    assert ops["flashsdpa::fwd"] == ops["flashsdpa::bwd"] == {"served": 0, "fallback": 1}
    reason = "device cpu: flashsdpa.reference runs (our kernels need a CUDA device)"
    assert flashsdpa.stats()["fallback_reasons"] == {f"flashsdpa::fwd: {reason}": 1, f"flashsdpa::bwd: {reason}": 1}


# ---- fallbacks the C++ routers run without Python (routers.cpp's masked ops) ------------------------


def test_native_reason_cells_fold_into_stats_and_reset() -> None:
    ops, reasons = ("aten::test_native_a", "aten::test_native_b"), ("reason one", "reason two")
    cells = reporting.native_reason_cells(ops, reasons)
    assert reporting.native_reason_cells(ops, reasons) is cells  # one block per op tuple
    reporting.reset_stats()
    cells[1] = 3  # [op 0][reason 1], as routers.cpp's count_native bumps it
    cells[2] = 1  # [op 1][reason 0]
    assert {k: n for k, n in flashsdpa.stats()["fallback_reasons"].items() if "test_native" in k} == {
        "aten::test_native_a: reason two": 3, "aten::test_native_b: reason one": 1}  # fmt: skip
    reporting.reset_stats()
    assert list(cells) == [0, 0, 0, 0]
    assert not any("test_native" in k for k in flashsdpa.stats()["fallback_reasons"])


def test_report_each_call_follows_warnings_and_the_debug_level(caplog: pytest.LogCaptureFixture) -> None:
    """The flag routers.cpp reads before running a fallback without Python: raised while fallbacks
    are warned about or logged at DEBUG, so that those reach Python's reporting."""
    assert reporting.report_each_call() is False and reporting.REPORT_EACH_CALL[0] == 0
    flashsdpa.set_fallback_warnings(True)
    try:
        assert reporting.REPORT_EACH_CALL[0] == 1
    finally:
        flashsdpa.set_fallback_warnings(False)
    assert reporting.REPORT_EACH_CALL[0] == 0
    with caplog.at_level(logging.DEBUG, logger="flashsdpa"):
        assert reporting.report_each_call() is True and reporting.REPORT_EACH_CALL[0] == 1
    assert reporting.report_each_call() is False
