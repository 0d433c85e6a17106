"""power_probe.py: sustained-load throughput, SM clock and board power of our sm90 kernels against
cuDNN (H200), for issue 12's question of why the bench's in-sweep forward 8k cell reads ours 5-10%
below the same cell timed alone (session 20: power reaches 578-595 W late in the quick sweep and the
SM clock dips 8-10%).

For each (kernel, problem), the call runs back to back for ``--seconds`` (default 4) after a 1 s
warm-up while `nvidia-smi` samples power and the SM clock every 50 ms; it prints TFLOP/s over the
first and the last second, the median clock and power over the last two seconds, and TFLOP per kJ
(work per energy: at a capped board power this decides sustained speed). Kernels alternate
(ours, cuDNN, ours, cuDNN, ...) for ``--rounds`` rounds, with 3 s of idle between runs so each
starts from the same temperature.

    python3 scripts/dev/power_probe.py [--seconds 4] [--rounds 2] [--problems fwd8k bwd8k fwd8kc]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import threading
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import flashsdpa

PROBLEMS = {  # name: (B, H, S, D, causal, backward)
    "fwd8k": (2, 16, 8192, 128, False, False),
    "fwd8kc": (2, 16, 8192, 128, True, False),
    "bwd8k": (2, 16, 8192, 128, False, True),
    "fwd2k": (8, 16, 2048, 128, False, False),
}


class Sampler:
    """nvidia-smi power.draw and clocks.sm every 50 ms, with the host time of each sample."""

    def __init__(self) -> None:
        self.samples: list[tuple[float, float, float]] = []
        self.proc = subprocess.Popen(
            ["nvidia-smi", "--query-gpu=power.draw,clocks.sm", "--format=csv,noheader,nounits", "-lms", "50"],
            stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            try:
                power, clock = (float(x) for x in line.split(","))
            except ValueError:
                continue
            self.samples.append((time.perf_counter(), power, clock))

    def window(self, start: float, end: float) -> list[tuple[float, float, float]]:
        return [s for s in self.samples if start <= s[0] <= end]

    def stop(self) -> None:
        self.proc.terminate()


def _call(kind: str, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, do: torch.Tensor, causal: bool,
          backward: bool) -> Callable[[], object]:  # fmt: skip
    if kind == "ours":
        def fwd() -> torch.Tensor:
            return flashsdpa.attention(q, k, v, causal=causal)
    else:
        def fwd() -> torch.Tensor:
            with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
                return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    if not backward:
        def run() -> object:
            with torch.no_grad():
                return fwd()
        return run
    qg, kg, vg = (t.detach().requires_grad_() for t in (q, k, v))
    if kind == "ours":
        out = flashsdpa.attention(qg, kg, vg, causal=causal)
    else:
        with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
            out = F.scaled_dot_product_attention(qg, kg, vg, is_causal=causal)

    def run_bwd() -> object:
        return torch.autograd.grad(out, (qg, kg, vg), do, retain_graph=True)
    return run_bwd


def sustained(sampler: Sampler, run: Callable[[], object], flops: float, seconds: float) -> dict[str, float]:
    """Back-to-back calls for 1 s of warm-up then ``seconds``; TFLOP/s per second of the run (by
    CUDA events every ~50 calls), power and clock medians of the last two seconds."""
    end = time.perf_counter() + 1.0
    while time.perf_counter() < end:
        for _ in range(20):
            run()
        torch.cuda.synchronize()
    marks: list[tuple[float, torch.cuda.Event, int]] = []
    calls = 0
    start_host = time.perf_counter()
    first = torch.cuda.Event(enable_timing=True)
    first.record()
    while time.perf_counter() - start_host < seconds:
        for _ in range(20):
            run()
        calls += 20
        ev = torch.cuda.Event(enable_timing=True)
        ev.record()
        marks.append((time.perf_counter(), ev, calls))
        if len(marks) > 4:  # keep the host at most a few batches ahead
            marks[-4][1].synchronize()
    torch.cuda.synchronize()
    end_host = time.perf_counter()
    total_ms = first.elapsed_time(marks[-1][1])
    # TFLOP/s of the first and last ~second of GPU time
    def rate(a: int, b: int) -> float:
        ms = marks[a][1].elapsed_time(marks[b][1])
        return (marks[b][2] - marks[a][2]) * flops / (ms * 1e-3) / 1e12
    n = len(marks)
    per_s = max(1, int(n * 1000.0 / total_ms))
    win = sampler.window(end_host - 2.0, end_host)
    power = statistics.median(s[1] for s in win) if win else float("nan")
    clock = statistics.median(s[2] for s in win) if win else float("nan")
    avg = calls * flops / (total_ms * 1e-3) / 1e12
    return {
        "tflops": avg, "first_s": rate(0, min(per_s, n - 1)), "last_s": rate(max(0, n - 1 - per_s), n - 1),
        "power_w": power, "clock_mhz": clock, "tflop_per_kj": avg / power * 1e3 if power == power else float("nan"),
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--problems", nargs="+", default=["fwd8k", "fwd8kc", "bwd8k"], choices=sorted(PROBLEMS))
    args = parser.parse_args()
    sampler = Sampler()
    time.sleep(0.5)
    print(f"{'problem':8} {'kernel':6} {'round':>5} {'TFLOP/s':>8} {'first s':>8} {'last s':>8} {'W':>6} {'MHz':>6} "
          f"{'TFLOP/kJ':>9}")  # fmt: skip
    results: dict[tuple[str, str], list[dict[str, float]]] = {}
    for name in args.problems:
        b, h, s, d, causal, backward = PROBLEMS[name]
        q, k, v, do = (torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16).transpose(1, 2) for _ in range(4))
        flops = (2.5 if backward else 1.0) * 4.0 * b * h * s * s * d / (2 if causal else 1)
        for r in range(args.rounds):
            for kind in (("ours", "cudnn") if r % 2 == 0 else ("cudnn", "ours")):
                time.sleep(3.0)
                res = sustained(sampler, _call(kind, q, k, v, do, causal, backward), flops, args.seconds)
                results.setdefault((name, kind), []).append(res)
                print(f"{name:8} {kind:6} {r:>5} {res['tflops']:8.1f} {res['first_s']:8.1f} {res['last_s']:8.1f} "
                      f"{res['power_w']:6.0f} {res['clock_mhz']:6.0f} {res['tflop_per_kj']:9.1f}", flush=True)  # fmt: skip
    sampler.stop()
    print("\nmedians over rounds: ours / cuDNN")
    for name in args.problems:
        o, c = results[(name, "ours")], results[(name, "cudnn")]
        def med(rows: list[dict[str, float]], key: str) -> float:
            return statistics.median(row[key] for row in rows)
        print(f"  {name}: TFLOP/s {med(o, 'tflops'):.1f} / {med(c, 'tflops'):.1f} ({med(o, 'tflops') / med(c, 'tflops'):.3f}x), "
              f"last s {med(o, 'last_s'):.1f} / {med(c, 'last_s'):.1f}, W {med(o, 'power_w'):.0f} / {med(c, 'power_w'):.0f}, "
              f"MHz {med(o, 'clock_mhz'):.0f} / {med(c, 'clock_mhz'):.0f}, TFLOP/kJ {med(o, 'tflop_per_kj'):.1f} / "
              f"{med(c, 'tflop_per_kj'):.1f}")  # fmt: skip


if __name__ == "__main__":
    main()
