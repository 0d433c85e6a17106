# test_bad_inputs_gpu.py: the CUDA half of the bad-input matrix (issue 10; the CPU half is
# tests/test_bad_inputs.py): real launches through the direct API and through SDPA inside enable(),
# each a clear error naming the argument and the limit or the documented behaviour, pinned with
# expecttest; the CUDA context must be healthy afterwards (a small attention runs and is right).
# Also: a GPU with a CUDA build must have the kernels the build was asked for (issue 10, item 3).
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from expecttest import assert_expected_inline
from torch import Tensor

import flashsdpa
from flashsdpa import buildcheck, validation
from helpers import gpu_skip_reason, skip_unless_compiled

GPU_SKIP = gpu_skip_reason()
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(GPU_SKIP is not None, reason=f"GPU suite: {GPU_SKIP}")]

BF16 = torch.bfloat16


def _outcome(call: Callable[[], Any]) -> str:
    try:
        result = call()
        torch.cuda.synchronize()  # an asynchronous launch error must surface here, not later
    except (TypeError, ValueError, RuntimeError) as exc:
        return f"{type(exc).__name__}: {str(exc).splitlines()[0]}"
    if isinstance(result, str):
        return result
    parts = result if isinstance(result, tuple) else (result,)
    # None: an undefined tensor came back (session 29, H200, torch 2.11: SDPA of a zero batch
    # outside enable() in a fresh process; scripts/dev/bad_inputs_probe.py), said as such.
    return "ok " + ", ".join(
        "None" if t is None else
        f"{tuple(t.shape)} {str(t.dtype).removeprefix('torch.')} {'finite' if bool(torch.isfinite(t).all()) else 'non-finite'}"
        for t in parts
    )  # fmt: skip


def _healthy() -> None:
    """The CUDA context still works: a fresh attention on our kernels matches PyTorch's math."""
    q, k, v = (torch.randn(1, 2, 64, 128, device="cuda", dtype=BF16) for _ in range(3))
    ours = flashsdpa.attention(q, k, v, causal=True)
    ref = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=True)
    torch.cuda.synchronize()
    torch.testing.assert_close(ours.float(), ref, atol=2e-2, rtol=2e-2)


def _qkv(b: int = 2, hq: int = 4, hkv: int = 2, sq: int = 33, sk: int = 47, d: int = 128,
         dtype: torch.dtype = BF16) -> tuple[Tensor, Tensor, Tensor]:  # fmt: skip
    return tuple(torch.randn(b, h, s, d, device="cuda", dtype=dtype) for h, s in ((hq, sq), (hkv, sk), (hkv, sk)))  # type: ignore[return-value]


def test_build_has_what_it_was_asked_for() -> None:
    """On a GPU machine the build must be a CUDA build with every kernel its request named."""
    build = flashsdpa.build_info()
    assert build["with_cuda"], f"a GPU is present but flashsdpa._C has no CUDA kernels: {build['import_error']}"
    request = buildcheck.load_request()
    assert request is not None, "no _build_request.json next to _C: build it with setup.py"
    assert buildcheck.mismatches(build, request) == []


def test_direct_api_on_cuda() -> None:
    skip_unless_compiled(BF16, 128)
    q, k, v = _qkv()
    att = flashsdpa.attention
    storage = torch.randn(2 * 4 * 33 * 128 + 4, device="cuda", dtype=BF16)
    offset4 = storage[4:].view(2, 4, 33, 128)
    cases: dict[str, Callable[[], Any]] = {
        "served": lambda: att(q, k, v, causal=True, return_lse=True),
        "float32": lambda: att(q.float(), k.float(), v.float()),
        "float64": lambda: att(q.double(), k.double(), v.double()),
        "head_dim 100": lambda: att(*_qkv(d=100)),
        "head_dim 520": lambda: att(*_qkv(d=520)),
        "key on cpu": lambda: att(q, k.cpu(), v),
        "value float16": lambda: att(q, k, v.half()),
        "gqa ratio": lambda: att(q[:, :3], k, v),
        "storage offset 4 (copied)": lambda: att(offset4, offset4[:, :2], offset4[:, :2]),
        "last-dim stride 2 (copied)": lambda: att(*(torch.randn(2, h, 33, 256, device="cuda", dtype=BF16)[..., ::2]
                                                    for h in (4, 2, 2))),
        "expanded key (stride 0)": lambda: att(q, k[:1].expand(2, -1, -1, -1), v),
        "batch 0": lambda: att(q[:0], k[:0], v[:0], return_lse=True),
        "seqlen_k 0": lambda: att(q, k[:, :, :0], v[:, :, :0], return_lse=True),
        "seqlen_q 0": lambda: att(q[:, :, :0], k, v),
        "causal Sq > Sk bottom-right (rows with no key)": lambda: att(
            *_qkv(sq=64, sk=8), causal=True, causal_alignment="bottom_right", return_lse=True
        ),
        "batch x heads 70000 (grid)": lambda: att(*_qkv(b=700, hq=100, hkv=100, sq=1, sk=1)),
        "single key, 64k queries": lambda: att(*_qkv(b=1, hq=1, hkv=1, sq=65536, sk=1)),
    }  # fmt: skip
    table = "\n".join(f"{name}: {_outcome(call)}" for name, call in cases.items())
    assert_expected_inline(
        table,
        """\
served: ok (2, 4, 33, 128) bfloat16 finite, (2, 4, 33) float32 finite
float32: TypeError: query.dtype=torch.float32: needs one of float16, bfloat16 on cuda
float64: TypeError: query.dtype=torch.float64: needs one of float16, bfloat16 on cuda
head_dim 100: ValueError: head_dim=100: needs a positive multiple of 8
head_dim 520: ValueError: head_dim=520: exceeds 512
key on cpu: ValueError: key.device=cpu: differs from query.device=cuda:0
value float16: TypeError: value.dtype=torch.float16: differs from query.dtype=torch.bfloat16
gqa ratio: ValueError: query heads 3: must be a multiple of key/value heads 2
storage offset 4 (copied): ok (2, 4, 33, 128) bfloat16 finite
last-dim stride 2 (copied): ok (2, 4, 33, 128) bfloat16 finite
expanded key (stride 0): ok (2, 4, 33, 128) bfloat16 finite
batch 0: ok (0, 4, 33, 128) bfloat16 finite, (0, 4, 33) float32 finite
seqlen_k 0: ok (2, 4, 33, 128) bfloat16 finite, (2, 4, 33) float32 non-finite
seqlen_q 0: ok (2, 4, 0, 128) bfloat16 finite
causal Sq > Sk bottom-right (rows with no key): ok (2, 4, 64, 128) bfloat16 finite, (2, 4, 64) float32 non-finite
batch x heads 70000 (grid): ok (700, 100, 1, 128) bfloat16 finite
single key, 64k queries: ok (1, 1, 65536, 128) bfloat16 finite""",
    )
    _healthy()


def test_requires_grad_combinations() -> None:
    skip_unless_compiled(BF16, 128)
    q, k, v = _qkv()
    rows = []
    for mask in range(8):
        leaves = [t.clone().requires_grad_(bool(mask >> i & 1)) for i, t in enumerate((q, k, v))]
        out = flashsdpa.attention(*leaves, causal=True)
        wanted = [t for t in leaves if t.requires_grad]
        grads = torch.autograd.grad(out.float().sum(), wanted) if wanted else ()
        rows.append(f"{''.join('qkv'[i] for i in range(3) if mask >> i & 1) or '-'}: {len(grads)} grads, "
                    f"finite={all(bool(torch.isfinite(g).all()) for g in grads)}")  # fmt: skip
    assert_expected_inline(
        "\n".join(rows),
        """\
-: 0 grads, finite=True
q: 1 grads, finite=True
k: 1 grads, finite=True
qk: 2 grads, finite=True
v: 1 grads, finite=True
qv: 2 grads, finite=True
kv: 2 grads, finite=True
qkv: 3 grads, finite=True""",
    )
    _healthy()


def test_sdpa_inside_enable_on_cuda() -> None:
    """Inside enable() every bad call gets PyTorch's error or PyTorch's fallback, as outside."""
    skip_unless_compiled(BF16, 128)
    sdpa = F.scaled_dot_product_attention

    # Outside and inside get different key lengths: PyTorch's cuDNN SDPA keeps a graph per shape,
    # and on torch 2.11 a second call of a shape whose graph failed to build ("head dims differ":
    # kDim != d_qk) crashed the process inside cuDNN (run_cudnn_SDP_fprop, seen under cuda-gdb on
    # the H200) instead of raising again. That is PyTorch's, not the shim's: compare fresh shapes.
    def cases_for(sk: int) -> dict[str, Callable[[], Any]]:
        q, k, v = _qkv(hkv=4, sk=sk)
        return {
            "served": lambda: sdpa(q, k, v, is_causal=True),
            "float32 (falls back)": lambda: sdpa(q.float(), k.float(), v.float()),
            "dropout (falls back)": lambda: sdpa(q, k, v, dropout_p=0.5),
            "head_dim 100 (padded)": lambda: sdpa(*_qkv(hkv=4, sk=sk, d=100)),
            "head_dim 512 (falls back)": lambda: sdpa(*_qkv(hkv=4, sk=sk, d=512)),
            "mixed dtypes": lambda: sdpa(q, k.half(), v),
            "head dims differ": lambda: sdpa(q, k[..., :64], v),
            "gqa without the flag": lambda: sdpa(q, k[:, :2], v[:, :2]),
            "zero batch": lambda: sdpa(q[:0], k[:0], v[:0]),
        }

    outside = {name: _outcome(call) for name, call in cases_for(47).items()}
    with flashsdpa.enable():
        inside = {name: _outcome(call) for name, call in cases_for(49).items()}
    # PyTorch's cuDNN SDPA (the default on Hopper) returns an undefined tensor (None) for a zero
    # batch: torch 2.11 on the H200, flashsdpa not even imported, and with CUDNN_ATTENTION forced;
    # flash, efficient and math return the (0, ...) tensor (session 32, scripts/dev/bad_inputs_probe.py
    # --no-import). Whether a run sees it depends on which backend SDPA picks first (an earlier test
    # may leave another in front), so the test ran green in the suite and red alone. Inside enable()
    # the call gets the empty tensor the other backends give: PyTorch's defect is not reproduced.
    if outside["zero batch"] == "ok None":
        assert inside["zero batch"] == "ok (0, 4, 33, 128) bfloat16 finite", inside["zero batch"]
        outside["zero batch"] = inside["zero batch"]
    # The same kind of outcome (ok with the same shapes and finiteness, or the same exception type).
    kind = {name: (o.split(":")[0] if not o.startswith("ok") else o.replace("49", "47")) for name, o in inside.items()}
    differ = {name: (inside[name], outside[name]) for name in outside if kind[name] != (
        outside[name].split(":")[0] if not outside[name].startswith("ok") else outside[name])}
    assert not differ, differ
    assert inside["served"].startswith("ok") and "non-finite" not in inside["served"], inside["served"]
    _healthy()


def test_varlen_metadata_on_cuda() -> None:
    """CUDA metadata: the structure always; the values with validate=True or FLASHSDPA_VALIDATE=1."""
    skip_unless_compiled(BF16, 128)
    q = torch.randn(8, 4, 128, device="cuda", dtype=BF16)
    k = torch.randn(10, 2, 128, device="cuda", dtype=BF16)

    def cu(*values: int, dtype: torch.dtype = torch.int32) -> Tensor:
        return torch.tensor(values, dtype=dtype, device="cuda")

    att = flashsdpa.attention_varlen
    good = (cu(0, 3, 8), cu(0, 4, 10))
    cases: dict[str, Callable[[], Any]] = {
        "good": lambda: att(q, k, k, *good, 5, 6),
        "good, validate=True": lambda: att(q, k, k, *good, 5, 6, validate=True),
        "int64 offsets": lambda: att(q, k, k, cu(0, 3, 8, dtype=torch.int64), good[1], 5, 6),
        "offsets on cpu": lambda: att(q, k, k, good[0].cpu(), good[1], 5, 6),
        "decreasing, validate=True": lambda: att(q, k, k, cu(0, 5, 3), good[1], 5, 6, validate=True),
        "past the rows, validate=True": lambda: att(q, k, k, good[0], cu(0, 4, 11), 5, 7, validate=True),
        "max_seqlen_q too small, validate=True": lambda: att(q, k, k, *good, 4, 6, validate=True),
    }
    table = [f"{name}: {_outcome(call)}" for name, call in cases.items()]
    validation.set_enabled(True)  # what FLASHSDPA_VALIDATE=1 does
    try:
        table.append(f"decreasing, FLASHSDPA_VALIDATE=1: {_outcome(lambda: att(q, k, k, cu(0, 5, 3), good[1], 5, 6))}")
    finally:
        validation.set_enabled(False)
    assert_expected_inline(
        "\n".join(table),
        """\
good: ok (8, 4, 128) bfloat16 finite
good, validate=True: ok (8, 4, 128) bfloat16 finite
int64 offsets: ValueError: cu_seqlens_q: needs a 1-D int32 tensor on cuda:0
offsets on cpu: ValueError: cu_seqlens_q: needs a 1-D int32 tensor on cuda:0
decreasing, validate=True: ValueError: cu_seqlens_q[2]=3 < cu_seqlens_q[1]=5: needs non-decreasing offsets (sequence 1 would have a negative length)
past the rows, validate=True: ValueError: cu_seqlens_k[-1]=11: exceeds key.size(0)=10 (offsets past the packed rows)
max_seqlen_q too small, validate=True: ValueError: max_seqlen_q=4: needs at least 5, the length of the longest query sequence (1)
decreasing, FLASHSDPA_VALIDATE=1: ValueError: cu_seqlens_q[2]=3 < cu_seqlens_q[1]=5: needs non-decreasing offsets (sequence 1 would have a negative length)""",
    )
    _healthy()
