# test_ops.py: the flashsdpa:: torch ops and the direct API on CPU (the reference path): opcheck,
# torch.compile(fullgraph=True), autograd, output layouts, zero-size inputs and the errors bad
# arguments raise. The CUDA impls' own logic (empty problems, checks, counting) runs on
# FakeTensors with a stand-in CUDA build and recorded launches.
from __future__ import annotations

import math
import re
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch
from torch import Tensor

import flashsdpa
from flashsdpa import _backend, ops, masks
from helpers import EMPTY_SHAPES, Shape, make_qkv, textbook_attention, textbook_with_grads

F16, BF16, F32, F64 = torch.float16, torch.bfloat16, torch.float32, torch.float64
CASES = [
    Shape("tiny", 1, 2, 2, 7, 7, 16),
    Shape("q_longer", 2, 2, 1, 13, 5, 8),  # MQA; bottom-right leaves 8 rows without keys
    Shape("k_longer", 1, 4, 2, 5, 13, 8, 16),  # GQA, value head dim wider
]


# ---- opcheck: schema, fake impl vs real, autograd registration, AOT dispatch ----------------------


@pytest.mark.parametrize("causal_mode", [0, 1, 2])
@pytest.mark.parametrize("shape", CASES, ids=str)
def test_opcheck_fwd(shape: Shape, causal_mode: int) -> None:
    q, k, v = make_qkv(shape, F32, layout="bshd", requires_grad=True)
    torch.library.opcheck(torch.ops.flashsdpa.fwd.default, (q, k, v, 0.5, list(masks.BY_CAUSAL_MODE[causal_mode])))


@pytest.mark.parametrize("shape", CASES, ids=str)
def test_opcheck_bwd(shape: Shape) -> None:
    q, k, v = make_qkv(shape, F32)
    out, lse = torch.ops.flashsdpa.fwd.default(q, k, v, 0.5, list(masks.CAUSAL_BOTTOM_RIGHT))
    dout = torch.randn_like(out)
    torch.library.opcheck(torch.ops.flashsdpa.bwd.default, (dout, q, k, v, out, lse, 0.5, list(masks.CAUSAL_BOTTOM_RIGHT)))


def packed(
    lengths_q: list[int],
    lengths_k: list[int],
    heads: int = 2,
    heads_kv: int = 1,
    d: int = 8,
    dv: int = 8,
    dtype: torch.dtype = F32,
) -> tuple[Tensor, ...]:
    q = torch.randn(sum(lengths_q), heads, d, dtype=dtype)
    k = torch.randn(sum(lengths_k), heads_kv, d, dtype=dtype)
    v = torch.randn(sum(lengths_k), heads_kv, dv, dtype=dtype)
    cu_q = torch.tensor([0, *torch.tensor(lengths_q).cumsum(0).tolist()], dtype=torch.int32)
    cu_k = torch.tensor([0, *torch.tensor(lengths_k).cumsum(0).tolist()], dtype=torch.int32)
    return q, k, v, cu_q, cu_k


def test_opcheck_varlen() -> None:
    q, k, v, cu_q, cu_k = packed([3, 0, 5], [4, 2, 6])
    for t in (q, k, v):
        t.requires_grad_(True)
    torch.library.opcheck(torch.ops.flashsdpa.fwd_varlen.default, (q, k, v, cu_q, cu_k, 5, 6, 0.3, [-1, 0, 0]))
    out, lse = torch.ops.flashsdpa.fwd_varlen.default(q, k, v, cu_q, cu_k, 5, 6, 0.3, [-1, 0, 0])
    args = (torch.randn_like(out), q.detach(), k.detach(), v.detach(), out.detach(), lse, cu_q, cu_k, 5, 6, 0.3, [-1, 0, 0])
    torch.library.opcheck(torch.ops.flashsdpa.bwd_varlen.default, args)


# ---- the direct API on the reference path --------------------------------------------------------


@pytest.mark.parametrize("alignment", ["top_left", "bottom_right"])
@pytest.mark.parametrize("shape", CASES, ids=str)
def test_attention_matches_textbook(shape: Shape, alignment: str) -> None:
    q, k, v = make_qkv(shape, F64, requires_grad=True)
    mode = {"top_left": 1, "bottom_right": 2}[alignment]
    out, lse = flashsdpa.attention(q, k, v, causal=True, causal_alignment=alignment, scale=0.3, return_lse=True)
    dout = torch.randn_like(out)
    grads = torch.autograd.grad(out, (q, k, v), dout)
    ref_out, ref_lse, ref_grads = textbook_with_grads(q, k, v, dout, scale=0.3, causal_mode=mode)
    torch.testing.assert_close(out, ref_out)
    # The LSE is float32 (PyTorch's flash format) even for float64 inputs; +inf on rows without keys.
    torch.testing.assert_close(lse, ref_lse.float())
    for ours, ref in zip(grads, ref_grads):
        torch.testing.assert_close(ours, ref, atol=1e-6, rtol=1e-6)


def test_attention_defaults() -> None:
    q, k, v = make_qkv(Shape("gqa", 1, 4, 2, 6, 9, 16), F32)
    ref_out, _ = textbook_attention(q, k, v, scale=1 / math.sqrt(16), causal_mode=0, dtype=F32)
    torch.testing.assert_close(flashsdpa.attention(q, k, v), ref_out)


def test_output_keeps_query_layout() -> None:
    # SDPA's flash ops return empty_like(query): a model's transpose(1, 2).reshape(...) stays a view.
    q, k, v = make_qkv(Shape("s", 2, 4, 4, 5, 5, 16), F32, layout="bshd")
    assert flashsdpa.attention(q, k, v).stride() == q.stride()
    q, k, v = make_qkv(Shape("dv", 2, 4, 4, 5, 5, 16, 8), F32, layout="bshd")
    out = flashsdpa.attention(q, k, v)
    assert out.shape == (2, 4, 5, 8) and out.transpose(1, 2).is_contiguous()
    q, k, v = make_qkv(Shape("dv", 2, 4, 4, 5, 5, 16, 8), F32)
    assert flashsdpa.attention(q, k, v).is_contiguous()


def test_lse_carries_no_gradient() -> None:
    q, k, v = make_qkv(CASES[0], F32, requires_grad=True)
    out, lse = flashsdpa.attention(q, k, v, return_lse=True)
    assert out.requires_grad and not lse.requires_grad


def test_double_backward_raises() -> None:
    q, k, v = make_qkv(CASES[0], F64, requires_grad=True)
    out = flashsdpa.attention(q, k, v)
    (dq,) = torch.autograd.grad(out.sum(), q, create_graph=True)
    with pytest.raises(RuntimeError, match="double backward"):
        dq.sum().backward()


@pytest.mark.parametrize("shape", EMPTY_SHAPES, ids=str)
def test_zero_size_inputs(shape: Shape) -> None:
    q, k, v = make_qkv(shape, F32, requires_grad=True)
    out, lse = flashsdpa.attention(q, k, v, causal=True, return_lse=True)
    assert out.shape == (shape.batch, shape.heads_q, shape.seqlen_q, shape.dv) and lse.shape == out.shape[:3]
    if out.numel():  # no keys: every row sees nothing, so output 0 and LSE +inf
        assert bool((out == 0).all()) and bool((lse == math.inf).all())
    grads = torch.autograd.grad(out, (q, k, v), torch.ones_like(out), allow_unused=True)
    for g, t in zip(grads, (q, k, v)):
        assert g is not None and g.shape == t.shape and bool((g == 0).all())


def test_varlen_matches_per_sequence_attention() -> None:
    lengths_q, lengths_k = [3, 0, 7, 1], [5, 4, 2, 0]
    q, k, v, cu_q, cu_k = packed(lengths_q, lengths_k, heads=4, heads_kv=2, d=8, dv=16, dtype=F64)
    for t in (q, k, v):
        t.requires_grad_(True)
    out, lse = flashsdpa.attention_varlen(
        q, k, v, cu_q, cu_k, 7, 5, causal=True, causal_alignment="bottom_right", return_lse=True
    )
    assert out.shape == (11, 4, 16) and lse.shape == (4, 11)
    dout = torch.randn_like(out)
    grads = torch.autograd.grad(out, (q, k, v), dout)
    for b in range(len(lengths_q)):
        rows_q = slice(int(cu_q[b]), int(cu_q[b + 1]))
        rows_k = slice(int(cu_k[b]), int(cu_k[b + 1]))
        one = [t[rows].transpose(0, 1).unsqueeze(0) for t, rows in ((q, rows_q), (k, rows_k), (v, rows_k))]
        ref_out, ref_lse, ref_grads = textbook_with_grads(
            *one, dout[rows_q].transpose(0, 1).unsqueeze(0), scale=1 / math.sqrt(8), causal_mode=2
        )
        torch.testing.assert_close(out[rows_q], ref_out[0].transpose(0, 1))
        torch.testing.assert_close(lse[:, rows_q], ref_lse[0].float())
        torch.testing.assert_close(grads[0][rows_q], ref_grads[0][0].transpose(0, 1), atol=1e-6, rtol=1e-6)
        torch.testing.assert_close(grads[1][rows_k], ref_grads[1][0].transpose(0, 1), atol=1e-6, rtol=1e-6)
        torch.testing.assert_close(grads[2][rows_k], ref_grads[2][0].transpose(0, 1), atol=1e-6, rtol=1e-6)


# ---- torch.compile -------------------------------------------------------------------------------


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_compile_fullgraph(backend: str) -> None:
    torch._dynamo.reset()
    q, k, v = make_qkv(Shape("c", 2, 4, 2, 9, 11, 16), F32, layout="bshd", requires_grad=True)

    def layer(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        out = flashsdpa.attention(q * 2, k, v, causal=True, causal_alignment="bottom_right")
        return out.transpose(1, 2).flatten(2).sin()

    compiled = torch.compile(layer, backend=backend, fullgraph=True)
    got = compiled(q, k, v)
    want = layer(q, k, v)
    torch.testing.assert_close(got, want)
    dout = torch.randn_like(got)
    torch.testing.assert_close(torch.autograd.grad(got, (q, k, v), dout), torch.autograd.grad(want, (q, k, v), dout))
    torch._dynamo.reset()


def test_compile_fullgraph_varlen() -> None:
    torch._dynamo.reset()
    q, k, v, cu_q, cu_k = packed([3, 5], [4, 6])

    def f(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        return flashsdpa.attention_varlen(q, k, v, cu_q, cu_k, 5, 6, causal=True) + 1

    torch.testing.assert_close(torch.compile(f, backend="aot_eager", fullgraph=True)(q, k, v), f(q, k, v))
    torch._dynamo.reset()


# ---- clear errors for bad arguments --------------------------------------------------------------


def _bad_calls() -> list[tuple[str, Any, type[Exception], str]]:
    q, k, v = make_qkv(Shape("s", 2, 4, 2, 5, 7, 16), F32)
    return [
        ("list query", lambda: flashsdpa.attention([1.0], k, v), TypeError, "query must be a torch.Tensor, got list"),
        (
            "3-D query",
            lambda: flashsdpa.attention(q[0], k, v),
            ValueError,
            "query.dim()=3: needs 4 (batch, heads, seq_len, head_dim)",
        ),
        (
            "int dtype",
            lambda: flashsdpa.attention(q.long(), k.long(), v.long()),
            TypeError,
            "query.dtype=torch.int64: needs one of float16, bfloat16, float32, float64 on cpu",
        ),
        (
            "mixed dtypes",
            lambda: flashsdpa.attention(q, k.double(), v),
            TypeError,
            "key.dtype=torch.float64: differs from query.dtype=torch.float32",
        ),
        (
            "devices",
            lambda: flashsdpa.attention(q, k.to("meta"), v),
            ValueError,
            "key.device=meta: differs from query.device=cpu",
        ),
        (
            "batch",
            lambda: flashsdpa.attention(q, k[:1], v[:1]),
            ValueError,
            "key.size(0)=1: differs from query.size(0)=2 (batch)",
        ),
        (
            "kv heads",
            lambda: flashsdpa.attention(q, k, v[:, :1]),
            ValueError,
            "value (2, 1, 7, 16): differs from key (2, 2, 7, 16) in heads or sequence length",
        ),
        (
            "head dims",
            lambda: flashsdpa.attention(q, k[..., :8], v),
            ValueError,
            "key.size(3)=8: differs from query.size(3)=16 (head_dim)",
        ),
        (
            "gqa ratio",
            lambda: flashsdpa.attention(q[:, :3], k, v),
            ValueError,
            "query heads 3: must be a multiple of key/value heads 2",
        ),
        (
            "gqa off",
            lambda: flashsdpa.attention(q, k, v, enable_gqa=False),
            ValueError,
            "query heads 4 != key/value heads 2: pass enable_gqa=True for GQA/MQA",
        ),
        (
            "zero head dim",
            lambda: flashsdpa.attention(q[..., :0], k[..., :0], v),
            ValueError,
            "head dims 0 (query) and 16 (value): need at least 1",
        ),
        ("causal", lambda: flashsdpa.attention(q, k, v, causal=1), TypeError, "causal=1: needs a bool"),
        (
            "alignment",
            lambda: flashsdpa.attention(q, k, v, causal=True, causal_alignment="upper"),
            ValueError,
            "causal_alignment='upper': needs 'top_left' or 'bottom_right'",
        ),
        ("scale", lambda: flashsdpa.attention(q, k, v, scale="0.5"), TypeError, "scale='0.5': needs a float or None"),
        (
            "mask",
            lambda: torch.ops.flashsdpa.fwd(q, k, v, 1.0, [0, 0, 3]),
            ValueError,
            "mask=[0, 0, 3]: needs [window_left, window_right, align] with each side >= 0 or -1 (unbounded) and "
            "align 0 (top-left) or 1 (bottom-right)",
        ),
        (
            "window",
            lambda: flashsdpa.attention(q, k, v, window=(4, -2)),
            ValueError,
            "window=(4, -2): needs (left, right), each an int >= 0 or -1 (unbounded)",
        ),
    ]


@pytest.mark.parametrize("name, call, error, message", _bad_calls(), ids=[c[0] for c in _bad_calls()])
def test_bad_arguments(name: str, call: Any, error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=f"^{re.escape(message)}$"):
        call()


def test_varlen_bad_arguments() -> None:
    q, k, v, cu_q, cu_k = packed([3, 5], [4, 6])
    with pytest.raises(ValueError, match=re.escape("cu_seqlens_q: needs a 1-D int32 tensor on cpu")):
        flashsdpa.attention_varlen(q, k, v, cu_q.long(), cu_k, 5, 6)
    with pytest.raises(ValueError, match=re.escape("cu_seqlens_q has 3 entries, cu_seqlens_k 2")):
        flashsdpa.attention_varlen(q, k, v, cu_q, cu_k[:2], 5, 6)


# ---- CUDA-only checks and the CUDA impls, on FakeTensors -----------------------------------------


def cuda_qkv(
    d: int = 64, dtype: torch.dtype = F16, sk: int = 24, dv: int | None = None
) -> tuple[Tensor, Tensor, Tensor]:
    q = torch.empty(2, 4, 16, d, dtype=dtype, device="cuda")
    k = torch.empty(2, 2, sk, d, dtype=dtype, device="cuda")
    v = torch.empty(2, 2, sk, d if dv is None else dv, dtype=dtype, device="cuda")
    return q, k, v


def test_cuda_argument_errors(fake_build: Any, fake_mode: Any) -> None:
    with pytest.raises(TypeError, match=re.escape("query.dtype=torch.float32: needs one of float16, bfloat16 on cuda")):
        flashsdpa.attention(*cuda_qkv(dtype=F32))
    with pytest.raises(ValueError, match=re.escape("head_dim=100: needs a positive multiple of 8")):
        flashsdpa.attention(*cuda_qkv(d=100))
    with pytest.raises(ValueError, match=re.escape("head_dim=520: exceeds 512")):
        flashsdpa.attention(*cuda_qkv(d=520))
    with pytest.raises(ValueError, match=re.escape("head_dim=264: this build compiled head dims [64, 128, 256]")):
        flashsdpa.attention(*cuda_qkv(d=264))
    fake_build(head_dims=(64,))
    with pytest.raises(
        ValueError, match=re.escape("head_dim=64, value head_dim=128: this build compiled head dims [64]")
    ):
        flashsdpa.attention(*cuda_qkv(dv=128))
    fake_build(dtypes=("bfloat16",))
    with pytest.raises(TypeError, match=re.escape("query.dtype=torch.float16: this build compiled ['bfloat16']")):
        flashsdpa.attention(*cuda_qkv())
    fake_build(with_cuda=False)
    with pytest.raises(RuntimeError, match=re.escape("flashsdpa._C was built without CUDA (no nvcc at build time)")):
        flashsdpa.attention(*cuda_qkv())


def test_cuda_attention_shapes_under_fake(fake_build: Any, fake_mode: Any) -> None:
    out, lse = flashsdpa.attention(*cuda_qkv(dv=128), causal=True, return_lse=True)
    assert out.shape == (2, 4, 16, 128) and out.device.type == "cuda" and lse.shape == (2, 4, 16)


class Launches:
    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.names: list[str] = []
        self.args: list[tuple[Any, ...]] = []
        for name in ("launch_fwd", "launch_bwd"):
            monkeypatch.setattr(_backend, name, lambda *args, _name=name: self._record(_name, args))

    def _record(self, name: str, args: tuple[Any, ...]) -> None:
        self.names.append(name)
        self.args.append(args)


def test_cuda_impls(fake_build: Any, fake_mode: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    launches = Launches(monkeypatch)
    flashsdpa.reset_stats()
    q, k, v = cuda_qkv()
    out, lse = ops._fwd_cuda(q, k, v, 0.5, list(masks.BY_CAUSAL_MODE[1]))
    assert out.shape == (2, 4, 16, 64) and lse.shape == (2, 4, 16)
    grads = ops._bwd_cuda(torch.empty_like(out), q, k, v, out, lse, 0.5, list(masks.BY_CAUSAL_MODE[1]))
    assert [g.shape for g in grads] == [q.shape, k.shape, v.shape]
    assert launches.names == ["launch_fwd", "launch_bwd"]
    ops_stats = flashsdpa.stats()["ops"]
    assert ops_stats["flashsdpa::fwd"]["served"] == 1 and ops_stats["flashsdpa::bwd"]["served"] == 1
    # Empty problems never reach a kernel.
    ops._fwd_cuda(*cuda_qkv(sk=0), 0.5, list(masks.BY_CAUSAL_MODE[0]))
    ops._bwd_cuda(torch.empty_like(out), *cuda_qkv(sk=0), out, lse, 0.5, list(masks.BY_CAUSAL_MODE[0]))
    assert launches.names == ["launch_fwd", "launch_bwd"]
    # Rows the kernels cannot read in place (stride 2 along the head dim, or a 4-element offset)
    # are copied first; the output keeps the query's layout.
    q_strided = torch.empty(2, 4, 16, 128, dtype=F16, device="cuda").as_strided((2, 4, 16, 64), (8192, 2048, 128, 2))
    k_offset = torch.empty(2 * 2 * 24 * 64 + 4, dtype=F16, device="cuda").as_strided(k.shape, k.stride(), 4)
    out, _ = ops._fwd_cuda(q_strided, k_offset, v, 0.5, list(masks.BY_CAUSAL_MODE[0]))
    launched = launches.args[-1]
    assert launched[0].stride() == (4096, 1024, 64, 1) and launched[1].storage_offset() == 0 and launched[2] is v
    assert out.shape == (2, 4, 16, 64)
    # A GPU our kernels do not run on: a RuntimeError with the reason.
    fake_build(capability=(7, 5), family=None)
    with pytest.raises(RuntimeError, match=re.escape("our kernels cannot run this call: GPU compute capability 7.5")):
        ops._fwd_cuda(q, k, v, 0.5, list(masks.BY_CAUSAL_MODE[1]))


def test_cuda_backward_honours_deterministic_algorithms(
    fake_build: Any, fake_mode: Any, monkeypatch: pytest.MonkeyPatch, deterministic: Callable[[bool], None]
) -> None:
    # dQ is accumulated with float atomics: like PyTorch's own nondeterministic ops, an error under
    # use_deterministic_algorithms(True), a warning with warn_only=True; the forward is unaffected.
    launches = Launches(monkeypatch)
    q, k, v = cuda_qkv()
    deterministic(False)
    out, lse = ops._fwd_cuda(q, k, v, 0.5, list(masks.BY_CAUSAL_MODE[1]))
    with pytest.raises(RuntimeError, match=r"flashsdpa::bwd does not have a deterministic implementation"):
        ops._bwd_cuda(torch.empty_like(out), q, k, v, out, lse, 0.5, list(masks.BY_CAUSAL_MODE[1]))
    assert launches.names == ["launch_fwd"]
    deterministic(True)
    with pytest.warns(UserWarning, match=r"flashsdpa::bwd does not have a deterministic implementation"):
        ops._bwd_cuda(torch.empty_like(out), q, k, v, out, lse, 0.5, list(masks.BY_CAUSAL_MODE[1]))
    assert launches.names == ["launch_fwd", "launch_bwd"]


def test_cuda_backward_runs_where_a_family_is_deterministic(
    fake_build: Any, fake_mode: Any, monkeypatch: pytest.MonkeyPatch, deterministic: Callable[[bool], None]
) -> None:
    # Where the capability table has a deterministic backward (the sm90 family: ordered dQ adds),
    # use_deterministic_algorithms(True) neither raises nor warns: the backward runs, deterministically.
    fake_build(deterministic_backward=True)
    launches = Launches(monkeypatch)
    q, k, v = cuda_qkv()
    out, lse = ops._fwd_cuda(q, k, v, 0.5, list(masks.BY_CAUSAL_MODE[1]))
    deterministic(False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ops._bwd_cuda(torch.empty_like(out), q, k, v, out, lse, 0.5, list(masks.BY_CAUSAL_MODE[1]))
    assert launches.names == ["launch_fwd", "launch_bwd"]
