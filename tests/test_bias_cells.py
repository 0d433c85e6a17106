# test_bias_cells.py: the bias summary's dispatch (ops_masks.bias_cells: one _C.bias_cells launch for
# a CUDA bias on a CUDA build, the torch reference _bias_cells_torch elsewhere) and _C.bias_cells's
# argument checks, on CPU, and (where nvcc is found) the kernel's per-lane logic replayed on the
# host against a brute-force summary (tests/cpp/bias_cells_lanes.cu). The launch's arguments are checked on FakeTensors (CUDA metadata, no data)
# with a stand-in _C that records them: the output it would fill has the reference's shape, sizes
# and strides are the bias's own after the broadcast dims are narrowed. The kernel itself is
# compared with the reference bit for bit in tests/gpu/test_bias_cells_gpu.py.
from __future__ import annotations

import math
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch

from flashsdpa import _backend, ops_masks
from helpers import run_host_replay

# FakeTensors' data_ptr() (0 plus the view's offset) warns: these tests read it on purpose.
pytestmark = pytest.mark.filterwarnings("ignore:Accessing the data pointer of FakeTensor")


class CellsRecorder:
    """_C.bias_cells's stand-in: records each call's arguments."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def __call__(self, *args: Any) -> None:
        self.calls.append(args)


@pytest.fixture
def recorder(fake_build: Any, monkeypatch: pytest.MonkeyPatch) -> CellsRecorder:
    rec = CellsRecorder()
    monkeypatch.setattr(_backend._C, "bias_cells", rec, raising=False)
    monkeypatch.setattr(_backend, "_current_stream", lambda index: 1000 + index)
    return rec


# (the bias as made, seqlen_q, seqlen_k, the sizes and strides the launch must see)
def _views() -> list[tuple[str, Any, int, int, tuple[int, ...], tuple[int, ...]]]:
    return [
        ("B11S key padding", lambda d: torch.empty(3, 1, 1, 1000, **d), 113, 1000, (3, 1, 1, 1000), (1000, 1000, 1000, 1)),
        ("B1SS", lambda d: torch.empty(2, 1, 65, 17, **d), 65, 17, (2, 1, 65, 17), (1105, 1105, 17, 1)),
        ("BHSS", lambda d: torch.empty(2, 3, 7, 15, **d), 7, 15, (2, 3, 7, 15), (315, 105, 15, 1)),
        ("SS", lambda d: torch.empty(113, 4096, **d), 113, 4096, (1, 1, 113, 4096), (462_848, 462_848, 4096, 1)),
        ("S 1-D", lambda d: torch.empty(16, **d), 1023, 16, (1, 1, 1, 16), (16, 16, 16, 1)),
        # An expanded (B, H, Sq, Sk) view of a (1, 1, Sq, Sk) mask: its 0-stride dims narrowed to 1.
        ("expanded", lambda d: torch.empty(64, 16, **d).expand(4, 8, 64, 16), 64, 16, (1, 1, 64, 16), (0, 0, 16, 1)),
        # A broadcast key dim (size 1), and one expanded to seqlen_k (stride 0, kept: the kernel reads one key).
        ("key size 1", lambda d: torch.empty(2, 1, 7, 1, **d), 7, 113, (2, 1, 7, 1), (7, 7, 1, 1)),
        ("key expanded", lambda d: torch.empty(2, 1, 7, 1, **d).expand(2, 1, 7, 113), 7, 113, (2, 1, 7, 113), (7, 7, 1, 0)),
        # A strided (transposed) view: element strides as they are, no copy.
        ("transposed", lambda d: torch.empty(2, 1, 17, 65, **d).transpose(2, 3), 65, 17, (2, 1, 65, 17), (1105, 1105, 1, 65)),
    ]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize(("name", "make", "sq", "sk", "sizes", "strides"), _views(), ids=[v[0] for v in _views()])
def test_cuda_bias_is_one_launch(
    recorder: CellsRecorder, fake_mode: Any, dtype: torch.dtype, name: str, make: Any, sq: int, sk: int,
    sizes: tuple[int, ...], strides: tuple[int, ...],
) -> None:  # fmt: skip
    bias = make({"dtype": dtype, "device": "cuda:0"})
    cells = ops_masks.bias_cells(bias, sq, sk)
    [(ptr, code, got_sizes, got_strides, seqlen_q, seqlen_k, out_ptr, out_bytes, device, stream)] = recorder.calls
    assert code == {torch.float16: 0, torch.bfloat16: 1, torch.float32: 2}[dtype]
    assert (tuple(got_sizes), tuple(got_strides), seqlen_q, seqlen_k) == (sizes, strides, sq, sk)
    assert (device, stream) == (0, 1000)
    assert ptr == bias.data_ptr() and out_ptr == cells.data_ptr() and out_bytes == cells.numel()
    # The output the kernel fills is the reference's (here on FakeTensors): same shape, dtype, contiguous.
    ref = ops_masks._bias_cells_torch(make({"dtype": dtype}), sq, sk)
    assert cells.shape == ref.shape and cells.dtype == ref.dtype == torch.uint8 and cells.is_contiguous()
    assert cells.device == bias.device


def test_cpu_bias_takes_the_reference(recorder: CellsRecorder) -> None:
    bias = torch.randn(2, 1, 70, 40).to(torch.bfloat16)
    bias[0, 0, :, 20:] = -math.inf
    cells = ops_masks.bias_cells(bias, 70, 40)
    assert recorder.calls == []
    assert torch.equal(cells, ops_masks._bias_cells_torch(bias, 70, 40))


def test_other_dtypes_take_the_reference(recorder: CellsRecorder, fake_mode: Any) -> None:
    # float64 has no kernel instantiation: the torch ops (here on FakeTensors) serve it.
    cells = ops_masks.bias_cells(torch.empty(2, 1, 1, 40, dtype=torch.float64, device="cuda:0"), 5, 40)
    assert recorder.calls == [] and cells.shape == (2, 1, 1, 16)


def test_builds_without_cuda_kernels_take_the_reference(
    fake_build: Any, fake_mode: Any, monkeypatch: pytest.MonkeyPatch
) -> None:  # fmt: skip
    build = fake_build(with_cuda=False)
    rec = CellsRecorder()
    monkeypatch.setattr(build, "bias_cells", rec, raising=False)
    cells = ops_masks.bias_cells(torch.empty(2, 1, 1, 40, dtype=torch.float16, device="cuda:0"), 5, 40)
    assert rec.calls == [] and cells.shape == (2, 1, 1, 16)


def test_a_c_module_without_the_kernel_takes_the_reference(fake_build: Any, fake_mode: Any) -> None:
    # An older _C (no bias_cells): FakeCudaBuild has none.
    assert not hasattr(_backend._C, "bias_cells")
    cells = ops_masks.bias_cells(torch.empty(1, 1, 130, 40, dtype=torch.float16, device="cuda:0"), 130, 40)
    assert cells.shape == (1, 1, 3, 16)


# ---- _C.bias_cells's checks (the real module: they run before any CUDA call) ---------------------

_REAL_C = _backend._C
needs_c = pytest.mark.skipif(
    _REAL_C is None or not hasattr(_REAL_C, "bias_cells"), reason="flashsdpa._C is not built or has no bias_cells"
)

# A valid call's arguments but for the pointers (checked first: nothing here is ever launched).
_GOOD = {
    "bias": 256, "dtype": 1, "sizes": (2, 1, 1, 1000), "strides": (1000, 1000, 1000, 1), "seqlen_q": 100,
    "seqlen_k": 1000, "cells": 512, "cells_bytes": 2 * 64, "device": 0, "stream": 0,
}  # fmt: skip


@needs_c
@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"bias": 0}, "bias: null data pointer"),
        ({"bias": 257}, "bias: data pointer must be 2-byte aligned"),
        ({"dtype": 2, "bias": 258}, "bias: data pointer must be 4-byte aligned"),
        ({"cells": 0}, "cells: null data pointer"),
        ({"dtype": 3}, "dtype=3: must be 0 (float16), 1 (bfloat16) or 2 (float32)"),
        ({"seqlen_q": 0}, "seqlen_q=0: must be in [1, 2^31 - 1]"),
        ({"seqlen_k": 2**31}, "seqlen_k=2147483648: must be in [1, 2^31 - 1]"),
        ({"sizes": (0, 1, 1, 1000)}, "sizes[0] (batch)=0: must be in [1, 2^31 - 1]"),
        ({"sizes": (2, 1, 7, 1000)}, "sizes[2] (query rows)=7: must be 1 (broadcast) or seqlen_q=100"),
        ({"sizes": (2, 1, 1, 999)}, "sizes[3] (keys)=999: must be 1 (broadcast) or seqlen_k=1000"),
        ({"strides": (1000, 1000, -1, 1)}, "strides[2]=-1: must be >= 0"),
        ({"device": -1}, "device=-1: must be a CUDA device index >= 0"),
        ({"cells_bytes": 127}, "cells_bytes=127: the summary (2, 1, 1, 64) needs 128 bytes"),
        # (B, 1, Sq, S): ceil(100 / 64) = 2 cell rows per batch.
        ({"sizes": (2, 1, 100, 1000), "cells_bytes": 255}, "cells_bytes=255: the summary (2, 1, 2, 64) needs 256 bytes"),
        ({"sizes": (2**30, 4, 1, 1000)}, "summary rows (batch x heads x ceil(seqlen_q / 64))=4294967296: must be"),
    ],
)
def test_c_checks_name_the_argument(change: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match="^" + re.escape(message)):
        _REAL_C.bias_cells(**{**_GOOD, **change})


@needs_c
@pytest.mark.skipif(_backend.BUILD_INFO["with_cuda"], reason="a CUDA build would launch")
def test_cpu_only_build_reports_no_cuda() -> None:
    # The checks pass; a build without CUDA then says so (ops_masks never calls it: CUDA_KERNELS is False).
    with pytest.raises(RuntimeError, match="built without CUDA"):
        _REAL_C.bias_cells(**_GOOD)
    assert not _backend.CUDA_KERNELS


# ---- the kernel's lanes on the host (tests/cpp/bias_cells_lanes.cu) --------------------------------


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="no nvcc: the host replay of the kernel's lanes is built with it")
def test_kernel_lanes_on_the_host(tmp_path: Path) -> None:
    # ~10 s to build on 2 cores, ~3 s to run: 906 cases (10 layouts x 30 (Sq, Sk) x 3 dtypes + 2 large).
    run_host_replay("bias_cells_lanes.cu", tmp_path)
