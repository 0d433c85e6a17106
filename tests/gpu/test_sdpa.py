# test_sdpa.py: flashsdpa behind torch.nn.functional.scaled_dot_product_attention inside
# flashsdpa.enable(): eager (through the routers, and without autograd through the SDPA entry's eager
# path, also under CUDA graph capture) and torch.compile, GQA, both causal alignments, Sq = 1 /
# Sk = 1, nested jagged tensors and torch.nn.attention.varlen, batch x heads beyond the 65,535 grid
# limit, a 256k-token sequence; every test proves through flashsdpa.stats() that our kernels ran (or,
# for unsupported calls, that they did not) and checks the numbers with the project's rule.
from __future__ import annotations

import inspect
import zlib
from typing import Any, Self

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention.bias import causal_lower_right

import flashsdpa
from flashsdpa import cxx_routers, entry, ops
from helpers import (
    CAUSAL_MODES,
    Shape,
    assert_all_finite,
    check_attention,
    check_rule,
    default_scale,
    fresh_compile,
    gpu_skip_reason,
    grads_or_zeros,
    make_qkv,
    skip_unless_compiled,
    textbook_with_grads,
    torch_math_attention,
)

GPU_SKIP = gpu_skip_reason()
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(GPU_SKIP is not None, reason=f"GPU suite: {GPU_SKIP}")]

DEVICE = "cuda"


class Served:
    """Counts the calls flashsdpa's kernels served while the block ran, split into forward and
    backward (from flashsdpa.stats(), which counts the SDPA routers and flashsdpa's own ops)."""

    fwd: int
    bwd: int

    @staticmethod
    def _snapshot() -> dict[str, int]:
        return {op: c["served"] for op, c in flashsdpa.stats()["ops"].items()}

    def __enter__(self) -> Self:
        self._before = self._snapshot()
        return self

    def __exit__(self, *exc: object) -> None:
        torch.cuda.synchronize()
        after = self._snapshot()
        delta = {op: n - self._before.get(op, 0) for op, n in after.items()}
        self.bwd = sum(n for op, n in delta.items() if "backward" in op or op.endswith("bwd") or "bwd_" in op)
        self.fwd = sum(delta.values()) - self.bwd
        self.ops = {op: n for op, n in delta.items() if n}

    @property
    def total(self) -> int:
        return self.fwd + self.bwd


def _generator(request: pytest.FixtureRequest) -> torch.Generator:
    return torch.Generator(device=DEVICE).manual_seed(zlib.crc32(request.node.nodeid.encode()))


def _dout(shape: Shape, dtype: torch.dtype, gen: torch.Generator) -> torch.Tensor:
    return torch.randn(shape.batch, shape.heads_q, shape.seqlen_q, shape.dv, generator=gen, device=DEVICE).to(dtype)


def _sdpa_fwd_bwd(
    request: pytest.FixtureRequest, shape: Shape, dtype: torch.dtype, **kwargs: Any
) -> tuple[Served, tuple[torch.Tensor, ...], torch.Tensor, torch.Tensor, tuple[torch.Tensor, ...]]:
    """One training step of SDPA inside enable() on fresh (B, S, H, D)-laid-out inputs that require
    grad: (what was served, (q, k, v), dout, out, (dq, dk, dv))."""
    skip_unless_compiled(dtype, shape.head_dim, shape.dv)
    gen = _generator(request)
    q, k, v = make_qkv(shape, dtype, DEVICE, layout="bshd", requires_grad=True, generator=gen)
    dout = _dout(shape, dtype, gen)
    with flashsdpa.enable(), Served() as served:
        out = F.scaled_dot_product_attention(q, k, v, **kwargs)
        grads = torch.autograd.grad(out, (q, k, v), dout)
    return served, (q, k, v), dout, out, grads


# ---- dense SDPA, eager --------------------------------------------------------------------------


@pytest.mark.parametrize("gqa", [False, True], ids=["mha", "gqa"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
def test_eager(request: pytest.FixtureRequest, dtype: torch.dtype, causal: bool, gqa: bool) -> None:
    shape = Shape("sdpa", 2, 8, 2 if gqa else 8, 239, 239, 128)
    served, (q, k, v), dout, out, grads = _sdpa_fwd_bwd(request, shape, dtype, is_causal=causal, enable_gqa=gqa)
    assert served.fwd >= 1 and served.bwd >= 1, served.ops
    # SDPA's flash path returns the output in the query's memory layout (empty_like(query)).
    assert out.stride() == q.stride()
    check_attention(q, k, v, dout, out, grads, scale=default_scale(128), causal_mode=int(causal))


# (Sq, Sk) x how causality is asked for. PyTorch's own flash path turns away is_causal with
# Sq != Sk and causal_lower_right masks with Sq != Sk; flashsdpa serves them all.
_SHAPE_CASES = [
    (sq, sk, kind)
    for sq, sk in [(1, 1023), (239, 1), (113, 239), (239, 113), (1023, 1023)]
    for kind in ("none", "is_causal", "lower_right")
]


@pytest.mark.parametrize("sq,sk,kind", _SHAPE_CASES, ids=[f"q{a}k{b}-{c}" for a, b, c in _SHAPE_CASES])
def test_shapes_and_alignments(request: pytest.FixtureRequest, sq: int, sk: int, kind: str) -> None:
    kwargs: dict[str, Any] = {"enable_gqa": True}
    if kind == "is_causal":
        kwargs["is_causal"] = True
    elif kind == "lower_right":
        kwargs["attn_mask"] = causal_lower_right(sq, sk)
    shape = Shape("sdpa", 2, 4, 2, sq, sk, 64)
    served, (q, k, v), dout, out, grads = _sdpa_fwd_bwd(request, shape, torch.bfloat16, **kwargs)
    assert served.fwd >= 1 and served.bwd >= 1, served.ops
    mode = {
        "none": CAUSAL_MODES["none"],
        "is_causal": CAUSAL_MODES["top_left"],
        "lower_right": CAUSAL_MODES["bottom_right"],
    }[kind]
    check_attention(q, k, v, dout, out, grads, scale=default_scale(64), causal_mode=mode)


def test_value_head_dim_differs(request: pytest.FixtureRequest) -> None:
    shape = Shape("sdpa_dv", 2, 4, 4, 239, 113, 64, 128)
    served, (q, k, v), dout, out, grads = _sdpa_fwd_bwd(request, shape, torch.bfloat16)
    assert served.fwd >= 1 and served.bwd >= 1, served.ops
    check_attention(q, k, v, dout, out, grads, scale=default_scale(64), causal_mode=0)


# ---- the eager path: SDPA without autograd runs our kernel from the entry ---------------------------
# On by default only where the Python router serves SDPA's flash forward (entry.patch_torch); these
# tests force it on (FLASHSDPA_EAGER=1) and test_no_grad_road_follows_the_router checks the default.


@pytest.fixture
def eager_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(entry, "_EAGER_OVERRIDE", True)


EAGER = "F.scaled_dot_product_attention (eager, no grad)"  # flashsdpa.stats()'s name for the eager path
SDPA_FWD = "aten::_scaled_dot_product_flash_attention"
SDPA_BWD = "aten::_scaled_dot_product_flash_attention_backward"

# (label, shape, SDPA keywords, causal mode): what PyTorch's flash path takes, and what the entry
# used to send to our op (top-left causal with Sq != Sk, Dv != D).
_EAGER_CASES = [
    ("causal", Shape("eager", 2, 8, 8, 239, 239, 128), {"is_causal": True}, 1),
    ("gqa", Shape("eager_gqa", 2, 8, 2, 113, 239, 64), {"enable_gqa": True}, 0),
    ("causal_sq_lt_sk", Shape("eager_tl", 2, 4, 2, 113, 239, 64), {"is_causal": True, "enable_gqa": True}, 1),
    ("dv_differs", Shape("eager_dv", 1, 4, 4, 239, 113, 64, 128), {}, 0),
]


@pytest.mark.parametrize("label,shape,kwargs,causal_mode", _EAGER_CASES, ids=[c[0] for c in _EAGER_CASES])
def test_eager_no_grad(
    request: pytest.FixtureRequest, eager_path: None, label: str, shape: Shape, kwargs: dict[str, object],
    causal_mode: int
) -> None:
    """Inside enable() under no_grad, SDPA runs our kernel straight from the entry: counted as the
    eager path only, PyTorch's result within the rule, and bitwise the forward that the routers
    (or our op) compute for the same call with autograd."""
    skip_unless_compiled(torch.bfloat16, shape.head_dim, shape.dv)
    gen = _generator(request)
    q, k, v = make_qkv(shape, torch.bfloat16, DEVICE, layout="bshd", generator=gen)
    with flashsdpa.enable(), torch.no_grad(), Served() as served:
        out = F.scaled_dot_product_attention(q, k, v, **kwargs)
    assert served.ops == {EAGER: 1}, served.ops
    assert out.stride() == ops._empty_out(q, shape.dv).stride() and not out.requires_grad
    check_attention(q, k, v, None, out, scale=default_scale(shape.head_dim), causal_mode=causal_mode)
    expected = F.scaled_dot_product_attention(q, k, v, **kwargs)  # PyTorch's own kernels, outside
    torch.testing.assert_close(out, expected, atol=1e-2, rtol=2e-2)
    leaves = [t.detach().requires_grad_() for t in (q, k, v)]
    with flashsdpa.enable(), Served() as with_grad:
        routed = F.scaled_dot_product_attention(*leaves, **kwargs)
    assert EAGER not in with_grad.ops and with_grad.fwd == 1, with_grad.ops
    assert torch.equal(out, routed.detach())


@pytest.mark.parametrize("road", ["default", "python routers"])
def test_no_grad_road_follows_the_router(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, road: str
) -> None:
    """By default a no-grad call goes through SDPA to the C++ router where that serves SDPA's
    flash forward (the cheaper road there: session 22's eager_ab.py), and takes the eager path
    where the Python router would; both give the same bits."""
    shape = Shape("eager_road", 2, 8, 2, 113, 239, 64)
    skip_unless_compiled(torch.bfloat16, shape.head_dim, shape.dv)
    monkeypatch.setattr(entry, "_EAGER_OVERRIDE", None)
    if road == "python routers":
        monkeypatch.setattr(cxx_routers, "register", lambda: frozenset())
    elif cxx_routers.unavailable_reason() is not None:
        pytest.skip(f"the C++ routers do not serve here: {cxx_routers.unavailable_reason()}")
    gen = _generator(request)
    q, k, v = make_qkv(shape, torch.bfloat16, DEVICE, layout="bshd", generator=gen)
    with flashsdpa.enable(), torch.no_grad(), Served() as served:
        out = F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
    assert served.ops == ({SDPA_FWD: 1} if road == "default" else {EAGER: 1}), served.ops
    check_attention(q, k, v, None, out, scale=default_scale(64), causal_mode=0)
    monkeypatch.setattr(entry, "_EAGER_OVERRIDE", road == "default")  # the other road
    with flashsdpa.enable(), torch.no_grad():
        other = F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
    assert torch.equal(out, other)


def test_eager_path_not_taken_with_grad(request: pytest.FixtureRequest) -> None:
    """With inputs that require grad, SDPA goes through the routers and our backward runs."""
    shape = Shape("eager_grad", 2, 4, 4, 239, 239, 64)
    served, (q, k, v), dout, out, grads = _sdpa_fwd_bwd(request, shape, torch.bfloat16, is_causal=True)
    assert served.ops == {SDPA_FWD: 1, SDPA_BWD: 1}, served.ops
    check_attention(q, k, v, dout, out, grads, scale=default_scale(64), causal_mode=1)


def test_eager_path_respects_autocast_and_sdpa_kernel(request: pytest.FixtureRequest, eager_path: None) -> None:
    """Under CUDA autocast SDPA casts first (our kernel then runs from the router); inside an
    sdpa_kernel context without flash nothing of ours runs."""
    shape = Shape("eager_ctx", 2, 4, 4, 113, 113, 64)
    skip_unless_compiled(torch.bfloat16, shape.head_dim, shape.dv)
    gen = _generator(request)
    q, k, v = make_qkv(shape, torch.float32, DEVICE, generator=gen)
    with flashsdpa.enable(), torch.no_grad():
        with torch.autocast("cuda", dtype=torch.bfloat16), Served() as autocast:
            out = F.scaled_dot_product_attention(q, k, v)
        qb, kb, vb = (t.bfloat16() for t in (q, k, v))
        with torch.nn.attention.sdpa_kernel([torch.nn.attention.SDPBackend.EFFICIENT_ATTENTION]), Served() as other:
            F.scaled_dot_product_attention(qb, kb, vb)
    assert autocast.ops == {SDPA_FWD: 1}, autocast.ops
    assert out.dtype == torch.bfloat16
    check_attention(qb, kb, vb, None, out, scale=default_scale(64), causal_mode=0)
    assert other.total == 0, other.ops


def test_eager_path_under_cuda_graph_capture(request: pytest.FixtureRequest, eager_path: None) -> None:
    """A no-grad SDPA call captured in a CUDA graph inside enable(): its buffers come from the
    graph's pool, and each replay recomputes the output from the (refilled) inputs."""
    shape = Shape("eager_graph", 1, 4, 4, 128, 128, 64)
    skip_unless_compiled(torch.bfloat16, shape.head_dim, shape.dv)
    gen = _generator(request)
    q, k, v = make_qkv(shape, torch.bfloat16, DEVICE, generator=gen)
    graph = torch.cuda.CUDAGraph()
    with flashsdpa.enable(), torch.no_grad():
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            F.scaled_dot_product_attention(q, k, v, is_causal=True)  # warm-up outside the capture
        torch.cuda.current_stream().wait_stream(stream)
        with Served() as served, torch.cuda.graph(graph):
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        for _ in range(2):
            for t in (q, k, v):
                t.copy_(torch.randn(t.shape, generator=gen, device=DEVICE))
            graph.replay()
            torch.cuda.synchronize()
            check_attention(q, k, v, None, out, scale=default_scale(64), causal_mode=1)
    assert served.ops == {EAGER: 1}, served.ops


def test_backward_after_exit(request: pytest.FixtureRequest) -> None:
    """A forward taken inside and its backward run outside: PyTorch's backward kernel then reads
    our output and LSE, which must be in its format."""
    shape = Shape("mixed", 2, 4, 4, 239, 239, 128)
    skip_unless_compiled(torch.bfloat16, shape.head_dim, shape.dv)
    gen = _generator(request)
    q, k, v = make_qkv(shape, torch.bfloat16, DEVICE, layout="bshd", requires_grad=True, generator=gen)
    dout = _dout(shape, torch.bfloat16, gen)
    with flashsdpa.enable(), Served() as served:
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert served.fwd >= 1
    grads = torch.autograd.grad(out, (q, k, v), dout)
    check_attention(q, k, v, dout, out, grads, scale=default_scale(128), causal_mode=1)


# ---- torch.compile ------------------------------------------------------------------------------


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_compiled(request: pytest.FixtureRequest, causal: bool) -> None:
    """One compiled function, called outside, inside and outside again: our kernels run exactly
    while the context is active (Dynamo recompiles on entry and exit: it guards on the function
    behind F.scaled_dot_product_attention)."""
    shape = Shape("compiled", 2, 8, 8, 1023, 1023, 64)
    skip_unless_compiled(torch.bfloat16, shape.head_dim, shape.dv)
    gen = _generator(request)
    q, k, v = make_qkv(shape, torch.bfloat16, DEVICE, layout="bshd", requires_grad=True, generator=gen)
    dout = _dout(shape, torch.bfloat16, gen)

    def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

    with fresh_compile():
        compiled = torch.compile(attend, fullgraph=True)
        with Served() as before:
            out_before = compiled(q, k, v)
            torch.autograd.grad(out_before, (q, k, v), dout)
        with flashsdpa.enable(), Served() as inside:
            out = compiled(q, k, v)
            grads = torch.autograd.grad(out, (q, k, v), dout)
        with Served() as after:
            compiled(q, k, v).sum().backward()
    assert before.total == 0, before.ops
    assert inside.fwd >= 1 and inside.bwd >= 1, inside.ops
    assert after.total == 0, after.ops
    check_attention(q, k, v, dout, out, grads, scale=default_scale(64), causal_mode=int(causal))


def test_compiled_top_left_non_square(request: pytest.FixtureRequest) -> None:
    """is_causal with Sq != Sk goes to flashsdpa's own op from the shim's SDPA entry; under
    torch.compile(fullgraph=True) that op is traced into the graph."""
    shape = Shape("compiled_tl", 1, 4, 2, 113, 239, 128)
    skip_unless_compiled(torch.float16, shape.head_dim, shape.dv)
    gen = _generator(request)
    q, k, v = make_qkv(shape, torch.float16, DEVICE, requires_grad=True, generator=gen)
    dout = _dout(shape, torch.float16, gen)

    def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)

    with fresh_compile(), flashsdpa.enable(), Served() as served:
        out = torch.compile(attend, fullgraph=True)(q, k, v)
        grads = torch.autograd.grad(out, (q, k, v), dout)
    assert served.fwd >= 1 and served.bwd >= 1, served.ops
    check_attention(q, k, v, dout, out, grads, scale=default_scale(128), causal_mode=1)


# ---- variable length ----------------------------------------------------------------------------


def _per_sequence_reference(
    qv: torch.Tensor,
    kv: torch.Tensor,
    vv: torch.Tensor,
    dout: torch.Tensor,
    starts_q: list[int],
    starts_k: list[int],
    causal_mode: int,
) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """float64 textbook and PyTorch math (input dtype) results of packed (total, H, D) sequences:
    [out, dq, dk, dv] each, concatenated back into the packed layout."""

    def batch(t: torch.Tensor, a: int, b: int) -> torch.Tensor:
        return t[a:b].transpose(0, 1).unsqueeze(0)  # (L, H, D) -> (1, H, L, D)

    def unbatch(t: torch.Tensor) -> torch.Tensor:
        return t[0].transpose(0, 1)

    scale = default_scale(qv.shape[-1])
    ref_parts: list[list[torch.Tensor]] = [[], [], [], []]
    pt_parts: list[list[torch.Tensor]] = [[], [], [], []]
    for i in range(len(starts_q) - 1):
        (a, b), (c, d) = starts_q[i : i + 2], starts_k[i : i + 2]
        q, k, v, do = batch(qv, a, b), batch(kv, c, d), batch(vv, c, d), batch(dout, a, b)
        ref_out, _, ref_grads = textbook_with_grads(q, k, v, do, scale=scale, causal_mode=causal_mode)
        leaves = [t.detach().requires_grad_() for t in (q, k, v)]
        pt_out = torch_math_attention(*leaves, scale=scale, causal_mode=causal_mode, reduced_precision=True)
        pt_grads = grads_or_zeros(pt_out, leaves, do)
        for parts, results in ((ref_parts, [ref_out, *ref_grads]), (pt_parts, [pt_out.detach(), *pt_grads])):
            for j, t in enumerate(results):
                parts[j].append(unbatch(t))
    return [torch.cat(p) for p in ref_parts], [torch.cat(p) for p in pt_parts]


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_nested_jagged(request: pytest.FixtureRequest, causal: bool) -> None:
    """Nested jagged tensors through SDPA reach aten::_flash_attention_forward with cumulative
    sequence lengths; our varlen kernels serve them."""
    lengths = [1, 7, 113, 239, 64]
    heads, head_dim = 4, 64
    skip_unless_compiled(torch.bfloat16, head_dim)
    gen = _generator(request)
    offsets = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], device=DEVICE, dtype=torch.int64)
    total = offsets[-1].item()
    qv, kv, vv = (
        torch.randn(total, heads, head_dim, generator=gen, device=DEVICE).to(torch.bfloat16).requires_grad_()
        for _ in range(3)
    )
    dout = torch.randn(total, heads, head_dim, generator=gen, device=DEVICE).to(torch.bfloat16)

    def nested(t: torch.Tensor) -> torch.Tensor:
        return torch.nested.nested_tensor_from_jagged(t, offsets).transpose(1, 2)  # (B, H, j, D)

    with flashsdpa.enable(), Served() as served:
        out = F.scaled_dot_product_attention(nested(qv), nested(kv), nested(vv), is_causal=causal)
        out_values = out.transpose(1, 2).values()
        grads = torch.autograd.grad(out_values, (qv, kv, vv), dout)
    assert served.fwd >= 1 and served.bwd >= 1, served.ops
    starts = offsets.tolist()
    ref, pt = _per_sequence_reference(qv, kv, vv, dout, starts, starts, int(causal))
    for name, ours, r, p in zip(("out", "dq", "dk", "dv"), (out_values, *grads), ref, pt):
        assert_all_finite(name, ours)
        check_rule(name, ours, p, r)


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_varlen_attn(request: pytest.FixtureRequest, causal: bool) -> None:
    """torch.nn.attention.varlen.varlen_attn on packed sequences, including an empty sequence and,
    without causality, a sequence whose queries have no keys (their output is 0)."""
    varlen = pytest.importorskip("torch.nn.attention.varlen", reason="this torch has no torch.nn.attention.varlen")
    params = inspect.signature(varlen.varlen_attn).parameters
    kwargs: dict[str, object] = {}
    if causal:
        if "is_causal" in params:
            kwargs["is_causal"] = True
        elif "window_size" in params:
            kwargs["window_size"] = (-1, 0)  # FlashAttention's spelling of causal
        else:
            pytest.skip("varlen_attn has no causal option on this torch")
    # Causal needs equal lengths per sequence here: varlen causality is bottom-right aligned.
    lengths_q = [5, 0, 113, 64] if causal else [5, 0, 113, 3]
    lengths_k = [5, 0, 113, 64] if causal else [5, 0, 239, 0]
    heads, head_dim = 4, 128
    skip_unless_compiled(torch.bfloat16, head_dim)
    gen = _generator(request)

    def cumulative(lengths: list[int]) -> list[int]:
        return [0, *torch.tensor(lengths).cumsum(0).tolist()]

    starts_q, starts_k = cumulative(lengths_q), cumulative(lengths_k)
    cu_q = torch.tensor(starts_q, dtype=torch.int32, device=DEVICE)
    cu_k = torch.tensor(starts_k, dtype=torch.int32, device=DEVICE)

    def packed(total: int) -> torch.Tensor:
        return torch.randn(total, heads, head_dim, generator=gen, device=DEVICE).to(torch.bfloat16).requires_grad_()

    q, k, v = packed(starts_q[-1]), packed(starts_k[-1]), packed(starts_k[-1])
    dout = torch.randn(starts_q[-1], heads, head_dim, generator=gen, device=DEVICE).to(torch.bfloat16)
    with flashsdpa.enable(), Served() as served:
        out = varlen.varlen_attn(q, k, v, cu_q, cu_k, max(lengths_q), max(lengths_k), **kwargs)
        grads = torch.autograd.grad(out, (q, k, v), dout)
    assert served.fwd >= 1 and served.bwd >= 1, served.ops
    ref, pt = _per_sequence_reference(q, k, v, dout, starts_q, starts_k, int(causal))
    for name, ours, r, p in zip(("out", "dq", "dk", "dv"), (out, *grads), ref, pt):
        assert_all_finite(name, ours)
        check_rule(name, ours, p, r)
    if not causal:  # the last sequence: 3 queries, no keys
        assert torch.equal(out[starts_q[-2] :], torch.zeros_like(out[starts_q[-2] :]))


# ---- sizes --------------------------------------------------------------------------------------


def test_batch_heads_beyond_grid_limit(request: pytest.FixtureRequest) -> None:
    """batch x heads = 65,552 > 65,535, the largest gridDim.y / gridDim.z."""
    shape = Shape("wide", 4097, 16, 16, 16, 16, 64)
    served, (q, k, v), dout, out, grads = _sdpa_fwd_bwd(request, shape, torch.bfloat16, is_causal=True)
    assert served.fwd >= 1 and served.bwd >= 1, served.ops
    check_attention(q, k, v, dout, out, grads, scale=default_scale(64), causal_mode=1)


def test_long_sequence_forward(request: pytest.FixtureRequest) -> None:
    """256k tokens, causal, forward: memory stays linear (a score matrix would be 256 GiB per head
    in bf16). Checked on 192 query rows at the start, middle and end against the float64 textbook."""
    seqlen, heads, head_dim = 262_144, 2, 64
    shape = Shape("long", 1, heads, heads, seqlen, seqlen, head_dim)
    skip_unless_compiled(torch.bfloat16, shape.head_dim, shape.dv)
    gen = _generator(request)
    q, k, v = make_qkv(shape, torch.bfloat16, DEVICE, layout="bshd", generator=gen)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    with flashsdpa.enable(), Served() as served, torch.no_grad():
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    extra = torch.cuda.max_memory_allocated() - base
    assert served.fwd >= 1, served.ops
    assert_all_finite("out", out)
    # The output, the LSE and some slack: linear in the sequence length (scores would be 256 GiB).
    assert extra <= 2 * out.numel() * out.element_size() + (64 << 20), extra

    rows = torch.cat(
        [torch.arange(0, 64), torch.arange(seqlen // 2 - 32, seqlen // 2 + 32), torch.arange(seqlen - 64, seqlen)]
    ).to(DEVICE)
    scale = default_scale(head_dim)
    visible = torch.arange(seqlen, device=DEVICE)[None, :] <= rows[:, None]
    q_rows = q[:, :, rows]
    s = (q_rows.double() @ k.double().transpose(-1, -2)) * scale
    ref = torch.softmax(s.masked_fill(~visible, float("-inf")), dim=-1) @ v.double()
    del s
    with torch.nn.attention.sdpa_kernel([torch.nn.attention.SDPBackend.MATH]):
        before = torch.backends.cuda.fp16_bf16_reduction_math_sdp_allowed()
        torch.backends.cuda.allow_fp16_bf16_reduction_math_sdp(True)
        try:
            pt = F.scaled_dot_product_attention(q_rows, k, v, attn_mask=visible, scale=scale)
        finally:
            torch.backends.cuda.allow_fp16_bf16_reduction_math_sdp(before)
    check_rule("out rows", out[:, :, rows], pt, ref)


# ---- what is not served -------------------------------------------------------------------------


def test_unsupported_calls_fall_back(request: pytest.FixtureRequest) -> None:
    """Dropout beside an attn_mask, float32 and a mask that does not broadcast to (B, H, Sq, Sk)'s heads (GQA: PyTorch's
    masked ops take equal heads) stay with PyTorch's kernels: nothing of ours runs, the results are
    PyTorch's, and explain() names the argument. (Masks that broadcast are ours since issue 14:
    tests/gpu/test_masks_gpu.py.)"""
    shape = Shape("fallback", 2, 4, 4, 128, 128, 64)
    skip_unless_compiled(torch.bfloat16, shape.head_dim, shape.dv)
    gen = _generator(request)
    q, k, v = make_qkv(shape, torch.bfloat16, DEVICE, generator=gen)
    mask = torch.randn(2, 1, 128, 128, generator=gen, device=DEVICE).to(torch.bfloat16)
    k2, v2 = k[:, :2].contiguous(), v[:, :2].contiguous()
    expected = F.scaled_dot_product_attention(q, k2, v2, attn_mask=mask, enable_gqa=True)
    with flashsdpa.enable(), Served() as served:
        got = F.scaled_dot_product_attention(q, k2, v2, attn_mask=mask, enable_gqa=True)
        F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=0.1)
        F.scaled_dot_product_attention(q.float(), k.float(), v.float())
    assert served.total == 0, served.ops
    torch.testing.assert_close(got, expected)
    assert any("attn_mask" in r for r in flashsdpa.explain(q, k2, v2, attn_mask=mask))
    assert any("dropout_p" in r for r in flashsdpa.explain(q, k, v, attn_mask=mask, dropout_p=0.1))
    assert any("float32" in r for r in flashsdpa.explain(q.float(), k.float(), v.float()))
    assert flashsdpa.explain(q, k, v) == []
    assert flashsdpa.explain(q, k, v, attn_mask=mask) == []


def test_priority_order_restored() -> None:
    """SDPA's backend priority (cuDNN first on Hopper) is exactly what it was after the context."""
    get_order = getattr(torch._C, "_get_sdp_priority_order", None)
    if get_order is None:
        pytest.skip("this torch has no _get_sdp_priority_order")
    tiny = torch.randn(1, 1, 8, 64, device=DEVICE, dtype=torch.bfloat16)
    F.scaled_dot_product_attention(tiny, tiny, tiny)  # PyTorch's lazy priority initialization
    before = [int(b) for b in get_order()]
    with flashsdpa.enable():
        F.scaled_dot_product_attention(tiny, tiny, tiny)
        with flashsdpa.enable():  # re-entrant
            F.scaled_dot_product_attention(tiny, tiny, tiny)
    assert [int(b) for b in get_order()] == before
    assert not flashsdpa.is_active()
