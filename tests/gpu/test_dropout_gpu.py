# test_dropout_gpu.py: dropout on our kernels (issue 14) against PyTorch's FlashAttention-2
# kernel on the GPU: the mask, bit for bit, for the same generator state (PyTorch's debug mask,
# the reference mask of python/flashsdpa/reference_dropout.py and the mask our kernel applies, read
# back through one-hot values); forward and backward against a float64 textbook given that mask
# with the project's rule; our forward with PyTorch's backward (after leaving enable()) and the
# reverse; CUDA-graph capture and replay (fresh masks per replay, as PyTorch's); the keep rate and
# the expectation over seeds; outputs poisoned with NaN. test_dropout_sanitizer_subset is what
# scripts/dev/verify_dropout.sh runs under compute-sanitizer memcheck.
from __future__ import annotations

import functools
import math
import os
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor

import flashsdpa
from flashsdpa import _backend, dropout, masks, reference_dropout
from helpers import assert_unbiased, check_rule, gpu_skip_reason, skip_unless_compiled

GPU_SKIP = gpu_skip_reason()
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(GPU_SKIP is not None, reason=f"GPU suite: {GPU_SKIP}")]

DEVICE = "cuda"
FLASH_FWD = "aten::_flash_attention_forward"

# (batch, heads_q, heads_kv, seqlen_q, seqlen_k, head_dim, causal): awkward lengths (1, 7, 113,
# 1023, Sq != Sk both ways), GQA, both tile shapes (d64: 128 x 128 forward tiles, d128: 128 x 64).
SHAPES = [
    (1, 1, 1, 1, 1, 64, False),
    (2, 3, 3, 7, 7, 64, False),
    (1, 2, 2, 113, 113, 128, True),
    (2, 4, 2, 113, 1023, 128, False),
    (1, 2, 1, 1023, 1023, 64, True),
    (1, 2, 2, 300, 113, 128, True),
    (2, 2, 2, 77, 200, 64, True),
]
IDS = [f"b{b}h{hq}x{hk}-{sq}x{sk}-d{d}{'-causal' if c else ''}" for b, hq, hk, sq, sk, d, c in SHAPES]


def _visible(sq: int, sk: int, causal: bool) -> Tensor:
    """(Sq, Sk) bool: the keys a row sees (causal aligned bottom-right, as FlashAttention's)."""
    if not causal:
        return torch.ones(sq, sk, dtype=torch.bool, device=DEVICE)
    i = torch.arange(sq, device=DEVICE)[:, None]
    j = torch.arange(sk, device=DEVICE)[None, :]
    return j <= i + sk - sq


def _pytorch_flash(q: Tensor, k: Tensor, v: Tensor, p: float, causal: bool, debug: bool) -> tuple[Tensor, ...]:
    """PyTorch's own flash kernel (called outside flashsdpa.enable()): (out, lse, rng_state, unused, debug)."""
    return torch.ops.aten._flash_attention_forward(q, k, v, None, None, q.shape[1], k.shape[1], p, causal, debug)


def _served(op: str) -> int:
    return flashsdpa.stats()["ops"].get(op, {}).get("served", 0)


def _ours_applied_mask(batch: int, hq: int, hk: int, sq: int, sk: int, d: int, causal: bool, p: float,
                       seed: int, dtype: torch.dtype = torch.float16) -> tuple[Tensor, Tensor]:  # fmt: skip
    """The mask our forward kernel applies, read back: q = 0 makes P uniform over the visible keys
    (never 0), and values one-hot over a block of d keys make out[i, c] = P_drop[i, c0 + c] / keep;
    every call starts from torch.manual_seed(seed), so all see the same mask. Returns (kept
    (B, Hq, Sq, Sk) bool, the rng state of the calls)."""
    q = torch.zeros(batch, sq, hq, d, dtype=dtype, device=DEVICE)
    k = torch.randn(batch, sk, hk, d, dtype=dtype, device=DEVICE)
    kept = torch.zeros(batch, hq, sq, sk, dtype=torch.bool, device=DEVICE)
    rng = None
    for c0 in range(0, sk, d):
        n = min(d, sk - c0)
        v = torch.zeros(batch, sk, hk, d, dtype=dtype, device=DEVICE)
        idx = torch.arange(c0, c0 + n, device=DEVICE)
        v[:, idx, :, idx - c0] = 1
        torch.manual_seed(seed)
        before = _served(FLASH_FWD)
        with flashsdpa.enable():
            out, _, state, _, _ = torch.ops.aten._flash_attention_forward(q, k, v, None, None, sq, sk, p, causal, False)
        assert _served(FLASH_FWD) == before + 1, flashsdpa.stats()["fallback_reasons"]
        kept[..., c0 : c0 + n] = out.transpose(1, 2)[..., :n] > 0
        assert rng is None or torch.equal(state, rng)
        rng = state
    return kept, rng  # type: ignore[return-value]


@pytest.mark.parametrize("shape", SHAPES, ids=IDS)
@pytest.mark.parametrize("p", [0.1, 0.5])
def test_mask_equals_pytorch_flash(shape: tuple[int, ...], p: float) -> None:
    batch, hq, hk, sq, sk, d, causal = shape
    skip_unless_compiled(torch.float16, d)
    seed = 1000 + sq + sk
    q = torch.randn(batch, sq, hq, d, dtype=torch.float16, device=DEVICE)
    k = torch.randn(batch, sk, hk, d, dtype=torch.float16, device=DEVICE)
    torch.manual_seed(seed)
    *_, state_pt, _, debug = _pytorch_flash(q, k, k, p, causal, True)
    kept_pt = ~torch.signbit(debug[:, :, :sq, :sk])  # dropped P are stored negated (-0.0 for 0)
    kept_ours, state_ours = _ours_applied_mask(batch, hq, hk, sq, sk, d, causal, p, seed)
    # The same generator use: the same (seed, offset), in PyTorch's format.
    assert state_ours.dtype == state_pt.dtype == torch.uint64 and state_ours.shape == state_pt.shape == (2,)
    assert torch.equal(state_ours, state_pt)
    kept_ref = reference_dropout.keep_mask_of(state_pt, batch, hq, sq, sk, p)  # the debug option
    vis = _visible(sq, sk, causal).expand_as(kept_ref)
    assert torch.equal(kept_pt[vis], kept_ref[vis]), "reference_dropout differs from PyTorch's flash kernel"
    assert torch.equal(kept_ours[vis], kept_ref[vis]), "our kernel's mask differs from PyTorch's"


def test_capture_path_takes_the_same_state(monkeypatch: pytest.MonkeyPatch) -> None:
    """The capture-safe generator path (PyTorch's kernel on a dummy, seed / offset read on the
    device) gives the same state and mask as the eager one, outside a capture too."""
    skip_unless_compiled(torch.float16, 128)  # _ours_applied_mask's dtype (a bf16-only build failed it)
    eager, state_eager = _ours_applied_mask(2, 4, 2, 113, 200, 128, True, 0.2, 7)
    monkeypatch.setattr(dropout, "take", functools.partial(dropout.take, via_torch=True))
    graph_path, state_graph = _ours_applied_mask(2, 4, 2, 113, 200, 128, True, 0.2, 7)
    assert torch.equal(state_eager, state_graph) and torch.equal(eager, graph_path)


def _textbook(q: Tensor, k: Tensor, v: Tensor, keep: Tensor, p: float, causal: bool, scale: float) -> Tensor:
    """softmax(scale q k^T, bottom-right causal) * keep / (1 - p) @ v in q's dtype, (B, H, S, D)."""
    groups = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)
    s = (q @ k.transpose(-1, -2)) * scale
    if causal:
        s = s.masked_fill(~_visible(q.shape[2], k.shape[2], True), -math.inf)
    prob = torch.softmax(s, dim=-1).nan_to_num(0.0)
    return (prob * keep / (1 - p)) @ v


def _reference_grads(q: Tensor, k: Tensor, v: Tensor, dout: Tensor, keep: Tensor, p: float, causal: bool,
                     dtype: torch.dtype) -> list[Tensor]:  # fmt: skip
    leaves = [t.detach().to(dtype).requires_grad_() for t in (q, k, v)]
    out = _textbook(*leaves, keep, p, causal, q.shape[-1] ** -0.5)
    grads = torch.autograd.grad(out, leaves, dout.to(dtype))
    return [out.detach(), *grads]


def _sdpa_with_dropout(q: Tensor, k: Tensor, v: Tensor, dout: Tensor, p: float, causal: bool, seed: int,
                       backward_inside: bool = True) -> tuple[list[Tensor], Tensor]:  # fmt: skip
    """F.scaled_dot_product_attention with dropout inside enable() (forward; backward inside or
    after leaving it); returns ([out, dq, dk, dv], the keep mask of the generator state it used)."""
    leaves = [t.detach().requires_grad_() for t in (q, k, v)]
    torch.manual_seed(seed)
    gen = torch.cuda.default_generators[torch.cuda.current_device()]
    state = (gen.initial_seed(), gen.get_offset())
    fwd_before = _served("aten::_scaled_dot_product_flash_attention")
    with flashsdpa.enable():
        gqa = q.shape[1] != k.shape[1]
        out = F.scaled_dot_product_attention(*leaves, dropout_p=p, is_causal=causal, enable_gqa=gqa)
        if backward_inside:
            grads = torch.autograd.grad(out, leaves, dout)
    assert _served("aten::_scaled_dot_product_flash_attention") == fwd_before + 1, flashsdpa.stats()["fallback_reasons"]
    if not backward_inside:
        grads = torch.autograd.grad(out, leaves, dout)  # PyTorch's flash backward, our rng state
    keep = reference_dropout.keep_mask(*state, q.shape[0], q.shape[1], q.shape[2], k.shape[2], p, device=DEVICE)
    return [out.detach(), *grads], keep


SDPA_SHAPES = [
    (2, 4, 4, 113, 113, 128, False, torch.bfloat16),
    (1, 4, 2, 256, 1023, 64, False, torch.float16),
    (2, 2, 2, 1023, 1023, 128, True, torch.bfloat16),
    (1, 3, 3, 7, 7, 64, True, torch.float16),
]
SDPA_IDS = [
    f"b{b}h{hq}x{hk}-{sq}x{sk}-d{d}{'-causal' if c else ''}-{str(t)[6:]}" for b, hq, hk, sq, sk, d, c, t in SDPA_SHAPES
]


@pytest.mark.parametrize("shape", SDPA_SHAPES, ids=SDPA_IDS)
@pytest.mark.parametrize("backward_inside", [True, False], ids=["ours-bwd", "pytorch-bwd"])
def test_forward_backward_against_reference(shape: tuple[Any, ...], backward_inside: bool) -> None:
    """Out and grads against the float64 textbook given the mask, with the project's rule. With
    the backward after leaving enable(), PyTorch's flash backward re-creates the mask from our rng
    state: right gradients prove the same mask (and the format)."""
    batch, hq, hk, sq, sk, d, causal, dtype = shape
    skip_unless_compiled(dtype, d)
    gen = torch.Generator(device=DEVICE).manual_seed(sq * 7 + sk)
    q = torch.randn(batch, hq, sq, d, generator=gen, device=DEVICE, dtype=dtype)
    k = torch.randn(batch, hk, sk, d, generator=gen, device=DEVICE, dtype=dtype)
    v = torch.randn(batch, hk, sk, d, generator=gen, device=DEVICE, dtype=dtype)
    dout = torch.randn(batch, hq, sq, d, generator=gen, device=DEVICE, dtype=dtype)
    p = 0.17
    ours, keep = _sdpa_with_dropout(q, k, v, dout, p, causal, seed=11, backward_inside=backward_inside)
    ref = _reference_grads(q, k, v, dout, keep, p, causal, torch.float64)
    pt = _reference_grads(q, k, v, dout, keep, p, causal, dtype)
    for name, a, b, c in zip(("out", "dq", "dk", "dv"), ours, pt, ref):
        check_rule(name, a, b, c)


def test_pytorch_forward_then_our_backward() -> None:
    """The reverse road: PyTorch's flash forward (outside enable()), our backward from its rng state."""
    skip_unless_compiled(torch.bfloat16, 128)
    gen = torch.Generator(device=DEVICE).manual_seed(3)
    q, k, v, dout = (torch.randn(2, 4, 300, 128, generator=gen, device=DEVICE, dtype=torch.bfloat16) for _ in range(4))
    leaves = [t.detach().requires_grad_() for t in (q, k, v)]
    torch.manual_seed(21)
    state = (torch.cuda.initial_seed(), torch.cuda.default_generators[torch.cuda.current_device()].get_offset())
    with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.FLASH_ATTENTION):
        out = F.scaled_dot_product_attention(*leaves, dropout_p=0.3)
    before = _served("aten::_scaled_dot_product_flash_attention_backward")
    with flashsdpa.enable():
        grads = torch.autograd.grad(out, leaves, dout)
    assert _served("aten::_scaled_dot_product_flash_attention_backward") == before + 1
    keep = reference_dropout.keep_mask(*state, 2, 4, 300, 300, 0.3, device=DEVICE)
    ref = _reference_grads(q, k, v, dout, keep, 0.3, False, torch.float64)
    pt = _reference_grads(q, k, v, dout, keep, 0.3, False, torch.bfloat16)
    check_rule("out (PyTorch's)", out.detach(), pt[0], ref[0])
    for name, a, b, c in zip(("dq", "dk", "dv"), grads, pt[1:], ref[1:]):
        check_rule(name, a, b, c)


def _dropout_backward_family(
    dtype: torch.dtype, d: int, mask: masks.MaskSpec, deterministic: bool = False
) -> str | None:
    """The family the capability table gives a dense dropout backward (what launch_bwd runs)."""
    mode = _backend.BACKWARD_DETERMINISTIC if deterministic else 1
    verdict = _backend.select(torch.cuda.current_device(), _backend.DTYPE_CODES[dtype], d, d, masks.kind(mask), False,
                              mode, _backend.FEATURE_BITS["dropout"])  # fmt: skip
    return verdict[0]


def _expect_sm90_backward(dtype: torch.dtype, d: int, mask: masks.MaskSpec, deterministic: bool = False) -> None:
    """On an H100/H200 with the sm90 family built for d (and no FLASHSDPA_FAMILY), the dropout
    backward must be the sm90 kernel's: else these tests could pass on the portable one alone
    after a table regression. FLASHSDPA_FAMILY=sm80 (verify_dropout.sh's second run) takes sm80."""
    rows = [f for f in _backend.capabilities() if f["family"] == "sm90"]
    forced = os.environ.get("FLASHSDPA_FAMILY")
    family = _dropout_backward_family(dtype, d, mask, deterministic)
    if forced is not None:
        assert family == forced
    elif torch.cuda.get_device_capability() == (9, 0) and rows and d in rows[0]["head_dims_by_direction"]["backward"]:
        assert family == "sm90", f"the table gives this dropout backward to {family}, not sm90"


# (batch, heads, seqlen_q, seqlen_k, head_dim, causal): several 128-key blocks (both consumer
# warpgroups, both 16-key halves of a 32-key block per warp), partial last blocks, bottom-right
# causal with Sq != Sk.
BWD_MASK_SHAPES = [
    (1, 2, 113, 1023, 128, False),
    (2, 3, 200, 300, 64, True),
    (1, 1, 7, 7, 64, False),
    (1, 2, 300, 250, 128, True),
]


@pytest.mark.parametrize("shape", BWD_MASK_SHAPES, ids=[f"b{b}h{h}-{sq}x{sk}-d{d}{'-causal' if c else ''}"
                                                         for b, h, sq, sk, d, c in BWD_MASK_SHAPES])  # fmt: skip
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
def test_backward_applies_the_reference_mask(
    shape: tuple[Any, ...], dtype: torch.dtype, restore_generator: None
) -> None:
    """The mask our backward applies, read back bit for bit: q = 0 makes P uniform over the visible
    keys (never 0), and dO one-hot over a block of d query rows makes dV[j, c] = Z[r0 + c, j] P / keep
    (dV sums Z P^T dO: one row per column). On Hopper this is the sm90 kernel's transposed byte map
    (common/dropout.cuh's dropout_bytes_t), on the portable family its row map."""
    batch, heads, sq, sk, d, causal = shape
    skip_unless_compiled(dtype, d)
    mask = masks.CAUSAL_BOTTOM_RIGHT if causal else masks.NO_MASK
    _expect_sm90_backward(dtype, d, mask)
    p = 0.3
    q = torch.zeros(batch, heads, sq, d, dtype=dtype, device=DEVICE)
    k, v = (torch.randn(batch, heads, sk, d, dtype=dtype, device=DEVICE) for _ in range(2))
    torch.manual_seed(17)
    rng = dropout.take(p, batch, heads, q.device)
    out = torch.empty_like(q)
    lse = torch.empty(batch, heads, sq, device=DEVICE)
    _backend.launch_fwd(q, k, v, out, lse, d**-0.5, mask, dropout=rng.item)
    drop = dropout.from_rng_state(p, rng.philox_seed)
    kept = torch.zeros(batch, heads, sq, sk, dtype=torch.bool, device=DEVICE)
    for r0 in range(0, sq, d):
        n = min(d, sq - r0)
        dout = torch.zeros_like(q)
        idx = torch.arange(r0, r0 + n, device=DEVICE)
        dout[:, :, idx, idx - r0] = 1
        dq, dk, dv = (torch.empty_like(t) for t in (q, k, v))
        _backend.launch_bwd(dout, q, k, v, out, lse, dq, dk, dv, d**-0.5, mask, dropout=drop)
        kept[:, :, r0 : r0 + n, :] = dv[..., :n].transpose(-1, -2) > 0
    seed, offset = reference_dropout.rng_state_values(rng.philox_seed)
    keep = reference_dropout.keep_mask(seed, offset, batch, heads, sq, sk, p, device=DEVICE)
    vis = _visible(sq, sk, causal).expand_as(keep)
    assert torch.equal(kept[vis], keep[vis]), "the backward's mask differs from the reference (PyTorch's)"
    assert not kept[~vis].any()  # nothing outside the causal mask reaches dV


@pytest.mark.parametrize("causal", [False, True])
def test_deterministic_dropout_backward(causal: bool, restore_generator: None,
                                       deterministic: Callable[[bool], None]) -> None:  # fmt: skip
    """Under torch.use_deterministic_algorithms(True) our backward serves dropout (the sm90 family's
    ordered dQ adds, dS^T carrying the mask): two runs bitwise equal, and right against the textbook."""
    skip_unless_compiled(torch.bfloat16, 128)
    mask = masks.CAUSAL_BOTTOM_RIGHT if causal else masks.NO_MASK
    if _dropout_backward_family(torch.bfloat16, 128, mask, deterministic=True) is None:
        pytest.skip("no family of this build and GPU has a deterministic backward (the sm90 one: Hopper)")
    _expect_sm90_backward(torch.bfloat16, 128, mask, deterministic=True)
    gen = torch.Generator(device=DEVICE).manual_seed(23)
    q, dout = (torch.randn(1, 4, 1023, 128, generator=gen, device=DEVICE, dtype=torch.bfloat16) for _ in range(2))
    k, v = (torch.randn(1, 2, 1023, 128, generator=gen, device=DEVICE, dtype=torch.bfloat16) for _ in range(2))
    deterministic(False)  # not warn_only (the fixture restores the caller's setting)
    served = _served("aten::_scaled_dot_product_flash_attention_backward")
    first, keep = _sdpa_with_dropout(q, k, v, dout, 0.15, causal, seed=3)
    second, _ = _sdpa_with_dropout(q, k, v, dout, 0.15, causal, seed=3)
    assert _served("aten::_scaled_dot_product_flash_attention_backward") == served + 2, (
        flashsdpa.stats()["fallback_reasons"])  # fmt: skip
    for name, a, b in zip(("out", "dq", "dk", "dv"), first, second):
        assert torch.equal(a, b), f"{name}: two deterministic runs differ"
    ref = _reference_grads(q, k, v, dout, keep, 0.15, causal, torch.float64)
    pt = _reference_grads(q, k, v, dout, keep, 0.15, causal, torch.bfloat16)
    for name, a, b, c in zip(("out", "dq", "dk", "dv"), first, pt, ref):
        check_rule(name, a, b, c)


def _graph_of(fn: Any) -> tuple[torch.cuda.CUDAGraph, Any]:
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        fn()  # warm-up outside the capture
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fn()
    # capture_begin fills the default generator's graph seed / offset tensors (capture_prologue:
    # the current seed, offset 0) on the capture stream, asynchronously, and nothing orders those
    # fills with a later replay on another stream, whose own fills (replay_prologue, the replay's
    # seed and offset) they may then overwrite before the replay's kernels read them. Session 41's
    # whole-suite run (H100, -n 8: eight processes share the GPU, so kernels wait) caught it: our
    # graph's first replay after manual_seed(5), right after PyTorch's graph was captured, drew
    # (seed 0, offset 0) where PyTorch's drew (5, 0), and the next replay (5, 256) as PyTorch's.
    # PyTorch's, not ours: any captured RNG kernel replayed so reads them.
    torch.cuda.synchronize()
    return graph, out


def test_cuda_graph_fresh_masks_per_replay() -> None:
    """Captured, our dropout forward reads seed / offset on the device: each replay draws the next
    mask, and a replay after manual_seed(s) draws what PyTorch's captured kernel draws."""
    skip_unless_compiled(torch.float16, 128)
    batch, heads, sq, sk, d, p = 2, 4, 128, 96, 128, 0.3
    q = torch.zeros(batch, sq, heads, d, dtype=torch.float16, device=DEVICE)
    k = torch.randn(batch, sk, heads, d, dtype=torch.float16, device=DEVICE)
    v = torch.zeros(batch, sk, heads, d, dtype=torch.float16, device=DEVICE)
    idx = torch.arange(sk, device=DEVICE)
    v[:, idx, :, idx] = 1  # out[i, j] = P_drop[i, j] / keep: the mask, read back

    # The output and the rng state (uint64[2]: the (seed, offset) a replay drew), so that a mismatch
    # says whether the offsets or the masks differ (sessions 40 and 41's whole-suite runs failed
    # here once each: a race of PyTorch's capture prologue, which _graph_of now waits for).
    def run_with_state() -> tuple[Tensor, Tensor]:
        result = torch.ops.aten._flash_attention_forward(q, k, v, None, None, sq, sk, p, False, False)
        return result[0], result[2]

    def run() -> Tensor:
        return run_with_state()[0]

    before = _served(FLASH_FWD)
    with flashsdpa.enable():
        ours, (out_ours, state_ours) = _graph_of(run_with_state)
    assert _served(FLASH_FWD) >= before + 2, flashsdpa.stats()["fallback_reasons"]  # warm-up and capture
    theirs, (out_theirs, state_theirs) = _graph_of(run_with_state)
    drawn: list[tuple[str, list[int]]] = []

    def mask_after(graph: torch.cuda.CUDAGraph, out: Tensor, seed: int | None, state: Tensor | None = None) -> Tensor:
        if seed is not None:
            torch.manual_seed(seed)
        graph.replay()
        torch.cuda.synchronize()
        if state is not None:
            drawn.append(("ours" if graph is ours else "torch", [int(x) for x in state.cpu().tolist()]))
        return (out[..., :sk] > 0).clone()

    first, second = mask_after(ours, out_ours, 5, state_ours), mask_after(ours, out_ours, None, state_ours)
    first_pt = mask_after(theirs, out_theirs, 5, state_theirs)
    second_pt = mask_after(theirs, out_theirs, None, state_theirs)
    assert torch.equal(first, first_pt) and torch.equal(second, second_pt), (
        f"a replay's mask differs from PyTorch's: (seed, offset) drawn {drawn}; differing entries "
        f"{int((first != first_pt).sum())} / {int((second != second_pt).sum())} of {first.numel()}"
    )
    assert not torch.equal(first, second), "replays must draw fresh masks"
    assert torch.equal(first, mask_after(ours, out_ours, 5)), "a replay after manual_seed must repeat the mask"
    # And the eager call from the same state applies the same mask.
    torch.manual_seed(5)
    with flashsdpa.enable():
        eager = run()
    assert torch.equal(first, eager[..., :sk] > 0)


@pytest.mark.parametrize("p", [0.1, 0.25])
def test_keep_rate(p: float) -> None:
    skip_unless_compiled(torch.float16, 128)
    kept, _ = _ours_applied_mask(4, 8, 8, 512, 512, 128, False, p, 99)
    rate = reference_dropout.keep_rate(p)
    se = math.sqrt(rate * (1 - rate) / kept.numel())
    assert abs(kept.float().mean().item() - rate) < 4 * se


def test_expectation_over_seeds() -> None:
    """The mean of the output over seeds is the output without dropout (p = 0.25, where the kept
    fraction (191 + 1) / 256 is exactly 1 - p): helpers.assert_unbiased (4 standard
    errors on fixed projections; per element, the mean |z| and a Bonferroni bound on the max)."""
    skip_unless_compiled(torch.float16, 64)
    gen = torch.Generator(device=DEVICE).manual_seed(8)
    q, k, v = (torch.randn(1, 2, 64, 64, generator=gen, device=DEVICE, dtype=torch.float16) for _ in range(3))
    seeds, p = 400, 0.25
    outs = []
    with flashsdpa.enable(), torch.no_grad():
        for seed in range(seeds):
            torch.manual_seed(seed)
            outs.append(F.scaled_dot_product_attention(q, k, v, dropout_p=p).double())
    stack = torch.stack(outs)
    ones = torch.ones(1, 2, 64, 64, dtype=torch.bool, device=DEVICE)
    expected = _textbook(q.double(), k.double(), v.double(), ones, 0.0, False, 64**-0.5)
    assert_unbiased(stack, expected)


@pytest.fixture
def restore_generator() -> Iterator[None]:
    state = torch.cuda.get_rng_state()
    yield
    torch.cuda.set_rng_state(state)


@pytest.mark.parametrize("causal", [False, True])
def test_dropout_sanitizer_subset(causal: bool, restore_generator: None) -> None:
    """Our kernels with dropout into NaN-poisoned outputs: the forward writes every element (bitwise
    equal to the router's result for the same state), the backward every gradient. Small enough for
    compute-sanitizer."""
    skip_unless_compiled(torch.bfloat16, 128)
    batch, heads, sq, sk, d, p = 1, 2, 113, 77, 128, 0.2
    gen = torch.Generator(device=DEVICE).manual_seed(4)
    q = torch.randn(batch, heads, sq, d, generator=gen, device=DEVICE, dtype=torch.bfloat16)
    k, v = (torch.randn(batch, heads, sk, d, generator=gen, device=DEVICE, dtype=torch.bfloat16) for _ in range(2))
    dout = torch.randn_like(q)
    mask = masks.CAUSAL_BOTTOM_RIGHT if causal else masks.NO_MASK
    torch.manual_seed(6)
    rng = dropout.take(p, batch, heads, q.device)
    out = torch.full_like(q, math.nan)
    lse = torch.full((batch, heads, sq), math.nan, device=DEVICE)
    _backend.launch_fwd(q, k, v, out, lse, d**-0.5, mask, dropout=rng.item)
    torch.manual_seed(6)
    with flashsdpa.enable():
        again = torch.ops.aten._flash_attention_forward(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), None, None, sq, sk, p, causal, False
        )
    assert torch.equal(again[2], rng.philox_seed)
    assert torch.equal(again[0].transpose(1, 2), out), "forward left elements unwritten or drew another mask"
    dq, dk, dv = (torch.full_like(t, math.nan) for t in (q, k, v))
    drop = dropout.from_rng_state(p, rng.philox_seed)
    _backend.launch_bwd(dout, q, k, v, out, lse, dq, dk, dv, d**-0.5, mask, dropout=drop)
    seed, offset = reference_dropout.rng_state_values(rng.philox_seed)
    keep = reference_dropout.keep_mask(seed, offset, batch, heads, sq, sk, p, device=DEVICE)
    ref = _reference_grads(q, k, v, dout, keep, p, causal, torch.float64)
    pt = _reference_grads(q, k, v, dout, keep, p, causal, torch.bfloat16)
    for name, a, b, c in zip(("out", "dq", "dk", "dv"), (out, dq, dk, dv), pt, ref):
        assert not a.isnan().any(), f"{name}: NaN left (unwritten)"
        check_rule(name, a, b, c)


@pytest.mark.parametrize("causal", [False, True])
def test_direct_api_against_reference(causal: bool) -> None:
    """flashsdpa.attention(dropout_p=...): our kernels (flashsdpa::fwd_dropout / bwd_dropout), the
    mask of the generator state at the call, GQA and Sq != Sk (bottom-right causal)."""
    skip_unless_compiled(torch.bfloat16, 128)
    gen = torch.Generator(device=DEVICE).manual_seed(12)
    q, dout = (torch.randn(2, 4, 100, 128, generator=gen, device=DEVICE, dtype=torch.bfloat16) for _ in range(2))
    k, v = (torch.randn(2, 2, 300, 128, generator=gen, device=DEVICE, dtype=torch.bfloat16) for _ in range(2))
    leaves = [t.detach().requires_grad_() for t in (q, k, v)]
    torch.manual_seed(31)
    state = (torch.cuda.initial_seed(), torch.cuda.default_generators[torch.cuda.current_device()].get_offset())
    before = _served("flashsdpa::fwd_dropout"), _served("flashsdpa::bwd_dropout")
    out = flashsdpa.attention(*leaves, dropout_p=0.2, causal=causal, causal_alignment="bottom_right")
    grads = torch.autograd.grad(out, leaves, dout)
    assert (_served("flashsdpa::fwd_dropout"), _served("flashsdpa::bwd_dropout")) == (before[0] + 1, before[1] + 1)
    keep = reference_dropout.keep_mask(*state, 2, 4, 100, 300, 0.2, device=DEVICE)
    ref = _reference_grads(q, k, v, dout, keep, 0.2, causal, torch.float64)
    pt = _reference_grads(q, k, v, dout, keep, 0.2, causal, torch.bfloat16)
    for name, a, b, c in zip(("out", "dq", "dk", "dv"), (out.detach(), *grads), pt, ref):
        check_rule(name, a, b, c)
