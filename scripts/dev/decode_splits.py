"""decode_splits.py: the decode path's GPU time against its number of KV splits (issue 11's
B 1 x 8k bar: 15 us, 16.6 in session 9's replayed graph against cuDNN's 15.4). One query token,
GQA 32/8, D 128, bf16, a full contiguous cache; flashsdpa.attention_with_kvcache with num_splits
forced (0 = the heuristic's choice) and PyTorch's cuDNN and flash through SDPA, each timed as the
bench's graph column is (bench/decode.py's _graph_us: 20 calls in one CUDA graph, replayed between
events, rotated inputs). Says whether the heuristic's choice is the fastest and how much the count
moves the time, before the fused last-CTA combine is built (docs/kernel_notes_decode.md).

    python3 scripts/dev/decode_splits.py [--cases 1x8192 1x131072 32x4096] [--splits 0 1 4 8 16 24 33 48 64 96 128]
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import flashsdpa
from flashsdpa.bench.decode import HEAD_DIM, HEADS_KV, HEADS_Q, _graph_us, kv_bytes, tbps
from flashsdpa.bench.timing import sets_for_bytes


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--cases", nargs="+", default=["1x8192", "1x131072", "32x4096"])
    parser.add_argument("--splits", type=int, nargs="+", default=[0, 1, 4, 8, 16, 24, 33, 48, 64, 96, 128])
    args = parser.parse_args()
    for case in args.cases:
        batch, keys = (int(x) for x in case.split("x"))
        nbytes = kv_bytes(batch, keys, 2)
        sets = []
        for _ in range(sets_for_bytes(nbytes)):
            q = torch.randn(batch, 1, HEADS_Q, HEAD_DIM, device="cuda", dtype=torch.bfloat16)
            k, v = (torch.randn(batch, keys, HEADS_KV, HEAD_DIM, device="cuda", dtype=torch.bfloat16) for _ in range(2))
            sets.append((q, k, v, torch.full((batch,), keys, device="cuda", dtype=torch.int32)))
        print(f"B {batch} x {keys} keys ({nbytes / 2**20:.0f} MiB of K/V), graph us per call:")
        for backend in (SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION):
            # SDPA's (B, H, S, D) views of the same memory.
            def sdpa(t: tuple[torch.Tensor, ...], backend: SDPBackend = backend) -> torch.Tensor:
                with sdpa_kernel([backend]):
                    return F.scaled_dot_product_attention(t[0].transpose(1, 2), t[1].transpose(1, 2),
                                                          t[2].transpose(1, 2), enable_gqa=True)  # fmt: skip

            us = _graph_us([lambda t=t: sdpa(t) for t in sets])
            print(f"  torch {backend.name:<18} {us if us is None else round(us, 1)!s:>8}  {tbps(nbytes, us) or 0:.2f} TB/s")
        for splits in args.splits:
            def ours(t: tuple[torch.Tensor, ...], splits: int = splits) -> torch.Tensor:
                return flashsdpa.attention_with_kvcache(t[0], t[1], t[2], cache_seqlens=t[3], causal=True,
                                                        num_splits=splits or None)  # fmt: skip

            us = _graph_us([lambda t=t: ours(t) for t in sets])
            label = "heuristic" if splits == 0 else f"{splits} splits"
            print(f"  flashsdpa {label:<15} {us if us is None else round(us, 1)!s:>8}  {tbps(nbytes, us) or 0:.2f} TB/s")


if __name__ == "__main__":
    main()
