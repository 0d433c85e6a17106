# test_one_hot_grads.py (GPU): rows whose softmax is one-hot (one visible key) have dS = P (dP -
# delta) = 0 in exact arithmetic, so dq and dk are exactly 0 there. The backward's preprocess sums
# delta = dO . O with the tensor cores' arithmetic, the way both families sum dP (k chunks of 16
# from column 0, a float32 accumulator from 0), so dP - delta cancels bit for bit when the output
# row is its one value row: dq and dk must be exactly 0, not a few ulps of |dO| |V| (the GPU fuzz
# case fp16 Sq 27, Sk 1, Dqk 8, Dv 56 had dk 1.25e-5 against the rule's floor of 1e-5 with an FMA
# chain; bwd_prepost.cuh). dv and the outputs still meet the project's rule against the float64
# textbook. Head dims cover both families' backwards (sm90: 64, 128; the portable family: the rest).
from __future__ import annotations

import zlib

import pytest
import torch

import flashsdpa
from flashsdpa import masks
from helpers import Shape, check_attention, default_scale, gpu_skip_reason, make_qkv, skip_unless_compiled

GPU_SKIP = gpu_skip_reason()
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(GPU_SKIP is not None, reason=f"GPU suite: {GPU_SKIP}")]

DEVICE = "cuda"
DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}
# (head_dim_qk, head_dim_v): the fuzz case's 8 / 56, both families' buckets, Dqk != Dv.
HEAD_DIMS = ((8, 56), (32, 32), (64, 64), (96, 96), (128, 128), (256, 256), (64, 128))


def _generator(request: pytest.FixtureRequest) -> torch.Generator:
    return torch.Generator(device=DEVICE).manual_seed(zlib.crc32(request.node.nodeid.encode()))


def _run(request: pytest.FixtureRequest, shape: Shape, dtype: torch.dtype, window: tuple[int, int] | None) -> None:
    skip_unless_compiled(dtype, shape.head_dim, shape.dv)
    gen = _generator(request)
    q, k, v = make_qkv(shape, dtype, DEVICE, generator=gen, requires_grad=True)
    dout = torch.randn(shape.batch, shape.heads_q, shape.seqlen_q, shape.dv, generator=gen, device=DEVICE).to(dtype)
    scale = default_scale(shape.head_dim)
    out, lse = flashsdpa.attention(q, k, v, causal=window is not None, window=window, scale=scale, return_lse=True)
    dq, dk, dv = torch.autograd.grad(out, (q, k, v), dout)
    torch.cuda.synchronize()
    for name, grad in (("dq", dq), ("dk", dk)):
        nonzero = int((grad != 0).sum())
        assert nonzero == 0, (
            f"{name}: {nonzero} of {grad.numel()} elements are not exactly 0 (max |{name}| = "
            f"{grad.abs().max().item():.3e}): dP - delta did not cancel on one-hot rows"
        )
    mask = masks.make(window is not None, "top_left", window)
    check_attention(q, k, v, dout, out, (dq, dk, dv), lse, scale=scale, causal_mode=mask)


@pytest.mark.parametrize("dims", HEAD_DIMS, ids=lambda d: f"d{d[0]}v{d[1]}")
@pytest.mark.parametrize("dtype", list(DTYPES), ids=list(DTYPES))
@pytest.mark.parametrize("sq", [1, 27, 300], ids=lambda s: f"q{s}")
def test_one_key(request: pytest.FixtureRequest, sq: int, dtype: str, dims: tuple[int, int]) -> None:
    """Sk = 1, GQA 4 / 1: every row's softmax is the one key's 1."""
    _run(request, Shape("one_key", 2, 4, 1, sq, 1, dims[0], dims[1]), DTYPES[dtype], None)


@pytest.mark.parametrize("dims", HEAD_DIMS, ids=lambda d: f"d{d[0]}v{d[1]}")
@pytest.mark.parametrize("dtype", list(DTYPES), ids=list(DTYPES))
def test_window_zero(request: pytest.FixtureRequest, dtype: str, dims: tuple[int, int]) -> None:
    """Window (0, 0): query i sees key i only (Sq = Sk = 333, over several key and query blocks)."""
    _run(request, Shape("window0", 2, 4, 2, 333, 333, dims[0], dims[1]), DTYPES[dtype], (0, 0))
