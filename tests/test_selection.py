# test_selection.py: which calls our kernels serve, and the words explain() uses when they do not.
#
# Runs on CPU: CUDA inputs are FakeTensors (metadata, no data) and the build is a stand-in for a
# CUDA build of _C (conftest.FakeCudaBuild), so every decision is exercised without a GPU. The
# explain() messages are pinned with expecttest (EXPECTTEST_ACCEPT=1 rewrites them).
from __future__ import annotations

import itertools
import warnings
from typing import Any

import pytest
import torch
from expecttest import assert_expected_inline
from torch import Tensor
from torch.nn.attention.bias import causal_lower_right, causal_upper_left

import flashsdpa
from flashsdpa import entry, selection

F16, BF16, F32 = torch.float16, torch.bfloat16, torch.float32
# Causal masks, made outside any FakeTensorMode (a CausalBias cannot be created inside one).
with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # "Lower right causal bias will produce NaNs ... seq_len_q > seq_len_kv"
    LOWER_9_7, UPPER_9_7, LOWER_16_16 = causal_lower_right(9, 7), causal_upper_left(9, 7), causal_lower_right(16, 16)


def qkv(
    b: int = 2,
    hq: int = 4,
    hkv: int = 4,
    sq: int = 16,
    sk: int = 16,
    d: int = 64,
    dv: int | None = None,
    dtype: torch.dtype = F16,
    device: str = "cuda",
    layout: str = "bhsd",
) -> tuple[Tensor, Tensor, Tensor]:
    """q, k, v in SDPA's (B, H, S, D) view; "bshd" transposes (B, S, H, D) storage, as models do."""
    dv = d if dv is None else dv

    def make(s: int, h: int, dim: int) -> Tensor:
        if layout == "bshd":
            return torch.empty(b, s, h, dim, dtype=dtype, device=device).transpose(1, 2)
        return torch.empty(b, h, s, dim, dtype=dtype, device=device)

    return make(sq, hq, d), make(sk, hkv, d), make(sk, hkv, dv)


def lines(reasons: list[str]) -> str:
    return "\n".join(reasons)


# ---- explain(): pinned messages ------------------------------------------------------------------


def test_explain_served(fake_build: Any, fake_mode: Any) -> None:
    assert flashsdpa.explain(*qkv()) == []
    assert flashsdpa.explain(*qkv(hq=8, hkv=2), enable_gqa=True, is_causal=True) == []
    assert flashsdpa.explain(*qkv(d=96)) == []  # served by the 128 bucket
    assert flashsdpa.explain(*qkv(d=100)) == []  # SDPA pads it to 104 first
    assert flashsdpa.explain(*qkv(layout="bshd", dtype=BF16), scale=0.3) == []


def test_explain_sdpa_arguments(fake_build: Any, fake_mode: Any) -> None:
    q, k, v = qkv(sq=32, sk=32)
    mask = torch.empty(32, 32, dtype=torch.bool, device="cuda")
    assert flashsdpa.explain(q, k, v, attn_mask=mask) == []  # served through SDPA's masked ops (routers_masked.py)
    assert flashsdpa.explain(q, k, v, attn_mask=mask.to(q.dtype)) == []
    assert_expected_inline(
        lines(flashsdpa.explain(q, k, v, attn_mask=mask.float())),
        """attn_mask.dtype=torch.float32: needs torch.bool or query.dtype=torch.float16""",
    )
    assert_expected_inline(
        lines(flashsdpa.explain(q, k, v, attn_mask=torch.empty(3, 32, 32, dtype=torch.bool, device="cuda"))),
        """attn_mask (3, 32, 32): does not broadcast to (B, H, Sq, Sk) = (2, 4, 32, 32)""",
    )
    q16, k16, v16 = qkv()
    mask16 = torch.empty(16, 16, dtype=torch.bool, device="cuda")
    assert flashsdpa.explain(q16, k16, v16, attn_mask=mask16) == []  # the decode path takes the bias
    fake_build(decode_features=0)  # a table whose decode path takes no modifier
    assert_expected_inline(
        lines(flashsdpa.explain(q16, k16, v16, attn_mask=mask16)),
        """attn_mask with 16 query rows (<= 16, decode-sized): the split-KV decode kernel does not take its mask here (bias: family sm80: bias: not served by the sm80 family's decode path) (flashsdpa.attention(attn_mask=...) serves it)""",
    )
    fake_build()
    assert_expected_inline(
        lines(flashsdpa.explain(q, k, v, attn_mask=mask, dropout_p=0.1)),
        """dropout_p=0.1 with attn_mask or score modifiers: no kernel serves both""",
    )
    assert flashsdpa.explain(q, k, v, dropout_p=0.1) == []  # dropout alone is served (sm80's table lists it)
    assert_expected_inline(
        lines(flashsdpa.explain(*qkv(hq=8, hkv=2))),
        """query has 8 heads, key and value 2: SDPA needs enable_gqa=True for grouped-query attention""",
    )


# A second CUDA device for the device-mismatch rules. FakeTensorMode makes one from nothing on a
# CPU-only torch, but on a real CUDA torch it initializes that device, which must then exist.
HAVE_SECOND_CUDA = not torch.cuda.is_available() or torch.cuda.device_count() >= 2


def test_explain_dtypes_and_devices(fake_build: Any, fake_mode: Any) -> None:
    assert_expected_inline(
        lines(flashsdpa.explain(*qkv(dtype=F32))), """query.dtype=torch.float32: needs float16 or bfloat16"""
    )
    q, k, _ = qkv()
    v = torch.empty(2, 4, 16, 64, dtype=BF16, device="cuda")
    assert_expected_inline(
        lines(flashsdpa.explain(q, k, v)), """value.dtype=torch.bfloat16: differs from query.dtype=torch.float16"""
    )
    if HAVE_SECOND_CUDA:
        v = torch.empty(2, 4, 16, 64, dtype=F16, device="cuda:1")
        assert_expected_inline(
            lines(flashsdpa.explain(q, k, v)), """value.device=cuda:1: differs from query.device=cuda:0"""
        )
    fake_build(dtypes=("bfloat16",))
    assert_expected_inline(
        lines(flashsdpa.explain(*qkv(dtype=F16))),
        """query.dtype=torch.float16: this build compiled ['bfloat16']; rebuild with FLASHSDPA_DTYPES including fp16""",
    )


def test_explain_cpu_tensors(fake_build: Any) -> None:
    q, k, v = qkv(device="cpu", dtype=F32)
    assert_expected_inline(
        lines(flashsdpa.explain(q, k, v)),
        """\
query.dtype=torch.float32: needs float16 or bfloat16
device cpu: needs a CUDA device""",
    )


def test_explain_build_without_cuda(fake_build: Any, fake_mode: Any) -> None:
    fake_build(with_cuda=False)
    assert_expected_inline(
        lines(flashsdpa.explain(*qkv())), """flashsdpa._C was built without CUDA (no nvcc at build time)"""
    )


def test_explain_head_dims(fake_build: Any, fake_mode: Any) -> None:
    assert_expected_inline(lines(flashsdpa.explain(*qkv(d=264))), """head_dim=264: this build compiled head dims [64, 128, 256]; rebuild with FLASHSDPA_HEAD_DIMS including 264 or larger""")
    fake_build(head_dims=(64, 128))
    assert_expected_inline(
        lines(flashsdpa.explain(*qkv(d=192))),
        """head_dim=192: this build compiled head dims [64, 128]; rebuild with FLASHSDPA_HEAD_DIMS including 192 or larger""",
    )
    # A value head dim different from the query's goes to our op directly, unpadded.
    assert_expected_inline(
        lines(flashsdpa.explain(*qkv(d=64, dv=100))),
        """value head_dim=100: needs a positive multiple of 8""",
    )
    assert_expected_inline(
        lines(flashsdpa.explain(*qkv(d=64, dv=192))),
        """head_dim=64, value head_dim=192: this build compiled head dims [64, 128]; rebuild with FLASHSDPA_HEAD_DIMS including 192 or larger""",
    )


def test_explain_shapes(fake_build: Any, fake_mode: Any) -> None:
    q, k, v = (t.unbind(0)[0] for t in qkv())
    assert_expected_inline(
        lines(flashsdpa.explain(q, k, v)),
        """\
query.dim()=3: needs 4 (batch, heads, seq_len, head_dim)
key.dim()=3: needs 4 (batch, heads, seq_len, head_dim)
value.dim()=3: needs 4 (batch, heads, seq_len, head_dim)""",
    )
    assert_expected_inline(
        lines(flashsdpa.explain(*qkv(hq=6, hkv=4), enable_gqa=True)),
        """query heads 6: must be a multiple of key/value heads 4""",
    )
    q, k, v = qkv(sk=0)
    assert_expected_inline(
        lines(flashsdpa.explain(q, k, v)), """seqlen_k=0: empty inputs are left to PyTorch's kernels"""
    )


def test_explain_layouts(fake_build: Any, fake_mode: Any) -> None:
    q, k, v = qkv(d=64)
    every_other = qkv(d=128)[1].as_strided((2, 4, 16, 64), (8192, 2048, 128, 2))  # FakeTensors take no slicing
    assert_expected_inline(lines(flashsdpa.explain(q, every_other, v)), """last dimension stride 2 of key: needs 1""")
    q, k, v = qkv(d=72)
    # A view starting 4 elements into its storage: rows are not 16-byte aligned.
    k = torch.empty(2 * 4 * 16 * 72 + 4, dtype=F16, device="cuda").as_strided((2, 4, 16, 72), (4608, 1152, 72, 1), 4)
    assert_expected_inline(
        lines(flashsdpa.explain(q, k, v)),
        """key strides (4608, 1152, 72) and storage offset 4: need multiples of 8 elements (16-byte aligned rows)""",
    )


def test_explain_gpu_generations(fake_build: Any, fake_mode: Any) -> None:
    fake_build(capability=(7, 5), family=None)
    assert_expected_inline(lines(flashsdpa.explain(*qkv())), """GPU compute capability 7.5: needs 8.0 or newer""")
    fake_build(capability=(12, 0), family=None)
    assert_expected_inline(
        lines(flashsdpa.explain(*qkv())),
        """GPU compute capability 12.0 (Fake GPU): this build has no kernel for it (archs [80, 90]); rebuild with FLASHSDPA_ARCHS including 120""",
    )


def test_explain_pytorch_flash_filter(fake_build: Any, fake_mode: Any) -> None:
    with torch.nn.attention.sdpa_kernel([torch.nn.attention.SDPBackend.EFFICIENT_ATTENTION]):
        assert_expected_inline(
            lines(flashsdpa.explain(*qkv())),
            """PyTorch's flash backend is disabled (torch.backends.cuda.enable_flash_sdp(False), or an sdpa_kernel context without FLASH_ATTENTION): SDPA never reaches flashsdpa""",
        )
    fake_build(capability=(8, 6))
    q, k, v = qkv(d=256)
    assert flashsdpa.explain(q, k, v) == []
    q.requires_grad_(True)
    assert_expected_inline(
        lines(flashsdpa.explain(q, k, v)),
        """head_dim=256 with requires_grad on compute capability 8.6: PyTorch's flash path does not train head dims over 192 on 8.6 and 8.9 GPUs""",
    )


def test_explain_causal_variants_are_served(fake_build: Any, fake_mode: Any) -> None:
    # PyTorch's flash path turns these away; the TorchFunctionMode sends them to our op.
    assert flashsdpa.explain(*qkv(sq=7, sk=9), is_causal=True) == []
    assert flashsdpa.explain(*qkv(sq=9, sk=7), attn_mask=LOWER_9_7) == []
    assert flashsdpa.explain(*qkv(sq=9, sk=7), attn_mask=UPPER_9_7) == []
    assert flashsdpa.explain(*qkv(d=64, dv=128)) == []


def test_explain_rejects_non_tensors() -> None:
    with pytest.raises(TypeError, match=r"^query must be a torch\.Tensor, got list$"):
        flashsdpa.explain([1.0], torch.zeros(1), torch.zeros(1))  # type: ignore[arg-type]


# ---- the routers' predicate ----------------------------------------------------------------------

SERVED = {
    "square": dict(),
    "gqa": dict(hq=8, hkv=2),
    "mqa": dict(hq=8, hkv=1),
    "q_longer": dict(sq=239, sk=113),
    "decode": dict(sq=1, sk=1023),
    "single_key": dict(sq=113, sk=1),
    "dv_wider": dict(d=64, dv=128),
    "hdim8": dict(d=8),
    "hdim256": dict(d=256),
    "bf16": dict(dtype=BF16),
    "bshd": dict(layout="bshd"),
}


@pytest.mark.parametrize("name", SERVED)
def test_dense_reason_serves(name: str, fake_build: Any, fake_mode: Any) -> None:
    q, k, v = qkv(**SERVED[name])
    assert selection.dense_reason(q, k, v) is None
    assert selection.kernel_reasons(q, k, v) == []


def test_dense_reason_serves_packed_projection(fake_build: Any, fake_mode: Any) -> None:
    # q, k, v sliced out of one (B, S, 3H, D) projection: row stride 3HD, each a strided view.
    qkv_ = torch.empty(2, 16, 12, 64, dtype=F16, device="cuda")
    q, k, v = (t.transpose(1, 2) for t in qkv_.split(4, dim=2))
    assert selection.dense_reason(q, k, v) is None


def _variants(fake_mode: Any) -> list[tuple[str, tuple[Tensor, Tensor, Tensor]]]:
    """Inputs that fail exactly one rule each, plus some that pass."""
    out: list[tuple[str, tuple[Tensor, Tensor, Tensor]]] = []
    for sizes in itertools.product((1, 2), (4, 8), (1, 4), (0, 7, 113), (0, 1, 239), (8, 60, 64, 96, 264)):
        b, hq, hkv, sq, sk, d = sizes
        out.append((f"sizes{sizes}", qkv(b=b, hq=hq, hkv=hkv, sq=sq, sk=sk, d=d)))
    for dtype in (F16, BF16, F32, torch.float64):
        out.append((f"dtype {dtype}", qkv(dtype=dtype)))
    q, k, v = qkv()
    cpu = torch.empty(2, 4, 16, 64, dtype=F16)
    flat = torch.empty(2 * 4 * 16 * 64 + 8, dtype=F16, device="cuda")
    contiguous = (4096, 1024, 64, 1)
    out += [
        ("cpu query", (cpu, k, v)),
        ("bf16 value", (q, k, v.to(BF16))),
        ("3-D query", (q.unbind(0)[0], k, v)),
        ("batch mismatch", (q, k.narrow(0, 0, 1), v.narrow(0, 0, 1))),
        ("seq mismatch", (q, k, v.narrow(2, 0, 8))),
        ("heads mismatch", (q, k, v.narrow(1, 0, 2))),
        ("key head_dim", (q, k.narrow(3, 0, 32), v)),
        ("strided head dim", (q, k, qkv(d=128)[2].as_strided((2, 4, 16, 64), (8192, 2048, 128, 2)))),
        ("odd row stride", (q, k, torch.empty(2, 4, 16, 68, dtype=F16, device="cuda").narrow(3, 0, 64))),
        ("offset", (q, k, flat.as_strided((2, 4, 16, 64), contiguous, 4))),
        ("aligned offset", (q, k, flat.as_strided((2, 4, 16, 64), contiguous, 8))),
    ]
    if HAVE_SECOND_CUDA:
        out.append(("cuda:1 key", (q, torch.empty(2, 4, 16, 64, dtype=F16, device="cuda:1"), v)))
    return out


def test_fast_and_full_predicates_agree(fake_build: Any, fake_mode: Any) -> None:
    # dense_reason() is a fused fast path; kernel_reasons() states the rules one by one. They must
    # agree on every input, and the fast path must report the full check's first reason.
    variants = _variants(fake_mode)
    served = 0
    for build in (dict(), dict(head_dims=(64, 128)), dict(dtypes=("bfloat16",)), dict(capability=(7, 5), family=None)):
        fake_build(**build)
        for name, (q, k, v) in variants:
            full = selection.kernel_reasons(q, k, v)
            fast = selection.dense_reason(q, k, v)
            assert (fast is None) == (full == []), (build, name, fast, full)
            assert fast is None or fast == full[0], (build, name)
            served += fast is None
    assert 0 < served < 4 * len(variants)


def test_traceable_predicate_agrees(fake_build: Any, fake_mode: Any) -> None:
    # servable() is what the TorchFunctionMode runs (and torch.compile traces): the rules without
    # the layout ones, which flashsdpa's op handles by copying.
    variants = _variants(fake_mode)
    for build in (dict(), dict(head_dims=(64, 128)), dict(capability=(7, 5), family=None), dict(with_cuda=False)):
        fake_build(**build)
        for name, (q, k, v) in variants:
            full = selection.kernel_reasons(q, k, v, layout=False)
            assert selection.servable(q, k, v) == (full == []), (build, name, full)


def test_dense_reason_without_cuda_build(fake_build: Any, fake_mode: Any) -> None:
    fake_build(with_cuda=False)
    assert selection.dense_reason(*qkv()) == "flashsdpa._C was built without CUDA (no nvcc at build time)"


def test_device_facts_are_cached(fake_build: Any, fake_mode: Any) -> None:
    build = fake_build()
    calls = []
    original = build.device_info
    build.device_info = lambda index: calls.append(index) or original(index)
    for _ in range(3):
        assert selection.dense_reason(*qkv()) is None
    assert calls == [0]


# ---- varlen --------------------------------------------------------------------------------------


def packed(
    total_q: int = 30, total_k: int = 40, h: int = 4, hkv: int = 4, d: int = 64, dtype: torch.dtype = F16
) -> tuple[Tensor, ...]:
    q = torch.empty(total_q, h, d, dtype=dtype, device="cuda")
    k = torch.empty(total_k, hkv, d, dtype=dtype, device="cuda")
    v = torch.empty(total_k, hkv, d, dtype=dtype, device="cuda")
    cu_q = torch.empty(4, dtype=torch.int32, device="cuda")
    cu_k = torch.empty(4, dtype=torch.int32, device="cuda")
    return q, k, v, cu_q, cu_k


def test_varlen_reason(fake_build: Any, fake_mode: Any) -> None:
    q, k, v, cu_q, cu_k = packed()
    assert selection.varlen_reason(q, k, v, cu_q, cu_k, None, 12, 20) is None
    used = torch.empty(3, dtype=torch.int32, device="cuda")
    assert selection.varlen_reason(q, k, v, cu_q, cu_k, used, 12, 20) is None
    cases = {
        "long cu": (q, k, v, cu_q, torch.empty(5, dtype=torch.int32, device="cuda"), None, 12, 20),
        "int64 cu": (q, k, v, cu_q.long(), cu_k, None, 12, 20),
        "seqused": (q, k, v, cu_q, cu_k, used.narrow(0, 0, 2), 12, 20),
        "empty": (q, k, v, cu_q, cu_k, None, 0, 20),
        "gqa": (*packed(h=6, hkv=4)[:3], cu_q, cu_k, None, 12, 20),
        "dtype": (*packed(dtype=F32)[:3], cu_q, cu_k, None, 12, 20),
        "4-D": (q.unsqueeze(0), k, v, cu_q, cu_k, None, 12, 20),
    }
    got = {name: selection.varlen_reason(*args) for name, args in cases.items()}
    assert_expected_inline(
        "\n".join(f"{n}: {r}" for n, r in got.items()),
        """\
long cu: cum_seq_k has 5 entries: needs batch + 1 >= 2, as many as cum_seq_q
int64 cu: cum_seq_q: needs a 1-D contiguous int32 tensor on cuda:0
seqused: seqused_k: needs a 1-D contiguous int32 tensor of 3 entries on cuda:0
empty: empty packed sequences are left to PyTorch's kernels
gqa: query heads 6: must be a multiple of key/value heads 4
dtype: query.dtype=torch.float32: needs float16 or bfloat16
4-D: query.dim()=4: packed sequences need 3 (total, heads, head_dim)""",
    )


# ---- which SDPA calls the TorchFunctionMode takes straight to our op ------------------------------


def test_direct_causal_mode(fake_build: Any, fake_mode: Any) -> None:
    def mode(
        attn_mask: Any = None, dropout_p: float = 0.0, is_causal: bool = False, enable_gqa: bool = False, **shape: Any
    ) -> int | None:
        return entry.direct_causal_mode(*qkv(**shape), attn_mask, dropout_p, is_causal, enable_gqa)

    # Calls PyTorch's flash path takes stay on it (they reach the routers).
    assert mode() is None
    assert mode(is_causal=True) is None
    assert mode(attn_mask=LOWER_16_16) is None
    # Calls it turns away and our kernels serve.
    assert mode(is_causal=True, sq=7, sk=9) == 1
    assert mode(d=64, dv=128) == 0
    assert mode(d=64, dv=128, is_causal=True) == 1
    assert mode(attn_mask=LOWER_9_7, sq=9, sk=7) == 2
    assert mode(attn_mask=UPPER_9_7, sq=9, sk=7) == 1
    # Calls nobody of ours serves: left to SDPA (which may raise its own error).
    assert mode(is_causal=True, sq=7, sk=9, dropout_p=0.1) is None
    assert mode(is_causal=True, sq=7, sk=9, dtype=F32) is None
    assert mode(is_causal=True, sq=7, sk=9, hq=8, hkv=2) is None
    assert mode(is_causal=True, sq=7, sk=9, hq=8, hkv=2, enable_gqa=True) == 1
    assert mode(attn_mask=LOWER_9_7, sq=9, sk=7, is_causal=True) is None
    assert mode(attn_mask=torch.empty(16, 16, dtype=torch.bool, device="cuda")) is None


def test_training_without_a_backward_of_ours_keeps_pytorch(fake_build: Any, fake_mode: Any) -> None:
    """Where no backward of ours takes a D 512 training call (the fake part's shared memory drops
    every backward above head dim 128, as a 512 bucket with a forward only would), SDPA inside
    enable() leaves it to PyTorch at any length, explain() giving the table's reason; a call
    without grad is ours; and where a backward of ours takes it, the training call is ours too."""
    def call(sk: int, grad: bool) -> tuple[int | None, list[str]]:
        q, k, v = qkv(b=1, hq=2, hkv=2, sq=sk, sk=sk, d=512, dtype=torch.bfloat16)
        for t in (q, k, v):
            t.requires_grad_(grad)
        return entry.direct_causal_mode(q, k, v, None, 0.0, True, False), flashsdpa.explain(q, k, v, is_causal=True)

    fake_build(head_dims=(64, 128, 256, 512), smem_optin_bytes=200 * 1024)
    for seqlen in (2048, 8192):
        mode, why = call(seqlen, True)
        assert mode is None and len(why) == 1 and "no tile fits" in why[0], (mode, why)
    assert call(2048, False) == (1, [])
    fake_build(head_dims=(64, 128, 256, 512))  # a backward of ours at 512
    assert call(2048, True) == (1, [])


def test_direct_api_refuses_grad_where_no_backward_of_ours_takes_it(fake_build: Any, fake_mode: Any) -> None:
    """Where the table has the forward and no backward (the fake part's shared memory drops every
    backward above head dim 128), flashsdpa.attention refuses inputs that require grad at the
    forward, with the table's reason, rather than failing once the gradient is asked for."""
    fake_build(head_dims=(64, 128, 256, 512), smem_optin_bytes=200 * 1024)
    q, k, v = qkv(b=1, hq=2, hkv=2, sq=64, sk=64, d=512, dtype=torch.bfloat16)
    q.requires_grad_()
    with pytest.raises(ValueError, match=r"require grad: no backward of ours takes them here(.|\n)*no tile fits"):
        flashsdpa.attention(q, k, v, causal=True)
