"""bias_fwd_time.py: the additive-bias rows of `bench --masks` (issue 14's bars: forward 420,
backward 300 TFLOP/s at S 2k), ours only, for A/B runs between two builds (alternate processes of
this script, one per build: session 15's register-split A/B, kernel_notes_fwd_sm90.md). SDPA inside enable() with a (1, H, S, S) bias
that requires grad, B*S = 16k, H 16, D 128, bf16, the inputs bench/masked.py builds; TFLOP/s counted
dense (forward 4 B H S^2 D, backward 2.5x), CUDA events, median of the reps. Prints one line:
`bias fwd <TFLOP/s> bwd <TFLOP/s>`.

    python3 scripts/dev/bias_fwd_time.py [--seed 0]
"""

from __future__ import annotations

import argparse

import torch

from flashsdpa.bench import masked


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    case = next(c for c in masked.CASES if c.kind == "bias")
    qkv, mask, dout = masked._inputs(case, torch.bfloat16, args.seed)
    fwd_ms, bwd_ms = masked._times("ours", qkv, mask, dout)
    batch, s = qkv[0].shape[0], case.seqlen
    flops = 4.0 * batch * masked.HEADS * s * s * masked.HEAD_DIM
    print(f"bias fwd {flops / fwd_ms / 1e9:.1f} bwd {2.5 * flops / bwd_ms / 1e9:.1f}", flush=True)


if __name__ == "__main__":
    main()
