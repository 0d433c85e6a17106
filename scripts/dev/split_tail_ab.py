"""split_tail_ab.py: the sm90 forward's split tail, A/B in one process (H200).

For d128 non-causal forwards of the standard sweep (B*S = 16k tokens, H 16, (B, S, H, D) memory),
and a few other tile counts, times flashsdpa.attention with the split tail ("split") and without it
("plain": the workspace cache answers 0, so the launcher runs the plain round robin), and PyTorch's
cuDNN kernel, in interleaved rounds (the order rotated per round), CUDA events, rotated inputs,
median of 20 after 5 warm-ups. Prints TFLOP/s per round and the medians of the per-round ratios
split / plain and split / cuDNN.

    python3 scripts/dev/split_tail_ab.py [--rounds 3] [--seqlens 512 1024 2048 4096 8192 16384]
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import flashsdpa
from flashsdpa import _backend
from flashsdpa.bench.timing import sets_for_bytes, time_cuda_ms


def _sets(b: int, h: int, s: int, d: int, count: int) -> list[tuple[torch.Tensor, ...]]:
    def make() -> torch.Tensor:
        return torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16).transpose(1, 2)

    return [(make(), make(), make()) for _ in range(count)]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seqlens", type=int, nargs="+", default=[512, 1024, 2048, 4096, 8192, 16384])
    args = parser.parse_args()
    problems = [(16384 // s, 16, s) for s in args.seqlens] + [(1, 20, 8192), (3, 16, 4096)]
    rows: dict[tuple[int, int, int], dict[str, list[float]]] = {}
    for b, h, s in problems:
        d = 128
        sets = _sets(b, h, s, d, sets_for_bytes(4 * b * h * s * d * 2))
        flops = 4.0 * b * h * s * s * d
        key = None

        def split(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> object:
            return flashsdpa.attention(q, k, v)

        flashsdpa.attention(*sets[0])  # fills the workspace cache for the problem
        keys = [kk for kk in _backend._FWD_WS if kk[2][:7] == (b, h, h, s, s, d, d)]
        key = keys[0] if keys else None
        nbytes = _backend._FWD_WS.get(key, 0) if key else 0

        def plain(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> object:
            saved = _backend._FWD_WS.get(key)
            _backend._FWD_WS[key] = 0
            try:
                return flashsdpa.attention(q, k, v)
            finally:
                _backend._FWD_WS[key] = saved

        def cudnn(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> object:
            with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
                return F.scaled_dot_product_attention(q, k, v)

        variants: dict[str, Callable[..., object]] = {"split": split, "plain": plain, "cudnn": cudnn}
        got = rows.setdefault((b, h, s), {name: [] for name in variants})
        names = list(variants)
        for r in range(args.rounds):
            order = names[r % len(names):] + names[: r % len(names)]
            for name in order:
                fn = variants[name]
                ms = time_cuda_ms([lambda t=t, fn=fn: fn(*t) for t in sets], warmup=5, reps=20)
                got[name].append(flops / ms / 1e9)
        ratio = [a / p for a, p in zip(got["split"], got["plain"])]
        vs_cudnn = [a / c for a, c in zip(got["split"], got["cudnn"])]
        tiles = b * h * ((s + 127) // 128)
        print(f"B{b} H{h} S{s} tiles {tiles} ws {nbytes / 2**20:.1f} MiB | "
              + " | ".join(f"{n} " + " ".join(f"{x:.1f}" for x in got[n]) for n in names)
              + f" | split/plain {statistics.median(ratio):.4f} split/cudnn {statistics.median(vs_cudnn):.4f}",
              flush=True)  # fmt: skip
    print("==== split tail A/B (TFLOP/s medians; ratios: median of per-round ratios)")
    for (b, h, s), got in rows.items():
        med = {n: statistics.median(v) for n, v in got.items()}
        ratio = statistics.median(a / p for a, p in zip(got["split"], got["plain"]))
        vs = statistics.median(a / c for a, c in zip(got["split"], got["cudnn"]))
        print(f"B{b:>2} H{h} S{s:>5}: split {med['split']:6.1f} plain {med['plain']:6.1f} cudnn {med['cudnn']:6.1f}"
              f"  split/plain {ratio:.3f}  split/cudnn {vs:.3f}")  # fmt: skip


if __name__ == "__main__":
    main()
