# test_bias_cells_gpu.py: the bias summary's kernel (_C.bias_cells, cuda/common/bias_cells_summary.cu)
# against its torch reference (ops_masks._bias_cells_torch), bit for bit: every (seqlen_q, seqlen_k)
# of {1, 7, 64, 65, 113, 1023} x {1, 15, 16, 17, 113, 1000, 4096} for the shapes masks come in
# ((B, 1, 1, S) key padding, (B, 1, S, S), (1, H, S, S), (B, H, S, S), (S, S), (S,)) in bfloat16,
# float16 and float32; views (0-stride expanded, a broadcast or expanded key dim, transposed,
# key-strided, a misaligned start, rows padded past Sk); values in blocks of -inf, +-0, random,
# with NaN, lone visible and lone nonzero elements, placed on and off cell boundaries; a side
# stream; a CUDA graph replayed with the mask changed in place. Every comparison runs the kernel
# path (the reference is made to raise while it runs).
from __future__ import annotations

import math
import zlib
from collections.abc import Callable, Iterator

import pytest
import torch
from torch import Tensor

from flashsdpa import _backend, ops_masks
from helpers import gpu_skip_reason

GPU_SKIP = gpu_skip_reason()
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(GPU_SKIP is not None, reason=f"GPU suite: {GPU_SKIP}")]

DEVICE = "cuda"
DTYPES = [torch.bfloat16, torch.float16, torch.float32]
SEQLENS_Q = [1, 7, 64, 65, 113, 1023]
SEQLENS_K = [1, 15, 16, 17, 113, 1000, 4096]
B, H = 2, 3


@pytest.fixture(autouse=True)
def _kernel_required() -> None:
    if not hasattr(_backend._C, "bias_cells"):
        pytest.fail("this CUDA build of flashsdpa._C has no bias_cells", pytrace=False)


def _gen(request: pytest.FixtureRequest) -> torch.Generator:
    return torch.Generator(device=DEVICE).manual_seed(zlib.crc32(request.node.nodeid.encode()))


def fill(t: Tensor, gen: torch.Generator) -> Tensor:
    """``t`` (any shape, written in place) in blocks of one kind each: random, all -inf, +0 / -0
    mixed, -inf with a rare NaN, -inf with a rare 0 (a lone visible element), zeros with a rare 1
    (a lone nonzero); rare: 1 in 2048 elements, so about half the cells of such a kind have one.
    A cell (64 x 16 from element 0) takes one kind in 60% of cases, else each of its four blocks of
    32 rows x 8 keys (half cells, half cell rows) its own: cells of every byte value occur, and the
    views below shift the blocks off the cells. Returns t."""
    shape = t.shape
    rows, keys = (shape[-2] if t.dim() > 1 else 1), shape[-1]
    x = torch.zeros(shape, device=DEVICE).reshape(-1, rows, keys)
    n, rb, kb = x.shape[0], -(-rows // 32), -(-keys // 8)
    per_block = torch.randint(0, 6, (n, rb, kb), generator=gen, device=DEVICE)
    per_cell = torch.randint(0, 6, (n, -(-rb // 2), -(-kb // 2)), generator=gen, device=DEVICE)
    uniform = torch.rand(per_cell.shape, generator=gen, device=DEVICE) < 0.6
    per_cell = torch.where(uniform, per_cell, -1).repeat_interleave(2, 1)[:, :rb].repeat_interleave(2, 2)[:, :, :kb]
    kind = torch.where(per_cell >= 0, per_cell, per_block)
    kind = kind.repeat_interleave(32, 1)[:, :rows].repeat_interleave(8, 2)[:, :, :keys]
    values = torch.randn(x.shape, generator=gen, device=DEVICE)
    half = torch.rand(x.shape, generator=gen, device=DEVICE) < 0.5
    rare = torch.rand(x.shape, generator=gen, device=DEVICE) < 1 / 2048
    zero, one, ninf, nan = (torch.full_like(x, v) for v in (0.0, 1.0, -math.inf, math.nan))
    x = torch.where(kind == 0, values, x)
    x = torch.where(kind == 1, ninf, x)
    x = torch.where(kind == 2, torch.where(half, -zero, zero), x)
    x = torch.where(kind == 3, torch.where(rare, nan, ninf), x)
    x = torch.where(kind == 4, torch.where(rare, zero, ninf), x)
    x = torch.where(kind == 5, torch.where(rare, one, zero), x)
    return t.copy_(x.reshape(shape))


@pytest.fixture
def kernel_only(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[Tensor, int, int], Tensor]]:
    """ops_masks.bias_cells with the torch reference made to raise: the kernel path or a failure."""

    def no_reference(*args: object) -> Tensor:
        raise AssertionError("bias_cells took the torch reference for a CUDA bias")

    def run(bias: Tensor, sq: int, sk: int) -> Tensor:
        with monkeypatch.context() as m:
            m.setattr(ops_masks, "_bias_cells_torch", no_reference)
            return ops_masks.bias_cells(bias, sq, sk)

    yield run


def _check(kernel_only: Callable[[Tensor, int, int], Tensor], bias: Tensor, sq: int, sk: int) -> None:
    ref = ops_masks._bias_cells_torch(bias, sq, sk)
    got = kernel_only(bias, sq, sk)
    assert got.dtype == torch.uint8 and got.is_contiguous() and got.shape == ref.shape, (got.shape, ref.shape)
    if not torch.equal(got, ref):
        bad = (got != ref).nonzero()[:8].tolist()
        pytest.fail(f"{(got != ref).sum().item()} cells differ, first at {bad}: got "
                    f"{[got[tuple(i)].item() for i in bad]}, want {[ref[tuple(i)].item() for i in bad]}")  # fmt: skip


_SHAPES: dict[str, Callable[[int, int], tuple[int, ...]]] = {
    "B11S": lambda sq, sk: (B, 1, 1, sk),
    "B1SS": lambda sq, sk: (B, 1, sq, sk),
    "1HSS": lambda sq, sk: (1, H, sq, sk),
    "BHSS": lambda sq, sk: (B, H, sq, sk),
    "SS": lambda sq, sk: (sq, sk),
    "S": lambda sq, sk: (sk,),
}


@pytest.mark.parametrize("kind", list(_SHAPES))
@pytest.mark.parametrize("sk", SEQLENS_K)
@pytest.mark.parametrize("sq", SEQLENS_Q)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_shapes_match_the_reference(
    request: pytest.FixtureRequest, kernel_only: Callable[[Tensor, int, int], Tensor], dtype: torch.dtype, sq: int,
    sk: int, kind: str,
) -> None:  # fmt: skip
    bias = fill(torch.empty(_SHAPES[kind](sq, sk), dtype=dtype, device=DEVICE), _gen(request))
    _check(kernel_only, bias, sq, sk)


def _views(sq: int, sk: int, dtype: torch.dtype, gen: torch.Generator) -> dict[str, Tensor]:
    def new(*shape: int) -> Tensor:
        return fill(torch.empty(shape, dtype=dtype, device=DEVICE), gen)

    return {
        # SDPA's routers get masks as expanded views: the 0-stride dims are summarized once.
        "SS expanded to BHSS": new(sq, sk).expand(B, H, sq, sk),
        "B1SS expanded over heads": new(B, 1, sq, sk).expand(B, H, sq, sk),
        "B11S expanded over rows": new(B, 1, 1, sk).expand(B, H, sq, sk),
        "key dim size 1": new(B, 1, sq, 1),
        "key dim expanded": new(B, 1, sq, 1).expand(B, 1, sq, sk),
        "transposed (key stride sq)": new(B, 1, sk, sq).transpose(2, 3),
        "key stride 2": new(B, 1, sq, 2 * sk)[..., ::2],
        "misaligned start (scalar path)": new(B, 1, sq, sk + 3)[..., 3:],
        "rows padded to 8 keys (vector path, ragged tail)": new(B, 1, sq, -(-sk // 8) * 8)[..., :sk],
        "rows padded, start one element off": new(B * sq * (-(-sk // 8) * 8) + 1)[1:].view(B, 1, sq, -(-sk // 8) * 8)[..., :sk],
        "row stride sk + 1": new(B, 1, sq, sk + 1)[..., :sk],
        "every other head": new(B, 2 * H, sq, sk)[:, ::2],
    }


@pytest.mark.parametrize(("sq", "sk"), [(1, 1), (7, 15), (64, 16), (65, 17), (113, 1000), (1023, 113), (130, 4096)])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_views_match_the_reference(
    request: pytest.FixtureRequest, kernel_only: Callable[[Tensor, int, int], Tensor], dtype: torch.dtype, sq: int,
    sk: int,
) -> None:  # fmt: skip
    for name, bias in _views(sq, sk, dtype, _gen(request)).items():
        try:
            _check(kernel_only, bias, sq, sk)
        except BaseException as exc:
            raise AssertionError(f"view {name!r}: {exc}") from exc


def test_large_mask_and_key_padding(request: pytest.FixtureRequest,
                                    kernel_only: Callable[[Tensor, int, int], Tensor]) -> None:  # fmt: skip
    # The common cases at their sizes: a (B, 1, S, S) mask (2048 CTAs of 8 warps: several waves)
    # and (B, 1, 1, S) key padding.
    gen = _gen(request)
    _check(kernel_only, fill(torch.empty(8, 1, 2048, 2048, dtype=torch.bfloat16, device=DEVICE), gen), 2048, 2048)
    _check(kernel_only, fill(torch.empty(8, 1, 1, 300_000, dtype=torch.float16, device=DEVICE), gen), 1, 300_000)


@pytest.mark.parametrize("rows", [1, 2])
def test_more_key_chunks_than_the_grid_holds(request: pytest.FixtureRequest, rows: int,
                                             kernel_only: Callable[[Tensor, int, int], Tensor]) -> None:  # fmt: skip
    # 65,536 + 4 chunks of 256 keys: past grid.y's 65,535, so CTAs loop over chunks (one-warp CTAs
    # for one row; 8 warps and the shared-memory OR, reused per chunk, for two).
    sk = 65_540 * 256 - 100
    bias = fill(torch.empty(1, 1, rows, sk, dtype=torch.bfloat16, device=DEVICE), _gen(request))
    _check(kernel_only, bias, rows, sk)


def test_every_byte_written(kernel_only: Callable[[Tensor, int, int], Tensor], monkeypatch: pytest.MonkeyPatch) -> None:
    # The output comes from torch.empty: a summary that left a byte unwritten would show the poison.
    real_empty = torch.empty

    def poisoned(*args: object, **kwargs: object) -> Tensor:
        return real_empty(*args, **kwargs).fill_(0xAB)  # type: ignore[call-overload]

    bias = torch.zeros(B, 1, 65, 17, dtype=torch.bfloat16, device=DEVICE)
    with monkeypatch.context() as m:
        m.setattr(torch, "empty", poisoned)
        got = kernel_only(bias, 65, 17)
    want = torch.zeros(B, 1, 2, 16, dtype=torch.uint8, device=DEVICE)
    want[..., :2] = ops_masks.CELL_VISIBLE  # 17 keys: two cells, zeros (visible, no bias); the rest padding
    assert torch.equal(got, want)


def test_side_stream(request: pytest.FixtureRequest, kernel_only: Callable[[Tensor, int, int], Tensor]) -> None:
    bias = fill(torch.empty(B, 1, 113, 1000, dtype=torch.bfloat16, device=DEVICE), _gen(request))
    ref = ops_masks._bias_cells_torch(bias, 113, 1000)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        got = kernel_only(bias, 113, 1000)
    torch.cuda.current_stream().wait_stream(side)
    assert torch.equal(got, ref)


@pytest.mark.parametrize("shape", [(B, 1, 1, 1000), (B, 1, 113, 1000)], ids=["key padding", "B1SS"])
def test_cuda_graph_replay_sees_the_mask_changed_in_place(
    request: pytest.FixtureRequest, kernel_only: Callable[[Tensor, int, int], Tensor], shape: tuple[int, ...]
) -> None:  # fmt: skip
    gen = _gen(request)
    sq, sk = 113, 1000
    bias = fill(torch.empty(shape, dtype=torch.bfloat16, device=DEVICE), gen)
    kernel_only(bias, sq, sk)  # warm up outside the capture (the device's first call)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=side):  # a host sync inside would fail the capture
        cells = kernel_only(bias, sq, sk)
    for _ in range(3):
        fill(bias, gen)  # new contents, same storage
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(cells, ops_masks._bias_cells_torch(bias, sq, sk))
    bias.fill_(-math.inf)  # every cell hidden: a stale summary would show visible cells
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(cells[..., : -(-sk // 16)], torch.full_like(cells[..., : -(-sk // 16)], ops_masks.CELL_NONZERO))
