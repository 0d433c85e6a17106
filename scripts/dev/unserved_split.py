"""unserved_split.py (session 25): where the unserved float32 step's extra microseconds go inside
enable() (the bench's overhead row read +5.1 us in session 24, +8.1 in session 23). A training
step of F.sdpa on (1, 4, 64, 64) float32 inputs that require grad (PyTorch runs its efficient
kernel on both sides), wall us per step over 200 steps, interleaved rounds, medians:

  default      PyTorch alone (F.scaled_dot_product_attention is PyTorch's C function)
  thin         PyTorch alone behind the thinnest Python wrapper (def f(*a, **k): return sdpa(*a, **k)):
               the floor of any Python entry
  enable-raw   inside enable(), PyTorch's C function called directly: the C++ routers of the
               efficient ops (and SDPA's priority order) without the entry's Python
  enable       inside enable(), F.scaled_dot_product_attention: everything
  enable-entry inside enable(), the entry function called by name (no lambda, no F lookup)

so enable - enable-raw is the entry's Python, enable-raw - default the routers' (and the order's).

    python3 scripts/dev/unserved_split.py [--rounds 41]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F

import flashsdpa
from flashsdpa import entry

_SDPA = torch._C._nn.scaled_dot_product_attention


def thin(*args: object, **kwargs: object) -> torch.Tensor:
    return _SDPA(*args, **kwargs)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=41)
    parser.add_argument("--steps", type=int, default=200)
    args = parser.parse_args()
    torch.manual_seed(0)
    leaves = [torch.randn(1, 4, 64, 64, device="cuda").requires_grad_() for _ in range(3)]
    dout = torch.randn(1, 4, 64, 64, device="cuda")

    def stepper(fn: Callable[..., torch.Tensor]) -> Callable[[], None]:
        def step() -> None:
            torch.autograd.grad(fn(*leaves), leaves, dout)
        return step

    variants: dict[str, tuple[bool, Callable[[], None]]] = {
        "default": (False, stepper(lambda *t: F.scaled_dot_product_attention(*t))),
        "thin": (False, stepper(thin)),
        "enable-raw": (True, stepper(_SDPA)),
        "enable": (True, stepper(lambda *t: F.scaled_dot_product_attention(*t))),
        "enable-entry": (True, stepper(entry.scaled_dot_product_attention)),
    }
    got: dict[str, list[float]] = {name: [] for name in variants}
    for r in range(args.rounds):
        order = list(variants) if r % 2 == 0 else list(reversed(variants))
        for name in order:
            active, step = variants[name]
            ctx = flashsdpa.enable() if active else torch.autograd.set_grad_enabled(True)
            with ctx:
                if active:
                    assert F.scaled_dot_product_attention is entry.scaled_dot_product_attention
                for _ in range(20):
                    step()
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                for _ in range(args.steps):
                    step()
                torch.cuda.synchronize()
                got[name].append((time.perf_counter() - t0) * 1e6 / args.steps)
    med = {name: statistics.median(v) for name, v in got.items()}
    print(f"unserved float32 step, wall us per step, medians of {args.rounds} interleaved rounds:")
    for name, v in med.items():
        lo, hi = min(got[name]), max(got[name])
        print(f"  {name:11s} {v:8.2f}  (rounds {lo:.1f}-{hi:.1f}; vs default {v - med['default']:+.2f})")
    print(f"  entry Python (enable - enable-raw) {med['enable'] - med['enable-raw']:+.2f} us; "
          f"routers and order (enable-raw - default) {med['enable-raw'] - med['default']:+.2f} us; "
          f"thinnest wrapper {med['thin'] - med['default']:+.2f} us")
    print(f"  stats: {flashsdpa.stats().get('fallback_reasons', {})}")


if __name__ == "__main__":
    main()
