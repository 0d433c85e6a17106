# test_kvcache.py (GPU): flashsdpa.attention_with_kvcache on CUDA (issue 11; interim path: torch
# ops for rotary / append / page gather, then the varlen kernel over 2B sequences): outputs and LSE
# against the float64 statement (kvcache_cases.naive) with the project's rule (helpers.check_rule,
# PyTorch's math SDPA in the input dtype as the yardstick), ragged cache_seqlens with 0 and full,
# contiguous and paged caches (16, 64), GQA 4, rotary both layouts, a window, Sq 1 and 4; the
# append writes exactly the new rows (bitwise elsewhere); num_splits changes nothing; no host sync
# (the call runs under torch.cuda.set_sync_debug_mode("error")); CUDA-graph capture and replay of
# a decode step, against eager calls on copies.
from __future__ import annotations

import math

import pytest
import torch

import flashsdpa
from helpers import check_rule, gpu_skip_reason, skip_unless_compiled, torch_math_attention
from kvcache_cases import Case, check_append, make_case, naive

GPU_SKIP = gpu_skip_reason()
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(GPU_SKIP is not None, reason=f"GPU suite: {GPU_SKIP}")]

DEVICE = "cuda"
BF16, F16 = torch.bfloat16, torch.float16


def _pt(case: Case, k_after: torch.Tensor, v_after: torch.Tensor, window: tuple[int, int] | None) -> tuple[torch.Tensor, torch.Tensor]:
    """PyTorch's math SDPA in the input dtype, per sequence, on the rounded appended caches (the
    rule's yardstick), and a float32 LSE from scores rounded to the input dtype."""
    from kvcache_cases import _rotate, _slot

    dtype = case.q.dtype
    batch, seqlen_q, heads_q, head_dim = case.q.shape
    snew = 0 if case.k is None else case.k.shape[1]
    left, right = (window if window is not None else (-1, -1))[0], 0
    scale = 1.0 / math.sqrt(head_dim)
    out = torch.zeros(batch, seqlen_q, heads_q, v_after.shape[-1], dtype=dtype, device=DEVICE)
    lse = torch.full((batch, heads_q, seqlen_q), math.inf, dtype=torch.float32, device=DEVICE)
    for b in range(batch):
        length = int(case.cache_seqlens[b]) + snew
        if length == 0:
            continue
        q = case.q[b].double().cpu()
        if case.cos is not None and snew:
            q = torch.stack([_rotate(q[i], case.cos.cpu(), case.sin.cpu(), int(case.cache_seqlens[b]) + i, case.interleaved) for i in range(seqlen_q)])  # type: ignore[union-attr]
        q = q.to(dtype).to(DEVICE).transpose(0, 1).unsqueeze(0)
        keys = torch.stack([k_after[_slot(case, b, j)] for j in range(length)]).to(dtype).to(DEVICE).transpose(0, 1).unsqueeze(0)
        values = torch.stack([v_after[_slot(case, b, j)] for j in range(length)]).to(dtype).to(DEVICE).transpose(0, 1).unsqueeze(0)
        mask = (left, right, 1)
        out[b] = torch_math_attention(q, keys, values, scale=scale, causal_mode=mask)[0].transpose(0, 1)
        groups = heads_q // keys.shape[1]
        s = (q @ keys.repeat_interleave(groups, 1).transpose(-1, -2) * scale).float()[0]
        rows = torch.arange(seqlen_q, device=DEVICE)[:, None] + length - seqlen_q
        cols = torch.arange(length, device=DEVICE)[None, :]
        seen = cols <= rows
        if left >= 0:
            seen &= cols >= rows - left
        s = s.masked_fill(~seen, -math.inf)
        lse[b] = torch.where(seen.any(-1), torch.logsumexp(s, -1), math.inf)
    return out, lse


def _check(case: Case, window: tuple[int, int] | None = None, num_splits: int | None = None) -> torch.Tensor:
    ref_out, ref_lse, ref_k, ref_v = naive(case, window=window)
    pt_out, pt_lse = _pt(case, ref_k, ref_v, window)
    before = (case.k_cache.clone(), case.v_cache.clone())
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")  # the call must never wait for the device
    try:
        out, lse = flashsdpa.attention_with_kvcache(
            case.q, case.k_cache, case.v_cache, case.k, case.v, window=window, num_splits=num_splits,
            return_lse=True, **case.kwargs(),
        )  # fmt: skip
    finally:
        torch.cuda.set_sync_debug_mode(0)
    check_rule("out", out, pt_out, ref_out)
    check_rule("lse", lse, pt_lse, ref_lse, input_dtype=case.q.dtype)
    check_append(case, before, (ref_k, ref_v), atol=0.07)  # a bf16 ulp at |x| ~ 4
    return out


@pytest.mark.parametrize("dtype", [BF16, F16])
@pytest.mark.parametrize("page_size", [None, 16, 64], ids=["contiguous", "page16", "page64"])
@pytest.mark.parametrize("seqlen_q", [1, 4])
@pytest.mark.parametrize("rotary", [None, "halves", "pairs"])
@pytest.mark.parametrize("window", [None, (100, 0)], ids=["causal", "window100"])
def test_against_float64(dtype: torch.dtype, page_size: int | None, seqlen_q: int, rotary: str | None, window: tuple[int, int] | None) -> None:
    skip_unless_compiled(dtype, 64)
    case = make_case(seqlen_q=seqlen_q, page_size=page_size, rotary=rotary, head_dim=64, capacity=512, batch=6, dtype=dtype, device=DEVICE, seed=seqlen_q)
    _check(case, window)


def test_no_new_rows() -> None:
    skip_unless_compiled(BF16, 64)
    _check(make_case(seqlen_q=1, seqlen_new=0, page_size=16, head_dim=64, dtype=BF16, device=DEVICE))


def test_num_splits_same_answer() -> None:
    skip_unless_compiled(BF16, 128)
    outs = []
    for splits in (None, 1, 2, 7):
        case = make_case(seqlen_q=1, head_dim=128, capacity=1024, dtype=BF16, device=DEVICE, seed=3)
        outs.append(_check(case, num_splits=splits))
    assert all(torch.equal(outs[0], o) for o in outs[1:])


@pytest.mark.parametrize("page_size", [None, 64], ids=["contiguous", "page64"])
def test_cuda_graph_decode_step(page_size: int | None) -> None:
    skip_unless_compiled(BF16, 128)
    static = make_case(seqlen_q=1, head_dim=128, capacity=1024, page_size=page_size, rotary="halves", dtype=BF16, device=DEVICE)
    static.cache_seqlens.clamp_(max=900)  # room for the steps below
    eager = Case(*(t.clone() if isinstance(t, torch.Tensor) else t for t in static.__dict__.values()))

    def step(c: Case) -> torch.Tensor:
        return flashsdpa.attention_with_kvcache(c.q, c.k_cache, c.v_cache, c.k, c.v, **c.kwargs())  # type: ignore[return-value]

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up outside the capture (allocator, lazy init)
        step(Case(*(t.clone() if isinstance(t, torch.Tensor) else t for t in static.__dict__.values())))
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_out = step(static)
        static.cache_seqlens.add_(1)  # the caller advances the lengths, inside the graph too
    gen = torch.Generator(device=DEVICE).manual_seed(0)
    for _ in range(3):  # capture recorded the step without running it: replay, then the same eagerly
        graph.replay()
        ref = step(eager)
        eager.cache_seqlens.add_(1)
        torch.testing.assert_close(static_out, ref, rtol=0, atol=0)
        assert torch.equal(static.cache_seqlens, eager.cache_seqlens)
        assert torch.equal(static.k_cache, eager.k_cache) and torch.equal(static.v_cache, eager.v_cache)
        for name in ("q", "k", "v"):
            new = torch.randn(getattr(static, name).shape, generator=gen, device=DEVICE).to(BF16)
            getattr(static, name).copy_(new)
            getattr(eager, name).copy_(new)
