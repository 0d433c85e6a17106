# test_fwd_schedule.py: the sm90 forward's dynamic tile schedule (fwd_kernel_sm90.cuh's
# PersistentTileScheduler). Masked calls with more tiles than SMs fetch their tiles from a counter
# in the call's own workspace (params.h's workspace, zeroed by the launcher); the shape table's
# problems are too small for it (one CTA per tile), so these shapes have 500-1000 tiles. The
# forward's result does not depend on which CTA runs a tile, so the dynamic schedule must equal the
# static one (the workspace withheld) bit for bit, eagerly, on two streams at once and under
# CUDA-graph capture (where the workspace comes from the graph's pool).
from __future__ import annotations

import collections
import math
import os
import zlib

import pytest
import torch

import flashsdpa
from flashsdpa import _backend, masks
from helpers import (
    Shape,
    check_attention,
    default_scale,
    gpu_skip_reason,
    make_qkv,
    skip_unless_compiled,
    skip_unless_family_bucket,
)

GPU_SKIP = gpu_skip_reason()
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(GPU_SKIP is not None, reason=f"GPU suite: {GPU_SKIP}")]

DEVICE = "cuda"

# (shape, mask): tiles = B x Hq x ceil(Sq / block_m), block_m 192 (d64) or 128 (dynamic needs more
# tiles than SMs: 132 on the H200, so the long cases keep 4 heads); the schedule is
# dynamic at every length at d64 and d128, up to 32 query blocks per head at d256
# (fwd_kernel_sm90.cuh's max_dynamic_blocks).
CASES = [
    (Shape("causal2k", 4, 16, 16, 2048, 2048, 128), masks.CAUSAL_TOP_LEFT),  # 1024 tiles, 2 sections
    (Shape("gqa_bottom_right", 4, 16, 4, 2000, 3000, 64), masks.CAUSAL_BOTTOM_RIGHT),  # 704 tiles, Sq != Sk
    (Shape("window", 4, 16, 16, 2048, 2048, 128), (500, 0, masks.TOP_LEFT)),
    (Shape("window_both", 3, 12, 12, 1999, 1999, 128), (700, 300, masks.TOP_LEFT)),  # ragged last block
    (Shape("causal_d256", 2, 16, 16, 2048, 2048, 256), masks.CAUSAL_TOP_LEFT),  # 512 tiles
    (Shape("q_longer", 2, 32, 32, 2048, 1023, 128), masks.CAUSAL_BOTTOM_RIGHT),  # rows without keys
    (Shape("causal_4k", 1, 16, 16, 4096, 4096, 128), masks.CAUSAL_TOP_LEFT),  # 32 blocks: dynamic at d128
    (Shape("causal_8k_d64", 1, 4, 4, 8192, 8192, 64), masks.CAUSAL_TOP_LEFT),  # 43 blocks, 172 tiles: dynamic at d64
    (Shape("dynamic_4k_d256", 1, 16, 16, 4096, 4096, 256), masks.CAUSAL_TOP_LEFT),  # 32 blocks: d256's last dynamic
    (Shape("static_8k_d256", 1, 4, 4, 8192, 8192, 256), masks.CAUSAL_TOP_LEFT),  # 64 blocks, 256 tiles: static at d256
    # <= 4 query blocks a head: sections of one wave's worth of pairs (sched_group), several sections
    (Shape("wave_sections", 16, 16, 16, 512, 512, 128), masks.CAUSAL_TOP_LEFT),  # 1024 tiles, 33 pairs a section
    (Shape("wave_sections_gqa", 8, 32, 8, 500, 700, 64), masks.CAUSAL_BOTTOM_RIGHT),  # ragged, GQA 4:1
]

# Which CASES the sm90 forward schedules dynamically (the launch gets the counter): the choice itself.
DYNAMIC = {"causal2k": True, "gqa_bottom_right": True, "window": True, "window_both": True, "causal_d256": True,
           "q_longer": True, "causal_4k": True, "causal_8k_d64": True, "dynamic_4k_d256": True, "static_8k_d256": False,
           "wave_sections": True, "wave_sections_gqa": True}  # fmt: skip


def _kwargs(mask: masks.MaskSpec, scale: float) -> dict[str, object]:
    left, right, align = mask
    kwargs: dict[str, object] = {"causal": right == 0, "scale": scale, "return_lse": True,
                                 "causal_alignment": "bottom_right" if align == masks.BOTTOM_RIGHT else "top_left"}  # fmt: skip
    if left >= 0 or right > 0:
        kwargs["window"] = (left, right)
    return kwargs


def _dynamic(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: masks.MaskSpec) -> bool:
    """Whether the launch gets a workspace (the counter) on this machine: the sm90 forward on an
    H100 / H200 with more tiles than SMs and few query blocks."""
    out = torch.empty((*q.shape[:-1], v.shape[-1]), device=DEVICE, dtype=q.dtype)
    return int(_backend._C.fwd_workspace_bytes(_backend._spec(q, k, v, out, None, 1.0, mask, None))) > 0


def _static(monkeypatch: pytest.MonkeyPatch) -> None:
    """Later launches get no workspace: the static schedule."""
    monkeypatch.setattr(_backend, "_FWD_WS", collections.defaultdict(int))


@pytest.mark.parametrize("shape,mask", CASES, ids=[c[0].name for c in CASES])
def test_dynamic_schedule_matches_reference(
    request: pytest.FixtureRequest, shape: Shape, mask: masks.MaskSpec, monkeypatch: pytest.MonkeyPatch
) -> None:  # fmt: skip
    skip_unless_compiled(torch.bfloat16, shape.head_dim, shape.dv)
    gen = torch.Generator(device=DEVICE).manual_seed(zlib.crc32(request.node.nodeid.encode()))
    q, k, v = make_qkv(shape, torch.bfloat16, DEVICE, layout="bshd", generator=gen)
    scale = default_scale(shape.head_dim)
    if torch.cuda.get_device_capability() == (9, 0) and "FLASHSDPA_FAMILY" not in os.environ:
        skip_unless_family_bucket("sm90", shape.head_dim, "forward")
        assert _dynamic(q, k, v, mask) == DYNAMIC[shape.name], "the sm90 forward's schedule choice"
    out, lse = flashsdpa.attention(q, k, v, **_kwargs(mask, scale))
    check_attention(q, k, v, None, out, None, lse, scale=scale, causal_mode=mask)
    # The same launch into NaN-poisoned outputs, in a workspace of garbage (the launcher zeroes the
    # counter: a tile skipped or run twice would show), then with the static schedule: bitwise equal.
    out_p, lse_p = torch.full_like(out, math.nan), torch.full_like(lse, math.nan)
    monkeypatch.setattr(_backend, "new_workspace",
                        lambda nbytes, device: torch.full((nbytes,), 0x55, dtype=torch.uint8, device=device))  # fmt: skip
    _backend.launch_fwd(q, k, v, out_p, lse_p, scale, mask)
    assert torch.equal(out_p, out) and torch.equal(lse_p, lse)
    _static(monkeypatch)
    out_s, lse_s = torch.full_like(out, math.nan), torch.full_like(lse, math.nan)
    _backend.launch_fwd(q, k, v, out_s, lse_s, scale, mask)
    assert torch.equal(out_s, out) and torch.equal(lse_s, lse)


def _causal2k(seed: int) -> tuple[masks.MaskSpec, float, tuple[torch.Tensor, ...]]:
    """CASES[0] (1024 tiles, dynamic): its mask, scale and fresh q, k, v."""
    shape, mask = CASES[0]
    skip_unless_compiled(torch.bfloat16, shape.head_dim, shape.dv)
    gen = torch.Generator(device=DEVICE).manual_seed(seed)
    return mask, default_scale(shape.head_dim), make_qkv(shape, torch.bfloat16, DEVICE, layout="bshd", generator=gen)


def test_dynamic_under_graph_capture_equals_eager() -> None:
    """Captured launches take the dynamic schedule too (their workspace from the graph's pool, the
    counter's zeroing a memset node): every replay gives the eager launch's bits."""
    mask, scale, (q, k, v) = _causal2k(seed=7)
    if torch.cuda.get_device_capability() == (9, 0):
        assert _dynamic(q, k, v, mask), "the sm90 forward should schedule this problem dynamically"
    eager, eager_lse = flashsdpa.attention(q, k, v, **_kwargs(mask, scale))
    out, lse = torch.full_like(eager, math.nan), torch.full_like(eager_lse, math.nan)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):  # warm-up outside the capture, as torch.cuda.graph asks
        _backend.launch_fwd(q, k, v, out, lse, scale, mask)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        _backend.launch_fwd(q, k, v, out, lse, scale, mask)
    for _ in range(3):
        out.fill_(math.nan)
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(out, eager) and torch.equal(lse, eager_lse)


def test_streams_in_parallel_keep_their_own_counters() -> None:
    """Masked forwards on two streams at once, many times: each launch has its own counter (the
    workspace is per call), every result equals the sequential one bit for bit."""
    mask, scale, (q, k, v) = _causal2k(seed=11)
    ref, _ = flashsdpa.attention(q, k, v, **_kwargs(mask, scale))
    streams = [torch.cuda.Stream() for _ in range(2)]
    outs: list[list[torch.Tensor]] = [[], []]
    for s in streams:
        s.wait_stream(torch.cuda.current_stream())
    for _ in range(8):
        for i, s in enumerate(streams):
            with torch.cuda.stream(s):
                outs[i].append(flashsdpa.attention(q, k, v, **_kwargs(mask, scale))[0])
    for s in streams:
        torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    for per_stream in outs:
        for out in per_stream:
            assert torch.equal(out, ref)
