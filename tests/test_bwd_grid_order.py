# test_bwd_grid_order.py: the sm90 backward's item order (bwd_kernel_sm90.cuh's BwdGridOrder)
# replayed on the host (tests/cpp/bwd_grid_order.cu, built with nvcc where there is one): decode is a
# bijection, up to INT_MAX items; within a (KV head, batch) the dQ turns follow the item index, which
# the grid's deadlock argument rests on. The kernels themselves: tests/gpu/test_kernels.py.
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from helpers import run_host_replay


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="no nvcc: the host replay of the order is built with it")
def test_order_on_the_host(tmp_path: Path) -> None:
    # ~2 s to build, ~1 s to run: 24192 problems (default and deterministic mode, with and without
    # the wave groups) and 14 grids near INT_MAX items.
    assert run_host_replay("bwd_grid_order.cu", tmp_path).startswith("ok 24192 problems")
