"""decode_ncu.py (session 27): one decode shape of paged_probe.py (B 1 x 128k keys, GQA 32/8, D 128,
bf16) through attention_with_kvcache, twice (ncu skips the first launch), for Nsight Compute to
compare the decode kernel's contiguous and paged roads (scripts/dev/decode_ncu.sh). Session 27:
1024-key pages in order, whose addresses are exactly the contiguous cache's, still cost 1.07x its
time; two variants of the block-table reads lost (kernel_notes_decode.md), so where the paged
road's time goes is what ncu is asked.

    python3 scripts/dev/decode_ncu.py contiguous|paged [--page 1024] [--shuffled]
"""

from __future__ import annotations

import argparse

import torch

import flashsdpa

HQ, HKV, D, KEYS = 32, 8, 128, 131072


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("road", choices=("contiguous", "paged"))
    parser.add_argument("--page", type=int, default=1024)
    parser.add_argument("--shuffled", action="store_true")
    args = parser.parse_args()
    q = torch.randn(1, 1, HQ, D, device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(1, KEYS, HKV, D, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    seqlens = torch.full((1,), KEYS, dtype=torch.int32, device="cuda")
    kwargs: dict[str, torch.Tensor] = {}
    if args.road == "paged":
        n = KEYS // args.page
        perm = torch.randperm(n, device="cuda") if args.shuffled else torch.arange(n, device="cuda")
        k, v = (t.reshape(n, args.page, HKV, D)[perm].contiguous() for t in (k, v))
        kwargs["block_table"] = torch.argsort(perm).reshape(1, n).to(torch.int32)
    for _ in range(2):
        flashsdpa.attention_with_kvcache(q, k, v, cache_seqlens=seqlens, **kwargs)
    torch.cuda.synchronize()
    print(f"{args.road} page {args.page if args.road == 'paged' else '-'}: ok")


if __name__ == "__main__":
    main()
