"""overhead_probe.py: where the shim's per-call host time goes (development tool, GPU only).

Times each layer of an SDPA forward on a tiny shape (the GPU work is negligible, so wall time per
call is host time): PyTorch's own flash kernel through SDPA, SDPA inside flashsdpa.enable() without
grad (the SDPA entry's eager path) and with inputs that require grad (autograd and the router), the aten
op with and without our router, the entry's decision, the router body, the eager path's pieces, the
launch wrapper, the raw _C call and the allocations between. Rounds are interleaved: each round
times every row once, in turn, so clock or load drift hits all rows alike; the median round is
reported with the spread. Prints microseconds per call; the differences locate the overhead.

    PYTHONPATH=python python3 scripts/dev/overhead_probe.py [--rounds 15] [--calls 1000]
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import time
from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.overrides import TorchFunctionMode

import flashsdpa
from flashsdpa import _backend, activation, entry, masks, routers, selection


class _EmptyMode(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        return func(*args, **(kwargs or {}))


@contextlib.contextmanager
def _torch_flash(grad: bool = False) -> Iterator[None]:
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION), torch.set_grad_enabled(grad):
        yield


@contextlib.contextmanager
def _enabled(grad: bool = False) -> Iterator[None]:
    with flashsdpa.enable(), torch.set_grad_enabled(grad):
        yield


@contextlib.contextmanager
def _bare() -> Iterator[None]:
    """No grad, FLASH first in SDPA's priority order, no mode on the stack: what the eager path's
    pieces see when the mode calls them (it is off its own stack then), and what the router sees
    when the dispatcher calls it."""
    saved = activation._prefer_flash()
    try:
        with torch.no_grad():
            yield
    finally:
        activation._restore_order(saved)


@contextlib.contextmanager
def _with_mode(mode: TorchFunctionMode, grad: bool) -> Iterator[None]:
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION), torch.set_grad_enabled(grad), mode:
        yield


Row = tuple[str, Callable[[], Any], Callable[[], contextlib.AbstractContextManager[Any]]]


def _rows() -> list[Row]:
    dt = torch.bfloat16
    q, k, v = (torch.randn(1, 4, 64, 64, device="cuda", dtype=dt) for _ in range(3))
    qg, kg, vg = (t.detach().requires_grad_() for t in (q, k, v))
    out, lse = torch.empty_like(q), torch.empty(1, 4, 64, device="cuda", dtype=torch.float32)
    op = torch.ops.aten._scaled_dot_product_flash_attention.default
    keyset = torch._C.DispatchKeySet(torch._C.DispatchKey.CUDA)
    no_grad = torch.no_grad
    c = _backend._C
    stream = torch.cuda.current_stream().cuda_stream
    raw_spec = ((q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr(), lse.data_ptr(), 0, 0, 0),
                (q.stride(), k.stride(), v.stride(), out.stride(), lse.stride()),
                (1, 4, 4, 64, 64, 64, 64, -1, -1), masks.NO_MASK, 0.125, 1, 0, stream)  # fmt: skip
    return [
        ("F.sdpa, torch flash, no grad", lambda: F.scaled_dot_product_attention(q, k, v), _torch_flash),
        ("F.sdpa in enable(), no grad (eager path)", lambda: F.scaled_dot_product_attention(q, k, v), _enabled),
        ("F.sdpa, torch flash, grad", lambda: F.scaled_dot_product_attention(qg, kg, vg), lambda: _torch_flash(True)),
        ("F.sdpa in enable(), grad (router)", lambda: F.scaled_dot_product_attention(qg, kg, vg), lambda: _enabled(True)),
        ("F.sdpa, torch flash, empty TF mode, no grad", lambda: F.scaled_dot_product_attention(q, k, v),
         lambda: _with_mode(_EmptyMode(), False)),
        ("aten op, torch flash", lambda: op(q, k, v), no_grad),
        ("aten op in enable() (router)", lambda: op(q, k, v), _enabled),
        ("router body direct", lambda: routers._sdpa_flash_forward(keyset, q, k, v), _bare),
        ("  _eager_skip_reason", lambda: entry._eager_skip_reason(q, k, v, 0.0, False), _bare),
        ("  selection.dense_ok", lambda: selection.dense_ok(q, k, v), no_grad),
        ("  _eager_sdpa (allocations + launch)", lambda: entry._eager_sdpa(q, k, v, False, None), no_grad),
        ("flashsdpa.attention (direct API)", lambda: flashsdpa.attention(q, k, v), no_grad),
        ("_backend.launch_fwd", lambda: _backend.launch_fwd(q, k, v, out, lse, 0.125, masks.NO_MASK), no_grad),
        ("_C.fwd raw (prebuilt spec)", lambda: c.fwd(raw_spec), no_grad),
        ("selection.dense_reason", lambda: selection.dense_reason(q, k, v), no_grad),
        ("torch.empty_like(q)", lambda: torch.empty_like(q), no_grad),
        ("q.new_empty(lse), float32", lambda: q.new_empty(1, 4, 64, dtype=torch.float32), no_grad),
        ("torch.empty(lse, device=q.device)", lambda: torch.empty(1, 4, 64, dtype=torch.float32, device=q.device),
         no_grad),
        ("_unused_outputs", lambda: routers._unused_outputs(q), no_grad),
        ("q.data_ptr() x5", lambda: (q.data_ptr(), q.data_ptr(), q.data_ptr(), q.data_ptr(), q.data_ptr()), no_grad),
        ("q.stride() x5", lambda: (q.stride(), q.stride(), q.stride(), q.stride(), q.stride()), no_grad),
        ("current raw stream", lambda: _backend._current_stream(0), no_grad),
        ("torch.is_autocast_enabled('cuda')", lambda: torch.is_autocast_enabled("cuda"), no_grad),
    ]  # fmt: skip


def _time_round(fn: Callable[[], Any], calls: int) -> float:
    for _ in range(50):
        fn()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / calls * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--calls", type=int, default=1000, help="timed calls per row and round")
    args = parser.parse_args()
    rows = _rows()
    samples: dict[str, list[float]] = {name: [] for name, _, _ in rows}
    for _ in range(args.rounds):
        for name, fn, context in rows:
            with context():
                samples[name].append(_time_round(fn, args.calls))
    print(f"{'layer':52s} {'us/call':>8s} {'min':>7s} {'max':>7s}   (median of {args.rounds} interleaved rounds)")
    for name, _, _ in rows:
        s = samples[name]
        print(f"{name:52s} {statistics.median(s):8.2f} {min(s):7.2f} {max(s):7.2f}")


if __name__ == "__main__":
    main()
