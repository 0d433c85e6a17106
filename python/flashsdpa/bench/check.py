# bench/check.py: the correctness spot check of every timed configuration.
#
# A float32 reference and PyTorch's math SDPA in the input dtype, on one (batch, head) slice, and
# the project's rule (error <= 2 x PyTorch's + 1e-5), so that a fast but wrong kernel is marked
# WRONG instead of winning.
"""The correctness spot check of the benchmark's timed configurations."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.nn.attention import SDPBackend, sdpa_kernel

from flashsdpa.bench.problems import RULE_ATOL, RULE_FACTOR, Problem


@contextlib.contextmanager
def _reduced_precision_math() -> Iterator[None]:
    before = torch.backends.cuda.fp16_bf16_reduction_math_sdp_allowed()
    torch.backends.cuda.allow_fp16_bf16_reduction_math_sdp(True)
    try:
        yield
    finally:
        torch.backends.cuda.allow_fp16_bf16_reduction_math_sdp(before)


@dataclass
class Reference:
    """float32 reference and PyTorch's math SDPA in the input dtype, on one (batch, head) slice."""

    index: tuple[int, int]
    ref: list[Tensor]  # fwd: [out]; bwd: [dq, dk, dv]
    pt_err: list[float]


def _slice(t: Tensor, index: tuple[int, int]) -> Tensor:
    b, h = index
    return t[b : b + 1, h : h + 1]


def _math_attention(q: Tensor, k: Tensor, v: Tensor, causal: bool, dout: Tensor | None) -> list[Tensor]:
    q, k, v = (t.detach().requires_grad_(dout is not None) for t in (q, k, v))
    with sdpa_kernel([SDPBackend.MATH]):
        out = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    if dout is None:
        return [out.detach()]
    return list(torch.autograd.grad(out, (q, k, v), dout))


def spot_reference(problem: Problem, inputs: tuple[Tensor, ...], direction: str) -> Reference:
    # The last batch and head: an indexing bug (strides, grid limits) shows there first.
    index = (problem.batch - 1, problem.heads - 1)
    q, k, v, dout = (_slice(t, index) for t in inputs)
    upcast_dout = dout.float() if direction == "bwd" else None
    ref = _math_attention(q.float(), k.float(), v.float(), problem.causal, upcast_dout)
    with _reduced_precision_math():
        pt = _math_attention(q, k, v, problem.causal, dout if direction == "bwd" else None)
    pt_err = [(p.float() - r).abs().max().item() for p, r in zip(pt, ref)]
    return Reference(index, ref, pt_err)


def check(reference: Reference, ours: Sequence[Tensor]) -> tuple[float, float]:
    """(max error, worst error / bound) of ``ours`` (full tensors) on the reference's slice."""
    errs = [
        (_slice(t, reference.index).float() - r).abs().max().item() if bool(torch.isfinite(t).all()) else math.inf
        for t, r in zip(ours, reference.ref)
    ]
    ratios = [e / (RULE_FACTOR * p + RULE_ATOL) for e, p in zip(errs, reference.pt_err)]
    return max(errs), max(ratios)
