# test_split_tail.py: the sm90 forward's split tail (cuda/common/tile_scheduler.cuh's TailSplit):
# its plan replayed on the host (tests/cpp/tail_split_plan.cu, built with nvcc where there is one)
# and the launcher's side in Python: which forwards ask _C for the workspace, that the workspace
# travels in the spec's pointers (module.cpp's fwd_spec: items 9 and 10) and that the answer is
# asked once per problem. The kernels' results: tests/gpu/test_split_tail.py.
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import torch

from flashsdpa import _backend, masks

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="no nvcc: the host replay of the plan is built with it")
def test_plan_on_the_host(tmp_path: Path) -> None:
    # ~2 s to build, ~3 s to run: 56k plans (workers 2-512, units 1-1024, tiles 1 to 3 rounds + large).
    exe = tmp_path / "tail_split_plan"
    build = subprocess.run(
        ["nvcc", "-std=c++17", "-O2", "--expt-relaxed-constexpr", "-arch=sm_80", "-I", str(ROOT / "backend/include"),
         "-I", str(ROOT / "cuda"), str(ROOT / "tests/cpp/tail_split_plan.cu"), "-o", str(exe)],
        capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert build.returncode == 0, build.stdout + build.stderr
    run = subprocess.run([str(exe)], capture_output=True, text=True, timeout=600)
    assert run.returncode == 0 and run.stdout.startswith("ok "), run.stdout + run.stderr


@pytest.fixture
def fake(fake_build: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setattr(_backend, "_current_stream", lambda device: 77)
    return fake_build


def _tensors(sq: int, sk: int = 0) -> tuple[torch.Tensor, ...]:
    sk = sk or sq
    q = torch.randn(2, 4, sq, 64, dtype=torch.bfloat16)
    k, v = torch.randn(2, 4, sk, 64, dtype=torch.bfloat16), torch.randn(2, 4, sk, 64, dtype=torch.bfloat16)
    return q, k, v, torch.empty_like(q), torch.empty(2, 4, sq)


def _launched_pointers(build: Any) -> tuple[Any, ...]:
    name, args = build.calls[-1]
    assert name == "fwd"
    return tuple(args[0][0])


def test_unmasked_forward_passes_the_workspace(fake: Any) -> None:
    build = fake(fwd_workspace=4096)
    q, k, v, out, lse = _tensors(300)
    _backend.launch_fwd(q, k, v, out, lse, 0.125, masks.NO_MASK)
    pointers = _launched_pointers(build)
    assert len(pointers) == 11 and pointers[10] == 4096 and pointers[9] != 0  # split_ws, split_ws_bytes
    assert len(build.workspace_asked) == 1
    _backend.launch_fwd(q, k, v, out, lse, 0.125, masks.NO_MASK)  # the same problem: cached
    assert len(build.workspace_asked) == 1 and _launched_pointers(build)[10] == 4096
    _backend.launch_fwd(*_tensors(301), 0.125, masks.NO_MASK)  # another problem: asked again
    assert len(build.workspace_asked) == 2


def test_no_workspace_wanted_leaves_the_spec_as_it_was(fake: Any) -> None:
    build = fake(fwd_workspace=0)
    _backend.launch_fwd(*_tensors(300), 0.125, masks.NO_MASK)
    assert len(_launched_pointers(build)) == 9 and len(build.workspace_asked) == 1


@pytest.mark.parametrize("case", ["causal", "window", "decode", "varlen", "mods"])
def test_other_forwards_never_ask(fake: Any, case: str) -> None:
    # Masked calls take the dynamic schedule (tile counter), decode-sized ones the decode kernel,
    # varlen and modified ones kernels without a split tail: none asks, none gets a workspace.
    build = fake(fwd_workspace=4096)
    q, k, v, out, lse = _tensors(8 if case == "decode" else 300)
    if case == "varlen":
        cu = torch.tensor([0, 300], dtype=torch.int32)
        packed = [t[0].transpose(0, 1).contiguous() for t in (q, k, v, out)]
        _backend.launch_fwd(*packed, torch.empty(4, 300), 0.125, masks.NO_MASK, varlen=(cu, cu, None, 300, 300))
    elif case == "mods":
        _backend.launch_fwd(q, k, v, out, lse, 0.125, masks.NO_MASK, mods=(30.0, None, None))
    else:
        mask = {"causal": masks.CAUSAL_BOTTOM_RIGHT, "window": (64, 0, masks.TOP_LEFT), "decode": masks.NO_MASK}[case]
        _backend.launch_fwd(q, k, v, out, lse, 0.125, mask)
    assert build.workspace_asked == []
    assert len(_launched_pointers(build)) in (8, 9)
