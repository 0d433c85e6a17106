# helpers.py: what the CPU and GPU test suites share: the named shape table, input makers, the two
# references (a float64 textbook formula and PyTorch's own math SDPA) and the correctness rule.
# (NaN poisoning lives in the GPU kernel tests: they launch into NaN-filled output buffers.)
"""Shared test helpers.

The correctness rule (DEVELOPERS.md; FlashAttention's own tests use it): with ``ref`` the textbook
formula computed in float64 from the same (already rounded) inputs, and ``pt`` PyTorch's math SDPA
run in the input dtype, an implementation passes when, for the output, the LSE and each gradient,

    max |ours - ref| <= 2 * max |pt - ref| + 1e-5

Non-finite values must sit at the same places as in ``ref`` (the +inf LSE of rows with no visible
key); anything else non-finite in ``ours`` fails.
"""

from __future__ import annotations

import contextlib
import math
import os
import subprocess
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.nn.attention import SDPBackend, sdpa_kernel

from flashsdpa import masks
from flashsdpa.masks import MaskSpec

CAUSAL_MODES: dict[str, int] = {"none": 0, "top_left": 1, "bottom_right": 2}
AWKWARD_LENGTHS: tuple[int, ...] = (1, 7, 113, 239, 1023)
RULE_FACTOR = 2.0
RULE_ATOL = 1e-5
# Set by the device scripts' compute-sanitizer runs (device_env.sh's sanitize_subset, gpu_check.sh):
# a reference that runs PyTorch's GPU kernels may take its ``pt`` yardstick on the CPU there, where
# racecheck stops on "Internal Sanitizer Error ... hardware exception" inside PyTorch's own kernels
# (session 27: the bf16 math SDPA at 600 rows; session 38: test_kvcache's append case, in a process
# where none of ours had run). The yardstick is the same definition (PyTorch's math in the input
# dtype); the sanitizer's question is our kernels' memory, and the normal run keeps the GPU's.
UNDER_SANITIZER: bool = os.environ.get("FLASHSDPA_UNDER_SANITIZER") == "1"


@dataclass(frozen=True)
class Shape:
    """One attention problem in SDPA's (B, H, S, D) terms; ``head_dim_v`` None means equal to head_dim."""

    name: str
    batch: int
    heads_q: int
    heads_kv: int
    seqlen_q: int
    seqlen_k: int
    head_dim: int
    head_dim_v: int | None = None

    @property
    def dv(self) -> int:
        return self.head_dim if self.head_dim_v is None else self.head_dim_v

    def replace(self, **changes: int | str | None) -> Shape:
        fields = {**self.__dict__, **changes}
        return Shape(**fields)  # type: ignore[arg-type]

    def __str__(self) -> str:
        dims = f"d{self.head_dim}" + ("" if self.head_dim_v is None else f"v{self.head_dim_v}")
        return f"{self.name}-b{self.batch}h{self.heads_q}kv{self.heads_kv}-q{self.seqlen_q}k{self.seqlen_k}-{dims}"


# The named shape table: awkward lengths (1, 7, 113, 239, 1023; none a multiple of a tile), Sq != Sk
# both ways, a single query (decode) and a single key, GQA and MQA, and Dv != Dqk. Test files
# combine it with dtypes, causal modes and head dims.
SHAPES: dict[str, Shape] = {
    s.name: s
    for s in (
        Shape("one", 1, 2, 2, 1, 1, 64),
        Shape("tiny", 2, 2, 2, 7, 7, 64),
        Shape("square113", 2, 4, 4, 113, 113, 64),
        Shape("square239", 1, 3, 3, 239, 239, 64),
        Shape("square1023", 1, 2, 2, 1023, 1023, 64),
        Shape("q_longer", 2, 2, 2, 239, 113, 64),  # bottom-right leaves the first 126 rows without keys
        Shape("k_longer", 2, 2, 2, 113, 239, 64),
        Shape("decode", 2, 4, 4, 1, 1023, 64),
        Shape("single_key", 2, 2, 2, 239, 1, 64),
        Shape("q_much_longer", 1, 2, 2, 1023, 7, 64),
        Shape("gqa2", 2, 8, 4, 239, 113, 64),
        Shape("mqa", 1, 8, 1, 113, 1023, 64),
        Shape("dv_wider", 2, 4, 2, 113, 239, 32, 64),
        Shape("dv_narrower", 1, 4, 4, 239, 239, 64, 16),
    )
}

# Zero-size problems: every dimension that can be empty, one at a time.
EMPTY_SHAPES: tuple[Shape, ...] = (
    Shape("no_batch", 0, 2, 2, 7, 7, 16),
    Shape("no_heads", 1, 0, 0, 7, 7, 16),
    Shape("no_queries", 1, 2, 2, 0, 7, 16),
    Shape("no_keys", 1, 2, 2, 7, 0, 16),
)


def make_qkv(
    shape: Shape,
    dtype: torch.dtype,
    device: str | torch.device = "cpu",
    *,
    layout: str = "bhsd",
    requires_grad: bool = False,
    generator: torch.Generator | None = None,
) -> tuple[Tensor, Tensor, Tensor]:
    """Fresh standard-normal q, k, v in (B, H, S, D) view.

    ``layout``: "bhsd" contiguous; "bshd" allocated (B, S, H, D) and transposed, as models produce
    them; "packed" slices of one (B, S, Hq + 2 Hkv, D) projection output, so the row stride is
    larger than H * D (needs head_dim == head_dim_v).
    """
    b, hq, hkv, sq, sk, d, dv = (
        shape.batch,
        shape.heads_q,
        shape.heads_kv,
        shape.seqlen_q,
        shape.seqlen_k,
        shape.head_dim,
        shape.dv,
    )

    def randn(*size: int) -> Tensor:
        return torch.randn(*size, generator=generator, device=device, dtype=torch.float32).to(dtype)

    if layout == "bhsd":
        q, k, v = randn(b, hq, sq, d), randn(b, hkv, sk, d), randn(b, hkv, sk, dv)
    elif layout == "bshd":
        q = randn(b, sq, hq, d).transpose(1, 2)
        k = randn(b, sk, hkv, d).transpose(1, 2)
        v = randn(b, sk, hkv, dv).transpose(1, 2)
    elif layout == "packed":
        if sq != sk or d != dv:
            raise ValueError("the packed layout needs seqlen_q == seqlen_k and head_dim == head_dim_v")
        qkv = randn(b, sq, hq + 2 * hkv, d)
        q, k, v = (t.transpose(1, 2) for t in qkv.split([hq, hkv, hkv], dim=2))
    else:
        raise ValueError(f"unknown layout {layout!r}")
    if requires_grad:
        for t in (q, k, v):
            t.requires_grad_(True)
    return q, k, v


def default_scale(head_dim: int) -> float:
    return 1.0 / math.sqrt(head_dim) if head_dim > 0 else 1.0


def visible_keys(
    seqlen_q: int, seqlen_k: int, causal_mode: int | MaskSpec, device: str | torch.device = "cpu"
) -> Tensor | None:
    """Bool (Sq, Sk): True where query i may attend key j; None when nothing is masked.
    ``causal_mode``: 0 / 1 / 2 (none, top-left, bottom-right causal) or a MaskSpec tuple (windows);
    every helper below takes either."""
    mask = masks.BY_CAUSAL_MODE[causal_mode] if isinstance(causal_mode, int) else causal_mode
    return masks.visible(mask, seqlen_q, seqlen_k, device)


def textbook_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    scale: float,
    causal_mode: int | MaskSpec,
    dtype: torch.dtype = torch.float64,
    score_dtype: torch.dtype | None = None,
) -> tuple[Tensor, Tensor]:
    """softmax(scale q k^T + mask) v, materialized, computed in ``dtype``; differentiable.

    ``score_dtype`` rounds the scaled scores to that dtype first, as PyTorch's math backend does
    when it multiplies fp16/bf16 inputs in their own dtype.

    Returns ``(out, lse)`` in ``dtype``. Rows that see no key get out 0 and lse +inf (the
    convention of reference.py and of PyTorch's CUDA flash kernel), and zero gradients.
    """
    groups = q.shape[1] // max(k.shape[1], 1)
    q, k, v = q.to(dtype), k.to(dtype), v.to(dtype)
    k = k.repeat_interleave(groups, dim=1)
    v = v.repeat_interleave(groups, dim=1)
    s = (q @ k.transpose(-1, -2)) * scale
    if score_dtype is not None:
        s = s.to(score_dtype).to(dtype)
    mask = visible_keys(q.shape[2], k.shape[2], causal_mode, q.device)
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    if s.shape[-1] == 0:
        out = q.new_zeros(*q.shape[:-1], v.shape[-1])
        return out, torch.full(q.shape[:-1], float("inf"), dtype=dtype, device=q.device)
    # Softmax with the max detached (the result does not depend on it) and an empty-row guard, so
    # that fully masked rows give 0 instead of NaN, in the forward and in autograd's backward.
    row_max = s.amax(dim=-1, keepdim=True).detach()
    row_max = torch.where(row_max == float("-inf"), 0.0, row_max)
    e = torch.exp(s - row_max)
    row_sum = e.sum(dim=-1, keepdim=True)
    p = e / torch.where(row_sum == 0, 1.0, row_sum)
    lse = torch.where(row_sum == 0, float("inf"), row_max + torch.log(row_sum)).squeeze(-1)
    return p @ v, lse


@contextlib.contextmanager
def _reduced_precision_math(enabled: bool) -> Iterator[None]:
    """Let the math backend compute fp16/bf16 in the input dtype instead of upcasting to float32."""
    before = torch.backends.cuda.fp16_bf16_reduction_math_sdp_allowed()
    torch.backends.cuda.allow_fp16_bf16_reduction_math_sdp(enabled)
    try:
        yield
    finally:
        torch.backends.cuda.allow_fp16_bf16_reduction_math_sdp(before)


def textbook_with_grads(
    q: Tensor, k: Tensor, v: Tensor, dout: Tensor, *, scale: float, causal_mode: int | MaskSpec
) -> tuple[Tensor, Tensor, list[Tensor]]:
    """The float64 textbook ``(out, lse)`` and its autograd gradients w.r.t. q, k, v for ``dout``,
    taken at float64 leaves so that the gradients are not rounded back to the inputs' dtype."""
    leaves = [t.detach().double().requires_grad_() for t in (q, k, v)]
    out, lse = textbook_attention(*leaves, scale=scale, causal_mode=causal_mode, dtype=torch.float64)
    return out.detach(), lse.detach(), grads_or_zeros(out, leaves, dout.double())


def grads_or_zeros(out: Tensor, inputs: Sequence[Tensor], dout: Tensor) -> list[Tensor]:
    """autograd.grad of ``out`` w.r.t. ``inputs``, with zeros where there is no dependence (empty
    problems: no keys, no queries)."""
    if not out.requires_grad or out.numel() == 0:
        return [torch.zeros_like(t) for t in inputs]
    grads = torch.autograd.grad(out, inputs, dout, allow_unused=True)
    return [torch.zeros_like(t) if g is None else g for g, t in zip(grads, inputs)]


def torch_math_attention(
    q: Tensor, k: Tensor, v: Tensor, *, scale: float, causal_mode: int | MaskSpec, reduced_precision: bool = False
) -> Tensor:
    """PyTorch's math SDPA in the input dtype (differentiable): the ``pt`` of the rule.

    ``reduced_precision`` keeps fp16/bf16 arithmetic in the input dtype (scores and probabilities
    rounded, as FlashAttention's tests do with their "pt" reference); use it to judge kernels that
    round P to 16 bits for the P @ V matmul. Without it the math backend upcasts to float32 and
    rounds once at the end, which is the bar for float32-accumulating code such as reference.py.
    """
    kwargs: dict[str, object] = {"scale": scale, "enable_gqa": q.shape[1] != k.shape[1]}
    if causal_mode == 1:
        kwargs["is_causal"] = True
    elif causal_mode != 0:
        kwargs["attn_mask"] = visible_keys(q.shape[2], k.shape[2], causal_mode, q.device)
    with sdpa_kernel([SDPBackend.MATH]), _reduced_precision_math(reduced_precision):
        return F.scaled_dot_product_attention(q, k, v, **kwargs)


def torch_flash_grads(
    q: Tensor, k: Tensor, v: Tensor, dout: Tensor, *, scale: float, causal_mode: int | MaskSpec
) -> list[Tensor]:
    """dq, dk, dv of PyTorch's flash SDPA on the same inputs, or [] where it does not serve them
    (CPU, float32, masks other than none and causal, top-left causal with Sq > Sk, a shape its
    filter refuses).

    Causal masks in flash's own terms: bottom-right is its native convention (the aten flash op's
    ``is_causal``, which ``causal_lower_right`` dispatches to), GQA as PyTorch's flash runs it (K / V
    expanded per query head, dK / dV summed over the group in the input dtype); top-left with
    Sq < Sk is the square problem over the first Sq keys (the later keys are never visible, so
    their gradients are 0); with Sq == Sk the two alignments are one mask."""
    if not q.is_cuda or q.dtype not in (torch.float16, torch.bfloat16) or causal_mode not in (0, 1, 2):
        return []
    sq, sk, hq, hkv = q.shape[2], k.shape[2], q.shape[1], k.shape[1]
    if causal_mode == 2 and sq == sk:
        causal_mode = 1
    if causal_mode == 1 and sq > sk:
        return []
    ql, kl, vl = leaves = [t.detach().requires_grad_() for t in (q, k, v)]
    try:
        if causal_mode == 2:
            kx, vx = (t[:, :, None].expand(-1, -1, hq // hkv, -1, -1).flatten(1, 2) for t in (kl, vl))
            out = torch.ops.aten._scaled_dot_product_flash_attention(ql, kx, vx, 0.0, True, False, scale=scale)[0]
        else:
            ks, vs = (kl[:, :, :sq], vl[:, :, :sq]) if causal_mode == 1 else (kl, vl)
            with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
                out = F.scaled_dot_product_attention(ql, ks, vs, scale=scale, is_causal=causal_mode == 1, enable_gqa=hq != hkv)
        return grads_or_zeros(out, leaves, dout)
    except RuntimeError:  # "No available kernel": the flash filter refused the shape
        return []


def max_error(ours: Tensor, ref: Tensor) -> float:
    """max |ours - ref| over finite entries; inf if the non-finite entries differ in place or value."""
    if ours.shape != ref.shape:
        raise AssertionError(f"shape {tuple(ours.shape)} != reference shape {tuple(ref.shape)}")
    if ours.numel() == 0:
        return 0.0
    ours, ref = ours.detach().double(), ref.detach().double().to(ours.device)  # a CPU reference is fine
    finite = torch.isfinite(ref)
    if not torch.equal(torch.isfinite(ours), finite):
        return math.inf
    if not torch.equal(ours[~finite], ref[~finite]):  # +inf where ref has +inf, never -inf or NaN
        return math.inf
    return (ours[finite] - ref[finite]).abs().max().item() if bool(finite.any()) else 0.0


# How far PyTorch's own result may sit from the float64 reference, relative to the reference's
# magnitude, before the reference itself is suspect. The rule compares ours with ref, so a mistake
# shared by ref and ours (a mask off by one, say) would pass it; PyTorch's math SDPA is independent
# of both, and its distance to ref exposes such a mistake.
_PT_SANITY = {torch.float16: 0.25, torch.bfloat16: 0.25, torch.float32: 1e-3, torch.float64: 1e-8}


def check_rule(
    name: str,
    ours: Tensor,
    pt: Tensor,
    ref: Tensor,
    *,
    factor: float = RULE_FACTOR,
    atol: float = RULE_ATOL,
    input_dtype: torch.dtype | None = None,
) -> None:
    """Assert the correctness rule for one quantity; the message carries both errors.

    ``input_dtype`` is the precision ``pt`` was computed in when its storage dtype says otherwise
    (the LSE yardstick is float32 built from scores rounded to the input dtype)."""
    err, pt_err = max_error(ours, ref), max_error(pt, ref)
    finite_ref = ref[torch.isfinite(ref)] if ref.numel() else ref
    scale = max(1.0, finite_ref.abs().max().item()) if finite_ref.numel() else 1.0
    sanity = _PT_SANITY.get(input_dtype or pt.dtype, 0.25) * scale
    if not pt_err <= sanity:
        raise AssertionError(
            f"{name}: the reference disagrees with PyTorch's math SDPA by {pt_err:.3e} (> {sanity:.1e}): "
            f"the test's reference or its mask convention is wrong"
        )
    bound = factor * pt_err + atol
    if not err <= bound:
        raise AssertionError(
            f"{name}: max|ours - ref| = {err:.3e} > {factor:g} * max|pt - ref| ({pt_err:.3e}) + {atol:g} = {bound:.3e}"
        )


def check_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    dout: Tensor | None,
    out: Tensor,
    grads: Sequence[Tensor] | None = None,
    lse: Tensor | None = None,
    *,
    scale: float,
    causal_mode: int | MaskSpec,
    reduced_precision: bool = True,
) -> None:
    """The rule for one attention call's results (out, and lse and dq, dk, dv when given) against
    the float64 textbook, PyTorch's math SDPA in the input dtype being the yardstick.

    ``reduced_precision``: the math SDPA keeps fp16/bf16 arithmetic (the kernels round P to 16
    bits for the P @ V product, as FlashAttention does); False upcasts to float32, the bar for
    code that accumulates in float32 throughout (reference.py).
    """
    names = ("dq", "dk", "dv")
    assert out.shape == (*q.shape[:-1], v.shape[-1]) and out.dtype == q.dtype, (out.shape, out.dtype)
    if dout is not None and grads is not None:
        ref_out, ref_lse, ref_grads = textbook_with_grads(q, k, v, dout, scale=scale, causal_mode=causal_mode)
    else:
        ref_out, ref_lse = textbook_attention(q, k, v, scale=scale, causal_mode=causal_mode)
    leaves = [t.detach().requires_grad_(grads is not None) for t in (q, k, v)]
    pt_out = torch_math_attention(*leaves, scale=scale, causal_mode=causal_mode, reduced_precision=reduced_precision)
    check_rule("out", out, pt_out, ref_out)
    if lse is not None:
        assert lse.shape == q.shape[:-1] and lse.dtype == torch.float32, (lse.shape, lse.dtype)
        # The yardstick is the same math SDPA as for the output: with reduced_precision its
        # q @ k^T product is rounded to q.dtype, otherwise it stays float32; the log-sum-exp itself
        # is float32 either way, as a softmax kernel accumulates it.
        acc = torch.float64 if q.dtype == torch.float64 else torch.float32
        score_dtype = q.dtype if reduced_precision else None
        pt_lse = textbook_attention(
            q.detach(), k.detach(), v.detach(), scale=scale, causal_mode=causal_mode, dtype=acc, score_dtype=score_dtype
        )[1]
        check_rule("lse", lse, pt_lse, ref_lse, input_dtype=score_dtype)
    if grads is not None:
        assert dout is not None
        pt_grads = grads_or_zeros(pt_out, leaves, dout)
        flash: list[Tensor] | None = None
        for name, ours, pt, ref, inp in zip(names, grads, pt_grads, ref_grads, (q, k, v)):
            assert ours.shape == inp.shape and ours.dtype == inp.dtype, (name, ours.shape, ours.dtype)
            assert_all_finite(name, ours)
            try:
                check_rule(name, ours, pt, ref)
            except AssertionError as miss:
                # The rule's second clause: where PyTorch's own flash kernel misses the first on the
                # same inputs too (GQA dq; a single key, where dS = P (dP - delta) is rounding noise
                # of two float32 dot products), ours must be within 1.1x its error.
                flash = flash if flash is not None else torch_flash_grads(q, k, v, dout, scale=scale, causal_mode=causal_mode)
                if not flash:
                    raise
                flash_err = max_error(flash[names.index(name)], ref)
                if not math.isfinite(flash_err):  # a yardstick that is off the map measures nothing
                    raise
                if not max_error(ours, ref) <= 1.1 * flash_err:
                    raise AssertionError(f"{miss}; and over 1.1 x PyTorch flash's {flash_err:.3e}") from None


def assert_all_finite(name: str, t: Tensor) -> None:
    bad = ~torch.isfinite(t)
    if bool(bad.any()):
        raise AssertionError(
            f"{name}: {int(bad.sum())} non-finite entries, first at {tuple(bad.nonzero()[0].tolist())}"
        )


# Every head-dim bucket the generator can compile (cuda/generate_instantiations.py), smallest first.
ALL_BUCKETS: tuple[int, ...] = (32, 64, 96, 128, 192, 256, 512)
_FLAG = {torch.float16: "fp16", torch.bfloat16: "bf16"}


def missing_kernel(dtype: torch.dtype, head_dim: int, head_dim_v: int | None = None) -> tuple[str, str] | None:
    """(bucket, reason) when this build of flashsdpa._C lacks the dtype or the head-dim bucket of
    these head dims: ``bucket`` names it as the build knobs do ("dtype bf16", "head-dim bucket 96")."""
    from flashsdpa import selection

    dims = (head_dim, head_dim if head_dim_v is None else head_dim_v)
    reason = selection.dtype_reason(dtype)
    if reason is not None:
        return f"dtype {_FLAG.get(dtype, dtype)}", reason
    reason = selection.head_dims_reason(*dims)
    if reason is not None:
        bucket = next((b for b in ALL_BUCKETS if b >= max(dims)), None)
        return (f"head-dim bucket {bucket}" if bucket else f"head dims {dims}"), reason
    return None


def kernel_required(dtype: torch.dtype, head_dim: int, head_dim_v: int | None = None) -> bool:
    """Whether the test run asked for this dtype and head-dim bucket, so that its absence is a
    failure, not a skip: FLASHSDPA_REQUIRE_KERNELS=all (scripts/gpu_check.sh on a full build), or
    the build's own request (_build_request.json) names both (a build that lacks what it was asked
    for is broken, whatever the tests would otherwise skip)."""
    import os

    from flashsdpa import buildcheck

    if os.environ.get("FLASHSDPA_REQUIRE_KERNELS", "") == "all":
        return True
    request = buildcheck.load_request()
    if request is None:
        return False
    want = buildcheck.expected_build(request)
    bucket = next((b for b in ALL_BUCKETS if b >= max(head_dim, head_dim_v or head_dim)), None)
    # A wide bucket (above 256: the sm90 forward's 512) does not stand in for a narrower one.
    asked = [d for d in want["head_dims"] if bucket is None or (d <= 256) == (bucket <= 256)]
    return str(dtype).removeprefix("torch.") in want["dtypes"] and any(d >= (bucket or 0) for d in asked)


def skip_unless_compiled(dtype: torch.dtype, head_dim: int, head_dim_v: int | None = None) -> None:
    """Skip when this build of flashsdpa._C lacks the dtype or head dims: development builds
    narrow them (FLASHSDPA_DTYPES, FLASHSDPA_HEAD_DIMS). The reason names the missing bucket; where
    the run asked for it (kernel_required) the test fails instead."""
    import pytest

    missing = missing_kernel(dtype, head_dim, head_dim_v)
    if missing is None:
        return
    bucket, reason = missing
    if kernel_required(dtype, head_dim, head_dim_v):
        pytest.fail(f"{bucket} missing from this build, which was asked for it: {reason}")
    pytest.skip(f"narrowed build lacks {bucket}: {reason}")


def skip_unless_family_bucket(family: str, head_dim: int, direction: str = "forward") -> None:
    """Skip where this build's ``family`` lacks the head-dim bucket of ``head_dim`` in ``direction``
    (a narrowed build: a wider bucket or the other family then serves the call), for tests that
    assert which family, kernel or schedule runs; fail instead where the run asked for the bucket
    (kernel_required). A family missing from the table altogether is the test's own case."""
    import pytest

    import flashsdpa

    bucket = next(b for b in ALL_BUCKETS if b >= head_dim)
    table = {f["family"]: f for f in flashsdpa.capabilities()}
    if family not in table or bucket in table[family]["head_dims_by_direction"].get(direction, ()):
        return
    if kernel_required(torch.bfloat16, head_dim):
        pytest.fail(f"the {family} family's {direction} head-dim bucket {bucket} missing from this build")
    pytest.skip(f"narrowed build: the {family} family lacks its {direction} head-dim bucket {bucket}")


@contextlib.contextmanager
def fresh_compile() -> Iterator[None]:
    """torch.compile with no graph from earlier tests and no on-disk caches: the cache keys do not
    include SDPA's backend choice (pytorch#185449), so a cached graph could hide which kernel runs."""
    import torch._dynamo
    import torch._inductor.config as inductor_config

    torch._dynamo.reset()
    no_cache = (
        inductor_config.patch(force_disable_caches=True)
        if hasattr(inductor_config, "force_disable_caches")
        else contextlib.nullcontext()
    )
    try:
        with no_cache:
            yield
    finally:
        torch._dynamo.reset()


def gpu_skip_reason() -> str | None:
    """Why the GPU suite cannot run here (None: it can): a CUDA GPU our kernels can run on.

    A GPU with a build of flashsdpa._C that has no CUDA kernels (or no _C at all) is not a reason
    to skip: the GPU suite then runs and fails (conftest.py fails each GPU test with the build's
    reason), so a broken build never passes as a skipped suite (issue 10, item 3).
    """
    if not torch.cuda.is_available():
        return "no CUDA GPU (torch.cuda.is_available() is False)"
    try:
        import flashsdpa
        from flashsdpa import _backend
    except Exception as exc:  # noqa: BLE001 - a broken install must say why, not crash collection
        return f"flashsdpa does not import: {type(exc).__name__}: {exc}"
    if not flashsdpa.build_info()["with_cuda"]:
        return None
    return _backend.device_reason(torch.cuda.current_device())


def flashsdpa_entries(step: Callable[[], object]) -> dict[str, int]:
    """The flashsdpa functions ``step`` calls from outside flashsdpa (sys.setprofile), by name:
    what flashsdpa's Python costs a model, counted rather than timed."""
    import sys

    import flashsdpa

    root = flashsdpa.__file__.rsplit("/", 1)[0]
    entered: dict[str, int] = {}

    def profile(frame: Any, event: str, arg: object) -> None:
        if event == "call" and frame.f_code.co_filename.startswith(root):
            caller = frame.f_back
            if caller is None or not caller.f_code.co_filename.startswith(root):
                entered[frame.f_code.co_name] = entered.get(frame.f_code.co_name, 0) + 1

    sys.setprofile(profile)
    try:
        step()
    finally:
        sys.setprofile(None)
    return entered


def assert_unbiased(outs: Tensor, expected: Tensor, directions: int = 8) -> None:
    """outs (seeds, ...) is an unbiased sample of ``expected``, judged as the issue asks, within 4
    standard errors: for each of a few fixed random projections w of the output, mean_seeds(w . out)
    against w . expected (a bias in any direction shows in them; each is one test, so 8 of them
    fail by chance with probability 8 x 6.3e-5). Per element, as a second view: the mean |z| is
    ~0.80 for unbiased Gaussian means (bound 1.0), and the largest of n |z| stays below the
    Bonferroni bound for a 0.1% family-wise false failure (4.8 at n = 768, 5.1 at n = 8k): a flat
    4 over n elements would fail unbiased samples by chance (768 elements: 5%)."""
    seeds = outs.shape[0]
    flat, want = outs.reshape(seeds, -1).double(), expected.reshape(-1).double()
    w = torch.randn(directions, want.numel(), generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    w = w.to(flat.device)
    proj = flat @ w.T  # (seeds, directions)
    zp = (proj.mean(0) - w @ want).abs() / (proj.std(0) / math.sqrt(seeds))
    assert zp.max() < 4.0, zp.tolist()
    z = (flat.mean(0) - want).abs() / (flat.std(0) / math.sqrt(seeds))
    bound = -torch.distributions.Normal(0.0, 1.0).icdf(torch.tensor(0.001 / (2 * want.numel()))).item()
    assert z.mean() < 1.0 and z.max() < bound, (z.mean().item(), z.max().item(), bound)


ROOT = Path(__file__).resolve().parents[1]


def run_host_replay(source: str, workdir: Path) -> str:
    """Builds tests/cpp/<source> with nvcc as host code (the kernels' headers from cuda/ and
    backend/include) and runs it: a replay of device logic on the CPU, which prints "ok ..." when
    every case passed. Returns that line; asserts the build and the run."""
    exe = workdir / Path(source).stem
    build = subprocess.run(
        ["nvcc", "-std=c++17", "-O2", "--expt-relaxed-constexpr", "-arch=sm_80", "-I", str(ROOT / "backend/include"),
         "-I", str(ROOT / "cuda"), str(ROOT / "tests/cpp" / source), "-o", str(exe)],
        capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert build.returncode == 0, build.stdout + build.stderr
    run = subprocess.run([str(exe)], capture_output=True, text=True, timeout=600)
    assert run.returncode == 0 and run.stdout.startswith("ok "), run.stdout + run.stderr
    return run.stdout.strip()
