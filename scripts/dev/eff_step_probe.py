"""eff_step_probe.py (session 22): where an unserved float32 attention step's extra microseconds go
inside enable() (issue 9's bar 2). Session 22's first call (small_fp32_profile.py --calls, H200,
(1, 4, 64, 64) fp32, medians of 15 rounds): the aten efficient op's forward +0.9 us and its backward
on the main thread +1.6 us inside enable(), but forward + torch.autograd.grad +16.9 us. So either
the backward costs more on autograd's device thread, or the step is bound by the GPU and the
difference is the GPU's. Rows, default / enable, interleaved rounds, medians:
1. wall us per step without a sync (throughput: max of host and GPU) and with a sync after each
   step (latency: host + GPU in series; minus row 2's kernel time, roughly the host's share);
2. torch.profiler over 50 steps of each: per-step kernel time and the ops' self CPU time by thread
   (main vs autograd's device thread), largest differences first.

    python3 scripts/dev/eff_step_probe.py [--rounds 15]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections import defaultdict
from collections.abc import Callable

import torch
from torch.profiler import ProfilerActivity, profile

from small_fp32_profile import variant  # scripts/dev/ is on sys.path when this runs as a script


def wall_us(step: Callable[[], None], steps: int, sync_each: bool) -> float:
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
        if sync_each:
            torch.cuda.synchronize()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) * 1e6 / steps


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    q, k, v = (torch.randn(1, 4, 64, 64, device="cuda", requires_grad=True) for _ in range(3))
    g = torch.randn_like(q)
    eff = torch.ops.aten._scaled_dot_product_efficient_attention.default

    def step() -> None:
        out = eff(q, k, v, None, True, 0.0, True)[0]
        torch.autograd.grad(out, (q, k, v), g)

    got: dict[tuple[str, str], list[float]] = defaultdict(list)
    for r in range(args.rounds):
        for name in ("default", "enable") if r % 2 == 0 else ("enable", "default"):
            with variant(name):
                for _ in range(20):
                    step()
                got[("throughput", name)].append(wall_us(step, 200, False))
                got[("latency", name)].append(wall_us(step, 200, True))
    print(f"1. wall us per step (median of {args.rounds} rounds):")
    for what in ("throughput", "latency"):
        a, b = statistics.median(got[(what, "default")]), statistics.median(got[(what, "enable")])
        print(f"   {what:12s} default {a:8.1f}  enable {b:8.1f}  diff {b - a:+7.1f}")

    cpu: dict[str, dict[tuple[str, str], float]] = {}
    gpu: dict[str, float] = {}
    steps = 50
    for name in ("default", "enable"):
        with variant(name):
            for _ in range(20):
                step()
            torch.cuda.synchronize()
            with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
                for _ in range(steps):
                    step()
                torch.cuda.synchronize()
        per: dict[tuple[str, str], float] = defaultdict(float)
        kernel_us = 0.0
        events = list(prof.events())
        # The main thread: the one that ran the forward op (the profiler's ids are the system's).
        main_ids = {ev.thread for ev in events if ev.name == "aten::_scaled_dot_product_efficient_attention"}
        for ev in events:
            if ev.device_type == torch.autograd.DeviceType.CUDA:
                kernel_us += ev.device_time / steps
                continue
            thread = "main" if ev.thread in main_ids else "other"
            per[(thread, ev.name)] += ev.self_cpu_time_total / steps
        cpu[name], gpu[name] = per, kernel_us
    print(f"2. GPU kernel us per step: default {gpu['default']:.1f}, enable {gpu['enable']:.1f}")
    keys = set(cpu["default"]) | set(cpu["enable"])
    rows = sorted(keys, key=lambda key: -abs(cpu["enable"].get(key, 0.0) - cpu["default"].get(key, 0.0)))
    print("   self CPU us per step by (thread, op), largest differences (enable - default):")
    for key in rows[:25]:
        a, b = cpu["default"].get(key, 0.0), cpu["enable"].get(key, 0.0)
        print(f"   {key[0]:>6s} {key[1][:70]:70s} {a:8.2f} {b:8.2f} {b - a:+8.2f}")
    for name in ("default", "enable"):
        threads: dict[str, float] = defaultdict(float)
        for (thread, _), us in cpu[name].items():
            threads[thread] += us
        print(f"   {name}: self CPU us per step by thread: "
              + ", ".join(f"{t} {us:.1f}" for t, us in sorted(threads.items())))


if __name__ == "__main__":
    main()
