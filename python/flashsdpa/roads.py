# roads.py: where SDPA inside enable() takes a road that is only partly ours, the rule that keeps it
# to the calls it makes faster. Today one road: training above head dim 256, where no family of ours
# has the backward, runs our forward and PyTorch's efficient backward on its output and LSE
# (ops._efficient_backward; selection.backward_road says which calls it can take). Its backward is
# PyTorch's own, so the gain is the forward's share, and below 8k keys it lost (session 33, H100,
# bf16, D 512, H 4, B*S 16k, forward + backward through SDPA inside enable() against PyTorch's
# SDPA, medians of 3 rounds, scripts/dev/hdim512_time.py --train): 1.06x at S 8k, 1.05x at 8k
# causal, 0.99x at 2k, 0.91x at 2k causal; 4k is not measured, so it stays below the rule until it
# is. The direct API serves every length: asked for our kernels by name, it has no PyTorch kernel
# to hand a call to.
"""The length rule of SDPA's training road above head dim 256 (our forward, PyTorch's backward)."""

from __future__ import annotations

from torch import Tensor

from flashsdpa._backend import WIDE_HEAD_DIM

__all__ = ["ROAD_MIN_KEYS", "pays", "speed_reason"]

ROAD_MIN_KEYS = 8192


def pays(key: Tensor) -> bool:
    """Whether SDPA takes the road for a training call that only the road would serve (the entry's
    test: a comparison Dynamo guards on, no message built)."""
    return key.shape[-2] >= ROAD_MIN_KEYS


def speed_reason(key: Tensor) -> str | None:
    """Why SDPA leaves a training call that only the road would serve to PyTorch (too few keys for
    the road to be the faster one), or None: take the road."""
    if pays(key):
        return None
    seqlen_k = key.shape[-2]
    return (
        f"seqlen_k={seqlen_k} with requires_grad above head dim {WIDE_HEAD_DIM}: our forward with PyTorch's "
        f"efficient backward runs slower than PyTorch's SDPA below {ROAD_MIN_KEYS} keys (0.91-0.99x at 2048, "
        f"1.05-1.06x at 8192 on an H100), so SDPA keeps PyTorch's kernels"
    )
