"""paged_probe.py (session 26): where a paged KV cache's decode time goes. The bench's page-64
shuffled pool read 1.23-1.50x the contiguous cache's time at B 1 x 128k and B 32 x 4k keys (H200,
sessions 25-26). This times attention_with_kvcache in CUDA graphs (GPU time a call) over the same
keys held contiguously and in pools of several page sizes, each in order (page i of a sequence in
slot i: the block table's indirection alone) and shuffled (a serving engine's fragmented pool:
indirection plus scattered addresses), so the cost splits into the table's reads and the scatter.

    python3 scripts/dev/paged_probe.py [--pages 16 64 256 1024]
"""

from __future__ import annotations

import argparse
import torch
import torch.nn.functional as F

import flashsdpa
from flashsdpa.bench.timing import graph_us

HQ, HKV, D = 32, 8, 128


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pages", type=int, nargs="+", default=[16, 64, 256, 1024])
    args = parser.parse_args()
    gen = torch.Generator().manual_seed(0)
    print("GPU us a call (CUDA graph), bf16, GQA 32/8, D 128; ratio = / contiguous")
    for batch, keys in ((1, 131072), (32, 4096), (8, 16384)):
        q = torch.randn(batch, 1, HQ, D, device="cuda", dtype=torch.bfloat16)
        k = torch.randn(batch, keys, HKV, D, device="cuda", dtype=torch.bfloat16)
        v = torch.randn(batch, keys, HKV, D, device="cuda", dtype=torch.bfloat16)
        seqlens = torch.full((batch,), keys, dtype=torch.int32, device="cuda")
        base = graph_us([lambda: flashsdpa.attention_with_kvcache(q, k, v, cache_seqlens=seqlens)], 10, 9)
        want = flashsdpa.attention_with_kvcache(q, k, v, cache_seqlens=seqlens)
        print(f"B {batch:>2} x {keys:>6} keys: contiguous {base:7.1f}")
        for page in args.pages:
            per_seq = -(-keys // page)
            pad = per_seq * page - keys
            for order in ("ordered", "shuffled"):
                n = batch * per_seq
                perm = torch.randperm(n, generator=gen) if order == "shuffled" else torch.arange(n)
                perm = perm.cuda()

                def pool(cache: torch.Tensor) -> torch.Tensor:
                    padded = F.pad(cache, (0, 0, 0, 0, 0, pad)) if pad else cache
                    return padded.reshape(n, page, HKV, D)[perm].contiguous()

                kp, vp = pool(k), pool(v)
                table = torch.argsort(perm).reshape(batch, per_seq).to(torch.int32)
                call = lambda: flashsdpa.attention_with_kvcache(  # noqa: E731
                    q, kp, vp, cache_seqlens=seqlens, block_table=table
                )
                got = call()
                assert torch.equal(got, want) or (got - want).abs().max().item() < 2e-2, "paged result differs"
                us = graph_us([call], 10, 9)
                print(f"    page {page:>5} {order:>8}: {us:7.1f}  {us / base:5.3f}x")
                del kp, vp
        del k, v


if __name__ == "__main__":
    main()
