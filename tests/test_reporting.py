# test_reporting.py: what flashsdpa reports about the calls it routes: the served / fallback counts
# of stats(), the DEBUG log line of each fallback and the opt-in FallbackWarning (reporting.py).
from __future__ import annotations

import logging
import os
import subprocess
import sys
import warnings

import pytest

import flashsdpa
from flashsdpa import reporting


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
