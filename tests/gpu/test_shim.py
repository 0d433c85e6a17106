# test_shim.py: issue 9 and issue 10 (items 6 and 10) on a GPU: inside flashsdpa.enable() nothing but
# SDPA runs flashsdpa Python, PyTorch's fast paths and errors are PyTorch's (nn.TransformerEncoder
# with nested tensors; a dense query with nested key / value requiring grad under
# sdpa_kernel(FLASH_ATTENTION) gives PyTorch's "No available kernel"), torch.compile recompiles on
# entering and leaving, and calls that do not run our kernels are counted with their reason.
from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import flashsdpa
from flashsdpa import entry
from helpers import flashsdpa_entries, fresh_compile, gpu_skip_reason, skip_unless_compiled

GPU_SKIP = gpu_skip_reason()
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(GPU_SKIP is not None, reason=f"GPU suite: {GPU_SKIP}")]

DEVICE = "cuda"
BF16 = torch.bfloat16


def outcome(call: Callable[[], Any]) -> Any:
    """The call's result (detached, on the CPU) or (exception type, message), and its warnings."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            result: Any = call().detach().cpu()
        except Exception as exc:  # noqa: BLE001 - the error itself is the outcome compared
            result = (type(exc), str(exc))
    # flashsdpa's own FallbackWarning (FLASHSDPA_WARN_FALLBACK=1) reports, it is not PyTorch's behaviour.
    return result, sorted({(w.category.__name__, str(w.message)) for w in caught
                           if not issubclass(w.category, flashsdpa.FallbackWarning)})  # fmt: skip


def same(a: Any, b: Any) -> bool:
    (ra, wa), (rb, wb) = a, b
    if isinstance(ra, torch.Tensor) and isinstance(rb, torch.Tensor):
        return wa == wb and ra.shape == rb.shape and torch.equal(ra, rb)
    return ra == rb and wa == wb


def nested(requires_grad: bool) -> torch.Tensor:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "nested tensors are in prototype stage"
        t = torch.nested.nested_tensor([torch.randn(2, s, 64, dtype=BF16) for s in (5, 9)], device=DEVICE)
    return t.requires_grad_(requires_grad)


def test_dense_query_nested_kv_under_flash_is_pytorchs_error() -> None:
    q = torch.randn(2, 2, 5, 64, device=DEVICE, dtype=BF16, requires_grad=True)
    k, v = nested(True), nested(True)

    def call() -> torch.Tensor:
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            return F.scaled_dot_product_attention(q, k, v)

    expected = outcome(call)
    # PyTorch's own answer is an error (issue 9 saw "No available kernel"; torch 2.11 on the H200
    # says "QKV must be nested for flash cumulative_seq_len calculation."): the shim must give the
    # same one, whatever it is.
    assert isinstance(expected[0], tuple), expected
    with flashsdpa.enable():
        got = outcome(call)
    assert same(got, expected), (got, expected)


def plain(**sizes: int) -> list[torch.Tensor]:
    b, hq, hkv, sq, sk, d, dv = (sizes.get(n, dflt) for n, dflt in
                                 (("b", 2), ("hq", 4), ("hkv", 4), ("sq", 16), ("sk", 16), ("d", 64), ("dv", 64)))  # fmt: skip
    return [torch.randn(b, h, s, dim, device=DEVICE, dtype=BF16) for h, s, dim in ((hq, sq, d), (hkv, sk, d),
                                                                                  (hkv, sk, dv))]  # fmt: skip


ERRORS: list[tuple[str, Callable[[], list[Any]], dict[str, Any]]] = [
    ("query None", lambda: [None, *plain()[1:]], {}),
    ("dtypes differ", lambda: [plain()[0], plain()[1].float(), plain()[2]], {}),
    ("batch differs", lambda: [plain(b=2)[0], *plain(b=3)[1:]], {}),
    ("head dims differ", lambda: [plain()[0], *plain(d=32, dv=32)[1:]], {}),
    ("devices differ", lambda: [plain()[0], plain()[1].cpu(), plain()[2]], {}),
    ("heads differ without enable_gqa", lambda: plain(hq=8, hkv=2), {"is_causal": True}),
    ("causal, sq != sk, heads differ without enable_gqa", lambda: plain(hq=8, hkv=2, sq=5, sk=9), {"is_causal": True}),
    ("mask of the wrong shape", lambda: [*plain(), torch.ones(3, 5, dtype=torch.bool, device=DEVICE)], {}),
    ("scale a string", plain, {"scale": "0.1"}),
    ("is_causal a string", plain, {"is_causal": "yes"}),
    ("nested query, dense key and value", lambda: [nested(False), *plain()[1:]], {}),
]  # fmt: skip


@pytest.mark.parametrize("flash_only", [False, True], ids=["default", "flash-only"])
@pytest.mark.parametrize("label, make, kwargs", ERRORS, ids=[c[0] for c in ERRORS])
def test_sdpa_errors_unchanged(label: str, make: Callable[[], list[Any]], kwargs: dict[str, Any],
                               flash_only: bool) -> None:  # fmt: skip
    args = make()

    def call() -> torch.Tensor:
        if flash_only:
            with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                return F.scaled_dot_product_attention(*args, **kwargs)
        return F.scaled_dot_product_attention(*args, **kwargs)

    expected = outcome(call)
    with flashsdpa.enable():
        got = outcome(call)
    assert same(got, expected), (got, expected)


def test_transformer_encoder_nested_fast_path() -> None:
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(64, 4, 128, dropout=0.0, batch_first=True)
    model = torch.nn.TransformerEncoder(layer, 2, enable_nested_tensor=True).to(DEVICE, torch.float16).eval()
    x = torch.randn(3, 33, 64, device=DEVICE, dtype=torch.float16)
    padding = torch.zeros(3, 33, dtype=torch.bool, device=DEVICE)
    padding[0, 20:] = padding[2, 7:] = True
    with torch.no_grad():
        expected = model(x, src_key_padding_mask=padding)
        with flashsdpa.enable():
            got = model(x, src_key_padding_mask=padding)
    assert torch.equal(got, expected)


def test_model_step_runs_flashsdpa_python_only_for_attention() -> None:
    # The CUDA twin of tests/test_entry.py's: a bf16 training step whose attention we serve runs
    # no flashsdpa Python but the SDPA entry, once per attention call.
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(64, 4, 128, dropout=0.0, batch_first=True)
    model = torch.nn.TransformerEncoder(layer, 3, enable_nested_tensor=False).to(DEVICE, BF16)
    x = torch.randn(2, 16, 64, device=DEVICE, dtype=BF16)
    mask = torch.nn.Transformer.generate_square_subsequent_mask(16, device=DEVICE, dtype=BF16)
    with flashsdpa.enable():
        model(x, mask=mask, is_causal=True).float().sum().backward()  # warm-up
        entered = flashsdpa_entries(lambda: model(x, mask=mask, is_causal=True).float().sum().backward())
    assert entered == {"scaled_dot_product_attention": 3}


@pytest.mark.parametrize("call_site", ["F.scaled_dot_product_attention", "nn.MultiheadAttention"])
def test_compile_recompiles_on_enter_and_exit(call_site: str) -> None:
    skip_unless_compiled(BF16, 64, 64)
    compiles: list[list[str]] = []

    def backend(gm: torch.fx.GraphModule, example_inputs: list[torch.Tensor]) -> Any:
        from functorch.compile import make_boxed_func
        from torch._dynamo.backends.common import aot_autograd

        def record(g: torch.fx.GraphModule, _: Any) -> Any:
            compiles.append([str(n.target) for n in g.graph.nodes if n.op == "call_function"])
            return make_boxed_func(g.forward)

        return aot_autograd(fw_compiler=record)(gm, example_inputs)

    if call_site == "nn.MultiheadAttention":
        mha = torch.nn.MultiheadAttention(256, 4, batch_first=True, device=DEVICE, dtype=BF16)
        x = torch.randn(2, 64, 256, device=DEVICE, dtype=BF16)

        def fn(x: torch.Tensor) -> torch.Tensor:
            return mha(x, x, x, need_weights=False)[0]

        inputs: tuple[torch.Tensor, ...] = (x,)
    else:

        def fn(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)

        inputs = tuple(plain(sq=64, sk=64))
    with fresh_compile(), torch.no_grad():
        compiled = torch.compile(fn, backend=backend)
        for _ in range(2):
            compiled(*inputs)
            with flashsdpa.enable():
                compiled(*inputs)
    assert len(compiles) == 2  # one graph per side, each reused on the second visit
    assert any("flash_attention" in target for target in compiles[1])  # inside: flash first


def test_unserved_calls_counted_with_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    skip_unless_compiled(BF16, 64, 64)
    monkeypatch.setattr(entry, "_EAGER_OVERRIDE", True)  # the eager path's count checked below too
    q, k, v = plain()
    mask = torch.ones(16, 16, dtype=torch.bool, device=DEVICE)
    flashsdpa.reset_stats()
    with flashsdpa.enable():
        F.scaled_dot_product_attention(q.float(), k.float(), v.float())
        F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        F.scaled_dot_product_attention(q, k, v)  # served: the eager path
        with sdpa_kernel(SDPBackend.MATH):
            F.scaled_dot_product_attention(q, k, v)
    stats = flashsdpa.stats()
    assert stats["ops"]["F.scaled_dot_product_attention (eager, no grad)"]["served"] == 1
    # Only the math-only call reaches no router of ours; SDPA sends the float32 call to its
    # efficient op and the masked one to its cuDNN or efficient op, whose routers (issue 14) count
    # them: the mask served, float32 a fallback with its reason.
    assert stats["ops"]["F.scaled_dot_product_attention"] == {"served": 0, "fallback": 1}
    reasons = [r.split(": ", 1)[1] for r in stats["fallback_reasons"] if r.startswith("F.scaled_dot")]
    assert len(reasons) == 1 and reasons[0].startswith("PyTorch's flash backend is disabled"), reasons
    masked_ops = [stats["ops"].get(f"aten::_scaled_dot_product_{name}_attention", {}) for name in ("efficient", "cudnn")]
    assert sum(op.get("served", 0) for op in masked_ops) == 1, stats["ops"]
    assert sum(op.get("fallback", 0) for op in masked_ops) == 1, stats["ops"]
    assert any("float32" in r for r in stats["fallback_reasons"] if r.startswith("aten::_scaled_dot_product_")), stats


def test_cache_tag_on_gpu() -> None:
    if not hasattr(torch.compiler.config, "cache_key_tag"):
        pytest.skip("this torch has no torch.compiler.config.cache_key_tag")
    with flashsdpa.enable():
        assert "flashsdpa" in torch.compiler.config.cache_key_tag
    assert "flashsdpa" not in torch.compiler.config.cache_key_tag
