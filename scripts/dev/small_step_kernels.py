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

--graph (session 37) times the same step captured in a CUDA graph (flashsdpa.bench.timing.graph_us:
50 steps a graph, median of 5 replays, variants interleaved over rounds): the GPU's own time a step. The profiler's
per-kernel sum above overstates ours, because our dQ postprocess is launched programmatically and
waits on the GPU for the main backward's blocks (its "duration" includes that overlap).

The second form asks whether the portable family (several CTAs an SM, no TMA descriptors, no
tile-counter memset) serves such small grids faster than the sm90 one (one CTA an SM at d64, two
waves of short CTAs here): if so, the capability table's selection could take grid size into account.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
from collections import defaultdict
from collections.abc import Callable, Iterator

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.profiler import ProfilerActivity, profile

import flashsdpa
from flashsdpa.bench.timing import graph_us


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


def make_step(args: argparse.Namespace) -> Callable[[], None]:
    """One step: F.sdpa forward + torch.autograd.grad of q, k, v (leaves requiring grad, shape
    (B, H, S, D)); --bshd: views of (B, S, H, D) memory, the layout a Hugging Face model hands SDPA
    (FA2 then needs no copies of its own)."""
    b, h, s, d = args.shape
    causal = not args.no_causal

    def make() -> torch.Tensor:
        if args.bshd:
            return torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16).transpose(1, 2)
        return torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16)

    q, k, v = (make().requires_grad_() for _ in range(3))
    dout = make()

    def step() -> None:
        out = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        torch.autograd.grad(out, (q, k, v), dout)

    return step


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--shape", type=int, nargs=4, default=[8, 16, 256, 64])
    parser.add_argument("--no-causal", action="store_true")
    parser.add_argument("--only-ours", action="store_true", help="only the flashsdpa variant")
    parser.add_argument("--graph", action="store_true", help="time graph replays instead of profiling")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--bshd", action="store_true", help="(B, S, H, D) memory, as a Hugging Face model's")
    args = parser.parse_args()
    if args.graph:
        graph_times(args)
        return
    causal = not args.no_causal
    step = make_step(args)
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
    step = make_step(args)
    times: dict[str, list[float]] = defaultdict(list)
    for _ in range(args.rounds):
        for name in names:
            with variant(name):
                times[name].append(graph_us([step], per_graph=50, replays=5))
    layout = "BSHD memory" if args.bshd else "BHSD memory"
    print(f"shape {tuple(args.shape)} bf16 causal={causal}, {layout}: GPU us a step, graph replays, per round")
    for name in names:
        row = " ".join(f"{t:7.2f}" for t in times[name])
        print(f"  {name:10s} {row}   median {statistics.median(times[name]):7.2f}")


if __name__ == "__main__":
    main()
