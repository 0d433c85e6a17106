"""fwd_workspace_ab.py: the sm90 forward's workspace, A/B in one process (H200).

The forward kernel's workspace (params.h) carries the dynamic schedule's tile counter (masked
calls) and the split tail (unmasked d128). For each problem (B*S = 16k tokens, H*D = 2048,
(B, S, H, D) memory, bf16) this times, in interleaved rounds (the order rotated per round), CUDA
events, rotated inputs, median of 20 after 5 warm-ups, inputs requiring grad (the training forward):
  ws      flashsdpa.attention with its workspace (Python's launcher);
  no-ws   the same with the workspace withheld (the workspace cache answers 0: the static schedule,
          what SDPA's C++ routers ran before session 13);
  sdpa    F.scaled_dot_product_attention inside flashsdpa.enable() (the C++ routers);
  cudnn   PyTorch's cuDNN kernel.
Prints TFLOP/s per round and the medians of the per-round ratios.

    python3 scripts/dev/fwd_workspace_ab.py [--rounds 3] [--causal-only]
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import flashsdpa
from flashsdpa import _backend
from flashsdpa.bench.timing import sets_for_bytes, time_cuda_ms

# (head_dim, seqlen, causal)
PROBLEMS = [(128, 512, True), (128, 1024, True), (128, 2048, True), (64, 2048, True), (256, 2048, True),
            (128, 4096, True), (128, 4096, False), (128, 8192, False)]  # fmt: skip


def _sets(b: int, h: int, s: int, d: int, count: int) -> list[tuple[torch.Tensor, ...]]:
    def make() -> torch.Tensor:
        return torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16).transpose(1, 2).requires_grad_()

    return [(make(), make(), make()) for _ in range(count)]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--causal-only", action="store_true")
    args = parser.parse_args()
    summary = []
    for d, s, causal in [p for p in PROBLEMS if p[2] or not args.causal_only]:
        h = 2048 // d
        b = 16384 // s
        sets = _sets(b, h, s, d, sets_for_bytes(4 * b * h * s * d * 2))
        flops = 4.0 * b * h * s * s * d / (2 if causal else 1)

        def ws(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> object:
            return flashsdpa.attention(q, k, v, causal=causal)

        def no_ws(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> object:
            saved = dict(_backend._FWD_WS)
            _backend._FWD_WS.update({key: 0 for key in saved})
            try:
                return flashsdpa.attention(q, k, v, causal=causal)
            finally:
                _backend._FWD_WS.update(saved)

        def sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> object:
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal)  # timed inside enable(): below

        def cudnn(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> object:
            with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
                return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

        ws(*sets[0])  # the workspace cache knows the problem from here on
        variants: dict[str, Callable[..., object]] = {"ws": ws, "no-ws": no_ws, "sdpa": sdpa, "cudnn": cudnn}
        got: dict[str, list[float]] = {name: [] for name in variants}
        names = list(variants)
        for r in range(args.rounds):
            for name in names[r % len(names):] + names[: r % len(names)]:
                fn = variants[name]
                # enable() around the whole timing: entering it per call would time the activation.
                with flashsdpa.enable() if name == "sdpa" else contextlib.nullcontext():
                    ms = time_cuda_ms([lambda t=t, fn=fn: fn(*t) for t in sets], warmup=5, reps=20)
                got[name].append(flops / ms / 1e9)
        nbytes = max(_backend._FWD_WS.values(), default=0)
        ratio = {n: statistics.median(a / c for a, c in zip(got[n], got["no-ws"])) for n in ("ws", "sdpa")}
        vs = statistics.median(a / c for a, c in zip(got["sdpa"], got["cudnn"]))
        label = f"d{d} S{s} {'causal' if causal else 'full'} B{b} H{h}"
        print(f"{label}: " + " | ".join(f"{n} " + " ".join(f"{x:.1f}" for x in got[n]) for n in names)
              + f" | ws/no-ws {ratio['ws']:.3f} sdpa/no-ws {ratio['sdpa']:.3f} sdpa/cudnn {vs:.3f} (ws {nbytes} B)",
              flush=True)  # fmt: skip
        summary.append((label, {n: statistics.median(v) for n, v in got.items()}, ratio, vs))
    print("==== forward workspace A/B, inputs requiring grad (TFLOP/s medians; ratios: median of per-round ratios)")
    for label, med, ratio, vs in summary:
        print(f"{label:<26} ws {med['ws']:6.1f} no-ws {med['no-ws']:6.1f} sdpa {med['sdpa']:6.1f} cudnn {med['cudnn']:6.1f}"
              f"  ws/no-ws {ratio['ws']:.3f} sdpa/no-ws {ratio['sdpa']:.3f} sdpa/cudnn {vs:.3f}")  # fmt: skip


if __name__ == "__main__":
    main()
