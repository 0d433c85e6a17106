# test_compile_context.py: torch.compile and the enable() context. SDPA's backend is chosen when a
# graph is traced and Dynamo does not guard on that choice; flashsdpa's TorchFunctionMode makes it
# guard (on the mode stack), so entering or leaving the context recompiles once and never reuses a
# graph traced on the other side. Also: the mode's direct route for SDPA calls PyTorch's flash
# path turns away. CPU only: compiles with backend="eager"/"aot_eager" and a counting backend.
from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor
from torch.utils._python_dispatch import TorchDispatchMode

import flashsdpa
from flashsdpa import activation


class CountingBackend:
    """A torch.compile backend that counts compilations and notes SDPA's priority order at each."""

    def __init__(self, inner: str = "eager") -> None:
        self.orders: list[list[int]] = []
        self.inner = inner

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: list[Tensor]) -> Any:
        self.orders.append(torch._C._get_sdp_priority_order())
        if self.inner == "eager":
            return gm.forward
        from functorch.compile import make_boxed_func
        from torch._dynamo.backends.common import aot_autograd

        return aot_autograd(fw_compiler=lambda g, _: make_boxed_func(g.forward))(gm, example_inputs)

    @property
    def compiles(self) -> int:
        return len(self.orders)


@pytest.fixture(autouse=True)
def _fresh_dynamo() -> Iterator[None]:
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


@pytest.fixture
def hopper_order(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Pretend our kernels can run (so enable() reorders) on a machine whose PyTorch prefers cuDNN."""
    monkeypatch.setattr(activation, "_kernels_usable", lambda: True)
    saved = torch._C._get_sdp_priority_order()
    torch._C._set_sdp_priority_order([3, 1, 2, 0, 4])
    yield [3, 1, 2, 0, 4]
    torch._C._set_sdp_priority_order(saved)


def qkv(requires_grad: bool = False) -> tuple[Tensor, Tensor, Tensor]:
    return tuple(torch.randn(2, 4, 8, 16, requires_grad=requires_grad) for _ in range(3))  # type: ignore[return-value]


def attention_block(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    return F.scaled_dot_product_attention(q, k, v, is_causal=True).relu() * 2


def test_recompiles_once_on_enter_and_once_on_exit(hopper_order: list[int]) -> None:
    backend = CountingBackend()
    compiled = torch.compile(attention_block, backend=backend, fullgraph=True)
    q, k, v = qkv()
    expected = attention_block(q, k, v)
    torch.testing.assert_close(compiled(q, k, v), expected)  # compiled outside
    with flashsdpa.enable():
        torch.testing.assert_close(compiled(q, k, v), expected)  # recompiled: the mode stack changed
    torch.testing.assert_close(compiled(q, k, v), expected)  # the outside graph again
    with flashsdpa.enable():
        compiled(q, k, v)  # the inside graph again
        with flashsdpa.enable():
            compiled(q, k, v)  # nesting pushes no second mode: same graph
    assert backend.compiles == 2
    # Each graph was traced under the priority order of its side: flash first only inside.
    assert backend.orders == [hopper_order, [1, 3, 2, 0, 4]]


def test_graph_compiled_inside_is_not_used_outside(hopper_order: list[int]) -> None:
    backend = CountingBackend()
    compiled = torch.compile(attention_block, backend=backend, fullgraph=True)
    q, k, v = qkv()
    with flashsdpa.enable():
        compiled(q, k, v)
    compiled(q, k, v)
    assert backend.orders == [[1, 3, 2, 0, 4], hopper_order]


def test_install_and_registry_activation_recompile_too(hopper_order: list[int]) -> None:
    backend = CountingBackend()
    compiled = torch.compile(attention_block, backend=backend, fullgraph=True)
    q, k, v = qkv()
    compiled(q, k, v)
    flashsdpa.install()
    try:
        compiled(q, k, v)
    finally:
        flashsdpa.uninstall()
    torch.nn.attention.activate_flash_attention_impl(flashsdpa.REGISTRY_NAME)
    try:
        compiled(q, k, v)  # the same mode type as install()'s: its graph is reused
    finally:
        torch.nn.attention.restore_flash_attention_impl()
    compiled(q, k, v)
    assert backend.orders == [hopper_order, [1, 3, 2, 0, 4]]


def test_training_step_compiles_fullgraph_inside() -> None:
    backend = CountingBackend("aot_eager")
    layer = torch.nn.MultiheadAttention(16, 4, batch_first=True)
    x = torch.randn(2, 8, 16)

    def step(x: Tensor) -> Tensor:
        out, _ = layer(x, x, x, need_weights=False)
        return F.scaled_dot_product_attention(out[:, None], out[:, None], out[:, None]).square().mean()

    compiled = torch.compile(step, backend=backend, fullgraph=True)
    with flashsdpa.enable():
        loss = compiled(x)
        loss.backward()
    torch.testing.assert_close(loss, step(x))
    assert backend.compiles == 1 and all(p.grad is not None for p in layer.parameters())


# ---- the mode's direct route ---------------------------------------------------------------------


class OpLog(TorchDispatchMode):
    """Records the ops that reach the dispatcher (above the FakeTensorMode it is pushed on)."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: list[str] = []

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        if func.namespace != "prim":  # prim.device: metadata queries, not computation
            self.ops.append(str(func))
        return func(*args, **(kwargs or {}))


def cuda_qkv(sq: int = 16, sk: int = 16, d: int = 64, dv: int = 64) -> tuple[Tensor, Tensor, Tensor]:
    def make(s: int, dim: int) -> Tensor:
        return torch.empty(2, 4, s, dim, dtype=torch.float16, device="cuda")

    return make(sq, d), make(sk, d), make(sk, dv)


# On FakeTensors a CPU-only torch runs SDPA's math decomposition (bmm, softmax, ...): a call that
# reaches SDPA shows those ops; a call the mode takes shows flashsdpa's op alone.


@pytest.mark.parametrize(
    "shape, kwargs",
    [
        (dict(sq=7, sk=9), dict(is_causal=True)),
        (dict(sq=9, sk=7), dict(is_causal=True)),
        (dict(dv=128), dict()),
        (dict(dv=128), dict(is_causal=True)),
    ],
)
def test_mode_sends_what_pytorch_flash_turns_away_to_our_op(
    shape: dict[str, int], kwargs: dict[str, Any], fake_build: Any, fake_mode: Any
) -> None:
    q, k, v = cuda_qkv(**shape)
    with flashsdpa.enable(), OpLog() as log:
        out = F.scaled_dot_product_attention(q, k, v, scale=0.5, **kwargs)
    assert log.ops == ["flashsdpa.fwd.default"]
    assert out.shape == (2, 4, q.shape[2], v.shape[3])


def test_mode_sends_causal_masks_to_our_op(fake_build: Any) -> None:
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.nn.attention.bias import causal_lower_right

    mask = causal_lower_right(7, 9)  # made outside the FakeTensorMode, which cannot create it
    with FakeTensorMode():
        q, k, v = cuda_qkv(sq=7, sk=9)
        with flashsdpa.enable(), OpLog() as log:
            F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    assert log.ops == ["flashsdpa.fwd.default"]


# What PyTorch runs for SDPA on these inputs: the math decomposition on a CPU-only torch (fake
# CUDA tensors have no fused kernel there), one of its fused ops on a real CUDA torch.
_PYTORCH_SDPA_OPS = (
    "aten.bmm.default",
    "aten._scaled_dot_product_flash_attention.default",
    "aten._scaled_dot_product_efficient_attention.default",
    "aten._scaled_dot_product_cudnn_attention.default",
)


def pytorch_sdpa_ran(ops: list[str]) -> bool:
    return any(op in ops for op in _PYTORCH_SDPA_OPS)


def test_mode_leaves_other_calls_to_sdpa(fake_build: Any, fake_mode: Any) -> None:
    q, k, v = cuda_qkv(sq=7, sk=9)
    with flashsdpa.enable():
        with OpLog() as log:
            F.scaled_dot_product_attention(q, k, v)  # PyTorch's flash path takes it: the routers' business
        assert "flashsdpa.fwd.default" not in log.ops and pytorch_sdpa_ran(log.ops)
        with OpLog() as log:
            F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=0.1)  # ours cannot
        assert "flashsdpa.fwd.default" not in log.ops and pytorch_sdpa_ran(log.ops)
        with torch.nn.attention.sdpa_kernel([torch.nn.attention.SDPBackend.MATH]), OpLog() as log:
            F.scaled_dot_product_attention(q, k, v, is_causal=True)  # flash excluded by the user
        assert "flashsdpa.fwd.default" not in log.ops and pytorch_sdpa_ran(log.ops)


def test_mode_is_gone_outside(fake_build: Any, fake_mode: Any) -> None:
    q, k, v = cuda_qkv(dv=128)
    with flashsdpa.enable():
        pass
    with OpLog() as log:
        F.scaled_dot_product_attention(q, k, v)
    assert "flashsdpa.fwd.default" not in log.ops and pytorch_sdpa_ran(log.ops)


# ---- tracing the CUDA paths: Dynamo on FakeTensor inputs -----------------------------------------
# torch.compile traces FakeTensor inputs as it traces real ones, so the code that runs inside a
# compiled region on a GPU (the mode's decision, attention()'s checks) is traced here on CPU.


def graph_targets(backend: CountingBackend) -> list[str]:
    return [str(node.target) for gm in backend.graphs for node in gm.graph.nodes if node.op == "call_function"]


class RecordingBackend(CountingBackend):
    def __init__(self) -> None:
        super().__init__()
        self.graphs: list[torch.fx.GraphModule] = []

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: list[Tensor]) -> Any:
        self.graphs.append(gm)
        return super().__call__(gm, example_inputs)


def fake_cuda_inputs(sq: int, sk: int, dv: int = 64) -> tuple[Tensor, Tensor, Tensor]:
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        return cuda_qkv(sq=sq, sk=sk, dv=dv)


@pytest.mark.parametrize("sq, sk, dv", [(7, 9, 64), (16, 16, 128)])
def test_direct_route_traces_fullgraph(sq: int, sk: int, dv: int, fake_build: Any) -> None:
    backend = RecordingBackend()

    def attend(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True).relu()

    q, k, v = fake_cuda_inputs(sq, sk, dv)
    with flashsdpa.enable():
        out = torch.compile(attend, backend=backend, fullgraph=True)(q, k, v)
    assert out.shape == (2, 4, sq, dv)
    assert "flashsdpa.fwd.default" in graph_targets(backend)


def test_sdpa_call_for_the_routers_traces_fullgraph(fake_build: Any) -> None:
    # A call PyTorch's flash path takes: the mode lets it through to SDPA (on a CPU-only torch the
    # fake CUDA tensors then take the math decomposition; on a GPU it is the flash op).
    backend = RecordingBackend()

    def attend(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        # Not causal: the math decomposition's causal mask would be a factory call, which the
        # compiled graph cannot run on FakeTensors outside a FakeTensorMode.
        return F.scaled_dot_product_attention(q, k, v).relu()

    q, k, v = fake_cuda_inputs(16, 16)
    with flashsdpa.enable():
        torch.compile(attend, backend=backend, fullgraph=True)(q, k, v)
    assert backend.compiles == 1 and "flashsdpa.fwd.default" not in graph_targets(backend)


def test_direct_api_traces_fullgraph_on_cuda(fake_build: Any) -> None:
    backend = RecordingBackend()

    def attend(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        return flashsdpa.attention(q, k, v, causal=True, causal_alignment="bottom_right") * 2

    q, k, v = fake_cuda_inputs(7, 9, 128)
    out = torch.compile(attend, backend=backend, fullgraph=True)(q, k, v)
    assert out.shape == (2, 4, 7, 128)
    assert "flashsdpa.fwd.default" in graph_targets(backend)
