# test_split_tail.py: the forward kernel's workspace (params.h's workspace: the sm90 forward's
# dynamic-schedule counter or split tail) and the split tail's plan (cuda/common/tile_scheduler.cuh's
# TailSplit) replayed on the host (tests/cpp/tail_split_plan.cu, built with nvcc where there is one).
# The launcher's side in Python: which forwards ask _C for the workspace (every forward-kernel launch;
# decode-sized ones take the decode kernel's), that it travels in the spec's pointers (module.cpp's
# fwd_spec: items 8 and 9) and that the answer is asked once per problem. The kernels' results:
# tests/gpu/test_split_tail.py and tests/gpu/test_fwd_schedule.py.
from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import torch

from flashsdpa import _backend, masks
from helpers import run_host_replay


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="no nvcc: the host replay of the plan is built with it")
def test_plan_on_the_host(tmp_path: Path) -> None:
    # ~2 s to build, ~3 s to run: 56k plans (workers 2-512, units 1-1024, tiles 1 to 3 rounds + large).
    run_host_replay("tail_split_plan.cu", tmp_path)


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
    assert len(pointers) == 10 and pointers[9] == 4096 and pointers[8] != 0  # workspace, workspace_bytes
    assert len(build.workspace_asked) == 1
    _backend.launch_fwd(q, k, v, out, lse, 0.125, masks.NO_MASK)  # the same problem: cached
    assert len(build.workspace_asked) == 1 and _launched_pointers(build)[9] == 4096
    _backend.launch_fwd(*_tensors(301), 0.125, masks.NO_MASK)  # another problem: asked again
    assert len(build.workspace_asked) == 2


def test_no_workspace_wanted_leaves_the_spec_as_it_was(fake: Any) -> None:
    build = fake(fwd_workspace=0)
    _backend.launch_fwd(*_tensors(300), 0.125, masks.NO_MASK)
    assert len(_launched_pointers(build)) == 8 and len(build.workspace_asked) == 1


@pytest.mark.parametrize("case", ["causal", "window", "varlen", "mods", "dropout"])
def test_every_forward_kernel_launch_asks(fake: Any, case: str) -> None:
    # Masked calls take the dynamic schedule (its counter in the workspace), the others may split
    # their tail: each problem asks once, the full spec in hand (mods and dropout decide the
    # instantiation), and each launch carries the workspace it was told.
    build = fake(fwd_workspace=256)
    q, k, v, out, lse = _tensors(300)

    def launch() -> None:
        if case == "varlen":
            cu = torch.tensor([0, 300], dtype=torch.int32)
            packed = [t[0].transpose(0, 1).contiguous() for t in (q, k, v, out)]
            _backend.launch_fwd(*packed, torch.empty(4, 300), 0.125, masks.CAUSAL_TOP_LEFT, varlen=(cu, cu, None, 300, 300))
        elif case == "mods":
            _backend.launch_fwd(q, k, v, out, lse, 0.125, masks.NO_MASK, mods=(30.0, None, None))
        elif case == "dropout":
            _backend.launch_fwd(q, k, v, out, lse, 0.125, masks.CAUSAL_BOTTOM_RIGHT, dropout=(0.1, 1, 2, 0, 0, 0))
        else:
            mask = {"causal": masks.CAUSAL_BOTTOM_RIGHT, "window": (64, 0, masks.TOP_LEFT)}[case]
            _backend.launch_fwd(q, k, v, out, lse, 0.125, mask)

    launch()
    launch()
    assert len(build.workspace_asked) == 1
    asked = build.workspace_asked[0]
    assert len(asked[0]) == 8  # the pointers it asked with carry no workspace yet
    if case == "mods":
        assert asked[9] is not None  # the modifiers' item: the plain kernel alone splits its tail
    if case == "dropout":
        assert asked[10] is not None
    for _, (spec, *_) in build.calls:
        assert spec[0][8] != 0 and spec[0][9] == 256


def test_the_key_separates_what_decides(fake: Any) -> None:
    # The same sizes under another mask, with modifiers or with dropout are other problems.
    build = fake(fwd_workspace=0)
    q, k, v, out, lse = _tensors(300)
    _backend.launch_fwd(q, k, v, out, lse, 0.125, masks.NO_MASK)
    _backend.launch_fwd(q, k, v, out, lse, 0.125, masks.CAUSAL_BOTTOM_RIGHT)
    _backend.launch_fwd(q, k, v, out, lse, 0.125, masks.NO_MASK, mods=(30.0, None, None))
    _backend.launch_fwd(q, k, v, out, lse, 0.125, masks.NO_MASK, dropout=(0.1, 1, 2, 0, 0, 0))
    _backend.launch_fwd(q, k, v, out, lse, 0.125, masks.CAUSAL_BOTTOM_RIGHT)
    assert len(build.workspace_asked) == 4


def test_decode_sized_calls_never_ask(fake: Any) -> None:
    build = fake(fwd_workspace=4096)
    _backend.launch_fwd(*_tensors(8), 0.125, masks.CAUSAL_BOTTOM_RIGHT)
    assert build.workspace_asked == [] and build.calls[-1][1][0][8] is not None  # the decode item
