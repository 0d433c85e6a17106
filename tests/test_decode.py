# test_decode.py (CPU): the decode path's Python half (issue 11) against a stand-in _C
# (conftest.FakeCudaBuild): which dense calls ask for the decode kernel, the spec's decode item
# (split count, one workspace allocation split at a 256-byte boundary, block table, page size),
# flashsdpa::fwd_kvcache's CUDA impl (rotary and append as torch ops, then one launch whose
# per-sequence key counts are cache_seqlens + Snew on the device, the cache read in place) and the
# plan cache's bound. The kernels themselves: tests/gpu/test_kvcache.py.
from __future__ import annotations

from typing import Any

import pytest
import torch

from flashsdpa import _backend, kvcache, masks
from kvcache_cases import make_case, naive
from kvcache_cases import written as rows_written

BF16 = torch.bfloat16


@pytest.fixture
def recorded(fake_build: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setattr(_backend, "_current_stream", lambda device: 77)
    return fake_build()


def test_dense_decode_gets_the_decode_item(recorded: Any) -> None:
    q = torch.empty(2, 8, 1, 64, dtype=BF16)  # (B, Hq, Sq, D): one query token, GQA 4
    k = v = torch.empty(2, 2, 300, 64, dtype=BF16)
    out, lse = torch.empty_like(q), torch.empty(2, 8, 1)
    _backend.launch_fwd(q, k, v, out, lse, 0.125, masks.CAUSAL_BOTTOM_RIGHT)
    [(name, (spec,))] = recorded.calls
    assert name == "fwd" and len(spec) == 9 and spec[2] == (2, 8, 2, 1, 300, 64, 64, -1, -1)
    splits, o_accum, lse_accum, o_bytes, lse_bytes, table, table_stride, page_size, num_pages, added = spec[8]
    rows = 2 * 8 * 1 * 3  # the stand-in's heuristic says 3 splits
    assert splits == 3 and (o_bytes, lse_bytes) == (rows * 64 * 4, rows * 4)
    assert o_accum != 0 and lse_accum - o_accum == (o_bytes + 255) // 256 * 256  # one buffer, LSEs 256-aligned
    assert (table, table_stride, page_size, num_pages, added) == (0, 0, 0, 0, 0)


def test_forced_single_split_needs_no_workspace(recorded: Any) -> None:
    q = out = torch.empty(1, 4, 2, 64, dtype=BF16)
    k = v = torch.empty(1, 4, 40, 64, dtype=BF16)
    _backend.launch_fwd(q, k, v, out, None, 0.125, masks.NO_MASK, num_splits=1)
    [(_, (spec,))] = recorded.calls
    assert spec[8] == (1, 0, 0, 0, 0, 0, 0, 0, 0, 0)


def test_longer_queries_keep_the_forward(recorded: Any) -> None:
    q = out = torch.empty(1, 4, _backend.DECODE_MAX_SEQLEN_Q + 1, 64, dtype=BF16)
    k = v = torch.empty(1, 4, 40, 64, dtype=BF16)
    _backend.launch_fwd(q, k, v, out, None, 0.125, masks.NO_MASK, num_splits=5)
    [(_, (spec,))] = recorded.calls
    assert len(spec) == 8  # no decode item: num_splits has nothing to split there


@pytest.mark.parametrize("page_size", [None, 16])
def test_kvcache_cuda_impl_appends_then_launches_once(recorded: Any, page_size: int | None) -> None:
    case = make_case(seqlen_q=2, page_size=page_size, rotary="halves", batch=3, head_dim=64, dtype=BF16)
    _, _, ref_k, ref_v = naive(case)
    lengths_before = case.cache_seqlens.clone()
    out, lse = kvcache._fwd_kvcache_cuda(
        case.q, case.k_cache, case.v_cache, case.k, case.v, case.cache_seqlens, case.block_table, case.cos, case.sin,
        case.interleaved, 0.125, list(masks.CAUSAL_BOTTOM_RIGHT), 7,
    )  # fmt: skip
    # The append ran (as torch ops) before the launch: the new rows are in the caches.
    written = rows_written(case)
    assert torch.allclose(case.k_cache[written].double(), ref_k[written], atol=0.07)
    assert torch.equal(case.v_cache[written].double(), ref_v[written])
    assert torch.equal(case.cache_seqlens, lengths_before)  # the caller advances the lengths
    [(name, (spec,))] = recorded.calls
    assert name == "fwd" and out.shape == (3, 2, 8, 64) and lse.shape == (3, 8, 2)
    pointers, strides, sizes, mask, scale, dtype, _, stream = spec[:8]
    capacity = 128  # make_case's
    assert sizes == (3, 8, 2, 2, capacity, 64, 64, -1, -1) and mask == masks.CAUSAL_BOTTOM_RIGHT and scale == 0.125
    assert pointers[1:5] == (case.k_cache.data_ptr(), case.v_cache.data_ptr(), out.data_ptr(), lse.data_ptr())
    # seqused_k is cache_seqlens itself (no device add), the kernel adds the Snew rows appended.
    assert pointers[5:7] == (0, 0) and pointers[7] == case.cache_seqlens.data_ptr()
    qs, ks = out.stride(), case.k_cache.stride()
    assert strides[1] == (ks[0], ks[2], ks[1]) and strides[3] == (qs[0], qs[2], qs[1]) and strides[4] == lse.stride()
    splits, *_, table, table_stride, page, num_pages, added = spec[8]
    assert splits == 7 and added == 2  # make_case's seqlen_new
    if page_size is None:
        assert (table, table_stride, page, num_pages) == (0, 0, 0, 0)
    else:
        assert case.block_table is not None
        assert (table, table_stride, page) == (case.block_table.data_ptr(), case.block_table.stride(0), page_size)
        assert num_pages == case.k_cache.shape[0]  # the bound the kernel clamps block-table entries to


def test_kvcache_without_new_rows_passes_the_lengths(recorded: Any) -> None:
    case = make_case(seqlen_q=1, seqlen_new=0, batch=2, head_dim=64, dtype=BF16)
    kvcache._fwd_kvcache_cuda(
        case.q, case.k_cache, case.v_cache, None, None, case.cache_seqlens, None, None, None, False, 0.125,
        list(masks.CAUSAL_BOTTOM_RIGHT), 0,
    )  # fmt: skip
    [(_, (spec,))] = recorded.calls
    assert spec[0][7] == case.cache_seqlens.data_ptr() and spec[8][9] == 0  # nothing appended, nothing added


def test_plan_cache_is_bounded(recorded: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_backend, "_DECODE_CACHE_SIZE", 4)
    for seqlen_k in range(1, 10):  # a dense decode loop: one new shape per token
        _backend.decode_layout(0, 1, (1, 8, 2, 1, seqlen_k, 64, 64, -1, -1), masks.CAUSAL_BOTTOM_RIGHT, False, 0)
    assert 1 <= len(_backend._DECODE) <= 4


def test_attention_with_kvcache_calls_the_cuda_code_directly(recorded: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    # Nothing records or traces an eager call: attention_with_kvcache runs the op's CUDA code
    # itself (no dispatcher: tens of microseconds a token on the H200). CPU tensors that answer
    # is_cuda=True would reach the op's CPU implementation (the reference, no launch) through the
    # dispatcher, so the one recorded launch proves the direct call.
    monkeypatch.setattr(torch.Tensor, "is_cuda", property(lambda self: True))
    case = make_case(seqlen_q=1, page_size=None, rotary=None, batch=2, head_dim=64, dtype=BF16)
    out = kvcache.attention_with_kvcache(case.q, case.k_cache, case.v_cache, case.k, case.v,
                                         cache_seqlens=case.cache_seqlens)  # fmt: skip
    [(name, (spec,))] = recorded.calls
    assert name == "fwd" and out.shape == case.q.shape[:3] + (case.v_cache.shape[3],)
    assert spec[0][4] == 0  # no LSE asked for: none allocated, none written
    out, lse = kvcache.attention_with_kvcache(case.q, case.k_cache, case.v_cache, cache_seqlens=case.cache_seqlens,
                                              return_lse=True)  # fmt: skip
    (_, (spec,)) = recorded.calls[1]
    assert spec[0][4] == lse.data_ptr() and lse.shape == (2, 8, 1) and lse.dtype == torch.float32
