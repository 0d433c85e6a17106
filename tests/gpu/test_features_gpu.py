# test_features_gpu.py: issue 14's score modifiers on our CUDA kernels (the sm80 family): logit
# softcapping, ALiBi and attention sinks, alone and combined with causal masks, windows, GQA and
# varlen, forward and backward (dq, dk, dv and the gradients of the slopes and the sinks) through
# flashsdpa.attention / attention_varlen, against a float64 textbook with the project's rule
# (max|ours - ref| <= 2 max|pt - ref| + 1e-5, pt = the same textbook in the inputs' dtype), at
# awkward sizes (1, 7, 113, 1023, Sq != Sk), outputs poisoned with NaN. test_features_sanitizer_subset
# is what scripts/dev/features_gpu.sh runs under compute-sanitizer; test_features_route checks
# that a Hopper GPU runs their forward on sm90 and their backward on sm80 (sm90's has none yet).
from __future__ import annotations

import math
import zlib
from collections.abc import Callable
from dataclasses import dataclass

import pytest
import torch
from torch import Tensor

import flashsdpa
from flashsdpa import _backend, masks
from flashsdpa.masks import MaskSpec
from helpers import (
    RULE_ATOL,
    RULE_FACTOR,
    check_rule,
    default_scale,
    gpu_skip_reason,
    grads_or_zeros,
    max_error,
    skip_unless_compiled,
    skip_unless_family_bucket,
)

GPU_SKIP = gpu_skip_reason()
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(GPU_SKIP is not None, reason=f"GPU suite: {GPU_SKIP}")]

DEVICE = "cuda"
DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}


@dataclass(frozen=True)
class Mods:
    softcap: float = 0.0
    slopes: Tensor | None = None  # float32 (Hq,) or (B, Hq)
    sinks: Tensor | None = None  # (Hq,)


def _generator(request: pytest.FixtureRequest) -> torch.Generator:
    return torch.Generator(device=DEVICE).manual_seed(zlib.crc32(request.node.nodeid.encode()))


def _mods(spec: str, batch: int, heads: int, gen: torch.Generator) -> Mods:
    """By letters: c softcap 5 (C: 50), a ALiBi slopes (Hq,) (A: (B, Hq)), s sinks."""
    slopes = None
    if "a" in spec or "A" in spec:
        shape = (batch, heads) if "A" in spec else (heads,)
        # Geometric slopes 0.1 * 2^(-8 h / H), jittered so that heads differ per batch. At most 0.1
        # (a model's first heads go to 0.5): at 0.375 the bias reaches 40 over 113 keys, where a
        # bf16 score is off by 0.08 and the bf16 yardstick's slope gradient by 25% (check_rule's
        # sanity bound refuses such a yardstick).
        base = 0.1 * torch.exp2(-8.0 * torch.arange(heads, device=DEVICE) / heads)
        slopes = (base * (0.5 + 0.5 * torch.rand(shape, generator=gen, device=DEVICE))).float()
    return Mods(
        softcap=5.0 if "c" in spec else 50.0 if "C" in spec else 0.0,
        slopes=slopes,
        sinks=torch.randn(heads, generator=gen, device=DEVICE) * 2 if "s" in spec else None,
    )


# ---- the textbook: dense, per sequence for varlen, in any dtype, differentiable in every input ----


def textbook(
    q: Tensor, k: Tensor, v: Tensor, *, scale: float, mask: MaskSpec, softcap: float, slopes: Tensor | None,
    sinks: Tensor | None, dtype: torch.dtype,
) -> tuple[Tensor, Tensor]:
    """(B, Hq, Sq, D) attention with the modifiers written out in ``dtype``: out and lse (+inf for
    rows that see no key; the sink alone does not make a row visible)."""
    groups = q.shape[1] // k.shape[1]
    q, k, v = q.to(dtype), k.to(dtype), v.to(dtype)
    k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)
    sq, sk = q.shape[2], k.shape[2]
    s = (q @ k.transpose(-1, -2)) * scale
    if softcap:
        s = softcap * torch.tanh(s / softcap)
    if slopes is not None:
        # The bias as a PyTorch user builds it for math SDPA's attn_mask: in float32 (or float64),
        # then in the scores' dtype (distances past 256 are not even integers in bf16).
        i = torch.arange(sq, device=q.device)[:, None]
        j = torch.arange(sk, device=q.device)[None, :]
        wide = torch.float64 if dtype == torch.float64 else torch.float32
        dist = (i + sk - sq - j).abs().to(wide)
        sl = slopes.to(wide)
        s = s - ((sl[:, None, None] if sl.dim() == 1 else sl[:, :, None, None]) * dist).to(dtype)
    vis = masks.visible(mask, sq, sk, q.device)
    if vis is not None:
        s = s.masked_fill(~vis, -math.inf)
    row_max = s.amax(dim=-1, keepdim=True)
    sink = None if sinks is None else sinks.to(dtype)[:, None, None]
    top = row_max if sink is None else torch.maximum(row_max, sink)
    top = torch.where(top == -math.inf, 0.0, top).detach()
    e = torch.exp(s - top)
    key_sum = e.sum(dim=-1, keepdim=True)
    total = key_sum if sink is None else key_sum + torch.exp(sink - top)
    # Visible keys, not key_sum > 0: in fp16 a sink far above the keys underflows their exp to 0.
    seen = row_max > -math.inf
    p = torch.where(seen, e / torch.where(seen, total, 1.0), 0.0)
    lse = torch.where(seen, top + torch.log(torch.where(seen, total, 1.0)), math.inf).squeeze(-1)
    return p @ v, lse


def textbook_varlen(
    q: Tensor, k: Tensor, v: Tensor, cu_q: list[int], cu_k: list[int], *, scale: float, mask: MaskSpec,
    softcap: float, slopes: Tensor | None, sinks: Tensor | None, dtype: torch.dtype,
) -> tuple[Tensor, Tensor]:
    """Packed (total, H, D) rows, one textbook per sequence (its own lengths place masks and ALiBi)."""
    outs, lses = [], []
    for b in range(len(cu_q) - 1):
        rq, rk = slice(cu_q[b], cu_q[b + 1]), slice(cu_k[b], cu_k[b + 1])
        sl = None if slopes is None else (slopes if slopes.dim() == 1 else slopes[b])
        o, l = textbook(
            q[rq].transpose(0, 1)[None], k[rk].transpose(0, 1)[None], v[rk].transpose(0, 1)[None], scale=scale,
            mask=mask, softcap=softcap, slopes=sl, sinks=sinks, dtype=dtype,
        )  # fmt: skip
        outs.append(o[0].transpose(0, 1))
        lses.append(l[0])
    return torch.cat(outs), torch.cat(lses, dim=1)


def _results(fn, tensors: list[Tensor], mods: Mods, dout: Tensor, dtype: torch.dtype, **kw: object) -> list[Tensor]:  # type: ignore[no-untyped-def]
    """[out, lse, dq, dk, dv, (d_slopes), (d_sinks)] of ``fn`` computed in ``dtype`` from leaves;
    the modifiers' gradients come back in float32, as ours."""
    leaves = [t.detach().to(dtype).requires_grad_() for t in tensors]
    # The slopes stay float32 parameters (the bias is rounded to ``dtype``); the sinks take ``dtype``.
    extra = [
        t.detach().to(torch.float64 if dtype == torch.float64 else (torch.float32 if t is mods.slopes else dtype))
        .requires_grad_()
        for t in (mods.slopes, mods.sinks)
        if t is not None
    ]
    it = iter(extra)
    slopes = next(it) if mods.slopes is not None else None
    sinks = next(it) if mods.sinks is not None else None
    out, lse = fn(*leaves, softcap=mods.softcap, slopes=slopes, sinks=sinks, dtype=dtype, **kw)
    grads = grads_or_zeros(out, leaves + extra, dout.to(dtype))
    return [out.detach(), lse.detach().float(), *grads[:3], *(g.float() for g in grads[3:])]


def _ours(
    q: Tensor, k: Tensor, v: Tensor, dout: Tensor, mods: Mods, varlen: tuple[Tensor, Tensor, int, int] | None,
    **kw: object,
) -> list[Tensor]:
    leaves = [t.detach().requires_grad_() for t in (q, k, v)]
    extra = [t.detach().clone().requires_grad_() for t in (mods.slopes, mods.sinks) if t is not None]
    it = iter(extra)
    slopes = next(it) if mods.slopes is not None else None
    sinks = next(it) if mods.sinks is not None else None
    args = dict(softcap=mods.softcap, alibi_slopes=slopes, sinks=sinks, return_lse=True, **kw)
    if varlen is None:
        out, lse = flashsdpa.attention(*leaves, **args)
    else:
        out, lse = flashsdpa.attention_varlen(*leaves, *varlen, **args)
    grads = torch.autograd.grad(out, leaves + extra, dout)
    torch.cuda.synchronize()
    return [out.detach(), lse, *grads]


def _judge(names: list[str], ours: list[Tensor], pt: list[Tensor], ref: list[Tensor], dtype: torch.dtype) -> None:
    assert len(ours) == len(pt) == len(ref) == len(names)
    for name, o, p, r in zip(names, ours, pt, ref):
        assert o.shape == r.shape, (name, tuple(o.shape), tuple(r.shape))
        if name == "d_slopes":
            # The same bound, without check_rule's guard that the yardstick is within 25% of the
            # reference: that guard catches a wrong reference (a mask convention), and the
            # reference's convention is the one out, lse and dq..dv pass it with. The slopes'
            # gradient sums dS * distance over a whole head, whose dS rows sum to 0 in exact
            # arithmetic; in the input dtype they do not, so where distances are large and nearly
            # equal along a row (Sq = 113 keys against Sk = 7: ~100), the yardstick's sum is off by
            # several times the value itself (bf16: 21.8 against 3.8) while ours, summed in float32,
            # is not. That is the yardstick failing, not the reference.
            err, pt_err = max_error(o, r), max_error(p, r)
            bound = RULE_FACTOR * pt_err + RULE_ATOL
            assert err <= bound, f"d_slopes: max|ours - ref| = {err:.3e} > {RULE_FACTOR:g} * {pt_err:.3e} + {RULE_ATOL:g}"
            continue
        check_rule(name, o, p, r, input_dtype=dtype)


def _names(mods: Mods) -> list[str]:
    return ["out", "lse", "dq", "dk", "dv"] + (["d_slopes"] if mods.slopes is not None else []) + (
        ["d_sinks"] if mods.sinks is not None else []
    )


def _launch_mods(mods: Mods) -> _backend.Mods:
    return (mods.softcap, *(None if t is None else t.float().contiguous() for t in (mods.slopes, mods.sinks)))  # type: ignore[return-value]


def _poisoned(q: Tensor, k: Tensor, v: Tensor, dout: Tensor, ours: list[Tensor], scale: float, mask: MaskSpec,
              mods: Mods) -> list[Tensor]:  # fmt: skip
    """The same launches into NaN-filled outputs. The forward is deterministic, so bitwise equal or
    an element was missed; the backward's dQ and the modifiers' gradients are float atomics, so its
    results are returned for the rule (the modifiers' gradient buffers are zeroed by contract)."""
    out, lse = ours[0], ours[1]
    q, k, v = q.detach(), k.detach(), v.detach()
    out_p, lse_p = torch.full_like(out, math.nan), torch.full_like(lse, math.nan)
    _backend.launch_fwd(q, k, v, out_p, lse_p, scale, mask, None, mods=_launch_mods(mods))
    torch.cuda.synchronize()
    assert torch.equal(out_p, out), "forward left output elements unwritten (NaN) or is not deterministic"
    assert torch.equal(lse_p, lse), "forward left LSE rows unwritten (NaN)"
    dq, dk, dv = (torch.full_like(t, math.nan) for t in (q, k, v))
    d_slopes = None if mods.slopes is None else torch.zeros_like(mods.slopes, dtype=torch.float32)
    d_sinks = None if mods.sinks is None else torch.zeros_like(mods.sinks, dtype=torch.float32)
    _backend.launch_bwd(dout, q, k, v, out, lse, dq, dk, dv, scale, mask, None, _launch_mods(mods), (d_slopes, d_sinks))
    torch.cuda.synchronize()
    return [out_p, lse_p, dq, dk, dv, *(t for t in (d_slopes, d_sinks) if t is not None)]


def _mask_kwargs(mask: MaskSpec) -> dict[str, object]:
    """The direct API's spelling of a MaskSpec: a window (causal is (-1, 0)) and its alignment."""
    left, right, align = mask
    return {"window": (left, right), "causal_alignment": "bottom_right" if align == masks.BOTTOM_RIGHT else "top_left"}


def run_dense(
    request: pytest.FixtureRequest, spec: str, mask: MaskSpec, groups: int, sq: int, sk: int, dtype: torch.dtype,
    head_dim: int = 128, batch: int = 2, heads_kv: int = 2,
) -> None:
    skip_unless_compiled(dtype, head_dim)
    gen = _generator(request)
    heads = heads_kv * groups
    q = torch.randn(batch, heads, sq, head_dim, generator=gen, device=DEVICE).to(dtype)
    k = torch.randn(batch, heads_kv, sk, head_dim, generator=gen, device=DEVICE).to(dtype)
    v = torch.randn(batch, heads_kv, sk, head_dim, generator=gen, device=DEVICE).to(dtype)
    dout = torch.randn(batch, heads, sq, head_dim, generator=gen, device=DEVICE).to(dtype)
    mods = _mods(spec, batch, heads, gen)
    scale = default_scale(head_dim)
    ours = _ours(q, k, v, dout, mods, None, **_mask_kwargs(mask), scale=scale)
    tk = {"scale": scale, "mask": mask}
    ref = _results(textbook, [q, k, v], mods, dout, torch.float64, **tk)
    pt = _results(textbook, [q, k, v], mods, dout, dtype, **tk)
    _judge(_names(mods), ours, pt, ref, dtype)
    _judge(_names(mods), _poisoned(q, k, v, dout, ours, scale, mask, mods), pt, ref, dtype)


# (modifiers, mask, GQA group): each alone, then combined with causal masks, windows and GQA.
_CASES = [
    ("c", masks.NO_MASK, 1),
    ("C", masks.CAUSAL_TOP_LEFT, 1),
    ("a", masks.NO_MASK, 1),
    ("A", masks.CAUSAL_BOTTOM_RIGHT, 2),
    ("s", masks.NO_MASK, 1),
    ("s", masks.CAUSAL_TOP_LEFT, 4),
    ("cas", masks.CAUSAL_BOTTOM_RIGHT, 2),
    ("cAs", (64, 0, masks.BOTTOM_RIGHT), 4),
    ("as", (31, 17, masks.TOP_LEFT), 2),
    ("cs", (100, -1, masks.TOP_LEFT), 1),
]
_SIZES = [(1, 1), (7, 113), (113, 7), (1, 1023), (1023, 1023), (113, 1023)]


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("sq,sk", _SIZES, ids=[f"{a}x{b}" for a, b in _SIZES])
@pytest.mark.parametrize("spec,mask,groups", _CASES, ids=[f"{c[0]}-{c[1][0]}.{c[1][1]}.{c[1][2]}-g{c[2]}" for c in _CASES])
def test_features_dense(request: pytest.FixtureRequest, spec: str, mask: MaskSpec, groups: int, sq: int, sk: int,
                        dtype: str) -> None:  # fmt: skip
    run_dense(request, spec, mask, groups, sq, sk, DTYPES[dtype])


@pytest.mark.parametrize("head_dim", [64, 256])  # the other tile shapes of both directions
def test_features_head_dims(request: pytest.FixtureRequest, head_dim: int) -> None:
    run_dense(request, "cas", masks.CAUSAL_BOTTOM_RIGHT, 2, 113, 300, torch.bfloat16, head_dim=head_dim)


@pytest.mark.parametrize("scale", [-0.3, 0.0])
def test_features_scale_sign(request: pytest.FixtureRequest, scale: float) -> None:
    """A negative scale (the forward negates q) and a zero one (q loaded as zeros), with softcap
    (ALiBi at scale 0 needs softcap: checks.cpp refuses it without)."""
    skip_unless_compiled(torch.bfloat16, 128)
    gen = _generator(request)
    q, k, v, dout = (torch.randn(1, 2, n, 128, generator=gen, device=DEVICE).bfloat16() for n in (37, 90, 90, 37))
    mods = _mods("cas", 1, 2, gen)
    ours = _ours(q, k, v, dout, mods, None, scale=scale, causal=True, causal_alignment="bottom_right")
    tk = {"scale": scale, "mask": masks.CAUSAL_BOTTOM_RIGHT}
    _judge(_names(mods), ours, _results(textbook, [q, k, v], mods, dout, torch.bfloat16, **tk),
           _results(textbook, [q, k, v], mods, dout, torch.float64, **tk), torch.bfloat16)  # fmt: skip


def test_zero_scale_alibi_without_softcap_is_refused() -> None:
    skip_unless_compiled(torch.bfloat16, 128)
    q = torch.randn(1, 2, 8, 128, device=DEVICE, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="scale=0 with alibi_slopes"):
        flashsdpa.attention(q, q, q, scale=0.0, alibi_slopes=torch.ones(2, device=DEVICE))


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("spec,mask,groups", [
    ("cas", masks.CAUSAL_BOTTOM_RIGHT, 2), ("As", (40, 0, masks.TOP_LEFT), 1), ("c", masks.NO_MASK, 4),
])  # fmt: skip
def test_features_varlen(request: pytest.FixtureRequest, spec: str, mask: MaskSpec, groups: int, dtype: str) -> None:
    torch_dtype = DTYPES[dtype]
    skip_unless_compiled(torch_dtype, 128)
    gen = _generator(request)
    lens_q, lens_k = [1, 7, 113, 300], [113, 7, 1, 1023]  # Sq != Sk both ways, and a 1-key sequence
    cu_q = [0, *torch.tensor(lens_q).cumsum(0).tolist()]
    cu_k = [0, *torch.tensor(lens_k).cumsum(0).tolist()]
    heads_kv = 2
    heads = heads_kv * groups
    q = torch.randn(cu_q[-1], heads, 128, generator=gen, device=DEVICE).to(torch_dtype)
    k = torch.randn(cu_k[-1], heads_kv, 128, generator=gen, device=DEVICE).to(torch_dtype)
    v = torch.randn(cu_k[-1], heads_kv, 128, generator=gen, device=DEVICE).to(torch_dtype)
    dout = torch.randn(cu_q[-1], heads, 128, generator=gen, device=DEVICE).to(torch_dtype)
    mods = _mods(spec, len(lens_q), heads, gen)
    scale = default_scale(128)
    kw = {**_mask_kwargs(mask), "scale": scale}
    varlen = (torch.tensor(cu_q, dtype=torch.int32, device=DEVICE), torch.tensor(cu_k, dtype=torch.int32, device=DEVICE),
              max(lens_q), max(lens_k))  # fmt: skip
    ours = _ours(q, k, v, dout, mods, varlen, **kw)
    tk = {"cu_q": cu_q, "cu_k": cu_k, "scale": scale, "mask": mask}

    def fn(q: Tensor, k: Tensor, v: Tensor, **a: object) -> tuple[Tensor, Tensor]:
        return textbook_varlen(q, k, v, **tk, **a)  # type: ignore[arg-type]

    _judge(_names(mods), ours, _results(fn, [q, k, v], mods, dout, torch_dtype),
           _results(fn, [q, k, v], mods, dout, torch.float64), torch_dtype)  # fmt: skip


def test_sink_only_rows_stay_empty(request: pytest.FixtureRequest) -> None:
    """A window that leaves some rows without keys: they give 0 and LSE +inf with sinks too, and
    add nothing to the sinks' gradient."""
    run_dense(request, "s", masks.CAUSAL_BOTTOM_RIGHT, 1, 64, 16, torch.bfloat16)  # rows 0..47 see no key


def test_features_route(request: pytest.FixtureRequest) -> None:
    """The capability table: both families serve the modifiers and dropout in both directions
    (sm90's backward only at its head dims, 64 and 128), so a Hopper GPU runs them on sm90; under
    deterministic mode the slopes' and sinks' gradients (float atomic sums) are served by no
    family, softcap's and dropout's backward by sm90."""
    skip_unless_compiled(torch.bfloat16, 128)
    skip_unless_family_bucket("sm90", 128, "forward")
    skip_unless_family_bucket("sm90", 128, "backward")
    table = {f["family"]: f for f in flashsdpa.capabilities()}
    both = {"softcap", "alibi", "sinks", "bias", "dropout"}
    assert set(table["sm80"]["features"]) == both
    assert all(set(v) == both for v in table["sm80"]["features_by_direction"].values())
    hopper = "sm90" in table and torch.cuda.get_device_capability() == (9, 0)
    if "sm90" in table:
        assert {k: set(v) for k, v in table["sm90"]["features_by_direction"].items()} == {"forward": both,
                                                                                          "backward": both}
    code = _backend.DTYPE_CODES[torch.bfloat16]
    for backward in (False, True):
        for bits in (1, 2, 4, 7, 8):
            family, *_ = _backend.select(torch.cuda.current_device(), code, 128, 128, 0, False, backward, bits)
            assert family == ("sm90" if hopper else "sm80"), (backward, bits, family)
    for bits in (1, 2, 4, 7, 8, 16):  # deterministic backward (2); the bias's gradient is plain stores
        family, *_ = _backend.select(torch.cuda.current_device(), code, 128, 128, 0, False, 2, bits)
        assert family == ("sm90" if hopper and bits in (1, 8, 16) else None), (bits, family)
    # Dropout (bit 16) alone: sm90 on Hopper in both directions (its kDropout backward), sm80 elsewhere.
    for backward in (False, True):
        family, *_ = _backend.select(torch.cuda.current_device(), code, 128, 128, 0, False, backward, 16)
        assert family == ("sm90" if hopper else "sm80"), (backward, family)


def test_features_deterministic(request: pytest.FixtureRequest, deterministic: Callable[[bool], None]) -> None:
    """Under torch.use_deterministic_algorithms(True): softcap's backward (no gradient of its own)
    runs where a family of ours orders its dQ adds (sm90) and is bitwise reproducible, on a GQA
    shape with many key and query blocks; the slopes' and sinks' gradients are float atomic sums
    in every family, so a backward with ALiBi or sinks raises as PyTorch's nondeterministic ops do."""
    skip_unless_compiled(torch.bfloat16, 128)
    code = _backend.DTYPE_CODES[torch.bfloat16]
    kind = masks.kind(masks.CAUSAL_TOP_LEFT)
    served = _backend.select(0, code, 128, 128, kind, False, _backend.BACKWARD_DETERMINISTIC, 1)[0] is not None
    gen = _generator(request)
    q = torch.randn(2, 8, 700, 128, generator=gen, device=DEVICE).to(torch.bfloat16).requires_grad_()
    k = torch.randn(2, 2, 900, 128, generator=gen, device=DEVICE).to(torch.bfloat16).requires_grad_()
    v = torch.randn(2, 2, 900, 128, generator=gen, device=DEVICE).to(torch.bfloat16).requires_grad_()
    dout = torch.randn(2, 8, 700, 128, generator=gen, device=DEVICE).to(torch.bfloat16)
    slopes = torch.full((8,), 0.05, device=DEVICE, requires_grad=True)
    deterministic(False)  # not warn_only: a nondeterministic path raises
    if served:
        grads = []
        for _ in range(8):
            out = flashsdpa.attention(q, k, v, causal=True, softcap=30.0)
            grads.append(torch.autograd.grad(out, (q, k, v), dout))
        for run in grads[1:]:
            for name, first, now in zip(("dq", "dk", "dv"), grads[0], run):
                assert torch.equal(first, now), f"softcap {name} differs between deterministic runs"
    with pytest.raises(RuntimeError, match="use_deterministic_algorithms"):
        out = flashsdpa.attention(q, k, v, causal=True, alibi_slopes=slopes)
        torch.autograd.grad(out, (q, k, v, slopes), dout)


_SANITIZER = [("cas", masks.CAUSAL_BOTTOM_RIGHT, 2, 7, 113), ("cAs", (31, 17, masks.TOP_LEFT), 1, 113, 7)]


@pytest.mark.parametrize("spec,mask,groups,sq,sk", _SANITIZER)
def test_features_sanitizer_subset(request: pytest.FixtureRequest, spec: str, mask: MaskSpec, groups: int, sq: int,
                                   sk: int) -> None:  # fmt: skip
    run_dense(request, spec, mask, groups, sq, sk, torch.bfloat16)
