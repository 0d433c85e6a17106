# test_split_tail.py: the sm90 forward's split tail (cuda/common/tile_scheduler.cuh's TailSplit).
# Unmasked dense d128 forwards with more tiles than SMs and a partial last round compute the last
# tiles in pieces of key blocks on every SM and merge them (fwd_kernel_sm90.cuh's merge_pieces).
# The shape table's problems are too small for it (one CTA per tile), so these have 144-2112 tiles
# of 128 queries on the H200's 132 SMs. Each is checked against the float64 reference with the
# project's rule (out and LSE, NaN-poisoned), run twice for the same bits (the merge sums the
# pieces in worker order, whichever finishes last), with a garbage workspace (the launcher zeroes
# the tickets; every slot is written before it is read), and against the same call without the
# split. The plan itself: tests/cpp/tail_split_plan.cu (CPU suite).
from __future__ import annotations

import math
import zlib

import pytest
import torch

from flashsdpa import _backend, masks
from helpers import Shape, check_attention, default_scale, gpu_skip_reason, make_qkv, skip_unless_compiled

GPU_SKIP = gpu_skip_reason()
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(GPU_SKIP is not None, reason=f"GPU suite: {GPU_SKIP}")]

DEVICE = "cuda"
BF16 = torch.bfloat16

# tiles = B x Hq x ceil(Sq / 128); units = ceil(Sk / 128) key blocks per tile, >= 16 for a split
# (fwd_kernel_sm90.cuh's kTailSplitMinBlocks).
CASES = [
    Shape("all_in_tail", 2, 9, 9, 1000, 2000, 128),  # 144 tiles: remainder 12 < 66, so the tail is 12 + 132
    Shape("gqa_ragged_keys", 1, 20, 5, 1100, 2077, 128),  # 180 tiles, 17 key blocks, the last one partial
    Shape("rounds_then_tail", 3, 16, 16, 2048, 2500, 128),  # 768 tiles: 660 whole, a tail of 108
    Shape("head_dims_in_bucket", 2, 12, 12, 1500, 2100, 96, 72),  # 288 tiles, bucket 128, Dqk != Dv
    Shape("bench_like", 4, 16, 16, 2048, 2048, 128),  # 1024 tiles: 924 whole, a tail of 100
    Shape("long", 1, 16, 16, 8192, 4100, 128),  # 1024 tiles of 33 key blocks
]


def _inputs(request: pytest.FixtureRequest, shape: Shape) -> tuple[torch.Tensor, ...]:
    skip_unless_compiled(BF16, shape.head_dim, shape.dv)
    gen = torch.Generator(device=DEVICE).manual_seed(zlib.crc32(request.node.nodeid.encode()))
    return make_qkv(shape, BF16, DEVICE, layout="bshd", generator=gen)


def _launch(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    out = torch.full((*q.shape[:-1], v.shape[-1]), math.nan, device=DEVICE, dtype=q.dtype)
    lse = torch.full(q.shape[:-1], math.nan, device=DEVICE, dtype=torch.float32)
    _backend.launch_fwd(q, k, v, out, lse, scale, masks.NO_MASK)
    return out, lse


def _workspace_bytes(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> int:
    out = torch.empty((*q.shape[:-1], v.shape[-1]), device=DEVICE, dtype=q.dtype)
    spec = _backend._spec(q, k, v, out, None, 1.0, masks.NO_MASK, None)
    return int(_backend._C.fwd_workspace_bytes(spec))


def _split_kernel_serves() -> bool:
    return torch.cuda.get_device_capability() == (9, 0) and any(f["family"] == "sm90" for f in _backend.CAPABILITIES)


@pytest.mark.parametrize("shape", CASES, ids=[c.name for c in CASES])
def test_split_tail_matches_reference(request: pytest.FixtureRequest, shape: Shape, monkeypatch: pytest.MonkeyPatch) -> None:
    q, k, v = _inputs(request, shape)
    scale = default_scale(shape.head_dim)
    if _split_kernel_serves():
        assert _workspace_bytes(q, k, v) > 0, "the sm90 forward should split this problem's tail"
    out, lse = _launch(q, k, v, scale)
    check_attention(q, k, v, None, out, None, lse, scale=scale, causal_mode=masks.NO_MASK)
    again = _launch(q, k, v, scale)
    assert torch.equal(again[0], out) and torch.equal(again[1], lse), "the merge must give the same bits every run"
    # A workspace of garbage: the tickets must be zeroed by the launcher, every slot written first.
    monkeypatch.setattr(_backend, "new_workspace",
                        lambda nbytes, device: torch.full((nbytes,), 0x7F, dtype=torch.uint8, device=device))  # fmt: skip
    garbage = _launch(q, k, v, scale)
    assert torch.equal(garbage[0], out) and torch.equal(garbage[1], lse)
    # Without the split (the plain round robin): correct too.
    monkeypatch.setattr(_backend, "_FWD_WS", {key: 0 for key in _backend._FWD_WS})
    plain, plain_lse = _launch(q, k, v, scale)
    check_attention(q, k, v, None, plain, None, plain_lse, scale=scale, causal_mode=masks.NO_MASK)


def test_split_tail_under_graph_capture(request: pytest.FixtureRequest) -> None:
    """Captured launches split too (the workspace from the graph's pool, the tickets' zeroing a
    memset node): every replay gives the eager launch's bits."""
    shape = CASES[2]
    q, k, v = _inputs(request, shape)
    scale = default_scale(shape.head_dim)
    eager, eager_lse = _launch(q, k, v, scale)
    out, lse = torch.full_like(eager, math.nan), torch.full_like(eager_lse, math.nan)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):  # warm-up outside the capture, as torch.cuda.graph asks
        _backend.launch_fwd(q, k, v, out, lse, scale, masks.NO_MASK)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        _backend.launch_fwd(q, k, v, out, lse, scale, masks.NO_MASK)
    for _ in range(3):
        out.fill_(math.nan)
        lse.fill_(math.nan)
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(out, eager) and torch.equal(lse, eager_lse)


@pytest.mark.parametrize("head_dim,seqlen_k", [(64, 2000), (256, 2000), (128, 1999 - 128)])
def test_no_workspace_where_no_split(head_dim: int, seqlen_k: int) -> None:
    """Only the d128 kernel splits (FwdTraitsSm90::kTailSplit: the others spill with it), and only
    tiles of 16 key blocks or more (15 here: kTailSplitMinBlocks)."""
    skip_unless_compiled(BF16, head_dim)
    if head_dim not in _backend.BUILD_INFO["head_dims"]:
        # A narrowed build serves d64 with its d128 kernel, which splits (session 19's d128-only run).
        served_by = min((d for d in _backend.BUILD_INFO["head_dims"] if d >= head_dim), default=None)
        pytest.skip(f"head dim {head_dim} runs on the d{served_by} kernel in this build")
    q, k, v = make_qkv(Shape("other", 2, 9, 9, 1000, seqlen_k, head_dim), BF16, DEVICE, layout="bshd")
    assert _workspace_bytes(q, k, v) == 0


def test_nan_in_one_key_row_stays_in_its_rows(request: pytest.FixtureRequest) -> None:
    """NaN in one key of one head: that head's rows are NaN (every piece's partial of the tile that
    holds the key, merged), the others exactly as without it."""
    shape = CASES[0]
    q, k, v = _inputs(request, shape)
    scale = default_scale(shape.head_dim)
    clean, _ = _launch(q, k, v, scale)
    k = k.clone()
    k[1, 3, 500] = math.nan  # batch 1, head 3 (BHSD view), key 500: in the middle of a tile's keys
    out, _ = _launch(q, k, v, scale)
    nan_heads = torch.isnan(out).any(dim=-1).any(dim=-1)  # (B, H)
    expected = torch.zeros_like(nan_heads)
    expected[1, 3] = True
    assert torch.equal(nan_heads, expected)
    assert bool(torch.isnan(out[1, 3]).all())
    keep = ~expected
    assert torch.equal(out[keep], clean[keep])
