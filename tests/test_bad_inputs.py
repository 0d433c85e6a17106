# test_bad_inputs.py: the bad-input matrix of issue 10, on CPU. Every case is a clear error naming
# the argument and the limit, or the documented behaviour (an empty result, a copy, PyTorch's own
# kernel), pinned with expecttest: the whole table is one inline string per road, so a changed
# message shows up as a diff (EXPECTTEST_ACCEPT=1 rewrites it after review). Roads: the direct API
# on CPU (the reference), varlen metadata, SDPA inside enable() on CPU (it must behave exactly as
# PyTorch does outside), and the CUDA-side decisions on fake CUDA tensors with a fake CUDA build.
# The CUDA launches themselves are tests/gpu/test_bad_inputs_gpu.py.
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from expecttest import assert_expected_inline
from torch import Tensor
from torch._subclasses.fake_tensor import is_fake

import flashsdpa
from flashsdpa import validation

F32 = torch.float32


def _outcome(call: Callable[[], Any]) -> str:
    """One line: the error (type and message), or what came back."""
    try:
        result = call()
    except (TypeError, ValueError, RuntimeError, NotImplementedError) as exc:
        return f"{type(exc).__name__}: {str(exc).splitlines()[0]}"
    if isinstance(result, str):  # explain()'s verdict
        return result
    parts = result if isinstance(result, tuple) else (result,)
    described = []
    for t in parts:
        if isinstance(t, Tensor):
            if is_fake(t):  # shapes only: a FakeTensor has no values
                finite = t.device.type
            else:
                finite = "finite" if bool(torch.isfinite(t).all()) else "non-finite"
            described.append(f"{tuple(t.shape)} {str(t.dtype).removeprefix('torch.')} {finite}")
        else:
            described.append(repr(t))
    return "ok " + ", ".join(described)


def _table(cases: dict[str, Callable[[], Any]]) -> str:
    return "\n".join(f"{name}: {_outcome(call)}" for name, call in cases.items())


def _qkv(b: int = 2, hq: int = 4, hkv: int = 2, sq: int = 5, sk: int = 7, d: int = 16, dv: int | None = None,
         dtype: torch.dtype = F32) -> tuple[Tensor, Tensor, Tensor]:  # fmt: skip
    return (
        torch.randn(b, hq, sq, d, dtype=dtype),
        torch.randn(b, hkv, sk, d, dtype=dtype),
        torch.randn(b, hkv, sk, d if dv is None else dv, dtype=dtype),
    )


def test_direct_api_matrix() -> None:
    q, k, v = _qkv()
    att = flashsdpa.attention
    wide = torch.randn(2, 4, 5, 32)[..., ::2]  # last-dim stride 2
    offset = torch.randn(2 * 4 * 5 * 16 + 1)[1:].view(2, 4, 5, 16)  # storage offset 1: rows off 16 bytes

    def grads_v_only() -> tuple[Tensor, ...]:
        vg = v.clone().requires_grad_()
        return torch.autograd.grad(att(q, k, vg).sum(), vg)

    def grads_all_causal() -> tuple[Tensor, ...]:
        qkv = [t.clone().requires_grad_() for t in (q, k, v)]
        return torch.autograd.grad(att(*qkv, causal=True).sum(), qkv)

    cases: dict[str, Callable[[], Any]] = {
        "list query": lambda: att([1.0], k, v),
        "3-D query": lambda: att(q[0], k, v),
        "5-D key": lambda: att(q, k[None], v),
        "int64": lambda: att(q.long(), k.long(), v.long()),
        "bool": lambda: att(q.bool(), k.bool(), v.bool()),
        "complex64": lambda: att(*(t.to(torch.complex64) for t in (q, k, v))),
        "key float64": lambda: att(q, k.double(), v),
        "value float16": lambda: att(q, k, v.half()),
        "key on meta": lambda: att(q, k.to("meta"), v),
        "batch": lambda: att(q, k[:1], v[:1]),
        "value heads": lambda: att(q, k, v[:, :1]),
        "value seq_len": lambda: att(q, k, v[:, :, :3]),
        "gqa ratio": lambda: att(q[:, :3], k, v),
        "gqa off": lambda: att(q, k, v, enable_gqa=False),
        "zero kv heads": lambda: att(q, k[:, :0], v[:, :0]),
        "key head_dim": lambda: att(q, k[..., :8], v),
        "zero head_dim": lambda: att(q[..., :0], k[..., :0], v),
        "zero value head_dim": lambda: att(q, k, v[..., :0]),
        "causal=1": lambda: att(q, k, v, causal=1),
        "alignment": lambda: att(q, k, v, causal=True, causal_alignment="upper"),
        "scale str": lambda: att(q, k, v, scale="0.5"),
        "scale bool": lambda: att(q, k, v, scale=True),
        "mask align 3 (op)": lambda: torch.ops.flashsdpa.fwd(q, k, v, 1.0, [-1, 0, 3]),
        "batch 0": lambda: att(q[:0], k[:0], v[:0], return_lse=True),
        "heads 0": lambda: att(q[:, :0], k[:, :0], v[:, :0]),
        "seqlen_q 0": lambda: att(q[:, :, :0], k, v, return_lse=True),
        "seqlen_k 0": lambda: att(q, k[:, :, :0], v[:, :, :0], return_lse=True),
        "last-dim stride 2": lambda: att(wide, wide[:, :2], wide[:, :2]),
        "storage offset 1": lambda: att(offset, offset[:, :2], offset[:, :2]),
        "expanded key (stride 0)": lambda: att(q, k[:1].expand(2, -1, -1, -1), v),
        "bshd view": lambda: att(*(t.transpose(1, 2).contiguous().transpose(1, 2) for t in (q, k, v))),
        "float16 on cpu": lambda: att(q.half(), k.half(), v.half()),
        "bfloat16 on cpu": lambda: att(q.bfloat16(), k.bfloat16(), v.bfloat16()),
        "Dv 24 != D 16": lambda: att(*_qkv(dv=24)),
        "causal Sq > Sk": lambda: att(*_qkv(sq=9, sk=3), causal=True, return_lse=True),
        "requires_grad v only": grads_v_only,
        "requires_grad all, causal": grads_all_causal,
    }
    assert_expected_inline(
        _table(cases),
        """\
list query: TypeError: query must be a torch.Tensor, got list
3-D query: ValueError: query.dim()=3: needs 4 (batch, heads, seq_len, head_dim)
5-D key: ValueError: key.dim()=5: needs 4 (batch, heads, seq_len, head_dim)
int64: TypeError: query.dtype=torch.int64: needs one of float16, bfloat16, float32, float64 on cpu
bool: TypeError: query.dtype=torch.bool: needs one of float16, bfloat16, float32, float64 on cpu
complex64: TypeError: query.dtype=torch.complex64: needs one of float16, bfloat16, float32, float64 on cpu
key float64: TypeError: key.dtype=torch.float64: differs from query.dtype=torch.float32
value float16: TypeError: value.dtype=torch.float16: differs from query.dtype=torch.float32
key on meta: ValueError: key.device=meta: differs from query.device=cpu
batch: ValueError: key.size(0)=1: differs from query.size(0)=2 (batch)
value heads: ValueError: value (2, 1, 7, 16): differs from key (2, 2, 7, 16) in heads or sequence length
value seq_len: ValueError: value (2, 2, 3, 16): differs from key (2, 2, 7, 16) in heads or sequence length
gqa ratio: ValueError: query heads 3: must be a multiple of key/value heads 2
gqa off: ValueError: query heads 4 != key/value heads 2: pass enable_gqa=True for GQA/MQA
zero kv heads: ValueError: query heads 4: must be a multiple of key/value heads 0
key head_dim: ValueError: key.size(3)=8: differs from query.size(3)=16 (head_dim)
zero head_dim: ValueError: head dims 0 (query) and 16 (value): need at least 1
zero value head_dim: ValueError: head dims 16 (query) and 0 (value): need at least 1
causal=1: TypeError: causal=1: needs a bool
alignment: ValueError: causal_alignment='upper': needs 'top_left' or 'bottom_right'
scale str: TypeError: scale='0.5': needs a float or None
scale bool: TypeError: scale=True: needs a float or None
mask align 3 (op): ValueError: mask=[-1, 0, 3]: needs [window_left, window_right, align] with each side >= 0 or -1 (unbounded) and align 0 (top-left) or 1 (bottom-right)
batch 0: ok (0, 4, 5, 16) float32 finite, (0, 4, 5) float32 finite
heads 0: ok (2, 0, 5, 16) float32 finite
seqlen_q 0: ok (2, 4, 0, 16) float32 finite, (2, 4, 0) float32 finite
seqlen_k 0: ok (2, 4, 5, 16) float32 finite, (2, 4, 5) float32 non-finite
last-dim stride 2: ok (2, 4, 5, 16) float32 finite
storage offset 1: ok (2, 4, 5, 16) float32 finite
expanded key (stride 0): ok (2, 4, 5, 16) float32 finite
bshd view: ok (2, 4, 5, 16) float32 finite
float16 on cpu: ok (2, 4, 5, 16) float16 finite
bfloat16 on cpu: ok (2, 4, 5, 16) bfloat16 finite
Dv 24 != D 16: ok (2, 4, 5, 24) float32 finite
causal Sq > Sk: ok (2, 4, 9, 16) float32 finite, (2, 4, 9) float32 finite
requires_grad v only: ok (2, 2, 7, 16) float32 finite
requires_grad all, causal: ok (2, 4, 5, 16) float32 finite, (2, 2, 7, 16) float32 finite, (2, 2, 7, 16) float32 finite""",
    )


def _packed(lengths_q: list[int], lengths_k: list[int], h: int = 2, d: int = 8) -> tuple[Tensor, ...]:
    q = torch.randn(sum(lengths_q), h, d)
    k = torch.randn(sum(lengths_k), h, d)
    v = torch.randn(sum(lengths_k), h, d)
    cu_q = torch.tensor([0, *torch.tensor(lengths_q).cumsum(0).tolist()], dtype=torch.int32)
    cu_k = torch.tensor([0, *torch.tensor(lengths_k).cumsum(0).tolist()], dtype=torch.int32)
    return q, k, v, cu_q, cu_k


def _i32(*values: int) -> Tensor:
    return torch.tensor(values, dtype=torch.int32)


def test_varlen_metadata_matrix() -> None:
    """Item 2: bad offsets and lengths are refused on the CPU path (they used to return wrong values)."""
    q, k, v, cu_q, cu_k = _packed([3, 5], [4, 6])  # 8 query rows, 10 key rows
    att = flashsdpa.attention_varlen
    fwd = torch.ops.flashsdpa.fwd_varlen.default
    out, lse = fwd(q, k, v, cu_q, cu_k, 5, 6, 0.5, [-1, -1, 0])
    cases: dict[str, Callable[[], Any]] = {
        "good": lambda: att(q, k, v, cu_q, cu_k, 5, 6),
        "good, larger max_seqlen": lambda: att(q, k, v, cu_q, cu_k, 50, 60),
        "good, rows past the last offset": lambda: att(q, k, v, _i32(0, 3, 6), cu_k, 3, 6, return_lse=True),
        "good, validate=True": lambda: att(q, k, v, cu_q, cu_k, 5, 6, validate=True),
        "cu_seqlens_q int64": lambda: att(q, k, v, cu_q.long(), cu_k, 5, 6),
        "cu_seqlens_k 2-D": lambda: att(q, k, v, cu_q, cu_k[None], 5, 6),
        "cu_seqlens_k on meta": lambda: att(q, k, v, cu_q, cu_k.to("meta"), 5, 6),
        "cu_seqlens_k shorter": lambda: att(q, k, v, cu_q, cu_k[:2], 5, 6),
        "one entry each": lambda: att(q, k, v, cu_q[:1], cu_k[:1], 5, 6),
        "cu_seqlens_q decreasing": lambda: att(q, k, v, _i32(0, 5, 3), cu_k, 5, 6),
        "cu_seqlens_k decreasing": lambda: att(q, k, v, cu_q, _i32(0, 7, 6), 5, 6),
        "cu_seqlens_q starts at 1": lambda: att(q, k, v, _i32(1, 3, 8), cu_k, 5, 6),
        "cu_seqlens_q past the rows": lambda: att(q, k, v, _i32(0, 3, 9), cu_k, 6, 6),
        "cu_seqlens_k past the rows": lambda: att(q, k, v, cu_q, _i32(0, 4, 11), 5, 7),
        "max_seqlen_q too small": lambda: att(q, k, v, cu_q, cu_k, 4, 6),
        "max_seqlen_k too small": lambda: att(q, k, v, cu_q, cu_k, 5, 5),
        "max_seqlen_q 0": lambda: att(q, k, v, cu_q, cu_k, 0, 6),
        "max_seqlen_k negative": lambda: att(q, k, v, cu_q, cu_k, 5, -1),
        "max_seqlen_q float": lambda: att(q, k, v, cu_q, cu_k, 5.0, 6),
        "2-D key": lambda: att(q, k[:, 0], v, cu_q, cu_k, 5, 6),
        "key head_dim": lambda: att(q, k[..., :4], v, cu_q, cu_k, 5, 6),
        "op fwd_varlen decreasing": lambda: fwd(q, k, v, _i32(0, 5, 3), cu_k, 5, 6, 0.5, [-1, -1, 0]),
        "op bwd_varlen past the rows": lambda: torch.ops.flashsdpa.bwd_varlen.default(
            out, q, k, v, out, lse, cu_q, _i32(0, 4, 12), 5, 8, 0.5, [-1, -1, 0]
        ),
    }
    assert_expected_inline(
        _table(cases),
        """\
good: ok (8, 2, 8) float32 finite
good, larger max_seqlen: ok (8, 2, 8) float32 finite
good, rows past the last offset: ok (8, 2, 8) float32 finite, (2, 8) float32 non-finite
good, validate=True: ok (8, 2, 8) float32 finite
cu_seqlens_q int64: ValueError: cu_seqlens_q: needs a 1-D int32 tensor on cpu
cu_seqlens_k 2-D: ValueError: cu_seqlens_k: needs a 1-D int32 tensor on cpu
cu_seqlens_k on meta: ValueError: cu_seqlens_k: needs a 1-D int32 tensor on cpu
cu_seqlens_k shorter: ValueError: cu_seqlens_q has 3 entries, cu_seqlens_k 2: need the same number, batch + 1 >= 2
one entry each: ValueError: cu_seqlens_q has 1 entries, cu_seqlens_k 1: need the same number, batch + 1 >= 2
cu_seqlens_q decreasing: ValueError: cu_seqlens_q[2]=3 < cu_seqlens_q[1]=5: needs non-decreasing offsets (sequence 1 would have a negative length)
cu_seqlens_k decreasing: ValueError: cu_seqlens_k[2]=6 < cu_seqlens_k[1]=7: needs non-decreasing offsets (sequence 1 would have a negative length)
cu_seqlens_q starts at 1: ValueError: cu_seqlens_q[0]=1: needs 0 (the first sequence starts at row 0)
cu_seqlens_q past the rows: ValueError: cu_seqlens_q[-1]=9: exceeds query.size(0)=8 (offsets past the packed rows)
cu_seqlens_k past the rows: ValueError: cu_seqlens_k[-1]=11: exceeds key.size(0)=10 (offsets past the packed rows)
max_seqlen_q too small: ValueError: max_seqlen_q=4: needs at least 5, the length of the longest query sequence (1)
max_seqlen_k too small: ValueError: max_seqlen_k=5: needs at least 6, the length of the longest key sequence (1)
max_seqlen_q 0: ValueError: max_seqlen_q=0: needs at least 5, the length of the longest query sequence (1)
max_seqlen_k negative: ValueError: max_seqlen_k=-1: needs a non-negative int
max_seqlen_q float: ValueError: max_seqlen_q=5.0: needs a non-negative int
2-D key: ValueError: key.dim()=2: needs 3 (total, heads, head_dim)
key head_dim: ValueError: key.size(2)=4: differs from query.size(2)=8 (head_dim)
op fwd_varlen decreasing: ValueError: cu_seqlens_q[2]=3 < cu_seqlens_q[1]=5: needs non-decreasing offsets (sequence 1 would have a negative length)
op bwd_varlen past the rows: ValueError: cu_seqlens_k[-1]=12: exceeds key.size(0)=10 (offsets past the packed rows)""",
    )


def test_seqused_k_and_opt_in() -> None:
    """seqused_k (the aten varlen ops' argument) and the opt-in value checks of CUDA metadata."""
    q, k, _, cu_q, cu_k = _packed([3, 5], [4, 6])

    def check(seqused: Any, **kwargs: Any) -> Callable[[], None]:
        return lambda: validation.check_varlen(q, k, cu_q, cu_k, seqused, 5, 6, **kwargs)

    cases: dict[str, Callable[[], Any]] = {
        "seqused_k good": check(_i32(2, 6)),
        "seqused_k int64": check(torch.tensor([2, 6])),
        "seqused_k 3 entries": check(_i32(2, 6, 1)),
        "seqused_k past its sequence": check(_i32(5, 6)),
        "seqused_k negative": check(_i32(2, -1)),
        "values=False skips the values": lambda: validation.check_varlen(q, k, _i32(0, 9, 3), cu_k, None, 5, 6,
                                                                         values=False),
    }
    assert_expected_inline(
        _table(cases),
        """\
seqused_k good: ok None
seqused_k int64: ValueError: seqused_k.dtype=torch.int64: needs torch.int32
seqused_k 3 entries: ValueError: seqused_k has 3 entries: needs batch = 2
seqused_k past its sequence: ValueError: seqused_k[0]=5: needs 0 <= seqused_k[0] <= 4, the length of key sequence 0 (cu_seqlens_k[1] - cu_seqlens_k[0])
seqused_k negative: ValueError: seqused_k[1]=-1: needs 0 <= seqused_k[1] <= 6, the length of key sequence 1 (cu_seqlens_k[2] - cu_seqlens_k[1])
values=False skips the values: ok None""",
    )
    assert validation.is_enabled() is False  # FLASHSDPA_VALIDATE unset: CUDA offsets are not read
    validation.set_enabled(True)
    try:
        assert validation.is_enabled()
    finally:
        validation.set_enabled(False)


def _sdpa_parity(call: Callable[[], Any]) -> str:
    """The call's outcome inside enable(), after checking it is PyTorch's outcome outside, message
    and all. Pinned without PyTorch's own message, whose wording changes between torch versions."""
    outside = _outcome(call)
    torch.manual_seed(0)
    with flashsdpa.enable():
        inside = _outcome(call)
    assert inside == outside, (inside, outside)
    return inside if inside.startswith("ok ") else f"PyTorch's {inside.split(':')[0]}, as outside enable()"


def test_sdpa_inside_enable_on_cpu() -> None:
    """CPU calls inside enable() are PyTorch's, errors and all (the documented fallback: CPU)."""
    q, k, v = _qkv(hkv=4)
    sdpa = F.scaled_dot_product_attention
    mask = torch.ones(5, 7, dtype=torch.bool).tril()
    cases: dict[str, Callable[[], Any]] = {
        "float32": lambda: sdpa(q, k, v),
        "float64, causal": lambda: sdpa(q.double(), k.double(), v.double(), is_causal=True),
        "bfloat16": lambda: sdpa(q.bfloat16(), k.bfloat16(), v.bfloat16()),
        "3-D": lambda: sdpa(q[0], k[0], v[0]),
        "mixed dtypes": lambda: sdpa(q, k.double(), v),
        "int64": lambda: sdpa(q.long(), k.long(), v.long()),
        "head dims differ": lambda: sdpa(q, k[..., :8], v),
        "gqa without the flag": lambda: sdpa(q, k[:, :2], v[:, :2]),
        "gqa with the flag": lambda: sdpa(q, k[:, :2], v[:, :2], enable_gqa=True),
        "bool mask": lambda: sdpa(q, k, v, attn_mask=mask),
        "mask and is_causal": lambda: sdpa(q, k, v, attn_mask=mask, is_causal=True),
        "zero batch": lambda: sdpa(q[:0], k[:0], v[:0]),
        "requires_grad q": lambda: sdpa(q.clone().requires_grad_(), k, v),
    }
    assert_expected_inline(
        "\n".join(f"{name}: {_sdpa_parity(call)}" for name, call in cases.items()),
        """\
float32: ok (2, 4, 5, 16) float32 finite
float64, causal: ok (2, 4, 5, 16) float64 finite
bfloat16: ok (2, 4, 5, 16) bfloat16 finite
3-D: ok (4, 5, 16) float32 finite
mixed dtypes: PyTorch's RuntimeError, as outside enable()
int64: PyTorch's RuntimeError, as outside enable()
head dims differ: PyTorch's RuntimeError, as outside enable()
gqa without the flag: PyTorch's RuntimeError, as outside enable()
gqa with the flag: ok (2, 4, 5, 16) float32 finite
bool mask: ok (2, 4, 5, 16) float32 finite
mask and is_causal: ok (2, 4, 5, 16) float32 finite
zero batch: ok (0, 4, 5, 16) float32 finite
requires_grad q: ok (2, 4, 5, 16) float32 finite""",
    )


def test_cuda_decisions(fake_build: Any, fake_mode: Any) -> None:
    """What SDPA inside enable() and the direct API decide for CUDA tensors (FakeTensors, a fake
    CUDA build with head dims 64/128/256): served, the fallback with its reason, or the error."""
    cuda = "cuda"

    def make(b: int = 2, hq: int = 4, hkv: int = 2, sq: int = 16, sk: int = 24, d: int = 64,
             dv: int | None = None, dtype: torch.dtype = torch.float16) -> tuple[Tensor, Tensor, Tensor]:  # fmt: skip
        return (
            torch.empty(b, hq, sq, d, dtype=dtype, device=cuda),
            torch.empty(b, hkv, sk, d, dtype=dtype, device=cuda),
            torch.empty(b, hkv, sk, d if dv is None else dv, dtype=dtype, device=cuda),
        )

    def explain(*args: Tensor, **kwargs: Any) -> Callable[[], str]:
        return lambda: "; ".join(flashsdpa.explain(*args, **kwargs)) or "served"

    q, k, v = make()
    packed = (torch.empty(16, 4, 64, dtype=torch.float16, device=cuda),) + (
        torch.empty(24, 2, 64, dtype=torch.float16, device=cuda),
    ) * 2
    # Slicing a fake CUDA tensor needs a CUDA torch; as_strided does not.
    storage = torch.empty(2 * 4 * 16 * 64 + 4, dtype=torch.float16, device=cuda)
    misaligned = storage.as_strided((2, 4, 16, 64), (4096, 1024, 64, 1), 4)
    strided = storage.as_strided((2, 4, 16, 32), (4096, 1024, 64, 2), 0)
    cases: dict[str, Callable[[], Any]] = {
        "sdpa served": explain(q, k, v, enable_gqa=True),
        "sdpa float32": explain(*make(dtype=F32), enable_gqa=True),
        "sdpa float64": explain(*make(dtype=torch.float64), enable_gqa=True),
        "sdpa head_dim 100 (padded to 104)": explain(*make(d=100), enable_gqa=True),
        "sdpa head_dim 264": explain(*make(d=264), enable_gqa=True),
        "sdpa head_dim 512": explain(*make(d=512), enable_gqa=True),
        "sdpa head_dim 520": explain(*make(d=520), enable_gqa=True),
        "sdpa dropout": explain(q, k, v, dropout_p=0.1, enable_gqa=True),
        "sdpa float mask": explain(q, k, v, attn_mask=torch.empty(16, 24, dtype=torch.float16, device=cuda),
                                   enable_gqa=True),
        "sdpa gqa without the flag": explain(q, k, v),
        "sdpa storage offset 4 elements": explain(misaligned, misaligned, misaligned),
        "sdpa last-dim stride 2": explain(strided, strided, strided),
        "sdpa batch 0": explain(*make(b=0), enable_gqa=True),
        "sdpa seqlen_k 0": explain(*make(sk=0), enable_gqa=True),
        "sdpa Dv 128 != D 64": explain(*make(dv=128), enable_gqa=True),
        "sdpa causal Sq != Sk": explain(q, k, v, is_causal=True, enable_gqa=True),
        "sdpa batch x heads 131072 (grid)": explain(*make(b=1024, hq=128, hkv=128, sq=1, sk=1), enable_gqa=True),
        "sdpa 1M tokens": explain(*make(b=1, hq=1, hkv=1, sq=1 << 20, sk=1 << 20)),
        "api float32": lambda: flashsdpa.attention(*make(dtype=F32)),
        "api head_dim 100": lambda: flashsdpa.attention(*make(d=100)),
        "api head_dim 264": lambda: flashsdpa.attention(*make(d=264)),
        "api value head_dim 72": lambda: flashsdpa.attention(*make(dv=72)),
        "api served": lambda: flashsdpa.attention(*make(), causal=True, return_lse=True),
        "api key on cpu": lambda: flashsdpa.attention(q, torch.empty(2, 2, 24, 64, dtype=torch.float16), v),
        "api varlen cu_seqlens on cpu": lambda: flashsdpa.attention_varlen(
            *packed, torch.zeros(2, dtype=torch.int32), torch.zeros(2, dtype=torch.int32), 16, 24
        ),
        "api varlen served (values not read)": lambda: flashsdpa.attention_varlen(
            *packed, *(torch.empty(2, dtype=torch.int32, device=cuda),) * 2, 16, 24
        ),
    }
    fake_build()
    table = _table(cases)
    fake_build(head_dims=(128,), dtypes=("bfloat16",))
    table += "\nnarrowed build:\n" + _table({
        "sdpa float16": explain(q, k, v, enable_gqa=True),
        "sdpa head_dim 192": explain(*make(d=192, dtype=torch.bfloat16), enable_gqa=True),
        "api float16": lambda: flashsdpa.attention(q, k, v),
    })  # fmt: skip
    fake_build(with_cuda=False)
    table += "\nCPU-only build:\n" + _table({
        "sdpa": explain(q, k, v, enable_gqa=True),
        "api": lambda: flashsdpa.attention(q, k, v),
    })  # fmt: skip
    assert_expected_inline(table, """\
sdpa served: served
sdpa float32: query.dtype=torch.float32: needs float16 or bfloat16
sdpa float64: query.dtype=torch.float64: needs float16 or bfloat16
sdpa head_dim 100 (padded to 104): served
sdpa head_dim 264: head_dim=264: this build compiled head dims [64, 128, 256]; rebuild with FLASHSDPA_HEAD_DIMS including 264 or larger
sdpa head_dim 512: head_dim=512: this build compiled head dims [64, 128, 256]; rebuild with FLASHSDPA_HEAD_DIMS including 512 or larger
sdpa head_dim 520: head_dim=520: exceeds 512
sdpa dropout: served
sdpa float mask: attn_mask with grouped-query attention (4 query heads, 2 key heads): PyTorch's masked SDPA ops take equal heads (flashsdpa.attention(attn_mask=...) serves it)
sdpa gqa without the flag: query has 4 heads, key and value 2: SDPA needs enable_gqa=True for grouped-query attention
sdpa storage offset 4 elements: query strides (4096, 1024, 64) and storage offset 4: need multiples of 8 elements (16-byte aligned rows); key strides (4096, 1024, 64) and storage offset 4: need multiples of 8 elements (16-byte aligned rows); value strides (4096, 1024, 64) and storage offset 4: need multiples of 8 elements (16-byte aligned rows)
sdpa last-dim stride 2: last dimension stride 2 of query: needs 1; last dimension stride 2 of key: needs 1; last dimension stride 2 of value: needs 1
sdpa batch 0: batch=0: empty inputs are left to PyTorch's kernels
sdpa seqlen_k 0: seqlen_k=0: empty inputs are left to PyTorch's kernels
sdpa Dv 128 != D 64: served
sdpa causal Sq != Sk: served
sdpa batch x heads 131072 (grid): served
sdpa 1M tokens: served
api float32: TypeError: query.dtype=torch.float32: needs one of float16, bfloat16 on cuda
api head_dim 100: ValueError: head_dim=100: needs a positive multiple of 8
api head_dim 264: ValueError: head_dim=264: this build compiled head dims [64, 128, 256]; rebuild with FLASHSDPA_HEAD_DIMS including 264 or larger
api value head_dim 72: ok (2, 4, 16, 72) float16 cuda
api served: ok (2, 4, 16, 64) float16 cuda, (2, 4, 16) float32 cuda
api key on cpu: ValueError: key.device=cpu: differs from query.device=cuda:0
api varlen cu_seqlens on cpu: ValueError: cu_seqlens_q: needs a 1-D int32 tensor on cuda:0
api varlen served (values not read): ok (16, 4, 64) float16 cuda
narrowed build:
sdpa float16: query.dtype=torch.float16: this build compiled ['bfloat16']; rebuild with FLASHSDPA_DTYPES including fp16
sdpa head_dim 192: head_dim=192: this build compiled head dims [128]; rebuild with FLASHSDPA_HEAD_DIMS including 192 or larger
api float16: TypeError: query.dtype=torch.float16: this build compiled ['bfloat16']; rebuild with FLASHSDPA_DTYPES including fp16
CPU-only build:
sdpa: flashsdpa._C was built without CUDA (no nvcc at build time)
api: RuntimeError: flashsdpa.attention on cuda:0: flashsdpa._C was built without CUDA (no nvcc at build time)""")
