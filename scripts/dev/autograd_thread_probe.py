"""autograd_thread_probe.py (session 19, prepared; GPU): why a Python kernel at the CUDA key costs
~80 us a call in autograd's device thread but ~17 us on the calling thread (issue 9: the efficient
backward's Python router, docs/performance.md session 19). The same situation without flashsdpa:
a Python kernel at the CUDA key of aten::_softmax_backward_data, which SoftmaxBackward0 (a C++
autograd node) calls on the device thread. Tiny softmax (1, 4, 64, 64) forward + backward, median of
15 interleaved rounds of 200 steps, us per step; the kernel is registered only around its variant:

- native: no Python kernel (the baseline);
- boxed: the Python kernel hands the call to PyTorch's captured kernel (call_boxed: our routers'
  fallback);
- same: the Python kernel returns a tensor made once, outside the step (no tensor made inside it
  gains a PyObject that the device thread must later free under the GIL);
- boxed_switch: boxed with sys.setswitchinterval(1e-5) (a GIL hand-off waiting on the 5 ms
  interval would shrink);
- *_main: the backward op called directly on the main thread, natively and through boxed.

Reading: boxed - native ~ boxed_main - native_main: the thread costs nothing; boxed >> same: new
PyObject tensors freed on the device thread are the cost; boxed_switch << boxed: a GIL hand-off.

    python3 scripts/dev/autograd_thread_probe.py
"""

from __future__ import annotations

import statistics
import sys
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch

OP = "_softmax_backward_data"
NATIVE = torch._C._dispatch_get_computed_kernel_for_dispatch_key(f"aten::{OP}", "CUDA")
warnings.filterwarnings("ignore", message=".*Overriding a previously registered kernel.*")
warnings.filterwarnings("ignore", message="(?s).*Warning only once for all operators.*")


@contextmanager
def python_kernel(kind: str) -> Iterator[None]:
    if kind == "native":
        yield
        return
    lib = torch.library.Library("aten", "IMPL")
    same: list[torch.Tensor] = []

    def boxed(keyset: object, *args: object) -> object:
        return NATIVE.call_boxed(keyset, *args)

    def reuse(keyset: object, *args: object) -> object:
        if not same:
            same.append(NATIVE.call_boxed(keyset, *args))
        return same[0]

    lib.impl(OP, reuse if kind == "same" else boxed, "CUDA", with_keyset=True)
    try:
        yield
    finally:
        lib._destroy()


def main() -> None:
    x = torch.randn(1, 4, 64, 64, device="cuda", requires_grad=True)
    g = torch.randn_like(x)
    y = torch.softmax(x.detach(), -1)
    bwd = getattr(torch.ops.aten, OP).default

    def step() -> None:
        torch.autograd.grad(torch.softmax(x, -1), (x,), g)

    def main_thread() -> None:
        bwd(g, y, -1, x.dtype)

    variants: dict[str, tuple[str, Callable[[], None], float | None]] = {
        "native": ("native", step, None),
        "boxed": ("boxed", step, None),
        "same": ("same", step, None),
        "boxed_switch": ("boxed", step, 1e-5),
        "native_main": ("native", main_thread, None),
        "boxed_main": ("boxed", main_thread, None),
    }
    got: dict[str, list[float]] = {name: [] for name in variants}
    interval = sys.getswitchinterval()
    for _ in range(15):
        for name, (kind, f, switch) in variants.items():
            sys.setswitchinterval(switch or interval)
            with python_kernel(kind):
                for _ in range(20):
                    f()
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                for _ in range(200):
                    f()
                torch.cuda.synchronize()
                got[name].append((time.perf_counter() - t0) / 200 * 1e6)
    sys.setswitchinterval(interval)
    for name, values in got.items():
        base = statistics.median(got["native_main" if name.endswith("_main") else "native"])
        med = statistics.median(values)
        print(f"{name:13s} {med:8.1f} us a step   {med - base:+7.1f} vs its native row")


if __name__ == "__main__":
    main()
