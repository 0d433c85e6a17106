# test_reference.py: the blockwise PyTorch reference (python/flashsdpa/reference.py) against PyTorch's
# math SDPA and a float64 textbook formula, its conventions for empty rows and empty tensors, and
# proof that it never allocates an Sq x Sk tensor nor expands K/V for GQA. CPU only, runs in CI.
from __future__ import annotations

import math
import zlib
from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import Tensor
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from flashsdpa.reference import attention_backward, attention_forward
from helpers import (
    CAUSAL_MODES,
    EMPTY_SHAPES,
    SHAPES,
    Shape,
    assert_all_finite,
    check_attention,
    default_scale,
    make_qkv,
    max_error,
    textbook_attention,
    textbook_with_grads,
    torch_math_attention,
)

DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32, "fp64": torch.float64}


def _run_reference(
    q: Tensor, k: Tensor, v: Tensor, dout: Tensor, *, scale: float, causal_mode: int, block_size: int
) -> tuple[Tensor, Tensor, tuple[Tensor, Tensor, Tensor]]:
    out, lse = attention_forward(q, k, v, scale=scale, causal_mode=causal_mode, block_size=block_size)
    grads = attention_backward(dout, q, k, v, out, lse, scale=scale, causal_mode=causal_mode, block_size=block_size)
    return out, lse, grads


def _check_against_references(
    shape: Shape, dtype: torch.dtype, causal_mode: int, *, block_size: int, layout: str = "bhsd"
) -> None:
    """Output, LSE, dq, dk, dv of the reference against the float64 textbook, with PyTorch's math
    SDPA (upcasting, as the reference accumulates in float32 throughout) as the yardstick."""
    gen = torch.Generator().manual_seed(zlib.crc32(f"{shape}-{dtype}-{causal_mode}".encode()))
    q, k, v = make_qkv(shape, dtype, layout=layout, generator=gen)
    dout = torch.randn(shape.batch, shape.heads_q, shape.seqlen_q, shape.dv, generator=gen).to(dtype)
    scale = default_scale(shape.head_dim)
    out, lse, grads = _run_reference(q, k, v, dout, scale=scale, causal_mode=causal_mode, block_size=block_size)
    check_attention(q, k, v, dout, out, grads, lse, scale=scale, causal_mode=causal_mode, reduced_precision=False)


# Every shape of the table in every causal mode; dtypes rotate over the cases so that each dtype
# meets every shape kind while the suite stays fast. Block 64 puts tile edges inside 113 and 239.
_MATRIX = [
    (shape, causal, dtype)
    for i, shape in enumerate(SHAPES.values())
    for j, causal in enumerate(CAUSAL_MODES)
    for dtype in [list(DTYPES)[(i + j) % 4], list(DTYPES)[(i + j + 2) % 4]]
]


@pytest.mark.parametrize("shape,causal,dtype", _MATRIX, ids=[f"{s}-{c}-{d}" for s, c, d in _MATRIX])
def test_matches_math_sdpa(shape: Shape, causal: str, dtype: str) -> None:
    _check_against_references(shape, DTYPES[dtype], CAUSAL_MODES[causal], block_size=64)


@pytest.mark.parametrize("layout", ["bshd", "packed"])
@pytest.mark.parametrize("causal", list(CAUSAL_MODES))
def test_strided_inputs(layout: str, causal: str) -> None:
    shape = Shape("strided", 2, 4, 2, 113, 113, 32)
    _check_against_references(shape, torch.bfloat16, CAUSAL_MODES[causal], block_size=32, layout=layout)


def test_default_block_size_and_scale() -> None:
    # The default tile (128) and a scale far from 1/sqrt(d), on a shape spanning several tiles.
    shape = Shape("default_block", 1, 4, 2, 300, 333, 48)
    gen = torch.Generator().manual_seed(0)
    q, k, v = make_qkv(shape, torch.float32, requires_grad=True, generator=gen)
    out, lse = attention_forward(q.detach(), k.detach(), v.detach(), scale=0.37, causal_mode=2)
    ref_out, ref_lse = textbook_attention(q, k, v, scale=0.37, causal_mode=2)
    assert max_error(out, ref_out) < 1e-5
    assert max_error(lse, ref_lse) < 1e-5


def test_block_size_does_not_change_the_result() -> None:
    """Tiling is an implementation detail: in float64 every block size gives the same numbers."""
    shape = SHAPES["gqa2"]
    gen = torch.Generator().manual_seed(1)
    q, k, v = make_qkv(shape, torch.float64, generator=gen)
    dout = torch.randn(shape.batch, shape.heads_q, shape.seqlen_q, shape.dv, generator=gen, dtype=torch.float64)
    results = [_run_reference(q, k, v, dout, scale=0.125, causal_mode=2, block_size=bs) for bs in (1, 5, 16, 128, 4096)]
    out0, lse0, grads0 = results[0]
    for out, lse, grads in results[1:]:
        assert max_error(out, out0) < 1e-12
        # lse is stored in float32 whatever the block size: compare at that precision.
        assert max_error(lse, lse0) < 1e-5
        for g, g0 in zip(grads, grads0):
            assert max_error(g, g0) < 1e-6


def test_large_logits_do_not_overflow() -> None:
    """Scores in the thousands: the running max must keep every exp() in range."""
    shape = Shape("hot", 1, 2, 2, 129, 257, 32)
    gen = torch.Generator().manual_seed(2)
    q, k, v = make_qkv(shape, torch.float32, requires_grad=True, generator=gen)
    q = (q.detach() * 40).requires_grad_()
    dout = torch.randn(1, 2, 129, 32, generator=gen)
    out, lse, grads = _run_reference(q.detach(), k.detach(), v.detach(), dout, scale=1.0, causal_mode=1, block_size=32)
    ref_out, ref_lse, ref_grads = textbook_with_grads(q, k, v, dout, scale=1.0, causal_mode=1)
    for t in (out, lse, *grads):
        assert_all_finite("output", t)
    assert max_error(out, ref_out) < 1e-4
    assert max_error(lse, ref_lse) / ref_lse.abs().max().item() < 1e-6
    for g, r in zip(grads, ref_grads):
        assert max_error(g, r) <= 1e-4 * max(1.0, r.abs().max().item())


@pytest.mark.parametrize("dtype", ["bf16", "fp32"])
def test_rows_without_keys(dtype: str) -> None:
    """Bottom-right causal with Sq > Sk: the first Sq - Sk rows see nothing. Output 0, LSE +inf,
    their gradients 0, no NaN anywhere, the same as PyTorch's math backend."""
    shape = Shape("empty_rows", 2, 4, 2, 70, 30, 16)
    empty = shape.seqlen_q - shape.seqlen_k
    gen = torch.Generator().manual_seed(3)
    q, k, v = make_qkv(shape, DTYPES[dtype], requires_grad=True, generator=gen)
    dout = torch.randn(2, 4, 70, 16, generator=gen).to(DTYPES[dtype])
    out, lse, (dq, dk, dv) = _run_reference(
        q.detach(), k.detach(), v.detach(), dout, scale=0.25, causal_mode=2, block_size=16
    )
    for name, t in (("out", out), ("dq", dq), ("dk", dk), ("dv", dv)):
        assert_all_finite(name, t)
    assert torch.equal(out[:, :, :empty], torch.zeros_like(out[:, :, :empty]))
    assert bool((lse[:, :, :empty] == math.inf).all())
    assert bool(torch.isfinite(lse[:, :, empty:]).all())
    assert torch.equal(dq[:, :, :empty], torch.zeros_like(dq[:, :, :empty]))
    pt_out = torch_math_attention(q, k, v, scale=0.25, causal_mode=2)
    assert torch.equal(pt_out[:, :, :empty], out[:, :, :empty])
    assert torch.equal(torch.autograd.grad(pt_out, q, dout)[0][:, :, :empty], dq[:, :, :empty])


@pytest.mark.parametrize("dims", [(8, 56), (64, 64), (128, 128)], ids=lambda d: f"d{d[0]}v{d[1]}")
@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
@pytest.mark.parametrize("sq,causal_mode", [(1, 0), (7, 1), (300, 2)], ids=["q1", "q7tl", "q300br"])
def test_exact_delta_of_tied_keys(sq: int, causal_mode: int, dtype: str, dims: tuple[int, int]) -> None:
    """Up to 16 keys delta is sum_j P dP (reference.py's _exact_delta, the kernels' preprocess),
    not dO . O from the rounded output. Two equal key rows, integer values whose mean is beyond the
    dtype's precision, dO in {-1, 0, 1} / 64 (tests/gpu/test_one_hot_grads.py's construction):
    dq is 0 in exact arithmetic. The exact delta leaves <= 1.9e-6 here (float32 scores of tied
    keys a few ulps apart), the rounded O's delta >= 8.5e-3 on rows that see both keys."""
    torch_dtype = DTYPES[dtype]
    bound = {torch.bfloat16: 255, torch.float16: 2047}[torch_dtype]
    gen = torch.Generator().manual_seed(zlib.crc32(f"{sq}{causal_mode}{dtype}{dims}".encode()))
    q = torch.randn(2, 4, sq, dims[0], generator=gen).to(torch_dtype)
    k = torch.randn(2, 2, 1, dims[0], generator=gen).to(torch_dtype).expand(2, 2, 2, dims[0]).contiguous()
    v = torch.randint(-bound, bound + 1, (2, 2, 2, dims[1]), generator=gen).to(torch_dtype)
    dout = (torch.randint(-1, 2, (2, 4, sq, dims[1]), generator=gen) / 64).to(torch_dtype)
    scale = default_scale(dims[0])
    out, lse, (dq, _, _) = _run_reference(q, k, v, dout, scale=scale, causal_mode=causal_mode, block_size=16)
    assert_all_finite("out", out)
    worst = dq.float().abs().max().item()
    assert worst <= 1e-4, f"max |dq| = {worst:.3e}: delta is not sum_j P dP"


@pytest.mark.parametrize("shape", EMPTY_SHAPES, ids=str)
def test_zero_size(shape: Shape) -> None:
    q, k, v = make_qkv(shape, torch.float32)
    dout = torch.randn(shape.batch, shape.heads_q, shape.seqlen_q, shape.dv)
    out, lse, (dq, dk, dv) = _run_reference(q, k, v, dout, scale=0.25, causal_mode=0, block_size=8)
    assert out.shape == (shape.batch, shape.heads_q, shape.seqlen_q, shape.dv)
    assert lse.shape == (shape.batch, shape.heads_q, shape.seqlen_q)
    assert (dq.shape, dk.shape, dv.shape) == (q.shape, k.shape, v.shape)
    # No keys: every row is empty (output 0, lse +inf, no gradient), as SDPA's math path gives 0.
    assert torch.equal(out, torch.zeros_like(out))
    assert bool((lse == math.inf).all())
    for g in (dq, dk, dv):
        assert torch.equal(g, torch.zeros_like(g))
    if shape.seqlen_k == 0:
        assert torch.equal(torch_math_attention(q, k, v, scale=0.25, causal_mode=0), out)


@pytest.mark.parametrize(
    "args,message",
    [
        (((2, 4, 8), (2, 4, 8), (2, 4, 8)), "4-D"),
        (((1, 3, 8, 16), (1, 2, 8, 16), (1, 2, 8, 16)), "multiple of key/value heads"),
        (((1, 2, 8, 16), (1, 2, 8, 8), (1, 2, 8, 16)), "head dim"),
        (((1, 2, 8, 16), (1, 2, 8, 16), (1, 2, 9, 16)), "differ in heads or sequence length"),
        (((2, 2, 8, 16), (1, 2, 8, 16), (1, 2, 8, 16)), "batch sizes differ"),
    ],
)
def test_bad_shapes_are_rejected(args: tuple[tuple[int, ...], ...], message: str) -> None:
    q, k, v = (torch.zeros(s) for s in args)
    with pytest.raises(ValueError, match=message):
        attention_forward(q, k, v, scale=1.0, causal_mode=0)


def test_bad_arguments_are_rejected() -> None:
    q = torch.zeros(1, 1, 4, 8)
    with pytest.raises(ValueError, match="causal_mode"):
        attention_forward(q, q, q, scale=1.0, causal_mode=3)
    with pytest.raises(ValueError, match="block_size"):
        attention_forward(q, q, q, scale=1.0, causal_mode=0, block_size=0)
    with pytest.raises(TypeError, match="dtype"):
        attention_forward(q.int(), q.int(), q.int(), scale=1.0, causal_mode=0)
    out, lse = attention_forward(q, q, q, scale=1.0, causal_mode=0)
    with pytest.raises(ValueError, match="lse"):
        attention_backward(out, q, q, q, out, lse[:, :, :2], scale=1.0, causal_mode=0)


def test_inputs_are_not_modified() -> None:
    """The reference works on tile copies; it must never write into the caller's tensors."""
    q, k, v = make_qkv(SHAPES["square113"], torch.float32, generator=torch.Generator().manual_seed(4))
    saved = [t.clone() for t in (q, k, v)]
    out, lse = attention_forward(q, k, v, scale=0.5, causal_mode=1, block_size=32)
    dout = torch.randn_like(out)
    dout_saved, out_saved, lse_saved = dout.clone(), out.clone(), lse.clone()
    attention_backward(dout, q, k, v, out, lse, scale=0.5, causal_mode=1, block_size=32)
    for t, s in zip((q, k, v, dout, out, lse), (*saved, dout_saved, out_saved, lse_saved)):
        assert torch.equal(t, s)


# ---- memory: tiles only ---------------------------------------------------------------------------


class _LargestAllocation(TorchDispatchMode):
    """Records the largest storage (bytes) behind any tensor an aten op returns while active."""

    def __init__(self) -> None:
        super().__init__()
        self.largest = 0

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        result = func(*args, **(kwargs or {}))
        for t in tree_flatten(result)[0]:
            if isinstance(t, torch.Tensor):
                self.largest = max(self.largest, t.untyped_storage().nbytes())
        return result


def _largest_allocation(fn: Callable[[], object]) -> int:
    with _LargestAllocation() as rec:
        fn()
    return rec.largest


def _forward_and_backward(shape: Shape, block_size: int) -> Callable[[], object]:
    q, k, v = make_qkv(shape, torch.float32, generator=torch.Generator().manual_seed(5))

    def run() -> object:
        out, lse = attention_forward(q, k, v, scale=0.25, causal_mode=0, block_size=block_size)
        return attention_backward(out, q, k, v, out, lse, scale=0.25, causal_mode=0, block_size=block_size)

    return run


def test_memory_is_linear_in_sequence_length() -> None:
    """No Sq x Sk score matrix: the largest tensor grows with S, not S^2, and stays far below one
    score matrix. The same probe sees the textbook formula's S^2 scores, so it can tell."""
    sizes = {}
    for seqlen in (1024, 2048):
        shape = Shape("long", 1, 4, 2, seqlen, seqlen, 16)
        sizes[seqlen] = _largest_allocation(_forward_and_backward(shape, block_size=64))
        scores_bytes = shape.batch * shape.heads_q * seqlen * seqlen * 4
        assert sizes[seqlen] * 32 < scores_bytes, (sizes[seqlen], scores_bytes)
    assert sizes[2048] <= 2 * sizes[1024] * 1.05, sizes

    shape = Shape("long", 1, 4, 2, 1024, 1024, 16)
    q, k, v = make_qkv(shape, torch.float32)
    textbook = _largest_allocation(lambda: textbook_attention(q, k, v, scale=0.25, causal_mode=0, dtype=torch.float32))
    assert textbook >= 4 * 1024 * 1024 * 4


def test_gqa_never_expands_kv() -> None:
    """8 query heads on one key/value head: no tensor reaches the size of K repeated per query head
    (the textbook's repeat_interleave does, which the probe sees)."""
    shape = Shape("mqa_long", 1, 8, 1, 64, 4096, 32)
    expanded_k_bytes = shape.heads_q * shape.seqlen_k * shape.head_dim * 4
    largest = _largest_allocation(_forward_and_backward(shape, block_size=128))
    assert largest < expanded_k_bytes / 4, (largest, expanded_k_bytes)

    q, k, v = make_qkv(shape, torch.float32)
    textbook = _largest_allocation(lambda: textbook_attention(q, k, v, scale=0.25, causal_mode=0, dtype=torch.float32))
    assert textbook >= expanded_k_bytes
