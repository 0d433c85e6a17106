"""bwd_small.py: a small backward for compute-sanitizer runs of the dev A/B scripts (GPU only): per
head dim, a GQA causal call with Sq != Sk (8 / 2 heads, 700 x 500) and a dense one (2 x 4 heads,
1000), bf16, through flashsdpa.attention and autograd.

    python3 scripts/dev/bwd_small.py det|def [--dims 64 128]

`det` runs under torch.use_deterministic_algorithms (the sm90 backward's ordered dQ adds).
"""

from __future__ import annotations

import argparse

import torch

import flashsdpa


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=("det", "def"))
    parser.add_argument("--dims", type=int, nargs="+", default=[64, 128])
    args = parser.parse_args()
    torch.use_deterministic_algorithms(args.mode == "det")
    sums: list[float] = []
    for d in args.dims:
        shapes = (((1, 8, 700, d), (1, 2, 500, d), True), ((2, 4, 1000, d), (2, 4, 1000, d), False))
        for q_shape, kv_shape, causal in shapes:
            q = torch.randn(q_shape, device="cuda", dtype=torch.bfloat16, requires_grad=True)
            k, v = (torch.randn(kv_shape, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(2))
            out = flashsdpa.attention(q, k, v, causal=causal)
            assert isinstance(out, torch.Tensor)
            grads = torch.autograd.grad(out, (q, k, v), torch.randn_like(out))
            sums += [float(g.float().abs().sum()) for g in grads]
    torch.cuda.synchronize()
    print("ok", sums)


if __name__ == "__main__":
    main()
