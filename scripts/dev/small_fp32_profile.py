"""small_fp32_profile.py: where the small fp32 model's train step spends its time inside and outside
flashsdpa.enable() (issue 9's bar: within 2%; the bench read 1.08x in session 17, 8-12% in two of
three interleaved rounds, while the shim's Python counted on a CPU is ~30 us of a 17-21 ms step).
GPU only (CUDA).

Three parts, each interleaving the two variants (outside / inside enable()) so host drift lands
on both:
1. wall time per step, `--pairs` back-to-back pairs of `--steps` steps, the median of the per-pair
   ratios (the bench's measure, finer grained);
2. torch.profiler over `--steps` steps of each: the ops whose self CPU time differs most, and the
   CUDA kernels each variant launched (name, count, total us), with the ones only one side ran;
3. the SDPA calls' own cost: the fused op each variant's SDPA dispatched to and its CPU time.

`--calls` runs two other parts instead (session 19): 4. one tiny attention call's host cost outside /
inside enable() (F.sdpa with grad + backward, without grad, the aten efficient op alone, its
backward on the main thread, PyTorch's kernel through call_boxed); 5. cProfile of the model's steps
inside enable() (the main thread only: autograd's device thread is not seen).

    python3 scripts/dev/small_fp32_profile.py [--steps 20] [--pairs 15] [--dtype fp32|bf16] [--calls]

(`--device cpu` runs the same on the CPU, as a smoke test of the script itself.)
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import time
from collections import defaultdict
from collections.abc import Callable, Iterator

import torch
from torch.profiler import ProfilerActivity, profile

import flashsdpa
from flashsdpa.bench.llama import SMALL, build


@contextlib.contextmanager
def variant(name: str) -> Iterator[None]:
    if name == "enable":
        with flashsdpa.enable():
            yield
    else:
        yield


def sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def wall_ms(step: Callable[[], None], steps: int) -> float:
    sync()
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    sync()
    return (time.perf_counter() - t0) * 1e3 / steps


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--pairs", type=int, default=15)
    parser.add_argument("--dtype", choices=("fp32", "bf16"), default="fp32")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--calls", action="store_true", help="only parts 4 and 5 (per-call timing, cProfile)")
    args = parser.parse_args()
    dtype = torch.float32 if args.dtype == "fp32" else torch.bfloat16
    torch.manual_seed(0)
    dec = build(SMALL, dtype, args.device)
    opt = torch.optim.AdamW(dec.model.parameters(), lr=1e-6, fused=True)
    ids = torch.randint(0, SMALL.vocab, (8, 128), device=args.device)

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        dec.loss(ids).backward()
        opt.step()

    names = ("default", "enable")
    if args.calls:
        per_call(dtype, args.device)
        cprofile_steps(step, args.steps)
        return
    for name in names:  # warm both roads (AdamW's state, cuDNN / efficient plans, our routers)
        with variant(name):
            for _ in range(3):
                step()

    # 1. wall time, pairs alternating in order
    per: dict[str, list[float]] = defaultdict(list)
    ratios: list[float] = []
    for p in range(args.pairs):
        got: dict[str, float] = {}
        for name in names if p % 2 == 0 else names[::-1]:
            with variant(name):
                got[name] = wall_ms(step, args.steps)
            per[name].append(got[name])
        ratios.append(got["enable"] / got["default"])
    print(f"1. wall ms/step over {args.pairs} pairs of {args.steps} steps: default median "
          f"{statistics.median(per['default']):.3f}, enable() {statistics.median(per['enable']):.3f}; "
          f"enable/default per pair: median {statistics.median(ratios):.3f}, range "
          f"{min(ratios):.3f}-{max(ratios):.3f}")

    # 2. the profiler's view
    cpu: dict[str, dict[str, float]] = {}
    kernels: dict[str, dict[str, tuple[int, float]]] = {}
    for name in names:
        with variant(name):
            activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if args.device != "cpu" else [])
            with profile(activities=activities) as prof:
                for _ in range(args.steps):
                    step()
                sync()
        cpu[name] = {}
        kernels[name] = {}
        for ev in prof.key_averages():
            if ev.self_cpu_time_total > 0:
                cpu[name][ev.key] = ev.self_cpu_time_total / args.steps
            device_us = getattr(ev, "self_device_time_total", getattr(ev, "self_cuda_time_total", 0))
            if device_us > 0 and ev.self_cpu_time_total == 0:
                kernels[name][ev.key] = (ev.count // args.steps, device_us / args.steps)
    keys = set(cpu["default"]) | set(cpu["enable"])
    diffs = sorted(keys, key=lambda k: -abs(cpu["enable"].get(k, 0.0) - cpu["default"].get(k, 0.0)))
    print("2. self CPU us per step, largest differences (enable - default):")
    for k in diffs[:25]:
        a, b = cpu["default"].get(k, 0.0), cpu["enable"].get(k, 0.0)
        print(f"   {b - a:+9.1f}  default {a:9.1f}  enable {b:9.1f}  {k[:90]}")
    print(f"   total self CPU: default {sum(cpu['default'].values()):.0f} us, enable {sum(cpu['enable'].values()):.0f} us")
    print("   CUDA kernels per step (count, us): only on one side, or differing by > 5%:")
    for k in sorted(set(kernels["default"]) | set(kernels["enable"])):
        a, b = kernels["default"].get(k, (0, 0.0)), kernels["enable"].get(k, (0, 0.0))
        if a[0] != b[0] or abs(a[1] - b[1]) > 0.05 * max(a[1], b[1], 1e-9):
            print(f"   default {a[0]:4d} {a[1]:9.1f}  enable {b[0]:4d} {b[1]:9.1f}  {k[:90]}")
    print(f"   total kernel us per step: default {sum(v[1] for v in kernels['default'].values()):.0f}, "
          f"enable {sum(v[1] for v in kernels['enable'].values()):.0f}")

    # 3. the SDPA ops each road ran
    print("3. SDPA-related ops (self CPU us per step):")
    for name in names:
        rows = {k: v for k, v in cpu[name].items() if "attention" in k or "sdpa" in k.lower() or "flashsdpa" in k}
        print(f"   {name}: " + ", ".join(f"{k} {v:.1f}" for k, v in sorted(rows.items(), key=lambda kv: -kv[1])[:8]))


def per_call(dtype: torch.dtype, device: str) -> None:
    """4. one attention call's host cost, CPU-bound shape (1, 4, 64, 64) in this dtype: F.sdpa with
    grad + backward, F.sdpa without grad, and the aten efficient op directly (the router alone,
    without the SDPA entry), each outside / inside enable(), interleaved rounds, median us."""
    q, k, v = (torch.randn(1, 4, 64, 64, device=device, dtype=dtype, requires_grad=True) for _ in range(3))
    g = torch.randn_like(q)
    eff = torch.ops.aten._scaled_dot_product_efficient_attention.default
    F = torch.nn.functional

    def step() -> None:
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        torch.autograd.grad(out, (q, k, v), g)

    def fwd() -> None:
        with torch.no_grad():
            F.scaled_dot_product_attention(q, k, v, is_causal=True)

    def grad_fwd() -> None:  # the forward with grad alone (its graph dropped): step - this = the backward
        F.scaled_dot_product_attention(q, k, v, is_causal=True)

    def aten() -> None:
        with torch.no_grad():
            eff(q, k, v, None, True, 0.0, True)

    def aten_bwd() -> None:
        out = eff(q, k, v, None, True, 0.0, True)[0]
        torch.autograd.grad(out, (q, k, v), g)

    calls = {"sdpa step": step, "sdpa grad fwd": grad_fwd, "sdpa no-grad": fwd}
    if device != "cpu":  # the efficient op has no CPU kernel
        calls.update({"aten eff fwd": aten, "aten eff step": aten_bwd})
        # The backward op on the main thread (not autograd's device thread), and PyTorch's kernel
        # through call_boxed alone (what the router's fallback runs), to split the backward's cost.
        with torch.no_grad():
            o, lse, seed, off = eff(q, k, v, None, True, 0.0, True)
        eff_bwd = torch.ops.aten._scaled_dot_product_efficient_attention_backward.default
        args = (g, q, k, v, None, o, lse, seed, off, 0.0, [True, True, True, False], True)
        from flashsdpa import routers

        def bwd_main() -> None:
            eff_bwd(*args)

        def boxed() -> None:
            native = routers._NATIVE.get("_scaled_dot_product_efficient_attention_backward")
            if native is not None:
                native.call_boxed(torch._C.DispatchKeySet("CUDA"), *args)
            else:
                eff_bwd(*args)

        calls.update({"aten eff bwd main": bwd_main, "call_boxed bwd": boxed})
    got: dict[str, list[float]] = defaultdict(list)
    for r in range(15):
        for what, f in calls.items():
            for name in ("default", "enable") if r % 2 == 0 else ("enable", "default"):
                with variant(name):
                    for _ in range(20):
                        f()
                    got[(what, name)].append(wall_ms(f, 200) * 1e3)
    print("4. per call us (median of 15 rounds):")
    for what in calls:
        a, b = statistics.median(got[(what, "default")]), statistics.median(got[(what, "enable")])
        print(f"   {what:16s} default {a:8.1f}  enable {b:8.1f}  diff {b - a:+7.1f}")


def cprofile_steps(step: Callable[[], None], steps: int) -> None:
    """5. cProfile of the model's steps inside enable(): the Python functions by own time."""
    import cProfile
    import pstats

    with variant("enable"):
        for _ in range(3):
            step()
        sync()
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(steps):
            step()
        sync()
        prof.disable()
    print(f"5. cProfile inside enable(), {steps} steps, by own time:")
    stats = pstats.Stats(prof)
    stats.sort_stats("tottime").print_stats(25)


if __name__ == "__main__":
    main()
