"""bias_race.py: one masked attention call for compute-sanitizer (development tool, a GPU).

    python3 scripts/dev/bias_race.py fwd|bwd SK HEAD_DIM [offset]

An additive (B 2, H 4, Sq 130, SK) bf16 bias (GQA 4 / 2; `offset`: the plane 4 bytes past a 16-byte
boundary, the 4-byte copy path), through flashsdpa.attention: the forward alone (no grad) or the
forward and the backward with the mask's gradient. Prints the output's checksum.
"""

from __future__ import annotations

import sys

import torch

import flashsdpa


def main() -> None:
    direction, sk, d = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    offset = len(sys.argv) > 4 and sys.argv[4] == "offset"
    torch.manual_seed(0)
    b, h, sq = 2, 4, 130
    q = torch.randn(b, h, sq, d, device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(b, h // 2, sk, d, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    store = torch.randn(b, h, sq, sk + 8, device="cuda", dtype=torch.bfloat16)
    bias = store.narrow(3, 2 if offset else 0, sk)
    if direction == "fwd":
        with torch.no_grad():
            out = flashsdpa.attention(q, k, v, attn_mask=bias, enable_gqa=True)
    else:
        leaves = [t.requires_grad_() for t in (q, k, v)]
        bias = bias.detach().requires_grad_()
        out = flashsdpa.attention(*leaves, attn_mask=bias, enable_gqa=True)
        grads = torch.autograd.grad(out, [*leaves, bias], torch.randn_like(out))
        out = out + grads[0].sum() * 0
    torch.cuda.synchronize()
    print(direction, sk, d, "offset" if offset else "", float(out.float().sum()))


if __name__ == "__main__":
    main()
