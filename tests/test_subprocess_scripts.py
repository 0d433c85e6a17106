# test_subprocess_scripts.py: the GPU suite's subprocess children (tests/gpu/test_process_crashes.py)
# are Python source held in strings, which no import checks. A child that does not compile fails
# the same way on both sides of those tests, so a comparison "inside enable() as PyTorch alone"
# would pass on two SyntaxErrors (session 33: a stray line replaced the launcher switch of the
# Hugging Face child). Compiled here on the CPU, every run.
from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "gpu"))
import test_process_crashes  # noqa: E402

SCRIPTS = sorted(n for n in vars(test_process_crashes) if n.startswith("_") and n.endswith("_SCRIPT"))


def test_there_are_children() -> None:
    assert len(SCRIPTS) >= 3, SCRIPTS


@pytest.mark.parametrize("name", SCRIPTS)
def test_child_script_compiles(name: str) -> None:
    compile(textwrap.dedent(getattr(test_process_crashes, name)), name, "exec")
