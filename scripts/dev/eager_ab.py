"""eager_ab.py (session 21; run in session 22, whose rows made the road through SDPA the default
where the C++ router serves): whether SDPA calls without grad should still take the SDPA entry's
eager path (entry._EAGER_OVERRIDE) now that the routers are C++.

The eager path runs our kernel from Python (decide, allocate, marshal, _C.fwd), skipping SDPA's
dispatch and the router; it was built when the router body was ~9 us of Python. Session 21's
overhead rows (H200, tiny (1, 4, 64, 64) bf16, medians of 41 rounds) suggest the road through SDPA
to the C++ router is now the cheaper one: the aten flash op through our C++ router took 3.5-4.2 us
less than PyTorch's own on equal work, while F.sdpa on the eager path took 0.4-5.7 us more than
PyTorch's flash through SDPA. Prediction: through SDPA 2-7 us a call less than the eager path at
the tiny and decode shapes, generation after 4k 0.5-1.5% faster per token, prefill within +-0.5%.

Rows (interleaved rounds, medians): wall us per call of 200 calls (host-bound shapes: the host's
cost), PyTorch's default outside enable() / inside enable() on the eager path / inside through
SDPA, for the tiny shape, two decode shapes (one query token, 4k keys, GQA 32/8 and 16/4 with
enable_gqa) and a 2k prefill; then the Llama-style model's ms per token generating after a 4k
prompt (bench.models' LARGE decoder). The served / fallback counts of each variant are printed:
a call SDPA sends elsewhere than flash without the eager path (GQA on a torch whose flash path
refuses enable_gqa) shows there.

    python3 scripts/dev/eager_ab.py [--rounds 15] [--no-model]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch
import torch.nn.functional as F

import flashsdpa
from flashsdpa import entry

VARIANTS = ("default", "eager", "sdpa")


@contextmanager
def variant(name: str) -> Iterator[None]:
    if name == "default":
        yield
        return
    saved = entry._EAGER_OVERRIDE
    entry._EAGER_OVERRIDE = name == "eager"
    try:
        with flashsdpa.enable():
            yield
    finally:
        entry._EAGER_OVERRIDE = saved


def wall_us(fn: Callable[[], object], calls: int) -> float:
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) * 1e6 / calls


def call_rows(rounds: int) -> None:
    dev, bf16 = "cuda", torch.bfloat16

    def qkv(b: int, hq: int, hkv: int, sq: int, sk: int, d: int = 128) -> tuple[torch.Tensor, ...]:
        q = torch.randn(b, hq, sq, d, device=dev, dtype=bf16)
        k, v = (torch.randn(b, hkv, sk, d, device=dev, dtype=bf16) for _ in range(2))
        return q, k, v

    tiny = qkv(1, 4, 4, 64, 64, 64)
    dec32 = qkv(1, 32, 8, 1, 4096)
    dec16 = qkv(1, 16, 4, 1, 4096)
    pre = qkv(1, 16, 16, 2048, 2048)
    cases: dict[str, Callable[[], object]] = {
        "tiny 1x4x64x64": lambda: F.scaled_dot_product_attention(*tiny),
        "decode 32/8 4k": lambda: F.scaled_dot_product_attention(*dec32, enable_gqa=True),
        "decode 16/4 4k": lambda: F.scaled_dot_product_attention(*dec16, enable_gqa=True),
        "prefill 16 2k causal": lambda: F.scaled_dot_product_attention(*pre, is_causal=True),
    }
    got: dict[tuple[str, str], list[float]] = defaultdict(list)
    served: dict[tuple[str, str], tuple[int, int]] = {}
    with torch.no_grad():
        for r in range(rounds):
            for name, fn in cases.items():
                order = VARIANTS if r % 2 == 0 else tuple(reversed(VARIANTS))
                for v in order:
                    with variant(v):
                        flashsdpa.reset_stats()
                        for _ in range(20):
                            fn()
                        got[(name, v)].append(wall_us(fn, 200))
                        s = flashsdpa.stats()
                        served[(name, v)] = (s["served"], s["fallback"])
    print(f"per call, wall us (median of {rounds} rounds; served / fallback calls of the last round)")
    print(f"  {'case':22s} " + " ".join(f"{v:>16s}" for v in VARIANTS) + "   sdpa - eager")
    for name in cases:
        med = {v: statistics.median(got[(name, v)]) for v in VARIANTS}
        cells = " ".join(f"{med[v]:8.1f} {served[(name, v)][0]:3d}/{served[(name, v)][1]:<3d}" for v in VARIANTS)
        print(f"  {name:22s} {cells}   {med['sdpa'] - med['eager']:+7.1f}")


def generation_rows(rounds: int) -> None:
    from flashsdpa.bench import problems
    from flashsdpa.bench.llama import LARGE, build
    from flashsdpa.bench.models import _Runner

    torch.manual_seed(0)
    dec = build(LARGE, torch.bfloat16, problems.DEVICE, "auto")
    ids = torch.randint(0, LARGE.vocab, (1, 4096), device=problems.DEVICE)
    got: dict[str, list[float]] = defaultdict(list)
    with torch.no_grad():
        for v in VARIANTS:  # warm: every cache length once per variant
            with variant(v):
                _Runner._generate(dec, ids, 32)
        for r in range(rounds):
            for v in VARIANTS if r % 2 == 0 else tuple(reversed(VARIANTS)):
                with variant(v):
                    got[v].append(_Runner._generate(dec, ids, 32))
    med = {v: statistics.median(got[v]) for v in VARIANTS}
    print(f"generate after 4k ({dec.impl}), ms per token, median of {rounds} rounds: "
          + ", ".join(f"{v} {med[v]:.3f}" for v in VARIANTS)
          + f"; sdpa / eager {med['sdpa'] / med['eager']:.4f}, sdpa / default {med['sdpa'] / med['default']:.4f}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--no-model", action="store_true")
    args = parser.parse_args()
    call_rows(args.rounds)
    if not args.no_model:
        generation_rows(max(3, args.rounds // 3))


if __name__ == "__main__":
    main()
