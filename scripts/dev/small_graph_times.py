"""small_graph_times.py (session 26): GPU time a call of small attention shapes, host cost removed.
Issue 9's attention-only step (B 8, H 16, S 256, D 64, causal) read 60.3 us of kernel time inside
enable() against cuDNN's 42.4 (session 26, torch.profiler sums; our dQ postprocess starts early,
programmatically, and waits on the main kernel, so its 13.3 us there overlaps the backward). This
captures `--reps` calls in one CUDA graph per variant and times replays with CUDA events, so the
number is the GPU's critical path a call (forward alone, and forward + backward), for PyTorch's
flash, cuDNN and default backends and ours. Run it once per family to ask whether the portable
family serves small grids faster than the sm90 one (its forward read 11.8 us against 15.4):

    python3 scripts/dev/small_graph_times.py
    FLASHSDPA_FAMILY=sm80 python3 scripts/dev/small_graph_times.py --only-ours
    FLASHSDPA_SPEED_RULES=0 python3 scripts/dev/small_graph_times.py --only-ours   # no family speed rule
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F

from flashsdpa.bench.timing import graph_us
from small_step_kernels import variant  # this directory: the variants' contexts

SHAPES = [  # (B, H, S, D): 2k-16k tokens, the small models' sizes
    (8, 16, 256, 64),
    (16, 16, 128, 64),
    (4, 16, 512, 64),
    (2, 16, 1024, 64),
    (8, 8, 256, 128),
    (4, 8, 512, 128),
    (2, 8, 1024, 128),
    (8, 16, 1024, 64),
    (8, 16, 2048, 128),
    (64, 32, 256, 64),  # the bench sweep's 16k-token rows at d64 (H 32)
    (32, 32, 512, 64),
    (16, 32, 1024, 64),
]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--only-ours", action="store_true")
    parser.add_argument("--dims", type=int, nargs="+", default=None, help="only these head dims")
    parser.add_argument("--check", action="store_true", help="ours against float32 math first (a variant's sanity)")
    args = parser.parse_args()
    names = ["flashsdpa"] if args.only_ours else ["fa2", "cudnn", "default", "flashsdpa"]
    print(f"GPU us a call (CUDA graph of {args.reps} calls, median of {args.rounds} replays), bf16")
    print(f"{'B':>3} {'H':>3} {'S':>5} {'D':>4} {'causal':>6} {'pass':>7} " + " ".join(f"{n:>9}" for n in names))
    for b, h, s, d in SHAPES:
        if args.dims and d not in args.dims:
            continue
        for causal in (True, False):
            leaves = [torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16).requires_grad_() for _ in range(3)]
            dout = torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16)
            if args.check:
                with torch.no_grad(), variant("flashsdpa"):
                    got = F.scaled_dot_product_attention(*leaves, is_causal=causal).float()
                ref = F.scaled_dot_product_attention(*(t.detach().float() for t in leaves), is_causal=causal)
                err = (got - ref).abs().max().item()
                print(f"  check {b}x{h}x{s}x{d} causal={causal}: max|ours - float32| = {err:.2e}" + ("" if err < 3e-2 else "  FAIL"))
            for label in ("fwd", "fwd+bwd"):
                cells = []
                for name in names:

                    def call() -> None:
                        with variant(name):
                            if label == "fwd":
                                with torch.no_grad():
                                    F.scaled_dot_product_attention(*leaves, is_causal=causal)
                            else:
                                out = F.scaled_dot_product_attention(*leaves, is_causal=causal)
                                torch.autograd.grad(out, leaves, dout)

                    try:
                        cells.append(f"{graph_us([call], args.reps, args.rounds):9.1f}")
                    except Exception as exc:  # one backend refusing a shape must not end the table
                        cells.append(f"{'err':>9}")
                        print(f"  {name}: {type(exc).__name__}: {str(exc)[:120]}")
                print(f"{b:>3} {h:>3} {s:>5} {d:>4} {causal!s:>6} {label:>7} " + " ".join(cells))


if __name__ == "__main__":
    main()
