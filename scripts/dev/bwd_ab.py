"""bwd_ab.py: the whole backward of one build against cuDNN in one process (H200), for A/B runs
between builds: alternate processes of two builds (scripts/device_env.sh's build_copy makes them)
and compare their `--json` lines, as session 15's delta A/B did (kernel_notes_bwd_sm90.md).

Times the whole backward (preprocess, main kernel, dQ postprocess: torch.autograd.grad of
flashsdpa.attention's output, retain_graph) as "base" and PyTorch's cuDNN backward, in interleaved
rounds (order rotated per round), CUDA events, rotated inputs, median of the reps. Problems: the
standard sweep's d64 / d128 cells (B*S = 16k tokens, H*D = 2048, (B, S, H, D) memory) and the
Llama-style train shapes (GQA 16/4, causal). Prints TFLOP/s per round and the median ratio to
cuDNN, or with `--json` one line per problem: {"problem", "base", "cudnn"} medians.
(Session 14 wrote it as bwd_persistent_ab.py for the persistent grid, which main's history keeps
at a284916.)

    python3 scripts/dev/bwd_ab.py [--rounds 3] [--seqlens 1024 2048 8192] [--dims 128 64] [--causal both|no|yes] [--json]
                                  [--shapes B:HQ:HKV:S:D ...]

`--forward` times the forward instead (flashsdpa.attention against cuDNN's SDPA forward, no grad,
FLOPs 4 B H S^2 D, halved when causal), for the forward's A/Bs (session 18: the FMA-exponential A/B, history 57cf4e7).
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections.abc import Callable
from contextlib import nullcontext

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import flashsdpa
from flashsdpa.bench.timing import sets_for_bytes, time_cuda_ms


def _sets(b: int, hq: int, hkv: int, s: int, d: int, count: int) -> list[tuple[torch.Tensor, ...]]:
    def make(h: int) -> torch.Tensor:
        return torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16).transpose(1, 2).requires_grad_()

    return [(make(hq), make(hkv), make(hkv), torch.randn(b, hq, s, d, device="cuda", dtype=torch.bfloat16))
            for _ in range(count)]  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seqlens", type=int, nargs="+", default=[1024, 2048, 8192])
    parser.add_argument("--reps", type=int, default=10)
    parser.add_argument("--json", action="store_true", help="one JSON line per problem: the variants' medians")
    parser.add_argument("--dims", type=int, nargs="+", default=[128, 64])
    parser.add_argument("--causal", choices=("both", "no", "yes"), default="both")
    parser.add_argument("--forward", action="store_true", help="time the forward (no grad) instead of the backward")
    parser.add_argument("--shapes", nargs="+", default=None, metavar="B:HQ:HKV:S:D",
                        help="these problems instead of the sweep's (each with the --causal masks)")
    args = parser.parse_args()
    masks = {"both": (False, True), "no": (False,), "yes": (True,)}[args.causal]
    problems = [(16384 // s, 2048 // d, 2048 // d, s, d, c) for d in args.dims for s in args.seqlens for c in masks]
    problems += [(b, 16, 4, s, 128, c) for b, s in ((1, 8192), (4, 2048)) for c in masks if 128 in args.dims]
    if args.shapes:
        dims = [tuple(int(x) for x in shape.split(":")) for shape in args.shapes]
        problems = [(b, hq, hkv, s, d, c) for b, hq, hkv, s, d in dims for c in masks]
    for b, hq, hkv, s, d, causal in problems:
        sets = _sets(b, hq, hkv, s, d, sets_for_bytes(4 * b * hq * s * d * 2))
        flops = (1.0 if args.forward else 2.5) * 4.0 * b * hq * s * s * d / (2 if causal else 1)

        def ours_fwd() -> list[Callable[[], object]]:
            return [lambda t=t: flashsdpa.attention(t[0].detach(), t[1].detach(), t[2].detach(), causal=causal)
                    for t in sets]  # fmt: skip

        def cudnn_fwd() -> list[Callable[[], object]]:  # (timed inside sdpa_kernel: below)
            return [lambda t=t: F.scaled_dot_product_attention(t[0].detach(), t[1].detach(), t[2].detach(),
                                                               is_causal=causal, enable_gqa=hq != hkv)
                    for t in sets]  # fmt: skip

        def ours() -> list[Callable[[], object]]:
            def out_of(t: tuple[torch.Tensor, ...]) -> torch.Tensor:
                out = flashsdpa.attention(t[0], t[1], t[2], causal=causal)
                assert isinstance(out, torch.Tensor)
                return out

            outs = [out_of(t) for t in sets]
            return [lambda o=o, t=t: torch.autograd.grad(o, t[:3], t[3], retain_graph=True) for o, t in zip(outs, sets)]

        def cudnn() -> list[Callable[[], object]]:
            with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
                outs = [F.scaled_dot_product_attention(t[0], t[1], t[2], is_causal=causal, enable_gqa=hq != hkv)
                        for t in sets]  # fmt: skip
            return [lambda o=o, t=t: torch.autograd.grad(o, t[:3], t[3], retain_graph=True) for o, t in zip(outs, sets)]

        variants: dict[str, Callable[[], list[Callable[[], object]]]] = (
            {"base": ours_fwd, "cudnn": cudnn_fwd} if args.forward else {"base": ours, "cudnn": cudnn})
        got: dict[str, list[float]] = {name: [] for name in variants}
        names = list(variants)
        for r in range(args.rounds):
            for name in names[r % len(names):] + names[: r % len(names)]:
                calls = variants[name]()
                # The forward's cuDNN calls run inside one sdpa_kernel context, entered once, so its
                # host cost (a few us) is not inside their events.
                ctx = sdpa_kernel([SDPBackend.CUDNN_ATTENTION]) if args.forward and name == "cudnn" else nullcontext()
                with ctx:
                    ms = time_cuda_ms(calls, warmup=3, reps=args.reps)
                got[name].append(flops / ms / 1e9)
                del calls
        label = f"B{b} H{hq}/{hkv} S{s} d{d}{' causal' if causal else ''}"
        if args.json:
            print(json.dumps({"problem": label, **{n: statistics.median(v) for n, v in got.items()}}), flush=True)
        else:
            vs = statistics.median(a / c for a, c in zip(got["base"], got["cudnn"]))
            print(f"{label:32s} | " + " | ".join(f"{n} " + " ".join(f"{x:.1f}" for x in got[n]) for n in names)
                  + f" | base/cudnn {vs:.3f}", flush=True)  # fmt: skip
        sets.clear()  # (the closures above hold the list: emptied, not unbound)
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
