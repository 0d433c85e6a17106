# test_fuzz_gpu.py: property-based tests (hypothesis) of flashsdpa's CUDA kernels against the float64
# textbook with the project's rule (helpers.check_attention), over random shapes, GQA ratios,
# head dims (every multiple of 8 up to the build's largest bucket), causal alignments, scales and
# layouts. A fixed budget: derandomized examples (the same on every run), FLASHSDPA_FUZZ_EXAMPLES
# of them (default 60), so scripts/gpu_check.sh's time stays bounded; a failure prints the example.
from __future__ import annotations

import os

import pytest
import torch
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import flashsdpa
from flashsdpa import _backend, selection
from helpers import Shape, check_attention, default_scale, gpu_skip_reason, make_qkv

GPU_SKIP = gpu_skip_reason()
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(GPU_SKIP is not None, reason=f"GPU suite: {GPU_SKIP}")]

EXAMPLES = int(os.environ.get("FLASHSDPA_FUZZ_EXAMPLES", "60"))
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


def _compiled() -> tuple[list[torch.dtype], int]:
    """The build's dtypes and, from the capability table, its largest head dim with a backward
    (every case here takes gradients: 512 on an sm90 build with that bucket, since session 34)."""
    build = flashsdpa.build_info()
    dtypes = [getattr(torch, name) for name in build["dtypes"]] or [torch.bfloat16]
    backward = [d for f in _backend.CAPABILITIES for d in f["head_dims_by_direction"].get("backward", [])]
    return dtypes, max(backward or [128])


@st.composite
def problems(draw: st.DrawFn) -> tuple[Shape, torch.dtype, int, str, float | None]:
    dtypes, largest = _compiled()
    heads_kv = draw(st.integers(1, 4))
    d = draw(st.integers(1, largest // 8)) * 8
    dv = draw(st.sampled_from([d, draw(st.integers(1, largest // 8)) * 8]))
    shape = Shape(
        "fuzz", draw(st.integers(1, 3)), heads_kv * draw(st.sampled_from([1, 2, 4])), heads_kv,
        draw(st.integers(1, 700)), draw(st.integers(1, 700)), d, dv,
    )  # fmt: skip
    layout = draw(st.sampled_from(["bhsd", "bshd"]))
    scale = draw(st.one_of(st.none(), st.floats(0.01, 1.0)))
    return shape, draw(st.sampled_from(dtypes)), draw(st.sampled_from([0, 1, 2])), layout, scale


@FUZZ
@given(problems(), st.integers(0, 2**31 - 1))
# Session 42: what a d64-only build's derandomized runs shrank to. A single nonzero dq row of 8
# entries, whose bf16 rounding left PyTorch's math 4.9e-4 from the float64 dq and ours 3.2e-3: the
# rule's second clause (PyTorch flash's error) applies, which the test could not reach for
# bottom-right causal, nor for top-left with Sq < Sk, until torch_flash_grads served them.
@example((Shape("fuzz", 1, 1, 1, 2, 2, 8, 8), torch.bfloat16, 2, "bhsd", None), 2)
@example((Shape("fuzz", 1, 1, 1, 2, 3, 8, 8), torch.bfloat16, 1, "bhsd", None), 2)
@example((Shape("fuzz", 1, 4, 2, 5, 9, 8, 8), torch.bfloat16, 2, "bhsd", None), 2)
# Session 45, the same build's draws: one query, two keys, Dv 16 != D 8, dk 1.475e-3 against math's
# 4.78e-4 (bound 9.67e-4). A known failure: FlashAttention's delta = rowsum(dO * O) over the bf16
# output; a CPU emulation of that backward misses the rule's first clause in 18-30% of such draws
# (Sq 1, Sk 2), 1% at Sk 7, none from 7 x 7. PyTorch flash, the second clause's yardstick, refuses
# Dv != D; PyTorch's efficient kernel misses as often as ours over 64 seeds (30 of 192 gradients
# each, H100, session 46) but not on this one. Session 53 built that delta for up to 16 keys
# (bwd_prepost.cuh's exact_delta_store: a CPU emulation of this shape's backward with it misses in
# 2.8% of draws instead of 32%); with it the example passes (H100, session 53).
@example((Shape("fuzz", 1, 1, 1, 1, 2, 8, 16), torch.bfloat16, 0, "bhsd", None), 0)
def test_kernels_match_the_reference(problem: tuple[Shape, torch.dtype, int, str, float | None], seed: int) -> None:
    shape, dtype, causal_mode, layout, scale = problem
    if selection.head_dims_reason(shape.head_dim, shape.dv) is not None:
        return  # a narrowed build: this pair has no bucket (the bad-input tests cover the error)
    gen = torch.Generator(device="cuda").manual_seed(seed)
    q, k, v = make_qkv(shape, dtype, "cuda", layout=layout, generator=gen)
    for t in (q, k, v):
        t.requires_grad_()
    scale = default_scale(shape.head_dim) if scale is None else scale
    kwargs: dict[str, object] = {"causal": causal_mode != 0, "scale": scale, "return_lse": True}
    if causal_mode:
        kwargs["causal_alignment"] = {1: "top_left", 2: "bottom_right"}[causal_mode]
    out, lse = flashsdpa.attention(q, k, v, **kwargs)  # type: ignore[arg-type]
    dout = torch.randn(out.shape, generator=gen, device="cuda").to(dtype)
    grads = torch.autograd.grad(out, (q, k, v), dout)
    torch.cuda.synchronize()
    check_attention(q, k, v, dout, out, grads, lse, scale=scale, causal_mode=causal_mode)
