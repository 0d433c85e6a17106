"""bias_fwd_time.py: the additive-bias forward and backward through SDPA inside enable(), ours
only, for A/B runs between two builds (scripts/dev/bias64_ab.sh alternates processes of this
script, one per build). B*S = 16k tokens, H*D = 2048, S 2k, a (1, H, S, S) bf16 bias that requires
grad (the bench's additive-bias row, bench/masked.py, at any head dim); TFLOP/s counted dense
(forward 4 B H S^2 D, backward 2.5x), CUDA events, median of the reps (bench/masked.py's _times). Prints one line:
`bias d<D> fwd <TFLOP/s> bwd <TFLOP/s>`. (Session 15 kept a d128 form of it until its A/B was
done; main's history has it at 05cbb85.)

    python3 scripts/dev/bias_fwd_time.py [--head-dim 64] [--seqlen 2048] [--seed 0]
"""

from __future__ import annotations

import argparse

import torch

from flashsdpa.bench import masked


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--head-dim", type=int, default=64)
    parser.add_argument("--seqlen", type=int, default=2048)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    d, s = args.head_dim, args.seqlen
    b, h = max(1, 16384 // s), 2048 // d
    gen = torch.Generator(device="cuda").manual_seed(args.seed)
    q, k, v, dout = (torch.randn(b, h, s, d, generator=gen, device="cuda").to(torch.bfloat16) for _ in range(4))
    bias = torch.randn(1, h, s, s, generator=gen, device="cuda").to(torch.bfloat16).requires_grad_()
    # The bench's own timing of a masked row (raises if our kernels served none of the calls).
    fwd, bwd = masked._times("ours", [t.requires_grad_() for t in (q, k, v)], bias, dout)
    flops = 4.0 * b * h * s * s * d
    print(f"bias d{d} fwd {flops / fwd / 1e9:.1f} bwd {2.5 * flops / bwd / 1e9:.1f}", flush=True)


if __name__ == "__main__":
    main()
