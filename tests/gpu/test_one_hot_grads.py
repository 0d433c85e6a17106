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
from helpers import (
    UNDER_SANITIZER,
    Shape,
    check_attention,
    default_scale,
    gpu_skip_reason,
    make_qkv,
    skip_unless_compiled,
)

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


# ---- the exact delta of a few keys (cuda/common/bwd_prepost.cuh's exact_delta_store) --------------
# Up to 16 keys the preprocess takes delta = sum_j P_j dP_j from the scores and dP, not dO . O from
# the output rounded to its dtype. Two tied keys (equal key rows) make that visible exactly: dS_0 =
# P (dP_0 - delta) and dS_1 = P (dP_1 - delta) are then exact negatives, and dQ = scale (dS_0 + dS_1) k
# is exactly 0, when every sum is exact: integer value rows below 2^(mantissa + 1) and dO in {-1, 0,
# 1} / 64, so 64 dP_j and 64 (dP_0 + dP_1) are integers below 2^24 (the 1 / 64 keeps fp16's dS
# below its 65504). The output, their mean, is a half integer beyond the dtype's precision (|O| >=
# 128 in bf16, >= 1024 in fp16), so delta from the rounded O is off by about dO . (O - round(O))
# and dq by scale P times that (the O path through reference.py on the CPU, session 53: 60-100% of
# dq's elements on the rows that see both keys nonzero, the rule missed by 1e2 to 1e5 times).
VALUE_BOUND = {torch.bfloat16: 255, torch.float16: 2047}


@pytest.mark.parametrize("dims", HEAD_DIMS, ids=lambda d: f"d{d[0]}v{d[1]}")
@pytest.mark.parametrize("dtype", list(DTYPES), ids=list(DTYPES))
@pytest.mark.parametrize("sq,causal", [(1, None), (7, "top_left"), (300, "bottom_right")], ids=["q1", "q7tl", "q300br"])
def test_tied_keys_exact_delta(
    request: pytest.FixtureRequest, sq: int, causal: str | None, dtype: str, dims: tuple[int, int]
) -> None:
    """Sk = 2 equal keys, GQA 4 / 2: dq exactly 0 (the O path leaves ~scale |dO| ulp(O) a row)."""
    torch_dtype = DTYPES[dtype]
    shape = Shape("tied", 2, 4, 2, sq, 2, dims[0], dims[1])
    skip_unless_compiled(torch_dtype, shape.head_dim, shape.dv)
    gen = _generator(request)
    bound = VALUE_BOUND[torch_dtype]
    q = torch.randn(2, 4, sq, dims[0], generator=gen, device=DEVICE).to(torch_dtype)
    k = torch.randn(2, 2, 1, dims[0], generator=gen, device=DEVICE).to(torch_dtype)
    k = k.expand(2, 2, 2, dims[0]).contiguous()
    v = torch.randint(-bound, bound + 1, (2, 2, 2, dims[1]), generator=gen, device=DEVICE).to(torch_dtype)
    dout = (torch.randint(-1, 2, (2, 4, sq, dims[1]), generator=gen, device=DEVICE) / 64).to(torch_dtype)
    for t in (q, k, v):
        t.requires_grad_()
    scale = default_scale(shape.head_dim)
    out, lse = flashsdpa.attention(
        q, k, v, causal=causal is not None, causal_alignment=causal or "top_left", scale=scale, return_lse=True
    )
    dq, dk, dv = torch.autograd.grad(out, (q, k, v), dout)
    torch.cuda.synchronize()
    nonzero = int((dq != 0).sum())
    assert nonzero == 0, (
        f"dq: {nonzero} of {dq.numel()} elements are not exactly 0 (max |dq| = {dq.abs().max().item():.3e}): "
        "delta is not sum_j P dP on two tied keys"
    )
    mode = {None: 0, "top_left": 1, "bottom_right": 2}[causal]
    check_attention(q, k, v, dout, out, (dq, dk, dv), lse, scale=scale, causal_mode=mode)


@pytest.mark.parametrize("dtype", list(DTYPES), ids=list(DTYPES))
@pytest.mark.parametrize("sk", [16, 17], ids=lambda s: f"k{s}")
def test_exact_delta_sanitizer_subset(request: pytest.FixtureRequest, sk: int, dtype: str) -> None:
    """The preprocess on both sides of kExactDeltaMaxKeys (16 keys: delta from P dP; 17: from O),
    fresh normal inputs, GQA 4 / 2, bottom-right causal with Sq > Sk (rows without keys), Dqk != Dv,
    ragged rows: the rule, and small enough for compute-sanitizer (`-k sanitizer_subset`; there
    the yardstick is taken on the CPU, helpers.UNDER_SANITIZER)."""
    torch_dtype = DTYPES[dtype]
    shape = Shape("delta_bound", 1, 4, 2, 33, sk, 64, 128)
    skip_unless_compiled(torch_dtype, shape.head_dim, shape.dv)
    gen = _generator(request)
    q, k, v = make_qkv(shape, torch_dtype, DEVICE, generator=gen, requires_grad=True)
    dout = torch.randn(1, 4, 33, shape.dv, generator=gen, device=DEVICE).to(torch_dtype)
    scale = default_scale(shape.head_dim)
    out, lse = flashsdpa.attention(q, k, v, causal=True, causal_alignment="bottom_right", scale=scale, return_lse=True)
    grads = torch.autograd.grad(out, (q, k, v), dout)
    torch.cuda.synchronize()
    if UNDER_SANITIZER:  # racecheck stops inside PyTorch's bf16 math SDPA here (H100, session 53)
        q, k, v, dout, out, lse = (t.detach().cpu() for t in (q, k, v, dout, out, lse))
        grads = tuple(g.cpu() for g in grads)
    check_attention(q, k, v, dout, out, grads, lse, scale=scale, causal_mode=2)
