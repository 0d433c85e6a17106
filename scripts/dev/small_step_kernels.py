"""small_step_kernels.py (session 25, prepared without device time): where issue 9's attention-only
small step spends its GPU time, kernel by kernel. B 8, H 16, S 256, D 64, bf16, causal, F.sdpa
forward + torch.autograd.grad: shim_cost.py (session 25, H200) read 60.6 us of kernel time a step
inside enable() against FA2's 48.5 and cuDNN's 42.5 (torch.profiler totals), and the wall time a
step 295 against FA2's 281 (the bar: <= FA2). This prints, per variant, every GPU activity of one
step (kernels, memsets, copies) with its time, averaged over 50 profiled steps, so the 12 us can be
assigned: our forward's memset of the dynamic schedule's tile counter, the preprocess (delta),
the main backward, the dQ postprocess, against FA2's dot_do_o / main / convert_dq.

    python3 scripts/dev/small_step_kernels.py [--steps 50] [--shape 8 16 256 64] [--no-causal]
    FLASHSDPA_FAMILY=sm80 python3 scripts/dev/small_step_kernels.py --only-ours   # the portable family

    python3 scripts/dev/small_step_kernels.py --graph [--rounds 3]   # GPU time a step, no host time

--graph (session 37) times the same step captured in a CUDA graph (CUDA events around 100 replays,
median of 5 repeats, variants interleaved over rounds): the GPU's own time a step. The profiler's
per-kernel sum above overstates ours, because our dQ postprocess is launched programmatically and
waits on the GPU for the main backward's blocks (its "duration" includes that overlap).

The second form asks whether the portable family (several CTAs an SM, no TMA descriptors, no
tile-counter memset) serves such small grids faster than the sm90 one (one CTA an SM at d64, two
waves of short CTAs here): if so, the capability table's selection could take grid size into account.
"""

from __future__ import annotations

import argparse
import contextlib
from collections import defaultdict
from collections.abc import Iterator

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.profiler import ProfilerActivity, profile

import flashsdpa


@contextlib.contextmanager
def variant(name: str) -> Iterator[None]:
    if name == "flashsdpa":
        with flashsdpa.enable():
            yield
    elif name == "default":
        yield
    else:
        with sdpa_kernel([SDPBackend.FLASH_ATTENTION if name == "fa2" else SDPBackend.CUDNN_ATTENTION]):
            yield


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--shape", type=int, nargs=4, default=[8, 16, 256, 64])
    parser.add_argument("--no-causal", action="store_true")
    parser.add_argument("--only-ours", action="store_true", help="only the flashsdpa variant")
    parser.add_argument("--graph", action="store_true", help="time graph replays instead of profiling")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    if args.graph:
        graph_times(args)
        return
    causal = not args.no_causal
    leaves = [torch.randn(*args.shape, device="cuda", dtype=torch.bfloat16).requires_grad_() for _ in range(3)]
    dout = torch.randn(*args.shape, device="cuda", dtype=torch.bfloat16)

    def step() -> None:
        out = F.scaled_dot_product_attention(*leaves, is_causal=causal)
        torch.autograd.grad(out, leaves, dout)

    print(f"shape {tuple(args.shape)} bf16 causal={causal}, GPU us per step over {args.steps} profiled steps")
    for name in ("flashsdpa",) if args.only_ours else ("fa2", "cudnn", "default", "flashsdpa"):
        with variant(name):
            for _ in range(10):
                step()
            torch.cuda.synchronize()
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                for _ in range(args.steps):
                    step()
                torch.cuda.synchronize()
        per: dict[str, list[float]] = defaultdict(lambda: [0.0, 0])
        for ev in prof.events():
            if ev.device_type == torch.autograd.DeviceType.CUDA:
                per[ev.name][0] += ev.device_time / args.steps
                per[ev.name][1] += 1
        total = sum(us for us, _ in per.values())
        print(f"\n{name}: {total:.1f} us a step")
        for kname, (us, count) in sorted(per.items(), key=lambda kv: -kv[1][0]):
            print(f"  {us:7.2f} us  x{count / args.steps:.0f}  {kname[:110]}")


def graph_times(args: argparse.Namespace) -> None:
    causal = not args.no_causal
    names = ("flashsdpa",) if args.only_ours else ("fa2", "cudnn", "default", "flashsdpa")
    leaves = [torch.randn(*args.shape, device="cuda", dtype=torch.bfloat16).requires_grad_() for _ in range(3)]
    dout = torch.randn(*args.shape, device="cuda", dtype=torch.bfloat16)
    graphs: dict[str, torch.cuda.CUDAGraph] = {}
    for name in names:
        with variant(name):
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                for _ in range(3):  # warm-up off the capture (allocator, first-call setup)
                    out = F.scaled_dot_product_attention(*leaves, is_causal=causal)
                    torch.autograd.grad(out, leaves, dout)
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                out = F.scaled_dot_product_attention(*leaves, is_causal=causal)
                torch.autograd.grad(out, leaves, dout)
            graphs[name] = graph
    times: dict[str, list[float]] = defaultdict(list)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for _ in range(args.rounds):
        for name in names:
            reps = []
            for _ in range(5):
                graphs[name].replay()
                start.record()
                for _ in range(100):
                    graphs[name].replay()
                end.record()
                end.synchronize()
                reps.append(start.elapsed_time(end) * 1e3 / 100)
            times[name].append(sorted(reps)[2])
    print(f"shape {tuple(args.shape)} bf16 causal={causal}: GPU us a step, graph replays, per round")
    for name in names:
        row = " ".join(f"{t:7.2f}" for t in times[name])
        med = sorted(times[name])[len(times[name]) // 2]
        print(f"  {name:10s} {row}   median {med:7.2f}")


if __name__ == "__main__":
    main()
