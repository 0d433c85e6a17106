# test_kvcache.py (GPU): flashsdpa.attention_with_kvcache on CUDA (issue 11: torch ops for rotary /
# append, then the decode kernel, split-KV and GQA-packed, reading paged caches in place): outputs and LSE
# against the float64 statement (kvcache_cases.naive) with the project's rule (helpers.check_rule,
# PyTorch's math SDPA in the input dtype as the yardstick), ragged cache_seqlens with 0 and full,
# contiguous and paged caches (16, 64), GQA 4, rotary both layouts, a window, Sq 1 and 4; the
# append writes exactly the new rows (bitwise elsewhere); num_splits changes nothing; no host sync
# (the call runs under torch.cuda.set_sync_debug_mode("error")); CUDA-graph capture and replay of
# a decode step, against eager calls on copies. The decode grid (below _check's tests): Sq 1, 2,
# 4, 16; Sk 1 .. 128k; GQA groups 1, 4, 8; D 64, 128, 256; pages 16, 64, 256; splits forced 1, 2, 7, 100
# and the heuristic's, each within the rule; outputs and split workspaces NaN-poisoned; LSE within
# 1e-4 relative of float64; dense decode calls (attention()) on the same kernel. The appended rows
# counted by the kernel (seqused_k_add) under forced splits and Dv 64 / 128 / 256; return_lse=False
# writes bitwise the same output.
from __future__ import annotations

import math

import pytest
import torch

import flashsdpa
from helpers import UNDER_SANITIZER, check_rule, gpu_skip_reason, skip_unless_compiled, torch_math_attention
from kvcache_cases import Case, check_append, make_case, naive

GPU_SKIP = gpu_skip_reason()
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(GPU_SKIP is not None, reason=f"GPU suite: {GPU_SKIP}")]

DEVICE = "cuda"
BF16, F16 = torch.bfloat16, torch.float16


def _pt(case: Case, k_after: torch.Tensor, v_after: torch.Tensor, window: tuple[int, int] | None) -> tuple[torch.Tensor, torch.Tensor]:
    """PyTorch's math SDPA in the input dtype, per sequence, on the rounded appended caches (the
    rule's yardstick), and a float32 LSE from scores rounded to the input dtype. Computed on the
    CPU under compute-sanitizer (helpers.UNDER_SANITIZER: racecheck stops inside PyTorch's GPU
    kernels here), returned on the GPU."""
    from kvcache_cases import _rotate, _slot

    dtype = case.q.dtype
    batch, seqlen_q, heads_q, head_dim = case.q.shape
    snew = 0 if case.k is None else case.k.shape[1]
    left, right = (window if window is not None else (-1, -1))[0], 0
    scale = 1.0 / math.sqrt(head_dim)
    device = "cpu" if UNDER_SANITIZER else DEVICE
    out = torch.zeros(batch, seqlen_q, heads_q, v_after.shape[-1], dtype=dtype, device=device)
    lse = torch.full((batch, heads_q, seqlen_q), math.inf, dtype=torch.float32, device=device)
    for b in range(batch):
        length = int(case.cache_seqlens[b]) + snew
        if length == 0:
            continue
        q = case.q[b].double().cpu()
        if case.cos is not None and snew:
            q = torch.stack([_rotate(q[i], case.cos.cpu(), case.sin.cpu(), int(case.cache_seqlens[b]) + i, case.interleaved) for i in range(seqlen_q)])  # type: ignore[union-attr]
        q = q.to(dtype).to(device).transpose(0, 1).unsqueeze(0)
        keys = torch.stack([k_after[_slot(case, b, j)] for j in range(length)]).to(dtype).to(device).transpose(0, 1).unsqueeze(0)
        values = torch.stack([v_after[_slot(case, b, j)] for j in range(length)]).to(dtype).to(device).transpose(0, 1).unsqueeze(0)
        mask = (left, right, 1)
        out[b] = torch_math_attention(q, keys, values, scale=scale, causal_mode=mask)[0].transpose(0, 1)
        groups = heads_q // keys.shape[1]
        s = (q @ keys.repeat_interleave(groups, 1).transpose(-1, -2) * scale).float()[0]
        rows = torch.arange(seqlen_q, device=device)[:, None] + length - seqlen_q
        cols = torch.arange(length, device=device)[None, :]
        seen = cols <= rows
        if left >= 0:
            seen &= cols >= rows - left
        s = s.masked_fill(~seen, -math.inf)
        lse[b] = torch.where(seen.any(-1), torch.logsumexp(s, -1), math.inf)
    return out.to(DEVICE), lse.to(DEVICE)


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
    # Different split counts merge float32 partials in different groupings, so they agree within
    # the rule (each against the reference), not bitwise.
    skip_unless_compiled(BF16, 128)
    for splits in (None, 1, 2, 7):
        case = make_case(seqlen_q=1, head_dim=128, capacity=1024, dtype=BF16, device=DEVICE, seed=3)
        _check(case, num_splits=splits)


@pytest.mark.usefixtures("poisoned")
@pytest.mark.parametrize("head_dim", [64, 128, 256])
@pytest.mark.parametrize("num_splits", [None, 1, 3, 100])
@pytest.mark.parametrize("page_size", [None, 16], ids=["contiguous", "page16"])
def test_append_with_forced_splits(page_size: int | None, num_splits: int | None, head_dim: int) -> None:
    # The appended rows are counted by the kernel (cache_seqlens as given + Snew: params.h's
    # seqused_k_add), through every split count and Dv 64 / 128 / 256 of the combine; ragged
    # lengths with 0 and full (make_case). Sq 2: two new rows, the last query sees the last key.
    skip_unless_compiled(BF16, head_dim)
    case = make_case(seqlen_q=2, page_size=page_size, head_dim=head_dim, capacity=320, batch=5, dtype=BF16,
                     device=DEVICE, seed=head_dim + (num_splits or 0))  # fmt: skip
    _check(case, num_splits=num_splits)


@pytest.mark.usefixtures("poisoned")
@pytest.mark.parametrize("num_splits", [1, 4])
def test_output_without_lse_is_the_same(num_splits: int) -> None:
    # return_lse=False allocates no LSE and the kernels write none: the output is bitwise the one
    # written beside an LSE (same kernels, same partials; the caches get the same append).
    skip_unless_compiled(BF16, 128)
    with_lse, without = (make_case(seqlen_q=1, head_dim=128, capacity=700, dtype=BF16, device=DEVICE, seed=5) for _ in range(2))
    out, _ = flashsdpa.attention_with_kvcache(with_lse.q, with_lse.k_cache, with_lse.v_cache, with_lse.k, with_lse.v,
                                              num_splits=num_splits, return_lse=True, **with_lse.kwargs())  # fmt: skip
    alone = flashsdpa.attention_with_kvcache(without.q, without.k_cache, without.v_cache, without.k, without.v,
                                             num_splits=num_splits, **without.kwargs())  # fmt: skip
    assert isinstance(alone, torch.Tensor) and bool(torch.isfinite(alone).all())
    assert torch.equal(alone, out) and torch.equal(without.k_cache, with_lse.k_cache)


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


# ---- the decode grid: big caches against a vectorized float64 reference ---------------------------


@pytest.fixture
def poisoned(monkeypatch: pytest.MonkeyPatch) -> None:
    """Outputs and split workspaces start as NaN: a row or partial the kernels forget to write fails."""
    from flashsdpa import _backend, kvcache

    real_out, real_lse = kvcache._out, kvcache._lse
    monkeypatch.setattr(kvcache, "_out", lambda q, v_cache: real_out(q, v_cache).fill_(math.nan))
    monkeypatch.setattr(kvcache, "_lse", lambda q: real_lse(q).fill_(math.nan))
    monkeypatch.setattr(_backend, "new_workspace", lambda n, device: torch.full((n,), 0xFF, dtype=torch.uint8, device=device))


def _rows(cache: torch.Tensor, b: int, length: int, block_table: torch.Tensor | None) -> torch.Tensor:
    """Sequence b's first ``length`` cache rows (length, Hkv, D), paged or not."""
    if block_table is None:
        return cache[b, :length]
    pages = math.ceil(length / cache.shape[1])
    return cache[block_table[b, :pages].long()].flatten(0, 1)[:length]


def _references(
    q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, lengths: list[int], block_table: torch.Tensor | None,
    window_left: int, align: int, causal: bool = True,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:  # fmt: skip
    """(ref out, ref lse) in float64 and (pt out, pt lse): PyTorch's math SDPA in the input dtype and
    a float32 LSE of scores rounded to it. q (B, Sq, Hq, D); align 1 bottom-right, 0 top-left."""
    batch, seqlen_q, heads_q, head_dim = q.shape
    scale = 1.0 / math.sqrt(head_dim)
    ref_out = torch.zeros(batch, seqlen_q, heads_q, v_cache.shape[-1], dtype=torch.float64, device=DEVICE)
    ref_lse = torch.full((batch, heads_q, seqlen_q), math.inf, dtype=torch.float64, device=DEVICE)
    pt_out = torch.zeros(batch, seqlen_q, heads_q, v_cache.shape[-1], dtype=q.dtype, device=DEVICE)
    pt_lse = torch.full((batch, heads_q, seqlen_q), math.inf, dtype=torch.float32, device=DEVICE)
    for b, length in enumerate(lengths):
        if length == 0:
            continue
        keys, values = _rows(k_cache, b, length, block_table), _rows(v_cache, b, length, block_table)
        group = heads_q // keys.shape[1]
        rows = torch.arange(seqlen_q, device=DEVICE)[:, None] + (length - seqlen_q if align else 0)
        cols = torch.arange(length, device=DEVICE)[None, :]
        seen = cols <= rows if causal else torch.ones_like(cols <= rows)
        if window_left >= 0:
            seen &= cols >= rows - window_left
        kq, vq = keys.repeat_interleave(group, 1), values.repeat_interleave(group, 1)  # (L, Hq, D)
        s64 = torch.einsum("ihd,jhd->hij", q[b].double(), kq.double()) * scale
        s64 = s64.masked_fill(~seen, -math.inf)
        any_seen = seen.any(-1)  # (Sq,)
        ref_lse[b] = torch.where(any_seen, torch.logsumexp(s64, -1), math.inf)
        p = torch.softmax(s64, -1).nan_to_num(0.0)
        ref_out[b] = torch.einsum("hij,jhd->ihd", p, vq.double())
        mask = (window_left, 0 if causal else -1, align)
        pt_out[b] = torch_math_attention(
            q[b].transpose(0, 1).unsqueeze(0), keys.transpose(0, 1).unsqueeze(0), values.transpose(0, 1).unsqueeze(0),
            scale=scale, causal_mode=mask,
        )[0].transpose(0, 1).nan_to_num(0.0)  # fmt: skip
        s32 = (torch.einsum("ihd,jhd->hij", q[b], kq) * scale).float().masked_fill(~seen, -math.inf)
        pt_lse[b] = torch.where(any_seen, torch.logsumexp(s32, -1), math.inf)
    return ref_out, ref_lse, pt_out, pt_lse


def _check_lse_relative(lse: torch.Tensor, ref_lse: torch.Tensor) -> None:
    assert torch.equal(torch.isinf(lse), torch.isinf(ref_lse)), "rows without keys: LSE +inf, the others finite"
    finite = torch.isfinite(ref_lse)
    rel = ((lse.double() - ref_lse).abs() / ref_lse.abs().clamp_min(1.0))[finite]
    assert rel.numel() == 0 or rel.max().item() <= 1e-4, f"LSE off by {rel.max().item():.2e} relative (> 1e-4)"


def _decode_case(
    batch: int, seqlen_q: int, capacity: int, group: int, head_dim: int, page_size: int | None, dtype: torch.dtype,
    seed: int, heads_kv: int = 2,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None]:  # fmt: skip
    """(q, k_cache, v_cache, cache_seqlens, block_table) with ragged lengths 0, full, 1, 17 and
    capacity - 17 (clamped); paged caches with shuffled pages and out-of-range table entries past
    the pages in use."""
    gen = torch.Generator(device=DEVICE).manual_seed(seed)
    pattern = [0, capacity, min(1, capacity), min(17, capacity), max(capacity - 17, 0), capacity // 2]
    lengths = torch.tensor([pattern[b % len(pattern)] for b in range(batch)], dtype=torch.int32, device=DEVICE)
    heads_q = heads_kv * group
    q = torch.randn(batch, seqlen_q, heads_q, head_dim, generator=gen, device=DEVICE).to(dtype)
    if page_size is None:
        shape = (batch, capacity, heads_kv, head_dim)
        k_cache = torch.randn(shape, generator=gen, device=DEVICE).to(dtype)
        v_cache = torch.randn(shape, generator=gen, device=DEVICE).to(dtype)
        return q, k_cache, v_cache, lengths, None
    pages_per_seq = math.ceil(capacity / page_size)
    num_pages = batch * pages_per_seq + 3
    shape = (num_pages, page_size, heads_kv, head_dim)
    k_cache = torch.randn(shape, generator=gen, device=DEVICE).to(dtype)
    v_cache = torch.randn(shape, generator=gen, device=DEVICE).to(dtype)
    order = torch.randperm(num_pages, generator=gen, device=DEVICE)[: batch * pages_per_seq].view(batch, pages_per_seq)
    table = order.clone()
    for b in range(batch):
        table[b, math.ceil(int(lengths[b]) / page_size) :] = 10**6 + b  # never read
    return q, k_cache, v_cache, lengths, table.to(torch.int32)


def _run_decode(
    batch: int, seqlen_q: int, capacity: int, group: int, head_dim: int, page_size: int | None,
    num_splits: int | None = None, dtype: torch.dtype = BF16, window: tuple[int, int] | None = None, seed: int = 0,
) -> None:  # fmt: skip
    skip_unless_compiled(dtype, head_dim)
    q, k_cache, v_cache, lengths, table = _decode_case(batch, seqlen_q, capacity, group, head_dim, page_size, dtype, seed)
    capacity_tokens = capacity if table is None else table.shape[1] * page_size  # type: ignore[operator]
    lengths = lengths.clamp(max=capacity_tokens)
    k_before, v_before = k_cache.clone(), v_cache.clone()
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        out, lse = flashsdpa.attention_with_kvcache(
            q, k_cache, v_cache, cache_seqlens=lengths, block_table=table, window=window, num_splits=num_splits,
            return_lse=True,
        )  # fmt: skip
    finally:
        torch.cuda.set_sync_debug_mode(0)
    assert torch.equal(k_cache, k_before) and torch.equal(v_cache, v_before), "no new rows: the caches stay as they were"
    left = -1 if window is None else window[0]
    ref_out, ref_lse, pt_out, pt_lse = _references(q, k_cache, v_cache, lengths.tolist(), table, left, 1)
    check_rule("out", out, pt_out, ref_out)
    check_rule("lse", lse, pt_lse, ref_lse, input_dtype=dtype)
    _check_lse_relative(lse, ref_lse)


@pytest.mark.usefixtures("poisoned")
@pytest.mark.parametrize("head_dim", [64, 128, 256])
@pytest.mark.parametrize("group", [1, 4, 8])
@pytest.mark.parametrize("seqlen_q", [1, 2, 4, 16])
def test_decode_shapes(seqlen_q: int, group: int, head_dim: int) -> None:
    _run_decode(6, seqlen_q, 1000, group, head_dim, None, seed=seqlen_q * 31 + group)


@pytest.mark.usefixtures("poisoned")
@pytest.mark.parametrize("page_size", [None, 16, 64, 256], ids=["contiguous", "page16", "page64", "page256"])
@pytest.mark.parametrize("capacity", [1, 17, 128, 1000, 8192])
def test_decode_lengths_and_pages(capacity: int, page_size: int | None) -> None:
    _run_decode(6, 1, capacity, 4, 128, page_size, seed=capacity)


@pytest.mark.usefixtures("poisoned")
@pytest.mark.parametrize("page_size", [None, 256], ids=["contiguous", "page256"])
def test_decode_128k(page_size: int | None) -> None:
    _run_decode(1, 1, 131072, 4, 128, page_size)


@pytest.mark.usefixtures("poisoned")
@pytest.mark.parametrize("num_splits", [None, 1, 2, 7, 100])
@pytest.mark.parametrize("page_size", [None, 64], ids=["contiguous", "page64"])
@pytest.mark.parametrize("seqlen_q", [1, 4])
def test_decode_splits_within_the_rule(num_splits: int | None, page_size: int | None, seqlen_q: int) -> None:
    # Forced counts include more splits than key blocks (7 splits of a 17-key cache: empty splits);
    # 100 splits: the combine's weights in all four of a lane's registers (splits 96-99) and a
    # last group of 4 of its 8 loads in flight.
    _run_decode(6, seqlen_q, 1000, 8, 128, page_size, num_splits=num_splits)
    _run_decode(3, seqlen_q, 17, 4, 128, page_size, num_splits=num_splits)
    # Dv below 128 (lanes with no columns still join the combine's weight shuffles: session 8
    # found a wrong output at Dv 8 when they did not) and above it (a last partial column group).
    for head_dim in (64, 256):
        _run_decode(2, seqlen_q, 1000, 4, head_dim, page_size, num_splits=num_splits)


@pytest.mark.usefixtures("poisoned")
@pytest.mark.parametrize("dtype", [BF16, F16])
@pytest.mark.parametrize("window", [(0, 0), (5, 0), (300, 0)])
def test_decode_windows(dtype: torch.dtype, window: tuple[int, int]) -> None:
    _run_decode(6, 4, 1000, 4, 64, 16, num_splits=3, dtype=dtype, window=window)


@pytest.mark.parametrize("num_splits", [0, 1, 5])
@pytest.mark.parametrize("seqlen_q, seqlen_k", [(1, 1), (1, 4097), (3, 1000), (16, 300)])
@pytest.mark.parametrize("align", ["bottom_right", "top_left"])
def test_dense_decode_through_attention(seqlen_q: int, seqlen_k: int, align: str, num_splits: int) -> None:
    # flashsdpa.attention() with <= 16 query rows runs the decode kernel (SDPA layout, GQA 4).
    skip_unless_compiled(BF16, 128)
    from flashsdpa import _backend, masks

    gen = torch.Generator(device=DEVICE).manual_seed(seqlen_k)
    q = torch.randn(2, 8, seqlen_q, 128, generator=gen, device=DEVICE).to(BF16)
    k, v = (torch.randn(2, 2, seqlen_k, 128, generator=gen, device=DEVICE).to(BF16) for _ in range(2))
    out = torch.full_like(q, math.nan)
    lse = torch.full((2, 8, seqlen_q), math.nan, device=DEVICE)
    mask = masks.make(True, align, None)
    _backend.launch_fwd(q, k, v, out, lse, 128**-0.5, mask, num_splits=num_splits)
    lengths = [seqlen_k, seqlen_k]
    ref_out, ref_lse, pt_out, pt_lse = _references(
        q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), lengths, None, -1, 1 if align == "bottom_right" else 0
    )
    check_rule("out", out.transpose(1, 2), pt_out, ref_out)
    check_rule("lse", lse, pt_lse, ref_lse, input_dtype=BF16)
    _check_lse_relative(lse, ref_lse)


@pytest.mark.parametrize("page_size", [None, 16], ids=["contiguous", "page16"])
@pytest.mark.parametrize("num_splits", [1, 3])
def test_decode_sanitizer_subset(page_size: int | None, num_splits: int) -> None:
    """Small decode cases for compute-sanitizer (scripts/dev/decode_gpu.sh): every path of the
    decode kernel and the combine: paged, ragged, empty sequences, splits, Sq * group > 16."""
    _run_decode(3, 5, 100, 4, 64, page_size, num_splits=num_splits)


@pytest.mark.parametrize("page_size", [None, 16], ids=["contiguous", "page16"])
def test_decode_sanitizer_subset_append(page_size: int | None) -> None:
    """The append path under compute-sanitizer: new rows written by torch ops, lengths counted by
    the kernel (seqused_k_add), 3 splits and the programmatically launched combine."""
    skip_unless_compiled(BF16, 64)
    _check(make_case(seqlen_q=2, page_size=page_size, head_dim=64, capacity=112, batch=3, dtype=BF16, device=DEVICE),
           num_splits=3)  # fmt: skip


def test_decode_sanitizer_subset_bad_block_table() -> None:
    """Block-table entries outside the pool, in pages a sequence uses (bad metadata the host does
    not read on CUDA: that would be a sync): the kernel clamps them into the pool, so the call
    completes and touches no memory outside it (compute-sanitizer runs this with the subset), and
    the sequences whose tables are sound still get the right answer."""
    case = make_case(batch=3, seqlen_q=1, heads_q=8, heads_kv=2, head_dim=64, capacity=128, page_size=16,
                     dtype=BF16, device=DEVICE)  # fmt: skip
    assert case.block_table is not None
    ref_out, _, _, _ = naive(case)
    bad = case.block_table.clone()
    bad[1, 0], bad[1, 1] = -7, 1 << 30  # sequence 1's first pages: outside the pool either way
    out = flashsdpa.attention_with_kvcache(case.q, case.k_cache, case.v_cache, case.k, case.v,
                                           cache_seqlens=case.cache_seqlens, block_table=bad)  # fmt: skip
    torch.cuda.synchronize()  # the context is healthy: no illegal address
    assert bool(torch.isfinite(out).all())
    for b in (0, 2):  # untouched tables: the rule's neighbourhood of the reference
        assert (out[b].double() - ref_out[b].to(DEVICE)).abs().max().item() < 0.05


@pytest.mark.parametrize("page_size", [None, 16], ids=["contiguous", "page16"])
def test_decode_sanitizer_subset_bad_cache_seqlens(page_size: int | None) -> None:
    """cache_seqlens past the cache or negative (not read on the host on CUDA): the append, the
    rotary lookup and the kernel clamp every index into their tables, so the call completes with
    no device-side assert and no access outside the caches; the CUDA context stays healthy."""
    case = make_case(batch=3, seqlen_q=2, heads_q=8, heads_kv=2, head_dim=64, capacity=128, page_size=page_size,
                     rotary="halves", dtype=BF16, device=DEVICE)  # fmt: skip
    lengths = torch.tensor([-5, 127, 10**6], dtype=torch.int32, device=DEVICE)
    out = flashsdpa.attention_with_kvcache(case.q, case.k_cache, case.v_cache, case.k, case.v, cache_seqlens=lengths,
                                           block_table=case.block_table, rotary_cos=case.cos, rotary_sin=case.sin)  # fmt: skip
    torch.cuda.synchronize()
    assert out.shape == case.q.shape and bool(torch.isfinite(out).all())
    torch.ones(1, device=DEVICE).sum().item()  # later work on the device still runs
