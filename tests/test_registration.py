# test_registration.py: activation and teardown of the SDPA plug-in, and what a registered router
# does with a call (serve it in the op's meta contract, or forward it untouched to PyTorch's kernel).
#
# CPU only: routers are inspected in the dispatcher's table and called directly on FakeTensors
# with a stand-in CUDA build (conftest.FakeCudaBuild); launches are recorded, not run.
from __future__ import annotations

import math
import re
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor
from torch.nn.attention import (
    activate_flash_attention_impl,
    current_flash_attention_impl,
    list_flash_attention_impls,
    restore_flash_attention_impl,
)
from torch.overrides import TorchFunctionMode

import flashsdpa
from flashsdpa import _backend, activation, entry, masks, routers

F16 = torch.float16
ROUTED_OPS = [route.op for route in routers._ROUTES if hasattr(torch.ops.aten, route.op)]


def routed() -> set[str]:
    """The aten ops whose CUDA kernel is currently one of our routers."""
    found = set()
    for op in ROUTED_OPS:
        for line in torch._C._dispatch_dump(f"aten::{op}").splitlines():
            if line.startswith("CUDA:") and "flashsdpa" in line and "routers.py" in line:
                found.add(op)
    return found


def mode_stack() -> list[Any]:
    return [torch._C._get_function_stack_at(i) for i in range(torch._C._len_torch_function_stack())]


def ours_in_torch() -> list[str]:
    """The names of torch that stand for flashsdpa's objects now (entry.patch_torch)."""
    names = {
        "F.scaled_dot_product_attention": F.scaled_dot_product_attention is entry.scaled_dot_product_attention,
        "torch._C._nn.scaled_dot_product_attention": (
            torch._C._nn.scaled_dot_product_attention is entry.scaled_dot_product_attention
        ),
        "F.multi_head_attention_forward": F.multi_head_attention_forward is entry._MHA_COPY,
    }
    return [name for name, ours in names.items() if ours]


ALL_OURS = ["F.scaled_dot_product_attention", "torch._C._nn.scaled_dot_product_attention", "F.multi_head_attention_forward"]


# ---- registration and teardown -------------------------------------------------------------------


def test_import_offers_but_does_not_activate() -> None:
    assert flashsdpa.REGISTRY_NAME in list_flash_attention_impls()
    assert current_flash_attention_impl() is None
    assert not flashsdpa.is_active()
    assert routed() == set()
    assert ours_in_torch() == []


def test_every_route_binds_this_torch() -> None:
    # Schema drift (2.12 added keyword arguments and the inplace forward) must not go unnoticed.
    assert {
        "_scaled_dot_product_flash_attention",
        "_scaled_dot_product_flash_attention_backward",
        "_flash_attention_forward",
        "_flash_attention_backward",
    } <= set(ROUTED_OPS)
    for route in routers._ROUTES:
        if hasattr(torch.ops.aten, route.op):
            assert routers.schema_mismatch(route, getattr(torch.ops.aten, route.op).default._schema) is None, route.op


def test_schema_mismatch_is_detected() -> None:
    route = routers._ROUTES[0]
    swapped = torch._C.parse_schema(
        "aten::_scaled_dot_product_flash_attention(Tensor key, Tensor query, Tensor value, float dropout_p=0., "
        "bool is_causal=False, bool return_debug_mask=False, *, float? scale=None) -> Tensor"
    )
    assert routers.schema_mismatch(route, swapped) == (
        "positional arguments ('key', 'query', 'value', 'dropout_p', 'is_causal', 'return_debug_mask'), "
        "expected ('query', 'key', 'value', 'dropout_p', 'is_causal', 'return_debug_mask')"
    )
    extended = torch._C.parse_schema(
        "aten::_scaled_dot_product_flash_attention(Tensor query, Tensor key, Tensor value, float dropout_p=0., "
        "bool is_causal=False, bool return_debug_mask=False, *, float? scale=None, int? window=None) -> Tensor"
    )
    assert routers.schema_mismatch(route, extended) == "unknown keyword arguments ['window']"


def test_override_warning_is_silenced() -> None:
    # PyTorch's first "Overriding a previously registered kernel" warning of a process (here from
    # an override of aten::mul's CPU kernel, one torch has on every build) does not pass the
    # routers' filter: in a fresh process, so the warning is not spent yet. It printed on the H200
    # (session 6) through a filter whose pattern stopped at the message's first newline.
    import subprocess
    import sys

    code = (
        "import warnings, torch\n"
        "from flashsdpa import routers\n"
        "lib = torch.library.Library('aten', 'IMPL')\n"
        "with warnings.catch_warnings():\n"
        "    warnings.simplefilter('always')\n"
        "    warnings.filterwarnings('ignore', message=routers.OVERRIDE_WARNING)\n"
        "    lib.impl('mul.Tensor', lambda *a, **k: None, 'CPU')\n"
        "lib._destroy()\n"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert "previously registered kernel" not in run.stderr, run.stderr


def test_enable_registers_and_tears_down() -> None:
    before = mode_stack()
    with flashsdpa.enable() as ctx:
        assert isinstance(ctx, flashsdpa.enable)
        assert flashsdpa.is_active()
        assert routed() == set(ROUTED_OPS)
        # No torch-function mode: every other torch call runs as without flashsdpa.
        assert ours_in_torch() == ALL_OURS and mode_stack() == before
    assert not flashsdpa.is_active()
    assert routed() == set() and ours_in_torch() == []
    assert mode_stack() == before


def test_enable_is_reentrant() -> None:
    ctx = flashsdpa.enable()
    with ctx:
        state = activation._active
        with ctx, flashsdpa.enable():
            assert activation._active is state  # nested entries do not register again
            assert ours_in_torch() == ALL_OURS
        assert flashsdpa.is_active() and routed() == set(ROUTED_OPS)
    assert not flashsdpa.is_active() and routed() == set()


def test_install_and_uninstall() -> None:
    flashsdpa.install()
    flashsdpa.install()  # idempotent
    with flashsdpa.enable():
        pass
    assert flashsdpa.is_active()
    flashsdpa.uninstall()
    assert not flashsdpa.is_active() and routed() == set() and ours_in_torch() == []
    flashsdpa.uninstall()  # a no-op


def test_uninstall_keeps_enclosing_context() -> None:
    with flashsdpa.enable():
        flashsdpa.install()
        flashsdpa.uninstall()
        assert flashsdpa.is_active()
    assert not flashsdpa.is_active()


def test_uninstall_under_another_mode() -> None:
    # install() / uninstall() need not nest with TorchFunctionModes: flashsdpa pushes none, and
    # the other one stays where it is.
    class Other(TorchFunctionMode):
        def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            return func(*args, **(kwargs or {}))

    flashsdpa.install()
    other = Other()
    other.__enter__()
    try:
        flashsdpa.uninstall()
        assert ours_in_torch() == [] and mode_stack()[-1] is other
    finally:
        other.__exit__(None, None, None)


def test_torch_registry_activation() -> None:
    activate_flash_attention_impl(flashsdpa.REGISTRY_NAME)
    try:
        assert current_flash_attention_impl() == flashsdpa.REGISTRY_NAME
        assert flashsdpa.is_active() and routed() == set(ROUTED_OPS)
        activate_flash_attention_impl(flashsdpa.REGISTRY_NAME)  # restores, then activates again
        assert activation._refcount == 1
    finally:
        restore_flash_attention_impl()
    assert current_flash_attention_impl() is None
    assert not flashsdpa.is_active() and routed() == set()


def test_release_more_than_acquired_raises() -> None:
    with pytest.raises(RuntimeError, match="released more often than activated"):
        activation._release()


def test_failed_activation_leaves_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken() -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr(activation, "_kernels_usable", lambda: True)
    monkeypatch.setattr(activation, "_prefer_flash", broken)
    before = mode_stack()
    with pytest.raises(RuntimeError, match="boom"), flashsdpa.enable():
        pass
    assert not flashsdpa.is_active() and routed() == set() and mode_stack() == before


def test_warns_once_when_a_gpu_meets_a_build_without_cuda(monkeypatch: pytest.MonkeyPatch, fake_build: Any) -> None:
    fake_build(with_cuda=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(activation, "_warned_unusable", False)
    expected = r"flashsdpa\._C was built without CUDA .*; SDPA keeps PyTorch's kernels"
    with pytest.warns(UserWarning, match=expected), flashsdpa.enable():
        pass
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with flashsdpa.enable():
            pass


# ---- SDPA's priority order -----------------------------------------------------------------------


@pytest.fixture
def hopper_order() -> Iterator[list[int]]:
    """The order PyTorch settles on on Hopper with a recent cuDNN: cuDNN, flash, efficient, math, overrideable."""
    saved = torch._C._get_sdp_priority_order()
    order = [3, 1, 2, 0, 4]
    torch._C._set_sdp_priority_order(order)
    yield order
    torch._C._set_sdp_priority_order(saved)


def test_priority_flash_first_then_restored(monkeypatch: pytest.MonkeyPatch, hopper_order: list[int]) -> None:
    monkeypatch.setattr(activation, "_kernels_usable", lambda: True)
    with flashsdpa.enable():
        assert torch._C._get_sdp_priority_order() == [1, 3, 2, 0, 4]
        with flashsdpa.enable():
            assert torch._C._get_sdp_priority_order() == [1, 3, 2, 0, 4]
        assert torch._C._get_sdp_priority_order() == [1, 3, 2, 0, 4]
    assert torch._C._get_sdp_priority_order() == hopper_order


def test_priority_restored_after_user_change_inside(monkeypatch: pytest.MonkeyPatch, hopper_order: list[int]) -> None:
    monkeypatch.setattr(activation, "_kernels_usable", lambda: True)
    with flashsdpa.enable():
        torch._C._set_sdp_priority_order([0, 1, 2, 3, 4])
    assert torch._C._get_sdp_priority_order() == hopper_order


def test_priority_untouched_without_kernels(monkeypatch: pytest.MonkeyPatch, hopper_order: list[int]) -> None:
    # Without a GPU or a CUDA build our kernels never run, so PyTorch's choice stays as it was.
    monkeypatch.setattr(activation, "_kernels_usable", lambda: False)
    with flashsdpa.enable():
        assert torch._C._get_sdp_priority_order() == hopper_order
    assert torch._C._get_sdp_priority_order() == hopper_order


# ---- what a router does with a call --------------------------------------------------------------


class LaunchRecorder:
    """Stands in for the _backend launch wrappers: records (name, args) of each launch."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls: list[tuple[str, tuple[Any, ...]]] = []
        self.kwargs: list[dict[str, Any]] = []
        for name in ("launch_fwd", "launch_bwd"):
            monkeypatch.setattr(_backend, name, self._recorder(name))

    def _recorder(self, name: str) -> Any:
        def record(*args: Any, **kwargs: Any) -> None:
            self.calls.append((name, args))
            self.kwargs.append(kwargs)

        return record


class NativeRecorder:
    """Stands in for PyTorch's captured kernel (a SafeKernelFunction)."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, tuple[Any, ...], dict[str, Any]]] = []

    def call_boxed(self, keyset: Any, *args: Any, **kwargs: Any) -> str:
        self.calls.append((keyset, args, kwargs))
        return "native result"


@pytest.fixture
def launches(monkeypatch: pytest.MonkeyPatch, fake_build: Any) -> LaunchRecorder:
    # The routers cache template tensors per device; here they would be FakeTensors of this test.
    monkeypatch.setattr(routers, "_SPARES", {})
    return LaunchRecorder(monkeypatch)


@pytest.fixture
def native(monkeypatch: pytest.MonkeyPatch) -> NativeRecorder:
    recorder = NativeRecorder()
    for route in routers._ROUTES:
        monkeypatch.setitem(routers._NATIVE, route.op, recorder)
    return recorder


def same_meta(ours: Tensor, meta: Tensor) -> bool:
    return ours.shape == meta.shape and ours.stride() == meta.stride() and ours.dtype == meta.dtype


def bhsd(b: int, h: int, s: int, d: int, layout: str = "bhsd") -> Tensor:
    if layout == "bshd":
        return torch.empty(b, s, h, d, dtype=F16, device="cuda").transpose(1, 2)
    return torch.empty(b, h, s, d, dtype=F16, device="cuda")


@pytest.mark.parametrize("layout", ["bhsd", "bshd"])
def test_sdpa_forward_router_serves_in_meta_contract(layout: str, launches: LaunchRecorder, fake_mode: Any) -> None:
    q, k, v = bhsd(2, 8, 16, 64, layout), bhsd(2, 2, 24, 64, layout), bhsd(2, 2, 24, 64, layout)
    flashsdpa.reset_stats()
    ours = routers._sdpa_flash_forward(None, q, k, v, 0.0, True)
    meta = torch.ops.aten._scaled_dot_product_flash_attention.default(q, k, v, 0.0, True)
    assert len(ours) == len(meta) == 9
    assert same_meta(ours[0], meta[0]) and same_meta(ours[1], meta[1]) and same_meta(ours[8], meta[8])
    assert ours[2] is None and ours[3] is None and ours[4:6] == (16, 24) == tuple(meta[4:6])
    for i in (6, 7):  # rng_state and the unused offset: meta tensors there, CUDA ones here
        assert ours[i].shape == meta[i].shape and ours[i].dtype == meta[i].dtype == torch.uint64
    [(name, args)] = launches.calls
    assert name == "launch_fwd"
    assert args[:5] == (q, k, v, ours[0], ours[1])
    assert args[5] == pytest.approx(1 / math.sqrt(64)) and args[6] == masks.CAUSAL_BOTTOM_RIGHT  # is_causal: bottom-right, as PyTorch's kernel
    assert flashsdpa.stats()["ops"]["aten::_scaled_dot_product_flash_attention"] == {"served": 1, "fallback": 0}


def test_sdpa_backward_router_serves_in_meta_contract(launches: LaunchRecorder, fake_mode: Any) -> None:
    q, k, v = bhsd(2, 8, 16, 64, "bshd"), bhsd(2, 2, 24, 64, "bshd"), bhsd(2, 2, 24, 64, "bshd")
    out, lse = torch.empty_like(q), torch.empty(2, 8, 16, dtype=torch.float32, device="cuda")
    grad_out = torch.empty(1, 1, 1, 1, dtype=F16, device="cuda").expand(2, 8, 16, 64)  # what out.sum() gives
    seed, offset = torch.empty(2, dtype=torch.uint64, device="cuda"), torch.empty((), dtype=torch.uint64, device="cuda")
    args = (grad_out, q, k, v, out, lse, None, None, 16, 24, 0.0, False, seed, offset)
    ours = routers._sdpa_flash_backward(None, *args, scale=0.5)
    meta = torch.ops.aten._scaled_dot_product_flash_attention_backward.default(*args, scale=0.5)
    assert all(same_meta(a, b) for a, b in zip(ours, meta))
    [(name, launch)] = launches.calls
    assert name == "launch_bwd" and launch[0].stride()[-1] == 1 and launch[0].is_contiguous()
    assert launch[1:9] == (q, k, v, out, lse, *ours) and launch[9:] == (0.5, masks.NO_MASK)


def test_sdpa_backward_router_falls_back_where_no_backward_tile_fits(
    fake_build: Any, native: NativeRecorder, monkeypatch: pytest.MonkeyPatch, fake_mode: Any
) -> None:
    # An A100-sized part (163 KB per block): the forward serves head dim 256, the backward has no
    # tile that fits, so the backward router hands the call to PyTorch and says why.
    fake_build(smem_optin_bytes=166912)
    recorder = LaunchRecorder(monkeypatch)
    flashsdpa.reset_stats()
    q, k, v = bhsd(1, 2, 16, 256), bhsd(1, 2, 16, 256), bhsd(1, 2, 16, 256)
    out, lse = torch.empty_like(q), torch.empty(1, 2, 16, dtype=torch.float32, device="cuda")
    seed, offset = torch.empty(2, dtype=torch.uint64, device="cuda"), torch.empty((), dtype=torch.uint64, device="cuda")
    args = (torch.empty_like(q), q, k, v, out, lse, None, None, 16, 16, 0.0, False, seed, offset)
    assert routers._sdpa_flash_backward(None, *args, scale=0.5) == "native result"
    assert recorder.calls == [] and len(native.calls) == 1
    [reason] = flashsdpa.stats()["fallback_reasons"]
    assert reason == (
        "aten::_scaled_dot_product_flash_attention_backward: head_dim=256 (value 256) backward on Fake GPU: "
        "family sm80: no tile fits the device's 163 KB"
    )
    # Head dims that fit are served there.
    q, k, v = bhsd(1, 2, 16, 64), bhsd(1, 2, 16, 64), bhsd(1, 2, 16, 64)
    out = torch.empty_like(q)
    args = (torch.empty_like(q), q, k, v, out, lse, None, None, 16, 16, 0.0, False, seed, offset)
    routers._sdpa_flash_backward(None, *args, scale=0.5)
    assert [name for name, _ in recorder.calls] == ["launch_bwd"]


def test_flash_forward_router_dense_uses_views(launches: LaunchRecorder, fake_mode: Any) -> None:
    q, k, v = (torch.empty(2, s, h, 64, dtype=F16, device="cuda") for s, h in ((16, 8), (24, 2), (24, 2)))
    ours = routers._flash_forward(None, q, k, v, None, None, 16, 24, 0.0, True, False, num_splits=4)
    meta = torch.ops.aten._flash_attention_forward.default(q, k, v, None, None, 16, 24, 0.0, True, False)
    assert (
        len(ours) == 5 and same_meta(ours[0], meta[0]) and same_meta(ours[1], meta[1]) and same_meta(ours[4], meta[4])
    )
    [(name, args)] = launches.calls
    # (B, S, H, D) arguments reach the kernel as (B, H, S, D) views of the same memory: no copy.
    assert name == "launch_fwd" and args[0].shape == (2, 8, 16, 64) and args[0].stride() == q.transpose(1, 2).stride()
    assert args[3].shape == (2, 8, 16, 64) and args[3].stride() == ours[0].transpose(1, 2).stride()
    assert args[6] == masks.CAUSAL_BOTTOM_RIGHT
    assert launches.kwargs == [{"num_splits": 4}]  # torch's num_splits: the decode kernel's split count


def test_flash_forward_router_varlen(launches: LaunchRecorder, fake_mode: Any) -> None:
    q, k, v = (torch.empty(t, 4, 64, dtype=F16, device="cuda") for t in (30, 40, 40))
    cu_q, cu_k = (torch.empty(4, dtype=torch.int32, device="cuda") for _ in range(2))
    ours = routers._flash_forward(None, q, k, v, cu_q, cu_k, 12, 20, 0.0, False, False, scale=0.25)
    meta = torch.ops.aten._flash_attention_forward.default(q, k, v, cu_q, cu_k, 12, 20, 0.0, False, False, scale=0.25)
    assert same_meta(ours[0], meta[0]) and same_meta(ours[1], meta[1]) and ours[1].shape == (4, 30)
    [(name, args)] = launches.calls
    assert name == "launch_fwd"
    assert args[:7] == (q, k, v, ours[0], ours[1], 0.25, (-1, -1, 1)) and args[7] == (cu_q, cu_k, None, 12, 20)


@pytest.mark.skipif(not hasattr(torch.ops.aten, "_flash_attention_forward_no_dropout_inplace"), reason="torch < 2.12")
def test_flash_forward_inplace_router(launches: LaunchRecorder, fake_mode: Any) -> None:
    q, k, v = (torch.empty(2, 16, 4, 64, dtype=F16, device="cuda") for _ in range(3))
    out = torch.empty_like(q)
    lse = routers._flash_forward_inplace(None, out, q, k, v, None, None, 16, 16, 0.0, False, False)
    assert lse.shape == (2, 4, 16) and lse.dtype == torch.float32
    [(name, args)] = launches.calls
    assert name == "launch_fwd" and args[3].shape == (2, 4, 16, 64) and args[3].stride() == out.transpose(1, 2).stride()


@pytest.mark.parametrize("varlen", [False, True])
def test_flash_backward_router(varlen: bool, launches: LaunchRecorder, fake_mode: Any) -> None:
    if varlen:
        q, k, v = (torch.empty(t, 4, 64, dtype=F16, device="cuda") for t in (30, 40, 40))
        cu_q, cu_k = (torch.empty(4, dtype=torch.int32, device="cuda") for _ in range(2))
        lse = torch.empty(4, 30, dtype=torch.float32, device="cuda")
        max_q, max_k = 12, 20
    else:
        q, k, v = (torch.empty(2, s, 4, 64, dtype=F16, device="cuda") for s in (16, 24, 24))
        cu_q = cu_k = None
        lse = torch.empty(2, 4, 16, dtype=torch.float32, device="cuda")
        max_q, max_k = 16, 24
    out, grad_out = torch.empty_like(q), torch.empty_like(q)
    rng = torch.empty(2, dtype=torch.uint64, device="cuda")
    args = (grad_out, q, k, v, out, lse, cu_q, cu_k, max_q, max_k, 0.0, True, rng, rng)
    ours = routers._flash_backward(None, *args)
    meta = torch.ops.aten._flash_attention_backward.default(*args)
    assert all(same_meta(a, b) for a, b in zip(ours, meta))
    [(name, launch)] = launches.calls
    assert name == "launch_bwd" and (len(launch) == 12) == varlen
    if not varlen:  # views of the (B, S, H, D) tensors, grads included
        assert launch[1].shape == (2, 4, 16, 64) and launch[6].stride() == ours[0].transpose(1, 2).stride()


def test_router_fallback_forwards_the_call_untouched(fake_build: Any, native: NativeRecorder, fake_mode: Any) -> None:
    flashsdpa.reset_stats()
    q, k, v = bhsd(2, 4, 16, 64), bhsd(2, 4, 16, 64), bhsd(2, 4, 16, 64)
    assert routers._sdpa_flash_forward("keys", q, k, v, 0.1, True, True, scale=0.3) == "native result"
    assert native.calls == [("keys", (q, k, v, 0.1, True, True), {"scale": 0.3})]
    stats = flashsdpa.stats()
    assert stats["ops"]["aten::_scaled_dot_product_flash_attention"] == {"served": 0, "fallback": 1}
    assert stats["fallback_reasons"] == {
        "aten::_scaled_dot_product_flash_attention: return_debug_mask=True: the debug attention mask is not supported": 1
    }


@pytest.mark.parametrize(
    "kwargs, reason",
    [
        (dict(dropout_p=1.5), "dropout_p=1.5: needs a float in (0, 1)"),
        (dict(return_debug_mask=True), "return_debug_mask=True: the debug attention mask is not supported"),
        # ALiBi is served forward-only (routers._ALIBI_GRAD_REASON); a bad slopes argument is PyTorch's.
        (dict(alibi_slopes="slopes"), "alibi_slopes: needs a float32 tensor on cuda:0"),
        (dict(block_table="table"), "block_table given: not supported by flashsdpa"),
        (dict(seqused_k="used"), "seqused_k given with dense inputs: PyTorch's dense kernel ignores it; left to it"),
        (dict(dtype=torch.float32), "query.dtype=torch.float32: needs float16 or bfloat16"),
    ],
)
def test_flash_forward_router_fallbacks(
    kwargs: dict[str, Any], reason: str, fake_build: Any, native: NativeRecorder, fake_mode: Any
) -> None:
    flashsdpa.reset_stats()
    kwargs = dict(kwargs)  # the parametrized dict is shared; take the non-aten entries out of a copy
    dtype = kwargs.pop("dtype", F16)
    dropout_p = kwargs.pop("dropout_p", 0.0)
    debug = kwargs.pop("return_debug_mask", False)
    q, k, v = (torch.empty(2, 16, 4, 64, dtype=dtype, device="cuda") for _ in range(3))
    positional = (q, k, v, None, None, 16, 16, dropout_p, False, debug)
    assert routers._flash_forward("keys", *positional, **kwargs) == "native result"
    [(keys, args, forwarded)] = native.calls
    assert keys == "keys" and args == positional and forwarded == kwargs
    assert flashsdpa.stats()["fallback_reasons"] == {f"aten::_flash_attention_forward: {reason}": 1}


@pytest.mark.parametrize(
    "shape, requires_grad, reason",
    [
        ((3,), False, "alibi_slopes (3,): needs (4,) or (2, 4)"),
        ((4,), True, routers._ALIBI_GRAD_REASON),
    ],
)
def test_flash_forward_router_alibi_fallbacks(
    shape: tuple[int, ...], requires_grad: bool, reason: str, fake_build: Any, native: NativeRecorder, fake_mode: Any
) -> None:
    """ALiBi through aten::_flash_attention_forward: slopes of the wrong shape are PyTorch's to
    refuse, and a forward whose inputs require grad is left to PyTorch (its backward op takes no
    slopes, so the road is forward-only)."""
    flashsdpa.reset_stats()
    q, k, v = (torch.empty(2, 16, 4, 64, dtype=F16, device="cuda") for _ in range(3))
    q.requires_grad_(requires_grad)
    slopes = torch.empty(shape, dtype=torch.float32, device="cuda")
    positional = (q, k, v, None, None, 16, 16, 0.0, False, False)
    assert routers._flash_forward("keys", *positional, alibi_slopes=slopes) == "native result"
    assert flashsdpa.stats()["fallback_reasons"] == {f"aten::_flash_attention_forward: {reason}": 1}


@pytest.mark.parametrize(
    "is_causal, left, right, seqlen_q, expected",
    [
        (False, None, None, 64, (-1, -1, 1)),
        (True, None, None, 64, (-1, 0, 1)),
        (True, -1, -1, 64, (-1, 0, 1)),
        (False, -1, 0, 64, (-1, 0, 1)),  # FA2's spelling of causal
        (False, 64, 64, 64, (-1, -1, 1)),  # windows as long as the keys: unbounded
        (True, 100, None, 64, (-1, 0, 1)),
        (True, 8, None, 64, (8, 0, 1)),  # a sliding window
        (False, 8, -1, 64, (8, 64, 1)),  # a left bound alone: the right side becomes seqlen_k, as in FA2
        (False, -1, 3, 64, (-1, 3, 1)),
        (False, -5, -7, 64, (-1, -1, 1)),  # any negative side is unbounded
        (True, 8, 5, 1, (8, 5, 1)),  # one query row: is_causal is dropped, the window stays
    ],
)
def test_window_sizes(
    is_causal: bool, left: int | None, right: int | None, seqlen_q: int, expected: tuple[int, int, int]
) -> None:
    # What PyTorch's flash kernel (flash_api.cpp's mha_fwd / mha_varlen_fwd) makes of the arguments.
    assert masks.torch_flash(is_causal, left, right, seqlen_q, 64) == expected


def test_flash_forward_router_serves_windows(launches: LaunchRecorder, fake_mode: Any) -> None:
    q, k, v = (torch.empty(2, 16, 4, 64, dtype=F16, device="cuda") for _ in range(3))
    routers._flash_forward(None, q, k, v, None, None, 16, 16, 0.0, True, False, window_size_left=4, window_size_right=0)
    [(name, args)] = launches.calls
    assert name == "launch_fwd" and args[6] == (4, 0, 1)


# ---- the launch wrappers: tensors to _C's pointers and strides -----------------------------------


@pytest.fixture
def recorded_build(fake_build: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setattr(_backend, "_current_stream", lambda device: 77)
    return fake_build()


def test_launch_fwd_dense_arguments(recorded_build: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_backend, "DECODE_MAX_SEQLEN_Q", 0)  # the forward kernel's spec (tests/test_decode.py: the decode one)
    q = torch.empty(2, 16, 8, 64, dtype=torch.bfloat16).transpose(1, 2)  # (B, H, S, D) view of BSHD memory
    k = v = torch.empty(2, 2, 24, 64, dtype=torch.bfloat16)
    out, lse = torch.empty_like(q), torch.empty(2, 8, 16)
    _backend.launch_fwd(q, k, v, out, lse, 0.125, masks.CAUSAL_TOP_LEFT)
    [(name, (spec,))] = recorded_build.calls
    assert name == "fwd"
    pointers, strides, sizes, mask, *rest = spec
    # Eight pointers: no workspace (the stand-in _C asks for none; tests/test_split_tail.py: one).
    assert pointers == (q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr(), lse.data_ptr(), 0, 0, 0)
    # Strides go whole (no slice): _C reads the first three items, (batch, head, row).
    assert strides == (
        (8192, 64, 512, 1),
        (3072, 1536, 64, 1),
        (3072, 1536, 64, 1),
        (8192, 64, 512, 1),
        (128, 16, 1),
    )
    assert sizes == (2, 8, 2, 16, 24, 64, 64, -1, -1)  # total_q, total_k -1: dense
    assert mask == (-1, 0, 0) and tuple(rest) == (0.125, 1, -1, 77)  # scale, bf16 = 1, device, stream


def test_launch_fwd_varlen_arguments(recorded_build: Any) -> None:
    q, k, v = torch.empty(30, 4, 64, dtype=F16), torch.empty(40, 2, 64, dtype=F16), torch.empty(40, 2, 32, dtype=F16)
    out, lse = torch.empty(30, 4, 32, dtype=F16), torch.empty(4, 30)
    cu_q, cu_k, used = (torch.zeros(n, dtype=torch.int32) for n in (4, 4, 3))
    _backend.launch_fwd(q, k, v, out, lse, 0.5, masks.CAUSAL_BOTTOM_RIGHT, (cu_q, cu_k, used, 12, 20))
    [(name, (spec,))] = recorded_build.calls
    assert name == "fwd"
    pointers, strides, sizes, mask, *rest = spec
    assert strides == ((0, 64, 256), (0, 64, 128), (0, 32, 64), (0, 32, 128), (0, 30, 1))
    assert sizes == (3, 4, 2, 12, 20, 64, 32, 30, 40)  # total_q, total_k: the clamp bounds
    assert pointers[5:] == (cu_q.data_ptr(), cu_k.data_ptr(), used.data_ptr())  # no workspace: none asked for
    assert mask == (-1, 0, 1) and tuple(rest) == (0.5, 0, -1, 77)


def test_launch_fwd_without_lse(recorded_build: Any) -> None:
    # Inference callers pass no LSE: _C gets a null pointer (the kernel then writes none).
    q = k = v = out = torch.empty(1, 2, 16, 64, dtype=F16)
    _backend.launch_fwd(q, k, v, out, None, 0.125, masks.NO_MASK)
    [(name, (spec,))] = recorded_build.calls
    assert name == "fwd" and spec[0][4] == 0 and spec[1][4] == (0, 0, 0)


def test_launch_bwd_allocates_the_workspace(recorded_build: Any) -> None:
    # One _C call: the workspace is sized from the bucket the capability table picks (cached).
    q = k = v = out = dout = torch.empty(1, 2, 16, 48, dtype=F16)
    lse = torch.empty(1, 2, 16)
    dq, dk, dv = (torch.empty_like(q) for _ in range(3))
    _backend.launch_bwd(dout, q, k, v, out, lse, dq, dk, dv, 0.125, masks.NO_MASK)
    [(name, (spec, grads))] = recorded_build.calls
    assert name == "bwd"
    assert spec[2] == (1, 2, 2, 16, 16, 48, 48, -1, -1) and spec[3] == (-1, -1, 0)
    pointers, strides, nbytes, deterministic = grads
    assert pointers[:4] == (dout.data_ptr(), dq.data_ptr(), dk.data_ptr(), dv.data_ptr())
    # dq_accum and delta: two buffers, rows x heads x bucket (64 for head dim 48) and rows x heads
    # floats, then one int32 per (batch, head, 64-row query block): the deterministic mode's semaphores.
    assert pointers[4] != 0 and pointers[5] != 0 and pointers[4] != pointers[5]
    assert nbytes == (2 * 16 * 64 * 4, 2 * 16 * 4 + 1 * 2 * 1 * 4)
    assert strides == (dout.stride(), dq.stride(), dk.stride(), dv.stride())
    assert deterministic is False


@pytest.mark.parametrize("has_deterministic_family", [False, True])
def test_launch_bwd_passes_the_deterministic_request(
    recorded_build: Any, has_deterministic_family: bool, deterministic: Callable[[bool], None]
) -> None:
    # Under torch.use_deterministic_algorithms(True) _C is asked for a deterministic backward only
    # where the table has a family that runs it (the sm90 one: ordered dQ adds); elsewhere the
    # caller has raised, or warned under warn_only, and the call runs as before.
    recorded_build.deterministic_backward = has_deterministic_family
    q = k = v = out = dout = torch.empty(1, 2, 16, 64, dtype=F16)
    lse = torch.empty(1, 2, 16)
    deterministic(True)
    _backend.launch_bwd(dout, q, k, v, out, lse, *(torch.empty_like(q) for _ in range(3)), 0.125, masks.NO_MASK)
    [(name, (_, grads))] = recorded_build.calls
    assert name == "bwd" and grads[3] is has_deterministic_family


def test_launch_bwd_varlen_arguments(recorded_build: Any) -> None:
    q = k = v = out = dout = torch.empty(30, 4, 64, dtype=F16)
    lse = torch.empty(4, 30)
    dq, dk, dv = (torch.empty_like(q) for _ in range(3))
    cu = torch.zeros(3, dtype=torch.int32)
    _backend.launch_bwd(dout, q, k, v, out, lse, dq, dk, dv, 1.0, masks.CAUSAL_BOTTOM_RIGHT, (cu, cu, None, 20, 20))
    [(name, (spec, grads))] = recorded_build.calls
    assert name == "bwd"
    assert spec[1][4] == (0, 30, 1)  # the LSE: (H, total)
    assert spec[2] == (2, 4, 4, 20, 20, 64, 64, 30, 30) and spec[0][5:] == (cu.data_ptr(), cu.data_ptr(), 0)
    assert grads[2] == (4 * 30 * 64 * 4, 4 * 30 * 4)  # rows = total_q per head


# The real _C (a CUDA build or a CPU-only one: both parse the strides before anything else runs).
needs_c = pytest.mark.skipif(_backend._C is None, reason=f"flashsdpa._C not importable: {_backend.IMPORT_ERROR}")


def _fwd_spec(q_strides: Any, batch: int = 1) -> tuple[Any, ...]:
    """_C.fwd's spec for a (1, 4, 64, 64) problem with these query strides."""
    rows = (16384, 4096, 64, 1)
    return ((1, 2, 3, 4, 5, 0, 0, 0), (q_strides, rows, rows, rows, (256, 64, 1)), (batch, 4, 4, 64, 64, 64, 64, -1, -1),
            (-1, -1, 0), 0.125, 1, 0, 0)  # fmt: skip


@needs_c
@pytest.mark.parametrize(
    "q_strides",
    [(16384, 4096), [16384, 4096, 64], (16384, 4096.0, 64), (16384, 2**63, 64)],
    ids=["short", "list", "float", "overflow"],
)
def test_c_rejects_bad_stride_arguments(q_strides: Any) -> None:
    need = "a tuple (see module.cpp)" if isinstance(q_strides, list) or len(q_strides) < 3 else "an int"
    with pytest.raises(ValueError, match=f"^q_strides=.*: needs {re.escape(need)}$"):
        _backend._C.fwd(_fwd_spec(q_strides))


@needs_c
def test_c_names_the_first_bad_stride_argument() -> None:
    pointers, strides, *rest = _fwd_spec((16384, 4096, 64, 1))
    strides = (strides[0], strides[1], (1,), strides[3], (2,))  # v_strides and lse_strides
    with pytest.raises(ValueError, match=r"^v_strides=\(1,\): "):
        _backend._C.fwd((pointers, strides, *rest))
    grad_strides = ((4096, 64, 1), (1, 2), (4096, 64, 1), ())  # dq_strides and dv_strides
    with pytest.raises(ValueError, match=r"^dq_strides=\(1, 2\): "):
        _backend._C.bwd(_fwd_spec((16384, 4096, 64, 1)), ((1, 2, 3, 4, 256, 512), grad_strides, (4096, 512), False))


@needs_c
def test_c_reads_the_first_three_items_of_longer_stride_tuples() -> None:
    # A whole Tensor.stride() passes the stride parsing; batch=0 then fails the first size check,
    # before anything touches a GPU (so this runs on CPU-only machines and builds alike).
    with pytest.raises(ValueError, match=r"^batch=0: must be >= 1"):
        _backend._C.fwd(_fwd_spec((16384, 4096, 64, 1), batch=0))


def test_backward_routers_leave_deterministic_runs_to_pytorch(
    launches: LaunchRecorder, native: NativeRecorder, fake_mode: Any, deterministic: Callable[[bool], None]
) -> None:
    # Under torch.use_deterministic_algorithms(True) the backward goes to PyTorch's kernel, which
    # honours the flag; ours would accumulate dQ with atomics.
    q, k, v = bhsd(2, 4, 16, 64), bhsd(2, 4, 16, 64), bhsd(2, 4, 16, 64)
    out, lse = torch.empty_like(q), torch.empty(2, 4, 16, dtype=torch.float32, device="cuda")
    seed, offset = torch.empty(2, dtype=torch.uint64, device="cuda"), torch.empty((), dtype=torch.uint64, device="cuda")
    args = (torch.empty_like(out), q, k, v, out, lse, None, None, 16, 16, 0.0, True, seed, offset)
    deterministic(False)
    flashsdpa.reset_stats()
    assert routers._sdpa_flash_backward("keys", *args) == "native result"
    dense = [t.transpose(1, 2) for t in (torch.empty_like(out), q, k, v, out)]
    flash_args = (*dense, lse, None, None, 16, 16, 0.0, True, seed, offset)
    assert routers._flash_backward("keys", *flash_args) == "native result"
    assert launches.calls == [] and len(native.calls) == 2
    reasons = flashsdpa.stats()["fallback_reasons"]
    assert all("use_deterministic_algorithms(True)" in reason for reason in reasons) and len(reasons) == 2


@needs_c
def test_c_needs_the_packed_rows_with_varlen() -> None:
    # The kernels clamp every cu_seqlens offset to the packed rows (cuda/common/seqlen.cuh): a varlen
    # spec without them has no bound, so _C refuses it before anything runs.
    pointers, strides, sizes, *rest = _fwd_spec((16384, 4096, 64, 1))
    pointers = (*pointers[:5], 256, 512, 0)  # cu_seqlens_q, cu_seqlens_k: varlen
    sizes = (*sizes[:7], 30, -1)
    with pytest.raises(ValueError, match=r"^total_q=30, total_k=-1: varlen needs the packed rows"):
        _backend._C.fwd((pointers, strides, sizes, *rest))


def test_flash_forward_router_serves_alibi_forward(
    fake_build: Any, native: NativeRecorder, fake_mode: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without grad, ALiBi through aten::_flash_attention_forward runs our forward with the slopes
    in the spec's modifiers (module.cpp's spec.mods: softcap 0, slopes, batch stride, no sinks)."""
    build = fake_build()
    monkeypatch.setattr(_backend, "_current_stream", lambda device: 77)
    q, k, v = (torch.empty(2, 16, 4, 64, dtype=F16, device="cuda") for _ in range(3))
    slopes = torch.empty(2, 4, dtype=torch.float32, device="cuda")
    routers._flash_forward("keys", q, k, v, None, None, 16, 16, 0.0, True, False, alibi_slopes=slopes)
    assert not native.calls
    [(name, (spec,))] = build.calls
    assert name == "fwd" and len(spec) == 10 and spec[8] is None  # no decode item: the forward kernel
    softcap, slopes_ptr, batch_stride, sinks_ptr = spec[9]
    assert (softcap, slopes_ptr, batch_stride, sinks_ptr) == (0.0, slopes.data_ptr(), 4, 0)
