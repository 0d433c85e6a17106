# test_fuzz.py: property-based tests (hypothesis) of shapes and options, on CPU, with a fixed budget:
# every strategy is derandomized (the same examples on every run, so CI is reproducible) and
# capped at MAX_EXAMPLES; the whole file runs in well under a minute on two cores.
#   - the direct API (CPU reference) against the float64 textbook, forward and backward;
#   - varlen: any lengths equal per-sequence attention; any corrupted metadata is refused with a
#     ValueError (never a silent wrong answer), exactly when an independent oracle says it is bad;
#   - the routers' decisions: the fast predicates (dense_ok, servable) agree with the full
#     statement (kernel_reasons) on random fake CUDA tensors, strides and storage offsets included.
# The GPU counterpart (kernels against the reference) is tests/gpu/test_fuzz_gpu.py.
from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch import Tensor

import flashsdpa
from flashsdpa import _backend, selection
from helpers import textbook_with_grads

MAX_EXAMPLES = 40
FUZZ = settings(
    max_examples=MAX_EXAMPLES,
    deadline=None,
    derandomize=True,  # a fixed example budget: the same examples on every run
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@st.composite
def problems(draw: st.DrawFn) -> dict[str, object]:
    heads_kv = draw(st.integers(1, 3))
    return {
        "batch": draw(st.integers(0, 2)),
        "heads_q": heads_kv * draw(st.integers(1, 3)),
        "heads_kv": heads_kv,
        "seqlen_q": draw(st.integers(0, 40)),
        "seqlen_k": draw(st.integers(0, 40)),
        "head_dim": draw(st.integers(1, 24)),
        "head_dim_v": draw(st.integers(1, 24)),
        "causal": draw(st.sampled_from(["none", "top_left", "bottom_right"])),
        "scale": draw(st.one_of(st.none(), st.floats(-2.0, 2.0, allow_nan=False))),
        "layout": draw(st.sampled_from(["bhsd", "bshd", "strided"])),
        "dtype": draw(st.sampled_from([torch.float32, torch.float64])),
        "seed": draw(st.integers(0, 2**16)),
    }


def _make(p: dict[str, object]) -> tuple[Tensor, Tensor, Tensor]:
    gen = torch.Generator().manual_seed(int(p["seed"]))  # type: ignore[call-overload]
    b, hq, hkv = int(p["batch"]), int(p["heads_q"]), int(p["heads_kv"])  # type: ignore[call-overload]
    sq, sk, d, dv = (int(p[n]) for n in ("seqlen_q", "seqlen_k", "head_dim", "head_dim_v"))  # type: ignore[call-overload]

    def one(h: int, s: int, dim: int) -> Tensor:
        if p["layout"] == "bshd":
            return torch.randn(b, s, h, dim, generator=gen, dtype=p["dtype"]).transpose(1, 2)  # type: ignore[arg-type]
        if p["layout"] == "strided":  # last-dim stride 2 and a storage offset: copied by the op
            base = torch.randn(b * h * s * dim * 2 + 3, generator=gen, dtype=p["dtype"])  # type: ignore[arg-type]
            return base[3:].as_strided((b, h, s, dim), (h * s * dim * 2, s * dim * 2, dim * 2, 2))
        return torch.randn(b, h, s, dim, generator=gen, dtype=p["dtype"])  # type: ignore[arg-type]

    return one(hq, sq, d), one(hkv, sk, d), one(hkv, sk, dv)


@FUZZ
@given(problems())
def test_reference_matches_textbook(p: dict[str, object]) -> None:
    q, k, v = (t.requires_grad_() for t in _make(p))
    mode = {"none": 0, "top_left": 1, "bottom_right": 2}[str(p["causal"])]
    kwargs: dict[str, object] = {"causal": mode != 0, "scale": p["scale"], "return_lse": True}
    if mode:
        kwargs["causal_alignment"] = p["causal"]
    out, lse = flashsdpa.attention(q, k, v, **kwargs)  # type: ignore[arg-type]
    scale = 1 / math.sqrt(q.shape[-1]) if p["scale"] is None else float(p["scale"])  # type: ignore[arg-type]
    dout = torch.randn_like(out)
    grads = torch.autograd.grad(out, (q, k, v), dout, allow_unused=True) if out.numel() else (None,) * 3
    ref_out, ref_lse, ref_grads = textbook_with_grads(q, k, v, dout, scale=scale, causal_mode=mode)
    # The reference keeps the LSE in float32 (its output format), and the backward recomputes the
    # probabilities from it: float32-level error for float64 inputs too.
    tol = {"atol": 1e-4, "rtol": 1e-4}
    torch.testing.assert_close(out.double(), ref_out, **tol)
    # The LSE is float32 whatever the inputs; +inf where a row sees no key, on both sides.
    torch.testing.assert_close(lse.double(), ref_lse, atol=1e-5, rtol=1e-5)
    for name, g, ref in zip("qkv", grads, ref_grads):
        got = torch.zeros_like(ref) if g is None else g.double()
        torch.testing.assert_close(got, ref, **tol, msg=lambda m, name=name: f"d{name}: {m}")


# ---- varlen: right answers for good metadata, an error for bad -----------------------------------


@st.composite
def packed(draw: st.DrawFn) -> tuple[list[int], list[int], int]:
    batch = draw(st.integers(1, 4))
    lengths_q = draw(st.lists(st.integers(0, 9), min_size=batch, max_size=batch))
    lengths_k = draw(st.lists(st.integers(0, 9), min_size=batch, max_size=batch))
    return lengths_q, lengths_k, draw(st.integers(0, 2**16))


def _offsets(lengths: list[int]) -> Tensor:
    return torch.tensor([0, *torch.tensor(lengths, dtype=torch.int64).cumsum(0).tolist()], dtype=torch.int32)


@FUZZ
@given(packed(), st.sampled_from([0, 1, 2]))
def test_varlen_matches_per_sequence(case: tuple[list[int], list[int], int], mode: int) -> None:
    lengths_q, lengths_k, seed = case
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(sum(lengths_q), 2, 8, generator=gen, dtype=torch.float64)
    k = torch.randn(sum(lengths_k), 1, 8, generator=gen, dtype=torch.float64)
    v = torch.randn(sum(lengths_k), 1, 8, generator=gen, dtype=torch.float64)
    cu_q, cu_k = _offsets(lengths_q), _offsets(lengths_k)
    alignment = "bottom_right" if mode == 2 else "top_left"
    out, lse = flashsdpa.attention_varlen(
        q, k, v, cu_q, cu_k, max(lengths_q), max(lengths_k), causal=mode != 0, causal_alignment=alignment,
        return_lse=True,
    )  # fmt: skip
    for b in range(len(lengths_q)):
        rows_q, rows_k = slice(int(cu_q[b]), int(cu_q[b + 1])), slice(int(cu_k[b]), int(cu_k[b + 1]))
        one = [t[rows].transpose(0, 1).unsqueeze(0) for t, rows in ((q, rows_q), (k, rows_k), (v, rows_k))]
        ref = flashsdpa.attention(*one, causal=mode != 0, causal_alignment=alignment, return_lse=True)
        torch.testing.assert_close(out[rows_q], ref[0][0].transpose(0, 1))
        torch.testing.assert_close(lse[:, rows_q], ref[1][0])


def _oracle_bad(offsets_q: list[int], offsets_k: list[int], rows_q: int, rows_k: int, max_q: int, max_k: int) -> bool:
    """Independent statement of good metadata: both offset lists start at 0, never decrease, end
    within the rows, and the max lengths cover every sequence."""
    for offsets, rows in ((offsets_q, rows_q), (offsets_k, rows_k)):
        if offsets[0] != 0 or offsets[-1] > rows or any(b < a for a, b in zip(offsets, offsets[1:])):
            return True
    longest_q = max(b - a for a, b in zip(offsets_q, offsets_q[1:]))
    longest_k = max(b - a for a, b in zip(offsets_k, offsets_k[1:]))
    return max_q < longest_q or max_k < longest_k or max_q < 0 or max_k < 0


@settings(FUZZ, max_examples=4 * MAX_EXAMPLES)  # no tensors worth the name: cheap examples
@given(
    st.integers(1, 4).flatmap(
        lambda n: st.tuples(
            st.lists(st.integers(-2, 12), min_size=n + 1, max_size=n + 1),
            st.lists(st.integers(-2, 12), min_size=n + 1, max_size=n + 1),
        )
    ),
    st.integers(-1, 12),
    st.integers(-1, 12),
)
def test_varlen_metadata_refused_exactly_when_bad(offsets: tuple[list[int], list[int]], max_q: int, max_k: int) -> None:
    offsets_q, offsets_k = offsets
    q, k = torch.randn(10, 2, 8), torch.randn(10, 2, 8)
    bad = _oracle_bad(offsets_q, offsets_k, 10, 10, max_q, max_k)
    call = lambda: flashsdpa.attention_varlen(  # noqa: E731
        q, k, k, torch.tensor(offsets_q, dtype=torch.int32), torch.tensor(offsets_k, dtype=torch.int32), max_q, max_k
    )
    if bad:
        with pytest.raises(ValueError, match=r"^(cu_seqlens_[qk]|max_seqlen_[qk])"):
            call()
    else:
        out = call()
        assert out.shape == (10, 2, 8) and bool(torch.isfinite(out).all())


# ---- the routers' decisions on fake CUDA tensors -------------------------------------------------


@contextlib.contextmanager
def _fake_cuda(head_dims: tuple[int, ...], dtypes: tuple[str, ...]) -> Iterator[None]:
    from torch._subclasses.fake_tensor import FakeTensorMode

    from conftest import FakeCudaBuild

    saved = (_backend._C, _backend.IMPORT_ERROR)
    _backend._configure(FakeCudaBuild(head_dims=head_dims, dtypes=dtypes))
    try:
        with FakeTensorMode():
            yield
    finally:
        _backend._configure(*saved)


@st.composite
def views(draw: st.DrawFn) -> dict[str, object]:
    heads_kv = draw(st.integers(0, 3))
    return {
        "shape": (
            draw(st.integers(0, 2)), heads_kv * draw(st.integers(1, 3)) + draw(st.sampled_from([0, 0, 0, 1])),
            heads_kv, draw(st.integers(0, 300)), draw(st.integers(0, 300)),
        ),
        "head_dims": (draw(st.sampled_from([8, 16, 60, 64, 72, 128, 136, 256, 264])),) * 2
        if draw(st.booleans()) else (draw(st.sampled_from([32, 64, 128])), draw(st.sampled_from([16, 64, 256]))),
        "dtypes": draw(st.sampled_from([("float16",) * 3, ("bfloat16",) * 3, ("float32",) * 3,
                                        ("float16", "bfloat16", "float16")])),
        "offset": draw(st.sampled_from([0, 0, 8, 4, 1])),
        "last_stride": draw(st.sampled_from([1, 1, 1, 2])),
        "bshd": draw(st.booleans()),
        "build": draw(st.sampled_from([((64, 128, 256), ("float16", "bfloat16")), ((128,), ("bfloat16",))])),
    }  # fmt: skip


def _fake_tensor(b: int, h: int, s: int, d: int, dtype: str, p: dict[str, object]) -> Tensor:
    offset, step = int(p["offset"]), int(p["last_stride"])  # type: ignore[call-overload]
    storage = torch.empty(b * h * s * d * step + offset + 8, dtype=getattr(torch, dtype), device="cuda")
    if p["bshd"]:
        strides = (s * h * d * step, d * step, h * d * step, step)
    else:
        strides = (h * s * d * step, s * d * step, d * step, step)
    return storage.as_strided((b, h, s, d), strides, offset)


@settings(FUZZ, max_examples=4 * MAX_EXAMPLES)
@given(views())
def test_fast_predicates_agree_with_the_full_statement(p: dict[str, object]) -> None:
    b, hq, hkv, sq, sk = p["shape"]  # type: ignore[misc]
    d, dv = p["head_dims"]  # type: ignore[misc]
    dq, dk, dvv = p["dtypes"]  # type: ignore[misc]
    with _fake_cuda(*p["build"]):  # type: ignore[misc]
        q = _fake_tensor(b, hq, sq, d, dq, p)
        k = _fake_tensor(b, hkv, sk, d, dk, p)
        v = _fake_tensor(b, hkv, sk, dv, dvv, p)
        reasons = selection.kernel_reasons(q, k, v)
        assert selection.dense_ok(q, k, v) == (reasons == []), reasons
        assert (selection.dense_reason(q, k, v) is None) == (reasons == [])
        if reasons:
            assert selection.dense_reason(q, k, v) == reasons[0]
        assert selection.servable(q, k, v) == (selection.kernel_reasons(q, k, v, layout=False) == [])
        for reason in reasons:  # every reason names an argument or a limit, in one sentence
            assert ": " in reason and "\n" not in reason, reason
