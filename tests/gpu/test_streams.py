# test_streams.py: several GPUs, streams and threads (issue 10, "what to build"). Launches go to
# the tensors' device and to that device's current stream (not the current device's, not the
# default stream); work on non-default streams, and on two streams at once, gives the serial
# answer; enable() entered and left from several threads at once is safe. Each stream test makes
# the wrong stream visible: the inputs are written on the right stream behind a long sleep kernel,
# so a launch on any other stream reads them before they are written.
from __future__ import annotations

import ctypes
import threading

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor

import flashsdpa
from flashsdpa import _backend
from helpers import gpu_skip_reason, skip_unless_compiled

GPU_SKIP = gpu_skip_reason()
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(GPU_SKIP is not None, reason=f"GPU suite: {GPU_SKIP}")]

BF16 = torch.bfloat16
D = 128
SLEEP_CYCLES = 200_000_000  # ~0.1 s on an H200: far longer than any launch takes to start


def _reference(q: Tensor, k: Tensor, v: Tensor, causal: bool = True) -> Tensor:
    return F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=causal).to(q.dtype)


def _close(ours: Tensor, ref: Tensor) -> None:
    torch.testing.assert_close(ours.float(), ref.float(), atol=2e-2, rtol=2e-2)


def _late_inputs(stream: torch.cuda.Stream, sources: list[Tensor]) -> list[Tensor]:
    """Copies of ``sources`` written on ``stream`` behind a sleep: valid only on that stream (or
    after it), garbage (zeros, written now on the default stream) on any other that runs early."""
    device = sources[0].device
    targets = [torch.zeros_like(s) for s in sources]
    torch.cuda.synchronize(device)
    with torch.cuda.device(device):
        with torch.cuda.stream(stream):
            torch.cuda._sleep(SLEEP_CYCLES)
            for t, s in zip(targets, sources):
                t.copy_(s, non_blocking=True)
    for t in targets:
        t.record_stream(stream)
    return targets


def test_non_default_stream_forward_and_backward() -> None:
    skip_unless_compiled(BF16, D)
    sources = [torch.randn(2, 4, 256, D, device="cuda", dtype=BF16) for _ in range(4)]
    ref_out = _reference(*sources[:3])
    leaves = [s.detach().requires_grad_() for s in sources[:3]]
    ref_grads = torch.autograd.grad(_reference(*leaves), leaves, sources[3])
    stream = torch.cuda.Stream()
    q, k, v, dout = _late_inputs(stream, sources)
    with torch.cuda.stream(stream):
        leaves = [t.requires_grad_() for t in (q, k, v)]
        out = flashsdpa.attention(*leaves, causal=True)
        grads = torch.autograd.grad(out, leaves, dout)
    stream.synchronize()
    _close(out, ref_out)
    for g, r in zip(grads, ref_grads):
        _close(g, r)


def test_sdpa_inside_enable_on_a_non_default_stream() -> None:
    skip_unless_compiled(BF16, D)
    sources = [torch.randn(2, 4, 256, D, device="cuda", dtype=BF16) for _ in range(3)]
    ref = _reference(*sources)
    stream = torch.cuda.Stream()
    q, k, v = _late_inputs(stream, sources)
    with flashsdpa.enable(), torch.cuda.stream(stream), torch.no_grad():
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # the eager path
    stream.synchronize()
    _close(out, ref)


def test_two_streams_at_once() -> None:
    """Two streams each run a chain of forwards and backwards concurrently; each result equals the
    same chain run alone."""
    skip_unless_compiled(BF16, D)
    inputs = [[torch.randn(1, 8, 512, D, device="cuda", dtype=BF16) for _ in range(4)] for _ in range(2)]

    def chain(q: Tensor, k: Tensor, v: Tensor, dout: Tensor) -> list[Tensor]:
        results = []
        for _ in range(5):
            leaves = [t.detach().requires_grad_() for t in (q, k, v)]
            out = flashsdpa.attention(*leaves, causal=True)
            dq, dk, dv = torch.autograd.grad(out, leaves, dout)
            results += [out, dq, dk, dv]
            q = (q + 0.1 * dq).detach()  # each step depends on the last: ordering errors show
        return results

    alone = [chain(*x) for x in inputs]
    torch.cuda.synchronize()
    streams = [torch.cuda.Stream() for _ in range(2)]
    late = [_late_inputs(s, x) for s, x in zip(streams, inputs)]
    together: list[list[Tensor]] = []
    for s, x in zip(streams, late):
        with torch.cuda.stream(s):
            together.append(chain(*x))
    torch.cuda.synchronize()
    for a, b in zip(alone, together):
        for x, y in zip(a, b):
            # Same kernels, same inputs: bitwise equal except dq (float atomics reorder).
            _close(y, x)


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs (nvidia-h200-x2)")
def test_second_gpu_with_its_current_stream() -> None:
    """Tensors on cuda:1 while cuda:0 is current: the kernels run on cuda:1, on cuda:1's current
    stream (a non-default one), forward and backward, direct API and SDPA inside enable()."""
    skip_unless_compiled(BF16, D)
    assert torch.cuda.current_device() == 0
    sources = [torch.randn(2, 4, 256, D, device="cuda:1", dtype=BF16) for _ in range(4)]
    ref_out = _reference(*sources[:3])
    leaves = [s.detach().requires_grad_() for s in sources[:3]]
    ref_grads = torch.autograd.grad(_reference(*leaves), leaves, sources[3])
    stream = torch.cuda.Stream(device="cuda:1")
    q, k, v, dout = _late_inputs(stream, sources)
    previous = torch.cuda.current_stream("cuda:1")
    torch.cuda.set_stream(stream)  # cuda:1's current stream; the current device stays cuda:0
    try:
        torch.cuda.set_device(0)
        leaves = [t.requires_grad_() for t in (q, k, v)]
        out = flashsdpa.attention(*leaves, causal=True)
        grads = torch.autograd.grad(out, leaves, dout)
        with flashsdpa.enable(), torch.no_grad():
            out_sdpa = F.scaled_dot_product_attention(q.detach(), k.detach(), v.detach(), is_causal=True)
        assert torch.cuda.current_device() == 0
    finally:
        torch.cuda.set_stream(previous)
        torch.cuda.set_device(0)
    stream.synchronize()
    assert out.device == torch.device("cuda:1") and out_sdpa.device == torch.device("cuda:1")
    _close(out, ref_out)
    _close(out_sdpa, ref_out)
    for g, r in zip(grads, ref_grads):
        assert g.device == torch.device("cuda:1")
        _close(g, r)


def test_enable_from_several_threads() -> None:
    """Eight threads enter and leave enable() repeatedly, each running SDPA (forward and backward)
    on its own stream, overlapping in every way: every result is right and, at the end, flashsdpa
    is inactive and SDPA's priority order is PyTorch's again."""
    skip_unless_compiled(BF16, D)
    n_threads, rounds = 8, 10
    barrier = threading.Barrier(n_threads)
    errors: list[BaseException] = []
    inputs = [[torch.randn(1, 4, 128, D, device="cuda", dtype=BF16) for _ in range(3)] for _ in range(n_threads)]
    refs = [_reference(*x) for x in inputs]
    torch.cuda.synchronize()
    # PyTorch's order as SDPA sees it: its first backend choice of the process sets the default
    # (cuDNN first on an H100 / H200), so it is read after the references' SDPA calls. Read
    # before them, a process whose first SDPA call is this test's saw the order from before that
    # choice ([1, 2, 0, 3, 4] against [3, 1, 2, 0, 4]: the test failed alone, passed in the suite).
    order = torch._C._get_sdp_priority_order()

    def work(i: int) -> None:
        try:
            stream = torch.cuda.Stream()
            barrier.wait()
            for r in range(rounds):
                with torch.cuda.stream(stream):
                    if (i + r) % 2:
                        with flashsdpa.enable():
                            out = F.scaled_dot_product_attention(*inputs[i], is_causal=True)
                    else:
                        leaves = [t.detach().requires_grad_() for t in inputs[i]]
                        with flashsdpa.enable():
                            out = F.scaled_dot_product_attention(*leaves, is_causal=True)
                            out.float().sum().backward()
                stream.synchronize()
                _close(out.detach(), refs[i])
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(n_threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads), "a thread hung"
    assert not errors, errors[0]
    assert not flashsdpa.is_active()
    assert torch._C._get_sdp_priority_order() == order


def test_a_new_thread_gets_the_hopper_family() -> None:
    """A thread that has not made a CUDA context current (a new Python thread; autograd's device
    thread at a process's first backward: torch's device guard skips cudaSetDevice when the device
    already reads as current) still runs the sm90 kernels: their TMA descriptors are encoded by a
    driver call that needs a current context, whose CUDA_ERROR_INVALID_CONTEXT once sent such calls
    to the portable family without a word (compute-sanitizer showed it; cuda/sm90/tma_sm90.h)."""
    skip_unless_compiled(BF16, D)
    rows = [f for f in _backend.capabilities() if f["family"] == "sm90"]
    backward_dims = rows[0]["head_dims_by_direction"].get("backward", []) if rows else []
    if torch.cuda.get_device_capability() != (9, 0) or D not in backward_dims:
        pytest.skip("needs an sm_90 GPU and the sm90 family built for d128 in both directions")
    libcuda = ctypes.CDLL("libcuda.so.1")
    q, k, v = (torch.randn(2, 4, 512, D, device="cuda", dtype=BF16, requires_grad=True) for _ in range(3))
    dout = torch.randn_like(q)
    seen: dict[str, object] = {}

    def work() -> None:
        ctx = ctypes.c_void_p()
        libcuda.cuCtxGetCurrent(ctypes.byref(ctx))
        seen["context before"] = ctx.value
        out = flashsdpa.attention(q, k, v, causal=True)
        seen["grads"] = torch.autograd.grad(out, (q, k, v), dout)
        torch.cuda.synchronize()

    activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=activities) as prof:
        thread = threading.Thread(target=work)
        thread.start()
        thread.join()
    assert "grads" in seen, "the thread's attention call raised"
    assert seen["context before"] is None, "the premise: a new thread starts without a current context"
    names = {e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA and "flashsdpa" in e.name}
    assert any("fwd_sm90" in n for n in names) and any("bwd_sm90" in n for n in names), sorted(names)
    assert not any("sm80" in n for n in names), sorted(names)
