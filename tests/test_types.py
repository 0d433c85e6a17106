# test_types.py: python/flashsdpa type-checks (mypy with pyproject.toml's [tool.mypy], no error),
# so its annotations say what the code does. bootstrap.sh installs mypy; where it is missing (a GPU
# machine's own environment, CPU_TESTS=1 in scripts/gpu_check.sh) the test skips, never under CI.
from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_package_type_checks(tmp_path: Path) -> None:
    try:
        from mypy import api
    except ImportError:
        if os.environ.get("CI"):
            pytest.fail("mypy is not installed (scripts/bootstrap.sh installs it)")
        pytest.skip("mypy is not installed (scripts/bootstrap.sh installs it)")
    stdout, stderr, status = api.run(
        ["--config-file", str(ROOT / "pyproject.toml"), "--cache-dir", str(tmp_path / "mypy"), str(ROOT / "python" / "flashsdpa")]
    )
    assert status == 0, stdout + stderr
