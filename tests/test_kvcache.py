# test_kvcache.py (CPU): flashsdpa.attention_with_kvcache (issue 11) against a float64 statement
# of flash_attn_with_kvcache (kvcache_cases.naive): ragged cache_seqlens with 0 and full,
# contiguous and paged caches (pages 16 and 64), GQA 4, rotary both layouts, a window, Sq 1 and 4;
# the append writes exactly the new rows; argument errors; torch.compile(fullgraph=True) of the
# mutating op. The CUDA impl's Python half (append, then one decode launch): tests/test_decode.py.
from __future__ import annotations

import re

import pytest
import torch

import flashsdpa
from helpers import fresh_compile
from kvcache_cases import Case, check_append, make_case, naive

ATOL = 2e-6  # float32 inputs, float32 reference against float64


def _run(case: Case, **kw: object) -> None:
    ref_out, ref_lse, ref_k, ref_v = naive(case, window=kw.get("window"), causal=kw.get("causal", True))  # type: ignore[arg-type]
    before = (case.k_cache.clone(), case.v_cache.clone())
    out, lse = flashsdpa.attention_with_kvcache(
        case.q, case.k_cache, case.v_cache, case.k, case.v, return_lse=True, **case.kwargs(), **kw
    )
    assert out.shape == ref_out.shape and lse.shape == ref_lse.shape
    assert torch.equal(torch.isinf(lse), torch.isinf(ref_lse)), "rows without keys must have LSE +inf"
    assert (out.double() - ref_out).abs().max().item() <= ATOL
    finite = torch.isfinite(ref_lse)
    assert (lse.double()[finite] - ref_lse[finite]).abs().max().item() <= ATOL
    check_append(case, before, (ref_k, ref_v), atol=1e-6)


@pytest.mark.parametrize("page_size", [None, 16, 64], ids=["contiguous", "page16", "page64"])
@pytest.mark.parametrize("seqlen_q", [1, 4])
@pytest.mark.parametrize("rotary", [None, "halves", "pairs"])
@pytest.mark.parametrize("window", [None, (9, 0)], ids=["causal", "window9"])
def test_against_float64(page_size: int | None, seqlen_q: int, rotary: str | None, window: tuple[int, int] | None) -> None:
    case = make_case(seqlen_q=seqlen_q, page_size=page_size, rotary=rotary, rotary_dim=16, seed=seqlen_q)
    _run(case, window=window)


def test_no_new_rows_and_non_causal() -> None:
    case = make_case(seqlen_q=3, seqlen_new=0, page_size=16)  # cache_seqlens 0 gives rows with no key
    _run(case, causal=False)
    _run(make_case(seqlen_q=2, seqlen_new=0), causal=False)


def test_mha_full_rotary_and_snew_differs() -> None:
    _run(make_case(seqlen_q=2, seqlen_new=3, heads_q=4, heads_kv=4, rotary="halves", capacity=64, page_size=16))


def test_num_splits_does_not_change_the_result() -> None:
    case = make_case(seqlen_q=1, seqlen_new=0)
    outs = [flashsdpa.attention_with_kvcache(case.q, case.k_cache, case.v_cache, cache_seqlens=case.cache_seqlens, num_splits=n) for n in (None, 0, 1, 7)]
    assert all(torch.equal(outs[0], o) for o in outs[1:])


def _bad(case: Case, **changes: object) -> dict[str, object]:
    args: dict[str, object] = {"q": case.q, "k_cache": case.k_cache, "v_cache": case.v_cache, "k": case.k, "v": case.v, **case.kwargs()}
    args.update(changes)
    return args


def _call(args: dict[str, object]) -> None:
    flashsdpa.attention_with_kvcache(
        args.pop("q"), args.pop("k_cache"), args.pop("v_cache"), args.pop("k"), args.pop("v"), **args  # type: ignore[arg-type]
    )


@pytest.mark.parametrize(
    "change, error, message",
    [
        (lambda c: {"q": c.q[0]}, ValueError, "q.dim()=3: needs 4"),
        (lambda c: {"q": c.q.int()}, TypeError, "q.dtype=torch.int32"),
        (lambda c: {"k_cache": c.k_cache.double()}, TypeError, "k_cache.dtype=torch.float64: needs torch.float32"),
        (lambda c: {"k_cache": c.k_cache[:2]}, ValueError, "v_cache (4, 128, 2, 32): differs from k_cache (2, 128, 2, 32)"),
        (lambda c: {"q": c.q[:, :, :7]}, ValueError, "q.size(2)=7 query heads: needs a multiple of k_cache.size(2)=2"),
        (lambda c: {"v": None}, ValueError, "k is given, v is None: pass both or neither"),
        (lambda c: {"k": c.k[:, :, :1]}, ValueError, "k (4, 1, 1, 32): needs (4, 1, 2, 32)"),
        (lambda c: {"cache_seqlens": c.cache_seqlens.long()}, TypeError, "cache_seqlens.dtype=torch.int64: needs torch.int32"),
        (lambda c: {"cache_seqlens": c.cache_seqlens[:3]}, ValueError, "cache_seqlens.size(0)=3: differs from q.size(0)=4"),
        (lambda c: {"cache_seqlens": c.cache_seqlens + 1}, ValueError, "cache_seqlens[1]=128: needs 0 <= cache_seqlens[1] <= 127"),
        (lambda c: {"cache_seqlens": c.cache_seqlens - 1}, ValueError, "cache_seqlens[0]=-1"),
        (lambda c: {"rotary_cos": torch.ones(8, 4)}, ValueError, "rotary_cos and rotary_sin: pass both or neither"),
        (lambda c: {"rotary_cos": torch.ones(8, 4), "rotary_sin": torch.ones(8, 4)}, ValueError, "rotary_cos.size(0)=8: needs at least"),
        (lambda c: {"rotary_cos": torch.ones(200, 17), "rotary_sin": torch.ones(200, 17)}, ValueError, "rotary_cos.size(1)=17: needs 1 <= rotary_dim / 2 <= head_dim / 2 = 16"),
        (lambda c: {"rotary_cos": torch.ones(200, 4), "rotary_sin": torch.ones(200, 5)}, ValueError, "rotary_sin (200, 5): differs"),
        (lambda c: {"k": None, "v": None, "rotary_cos": torch.ones(200, 4), "rotary_sin": torch.ones(200, 4)}, ValueError, "need the new k and v"),
        (lambda c: {"rotary_interleaved": 1}, TypeError, "rotary_interleaved=1: needs a bool"),
        (lambda c: {"num_splits": 129}, ValueError, "num_splits=129: needs None or an int 0 <= num_splits <= 128"),
        (lambda c: {"num_splits": -1}, ValueError, "num_splits=-1"),
        (lambda c: {"window": (3,)}, ValueError, "window=(3,): needs (left, right)"),
        (lambda c: {"causal": 1}, TypeError, "causal=1: needs a bool"),
        (lambda c: {"scale": "x"}, TypeError, "scale='x': needs a float or None"),
    ],
)
def test_bad_inputs(change: object, error: type[Exception], message: str) -> None:
    case = make_case()
    with pytest.raises(error, match=re.escape(message)):
        _call(_bad(case, **change(case)))  # type: ignore[operator]


def test_bad_paged_inputs() -> None:
    case = make_case(page_size=16)
    table = case.block_table
    assert table is not None
    for changes, error, message in (
        ({"block_table": table.long()}, TypeError, "block_table.dtype=torch.int64: needs torch.int32"),
        ({"block_table": table[:2]}, ValueError, "block_table.size(0)=2: differs from q.size(0)=4"),
        ({"block_table": table[0]}, ValueError, "block_table.dim()=1: needs 2"),
        ({"block_table": table.clone().fill_(-1)}, ValueError, "block_table[0, 0]=-1: needs 0 <= page < k_cache.size(0)"),
    ):
        with pytest.raises(error, match=re.escape(message)):
            _call(_bad(case, **changes))
    bad = make_case(page_size=16)
    with pytest.raises(ValueError, match=re.escape("(page_size): needs a positive multiple of 16")):
        _call(_bad(bad, k_cache=bad.k_cache[:, :8], v_cache=bad.v_cache[:, :8]))


def test_schema_declares_the_cache_mutation() -> None:
    schema = torch.ops.flashsdpa.fwd_kvcache.default._schema
    mutated = [a.name for a in schema.arguments if a.alias_info is not None and a.alias_info.is_write]
    assert mutated == ["k_cache", "v_cache"]


def test_torch_compile_fullgraph() -> None:
    case = make_case(seqlen_q=1, page_size=16, rotary="halves")
    eager = make_case(seqlen_q=1, page_size=16, rotary="halves")

    def step(c: Case) -> torch.Tensor:
        return flashsdpa.attention_with_kvcache(c.q, c.k_cache, c.v_cache, c.k, c.v, **c.kwargs())  # type: ignore[return-value]

    with fresh_compile():
        compiled = torch.compile(lambda q, kc, vc, k, v, sl, bt, cos, sin: flashsdpa.attention_with_kvcache(
            q, kc, vc, k, v, cache_seqlens=sl, block_table=bt, rotary_cos=cos, rotary_sin=sin), fullgraph=True)
        out = compiled(case.q, case.k_cache, case.v_cache, case.k, case.v, case.cache_seqlens, case.block_table, case.cos, case.sin)
    ref = step(eager)
    assert torch.allclose(out, ref, atol=1e-6, rtol=0)
    assert torch.equal(case.k_cache, eager.k_cache) and torch.equal(case.v_cache, eager.v_cache), "compiled call must append"
